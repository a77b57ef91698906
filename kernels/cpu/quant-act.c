/* SPDX-License-Identifier: MIT */
/* Activation rows for the products (layouts in cpu.h), in portable C. These are the
 * reference: the SIMD quantizers of the other paths must give the same bytes.
 *
 * Q8_0 follows llama.cpp's x86 quantizer exactly, so that a Q8_0 model gives llama.cpp's
 * logits: d = amax / 127 stored as f16, q = round-half-even(x * (127 / amax)); the same rows
 * carry llama.cpp's Q8_1 sum for Q4_1/Q5_1 weights (cpu.h). Q8_K follows
 * llama.cpp's reference: the value of largest magnitude maps to -127, d = 1 / iscale (f32). */
#include <math.h>
#include <string.h>

#include "cpu.h"

enum axp_act_kind axp_act_kind_of(uint32_t type) {
        switch (type) {
        case AXP_TYPE_F16:
                return AXP_ACT_F16;
        case AXP_TYPE_BF16:
                return AXP_ACT_BF16;
        case AXP_TYPE_Q8_0:
        case AXP_TYPE_Q4_0:
        case AXP_TYPE_Q4_1:
        case AXP_TYPE_Q5_0:
        case AXP_TYPE_Q5_1:
        case AXP_TYPE_IQ4_NL:
                return AXP_ACT_Q8_0;
        case AXP_TYPE_Q2_K:
        case AXP_TYPE_Q3_K:
        case AXP_TYPE_Q4_K:
        case AXP_TYPE_Q5_K:
        case AXP_TYPE_Q6_K:
        case AXP_TYPE_IQ4_XS:
                return AXP_ACT_Q8_K;
        default:
                return AXP_ACT_F32;
        }
}

size_t axp_act_stride(enum axp_act_kind kind, int64_t k) {
        size_t n;
        switch (kind) {
        case AXP_ACT_Q8_0:
                n = (size_t) (k / QK8_0) * ACT_Q8_0_BLOCK;
                break;
        case AXP_ACT_Q8_K:
                n = (size_t) (k / QK_K) * ACT_Q8_K_BLOCK;
                break;
        case AXP_ACT_BF16:
                n = (size_t) bf16_pairs(k) * 4;
                break;
        default:
                n = (size_t) k * 4;
                break;
        }
        return axp_align_up(n, AXP_ALIGN);
}

void axp_quant_act_f32(const float *x, int64_t k, uint8_t *row) {
        memcpy(row, x, (size_t) k * sizeof(float));
}

void axp_quant_act_f16(const float *x, int64_t k, uint8_t *row) {
        float *o = (float *) row;
        for (int64_t i = 0; i < k; i++)
                o[i] = axp_f16_to_f32(axp_f32_to_f16(x[i]));
}

void axp_quant_act_bf16(const float *x, int64_t k, uint8_t *row) {
        axp_bf16 *o = (axp_bf16 *) row;
        for (int64_t i = 0; i < k; i++)
                o[i] = axp_f32_to_bf16(x[i]);
        if (k & 1)
                o[k] = 0;
}

void axp_quant_act_q8_0(const float *x, int64_t k, uint8_t *row) {
        for (int64_t b = 0; b < k / QK8_0; b++, x += QK8_0) {
                int8_t *qs = (int8_t *) act_q8_0_qs(row, b);
                float amax = 0;
                for (int j = 0; j < QK8_0; j++)
                        amax = fmaxf(amax, fabsf(x[j]));
                float id = amax != 0.0f ? 127.0f / amax : 0.0f;
                int sum = 0;
                for (int j = 0; j < QK8_0; j++) {
                        qs[j] = (int8_t) nearbyintf(x[j] * id);
                        sum += qs[j];
                }
                act_q8_0_put(row, b, amax / 127.0f, sum);
        }
}

void axp_quant_act_q8_K(const float *x, int64_t k, uint8_t *row) {
        for (int64_t s = 0; s < k / QK_K; s++, x += QK_K) {
                int8_t *qs = (int8_t *) act_q8_K_qs(row, s);
                int16_t bs16[16] = { 0 };
                float amax = 0, max = 0;
                for (int j = 0; j < QK_K; j++)
                        if (fabsf(x[j]) > amax) {
                                amax = fabsf(x[j]);
                                max = x[j];
                        }
                if (amax == 0) {
                        memset(qs, 0, QK_K);
                        act_q8_K_put(row, s, 0.0f, bs16);
                        continue;
                }
                float iscale = -127.0f / max;
                for (int j = 0; j < QK_K; j++) {
                        int v = (int) nearbyintf(iscale * x[j]);
                        qs[j] = (int8_t) (v < 127 ? v : 127);
                        bs16[j / 16] = (int16_t) (bs16[j / 16] + qs[j]);
                }
                act_q8_K_put(row, s, 1.0f / iscale, bs16);
        }
}
