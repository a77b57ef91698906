/* SPDX-License-Identifier: MIT */
/* The CPU guard: proactive work on the CPU yields to the person's own programs.
 *
 * 1. The threads that run a device's work (the executor's and the device's helpers) take
 *    the scheduling class of each task's kind, read back from /proc/self/task/TID/stat: an
 *    idle class for background tasks, normal priority for the rest, and normal at once when
 *    reactive work hurries a background task in progress. Without the class (AXP_BG_NONE)
 *    every task runs at normal priority.
 * 2. The engine with a real model: while only proactive work runs, the CPU device's threads
 *    are in the idle class; while a reactive request is in the engine, none is; with
 *    proactive_idle off, none ever is.
 * 3. In virtual time on the simulated SoC's CPU serving both roles, with the fake CPU
 *    pressure source sampled as the engine samples it: while the pressure is high proactive
 *    work keeps within proactive_cpu_share of the CPU, once it falls it takes the CPU again,
 *    a reactive request is not slowed by it, and with aging every proactive request still
 *    finishes under a pressure that never falls. With the guard off (share 1) proactive
 *    work takes the CPU whatever the pressure: the test would see the loss.
 * 1b. The executor reports the CPU time the device's threads used on a background task, per
 *    thread, for the budget to charge; nothing for other tasks, nor for a device whose work
 *    is not on the CPU.
 * 4. The scheduler marks exactly the tasks of proactive requests only, issued while no
 *    reactive request is in the engine, as background work.
 *
 * 1 and 2 need a process that may raise a thread's priority again (CAP_SYS_NICE or
 * RLIMIT_NICE >= 20); elsewhere they say so and check that nothing goes down. */
#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "devices/backend.h" /* part 1 implements a device backend of its own */
#include "devices/cpu-pressure.h"
#include "devices/executor.h"
#include "devices/thread-class.h"
#include "engine.h"
#include "kernels/types.h"
#include "mkmodel.h"
#include "sched-harness.h"
#include "test.h"

static axp_bg_class bg;
static const char *bg_why;

/* The policy and nice value of thread tid, from /proc/self/task/TID/stat. */
static bool thread_class(int tid, int *ret_policy, int *ret_nice) {
        char path[64], buf[1024];
        const char *p;
        FILE *f;
        size_t n;
        long v[40];
        int i = 0;

        snprintf(path, sizeof(path), "/proc/self/task/%d/stat", tid);
        if (!(f = fopen(path, "re")))
                return false;
        n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = 0;
        p = strrchr(buf, ')');
        if (!p)
                return false;
        p += 2; /* fields from 3 (state) on */
        for (char *end; *p && i < 40; i++) {
                if (i == 0) { /* state, a letter */
                        v[i] = *p;
                        p += 1;
                        continue;
                }
                v[i] = strtol(p, &end, 10);
                p = end;
        }
        if (i < 40)
                return false;
        *ret_nice = (int) v[19 - 3];
        *ret_policy = (int) v[41 - 3];
        return true;
}

static bool in_background(int tid) {
        int policy = -1, nice = 0;
        if (!thread_class(tid, &policy, &nice))
                return false;
        return policy == SCHED_IDLE || nice == 19;
}

/* Threads of this process in a background class now. */
static int count_background(void) {
        DIR *d = opendir("/proc/self/task");
        struct dirent *de;
        int n = 0;

        if (!d)
                return -1;
        while ((de = readdir(d)))
                if (de->d_name[0] != '.' && in_background(atoi(de->d_name)))
                        n++;
        closedir(d);
        return n;
}

/* 1. The executor ---------------------------------------------------------------------------- */

#define N_HELPERS 2

typedef struct fake {
        int helpers[N_HELPERS];
        pthread_t helper_threads[N_HELPERS];
        pthread_mutex_t lock;
        pthread_cond_t cond;
        bool stop, release;
        int started;
        /* per task: were the executor's and the helpers' threads in the background class */
        bool bg_at_start[16], bg_at_end[16], helpers_bg[16];
        int n;
        bool wait_for_release; /* the next task waits until released (to hurry it) */
        bool running;
        bool helpers_up_at_submit;
} fake;

static void *helper_main(void *arg) {
        fake *f = arg;
        pthread_mutex_lock(&f->lock);
        f->helpers[f->started++] = (int) syscall(SYS_gettid);
        pthread_cond_broadcast(&f->cond);
        while (!f->stop)
                pthread_cond_wait(&f->cond, &f->lock);
        pthread_mutex_unlock(&f->lock);
        return NULL;
}

static int fake_run(axp_device *d, const axp_task *t, axp_error *err) {
        fake *f = d->priv;
        int k = f->n;
        bool all = true;

        for (int i = 0; i < N_HELPERS; i++)
                all &= in_background(f->helpers[i]);
        f->helpers_bg[k] = all;
        f->bg_at_start[k] = in_background(0 + (int) syscall(SYS_gettid));
        pthread_mutex_lock(&f->lock);
        f->running = true;
        pthread_cond_broadcast(&f->cond);
        while (f->wait_for_release && !f->release)
                pthread_cond_wait(&f->cond, &f->lock);
        f->wait_for_release = f->release = false;
        f->running = false;
        pthread_mutex_unlock(&f->lock);
        f->bg_at_end[k] = in_background((int) syscall(SYS_gettid));
        f->n++;
        return 0;
}

static int fake_threads(axp_device *d, int *ret, int cap) {
        fake *f = d->priv;
        for (int i = 0; i < N_HELPERS && i < cap; i++)
                ret[i] = f->helpers[i];
        return N_HELPERS;
}

static const axp_device_ops fake_ops = { .backend = "fake", .run = fake_run, .threads = fake_threads };

static void run_task(axp_executor *ex, axp_mailbox *mb, bool background) {
        axp_task t = { .op = AXP_OP_K1, .background = background };
        axp_mail *m;

        CHECK(axp_executor_submit(ex, &t) == 0);
        m = axp_mailbox_wait(mb, INFINITY);
        CHECK(m && m->type == AXP_MAIL_DONE && m->rc == 0);
        free(m);
}

static void executor_run(axp_bg_class c, fake *f) {
        axp_device d = { .ops = &fake_ops, .kind = AXP_DEV_CPU, .priv = f };
        axp_mailbox *mb;
        axp_executor *ex;
        axp_error err = { 0 };

        memset(f, 0, sizeof(*f));
        f->helpers_up_at_submit = true;
        pthread_mutex_init(&f->lock, NULL);
        pthread_cond_init(&f->cond, NULL);
        for (int i = 0; i < N_HELPERS; i++)
                pthread_create(&f->helper_threads[i], NULL, helper_main, f);
        pthread_mutex_lock(&f->lock);
        while (f->started < N_HELPERS)
                pthread_cond_wait(&f->cond, &f->lock);
        pthread_mutex_unlock(&f->lock);

        CHECK(axp_mailbox_new(&mb) == 0);
        CHECK(axp_executor_new(&d, 0, mb, &ex, &err) == 0);
        axp_executor_set_background(ex, c);
        /* tasks 0..4: background, background, normal, background, normal */
        run_task(ex, mb, true);
        run_task(ex, mb, true);
        run_task(ex, mb, false);
        run_task(ex, mb, true);
        run_task(ex, mb, false);
        /* task 5: background, hurried while it runs */
        {
                axp_task t = { .op = AXP_OP_K1, .background = true };
                axp_mail *m;
                f->wait_for_release = true;
                CHECK(axp_executor_submit(ex, &t) == 0);
                pthread_mutex_lock(&f->lock);
                while (!f->running)
                        pthread_cond_wait(&f->cond, &f->lock);
                pthread_mutex_unlock(&f->lock);
                axp_executor_hurry(ex);
                pthread_mutex_lock(&f->lock);
                f->release = true;
                pthread_cond_broadcast(&f->cond);
                pthread_mutex_unlock(&f->lock);
                m = axp_mailbox_wait(mb, INFINITY);
                free(m);
        }
        /* task 6: background again after the hurry */
        run_task(ex, mb, true);
        /* tasks 7 and 8: background; 8 is queued behind 7 when the hurry comes, and runs at
         * normal priority although its executor had not started it */
        {
                axp_task t = { .op = AXP_OP_K1, .background = true };
                axp_mail *m;
                f->wait_for_release = true;
                CHECK(axp_executor_submit(ex, &t) == 0);
                pthread_mutex_lock(&f->lock);
                while (!f->running)
                        pthread_cond_wait(&f->cond, &f->lock);
                pthread_mutex_unlock(&f->lock);
                CHECK(axp_executor_submit(ex, &t) == 0);
                axp_executor_hurry(ex);
                pthread_mutex_lock(&f->lock);
                f->release = true;
                pthread_cond_broadcast(&f->cond);
                pthread_mutex_unlock(&f->lock);
                for (int i = 0; i < 2; i++) {
                        m = axp_mailbox_wait(mb, INFINITY);
                        free(m);
                }
        }
        /* task 9: background, submitted after the hurry: down again */
        run_task(ex, mb, true);
        /* task 10: normal, after a background one: the threads are up as soon as it is
         * queued, before the executor's thread wakes for it */
        {
                axp_task t = { .op = AXP_OP_K1 };
                axp_mail *m;
                f->wait_for_release = true;
                CHECK(axp_executor_submit(ex, &t) == 0);
                for (int i = 0; i < N_HELPERS; i++)
                        f->helpers_up_at_submit &= !in_background(f->helpers[i]);
                pthread_mutex_lock(&f->lock);
                f->release = true;
                pthread_cond_broadcast(&f->cond);
                pthread_mutex_unlock(&f->lock);
                m = axp_mailbox_wait(mb, INFINITY);
                free(m);
        }
        axp_executor_free(ex);
        axp_mailbox_free(mb);

        /* the executor leaves the device's threads at normal priority */
        for (int i = 0; i < N_HELPERS; i++)
                CHECK(!in_background(f->helpers[i]));
        pthread_mutex_lock(&f->lock);
        f->stop = true;
        pthread_cond_broadcast(&f->cond);
        pthread_mutex_unlock(&f->lock);
        for (int i = 0; i < N_HELPERS; i++)
                pthread_join(f->helper_threads[i], NULL);
}

static void test_executor_class(void) {
        static const bool want[11] = { true, true, false, true, false, true, true, true, false, true,
                                       false };
        fake f;

        if (bg == AXP_BG_NONE)
                printf("  no background class here (%s): every task must run at normal priority\n",
                       bg_why);
        executor_run(bg, &f);
        CHECK_EQ_INT(f.n, 11);
        for (int k = 0; k < 11; k++) {
                bool w = want[k] && bg != AXP_BG_NONE;
                CHECK_MSG(f.bg_at_start[k] == w, "task %d: executor thread %s", k,
                          f.bg_at_start[k] ? "in the background class" : "at normal priority");
                CHECK_MSG(f.helpers_bg[k] == w, "task %d: helper threads %s", k,
                          f.helpers_bg[k] ? "in the background class" : "not all in it");
        }
        /* hurried: back to normal before the task ended */
        CHECK(!f.bg_at_end[5]);
        CHECK(!f.bg_at_end[7]);
        CHECK(f.helpers_up_at_submit);

        /* without the mechanism background tasks run at normal priority */
        executor_run(AXP_BG_NONE, &f);
        for (int k = 0; k < 11; k++)
                CHECK(!f.bg_at_start[k] && !f.helpers_bg[k]);
}

/* The executor reports the CPU time the device's threads used on a task, per thread: not the
 * task's wall time, so a task other programs keep off the CPU charges the budget only what it
 * ran. */

typedef struct worker {
        int tid;
        pthread_t thread;
        pthread_mutex_t lock;
        pthread_cond_t cond;
        bool go, done, stop;
} worker;

/* Spin until this thread has used another s seconds of CPU. */
static void spin_cpu(double s) {
        double end = axp_thread_cpu_s(0) + s;
        volatile unsigned x = 1;
        while (axp_thread_cpu_s(0) < end)
                for (int i = 0; i < 10000; i++)
                        x = x * 1664525u + 1013904223u;
}

static void *worker_main(void *arg) {
        worker *w = arg;
        pthread_mutex_lock(&w->lock);
        w->tid = (int) syscall(SYS_gettid);
        pthread_cond_broadcast(&w->cond);
        for (;;) {
                while (!w->go && !w->stop)
                        pthread_cond_wait(&w->cond, &w->lock);
                if (w->stop)
                        break;
                w->go = false;
                pthread_mutex_unlock(&w->lock);
                spin_cpu(0.02);
                pthread_mutex_lock(&w->lock);
                w->done = true;
                pthread_cond_broadcast(&w->cond);
        }
        pthread_mutex_unlock(&w->lock);
        return NULL;
}

/* op K1: the executor's thread sleeps 50 ms; K2: it spins 20 ms of CPU; K3: it sleeps while
 * the helper spins 20 ms of CPU */
static int timing_run(axp_device *d, const axp_task *t, axp_error *err) {
        worker *w = d->priv;
        if (t->op == AXP_OP_K1)
                nanosleep(&(struct timespec) { .tv_nsec = 50000000 }, NULL);
        else if (t->op == AXP_OP_K2)
                spin_cpu(0.02);
        else {
                pthread_mutex_lock(&w->lock);
                w->go = true;
                w->done = false;
                pthread_cond_broadcast(&w->cond);
                while (!w->done)
                        pthread_cond_wait(&w->cond, &w->lock);
                pthread_mutex_unlock(&w->lock);
        }
        return 0;
}

static int timing_threads(axp_device *d, int *ret, int cap) {
        worker *w = d->priv;
        if (cap > 0)
                ret[0] = w->tid;
        return 1;
}

static const axp_device_ops timing_ops = { .backend = "fake", .run = timing_run,
                                           .threads = timing_threads };

static double task_busy(axp_executor *ex, axp_mailbox *mb, axp_op op, bool background) {
        axp_task t = { .op = op, .background = background };
        axp_mail *m;
        double busy;

        CHECK(axp_executor_submit(ex, &t) == 0);
        m = axp_mailbox_wait(mb, INFINITY);
        CHECK(m && m->type == AXP_MAIL_DONE && m->rc == 0);
        busy = m ? m->busy_s : -2;
        free(m);
        return busy;
}

static void test_executor_cpu_time(void) {
        worker w = { 0 };
        axp_device cpu = { .ops = &timing_ops, .kind = AXP_DEV_CPU, .priv = &w };
        axp_device gpu = { .ops = &timing_ops, .kind = AXP_DEV_IGPU, .priv = &w };
        axp_mailbox *mb;
        axp_executor *ex;
        axp_error err = { 0 };
        double b;

        pthread_mutex_init(&w.lock, NULL);
        pthread_cond_init(&w.cond, NULL);
        pthread_create(&w.thread, NULL, worker_main, &w);
        pthread_mutex_lock(&w.lock);
        while (!w.tid)
                pthread_cond_wait(&w.cond, &w.lock);
        pthread_mutex_unlock(&w.lock);

        CHECK(axp_mailbox_new(&mb) == 0);
        CHECK(axp_executor_new(&cpu, 0, mb, &ex, &err) == 0);
        /* asleep for 50 ms: hardly any CPU time */
        b = task_busy(ex, mb, AXP_OP_K1, true);
        CHECK_MSG(b >= 0 && b < 0.01, "a sleeping task was busy %.4f s", b);
        /* 20 ms of the executor's thread, over its two threads: at least 10 ms */
        b = task_busy(ex, mb, AXP_OP_K2, true);
        CHECK_MSG(b >= 0.0099 && b < 0.02, "a task spinning 20 ms on one of two threads: %.4f s", b);
        /* the helper's clock counts too */
        b = task_busy(ex, mb, AXP_OP_K3, true);
        CHECK_MSG(b >= 0.0099 && b < 0.02, "a task spinning 20 ms on the helper: %.4f s", b);
        /* work at normal priority keeps to no budget: not measured */
        CHECK(task_busy(ex, mb, AXP_OP_K2, false) == -1);
        axp_executor_free(ex);

        /* a device whose work is not on the CPU: not measured */
        CHECK(axp_executor_new(&gpu, 0, mb, &ex, &err) == 0);
        CHECK(task_busy(ex, mb, AXP_OP_K1, true) == -1);
        axp_executor_free(ex);
        axp_mailbox_free(mb);

        pthread_mutex_lock(&w.lock);
        w.stop = true;
        pthread_cond_broadcast(&w.cond);
        pthread_mutex_unlock(&w.lock);
        pthread_join(w.thread, NULL);
}

/* 2. The engine ------------------------------------------------------------------------------ */

static char model_path[256], calib_path[256];

typedef struct result {
        pthread_mutex_t lock;
        pthread_cond_t cond;
        bool done;
        int tokens;
        int bg_min, bg_max; /* threads in the background class at the token callbacks */
} result;

static void on_token(void *ud, uint64_t id, const char *text, size_t len) {
        result *r = ud;
        int n = count_background();
        pthread_mutex_lock(&r->lock);
        if (r->tokens++ == 0)
                r->bg_min = r->bg_max = n;
        r->bg_min = MIN(r->bg_min, n);
        r->bg_max = MAX(r->bg_max, n);
        pthread_mutex_unlock(&r->lock);
}

static void on_finished(void *ud, uint64_t id, axp_finish_reason reason, const axp_req_stats *st) {
        result *r = ud;
        pthread_mutex_lock(&r->lock);
        r->done = true;
        pthread_cond_broadcast(&r->cond);
        pthread_mutex_unlock(&r->lock);
}

static void result_init(result *r) {
        memset(r, 0, sizeof(*r));
        pthread_mutex_init(&r->lock, NULL);
        pthread_cond_init(&r->cond, NULL);
}

static void result_wait(result *r) {
        pthread_mutex_lock(&r->lock);
        while (!r->done)
                pthread_cond_wait(&r->cond, &r->lock);
        pthread_mutex_unlock(&r->lock);
}

static void submit(axp_engine *e, axp_kind kind, const char *prompt, int max_tokens, result *r) {
        axp_request_opts o;
        axp_request_cbs cbs = { .token = on_token, .finished = on_finished, .userdata = r };
        axp_error err = { 0 };

        axp_request_opts_default(&o);
        o.sampling.temperature = 0;
        o.raw = true;
        o.max_tokens = max_tokens;
        result_init(r);
        CHECK_MSG(axp_engine_submit(e, kind, prompt, &o, &cbs, NULL, &err) == 0, "%s", err.msg);
}

static axp_engine *engine_with(bool idle) {
        axp_engine_config c;
        axp_engine *e = NULL;
        axp_error err = { 0 };

        axp_engine_config_default(&c);
        c.model_path = model_path;
        c.n_threads = 2;
        c.calib_cache = calib_path;
        c.proactive_idle = idle;
        if (axp_engine_new(&c, &e, &err) < 0)
                fprintf(stderr, "engine: %s\n", err.msg);
        return e;
}

static void test_engine_threads(void) {
        axp_engine_cpu_guard g;
        result p, r, p2;
        axp_engine *e = engine_with(true);
        const int n_threads = 2; /* the CPU device's: its executor and one pool worker */

        CHECK(e != NULL);
        if (!e)
                return;
        axp_engine_cpu_guard_get(e, &g);
        CHECK(strcmp(g.priority, bg == AXP_BG_NONE ? "normal" : axp_bg_class_name(bg)) == 0);

        /* proactive alone: its steps are background work */
        submit(e, AXP_PROACTIVE, "the proactive request runs alone in the engine", 12, &p);
        result_wait(&p);
        CHECK(p.tokens > 0);
        printf("  proactive alone: %d to %d threads in the background class at its tokens\n",
               p.bg_min, p.bg_max);
        CHECK_EQ_INT(p.bg_min, bg == AXP_BG_NONE ? 0 : n_threads);
        CHECK_EQ_INT(p.bg_max, bg == AXP_BG_NONE ? 0 : n_threads);

        /* reactive alone, and reactive arriving while proactive work runs: normal priority */
        submit(e, AXP_REACTIVE, "the reactive request", 8, &r);
        result_wait(&r);
        CHECK(r.tokens > 0);
        CHECK_EQ_INT(r.bg_max, 0);
        submit(e, AXP_PROACTIVE, "a long proactive request that is still running when the "
                                 "reactive one comes in, word word word word word word", 60, &p2);
        usleep(20000);
        submit(e, AXP_REACTIVE, "the reactive request again", 8, &r);
        result_wait(&r);
        result_wait(&p2);
        CHECK(r.tokens > 0);
        printf("  reactive beside proactive work: at most %d threads in the background class at "
               "its tokens\n", r.bg_max);
        CHECK_EQ_INT(r.bg_max, 0);
        axp_engine_free(e);
        CHECK_EQ_INT(count_background(), 0);

        /* without the mechanism */
        e = engine_with(false);
        CHECK(e != NULL);
        if (!e)
                return;
        axp_engine_cpu_guard_get(e, &g);
        CHECK(strcmp(g.priority, "normal") == 0);
        submit(e, AXP_PROACTIVE, "the proactive request runs alone in the engine", 12, &p);
        result_wait(&p);
        CHECK(p.tokens > 0);
        CHECK_EQ_INT(p.bg_max, 0);
        axp_engine_free(e);
}

/* 3. The guard in virtual time --------------------------------------------------------------- */

#define SAMPLE_S 0.5
#define WIN_S    10.0
#define N_WIN    40

static harness h;
static char pressure_file[256];

typedef struct sampler {
        axp_cpu_pressure *p;
        double until;
        int samples;
} sampler;

/* What the engine does on its timer: sample the pressure, hand it to the scheduler. */
static void sample(void *ud) {
        sampler *s = ud;
        double f;
        if (axp_cpu_pressure_sample(s->p, axp_sim_now(h.sim), &f) == 0) {
                axp_sched_set_cpu_pressure(h.sched, f);
                s->samples++;
        }
        if (axp_sim_now(h.sim) + SAMPLE_S < s->until)
                axp_sim_at(h.sim, axp_sim_now(h.sim) + SAMPLE_S, sample, s);
}

static void set_pressure(const char *v) {
        FILE *f = fopen(pressure_file, "w");
        if (f) {
                fputs(v, f);
                fclose(f);
        }
}

static void pressure_falls(void *ud) {
        set_pressure("0.0\n");
}

typedef struct guard_run {
        double share[N_WIN]; /* proactive busy share of the CPU per window */
        double reactive_latency, reactive_wait;
        bool all_done;
        double t_all_done;
} guard_run;

/* 12 proactive requests from t = 0 and a reactive one at t = 30 on the CPU serving both
 * roles; the desktop keeps the CPU under `pressure` until falls_at (if > 0). */
static void guard(double cpu_share, const char *pressure, double falls_at, double aging,
                  guard_run *ret) {
        axp_sched_config cfg;
        axp_error err = { 0 };
        sampler s = { .until = N_WIN * WIN_S };
        double prev = 0;

        set_pressure(pressure);
        axp_sched_config_default(&cfg);
        cfg.proactive_cpu_share = cpu_share;
        cfg.aging_s = aging;
        CHECK(h_init_roles(&h, "llama-3b", &cfg, AXP_DEV_CPU) == 0);
        CHECK(axp_cpu_pressure_open("auto", &s.p, &err) == 0);
        CHECK(strcmp(axp_cpu_pressure_source(s.p), "fake") == 0);
        axp_sim_at(h.sim, 0, sample, &s);
        if (falls_at > 0)
                axp_sim_at(h.sim, falls_at, pressure_falls, NULL);
        for (int i = 0; i < 12; i++)
                h_add(&h, 0.0, AXP_PROACTIVE, 300, 120);
        h_req *r = h_add(&h, 30.0, AXP_REACTIVE, 400, 40);

        memset(ret, 0, sizeof(*ret));
        for (int k = 0; k < N_WIN; k++) {
                axp_sched_dev_stats st;
                bool all = true;
                h_run(&h, (k + 1) * WIN_S);
                axp_sched_device_stats(h.sched, h_dynamic_dev(&h), &st);
                ret->share[k] = (st.busy_proactive_s - prev) / WIN_S;
                prev = st.busy_proactive_s;
                for (int i = 0; i < h.n; i++)
                        all &= h.reqs[i].done;
                if (all && !ret->all_done) {
                        ret->all_done = true;
                        ret->t_all_done = (k + 1) * WIN_S;
                }
        }
        CHECK(r->done);
        ret->reactive_latency = r->st.latency_s;
        ret->reactive_wait = r->st.queue_wait_s;
        CHECK(s.samples > 100);
        axp_cpu_pressure_free(s.p);
        h_free(&h);
}

static void test_guard_virtual_time(void) {
        const double share = 0.25;
        /* per window: the burst the bucket holds (2 s of refill) and one kernel beyond it */
        const double slack = (share * 2.0 + 0.2) / WIN_S;
        guard_run busy, idle, off;
        double worst_busy = 0, best_after = 0, best_idle = 0, worst_off = 0;

        guard(share, "1.0\n", 100, 0, &busy); /* high until t = 100 s, then none */
        guard(share, "0.0\n", 0, 0, &idle);
        guard(1.0, "1.0\n", 100, 0, &off);    /* the guard switched off */
        for (int k = 0; k < 10; k++) {        /* windows inside [0, 100 s) */
                worst_busy = fmax(worst_busy, busy.share[k]);
                worst_off = fmax(worst_off, off.share[k]);
        }
        for (int k = 11; k < N_WIN; k++)
                best_after = fmax(best_after, busy.share[k]);
        for (int k = 0; k < 10; k++)
                best_idle = fmax(best_idle, idle.share[k]);
        printf("  proactive share of the CPU per %.0f s: at most %.3f under pressure (share %.2f), "
               "up to %.3f once it falls, up to %.3f without pressure, up to %.3f under pressure "
               "with the guard off\n",
               WIN_S, worst_busy, share, best_after, best_idle, worst_off);
        printf("  reactive request: latency %.3f s (waited %.4f s) under pressure, %.3f s without\n",
               busy.reactive_latency, busy.reactive_wait, idle.reactive_latency);

        CHECK_MSG(worst_busy <= share + slack, "%.3f > %.3f", worst_busy, share + slack);
        CHECK_MSG(worst_busy >= share * 0.5, "the share should still be used: %.3f", worst_busy);
        CHECK_MSG(best_after > share + slack, "no recovery after the pressure fell: %.3f", best_after);
        CHECK_MSG(best_idle > share + slack, "%.3f", best_idle);
        /* without the guard the pressure changes nothing: the test would see the loss */
        CHECK_MSG(worst_off > share + slack, "guard off: %.3f", worst_off);
        /* reactive work is never held back: it waits no longer than a kernel and is no slower
         * than without pressure */
        CHECK_MSG(busy.reactive_wait <= 0.1 + 1e-9, "%.4f", busy.reactive_wait);
        CHECK_MSG(busy.reactive_latency <= idle.reactive_latency * 1.02, "%.3f > %.3f",
                  busy.reactive_latency, idle.reactive_latency);
}

/* Aging still guarantees that proactive work finishes when the pressure never falls. */
static void test_guard_aging(void) {
        guard_run run;
        guard(0.25, "1.0\n", 0, 30, &run);
        printf("  under a pressure that never falls every request finished by %.0f s\n",
               run.t_all_done);
        CHECK(run.all_done);
}

/* 4. Which tasks are background work --------------------------------------------------------- */

/* On the CPU serving both roles, and on the SoC's NPU and iGPU, where proactive chunks run
 * on the one while a reactive request decodes on the other. */
static void test_background_marks(void) {
        for (int shared = 1; shared >= 0; shared--) {
                axp_sched_config cfg;
                int bg_tasks = 0, wrong = 0, proactive_beside = 0;

                axp_sched_config_default(&cfg);
                CHECK(h_init_roles(&h, "llama-3b", &cfg, shared ? AXP_DEV_CPU : -1) == 0);
                for (int i = 0; i < 4; i++)
                        h_add(&h, 0.0, AXP_PROACTIVE, 2000, 60);
                h_req *r = h_add(&h, 5.0, AXP_REACTIVE, 300, 300);
                h_run(&h, INFINITY);
                CHECK(r->done);
                for (int i = 0; i < h.n_tasks; i++) {
                        const h_task *k = &h.tasks[i];
                        /* the reactive request is in the engine from its arrival to its end */
                        bool reactive_in = k->t >= r->t && k->t < r->t_done;
                        bool want = k->proactive_only && !reactive_in;
                        bg_tasks += k->background;
                        wrong += k->background != want;
                        proactive_beside += k->proactive_only && reactive_in;
                }
                printf("  %s: %d of %d tasks marked background, %d tasks of proactive requests only ran "
                       "while the reactive one was in the engine\n",
                       shared ? "CPU for both roles" : "NPU and iGPU", bg_tasks, h.n_tasks,
                       proactive_beside);
                CHECK(bg_tasks > 0 && bg_tasks < h.n_tasks);
                CHECK(shared || proactive_beside > 0);
                CHECK_EQ_INT(wrong, 0);
                h_free(&h);
        }
}

int main(void) {
        char dir[] = "/tmp/axp-test-cpu-guard-XXXXXX";
        axp_mkmodel_params mp;
        axp_error err = { 0 };

        if (!mkdtemp(dir))
                TEST_SKIP("cannot make a temporary folder");
        snprintf(pressure_file, sizeof(pressure_file), "%s/cpu-pressure", dir);
        setenv("AXP_CPU_PRESSURE_FILE", pressure_file, 1);
        bg = axp_bg_class_probe(&bg_why);
        printf("  background class: %s%s%s\n", axp_bg_class_name(bg), bg_why[0] ? ": " : "", bg_why);

        RUN(test_background_marks);
        RUN(test_guard_virtual_time);
        RUN(test_guard_aging);
        RUN(test_executor_class);
        RUN(test_executor_cpu_time);

        snprintf(model_path, sizeof(model_path), "%s/model.gguf", dir);
        snprintf(calib_path, sizeof(calib_path), "%s/calib", dir);
        axp_mkmodel_defaults(&mp);
        mp.type = AXP_TYPE_Q8_0;
        mp.n_ctx = 1024;
        mp.seed = 5;
        mp.path = model_path;
        if (axp_mkmodel(&mp, &err) < 0) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
        }
        set_pressure("0\n");
        RUN(test_engine_threads);
        unlink(model_path);
        unlink(calib_path);
        unlink(pressure_file);
        rmdir(dir);
        TEST_EXIT();
}
