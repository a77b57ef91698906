/* SPDX-License-Identifier: MIT */
/* The CPU backend: runs HEG tasks with the kernels of kernels/cpu on a thread pool.
 * Token-wise kernels process their rows in tiles so scratch memory stays bounded whatever
 * the length of a dynamic remainder. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu-device.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/pool.h"
#include "kernels/types.h"

#define TILE 256 /* tokens per matmul call in prefill: enough to reuse weights from cache */

typedef struct row_ref {
        axp_seq *seq;
        int t;   /* pending-token index */
        int pos; /* absolute position */
} row_ref;

typedef struct cpu_dev {
        axp_pool *pool;
        axp_model *model; /* prepared model */
        double *inv_freq; /* RoPE: per rotated pair, global layers then sliding-window ones */
        /* scratch, grown on demand */
        float *buf;
        size_t buf_floats;
        row_ref *rows;
        int rows_cap;
        int32_t *pos;
        int pos_cap;
} cpu_dev;

static int scratch(cpu_dev *c, size_t floats, axp_error *err) {
        if (floats <= c->buf_floats)
                return 0;
        free(c->buf);
        c->buf = axp_alloc(floats * sizeof(float));
        c->buf_floats = c->buf ? floats : 0;
        return c->buf ? 0 : axp_errorf(err, -ENOMEM, "out of memory for kernel scratch");
}

static int collect_rows(cpu_dev *c, const axp_task *t, bool last_only, int *ret_n, axp_error *err) {
        int n = 0;
        for (int i = 0; i < t->n_spans; i++) {
                const axp_span *s = &t->spans[i];
                if (!s->seq || s->t0 < 0 || s->t1 > s->seq->n_new || s->t0 >= s->t1)
                        return axp_errorf(err, -EINVAL, "task %s: span %d [%d, %d) is not pending",
                                          axp_op_name(t->op), i, s->t0, s->t1);
                n += last_only ? 1 : s->t1 - s->t0;
        }
        if (n > c->rows_cap) {
                free(c->rows);
                c->rows = malloc((size_t) n * sizeof(row_ref));
                c->rows_cap = c->rows ? n : 0;
                if (!c->rows)
                        return axp_errorf(err, -ENOMEM, "out of memory");
        }
        n = 0;
        for (int i = 0; i < t->n_spans; i++) {
                const axp_span *s = &t->spans[i];
                for (int k = last_only ? s->t1 - 1 : s->t0; k < s->t1; k++)
                        c->rows[n++] = (row_ref) { s->seq, k, s->seq->n_past + k };
        }
        *ret_n = n;
        return 0;
}

/* Element-wise work over rows, spread on the pool ------------------------------------------ */

typedef void (*row_fn)(cpu_dev *c, const axp_task *t, int base, int i, void *ctx);

typedef struct rows_job {
        cpu_dev *c;
        const axp_task *t;
        int base, n;
        row_fn fn;
        void *ctx;
} rows_job;

static void rows_worker(void *a, int ith, int nth) {
        rows_job *j = a;
        long lo, hi;
        axp_split(j->n, ith, nth, 1, &lo, &hi);
        for (long i = lo; i < hi; i++)
                j->fn(j->c, j->t, j->base, (int) i, j->ctx);
}

static void for_rows(cpu_dev *c, const axp_task *t, int base, int n, row_fn fn, void *ctx) {
        rows_job j = { c, t, base, n, fn, ctx };
        if (n == 1)
                fn(c, t, base, 0, ctx);
        else
                axp_pool_run(c->pool, rows_worker, &j);
}

static void rope(const cpu_dev *c, int layer, float *x, int n_heads, int pos) {
        const axp_hparams *hp = &c->model->hp;
        const int half = hp->rope_dim / 2;
        const bool swa = axp_layer_is_swa(hp, layer);
        const double *inv_freq = c->inv_freq + (swa ? half : 0);
        const float mscale = (float) axp_rope_mscale(hp, swa);
        for (int i = 0; i < half && axp_layer_has_rope(hp, layer); i++) {
                double theta = axp_rope_theta(hp, swa, i, pos, inv_freq[i]);
                float cs = (float) cos(theta) * mscale, sn = (float) sin(theta) * mscale;
                for (int h = 0; h < n_heads; h++) {
                        float *v = x + h * hp->head_dim;
                        int i0 = hp->rope_type == AXP_ROPE_NORM ? 2 * i : i;
                        int i1 = hp->rope_type == AXP_ROPE_NORM ? 2 * i + 1 : i + half;
                        float a = v[i0], b = v[i1];
                        v[i0] = a * cs - b * sn;
                        v[i1] = a * sn + b * cs;
                }
        }
}

/* EMBED -------------------------------------------------------------------------------------- */

static void embed_row(cpu_dev *c, const axp_task *t, int base, int i, void *ctx) {
        const axp_weight *e = &c->model->tok_embd;
        row_ref *r = &c->rows[base + i];
        int32_t id = r->seq->tokens[r->t];
        float *x = r->seq->x + (size_t) r->t * c->model->hp.n_embd;
        axp_dequantize_row(e->type, (const char *) e->data + (uint64_t) id * e->row_bytes, x, e->n_in);
        const float scale = c->model->hp.embd_scale;
        for (int64_t j = 0; scale != 1.0f && j < e->n_in; j++)
                x[j] *= scale;
}

/* K1: RMSNorm, Q/K/V, biases, q/k norm, RoPE, K/V into the cache ------------------------------ */

typedef struct k1_ctx {
        const axp_layer *l;
        float *h, *q, *k, *v;
} k1_ctx;

static void k1_norm_row(cpu_dev *c, const axp_task *t, int base, int i, void *ctx) {
        k1_ctx *k = ctx;
        const axp_hparams *hp = &c->model->hp;
        row_ref *r = &c->rows[base + i];
        float *h = k->h + (size_t) i * hp->n_embd, *x = r->seq->x + (size_t) r->t * hp->n_embd;
        if (k->l->attn_norm.data)
                axp_cpu_rmsnorm(h, x, k->l->attn_norm.data, hp->n_embd, hp->rms_eps);
        else /* olmo2: no pre-norm */
                memcpy(h, x, (size_t) hp->n_embd * sizeof(float));
}

static void add_bias(float *x, const axp_weight *b, int n) {
        if (!b->data)
                return;
        const float *bb = b->data;
        for (int i = 0; i < n; i++)
                x[i] += bb[i];
}

static void head_norm(float *x, const axp_weight *w, int n_heads, int hd, float eps) {
        if (!w->data)
                return;
        for (int h = 0; h < n_heads; h++)
                axp_cpu_rmsnorm(x + h * hd, x + h * hd, w->data, hd, eps);
}

static void k1_post_row(cpu_dev *c, const axp_task *t, int base, int i, void *ctx) {
        k1_ctx *k = ctx;
        const axp_hparams *hp = &c->model->hp;
        const int qd = hp->n_head * hp->head_dim, kvd = hp->n_head_kv * hp->head_dim;
        row_ref *r = &c->rows[base + i];
        float *q = k->q + (size_t) i * qd, *kk = k->k + (size_t) i * kvd, *v = k->v + (size_t) i * kvd;

        add_bias(q, &k->l->bq, qd);
        add_bias(kk, &k->l->bk, kvd);
        add_bias(v, &k->l->bv, kvd);
        /* per head, or (olmo2) over all heads at once */
        const bool full = hp->qk_norm_full;
        head_norm(q, &k->l->q_norm, full ? 1 : hp->n_head, full ? qd : hp->head_dim, hp->rms_eps);
        head_norm(kk, &k->l->k_norm, full ? 1 : hp->n_head_kv, full ? kvd : hp->head_dim, hp->rms_eps);
        rope(c, t->layer, q, hp->n_head, r->pos);
        rope(c, t->layer, kk, hp->n_head_kv, r->pos);
        /* mistral3's attention temperature past the original context */
        const float temp = axp_attn_temp(hp, r->pos);
        for (int j = 0; temp != 1.0f && j < qd; j++)
                q[j] *= temp;

        memcpy(r->seq->qa + (size_t) r->t * qd, q, (size_t) qd * sizeof(float));
        const int layer = t->layer;
        const int rows = axp_seq_kv_rows(r->seq, layer), row = r->pos % rows;
        const size_t hb = axp_kv_head_bytes(hp, r->seq->kv_type);
        for (int h = 0; h < hp->n_head_kv; h++) {
                const size_t off = axp_kv_offset(hb, rows, h, row);
                axp_cpu_kv_store(r->seq->kv_type, kk + h * hp->head_dim, (char *) r->seq->k[layer] + off, hp->head_dim);
                axp_cpu_kv_store(r->seq->kv_type, v + h * hp->head_dim, (char *) r->seq->v[layer] + off, hp->head_dim);
        }
}

static int run_k1(cpu_dev *c, const axp_task *t, int n, axp_error *err) {
        const axp_hparams *hp = &c->model->hp;
        const long d = hp->n_embd, qd = (long) hp->n_head * hp->head_dim, kvd = (long) hp->n_head_kv * hp->head_dim;
        const axp_layer *l = &c->model->layers[t->layer];
        int r;

        if ((r = scratch(c, (size_t) TILE * (d + qd + 2 * kvd), err)) < 0)
                return r;
        k1_ctx k = { l, c->buf, c->buf + TILE * d, c->buf + TILE * (d + qd), c->buf + TILE * (d + qd + kvd) };
        for (int base = 0; base < n; base += TILE) {
                int nt = MIN(TILE, n - base);
                for_rows(c, t, base, nt, k1_norm_row, &k);
                const axp_weight *ws[3] = { &l->wq, &l->wk, &l->wv };
                float *ys[3] = { k.q, k.k, k.v };
                long ldy[3] = { qd, kvd, kvd };
                axp_cpu_matmul(c->pool, 3, ws, k.h, d, ys, ldy, nt);
                for_rows(c, t, base, nt, k1_post_row, &k);
        }
        return 0;
}

/* K2: attention of each span's tokens over its own KV cache ------------------------------------ */

/* The ring of a sliding-window layer that wraps (0 where every position has its own row) */
static int ring_rows(const axp_seq *s, int layer) {
        int rows = axp_seq_kv_rows(s, layer);
        return axp_layer_is_swa(&s->model->hp, layer) && rows < s->n_ctx_max ? rows : 0;
}

static int run_k2(cpu_dev *c, const axp_task *t, axp_error *err) {
        const axp_hparams *hp = &c->model->hp;
        const long qd = (long) hp->n_head * hp->head_dim;
        for (int i = 0; i < t->n_spans; i++) {
                const axp_span *s = &t->spans[i];
                int n_q = s->t1 - s->t0;
                if (n_q > c->pos_cap) {
                        free(c->pos);
                        c->pos = malloc((size_t) n_q * sizeof(int32_t));
                        c->pos_cap = c->pos ? n_q : 0;
                        if (!c->pos)
                                return axp_errorf(err, -ENOMEM, "out of memory");
                }
                for (int j = 0; j < n_q; j++)
                        c->pos[j] = s->seq->n_past + s->t0 + j;
                float *q = s->seq->qa + (size_t) s->t0 * qd;
                axp_cpu_attention(c->pool, q, qd, q, qd, s->seq->k[t->layer], s->seq->v[t->layer],
                                  s->seq->kv_type, n_q, c->pos, hp->n_head, hp->n_head_kv, hp->head_dim,
                                  hp->head_dim, (long) axp_seq_kv_rows(s->seq, t->layer) * hp->head_dim,
                                  axp_layer_is_swa(hp, t->layer) ? hp->n_swa : 0,
                                  ring_rows(s->seq, t->layer), hp->attn_scale, hp->attn_softcap);
        }
        return 0;
}

/* K3: output projection (+ post-norm) + residual, RMSNorm, gated FFN (+ post-norm) + residual -- */

typedef struct k3_ctx {
        const axp_layer *l;
        float *a, *o, *h, *g, *u;
} k3_ctx;

static void k3_gather_row(cpu_dev *c, const axp_task *t, int base, int i, void *ctx) {
        k3_ctx *k = ctx;
        const long qd = (long) c->model->hp.n_head * c->model->hp.head_dim;
        row_ref *r = &c->rows[base + i];
        memcpy(k->a + i * qd, r->seq->qa + (size_t) r->t * qd, (size_t) qd * sizeof(float));
}

static void k3_residual_norm_row(cpu_dev *c, const axp_task *t, int base, int i, void *ctx) {
        k3_ctx *k = ctx;
        const axp_hparams *hp = &c->model->hp;
        row_ref *r = &c->rows[base + i];
        float *x = r->seq->x + (size_t) r->t * hp->n_embd, *o = k->o + (size_t) i * hp->n_embd;
        if (k->l->post_attn_norm.data)
                axp_cpu_rmsnorm(o, o, k->l->post_attn_norm.data, hp->n_embd, hp->rms_eps);
        /* granite's residual scale (1 else: the same bits as a plain sum) */
        for (int j = 0; j < hp->n_embd; j++)
                x[j] += o[j] * hp->residual_scale;
        if (k->l->ffn_norm.data)
                axp_cpu_rmsnorm(k->h + (size_t) i * hp->n_embd, x, k->l->ffn_norm.data, hp->n_embd, hp->rms_eps);
        else /* olmo2: no pre-norm */
                memcpy(k->h + (size_t) i * hp->n_embd, x, (size_t) hp->n_embd * sizeof(float));
}

static void k3_swiglu_row(cpu_dev *c, const axp_task *t, int base, int i, void *ctx) {
        k3_ctx *k = ctx;
        const int ff = c->model->hp.n_ff;
        axp_cpu_glu(c->model->hp.ffn_act == AXP_FFN_GELU_TANH ? AXP_GLU_GELU_TANH : AXP_GLU_SILU,
                    k->g + (size_t) i * ff, k->u + (size_t) i * ff, ff);
}

static void k3_residual_row(cpu_dev *c, const axp_task *t, int base, int i, void *ctx) {
        k3_ctx *k = ctx;
        const int d = c->model->hp.n_embd;
        row_ref *r = &c->rows[base + i];
        float *x = r->seq->x + (size_t) r->t * d, *o = k->o + (size_t) i * d;
        if (k->l->post_ffn_norm.data)
                axp_cpu_rmsnorm(o, o, k->l->post_ffn_norm.data, d, c->model->hp.rms_eps);
        for (int j = 0; j < d; j++)
                x[j] += o[j] * c->model->hp.residual_scale;
}

static int run_k3(cpu_dev *c, const axp_task *t, int n, axp_error *err) {
        const axp_hparams *hp = &c->model->hp;
        const long d = hp->n_embd, qd = (long) hp->n_head * hp->head_dim, ff = hp->n_ff;
        const axp_layer *l = &c->model->layers[t->layer];
        int r;

        if ((r = scratch(c, (size_t) TILE * (qd + 2 * d + 2 * ff), err)) < 0)
                return r;
        k3_ctx k = { l, c->buf, c->buf + TILE * qd, c->buf + TILE * (qd + d), c->buf + TILE * (qd + 2 * d),
                     c->buf + TILE * (qd + 2 * d + ff) };
        for (int base = 0; base < n; base += TILE) {
                int nt = MIN(TILE, n - base);
                for_rows(c, t, base, nt, k3_gather_row, &k);
                const axp_weight *wo = &l->wo;
                axp_cpu_matmul(c->pool, 1, &wo, k.a, qd, &k.o, &d, nt);
                for_rows(c, t, base, nt, k3_residual_norm_row, &k);
                const axp_weight *gu[2] = { &l->w_gate, &l->w_up };
                float *ys[2] = { k.g, k.u };
                long ldy[2] = { ff, ff };
                axp_cpu_matmul(c->pool, 2, gu, k.h, d, ys, ldy, nt);
                for_rows(c, t, base, nt, k3_swiglu_row, &k);
                const axp_weight *wd = &l->w_down;
                axp_cpu_matmul(c->pool, 1, &wd, k.g, ff, &k.o, &d, nt);
                for_rows(c, t, base, nt, k3_residual_row, &k);
        }
        return 0;
}

/* K3 of a mixture-of-experts layer: the output projection, residual and RMSNorm as above,
 * then the router picks each token's experts and every expert runs once over the tokens of
 * the tile that picked it (a batched product per expert; experts no token picked are not
 * read), its output added to each of those tokens weighted by the router. */

typedef struct moe_ctx {
        k3_ctx k;
        float *logit;  /* [TILE][n_expert] router logits */
        int *sel;      /* [TILE][n_expert_used] picked experts */
        float *wt;     /* [TILE][n_expert_used] their weights */
        float *hx, *eo; /* one expert's gathered inputs and outputs [TILE][n_embd] */
        int *idx;      /* tile rows of one expert */
        float *idx_w;  /* their weights */
} moe_ctx;

static void moe_route_row(cpu_dev *c, const axp_task *t, int base, int i, void *ctx) {
        moe_ctx *mc = ctx;
        const axp_hparams *hp = &c->model->hp;
        const int ne = hp->n_expert, nk = hp->n_expert_used;
        const float *lg = mc->logit + (size_t) i * ne;
        double p[AXP_MAX_EXPERTS], mx = -INFINITY, z = 0, sum = 0;
        bool picked[AXP_MAX_EXPERTS] = { false };
        for (int e = 0; e < ne; e++)
                mx = fmax(mx, lg[e]);
        for (int e = 0; e < ne; e++)
                z += p[e] = exp((double) lg[e] - mx);
        int *sel = mc->sel + (size_t) i * nk;
        float *wt = mc->wt + (size_t) i * nk;
        for (int k = 0; k < nk; k++) {
                int best = -1;
                for (int e = 0; e < ne; e++)
                        if (!picked[e] && (best < 0 || p[e] > p[best]))
                                best = e;
                picked[best] = true;
                sel[k] = best;
                sum += p[best] / z;
        }
        for (int k = 0; k < nk; k++) {
                double w = p[sel[k]] / z;
                if (hp->expert_norm)
                        w /= fmax(sum, 6.103515625e-5);
                wt[k] = (float) (w * hp->expert_scale);
        }
}

static int run_k3_moe(cpu_dev *c, const axp_task *t, int n, axp_error *err) {
        const axp_hparams *hp = &c->model->hp;
        const long d = hp->n_embd, qd = (long) hp->n_head * hp->head_dim, ff = hp->n_ff_exp;
        const int ne = hp->n_expert, nk = hp->n_expert_used;
        const axp_layer *l = &c->model->layers[t->layer];
        const size_t need = (size_t) TILE * (qd + 4 * d + 2 * ff + ne + 3 * nk + 2);
        int r;

        if ((r = scratch(c, need, err)) < 0)
                return r;
        float *p = c->buf;
        moe_ctx mc = { .k = { l, p, p + TILE * qd, p + TILE * (qd + d), p + TILE * (qd + 2 * d),
                              p + TILE * (qd + 2 * d + ff) } };
        p += TILE * (qd + 2 * d + 2 * ff);
        mc.hx = p, p += TILE * d;
        mc.eo = p, p += TILE * d;
        mc.logit = p, p += (size_t) TILE * ne;
        mc.wt = p, p += (size_t) TILE * nk;
        mc.idx_w = p, p += TILE;
        /* int arrays share the float scratch (same size) */
        mc.sel = (int *) p, p += (size_t) TILE * nk;
        mc.idx = (int *) p;
        for (int base = 0; base < n; base += TILE) {
                int nt = MIN(TILE, n - base);
                for_rows(c, t, base, nt, k3_gather_row, &mc.k);
                const axp_weight *wo = &l->wo;
                axp_cpu_matmul(c->pool, 1, &wo, mc.k.a, qd, &mc.k.o, &d, nt);
                for_rows(c, t, base, nt, k3_residual_norm_row, &mc.k);
                const axp_weight *router = &l->ffn_router;
                const long lde = ne;
                axp_cpu_matmul(c->pool, 1, &router, mc.k.h, d, &mc.logit, &lde, nt);
                for_rows(c, t, base, nt, moe_route_row, &mc);
                memset(mc.k.o, 0, (size_t) nt * d * sizeof(float));
                for (int e = 0; e < ne; e++) {
                        int m = 0;
                        for (int i = 0; i < nt; i++)
                                for (int k = 0; k < nk; k++)
                                        if (mc.sel[i * nk + k] == e) {
                                                mc.idx[m] = i;
                                                mc.idx_w[m++] = mc.wt[i * nk + k];
                                        }
                        if (m == 0)
                                continue;
                        for (int j = 0; j < m; j++)
                                memcpy(mc.hx + j * d, mc.k.h + (size_t) mc.idx[j] * d, (size_t) d * sizeof(float));
                        const axp_weight *gu[2] = { &l->exp_gate[e], &l->exp_up[e] };
                        float *ys[2] = { mc.k.g, mc.k.u };
                        long ldy[2] = { ff, ff };
                        axp_cpu_matmul(c->pool, 2, gu, mc.hx, d, ys, ldy, m);
                        axp_cpu_glu(AXP_GLU_SILU, mc.k.g, mc.k.u, (long) m * ff);
                        const axp_weight *wd = &l->exp_down[e];
                        axp_cpu_matmul(c->pool, 1, &wd, mc.k.g, ff, &mc.eo, &d, m);
                        for (int j = 0; j < m; j++) {
                                float *o = mc.k.o + (size_t) mc.idx[j] * d;
                                const float *y = mc.eo + (size_t) j * d, w = mc.idx_w[j];
                                for (long q = 0; q < d; q++)
                                        o[q] += w * y[q];
                        }
                }
                for_rows(c, t, base, nt, k3_residual_row, &mc.k);
        }
        return 0;
}

/* HEAD: final RMSNorm and LM head for the last token of each span -------------------------------- */

static void head_norm_row(cpu_dev *c, const axp_task *t, int base, int i, void *ctx) {
        const axp_hparams *hp = &c->model->hp;
        row_ref *r = &c->rows[base + i];
        axp_cpu_rmsnorm((float *) ctx + (size_t) i * hp->n_embd, r->seq->x + (size_t) r->t * hp->n_embd,
                c->model->output_norm.data, hp->n_embd, hp->rms_eps);
}

static int run_head(cpu_dev *c, const axp_task *t, int n, axp_error *err) {
        const axp_hparams *hp = &c->model->hp;
        const long d = hp->n_embd, nv = hp->n_vocab;
        int r;

        if ((r = scratch(c, (size_t) n * (d + nv), err)) < 0)
                return r;
        float *h = c->buf, *logits = c->buf + (size_t) n * d;
        for_rows(c, t, 0, n, head_norm_row, h);
        const axp_weight *w = &c->model->output;
        axp_cpu_matmul(c->pool, 1, &w, h, d, &logits, &nv, n);
        for (int i = 0; i < n; i++) {
                row_ref *rr = &c->rows[i];
                memcpy(rr->seq->logits, logits + (size_t) i * nv, (size_t) nv * sizeof(float));
                axp_model_finish_logits(c->model, rr->seq->logits);
                rr->seq->logits_pos = rr->pos;
        }
        return 0;
}

/* The device ------------------------------------------------------------------------------------ */

static int cpu_run(axp_device *d, const axp_task *t, axp_error *err) {
        cpu_dev *c = d->priv;
        int n = 0, r;

        if (!c->model)
                return axp_errorf(err, -EINVAL, "the CPU device has no model prepared");
        if (t->n_spans < 1 || t->n_spans > AXP_MAX_BATCH)
                return axp_errorf(err, -EINVAL, "task with %d spans", t->n_spans);
        if (t->op != AXP_OP_EMBED && t->op != AXP_OP_HEAD && (t->layer < 0 || t->layer >= c->model->hp.n_layer))
                return axp_errorf(err, -EINVAL, "task for layer %d of %d", t->layer, c->model->hp.n_layer);
        for (int i = 0; i < t->n_spans; i++)
                if (t->spans[i].seq && t->spans[i].seq->model != c->model)
                        return axp_errorf(err, -EINVAL, "task for a request of another model");
        if ((r = collect_rows(c, t, t->op == AXP_OP_HEAD, &n, err)) < 0)
                return r;

        switch (t->op) {
        case AXP_OP_EMBED:
                for_rows(c, t, 0, n, embed_row, NULL);
                return 0;
        case AXP_OP_K1:
                return run_k1(c, t, n, err);
        case AXP_OP_K2:
                return run_k2(c, t, err);
        case AXP_OP_K3:
                return c->model->hp.n_expert > 0 ? run_k3_moe(c, t, n, err) : run_k3(c, t, n, err);
        case AXP_OP_HEAD:
                return run_head(c, t, n, err);
        default:
                return axp_errorf(err, -EINVAL, "unknown kernel %d", t->op);
        }
}

static void for_each_matrix(axp_model *m, void (*fn)(axp_weight *w, void *ud), void *ud) {
        for (int i = 0; i < m->hp.n_layer; i++) {
                axp_layer *l = &m->layers[i];
                axp_weight *ws[] = { &l->wq, &l->wk, &l->wv, &l->wo, &l->w_gate, &l->w_up, &l->w_down };
                for (size_t j = 0; j < ELEMENTSOF(ws); j++)
                        if (ws[j]->data)
                                fn(ws[j], ud);
                for (int e = 0; l->exp_gate && e < m->hp.n_expert; e++) {
                        fn(&l->exp_gate[e], ud);
                        fn(&l->exp_up[e], ud);
                        fn(&l->exp_down[e], ud);
                }
        }
        fn(&m->output, ud);
}

static void release_weight(axp_weight *w, void *ud) {
        (void) ud;
        axp_cpu_weight_release(w);
}

/* a product that meets a weight left unprepared (out of memory) repacks it on the fly; the
 * device's threads pack each weight's groups together */
static void prepare_weight(axp_weight *w, void *ud) {
        (void) axp_cpu_weight_prepare_on(ud, w);
}

typedef struct weight_list {
        const axp_weight **w;
        int n, cap;
} weight_list;

static void list_weight(axp_weight *w, void *ud) {
        weight_list *l = ud;
        if (l->n == l->cap) {
                int cap = l->cap ? 2 * l->cap : 64;
                const axp_weight **n = realloc(l->w, sizeof(*n) * (size_t) cap);
                if (!n)
                        return;
                l->w = n;
                l->cap = cap;
        }
        l->w[l->n++] = w;
}

/* Decode's prefetch plan for this model's weights, timed on them (axp_cpu_prefetch_tune),
 * where they are large enough to stream from memory: a few passes over up to 512 MB of them
 * for each of the plan's two parts (about 0.2 s) */

static void tune_prefetch(cpu_dev *c, axp_model *m) {
        weight_list l = { 0 };
        double t[4];
        for_each_matrix(m, list_weight, &l);
        (void) axp_cpu_prefetch_tune(c->pool, l.w, l.n, AXP_CPU_PREFETCH_TUNE_MIN_BYTES, t);
        free(l.w);
}

static int cpu_prepare(axp_device *d, axp_model *m, axp_error *err) {
        cpu_dev *c = d->priv;
        if (c->model)
                for_each_matrix(c->model, release_weight, NULL);
        free(c->inv_freq);
        c->inv_freq = NULL;
        c->model = NULL;
        if (!m)
                return 0;

        const axp_hparams *hp = &m->hp;
        const int half = hp->rope_dim / 2;
        c->inv_freq = malloc((size_t) (2 * half) * sizeof(double));
        if (!c->inv_freq)
                return axp_errorf(err, -ENOMEM, "out of memory");
        for (int i = 0; i < 2 * half; i++) {
                double base = i < half ? hp->rope_base : hp->rope_base_swa;
                c->inv_freq[i] = pow(base, -2.0 * (i % half) / hp->rope_dim);
                if (m->rope_divisors)
                        c->inv_freq[i] /= m->rope_divisors[i % half];
        }
        for_each_matrix(m, prepare_weight, c->pool);
        tune_prefetch(c, m);
        c->model = m;
        return 0;
}

static void cpu_free(axp_device *d) {
        cpu_dev *c = d->priv;
        if (c) {
                cpu_prepare(d, NULL, NULL);
                axp_pool_free(c->pool);
                free(c->buf);
                free(c->rows);
                free(c->pos);
                free(c);
        }
        free(d);
}

static int cpu_threads(axp_device *d, int *ret, int cap) {
        return axp_pool_worker_tids(((cpu_dev *) d->priv)->pool, ret, cap);
}

static const axp_device_ops cpu_ops = {
        .backend = "cpu",
        .prepare = cpu_prepare,
        .run = cpu_run,
        .free = cpu_free,
        .threads = cpu_threads,
};

int axp_cpu_device_new(int n_threads, axp_device **ret, axp_error *err) {
        axp_device *d = calloc(1, sizeof(*d));
        cpu_dev *c = calloc(1, sizeof(*c));
        if (!d || !c || !(c->pool = axp_pool_new(n_threads))) {
                free(d);
                free(c);
                return axp_errorf(err, -ENOMEM, "out of memory");
        }
        d->ops = &cpu_ops;
        d->priv = c;
        d->kind = AXP_DEV_CPU;
        d->mem_bytes = axp_physical_memory();
        d->can_run = true;
        snprintf(d->name, sizeof(d->name), "CPU (%d threads, %s)", axp_pool_size(c->pool), axp_cpu_isa());
        *ret = d;
        return 0;
}
