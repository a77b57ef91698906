/* SPDX-License-Identifier: MIT */
/* Repacking GGUF weight rows into the interleaved 16-row groups every CPU path reads (layouts
 * in cpu.h). Used once per weight by axp_cpu_weight_prepare, and per group on the fly when a
 * product meets a weight that was not prepared. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/mman.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "kernels/macros.h"

size_t axp_pack_group_bytes(uint32_t type, int64_t k) {
        switch (type) {
        case AXP_TYPE_F32:
                return (size_t) k * AXP_GROUP * 4;
        case AXP_TYPE_F16:
        case AXP_TYPE_BF16:
                return axp_align_up((size_t) bf16_pairs(k) * AXP_GROUP * 4, AXP_ALIGN);
        case AXP_TYPE_Q8_0:
        case AXP_TYPE_Q5_0:
        case AXP_TYPE_Q4_0:
        case AXP_TYPE_IQ4_NL:
        case AXP_TYPE_Q4_1:
        case AXP_TYPE_Q5_1:
                return pk32_bytes(pk32_of(type), k / 32);
        case AXP_TYPE_Q4_K:
                return (size_t) (k / QK_K) * PK_Q4_K_SB;
        case AXP_TYPE_Q5_K:
                return (size_t) (k / QK_K) * PK_Q5_K_SB;
        case AXP_TYPE_Q6_K:
                return (size_t) (k / QK_K) * PK_Q6_K_SB;
        case AXP_TYPE_Q2_K:
                return (size_t) (k / QK_K) * PK_Q2_K_SB;
        case AXP_TYPE_Q3_K:
                return pk_q3_K_qs_offset(k) + (size_t) (k / QK_K) * PK_Q3_K_QS;
        case AXP_TYPE_IQ4_XS:
                return (size_t) (k / QK_K) * PK_IQ4_XS_SB;
        default:
                return 0;
        }
}

/* F16 and BF16: pairs of inputs, [k/2][16][2] */
static void pack_pairs16(const void *raw, uint64_t row_bytes, int64_t k, int n_rows, uint8_t *out) {
        uint16_t *o = (uint16_t *) out;
        /* whole pairs as 32-bit words, a line of the group (16 rows' pair) at a time: element
         * by element, row by row, F16 files loaded at 0.6 GB/s a core */
        for (int64_t p = 0; p < k / 2; p++)
                for (int r = 0; r < n_rows; r++)
                        memcpy(o + pair16_at(2 * p, r), (const uint8_t *) raw + r * row_bytes + 4 * p, 4);
        for (int r = 0; r < n_rows && k % 2; r++)
                memcpy(o + pair16_at(k - 1, r), (const uint8_t *) raw + r * row_bytes + 2 * (k - 1), 2);
}

static void pack_f32(const void *raw, uint64_t row_bytes, int64_t k, int n_rows, uint8_t *out) {
        float *o = (float *) out;
        for (int r = 0; r < n_rows; r++) {
                const float *src = (const float *) ((const uint8_t *) raw + r * row_bytes);
                for (int64_t i = 0; i < k; i++)
                        o[i * AXP_GROUP + r] = src[i];
        }
}

/* where the pack functions put row r's scale (and minimum) of block i, in the group out */
static void put_scale(uint8_t *out, pk32 L, int64_t i, int r, axp_f16 d) {
        memcpy(out + pk32_scales(L, i) + 2 * r, &d, 2);
}
static void put_min(uint8_t *out, pk32 L, int64_t i, int r, axp_f16 m) {
        memcpy(out + pk32_mins(L, i) + 2 * r, &m, 2);
}

static void pack_q8_0(const void *raw, uint64_t row_bytes, int64_t k, int n_rows, uint8_t *out) {
        int64_t nb = k / QK8_0;
        pk32 L = pk32_of(AXP_TYPE_Q8_0);
        for (int r = 0; r < n_rows; r++) {
                const block_q8_0 *b = (const block_q8_0 *) ((const uint8_t *) raw + r * row_bytes);
                for (int64_t i = 0; i < nb; i++) {
                        put_scale(out, L, i, r, b[i].d);
                        uint8_t *q = out + pk32_quants(L, i) + r * 4;
                        for (int j = 0; j < 8; j++) {
                                uint32_t v;
                                memcpy(&v, b[i].qs + 4 * j, 4);
                                v ^= 0x80808080u;
                                memcpy(q + j * 64, &v, 4);
                        }
                }
        }
}

/* One block's 32 quants of row r into a nibble block of the group (256 bytes: [4][16][4]) */
static void put_nibbles(const uint8_t *q, int r, uint8_t *blk) {
        uint8_t *o = blk + r * 4;
        for (int p = 0; p < 4; p++)
                for (int l = 0; l < 4; l++)
                        o[p * 64 + l] = (uint8_t) (q[8 * p + l] | q[8 * p + 4 + l] << 4);
}

/* Row r's 32 five-bit quants q (element order) as quints at blk (cpu.h): quads 0..4 in the
 * low five bits of five vectors, quads 5..7 in their top three */
static void put_quints(const uint8_t *q, int r, uint8_t *blk) {
        for (int l = 0; l < 4; l++) {
                const uint8_t *v = q + l; /* v[4m]: quad m */
                uint8_t *o = blk + r * 4 + l;
                o[0] = (uint8_t) (v[0] | (v[20] & 7) << 5);
                o[64] = (uint8_t) (v[4] | (v[20] >> 3) << 5 | (v[28] >> 3 & 1) << 7);
                o[128] = (uint8_t) (v[8] | (v[24] & 7) << 5);
                o[192] = (uint8_t) (v[12] | (v[24] >> 3) << 5 | (v[28] >> 4) << 7);
                o[256] = (uint8_t) (v[16] | (v[28] & 7) << 5);
        }
}

/* the 32 nibbles of a Q4_0/Q4_1/IQ4_NL block in element order */
static void nibbles_of(const uint8_t *qs, uint8_t *q) {
        for (int j = 0; j < 16; j++) {
                q[j] = qs[j] & 0x0f;
                q[j + 16] = qs[j] >> 4;
        }
}

/* the five-bit quants 0..31 of a Q5_0/Q5_1 block in element order */
static void q5_of(const uint8_t *qh4, const uint8_t *qs, uint8_t *q) {
        uint32_t qh;
        memcpy(&qh, qh4, 4); /* little-endian, as GGUF */
        for (int j = 0; j < 16; j++) {
                q[j] = (uint8_t) ((qs[j] & 0x0f) | ((qh >> j) & 1) << 4);
                q[j + 16] = (uint8_t) ((qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4);
        }
}

/* Q4_0 and IQ4_NL: the nibbles as they are (IQ4_NL's are level indices) */
static void pack_q4_0(const void *raw, uint64_t row_bytes, int64_t k, int n_rows, uint8_t *out) {
        int64_t nb = k / QK4_0;
        pk32 L = pk32_of(AXP_TYPE_Q4_0);
        for (int r = 0; r < n_rows; r++) {
                const block_q4_0 *b = (const block_q4_0 *) ((const uint8_t *) raw + r * row_bytes);
                for (int64_t i = 0; i < nb; i++) {
                        uint8_t q[32];
                        nibbles_of(b[i].qs, q);
                        put_scale(out, L, i, r, b[i].d);
                        put_nibbles(q, r, out + pk32_quants(L, i));
                }
        }
}
_Static_assert(sizeof(block_q4_0) == sizeof(block_iq4_nl), "IQ4_NL packs as Q4_0");

/* Q5_0: the quants 0..31 (w + 16) as quints */
static void pack_q5_0(const void *raw, uint64_t row_bytes, int64_t k, int n_rows, uint8_t *out) {
        int64_t nb = k / QK5_0;
        pk32 L = pk32_of(AXP_TYPE_Q5_0);
        for (int r = 0; r < n_rows; r++) {
                const block_q5_0 *b = (const block_q5_0 *) ((const uint8_t *) raw + r * row_bytes);
                for (int64_t i = 0; i < nb; i++) {
                        uint8_t q[32];
                        q5_of(b[i].qh, b[i].qs, q);
                        put_scale(out, L, i, r, b[i].d);
                        put_quints(q, r, out + pk32_quants(L, i));
                }
        }
}

static void pack_q4_1(const void *raw, uint64_t row_bytes, int64_t k, int n_rows, uint8_t *out) {
        int64_t nb = k / QK4_1;
        pk32 L = pk32_of(AXP_TYPE_Q4_1);
        for (int r = 0; r < n_rows; r++) {
                const block_q4_1 *b = (const block_q4_1 *) ((const uint8_t *) raw + r * row_bytes);
                for (int64_t i = 0; i < nb; i++) {
                        uint8_t q[32];
                        nibbles_of(b[i].qs, q);
                        put_scale(out, L, i, r, b[i].d);
                        put_min(out, L, i, r, b[i].m);
                        put_nibbles(q, r, out + pk32_quants(L, i));
                }
        }
}

static void pack_q5_1(const void *raw, uint64_t row_bytes, int64_t k, int n_rows, uint8_t *out) {
        int64_t nb = k / QK5_1;
        pk32 L = pk32_of(AXP_TYPE_Q5_1);
        for (int r = 0; r < n_rows; r++) {
                const block_q5_1 *b = (const block_q5_1 *) ((const uint8_t *) raw + r * row_bytes);
                for (int64_t i = 0; i < nb; i++) {
                        uint8_t q[32];
                        q5_of(b[i].qh, b[i].qs, q);
                        put_scale(out, L, i, r, b[i].d);
                        put_min(out, L, i, r, b[i].m);
                        put_quints(q, r, out + pk32_quants(L, i));
                }
        }
}

/* The 6-bit scale and min of sub-block j of a Q4_K block. */
static void q4k_get_scale_min(int j, const uint8_t *q, uint8_t *ret_sc, uint8_t *ret_m) {
        if (j < 4) {
                *ret_sc = q[j] & 63;
                *ret_m = q[j + 4] & 63;
        } else {
                *ret_sc = (uint8_t) ((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
                *ret_m = (uint8_t) ((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
        }
}

/* Q4_K, and Q5_K (high: five-bit quads as cpu.h says; the superblock is PK_Q5_K_SB bytes) */
static void pack_k_affine(const void *raw, uint64_t row_bytes, int64_t k, int n_rows, bool high,
                          uint8_t *out) {
        int64_t ns = k / QK_K;
        size_t sb_bytes = high ? PK_Q5_K_SB : PK_Q4_K_SB, blk = high ? sizeof(block_q5_K) : sizeof(block_q4_K);
        for (int r = 0; r < n_rows; r++) {
                const uint8_t *row = (const uint8_t *) raw + r * row_bytes;
                for (int64_t s = 0; s < ns; s++) {
                        /* Q5_K's d, dmin and scales sit where Q4_K's do */
                        const block_q4_K *b4 = (const block_q4_K *) (row + s * blk);
                        const block_q5_K *b5 = (const block_q5_K *) (row + s * blk);
                        const uint8_t *qs = high ? b5->qs : b4->qs;
                        uint8_t *sb = out + s * sb_bytes;
                        ((axp_f16 *) sb)[r] = b4->d;
                        ((axp_f16 *) (sb + 32))[r] = b4->dmin;
                        for (int j = 0; j < 8; j++) {
                                uint8_t sc, m;
                                q4k_get_scale_min(j, b4->scales, &sc, &m);
                                sb[64 + j * 16 + r] = sc;
                                sb[192 + (j / 2) * 32 + r * 2 + (j & 1)] = m;
                        }
                        /* sub-block j: weights 32j..32j+31; the GGUF block stores sub-blocks
                         * 2i and 2i+1 as the low and high nibbles of qs[32i..32i+31], their
                         * fifth bits (Q5_K) as bits 2i and 2i+1 of qh[0..31] */
                        uint8_t q[QK_K];
                        for (int i = 0; i < 4; i++)
                                for (int l = 0; l < 32; l++) {
                                        q[64 * i + l] = qs[32 * i + l] & 0x0f;
                                        q[64 * i + 32 + l] = qs[32 * i + l] >> 4;
                                        if (high) {
                                                q[64 * i + l] |= ((b5->qh[l] >> (2 * i)) & 1) << 4;
                                                q[64 * i + 32 + l] |= ((b5->qh[l] >> (2 * i + 1)) & 1) << 4;
                                        }
                                }
                        uint8_t *oq = sb + PK_Q4_K_HEAD;
                        for (int j = 0; j < 8; j++) {
                                if (high)
                                        put_quints(q + 32 * j, r, oq + j * 320);
                                else
                                        put_nibbles(q + 32 * j, r, oq + j * 256);
                        }
                }
        }
}

static void pack_q6_K(const void *raw, uint64_t row_bytes, int64_t k, int n_rows, uint8_t *out) {
        int64_t ns = k / QK_K;
        for (int r = 0; r < n_rows; r++) {
                const block_q6_K *b = (const block_q6_K *) ((const uint8_t *) raw + r * row_bytes);
                for (int64_t s = 0; s < ns; s++) {
                        uint8_t *sb = out + s * PK_Q6_K_SB;
                        ((axp_f16 *) sb)[r] = b[s].d;
                        for (int j = 0; j < 16; j++)
                                sb[32 + (j / 2) * 32 + r * 2 + (j & 1)] = (uint8_t) b[s].scales[j];
                        /* unsigned 6-bit values 0..63 in natural order (see dequant_q6_K) */
                        uint8_t q[QK_K];
                        const uint8_t *ql = b[s].ql, *qh = b[s].qh;
                        for (int n = 0; n < QK_K; n += 128, ql += 64, qh += 32)
                                for (int l = 0; l < 32; l++) {
                                        uint8_t h = qh[l];
                                        q[n + l] = (uint8_t) ((ql[l] & 0x0f) | (h & 3) << 4);
                                        q[n + l + 32] = (uint8_t) ((ql[l + 32] & 0x0f) | ((h >> 2) & 3) << 4);
                                        q[n + l + 64] = (uint8_t) ((ql[l] >> 4) | ((h >> 4) & 3) << 4);
                                        q[n + l + 96] = (uint8_t) ((ql[l + 32] >> 4) | ((h >> 6) & 3) << 4);
                                }
                        /* sub-block j: three vectors of 16 rows x 4 inputs, inputs 0..3,
                         * 4..7 and 8..11 in the low six bits of their bytes, the top two bits
                         * holding two bits of inputs 12..15 (cpu.h) */
                        uint8_t *qs = sb + PK_Q6_K_HEAD;
                        for (int j = 0; j < 16; j++) {
                                const uint8_t *v = q + 16 * j;
                                uint8_t *o = qs + j * 192 + r * 4;
                                for (int l = 0; l < 4; l++)
                                        for (int i = 0; i < 3; i++)
                                                o[64 * i + l] = (uint8_t) (v[4 * i + l] | ((v[12 + l] >> (2 * i)) & 3) << 6);
                        }
                }
        }
}

/* Q2_K: the two-bit quants of a superblock's row r (element order) into crumb vectors, 64
 * bytes per sub-block of 16 */
static void put_crumbs(const uint8_t *q, int r, uint8_t *out) {
        for (int j = 0; j < 16; j++)
                for (int i = 0; i < 4; i++) {
                        const uint8_t *v = q + 16 * j + i;
                        out[j * 64 + r * 4 + i] = (uint8_t) ((v[0] & 3) | (v[4] & 3) << 2 | (v[8] & 3) << 4 |
                                                             (v[12] & 3) << 6);
                }
}

static void pack_q2_K(const void *raw, uint64_t row_bytes, int64_t k, int n_rows, uint8_t *out) {
        int64_t ns = k / QK_K;
        for (int r = 0; r < n_rows; r++) {
                const block_q2_K *b = (const block_q2_K *) ((const uint8_t *) raw + r * row_bytes);
                for (int64_t s = 0; s < ns; s++) {
                        uint8_t *sb = out + s * PK_Q2_K_SB;
                        ((axp_f16 *) sb)[r] = b[s].d;
                        ((axp_f16 *) (sb + 32))[r] = b[s].dmin;
                        for (int j = 0; j < 16; j++)
                                sb[64 + (j / 2) * 32 + r * 2 + (j & 1)] = b[s].scales[j];
                        /* element 128 n + 32 j + l: bits 2j of qs[32 n + l] (as loops of
                         * 32 the compiler vectorizes: one element at a time, with its divisions,
                         * was most of a Q2_K file's load) */
                        uint8_t q[QK_K];
                        for (int n = 0; n < 2; n++)
                                for (int j = 0; j < 4; j++)
                                        for (int l = 0; l < 32; l++)
                                                q[128 * n + 32 * j + l] = (b[s].qs[32 * n + l] >> (2 * j)) & 3;
                        put_crumbs(q, r, sb + PK_Q2_K_HEAD);
                }
        }
}

static void pack_q3_K(const void *raw, uint64_t row_bytes, int64_t k, int n_rows, uint8_t *out) {
        int64_t ns = k / QK_K;
        uint8_t *qbase = out + pk_q3_K_qs_offset(k);
        for (int r = 0; r < n_rows; r++) {
                const block_q3_K *b = (const block_q3_K *) ((const uint8_t *) raw + r * row_bytes);
                for (int64_t s = 0; s < ns; s++) {
                        uint8_t *h = out + s * PK_Q3_K_HEAD;
                        ((axp_f16 *) h)[r] = b[s].d;
                        uint8_t sc[16];
                        axp_q3_K_scales(b[s].scales, sc);
                        for (int j = 0; j < 16; j++) {
                                h[32 + (j / 2) * 16 + r] |= (uint8_t) ((sc[j] & 15) << (4 * (j & 1)));
                                h[160 + (j / 4) * 16 + r] |= (uint8_t) ((sc[j] >> 4) << (2 * (j & 3)));
                        }
                        uint8_t q[QK_K];
                        for (int n = 0; n < 2; n++)
                                for (int j = 0; j < 4; j++)
                                        for (int l = 0; l < 32; l++)
                                                q[128 * n + 32 * j + l] =
                                                        (uint8_t) (((b[s].qs[32 * n + l] >> (2 * j)) & 3) |
                                                                   ((b[s].hmask[l] >> (4 * n + j)) & 1) << 2);
                        uint8_t *qs = qbase + s * PK_Q3_K_QS;
                        for (int p = 0; p < 8; p++)
                                for (int i = 0; i < 4; i++) {
                                        const uint8_t *e = q + 32 * p + i, *o = e + 16;
                                        uint8_t *v = qs + 192 * p + r * 4 + i;
                                        v[0] = (uint8_t) (e[0] | o[0] << 3 | (e[12] & 3) << 6);
                                        v[64] = (uint8_t) (e[4] | o[4] << 3 | (e[12] >> 2) << 6 | (o[12] >> 2) << 7);
                                        v[128] = (uint8_t) (e[8] | o[8] << 3 | (o[12] & 3) << 6);
                                }
                }
        }
}

static void pack_iq4_xs(const void *raw, uint64_t row_bytes, int64_t k, int n_rows, uint8_t *out) {
        int64_t ns = k / QK_K;
        for (int r = 0; r < n_rows; r++) {
                const block_iq4_xs *b = (const block_iq4_xs *) ((const uint8_t *) raw + r * row_bytes);
                for (int64_t s = 0; s < ns; s++) {
                        uint8_t *sb = out + s * PK_IQ4_XS_SB;
                        ((axp_f16 *) sb)[r] = b[s].d;
                        for (int j = 0; j < 8; j++) {
                                int lo = (b[s].scales_l[j / 2] >> (4 * (j % 2))) & 15;
                                int hi = (b[s].scales_h >> (2 * j)) & 3;
                                sb[32 + (j / 2) * 16 + r] |= (uint8_t) (lo << (4 * (j & 1)));
                                sb[96 + (j / 4) * 16 + r] |= (uint8_t) (hi << (2 * (j & 3)));
                                uint8_t q[32];
                                nibbles_of(b[s].qs + 16 * j, q);
                                put_nibbles(q, r, sb + PK_IQ4_XS_HEAD + j * 256);
                        }
                }
        }
}

void axp_pack_group(uint32_t type, const void *raw, uint64_t row_bytes, int64_t k, int n_rows,
                    uint8_t *out) {
        size_t bytes = axp_pack_group_bytes(type, k);
        /* padding rows are zero; a zero Q8_0 weight is 0x80 after the sign flip */
        memset(out, 0, bytes);
        if (type == AXP_TYPE_Q8_0) {
                const pk32 L = pk32_of(type);
                for (int64_t b = 0; b < k / 32; b++)
                        memset(out + pk32_quants(L, b), 0x80, L.qb);
        }
        switch (type) {
        case AXP_TYPE_F32:
                pack_f32(raw, row_bytes, k, n_rows, out);
                break;
        case AXP_TYPE_F16:
        case AXP_TYPE_BF16:
                pack_pairs16(raw, row_bytes, k, n_rows, out);
                break;
        case AXP_TYPE_Q8_0:
                pack_q8_0(raw, row_bytes, k, n_rows, out);
                break;
        case AXP_TYPE_Q4_0:
        case AXP_TYPE_IQ4_NL:
                pack_q4_0(raw, row_bytes, k, n_rows, out);
                break;
        case AXP_TYPE_Q5_0:
                pack_q5_0(raw, row_bytes, k, n_rows, out);
                break;
        case AXP_TYPE_Q4_1:
                pack_q4_1(raw, row_bytes, k, n_rows, out);
                break;
        case AXP_TYPE_Q5_1:
                pack_q5_1(raw, row_bytes, k, n_rows, out);
                break;
        case AXP_TYPE_Q4_K:
                pack_k_affine(raw, row_bytes, k, n_rows, false, out);
                break;
        case AXP_TYPE_Q5_K:
                pack_k_affine(raw, row_bytes, k, n_rows, true, out);
                break;
        case AXP_TYPE_Q6_K:
                pack_q6_K(raw, row_bytes, k, n_rows, out);
                break;
        case AXP_TYPE_Q2_K:
                pack_q2_K(raw, row_bytes, k, n_rows, out);
                break;
        case AXP_TYPE_Q3_K:
                pack_q3_K(raw, row_bytes, k, n_rows, out);
                break;
        case AXP_TYPE_IQ4_XS:
                pack_iq4_xs(raw, row_bytes, k, n_rows, out);
                break;
        default:
                break;
        }
}

/* Packed weights live in slabs of anonymous memory that start on a 2 MiB boundary and are
 * advised for transparent huge pages: a small matrix (a 1B model's K and V are half a
 * megabyte, its Q and O 2.4 MB) shares a slab with the next ones instead of lying on 4 KiB
 * pages, each of them a TLB miss and a stop for the hardware prefetcher. A matrix of more than
 * a quarter slab gets a slab of its own. A slab is unmapped when its last weight is released;
 * the unused end of one that is full is unmapped when the next slab starts. */
#define HUGE_PAGE ((size_t) 2 << 20)
#define SLAB_BYTES ((size_t) 32 << 20)
#define PAGE_BYTES ((size_t) 4096)

struct axp_pk_slab {
        uint8_t *base;
        size_t size, used;
        unsigned refs;
};

static pthread_mutex_t slab_lock = PTHREAD_MUTEX_INITIALIZER;
static axp_pk_slab *slab_cur; /* where small weights go next */

/* size (a multiple of PAGE_BYTES) bytes from a 2 MiB boundary */
static axp_pk_slab *slab_new(size_t size) {
        axp_pk_slab *s = calloc(1, sizeof(*s));
        if (!s)
                return NULL;
        size_t n = size + HUGE_PAGE;
        uint8_t *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
                free(s);
                return NULL;
        }
        uint8_t *a = (uint8_t *) axp_align_up((uintptr_t) p, HUGE_PAGE);
        if (a > p)
                munmap(p, (size_t) (a - p));
        if (p + n > a + size)
                munmap(a + size, (size_t) (p + n - (a + size)));
        axp_cpu_advise_huge(a, size);
        s->base = a;
        s->size = size;
        return s;
}

/* n bytes (64-aligned) for a packed weight, and the slab to give them back to */
static uint8_t *pk_alloc(size_t n, axp_pk_slab **ret) {
        n = axp_align_up(n, AXP_ALIGN);
        uint8_t *p = NULL;
        pthread_mutex_lock(&slab_lock);
        axp_pk_slab *s;
        if (n > SLAB_BYTES / 4) {
                s = slab_new(axp_align_up(n, PAGE_BYTES));
        } else {
                if (slab_cur && slab_cur->used + n > slab_cur->size) {
                        /* full: its unused end goes back; its weights keep the rest */
                        axp_pk_slab *old = slab_cur;
                        size_t keep = axp_align_up(old->used, PAGE_BYTES);
                        if (keep < old->size)
                                munmap(old->base + keep, old->size - keep);
                        old->size = keep;
                        slab_cur = NULL;
                }
                if (!slab_cur)
                        slab_cur = slab_new(SLAB_BYTES);
                s = slab_cur;
        }
        if (s) {
                p = s->base + s->used;
                s->used += n;
                s->refs++;
        }
        pthread_mutex_unlock(&slab_lock);
        *ret = s;
        return p;
}

static void pk_free(axp_pk_slab *s) {
        pthread_mutex_lock(&slab_lock);
        if (--s->refs == 0) {
                if (s == slab_cur)
                        slab_cur = NULL;
                munmap(s->base, s->size);
                free(s);
        }
        pthread_mutex_unlock(&slab_lock);
}

/* A weight's groups packed by the threads of a pool, each a range of them */
typedef struct pack_job {
        const axp_weight *w;
        axp_packed *p;
        _Atomic bool min8; /* a Q8_0 quant of -128 was seen (0 after the sign flip) */
} pack_job;

static void pack_fn(void *arg, int ith, int nth) {
        pack_job *j = arg;
        const axp_weight *w = j->w;
        axp_packed *p = j->p;
        const pk32 L = pk32_of(w->type);
        bool min8 = false;
        long lo, hi;
        axp_split(p->n_groups, ith, nth, 1, &lo, &hi);
        for (long g = lo; g < hi; g++) {
                int n_rows = (int) MIN(AXP_GROUP, w->n_out - g * AXP_GROUP);
                uint8_t *out = p->data + g * p->group_bytes;
                axp_pack_group(w->type, (const uint8_t *) w->data + (uint64_t) g * AXP_GROUP * w->row_bytes,
                               w->row_bytes, w->n_in, n_rows, out);
                /* looked for while the group is still in cache */
                for (int64_t b = 0; w->type == AXP_TYPE_Q8_0 && !min8 && b < w->n_in / 32; b++)
                        min8 = memchr(out + pk32_quants(L, b), 0, L.qb) != NULL;
        }
        if (min8)
                atomic_store_explicit(&j->min8, true, memory_order_relaxed);
}

int axp_cpu_weight_prepare_on(axp_pool *pool, axp_weight *w) {
        if (!w || !w->data || w->n_in <= 0 || w->n_out <= 0)
                return -EINVAL;
        if (w->priv)
                return 0;
        size_t gb = axp_pack_group_bytes(w->type, w->n_in);
        if (gb == 0)
                return -EOPNOTSUPP;
        if (w->row_bytes < axp_type_row_size(w->type, w->n_in))
                return -EINVAL;
        int64_t n_groups = DIV_ROUND_UP(w->n_out, AXP_GROUP);
        uint64_t total;
        if (!axp_mul_ok((uint64_t) n_groups, gb, &total))
                return -EOVERFLOW;

        axp_packed *p = calloc(1, sizeof(*p));
        if (!p)
                return -ENOMEM;
        p->data = total <= SIZE_MAX / 2 ? pk_alloc((size_t) total, &p->slab) : NULL;
        if (!p->data) {
                free(p);
                return -ENOMEM;
        }
        p->magic = AXP_PACKED_MAGIC;
        p->type = w->type;
        p->n_in = w->n_in;
        p->n_out = w->n_out;
        p->n_groups = n_groups;
        p->group_bytes = gb;
        pack_job j = { .w = w, .p = p };
        if (pool)
                axp_pool_run(pool, pack_fn, &j);
        else
                pack_fn(&j, 0, 1);
        /* a Q8_0 weight without a quant of -128 takes the products' faster sums */
        p->no_min8 = w->type == AXP_TYPE_Q8_0 && !atomic_load_explicit(&j.min8, memory_order_relaxed);
        w->priv = p;
        return 0;
}

int axp_cpu_weight_prepare(axp_weight *w) {
        return axp_cpu_weight_prepare_on(NULL, w);
}

void axp_cpu_weight_release(axp_weight *w) {
        if (!w || !w->priv)
                return;
        axp_packed *p = w->priv;
        if (p->magic == AXP_PACKED_MAGIC) {
                pk_free(p->slab);
                free(p);
        }
        w->priv = NULL;
}

void axp_cpu_advise_huge(void *p, size_t n) {
#ifdef MADV_HUGEPAGE
        uintptr_t lo = ((uintptr_t) p + 4095) & ~(uintptr_t) 4095, hi = ((uintptr_t) p + n) & ~(uintptr_t) 4095;
        if (n >= (2u << 20) && hi > lo)
                (void) madvise((void *) lo, hi - lo, MADV_HUGEPAGE);
#else
        (void) p;
        (void) n;
#endif
}

void *axp_cpu_huge_alloc(size_t n) {
        void *p = NULL;
        n = n ? axp_align_up(n, PAGE_BYTES) : PAGE_BYTES;
        if (posix_memalign(&p, n >= HUGE_PAGE ? HUGE_PAGE : PAGE_BYTES, n) != 0)
                return NULL;
        axp_cpu_advise_huge(p, n);
        return p;
}
