/* SPDX-License-Identifier: MIT */
/* TEST STAND-IN for agentxpu-engine: answers org.agentxpu.Engine on a private bus, per
 * dbus/org.agentxpu.Engine.xml, with canned text instead of a model. For the monitor's tests
 * until the real daemon exists; the tests take the engine command from AXP_ENGINE_CMD.
 *   fake-engine --address ADDR [--delay-ms N] [--hold]
 * Each Proactive/Reactive request gets a request object; after --delay-ms its Token signals
 * and then Finished go to the caller alone. --hold never finishes a request. */
#include <gio/gio.h>
#include <glib-unix.h>
#include <stdio.h>
#include <string.h>

typedef struct Engine {
        GDBusConnection *conn;
        GDBusNodeInfo *node;
        GMainLoop *loop;
        guint next;
        guint delay_ms;
        gboolean hold;
        GHashTable *requests;   /* path → Request */
} Engine;

typedef struct Request {
        Engine *e;
        guint n;
        char *path, *caller, *kind, *state, *prompt;
        guint reg;
        guint timer;
} Request;

static void request_free(Request *r) {
        if (r->timer)
                g_source_remove(r->timer);
        if (r->reg)
                g_dbus_connection_unregister_object(r->e->conn, r->reg);
        g_free(r->path);
        g_free(r->caller);
        g_free(r->kind);
        g_free(r->state);
        g_free(r->prompt);
        g_free(r);
}

static GVariant *stats(Request *r, const char *error) {
        GVariantBuilder b;
        g_variant_builder_init(&b, G_VARIANT_TYPE("a{sv}"));
        guint32 prompt_tokens = (guint32) strlen(r->prompt) / 4;
        g_variant_builder_add(&b, "{sv}", "prompt_tokens", g_variant_new_uint32(prompt_tokens));
        g_variant_builder_add(&b, "{sv}", "generated_tokens", g_variant_new_uint32(4));
        if (error)
                g_variant_builder_add(&b, "{sv}", "error", g_variant_new_string(error));
        return g_variant_builder_end(&b);
}

static void finish(Request *r, const char *reason) {
        g_dbus_connection_emit_signal(r->e->conn, r->caller, r->path, "org.agentxpu.Engine.Request",
                                      "Finished", g_variant_new("(s@a{sv})", reason, stats(r, NULL)),
                                      NULL);
        g_hash_table_remove(r->e->requests, r->path);
}

static gboolean answer_cb(gpointer data) {
        Request *r = data;
        g_autofree char *first = g_strndup(r->prompt, strcspn(r->prompt, "\n"));
        g_autofree char *head = g_utf8_substring(first, 0, MIN(g_utf8_strlen(first, -1), 60));
        const char *parts[] = { "Stand-in ", "suggestion ", NULL, "about: ", NULL };
        g_autofree char *num = g_strdup_printf("#%u ", r->n);

        r->timer = 0;
        parts[2] = num;
        parts[4] = head;
        for (size_t i = 0; i < G_N_ELEMENTS(parts); i++)
                g_dbus_connection_emit_signal(r->e->conn, r->caller, r->path,
                                              "org.agentxpu.Engine.Request", "Token",
                                              g_variant_new("(s)", parts[i]), NULL);
        finish(r, "stop");
        return G_SOURCE_REMOVE;
}

static void request_method(GDBusConnection *conn, const char *sender, const char *path,
                           const char *iface, const char *method, GVariant *params,
                           GDBusMethodInvocation *inv, gpointer data) {
        Request *r = data;
        if (g_strcmp0(sender, r->caller) != 0) {
                g_dbus_method_invocation_return_dbus_error(inv, "org.agentxpu.Error.AccessDenied",
                                                           "not your request");
                return;
        }
        g_dbus_method_invocation_return_value(inv, NULL);
        finish(r, "cancelled");
}

static GVariant *request_property(GDBusConnection *conn, const char *sender, const char *path,
                                  const char *iface, const char *prop, GError **error, gpointer data) {
        Request *r = data;
        if (strcmp(prop, "Kind") == 0)
                return g_variant_new_string(r->kind);
        if (strcmp(prop, "State") == 0)
                return g_variant_new_string(r->state);
        return stats(r, NULL);
}

static const GDBusInterfaceVTable request_vtable = { request_method, request_property, NULL };

/* The contract's option keys and types; anything else is InvalidArgument. */
static gboolean check_options(GVariant *opts, gboolean complete, char **why) {
        static const struct { const char *key, *type; } known[] = {
                { "max_tokens", "u" }, { "temperature", "d" }, { "top_k", "u" }, { "top_p", "d" },
                { "min_p", "d" }, { "repeat_penalty", "d" }, { "seed", "t" }, { "stop", "as" },
                { "system", "s" }, { "flow", "o" }, { "raw", "b" }, { "priority", "s" },
        };
        GVariantIter it;
        const char *key;
        GVariant *v;

        g_variant_iter_init(&it, opts);
        while (g_variant_iter_next(&it, "{&sv}", &key, &v)) {
                gboolean ok = FALSE;
                for (size_t i = 0; i < G_N_ELEMENTS(known); i++)
                        if (strcmp(key, known[i].key) == 0 &&
                            g_variant_is_of_type(v, G_VARIANT_TYPE(known[i].type)) &&
                            (complete || strcmp(key, "priority") != 0))
                                ok = TRUE;
                g_variant_unref(v);
                if (!ok) {
                        *why = g_strdup_printf("unknown option or wrong type: %s", key);
                        return FALSE;
                }
        }
        return TRUE;
}

static void engine_method(GDBusConnection *conn, const char *sender, const char *path,
                          const char *iface, const char *method, GVariant *params,
                          GDBusMethodInvocation *inv, gpointer data) {
        Engine *e = data;
        const char *prompt;
        g_autoptr(GVariant) opts = NULL;
        g_autofree char *why = NULL;
        g_autoptr(GError) err = NULL;

        if (strcmp(method, "Reactive") != 0 && strcmp(method, "Proactive") != 0 &&
            strcmp(method, "Complete") != 0) {
                g_dbus_method_invocation_return_dbus_error(inv, "org.agentxpu.Error.AccessDenied",
                                                           "the stand-in does not administer");
                return;
        }
        g_variant_get(params, "(&s@a{sv})", &prompt, &opts);
        if (!check_options(opts, strcmp(method, "Complete") == 0, &why)) {
                g_dbus_method_invocation_return_dbus_error(inv, "org.agentxpu.Error.InvalidArgument",
                                                           why);
                return;
        }
        if (strcmp(method, "Complete") == 0) {
                Request tmp = { .prompt = (char *) prompt };
                g_dbus_method_invocation_return_value(inv, g_variant_new("(s@a{sv})", "Stand-in answer.",
                                                                         stats(&tmp, NULL)));
                return;
        }
        Request *r = g_new0(Request, 1);
        r->e = e;
        r->n = ++e->next;
        r->path = g_strdup_printf("/org/agentxpu/Engine/request/%u", r->n);
        r->caller = g_strdup(sender);
        r->kind = g_ascii_strdown(method, -1);
        r->state = g_strdup("queued");
        r->prompt = g_strdup(prompt);
        r->reg = g_dbus_connection_register_object(conn, r->path,
                                                   g_dbus_node_info_lookup_interface(e->node, "org.agentxpu.Engine.Request"),
                                                   &request_vtable, r, NULL, &err);
        g_hash_table_insert(e->requests, r->path, r);
        fprintf(stderr, "fake-engine: request %u (%s) from %s, %zu bytes\n", r->n, r->kind, sender,
                strlen(prompt));
        g_dbus_method_invocation_return_value(inv, g_variant_new("(o)", r->path));
        if (!e->hold)
                r->timer = g_timeout_add(e->delay_ms, answer_cb, r);
}

static GVariant *engine_property(GDBusConnection *conn, const char *sender, const char *path,
                                 const char *iface, const char *prop, GError **error, gpointer data) {
        if (strcmp(prop, "Version") == 0 || strcmp(prop, "Model") == 0)
                return g_variant_new_string("test stand-in");
        if (strcmp(prop, "Policy") == 0)
                return g_variant_new_string("fcfs");
        if (strcmp(prop, "Devices") == 0)
                return g_variant_new_array(G_VARIANT_TYPE("(ssa{sv})"), NULL, 0);
        return g_variant_new_uint32(0);
}

static const GDBusInterfaceVTable engine_vtable = { engine_method, engine_property, NULL };

static gboolean on_term(gpointer data) {
        g_main_loop_quit(((Engine *) data)->loop);
        return G_SOURCE_REMOVE;
}

int main(int argc, char **argv) {
        g_autofree char *address = NULL, *xml = NULL;
        gint delay_ms = 200;
        Engine e = { 0 };
        g_autoptr(GError) err = NULL;
        GOptionEntry entries[] = {
                { "address", 0, 0, G_OPTION_ARG_STRING, &address, "bus address", "ADDR" },
                { "delay-ms", 0, 0, G_OPTION_ARG_INT, &delay_ms, "time before answering", "MS" },
                { "hold", 0, 0, G_OPTION_ARG_NONE, &e.hold, "never answer", NULL },
                { NULL },
        };
        g_autoptr(GOptionContext) opts = g_option_context_new("- test stand-in for agentxpu-engine");
        g_option_context_add_main_entries(opts, entries, NULL);
        if (!g_option_context_parse(opts, &argc, &argv, &err)) {
                fprintf(stderr, "fake-engine: %s\n", err->message);
                return 2;
        }
        if (!address)
                address = g_strdup(g_getenv("DBUS_SYSTEM_BUS_ADDRESS"));
        if (!address) {
                fprintf(stderr, "fake-engine: give --address\n");
                return 2;
        }
        e.delay_ms = (guint) MAX(0, delay_ms);
        if (!g_file_get_contents(ENGINE_XML, &xml, NULL, &err) ||
            !(e.node = g_dbus_node_info_new_for_xml(xml, &err))) {
                fprintf(stderr, "fake-engine: %s\n", err->message);
                return 1;
        }
        e.conn = g_dbus_connection_new_for_address_sync(address,
                                                        G_DBUS_CONNECTION_FLAGS_AUTHENTICATION_CLIENT |
                                                                G_DBUS_CONNECTION_FLAGS_MESSAGE_BUS_CONNECTION,
                                                        NULL, NULL, &err);
        if (!e.conn) {
                fprintf(stderr, "fake-engine: %s\n", err->message);
                return 1;
        }
        e.requests = g_hash_table_new_full(g_str_hash, g_str_equal, NULL,
                                           (GDestroyNotify) request_free);
        g_dbus_connection_register_object(e.conn, "/org/agentxpu/Engine",
                                          g_dbus_node_info_lookup_interface(e.node, "org.agentxpu.Engine"),
                                          &engine_vtable, &e, NULL, &err);
        g_autoptr(GVariant) owned = g_dbus_connection_call_sync(
                e.conn, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                "RequestName", g_variant_new("(su)", "org.agentxpu.Engine", 4u), G_VARIANT_TYPE("(u)"),
                G_DBUS_CALL_FLAGS_NONE, -1, NULL, &err);
        if (!owned) {
                fprintf(stderr, "fake-engine: %s\n", err->message);
                return 1;
        }
        e.loop = g_main_loop_new(NULL, FALSE);
        g_unix_signal_add(SIGTERM, on_term, &e);
        g_unix_signal_add(SIGINT, on_term, &e);
        fprintf(stderr, "fake-engine: ready\n");
        g_main_loop_run(e.loop);
        g_hash_table_unref(e.requests);
        return 0;
}
