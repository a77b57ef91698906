/* SPDX-License-Identifier: MIT */
/* A request's forward state (implemented in seq.c): its KV cache, which stays in place while
 * the request is preempted or between a flow's turns, and the activations of its pending
 * tokens, which the HEG's kernels read and write.
 *
 * A full-attention layer keeps every position (position p in row p). A sliding-window layer
 * keeps a ring: position p in row p % axp_seq_kv_rows(s, layer), long enough for the window
 * behind the oldest pending token whose attention has not run yet plus the pending tokens
 * written before it runs (kv_span). Its length is a multiple of ATT_CHUNK (256) unless it
 * holds the whole context, so a 256-aligned block of positions is contiguous in it. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "model/model.h"
#include "base/util.h"

/* Per-request forward state: its KV cache and the activations of its pending tokens. */
typedef struct axp_seq {
        const axp_model *model;
        uint32_t kv_type;  /* AXP_TYPE_F32, AXP_TYPE_F16 or AXP_TYPE_Q8_0 */
        int kv_cap;        /* positions allocated on the full-attention layers */
        int swa_cap;       /* rows of each sliding-window layer's ring (0: no such layers) */
        int kv_span;       /* most pending tokens whose K/V are written before their attention
                            * runs (the caller's chunk); 0: all the pending tokens */
        int n_ctx_max;     /* hard cap on positions (the context length) */
        int n_past;        /* positions committed to the KV cache */
        int swa_from;      /* the sliding-window layers' rings hold positions swa_from ..
                            * n_past - 1 (0 without such layers) */
        void **k, **v;     /* per layer: [n_head_kv][kv_cap or swa_cap][head_dim] of kv_type
                            * (axp_kv_offset): one KV head's rows side by side, which
                            * attention reads as one stream */
        /* pending tokens at positions n_past .. n_past + n_new - 1 */
        int n_new;
        int act_cap;
        int32_t *tokens;   /* [n_new] */
        float *x;          /* [n_new][n_embd]: residual stream; axp_seq_end leaves the committed
                            * tokens' rows in place until the next axp_seq_begin (an embedding
                            * pools them, model/embedding.h) */
        float *qa;         /* [n_new][n_head * head_dim]: queries, then attention output */
        float *logits;     /* [n_vocab]: written by HEAD */
        int logits_pos;    /* position whose logits are in `logits`, -1 if none */
} axp_seq;

/* The KV cache's element type by its name in engine.conf and on the command line: "f16"
 * (AXP_TYPE_F16, the default, as llama.cpp's), "f32" (AXP_TYPE_F32) or "q8_0" (AXP_TYPE_Q8_0:
 * each row's heads in llama.cpp's Q8_0 blocks of 32, quantized as written, as llama.cpp's
 * -ctk q8_0 -ctv q8_0). -EINVAL otherwise. */
int axp_kv_type_from_name(const char *name, uint32_t *ret);
const char *axp_kv_type_name(uint32_t kv_type);
/* Whether a model can keep its KV cache in kv_type: a Q8_0 cache needs a head size that is a
 * multiple of 32 (one line in err otherwise, -EINVAL). */
int axp_kv_type_check(const axp_hparams *hp, uint32_t kv_type, axp_error *err);
/* Bytes of one position's K (or V) of one layer: n_head_kv * head_dim values of kv_type (its
 * heads' parts lie apart in the cache, see axp_kv_offset). */
size_t axp_kv_row_bytes(const axp_hparams *hp, uint32_t kv_type);
/* Rows of a sliding-window layer's ring for a context of n_ctx positions when at most span
 * pending tokens are written ahead of their attention: the window behind them plus the span,
 * rounded up to 256, or n_ctx if that is no shorter. */
int axp_kv_ring_rows(const axp_hparams *hp, int n_ctx, int span);
/* Bytes of a KV cache of n_ctx positions (K and V, every layer; the sliding-window layers'
 * rings for a span of `span` pending tokens, see axp_kv_ring_rows). */
size_t axp_kv_cache_bytes(const axp_hparams *hp, uint32_t kv_type, int n_ctx, int span);
/* Bytes the seq's KV cache holds now. */
size_t axp_seq_kv_bytes(const axp_seq *s);

/* Rows of layer l's cache: position p is in row p % axp_seq_kv_rows(s, l). */
static inline int axp_seq_kv_rows(const axp_seq *s, int l) {
        return axp_layer_is_swa(&s->model->hp, l) ? s->swa_cap : s->kv_cap;
}

/* Bytes of one KV head's values at one position: head_dim values of kv_type. */
size_t axp_kv_head_bytes(const axp_hparams *hp, uint32_t kv_type);

/* Where KV head h's values of row r start in a layer's K or V buffer of `rows` rows: the cache
 * is head by head, each head's rows one after the other. */
static inline size_t axp_kv_offset(size_t head_bytes, int rows, int h, int r) {
        return ((size_t) h * (size_t) rows + (size_t) r) * head_bytes;
}

/* n_ctx_max: positions this request may ever use (<= model context); kv_reserve: positions
 * to allocate now (grows on demand up to n_ctx_max). */
int axp_seq_init(axp_seq *s, const axp_model *m, uint32_t kv_type, int n_ctx_max, int kv_reserve,
                 axp_error *err);
void axp_seq_free(axp_seq *s);
/* At most span pending tokens are written to the KV cache before their attention has run
 * (the caller runs K1, K2 in chunks of span tokens, K2 of a chunk before K1 of the next on
 * each sliding-window layer); 0: all of them. Sizes the sliding-window layers' rings. */
void axp_seq_set_span(axp_seq *s, int span);
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
/* Forget KV positions >= n (n <= n_past; a sliding-window layer's ring must still hold the
 * window behind n: n_past - n <= swa_cap - n_swa, or n is 0). */
void axp_seq_truncate(axp_seq *s, int n);
/* Whether the model has sliding-window layers (their rings do not keep every position). */
bool axp_seq_model_has_swa(const axp_hparams *hp);
/* Whether src can give a cache its first n positions (n <= src->n_past): its sliding-window
 * layers' rings still hold the window behind position n, and keep it while its pending tokens'
 * rows are written (always without such layers). Only rows no pending token writes are read,
 * so src may be a running request's cache whose pending tokens devices are working on. */
bool axp_seq_can_copy_prefix(const axp_seq *src, int n);
/* Give dst (empty: n_past 0, nothing pending) src's first n positions, copied (on a
 * sliding-window layer those src's ring still holds, its rings grown to hold them); both of
 * one model and KV type, and
 * axp_seq_can_copy_prefix(src, n) (-EINVAL otherwise). -ENOMEM leaves dst empty. */
int axp_seq_copy_prefix(axp_seq *dst, const axp_seq *src, int n, axp_error *err);
