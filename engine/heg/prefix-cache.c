/* SPDX-License-Identifier: MIT */
/* The engine's prompt cache (prefix-cache.h). */
#include "prefix-cache.h"

#include <stdlib.h>
#include <string.h>

void axp_prefix_cache_init(axp_prefix_cache *c, int max_entries) {
        *c = (axp_prefix_cache) { .max_entries = MAX(max_entries, 0) };
}

static void entry_drop(axp_prefix_cache *c, axp_kv_budget *b, int i) {
        axp_prefix_entry *e = &c->e[i];
        c->bytes -= e->kv.bytes;
        axp_kv_budget_release(b, &e->kv);
        axp_seq_free(&e->seq);
        free(e->tokens);
        c->e[i] = c->e[--c->n];
}

void axp_prefix_cache_clear(axp_prefix_cache *c, axp_kv_budget *b) {
        while (c->n > 0)
                entry_drop(c, b, c->n - 1);
}

void axp_prefix_cache_free(axp_prefix_cache *c, axp_kv_budget *b) {
        axp_prefix_cache_clear(c, b);
        while (c->n_live > 0)
                axp_prefix_cache_forget(c, c->live[c->n_live - 1].owner);
        free(c->e);
        free(c->live);
        c->e = NULL;
        c->live = NULL;
        c->cap_live = 0;
}

static int common(const int32_t *a, int na, const int32_t *b, int nb) {
        int i = 0;
        while (i < na && i < nb && a[i] == b[i])
                i++;
        return i;
}

/* Whether an entry may serve (or be replaced by) a request of this scope and cache. */
static bool same_kind(const axp_prefix_entry *e, uint64_t scope, const axp_seq *s) {
        return e->scope == scope && e->seq.model == s->model && e->seq.kv_type == s->kv_type;
}

int axp_prefix_cache_seed(axp_prefix_cache *c, uint64_t scope, axp_seq *dst, const int32_t *tokens, int n,
                          axp_error *err) {
        int best = -1, len = 0;
        const axp_seq *from = NULL;
        for (int i = 0; i < c->n; i++) {
                axp_prefix_entry *e = &c->e[i];
                if (!same_kind(e, scope, dst))
                        continue;
                int k = common(e->tokens, e->seq.n_past, tokens, n - 1);
                /* a sliding-window layer's ring holds the window behind its last positions
                 * only: a prompt must go on from (about) where the entry ends */
                if (k > len && axp_seq_can_copy_prefix(&e->seq, k)) {
                        len = k;
                        best = i;
                        from = &e->seq;
                }
        }
        for (int i = 0; i < c->n_live; i++) {
                axp_prefix_live *l = &c->live[i];
                if (l->scope != scope || l->seq->model != dst->model || l->seq->kv_type != dst->kv_type)
                        continue;
                int k = common(l->tokens, l->n, tokens, n - 1);
                /* with sliding-window layers: while its rings still hold the window, as it
                 * decodes (its pending token's row counted) */
                if (k > len && axp_seq_can_copy_prefix(l->seq, k)) {
                        len = k;
                        best = -1;
                        from = l->seq;
                }
        }
        if (!from || len < AXP_PREFIX_MIN)
                return 0;
        int r = axp_seq_copy_prefix(dst, from, len, err);
        if (r < 0)
                return r;
        if (best >= 0)
                c->e[best].used = ++c->clock;
        return len;
}

bool axp_prefix_cache_evict(axp_prefix_cache *c, axp_kv_budget *b) {
        if (c->n == 0)
                return false;
        int lru = 0;
        for (int i = 1; i < c->n; i++)
                if (c->e[i].used < c->e[lru].used)
                        lru = i;
        entry_drop(c, b, lru);
        return true;
}

/* A request's cache was sized for the answer it might have given (up to the context): one
 * kept holds its positions and little more, copied into one of that size. */
#define SLACK 256

static void shrink(axp_seq *seq) {
        axp_seq small = { 0 };
        axp_error e = { 0 };
        if (seq->kv_cap <= seq->n_past + SLACK)
                return;
        if (axp_seq_init(&small, seq->model, seq->kv_type, seq->n_ctx_max, seq->n_past, &e) == 0 &&
            axp_seq_copy_prefix(&small, seq, seq->n_past, &e) == 0) {
                axp_seq_free(seq);
                *seq = small;
        } else
                axp_seq_free(&small); /* out of memory: kept as it is */
}

/* Whether seq's positions (tokens) are worth an entry: the cache is on, they are enough,
 * and no entry of the scope holds them all already and can give them (that one is then used
 * now). */
static bool wanted(axp_prefix_cache *c, uint64_t scope, const axp_seq *seq, const int32_t *tokens) {
        const int n = seq->n_past;
        if (c->max_entries == 0 || n < AXP_PREFIX_MIN)
                return false;
        for (int i = 0; i < c->n; i++)
                if (same_kind(&c->e[i], scope, seq) && common(c->e[i].tokens, c->e[i].seq.n_past, tokens, n) == n &&
                    axp_seq_can_copy_prefix(&c->e[i].seq, n)) {
                        c->e[i].used = ++c->clock;
                        return false;
                }
        return true;
}

void axp_prefix_cache_put(axp_prefix_cache *c, axp_kv_budget *b, uint64_t scope, axp_seq *seq,
                          const int32_t *tokens) {
        const int n = seq->n_past;
        uint64_t bytes;
        int32_t *copy = NULL;

        if (!wanted(c, scope, seq, tokens))
                goto drop;
        shrink(seq);
        if ((bytes = axp_seq_kv_bytes(seq)) > b->limit / 2)
                goto drop;
        /* an entry holding a beginning of this: this one replaces it (where its rings can
         * give that beginning) */
        for (int i = 0; i < c->n; i++)
                if (same_kind(&c->e[i], scope, seq) &&
                    common(c->e[i].tokens, c->e[i].seq.n_past, tokens, n) == c->e[i].seq.n_past &&
                    axp_seq_can_copy_prefix(seq, c->e[i].seq.n_past))
                        entry_drop(c, b, i--);
        while (c->n > 0 && (c->n >= c->max_entries || c->bytes + bytes > b->limit / 2))
                axp_prefix_cache_evict(c, b);
        if (c->n >= c->max_entries || c->bytes + bytes > b->limit / 2)
                goto drop;
        copy = malloc(sizeof(int32_t) * (size_t) n);
        if (!copy)
                goto drop;
        if (!c->e && !(c->e = calloc((size_t) c->max_entries, sizeof(*c->e))))
                goto drop;
        memcpy(copy, tokens, sizeof(int32_t) * (size_t) n);
        axp_seq_release_activations(seq);
        axp_prefix_entry *e = &c->e[c->n++];
        *e = (axp_prefix_entry) { .scope = scope, .tokens = copy, .seq = *seq, .used = ++c->clock };
        memset(seq, 0, sizeof(*seq));
        /* the memory is in use already: the budget takes it without refusing */
        axp_kv_budget_set(b, &e->kv, bytes);
        c->bytes += bytes;
        return;
drop:
        free(copy);
        axp_seq_free(seq);
}

void axp_prefix_cache_share(axp_prefix_cache *c, const void *owner, uint64_t scope, const axp_seq *seq,
                            const int32_t *tokens) {
        const int n = seq->n_past;
        if (!wanted(c, scope, seq, tokens))
                return;
        if (axp_grow((void **) &c->live, &c->cap_live, (size_t) c->n_live + 1, sizeof(*c->live)) < 0)
                return;
        int32_t *copy = malloc(sizeof(int32_t) * (size_t) n);
        if (!copy)
                return;
        memcpy(copy, tokens, sizeof(int32_t) * (size_t) n);
        c->live[c->n_live++] = (axp_prefix_live) { owner, scope, seq, copy, n };
}

void axp_prefix_cache_forget(axp_prefix_cache *c, const void *owner) {
        for (int i = 0; i < c->n_live; i++)
                if (c->live[i].owner == owner) {
                        free(c->live[i].tokens);
                        c->live[i] = c->live[--c->n_live];
                        return;
                }
}

int axp_prefix_cache_forget_scope(axp_prefix_cache *c, axp_kv_budget *b, uint64_t scope) {
        int n = 0;
        for (int i = 0; i < c->n; i++)
                if (c->e[i].scope == scope) {
                        entry_drop(c, b, i--);
                        n++;
                }
        for (int i = 0; i < c->n_live; i++)
                if (c->live[i].scope == scope)
                        axp_prefix_cache_forget(c, c->live[i--].owner);
        return n;
}

int axp_prefix_cache_reserve(axp_prefix_cache *c, axp_kv_budget *b, axp_kv_hold *h, uint64_t bytes,
                             axp_error *err) {
        for (;;) {
                axp_error e = { 0 };
                int r = axp_kv_budget_reserve(b, h, bytes, &e);
                if (r != -EBUSY || !axp_prefix_cache_evict(c, b)) {
                        if (r < 0 && err)
                                *err = e;
                        return r;
                }
        }
}
