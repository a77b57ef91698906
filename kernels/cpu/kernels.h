/* SPDX-License-Identifier: MIT */
/* CPU compute kernels: matrix products for every weight type, attention and the feed-forward
 * activation. The products and attention spread their work over the pool (the activation
 * works on the rows it is given); the best path for the machine (AMX, AVX-512 VNNI, AVX2,
 * portable C) is chosen at run time. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "kernels/weight.h"
#include "pool.h"

/* Which instruction-set path is in use: "amx" (AVX-512 VNNI plus AMX tiles for prefill),
 * "avx512" (F/BW/VL/DQ/VNNI), "avx-vnni" (the AVX2 path with VEX vpdpbusd), "avx2" (with FMA,
 * F16C) or "generic" (portable C). */
const char *axp_cpu_isa(void);
/* Force a path (tests, benchmarks); returns false if this machine cannot run it. Process-wide. */
bool axp_cpu_set_isa(const char *name);
/* Whether this machine can run the path of that name (whatever path is in use). */
bool axp_cpu_isa_available(const char *name);

/* How decode prefetches the weights it streams: a plan of a form and a level.
 * The form concerns one- and two-token products of the 32-element block types Q8_0, Q4_0
 * and IQ4_NL, of Q4_K, Q5_K, Q6_K and IQ4_XS, and of float weights (F32, F16, BF16); tiles of
 * more tokens, and Q2_K's, Q3_K's, Q4_1's, Q5_0's and Q5_1's products (Q5_0 streamed half as
 * fast sparsely on every path) prefetch densely on every machine (cpu.h): "dense" (every
 * line, 8 blocks, 4 KB or for the K-quants 8 KB ahead) or "sparse" (one line in 2 KB on the
 * AVX-512 path, for float weights and for the K-quants, in 1 KB for the block types on the
 * AVX2 ones, 32 KB ahead, so that the hardware prefetcher runs further ahead and the loop
 * issues fewer requests of its own).
 * The level concerns every product's prefetches: into L2 (the plain names) or into L1 (the
 * names ending "-l1"): "dense", "sparse", "dense-l1", "sparse-l1".
 * Which is faster depends on the machine, the type and the thread count, so
 * axp_cpu_prefetch_tune times them on a model's own weights when it is loaded; until then
 * (and for models too small to tell), sparse where the CPU is AMD's, dense elsewhere, into L2.
 * AXP_CPU_PREFETCH=NAME picks one plan for good. */
const char *axp_cpu_prefetch(void);
/* Force a plan (benchmarks, tests), which tuning then leaves alone; NULL hands the choice back
 * (the default above, tunable). False for a name that is none of them. Process-wide. */
bool axp_cpu_set_prefetch(const char *name);
/* Choose the plan for the n prepared weights w by timing it, the plans taking turns, three
 * rounds, the faster's best kept: first the level, with one-token products over up to 512 MB
 * of the weights; then the form at that level, over up to 512 MB of those whose type the form
 * concerns. A step whose weights are fewer than min_bytes is left out (they would be timed
 * from the caches, where the plans do not differ). Does nothing (returns 0) where the plan
 * was forced or both steps are left out; else returns 1 with each step's best times in ret_s
 * ([0] dense, [1] sparse; [2] into L2, [3] into L1; a step left out leaves its two as they
 * were), or -ENOMEM. */
int axp_cpu_prefetch_tune(axp_pool *pool, const axp_weight *const *w, int n, uint64_t min_bytes,
                          double ret_s[4]);
/* The min_bytes a model's weights are tuned with (the engine's CPU device, bench-kernels):
 * fewer would be timed from the caches */
#define AXP_CPU_PREFETCH_TUNE_MIN_BYTES (64ull << 20)

/* Prepare a weight for fast products: a repacked copy (16-row interleaved groups, at most
 * ~3% larger than the original) in w->priv; products then never read w->data, so the caller
 * may madvise it away. Optional: products work on unprepared weights (repacking on the fly,
 * slower). Release before the model's memory goes away. -EOPNOTSUPP for types without a
 * kernel, -ENOMEM. */
int axp_cpu_weight_prepare(axp_weight *w);
/* The same, the weight's groups packed by the threads of pool (NULL: the caller alone); the
 * packed bytes are the same whatever the pool's size. */
int axp_cpu_weight_prepare_on(axp_pool *pool, axp_weight *w);
void axp_cpu_weight_release(axp_weight *w);

/* Y = X W^T for n weights sharing the same input: for each i < n_w and token t < n_tok,
 * y[i][t * ldy[i] + r] = sum_k W_i[r][k] * x[t * ldx + k], r < W_i->n_out.
 * All W_i have the same n_in; n_w <= 8. x is float. As llama.cpp computes: x is quantized to
 * 8 bits per block first for integer weights (Q8_0 blocks of 32 for Q8_0/Q4_0 weights, with
 * llama.cpp's x86 rounding; Q8_K blocks of 256 for Q4_K/Q6_K), rounded to f16 for F16
 * weights and to bf16 for BF16 weights (each as llama.cpp's CPU backend rounds it); F32
 * weights take x as it is.
 * Results are bit-identical whatever the pool size and whatever other tokens share the call. */
void axp_cpu_matmul(axp_pool *pool, int n_w, const axp_weight *const *w, const float *x,
                    long ldx, float *const *y, const long *ldy, int n_tok);

/* Attention for n_q query tokens of one request. Query i sits at position pos[i] and attends
 * to KV positions [0, pos[i]] (causal), or with window > 0 (sliding-window attention) to
 * [max(0, pos[i] - window + 1), pos[i]]. For head h (KV head h / (n_head / n_head_kv)):
 *   out[i][h] = sum_t softmax_t(s_t) V[t],  s_t = scale * q[i][h] . K[t]
 * and with softcap > 0 (gemma2's attention logit soft-capping) s_t = softcap tanh(s_t /
 * softcap) before the softmax; softcap <= 0: none (and nothing computed for it).
 * q and out may alias (in place). k and v hold KV head h's values at row r from element
 * r * ld_kv + h * head_stride on, head_dim of kv_type (AXP_TYPE_F32, AXP_TYPE_F16, or
 * AXP_TYPE_Q8_0 with head_dim, ld_kv and head_stride multiples of 32); the engine's cache is
 * head by head (ld_kv = head_dim, head_stride = its rows times head_dim), so each head's rows
 * are read as one stream; [positions][n_head_kv * head_dim] is ld_kv = n_head_kv * head_dim,
 * head_stride = head_dim. Positions up to max pos[i] must be written. head_dim <= 512.
 * ring > 0: position t is in row t % ring (a sliding-window layer's ring, a multiple of
 * ATT_CHUNK, holding every position the queries see); 0: in row t.
 * A query's result does not depend on the pool size nor on the other queries of the call (a
 * token's attention in a prefill chunk equals its attention as a lone decode step). */
void axp_cpu_attention(axp_pool *pool, const float *q, long ldq, float *out, long ldo,
                       const void *k, const void *v, uint32_t kv_type, int n_q,
                       const int32_t *pos, int n_head, int n_head_kv, int head_dim, long ld_kv,
                       long head_stride, int window, int ring, float scale, float softcap);

/* The gated feed-forward activation in place: g[i] = act(g[i]) * u[i] for i < n, act SiLU
 * (g / (1 + e^-g): llama, qwen, phi3) or GELU's tanh form (g/2 (1 + tanh(sqrt(2/pi) (g +
 * 0.044715 g^3))): gemma3), each as g sigmoid(x) so that it keeps its relative precision for
 * negative g. The SIMD paths take e^x from the polynomial their softmax uses (a few ulps from
 * expf); a value's result depends only on g[i] and u[i], not on n or i. */
enum { AXP_GLU_SILU, AXP_GLU_GELU_TANH };
void axp_cpu_glu(int act, float *g, const float *u, long n);

/* Soft-capping in place (Gemma 2's output logits): x[i] = cap tanh(x[i] / cap) for i < n, cap
 * > 0. The SIMD paths build tanh from their softmax's exp, as their attention's capped scores
 * (within 1.5e-7 cap of the exact value); a value's result depends only on itself. */
void axp_cpu_softcap(float *x, long n, float cap);

/* RMS norm of one row: out[i] = x[i] * scale * w[i], scale = 1 / sqrtf(mean of x^2 + eps) with
 * the sum of squares in double, as llama.cpp's; out may be x. Plain C on every path. */
void axp_cpu_rmsnorm(float *out, const float *x, const float *w, int n, float eps);

/* Write n values (one position's K or V) as a row of a KV cache of kv_type: F32 as they are,
 * F16 rounded to nearest even, Q8_0 (n a multiple of 32) in blocks of 32 as llama.cpp's CPU
 * writes its q8_0 cache (d = f16(amax / 127), q = round-half-even(x * (127 / amax))). */
void axp_cpu_kv_store(uint32_t kv_type, const float *x, void *dst, int n);

/* Ask for transparent huge pages under a large buffer not yet touched (its whole 2 MiB
 * extents): a stream over 4 KiB pages takes a TLB miss every 4 KiB, and where the kernel's
 * THP defrag setting is "madvise" only advised memory gets huge pages. Advice only: a kernel
 * without THP just says no. For packed weights, the probe's buffer and the KV cache. */
void axp_cpu_advise_huge(void *p, size_t n);

/* n bytes (free with free()) for a large buffer the kernels stream through, a request's KV
 * cache above all: page aligned, and from 2 MiB on aligned to 2 MiB and advised for huge
 * pages. Attention reads each KV head's slice of every row (128 bytes of a 1 KB row for a 1B
 * model), a stride that on 4 KiB pages took a TLB miss every few rows. A 2 MiB extent is
 * committed whole when first written, the tail short of one in 4 KiB pages. NULL when out of
 * memory; not zeroed. */
void *axp_cpu_huge_alloc(size_t n);
