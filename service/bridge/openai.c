/* SPDX-License-Identifier: MIT */
/* OpenAI's API: POST /v1/chat/completions and /v1/completions (whole, or streamed as
 * server-sent events ending in "data: [DONE]"), GET /v1/models. */
#include "bridge.h"

#include <string.h>

typedef struct OpenAIData {
        bool chat;
        bool logprobs; /* asked for: each choice says logprobs, null without */
} OpenAIData;

/* A choice's records from..to, for its "logprobs" */
typedef struct LpRange {
        Choice *ch;
        guint from, to;
} LpRange;

/* The most choices (n) a request may ask for: as many requests as the engine lets one user
 * run at once by default ([Limits] RequestsPerUser=); a lower limit answers 429. */
#define MAX_CHOICES 16

static JsonBuilder *chunk_begin(Call *c, bool chat) {
        JsonBuilder *jb = json_builder_new();
        json_builder_begin_object(jb);
        json_builder_set_member_name(jb, "id");
        json_builder_add_string_value(jb, c->id);
        json_builder_set_member_name(jb, "object");
        json_builder_add_string_value(jb, chat ? "chat.completion.chunk" : "text_completion");
        json_builder_set_member_name(jb, "created");
        json_builder_add_int_value(jb, c->created);
        json_builder_set_member_name(jb, "model");
        json_builder_add_string_value(jb, c->model);
        return jb;
}

/* usage, as OpenAI reports it: the whole prompt (once, however many choices), of which
 * cached_tokens were in a KV cache already (a conversation's flow, or the engine's prompt
 * cache: those it did not prefill), and every choice's tokens; and llama-server's timings,
 * whose prompt_n is the tokens prefilled for the first choice, its predicted_n every choice's
 * tokens. */
static void add_usage(Call *c, JsonBuilder *jb) {
        const EngineStats *st = &c->choices[0].st;
        gint64 prompt = (gint64) c->cached_tokens + st->prompt_tokens, generated = 0;
        gint64 cached = (gint64) c->cached_tokens + MAX((gint64) st->prompt_tokens - st->prefill_tokens, 0);
        double predicted_s = 0;
        for (guint i = 0; i < c->n_choices; i++) {
                generated += c->choices[i].st.generated_tokens;
                predicted_s = MAX(predicted_s, c->choices[i].st.latency_s - c->choices[i].st.ttft_s);
        }
        json_builder_set_member_name(jb, "usage");
        json_builder_begin_object(jb);
        json_builder_set_member_name(jb, "prompt_tokens");
        json_builder_add_int_value(jb, prompt);
        json_builder_set_member_name(jb, "completion_tokens");
        json_builder_add_int_value(jb, generated);
        json_builder_set_member_name(jb, "total_tokens");
        json_builder_add_int_value(jb, prompt + generated);
        json_builder_set_member_name(jb, "prompt_tokens_details");
        json_builder_begin_object(jb);
        json_builder_set_member_name(jb, "cached_tokens");
        json_builder_add_int_value(jb, cached);
        json_builder_end_object(jb);
        json_builder_end_object(jb);
        json_builder_set_member_name(jb, "timings");
        json_builder_begin_object(jb);
        json_builder_set_member_name(jb, "cache_n");
        json_builder_add_int_value(jb, cached);
        json_builder_set_member_name(jb, "prompt_n");
        json_builder_add_int_value(jb, st->prefill_tokens);
        json_builder_set_member_name(jb, "prompt_ms");
        json_builder_add_double_value(jb, st->ttft_s * 1e3);
        json_builder_set_member_name(jb, "predicted_n");
        json_builder_add_int_value(jb, generated);
        json_builder_set_member_name(jb, "predicted_ms");
        json_builder_add_double_value(jb, predicted_s * 1e3);
        json_builder_end_object(jb);
}

/* OpenAI's tool_calls: one call, its arguments as JSON text; `index` in streamed deltas. */
static void add_tool_calls(Call *c, Choice *ch, JsonBuilder *jb, const char *name, JsonNode *args, bool stream) {
        g_autofree char *arguments = node_to_json(args, NULL);
        g_autofree char *id = ch->index ? g_strdup_printf("call_%s-%u", c->id, ch->index)
                                        : g_strdup_printf("call_%s", c->id);
        json_builder_set_member_name(jb, "tool_calls");
        json_builder_begin_array(jb);
        json_builder_begin_object(jb);
        if (stream) {
                json_builder_set_member_name(jb, "index");
                json_builder_add_int_value(jb, 0);
        }
        json_builder_set_member_name(jb, "id");
        json_builder_add_string_value(jb, id);
        json_builder_set_member_name(jb, "type");
        json_builder_add_string_value(jb, "function");
        json_builder_set_member_name(jb, "function");
        json_builder_begin_object(jb);
        json_builder_set_member_name(jb, "name");
        json_builder_add_string_value(jb, name);
        json_builder_set_member_name(jb, "arguments");
        json_builder_add_string_value(jb, arguments);
        json_builder_end_object(jb);
        json_builder_end_object(jb);
        json_builder_end_array(jb);
}

/* A chat message (or delta) that is a tool call, as an element of "choices". */
static void add_call_choice(Call *c, Choice *ch, JsonBuilder *jb, bool stream, const char *name, JsonNode *args) {
        json_builder_begin_object(jb);
        json_builder_set_member_name(jb, "index");
        json_builder_add_int_value(jb, ch->index);
        json_builder_set_member_name(jb, stream ? "delta" : "message");
        json_builder_begin_object(jb);
        if (!stream) {
                json_builder_set_member_name(jb, "role");
                json_builder_add_string_value(jb, "assistant");
                json_builder_set_member_name(jb, "content");
                json_builder_add_null_value(jb);
        }
        add_tool_calls(c, ch, jb, name, args, stream);
        json_builder_end_object(jb);
        json_builder_set_member_name(jb, "logprobs");
        json_builder_add_null_value(jb);
        json_builder_set_member_name(jb, "finish_reason");
        if (stream)
                json_builder_add_null_value(jb);
        else
                json_builder_add_string_value(jb, "tool_calls");
        json_builder_end_object(jb);
}

/* One choice, as an element of "choices": a delta (chat, streamed), a message (chat, whole)
 * or text (completions). */
/* "logprobs": chat's {"content": [...], "refusal": null}; completions' {"tokens",
 * "token_logprobs", "top_logprobs", "text_offset"}, the offsets in characters of the text */
static void add_logprobs(JsonBuilder *jb, bool chat, const LpRange *lp) {
        json_builder_set_member_name(jb, "logprobs");
        if (!lp) {
                json_builder_add_null_value(jb);
                return;
        }
        json_builder_begin_object(jb);
        if (chat) {
                json_builder_set_member_name(jb, "content");
                add_logprob_entries(jb, lp->ch, lp->from, lp->to);
                json_builder_set_member_name(jb, "refusal");
                json_builder_add_null_value(jb);
                json_builder_end_object(jb);
                return;
        }
        /* one pass: the records before `from` give the first offset */
        GPtrArray *r = lp->ch->logprobs;
        guint to = r ? MIN(lp->to, r->len) : 0;
        JsonArray *tokens = json_array_new(), *values = json_array_new(), *tops = json_array_new(),
                  *offsets = json_array_new();
        glong at = 0;
        for (guint i = 0; i < to; i++) {
                LogprobToken t;
                logprob_token_read(g_ptr_array_index(r, i), &t);
                if (i >= lp->from) {
                        json_array_add_string_element(tokens, t.text);
                        json_array_add_double_element(values, logprob_value(t.logprob));
                        json_array_add_int_element(offsets, at);
                        /* {token: logprob}; a token that two pieces write alike keeps the first */
                        JsonObject *top = json_object_new();
                        GVariantIter it;
                        const char *text;
                        double v;
                        g_variant_iter_init(&it, t.alternatives);
                        while (g_variant_iter_next(&it, "(&s@ayd)", &text, NULL, &v))
                                if (!json_object_has_member(top, text))
                                        json_object_set_double_member(top, text, logprob_value(v));
                        json_array_add_object_element(tops, top);
                }
                at += g_utf8_strlen(t.text, -1);
                logprob_token_clear(&t);
        }
        const struct {
                const char *name;
                JsonArray *a;
        } members[] = { { "tokens", tokens }, { "token_logprobs", values }, { "top_logprobs", tops },
                        { "text_offset", offsets } };
        for (size_t m = 0; m < G_N_ELEMENTS(members); m++) {
                json_builder_set_member_name(jb, members[m].name);
                JsonNode *n = json_node_alloc();
                json_node_take_array(json_node_init(n, JSON_NODE_ARRAY), members[m].a);
                json_builder_add_value(jb, n);
        }
        json_builder_end_object(jb);
}

/* reasoning: the thinking held apart (llama-server's reasoning_content), NULL or "" for none */
static void add_choice(JsonBuilder *jb, guint index, bool chat, bool stream, const char *role, const char *reasoning,
                       const char *text, const char *finish_reason, const LpRange *lp) {
        json_builder_begin_object(jb);
        json_builder_set_member_name(jb, "index");
        json_builder_add_int_value(jb, index);
        if (chat) {
                json_builder_set_member_name(jb, stream ? "delta" : "message");
                json_builder_begin_object(jb);
                if (role) {
                        json_builder_set_member_name(jb, "role");
                        json_builder_add_string_value(jb, role);
                }
                if (text) {
                        json_builder_set_member_name(jb, "content");
                        json_builder_add_string_value(jb, text);
                }
                if (reasoning && *reasoning) {
                        json_builder_set_member_name(jb, "reasoning_content");
                        json_builder_add_string_value(jb, reasoning);
                }
                json_builder_end_object(jb);
        } else {
                json_builder_set_member_name(jb, "text");
                json_builder_add_string_value(jb, text ? text : "");
        }
        add_logprobs(jb, chat, lp);
        json_builder_set_member_name(jb, "finish_reason");
        if (finish_reason)
                json_builder_add_string_value(jb, finish_reason);
        else
                json_builder_add_null_value(jb);
        json_builder_end_object(jb);
}

/* "data: JSON\n\n" */
static void send_event(Call *c, JsonBuilder *jb) {
        g_autoptr(JsonNode) root = NULL;
        g_autofree char *json = NULL;
        g_autofree char *event = NULL;
        gsize len;

        json_builder_end_object(jb);
        root = json_builder_get_root(jb);
        json = node_to_json(root, NULL);
        event = g_strdup_printf("data: %s\n\n", json);
        len = strlen(event);
        call_write(c, event, len);
}

/* A streamed chunk of one choice: its "choices" holds that choice alone; with
 * include_usage, "usage" is null but in the last chunk. */
static void send_chunk(Call *c, JsonBuilder *jb) {
        if (c->include_usage) {
                json_builder_set_member_name(jb, "usage");
                json_builder_add_null_value(jb);
        }
        send_event(c, jb);
}

/* ch: with logprobs, the chunk carries its records not yet written */
static void stream_chunk(Call *c, guint index, const char *role, const char *reasoning, const char *text,
                         const char *finish, Choice *ch) {
        OpenAIData *d = c->api_data;
        g_autoptr(JsonBuilder) jb = chunk_begin(c, d->chat);
        LpRange lp = { ch, ch ? ch->logprobs_sent : 0, ch && ch->logprobs ? ch->logprobs->len : 0 };
        if (ch)
                ch->logprobs_sent = lp.to;
        json_builder_set_member_name(jb, "choices");
        json_builder_begin_array(jb);
        add_choice(jb, index, d->chat, true, role, reasoning, text, finish, d->logprobs && ch ? &lp : NULL);
        json_builder_end_array(jb);
        send_chunk(c, jb);
}

/* Whether a finished choice's answer is a tool call (then its name and arguments). */
static bool choice_call(Call *c, Choice *ch, char **ret_name, JsonNode **ret_args) {
        OpenAIData *d = c->api_data;
        return d->chat && g_strcmp0(ch->st.finish_reason, "tool_calls") == 0 &&
               tool_call_read(ch->st.tool_call, ret_name, ret_args);
}

static void oa_begin(Call *c) {
        OpenAIData *d = c->api_data;
        if (d->chat)
                for (guint i = 0; i < c->n_choices; i++)
                        stream_chunk(c, i, "assistant", NULL, "", NULL, NULL);
}

/* With the thinking apart, a delta holds the new thinking as reasoning_content and the new
 * answer as content, each where there is some (llama-server's deltas) */
static void oa_token(Call *c, Choice *ch, const char *thinking, const char *text) {
        stream_chunk(c, ch->index, NULL, thinking, thinking && !*text ? NULL : text, NULL, ch);
}

/* Streamed: the choice's call or held text, then its finish_reason. */
static void oa_choice_done(Call *c, Choice *ch) {
        OpenAIData *d = c->api_data;
        g_autofree char *name = NULL;
        g_autoptr(JsonNode) args = NULL;
        bool call = choice_call(c, ch, &name, &args);

        if (call) {
                g_autoptr(JsonBuilder) jb = chunk_begin(c, d->chat);
                json_builder_set_member_name(jb, "choices");
                json_builder_begin_array(jb);
                add_call_choice(c, ch, jb, true, name, args);
                json_builder_end_array(jb);
                send_chunk(c, jb);
        } else if (ch->held)
                /* held back as a possible call, and text after all */
                stream_chunk(c, ch->index, NULL, choice_thinking(ch), choice_content(ch), NULL, ch);
        stream_chunk(c, ch->index, NULL, NULL, d->chat ? NULL : "", call ? "tool_calls" : ch->reason, ch);
}

static void oa_finish(Call *c) {
        OpenAIData *d = c->api_data;

        if (c->stream) {
                if (c->include_usage) {
                        g_autoptr(JsonBuilder) jb = chunk_begin(c, d->chat);
                        json_builder_set_member_name(jb, "choices");
                        json_builder_begin_array(jb);
                        json_builder_end_array(jb);
                        add_usage(c, jb);
                        send_event(c, jb);
                }
                call_write(c, "data: [DONE]\n\n", strlen("data: [DONE]\n\n"));
                call_end(c);
                return;
        }
        g_autoptr(JsonBuilder) jb = json_builder_new();
        json_builder_begin_object(jb);
        json_builder_set_member_name(jb, "id");
        json_builder_add_string_value(jb, c->id);
        json_builder_set_member_name(jb, "object");
        json_builder_add_string_value(jb, d->chat ? "chat.completion" : "text_completion");
        json_builder_set_member_name(jb, "created");
        json_builder_add_int_value(jb, c->created);
        json_builder_set_member_name(jb, "model");
        json_builder_add_string_value(jb, c->model);
        json_builder_set_member_name(jb, "choices");
        json_builder_begin_array(jb);
        for (guint i = 0; i < c->n_choices; i++) {
                Choice *ch = &c->choices[i];
                g_autofree char *name = NULL;
                g_autoptr(JsonNode) args = NULL;
                if (choice_call(c, ch, &name, &args))
                        add_call_choice(c, ch, jb, false, name, args);
                else {
                        LpRange lp = { ch, 0, G_MAXUINT };
                        add_choice(jb, i, d->chat, false, d->chat ? "assistant" : NULL, choice_thinking(ch),
                                   choice_content(ch), ch->reason, d->logprobs ? &lp : NULL);
                }
        }
        json_builder_end_array(jb);
        add_usage(c, jb);
        json_builder_end_object(jb);
        if (!c->gone) {
                respond_json(c->msg, 200, json_builder_get_root(jb));
                soup_server_message_unpause(c->msg);
        }
}

static void oa_stream_error(Call *c, const Fail *f) {
        g_autoptr(JsonBuilder) jb = json_builder_new();
        json_builder_begin_object(jb);
        json_builder_set_member_name(jb, "error");
        json_builder_begin_object(jb);
        json_builder_set_member_name(jb, "message");
        json_builder_add_string_value(jb, f->message);
        json_builder_set_member_name(jb, "type");
        json_builder_add_string_value(jb, f->type ? f->type : "server_error");
        json_builder_set_member_name(jb, "code");
        if (f->code)
                json_builder_add_string_value(jb, f->code);
        else
                json_builder_add_null_value(jb);
        json_builder_end_object(jb);
        send_event(c, jb);
        call_end(c);
}

static const CallOps openai_ops = {
        .api = API_OPENAI,
        .stream_type = "text/event-stream",
        .begin = oa_begin,
        .token = oa_token,
        .choice_done = oa_choice_done,
        .finish = oa_finish,
        .stream_error = oa_stream_error,
};

/* response_format, tools and tool_choice into the engine's options. *ret_tools:
 * tools go to the engine; *ret_calls: its answer may be a call. */
static bool structured_options(JsonObject *o, GVariantBuilder *opts, bool *ret_tools, bool *ret_calls, Fail *f) {
        JsonObject *rf = NULL;
        JsonArray *tools = NULL, *functions = NULL;
        const char *type = NULL, *choice = NULL, *only = NULL;
        JsonNode *n;

        *ret_tools = *ret_calls = false;
        if (!field_object(o, "response_format", &rf, f))
                return false;
        if (rf) {
                if (!field_string(rf, "type", &type, f))
                        return false;
                if (!type || strcmp(type, "text") == 0)
                        ;
                else if (strcmp(type, "json_object") == 0) {
                        g_autoptr(JsonNode) any = json_from_string("{\"type\":\"object\"}", NULL);
                        if (!schema_option(any, "'response_format'", opts, f))
                                return false;
                } else if (strcmp(type, "json_schema") == 0) {
                        JsonObject *js = NULL;
                        if (!field_object(rf, "json_schema", &js, f))
                                return false;
                        if (!js)
                                return fail_bad(f, "'response_format' of type 'json_schema' needs "
                                                "'json_schema': {\"name\": ..., \"schema\": {...}}");
                        /* strict or not, the answer follows the schema */
                        if (!schema_option(json_object_get_member(js, "schema"),
                                           "'response_format.json_schema.schema'", opts, f))
                                return false;
                } else
                        return fail_bad(f, "'response_format' type must be text, json_object or "
                                        "json_schema, got '%s'", type);
        }
        if (!field_array(o, "tools", &tools, f) || !field_array(o, "functions", &functions, f))
                return false;
        if (functions && json_array_get_length(functions) > 0)
                return fail_bad(f, "'functions' is OpenAI's older form; send 'tools'");
        n = json_object_get_member(o, "tool_choice");
        if (n && !JSON_NODE_HOLDS_NULL(n)) {
                if (JSON_NODE_HOLDS_VALUE(n) && json_node_get_value_type(n) == G_TYPE_STRING) {
                        choice = json_node_get_string(n);
                        if (strcmp(choice, "none") != 0 && strcmp(choice, "auto") != 0 &&
                            strcmp(choice, "required") != 0)
                                return fail_bad(f, "'tool_choice' must be none, auto, required or "
                                                "{\"type\": \"function\", \"function\": {\"name\": ...}}, got '%s'",
                                                choice);
                } else if (JSON_NODE_HOLDS_OBJECT(n)) {
                        JsonObject *fn = NULL;
                        if (!field_object(json_node_get_object(n), "function", &fn, f))
                                return false;
                        if (!fn || !field_string(fn, "name", &only, f) || !only)
                                return fail_bad(f, "'tool_choice' must be none, auto, required or "
                                                "{\"type\": \"function\", \"function\": {\"name\": ...}}");
                        choice = "required";
                } else
                        return fail_bad(f, "'tool_choice' must be a string or an object");
                if (strcmp(choice, "none") != 0 && (!tools || json_array_get_length(tools) == 0))
                        return fail_bad(f, "'tool_choice' needs 'tools'");
        }
        if (tools && json_array_get_length(tools) > 0) {
                bool none = g_strcmp0(choice, "none") == 0;
                if (type && strcmp(type, "text") != 0) {
                        if (!none)
                                return fail_bad(f, "'tools' and a 'response_format' of type '%s' cannot be "
                                                "combined", type);
                        /* the answer follows the format: the tools stay out of the prompt (earlier
                         * calls and results are written as without tools) */
                } else {
                        /* "none": the tools in the prompt as the template writes them, the answer text */
                        if (!tools_option(tools, only, choice, opts, f))
                                return false;
                        *ret_tools = true;
                        *ret_calls = !none;
                }
        }
        return true;
}

/* n: how many choices, each generated by an engine request of its own. */
static bool field_choices(JsonObject *o, guint *ret, Fail *f) {
        gint64 count = 1;
        bool set = false;

        if (!field_int(o, "n", &count, &set, f))
                return false;
        if (count < 1 || count > MAX_CHOICES)
                return fail_bad(f, "'n' must be from 1 to %d, got %" G_GINT64_FORMAT, MAX_CHOICES, count);
        *ret = (guint) count;
        return true;
}

/* Fields whose meaning the engine cannot honour: refused, never silently dropped (a client that
 * asked for its prompt echoed would take the answer for what it asked). false, null, 0 and ""
 * are what clients send when they ask for none of it. */
static bool refuse_unsupported(JsonObject *o, bool chat, Fail *f) {
        bool on = false, set = false;
        gint64 best = 1;
        JsonObject *bias = NULL;

        if (!field_object(o, "logit_bias", &bias, f))
                return false;
        if (bias && json_object_get_size(bias) > 0)
                return fail_set(f, 400, "invalid_request_error", "unsupported_parameter",
                                "'logit_bias' is not supported: its token ids are those of OpenAI's "
                                "tokenizer, not this model's");
        if (chat)
                return true;
        if (!field_bool(o, "echo", &on, NULL, f) || !field_int(o, "best_of", &best, &set, f))
                return false;
        if (on)
                return fail_set(f, 400, "invalid_request_error", "unsupported_parameter",
                                "'echo' is not supported");
        if (best != 1)
                return fail_set(f, 400, "invalid_request_error", "unsupported_parameter",
                                "'best_of' must be 1");
        return true;
}

/* logprobs into the engine's option: chat's "logprobs": true with "top_logprobs" 0 to 20
 * alternatives, completions' "logprobs" 0 to 20 (null: none). *ret_on: asked for. */
static bool logprobs_options(JsonObject *o, bool chat, GVariantBuilder *opts, bool *ret_on, Fail *f) {
        bool on = false, top_set = false;
        gint64 top = 0;

        if (chat ? !field_bool(o, "logprobs", &on, NULL, f) ||
                           !field_int(o, "top_logprobs", &top, &top_set, f)
                 : !field_int(o, "logprobs", &top, &on, f))
                return false;
        const char *name = chat ? "top_logprobs" : "logprobs";
        if ((on || top_set) && (top < 0 || top > 20))
                return fail_bad(f, "'%s' must be from 0 to 20, got %" G_GINT64_FORMAT, name, top);
        if (chat && !on && top > 0)
                return fail_bad(f, "'top_logprobs' needs 'logprobs': true");
        if (on)
                g_variant_builder_add(opts, "{sv}", "logprobs", g_variant_new_uint32((guint32) top));
        *ret_on = on;
        return true;
}

/* Sampling fields into the engine's options. */
static bool sampling_options(JsonObject *o, GVariantBuilder *opts, guint32 *ret_max, Fail *f) {
        static const char *const penalties[] = { "frequency_penalty", "presence_penalty" };
        gint64 max = 0, seed = 0;
        double t = 0, p = 0;
        bool has_max = false, has_seed = false, has_t = false, has_p = false;

        if (!field_int(o, "max_tokens", &max, &has_max, f) ||
            !field_int(o, "max_completion_tokens", &max, &has_max, f) ||
            !field_number(o, "temperature", &t, &has_t, f) ||
            !field_number(o, "top_p", &p, &has_p, f) || !field_int(o, "seed", &seed, &has_seed, f) ||
            !field_stop(o, "stop", opts, f))
                return false;
        for (size_t i = 0; i < G_N_ELEMENTS(penalties); i++) {
                double v = 0;
                bool set = false;
                if (!field_number(o, penalties[i], &v, &set, f))
                        return false;
                if (set && v != 0)
                        g_variant_builder_add(opts, "{sv}", penalties[i], g_variant_new_double(v));
        }
        if (has_max) {
                if (max < 1 || max > G_MAXUINT32)
                        return fail_bad(f, "'max_tokens' must be a positive integer, got %" G_GINT64_FORMAT,
                                        max);
                *ret_max = (guint32) max;
        }
        if (has_t)
                g_variant_builder_add(opts, "{sv}", "temperature", g_variant_new_double(t));
        if (has_p)
                g_variant_builder_add(opts, "{sv}", "top_p", g_variant_new_double(p));
        if (has_seed)
                g_variant_builder_add(opts, "{sv}", "seed", g_variant_new_uint64((guint64) seed));
        return true;
}

/* chat_template_kwargs' enable_thinking (as clients of vLLM and llama-server send it): the
 * engine's think option (off: the template's own switch, where it has one); its other keys
 * are refused, as the engine applies the model's template itself */
/* *ret_apart: the thinking goes to reasoning_content, as llama-server's default
 * (--reasoning-format deepseek) puts it; the request's reasoning_format "none" keeps it in the
 * content, as the model writes it, and enable_thinking false leaves none to hold apart.
 * /v1/completions' text is always as the model writes it. */
static bool thinking_option(JsonObject *o, bool chat, GVariantBuilder *opts, bool *ret_apart, Fail *f) {
        JsonObject *k = NULL;
        bool on = false, set = false;
        const char *format = NULL;
        *ret_apart = chat;
        if (!field_string(o, "reasoning_format", &format, f))
                return false;
        if (format && strcmp(format, "none") == 0)
                *ret_apart = false;
        else if (format && strcmp(format, "deepseek") != 0 && strcmp(format, "auto") != 0)
                return fail_bad(f, "'reasoning_format' must be none, auto or deepseek, got '%s'", format);
        if (!field_object(o, "chat_template_kwargs", &k, f))
                return false;
        if (!k)
                return true;
        if (!chat)
                return fail_bad(f, "'chat_template_kwargs' is /v1/chat/completions'");
        g_autoptr(GList) members = json_object_get_members(k);
        for (GList *l = members; l; l = l->next)
                if (strcmp(l->data, "enable_thinking") != 0)
                        return fail_bad(f, "'chat_template_kwargs' takes enable_thinking only, got '%s'",
                                        (const char *) l->data);
        if (!field_bool(k, "enable_thinking", &on, &set, f))
                return false;
        if (set)
                g_variant_builder_add(opts, "{sv}", "think", g_variant_new_boolean(on));
        if (set && !on)
                *ret_apart = false;
        return true;
}

static void generate(Bridge *b, SoupServerMessage *msg, bool chat) {
        g_autoptr(JsonParser) parser = NULL;
        g_auto(GVariantBuilder) opts = G_VARIANT_BUILDER_INIT(G_VARIANT_TYPE_VARDICT);
        g_auto(Fail) f = {};
        g_autofree char *prompt = NULL;
        g_autoptr(GArray) turns = NULL;
        JsonObject *o, *so = NULL;
        const char *model = NULL;
        bool stream = false, usage = false, proactive, tools = false, calls = false, logprobs = false, apart = false;
        guint32 max_tokens = 0;
        guint n = 1;
        Call *c;

        o = body_object(b, msg, &parser, &f);
        if (!o || !field_string(o, "model", &model, &f) || !field_bool(o, "stream", &stream, NULL, &f) ||
            !field_object(o, "stream_options", &so, &f) ||
            (so && !field_bool(so, "include_usage", &usage, NULL, &f)) ||
            !structured_options(o, &opts, &tools, &calls, &f) || !thinking_option(o, chat, &opts, &apart, &f) ||
            !field_choices(o, &n, &f) ||
            !refuse_unsupported(o, chat, &f) || !logprobs_options(o, chat, &opts, &logprobs, &f) ||
            !sampling_options(o, &opts, &max_tokens, &f) || !parse_priority(msg, o, &proactive, &f))
                goto fail;
        if (!model) {
                fail_bad(&f, "'model' is required; GET /v1/models lists it");
                goto fail;
        }
        if (chat) {
                JsonArray *msgs = NULL;
                if (!field_array(o, "messages", &msgs, &f))
                        goto fail;
                if (!msgs) {
                        fail_bad(&f, "'messages' is required");
                        goto fail;
                }
                turns = turns_new();
                if (!messages_to_turns(msgs, true, turns, &prompt, &f))
                        goto fail;
        } else {
                JsonNode *n = json_object_get_member(o, "prompt");
                if (n && JSON_NODE_HOLDS_ARRAY(n) && json_array_get_length(json_node_get_array(n)) == 1)
                        n = json_array_get_element(json_node_get_array(n), 0);
                if (!n || !JSON_NODE_HOLDS_VALUE(n) || json_node_get_value_type(n) != G_TYPE_STRING) {
                        fail_bad(&f, "'prompt' must be a string (or an array of one string)");
                        goto fail;
                }
                prompt = g_strdup(json_node_get_string(n));
                /* completions continue the text as it is; with a suffix they fill in the middle
                 * (the model's FIM tokens around the prompt and the suffix) */
                const char *suffix = NULL;
                if (!field_string(o, "suffix", &suffix, &f))
                        goto fail;
                if (suffix && *suffix)
                        g_variant_builder_add(&opts, "{sv}", "suffix", g_variant_new_string(suffix));
                g_variant_builder_add(&opts, "{sv}", "raw", g_variant_new_boolean(TRUE));
        }

        c = call_new(b, msg, &openai_ops, n);
        c->api_data = g_new0(OpenAIData, 1);
        ((OpenAIData *) c->api_data)->chat = chat;
        ((OpenAIData *) c->api_data)->logprobs = logprobs;
        c->stream = stream;
        c->max_tokens = max_tokens;
        c->include_usage = stream && usage;
        c->proactive = proactive;
        c->model = g_strdup(model);
        c->id = g_strdup_printf("%s-%" G_GUINT64_FORMAT, chat ? "chatcmpl" : "cmpl", ++b->next_id);
        c->prompt = g_steal_pointer(&prompt);
        c->turns = g_steal_pointer(&turns);
        c->tools = calls;
        c->think = apart;
        c->cacheable = chat && !tools && !turns_hold_tools(c->turns);
        c->options = g_variant_ref_sink(g_variant_builder_end(&opts));
        call_start(c);
        return;
fail:
        respond_error(msg, API_OPENAI, &f);
}

static void add_model_object(JsonBuilder *jb, const char *model) {
        json_builder_begin_object(jb);
        json_builder_set_member_name(jb, "id");
        json_builder_add_string_value(jb, model);
        json_builder_set_member_name(jb, "object");
        json_builder_add_string_value(jb, "model");
        json_builder_set_member_name(jb, "created");
        json_builder_add_int_value(jb, 0);
        json_builder_set_member_name(jb, "owned_by");
        json_builder_add_string_value(jb, "agentxpu");
        json_builder_end_object(jb);
}

/* GET /v1/models (want NULL: the list, empty without a model) or /v1/models/ID (want the
 * model the client named, which model_query checked is the engine's) */
static void models_answer(SoupServerMessage *msg, const char *want, const char *model, GVariant *info,
                          int unused) {
        g_autoptr(JsonBuilder) jb = json_builder_new();

        if (want)
                add_model_object(jb, model);
        else {
                json_builder_begin_object(jb);
                json_builder_set_member_name(jb, "object");
                json_builder_add_string_value(jb, "list");
                json_builder_set_member_name(jb, "data");
                json_builder_begin_array(jb);
                if (*model)
                        add_model_object(jb, model);
                json_builder_end_array(jb);
                json_builder_end_object(jb);
        }
        respond_json(msg, 200, json_builder_get_root(jb));
}

bool openai_route(Bridge *b, SoupServerMessage *msg, const char *method, const char *path) {
        bool post = strcmp(method, "POST") == 0, get = strcmp(method, "GET") == 0;
        g_auto(Fail) f = {};

        if (strcmp(path, "/v1/chat/completions") == 0 && post)
                generate(b, msg, true);
        else if (strcmp(path, "/v1/completions") == 0 && post)
                generate(b, msg, false);
        else if (strcmp(path, "/v1/models") == 0 && get)
                model_query(b, msg, API_OPENAI, NULL, models_answer, 0);
        else if (g_str_has_prefix(path, "/v1/models/") && path[11] && !strchr(path + 11, '/') && get) {
                g_autofree char *id = g_uri_unescape_string(path + 11, NULL);
                model_query(b, msg, API_OPENAI, id ? id : path + 11, models_answer, 0);
        }
        else if (strcmp(path, "/v1/chat/completions") == 0 || strcmp(path, "/v1/completions") == 0 ||
                 strcmp(path, "/v1/models") == 0 || g_str_has_prefix(path, "/v1/models/")) {
                fail_set(&f, 405, "invalid_request_error", "method_not_allowed",
                         "%s is not allowed on %s", method, path);
                respond_error(msg, API_OPENAI, &f);
        } else
                return false;
        return true;
}
