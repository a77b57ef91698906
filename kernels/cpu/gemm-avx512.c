/* SPDX-License-Identifier: MIT */
/* The AVX-512 path (F, BW, VL, DQ and VNNI: Ice Lake, Sapphire Rapids, Zen 4 and later).
 *
 * One 64-byte vector of a packed group holds 4 inputs of each of the 16 rows, so
 * vpdpbusd(acc, weights, broadcast 4 activation bytes) adds 4 products to each row's lane:
 * a block's dot products for 16 rows come out exact in 16 int32 lanes, and only then is the
 * block's scale applied in float. Weights are the unsigned operand (Q8_0 is stored as w+128,
 * the nibbles are unsigned anyway); the activations' offset term is folded in as the starting
 * value. Tokens are handled in tiles of up to 8 that share the weight registers; every
 * (row, token) sees the same operations in the same order whatever the tile, so results do
 * not depend on how tokens or rows were split. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "cpu.h"

#define AI __attribute__((always_inline)) static inline
#define MAX_T 8
#define UNROLL _Pragma("GCC unroll 16")

AI __m256i ld32(const void *p) {
        return _mm256_load_si256((const __m256i *) p);
}

AI __m128i ld16(const void *p) {
        return _mm_load_si128((const __m128i *) p);
}

/* 16 f16 to f32 */
AI __m512 f16x16(const void *p) {
        return _mm512_cvtph_ps(ld32(p));
}

AI int32_t load_i32(const void *p) {
        int32_t v;
        memcpy(&v, p, 4);
        return v;
}

AI __m512i bcast4(const int8_t *p) {
        return _mm512_set1_epi32(load_i32(p));
}

AI void store_rows(float *y, __m512 v, int n_rows) {
        if (n_rows == AXP_GROUP)
                _mm512_storeu_ps(y, v);
        else
                _mm512_mask_storeu_ps(y, (__mmask16) ((1u << n_rows) - 1), v);
}

/* Float weights ---------------------------------------------------------------------------- */

AI void f32_tile(const uint8_t *g, const axp_act *act, int t0, int T, float *y, long ldy,
                 int n_rows, int pf) {
        /* two accumulators per token (even and odd inputs) so that one token alone, as in
         * decode, is not bound by the FMA latency; every tile size uses the same split */
        const float *x[MAX_T];
        __m512 acc[MAX_T][2];
        UNROLL for (int t = 0; t < T; t++) {
                x[t] = (const float *) (act->data + (t0 + t) * act->stride);
                acc[t][0] = acc[t][1] = _mm512_setzero_ps();
        }
        int64_t i = 0;
        const int sparse = pf_sparse(T);
        for (; i + 2 <= act->k; i += 2) {
                if (pf)
                        prefetch_stream(g, (size_t) i * 64, 128, 8192, sparse, pf);
                __m512 w0 = _mm512_load_ps((const float *) g + i * 16);
                __m512 w1 = _mm512_load_ps((const float *) g + i * 16 + 16);
                UNROLL for (int t = 0; t < T; t++) {
                        acc[t][0] = _mm512_fmadd_ps(w0, _mm512_set1_ps(x[t][i]), acc[t][0]);
                        acc[t][1] = _mm512_fmadd_ps(w1, _mm512_set1_ps(x[t][i + 1]), acc[t][1]);
                }
        }
        if (i < act->k) {
                __m512 w0 = _mm512_load_ps((const float *) g + i * 16);
                UNROLL for (int t = 0; t < T; t++)
                        acc[t][0] = _mm512_fmadd_ps(w0, _mm512_set1_ps(x[t][i]), acc[t][0]);
        }
        UNROLL for (int t = 0; t < T; t++)
                store_rows(y + t * ldy, _mm512_add_ps(acc[t][0], acc[t][1]), n_rows);
}

/* F16: a 64-byte vector holds a pair of inputs of the 16 rows (cpu.h); widened, each half is 8
 * rows' pairs of floats, which one 64-bit broadcast of the token's pair (x[2p], x[2p + 1])
 * multiplies: a broadcast feeds two FMAs, where with an input at a time it fed one and the
 * loads, not the FMAs, bound the tile. Lane 2r + j of a sum adds row r's inputs of parity j, so
 * a row's even and odd inputs are summed apart and added at the end, as F32's are. */
AI __m512 bcast_pair(const float *x) {
        double d;
        memcpy(&d, x, 8);
        return _mm512_castpd_ps(_mm512_set1_pd(d));
}

/* one pair of inputs, i and i + 1 (a zero for the second with last) */
AI void f16_step(const uint8_t *q, __m512 acc[MAX_T][2], const float *const *x, int64_t i, int T,
                 bool last) {
        __m512 w0 = f16x16(q), w1 = f16x16(q + 32);
        UNROLL for (int t = 0; t < T; t++) {
                float pair[2] = { x[t][i], 0.0f };
                __m512 xp = bcast_pair(last ? pair : x[t] + i);
                acc[t][0] = _mm512_fmadd_ps(w0, xp, acc[t][0]);
                acc[t][1] = _mm512_fmadd_ps(w1, xp, acc[t][1]);
        }
}

AI void f16_tile(const uint8_t *g, const axp_act *act, int t0, int T, float *y, long ldy,
                 int n_rows, int pf) {
        const float *x[MAX_T];
        __m512 acc[MAX_T][2];
        UNROLL for (int t = 0; t < T; t++) {
                x[t] = (const float *) (act->data + (t0 + t) * act->stride);
                acc[t][0] = acc[t][1] = _mm512_setzero_ps();
        }
        const int64_t np = act->k / 2;
        const int sparse = pf_sparse(T);
        for (int64_t p = 0; p < np; p++) {
                if (pf)
                        prefetch_stream(g, (size_t) p * 64, 64, 4096, sparse, pf);
                f16_step(g + p * 64, acc, x, 2 * p, T, false);
        }
        if (act->k & 1) /* the last input, with a zero beside it as its weights have */
                f16_step(g + np * 64, acc, x, 2 * np, T, true);
        const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
        UNROLL for (int t = 0; t < T; t++)
                store_rows(y + t * ldy,
                           _mm512_add_ps(_mm512_permutex2var_ps(acc[t][0], even, acc[t][1]),
                                         _mm512_permutex2var_ps(acc[t][0], odd, acc[t][1])),
                           n_rows);
}

/* A tile of T_ tokens from token t; the first of the group's tiles prefetches it, into the
 * plan's level pf_lvl_ (pf, cpu.h) */
#define TILE_AT(T_, fn, ...)                                                                       \
        fn(g, act, t0 + t, (T_), y + t * ldy, ldy, n_rows, t == 0 ? pf_lvl_ : PF_NONE, ##__VA_ARGS__)

#define TILE_DISPATCH_LEVEL(lvl, fn, ...)                                                          \
        do {                                                                                       \
                const int pf_lvl_ = (lvl);                                                         \
                int t = 0;                                                                         \
                for (; t + MAX_T <= n_tok; t += MAX_T)                                             \
                        TILE_AT(MAX_T, fn, ##__VA_ARGS__);                                         \
                switch (n_tok - t) {                                                               \
                case 7: TILE_AT(7, fn, ##__VA_ARGS__); break;                                      \
                case 6: TILE_AT(6, fn, ##__VA_ARGS__); break;                                      \
                case 5: TILE_AT(5, fn, ##__VA_ARGS__); break;                                      \
                case 4: TILE_AT(4, fn, ##__VA_ARGS__); break;                                      \
                case 3: TILE_AT(3, fn, ##__VA_ARGS__); break;                                      \
                case 2: TILE_AT(2, fn, ##__VA_ARGS__); break;                                      \
                case 1: TILE_AT(1, fn, ##__VA_ARGS__); break;                                      \
                default: break;                                                                    \
                }                                                                                  \
        } while (0)

/* The K-quants' tiles read the level as they prefetch (their objects take minutes to compile
 * and as many more with two copies) */
#define TILE_DISPATCH(fn, ...) TILE_DISPATCH_LEVEL(pf_first(), fn, ##__VA_ARGS__)
/* The 32-element block types' tiles in a copy for each level, the level a constant in each
 * (float weights' tiles read it, as the K-quants', and measured the same): with it read in the loop, AVX-512 Q8_0's decode streamed 5-8% less into L2 than before
 * the plan had a level (bench-kernels --micro q8_0, the builds taking turns) */
#define TILE_DISPATCH_LEVELS(fn, ...)                                                              \
        do {                                                                                       \
                if (pf_first() == PF_L1)                                                           \
                        TILE_DISPATCH_LEVEL(PF_L1, fn, ##__VA_ARGS__);                             \
                else                                                                               \
                        TILE_DISPATCH_LEVEL(PF_L2, fn, ##__VA_ARGS__);                             \
        } while (0)

/* The file is compiled as three objects, which a build compiles at once on as many cores:
 * by itself, everything but the K-quant products (a few seconds); with AXP_AVX512_KQUANTS 1
 * (gemm-avx512-q4k-q6k.c) the Q4_K, Q5_K and Q6_K products, with 2 (gemm-avx512-q2k-q3k.c)
 * Q2_K, Q3_K and IQ4_XS: the unrolled token tiles of these take a minute and more to compile
 * at -O3, several under sanitizers. The first object's table names them all. */
#define KQUANT_GEMM(type)                                                                          \
        void axp_avx512_gemm_##type(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, \
                                    long ldy, int n_rows)
KQUANT_GEMM(q4_K);
KQUANT_GEMM(q5_K);
KQUANT_GEMM(q6_K);
KQUANT_GEMM(q2_K);
KQUANT_GEMM(q3_K);
KQUANT_GEMM(iq4_xs);

#ifndef AXP_AVX512_KQUANTS
static void gemm_f32(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                     int n_rows) {
        TILE_DISPATCH(f32_tile);
}

static void gemm_f16(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                     int n_rows) {
        TILE_DISPATCH(f16_tile);
}

/* BF16: a 64-byte vector holds a pair of inputs of the 16 rows, 32 bits of the activations a
 * pair of the token's (cpu.h). Where the CPU has AVX512-BF16 (Cooper Lake, Sapphire Rapids, Zen 4
 * and later) one vdpbf16ps adds both products to each row's sum: twice the multiplies of an FMA
 * and no unpacking. Elsewhere a shift and an AND make the even and odd inputs floats and two
 * FMAs, the odd product first, give vdpbf16ps's bits (cpu.h). Per token two sums, pair p to sum
 * p % 2, so that decode is not bound by one chain's latency. vdpbf16ps is written in assembly:
 * its intrinsic needs the function compiled for AVX512-BF16, which the rest of this path must
 * not assume. */
AI __m512 bf16_dot(__m512 acc, __m512i w, __m512i xp, int dp) {
        if (dp) {
                __asm__("vdpbf16ps %2, %1, %0" : "+v"(acc) : "v"(w), "v"(xp));
                return acc;
        }
        const __m512i hi = _mm512_set1_epi32((int) 0xffff0000u);
        __m512 a = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(w, hi)),
                                   _mm512_castsi512_ps(_mm512_and_si512(xp, hi)), acc);
        return _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(w, 16)),
                               _mm512_castsi512_ps(_mm512_slli_epi32(xp, 16)), a);
}

AI void bf16_tile(const uint8_t *g, const axp_act *act, int t0, int T, float *y, long ldy,
                  int n_rows, int pf, int dp) {
        const uint8_t *x[MAX_T];
        __m512 acc[MAX_T][2];
        UNROLL for (int t = 0; t < T; t++) {
                x[t] = act->data + (t0 + t) * act->stride;
                acc[t][0] = acc[t][1] = _mm512_setzero_ps();
        }
        const int64_t np = bf16_pairs(act->k);
        const int sparse = pf_sparse(T);
        int64_t p = 0;
        for (; p + 2 <= np; p += 2) {
                if (pf)
                        prefetch_stream(g, (size_t) p * 64, 128, 4096, sparse, pf);
                __m512i w0 = _mm512_load_si512(g + p * 64), w1 = _mm512_load_si512(g + p * 64 + 64);
                UNROLL for (int t = 0; t < T; t++) {
                        acc[t][0] = bf16_dot(acc[t][0], w0, bcast4((const int8_t *) x[t] + p * 4), dp);
                        acc[t][1] = bf16_dot(acc[t][1], w1, bcast4((const int8_t *) x[t] + p * 4 + 4), dp);
                }
        }
        if (p < np) {
                __m512i w0 = _mm512_load_si512(g + p * 64);
                UNROLL for (int t = 0; t < T; t++)
                        acc[t][0] = bf16_dot(acc[t][0], w0, bcast4((const int8_t *) x[t] + p * 4), dp);
        }
        UNROLL for (int t = 0; t < T; t++)
                store_rows(y + t * ldy, _mm512_add_ps(acc[t][0], acc[t][1]), n_rows);
}

static void gemm_bf16(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                      int n_rows) {
        if (atomic_load_explicit(&axp_cpu_bf16_dot, memory_order_relaxed))
                TILE_DISPATCH(bf16_tile, 1);
        else
                TILE_DISPATCH(bf16_tile, 0);
}

/* The 32-element block types ---------------------------------------------------------------- *
 * Q8_0 as w + 128 bytes, Q4_0 as nibbles w + 8, IQ4_NL as nibbles looked up to level + 128
 * (vpshufb), Q5_0 as quints w + 16, each started from the activations' offset; Q4_1 (nibbles)
 * and Q5_1 (quints) start from 0 and add their minimum times the activations' sum s. */
enum { M_Q8_0, M_Q4_0, M_IQ4_NL, M_Q4_1, M_Q5_0, M_Q5_1 };

AI void q8_0_tile(const uint8_t *g, const axp_act *act, int t0, int T, float *y, long ldy,
                  int n_rows, int pf, int mode) {
        int64_t nb = act->k / QK8_0;
        const int nibbles = mode == M_Q4_0 || mode == M_IQ4_NL || mode == M_Q4_1;
        const int quints = mode == M_Q5_0 || mode == M_Q5_1;
        const int has_min = mode == M_Q4_1 || mode == M_Q5_1;
        const pk32 L = pk32_layout(nibbles ? PK32_NIBBLES : quints ? PK32_QUINTS : PK32_BYTES, has_min);
        const int sparse = pf_sparse(T);
        const uint8_t *row[MAX_T];
        __m512 acc[MAX_T];
        UNROLL for (int t = 0; t < T; t++) {
                row[t] = act->data + (t0 + t) * act->stride;
                acc[t] = _mm512_setzero_ps();
        }
        const __m512i m4 = _mm512_set1_epi8(0x0f);
        __m512i lut = _mm512_setzero_si512();
        if (mode == M_IQ4_NL) {
                int8_t l[16];
                for (int i = 0; i < 16; i++)
                        l[i] = (int8_t) (axp_iq4nl_values[i] + 128);
                lut = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *) l));
        }
        for (int64_t b = 0; b < nb; b++) {
                __m512i w[8];
                const uint8_t *q = g + pk32_quants(L, b);
                if (pf)
                        prefetch_block(g, L, b, sparse, PF_SPARSE_EVERY_ZMM, pf_blocks(L, true, false), pf);
                if (nibbles) {
                        UNROLL for (int p = 0; p < 4; p++) {
                                __m512i v = _mm512_load_si512(q + p * 64);
                                /* IQ4_NL: one load a vector, kept in a register (GCC folds
                                 * it into the AND and the shift, two loads), with which its
                                 * decode streamed a median 24 GB/s a core against 20
                                 * (bench-kernels --micro iq4_nl --isa avx512, 9 rounds);
                                 * Q4_0's code, the same either way at first sight, lost
                                 * with the barrier (15-17 against 23-28) */
                                if (mode == M_IQ4_NL)
                                        __asm__("" : "+v"(v));
                                w[2 * p] = _mm512_and_si512(v, m4);
                                w[2 * p + 1] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                                if (mode == M_IQ4_NL) {
                                        w[2 * p] = _mm512_shuffle_epi8(lut, w[2 * p]);
                                        w[2 * p + 1] = _mm512_shuffle_epi8(lut, w[2 * p + 1]);
                                }
                        }
                } else if (quints) {
                        quints_avx512(q, w);
                } else {
                        UNROLL for (int j = 0; j < 8; j++)
                                w[j] = _mm512_load_si512(q + j * 64);
                }
                __m512 dw = f16x16((const uint16_t *) (g + pk32_scales(L, b)));
                __m512i isum[MAX_T];
                UNROLL for (int t = 0; t < T; t++)
                        isum[t] = has_min ? _mm512_setzero_si512()
                                          : _mm512_set1_epi32(mode == M_Q4_0   ? act_q8_0_c4(row[t], b)
                                                              : mode == M_Q5_0 ? 2 * act_q8_0_c4(row[t], b)
                                                                               : act_q8_0_c8(row[t], b));
                if (T <= 2 && mode == M_Q5_0) {
                        /* two chains of four vpdpbusd rather than one of eight (as Q4_K's):
                         * Q5_0's decode 28-29 -> 34 GB/s a core, the other types' the same or
                         * 1-2% slower (bench-kernels --threads 1 --isa avx512 --types ... --prompt
                         * 16 --decode-tokens 24, dense plan, 3 rounds taking turns) */
                        __m512i isum2[MAX_T];
                        UNROLL for (int t = 0; t < T; t++)
                                isum2[t] = _mm512_setzero_si512();
                        UNROLL for (int j = 0; j < 8; j += 2)
                                UNROLL for (int t = 0; t < T; t++) {
                                        isum[t] = _mm512_dpbusd_epi32(isum[t], w[j], bcast4(act_q8_0_qs(row[t], b) + j * 4));
                                        isum2[t] = _mm512_dpbusd_epi32(isum2[t], w[j + 1],
                                                                       bcast4(act_q8_0_qs(row[t], b) + j * 4 + 4));
                                }
                        UNROLL for (int t = 0; t < T; t++)
                                isum[t] = _mm512_add_epi32(isum[t], isum2[t]);
                } else
                        UNROLL for (int j = 0; j < 8; j++)
                                UNROLL for (int t = 0; t < T; t++)
                                        isum[t] = _mm512_dpbusd_epi32(isum[t], w[j],
                                                                      bcast4(act_q8_0_qs(row[t], b) + j * 4));
                UNROLL for (int t = 0; t < T; t++) {
                        __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(act_q8_0_d(row[t], b)));
                        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), scale, acc[t]);
                }
                if (has_min) {
                        __m512 mw = f16x16((const uint16_t *) (g + pk32_mins(L, b)));
                        UNROLL for (int t = 0; t < T; t++)
                                acc[t] = _mm512_fmadd_ps(mw, _mm512_set1_ps(act_q8_0_s(row[t], b)), acc[t]);
                }
        }
        UNROLL for (int t = 0; t < T; t++)
                store_rows(y + t * ldy, acc[t], n_rows);
}

static void gemm_q8_0(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                      int n_rows) {
        TILE_DISPATCH_LEVELS(q8_0_tile, M_Q8_0);
}

static void gemm_q4_0(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                      int n_rows) {
        TILE_DISPATCH_LEVELS(q8_0_tile, M_Q4_0);
}

static void gemm_iq4_nl(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                        int n_rows) {
        TILE_DISPATCH_LEVELS(q8_0_tile, M_IQ4_NL);
}

static void gemm_q4_1(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                      int n_rows) {
        TILE_DISPATCH_LEVELS(q8_0_tile, M_Q4_1);
}

static void gemm_q5_0(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                      int n_rows) {
        TILE_DISPATCH_LEVELS(q8_0_tile, M_Q5_0);
}

static void gemm_q5_1(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                      int n_rows) {
        TILE_DISPATCH_LEVELS(q8_0_tile, M_Q5_1);
}

#else /* AXP_AVX512_KQUANTS */

#if AXP_AVX512_KQUANTS == 1
/* Q4_K: per sub-block of 32 an exact int32 dot, times the sub-block scale (exact in float);
 * the mins term is an integer dot of the mins with the activation sums. Q5_K (high) is the
 * same with five-bit quads (cpu.h).
 * One or two tokens of Q4_K (in_place) take the high nibbles in place, 16 times their value
 * (one AND-NOT where a shift and an AND were), after the low nibbles' sum times 16, and the
 * scale over 16: 16 dot is exact in float (below 2^24) and 16 dot x sc / 16 = dot x sc, so the
 * FMA gives the same bits. Wider tiles would spend more on the extra shift per token than the
 * unpacking saves. */
AI void q4_K_tile(const uint8_t *g, const axp_act *act, int t0, int T, float *y, long ldy,
                  int n_rows, int pf, int high) {
        int64_t k = act->k, ns = k / QK_K;
        const int in_place = !high && T <= 2;
        const size_t sb_bytes = high ? PK_Q5_K_SB : PK_Q4_K_SB;
        const uint8_t *row[MAX_T];
        __m512 acc[MAX_T];
        UNROLL for (int t = 0; t < T; t++) {
                row[t] = act->data + (t0 + t) * act->stride;
                acc[t] = _mm512_setzero_ps();
        }
        const __m512i m4 = _mm512_set1_epi8(0x0f);
        for (int64_t s = 0; s < ns; s++) {
                const uint8_t *sb = g + s * sb_bytes;
                __m512i msum[MAX_T];
                __m512 sacc[MAX_T];
                UNROLL for (int t = 0; t < T; t++) {
                        msum[t] = _mm512_setzero_si512();
                        sacc[t] = _mm512_setzero_ps();
                }
                UNROLL for (int p = 0; p < 4; p++) {
                        __m512i m16 = _mm512_cvtepu8_epi16(ld32(sb + 192 + 32 * p));
                        UNROLL for (int t = 0; t < T; t++) {
                                __m512i bs = _mm512_set1_epi32(load_i32(act_q8_K_bs32(row[t], s) + 2 * p));
                                msum[t] = _mm512_dpwssd_epi32(msum[t], m16, bs);
                        }
                }
                for (int j = 0; j < 8; j++) { /* not unrolled (cpu.h, before PF_AHEAD_BYTES) */
                        /* one token is memory bound: keep more of the stream in flight */
                        if (pf)
                                prefetch_kstep(g, sb + j * (high ? 360 : 320), high ? 360 : 320, high ? 6 : 5, pf_sparse(T), pf);
                        __m512 scj = _mm512_cvtepi32_ps(
                                _mm512_cvtepu8_epi32(ld16(sb + 64 + 16 * j)));
                        if (in_place)
                                scj = _mm512_mul_ps(scj, _mm512_set1_ps(1.0f / 16));
                        const uint8_t *q = sb + PK_Q4_K_HEAD + j * (high ? 320 : 256);
                        __m512i w[8];
                        if (high) {
                                quints_avx512(q, w);
                        } else
                                UNROLL for (int p = 0; p < 4; p++) {
                                        __m512i v = _mm512_load_si512(q + p * 64);
                                        w[2 * p] = _mm512_and_si512(v, m4);
                                        w[2 * p + 1] = in_place ? _mm512_andnot_si512(m4, v)
                                                                : _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                                }
                        __m512i isum[MAX_T];
                        UNROLL for (int t = 0; t < T; t++)
                                isum[t] = _mm512_setzero_si512();
                        if (T <= 2) {
                                /* two chains of four vpdpbusd (5 cycles each) rather than one
                                 * of eight: one or two tokens are bound by that latency. In
                                 * place, the low nibbles' sum times 16 plus the high ones'. */
                                __m512i hsum[MAX_T];
                                UNROLL for (int t = 0; t < T; t++)
                                        hsum[t] = _mm512_setzero_si512();
                                UNROLL for (int jj = 0; jj < 8; jj += 2)
                                        UNROLL for (int t = 0; t < T; t++) {
                                                const int8_t *a = act_q8_K_qs(row[t], s) + j * 32 + jj * 4;
                                                isum[t] = _mm512_dpbusd_epi32(isum[t], w[jj], bcast4(a));
                                                hsum[t] = _mm512_dpbusd_epi32(hsum[t], w[jj + 1], bcast4(a + 4));
                                        }
                                UNROLL for (int t = 0; t < T; t++)
                                        isum[t] = _mm512_add_epi32(in_place ? _mm512_slli_epi32(isum[t], 4) : isum[t], hsum[t]);
                        } else {
                                UNROLL for (int jj = 0; jj < 8; jj++)
                                        UNROLL for (int t = 0; t < T; t++)
                                                isum[t] = _mm512_dpbusd_epi32(
                                                        isum[t], w[jj], bcast4(act_q8_K_qs(row[t], s) + j * 32 + jj * 4));
                        }
                        UNROLL for (int t = 0; t < T; t++)
                                sacc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), scj, sacc[t]);
                }
                __m512 d = f16x16(sb);
                __m512 dmin = f16x16(sb + 32);
                UNROLL for (int t = 0; t < T; t++) {
                        __m512 mins = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(msum[t]));
                        __m512 v = _mm512_fmsub_ps(d, sacc[t], mins);
                        acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(act_q8_K_d(row[t], s)), v, acc[t]);
                }
        }
        UNROLL for (int t = 0; t < T; t++)
                store_rows(y + t * ldy, acc[t], n_rows);
}

KQUANT_GEMM(q4_K) {
        TILE_DISPATCH(q4_K_tile, 0);
}

KQUANT_GEMM(q5_K) {
        TILE_DISPATCH(q4_K_tile, 1);
}

/* Q6_K: unsigned 6-bit weights (q + 32) per sub-block of 16; the offset goes with the
 * activation sums: sum_j sc_j (S_j - 32 A_j). */
AI void q6_K_tile(const uint8_t *g, const axp_act *act, int t0, int T, float *y, long ldy,
                  int n_rows, int pf) {
        int64_t k = act->k, ns = k / QK_K;
        const uint8_t *row[MAX_T];
        __m512 acc[MAX_T];
        UNROLL for (int t = 0; t < T; t++) {
                row[t] = act->data + (t0 + t) * act->stride;
                acc[t] = _mm512_setzero_ps();
        }
        const __m512i m4 = _mm512_set1_epi8(0x0f), m03 = _mm512_set1_epi8(0x03), m3f = _mm512_set1_epi8(0x3f);
        for (int64_t s = 0; s < ns; s++) {
                const uint8_t *sb = g + s * PK_Q6_K_SB;
                __m512i corr[MAX_T];
                __m512 sacc[MAX_T];
                UNROLL for (int t = 0; t < T; t++) {
                        corr[t] = _mm512_setzero_si512();
                        sacc[t] = _mm512_setzero_ps();
                }
                UNROLL for (int p = 0; p < 8; p++) {
                        __m512i sc16 = _mm512_cvtepi8_epi16(ld32(sb + 32 + 32 * p));
                        UNROLL for (int t = 0; t < T; t++) {
                                __m512i bs = _mm512_set1_epi32(load_i32(act_q8_K_bs16(row[t], s) + 2 * p));
                                corr[t] = _mm512_dpwssd_epi32(corr[t], sc16, bs);
                        }
                }
                for (int j = 0; j < 16; j++) { /* not unrolled (cpu.h, before PF_AHEAD_BYTES) */
                        if (pf)
                                prefetch_kstep(g, sb + j * 212, 212, 4, pf_sparse(T), pf);
                        /* the pair (sc_2p, sc_2p+1) of each row as one 16-bit word */
                        __m512i w32 = _mm512_cvtepi16_epi32(
                                ld32(sb + 32 + 32 * (j / 2)));
                        __m512i sci = (j & 1) ? _mm512_srai_epi32(w32, 8)
                                              : _mm512_srai_epi32(_mm512_slli_epi32(w32, 24), 24);
                        __m512 scj = _mm512_cvtepi32_ps(sci);
                        const uint8_t *q = sb + PK_Q6_K_HEAD + j * 192;
                        __m512i v0 = _mm512_load_si512(q), v1 = _mm512_load_si512(q + 64);
                        __m512i v2 = _mm512_load_si512(q + 128);
                        __m512i w[4];
                        /* three quads in the low six bits of their vectors, the fourth from
                         * their top bits (cpu.h); ternlog 0xE4 takes A's bits where C is set,
                         * else B's */
                        w[0] = _mm512_and_si512(v0, m3f);
                        w[1] = _mm512_and_si512(v1, m3f);
                        w[2] = _mm512_and_si512(v2, m3f);
                        __m512i e = _mm512_ternarylogic_epi32(_mm512_srli_epi16(v0, 6), _mm512_srli_epi16(v1, 4), m03,
                                                              0xE4);
                        e = _mm512_ternarylogic_epi32(e, _mm512_srli_epi16(v2, 2), m4, 0xE4);
                        w[3] = _mm512_and_si512(e, m3f);
                        __m512i isum[MAX_T];
                        UNROLL for (int t = 0; t < T; t++)
                                isum[t] = _mm512_setzero_si512();
                        UNROLL for (int jj = 0; jj < 4; jj++)
                                UNROLL for (int t = 0; t < T; t++)
                                        isum[t] = _mm512_dpbusd_epi32(
                                                isum[t], w[jj], bcast4(act_q8_K_qs(row[t], s) + j * 16 + jj * 4));
                        UNROLL for (int t = 0; t < T; t++)
                                sacc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), scj, sacc[t]);
                }
                __m512 d = f16x16(sb);
                UNROLL for (int t = 0; t < T; t++) {
                        __m512 v = _mm512_fmadd_ps(_mm512_set1_ps(-32.0f), _mm512_cvtepi32_ps(corr[t]),
                                                   sacc[t]);
                        __m512 dd = _mm512_mul_ps(d, _mm512_set1_ps(act_q8_K_d(row[t], s)));
                        acc[t] = _mm512_fmadd_ps(dd, v, acc[t]);
                }
        }
        UNROLL for (int t = 0; t < T; t++)
                store_rows(y + t * ldy, acc[t], n_rows);
}

KQUANT_GEMM(q6_K) {
        TILE_DISPATCH(q6_K_tile);
}

#else /* AXP_AVX512_KQUANTS == 2 */

/* Q2_K: per sub-block of 16 one crumb vector (w in 0..3, four at a time by shift and mask),
 * its int32 dot times the 4-bit scale; the mins term is an integer dot of the 4-bit mins with
 * the activation sums of 16. A sub-block's dot fits s16, so the dots of a pair of sub-blocks
 * go side by side into one vpdpwssd with the pair's scales (one load of their bytes widened to
 * s16: the packed head keeps them in pairs, cpu.h) into the superblock's int32 sum, which
 * meets a float once.
 * Against a vpdpwssd for each, its scale unpacked alone (per core, bench-kernels --micro q2_k,
 * five rounds, builds taking turns, best): from L2 39.7 -> 45.4 GB/s, two tokens from memory
 * 29.8 -> 30.4, four 19.8 -> 20.6, one the same (32.6, 32.2: memory); a compiler barrier
 * keeping each prefetch in its sub-block's step cost one token 3-15% from memory. Q3_K does
 * the same with its signed 6-bit scales, a sub-block at a time. */
AI void q2_K_tile(const uint8_t *g, const axp_act *act, int t0, int T, float *y, long ldy,
                  int n_rows, int pf) {
        int64_t k = act->k, ns = k / QK_K;
        const uint8_t *row[MAX_T];
        __m512 acc[MAX_T];
        UNROLL for (int t = 0; t < T; t++) {
                row[t] = act->data + (t0 + t) * act->stride;
                acc[t] = _mm512_setzero_ps();
        }
        const __m512i m3 = _mm512_set1_epi8(3), m15 = _mm512_set1_epi16(15);
        for (int64_t s = 0; s < ns; s++) {
                const uint8_t *sb = g + s * PK_Q2_K_SB;
                __m512i msum[MAX_T], isb[MAX_T];
                UNROLL for (int t = 0; t < T; t++)
                        msum[t] = isb[t] = _mm512_setzero_si512();
                UNROLL for (int p = 0; p < 8; p++) {
                        __m512i m16 = _mm512_srli_epi16(_mm512_cvtepu8_epi16(ld32(sb + 64 + 32 * p)), 4);
                        UNROLL for (int t = 0; t < T; t++) {
                                __m512i bs = _mm512_set1_epi32(load_i32(act_q8_K_bs16(row[t], s) + 2 * p));
                                msum[t] = _mm512_dpwssd_epi32(msum[t], m16, bs);
                        }
                }
                /* a pair of sub-blocks a step, not unrolled (cpu.h, before PF_AHEAD_BYTES) */
                for (int jp = 0; jp < 16; jp += 2) {
                        /* lane r: the scales of sub-blocks jp and jp + 1 as s16 */
                        __m512i sc = _mm512_and_si512(_mm512_cvtepu8_epi16(ld32(sb + 64 + 16 * jp)), m15);
                        __m512i isum[2][MAX_T];
                        UNROLL for (int e = 0; e < 2; e++) {
                                const int j = jp + e;
                                if (pf) /* each in its sub-block's step */
                                        prefetch_lines(sb + PF_AHEAD_BYTES + j * 84, 2, pf);
                                __m512i v = _mm512_load_si512(sb + PK_Q2_K_HEAD + 64 * j);
                                __m512i w[4];
                                UNROLL for (int p = 0; p < 4; p++)
                                        w[p] = _mm512_and_si512(p ? _mm512_srli_epi16(v, 2 * p) : v, m3);
                                UNROLL for (int t = 0; t < T; t++)
                                        isum[e][t] = _mm512_setzero_si512();
                                UNROLL for (int p = 0; p < 4; p++)
                                        UNROLL for (int t = 0; t < T; t++)
                                                isum[e][t] = _mm512_dpbusd_epi32(
                                                        isum[e][t], w[p], bcast4(act_q8_K_qs(row[t], s) + 16 * j + 4 * p));
                        }
                        /* both dots (each fits s16) side by side in a lane, times their scales */
                        UNROLL for (int t = 0; t < T; t++)
                                isb[t] = _mm512_dpwssd_epi32(
                                        isb[t], _mm512_mask_blend_epi16(0xaaaaaaaa, isum[0][t], _mm512_slli_epi32(isum[1][t], 16)),
                                        sc);
                }
                __m512 d = f16x16(sb);
                __m512 dmin = f16x16(sb + 32);
                UNROLL for (int t = 0; t < T; t++) {
                        __m512 mins = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(msum[t]));
                        __m512 v = _mm512_fmsub_ps(d, _mm512_cvtepi32_ps(isb[t]), mins);
                        acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(act_q8_K_d(row[t], s)), v, acc[t]);
                }
        }
        UNROLL for (int t = 0; t < T; t++)
                store_rows(y + t * ldy, acc[t], n_rows);
}

KQUANT_GEMM(q2_K) {
        TILE_DISPATCH(q2_K_tile);
}

/* The 6-bit sub-block scales of a superblock, less 32, as Q3_K (np = 8 pairs of sub-blocks) and
 * IQ4_XS (np = 4) pack them: low nibbles [np][16] at lo (sub-blocks 2p | 2p + 1 << 4), top
 * bits [np / 2][16] at hi (sub-blocks 4q..4q + 3, two bits each). All of them as s8, four
 * pairs a step: sub-block 2p's 16 rows at ev[16 p], 2p + 1's at od[16 p]. */
AI void scales6_split(const uint8_t *lo, const uint8_t *hi, int np, int8_t *ev, int8_t *od) {
        const __m512i m4 = _mm512_set1_epi8(15), m2 = _mm512_set1_epi8(3), c32 = _mm512_set1_epi8(32);
        /* 16-byte lane i holds pair 4k + i: top bits from hi block 2k + i / 2, shifted by 4 (i & 1) */
        const __m512i dup = _mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3);
        const __m512i sh = _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4);
        for (int k = 0; k < np / 4; k++) {
                __m512i l = _mm512_loadu_si512(lo + 64 * k);
                __m512i h = _mm512_srlv_epi64(
                        _mm512_permutexvar_epi64(dup, _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *) (hi + 32 * k)))),
                        sh);
                /* a byte's two bits moved to bits 4-5 stay in the byte */
                __m512i e = _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_slli_epi16(_mm512_and_si512(h, m2), 4));
                __m512i o = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
                                            _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(h, 2), m2), 4));
                _mm512_store_si512(ev + 64 * k, _mm512_sub_epi8(e, c32));
                _mm512_store_si512(od + 64 * k, _mm512_sub_epi8(o, c32));
        }
}

/* Sub-block j's 16 scales from scales6_split, in int32 lanes */
AI __m512i scale6_i32(const int8_t *ev, const int8_t *od, int j) {
        return _mm512_cvtepi8_epi32(ld16(((j & 1) ? od : ev) + 16 * (j / 2)));
}

/* Q3_K: w + 4 in 0..7 from the pair's three vectors (cpu.h; ternlog 0xE4 takes A's bits where
 * C is set, else B's): sub-block 2p's quads in their low three bits, 2p + 1's in bits 3-5,
 * taken in place (8 times their value) for one or two tokens, where the dot's shift back costs
 * less than unpacking. Each sub-block's dot starts from -4 times its activation sum (8 times
 * that in place), and fits s16 (at most 16 * 4 * 127), times the scale as Q2_K's. */
AI void q3_K_tile(const uint8_t *g, const axp_act *act, int t0, int T, float *y, long ldy,
                  int n_rows, int pf) {
        int64_t k = act->k, ns = k / QK_K;
        const uint8_t *qbase = g + pk_q3_K_qs_offset(k);
        const uint8_t *row[MAX_T];
        __m512 acc[MAX_T];
        UNROLL for (int t = 0; t < T; t++) {
                row[t] = act->data + (t0 + t) * act->stride;
                acc[t] = _mm512_setzero_ps();
        }
        const bool in_place = T <= 2;
        const __m512i m7 = _mm512_set1_epi8(7), m3 = _mm512_set1_epi8(3);
        for (int64_t s = 0; s < ns; s++) {
                const uint8_t *h = g + s * PK_Q3_K_HEAD, *qs = qbase + s * PK_Q3_K_QS;
                __m512i isb[MAX_T];
                UNROLL for (int t = 0; t < T; t++)
                        isb[t] = _mm512_setzero_si512();
                _Alignas(64) int8_t ev[8 * 16], od[8 * 16];
                scales6_split(h + 32, h + 160, 8, ev, od);
                UNROLL for (int j = 0; j < 16; j++) { /* unrolled (cpu.h, before PF_AHEAD_BYTES) */
                        const uint8_t *vp = qs + 192 * (j / 2);
                        if (pf && !(j & 1)) {
                                prefetch_q3_K(g, s, j / 2, pf);
                                /* keeps the prefetch in its step, where GCC hoisted them all */
                                __asm__ volatile("" ::: "memory");
                        }
                        /* the lanes' high halves 0, so that vpdpwssd adds no product of signs */
                        __m512i scj = _mm512_and_si512(scale6_i32(ev, od, j), _mm512_set1_epi32(0xffff));
                        __m512i v0 = _mm512_load_si512(vp), v1 = _mm512_load_si512(vp + 64);
                        __m512i v2 = _mm512_load_si512(vp + 128);
                        __m512i w[4];
                        int in = (j & 1) && in_place;
                        if (!(j & 1)) {
                                w[0] = _mm512_and_si512(v0, m7);
                                w[1] = _mm512_and_si512(v1, m7);
                                w[2] = _mm512_and_si512(v2, m7);
                                w[3] = _mm512_and_si512(_mm512_ternarylogic_epi32(_mm512_srli_epi16(v0, 6),
                                                                                  _mm512_srli_epi16(v1, 4), m3, 0xE4),
                                                        m7);
                        } else if (in) {
                                const __m512i m38 = _mm512_set1_epi8(0x38);
                                w[0] = _mm512_and_si512(v0, m38);
                                w[1] = _mm512_and_si512(v1, m38);
                                w[2] = _mm512_and_si512(v2, m38);
                                w[3] = _mm512_and_si512(_mm512_ternarylogic_epi32(_mm512_srli_epi16(v2, 3),
                                                                                  _mm512_srli_epi16(v1, 2),
                                                                                  _mm512_set1_epi8(0x18), 0xE4),
                                                        m38);
                        } else {
                                w[0] = _mm512_and_si512(_mm512_srli_epi16(v0, 3), m7);
                                w[1] = _mm512_and_si512(_mm512_srli_epi16(v1, 3), m7);
                                w[2] = _mm512_and_si512(_mm512_srli_epi16(v2, 3), m7);
                                w[3] = _mm512_and_si512(_mm512_ternarylogic_epi32(_mm512_srli_epi16(v2, 6),
                                                                                  _mm512_srli_epi16(v1, 5), m3, 0xE4),
                                                        m7);
                        }
                        __m512i isum[MAX_T];
                        UNROLL for (int t = 0; t < T; t++)
                                isum[t] = _mm512_set1_epi32(-4 * act_q8_K_bs16(row[t], s)[j] * (in ? 8 : 1));
                        UNROLL for (int p = 0; p < 4; p++)
                                UNROLL for (int t = 0; t < T; t++)
                                        isum[t] = _mm512_dpbusd_epi32(
                                                isum[t], w[p], bcast4(act_q8_K_qs(row[t], s) + 16 * j + 4 * p));
                        UNROLL for (int t = 0; t < T; t++)
                                isb[t] = _mm512_dpwssd_epi32(isb[t], in ? _mm512_srai_epi32(isum[t], 3) : isum[t], scj);
                }
                __m512 d = f16x16(h);
                UNROLL for (int t = 0; t < T; t++)
                        acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(act_q8_K_d(row[t], s))),
                                                 _mm512_cvtepi32_ps(isb[t]), acc[t]);
        }
        UNROLL for (int t = 0; t < T; t++)
                store_rows(y + t * ldy, acc[t], n_rows);
}

KQUANT_GEMM(q3_K) {
        TILE_DISPATCH(q3_K_tile);
}

/* IQ4_XS: IQ4_NL's level lookup (level + 128, the offset started from -128 times the
 * activation sum of 32) per sub-block of 32, times the signed 6-bit scale in float. */
AI void iq4_xs_tile(const uint8_t *g, const axp_act *act, int t0, int T, float *y, long ldy,
                    int n_rows, int pf) {
        int64_t k = act->k, ns = k / QK_K;
        const uint8_t *row[MAX_T];
        __m512 acc[MAX_T];
        UNROLL for (int t = 0; t < T; t++) {
                row[t] = act->data + (t0 + t) * act->stride;
                acc[t] = _mm512_setzero_ps();
        }
        const __m512i m4 = _mm512_set1_epi8(0x0f);
        int8_t l[16];
        for (int i = 0; i < 16; i++)
                l[i] = (int8_t) (axp_iq4nl_values[i] + 128);
        const __m512i lut = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *) l));
        for (int64_t s = 0; s < ns; s++) {
                const uint8_t *sb = g + s * PK_IQ4_XS_SB;
                __m512 sacc[MAX_T];
                UNROLL for (int t = 0; t < T; t++)
                        sacc[t] = _mm512_setzero_ps();
                _Alignas(64) int8_t ev[4 * 16], od[4 * 16];
                scales6_split(sb + 32, sb + 96, 4, ev, od);
                for (int j = 0; j < 8; j++) { /* not unrolled (cpu.h, before PF_AHEAD_BYTES) */
                        if (pf)
                                prefetch_kstep(g, sb + j * (PK_IQ4_XS_SB / 8), PK_IQ4_XS_SB / 8, 5, pf_sparse(T), pf);
                        __m512 scj = _mm512_cvtepi32_ps(scale6_i32(ev, od, j));
                        const uint8_t *q = sb + PK_IQ4_XS_HEAD + j * 256;
                        __m512i w[8];
                        UNROLL for (int p = 0; p < 4; p++) {
                                __m512i v = _mm512_load_si512(q + p * 64);
                                w[2 * p] = _mm512_shuffle_epi8(lut, _mm512_and_si512(v, m4));
                                w[2 * p + 1] = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
                        }
                        __m512i isum[MAX_T];
                        UNROLL for (int t = 0; t < T; t++)
                                isum[t] = _mm512_set1_epi32(-128 * act_q8_K_bs32(row[t], s)[j]);
                        UNROLL for (int jj = 0; jj < 8; jj++)
                                UNROLL for (int t = 0; t < T; t++)
                                        isum[t] = _mm512_dpbusd_epi32(
                                                isum[t], w[jj], bcast4(act_q8_K_qs(row[t], s) + j * 32 + jj * 4));
                        UNROLL for (int t = 0; t < T; t++)
                                sacc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), scj, sacc[t]);
                }
                __m512 d = f16x16(sb);
                UNROLL for (int t = 0; t < T; t++)
                        acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(act_q8_K_d(row[t], s)), _mm512_mul_ps(d, sacc[t]),
                                                 acc[t]);
        }
        UNROLL for (int t = 0; t < T; t++)
                store_rows(y + t * ldy, acc[t], n_rows);
}

KQUANT_GEMM(iq4_xs) {
        TILE_DISPATCH(iq4_xs_tile);
}

#endif /* AXP_AVX512_KQUANTS == 1 */
#endif /* AXP_AVX512_KQUANTS */

#ifndef AXP_AVX512_KQUANTS
/* Activation quantizers (same bytes as quant-act.c) ---------------------------------------- */

static void quant_f16(const float *x, int64_t k, uint8_t *row) {
        float *o = (float *) row;
        int64_t i = 0;
        for (; i + 16 <= k; i += 16)
                _mm512_storeu_ps(o + i, _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_loadu_ps(x + i),
                                                                        _MM_FROUND_TO_NEAREST_INT)));
        for (; i < k; i++)
                o[i] = _cvtsh_ss(_cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT));
}

static void quant_q8_0(const float *x, int64_t k, uint8_t *row) {
        const __m512 sign = _mm512_set1_ps(-0.0f);
        for (int64_t b = 0; b < k / QK8_0; b++, x += QK8_0) {
                int8_t *qs = (int8_t *) act_q8_0_qs(row, b);
                __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
                __m512 m = _mm512_max_ps(_mm512_andnot_ps(sign, v0), _mm512_andnot_ps(sign, v1));
                float amax = _mm512_reduce_max_ps(m);
                __m512 id = _mm512_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
                __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, id));
                __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, id));
                _mm_storeu_si128((__m128i *) qs, _mm512_cvtsepi32_epi8(q0));
                _mm_storeu_si128((__m128i *) (qs + 16), _mm512_cvtsepi32_epi8(q1));
                act_q8_0_put(row, b, amax / 127.0f,
                             _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1)));
        }
}

static void quant_q8_K(const float *x, int64_t k, uint8_t *row) {
        const __m512 sign = _mm512_set1_ps(-0.0f);
        for (int64_t s = 0; s < k / QK_K; s++, x += QK_K) {
                int8_t *qs = (int8_t *) act_q8_K_qs(row, s);
                int16_t bs16[16] = { 0 };
                __m512 m = _mm512_setzero_ps();
                for (int i = 0; i < QK_K; i += 16)
                        m = _mm512_max_ps(m, _mm512_andnot_ps(sign, _mm512_loadu_ps(x + i)));
                float amax = _mm512_reduce_max_ps(m);
                if (amax == 0) {
                        memset(qs, 0, QK_K);
                        act_q8_K_put(row, s, 0.0f, bs16);
                        continue;
                }
                /* the first element of largest magnitude gives the sign, as the reference */
                float max = 0;
                __m512 va = _mm512_set1_ps(amax);
                for (int i = 0; i < QK_K; i += 16) {
                        __mmask16 hit = _mm512_cmp_ps_mask(_mm512_andnot_ps(sign, _mm512_loadu_ps(x + i)), va,
                                                           _CMP_EQ_OQ);
                        if (hit) {
                                max = x[i + __builtin_ctz(hit)];
                                break;
                        }
                }
                float iscale = -127.0f / max;
                __m512 vs = _mm512_set1_ps(iscale);
                const __m512i q127 = _mm512_set1_epi32(127);
                for (int j = 0; j < 16; j++) {
                        __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + 16 * j), vs));
                        q = _mm512_min_epi32(q, q127);
                        _mm_storeu_si128((__m128i *) (qs + 16 * j), _mm512_cvtsepi32_epi8(q));
                        bs16[j] = (int16_t) _mm512_reduce_add_epi32(q);
                }
                act_q8_K_put(row, s, 1.0f / iscale, bs16);
        }
}

/* Attention ------------------------------------------------------------------------------- */

/* exp for x <= 0 (softmax): 2^n * p(r), r = x - n ln2, Cephes' minimax polynomial; x is
 * clamped where the result stays a normal float (a subnormal one costs a microcode assist,
 * cpu.h) */
AI __m512 exp_neg(__m512 x) {
        x = _mm512_max_ps(x, _mm512_set1_ps(-86.0f));
        __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
        r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
        __m512 p = _mm512_set1_ps(1.9875691500e-4f);
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
        p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
        return _mm512_scalef_ps(p, n);
}

/* Soft-capping of 16 scores, as the AVX2 path's softcap8 (see there) */
AI __m512 softcap16(__m512 s, __m512 cap, __m512 inv2) {
        const __m512 one = _mm512_set1_ps(1.0f), neg = _mm512_set1_ps(-0.0f);
        __m512 e = exp_neg(_mm512_or_ps(_mm512_mul_ps(s, inv2), neg));
        __m512 t = _mm512_div_ps(_mm512_fnmadd_ps(cap, e, cap), _mm512_add_ps(one, e));
        return _mm512_xor_ps(t, _mm512_and_ps(s, neg));
}

/* The 16 lane sums of v[0..15], in that order; each sum's tree depends only on its own
 * vector. */
AI __m512 reduce16(const __m512 *v) {
        __m512 s[8], w[4];
        UNROLL for (int i = 0; i < 8; i++)
                s[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                                     _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
        UNROLL for (int i = 0; i < 4; i++)
                w[i] = _mm512_add_ps(_mm512_shuffle_ps(s[2 * i], s[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm512_shuffle_ps(s[2 * i], s[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
        __m512 c = _mm512_add_ps(_mm512_shuffle_f32x4(w[0], w[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_f32x4(w[0], w[1], _MM_SHUFFLE(3, 1, 3, 1)));
        __m512 d = _mm512_add_ps(_mm512_shuffle_f32x4(w[2], w[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_f32x4(w[2], w[3], _MM_SHUFFLE(3, 1, 3, 1)));
        return _mm512_add_ps(_mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(3, 1, 3, 1)));
}

AI __mmask16 tail_mask(int n) {
        return n >= 16 ? (__mmask16) 0xffff : (__mmask16) ((1u << n) - 1);
}

/* scores of one vector against 16 positions of widened K (rows hdp floats apart), n of them
 * real; NC is nc when the head is 64 or 128 wide (the loops unroll), else 0. The query is
 * read from memory (L1) per 16 values, so the 16 sums stay in registers; a whole block takes
 * no per-position test. */
AI __m512 scores16(const float *qj, int nc, int hd, const float *kf, int hdp, int n, int NC) {
        __m512 p[16];
        UNROLL for (int i = 0; i < 16; i++)
                p[i] = _mm512_setzero_ps();
        /* with NC the row stride is a constant too (hdp = 16 NC): given as a variable, the
         * compiler kept the row addresses on the stack and loaded one per FMA */
        int ncl = NC ? NC : nc, rs = NC ? 16 * NC : hdp;
        if (n == 16) {
                UNROLL for (int c = 0; c < ncl; c++) {
                        __m512 qc = NC ? _mm512_loadu_ps(qj + 16 * c) : _mm512_maskz_loadu_ps(tail_mask(hd - 16 * c), qj + 16 * c);
                        UNROLL for (int i = 0; i < 16; i++)
                                p[i] = _mm512_fmadd_ps(qc, _mm512_load_ps(kf + i * rs + 16 * c), p[i]);
                }
        } else {
                for (int c = 0; c < ncl; c++) {
                        __m512 qc = NC ? _mm512_loadu_ps(qj + 16 * c) : _mm512_maskz_loadu_ps(tail_mask(hd - 16 * c), qj + 16 * c);
                        UNROLL for (int i = 0; i < 16; i++)
                                if (i < n)
                                        p[i] = _mm512_fmadd_ps(qc, _mm512_load_ps(kf + i * rs + 16 * c), p[i]);
                }
        }
        return reduce16(p);
}

AI void scores_all(const float *const *q, int nv, const int *len, const float *kb, int t0, int hd, int nc,
                   int hdp, float scale, float *s, int NC) {
        __m512 vs = _mm512_set1_ps(scale);
        for (int j = 0; j < nv; j++) {
                if (t0 >= len[j])
                        continue;
                int n = len[j] - t0 < 16 ? len[j] - t0 : 16;
                __m512 r = scores16(q[j], nc, hd, kb, hdp, n, NC);
                _mm512_store_ps(s + j * ATT_CHUNK + t0, _mm512_mul_ps(r, vs));
        }
}

/* A Q8_0 cache block's scale in every lane, and its 16 values from element o on times it */
AI __m512 q8_scale16(const block_q8_0 *b) {
        return _mm512_cvtph_ps(_mm256_set1_epi16((short) b->d));
}

AI __m512 q8_16(const block_q8_0 *b, int o, __m512 d) {
        return _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *) (b->qs + o)))));
}

/* 16 values of a K or V row from element i on (mk: which are real); Q8_0: i is a multiple of
 * 16 and all are real (heads are whole blocks of 32) */
AI __m512 kv_row(const void *p, long i, uint32_t type, __mmask16 mk) {
        if (type == AXP_TYPE_Q8_0) {
                const block_q8_0 *b = (const block_q8_0 *) p + i / QK8_0;
                return q8_16(b, (int) (i % QK8_0), q8_scale16(b));
        }
        if (type == AXP_TYPE_F16)
                return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mk, (const uint16_t *) p + i));
        return _mm512_maskz_loadu_ps(mk, (const float *) p + i);
}

/* rows [t0, t0 + n) of an F16 cache whose heads are HD wide (a constant), as f32 */
AI void widen_f16(const void *src, long ld, int t0, int n, int HD, float *dst) {
        for (int t = 0; t < n; t++) {
                const uint16_t *r = (const uint16_t *) src + (long) (t0 + t) * ld;
                att_prefetch_row(src, AXP_TYPE_F16, ld, t0 + t + att_pf_rows(2 * HD), 2 * HD);
                UNROLL for (int c = 0; c < HD / 16; c++)
                        _mm512_store_ps(dst + t * HD + 16 * c,
                                        _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *) (r + 16 * c))));
        }
}

/* the same for a Q8_0 cache (heads hd wide, a multiple of 32: rows hd floats apart) */
AI void widen_q8(const void *src, long ld, int t0, int n, int hd, float *dst) {
        /* ld / 32 blocks between positions; a head's blocks are contiguous */
        const long bld = ld / QK8_0;
        const int row_bytes = hd / QK8_0 * (int) sizeof(block_q8_0), ahead = att_pf_rows(row_bytes);
        for (int t = 0; t < n; t++) {
                const block_q8_0 *r = (const block_q8_0 *) src + (long) (t0 + t) * bld;
                att_prefetch_row(src, AXP_TYPE_Q8_0, ld, t0 + t + ahead, row_bytes);
                /* each block's scale once */
                for (int c = 0; c < hd / 16; c += 2) {
                        const block_q8_0 *b = r + c / 2;
                        __m512 d = q8_scale16(b);
                        _mm512_store_ps(dst + t * hd + 16 * c, q8_16(b, 0, d));
                        _mm512_store_ps(dst + t * hd + 16 * c + 16, q8_16(b, 16, d));
                }
        }
}

/* rows [t0, t0 + n) of K or V as f32, hdp floats apart, zero padded */
static void widen(const void *src, uint32_t type, long ld, int t0, int n, int hd, int hdp, float *dst) {
        int nc = hdp / 16;
        /* the rows of one KV head are ld apart: each fetched well ahead (a 128-wide head
         * went through the loop at the end without, at half the speed) */
        if (type == AXP_TYPE_F16 && hd == 64) {
                widen_f16(src, ld, t0, n, 64, dst);
                return;
        }
        if (type == AXP_TYPE_F16 && hd == 128) {
                widen_f16(src, ld, t0, n, 128, dst);
                return;
        }
        if (type == AXP_TYPE_Q8_0) {
                if (hd == 64)
                        widen_q8(src, ld, t0, n, 64, dst);
                else if (hd == 128)
                        widen_q8(src, ld, t0, n, 128, dst);
                else
                        widen_q8(src, ld, t0, n, hd, dst);
                return;
        }
        int row_bytes = (int) att_kv_bytes(type, (size_t) hd), ahead = att_pf_rows(row_bytes);
        for (int t = 0; t < n; t++) {
                att_prefetch_row(src, type, ld, t0 + t + ahead, row_bytes);
                for (int c = 0; c < nc; c++)
                        _mm512_store_ps(dst + t * hdp + 16 * c, kv_row(src, (long) (t0 + t) * ld + 16 * c, type,
                                                                       tail_mask(hd - 16 * c)));
        }
}

/* 16 values of V's row t from element 16 c on: widened already (kvt < 0: vf, rows hdp apart)
 * or read and widened here (kvt: the cache's type, a constant where this is inlined) */
AI __m512 v_row(const float *vf, int hdp, const void *v, long ld, int kvt, int t, int c, int hd, __mmask16 mk) {
        if (kvt < 0)
                return _mm512_load_ps(vf + t * hdp + 16 * c);
        return 16 * c < hd ? kv_row(v, (long) t * ld + 16 * c, (uint32_t) kvt, mk) : _mm512_setzero_ps();
}

/* the NC vectors of V's row t (v_row for c < NC); a Q8_0 block's scale converted once for its
 * two vectors */
AI void v_rows(const float *vf, int hdp, const void *v, long ld, int kvt, int t, int hd, const __mmask16 *mk,
               __m512 *vt, int NC) {
        if (kvt == AXP_TYPE_Q8_0) {
                const block_q8_0 *r = (const block_q8_0 *) v + t * (ld / QK8_0);
                UNROLL for (int c = 0; c < NC; c += 2) {
                        if (16 * c >= hd) {
                                vt[c] = vt[c + 1] = _mm512_setzero_ps();
                                continue;
                        }
                        __m512 d = q8_scale16(r + c / 2);
                        vt[c] = q8_16(r + c / 2, 0, d);
                        vt[c + 1] = q8_16(r + c / 2, 16, d);
                }
                return;
        }
        UNROLL for (int c = 0; c < NC; c++)
                vt[c] = v_row(vf, hdp, v, ld, kvt, t, c, hd, mk[c]);
}

/* acc_j += p_jt V_t over positions [tb, te) for up to 4 vectors at once (their accumulators
 * stay in registers; they start at zero when tb is 0, else from acc), V widened (kvt < 0) or
 * read in place (as the AVX2 path's accum_kv; rows fetched att_pf_rows ahead). Every index of
 * a[][] is a constant once unrolled, so the compiler keeps it in registers (a loop over j with
 * a variable bound kept it in memory, stored at every position); hd is a constant where
 * att_chunk knows the width (64, 128), so no masks. */
AI void accum(const float *s, const int *len, int nv_sub, const float *vf, int hdp, const void *v, int kvt,
              long ld, float *acc, int hd, int tb, int te, int NC, int SUB) {
        __m512 a[4][8];
        __mmask16 mk[8];
        int lmax = 0, lmin = ATT_CHUNK, row_bytes = kvt >= 0 ? (int) att_kv_bytes((uint32_t) kvt, (size_t) hd) : 0;
        int ahead = kvt >= 0 ? att_pf_rows(row_bytes) : 0;
        UNROLL for (int c = 0; c < NC; c++)
                mk[c] = 16 * c < hd ? tail_mask(hd - 16 * c) : 0;
        UNROLL for (int j = 0; j < SUB; j++) {
                if (j < nv_sub) {
                        lmax = len[j] > lmax ? len[j] : lmax;
                        lmin = len[j] < lmin ? len[j] : lmin;
                }
                UNROLL for (int c = 0; c < NC; c++)
                        a[j][c] = tb > 0 && j < nv_sub && 16 * c < hd ? _mm512_maskz_loadu_ps(mk[c], acc + j * hd + 16 * c)
                                                                       : _mm512_setzero_ps();
        }
        if (nv_sub < SUB)
                lmin = 0;
        lmax = lmax < te ? lmax : te;
        int t = tb;
        /* positions every vector sees (a query's heads: all) */
        for (; t < lmin && t < lmax; t++) {
                if (kvt >= 0)
                        att_prefetch_row(v, (uint32_t) kvt, ld, t + ahead, row_bytes);
                __m512 vt[8];
                v_rows(vf, hdp, v, ld, kvt, t, hd, mk, vt, NC);
                UNROLL for (int j = 0; j < SUB; j++) {
                        __m512 pj = _mm512_set1_ps(s[j * ATT_CHUNK + t]);
                        UNROLL for (int c = 0; c < NC; c++)
                                a[j][c] = _mm512_fmadd_ps(pj, vt[c], a[j][c]);
                }
        }
        for (; t < lmax; t++) {
                __m512 vt[8];
                v_rows(vf, hdp, v, ld, kvt, t, hd, mk, vt, NC);
                UNROLL for (int j = 0; j < SUB; j++)
                        if (j < nv_sub && t < len[j]) {
                                __m512 pj = _mm512_set1_ps(s[j * ATT_CHUNK + t]);
                                UNROLL for (int c = 0; c < NC; c++)
                                        a[j][c] = _mm512_fmadd_ps(pj, vt[c], a[j][c]);
                        }
        }
        UNROLL for (int j = 0; j < SUB; j++)
                UNROLL for (int c = 0; c < NC; c++)
                        if (j < nv_sub && 16 * c < hd)
                                _mm512_mask_storeu_ps(acc + j * hd + 16 * c, mk[c], a[j][c]);
}

/* accum with V widened (vf) or for the cache's type, a constant in each call */
AI void accum_kv(const float *s, const int *len, int nv_sub, const float *vf, int hdp, const void *v,
                 uint32_t kv_type, long ld, float *acc, int hd, int tb, int te, int NC, int SUB) {
        if (vf)
                accum(s, len, nv_sub, vf, hdp, NULL, -1, 0, acc, hd, tb, te, NC, SUB);
        else if (kv_type == AXP_TYPE_F16)
                accum(s, len, nv_sub, NULL, hdp, v, AXP_TYPE_F16, ld, acc, hd, tb, te, NC, SUB);
        else if (kv_type == AXP_TYPE_Q8_0)
                accum(s, len, nv_sub, NULL, hdp, v, AXP_TYPE_Q8_0, ld, acc, hd, tb, te, NC, SUB);
        else
                accum(s, len, nv_sub, NULL, hdp, v, AXP_TYPE_F32, ld, acc, hd, tb, te, NC, SUB);
}

static void att_chunk(const float *const *q, int nv, const int *len, const void *k, const void *v,
                      uint32_t kv_type, long ld, int n_pos, int hd, float scale, float softcap,
                      float *m, float *l, float *acc, float *scratch) {
        int nc = (hd + 15) / 16, hdp = nc * 16;
        float *s = scratch, *kb = scratch + ATT_MAX_VECS * ATT_CHUNK, *vf = kb + ATT_CHUNK * ATT_MAX_HEAD_DIM;

        /* scores, 16 positions at a time: their K rows widened once for every vector */
        for (int t0 = 0; t0 < n_pos; t0 += 16) {
                int n = n_pos - t0 < 16 ? n_pos - t0 : 16;
                widen(k, kv_type, ld, t0, n, hd, hdp, kb);
                if (hd == 64)
                        scores_all(q, nv, len, kb, t0, hd, nc, hdp, scale, s, 4);
                else if (hd == 128)
                        scores_all(q, nv, len, kb, t0, hd, nc, hdp, scale, s, 8);
                else
                        scores_all(q, nv, len, kb, t0, hd, nc, hdp, scale, s, 0);
        }

        __m512 vcap = _mm512_set1_ps(softcap), vinv2 = _mm512_set1_ps(softcap > 0 ? 2.0f / softcap : 0.0f);
        for (int j = 0; j < nv; j++) {
                float *sj = s + j * ATT_CHUNK;
                /* soft-capped: the vector's scores in place (past len[j], masked off) */
                if (softcap > 0)
                        for (int t0 = 0; t0 < len[j]; t0 += 16) {
                                __mmask16 mk = tail_mask(len[j] - t0);
                                _mm512_mask_store_ps(sj + t0, mk, softcap16(_mm512_maskz_load_ps(mk, sj + t0), vcap, vinv2));
                        }
                __m512 mx = _mm512_set1_ps(-INFINITY);
                for (int t0 = 0; t0 < len[j]; t0 += 16)
                        mx = _mm512_mask_max_ps(mx, tail_mask(len[j] - t0), mx, _mm512_load_ps(sj + t0));
                float mj = _mm512_reduce_max_ps(mx);
                __m512 vm = _mm512_set1_ps(mj), sum = _mm512_setzero_ps();
                for (int t0 = 0; t0 < len[j]; t0 += 16) {
                        __mmask16 mk = tail_mask(len[j] - t0);
                        __m512 d = _mm512_sub_ps(_mm512_load_ps(sj + t0), vm);
                        mk &= _mm512_cmp_ps_mask(d, _mm512_set1_ps(ATT_P_CUT), _CMP_GE_OQ);
                        __m512 e = _mm512_maskz_mov_ps(mk, exp_neg(d));
                        _mm512_store_ps(sj + t0, e);
                        sum = _mm512_add_ps(sum, e);
                }
                m[j] = mj;
                l[j] = _mm512_reduce_add_ps(sum);
        }

        /* V in place when each row serves at most two groups of vectors (decode: a query's
         * heads), else widened once (prefill: converting a row for every group costs more
         * than the store and loads back) */
        int sub = nc <= 4 ? 4 : nc <= 8 ? 2 : 1;
        const float *vw = NULL;
        if (nv > 2 * sub) {
                widen(v, kv_type, ld, 0, n_pos, hd, hdp, vf);
                vw = vf;
        }
        /* In place with more than one group, the groups take turns over ATT_V_BLOCK
         * positions at a time (cpu.h) */
        int block = vw || nv <= sub ? ATT_CHUNK : ATT_V_BLOCK;
        for (int tb = 0; tb < n_pos || tb == 0; tb += block) {
                int te = tb + block < n_pos ? tb + block : n_pos;
                for (int j = 0; j < nv; j += sub) {
                        int ns = nv - j < sub ? nv - j : sub;
                        float *aj = acc + (size_t) j * hd;
                        if (hd == 64)
                                accum_kv(s + j * ATT_CHUNK, len + j, ns, vw, hdp, v, kv_type, ld, aj, 64, tb, te, 4, 4);
                        else if (hd == 128)
                                accum_kv(s + j * ATT_CHUNK, len + j, ns, vw, hdp, v, kv_type, ld, aj, 128, tb, te, 8, 2);
                        else if (nc <= 4)
                                accum_kv(s + j * ATT_CHUNK, len + j, ns, vw, hdp, v, kv_type, ld, aj, hd, tb, te, 4, 4);
                        else if (nc <= 8)
                                accum_kv(s + j * ATT_CHUNK, len + j, ns, vw, hdp, v, kv_type, ld, aj, hd, tb, te, 8, 2);
                        else if (tb == 0) {
                                /* wide heads: in memory, same operations per element */
                                for (int c = 0; c < nc; c++) {
                                        __m512 ac = _mm512_setzero_ps();
                                        for (int t = 0; t < len[j]; t++)
                                                ac = _mm512_fmadd_ps(_mm512_set1_ps(s[j * ATT_CHUNK + t]),
                                                                     vw ? _mm512_load_ps(vw + t * hdp + 16 * c)
                                                                        : kv_row(v, (long) t * ld + 16 * c, kv_type,
                                                                                 tail_mask(hd - 16 * c)),
                                                                     ac);
                                        _mm512_mask_storeu_ps(aj + 16 * c, tail_mask(hd - 16 * c), ac);
                                }
                        }
                }
        }
}

/* Feed-forward activation ------------------------------------------------------------------ */

/* act(g) u for 16 values, as the AVX2 path's glu8 (see there) */
AI __m512 glu16(int act, __m512 g, __m512 u) {
        const __m512 one = _mm512_set1_ps(1.0f), neg = _mm512_set1_ps(-0.0f);
        __m512 x = g;
        if (act == AXP_GLU_GELU_TANH)
                x = _mm512_mul_ps(_mm512_set1_ps(1.5957691216f),
                                  _mm512_fmadd_ps(_mm512_set1_ps(0.044715f), _mm512_mul_ps(_mm512_mul_ps(g, g), g), g));
        __m512 e = exp_neg(_mm512_or_ps(x, neg));
        __m512 r = _mm512_div_ps(one, _mm512_add_ps(one, e));
        __mmask16 below = _mm512_movepi32_mask(_mm512_castps_si512(x)); /* x's sign bit */
        __m512 sg = _mm512_mask_mul_ps(r, below, e, r);
        return _mm512_mul_ps(_mm512_mul_ps(g, sg), u);
}

AI void glu_row(int act, float *g, const float *u, long n) {
        long i = 0;
        for (; i + 16 <= n; i += 16)
                _mm512_storeu_ps(g + i, glu16(act, _mm512_loadu_ps(g + i), _mm512_loadu_ps(u + i)));
        if (i < n) {
                __mmask16 m = tail_mask((int) (n - i));
                _mm512_mask_storeu_ps(g + i, m, glu16(act, _mm512_maskz_loadu_ps(m, g + i), _mm512_maskz_loadu_ps(m, u + i)));
        }
}

static void glu(int act, float *g, const float *u, long n) {
        if (act == AXP_GLU_GELU_TANH)
                glu_row(AXP_GLU_GELU_TANH, g, u, n);
        else
                glu_row(AXP_GLU_SILU, g, u, n);
}

static void softcap(float *x, long n, float cap) {
        const __m512 vcap = _mm512_set1_ps(cap), inv2 = _mm512_set1_ps(2.0f / cap);
        for (long i = 0; i < n; i += 16) {
                __mmask16 m = n - i >= 16 ? (__mmask16) 0xffff : (__mmask16) ((1u << (n - i)) - 1);
                _mm512_mask_storeu_ps(x + i, m, softcap16(_mm512_maskz_loadu_ps(m, x + i), vcap, inv2));
        }
}

const axp_cpu_ops axp_cpu_ops_avx512 = {
        .name = "avx512",
        .quant = {
                [AXP_ACT_F32] = axp_quant_act_f32,
                [AXP_ACT_F16] = quant_f16,
                [AXP_ACT_BF16] = axp_quant_act_bf16,
                [AXP_ACT_Q8_0] = quant_q8_0,
                [AXP_ACT_Q8_K] = quant_q8_K,
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
                [AXP_TYPE_Q4_K] = axp_avx512_gemm_q4_K,
                [AXP_TYPE_Q5_K] = axp_avx512_gemm_q5_K,
                [AXP_TYPE_Q6_K] = axp_avx512_gemm_q6_K,
                [AXP_TYPE_Q2_K] = axp_avx512_gemm_q2_K,
                [AXP_TYPE_Q3_K] = axp_avx512_gemm_q3_K,
                [AXP_TYPE_IQ4_XS] = axp_avx512_gemm_iq4_xs,
        },
        .att_chunk = att_chunk,
        .glu = glu,
        .softcap = softcap,
};
#endif /* AXP_AVX512_KQUANTS */
