/* SPDX-License-Identifier: MIT */
/* Per-request forward state: the KV cache (grown on demand, page-aligned so a device with
 * host-unified memory can use it without a copy) and the activations of pending tokens. */
#include <assert.h>
#include <string.h>

#include "seq.h"
#include "kernels/types.h"

/* The KV cache holds what is committed and is never larger than the context; the pending
 * tokens fit in it and in the activations. */
static void check(const axp_seq *s) {
        assert(s->n_past >= 0 && s->n_past <= s->kv_cap && s->kv_cap <= s->n_ctx_max);
        assert(s->n_new >= 0 && s->n_past + s->n_new <= s->kv_cap && s->n_new <= s->act_cap);
        assert(s->logits_pos < s->n_past + s->n_new);
}

static size_t kv_row_bytes(const axp_seq *s) {
        const axp_hparams *hp = &s->model->hp;
        return (size_t) hp->n_head_kv * hp->head_dim * (s->kv_type == AXP_TYPE_F16 ? 2 : 4);
}

static void *page_alloc(size_t size) {
        void *p = NULL;
        size = (size + 4095) & ~(size_t) 4095;
        if (posix_memalign(&p, 4096, size ? size : 4096) != 0)
                return NULL;
        return p;
}

static int kv_grow(axp_seq *s, int need, axp_error *err) {
        if (need <= s->kv_cap)
                return 0;
        /* grow geometrically so a long generation reallocates a few times, not per token */
        int cap = MAX(need, MIN(s->n_ctx_max, MAX(s->kv_cap * 2, 256)));
        const int n_layer = s->model->hp.n_layer;
        size_t row = kv_row_bytes(s);
        for (int l = 0; l < n_layer; l++) {
                void *k = page_alloc((size_t) cap * row), *v = page_alloc((size_t) cap * row);
                if (!k || !v) {
                        free(k);
                        free(v);
                        return axp_errorf(err, -ENOMEM, "out of memory for a KV cache of %d positions", cap);
                }
                if (s->n_past > 0) {
                        memcpy(k, s->k[l], (size_t) s->n_past * row);
                        memcpy(v, s->v[l], (size_t) s->n_past * row);
                }
                free(s->k[l]);
                free(s->v[l]);
                s->k[l] = k;
                s->v[l] = v;
        }
        s->kv_cap = cap;
        return 0;
}

int axp_seq_init(axp_seq *s, const axp_model *m, uint32_t kv_type, int n_ctx_max, int kv_reserve,
                 axp_error *err) {
        if (kv_type != AXP_TYPE_F32 && kv_type != AXP_TYPE_F16)
                return axp_errorf(err, -EINVAL, "KV cache type must be F32 or F16");
        memset(s, 0, sizeof(*s));
        s->model = m;
        s->kv_type = kv_type;
        s->n_ctx_max = n_ctx_max > 0 ? n_ctx_max : m->hp.n_ctx_train;
        s->logits_pos = -1;
        s->k = calloc((size_t) m->hp.n_layer, sizeof(void *));
        s->v = calloc((size_t) m->hp.n_layer, sizeof(void *));
        s->logits = axp_alloc((size_t) m->hp.n_vocab * sizeof(float));
        if (!s->k || !s->v || !s->logits) {
                axp_seq_free(s);
                return axp_errorf(err, -ENOMEM, "out of memory");
        }
        int r = kv_grow(s, MIN(MAX(kv_reserve, 1), s->n_ctx_max), err);
        if (r < 0) {
                axp_seq_free(s);
                return r;
        }
        check(s);
        return 0;
}

void axp_seq_free(axp_seq *s) {
        if (!s->model)
                return;
        for (int l = 0; s->k && l < s->model->hp.n_layer; l++) {
                free(s->k[l]);
                free(s->v[l]);
        }
        free(s->k);
        free(s->v);
        axp_seq_release_activations(s);
        free(s->logits);
        memset(s, 0, sizeof(*s));
}

int axp_seq_overflow_error(axp_error *err, int n, int n_past, int n_ctx) {
        /* The engine keeps a position for the answer's first token, so a prompt can fit and
         * still be refused. */
        const char *no_room = n_past + n <= n_ctx ? ", with no room left for an answer" : "";

        if (n_past == 0)
                return axp_errorf(err, -E2BIG, "the prompt is %d tokens and the context holds %d%s", n,
                                  n_ctx, no_room);
        return axp_errorf(err, -E2BIG,
                          "the prompt is %d tokens; the flow already holds %d of the context's %d positions%s",
                          n, n_past, n_ctx, no_room);
}

int axp_seq_begin(axp_seq *s, const int32_t *tokens, int n, axp_error *err) {
        const axp_hparams *hp = &s->model->hp;
        int r;

        if (n <= 0)
                return axp_errorf(err, -EINVAL, "nothing to process");
        if (s->n_new != 0)
                return axp_errorf(err, -EBUSY, "the request still has pending tokens");
        if (n > s->n_ctx_max - s->n_past)
                return axp_seq_overflow_error(err, n, s->n_past, s->n_ctx_max);
        for (int i = 0; i < n; i++)
                if (tokens[i] < 0 || tokens[i] >= hp->n_vocab)
                        return axp_errorf(err, -EINVAL, "token id %d is outside the vocabulary", tokens[i]);
        if ((r = kv_grow(s, s->n_past + n, err)) < 0)
                return r;
        if (n > s->act_cap) {
                axp_seq_release_activations(s);
                s->tokens = malloc((size_t) n * sizeof(int32_t));
                s->x = page_alloc((size_t) n * hp->n_embd * sizeof(float));
                s->qa = page_alloc((size_t) n * hp->n_head * hp->head_dim * sizeof(float));
                if (!s->tokens || !s->x || !s->qa) {
                        axp_seq_release_activations(s);
                        return axp_errorf(err, -ENOMEM, "out of memory for the activations of %d tokens", n);
                }
                s->act_cap = n;
        }
        memcpy(s->tokens, tokens, (size_t) n * sizeof(int32_t));
        s->n_new = n;
        check(s);
        return 0;
}

void axp_seq_end(axp_seq *s) {
        check(s);
        s->n_past += s->n_new;
        s->n_new = 0;
        check(s);
}

void axp_seq_release_activations(axp_seq *s) {
        free(s->tokens);
        free(s->x);
        free(s->qa);
        s->tokens = NULL;
        s->x = s->qa = NULL;
        s->act_cap = 0;
}

void axp_seq_truncate(axp_seq *s, int n) {
        if (n >= 0 && n < s->n_past)
                s->n_past = n;
        s->n_new = 0;
        if (s->logits_pos >= s->n_past)
                s->logits_pos = -1;
        check(s);
}
