/* SPDX-License-Identifier: MIT */
/* The AMX path (Sapphire Rapids and later): prefill products of Q8_0, Q4_0, Q5_0 and IQ4_NL
 * weights on the tile unit; everything else, and token tails too short to fill a tile, stays
 * on AVX-512.
 *
 * Per block of 32 inputs, one TDPBSSD multiplies a tile of 16 tokens' s8 activations (A, rows
 * straight from the activation buffer) by the group's weights (B: the packed layout is already
 * AMX's 4-byte-interleaved B layout; the weights are turned into s8 once per call) into 16x16
 * exact int32 sums. The sums are then scaled exactly as the AVX-512 kernel scales its own, in
 * the same order, so a token gives the same bits on either unit and batching stays invisible.
 * Two C tiles alternate so the tile unit runs two blocks ahead of the vector unit's scaling.
 * (K-quants gained nothing here over AVX-512 on this tile unit: per sub-block scaling and
 * tile stores dominate.) */
#include <immintrin.h>
#include <string.h>

#include "cpu.h"

/* The group's weights as s8 for TDPBSSD, which then needs no offset term: Q8_0 stored as
 * w + 128, Q4_0 as nibbles w + 8, IQ4_NL as nibbles indexing its levels, Q5_0 as quints
 * w + 16, out of the runs (cpu.h) into [nb][512] quants and [nb][16] scales. Done once per
 * call and reused by every token tile. (Only AVX-512 in it: test-kernels checks it on any
 * CPU with AVX-512, cpu.h.) */
void axp_amx_weights_s8(const uint8_t *g, int64_t nb, int type, uint8_t *out, uint16_t *sc) {
        const pk32 L = pk32_of((uint32_t) type);
        const __m512i m4 = _mm512_set1_epi8(0x0f);
        const __m512i flip = _mm512_set1_epi8((char) 0x80);
        /* nibble to s8: minus 8 (Q4_0) or the IQ4_NL level */
        int8_t l[16];
        for (int i = 0; i < 16; i++)
                l[i] = (int8_t) (type == AXP_TYPE_IQ4_NL ? axp_iq4nl_values[i] : i - 8);
        const __m512i lut = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *) l));
        for (int64_t b = 0; b < nb; b++) {
                const uint8_t *qs = g + pk32_quants(L, b);
                memcpy(sc + b * 16, g + pk32_scales(L, b), 32);
                if (type == AXP_TYPE_Q5_0) {
                        __m512i w[8];
                        quints_avx512(qs, w);
                        for (int j = 0; j < 8; j++)
                                _mm512_store_si512(out + b * 512 + j * 64, _mm512_sub_epi8(w[j], _mm512_set1_epi8(16)));
                } else if (type != AXP_TYPE_Q8_0)
                        for (int p = 0; p < 4; p++) {
                                __m512i v = _mm512_load_si512(qs + p * 64);
                                __m512i lo = _mm512_shuffle_epi8(lut, _mm512_and_si512(v, m4));
                                __m512i hi = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
                                _mm512_store_si512(out + b * 512 + 2 * p * 64, lo);
                                _mm512_store_si512(out + b * 512 + (2 * p + 1) * 64, hi);
                        }
                else
                        for (int j = 0; j < 8; j++)
                                _mm512_store_si512(out + b * 512 + j * 64,
                                                   _mm512_xor_si512(_mm512_load_si512(qs + j * 64),
                                                                    flip));
        }
}

#ifndef AXP_NO_AMX

#define AI __attribute__((always_inline)) static inline
#define UNROLL _Pragma("GCC unroll 16")
#define TM 16 /* tokens per tile */
/* below this many tokens a tile's fixed cost loses to AVX-512 */
#define AMX_MIN_TOKENS 6

/* tile registers (the intrinsics want literal numbers) */
#define T_C0 0
#define T_C1 1
#define T_A0 2
#define T_A1 3
#define T_B0 4
#define T_B1 5

AI __m256i ld32(const void *p) {
        return _mm256_load_si256((const __m256i *) p);
}

/* 16 f16 to f32 */
AI __m512 f16x16(const void *p) {
        return _mm512_cvtph_ps(ld32(p));
}

typedef struct tilecfg {
        uint8_t palette, start_row, reserved[14];
        uint16_t colsb[16];
        uint8_t rows[16];
} tilecfg;

/* kb: bytes of k per product (32, or 16 for Q6_K's sub-blocks) */
static void config(int kb) {
        tilecfg c;
        memset(&c, 0, sizeof(c));
        c.palette = 1;
        c.rows[T_C0] = c.rows[T_C1] = 16;
        c.colsb[T_C0] = c.colsb[T_C1] = 64;
        c.rows[T_A0] = c.rows[T_A1] = 16;
        c.colsb[T_A0] = c.colsb[T_A1] = (uint16_t) kb;
        c.rows[T_B0] = c.rows[T_B1] = (uint8_t) (kb / 4);
        c.colsb[T_B0] = c.colsb[T_B1] = 64;
        _tile_loadconfig(&c);
}

AI void store_rows(float *y, __m512 v, int n_rows) {
        if (n_rows == AXP_GROUP)
                _mm512_storeu_ps(y, v);
        else
                _mm512_mask_storeu_ps(y, (__mmask16) ((1u << n_rows) - 1), v);
}

/* The next group's weights are fetched from memory while this one computes: the products read
 * each group once, up front (to convert it), which would otherwise stall on DRAM. */
typedef struct prefetcher {
        const char *p, *end;
} prefetcher;

AI void prefetch_step(prefetcher *pf) {
        if (pf->p < pf->end) {
                _mm_prefetch(pf->p, _MM_HINT_T1);
                _mm_prefetch(pf->p + 64, _MM_HINT_T1);
                pf->p += 128;
        }
}

/* Q8_0 / Q4_0 ------------------------------------------------------------------------------- */

/* acc[m] += float(C[m]) * (dw * d of token m): the AVX-512 kernel's operations for one
 * block (its integer sums, offset included, equal C exactly) */
AI void epi_q8_0(const int32_t *cbuf, const float *da, __m512 dw, __m512 *acc) {
        UNROLL for (int m = 0; m < TM; m++)
                acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(cbuf + 16 * m)),
                                         _mm512_mul_ps(dw, _mm512_set1_ps(da[m])), acc[m]);
}

/* 16 tokens from row (stride apart) times the group's nb blocks of s8 weights at q (512 bytes
 * a block) */
static void q8_0_tile16(const uint8_t *q, const uint16_t *sc, const uint8_t *row, size_t stride,
                        const float *td, int64_t nb, float *y, long ldy, int n_tok, int n_rows,
                        prefetcher *pf) {
        _Alignas(64) int32_t cbuf[2][256];
        __m512 acc[TM];
        UNROLL for (int m = 0; m < TM; m++)
                acc[m] = _mm512_setzero_ps();
#define PRODUCT(C, A, B, blk)                                                                      \
        do {                                                                                       \
                _tile_zero(C);                                                                     \
                _tile_loadd(A, row + (blk) * ACT_Q8_0_BLOCK, stride);                              \
                _tile_loadd(B, q + (blk) * 512, 64);                                               \
                _tile_dpbssd(C, A, B);                                                             \
        } while (0)
#define SCALE(C, A, B, blk, buf)                                                                   \
        do {                                                                                       \
                _tile_stored(C, buf, 64);                                                          \
                if ((blk) + 2 < nb)                                                                \
                        PRODUCT(C, A, B, (blk) + 2);                                               \
                prefetch_step(pf);                                                                 \
                epi_q8_0(buf, td + (blk) * 16,                                                     \
                         f16x16(sc + (blk) * 16), acc); \
        } while (0)
        /* software pipelined: the tile unit runs two blocks ahead of the scaling */
        PRODUCT(T_C0, T_A0, T_B0, 0);
        if (nb > 1)
                PRODUCT(T_C1, T_A1, T_B1, 1);
        int64_t b = 0;
        for (; b + 2 <= nb; b += 2) {
                SCALE(T_C0, T_A0, T_B0, b, cbuf[0]);
                SCALE(T_C1, T_A1, T_B1, b + 1, cbuf[1]);
        }
        if (b < nb)
                SCALE(T_C0, T_A0, T_B0, b, cbuf[0]);
#undef PRODUCT
#undef SCALE
        /* a constant trip count keeps acc[] in registers */
        UNROLL for (int m = 0; m < TM; m++)
                if (m < n_tok)
                        store_rows(y + m * ldy, acc[m], n_rows);
}

static void gemm_q8_0_like(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y,
                           long ldy, int n_rows, int type) {
        int64_t k = act->k, nb = k / QK8_0;
        int n_amx = n_tok % TM >= AMX_MIN_TOKENS ? n_tok : n_tok / TM * TM;
        if (n_amx > 0) {
                uint8_t *q = axp_cpu_scratch(AXP_SCRATCH_UNPACK, (size_t) nb * (512 + 32));
                uint16_t *sc = (uint16_t *) (q + nb * 512);
                axp_amx_weights_s8(g, nb, type, q, sc);
                size_t gb = axp_pack_group_bytes((uint32_t) type, k);
                prefetcher pf = { (const char *) g + gb, (const char *) g + 2 * gb };
                config(32);
                for (int t = 0; t < n_amx; t += TM) {
                        const uint8_t *row = act->data + (t0 + t) * act->stride;
                        int n = n_amx - t < TM ? n_amx - t : TM;
                        const float *td = act->tile_d + (t0 + t) / TM * nb * TM;
                        q8_0_tile16(q, sc, row, act->stride, td, nb, y + t * ldy, ldy, n, n_rows, &pf);
                }
                _tile_release();
        }
        if (n_amx < n_tok)
                axp_cpu_ops_avx512.gemm[type](g, act, t0 + n_amx, n_tok - n_amx, y + n_amx * ldy, ldy, n_rows);
}

static void gemm_q8_0(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                      int n_rows) {
        gemm_q8_0_like(g, act, t0, n_tok, y, ldy, n_rows, AXP_TYPE_Q8_0);
}

static void gemm_q4_0(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                      int n_rows) {
        gemm_q8_0_like(g, act, t0, n_tok, y, ldy, n_rows, AXP_TYPE_Q4_0);
}

static void gemm_iq4_nl(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                        int n_rows) {
        gemm_q8_0_like(g, act, t0, n_tok, y, ldy, n_rows, AXP_TYPE_IQ4_NL);
}

static void gemm_q5_0(const uint8_t *g, const axp_act *act, int t0, int n_tok, float *y, long ldy,
                      int n_rows) {
        gemm_q8_0_like(g, act, t0, n_tok, y, ldy, n_rows, AXP_TYPE_Q5_0);
}

/* Q4_1 and Q5_1 (a minimum per block) run on the AVX-512 kernels */
const axp_gemm_fn axp_amx_gemm[AXP_TYPE__MAX] = {
        [AXP_TYPE_Q8_0] = gemm_q8_0,
        [AXP_TYPE_Q5_0] = gemm_q5_0,
        [AXP_TYPE_Q4_0] = gemm_q4_0,
        [AXP_TYPE_IQ4_NL] = gemm_iq4_nl,
};
#else
const axp_gemm_fn axp_amx_gemm[AXP_TYPE__MAX];
#endif
