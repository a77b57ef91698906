/* SPDX-License-Identifier: MIT */
/* STREAM-like memory bandwidth: copy, triad and read (sum) over three double arrays far larger
 * than the last-level cache, with 1..N threads. STREAM's byte counting (copy 16 B, triad 24 B,
 * read 8 B per element); best of several repetitions. Decode speed is bounded by "read".
 *
 *   membw [MiB per array (512)] [max threads (2)] [repetitions (6)] */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { OP_COPY, OP_TRIAD, OP_READ, OP__MAX };

typedef struct {
        double *a, *b, *c;
        long n;
        int op, ith, nth;
        double sum;
        pthread_barrier_t *start, *done;
} worker;

static double now(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void run_op(worker *w) {
        long lo = w->n * w->ith / w->nth, hi = w->n * (w->ith + 1) / w->nth;
        double *a = w->a, *b = w->b, *c = w->c, s = 0;
        switch (w->op) {
        case OP_COPY:
                for (long i = lo; i < hi; i++)
                        c[i] = a[i];
                break;
        case OP_TRIAD:
                for (long i = lo; i < hi; i++)
                        a[i] = b[i] + 3.0 * c[i];
                break;
        case OP_READ: {
                /* eight independent vector sums so the adds never limit the stream */
                typedef double v4 __attribute__((vector_size(32)));
                v4 s8[8] = { 0 };
                long i = lo;
                for (; i < hi && (i & 3); i++)
                        s += a[i];
                for (; i + 32 <= hi; i += 32)
                        for (int j = 0; j < 8; j++) {
                                v4 v;
                                memcpy(&v, &a[i + 4 * j], sizeof(v));
                                s8[j] += v;
                        }
                for (; i < hi; i++)
                        s += a[i];
                for (int j = 0; j < 8; j++)
                        s += s8[j][0] + s8[j][1] + s8[j][2] + s8[j][3];
                break;
        }
        }
        w->sum += s;
}

static void *thread_main(void *arg) {
        worker *w = arg;
        for (;;) {
                pthread_barrier_wait(w->start);
                if (w->op < 0)
                        return NULL;
                run_op(w);
                pthread_barrier_wait(w->done);
        }
}

int main(int argc, char **argv) {
        long mib = argc > 1 ? atol(argv[1]) : 512;
        int max_threads = argc > 2 ? atoi(argv[2]) : 2;
        int reps = argc > 3 ? atoi(argv[3]) : 6;
        if (mib < 1 || max_threads < 1 || max_threads > 256 || reps < 1) {
                fprintf(stderr, "usage: membw [MiB per array] [max threads] [repetitions]\n");
                return 2;
        }
        long n = mib * 1024 * 1024 / sizeof(double);
        double *a = aligned_alloc(64, n * sizeof(double));
        double *b = aligned_alloc(64, n * sizeof(double));
        double *c = aligned_alloc(64, n * sizeof(double));
        if (!a || !b || !c) {
                fprintf(stderr, "membw: cannot allocate 3 x %ld MiB\n", mib);
                return 1;
        }
        printf("arrays: 3 x %ld MiB, best of %d\n", mib, reps);
        printf("threads      copy GB/s   triad GB/s    read GB/s\n");
        for (int nth = 1; nth <= max_threads; nth++) {
                pthread_barrier_t start, done;
                pthread_barrier_init(&start, NULL, nth);
                pthread_barrier_init(&done, NULL, nth);
                worker *ws = calloc(nth, sizeof(worker));
                pthread_t *tids = calloc(nth, sizeof(pthread_t));
                for (int t = 0; t < nth; t++) {
                        ws[t] = (worker) { a, b, c, n, OP_COPY, t, nth, 0, &start, &done };
                        if (t > 0)
                                pthread_create(&tids[t], NULL, thread_main, &ws[t]);
                }
                /* first touch by the threads that will use the memory */
                for (long i = 0; i < n; i++) {
                        a[i] = 1.0;
                        b[i] = 2.0;
                        c[i] = 0.5;
                }
                double best[OP__MAX] = { 0 };
                for (int r = 0; r < reps; r++) {
                        for (int op = 0; op < OP__MAX; op++) {
                                for (int t = 0; t < nth; t++)
                                        ws[t].op = op;
                                double t0 = now();
                                pthread_barrier_wait(&start);
                                run_op(&ws[0]);
                                pthread_barrier_wait(&done);
                                double dt = now() - t0;
                                double bytes = (double) n * sizeof(double) *
                                               (op == OP_COPY ? 2 : op == OP_TRIAD ? 3 : 1);
                                if (bytes / dt > best[op])
                                        best[op] = bytes / dt;
                        }
                }
                printf("%7d %12.1f %12.1f %12.1f\n", nth, best[OP_COPY] * 1e-9, best[OP_TRIAD] * 1e-9,
                       best[OP_READ] * 1e-9);
                for (int t = 0; t < nth; t++)
                        ws[t].op = -1;
                pthread_barrier_wait(&start);
                for (int t = 1; t < nth; t++)
                        pthread_join(tids[t], NULL);
                pthread_barrier_destroy(&start);
                pthread_barrier_destroy(&done);
                free(ws);
                free(tids);
        }
        double s = 0;
        for (long i = 0; i < n; i += 4096)
                s += a[i];
        fprintf(stderr, "(checksum %g, keeps the loops)\n", s);
        free(a);
        free(b);
        free(c);
        return 0;
}
