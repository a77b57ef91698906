/* SPDX-License-Identifier: MIT */
/* Decode attention of a Llama-3.2-1B-shaped model (16 layers, 32 heads, 8 KV heads of 64;
 * --shape 8b: Llama-3.1-8B's 32 layers, 32 heads, 8 KV heads of 128) over CTX positions with
 * an F32, an F16 and a Q8_0 KV cache, alternating, 7 rounds: milliseconds per token (all
 * layers), then the medians and the cache's bytes over that time. With --prefill, the
 * attention of a CTX-token prompt instead (queries at positions 0..CTX-1, as prefill runs it;
 * one layer timed, times the layers), best of 5. 2 threads unless told. Not a test: it prints
 * numbers.
 *
 *   bench-kv [--threads N] [--type f32|f16|q8_0] [--shape 1b|8b] [--layout heads|rows]
 *            [--softcap CAP] [--prefill] [CTX (default 1500)]
 *            (AXP_CPU_ISA=avx2 or generic to force a path)
 *
 * --softcap: the scores soft-capped at CAP (gemma2's 50); 0 (the default): none.
 *
 * The cache is laid out head by head, as the engine's (--layout rows: a position's heads side by
 * side, as it was). */
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
#define WANT(y) (only < 0 || (y) == only)
static double now(void) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        return t.tv_sec + t.tv_nsec * 1e-9;
}
int main(int argc, char **argv) {
        static const uint32_t types[N_TYPES] = { AXP_TYPE_F32, AXP_TYPE_F16, AXP_TYPE_Q8_0 };
        static const char *const names[N_TYPES] = { "f32", "f16", "q8_0" };
        int nth = 2, only = -1, L = 16, H = 32, HKV = 8, HD = 64, reps = 20;
        bool by_rows = false; /* --layout rows: [positions][heads], as the cache was laid out */
        float softcap = 0;
        for (; argc > 2 && strncmp(argv[1], "--", 2) == 0 && strcmp(argv[1], "--prefill") != 0; argc -= 2, argv += 2) {
                if (strcmp(argv[1], "--threads") == 0)
                        nth = atoi(argv[2]);
                else if (strcmp(argv[1], "--type") == 0) {
                        for (int y = 0; y < N_TYPES; y++)
                                if (strcmp(argv[2], names[y]) == 0)
                                        only = y;
                        if (only < 0) {
                                fprintf(stderr, "bench-kv: --type is f32, f16 or q8_0\n");
                                return 2;
                        }
                } else if (strcmp(argv[1], "--layout") == 0 && strcmp(argv[2], "rows") == 0) {
                        by_rows = true;
                } else if (strcmp(argv[1], "--layout") == 0 && strcmp(argv[2], "heads") == 0) {
                        by_rows = false;
                } else if (strcmp(argv[1], "--softcap") == 0) {
                        softcap = (float) atof(argv[2]);
                } else if (strcmp(argv[1], "--shape") == 0 && strcmp(argv[2], "8b") == 0) {
                        L = 32;
                        HD = 128;
                } else if (strcmp(argv[1], "--shape") != 0 || strcmp(argv[2], "1b") != 0) {
                        fprintf(stderr, "bench-kv: unknown option %s %s\n", argv[1], argv[2]);
                        return 2;
                }
        }
        bool prefill = argc > 1 && strcmp(argv[1], "--prefill") == 0;
        if (prefill) {
                argc--;
                argv++;
        }
        int ctx = argc > 1 ? atoi(argv[1]) : 1500;
        if (ctx < 1 || ctx > 65536 || nth < 1 || nth > 256) {
                fprintf(stderr, "bench-kv: CTX is 1..65536, N 1..256\n");
                return 2;
        }
        long kvd = HKV * HD, ld = by_rows ? kvd : HD, hs = by_rows ? HD : (long) ctx * HD;
        axp_pool *pool = axp_pool_new(nth);
        float *q = malloc(H * HD * 4), *out = malloc(H * HD * 4), *row = malloc(2 * kvd * 4);
        char *k[N_TYPES][32], *v[N_TYPES][32];
        srand(1);
        for (int y = 0; y < N_TYPES; y++)
                for (int l = 0; l < L && WANT(y); l++) {
                        size_t rb = axp_type_row_size(types[y], kvd);
                        k[y][l] = axp_cpu_huge_alloc(ctx * rb); /* as the engine allocates them */
                        v[y][l] = axp_cpu_huge_alloc(ctx * rb);
                }
        for (int l = 0; l < L; l++)
                for (int t = 0; t < ctx; t++) {
                        for (long i = 0; i < 2 * kvd; i++)
                                row[i] = rand() / (float) RAND_MAX - 0.5f;
                        for (int y = 0; y < N_TYPES; y++) {
                                if (!WANT(y))
                                        continue;
                                size_t hb = axp_type_row_size(types[y], HD);
                                for (int h = 0; h < HKV; h++) {
                                        /* head h of position t: in its row, or in its head's rows */
                                        size_t off = by_rows ? ((size_t) t * HKV + h) * hb : ((size_t) h * ctx + t) * hb;
                                        axp_cpu_kv_store(types[y], row + h * HD, k[y][l] + off, HD);
                                        axp_cpu_kv_store(types[y], row + kvd + h * HD, v[y][l] + off, HD);
                                }
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
                                if (!WANT(y))
                                        continue;
                                double t0 = now();
                                axp_cpu_attention(pool, qs, H * HD, os, H * HD, k[y][0], v[y][0], types[y], ctx, ps, H,
                                                  HKV, HD, ld, hs, 0, 0, 0.125f, softcap);
                                best[y] = fmin(best[y], now() - t0);
                        }
                /* q.k and p.v over the causal triangle */
                double flop = 2.0 * 2 * H * HD * (double) ctx * (ctx + 1) / 2;
                for (int y = 0; y < N_TYPES; y++)
                        if (WANT(y))
                                printf("prefill %s: %.1f ms for a %d-token prompt (%d layers), %.1f GFLOP/s\n",
                                       names[y], best[y] * L * 1e3, ctx, L, flop / best[y] / 1e9);
                return 0;
        }
        int32_t pos = ctx - 1;
        double ms[N_TYPES][7];
        for (int round = 0; round < 7; round++)
                for (int y = 0; y < N_TYPES; y++) {
                        if (!WANT(y))
                                continue;
                        double t0 = now();
                        for (int r = 0; r < reps; r++)
                                for (int l = 0; l < L; l++)
                                        axp_cpu_attention(pool, q, H * HD, out, H * HD, k[y][l], v[y][l], types[y], 1,
                                                          &pos, H, HKV, HD, ld, hs, 0 /* no window */, 0 /* no ring */,
                                                          0.125f, softcap);
                        ms[y][round] = (now() - t0) / reps * 1e3;
                        printf("%d %s %.3f\n", round, names[y], ms[y][round]);
                }
        for (int y = 0; y < N_TYPES; y++) {
                if (!WANT(y))
                        continue;
                for (int i = 0; i < 7; i++) /* sort for the median */
                        for (int j = i + 1; j < 7; j++)
                                if (ms[y][j] < ms[y][i]) {
                                        double t = ms[y][i];
                                        ms[y][i] = ms[y][j];
                                        ms[y][j] = t;
                                }
                /* K and V of every position in every layer, read once a token */
                double bytes = 2.0 * L * ctx * axp_type_row_size(types[y], kvd);
                printf("median %s: %.3f ms per token at %d positions, %.1f GB/s\n", names[y], ms[y][3], ctx,
                       bytes / ms[y][3] / 1e6);
        }
        return 0;
}
