/* SPDX-License-Identifier: MIT */
/* TEST STAND-IN for a notification server (org.freedesktop.Notifications). Records each
 * Notify and CloseNotification as a JSON line, and with --invoke ACTION presses that action
 * on every notification shortly after showing it.
 *   fake-notifyd --address ADDR --output FILE [--invoke ACTION] */
#include <gio/gio.h>
#include <glib-unix.h>
#include <stdio.h>
#include <string.h>

#include "json-out.h"

static const char xml[] =
        "<node><interface name='org.freedesktop.Notifications'>"
        "<method name='Notify'><arg type='s' direction='in'/><arg type='u' direction='in'/>"
        "<arg type='s' direction='in'/><arg type='s' direction='in'/><arg type='s' direction='in'/>"
        "<arg type='as' direction='in'/><arg type='a{sv}' direction='in'/><arg type='i' direction='in'/>"
        "<arg type='u' direction='out'/></method>"
        "<method name='CloseNotification'><arg type='u' direction='in'/></method>"
        "<method name='GetCapabilities'><arg type='as' direction='out'/></method>"
        "<method name='GetServerInformation'><arg type='s' direction='out'/><arg type='s' direction='out'/>"
        "<arg type='s' direction='out'/><arg type='s' direction='out'/></method>"
        "<signal name='NotificationClosed'><arg type='u'/><arg type='u'/></signal>"
        "<signal name='ActionInvoked'><arg type='u'/><arg type='s'/></signal>"
        "</interface></node>";

typedef struct Server {
        GDBusConnection *conn;
        FILE *out;
        char *invoke;
        guint32 next;
} Server;

typedef struct Press {
        Server *s;
        guint32 id;
} Press;

static gboolean press_cb(gpointer data) {
        Press *p = data;
        g_dbus_connection_emit_signal(p->s->conn, NULL, "/org/freedesktop/Notifications",
                                      "org.freedesktop.Notifications", "ActionInvoked",
                                      g_variant_new("(us)", p->id, p->s->invoke), NULL);
        return G_SOURCE_REMOVE;
}

static void method(GDBusConnection *conn, const char *sender, const char *path, const char *iface,
                   const char *name, GVariant *params, GDBusMethodInvocation *inv, gpointer data) {
        Server *s = data;

        if (strcmp(name, "Notify") == 0) {
                guint32 id = ++s->next;
                const char *app, *icon, *summary, *body;
                g_autofree const char **actions = NULL;
                g_variant_get(params, "(&su&s&s&s^a&s@a{sv}i)", &app, NULL, &icon, &summary, &body,
                              &actions, NULL, NULL);
                GString *line = g_string_new("{\"op\":\"notify\",\"id\":");
                g_string_append_printf(line, "%u,\"summary\":", id);
                json_out_string(line, summary);
                g_string_append(line, ",\"body\":");
                json_out_string(line, body);
                g_string_append(line, ",\"actions\":[");
                for (size_t i = 0; actions && actions[i]; i++) {
                        if (i)
                                g_string_append_c(line, ',');
                        json_out_string(line, actions[i]);
                }
                g_string_append(line, "]}\n");
                fputs(line->str, s->out);
                fflush(s->out);
                g_string_free(line, TRUE);
                g_dbus_method_invocation_return_value(inv, g_variant_new("(u)", id));
                if (s->invoke) {
                        Press *p = g_new0(Press, 1);
                        p->s = s;
                        p->id = id;
                        g_timeout_add_full(G_PRIORITY_DEFAULT, 300, press_cb, p, g_free);
                }
        } else if (strcmp(name, "CloseNotification") == 0) {
                guint32 id;
                g_variant_get(params, "(u)", &id);
                fprintf(s->out, "{\"op\":\"close\",\"id\":%u}\n", id);
                fflush(s->out);
                g_dbus_method_invocation_return_value(inv, NULL);
                g_dbus_connection_emit_signal(conn, NULL, path, iface, "NotificationClosed",
                                              g_variant_new("(uu)", id, 3u), NULL);
        } else if (strcmp(name, "GetCapabilities") == 0) {
                const char *caps[] = { "actions", "body", NULL };
                g_dbus_method_invocation_return_value(inv, g_variant_new("(^as)", caps));
        } else
                g_dbus_method_invocation_return_value(inv, g_variant_new("(ssss)", "fake-notifyd",
                                                                         "agentxpu tests", "1", "1.2"));
}

static const GDBusInterfaceVTable vtable = { method, NULL, NULL };

static gboolean on_term(gpointer data) {
        g_main_loop_quit(data);
        return G_SOURCE_REMOVE;
}

int main(int argc, char **argv) {
        g_autofree char *address = NULL, *output = NULL;
        g_autoptr(GError) err = NULL;
        Server s = { 0 };
        GOptionEntry entries[] = {
                { "address", 0, 0, G_OPTION_ARG_STRING, &address, "bus address", "ADDR" },
                { "output", 0, 0, G_OPTION_ARG_FILENAME, &output, "record file", "FILE" },
                { "invoke", 0, 0, G_OPTION_ARG_STRING, &s.invoke, "action to press", "ACTION" },
                { NULL },
        };
        g_autoptr(GOptionContext) opts = g_option_context_new("- test notification server");
        g_option_context_add_main_entries(opts, entries, NULL);
        if (!g_option_context_parse(opts, &argc, &argv, &err) || !address || !output) {
                fprintf(stderr, "fake-notifyd: give --address and --output\n");
                return 2;
        }
        s.out = fopen(output, "a");
        g_autoptr(GDBusNodeInfo) node = g_dbus_node_info_new_for_xml(xml, &err);
        s.conn = g_dbus_connection_new_for_address_sync(address,
                                                        G_DBUS_CONNECTION_FLAGS_AUTHENTICATION_CLIENT |
                                                                G_DBUS_CONNECTION_FLAGS_MESSAGE_BUS_CONNECTION,
                                                        NULL, NULL, &err);
        if (!s.out || !node || !s.conn) {
                fprintf(stderr, "fake-notifyd: %s\n", err ? err->message : "cannot open output");
                return 1;
        }
        g_dbus_connection_register_object(s.conn, "/org/freedesktop/Notifications", node->interfaces[0],
                                          &vtable, &s, NULL, &err);
        g_autoptr(GVariant) owned = g_dbus_connection_call_sync(
                s.conn, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                "RequestName", g_variant_new("(su)", "org.freedesktop.Notifications", 4u),
                G_VARIANT_TYPE("(u)"), G_DBUS_CALL_FLAGS_NONE, -1, NULL, &err);
        if (!owned) {
                fprintf(stderr, "fake-notifyd: %s\n", err->message);
                return 1;
        }
        printf("ready\n");
        fflush(stdout);
        GMainLoop *loop = g_main_loop_new(NULL, FALSE);
        g_unix_signal_add(SIGTERM, on_term, loop);
        g_main_loop_run(loop);
        return 0;
}
