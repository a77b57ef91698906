/* SPDX-License-Identifier: MIT */
/* Decode attention of a Llama-3.2-1B-shaped model (16 layers, 32 heads, 8 KV heads of 64)
 * over CTX positions with an F32, an F16 and a Q8_0 KV cache, alternating, 7 rounds:
 * milliseconds per token (all 16 layers), then the medians. With --prefill, the attention of
 * a CTX-token prompt instead (queries at positions 0..CTX-1, as prefill runs it; one layer
 * timed, times 16), best of 5. 2 threads. Not a test: it prints numbers.
 *
 *   bench-kv [--prefill] [CTX (default 1500)]    (AXP_CPU_ISA=avx2 or generic to force a path) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <stdbool.h>
#include <time.h>
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/pool.h"
#include "kernels/types.h"
#define N_TYPES 3
static double now(void) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        return t.tv_sec + t.tv_nsec * 1e-9;
}
int main(int argc, char **argv) {
        static const uint32_t types[N_TYPES] = { AXP_TYPE_F32, AXP_TYPE_F16, AXP_TYPE_Q8_0 };
        static const char *const names[N_TYPES] = { "f32", "f16", "q8_0" };
        bool prefill = argc > 1 && strcmp(argv[1], "--prefill") == 0;
        if (prefill) {
                argc--;
                argv++;
        }
        int ctx = argc > 1 ? atoi(argv[1]) : 1500, L = 16, H = 32, HKV = 8, HD = 64, reps = 20;
        if (ctx < 1 || ctx > 65536) {
                fprintf(stderr, "bench-kv: CTX is 1..65536\n");
                return 2;
        }
        long kvd = HKV * HD;
        axp_pool *pool = axp_pool_new(2);
        float *q = malloc(H * HD * 4), *out = malloc(H * HD * 4), *row = malloc(2 * kvd * 4);
        char *k[N_TYPES][16], *v[N_TYPES][16];
        srand(1);
        for (int y = 0; y < N_TYPES; y++)
                for (int l = 0; l < L; l++) {
                        size_t rb = axp_type_row_size(types[y], kvd);
                        k[y][l] = axp_cpu_huge_alloc(ctx * rb); /* as the engine allocates them */
                        v[y][l] = axp_cpu_huge_alloc(ctx * rb);
                }
        for (int l = 0; l < L; l++)
                for (int t = 0; t < ctx; t++) {
                        for (long i = 0; i < 2 * kvd; i++)
                                row[i] = rand() / (float) RAND_MAX - 0.5f;
                        for (int y = 0; y < N_TYPES; y++) {
                                size_t rb = axp_type_row_size(types[y], kvd);
                                axp_cpu_kv_store(types[y], row, k[y][l] + t * rb, kvd);
                                axp_cpu_kv_store(types[y], row + kvd, v[y][l] + t * rb, kvd);
                        }
                }
        for (int i = 0; i < H * HD; i++) q[i] = rand() / (float) RAND_MAX - 0.5f;
        if (prefill) {
                /* every query its own row of q (read) and out */
                float *qs = malloc((size_t) ctx * H * HD * 4), *os = malloc((size_t) ctx * H * HD * 4);
                int32_t *ps = malloc((size_t) ctx * sizeof(int32_t));
                for (long i = 0; i < (long) ctx * H * HD; i++)
                        qs[i] = rand() / (float) RAND_MAX - 0.5f;
                for (int i = 0; i < ctx; i++)
                        ps[i] = i;
                double best[N_TYPES] = { 1e9, 1e9, 1e9 };
                for (int round = 0; round < 5; round++)
                        for (int y = 0; y < N_TYPES; y++) {
                                double t0 = now();
                                axp_cpu_attention(pool, qs, H * HD, os, H * HD, k[y][0], v[y][0], types[y], ctx, ps, H,
                                                  HKV, HD, 0, 0, 0.125f);
                                best[y] = fmin(best[y], now() - t0);
                        }
                /* q.k and p.v over the causal triangle */
                double flop = 2.0 * 2 * H * HD * (double) ctx * (ctx + 1) / 2;
                for (int y = 0; y < N_TYPES; y++)
                        printf("prefill %s: %.1f ms for a %d-token prompt (16 layers), %.1f GFLOP/s\n", names[y],
                               best[y] * L * 1e3, ctx, flop / best[y] / 1e9);
                return 0;
        }
        int32_t pos = ctx - 1;
        double ms[N_TYPES][7];
        for (int round = 0; round < 7; round++)
                for (int y = 0; y < N_TYPES; y++) {
                        double t0 = now();
                        for (int r = 0; r < reps; r++)
                                for (int l = 0; l < L; l++)
                                        axp_cpu_attention(pool, q, H * HD, out, H * HD, k[y][l], v[y][l], types[y], 1,
                                                          &pos, H, HKV, HD, 0 /* no window */, 0 /* no ring */, 0.125f);
                        ms[y][round] = (now() - t0) / reps * 1e3;
                        printf("%d %s %.3f\n", round, names[y], ms[y][round]);
                }
        for (int y = 0; y < N_TYPES; y++) {
                for (int i = 0; i < 7; i++) /* sort for the median */
                        for (int j = i + 1; j < 7; j++)
                                if (ms[y][j] < ms[y][i]) {
                                        double t = ms[y][i];
                                        ms[y][i] = ms[y][j];
                                        ms[y][j] = t;
                                }
                printf("median %s: %.3f ms per token at %d positions\n", names[y], ms[y][3], ctx);
        }
        return 0;
}
