/* SPDX-License-Identifier: MIT */
/* A fixed pool of worker threads.
 *
 * A run publishes (fn, arg) and bumps a generation counter. Each share i of the run is
 * claimed exactly once, through one atomic word holding the generation and a bit per share:
 * worker i claims share i when it notices the run; the caller runs share 0, then claims and
 * runs itself every share no worker has claimed yet, and finally waits only for the shares
 * workers did claim. So a worker that another process keeps off the CPU delays nothing: its
 * share is done by the caller instead (the kernels' results do not depend on which thread runs
 * which share).
 *
 * Workers spin on the generation for a short while (decode issues a run every few tens of
 * microseconds) and then sleep on a futex, so an idle engine costs no CPU. */
#include "pool.h"

#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* How long a thread polls before it sleeps: long enough to bridge the gaps between the
 * kernels of one decode step, short enough not to hold a shared core for long. */
#define SPIN_NS 200000L
#define MAX_THREADS 32 /* one claim bit each */

typedef struct axp_pool_thread {
        axp_pool *pool;
        pthread_t tid;
        int ith;
        _Atomic int os_tid; /* gettid(), 0 until the thread has started */
} axp_pool_thread;

struct axp_pool {
        int n;
        axp_pool_thread *threads;

        axp_pool_fn fn;
        void *arg;

        /* generation << 32 | bit i set once share i is claimed */
        _Alignas(64) _Atomic uint64_t claim;
        /* bumped (after claim is reset) to start a run; workers wait for it to change */
        _Atomic uint32_t gen;
        _Atomic uint32_t sleepers; /* workers in (or about to enter) futex wait on gen */
        _Atomic uint32_t stop;

        /* shares finished by workers in the current run; the caller waits on it */
        _Alignas(64) _Atomic uint32_t done;
        _Atomic uint32_t caller_sleeping;
};

static long futex(_Atomic uint32_t *addr, int op, uint32_t val) {
        return syscall(SYS_futex, (uint32_t *) addr, op, val, NULL, NULL, 0);
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#else
        __asm__ __volatile__("" ::: "memory");
#endif
}

static long now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

/* Spin while *addr == val, for at most the spin budget; returns the last value seen. */
static uint32_t spin_while(_Atomic uint32_t *addr, uint32_t val) {
        uint32_t v = atomic_load_explicit(addr, memory_order_acquire);
        long deadline = 0;
        for (unsigned i = 1; v == val; i++) {
                cpu_relax();
                v = atomic_load_explicit(addr, memory_order_acquire);
                if ((i & 63) == 0) {
                        long t = now_ns();
                        if (!deadline)
                                deadline = t + SPIN_NS;
                        else if (t > deadline)
                                break;
                }
        }
        return v;
}

/* Claim share ith of generation gen; false if it is taken or the run is over. */
static bool claim_share(axp_pool *p, uint32_t gen, int ith) {
        uint64_t bit = 1ull << ith;
        uint64_t c = atomic_load(&p->claim);
        while ((uint32_t) (c >> 32) == gen && !(c & bit))
                if (atomic_compare_exchange_weak(&p->claim, &c, c | bit))
                        return true;
        return false;
}

static void *worker_main(void *arg) {
        axp_pool_thread *t = arg;
        axp_pool *p = t->pool;
        uint32_t seen = 0;

        atomic_store(&t->os_tid, (int) syscall(SYS_gettid));
        for (;;) {
                uint32_t g = spin_while(&p->gen, seen);
                while (g == seen) {
                        atomic_fetch_add(&p->sleepers, 1);
                        /* Dekker with axp_pool_run: it bumps gen, then reads sleepers */
                        if (atomic_load(&p->gen) == seen)
                                futex(&p->gen, FUTEX_WAIT_PRIVATE, seen);
                        atomic_fetch_sub(&p->sleepers, 1);
                        g = atomic_load_explicit(&p->gen, memory_order_acquire);
                }
                seen = g;
                if (atomic_load_explicit(&p->stop, memory_order_acquire))
                        return NULL;
                if (!claim_share(p, g, t->ith))
                        continue;

                p->fn(p->arg, t->ith, p->n);

                atomic_fetch_add(&p->done, 1); /* seq_cst: Dekker with caller_sleeping */
                if (atomic_load(&p->caller_sleeping))
                        futex(&p->done, FUTEX_WAKE_PRIVATE, 1);
        }
}

axp_pool *axp_pool_new(int n_threads) {
        if (n_threads <= 0) {
                long n = sysconf(_SC_NPROCESSORS_ONLN);
                n_threads = n > 0 ? (int) n : 1;
        }
        if (n_threads > MAX_THREADS)
                n_threads = MAX_THREADS;

        axp_pool *p = calloc(1, sizeof(*p));
        if (!p)
                return NULL;
        p->n = n_threads;
        p->threads = calloc((size_t) n_threads, sizeof(axp_pool_thread));
        if (!p->threads) {
                free(p);
                return NULL;
        }
        for (int i = 1; i < n_threads; i++) {
                p->threads[i] = (axp_pool_thread) { .pool = p, .ith = i };
                if (pthread_create(&p->threads[i].tid, NULL, worker_main, &p->threads[i]) != 0) {
                        /* run with the threads we got */
                        p->n = i;
                        break;
                }
        }
        return p;
}

void axp_pool_free(axp_pool *p) {
        if (!p)
                return;
        atomic_store(&p->stop, 1);
        atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
        futex(&p->gen, FUTEX_WAKE_PRIVATE, INT32_MAX);
        for (int i = 1; i < p->n; i++)
                pthread_join(p->threads[i].tid, NULL);
        free(p->threads);
        free(p);
}

int axp_pool_size(const axp_pool *p) {
        return p ? p->n : 1;
}

int axp_pool_worker_tids(axp_pool *p, int *ret, int cap) {
        if (!p)
                return 0;
        for (int i = 1; i < p->n; i++) {
                int tid;
                /* a worker publishes its id first thing; wait for one just created */
                while (!(tid = atomic_load(&p->threads[i].os_tid)))
                        sched_yield();
                if (i - 1 < cap)
                        ret[i - 1] = tid;
        }
        return p->n - 1;
}

void axp_pool_run(axp_pool *p, axp_pool_fn fn, void *arg) {
        if (!p || p->n == 1) {
                fn(arg, 0, 1);
                return;
        }

        uint32_t g = atomic_load_explicit(&p->gen, memory_order_relaxed) + 1;
        p->fn = fn;
        p->arg = arg;
        atomic_store_explicit(&p->done, 0, memory_order_relaxed);
        atomic_store_explicit(&p->claim, (uint64_t) g << 32 | 1, memory_order_relaxed);
        atomic_store(&p->gen, g); /* seq_cst: publishes the above; ordered before sleepers */
        if (atomic_load(&p->sleepers) > 0)
                futex(&p->gen, FUTEX_WAKE_PRIVATE, INT32_MAX);

        fn(arg, 0, p->n);

        /* shares no worker has picked up yet are run here */
        uint32_t by_workers = 0;
        for (int i = 1; i < p->n; i++) {
                if (claim_share(p, g, i))
                        fn(arg, i, p->n);
                else
                        by_workers++;
        }

        uint32_t d;
        while ((d = atomic_load_explicit(&p->done, memory_order_acquire)) != by_workers) {
                if (spin_while(&p->done, d) != d)
                        continue; /* progress: spin on */
                atomic_store(&p->caller_sleeping, 1);
                if (atomic_load(&p->done) == d)
                        futex(&p->done, FUTEX_WAIT_PRIVATE, d);
                atomic_store(&p->caller_sleeping, 0);
        }
}
