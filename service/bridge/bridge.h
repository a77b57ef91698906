/* SPDX-License-Identifier: MIT */
/* agentxpu-http, the per-user HTTP bridge: OpenAI- and Ollama-style endpoints whose every
 * request goes to the engine on the bus as the user who runs the bridge.
 *
 *   main.c         options, the token, where it listens (Unix socket, loopback TCP, sockets
 *                  from systemd), the main loop
 *   http.c         what both APIs share: routing, the token check, JSON fields, error
 *                  answers, and a Call, one generation request from its HTTP message to
 *                  the engine and back (streamed or whole; cancelled when its client leaves)
 *   openai.c       /v1/chat/completions, /v1/completions, /v1/models
 *   ollama.c       /api/chat, /api/generate, /api/tags, /api/ps, /api/version
 *   llamacpp.c     llama-server's /infill (code editors' fill in the middle)
 *   embeddings.c   /v1/embeddings, /api/embed, /api/embeddings
 *   conversations.c  the flows kept open for conversations that may come back, so that a
 *                  conversation's next turn prefills only what is new
 *   engine-link.c  the engine on the bus (GDBus)
 *   think.c        a thinking model's thinking apart from its answer (think.h) */
#pragma once

#include <json-glib/json-glib.h>
#include <libsoup/soup.h>
#include <stdbool.h>

#include "engine-link.h"
#include "think.h"

typedef struct Bridge {
        SoupServer *server;
        EngineLink *link;
        char *token;            /* what TCP clients must send as "Authorization: Bearer" */
        gsize max_body;         /* bytes of a request body, larger ones get 413 */
        guint64 next_id;
        /* conversations.c: idle flows, the most recently used first, and how many flows the
         * bridge holds (idle or with a turn in flight), at most max_flows */
        GQueue conversations;
        guint flows, max_flows;
} Bridge;

/* A message of a conversation, as the engine's option `messages` takes it. */
typedef struct Turn {
        char *role, *content;
} Turn;

/* An array of Turn that frees its strings. */
GArray *turns_new(void);

typedef enum Api {
        API_OPENAI,
        API_OLLAMA,
} Api;

/* Why a request is refused: the HTTP status, and for OpenAI's error object its type and
 * code (NULL: null). */
typedef struct Fail {
        guint status;
        const char *type, *code;
        char *message;
} Fail;

void fail_clear(Fail *f);
G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC(Fail, fail_clear)
/* Fills `f` (once) and returns false. */
bool fail_set(Fail *f, guint status, const char *type, const char *code, const char *fmt, ...)
        G_GNUC_PRINTF(5, 6);
bool fail_bad(Fail *f, const char *fmt, ...) G_GNUC_PRINTF(2, 3);
/* A D-Bus error of the engine (or of the bus: error_name NULL or a freedesktop error). */
void fail_from_engine(Fail *f, const char *error_name, const char *message);
/* A request answered from the engine's model (engine_link_get_model), paused meanwhile:
 * `want` the model the client named, which must be the engine's (the same name, or with
 * Ollama's ":latest" tag; else 404 in the API's words, 503 with no model), or NULL for a
 * listing, which any model or none answers. `answer` writes the reply: `want` as the client
 * named it, `model` the engine's ("" where none is loaded), `info` its ModelInfo, and `arg`,
 * what it needs of the request; errors are answered here. */
typedef void (*ModelAnswer)(SoupServerMessage *msg, const char *want, const char *model, GVariant *info,
                            int arg);
void model_query(Bridge *b, SoupServerMessage *msg, Api api, const char *want, ModelAnswer answer,
                 int arg);
/* Whether the engine's answer to "which model" (engine_link_get_model: model, or NULL with the
 * error) serves the client's `want`; fills `f` otherwise (404 in the API's words, 503 with no
 * model). */
bool model_check(Api api, const char *want, const char *model, const char *error_name, const char *message,
                 Fail *f);

/* Answers `msg` with the error as the API's clients expect it, and logs one line. */
void respond_error(SoupServerMessage *msg, Api api, const Fail *f);
/* Answers with this JSON (taken). */
void respond_json(SoupServerMessage *msg, guint status, JsonNode *node);
char *node_to_json(JsonNode *node, gsize *ret_len);
char *timestamp_rfc3339(void);

/* Typed fields of a request body. Each returns false (and fills `f`) when the field is there
 * with another type; an absent field or a JSON null leaves *ret untouched. */
bool field_string(JsonObject *o, const char *key, const char **ret, Fail *f);
bool field_bool(JsonObject *o, const char *key, bool *ret, bool *ret_set, Fail *f);
bool field_number(JsonObject *o, const char *key, double *ret, bool *ret_set, Fail *f);
bool field_int(JsonObject *o, const char *key, gint64 *ret, bool *ret_set, Fail *f);
bool field_array(JsonObject *o, const char *key, JsonArray **ret, Fail *f);
bool field_object(JsonObject *o, const char *key, JsonObject **ret, Fail *f);
/* "stop": a string or an array of strings, added to `opts` as `as`. */
bool field_stop(JsonObject *o, const char *key, GVariantBuilder *opts, Fail *f);
/* The sampling fields Ollama's options and llama-server's requests name alike (temperature,
 * top_k, top_p, min_p, seed, stop, the penalties) into the engine's options */
bool sampler_fields(JsonObject *o, GVariantBuilder *opts, Fail *f);

/* The body as a JSON object; 413 when over the cap, 400 when not an object. */
JsonObject *body_object(Bridge *b, SoupServerMessage *msg, JsonParser **ret_parser, Fail *f);

/* A message's text content: a string, or (OpenAI) an array of text parts. */
bool message_content(JsonObject *m, bool parts_allowed, const char **ret, GString *buf, Fail *f);
/* Chat messages into the earlier turns (system, user and assistant, in order) and the prompt,
 * the last message, which must be the user's, or a tool's result (then it stays in the turns
 * and the prompt is empty). An assistant's tool_calls become tool_call turns, tool (and
 * function) messages tool turns. */
bool messages_to_turns(JsonArray *msgs, bool openai, GArray *turns, char **ret_prompt, Fail *f);
/* Do the turns hold earlier tool calls (turns of the role tool_call, {"name", "arguments"}) or
 * results (tool)? The engine writes them in the template's own form, with the request's tools
 * or, without, as the template does with none (the answer then text); on a flow's first turn
 * only, so such a request does not go on a cached conversation. */
bool turns_hold_tools(GArray *turns);
/* Structured output: a JSON Schema (an object, or true) as the engine's option json_schema. */
bool schema_option(JsonNode *schema, const char *what, GVariantBuilder *opts, Fail *f);
/* tools (OpenAI's and Ollama's function list) as the engine's option tools; `only`: keep that
 * function alone (400 when there is none of that name); `choice`: the engine's tool_choice
 * (auto, required, none; NULL: its default, auto). */
bool tools_option(JsonArray *tools, const char *only, const char *choice, GVariantBuilder *opts, Fail *f);
/* The engine's call, {"name": ..., "arguments": {...}}: its name and arguments; false if it
 * is not one. */
bool tool_call_read(const char *call, char **ret_name, JsonNode **ret_arguments);

/* Priority from the header X-Agentxpu-Priority and the body's "priority" (and OpenAI's
 * "service_tier"). */
bool parse_priority(SoupServerMessage *msg, JsonObject *o, bool *ret_proactive, Fail *f);

typedef struct Call Call;

/* One of a call's answers (OpenAI's choices; Ollama's one answer): an engine request of its
 * own. */
typedef struct Choice {
        Call *call;
        guint index;
        EngineJob *job;
        GString *text;          /* the answer so far, as the model writes it */
        /* with the thinking apart (Call.think): the answer's thinking and the rest of it so far
         * (what the split decided; text holds it all); NULL otherwise */
        GString *thinking, *content;
        ThinkSplit split;
        gsize sent_thinking, sent_content;      /* streamed: what of them is written */
        bool held;              /* streamed with tools: text is held back, maybe a call */
        bool stopping;          /* enough of it (CallOps.enough): the engine was asked to stop */
        char *reason;           /* once it finished: stop or length; NULL before */
        /* with logprobs: each generated token's record, (sayda(sayd)) (the engine's option
         * logprobs); the first logprobs_sent of them are written (streamed) */
        GPtrArray *logprobs;
        guint logprobs_sent;
        EngineStats st;         /* when done; its finish_reason, tool_call and stop_word are the
                                 * choice's own */
} Choice;

typedef struct CallOps {
        Api api;
        const char *stream_type;        /* Content-Type of a streamed answer */
        /* streamed: the answer's headers are out */
        void (*begin)(Call *c);
        /* streamed: a piece of a choice's text; with the thinking apart, `thinking` the piece of
         * its thinking and `text` of the rest (either may be ""), else thinking NULL */
        void (*token)(Call *c, Choice *ch, const char *thinking, const char *text);
        /* streamed: this choice is complete, others may not be (NULL: nothing to write) */
        void (*choice_done)(Call *c, Choice *ch);
        /* every choice is complete: write the answer's end, or all of it */
        void (*finish)(Call *c);
        /* streamed, after the headers went: the request failed */
        void (*stream_error)(Call *c, const Fail *f);
        /* after each piece of a choice's text (the piece: the end of ch->text): whether it is
         * enough (a time limit), when the engine is asked to stop it and it finishes as
         * "length" (NULL: never) */
        bool (*enough)(Call *c, Choice *ch, const char *piece);
        /* frees the call's api_data (NULL: g_free) */
        void (*free_data)(void *api_data);
} CallOps;

/* A conversation's flow: the engine's KV cache holds the conversation whose key it is. */
typedef struct Conversation {
        char *key;              /* conversation_key() of what the flow holds */
        char *flow;             /* its path */
        guint64 positions;      /* tokens in its KV cache */
        guint generation;       /* engine_link_generation() when it was opened */
} Conversation;

struct Call {
        int ref;
        Bridge *b;
        SoupServerMessage *msg;
        const CallOps *ops;
        bool stream, include_usage, proactive;
        char *model, *id;       /* the model as the client named it, the answer's id */
        bool any_model;         /* none named: the engine's, whatever it is */
        gint64 created;         /* seconds since the epoch */
        gint64 t0;              /* monotonic µs, when it came */
        char *prompt;
        GArray *turns;          /* Turn: the conversation before the prompt */
        GVariant *options;      /* a{sv} for the engine, without messages, flow and max_tokens */
        /* the client's bound on the answer's tokens; 0: none (OpenAI's max_tokens absent,
         * Ollama's num_predict absent, -1 or -2), which asks for the engine's MaxTokens;
         * clamp: a bound over MaxTokens asks for MaxTokens (Ollama never refuses one) */
        guint32 max_tokens;
        bool max_tokens_clamp;
        bool cacheable;         /* its answer can continue on a flow (no stop strings, tools, tool turns) */
        bool tools;             /* tools given, tool_choice not none: a call may come instead of text */
        /* the API holds a thinking model's thinking apart from its answer (Ollama's think,
         * OpenAI's reasoning_content): asked for; call_got_model keeps it where the model's
         * template thinks (ModelInfo's thinking), and there `think_open` where its generation
         * prompt opens the block and no grammar holds the answer from its first byte */
        bool think, think_open;
        Conversation *conv;     /* the flow its turn runs on; NULL: none */
        guint64 cached_tokens;  /* of the prompt, in the flow's KV cache already */
        /* its answers, each generated by a request of its own (with a seed given, choice i
         * samples with seed + i); started: those the engine took, pending: those not finished */
        Choice *choices;
        guint n_choices, started, pending;
        bool rest_submitted;    /* the choices after the first have gone to the engine */
        bool gone;              /* answered or its client left */
        bool headers_sent;      /* streamed: the status and headers are out */
        gulong disconnected_id, finished_id;
        GSource *watch;         /* the connection, to notice a client that leaves */
        void *api_data;
};

/* The records of a choice from..to as an array of {"token", "logprob", "bytes", "top_logprobs":
 * [{"token", "logprob", "bytes"}...]} (OpenAI's chat logprobs.content, Ollama's logprobs); a
 * log-probability of -inf (or below) as -9999.0, as OpenAI writes one */
void add_logprob_entries(JsonBuilder *jb, Choice *ch, guint from, guint to);
/* A record's token (its text, its bytes and its log-probability) and its alternatives, read
 * from the record (valid while it is); logprob_token_clear lets go of its parts */
typedef struct LogprobToken {
        const char *text;
        const guint8 *bytes;
        gsize n_bytes;
        double logprob;
        GVariant *alternatives; /* a(sayd) */
        GVariant *bytes_v;
} LogprobToken;
void logprob_token_read(GVariant *record, LogprobToken *ret);
void logprob_token_clear(LogprobToken *t);
double logprob_value(double lp);

/* The choice's answer but its thinking: with the thinking apart, what follows it, else all of
 * the text. */
const char *choice_content(Choice *ch);
/* Its thinking, or NULL where there is none (or it is not held apart). */
const char *choice_thinking(Choice *ch);

/* A call with n answers (n >= 1); conversations go on flows only where n is 1. */
Call *call_new(Bridge *b, SoupServerMessage *msg, const CallOps *ops, guint n);
/* Checks the model, submits, and answers (asynchronously). Takes the caller's reference. */
void call_start(Call *c);
/* Streamed: write this (copied) and send it on. */
void call_write(Call *c, const char *data, gsize len);
/* Streamed: the answer is complete. */
void call_end(Call *c);
/* Answers a call that will not reach the engine (validation failed late). */
void call_fail(Call *c, const Fail *f);

/* conversations.c */
/* The flow for this call's conversation: one whose conversation is the longest prefix of the
 * call's turns ending with an answer (taken out of the cache; *ret_covered: how many turns it
 * holds), or NULL. */
Conversation *conversations_take(Bridge *b, const char *model, GArray *turns, guint *ret_covered);
/* A new flow may be opened now (an idle one was closed to make room, if need be). */
bool conversations_room(Bridge *b);
Conversation *conversation_new(Bridge *b, const char *path);
/* The turn on it finished with this answer: it holds turns + prompt + answer now. */
void conversation_put(Bridge *b, Conversation *conv, const char *model, GArray *turns,
                      const char *prompt, const char *answer, guint64 positions);
/* Close it in the engine and forget it. */
void conversation_drop(Bridge *b, Conversation *conv, bool close);
void conversations_clear(Bridge *b);

/* Routes of each API; return false when the path is not theirs. */
bool openai_route(Bridge *b, SoupServerMessage *msg, const char *method, const char *path);
bool ollama_route(Bridge *b, SoupServerMessage *msg, const char *method, const char *path);
bool llamacpp_route(Bridge *b, SoupServerMessage *msg, const char *method, const char *path);
bool embeddings_route(Bridge *b, SoupServerMessage *msg, const char *method, const char *path);
void http_handler(SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *query,
                  gpointer data);
/* After a request's headers: answers what it can before the body, keeps the body up to the cap */
void http_early_handler(SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *query,
                        gpointer data);
