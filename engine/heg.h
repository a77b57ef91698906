/* SPDX-License-Identifier: MIT */
/* The heterogeneous execution graph (HEG, DESIGN §3): a transformer layer as three fused
 * kernels, the per-request state they work on, and their cost annotations.
 *
 *   EMBED    token ids -> residual stream x                                  token-wise
 *   K1 qkv   RMSNorm, Q/K/V projections (+bias, +q/k norm), RoPE, K/V -> cache   token-wise
 *   K2 attn  attention of the new tokens over the request's own KV cache     sequence-wise
 *   K3 ffn   output projection + residual, RMSNorm, gate/up, SiLU, down, residual  token-wise
 *   HEAD     final RMSNorm + LM head for the last token of a span -> logits
 *
 * A task names one kernel, one layer, and one or more spans (a request and a range of its
 * pending tokens). Prefill runs a request's pending tokens layer by layer: K1 over chunks of
 * S_chk tokens plus a remainder, then K2, then K3 over chunks; a prefill may stop between any
 * two tasks and resume later with nothing recomputed. Decode runs one pending token per
 * request for a batch of requests with different context lengths. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "model.h"
#include "util.h"

/* Per-request forward state: its KV cache and the activations of its pending tokens. */
typedef struct axp_seq {
        const axp_model *model;
        uint32_t kv_type;  /* AXP_TYPE_F32 or AXP_TYPE_F16 */
        int kv_cap;        /* positions allocated */
        int n_ctx_max;     /* hard cap on positions (the context length) */
        int n_past;        /* positions committed to the KV cache */
        void **k, **v;     /* per layer: [kv_cap][n_head_kv * head_dim] of kv_type */
        /* pending tokens at positions n_past .. n_past + n_new - 1 */
        int n_new;
        int act_cap;
        int32_t *tokens;   /* [n_new] */
        float *x;          /* [n_new][n_embd]: residual stream */
        float *qa;         /* [n_new][n_head * head_dim]: queries, then attention output */
        float *logits;     /* [n_vocab]: written by HEAD */
        int logits_pos;    /* position whose logits are in `logits`, -1 if none */
} axp_seq;

/* n_ctx_max: positions this request may ever use (<= model context); kv_reserve: positions
 * to allocate now (grows on demand up to n_ctx_max). */
int axp_seq_init(axp_seq *s, const axp_model *m, uint32_t kv_type, int n_ctx_max, int kv_reserve,
                 axp_error *err);
void axp_seq_free(axp_seq *s);
/* Stage n new tokens; fails with -E2BIG (ContextOverflow) beyond n_ctx_max. */
int axp_seq_begin(axp_seq *s, const int32_t *tokens, int n, axp_error *err);
/* The ContextOverflow error (-E2BIG) for a prompt of n tokens that does not fit a context of
 * n_ctx positions of which a flow's conversation already holds n_past (0: no flow). The
 * message names the flow only when there is one. */
int axp_seq_overflow_error(axp_error *err, int n, int n_past, int n_ctx);
/* All layers have run over the pending tokens: commit them to the KV cache. */
void axp_seq_end(axp_seq *s);
/* Drop the activation buffers (keep the KV cache), e.g. while a flow waits for its next turn. */
void axp_seq_release_activations(axp_seq *s);
/* Forget KV positions >= n (n <= n_past). */
void axp_seq_truncate(axp_seq *s, int n);

typedef enum axp_op {
        AXP_OP_EMBED,
        AXP_OP_K1,
        AXP_OP_K2,
        AXP_OP_K3,
        AXP_OP_HEAD,
        AXP_OP__COUNT,
} axp_op;

/* The variant a task is shaped as (DESIGN §3), which decides the role it may run on. */
typedef enum axp_variant {
        AXP_VAR_STATIC,  /* a chunk of S_chk tokens (a shorter one padded): the static (NPU) role */
        AXP_VAR_DYNAMIC, /* any length: the dynamic (iGPU) role */
        AXP_VAR_DECODE,  /* a batch of one token per request: the dynamic role */
} axp_variant;

#define AXP_MAX_BATCH 64

typedef struct axp_span {
        axp_seq *seq;
        int t0, t1; /* pending tokens [t0, t1) of seq */
} axp_span;

typedef struct axp_task {
        axp_op op;
        axp_variant variant;
        int layer; /* K1..K3 */
        /* AXP_VAR_STATIC: the chunk length S_chk the kernel is shaped for; a shorter span is
         * padded to it (the device computes, and the cost model charges, chunk rows).
         * 0: the span's length. */
        int chunk;
        int n_spans;
        axp_span spans[AXP_MAX_BATCH];
} axp_task;

const char *axp_op_name(axp_op op);
/* Is op token-wise (may be chunked in prefill and batched in decode)? */
bool axp_op_tokenwise(axp_op op);

/* Cost annotations ------------------------------------------------------------------------ */

/* What the cost model needs to know of a model: shapes and bytes moved. Built from a loaded
 * model or from a simulated profile (e.g. Llama-3.1-8B in W8A16). */
typedef struct axp_heg_shape {
        int n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab;
        double bytes_k1;    /* weight bytes read by K1 of one layer (wq, wk, wv, norms) */
        double bytes_k3;    /* weight bytes read by K3 of one layer (wo, gate, up, down) */
        double bytes_head;  /* output weight bytes */
        double act_bytes;   /* bytes per activation element (2 for fp16 activations) */
        double kv_bytes;    /* bytes per KV element */
} axp_heg_shape;

void axp_heg_shape_from_model(const axp_model *m, uint32_t kv_type, axp_heg_shape *ret);

typedef struct axp_cost {
        double flops;      /* W */
        double bytes;      /* Q */
        double attn_flops; /* the part of W that is attention (K2): it runs at e_attn of P_eff */
} axp_cost;

/* Cost of one kernel over n_tokens tokens (summed over all spans), n_seqs requests, where
 * attn_ctx is the sum over the new tokens of the context each attends to (K2 only) and
 * kv_ctx the sum over requests of the KV positions read (K2 only). */
axp_cost axp_heg_cost(const axp_heg_shape *s, axp_op op, int n_tokens, int n_seqs,
                      double attn_ctx, double kv_ctx);
/* Cost of a concrete task. */
axp_cost axp_task_cost(const axp_heg_shape *s, const axp_task *t);

/* Two-point calibrated roofline of a device (Agent.xpu appendix A). */
typedef struct axp_calib {
        double P_pk; /* peak FLOP/s */
        double B_pk; /* peak bytes/s */
        double u_m;  /* bandwidth utilization at the memory-bound anchor */
        double u_c;  /* bandwidth utilization at the compute-bound anchor */
        double I_c;  /* intensity of the compute-bound anchor (FLOP/byte) */
        /* Attention reaches only this fraction of P_eff (softmax, masking and short dot
         * products keep it below the GEMM roof); 0 means 1. A third calibration point. */
        double e_attn;
} axp_calib;

double axp_calib_B_eff(const axp_calib *c);
double axp_calib_P_eff(const axp_calib *c);
/* T = max(W / P_eff, Q / B_eff), in seconds. */
double axp_calib_latency(const axp_calib *c, axp_cost cost);
/* Achieved bandwidth b(I) = min(B_eff, P_eff / I), bytes/s. */
double axp_calib_bandwidth(const axp_calib *c, axp_cost cost);
/* Memory-bound at this cost (I <= I_star)? */
bool axp_calib_memory_bound(const axp_calib *c, axp_cost cost);
