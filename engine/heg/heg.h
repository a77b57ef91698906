/* SPDX-License-Identifier: MIT */
/* The heterogeneous execution graph (HEG, DESIGN §3): a transformer layer as three fused
 * kernels and the tasks that run them (implemented in heg.c); the per-request state they
 * work on is in seq.h, their cost annotations in cost.h.
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

#include "seq.h"

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
        /* Background work (the scheduler sets it for a task of proactive requests only while
         * no reactive request waits): on the CPU its threads run it at an idle scheduling
         * class (engine/devices/thread-class.h). What it computes is the same. */
        bool background;
        int n_spans;
        axp_span spans[AXP_MAX_BATCH];
} axp_task;

const char *axp_op_name(axp_op op);
/* Is op token-wise (may be chunked in prefill and batched in decode)? */
bool axp_op_tokenwise(axp_op op);
