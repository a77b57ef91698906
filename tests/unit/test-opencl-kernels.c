/* SPDX-License-Identifier: MIT */
/* The OpenCL matrix products take their activations exactly as the CPU kernels do, so that
 * the two devices are interchangeable under the scheduler: the activations quantized on the
 * device (Q8_0 and Q8_K blocks, f16 rounding) equal the CPU's reference quantizers bit for bit
 * (scales, int8 values, sums) on random rows, rounding ties and blocks of zeros, and every
 * product equals the CPU's up to the order in which the per-block float terms are added; and a
 * mixture of experts' FFN (qwen3moe's K3) runs on the device, its logits those of the CPU's,
 * for experts of every kind of weights, and on the CPU where AXP_OPENCL_MOE=cpu says so. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cpu/cpu.h"
#include "devices/discovery.h"
#include "devices/forward.h"
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
                for (int i = 0; i < k && !bad && (kind == AXP_ACT_F16 || kind == AXP_ACT_BF16); i++) {
                        float want = kind == AXP_ACT_F16 ? ((const float *) row)[i]
                                                         : axp_bf16_to_f32(((const axp_bf16 *) row)[i]);
                        if (!same_bits(f[(size_t) t * k + i], want)) {
                                bad++;
                                CHECK_MSG(0, "%s, %s: row %d value %d: %a vs %a",
                                          axp_type_traits_get(type)->name, what, t, i,
                                          f[(size_t) t * k + i], want);
                        }
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
                { AXP_TYPE_Q2_K, AXP_ACT_Q8_K, axp_quant_act_q8_K },
                { AXP_TYPE_Q3_K, AXP_ACT_Q8_K, axp_quant_act_q8_K },
                { AXP_TYPE_IQ4_XS, AXP_ACT_Q8_K, axp_quant_act_q8_K },
                { AXP_TYPE_F16, AXP_ACT_F16, axp_quant_act_f16 },
                { AXP_TYPE_BF16, AXP_ACT_BF16, axp_quant_act_bf16 },
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
                                             "q5_0", "q5_1", "q4_k", "q5_k", "q6_k", "iq4_nl",
                                             "q2_k", "q3_k", "iq4_xs" };
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

/* A qwen3moe model of `type` from mkmodel: 8 experts, 2 per token, so that the tokens of a
 * prefill share some experts and not others and an expert takes more than one block of
 * rows. */
static axp_model *moe_model(const char *dir, const char *type) {
        char path[512], cmd[1536];
        snprintf(path, sizeof(path), "%s/qwen3moe-%s.gguf", dir, type);
        snprintf(cmd, sizeof(cmd),
                 "'%s' mkmodel --arch qwen3moe --type %s --dim 256 --layers 2 --heads 4 "
                 "--kv-heads 2 --ffn 256 --experts 8 --experts-used 2 --ctx 128 --seed 5 "
                 "-o '%s' >/dev/null",
                 getenv("AXP_CLI"), type, path);
        axp_model *m = NULL;
        axp_error err = { 0 };
        if (system(cmd) != 0 || axp_model_load(path, &m, &err) < 0) {
                fprintf(stderr, "%s: %s\n", cmd, err.msg);
                return NULL;
        }
        return m;
}

/* Prefill of 45 tokens in chunks of 32, then two decode steps, on d: the logits of each step. */
static void moe_run(axp_device *d, axp_model *m, float *logits) {
        const int nv = m->hp.n_vocab;
        int32_t toks[47];
        for (int i = 0; i < 47; i++)
                toks[i] = (int32_t) ((i * 7919u + 13u) % (unsigned) nv);
        axp_seq s;
        axp_error err = { 0 };
        CHECK_MSG(axp_device_prepare(d, m, &err) == 0, "%s", err.msg);
        CHECK(axp_seq_init(&s, m, AXP_TYPE_F32, 128, 32, &err) == 0);
        CHECK_MSG(axp_forward_prefill(d, &s, toks, 45, 32, &err) == 0, "%s", err.msg);
        memcpy(logits, s.logits, (size_t) nv * sizeof(float));
        for (int i = 0; i < 2; i++) {
                CHECK_MSG(axp_forward_decode(d, &(axp_seq *) { &s }, &toks[45 + i], 1, &err) == 0,
                          "%s", err.msg);
                memcpy(logits + (size_t) (i + 1) * nv, s.logits, (size_t) nv * sizeof(float));
        }
        axp_seq_free(&s);
}

static void test_moe_matches_cpu(void) {
        if (!getenv("AXP_CLI")) {
                printf("  skipped: AXP_CLI is not set\n");
                return;
        }
        static const char *const types[] = { "f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q6_k" };
        char dir[] = "/tmp/axp-test-opencl-moe-XXXXXX";
        CHECK(mkdtemp(dir) != NULL);
        axp_device *cpu = NULL;
        axp_error err = { 0 };
        CHECK(axp_device_open("cpu", 1, &cpu, &err) == 0);
        for (size_t ti = 0; cpu && ti < ELEMENTSOF(types); ti++) {
                axp_model *m = moe_model(dir, types[ti]);
                CHECK_MSG(m != NULL, "%s", types[ti]);
                if (!m)
                        continue;
                const size_t nv = (size_t) m->hp.n_vocab;
                float *a = malloc(3 * nv * sizeof(float)), *b = malloc(3 * nv * sizeof(float)),
                      *f = malloc(3 * nv * sizeof(float));
                moe_run(ocl, m, a);
                CHECK_MSG(axp_opencl_moe_on_device(ocl), "%s: the experts ran on the CPU", types[ti]);
                moe_run(cpu, m, b);
                setenv("AXP_OPENCL_MOE", "cpu", 1);
                moe_run(ocl, m, f);
                CHECK(!axp_opencl_moe_on_device(ocl));
                unsetenv("AXP_OPENCL_MOE");
                const double moe = rel_diff(a, f, 3 * nv), cpu_d = rel_diff(a, b, 3 * nv),
                             cpu_f = rel_diff(f, b, 3 * nv);
                printf("  qwen3moe %s: logits with the experts on the device vs on the CPU: max "
                       "relative difference %.2e; vs the CPU device's %.2e (experts on the CPU: "
                       "%.2e)\n", types[ti], moe, cpu_d, cpu_f);
                /* the experts' products' float terms added in another order, nothing more: a
                 * kernel bug, or another expert picked, moves logits by far more. F16 weights
                 * take their activations rounded to halves, where a difference of 1e-7 in a
                 * residual row can move a value by half an f16 step (4.9e-4) in the next layer;
                 * BF16 weights to bf16, whose step is 8 times as large */
                const double tol = strcmp(types[ti], "f16") == 0 ? 2e-3 : strcmp(types[ti], "bf16") == 0 ? 1.6e-2 : 1e-4;
                CHECK_MSG(moe <= tol, "%s: %g", types[ti], moe);
                /* the other kernels differ from the CPU's as they do without experts (float
                 * reductions in -gpu-paths) */
                CHECK_MSG(cpu_d <= 2 * cpu_f + 1e-4, "%s: %g (%g)", types[ti], cpu_d, cpu_f);
                axp_device_prepare(ocl, NULL, NULL);
                axp_device_prepare(cpu, NULL, NULL);
                axp_model_free(m);
                free(a);
                free(b);
                free(f);
        }
        axp_device_free(cpu);
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        CHECK(system(cmd) == 0);
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
        RUN(test_moe_matches_cpu);
        axp_pool_free(pool);
        axp_device_free(ocl);
        TEST_EXIT();
}
