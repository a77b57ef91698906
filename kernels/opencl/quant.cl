/* SPDX-License-Identifier: MIT */
/* Weight rows of every supported type, read 32 elements at a time (a block of 32, a
 * sub-block of a Q4_K/Q6_K super-block, 32 floats), and the two kernels built on them: the
 * token embedding lookup and the matrix product Y = X W^T. Block layouts as in GGUF. */

void dq32_f32(__global const uchar *row, int u, float *w) {
        __global const float *p = (__global const float *) row + u * 32;
        for (int i = 0; i < 32; i++)
                w[i] = p[i];
}

void dq32_f16(__global const uchar *row, int u, float *w) {
        __global const half *p = (__global const half *) row + u * 32;
        for (int i = 0; i < 32; i++)
                w[i] = vload_half(i, p);
}

void dq32_bf16(__global const uchar *row, int u, float *w) {
        __global const ushort *p = (__global const ushort *) row + u * 32;
        for (int i = 0; i < 32; i++)
                w[i] = as_float((uint) p[i] << 16);
}

/* block_q8_0: half d, int8 qs[32] (34 bytes) */
void dq32_q8_0(__global const uchar *row, int u, float *w) {
        __global const uchar *b = row + u * 34;
        const float d = vload_half(0, (__global const half *) b);
        __global const char *q = (__global const char *) (b + 2);
        vstore16(d * convert_float16(vload16(0, q)), 0, w);
        vstore16(d * convert_float16(vload16(1, q)), 1, w);
}

/* block_q4_0: half d, uint8 qs[16]; low nibbles are elements 0..15, high ones 16..31 */
void dq32_q4_0(__global const uchar *row, int u, float *w) {
        __global const uchar *b = row + u * 18;
        const float d = vload_half(0, (__global const half *) b);
        for (int j = 0; j < 16; j++) {
                const uchar q = b[2 + j];
                w[j] = d * (float) ((int) (q & 15) - 8);
                w[j + 16] = d * (float) ((int) (q >> 4) - 8);
        }
}

/* block_q4_1: half d, half m, uint8 qs[16]; element = d * nibble + m */
void dq32_q4_1(__global const uchar *row, int u, float *w) {
        __global const uchar *b = row + u * 20;
        const float d = vload_half(0, (__global const half *) b);
        const float m = vload_half(1, (__global const half *) b);
        for (int j = 0; j < 16; j++) {
                const uchar q = b[4 + j];
                w[j] = (float) (q & 15) * d + m;
                w[j + 16] = (float) (q >> 4) * d + m;
        }
}

/* The fifth bits of a Q5_0/Q5_1 block: bit j of the little-endian word at qh is element j's. */
uint q5_high(__global const uchar *qh) {
        return (uint) qh[0] | (uint) qh[1] << 8 | (uint) qh[2] << 16 | (uint) qh[3] << 24;
}

/* block_q5_0: half d, uint8 qh[4], uint8 qs[16]; element = d * (5-bit quant - 16) */
void dq32_q5_0(__global const uchar *row, int u, float *w) {
        __global const uchar *b = row + u * 22;
        const float d = vload_half(0, (__global const half *) b);
        const uint qh = q5_high(b + 2);
        for (int j = 0; j < 16; j++) {
                const uchar q = b[6 + j];
                w[j] = (float) ((int) ((q & 15) | ((qh >> j) & 1) << 4) - 16) * d;
                w[j + 16] = (float) ((int) ((q >> 4) | ((qh >> (j + 16)) & 1) << 4) - 16) * d;
        }
}

/* block_q5_1: half d, half m, uint8 qh[4], uint8 qs[16]; element = d * 5-bit quant + m */
void dq32_q5_1(__global const uchar *row, int u, float *w) {
        __global const uchar *b = row + u * 24;
        const float d = vload_half(0, (__global const half *) b);
        const float m = vload_half(1, (__global const half *) b);
        const uint qh = q5_high(b + 4);
        for (int j = 0; j < 16; j++) {
                const uchar q = b[8 + j];
                w[j] = (float) ((q & 15) | ((qh >> j) & 1) << 4) * d + m;
                w[j + 16] = (float) ((q >> 4) | ((qh >> (j + 16)) & 1) << 4) * d + m;
        }
}

/* IQ4_NL's 16 levels */
__constant char iq4nl_values[16] = { -127, -104, -83, -65, -49, -35, -22, -10,
                                     1,    13,   25,  38,  53,  69,  89,  113 };

/* block_iq4_nl: half d, uint8 qs[16] as Q4_0's, indexing the levels */
void dq32_iq4_nl(__global const uchar *row, int u, float *w) {
        __global const uchar *b = row + u * 18;
        const float d = vload_half(0, (__global const half *) b);
        for (int j = 0; j < 16; j++) {
                const uchar q = b[2 + j];
                w[j] = d * (float) iq4nl_values[q & 15];
                w[j + 16] = d * (float) iq4nl_values[q >> 4];
        }
}

/* block_q4_K (144 bytes): half d, half dmin, 12 bytes of packed 6-bit scales and mins,
 * 128 bytes of nibbles. Sub-block s uses scale/min s and the low (even s) or high (odd s)
 * nibbles of bytes 32 * (s / 2) .. + 31. */
void dq32_q4_k(__global const uchar *row, int u, float *w) {
        __global const uchar *b = row + (u / 8) * 144;
        const int s = u % 8;
        const float d = vload_half(0, (__global const half *) b);
        const float dmin = vload_half(1, (__global const half *) b);
        __global const uchar *sc = b + 4, *q = b + 16 + 32 * (s / 2);
        uint scale, mn;
        if (s < 4) {
                scale = sc[s] & 63;
                mn = sc[s + 4] & 63;
        } else {
                scale = (sc[s + 4] & 15) | ((sc[s - 4] >> 6) << 4);
                mn = (sc[s + 4] >> 4) | ((sc[s] >> 6) << 4);
        }
        const float d1 = d * (float) scale, m1 = dmin * (float) mn;
        const int shift = (s & 1) * 4;
        for (int l = 0; l < 32; l++)
                w[l] = d1 * (float) ((q[l] >> shift) & 15) - m1;
}

/* The 6-bit scale and min of sub-block s of a Q4_K/Q5_K block's 12 scale bytes. */
void k_scale_min(__global const uchar *sc, int s, uint *scale, uint *mn) {
        if (s < 4) {
                *scale = sc[s] & 63;
                *mn = sc[s + 4] & 63;
        } else {
                *scale = (sc[s + 4] & 15) | ((sc[s - 4] >> 6) << 4);
                *mn = (sc[s + 4] >> 4) | ((sc[s] >> 6) << 4);
        }
}

/* block_q5_K (176 bytes): as Q4_K (half d, half dmin, 12 scale bytes) then uint8 qh[32]
 * and the 128 bytes of nibbles; element l of sub-block s has its fifth bit at bit s of
 * qh[l]. */
void dq32_q5_k(__global const uchar *row, int u, float *w) {
        __global const uchar *b = row + (u / 8) * 176;
        const int s = u % 8;
        const float d = vload_half(0, (__global const half *) b);
        const float dmin = vload_half(1, (__global const half *) b);
        __global const uchar *qh = b + 16, *q = b + 48 + 32 * (s / 2);
        uint scale, mn;
        k_scale_min(b + 4, s, &scale, &mn);
        const float d1 = d * (float) scale, m1 = dmin * (float) mn;
        const int shift = (s & 1) * 4;
        for (int l = 0; l < 32; l++)
                w[l] = d1 * (float) (((q[l] >> shift) & 15) | ((qh[l] >> s) & 1) << 4) - m1;
}

/* block_q6_K (210 bytes): uint8 ql[128], uint8 qh[64], int8 scales[16], half d. Each half
 * of 128 elements holds four quarters of 32: quarter k takes the low (k < 2) or high
 * nibble of ql[l + 32 * (k & 1)], two bits 2k of qh[l], and scale is + 2k (is = l / 16). */
void dq32_q6_k(__global const uchar *row, int u, float *w) {
        __global const uchar *b = row + (u / 8) * 210;
        const int s = u % 8, h = s / 4, k = s % 4;
        const float d = vload_half(0, (__global const half *) (b + 208));
        __global const uchar *ql = b + 64 * h + 32 * (k & 1), *qh = b + 128 + 32 * h;
        __global const char *sc = (__global const char *) (b + 192) + 8 * h + 2 * k;
        const int lshift = (k >> 1) * 4, hshift = 2 * k;
        for (int l = 0; l < 32; l++) {
                const int q = (int) (((ql[l] >> lshift) & 15) | (((qh[l] >> hshift) & 3) << 4)) - 32;
                w[l] = d * (float) sc[l / 16] * (float) q;
        }
}

/* block_q2_K (84 bytes): uint8 scales[16] (scale | min << 4 per sub-block of 16), uint8
 * qs[64], half d, half dmin. Sub-block of 32 s = 4n + j takes bits 2j of qs[32n .. 32n + 31],
 * scales 8n + 2j and 8n + 2j + 1. */
void dq32_q2_k(__global const uchar *row, int u, float *w) {
        __global const uchar *b = row + (u / 8) * 84;
        const int s = u % 8, n = s / 4, j = s % 4;
        const float d = vload_half(40, (__global const half *) b);
        const float dmin = vload_half(41, (__global const half *) b);
        __global const uchar *q = b + 16 + 32 * n;
        for (int l = 0; l < 32; l++) {
                const uchar sc = b[8 * n + 2 * j + l / 16];
                w[l] = d * (float) (sc & 15) * (float) ((q[l] >> (2 * j)) & 3) - dmin * (float) (sc >> 4);
        }
}

/* The 6-bit scale (0..63, the value less 32) of sub-block s of a Q3_K block's 12 bytes. */
int q3k_scale(__global const uchar *sc, int s) {
        const int lo = s < 8 ? sc[s] & 15 : sc[s - 8] >> 4;
        return lo | ((sc[8 + s % 4] >> (2 * (s / 4))) & 3) << 4;
}

/* block_q3_K (110 bytes): uint8 hmask[32], uint8 qs[64], 12 scale bytes, half d. Sub-block of
 * 32 s = 4n + j: low bits as Q2_K's, third bit at bit s of hmask[l]; element = d * (sc - 32) *
 * (q - 4). */
void dq32_q3_k(__global const uchar *row, int u, float *w) {
        __global const uchar *b = row + (u / 8) * 110;
        const int s = u % 8, n = s / 4, j = s % 4;
        const float d = vload_half(54, (__global const half *) b);
        __global const uchar *q = b + 32 + 32 * n;
        const float d0 = d * (float) (q3k_scale(b + 96, 2 * s) - 32);
        const float d1 = d * (float) (q3k_scale(b + 96, 2 * s + 1) - 32);
        for (int l = 0; l < 32; l++) {
                const int v = (((q[l] >> (2 * j)) & 3) | ((b[l] >> s) & 1) << 2) - 4;
                w[l] = (l < 16 ? d0 : d1) * (float) v;
        }
}

/* The 6-bit scale of sub-block s of an IQ4_XS block, 0..63 (the value less 32). */
int iq4xs_scale(__global const uchar *b, int s) {
        const uint sh = (uint) b[2] | (uint) b[3] << 8;
        return ((b[4 + s / 2] >> (4 * (s % 2))) & 15) | ((sh >> (2 * s)) & 3) << 4;
}

/* block_iq4_xs (136 bytes): half d, uint16 scales_h, uint8 scales_l[4], uint8 qs[128] (16 a
 * sub-block of 32, as IQ4_NL's) */
void dq32_iq4_xs(__global const uchar *row, int u, float *w) {
        __global const uchar *b = row + (u / 8) * 136;
        const int s = u % 8;
        const float dl = vload_half(0, (__global const half *) b) * (float) (iq4xs_scale(b, s) - 32);
        __global const uchar *q = b + 8 + 16 * s;
        for (int j = 0; j < 16; j++) {
                w[j] = dl * (float) iq4nl_values[q[j] & 15];
                w[j + 16] = dl * (float) iq4nl_values[q[j] >> 4];
        }
}

/* TT (from the host's build options): tokens per work-group of the matrix product; each
 * item keeps TT partial sums.
 *
 * Float activations (F32 weights; F16 and BF16 weights after act_f16 and act_bf16 rounded them):
 * Y[y_off + t * ldy + r] = sum_k W[r][k] * X[x_off + t * ldx + k] for rows r < n_out and
 * tokens t < n_tok. A work-group holds WG >> kl_log2 rows; the 1 << kl_log2 items of a row
 * take every (1 << kl_log2)-th unit of the row (32 elements here), then their partial sums
 * are added in local memory. The second dimension walks the tokens TT at a time. */
#define MATMUL_HEAD(TOKENS)                                                                       \
        __local float red[WG * TT];                                                                \
        const int lid = get_local_id(0), KL = 1 << kl_log2, kl = lid & (KL - 1);                   \
        const int r = get_group_id(0) * (WG >> kl_log2) + (lid >> kl_log2);                        \
        TOKENS                                                                                     \
        float acc[TT];                                                                             \
        for (int t = 0; t < TT; t++)                                                               \
                acc[t] = 0;

/* the tokens of a work-group: the second dimension walks them TT at a time */
#define TOKENS_STEP                                                                                \
        const int t0 = get_group_id(1) * TT;                                                       \
        const int nt = min(TT, n_tok - t0);

/* matmul_id_*: the second dimension walks a table of blocks (expert, first row, rows) of a
 * mixture of experts' rows (moe.cl's moe_plan); W + woff is expert 0 of a stacked tensor,
 * expert e's rows start e * estride bytes on. A block of expert -1 is padding. */
#define TOKENS_BLOCK                                                                               \
        const int ex = blk[3 * get_group_id(1)];                                                   \
        if (ex < 0)                                                                                \
                return;                                                                            \
        const int t0 = blk[3 * get_group_id(1) + 1];                                               \
        const int nt = blk[3 * get_group_id(1) + 2];                                               \
        woff += (ulong) ex * estride;

#define MATMUL_TAIL                                                                                \
        for (int t = 0; t < nt; t++)                                                               \
                red[lid * TT + t] = acc[t];                                                        \
        barrier(CLK_LOCAL_MEM_FENCE);                                                              \
        for (int s = KL / 2; s > 0; s >>= 1) {                                                     \
                if (kl < s)                                                                        \
                        for (int t = 0; t < nt; t++)                                               \
                                red[lid * TT + t] += red[(lid + s) * TT + t];                      \
                barrier(CLK_LOCAL_MEM_FENCE);                                                      \
        }                                                                                          \
        if (kl == 0 && r < n_out)                                                                  \
                for (int t = 0; t < nt; t++)                                                       \
                        Y[y_off + (long) (t0 + t) * ldy + r] = red[lid * TT + t];

#define MATMUL_BODY_F(T)                                                                          \
        if (r < n_out) {                                                                           \
                __global const uchar *row = W + woff + (ulong) r * row_bytes;                      \
                const int nu = n_in / 32;                                                          \
                for (int u = kl; u < nu; u += KL) {                                                \
                        float w[32];                                                               \
                        dq32_##T(row, u, w);                                                       \
                        for (int t = 0; t < nt; t++) {                                             \
                                __global const float *x =                                          \
                                        X + x_off + (long) (t0 + t) * ldx + u * 32;                \
                                float4 s = 0;                                                      \
                                for (int i = 0; i < 8; i++)                                        \
                                        s += vload4(i, w) * vload4(i, x);                          \
                                acc[t] += (s.x + s.y) + (s.z + s.w);                               \
                        }                                                                          \
                }                                                                                  \
        }                                                                                          \
        MATMUL_TAIL

#define DEF_MATMUL(T)                                                                              \
        __kernel WG_ATTR void matmul_##T(__global const uchar *W, ulong woff, ulong row_bytes,     \
                                         int n_in, int n_out, int kl_log2,                         \
                                         __global const float *X, int x_off, int ldx,              \
                                         __global float *Y, int y_off, int ldy, int n_tok) {       \
                MATMUL_HEAD(TOKENS_STEP)                                                           \
                MATMUL_BODY_F(T)                                                                   \
        }                                                                                          \
        __kernel WG_ATTR void matmul_id_##T(__global const uchar *W, ulong woff, ulong row_bytes,  \
                                            int n_in, int n_out, int kl_log2,                      \
                                            __global const float *X, int x_off, int ldx,           \
                                            __global float *Y, int y_off, int ldy,                 \
                                            __global const int *blk, ulong estride) {              \
                MATMUL_HEAD(TOKENS_BLOCK)                                                          \
                MATMUL_BODY_F(T)                                                                   \
        }

/* Integer weights take the activations quantized by act_q8_0 / act_q8_k (act.cl): per block
 * an exact integer dot product, then the block's float terms as the CPU kernels combine them
 * (kernels/cpu/gemm-generic.c). The unit an item takes is a block of 32 (Q8_0, Q4_0, Q4_1,
 * Q5_0, Q5_1, IQ4_NL) or a super-block of 256 (Q4_K, Q5_K, Q6_K). dot_T adds unit u of a weight
 * row, for tokens t < nt of the quantized rows of k values from aq, ad, as (Q8_1 sums for the
 * blocks of 32, sums of 32 for the super-blocks), to acc[t]. */

int hsum16(int16 v) {
        const int8 a = v.lo + v.hi;
        const int4 b = a.lo + a.hi;
        const int2 c = b.lo + b.hi;
        return c.x + c.y;
}

int16 a16(__global const char *a, int i) {
        return convert_int16(vload16(i, a));
}

/* block_q8_0: half d, int8 qs[32] */
void dot_q8_0(__global const uchar *row, int u, __global const char *aq, __global const float *ad,
              __global const float *as, int k, int nt, float *acc) {
        __global const uchar *b = row + u * 34;
        const float d = vload_half(0, (__global const half *) b);
        __global const char *q = (__global const char *) (b + 2);
        const int16 w0 = a16(q, 0), w1 = a16(q, 1);
        for (int t = 0; t < nt; t++) {
                __global const char *a = aq + (long) t * k + u * 32;
                const int isum = hsum16(w0 * a16(a, 0) + w1 * a16(a, 1));
                acc[t] += (float) isum * (d * ad[(long) t * (k / 32) + u]);
        }
}

/* block_q4_0: half d, uint8 qs[16]; element j is low nibble j (j < 16) or high nibble j - 16,
 * minus 8 */
void dot_q4_0(__global const uchar *row, int u, __global const char *aq, __global const float *ad,
              __global const float *as, int k, int nt, float *acc) {
        __global const uchar *b = row + u * 18;
        const float d = vload_half(0, (__global const half *) b);
        const uchar16 q = vload16(0, b + 2);
        const int16 lo = convert_int16(q & (uchar) 15) - 8, hi = convert_int16(q >> (uchar) 4) - 8;
        for (int t = 0; t < nt; t++) {
                __global const char *a = aq + (long) t * k + u * 32;
                const int isum = hsum16(lo * a16(a, 0) + hi * a16(a, 1));
                acc[t] += (float) isum * (d * ad[(long) t * (k / 32) + u]);
        }
}

/* The 32 quants of a Q5_0/Q5_1 block (qh, qs) as 0..31 in element order: lo 0..15, hi 16..31 */
void q5_quants(__global const uchar *qh4, __global const uchar *qs, int16 *lo, int16 *hi) {
        const uint qh = q5_high(qh4);
        const uchar16 q = vload16(0, qs);
        const int16 bit = (int16) (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        const int16 h = (int16) ((int) qh);
        *lo = convert_int16(q & (uchar) 15) | (((h >> bit) & 1) << 4);
        *hi = convert_int16(q >> (uchar) 4) | (((h >> (bit + 16)) & 1) << 4);
}

/* block_q4_1 (layout at dq32_q4_1): ad * d * dot(q, a) + m * as, with as llama.cpp's Q8_1
 * sum f16(amax / 127 * sum(a)) from act_q8_0 */
void dot_q4_1(__global const uchar *row, int u, __global const char *aq, __global const float *ad,
              __global const float *as, int k, int nt, float *acc) {
        __global const uchar *b = row + u * 20;
        const float d = vload_half(0, (__global const half *) b);
        const float m = vload_half(1, (__global const half *) b);
        const uchar16 q = vload16(0, b + 4);
        const int16 lo = convert_int16(q & (uchar) 15), hi = convert_int16(q >> (uchar) 4);
        for (int t = 0; t < nt; t++) {
                __global const char *a = aq + (long) t * k + u * 32;
                const int isum = hsum16(lo * a16(a, 0) + hi * a16(a, 1));
                const long ai = (long) t * (k / 32) + u;
                acc[t] += (float) isum * (d * ad[ai]);
                acc[t] += m * as[ai];
        }
}

/* block_q5_0 (layout at dq32_q5_0) */
void dot_q5_0(__global const uchar *row, int u, __global const char *aq, __global const float *ad,
              __global const float *as, int k, int nt, float *acc) {
        __global const uchar *b = row + u * 22;
        const float d = vload_half(0, (__global const half *) b);
        int16 lo, hi;
        q5_quants(b + 2, b + 6, &lo, &hi);
        lo -= 16;
        hi -= 16;
        for (int t = 0; t < nt; t++) {
                __global const char *a = aq + (long) t * k + u * 32;
                const int isum = hsum16(lo * a16(a, 0) + hi * a16(a, 1));
                acc[t] += (float) isum * (d * ad[(long) t * (k / 32) + u]);
        }
}

/* block_q5_1 (layout at dq32_q5_1), combined as Q4_1 */
void dot_q5_1(__global const uchar *row, int u, __global const char *aq, __global const float *ad,
              __global const float *as, int k, int nt, float *acc) {
        __global const uchar *b = row + u * 24;
        const float d = vload_half(0, (__global const half *) b);
        const float m = vload_half(1, (__global const half *) b);
        int16 lo, hi;
        q5_quants(b + 4, b + 8, &lo, &hi);
        for (int t = 0; t < nt; t++) {
                __global const char *a = aq + (long) t * k + u * 32;
                const int isum = hsum16(lo * a16(a, 0) + hi * a16(a, 1));
                const long ai = (long) t * (k / 32) + u;
                acc[t] += (float) isum * (d * ad[ai]);
                acc[t] += m * as[ai];
        }
}

/* block_iq4_nl (layout at dq32_iq4_nl) */
void dot_iq4_nl(__global const uchar *row, int u, __global const char *aq, __global const float *ad,
                __global const float *as, int k, int nt, float *acc) {
        __global const uchar *b = row + u * 18;
        const float d = vload_half(0, (__global const half *) b);
        int16 lo, hi;
        for (int j = 0; j < 16; j++) {
                const uchar q = b[2 + j];
                lo[j] = iq4nl_values[q & 15];
                hi[j] = iq4nl_values[q >> 4];
        }
        for (int t = 0; t < nt; t++) {
                __global const char *a = aq + (long) t * k + u * 32;
                const int isum = hsum16(lo * a16(a, 0) + hi * a16(a, 1));
                acc[t] += (float) isum * (d * ad[(long) t * (k / 32) + u]);
        }
}

/* block_q4_K (layout at dq32_q4_k): per super-block
 * ad * (d * sum_s sc_s * dot(q_s, a_s) - dmin * sum_s m_s * sum(a_s)) */
void dot_q4_k(__global const uchar *row, int u, __global const char *aq, __global const float *ad,
              __global const short *as, int k, int nt, float *acc) {
        __global const uchar *b = row + u * 144;
        const float d = vload_half(0, (__global const half *) b);
        const float dmin = vload_half(1, (__global const half *) b);
        __global const uchar *sc = b + 4, *q = b + 16;
        int scale[8], mn[8];
        for (int s = 0; s < 4; s++) {
                scale[s] = sc[s] & 63;
                mn[s] = sc[s + 4] & 63;
                scale[s + 4] = (sc[s + 8] & 15) | ((sc[s] >> 6) << 4);
                mn[s + 4] = (sc[s + 8] >> 4) | ((sc[s + 4] >> 6) << 4);
        }
        int sum[TT];
        for (int t = 0; t < nt; t++)
                sum[t] = 0;
        for (int p = 0; p < 4; p++) {
                /* sub-blocks 2p (low nibbles) and 2p + 1 (high) share 32 bytes */
                const uchar16 q0 = vload16(0, q + 32 * p), q1 = vload16(1, q + 32 * p);
                const int16 l0 = convert_int16(q0 & (uchar) 15);
                const int16 l1 = convert_int16(q1 & (uchar) 15);
                const int16 h0 = convert_int16(q0 >> (uchar) 4);
                const int16 h1 = convert_int16(q1 >> (uchar) 4);
                for (int t = 0; t < nt; t++) {
                        __global const char *a = aq + (long) t * k + u * 256 + 64 * p;
                        sum[t] += hsum16(l0 * a16(a, 0) + l1 * a16(a, 1)) * scale[2 * p] +
                                  hsum16(h0 * a16(a, 2) + h1 * a16(a, 3)) * scale[2 * p + 1];
                }
        }
        for (int t = 0; t < nt; t++) {
                __global const short *bs = as + (long) t * (k / 32) + u * 8;
                int msum = 0;
                for (int s = 0; s < 8; s++)
                        msum += mn[s] * bs[s];
                acc[t] += ad[(long) t * (k / 32) + u] * (d * (float) sum[t] - dmin * (float) msum);
        }
}

/* block_q5_K (layout at dq32_q5_k): as Q4_K with five-bit quants */
void dot_q5_k(__global const uchar *row, int u, __global const char *aq, __global const float *ad,
              __global const short *as, int k, int nt, float *acc) {
        __global const uchar *b = row + u * 176;
        const float d = vload_half(0, (__global const half *) b);
        const float dmin = vload_half(1, (__global const half *) b);
        __global const uchar *qh = b + 16, *q = b + 48;
        int scale[8], mn[8];
        for (int s = 0; s < 8; s++) {
                uint sc, m;
                k_scale_min(b + 4, s, &sc, &m);
                scale[s] = (int) sc;
                mn[s] = (int) m;
        }
        const uchar16 h0 = vload16(0, qh), h1 = vload16(1, qh);
        int sum[TT];
        for (int t = 0; t < nt; t++)
                sum[t] = 0;
        for (int p = 0; p < 4; p++) {
                /* sub-blocks 2p (low nibbles, bit 2p of qh) and 2p + 1 (high, bit 2p + 1) */
                const uchar16 q0 = vload16(0, q + 32 * p), q1 = vload16(1, q + 32 * p);
                const uchar lb = (uchar) (2 * p), hb = (uchar) (2 * p + 1);
                const int16 l0 = convert_int16((q0 & (uchar) 15) | (((h0 >> lb) & (uchar) 1) << (uchar) 4));
                const int16 l1 = convert_int16((q1 & (uchar) 15) | (((h1 >> lb) & (uchar) 1) << (uchar) 4));
                const int16 g0 = convert_int16((q0 >> (uchar) 4) | (((h0 >> hb) & (uchar) 1) << (uchar) 4));
                const int16 g1 = convert_int16((q1 >> (uchar) 4) | (((h1 >> hb) & (uchar) 1) << (uchar) 4));
                for (int t = 0; t < nt; t++) {
                        __global const char *a = aq + (long) t * k + u * 256 + 64 * p;
                        sum[t] += hsum16(l0 * a16(a, 0) + l1 * a16(a, 1)) * scale[2 * p] +
                                  hsum16(g0 * a16(a, 2) + g1 * a16(a, 3)) * scale[2 * p + 1];
                }
        }
        for (int t = 0; t < nt; t++) {
                __global const short *bs = as + (long) t * (k / 32) + u * 8;
                int msum = 0;
                for (int s = 0; s < 8; s++)
                        msum += mn[s] * bs[s];
                acc[t] += ad[(long) t * (k / 32) + u] * (d * (float) sum[t] - dmin * (float) msum);
        }
}

/* block_q6_K (layout at dq32_q6_k): per super-block ad * d * sum_j sc_j * dot(q_j - 32, a_j)
 * over its 16 sub-blocks of 16 */
void dot_q6_k(__global const uchar *row, int u, __global const char *aq, __global const float *ad,
              __global const short *as, int k, int nt, float *acc) {
        __global const uchar *b = row + u * 210;
        const float d = vload_half(0, (__global const half *) (b + 208));
        __global const char *sc = (__global const char *) (b + 192);
        int sum[TT];
        for (int t = 0; t < nt; t++)
                sum[t] = 0;
        for (int h = 0; h < 2; h++) {
                __global const uchar *qh = b + 128 + 32 * h;
                const uchar16 qh0 = vload16(0, qh), qh1 = vload16(1, qh);
                for (int kk = 0; kk < 2; kk++) {
                        __global const uchar *ql = b + 64 * h + 32 * kk;
                        const uchar16 c0 = vload16(0, ql), c1 = vload16(1, ql);
                        for (int hi = 0; hi < 2; hi++) {
                                /* quarter qk = kk + 2 hi of this half: elements 32 qk .. + 31 */
                                const int qk = kk + 2 * hi;
                                const uchar ls = (uchar) (4 * hi), hs = (uchar) (2 * qk);
                                const uchar16 u0 = ((c0 >> ls) & (uchar) 15) |
                                                   (((qh0 >> hs) & (uchar) 3) << (uchar) 4);
                                const uchar16 u1 = ((c1 >> ls) & (uchar) 15) |
                                                   (((qh1 >> hs) & (uchar) 3) << (uchar) 4);
                                const int16 v0 = convert_int16(u0) - 32, v1 = convert_int16(u1) - 32;
                                const int s0 = sc[8 * h + 2 * qk], s1 = sc[8 * h + 2 * qk + 1];
                                for (int t = 0; t < nt; t++) {
                                        __global const char *a =
                                                aq + (long) t * k + u * 256 + 128 * h + 32 * qk;
                                        sum[t] += hsum16(v0 * a16(a, 0)) * s0 +
                                                  hsum16(v1 * a16(a, 1)) * s1;
                                }
                        }
                }
        }
        for (int t = 0; t < nt; t++)
                acc[t] += ad[(long) t * (k / 32) + u] * d * (float) sum[t];
}

/* block_q2_K (layout at dq32_q2_k): per super-block
 * ad * (d * sum_j sc_j * dot(q_j, a_j) - dmin * sum_j m_j * sum(a_j)) over 16 sub-blocks */
void dot_q2_k(__global const uchar *row, int u, __global const char *aq, __global const float *ad,
              __global const short *as, int k, int nt, float *acc) {
        __global const uchar *b = row + u * 84;
        const float d = vload_half(40, (__global const half *) b);
        const float dmin = vload_half(41, (__global const half *) b);
        int sum[TT], msum[TT];
        for (int t = 0; t < nt; t++)
                sum[t] = msum[t] = 0;
        for (int n = 0; n < 2; n++) {
                const uchar16 c0 = vload16(0, b + 16 + 32 * n), c1 = vload16(1, b + 16 + 32 * n);
                for (int j = 0; j < 4; j++) {
                        const uchar sh = (uchar) (2 * j);
                        const int16 v0 = convert_int16((c0 >> sh) & (uchar) 3);
                        const int16 v1 = convert_int16((c1 >> sh) & (uchar) 3);
                        const uchar s0 = b[8 * n + 2 * j], s1 = b[8 * n + 2 * j + 1];
                        for (int t = 0; t < nt; t++) {
                                __global const char *a = aq + (long) t * k + u * 256 + 128 * n + 32 * j;
                                const int16 a0 = a16(a, 0), a1 = a16(a, 1);
                                sum[t] += hsum16(v0 * a0) * (s0 & 15) + hsum16(v1 * a1) * (s1 & 15);
                                msum[t] += (s0 >> 4) * hsum16(a0) + (s1 >> 4) * hsum16(a1);
                        }
                }
        }
        for (int t = 0; t < nt; t++)
                acc[t] += ad[(long) t * (k / 32) + u] * (d * (float) sum[t] - dmin * (float) msum[t]);
}

/* block_q3_K (layout at dq32_q3_k): per super-block ad * d * sum_j (sc_j - 32) * dot(q_j - 4, a_j) */
void dot_q3_k(__global const uchar *row, int u, __global const char *aq, __global const float *ad,
              __global const short *as, int k, int nt, float *acc) {
        __global const uchar *b = row + u * 110;
        const float d = vload_half(54, (__global const half *) b);
        const uchar16 h0 = vload16(0, b), h1 = vload16(1, b);
        int sum[TT];
        for (int t = 0; t < nt; t++)
                sum[t] = 0;
        for (int n = 0; n < 2; n++) {
                const uchar16 c0 = vload16(0, b + 32 + 32 * n), c1 = vload16(1, b + 32 + 32 * n);
                for (int j = 0; j < 4; j++) {
                        const uchar sh = (uchar) (2 * j), hb = (uchar) (4 * n + j);
                        const int16 v0 = convert_int16(((c0 >> sh) & (uchar) 3) | (((h0 >> hb) & (uchar) 1) << (uchar) 2)) - 4;
                        const int16 v1 = convert_int16(((c1 >> sh) & (uchar) 3) | (((h1 >> hb) & (uchar) 1) << (uchar) 2)) - 4;
                        const int s0 = q3k_scale(b + 96, 8 * n + 2 * j) - 32;
                        const int s1 = q3k_scale(b + 96, 8 * n + 2 * j + 1) - 32;
                        for (int t = 0; t < nt; t++) {
                                __global const char *a = aq + (long) t * k + u * 256 + 128 * n + 32 * j;
                                sum[t] += hsum16(v0 * a16(a, 0)) * s0 + hsum16(v1 * a16(a, 1)) * s1;
                        }
                }
        }
        for (int t = 0; t < nt; t++)
                acc[t] += ad[(long) t * (k / 32) + u] * d * (float) sum[t];
}

/* block_iq4_xs (layout at dq32_iq4_xs): per super-block ad * (d * sum_s (ls_s - 32) *
 * dot(levels_s, a_s)), the sum over sub-blocks in float as the CPU kernels take it */
void dot_iq4_xs(__global const uchar *row, int u, __global const char *aq, __global const float *ad,
                __global const short *as, int k, int nt, float *acc) {
        __global const uchar *b = row + u * 136;
        const float d = vload_half(0, (__global const half *) b);
        float sum[TT];
        for (int t = 0; t < nt; t++)
                sum[t] = 0;
        for (int s = 0; s < 8; s++) {
                __global const uchar *q = b + 8 + 16 * s;
                int16 lo, hi;
                for (int j = 0; j < 16; j++) {
                        lo[j] = iq4nl_values[q[j] & 15];
                        hi[j] = iq4nl_values[q[j] >> 4];
                }
                const float ls = (float) (iq4xs_scale(b, s) - 32);
                for (int t = 0; t < nt; t++) {
                        __global const char *a = aq + (long) t * k + u * 256 + 32 * s;
                        sum[t] += (float) hsum16(lo * a16(a, 0) + hi * a16(a, 1)) * ls;
                }
        }
        for (int t = 0; t < nt; t++)
                acc[t] += ad[(long) t * (k / 32) + u] * (d * sum[t]);
}

/* Y[y_off + t * ldy + r] = sum over the units of row r of dot_T, for the quantized rows
 * t0 + t of AQ/AD/AS (n_in values each). */
#define MATMUL_BODY_Q(T, UNIT, AST)                                                               \
        if (r < n_out) {                                                                           \
                __global const uchar *row = W + woff + (ulong) r * row_bytes;                      \
                const int nu = n_in / UNIT;                                                        \
                __global const char *aq = AQ + (long) t0 * n_in;                                   \
                __global const float *ad = AD + (long) t0 * (n_in / 32);                           \
                __global const AST *as = AS + (long) t0 * (n_in / 32);                             \
                for (int u = kl; u < nu; u += KL)                                                  \
                        dot_##T(row, u, aq, ad, as, n_in, nt, acc);                                \
        }                                                                                          \
        MATMUL_TAIL

#define DEF_MATMUL_Q(T, UNIT, AST)                                                                 \
        __kernel WG_ATTR void matmul_##T(__global const uchar *W, ulong woff, ulong row_bytes,     \
                                         int n_in, int n_out, int kl_log2,                         \
                                         __global const char *AQ, __global const float *AD,        \
                                         __global const AST *AS, __global float *Y, int y_off,     \
                                         int ldy, int n_tok) {                                     \
                MATMUL_HEAD(TOKENS_STEP)                                                           \
                MATMUL_BODY_Q(T, UNIT, AST)                                                        \
        }                                                                                          \
        __kernel WG_ATTR void matmul_id_##T(__global const uchar *W, ulong woff, ulong row_bytes,  \
                                            int n_in, int n_out, int kl_log2,                      \
                                            __global const char *AQ, __global const float *AD,     \
                                            __global const AST *AS, __global float *Y, int y_off,  \
                                            int ldy, __global const int *blk, ulong estride) {     \
                MATMUL_HEAD(TOKENS_BLOCK)                                                          \
                MATMUL_BODY_Q(T, UNIT, AST)                                                        \
        }

/* X[x_off + i * ldx + k] = row tok[tok_off + i] of W, dequantized; one item per 32
 * elements. */
#define DEF_EMBED(T)                                                                               \
        __kernel void embed_##T(__global const uchar *W, ulong woff, ulong row_bytes, int n_in,    \
                                __global const int *tok, int tok_off, __global float *X,           \
                                int x_off, int ldx) {                                              \
                const int u = get_global_id(0), i = get_global_id(1);                              \
                if (u >= n_in / 32)                                                                \
                        return;                                                                    \
                float w[32];                                                                       \
                dq32_##T(W + woff + (ulong) tok[tok_off + i] * row_bytes, u, w);                   \
                __global float *x = X + x_off + (long) i * ldx + u * 32;                           \
                for (int j = 0; j < 32; j++)                                                       \
                        x[j] = w[j];                                                               \
        }

DEF_MATMUL(f32)
DEF_MATMUL(f16)
DEF_MATMUL(bf16)
DEF_MATMUL_Q(q8_0, 32, float)
DEF_MATMUL_Q(q4_0, 32, float)
DEF_MATMUL_Q(q4_1, 32, float)
DEF_MATMUL_Q(q5_0, 32, float)
DEF_MATMUL_Q(q5_1, 32, float)
DEF_MATMUL_Q(iq4_nl, 32, float)
DEF_MATMUL_Q(q4_k, 256, short)
DEF_MATMUL_Q(q5_k, 256, short)
DEF_MATMUL_Q(q6_k, 256, short)
DEF_MATMUL_Q(q2_k, 256, short)
DEF_MATMUL_Q(q3_k, 256, short)
DEF_MATMUL_Q(iq4_xs, 256, short)

DEF_EMBED(f32)
DEF_EMBED(f16)
DEF_EMBED(bf16)
DEF_EMBED(q8_0)
DEF_EMBED(q4_0)
DEF_EMBED(q4_1)
DEF_EMBED(q5_0)
DEF_EMBED(q5_1)
DEF_EMBED(iq4_nl)
DEF_EMBED(q4_k)
DEF_EMBED(q5_k)
DEF_EMBED(q6_k)
DEF_EMBED(q2_k)
DEF_EMBED(q3_k)
DEF_EMBED(iq4_xs)
