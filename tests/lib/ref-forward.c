/* SPDX-License-Identifier: MIT */
#include "ref-forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/types.h"

/* W (n_out x n_in, any type) times x -> y, in double. */
static void matvec(const axp_weight *w, const double *x, double *y) {
        float *row = malloc((size_t) w->n_in * sizeof(float));
        for (int64_t r = 0; r < w->n_out; r++) {
                axp_dequantize_row(w->type, (const char *) w->data + r * w->row_bytes, row, w->n_in);
                double s = 0;
                for (int64_t k = 0; k < w->n_in; k++)
                        s += (double) row[k] * x[k];
                y[r] = s;
        }
        free(row);
}

static void norm(const double *x, const axp_weight *w, int n, double eps, double *out) {
        double ss = 0;
        for (int i = 0; i < n; i++)
                ss += x[i] * x[i];
        double scale = 1.0 / sqrt(ss / n + eps);
        const float *wf = w->data;
        for (int i = 0; i < n; i++)
                out[i] = x[i] * scale * wf[i];
}

static void rotate(const axp_model *m, double *v, int pos) {
        const axp_hparams *hp = &m->hp;
        int half = hp->rope_dim / 2;
        for (int i = 0; i < half; i++) {
                double freq = pow(hp->rope_base, -2.0 * i / hp->rope_dim);
                if (m->rope_freqs.data)
                        freq /= ((const float *) m->rope_freqs.data)[i];
                double th = pos * (double) hp->rope_scale * freq;
                int a = hp->rope_type == AXP_ROPE_NORM ? 2 * i : i;
                int b = hp->rope_type == AXP_ROPE_NORM ? 2 * i + 1 : i + half;
                double x0 = v[a], x1 = v[b];
                v[a] = x0 * cos(th) - x1 * sin(th);
                v[b] = x0 * sin(th) + x1 * cos(th);
        }
}

int ref_forward(const axp_model *m, const int32_t *tokens, int n, double **ret_logits) {
        const axp_hparams *hp = &m->hp;
        const int d = hp->n_embd, hd = hp->head_dim, nh = hp->n_head, nkv = hp->n_head_kv;
        const int qd = nh * hd, kvd = nkv * hd, ff = hp->n_ff, nv = hp->n_vocab;
        double *x = calloc((size_t) n * d, sizeof(double));
        double *K = calloc((size_t) n * kvd, sizeof(double)), *V = calloc((size_t) n * kvd, sizeof(double));
        double *Q = calloc((size_t) n * qd, sizeof(double)), *A = calloc((size_t) qd, sizeof(double));
        double *h = calloc((size_t) d, sizeof(double)), *o = calloc((size_t) d, sizeof(double));
        double *g = calloc((size_t) ff, sizeof(double)), *u = calloc((size_t) ff, sizeof(double));
        double *sc = calloc((size_t) n, sizeof(double));
        double *logits = calloc((size_t) n * nv, sizeof(double));
        float *row = malloc((size_t) d * sizeof(float));

        for (int t = 0; t < n; t++) {
                const axp_weight *e = &m->tok_embd;
                axp_dequantize_row(e->type, (const char *) e->data + (size_t) tokens[t] * e->row_bytes, row, d);
                for (int i = 0; i < d; i++)
                        x[t * d + i] = row[i];
        }
        for (int l = 0; l < hp->n_layer; l++) {
                const axp_layer *L = &m->layers[l];
                for (int t = 0; t < n; t++) {
                        double *q = Q + (size_t) t * qd, *k = K + (size_t) t * kvd, *v = V + (size_t) t * kvd;
                        norm(x + (size_t) t * d, &L->attn_norm, d, hp->rms_eps, h);
                        matvec(&L->wq, h, q);
                        matvec(&L->wk, h, k);
                        matvec(&L->wv, h, v);
                        for (int i = 0; L->bq.data && i < qd; i++)
                                q[i] += ((const float *) L->bq.data)[i];
                        for (int i = 0; L->bk.data && i < kvd; i++)
                                k[i] += ((const float *) L->bk.data)[i];
                        for (int i = 0; L->bv.data && i < kvd; i++)
                                v[i] += ((const float *) L->bv.data)[i];
                        for (int hh = 0; L->q_norm.data && hh < nh; hh++)
                                norm(q + hh * hd, &L->q_norm, hd, hp->rms_eps, q + hh * hd);
                        for (int hh = 0; L->k_norm.data && hh < nkv; hh++)
                                norm(k + hh * hd, &L->k_norm, hd, hp->rms_eps, k + hh * hd);
                        for (int hh = 0; hh < nh; hh++)
                                rotate(m, q + hh * hd, t);
                        for (int hh = 0; hh < nkv; hh++)
                                rotate(m, k + hh * hd, t);
                }
                for (int t = 0; t < n; t++) {
                        for (int hh = 0; hh < nh; hh++) {
                                int kh = hh / (nh / nkv);
                                const double *q = Q + (size_t) t * qd + hh * hd;
                                double mx = -INFINITY, sum = 0;
                                for (int s = 0; s <= t; s++) {
                                        double dot = 0;
                                        for (int i = 0; i < hd; i++)
                                                dot += q[i] * K[(size_t) s * kvd + kh * hd + i];
                                        sc[s] = dot / sqrt((double) hd);
                                        mx = fmax(mx, sc[s]);
                                }
                                for (int s = 0; s <= t; s++)
                                        sum += (sc[s] = exp(sc[s] - mx));
                                for (int i = 0; i < hd; i++) {
                                        double acc = 0;
                                        for (int s = 0; s <= t; s++)
                                                acc += sc[s] * V[(size_t) s * kvd + kh * hd + i];
                                        A[hh * hd + i] = acc / sum;
                                }
                        }
                        double *xt = x + (size_t) t * d;
                        matvec(&L->wo, A, o);
                        for (int i = 0; i < d; i++)
                                xt[i] += o[i];
                        norm(xt, &L->ffn_norm, d, hp->rms_eps, h);
                        matvec(&L->w_gate, h, g);
                        matvec(&L->w_up, h, u);
                        for (int i = 0; i < ff; i++)
                                g[i] = g[i] / (1.0 + exp(-g[i])) * u[i];
                        matvec(&L->w_down, g, o);
                        for (int i = 0; i < d; i++)
                                xt[i] += o[i];
                }
        }
        for (int t = 0; t < n; t++) {
                norm(x + (size_t) t * d, &m->output_norm, d, hp->rms_eps, h);
                matvec(&m->output, h, logits + (size_t) t * nv);
        }
        free(x), free(K), free(V), free(Q), free(A), free(h), free(o), free(g), free(u), free(sc), free(row);
        *ret_logits = logits;
        return 0;
}
