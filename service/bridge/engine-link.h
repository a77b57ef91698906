/* SPDX-License-Identifier: MIT */
/* The bridge's side of org.agentxpu.Engine (dbus/org.agentxpu.Engine.xml): one bus connection
 * as the user who runs the bridge, Reactive and Proactive calls, and the Token and Finished
 * signals of the request objects they create. Signals are taken only from the bus name that
 * answered the call, since any peer can send us a signal. */
#pragma once

#include <gio/gio.h>
#include <stdbool.h>

#include "common/engine-requests.h"

typedef struct EngineLink EngineLink;
typedef struct EngineJob EngineJob;

typedef struct EngineStats {
        guint prompt_tokens, prefill_tokens, generated_tokens;
        gboolean prompt_cut;    /* fill in the middle fitted, or an embedding cut: text was left out */
        double ttft_s, latency_s;
        /* with tools: "tool_calls" and the call ({"name", "arguments"} as JSON) when the
         * answer is one; NULL otherwise. Valid during the callback. */
        const char *finish_reason, *tool_call;
        const char *stop_word;  /* the stop string that ended the answer; NULL: none */
} EngineStats;

typedef struct EngineJobCallbacks {
        /* The engine answered the call. On error, `error_name` is the D-Bus error (or NULL
         * when the bus itself failed) and `message` says why; the job is over and freed. */
        void (*started)(void *userdata, const char *error_name, const char *message);
        /* A piece of text, whole UTF-8 characters. */
        void (*token)(void *userdata, const char *text);
        /* With option logprobs: the records (a(sayda(sayd))) of the tokens whose text the next
         * token callback brings. */
        void (*logprobs)(void *userdata, GVariant *tokens);
        /* The last callback: `reason` is stop, length, cancelled or error (with `error`).
         * The job is freed after it returns. */
        void (*finished)(void *userdata, const char *reason, const char *error,
                         const EngineStats *stats);
} EngineJobCallbacks;

/* The engine's MaxTokens property (the most max_tokens a request may ask for), read before the
 * first engine_link_get_model of each engine that comes on the bus; 0: not known. */
guint engine_link_max_tokens(EngineLink *l);

/* `address` NULL: the system bus. Connects on first use. */
EngineLink *engine_link_new(const char *address);
void engine_link_free(EngineLink *l);

/* Submits `prompt` with `options` (a{sv}, floating or not; consumed) as Reactive or
 * Proactive. The callbacks run from the main loop, never from inside this call. */
EngineJob *engine_link_submit(EngineLink *l, bool proactive, const char *prompt, GVariant *options,
                              const EngineJobCallbacks *cb, void *userdata);
/* Cancel it in the engine at once (or as soon as the engine names it) and call nothing more. */
void engine_job_cancel(EngineJob *j);
/* Ask the engine to stop it: it finishes as "cancelled" (or as it was finishing anyway), its
 * text so far and its stats told as ever. */
void engine_job_stop(EngineJob *j);

/* The engine's model: its ModelInfo property (a{sv}, empty when no model is loaded):
 * `cb(userdata, model, info, error_name, message)`, model being its "name" ("" without), both
 * NULL on failure; info is the callback's to read, not to keep. The engine's MaxTokens is read
 * first (above). */
typedef void (*EngineModelCallback)(void *userdata, const char *model, GVariant *info,
                                    const char *error_name, const char *message);
void engine_link_get_model(EngineLink *l, EngineModelCallback cb, void *userdata);

/* Embed: `cb(userdata, embedding, stats, error_name, message)`, embedding the reply's `ad`
 * (the callback's to read, not to keep) and NULL on failure. `options` (a{sv}, floating or
 * not; consumed) are Embed's. No time limit but the bus's connection: a proactive embedding
 * may wait long behind other work. */
typedef void (*EngineEmbedCallback)(void *userdata, GVariant *embedding, const EngineStats *stats,
                                    const char *error_name, const char *message);
void engine_link_embed(EngineLink *l, const char *text, GVariant *options, EngineEmbedCallback cb,
                       void *userdata);

/* OpenFlow: `cb(userdata, path, error_name, message)` with path NULL on failure. */
typedef void (*EngineFlowCallback)(void *userdata, const char *path, const char *error_name,
                                   const char *message);
void engine_link_open_flow(EngineLink *l, EngineFlowCallback cb, void *userdata);
/* CloseFlow, answered by nobody (a flow the engine no longer has is gone already). */
void engine_link_close_flow(EngineLink *l, const char *path);
/* Changes whenever the engine left the bus or the connection was lost: flows opened before
 * are gone. */
guint engine_link_generation(EngineLink *l);
