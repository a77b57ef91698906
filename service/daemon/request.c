/* SPDX-License-Identifier: MIT */
#include "request.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"
#include "common/bus-common.h"
#include "client.h"
#include "flow.h"
#include "log.h"
#include "options.h"

int request_new(Context *c, Client *cl, axp_kind kind, Request **ret) {
        Request *r;
        int k;

        r = calloc(1, sizeof(Request));
        if (!r)
                return -ENOMEM;
        *r = (Request) {
                .context = c,
                .client = cl,
                .n = c->last_request_n + 1,
                .uid = cl->uid,
                .kind = kind,
                .state = AXP_STATE_QUEUED,
                .utf8.no_nul = true,
        };
        r->owner = strdup(cl->name);
        if (!r->owner || asprintf(&r->path, AXP_BUS_REQUEST_PREFIX "/%" PRIu64, r->n) < 0) {
                free(r->owner);
                free(r);
                return -ENOMEM;
        }
        k = idmap_put(&c->requests, r->n, r);
        if (k < 0) {
                free(r->path);
                free(r->owner);
                free(r);
                return k;
        }
        c->last_request_n = r->n;
        LIST_PREPEND(requests, cl->requests, r);
        *ret = r;
        return 0;
}

int request_started(Request *r, uint64_t engine_id) {
        r->engine_id = engine_id;
        return idmap_put(&r->context->requests_by_id, engine_id, r);
}

void request_free(Request *r) {
        Context *c;
        Client *cl;

        if (!r)
                return;
        c = r->context;
        cl = r->client;

        idmap_remove(&c->requests, r->n);
        if (!r->finished && idmap_get(&c->requests_by_id, r->engine_id) == r)
                idmap_remove(&c->requests_by_id, r->engine_id);
        if (cl)
                LIST_REMOVE(requests, cl->requests, r);
        if (r->flow && r->flow->busy == r)
                r->flow->busy = NULL;

        sd_event_source_disable_unref(r->expire);
        sd_bus_message_unref(r->complete_call);
        free(r->text);
        free(r->logprobs);
        free(r->tool_call);
        free(r->stop_word);
        free(r->embedding);
        free(r->path);
        free(r->owner);
        free(r);

        client_maybe_free(cl);
}

int request_cancel(Request *r) {
        int k;

        if (r->finished || !r->context->engine)
                return -ESRCH;
        k = axp_engine_cancel(r->context->engine, r->engine_id);
        /* -ENOENT: the engine is done with it and its Finished is on the way to us. */
        return k == -ENOENT ? 0 : k;
}

void request_orphan(Request *r) {
        Client *cl = r->client;

        if (cl) {
                LIST_REMOVE(requests, cl->requests, r);
                r->client = NULL;
        }
        if (r->finished) {
                request_free(r);
                return;
        }
        /* The caller of Complete is gone too: nobody to answer. */
        r->complete_call = sd_bus_message_unref(r->complete_call);
        (void) request_cancel(r);
}

/* A piece of a token: its text (its bytes made valid UTF-8, any NUL as U+FFFD), its bytes and its
 * log-probability */
static int append_piece(sd_bus_message *m, const BridgeLogprob *p) {
        axp_utf8_stream u = { .no_nul = true };
        _cleanup_free_ char *t = NULL;
        size_t tl = 0, tc = 0;
        int k;

        k = axp_utf8_stream_push(&u, p->bytes, p->len, &t, &tl, &tc);
        if (k >= 0)
                k = axp_utf8_stream_flush(&u, &t, &tl, &tc);
        if (k < 0)
                return k;
        k = sd_bus_message_append(m, "s", t ? t : "");
        if (k >= 0)
                k = sd_bus_message_append_array(m, 'y', p->bytes, p->len);
        if (k >= 0)
                k = sd_bus_message_append(m, "d", (double) p->logprob);
        return k;
}

/* The records as a(sayda(sayd)): each token's text, bytes, log-probability and alternatives */
static int append_logprobs(sd_bus_message *m, const char *records, size_t len) {
        const char *p = records, *end = records + len;
        BridgeLogprob tok, alt;
        int k;

        k = sd_bus_message_open_container(m, 'a', "(sayda(sayd))");
        while (k >= 0 && bridge_logprob_next(&p, end, true, &tok)) {
                k = sd_bus_message_open_container(m, 'r', "sayda(sayd)");
                if (k >= 0)
                        k = append_piece(m, &tok);
                if (k >= 0)
                        k = sd_bus_message_open_container(m, 'a', "(sayd)");
                for (uint32_t i = 0; k >= 0 && i < tok.n_alt && bridge_logprob_next(&p, end, false, &alt); i++) {
                        k = sd_bus_message_open_container(m, 'r', "sayd");
                        if (k >= 0)
                                k = append_piece(m, &alt);
                        if (k >= 0)
                                k = sd_bus_message_close_container(m);
                }
                if (k >= 0)
                        k = sd_bus_message_close_container(m);
                if (k >= 0)
                        k = sd_bus_message_close_container(m);
        }
        if (k >= 0)
                k = sd_bus_message_close_container(m);
        return k;
}

int stats_append(sd_bus_message *m, const axp_req_stats *st, bool with_error, const char *reason,
                 const char *logprobs, size_t logprobs_len) {
        int r;

        r = sd_bus_message_open_container(m, 'a', "{sv}");
        if (r < 0)
                return r;
        if (reason) {
                r = sd_bus_message_append(m, "{sv}", "reason", "s", reason);
                if (r < 0)
                        return r;
        }
        r = sd_bus_message_append(m, "{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}",
                                  "prompt_tokens", "u", st->prompt_tokens,
                                  "prefill_tokens", "u", st->prefill_tokens,
                                  "generated_tokens", "u", st->generated_tokens,
                                  "queue_wait_s", "d", st->queue_wait_s,
                                  "ttft_s", "d", st->ttft_s,
                                  "tpot_s", "d", st->tpot_s,
                                  "latency_s", "d", st->latency_s,
                                  "preemptions", "u", st->preemptions);
        if (r < 0)
                return r;
        if (st->finish_reason) {
                r = sd_bus_message_append(m, "{sv}", "finish_reason", "s", st->finish_reason);
                if (r < 0)
                        return r;
        }
        if (st->tool_call) {
                r = sd_bus_message_append(m, "{sv}", "tool_call", "s", st->tool_call);
                if (r < 0)
                        return r;
        }
        if (st->prompt_cut) {
                r = sd_bus_message_append(m, "{sv}", "prompt_cut", "b", 1);
                if (r < 0)
                        return r;
        }
        if (st->stop_word) {
                r = sd_bus_message_append(m, "{sv}", "stop_word", "s", st->stop_word);
                if (r < 0)
                        return r;
        }
        if (logprobs) {
                r = sd_bus_message_open_container(m, 'e', "sv");
                if (r >= 0)
                        r = sd_bus_message_append(m, "s", "logprobs");
                if (r >= 0)
                        r = sd_bus_message_open_container(m, 'v', "a(sayda(sayd))");
                if (r >= 0)
                        r = append_logprobs(m, logprobs, logprobs_len);
                if (r >= 0)
                        r = sd_bus_message_close_container(m);
                if (r >= 0)
                        r = sd_bus_message_close_container(m);
                if (r < 0)
                        return r;
        }
        if (with_error) {
                /* The engine's message is ours to pass on only if it is valid text. */
                const char *e = axp_utf8_valid(st->error, strlen(st->error), NULL) ? st->error
                                                                                   : "internal error";
                r = sd_bus_message_append(m, "{sv}", "error", "s", e);
                if (r < 0)
                        return r;
        }
        return sd_bus_message_close_container(m);
}

/* A signal of the request object to its owner alone. */
static int request_new_signal(Request *r, const char *iface, const char *member,
                              sd_bus_message **ret) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        int k;

        k = sd_bus_message_new_signal(r->context->bus, &m, r->path, iface, member);
        if (k < 0)
                return k;
        k = sd_bus_message_set_destination(m, r->owner);
        if (k < 0)
                return k;
        *ret = TAKE_PTR(m);
        return 0;
}

static void request_send_state_changed(Request *r) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        int k;

        /* PropertiesChanged, unicast like Token: whether another user's request is running is
         * not for bystanders to learn. */
        k = request_new_signal(r, "org.freedesktop.DBus.Properties", "PropertiesChanged", &m);
        if (k >= 0)
                k = sd_bus_message_append(m, "sa{sv}", AXP_BUS_REQUEST_IFACE, 1, "State", "s",
                                          axp_req_state_name(r->state));
        if (k >= 0)
                k = sd_bus_message_append(m, "as", 1, "Stats");
        if (k >= 0)
                k = sd_bus_send(r->context->bus, m, NULL);
        if (k < 0)
                log_warning_errno(k, "Failed to send PropertiesChanged of %s", r->path);
}

static void request_set_state(Request *r, axp_req_state state) {
        if (r->state == state)
                return;
        r->state = state;
        if (r->client && !r->complete)
                request_send_state_changed(r);
}

/* The engine's text as whole UTF-8 characters (axp_utf8_stream): a character split between
 * tokens waits for its last bytes, and bytes that never make one, or a NUL, which a D-Bus
 * string cannot carry, go as U+FFFD; none is dropped. At the end (text NULL) what still
 * waits goes too. Complete keeps the text for its reply; a stream sends it as a Token. */
static void request_take_text(Request *r, const char *text, size_t len) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        int k;

        k = text ? axp_utf8_stream_push(&r->utf8, text, len, &r->text, &r->text_len, &r->text_cap)
                 : axp_utf8_stream_flush(&r->utf8, &r->text, &r->text_len, &r->text_cap);
        if (k < 0) {
                log_oom();
                return;
        }
        if (r->complete || r->text_len == 0)
                return;

        k = request_new_signal(r, AXP_BUS_REQUEST_IFACE, "Token", &m);
        if (k >= 0)
                k = sd_bus_message_append(m, "s", r->text);
        if (k >= 0)
                k = sd_bus_send(r->context->bus, m, NULL);
        if (k < 0)
                log_warning_errno(k, "Failed to send a Token of %s", r->path);
        r->text_len = 0;
}

void request_on_token(Request *r, const char *text, size_t len) {
        if (r->finished || !r->client || len == 0)
                return;
        if (r->complete)
                r->state = AXP_STATE_DECODE;
        else
                request_set_state(r, AXP_STATE_DECODE);
        request_take_text(r, text, len);
}

void request_on_logprobs(Request *r, const char *records, size_t len) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        int k;

        if (r->finished || !r->client || len == 0)
                return;
        if (r->complete) {
                /* for the reply; out of memory: those records are lost, as a signal would be */
                if (axp_grow((void **) &r->logprobs, &r->logprobs_cap, r->logprobs_len + len, 1) < 0) {
                        log_oom();
                        return;
                }
                memcpy(r->logprobs + r->logprobs_len, records, len);
                r->logprobs_len += len;
                return;
        }
        k = request_new_signal(r, AXP_BUS_REQUEST_IFACE, "Logprobs", &m);
        if (k >= 0)
                k = append_logprobs(m, records, len);
        if (k >= 0)
                k = sd_bus_send(r->context->bus, m, NULL);
        if (k < 0)
                log_warning_errno(k, "Failed to send Logprobs of %s", r->path);
}

void request_on_embedding(Request *r, const void *v, size_t n) {
        if (r->finished || !r->client || !r->embed || r->embedding)
                return;
        r->embedding = malloc(sizeof(float) * MAX(n, 1));
        if (!r->embedding) { /* the reply says the request failed */
                log_oom();
                return;
        }
        memcpy(r->embedding, v, sizeof(float) * n);
        r->n_embedding = n;
}

/* Embed's reply: the embedding as doubles, then the stats */
static int append_embedding(sd_bus_message *reply, const Request *r) {
        _cleanup_free_ double *d = malloc(sizeof(double) * MAX(r->n_embedding, 1));
        int k;

        if (!d)
                return -ENOMEM;
        for (size_t i = 0; i < r->n_embedding; i++)
                d[i] = r->embedding[i];
        k = sd_bus_message_append_array(reply, 'd', d, sizeof(double) * r->n_embedding);
        if (k < 0)
                return k;
        return stats_append(reply, &r->stats, false, axp_finish_reason_name(r->reason), NULL, 0);
}

static void request_reply_complete(Request *r) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        sd_bus_message *call = r->complete_call;
        int k;

        switch (r->reason) {
        case AXP_FINISH_CANCELLED:
                k = sd_bus_reply_method_errorf(call, AXP_ERROR_CANCELLED, "The request was cancelled%s",
                                               r->context->stopping ? ": the engine is shutting down" : "");
                break;
        case AXP_FINISH_ERROR:
                k = sd_bus_reply_method_errorf(call, SD_BUS_ERROR_FAILED, "Generation failed: %s",
                                               axp_utf8_valid(r->stats.error, strlen(r->stats.error), NULL)
                                                       ? r->stats.error : "internal error");
                break;
        default:
                if (r->embed && !r->embedding) {
                        k = sd_bus_reply_method_errorf(call, SD_BUS_ERROR_NO_MEMORY, "Out of memory for the embedding");
                        break;
                }
                k = sd_bus_message_new_method_return(call, &reply);
                if (k >= 0 && r->embed) {
                        k = append_embedding(reply, r);
                        if (k >= 0)
                                k = sd_bus_send(NULL, reply, NULL);
                        if (k < 0)
                                k = sd_bus_reply_method_errnof(call, k, "Failed to build the reply");
                        break;
                }
                if (k >= 0)
                        k = sd_bus_message_append(reply, "s", r->text ?: "");
                if (k >= 0)
                        k = stats_append(reply, &r->stats, false, axp_finish_reason_name(r->reason),
                                         r->logprobs_wanted ? (r->logprobs ? r->logprobs : "") : NULL,
                                         r->logprobs_len);
                if (k >= 0)
                        k = sd_bus_send(NULL, reply, NULL);
                if (k < 0)
                        k = sd_bus_reply_method_errnof(call, k, "Failed to build the reply");
        }
        if (k < 0)
                log_warning_errno(k, "Failed to reply to %s of %s", r->embed ? "Embed" : "Complete", r->owner);
}

static int on_expire(sd_event_source *s, uint64_t usec, void *userdata) {
        request_free(userdata);
        return 0;
}

void request_on_finished(Request *r, axp_finish_reason reason, const axp_req_stats *stats) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        Context *c = r->context;
        Flow *f = r->flow;
        int k;

        if (r->finished)
                return;
        log_debug("%s finished: %s, %u tokens%s", r->path, axp_finish_reason_name(reason),
                  stats->generated_tokens, r->client ? "" : " (its client left)");
        idmap_remove(&c->requests_by_id, r->engine_id);
        r->finished = true;
        r->reason = reason;
        r->stats = *stats;
        free(r->tool_call);
        r->tool_call = stats->tool_call ? strdup(stats->tool_call) : NULL;
        r->stats.tool_call = r->tool_call;
        if (stats->tool_call && !r->tool_call)
                r->stats.finish_reason = "stop"; /* out of memory: the text is still there */
        free(r->stop_word);
        r->stop_word = stats->stop_word ? strdup(stats->stop_word) : NULL;
        r->stats.stop_word = r->stop_word; /* out of memory: not said */
        if (f && f->busy == r) {
                f->busy = NULL;
                flow_idle(f);
        }
        r->flow = NULL;
        if (r->client)
                request_take_text(r, NULL, 0);

        if (r->complete) {
                if (r->complete_call)
                        request_reply_complete(r);
                request_free(r);
                return;
        }
        if (!r->client) {
                request_free(r);
                return;
        }

        /* State first: Finished is the last thing its owner hears of it. */
        request_set_state(r, AXP_STATE_FINISHED);
        k = request_new_signal(r, AXP_BUS_REQUEST_IFACE, "Finished", &m);
        if (k >= 0)
                k = sd_bus_message_append(m, "s", axp_finish_reason_name(reason));
        if (k >= 0)
                k = stats_append(m, &r->stats, reason == AXP_FINISH_ERROR, NULL, NULL, 0);
        if (k >= 0)
                k = sd_bus_send(c->bus, m, NULL);
        if (k < 0)
                log_warning_errno(k, "Failed to send Finished of %s", r->path);

        if (c->config.finished_keep_s <= 0 || c->stopping) {
                request_free(r);
                return;
        }
        k = sd_event_add_time_relative(c->event, &r->expire, CLOCK_MONOTONIC,
                                       (uint64_t) (c->config.finished_keep_s * 1e6), 0, on_expire, r);
        if (k < 0) {
                log_warning_errno(k, "Failed to keep %s for its grace period, dropping it now", r->path);
                request_free(r);
        }
}

/* Properties and Cancel answer the owner alone (any connection of the same uid). */
static int request_check_access(Request *r, sd_bus_message *m, sd_bus_error *error) {
        uid_t uid;
        int k;

        if (!m)
                return sd_bus_error_setf(error, AXP_ERROR_ACCESS_DENIED, "No caller");
        k = context_sender_uid(r->context, m, &uid);
        if (k < 0)
                return sd_bus_error_set_errnof(error, k, "Cannot identify the caller");
        if (uid != r->uid)
                return sd_bus_error_setf(error, AXP_ERROR_ACCESS_DENIED,
                                         "Request %" PRIu64 " belongs to another user", r->n);
        return 0;
}

static void request_refresh(Request *r) {
        axp_req_state state;
        axp_req_stats stats;

        if (r->finished || !r->context->engine)
                return;
        if (axp_engine_request_info(r->context->engine, r->engine_id, &state, &stats) < 0)
                return;
        /* FINISHED here means its event is still on the way: report it once it is here. */
        if (state != AXP_STATE_FINISHED)
                r->state = state;
        r->stats = stats;
}

static int property_get_kind(sd_bus *bus, const char *path, const char *iface, const char *property,
                             sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        Request *r = userdata;
        int k = request_check_access(r, sd_bus_get_current_message(bus), error);

        if (k < 0)
                return k;
        return sd_bus_message_append(reply, "s", axp_kind_name(r->kind));
}

static int property_get_state(sd_bus *bus, const char *path, const char *iface, const char *property,
                              sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        Request *r = userdata;
        int k = request_check_access(r, sd_bus_get_current_message(bus), error);

        if (k < 0)
                return k;
        request_refresh(r);
        return sd_bus_message_append(reply, "s", axp_req_state_name(r->state));
}

static int property_get_stats(sd_bus *bus, const char *path, const char *iface, const char *property,
                              sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        Request *r = userdata;
        int k = request_check_access(r, sd_bus_get_current_message(bus), error);

        if (k < 0)
                return k;
        request_refresh(r);
        return stats_append(reply, &r->stats, r->finished && r->reason == AXP_FINISH_ERROR, NULL, NULL, 0);
}

static int method_cancel(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Request *r = userdata;
        int k;

        k = request_check_access(r, m, error);
        if (k < 0)
                return k;
        if (r->finished)
                return sd_bus_error_setf(error, AXP_ERROR_NOT_FOUND,
                                         "Request %" PRIu64 " has already finished", r->n);
        k = request_cancel(r);
        if (k < 0)
                return sd_bus_error_set_errnof(error, k, "Failed to cancel request %" PRIu64, r->n);
        log_debug("%s cancelled by %s", r->path, sd_bus_message_get_sender(m));
        return sd_bus_reply_method_return(m, NULL);
}

const sd_bus_vtable request_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_PROPERTY("Kind", "s", property_get_kind, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_PROPERTY("State", "s", property_get_state, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("Stats", "a{sv}", property_get_stats, 0, SD_BUS_VTABLE_PROPERTY_EMITS_INVALIDATION),

        SD_BUS_METHOD("Cancel", NULL, NULL, method_cancel, SD_BUS_VTABLE_UNPRIVILEGED),

        SD_BUS_SIGNAL_WITH_ARGS("Token", SD_BUS_ARGS("s", text), 0),
        SD_BUS_SIGNAL_WITH_ARGS("Logprobs", SD_BUS_ARGS("a(sayda(sayd))", tokens), 0),
        SD_BUS_SIGNAL_WITH_ARGS("Finished", SD_BUS_ARGS("s", reason, "a{sv}", stats), 0),
        SD_BUS_VTABLE_END
};

/* A path under the folder of requests that is no request's, or a request an introspection
 * may not see, answers as one that never was. */
static int request_not_found(sd_bus_error *error, const char *name) {
        return sd_bus_error_setf(error, AXP_ERROR_NOT_FOUND,
                                 "Request %.32s%s does not exist (finished and collected, or never created)",
                                 name, strlen(name) > 32 ? "..." : "");
}

/* Introspecting a request lists its interface: to another user that would say the request
 * exists, which its properties and Cancel answer only with AccessDenied. */
static bool request_hidden(Context *c, Request *r, const char *path) {
        sd_bus_message *m = sd_bus_get_current_message(c->bus);
        uid_t uid;

        if (!m || !sd_bus_message_is_method_call(m, "org.freedesktop.DBus.Introspectable", "Introspect") ||
            strcmp(sd_bus_message_get_path(m) ?: "", path) != 0)
                return false;
        return context_sender_uid(c, m, &uid) < 0 || uid != r->uid;
}

static int request_object_find(sd_bus *bus, const char *path, const char *iface, void *userdata,
                               void **ret, sd_bus_error *error) {
        Context *c = userdata;
        const char *name = path_child(path, AXP_BUS_REQUEST_PREFIX);
        uint64_t n;
        Request *r;

        /* The folder of requests, or a path below a request's: no request, sd-bus answers. */
        if (!name)
                return 0;
        /* A request's path is PREFIX/N, N from 1 without leading zeros: .../request/0 and
         * .../request/007 name none. Complete requests have no object; orphans are on their
         * way out. A call to a request that is not there is NotFound, as the interface says,
         * not sd-bus's UnknownObject. */
        n = path_number(path, AXP_BUS_REQUEST_PREFIX);
        r = n > 0 ? idmap_get(&c->requests, n) : NULL;
        if (!r || r->complete || !r->client || request_hidden(c, r, path))
                return request_not_found(error, name);
        *ret = r;
        return 1;
}

static int request_node_enumerator(sd_bus *bus, const char *path, void *userdata, char ***ret_nodes,
                                   sd_bus_error *error) {
        Context *c = userdata;
        sd_bus_message *m = sd_bus_get_current_message(bus);
        char **nodes;
        size_t i = 0, n = 0;
        Request *r;
        uid_t uid;

        /* List the caller's own requests only. */
        if (!m || context_sender_uid(c, m, &uid) < 0) {
                *ret_nodes = NULL;
                return 0;
        }
        nodes = calloc(idmap_size(&c->requests) + 1, sizeof(char *));
        if (!nodes)
                return -ENOMEM;
        while (idmap_next(&c->requests, &i, NULL, (void **) &r)) {
                if (r->complete || !r->client || r->uid != uid)
                        continue;
                nodes[n] = strdup(r->path);
                if (!nodes[n]) {
                        for (size_t j = 0; j < n; j++)
                                free(nodes[j]);
                        free(nodes);
                        return -ENOMEM;
                }
                n++;
        }
        *ret_nodes = nodes;
        return 1;
}

int request_register(Context *c) {
        int k;

        k = sd_bus_add_fallback_vtable(c->bus, NULL, AXP_BUS_REQUEST_PREFIX, AXP_BUS_REQUEST_IFACE,
                                       request_vtable, request_object_find, c);
        if (k < 0)
                return log_error_errno(k, "Failed to register the request objects");
        k = sd_bus_add_node_enumerator(c->bus, NULL, AXP_BUS_REQUEST_PREFIX, request_node_enumerator, c);
        if (k < 0)
                return log_error_errno(k, "Failed to register the request enumerator");
        return 0;
}
