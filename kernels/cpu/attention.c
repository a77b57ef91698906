/* SPDX-License-Identifier: MIT */
/* Causal attention of one request's queries over its KV cache.
 *
 * Every (query, head) is computed the same way whatever the work split: the KV positions are
 * cut into fixed chunks of ATT_CHUNK; each chunk gives a partial softmax (its max m, sum l and
 * weighted value sum), and the partials are merged in chunk order. Prefill gives each thread
 * whole (KV head, query tile) units so the chunk of K/V is reused by every query head of the
 * GQA group; decode (few queries, few units) splits the chunks over the threads too and merges
 * afterwards. Either way the bits are the same, so results depend neither on the thread count
 * nor on whether a token was computed in a prefill or a decode step. */
#include <assert.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "cpu.h"
#include "util.h"

#define ATT_CHUNK 256
#define ATT_QTILE 8

typedef struct att_job {
        const axp_cpu_ops *ops;
        const float *q;
        long ldq;
        float *out;
        long ldo;
        const uint8_t *k, *v;
        uint32_t kv_type;
        size_t kv_elem;
        long ld_kv; /* elements between positions */
        int n_q, n_head, n_head_kv, head_dim, group;
        const int32_t *pos;
        float scale;

        int n_qtiles, n_chunks;
        float *part; /* split: [n_q][n_head][n_chunks][head_dim + 2] */
        _Alignas(64) _Atomic int next;
} att_job;

/* The partial softmax of query head qh over chunk c of KV head kvh, positions < end. */
static void chunk_partial(const att_job *j, const float *qh, int kvh, int c, int end, float *s,
                          float *ret_m, float *ret_l, float *acc) {
        int t0 = c * ATT_CHUNK, n = MIN(end, t0 + ATT_CHUNK) - t0;
        size_t off = ((size_t) t0 * j->ld_kv + (size_t) kvh * j->head_dim) * j->kv_elem;
        j->ops->att_scores(qh, j->k + off, j->kv_type, j->ld_kv, n, j->head_dim, j->scale, s);
        j->ops->att_softmax(s, n, ret_m, ret_l);
        memset(acc, 0, (size_t) j->head_dim * sizeof(float));
        j->ops->att_accum(s, j->v + off, j->kv_type, j->ld_kv, n, j->head_dim, acc);
}

/* state = (M, L, ACC[head_dim]); the first chunk initializes it */
static void merge(float *state, int head_dim, int c, float m, float l, const float *acc) {
        if (c == 0) {
                state[0] = m;
                state[1] = l;
                memcpy(state + 2, acc, (size_t) head_dim * sizeof(float));
                return;
        }
        float mn = fmaxf(state[0], m);
        float a = expf(state[0] - mn), b = expf(m - mn);
        state[0] = mn;
        state[1] = state[1] * a + l * b;
        for (int i = 0; i < head_dim; i++)
                state[2 + i] = state[2 + i] * a + acc[i] * b;
}

static void finish(const float *state, int head_dim, float *out) {
        float inv = 1.0f / state[1];
        for (int i = 0; i < head_dim; i++)
                out[i] = state[2 + i] * inv;
}

/* Prefill: unit = (KV head, tile of queries), the later tiles (more work) first. */
static void prefill_fn(void *arg, int ith, int nth) {
        att_job *j = arg;
        int hd = j->head_dim, G = j->group, n_units = j->n_qtiles * j->n_head_kv;
        size_t state_len = (size_t) hd + 2;
        float *states = axp_cpu_scratch(AXP_SCRATCH_ATT, (size_t) ATT_QTILE * G * state_len * sizeof(float));
        float s[ATT_CHUNK], acc[ATT_MAX_HEAD_DIM];

        for (;;) {
                int u = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
                if (u >= n_units)
                        break;
                int tile = j->n_qtiles - 1 - u / j->n_head_kv, kvh = u % j->n_head_kv;
                int i0 = tile * ATT_QTILE, i1 = MIN(j->n_q, i0 + ATT_QTILE);
                int last_chunk = 0;
                for (int i = i0; i < i1; i++)
                        last_chunk = MAX(last_chunk, j->pos[i] / ATT_CHUNK);
                for (int c = 0; c <= last_chunk; c++)
                        for (int i = i0; i < i1; i++) {
                                if (j->pos[i] / ATT_CHUNK < c)
                                        continue;
                                for (int g = 0; g < G; g++) {
                                        int h = kvh * G + g;
                                        float m, l;
                                        chunk_partial(j, j->q + i * j->ldq + h * hd, kvh, c, j->pos[i] + 1, s,
                                                      &m, &l, acc);
                                        merge(states + ((i - i0) * G + g) * state_len, hd, c, m, l, acc);
                                }
                        }
                for (int i = i0; i < i1; i++)
                        for (int g = 0; g < G; g++)
                                finish(states + ((i - i0) * G + g) * state_len, hd,
                                       j->out + i * j->ldo + (kvh * G + g) * hd);
        }
}

/* Decode: unit = (KV head, chunk); partials go to j->part and are merged afterwards. */
static void split_fn(void *arg, int ith, int nth) {
        att_job *j = arg;
        int hd = j->head_dim, G = j->group, n_units = j->n_chunks * j->n_head_kv;
        size_t part_len = (size_t) hd + 2;
        float s[ATT_CHUNK];

        for (;;) {
                int u = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
                if (u >= n_units)
                        break;
                int c = u / j->n_head_kv, kvh = u % j->n_head_kv;
                for (int i = 0; i < j->n_q; i++) {
                        if (j->pos[i] / ATT_CHUNK < c)
                                continue;
                        for (int g = 0; g < G; g++) {
                                int h = kvh * G + g;
                                float *p = j->part + (((size_t) i * j->n_head + h) * j->n_chunks + c) * part_len;
                                chunk_partial(j, j->q + i * j->ldq + h * hd, kvh, c, j->pos[i] + 1, s, &p[0],
                                              &p[1], p + 2);
                        }
                }
        }
}

static void split_merge_fn(void *arg, int ith, int nth) {
        att_job *j = arg;
        int hd = j->head_dim;
        size_t part_len = (size_t) hd + 2;
        float state[ATT_MAX_HEAD_DIM + 2];
        long lo, hi;
        axp_split((long) j->n_q * j->n_head, ith, nth, 1, &lo, &hi);
        for (long ih = lo; ih < hi; ih++) {
                int i = (int) (ih / j->n_head), h = (int) (ih % j->n_head);
                const float *p = j->part + (size_t) ih * j->n_chunks * part_len;
                for (int c = 0; c <= j->pos[i] / ATT_CHUNK; c++, p += part_len)
                        merge(state, hd, c, p[0], p[1], p + 2);
                finish(state, hd, j->out + i * j->ldo + h * hd);
        }
}

void axp_cpu_attention(axp_pool *pool, const float *q, long ldq, float *out, long ldo,
                       const void *k, const void *v, uint32_t kv_type, int n_q,
                       const int32_t *pos, int n_head, int n_head_kv, int head_dim,
                       float scale) {
        assert(kv_type == AXP_TYPE_F32 || kv_type == AXP_TYPE_F16);
        assert(n_head_kv > 0 && n_head % n_head_kv == 0);
        assert(head_dim > 0 && head_dim <= ATT_MAX_HEAD_DIM);
        if (n_q <= 0)
                return;
        att_job j = {
                .ops = axp_cpu_ops_get(),
                .q = q,
                .ldq = ldq,
                .out = out,
                .ldo = ldo,
                .k = k,
                .v = v,
                .kv_type = kv_type,
                .kv_elem = kv_type == AXP_TYPE_F16 ? 2 : 4,
                .ld_kv = (long) n_head_kv * head_dim,
                .n_q = n_q,
                .n_head = n_head,
                .n_head_kv = n_head_kv,
                .head_dim = head_dim,
                .group = n_head / n_head_kv,
                .pos = pos,
                .scale = scale,
                .n_qtiles = DIV_ROUND_UP(n_q, ATT_QTILE),
        };
        int max_pos = 0;
        for (int i = 0; i < n_q; i++)
                max_pos = MAX(max_pos, pos[i]);
        j.n_chunks = max_pos / ATT_CHUNK + 1;
        int nth = axp_pool_size(pool);

        /* few units and a long context: split the positions too */
        if (j.n_chunks > 1 && (long) j.n_qtiles * n_head_kv < 4L * nth && n_q <= 16) {
                size_t n = (size_t) n_q * n_head * j.n_chunks * (head_dim + 2);
                j.part = axp_cpu_scratch(AXP_SCRATCH_ATT_SPLIT, n * sizeof(float));
                axp_pool_run(pool, split_fn, &j);
                axp_pool_run(pool, split_merge_fn, &j);
        } else
                axp_pool_run(pool, prefill_fn, &j);
}
