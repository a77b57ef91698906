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
#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "cpu.h"
#include "kernels/macros.h"

#define ATT_QTILE 8

typedef struct att_job {
        const axp_cpu_ops *ops;
        const float *q;
        long ldq;
        float *out;
        long ldo;
        const uint8_t *k, *v;
        uint32_t kv_type;
        long ld_kv;       /* elements between rows */
        long head_stride; /* elements between KV heads */
        int n_q, n_head, n_head_kv, head_dim, group, qtile;
        const int32_t *pos;
        int window; /* > 0: query i sees positions pos[i] - window + 1 .. pos[i] only */
        int ring;   /* > 0: position p is in row p % ring (a multiple of ATT_CHUNK) */
        float scale;
        float softcap; /* > 0: scores soft-capped, softcap tanh(s / softcap) */

        int n_qtiles, n_chunks;
        float *part; /* split: [n_q][n_head][n_chunks][head_dim + 2] */
        _Alignas(64) _Atomic int next;
} att_job;

/* The first KV position query i attends to */
static int first_pos(const att_job *j, int i) {
        return j->window > 0 && j->pos[i] >= j->window ? j->pos[i] - j->window + 1 : 0;
}

/* The row of position p: a 256-aligned block of positions is contiguous in a ring */
static size_t kv_row(const att_job *j, int p) {
        return (size_t) (j->ring > 0 ? p % j->ring : p);
}

/* Where K (or V) of head kvh at position p starts */
static size_t kv_off(const att_job *j, int p, int kvh) {
        return att_kv_bytes(j->kv_type, kv_row(j, p) * j->ld_kv + (size_t) kvh * j->head_stride);
}

void axp_cpu_kv_store(uint32_t kv_type, const float *x, void *dst, int n) {
        if (kv_type == AXP_TYPE_F32) {
                memcpy(dst, x, (size_t) n * sizeof(float));
        } else if (kv_type == AXP_TYPE_F16) {
                axp_f16 *h = dst;
                for (int i = 0; i < n; i++)
                        h[i] = axp_f32_to_f16(x[i]);
        } else {
                /* as llama.cpp's CPU writes its Q8_0 cache: d = amax / 127, q = x * (127 / amax)
                 * rounded half to even */
                assert(kv_type == AXP_TYPE_Q8_0 && n % QK8_0 == 0);
                block_q8_0 *b = dst;
                for (int i = 0; i < n / QK8_0; i++, x += QK8_0) {
                        float amax = 0;
                        for (int c = 0; c < QK8_0; c++)
                                amax = fmaxf(amax, fabsf(x[c]));
                        float id = amax != 0.0f ? 127.0f / amax : 0.0f;
                        b[i].d = axp_f32_to_f16(amax / 127.0f);
                        for (int c = 0; c < QK8_0; c++)
                                b[i].qs[c] = (int8_t) nearbyintf(x[c] * id);
                }
        }
}

/* The vectors (query i, head kvh * G + g) for i in [i0, i1) that reach chunk c, through one
 * call of the ISA's chunk kernel for those that see the chunk from its start, and one more per
 * query whose sliding window starts inside it. Returns how many there were; their order is
 * i-major among each call's. */
static int chunk_run(const att_job *j, int kvh, int c, int i0, int i1, int *ret_i, int *ret_g,
                     float *m, float *l, float *acc, float *scratch) {
        const float *qv[ATT_MAX_VECS];
        int len[ATT_MAX_VECS], nv = 0, n_pos = 0, t0 = c * ATT_CHUNK;
        for (int i = i0; i < i1; i++) {
                if (j->pos[i] < t0 || first_pos(j, i) > t0)
                        continue;
                int n = MIN(j->pos[i] + 1 - t0, ATT_CHUNK);
                n_pos = MAX(n_pos, n);
                for (int g = 0; g < j->group; g++) {
                        qv[nv] = j->q + i * j->ldq + (kvh * j->group + g) * j->head_dim;
                        len[nv] = n;
                        ret_i[nv] = i;
                        ret_g[nv] = g;
                        nv++;
                }
        }
        if (nv > 0) {
                size_t off = kv_off(j, t0, kvh);
                j->ops->att_chunk(qv, nv, len, j->k + off, j->v + off, j->kv_type, j->ld_kv, n_pos,
                                  j->head_dim, j->scale, j->softcap, m, l, acc, scratch);
        }
        /* windows that start inside this chunk: the chunk's positions from the window's first */
        for (int i = i0; i < i1; i++) {
                int lo = first_pos(j, i);
                if (j->pos[i] < t0 || lo <= t0 || lo >= t0 + ATT_CHUNK)
                        continue;
                int n = MIN(j->pos[i] + 1, t0 + ATT_CHUNK) - lo, v0 = nv;
                for (int g = 0; g < j->group; g++) {
                        qv[g] = j->q + i * j->ldq + (kvh * j->group + g) * j->head_dim;
                        len[g] = n;
                        ret_i[nv] = i;
                        ret_g[nv] = g;
                        nv++;
                }
                size_t off = kv_off(j, lo, kvh);
                j->ops->att_chunk(qv, j->group, len, j->k + off, j->v + off, j->kv_type, j->ld_kv, n,
                                  j->head_dim, j->scale, j->softcap, m + v0, l + v0,
                                  acc + (size_t) v0 * j->head_dim, scratch);
        }
        return nv;
}

/* state = (M, L, ACC[head_dim]); the first chunk initializes it */
static void merge(float *state, int head_dim, bool first, float m, float l, const float *acc) {
        if (first) {
                state[0] = m;
                state[1] = l;
                memcpy(state + 2, acc, (size_t) head_dim * sizeof(float));
                return;
        }
        float mn = fmaxf(state[0], m);
        /* the chunk kernels' cut (cpu.h): no subnormal weights here either */
        float a = att_weight(state[0] - mn), b = att_weight(m - mn);
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

typedef struct att_bufs {
        float *scratch, *m, *l, *acc, *states;
        int *vi, *vg;
} att_bufs;

static att_bufs bufs_get(const att_job *j, size_t n_states) {
        size_t hd = (size_t) j->head_dim, nv = ATT_MAX_VECS;
        size_t n = ATT_SCRATCH + 2 * nv + nv * hd + n_states * (hd + 2) + 2 * nv;
        float *p = axp_cpu_scratch(AXP_SCRATCH_ATT, n * sizeof(float));
        att_bufs b = { .scratch = p };
        b.m = p + ATT_SCRATCH;
        b.l = b.m + nv;
        b.acc = b.l + nv;
        b.states = b.acc + nv * hd;
        b.vi = (int *) (b.states + n_states * (hd + 2));
        b.vg = b.vi + nv;
        return b;
}

/* Prefill: unit = (KV head, tile of queries), the later tiles (more work) first. */
static void prefill_fn(void *arg, int ith, int nth) {
        att_job *j = arg;
        int hd = j->head_dim, G = j->group, n_units = j->n_qtiles * j->n_head_kv;
        size_t state_len = (size_t) hd + 2;
        att_bufs b = bufs_get(j, (size_t) j->qtile * G);

        for (;;) {
                int u = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
                if (u >= n_units)
                        break;
                int tile = j->n_qtiles - 1 - u / j->n_head_kv, kvh = u % j->n_head_kv;
                int i0 = tile * j->qtile, i1 = MIN(j->n_q, i0 + j->qtile);
                int first_chunk = INT_MAX, last_chunk = 0;
                for (int i = i0; i < i1; i++) {
                        first_chunk = MIN(first_chunk, first_pos(j, i) / ATT_CHUNK);
                        last_chunk = MAX(last_chunk, j->pos[i] / ATT_CHUNK);
                }
                for (int c = first_chunk; c <= last_chunk; c++) {
                        int nv = chunk_run(j, kvh, c, i0, i1, b.vi, b.vg, b.m, b.l, b.acc, b.scratch);
                        for (int v = 0; v < nv; v++) {
                                float *state = b.states + ((b.vi[v] - i0) * G + b.vg[v]) * state_len;
                                merge(state, hd, c == first_pos(j, b.vi[v]) / ATT_CHUNK, b.m[v], b.l[v],
                                      b.acc + (size_t) v * hd);
                        }
                }
                for (int i = i0; i < i1; i++)
                        for (int g = 0; g < G; g++)
                                finish(b.states + ((i - i0) * G + g) * state_len, hd,
                                       j->out + i * j->ldo + (kvh * G + g) * hd);
        }
}

/* Decode: unit = (KV head, chunk); partials go to j->part and are merged afterwards. */
static void split_fn(void *arg, int ith, int nth) {
        att_job *j = arg;
        int hd = j->head_dim, n_units = j->n_chunks * j->n_head_kv;
        size_t part_len = (size_t) hd + 2;
        att_bufs b = bufs_get(j, 0);

        for (;;) {
                int u = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
                if (u >= n_units)
                        break;
                int c = u / j->n_head_kv, kvh = u % j->n_head_kv;
                int nv = chunk_run(j, kvh, c, 0, j->n_q, b.vi, b.vg, b.m, b.l, b.acc, b.scratch);
                for (int v = 0; v < nv; v++) {
                        int h = kvh * j->group + b.vg[v];
                        float *p = j->part + (((size_t) b.vi[v] * j->n_head + h) * j->n_chunks + c) * part_len;
                        p[0] = b.m[v];
                        p[1] = b.l[v];
                        memcpy(p + 2, b.acc + (size_t) v * hd, (size_t) hd * sizeof(float));
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
                int c0 = first_pos(j, i) / ATT_CHUNK;
                const float *p = j->part + ((size_t) ih * j->n_chunks + c0) * part_len;
                for (int c = c0; c <= j->pos[i] / ATT_CHUNK; c++, p += part_len)
                        merge(state, hd, c == c0, p[0], p[1], p + 2);
                finish(state, hd, j->out + i * j->ldo + h * hd);
        }
}

void axp_cpu_attention(axp_pool *pool, const float *q, long ldq, float *out, long ldo,
                       const void *k, const void *v, uint32_t kv_type, int n_q,
                       const int32_t *pos, int n_head, int n_head_kv, int head_dim, long ld_kv,
                       long head_stride, int window, int ring, float scale, float softcap) {
        assert(ring <= 0 || ring % ATT_CHUNK == 0);
        assert(kv_type == AXP_TYPE_F32 || kv_type == AXP_TYPE_F16 ||
               (kv_type == AXP_TYPE_Q8_0 && head_dim % QK8_0 == 0 && ld_kv % QK8_0 == 0 &&
                head_stride % QK8_0 == 0));
        assert(ld_kv >= head_dim && head_stride >= head_dim);
        assert(n_head_kv > 0 && n_head % n_head_kv == 0);
        assert(head_dim > 0 && head_dim <= ATT_MAX_HEAD_DIM);
        assert(n_head / n_head_kv <= ATT_MAX_VECS);
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
                .ld_kv = ld_kv,
                .head_stride = head_stride,
                .n_q = n_q,
                .n_head = n_head,
                .n_head_kv = n_head_kv,
                .head_dim = head_dim,
                .group = n_head / n_head_kv,
                .pos = pos,
                .window = window,
                .ring = ring,
                .scale = scale,
                .softcap = softcap > 0 ? softcap : 0,
        };
        j.qtile = MAX(1, MIN(ATT_QTILE, ATT_MAX_VECS / j.group));
        j.n_qtiles = DIV_ROUND_UP(n_q, j.qtile);
        int max_pos = 0;
        for (int i = 0; i < n_q; i++)
                max_pos = MAX(max_pos, pos[i]);
        j.n_chunks = max_pos / ATT_CHUNK + 1;
        int nth = axp_pool_size(pool);

        /* few units and a long context: split the positions too */
        if (j.n_chunks > 1 && (long) j.n_qtiles * n_head_kv < 4L * nth &&
            (long) n_q * j.group <= ATT_MAX_VECS) {
                size_t n = (size_t) n_q * n_head * j.n_chunks * (head_dim + 2);
                j.part = axp_cpu_scratch(AXP_SCRATCH_ATT_SPLIT, n * sizeof(float));
                axp_pool_run(pool, split_fn, &j);
                axp_pool_run(pool, split_merge_fn, &j);
        } else
                axp_pool_run(pool, prefill_fn, &j);
}
