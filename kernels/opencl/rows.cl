/* SPDX-License-Identifier: MIT */
/* Row-wise pieces of K1, K3 and HEAD, the same arithmetic as engine/cpu-device.c: RMSNorm,
 * biases, per-head q/k norm, RoPE from a host table of cos/sin, the KV cache write, the
 * residual additions, SwiGLU and GeGLU. Row kernels run one work-group of WG items per row. */

/* y = x / sqrt(mean(x^2) + eps) * w over one row of n; y may be x. */
void rmsnorm_row(__global float *y, __global const float *x, __global const float *w, int n,
                 float eps, __local acc_t *red) {
        acc_t s = 0;
        for (int j = get_local_id(0); j < n; j += WG)
                s += (acc_t) x[j] * (acc_t) x[j];
        s = wg_sum(s, red);
        const float scale = 1.0f / sqrt((float) (s / n) + eps);
        for (int j = get_local_id(0); j < n; j += WG)
                y[j] = x[j] * scale * w[j];
}

/* Y row i = RMSNorm(X row i) * W */
__kernel WG_ATTR void rmsnorm(__global const float *X, int x_off, int ldx, __global const uchar *W,
                              ulong woff, __global float *Y, int y_off, int ldy, int n, float eps) {
        __local acc_t red[WG];
        const int i = get_group_id(0);
        rmsnorm_row(Y + y_off + (long) i * ldy, (__global float *) (X + x_off + (long) i * ldx),
                    (__global const float *) (W + woff), n, eps, red);
}

/* X row i += rs O row i (rs: granite's residual scale, else 1); H row i = RMSNorm(X row i) * W,
 * or without a norm (has_w 0: olmo2) X row i as it is */
__kernel WG_ATTR void residual_rmsnorm(__global float *X, int x_off, int ldx, __global const float *O,
                                       int o_off, int ldo, __global const uchar *W, ulong woff,
                                       __global float *H, int h_off, int ldh, int n, float eps,
                                       float rs, int has_w) {
        __local acc_t red[WG];
        const int i = get_group_id(0);
        __global float *x = X + x_off + (long) i * ldx;
        __global const float *o = O + o_off + (long) i * ldo;
        for (int j = get_local_id(0); j < n; j += WG)
                x[j] += o[j] * rs;
        /* each item reads back only what it wrote: no barrier needed before the norm */
        if (has_w)
                rmsnorm_row(H + h_off + (long) i * ldh, x, (__global const float *) (W + woff), n, eps, red);
        else
                for (int j = get_local_id(0); j < n; j += WG)
                        H[h_off + (long) i * ldh + j] = x[j];
}

/* X[x_off + i * ldx + j] += rs O[o_off + i * ldo + j], j < n: one item per element */
__kernel void residual(__global float *X, int x_off, int ldx, __global const float *O, int o_off,
                       int ldo, int n, float rs) {
        const int j = get_global_id(0), i = get_global_id(1);
        if (j < n)
                X[x_off + (long) i * ldx + j] += O[o_off + (long) i * ldo + j] * rs;
}

/* G = SiLU(G) * U over n elements */
__kernel void swiglu(__global float *G, __global const float *U, int n) {
        const int i = get_global_id(0);
        if (i < n) {
                const float g = G[i];
                G[i] = g / (1.0f + exp(-g)) * U[i];
        }
}

/* G = GELU(G) * U over n elements, GELU's tanh form (gemma3) as the CPU's axp_cpu_glu
 * computes it: 1/2 (1 + tanh z) = 1 / (1 + e^-2z), without tanh's cancellation near -1 */
__kernel void geglu(__global float *G, __global const float *U, int n) {
        const int i = get_global_id(0);
        if (i < n) {
                const float g = G[i];
                G[i] = g / (1.0f + exp(-1.5957691216f * (g + 0.044715f * g * g * g))) * U[i];
        }
}

/* X[x_off + i * ldx + j] *= s, j < n: one item per element (gemma3's embedding scale) */
__kernel void scale_rows(__global float *X, int x_off, int ldx, float s, int n) {
        const int j = get_global_id(0), i = get_global_id(1);
        if (j < n)
                X[x_off + (long) i * ldx + j] *= s;
}

void add_bias(__global float *x, __global const float *b, int n) {
        for (int j = get_local_id(0); j < n; j += WG)
                x[j] += b[j];
}

/* Rotate the pairs of n_heads heads of hd: adjacent pairs (NORM) or (i, i + n_pairs) (NEOX),
 * with cs[2 * i], cs[2 * i + 1] = cos, sin of the pair's angle. */
void rope_row(__global float *x, int n_heads, int hd, int n_pairs, int neox, __global const float *cs) {
        for (int p = get_local_id(0); p < n_heads * n_pairs; p += WG) {
                const int h = p / n_pairs, i = p % n_pairs;
                const int i0 = neox ? i : 2 * i, i1 = neox ? i + n_pairs : 2 * i + 1;
                __global float *v = x + h * hd;
                const float c = cs[2 * i], s = cs[2 * i + 1], a = v[i0], b = v[i1];
                v[i0] = a * c - b * s;
                v[i1] = a * s + b * c;
        }
}

/* A block of 32 values of a Q8_0 KV cache, as the CPU writes it (engine/cpu-device.c, and
 * llama.cpp's CPU its q8_0 cache): d = amax / 127 rounded to f16, q = round-half-even(x *
 * (127 / amax)), both divisions correctly rounded (act.cl's div_rn). */
void kv_put_q8_0(__global uchar *blk, __global const float *x) {
        float amax = 0;
        for (int j = 0; j < 32; j++)
                amax = fmax(amax, fabs(x[j]));
        const float id = amax != 0.0f ? div_rn(127.0f, amax) : 0.0f;
        vstore_half(round_f16(div_rn(amax, 127.0f)), 0, (__global half *) blk);
        __global char *q = (__global char *) (blk + 2);
        for (int j = 0; j < 32; j++)
                q[j] = convert_char_sat_rte(x[j] * id);
}

/* The end of K1 for the rows of one request: rows row0.. of the Q/K/V scratch get their
 * biases (qwen2), per-head norms (qwen3; has_norm 1) or norms over all heads (olmo2; 2) and RoPE, then Q goes to the request's QA rows
 * qa_row0.. and K/V to its cache at positions pos0.. . cs: rows cs_row0.. of a table of
 * n_pairs (cos, sin) pairs per row. */
__kernel WG_ATTR void k1_post(__global float *Q, __global float *K, __global float *V, int row0,
                              int n_head, int n_head_kv, int hd, int has_bias,
                              __global const uchar *Wbq, ulong obq, __global const uchar *Wbk,
                              ulong obk, __global const uchar *Wbv, ulong obv, int has_norm,
                              __global const uchar *Wqn, ulong oqn, __global const uchar *Wkn,
                              ulong okn, float eps, __global const float *cs, int cs_row0, int n_pairs,
                              int neox, __global float *QA, int qa_row0, __global uchar *Kc,
                              __global uchar *Vc, int pos0, int kv_rows, int kv_kind,
                              float temp_scale, int temp_floor) {
        __local acc_t red[WG];
        const int i = get_group_id(0), lid = get_local_id(0);
        const int qd = n_head * hd, kvd = n_head_kv * hd, row = row0 + i;
        __global float *q = Q + (long) row * qd, *k = K + (long) row * kvd, *v = V + (long) row * kvd;

        if (has_bias) {
                add_bias(q, (__global const float *) (Wbq + obq), qd);
                add_bias(k, (__global const float *) (Wbk + obk), kvd);
                add_bias(v, (__global const float *) (Wbv + obv), kvd);
                barrier(CLK_GLOBAL_MEM_FENCE); /* the head norms split the row otherwise */
        }
        if (has_norm) {
                /* within a head (or the whole row), every item reads back only what it wrote */
                const int full = has_norm == 2, w = full ? qd : hd, wk = full ? kvd : hd;
                for (int h = 0; h < (full ? 1 : n_head); h++)
                        rmsnorm_row(q + h * hd, q + h * hd, (__global const float *) (Wqn + oqn), w, eps, red);
                for (int h = 0; h < (full ? 1 : n_head_kv); h++)
                        rmsnorm_row(k + h * hd, k + h * hd, (__global const float *) (Wkn + okn), wk, eps, red);
        }
        barrier(CLK_GLOBAL_MEM_FENCE); /* RoPE pairs cross items */
        __global const float *c = cs + (long) (cs_row0 + i) * 2 * n_pairs;
        rope_row(q, n_head, hd, n_pairs, neox, c);
        rope_row(k, n_head_kv, hd, n_pairs, neox, c);
        barrier(CLK_GLOBAL_MEM_FENCE);

        /* mistral3's attention temperature (1 without, or before the original context) */
        const float tf = temp_scale != 0 ? log(floor((float) (pos0 + i) / (float) temp_floor) + 1.0f) * temp_scale + 1.0f
                                         : 1.0f;
        __global float *qa = QA + (long) (qa_row0 + i) * qd;
        for (int j = lid; j < qd; j += WG)
                qa[j] = q[j] * tf;
        /* the cache is head by head: value d of head h at row r is element (h kv_rows + r) hd + d
         * (a ring on sliding-window layers: row (pos0 + i) % kv_rows) */
        const long r = (pos0 + i) % kv_rows;
        if (kv_kind == KV_Q8_0) {
                const int per = hd / 32; /* blocks a head */
                for (int b = lid; b < kvd / 32; b += WG) {
                        const long at = ((long) (b / per) * kv_rows + r) * per + b % per;
                        kv_put_q8_0(Kc + at * 34, k + b * 32);
                        kv_put_q8_0(Vc + at * 34, v + b * 32);
                }
                return;
        }
        for (int j = lid; j < kvd; j += WG) {
                const long at = ((long) (j / hd) * kv_rows + r) * hd + j % hd;
                kv_put(Kc, kv_kind, at, k[j]);
                kv_put(Vc, kv_kind, at, v[j]);
        }
}
