/* SPDX-License-Identifier: MIT */
/* OpenAI's API: POST /v1/chat/completions and /v1/completions (whole, or streamed as
 * server-sent events ending in "data: [DONE]"), GET /v1/models. */
#include "bridge.h"

#include <string.h>

typedef struct OpenAIData {
        bool chat;
} OpenAIData;

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

static void add_usage(JsonBuilder *jb, const EngineStats *st) {
        json_builder_set_member_name(jb, "usage");
        json_builder_begin_object(jb);
        json_builder_set_member_name(jb, "prompt_tokens");
        json_builder_add_int_value(jb, st->prompt_tokens);
        json_builder_set_member_name(jb, "completion_tokens");
        json_builder_add_int_value(jb, st->generated_tokens);
        json_builder_set_member_name(jb, "total_tokens");
        json_builder_add_int_value(jb, (gint64) st->prompt_tokens + st->generated_tokens);
        json_builder_end_object(jb);
}

/* One choice: a delta (chat, streamed), a message (chat, whole) or text (completions). */
static void add_choice(JsonBuilder *jb, bool chat, bool stream, const char *role, const char *text,
                       const char *finish_reason) {
        json_builder_set_member_name(jb, "choices");
        json_builder_begin_array(jb);
        json_builder_begin_object(jb);
        json_builder_set_member_name(jb, "index");
        json_builder_add_int_value(jb, 0);
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
                json_builder_end_object(jb);
        } else {
                json_builder_set_member_name(jb, "text");
                json_builder_add_string_value(jb, text ? text : "");
        }
        json_builder_set_member_name(jb, "logprobs");
        json_builder_add_null_value(jb);
        json_builder_set_member_name(jb, "finish_reason");
        if (finish_reason)
                json_builder_add_string_value(jb, finish_reason);
        else
                json_builder_add_null_value(jb);
        json_builder_end_object(jb);
        json_builder_end_array(jb);
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

static void stream_chunk(Call *c, const char *role, const char *text, const char *finish) {
        OpenAIData *d = c->api_data;
        g_autoptr(JsonBuilder) jb = chunk_begin(c, d->chat);
        add_choice(jb, d->chat, true, role, text, finish);
        if (c->include_usage) {
                json_builder_set_member_name(jb, "usage");
                json_builder_add_null_value(jb);
        }
        send_event(c, jb);
}

static void oa_begin(Call *c) {
        OpenAIData *d = c->api_data;
        if (d->chat)
                stream_chunk(c, "assistant", "", NULL);
}

static void oa_token(Call *c, const char *text) {
        stream_chunk(c, NULL, text, NULL);
}

static void oa_finish(Call *c, const char *reason, const EngineStats *st) {
        OpenAIData *d = c->api_data;

        if (c->stream) {
                {
                        g_autoptr(JsonBuilder) jb = chunk_begin(c, d->chat);
                        add_choice(jb, d->chat, true, NULL, d->chat ? NULL : "", reason);
                        if (c->include_usage) {
                                json_builder_set_member_name(jb, "usage");
                                json_builder_add_null_value(jb);
                        }
                        send_event(c, jb);
                }
                if (c->include_usage) {
                        g_autoptr(JsonBuilder) jb = chunk_begin(c, d->chat);
                        json_builder_set_member_name(jb, "choices");
                        json_builder_begin_array(jb);
                        json_builder_end_array(jb);
                        add_usage(jb, st);
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
        add_choice(jb, d->chat, false, d->chat ? "assistant" : NULL, c->text->str, reason);
        add_usage(jb, st);
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
        .finish = oa_finish,
        .stream_error = oa_stream_error,
};

/* Fields that ask for what the engine cannot do yet: refused, not ignored. */
static bool refuse_unsupported(JsonObject *o, Fail *f) {
        JsonObject *rf = NULL;
        JsonArray *tools = NULL;
        const char *type = NULL;
        JsonNode *n;
        gint64 count = 1;
        bool set = false;

        if (!field_object(o, "response_format", &rf, f))
                return false;
        if (rf) {
                if (!field_string(rf, "type", &type, f))
                        return false;
                if (g_strcmp0(type, "text") != 0)
                        return fail_set(f, 400, "invalid_request_error", "unsupported_parameter",
                                        "'response_format' of type '%s' is not supported yet: "
                                        "structured output has not landed in agentxpu",
                                        type ? type : "(none)");
        }
        if (!field_array(o, "tools", &tools, f) || !field_array(o, "functions", &tools, f))
                return false;
        if (tools && json_array_get_length(tools) > 0)
                return fail_set(f, 400, "invalid_request_error", "unsupported_parameter",
                                "'tools' are not supported yet: structured output has not landed "
                                "in agentxpu");
        n = json_object_get_member(o, "tool_choice");
        if (n && !JSON_NODE_HOLDS_NULL(n) &&
            !(JSON_NODE_HOLDS_VALUE(n) && json_node_get_value_type(n) == G_TYPE_STRING &&
              strcmp(json_node_get_string(n), "none") == 0))
                return fail_set(f, 400, "invalid_request_error", "unsupported_parameter",
                                "'tool_choice' is not supported yet: structured output has not "
                                "landed in agentxpu");
        if (!field_int(o, "n", &count, &set, f))
                return false;
        if (count != 1)
                return fail_set(f, 400, "invalid_request_error", "unsupported_parameter",
                                "'n' must be 1: one choice per request");
        return true;
}

/* Sampling fields into the engine's options. */
static bool sampling_options(JsonObject *o, GVariantBuilder *opts, Fail *f) {
        gint64 max = 0, seed = 0;
        double t = 0, p = 0;
        bool has_max = false, has_seed = false, has_t = false, has_p = false;

        if (!field_int(o, "max_tokens", &max, &has_max, f) ||
            !field_int(o, "max_completion_tokens", &max, &has_max, f) ||
            !field_number(o, "temperature", &t, &has_t, f) ||
            !field_number(o, "top_p", &p, &has_p, f) || !field_int(o, "seed", &seed, &has_seed, f) ||
            !field_stop(o, "stop", opts, f))
                return false;
        if (has_max) {
                if (max < 1 || max > G_MAXUINT32)
                        return fail_bad(f, "'max_tokens' must be a positive integer, got %" G_GINT64_FORMAT,
                                        max);
                g_variant_builder_add(opts, "{sv}", "max_tokens", g_variant_new_uint32(max));
        }
        if (has_t)
                g_variant_builder_add(opts, "{sv}", "temperature", g_variant_new_double(t));
        if (has_p)
                g_variant_builder_add(opts, "{sv}", "top_p", g_variant_new_double(p));
        if (has_seed)
                g_variant_builder_add(opts, "{sv}", "seed", g_variant_new_uint64((guint64) seed));
        return true;
}

static void generate(Bridge *b, SoupServerMessage *msg, bool chat) {
        g_autoptr(JsonParser) parser = NULL;
        g_auto(GVariantBuilder) opts = G_VARIANT_BUILDER_INIT(G_VARIANT_TYPE_VARDICT);
        g_auto(Fail) f = {};
        g_autofree char *system = NULL, *prompt = NULL;
        JsonObject *o, *so = NULL;
        const char *model = NULL;
        bool stream = false, usage = false, proactive;
        Call *c;

        o = body_object(b, msg, &parser, &f);
        if (!o || !field_string(o, "model", &model, &f) || !field_bool(o, "stream", &stream, NULL, &f) ||
            !field_object(o, "stream_options", &so, &f) ||
            (so && !field_bool(so, "include_usage", &usage, NULL, &f)) || !refuse_unsupported(o, &f) ||
            !sampling_options(o, &opts, &f) || !parse_priority(msg, o, &proactive, &f))
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
                if (!messages_to_prompt(msgs, true, &system, &prompt, &f))
                        goto fail;
                if (system)
                        g_variant_builder_add(&opts, "{sv}", "system", g_variant_new_string(system));
        } else {
                JsonNode *n = json_object_get_member(o, "prompt");
                if (n && JSON_NODE_HOLDS_ARRAY(n) && json_array_get_length(json_node_get_array(n)) == 1)
                        n = json_array_get_element(json_node_get_array(n), 0);
                if (!n || !JSON_NODE_HOLDS_VALUE(n) || json_node_get_value_type(n) != G_TYPE_STRING) {
                        fail_bad(&f, "'prompt' must be a string (or an array of one string)");
                        goto fail;
                }
                prompt = g_strdup(json_node_get_string(n));
                /* completions continue the text as it is */
                g_variant_builder_add(&opts, "{sv}", "raw", g_variant_new_boolean(TRUE));
        }

        c = call_new(b, msg, &openai_ops);
        c->api_data = g_new0(OpenAIData, 1);
        ((OpenAIData *) c->api_data)->chat = chat;
        c->stream = stream;
        c->include_usage = stream && usage;
        c->proactive = proactive;
        c->model = g_strdup(model);
        c->id = g_strdup_printf("%s-%" G_GUINT64_FORMAT, chat ? "chatcmpl" : "cmpl", ++b->next_id);
        c->prompt = g_steal_pointer(&prompt);
        c->options = g_variant_ref_sink(g_variant_builder_end(&opts));
        call_start(c);
        return;
fail:
        respond_error(msg, API_OPENAI, &f);
}

static void models_got(void *userdata, const char *model, const char *error_name,
                       const char *message) {
        SoupServerMessage *msg = userdata;
        g_autoptr(JsonBuilder) jb = json_builder_new();

        if (!model) {
                g_auto(Fail) f = {};
                fail_from_engine(&f, error_name, message);
                respond_error(msg, API_OPENAI, &f);
        } else {
                json_builder_begin_object(jb);
                json_builder_set_member_name(jb, "object");
                json_builder_add_string_value(jb, "list");
                json_builder_set_member_name(jb, "data");
                json_builder_begin_array(jb);
                if (*model) {
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
                json_builder_end_array(jb);
                json_builder_end_object(jb);
                respond_json(msg, 200, json_builder_get_root(jb));
        }
        soup_server_message_unpause(msg);
        g_object_unref(msg);
}

bool openai_route(Bridge *b, SoupServerMessage *msg, const char *method, const char *path) {
        bool post = strcmp(method, "POST") == 0, get = strcmp(method, "GET") == 0;
        g_auto(Fail) f = {};

        if (strcmp(path, "/v1/chat/completions") == 0 && post)
                generate(b, msg, true);
        else if (strcmp(path, "/v1/completions") == 0 && post)
                generate(b, msg, false);
        else if (strcmp(path, "/v1/models") == 0 && get) {
                soup_server_message_pause(msg);
                engine_link_get_model(b->link, models_got, g_object_ref(msg));
        } else if (strcmp(path, "/v1/chat/completions") == 0 || strcmp(path, "/v1/completions") == 0 ||
                   strcmp(path, "/v1/models") == 0) {
                fail_set(&f, 405, "invalid_request_error", "method_not_allowed",
                         "%s is not allowed on %s", method, path);
                respond_error(msg, API_OPENAI, &f);
        } else
                return false;
        return true;
}
