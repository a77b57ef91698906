/* SPDX-License-Identifier: MIT */
/* Interim pool (condition variables, no spinning); the tuned pool replaces it. */
#include "pool.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

struct axp_pool {
        int n;
        pthread_t *threads;
        pthread_mutex_t lock;
        pthread_cond_t go, done;
        axp_pool_fn fn;
        void *arg;
        unsigned long gen;
        int pending;
        int quit;
};

typedef struct worker_arg {
        axp_pool *p;
        int ith;
} worker_arg;

static void *worker(void *a) {
        worker_arg w = *(worker_arg *) a;
        free(a);
        axp_pool *p = w.p;
        unsigned long seen = 0;
        for (;;) {
                pthread_mutex_lock(&p->lock);
                while (p->gen == seen && !p->quit)
                        pthread_cond_wait(&p->go, &p->lock);
                if (p->quit) {
                        pthread_mutex_unlock(&p->lock);
                        return NULL;
                }
                seen = p->gen;
                axp_pool_fn fn = p->fn;
                void *arg = p->arg;
                pthread_mutex_unlock(&p->lock);
                fn(arg, w.ith, p->n);
                pthread_mutex_lock(&p->lock);
                if (--p->pending == 0)
                        pthread_cond_signal(&p->done);
                pthread_mutex_unlock(&p->lock);
        }
}

axp_pool *axp_pool_new(int n) {
        if (n <= 0)
                n = (int) sysconf(_SC_NPROCESSORS_ONLN);
        if (n <= 0)
                n = 1;
        axp_pool *p = calloc(1, sizeof(*p));
        if (!p)
                return NULL;
        p->n = n;
        pthread_mutex_init(&p->lock, NULL);
        pthread_cond_init(&p->go, NULL);
        pthread_cond_init(&p->done, NULL);
        p->threads = calloc((size_t) n, sizeof(pthread_t));
        for (int i = 1; i < n; i++) {
                worker_arg *a = malloc(sizeof(*a));
                a->p = p;
                a->ith = i;
                pthread_create(&p->threads[i], NULL, worker, a);
        }
        return p;
}

void axp_pool_free(axp_pool *p) {
        if (!p)
                return;
        pthread_mutex_lock(&p->lock);
        p->quit = 1;
        pthread_cond_broadcast(&p->go);
        pthread_mutex_unlock(&p->lock);
        for (int i = 1; i < p->n; i++)
                pthread_join(p->threads[i], NULL);
        free(p->threads);
        free(p);
}

int axp_pool_size(const axp_pool *p) {
        return p->n;
}

void axp_pool_run(axp_pool *p, axp_pool_fn fn, void *arg) {
        if (p->n == 1) {
                fn(arg, 0, 1);
                return;
        }
        pthread_mutex_lock(&p->lock);
        p->fn = fn;
        p->arg = arg;
        p->pending = p->n - 1;
        p->gen++;
        pthread_cond_broadcast(&p->go);
        pthread_mutex_unlock(&p->lock);
        fn(arg, 0, p->n);
        pthread_mutex_lock(&p->lock);
        while (p->pending > 0)
                pthread_cond_wait(&p->done, &p->lock);
        pthread_mutex_unlock(&p->lock);
}
