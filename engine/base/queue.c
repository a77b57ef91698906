/* SPDX-License-Identifier: MIT */
#include "queue.h"

#include <assert.h>
#include <math.h>
#include <time.h>

void axp_queue_init(axp_queue *q) {
        pthread_condattr_t ca;

        *q = (axp_queue) {};
        pthread_mutex_init(&q->lock, NULL);
        /* deadlines are axp_now() times: CLOCK_MONOTONIC */
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&q->cond, &ca);
        pthread_condattr_destroy(&ca);
}

void axp_queue_done(axp_queue *q) {
        pthread_cond_destroy(&q->cond);
        pthread_mutex_destroy(&q->lock);
}

int axp_queue_push(axp_queue *q, axp_qnode *n) {
        n->next = NULL;
        pthread_mutex_lock(&q->lock);
        if (q->closed) {
                pthread_mutex_unlock(&q->lock);
                return -ESHUTDOWN;
        }
        assert(!q->head == !q->tail);
        if (q->tail)
                q->tail->next = n;
        else
                q->head = n;
        q->tail = n;
        pthread_cond_signal(&q->cond);
        pthread_mutex_unlock(&q->lock);
        return 0;
}

axp_qnode *axp_queue_pop(axp_queue *q, double deadline) {
        axp_qnode *n;

        pthread_mutex_lock(&q->lock);
        while (!q->head && !q->closed) {
                if (isinf(deadline)) {
                        pthread_cond_wait(&q->cond, &q->lock);
                        continue;
                }
                if (axp_now() >= deadline)
                        break;
                struct timespec ts = {
                        .tv_sec = (time_t) floor(deadline),
                        .tv_nsec = (long) ((deadline - floor(deadline)) * 1e9),
                };
                pthread_cond_timedwait(&q->cond, &q->lock, &ts);
        }
        n = q->head;
        if (n) {
                q->head = n->next;
                if (!q->head)
                        q->tail = NULL;
                n->next = NULL;
        }
        assert(!q->head == !q->tail);
        pthread_mutex_unlock(&q->lock);
        return n;
}

axp_qnode *axp_queue_pop_all(axp_queue *q) {
        axp_qnode *list;

        pthread_mutex_lock(&q->lock);
        list = q->head;
        q->head = q->tail = NULL;
        pthread_mutex_unlock(&q->lock);
        return list;
}

void axp_queue_close(axp_queue *q) {
        pthread_mutex_lock(&q->lock);
        q->closed = true;
        pthread_cond_broadcast(&q->cond);
        pthread_mutex_unlock(&q->lock);
}
