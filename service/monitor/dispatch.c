/* SPDX-License-Identifier: MIT */
#include "dispatch.h"

#include <string.h>

#include "engine-client.h"
#include "suggestion.h"

/* An event the engine answered badly this often is given up. */
#define MAX_ATTEMPTS 3
#define ANSWER_MAX (64 * 1024)
#define BACKOFF_MIN_US (2 * G_USEC_PER_SEC)
#define BACKOFF_MAX_US (60 * G_USEC_PER_SEC)

struct Dispatcher {
        const MonitorConfig *cfg;
        Journal *journal;
        Store *store;
        Notifier *notifier;
        EngineClient *engine;

        GQueue queue;           /* Event* waiting, oldest first */
        GHashTable *live;       /* id → Event* (owned): queued and at the engine */
        guint in_flight;
        double tokens;
        gint64 refill_us;
        gint64 retry_after_us, backoff_us;
        bool told_unavailable;
        guint kick_source;
        guint64 last_id;
};

typedef struct TimeoutData {
        Dispatcher *d;
        guint64 id;
} TimeoutData;

static void kick(Dispatcher *d);

/* What an event is about, for a log line: "text", or its file's name made visible. */
static char *describe(const Event *ev) {
        return ev->source == EVENT_CLIPBOARD ? g_strdup("text") : log_visible(ev->path);
}

static void forget(Dispatcher *d, Event *ev, const char *outcome) {
        journal_done(d->journal, ev->id, outcome);
        g_queue_remove(&d->queue, ev);
        g_hash_table_remove(d->live, &ev->id);
}

static gint by_id_data(gconstpointer a, gconstpointer b, gpointer data) {
        guint64 x = ((const Event *) a)->id, y = ((const Event *) b)->id;
        return x < y ? -1 : x > y;
}

static void requeue(Dispatcher *d, Event *ev) {
        ev->state = EVENT_QUEUED;
        g_clear_pointer(&ev->request, g_free);
        if (ev->answer)
                g_string_truncate(ev->answer, 0);
        if (ev->timeout_source) {
                g_source_remove(ev->timeout_source);
                ev->timeout_source = 0;
        }
        /* Back in creation order: it was next once already. */
        g_queue_insert_sorted(&d->queue, ev, by_id_data, NULL);
}

static GVariant *request_options(const MonitorConfig *cfg) {
        GVariantBuilder b;
        g_variant_builder_init(&b, G_VARIANT_TYPE("a{sv}"));
        g_variant_builder_add(&b, "{sv}", "max_tokens", g_variant_new_uint32(cfg->max_tokens));
        g_variant_builder_add(&b, "{sv}", "temperature", g_variant_new_double(cfg->temperature));
        g_autofree char *schema = suggestion_schema(cfg->title_max_length, cfg->body_max_length);
        g_autofree char *system = cfg->system_prompt && cfg->system_prompt[0]
                                          ? g_strconcat(cfg->system_prompt, "\n", SUGGESTION_INSTRUCTIONS, NULL)
                                          : g_strdup(SUGGESTION_INSTRUCTIONS);

        g_variant_builder_add(&b, "{sv}", "system", g_variant_new_string(system));
        g_variant_builder_add(&b, "{sv}", "json_schema", g_variant_new_string(schema));
        return g_variant_builder_end(&b);
}

static void refill(Dispatcher *d) {
        gint64 now = g_get_monotonic_time();
        double rate = d->cfg->requests_per_minute / 60.0;  /* per second */
        d->tokens = MIN((double) d->cfg->request_burst,
                        d->tokens + rate * (double) (now - d->refill_us) / G_USEC_PER_SEC);
        d->refill_us = now;
}

static gboolean dispatch_cb(gpointer data) {
        Dispatcher *d = data;
        gint64 now = g_get_monotonic_time(), wait_us = -1;

        EngineState state = engine_client_state(d->engine);
        /* With the engine away, one request at a time probes for it: the bus may start it. */
        guint limit = state == ENGINE_PRESENT ? d->cfg->max_in_flight : 1;

        d->kick_source = 0;
        if (state == ENGINE_CONNECTING)
                return G_SOURCE_REMOVE;         /* changed() kicks again */
        refill(d);
        while (!g_queue_is_empty(&d->queue) && d->in_flight < limit) {
                Event *ev;
                if (now < d->retry_after_us) {
                        wait_us = d->retry_after_us - now;
                        break;
                }
                /* requests_per_minute=0 means no limit. */
                if (d->cfg->requests_per_minute > 0 && d->tokens < 1.0) {
                        /* at most an hour: a rate the configuration allows (1e-12 a minute)
                         * would not fit a gint64, nor a timeout's milliseconds */
                        double w = (1.0 - d->tokens) * 60.0 / d->cfg->requests_per_minute * G_USEC_PER_SEC;
                        wait_us = (gint64) MIN(w, 3600.0 * G_USEC_PER_SEC) + 1000;
                        break;
                }
                ev = g_queue_pop_head(&d->queue);
                /* Cancelled by an engine that is still here: by someone, not by stopping. */
                if (ev->cancelled) {
                        ev->cancelled = false;
                        if (++ev->attempts >= MAX_ATTEMPTS) {
                                g_autofree char *what = describe(ev);
                                g_warning("dispatch: the engine cancelled event %" G_GUINT64_FORMAT
                                          " (%s) %u times; giving it up", ev->id, what, ev->attempts);
                                forget(d, ev, "cancelled");
                                continue;
                        }
                }
                if (d->cfg->requests_per_minute > 0)
                        d->tokens -= 1.0;
                ev->state = EVENT_SUBMITTING;
                d->in_flight++;
                g_autofree char *what = describe(ev);
                g_message("dispatch: submitting event %" G_GUINT64_FORMAT " (%s: %s)", ev->id,
                          event_source_name(ev->source), what);
                engine_client_submit(d->engine, ev->id, ev->prompt, request_options(d->cfg));
        }
        if (wait_us >= 0)
                d->kick_source = g_timeout_add((guint) MAX(1, wait_us / 1000), dispatch_cb, d);
        return G_SOURCE_REMOVE;
}

static void kick(Dispatcher *d) {
        if (d->kick_source)
                g_source_remove(d->kick_source);
        d->kick_source = g_idle_add(dispatch_cb, d);
}

static gboolean timeout_cb(gpointer data) {
        TimeoutData *t = data;
        Event *ev = g_hash_table_lookup(t->d->live, &t->id);

        if (!ev)
                return G_SOURCE_REMOVE;
        ev->timeout_source = 0;
        g_warning("dispatch: the engine did not finish event %" G_GUINT64_FORMAT " within %u s; "
                  "cancelling it", ev->id, t->d->cfg->request_timeout_s);
        engine_client_cancel(t->d->engine, ev->request);
        /* A late Finished for the old request is ignored: the event has moved on. */
        t->d->in_flight--;
        if (++ev->attempts >= MAX_ATTEMPTS)
                forget(t->d, ev, "failed");
        else
                requeue(t->d, ev);
        kick(t->d);
        return G_SOURCE_REMOVE;
}

static void on_changed(void *userdata) {
        Dispatcher *d = userdata;
        if (engine_client_state(d->engine) == ENGINE_PRESENT) {
                d->retry_after_us = 0;
                d->backoff_us = 0;
                d->told_unavailable = false;
        } else {
                /* The engine left (or the bus went): what it cancelled, it cancelled because
                 * it was stopping (it does so on SIGTERM), which is no fault of the events. */
                GHashTableIter it;
                gpointer v;
                g_hash_table_iter_init(&it, d->live);
                while (g_hash_table_iter_next(&it, NULL, &v))
                        ((Event *) v)->cancelled = false;
        }
        kick(d);
}

/* The engine or the bus is in trouble: wait before the next submission, longer each time. */
static void back_off(Dispatcher *d) {
        d->backoff_us = d->backoff_us ? MIN(d->backoff_us * 2, BACKOFF_MAX_US) : BACKOFF_MIN_US;
        d->retry_after_us = g_get_monotonic_time() + d->backoff_us;
}

static void on_submitted(void *userdata, guint64 id, const char *request, const char *error,
                         bool retry) {
        Dispatcher *d = userdata;
        Event *ev = g_hash_table_lookup(d->live, &id);

        if (!ev || ev->state != EVENT_SUBMITTING) {
                /* Cancelled meanwhile (timeout): tell the engine to stop. */
                if (request)
                        engine_client_cancel(d->engine, request);
                return;
        }
        if (request) {
                TimeoutData *t = g_new0(TimeoutData, 1);
                ev->state = EVENT_RUNNING;
                ev->request = g_strdup(request);
                journal_submit(d->journal, id, request);
                t->d = d;
                t->id = id;
                ev->timeout_source = g_timeout_add_seconds_full(G_PRIORITY_DEFAULT,
                                                                d->cfg->request_timeout_s,
                                                                timeout_cb, t, g_free);
                d->backoff_us = 0;
                return;
        }
        d->in_flight--;
        if (!retry) {
                g_autofree char *what = describe(ev);
                g_warning("dispatch: the engine refused event %" G_GUINT64_FORMAT " (%s): %s", id,
                          what, error);
                forget(d, ev, "refused");
                kick(d);
                return;
        }
        /* The engine is away or busy: wait, and do not charge the rate limit for it. */
        if (!d->told_unavailable)
                g_message("dispatch: the engine is not available (%s); %u events wait", error,
                          g_queue_get_length(&d->queue) + 1);
        d->told_unavailable = true;
        d->tokens = MIN((double) d->cfg->request_burst, d->tokens + 1.0);
        back_off(d);
        requeue(d, ev);
        kick(d);
}

static void on_token(void *userdata, guint64 id, const char *text) {
        Dispatcher *d = userdata;
        Event *ev = g_hash_table_lookup(d->live, &id);

        if (!ev || ev->state != EVENT_RUNNING)
                return;
        if (!ev->answer)
                ev->answer = g_string_new(NULL);
        if (ev->answer->len < ANSWER_MAX)
                g_string_append(ev->answer, text);
}

static void on_finished(void *userdata, guint64 id, const char *reason, const char *error) {
        Dispatcher *d = userdata;
        Event *ev = g_hash_table_lookup(d->live, &id);
        axp_error err = { 0 };

        if (!ev || ev->state != EVENT_RUNNING)
                return;
        d->in_flight--;
        if (strcmp(reason, "lost") == 0) {
                requeue(d, ev);
        } else if (strcmp(reason, "cancelled") == 0) {
                /* Most likely the engine is stopping: it cancels every request first, then
                 * leaves the bus. Submit again once it is back, or after a pause. */
                g_autofree char *what = describe(ev);
                g_message("dispatch: the engine cancelled event %" G_GUINT64_FORMAT " (%s); it "
                          "will be submitted again", id, what);
                ev->cancelled = true;
                back_off(d);
                requeue(d, ev);
        } else if (strcmp(reason, "stop") == 0 || strcmp(reason, "length") == 0) {
                Suggestion sug = { 0 };
                const char *answer = ev->answer ? ev->answer->str : "";
                if (suggestion_parse(answer, strlen(answer), d->cfg->title_max_length,
                                     d->cfg->body_max_length, &sug, &err) < 0) {
                        /* The schema makes every finished answer parse: one that does not was
                         * cut at max_tokens, and asking again would cut it again. The message
                         * may quote the model's text (a field's name). */
                        g_autofree char *why = log_visible(err.msg);
                        g_warning("dispatch: event %" G_GUINT64_FORMAT " got no suggestion: %s%s", id,
                                  why, strcmp(reason, "length") == 0
                                                   ? " (cut at max_tokens; raise max_tokens or lower "
                                                     "title_max_length and body_max_length)"
                                                   : "");
                        forget(d, ev, strcmp(reason, "length") == 0 ? "truncated" : "malformed");
                } else if (store_append(d->store, ev, &sug, &err) < 0) {
                        g_warning("dispatch: %s", err.msg);
                        forget(d, ev, "unstored");
                } else {
                        /* Store first, journal second: a kill in between is caught at the next
                         * start by store_forget_answered(). */
                        g_autofree char *what = describe(ev);
                        g_message("dispatch: suggestion stored for event %" G_GUINT64_FORMAT
                                  " (%s: %s)", id, event_store_source(ev->source), what);
                        notifier_show(d->notifier, ev, &sug);
                        forget(d, ev, "stored");
                }
                suggestion_clear(&sug);
        } else {
                g_warning("dispatch: event %" G_GUINT64_FORMAT " finished with \"%s\"%s%s", id,
                          reason, error ? ": " : "", error ? error : "");
                if (++ev->attempts >= MAX_ATTEMPTS)
                        forget(d, ev, "failed");
                else
                        requeue(d, ev);
        }
        kick(d);
}

Dispatcher *dispatcher_new(const MonitorConfig *cfg, Journal *journal, Store *store,
                           Notifier *notifier, const char *address, guint64 last_id) {
        static const EngineCallbacks cb = {
                .changed = on_changed,
                .submitted = on_submitted,
                .token = on_token,
                .finished = on_finished,
        };
        Dispatcher *d = g_new0(Dispatcher, 1);

        d->cfg = cfg;
        d->journal = journal;
        d->store = store;
        d->notifier = notifier;
        d->last_id = last_id;
        d->tokens = cfg->request_burst;
        d->refill_us = g_get_monotonic_time();
        g_queue_init(&d->queue);
        d->live = g_hash_table_new_full(g_int64_hash, g_int64_equal, NULL, (GDestroyNotify) event_free);
        d->engine = engine_client_new(address, &cb, d);
        return d;
}

void dispatcher_free(Dispatcher *d) {
        if (!d)
                return;
        if (d->kick_source)
                g_source_remove(d->kick_source);
        engine_client_free(d->engine);
        g_queue_clear(&d->queue);
        g_hash_table_unref(d->live);
        g_free(d);
}

void dispatcher_restore(Dispatcher *d, GPtrArray *events) {
        for (guint i = 0; i < events->len; i++) {
                Event *ev = events->pdata[i];
                events->pdata[i] = NULL;
                d->last_id = MAX(d->last_id, ev->id);
                g_hash_table_insert(d->live, &ev->id, ev);
                g_queue_push_tail(&d->queue, ev);
        }
        if (events->len > 0) {
                g_message("dispatch: %u pending events from before the restart will be submitted",
                          events->len);
                kick(d);
        }
}

static bool foldable(const Event *ev) {
        return ev->state == EVENT_QUEUED && ev->source != EVENT_CLIPBOARD;
}

/* Folds every queued file event into `ev`, which becomes (or stays) a summary. Returns the
 * ids folded, which the journal record of `ev` marks as replaced. */
static GArray *fold_into(Dispatcher *d, Event *ev) {
        GArray *ids = g_array_new(FALSE, FALSE, sizeof(guint64));
        guint64 files = 0;

        if (!ev->batch) {
                ev->batch = batch_new();
                batch_add_path(ev->batch, ev->path, d->cfg->batch_list_max);
                ev->source = EVENT_BATCH;
        }
        for (GList *l = d->queue.head, *next; l; l = next) {
                Event *old = l->data;
                next = l->next;
                if (!foldable(old))
                        continue;
                if (old->batch)
                        batch_merge(ev->batch, old->batch, d->cfg->batch_list_max);
                else
                        batch_add_path(ev->batch, old->path, d->cfg->batch_list_max);
                files += old->batch ? old->batch->total : 1;
                g_array_append_val(ids, old->id);
                g_queue_delete_link(&d->queue, l);
                g_hash_table_remove(d->live, &old->id);
        }
        g_free(ev->path);
        ev->path = g_strdup(ev->batch->root);
        g_free(ev->prompt);
        ev->prompt = batch_render_prompt(ev->batch, d->cfg->batch_template);
        g_autofree char *root = log_visible(ev->path);
        g_message("dispatch: summarized %u queued events (%" G_GUINT64_FORMAT " files) into one "
                  "about %" G_GUINT64_FORMAT " files under %s",
                  ids->len, files, ev->batch->total, root);
        return ids;
}

void dispatcher_add(Dispatcher *d, Event *ev, const char *settles, bool settles_all) {
        g_autoptr(GArray) replaces = NULL;
        guint queued = 0;

        ev->id = event_next_id(&d->last_id);
        ev->state = EVENT_QUEUED;
        for (GList *l = d->queue.head; l; l = l->next) {
                Event *q = l->data;
                if (ev->source == EVENT_CLIPBOARD ? q->source == EVENT_CLIPBOARD : foldable(q))
                        queued++;
        }
        if (ev->source == EVENT_CLIPBOARD) {
                /* The user's latest copies matter most: the oldest waiting one gives way. */
                for (GList *l = d->queue.head; l && queued >= d->cfg->max_queued; l = l->next) {
                        Event *q = l->data;
                        if (q->source != EVENT_CLIPBOARD)
                                continue;
                        g_message("dispatch: event %" G_GUINT64_FORMAT " (clipboard) dropped: "
                                  "newer clipboard text is waiting", q->id);
                        forget(d, q, "superseded");
                        queued--;
                        break;
                }
        } else if (queued > 0 && (ev->source == EVENT_BATCH || queued + 1 > d->cfg->max_queued))
                replaces = fold_into(d, ev);

        journal_event(d->journal, ev, settles, settles_all, replaces);
        g_hash_table_insert(d->live, &ev->id, ev);
        g_queue_push_tail(&d->queue, ev);
        kick(d);
}

static gint by_id(gconstpointer a, gconstpointer b) {
        guint64 x = (*(Event *const *) a)->id, y = (*(Event *const *) b)->id;
        return x < y ? -1 : x > y;
}

GPtrArray *dispatcher_pending(Dispatcher *d) {
        GPtrArray *out = g_ptr_array_new();
        GList *values = g_hash_table_get_values(d->live);
        for (GList *l = values; l; l = l->next)
                g_ptr_array_add(out, l->data);
        g_list_free(values);
        g_ptr_array_sort(out, by_id);
        return out;
}

guint64 dispatcher_last_id(Dispatcher *d) {
        return d->last_id;
}
