/* SPDX-License-Identifier: MIT */
/* Per-request forward state: the KV cache (grown on demand, page-aligned so a device with
 * host-unified memory can use it without a copy) and the activations of pending tokens. */
#include <assert.h>
#include <string.h>

#include "seq.h"
#include "kernels/cpu/kernels.h"
#include "kernels/types.h"

#define RING_ALIGN 256 /* ATT_CHUNK: the CPU attention's blocks never wrap */

/* The KV cache holds what is committed and is never larger than the context; the pending
 * tokens fit in it and in the activations. */
static void check(const axp_seq *s) {
        assert(s->n_past >= 0 && s->n_past <= s->kv_cap && s->kv_cap <= s->n_ctx_max);
        assert(s->swa_cap <= s->n_ctx_max && (s->swa_cap >= s->n_ctx_max || s->swa_cap % RING_ALIGN == 0));
        assert(s->n_new >= 0 && s->n_past + s->n_new <= s->kv_cap && s->n_new <= s->act_cap);
        assert(s->logits_pos < s->n_past + s->n_new);
        assert(s->swa_cap == 0 ? s->swa_from == 0 : s->swa_from >= MAX(s->n_past - s->swa_cap, 0));
}

/* The first position a sliding-window layer's queries at position pos and after still see. */
static int window_start(const axp_hparams *hp, int pos) {
        return hp->n_swa > 0 && pos >= hp->n_swa ? pos - hp->n_swa + 1 : 0;
}

int axp_kv_type_from_name(const char *name, uint32_t *ret) {
        if (name && strcmp(name, "f16") == 0)
                *ret = AXP_TYPE_F16;
        else if (name && strcmp(name, "f32") == 0)
                *ret = AXP_TYPE_F32;
        else if (name && strcmp(name, "q8_0") == 0)
                *ret = AXP_TYPE_Q8_0;
        else
                return -EINVAL;
        return 0;
}

const char *axp_kv_type_name(uint32_t kv_type) {
        return kv_type == AXP_TYPE_F16    ? "f16"
               : kv_type == AXP_TYPE_F32  ? "f32"
               : kv_type == AXP_TYPE_Q8_0 ? "q8_0"
                                          : "?";
}

int axp_kv_type_check(const axp_hparams *hp, uint32_t kv_type, axp_error *err) {
        if (kv_type != AXP_TYPE_F32 && kv_type != AXP_TYPE_F16 && kv_type != AXP_TYPE_Q8_0)
                return axp_errorf(err, -EINVAL, "KV cache type must be f16, f32 or q8_0");
        if (kv_type == AXP_TYPE_Q8_0 && hp->head_dim % QK8_0 != 0)
                return axp_errorf(err, -EINVAL,
                                  "a q8_0 KV cache needs a head size that is a multiple of 32; this model's is %d "
                                  "(use f16 or f32)",
                                  hp->head_dim);
        return 0;
}

size_t axp_kv_row_bytes(const axp_hparams *hp, uint32_t kv_type) {
        return (size_t) axp_type_row_size(kv_type, (int64_t) hp->n_head_kv * hp->head_dim);
}

size_t axp_kv_head_bytes(const axp_hparams *hp, uint32_t kv_type) {
        return (size_t) axp_type_row_size(kv_type, hp->head_dim);
}

static bool has_swa(const axp_hparams *hp) {
        for (int l = 0; l < hp->n_layer; l++)
                if (axp_layer_is_swa(hp, l))
                        return true;
        return false;
}

int axp_kv_ring_rows(const axp_hparams *hp, int n_ctx, int span) {
        long rows = ((long) hp->n_swa - 1 + MAX(span, 1) + RING_ALIGN - 1) / RING_ALIGN * RING_ALIGN;
        return (int) MIN(rows, (long) n_ctx);
}

size_t axp_kv_cache_bytes(const axp_hparams *hp, uint32_t kv_type, int n_ctx, int span) {
        size_t rows = 0;
        for (int l = 0; l < hp->n_layer; l++)
                rows += axp_layer_is_swa(hp, l) ? (size_t) axp_kv_ring_rows(hp, n_ctx, span) : (size_t) n_ctx;
        return 2 * rows * axp_kv_row_bytes(hp, kv_type);
}

static size_t kv_row_bytes(const axp_seq *s) {
        return axp_kv_row_bytes(&s->model->hp, s->kv_type);
}

size_t axp_seq_kv_bytes(const axp_seq *s) {
        size_t rows = 0;
        for (int l = 0; l < s->model->hp.n_layer; l++)
                rows += (size_t) axp_seq_kv_rows(s, l);
        return 2 * rows * kv_row_bytes(s);
}

/* Rows for n more positions (n_past + n on a full-attention layer, the ring on a sliding-
 * window one), grown geometrically so a long generation reallocates a few times, not per
 * token. A ring shorter than the context is a multiple of RING_ALIGN. */
static int grown_rows(const axp_seq *s, bool swa, int n, int span) {
        int cur = swa ? s->swa_cap : s->kv_cap, need = s->n_past + n, limit = s->n_ctx_max;
        if (swa) {
                limit = axp_kv_ring_rows(&s->model->hp, s->n_ctx_max, span);
                need = MIN(need, limit);
        }
        if (need <= cur)
                return cur;
        int rows = MAX(need, MIN(limit, MAX(cur * 2, 256)));
        if (swa && rows < s->n_ctx_max)
                rows = MIN(s->n_ctx_max, (rows + RING_ALIGN - 1) / RING_ALIGN * RING_ALIGN);
        return rows;
}

/* Room for n more positions, span of them written ahead of their attention. Every new
 * buffer is allocated before any is used, so a failure leaves the cache as it was. */
static int kv_grow(axp_seq *s, int n, int span, axp_error *err) {
        const axp_hparams *hp = &s->model->hp;
        const int cap = grown_rows(s, false, n, span), swa_cap = has_swa(hp) ? grown_rows(s, true, n, span) : 0;
        const size_t row = kv_row_bytes(s), hb = axp_kv_head_bytes(hp, s->kv_type);
        _cleanup_free_ void **nk = NULL, **nv = NULL;

        if (cap == s->kv_cap && swa_cap == s->swa_cap)
                return 0;
        nk = calloc((size_t) hp->n_layer, sizeof(void *));
        nv = calloc((size_t) hp->n_layer, sizeof(void *));
        bool ok = nk && nv;
        for (int l = 0; ok && l < hp->n_layer; l++) {
                const bool swa = axp_layer_is_swa(hp, l);
                const int rows = swa ? swa_cap : cap;
                if (rows == (swa ? s->swa_cap : s->kv_cap))
                        continue;
                nk[l] = axp_cpu_huge_alloc((size_t) rows * row);
                nv[l] = axp_cpu_huge_alloc((size_t) rows * row);
                ok = nk[l] && nv[l];
        }
        if (!ok) {
                for (int l = 0; nk && nv && l < hp->n_layer; l++) {
                        free(nk[l]);
                        free(nv[l]);
                }
                return axp_errorf(err, -ENOMEM, "out of memory for a KV cache of %d positions", MAX(cap, swa_cap));
        }
        for (int l = 0; l < hp->n_layer; l++) {
                if (!nk[l])
                        continue;
                const bool swa = axp_layer_is_swa(hp, l);
                const int old = swa ? s->swa_cap : s->kv_cap, rows = swa ? swa_cap : cap;
                /* the positions a later query can still see, each head's part from its row in
                 * the old layout to its row in the new one */
                for (int p = swa ? axp_layer_kv_start(hp, l, s->n_past) : 0; p < s->n_past; p++)
                        for (int h = 0; h < hp->n_head_kv; h++) {
                                size_t to = axp_kv_offset(hb, rows, h, p % rows), from = axp_kv_offset(hb, old, h, p % old);
                                memcpy((char *) nk[l] + to, (char *) s->k[l] + from, hb);
                                memcpy((char *) nv[l] + to, (char *) s->v[l] + from, hb);
                        }
                free(s->k[l]);
                free(s->v[l]);
                s->k[l] = nk[l];
                s->v[l] = nv[l];
        }
        /* a new ring took the window behind n_past alone */
        if (swa_cap != s->swa_cap)
                s->swa_from = MAX(s->swa_from, window_start(hp, s->n_past));
        s->kv_cap = cap;
        s->swa_cap = swa_cap;
        return 0;
}

int axp_seq_init(axp_seq *s, const axp_model *m, uint32_t kv_type, int n_ctx_max, int kv_reserve,
                 axp_error *err) {
        int r = axp_kv_type_check(&m->hp, kv_type, err);
        if (r < 0)
                return r;
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
        /* the sliding-window layers reserve their window; a prompt staged later grows them
         * by what its chunks need */
        r = kv_grow(s, MIN(MAX(kv_reserve, 1), s->n_ctx_max), 1, err);
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
        if ((r = kv_grow(s, n, s->kv_span > 0 ? MIN(s->kv_span, n) : n, err)) < 0)
                return r;
        if (n > s->act_cap) {
                axp_seq_release_activations(s);
                s->tokens = malloc((size_t) n * sizeof(int32_t));
                s->x = axp_cpu_huge_alloc((size_t) n * hp->n_embd * sizeof(float));
                s->qa = axp_cpu_huge_alloc((size_t) n * hp->n_head * hp->head_dim * sizeof(float));
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

void axp_seq_set_span(axp_seq *s, int span) {
        s->kv_span = MAX(span, 0);
}

void axp_seq_end(axp_seq *s) {
        s->n_past += s->n_new;
        s->n_new = 0;
        /* the ring's rows now hold its last swa_cap positions */
        if (s->swa_cap)
                s->swa_from = MAX(s->swa_from, s->n_past - s->swa_cap);
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

bool axp_seq_model_has_swa(const axp_hparams *hp) {
        return has_swa(hp);
}

/* The first position the rings hold and keep while the pending tokens' rows are written (a
 * running request's, which devices may be writing now: they overwrite the ring's oldest). */
static int held_from(const axp_seq *s) {
        return s->swa_cap ? MAX(s->swa_from, s->n_past + s->n_new - s->swa_cap) : 0;
}

bool axp_seq_can_copy_prefix(const axp_seq *src, int n) {
        return n >= 0 && n <= src->n_past && (!src->swa_cap || window_start(&src->model->hp, n) >= held_from(src));
}

/* Positions [p0, p1) of layer l from src's rows to dst's, each head's run in at most a few
 * pieces where a ring wraps. */
static void copy_rows(axp_seq *dst, const axp_seq *src, int l, int p0, int p1) {
        const axp_hparams *hp = &src->model->hp;
        const size_t hb = axp_kv_head_bytes(hp, src->kv_type);
        const int rd = axp_seq_kv_rows(dst, l), rs = axp_seq_kv_rows(src, l);
        for (int p = p0; p < p1;) {
                /* a run that wraps in neither */
                const int n = MIN(p1 - p, MIN(rd - p % rd, rs - p % rs));
                for (int h = 0; h < hp->n_head_kv; h++) {
                        size_t to = axp_kv_offset(hb, rd, h, p % rd), from = axp_kv_offset(hb, rs, h, p % rs);
                        memcpy((char *) dst->k[l] + to, (const char *) src->k[l] + from, (size_t) n * hb);
                        memcpy((char *) dst->v[l] + to, (const char *) src->v[l] + from, (size_t) n * hb);
                }
                p += n;
        }
}

int axp_seq_copy_prefix(axp_seq *dst, const axp_seq *src, int n, axp_error *err) {
        const axp_hparams *hp = &src->model->hp;
        if (dst->model != src->model || dst->kv_type != src->kv_type || !axp_seq_can_copy_prefix(src, n) ||
            n > dst->n_ctx_max || dst->n_past != 0 || dst->n_new != 0)
                return axp_errorf(err, -EINVAL, "a KV cache cannot start with that one's positions");
        /* rings long enough for every position src's still holds (as long as its, at most),
         * so that a prompt may leave them as far before n as it could leave src */
        const int held = held_from(src), span = src->swa_cap ? MAX(n - held - hp->n_swa + 1, 1) : 1;
        int r = kv_grow(dst, n, span, err);
        if (r < 0)
                return r;
        /* a ring takes what it can hold of the positions src's still holds, the window behind n
         * at least */
        const int from = dst->swa_cap ? MAX(held, n - dst->swa_cap) : 0;
        for (int l = 0; l < hp->n_layer; l++)
                copy_rows(dst, src, l, axp_layer_is_swa(hp, l) ? from : 0, n);
        dst->n_past = n;
        dst->swa_from = from;
        check(dst);
        return 0;
}

void axp_seq_truncate(axp_seq *s, int n) {
        assert(n >= s->n_past || n == 0 || s->swa_cap == 0 || s->swa_cap >= s->n_ctx_max ||
               s->n_past - n <= s->swa_cap - s->model->hp.n_swa);
        /* the pending tokens may have written their rows, over the ring's oldest */
        if (s->swa_cap)
                s->swa_from = MAX(s->swa_from, s->n_past + s->n_new - s->swa_cap);
        if (n >= 0 && n < s->n_past)
                s->n_past = n;
        s->n_new = 0;
        s->swa_from = MIN(s->swa_from, s->n_past);
        if (s->logits_pos >= s->n_past)
                s->logits_pos = -1;
        check(s);
}
