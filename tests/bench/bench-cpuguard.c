/* SPDX-License-Identifier: MIT */
/* The CPU guard on the wall clock: a foreground program beside the engine under a
 * saturating proactive load. Not a test: it prints what it measured.
 *
 * The foreground is a process of its own (forked before the engine starts) with two
 * threads: one busy thread counting iterations (its rate is the foreground's work rate) and
 * one rendering-like loop that shades a 1280x720 frame buffer once per 16.7 ms frame (60 Hz)
 * and misses a frame when the shading ends after the frame's deadline; the shading work per
 * frame is calibrated at start to a fifth of the budget.
 *
 * Conditions, each for the same time:
 *   alone        the foreground without the engine
 *   guard off    the engine at normal priority, no pressure guard (the engine before the
 *                guard: ProactiveIdleClass=no, ProactiveCpuShare=1)
 *   idle class   proactive steps at the idle class, no pressure guard
 *   pressure     the pressure guard at normal priority: what the guard does where the
 *                idle class cannot reach (the foreground in another cgroup: the kernel
 *                shares the CPU between cgroups by weight, whatever the class inside)
 *   guard on     both (the defaults, or --share)
 * then the engine alone, without the foreground: guard off, guard on, and guard on with the
 * pressure read as 0 (AXP_CPU_PRESSURE=0) as on an idle desktop, where a machine shared with
 * other work cannot be idle. Every condition runs once per round (--rounds, default 3), in
 * turn, and the table gives medians (and the range) over the rounds.
 *
 * The engine keeps --in-flight proactive requests (default 4) of about 300 prompt tokens and
 * 64 generated tokens running all the time. Proactive throughput counts prompt tokens of
 * requests whose first token came and generated tokens, per second.
 *
 *   bench-cpuguard [--seconds S] [--rounds R] [--share X] [--in-flight N] [--model FILE]
 *                  [--only KEY,...]   (alone off idle pressure on engine-off engine-on
 *                                      engine-quiet: the conditions to run)
 *
 * Where the time went, per condition: the late frames' wait for a CPU (the kernel's run-queue
 * wait, /proc/thread-self/schedstat) and their shading CPU time, every frame's shading CPU
 * time (against alone: what shared caches and memory bandwidth cost), and the engine's CPU
 * use by the class its threads were in when sampled every 0.1 s (what of it runs at normal
 * priority beside the foreground).
 *
 * Synthetic 1024-dim, 8-layer Q8_0 model unless --model. The pressure source is the
 * machine's own (AXP_CPU_PRESSURE_SOURCE and the fake variables of
 * engine/devices/cpu-pressure.h apply). */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sched.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine.h"
#include "kernels/types.h"
#include "mkmodel.h"
#include "model/model.h"
#include "model/tokenizer.h"

#define FRAME_NS 16666667L
#define MAX_ROUNDS 16
#define FB_W 1280
#define FB_H 720

static double now_s(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The foreground ------------------------------------------------------------------------------ */

typedef struct fg_result {
        double busy_rate;      /* iterations per second of the busy thread */
        long frames, missed;   /* frames due, frames whose shading ended after their deadline */
        double frame_work_ms;  /* mean time the shading of a frame took */
        double frame_work_p99;
        /* where the late frames' time went, summed over them: waiting for a CPU (the
         * kernel's run-queue wait from the frame's wake-up to its end), and the CPU time of
         * their shading */
        long late;
        double late_wait_ms, late_cpu_ms;
        double cpu_ms; /* mean CPU time of a frame's shading, all frames */
} fg_result;

/* This thread's run-queue wait so far, in ms (/proc/thread-self/schedstat); 0 without it. */
static double rq_wait_ms(void) {
        unsigned long long run, wait;
        FILE *f = fopen("/proc/thread-self/schedstat", "re");
        int n = f ? fscanf(f, "%llu %llu", &run, &wait) : 0;
        if (f)
                fclose(f);
        return n == 2 ? wait * 1e-6 : 0;
}

static double thread_cpu_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static uint32_t *fb;
static int shade_passes = 1; /* calibrated */
static atomic_bool fg_stop;

/* One frame's shading: a per-pixel function of position and frame number, written out. */
static void shade(long frame) {
        for (int p = 0; p < shade_passes; p++)
                for (int y = 0; y < FB_H; y++) {
                        uint32_t *row = fb + (size_t) y * FB_W;
                        float fy = (float) y / FB_H;
                        for (int x = 0; x < FB_W; x++) {
                                float fx = (float) x / FB_W;
                                float v = fx * fx + fy * (1.0f - fx) + (float) (frame & 255) / 255.0f;
                                uint32_t c = (uint32_t) (v * 85.0f) & 255;
                                row[x] = c | c << 8 | (c ^ (uint32_t) p) << 16 | 0xff000000u;
                        }
                }
}

static void *busy_main(void *arg) {
        uint64_t n = 0, x = 1;
        double t0 = now_s();
        while (!atomic_load_explicit(&fg_stop, memory_order_relaxed)) {
                for (int i = 0; i < 100000; i++)
                        x = x * 6364136223846793005ull + 1442695040888963407ull;
                n += 100000;
        }
        double rate = n / (now_s() - t0);
        ((fg_result *) arg)->busy_rate = rate + (double) (x & 1) * 1e-12; /* keep x */
        return NULL;
}

static int cmp_double(const void *a, const void *b) {
        double x = *(const double *) a, y = *(const double *) b;
        return x < y ? -1 : x > y;
}

static double median(const double *v, int n) {
        double c[MAX_ROUNDS];
        memcpy(c, v, sizeof(double) * n);
        qsort(c, n, sizeof(double), cmp_double);
        return n % 2 ? c[n / 2] : (c[n / 2 - 1] + c[n / 2]) / 2;
}

static double minimum(const double *v, int n) {
        double m = v[0];
        for (int i = 1; i < n; i++)
                m = fmin(m, v[i]);
        return m;
}

static double maximum(const double *v, int n) {
        double m = v[0];
        for (int i = 1; i < n; i++)
                m = fmax(m, v[i]);
        return m;
}

static void *render_main(void *arg) {
        fg_result *r = arg;
        struct timespec next;
        double *works = malloc(sizeof(double) * 100000);
        long n = 0;
        double cpu_sum = 0, wait0 = rq_wait_ms();

        clock_gettime(CLOCK_MONOTONIC, &next);
        while (!atomic_load_explicit(&fg_stop, memory_order_relaxed)) {
                struct timespec deadline = next, end;
                double t0 = now_s(), c0 = thread_cpu_ms(), wait1;
                deadline.tv_nsec += FRAME_NS;
                if (deadline.tv_nsec >= 1000000000L) {
                        deadline.tv_sec++;
                        deadline.tv_nsec -= 1000000000L;
                }
                shade(r->frames);
                clock_gettime(CLOCK_MONOTONIC, &end);
                double c = thread_cpu_ms() - c0;
                wait1 = rq_wait_ms();
                cpu_sum += c;
                if (works && n < 100000)
                        works[n++] = (now_s() - t0) * 1e3;
                r->frames++;
                if (end.tv_sec > deadline.tv_sec ||
                    (end.tv_sec == deadline.tv_sec && end.tv_nsec > deadline.tv_nsec)) {
                        /* late: this frame is missed, and so is every deadline passed since */
                        r->late++;
                        r->late_wait_ms += wait1 - wait0;
                        r->late_cpu_ms += c;
                        r->missed++;
                        while (end.tv_sec > deadline.tv_sec ||
                               (end.tv_sec == deadline.tv_sec && end.tv_nsec > deadline.tv_nsec)) {
                                deadline.tv_nsec += FRAME_NS;
                                if (deadline.tv_nsec >= 1000000000L) {
                                        deadline.tv_sec++;
                                        deadline.tv_nsec -= 1000000000L;
                                }
                                r->frames++;
                                r->missed++;
                        }
                        r->frames--, r->missed--; /* the frame that starts now is not due yet */
                }
                next = deadline;
                wait0 = wait1; /* the wake-up's wait counts to the next frame */
                clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
        }
        if (n > 0) {
                double sum = 0;
                r->cpu_ms = cpu_sum / n;
                for (long i = 0; i < n; i++)
                        sum += works[i];
                r->frame_work_ms = sum / n;
                qsort(works, n, sizeof(double), cmp_double);
                r->frame_work_p99 = works[(long) (0.99 * (n - 1))];
        }
        free(works);
        return NULL;
}

static void foreground_run(double seconds, fg_result *r) {
        pthread_t b, g;
        fg_result busy = { 0 };

        memset(r, 0, sizeof(*r));
        atomic_store(&fg_stop, false);
        pthread_create(&b, NULL, busy_main, &busy);
        pthread_create(&g, NULL, render_main, r);
        nanosleep(&(struct timespec) { .tv_sec = (time_t) seconds,
                                       .tv_nsec = (long) ((seconds - (time_t) seconds) * 1e9) },
                  NULL);
        atomic_store(&fg_stop, true);
        pthread_join(b, NULL);
        pthread_join(g, NULL);
        r->busy_rate = busy.busy_rate;
}

/* Shading passes whose frame takes about a fifth of the budget here, now: the median of a
 * few tries, before anything else runs. */
static void calibrate(void) {
        double t[7];
        for (int i = 0; i < 7; i++) {
                double t0 = now_s();
                shade(i);
                t[i] = now_s() - t0;
        }
        qsort(t, 7, sizeof(double), cmp_double);
        shade_passes = (int) fmax(1, round(FRAME_NS * 1e-9 / 5 / t[3]));
}

/* The child: runs the foreground for the seconds the parent writes, answers with results. */
static void foreground_serve(int in, int out) {
        double seconds;
        fg_result r;
        while (read(in, &seconds, sizeof(seconds)) == sizeof(seconds) && seconds > 0) {
                foreground_run(seconds, &r);
                if (write(out, &r, sizeof(r)) != sizeof(r))
                        break;
        }
        _exit(0);
}

typedef struct foreground {
        pid_t pid;
        int to, from;
} foreground;

static int foreground_start(foreground *f) {
        int a[2], b[2];
        if (pipe(a) < 0 || pipe(b) < 0)
                return -errno;
        f->pid = fork();
        if (f->pid < 0)
                return -errno;
        if (f->pid == 0) {
                close(a[1]);
                close(b[0]);
                foreground_serve(a[0], b[1]);
        }
        close(a[0]);
        close(b[1]);
        f->to = a[1];
        f->from = b[0];
        return 0;
}

static int foreground_measure(foreground *f, double seconds, fg_result *r) {
        if (write(f->to, &seconds, sizeof(seconds)) != sizeof(seconds))
                return -EIO;
        return read(f->from, r, sizeof(*r)) == sizeof(*r) ? 0 : -EIO;
}

/* The engine's load ---------------------------------------------------------------------------- */

typedef struct load load;

typedef struct slot {
        load *l;
        bool first_token;
        bool free; /* finished: waits to be refilled */
} slot;

struct load {
        axp_engine *e;
        const char *prompt;
        int prompt_tokens;
        int n_slots;
        slot slots[16];
        pthread_mutex_t lock;
        pthread_cond_t cond;
        int finished_pending; /* slots whose request finished and wait to be refilled */
        bool counting, stopping;
        double tokens;        /* counted while counting */
        long completed;
        _Atomic int refill_tid;
};

/* The engine's threads' CPU time, by the class each is in when sampled: what of the engine
 * runs at normal priority beside the foreground, and what at the idle class. */
#define MAX_TASKS 256
typedef struct thread_cpu {
        int n, tid[MAX_TASKS];
        double ns[MAX_TASKS];
        double normal_s, idle_s; /* CPU seconds since the first sample */
        int skip[2];             /* the bench's own threads: its main and refill threads */
} thread_cpu;

static void thread_cpu_sample(thread_cpu *t) {
        DIR *d = opendir("/proc/self/task");
        struct dirent *de;
        if (!d)
                return;
        while ((de = readdir(d))) {
                char path[64];
                unsigned long long run;
                int tid = atoi(de->d_name), k;
                FILE *f;
                if (tid <= 0 || tid == t->skip[0] || tid == t->skip[1])
                        continue;
                snprintf(path, sizeof(path), "/proc/self/task/%d/schedstat", tid);
                if (!(f = fopen(path, "re")))
                        continue;
                k = fscanf(f, "%llu", &run);
                fclose(f);
                if (k != 1)
                        continue;
                for (k = 0; k < t->n && t->tid[k] != tid; k++)
                        ;
                if (k == t->n) {
                        if (t->n == MAX_TASKS)
                                continue;
                        t->tid[t->n++] = tid;
                        t->ns[k] = (double) run;
                        continue;
                }
                double dt = ((double) run - t->ns[k]) * 1e-9;
                t->ns[k] = (double) run;
                int policy = sched_getscheduler(tid);
                errno = 0;
                int nice = getpriority(PRIO_PROCESS, (id_t) tid);
                if (policy == SCHED_IDLE || (errno == 0 && nice >= 19))
                        t->idle_s += dt;
                else
                        t->normal_s += dt;
        }
        closedir(d);
}

static void on_token(void *ud, uint64_t id, const char *text, size_t len) {
        slot *s = ud;
        load *l = s->l;
        pthread_mutex_lock(&l->lock);
        if (l->counting) {
                l->tokens += 1;
                if (!s->first_token)
                        l->tokens += l->prompt_tokens;
        }
        s->first_token = true;
        pthread_mutex_unlock(&l->lock);
}

static void on_finished(void *ud, uint64_t id, axp_finish_reason reason, const axp_req_stats *st) {
        slot *s = ud;
        load *l = s->l;
        pthread_mutex_lock(&l->lock);
        if (l->counting && reason != AXP_FINISH_CANCELLED)
                l->completed++;
        l->finished_pending++;
        s->first_token = false;
        s->free = true;
        pthread_cond_broadcast(&l->cond);
        pthread_mutex_unlock(&l->lock);
}

static int load_submit(load *l, slot *s) {
        axp_request_opts o;
        axp_request_cbs cb = { .token = on_token, .finished = on_finished, .userdata = s };
        axp_error err = { 0 };

        axp_request_opts_default(&o);
        o.sampling.temperature = 0;
        o.max_tokens = 64;
        o.raw = true;
        if (axp_engine_submit(l->e, AXP_PROACTIVE, l->prompt, &o, &cb, NULL, &err) < 0) {
                fprintf(stderr, "submit: %s\n", err.msg);
                return -1;
        }
        return 0;
}

/* Keeps every slot busy until stopping. */
static void *refill_main(void *arg) {
        load *l = arg;
        atomic_store(&l->refill_tid, (int) syscall(SYS_gettid));
        pthread_mutex_lock(&l->lock);
        while (!l->stopping) {
                while (!l->stopping && l->finished_pending == 0)
                        pthread_cond_wait(&l->cond, &l->lock);
                for (int i = 0; i < l->n_slots && !l->stopping; i++) {
                        slot *s = &l->slots[i];
                        if (!s->free)
                                continue;
                        s->free = false;
                        l->finished_pending--;
                        pthread_mutex_unlock(&l->lock);
                        (void) load_submit(l, s);
                        pthread_mutex_lock(&l->lock);
                }
        }
        pthread_mutex_unlock(&l->lock);
        return NULL;
}

typedef struct outcome {
        const char *name;
        bool fg, engine;
        fg_result f;
        double tokens_per_s, req_per_min, pressure, share;
        double eng_normal, eng_idle; /* the engine's CPU use at normal priority and at the idle
                                      * class, in CPUs (CPU seconds per second) */
        const char *priority, *source;
} outcome;

static int engine_run(const char *model, const char *calib, const char *prompt, int prompt_tokens,
                      int n_slots, bool idle, double share, foreground *fg, double seconds,
                      outcome *o) {
        axp_engine_config c;
        axp_engine_cpu_guard g;
        load l = { .prompt = prompt, .prompt_tokens = prompt_tokens, .n_slots = n_slots };
        axp_error err = { 0 };
        pthread_t refill;
        double p_sum = 0, s_sum = 0, t0;
        int n_samples = 0;

        axp_engine_config_default(&c);
        c.model_path = model;
        c.calib_cache = calib;
        c.n_ctx = 1024;
        c.proactive_idle = idle;
        c.proactive_cpu_share = share;
        if (axp_engine_new(&c, &l.e, &err) < 0) {
                fprintf(stderr, "%s\n", err.msg);
                return -1;
        }
        pthread_mutex_init(&l.lock, NULL);
        pthread_cond_init(&l.cond, NULL);
        for (int i = 0; i < n_slots; i++) {
                l.slots[i] = (slot) { .l = &l };
                if (load_submit(&l, &l.slots[i]) < 0)
                        return -1;
        }
        pthread_create(&refill, NULL, refill_main, &l);
        /* settle: the first requests prefill, the guard takes its first samples */
        sleep(3);
        thread_cpu tc = { .skip = { getpid(), atomic_load(&l.refill_tid) } };
        thread_cpu_sample(&tc);
        pthread_mutex_lock(&l.lock);
        l.counting = true;
        pthread_mutex_unlock(&l.lock);
        t0 = now_s();
        if (fg) {
                /* the parent samples the guard while the child runs the foreground */
                if (write(fg->to, &seconds, sizeof(seconds)) != sizeof(seconds))
                        return -1;
        }
        for (int tick = 1; now_s() - t0 < seconds; tick++) {
                usleep(100000);
                thread_cpu_sample(&tc);
                if (tick % 5)
                        continue;
                axp_engine_cpu_guard_get(l.e, &g);
                p_sum += g.pressure;
                s_sum += g.proactive_share;
                n_samples++;
        }
        if (fg && read(fg->from, &o->f, sizeof(o->f)) != sizeof(o->f))
                return -1;
        pthread_mutex_lock(&l.lock);
        double dt = now_s() - t0;
        l.counting = false;
        o->tokens_per_s = l.tokens / dt;
        o->eng_normal = tc.normal_s / dt;
        o->eng_idle = tc.idle_s / dt;
        o->req_per_min = l.completed / dt * 60;
        l.stopping = true;
        pthread_cond_broadcast(&l.cond);
        pthread_mutex_unlock(&l.lock);
        pthread_join(refill, NULL);
        axp_engine_cpu_guard_get(l.e, &g);
        o->priority = g.priority;
        o->source = g.pressure_source;
        o->pressure = n_samples ? p_sum / n_samples : 0;
        o->share = n_samples ? s_sum / n_samples : 1;
        axp_engine_free(l.e);
        return 0;
}

int main(int argc, char **argv) {
        static const struct option opts[] = {
                { "seconds", required_argument, NULL, 's' },
                { "share", required_argument, NULL, 'x' },
                { "in-flight", required_argument, NULL, 'n' },
                { "rounds", required_argument, NULL, 'r' },
                { "only", required_argument, NULL, 'o' },
                { "model", required_argument, NULL, 'm' },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        char dir[] = "/tmp/axp-bench-cpuguard-XXXXXX", path[256] = "", calib[256], prompt[4096];
        const char *words[] = { "files ", "change ", "while ", "the ", "user ", "reads ", "mail ",
                                "and ", "notes ", "pile ", "up " };
        const char *model = NULL, *only = NULL;
        double seconds = 20, share;
        int n_slots = 4, c, prompt_tokens = 0, rounds = 3;
        size_t len = 0;
        axp_engine_config defaults;
        foreground fg;

        axp_engine_config_default(&defaults);
        share = defaults.proactive_cpu_share;
        while ((c = getopt_long(argc, argv, "", opts, NULL)) >= 0)
                switch (c) {
                case 's':
                        seconds = atof(optarg);
                        break;
                case 'x':
                        share = atof(optarg);
                        break;
                case 'n':
                        n_slots = atoi(optarg);
                        break;
                case 'm':
                        model = optarg;
                        break;
                case 'r':
                        rounds = atoi(optarg);
                        break;
                case 'o':
                        only = optarg;
                        break;
                default:
                        fprintf(stderr, "usage: bench-cpuguard [--seconds S] [--rounds R] [--share X] "
                                        "[--in-flight N] [--model FILE] [--only alone,off,idle,"
                                        "pressure,on,engine-off,engine-on,engine-quiet]\n");
                        return c == 'h' ? 0 : 2;
                }
        if (!(seconds > 0) || !(share > 0 && share <= 1) || n_slots < 1 || n_slots > 16 ||
            rounds < 1 || rounds > MAX_ROUNDS) {
                fprintf(stderr, "bench-cpuguard: a setting is out of range\n");
                return 2;
        }

        /* the foreground first, before any thread of ours exists */
        fb = calloc((size_t) FB_W * FB_H, sizeof(uint32_t));
        if (!fb)
                return 1;
        calibrate();
        if (foreground_start(&fg) < 0)
                return 1;

        if (!mkdtemp(dir))
                return 77;
        snprintf(calib, sizeof(calib), "%s/calib", dir);
        if (!model) {
                axp_mkmodel_params mp;
                axp_error err = { 0 };
                snprintf(path, sizeof(path), "%s/model.gguf", dir);
                axp_mkmodel_defaults(&mp);
                mp.n_embd = 1024;
                mp.n_ff = 3072;
                mp.n_layer = 8;
                mp.n_head = 16;
                mp.n_head_kv = 8;
                mp.n_ctx = 2048;
                mp.no_eog = true; /* every answer runs to its token limit */
                mp.path = path;
                if (axp_mkmodel(&mp, &err) < 0) {
                        fprintf(stderr, "%s\n", err.msg);
                        return 1;
                }
                model = path;
        }
        for (int i = 0; len + 16 < sizeof(prompt) && i < 120; i++) {
                const char *w = words[(i * 7) % 11];
                memcpy(prompt + len, w, strlen(w));
                len += strlen(w);
        }
        prompt[len] = 0;
        {
                axp_model *m = NULL;
                axp_error err = { 0 };
                int32_t *toks = NULL;
                if (axp_model_load(model, &m, &err) < 0 ||
                    axp_tokenize(m->tok, prompt, strlen(prompt), AXP_TOK_PARSE_SPECIAL | AXP_TOK_ADD_BOS,
                                 &toks, &prompt_tokens, &err) < 0) {
                        fprintf(stderr, "%s\n", err.msg);
                        return 1;
                }
                free(toks);
                axp_model_free(m);
        }

        printf("foreground: one busy thread, and a 60 Hz loop shading a %dx%d frame in %d pass%s "
               "(a fifth of the frame budget alone); %.0f s per condition; engine: %d proactive "
               "requests in flight (%d prompt and 64 generated tokens each), CPU guard share "
               "%.2f\n\n",
               FB_W, FB_H, shade_passes, shade_passes == 1 ? "" : "es", seconds, n_slots,
               prompt_tokens, share);
        fflush(stdout);

        struct {
                const char *key, *name;
                bool fg, engine, idle, quiet;
                double share;
        } conds[] = {
                { "alone", "alone", true, false, false, false, 1.0 },
                { "off", "guard off", true, true, false, false, 1.0 },
                { "idle", "idle class only", true, true, true, false, 1.0 },
                { "pressure", "pressure guard only", true, true, false, false, share },
                { "on", "guard on", true, true, true, false, share },
                { "engine-off", "engine alone, guard off", false, true, false, false, 1.0 },
                { "engine-on", "engine alone, guard on", false, true, true, false, share },
                { "engine-quiet", "engine alone, guard on, pressure read as 0", false, true, true,
                  true, share },
        };
        enum { N_COND = sizeof(conds) / sizeof(conds[0]) };
        outcome o[N_COND][MAX_ROUNDS];
        bool run[N_COND];

        for (int i = 0; i < N_COND; i++) {
                char list[256];
                snprintf(list, sizeof(list), ",%s,", only ? only : "");
                char key[32];
                snprintf(key, sizeof(key), ",%s,", conds[i].key);
                run[i] = !only || strstr(list, key);
        }
        for (int i = 1; i < N_COND; i++)
                if (run[i] && conds[i].fg)
                        run[0] = true; /* the foreground's figures are ratios to alone */

        /* rounds of every condition in turn, so that the machine's own load falls on all */
        for (int k = 0; k < rounds; k++)
                for (int i = 0; i < N_COND; i++) {
                        outcome *x = &o[i][k];
                        *x = (outcome) { .name = conds[i].name, .fg = conds[i].fg,
                                         .engine = conds[i].engine };
                        if (!run[i])
                                continue;
                        if (!conds[i].engine) {
                                if (foreground_measure(&fg, seconds, &x->f) < 0)
                                        return 1;
                        } else {
                                if (conds[i].quiet)
                                        setenv("AXP_CPU_PRESSURE", "0", 1);
                                if (engine_run(model, calib, prompt, prompt_tokens, n_slots,
                                               conds[i].idle, conds[i].share,
                                               conds[i].fg ? &fg : NULL, seconds, x) < 0)
                                        return 1;
                                unsetenv("AXP_CPU_PRESSURE");
                        }
                        fprintf(stderr, "  round %d: %s done\n", k + 1, conds[i].name);
                }
        {
                double stop = 0;
                if (write(fg.to, &stop, sizeof(stop)) != sizeof(stop))
                        kill(fg.pid, SIGTERM);
                waitpid(fg.pid, NULL, 0);
        }

        printf("| condition | busy thread, of alone | frames missed | shading mean | "
               "proactive tokens/s | CPU pressure (source) | share allowed | class |\n");
        printf("|---|---|---|---|---|---|---|---|\n");
        for (int i = 0; i < N_COND; i++) {
                double busy[MAX_ROUNDS], work[MAX_ROUNDS], tps[MAX_ROUNDS], p = 0, sh = 0;
                if (!run[i])
                        continue;
                long missed = 0, frames = 0;
                char b[64] = "-", f[64] = "-", w[64] = "-", t[64] = "-", pr[64] = "-", s2[32] = "-";
                for (int k = 0; k < rounds; k++) {
                        const outcome *x = &o[i][k];
                        busy[k] = x->f.busy_rate / o[0][k].f.busy_rate;
                        work[k] = x->f.frame_work_ms;
                        tps[k] = x->tokens_per_s;
                        missed += x->f.missed;
                        frames += x->f.frames;
                        p += x->pressure / rounds;
                        sh += x->share / rounds;
                }
                if (conds[i].fg) {
                        snprintf(b, sizeof(b), "%.0f%% (%.0f-%.0f%%)", 100 * median(busy, rounds),
                                 100 * minimum(busy, rounds), 100 * maximum(busy, rounds));
                        snprintf(f, sizeof(f), "%ld of %ld (%.1f%%)", missed, frames,
                                 frames ? 100.0 * missed / frames : 0);
                        snprintf(w, sizeof(w), "%.1f ms", median(work, rounds));
                }
                if (conds[i].engine) {
                        snprintf(t, sizeof(t), "%.0f (%.0f-%.0f)", median(tps, rounds),
                                 minimum(tps, rounds), maximum(tps, rounds));
                        snprintf(pr, sizeof(pr), "%.2f (%s)", p, o[i][0].source);
                        snprintf(s2, sizeof(s2), "%.2f", sh);
                }
                printf("| %s | %s | %s | %s | %s | %s | %s | %s |\n", conds[i].name, b, f, w, t, pr,
                       s2, conds[i].engine ? o[i][0].priority : "-");
        }
        if (run[0]) {
                double alone[MAX_ROUNDS];
                for (int k = 0; k < rounds; k++)
                        alone[k] = o[0][k].f.busy_rate / 1e6;
                printf("\nalone, the busy thread counted %.0f M iterations/s (median of %d rounds of "
                       "%.0f s each)\n", median(alone, rounds), rounds, seconds);
        }
        printf("\nwhere the time went, over all rounds: the late frames' mean wait for a CPU (the "
               "kernel's run-queue wait from the frame's wake-up to its end) and mean shading CPU "
               "time; every frame's mean shading CPU time; the engine's CPU use at normal priority "
               "and at the idle class, in CPUs (its threads besides the bench's own):\n\n");
        printf("| condition | late frames | their wait for a CPU | their shading CPU | shading CPU, all "
               "frames | engine at normal priority | engine at idle class |\n");
        printf("|---|---|---|---|---|---|---|\n");
        for (int i = 0; i < N_COND; i++) {
                long late = 0;
                double wait = 0, cpu = 0, all = 0, en = 0, ei = 0;
                char a[32] = "-", b[32] = "-", c2[32] = "-", d[32] = "-", e1[32] = "-", e2[32] = "-";
                if (!run[i])
                        continue;
                for (int k = 0; k < rounds; k++) {
                        const outcome *x = &o[i][k];
                        late += x->f.late;
                        wait += x->f.late_wait_ms;
                        cpu += x->f.late_cpu_ms;
                        all += x->f.cpu_ms / rounds;
                        en += x->eng_normal / rounds;
                        ei += x->eng_idle / rounds;
                }
                if (conds[i].fg) {
                        snprintf(a, sizeof(a), "%ld", late);
                        if (late) {
                                snprintf(b, sizeof(b), "%.1f ms", wait / late);
                                snprintf(c2, sizeof(c2), "%.1f ms", cpu / late);
                        }
                        snprintf(d, sizeof(d), "%.2f ms", all);
                }
                if (conds[i].engine) {
                        snprintf(e1, sizeof(e1), "%.3f", en);
                        snprintf(e2, sizeof(e2), "%.3f", ei);
                }
                printf("| %s | %s | %s | %s | %s | %s | %s |\n", conds[i].name, a, b, c2, d, e1, e2);
        }
        printf("\nround by round (busy thread of alone, missed frames; proactive tokens/s at the "
               "pressure seen):\n");
        for (int i = 0; i < N_COND; i++) {
                if (!run[i])
                        continue;
                printf("  %-44s", conds[i].name);
                for (int k = 0; k < rounds; k++) {
                        const outcome *x = &o[i][k];
                        if (conds[i].fg)
                                printf(" %5.0f%% %4ld", 100 * x->f.busy_rate / o[0][k].f.busy_rate,
                                       x->f.missed);
                        if (conds[i].engine)
                                printf(" %5.0f at %.2f", x->tokens_per_s, x->pressure);
                        printf(" |");
                }
                printf("\n");
        }
        if (path[0] && model == path)
                unlink(path);
        unlink(calib);
        rmdir(dir);
        return 0;
}
