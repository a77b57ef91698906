/* SPDX-License-Identifier: MIT */
#include "context.h"

#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include "admin.h"
#include "common/bus-common.h"
#include "client.h"
#include "flow.h"
#include "log.h"
#include "models.h"
#include "request.h"

int context_sender_uid(Context *c, sd_bus_message *m, uid_t *ret) {
        _cleanup_(sd_bus_creds_unrefp) sd_bus_creds *creds = NULL;
        const char *sender = sd_bus_message_get_sender(m);
        Client *cl = sender ? client_find(c, sender) : NULL;
        uid_t uid;
        int r;

        if (cl) {
                *ret = cl->uid;
                return 0;
        }
        r = sd_bus_query_sender_creds(m, SD_BUS_CREDS_EUID, &creds);
        if (r < 0)
                return r;
        r = sd_bus_creds_get_euid(creds, &uid);
        if (r < 0)
                return r;
        *ret = uid;
        return 0;
}

unsigned context_count_active(Context *c, uid_t uid, unsigned *ret_total) {
        unsigned mine = 0;
        size_t i = 0;
        Request *r;

        while (idmap_next(&c->requests_by_id, &i, NULL, (void **) &r))
                if (r->uid == uid)
                        mine++;
        if (ret_total)
                *ret_total = (unsigned) idmap_size(&c->requests_by_id);
        return mine;
}

unsigned context_count_flows(Context *c, uid_t uid) {
        unsigned n = 0;
        size_t i = 0;
        Flow *f;

        while (idmap_next(&c->flows, &i, NULL, (void **) &f))
                if (f->uid == uid)
                        n++;
        return n;
}

static bool context_is_idle(Context *c) {
        return idmap_size(&c->requests) == 0 && idmap_size(&c->flows) == 0 && !c->clients &&
               !c->admin_calls && !c->loader_running && !c->install_jobs;
}

static int on_idle_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        Context *c = userdata;
        int r;

        if (!context_is_idle(c))
                return 0;
        log_info("Idle for %gs, exiting", c->config.exit_idle_s);

        /* Give the name back first, so calls from now on start a new instance; then answer
         * what is already queued for us (with the stopping error) and go. */
        c->stopping = true;
        r = sd_bus_release_name(c->bus, AXP_BUS_NAME);
        if (r < 0)
                log_warning_errno(r, "Failed to release " AXP_BUS_NAME);
        while (sd_bus_process(c->bus, NULL) > 0)
                ;
        (void) sd_bus_flush(c->bus);
        return sd_event_exit(c->event, 0);
}

static void context_update_idle(Context *c) {
        int r;

        if (c->config.exit_idle_s <= 0 || c->stopping)
                return;
        if (!context_is_idle(c)) {
                if (c->idle_timer)
                        (void) sd_event_source_set_enabled(c->idle_timer, SD_EVENT_OFF);
                return;
        }
        if (c->idle_timer) {
                /* Already counting? Keep counting from when the engine became idle. */
                int enabled = 0;
                (void) sd_event_source_get_enabled(c->idle_timer, &enabled);
                if (enabled != SD_EVENT_OFF)
                        return;
                r = sd_event_source_set_time_relative(c->idle_timer, (uint64_t) (c->config.exit_idle_s * 1e6));
                if (r >= 0)
                        r = sd_event_source_set_enabled(c->idle_timer, SD_EVENT_ONESHOT);
        } else
                r = sd_event_add_time_relative(c->event, &c->idle_timer, CLOCK_MONOTONIC,
                                               (uint64_t) (c->config.exit_idle_s * 1e6), 0, on_idle_timer, c);
        if (r < 0)
                log_warning_errno(r, "Failed to arm the idle timer");
}

void context_emit_status(Context *c) {
        const axp_engine_status *st = &c->status;
        axp_engine_status *sent = &c->status_sent;
        const char *changed[12]; /* every property below and the NULL */
        bool model_news, model_waits;
        size_t n = 0;

        if (!c->engine || !c->bus)
                return;
        /* a new model, even one of the same name, is news; while LoadModel runs, its answer
         * announces it, together with Devices (admin_job_done) */
        model_news = st->model_serial != sent->model_serial || strcmp(st->model, sent->model) != 0;
        model_waits = model_news && c->loader_running;
        if (st->queued_reactive != sent->queued_reactive)
                changed[n++] = "QueuedReactive";
        if (st->queued_proactive != sent->queued_proactive)
                changed[n++] = "QueuedProactive";
        if (st->running != sent->running)
                changed[n++] = "Running";
        if (strcmp(st->policy, sent->policy) != 0)
                changed[n++] = "Policy";
        if (model_news && !model_waits) {
                changed[n++] = "Model";
                changed[n++] = "ModelInfo";
        }
        if (c->devices_changed)
                changed[n++] = "Devices";
        if (st->kv_memory != sent->kv_memory)
                changed[n++] = "KVMemory";
        if (st->kv_memory_used != sent->kv_memory_used)
                changed[n++] = "KVMemoryUsed";
        if (st->kv_memory_cached != sent->kv_memory_cached)
                changed[n++] = "KVMemoryCached";
        if (model_waits) {
                axp_engine_status announced = *sent;
                *sent = *st;
                memcpy(sent->model, announced.model, sizeof(sent->model));
                sent->model_serial = announced.model_serial;
        } else
                *sent = *st;
        c->devices_changed = false;
        if (n == 0)
                return;
        changed[n] = NULL;
        (void) sd_bus_emit_properties_changed_strv(c->bus, AXP_BUS_PATH, AXP_BUS_IFACE, (char **) changed);
}

void context_changed(Context *c) {
        context_emit_status(c);
        context_update_idle(c);

        /* A burst of requests leaves freed heap behind (token events, buffers, requests);
         * give it back to the system once the last request is gone. */
        if (idmap_size(&c->requests) > 0)
                c->trim_pending = true;
        else if (c->trim_pending) {
                c->trim_pending = false;
                (void) malloc_trim(0);
        }
}

void context_on_engine_event(void *userdata, const BridgeEvent *ev) {
        Context *c = userdata;
        Request *r;

        if (!ev) {
                context_changed(c);
                return;
        }
        switch (ev->type) {
        case BRIDGE_TOKEN:
                r = idmap_get(&c->requests_by_id, ev->id);
                if (r)
                        request_on_token(r, ev->text, ev->len);
                break;
        case BRIDGE_LOGPROBS:
                r = idmap_get(&c->requests_by_id, ev->id);
                if (r)
                        request_on_logprobs(r, ev->text, ev->len);
                break;
        case BRIDGE_EMBEDDING:
                r = idmap_get(&c->requests_by_id, ev->id);
                if (r)
                        request_on_embedding(r, ev->text, ev->len / sizeof(float));
                break;
        case BRIDGE_FINISHED:
                r = idmap_get(&c->requests_by_id, ev->id);
                if (r)
                        request_on_finished(r, ev->reason, &ev->stats);
                break;
        case BRIDGE_JOB_DONE:
                admin_job_done(c, ev->job);
                break;
        case BRIDGE_INSTALL_DONE:
                install_job_done(c, ev->job);
                break;
        case BRIDGE_STATUS:
                c->status = ev->status;
                break;
        }
}

void context_stop(Context *c) {
        void **flows = NULL;
        size_t n = 0;

        if (c->stopping && !c->engine)
                return;
        log_info("Stopping: cancelling %zu requests", idmap_size(&c->requests_by_id));
        c->stopping = true;
        if (c->idle_timer)
                (void) sd_event_source_set_enabled(c->idle_timer, SD_EVENT_OFF);

        /* A model load in progress waits for the requests in flight to be done, and
         * admin_cancel_all() waits for the load: cancel them first, or stopping waits for each
         * to run to its end (max_tokens and all). */
        if (c->loader_running) {
                size_t i = 0;
                Request *r;

                while (idmap_next(&c->requests_by_id, &i, NULL, (void **) &r))
                        (void) request_cancel(r);
        }
        admin_cancel_all(c);
        install_cancel_all(c);
        bridge_dispatch(&c->bridge); /* a model load that just ended is answered with the engine alive */

        /* Freeing the engine cancels every request; their Finished events wait in the bridge. */
        axp_engine_free(c->engine);
        c->engine = NULL;
        bridge_dispatch(&c->bridge);

        /* Flows are gone with the engine. */
        if (idmap_values(&c->flows, &flows, &n) >= 0) {
                for (size_t i = 0; i < n; i++)
                        flow_free(flows[i]);
                free(flows);
        }

        /* Calls already queued for us get the stopping error rather than no answer. */
        while (sd_bus_process(c->bus, NULL) > 0)
                ;
        (void) sd_bus_flush(c->bus);
        (void) sd_event_exit(c->event, 0);
}

void context_clear(Context *c) {
        void **v = NULL;
        size_t n = 0;

        if (c->loader_running) {
                pthread_join(c->loader, NULL);
                c->loader_running = false;
        }
        axp_engine_free(c->engine);
        c->engine = NULL;

        /* What is left: requests whose Finished never came, finished ones in their grace
         * period, flows, and the clients (freed with their last request or flow). */
        if (idmap_values(&c->requests, &v, &n) >= 0) {
                for (size_t i = 0; i < n; i++) {
                        Request *r = v[i];
                        r->finished = true;
                        request_free(r);
                }
                free(v);
        }
        if (idmap_values(&c->flows, &v, &n) >= 0) {
                for (size_t i = 0; i < n; i++)
                        flow_free(v[i]);
                free(v);
        }
        while (c->clients)
                client_free(c->clients);
        admin_free_all(c);
        install_free_all(c);
        free(c->loaded_path);
        free(c->default_model);

        idmap_done(&c->requests);
        idmap_done(&c->requests_by_id);
        idmap_done(&c->flows);
        c->idle_timer = sd_event_source_disable_unref(c->idle_timer);
        c->bus = sd_bus_flush_close_unref(c->bus);
        bridge_done(&c->bridge);
        c->event = sd_event_unref(c->event);
        daemon_config_done(&c->config);
}
