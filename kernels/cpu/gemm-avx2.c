/* SPDX-License-Identifier: MIT */
/* The AVX2 path (AVX2, FMA, F16C: Haswell and later, Zen). Same packed layout as AVX-512: a
 * 32-byte half of a group vector holds 4 inputs of 8 rows, so each half of the group is one
 * pass over k with 8 rows per lane set. Without VNNI the 8-bit products go through
 * vpmaddubsw (u8 x s8 pairs to s16) and vpmaddwd; Q8_0's full-range weights take the sign
 * trick (|w| times a with w's sign) so the s16 pairs cannot saturate. Every (row, token) sees
 * one fixed sequence of operations, whatever the tile. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "cpu.h"

#define AI __attribute__((always_inline)) static inline
#define MAX_T 4
#define UNROLL _Pragma("GCC unroll 16")

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

#define TILE_DISPATCH(fn, ...)                                                                     \
        do {                                                                                       \
                for (int h = 0; h < 2 && 8 * h < n_rows; h++) {                                    \
                        int t = 0;                                                                 \
                        for (; t + MAX_T <= n_tok; t += MAX_T)                                     \
                                fn(g, act, t0 + t, MAX_T, y + t * ldy, ldy, n_rows, h, ##__VA_ARGS__); \
                        switch (n_tok - t) {                                                       \
                        case 3: fn(g, act, t0 + t, 3, y + t * ldy, ldy, n_rows, h, ##__VA_ARGS__); break; \
                        case 2: fn(g, act, t0 + t, 2, y + t * ldy, ldy, n_rows, h, ##__VA_ARGS__); break; \
                        case 1: fn(g, act, t0 + t, 1, y + t * ldy, ldy, n_rows, h, ##__VA_ARGS__); break; \
                        default: break;                                                            \
                        }                                                                          \
                }                                                                                  \
        } while (0)

/* Float weights ---------------------------------------------------------------------------- */

enum { W_F32, W_F16, W_BF16 };

AI __m256 load_w(const uint8_t *g, int64_t i, int h, int kind) {
        if (kind == W_F32)
                return _mm256_load_ps((const float *) g + i * 16 + 8 * h);
        __m128i v = ld16((const uint16_t *) g + i * 16 + 8 * h);
        if (kind == W_F16)
                return _mm256_cvtph_ps(v);
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
}

AI void float_tile(const uint8_t *g, const axp_act *act, int t0, int T, float *y, long ldy,
                   int n_rows, int h, int kind) {
        /* two accumulators per token, as in the AVX-512 path */
        const float *x[MAX_T];
        __m256 acc[MAX_T][2];
        UNROLL for (int t = 0; t < T; t++) {
                x[t] = (const float *) (act->data + (t0 + t) * act->stride);
                acc[t][0] = acc[t][1] = _mm256_setzero_ps();
        }
        int64_t i = 0;
        for (; i + 2 <= act->k; i += 2) {
                __m256 w0 = load_w(g, i, h, kind), w1 = load_w(g, i + 1, h, kind);
                UNROLL for (int t = 0; t < T; t++) {
                        acc[t][0] = _mm256_fmadd_ps(w0, _mm256_set1_ps(x[t][i]), acc[t][0]);
                        acc[t][1] = _mm256_fmadd_ps(w1, _mm256_set1_ps(x[t][i + 1]), acc[t][1]);
                }
        }
        if (i < act->k) {
                __m256 w0 = load_w(g, i, h, kind);
                UNROLL for (int t = 0; t < T; t++)
                        acc[t][0] = _mm256_fmadd_ps(w0, _mm256_set1_ps(x[t][i]), acc[t][0]);
        }
        UNROLL for (int t = 0; t < T; t++)
                store_half(y + t * ldy, _mm256_add_ps(acc[t][0], acc[t][1]), h, n_rows);
}

static void gemm_f32(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                     int n_rows) {
        TILE_DISPATCH(float_tile, W_F32);
}

static void gemm_f16(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                     int n_rows) {
        TILE_DISPATCH(float_tile, W_F16);
}

static void gemm_bf16(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                      int n_rows) {
        TILE_DISPATCH(float_tile, W_BF16);
}

/* The 32-element block types ---------------------------------------------------------------- *
 * Q8_0 (and Q5_0, repacked as Q8_0) and IQ4_NL (its levels looked up with vpshufb) are
 * signed bytes and take the sign trick; Q4_0 and Q4_1 nibbles and Q5_1's bytes 0..31 are
 * unsigned operands of vpmaddubsw as they are. Q4_0 adds the activations' offset, Q4_1 and
 * Q5_1 their minimum times the activations' sum s. */
enum { M_Q8_0, M_Q4_0, M_IQ4_NL, M_Q4_1, M_Q5_1 };

AI void q8_0_tile(const uint8_t *g, const axp_act *act, int t0, int T, float *y, long ldy,
                  int n_rows, int h, int mode) {
        int64_t k = act->k, nb = k / QK8_0;
        const int has_min = mode == M_Q4_1 || mode == M_Q5_1;
        const uint16_t *sc = (const uint16_t *) g;
        const uint16_t *mn = (const uint16_t *) (g + pk_q8_0_scales_bytes(k));
        const uint8_t *qs = g + (has_min ? pk_q4_1_head_bytes(k) : pk_q8_0_scales_bytes(k)) + 32 * h;
        const uint8_t *row[MAX_T];
        __m256 acc[MAX_T];
        UNROLL for (int t = 0; t < T; t++) {
                row[t] = act->data + (t0 + t) * act->stride;
                acc[t] = _mm256_setzero_ps();
        }
        const __m256i ones = _mm256_set1_epi16(1), m4 = _mm256_set1_epi8(0x0f);
        const __m256i flip = _mm256_set1_epi8((char) 0x80);
        const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *) axp_iq4nl_values));
        for (int64_t b = 0; b < nb; b++) {
                __m256i isum[MAX_T];
                if (mode == M_Q4_0 || mode == M_Q4_1) {
                        /* u8 nibbles x s8: 8 pair sums of at most 2*15*127 fit s16 */
                        __m256i s16[MAX_T];
                        UNROLL for (int t = 0; t < T; t++)
                                s16[t] = _mm256_setzero_si256();
                        const uint8_t *q = qs + b * 256;
                        UNROLL for (int p = 0; p < 4; p++) {
                                __m256i v = ld32(q + p * 64);
                                __m256i lo = _mm256_and_si256(v, m4);
                                __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                                UNROLL for (int t = 0; t < T; t++) {
                                        const int8_t *a = act_q8_0_qs(row[t], b) + 8 * p;
                                        __m256i l16 = _mm256_maddubs_epi16(lo, bcast4(a));
                                        __m256i h16 = _mm256_maddubs_epi16(hi, bcast4(a + 4));
                                        s16[t] = _mm256_add_epi16(_mm256_add_epi16(s16[t], l16), h16);
                                }
                        }
                        UNROLL for (int t = 0; t < T; t++) {
                                isum[t] = _mm256_madd_epi16(s16[t], ones);
                                if (mode == M_Q4_0)
                                        isum[t] = _mm256_add_epi32(isum[t], _mm256_set1_epi32(act_q8_0_c4(row[t], b)));
                        }
                } else if (mode == M_Q5_1) {
                        /* u8 0..31 x s8: one pair sum fits s16, so widen each */
                        const uint8_t *q = qs + b * 512;
                        UNROLL for (int t = 0; t < T; t++)
                                isum[t] = _mm256_setzero_si256();
                        UNROLL for (int j = 0; j < 8; j++) {
                                __m256i w = ld32(q + j * 64);
                                UNROLL for (int t = 0; t < T; t++) {
                                        const int8_t *a = act_q8_0_qs(row[t], b) + 4 * j;
                                        __m256i p16 = _mm256_maddubs_epi16(w, bcast4(a));
                                        isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(p16, ones));
                                }
                        }
                } else {
                        /* signed bytes: |w| times a with w's sign */
                        UNROLL for (int t = 0; t < T; t++)
                                isum[t] = _mm256_setzero_si256();
                        UNROLL for (int j = 0; j < 8; j++) {
                                __m256i ws;
                                if (mode == M_IQ4_NL) {
                                        __m256i v = ld32(qs + b * 256 + (j / 2) * 64);
                                        __m256i n = (j & 1) ? _mm256_srli_epi16(v, 4) : v;
                                        ws = _mm256_shuffle_epi8(lut, _mm256_and_si256(n, m4));
                                } else
                                        ws = _mm256_xor_si256(ld32(qs + b * 512 + j * 64), flip);
                                __m256i aw = _mm256_sign_epi8(ws, ws);
                                UNROLL for (int t = 0; t < T; t++) {
                                        const int8_t *a = act_q8_0_qs(row[t], b) + 4 * j;
                                        __m256i sa = _mm256_sign_epi8(bcast4(a), ws);
                                        __m256i p16 = _mm256_maddubs_epi16(aw, sa);
                                        isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(p16, ones));
                                }
                        }
                }
                __m256 dw = _mm256_cvtph_ps(ldu16(sc + b * 16 + 8 * h));
                UNROLL for (int t = 0; t < T; t++)
                        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]),
                                                 _mm256_mul_ps(dw, _mm256_set1_ps(act_q8_0_d(row[t], b))),
                                                 acc[t]);
                if (has_min) {
                        __m256 mw = _mm256_cvtph_ps(ldu16(mn + b * 16 + 8 * h));
                        UNROLL for (int t = 0; t < T; t++)
                                acc[t] = _mm256_fmadd_ps(mw, _mm256_set1_ps(act_q8_0_s(row[t], b)), acc[t]);
                }
        }
        UNROLL for (int t = 0; t < T; t++)
                store_half(y + t * ldy, acc[t], h, n_rows);
}

static void gemm_q8_0(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                      int n_rows) {
        TILE_DISPATCH(q8_0_tile, M_Q8_0);
}

static void gemm_q4_0(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                      int n_rows) {
        TILE_DISPATCH(q8_0_tile, M_Q4_0);
}

static void gemm_iq4_nl(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                        int n_rows) {
        TILE_DISPATCH(q8_0_tile, M_IQ4_NL);
}

static void gemm_q4_1(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                      int n_rows) {
        TILE_DISPATCH(q8_0_tile, M_Q4_1);
}

static void gemm_q5_1(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                      int n_rows) {
        TILE_DISPATCH(q8_0_tile, M_Q5_1);
}

/* Q4_K --------------------------------------------------------------------------------------- */

/* Q5_K (high) as Q4_K with each nibble's fifth bit moved in from the sub-block's bit vector
 * (bit p or 4 + p of a byte to its bit 4); 5-bit pair sums (2 * 31 * 127) no longer fit s16
 * eight at a time, so each nibble vector's pair is widened to int32. */
AI void q4_K_tile(const uint8_t *g, const axp_act *act, int t0, int T, float *y, long ldy,
                  int n_rows, int h, int high) {
        int64_t k = act->k, ns = k / QK_K;
        const size_t sb_bytes = high ? PK_Q5_K_SB : PK_Q4_K_SB;
        const uint8_t *row[MAX_T];
        __m256 acc[MAX_T];
        UNROLL for (int t = 0; t < T; t++) {
                row[t] = act->data + (t0 + t) * act->stride;
                acc[t] = _mm256_setzero_ps();
        }
        const __m256i ones = _mm256_set1_epi16(1), m4 = _mm256_set1_epi8(0x0f);
        const __m256i b4 = _mm256_set1_epi8(0x10);
        for (int64_t s = 0; s < ns; s++) {
                const uint8_t *sb = g + s * sb_bytes;
                __m256i msum[MAX_T];
                __m256 sacc[MAX_T];
                UNROLL for (int t = 0; t < T; t++) {
                        msum[t] = _mm256_setzero_si256();
                        sacc[t] = _mm256_setzero_ps();
                }
                UNROLL for (int p = 0; p < 4; p++) {
                        __m256i m16 = _mm256_cvtepu8_epi16(ld16(sb + 192 + 32 * p + 16 * h));
                        UNROLL for (int t = 0; t < T; t++) {
                                __m256i bs = bcast4(act_q8_K_bs32(row[t], s) + 2 * p);
                                msum[t] = _mm256_add_epi32(msum[t], _mm256_madd_epi16(m16, bs));
                        }
                }
                for (int j = 0; j < 8; j++) {
                        __m128i sc8 = _mm_loadl_epi64((const __m128i *) (sb + 64 + 16 * j + 8 * h));
                        __m256 scj = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(sc8));
                        const uint8_t *q = sb + PK_Q4_K_HEAD + j * 256 + 32 * h;
                        __m256i hb = high ? ld32(sb + PK_Q4_K_SB + j * 64 + 32 * h) : _mm256_setzero_si256();
                        __m256i s16[MAX_T], s32[MAX_T];
                        UNROLL for (int t = 0; t < T; t++) {
                                s16[t] = _mm256_setzero_si256();
                                s32[t] = _mm256_setzero_si256();
                        }
                        UNROLL for (int p = 0; p < 4; p++) {
                                __m256i v = ld32(q + p * 64);
                                __m256i lo = _mm256_and_si256(v, m4);
                                __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                                if (high) {
                                        lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(hb, 4 - p), b4));
                                        hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_srli_epi16(hb, p), b4));
                                }
                                long off = j * 32 + 8 * p;
                                UNROLL for (int t = 0; t < T; t++) {
                                        const int8_t *a = act_q8_K_qs(row[t], s) + off;
                                        __m256i l16 = _mm256_maddubs_epi16(lo, bcast4(a));
                                        __m256i h16 = _mm256_maddubs_epi16(hi, bcast4(a + 4));
                                        if (high)
                                                s32[t] = _mm256_add_epi32(
                                                        s32[t], _mm256_madd_epi16(_mm256_add_epi16(l16, h16), ones));
                                        else
                                                s16[t] = _mm256_add_epi16(_mm256_add_epi16(s16[t], l16), h16);
                                }
                        }
                        UNROLL for (int t = 0; t < T; t++) {
                                __m256i i32 = high ? s32[t] : _mm256_madd_epi16(s16[t], ones);
                                sacc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i32), scj, sacc[t]);
                        }
                }
                __m256 d = _mm256_cvtph_ps(ldu16(sb + 16 * h));
                __m256 dmin = _mm256_cvtph_ps(ldu16(sb + 32 + 16 * h));
                UNROLL for (int t = 0; t < T; t++) {
                        __m256 mins = _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(msum[t]));
                        __m256 v = _mm256_fmsub_ps(d, sacc[t], mins);
                        acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(act_q8_K_d(row[t], s)), v, acc[t]);
                }
        }
        UNROLL for (int t = 0; t < T; t++)
                store_half(y + t * ldy, acc[t], h, n_rows);
}

static void gemm_q4_K(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                      int n_rows) {
        TILE_DISPATCH(q4_K_tile, 0);
}

static void gemm_q5_K(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                      int n_rows) {
        TILE_DISPATCH(q4_K_tile, 1);
}

/* Q6_K --------------------------------------------------------------------------------------- */

AI void q6_K_tile(const uint8_t *g, const axp_act *act, int t0, int T, float *y, long ldy,
                  int n_rows, int h) {
        int64_t k = act->k, ns = k / QK_K;
        const uint8_t *row[MAX_T];
        __m256 acc[MAX_T];
        UNROLL for (int t = 0; t < T; t++) {
                row[t] = act->data + (t0 + t) * act->stride;
                acc[t] = _mm256_setzero_ps();
        }
        const __m256i ones = _mm256_set1_epi16(1), m4 = _mm256_set1_epi8(0x0f);
        const __m256i m30 = _mm256_set1_epi8(0x30);
        for (int64_t s = 0; s < ns; s++) {
                const uint8_t *sb = g + s * PK_Q6_K_SB;
                __m256i corr[MAX_T];
                __m256 sacc[MAX_T];
                UNROLL for (int t = 0; t < T; t++) {
                        corr[t] = _mm256_setzero_si256();
                        sacc[t] = _mm256_setzero_ps();
                }
                UNROLL for (int p = 0; p < 8; p++) {
                        __m256i sc16 = _mm256_cvtepi8_epi16(ld16(sb + 32 + 32 * p + 16 * h));
                        UNROLL for (int t = 0; t < T; t++) {
                                __m256i bs = bcast4(act_q8_K_bs16(row[t], s) + 2 * p);
                                corr[t] = _mm256_add_epi32(corr[t], _mm256_madd_epi16(sc16, bs));
                        }
                }
                for (int j = 0; j < 16; j++) {
                        __m256i w32 = _mm256_cvtepi16_epi32(ld16(sb + 32 + 32 * (j / 2) + 16 * h));
                        __m256i sci = (j & 1) ? _mm256_srai_epi32(w32, 8)
                                              : _mm256_srai_epi32(_mm256_slli_epi32(w32, 24), 24);
                        __m256 scj = _mm256_cvtepi32_ps(sci);
                        const uint8_t *q = sb + PK_Q6_K_HEAD + j * 192 + 32 * h;
                        __m256i n0 = ld32(q);
                        __m256i n1 = ld32(q + 64);
                        __m256i hb = ld32(q + 128);
                        /* (low nibble) | (two high bits << 4) */
#define Q6(lo, hi) _mm256_or_si256(_mm256_and_si256(lo, m4), _mm256_and_si256(hi, m30))
                        __m256i w0 = Q6(n0, _mm256_slli_epi16(hb, 4));
                        __m256i w1 = Q6(_mm256_srli_epi16(n0, 4), _mm256_slli_epi16(hb, 2));
                        __m256i w2 = Q6(n1, hb);
                        __m256i w3 = Q6(_mm256_srli_epi16(n1, 4), _mm256_srli_epi16(hb, 2));
#undef Q6
                        long off = j * 16;
                        UNROLL for (int t = 0; t < T; t++) {
                                /* u8 6-bit x s8: a pair sum is at most 2*63*127, two of them fit s16 */
                                const int8_t *a = act_q8_K_qs(row[t], s) + off;
                                __m256i p01 = _mm256_add_epi16(_mm256_maddubs_epi16(w0, bcast4(a)),
                                                               _mm256_maddubs_epi16(w1, bcast4(a + 4)));
                                __m256i p23 = _mm256_add_epi16(_mm256_maddubs_epi16(w2, bcast4(a + 8)),
                                                               _mm256_maddubs_epi16(w3, bcast4(a + 12)));
                                __m256i isum = _mm256_add_epi32(_mm256_madd_epi16(p01, ones),
                                                                _mm256_madd_epi16(p23, ones));
                                sacc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), scj, sacc[t]);
                        }
                }
                __m256 d = _mm256_cvtph_ps(ldu16(sb + 16 * h));
                UNROLL for (int t = 0; t < T; t++) {
                        __m256 v = _mm256_fmadd_ps(_mm256_set1_ps(-32.0f), _mm256_cvtepi32_ps(corr[t]),
                                                   sacc[t]);
                        __m256 dd = _mm256_mul_ps(d, _mm256_set1_ps(act_q8_K_d(row[t], s)));
                        acc[t] = _mm256_fmadd_ps(dd, v, acc[t]);
                }
        }
        UNROLL for (int t = 0; t < T; t++)
                store_half(y + t * ldy, acc[t], h, n_rows);
}

static void gemm_q6_K(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                      int n_rows) {
        TILE_DISPATCH(q6_K_tile);
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
 * where 2^n stays normal (the result there is below 1e-37 of the maximum anyway) */
AI __m256 exp_neg(__m256 x) {
        x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
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

/* 8 values of a K or V row from element i on, n of them real (the rest zero) */
static __m256 load_kv(const void *p, long i, uint32_t type, int n) {
        if (n >= 8) {
                if (type == AXP_TYPE_F16)
                        return _mm256_cvtph_ps(ldu16((const uint16_t *) p + i));
                return _mm256_loadu_ps((const float *) p + i);
        }
        float tmp[8] = { 0 };
        for (int c = 0; c < n; c++)
                tmp[c] = type == AXP_TYPE_F16 ? _cvtsh_ss(((const uint16_t *) p)[i + c])
                                              : ((const float *) p)[i + c];
        return _mm256_loadu_ps(tmp);
}

AI void accum(const float *s, const int *len, int nv_sub, const float *vf, int hdp, float *acc,
              int hd, int NC) {
        __m256 a[2][8];
        int lmax = 0;
        for (int j = 0; j < nv_sub; j++) {
                lmax = len[j] > lmax ? len[j] : lmax;
                UNROLL for (int c = 0; c < NC; c++)
                        a[j][c] = _mm256_setzero_ps();
        }
        for (int t = 0; t < lmax; t++) {
                __m256 vt[8];
                UNROLL for (int c = 0; c < NC; c++)
                        vt[c] = _mm256_load_ps(vf + t * hdp + 8 * c);
                UNROLL for (int j = 0; j < 2; j++)
                        if (j < nv_sub && t < len[j]) {
                                __m256 pj = _mm256_set1_ps(s[j * ATT_CHUNK + t]);
                                UNROLL for (int c = 0; c < NC; c++)
                                        a[j][c] = _mm256_fmadd_ps(pj, vt[c], a[j][c]);
                        }
        }
        for (int j = 0; j < nv_sub; j++)
                UNROLL for (int c = 0; c < NC; c++)
                        _mm256_maskstore_ps(acc + j * hd + 8 * c, tail_mask8(hd - 8 * c), a[j][c]);
}

static void att_chunk(const float *const *q, int nv, const int *len, const void *k, const void *v,
                      uint32_t kv_type, long ld, int n_pos, int hd, float scale, float *m,
                      float *l, float *acc, float *scratch) {
        int nc = (hd + 7) / 8, hdp = (hd + 15) / 16 * 16;
        float *s = scratch, *kf = scratch + ATT_MAX_VECS * ATT_CHUNK;
        float *vf = kf + ATT_CHUNK * ATT_MAX_HEAD_DIM;

        for (int t = 0; t < n_pos; t++)
                for (int c = 0; c < nc; c++) {
                        _mm256_store_ps(kf + t * hdp + 8 * c, load_kv(k, t * ld + 8 * c, kv_type, hd - 8 * c));
                        _mm256_store_ps(vf + t * hdp + 8 * c, load_kv(v, t * ld + 8 * c, kv_type, hd - 8 * c));
                }

        for (int j = 0; j < nv; j++) {
                __m256 qv[ATT_MAX_HEAD_DIM / 8];
                for (int c = 0; c < nc; c++)
                        qv[c] = _mm256_maskload_ps(q[j] + 8 * c, tail_mask8(hd - 8 * c));
                float *sj = s + j * ATT_CHUNK;
                __m256 vs = _mm256_set1_ps(scale), mx = _mm256_set1_ps(-INFINITY);
                for (int t0 = 0; t0 < len[j]; t0 += 8) {
                        __m256 p[8];
                        UNROLL for (int i = 0; i < 8; i++) {
                                p[i] = _mm256_setzero_ps();
                                if (t0 + i < len[j])
                                        for (int c = 0; c < nc; c++)
                                                p[i] = _mm256_fmadd_ps(
                                                        qv[c], _mm256_load_ps(kf + (t0 + i) * hdp + 8 * c), p[i]);
                        }
                        __m256 r = _mm256_mul_ps(reduce8(p), vs);
                        _mm256_store_ps(sj + t0, r);
                        mx = _mm256_max_ps(mx, _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), r,
                                                                _mm256_castsi256_ps(tail_mask8(len[j] - t0))));
                }
                float mj = hmax8(mx);
                __m256 vm = _mm256_set1_ps(mj), sum = _mm256_setzero_ps();
                for (int t0 = 0; t0 < len[j]; t0 += 8) {
                        __m256 e = _mm256_and_ps(exp_neg(_mm256_sub_ps(_mm256_load_ps(sj + t0), vm)),
                                                 _mm256_castsi256_ps(tail_mask8(len[j] - t0)));
                        _mm256_store_ps(sj + t0, e);
                        sum = _mm256_add_ps(sum, e);
                }
                m[j] = mj;
                l[j] = hsum8(sum);
        }

        for (int j = 0; j < nv;) {
                if (nc <= 8) {
                        int sub = nv - j < 2 ? nv - j : 2;
                        accum(s + j * ATT_CHUNK, len + j, sub, vf, hdp, acc + (size_t) j * hd, hd, 8);
                        j += sub;
                } else {
                        float *a = acc + (size_t) j * hd;
                        for (int c = 0; c < nc; c++) {
                                __m256 ac = _mm256_setzero_ps();
                                for (int t = 0; t < len[j]; t++)
                                        ac = _mm256_fmadd_ps(_mm256_set1_ps(s[j * ATT_CHUNK + t]),
                                                             _mm256_load_ps(vf + t * hdp + 8 * c), ac);
                                _mm256_maskstore_ps(a + 8 * c, tail_mask8(hd - 8 * c), ac);
                        }
                        j++;
                }
        }
}

const axp_cpu_ops axp_cpu_ops_avx2 = {
        .name = "avx2",
        .quant = {
                [AXP_ACT_F32] = axp_quant_act_f32,
                [AXP_ACT_F16] = quant_f16,
                [AXP_ACT_Q8_0] = quant_q8_0,
                [AXP_ACT_Q8_K] = quant_q8_K,
        },
        .gemm = {
                [AXP_TYPE_F32] = gemm_f32,
                [AXP_TYPE_F16] = gemm_f16,
                [AXP_TYPE_BF16] = gemm_bf16,
                [AXP_TYPE_Q8_0] = gemm_q8_0,
                [AXP_TYPE_Q4_0] = gemm_q4_0,
                [AXP_TYPE_Q5_0] = gemm_q8_0, /* repacked as Q8_0 */
                [AXP_TYPE_IQ4_NL] = gemm_iq4_nl,
                [AXP_TYPE_Q4_1] = gemm_q4_1,
                [AXP_TYPE_Q5_1] = gemm_q5_1,
                [AXP_TYPE_Q4_K] = gemm_q4_K,
                [AXP_TYPE_Q5_K] = gemm_q5_K,
                [AXP_TYPE_Q6_K] = gemm_q6_K,
        },
        .att_chunk = att_chunk,
};
