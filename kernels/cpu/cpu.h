/* SPDX-License-Identifier: MIT */
/* Internal to the CPU kernels: the packed weight layouts, the quantized activation rows and
 * the table of per-ISA functions. Every path (generic C, AVX2, AVX-512, AMX) reads the same
 * packed layout and the same activation rows, so a weight is prepared once whatever path runs.
 *
 * Packed weights: rows are taken in groups of AXP_GROUP = 16 (the last group padded with zero
 * rows) and interleaved so that one 64-byte vector holds 4 consecutive inputs of all 16 rows,
 * the operand layout of vpdpbusd and of AMX's B tile:
 *
 *   F32        [k][16] f32
 *   F16, BF16  [k][16] 16-bit
 *   Q8_0       scales [nb][16] f16 (padded to 64 B), then quants [nb][8][16][4] u8 = w ^ 0x80
 *   Q4_0       scales [nb][16] f16 (padded to 64 B), then quants [nb][4][16][4]: byte
 *              (p, r, i) = q[r][8p+i] | q[r][8p+4+i] << 4, the raw 0..15 nibbles
 *   Q4_K       per superblock: d[16] f16, dmin[16] f16, sc[8][16] u8, mins[4][16][2] u8
 *              (pairs of sub-blocks), then quants [8 sub][4][16][4] nibble bytes as Q4_0
 *   Q6_K       per superblock: d[16] f16, sc[8][16][2] s8 (pairs of sub-blocks), padding to
 *              320 B, then per sub-block of 16: two nibble vectors [16][4] (k 0-3|4-7,
 *              8-11|12-15 of the sub-block) and one vector of high bits: byte (r, i) =
 *              hi(q[r][i]) | hi(q[r][4+i]) << 2 | hi(q[r][8+i]) << 4 | hi(q[r][12+i]) << 6
 *
 * Quantized activations, one row per token (stride act->stride bytes, 64-aligned):
 *   Q8_0 kind  qs[k] s8 | d[nb] f32 (the f16 scale, widened) | c8[nb] i32 = -128 * sum(qs of
 *              the block) | c4[nb] i32 = -8 * sum: the offsets of u8 weights, added up front
 *   Q8_K kind  qs[k] s8 | d[ns] f32 | bs16[ns][16] i16 (sums of 16) | bs32[ns][8] i16 (of 32)
 *   F32 kind   x[k] f32, rounded to f16 precision for F16 weights (as llama.cpp computes) */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels.h"
#include "types.h"

#define AXP_GROUP 16
#define AXP_ALIGN 64

static inline size_t axp_align_up(size_t n, size_t a) {
        return (n + a - 1) / a * a;
}

/* Bytes of one packed group of 16 rows with k inputs; 0 for types without a kernel. */
size_t axp_pack_group_bytes(uint32_t type, int64_t k);
/* Pack rows [r0, r0 + n_rows) (n_rows <= 16) of raw GGUF rows into one group. */
void axp_pack_group(uint32_t type, const void *raw, uint64_t row_bytes, int64_t k, int n_rows,
                    uint8_t *out);

/* What a prepared weight's priv points to. */
typedef struct axp_packed {
        uint32_t magic;
        uint32_t type;
        int64_t n_in, n_out, n_groups;
        size_t group_bytes;
        uint8_t *data; /* n_groups * group_bytes, 64-aligned */
} axp_packed;
#define AXP_PACKED_MAGIC 0x4b434150u /* "PACK" */

enum axp_act_kind {
        AXP_ACT_F32,  /* F32, BF16 weights */
        AXP_ACT_F16,  /* F16 weights: f32 rounded to f16 precision */
        AXP_ACT_Q8_0, /* Q8_0, Q4_0 weights */
        AXP_ACT_Q8_K, /* Q4_K, Q6_K weights */
        AXP_ACT__MAX,
};

enum axp_act_kind axp_act_kind_of(uint32_t type);
size_t axp_act_stride(enum axp_act_kind kind, int64_t k);

typedef struct axp_act {
        enum axp_act_kind kind;
        int64_t k;
        size_t stride; /* bytes between token rows */
        uint8_t *data;
} axp_act;

/* Offsets inside one activation row. */
static inline float *act_q8_0_d(const uint8_t *row, int64_t k) {
        return (float *) (row + k);
}
static inline int32_t *act_q8_0_c8(const uint8_t *row, int64_t k) {
        return (int32_t *) (row + k + 4 * (k / QK8_0));
}
static inline int32_t *act_q8_0_c4(const uint8_t *row, int64_t k) {
        return (int32_t *) (row + k + 8 * (k / QK8_0));
}
static inline float *act_q8_K_d(const uint8_t *row, int64_t k) {
        return (float *) (row + k);
}
static inline int16_t *act_q8_K_bs16(const uint8_t *row, int64_t k) {
        return (int16_t *) (row + k + 4 * (k / QK_K));
}
static inline int16_t *act_q8_K_bs32(const uint8_t *row, int64_t k) {
        return (int16_t *) (row + k + 36 * (k / QK_K));
}

/* Packed layout offsets. */
static inline size_t pk_q8_0_scales_bytes(int64_t k) {
        return axp_align_up((size_t) (k / QK8_0) * 32, AXP_ALIGN);
}
#define PK_Q4_K_HEAD 320
#define PK_Q4_K_SB (PK_Q4_K_HEAD + 2048)
#define PK_Q6_K_HEAD 320
#define PK_Q6_K_SB (PK_Q6_K_HEAD + 3072)

/* A kernel computes the 16 rows of one packed group for n_tok tokens:
 * y[t * ldy + r] for r < n_rows (rows past n_rows are padding and not written). */
typedef void (*axp_gemm_fn)(const uint8_t *group, const axp_act *act, int t0, int n_tok,
                            float *y, long ldy, int n_rows);
/* Quantize one token row of k floats into an activation row of the given kind. */
typedef void (*axp_quant_fn)(const float *x, int64_t k, uint8_t *row);

typedef struct axp_cpu_ops {
        const char *name;
        axp_quant_fn quant[AXP_ACT__MAX];
        axp_gemm_fn gemm[AXP_TYPE__MAX];
        /* attention inner loops over one head: dot of q with n_pos rows of K (stride ld
         * elements), and acc += sum_t p[t] V[t] */
        void (*att_scores)(const float *q, const void *k, uint32_t kv_type, long ld, int n_pos,
                           int head_dim, float scale, float *s);
        void (*att_accum)(const float *p, const void *v, uint32_t kv_type, long ld, int n_pos,
                          int head_dim, float *acc);
        /* s[t] = exp(s[t] - max s); returns the max and the sum */
        void (*att_softmax)(float *s, int n, float *ret_max, float *ret_sum);
} axp_cpu_ops;

#define ATT_MAX_HEAD_DIM 512
#define ATT_MAXV (ATT_MAX_HEAD_DIM / 16)

extern const axp_cpu_ops axp_cpu_ops_generic;
#if defined(__x86_64__)
extern const axp_cpu_ops axp_cpu_ops_avx2;
extern const axp_cpu_ops axp_cpu_ops_avx512;
/* AMX replaces the AVX-512 products it does better (prefill of integer weights) */
extern const axp_gemm_fn axp_amx_gemm[AXP_TYPE__MAX];
bool axp_amx_request(void);
#endif

/* The path in use. */
const axp_cpu_ops *axp_cpu_ops_get(void);

/* Reference activation quantizers (generic C); the SIMD versions must match them bit for
 * bit. */
void axp_quant_act_f32(const float *x, int64_t k, uint8_t *row);
void axp_quant_act_f16(const float *x, int64_t k, uint8_t *row);
void axp_quant_act_q8_0(const float *x, int64_t k, uint8_t *row);
void axp_quant_act_q8_K(const float *x, int64_t k, uint8_t *row);

/* A per-thread scratch buffer of at least n bytes, 64-aligned, kept for the thread's life. */
enum { AXP_SCRATCH_ACT, AXP_SCRATCH_PACK, AXP_SCRATCH_ATT, AXP_SCRATCH_ATT_SPLIT, AXP_SCRATCH__MAX };
void *axp_cpu_scratch(int slot, size_t n);
