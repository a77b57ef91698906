/* SPDX-License-Identifier: MIT */
/* The mailbox and the per-device executors. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "executor.h"

struct axp_mailbox {
        pthread_mutex_t lock;
        pthread_cond_t cond;      /* a mail arrived */
        pthread_cond_t call_cond; /* a call ran */
        axp_mail *head, *tail;
};

int axp_mailbox_new(axp_mailbox **ret) {
        axp_mailbox *mb = calloc(1, sizeof(*mb));
        pthread_condattr_t ca;

        if (!mb)
                return -ENOMEM;
        pthread_mutex_init(&mb->lock, NULL);
        /* deadlines are axp_now() times: CLOCK_MONOTONIC */
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&mb->cond, &ca);
        pthread_cond_init(&mb->call_cond, &ca);
        pthread_condattr_destroy(&ca);
        *ret = mb;
        return 0;
}

void axp_mailbox_free(axp_mailbox *mb) {
        if (!mb)
                return;
        while (mb->head) {
                axp_mail *m = mb->head;
                mb->head = m->next;
                free(m);
        }
        pthread_cond_destroy(&mb->cond);
        pthread_cond_destroy(&mb->call_cond);
        pthread_mutex_destroy(&mb->lock);
        free(mb);
}

void axp_mailbox_post(axp_mailbox *mb, axp_mail *m) {
        m->next = NULL;
        pthread_mutex_lock(&mb->lock);
        if (mb->tail)
                mb->tail->next = m;
        else
                mb->head = m;
        mb->tail = m;
        pthread_cond_signal(&mb->cond);
        pthread_mutex_unlock(&mb->lock);
}

axp_mail *axp_mailbox_wait(axp_mailbox *mb, double deadline) {
        axp_mail *m;

        pthread_mutex_lock(&mb->lock);
        while (!mb->head) {
                if (isinf(deadline)) {
                        pthread_cond_wait(&mb->cond, &mb->lock);
                        continue;
                }
                if (axp_now() >= deadline)
                        break;
                struct timespec ts = {
                        .tv_sec = (time_t) floor(deadline),
                        .tv_nsec = (long) ((deadline - floor(deadline)) * 1e9),
                };
                pthread_cond_timedwait(&mb->cond, &mb->lock, &ts);
        }
        m = mb->head;
        if (m) {
                mb->head = m->next;
                if (!mb->head)
                        mb->tail = NULL;
        }
        pthread_mutex_unlock(&mb->lock);
        return m;
}

int axp_mailbox_call(axp_mailbox *mb, void (*fn)(void *arg), void *arg) {
        axp_mail *m = calloc(1, sizeof(*m));
        bool done = false;

        if (!m)
                return -ENOMEM;
        m->type = AXP_MAIL_CALL;
        m->fn = fn;
        m->arg = arg;
        m->call_done = &done;
        axp_mailbox_post(mb, m);
        pthread_mutex_lock(&mb->lock);
        while (!done)
                pthread_cond_wait(&mb->call_cond, &mb->lock);
        pthread_mutex_unlock(&mb->lock);
        return 0;
}

void axp_mailbox_call_done(axp_mailbox *mb, axp_mail *m) {
        pthread_mutex_lock(&mb->lock);
        if (m->call_done)
                *m->call_done = true;
        pthread_cond_broadcast(&mb->call_cond);
        pthread_mutex_unlock(&mb->lock);
}

/* Executors -------------------------------------------------------------------------------- */

typedef struct task_node {
        axp_task task;
        struct task_node *next;
} task_node;

struct axp_executor {
        axp_device *dev;
        int index;
        axp_mailbox *mb;
        pthread_t thread;
        pthread_mutex_t lock;
        pthread_cond_t cond;
        task_node *head, *tail;
        bool stop;
};

static void *executor_main(void *p) {
        axp_executor *ex = p;

        for (;;) {
                task_node *n;
                axp_mail *m;
                axp_error err = { 0 };
                int rc;

                pthread_mutex_lock(&ex->lock);
                while (!ex->head && !ex->stop)
                        pthread_cond_wait(&ex->cond, &ex->lock);
                n = ex->head;
                if (n) {
                        ex->head = n->next;
                        if (!ex->head)
                                ex->tail = NULL;
                }
                pthread_mutex_unlock(&ex->lock);
                if (!n)
                        return NULL; /* stopped and drained */

                rc = axp_device_run(ex->dev, &n->task, &err);
                free(n);
                /* a completion must reach the scheduler: retry the allocation rather than lose it */
                while (!(m = calloc(1, sizeof(*m))))
                        nanosleep(&(struct timespec) { .tv_nsec = 1000000 }, NULL);
                m->type = AXP_MAIL_DONE;
                m->dev = ex->index;
                m->rc = rc;
                if (rc < 0)
                        snprintf(m->err, sizeof(m->err), "%s", err.msg[0] ? err.msg : "kernel failed");
                axp_mailbox_post(ex->mb, m);
        }
}

int axp_executor_new(axp_device *d, int index, axp_mailbox *mb, axp_executor **ret,
                     axp_error *err) {
        axp_executor *ex = calloc(1, sizeof(*ex));
        int r;

        if (!ex)
                return axp_errorf(err, -ENOMEM, "out of memory");
        ex->dev = d;
        ex->index = index;
        ex->mb = mb;
        pthread_mutex_init(&ex->lock, NULL);
        pthread_cond_init(&ex->cond, NULL);
        r = pthread_create(&ex->thread, NULL, executor_main, ex);
        if (r != 0) {
                pthread_cond_destroy(&ex->cond);
                pthread_mutex_destroy(&ex->lock);
                free(ex);
                return axp_errorf(err, -r, "cannot start a thread for device '%s'", axp_device_name(d));
        }
        *ret = ex;
        return 0;
}

int axp_executor_submit(axp_executor *ex, const axp_task *t) {
        task_node *n = malloc(sizeof(*n));

        if (!n)
                return -ENOMEM;
        n->task = *t;
        n->next = NULL;
        pthread_mutex_lock(&ex->lock);
        if (ex->stop) {
                pthread_mutex_unlock(&ex->lock);
                free(n);
                return -ESHUTDOWN;
        }
        if (ex->tail)
                ex->tail->next = n;
        else
                ex->head = n;
        ex->tail = n;
        pthread_cond_signal(&ex->cond);
        pthread_mutex_unlock(&ex->lock);
        return 0;
}

void axp_executor_free(axp_executor *ex) {
        if (!ex)
                return;
        pthread_mutex_lock(&ex->lock);
        ex->stop = true;
        pthread_cond_signal(&ex->cond);
        pthread_mutex_unlock(&ex->lock);
        pthread_join(ex->thread, NULL);
        pthread_cond_destroy(&ex->cond);
        pthread_mutex_destroy(&ex->lock);
        free(ex);
}
