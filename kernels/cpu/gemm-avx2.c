/* SPDX-License-Identifier: MIT */
/* The AVX2 path (AVX2, FMA, F16C: Haswell and later, Zen). Same packed layout as AVX-512: a
 * 32-byte half of a group vector holds 4 inputs of 8 rows. Decode (one or two tokens) takes
 * both halves in one pass over k, so each 64-byte line is used whole when it arrives and the
 * stream is prefetched ahead as on the AVX-512 path; prefill tiles take one half and up to
 * MAX_T tokens (WIDE_T for Q6_K, whose unpacking is dear and whose tiles need few registers);
 * the 32-element block types' and IQ4_XS's take MAX_T tokens over both halves.
 * Without VNNI the 8-bit products go through vpmaddubsw (u8 x s8 pairs to s16) and
 * vpmaddwd; Q8_0's full-range weights take the sign trick (|w| times a with w's sign) so
 * the s16 pairs cannot saturate. The K-quants' sub-block scales go into vpmaddwd in place of
 * ones, so a superblock's dot is summed exactly in int32 before it meets a float. Integer
 * sums are exact in any order and the float operations of a (row, token) are the same
 * whatever the tile, so results do not depend on how tokens or rows were split.
 *
 * gemm-avxvnni.c compiles this file again with AVX-VNNI (VEX vpdpbusd on ymm: Alder Lake,
 * Meteor Lake, Zen 5): the 32-element block types then take their u8 weights (Q8_0's w + 128,
 * IQ4_NL's levels + 128, nibbles, quints) as they are, with the activations' offset as the starting
 * sum, as the AVX-512 path does; the K-quants sum each sub-block in int32 with vpdpbusd and
 * multiply it by its scale with vpmulld (IQ4_XS as IQ4_NL). Its integer sums are the ones
 * computed here, so the two builds give the same bits (test-kernels checks it). */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "cpu.h"

#define AI __attribute__((always_inline)) static inline
#ifdef AXP_AVX_VNNI
#define YMM_VNNI true
#else
#define YMM_VNNI false
#endif
#define MAX_T 4
#define UNROLL _Pragma("GCC unroll 16")
/* An integer accumulator kept as one chain of additions in a register. Integer vector adds
 * being associative, GCC turns a loop's chain of them into a tree whose leaves (the products
 * of a block or sub-block, a register each) it spills to the stack and loads again; a
 * prefill tile's 8 accumulators (4 tokens, two halves) leave it no registers for them. In
 * prefill tiles (T > 2) without VNNI, per core (bench-kernels --micro, the builds taking
 * turns, GFLOP/s): Q8_0 159 -> 181, Q4_0 210 -> 292, Q4_1 209 -> 279, Q5_0 191 -> 214,
 * Q5_1 219 -> 278, IQ4_NL 156 -> 167, IQ4_XS 151 -> 164, Q2_K 253 -> 260, Q3_K 220 -> 225,
 * Q4_K 218 -> 303, Q5_K 233 -> 255; Q6_K's dots the same (left out); the superblocks' sums
 * against their minimums or offsets (msum, corr) 2-4% more for Q2_K and Q6_K. With VNNI,
 * whose vpdpbusd chains GCC cannot reorder, Q6_K's vpmulld sums 244 -> 287 (Q4_K's 2-5%
 * slower: left out).
 * Two tokens (two requests decoded together) keep them for Q4_0, Q4_1, Q4_K and Q5_K: from
 * memory, plain AVX2, 27.2-27.3 -> 35.7-36.4 GB/s a core, 25.1-27.8 -> 38.7-39.0,
 * 25.5-27.0 -> 33.6-33.7 and 28.9-29.9 -> 30.8 (the other types the same or 5-7% more: left
 * as they were). One token: only IQ4_XS keeps one, 29.2-30.2 -> 30.7-31.1 GB/s a core from
 * memory, 41.0-42.1 -> 42.7-43.8 tokens/s in the engine (one thread). Tried there and not kept:
 * Q4_K (from L2 47 -> 60 GB/s, from memory the same, and prefill 3-5% slower: the code GCC
 * made for the tiles moved), Q4_0, Q4_1, Q6_K, Q2_K and IQ4_NL (from memory the same or
 * slower), Q5_0 and Q3_K (10% slower in the engine). */
#define CHAIN(v) __asm__("" : "+x"(v))

AI __m256i ld32(const void *p) {
        return _mm256_load_si256((const __m256i *) p);
}

AI __m128i ld16(const void *p) {
        return _mm_load_si128((const __m128i *) p);
}

AI __m128i ldu16(const void *p) {
        return _mm_loadu_si128((const __m128i *) p);
}

AI int32_t load_i32(const void *p) {
        int32_t v;
        memcpy(&v, p, 4);
        return v;
}

AI __m256i bcast4(const void *p) {
        return _mm256_set1_epi32(load_i32(p));
}

AI float hsum8(__m256 v) {
        __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        s = _mm_add_ss(s, _mm_movehdup_ps(s));
        return _mm_cvtss_f32(s);
}

AI int hsum8_i32(__m256i v) {
        __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
        s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
        return _mm_cvtsi128_si32(s);
}

/* 8 rows (one half of a group) to y */
AI void store_half(float *y, __m256 v, int h, int n_rows) {
        int n = n_rows - 8 * h;
        if (n >= 8) {
                _mm256_storeu_ps(y + 8 * h, v);
        } else if (n > 0) {
                float tmp[8];
                _mm256_storeu_ps(tmp, v);
                memcpy(y + 8 * h, tmp, (size_t) n * sizeof(float));
        }
}

/* A tile of T_ tokens from token t over half h0 (nh = 1) or both halves (h0 = 0, nh = 2); the
 * first of the group's tiles prefetches it, into the plan's level pf_lvl_ (pf, cpu.h), which
 * the dispatch macros below declare: read once a call (TILE_DISPATCH_HALVES_T), or a constant
 * in a copy of the tiles for each level (BLOCK_DISPATCH) */
#define TILE_AT(T_, fn, h0, nh, ...)                                                               \
        fn(g, act, t0 + t, (T_), y + t * ldy, ldy, n_rows, t == 0 && (h0) == 0 ? pf_lvl_ : PF_NONE, h0, nh, \
           ##__VA_ARGS__)

/* The tiles of one pass over half h0 (nh = 1) or both halves (h0 = 0, nh = 2): tmax tokens at a
 * time, then one of MAX_T where tmax's rest allows, then the last 3, 2 or 1. */
#define TILE_TOKENS(tmax, h0, nh, fn, ...)                                                         \
        do {                                                                                       \
                int t = 0;                                                                         \
                for (; t + (tmax) <= n_tok; t += (tmax))                                           \
                        TILE_AT(tmax, fn, h0, nh, ##__VA_ARGS__);                                  \
                if ((tmax) > MAX_T && t + MAX_T <= n_tok) {                                        \
                        TILE_AT(MAX_T, fn, h0, nh, ##__VA_ARGS__);                                 \
                        t += MAX_T;                                                                \
                }                                                                                  \
                switch (n_tok - t) {                                                               \
                case 3: TILE_AT(3, fn, h0, nh, ##__VA_ARGS__); break;                              \
                case 2: TILE_AT(2, fn, h0, nh, ##__VA_ARGS__); break;                              \
                case 1: TILE_AT(1, fn, h0, nh, ##__VA_ARGS__); break;                              \
                default: break;                                                                    \
                }                                                                                  \
        } while (0)

/* Up to MAX_T tokens (decode: one request, or several decoded together): both halves of the
 * group at once; otherwise tiles of MAX_T tokens over one half at a time. Four tokens over
 * both halves, against the halves one after the other, per core from memory (bench-kernels
 * --micro, the builds taking turns), GB/s: AVX-VNNI Q4_K 18.6-19.0 -> 24.2-24.4, Q6_K
 * 23.2-23.5 -> 27.6-27.9, Q5_K 18.9-19.0 -> 20.4; plain AVX2 Q4_K 17.5-17.8 -> 21.6-21.9,
 * Q5_K 17.5-17.8 -> 21.9-22.2, F32 26.6-27.6 -> 33.9-35.1, BF16 21.4-21.6 -> 28.4-29.1; Q2_K
 * and F16 4-10% more. Q2_K and Q3_K take one or two that way here and three or four in a
 * function of their own (GEMM_HALVES_FEW_APART): here, GCC's code for their one-token tiles
 * moved and lost 8-20% (AVX-VNNI Q2_K 31.4-31.6 -> 28.3-29.2); apart, one token measured the
 * same and four 3-15% faster than over one half at a time (AVX-VNNI Q3_K 14.7-15.6 ->
 * 16.8-17.1, Q2_K 12.5 -> 13.2-13.5). */
#define TILE_DISPATCH_HALVES(fn, ...) TILE_DISPATCH_HALVES_T(MAX_T, MAX_T, fn, ##__VA_ARGS__)
/* gemm_TYPE for Q2_K and Q3_K: one or two tokens over both halves inline, three or four in
 * gemm_TYPE_few */
#define GEMM_HALVES_FEW_APART(type)                                                                \
        static __attribute__((noinline)) void gemm_##type##_few(const uint8_t *g, const axp_act *act, int t0, \
                                                                int n_tok, float *y, long ldy, int n_rows) { \
                const int pf_lvl_ = pf_first();                                                    \
                TILE_TOKENS(MAX_T, 0, 2, type##_tile);                                             \
        }                                                                                          \
        static void gemm_##type(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy, \
                                int n_rows) {                                                      \
                if (n_tok > 2 && n_tok <= MAX_T && n_rows > 8)                                     \
                        gemm_##type##_few(g, act, t0, n_tok, y, ldy, n_rows);                      \
                else                                                                               \
                        TILE_DISPATCH_HALVES_T(MAX_T, 2, type##_tile);                             \
        }

/* The same with tiles of tmax tokens (MAX_T, or WIDE_T for the types whose weights cost many
 * instructions to unpack and whose tiles need few registers per token), both halves at once
 * up to `few` tokens. */
#define WIDE_T 8
/* F16's prefill tiles: a pair of inputs of a token costs one broadcast for its two FMAs, so 6
 * tokens' sums fit the 16 registers with the weights (BF16's, which unpack a token's pair into
 * two registers, spilled with 6 and keep MAX_T) */
#define PAIR_T 6
#define TILE_DISPATCH_HALVES_T(tmax, few, fn, ...)                                                 \
        do {                                                                                       \
                const int pf_lvl_ = pf_first();                                                    \
                HALVES_T_(tmax, few, fn, ##__VA_ARGS__);                                           \
        } while (0)
/* the same where pf_lvl_ is declared */
#define HALVES_T_(tmax, few, fn, ...)                                                              \
        do {                                                                                       \
                if (n_tok <= (few) && n_rows > 8)                                                  \
                        TILE_TOKENS(tmax, 0, 2, fn, ##__VA_ARGS__);                                \
                else                                                                               \
                        for (int h = 0; h < 2 && 8 * h < n_rows; h++)                              \
                                TILE_TOKENS(tmax, h, 1, fn, ##__VA_ARGS__);                        \
        } while (0)

/* Tiles of tmax tokens over both halves of the group (16 rows) where it has more than 8 rows;
 * a group of at most 8 rows as above; pf_lvl_ declared */
#define TILE_DISPATCH_WHOLE(tmax, fn, ...)                                                         \
        do {                                                                                       \
                if (n_rows > 8)                                                                    \
                        TILE_TOKENS(tmax, 0, 2, fn, ##__VA_ARGS__);                                \
                else                                                                               \
                        HALVES_T_(tmax, MAX_T, fn, ##__VA_ARGS__);                                 \
        } while (0)

/* The 32-element block types' prefill tiles: 4 tokens over both halves. With VNNI a (token,
 * weight vector) costs one vpdpbusd and, over one half, one broadcast of the token's 4
 * activations; a Zen 5 core loads at most two vectors a cycle (broadcasts included) and
 * retires two vpdpbusd, so tiles over one half were bound by their loads, and 8 tokens' sums
 * and accumulators do not fit 16 ymm registers. Over both halves each broadcast feeds two:
 * Q4_0 prefill 243-263 -> 267-302 GFLOP/s a core, Q8_0 242-268 -> 265-310 (bench-kernels
 * --micro, the builds taking turns), where 8 tokens over one half had taken them from about
 * 245 to 260. The compiler keeps part of the 8 accumulators on the stack, a load and a store
 * a block beside its 64 vpdpbusd. Without VNNI: Q4_0 and Q4_1 141-144 -> 155-163, the
 * others the same. */
/* Each level a copy of the tiles with the level a constant: with it read in the loop, plain
 * AVX2 Q8_0's decode streamed 5% less into L2 than before the plan had a level (bench-kernels
 * --micro q8_0, the builds taking turns). */
#define BLOCK_DISPATCH(fn, ...)                                                                    \
        do {                                                                                       \
                if (pf_first() == PF_L1) {                                                         \
                        const int pf_lvl_ = PF_L1;                                                 \
                        TILE_DISPATCH_WHOLE(MAX_T, fn, ##__VA_ARGS__);                             \
                } else {                                                                           \
                        const int pf_lvl_ = PF_L2;                                                 \
                        TILE_DISPATCH_WHOLE(MAX_T, fn, ##__VA_ARGS__);                             \
                }                                                                                  \
        } while (0)

/* Eight u8 (scales_u8) or s8 (scales_s8) scales, one per row of a half, as the 16-bit pairs
 * vpmaddwd multiplies: lane r of the result holds scale r in both of its 16-bit halves. */
AI __m128i dup8(const void *p) {
        const __m128i dup = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
        return _mm_shuffle_epi8(_mm_loadl_epi64((const __m128i *) p), dup);
}
AI __m256i scales_u8(const uint8_t *p) {
        return _mm256_cvtepu8_epi16(dup8(p));
}
AI __m256i scales_s8(const int8_t *p) {
        return _mm256_cvtepi8_epi16(dup8(p));
}
/* The even (odd = 0) or odd (odd = 1) bytes of 16 s8, as above */
AI __m256i scales_s8_pairs(const uint8_t *p, int odd) {
        const __m128i even = _mm_setr_epi8(0, 0, 2, 2, 4, 4, 6, 6, 8, 8, 10, 10, 12, 12, 14, 14);
        const __m128i odds = _mm_setr_epi8(1, 1, 3, 3, 5, 5, 7, 7, 9, 9, 11, 11, 13, 13, 15, 15);
        return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(ld16(p), odd ? odds : even));
}

/* The same eight scales as int32 lanes, for vpmulld */
AI __m256i scales_s8_i32(const uint8_t *p, int odd) {
        const __m128i even = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, -1, -1, -1, -1, -1, -1, -1, -1);
        const __m128i odds = _mm_setr_epi8(1, 3, 5, 7, 9, 11, 13, 15, -1, -1, -1, -1, -1, -1, -1, -1);
        return _mm256_cvtepi8_epi32(_mm_shuffle_epi8(ld16(p), odd ? odds : even));
}

/* acc + the int32 pair sums of a * b (s16): one vpdpwssd with VNNI. Neither form saturates,
 * so the two builds sum the same integers. */
AI __m256i madd_acc(__m256i acc, __m256i a, __m256i b) {
#ifdef AXP_AVX_VNNI
        return _mm256_dpwssd_avx_epi32(acc, a, b);
#else
        return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
#endif
}

/* Float weights ---------------------------------------------------------------------------- */

AI void f32_tile(const uint8_t *g, const axp_act *act, int t0, int T, float *y, long ldy,
                 int n_rows, int pf, int h0, int NH) {
        /* two accumulators per token and half (even and odd inputs), as in the AVX-512 path */
        const float *x[MAX_T];
        __m256 acc[MAX_T][2][2];
        UNROLL for (int t = 0; t < T; t++) {
                x[t] = (const float *) (act->data + (t0 + t) * act->stride);
                UNROLL for (int hh = 0; hh < NH; hh++)
                        acc[t][hh][0] = acc[t][hh][1] = _mm256_setzero_ps();
        }
        int64_t i = 0;
        const float *w = (const float *) g;
        const int sparse = pf_sparse(T);
        for (; i + 2 <= act->k; i += 2) {
                if (pf)
                        prefetch_stream(g, (size_t) i * 64, 128, 8192, sparse, pf);
                __m256 w0[2], w1[2];
                UNROLL for (int hh = 0; hh < NH; hh++) {
                        w0[hh] = _mm256_load_ps(w + i * 16 + 8 * (h0 + hh));
                        w1[hh] = _mm256_load_ps(w + i * 16 + 16 + 8 * (h0 + hh));
                }
                UNROLL for (int t = 0; t < T; t++) {
                        __m256 x0 = _mm256_set1_ps(x[t][i]), x1 = _mm256_set1_ps(x[t][i + 1]);
                        UNROLL for (int hh = 0; hh < NH; hh++) {
                                acc[t][hh][0] = _mm256_fmadd_ps(w0[hh], x0, acc[t][hh][0]);
                                acc[t][hh][1] = _mm256_fmadd_ps(w1[hh], x1, acc[t][hh][1]);
                        }
                }
        }
        if (i < act->k) {
                UNROLL for (int hh = 0; hh < NH; hh++) {
                        __m256 w0 = _mm256_load_ps(w + i * 16 + 8 * (h0 + hh));
                        UNROLL for (int t = 0; t < T; t++)
                                acc[t][hh][0] = _mm256_fmadd_ps(w0, _mm256_set1_ps(x[t][i]), acc[t][hh][0]);
                }
        }
        UNROLL for (int t = 0; t < T; t++)
                UNROLL for (int hh = 0; hh < NH; hh++)
                        store_half(y + t * ldy, _mm256_add_ps(acc[t][hh][0], acc[t][hh][1]), h0 + hh, n_rows);
}

/* F16: a half's 32 bytes of a pair (cpu.h) widen to 4 rows' pairs of floats twice, which one
 * 64-bit broadcast of the token's pair multiplies (a broadcast for two FMAs, not one). Lane 2r +
 * j adds row r's inputs of parity j; the lanes of a row are added at the end (vhaddps), the even
 * and odd sums of the AVX-512 path, so the paths give the same bits. */
AI __m256 bcast_pair(const float *x) {
        double d;
        memcpy(&d, x, 8);
        return _mm256_castpd_ps(_mm256_set1_pd(d));
}

/* one pair of inputs, i and i + 1 (a zero for the second with last) */
AI void f16_step(const uint8_t *q, __m256 acc[PAIR_T][2][2], const float *const *x, int64_t i, int T,
                 int h0, int NH, bool last) {
        __m256 w[2][2];
        UNROLL for (int hh = 0; hh < NH; hh++) {
                w[hh][0] = _mm256_cvtph_ps(ld16(q + 32 * (h0 + hh)));
                w[hh][1] = _mm256_cvtph_ps(ld16(q + 32 * (h0 + hh) + 16));
        }
        UNROLL for (int t = 0; t < T; t++) {
                float pair[2] = { x[t][i], 0.0f };
                __m256 xp = bcast_pair(last ? pair : x[t] + i);
                UNROLL for (int hh = 0; hh < NH; hh++) {
                        acc[t][hh][0] = _mm256_fmadd_ps(w[hh][0], xp, acc[t][hh][0]);
                        acc[t][hh][1] = _mm256_fmadd_ps(w[hh][1], xp, acc[t][hh][1]);
                }
        }
}

AI void f16_tile(const uint8_t *g, const axp_act *act, int t0, int T, float *y, long ldy,
                 int n_rows, int pf, int h0, int NH) {
        const float *x[PAIR_T];
        __m256 acc[PAIR_T][2][2]; /* token, half, rows 0-3 | 4-7 of the half */
        UNROLL for (int t = 0; t < T; t++) {
                x[t] = (const float *) (act->data + (t0 + t) * act->stride);
                UNROLL for (int hh = 0; hh < NH; hh++)
                        acc[t][hh][0] = acc[t][hh][1] = _mm256_setzero_ps();
        }
        const int64_t np = act->k / 2;
        const int sparse = pf_sparse(T);
        for (int64_t p = 0; p < np; p++) {
                if (pf)
                        prefetch_stream(g, (size_t) p * 64, 64, 4096, sparse, pf);
                f16_step(g + p * 64, acc, x, 2 * p, T, h0, NH, false);
        }
        if (act->k & 1) /* the last input, with a zero beside it as its weights have */
                f16_step(g + np * 64, acc, x, 2 * np, T, h0, NH, true);
        UNROLL for (int t = 0; t < T; t++)
                UNROLL for (int hh = 0; hh < NH; hh++) {
                        /* rows 0, 1, 4, 5, 2, 3, 6, 7, then in order */
                        __m256 h = _mm256_hadd_ps(acc[t][hh][0], acc[t][hh][1]);
                        h = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(h), _MM_SHUFFLE(3, 1, 2, 0)));
                        store_half(y + t * ldy, h, h0 + hh, n_rows);
                }
}

/* Prefill tiles of 2 tokens over both halves (a load an FMA, where 4 tokens over one half
 * loaded 1.25 when F16 took an input at a time) were faster on one 2048 x 2048 F16 matrix
 * (bench-kernels --micro) and slower on the model's (bench-kernels --types f16: 64-74 -> 62-66
 * GFLOP/s, the builds taking turns; its 8192-wide products' groups are 256 KB, read again by
 * every tile): not kept. */
static void gemm_f32(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                     int n_rows) {
        TILE_DISPATCH_HALVES(f32_tile);
}

static void gemm_f16(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                     int n_rows) {
        TILE_DISPATCH_HALVES_T(PAIR_T, MAX_T, f16_tile);
}

/* BF16: 32 bits of the weights or activations hold a pair of inputs (cpu.h); a shift and an AND
 * make the even and odd ones floats. Per token and half two sums, pair p to sum p % 2, the odd
 * product first: vdpbf16ps's order (cpu.h), so these give the AVX-512 path's bits. */
AI __m256 bf16_even(__m256i v) {
        return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

AI __m256 bf16_odd(__m256i v) {
        return _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32((int) 0xffff0000u)));
}

/* pair p of the inputs (at q), into each token's and half's sum j */
AI void bf16_step(const uint8_t *q, __m256 acc[MAX_T][2][2], const uint8_t *const *x, int64_t p, int j,
                  int T, int h0, int NH) {
        __m256 we[2], wo[2];
        UNROLL for (int hh = 0; hh < NH; hh++) {
                __m256i v = ld32(q + 32 * (h0 + hh));
                we[hh] = bf16_even(v);
                wo[hh] = bf16_odd(v);
        }
        UNROLL for (int t = 0; t < T; t++) {
                __m256i xp = bcast4(x[t] + p * 4);
                __m256 xe = bf16_even(xp), xo = bf16_odd(xp);
                UNROLL for (int hh = 0; hh < NH; hh++) {
                        __m256 a = _mm256_fmadd_ps(wo[hh], xo, acc[t][hh][j]);
                        acc[t][hh][j] = _mm256_fmadd_ps(we[hh], xe, a);
                }
        }
}

AI void bf16_tile(const uint8_t *g, const axp_act *act, int t0, int T, float *y, long ldy,
                  int n_rows, int pf, int h0, int NH) {
        const uint8_t *x[MAX_T];
        __m256 acc[MAX_T][2][2];
        UNROLL for (int t = 0; t < T; t++) {
                x[t] = act->data + (t0 + t) * act->stride;
                UNROLL for (int hh = 0; hh < NH; hh++)
                        acc[t][hh][0] = acc[t][hh][1] = _mm256_setzero_ps();
        }
        const int64_t np = bf16_pairs(act->k);
        const int sparse = pf_sparse(T);
        int64_t p = 0;
        for (; p + 2 <= np; p += 2) {
                if (pf)
                        prefetch_stream(g, (size_t) p * 64, 128, 4096, sparse, pf);
                bf16_step(g + p * 64, acc, x, p, 0, T, h0, NH);
                bf16_step(g + p * 64 + 64, acc, x, p + 1, 1, T, h0, NH);
        }
        if (p < np)
                bf16_step(g + p * 64, acc, x, p, 0, T, h0, NH);
        UNROLL for (int t = 0; t < T; t++)
                UNROLL for (int hh = 0; hh < NH; hh++)
                        store_half(y + t * ldy, _mm256_add_ps(acc[t][hh][0], acc[t][hh][1]), h0 + hh, n_rows);
}

static void gemm_bf16(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                      int n_rows) {
        TILE_DISPATCH_HALVES(bf16_tile);
}

/* Quads 2p and 2p + 1 of a half of a block of quints (Q5_K's sub-blocks, Q5_0, Q5_1; cpu.h):
 * five are one AND, quads 5 and 6 five operations, quad 7 eight */
AI void q5_quads(const uint8_t *q, int p, __m256i *lo, __m256i *hi) {
        const __m256i m1f = _mm256_set1_epi8(0x1f), m60 = _mm256_set1_epi8(0x60), m80 = _mm256_set1_epi8((char) 0x80);
        if (p < 2) {
                *lo = _mm256_and_si256(ld32(q + 128 * p), m1f);
                *hi = _mm256_and_si256(ld32(q + 128 * p + 64), m1f);
        } else if (p == 2) {
                *lo = _mm256_and_si256(ld32(q + 256), m1f);
                *hi = _mm256_or_si256(_mm256_srli_epi16(_mm256_andnot_si256(m1f, ld32(q)), 5),
                                      _mm256_srli_epi16(_mm256_and_si256(ld32(q + 64), m60), 2));
        } else {
                *lo = _mm256_or_si256(_mm256_srli_epi16(_mm256_andnot_si256(m1f, ld32(q + 128)), 5),
                                      _mm256_srli_epi16(_mm256_and_si256(ld32(q + 192), m60), 2));
                __m256i b34 = _mm256_or_si256(_mm256_srli_epi16(_mm256_and_si256(ld32(q + 64), m80), 4),
                                              _mm256_srli_epi16(_mm256_and_si256(ld32(q + 192), m80), 3));
                *hi = _mm256_or_si256(_mm256_srli_epi16(_mm256_andnot_si256(m1f, ld32(q + 256)), 5), b34);
        }
}

/* The 32-element block types ---------------------------------------------------------------- *
 * Q8_0 and IQ4_NL (its levels looked up with vpshufb) are signed bytes and take the sign
 * trick; Q4_0 and Q4_1 nibbles and Q5_0 and Q5_1 quints (0..31) are unsigned operands of
 * vpmaddubsw as they are. Q4_0 and Q5_0 add the activations' offset, Q4_1 and Q5_1 their
 * minimum times the activations' sum s. */
enum { M_Q8_0, M_Q8_0_SYM, M_Q4_0, M_IQ4_NL, M_Q4_1, M_Q5_0, M_Q5_1, M_Q5_1_BYTES };

AI void q8_0_tile(const uint8_t *g, const axp_act *act, int t0, int T, float *y, long ldy,
                  int n_rows, int pf, int h0, int NH, int mode) {
        int64_t nb = act->k / QK8_0;
        const int has_min = mode == M_Q4_1 || mode == M_Q5_1 || mode == M_Q5_1_BYTES;
        const int nibbles = mode == M_Q4_0 || mode == M_Q4_1 || mode == M_IQ4_NL;
        const int quints = mode == M_Q5_0 || mode == M_Q5_1;
        const pk32 L = pk32_layout(nibbles ? PK32_NIBBLES : quints ? PK32_QUINTS : PK32_BYTES, has_min);
        const int sparse = pf_sparse(T);
        const uint8_t *row[MAX_T];
        __m256 acc[MAX_T][2];
        UNROLL for (int t = 0; t < T; t++) {
                row[t] = act->data + (t0 + t) * act->stride;
                UNROLL for (int hh = 0; hh < NH; hh++)
                        acc[t][hh] = _mm256_setzero_ps();
        }
        const __m256i ones = _mm256_set1_epi16(1), m4 = _mm256_set1_epi8(0x0f);
        const __m256i flip = _mm256_set1_epi8((char) 0x80);
        const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *) axp_iq4nl_values));
#ifdef AXP_AVX_VNNI
        const __m256i lut128 = _mm256_xor_si256(lut, flip); /* the levels + 128, as u8 */
#endif
        for (int64_t b = 0; b < nb; b++) {
                const uint8_t *q = g + pk32_quants(L, b);
                if (pf)
                        prefetch_block(g, L, b, sparse, PF_SPARSE_EVERY_YMM, pf_blocks(L, false, YMM_VNNI), pf);
                __m256i isum[MAX_T][2];
#ifdef AXP_AVX_VNNI
                if (1) {
                        /* u8 x s8 summed in int32 by vpdpbusd: the offset of the unsigned
                         * weights (w + 128, nibbles w + 8, quints w + 16) is the starting value */
                        UNROLL for (int t = 0; t < T; t++) {
                                __m256i c = _mm256_set1_epi32(mode == M_Q4_0   ? act_q8_0_c4(row[t], b)
                                                              : mode == M_Q5_0 ? 2 * act_q8_0_c4(row[t], b)
                                                              : has_min        ? 0
                                                                               : act_q8_0_c8(row[t], b));
                                UNROLL for (int hh = 0; hh < NH; hh++)
                                        isum[t][hh] = c;
                        }
                        if (quints)
                                UNROLL for (int p = 0; p < 4; p++) {
                                        __m256i lo[2], hi[2];
                                        UNROLL for (int hh = 0; hh < NH; hh++)
                                                q5_quads(q + 32 * (h0 + hh), p, &lo[hh], &hi[hh]);
                                        UNROLL for (int t = 0; t < T; t++) {
                                                const int8_t *a = act_q8_0_qs(row[t], b) + 8 * p;
                                                __m256i al = bcast4(a), ah = bcast4(a + 4);
                                                UNROLL for (int hh = 0; hh < NH; hh++) {
                                                        isum[t][hh] = _mm256_dpbusd_avx_epi32(isum[t][hh], lo[hh], al);
                                                        isum[t][hh] = _mm256_dpbusd_avx_epi32(isum[t][hh], hi[hh], ah);
                                                }
                                        }
                                }
                        else
                                UNROLL for (int j = 0; j < 8; j++) {
                                        __m256i w[2];
                                        UNROLL for (int hh = 0; hh < NH; hh++) {
                                                if (nibbles) {
                                                        __m256i v = ld32(q + (j / 2) * 64 + 32 * (h0 + hh));
                                                        w[hh] = _mm256_and_si256((j & 1) ? _mm256_srli_epi16(v, 4) : v, m4);
                                                        if (mode == M_IQ4_NL)
                                                                w[hh] = _mm256_shuffle_epi8(lut128, w[hh]);
                                                } else
                                                        w[hh] = ld32(q + j * 64 + 32 * (h0 + hh));
                                        }
                                        /* nibble vector p holds inputs 8p..8p+3 (low) and 8p+4..8p+7 (high) */
                                        int off = nibbles ? 8 * (j / 2) + 4 * (j & 1) : 4 * j;
                                        UNROLL for (int t = 0; t < T; t++) {
                                                __m256i av = bcast4(act_q8_0_qs(row[t], b) + off);
                                                UNROLL for (int hh = 0; hh < NH; hh++)
                                                        isum[t][hh] = _mm256_dpbusd_avx_epi32(isum[t][hh], w[hh], av);
                                        }
                                }
                } else
#endif
                if (mode == M_Q4_0 || mode == M_Q4_1) {
                        /* u8 nibbles x s8: 8 pair sums of at most 2*15*127 fit s16 */
                        __m256i s16[MAX_T][2];
                        UNROLL for (int t = 0; t < T; t++)
                                UNROLL for (int hh = 0; hh < NH; hh++)
                                        s16[t][hh] = _mm256_setzero_si256();
                        UNROLL for (int p = 0; p < 4; p++) {
                                __m256i lo[2], hi[2];
                                UNROLL for (int hh = 0; hh < NH; hh++) {
                                        __m256i v = ld32(q + p * 64 + 32 * (h0 + hh));
                                        lo[hh] = _mm256_and_si256(v, m4);
                                        hi[hh] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                                }
                                UNROLL for (int t = 0; t < T; t++) {
                                        const int8_t *a = act_q8_0_qs(row[t], b) + 8 * p;
                                        __m256i al = bcast4(a), ah = bcast4(a + 4);
                                        UNROLL for (int hh = 0; hh < NH; hh++) {
                                                __m256i l16 = _mm256_maddubs_epi16(lo[hh], al);
                                                __m256i h16 = _mm256_maddubs_epi16(hi[hh], ah);
                                                s16[t][hh] = _mm256_add_epi16(s16[t][hh], _mm256_add_epi16(l16, h16));
                                                if (T > 1)
                                                        CHAIN(s16[t][hh]);
                                        }
                                }
                        }
                        UNROLL for (int t = 0; t < T; t++)
                                UNROLL for (int hh = 0; hh < NH; hh++) {
                                        isum[t][hh] = _mm256_madd_epi16(s16[t][hh], ones);
                                        if (mode == M_Q4_0)
                                                isum[t][hh] = _mm256_add_epi32(
                                                        isum[t][hh], _mm256_set1_epi32(act_q8_0_c4(row[t], b)));
                                }
                } else if (quints || mode == M_Q5_1_BYTES) {
                        /* u8 0..31 x s8: four pair sums of at most 2*31*127 fit s16 */
                        UNROLL for (int t = 0; t < T; t++) {
                                __m256i c = _mm256_set1_epi32(mode == M_Q5_0 ? 2 * act_q8_0_c4(row[t], b) : 0);
                                UNROLL for (int hh = 0; hh < NH; hh++)
                                        isum[t][hh] = c;
                        }
                        UNROLL for (int p0 = 0; p0 < 4; p0 += 2) {
                                __m256i s16[MAX_T][2];
                                UNROLL for (int p = p0; p < p0 + 2; p++) {
                                        __m256i lo[2], hi[2];
                                        UNROLL for (int hh = 0; hh < NH; hh++) {
                                                if (quints) {
                                                        q5_quads(q + 32 * (h0 + hh), p, &lo[hh], &hi[hh]);
                                                        continue;
                                                }
                                                lo[hh] = ld32(q + 2 * p * 64 + 32 * (h0 + hh));
                                                hi[hh] = ld32(q + (2 * p + 1) * 64 + 32 * (h0 + hh));
                                        }
                                        UNROLL for (int t = 0; t < T; t++) {
                                                const int8_t *a = act_q8_0_qs(row[t], b) + 8 * p;
                                                __m256i al = bcast4(a), ah = bcast4(a + 4);
                                                UNROLL for (int hh = 0; hh < NH; hh++) {
                                                        __m256i p16 = _mm256_add_epi16(_mm256_maddubs_epi16(lo[hh], al),
                                                                                       _mm256_maddubs_epi16(hi[hh], ah));
                                                        s16[t][hh] = p == p0 ? p16 : _mm256_add_epi16(s16[t][hh], p16);
                                                        if (T > 2)
                                                                CHAIN(s16[t][hh]);
                                                }
                                        }
                                }
                                UNROLL for (int t = 0; t < T; t++)
                                        UNROLL for (int hh = 0; hh < NH; hh++)
                                                isum[t][hh] = _mm256_add_epi32(isum[t][hh],
                                                                               _mm256_madd_epi16(s16[t][hh], ones));
                        }
                } else {
                        /* signed bytes: |w| times a with w's sign; one token whose weights are
                         * never -128 (IQ4_NL's levels, Q8_0 with no_min8) takes |a| times w
                         * with a's sign, one operation fewer for both halves */
                        const int sym = T == 1 && (mode == M_Q8_0_SYM || mode == M_IQ4_NL);
                        UNROLL for (int t = 0; t < T; t++)
                                UNROLL for (int hh = 0; hh < NH; hh++)
                                        isum[t][hh] = _mm256_setzero_si256();
                        UNROLL for (int j = 0; j < 8; j++) {
                                __m256i ws[2], aw[2];
                                UNROLL for (int hh = 0; hh < NH; hh++) {
                                        if (mode == M_IQ4_NL) {
                                                __m256i v = ld32(q + (j / 2) * 64 + 32 * (h0 + hh));
                                                __m256i n = (j & 1) ? _mm256_srli_epi16(v, 4) : v;
                                                ws[hh] = _mm256_shuffle_epi8(lut, _mm256_and_si256(n, m4));
                                        } else
                                                ws[hh] = _mm256_xor_si256(ld32(q + j * 64 + 32 * (h0 + hh)), flip);
                                        if (!sym)
                                                aw[hh] = _mm256_sign_epi8(ws[hh], ws[hh]);
                                }
                                UNROLL for (int t = 0; t < T; t++) {
                                        __m256i av = bcast4(act_q8_0_qs(row[t], b) + 4 * j);
                                        if (sym) {
                                                __m256i aa = _mm256_sign_epi8(av, av);
                                                UNROLL for (int hh = 0; hh < NH; hh++) {
                                                        __m256i p16 = _mm256_maddubs_epi16(aa, _mm256_sign_epi8(ws[hh], av));
                                                        isum[t][hh] = madd_acc(isum[t][hh], p16, ones);
                                                }
                                                continue;
                                        }
                                        UNROLL for (int hh = 0; hh < NH; hh++) {
                                                __m256i sa = _mm256_sign_epi8(av, ws[hh]);
                                                __m256i p16 = _mm256_maddubs_epi16(aw[hh], sa);
                                                isum[t][hh] = madd_acc(isum[t][hh], p16, ones);
                                                if (T > 2)
                                                        CHAIN(isum[t][hh]);
                                        }
                                }
                        }
                }
                UNROLL for (int hh = 0; hh < NH; hh++) {
                        const uint16_t *sc = (const uint16_t *) (g + pk32_scales(L, b));
                        __m256 dw = _mm256_cvtph_ps(ldu16(sc + 8 * (h0 + hh)));
                        UNROLL for (int t = 0; t < T; t++)
                                acc[t][hh] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t][hh]),
                                                             _mm256_mul_ps(dw, _mm256_set1_ps(act_q8_0_d(row[t], b))),
                                                             acc[t][hh]);
                        if (has_min) {
                                const uint16_t *mn = (const uint16_t *) (g + pk32_mins(L, b));
                                __m256 mw = _mm256_cvtph_ps(ldu16(mn + 8 * (h0 + hh)));
                                UNROLL for (int t = 0; t < T; t++)
                                        acc[t][hh] = _mm256_fmadd_ps(mw, _mm256_set1_ps(act_q8_0_s(row[t], b)),
                                                                     acc[t][hh]);
                        }
                }
        }
        UNROLL for (int t = 0; t < T; t++)
                UNROLL for (int hh = 0; hh < NH; hh++)
                        store_half(y + t * ldy, acc[t][hh], h0 + hh, n_rows);
}

static void gemm_q8_0(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                      int n_rows) {
        BLOCK_DISPATCH(q8_0_tile, M_Q8_0);
}

#ifndef AXP_AVX_VNNI
/* Prepared Q8_0 with no quant of -128 (axp_packed.no_min8) */
static void gemm_q8_0_sym(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                          int n_rows) {
        BLOCK_DISPATCH(q8_0_tile, M_Q8_0_SYM);
}
#endif

static void gemm_q4_0(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                      int n_rows) {
        BLOCK_DISPATCH(q8_0_tile, M_Q4_0);
}

static void gemm_iq4_nl(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                        int n_rows) {
        BLOCK_DISPATCH(q8_0_tile, M_IQ4_NL);
}

static void gemm_q4_1(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                      int n_rows) {
        BLOCK_DISPATCH(q8_0_tile, M_Q4_1);
}

/* Prefill of Q5_0 and Q5_1 from bytes. The quints' unpacking in a tile repeats for every 4
 * tokens: it took AVX-VNNI's Q5_0 prefill from 363-367 GFLOP/s a core (Q8_0's layout, one
 * vpdpbusd a vector) to 284-302, and plain AVX2's Q5_1 from 216 to 192-200 (bytes 0..31, one
 * run with the minimums). So a call of at least QUINTS_AS_BYTES_MIN tokens (prefill takes 64
 * and more a call) unpacks the group once into those byte layouts and takes their tile, whose
 * integer sums are the quint tile's: the same bits. Q5_0 without VNNI keeps its quints, whose
 * vpmaddubsw beats Q8_0's sign trick; on AVX-512 the tiles are as fast either way. */
#define QUINTS_AS_BYTES_MIN 8

/* a group of nb blocks of quints (layout Q) as bytes (layout B, the same heads), plus add */
static void quints_as_bytes(const uint8_t *g, pk32 Q, pk32 B, int64_t nb, uint8_t add, uint8_t *out) {
        const __m256i c = _mm256_set1_epi8((char) add);
        for (int64_t b = 0; b < nb; b++) {
                if (pk32_in_run(Q, b) == 0) /* a run's head (scales, minimums), whole even in a last run */
                        memcpy(out + pk32_scales(B, b), g + pk32_scales(Q, b), Q.head);
                const uint8_t *q = g + pk32_quants(Q, b);
                uint8_t *o = out + pk32_quants(B, b);
                UNROLL for (int h = 0; h < 2; h++)
                        UNROLL for (int p = 0; p < 4; p++) {
                                __m256i lo, hi;
                                q5_quads(q + 32 * h, p, &lo, &hi);
                                _mm256_store_si256((__m256i *) (o + 2 * p * 64 + 32 * h), _mm256_add_epi8(lo, c));
                                _mm256_store_si256((__m256i *) (o + (2 * p + 1) * 64 + 32 * h), _mm256_add_epi8(hi, c));
                        }
        }
}

static void gemm_q5_0(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                      int n_rows) {
#ifdef AXP_AVX_VNNI
        if (n_tok >= QUINTS_AS_BYTES_MIN) {
                /* Q8_0's w + 128 = q + 112 */
                const int64_t nb = act->k / QK5_0;
                uint8_t *b = axp_cpu_scratch(AXP_SCRATCH_UNPACK, axp_pack_group_bytes(AXP_TYPE_Q8_0, act->k));
                quints_as_bytes(g, pk32_of(AXP_TYPE_Q5_0), pk32_of(AXP_TYPE_Q8_0), nb, 112, b);
                gemm_q8_0(b, act, t0, n_tok, y, ldy, n_rows);
                return;
        }
#endif
        BLOCK_DISPATCH(q8_0_tile, M_Q5_0);
}

static void gemm_q5_1_bytes(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                            int n_rows) {
        BLOCK_DISPATCH(q8_0_tile, M_Q5_1_BYTES);
}

static void gemm_q5_1(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                      int n_rows) {
        if (n_tok >= QUINTS_AS_BYTES_MIN) {
                const int64_t nb = act->k / QK5_1;
                const pk32 B = pk32_layout(PK32_BYTES, true);
                uint8_t *b = axp_cpu_scratch(AXP_SCRATCH_UNPACK, pk32_bytes(B, nb));
                quints_as_bytes(g, pk32_of(AXP_TYPE_Q5_1), B, nb, 0, b);
                gemm_q5_1_bytes(b, act, t0, n_tok, y, ldy, n_rows);
                return;
        }
        BLOCK_DISPATCH(q8_0_tile, M_Q5_1);
}

/* Q4_K --------------------------------------------------------------------------------------- */

/* Q5_K (high) as Q4_K with five-bit quads (q5_quads). A sub-block's s16 pair sums (at most 8 of
 * 2 * 15 * 127 for Q4_K, 4 of 2 * 31 * 127 for Q5_K) are widened by vpmaddwd with the
 * sub-block's scale, so the superblock's dot sum_j sc_j dot_j (at most 8 * 63 * 32 * 31 * 127)
 * is exact in int32. With VNNI each sub-block's dot is summed by vpdpbusd and multiplied by
 * its scale with vpmulld: Q5_K's in two chains (low and high quads); Q4_K's in one, both
 * nibbles taken at 16 times their value (the high ones in place by one AND-NOT, the low ones
 * shifted up; at most 240, still u8), so the superblock's sum is 16 times the dot (at most
 * 16 * 8 * 63 * 32 * 15 * 127, below 2^31) and one arithmetic shift gives it back exactly.
 * One chain a token frees registers that two chains and their side-by-side vpdpwssd (the form
 * before) took: the ymm moves to and from the stack in gemm_q4_K fell from 142 to 80 (objdump),
 * and a Q4_K_M file's prefill on one Zen 5 core went from 106-109 to 112-118 tokens/s. */
AI void q4_K_tile(const uint8_t *g, const axp_act *act, int t0, int T, float *y, long ldy,
                  int n_rows, int pf, int h0, int NH, int high) {
        int64_t k = act->k, ns = k / QK_K;
        const size_t sb_bytes = high ? PK_Q5_K_SB : PK_Q4_K_SB;
        const uint8_t *row[MAX_T];
        __m256 acc[MAX_T][2];
        UNROLL for (int t = 0; t < T; t++) {
                row[t] = act->data + (t0 + t) * act->stride;
                UNROLL for (int hh = 0; hh < NH; hh++)
                        acc[t][hh] = _mm256_setzero_ps();
        }
        const __m256i m4 = _mm256_set1_epi8(0x0f);
        for (int64_t s = 0; s < ns; s++) {
                const uint8_t *sb = g + s * sb_bytes;
                __m256i msum[MAX_T][2], isum[MAX_T][2];
                UNROLL for (int t = 0; t < T; t++)
                        UNROLL for (int hh = 0; hh < NH; hh++)
                                msum[t][hh] = isum[t][hh] = _mm256_setzero_si256();
                UNROLL for (int p = 0; p < 4; p++) {
                        __m256i m16[2];
                        UNROLL for (int hh = 0; hh < NH; hh++)
                                m16[hh] = _mm256_cvtepu8_epi16(ld16(sb + 192 + 32 * p + 16 * (h0 + hh)));
                        UNROLL for (int t = 0; t < T; t++) {
                                __m256i bs = bcast4(act_q8_K_bs32(row[t], s) + 2 * p);
                                UNROLL for (int hh = 0; hh < NH; hh++) {
                                        msum[t][hh] = madd_acc(msum[t][hh], m16[hh], bs);
                                        if (T > 2)
                                                CHAIN(msum[t][hh]);
                                }
                        }
                }
                for (int j = 0; j < 8; j++) {
                        if (pf)
                                prefetch_kstep(g, sb + j * (high ? 360 : 320), high ? 360 : 320, high ? 6 : 5, pf_sparse(T), pf);
                        const uint8_t *q = sb + PK_Q4_K_HEAD + j * (high ? 320 : 256);
                        __m256i sc16[2]; /* scales as s16 pairs (int32 with VNNI) */
                        UNROLL for (int hh = 0; hh < NH; hh++) {
#ifdef AXP_AVX_VNNI
                                sc16[hh] = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *) (sb + 64 + 16 * j + 8 * (h0 + hh))));
#else
                                sc16[hh] = scales_u8(sb + 64 + 16 * j + 8 * (h0 + hh));
#endif
                        }
                        /* s16 pair sums, or with VNNI the sub-block's int32 dot */
                        __m256i s16[MAX_T][2];
#ifdef AXP_AVX_VNNI
                        __m256i s16b[MAX_T][2];
#endif
                        UNROLL for (int p = 0; p < 4; p++) {
                                __m256i lo[2], hi[2];
                                UNROLL for (int hh = 0; hh < NH; hh++) {
                                        if (high) {
                                                q5_quads(q + 32 * (h0 + hh), p, &lo[hh], &hi[hh]);
                                                continue;
                                        }
                                        __m256i v = ld32(q + p * 64 + 32 * (h0 + hh));
#ifdef AXP_AVX_VNNI
                                        /* both nibbles at 16 times their value */
                                        lo[hh] = _mm256_andnot_si256(m4, _mm256_slli_epi16(v, 4));
                                        hi[hh] = _mm256_andnot_si256(m4, v);
#else
                                        lo[hh] = _mm256_and_si256(v, m4);
                                        hi[hh] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
#endif
                                }
                                long off = j * 32 + 8 * p;
                                UNROLL for (int t = 0; t < T; t++) {
                                        const int8_t *a = act_q8_K_qs(row[t], s) + off;
                                        __m256i al = bcast4(a), ah = bcast4(a + 4);
                                        UNROLL for (int hh = 0; hh < NH; hh++) {
#ifdef AXP_AVX_VNNI
                                                s16[t][hh] = _mm256_dpbusd_avx_epi32(p ? s16[t][hh] : _mm256_setzero_si256(), lo[hh], al);
                                                if (high) /* two chains (low and high quads) */
                                                        s16b[t][hh] = _mm256_dpbusd_avx_epi32(p ? s16b[t][hh] : _mm256_setzero_si256(), hi[hh], ah);
                                                else
                                                        s16[t][hh] = _mm256_dpbusd_avx_epi32(s16[t][hh], hi[hh], ah);
                                                if (p == 3)
                                                        isum[t][hh] = _mm256_add_epi32(
                                                                isum[t][hh], _mm256_mullo_epi32(high ? _mm256_add_epi32(s16[t][hh], s16b[t][hh]) : s16[t][hh], sc16[hh]));
#else
                                                __m256i p16 = _mm256_add_epi16(_mm256_maddubs_epi16(lo[hh], al),
                                                                               _mm256_maddubs_epi16(hi[hh], ah));
                                                s16[t][hh] = (p == 0 || (high && p == 2)) ? p16 : _mm256_add_epi16(s16[t][hh], p16);
                                                if (T > 1)
                                                        CHAIN(s16[t][hh]);
                                                if (p == 3 || (high && p == 1)) {
                                                        isum[t][hh] = madd_acc(isum[t][hh], s16[t][hh], sc16[hh]);
                                                        if (T > 1)
                                                                CHAIN(isum[t][hh]);
                                                }
#endif
                                        }
                                }
                        }
                }
                UNROLL for (int hh = 0; hh < NH; hh++) {
                        __m256 d = _mm256_cvtph_ps(ldu16(sb + 16 * (h0 + hh)));
                        __m256 dmin = _mm256_cvtph_ps(ldu16(sb + 32 + 16 * (h0 + hh)));
                        UNROLL for (int t = 0; t < T; t++) {
                                __m256 mins = _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(msum[t][hh]));
#ifdef AXP_AVX_VNNI
                                if (!high) /* 16 times the dot, exactly divisible */
                                        isum[t][hh] = _mm256_srai_epi32(isum[t][hh], 4);
#endif
                                __m256 v = _mm256_fmsub_ps(d, _mm256_cvtepi32_ps(isum[t][hh]), mins);
                                acc[t][hh] = _mm256_fmadd_ps(_mm256_set1_ps(act_q8_K_d(row[t], s)), v, acc[t][hh]);
                        }
                }
        }
        UNROLL for (int t = 0; t < T; t++)
                UNROLL for (int hh = 0; hh < NH; hh++)
                        store_half(y + t * ldy, acc[t][hh], h0 + hh, n_rows);
}

static void gemm_q4_K(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                      int n_rows) {
        TILE_DISPATCH_HALVES(q4_K_tile, 0);
}

static void gemm_q5_K(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                      int n_rows) {
        TILE_DISPATCH_HALVES(q4_K_tile, 1);
}

/* Q6_K --------------------------------------------------------------------------------------- */

/* Q6_K: unsigned 6-bit weights (q + 32) per sub-block of 16; two of their pair sums fit s16
 * and are widened by vpmaddwd with the sub-block's signed scale, and the offset goes with the
 * activation sums: the superblock's sum_j sc_j (S_j - 32 A_j) is exact in int32. With VNNI
 * S_j is a vpdpbusd sum, times sc_j by vpmulld. */
AI void q6_K_tile(const uint8_t *g, const axp_act *act, int t0, int T, float *y, long ldy,
                  int n_rows, int pf, int h0, int NH) {
        int64_t k = act->k, ns = k / QK_K;
        const uint8_t *row[WIDE_T];
        __m256 acc[WIDE_T][2];
        UNROLL for (int t = 0; t < T; t++) {
                row[t] = act->data + (t0 + t) * act->stride;
                UNROLL for (int hh = 0; hh < NH; hh++)
                        acc[t][hh] = _mm256_setzero_ps();
        }
        const __m256i m3f = _mm256_set1_epi8(0x3f);
        for (int64_t s = 0; s < ns; s++) {
                const uint8_t *sb = g + s * PK_Q6_K_SB;
                __m256i corr[WIDE_T][2], isum[WIDE_T][2];
                UNROLL for (int t = 0; t < T; t++)
                        UNROLL for (int hh = 0; hh < NH; hh++)
                                corr[t][hh] = isum[t][hh] = _mm256_setzero_si256();
                UNROLL for (int p = 0; p < 8; p++) {
                        __m256i sc16[2];
                        UNROLL for (int hh = 0; hh < NH; hh++)
                                sc16[hh] = _mm256_cvtepi8_epi16(ld16(sb + 32 + 32 * p + 16 * (h0 + hh)));
                        UNROLL for (int t = 0; t < T; t++) {
                                __m256i bs = bcast4(act_q8_K_bs16(row[t], s) + 2 * p);
                                UNROLL for (int hh = 0; hh < NH; hh++) {
                                        corr[t][hh] = madd_acc(corr[t][hh], sc16[hh], bs);
                                        if (T > 2)
                                                CHAIN(corr[t][hh]);
                                }
                        }
                }
                for (int j = 0; j < 16; j++) {
                        if (pf)
                                prefetch_kstep(g, sb + j * 212, 212, 4, pf_sparse(T), pf);
                        const uint8_t *q = sb + PK_Q6_K_HEAD + j * 192;
                        __m256i w[2][4], scj[2];
                        UNROLL for (int hh = 0; hh < NH; hh++) {
#ifdef AXP_AVX_VNNI
                                scj[hh] = scales_s8_i32(sb + 32 + 32 * (j / 2) + 16 * (h0 + hh), j & 1);
#else
                                scj[hh] = scales_s8_pairs(sb + 32 + 32 * (j / 2) + 16 * (h0 + hh), j & 1);
#endif
                                /* three quads in the low six bits of their vectors, the
                                 * fourth from their top bits (cpu.h): eleven operations */
                                __m256i v0 = ld32(q + 32 * (h0 + hh));
                                __m256i v1 = ld32(q + 64 + 32 * (h0 + hh));
                                __m256i v2 = ld32(q + 128 + 32 * (h0 + hh));
                                w[hh][0] = _mm256_and_si256(v0, m3f);
                                w[hh][1] = _mm256_and_si256(v1, m3f);
                                w[hh][2] = _mm256_and_si256(v2, m3f);
                                __m256i e01 = _mm256_or_si256(_mm256_srli_epi16(_mm256_andnot_si256(m3f, v0), 4),
                                                              _mm256_srli_epi16(_mm256_andnot_si256(m3f, v1), 2));
                                w[hh][3] = _mm256_srli_epi16(_mm256_or_si256(e01, _mm256_andnot_si256(m3f, v2)), 2);
                        }
                        long off = j * 16;
                        UNROLL for (int t = 0; t < T; t++) {
                                /* u8 6-bit x s8: a pair sum is at most 2*63*127, two of them fit s16 */
                                const int8_t *a = act_q8_K_qs(row[t], s) + off;
                                __m256i a0 = bcast4(a), a1 = bcast4(a + 4), a2 = bcast4(a + 8), a3 = bcast4(a + 12);
                                UNROLL for (int hh = 0; hh < NH; hh++) {
#ifdef AXP_AVX_VNNI
                                        /* the sub-block's int32 dot times its scale */
                                        __m256i d = _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), w[hh][0], a0);
                                        d = _mm256_dpbusd_avx_epi32(d, w[hh][1], a1);
                                        d = _mm256_dpbusd_avx_epi32(d, w[hh][2], a2);
                                        d = _mm256_dpbusd_avx_epi32(d, w[hh][3], a3);
                                        isum[t][hh] = _mm256_add_epi32(isum[t][hh], _mm256_mullo_epi32(d, scj[hh]));
                                        if (T > 2)
                                                CHAIN(isum[t][hh]);
#else
                                        __m256i p01 = _mm256_add_epi16(_mm256_maddubs_epi16(w[hh][0], a0),
                                                                       _mm256_maddubs_epi16(w[hh][1], a1));
                                        __m256i p23 = _mm256_add_epi16(_mm256_maddubs_epi16(w[hh][2], a2),
                                                                       _mm256_maddubs_epi16(w[hh][3], a3));
                                        isum[t][hh] = _mm256_add_epi32(
                                                isum[t][hh], _mm256_add_epi32(_mm256_madd_epi16(p01, scj[hh]),
                                                                              _mm256_madd_epi16(p23, scj[hh])));
#endif
                                }
                        }
                }
                UNROLL for (int hh = 0; hh < NH; hh++) {
                        __m256 d = _mm256_cvtph_ps(ldu16(sb + 16 * (h0 + hh)));
                        UNROLL for (int t = 0; t < T; t++) {
                                __m256i v = _mm256_sub_epi32(isum[t][hh], _mm256_slli_epi32(corr[t][hh], 5));
                                __m256 dd = _mm256_mul_ps(d, _mm256_set1_ps(act_q8_K_d(row[t], s)));
                                acc[t][hh] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(v), acc[t][hh]);
                        }
                }
        }
        UNROLL for (int t = 0; t < T; t++)
                UNROLL for (int hh = 0; hh < NH; hh++)
                        store_half(y + t * ldy, acc[t][hh], h0 + hh, n_rows);
}

static void gemm_q6_K(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                      int n_rows) {
        TILE_DISPATCH_HALVES_T(WIDE_T, MAX_T, q6_K_tile);
}

/* Q2_K, Q3_K, IQ4_XS ------------------------------------------------------------------------ */

/* Sixteen inputs of a sub-block of 16 (Q2_K, Q3_K): four u8 weight vectors of inputs 4i..4i+3
 * times the activations' broadcast quads, summed in int32 from c: four vpdpbusd with VNNI,
 * else vpmaddubsw pair sums added in s16 (four pair sums of small weights fit) and widened. */
AI __m256i dot16x4(const __m256i *w, __m256i a0, __m256i a1, __m256i a2, __m256i a3, __m256i c) {
#ifdef AXP_AVX_VNNI
        c = _mm256_dpbusd_avx_epi32(c, w[0], a0);
        c = _mm256_dpbusd_avx_epi32(c, w[1], a1);
        c = _mm256_dpbusd_avx_epi32(c, w[2], a2);
        return _mm256_dpbusd_avx_epi32(c, w[3], a3);
#else
        __m256i p16 = _mm256_add_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(w[0], a0), _mm256_maddubs_epi16(w[1], a1)),
                                       _mm256_add_epi16(_mm256_maddubs_epi16(w[2], a2), _mm256_maddubs_epi16(w[3], a3)));
        return _mm256_add_epi32(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)), c);
#endif
}

/* acc + the dots of sub-blocks 2p and 2p + 1 (int32 lanes whose values fit s16; the second
 * 2^(16 - sh) times its value, its low bits 0) side by side times their scale pair sc (lane
 * r: the two rows' scales as s16) */
AI __m256i dot_pair_acc(__m256i acc, __m256i d0, __m256i d1, __m256i sc, int sh) {
        return madd_acc(acc, _mm256_blend_epi16(d0, _mm256_slli_epi32(d1, sh), 0xaa), sc);
}

#ifndef AXP_AVX_VNNI
/* The same as s16 pair sums, not yet widened */
AI __m256i sum16x4_s16(const __m256i *w, __m256i a0, __m256i a1, __m256i a2, __m256i a3) {
        return _mm256_add_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(w[0], a0), _mm256_maddubs_epi16(w[1], a1)),
                                _mm256_add_epi16(_mm256_maddubs_epi16(w[2], a2), _mm256_maddubs_epi16(w[3], a3)));
}
#endif

/* A sub-block of 16's dot from quads 0 and 2 as they are and 1 and 3 at 4 times their value
 * (Q2_K's crumbs masked in place: pair sums of at most 2*12*127, two of them fit s16 and are
 * exactly divisible by 4), as int32 lanes */
AI __m256i crumb_dot(const __m256i *w, __m256i a0, __m256i a1, __m256i a2, __m256i a3) {
        __m256i p02 = _mm256_add_epi16(_mm256_maddubs_epi16(w[0], a0), _mm256_maddubs_epi16(w[2], a2));
        __m256i p13 = _mm256_add_epi16(_mm256_maddubs_epi16(w[1], a1), _mm256_maddubs_epi16(w[3], a3));
        return _mm256_madd_epi16(_mm256_add_epi16(p02, _mm256_srai_epi16(p13, 2)), _mm256_set1_epi16(1));
}

/* Q2_K, Q3_K: a superblock's sum_j sc_j dot_j over its sub-blocks of 16 is exact in int32 and
 * meets a float once. Each dot_j fits s16, so the int32 dots of sub-blocks 2p and 2p + 1 go
 * side by side into one vpmaddwd (vpdpwssd with VNNI) with the scale pair: with VNNI always,
 * without it for Q2_K's decode. Otherwise (Q3_K, and Q2_K's prefill tiles without VNNI) the
 * s16 pair sums go into vpmaddwd with the scale in place of ones. Every form sums the same
 * integers. */

/* Q2_K: crumbs 0..3 x s8 (pair sums of at most 2*3*127, four of them fit s16) per sub-block of
 * 16, times the 4-bit scale; the mins against the activation sums of 16. As every product of
 * this path, Q2_K, Q3_K and IQ4_XS take both 8-row halves of a group in one pass for one or
 * two tokens (NH = 2), so each 64-byte line is read once, and prefetch the stream ahead. */
AI void q2_K_tile(const uint8_t *g, const axp_act *act, int t0, int T, float *y, long ldy,
                  int n_rows, int pf, int h0, int NH) {
        int64_t k = act->k, ns = k / QK_K;
        const uint8_t *row[MAX_T];
        __m256 acc[MAX_T][2];
        UNROLL for (int t = 0; t < T; t++) {
                row[t] = act->data + (t0 + t) * act->stride;
                UNROLL for (int hh = 0; hh < NH; hh++)
                        acc[t][hh] = _mm256_setzero_ps();
        }
        const __m256i m3 = _mm256_set1_epi8(3);
        const __m256i m15 = _mm256_set1_epi16(15), m12 = _mm256_set1_epi8(12);
        /* sub-blocks side by side (dot_pair_acc): with VNNI always; without, for decode only,
         * where it cut the scales' and the dots' operations from 12 to 8 a pair and half
         * (bench-kernels --micro q2_k, per core: 28.0-28.8 -> 29.6-29.7 GB/s from memory,
         * 28.0-28.4 -> 29.8-30.0 from L2); prefill tiles, whose scales serve 4 tokens, lost 4%
         * that way and keep each sub-block's dot in s16 with its scale in vpmaddwd */
        const bool pair = YMM_VNNI || T <= 2;
        for (int64_t s = 0; s < ns; s++) {
                const uint8_t *sb = g + s * PK_Q2_K_SB;
                __m256i msum[MAX_T][2], isum[MAX_T][2];
                UNROLL for (int t = 0; t < T; t++)
                        UNROLL for (int hh = 0; hh < NH; hh++)
                                msum[t][hh] = isum[t][hh] = _mm256_setzero_si256();
                UNROLL for (int p = 0; p < 8; p++) {
                        __m256i m16[2];
                        UNROLL for (int hh = 0; hh < NH; hh++)
                                m16[hh] = _mm256_srli_epi16(_mm256_cvtepu8_epi16(ld16(sb + 64 + 32 * p + 16 * (h0 + hh))), 4);
                        UNROLL for (int t = 0; t < T; t++) {
                                __m256i bs = bcast4(act_q8_K_bs16(row[t], s) + 2 * p);
                                UNROLL for (int hh = 0; hh < NH; hh++) {
                                        msum[t][hh] = madd_acc(msum[t][hh], m16[hh], bs);
                                        if (T > 2)
                                                CHAIN(msum[t][hh]);
                                }
                        }
                }
                for (int jp = 0; jp < 16; jp += 2) {
                        __m256i dprev[MAX_T][2]; /* sub-block jp's dot, waiting for jp + 1's */
                        UNROLL for (int e = 0; e < 2; e++) {
                                const int j = jp + e;
                                if (pf)
                                        prefetch_lines(sb + PF_AHEAD_BYTES + j * (PK_Q2_K_SB / 16), 2, pf);
                                __m256i scj[2], w[2][4];
                                UNROLL for (int hh = 0; hh < NH; hh++) {
                                        /* 8 rows' (scale | min << 4) bytes of sub-blocks 2p, 2p + 1 */
                                        const uint8_t *sp = sb + 64 + 32 * (j / 2) + 16 * (h0 + hh);
                                        if (pair && e)
                                                scj[hh] = _mm256_and_si256(_mm256_cvtepu8_epi16(ld16(sp)), m15);
#ifndef AXP_AVX_VNNI
                                        if (!pair)
                                                scj[hh] = _mm256_and_si256(scales_s8_pairs(sp, e), m15);
#endif
                                        __m256i v = ld32(sb + PK_Q2_K_HEAD + 64 * j + 32 * (h0 + hh));
                                        if (!YMM_VNNI && pair) {
                                                /* quads 1 and 3 at 4 times their value: one
                                                 * shift, not three (crumb_dot) */
                                                __m256i v4 = _mm256_srli_epi16(v, 4);
                                                w[hh][0] = _mm256_and_si256(v, m3);
                                                w[hh][1] = _mm256_and_si256(v, m12);
                                                w[hh][2] = _mm256_and_si256(v4, m3);
                                                w[hh][3] = _mm256_and_si256(v4, m12);
                                                continue;
                                        }
                                        w[hh][0] = _mm256_and_si256(v, m3);
                                        w[hh][1] = _mm256_and_si256(_mm256_srli_epi16(v, 2), m3);
                                        w[hh][2] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m3);
                                        w[hh][3] = _mm256_and_si256(_mm256_srli_epi16(v, 6), m3);
                                }
                                UNROLL for (int t = 0; t < T; t++) {
                                        const int8_t *a = act_q8_K_qs(row[t], s) + 16 * j;
                                        __m256i a0 = bcast4(a), a1 = bcast4(a + 4), a2 = bcast4(a + 8), a3 = bcast4(a + 12);
                                        UNROLL for (int hh = 0; hh < NH; hh++) {
#ifndef AXP_AVX_VNNI
                                                if (!pair) {
                                                        isum[t][hh] = madd_acc(isum[t][hh], sum16x4_s16(w[hh], a0, a1, a2, a3), scj[hh]);
                                                        if (T > 2)
                                                                CHAIN(isum[t][hh]);
                                                        continue;
                                                }
#endif
                                                __m256i dj = YMM_VNNI ? dot16x4(w[hh], a0, a1, a2, a3, _mm256_setzero_si256())
                                                                      : crumb_dot(w[hh], a0, a1, a2, a3);
                                                if (!e)
                                                        dprev[t][hh] = dj;
                                                else
                                                        isum[t][hh] = dot_pair_acc(isum[t][hh], dprev[t][hh], dj, scj[hh], 16);
                                        }
                                }
                        }
                }
                UNROLL for (int hh = 0; hh < NH; hh++) {
                        __m256 d = _mm256_cvtph_ps(ldu16(sb + 16 * (h0 + hh)));
                        __m256 dmin = _mm256_cvtph_ps(ldu16(sb + 32 + 16 * (h0 + hh)));
                        UNROLL for (int t = 0; t < T; t++) {
                                __m256 mins = _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(msum[t][hh]));
                                __m256 v = _mm256_fmsub_ps(d, _mm256_cvtepi32_ps(isum[t][hh]), mins);
                                acc[t][hh] = _mm256_fmadd_ps(_mm256_set1_ps(act_q8_K_d(row[t], s)), v, acc[t][hh]);
                        }
                }
        }
        UNROLL for (int t = 0; t < T; t++)
                UNROLL for (int hh = 0; hh < NH; hh++)
                        store_half(y + t * ldy, acc[t][hh], h0 + hh, n_rows);
}

GEMM_HALVES_FEW_APART(q2_K)

/* The 6-bit sub-block scales of a superblock, less 32, as Q3_K (nj = 16) and IQ4_XS (nj = 8)
 * pack them: the low nibble of sub-block j's row r of half h is nibble j & 1 of lo[16 (j / 2)
 * + 8 h + r], its two high bits are bits 2 (j & 3) of hi[16 (j / 4) + 8 h + r]. All of them,
 * four sub-blocks a step, as s8 in out[16 j + 8 h + r]: once per superblock instead of once
 * per sub-block and half. */
AI void scales6_all(const uint8_t *lo, const uint8_t *hi, int nj, int8_t *out) {
        const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(3), c32 = _mm256_set1_epi8(32);
        /* lane 0 holds sub-blocks 4k and 4k + 1 (low and high nibbles), lane 1 4k + 2 and 4k + 3 */
        const __m256i sh_e = _mm256_setr_epi64x(0, 0, 4, 4), sh_o = _mm256_setr_epi64x(2, 2, 6, 6);
        for (int k = 0; k < nj / 4; k++) {
                __m256i v = _mm256_loadu_si256((const __m256i *) (lo + 32 * k));
                __m256i h = _mm256_broadcastsi128_si256(ldu16(hi + 16 * k));
                /* a byte's two bits moved to bits 4-5 stay in the byte */
                __m256i e = _mm256_or_si256(_mm256_and_si256(v, m4),
                                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srlv_epi64(h, sh_e), m2), 4));
                __m256i o = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4),
                                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srlv_epi64(h, sh_o), m2), 4));
                e = _mm256_sub_epi8(e, c32);
                o = _mm256_sub_epi8(o, c32);
                _mm_storeu_si128((__m128i *) (out + 16 * (4 * k)), _mm256_castsi256_si128(e));
                _mm_storeu_si128((__m128i *) (out + 16 * (4 * k + 1)), _mm256_castsi256_si128(o));
                _mm_storeu_si128((__m128i *) (out + 16 * (4 * k + 2)), _mm256_extracti128_si256(e, 1));
                _mm_storeu_si128((__m128i *) (out + 16 * (4 * k + 3)), _mm256_extracti128_si256(o, 1));
        }
}

/* Q3_K: the four quads of a pair's sub-block 2p (odd = 0) or 2p + 1 (odd = 1) from its three
 * vectors at v (one half's 32 bytes of each, cpu.h); with VNNI sub-block 2p + 1's in place, 8
 * times their value. Eight or eleven operations. */
AI void q3_quads(const uint8_t *v, int odd, __m256i *w) {
        const __m256i m7 = _mm256_set1_epi8(7), m3 = _mm256_set1_epi8(3), b2 = _mm256_set1_epi8(4);
        const __m256i v0 = ld32(v), v1 = ld32(v + 64), v2 = ld32(v + 128);
        if (!odd) {
                w[0] = _mm256_and_si256(v0, m7);
                w[1] = _mm256_and_si256(v1, m7);
                w[2] = _mm256_and_si256(v2, m7);
                w[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v0, 6), m3),
                                       _mm256_and_si256(_mm256_srli_epi16(v1, 4), b2));
                return;
        }
#ifdef AXP_AVX_VNNI
        const __m256i m38 = _mm256_set1_epi8(0x38);
        w[0] = _mm256_and_si256(v0, m38);
        w[1] = _mm256_and_si256(v1, m38);
        w[2] = _mm256_and_si256(v2, m38);
        w[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v2, 3), _mm256_set1_epi8(0x18)),
                               _mm256_and_si256(_mm256_srli_epi16(v1, 2), _mm256_set1_epi8(0x20)));
#else
        w[0] = _mm256_and_si256(_mm256_srli_epi16(v0, 3), m7);
        w[1] = _mm256_and_si256(_mm256_srli_epi16(v1, 3), m7);
        w[2] = _mm256_and_si256(_mm256_srli_epi16(v2, 3), m7);
        w[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v2, 6), m3),
                               _mm256_and_si256(_mm256_srli_epi16(v1, 5), b2));
#endif
}

/* Q3_K: w + 4 in 0..7 (pair sums of at most 2*7*127, four fit s16); each sub-block's dot
 * less 4 times its activation sum (at most 16*4*127) fits s16 and is multiplied by the signed
 * 6-bit scale in int32 as Q2_K's (with VNNI sub-block 2p + 1's dot, from weights in place, is
 * 8 times its value, the offset too, and the shift beside 2p's divides by 8). Without VNNI
 * the offset goes into the low half of each lane of the s16 pair sums (eight products and the
 * offset: at most 8*7*127 + 4*16*127). */
AI void q3_K_tile(const uint8_t *g, const axp_act *act, int t0, int T, float *y, long ldy,
                  int n_rows, int pf, int h0, int NH) {
        int64_t k = act->k, ns = k / QK_K;
        const uint8_t *qbase = g + pk_q3_K_qs_offset(k);
        const uint8_t *row[MAX_T];
        __m256 acc[MAX_T][2];
        UNROLL for (int t = 0; t < T; t++) {
                row[t] = act->data + (t0 + t) * act->stride;
                UNROLL for (int hh = 0; hh < NH; hh++)
                        acc[t][hh] = _mm256_setzero_ps();
        }
        for (int64_t s = 0; s < ns; s++) {
                const uint8_t *hd = g + s * PK_Q3_K_HEAD, *qs = qbase + s * PK_Q3_K_QS;
                __m256i isum[MAX_T][2];
                UNROLL for (int t = 0; t < T; t++)
                        UNROLL for (int hh = 0; hh < NH; hh++)
                                isum[t][hh] = _mm256_setzero_si256();
                int8_t sc6[16 * 16];
                scales6_all(hd + 32, hd + 160, 16, sc6);
                for (int jp = 0; jp < 16; jp += 2) {
                        const uint8_t *vp = qs + 96 * jp; /* the pair's three vectors */
                        if (pf)
                                prefetch_q3_K(g, s, jp / 2, pf);
#ifdef AXP_AVX_VNNI
                        __m256i dprev[MAX_T][2]; /* sub-block jp's dot, waiting for jp + 1's */
#endif
                        UNROLL for (int e = 0; e < 2; e++) {
                                const int j = jp + e;
                                __m256i scj[2], w[2][4];
                                UNROLL for (int hh = 0; hh < NH; hh++) {
                                        const int8_t *sp = sc6 + 16 * j + 8 * (h0 + hh);
#ifdef AXP_AVX_VNNI
                                        /* lane r: the scales of sub-blocks jp and jp + 1 */
                                        if (e)
                                                scj[hh] = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(
                                                        _mm_loadl_epi64((const __m128i *) (sp - 16)),
                                                        _mm_loadl_epi64((const __m128i *) sp)));
#else
                                        scj[hh] = scales_s8(sp);
#endif
                                        q3_quads(vp + 32 * (h0 + hh), e, w[hh]);
                                }
                                UNROLL for (int t = 0; t < T; t++) {
                                        const int8_t *a = act_q8_K_qs(row[t], s) + 16 * j;
                                        __m256i a0 = bcast4(a), a1 = bcast4(a + 4), a2 = bcast4(a + 8), a3 = bcast4(a + 12);
                                        int off = -4 * act_q8_K_bs16(row[t], s)[j];
                                        UNROLL for (int hh = 0; hh < NH; hh++) {
#ifdef AXP_AVX_VNNI
                                                __m256i dj = dot16x4(w[hh], a0, a1, a2, a3, _mm256_set1_epi32(e ? 8 * off : off));
                                                if (!e)
                                                        dprev[t][hh] = dj;
                                                else
                                                        isum[t][hh] = dot_pair_acc(isum[t][hh], dprev[t][hh], dj, scj[hh], 13);
#else
                                                __m256i p16 = _mm256_add_epi16(sum16x4_s16(w[hh], a0, a1, a2, a3),
                                                                               _mm256_set1_epi32(off & 0xffff));
                                                isum[t][hh] = madd_acc(isum[t][hh], p16, scj[hh]);
                                                if (T > 2)
                                                        CHAIN(isum[t][hh]);
#endif
                                        }
                                }
                        }
                }
                UNROLL for (int hh = 0; hh < NH; hh++) {
                        __m256 d = _mm256_cvtph_ps(ldu16(hd + 16 * (h0 + hh)));
                        UNROLL for (int t = 0; t < T; t++)
                                acc[t][hh] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(act_q8_K_d(row[t], s))),
                                                             _mm256_cvtepi32_ps(isum[t][hh]), acc[t][hh]);
                }
        }
        UNROLL for (int t = 0; t < T; t++)
                UNROLL for (int hh = 0; hh < NH; hh++)
                        store_half(y + t * ldy, acc[t][hh], h0 + hh, n_rows);
}

GEMM_HALVES_FEW_APART(q3_K)

/* IQ4_XS: the signed levels with the sign trick of IQ4_NL (|w| times a with w's sign; for one
 * token |a| times w with a's sign, the levels never being -128). A sub-block's pair sums go
 * into vpmaddwd with its signed 6-bit scales in place of ones, so the superblock's dot (at
 * most 8 * 32 * 127 * 127 * 32, well within int32) is summed exactly in integers and meets a
 * float once a superblock, as the K-quants'; with VNNI each sub-block's vpdpbusd sum times its
 * scale (vpmulld): the same integers. */
AI void iq4_xs_tile(const uint8_t *g, const axp_act *act, int t0, int T, float *y, long ldy,
                    int n_rows, int pf, int h0, int NH) {
        int64_t k = act->k, ns = k / QK_K;
        const uint8_t *row[MAX_T];
        __m256 acc[MAX_T][2];
        UNROLL for (int t = 0; t < T; t++) {
                row[t] = act->data + (t0 + t) * act->stride;
                UNROLL for (int hh = 0; hh < NH; hh++)
                        acc[t][hh] = _mm256_setzero_ps();
        }
        const __m256i m4 = _mm256_set1_epi8(0x0f);
        const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *) axp_iq4nl_values));
#ifdef AXP_AVX_VNNI
        const __m256i lut128 = _mm256_xor_si256(lut, _mm256_set1_epi8((char) 0x80));
#endif
        for (int64_t s = 0; s < ns; s++) {
                const uint8_t *sb = g + s * PK_IQ4_XS_SB;
                __m256i iacc[MAX_T][2];
                UNROLL for (int t = 0; t < T; t++)
                        UNROLL for (int hh = 0; hh < NH; hh++)
                                iacc[t][hh] = _mm256_setzero_si256();
                int8_t sc6[8 * 16];
                scales6_all(sb + 32, sb + 96, 8, sc6);
                for (int j = 0; j < 8; j++) {
                        if (pf)
                                prefetch_kstep(g, sb + j * (PK_IQ4_XS_SB / 8), PK_IQ4_XS_SB / 8, 5, pf_sparse(T), pf);
                        __m256i scj[2];
                        UNROLL for (int hh = 0; hh < NH; hh++) {
                                const int8_t *sp = sc6 + 16 * j + 8 * (h0 + hh);
#ifdef AXP_AVX_VNNI
                                scj[hh] = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *) sp));
#else
                                scj[hh] = scales_s8(sp);
#endif
                        }
                        const uint8_t *q = sb + PK_IQ4_XS_HEAD + j * 256;
#ifdef AXP_AVX_VNNI
                        __m256i isum[MAX_T][2];
                        UNROLL for (int t = 0; t < T; t++)
                                UNROLL for (int hh = 0; hh < NH; hh++)
                                        /* the levels + 128 as u8: less 128 times the activations' sum */
                                        isum[t][hh] = _mm256_set1_epi32(-128 * act_q8_K_bs32(row[t], s)[j]);
#endif
                        UNROLL for (int jj = 0; jj < 8; jj++) {
                                __m256i ws[2], aw[2];
                                UNROLL for (int hh = 0; hh < NH; hh++) {
                                        __m256i v = ld32(q + (jj / 2) * 64 + 32 * (h0 + hh));
                                        __m256i n = (jj & 1) ? _mm256_srli_epi16(v, 4) : v;
#ifdef AXP_AVX_VNNI
                                        ws[hh] = _mm256_shuffle_epi8(lut128, _mm256_and_si256(n, m4));
                                        aw[hh] = ws[hh];
#else
                                        ws[hh] = _mm256_shuffle_epi8(lut, _mm256_and_si256(n, m4));
                                        if (T > 1)
                                                aw[hh] = _mm256_sign_epi8(ws[hh], ws[hh]);
#endif
                                }
                                UNROLL for (int t = 0; t < T; t++) {
                                        __m256i av = bcast4(act_q8_K_qs(row[t], s) + 32 * j + 4 * jj);
#ifndef AXP_AVX_VNNI
                                        __m256i aa = T == 1 ? _mm256_sign_epi8(av, av) : av;
#endif
                                        UNROLL for (int hh = 0; hh < NH; hh++) {
#ifdef AXP_AVX_VNNI
                                                isum[t][hh] = _mm256_dpbusd_avx_epi32(isum[t][hh], aw[hh], av);
#else
                                                __m256i p16 = T == 1 ? _mm256_maddubs_epi16(aa, _mm256_sign_epi8(ws[hh], av))
                                                                     : _mm256_maddubs_epi16(aw[hh], _mm256_sign_epi8(av, ws[hh]));
                                                iacc[t][hh] = madd_acc(iacc[t][hh], p16, scj[hh]);
                                                CHAIN(iacc[t][hh]);
#endif
                                        }
                                }
                        }
#ifdef AXP_AVX_VNNI
                        UNROLL for (int t = 0; t < T; t++)
                                UNROLL for (int hh = 0; hh < NH; hh++)
                                        iacc[t][hh] = _mm256_add_epi32(iacc[t][hh], _mm256_mullo_epi32(isum[t][hh], scj[hh]));
#endif
                }
                UNROLL for (int hh = 0; hh < NH; hh++) {
                        __m256 d = _mm256_cvtph_ps(ldu16(sb + 16 * (h0 + hh)));
                        UNROLL for (int t = 0; t < T; t++)
                                acc[t][hh] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(act_q8_K_d(row[t], s))),
                                                             _mm256_cvtepi32_ps(iacc[t][hh]), acc[t][hh]);
                }
        }
        UNROLL for (int t = 0; t < T; t++)
                UNROLL for (int hh = 0; hh < NH; hh++)
                        store_half(y + t * ldy, acc[t][hh], h0 + hh, n_rows);
}

/* As the 32-element block types (BLOCK_DISPATCH): with VNNI, tiles over both halves took
 * IQ4_XS prefill from 241-250 to 275-287 GFLOP/s a core (without, 110-114 -> 114-121); the
 * other K-quants' tiles, whose sub-block scales take registers of their own, were no faster
 * that way or slower. */
static void gemm_iq4_xs(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                        int n_rows) {
        BLOCK_DISPATCH(iq4_xs_tile);
}

/* Activation quantizers (same bytes as quant-act.c) ---------------------------------------- */

static void quant_f16(const float *x, int64_t k, uint8_t *row) {
        float *o = (float *) row;
        int64_t i = 0;
        for (; i + 8 <= k; i += 8)
                _mm256_storeu_ps(o + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i),
                                                                        _MM_FROUND_TO_NEAREST_INT)));
        for (; i < k; i++)
                o[i] = _cvtsh_ss(_cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT));
}

AI float hmax8(__m256 v) {
        __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        s = _mm_max_ps(s, _mm_movehl_ps(s, s));
        s = _mm_max_ss(s, _mm_movehdup_ps(s));
        return _mm_cvtss_f32(s);
}

/* 32 int32 (in four vectors) to 32 int8 in order, saturating */
AI __m256i pack32(__m256i i0, __m256i i1, __m256i i2, __m256i i3) {
        __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
        return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

static void quant_q8_0(const float *x, int64_t k, uint8_t *row) {
        const __m256 sign = _mm256_set1_ps(-0.0f);
        for (int64_t b = 0; b < k / QK8_0; b++, x += QK8_0) {
                __m256 v[4];
                __m256 m = _mm256_setzero_ps();
                for (int i = 0; i < 4; i++) {
                        v[i] = _mm256_loadu_ps(x + 8 * i);
                        m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[i]));
                }
                float amax = hmax8(m);
                __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
                __m256i q[4];
                for (int i = 0; i < 4; i++)
                        q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], id));
                _mm256_storeu_si256((__m256i *) act_q8_0_qs(row, b), pack32(q[0], q[1], q[2], q[3]));
                __m256i q4 = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
                int sum = hsum8_i32(q4);
                act_q8_0_put(row, b, amax / 127.0f, sum);
        }
}

static void quant_q8_K(const float *x, int64_t k, uint8_t *row) {
        const __m256 sign = _mm256_set1_ps(-0.0f);
        for (int64_t s = 0; s < k / QK_K; s++, x += QK_K) {
                int8_t *qs = (int8_t *) act_q8_K_qs(row, s);
                int16_t bs16[16] = { 0 };
                __m256 m = _mm256_setzero_ps();
                for (int i = 0; i < QK_K; i += 8)
                        m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
                float amax = hmax8(m);
                if (amax == 0) {
                        memset(qs, 0, QK_K);
                        act_q8_K_put(row, s, 0.0f, bs16);
                        continue;
                }
                float max = 0;
                for (int i = 0; i < QK_K; i++)
                        if (fabsf(x[i]) == amax) {
                                max = x[i];
                                break;
                        }
                float iscale = -127.0f / max;
                __m256 vs = _mm256_set1_ps(iscale);
                const __m256i q127 = _mm256_set1_epi32(127);
                for (int j = 0; j < 8; j++) {
                        __m256i q[4];
                        for (int i = 0; i < 4; i++) {
                                __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + 32 * j + 8 * i), vs);
                                q[i] = _mm256_min_epi32(_mm256_cvtps_epi32(v), q127);
                        }
                        _mm256_storeu_si256((__m256i *) (qs + 32 * j), pack32(q[0], q[1], q[2], q[3]));
                        bs16[2 * j] = (int16_t) hsum8_i32(_mm256_add_epi32(q[0], q[1]));
                        bs16[2 * j + 1] = (int16_t) hsum8_i32(_mm256_add_epi32(q[2], q[3]));
                }
                act_q8_K_put(row, s, 1.0f / iscale, bs16);
        }
}

/* Attention ------------------------------------------------------------------------------- */

/* exp for x <= 0: see the AVX-512 path; 2^n is built in the exponent field, so x is clamped
 * where 2^n p stays normal (the result there is below 1e-37 of the maximum anyway, and a
 * subnormal one would cost a microcode assist, cpu.h) */
AI __m256 exp_neg(__m256 x) {
        x = _mm256_max_ps(x, _mm256_set1_ps(-86.0f));
        __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
        r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
        __m256 p = _mm256_set1_ps(1.9875691500e-4f);
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
        p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
        __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
        return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* Soft-capping (cpu.h's att_softcap) of 8 scores: cap tanh(|s| / cap) = cap (1 - e) / (1 + e)
 * with e = exp(-2 |s| / cap) <= 1 (inv2 = 2 / cap), s's sign put back (0 stays 0). Far out, e
 * is exp_neg's clamped e^-86 and the result cap: never NaN, even for infinite s. Within 1.5e-7
 * cap of cap tanh(s / cap) at any s (as cap tanhf(s / cap) is): e's few ulps are an absolute
 * error, so small scores lose their relative precision, but a softmax moves with the scores'
 * absolute errors only. */
AI __m256 softcap8(__m256 s, __m256 cap, __m256 inv2) {
        const __m256 one = _mm256_set1_ps(1.0f), neg = _mm256_set1_ps(-0.0f);
        __m256 e = exp_neg(_mm256_or_ps(_mm256_mul_ps(s, inv2), neg));
        __m256 t = _mm256_div_ps(_mm256_fnmadd_ps(cap, e, cap), _mm256_add_ps(one, e));
        return _mm256_xor_ps(t, _mm256_and_ps(s, neg));
}

/* The 8 lane sums of v[0..7], in that order; each sum's tree depends only on its own vector. */
AI __m256 reduce8(const __m256 *v) {
        __m256 s[4];
        UNROLL for (int i = 0; i < 4; i++)
                s[i] = _mm256_add_ps(_mm256_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                                     _mm256_unpackhi_ps(v[2 * i], v[2 * i + 1]));
        __m256 w0 = _mm256_add_ps(_mm256_shuffle_ps(s[0], s[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm256_shuffle_ps(s[0], s[1], _MM_SHUFFLE(3, 2, 3, 2)));
        __m256 w1 = _mm256_add_ps(_mm256_shuffle_ps(s[2], s[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm256_shuffle_ps(s[2], s[3], _MM_SHUFFLE(3, 2, 3, 2)));
        return _mm256_add_ps(_mm256_permute2f128_ps(w0, w1, 0x20), _mm256_permute2f128_ps(w0, w1, 0x31));
}

AI __m256i tail_mask8(int n) {
        return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* A Q8_0 cache block's scale in every lane, and its 8 values from element o on times it */
AI __m256 q8_scale(const block_q8_0 *b) {
        return _mm256_cvtph_ps(_mm_set1_epi16((short) b->d));
}

AI __m256 q8_8(const block_q8_0 *b, int o, __m256 d) {
        return _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *) (b->qs + o)))));
}

/* 8 values of an F16 or F32 K or V row from element i on, all real, for a type known where it
 * is inlined (a Q8_0 cache goes through q8_8 with its block's scale: widen, v16) */
AI __m256 kv8(const void *p, long i, uint32_t type) {
        if (type == AXP_TYPE_F16)
                return _mm256_cvtph_ps(ldu16((const uint16_t *) p + i));
        return _mm256_loadu_ps((const float *) p + i);
}

/* the same with n of them real (the rest zero) */
static __m256 load_kv(const void *p, long i, uint32_t type, int n) {
        if (n >= 8)
                return kv8(p, i, type);
        float tmp[8] = { 0 };
        for (int c = 0; c < n; c++)
                tmp[c] = type == AXP_TYPE_F16 ? _cvtsh_ss(((const uint16_t *) p)[i + c])
                                              : ((const float *) p)[i + c];
        return _mm256_loadu_ps(tmp);
}

/* rows [0, n) of K or V as f32, hdp floats apart, zero padded. The type and the whole-vector
 * case are decided once, not per 8 values: load_kv's per-call checks made this loop most of
 * decode attention's time (5.4 against 2.2 ms a token on AVX-512 at 512 positions). Each row
 * fetches one further on (att_prefetch_row). */
static void widen(const void *src, uint32_t type, long ld, int t0, int n, int hd, int hdp, float *dst) {
        int nc = (hd + 7) / 8, row_bytes = (int) att_kv_bytes(type, (size_t) hd), ahead = att_pf_rows(row_bytes);
        src = att_kv_row(src, type, ld, t0);
        if (type == AXP_TYPE_F16 && hd % 8 == 0) {
                for (int t = 0; t < n; t++) {
                        const uint16_t *r = (const uint16_t *) src + (long) t * ld;
                        att_prefetch_row(src, AXP_TYPE_F16, ld, t + ahead, row_bytes);
                        for (int c = 0; c < nc; c++)
                                _mm256_store_ps(dst + t * hdp + 8 * c, _mm256_cvtph_ps(ldu16(r + 8 * c)));
                }
        } else if (type == AXP_TYPE_F32 && hd % 8 == 0) {
                for (int t = 0; t < n; t++) {
                        const float *r = (const float *) src + (long) t * ld;
                        att_prefetch_row(src, AXP_TYPE_F32, ld, t + ahead, row_bytes);
                        for (int c = 0; c < nc; c++)
                                _mm256_store_ps(dst + t * hdp + 8 * c, _mm256_loadu_ps(r + 8 * c));
                }
        } else if (type == AXP_TYPE_Q8_0) {
                /* ld / 32 blocks between positions; a head's blocks are contiguous */
                const long bld = ld / QK8_0;
                for (int t = 0; t < n; t++) {
                        const block_q8_0 *r = (const block_q8_0 *) src + (long) t * bld;
                        att_prefetch_row(src, AXP_TYPE_Q8_0, ld, t + ahead, row_bytes);
                        /* each block's scale once */
                        for (int c = 0; c < nc; c += 4) {
                                const block_q8_0 *b = r + c / 4;
                                __m256 d = q8_scale(b);
                                UNROLL for (int i = 0; i < 4; i++)
                                        _mm256_store_ps(dst + t * hdp + 8 * (c + i), q8_8(b, 8 * i, d));
                        }
                }
        } else {
                for (int t = 0; t < n; t++)
                        for (int c = 0; c < nc; c++)
                                _mm256_store_ps(dst + t * hdp + 8 * c, load_kv(src, t * ld + 8 * c, type, hd - 8 * c));
        }
}

/* scores of one vector against 8 positions of widened K (rows hdp floats apart), n of them
 * real; NC is nc when the head is 64 or 128 wide (the loops unroll), else 0. The query is
 * read from memory (L1) per 8 values, so the 8 sums stay in registers. */
AI __m256 scores8(const float *qj, int nc, int hd, const float *kf, int hdp, int n, int NC) {
        __m256 p[8];
        UNROLL for (int i = 0; i < 8; i++)
                p[i] = _mm256_setzero_ps();
        /* with NC the row stride is a constant too (hdp = 8 NC): given as a variable, the
         * compiler kept the 64 row addresses on the stack and loaded one per FMA */
        int ncl = NC ? NC : nc, rs = NC ? 8 * NC : hdp;
        if (n == 8) {
                UNROLL for (int c = 0; c < ncl; c++) {
                        __m256 qc = NC ? _mm256_loadu_ps(qj + 8 * c) : _mm256_maskload_ps(qj + 8 * c, tail_mask8(hd - 8 * c));
                        UNROLL for (int i = 0; i < 8; i++)
                                p[i] = _mm256_fmadd_ps(qc, _mm256_load_ps(kf + i * rs + 8 * c), p[i]);
                }
        } else {
                for (int c = 0; c < ncl; c++) {
                        __m256 qc = NC ? _mm256_loadu_ps(qj + 8 * c) : _mm256_maskload_ps(qj + 8 * c, tail_mask8(hd - 8 * c));
                        UNROLL for (int i = 0; i < 8; i++)
                                if (i < n)
                                        p[i] = _mm256_fmadd_ps(qc, _mm256_load_ps(kf + i * rs + 8 * c), p[i]);
                }
        }
        return reduce8(p);
}

AI void scores_all(const float *const *q, int nv, const int *len, const float *kb, int t0, int hd, int nc,
                   int hdp, float scale, float *s, int NC) {
        __m256 vs = _mm256_set1_ps(scale);
        for (int j = 0; j < nv; j++) {
                if (t0 >= len[j])
                        continue;
                int n = len[j] - t0 < 8 ? len[j] - t0 : 8;
                __m256 r = scores8(q[j], nc, hd, kb, hdp, n, NC);
                _mm256_store_ps(s + j * ATT_CHUNK + t0, _mm256_mul_ps(r, vs));
        }
}

/* 16 values of V's row t from element o on: widened already (kvt < 0: vf, rows hdp apart) or
 * read and widened here (kvt: the cache's type, a constant where this is inlined; rows ld
 * apart in v) */
AI void v16(const float *vf, int hdp, const void *v, long ld, int kvt, int t, int o, __m256 *v0, __m256 *v1) {
        if (kvt < 0) {
                *v0 = _mm256_load_ps(vf + t * hdp + o);
                *v1 = _mm256_load_ps(vf + t * hdp + o + 8);
        } else if (kvt == AXP_TYPE_Q8_0) {
                /* o is a multiple of 16: both halves in one block, its scale converted once */
                const block_q8_0 *b = (const block_q8_0 *) v + (t * ld + o) / QK8_0;
                __m256 d = q8_scale(b);
                *v0 = q8_8(b, o % QK8_0, d);
                *v1 = q8_8(b, o % QK8_0 + 8, d);
        } else {
                *v0 = kv8(v, t * ld + o, (uint32_t) kvt);
                *v1 = kv8(v, t * ld + o + 8, (uint32_t) kvt);
        }
}

/* acc_j += p_jt V_t for 4 vectors and 16 of their values at a time (8 accumulators in
 * registers). V widened (kvt < 0: vf, rows zero padded to hdp, a multiple of 16), or read in
 * place (kvt >= 0, the head a multiple of 16 wide): each value is converted once either way,
 * but in place saves widening's store and the load back, and keeps V's chunk out of the
 * scratch (64 KB for 256 positions of a 64-wide head, more than L1). Row t's lines are
 * fetched att_pf_rows ahead in the first pass over the row. The column passes go
 * ATT_V_BLOCK positions at a time (cpu.h). */
AI void accum_kv(const float *s, const int *len, int nv, const float *vf, int hdp, const void *v, long ld,
                 int kvt, float *acc, int hd) {
        int row_bytes = kvt >= 0 ? (int) att_kv_bytes((uint32_t) kvt, (size_t) hd) : 0;
        int ahead = kvt >= 0 ? att_pf_rows(row_bytes) : 0;
        for (int j0 = 0; j0 < nv; j0 += 4) {
                int ns = nv - j0 < 4 ? nv - j0 : 4, lmax = 0, lmin = ATT_CHUNK;
                for (int j = 0; j < ns; j++) {
                        lmax = len[j0 + j] > lmax ? len[j0 + j] : lmax;
                        lmin = len[j0 + j] < lmin ? len[j0 + j] : lmin;
                }
                if (ns < 4)
                        lmin = 0;
                for (int tb = 0; tb == 0 || tb < lmax; tb += ATT_V_BLOCK) {
                        int te = tb + ATT_V_BLOCK < lmax ? tb + ATT_V_BLOCK : lmax;
                        for (int c = 0; 8 * c < hd; c += 2) {
                                int pf = kvt >= 0 && j0 == 0 && c == 0;
                                __m256 a[4][2];
                                /* every index of a[][] a constant once unrolled: in registers */
                                UNROLL for (int j = 0; j < 4; j++) {
                                        a[j][0] = a[j][1] = _mm256_setzero_ps();
                                        if (tb == 0 || j >= ns)
                                                continue;
                                        const float *o = acc + (size_t) (j0 + j) * hd + 8 * c;
                                        a[j][0] = _mm256_maskload_ps(o, tail_mask8(hd - 8 * c));
                                        if (8 * c + 8 < hd)
                                                a[j][1] = _mm256_maskload_ps(o + 8, tail_mask8(hd - 8 * c - 8));
                                }
                                int t = tb;
                                /* positions all four see (a query's heads: all) */
                                for (; t < te && t < lmin; t++) {
                                        if (pf)
                                                att_prefetch_row(v, (uint32_t) kvt, ld, t + ahead, row_bytes);
                                        __m256 v0, v1;
                                        v16(vf, hdp, v, ld, kvt, t, 8 * c, &v0, &v1);
                                        UNROLL for (int j = 0; j < 4; j++) {
                                                __m256 pj = _mm256_set1_ps(s[(j0 + j) * ATT_CHUNK + t]);
                                                a[j][0] = _mm256_fmadd_ps(pj, v0, a[j][0]);
                                                a[j][1] = _mm256_fmadd_ps(pj, v1, a[j][1]);
                                        }
                                }
                                for (; t < te; t++) {
                                        __m256 v0, v1;
                                        v16(vf, hdp, v, ld, kvt, t, 8 * c, &v0, &v1);
                                        UNROLL for (int j = 0; j < 4; j++)
                                                if (j < ns && t < len[j0 + j]) {
                                                        __m256 pj = _mm256_set1_ps(s[(j0 + j) * ATT_CHUNK + t]);
                                                        a[j][0] = _mm256_fmadd_ps(pj, v0, a[j][0]);
                                                        a[j][1] = _mm256_fmadd_ps(pj, v1, a[j][1]);
                                                }
                                }
                                UNROLL for (int j = 0; j < 4; j++) {
                                        if (j >= ns)
                                                continue;
                                        float *o = acc + (size_t) (j0 + j) * hd + 8 * c;
                                        _mm256_maskstore_ps(o, tail_mask8(hd - 8 * c), a[j][0]);
                                        if (8 * c + 8 < hd)
                                                _mm256_maskstore_ps(o + 8, tail_mask8(hd - 8 * c - 8), a[j][1]);
                                }
                        }
                }
        }
}

/* As the AVX-512 path: the scores 8 positions at a time, their K rows widened once (in L1)
 * for every vector, then each vector's softmax, then V widened once and accumulated for 4
 * vectors at a time. A (vector, position) score and a vector's sums over positions take the
 * same operations in the same order whatever the other vectors of the call. */
static void att_chunk(const float *const *q, int nv, const int *len, const void *k, const void *v,
                      uint32_t kv_type, long ld, int n_pos, int hd, float scale, float softcap,
                      float *m, float *l, float *acc, float *scratch) {
        int nc = (hd + 7) / 8, hdp = (hd + 15) / 16 * 16;
        float *s = scratch, *kb = scratch + ATT_MAX_VECS * ATT_CHUNK;
        float *vf = kb + ATT_CHUNK * ATT_MAX_HEAD_DIM;

        for (int t0 = 0; t0 < n_pos; t0 += 8) {
                int n = n_pos - t0 < 8 ? n_pos - t0 : 8;
                widen(k, kv_type, ld, t0, n, hd, hdp, kb);
                if (hd == 64)
                        scores_all(q, nv, len, kb, t0, hd, nc, hdp, scale, s, 8);
                else if (hd == 128)
                        scores_all(q, nv, len, kb, t0, hd, nc, hdp, scale, s, 16);
                else
                        scores_all(q, nv, len, kb, t0, hd, nc, hdp, scale, s, 0);
        }

        __m256 vcap = _mm256_set1_ps(softcap), vinv2 = _mm256_set1_ps(softcap > 0 ? 2.0f / softcap : 0.0f);
        for (int j = 0; j < nv; j++) {
                float *sj = s + j * ATT_CHUNK;
                /* soft-capped: the vector's scores in place (the lanes of its last 8 past len[j]
                 * are its own zero scores, which the max and the sum leave out) */
                if (softcap > 0)
                        for (int t0 = 0; t0 < len[j]; t0 += 8)
                                _mm256_store_ps(sj + t0, softcap8(_mm256_load_ps(sj + t0), vcap, vinv2));
                __m256 mx = _mm256_set1_ps(-INFINITY);
                for (int t0 = 0; t0 < len[j]; t0 += 8)
                        mx = _mm256_max_ps(mx, _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), _mm256_load_ps(sj + t0),
                                                                _mm256_castsi256_ps(tail_mask8(len[j] - t0))));
                float mj = hmax8(mx);
                __m256 vm = _mm256_set1_ps(mj), sum = _mm256_setzero_ps();
                for (int t0 = 0; t0 < len[j]; t0 += 8) {
                        __m256 d = _mm256_sub_ps(_mm256_load_ps(sj + t0), vm);
                        __m256 keep = _mm256_and_ps(_mm256_cmp_ps(d, _mm256_set1_ps(ATT_P_CUT), _CMP_GE_OQ),
                                                    _mm256_castsi256_ps(tail_mask8(len[j] - t0)));
                        __m256 e = _mm256_and_ps(exp_neg(d), keep);
                        _mm256_store_ps(sj + t0, e);
                        sum = _mm256_add_ps(sum, e);
                }
                m[j] = mj;
                l[j] = hsum8(sum);
        }

        /* V in place when each row serves at most two groups of 4 vectors (decode: a query's
         * heads), else widened once (prefill: converting a row for every group costs more
         * than the store and loads back) */
        if (hd % 16 != 0 || nv > 8) {
                widen(v, kv_type, ld, 0, n_pos, hd, hdp, vf);
                accum_kv(s, len, nv, vf, hdp, NULL, 0, -1, acc, hd);
        } else if (kv_type == AXP_TYPE_F16)
                accum_kv(s, len, nv, NULL, hdp, v, ld, AXP_TYPE_F16, acc, hd);
        else if (kv_type == AXP_TYPE_Q8_0)
                accum_kv(s, len, nv, NULL, hdp, v, ld, AXP_TYPE_Q8_0, acc, hd);
        else
                accum_kv(s, len, nv, NULL, hdp, v, ld, AXP_TYPE_F32, acc, hd);
}

/* Feed-forward activation ------------------------------------------------------------------ */

/* act(g) u for 8 values: g sigmoid(x), x = g for SiLU and x = 2 sqrt(2/pi) (g + 0.044715 g^3)
 * for GELU (1/2 (1 + tanh(z)) = sigmoid(2z)), the sigmoid from e = exp(-|x|) <= 1 as 1 / (1 + e)
 * for x >= 0 and e / (1 + e) below, so it keeps its relative precision on both sides. */
AI __m256 glu8(int act, __m256 g, __m256 u) {
        const __m256 one = _mm256_set1_ps(1.0f), neg = _mm256_set1_ps(-0.0f);
        __m256 x = g;
        if (act == AXP_GLU_GELU_TANH)
                x = _mm256_mul_ps(_mm256_set1_ps(1.5957691216f),
                                  _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), _mm256_mul_ps(_mm256_mul_ps(g, g), g), g));
        __m256 e = exp_neg(_mm256_or_ps(x, neg));
        __m256 r = _mm256_div_ps(one, _mm256_add_ps(one, e));
        __m256 sg = _mm256_blendv_ps(r, _mm256_mul_ps(e, r), x); /* by x's sign bit */
        return _mm256_mul_ps(_mm256_mul_ps(g, sg), u);
}

AI void glu_row(int act, float *g, const float *u, long n) {
        long i = 0;
        for (; i + 8 <= n; i += 8)
                _mm256_storeu_ps(g + i, glu8(act, _mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
        if (i < n) {
                __m256i m = tail_mask8((int) (n - i));
                _mm256_maskstore_ps(g + i, m, glu8(act, _mm256_maskload_ps(g + i, m), _mm256_maskload_ps(u + i, m)));
        }
}

static void glu(int act, float *g, const float *u, long n) {
        if (act == AXP_GLU_GELU_TANH)
                glu_row(AXP_GLU_GELU_TANH, g, u, n);
        else
                glu_row(AXP_GLU_SILU, g, u, n);
}

static void softcap(float *x, long n, float cap) {
        const __m256 vcap = _mm256_set1_ps(cap), inv2 = _mm256_set1_ps(2.0f / cap);
        long i = 0;
        for (; i + 8 <= n; i += 8)
                _mm256_storeu_ps(x + i, softcap8(_mm256_loadu_ps(x + i), vcap, inv2));
        if (i < n) {
                __m256i m = tail_mask8((int) (n - i));
                _mm256_maskstore_ps(x + i, m, softcap8(_mm256_maskload_ps(x + i, m), vcap, inv2));
        }
}

#ifdef AXP_AVX_VNNI
const bool axp_avx_vnni_built = true;
const axp_cpu_ops axp_cpu_ops_avx_vnni = {
        .name = "avx-vnni",
#else
const axp_cpu_ops axp_cpu_ops_avx2 = {
        .name = "avx2",
#endif
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
                [AXP_TYPE_Q4_K] = gemm_q4_K,
                [AXP_TYPE_Q5_K] = gemm_q5_K,
                [AXP_TYPE_Q6_K] = gemm_q6_K,
                [AXP_TYPE_Q2_K] = gemm_q2_K,
                [AXP_TYPE_Q3_K] = gemm_q3_K,
                [AXP_TYPE_IQ4_XS] = gemm_iq4_xs,
        },
#ifndef AXP_AVX_VNNI
        .gemm_sym = {
                [AXP_TYPE_Q8_0] = gemm_q8_0_sym,
        },
#endif
        .att_chunk = att_chunk,
        .glu = glu,
        .softcap = softcap,
};
