/* SPDX-License-Identifier: MIT */
/* Activation rows for the products (layouts in cpu.h), in portable C. These are the
 * reference: the SIMD quantizers of the other paths must give the same bytes.
 *
 * Q8_0 follows llama.cpp's x86 quantizer exactly, so that a Q8_0 model gives llama.cpp's
 * logits: d = amax / 127 stored as f16, q = round-half-even(x * (127 / amax)). Q8_K follows
 * llama.cpp's reference: the value of largest magnitude maps to -127, d = 1 / iscale (f32). */
#include <math.h>
#include <string.h>

#include "cpu.h"

enum axp_act_kind axp_act_kind_of(uint32_t type) {
        switch (type) {
        case AXP_TYPE_F16:
                return AXP_ACT_F16;
        case AXP_TYPE_Q8_0:
        case AXP_TYPE_Q4_0:
                return AXP_ACT_Q8_0;
        case AXP_TYPE_Q4_K:
        case AXP_TYPE_Q6_K:
                return AXP_ACT_Q8_K;
        default:
                return AXP_ACT_F32;
        }
}

size_t axp_act_stride(enum axp_act_kind kind, int64_t k) {
        size_t n;
        switch (kind) {
        case AXP_ACT_Q8_0:
                n = (size_t) k + 12 * (size_t) (k / QK8_0);
                break;
        case AXP_ACT_Q8_K:
                n = (size_t) k + 52 * (size_t) (k / QK_K);
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

void axp_quant_act_q8_0(const float *x, int64_t k, uint8_t *row) {
        int8_t *qs = (int8_t *) row;
        float *d = act_q8_0_d(row, k);
        int32_t *c8 = act_q8_0_c8(row, k), *c4 = act_q8_0_c4(row, k);
        for (int64_t b = 0; b < k / QK8_0; b++, x += QK8_0, qs += QK8_0) {
                float amax = 0;
                for (int j = 0; j < QK8_0; j++)
                        amax = fmaxf(amax, fabsf(x[j]));
                d[b] = axp_f16_to_f32(axp_f32_to_f16(amax / 127.0f));
                float id = amax != 0.0f ? 127.0f / amax : 0.0f;
                int sum = 0;
                for (int j = 0; j < QK8_0; j++) {
                        qs[j] = (int8_t) nearbyintf(x[j] * id);
                        sum += qs[j];
                }
                c8[b] = -128 * sum;
                c4[b] = -8 * sum;
        }
}

void axp_quant_act_q8_K(const float *x, int64_t k, uint8_t *row) {
        int8_t *qs = (int8_t *) row;
        float *d = act_q8_K_d(row, k);
        int16_t *bs16 = act_q8_K_bs16(row, k), *bs32 = act_q8_K_bs32(row, k);
        for (int64_t s = 0; s < k / QK_K; s++, x += QK_K, qs += QK_K) {
                float amax = 0, max = 0;
                for (int j = 0; j < QK_K; j++)
                        if (fabsf(x[j]) > amax) {
                                amax = fabsf(x[j]);
                                max = x[j];
                        }
                if (amax == 0) {
                        memset(qs, 0, QK_K);
                        memset(bs16 + 16 * s, 0, 32);
                        memset(bs32 + 8 * s, 0, 16);
                        d[s] = 0;
                        continue;
                }
                float iscale = -127.0f / max;
                for (int j = 0; j < QK_K; j++) {
                        int v = (int) nearbyintf(iscale * x[j]);
                        qs[j] = (int8_t) (v < 127 ? v : 127);
                }
                for (int j = 0; j < 16; j++) {
                        int sum = 0;
                        for (int l = 0; l < 16; l++)
                                sum += qs[16 * j + l];
                        bs16[16 * s + j] = (int16_t) sum;
                }
                for (int j = 0; j < 8; j++)
                        bs32[8 * s + j] = (int16_t) (bs16[16 * s + 2 * j] + bs16[16 * s + 2 * j + 1]);
                d[s] = 1.0f / iscale;
        }
}
