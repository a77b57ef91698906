/* SPDX-License-Identifier: MIT */
/* What the engine's GDBus clients (the session monitor, service/monitor/engine-client.c, and
 * the HTTP bridge, service/bridge/engine-link.c) share: the engine's names, and the table of
 * their requests in flight, by object path, with the Token, Logprobs and Finished signals routed to
 * them. A signal is taken only from the bus name that answered the request's call (any peer
 * can send a signal); one that arrives before that answer is handled (the answer and the
 * signals reach a GDBus client through different queues) is kept, at most 256 of them, and
 * replayed when the answer is added. */
#pragma once

#include <gio/gio.h>

#define ENGINE_BUS_NAME "org.agentxpu.Engine"
#define ENGINE_OBJECT_PATH "/org/agentxpu/Engine"
#define ENGINE_INTERFACE "org.agentxpu.Engine"
#define ENGINE_REQUEST_INTERFACE "org.agentxpu.Engine.Request"

typedef struct EngineRequests EngineRequests;

typedef struct EngineRequestsOps {
        void (*token)(void *req, const char *text);
        /* The Logprobs signal's records, a(sayda(sayd)), of the text the next token brings
         * (NULL: not wanted) */
        void (*logprobs)(void *req, GVariant *tokens);
        /* The request is over and already out of the table. reason: the engine's ("stop",
         * "length", "cancelled", "error" with `error`), or engine_requests_lose()'s; stats:
         * the Finished signal's a{sv}, NULL when lost. */
        void (*finished)(void *req, const char *reason, const char *error, GVariant *stats);
        /* Frees a request the table still holds when it is freed (NULL: nothing to free). */
        void (*drop)(void *req);
} EngineRequestsOps;

EngineRequests *engine_requests_new(const EngineRequestsOps *ops);
/* Frees the table; the requests still in it are dropped (ops.drop), not finished: lose them
 * first if their owners must hear. */
void engine_requests_free(EngineRequests *r);

/* A GDBus signal of ENGINE_REQUEST_INTERFACE, as the subscription delivers it. */
void engine_requests_signal(EngineRequests *r, const char *sender, const char *path, const char *member,
                            GVariant *params);

/* The engine answered: `path` is req's, its signals come from `owner`. Then, once the caller
 * has said so to whoever waits for it, _replay delivers the signals kept for path (req may be
 * finished and gone on return). */
void engine_requests_add(EngineRequests *r, const char *path, const char *owner, void *req);
void engine_requests_replay(EngineRequests *r, const char *path);

/* req of path (and its owner), or NULL; _remove also takes it out of the table, without
 * callbacks. */
void *engine_requests_lookup(EngineRequests *r, const char *path, const char **ret_owner);
void *engine_requests_remove(EngineRequests *r, const char *path);

/* Every request answered by `owner` (all when NULL) will never finish: each is taken out and
 * finished with reason and error. */
void engine_requests_lose(EngineRequests *r, const char *owner, const char *reason, const char *error);
