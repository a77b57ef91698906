/* SPDX-License-Identifier: MIT */
/* Tensor types: half-precision conversion and reference quantization round trips. */
#include <string.h>

#include "test.h"
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
        CHECK(!axp_type_traits_get(AXP_TYPE_Q5_K)->supported);
}

int main(void) {
        RUN(test_f16_roundtrip_all);
        RUN(test_f16_matches_hardware);
        RUN(test_bf16);
        RUN(test_quant_roundtrip);
        RUN(test_q8_0_exact);
        RUN(test_traits);
        TEST_EXIT();
}
