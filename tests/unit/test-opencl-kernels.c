/* SPDX-License-Identifier: MIT */
/* The OpenCL matrix products take their activations exactly as the CPU kernels do, so that
 * the two devices are interchangeable under the scheduler: the activations quantized on the
 * device (Q8_0 and Q8_K blocks, f16 rounding) equal the CPU's reference quantizers bit for bit
 * (scales, int8 values, sums) on random rows, rounding ties and blocks of zeros, and every
 * product equals the CPU's up to the order in which the per-block float terms are added. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "devices/discovery.h"
#include "kernels/cpu/kernels.h"
#include "model/model.h"
#include "devices/opencl-device.h"
#include "kernels/cpu/pool.h"
#include "test.h"
#include "kernels/types.h"

static axp_device *ocl;
static axp_pool *pool;
static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(void) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        return (uint32_t) (rng >> 32);
}

/* uniform in [-1, 1) */
static float frnd(void) {
        return (float) rnd() / 2147483648.0f - 1.0f;
}

/* Rows of k values meant to catch every way a quantizer can differ: plain random rows of
 * several magnitudes, blocks of zeros, blocks whose scaled values fall on .5 exactly (the
 * largest magnitude is 127, so the scale is 1 or -1, and the others are n + 0.5), blocks where
 * +m and -m are both the largest magnitude (Q8_K takes the sign of the first), values on ties
 * between two halves, half subnormals and values that overflow a half. */
static void fill_rows(float *x, int n, int k, int unit) {
        for (int t = 0; t < n; t++) {
                float *row = x + (size_t) t * k;
                const float mag = ldexpf(1.0f, (int) (rnd() % 40) - 20);
                for (int i = 0; i < k; i++)
                        row[i] = frnd() * mag;
                for (int b = 0; b < k / unit; b++) {
                        float *blk = row + b * unit;
                        switch ((t + b) % 7) {
                        case 0: /* zeros */
                                memset(blk, 0, (size_t) unit * sizeof(float));
                                break;
                        case 1: /* ties at .5 after scaling by +-1 */
                                for (int i = 0; i < unit; i++)
                                        blk[i] = (float) ((int) (rnd() % 253) - 126) +
                                                 (rnd() & 1 ? 0.5f : -0.5f);
                                blk[rnd() % unit] = rnd() & 1 ? 127.0f : -127.0f;
                                for (int i = 0; i < unit; i++)
                                        if (fabsf(blk[i]) > 127.0f)
                                                blk[i] = copysignf(126.5f, blk[i]);
                                break;
                        case 2: { /* +m and -m both largest; the order varies */
                                const float m = 3.0f * mag;
                                int i0 = (int) (rnd() % unit), i1 = (int) (rnd() % unit);
                                if (i1 == i0)
                                        i1 = (i0 + 1) % unit;
                                blk[i0] = m;
                                blk[i1] = -m;
                                break;
                        }
                        case 3: /* ties between halves, half subnormals, overflow */
                                for (int i = 0; i < unit; i++) {
                                        const int e = (int) (rnd() % 40) - 24;
                                        const float h =
                                                ldexpf(1.0f + (float) (rnd() % 1024) / 1024.0f, e);
                                        switch (rnd() % 5) {
                                        case 0:
                                                blk[i] = h + ldexpf(1.0f, e - 11);
                                                break;
                                        case 1:
                                                blk[i] = ldexpf((float) (rnd() % 64) + 0.5f, -24);
                                                break;
                                        case 2:
                                                blk[i] = 65504.0f + 16.0f * (float) (rnd() % 2);
                                                break;
                                        default:
                                                blk[i] = h;
                                                break;
                                        }
                                        if (rnd() & 1)
                                                blk[i] = -blk[i];
                                }
                                break;
                        case 4: /* a single non-zero value */
                                memset(blk, 0, (size_t) unit * sizeof(float));
                                blk[rnd() % unit] = frnd() * mag;
                                break;
                        default:
                                break;
                        }
                }
        }
}

static bool same_bits(float a, float b) {
        return memcmp(&a, &b, sizeof(float)) == 0;
}

/* The device's activations for weights of `type` against a CPU quantizer (fn) of `kind`. */
static int compare_act(uint32_t type, enum axp_act_kind kind, axp_quant_fn fn, const float *x,
                       int n, int k, const char *what) {
        const int nb = kind == AXP_ACT_Q8_K ? k / QK_K : k / QK8_0;
        int8_t *q = malloc((size_t) n * k);
        float *d = malloc((size_t) n * nb * sizeof(float)),
              *f = malloc((size_t) n * k * sizeof(float));
        /* int16 sums of 32 (Q8_K) or float Q8_1 sums (Q8_0) */
        void *s = malloc((size_t) n * (k / 32) * sizeof(float));
        uint8_t *row = aligned_alloc(64, axp_act_stride(kind, k));
        axp_error err = { 0 };
        int bad = 0;
        CHECK_MSG(axp_opencl_act(ocl, type, x, n, k, q, d, s, f, &err) == 0, "%s", err.msg);
        for (int t = 0; t < n && !test_case_failed_; t++) {
                fn(x + (size_t) t * k, k, row);
                for (int b = 0; b < nb; b++) {
                        if (kind == AXP_ACT_Q8_0) {
                                bad += !same_bits(d[t * nb + b], act_q8_0_d(row, b));
                                bad += memcmp(q + (size_t) t * k + b * 32, act_q8_0_qs(row, b),
                                              32) != 0;
                                bad += !same_bits(((const float *) s)[t * nb + b], act_q8_0_s(row, b));
                        } else if (kind == AXP_ACT_Q8_K) {
                                bad += !same_bits(d[t * nb + b], act_q8_K_d(row, b));
                                bad += memcmp(q + (size_t) t * k + b * 256, act_q8_K_qs(row, b),
                                              256) != 0;
                                bad += memcmp((const int16_t *) s + t * (k / 32) + b * 8,
                                              act_q8_K_bs32(row, b), 16) != 0;
                        }
                        if (bad) {
                                CHECK_MSG(!bad, "%s, %s: row %d block %d differs",
                                          axp_type_traits_get(type)->name, what, t, b);
                                break;
                        }
                }
                if (kind == AXP_ACT_F16)
                        for (int i = 0; i < k && !bad; i++)
                                if (!same_bits(f[(size_t) t * k + i], ((const float *) row)[i])) {
                                        bad++;
                                        CHECK_MSG(0, "%s, %s: row %d value %d: %a vs %a",
                                                  axp_type_traits_get(type)->name, what, t, i,
                                                  f[(size_t) t * k + i], ((const float *) row)[i]);
                                }
        }
        free(q);
        free(d);
        free(f);
        free(s);
        free(row);
        return bad;
}

static void test_activations_bit_exact(void) {
        static const struct {
                uint32_t type;
                enum axp_act_kind kind;
                axp_quant_fn ref;
        } cases[] = {
                { AXP_TYPE_Q8_0, AXP_ACT_Q8_0, axp_quant_act_q8_0 },
                { AXP_TYPE_Q4_0, AXP_ACT_Q8_0, axp_quant_act_q8_0 },
                { AXP_TYPE_Q4_1, AXP_ACT_Q8_0, axp_quant_act_q8_0 },
                { AXP_TYPE_Q5_0, AXP_ACT_Q8_0, axp_quant_act_q8_0 },
                { AXP_TYPE_Q5_1, AXP_ACT_Q8_0, axp_quant_act_q8_0 },
                { AXP_TYPE_IQ4_NL, AXP_ACT_Q8_0, axp_quant_act_q8_0 },
                { AXP_TYPE_Q4_K, AXP_ACT_Q8_K, axp_quant_act_q8_K },
                { AXP_TYPE_Q5_K, AXP_ACT_Q8_K, axp_quant_act_q8_K },
                { AXP_TYPE_Q6_K, AXP_ACT_Q8_K, axp_quant_act_q8_K },
                { AXP_TYPE_F16, AXP_ACT_F16, axp_quant_act_f16 },
        };
        const int n = 61, k = 1024;
        float *x = malloc((size_t) n * k * sizeof(float));
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                fill_rows(x, n, k, cases[i].kind == AXP_ACT_Q8_K ? QK_K : QK8_0);
                /* the reference quantizers, and the path the CPU runs on this machine */
                compare_act(cases[i].type, cases[i].kind, cases[i].ref, x, n, k, "reference");
                compare_act(cases[i].type, cases[i].kind, axp_cpu_ops_get()->quant[cases[i].kind],
                            x, n, k, axp_cpu_isa());
        }
        free(x);
}

static double rel_diff(const float *a, const float *b, size_t n) {
        double md = 0, mb = 0;
        for (size_t i = 0; i < n; i++) {
                if (!isfinite(a[i]))
                        return INFINITY;
                md = fmax(md, fabs(a[i] - b[i]));
                mb = fmax(mb, fabs(b[i]));
        }
        return md / fmax(mb, 1e-30);
}

/* One weight of each type: the device's product against the CPU's, for several token counts
 * (decode, a partial token tile, prefill). */
static void test_products_match_cpu(void) {
        static const char *const types[] = { "f32",  "f16",  "bf16", "q8_0",   "q4_0", "q4_1",
                                             "q5_0", "q5_1", "q4_k", "q5_k", "q6_k", "iq4_nl" };
        const int n_in = 768, n_out = 83, toks[] = { 1, 3, 8, 21 };
        float *wf = malloc((size_t) n_in * n_out * sizeof(float));
        float *x = malloc((size_t) 21 * n_in * sizeof(float));
        float *ya = malloc((size_t) 21 * n_out * sizeof(float)),
              *yb = malloc((size_t) 21 * n_out * sizeof(float));
        for (size_t i = 0; i < (size_t) n_in * n_out; i++)
                wf[i] = frnd() * 0.05f;
        for (size_t i = 0; i < (size_t) 21 * n_in; i++)
                x[i] = frnd() + (i % 97 == 0 ? 8.0f : 0.0f); /* some outliers, as in real rows */
        for (size_t ti = 0; ti < ELEMENTSOF(types); ti++) {
                const uint32_t type = (uint32_t) axp_type_from_name(types[ti]);
                const uint64_t rb = axp_type_row_size(type, n_in);
                uint8_t *data = malloc(rb * n_out);
                for (int r = 0; r < n_out; r++)
                        axp_quantize_row(type, wf + (size_t) r * n_in, data + r * rb, n_in);
                axp_weight w = { .name = types[ti],
                                 .type = type,
                                 .n_in = n_in,
                                 .n_out = n_out,
                                 .row_bytes = rb,
                                 .data = data };
                double worst = 0;
                for (size_t j = 0; j < ELEMENTSOF(toks); j++) {
                        const int n = toks[j];
                        axp_error err = { 0 };
                        const axp_weight *ws[] = { &w };
                        float *ys[] = { ya };
                        long ldy[] = { n_out };
                        axp_cpu_matmul(pool, 1, ws, x, n_in, ys, ldy, n);
                        CHECK_MSG(axp_opencl_matmul(ocl, &w, x, n, yb, 1, NULL, &err) == 0, "%s",
                                  err.msg);
                        worst = fmax(worst, rel_diff(yb, ya, (size_t) n * n_out));
                }
                printf("  %s: OpenCL vs CPU max relative difference %.2e\n", types[ti], worst);
                /* the same products up to the order of the float additions */
                CHECK_MSG(worst <= 2e-6, "%s: %g", types[ti], worst);
                free(data);
        }
        free(wf);
        free(x);
        free(ya);
        free(yb);
}

int main(void) {
        axp_error err = { 0 };
        int r = axp_device_open("opencl", 1, &ocl, &err);
        if (r == -ENODEV)
                TEST_SKIP("%s", err.msg);
        if (r < 0) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
        }
        pool = axp_pool_new(1);
        printf("%s; CPU path %s\n", axp_device_name(ocl), axp_cpu_isa());
        RUN(test_activations_bit_exact);
        RUN(test_products_match_cpu);
        axp_pool_free(pool);
        axp_device_free(ocl);
        TEST_EXIT();
}
