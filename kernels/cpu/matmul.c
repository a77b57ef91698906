/* SPDX-License-Identifier: MIT */
/* Y_i = X W_i^T for weights that share their input. The activations are converted once per
 * call (quantized to 8 bits per block for integer weights, as llama.cpp does), then the
 * threads take chunks of 16-row groups (below). Every output element is
 * computed by one thread with one fixed sequence of operations, whatever the chunking, the
 * thread count or the number of tokens, so results are reproducible bit for bit.
 *
 * Decode (few tokens): each group is streamed from memory once for all tokens. Prefill: the
 * tokens are cut into blocks whose activations stay in L2 while the chunk's groups (also
 * L2-sized) are run over them.
 *
 * Each thread (pool share) owns a contiguous run of chunks and takes them in order, so its
 * stream of weights, and the decode loops' prefetch ahead of it, runs on from one chunk into
 * the next; a thread whose run is done takes chunks from the end of another's, so one slowed
 * by another process does not hold the others up. */
#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "kernels/macros.h"

#define MAX_WEIGHTS 8
/* shares with a run of their own; a larger pool's shares past this take from the others */
#define MAX_RUNS 64
/* target bytes of a chunk's weights and of a token block's activations (each stays in L2) */
#define CHUNK_BYTES (384 * 1024)
#define TOKEN_BLOCK_BYTES (512 * 1024)

/* Per-thread scratch buffers that only grow; freed when the thread exits. */
typedef struct scratch {
        void *p[AXP_SCRATCH__MAX];
        size_t n[AXP_SCRATCH__MAX];
} scratch;

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void scratch_free(void *p) {
        scratch *s = p;
        for (int i = 0; i < AXP_SCRATCH__MAX; i++)
                free(s->p[i]);
        free(s);
}

static void scratch_init(void) {
        (void) pthread_key_create(&scratch_key, scratch_free);
}

void *axp_cpu_scratch(int slot, size_t n) {
        pthread_once(&scratch_once, scratch_init);
        scratch *s = pthread_getspecific(scratch_key);
        if (!s) {
                s = calloc(1, sizeof(*s));
                if (!s || pthread_setspecific(scratch_key, s) != 0)
                        abort();
        }
        if (s->n[slot] < n) {
                free(s->p[slot]);
                n = axp_align_up(n + n / 4, 4096);
                s->p[slot] = aligned_alloc(AXP_ALIGN, n);
                if (!s->p[slot])
                        abort(); /* like malloc failing inside a kernel: nothing sane to do */
                s->n[slot] = n;
        }
        return s->p[slot];
}

typedef struct matmul_job {
        const axp_cpu_ops *ops;
        int n_w;
        const axp_weight *w[MAX_WEIGHTS];
        const axp_packed *pk[MAX_WEIGHTS]; /* NULL: pack on the fly */
        axp_gemm_fn gemm[MAX_WEIGHTS];
        size_t group_bytes[MAX_WEIGHTS];
        int64_t n_groups[MAX_WEIGHTS];
        int64_t chunk_groups[MAX_WEIGHTS]; /* groups per chunk */
        int64_t chunk_first[MAX_WEIGHTS + 1];
        axp_act act[AXP_ACT__MAX];
        float *const *y;
        const long *ldy;
        int n_tok, token_block;

        const float *x;
        long ldx;

        int n_runs;
        /* share i's run of chunks: the next to take from the front (low 32 bits) and the end
         * (high 32 bits), changed together so a chunk is taken once */
        struct {
                _Alignas(64) _Atomic uint64_t front_end;
        } run[MAX_RUNS];
} matmul_job;

/* The next chunk of run r: from its front (its owner) or from its end (another share); -1
 * when the run is empty. */
static int64_t take_chunk(matmul_job *j, int r, bool owner) {
        uint64_t v = atomic_load_explicit(&j->run[r].front_end, memory_order_relaxed);
        for (;;) {
                uint32_t front = (uint32_t) v, end = (uint32_t) (v >> 32);
                if (front >= end)
                        return -1;
                uint64_t nv = owner ? v + 1 : (uint64_t) (end - 1) << 32 | front;
                if (atomic_compare_exchange_weak_explicit(&j->run[r].front_end, &v, nv, memory_order_relaxed,
                                                          memory_order_relaxed))
                        return owner ? front : end - 1;
        }
}

static void quantize_fn(void *arg, int ith, int nth) {
        matmul_job *j = arg;
        long lo, hi;
        axp_split(j->n_tok, ith, nth, 1, &lo, &hi);
        for (int kind = 0; kind < AXP_ACT__MAX; kind++) {
                axp_act *a = &j->act[kind];
                if (!a->data)
                        continue;
                int64_t nb = axp_act_blocks(a);
                for (long t = lo; t < hi; t++) {
                        const uint8_t *row = a->data + t * a->stride;
                        j->ops->quant[kind](j->x + t * j->ldx, a->k, (uint8_t *) row);
                        float *td = a->tile_d + (t / 16) * nb * 16 + t % 16;
                        for (int64_t b = 0; b < nb; b++)
                                td[b * 16] = kind == AXP_ACT_Q8_0 ? act_q8_0_d(row, b) : act_q8_K_d(row, b);
                }
        }
}

static void run_chunk(matmul_job *j, int i, int64_t g0, int64_t g1) {
        const axp_weight *w = j->w[i];
        const axp_act *act = &j->act[axp_act_kind_of(w->type)];
        axp_gemm_fn gemm = j->gemm[i];
        size_t gb = j->group_bytes[i];
        const uint8_t *groups;

        if (j->pk[i])
                groups = j->pk[i]->data + g0 * gb;
        else {
                uint8_t *buf = axp_cpu_scratch(AXP_SCRATCH_PACK, (size_t) (g1 - g0) * gb);
                for (int64_t g = g0; g < g1; g++) {
                        int n_rows = (int) MIN(AXP_GROUP, w->n_out - g * AXP_GROUP);
                        const uint8_t *raw = (const uint8_t *) w->data + (uint64_t) g * AXP_GROUP * w->row_bytes;
                        axp_pack_group(w->type, raw, w->row_bytes, w->n_in, n_rows, buf + (g - g0) * gb);
                }
                groups = buf;
        }

        for (int t0 = 0; t0 < j->n_tok; t0 += j->token_block) {
                int nt = MIN(j->token_block, j->n_tok - t0);
                for (int64_t g = g0; g < g1; g++) {
                        int n_rows = (int) MIN(AXP_GROUP, w->n_out - g * AXP_GROUP);
                        gemm(groups + (g - g0) * gb, act, t0, nt, j->y[i] + t0 * j->ldy[i] + g * AXP_GROUP,
                             j->ldy[i], n_rows);
                }
        }
}

static void run_chunk_index(matmul_job *j, int64_t c) {
        int i = 0;
        while (c >= j->chunk_first[i + 1])
                i++;
        int64_t g0 = (c - j->chunk_first[i]) * j->chunk_groups[i];
        int64_t g1 = MIN(g0 + j->chunk_groups[i], j->n_groups[i]);
        run_chunk(j, i, g0, g1);
}

static void matmul_fn(void *arg, int ith, int nth) {
        matmul_job *j = arg;
        int64_t c;
        (void) nth;
        if (ith < j->n_runs)
                while ((c = take_chunk(j, ith, true)) >= 0)
                        run_chunk_index(j, c);
        /* then the others' runs, from their ends, the next share's first */
        for (int k = 1; k <= j->n_runs; k++) {
                int r = (ith + k) % j->n_runs;
                while ((c = take_chunk(j, r, false)) >= 0)
                        run_chunk_index(j, c);
        }
}

void axp_cpu_matmul(axp_pool *pool, int n_w, const axp_weight *const *w, const float *x,
                    long ldx, float *const *y, const long *ldy, int n_tok) {
        assert(n_w >= 1 && n_w <= MAX_WEIGHTS);
        if (n_tok <= 0 || n_w <= 0)
                return;
        int nth = axp_pool_size(pool);
        matmul_job j = {
                .ops = axp_cpu_ops_get(),
                .n_w = n_w,
                .y = y,
                .ldy = ldy,
                .n_tok = n_tok,
                .x = x,
                .ldx = ldx,
        };
        int64_t k = w[0]->n_in, total_groups = 0;
        /* whole tiles of 16 rows: AMX loads them even past the last token */
        int act_rows = (n_tok + 15) / 16 * 16;
        size_t act_bytes = 0, max_stride = 0;
        for (int i = 0; i < n_w; i++) {
                assert(w[i]->n_in == k);
                assert(j.ops->gemm[w[i]->type]);
                j.w[i] = w[i];
                j.pk[i] = axp_packed_of(w[i]);
                j.gemm[i] = j.pk[i] && j.pk[i]->no_min8 && j.ops->gemm_sym[w[i]->type] ? j.ops->gemm_sym[w[i]->type]
                                                                                      : j.ops->gemm[w[i]->type];
                j.group_bytes[i] = axp_pack_group_bytes(w[i]->type, k);
                j.n_groups[i] = DIV_ROUND_UP(w[i]->n_out, AXP_GROUP);
                total_groups += j.n_groups[i];
                axp_act *a = &j.act[axp_act_kind_of(w[i]->type)];
                if (!a->stride) {
                        a->kind = axp_act_kind_of(w[i]->type);
                        a->k = k;
                        a->stride = axp_act_stride(a->kind, k);
                        act_bytes += a->stride * (size_t) act_rows +
                                     (size_t) act_rows * axp_act_blocks(a) * sizeof(float);
                        max_stride = MAX(max_stride, a->stride);
                }
        }

        /* activations: one buffer per kind, in the caller's scratch */
        uint8_t *buf = axp_cpu_scratch(AXP_SCRATCH_ACT, act_bytes);
        for (int kind = 0; kind < AXP_ACT__MAX; kind++)
                if (j.act[kind].stride) {
                        axp_act *a = &j.act[kind];
                        size_t td_bytes = (size_t) act_rows * axp_act_blocks(a) * sizeof(float);
                        a->data = buf;
                        memset(buf + a->stride * (size_t) n_tok, 0, a->stride * (size_t) (act_rows - n_tok));
                        buf += a->stride * (size_t) act_rows;
                        a->tile_d = (float *) buf;
                        memset(buf, 0, td_bytes);
                        buf += td_bytes;
                }
        if (nth > 1 && (int64_t) n_tok * k >= 16384)
                axp_pool_run(pool, quantize_fn, &j);
        else
                quantize_fn(&j, 0, 1);

        /* chunks: about 16 per thread so a thread slowed by another process does not hold
         * the others up, and no more weight bytes than stay in L2 */
        int64_t want = MAX(1, total_groups / ((int64_t) nth * 16));
        j.chunk_first[0] = 0;
        for (int i = 0; i < n_w; i++) {
                int64_t by_bytes = MAX(1, (int64_t) (CHUNK_BYTES / j.group_bytes[i]));
                j.chunk_groups[i] = MIN(want, by_bytes);
                j.chunk_first[i + 1] = j.chunk_first[i] + DIV_ROUND_UP(j.n_groups[i], j.chunk_groups[i]);
        }
        j.token_block = (int) MIN(n_tok, MAX(64, (int64_t) (TOKEN_BLOCK_BYTES / max_stride) / 16 * 16));

        int64_t total = j.chunk_first[n_w];
        bool one = total == 1 || nth == 1;
        j.n_runs = one ? 1 : MIN(nth, MAX_RUNS);
        for (int r = 0; r < j.n_runs; r++) {
                long lo, hi;
                axp_split((long) total, r, j.n_runs, 1, &lo, &hi);
                atomic_store_explicit(&j.run[r].front_end, (uint64_t) hi << 32 | (uint64_t) lo, memory_order_relaxed);
        }
        if (one)
                matmul_fn(&j, 0, 1);
        else
                axp_pool_run(pool, matmul_fn, &j);
}
