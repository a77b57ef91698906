/* SPDX-License-Identifier: MIT */
/* The mailbox and the per-device executors. */
#include <assert.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "executor.h"

struct axp_mailbox {
        axp_queue mails;
        pthread_mutex_t call_lock;
        pthread_cond_t call_cond; /* a call ran */
};

int axp_mailbox_new(axp_mailbox **ret) {
        axp_mailbox *mb = calloc(1, sizeof(*mb));

        if (!mb)
                return -ENOMEM;
        axp_queue_init(&mb->mails);
        pthread_mutex_init(&mb->call_lock, NULL);
        pthread_cond_init(&mb->call_cond, NULL);
        *ret = mb;
        return 0;
}

void axp_mailbox_free(axp_mailbox *mb) {
        if (!mb)
                return;
        for (axp_qnode *n = axp_queue_pop_all(&mb->mails), *next; n; n = next) {
                next = n->next;
                free(container_of(n, axp_mail, node));
        }
        axp_queue_done(&mb->mails);
        pthread_cond_destroy(&mb->call_cond);
        pthread_mutex_destroy(&mb->call_lock);
        free(mb);
}

void axp_mailbox_post(axp_mailbox *mb, axp_mail *m) {
        /* the mailbox is never closed: the push cannot fail */
        (void) axp_queue_push(&mb->mails, &m->node);
}

axp_mail *axp_mailbox_wait(axp_mailbox *mb, double deadline) {
        axp_qnode *n = axp_queue_pop(&mb->mails, deadline);

        return n ? container_of(n, axp_mail, node) : NULL;
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
        pthread_mutex_lock(&mb->call_lock);
        while (!done)
                pthread_cond_wait(&mb->call_cond, &mb->call_lock);
        pthread_mutex_unlock(&mb->call_lock);
        return 0;
}

void axp_mailbox_call_done(axp_mailbox *mb, axp_mail *m) {
        pthread_mutex_lock(&mb->call_lock);
        assert(m->type == AXP_MAIL_CALL && m->call_done && !*m->call_done); /* answered once */
        if (m->call_done)
                *m->call_done = true;
        pthread_cond_broadcast(&mb->call_cond);
        pthread_mutex_unlock(&mb->call_lock);
}

/* Executors -------------------------------------------------------------------------------- */

typedef struct task_node {
        axp_task task;
        uint64_t seq; /* the executor's count of tasks submitted, this one included */
        axp_qnode node;
} task_node;

#define MAX_THREADS 65 /* the executor's own and a pool's (kernels/cpu/pool.c: 32) */

struct axp_executor {
        axp_device *dev;
        int index;
        axp_mailbox *mb;
        pthread_t thread;
        axp_queue tasks; /* closed when the executor stops */

        /* Scheduling class of background tasks, under cls_lock: the threads that run the
         * device's work (the executor's first, then the device's helpers), whether they are
         * in the background class now. */
        pthread_mutex_t cls_lock;
        axp_bg_class bg;
        int tids[MAX_THREADS];
        int n_tids;
        bool in_bg;
        /* tasks submitted so far, and the last one submitted before the latest hurry: those
         * run at normal priority whatever their kind, even if the executor's thread, kept off
         * the CPU at the idle class, had not started them yet when the hurry came */
        uint64_t submitted, hurried;
};

/* Move every thread of the device's work to the background class or back. cls_lock held. */
static void set_class(axp_executor *ex, bool background) {
        for (int i = 0; i < ex->n_tids; i++)
                (void) axp_thread_set_background(ex->tids[i], ex->bg, background);
        ex->in_bg = background;
}

/* Before a task: the threads take the class its kind asks for. */
static void class_begin(axp_executor *ex, const task_node *n) {
        pthread_mutex_lock(&ex->cls_lock);
        if (ex->in_bg != (n->task.background && ex->bg != AXP_BG_NONE && n->seq > ex->hurried))
                set_class(ex, !ex->in_bg);
        pthread_mutex_unlock(&ex->cls_lock);
}

/* The CPU time of the threads that run the device's work, summed; -1 where a clock cannot
 * be read. Only the executor's thread writes tids, before its first task. */
static double threads_cpu_s(const axp_executor *ex) {
        double sum = 0;
        for (int i = 0; i < ex->n_tids; i++) {
                double c = axp_thread_cpu_s(i == 0 ? 0 : ex->tids[i]);
                if (c < 0)
                        return -1;
                sum += c;
        }
        return sum;
}

static void *executor_main(void *p) {
        axp_executor *ex = p;
        /* the budget of a CPU device charges the CPU time its threads used, not the wall
         * time of the task: a step other programs keep off the CPU costs what it ran */
        bool on_cpu = axp_device_kind(ex->dev) == AXP_DEV_CPU;

        pthread_mutex_lock(&ex->cls_lock);
        ex->tids[0] = (int) syscall(SYS_gettid);
        ex->n_tids = 1 + MIN(axp_device_threads(ex->dev, ex->tids + 1, MAX_THREADS - 1),
                             MAX_THREADS - 1);
        pthread_mutex_unlock(&ex->cls_lock);
        for (;;) {
                axp_qnode *q = axp_queue_pop(&ex->tasks, INFINITY);
                task_node *n;
                axp_mail *m;
                axp_error err = { 0 };
                int rc;

                if (!q)
                        return NULL; /* stopped and drained */
                n = container_of(q, task_node, node);

                /* only background work keeps to a budget: reactive steps pay nothing */
                double cpu0 = on_cpu && n->task.background ? threads_cpu_s(ex) : -1, busy = -1;
                class_begin(ex, n);
                rc = axp_device_run(ex->dev, &n->task, &err);
                if (cpu0 >= 0) {
                        double cpu1 = threads_cpu_s(ex);
                        if (cpu1 >= cpu0)
                                busy = (cpu1 - cpu0) / ex->n_tids;
                }
                free(n);
                /* a completion must reach the scheduler: retry the allocation rather than lose it */
                while (!(m = calloc(1, sizeof(*m))))
                        nanosleep(&(struct timespec) { .tv_nsec = 1000000 }, NULL);
                m->type = AXP_MAIL_DONE;
                m->dev = ex->index;
                m->rc = rc;
                m->busy_s = busy;
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
        axp_queue_init(&ex->tasks);
        pthread_mutex_init(&ex->cls_lock, NULL);
        r = pthread_create(&ex->thread, NULL, executor_main, ex);
        if (r != 0) {
                pthread_mutex_destroy(&ex->cls_lock);
                axp_queue_done(&ex->tasks);
                free(ex);
                return axp_errorf(err, -r, "cannot start a thread for device '%s'", axp_device_name(d));
        }
        *ret = ex;
        return 0;
}

int axp_executor_submit(axp_executor *ex, const axp_task *t) {
        task_node *n = malloc(sizeof(*n));
        int r;

        if (!n)
                return -ENOMEM;
        n->task = *t;
        pthread_mutex_lock(&ex->cls_lock);
        n->seq = ++ex->submitted;
        /* Work at normal priority raises the threads here, on the submitting thread: the
         * executor's own thread, still at the idle class from the last background task,
         * would otherwise wait for a CPU that other programs keep busy before it could take
         * the task and raise itself. */
        if (!t->background && ex->in_bg)
                set_class(ex, false);
        pthread_mutex_unlock(&ex->cls_lock);
        r = axp_queue_push(&ex->tasks, &n->node);
        if (r < 0)
                free(n);
        return r;
}

void axp_executor_set_background(axp_executor *ex, axp_bg_class c) {
        pthread_mutex_lock(&ex->cls_lock);
        if (ex->in_bg)
                set_class(ex, false);
        ex->bg = c;
        pthread_mutex_unlock(&ex->cls_lock);
}

void axp_executor_hurry(axp_executor *ex) {
        pthread_mutex_lock(&ex->cls_lock);
        ex->hurried = ex->submitted;
        if (ex->in_bg)
                set_class(ex, false);
        pthread_mutex_unlock(&ex->cls_lock);
}

void axp_executor_free(axp_executor *ex) {
        if (!ex)
                return;
        axp_queue_close(&ex->tasks);
        pthread_join(ex->thread, NULL);
        assert(!ex->tasks.head); /* the thread ran every task before it stopped */
        /* the device's threads outlive the executor: leave them at normal priority */
        axp_executor_set_background(ex, AXP_BG_NONE);
        pthread_mutex_destroy(&ex->cls_lock);
        axp_queue_done(&ex->tasks);
        free(ex);
}
