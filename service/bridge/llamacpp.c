/* SPDX-License-Identifier: MIT */
/* llama-server's own fill-in-the-middle endpoint, POST /infill, which code editors' plugins
 * (llama.vim, llama.vscode) call: the text before and after the cursor, what is typed at it
 * ("prompt") and chunks of other files ("input_extra"), in the model's FIM tokens and fitted
 * as llama-server fits them (the engine's options suffix, fim_middle, fim_extra, fim_fit).
 * The answer is llama-server's completion object (content, tokens_predicted,
 * tokens_evaluated, truncated, timings, ...), whole or streamed as SSE events, and
 * "response_fields" picks fields from it by path ("timings/prompt_n") as llama-server does.
 * n_predict 0 only prefills (an editor sends its extra context ahead that way), which leaves
 * the prompt in the engine's prompt cache for the next request. As llama-server does
 * (stop_type "limit"): t_max_predict_ms ends the answer at a piece holding a new line once
 * that long has passed since its first text, and n_indent at a line indented less than that
 * many spaces or tabs, that line cut after its indentation. Fields it has no use for
 * (id_slot, cache_prompt, samplers, t_max_prompt_ms) are left alone, as llama-server leaves
 * unknown ones. */
#include "bridge.h"

#include <string.h>

typedef struct InfillData {
        bool warm_up;                   /* n_predict 0: the prompt prefilled, no text */
        gint64 t_max_predict_us;        /* 0: none */
        gint64 t_first;                 /* monotonic µs of the first text */
        gint64 n_indent;                /* 0: none */
        gsize last_nl;                  /* n_indent: where the line after the last new line seen begins */
        gsize cut;                      /* n_indent: the answer ends here (0: not cut) */
        JsonArray *fields;              /* response_fields, or NULL for the whole object */
        JsonParser *parser;             /* holds fields */
} InfillData;

static void infill_data_free(InfillData *d) {
        if (d->parser)
                g_object_unref(d->parser);
        g_free(d);
}

static JsonBuilder *object_begin(void) {
        JsonBuilder *jb = json_builder_new();
        json_builder_begin_object(jb);
        return jb;
}

static void add_member_int(JsonBuilder *jb, const char *name, gint64 v) {
        json_builder_set_member_name(jb, name);
        json_builder_add_int_value(jb, v);
}

static void add_member_double(JsonBuilder *jb, const char *name, double v) {
        json_builder_set_member_name(jb, name);
        json_builder_add_double_value(jb, v);
}

/* What every object of llama-server's answer begins with */
static void add_head(JsonBuilder *jb, const char *text, bool stop, int id_slot) {
        add_member_int(jb, "index", 0);
        json_builder_set_member_name(jb, "content");
        json_builder_add_string_value(jb, text);
        json_builder_set_member_name(jb, "tokens");
        json_builder_begin_array(jb);
        json_builder_end_array(jb);
        add_member_int(jb, "id_slot", id_slot);
        json_builder_set_member_name(jb, "stop");
        json_builder_add_boolean_value(jb, stop);
}

/* llama-server's completion object for the answer, at its end */
static JsonNode *final_object(Call *c) {
        InfillData *d = c->api_data;
        Choice *ch = &c->choices[0];
        const EngineStats *st = &ch->st;
        g_autofree char *text = g_strndup(d->warm_up ? "" : ch->text->str, d->cut ? d->cut : ch->text->len);
        gint64 generated = d->warm_up ? 0 : st->generated_tokens;
        gint64 cached = MAX((gint64) st->prompt_tokens - st->prefill_tokens, 0);
        double prompt_ms = st->ttft_s * 1e3, predicted_ms = (st->latency_s - st->ttft_s) * 1e3;
        g_autoptr(JsonBuilder) jb = object_begin();

        add_head(jb, text, true, 0);
        json_builder_set_member_name(jb, "model");
        json_builder_add_string_value(jb, c->model);
        add_member_int(jb, "tokens_predicted", generated);
        add_member_int(jb, "tokens_evaluated", st->prompt_tokens);
        json_builder_set_member_name(jb, "has_new_line");
        json_builder_add_boolean_value(jb, strchr(text, '\n') != NULL);
        json_builder_set_member_name(jb, "truncated");
        json_builder_add_boolean_value(jb, st->prompt_cut);
        json_builder_set_member_name(jb, "stop_type");
        json_builder_add_string_value(jb, g_strcmp0(ch->reason, "length") == 0 && !d->warm_up ? "limit"
                                          : st->stop_word                                       ? "word"
                                                                                                : "eos");
        json_builder_set_member_name(jb, "stopping_word");
        json_builder_add_string_value(jb, st->stop_word ? st->stop_word : "");
        add_member_int(jb, "tokens_cached", (gint64) st->prompt_tokens + generated);
        json_builder_set_member_name(jb, "timings");
        json_builder_begin_object(jb);
        add_member_int(jb, "cache_n", cached);
        add_member_int(jb, "prompt_n", st->prefill_tokens);
        add_member_double(jb, "prompt_ms", prompt_ms);
        add_member_double(jb, "prompt_per_token_ms", st->prefill_tokens ? prompt_ms / st->prefill_tokens : 0);
        add_member_double(jb, "prompt_per_second", prompt_ms > 0 ? st->prefill_tokens * 1e3 / prompt_ms : 0);
        add_member_int(jb, "predicted_n", generated);
        add_member_double(jb, "predicted_ms", predicted_ms > 0 ? predicted_ms : 0);
        add_member_double(jb, "predicted_per_token_ms", generated ? predicted_ms / generated : 0);
        add_member_double(jb, "predicted_per_second", predicted_ms > 0 ? generated * 1e3 / predicted_ms : 0);
        json_builder_end_object(jb);
        json_builder_end_object(jb);
        return json_builder_get_root(jb);
}

/* response_fields: each path's value under the path itself ("timings/prompt_n"), paths that
 * name nothing left out */
static JsonNode *pick_fields(JsonNode *whole, JsonArray *fields) {
        g_autoptr(JsonBuilder) jb = object_begin();
        for (guint i = 0; i < json_array_get_length(fields); i++) {
                const char *path = json_array_get_string_element(fields, i);
                g_auto(GStrv) parts = g_strsplit(path, "/", -1);
                JsonNode *n = whole;
                for (char **p = parts; n && *p; p++)
                        n = JSON_NODE_HOLDS_OBJECT(n) && json_object_has_member(json_node_get_object(n), *p)
                                    ? json_object_get_member(json_node_get_object(n), *p)
                                    : NULL;
                if (!n || n == whole)
                        continue;
                json_builder_set_member_name(jb, path);
                json_builder_add_value(jb, json_node_copy(n));
        }
        json_builder_end_object(jb);
        return json_builder_get_root(jb);
}

static void send_sse(Call *c, JsonNode *node) {
        g_autofree char *json = node_to_json(node, NULL);
        g_autofree char *event = g_strdup_printf("data: %s\n\n", json);
        call_write(c, event, strlen(event));
}

static void infill_begin(Call *c) {
}

static void infill_token(Call *c, Choice *ch, const char *thinking, const char *text) {
        InfillData *d = c->api_data;
        gsize len = strlen(text), at = ch->text->len - len; /* where the piece begins */
        if (d->warm_up || (d->cut && d->cut <= at))
                return;
        g_autofree char *piece = g_strndup(text, d->cut ? d->cut - at : len);
        g_autoptr(JsonBuilder) jb = object_begin();
        add_head(jb, piece, false, -1);
        json_builder_end_object(jb);
        g_autoptr(JsonNode) node = json_builder_get_root(jb);
        send_sse(c, node);
}

static void infill_finish(Call *c) {
        InfillData *d = c->api_data;
        g_autoptr(JsonNode) whole = final_object(c);
        g_autoptr(JsonNode) out = d->fields ? pick_fields(whole, d->fields) : json_node_ref(whole);

        if (c->stream) {
                /* streamed, the last event's content is empty: the text went before it */
                if (!d->fields && !d->warm_up)
                        json_object_set_string_member(json_node_get_object(out), "content", "");
                send_sse(c, out);
                call_end(c);
                return;
        }
        if (!c->gone) {
                respond_json(c->msg, 200, g_steal_pointer(&out));
                soup_server_message_unpause(c->msg);
        }
}

static void infill_stream_error(Call *c, const Fail *f) {
        g_autoptr(JsonBuilder) jb = object_begin();
        json_builder_set_member_name(jb, "error");
        json_builder_begin_object(jb);
        add_member_int(jb, "code", f->status);
        json_builder_set_member_name(jb, "message");
        json_builder_add_string_value(jb, f->message);
        json_builder_set_member_name(jb, "type");
        json_builder_add_string_value(jb, f->type ? f->type : "server_error");
        json_builder_end_object(jb);
        json_builder_end_object(jb);
        g_autoptr(JsonNode) node = json_builder_get_root(jb);
        send_sse(c, node);
        call_end(c);
}

/* llama-server's limits after each piece: n_indent (the line after the last new line, once it
 * shows text, indented less: cut where its text begins), then t_max_predict_ms (past it
 * since the first text, at a piece that holds a new line) */
static bool infill_enough(Call *c, Choice *ch, const char *piece) {
        InfillData *d = c->api_data;
        const char *s = ch->text->str;
        gint64 now = g_get_monotonic_time();
        if (!d->t_first)
                d->t_first = now;
        if (d->n_indent > 0) {
                if (d->last_nl > 0) {
                        gsize pos = d->last_nl;
                        gint64 indent = 0;
                        while (s[pos] == ' ' || s[pos] == '\t')
                                pos++, indent++;
                        if (s[pos] && indent < d->n_indent) {
                                d->cut = pos;
                                return true;
                        }
                }
                const char *nl = strchr(s + d->last_nl, '\n');
                if (nl)
                        d->last_nl = (gsize) (nl - s) + 1;
        }
        return d->t_max_predict_us > 0 && now - d->t_first > d->t_max_predict_us && strchr(piece, '\n');
}

static const CallOps infill_ops = {
        .api = API_OPENAI,
        .stream_type = "text/event-stream",
        .begin = infill_begin,
        .token = infill_token,
        .finish = infill_finish,
        .stream_error = infill_stream_error,
        .enough = infill_enough,
        .free_data = (void (*)(void *)) infill_data_free,
};

/* input_extra: [{"text": string, "filename": string (optional)}...] as the engine's fim_extra */
static bool extra_option(JsonObject *o, GVariantBuilder *opts, Fail *f) {
        JsonArray *extra = NULL;
        if (!field_array(o, "input_extra", &extra, f))
                return false;
        if (!extra || json_array_get_length(extra) == 0)
                return true;
        GVariantBuilder chunks;
        g_variant_builder_init(&chunks, G_VARIANT_TYPE("a(ss)"));
        for (guint i = 0; i < json_array_get_length(extra); i++) {
                JsonNode *n = json_array_get_element(extra, i);
                const char *text = NULL, *name = NULL;
                if (!JSON_NODE_HOLDS_OBJECT(n) || !field_string(json_node_get_object(n), "text", &text, f) || !text ||
                    !field_string(json_node_get_object(n), "filename", &name, f)) {
                        g_variant_builder_clear(&chunks);
                        if (!f->message)
                                fail_bad(f, "'input_extra' must be an array of {\"filename\": string, \"text\": string}");
                        return false;
                }
                g_variant_builder_add(&chunks, "(ss)", name ? name : "", text);
        }
        g_variant_builder_add(opts, "{sv}", "fim_extra", g_variant_builder_end(&chunks));
        return true;
}

static void infill(Bridge *b, SoupServerMessage *msg) {
        g_autoptr(JsonParser) parser = NULL;
        g_auto(GVariantBuilder) opts = G_VARIANT_BUILDER_INIT(G_VARIANT_TYPE_VARDICT);
        g_auto(Fail) f = {};
        JsonObject *o;
        JsonArray *fields = NULL;
        const char *prefix = NULL, *suffix = NULL, *middle = NULL, *model = NULL;
        bool stream = false, proactive, n_set = false, t_set = false, i_set = false;
        gint64 n_predict = -1, t_max = 0, n_indent = 0;
        Call *c;

        o = body_object(b, msg, &parser, &f);
        if (!o || !field_string(o, "input_prefix", &prefix, &f) || !field_string(o, "input_suffix", &suffix, &f) ||
            !field_string(o, "prompt", &middle, &f) || !field_string(o, "model", &model, &f) ||
            !field_bool(o, "stream", &stream, NULL, &f) || !field_int(o, "n_predict", &n_predict, &n_set, &f) ||
            !field_int(o, "t_max_predict_ms", &t_max, &t_set, &f) || !field_int(o, "n_indent", &n_indent, &i_set, &f) ||
            !field_array(o, "response_fields", &fields, &f) || !extra_option(o, &opts, &f) ||
            !sampler_fields(o, &opts, &f) || !parse_priority(msg, o, &proactive, &f))
                goto fail;
        if (!prefix || !suffix) {
                fail_bad(&f, "\"%s\" is required", !prefix ? "input_prefix" : "input_suffix");
                goto fail;
        }
        for (guint i = 0; fields && i < json_array_get_length(fields); i++) {
                JsonNode *n = json_array_get_element(fields, i);
                if (!JSON_NODE_HOLDS_VALUE(n) || json_node_get_value_type(n) != G_TYPE_STRING) {
                        fail_bad(&f, "'response_fields' must be an array of strings");
                        goto fail;
                }
        }
        if (n_predict < -1) {
                fail_bad(&f, "'n_predict' must be -1 (no limit), 0 (prefill only) or more, got %" G_GINT64_FORMAT,
                         n_predict);
                goto fail;
        }
        /* the suffix, even an empty one, makes it fill in the middle */
        g_variant_builder_add(&opts, "{sv}", "suffix", g_variant_new_string(suffix));
        if (middle && *middle)
                g_variant_builder_add(&opts, "{sv}", "fim_middle", g_variant_new_string(middle));
        g_variant_builder_add(&opts, "{sv}", "fim_fit", g_variant_new_boolean(TRUE));

        c = call_new(b, msg, &infill_ops, 1);
        InfillData *d = g_new0(InfillData, 1);
        c->api_data = d;
        d->warm_up = n_predict == 0;
        d->t_max_predict_us = t_max > 0 ? MIN(t_max, G_MAXINT64 / 1000) * 1000 : 0;
        d->n_indent = MAX(n_indent, 0);
        if (fields) {
                d->fields = fields;
                d->parser = g_object_ref(parser);
        }
        c->stream = stream;
        /* -1: the engine's limit; 0: one token, not shown, so that the prompt is prefilled */
        c->max_tokens = n_predict == 0 ? 1 : n_predict > 0 ? (guint32) MIN(n_predict, (gint64) G_MAXUINT32) : 0;
        c->max_tokens_clamp = true;
        c->proactive = proactive;
        /* llama-server serves its one model whatever a request names; here a name is checked */
        c->model = g_strdup(model ? model : "");
        c->any_model = !model || !*model;
        c->prompt = g_strdup(prefix);
        c->options = g_variant_ref_sink(g_variant_builder_end(&opts));
        call_start(c);
        return;
fail:
        respond_error(msg, API_OPENAI, &f);
}

bool llamacpp_route(Bridge *b, SoupServerMessage *msg, const char *method, const char *path) {
        g_auto(Fail) f = {};

        if (strcmp(path, "/infill") != 0)
                return false;
        if (strcmp(method, "POST") == 0)
                infill(b, msg);
        else {
                fail_set(&f, 405, "invalid_request_error", "method_not_allowed", "%s is not allowed on %s", method,
                         path);
                respond_error(msg, API_OPENAI, &f);
        }
        return true;
}
