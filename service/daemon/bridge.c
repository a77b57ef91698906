/* SPDX-License-Identifier: MIT */
#include "bridge.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "log.h"

static void bridge_push(Bridge *b, BridgeEvent *ev) {
        uint64_t one = 1;
        ssize_t n;

        /* the bridge's queue is never closed: the push cannot fail */
        (void) axp_queue_push(&b->events, &ev->node);

        /* An eventfd counter only fails to take a write at 2^64-2; EAGAIN there still means
         * the loop will wake up. */
        do
                n = write(b->fd, &one, sizeof(one));
        while (n < 0 && errno == EINTR);
}

static BridgeEvent *bridge_event_new(BridgeEventType type, size_t text_len) {
        BridgeEvent *ev = calloc(1, sizeof(BridgeEvent) + text_len + 1);

        if (ev)
                ev->type = type;
        return ev;
}

static void on_token(void *userdata, uint64_t id, const char *text, size_t len) {
        Bridge *b = userdata;
        BridgeEvent *ev = bridge_event_new(BRIDGE_TOKEN, len);

        /* Out of memory on the engine's thread: the token is lost, but the request still
         * ends with its Finished; better than stopping the scheduler. */
        if (!ev)
                return;
        ev->id = id;
        ev->len = len;
        memcpy(ev->text, text, len);
        bridge_push(b, ev);
}

static void on_finished(void *userdata, uint64_t id, axp_finish_reason reason,
                        const axp_req_stats *stats) {
        Bridge *b = userdata;
        BridgeEvent *ev;

        /* Finished must never be lost (it frees the request's object): retry the small
         * allocation rather than drop it. */
        const char *call = stats ? stats->tool_call : NULL, *word = stats ? stats->stop_word : NULL;
        size_t call_len = call ? strlen(call) : 0, word_len = word ? strlen(word) : 0;
        while (!(ev = bridge_event_new(BRIDGE_FINISHED, call_len + 1 + word_len)))
                usleep(1000);
        ev->id = id;
        ev->reason = reason;
        if (stats)
                ev->stats = *stats;
        ev->stats.error[sizeof(ev->stats.error) - 1] = 0;
        /* the call and the stop string are the engine's only during this callback (each
         * copied with its NUL: the event is zeroed); finish_reason is a constant */
        if (call) {
                memcpy(ev->text, call, call_len);
                ev->len = call_len;
                ev->stats.tool_call = ev->text;
        }
        if (word) {
                memcpy(ev->text + call_len + 1, word, word_len);
                ev->stats.stop_word = ev->text + call_len + 1;
        }
        bridge_push(b, ev);
}

static void on_embedding(void *userdata, uint64_t id, const float *v, size_t n) {
        Bridge *b = userdata;
        BridgeEvent *ev;

        /* the request's one answer: retry the allocation (a few KB) rather than lose it */
        while (!(ev = bridge_event_new(BRIDGE_EMBEDDING, n * sizeof(float))))
                usleep(1000);
        ev->id = id;
        ev->len = n * sizeof(float);
        memcpy(ev->text, v, ev->len);
        bridge_push(b, ev);
}

/* Records put as bridge_logprob_next reads them; n < 0: only their size */
static size_t put_u32(char *p, uint32_t v) {
        if (p)
                memcpy(p, &v, 4);
        return 4;
}

static size_t put_piece(char *p, const axp_tokenizer *tok, int32_t id, float lp, bool token, uint32_t n_alt) {
        char buf[512];
        int n = axp_engine_token_piece(tok, id, buf, sizeof(buf));
        size_t len = n < 0 ? 0 : (size_t) n, at = 0; /* a piece longer than any known token's: none */
        at += put_u32(p ? p + at : NULL, (uint32_t) len);
        if (p)
                memcpy(p + at, buf, len);
        at += len;
        if (p)
                memcpy(p + at, &lp, 4);
        at += 4;
        if (token)
                at += put_u32(p ? p + at : NULL, n_alt);
        return at;
}

static size_t put_records(char *p, const axp_token_logprob *lp, size_t n, const axp_tokenizer *tok) {
        size_t at = 0;
        for (size_t i = 0; i < n; i++) {
                at += put_piece(p ? p + at : NULL, tok, lp[i].token, lp[i].logprob, true, lp[i].n_top);
                for (uint32_t j = 0; j < lp[i].n_top; j++)
                        at += put_piece(p ? p + at : NULL, tok, lp[i].top[j].token, lp[i].top[j].logprob, false, 0);
        }
        return at;
}

static void on_logprobs(void *userdata, uint64_t id, const axp_token_logprob *lp, size_t n, const axp_tokenizer *tok) {
        Bridge *b = userdata;
        size_t len = put_records(NULL, lp, n, tok);
        BridgeEvent *ev = bridge_event_new(BRIDGE_LOGPROBS, len);

        /* out of memory: lost, as a token would be */
        if (!ev)
                return;
        ev->id = id;
        ev->len = len;
        put_records(ev->text, lp, n, tok);
        bridge_push(b, ev);
}

bool bridge_logprob_next(const char **p, const char *end, bool token, BridgeLogprob *ret) {
        const char *q = *p;
        uint32_t len;

        if ((size_t) (end - q) < 8)
                return false;
        memcpy(&len, q, 4);
        q += 4;
        if ((size_t) (end - q) < (size_t) len + 4 + (token ? 4 : 0))
                return false;
        ret->bytes = q;
        ret->len = len;
        q += len;
        memcpy(&ret->logprob, q, 4);
        q += 4;
        ret->n_alt = 0;
        if (token) {
                memcpy(&ret->n_alt, q, 4);
                q += 4;
        }
        *p = q;
        return true;
}

void bridge_request_cbs(Bridge *b, axp_request_cbs *ret) {
        *ret = (axp_request_cbs) {
                .logprobs = on_logprobs,
                .embedding = on_embedding,
                .token = on_token,
                .finished = on_finished,
                .userdata = b,
        };
}

void bridge_status_changed(void *userdata, const axp_engine_status *status) {
        Bridge *b = userdata;
        BridgeEvent *ev;

        /* A lost status would leave the properties wrong until the next change: retry. */
        while (!(ev = bridge_event_new(BRIDGE_STATUS, 0)))
                usleep(1000);
        ev->status = *status;
        ev->status.model[sizeof(ev->status.model) - 1] = 0;
        ev->status.policy[sizeof(ev->status.policy) - 1] = 0;
        bridge_push(b, ev);
}

static void post_job(Bridge *b, BridgeEventType type, void *job) {
        BridgeEvent *ev;

        while (!(ev = bridge_event_new(type, 0)))
                usleep(1000);
        ev->job = job;
        bridge_push(b, ev);
}

void bridge_post_job_done(Bridge *b, void *job) {
        post_job(b, BRIDGE_JOB_DONE, job);
}

void bridge_post_install_done(Bridge *b, void *job) {
        post_job(b, BRIDGE_INSTALL_DONE, job);
}

void bridge_dispatch(Bridge *b) {
        uint64_t count;

        /* Reset the counter first: events queued after this point write it again. */
        (void) !read(b->fd, &count, sizeof(count));

        for (axp_qnode *n = axp_queue_pop_all(&b->events), *next; n; n = next) {
                BridgeEvent *ev = container_of(n, BridgeEvent, node);

                next = n->next;
                b->handler(b->userdata, ev);
                free(ev);
        }
        b->handler(b->userdata, NULL);
}

static int on_eventfd(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        bridge_dispatch(userdata);
        return 0;
}

int bridge_init(Bridge *b, sd_event *event, BridgeHandler handler, void *userdata) {
        int r;

        *b = (Bridge) {
                .fd = -1,
                .handler = handler,
                .userdata = userdata,
        };
        axp_queue_init(&b->events);

        b->fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (b->fd < 0)
                return log_error_errno(errno, "Failed to create the engine's eventfd");
        r = sd_event_add_io(event, &b->source, b->fd, EPOLLIN, on_eventfd, b);
        if (r < 0)
                return log_error_errno(r, "Failed to watch the engine's eventfd");
        (void) sd_event_source_set_description(b->source, "engine-events");
        return 0;
}

void bridge_done(Bridge *b) {
        for (axp_qnode *n = axp_queue_pop_all(&b->events), *next; n; n = next) {
                next = n->next;
                free(container_of(n, BridgeEvent, node));
        }
        b->source = sd_event_source_disable_unref(b->source);
        if (b->fd >= 0)
                close(b->fd);
        b->fd = -1;
        axp_queue_done(&b->events);
}
