/* SPDX-License-Identifier: MIT */
/* CPU compute kernels: matrix products for every weight type and attention. Each entry point
 * spreads its work over the pool; the best path for the machine (AVX-512 VNNI, AVX-512, AVX2,
 * portable C) is chosen once at run time. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "model.h"
#include "pool.h"

/* Which instruction-set path is in use ("avx512-vnni", "avx2", "generic"). */
const char *axp_cpu_isa(void);
/* Force a path for tests ("generic", "avx2", "avx512"); returns false if unavailable here. */
bool axp_cpu_set_isa(const char *name);

/* Prepare a weight for fast products (e.g. repack into an interleaved layout in w->priv).
 * Optional: products work on unprepared weights. Free with axp_cpu_weight_release. */
int axp_cpu_weight_prepare(axp_weight *w);
void axp_cpu_weight_release(axp_weight *w);

/* Y = X W^T for n weights sharing the same input: for each i < n_w and token t < n_tok,
 * y[i][t * ldy[i] + r] = sum_k W_i[r][k] * x[t * ldx + k], r < W_i->n_out.
 * All W_i have the same n_in. x is float; for integer-quantized weights the kernel may
 * quantize x to 8 bits per block first (as llama.cpp does). */
void axp_cpu_matmul(axp_pool *pool, int n_w, const axp_weight *const *w, const float *x,
                    long ldx, float *const *y, const long *ldy, int n_tok);

/* Attention for n_q query tokens of one request. Query i sits at position pos[i] and attends
 * to KV positions [0, pos[i]] (causal). For head h (KV head h / (n_head / n_head_kv)):
 *   out[i][h] = sum_t softmax_t(scale * q[i][h] . K[t]) V[t]
 * q and out may alias (in place). k and v are [positions][n_head_kv * head_dim] of kv_type
 * (AXP_TYPE_F32 or AXP_TYPE_F16). */
void axp_cpu_attention(axp_pool *pool, const float *q, long ldq, float *out, long ldo,
                       const void *k, const void *v, uint32_t kv_type, int n_q,
                       const int32_t *pos, int n_head, int n_head_kv, int head_dim,
                       float scale);
