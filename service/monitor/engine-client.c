/* SPDX-License-Identifier: MIT */
#include "engine-client.h"

#include <string.h>

#define SUBMIT_TIMEOUT_MS 30000
#define BACKOFF_MAX_S 60

/* A request in the table of requests in flight */
typedef struct Pending {
        EngineClient *c;
        guint64 id;
} Pending;

struct EngineClient {
        char *address;
        EngineCallbacks cb;
        void *userdata;
        GCancellable *cancel;
        GDBusConnection *conn;
        guint watch_id, signal_sub, reconnect_source;
        gulong closed_handler;
        guint backoff_s;
        bool told_unreachable;  /* said once that the bus is unreachable */
        char *owner;
        bool name_known;        /* the name watch has reported */
        EngineRequests *requests; /* request path → Pending */
};

typedef struct SubmitCall {
        EngineClient *c;
        guint64 id;
} SubmitCall;

static void on_token(void *req, const char *text) {
        Pending *p = req;
        p->c->cb.token(p->c->userdata, p->id, text);
}

static void on_finished(void *req, const char *reason, const char *error, GVariant *stats) {
        g_autofree Pending *p = req;
        p->c->cb.finished(p->c->userdata, p->id, reason, error);
}

static const EngineRequestsOps request_ops = { .token = on_token, .finished = on_finished, .drop = g_free };

static void connect_bus(EngineClient *c);

/* Every request of `owner` (all when NULL) is lost: its Finished will never come. */
static void lose_requests(EngineClient *c, const char *owner) {
        engine_requests_lose(c->requests, owner, "lost", NULL);
}

static void on_signal(GDBusConnection *conn, const char *sender, const char *path,
                      const char *iface, const char *member, GVariant *params, gpointer data) {
        EngineClient *c = data;
        engine_requests_signal(c->requests, sender, path, member, params);
}

static void on_name_appeared(GDBusConnection *conn, const char *name, const char *owner,
                             gpointer data) {
        EngineClient *c = data;
        g_free(c->owner);
        c->owner = g_strdup(owner);
        c->name_known = true;
        g_message("engine: %s is on the bus (%s)", ENGINE_BUS_NAME, owner);
        c->cb.changed(c->userdata);
}

static void on_name_vanished(GDBusConnection *conn, const char *name, gpointer data) {
        EngineClient *c = data;
        g_autofree char *old = g_steal_pointer(&c->owner);

        c->name_known = true;
        if (old) {
                g_message("engine: %s left the bus; its unfinished requests will be submitted again",
                          ENGINE_BUS_NAME);
                lose_requests(c, old);
        } else
                g_message("engine: %s is not on the bus yet", ENGINE_BUS_NAME);
        c->cb.changed(c->userdata);
}

static gboolean reconnect_cb(gpointer data) {
        EngineClient *c = data;
        c->reconnect_source = 0;
        connect_bus(c);
        return G_SOURCE_REMOVE;
}

static void schedule_reconnect(EngineClient *c) {
        c->backoff_s = c->backoff_s ? MIN(c->backoff_s * 2, BACKOFF_MAX_S) : 2;
        c->reconnect_source = g_timeout_add_seconds(c->backoff_s, reconnect_cb, c);
}

static void drop_connection(EngineClient *c) {
        if (!c->conn)
                return;
        if (c->watch_id)
                g_bus_unwatch_name(c->watch_id);
        if (c->signal_sub)
                g_dbus_connection_signal_unsubscribe(c->conn, c->signal_sub);
        if (c->closed_handler)
                g_signal_handler_disconnect(c->conn, c->closed_handler);
        c->watch_id = c->signal_sub = 0;
        c->closed_handler = 0;
        g_clear_object(&c->conn);
        g_clear_pointer(&c->owner, g_free);
        c->name_known = false;
}

static void on_closed(GDBusConnection *conn, gboolean remote, GError *error, gpointer data) {
        EngineClient *c = data;
        g_message("engine: lost the bus connection (%s); reconnecting",
                  error ? error->message : "closed");
        drop_connection(c);
        lose_requests(c, NULL);
        schedule_reconnect(c);
}

static void on_connected(GObject *src, GAsyncResult *res, gpointer data) {
        g_autoptr(GError) e = NULL;
        EngineClient *c = data;
        GDBusConnection *conn;

        conn = c->address ? g_dbus_connection_new_for_address_finish(res, &e)
                          : g_bus_get_finish(res, &e);
        if (!conn) {
                if (g_error_matches(e, G_IO_ERROR, G_IO_ERROR_CANCELLED))
                        return;
                if (!c->told_unreachable)
                        g_warning("engine: cannot connect to %s: %s; retrying in the background",
                                  c->address ? c->address : "the system bus", e->message);
                c->told_unreachable = true;
                schedule_reconnect(c);
                return;
        }
        c->conn = conn;
        c->backoff_s = 0;
        c->told_unreachable = false;
        g_dbus_connection_set_exit_on_close(conn, FALSE);
        c->closed_handler = g_signal_connect(conn, "closed", G_CALLBACK(on_closed), c);
        c->signal_sub = g_dbus_connection_signal_subscribe(conn, NULL, ENGINE_REQUEST_INTERFACE,
                                                           NULL, NULL, NULL,
                                                           G_DBUS_SIGNAL_FLAGS_NONE, on_signal, c,
                                                           NULL);
        c->watch_id = g_bus_watch_name_on_connection(conn, ENGINE_BUS_NAME,
                                                     G_BUS_NAME_WATCHER_FLAGS_NONE,
                                                     on_name_appeared, on_name_vanished, c, NULL);
}

static void connect_bus(EngineClient *c) {
        const GDBusConnectionFlags flags = G_DBUS_CONNECTION_FLAGS_AUTHENTICATION_CLIENT |
                                           G_DBUS_CONNECTION_FLAGS_MESSAGE_BUS_CONNECTION;
        if (c->address)
                g_dbus_connection_new_for_address(c->address, flags, NULL, c->cancel, on_connected,
                                                  c);
        else
                g_bus_get(G_BUS_TYPE_SYSTEM, c->cancel, on_connected, c);
}

EngineClient *engine_client_new(const char *address, const EngineCallbacks *cb, void *userdata) {
        EngineClient *c = g_new0(EngineClient, 1);
        c->address = g_strdup(address);
        c->cb = *cb;
        c->userdata = userdata;
        c->cancel = g_cancellable_new();
        c->requests = engine_requests_new(&request_ops);
        connect_bus(c);
        return c;
}

void engine_client_free(EngineClient *c) {
        if (!c)
                return;
        g_cancellable_cancel(c->cancel);
        if (c->reconnect_source)
                g_source_remove(c->reconnect_source);
        drop_connection(c);
        g_object_unref(c->cancel);
        engine_requests_free(c->requests);
        g_free(c->address);
        g_free(c);
}

EngineState engine_client_state(EngineClient *c) {
        if (!c->conn || !c->name_known)
                return ENGINE_CONNECTING;
        return c->owner ? ENGINE_PRESENT : ENGINE_ABSENT;
}

/* Errors that a later attempt cannot fix. */
static bool permanent(const char *remote) {
        static const char *const names[] = {
                "org.agentxpu.Error.InvalidArgument",
                "org.agentxpu.Error.ContextOverflow",
                "org.agentxpu.Error.AccessDenied",
                "org.freedesktop.DBus.Error.AccessDenied",
                "org.freedesktop.DBus.Error.InvalidArgs",
        };
        for (size_t i = 0; remote && i < G_N_ELEMENTS(names); i++)
                if (strcmp(remote, names[i]) == 0)
                        return true;
        return false;
}

static void on_submitted(GObject *src, GAsyncResult *res, gpointer data) {
        g_autofree SubmitCall *call = data;
        g_autoptr(GError) e = NULL;
        g_autoptr(GDBusMessage) reply = NULL;
        EngineClient *c;
        const char *path = NULL;

        reply = g_dbus_connection_send_message_with_reply_finish(G_DBUS_CONNECTION(src), res, &e);
        if (g_error_matches(e, G_IO_ERROR, G_IO_ERROR_CANCELLED))
                return;         /* The client is gone. */
        c = call->c;
        if (reply && g_dbus_message_to_gerror(reply, &e))
                g_clear_object(&reply);
        if (!reply) {
                g_autofree char *remote = g_dbus_error_get_remote_error(e);
                g_dbus_error_strip_remote_error(e);
                c->cb.submitted(c->userdata, call->id, NULL, e->message, !permanent(remote));
                return;
        }
        GVariant *body = g_dbus_message_get_body(reply);
        if (!body || !g_variant_is_of_type(body, G_VARIANT_TYPE("(o)"))) {
                c->cb.submitted(c->userdata, call->id, NULL, "the engine's reply to Proactive is "
                                "not (o)", false);
                return;
        }
        g_variant_get(body, "(&o)", &path);

        Pending *p = g_new0(Pending, 1);
        p->c = c;
        p->id = call->id;
        engine_requests_add(c->requests, path, g_dbus_message_get_sender(reply), p);
        c->cb.submitted(c->userdata, call->id, path, NULL, false);
        /* signals that overtook the reply (they should not: one sender's messages keep their
         * order, but the reply and the signals reach us through different queues) */
        engine_requests_replay(c->requests, path);
}

typedef struct FailLater {
        EngineClient *c;
        GCancellable *cancel;   /* cancelled once the client is freed */
        guint64 id;
} FailLater;

static void fail_later_free(FailLater *f) {
        g_object_unref(f->cancel);
        g_free(f);
}

static gboolean fail_later_cb(gpointer data) {
        FailLater *f = data;
        if (g_cancellable_is_cancelled(f->cancel))
                return G_SOURCE_REMOVE;
        f->c->cb.submitted(f->c->userdata, f->id, NULL, "not connected to the engine's bus", true);
        return G_SOURCE_REMOVE;
}

void engine_client_submit(EngineClient *c, guint64 id, const char *prompt, GVariant *options) {
        g_autoptr(GDBusMessage) msg = NULL;
        SubmitCall *call;

        if (!c->conn) {
                FailLater *f = g_new0(FailLater, 1);
                f->c = c;
                f->cancel = g_object_ref(c->cancel);
                f->id = id;
                g_idle_add_full(G_PRIORITY_DEFAULT, fail_later_cb, f, (GDestroyNotify) fail_later_free);
                g_variant_unref(g_variant_ref_sink(options));
                return;
        }
        msg = g_dbus_message_new_method_call(ENGINE_BUS_NAME, ENGINE_OBJECT_PATH, ENGINE_INTERFACE,
                                             "Proactive");
        g_dbus_message_set_body(msg, g_variant_new("(s@a{sv})", prompt, options));
        call = g_new0(SubmitCall, 1);
        call->c = c;
        call->id = id;
        g_dbus_connection_send_message_with_reply(c->conn, msg, G_DBUS_SEND_MESSAGE_FLAGS_NONE,
                                                  SUBMIT_TIMEOUT_MS, NULL, c->cancel, on_submitted,
                                                  call);
}

void engine_client_cancel(EngineClient *c, const char *request) {
        const char *owner;
        Pending *p = engine_requests_lookup(c->requests, request, &owner);
        if (!p)
                return;
        if (c->conn)
                g_dbus_connection_call(c->conn, owner, request, ENGINE_REQUEST_INTERFACE,
                                       "Cancel", NULL, NULL, G_DBUS_CALL_FLAGS_NONE, -1, NULL, NULL,
                                       NULL);
        g_free(engine_requests_remove(c->requests, request));
}
