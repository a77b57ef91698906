/* SPDX-License-Identifier: MIT */
/* The portable C path: products of one packed 16-row group with activation rows, and the
 * attention inner loops. It always builds and serves machines without the SIMD paths; it is
 * written for clarity first, with the loop order the packed layout makes natural. */
#include <math.h>
#include <string.h>

#include "cpu.h"

static void store_rows(const float *acc, float *y, int n_rows) {
        for (int r = 0; r < n_rows; r++)
                y[r] = acc[r];
}

static void gemm_f32(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                     int n_rows) {
        const float *w = (const float *) g;
        for (int t = 0; t < n_tok; t++) {
                const float *x = (const float *) (act->data + (t0 + t) * act->stride);
                float acc[AXP_GROUP] = { 0 };
                for (int64_t i = 0; i < act->k; i++)
                        for (int r = 0; r < AXP_GROUP; r++)
                                acc[r] += w[i * AXP_GROUP + r] * x[i];
                store_rows(acc, y + t * ldy, n_rows);
        }
}

static void gemm_f16(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                     int n_rows) {
        const axp_f16 *w = (const axp_f16 *) g;
        for (int t = 0; t < n_tok; t++) {
                const float *x = (const float *) (act->data + (t0 + t) * act->stride);
                float acc[AXP_GROUP] = { 0 };
                for (int64_t i = 0; i < act->k; i++)
                        for (int r = 0; r < AXP_GROUP; r++)
                                acc[r] += axp_f16_to_f32(w[pair16_at(i, r)]) * x[i];
                store_rows(acc, y + t * ldy, n_rows);
        }
}

/* in vdpbf16ps's order (cpu.h): each product is exact in f32, so a product and a sum are an
 * FMA's one rounding */
static void gemm_bf16(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                      int n_rows) {
        const axp_bf16 *w = (const axp_bf16 *) g;
        for (int t = 0; t < n_tok; t++) {
                const axp_bf16 *x = (const axp_bf16 *) (act->data + (t0 + t) * act->stride);
                float acc[2][AXP_GROUP] = { { 0 } };
                for (int64_t p = 0; p < bf16_pairs(act->k); p++) {
                        const axp_bf16 *wp = w + p * 2 * AXP_GROUP;
                        float x0 = axp_bf16_to_f32(x[2 * p]), x1 = axp_bf16_to_f32(x[2 * p + 1]);
                        for (int r = 0; r < AXP_GROUP; r++) {
                                float a = acc[p % 2][r] + axp_bf16_to_f32(wp[2 * r + 1]) * x1;
                                acc[p % 2][r] = a + axp_bf16_to_f32(wp[2 * r]) * x0;
                        }
                }
                for (int r = 0; r < AXP_GROUP; r++)
                        acc[0][r] += acc[1][r];
                store_rows(acc[0], y + t * ldy, n_rows);
        }
}

/* The 32-element block types share one shape: per block of 32, an integer dot of u8 weights
 * with s8 activations, started from the activation-side offset where the weights carry one,
 * times both scales; Q4_1 and Q5_1 then add their minimum times the activations' sum s. */
enum q32_mode {
        Q32_Q8_0,   /* bytes w + 128 */
        Q32_Q4_0,   /* nibbles w + 8 */
        Q32_IQ4_NL, /* nibbles indexing the levels, taken as level + 128 */
        Q32_Q4_1,   /* nibbles, plus minimum */
        Q32_Q5_0,   /* quints w + 16 */
        Q32_Q5_1,   /* quints, plus minimum */
};

static void gemm_q32(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                     int n_rows, enum q32_mode mode) {
        int64_t nb = act->k / QK8_0;
        bool nibbles = mode == Q32_Q4_0 || mode == Q32_IQ4_NL || mode == Q32_Q4_1;
        bool quints = mode == Q32_Q5_0 || mode == Q32_Q5_1;
        bool has_min = mode == Q32_Q4_1 || mode == Q32_Q5_1;
        const pk32 L = pk32_layout(nibbles ? PK32_NIBBLES : quints ? PK32_QUINTS : PK32_BYTES, has_min);
        uint8_t lut[16];
        for (int i = 0; i < 16; i++)
                lut[i] = mode == Q32_IQ4_NL ? (uint8_t) (axp_iq4nl_values[i] + 128) : (uint8_t) i;
        for (int t = 0; t < n_tok; t++) {
                const uint8_t *row = act->data + (t0 + t) * act->stride;
                float acc[AXP_GROUP] = { 0 };
                for (int64_t b = 0; b < nb; b++) {
                        const int8_t *a = act_q8_0_qs(row, b);
                        int32_t start = mode == Q32_Q4_0   ? act_q8_0_c4(row, b)
                                        : mode == Q32_Q5_0 ? 2 * act_q8_0_c4(row, b)
                                        : has_min          ? 0
                                                           : act_q8_0_c8(row, b);
                        int32_t isum[AXP_GROUP];
                        for (int r = 0; r < AXP_GROUP; r++)
                                isum[r] = start;
                        if (nibbles) {
                                const uint8_t *q = g + pk32_quants(L, b);
                                for (int p = 0; p < 4; p++)
                                        for (int r = 0; r < AXP_GROUP; r++)
                                                for (int i = 0; i < 4; i++) {
                                                        uint8_t v = q[p * 64 + r * 4 + i];
                                                        isum[r] += lut[v & 15] * a[8 * p + i] +
                                                                   lut[v >> 4] * a[8 * p + 4 + i];
                                                }
                        } else if (quints) {
                                for (int r = 0; r < AXP_GROUP; r++)
                                        for (int i = 0; i < 4; i++) {
                                                int w[8];
                                                quints_row(g + pk32_quants(L, b), r, i, w);
                                                for (int m = 0; m < 8; m++)
                                                        isum[r] += w[m] * a[4 * m + i];
                                        }
                        } else {
                                const uint8_t *q = g + pk32_quants(L, b);
                                for (int j = 0; j < 8; j++)
                                        for (int r = 0; r < AXP_GROUP; r++)
                                                for (int i = 0; i < 4; i++)
                                                        isum[r] += q[j * 64 + r * 4 + i] * a[4 * j + i];
                        }
                        const axp_f16 *sc = (const axp_f16 *) (g + pk32_scales(L, b));
                        const axp_f16 *mn = (const axp_f16 *) (g + pk32_mins(L, b));
                        for (int r = 0; r < AXP_GROUP; r++) {
                                acc[r] += (float) isum[r] * (axp_f16_to_f32(sc[r]) * act_q8_0_d(row, b));
                                if (has_min)
                                        acc[r] += axp_f16_to_f32(mn[r]) * act_q8_0_s(row, b);
                        }
                }
                store_rows(acc, y + t * ldy, n_rows);
        }
}

static void gemm_q8_0(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                      int n_rows) {
        gemm_q32(g, act, t0, n_tok, y, ldy, n_rows, Q32_Q8_0);
}

static void gemm_q4_0(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                      int n_rows) {
        gemm_q32(g, act, t0, n_tok, y, ldy, n_rows, Q32_Q4_0);
}

static void gemm_iq4_nl(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                        int n_rows) {
        gemm_q32(g, act, t0, n_tok, y, ldy, n_rows, Q32_IQ4_NL);
}

static void gemm_q4_1(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                      int n_rows) {
        gemm_q32(g, act, t0, n_tok, y, ldy, n_rows, Q32_Q4_1);
}

static void gemm_q5_0(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                      int n_rows) {
        gemm_q32(g, act, t0, n_tok, y, ldy, n_rows, Q32_Q5_0);
}

static void gemm_q5_1(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                      int n_rows) {
        gemm_q32(g, act, t0, n_tok, y, ldy, n_rows, Q32_Q5_1);
}

/* Q4_K, and Q5_K (high: each nibble gains its fifth bit from the sub-block's bit vector) */
static void gemm_k_affine(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y,
                          long ldy, int n_rows, bool high) {
        int64_t k = act->k, ns = k / QK_K;
        size_t sb_bytes = high ? PK_Q5_K_SB : PK_Q4_K_SB;
        for (int t = 0; t < n_tok; t++) {
                const uint8_t *row = act->data + (t0 + t) * act->stride;
                float acc[AXP_GROUP] = { 0 };
                for (int64_t s = 0; s < ns; s++) {
                        const uint8_t *sb = g + s * sb_bytes;
                        const axp_f16 *d = (const axp_f16 *) sb, *dmin = (const axp_f16 *) (sb + 32);
                        const int8_t *a = act_q8_K_qs(row, s);
                        const int16_t *bs32 = act_q8_K_bs32(row, s);
                        for (int r = 0; r < AXP_GROUP; r++) {
                                int32_t sum = 0, msum = 0;
                                for (int j = 0; j < 8; j++) {
                                        int32_t isum = 0;
                                        for (int i = 0; i < 4; i++) {
                                                int w[8]; /* quad m's weight i */
                                                if (high) {
                                                        quints_row(sb + PK_Q4_K_HEAD + j * 320, r, i, w);
                                                } else {
                                                        const uint8_t *q = sb + PK_Q4_K_HEAD + j * 256 + r * 4 + i;
                                                        for (int p = 0; p < 4; p++) {
                                                                w[2 * p] = q[64 * p] & 15;
                                                                w[2 * p + 1] = q[64 * p] >> 4;
                                                        }
                                                }
                                                for (int m = 0; m < 8; m++)
                                                        isum += w[m] * a[32 * j + 4 * m + i];
                                        }
                                        sum += isum * sb[64 + j * 16 + r];
                                        msum += sb[192 + (j / 2) * 32 + r * 2 + (j & 1)] * bs32[j];
                                }
                                acc[r] += act_q8_K_d(row, s) * (axp_f16_to_f32(d[r]) * (float) sum -
                                                   axp_f16_to_f32(dmin[r]) * (float) msum);
                        }
                }
                store_rows(acc, y + t * ldy, n_rows);
        }
}

static void gemm_q4_K(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                      int n_rows) {
        gemm_k_affine(g, act, t0, n_tok, y, ldy, n_rows, false);
}

static void gemm_q5_K(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                      int n_rows) {
        gemm_k_affine(g, act, t0, n_tok, y, ldy, n_rows, true);
}

static void gemm_q6_K(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                      int n_rows) {
        int64_t k = act->k, ns = k / QK_K;
        for (int t = 0; t < n_tok; t++) {
                const uint8_t *row = act->data + (t0 + t) * act->stride;
                float acc[AXP_GROUP] = { 0 };
                for (int64_t s = 0; s < ns; s++) {
                        const uint8_t *sb = g + s * PK_Q6_K_SB;
                        const axp_f16 *d = (const axp_f16 *) sb;
                        const int8_t *a = act_q8_K_qs(row, s);
                        const int16_t *bs16 = act_q8_K_bs16(row, s);
                        for (int r = 0; r < AXP_GROUP; r++) {
                                int32_t sum = 0;
                                for (int j = 0; j < 16; j++) {
                                        const uint8_t *q = sb + PK_Q6_K_HEAD + j * 192 + r * 4;
                                        const int8_t *aj = a + 16 * j;
                                        int32_t isum = 0;
                                        for (int i = 0; i < 4; i++) {
                                                int q0 = q[i] & 63, q1 = q[64 + i] & 63, q2 = q[128 + i] & 63;
                                                int q3 = q[i] >> 6 | (q[64 + i] >> 6) << 2 | (q[128 + i] >> 6) << 4;
                                                isum += q0 * aj[i] + q1 * aj[4 + i] + q2 * aj[8 + i] +
                                                        q3 * aj[12 + i];
                                        }
                                        int8_t scj = (int8_t) sb[32 + (j / 2) * 32 + r * 2 + (j & 1)];
                                        sum += scj * (isum - 32 * bs16[j]);
                                }
                                acc[r] += act_q8_K_d(row, s) * axp_f16_to_f32(d[r]) * (float) sum;
                        }
                }
                store_rows(acc, y + t * ldy, n_rows);
        }
}

/* Q2_K: per sub-block of 16 the crumb dot times the 4-bit scale; the mins term is the
 * integer dot of the 4-bit mins with the activation sums of 16. */
static void gemm_q2_K(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                      int n_rows) {
        int64_t k = act->k, ns = k / QK_K;
        for (int t = 0; t < n_tok; t++) {
                const uint8_t *row = act->data + (t0 + t) * act->stride;
                float acc[AXP_GROUP] = { 0 };
                for (int64_t s = 0; s < ns; s++) {
                        const uint8_t *sb = g + s * PK_Q2_K_SB;
                        const axp_f16 *d = (const axp_f16 *) sb, *dmin = (const axp_f16 *) (sb + 32);
                        const int8_t *a = act_q8_K_qs(row, s);
                        const int16_t *bs16 = act_q8_K_bs16(row, s);
                        for (int r = 0; r < AXP_GROUP; r++) {
                                int32_t sum = 0, msum = 0;
                                for (int j = 0; j < 16; j++) {
                                        const uint8_t *q = sb + PK_Q2_K_HEAD + j * 64 + r * 4;
                                        int32_t isum = 0;
                                        for (int p = 0; p < 4; p++)
                                                for (int i = 0; i < 4; i++)
                                                        isum += ((q[i] >> (2 * p)) & 3) * a[16 * j + 4 * p + i];
                                        uint8_t sc = sb[64 + (j / 2) * 32 + r * 2 + (j & 1)];
                                        sum += isum * (sc & 15);
                                        msum += (sc >> 4) * bs16[j];
                                }
                                acc[r] += act_q8_K_d(row, s) * (axp_f16_to_f32(d[r]) * (float) sum -
                                                                axp_f16_to_f32(dmin[r]) * (float) msum);
                        }
                }
                store_rows(acc, y + t * ldy, n_rows);
        }
}

/* Q3_K: q = w + 4 in 0..7 from the pair's three vectors; per sub-block of 16 the dot less
 * 4 times the activation sum, times the signed 6-bit scale. */
static void gemm_q3_K(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                      int n_rows) {
        int64_t k = act->k, ns = k / QK_K;
        const uint8_t *qbase = g + pk_q3_K_qs_offset(k);
        for (int t = 0; t < n_tok; t++) {
                const uint8_t *row = act->data + (t0 + t) * act->stride;
                float acc[AXP_GROUP] = { 0 };
                for (int64_t s = 0; s < ns; s++) {
                        const uint8_t *h = g + s * PK_Q3_K_HEAD, *qs = qbase + s * PK_Q3_K_QS;
                        const axp_f16 *d = (const axp_f16 *) h;
                        const int8_t *a = act_q8_K_qs(row, s);
                        const int16_t *bs16 = act_q8_K_bs16(row, s);
                        for (int r = 0; r < AXP_GROUP; r++) {
                                int32_t sum = 0;
                                for (int j = 0; j < 16; j++) {
                                        /* the pair's three vectors, row r (cpu.h) */
                                        const uint8_t *v = qs + (j / 2) * 192 + r * 4;
                                        int32_t isum = -4 * bs16[j];
                                        for (int p = 0; p < 4; p++)
                                                for (int i = 0; i < 4; i++) {
                                                        int w;
                                                        if (p < 3)
                                                                w = (v[64 * p + i] >> (3 * (j & 1))) & 7;
                                                        else if (j & 1)
                                                                w = v[128 + i] >> 6 | (v[64 + i] >> 7) << 2;
                                                        else
                                                                w = v[i] >> 6 | ((v[64 + i] >> 6) & 1) << 2;
                                                        isum += w * a[16 * j + 4 * p + i];
                                                }
                                        int sc = ((h[32 + (j / 2) * 16 + r] >> (4 * (j & 1))) & 15) |
                                                 ((h[160 + (j / 4) * 16 + r] >> (2 * (j & 3))) & 3) << 4;
                                        sum += isum * (sc - 32);
                                }
                                acc[r] += act_q8_K_d(row, s) * axp_f16_to_f32(d[r]) * (float) sum;
                        }
                }
                store_rows(acc, y + t * ldy, n_rows);
        }
}

/* IQ4_XS: per sub-block of 32 the levels (as level + 128, the offset taken from the
 * activation sums) dotted with the activations, times the signed 6-bit scale in float. */
static void gemm_iq4_xs(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                        int n_rows) {
        int64_t k = act->k, ns = k / QK_K;
        for (int t = 0; t < n_tok; t++) {
                const uint8_t *row = act->data + (t0 + t) * act->stride;
                float acc[AXP_GROUP] = { 0 };
                for (int64_t s = 0; s < ns; s++) {
                        const uint8_t *sb = g + s * PK_IQ4_XS_SB;
                        const axp_f16 *d = (const axp_f16 *) sb;
                        const int8_t *a = act_q8_K_qs(row, s);
                        const int16_t *bs32 = act_q8_K_bs32(row, s);
                        for (int r = 0; r < AXP_GROUP; r++) {
                                float sum = 0;
                                for (int j = 0; j < 8; j++) {
                                        const uint8_t *q = sb + PK_IQ4_XS_HEAD + j * 256 + r * 4;
                                        int32_t isum = -128 * bs32[j];
                                        for (int p = 0; p < 4; p++)
                                                for (int i = 0; i < 4; i++) {
                                                        uint8_t v = q[p * 64 + i];
                                                        isum += (axp_iq4nl_values[v & 15] + 128) * a[32 * j + 8 * p + i] +
                                                                (axp_iq4nl_values[v >> 4] + 128) * a[32 * j + 8 * p + 4 + i];
                                                }
                                        int ls = ((sb[32 + (j / 2) * 16 + r] >> (4 * (j & 1))) & 15) |
                                                 ((sb[96 + (j / 4) * 16 + r] >> (2 * (j & 3))) & 3) << 4;
                                        sum += (float) isum * (float) (ls - 32);
                                }
                                acc[r] += act_q8_K_d(row, s) * (axp_f16_to_f32(d[r]) * sum);
                        }
                }
                store_rows(acc, y + t * ldy, n_rows);
        }
}

static float kv_get(const void *kv, uint32_t type, long i) {
        if (type == AXP_TYPE_Q8_0) {
                const block_q8_0 *b = (const block_q8_0 *) kv + i / QK8_0;
                return axp_f16_to_f32(b->d) * (float) b->qs[i % QK8_0];
        }
        return type == AXP_TYPE_F16 ? axp_f16_to_f32(((const axp_f16 *) kv)[i]) : ((const float *) kv)[i];
}

static void att_chunk(const float *const *q, int nv, const int *len, const void *k, const void *v,
                      uint32_t kv_type, long ld, int n_pos, int head_dim, float scale, float softcap,
                      float *m, float *l, float *acc, float *scratch) {
        float *s = scratch, inv = softcap > 0 ? 1.0f / softcap : 0;
        for (int j = 0; j < nv; j++) {
                float mx = -INFINITY, sum = 0;
                for (int t = 0; t < len[j]; t++) {
                        float d = 0;
                        for (int c = 0; c < head_dim; c++)
                                d += q[j][c] * kv_get(k, kv_type, t * ld + c);
                        s[t] = d * scale;
                        mx = fmaxf(mx, s[t]);
                }
                /* soft-capped: the max of the capped scores, over again */
                if (softcap > 0) {
                        mx = -INFINITY;
                        for (int t = 0; t < len[j]; t++) {
                                s[t] = att_softcap(s[t], softcap, inv);
                                mx = fmaxf(mx, s[t]);
                        }
                }
                float *a = acc + (size_t) j * head_dim;
                memset(a, 0, (size_t) head_dim * sizeof(float));
                for (int t = 0; t < len[j]; t++) {
                        float p = att_weight(s[t] - mx);
                        sum += p;
                        for (int c = 0; c < head_dim; c++)
                                a[c] += p * kv_get(v, kv_type, t * ld + c);
                }
                m[j] = mx;
                l[j] = sum;
        }
}

/* g sigmoid(x) u, x = g (SiLU) or 2 sqrt(2/pi) (g + 0.044715 g^3) (GELU: 1/2 (1 + tanh(z)) is
 * sigmoid(2z), which keeps its relative precision where tanh(z) nears -1) */
static void glu(int act, float *g, const float *u, long n) {
        for (long i = 0; i < n; i++) {
                float x = act == AXP_GLU_GELU_TANH ? 1.5957691216f * (g[i] + 0.044715f * g[i] * g[i] * g[i]) : g[i];
                g[i] = g[i] / (1.0f + expf(-x)) * u[i];
        }
}

static void softcap(float *x, long n, float cap) {
        const float inv = 1.0f / cap;
        for (long i = 0; i < n; i++)
                x[i] = att_softcap(x[i], cap, inv);
}

const axp_cpu_ops axp_cpu_ops_generic = {
        .name = "generic",
        .quant = {
                [AXP_ACT_F32] = axp_quant_act_f32,
                [AXP_ACT_F16] = axp_quant_act_f16,
                [AXP_ACT_BF16] = axp_quant_act_bf16,
                [AXP_ACT_Q8_0] = axp_quant_act_q8_0,
                [AXP_ACT_Q8_K] = axp_quant_act_q8_K,
        },
        .gemm = {
                [AXP_TYPE_F32] = gemm_f32,
                [AXP_TYPE_F16] = gemm_f16,
                [AXP_TYPE_BF16] = gemm_bf16,
                [AXP_TYPE_Q8_0] = gemm_q8_0,
                [AXP_TYPE_Q4_0] = gemm_q4_0,
                [AXP_TYPE_Q5_0] = gemm_q5_0,
                [AXP_TYPE_IQ4_NL] = gemm_iq4_nl,
                [AXP_TYPE_Q4_1] = gemm_q4_1,
                [AXP_TYPE_Q5_1] = gemm_q5_1,
                [AXP_TYPE_Q4_K] = gemm_q4_K,
                [AXP_TYPE_Q5_K] = gemm_q5_K,
                [AXP_TYPE_Q6_K] = gemm_q6_K,
                [AXP_TYPE_Q2_K] = gemm_q2_K,
                [AXP_TYPE_Q3_K] = gemm_q3_K,
                [AXP_TYPE_IQ4_XS] = gemm_iq4_xs,
        },
        .att_chunk = att_chunk,
        .glu = glu,
        .softcap = softcap,
};
