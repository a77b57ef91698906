/* SPDX-License-Identifier: MIT */
/* TEST TOOL: records every message on a bus, as one JSON object per line, through the
 * bus's monitoring interface (org.freedesktop.DBus.Monitoring.BecomeMonitor). Tests assert
 * on what the monitor sent (its Proactive prompts, and that a secret is nowhere) whichever
 * engine answers.
 *   bus-recorder --address ADDR --output FILE      (prints "ready" once recording) */
#include <gio/gio.h>
#include <glib-unix.h>
#include <stdio.h>
#include <string.h>

#include "json-out.h"

typedef struct Recorder {
        FILE *out;
        char *self;
        GMutex lock;
} Recorder;

static const char *type_name(GDBusMessageType t) {
        switch (t) {
        case G_DBUS_MESSAGE_TYPE_METHOD_CALL: return "call";
        case G_DBUS_MESSAGE_TYPE_METHOD_RETURN: return "return";
        case G_DBUS_MESSAGE_TYPE_ERROR: return "error";
        case G_DBUS_MESSAGE_TYPE_SIGNAL: return "signal";
        default: return "other";
        }
}

static GDBusMessage *filter(GDBusConnection *conn, GDBusMessage *msg, gboolean incoming,
                            gpointer data) {
        Recorder *r = data;
        GDBusMessageType t = g_dbus_message_get_message_type(msg);
        GVariant *body = g_dbus_message_get_body(msg);
        g_autoptr(GString) line = g_string_new("{\"type\":");

        if (!incoming)
                return msg;
        /* The reply to our own BecomeMonitor call goes on to its caller. */
        if (t == G_DBUS_MESSAGE_TYPE_METHOD_RETURN &&
            g_strcmp0(g_dbus_message_get_destination(msg), r->self) == 0 &&
            g_strcmp0(g_dbus_message_get_sender(msg), "org.freedesktop.DBus") == 0)
                return msg;

        json_out_string(line, type_name(t));
        g_string_append(line, ",\"sender\":");
        json_out_string(line, g_dbus_message_get_sender(msg));
        g_string_append(line, ",\"destination\":");
        json_out_string(line, g_dbus_message_get_destination(msg));
        g_string_append(line, ",\"path\":");
        json_out_string(line, g_dbus_message_get_path(msg));
        g_string_append(line, ",\"interface\":");
        json_out_string(line, g_dbus_message_get_interface(msg));
        g_string_append(line, ",\"member\":");
        json_out_string(line, g_dbus_message_get_member(msg));
        g_string_append_printf(line, ",\"serial\":%u,\"reply_serial\":%u",
                               g_dbus_message_get_serial(msg),
                               g_dbus_message_get_reply_serial(msg));
        if (body) {
                g_autofree char *printed = g_variant_print(body, TRUE);
                g_string_append(line, ",\"body\":");
                json_out_string(line, printed);
                if (g_variant_n_children(body) > 0) {
                        g_autoptr(GVariant) first = g_variant_get_child_value(body, 0);
                        if (g_variant_is_of_type(first, G_VARIANT_TYPE_STRING)) {
                                g_string_append(line, ",\"arg0\":");
                                json_out_string(line, g_variant_get_string(first, NULL));
                        }
                }
        }
        g_string_append(line, "}\n");
        g_mutex_lock(&r->lock);
        fputs(line->str, r->out);
        fflush(r->out);
        g_mutex_unlock(&r->lock);
        g_object_unref(msg);
        return NULL;
}

static gboolean on_term(gpointer data) {
        g_main_loop_quit(data);
        return G_SOURCE_REMOVE;
}

int main(int argc, char **argv) {
        g_autofree char *address = NULL, *output = NULL;
        g_autoptr(GError) err = NULL;
        g_autoptr(GDBusConnection) conn = NULL;
        Recorder r = { 0 };
        GOptionEntry entries[] = {
                { "address", 0, 0, G_OPTION_ARG_STRING, &address, "bus address", "ADDR" },
                { "output", 0, 0, G_OPTION_ARG_FILENAME, &output, "where to write", "FILE" },
                { NULL },
        };
        g_autoptr(GOptionContext) opts = g_option_context_new("- record a bus");
        g_option_context_add_main_entries(opts, entries, NULL);
        if (!g_option_context_parse(opts, &argc, &argv, &err) || !address || !output) {
                fprintf(stderr, "bus-recorder: give --address and --output\n");
                return 2;
        }
        r.out = fopen(output, "a");
        if (!r.out) {
                perror("bus-recorder");
                return 1;
        }
        g_mutex_init(&r.lock);
        conn = g_dbus_connection_new_for_address_sync(address,
                                                      G_DBUS_CONNECTION_FLAGS_AUTHENTICATION_CLIENT |
                                                              G_DBUS_CONNECTION_FLAGS_MESSAGE_BUS_CONNECTION,
                                                      NULL, NULL, &err);
        if (!conn) {
                fprintf(stderr, "bus-recorder: %s\n", err->message);
                return 1;
        }
        r.self = g_strdup(g_dbus_connection_get_unique_name(conn));
        g_dbus_connection_add_filter(conn, filter, &r, NULL);
        g_autoptr(GVariant) reply = g_dbus_connection_call_sync(
                conn, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                "org.freedesktop.DBus.Monitoring", "BecomeMonitor",
                g_variant_new("(^asu)", (const char *const[]) { NULL }, 0u), NULL,
                G_DBUS_CALL_FLAGS_NONE, -1, NULL, &err);
        if (!reply) {
                fprintf(stderr, "bus-recorder: %s\n", err->message);
                return 1;
        }
        printf("ready\n");
        fflush(stdout);
        GMainLoop *loop = g_main_loop_new(NULL, FALSE);
        g_unix_signal_add(SIGTERM, on_term, loop);
        g_unix_signal_add(SIGINT, on_term, loop);
        g_main_loop_run(loop);
        return 0;
}
