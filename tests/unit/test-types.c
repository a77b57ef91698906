/* SPDX-License-Identifier: MIT */
/* Tensor types: half-precision conversion and reference quantization round trips. */
#include <string.h>

#include "test.h"
#include "kernels/macros.h"
#include "kernels/types.h"

static uint32_t rng_state = 12345;
static float frand(void) { /* uniform in [-1, 1) */
        rng_state = rng_state * 1664525u + 1013904223u;
        return (float) (rng_state >> 8) / (float) (1 << 23) - 1.0f;
}

static void test_f16_roundtrip_all(void) {
        /* every half converts to float and back to itself (nan payloads aside) */
        int bad = 0;
        for (uint32_t h = 0; h < 65536; h++) {
                float f = axp_f16_to_f32((axp_f16) h);
                if (f != f)
                        continue;
                if (axp_f32_to_f16(f) != h)
                        bad++;
        }
        CHECK_EQ_INT(bad, 0);
}

static void test_f16_matches_hardware(void) {
        /* the compiler's _Float16 rounds to nearest even: agree with it on many values */
        int bad = 0;
        for (int i = 0; i < 200000; i++) {
                float f = frand() * (i % 3 == 0 ? 70000.0f : i % 3 == 1 ? 1.0f : 1e-5f);
                _Float16 hw = (_Float16) f;
                uint16_t hb;
                memcpy(&hb, &hw, 2);
                if (axp_f32_to_f16(f) != hb)
                        bad++;
                if (axp_f16_to_f32(hb) != (float) hw)
                        bad++;
        }
        CHECK_EQ_INT(bad, 0);
}

static void test_bf16(void) {
        CHECK(axp_bf16_to_f32(axp_f32_to_bf16(1.0f)) == 1.0f);
        CHECK(axp_bf16_to_f32(axp_f32_to_bf16(-3.5f)) == -3.5f);
        /* 1 + 2^-8 is exactly between two bf16 values: ties to even (1.0) */
        CHECK(axp_bf16_to_f32(axp_f32_to_bf16(1.0f + 0x1p-8f)) == 1.0f);
        CHECK(axp_bf16_to_f32(axp_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-12f)) == 1.0f + 0x1p-7f);
}

/* Quantize random data, dequantize, and bound the error relative to the block range. */
static double roundtrip_rel_rms(uint32_t type, int n) {
        float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
        void *q = malloc(axp_type_row_size(type, n));
        for (int i = 0; i < n; i++)
                x[i] = frand() * (1.0f + (i / 256) % 4);
        axp_quantize_row(type, x, q, n);
        axp_dequantize_row(type, q, y, n);
        double se = 0, sx = 0;
        for (int i = 0; i < n; i++) {
                se += (double) (x[i] - y[i]) * (x[i] - y[i]);
                sx += (double) x[i] * x[i];
        }
        free(x);
        free(y);
        free(q);
        return sqrt(se / sx);
}

static void test_quant_roundtrip(void) {
        const int n = 4096;
        CHECK(roundtrip_rel_rms(AXP_TYPE_F32, n) == 0);
        CHECK(roundtrip_rel_rms(AXP_TYPE_F16, n) < 1e-3);
        CHECK(roundtrip_rel_rms(AXP_TYPE_BF16, n) < 5e-3);
        CHECK(roundtrip_rel_rms(AXP_TYPE_Q8_0, n) < 0.01);
        CHECK(roundtrip_rel_rms(AXP_TYPE_Q6_K, n) < 0.03);
        CHECK(roundtrip_rel_rms(AXP_TYPE_Q4_0, n) < 0.12);
        CHECK(roundtrip_rel_rms(AXP_TYPE_Q4_K, n) < 0.12);
        /* uniform data: 4 bits give about 1/15 of the range per step, 5 bits half that */
        CHECK(roundtrip_rel_rms(AXP_TYPE_Q4_1, n) < 0.08);
        CHECK(roundtrip_rel_rms(AXP_TYPE_Q5_0, n) < 0.06);
        CHECK(roundtrip_rel_rms(AXP_TYPE_Q5_1, n) < 0.04);
        CHECK(roundtrip_rel_rms(AXP_TYPE_IQ4_NL, n) < 0.12);
        CHECK(roundtrip_rel_rms(AXP_TYPE_Q5_K, n) < 0.06);
        printf("  round trip rel. rms: Q4_0 %.4f Q4_1 %.4f Q5_0 %.4f Q5_1 %.4f IQ4_NL %.4f Q4_K %.4f "
               "Q5_K %.4f\n",
               roundtrip_rel_rms(AXP_TYPE_Q4_0, n), roundtrip_rel_rms(AXP_TYPE_Q4_1, n),
               roundtrip_rel_rms(AXP_TYPE_Q5_0, n), roundtrip_rel_rms(AXP_TYPE_Q5_1, n),
               roundtrip_rel_rms(AXP_TYPE_IQ4_NL, n), roundtrip_rel_rms(AXP_TYPE_Q4_K, n),
               roundtrip_rel_rms(AXP_TYPE_Q5_K, n));
        double q8k = roundtrip_rel_rms(AXP_TYPE_Q8_K, n);
        CHECK(q8k < 0.01);
}

static void test_q8_0_exact(void) {
        /* a block whose extreme is 127 quantizes exactly */
        float x[32];
        for (int i = 0; i < 32; i++)
                x[i] = (float) (i * 4 - 64);
        x[31] = 127;
        block_q8_0 b;
        axp_quantize_row(AXP_TYPE_Q8_0, x, &b, 32);
        CHECK(axp_f16_to_f32(b.d) == 1.0f);
        for (int i = 0; i < 32; i++)
                CHECK_EQ_INT(b.qs[i], (int) x[i]);
}

/* Blocks written by hand in ggml's layouts (little-endian f16 scales, the fifth bits of
 * Q5_x in a little-endian word), dequantized. */
static void put16(uint8_t *p, float f) {
        axp_f16 h = axp_f32_to_f16(f);
        p[0] = (uint8_t) h;
        p[1] = (uint8_t) (h >> 8);
}

static void test_dequant_hand_made(void) {
        float y[32];
        /* Q4_1: d 0.5, m -2; qs[j] = j | (15 - j) << 4 */
        uint8_t q41[20];
        put16(q41, 0.5f);
        put16(q41 + 2, -2.0f);
        for (int j = 0; j < 16; j++)
                q41[4 + j] = (uint8_t) (j | (15 - j) << 4);
        axp_dequantize_row(AXP_TYPE_Q4_1, q41, y, 32);
        for (int j = 0; j < 16; j++) {
                CHECK(y[j] == 0.5f * j - 2.0f);
                CHECK(y[j + 16] == 0.5f * (15 - j) - 2.0f);
        }
        /* Q5_0: d 0.25; nibbles j, the fifth bit set for odd elements (qh 0xaaaaaaaa) */
        uint8_t q50[22];
        put16(q50, 0.25f);
        q50[2] = q50[3] = q50[4] = q50[5] = 0xaa;
        for (int j = 0; j < 16; j++)
                q50[6 + j] = (uint8_t) (j | (15 - j) << 4);
        axp_dequantize_row(AXP_TYPE_Q5_0, q50, y, 32);
        for (int j = 0; j < 16; j++) {
                CHECK(y[j] == 0.25f * ((j | (j & 1) << 4) - 16));
                CHECK(y[j + 16] == 0.25f * (((15 - j) | (j & 1) << 4) - 16));
        }
        /* bit order: only element 17's fifth bit (qh byte 2, bit 1) */
        memset(q50 + 2, 0, 20);
        q50[4] = 0x02;
        axp_dequantize_row(AXP_TYPE_Q5_0, q50, y, 32);
        for (int j = 0; j < 32; j++)
                CHECK(y[j] == (j == 17 ? 0.0f : -4.0f));
        /* Q5_1: d 1, m 3; every quant 31 */
        uint8_t q51[24];
        put16(q51, 1.0f);
        put16(q51 + 2, 3.0f);
        memset(q51 + 4, 0xff, 20);
        axp_dequantize_row(AXP_TYPE_Q5_1, q51, y, 32);
        for (int j = 0; j < 32; j++)
                CHECK(y[j] == 34.0f);
        /* IQ4_NL: d 2; element j < 16 level j, element j + 16 level 15 - j */
        static const int levels[16] = { -127, -104, -83, -65, -49, -35, -22, -10,
                                        1, 13, 25, 38, 53, 69, 89, 113 };
        uint8_t iq[18];
        put16(iq, 2.0f);
        for (int j = 0; j < 16; j++)
                iq[2 + j] = (uint8_t) (j | (15 - j) << 4);
        axp_dequantize_row(AXP_TYPE_IQ4_NL, iq, y, 32);
        for (int j = 0; j < 16; j++) {
                CHECK(y[j] == 2.0f * levels[j]);
                CHECK(y[j + 16] == 2.0f * levels[15 - j]);
        }
}

/* A Q5_K block by hand: d 1, dmin 0.5; sub-block s has scale s + 1 and min 2s (6-bit
 * packing as Q4_K's); nibble l of qs[32i + l] and fifth bits from qh[l] = l * 37. */
static void test_dequant_q5_K(void) {
        uint8_t b[176] = { 0 };
        put16(b, 1.0f);
        put16(b + 2, 0.5f);
        uint8_t sc[8], mn[8];
        for (int s = 0; s < 8; s++) {
                sc[s] = (uint8_t) (s + 1);
                mn[s] = (uint8_t) (2 * s);
        }
        uint8_t *scales = b + 4;
        for (int j = 0; j < 4; j++) {
                scales[j] = sc[j] | (uint8_t) ((sc[j + 4] >> 4) << 6);
                scales[j + 4] = mn[j] | (uint8_t) ((mn[j + 4] >> 4) << 6);
                scales[j + 8] = (uint8_t) ((sc[j + 4] & 15) | (mn[j + 4] & 15) << 4);
        }
        for (int l = 0; l < 32; l++)
                b[16 + l] = (uint8_t) (l * 37);
        for (int i = 0; i < 128; i++)
                b[48 + i] = (uint8_t) (i * 7 + 3);
        float y[256];
        axp_dequantize_row(AXP_TYPE_Q5_K, b, y, 256);
        int bad = 0;
        for (int s = 0; s < 8; s++)
                for (int l = 0; l < 32; l++) {
                        uint8_t byte = b[48 + 32 * (s / 2) + l];
                        int q = (s % 2 ? byte >> 4 : byte & 15) | (((l * 37) & 255) >> s & 1) << 4;
                        bad += y[32 * s + l] != (float) (s + 1) * (float) q - 0.5f * (float) (2 * s);
                }
        CHECK_EQ_INT(bad, 0);
}

/* Values on a type's grid quantize to themselves. */
static void test_quant_exact(void) {
        float x[32], y[32];
        uint8_t buf[64];
        /* Q4_1: min -3, steps of 0.5 */
        for (int j = 0; j < 32; j++)
                x[j] = -3.0f + 0.5f * (float) ((j * 7) % 16);
        x[0] = -3.0f;
        x[1] = 4.5f;
        axp_quantize_row(AXP_TYPE_Q4_1, x, buf, 32);
        axp_dequantize_row(AXP_TYPE_Q4_1, buf, y, 32);
        CHECK(memcmp(x, y, sizeof(x)) == 0);
        /* Q5_1: 32 steps of 0.25 from -1 */
        for (int j = 0; j < 32; j++)
                x[j] = -1.0f + 0.25f * (float) ((j * 5) % 32);
        axp_quantize_row(AXP_TYPE_Q5_1, x, buf, 32);
        axp_dequantize_row(AXP_TYPE_Q5_1, buf, y, 32);
        CHECK(memcmp(x, y, sizeof(x)) == 0);
        /* Q5_0: the extreme -16 d */
        for (int j = 0; j < 32; j++)
                x[j] = 0.5f * (float) ((j * 3) % 32 - 16);
        x[5] = -8.0f;
        axp_quantize_row(AXP_TYPE_Q5_0, x, buf, 32);
        axp_dequantize_row(AXP_TYPE_Q5_0, buf, y, 32);
        CHECK(memcmp(x, y, sizeof(x)) == 0);
        /* IQ4_NL: levels times 0.125, both extremes present */
        for (int j = 0; j < 32; j++)
                x[j] = 0.125f * (float) axp_iq4nl_values[(j * 11) % 16];
        x[0] = 0.125f * -127;
        x[1] = 0.125f * 113;
        axp_quantize_row(AXP_TYPE_IQ4_NL, x, buf, 32);
        axp_dequantize_row(AXP_TYPE_IQ4_NL, buf, y, 32);
        CHECK(memcmp(x, y, sizeof(x)) == 0);
        /* an all-zero block stays zero (Q5_0's scale -0 / 16 may make it -0) */
        memset(x, 0, sizeof(x));
        const uint32_t types[] = { AXP_TYPE_Q4_1, AXP_TYPE_Q5_0, AXP_TYPE_Q5_1, AXP_TYPE_IQ4_NL };
        for (size_t i = 0; i < ELEMENTSOF(types); i++) {
                axp_quantize_row(types[i], x, buf, 32);
                axp_dequantize_row(types[i], buf, y, 32);
                for (int j = 0; j < 32; j++)
                        CHECK(y[j] == 0.0f);
        }
}

static void test_traits(void) {
        CHECK_EQ_INT(axp_type_row_size(AXP_TYPE_Q8_0, 64), 68);
        CHECK_EQ_INT(axp_type_row_size(AXP_TYPE_Q8_0, 63), 0);
        CHECK_EQ_INT(axp_type_row_size(AXP_TYPE_Q4_K, 512), 288);
        CHECK_EQ_INT(axp_type_row_size(AXP_TYPE_Q6_K, 256), 210);
        CHECK_EQ_INT(axp_type_row_size(AXP_TYPE_BF16, 3), 6);
        CHECK_EQ_INT(axp_type_row_size(99, 32), 0);
        CHECK_EQ_INT(axp_type_from_name("q8_0"), AXP_TYPE_Q8_0);
        CHECK_EQ_INT(axp_type_from_name("bf16"), AXP_TYPE_BF16);
        CHECK_EQ_INT(axp_type_from_name("nope"), -1);
        CHECK(axp_type_traits_get(4) == NULL);
        CHECK(!axp_type_traits_get(AXP_TYPE_Q3_K)->supported);
        CHECK(axp_type_traits_get(AXP_TYPE_Q5_K)->supported);
        CHECK_EQ_INT(axp_type_row_size(AXP_TYPE_Q5_K, 512), 352);
        CHECK_EQ_INT(axp_type_row_size(AXP_TYPE_Q4_1, 64), 40);
        CHECK_EQ_INT(axp_type_row_size(AXP_TYPE_Q5_0, 96), 66);
        CHECK_EQ_INT(axp_type_row_size(AXP_TYPE_Q5_1, 32), 24);
        CHECK_EQ_INT(axp_type_row_size(AXP_TYPE_IQ4_NL, 896), 504);
        CHECK_EQ_INT(axp_type_row_size(AXP_TYPE_IQ4_NL, 48), 0);
        CHECK_EQ_INT(axp_type_from_name("iq4_nl"), AXP_TYPE_IQ4_NL);
        CHECK_EQ_INT(axp_type_from_name("q5_1"), AXP_TYPE_Q5_1);
        const uint32_t now[] = { AXP_TYPE_Q4_1, AXP_TYPE_Q5_0, AXP_TYPE_Q5_1, AXP_TYPE_IQ4_NL };
        for (size_t i = 0; i < ELEMENTSOF(now); i++)
                CHECK(axp_type_traits_get(now[i])->supported);
}

int main(void) {
        RUN(test_f16_roundtrip_all);
        RUN(test_f16_matches_hardware);
        RUN(test_bf16);
        RUN(test_quant_roundtrip);
        RUN(test_q8_0_exact);
        RUN(test_dequant_hand_made);
        RUN(test_quant_exact);
        RUN(test_dequant_q5_K);
        RUN(test_traits);
        TEST_EXIT();
}
