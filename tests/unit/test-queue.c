/* SPDX-License-Identifier: MIT */
/* base/queue.h: the locked FIFO under the mailbox, the executors and the daemon's bridge. */
#include <pthread.h>
#include <time.h>

#include "test.h"
#include "base/queue.h"

typedef struct item {
        int producer, seq;
        axp_qnode node;
} item;

static item *item_of(axp_qnode *n) {
        return n ? container_of(n, item, node) : NULL;
}

static void test_fifo(void) {
        axp_queue q;
        item it[5];
        axp_qnode *n;
        int k = 0;

        axp_queue_init(&q);
        CHECK(axp_queue_pop(&q, 0) == NULL);          /* a past deadline: no wait */
        CHECK(axp_queue_pop_all(&q) == NULL);
        for (int i = 0; i < 5; i++) {
                it[i] = (item) { .seq = i };
                CHECK_EQ_INT(axp_queue_push(&q, &it[i].node), 0);
        }
        CHECK(item_of(axp_queue_pop(&q, INFINITY))->seq == 0);
        CHECK(item_of(axp_queue_pop(&q, 0))->seq == 1);
        for (n = axp_queue_pop_all(&q); n; n = n->next)
                CHECK_EQ_INT(item_of(n)->seq, 2 + k++);
        CHECK_EQ_INT(k, 3);
        CHECK(axp_queue_pop(&q, 0) == NULL);
        /* emptied by pop_all, the queue takes new nodes as a fresh one */
        CHECK_EQ_INT(axp_queue_push(&q, &it[4].node), 0);
        CHECK(item_of(axp_queue_pop(&q, 0)) == &it[4]);
        axp_queue_done(&q);
}

static void test_deadline(void) {
        axp_queue q;
        double t0;

        axp_queue_init(&q);
        t0 = axp_now();
        CHECK(axp_queue_pop(&q, t0 + 0.05) == NULL);
        CHECK(axp_now() - t0 >= 0.049);
        CHECK(axp_now() - t0 < 5);
        axp_queue_done(&q);
}

static void test_close(void) {
        axp_queue q;
        item a = { .seq = 1 }, b = { .seq = 2 };

        axp_queue_init(&q);
        CHECK_EQ_INT(axp_queue_push(&q, &a.node), 0);
        axp_queue_close(&q);
        CHECK_EQ_INT(axp_queue_push(&q, &b.node), -ESHUTDOWN);
        CHECK(item_of(axp_queue_pop(&q, INFINITY)) == &a); /* what was queued still comes */
        CHECK(axp_queue_pop(&q, INFINITY) == NULL);        /* then NULL, without waiting */
        axp_queue_done(&q);
}

enum { PRODUCERS = 4, PER_PRODUCER = 2000 };

typedef struct producer {
        axp_queue *q;
        int id;
        item items[PER_PRODUCER];
} producer;

static void *produce(void *p) {
        producer *pr = p;
        for (int i = 0; i < PER_PRODUCER; i++) {
                pr->items[i] = (item) { .producer = pr->id, .seq = i };
                if (axp_queue_push(pr->q, &pr->items[i].node) < 0)
                        abort();
        }
        return NULL;
}

typedef struct waiter {
        axp_queue *q;
        int got;
} waiter;

static void *wait_for_close(void *p) {
        waiter *w = p;
        while (axp_queue_pop(w->q, INFINITY))
                w->got++;
        return NULL;
}

/* Four threads push while one reads: every node arrives once, each thread's in its order; a
 * reader waiting with no deadline wakes when the queue closes. */
static void test_threads(void) {
        static producer pr[PRODUCERS];
        pthread_t t[PRODUCERS], r;
        int next[PRODUCERS] = { 0 }, total = 0, bad = 0;
        axp_queue q;
        waiter w = { .q = &q };

        axp_queue_init(&q);
        for (int i = 0; i < PRODUCERS; i++) {
                pr[i] = (producer) { .q = &q, .id = i };
                pthread_create(&t[i], NULL, produce, &pr[i]);
        }
        while (total < PRODUCERS * PER_PRODUCER) {
                item *it = item_of(axp_queue_pop(&q, axp_now() + 10));
                if (!it)
                        break;
                bad += it->seq != next[it->producer]++;
                total++;
        }
        for (int i = 0; i < PRODUCERS; i++)
                pthread_join(t[i], NULL);
        CHECK_EQ_INT(total, PRODUCERS * PER_PRODUCER);
        CHECK_EQ_INT(bad, 0);

        pthread_create(&r, NULL, wait_for_close, &w);
        nanosleep(&(struct timespec) { .tv_nsec = 20000000 }, NULL);
        axp_queue_close(&q);
        pthread_join(r, NULL);
        CHECK_EQ_INT(w.got, 0);
        axp_queue_done(&q);
}

int main(void) {
        RUN(test_fifo);
        RUN(test_deadline);
        RUN(test_close);
        RUN(test_threads);
        TEST_EXIT();
}
