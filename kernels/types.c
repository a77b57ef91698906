/* SPDX-License-Identifier: MIT */
/* Tensor types: traits, half-precision conversion, and the reference (scalar, obviously
 * correct) quantize/dequantize routines. The fast paths live in kernels/cpu; tests check them
 * against these. Block layouts follow the GGUF/ggml definitions (see types.h). */
#include "types.h"

#include <math.h>
#include <string.h>
#include <strings.h>

#include "macros.h"

static const axp_type_traits traits[AXP_TYPE__MAX] = {
        [AXP_TYPE_F32] = { "F32", 1, 4, true },
        [AXP_TYPE_F16] = { "F16", 1, 2, true },
        [AXP_TYPE_Q4_0] = { "Q4_0", QK4_0, sizeof(block_q4_0), true },
        [AXP_TYPE_Q4_1] = { "Q4_1", QK4_1, sizeof(block_q4_1), true },
        [AXP_TYPE_Q5_0] = { "Q5_0", QK5_0, sizeof(block_q5_0), true },
        [AXP_TYPE_Q5_1] = { "Q5_1", QK5_1, sizeof(block_q5_1), true },
        [AXP_TYPE_Q8_0] = { "Q8_0", QK8_0, sizeof(block_q8_0), true },
        [AXP_TYPE_Q8_1] = { "Q8_1", 32, 36, false },
        [AXP_TYPE_Q2_K] = { "Q2_K", QK_K, 84, false },
        [AXP_TYPE_Q3_K] = { "Q3_K", QK_K, 110, false },
        [AXP_TYPE_Q4_K] = { "Q4_K", QK_K, sizeof(block_q4_K), true },
        [AXP_TYPE_Q5_K] = { "Q5_K", QK_K, sizeof(block_q5_K), true },
        [AXP_TYPE_Q6_K] = { "Q6_K", QK_K, sizeof(block_q6_K), true },
        [AXP_TYPE_Q8_K] = { "Q8_K", QK_K, sizeof(block_q8_K), false },
        [16] = { "IQ2_XXS", QK_K, 66, false },
        [17] = { "IQ2_XS", QK_K, 74, false },
        [18] = { "IQ3_XXS", QK_K, 98, false },
        [19] = { "IQ1_S", QK_K, 50, false },
        [AXP_TYPE_IQ4_NL] = { "IQ4_NL", QK4_NL, sizeof(block_iq4_nl), true },
        [21] = { "IQ3_S", QK_K, 110, false },
        [22] = { "IQ2_S", QK_K, 82, false },
        [23] = { "IQ4_XS", QK_K, 136, false },
        [24] = { "I8", 1, 1, false },
        [25] = { "I16", 1, 2, false },
        [26] = { "I32", 1, 4, false },
        [27] = { "I64", 1, 8, false },
        [28] = { "F64", 1, 8, false },
        [29] = { "IQ1_M", QK_K, 56, false },
        [AXP_TYPE_BF16] = { "BF16", 1, 2, true },
        [34] = { "TQ1_0", QK_K, 54, false },
        [35] = { "TQ2_0", QK_K, 66, false },
        [39] = { "MXFP4", 32, 17, false },
};

const int8_t axp_iq4nl_values[16] = { -127, -104, -83, -65, -49, -35, -22, -10,
                                       1,    13,   25,  38,  53,  69,  89,  113 };

const axp_type_traits *axp_type_traits_get(uint32_t type) {
        if (type >= AXP_TYPE__MAX || !traits[type].name)
                return NULL;
        return &traits[type];
}

uint64_t axp_type_row_size(uint32_t type, int64_t n) {
        const axp_type_traits *t = axp_type_traits_get(type);
        if (!t || n < 0 || n % t->blck != 0)
                return 0;
        return (uint64_t) (n / t->blck) * t->bytes;
}

int axp_type_from_name(const char *name) {
        for (uint32_t i = 0; i < AXP_TYPE__MAX; i++) {
                if (traits[i].name && strcasecmp(traits[i].name, name) == 0)
                        return (int) i;
        }
        return -1;
}

/* Half precision ------------------------------------------------------------------------ */

static inline uint32_t f32_bits(float f) {
        uint32_t u;
        memcpy(&u, &f, 4);
        return u;
}

static inline float bits_f32(uint32_t u) {
        float f;
        memcpy(&f, &u, 4);
        return f;
}

float axp_f16_to_f32(axp_f16 h) {
        uint32_t sign = (uint32_t) (h & 0x8000) << 16;
        uint32_t exp = (h >> 10) & 0x1f;
        uint32_t man = h & 0x3ff;
        if (exp == 0x1f) /* inf, nan */
                return bits_f32(sign | 0x7f800000u | (man << 13));
        if (exp == 0) {
                if (man == 0)
                        return bits_f32(sign);
                /* subnormal: value = man * 2^-24 */
                float v = (float) man * 0x1p-24f;
                return sign ? -v : v;
        }
        return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

axp_f16 axp_f32_to_f16(float f) {
        uint32_t u = f32_bits(f);
        uint32_t sign = (u >> 16) & 0x8000;
        uint32_t a = u & 0x7fffffffu;
        if (a >= 0x7f800000u) /* inf or nan */
                return (axp_f16) (sign | 0x7c00 | (a > 0x7f800000u ? 0x200 : 0));
        if (a >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
                return (axp_f16) (sign | 0x7c00);
        if (a < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
                /* value / 2^-24, rounded to nearest even */
                float v = bits_f32(a) * 0x1p24f;
                float r = nearbyintf(v); /* default rounding mode: nearest even */
                return (axp_f16) (sign | (uint32_t) r);
        }
        /* normal: round the 23-bit mantissa to 10 bits, nearest even */
        uint32_t mant_odd = (a >> 13) & 1;
        a += 0xfff + mant_odd;
        return (axp_f16) (sign | ((a - 0x38000000u) >> 13));
}

float axp_bf16_to_f32(axp_bf16 h) {
        return bits_f32((uint32_t) h << 16);
}

axp_bf16 axp_f32_to_bf16(float f) {
        uint32_t u = f32_bits(f);
        if ((u & 0x7fffffffu) > 0x7f800000u) /* nan: keep it a quiet nan */
                return (axp_bf16) ((u >> 16) | 64);
        return (axp_bf16) ((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}

/* Dequantization ---------------------------------------------------------------------------- */

static void dequant_q4_0(const block_q4_0 *b, float *y, int64_t nb) {
        for (int64_t i = 0; i < nb; i++) {
                float d = axp_f16_to_f32(b[i].d);
                for (int j = 0; j < QK4_0 / 2; j++) {
                        y[i * QK4_0 + j] = d * (float) ((b[i].qs[j] & 0x0f) - 8);
                        y[i * QK4_0 + j + QK4_0 / 2] = d * (float) ((b[i].qs[j] >> 4) - 8);
                }
        }
}

static void dequant_q4_1(const block_q4_1 *b, float *y, int64_t nb) {
        for (int64_t i = 0; i < nb; i++) {
                float d = axp_f16_to_f32(b[i].d), m = axp_f16_to_f32(b[i].m);
                for (int j = 0; j < QK4_1 / 2; j++) {
                        y[i * QK4_1 + j] = (float) (b[i].qs[j] & 0x0f) * d + m;
                        y[i * QK4_1 + j + QK4_1 / 2] = (float) (b[i].qs[j] >> 4) * d + m;
                }
        }
}

/* The five-bit quants 0..31 of a Q5_0/Q5_1 block, in element order. */
static void q5_unpack(const uint8_t *qh4, const uint8_t *qs, uint8_t *q) {
        uint32_t qh = (uint32_t) qh4[0] | (uint32_t) qh4[1] << 8 | (uint32_t) qh4[2] << 16 |
                      (uint32_t) qh4[3] << 24;
        for (int j = 0; j < 16; j++) {
                q[j] = (uint8_t) ((qs[j] & 0x0f) | ((qh >> j) & 1) << 4);
                q[j + 16] = (uint8_t) ((qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4);
        }
}

static void dequant_q5_0(const block_q5_0 *b, float *y, int64_t nb) {
        for (int64_t i = 0; i < nb; i++) {
                float d = axp_f16_to_f32(b[i].d);
                uint8_t q[32];
                q5_unpack(b[i].qh, b[i].qs, q);
                for (int j = 0; j < 32; j++)
                        y[i * 32 + j] = (float) (q[j] - 16) * d;
        }
}

static void dequant_q5_1(const block_q5_1 *b, float *y, int64_t nb) {
        for (int64_t i = 0; i < nb; i++) {
                float d = axp_f16_to_f32(b[i].d), m = axp_f16_to_f32(b[i].m);
                uint8_t q[32];
                q5_unpack(b[i].qh, b[i].qs, q);
                for (int j = 0; j < 32; j++)
                        y[i * 32 + j] = (float) q[j] * d + m;
        }
}

static void dequant_iq4_nl(const block_iq4_nl *b, float *y, int64_t nb) {
        for (int64_t i = 0; i < nb; i++) {
                float d = axp_f16_to_f32(b[i].d);
                for (int j = 0; j < QK4_NL / 2; j++) {
                        y[i * QK4_NL + j] = d * (float) axp_iq4nl_values[b[i].qs[j] & 0x0f];
                        y[i * QK4_NL + j + QK4_NL / 2] = d * (float) axp_iq4nl_values[b[i].qs[j] >> 4];
                }
        }
}

static void dequant_q8_0(const block_q8_0 *b, float *y, int64_t nb) {
        for (int64_t i = 0; i < nb; i++) {
                float d = axp_f16_to_f32(b[i].d);
                for (int j = 0; j < QK8_0; j++)
                        y[i * QK8_0 + j] = d * (float) b[i].qs[j];
        }
}

/* The 12 scale bytes of a Q4_K block pack eight 6-bit scales and eight 6-bit mins. */
static inline void q4k_scale_min(int j, const uint8_t *q, uint8_t *ret_sc, uint8_t *ret_m) {
        if (j < 4) {
                *ret_sc = q[j] & 63;
                *ret_m = q[j + 4] & 63;
        } else {
                *ret_sc = (uint8_t) ((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
                *ret_m = (uint8_t) ((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
        }
}

static void dequant_q4_K(const block_q4_K *b, float *y, int64_t nb) {
        for (int64_t i = 0; i < nb; i++) {
                float d = axp_f16_to_f32(b[i].d), dmin = axp_f16_to_f32(b[i].dmin);
                const uint8_t *q = b[i].qs;
                for (int j = 0, is = 0; j < QK_K; j += 64, is += 2, q += 32) {
                        uint8_t sc, m;
                        q4k_scale_min(is, b[i].scales, &sc, &m);
                        float d1 = d * sc, m1 = dmin * m;
                        q4k_scale_min(is + 1, b[i].scales, &sc, &m);
                        float d2 = d * sc, m2 = dmin * m;
                        for (int l = 0; l < 32; l++) {
                                y[l] = d1 * (float) (q[l] & 0x0f) - m1;
                                y[l + 32] = d2 * (float) (q[l] >> 4) - m2;
                        }
                        y += 64;
                }
        }
}

static void dequant_q5_K(const block_q5_K *b, float *y, int64_t nb) {
        for (int64_t i = 0; i < nb; i++) {
                float d = axp_f16_to_f32(b[i].d), dmin = axp_f16_to_f32(b[i].dmin);
                const uint8_t *q = b[i].qs, *qh = b[i].qh;
                for (int j = 0, is = 0; j < QK_K; j += 64, is += 2, q += 32) {
                        uint8_t sc, m;
                        q4k_scale_min(is, b[i].scales, &sc, &m);
                        float d1 = d * sc, m1 = dmin * m;
                        q4k_scale_min(is + 1, b[i].scales, &sc, &m);
                        float d2 = d * sc, m2 = dmin * m;
                        for (int l = 0; l < 32; l++) {
                                int q1 = (q[l] & 0x0f) | ((qh[l] >> is) & 1) << 4;
                                int q2 = (q[l] >> 4) | ((qh[l] >> (is + 1)) & 1) << 4;
                                y[l] = d1 * (float) q1 - m1;
                                y[l + 32] = d2 * (float) q2 - m2;
                        }
                        y += 64;
                }
        }
}

static void dequant_q6_K(const block_q6_K *b, float *y, int64_t nb) {
        for (int64_t i = 0; i < nb; i++) {
                float d = axp_f16_to_f32(b[i].d);
                const uint8_t *ql = b[i].ql, *qh = b[i].qh;
                const int8_t *sc = b[i].scales;
                for (int n = 0; n < QK_K; n += 128) {
                        for (int l = 0; l < 32; l++) {
                                int is = l / 16;
                                int q1 = (int) ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
                                int q2 = (int) ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
                                int q3 = (int) ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                                int q4 = (int) ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                                y[l] = d * sc[is] * q1;
                                y[l + 32] = d * sc[is + 2] * q2;
                                y[l + 64] = d * sc[is + 4] * q3;
                                y[l + 96] = d * sc[is + 6] * q4;
                        }
                        y += 128;
                        ql += 64;
                        qh += 32;
                        sc += 8;
                }
        }
}

void axp_dequantize_row(uint32_t type, const void *src, float *dst, int64_t n) {
        switch (type) {
        case AXP_TYPE_F32:
                memcpy(dst, src, (size_t) n * sizeof(float));
                break;
        case AXP_TYPE_F16:
                for (int64_t i = 0; i < n; i++)
                        dst[i] = axp_f16_to_f32(((const axp_f16 *) src)[i]);
                break;
        case AXP_TYPE_BF16:
                for (int64_t i = 0; i < n; i++)
                        dst[i] = axp_bf16_to_f32(((const axp_bf16 *) src)[i]);
                break;
        case AXP_TYPE_Q4_0:
                dequant_q4_0(src, dst, n / QK4_0);
                break;
        case AXP_TYPE_Q4_1:
                dequant_q4_1(src, dst, n / QK4_1);
                break;
        case AXP_TYPE_Q5_0:
                dequant_q5_0(src, dst, n / QK5_0);
                break;
        case AXP_TYPE_Q5_1:
                dequant_q5_1(src, dst, n / QK5_1);
                break;
        case AXP_TYPE_IQ4_NL:
                dequant_iq4_nl(src, dst, n / QK4_NL);
                break;
        case AXP_TYPE_Q8_0:
                dequant_q8_0(src, dst, n / QK8_0);
                break;
        case AXP_TYPE_Q4_K:
                dequant_q4_K(src, dst, n / QK_K);
                break;
        case AXP_TYPE_Q5_K:
                dequant_q5_K(src, dst, n / QK_K);
                break;
        case AXP_TYPE_Q6_K:
                dequant_q6_K(src, dst, n / QK_K);
                break;
        case AXP_TYPE_Q8_K: {
                const block_q8_K *b = src;
                for (int64_t i = 0; i < n / QK_K; i++)
                        for (int j = 0; j < QK_K; j++)
                                dst[i * QK_K + j] = b[i].d * (float) b[i].qs[j];
                break;
        }
        default:
                memset(dst, 0, (size_t) n * sizeof(float));
                break;
        }
}

/* Quantization ------------------------------------------------------------------------------ */

static inline int nearest_int(float f) {
        return (int) lrintf(f);
}

static void quant_q8_0(const float *x, block_q8_0 *b, int64_t nb) {
        for (int64_t i = 0; i < nb; i++, x += QK8_0) {
                float amax = 0;
                for (int j = 0; j < QK8_0; j++)
                        amax = fmaxf(amax, fabsf(x[j]));
                float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
                b[i].d = axp_f32_to_f16(d);
                for (int j = 0; j < QK8_0; j++)
                        b[i].qs[j] = (int8_t) roundf(x[j] * id);
        }
}

static void quant_q4_0(const float *x, block_q4_0 *b, int64_t nb) {
        for (int64_t i = 0; i < nb; i++, x += QK4_0) {
                /* the value of largest magnitude maps to -8, so the full range is used */
                float amax = 0, max = 0;
                for (int j = 0; j < QK4_0; j++)
                        if (fabsf(x[j]) > amax) {
                                amax = fabsf(x[j]);
                                max = x[j];
                        }
                float d = max / -8.0f, id = d ? 1.0f / d : 0.0f;
                b[i].d = axp_f32_to_f16(d);
                for (int j = 0; j < QK4_0 / 2; j++) {
                        int q0 = MIN(15, (int) (x[j] * id + 8.5f));
                        int q1 = MIN(15, (int) (x[j + QK4_0 / 2] * id + 8.5f));
                        b[i].qs[j] = (uint8_t) (MAX(q0, 0) | (MAX(q1, 0) << 4));
                }
        }
}

/* Q4_1 and Q5_1: the block's range [min, max] in 2^bits - 1 steps, min the offset. */
static void quant_affine(const float *x, int levels, float *ret_d, float *ret_m, uint8_t *q) {
        float lo = x[0], hi = x[0];
        for (int j = 1; j < 32; j++) {
                lo = fminf(lo, x[j]);
                hi = fmaxf(hi, x[j]);
        }
        float d = (hi - lo) / (float) levels, id = d ? 1.0f / d : 0.0f;
        for (int j = 0; j < 32; j++) {
                int v = (int) ((x[j] - lo) * id + 0.5f);
                q[j] = (uint8_t) MIN(levels, MAX(0, v));
        }
        *ret_d = d;
        *ret_m = lo;
}

static void quant_q4_1(const float *x, block_q4_1 *b, int64_t nb) {
        for (int64_t i = 0; i < nb; i++, x += QK4_1) {
                float d, m;
                uint8_t q[32];
                quant_affine(x, 15, &d, &m, q);
                b[i].d = axp_f32_to_f16(d);
                b[i].m = axp_f32_to_f16(m);
                for (int j = 0; j < 16; j++)
                        b[i].qs[j] = (uint8_t) (q[j] | q[j + 16] << 4);
        }
}

static void q5_pack(const uint8_t *q, uint8_t *qh4, uint8_t *qs) {
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
                qs[j] = (uint8_t) ((q[j] & 0x0f) | (q[j + 16] & 0x0f) << 4);
                qh |= (uint32_t) (q[j] >> 4) << j | (uint32_t) (q[j + 16] >> 4) << (j + 16);
        }
        for (int k = 0; k < 4; k++)
                qh4[k] = (uint8_t) (qh >> (8 * k));
}

static void quant_q5_0(const float *x, block_q5_0 *b, int64_t nb) {
        for (int64_t i = 0; i < nb; i++, x += QK5_0) {
                /* as Q4_0: the value of largest magnitude maps to -16 */
                float amax = 0, max = 0;
                for (int j = 0; j < 32; j++)
                        if (fabsf(x[j]) > amax) {
                                amax = fabsf(x[j]);
                                max = x[j];
                        }
                float d = max / -16.0f, id = d ? 1.0f / d : 0.0f;
                uint8_t q[32];
                for (int j = 0; j < 32; j++)
                        q[j] = (uint8_t) MAX(0, MIN(31, (int) (x[j] * id + 16.5f)));
                b[i].d = axp_f32_to_f16(d);
                q5_pack(q, b[i].qh, b[i].qs);
        }
}

static void quant_q5_1(const float *x, block_q5_1 *b, int64_t nb) {
        for (int64_t i = 0; i < nb; i++, x += QK5_1) {
                float d, m;
                uint8_t q[32];
                quant_affine(x, 31, &d, &m, q);
                b[i].d = axp_f32_to_f16(d);
                b[i].m = axp_f32_to_f16(m);
                q5_pack(q, b[i].qh, b[i].qs);
        }
}

/* The IQ4_NL level nearest to v (v in level units). */
static int iq4nl_nearest(float v) {
        int best = 0;
        float be = fabsf(v - axp_iq4nl_values[0]);
        for (int k = 1; k < 16; k++) {
                float e = fabsf(v - axp_iq4nl_values[k]);
                if (e < be) {
                        be = e;
                        best = k;
                }
        }
        return best;
}

/* IQ4_NL: a plain search over candidate scales, not llama.cpp's (weighted) search. Each
 * candidate maps the block's extreme value to one of the outer levels, shrunk in small steps;
 * the values are given their nearest levels, the scale is refitted by least squares, and the
 * candidate with the smallest squared error wins. The stored (f16) scale then picks the final
 * levels. */
static void quant_iq4_nl(const float *x, block_iq4_nl *b, int64_t nb) {
        for (int64_t i = 0; i < nb; i++, x += QK4_NL) {
                float amax = 0, max = 0;
                for (int j = 0; j < 32; j++)
                        if (fabsf(x[j]) > amax) {
                                amax = fabsf(x[j]);
                                max = x[j];
                        }
                if (amax == 0) {
                        memset(&b[i], 0, sizeof(b[i]));
                        continue;
                }
                float best_d = max / (float) axp_iq4nl_values[0];
                double best_err = INFINITY;
                for (int c = 0; c < 42; c++) {
                        /* the extreme at the lowest or the highest level, times 1 + t/40 */
                        int t = c / 2 - 10;
                        float level = (float) axp_iq4nl_values[c % 2 ? 15 : 0];
                        float id = level * (1.0f + (float) t / 40.0f) / max;
                        double sqx = 0, sqq = 0;
                        int L[32];
                        for (int j = 0; j < 32; j++) {
                                L[j] = iq4nl_nearest(x[j] * id);
                                double q = axp_iq4nl_values[L[j]];
                                sqx += q * x[j];
                                sqq += q * q;
                        }
                        if (sqq <= 0)
                                continue;
                        double d = sqx / sqq, err = 0;
                        for (int j = 0; j < 32; j++) {
                                double e = x[j] - d * axp_iq4nl_values[L[j]];
                                err += e * e;
                        }
                        if (err < best_err) {
                                best_err = err;
                                best_d = (float) d;
                        }
                }
                b[i].d = axp_f32_to_f16(best_d);
                float d = axp_f16_to_f32(b[i].d), id = d ? 1.0f / d : 0.0f;
                for (int j = 0; j < 16; j++)
                        b[i].qs[j] = (uint8_t) (iq4nl_nearest(x[j] * id) | iq4nl_nearest(x[j + 16] * id) << 4);
        }
}

/* Q4_K and Q5_K: per sub-block of 32, x ~ scale * q - min with q in 0..levels; 6-bit
 * sub-block scales and mins under the block's f16 d and dmin. L gets the quants. */
static void quant_k_affine(const float *x, int levels, axp_f16 *ret_d, axp_f16 *ret_dmin,
                           uint8_t *scales, uint8_t *L) {
        float sub_scale[8], mins[8], max_scale = 0, max_min = 0;
        for (int s = 0; s < 8; s++) {
                float lo = x[s * 32], hi = x[s * 32];
                for (int l = 1; l < 32; l++) {
                        lo = fminf(lo, x[s * 32 + l]);
                        hi = fmaxf(hi, x[s * 32 + l]);
                }
                if (lo > 0)
                        lo = 0;
                sub_scale[s] = (hi - lo) / (float) levels;
                mins[s] = -lo;
                max_scale = fmaxf(max_scale, sub_scale[s]);
                max_min = fmaxf(max_min, mins[s]);
        }
        float d = max_scale / 63.0f, dmin = max_min / 63.0f;
        float id = d ? 1.0f / d : 0.0f, idmin = dmin ? 1.0f / dmin : 0.0f;
        uint8_t ls[8], lm[8];
        for (int s = 0; s < 8; s++) {
                ls[s] = (uint8_t) MIN(63, nearest_int(sub_scale[s] * id));
                lm[s] = (uint8_t) MIN(63, nearest_int(mins[s] * idmin));
        }
        memset(scales, 0, K_SCALE_SIZE);
        for (int j = 0; j < 8; j++) {
                if (j < 4) {
                        scales[j] = ls[j];
                        scales[j + 4] = lm[j];
                } else {
                        scales[j + 4] = (uint8_t) ((ls[j] & 0x0f) | ((lm[j] & 0x0f) << 4));
                        scales[j - 4] |= (uint8_t) ((ls[j] >> 4) << 6);
                        scales[j] |= (uint8_t) ((lm[j] >> 4) << 6);
                }
        }
        *ret_d = axp_f32_to_f16(d);
        *ret_dmin = axp_f32_to_f16(dmin);
        /* quantize with the stored (rounded) scales so dequantization is consistent */
        float dd = axp_f16_to_f32(*ret_d), dm = axp_f16_to_f32(*ret_dmin);
        for (int s = 0; s < 8; s++) {
                uint8_t sc, m;
                q4k_scale_min(s, scales, &sc, &m);
                float ds = dd * sc, ms = dm * m;
                for (int l = 0; l < 32; l++) {
                        int q = ds ? nearest_int((x[s * 32 + l] + ms) / ds) : 0;
                        L[s * 32 + l] = (uint8_t) MAX(0, MIN(levels, q));
                }
        }
}

static void quant_q4_K(const float *x, block_q4_K *b, int64_t nb) {
        for (int64_t i = 0; i < nb; i++, x += QK_K) {
                uint8_t L[QK_K];
                quant_k_affine(x, 15, &b[i].d, &b[i].dmin, b[i].scales, L);
                uint8_t *q = b[i].qs;
                for (int j = 0; j < QK_K; j += 64, q += 32)
                        for (int l = 0; l < 32; l++)
                                q[l] = (uint8_t) (L[j + l] | (L[j + l + 32] << 4));
        }
}

static void quant_q5_K(const float *x, block_q5_K *b, int64_t nb) {
        for (int64_t i = 0; i < nb; i++, x += QK_K) {
                uint8_t L[QK_K];
                quant_k_affine(x, 31, &b[i].d, &b[i].dmin, b[i].scales, L);
                uint8_t *q = b[i].qs;
                memset(b[i].qh, 0, sizeof(b[i].qh));
                for (int j = 0, s = 0; j < QK_K; j += 64, s += 2, q += 32)
                        for (int l = 0; l < 32; l++) {
                                uint8_t q1 = L[j + l], q2 = L[j + l + 32];
                                q[l] = (uint8_t) ((q1 & 0x0f) | (q2 & 0x0f) << 4);
                                b[i].qh[l] |= (uint8_t) ((q1 >> 4) << s | (q2 >> 4) << (s + 1));
                        }
        }
}

static void quant_q6_K(const float *x, block_q6_K *b, int64_t nb) {
        for (int64_t i = 0; i < nb; i++, x += QK_K) {
                /* per sub-block of 16: the extreme value maps to -32 */
                float scales[16], max_scale = 0, max_abs_scale = 0;
                for (int s = 0; s < 16; s++) {
                        float amax = 0, max = 0;
                        for (int l = 0; l < 16; l++)
                                if (fabsf(x[s * 16 + l]) > amax) {
                                        amax = fabsf(x[s * 16 + l]);
                                        max = x[s * 16 + l];
                                }
                        scales[s] = max / -32.0f;
                        if (fabsf(scales[s]) > max_abs_scale) {
                                max_abs_scale = fabsf(scales[s]);
                                max_scale = scales[s];
                        }
                }
                if (max_abs_scale == 0) {
                        memset(&b[i], 0, sizeof(b[i]));
                        continue;
                }
                float iscale = -128.0f / max_scale;
                b[i].d = axp_f32_to_f16(1.0f / iscale);
                float d = axp_f16_to_f32(b[i].d);
                uint8_t L[QK_K];
                for (int s = 0; s < 16; s++) {
                        b[i].scales[s] = (int8_t) MIN(127, nearest_int(iscale * scales[s]));
                        float ds = d * b[i].scales[s];
                        for (int l = 0; l < 16; l++) {
                                int q = ds ? nearest_int(x[s * 16 + l] / ds) : 0;
                                L[s * 16 + l] = (uint8_t) (MAX(-32, MIN(31, q)) + 32);
                        }
                }
                uint8_t *ql = b[i].ql, *qh = b[i].qh;
                for (int j = 0; j < QK_K; j += 128) {
                        for (int l = 0; l < 32; l++) {
                                uint8_t q1 = L[j + l], q2 = L[j + l + 32];
                                uint8_t q3 = L[j + l + 64], q4 = L[j + l + 96];
                                ql[l] = (uint8_t) ((q1 & 0x0f) | ((q3 & 0x0f) << 4));
                                ql[l + 32] = (uint8_t) ((q2 & 0x0f) | ((q4 & 0x0f) << 4));
                                qh[l] = (uint8_t) ((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) |
                                                   ((q4 >> 4) << 6));
                        }
                        ql += 64;
                        qh += 32;
                }
        }
}

static void quant_q8_K(const float *x, block_q8_K *b, int64_t nb) {
        for (int64_t i = 0; i < nb; i++, x += QK_K) {
                float amax = 0, max = 0;
                for (int j = 0; j < QK_K; j++)
                        if (fabsf(x[j]) > amax) {
                                amax = fabsf(x[j]);
                                max = x[j];
                        }
                if (amax == 0) {
                        memset(&b[i], 0, sizeof(b[i]));
                        continue;
                }
                float iscale = -127.0f / max;
                for (int j = 0; j < QK_K; j++)
                        b[i].qs[j] = (int8_t) MIN(127, nearest_int(iscale * x[j]));
                for (int j = 0; j < QK_K / 16; j++) {
                        int sum = 0;
                        for (int l = 0; l < 16; l++)
                                sum += b[i].qs[j * 16 + l];
                        b[i].bsums[j] = (int16_t) sum;
                }
                b[i].d = 1.0f / iscale;
        }
}

void axp_quantize_row(uint32_t type, const float *src, void *dst, int64_t n) {
        switch (type) {
        case AXP_TYPE_F32:
                memcpy(dst, src, (size_t) n * sizeof(float));
                break;
        case AXP_TYPE_F16:
                for (int64_t i = 0; i < n; i++)
                        ((axp_f16 *) dst)[i] = axp_f32_to_f16(src[i]);
                break;
        case AXP_TYPE_BF16:
                for (int64_t i = 0; i < n; i++)
                        ((axp_bf16 *) dst)[i] = axp_f32_to_bf16(src[i]);
                break;
        case AXP_TYPE_Q4_0:
                quant_q4_0(src, dst, n / QK4_0);
                break;
        case AXP_TYPE_Q4_1:
                quant_q4_1(src, dst, n / QK4_1);
                break;
        case AXP_TYPE_Q5_0:
                quant_q5_0(src, dst, n / QK5_0);
                break;
        case AXP_TYPE_Q5_1:
                quant_q5_1(src, dst, n / QK5_1);
                break;
        case AXP_TYPE_IQ4_NL:
                quant_iq4_nl(src, dst, n / QK4_NL);
                break;
        case AXP_TYPE_Q8_0:
                quant_q8_0(src, dst, n / QK8_0);
                break;
        case AXP_TYPE_Q4_K:
                quant_q4_K(src, dst, n / QK_K);
                break;
        case AXP_TYPE_Q5_K:
                quant_q5_K(src, dst, n / QK_K);
                break;
        case AXP_TYPE_Q6_K:
                quant_q6_K(src, dst, n / QK_K);
                break;
        case AXP_TYPE_Q8_K:
                quant_q8_K(src, dst, n / QK_K);
                break;
        default:
                break;
        }
}
