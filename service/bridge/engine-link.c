/* SPDX-License-Identifier: MIT */
#include "engine-link.h"

#include <string.h>

/* How long the engine may take to accept a request (it answers once its model is loaded). */
#define SUBMIT_TIMEOUT_MS 120000

struct EngineJob {
        EngineLink *l;
        EngineJobCallbacks cb;
        void *userdata;
        char *path, *owner;     /* set by the reply */
        bool detached;          /* cancelled by the caller: no more callbacks */
};

struct EngineLink {
        char *address;
        GDBusConnection *conn;
        guint signal_sub, watch_id;
        gulong closed_handler;
        char *owner;            /* the engine's unique name, while it is on the bus */
        EngineRequests *jobs;   /* request path → EngineJob*, answered and not finished */
        guint generation;
        guint max_tokens;       /* the engine's MaxTokens; 0: not known */
        bool max_tokens_asked;
};

static void job_free(EngineJob *j) {
        g_free(j->path);
        g_free(j->owner);
        g_free(j);
}

static void send_cancel(EngineLink *l, const char *owner, const char *path) {
        if (l->conn)
                g_dbus_connection_call(l->conn, owner, path, ENGINE_REQUEST_INTERFACE, "Cancel",
                                       NULL, NULL, G_DBUS_CALL_FLAGS_NONE, -1, NULL, NULL, NULL);
}

static void stats_parse(GVariant *stats, EngineStats *ret) {
        *ret = (EngineStats) {};
        if (!stats)
                return;
        g_variant_lookup(stats, "prompt_tokens", "u", &ret->prompt_tokens);
        g_variant_lookup(stats, "prefill_tokens", "u", &ret->prefill_tokens);
        g_variant_lookup(stats, "generated_tokens", "u", &ret->generated_tokens);
        g_variant_lookup(stats, "prompt_cut", "b", &ret->prompt_cut);
        g_variant_lookup(stats, "ttft_s", "d", &ret->ttft_s);
        g_variant_lookup(stats, "latency_s", "d", &ret->latency_s);
        g_variant_lookup(stats, "finish_reason", "&s", &ret->finish_reason);
        g_variant_lookup(stats, "tool_call", "&s", &ret->tool_call);
        g_variant_lookup(stats, "stop_word", "&s", &ret->stop_word);
}

/* The job is over: tell its caller (unless detached) and free it. */
static void job_finish(EngineJob *j, const char *reason, const char *error, GVariant *stats) {
        EngineStats st;
        stats_parse(stats, &st);
        if (!j->detached)
                j->cb.finished(j->userdata, reason, error, &st);
        job_free(j);
}

static void on_token(void *req, const char *text) {
        EngineJob *j = req;
        if (!j->detached)
                j->cb.token(j->userdata, text);
}

static void on_logprobs(void *req, GVariant *tokens) {
        EngineJob *j = req;
        if (!j->detached && j->cb.logprobs)
                j->cb.logprobs(j->userdata, tokens);
}

static void on_finished(void *req, const char *reason, const char *error, GVariant *stats) {
        job_finish(req, reason, error, stats);
}

static const EngineRequestsOps job_ops = { .token = on_token, .logprobs = on_logprobs, .finished = on_finished,
                                           .drop = (void (*)(void *)) job_free };

static void on_signal(GDBusConnection *conn, const char *sender, const char *path,
                      const char *iface, const char *member, GVariant *params, gpointer data) {
        EngineLink *l = data;
        engine_requests_signal(l->jobs, sender, path, member, params);
}

/* Every job answered by `owner` (all when NULL) is lost: its Finished will never come. */
static void lose_jobs(EngineLink *l, const char *owner, const char *why) {
        engine_requests_lose(l->jobs, owner, "error", why);
}

static void on_name_appeared(GDBusConnection *conn, const char *name, const char *owner,
                             gpointer data) {
        EngineLink *l = data;
        g_free(l->owner);
        l->owner = g_strdup(owner);
}

static void on_name_vanished(GDBusConnection *conn, const char *name, gpointer data) {
        EngineLink *l = data;
        g_autofree char *old = g_steal_pointer(&l->owner);
        l->generation++;
        l->max_tokens = 0;
        l->max_tokens_asked = false;
        if (old) {
                g_message("The engine (%s) left the bus; its requests in flight fail", old);
                lose_jobs(l, old, "The engine left the bus (it stopped or is restarting)");
        }
}

static void drop_connection(EngineLink *l) {
        if (!l->conn)
                return;
        if (l->watch_id)
                g_bus_unwatch_name(l->watch_id);
        if (l->signal_sub)
                g_dbus_connection_signal_unsubscribe(l->conn, l->signal_sub);
        if (l->closed_handler)
                g_signal_handler_disconnect(l->conn, l->closed_handler);
        l->watch_id = l->signal_sub = 0;
        l->closed_handler = 0;
        g_clear_object(&l->conn);
        g_clear_pointer(&l->owner, g_free);
}

static void on_closed(GDBusConnection *conn, gboolean remote, GError *error, gpointer data) {
        EngineLink *l = data;
        g_message("Lost the bus connection (%s); the next request connects again",
                  error ? error->message : "closed");
        drop_connection(l);
        l->generation++;
        l->max_tokens = 0;
        l->max_tokens_asked = false;
        lose_jobs(l, NULL, "The bus connection was lost");
}

/* Connects if not connected. The bus is a local socket, so this blocks briefly at most. */
static bool ensure_connection(EngineLink *l, GError **error) {
        const GDBusConnectionFlags flags = G_DBUS_CONNECTION_FLAGS_AUTHENTICATION_CLIENT |
                                           G_DBUS_CONNECTION_FLAGS_MESSAGE_BUS_CONNECTION;
        if (l->conn && !g_dbus_connection_is_closed(l->conn))
                return true;
        drop_connection(l);
        l->conn = l->address ? g_dbus_connection_new_for_address_sync(l->address, flags, NULL, NULL,
                                                                      error)
                             : g_bus_get_sync(G_BUS_TYPE_SYSTEM, NULL, error);
        if (!l->conn)
                return false;
        g_dbus_connection_set_exit_on_close(l->conn, FALSE);
        l->closed_handler = g_signal_connect(l->conn, "closed", G_CALLBACK(on_closed), l);
        l->signal_sub = g_dbus_connection_signal_subscribe(l->conn, NULL, ENGINE_REQUEST_INTERFACE,
                                                           NULL, NULL, NULL,
                                                           G_DBUS_SIGNAL_FLAGS_NONE, on_signal, l,
                                                           NULL);
        l->watch_id = g_bus_watch_name_on_connection(l->conn, ENGINE_BUS_NAME,
                                                     G_BUS_NAME_WATCHER_FLAGS_NONE,
                                                     on_name_appeared, on_name_vanished, l, NULL);
        return true;
}

EngineLink *engine_link_new(const char *address) {
        EngineLink *l = g_new0(EngineLink, 1);
        l->address = g_strdup(address);
        l->jobs = engine_requests_new(&job_ops);
        return l;
}

void engine_link_free(EngineLink *l) {
        if (!l)
                return;
        lose_jobs(l, NULL, "The bridge is stopping");
        drop_connection(l);
        engine_requests_free(l->jobs);
        g_free(l->address);
        g_free(l);
}

/* NULL where the link is connected (or now connects); else why not, for a NoServer answer */
static char *connect_error(EngineLink *l) {
        g_autoptr(GError) e = NULL;

        if (ensure_connection(l, &e))
                return NULL;
        return g_strdup_printf("Cannot connect to %s: %s", l->address ? l->address : "the system bus", e->message);
}

/* A failure reported from the main loop, never from inside the caller's call. */
typedef struct Failure {
        EngineJob *j;
        char *error_name, *message;
} Failure;

static gboolean failure_cb(gpointer data) {
        Failure *f = data;
        if (!f->j->detached)
                f->j->cb.started(f->j->userdata, f->error_name, f->message);
        job_free(f->j);
        g_free(f->error_name);
        g_free(f->message);
        g_free(f);
        return G_SOURCE_REMOVE;
}

static void fail_later(EngineJob *j, const char *error_name, const char *message) {
        Failure *f = g_new0(Failure, 1);
        f->j = j;
        f->error_name = g_strdup(error_name);
        f->message = g_strdup(message);
        g_idle_add(failure_cb, f);
}

static void on_submitted(GObject *src, GAsyncResult *res, gpointer data) {
        EngineJob *j = data;
        EngineLink *l = j->l;
        g_autoptr(GError) e = NULL;
        g_autoptr(GDBusMessage) reply = NULL;
        const char *path = NULL;

        reply = g_dbus_connection_send_message_with_reply_finish(G_DBUS_CONNECTION(src), res, &e);
        if (reply && g_dbus_message_to_gerror(reply, &e))
                g_clear_object(&reply);
        if (!reply) {
                g_autofree char *remote = g_dbus_error_get_remote_error(e);
                g_dbus_error_strip_remote_error(e);
                if (!j->detached)
                        j->cb.started(j->userdata, remote, e->message);
                job_free(j);
                return;
        }
        GVariant *body = g_dbus_message_get_body(reply);
        if (!body || !g_variant_is_of_type(body, G_VARIANT_TYPE("(o)"))) {
                if (!j->detached)
                        j->cb.started(j->userdata, NULL, "The engine's reply is not (o)");
                job_free(j);
                return;
        }
        g_variant_get(body, "(&o)", &path);
        j->path = g_strdup(path);
        j->owner = g_strdup(g_dbus_message_get_sender(reply));
        if (j->detached) {
                /* its client left while the call was on its way */
                send_cancel(l, j->owner, j->path);
                job_free(j);
                return;
        }
        engine_requests_add(l->jobs, path, j->owner, j);
        j->cb.started(j->userdata, NULL, NULL);
        /* signals that came before the reply was handled (the reply and the signals reach us
         * through different queues) */
        engine_requests_replay(l->jobs, path);
}

EngineJob *engine_link_submit(EngineLink *l, bool proactive, const char *prompt, GVariant *options,
                              const EngineJobCallbacks *cb, void *userdata) {
        g_autoptr(GDBusMessage) msg = NULL;
        g_autofree char *why = NULL;
        EngineJob *j = g_new0(EngineJob, 1);

        j->l = l;
        j->cb = *cb;
        j->userdata = userdata;
        g_variant_ref_sink(options);
        if ((why = connect_error(l))) {
                fail_later(j, "org.freedesktop.DBus.Error.NoServer", why);
                g_variant_unref(options);
                return j;
        }
        msg = g_dbus_message_new_method_call(ENGINE_BUS_NAME, ENGINE_OBJECT_PATH, ENGINE_INTERFACE,
                                             proactive ? "Proactive" : "Reactive");
        g_dbus_message_set_body(msg, g_variant_new("(s@a{sv})", prompt, options));
        g_variant_unref(options);
        g_dbus_connection_send_message_with_reply(l->conn, msg, G_DBUS_SEND_MESSAGE_FLAGS_NONE,
                                                  SUBMIT_TIMEOUT_MS, NULL, NULL, on_submitted, j);
        return j;
}

void engine_job_cancel(EngineJob *j) {
        EngineLink *l;

        if (!j || j->detached)
                return;
        j->detached = true;
        if (!j->path)
                return;         /* on_submitted or failure_cb cancels and frees it */
        l = j->l;
        if (engine_requests_lookup(l->jobs, j->path, NULL) == j) {
                engine_requests_remove(l->jobs, j->path);
                send_cancel(l, j->owner, j->path);
                job_free(j);
        }
}

void engine_job_stop(EngineJob *j) {
        if (j && !j->detached && j->path)
                send_cancel(j->l, j->owner, j->path);
}

guint engine_link_max_tokens(EngineLink *l) {
        return l->max_tokens;
}

static void on_max_tokens(GObject *src, GAsyncResult *res, gpointer data) {
        EngineLink *l = data;
        g_autoptr(GVariant) r = g_dbus_connection_call_finish(G_DBUS_CONNECTION(src), res, NULL);
        g_autoptr(GVariant) v = NULL;

        if (!r)
                return;         /* an older engine: its default stays */
        g_variant_get(r, "(v)", &v);
        if (g_variant_is_of_type(v, G_VARIANT_TYPE_UINT32))
                l->max_tokens = g_variant_get_uint32(v);
}

guint engine_link_generation(EngineLink *l) {
        return l->generation;
}

/* A method call of the engine's object whose answer goes to `done`: the reply, or NULL with the
 * D-Bus error (a connection that cannot be made answers NoServer from the main loop, never from
 * inside the call). OpenFlow, Embed and ModelInfo's Get. */
typedef struct EngineCall EngineCall;
struct EngineCall {
        void (*done)(EngineCall *c, GVariant *reply, const char *error_name, const char *message);
        union {
                EngineEmbedCallback embed;
                EngineFlowCallback flow;
                EngineModelCallback model;
        } cb;
        void *userdata;
        char *message;
};

static void on_call_done(GObject *src, GAsyncResult *res, gpointer data) {
        g_autofree EngineCall *c = data;
        g_autoptr(GError) e = NULL;
        g_autoptr(GVariant) r = g_dbus_connection_call_finish(G_DBUS_CONNECTION(src), res, &e);

        if (!r) {
                g_autofree char *remote = g_dbus_error_get_remote_error(e);
                g_dbus_error_strip_remote_error(e);
                c->done(c, NULL, remote, e->message);
                return;
        }
        c->done(c, r, NULL, NULL);
}

static gboolean call_failure_cb(gpointer data) {
        EngineCall *c = data;
        c->done(c, NULL, "org.freedesktop.DBus.Error.NoServer", c->message);
        g_free(c->message);
        g_free(c);
        return G_SOURCE_REMOVE;
}

/* Whether the link is connected; where not, c is answered NoServer from the main loop (and
 * freed) */
static bool call_connect(EngineLink *l, EngineCall *c) {
        if (!(c->message = connect_error(l)))
                return true;
        g_idle_add(call_failure_cb, c);
        return false;
}

/* c's call, once connected: `params` floating (consumed) or not; timeout_ms as
 * g_dbus_connection_call's */
static void call_send(EngineLink *l, const char *interface, const char *method, GVariant *params,
                      const char *reply_type, int timeout_ms, EngineCall *c) {
        g_dbus_connection_call(l->conn, ENGINE_BUS_NAME, ENGINE_OBJECT_PATH, interface, method, params,
                               G_VARIANT_TYPE(reply_type), G_DBUS_CALL_FLAGS_NONE, timeout_ms, NULL, on_call_done, c);
}

/* A method of the engine's interface: `params` floating or not (sunk and released here) */
static void engine_call(EngineLink *l, const char *method, GVariant *params, const char *reply_type, int timeout_ms,
                        EngineCall *c) {
        g_autoptr(GVariant) p = g_variant_ref_sink(params);

        if (call_connect(l, c))
                call_send(l, ENGINE_INTERFACE, method, p, reply_type, timeout_ms, c);
}

static void embed_done(EngineCall *c, GVariant *reply, const char *error_name, const char *message) {
        EngineEmbedCallback cb = c->cb.embed;
        g_autoptr(GVariant) v = NULL, stats = NULL;
        EngineStats st;

        if (!reply) {
                cb(c->userdata, NULL, NULL, error_name, message);
                return;
        }
        g_variant_get(reply, "(@ad@a{sv})", &v, &stats);
        stats_parse(stats, &st);
        cb(c->userdata, v, &st, NULL, NULL);
}

void engine_link_embed(EngineLink *l, const char *text, GVariant *options, EngineEmbedCallback cb,
                       void *userdata) {
        g_autoptr(GVariant) opts = g_variant_ref_sink(options);
        EngineCall *c = g_new0(EngineCall, 1);

        *c = (EngineCall) { .done = embed_done, .cb.embed = cb, .userdata = userdata };
        engine_call(l, "Embed", g_variant_new("(s@a{sv})", text, opts), "(ada{sv})", G_MAXINT, c);
}

static void flow_done(EngineCall *c, GVariant *reply, const char *error_name, const char *message) {
        const char *path = NULL;

        if (reply)
                g_variant_get(reply, "(&o)", &path);
        c->cb.flow(c->userdata, path, error_name, message);
}

void engine_link_open_flow(EngineLink *l, EngineFlowCallback cb, void *userdata) {
        EngineCall *c = g_new0(EngineCall, 1);

        *c = (EngineCall) { .done = flow_done, .cb.flow = cb, .userdata = userdata };
        engine_call(l, "OpenFlow", g_variant_new("(@a{sv})", g_variant_new("a{sv}", NULL)), "(o)", SUBMIT_TIMEOUT_MS,
                    c);
}

static void model_done(EngineCall *c, GVariant *reply, const char *error_name, const char *message) {
        g_autoptr(GVariant) v = NULL;
        const char *name = "";

        if (!reply) {
                c->cb.model(c->userdata, NULL, NULL, error_name, message);
                return;
        }
        g_variant_get(reply, "(v)", &v);
        if (!g_variant_is_of_type(v, G_VARIANT_TYPE_VARDICT)) {
                c->cb.model(c->userdata, NULL, NULL, NULL, "The engine's ModelInfo property is not a{sv}");
                return;
        }
        (void) g_variant_lookup(v, "name", "&s", &name);
        c->cb.model(c->userdata, name, v, NULL, NULL);
}

void engine_link_get_model(EngineLink *l, EngineModelCallback cb, void *userdata) {
        EngineCall *c = g_new0(EngineCall, 1);

        *c = (EngineCall) { .done = model_done, .cb.model = cb, .userdata = userdata };
        if (!call_connect(l, c))
                return;
        if (!l->max_tokens_asked) {
                /* asked first: its answer comes before the model's, which the request waits for */
                l->max_tokens_asked = true;
                g_dbus_connection_call(l->conn, ENGINE_BUS_NAME, ENGINE_OBJECT_PATH,
                                       "org.freedesktop.DBus.Properties", "Get",
                                       g_variant_new("(ss)", ENGINE_INTERFACE, "MaxTokens"),
                                       G_VARIANT_TYPE("(v)"), G_DBUS_CALL_FLAGS_NONE, SUBMIT_TIMEOUT_MS,
                                       NULL, on_max_tokens, l);
        }
        call_send(l, "org.freedesktop.DBus.Properties", "Get", g_variant_new("(ss)", ENGINE_INTERFACE, "ModelInfo"),
                  "(v)", SUBMIT_TIMEOUT_MS, c);
}

void engine_link_close_flow(EngineLink *l, const char *path) {
        if (l->conn && !g_dbus_connection_is_closed(l->conn))
                g_dbus_connection_call(l->conn, ENGINE_BUS_NAME, ENGINE_OBJECT_PATH,
                                       ENGINE_INTERFACE, "CloseFlow", g_variant_new("(o)", path),
                                       NULL, G_DBUS_CALL_FLAGS_NONE, -1, NULL, NULL, NULL);
}
