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
 *   F16, BF16  [k/2][16][2] 16-bit: each row's inputs in pairs (2i, 2i + 1), an odd k's last
 *              pair padded with zero: BF16's the operand layout of AVX512-BF16's vdpbf16ps,
 *              F16's widened to 8 rows' pairs of floats that one broadcast of a pair of the
 *              token's inputs multiplies
 *   Q8_0       per run of 8 blocks (pk32_*): scales [8][16] f16, then quants [8][8][16][4]
 *              u8 = w ^ 0x80
 *   Q4_0       runs as Q8_0, the quants [8][4][16][4]: byte (p, r, i) = q[r][8p+i] |
 *              q[r][8p+4+i] << 4, the raw 0..15 nibbles
 *   Q5_0       runs as Q8_0, the quants five vectors [5][16][4] a block (quints): its
 *              quants 0..31 (w + 16) as Q5_K's sub-blocks below, 22 bytes a row a block as in
 *              the file
 *   IQ4_NL     as Q4_0, the nibbles being indices into the 16 levels (axp_iq4nl_values)
 *   Q4_1       per block: scales [16] f16, mins [16] f16 (one line), then its nibbles
 *              [4][16][4] as Q4_0's
 *   Q5_1       per block: scales and mins as Q4_1, then its quants as Q5_0's (24 bytes a
 *              row a block)
 *   Q4_K       per superblock: d[16] f16, dmin[16] f16, sc[8][16] u8, mins[4][16][2] u8
 *              (pairs of sub-blocks), then quants [8 sub][4][16][4] nibble bytes as Q4_0
 *   Q5_K       the head of Q4_K, then per sub-block five vectors [16][4], byte (j, v, r, i)
 *              = q[r][32j+4v+i] (five bits) | the top three bits: quad 5 (bits 0-2 in v = 0,
 *              3-4 in v = 1), quad 6 (bits 0-2 in v = 2, 3-4 in v = 3), quad 7 (bits 0-2 in
 *              v = 4, bit 3 as bit 7 of v = 1, bit 4 as bit 7 of v = 3): five quads are one
 *              AND each, the other three a few shifts (160 bytes of quants a row, as in
 *              the file)
 *   Q6_K       per superblock: d[16] f16, sc[8][16][2] s8 (pairs of sub-blocks), padding to
 *              320 B, then per sub-block of 16 three vectors [16][4]: byte (v, r, i) =
 *              q[r][4v+i] | ((q[r][12+i] >> 2v) & 3) << 6, v < 3 (q = w + 32, six bits): three
 *              quads are one AND from their vector, the fourth is gathered from the top bits
 *   Q2_K       per superblock: d[16] f16, dmin[16] f16, sc[8][16][2] u8 (the file's scale |
 *              min << 4 bytes, pairs of sub-blocks), then per sub-block of 16 one vector of
 *              crumbs [16][4]: byte (r, i) = q[r][i] | q[r][4+i] << 2 | q[r][8+i] << 4 |
 *              q[r][12+i] << 6 (1344 bytes: the file's 84 a row)
 *   Q3_K       heads of every superblock first: d[16] f16, low nibbles of the 6-bit scales
 *              [8][16] (sub-blocks 2p | 2p+1 << 4), their top two bits [4][16] (sub-blocks
 *              4p..4p+3, two bits each): 224 bytes; then, from the next 64-byte boundary, per
 *              superblock and pair p of sub-blocks three vectors [16][4] of q = w + 4 (three
 *              bits): with e_v = q[r][32p+4v+i] (sub-block 2p's quad v) and o_v =
 *              q[r][32p+16+4v+i] (2p+1's), byte (p, v, r, i) = e_v | o_v << 3 for v < 3, and in
 *              bits 6-7 the fourth quads: e_3's bits 0-1 (v = 0), e_3's bit 2 and o_3's bit 2
 *              (v = 1), o_3's bits 0-1 (v = 2). Six quads are one AND (in place, 8 times their
 *              value) or a shift and an AND, the fourth ones five operations (1536 bytes: the
 *              file's 110 a row, and at most 63 bytes of padding a group)
 *   IQ4_XS     per superblock: d[16] f16, the 6-bit scales' low nibbles [4][16] (sub-blocks
 *              2p | 2p+1 << 4) and top bits [2][16] (sub-blocks 4p..4p+3), then the level
 *              indices [8 sub][4][16][4] as Q4_0's nibbles (2176 bytes: the file's 136 a row)
 *
 * Quantized activations, one row per token (stride act->stride bytes, 64-aligned), block by
 * block so that one pointer per token reaches everything a block needs:
 *   Q8_0 kind  per block of 32, 48 bytes: qs[32] s8 | d f32 (the f16 scale, widened) |
 *              c8 i32 = -128 * sum(qs) | c4 i32 = -8 * sum(qs) | s f32: c8 and c4 are the
 *              offsets of u8 weights (w + 128, nibbles q = w + 8), added up front; s is
 *              llama.cpp's Q8_1 sum, f16(amax / 127 * sum(qs)) widened, which the minimum of a
 *              Q4_1/Q5_1 block multiplies
 *   Q8_K kind  per superblock of 256, 320 bytes: qs[256] s8 | d f32 | bs16[16] i16 (sums of
 *              16) | bs32[8] i16 (sums of 32) | pad
 *   F32 kind   x[k] f32, rounded to f16 precision for F16 weights (as llama.cpp computes)
 *   BF16 kind  x[k] bf16, rounded to nearest even as llama.cpp rounds them for BF16 weights,
 *              an odd k padded with a zero: pair i is the 32 bits at 4i */
#pragma once

#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "kernels.h"
#include "kernels/types.h"

#define AXP_GROUP 16
#define AXP_ALIGN 64

static inline size_t axp_align_up(size_t n, size_t a) {
        return (n + a - 1) / a * a;
}

/* seconds on the monotonic clock (the kernels' own timings: membw.c, prefetch tuning) */
static inline double axp_cpu_now(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}

/* Bytes of one packed group of 16 rows with k inputs; 0 for types without a kernel. */
size_t axp_pack_group_bytes(uint32_t type, int64_t k);
/* Pack rows [r0, r0 + n_rows) (n_rows <= 16) of raw GGUF rows into one group. */
void axp_pack_group(uint32_t type, const void *raw, uint64_t row_bytes, int64_t k, int n_rows,
                    uint8_t *out);

typedef struct axp_pk_slab axp_pk_slab; /* repack.c */

/* What a prepared weight's priv points to. */
typedef struct axp_packed {
        uint32_t magic;
        uint32_t type;
        int64_t n_in, n_out, n_groups;
        size_t group_bytes;
        uint8_t *data; /* n_groups * group_bytes, 64-aligned, in slab */
        axp_pk_slab *slab;
        /* Q8_0: no quant is -128 (llama.cpp's quantizer never writes it), so a weight's
         * sign can move onto the activation and the ops' gemm_sym may run */
        bool no_min8;
} axp_packed;
#define AXP_PACKED_MAGIC 0x4b434150u /* "PACK" */

/* w's packed copy, if its priv is one made for it (this type and shape); else NULL */
static inline const axp_packed *axp_packed_of(const axp_weight *w) {
        const axp_packed *p = w->priv;
        if (!p || p->magic != AXP_PACKED_MAGIC || p->type != w->type || p->n_in != w->n_in ||
            p->n_out != w->n_out)
                return NULL;
        return p;
}

enum axp_act_kind {
        AXP_ACT_F32,  /* F32 weights */
        AXP_ACT_F16,  /* F16 weights: f32 rounded to f16 precision */
        AXP_ACT_BF16, /* BF16 weights: bf16 pairs */
        AXP_ACT_Q8_0, /* Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL weights */
        AXP_ACT_Q8_K, /* Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS weights */
        AXP_ACT__MAX,
};

enum axp_act_kind axp_act_kind_of(uint32_t type);
size_t axp_act_stride(enum axp_act_kind kind, int64_t k);

typedef struct axp_act {
        enum axp_act_kind kind;
        int64_t k;
        size_t stride; /* bytes between token rows */
        uint8_t *data;
        /* Q8_0 and Q8_K kinds: the scales again, per tile of 16 tokens and block:
         * tile_d[(t / 16) * n_blocks * 16 + b * 16 + t % 16], so that a tile kernel reaches 16
         * tokens' scales from one pointer */
        float *tile_d;
} axp_act;

static inline int64_t axp_act_blocks(const axp_act *a) {
        return a->kind == AXP_ACT_Q8_0 ? a->k / QK8_0 : a->kind == AXP_ACT_Q8_K ? a->k / QK_K : 0;
}

/* BF16 products (weights and activations in the BF16 layouts above), on every path: per token
 * and row two f32 sums, pair i going to sum i % 2, each pair adding its odd product and then its
 * even one (each product is exact in f32, each sum rounded to nearest even), and then the two
 * sums added: the order of vdpbf16ps, so that AVX512-BF16 and the paths without it give the
 * same bits (but for subnormals, which vdpbf16ps takes as zero). */
static inline int64_t bf16_pairs(int64_t k) {
        return (k + 1) / 2;
}

/* where input i of row r sits in a group of F16 or BF16 pairs, in 16-bit elements */
static inline int64_t pair16_at(int64_t i, int r) {
        return (i / 2) * 2 * AXP_GROUP + 2 * r + i % 2;
}

/* Offsets inside one activation row. */
#define ACT_Q8_0_BLOCK 48
#define ACT_Q8_K_BLOCK 320
static inline const int8_t *act_q8_0_qs(const uint8_t *row, int64_t b) {
        return (const int8_t *) (row + b * ACT_Q8_0_BLOCK);
}
static inline float act_q8_0_d(const uint8_t *row, int64_t b) {
        return *(const float *) (row + b * ACT_Q8_0_BLOCK + 32);
}
static inline int32_t act_q8_0_c8(const uint8_t *row, int64_t b) {
        return *(const int32_t *) (row + b * ACT_Q8_0_BLOCK + 36);
}
static inline int32_t act_q8_0_c4(const uint8_t *row, int64_t b) {
        return *(const int32_t *) (row + b * ACT_Q8_0_BLOCK + 40);
}
static inline float act_q8_0_s(const uint8_t *row, int64_t b) {
        return *(const float *) (row + b * ACT_Q8_0_BLOCK + 44);
}
static inline const int8_t *act_q8_K_qs(const uint8_t *row, int64_t s) {
        return (const int8_t *) (row + s * ACT_Q8_K_BLOCK);
}
static inline float act_q8_K_d(const uint8_t *row, int64_t s) {
        return *(const float *) (row + s * ACT_Q8_K_BLOCK + 256);
}
static inline const int16_t *act_q8_K_bs16(const uint8_t *row, int64_t s) {
        return (const int16_t *) (row + s * ACT_Q8_K_BLOCK + 260);
}
static inline const int16_t *act_q8_K_bs32(const uint8_t *row, int64_t s) {
        return (const int16_t *) (row + s * ACT_Q8_K_BLOCK + 292);
}
/* For the quantizers: a block's scale and sums (the quants go to act_q8_*_qs). dx is the
 * unrounded amax / 127; d and s are rounded to f16 as llama.cpp stores them. */
static inline void act_q8_0_put(uint8_t *row, int64_t b, float dx, int32_t sum) {
        uint8_t *blk = row + b * ACT_Q8_0_BLOCK;
        float d = axp_f16_to_f32(axp_f32_to_f16(dx));
        float s = axp_f16_to_f32(axp_f32_to_f16(dx * (float) sum));
        int32_t c[2] = { -128 * sum, -8 * sum };
        memcpy(blk + 32, &d, 4);
        memcpy(blk + 36, c, 8);
        memcpy(blk + 44, &s, 4);
}
static inline void act_q8_K_put(uint8_t *row, int64_t s, float d, const int16_t *bs16) {
        uint8_t *blk = row + s * ACT_Q8_K_BLOCK;
        int16_t bs32[8];
        for (int j = 0; j < 8; j++)
                bs32[j] = (int16_t) (bs16[2 * j] + bs16[2 * j + 1]);
        memcpy(blk + 256, &d, 4);
        memcpy(blk + 260, bs16, 32);
        memcpy(blk + 292, bs32, 16);
        memset(blk + 308, 0, ACT_Q8_K_BLOCK - 308);
}

/* The 32-element block types' groups (pk32_*). Q8_0, Q4_0, IQ4_NL and Q5_0: runs of 8 blocks
 * (256 inputs, as a K-quant's superblock), each its head (the 8 blocks' scales, 256 bytes)
 * and then its blocks' quants, a last run of fewer blocks a whole head and only its blocks'
 * quants, so that decode reads a group as one stream in order. Q4_1 and Q5_1, whose scales
 * and minimums fill a line a block: runs of one block, its line of scales and minimums and
 * then its quants (320 and 384 bytes a block, whole lines), the group one stream in order.
 * Measured on one Zen 5 core (bench-kernels --micro, docs/performance.md): in runs, Q8_0 and
 * Q4_0 streamed 33-40 GB/s on every path, where with all the scales ahead of the quants they
 * streamed 16-34 (AVX2's Q4_0 16). Q4_1 and Q5_1 streamed 12 GB/s in runs of 8 against 22
 * with every scale, then every minimum, then the quants (three regions read side by side,
 * prefetched as one stream over the group); block after block then took one token, per core
 * from memory, Q5_1 from 18.2-18.6 to 27.4-28.9 GB/s (AVX-512) and 22.9-25.5 to 29.2-31.7
 * (AVX2), Q4_1 23.3-23.4 to 28.8-30.7 and 25.4-25.5 to 29.9-34.2, and from L2 Q5_1 51-52 to
 * 80 (bench-kernels --micro q5_1,q4_1, two rounds, builds taking turns); the decode products
 * of the 1B files (--profile) 4-17% faster in 12 pairs of 12. */
enum {
        PK32_NIBBLES = 256, /* bytes of a block's quants: Q4_0, Q4_1, IQ4_NL */
        PK32_QUINTS = 320,  /* Q5_0, Q5_1 */
        PK32_BYTES = 512,   /* Q8_0 */
};

typedef struct pk32 {
        uint32_t shift; /* a run is 1 << shift blocks: 3, or 0 (Q4_1, Q5_1) */
        uint32_t qb;    /* bytes of a block's quants (PK32_*) */
        size_t mins;    /* from a block's scales to its minimums */
        size_t head;    /* bytes of a run's head */
        size_t run;     /* bytes of a whole run */
} pk32;

/* the layout of a group of blocks of qb bytes of quants (PK32_*), whatever their number
 * (pk32_bytes gives a group's size) */
static inline pk32 pk32_layout(uint32_t qb, bool has_min) {
        if (has_min)
                return (pk32) { 0, qb, 32, 64, 64 + (size_t) qb };
        return (pk32) { 3, qb, 0, 256, 256 + 8 * (size_t) qb };
}

/* the layout of a 32-element block type; qb 0 for any other type */
static inline pk32 pk32_of(uint32_t type) {
        switch (type) {
        case AXP_TYPE_Q8_0:
                return pk32_layout(PK32_BYTES, false);
        case AXP_TYPE_Q5_0:
                return pk32_layout(PK32_QUINTS, false);
        case AXP_TYPE_Q4_0:
        case AXP_TYPE_IQ4_NL:
                return pk32_layout(PK32_NIBBLES, false);
        case AXP_TYPE_Q4_1:
                return pk32_layout(PK32_NIBBLES, true);
        case AXP_TYPE_Q5_1:
                return pk32_layout(PK32_QUINTS, true);
        default:
                return (pk32) { 0 };
        }
}

static inline int64_t pk32_in_run(pk32 L, int64_t b) {
        return b & (((int64_t) 1 << L.shift) - 1);
}
/* byte offsets in a group of block b's 16 scales (f16), minimums (f16) and quants */
static inline size_t pk32_scales(pk32 L, int64_t b) {
        return (size_t) (b >> L.shift) * L.run + (size_t) pk32_in_run(L, b) * 32;
}
static inline size_t pk32_mins(pk32 L, int64_t b) {
        return pk32_scales(L, b) + L.mins;
}
static inline size_t pk32_quants(pk32 L, int64_t b) {
        return (size_t) (b >> L.shift) * L.run + L.head + (size_t) pk32_in_run(L, b) * L.qb;
}
/* a group of nb blocks */
static inline size_t pk32_bytes(pk32 L, int64_t nb) {
        int64_t rest = pk32_in_run(L, nb);
        return (size_t) (nb >> L.shift) * L.run + (rest ? L.head + (size_t) rest * L.qb : 0);
}

/* The prefetch plan (axp_cpu_prefetch): its form, nonzero for sparse, and its cache level,
 * nonzero for L1. Set before any product runs (axp_cpu_ops_get decides them); a kernel reads
 * them once a call. */
extern _Atomic int axp_cpu_pf_sparse;
extern _Atomic int axp_cpu_pf_l1;
/* The form a tile of T tokens follows: tiles of more than two tokens prefetch densely whatever
 * the plan (see "Which tiles prefetch", below) */
static inline int pf_sparse(int T) {
        return T <= 2 && atomic_load_explicit(&axp_cpu_pf_sparse, memory_order_relaxed);
}
/* A tile's pf: whether it prefetches the group, and into which level */
enum { PF_NONE = 0, PF_L2 = 1, PF_L1 = 2 };
static inline int pf_first(void) {
        return atomic_load_explicit(&axp_cpu_pf_l1, memory_order_relaxed) ? PF_L1 : PF_L2;
}
/* Whether the AVX-512 path's BF16 products take vdpbf16ps (the CPU has AVX512-BF16), set with
 * the plan; axp_cpu_set_bf16_dot(false) makes them take FMAs (the same bits: tests, benchmarks),
 * true is refused (false) where the CPU has not got it. Process-wide. */
extern _Atomic int axp_cpu_bf16_dot;
bool axp_cpu_set_bf16_dot(bool on);
/* Bytes of the stream between two sparse prefetches, by the loop's vectors: one line in 2 KB
 * made AVX-512's Q8_0, Q4_0 and IQ4_NL decode 3-7% faster than one in 1 KB on Zen 5 (ahead in
 * 9 comparisons of 9, one and two threads) and AVX-VNNI's Q8_0 20% slower (bench-kernels
 * --prefetch, the two taking turns). */
#define PF_SPARSE_EVERY_ZMM 2048
#define PF_SPARSE_EVERY_YMM 1024
#define PF_SPARSE_AHEAD 32768   /* how far ahead each reaches */

#if defined(__x86_64__)
/* Decode streams each group once; software prefetch keeps more lines in flight than the
 * hardware prefetcher does alone. Into L2 or L1 by the plan's level (kernels.h; a tile's pf,
 * PF_L2 or PF_L1), which the engine times on a model's weights: a prefetch to L1 holds one of
 * the core's few line-fill buffers until its line arrives, which left the Q4_K kernel
 * streaming 12.4 GB/s on one Xeon core against 14.0 with the same prefetches into L2 (loads
 * alone: 15.5); on one Zen 5 core the same prefetches into L1 were faster for 11 of 14 types
 * on AVX-512 (one token, dense: Q3_K 42.8 -> 49.8 GB/s, Q4_K 37.4 -> 41.5, Q5_K 39.1 -> 43.3,
 * Q5_1 35.3 -> 39.5, Q6_K 41.8 -> 44.3; F16, BF16 and Q2_K the same) and on AVX2 (Q4_0 33.0 ->
 * 44.0, Q6_K 35.6 -> 40.5, Q5_1 34.8 -> 39.4, Q8_0 33.3 -> 36.1; the types bound by their
 * instructions there the same), bench-kernels --micro with AXP_CPU_PREFETCH=dense|dense-l1.
 * The x86 paths' kernels share these; the AMX path keeps its own, into L2.
 * The K-quants prefetch a sub-block's lines in its own step of the sub-block loop, which is
 * not unrolled: unrolled, GCC hoisted all of a superblock's prefetches (40 for Q4_K) to the
 * superblock's start, and the burst (it seems) filled the miss buffers the loads then waited
 * for. As a loop, the AVX-512 products on one Zen 5 core went from 28-31 to 33-36 GB/s (Q4_K),
 * 28-31 to 34-43 (Q5_K), 29-31 to 30-41 (Q6_K), 31-33 to 35-38 (Q2_K) and 30-31 to 38-43
 * (IQ4_XS), the two forms taking turns (bench-kernels --micro); prefill the same or up to 12%
 * faster. Q3_K's AVX-512 loop stays unrolled (its odd and even sub-blocks unpack differently,
 * and as a loop it streamed 20-21 against 23-25 GB/s), each prefetch held in its step by a
 * compiler barrier: 15-17 -> 17-19 GB/s, ahead in 7 pairs of 7. Q3_K's prefetch is its own
 * (prefetch_q3_K, below). */
/* How far ahead of the superblock being read the K-quants' and IQ4_XS's prefetches reach on
 * the dense plan (prefetch_kstep; Q2_K's on either), in bytes of the group's stream (they fetch that superblock's share of lines from there, so
 * every line is fetched whatever the distance). It was 2 superblocks (2.7 KB for Q2_K, 4.4
 * for IQ4_XS, 4.7 for Q4_K, 6.8 for Q6_K): on this AMD EPYC's shared cores one token's
 * product streamed, per core from memory (bench-kernels --micro, the builds taking turns,
 * three rounds, GB/s, AVX-512 / AVX2), Q2_K 15 / 13.5 -> 26 / 23, IQ4_XS 19.5 / 18.5 -> 24
 * / 23, Q4_K 20 / 20.5 -> 20.5 / 26.5, Q5_K 22 / 23.3 -> 21 / 26, Q6_K 22 / 26 -> 21.5 / 25
 * (two tokens: Q6_K 24.5 / 24 -> 24 / 26); 6 and 7 KB gave less for the small superblocks,
 * 10 KB less for Q6_K's and IQ4_XS's one token. Q3_K has its own (PF_Q3_K_BYTES). */
#define PF_AHEAD_BYTES 8192
/* Which tiles prefetch: a product's first tile over a group (the kernels' pf), the one that
 * brings the group in from memory: decode's one or two tokens, several requests decoded
 * together (3 to 8 rows on AVX-512, 3 and 4 on the AVX2 builds) and a prefill's
 * first token tile; the tiles after it find the group in the caches, where prefetches would
 * only take load slots (F32's AVX2 prefill lost 11% with them). Tiles of more than two tokens
 * prefetch densely whatever the plan (kernels.h; pf_sparse): sparse left them where they were. Before,
 * only one- and two-token tiles prefetched, and four requests decoded together streamed the
 * weights at half the rate of one. Four tokens, per core from memory (bench-kernels --micro,
 * dense plan, the builds taking turns), GB/s: AVX-512 Q4_0 14.4 -> 28.5, Q8_0 24.4 -> 31.1,
 * Q4_K 16.6 -> 30.8, Q6_K 15.5 -> 36.9, IQ4_NL 13.3 -> 28.4, F16 15.7 -> 29.3; plain AVX2 Q4_0
 * 14.3 -> 21.5, Q8_0 12.3 -> 23.0, Q4_K 10.1 -> 17.3, Q6_K 10.0 -> 20.1 (then further over
 * both halves at once, TILE_DISPATCH_HALVES); sparse plan, AVX-512 Q4_0 14.2 -> 28.8. Prefill's
 * first tiles took AVX-512 Q4_0 from 653 to 710 GFLOP/s a core, Q4_K 643 -> 703, F16 199 ->
 * 245; the AVX2 builds' prefill the same. */

static inline __attribute__((always_inline)) void prefetch_lines(const uint8_t *p, int n, int pf) {
        if (pf == PF_L1)
                for (int i = 0; i < n; i++)
                        _mm_prefetch((const char *) p + 64 * i, _MM_HINT_T0);
        else
                for (int i = 0; i < n; i++)
                        _mm_prefetch((const char *) p + 64 * i, _MM_HINT_T1);
}
/* one line */
static inline __attribute__((always_inline)) void prefetch_line(const uint8_t *p, int pf) {
        prefetch_lines(p, 1, pf);
}

/* Decode's prefetch for block b of a 32-element block type in group g, by the plan
 * (kernels.h): every line of the block `ahead` blocks ahead (and of its run's head where that
 * starts a run), or one line every `every` bytes of quants (a power of two,
 * PF_SPARSE_EVERY_*), far ahead; `ahead` is pf_blocks' (after this). */
static inline __attribute__((always_inline)) void prefetch_block(const uint8_t *g, pk32 L, int64_t b,
                                                                 int sparse, size_t every, int ahead, int pf) {
        if (L.shift == 0) {
                /* runs of one block (Q4_1, Q5_1): the group is one stream in order, a block's
                 * lines `ahead` blocks on, on either plan */
                prefetch_lines(g + pk32_scales(L, b + ahead), (int) (L.run / 64), pf);
        } else if (!sparse || L.qb == PK32_QUINTS) {
                /* Q5_0 on either plan: sparsely it streamed half as fast on every path, one
                 * token per core from memory, AVX-512 22-24 -> 26-28 GB/s, AVX-VNNI 16-17 ->
                 * 27-33, plain AVX2 15 -> 23-29 (bench-kernels --micro q5_0 with
                 * AXP_CPU_PREFETCH=sparse, Zen 5, two rounds, builds taking turns); a file
                 * whose K-quants want the sparse form (Q4_K_M with 896-wide rows: 55% of it
                 * Q5_0) need not choose between them */
                prefetch_lines(g + pk32_quants(L, b + ahead), (int) (L.qb / 64), pf);
                if (pk32_in_run(L, b) == 0)
                        prefetch_lines(g + pk32_scales(L, b + ahead), (int) (L.head / 64), pf);
        } else if ((((size_t) b * L.qb) & (every - 1)) < L.qb) /* where the quants cross `every` */
                prefetch_line(g + pk32_quants(L, b) + PF_SPARSE_AHEAD, pf);
}

/* The prefetch of Q4_K's, Q5_K's, Q6_K's and IQ4_XS's decode for one step of a superblock's
 * sub-block loop, which reads the step bytes of group g from p on (both halves, on every
 * path), n lines: dense, the lines PF_AHEAD_BYTES further on; sparse, as prefetch_block's,
 * one line PF_SPARSE_AHEAD further on where the stream crosses PF_SPARSE_EVERY_ZMM bytes.
 * On a Zen 4 core (AMD EPYC, shared) the AVX-512 products streamed one token's weights at
 * 20-21 GB/s with every line and 26-28 sparsely (Q4_K, Q5_K, Q6_K; IQ4_XS 23-24 -> 26-28;
 * bench-kernels --micro with AXP_CPU_PREFETCH=dense|sparse, two rounds); the AVX2 builds',
 * bound nearer by their instructions, 22-27 either way. Q2_K measured the same or 5% slower
 * sparsely and Q3_K (two regions read side by side) half as fast: they keep theirs, dense. */
static inline __attribute__((always_inline)) void prefetch_kstep(const uint8_t *g, const uint8_t *p, size_t step,
                                                                 int n, int sparse, int pf) {
        size_t off = (size_t) (p - g);
        if (!sparse)
                prefetch_lines(p + PF_AHEAD_BYTES, n, pf);
        else if ((off & (PF_SPARSE_EVERY_ZMM - 1)) < step)
                prefetch_line(p + PF_SPARSE_AHEAD, pf);
}

/* Decode's distance for prefetch_block, in blocks, on the AVX-512 path (zmm) or an AVX2 build
 * (with or without VNNI). Q8_0 takes 8 everywhere; the other types 16 on AVX-512 and 32 on
 * AVX2, but Q5_0 without VNNI 8. In the engine (agentxpu generate, bench-1b files, one
 * thread, 2-3 rounds, Zen 5), against 8: AVX-512 Q4_0 45 -> 46.8-47.5 tokens/s, IQ4_NL 42-43
 * -> 46-46.4, Q5_0 36.7 -> 38.5-40.8, Q4_1 and Q5_1 the same (32: 5-15% below 16); AVX2
 * Q4_0 40.5 -> 44.6-47.4, IQ4_NL 37-39 -> 43.5-44.8, Q4_1 40-41 -> 42.7, and Q5_0 on the
 * AVX-VNNI build 35-36.5 -> 39, where plain AVX2's fell to 32.5-33 (Q8_0: 16 blocks cost
 * both paths 3-12% a core, bench-kernels --micro). */
static inline int pf_blocks(pk32 L, bool zmm, bool vnni) {
        if (L.qb == PK32_BYTES)
                return 8;
        if (zmm)
                return 16;
        return !vnni && L.qb == PK32_QUINTS && L.shift == 3 ? 8 : 32;
}

/* The same for a plain stream (float weights) read step bytes at a time, at byte off: dense,
 * the step's lines ahead bytes further; sparse, one line in PF_SPARSE_EVERY_ZMM bytes on every
 * path (the AVX2 loop takes both halves, a line a step, as AVX-512's; one in 1 KB was 5-15%
 * slower there, F16 and BF16, bench-kernels --micro) */
static inline __attribute__((always_inline)) void prefetch_stream(const uint8_t *g, size_t off, size_t step,
                                                                  size_t ahead, int sparse, int pf) {
        if (!sparse)
                prefetch_lines(g + off + ahead, (int) (step / 64), pf);
        else if ((off & (PF_SPARSE_EVERY_ZMM - 1)) == 0)
                prefetch_line(g + off + PF_SPARSE_AHEAD, pf);
}
#endif

/* Packed layout offsets. */

#define PK_Q4_K_HEAD 320
#define PK_Q4_K_SB (PK_Q4_K_HEAD + 2048)
#define PK_Q5_K_SB (PK_Q4_K_SB + 512)
#define PK_Q6_K_HEAD 320
#define PK_Q6_K_SB (PK_Q6_K_HEAD + 3072)
#define PK_Q2_K_HEAD 320
#define PK_Q2_K_SB (PK_Q2_K_HEAD + 1024)
#define PK_Q3_K_HEAD 224
#define PK_Q3_K_QS (1024 + 512)
/* Q3_K: where the quants of superblock 0 start */
static inline size_t pk_q3_K_qs_offset(int64_t k) {
        return axp_align_up((size_t) (k / QK_K) * PK_Q3_K_HEAD, AXP_ALIGN);
}
#if defined(__x86_64__)
/* Q3_K's group keeps its superblocks' heads, then their quants: decode reads two regions side
 * by side. Fetched as one stream over the group's bytes, PF_Q3_K_BYTES ahead of superblock
 * s's share of them (pair p of its 8 pairs of sub-blocks takes 4 lines from 224 p, so every
 * line of the superblock's 1760 bytes is fetched once or twice), the AVX-512 product read 42-50
 * GB/s on one Zen 5 core against 30-32 when it fetched only the quants, 8 superblocks ahead
 * in their region (which missed the heads, and crossed into the next group at the wrong
 * place); 8, 16 and 32 KB ahead measured the same (bench-kernels --micro q3_k). */
#define PF_Q3_K_BYTES 16384
static inline __attribute__((always_inline)) void prefetch_q3_K(const uint8_t *g, int64_t s, int p, int pf) {
        prefetch_lines(g + s * (PK_Q3_K_HEAD + PK_Q3_K_QS) + 224 * p + PF_Q3_K_BYTES, 4, pf);
}
#endif
#define PK_IQ4_XS_HEAD 128
#define PK_IQ4_XS_SB (PK_IQ4_XS_HEAD + 2048)

/* Quints: a block of 32 inputs of five-bit quants (Q5_K's sub-blocks, Q5_0, Q5_1) is five
 * vectors [16][4] at q, quads 0..4 in their low five bits, quads 5..7 in their top three
 * (layouts above). quints_row gives row r's weight i of each quad m (0..31) in w[m];
 * quints_avx512 the eight quads of the 16 rows, as bytes: five are one AND, the other three
 * a few shifts and ternary logic (0xE4 takes A's bits where C is set, else B's). */
static inline void quints_row(const uint8_t *q, int r, int i, int w[8]) {
        q += r * 4 + i;
        for (int m = 0; m < 5; m++)
                w[m] = q[64 * m] & 31;
        w[5] = q[0] >> 5 | (q[64] >> 5 & 3) << 3;
        w[6] = q[128] >> 5 | (q[192] >> 5 & 3) << 3;
        w[7] = q[256] >> 5 | (q[64] >> 7) << 3 | (q[192] >> 7) << 4;
}

#if defined(__AVX512BW__)
#include <immintrin.h>
static inline __attribute__((always_inline)) void quints_avx512(const uint8_t *q, __m512i w[8]) {
        const __m512i m4 = _mm512_set1_epi8(0x0f), m1f = _mm512_set1_epi8(0x1f), m07 = _mm512_set1_epi8(0x07);
        __m512i v[5];
        for (int m = 0; m < 5; m++) {
                v[m] = _mm512_load_si512(q + 64 * m);
                w[m] = _mm512_and_si512(v[m], m1f);
        }
        w[5] = _mm512_and_si512(_mm512_ternarylogic_epi32(_mm512_srli_epi16(v[0], 5), _mm512_srli_epi16(v[1], 2), m07, 0xE4),
                                m1f);
        w[6] = _mm512_and_si512(_mm512_ternarylogic_epi32(_mm512_srli_epi16(v[2], 5), _mm512_srli_epi16(v[3], 2), m07, 0xE4),
                                m1f);
        __m512i e = _mm512_ternarylogic_epi32(_mm512_srli_epi16(v[4], 5), _mm512_srli_epi16(v[1], 4), m07, 0xE4);
        e = _mm512_ternarylogic_epi32(e, _mm512_srli_epi16(v[3], 3), m4, 0xE4);
        w[7] = _mm512_and_si512(e, m1f);
}
#endif

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
        /* where set, the same product for prepared weights whose packed no_min8 is set */
        axp_gemm_fn gemm_sym[AXP_TYPE__MAX];
        /* Attention of nv query vectors (head_dim floats each, q[j]) over n_pos <= ATT_CHUNK
         * positions of one KV head (rows ld elements apart, F32 or F16). Vector j sees
         * positions t < len[j]: s = scale q.K_t, then with softcap > 0 s = softcap tanh(s /
         * softcap) (att_softcap; 0: none, and no work for it), m[j] = max s, p_t = exp(s - m),
         * l[j] = sum p, acc[j * head_dim + c] = sum p_t V_t[c]. The operations for one vector do
         * not depend on the other vectors or on n_pos (prefill and decode must give the same
         * bits). scratch holds ATT_SCRATCH floats. */
        void (*att_chunk)(const float *const *q, int nv, const int *len, const void *k,
                          const void *v, uint32_t kv_type, long ld, int n_pos, int head_dim,
                          float scale, float softcap, float *m, float *l, float *acc, float *scratch);
        /* axp_cpu_glu (kernels.h) on one row */
        void (*glu)(int act, float *g, const float *u, long n);
        /* axp_cpu_softcap (kernels.h) */
        void (*softcap)(float *x, long n, float cap);
} axp_cpu_ops;

/* A softmax weight exp(s - max) below e^-70 is taken as 0 on every path: a smaller one (down to
 * the e^-87 or so that float holds) times a value gives a subnormal product, and each
 * multiply-add that makes or meets one takes a microcode assist, a hundred cycles and more.
 * Random-weight models met them on every position of a long context (decode attention at 512
 * positions: 11 ms a token on AVX2 against 3.7 with the cut); the weights cut would add at most
 * ATT_CHUNK e^-70 to a sum of at least 1. */
#define ATT_P_CUT (-70.0f)

/* exp(d) for d = s - max <= 0 with that cut, in scalar code */
static inline float att_weight(float d) {
        return d >= ATT_P_CUT ? expf(d) : 0.0f;
}

/* Gemma 2's soft-capping of a score s (already scaled): cap tanh(s / cap), s / cap taken as
 * s * inv with inv = 1 / cap, as llama.cpp scales it, in scalar code. The SIMD paths build tanh
 * from their softmax's exp (softcap8 in gemm-avx2.c): within 1.5e-7 cap of the exact value at
 * any s, as this is. */
static inline float att_softcap(float s, float cap, float inv) {
        return cap * tanhf(s * inv);
}

/* Bytes of n values of a K or V cache (F16, F32 or Q8_0; n a multiple of 32 for Q8_0) */
static inline size_t att_kv_bytes(uint32_t type, size_t n) {
        return type == AXP_TYPE_Q8_0 ? n / QK8_0 * sizeof(block_q8_0) : n * (type == AXP_TYPE_F16 ? 2 : 4);
}

/* Position t's row of such a cache whose rows are ld values apart: for the paths'
 * prefetches, a line's address without a call */
static inline const char *att_kv_row(const void *kv, uint32_t type, long ld, long t) {
        return (const char *) kv + att_kv_bytes(type, (size_t) t * (size_t) ld);
}

/* The attention kernels fetch the row att_pf_rows(n) ahead of the one they read (rows ld
 * values apart: head_dim in the engine's cache, which is head by head; when it was row by row,
 * 1-2 KB, further than the hardware prefetcher follows), every line of its n bytes
 * (att_kv_bytes of the head's width, computed once by the caller): a line every 64 bytes and,
 * where the row starts late in a line (a Q8_0 head's 68 or 136 bytes start anywhere), the line
 * of its last byte too; two fetches from a 136-byte head's start missed one or two of its
 * lines. The distance is ATT_PF_BYTES of the head's own bytes whatever its width: a fixed 32
 * rows was best for 256-byte rows (F16, 128 wide) and too near for 68- and 128-byte ones. */
#define ATT_PF_BYTES 8192
static inline int att_pf_rows(int n) {
        return n < ATT_PF_BYTES ? ATT_PF_BYTES / n : 1;
}

static inline __attribute__((always_inline)) void att_prefetch_row(const void *kv, uint32_t type, long ld, long row,
                                                                   int n) {
        const char *p = att_kv_row(kv, type, ld, row);
        for (int o = 0; o < n; o += 64)
                _mm_prefetch(p + o, _MM_HINT_T0);
        if (type == AXP_TYPE_Q8_0 && (int) ((uintptr_t) p & 63) + n > (n + 63) / 64 * 64)
                _mm_prefetch(p + n - 1, _MM_HINT_T0);
}

/* Where a chunk's V serves several passes (AVX-512: groups of a query's vectors; AVX2: a
 * head's 16-value columns), the passes take turns over ATT_V_BLOCK positions at a time, the
 * sums kept in the output between blocks, so a block's rows stay in L1 from one pass to the
 * next; a whole chunk's did not (64 KB for 256 rows of a 128-wide F16 head). Head by head,
 * against whole chunks (bench-kv --threads 1 --type f16 [--shape 8b] 4096): AVX-512, 8B shape
 * 21.8 -> 19.9 ms a token; AVX2 8.8 -> 8.2 (1B shape) and 33.8 -> 29.0 (8B). Each sum still
 * adds its positions in order, so the bits are the same. */
#define ATT_V_BLOCK 16

#define ATT_MAX_HEAD_DIM 512
#define ATT_CHUNK 256
#define ATT_MAX_VECS 128
/* scores for every vector, then K and V of the chunk widened to f32 */
#define ATT_SCRATCH ((size_t) ATT_MAX_VECS * ATT_CHUNK + 2 * (size_t) ATT_CHUNK * ATT_MAX_HEAD_DIM)

extern const axp_cpu_ops axp_cpu_ops_generic;
#if defined(__x86_64__)
extern const axp_cpu_ops axp_cpu_ops_avx2;
/* The AVX2 kernels built again with AVX-VNNI (gemm-avxvnni.c); false where the compiler has
 * no -mavxvnni (the table is then empty and never chosen). */
extern const axp_cpu_ops axp_cpu_ops_avx_vnni;
extern const bool axp_avx_vnni_built;
/* Whether this CPU has AVX-VNNI (and AVX2): the condition for choosing that table. */
bool axp_cpu_has_avx_vnni(void);
extern const axp_cpu_ops axp_cpu_ops_avx512;
/* AMX replaces the AVX-512 products it does better (prefill of integer weights) */
extern const axp_gemm_fn axp_amx_gemm[AXP_TYPE__MAX];
bool axp_amx_request(void);
/* The AMX path's s8 copy of a group of nb blocks of Q8_0, Q4_0, IQ4_NL or Q5_0 (gemm-amx.c):
 * quants [nb][512] as B tiles, scales [nb][16]. AVX-512 instructions only. */
void axp_amx_weights_s8(const uint8_t *g, int64_t nb, int type, uint8_t *out, uint16_t *sc);
#endif
/* The same where the CPU can run it (AVX-512), for tests on machines without AMX; false
 * elsewhere */
bool axp_cpu_amx_weights_s8(const uint8_t *g, int64_t nb, uint32_t type, uint8_t *out, uint16_t *sc);

/* The path in use. */
const axp_cpu_ops *axp_cpu_ops_get(void);

/* Reference activation quantizers (generic C); the SIMD versions must match them bit for
 * bit. */
void axp_quant_act_f32(const float *x, int64_t k, uint8_t *row);
void axp_quant_act_f16(const float *x, int64_t k, uint8_t *row);
void axp_quant_act_bf16(const float *x, int64_t k, uint8_t *row);
void axp_quant_act_q8_0(const float *x, int64_t k, uint8_t *row);
void axp_quant_act_q8_K(const float *x, int64_t k, uint8_t *row);

/* A per-thread scratch buffer of at least n bytes, 64-aligned, kept for the thread's life. */
enum {
        AXP_SCRATCH_ACT,
        AXP_SCRATCH_PACK,
        AXP_SCRATCH_UNPACK,
        AXP_SCRATCH_ATT,
        AXP_SCRATCH_ATT_SPLIT,
        AXP_SCRATCH__MAX
};
void *axp_cpu_scratch(int slot, size_t n);

