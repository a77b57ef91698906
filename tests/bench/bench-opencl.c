/* SPDX-License-Identifier: MIT */
/* Speed of the OpenCL matrix products (activation conversion included) on Llama-3.2-1B
 * shapes: one token (decode: weight bytes per second) and 64 tokens (prefill: GFLOP/s), per
 * weight type. The best of a few timed runs, each about a quarter of a second.
 *   bench-opencl [TYPE...]   (default: every type the kernels read) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devices/discovery.h"
#include "model/model.h"
#include "devices/opencl-device.h"
#include "kernels/types.h"

static double best_time(axp_device *d, const axp_weight *w, const float *x, int n_tok, float *y) {
        axp_error err = { 0 };
        double once = 0, best = INFINITY;
        if (axp_opencl_matmul(d, w, x, n_tok, y, 1, &once, &err) < 0) {
                fprintf(stderr, "%s\n", err.msg);
                exit(1);
        }
        const int reps = (int) fmin(fmax(0.25 / fmax(once, 1e-6), 1), 2000);
        for (int i = 0; i < 3; i++) {
                double t;
                if (axp_opencl_matmul(d, w, x, n_tok, y, reps, &t, &err) < 0) {
                        fprintf(stderr, "%s\n", err.msg);
                        exit(1);
                }
                best = fmin(best, t);
        }
        return best;
}

int main(int argc, char **argv) {
        static const char *const all[] = { "f32",  "f16",  "bf16",   "q8_0",  "q4_0", "q4_1",
                                           "q5_0", "q5_1", "q2_k",   "q3_k",  "q4_k", "q5_k",
                                           "q6_k", "iq4_nl", "iq4_xs" };
        const char *const *types = argc > 1 ? (const char *const *) argv + 1 : all;
        const int n_types = argc > 1 ? argc - 1 : (int) (sizeof(all) / sizeof(all[0]));
        /* gate/up and down of Llama-3.2-1B */
        static const int shapes[][2] = { { 2048, 8192 }, { 8192, 2048 } };
        axp_device *d;
        axp_error err = { 0 };
        if (axp_device_open("opencl", 1, &d, &err) < 0) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
        }
        printf("%s\n", axp_device_name(d));
        float *x = malloc((size_t) 64 * 8192 * sizeof(float));
        float *y = malloc((size_t) 64 * 8192 * sizeof(float));
        float *wf = malloc((size_t) 2048 * 8192 * sizeof(float));
        srand(1);
        for (size_t i = 0; i < (size_t) 64 * 8192; i++)
                x[i] = (float) rand() / RAND_MAX - 0.5f;
        for (size_t i = 0; i < (size_t) 2048 * 8192; i++)
                wf[i] = ((float) rand() / RAND_MAX - 0.5f) * 0.05f;
        for (int ti = 0; ti < n_types; ti++) {
                const int type = axp_type_from_name(types[ti]);
                if (type < 0) {
                        fprintf(stderr, "unknown type %s\n", types[ti]);
                        return 1;
                }
                for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
                        const int n_in = shapes[s][0], n_out = shapes[s][1];
                        const uint64_t rb = axp_type_row_size((uint32_t) type, n_in);
                        uint8_t *data = malloc(rb * n_out);
                        for (int r = 0; r < n_out; r++)
                                axp_quantize_row((uint32_t) type, wf + (size_t) r * n_in,
                                                 data + r * rb, n_in);
                        axp_weight w = { .name = types[ti],
                                         .type = (uint32_t) type,
                                         .n_in = n_in,
                                         .n_out = n_out,
                                         .row_bytes = rb,
                                         .data = data };
                        const double t1 = best_time(d, &w, x, 1, y),
                                     t64 = best_time(d, &w, x, 64, y);
                        printf("%-6s %5d -> %5d: 1 token %8.1f us (%5.1f GB/s)   "
                               "64 tokens %8.1f us (%6.1f GFLOP/s)\n",
                               types[ti], n_in, n_out, t1 * 1e6, (double) rb * n_out / t1 / 1e9,
                               t64 * 1e6, 2.0 * 64 * n_in * n_out / t64 / 1e9);
                        fflush(stdout);
                        free(data);
                }
        }
        free(x);
        free(y);
        free(wf);
        axp_device_free(d);
        return 0;
}
