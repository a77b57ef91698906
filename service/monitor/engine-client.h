/* SPDX-License-Identifier: MIT */
/* The monitor's side of org.agentxpu.Engine (dbus/org.agentxpu.Engine.xml): Proactive calls
 * and the Token and Finished signals of the request objects they create. Signals are taken
 * only from the bus name that answered the call, since any peer can send us a signal. */
#pragma once

#include "common.h"

#include <gio/gio.h>
#include <stdbool.h>

#include "common/engine-requests.h"

typedef struct EngineClient EngineClient;

typedef enum EngineState {
        ENGINE_CONNECTING,      /* no bus yet, or not yet known whether the engine is on it */
        ENGINE_ABSENT,          /* nobody owns the name (a call may still start it) */
        ENGINE_PRESENT,
} EngineState;

typedef struct EngineCallbacks {
        /* engine_client_state() changed. */
        void (*changed)(void *userdata);
        /* Proactive replied: `request` on success, else a message and whether trying again
         * later may help (the engine is away or busy) or not (the engine refused it). */
        void (*submitted)(void *userdata, guint64 id, const char *request, const char *error,
                          bool retry);
        void (*token)(void *userdata, guint64 id, const char *text);
        /* reason: "stop", "length", "cancelled", "error" (with `error`), or "lost" when the
         * engine left the bus before finishing. */
        void (*finished)(void *userdata, guint64 id, const char *reason, const char *error);
} EngineCallbacks;

/* `address` is a bus address, or NULL for the system bus. Connects in the background and
 * keeps reconnecting; never fails. */
EngineClient *engine_client_new(const char *address, const EngineCallbacks *cb, void *userdata);
void engine_client_free(EngineClient *c);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(EngineClient, engine_client_free)

EngineState engine_client_state(EngineClient *c);
/* Calls Proactive; the answer comes through the callbacks, never from inside this call. */
void engine_client_submit(EngineClient *c, guint64 id, const char *prompt, GVariant *options);
/* Asks the engine to stop a request, and forgets it: no callback comes for it any more. */
void engine_client_cancel(EngineClient *c, const char *request);
