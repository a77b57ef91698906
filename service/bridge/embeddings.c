/* SPDX-License-Identifier: MIT */
/* Embeddings: OpenAI's POST /v1/embeddings and Ollama's POST /api/embed and (the older)
 * /api/embeddings, each input an Engine.Embed call of its own, a few in flight at a time,
 * answered together in the order given.
 *
 * OpenAI's input is a string or an array of strings (arrays of token ids are refused: they
 * would be another tokenizer's ids); encoding_format "base64" (the official clients' default)
 * gives each vector as little-endian float32 bytes in base64. Ollama's /api/embed cuts a text
 * beyond the context (truncate, default true); /api/embeddings answers one prompt, not scaled
 * to unit length, as Ollama's does. A client that leaves stops the inputs not yet sent; those
 * in the engine finish there (each one prefill) and are dropped. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bridge.h"

/* Engine.Embed calls in flight for one HTTP request: several inputs prefill side by side in
 * the engine without taking all of the user's RequestsPerUser= (16) */
#define EMBED_IN_FLIGHT 4
/* inputs of one request, as OpenAI allows */
#define EMBED_MAX_INPUTS 2048

typedef enum Form {
        FORM_OPENAI,        /* /v1/embeddings */
        FORM_OLLAMA,        /* /api/embed */
        FORM_OLLAMA_LEGACY, /* /api/embeddings */
} Form;

typedef struct Embedding {
        int ref;
        Bridge *b;
        SoupServerMessage *msg;
        Form form;
        Api api;
        char *model;            /* as the client named it */
        GPtrArray *inputs;      /* char*, in order */
        GVariant *options;      /* Embed's a{sv} */
        bool base64;
        gint64 dimensions;      /* > 0: the width the client expects */
        GVariant **vectors;     /* the engine's `ad` of each input, once answered */
        guint next, answered;   /* inputs sent, and answered: next - answered are in the engine */
        guint prompt_tokens;
        bool gone, failed;
        gulong disconnected_id;
        gint64 t0;
} Embedding;

static void embedding_unref(Embedding *e) {
        if (--e->ref > 0)
                return;
        if (e->disconnected_id)
                g_signal_handler_disconnect(e->msg, e->disconnected_id);
        g_object_unref(e->msg);
        for (guint i = 0; e->vectors && i < e->inputs->len; i++)
                if (e->vectors[i])
                        g_variant_unref(e->vectors[i]);
        g_free(e->vectors);
        g_ptr_array_unref(e->inputs);
        if (e->options)
                g_variant_unref(e->options);
        g_free(e->model);
        g_free(e);
}

static void on_disconnected(SoupServerMessage *msg, gpointer data) {
        Embedding *e = data;
        if (!e->gone)
                g_message("%s %s: the client left; its inputs not yet sent are dropped",
                          soup_server_message_get_method(msg), g_uri_get_path(soup_server_message_get_uri(msg)));
        e->gone = true;
}

/* Answers with `f` unless the answer is out or its client gone. */
static void embedding_fail(Embedding *e, Fail *f) {
        if (e->gone || e->failed)
                return;
        e->failed = true;
        respond_error(e->msg, e->api, f);
        soup_server_message_unpause(e->msg);
}

/* A float as JSON writes it shortest: the double nearest its 9 significant digits */
static void add_float(JsonBuilder *jb, double x) {
        char buf[G_ASCII_DTOSTR_BUF_SIZE];
        g_ascii_formatd(buf, sizeof(buf), "%.9g", (float) x);
        json_builder_add_double_value(jb, g_ascii_strtod(buf, NULL));
}

static void add_vector(JsonBuilder *jb, GVariant *v, bool base64) {
        gsize n;
        const double *d = g_variant_get_fixed_array(v, &n, sizeof(double));

        if (base64) {
                g_autofree float *f = g_new(float, MAX(n, 1));
                for (gsize i = 0; i < n; i++) {
                        float x = (float) d[i];
                        guint32 bits;
                        memcpy(&bits, &x, 4);
                        bits = GUINT32_TO_LE(bits);
                        memcpy(&f[i], &bits, 4);
                }
                g_autofree char *s = g_base64_encode((const guchar *) f, n * sizeof(float));
                json_builder_add_string_value(jb, s);
                return;
        }
        json_builder_begin_array(jb);
        for (gsize i = 0; i < n; i++)
                add_float(jb, d[i]);
        json_builder_end_array(jb);
}

/* Whether the client's dimensions (if any) are the model's width */
static bool dimensions_check(Embedding *e, guint64 width, Fail *f) {
        if (e->dimensions > 0 && (guint64) e->dimensions != width)
                return fail_bad(f, "'dimensions' is %" G_GINT64_FORMAT "; this model's embeddings have %" G_GUINT64_FORMAT,
                                e->dimensions, width);
        return true;
}

static void embedding_answer(Embedding *e) {
        g_autoptr(JsonBuilder) jb = json_builder_new();
        g_auto(Fail) f = {};
        gsize width = 0;

        g_variant_get_fixed_array(e->vectors[0], &width, sizeof(double));
        if (!dimensions_check(e, width, &f)) { /* an engine whose ModelInfo has no width */
                embedding_fail(e, &f);
                return;
        }
        json_builder_begin_object(jb);
        switch (e->form) {
        case FORM_OPENAI:
                json_builder_set_member_name(jb, "object");
                json_builder_add_string_value(jb, "list");
                json_builder_set_member_name(jb, "data");
                json_builder_begin_array(jb);
                for (guint i = 0; i < e->inputs->len; i++) {
                        json_builder_begin_object(jb);
                        json_builder_set_member_name(jb, "object");
                        json_builder_add_string_value(jb, "embedding");
                        json_builder_set_member_name(jb, "index");
                        json_builder_add_int_value(jb, i);
                        json_builder_set_member_name(jb, "embedding");
                        add_vector(jb, e->vectors[i], e->base64);
                        json_builder_end_object(jb);
                }
                json_builder_end_array(jb);
                json_builder_set_member_name(jb, "model");
                json_builder_add_string_value(jb, e->model);
                json_builder_set_member_name(jb, "usage");
                json_builder_begin_object(jb);
                json_builder_set_member_name(jb, "prompt_tokens");
                json_builder_add_int_value(jb, e->prompt_tokens);
                json_builder_set_member_name(jb, "total_tokens");
                json_builder_add_int_value(jb, e->prompt_tokens);
                json_builder_end_object(jb);
                break;
        case FORM_OLLAMA:
                json_builder_set_member_name(jb, "model");
                json_builder_add_string_value(jb, e->model);
                json_builder_set_member_name(jb, "embeddings");
                json_builder_begin_array(jb);
                for (guint i = 0; i < e->inputs->len; i++)
                        add_vector(jb, e->vectors[i], false);
                json_builder_end_array(jb);
                json_builder_set_member_name(jb, "total_duration");
                json_builder_add_int_value(jb, (g_get_monotonic_time() - e->t0) * 1000);
                json_builder_set_member_name(jb, "load_duration");
                json_builder_add_int_value(jb, 0);
                json_builder_set_member_name(jb, "prompt_eval_count");
                json_builder_add_int_value(jb, e->prompt_tokens);
                break;
        case FORM_OLLAMA_LEGACY:
                json_builder_set_member_name(jb, "embedding");
                add_vector(jb, e->vectors[0], false);
                break;
        }
        json_builder_end_object(jb);
        respond_json(e->msg, 200, json_builder_get_root(jb));
        soup_server_message_unpause(e->msg);
}

static void send_next(Embedding *e);

/* One input's call: its index with it */
typedef struct InputCall {
        Embedding *e;
        guint index;
} InputCall;

static void on_input_embedded(void *userdata, GVariant *v, const EngineStats *st, const char *error_name,
                              const char *message) {
        g_autofree InputCall *c = userdata;
        Embedding *e = c->e;

        if (!v) {
                g_auto(Fail) f = {};
                fail_from_engine(&f, error_name, message);
                embedding_fail(e, &f);
        } else {
                e->vectors[c->index] = g_variant_ref(v);
                e->prompt_tokens += st->prompt_tokens;
                e->answered++;
        }
        if (!e->gone && !e->failed) {
                if (e->answered == e->inputs->len)
                        embedding_answer(e);
                else
                        send_next(e);
        }
        embedding_unref(e);
}

static void send_next(Embedding *e) {
        while (e->next - e->answered < EMBED_IN_FLIGHT && e->next < e->inputs->len) {
                InputCall *c = g_new0(InputCall, 1);
                c->e = e;
                c->index = e->next++;
                e->ref++;
                engine_link_embed(e->b->link, g_ptr_array_index(e->inputs, c->index), g_variant_ref(e->options),
                                  on_input_embedded, c);
        }
}

static void got_model(void *userdata, const char *model, GVariant *info, const char *error_name,
                      const char *message) {
        Embedding *e = userdata;
        g_auto(Fail) f = {};

        if (!e->gone) {
                guint32 width = 0;
                if (!model_check(e->api, e->model, model, error_name, message, &f) ||
                    (g_variant_lookup(info, "embedding_length", "u", &width) && width > 0 &&
                     !dimensions_check(e, width, &f)))
                        embedding_fail(e, &f);
                else
                        send_next(e);
        }
        embedding_unref(e);
}

/* The inputs: a string, or (lists) an array of strings; none empty. */
static bool read_inputs(JsonObject *o, const char *key, bool lists, GPtrArray *inputs, Fail *f) {
        JsonNode *n = json_object_get_member(o, key);

        if (!n || JSON_NODE_HOLDS_NULL(n))
                return fail_bad(f, "'%s' is required", key);
        if (JSON_NODE_HOLDS_VALUE(n) && json_node_get_value_type(n) == G_TYPE_STRING) {
                g_ptr_array_add(inputs, g_strdup(json_node_get_string(n)));
        } else if (lists && JSON_NODE_HOLDS_ARRAY(n)) {
                JsonArray *a = json_node_get_array(n);
                guint len = json_array_get_length(a);
                if (len == 0)
                        return fail_bad(f, "'%s' is an empty array", key);
                if (len > EMBED_MAX_INPUTS)
                        return fail_bad(f, "'%s' holds %u inputs; at most %d", key, len, EMBED_MAX_INPUTS);
                for (guint i = 0; i < len; i++) {
                        JsonNode *m = json_array_get_element(a, i);
                        if (!JSON_NODE_HOLDS_VALUE(m) || json_node_get_value_type(m) != G_TYPE_STRING)
                                return fail_bad(f, "'%s' must be a string or an array of strings (token ids are "
                                                   "another tokenizer's; send the text)", key);
                        g_ptr_array_add(inputs, g_strdup(json_node_get_string(m)));
                }
        } else
                return fail_bad(f, lists ? "'%s' must be a string or an array of strings" : "'%s' must be a string",
                                key);
        for (guint i = 0; i < inputs->len; i++)
                if (!*(const char *) g_ptr_array_index(inputs, i))
                        return fail_bad(f, inputs->len > 1 ? "'%s' holds an empty string (input %u)" : "'%s' is empty",
                                        key, i);
        return true;
}

static void embed_request(Bridge *b, SoupServerMessage *msg, Form form) {
        g_autoptr(JsonParser) parser = NULL;
        g_auto(Fail) f = {};
        Api api = form == FORM_OPENAI ? API_OPENAI : API_OLLAMA;
        const char *model = NULL, *encoding = NULL;
        bool proactive = false, truncate = form != FORM_OPENAI, set = false;
        gint64 dimensions = 0;
        JsonObject *o, *options = NULL;
        GVariantBuilder opts;
        Embedding *e;

        e = g_new0(Embedding, 1);
        *e = (Embedding) { .ref = 1, .b = b, .msg = g_object_ref(msg), .form = form, .api = api,
                           .inputs = g_ptr_array_new_with_free_func(g_free), .t0 = g_get_monotonic_time() };
        o = body_object(b, msg, &parser, &f);
        if (!o || !field_string(o, "model", &model, &f) || !parse_priority(msg, o, &proactive, &f) ||
            !field_int(o, "dimensions", &dimensions, &set, &f))
                goto fail;
        if (!model) {
                fail_bad(&f, api == API_OPENAI ? "'model' is required; GET /v1/models lists it"
                                               : "'model' is required; GET /api/tags lists it");
                goto fail;
        }
        if (set && dimensions <= 0) {
                fail_bad(&f, "'dimensions' must be a positive number");
                goto fail;
        }
        if (form == FORM_OPENAI) {
                if (!field_string(o, "encoding_format", &encoding, &f) || !read_inputs(o, "input", true, e->inputs, &f))
                        goto fail;
                if (encoding && strcmp(encoding, "float") != 0 && strcmp(encoding, "base64") != 0) {
                        fail_bad(&f, "'encoding_format' must be 'float' or 'base64'");
                        goto fail;
                }
                e->base64 = encoding && strcmp(encoding, "base64") == 0;
        } else {
                /* Ollama's options tune generation: checked for their type, none applies */
                if (!field_object(o, "options", &options, &f) ||
                    (form == FORM_OLLAMA && !field_bool(o, "truncate", &truncate, NULL, &f)) ||
                    !read_inputs(o, form == FORM_OLLAMA ? "input" : "prompt", form == FORM_OLLAMA, e->inputs, &f))
                        goto fail;
        }
        e->model = g_strdup(model);
        e->dimensions = dimensions;
        e->vectors = g_new0(GVariant *, e->inputs->len);
        g_variant_builder_init(&opts, G_VARIANT_TYPE("a{sv}"));
        g_variant_builder_add(&opts, "{sv}", "priority", g_variant_new_string(proactive ? "proactive" : "reactive"));
        g_variant_builder_add(&opts, "{sv}", "normalize", g_variant_new_boolean(form != FORM_OLLAMA_LEGACY));
        g_variant_builder_add(&opts, "{sv}", "truncate", g_variant_new_boolean(truncate));
        e->options = g_variant_ref_sink(g_variant_builder_end(&opts));

        soup_server_message_pause(msg);
        e->disconnected_id = g_signal_connect(msg, "disconnected", G_CALLBACK(on_disconnected), e);
        e->ref++; /* the model's answer */
        engine_link_get_model(b->link, got_model, e);
        embedding_unref(e);
        return;
fail:
        respond_error(msg, api, &f);
        embedding_unref(e);
}

bool embeddings_route(Bridge *b, SoupServerMessage *msg, const char *method, const char *path) {
        static const struct {
                const char *path;
                Form form;
        } routes[] = {
                { "/v1/embeddings", FORM_OPENAI },
                { "/api/embed", FORM_OLLAMA },
                { "/api/embeddings", FORM_OLLAMA_LEGACY },
        };
        g_auto(Fail) f = {};

        for (size_t i = 0; i < G_N_ELEMENTS(routes); i++) {
                if (strcmp(path, routes[i].path) != 0)
                        continue;
                if (strcmp(method, "POST") == 0)
                        embed_request(b, msg, routes[i].form);
                else {
                        bool openai = routes[i].form == FORM_OPENAI;
                        fail_set(&f, 405, openai ? "invalid_request_error" : NULL, openai ? "method_not_allowed" : NULL,
                                 "%s is not allowed on %s", method, path);
                        respond_error(msg, openai ? API_OPENAI : API_OLLAMA, &f);
                }
                return true;
        }
        return false;
}
