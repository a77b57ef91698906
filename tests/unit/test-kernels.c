/* SPDX-License-Identifier: MIT */
/* CPU kernels against double-precision references, on every instruction-set path this machine
 * has, with 1, 2 and 3 threads.
 *
 * Matrix products are checked two ways. (1) Against the exact product of the dequantized
 * weights with the float activations: the error bound is derived from the 8-bit activation
 * quantization itself, sum_k |w_k| |x_k - xq_k|, plus float rounding. (2) Against the product
 * with the activations quantized by an independent implementation of llama.cpp's rules in this
 * file: only float rounding may differ, so a wrong scale, offset or rounding rule shows up.
 * Results must be bit-identical across thread counts, token batching, multi-weight calls and
 * prepared/unprepared weights. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <dirent.h>
#if defined(__x86_64__)
#include <cpuid.h>
#include <xmmintrin.h>
#endif
#include <sys/syscall.h>
#include <unistd.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/pool.h"
#include "test.h"
#include "kernels/types.h"
#include "base/util.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        return (uint32_t) (rng >> 16);
}
static float frand(void) { /* uniform in [-1, 1) */
        return (float) (rnd() & 0xffffff) / (float) (1 << 23) - 1.0f;
}
static float gauss(void) {
        float s = 0;
        for (int i = 0; i < 4; i++)
                s += frand();
        return s * 0.866f;
}

static const uint32_t all_types[] = {
        AXP_TYPE_F32,  AXP_TYPE_F16,  AXP_TYPE_BF16,   AXP_TYPE_Q8_0, AXP_TYPE_Q4_0, AXP_TYPE_Q4_1,
        AXP_TYPE_Q5_0, AXP_TYPE_Q5_1, AXP_TYPE_IQ4_NL, AXP_TYPE_Q4_K, AXP_TYPE_Q5_K, AXP_TYPE_Q6_K,
        AXP_TYPE_Q2_K, AXP_TYPE_Q3_K, AXP_TYPE_IQ4_XS,
};
static const char *const all_isas[] = { "generic", "avx2", "avx-vnni", "avx512", "amx" };

typedef struct test_weight {
        axp_weight w;
        void *raw;
        float *deq; /* [n_out][n_in] */
} test_weight;

/* tw->w over tw->raw: rows of n_in inputs in type, as a GGUF file holds them */
static void weight_wrap(test_weight *tw, uint32_t type, int64_t n_in, int64_t n_out) {
        tw->w = (axp_weight) {
                .name = "test",
                .type = type,
                .n_in = n_in,
                .n_out = n_out,
                .row_bytes = axp_type_row_size(type, n_in),
                .data = tw->raw,
        };
}

static void weight_make(test_weight *tw, uint32_t type, int64_t n_in, int64_t n_out) {
        memset(tw, 0, sizeof(*tw));
        uint64_t rb = axp_type_row_size(type, n_in);
        tw->raw = malloc(rb * n_out);
        tw->deq = malloc(sizeof(float) * n_in * n_out);
        float *row = malloc(sizeof(float) * n_in);
        for (int64_t r = 0; r < n_out; r++) {
                /* rows of different scales, sub-blocks of different scales, a few outliers */
                float rs = 0.02f * (1.0f + (float) (r % 7));
                for (int64_t i = 0; i < n_in; i++) {
                        float sub = 0.5f + (float) ((i / 32 + r) % 5) * 0.4f;
                        row[i] = gauss() * rs * sub;
                        if (rnd() % 97 == 0)
                                row[i] *= 6.0f;
                }
                axp_quantize_row(type, row, (uint8_t *) tw->raw + r * rb, n_in);
                axp_dequantize_row(type, (uint8_t *) tw->raw + r * rb, tw->deq + r * n_in, n_in);
        }
        free(row);
        weight_wrap(tw, type, n_in, n_out);
}

static void weight_free(test_weight *tw) {
        axp_cpu_weight_release(&tw->w);
        free(tw->raw);
        free(tw->deq);
}

static float *make_x(int64_t n_in, int n_tok, long ldx) {
        float *x = calloc((size_t) ldx * n_tok, sizeof(float));
        for (int t = 0; t < n_tok; t++)
                for (int64_t i = 0; i < n_in; i++) {
                        x[t * ldx + i] = gauss() * (1.0f + (float) (t % 3));
                        if (rnd() % 61 == 0)
                                x[t * ldx + i] *= 8.0f;
                        if ((i / 32) % 23 == 5 && t % 4 == 1)
                                x[t * ldx + i] = 0; /* an all-zero block */
                }
        return x;
}

/* llama.cpp's activation rules, written independently of the kernels. Q8_0 blocks also give
 * ds[b] = s - d * sum(q): how far the Q8_1 sum s = f16(amax / 127 * sum(q)), which the
 * minimum of a Q4_1/Q5_1 block multiplies, is from the exact sum of the block's xq. */
static void ref_act_q8_0(const float *x, int64_t n, float *xq, double *ds) {
        for (int64_t b = 0; b < n; b += 32) {
                float amax = 0;
                for (int j = 0; j < 32; j++)
                        amax = fmaxf(amax, fabsf(x[b + j]));
                float d = axp_f16_to_f32(axp_f32_to_f16(amax / 127.0f));
                float id = amax != 0 ? 127.0f / amax : 0.0f;
                int sum = 0;
                for (int j = 0; j < 32; j++) {
                        xq[b + j] = d * nearbyintf(x[b + j] * id);
                        sum += (int) nearbyintf(x[b + j] * id);
                }
                float s = axp_f16_to_f32(axp_f32_to_f16(amax / 127.0f * (float) sum));
                if (ds)
                        ds[b / 32] = (double) s - (double) d * sum;
        }
}

/* The minimum of block b of a Q4_1/Q5_1 row (0 for other types). */
static double block_min(uint32_t type, const uint8_t *row, int64_t b) {
        if (type == AXP_TYPE_Q4_1)
                return axp_f16_to_f32(((const block_q4_1 *) row)[b].m);
        if (type == AXP_TYPE_Q5_1)
                return axp_f16_to_f32(((const block_q5_1 *) row)[b].m);
        return 0;
}

static void ref_act_q8_K(const float *x, int64_t n, float *xq) {
        for (int64_t b = 0; b < n; b += 256) {
                float amax = 0, max = 0;
                for (int j = 0; j < 256; j++)
                        if (fabsf(x[b + j]) > amax) {
                                amax = fabsf(x[b + j]);
                                max = x[b + j];
                        }
                if (amax == 0) {
                        memset(xq + b, 0, 256 * sizeof(float));
                        continue;
                }
                float iscale = -127.0f / max, d = 1.0f / iscale;
                for (int j = 0; j < 256; j++)
                        xq[b + j] = d * fminf(127.0f, nearbyintf(iscale * x[b + j]));
        }
}

static void ref_act(uint32_t type, const float *x, int64_t n, float *xq, double *ds) {
        switch (type) {
        case AXP_TYPE_Q8_0:
        case AXP_TYPE_Q4_0:
        case AXP_TYPE_Q4_1:
        case AXP_TYPE_Q5_0:
        case AXP_TYPE_Q5_1:
        case AXP_TYPE_IQ4_NL:
                ref_act_q8_0(x, n, xq, ds);
                break;
        case AXP_TYPE_Q2_K:
        case AXP_TYPE_Q3_K:
        case AXP_TYPE_Q4_K:
        case AXP_TYPE_Q5_K:
        case AXP_TYPE_Q6_K:
        case AXP_TYPE_IQ4_XS:
                ref_act_q8_K(x, n, xq);
                break;
        case AXP_TYPE_F16:
                for (int64_t i = 0; i < n; i++)
                        xq[i] = axp_f16_to_f32(axp_f32_to_f16(x[i]));
                break;
        case AXP_TYPE_BF16: {
                /* llama.cpp's rounding, to nearest even (these tests' values are finite) */
                for (int64_t i = 0; i < n; i++) {
                        uint32_t u;
                        memcpy(&u, &x[i], 4);
                        u = (u + 0x7fff + ((u >> 16) & 1)) & 0xffff0000u;
                        memcpy(&xq[i], &u, 4);
                }
                break;
        }
        default:
                memcpy(xq, x, n * sizeof(float));
                break;
        }
}

typedef struct err_stats {
        double exact_rel;  /* max |y - exact| / sum |w||x| */
        double exact_frac; /* max |y - exact| / derived bound */
        double quant_rel;  /* max |y - yq| / sum |w||xq| */
} err_stats;
static err_stats type_err[AXP_TYPE__MAX];

/* y [n_tok][ldy] against both references */
static void check_product(const test_weight *tw, const float *x, long ldx, int n_tok, const float *y,
                          long ldy) {
        int64_t n_in = tw->w.n_in;
        uint32_t type = tw->w.type;
        float *xq = malloc(sizeof(float) * n_in);
        double *ds = calloc((size_t) n_in / 32, sizeof(double));
        err_stats *es = &type_err[type];
        int bad = 0;
        for (int t = 0; t < n_tok; t++) {
                const float *xt = x + t * ldx;
                ref_act(type, xt, n_in, xq, ds);
                for (int64_t r = 0; r < tw->w.n_out; r++) {
                        const float *w = tw->deq + r * n_in;
                        double exact = 0, yq = 0, abs_x = 0, abs_xq = 0, bound = 0;
                        for (int64_t i = 0; i < n_in; i++) {
                                exact += (double) w[i] * xt[i];
                                yq += (double) w[i] * xq[i];
                                abs_x += fabs((double) w[i] * xt[i]);
                                abs_xq += fabs((double) w[i] * xq[i]);
                                bound += fabs((double) w[i]) * fabs((double) xt[i] - xq[i]);
                        }
                        /* Q4_1/Q5_1: the minimum times the f16 sum s, as llama.cpp's Q8_1 */
                        const uint8_t *raw = (const uint8_t *) tw->raw + r * tw->w.row_bytes;
                        for (int64_t b = 0; b < n_in / 32 && (type == AXP_TYPE_Q4_1 || type == AXP_TYPE_Q5_1); b++) {
                                double m = block_min(type, raw, b);
                                yq += m * ds[b];
                                bound += fabs(m * ds[b]);
                        }
                        double got = y[t * ldy + r];
                        /* float accumulation: a few ulps of the magnitudes summed */
                        double fl = 2e-6 * abs_xq + 1e-30;
                        double e_exact = fabs(got - exact), e_q = fabs(got - yq);
                        if (!(e_exact <= bound + fl) || !(e_q <= fl)) {
                                if (bad++ < 3)
                                        fprintf(stderr, "  %s n_in %lld row %lld tok %d: got %.9g exact %.9g (bound %.3g) "
                                                "quantized-ref %.9g (tol %.3g)\n",
                                                axp_type_traits_get(type)->name, (long long) n_in, (long long) r, t,
                                                got, exact, bound + fl, yq, fl);
                        }
                        if (abs_x > 0)
                                es->exact_rel = fmax(es->exact_rel, e_exact / abs_x);
                        if (bound + fl > 0)
                                es->exact_frac = fmax(es->exact_frac, e_exact / (bound + fl));
                        if (abs_xq > 0)
                                es->quant_rel = fmax(es->quant_rel, e_q / abs_xq);
                }
        }
        CHECK_MSG(bad == 0, "%d outputs out of tolerance", bad);
        free(ds);
        free(xq);
}

static bool bits_equal(const float *a, const float *b, int n_tok, long ld, int64_t n_out) {
        for (int t = 0; t < n_tok; t++)
                if (memcmp(a + t * ld, b + t * ld, n_out * sizeof(float)) != 0)
                        return false;
        return true;
}

/* check_product, saying whether this product failed (a failure still fails the test) */
static bool product_fails(const test_weight *tw, const float *x, long ldx, int n_tok, const float *y, long ldy) {
        int before = test_case_failed_;
        test_case_failed_ = 0;
        check_product(tw, x, ldx, n_tok, y, ldy);
        bool failed = test_case_failed_;
        test_case_failed_ |= before;
        return failed;
}

static float *run_matmul(axp_pool *pool, const axp_weight *w, const float *x, long ldx, int n_tok,
                         long ldy) {
        float *y = malloc(sizeof(float) * ldy * n_tok);
        for (long i = 0; i < ldy * n_tok; i++)
                y[i] = NAN;
        const axp_weight *ws[1] = { w };
        float *ys[1] = { y };
        long ldys[1] = { ldy };
        axp_cpu_matmul(pool, 1, ws, x, ldx, ys, ldys, n_tok);
        return y;
}

static axp_pool *pools[4]; /* 1, 2, 3 threads at [1..3] */

static const struct { int n_in, n_out, n_tok; } shapes[] = {
        { 256, 17, 1 }, { 256, 100, 3 }, { 512, 1, 3 }, { 512, 33, 17 }, { 1024, 64, 64 },
        { 4096, 48, 3 }, { 1536, 40, 300 }, { 768, 257, 9 },
        /* two and four tokens (requests decoded together): both halves of a group in one pass
         * (three: the shapes above) */
        { 512, 40, 2 }, { 512, 40, 4 },
        /* a last group of 13 rows: tiles over both halves with the second one part-filled */
        { 256, 29, 6 },
        /* rows that are not a multiple of 256, as in the fallback tensors of Q4_K_M files of
         * 896- and 576-wide models (the 32-element block types only) */
        { 96, 20, 5 }, { 896, 40, 9 }, { 576, 33, 40 },
        /* an odd number of inputs (float weights only): BF16's last pair half padding */
        { 97, 21, 5 }, { 331, 18, 2 },
};

static bool isa_use(const char *isa) {
        return axp_cpu_set_isa(isa);
}

static void test_matmul_types(void) {
        for (size_t ii = 0; ii < ELEMENTSOF(all_isas); ii++) {
                if (!isa_use(all_isas[ii]))
                        continue;
                for (size_t ti = 0; ti < ELEMENTSOF(all_types); ti++) {
                        uint32_t type = all_types[ti];
                        for (size_t si = 0; si < ELEMENTSOF(shapes); si++) {
                                int n_in = shapes[si].n_in, n_out = shapes[si].n_out, n_tok = shapes[si].n_tok;
                                if (n_in % axp_type_traits_get(type)->blck != 0)
                                        continue;
                                /* the portable path is slow: keep its biggest shapes for the types
                                 * whose code differs most */
                                if (strcmp(all_isas[ii], "generic") == 0 && n_tok == 300 && type == AXP_TYPE_BF16)
                                        continue;
                                test_weight tw;
                                weight_make(&tw, type, n_in, n_out);
                                long ldx = n_in + 5, ldy = n_out + 3;
                                float *x = make_x(n_in, n_tok, ldx);

                                float *y1 = run_matmul(pools[1], &tw.w, x, ldx, n_tok, ldy);
                                check_product(&tw, x, ldx, n_tok, y1, ldy);
                                float *y2 = run_matmul(pools[2], &tw.w, x, ldx, n_tok, ldy);
                                CHECK_MSG(bits_equal(y1, y2, n_tok, ldy, n_out), "%s %s: 1 vs 2 threads differ",
                                          all_isas[ii], axp_type_traits_get(type)->name);
                                CHECK_EQ_INT(axp_cpu_weight_prepare(&tw.w), 0);
                                float *y3 = run_matmul(pools[3], &tw.w, x, ldx, n_tok, ldy);
                                CHECK_MSG(bits_equal(y1, y3, n_tok, ldy, n_out),
                                          "%s %s: prepared (3 threads) vs unprepared differ", all_isas[ii],
                                          axp_type_traits_get(type)->name);
                                /* padding columns of y are never written */
                                for (int t = 0; t < n_tok; t++)
                                        for (long c = n_out; c < ldy; c++)
                                                CHECK(isnan(y3[t * ldy + c]));
                                free(y1);
                                free(y2);
                                free(y3);
                                free(x);
                                weight_free(&tw);
                        }
                }
                printf("  %s: max error / sum|w x|: ", all_isas[ii]);
                for (size_t ti = 0; ti < ELEMENTSOF(all_types); ti++) {
                        err_stats *e = &type_err[all_types[ti]];
                        printf("%s %.2g (%.0f%% of bound), vs quantized-activation ref %.2g; ",
                               axp_type_traits_get(all_types[ti])->name, e->exact_rel, 100 * e->exact_frac,
                               e->quant_rel);
                        memset(e, 0, sizeof(*e));
                }
                printf("\n");
        }
}

/* Weights whose quants are all at one byte pattern (0xff: every nibble 15, every Q5_K and Q6_K
 * value 31 and 63, every 6-bit scale 63; 0x80 and 0x7f: Q8_0's extremes; 0x88, 0x11: sign mixes)
 * against activations that all quantize to +-127: the largest integer sums any kernel forms,
 * so an s16 partial sum that can overflow, or a saturating vpmaddubsw pair, shows here as a
 * result far out of tolerance. Only the block's float fields are set apart (small scales). */
static void weight_fill(test_weight *tw, uint32_t type, int64_t n_in, int64_t n_out, uint8_t byte) {
        memset(tw, 0, sizeof(*tw));
        const axp_type_traits *tt = axp_type_traits_get(type);
        uint64_t rb = axp_type_row_size(type, n_in), nb = rb * n_out / tt->bytes;
        tw->raw = malloc(rb * n_out);
        memset(tw->raw, byte, rb * n_out);
        axp_f16 d = axp_f32_to_f16(0.01f), m = axp_f32_to_f16(0.003f);
        for (uint64_t b = 0; b < nb; b++) {
                uint8_t *blk = (uint8_t *) tw->raw + b * tt->bytes;
#define SET(T, F, V) memcpy(blk + offsetof(T, F), &(V), sizeof(axp_f16))
                switch (type) {
                case AXP_TYPE_Q8_0: SET(block_q8_0, d, d); break;
                case AXP_TYPE_Q4_0: SET(block_q4_0, d, d); break;
                case AXP_TYPE_Q5_0: SET(block_q5_0, d, d); break;
                case AXP_TYPE_IQ4_NL: SET(block_iq4_nl, d, d); break;
                case AXP_TYPE_IQ4_XS: SET(block_iq4_xs, d, d); break;
                case AXP_TYPE_Q3_K: SET(block_q3_K, d, d); break;
                case AXP_TYPE_Q6_K: SET(block_q6_K, d, d); break;
                case AXP_TYPE_Q4_1: SET(block_q4_1, d, d); SET(block_q4_1, m, m); break;
                case AXP_TYPE_Q5_1: SET(block_q5_1, d, d); SET(block_q5_1, m, m); break;
                case AXP_TYPE_Q2_K: SET(block_q2_K, d, d); SET(block_q2_K, dmin, m); break;
                case AXP_TYPE_Q4_K: SET(block_q4_K, d, d); SET(block_q4_K, dmin, m); break;
                case AXP_TYPE_Q5_K: SET(block_q5_K, d, d); SET(block_q5_K, dmin, m); break;
                default: break;
                }
#undef SET
        }
        tw->deq = malloc(sizeof(float) * n_in * n_out);
        for (int64_t r = 0; r < n_out; r++)
                axp_dequantize_row(type, (uint8_t *) tw->raw + r * rb, tw->deq + r * n_in, n_in);
        weight_wrap(tw, type, n_in, n_out);
}

static void test_matmul_extremes(void) {
        static const uint8_t patterns[] = { 0xff, 0x80, 0x7f, 0x88, 0x11 };
        /* decode (1, 2 tokens: both halves at once) and prefill tiles (4; 6: a tile of 4 and a
         * rest of 2; 8: Q6_K's wide tile) */
        const int n_in = 512, n_out = 24, n_tok_max = 8;
        const long ldx = n_in, ldy = n_out;
        float *x = malloc(sizeof(float) * ldx * n_tok_max);
        for (int t = 0; t < n_tok_max; t++)
                for (int i = 0; i < n_in; i++)
                        x[t * ldx + i] = (t & 1 ? -1.0f : 1.0f) * (float) (1 + t);
        for (size_t ii = 0; ii < ELEMENTSOF(all_isas); ii++) {
                if (!isa_use(all_isas[ii]))
                        continue;
                for (size_t ti = 0; ti < ELEMENTSOF(all_types); ti++) {
                        uint32_t type = all_types[ti];
                        if (axp_type_traits_get(type)->blck == 1)
                                continue; /* float weights: no integer sums */
                        for (size_t pi = 0; pi < ELEMENTSOF(patterns); pi++)
                                for (int n_tok = 1; n_tok <= n_tok_max; n_tok += 1 + (n_tok >= 2)) {
                                        test_weight tw;
                                        weight_fill(&tw, type, n_in, n_out, patterns[pi]);
                                        float *y = run_matmul(pools[2], &tw.w, x, ldx, n_tok, ldy);
                                        if (product_fails(&tw, x, ldx, n_tok, y, ldy))
                                                printf("    (%s %s, bytes 0x%02x, %d tokens)\n", all_isas[ii],
                                                       axp_type_traits_get(type)->name, patterns[pi], n_tok);
                                        free(y);
                                        weight_free(&tw);
                                }
                }
        }
        free(x);
        for (size_t ti = 0; ti < ELEMENTSOF(all_types); ti++)
                memset(&type_err[all_types[ti]], 0, sizeof(type_err[0]));
}

/* A Q8_0 quant of -128 (which llama.cpp's quantizer never writes, but a file may hold) among
 * others: preparing the weight notices it (no_min8 false, so the product that moves the
 * weight's sign onto the activation is not used), and every path's product is exact for it,
 * prepared and not, one token and more, against activations of both signs. A weight without
 * one is marked no_min8; no other type is (Q5_0's quints take no such product). */
static void test_matmul_q8_0_min(void) {
        const int n_in = 256, n_out = 40, n_tok_max = 3;
        const long ldx = n_in, ldy = n_out;
        float *x = malloc(sizeof(float) * ldx * n_tok_max);
        for (int t = 0; t < n_tok_max; t++)
                for (int i = 0; i < n_in; i++)
                        x[t * ldx + i] = (i + t) % 3 == 0 ? 0.5f : -1.0f - 0.01f * (float) (i % 7);
        for (size_t ii = 0; ii < ELEMENTSOF(all_isas); ii++) {
                if (!isa_use(all_isas[ii]))
                        continue;
                for (int min8 = 0; min8 < 2; min8++) {
                        test_weight tw;
                        weight_make(&tw, AXP_TYPE_Q8_0, n_in, n_out);
                        if (min8) {
                                /* row 37 (the last group, partly padding), input 70, and its
                                 * dequantized copy */
                                block_q8_0 *b = (block_q8_0 *) ((uint8_t *) tw.raw + 37 * tw.w.row_bytes) + 70 / 32;
                                b->qs[70 % 32] = -128;
                                axp_dequantize_row(AXP_TYPE_Q8_0, (uint8_t *) tw.raw + 37 * tw.w.row_bytes,
                                                   tw.deq + 37 * n_in, n_in);
                        }
                        for (int prep = 0; prep < 2; prep++) {
                                if (prep) {
                                        CHECK_EQ_INT(axp_cpu_weight_prepare(&tw.w), 0);
                                        CHECK(((const axp_packed *) tw.w.priv)->no_min8 == !min8);
                                }
                                for (int n_tok = 1; n_tok <= n_tok_max; n_tok++) {
                                        float *y = run_matmul(pools[1], &tw.w, x, ldx, n_tok, ldy);
                                        if (product_fails(&tw, x, ldx, n_tok, y, ldy))
                                                printf("    (%s, %s-128, %s, %d tokens)\n", all_isas[ii],
                                                       min8 ? "one " : "no ", prep ? "prepared" : "unprepared", n_tok);
                                        free(y);
                                }
                        }
                        weight_free(&tw);
                }
        }
        test_weight tw;
        weight_make(&tw, AXP_TYPE_Q5_0, n_in, n_out);
        CHECK_EQ_INT(axp_cpu_weight_prepare(&tw.w), 0);
        CHECK(!((const axp_packed *) tw.w.priv)->no_min8);
        weight_free(&tw);
        free(x);
        memset(&type_err[AXP_TYPE_Q8_0], 0, sizeof(type_err[0]));
}

/* A weight packed by a pool's threads (axp_cpu_weight_prepare_on, as the engine loads a model)
 * holds the same bytes as one packed by the caller alone, for every type, with 1, 2 and 3
 * threads over 8 groups (the last partly padding); a Q8_0 quant of -128 in the last group,
 * which another thread packs, still clears no_min8. */
static void test_weight_prepare_pool(void) {
        const int n_in = 512, n_out = 16 * 7 + 5;
        for (size_t ti = 0; ti < ELEMENTSOF(all_types); ti++) {
                for (int min8 = 0; min8 < (all_types[ti] == AXP_TYPE_Q8_0 ? 2 : 1); min8++) {
                        test_weight tw;
                        weight_make(&tw, all_types[ti], n_in, n_out);
                        if (min8)
                                ((block_q8_0 *) ((uint8_t *) tw.raw + (n_out - 2) * tw.w.row_bytes))[9].qs[3] = -128;
                        CHECK_EQ_INT(axp_cpu_weight_prepare(&tw.w), 0);
                        const axp_packed *ref = tw.w.priv;
                        CHECK(ref->no_min8 == (all_types[ti] == AXP_TYPE_Q8_0 && !min8));
                        for (int np = 1; np <= 3; np++) {
                                axp_weight w = tw.w;
                                w.priv = NULL;
                                CHECK_EQ_INT(axp_cpu_weight_prepare_on(pools[np], &w), 0);
                                const axp_packed *p = w.priv;
                                CHECK_EQ_INT((int) p->n_groups, 8);
                                CHECK(p->group_bytes == ref->group_bytes && p->no_min8 == ref->no_min8);
                                if (memcmp(p->data, ref->data, (size_t) p->n_groups * p->group_bytes) != 0) {
                                        CHECK(!"packed bytes differ");
                                        printf("    (%s, %d threads)\n", axp_type_traits_get(all_types[ti])->name, np);
                                }
                                axp_cpu_weight_release(&w);
                        }
                        weight_free(&tw);
                }
        }
}

/* The AMX path's s8 copy of a packed group (axp_amx_weights_s8), which needs AVX-512 alone and
 * so runs here on any CPU with AVX-512, AMX or not: every quant of Q8_0, Q4_0, IQ4_NL and Q5_0
 * (quints), of 9 blocks (a run of 8 and one more) and 13 rows (3 of padding), is the file's
 * integer weight at its B-tile place (byte 64 v + 4 r + i of a block: input 4 v + i of row
 * r), and each scale the file's. */
static void test_amx_weights_s8(void) {
        static const uint32_t types[] = { AXP_TYPE_Q8_0, AXP_TYPE_Q4_0, AXP_TYPE_IQ4_NL, AXP_TYPE_Q5_0 };
        const int64_t nb = 9, k = nb * 32;
        const int n_rows = 13;
        for (size_t ti = 0; ti < ELEMENTSOF(types); ti++) {
                uint32_t type = types[ti];
                test_weight tw;
                weight_make(&tw, type, k, n_rows);
                size_t gb = axp_pack_group_bytes(type, k);
                uint8_t *g = aligned_alloc(64, gb), *out = aligned_alloc(64, (size_t) nb * 512);
                uint16_t *sc = malloc(sizeof(uint16_t) * nb * 16);
                axp_pack_group(type, tw.raw, tw.w.row_bytes, k, n_rows, g);
                if (!axp_cpu_amx_weights_s8(g, nb, type, out, sc)) {
                        printf("  (no AVX-512: the AMX path's s8 weights not checked)\n");
                        free(g), free(out), free(sc);
                        weight_free(&tw);
                        return;
                }
                const char *name = axp_type_traits_get(type)->name;
                size_t bb = axp_type_traits_get(type)->bytes;
                int bad = 0;
                for (int r = 0; r < n_rows; r++)
                        for (int64_t b = 0; b < nb; b++) {
                                axp_f16 d;
                                memcpy(&d, (const uint8_t *) tw.raw + r * tw.w.row_bytes + b * bb, 2);
                                bad += sc[b * 16 + r] != d;
                                for (int e = 0; e < 32; e++) {
                                        float want = tw.deq[r * k + b * 32 + e] / axp_f16_to_f32(d);
                                        int8_t got = (int8_t) out[b * 512 + (e / 4) * 64 + r * 4 + e % 4];
                                        bad += (float) got != want;
                                }
                        }
                CHECK_MSG(bad == 0, "%s: %d of the AMX path's s8 weights or scales differ from the file's", name, bad);
                free(g), free(out), free(sc);
                weight_free(&tw);
        }
}

/* The feed-forward activation on every path: within a few float ulps of the exact value (in
 * double), over the range activations take and past where e^x leaves the float range, and a
 * value's result the same wherever it sits in the row (vector body or masked tail). */
static void test_glu(void) {
        enum { N = 4099 };
        float *g = malloc(sizeof(float) * N), *u = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * N);
        float *y2 = malloc(sizeof(float) * N);
        for (int i = 0; i < N; i++) {
                /* -120..120, denser near 0, and a few exact zeros */
                double t = (double) (i - N / 2) / (N / 2);
                g[i] = (float) (120.0 * t * t * t + 3.0 * t);
                u[i] = (float) (1.0 + 0.5 * sin(0.1 * i));
        }
        g[N / 2] = 0.0f;
        g[N / 2 + 1] = -0.0f;
        for (size_t ii = 0; ii < ELEMENTSOF(all_isas); ii++) {
                if (!isa_use(all_isas[ii]))
                        continue;
                for (int act = AXP_GLU_SILU; act <= AXP_GLU_GELU_TANH; act++) {
                        memcpy(y, g, sizeof(float) * N);
                        axp_cpu_glu(act, y, u, N);
                        double worst = 0;
                        for (int i = 0; i < N; i++) {
                                /* the sigmoid's argument a: GELU's 1/2 (1 + tanh z) = 1 / (1 + e^-2z),
                                 * without tanh's cancellation; float's rounding of a moves e^-a by
                                 * |a| ulps, hence the tolerance */
                                double x = g[i];
                                double a = act == AXP_GLU_SILU ? x : 2.0 * 0.7978845608 * (x + 0.044715 * x * x * x);
                                double want = x / (1.0 + exp(-a)) * u[i];
                                double tol = act == AXP_GLU_SILU ? 2e-6 : 2e-6 + 2.4e-7 * fabs(a);
                                double err = fabs(y[i] - want) / fmax(fabs(want), 1e-30);
                                if (fabs(want) > 1e-30)
                                        worst = fmax(worst, err / tol);
                                CHECK_MSG(err <= tol || fabs(y[i] - want) <= 1e-33, "%s %s g=%g: %.9g vs %.9g",
                                          all_isas[ii], act == AXP_GLU_SILU ? "silu" : "gelu", (double) g[i],
                                          (double) y[i], want);
                        }
                        /* the same values from other offsets and lengths: bit for bit */
                        for (int off = 1; off < 20; off += 3) {
                                int n = N - off - 7 * off;
                                memcpy(y2, g + off, sizeof(float) * n);
                                axp_cpu_glu(act, y2, u + off, n);
                                CHECK_MSG(memcmp(y2, y + off, sizeof(float) * n) == 0,
                                          "%s: a value's result depends on where it sits", all_isas[ii]);
                        }
                        printf("  %s %s: worst error %.2g of the tolerance\n", all_isas[ii],
                               act == AXP_GLU_SILU ? "silu" : "gelu", worst);
                }
        }
        free(g);
        free(u);
        free(y);
        free(y2);
}

/* Soft-capping in place (Gemma 2's output logits) on every path: within 1.5e-7 cap (and a few
 * ulps) of cap tanh(x / cap) over the whole range, either sign, infinities to the cap, and a
 * value's result the same wherever it sits (SIMD body or tail). */
static void test_softcap(void) {
        enum { N = 1027 };
        float *x = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * N), *y2 = malloc(sizeof(float) * N);
        static const float caps[] = { 30, 2 };
        for (size_t ci = 0; ci < ELEMENTSOF(caps); ci++) {
                float cap = caps[ci];
                for (int i = 0; i < N; i++) {
                        double t = (double) (i - N / 2) / (N / 2);
                        x[i] = (float) (cap * (40.0 * t * t * t + 0.5 * t));
                }
                x[0] = -INFINITY, x[N - 1] = INFINITY, x[N / 2] = 0.0f, x[N / 2 + 1] = -0.0f, x[7] = 1e-30f;
                for (size_t ii = 0; ii < ELEMENTSOF(all_isas); ii++) {
                        if (!isa_use(all_isas[ii]))
                                continue;
                        memcpy(y, x, sizeof(float) * N);
                        axp_cpu_softcap(y, N, cap);
                        double worst = 0;
                        for (int i = 0; i < N; i++) {
                                double want = isinf(x[i]) ? copysign(cap, x[i]) : cap * tanh((double) x[i] / cap);
                                double err = fabs(y[i] - want), tol = 1.5e-7 * cap + 4 * 6e-8 * fabs(want);
                                worst = fmax(worst, err / tol);
                                CHECK_MSG(err <= tol && !isnan(y[i]), "%s cap %g x=%g: %.9g vs %.9g", all_isas[ii],
                                          (double) cap, (double) x[i], (double) y[i], want);
                        }
                        CHECK(signbit(y[N / 2 + 1]) && y[N / 2 + 1] == 0 && y[N / 2] == 0 && !signbit(y[N / 2]));
                        for (int off = 1; off < 20; off += 3) {
                                int n = N - 8 * off;
                                memcpy(y2, x + off, sizeof(float) * n);
                                axp_cpu_softcap(y2, n, cap);
                                CHECK_MSG(memcmp(y2, y + off, sizeof(float) * n) == 0,
                                          "%s: a value's result depends on where it sits", all_isas[ii]);
                        }
                        printf("  %s cap %g: worst error %.2g of the tolerance\n", all_isas[ii], (double) cap, worst);
                }
        }
        free(x);
        free(y);
        free(y2);
}

/* The AVX-VNNI build sums the same integers as the AVX2 build (vpdpbusd in place of
 * vpmaddubsw and vpmaddwd, u8 weights with the offset as the starting sum), so every type
 * gives the same bits on the two, in decode (one and two tokens) and in prefill tiles. */
static void test_matmul_vnni_same_bits(void) {
        if (!axp_cpu_isa_available("avx-vnni") || !axp_cpu_isa_available("avx2")) {
                printf("  (no AVX-VNNI here: skipped)\n");
                return;
        }
        static const struct { int n_in, n_out, n_tok; } cases[] = {
                { 512, 40, 1 }, { 768, 33, 2 }, { 1024, 48, 9 }, { 256, 17, 5 }, { 576, 20, 3 },
        };
        for (size_t ti = 0; ti < ELEMENTSOF(all_types); ti++) {
                uint32_t type = all_types[ti];
                for (size_t ci = 0; ci < ELEMENTSOF(cases); ci++) {
                        int n_in = cases[ci].n_in, n_out = cases[ci].n_out, n_tok = cases[ci].n_tok;
                        if (n_in % axp_type_traits_get(type)->blck != 0)
                                continue;
                        test_weight tw;
                        weight_make(&tw, type, n_in, n_out);
                        long ldx = n_in + 1, ldy = n_out;
                        float *x = make_x(n_in, n_tok, ldx);
                        CHECK(isa_use("avx2"));
                        float *a = run_matmul(pools[2], &tw.w, x, ldx, n_tok, ldy);
                        CHECK(isa_use("avx-vnni"));
                        float *b = run_matmul(pools[2], &tw.w, x, ldx, n_tok, ldy);
                        CHECK_MSG(bits_equal(a, b, n_tok, ldy, n_out), "%s %d x %d, %d tokens: avx2 and avx-vnni differ",
                                  axp_type_traits_get(type)->name, n_out, n_in, n_tok);
                        free(a);
                        free(b);
                        free(x);
                        weight_free(&tw);
                }
        }
}

/* BF16 products give the same bits on every path, the AVX-512 one with vdpbf16ps and without
 * (cpu.h: every path adds in that instruction's order); F16 products on every SIMD path (even
 * and odd inputs summed apart, then added; the portable path sums in order): decode, the tiles
 * and their rests, an odd number of inputs. */
static void test_matmul_pairs_same_bits(void) {
        static const struct { int n_in, n_out, n_tok; } cases[] = {
                { 512, 40, 1 }, { 768, 33, 2 }, { 1024, 48, 13 }, { 97, 17, 5 }, { 331, 20, 3 }, { 2, 16, 9 },
        };
        static const uint32_t types[] = { AXP_TYPE_BF16, AXP_TYPE_F16 };
        bool had_dot = atomic_load(&axp_cpu_bf16_dot);
        for (size_t ti = 0; ti < ELEMENTSOF(types); ti++)
                for (size_t ci = 0; ci < ELEMENTSOF(cases); ci++) {
                        int n_in = cases[ci].n_in, n_out = cases[ci].n_out, n_tok = cases[ci].n_tok;
                        const char *name = axp_type_traits_get(types[ti])->name;
                        const char *ref_isa = types[ti] == AXP_TYPE_BF16 ? "generic" : "avx2";
                        if (!isa_use(ref_isa))
                                continue;
                        test_weight tw;
                        weight_make(&tw, types[ti], n_in, n_out);
                        CHECK_EQ_INT(axp_cpu_weight_prepare(&tw.w), 0);
                        long ldx = n_in + 3, ldy = n_out;
                        float *x = make_x(n_in, n_tok, ldx);
                        float *ref = run_matmul(pools[2], &tw.w, x, ldx, n_tok, ldy);
                        check_product(&tw, x, ldx, n_tok, ref, ldy);
                        for (size_t ii = 1; ii < ELEMENTSOF(all_isas); ii++)
                                for (int dot = 0; dot < 2; dot++) {
                                        /* the flag moves the AVX-512 path's BF16 (and AMX's, which has it) */
                                        bool avx512 = strcmp(all_isas[ii], "avx512") == 0 || strcmp(all_isas[ii], "amx") == 0;
                                        if ((dot && (!avx512 || types[ti] != AXP_TYPE_BF16)) || !isa_use(all_isas[ii]) ||
                                            !axp_cpu_set_bf16_dot(dot))
                                                continue;
                                        float *y = run_matmul(pools[2], &tw.w, x, ldx, n_tok, ldy);
                                        CHECK_MSG(bits_equal(ref, y, n_tok, ldy, n_out),
                                                  "%s %d x %d, %d tokens: %s%s differs from %s", name, n_out, n_in, n_tok,
                                                  all_isas[ii], dot ? " with vdpbf16ps" : "", ref_isa);
                                        free(y);
                                }
                        free(ref);
                        free(x);
                        weight_free(&tw);
                }
        CHECK(axp_cpu_set_bf16_dot(had_dot));
        printf("  vdpbf16ps on this CPU: %s\n", had_dot ? "yes (checked against the FMA form)" : "no");
}

/* Decode's prefetch plans (kernels.h) are named, chosen and give the same bits: a prefetch
 * moves no data a product reads. Rows of 2048 inputs span several sparse-prefetch steps. */
static const char *const plan_names[] = { "dense", "sparse", "dense-l1", "sparse-l1" };

static void test_matmul_prefetch_plans(void) {
        char was[16];
        snprintf(was, sizeof(was), "%s", axp_cpu_prefetch());
        bool named = false;
        for (size_t p = 0; p < ELEMENTSOF(plan_names); p++)
                named = named || strcmp(was, plan_names[p]) == 0;
        CHECK_MSG(named, "the plan is %s", was);
        CHECK(!axp_cpu_set_prefetch("sparse-ish"));
        CHECK(!axp_cpu_set_prefetch("l1"));
        CHECK(!axp_cpu_set_prefetch("dense-l3"));
        CHECK(!axp_cpu_set_prefetch(""));
        CHECK(strcmp(axp_cpu_prefetch(), was) == 0);
        for (size_t p = 0; p < ELEMENTSOF(plan_names); p++) {
                CHECK(axp_cpu_set_prefetch(plan_names[p]));
                CHECK(strcmp(axp_cpu_prefetch(), plan_names[p]) == 0);
        }
        for (size_t ii = 0; ii < ELEMENTSOF(all_isas); ii++) {
                if (!isa_use(all_isas[ii]))
                        continue;
                for (size_t ti = 0; ti < ELEMENTSOF(all_types); ti++) {
                        test_weight tw;
                        weight_make(&tw, all_types[ti], 2048, 40);
                        axp_cpu_weight_prepare(&tw.w);
                        float *x = make_x(2048, 2, 2048);
                        for (int n_tok = 1; n_tok <= 2; n_tok++) {
                                CHECK(axp_cpu_set_prefetch("dense"));
                                float *a = run_matmul(pools[2], &tw.w, x, 2048, n_tok, 40);
                                for (size_t p = 1; p < ELEMENTSOF(plan_names); p++) {
                                        CHECK(axp_cpu_set_prefetch(plan_names[p]));
                                        float *b = run_matmul(pools[2], &tw.w, x, 2048, n_tok, 40);
                                        CHECK_MSG(bits_equal(a, b, n_tok, 40, 40),
                                                  "%s %s, %d tokens: the prefetch plans dense and %s differ", all_isas[ii],
                                                  axp_type_traits_get(all_types[ti])->name, n_tok, plan_names[p]);
                                        free(b);
                                }
                                free(a);
                        }
                        free(x);
                        weight_free(&tw);
                }
        }
        CHECK(axp_cpu_set_prefetch(was));
        CHECK(strcmp(axp_cpu_prefetch(), was) == 0);
        /* handed back: the default again (into L2; tuning may have chosen otherwise before) */
        CHECK(axp_cpu_set_prefetch(NULL));
        CHECK(strcmp(axp_cpu_prefetch(), "dense") == 0 || strcmp(axp_cpu_prefetch(), "sparse") == 0);
}

/* Tuning the prefetch plan (axp_cpu_prefetch_tune): its level over every type, then its form
 * over the types the form concerns (not Q2_K, Q3_K, Q4_1, Q5_0 or Q5_1, whose products keep
 * their own dense prefetches), each over at least min_bytes of them, timing both choices and keeping the
 * faster; it leaves a part alone below min_bytes, and the plan alone where it was forced,
 * until the choice is handed back. Runs with the plan not forced (no AXP_CPU_PREFETCH in the
 * environment), so before test_matmul_prefetch_plans. */
static bool plan_is(bool sparse, bool l1) {
        char want[16];
        snprintf(want, sizeof(want), "%s%s", sparse ? "sparse" : "dense", l1 ? "-l1" : "");
        return strcmp(axp_cpu_prefetch(), want) == 0;
}

static void test_prefetch_tune(void) {
        if (getenv("AXP_CPU_PREFETCH")) {
                printf("  (AXP_CPU_PREFETCH is set: tuning not checked)\n");
                return;
        }
        test_weight a, b, k;
        weight_make(&a, AXP_TYPE_Q8_0, 1024, 256);
        weight_make(&b, AXP_TYPE_Q4_K, 1024, 256);
        weight_make(&k, AXP_TYPE_Q2_K, 1024, 256);
        CHECK_EQ_INT(axp_cpu_weight_prepare(&a.w), 0);
        CHECK_EQ_INT(axp_cpu_weight_prepare(&b.w), 0);
        CHECK_EQ_INT(axp_cpu_weight_prepare(&k.w), 0);
        const axp_weight *ws[] = { &k.w, &a.w, &b.w };
        double t[4] = { -1, -1, -1, -1 };
        /* 84 KB of Q2_K and 272 KB + 144 KB of the form's weights: fewer than asked for */
        CHECK_EQ_INT(axp_cpu_prefetch_tune(pools[1], ws, 3, 1 << 20, t), 0);
        CHECK(t[0] == -1 && t[1] == -1 && t[2] == -1 && t[3] == -1);
        /* Q2_K alone: the level, not the form */
        CHECK_EQ_INT(axp_cpu_prefetch_tune(pools[1], ws, 1, 1, t), 1);
        CHECK(t[0] == -1 && t[1] == -1);
        CHECK(t[2] > 0 && t[3] > 0);
        CHECK(plan_is(strstr(axp_cpu_prefetch(), "sparse") != NULL, t[3] < t[2]));
        /* Q4_K alone: both (its products follow the form, prefetch_kstep) */
        const axp_weight *wk[] = { &b.w };
        for (int i = 0; i < 4; i++)
                t[i] = -1;
        CHECK_EQ_INT(axp_cpu_prefetch_tune(pools[1], wk, 1, 1, t), 1);
        CHECK(t[0] > 0 && t[1] > 0 && t[2] > 0 && t[3] > 0);
        /* Q3_K, Q4_1, Q5_0 and Q5_1 as Q2_K */
        const uint32_t dense_only[] = { AXP_TYPE_Q3_K, AXP_TYPE_Q4_1, AXP_TYPE_Q5_0, AXP_TYPE_Q5_1 };
        for (size_t m = 0; m < ELEMENTSOF(dense_only); m++) {
                test_weight q;
                weight_make(&q, dense_only[m], 1024, 256);
                CHECK_EQ_INT(axp_cpu_weight_prepare(&q.w), 0);
                const axp_weight *wq[] = { &q.w };
                for (int i = 0; i < 4; i++)
                        t[i] = -1;
                CHECK_EQ_INT(axp_cpu_prefetch_tune(pools[1], wq, 1, 1, t), 1);
                CHECK(t[0] == -1 && t[1] == -1);
                CHECK(t[2] > 0 && t[3] > 0);
                weight_free(&q);
        }
        for (size_t ii = 0; ii < ELEMENTSOF(all_isas); ii++) {
                if (!isa_use(all_isas[ii]))
                        continue;
                for (int i = 0; i < 4; i++)
                        t[i] = -1;
                CHECK_EQ_INT(axp_cpu_prefetch_tune(pools[1], ws, 3, 64 << 10, t), 1);
                for (int i = 0; i < 4; i++)
                        CHECK_MSG(t[i] > 0 && isfinite(t[i]), "%s: step %d took %g s", all_isas[ii], i, t[i]);
                CHECK_MSG(plan_is(t[1] < t[0], t[3] < t[2]), "%s: %s kept, dense %g s, sparse %g s, L2 %g s, L1 %g s",
                          all_isas[ii], axp_cpu_prefetch(), t[0], t[1], t[2], t[3]);
        }
        for (size_t p = 0; p < ELEMENTSOF(plan_names); p++) {
                CHECK(axp_cpu_set_prefetch(plan_names[p]));
                CHECK_EQ_INT(axp_cpu_prefetch_tune(pools[1], ws, 3, 64 << 10, t), 0);
                CHECK(strcmp(axp_cpu_prefetch(), plan_names[p]) == 0);
        }
        CHECK(axp_cpu_set_prefetch(NULL));
        CHECK_EQ_INT(axp_cpu_prefetch_tune(pools[1], ws, 3, 64 << 10, t), 1);
        weight_free(&a);
        weight_free(&b);
        weight_free(&k);
}

/* A token's result does not depend on which other tokens share the call. */
static void test_matmul_batch_invariant(void) {
        for (size_t ii = 0; ii < ELEMENTSOF(all_isas); ii++) {
                if (!isa_use(all_isas[ii]))
                        continue;
                for (size_t ti = 0; ti < ELEMENTSOF(all_types); ti++) {
                        test_weight tw;
                        weight_make(&tw, all_types[ti], 512, 40);
                        axp_cpu_weight_prepare(&tw.w);
                        int n_tok = 37;
                        float *x = make_x(512, n_tok, 512);
                        float *all = run_matmul(pools[2], &tw.w, x, 512, n_tok, 40);
                        bool same = true;
                        for (int t = 0; t < n_tok; t += 5) {
                                float *one = run_matmul(pools[2], &tw.w, x + t * 512, 512, 1, 40);
                                same &= memcmp(one, all + t * 40, 40 * sizeof(float)) == 0;
                                free(one);
                        }
                        CHECK_MSG(same, "%s %s: a token alone differs from the same token in a batch",
                                  all_isas[ii], axp_type_traits_get(all_types[ti])->name);
                        free(all);
                        free(x);
                        weight_free(&tw);
                }
        }
}

/* The 32-element block types' packed groups (pk32_*, cpu.h): every block's scales, minimums
 * and quants inside the group and apart (Q5_0's and Q5_1's quints 320 bytes a block, as many
 * as the file's 16 rows hold); Q8_0, Q5_0, Q4_0 and IQ4_NL as runs of 8 blocks read
 * in order (a run's scales, then its quants, then the next run's), a last run of fewer blocks
 * a whole head and its blocks' quants; Q4_1 and Q5_1 every scale, then every minimum, then
 * the quants. */
static int cmp_u64(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;
        return x < y ? -1 : x > y;
}

static void test_pk32_layout(void) {
        static const uint32_t types[] = { AXP_TYPE_Q8_0, AXP_TYPE_Q5_0, AXP_TYPE_Q4_0,
                                          AXP_TYPE_IQ4_NL, AXP_TYPE_Q4_1, AXP_TYPE_Q5_1 };
        static const int64_t nbs[] = { 1, 3, 7, 8, 9, 18, 28, 64, 280 };
        for (size_t ti = 0; ti < ELEMENTSOF(types); ti++)
                for (size_t ni = 0; ni < ELEMENTSOF(nbs); ni++) {
                        uint32_t type = types[ti];
                        int64_t nb = nbs[ni], k = nb * 32;
                        const char *name = axp_type_traits_get(type)->name;
                        pk32 L = pk32_of(type);
                        bool has_min = type == AXP_TYPE_Q4_1 || type == AXP_TYPE_Q5_1;
                        bool nibbles = type == AXP_TYPE_Q4_0 || type == AXP_TYPE_IQ4_NL || type == AXP_TYPE_Q4_1;
                        bool quints = type == AXP_TYPE_Q5_0 || type == AXP_TYPE_Q5_1;
                        size_t bytes = axp_pack_group_bytes(type, k);
                        CHECK_MSG(L.qb == (nibbles ? 256u : quints ? 320u : 512u), "%s: %u bytes of quants a block",
                                  name, L.qb);
                        CHECK_MSG(bytes == pk32_bytes(L, nb) && bytes % 64 == 0, "%s nb %lld: %zu bytes", name,
                                  (long long) nb, bytes);
                        /* [start, end) of every piece, sorted: inside the group and apart */
                        int per = has_min ? 3 : 2;
                        uint64_t *iv = malloc(sizeof(uint64_t) * 2 * per * nb);
                        for (int64_t b = 0; b < nb; b++) {
                                uint64_t *o = iv + 2 * per * b;
                                o[0] = pk32_scales(L, b);
                                o[1] = o[0] + 32;
                                o[2] = pk32_quants(L, b);
                                o[3] = o[2] + L.qb;
                                if (has_min) {
                                        o[4] = pk32_mins(L, b);
                                        o[5] = o[4] + 32;
                                }
                                CHECK_MSG(o[2] % 64 == 0, "%s nb %lld: block %lld's quants unaligned", name,
                                          (long long) nb, (long long) b);
                        }
                        qsort(iv, (size_t) per * nb, 2 * sizeof(uint64_t), cmp_u64);
                        bool apart = true;
                        for (int64_t i = 0; i < per * nb; i++)
                                apart &= iv[2 * i + 1] <= (i + 1 < per * nb ? iv[2 * i + 2] : bytes);
                        CHECK_MSG(apart, "%s nb %lld: pieces overlap or leave the group", name, (long long) nb);
                        free(iv);
                        size_t used = (size_t) nb * (L.qb + (has_min ? 64 : 32));
                        if (has_min) {
                                /* block after block, each its scales, minimums and quants: one
                                 * stream in order, no padding */
                                bool seq = bytes == used;
                                for (int64_t b = 0; b < nb; b++)
                                        seq &= pk32_scales(L, b) == (size_t) b * (64 + L.qb) &&
                                               pk32_mins(L, b) == pk32_scales(L, b) + 32 &&
                                               pk32_quants(L, b) == pk32_scales(L, b) + 64;
                                CHECK_MSG(seq, "%s nb %lld: not block after block (scales, minimums, quants)", name,
                                          (long long) nb);
                                continue;
                        }
                        /* one stream: a run's pieces all below the next run's, its scales first */
                        bool stream = true;
                        for (int64_t b = 0; b < nb; b++) {
                                int64_t r0 = b / 8 * 8;
                                stream &= pk32_scales(L, b) < pk32_quants(L, r0);
                                if (b + 8 < nb)
                                        stream &= pk32_quants(L, b) + L.qb <= pk32_scales(L, b / 8 * 8 + 8);
                        }
                        CHECK_MSG(stream, "%s nb %lld: not runs of scales then quants", name, (long long) nb);
                        CHECK_MSG(bytes - used <= 224, "%s nb %lld: %zu bytes of padding", name, (long long) nb,
                                  bytes - used);
                }
}

/* The chunk runs of a product (kernels/cpu/matmul.c): with more threads than CPUs, and with
 * fewer chunks than threads (empty runs), shares take chunks from each other's runs at every
 * point of their own; each chunk is computed once, by whichever share, to the same bits. */
static void test_matmul_runs(void) {
        static const struct { int n_out, n_tok; } cases[] = {
                { 16, 1 }, { 40, 1 }, { 100, 2 }, { 333, 1 }, { 1000, 2 }, { 2000, 1 }, { 200, 9 }, { 700, 33 },
        };
        axp_pool *many = axp_pool_new(7);
        for (int rep = 0; rep < 3; rep++)
                for (size_t ci = 0; ci < ELEMENTSOF(cases); ci++) {
                        test_weight tw;
                        weight_make(&tw, rep == 1 ? AXP_TYPE_Q4_K : AXP_TYPE_Q8_0, 256, cases[ci].n_out);
                        axp_cpu_weight_prepare(&tw.w);
                        int n_tok = cases[ci].n_tok;
                        long ldy = cases[ci].n_out;
                        float *x = make_x(256, n_tok, 256);
                        float *a = run_matmul(pools[1], &tw.w, x, 256, n_tok, ldy);
                        float *b = run_matmul(many, &tw.w, x, 256, n_tok, ldy);
                        CHECK_MSG(bits_equal(a, b, n_tok, ldy, cases[ci].n_out), "%d x 256, %d tokens: 7 threads differ",
                                  cases[ci].n_out, n_tok);
                        free(a);
                        free(b);
                        free(x);
                        weight_free(&tw);
                }
        axp_pool_free(many);
}

/* Q/K/V-style calls: several weights of different types and sizes in one call give what
 * separate calls give. */
static void test_matmul_multi(void) {
        /* the K-quants with Q8_0; then every 32-element type, as the mixed Q4_K_M files of
         * models whose width is not a multiple of 256 have them */
        static const uint32_t sets[2][7] = {
                { AXP_TYPE_Q4_K, AXP_TYPE_Q6_K, AXP_TYPE_Q8_0, AXP_TYPE_Q5_K },
                { AXP_TYPE_Q4_K, AXP_TYPE_Q5_0, AXP_TYPE_Q5_1, AXP_TYPE_Q4_1, AXP_TYPE_IQ4_NL,
                  AXP_TYPE_Q4_0, AXP_TYPE_Q8_0 },
        };
        static const int n_set[2] = { 4, 7 };
        for (size_t ii = 0; ii < ELEMENTSOF(all_isas); ii++) {
                if (!isa_use(all_isas[ii]))
                        continue;
                for (int si = 0; si < 2; si++) {
                        int n = n_set[si], n_tok = 20;
                        test_weight tw[7];
                        const axp_weight *ws[7];
                        float *ys[7];
                        long ldys[7];
                        for (int i = 0; i < n; i++) {
                                weight_make(&tw[i], sets[si][i], 1024, 96 - 17 * (i % 4));
                                if (i % 2)
                                        axp_cpu_weight_prepare(&tw[i].w);
                                ws[i] = &tw[i].w;
                                ldys[i] = tw[i].w.n_out + i;
                                ys[i] = malloc(sizeof(float) * ldys[i] * n_tok);
                        }
                        float *x = make_x(1024, n_tok, 1024);
                        axp_cpu_matmul(pools[2], n, ws, x, 1024, ys, ldys, n_tok);
                        for (int i = 0; i < n; i++) {
                                float *y = run_matmul(pools[1], ws[i], x, 1024, n_tok, ldys[i]);
                                CHECK_MSG(bits_equal(y, ys[i], n_tok, ldys[i], ws[i]->n_out), "%s weight %d (%s)",
                                          all_isas[ii], i, axp_type_traits_get(sets[si][i])->name);
                                free(y);
                                free(ys[i]);
                                weight_free(&tw[i]);
                        }
                        free(x);
                }
        }
}

/* Every path quantizes activations to the same bytes as the portable reference, which itself
 * follows llama.cpp's rule (checked value by value here). */
static void test_activation_quantization(void) {
        int64_t k = 1024;
        float *x = make_x(k, 1, k);
        x[0] = 0.5f; /* exact halves exercise round-half-even */
        x[1] = -1.5f;
        for (int i = 2; i < 32; i++)
                x[i] = (float) (i % 5) * 0.25f; /* amax 1.0: x*127 has exact .5 values */
        float *xq = malloc(sizeof(float) * k);
        for (int kind = AXP_ACT_F16; kind < AXP_ACT__MAX; kind++) {
                size_t stride = axp_act_stride(kind, k);
                uint8_t *ref = calloc(1, stride), *got = calloc(1, stride);
                axp_cpu_ops_generic.quant[kind](x, k, ref);
                /* the reference bytes decode to the independent rule's values */
                uint32_t type = kind == AXP_ACT_Q8_0 ? AXP_TYPE_Q8_0 : kind == AXP_ACT_Q8_K ? AXP_TYPE_Q4_K
                                : kind == AXP_ACT_BF16                      ? AXP_TYPE_BF16
                                                                            : AXP_TYPE_F16;
                ref_act(type, x, k, xq, NULL);
                int bad = 0;
                for (int64_t i = 0; i < k; i++) {
                        float v;
                        if (kind == AXP_ACT_Q8_0)
                                v = act_q8_0_d(ref, i / 32) * act_q8_0_qs(ref, i / 32)[i % 32];
                        else if (kind == AXP_ACT_Q8_K)
                                v = act_q8_K_d(ref, i / 256) * act_q8_K_qs(ref, i / 256)[i % 256];
                        else if (kind == AXP_ACT_BF16)
                                v = axp_bf16_to_f32(((const axp_bf16 *) ref)[i]);
                        else
                                v = ((float *) ref)[i];
                        bad += v != xq[i];
                }
                CHECK_MSG(bad == 0, "kind %d: %d values differ from llama.cpp's rule", kind, bad);
                for (size_t ii = 0; ii < ELEMENTSOF(all_isas); ii++) {
                        if (!isa_use(all_isas[ii]))
                                continue;
                        memset(got, 0, stride);
                        axp_cpu_ops_get()->quant[kind](x, k, got);
                        CHECK_MSG(memcmp(ref, got, stride) == 0, "%s: activation kind %d differs from the reference",
                                  all_isas[ii], kind);
                }
                free(ref);
                free(got);
        }
        free(xq);
        free(x);
}

/* Prepared weights share 2 MiB-aligned slabs (repack.c): small ones lie end to end, a slab
 * that is full is followed by a new one on a 2 MiB boundary, a large weight gets its own, and
 * a slab stays mapped while any of its weights is prepared (products still right after others
 * are released, in any order). */
static void test_weight_slabs(void) {
        enum { N_SMALL = 40 };
        const uintptr_t huge = 2u << 20;
        test_weight base, big;
        weight_make(&base, AXP_TYPE_Q8_0, 2048, 512); /* 1.1 MB packed */
        weight_make(&big, AXP_TYPE_Q8_0, 2048, 4096); /* 8.9 MB: a slab of its own */
        test_weight ws[N_SMALL];
        const uint8_t *prev = NULL;
        int new_slabs = 0;
        for (int i = 0; i < N_SMALL; i++) {
                ws[i] = base;
                ws[i].w.priv = NULL;
                CHECK_EQ_INT(axp_cpu_weight_prepare(&ws[i].w), 0);
                const axp_packed *p = ws[i].w.priv;
                CHECK(((uintptr_t) p->data & 63) == 0);
                if (prev && p->data != prev) {
                        CHECK_MSG(((uintptr_t) p->data & (huge - 1)) == 0, "weight %d: %p neither follows nor starts a slab",
                                  i, (const void *) p->data);
                        new_slabs++;
                }
                prev = p->data + (size_t) p->n_groups * p->group_bytes;
                if (i == N_SMALL / 2) {
                        CHECK_EQ_INT(axp_cpu_weight_prepare(&big.w), 0);
                        CHECK(((uintptr_t) ((const axp_packed *) big.w.priv)->data & (huge - 1)) == 0);
                }
        }
        /* 44 MB of small weights: at least one new slab, and the large one did not break the run */
        CHECK(new_slabs >= 1 && new_slabs <= 2);
        float *x = make_x(2048, 5, 2048);
        int order[N_SMALL];
        for (int i = 0; i < N_SMALL; i++)
                order[i] = (i * 7) % N_SMALL; /* 7 is prime to 40: every weight once */
        for (int n = 0; n < N_SMALL; n++) {
                if (n % 8 == 0) {
                        /* the remaining ones, the large one and a slab's neighbours still right */
                        for (int i = 0; i < N_SMALL; i += 9)
                                if (ws[i].w.priv) {
                                        float *y = run_matmul(pools[2], &ws[i].w, x, 2048, 5, 512);
                                        CHECK_MSG(!product_fails(&ws[i], x, 2048, 5, y, 512), "weight %d after %d released", i, n);
                                        free(y);
                                }
                        float *y = run_matmul(pools[2], &big.w, x, 2048, 1, 4096);
                        check_product(&big, x, 2048, 1, y, 4096);
                        free(y);
                }
                axp_cpu_weight_release(&ws[order[n]].w);
                CHECK(ws[order[n]].w.priv == NULL);
        }
        /* all small ones released: the next starts a slab */
        test_weight again = base;
        again.w.priv = NULL;
        CHECK_EQ_INT(axp_cpu_weight_prepare(&again.w), 0);
        CHECK(((uintptr_t) ((const axp_packed *) again.w.priv)->data & (huge - 1)) == 0);
        float *y = run_matmul(pools[1], &again.w, x, 2048, 3, 512);
        check_product(&again, x, 2048, 3, y, 512);
        free(y);
        axp_cpu_weight_release(&again.w);
        free(x);
        weight_free(&big);
        weight_free(&base);
}

/* Attention ---------------------------------------------------------------------------------- */

static void ref_attention(const float *q, long ldq, double *out, const float *kf, const float *vf,
                          int n_q, const int32_t *pos, int n_head, int n_head_kv, int hd, int window,
                          float scale, float softcap) {
        int G = n_head / n_head_kv;
        long ld = (long) n_head_kv * hd;
        double *s = malloc(sizeof(double) * (pos[n_q - 1] + 1 + 4096));
        for (int i = 0; i < n_q; i++)
                for (int h = 0; h < n_head; h++) {
                        int kvh = h / G;
                        double m = -INFINITY, l = 0;
                        int t0 = window > 0 && pos[i] >= window ? pos[i] - window + 1 : 0;
                        for (int t = t0; t <= pos[i]; t++) {
                                double d = 0;
                                for (int c = 0; c < hd; c++)
                                        d += (double) q[i * ldq + h * hd + c] * kf[t * ld + kvh * hd + c];
                                s[t] = d * scale;
                                if (softcap > 0)
                                        s[t] = softcap * tanh(s[t] / softcap);
                                m = fmax(m, s[t]);
                        }
                        double *o = out + ((long) i * n_head + h) * hd;
                        memset(o, 0, sizeof(double) * hd);
                        for (int t = t0; t <= pos[i]; t++) {
                                double p = exp(s[t] - m);
                                l += p;
                                for (int c = 0; c < hd; c++)
                                        o[c] += p * vf[t * ld + kvh * hd + c];
                        }
                        for (int c = 0; c < hd; c++)
                                o[c] /= l;
                }
        free(s);
}

/* n_pos rows of ld random K (gauss times k_scale) and V (gauss) into a cache of kv_type at k
 * and v; kf and vf become what the cache holds */
static void kv_fill(uint32_t kv_type, int n_pos, long ld, float k_scale, float *kf, float *vf, char *k, char *v) {
        size_t rb = (size_t) axp_type_row_size(kv_type, ld);
        for (long i = 0; i < n_pos * ld; i++) {
                kf[i] = gauss() * k_scale;
                vf[i] = gauss();
        }
        for (int t = 0; t < n_pos; t++) {
                axp_cpu_kv_store(kv_type, kf + t * ld, k + t * rb, (int) ld);
                axp_cpu_kv_store(kv_type, vf + t * ld, v + t * rb, (int) ld);
                if (kv_type != AXP_TYPE_F32) {
                        axp_dequantize_row(kv_type, k + t * rb, kf + t * ld, ld);
                        axp_dequantize_row(kv_type, v + t * rb, vf + t * ld, ld);
                }
        }
}

typedef struct att_case {
        int n_q, first_pos, n_head, n_head_kv, hd;
        int window; /* sliding window, 0: none */
} att_case;

/* Attention on every path against the reference ref (of q), and the same bits over pools of 1,
 * 2 and 3 threads, in a ring, with the cache head by head and for the last query alone */
static void check_attention(att_case c, size_t ci, uint32_t kv_type, const char *kvn, const char *k,
                            const char *v, const float *q, long ldq, const int32_t *pos, float scale,
                            float softcap, const double *ref, double tol) {
        int n_pos = c.first_pos + c.n_q;
        long ld = (long) c.n_head_kv * c.hd;
        size_t rb = (size_t) axp_type_row_size(kv_type, ld);
        for (size_t ii = 0; ii < ELEMENTSOF(all_isas); ii++) {
                if (!isa_use(all_isas[ii]))
                        continue;
                /* the portable path is slow, and its cap the same code whatever the cache: capped,
                 * the F32 cache only */
                if (softcap > 0 && kv_type != AXP_TYPE_F32 && strcmp(all_isas[ii], "generic") == 0)
                        continue;
                float *outs[4] = { 0 };
                for (int p = 1; p <= 3; p++) {
                        outs[p] = malloc(sizeof(float) * c.n_q * ldq);
                        memcpy(outs[p], q, sizeof(float) * c.n_q * ldq);
                        /* in place: out aliases q */
                        axp_cpu_attention(pools[p], outs[p], ldq, outs[p], ldq, k, v, kv_type, c.n_q, pos, c.n_head,
                                          c.n_head_kv, c.hd, ld, c.hd, c.window, 0, scale, softcap);
                }
                double maxe = 0;
                for (int i = 0; i < c.n_q; i++)
                        for (int h = 0; h < c.n_head * c.hd; h++)
                                maxe = fmax(maxe, fabs(outs[1][i * ldq + h] - ref[(long) i * c.n_head * c.hd + h]));
                CHECK_MSG(maxe < tol, "%s kv %s case %zu softcap %g: max error %.3g", all_isas[ii], kvn, ci,
                          softcap, maxe);
                for (int p = 2; p <= 3; p++)
                        CHECK_MSG(memcmp(outs[1], outs[p], sizeof(float) * c.n_q * ldq) == 0,
                                  "%s case %zu softcap %g: %d threads differ from 1", all_isas[ii], ci, softcap, p);
                /* a sliding-window layer's ring (the window behind the queries and the queries,
                 * rounded up to 256 rows) gives the same bits */
                int ring = c.window > 0 ? (c.window - 1 + c.n_q + 255) / 256 * 256 : 0;
                if (ring > 0 && ring < n_pos) {
                        char *kr = calloc(ring, rb), *vr = calloc(ring, rb);
                        float *o = malloc(sizeof(float) * c.n_q * ldq);
                        memcpy(o, q, sizeof(float) * c.n_q * ldq); /* the rows' padding */
                        for (int p = MAX(0, c.first_pos - c.window + 1); p < n_pos; p++) {
                                memcpy(kr + (size_t) (p % ring) * rb, k + (size_t) p * rb, rb);
                                memcpy(vr + (size_t) (p % ring) * rb, v + (size_t) p * rb, rb);
                        }
                        axp_cpu_attention(pools[2], q, ldq, o, ldq, kr, vr, kv_type, c.n_q, pos, c.n_head, c.n_head_kv,
                                          c.hd, ld, c.hd, c.window, ring, scale, softcap);
                        CHECK_MSG(memcmp(o, outs[1], sizeof(float) * c.n_q * ldq) == 0,
                                  "%s case %zu softcap %g: the ring of %d rows differs", all_isas[ii], ci, softcap,
                                  ring);
                        free(kr);
                        free(vr);
                        free(o);
                }
                /* the cache head by head, as the engine keeps it (each KV head's rows side by
                 * side), gives the same bits */
                {
                        size_t hb = (size_t) axp_type_row_size(kv_type, c.hd);
                        char *kh = malloc(rb * n_pos), *vh = malloc(rb * n_pos);
                        float *o = malloc(sizeof(float) * c.n_q * ldq);
                        memcpy(o, q, sizeof(float) * c.n_q * ldq);
                        for (int p = 0; p < n_pos; p++)
                                for (int h = 0; h < c.n_head_kv; h++) {
                                        size_t to = ((size_t) h * n_pos + p) * hb, from = (size_t) p * rb + h * hb;
                                        memcpy(kh + to, k + from, hb);
                                        memcpy(vh + to, v + from, hb);
                                }
                        axp_cpu_attention(pools[2], q, ldq, o, ldq, kh, vh, kv_type, c.n_q, pos, c.n_head, c.n_head_kv,
                                          c.hd, c.hd, (long) n_pos * c.hd, c.window, 0, scale, softcap);
                        CHECK_MSG(memcmp(o, outs[1], sizeof(float) * c.n_q * ldq) == 0,
                                  "%s case %zu softcap %g: the cache head by head differs", all_isas[ii], ci, softcap);
                        free(kh);
                        free(vh);
                        free(o);
                }
                /* the last query alone (a decode step) gives the same bits */
                float *one = malloc(sizeof(float) * ldq);
                axp_cpu_attention(pools[2], q + (c.n_q - 1) * ldq, ldq, one, ldq, k, v, kv_type, 1, pos + c.n_q - 1,
                                  c.n_head, c.n_head_kv, c.hd, ld, c.hd, c.window, 0, scale, softcap);
                CHECK_MSG(memcmp(one, outs[1] + (c.n_q - 1) * ldq, sizeof(float) * c.n_head * c.hd) == 0,
                          "%s case %zu softcap %g: decode differs from prefill", all_isas[ii], ci, softcap);
                free(one);
                for (int p = 1; p <= 3; p++)
                        free(outs[p]);
        }
}

static void test_attention(void) {
        static const att_case cases[] = {
                { 1, 0, 4, 2, 16 },       /* the very first token */
                { 37, 0, 8, 2, 64 },      /* prefill from the start, GQA 4 */
                { 20, 250, 4, 4, 64 },    /* a prefill chunk crossing a 256-position boundary */
                { 300, 0, 4, 1, 32 },     /* GQA 4, many queries */
                { 1, 1000, 32, 8, 64 },   /* decode, Llama-3.2-1B shape */
                { 1, 4095, 8, 2, 128 },   /* decode at 4096 */
                { 1, 3000, 24, 8, 128 },  /* decode, Llama-3.2-3B shape: GQA 3 of 128-wide heads */
                { 2, 700, 8, 4, 128 },    /* two queries of 128-wide heads, lengths one apart */
                { 1, 900, 8, 2, 96 },     /* decode, 96-wide heads (Phi-3) */
                { 3, 600, 6, 3, 80 },     /* few queries, head_dim not a multiple of 16 */
                { 40, 0, 4, 2, 32, 16 },  /* a sliding window of 16 (gemma3's local layers) */
                { 300, 100, 8, 2, 64, 300 }, /* a window starting inside and across chunks */
                { 1, 1000, 8, 2, 64, 512 },  /* decode with a window, split over chunks */
                { 2, 700, 8, 4, 64, 256 },   /* a window of exactly a chunk */
                { 300, 2000, 4, 2, 32, 100 }, /* a prefill chunk across the end of its ring */
        };
        /* Soft-capped scores (gemma2): none; 50 (gemma2's) with the queries 20 times larger, and
         * 2 with them as they are, so that the scores (sigma 1.5, or 30) reach a few times the
         * cap. The capped results must differ from the uncapped reference's, else the cap would
         * not be tested. Scores of tens to hundreds have float rounding errors (the sums of q.K)
         * that move the outputs by some 1e-5 whatever the path: 1.1e-5 here, the portable path
         * with tanhf as the vector ones, hence the larger tolerance; the cap's own error is
         * test_attention_softcap's. */
        static const struct {
                float cap, q_mul;
                double tol;
        } caps[] = { { 0, 1, 2e-5 }, { 50, 20, 4e-5 }, { 2, 1, 2e-5 } };
        /* F32, F16 and Q8_0 caches (Q8_0 where the heads are whole blocks of 32); the
         * reference reads what the cache holds */
        static const uint32_t kv_types[] = { AXP_TYPE_F32, AXP_TYPE_F16, AXP_TYPE_Q8_0 };
        for (size_t kvt = 0; kvt < ELEMENTSOF(kv_types); kvt++) {
                uint32_t kv_type = kv_types[kvt];
                const char *kvn = kvt == 0 ? "F32" : kvt == 1 ? "F16" : "Q8_0";
                for (size_t ci = 0; ci < ELEMENTSOF(cases); ci++) {
                        att_case c = cases[ci];
                        if (kv_type == AXP_TYPE_Q8_0 && c.hd % 32 != 0)
                                continue;
                        int n_pos = c.first_pos + c.n_q;
                        long ld = (long) c.n_head_kv * c.hd, ldq = (long) c.n_head * c.hd + 8;
                        size_t rb = (size_t) axp_type_row_size(kv_type, ld);
                        float *kf = malloc(sizeof(float) * n_pos * ld), *vf = malloc(sizeof(float) * n_pos * ld);
                        char *k = malloc(rb * n_pos), *v = malloc(rb * n_pos);
                        kv_fill(kv_type, n_pos, ld, 1.5f, kf, vf, k, v);
                        float *q = malloc(sizeof(float) * c.n_q * ldq), *qc = malloc(sizeof(float) * c.n_q * ldq);
                        for (long i = 0; i < c.n_q * ldq; i++)
                                q[i] = gauss();
                        int32_t *pos = malloc(sizeof(int32_t) * c.n_q);
                        for (int i = 0; i < c.n_q; i++)
                                pos[i] = c.first_pos + i;
                        float scale = 1.0f / sqrtf((float) c.hd);
                        size_t n_out = (size_t) c.n_q * c.n_head * c.hd;
                        double *ref = malloc(sizeof(double) * n_out), *ref0 = malloc(sizeof(double) * n_out);
                        for (size_t si = 0; si < ELEMENTSOF(caps); si++) {
                                float cap = caps[si].cap;
                                for (long i = 0; i < c.n_q * ldq; i++)
                                        qc[i] = q[i] * caps[si].q_mul;
                                ref_attention(qc, ldq, ref, kf, vf, c.n_q, pos, c.n_head, c.n_head_kv, c.hd, c.window,
                                              scale, cap);
                                if (cap > 0) {
                                        ref_attention(qc, ldq, ref0, kf, vf, c.n_q, pos, c.n_head, c.n_head_kv, c.hd,
                                                      c.window, scale, 0);
                                        double d = 0;
                                        for (size_t i = 0; i < n_out; i++)
                                                d = fmax(d, fabs(ref[i] - ref0[i]));
                                        /* the first token's softmax is over one position: 1 */
                                        CHECK_MSG(n_pos == 1 || d > 1e-2, "kv %s case %zu softcap %g: the cap moves the "
                                                  "reference by only %.3g", kvn, ci, cap, d);
                                }
                                check_attention(c, ci, kv_type, kvn, k, v, qc, ldq, pos, scale, cap, ref,
                                                caps[si].tol);
                        }
                        free(ref);
                        free(ref0);
                        free(pos);
                        free(q);
                        free(qc);
                        free(k);
                        free(v);
                        free(kf);
                        free(vf);
                }
        }
}

/* The soft-capped score itself, over scores from 0 to far past the float range of tanh's
 * exp, on every path: one query at position 1 of 2, a head per score s (K_0 = 0, K_1 = s /
 * scale along the query's one 1, V_0 and V_1 the first two unit vectors), so that
 * ln(out[1] / out[0]) is cap tanh(s / cap) - 0, read to some 5e-7 (the softmax's own
 * roundings). The error must stay within 2e-6 cap (+ that 1e-6), with no NaN at any size. */
static void test_attention_softcap(void) {
        enum { N_HEAD = 96, HD = 16 };
        const long ld = (long) N_HEAD * HD;
        static const float caps[] = { 50, 2 };
        static const double mults[] = { 0, 1e-30, 1e-6, 1e-3, 0.01, 0.1, 0.3, 0.5, 0.7, 0.9, 1, 1.2, 1.5, 2, 2.5, 3,
                                        4, 5, 6, 8, 9, 10, 12, 20, 50, 100, 1e4, 1e10, 1e30 };
        float q[N_HEAD * HD], out[N_HEAD * HD], k[2 * N_HEAD * HD] = { 0 }, v[2 * N_HEAD * HD] = { 0 };
        float s[N_HEAD], scale = 0.125f; /* K_1 = 8 s: exact; capped before the scale would differ */
        int32_t pos = 1;
        for (size_t ci = 0; ci < ELEMENTSOF(caps); ci++) {
                float cap = caps[ci];
                /* the scores: the list times the cap, either sign, then more spread over 10 cap
                 * either side (by the golden ratio: no draws from the tests' random stream) */
                int n = 0;
                for (size_t i = 0; i < ELEMENTSOF(mults); i++) {
                        s[n++] = (float) (mults[i] * cap);
                        s[n++] = (float) (-mults[i] * cap);
                }
                for (int i = 0; n < N_HEAD; i++)
                        s[n++] = (float) ((fmod(i * 0.6180339887, 1.0) * 20 - 10) * cap);
                memset(q, 0, sizeof(q));
                for (int h = 0; h < N_HEAD; h++) {
                        q[h * HD] = 1;
                        k[ld + h * HD] = s[h] / scale;
                        v[h * HD] = 1;
                        v[ld + h * HD + 1] = 1;
                }
                for (size_t ii = 0; ii < ELEMENTSOF(all_isas); ii++) {
                        if (!isa_use(all_isas[ii]))
                                continue;
                        axp_cpu_attention(pools[1], q, ld, out, ld, k, v, AXP_TYPE_F32, 1, &pos, N_HEAD, N_HEAD, HD,
                                          ld, HD, 0, 0, scale, cap);
                        double worst = 0, tol = 2e-6 * cap + 1e-6;
                        for (int h = 0; h < N_HEAD; h++) {
                                double want = cap * tanh((double) s[h] / cap);
                                double got = log((double) out[h * HD + 1] / out[h * HD]);
                                CHECK_MSG(isfinite(got) && fabs(got - want) <= tol,
                                          "%s softcap %g: score %g became %.9g, not %.9g", all_isas[ii], cap, s[h], got,
                                          want);
                                worst = fmax(worst, fabs(got - want) / tol);
                        }
                        printf("  %s softcap %g: worst error %.2g of the tolerance\n", all_isas[ii], cap, worst);
                }
        }
}

#if defined(__x86_64__)
/* Decode attention whose scores spread over hundreds (a weight exp(s - max) far below the
 * float range) makes no subnormal float on any path: the MXCSR's underflow and denormal
 * flags stay clear (one thread: the caller's flags), and the output still matches the
 * reference. A subnormal product costs a microcode assist each (cpu.h, ATT_P_CUT). */
static void test_attention_no_subnormals(void) {
        enum { N_POS = 600, N_HEAD = 32, N_KV = 8, HD = 64 };
        const long ld = (long) N_KV * HD;
        const size_t rb = axp_type_row_size(AXP_TYPE_F16, ld);
        float *kf = malloc(sizeof(float) * N_POS * ld), *vf = malloc(sizeof(float) * N_POS * ld);
        char *k = malloc(rb * N_POS), *v = malloc(rb * N_POS);
        kv_fill(AXP_TYPE_F16, N_POS, ld, 40.0f, kf, vf, k, v);
        float q[N_HEAD * HD], out[N_HEAD * HD];
        for (int i = 0; i < N_HEAD * HD; i++)
                q[i] = gauss();
        int32_t pos = N_POS - 1;
        float scale = 0.125f;
        double *ref = malloc(sizeof(double) * N_HEAD * HD), *ref50 = malloc(sizeof(double) * N_HEAD * HD);
        ref_attention(q, N_HEAD * HD, ref, kf, vf, 1, &pos, N_HEAD, N_KV, HD, 0, scale, 0);
        ref_attention(q, N_HEAD * HD, ref50, kf, vf, 1, &pos, N_HEAD, N_KV, HD, 0, scale, 50);
        /* head 0's scores do spread that far */
        double smin = INFINITY, smax = -INFINITY;
        for (int t = 0; t < N_POS; t++) {
                double d = 0;
                for (int c = 0; c < HD; c++)
                        d += (double) q[c] * kf[t * ld + c];
                smin = fmin(smin, d * scale);
                smax = fmax(smax, d * scale);
        }
        CHECK_MSG(smax - smin > 150, "scores spread only %.1f", smax - smin);
        for (size_t ii = 0; ii < ELEMENTSOF(all_isas); ii++) {
                if (!isa_use(all_isas[ii]))
                        continue;
                /* and soft-capped at 50 (gemma2's): the capped scores spread to 100 */
                for (int capped = 0; capped <= 1; capped++) {
                        const unsigned flags = 0x12; /* underflow (UE) and denormal operand (DE) */
                        _mm_setcsr(_mm_getcsr() & ~0x3fu);
                        axp_cpu_attention(pools[1], q, N_HEAD * HD, out, N_HEAD * HD, k, v, AXP_TYPE_F16, 1, &pos,
                                          N_HEAD, N_KV, HD, N_KV * HD, HD, 0, 0, scale, capped ? 50.0f : 0.0f);
                        unsigned csr = _mm_getcsr();
                        CHECK_MSG(!(csr & flags), "%s softcap %d: MXCSR flags 0x%x after attention", all_isas[ii],
                                  capped * 50, csr & 0x3f);
                        double maxe = 0;
                        for (int i = 0; i < N_HEAD * HD; i++)
                                maxe = fmax(maxe, fabs(out[i] - (capped ? ref50 : ref)[i]));
                        /* the scores reach a few hundred here, and a float's rounding of them alone
                         * moves the outputs (V of about 1) by some 1e-5: over 40 seeds of this data
                         * the portable path's sequential sums were off by up to 4.0e-5, the vector
                         * paths' by 1.8e-5 */
                        CHECK_MSG(maxe < 1e-4, "%s softcap %d: max error %.3g", all_isas[ii], capped * 50, maxe);
                }
        }
        free(ref);
        free(ref50);
        free(kf);
        free(vf);
        free(k);
        free(v);
}
#endif

/* Pool ---------------------------------------------------------------------------------------- */

typedef struct pool_count {
        int hits[8];
        int nth_seen;
} pool_count;

static void count_fn(void *arg, int ith, int nth) {
        pool_count *c = arg;
        __atomic_fetch_add(&c->hits[ith], 1, __ATOMIC_RELAXED);
        c->nth_seen = nth;
}

/* Threads of this process other than the caller that are running (state R) rather than
 * sleeping. */
static int running_threads(void) {
        int n = 0;
        char path[320];
        long self = syscall(SYS_gettid);
        DIR *d = opendir("/proc/self/task");
        if (!d)
                return -1;
        struct dirent *e;
        while ((e = readdir(d))) {
                if (e->d_name[0] == '.' || atol(e->d_name) == self)
                        continue;
                snprintf(path, sizeof(path), "/proc/self/task/%s/stat", e->d_name);
                FILE *f = fopen(path, "r");
                if (!f)
                        continue;
                char buf[512] = "";
                if (fgets(buf, sizeof(buf), f)) {
                        const char *p = strrchr(buf, ')');
                        if (p && p[1] == ' ' && p[2] == 'R')
                                n++;
                }
                fclose(f);
        }
        closedir(d);
        return n;
}

static void test_pool(void) {
        for (int p = 1; p <= 3; p++) {
                pool_count c = { 0 };
                for (int r = 0; r < 2000; r++)
                        axp_pool_run(pools[p], count_fn, &c);
                /* after the workers have gone to sleep, a run still wakes them */
                struct timespec ts = { 0, 20 * 1000 * 1000 };
                nanosleep(&ts, NULL);
                axp_pool_run(pools[p], count_fn, &c);
                CHECK_EQ_INT(axp_pool_size(pools[p]), p);
                CHECK_EQ_INT(c.nth_seen, p);
                for (int i = 0; i < p; i++)
                        CHECK_EQ_INT(c.hits[i], 2001);
        }
        /* an idle pool sleeps: its workers stop spinning well within 100 ms */
        struct timespec ts = { 0, 100 * 1000 * 1000 };
        nanosleep(&ts, NULL);
        CHECK_EQ_INT(running_threads(), 0);
}

/* The AVX-VNNI table is chosen only where cpuid says the CPU has it (7.1 eax bit 4), never
 * elsewhere (it would fault); the automatic choice takes AVX-512 first where both exist. */
static void test_dispatch(void) {
        bool bit = false;
#if defined(__x86_64__)
        unsigned a, b, c, d;
        if (__get_cpuid_count(7, 0, &a, &b, &c, &d) && a >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d))
                bit = (a >> 4) & 1;
        bool avx2 = axp_cpu_set_isa("avx2");
        CHECK_EQ_INT(axp_cpu_has_avx_vnni(), bit && avx2);
        CHECK_EQ_INT(axp_cpu_set_isa("avx-vnni"), bit && avx2 && axp_avx_vnni_built);
        printf("  AVX-VNNI: cpuid %s, kernels %s\n", bit ? "yes" : "no", axp_avx_vnni_built ? "built" : "not built");
#endif
        CHECK(!axp_cpu_set_isa("no-such-path"));
        CHECK(axp_cpu_set_isa("generic"));
        CHECK(strcmp(axp_cpu_isa(), "generic") == 0);
}

int main(void) {
        for (int p = 1; p <= 3; p++)
                pools[p] = axp_pool_new(p);
        printf("paths here:");
        for (size_t ii = 0; ii < ELEMENTSOF(all_isas); ii++)
                if (axp_cpu_set_isa(all_isas[ii]))
                        printf(" %s", all_isas[ii]);
        printf("\n");
        RUN(test_pool);
        RUN(test_dispatch);
        RUN(test_activation_quantization);
        RUN(test_pk32_layout);
        RUN(test_amx_weights_s8);
        RUN(test_matmul_types);
        RUN(test_matmul_extremes);
        RUN(test_matmul_q8_0_min);
        RUN(test_weight_prepare_pool);
        RUN(test_matmul_batch_invariant);
        RUN(test_matmul_vnni_same_bits);
        RUN(test_matmul_pairs_same_bits);
        RUN(test_matmul_multi);
        RUN(test_matmul_runs);
        RUN(test_weight_slabs);
        RUN(test_attention);
        RUN(test_attention_softcap);
#if defined(__x86_64__)
        RUN(test_attention_no_subnormals);
#endif
        RUN(test_glu);
        RUN(test_softcap);
        /* last: it draws from the random stream the tests above were written against */
        RUN(test_prefetch_tune);
        RUN(test_matmul_prefetch_plans);
        for (int p = 1; p <= 3; p++)
                axp_pool_free(pools[p]);
        TEST_EXIT();
}
