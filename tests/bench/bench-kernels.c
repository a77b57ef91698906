/* SPDX-License-Identifier: MIT */
/* Speed of the CPU kernels on a Llama-3.2-1B-shaped model (dim 2048, 16 layers, 32 heads and
 * 8 KV heads of 64, FFN 8192, vocab 128256 tied), with random weights:
 *   decode:  one token through every layer's matrices and the LM head (GB/s streamed and the
 *            tokens/s this projects to; attention over a short context included)
 *   prefill: 512 tokens in chunks as the scheduler runs them, attention included, LM head
 *            for the last token only (as llama-bench's pp512)
 *   --batch N: decode N rows a step, as the engine decodes N requests together (one pass over
 *            the weights for all, the LM head over every row); attention takes them as N
 *            positions of one sequence, standing in for N requests' own caches
 *   --profile: decode per operation (the QKV, output, gate/up and down products, the head,
 *            attention), each timed on its own (its best token, as the bandwidth is the best
 *            repetition): ms per token, the bytes each product streams
 *            and its GB/s against the machine's read bandwidth (kernels/cpu/membw.h) measured
 *            with the same thread count just before and after each type's runs (the larger)
 *   --prefetch P[,P]: decode's prefetch plan (kernels.h: dense, sparse, dense-l1, sparse-l1);
 *            with two, the plans take turns token by token and each plan's best token is
 *            printed (the per-operation profile then mixes them). Without it each model's plan
 *            is tuned on its weights, as the engine does when it loads a model
 *   --micro: per core (CPU time), one decode product (from memory and from L2) and one
 *            prefill product per type, on each path of a list in turn, with the default
 *            prefetch plan or AXP_CPU_PREFETCH's (not tuned)
 *   --no-bf16-dot: the AVX-512 path's BF16 products with FMAs, as on a CPU without
 *            AVX512-BF16, instead of vdpbf16ps (the same results)
 * Not a test: it prints numbers.
 *
 *   bench-kernels [--threads N] [--isa NAME] [--types q8_0,q4_k_m,...] [--chunk 256]
 *                 [--prompt 512] [--decode-tokens 16] [--reps 2] [--batch 1] [--profile]
 *                 [--prefetch P[,P]] [--no-bf16-dot]
 *   bench-kernels --micro q8_0,q4_k,... [--isa PATH[,PATH...]] [--no-bf16-dot] */
#include <getopt.h>
#include <pthread.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/membw.h"
#include "kernels/cpu/pool.h"
#include "kernels/types.h"
#include "base/util.h"

enum { N_EMBD = 2048, N_LAYER = 16, N_HEAD = 32, N_HEAD_KV = 8, HEAD_DIM = 64, N_FF = 8192,
       N_VOCAB = 128256 };

static double now(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rng = 88172645463325252ull;
static uint64_t rnd64(void) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        return rng;
}

/* Raw GGUF rows of random quants with sane scales (the kernels' speed does not depend on the
 * values, but NaN or subnormal scales could). */
static void *random_rows(uint32_t type, int64_t n_in, int64_t n_out) {
        uint64_t rb = axp_type_row_size(type, n_in), n = rb * n_out;
        uint8_t *p = malloc(n);
        for (uint64_t i = 0; i + 8 <= n; i += 8) {
                uint64_t r = rnd64();
                memcpy(p + i, &r, 8);
        }
        uint64_t bs = axp_type_traits_get(type)->bytes, nb = n / bs;
        axp_f16 h = axp_f32_to_f16(0.01f);
        for (uint64_t b = 0; b < nb; b++) {
                uint8_t *blk = p + b * bs;
                switch (type) {
                case AXP_TYPE_F16:
                        for (uint64_t i = 0; i < bs; i += 2)
                                memcpy(blk + i, &h, 2);
                        break;
                case AXP_TYPE_BF16:
                case AXP_TYPE_F32:
                        memset(blk, 0x3c, bs);
                        break;
                case AXP_TYPE_Q8_0:
                        /* quants in -127..127, as llama.cpp's quantizer writes them */
                        for (uint64_t i = 2; i < bs; i++)
                                if (blk[i] == 0x80)
                                        blk[i] = 0x81;
                        memcpy(blk, &h, 2);
                        break;
                case AXP_TYPE_Q4_0:
                        memcpy(blk, &h, 2);
                        break;
                case AXP_TYPE_Q4_K:
                        memcpy(blk, &h, 2);
                        memcpy(blk + 2, &h, 2);
                        break;
                case AXP_TYPE_Q6_K:
                        memcpy(blk + 208, &h, 2);
                        break;
                case AXP_TYPE_Q2_K:
                        memcpy(blk + 80, &h, 2);
                        memcpy(blk + 82, &h, 2);
                        break;
                case AXP_TYPE_Q3_K:
                        memcpy(blk + 108, &h, 2);
                        break;
                case AXP_TYPE_IQ4_XS:
                        memcpy(blk, &h, 2);
                        break;
                }
        }
        return p;
}

typedef struct bench_model {
        axp_weight *w; /* per layer: q k v o gate up down; then the head */
        uint64_t bytes;
        double params;
} bench_model;

static const char *const wnames[7] = { "q", "k", "v", "o", "gate", "up", "down" };

static int model_make(axp_pool *pool, bench_model *m, const char *config, double *ret_prep_s) {
        bool q4km = strcmp(config, "q4_k_m") == 0;
        int base = q4km ? AXP_TYPE_Q4_K : axp_type_from_name(config);
        if (base < 0) {
                fprintf(stderr, "unknown type %s\n", config);
                return -1;
        }
        m->w = calloc(N_LAYER * 7 + 1, sizeof(axp_weight));
        m->bytes = 0;
        m->params = 0;
        double prep = 0;
        for (int i = 0; i <= N_LAYER * 7; i++) {
                int l = i / 7, which = i % 7;
                int64_t n_in = N_EMBD, n_out = N_EMBD;
                uint32_t type = (uint32_t) base;
                if (i == N_LAYER * 7) {
                        n_out = N_VOCAB;
                        if (q4km)
                                type = AXP_TYPE_Q6_K;
                } else {
                        if (which == 1 || which == 2)
                                n_out = N_HEAD_KV * HEAD_DIM;
                        if (which == 4 || which == 5)
                                n_out = N_FF;
                        if (which == 6)
                                n_in = N_FF;
                        /* llama.cpp's Q4_K_M: attn_v and ffn_down in Q6_K on "more bits" layers */
                        bool more = l < N_LAYER / 8 || l >= 7 * N_LAYER / 8 || (l - N_LAYER / 8) % 3 == 2;
                        if (q4km && more && (which == 2 || which == 6))
                                type = AXP_TYPE_Q6_K;
                }
                void *raw = random_rows(type, n_in, n_out);
                m->w[i] = (axp_weight) {
                        .name = i == N_LAYER * 7 ? "output" : wnames[which],
                        .type = type,
                        .n_in = n_in,
                        .n_out = n_out,
                        .row_bytes = axp_type_row_size(type, n_in),
                        .data = raw,
                };
                double t0 = now();
                if (axp_cpu_weight_prepare_on(pool, &m->w[i]) < 0) {
                        fprintf(stderr, "cannot prepare %s weights\n", config);
                        return -1;
                }
                prep += now() - t0;
                free(raw); /* the products read the packed copy only */
                m->w[i].data = NULL;
                m->bytes += m->w[i].row_bytes * n_out;
                m->params += (double) n_in * n_out;
        }
        *ret_prep_s = prep;
        return 0;
}

/* The prefetch plan for this model, timed on its weights as the engine's CPU device does when
 * it loads a model (axp_cpu_prefetch_tune, from the default each time) */
static void tune_plan(axp_pool *pool, const bench_model *m) {
        const axp_weight *ws[N_LAYER * 7 + 1];
        for (int i = 0; i <= N_LAYER * 7; i++)
                ws[i] = &m->w[i];
        double t[4] = { 0, 0, 0, 0 };
        axp_cpu_set_prefetch(NULL);
        int r = axp_cpu_prefetch_tune(pool, ws, N_LAYER * 7 + 1, AXP_CPU_PREFETCH_TUNE_MIN_BYTES, t);
        if (r == 1)
                printf("  prefetch plan %s (tuned: into L2 %.1f ms, into L1 %.1f ms; dense %.1f ms, sparse %.1f ms; "
                       "0 where not timed)\n",
                       axp_cpu_prefetch(), t[2] * 1e3, t[3] * 1e3, t[0] * 1e3, t[1] * 1e3);
        else
                printf("  prefetch plan %s (not tuned)\n", axp_cpu_prefetch());
}

static void model_free(bench_model *m) {
        for (int i = 0; i <= N_LAYER * 7; i++)
                axp_cpu_weight_release(&m->w[i]);
        free(m->w);
}

/* decode's operations, each timed on its own under --profile */
enum { OP_QKV, OP_ATTN, OP_O, OP_GATEUP, OP_DOWN, OP_HEAD, OP_REST, OP__MAX };
static const char *const op_names[OP__MAX] = { "qkv", "attention", "o", "gate+up", "down", "head", "rest" };
/* the operation of each of a layer's seven matrices (q k v o gate up down) */
static const int op_of[7] = { OP_QKV, OP_QKV, OP_QKV, OP_O, OP_GATEUP, OP_GATEUP, OP_DOWN };
static double *op_time; /* seconds per operation, summed, while profiling */
static double op_t0;

static void op_start(void) {
        if (op_time)
                op_t0 = now();
}

static void op_end(int op) {
        if (op_time) {
                double t = now();
                op_time[op] += t - op_t0;
                op_t0 = t;
        }
}

typedef struct bench_bufs {
        float *x, *q, *k, *v, *ff1, *ff2, *out, *logits;
        axp_f16 *kc, *vc; /* per layer KV cache, F16 like llama.cpp's default */
        int32_t *pos;
        int ctx;
} bench_bufs;

/* The matrices (and attention) of n_tok tokens at positions p0.. through all layers, and the LM
 * head for the last `head` of them. */
static void forward(axp_pool *pool, const bench_model *m, bench_bufs *b, int n_tok, int p0, int head) {
        long kv_ld = (long) N_HEAD_KV * HEAD_DIM;
        op_start();
        for (int t = 0; t < n_tok; t++)
                b->pos[t] = p0 + t;
        for (int l = 0; l < N_LAYER; l++) {
                const axp_weight *w = &m->w[l * 7];
                const axp_weight *qkv[3] = { &w[0], &w[1], &w[2] };
                float *ys[3] = { b->q, b->k, b->v };
                long lds[3] = { N_EMBD, kv_ld, kv_ld };
                op_end(OP_REST);
                axp_cpu_matmul(pool, 3, qkv, b->x, N_EMBD, ys, lds, n_tok);
                op_end(OP_QKV);
                axp_f16 *kc = b->kc + (size_t) l * b->ctx * kv_ld, *vc = b->vc + (size_t) l * b->ctx * kv_ld;
                /* the cache write stands in for RoPE + store; values stay random-ish. Head by
                 * head, as the engine keeps it (axp_kv_offset) */
                for (int t = 0; t < n_tok; t++)
                        for (long i = 0; i < kv_ld; i++) {
                                long at = ((i / HEAD_DIM) * b->ctx + p0 + t) * HEAD_DIM + i % HEAD_DIM;
                                kc[at] = axp_f32_to_f16(b->k[t * kv_ld + i] * 1e-3f);
                                vc[at] = axp_f32_to_f16(b->v[t * kv_ld + i] * 1e-3f);
                        }
                op_end(OP_REST);
                axp_cpu_attention(pool, b->q, N_EMBD, b->q, N_EMBD, kc, vc, AXP_TYPE_F16, n_tok, b->pos,
                                  N_HEAD, N_HEAD_KV, HEAD_DIM, HEAD_DIM, (long) b->ctx * HEAD_DIM, 0, 0, 0.125f,
                                  0);
                op_end(OP_ATTN);
                const axp_weight *wo[1] = { &w[3] };
                float *yo[1] = { b->out };
                long ldo[1] = { N_EMBD };
                axp_cpu_matmul(pool, 1, wo, b->q, N_EMBD, yo, ldo, n_tok);
                op_end(OP_O);
                const axp_weight *gu[2] = { &w[4], &w[5] };
                float *yg[2] = { b->ff1, b->ff2 };
                long ldg[2] = { N_FF, N_FF };
                axp_cpu_matmul(pool, 2, gu, b->out, N_EMBD, yg, ldg, n_tok);
                op_end(OP_GATEUP);
                const axp_weight *wd[1] = { &w[6] };
                float *yd[1] = { b->x };
                axp_cpu_matmul(pool, 1, wd, b->ff1, N_FF, yd, ldo, n_tok);
                op_end(OP_DOWN);
                /* keep activations bounded */
                for (long i = 0; i < (long) n_tok * N_EMBD; i++)
                        b->x[i] = b->x[i] * 1e-3f;
        }
        if (head) {
                const axp_weight *wh[1] = { &m->w[N_LAYER * 7] };
                float *yh[1] = { b->logits };
                long ldh[1] = { N_VOCAB };
                op_end(OP_REST);
                axp_cpu_matmul(pool, 1, wh, b->x + (long) (n_tok - head) * N_EMBD, N_EMBD, yh, ldh, head);
                op_end(OP_HEAD);
        }
}

/* The weight bytes each product streams per decoded token. */
static void op_bytes(const bench_model *m, double *ret) {
        memset(ret, 0, sizeof(double) * OP__MAX);
        for (int i = 0; i < N_LAYER * 7; i++)
                ret[op_of[i % 7]] += (double) m->w[i].row_bytes * m->w[i].n_out;
        ret[OP_HEAD] = (double) m->w[N_LAYER * 7].row_bytes * m->w[N_LAYER * 7].n_out;
}

/* Each operation's own weight pages (every layer's matrices, in the forward's order), read
 * under --profile after every decoded token with every read method: the best time over the
 * methods and tokens is what a product could take at most on those very bytes, timed beside
 * it, where the probe reads another buffer at another moment. The same pages read twice in
 * a row would come partly from the last-level cache. */
#define OP_MAX_REGIONS (N_LAYER * 3)
typedef struct op_pages {
        int n[OP__MAX];
        const void *p[OP__MAX][OP_MAX_REGIONS];
        size_t bytes[OP__MAX][OP_MAX_REGIONS];
        int n_methods;
        const char *method[AXP_MEMBW_MAX_METHODS];
        double best[OP__MAX];     /* seconds, over methods and tokens */
        int best_method[OP__MAX];
        uint64_t sum[OP__MAX];    /* the words' sum, which every method must give */
        bool misread;
} op_pages;

static void op_pages_init(op_pages *r, const bench_model *m) {
        memset(r, 0, sizeof(*r));
        for (int i = 0; i <= N_LAYER * 7; i++) {
                const axp_packed *pk = m->w[i].priv;
                int o = i == N_LAYER * 7 ? OP_HEAD : op_of[i % 7];
                r->p[o][r->n[o]] = pk->data;
                r->bytes[o][r->n[o]++] = pk->n_groups * pk->group_bytes;
        }
        r->n_methods = axp_membw_methods(r->method);
        for (int o = 0; o < OP__MAX; o++)
                r->best[o] = 1e9;
}

static void op_pages_read(op_pages *r, axp_pool *pool) {
        /* each method reads every operation's pages in turn, so that between two reads of the
         * same pages the whole model passes through the caches, as between two tokens */
        for (int k = 0; k < r->n_methods; k++) {
                for (int o = 0; o < OP__MAX; o++) {
                        if (!r->n[o])
                                continue;
                        uint64_t sum;
                        double t = axp_membw_read_regions(pool, k, r->n[o], r->p[o], r->bytes[o], &sum);
                        if (t < 0 || (r->sum[o] && sum != r->sum[o]))
                                r->misread = true;
                        r->sum[o] = sum;
                        if (t > 0 && t < r->best[o]) {
                                r->best[o] = t;
                                r->best_method[o] = k;
                        }
                }
        }
}

/* The machine's read bandwidth with this many threads (GB/s), best over every read method. */
static double read_bandwidth(int threads, const char **ret_method) {
        static axp_membw bw;
        if (axp_membw_read(512u << 20, threads, 3, &bw) < 0)
                return 0;
        *ret_method = bw.method[bw.best_method[threads - 1]];
        return bw.best[threads - 1];
}

/* a share of about 2 us, noting whether a worker (not the caller) ran it */
typedef struct pool_probe {
        pthread_t caller;
        int on_workers;
} pool_probe;

static void probe_fn(void *arg, int ith, int nth) {
        pool_probe *p = arg;
        double t0 = now();
        while (now() - t0 < 2e-6)
                ;
        if (!pthread_equal(pthread_self(), p->caller))
                __atomic_fetch_add(&p->on_workers, 1, __ATOMIC_RELAXED);
}

static double cpu_now(void) {
        struct timespec ts;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* One thread, CPU time (robust on a shared machine): a product's speed per core.
 * Decode: n_tok 1 over 8 copies of a 2048x8192 matrix (more than the L3), n_tok 2 and 4 (two
 * or four requests decoded together, one stream of the weights for all); n_tok 1 over 8 copies of an
 * 8192x2048 one (the FFN's down product: a 16-row group's 8192 inputs of weights pass through
 * L1 before the next group reads the activations again); and 64 times over 2048x512 (a megabyte or less, read from L2: what the loop can take in when memory is not
 * the limit; a decode product reaches the memory's rate only if this is well above it; the
 * same with 4 tokens, where a few requests decoded together are bound by their operations);
 * prefill: n_tok 128 with a 2048x2048 matrix. With a list of paths (--isa avx2,avx-vnni)
 * each type is timed on every path, the paths taking turns, best of 5 rounds. */
#define MICRO_MAX_ISAS 5

/* CPU seconds of n_tok tokens through each of 8 copies of a matrix of k inputs in turn */
static double time_copies(axp_pool *one, const axp_weight *copies, const float *x, long k, float *y, int n_tok) {
        long ld = 8192;
        double t0 = cpu_now();
        for (int i = 0; i < 8; i++) {
                const axp_weight *ws[1] = { &copies[i] };
                axp_cpu_matmul(one, 1, ws, x, k, &y, &ld, n_tok);
        }
        return cpu_now() - t0;
}

static void micro(const char *types, const char *const *isa, int n_isa) {
        axp_pool *one = axp_pool_new(1);
        char *list = strdup(types), *save = NULL;
        float *x = calloc(128 * 8192, 4), *y = calloc(128 * 8192, 4);
        for (int i = 0; i < 128 * 8192; i++)
                x[i] = (float) (((long) i * 7919) % 2001 - 1000) * 1e-3f;
        printf("\nper core (1 thread, CPU time; best of 5, the paths taking turns; prefetch plan %s%s):\n",
               axp_cpu_prefetch(), getenv("AXP_CPU_PREFETCH") ? "" : ", the default, not tuned");
        for (char *ty = strtok_r(list, ",", &save); ty; ty = strtok_r(NULL, ",", &save)) {
                int type = axp_type_from_name(ty);
                if (type < 0 || !axp_type_traits_get(type)->supported)
                        continue;
                /* each path prepares its own copies (AMX packs differently) */
                axp_weight w[MICRO_MAX_ISAS][8], dn[MICRO_MAX_ISAS][8], sq[MICRO_MAX_ISAS], l2[MICRO_MAX_ISAS];
                void *raw_sq = random_rows(type, 2048, 2048);
                void *raw[8], *raw_dn[8];
                for (int i = 0; i < 8; i++) {
                        raw[i] = random_rows(type, 2048, 8192);
                        raw_dn[i] = random_rows(type, 8192, 2048);
                }
                for (int a = 0; a < n_isa; a++) {
                        axp_cpu_set_isa(isa[a]);
                        for (int i = 0; i < 8; i++) {
                                w[a][i] = (axp_weight) { .name = "m", .type = type, .n_in = 2048, .n_out = 8192,
                                                         .row_bytes = axp_type_row_size(type, 2048), .data = raw[i] };
                                axp_cpu_weight_prepare(&w[a][i]);
                                w[a][i].data = NULL;
                                dn[a][i] = (axp_weight) { .name = "d", .type = type, .n_in = 8192, .n_out = 2048,
                                                          .row_bytes = axp_type_row_size(type, 8192), .data = raw_dn[i] };
                                axp_cpu_weight_prepare(&dn[a][i]);
                                dn[a][i].data = NULL;
                        }
                        sq[a] = (axp_weight) { .name = "sq", .type = type, .n_in = 2048, .n_out = 2048,
                                               .row_bytes = axp_type_row_size(type, 2048), .data = raw_sq };
                        axp_cpu_weight_prepare(&sq[a]);
                        l2[a] = sq[a];
                        l2[a].n_out = 512;
                        l2[a].priv = NULL;
                        axp_cpu_weight_prepare(&l2[a]);
                }
                for (int i = 0; i < 8; i++) {
                        free(raw[i]);
                        free(raw_dn[i]);
                }
                long ld = 8192;
                int n_tok = 128;
                double best[MICRO_MAX_ISAS], best2[MICRO_MAX_ISAS], best4[MICRO_MAX_ISAS], bestd[MICRO_MAX_ISAS],
                        bestp[MICRO_MAX_ISAS], bestl[MICRO_MAX_ISAS], bestl4[MICRO_MAX_ISAS];
                for (int a = 0; a < n_isa; a++)
                        best[a] = best2[a] = best4[a] = bestd[a] = bestp[a] = bestl[a] = bestl4[a] = 1e9;
                for (int r = 0; r < 5; r++)
                        for (int a = 0; a < n_isa; a++) {
                                axp_cpu_set_isa(isa[a]);
                                best[a] = fmin(best[a], time_copies(one, w[a], x, 2048, y, 1));
                                best2[a] = fmin(best2[a], time_copies(one, w[a], x, 2048, y, 2));
                                best4[a] = fmin(best4[a], time_copies(one, w[a], x, 2048, y, 4));
                                bestd[a] = fmin(bestd[a], time_copies(one, dn[a], x, 8192, y, 1));
                                const axp_weight *l2p = &l2[a];
                                axp_cpu_matmul(one, 1, &l2p, x, 2048, &y, &ld, 1);
                                double t0 = cpu_now();
                                for (int i = 0; i < 64; i++)
                                        axp_cpu_matmul(one, 1, &l2p, x, 2048, &y, &ld, 1);
                                bestl[a] = fmin(bestl[a], cpu_now() - t0);
                                t0 = cpu_now();
                                for (int i = 0; i < 64; i++)
                                        axp_cpu_matmul(one, 1, &l2p, x, 2048, &y, &ld, 4);
                                bestl4[a] = fmin(bestl4[a], cpu_now() - t0);
                                const axp_weight *sqp = &sq[a];
                                t0 = cpu_now();
                                axp_cpu_matmul(one, 1, &sqp, x, 2048, &y, &ld, n_tok);
                                bestp[a] = fmin(bestp[a], cpu_now() - t0);
                        }
                double bytes = 8.0 * w[0][0].row_bytes * 8192, bytes_d = 8.0 * dn[0][0].row_bytes * 2048;
                double bytes_l2 = 64.0 * w[0][0].row_bytes * 512;
                for (int a = 0; a < n_isa; a++) {
                        printf("  %-6s %-8s decode %5.1f GB/s (2 tokens %5.1f, 4 tokens %5.1f, 8192 in %5.1f, from L2 "
                               "%5.1f, 4 tokens %5.1f)   prefill (128 tokens) %6.1f GFLOP/s\n",
                               ty, isa[a], bytes / best[a] / 1e9, bytes / best2[a] / 1e9, bytes / best4[a] / 1e9,
                               bytes_d / bestd[a] / 1e9, bytes_l2 / bestl[a] / 1e9, bytes_l2 / bestl4[a] / 1e9,
                               2.0 * 2048 * 2048 * n_tok / bestp[a] / 1e9);
                        for (int i = 0; i < 8; i++) {
                                axp_cpu_weight_release(&w[a][i]);
                                axp_cpu_weight_release(&dn[a][i]);
                        }
                        axp_cpu_weight_release(&sq[a]);
                        axp_cpu_weight_release(&l2[a]);
                }
                free(raw_sq);
        }
        free(x);
        free(y);
        free(list);
        axp_pool_free(one);
}

int main(int argc, char **argv) {
        int threads = 2, chunk = 256, prompt = 512, dec_tokens = 16, reps = 2, batch = 1;
        const char *micro_types = NULL;
        bool profile = false;
        const char *isa = NULL, *types = "q8_0,q4_k_m", *prefetch = NULL;
        static const struct option opts[] = {
                { "threads", required_argument, NULL, 't' }, { "isa", required_argument, NULL, 'i' },
                { "types", required_argument, NULL, 'T' },   { "chunk", required_argument, NULL, 'c' },
                { "prompt", required_argument, NULL, 'p' },  { "decode-tokens", required_argument, NULL, 'd' },
                { "reps", required_argument, NULL, 'r' },    { "micro", required_argument, NULL, 'm' },
                { "profile", no_argument, NULL, 'P' },       { "prefetch", required_argument, NULL, 'f' },
                { "no-bf16-dot", no_argument, NULL, 'B' },   { "batch", required_argument, NULL, 'b' },
                {},
        };
        int c;
        while ((c = getopt_long(argc, argv, "", opts, NULL)) >= 0) {
                switch (c) {
                case 't': threads = atoi(optarg); break;
                case 'i': isa = optarg; break;
                case 'T': types = optarg; break;
                case 'c': chunk = atoi(optarg); break;
                case 'p': prompt = atoi(optarg); break;
                case 'd': dec_tokens = atoi(optarg); break;
                case 'r': reps = atoi(optarg); break;
                case 'm': micro_types = optarg; break;
                case 'P': profile = true; break;
                case 'f': prefetch = optarg; break;
                case 'B': axp_cpu_set_bf16_dot(false); break;
                case 'b': batch = atoi(optarg); break;
                default: return 2;
                }
        }
        if (threads < 1 || chunk < 1 || prompt < 1 || dec_tokens < 1 || reps < 1 || batch < 1 || batch > 64)
                return 2;
        if (micro_types) {
                /* a list of paths, each checked */
                char *l = strdup(isa ? isa : axp_cpu_isa()), *sv = NULL;
                const char *paths[MICRO_MAX_ISAS];
                int n = 0;
                for (char *s = strtok_r(l, ",", &sv); s; s = strtok_r(NULL, ",", &sv)) {
                        if (n == MICRO_MAX_ISAS) {
                                fprintf(stderr, "at most %d paths\n", MICRO_MAX_ISAS);
                                return 2;
                        }
                        if (!axp_cpu_set_isa(s) || strcmp(axp_cpu_isa(), s) != 0) {
                                fprintf(stderr, "path %s is not available here\n", s);
                                return 1;
                        }
                        paths[n++] = s;
                }
                micro(micro_types, paths, n);
                free(l);
                return 0;
        }
        if (isa && !axp_cpu_set_isa(isa)) {
                fprintf(stderr, "path %s is not available here\n", isa);
                return 1;
        }
        /* one plan, or two taking turns */
        char plan_buf[32] = "";
        const char *plans[2] = { NULL, NULL };
        int n_plans = 0;
        if (prefetch) {
                snprintf(plan_buf, sizeof(plan_buf), "%s", prefetch);
                char *sv = NULL;
                for (char *p = strtok_r(plan_buf, ",", &sv); p; p = strtok_r(NULL, ",", &sv)) {
                        if (n_plans == 2 || !axp_cpu_set_prefetch(p)) {
                                fprintf(stderr, "--prefetch takes one or two of dense, sparse, dense-l1 and sparse-l1\n");
                                return 2;
                        }
                        plans[n_plans++] = p;
                }
                axp_cpu_set_prefetch(plans[0]);
        }
        axp_pool *pool = axp_pool_new(threads);
        if (n_plans == 2)
                printf("path %s, %d threads, decode prefetch %s and %s taking turns\n", axp_cpu_isa(),
                       axp_pool_size(pool), plans[0], plans[1]);
        else if (prefetch)
                printf("path %s, %d threads, decode prefetch %s\n", axp_cpu_isa(), axp_pool_size(pool),
                       axp_cpu_prefetch());
        else
                printf("path %s, %d threads, decode prefetch tuned on each model's weights as the engine does\n",
                       axp_cpu_isa(), axp_pool_size(pool));

        /* pool dispatch: each of the ~100 runs per decoded token costs this over its work */
        pool_probe probe = { .caller = pthread_self() };
        for (int i = 0; i < 1000; i++)
                axp_pool_run(pool, probe_fn, &probe);
        probe.on_workers = 0;
        double t0 = now();
        for (int i = 0; i < 20000; i++)
                axp_pool_run(pool, probe_fn, &probe);
        printf("pool: %.2f us per run of %d shares of 2 us; %.0f%% of the worker shares ran on workers\n",
               (now() - t0) / 20000 * 1e6, axp_pool_size(pool),
               axp_pool_size(pool) > 1 ? 100.0 * probe.on_workers / (20000.0 * (axp_pool_size(pool) - 1)) : 0.0);

        bench_bufs b = { .ctx = prompt + dec_tokens * batch + 1 };
        int maxt = MAX(chunk, batch);
        long kv_ld = (long) N_HEAD_KV * HEAD_DIM;
        b.x = calloc((size_t) maxt * N_EMBD, 4);
        b.q = calloc((size_t) maxt * N_EMBD, 4);
        b.k = calloc((size_t) maxt * kv_ld, 4);
        b.v = calloc((size_t) maxt * kv_ld, 4);
        b.out = calloc((size_t) maxt * N_EMBD, 4);
        b.ff1 = calloc((size_t) maxt * N_FF, 4);
        b.ff2 = calloc((size_t) maxt * N_FF, 4);
        b.logits = calloc((size_t) N_VOCAB * batch, 4);
        b.pos = calloc(maxt, 4);
        /* the cache as the engine allocates it (huge pages where the kernel gives them) */
        b.kc = axp_cpu_huge_alloc((size_t) N_LAYER * b.ctx * kv_ld * 2);
        b.vc = axp_cpu_huge_alloc((size_t) N_LAYER * b.ctx * kv_ld * 2);
        if (!b.kc || !b.vc)
                return 1;

        char *list = strdup(types), *save = NULL;
        for (char *ty = strtok_r(list, ",", &save); ty; ty = strtok_r(NULL, ",", &save)) {
                bench_model m;
                double prep;
                if (model_make(pool, &m, ty, &prep) < 0)
                        return 1;
                printf("\n%s: %.0f MB of weights, %.2f G parameters; prepared in %.2f s (%.1f GB/s)\n", ty,
                       m.bytes / 1e6, m.params / 1e9, prep, m.bytes / prep / 1e9);
                if (!prefetch)
                        tune_plan(pool, &m);
                for (long i = 0; i < (long) maxt * N_EMBD; i++)
                        b.x[i] = (float) ((i * 7919L) % 2001 - 1000) * 1e-3f;

                double op_best[OP__MAX], op_tok[OP__MAX], bw = 0, plan_best[2] = { 1e9, 1e9 };
                const char *bw_method = "";
                static op_pages pages;
                if (profile) {
                        bw = read_bandwidth(axp_pool_size(pool), &bw_method);
                        op_pages_init(&pages, &m);
                }
                for (int o = 0; o < OP__MAX; o++)
                        op_best[o] = 1e9;
                for (int r = 0; r < reps; r++) {
                        /* prefill: the prompt in chunks, then decode steps after it */
                        double tp = now();
                        for (int p = 0; p < prompt; p += chunk) {
                                int n = MIN(chunk, prompt - p);
                                forward(pool, &m, &b, n, p, p + n == prompt ? 1 : 0);
                        }
                        tp = now() - tp;
                        double flops = 2.0 * (m.params - (double) N_VOCAB * N_EMBD) * prompt +
                                       2.0 * N_VOCAB * N_EMBD;
                        double best = 1e9, sum = 0;
                        op_time = profile ? op_tok : NULL;
                        for (int d = 0; d < dec_tokens; d++) {
                                memset(op_tok, 0, sizeof(op_tok));
                                if (n_plans == 2)
                                        axp_cpu_set_prefetch(plans[d % 2]);
                                double td = now();
                                forward(pool, &m, &b, batch, prompt + d * batch, batch);
                                td = now() - td;
                                if (n_plans == 2)
                                        plan_best[d % 2] = fmin(plan_best[d % 2], td);
                                if (profile)
                                        op_pages_read(&pages, pool);
                                for (int o = 0; o < OP__MAX; o++)
                                        op_best[o] = fmin(op_best[o], op_tok[o]);
                                best = fmin(best, td);
                                sum += td;
                        }
                        double mean = sum / dec_tokens;
                        printf("  prefill %d (chunks of %d): %.2f s, %.1f tokens/s, %.0f GFLOP/s\n", prompt, chunk,
                               tp, prompt / tp, flops / tp / 1e9);
                        if (batch == 1)
                                printf("  decode at %d: %.1f ms/token mean (%.1f best), %.1f tokens/s, %.1f GB/s streamed\n",
                                       prompt, mean * 1e3, best * 1e3, 1 / mean, m.bytes / mean / 1e9);
                        else
                                printf("  decode at %d, %d rows a step: %.1f ms/step mean (%.1f best), %.1f tokens/s, %.1f GB/s "
                                       "streamed\n",
                                       prompt, batch, mean * 1e3, best * 1e3, batch / mean, m.bytes / mean / 1e9);
                        op_time = NULL;
                }
                if (n_plans == 2)
                        for (int p = 0; p < 2; p++)
                                printf("  decode, prefetch %s: %.1f ms best token, %.1f GB/s\n", plans[p],
                                       plan_best[p] * 1e3, m.bytes / plan_best[p] / 1e9);
                if (profile) {
                        double bytes[OP__MAX], total = 0, total_bytes = 0;
                        const char *after_method = "";
                        double after = read_bandwidth(axp_pool_size(pool), &after_method);
                        printf("  read bandwidth, %d threads, before and after: %.1f GB/s (%s), %.1f GB/s (%s)\n",
                               axp_pool_size(pool), bw, bw_method, after, after_method);
                        bw = fmax(bw, after);
                        op_bytes(&m, bytes);
                        printf("  decode per operation, each the best of its %d timings (%d reps of %d tokens);\n"
                               "  \"of read\": its GB/s against the probe's; \"own pages\": the best read of its own\n"
                               "  weight pages after each token, with every method (the best named), and the product's\n"
                               "  share of that read's speed:\n",
                               reps * dec_tokens, reps, dec_tokens);
                        printf("  %-10s %9s %9s %8s %9s %10s %9s  %s\n", "operation", "ms/token", "MB/token", "GB/s",
                               "of read", "own pages", "share", "method");
                        double read_total = 0;
                        for (int o = 0; o < OP__MAX; o++) {
                                total += op_best[o];
                                total_bytes += bytes[o];
                                if (bytes[o] > 0) {
                                        read_total += pages.best[o];
                                        printf("  %-10s %9.2f %9.1f %8.1f %8.0f%% %5.1f GB/s %8.0f%%  %s\n", op_names[o],
                                               op_best[o] * 1e3, bytes[o] / 1e6, bytes[o] / op_best[o] / 1e9,
                                               100 * bytes[o] / op_best[o] / 1e9 / bw, bytes[o] / pages.best[o] / 1e9,
                                               100 * pages.best[o] / op_best[o], pages.method[pages.best_method[o]]);
                                } else
                                        printf("  %-10s %9.2f\n", op_names[o], op_best[o] * 1e3);
                        }
                        printf("  %-10s %9.2f %9.1f %8.1f %8.0f%% %5.1f GB/s %8.0f%%\n", "sum", total * 1e3,
                               total_bytes / 1e6, total_bytes / total / 1e9, 100 * total_bytes / total / 1e9 / bw,
                               total_bytes / read_total / 1e9, 100 * read_total / total);
                        if (pages.misread) {
                                fprintf(stderr, "a read method's sum of the weight pages came out wrong\n");
                                return 1;
                        }
                }
                model_free(&m);
        }
        free(list);
        axp_pool_free(pool);
        return 0;
}
