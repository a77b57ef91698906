/* SPDX-License-Identifier: MIT */
/* A request's forward state (implemented in seq.c): its KV cache, which stays in place while
 * the request is preempted or between a flow's turns, and the activations of its pending
 * tokens, which the HEG's kernels read and write. */
#pragma once

#include <stdint.h>

#include "model/model.h"
#include "base/util.h"

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

/* The KV cache's element type by its name in engine.conf and on the command line: "f16"
 * (AXP_TYPE_F16, the default, as llama.cpp's) or "f32" (AXP_TYPE_F32). -EINVAL otherwise. */
int axp_kv_type_from_name(const char *name, uint32_t *ret);
const char *axp_kv_type_name(uint32_t kv_type);
/* Bytes of a KV cache of n_ctx positions (K and V, every layer). */
size_t axp_kv_cache_bytes(const axp_hparams *hp, uint32_t kv_type, int n_ctx);

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
