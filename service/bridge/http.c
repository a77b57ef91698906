/* SPDX-License-Identifier: MIT */
#include "bridge.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <sys/socket.h>

void fail_clear(Fail *f) {
        g_clear_pointer(&f->message, g_free);
}

static bool fail_setv(Fail *f, guint status, const char *type, const char *code, const char *fmt,
                      va_list ap) {
        if (f->message)
                return false;
        f->status = status;
        f->type = type;
        f->code = code;
        f->message = g_strdup_vprintf(fmt, ap);
        return false;
}

bool fail_set(Fail *f, guint status, const char *type, const char *code, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        fail_setv(f, status, type, code, fmt, ap);
        va_end(ap);
        return false;
}

bool fail_bad(Fail *f, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        fail_setv(f, 400, "invalid_request_error", NULL, fmt, ap);
        va_end(ap);
        return false;
}

void fail_from_engine(Fail *f, const char *error_name, const char *message) {
        const char *n = error_name ? error_name : "";

        if (strcmp(n, "org.agentxpu.Error.InvalidArgument") == 0) {
                /* the engine's prompt cap ("The prompt is N bytes; the limit is M") */
                if (strstr(message, "bytes; the limit is"))
                        fail_set(f, 413, "invalid_request_error", "request_too_large", "%s", message);
                else
                        fail_set(f, 400, "invalid_request_error", NULL, "%s", message);
        } else if (strcmp(n, "org.agentxpu.Error.ContextOverflow") == 0)
                fail_set(f, 400, "invalid_request_error", "context_length_exceeded", "%s", message);
        else if (strcmp(n, "org.agentxpu.Error.Busy") == 0)
                fail_set(f, 429, "rate_limit_error", "rate_limit_exceeded", "%s", message);
        else if (strcmp(n, "org.agentxpu.Error.AccessDenied") == 0 ||
                 strcmp(n, "org.freedesktop.DBus.Error.AccessDenied") == 0)
                fail_set(f, 403, "permission_error", NULL, "%s", message);
        else if (strcmp(n, "org.agentxpu.Error.Unsupported") == 0)
                fail_set(f, 400, "invalid_request_error", "unsupported", "%s", message);
        else if (strcmp(n, "org.agentxpu.Error.NoModel") == 0)
                fail_set(f, 503, "server_error", "no_model", "%s", message);
        else if (strcmp(n, "org.agentxpu.Error.Cancelled") == 0)
                fail_set(f, 503, "server_error", "engine_unavailable", "%s", message);
        else if (!error_name || g_str_has_prefix(n, "org.freedesktop.DBus.Error."))
                /* ServiceUnknown, NameHasNoOwner, NoReply, Disconnected, NoServer, Timeout...:
                 * the engine is not there, or went away */
                fail_set(f, 503, "server_error", "engine_unavailable",
                         "The engine is not available: %s", message);
        else
                fail_set(f, 500, "server_error", NULL, "%s", message);
}

/* json-glib before 1.8 writes U+001F in a string as the raw byte, which JSON forbids (a
 * strict client, OpenAI's among them, fails on the whole answer; a model's text may hold it).
 * The byte is nowhere else in a JSON text, nor inside a UTF-8 sequence: it is escaped here. */
char *node_to_json(JsonNode *node, gsize *ret_len) {
        g_autoptr(JsonGenerator) gen = json_generator_new();
        gsize len;
        char *out;

        json_generator_set_root(gen, node);
        out = json_generator_to_data(gen, &len);
        if (memchr(out, 0x1f, len)) {
                GString *s = g_string_sized_new(len + 16);
                for (gsize i = 0; i < len; i++) {
                        if (out[i] == 0x1f)
                                g_string_append(s, "\\u001f");
                        else
                                g_string_append_c(s, out[i]);
                }
                g_free(out);
                len = s->len;
                out = g_string_free(s, FALSE);
        }
        if (ret_len)
                *ret_len = len;
        return out;
}

void respond_json(SoupServerMessage *msg, guint status, JsonNode *node) {
        gsize len;
        char *data = node_to_json(node, &len);
        json_node_unref(node);
        soup_server_message_set_status(msg, status, NULL);
        soup_server_message_set_response(msg, "application/json", SOUP_MEMORY_TAKE, data, len);
}

void respond_error(SoupServerMessage *msg, Api api, const Fail *f) {
        g_autoptr(JsonBuilder) jb = json_builder_new();
        GUri *uri = soup_server_message_get_uri(msg);

        g_message("%s %s: %u %s", soup_server_message_get_method(msg), g_uri_get_path(uri),
                  f->status, f->message);
        json_builder_begin_object(jb);
        json_builder_set_member_name(jb, "error");
        if (api == API_OLLAMA)
                json_builder_add_string_value(jb, f->message);
        else {
                json_builder_begin_object(jb);
                json_builder_set_member_name(jb, "message");
                json_builder_add_string_value(jb, f->message);
                json_builder_set_member_name(jb, "type");
                json_builder_add_string_value(jb, f->type ? f->type : "invalid_request_error");
                json_builder_set_member_name(jb, "param");
                json_builder_add_null_value(jb);
                json_builder_set_member_name(jb, "code");
                if (f->code)
                        json_builder_add_string_value(jb, f->code);
                else
                        json_builder_add_null_value(jb);
                json_builder_end_object(jb);
        }
        json_builder_end_object(jb);
        if (f->status == 401)
                soup_message_headers_replace(soup_server_message_get_response_headers(msg),
                                             "WWW-Authenticate", "Bearer");
        respond_json(msg, f->status, json_builder_get_root(jb));
}

char *timestamp_rfc3339(void) {
        g_autoptr(GDateTime) now = g_date_time_new_now_utc();
        return g_date_time_format(now, "%Y-%m-%dT%H:%M:%S.%fZ");
}

/* ---- fields ----------------------------------------------------------------------------- */

static JsonNode *member(JsonObject *o, const char *key) {
        JsonNode *n = json_object_get_member(o, key);
        return n && !JSON_NODE_HOLDS_NULL(n) ? n : NULL;
}

static GType value_type(JsonNode *n) {
        return JSON_NODE_HOLDS_VALUE(n) ? json_node_get_value_type(n) : G_TYPE_INVALID;
}

bool field_string(JsonObject *o, const char *key, const char **ret, Fail *f) {
        JsonNode *n = member(o, key);
        if (!n)
                return true;
        if (value_type(n) != G_TYPE_STRING)
                return fail_bad(f, "'%s' must be a string", key);
        *ret = json_node_get_string(n);
        return true;
}

bool field_bool(JsonObject *o, const char *key, bool *ret, bool *ret_set, Fail *f) {
        JsonNode *n = member(o, key);
        if (!n)
                return true;
        if (value_type(n) != G_TYPE_BOOLEAN)
                return fail_bad(f, "'%s' must be a boolean", key);
        *ret = json_node_get_boolean(n);
        if (ret_set)
                *ret_set = true;
        return true;
}

bool field_number(JsonObject *o, const char *key, double *ret, bool *ret_set, Fail *f) {
        JsonNode *n = member(o, key);
        GType t;
        if (!n)
                return true;
        t = value_type(n);
        if (t != G_TYPE_INT64 && t != G_TYPE_DOUBLE)
                return fail_bad(f, "'%s' must be a number", key);
        *ret = json_node_get_double(n);
        *ret_set = true;
        return true;
}

bool field_int(JsonObject *o, const char *key, gint64 *ret, bool *ret_set, Fail *f) {
        JsonNode *n = member(o, key);
        if (!n)
                return true;
        if (value_type(n) != G_TYPE_INT64)
                return fail_bad(f, "'%s' must be an integer", key);
        *ret = json_node_get_int(n);
        *ret_set = true;
        return true;
}

bool field_array(JsonObject *o, const char *key, JsonArray **ret, Fail *f) {
        JsonNode *n = member(o, key);
        if (!n)
                return true;
        if (!JSON_NODE_HOLDS_ARRAY(n))
                return fail_bad(f, "'%s' must be an array", key);
        *ret = json_node_get_array(n);
        return true;
}

bool field_object(JsonObject *o, const char *key, JsonObject **ret, Fail *f) {
        JsonNode *n = member(o, key);
        if (!n)
                return true;
        if (!JSON_NODE_HOLDS_OBJECT(n))
                return fail_bad(f, "'%s' must be an object", key);
        *ret = json_node_get_object(n);
        return true;
}

bool field_stop(JsonObject *o, const char *key, GVariantBuilder *opts, Fail *f) {
        JsonNode *n = member(o, key);
        GVariantBuilder as;

        if (!n)
                return true;
        g_variant_builder_init(&as, G_VARIANT_TYPE_STRING_ARRAY);
        if (value_type(n) == G_TYPE_STRING)
                g_variant_builder_add(&as, "s", json_node_get_string(n));
        else if (JSON_NODE_HOLDS_ARRAY(n)) {
                JsonArray *a = json_node_get_array(n);
                for (guint i = 0; i < json_array_get_length(a); i++) {
                        JsonNode *e = json_array_get_element(a, i);
                        if (value_type(e) != G_TYPE_STRING) {
                                g_variant_builder_clear(&as);
                                return fail_bad(f, "'%s' must be a string or an array of strings", key);
                        }
                        g_variant_builder_add(&as, "s", json_node_get_string(e));
                }
                if (json_array_get_length(a) == 0) {
                        g_variant_builder_clear(&as);
                        return true;
                }
        } else
                return fail_bad(f, "'%s' must be a string or an array of strings", key);
        g_variant_builder_add(opts, "{sv}", "stop", g_variant_builder_end(&as));
        return true;
}

bool sampler_fields(JsonObject *o, GVariantBuilder *opts, Fail *f) {
        static const char *const doubles[] = { "temperature", "top_p", "min_p", "repeat_penalty",
                                               "frequency_penalty", "presence_penalty" };
        gint64 k = 0, seed = 0;
        bool has_k = false, has_seed = false;

        if (!field_int(o, "top_k", &k, &has_k, f) || !field_int(o, "seed", &seed, &has_seed, f) ||
            !field_stop(o, "stop", opts, f))
                return false;
        if (has_k) {
                if (k < 0 || k > G_MAXUINT32)
                        return fail_bad(f, "'top_k' must be from 0, got %" G_GINT64_FORMAT, k);
                g_variant_builder_add(opts, "{sv}", "top_k", g_variant_new_uint32(k));
        }
        if (has_seed)
                g_variant_builder_add(opts, "{sv}", "seed", g_variant_new_uint64((guint64) seed));
        for (size_t i = 0; i < G_N_ELEMENTS(doubles); i++) {
                double v = 0;
                bool set = false;
                if (!field_number(o, doubles[i], &v, &set, f))
                        return false;
                if (set)
                        g_variant_builder_add(opts, "{sv}", doubles[i], g_variant_new_double(v));
        }
        return true;
}

/* json-glib's parser recurses once per level of nesting, so a few megabytes of '[' (under the
 * body cap) would overflow the stack. A JSON text's depth (its open arrays and objects, the
 * outermost counted) is measured before it parses: whether it is within JSON_MAX_NESTING. The
 * engine takes schemas 32 deep, and a request wraps them in a few levels of its own. */
#define JSON_MAX_NESTING 128

static int hex4(const char *s) {
        int v = 0;
        for (int k = 0; k < 4; k++) {
                int d = g_ascii_xdigit_value(s[k]);
                if (d < 0)
                        return -1;
                v = v * 16 + d;
        }
        return v;
}

/* One walk over a JSON text before json-glib parses it. Returns whether it nests at most
 * JSON_MAX_NESTING deep (the walk stops where it goes deeper). *ret_bad: the first thing in its
 * strings that json-glib cannot turn into a C string of UTF-8, NULL for none: the escape
 * \u0000, whose NUL would end the string there (the rest of a message dropped without a
 * word), and a UTF-16 surrogate without its other half (JavaScript writes one for a string
 * cut inside an emoji), which json-glib decodes to bytes that are not UTF-8, and which GLib
 * then sends to the engine as the text "[Invalid UTF-8]" instead of the message. */
static bool json_scan(const char *s, gsize len, const char **ret_bad) {
        int depth = 0;
        bool in_string = false;

        *ret_bad = NULL;
        for (gsize i = 0; i < len && s[i]; i++) {
                char c = s[i];
                if (!in_string) {
                        if (c == '"')
                                in_string = true;
                        else if (c == '[' || c == '{') {
                                if (++depth > JSON_MAX_NESTING)
                                        return false;
                        } else if (c == ']' || c == '}')
                                depth--;
                        continue;
                }
                if (c == '"') {
                        in_string = false;
                        continue;
                }
                if (c != '\\')
                        continue;
                if (i + 5 < len && s[i + 1] == 'u') {
                        const char *bad = NULL;
                        int u = hex4(s + i + 2);
                        if (u == 0)
                                bad = "a NUL character (\\u0000)";
                        else if (u >= 0xdc00 && u <= 0xdfff)
                                bad = "a UTF-16 low surrogate without its high surrogate";
                        else if (u >= 0xd800 && u <= 0xdbff) {
                                int low = i + 11 < len && s[i + 6] == '\\' && s[i + 7] == 'u' ? hex4(s + i + 8) : -1;
                                if (low < 0xdc00 || low > 0xdfff)
                                        bad = "a UTF-16 high surrogate without its low surrogate";
                                else
                                        i += 6; /* the pair */
                        }
                        if (bad && !*ret_bad)
                                *ret_bad = bad;
                        i += 5;
                } else
                        i++;
        }
        return true;
}

/* A request's body as it arrives (http_early_handler): its bytes up to the cap (NULL once
 * past it), and how many came. libsoup would keep all of it, however large, before the
 * handler could see that it is over the cap. */
#define BODY_KEY "agentxpu-body"

typedef struct Body {
        GByteArray *data;
        guint64 length;
} Body;

static void body_free(gpointer p) {
        Body *body = p;
        if (body->data)
                g_byte_array_unref(body->data);
        g_free(body);
}

static void on_got_chunk(SoupServerMessage *msg, GBytes *chunk, gpointer data) {
        Bridge *b = data;
        Body *body = g_object_get_data(G_OBJECT(msg), BODY_KEY);
        gsize n;
        const guint8 *bytes = g_bytes_get_data(chunk, &n);

        body->length += n;
        if (body->length > b->max_body)
                g_clear_pointer(&body->data, g_byte_array_unref);
        else
                g_byte_array_append(body->data, bytes, (guint) n);
}

static void fail_too_large(Bridge *b, guint64 length, Fail *f) {
        fail_set(f, 413, "invalid_request_error", "request_too_large",
                 "The request body is %" G_GUINT64_FORMAT " bytes; the limit is %" G_GSIZE_FORMAT, length,
                 b->max_body);
}

JsonObject *body_object(Bridge *b, SoupServerMessage *msg, JsonParser **ret_parser, Fail *f) {
        Body *body = g_object_get_data(G_OBJECT(msg), BODY_KEY);
        g_autoptr(JsonParser) p = NULL;
        g_autoptr(GError) e = NULL;
        JsonNode *root;
        gsize len;
        const char *data, *bad;

        if (!body || body->length > b->max_body) {
                fail_too_large(b, body ? body->length : 0, f);
                return NULL;
        }
        data = (const char *) body->data->data;
        len = body->data->len;
        p = json_parser_new_immutable();
        if (len == 0) {
                fail_bad(f, "The request body is empty; a JSON object is expected");
                return NULL;
        }
        if (!g_utf8_validate(data, len, NULL)) {
                fail_bad(f, "The request body is not valid UTF-8");
                return NULL;
        }
        if (!json_scan(data, len, &bad)) {
                fail_bad(f, "The request body is nested more than %d levels deep", JSON_MAX_NESTING);
                return NULL;
        }
        if (bad) {
                fail_bad(f, "The request body holds %s in a string, which is no text the model can read",
                         bad);
                return NULL;
        }
        if (!json_parser_load_from_data(p, data, len, &e)) {
                fail_bad(f, "The request body is not valid JSON: %s", e->message);
                return NULL;
        }
        root = json_parser_get_root(p);
        if (!root || !JSON_NODE_HOLDS_OBJECT(root)) {
                fail_bad(f, "The request body must be a JSON object");
                return NULL;
        }
        *ret_parser = g_steal_pointer(&p);
        return json_node_get_object(root);
}

/* ---- messages and priority --------------------------------------------------------------- */

bool message_content(JsonObject *m, bool parts_allowed, const char **ret, GString *buf, Fail *f) {
        JsonNode *n = member(m, "content");

        if (!n) {
                *ret = "";
                return true;
        }
        if (value_type(n) == G_TYPE_STRING) {
                *ret = json_node_get_string(n);
                return true;
        }
        if (!parts_allowed || !JSON_NODE_HOLDS_ARRAY(n))
                return fail_bad(f, "A message's 'content' must be a string%s",
                                parts_allowed ? " or an array of text parts" : "");
        JsonArray *a = json_node_get_array(n);
        for (guint i = 0; i < json_array_get_length(a); i++) {
                JsonNode *e = json_array_get_element(a, i);
                const char *type = NULL, *text = NULL;
                if (!JSON_NODE_HOLDS_OBJECT(e))
                        return fail_bad(f, "A content part must be an object");
                if (!field_string(json_node_get_object(e), "type", &type, f) ||
                    !field_string(json_node_get_object(e), "text", &text, f))
                        return false;
                if (g_strcmp0(type, "text") != 0 || !text)
                        return fail_bad(f, "Content parts of type '%s' are not supported: the model "
                                        "reads text only", type ? type : "(none)");
                g_string_append(buf, text);
        }
        *ret = buf->str;
        return true;
}

/* An assistant's earlier call, OpenAI's {"id", "type": "function", "function": {"name",
 * "arguments": "JSON text"}} or Ollama's {"function": {"name", "arguments": {...}}}, as the
 * engine's tool_call turn: {"name": NAME, "arguments": ARGUMENTS}. */
static bool tool_call_turn(JsonNode *e, guint i, guint k, char **ret, Fail *f) {
        g_autoptr(JsonBuilder) jb = json_builder_new();
        g_autoptr(JsonNode) root = NULL;
        JsonObject *fn = NULL;
        JsonNode *args;
        const char *name = NULL;

        if (!JSON_NODE_HOLDS_OBJECT(e) || !field_object(json_node_get_object(e), "function", &fn, f) || !fn ||
            !field_string(fn, "name", &name, f) || !name)
                return fail_bad(f, "Message %u: 'tool_calls[%u]' must be {\"type\": \"function\", \"function\": "
                                "{\"name\": ..., \"arguments\": ...}}", i, k);
        args = member(fn, "arguments");
        if (args && !JSON_NODE_HOLDS_OBJECT(args) && value_type(args) != G_TYPE_STRING)
                return fail_bad(f, "Message %u: 'tool_calls[%u].function.arguments' must be a JSON object or "
                                "a string holding one", i, k);
        json_builder_begin_object(jb);
        json_builder_set_member_name(jb, "name");
        json_builder_add_string_value(jb, name);
        json_builder_set_member_name(jb, "arguments");
        if (args)
                json_builder_add_value(jb, json_node_copy(args));
        else {
                json_builder_begin_object(jb);
                json_builder_end_object(jb);
        }
        json_builder_end_object(jb);
        root = json_builder_get_root(jb);
        *ret = node_to_json(root, NULL);
        return true;
}

bool messages_to_turns(JsonArray *msgs, bool openai, GArray *turns, char **ret_prompt, Fail *f) {
        guint n = json_array_get_length(msgs), users = 0;

        for (guint i = 0; i < n; i++) {
                JsonNode *e = json_array_get_element(msgs, i);
                g_autoptr(GString) buf = g_string_new(NULL);
                const char *role = NULL, *content = NULL;
                JsonArray *extra = NULL;
                JsonObject *m;
                Turn t;

                if (!JSON_NODE_HOLDS_OBJECT(e))
                        return fail_bad(f, "Message %u is not an object", i);
                m = json_node_get_object(e);
                if (!field_string(m, "role", &role, f) ||
                    !message_content(m, openai, &content, buf, f))
                        return false;
                if (!role)
                        return fail_bad(f, "Message %u has no 'role'", i);
                if (!openai && (!field_array(m, "images", &extra, f) ||
                                (extra && json_array_get_length(extra) > 0)))
                        return fail_bad(f, "Images are not supported: the model reads text only");
                extra = NULL;
                if (!field_array(m, "tool_calls", &extra, f))
                        return false;
                if (strcmp(role, "developer") == 0)
                        role = "system";
                if (strcmp(role, "function") == 0)
                        role = "tool";
                if (strcmp(role, "system") != 0 && strcmp(role, "user") != 0 &&
                    strcmp(role, "assistant") != 0 && strcmp(role, "tool") != 0)
                        return fail_bad(f, "Unknown message role '%s'; use system, user, assistant or tool",
                                        role);
                if (extra && json_array_get_length(extra) > 0) {
                        if (strcmp(role, "assistant") != 0)
                                return fail_bad(f, "Message %u: only an assistant's message has 'tool_calls'", i);
                        if (*content) {
                                t.role = g_strdup("assistant");
                                t.content = g_strdup(content);
                                g_array_append_val(turns, t);
                        }
                        for (guint k = 0; k < json_array_get_length(extra); k++) {
                                if (!tool_call_turn(json_array_get_element(extra, k), i, k, &t.content, f))
                                        return false;
                                t.role = g_strdup("tool_call");
                                g_array_append_val(turns, t);
                        }
                        if (i + 1 == n)
                                return fail_bad(f, "The last message must be the user's or a tool's result");
                        continue;
                }
                if (i + 1 == n) {
                        if (strcmp(role, "tool") == 0) {
                                /* the model answers the tool's result: no user turn after it */
                                t.role = g_strdup(role);
                                t.content = g_strdup(content);
                                g_array_append_val(turns, t);
                                *ret_prompt = g_strdup("");
                                break;
                        }
                        if (strcmp(role, "user") != 0)
                                return fail_bad(f, "The last message must be the user's or a tool's result");
                        users++;
                        *ret_prompt = g_strdup(content);
                        break;
                }
                users += strcmp(role, "user") == 0;
                t.role = g_strdup(role);
                t.content = g_strdup(content);
                g_array_append_val(turns, t);
        }
        if (users == 0)
                return fail_bad(f, "The messages hold no user message");
        return true;
}

bool turns_hold_tools(GArray *turns) {
        for (guint i = 0; turns && i < turns->len; i++) {
                Turn *t = &g_array_index(turns, Turn, i);
                if (strcmp(t->role, "tool") == 0 || strcmp(t->role, "tool_call") == 0)
                        return true;
        }
        return false;
}

bool schema_option(JsonNode *schema, const char *what, GVariantBuilder *opts, Fail *f) {
        g_autofree char *json = NULL;

        if (!schema || (!JSON_NODE_HOLDS_OBJECT(schema) &&
                        !(JSON_NODE_HOLDS_VALUE(schema) && json_node_get_value_type(schema) == G_TYPE_BOOLEAN)))
                return fail_bad(f, "%s must be a JSON Schema (an object)", what);
        json = node_to_json(schema, NULL);
        g_variant_builder_add(opts, "{sv}", "json_schema", g_variant_new_string(json));
        return true;
}

bool tools_option(JsonArray *tools, const char *only, const char *choice, GVariantBuilder *opts, Fail *f) {
        g_autoptr(JsonArray) kept = json_array_new();
        g_autoptr(JsonNode) node = json_node_new(JSON_NODE_ARRAY);
        g_autofree char *json = NULL;
        guint n = json_array_get_length(tools);

        for (guint i = 0; i < n; i++) {
                JsonNode *e = json_array_get_element(tools, i);
                JsonObject *t, *fn = NULL;
                const char *name = NULL;

                if (!JSON_NODE_HOLDS_OBJECT(e))
                        return fail_bad(f, "'tools[%u]' must be an object", i);
                t = json_node_get_object(e);
                if (!field_object(t, "function", &fn, f))
                        return false;
                if (!fn || !field_string(fn, "name", &name, f) || !name)
                        return fail_bad(f, "'tools[%u]' must be {\"type\": \"function\", \"function\": "
                                        "{\"name\": ..., \"parameters\": {...}}}", i);
                if (!only || strcmp(name, only) == 0)
                        json_array_add_element(kept, json_node_copy(e));
        }
        if (only && json_array_get_length(kept) == 0)
                return fail_bad(f, "'tool_choice' names the function '%s', which 'tools' does not have",
                                only);
        json_node_set_array(node, kept);
        json = node_to_json(node, NULL);
        g_variant_builder_add(opts, "{sv}", "tools", g_variant_new_string(json));
        if (choice)
                g_variant_builder_add(opts, "{sv}", "tool_choice", g_variant_new_string(choice));
        return true;
}

bool tool_call_read(const char *call, char **ret_name, JsonNode **ret_arguments) {
        g_autoptr(JsonParser) p = json_parser_new();
        JsonNode *root, *args;
        JsonObject *o;
        const char *bad; /* the engine's own JSON: only its depth is in question */

        if (!call || !json_scan(call, strlen(call), &bad) || !json_parser_load_from_data(p, call, -1, NULL))
                return false;
        root = json_parser_get_root(p);
        if (!root || !JSON_NODE_HOLDS_OBJECT(root))
                return false;
        o = json_node_get_object(root);
        args = json_object_get_member(o, "arguments");
        if (!json_object_has_member(o, "name") || !args)
                return false;
        *ret_name = g_strdup(json_object_get_string_member(o, "name"));
        *ret_arguments = json_node_copy(args);
        return *ret_name != NULL;
}

static bool priority_word(const char *what, const char *v, bool *ret_proactive, Fail *f) {
        if (g_ascii_strcasecmp(v, "proactive") == 0 || g_ascii_strcasecmp(v, "background") == 0)
                *ret_proactive = true;
        else if (g_ascii_strcasecmp(v, "reactive") == 0 || g_ascii_strcasecmp(v, "foreground") == 0)
                *ret_proactive = false;
        else
                return fail_bad(f, "%s must be 'reactive' or 'proactive' ('foreground' or "
                                "'background'), got '%s'", what, v);
        return true;
}

bool parse_priority(SoupServerMessage *msg, JsonObject *o, bool *ret_proactive, Fail *f) {
        const char *h = soup_message_headers_get_one(soup_server_message_get_request_headers(msg),
                                                     "X-Agentxpu-Priority");
        const char *p = NULL, *tier = NULL;

        *ret_proactive = false;
        if (!field_string(o, "priority", &p, f) || !field_string(o, "service_tier", &tier, f))
                return false;
        if (tier && strcmp(tier, "flex") == 0)
                *ret_proactive = true;
        if (p && !priority_word("'priority'", p, ret_proactive, f))
                return false;
        if (h && !priority_word("The header X-Agentxpu-Priority", h, ret_proactive, f))
                return false;
        return true;
}

/* ---- calls -------------------------------------------------------------------------------- */

static void call_unref(Call *c) {
        if (--c->ref > 0)
                return;
        if (c->disconnected_id)
                g_signal_handler_disconnect(c->msg, c->disconnected_id);
        if (c->finished_id)
                g_signal_handler_disconnect(c->msg, c->finished_id);
        g_object_unref(c->msg);
        g_free(c->model);
        g_free(c->id);
        g_free(c->prompt);
        if (c->turns)
                g_array_unref(c->turns);
        conversation_drop(c->b, c->conv, true);
        g_clear_pointer(&c->options, g_variant_unref);
        for (guint i = 0; i < c->n_choices; i++) {
                Choice *ch = &c->choices[i];
                g_string_free(ch->text, TRUE);
                if (ch->thinking) {
                        g_string_free(ch->thinking, TRUE);
                        g_string_free(ch->content, TRUE);
                        think_split_clear(&ch->split);
                }
                if (ch->logprobs)
                        g_ptr_array_unref(ch->logprobs);
                g_free(ch->reason);
                g_free((char *) ch->st.finish_reason);
                g_free((char *) ch->st.tool_call);
                g_free((char *) ch->st.stop_word);
        }
        g_free(c->choices);
        if (c->ops->free_data)
                c->ops->free_data(c->api_data);
        else
                g_free(c->api_data);
        g_free(c);
}

/* Whether an engine request of the call is under way. */
static bool call_busy(Call *c) {
        for (guint i = 0; i < c->n_choices; i++)
                if (c->choices[i].job)
                        return true;
        return false;
}

/* Cancel the call's engine requests (all but `keep`'s); they report nothing more. */
static void call_cancel(Call *c, Choice *keep) {
        for (guint i = 0; i < c->n_choices; i++)
                if (&c->choices[i] != keep && c->choices[i].job) {
                        engine_job_cancel(c->choices[i].job);
                        c->choices[i].job = NULL;
                }
}

/* The client left, or the answer is out: nothing more goes to it. */
static void call_gone(Call *c, bool left) {
        if (c->watch) {
                g_source_destroy(c->watch);
                g_clear_pointer(&c->watch, g_source_unref);
        }
        if (c->gone)
                return;
        c->gone = true;
        if (call_busy(c)) {
                if (left)
                        g_message("%s %s: the client left; its request is cancelled",
                                  soup_server_message_get_method(c->msg),
                                  g_uri_get_path(soup_server_message_get_uri(c->msg)));
                call_cancel(c, NULL);
        }
}

static void on_disconnected(SoupServerMessage *msg, gpointer data) {
        call_gone(data, true);
}

/* libsoup notices a client that left when it next reads or writes; while the engine works on
 * an answer that is not streamed, that is only at the end. So the connection is watched: end
 * of file (or a hang-up) means the client left. */
static gboolean on_socket(GSocket *sock, GIOCondition cond, gpointer data) {
        Call *c = data;
        char byte;
        gssize n = 0;

        if (!(cond & (G_IO_HUP | G_IO_ERR))) {
                n = recv(g_socket_get_fd(sock), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
                if (n < 0 && (errno == EAGAIN || errno == EINTR))
                        return G_SOURCE_CONTINUE;
                if (n > 0) {
                        /* the client sends its next request early: stop watching */
                        g_clear_pointer(&c->watch, g_source_unref);
                        return G_SOURCE_REMOVE;
                }
        }
        g_clear_pointer(&c->watch, g_source_unref);
        if (c->gone)
                return G_SOURCE_REMOVE;
        call_gone(c, true);
        /* something for libsoup to fail to write, which ends the message */
        if (c->headers_sent)
                soup_message_body_complete(soup_server_message_get_response_body(c->msg));
        else
                soup_server_message_set_status(c->msg, SOUP_STATUS_SERVICE_UNAVAILABLE, NULL);
        soup_server_message_unpause(c->msg);
        return G_SOURCE_REMOVE;
}

static void on_msg_finished(SoupServerMessage *msg, gpointer data) {
        Call *c = data;
        call_gone(c, call_busy(c));
        call_unref(c);
}

Call *call_new(Bridge *b, SoupServerMessage *msg, const CallOps *ops, guint n) {
        Call *c = g_new0(Call, 1);
        c->ref = 1;
        c->b = b;
        c->msg = g_object_ref(msg);
        c->ops = ops;
        c->created = g_get_real_time() / G_USEC_PER_SEC;
        c->t0 = g_get_monotonic_time();
        c->n_choices = MAX(n, 1);
        c->choices = g_new0(Choice, c->n_choices);
        for (guint i = 0; i < c->n_choices; i++)
                c->choices[i] = (Choice) { .call = c, .index = i, .text = g_string_new(NULL) };
        return c;
}

void call_write(Call *c, const char *data, gsize len) {
        if (c->gone)
                return;
        soup_message_body_append(soup_server_message_get_response_body(c->msg), SOUP_MEMORY_COPY,
                                 data, len);
        soup_server_message_unpause(c->msg);
}

void call_end(Call *c) {
        if (c->gone)
                return;
        soup_message_body_complete(soup_server_message_get_response_body(c->msg));
        soup_server_message_unpause(c->msg);
}

void call_fail(Call *c, const Fail *f) {
        if (c->gone)
                return;
        respond_error(c->msg, c->ops->api, f);
        soup_server_message_unpause(c->msg);
}

static void call_submit(Call *c);
static void submit_rest(Call *c);

/* A choice's request failed: the others are cancelled, and the client told (in the stream
 * where its headers went). */
static void choice_failed(Choice *ch, const Fail *f) {
        Call *c = ch->call;
        call_cancel(c, ch);
        if (c->headers_sent) {
                GUri *uri = soup_server_message_get_uri(c->msg);
                if (!c->gone) {
                        g_message("%s %s: the stream ends early: %s", soup_server_message_get_method(c->msg),
                                  g_uri_get_path(uri), f->message);
                        c->ops->stream_error(c, f);
                }
        } else
                call_fail(c, f);
}

const char *choice_content(Choice *ch) {
        return ch->content ? ch->content->str : ch->text->str;
}

const char *choice_thinking(Choice *ch) {
        return ch->thinking && ch->thinking->len > 0 ? ch->thinking->str : NULL;
}

/* Streamed, with the thinking apart: what the split decided since the last piece written
 * (nothing where it holds all back, a possible tag) */
static void send_split(Choice *ch) {
        Call *c = ch->call;
        gsize t0 = ch->sent_thinking, a0 = ch->sent_content;

        if (ch->thinking->len == t0 && ch->content->len == a0)
                return;
        ch->sent_thinking = ch->thinking->len;
        ch->sent_content = ch->content->len;
        c->ops->token(c, ch, ch->thinking->str + t0, ch->content->str + a0);
}

static void job_started(void *userdata, const char *error_name, const char *message) {
        Choice *ch = userdata;
        Call *c = ch->call;
        SoupMessageHeaders *h;

        if (error_name || message) {
                g_auto(Fail) f = {};
                ch->job = NULL;
                if (c->conv && c->cached_tokens > 0 &&
                    g_strcmp0(error_name, "org.agentxpu.Error.NotFound") == 0) {
                        /* the engine no longer has the flow (it restarted): the whole
                         * conversation again, on a new one */
                        g_message("The flow %s is gone; the conversation starts afresh", c->conv->flow);
                        conversation_drop(c->b, g_steal_pointer(&c->conv), false);
                        c->cached_tokens = 0;
                        c->ref++;
                        call_submit(c);
                        return;
                }
                fail_from_engine(&f, error_name, message);
                choice_failed(ch, &f);
                return;
        }
        /* streamed: the headers go once every choice's request is taken (one the engine
         * refuses is then still an HTTP error) */
        if (++c->started < c->n_choices || !c->stream || c->headers_sent)
                return;
        h = soup_server_message_get_response_headers(c->msg);
        soup_server_message_set_status(c->msg, 200, NULL);
        soup_message_headers_set_content_type(h, c->ops->stream_type, NULL);
        /* HTTP/1.0 has no chunks (RFC 9112, 7.1): its stream ends when the connection closes */
        if (soup_server_message_get_http_version(c->msg) == SOUP_HTTP_1_0)
                soup_message_headers_set_encoding(h, SOUP_ENCODING_EOF);
        else
                soup_message_headers_set_encoding(h, SOUP_ENCODING_CHUNKED);
        soup_message_headers_replace(h, "Cache-Control", "no-cache");
        /* each piece is dropped once written, not kept until the answer ends */
        soup_message_body_set_accumulate(soup_server_message_get_response_body(c->msg), FALSE);
        c->headers_sent = true;
        c->ops->begin(c);
        /* what the choices taken earlier wrote meanwhile */
        for (guint i = 0; i < c->n_choices; i++) {
                Choice *o = &c->choices[i];
                if (o->held)
                        ;
                else if (o->thinking)
                        send_split(o);
                else if (o->text->len > 0)
                        c->ops->token(c, o, NULL, o->text->str);
                if (o->reason && c->ops->choice_done)
                        c->ops->choice_done(c, o);
        }
        soup_server_message_unpause(c->msg);
}

static void job_token(void *userdata, const char *text) {
        Choice *ch = userdata;
        Call *c = ch->call;
        bool first = ch->text->len == 0;

        g_string_append(ch->text, text);
        if (ch->thinking)
                think_split_feed(&ch->split, text, ch->thinking, ch->content);
        if (ch->index == 0)
                submit_rest(c);
        if (c->ops->enough && !ch->stopping && c->ops->enough(c, ch, text)) {
                ch->stopping = true;
                engine_job_stop(ch->job);
        }
        if (!c->stream)
                return;
        /* With tools, an answer that begins as a call could begin with '{', '<' or '[' (the
         * family's call begins with one of them, and text never does): it is held back and
         * the API's finish writes it as a call, or as text if it was none. */
        if (c->tools && (ch->held || (first && ch->text->str[0] && strchr("{<[", ch->text->str[0])))) {
                ch->held = true;
                return;
        }
        if (!c->headers_sent) /* else written when they go */
                return;
        if (ch->thinking)
                send_split(ch);
        else
                c->ops->token(c, ch, NULL, text);
}

static void job_logprobs(void *userdata, GVariant *tokens) {
        Choice *ch = userdata;
        GVariantIter it;
        GVariant *record;

        if (!ch->logprobs)
                ch->logprobs = g_ptr_array_new_with_free_func((GDestroyNotify) g_variant_unref);
        g_variant_iter_init(&it, tokens);
        while ((record = g_variant_iter_next_value(&it)))
                g_ptr_array_add(ch->logprobs, record);
}

double logprob_value(double lp) {
        return lp > -9999.0 ? lp : -9999.0; /* -inf, or NaN, which JSON cannot hold */
}

void logprob_token_read(GVariant *record, LogprobToken *ret) {
        g_variant_get(record, "(&s@ayd@a(sayd))", &ret->text, &ret->bytes_v, &ret->logprob, &ret->alternatives);
        ret->bytes = g_variant_get_fixed_array(ret->bytes_v, &ret->n_bytes, 1);
}

void logprob_token_clear(LogprobToken *t) {
        g_clear_pointer(&t->alternatives, g_variant_unref);
        g_clear_pointer(&t->bytes_v, g_variant_unref);
}

/* {"token", "logprob", "bytes"} of one piece */
static void add_logprob_piece(JsonBuilder *jb, const char *text, const guint8 *bytes, gsize n, double lp) {
        json_builder_set_member_name(jb, "token");
        json_builder_add_string_value(jb, text);
        json_builder_set_member_name(jb, "logprob");
        json_builder_add_double_value(jb, logprob_value(lp));
        json_builder_set_member_name(jb, "bytes");
        json_builder_begin_array(jb);
        for (gsize i = 0; i < n; i++)
                json_builder_add_int_value(jb, bytes[i]);
        json_builder_end_array(jb);
}

void add_logprob_entries(JsonBuilder *jb, Choice *ch, guint from, guint to) {
        json_builder_begin_array(jb);
        for (guint i = from; ch->logprobs && i < to && i < ch->logprobs->len; i++) {
                LogprobToken t;
                logprob_token_read(g_ptr_array_index(ch->logprobs, i), &t);
                json_builder_begin_object(jb);
                add_logprob_piece(jb, t.text, t.bytes, t.n_bytes, t.logprob);
                json_builder_set_member_name(jb, "top_logprobs");
                json_builder_begin_array(jb);
                GVariantIter it;
                const char *text;
                GVariant *bytes;
                double lp;
                g_variant_iter_init(&it, t.alternatives);
                while (g_variant_iter_next(&it, "(&s@ayd)", &text, &bytes, &lp)) {
                        gsize n;
                        const guint8 *b = g_variant_get_fixed_array(bytes, &n, 1);
                        json_builder_begin_object(jb);
                        add_logprob_piece(jb, text, b, n, lp);
                        json_builder_end_object(jb);
                        g_variant_unref(bytes);
                }
                json_builder_end_array(jb);
                json_builder_end_object(jb);
                logprob_token_clear(&t);
        }
        json_builder_end_array(jb);
}

static void job_finished(void *userdata, const char *reason, const char *error,
                         const EngineStats *st) {
        Choice *ch = userdata;
        Call *c = ch->call;
        g_auto(Fail) f = {};

        ch->job = NULL;
        /* stopped here as enough: a limit, like max_tokens */
        if (ch->stopping && strcmp(reason, "cancelled") == 0)
                reason = "length";
        if (strcmp(reason, "stop") == 0 || strcmp(reason, "length") == 0) {
                if (c->conv && st->generated_tokens > 0) {
                        /* the flow holds the conversation, the turn and the answer but for its
                         * last token, which the next turn feeds first */
                        conversation_put(c->b, g_steal_pointer(&c->conv), c->model, c->turns,
                                         c->prompt, ch->text->str,
                                         c->cached_tokens + st->prompt_tokens + st->generated_tokens - 1);
                }
                if (ch->index == 0)
                        submit_rest(c);
                if (ch->thinking) {
                        /* what the split held back: a possible tag, blanks */
                        think_split_end(&ch->split, ch->thinking, ch->content);
                        if (c->headers_sent && !ch->held)
                                send_split(ch);
                }
                ch->reason = g_strdup(reason);
                ch->st = *st;
                ch->st.finish_reason = g_strdup(st->finish_reason);
                ch->st.tool_call = g_strdup(st->tool_call);
                ch->st.stop_word = g_strdup(st->stop_word);
                if (c->headers_sent && c->ops->choice_done)
                        c->ops->choice_done(c, ch);
                if (--c->pending == 0)
                        c->ops->finish(c);
                return;
        }
        if (strcmp(reason, "cancelled") == 0)
                fail_set(&f, 503, "server_error", "engine_unavailable",
                         "The engine cancelled the request (it is stopping or its model changed)");
        else
                fail_set(&f, error && g_str_has_prefix(error, "The engine left") ? 503 : 500,
                         "server_error", NULL, "The request failed: %s", error ? error : reason);
        choice_failed(ch, &f);
}

static const EngineJobCallbacks job_callbacks = {
        .started = job_started,
        .token = job_token,
        .logprobs = job_logprobs,
        .finished = job_finished,
};

/* A choice's options with the call's earlier turns from `first` on and its flow; choice i
 * of several samples with the seed given plus i (the same seed would draw the same answer). */
static GVariant *submission_options(Choice *ch, guint first) {
        Call *c = ch->call;
        GVariantBuilder opts;
        GVariantIter it;
        const char *key;
        GVariant *v;

        g_variant_builder_init(&opts, G_VARIANT_TYPE_VARDICT);
        g_variant_iter_init(&it, c->options);
        while (g_variant_iter_next(&it, "{&sv}", &key, &v)) {
                if (ch->index > 0 && strcmp(key, "seed") == 0 && g_variant_is_of_type(v, G_VARIANT_TYPE_UINT64))
                        g_variant_builder_add(&opts, "{sv}", key,
                                              g_variant_new_uint64(g_variant_get_uint64(v) + ch->index));
                else
                        g_variant_builder_add(&opts, "{sv}", key, v);
                g_variant_unref(v);
        }
        if (c->turns && first < c->turns->len) {
                GVariantBuilder msgs;
                g_variant_builder_init(&msgs, G_VARIANT_TYPE("a(ss)"));
                for (guint i = first; i < c->turns->len; i++) {
                        Turn *t = &g_array_index(c->turns, Turn, i);
                        g_variant_builder_add(&msgs, "(ss)", t->role, t->content);
                }
                g_variant_builder_add(&opts, "{sv}", "messages", g_variant_builder_end(&msgs));
        }
        if (c->conv)
                g_variant_builder_add(&opts, "{sv}", "flow", g_variant_new_object_path(c->conv->flow));
        {
                guint32 limit = engine_link_max_tokens(c->b->link), max = c->max_tokens;
                if (max == 0 || (c->max_tokens_clamp && limit > 0 && max > limit))
                        max = limit;    /* 0 (not known): the engine's default */
                if (max > 0)
                        g_variant_builder_add(&opts, "{sv}", "max_tokens", g_variant_new_uint32(max));
        }
        return g_variant_builder_end(&opts);
}

static void submit_choice(Choice *ch, guint first) {
        Call *c = ch->call;
        ch->job = engine_link_submit(c->b->link, c->proactive, c->prompt, submission_options(ch, first),
                                     &job_callbacks, ch);
}

/* The first choice goes alone; the others once its prompt is prefilled (its first token, or
 * its end), when the engine's prompt cache holds it, so that they prefill next to nothing
 * rather than the whole prompt each. */
static void submit_now(Call *c, guint first) {
        c->pending = c->n_choices;
        c->started = 0;
        c->rest_submitted = c->n_choices == 1;
        submit_choice(&c->choices[0], first);
}

static void submit_rest(Call *c) {
        if (c->rest_submitted || c->gone)
                return;
        c->rest_submitted = true;
        for (guint i = 1; i < c->n_choices; i++)
                submit_choice(&c->choices[i], 0);
}

static void flow_opened(void *userdata, const char *path, const char *error_name,
                        const char *message) {
        Call *c = userdata;

        c->b->flows--;  /* the place held while OpenFlow was on its way */
        if (c->gone) {
                if (path) {
                        Conversation *conv = conversation_new(c->b, path);
                        conversation_drop(c->b, conv, true);
                }
                call_unref(c);
                return;
        }
        if (path)
                c->conv = conversation_new(c->b, path);
        else
                /* Busy (the user's other programs hold the flows), or the engine is not
                 * there: without a flow, which says why if it matters */
                g_message("No flow for the conversation (%s); it runs without one", message);
        submit_now(c, 0);
        call_unref(c);
}

/* Takes a reference of the caller's. */
static void call_submit(Call *c) {
        guint covered = 0;

        if (c->cacheable && c->b->max_flows > 0) {
                c->conv = conversations_take(c->b, c->model, c->turns, &covered);
                if (c->conv) {
                        c->cached_tokens = c->conv->positions;
                        submit_now(c, covered);
                        call_unref(c);
                        return;
                }
                if (conversations_room(c->b)) {
                        c->b->flows++;  /* held for the flow on its way */
                        engine_link_open_flow(c->b->link, flow_opened, c);
                        return;
                }
        }
        submit_now(c, 0);
        call_unref(c);
}

/* The engine's model name matches what the client asked for: the same, or with Ollama's
 * ":latest" tag. */
static bool model_matches(const char *have, const char *want) {
        size_t n = strlen(have);
        return strcmp(have, want) == 0 ||
               (strncmp(have, want, n) == 0 && strcmp(want + n, ":latest") == 0);
}

/* Whether the engine's answer to "which model" (model, or NULL with the error) serves the
 * client's `want`; fills `f` otherwise. */
bool model_check(Api api, const char *want, const char *model, const char *error_name, const char *message,
                 Fail *f) {
        if (!model)
                fail_from_engine(f, error_name, message);
        else if (!*model)
                fail_set(f, 503, "server_error", "no_model",
                         "The engine has no model loaded; an administrator can load one");
        else if (!model_matches(model, want)) {
                if (api == API_OLLAMA)
                        fail_set(f, 404, NULL, NULL, "model '%s' not found; this engine serves '%s'",
                                 want, model);
                else
                        fail_set(f, 404, "invalid_request_error", "model_not_found",
                                 "The model '%s' does not exist; this engine serves '%s'", want,
                                 model);
        }
        return !f->message;
}

typedef struct ModelQuery {
        SoupServerMessage *msg;
        Api api;
        char *want;
        ModelAnswer answer;
        int arg;
} ModelQuery;

static void model_query_got(void *userdata, const char *model, GVariant *info, const char *error_name,
                            const char *message) {
        ModelQuery *q = userdata;
        g_auto(Fail) f = {};
        bool ok;

        if (q->want)
                ok = model_check(q->api, q->want, model, error_name, message, &f);
        else if (!(ok = model != NULL))
                fail_from_engine(&f, error_name, message);
        if (ok)
                q->answer(q->msg, q->want, model, info, q->arg);
        else
                respond_error(q->msg, q->api, &f);
        soup_server_message_unpause(q->msg);
        g_object_unref(q->msg);
        g_free(q->want);
        g_free(q);
}

void model_query(Bridge *b, SoupServerMessage *msg, Api api, const char *want, ModelAnswer answer,
                 int arg) {
        ModelQuery *q = g_new0(ModelQuery, 1);

        *q = (ModelQuery) { .msg = g_object_ref(msg), .api = api, .want = g_strdup(want), .answer = answer,
                            .arg = arg };
        soup_server_message_pause(msg);
        engine_link_get_model(b->link, model_query_got, q);
}

/* The thinking apart where the model's template thinks (ModelInfo's thinking; an engine
 * without the key: none). The answer begins inside it where the generation prompt opens the
 * block (thinking_open), unless a grammar holds the answer from its first byte (a schema,
 * tools: the answer is what they let through, no thinking before it). Such an answer is no
 * turn to continue on a flow: the client keeps the answer without its thinking, which the
 * flow's conversation never matches. */
static void think_setup(Call *c, GVariant *info) {
        gboolean thinks = FALSE, open = FALSE;
        g_autoptr(GVariant) schema = g_variant_lookup_value(c->options, "json_schema", NULL);
        g_autoptr(GVariant) tools = g_variant_lookup_value(c->options, "tools", NULL);

        if (info) {
                (void) g_variant_lookup(info, "thinking", "b", &thinks);
                (void) g_variant_lookup(info, "thinking_open", "b", &open);
        }
        c->think = thinks;
        c->think_open = open && !schema && !tools;
        if (!c->think)
                return;
        c->cacheable = false;
        for (guint i = 0; i < c->n_choices; i++) {
                Choice *ch = &c->choices[i];
                ch->thinking = g_string_new(NULL);
                ch->content = g_string_new(NULL);
                think_split_init(&ch->split, c->think_open);
        }
}

static void call_got_model(void *userdata, const char *model, GVariant *info, const char *error_name,
                           const char *message) {
        Call *c = userdata;
        g_auto(Fail) f = {};

        if (c->gone) {
                call_unref(c);
                return;
        }
        if (c->any_model && model) {
                g_free(c->model);
                c->model = g_strdup(model);
        }
        if (!model_check(c->ops->api, c->model, model, error_name, message, &f)) {
                call_fail(c, &f);
                call_unref(c);
                return;
        }
        if (c->think)
                think_setup(c, info);
        call_submit(c);
}

void call_start(Call *c) {
        g_autoptr(GVariant) stop = g_variant_lookup_value(c->options, "stop", NULL);
        /* a stop string ends the answer inside the flow's KV cache, which then holds text the
         * client never saw */
        /* several answers: none of them continues the conversation on a flow */
        if (stop || c->n_choices > 1)
                c->cacheable = false;
        soup_server_message_pause(c->msg);
        c->disconnected_id = g_signal_connect(c->msg, "disconnected", G_CALLBACK(on_disconnected), c);
        c->finished_id = g_signal_connect(c->msg, "finished", G_CALLBACK(on_msg_finished), c);
        c->ref++;       /* the message's, dropped when it finishes */
        GSocket *sock = soup_server_message_get_socket(c->msg);
        if (sock) {
                c->watch = g_socket_create_source(sock, G_IO_IN | G_IO_HUP | G_IO_ERR, NULL);
                g_source_set_callback(c->watch, G_SOURCE_FUNC(on_socket), c, NULL);
                g_source_attach(c->watch, NULL);
        }
        c->ref++;       /* for the model's answer */
        engine_link_get_model(c->b->link, call_got_model, c);
        call_unref(c);  /* the caller's */
}

/* ---- routing ----------------------------------------------------------------------------- */

static bool authorized(Bridge *b, SoupServerMessage *msg) {
        GSocketAddress *local = soup_server_message_get_local_address(msg);
        const char *h;
        size_t n, want;
        unsigned char diff = 0;

        /* The Unix socket is the user's alone (mode 0600); loopback TCP is everybody's. */
        if (!local || !G_IS_INET_SOCKET_ADDRESS(local))
                return true;
        if (!b->token)
                return false;
        h = soup_message_headers_get_one(soup_server_message_get_request_headers(msg),
                                         "Authorization");
        if (!h || g_ascii_strncasecmp(h, "Bearer ", 7) != 0)
                return false;
        h += 7;
        n = strlen(h);
        want = strlen(b->token);
        if (n != want)
                return false;
        for (size_t i = 0; i < n; i++)
                diff |= (unsigned char) (h[i] ^ b->token[i]);
        return diff == 0;
}

/* Which API's error form a path's answers take */
static Api api_of(const char *path) {
        return g_str_has_prefix(path, "/api/") ? API_OLLAMA : API_OPENAI;
}

static void respond_unauthorized(SoupServerMessage *msg, Api api) {
        g_auto(Fail) f = {};
        fail_set(&f, 401, "invalid_request_error", "invalid_api_key",
                 "A bearer token is required on TCP: send 'Authorization: Bearer TOKEN' "
                 "with the token that 'agentxpu serve --print-token' prints");
        respond_error(msg, api, &f);
}

/* Before the body is read: a client without the token on TCP, or a body declared over the
 * cap, is answered now and its body dropped as it comes; any other body is kept as it
 * arrives, up to the cap (Body). */
void http_early_handler(SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *query,
                        gpointer data) {
        Bridge *b = data;
        SoupMessageHeaders *h = soup_server_message_get_request_headers(msg);
        Api api = api_of(path);
        g_auto(Fail) f = {};
        Body *body;

        (void) server;
        (void) query;
        /* libsoup reads a body even after the status is set: here it reads and drops it */
        soup_message_body_set_accumulate(soup_server_message_get_request_body(msg), FALSE);
        if (!authorized(b, msg)) {
                respond_unauthorized(msg, api);
                return;
        }
        if (soup_message_headers_get_encoding(h) == SOUP_ENCODING_CONTENT_LENGTH &&
            (guint64) soup_message_headers_get_content_length(h) > b->max_body) {
                fail_too_large(b, (guint64) soup_message_headers_get_content_length(h), &f);
                respond_error(msg, api, &f);
                return;
        }
        body = g_new0(Body, 1);
        body->data = g_byte_array_new();
        g_object_set_data_full(G_OBJECT(msg), BODY_KEY, body, body_free);
        g_signal_connect(msg, "got-chunk", G_CALLBACK(on_got_chunk), b);
}

void http_handler(SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *query,
                  gpointer data) {
        Bridge *b = data;
        const char *method = soup_server_message_get_method(msg);
        Api api = api_of(path);
        g_auto(Fail) f = {};

        /* (a request refused before its body was read never comes here) */
        if (!authorized(b, msg)) {
                respond_unauthorized(msg, api);
                return;
        }
        if (embeddings_route(b, msg, method, path) || openai_route(b, msg, method, path) ||
            ollama_route(b, msg, method, path) ||
            llamacpp_route(b, msg, method, path))
                return;
        if (strcmp(path, "/") == 0 && (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0)) {
                static const char text[] = "agentxpu is running";
                soup_server_message_set_status(msg, 200, NULL);
                soup_server_message_set_response(msg, "text/plain", SOUP_MEMORY_STATIC, text,
                                                 sizeof(text) - 1);
                return;
        }
        fail_set(&f, 404, "invalid_request_error", "unknown_url", "Unknown request %s %s", method,
                 path);
        respond_error(msg, api, &f);
}
