/* SPDX-License-Identifier: MIT */
#include "notify.h"

#include <string.h>

#define NOTIFY_NAME "org.freedesktop.Notifications"
#define NOTIFY_PATH "/org/freedesktop/Notifications"
#define NOTIFY_ITEMS_MAX 64
#define NOTIFY_BODY_MAX 300

typedef struct Item {
        guint32 id;
        char *uri;              /* what "open" opens; NULL for clipboard suggestions */
} Item;

struct Notifier {
        GCancellable *cancel;
        GDBusConnection *conn;
        guint watch_id, action_sub, closed_sub;
        char *owner;
        bool markup, capabilities_asked;
        bool told_absent;       /* said once that nobody shows notifications */
        GQueue items;           /* Item*, oldest first */
};

static void item_free(Item *it) {
        g_free(it->uri);
        g_free(it);
}

static Item *take_item(Notifier *n, guint32 id) {
        for (GList *l = n->items.head; l; l = l->next) {
                Item *it = l->data;
                if (it->id == id) {
                        g_queue_delete_link(&n->items, l);
                        return it;
                }
        }
        return NULL;
}

static void on_launched(GObject *src, GAsyncResult *res, gpointer data) {
        g_autofree char *uri = data;
        g_autoptr(GError) e = NULL;
        if (!g_app_info_launch_default_for_uri_finish(res, &e))
                g_warning("notifications: cannot open %s: %s", uri, e->message);
        else
                g_message("notifications: opened %s", uri);
}

static void on_signal(GDBusConnection *conn, const char *sender, const char *path,
                      const char *iface, const char *member, GVariant *params, gpointer data) {
        Notifier *n = data;
        guint32 id;

        if (g_strcmp0(sender, n->owner) != 0)
                return;
        if (strcmp(member, "ActionInvoked") == 0 &&
            g_variant_is_of_type(params, G_VARIANT_TYPE("(us)"))) {
                const char *action;
                Item *it;
                g_variant_get(params, "(u&s)", &id, &action);
                it = take_item(n, id);
                if (!it)
                        return;
                if ((strcmp(action, "open") == 0 || strcmp(action, "default") == 0) && it->uri)
                        g_app_info_launch_default_for_uri_async(it->uri, NULL, NULL, on_launched,
                                                                g_strdup(it->uri));
                else if (strcmp(action, "dismiss") == 0)
                        g_dbus_connection_call(n->conn, NOTIFY_NAME, NOTIFY_PATH, NOTIFY_NAME,
                                               "CloseNotification", g_variant_new("(u)", id), NULL,
                                               G_DBUS_CALL_FLAGS_NONE, -1, NULL, NULL, NULL);
                item_free(it);
        } else if (strcmp(member, "NotificationClosed") == 0 &&
                   g_variant_is_of_type(params, G_VARIANT_TYPE("(uu)"))) {
                g_variant_get(params, "(uu)", &id, NULL);
                Item *it = take_item(n, id);
                if (it)
                        item_free(it);
        }
}

static void on_capabilities(GObject *src, GAsyncResult *res, gpointer data) {
        g_autoptr(GError) e = NULL;
        g_autoptr(GVariant) caps = g_dbus_connection_call_finish(G_DBUS_CONNECTION(src), res, &e);
        g_autofree const char **list = NULL;
        Notifier *n = data;

        if (!caps)
                return;
        g_variant_get(caps, "(^a&s)", &list);
        n->markup = list && g_strv_contains(list, "body-markup");
}

static void on_appeared(GDBusConnection *conn, const char *name, const char *owner, gpointer data) {
        Notifier *n = data;
        g_free(n->owner);
        n->owner = g_strdup(owner);
        n->told_absent = false;
        g_dbus_connection_call(conn, NOTIFY_NAME, NOTIFY_PATH, NOTIFY_NAME, "GetCapabilities", NULL,
                               G_VARIANT_TYPE("(as)"), G_DBUS_CALL_FLAGS_NONE, -1, n->cancel,
                               on_capabilities, n);
}

static void on_vanished(GDBusConnection *conn, const char *name, gpointer data) {
        Notifier *n = data;
        g_clear_pointer(&n->owner, g_free);
        g_queue_clear_full(&n->items, (GDestroyNotify) item_free);
}

static void on_connected(GObject *src, GAsyncResult *res, gpointer data) {
        g_autoptr(GError) e = NULL;
        GDBusConnection *conn = g_bus_get_finish(res, &e);
        Notifier *n = data;

        if (!conn) {
                if (!g_error_matches(e, G_IO_ERROR, G_IO_ERROR_CANCELLED)) {
                        g_message("notifications: no session bus (%s); suggestions are kept in the "
                                  "store only (see: agentxpu suggestions)", e->message);
                        n->told_absent = true;
                }
                return;
        }
        n->conn = conn;
        g_dbus_connection_set_exit_on_close(conn, FALSE);
        n->action_sub = g_dbus_connection_signal_subscribe(conn, NULL, NOTIFY_NAME, "ActionInvoked",
                                                           NOTIFY_PATH, NULL,
                                                           G_DBUS_SIGNAL_FLAGS_NONE, on_signal, n,
                                                           NULL);
        n->closed_sub = g_dbus_connection_signal_subscribe(conn, NULL, NOTIFY_NAME,
                                                           "NotificationClosed", NOTIFY_PATH, NULL,
                                                           G_DBUS_SIGNAL_FLAGS_NONE, on_signal, n,
                                                           NULL);
        n->watch_id = g_bus_watch_name_on_connection(conn, NOTIFY_NAME, G_BUS_NAME_WATCHER_FLAGS_NONE,
                                                     on_appeared, on_vanished, n, NULL);
}

Notifier *notifier_new(void) {
        Notifier *n = g_new0(Notifier, 1);
        n->cancel = g_cancellable_new();
        g_queue_init(&n->items);
        g_bus_get(G_BUS_TYPE_SESSION, n->cancel, on_connected, n);
        return n;
}

void notifier_free(Notifier *n) {
        if (!n)
                return;
        g_cancellable_cancel(n->cancel);
        if (n->watch_id)
                g_bus_unwatch_name(n->watch_id);
        if (n->conn) {
                g_dbus_connection_signal_unsubscribe(n->conn, n->action_sub);
                g_dbus_connection_signal_unsubscribe(n->conn, n->closed_sub);
                g_object_unref(n->conn);
        }
        g_queue_clear_full(&n->items, (GDestroyNotify) item_free);
        g_object_unref(n->cancel);
        g_free(n->owner);
        g_free(n);
}

typedef struct ShowCall {
        Notifier *n;
        char *uri;
} ShowCall;

static void on_notified(GObject *src, GAsyncResult *res, gpointer data) {
        ShowCall *call = data;
        g_autofree char *uri = call->uri;
        g_autoptr(GError) e = NULL;
        g_autoptr(GVariant) reply = g_dbus_connection_call_finish(G_DBUS_CONNECTION(src), res, &e);
        Notifier *n = call->n;

        g_free(call);
        if (g_error_matches(e, G_IO_ERROR, G_IO_ERROR_CANCELLED))
                return;
        if (!reply) {
                g_dbus_error_strip_remote_error(e);
                if (!n->told_absent)
                        g_message("notifications: no notification server answers on the session bus "
                                  "(%s); suggestions are kept in the store only (see: agentxpu "
                                  "suggestions)", e->message);
                n->told_absent = true;
                return;
        }
        Item *it = g_new0(Item, 1);
        g_variant_get(reply, "(u)", &it->id);
        it->uri = g_steal_pointer(&uri);
        g_queue_push_tail(&n->items, it);
        while (g_queue_get_length(&n->items) > NOTIFY_ITEMS_MAX)
                item_free(g_queue_pop_head(&n->items));
}

void notifier_show(Notifier *n, const Event *ev, const Suggestion *sug) {
        g_autofree char *about = NULL, *clipped = NULL, *text = NULL, *body = NULL;
        GVariantBuilder actions, hints;
        ShowCall *call;

        /* No bus, or nobody answered: wait for a server to appear rather than ask each time. */
        if (!n->conn || (n->told_absent && !n->owner))
                return;
        if (ev->source == EVENT_CLIPBOARD)
                about = g_strdup("the text you copied");
        else if (ev->source == EVENT_BATCH)
                about = g_strdup_printf("%" G_GUINT64_FORMAT " changed files",
                                        ev->batch ? ev->batch->total : 0);
        else
                about = g_filename_display_basename(ev->path);  /* UTF-8 whatever the name */
        clipped = g_utf8_substring(sug->body, 0, MIN(g_utf8_strlen(sug->body, -1), NOTIFY_BODY_MAX));
        text = g_strdup_printf("%s\n(%s: %s)", clipped, sug->kind, about);
        body = n->markup ? g_markup_escape_text(text, -1) : g_strdup(text);

        g_variant_builder_init(&actions, G_VARIANT_TYPE("as"));
        if (ev->source != EVENT_CLIPBOARD) {
                g_variant_builder_add(&actions, "s", "default");
                g_variant_builder_add(&actions, "s", "Open");
                g_variant_builder_add(&actions, "s", "open");
                g_variant_builder_add(&actions, "s", "Open");
        }
        g_variant_builder_add(&actions, "s", "dismiss");
        g_variant_builder_add(&actions, "s", "Dismiss");
        g_variant_builder_init(&hints, G_VARIANT_TYPE("a{sv}"));
        g_variant_builder_add(&hints, "{sv}", "urgency", g_variant_new_byte(0));
        g_variant_builder_add(&hints, "{sv}", "desktop-entry",
                              g_variant_new_string("agentxpu-monitor"));

        call = g_new0(ShowCall, 1);
        call->n = n;
        if (ev->path && ev->source != EVENT_CLIPBOARD)
                call->uri = g_filename_to_uri(ev->path, NULL, NULL);
        g_dbus_connection_call(n->conn, NOTIFY_NAME, NOTIFY_PATH, NOTIFY_NAME, "Notify",
                               g_variant_new("(susssasa{sv}i)", "agentxpu", 0u, "dialog-information",
                                             sug->title, body, &actions, &hints, -1),
                               G_VARIANT_TYPE("(u)"), G_DBUS_CALL_FLAGS_NONE, -1, n->cancel,
                               on_notified, call);
}
