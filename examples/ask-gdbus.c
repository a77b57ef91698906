/* SPDX-License-Identifier: MIT */
/* agentxpu-ask-gdbus: how a desktop application asks the engine, with GDBus (GLib's D-Bus).
 *
 *   agentxpu-ask-gdbus [--address ADDRESS] [-n N] [--temperature T] [--raw] PROMPT
 *
 * 1. Subscribe to the engine's request signals (Token, Finished) before submitting: they
 *    are sent to this connection alone, and signals from one sender arrive in order.
 * 2. Call Reactive asynchronously; it replies at once with the request's object path.
 * 3. Print each Token of that path as it arrives; stop at its Finished.
 *
 * The main loop never blocks, as in a GTK application: the answer streams in while the
 * interface stays responsive. Exit status: 0 when the answer is complete, 1 otherwise. */
#include <gio/gio.h>
#include <stdio.h>

#define ENGINE_NAME "org.agentxpu.Engine"
#define ENGINE_PATH "/org/agentxpu/Engine"
#define ENGINE_IFACE "org.agentxpu.Engine"
#define REQUEST_IFACE "org.agentxpu.Engine.Request"

typedef struct Ask {
        GMainLoop *loop;
        char *path;      /* our request, once Reactive has replied */
        GQueue early;    /* signals that came before the reply (kept, in order) */
        int status;
} Ask;

static void handle_signal(Ask *a, const char *path, const char *member, GVariant *params) {
        if (g_strcmp0(path, a->path) != 0)
                return; /* another request of this connection */

        if (g_str_equal(member, "Token") && g_variant_is_of_type(params, G_VARIANT_TYPE("(s)"))) {
                const char *text;
                g_variant_get(params, "(&s)", &text);
                fputs(text, stdout);
                fflush(stdout);
        } else if (g_str_equal(member, "Finished") && g_variant_is_of_type(params, G_VARIANT_TYPE("(sa{sv})"))) {
                const char *reason;
                g_autoptr(GVariant) stats = NULL;
                g_autofree char *error = NULL;

                g_variant_get(params, "(&s@a{sv})", &reason, &stats);
                putchar('\n');
                if (g_str_equal(reason, "stop") || g_str_equal(reason, "length"))
                        a->status = 0;
                else {
                        g_variant_lookup(stats, "error", "s", &error);
                        fprintf(stderr, "agentxpu-ask-gdbus: the request ended: %s%s%s\n", reason,
                                error ? ": " : "", error ? error : "");
                }
                g_main_loop_quit(a->loop);
        }
}

typedef struct Early {
        char *path, *member;
        GVariant *params;
} Early;

static void on_signal(GDBusConnection *c, const char *sender, const char *path, const char *iface,
                      const char *member, GVariant *params, gpointer userdata) {
        Ask *a = userdata;

        if (!a->path) {
                Early *e = g_new(Early, 1);
                e->path = g_strdup(path);
                e->member = g_strdup(member);
                e->params = g_variant_ref(params);
                g_queue_push_tail(&a->early, e);
                return;
        }
        handle_signal(a, path, member, params);
}

static void on_reply(GObject *source, GAsyncResult *res, gpointer userdata) {
        Ask *a = userdata;
        g_autoptr(GError) error = NULL;
        g_autoptr(GVariant) reply = g_dbus_connection_call_finish(G_DBUS_CONNECTION(source), res, &error);
        Early *e;

        if (!reply) {
                g_dbus_error_strip_remote_error(error);
                fprintf(stderr, "agentxpu-ask-gdbus: %s\n", error->message);
                g_main_loop_quit(a->loop);
                return;
        }
        g_variant_get(reply, "(o)", &a->path);
        while ((e = g_queue_pop_head(&a->early))) {
                handle_signal(a, e->path, e->member, e->params);
                g_free(e->path);
                g_free(e->member);
                g_variant_unref(e->params);
                g_free(e);
        }
}

int main(int argc, char **argv) {
        g_autofree char *address = NULL;
        int max_tokens = 0;
        double temperature = -1;
        gboolean raw = FALSE;
        GOptionEntry entries[] = {
                { "address", 0, 0, G_OPTION_ARG_STRING, &address, "the bus (default: the system bus)", "ADDRESS" },
                { "max-tokens", 'n', 0, G_OPTION_ARG_INT, &max_tokens, "generate at most N tokens", "N" },
                { "temperature", 0, 0, G_OPTION_ARG_DOUBLE, &temperature, "0 is greedy", "T" },
                { "raw", 0, 0, G_OPTION_ARG_NONE, &raw, "no chat template", NULL },
                { NULL }
        };
        g_autoptr(GOptionContext) opts = g_option_context_new("PROMPT");
        g_autoptr(GDBusConnection) bus = NULL;
        g_autoptr(GError) error = NULL;
        GVariantBuilder options;
        Ask a = { .status = 1 };
        guint sub;

        g_option_context_add_main_entries(opts, entries, NULL);
        if (!g_option_context_parse(opts, &argc, &argv, &error) || argc != 2) {
                fprintf(stderr, "usage: agentxpu-ask-gdbus [--address ADDRESS] [-n N] [--temperature T] [--raw] PROMPT\n");
                return 2;
        }

        if (address)
                bus = g_dbus_connection_new_for_address_sync(address,
                                                             G_DBUS_CONNECTION_FLAGS_AUTHENTICATION_CLIENT |
                                                             G_DBUS_CONNECTION_FLAGS_MESSAGE_BUS_CONNECTION,
                                                             NULL, NULL, &error);
        else
                bus = g_bus_get_sync(G_BUS_TYPE_SYSTEM, NULL, &error);
        if (!bus) {
                fprintf(stderr, "agentxpu-ask-gdbus: cannot connect: %s\n", error->message);
                return 1;
        }

        a.loop = g_main_loop_new(NULL, FALSE);
        g_queue_init(&a.early);
        sub = g_dbus_connection_signal_subscribe(bus, ENGINE_NAME, REQUEST_IFACE, NULL, NULL, NULL,
                                                 G_DBUS_SIGNAL_FLAGS_NONE, on_signal, &a, NULL);

        g_variant_builder_init(&options, G_VARIANT_TYPE("a{sv}"));
        if (max_tokens > 0)
                g_variant_builder_add(&options, "{sv}", "max_tokens", g_variant_new_uint32((guint32) max_tokens));
        if (temperature >= 0)
                g_variant_builder_add(&options, "{sv}", "temperature", g_variant_new_double(temperature));
        if (raw)
                g_variant_builder_add(&options, "{sv}", "raw", g_variant_new_boolean(TRUE));
        g_dbus_connection_call(bus, ENGINE_NAME, ENGINE_PATH, ENGINE_IFACE, "Reactive",
                               g_variant_new("(sa{sv})", argv[1], &options), G_VARIANT_TYPE("(o)"),
                               G_DBUS_CALL_FLAGS_NONE, -1, NULL, on_reply, &a);

        g_main_loop_run(a.loop);

        g_dbus_connection_signal_unsubscribe(bus, sub);
        g_main_loop_unref(a.loop);
        g_free(a.path);
        return a.status;
}
