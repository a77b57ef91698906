/* SPDX-License-Identifier: MIT */
/* Tensor element types (ggml's numbering, as stored in GGUF) and their block layouts.
 * Reference (scalar) quantize/dequantize lives in types.c; fast dot products in kernels/cpu. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum axp_type {
        AXP_TYPE_F32 = 0,
        AXP_TYPE_F16 = 1,
        AXP_TYPE_Q4_0 = 2,
        AXP_TYPE_Q4_1 = 3,
        AXP_TYPE_Q5_0 = 6,
        AXP_TYPE_Q5_1 = 7,
        AXP_TYPE_Q8_0 = 8,
        AXP_TYPE_Q8_1 = 9,
        AXP_TYPE_Q2_K = 10,
        AXP_TYPE_Q3_K = 11,
        AXP_TYPE_Q4_K = 12,
        AXP_TYPE_Q5_K = 13,
        AXP_TYPE_Q6_K = 14,
        AXP_TYPE_Q8_K = 15,
        AXP_TYPE_IQ4_NL = 20,
        AXP_TYPE_BF16 = 30,
        AXP_TYPE__MAX = 40,
};

#define QK4_0 32
#define QK4_1 32
#define QK5_0 32
#define QK5_1 32
#define QK8_0 32
#define QK4_NL 32
#define QK_K 256
#define K_SCALE_SIZE 12

typedef uint16_t axp_f16;  /* IEEE half, bits */
typedef uint16_t axp_bf16; /* bfloat16, bits */

typedef struct {
        axp_f16 d;
        uint8_t qs[QK4_0 / 2]; /* x[j] = (qs[j] & 15) - 8, x[j+16] = (qs[j] >> 4) - 8 */
} block_q4_0;

/* x[j] = d * (qs[j] & 15) + m, x[j+16] = d * (qs[j] >> 4) + m */
typedef struct {
        axp_f16 d;
        axp_f16 m;
        uint8_t qs[QK4_1 / 2];
} block_q4_1;

/* Five-bit quants: the low four bits as in Q4_0, the fifth of element j in bit j of qh (a
 * little-endian 32-bit word): x[j] = d * ((qs[j] & 15 | bit j << 4) - 16), x[j+16] = d *
 * ((qs[j] >> 4 | bit j+16 << 4) - 16) */
typedef struct {
        axp_f16 d;
        uint8_t qh[4];
        uint8_t qs[QK5_0 / 2];
} block_q5_0;

/* As Q5_0 with a minimum instead of the offset: x = d * q + m, q in 0..31 */
typedef struct {
        axp_f16 d;
        axp_f16 m;
        uint8_t qh[4];
        uint8_t qs[QK5_1 / 2];
} block_q5_1;

typedef struct {
        axp_f16 d;
        int8_t qs[QK8_0];
} block_q8_0;

/* Non-linear four-bit quants: x[j] = d * axp_iq4nl_values[qs[j] & 15], x[j+16] = d *
 * axp_iq4nl_values[qs[j] >> 4] */
typedef struct {
        axp_f16 d;
        uint8_t qs[QK4_NL / 2];
} block_iq4_nl;

/* IQ4_NL's 16 levels (ggml's kvalues_iq4nl) */
extern const int8_t axp_iq4nl_values[16];

typedef struct {
        axp_f16 d;
        axp_f16 dmin;
        uint8_t scales[K_SCALE_SIZE]; /* 8 sub-blocks of 32: 6-bit scales and mins */
        uint8_t qs[QK_K / 2];
} block_q4_K;

/* As Q4_K with a fifth bit: element l of sub-block s (32 elements each) has its high bit at
 * bit s of qh[l] */
typedef struct {
        axp_f16 d;
        axp_f16 dmin;
        uint8_t scales[K_SCALE_SIZE];
        uint8_t qh[QK_K / 8];
        uint8_t qs[QK_K / 2];
} block_q5_K;

typedef struct {
        uint8_t ql[QK_K / 2];
        uint8_t qh[QK_K / 4];
        int8_t scales[QK_K / 16];
        axp_f16 d;
} block_q6_K;

/* Activations quantized for the K-quant dot products. */
typedef struct {
        float d;
        int8_t qs[QK_K];
        int16_t bsums[QK_K / 16];
} block_q8_K;

_Static_assert(sizeof(block_q4_0) == 18, "block_q4_0");
_Static_assert(sizeof(block_q4_1) == 20, "block_q4_1");
_Static_assert(sizeof(block_q5_0) == 22, "block_q5_0");
_Static_assert(sizeof(block_q5_1) == 24, "block_q5_1");
_Static_assert(sizeof(block_q8_0) == 34, "block_q8_0");
_Static_assert(sizeof(block_iq4_nl) == 18, "block_iq4_nl");
_Static_assert(sizeof(block_q4_K) == 144, "block_q4_K");
_Static_assert(sizeof(block_q5_K) == 176, "block_q5_K");
_Static_assert(sizeof(block_q6_K) == 210, "block_q6_K");
_Static_assert(sizeof(block_q8_K) == 292, "block_q8_K");

typedef struct axp_type_traits {
        const char *name;  /* "F32", "Q8_0", ... as llama.cpp prints them */
        uint32_t blck;     /* elements per block */
        uint32_t bytes;    /* bytes per block */
        bool supported;    /* the engine can compute with it */
} axp_type_traits;

/* NULL for ids no ggml version defines. Unsupported-but-known types have supported=false. */
const axp_type_traits *axp_type_traits_get(uint32_t type);
/* Bytes of a row of n elements; 0 if n is not a multiple of the block size or the type is
 * unknown. */
uint64_t axp_type_row_size(uint32_t type, int64_t n);
/* Lower-case name as used on the command line ("q8_0"); -1 if unknown. */
int axp_type_from_name(const char *name);

/* fp16/bf16 conversion (exact, round-to-nearest-even) */
float axp_f16_to_f32(axp_f16 h);
axp_f16 axp_f32_to_f16(float f);
float axp_bf16_to_f32(axp_bf16 h);
axp_bf16 axp_f32_to_bf16(float f);

/* Reference dequantization of n elements (n a multiple of the type's block). Supported types
 * only. */
void axp_dequantize_row(uint32_t type, const void *src, float *dst, int64_t n);
/* Reference quantization (for mkmodel and activation quantization in tests). Q4_0, Q4_1,
 * Q5_0, Q5_1 and Q8_0 follow llama.cpp's reference quantizers; IQ4_NL searches the block's
 * scale its own way and the K-quants take plain min/max scales (see types.c), so their
 * bytes need not equal llama-quantize's. */
void axp_quantize_row(uint32_t type, const float *src, void *dst, int64_t n);
