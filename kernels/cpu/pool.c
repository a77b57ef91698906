/* SPDX-License-Identifier: MIT */
/* A fixed pool of worker threads. A run publishes (fn, arg) and bumps a generation counter;
 * workers spin on the counter for a short while (decode issues a run every few tens of
 * microseconds) and then sleep on a futex, so an idle engine costs no CPU. The caller runs
 * share 0 itself and waits for the others the same way: spin briefly, then futex. */
#include "pool.h"

#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* How long a thread polls before it sleeps. Long enough to bridge the gaps between the
 * kernels of one decode step, short enough not to steal a shared core for long. */
#define SPIN_NS 200000L

typedef struct axp_pool_thread {
        axp_pool *pool;
        pthread_t tid;
        int ith;
} axp_pool_thread;

struct axp_pool {
        int n;
        axp_pool_thread *threads;

        axp_pool_fn fn;
        void *arg;

        /* bumped (release) to start a run; workers wait for it to change */
        _Alignas(64) _Atomic uint32_t gen;
        _Atomic uint32_t sleepers; /* workers in (or about to enter) futex wait on gen */
        _Atomic uint32_t stop;

        /* workers still running the current run; the caller waits for 0 */
        _Alignas(64) _Atomic uint32_t pending;
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

/* Spin until *addr != val or the spin budget runs out; returns the last value seen. */
static uint32_t spin_while_equal(_Atomic uint32_t *addr, uint32_t val) {
        uint32_t v = atomic_load_explicit(addr, memory_order_acquire);
        if (v != val)
                return v;
        long deadline = now_ns() + SPIN_NS;
        for (unsigned i = 1;; i++) {
                cpu_relax();
                v = atomic_load_explicit(addr, memory_order_acquire);
                if (v != val)
                        return v;
                if ((i & 63) == 0 && now_ns() > deadline)
                        return v;
        }
}

/* Spin until *addr is 0 or the spin budget runs out; returns the last value seen. */
static uint32_t spin_until_zero(_Atomic uint32_t *addr) {
        uint32_t v = atomic_load_explicit(addr, memory_order_acquire);
        long deadline = 0;
        for (unsigned i = 1; v != 0; i++) {
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

static void *worker_main(void *p) {
        axp_pool_thread *t = p;
        axp_pool *pool = t->pool;
        uint32_t seen = 0;

        for (;;) {
                uint32_t g = spin_while_equal(&pool->gen, seen);
                while (g == seen) {
                        atomic_fetch_add(&pool->sleepers, 1);
                        /* Dekker with axp_pool_run: it bumps gen, then reads sleepers */
                        g = atomic_load(&pool->gen);
                        if (g == seen)
                                futex(&pool->gen, FUTEX_WAIT_PRIVATE, seen);
                        atomic_fetch_sub(&pool->sleepers, 1);
                        g = atomic_load_explicit(&pool->gen, memory_order_acquire);
                }
                seen = g;
                if (atomic_load_explicit(&pool->stop, memory_order_acquire))
                        return NULL;

                pool->fn(pool->arg, t->ith, pool->n);

                /* seq_cst: Dekker with the caller's caller_sleeping store */
                if (atomic_fetch_sub(&pool->pending, 1) == 1 &&
                    atomic_load(&pool->caller_sleeping))
                        futex(&pool->pending, FUTEX_WAKE_PRIVATE, 1);
        }
}

axp_pool *axp_pool_new(int n_threads) {
        if (n_threads <= 0) {
                long n = sysconf(_SC_NPROCESSORS_ONLN);
                n_threads = n > 0 ? (int) n : 1;
        }
        if (n_threads > 1024)
                n_threads = 1024;

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

void axp_pool_run(axp_pool *p, axp_pool_fn fn, void *arg) {
        if (!p || p->n == 1) {
                fn(arg, 0, 1);
                return;
        }

        p->fn = fn;
        p->arg = arg;
        atomic_store_explicit(&p->pending, (uint32_t) (p->n - 1), memory_order_relaxed);
        atomic_fetch_add(&p->gen, 1); /* seq_cst: ordered before the sleepers read below */
        if (atomic_load(&p->sleepers) > 0)
                futex(&p->gen, FUTEX_WAKE_PRIVATE, INT32_MAX);

        fn(arg, 0, p->n);

        if (spin_until_zero(&p->pending) != 0) {
                atomic_store(&p->caller_sleeping, 1);
                uint32_t left;
                while ((left = atomic_load(&p->pending)) != 0)
                        futex(&p->pending, FUTEX_WAIT_PRIVATE, left);
                atomic_store(&p->caller_sleeping, 0);
        }
        atomic_thread_fence(memory_order_acquire);
}
