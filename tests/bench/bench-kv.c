/* SPDX-License-Identifier: MIT */
/* Decode attention of a Llama-3.2-1B-shaped model (16 layers, 32 heads, 8 KV heads of 64)
 * over CTX positions with an F32 and an F16 KV cache, alternating, 7 rounds: milliseconds
 * per token (all 16 layers), then the medians. Not a test: it prints numbers.
 *
 *   bench-kv [CTX (default 1500)]     (AXP_CPU_ISA=avx2 or generic to force a path) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/pool.h"
#include "kernels/types.h"
static double now(void) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        return t.tv_sec + t.tv_nsec * 1e-9;
}
int main(int argc, char **argv) {
        int ctx = argc > 1 ? atoi(argv[1]) : 1500, L = 16, H = 32, HKV = 8, HD = 64, reps = 20;
        long kvd = HKV * HD;
        axp_pool *pool = axp_pool_new(2);
        float *q = malloc(H * HD * 4), *out = malloc(H * HD * 4);
        void *k32[16], *v32[16], *k16[16], *v16[16];
        srand(1);
        for (int l = 0; l < L; l++) {
                k32[l] = malloc(ctx * kvd * 4); v32[l] = malloc(ctx * kvd * 4);
                k16[l] = malloc(ctx * kvd * 2); v16[l] = malloc(ctx * kvd * 2);
                for (long i = 0; i < ctx * kvd; i++) {
                        float a = rand() / (float) RAND_MAX - 0.5f, b = rand() / (float) RAND_MAX - 0.5f;
                        ((float *) k32[l])[i] = a; ((float *) v32[l])[i] = b;
                        ((axp_f16 *) k16[l])[i] = axp_f32_to_f16(a); ((axp_f16 *) v16[l])[i] = axp_f32_to_f16(b);
                }
        }
        for (int i = 0; i < H * HD; i++) q[i] = rand() / (float) RAND_MAX - 0.5f;
        int32_t pos = ctx - 1;
        double ms[2][7];
        for (int round = 0; round < 7; round++)
                for (int f16 = 0; f16 < 2; f16++) {
                        double t0 = now();
                        for (int r = 0; r < reps; r++)
                                for (int l = 0; l < L; l++)
                                        axp_cpu_attention(pool, q, H * HD, out, H * HD, f16 ? k16[l] : k32[l],
                                                          f16 ? v16[l] : v32[l], f16 ? AXP_TYPE_F16 : AXP_TYPE_F32, 1, &pos,
                                                          H, HKV, HD, 0 /* no window */, 0 /* no ring */, 0.125f);
                        ms[f16][round] = (now() - t0) / reps * 1e3;
                        printf("%d %s %.3f\n", round, f16 ? "f16" : "f32", ms[f16][round]);
                }
        for (int f16 = 0; f16 < 2; f16++) {
                for (int i = 0; i < 7; i++) /* sort for the median */
                        for (int j = i + 1; j < 7; j++)
                                if (ms[f16][j] < ms[f16][i]) {
                                        double t = ms[f16][i];
                                        ms[f16][i] = ms[f16][j];
                                        ms[f16][j] = t;
                                }
                printf("median %s: %.3f ms per token at %d positions\n", f16 ? "f16" : "f32", ms[f16][3], ctx);
        }
        return 0;
}
