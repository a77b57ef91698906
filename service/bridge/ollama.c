/* SPDX-License-Identifier: MIT */
/* Ollama's API: POST /api/chat and /api/generate (whole, or streamed as one JSON object per
 * line, which is Ollama's default), POST /api/show, GET /api/tags, /api/ps, /api/version. */
#include "bridge.h"

#include <string.h>

#include "config.h"

typedef struct OllamaData {
        bool chat;
        bool logprobs; /* asked for */
} OllamaData;

static JsonBuilder *line_begin(Call *c) {
        g_autofree char *now = timestamp_rfc3339();
        JsonBuilder *jb = json_builder_new();
        json_builder_begin_object(jb);
        json_builder_set_member_name(jb, "model");
        json_builder_add_string_value(jb, c->model);
        json_builder_set_member_name(jb, "created_at");
        json_builder_add_string_value(jb, now);
        return jb;
}

/* The answer's text, or (chat) a tool call: Ollama's tool_calls, arguments as an object; with
 * "think": the thinking apart ("thinking", where there is some: NULL or "" for none). */
static void add_message(Call *c, JsonBuilder *jb, const char *thinking, const char *text, const char *call_name,
                        JsonNode *call_args) {
        OllamaData *d = c->api_data;
        if (d->chat) {
                json_builder_set_member_name(jb, "message");
                json_builder_begin_object(jb);
                json_builder_set_member_name(jb, "role");
                json_builder_add_string_value(jb, "assistant");
                json_builder_set_member_name(jb, "content");
                json_builder_add_string_value(jb, call_name ? "" : text);
                if (thinking && *thinking) {
                        json_builder_set_member_name(jb, "thinking");
                        json_builder_add_string_value(jb, thinking);
                }
                if (call_name) {
                        json_builder_set_member_name(jb, "tool_calls");
                        json_builder_begin_array(jb);
                        json_builder_begin_object(jb);
                        json_builder_set_member_name(jb, "function");
                        json_builder_begin_object(jb);
                        json_builder_set_member_name(jb, "name");
                        json_builder_add_string_value(jb, call_name);
                        json_builder_set_member_name(jb, "arguments");
                        json_builder_add_value(jb, json_node_copy(call_args));
                        json_builder_end_object(jb);
                        json_builder_end_object(jb);
                        json_builder_end_array(jb);
                }
                json_builder_end_object(jb);
        } else {
                json_builder_set_member_name(jb, "response");
                json_builder_add_string_value(jb, text);
                if (thinking && *thinking) {
                        json_builder_set_member_name(jb, "thinking");
                        json_builder_add_string_value(jb, thinking);
                }
        }
}

static void add_text(Call *c, JsonBuilder *jb, const char *text) {
        add_message(c, jb, NULL, text, NULL, NULL);
}

/* With logprobs: "logprobs", the records of the choice not yet written */
static void add_logprobs(Call *c, JsonBuilder *jb, Choice *ch) {
        OllamaData *d = c->api_data;
        guint to = ch->logprobs ? ch->logprobs->len : 0;
        if (!d->logprobs)
                return;
        json_builder_set_member_name(jb, "logprobs");
        add_logprob_entries(jb, ch, ch->logprobs_sent, to);
        ch->logprobs_sent = to;
}

static void add_int(JsonBuilder *jb, const char *name, gint64 v) {
        json_builder_set_member_name(jb, name);
        json_builder_add_int_value(jb, v);
}

/* The last object: done, why, and the timings in nanoseconds as Ollama reports them. */
static void add_done(Call *c, JsonBuilder *jb, const char *reason, const EngineStats *st) {
        gint64 total = (g_get_monotonic_time() - c->t0) * 1000;
        gint64 prompt_ns = (gint64) (st->ttft_s * 1e9);
        gint64 eval_ns = (gint64) ((st->latency_s - st->ttft_s) * 1e9);

        json_builder_set_member_name(jb, "done");
        json_builder_add_boolean_value(jb, TRUE);
        json_builder_set_member_name(jb, "done_reason");
        json_builder_add_string_value(jb, reason);
        add_int(jb, "total_duration", total);
        add_int(jb, "load_duration", 0);
        /* the tokens evaluated: a conversation's turns already in its flow's KV cache are not */
        add_int(jb, "prompt_eval_count", st->prefill_tokens);
        add_int(jb, "prompt_eval_duration", prompt_ns > 0 ? prompt_ns : 0);
        add_int(jb, "eval_count", st->generated_tokens);
        add_int(jb, "eval_duration", eval_ns > 0 ? eval_ns : 0);
}

static void send_line(Call *c, JsonBuilder *jb) {
        g_autoptr(JsonNode) root = NULL;
        g_autofree char *json = NULL;
        g_autofree char *line = NULL;

        json_builder_end_object(jb);
        root = json_builder_get_root(jb);
        json = node_to_json(root, NULL);
        line = g_strconcat(json, "\n", NULL);
        call_write(c, line, strlen(line));
}

static void ol_begin(Call *c) {
}

static void ol_token(Call *c, Choice *ch, const char *thinking, const char *text) {
        g_autoptr(JsonBuilder) jb = line_begin(c);
        add_message(c, jb, thinking, text, NULL, NULL);
        add_logprobs(c, jb, ch);
        json_builder_set_member_name(jb, "done");
        json_builder_add_boolean_value(jb, FALSE);
        send_line(c, jb);
}

/* Ollama's answer is one: the call's only choice. */
static void ol_finish(Call *c) {
        OllamaData *d = c->api_data;
        Choice *ch = &c->choices[0];
        const EngineStats *st = &ch->st;
        const char *reason = ch->reason;
        g_autoptr(JsonBuilder) jb = NULL;
        g_autofree char *name = NULL;
        g_autoptr(JsonNode) args = NULL;
        bool call = d->chat && g_strcmp0(st->finish_reason, "tool_calls") == 0 &&
                    tool_call_read(st->tool_call, &name, &args);

        if (c->stream && (call || ch->held)) {
                /* held back as a possible call: the call, or the text after all */
                g_autoptr(JsonBuilder) held = line_begin(c);
                add_message(c, held, choice_thinking(ch), choice_content(ch), call ? name : NULL, args);
                add_logprobs(c, held, ch);
                json_builder_set_member_name(held, "done");
                json_builder_add_boolean_value(held, FALSE);
                send_line(c, held);
        }
        jb = line_begin(c);
        if (c->stream)
                add_text(c, jb, "");
        else
                add_message(c, jb, choice_thinking(ch), choice_content(ch), call ? name : NULL, args);
        add_logprobs(c, jb, ch);
        add_done(c, jb, reason, st);
        if (c->stream) {
                send_line(c, jb);
                call_end(c);
                return;
        }
        json_builder_end_object(jb);
        if (!c->gone) {
                respond_json(c->msg, 200, json_builder_get_root(jb));
                soup_server_message_unpause(c->msg);
        }
}

static void ol_stream_error(Call *c, const Fail *f) {
        g_autoptr(JsonBuilder) jb = json_builder_new();
        json_builder_begin_object(jb);
        json_builder_set_member_name(jb, "error");
        json_builder_add_string_value(jb, f->message);
        send_line(c, jb);
        call_end(c);
}

static const CallOps ollama_ops = {
        .api = API_OLLAMA,
        .stream_type = "application/x-ndjson",
        .begin = ol_begin,
        .token = ol_token,
        .finish = ol_finish,
        .stream_error = ol_stream_error,
};

/* Ollama's "options" into the engine's; options the engine has no use for (num_ctx,
 * mirostat, ...) are accepted and left alone, as Ollama does with unknown ones. */
static bool ollama_options(JsonObject *o, GVariantBuilder *opts, guint32 *ret_max, Fail *f) {
        gint64 n = 0;
        bool has_n = false;

        if (!field_int(o, "num_predict", &n, &has_n, f) || !sampler_fields(o, opts, f))
                return false;
        /* num_predict -1 (no limit) and -2 (fill the context): the engine's limit (*ret_max 0) */
        if (has_n && n == 0)
                return fail_bad(f, "'num_predict' must be positive, or -1 for no limit");
        if (has_n && n > 0)
                *ret_max = n > G_MAXUINT32 ? G_MAXUINT32 : (guint32) n;
        return true;
}

/* format ("json" or a JSON Schema) and tools into the engine's options; what the engine
 * cannot take is refused. */
/* format, tools and (generate) a suffix into the engine's options; *ret_tools: tools given,
 * *ret_fim: a suffix to fill up to. */
static bool structured_options(JsonObject *o, bool chat, GVariantBuilder *opts, bool *ret_tools, bool *ret_fim,
                               bool *ret_think, Fail *f) {
        JsonNode *n = json_object_get_member(o, "format");
        JsonArray *a = NULL;
        const char *tmpl = NULL;

        *ret_tools = *ret_fim = *ret_think = false;
        if (n && JSON_NODE_HOLDS_VALUE(n) && json_node_get_value_type(n) == G_TYPE_STRING) {
                const char *v = json_node_get_string(n);
                if (strcmp(v, "json") == 0) {
                        g_autoptr(JsonNode) any = json_from_string("{\"type\":\"object\"}", NULL);
                        if (!schema_option(any, "'format'", opts, f))
                                return false;
                } else if (*v)
                        return fail_bad(f, "'format' must be \"json\" or a JSON Schema, got '%s'", v);
        } else if (n && !JSON_NODE_HOLDS_NULL(n) && !schema_option(n, "'format'", opts, f))
                return false;
        if (!field_array(o, "tools", &a, f))
                return false;
        if (a && json_array_get_length(a) > 0) {
                if (n && !JSON_NODE_HOLDS_NULL(n) && !(JSON_NODE_HOLDS_VALUE(n) &&
                                                       json_node_get_value_type(n) == G_TYPE_STRING &&
                                                       !*json_node_get_string(n)))
                        return fail_bad(f, "'tools' and 'format' cannot be combined");
                if (!tools_option(a, NULL, NULL, opts, f))
                        return false;
                *ret_tools = true;
        }
        a = NULL;
        if (!field_array(o, "images", &a, f))
                return false;
        if (a && json_array_get_length(a) > 0)
                return fail_bad(f, "Images are not supported: the model reads text only");
        if (!field_string(o, "template", &tmpl, f))
                return false;
        if (tmpl && *tmpl)
                return fail_bad(f, "'template' is not supported: the engine applies the model's own "
                                "chat template");
        /* think: true (or a level, "high", "medium", "low": any string but "" and "false") holds
         * the thinking apart, in "thinking", and asks the engine for it on (a model that does not
         * think, raw text or a suffix: 400, the engine says why); false (or "", "false") turns it
         * off where the template can (the engine's think option); absent, the text is as the
         * model writes it. What would change the answer is refused rather than dropped: a suffix
         * in a chat, and an earlier answer's context; a suffix to /api/generate fills in the
         * middle (the prompt before the cursor, the suffix after it, in the model's FIM tokens,
         * as a code model's template does with them) */
        {
                bool think = false, think_set = false;
                const char *suffix = NULL;
                JsonArray *context = NULL;
                JsonNode *t = json_object_get_member(o, "think");
                if (t && JSON_NODE_HOLDS_VALUE(t) && json_node_get_value_type(t) == G_TYPE_STRING) {
                        think = strcmp(json_node_get_string(t), "") != 0 &&
                                strcmp(json_node_get_string(t), "false") != 0;
                        think_set = !think;
                } else if (!field_bool(o, "think", &think, &think_set, f))
                        return false;
                if (think) {
                        g_variant_builder_add(opts, "{sv}", "think", g_variant_new_boolean(TRUE));
                        *ret_think = true;
                }
                if (!field_string(o, "suffix", &suffix, f) || !field_array(o, "context", &context, f))
                        return false;
                if (suffix && *suffix) {
                        if (chat)
                                return fail_bad(f, "'suffix' (fill in the middle) is /api/generate's");
                        g_variant_builder_add(opts, "{sv}", "suffix", g_variant_new_string(suffix));
                        *ret_fim = true;
                }
                /* off where the chat template applies (not raw, not filling in the middle) */
                JsonNode *raw = json_object_get_member(o, "raw");
                bool is_raw = !chat && raw && JSON_NODE_HOLDS_VALUE(raw) &&
                              json_node_get_value_type(raw) == G_TYPE_BOOLEAN && json_node_get_boolean(raw);
                if (think_set && !think && !is_raw && !*ret_fim)
                        g_variant_builder_add(opts, "{sv}", "think", g_variant_new_boolean(FALSE));
                if (context && json_array_get_length(context) > 0)
                        return fail_bad(f, "'context' is not supported: send the conversation's "
                                        "messages to /api/chat");
        }
        return true;
}

/* An empty prompt (or no messages) is how Ollama's clients load a model (and, with
 * "keep_alive": 0, unload it): answered done once the engine is seen to serve that model, as
 * Ollama answers 404 for a model it does not have. */
enum { LOAD_CHAT = 1, LOAD_UNLOAD = 2 };

static void load_answer(SoupServerMessage *msg, const char *want, const char *model, GVariant *info,
                        int how) {
        g_autofree char *now = timestamp_rfc3339();
        g_autoptr(JsonBuilder) jb = json_builder_new();

        json_builder_begin_object(jb);
        json_builder_set_member_name(jb, "model");
        json_builder_add_string_value(jb, want);
        json_builder_set_member_name(jb, "created_at");
        json_builder_add_string_value(jb, now);
        if (how & LOAD_CHAT) {
                json_builder_set_member_name(jb, "message");
                json_builder_begin_object(jb);
                json_builder_set_member_name(jb, "role");
                json_builder_add_string_value(jb, "assistant");
                json_builder_set_member_name(jb, "content");
                json_builder_add_string_value(jb, "");
                json_builder_end_object(jb);
        } else {
                json_builder_set_member_name(jb, "response");
                json_builder_add_string_value(jb, "");
        }
        json_builder_set_member_name(jb, "done");
        json_builder_add_boolean_value(jb, TRUE);
        json_builder_set_member_name(jb, "done_reason");
        json_builder_add_string_value(jb, how & LOAD_UNLOAD ? "unload" : "load");
        json_builder_end_object(jb);
        respond_json(msg, 200, json_builder_get_root(jb));
}

static void answer_loaded(Bridge *b, SoupServerMessage *msg, JsonObject *o, const char *model,
                          bool chat) {
        JsonNode *keep = json_object_get_member(o, "keep_alive");
        bool unload = false;

        /* 0 or "0" (any unit): the client asks for the model to be unloaded; the engine's
         * model stays (it serves everyone), but the answer is the one Ollama gives */
        if (keep && JSON_NODE_HOLDS_VALUE(keep)) {
                GType t = json_node_get_value_type(keep);
                if (t == G_TYPE_INT64 || t == G_TYPE_DOUBLE)
                        unload = json_node_get_double(keep) == 0;
                else if (t == G_TYPE_STRING)
                        unload = strtod(json_node_get_string(keep), NULL) == 0 &&
                                 g_ascii_isdigit(json_node_get_string(keep)[0]);
        }
        model_query(b, msg, API_OLLAMA, model, load_answer, (chat ? LOAD_CHAT : 0) | (unload ? LOAD_UNLOAD : 0));
}

static void generate(Bridge *b, SoupServerMessage *msg, bool chat) {
        g_autoptr(JsonParser) parser = NULL;
        g_auto(GVariantBuilder) opts = G_VARIANT_BUILDER_INIT(G_VARIANT_TYPE_VARDICT);
        g_auto(Fail) f = {};
        g_autofree char *prompt = NULL;
        g_autoptr(GArray) turns = NULL;
        JsonObject *o, *options = NULL;
        const char *model = NULL, *system = NULL;
        bool stream = true, raw = false, raw_set = false, proactive, tools = false, fim = false, logprobs = false,
             think = false;
        guint32 max_tokens = 0;
        gint64 top = 0;
        bool top_set = false;
        Call *c;

        o = body_object(b, msg, &parser, &f);
        if (!o || !field_string(o, "model", &model, &f) || !field_bool(o, "stream", &stream, NULL, &f) ||
            !field_object(o, "options", &options, &f) || !structured_options(o, chat, &opts, &tools, &fim, &think, &f) ||
            (options && !ollama_options(options, &opts, &max_tokens, &f)) || !parse_priority(msg, o, &proactive, &f) ||
            !field_bool(o, "logprobs", &logprobs, NULL, &f) || !field_int(o, "top_logprobs", &top, &top_set, &f))
                goto fail;
        /* each token's log-probability, and top_logprobs alternatives' (Ollama's fields) */
        if (top_set && (top < 0 || top > 20)) {
                fail_bad(&f, "top_logprobs must be from 0 to 20, got %" G_GINT64_FORMAT, top);
                goto fail;
        }
        if (logprobs)
                g_variant_builder_add(&opts, "{sv}", "logprobs", g_variant_new_uint32((guint32) top));
        if (!model || !*model) {
                fail_bad(&f, "model is required");
                goto fail;
        }
        if (chat) {
                JsonArray *msgs = NULL;
                if (!field_array(o, "messages", &msgs, &f))
                        goto fail;
                if (!msgs || json_array_get_length(msgs) == 0) {
                        answer_loaded(b, msg, o, model, chat);
                        return;
                }
                turns = turns_new();
                if (!messages_to_turns(msgs, false, turns, &prompt, &f))
                        goto fail;
        } else {
                const char *p = NULL;
                if (!field_string(o, "prompt", &p, &f) || !field_string(o, "system", &system, &f) ||
                    !field_bool(o, "raw", &raw, &raw_set, &f))
                        goto fail;
                if (!p || !*p) {
                        answer_loaded(b, msg, o, model, chat);
                        return;
                }
                prompt = g_strdup(p);
                if (raw)
                        g_variant_builder_add(&opts, "{sv}", "raw", g_variant_new_boolean(TRUE));
        }
        /* filling in the middle takes no system prompt */
        if (system && *system && !raw && !fim)
                g_variant_builder_add(&opts, "{sv}", "system", g_variant_new_string(system));

        c = call_new(b, msg, &ollama_ops, 1);
        c->api_data = g_new0(OllamaData, 1);
        ((OllamaData *) c->api_data)->chat = chat;
        ((OllamaData *) c->api_data)->logprobs = logprobs;
        c->stream = stream;
        c->max_tokens = max_tokens;
        c->max_tokens_clamp = true;
        c->proactive = proactive;
        c->model = g_strdup(model);
        c->prompt = g_steal_pointer(&prompt);
        c->turns = g_steal_pointer(&turns);
        c->tools = tools;
        c->think = think;
        c->cacheable = chat && !tools && !turns_hold_tools(c->turns);
        c->options = g_variant_ref_sink(g_variant_builder_end(&opts));
        call_start(c);
        return;
fail:
        respond_error(msg, API_OLLAMA, &f);
}

/* Ollama's short form of a parameter count: "8.0B", "494.03M", "135M" */
static char *human_count(guint64 n) {
        if (n >= 1000000000)
                return n % 1000000000 == 0 ? g_strdup_printf("%" G_GUINT64_FORMAT "B", n / 1000000000)
                                           : g_strdup_printf("%.1fB", n / 1e9);
        if (n >= 1000000)
                return n % 1000000 == 0 ? g_strdup_printf("%" G_GUINT64_FORMAT "M", n / 1000000)
                                        : g_strdup_printf("%.2fM", n / 1e6);
        if (n >= 1000)
                return g_strdup_printf("%.0fK", n / 1e3);
        return g_strdup_printf("%" G_GUINT64_FORMAT, n);
}

static const char *info_str(GVariant *info, const char *key) {
        const char *v = "";
        (void) g_variant_lookup(info, key, "&s", &v);
        return v;
}

static guint64 info_u64(GVariant *info, const char *key) {
        guint64 t = 0;
        guint32 u = 0;
        if (g_variant_lookup(info, key, "t", &t))
                return t;
        return g_variant_lookup(info, key, "u", &u) ? u : 0;
}

/* Ollama's "details" of a model from the engine's ModelInfo */
static void add_details(JsonBuilder *jb, GVariant *info) {
        const char *arch = info_str(info, "architecture"), *ft = info_str(info, "file_type");
        g_autofree char *size = human_count(info_u64(info, "parameters"));

        json_builder_set_member_name(jb, "details");
        json_builder_begin_object(jb);
        json_builder_set_member_name(jb, "parent_model");
        json_builder_add_string_value(jb, "");
        json_builder_set_member_name(jb, "format");
        json_builder_add_string_value(jb, "gguf");
        json_builder_set_member_name(jb, "family");
        json_builder_add_string_value(jb, arch);
        json_builder_set_member_name(jb, "families");
        json_builder_begin_array(jb);
        json_builder_add_string_value(jb, arch);
        json_builder_end_array(jb);
        json_builder_set_member_name(jb, "parameter_size");
        json_builder_add_string_value(jb, size);
        json_builder_set_member_name(jb, "quantization_level");
        json_builder_add_string_value(jb, *ft ? ft : "unknown");
        json_builder_end_object(jb);
}

/* GET /api/tags (ps 0) and /api/ps (ps 1): the engine's model, none while none is loaded */
static void list_answer(SoupServerMessage *msg, const char *want, const char *model, GVariant *info,
                        int ps) {
        g_autoptr(JsonBuilder) jb = json_builder_new();

        json_builder_begin_object(jb);
        json_builder_set_member_name(jb, "models");
        json_builder_begin_array(jb);
        if (*model) {
                json_builder_begin_object(jb);
                json_builder_set_member_name(jb, "name");
                json_builder_add_string_value(jb, model);
                json_builder_set_member_name(jb, "model");
                json_builder_add_string_value(jb, model);
                if (!ps) {
                        json_builder_set_member_name(jb, "modified_at");
                        json_builder_add_string_value(jb, "1970-01-01T00:00:00Z");
                }
                add_int(jb, "size", (gint64) info_u64(info, "size"));
                json_builder_set_member_name(jb, "digest");
                json_builder_add_string_value(jb, "");
                add_details(jb, info);
                if (ps) {
                        json_builder_set_member_name(jb, "expires_at");
                        json_builder_add_string_value(jb, "9999-12-31T23:59:59Z");
                        add_int(jb, "size_vram", 0);
                        add_int(jb, "context_length", (gint64) info_u64(info, "context_length"));
                }
                json_builder_end_object(jb);
        }
        json_builder_end_array(jb);
        json_builder_end_object(jb);
        respond_json(msg, 200, json_builder_get_root(jb));
}

/* POST /api/show {"model": NAME} (older clients: "name"): what editors ask before they use
 * a model: its details, its context ("<arch>.context_length" in model_info, the positions a
 * request gets here), its width ("<arch>.embedding_length") and its capabilities ("tools"
 * where the chat template takes them, "insert" where the vocabulary has fill-in-the-middle
 * tokens). */
static void show_answer(SoupServerMessage *msg, const char *want, const char *model, GVariant *info,
                        int unused) {
        const char *arch = info_str(info, "architecture"), *ft = info_str(info, "file_type");
        guint64 n_ctx = info_u64(info, "context_length");
        gboolean tools = FALSE, fim = FALSE;
        g_autofree char *ctx_key = g_strdup_printf("%s.context_length", arch);
        g_autofree char *params = g_strdup_printf("num_ctx %" G_GUINT64_FORMAT, n_ctx);
        g_autoptr(JsonBuilder) jb = json_builder_new();

        (void) g_variant_lookup(info, "tools", "b", &tools);
        (void) g_variant_lookup(info, "fim", "b", &fim);
        json_builder_begin_object(jb);
        json_builder_set_member_name(jb, "modelfile");
        json_builder_add_string_value(jb, "");
        json_builder_set_member_name(jb, "parameters");
        json_builder_add_string_value(jb, params);
        json_builder_set_member_name(jb, "template");
        json_builder_add_string_value(jb, "");
        add_details(jb, info);
        json_builder_set_member_name(jb, "model_info");
        json_builder_begin_object(jb);
        json_builder_set_member_name(jb, "general.architecture");
        json_builder_add_string_value(jb, arch);
        json_builder_set_member_name(jb, "general.basename");
        json_builder_add_string_value(jb, model);
        add_int(jb, "general.parameter_count", (gint64) info_u64(info, "parameters"));
        if (*ft) {
                json_builder_set_member_name(jb, "general.file_type_name");
                json_builder_add_string_value(jb, ft);
        }
        add_int(jb, ctx_key, (gint64) n_ctx);
        guint64 width = info_u64(info, "embedding_length");
        if (width) {
                g_autofree char *width_key = g_strdup_printf("%s.embedding_length", arch);
                add_int(jb, width_key, (gint64) width);
        }
        json_builder_end_object(jb);
        json_builder_set_member_name(jb, "capabilities");
        json_builder_begin_array(jb);
        json_builder_add_string_value(jb, "completion");
        if (tools)
                json_builder_add_string_value(jb, "tools");
        if (fim) /* Ollama's word for a suffix it fills up to */
                json_builder_add_string_value(jb, "insert");
        json_builder_end_array(jb);
        json_builder_set_member_name(jb, "modified_at");
        json_builder_add_string_value(jb, "1970-01-01T00:00:00Z");
        json_builder_end_object(jb);
        respond_json(msg, 200, json_builder_get_root(jb));
}

static void show_model(Bridge *b, SoupServerMessage *msg) {
        g_autoptr(JsonParser) parser = NULL;
        g_auto(Fail) f = {};
        const char *model = NULL, *name = NULL;
        JsonObject *o = body_object(b, msg, &parser, &f);

        if (!o || !field_string(o, "model", &model, &f) || !field_string(o, "name", &name, &f)) {
                respond_error(msg, API_OLLAMA, &f);
                return;
        }
        if (!model || !*model)
                model = name;
        if (!model || !*model) {
                fail_bad(&f, "model is required");
                respond_error(msg, API_OLLAMA, &f);
                return;
        }
        model_query(b, msg, API_OLLAMA, model, show_answer, 0);
}

bool ollama_route(Bridge *b, SoupServerMessage *msg, const char *method, const char *path) {
        static const char *const known[] = { "/api/chat", "/api/generate", "/api/show", "/api/tags",
                                             "/api/ps", "/api/version" };
        bool post = strcmp(method, "POST") == 0;
        bool get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
        g_auto(Fail) f = {};

        if (strcmp(path, "/api/chat") == 0 && post)
                generate(b, msg, true);
        else if (strcmp(path, "/api/generate") == 0 && post)
                generate(b, msg, false);
        else if (strcmp(path, "/api/show") == 0 && post)
                show_model(b, msg);
        else if (strcmp(path, "/api/tags") == 0 && get)
                model_query(b, msg, API_OLLAMA, NULL, list_answer, 0);
        else if (strcmp(path, "/api/ps") == 0 && get)
                model_query(b, msg, API_OLLAMA, NULL, list_answer, 1);
        else if (strcmp(path, "/api/version") == 0 && get) {
                g_autoptr(JsonBuilder) jb = json_builder_new();
                json_builder_begin_object(jb);
                json_builder_set_member_name(jb, "version");
                json_builder_add_string_value(jb, AXP_VERSION);
                json_builder_end_object(jb);
                respond_json(msg, 200, json_builder_get_root(jb));
        } else {
                for (size_t i = 0; i < G_N_ELEMENTS(known); i++)
                        if (strcmp(path, known[i]) == 0) {
                                fail_set(&f, 405, NULL, NULL, "%s is not allowed on %s", method, path);
                                respond_error(msg, API_OLLAMA, &f);
                                return true;
                        }
                if (g_str_has_prefix(path, "/api/")) {
                        /* pull, push, create, delete...: the models are the engine's */
                        fail_set(&f, 404, NULL, NULL, "%s %s is not supported by agentxpu", method,
                                 path);
                        respond_error(msg, API_OLLAMA, &f);
                        return true;
                }
                return false;
        }
        return true;
}
