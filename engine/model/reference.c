/* SPDX-License-Identifier: MIT */
/* The reference forward pass (reference.h). Read llama_forward() first: it is the whole
 * network for one token; qwen_forward() and gemma_forward() are the same with their
 * differences marked; each helper above them is one line of the math. Everything is double precision; a weight
 * row is dequantized by the type's reference routine just before it is used. */
#include "reference.h"

#include <math.h>
#include <stdlib.h>

#include "kernels/types.h"

struct axp_ref {
        const axp_model *m;
        int n_ctx;
        int pos;              /* the position of the token being run */
        double *key, *value;  /* the KV cache: [n_layer][n_ctx][n_head_kv * head_dim] */

        /* one token's activations */
        double *x;            /* the residual stream [n_embd] */
        double *h;            /* a block's normed input [n_embd] */
        double *q;            /* the query, one head after another [n_head * head_dim] */
        double *att;          /* the attention's output, heads concatenated [n_head * head_dim] */
        double *o;            /* a block's output, added to the residual stream [n_embd] */
        double *gate, *up;    /* the feed-forward network's hidden layer [max(n_ff, n_ff_exp)] */
        double *prob;         /* the router's probability per expert [n_expert] */
        double *eo;           /* one expert's output [n_embd] */
        double *score;        /* one head's attention weights over the positions [n_ctx] */
        float *row;           /* one weight row, dequantized */
};

/* The steps ------------------------------------------------------------------------------------
 * Norm weights and biases are F32 vectors (the loader converts F16 and BF16 ones); matrices
 * are in any type of kernels/types.h. */

/* x = the token's row of the embedding table */
static void embed(axp_ref *r, double *x, const axp_weight *table, int32_t token) {
        axp_dequantize_row(table->type, (const char *) table->data + (uint64_t) token * table->row_bytes,
                           r->row, table->n_in);
        for (int64_t i = 0; i < table->n_in; i++)
                x[i] = r->row[i];
}

/* y = W x */
static void matvec(axp_ref *r, double *y, const axp_weight *W, const double *x) {
        for (int64_t i = 0; i < W->n_out; i++) {
                axp_dequantize_row(W->type, (const char *) W->data + (uint64_t) i * W->row_bytes, r->row,
                                   W->n_in);
                double s = 0;
                for (int64_t j = 0; j < W->n_in; j++)
                        s += (double) r->row[j] * x[j];
                y[i] = s;
        }
}

/* out = x / sqrt(mean(x²) + eps) * w  (out may be x) */
static void rmsnorm(double *out, const double *x, const axp_weight *w, int n, double eps) {
        const float *wf = w->data;
        double ss = 0;
        for (int i = 0; i < n; i++)
                ss += x[i] * x[i];
        double scale = 1.0 / sqrt(ss / n + eps);
        for (int i = 0; i < n; i++)
                out[i] = x[i] * scale * wf[i];
}

/* Each head of v on its own: v_h = rmsnorm(v_h) with one [head_dim] weight for all heads */
static void head_rmsnorm(double *v, const axp_weight *w, int n_heads, int head_dim, double eps) {
        for (int h = 0; h < n_heads; h++)
                rmsnorm(v + (size_t) h * head_dim, v + (size_t) h * head_dim, w, head_dim, eps);
}

/* y += b, where the file has the bias b */
static void add_bias(double *y, const axp_weight *b) {
        const float *bf = b->data;
        for (int64_t i = 0; bf && i < b->n_in; i++)
                y[i] += bf[i];
}

/* x += o */
static void residual(double *x, const double *o, int n) {
        for (int i = 0; i < n; i++)
                x[i] += o[i];
}

/* x *= s (granite's embedding and residual scales) */
static void scale(double *x, int n, double s) {
        for (int i = 0; s != 1.0 && i < n; i++)
                x[i] *= s;
}

/* RoPE: in each head of v, rotate pair i (i < rope_dim / 2) by the angle
 *     pos * rope_scale * base^(-2i / rope_dim) / divisors[i]
 * (YaRN: blended with the unscaled angle, axp_rope_theta) and scale it by axp_rope_mscale
 * (LongRoPE's attention factor, YaRN's; 1 without)
 * (base: rope_base, or rope_base_swa on a sliding-window layer l)
 * (rope_scale: linear scaling, 1 without, rope_scale_swa on a sliding-window layer; divisors: Llama 3.1's rope_freqs or LongRoPE's long
 * or short factors as the model's context chose them, 1 where the file has none). The pairs are (2i, 2i + 1) for AXP_ROPE_NORM (llama) and
 * (i, i + rope_dim / 2) for AXP_ROPE_NEOX (qwen). Dimensions past rope_dim stay as they are. */
static void rope(const axp_model *m, int l, double *v, int n_heads, int pos, enum axp_rope_type pairs) {
        const axp_hparams *hp = &m->hp;
        const double base = axp_layer_rope_base(hp, l);
        const int half = hp->rope_dim / 2;
        const float *divisors = m->rope_divisors;
        const bool swa = axp_layer_is_swa(hp, l);
        const double mscale = axp_rope_mscale(hp, swa);
        if (!axp_layer_has_rope(hp, l)) /* smollm3's NoPE layers */
                return;
        for (int h = 0; h < n_heads; h++) {
                double *x = v + (size_t) h * hp->head_dim;
                for (int i = 0; i < half; i++) {
                        double freq = pow(base, -2.0 * i / hp->rope_dim);
                        if (divisors)
                                freq /= divisors[i];
                        double theta = axp_rope_theta(hp, swa, i, pos, freq);
                        int a = pairs == AXP_ROPE_NORM ? 2 * i : i;
                        int b = pairs == AXP_ROPE_NORM ? 2 * i + 1 : i + half;
                        double x0 = x[a], x1 = x[b];
                        x[a] = (x0 * cos(theta) - x1 * sin(theta)) * mscale;
                        x[b] = (x0 * sin(theta) + x1 * cos(theta)) * mscale;
                }
        }
}

/* x = exp(x - max x) / sum exp(x - max x) */
static void softmax(double *x, int n) {
        double mx = -INFINITY, sum = 0;
        for (int i = 0; i < n; i++)
                mx = fmax(mx, x[i]);
        for (int i = 0; i < n; i++)
                sum += x[i] = exp(x[i] - mx);
        for (int i = 0; i < n; i++)
                x[i] /= sum;
}

/* Layer l's key (or value) vector at position pos in the cache */
static double *cache_at(const axp_ref *r, double *cache, int l, int pos) {
        const axp_hparams *hp = &r->m->hp;
        return cache + ((size_t) l * r->n_ctx + pos) * hp->n_head_kv * hp->head_dim;
}

/* Causal attention of this position's query q over layer l's cached keys and values at
 * positions first..pos (none later: the causal mask; first is 0, or on a sliding-window layer
 * the oldest of the window's n_swa positions). Query head h reads KV head
 * h / (n_head / n_head_kv) (grouped-query attention):
 *     out_h = sum_s softmax_s(q_h · k_s * attn_scale) v_s,   attn_scale = 1/sqrt(head_dim) mostly
 * with gemma2's scores soft-capped first: s = attn_softcap tanh(s / attn_softcap). */
static void attention(axp_ref *r, int l, const double *q, double *out) {
        const axp_hparams *hp = &r->m->hp;
        const int hd = hp->head_dim, kvd = hp->n_head_kv * hd, group = hp->n_head / hp->n_head_kv;
        const int first = axp_layer_kv_start(hp, l, r->pos), n = r->pos + 1 - first;
        const double *K = cache_at(r, r->key, l, first), *V = cache_at(r, r->value, l, first);

        for (int h = 0; h < hp->n_head; h++) {
                const double *qh = q + (size_t) h * hd;
                const int kvh = h / group;
                for (int s = 0; s < n; s++) {
                        const double *k = K + (size_t) s * kvd + (size_t) kvh * hd;
                        double dot = 0;
                        for (int i = 0; i < hd; i++)
                                dot += qh[i] * k[i];
                        r->score[s] = dot * (double) hp->attn_scale;
                        if (hp->attn_softcap > 0)
                                r->score[s] = hp->attn_softcap * tanh(r->score[s] / hp->attn_softcap);
                }
                softmax(r->score, n);
                double *oh = out + (size_t) h * hd;
                for (int i = 0; i < hd; i++)
                        oh[i] = 0;
                for (int s = 0; s < n; s++) {
                        const double *v = V + (size_t) s * kvd + (size_t) kvh * hd;
                        for (int i = 0; i < hd; i++)
                                oh[i] += r->score[s] * v[i];
                }
        }
}

/* The feed-forward network: out = W_down (silu(W_gate h) * W_up h), silu(g) = g / (1 + e^-g) */
static void swiglu(axp_ref *r, const axp_layer *L, const double *h, double *out) {
        matvec(r, r->gate, &L->w_gate, h);
        matvec(r, r->up, &L->w_up, h);
        for (int64_t i = 0; i < L->w_gate.n_out; i++)
                r->gate[i] = r->gate[i] / (1.0 + exp(-r->gate[i])) * r->up[i];
        matvec(r, out, &L->w_down, r->gate);
}

/* The feed-forward network of gemma3: out = W_down (gelu(W_gate h) * W_up h), with GELU's tanh
 * form gelu(g) = g/2 (1 + tanh(sqrt(2/pi) (g + 0.044715 g³))) */
static void geglu(axp_ref *r, const axp_layer *L, const double *h, double *out) {
        matvec(r, r->gate, &L->w_gate, h);
        matvec(r, r->up, &L->w_up, h);
        for (int64_t i = 0; i < L->w_gate.n_out; i++) {
                double g = r->gate[i];
                r->gate[i] = 0.5 * g * (1.0 + tanh(sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g))) * r->up[i];
        }
        matvec(r, out, &L->w_down, r->gate);
}

/* A mixture of experts (qwen3moe), as llama.cpp weights it:
 *     p = softmax(W_router h) over the n_expert experts;
 *     E = the n_expert_used experts of highest p (the lower index first among equals);
 *     w_e = p_e / sum_{e' in E} p_e' (expert_norm; the sum at least 2^-14) times expert_scale;
 *     out = sum_{e in E} w_e W_down,e (silu(W_gate,e h) * W_up,e h).
 * Only the picked experts' matrices are read. */
static void moe(axp_ref *r, const axp_layer *L, const double *h, double *out) {
        const axp_hparams *hp = &r->m->hp;
        const int d = hp->n_embd, ne = hp->n_expert;
        bool picked[AXP_MAX_EXPERTS] = { false };
        int sel[AXP_MAX_EXPERTS];

        matvec(r, r->prob, &L->ffn_router, h);
        softmax(r->prob, ne);
        double sum = 0;
        for (int k = 0; k < hp->n_expert_used; k++) {
                int best = -1;
                for (int e = 0; e < ne; e++)
                        if (!picked[e] && (best < 0 || r->prob[e] > r->prob[best]))
                                best = e;
                picked[best] = true;
                sel[k] = best;
                sum += r->prob[best];
        }
        for (int i = 0; i < d; i++)
                out[i] = 0;
        for (int k = 0; k < hp->n_expert_used; k++) {
                const int e = sel[k];
                double w = r->prob[e];
                if (hp->expert_norm)
                        w /= fmax(sum, 6.103515625e-5);
                w *= (double) hp->expert_scale;
                matvec(r, r->gate, &L->exp_gate[e], h);
                matvec(r, r->up, &L->exp_up[e], h);
                for (int i = 0; i < hp->n_ff_exp; i++)
                        r->gate[i] = r->gate[i] / (1.0 + exp(-r->gate[i])) * r->up[i];
                matvec(r, r->eo, &L->exp_down[e], r->gate);
                for (int i = 0; i < d; i++)
                        out[i] += w * r->eo[i];
        }
}

void axp_ref_normed(const axp_ref *r, double *out) {
        rmsnorm(out, r->x, &r->m->output_norm, r->m->hp.n_embd, r->m->hp.rms_eps);
}

/* logits = W_out rmsnorm(x), W_out being token_embd where the output is tied */
static void lm_head(axp_ref *r, double *logits) {
        const double cap = r->m->hp.final_softcap;
        axp_ref_normed(r, r->h);
        matvec(r, logits, &r->m->output, r->h);
        /* granite: the logits divided by its logit scale */
        scale(logits, r->m->hp.n_vocab, 1.0 / r->m->hp.logit_scale);
        /* gemma2: the logits soft-capped, z = cap tanh(z / cap) */
        for (int i = 0; cap > 0 && i < r->m->hp.n_vocab; i++)
                logits[i] = cap * tanh(logits[i] / cap);
}

/* The forward passes, one per family -----------------------------------------------------------
 * Each runs one token at position r->pos, leaves its keys and values in the cache, and writes
 * the logits if asked. */

/* Llama: pre-norm blocks, RoPE on adjacent pairs. Phi-3 is the same network with RoPE on the
 * two halves of each head (NeoX); its fused Q/K/V and gate/up matrices were split at load
 * (model.c), so the products below read them as three and two. Granite is Llama with the
 * embedding row times embd_scale, each block's output times residual_scale before it joins
 * the residual stream, its own attention scale (attention()) and the logits divided by
 * logit_scale (lm_head()). SmolLM3 is Llama without RoPE on every fourth layer (rope()), EXAONE
 * Llama with NeoX RoPE, Mistral 3 Llama with its queries' attention temperature. */
static void llama_forward(axp_ref *r, int32_t token, double *logits) {
        const axp_model *m = r->m;
        const axp_hparams *hp = &m->hp;
        const int d = hp->n_embd, pos = r->pos;
        const double eps = hp->rms_eps;

        embed(r, r->x, &m->tok_embd, token);
        scale(r->x, d, hp->embd_scale);
        for (int l = 0; l < hp->n_layer; l++) {
                const axp_layer *L = &m->layers[l];
                double *k = cache_at(r, r->key, l, pos), *v = cache_at(r, r->value, l, pos);

                /* attention */
                rmsnorm(r->h, r->x, &L->attn_norm, d, eps);
                matvec(r, r->q, &L->wq, r->h);
                matvec(r, k, &L->wk, r->h);
                matvec(r, v, &L->wv, r->h);
                add_bias(r->q, &L->bq); /* rare in llama files; added where present, as llama.cpp does */
                add_bias(k, &L->bk);
                add_bias(v, &L->bv);
                rope(m, l, r->q, hp->n_head, pos, hp->rope_type);
                rope(m, l, k, hp->n_head_kv, pos, hp->rope_type);
                scale(r->q, hp->n_head * hp->head_dim, axp_attn_temp(hp, pos)); /* mistral3 */
                attention(r, l, r->q, r->att);
                matvec(r, r->o, &L->wo, r->att);
                scale(r->o, d, hp->residual_scale);
                residual(r->x, r->o, d);

                /* feed-forward */
                rmsnorm(r->h, r->x, &L->ffn_norm, d, eps);
                swiglu(r, L, r->h, r->o);
                scale(r->o, d, hp->residual_scale);
                residual(r->x, r->o, d);
        }
        if (logits)
                lm_head(r, logits);
}

/* Qwen2 and Qwen3: Llama's blocks with RoPE on the two halves of each head (NeoX), and
 *   qwen2: biases on the Q, K and V projections;
 *   qwen3: no biases, but an RMSNorm over each head of Q and of K before RoPE;
 *   qwen3moe: qwen3 with a mixture of experts for the feed-forward network. */
static void qwen_forward(axp_ref *r, int32_t token, double *logits) {
        const axp_model *m = r->m;
        const axp_hparams *hp = &m->hp;
        const int d = hp->n_embd, pos = r->pos;
        const double eps = hp->rms_eps;

        embed(r, r->x, &m->tok_embd, token);
        for (int l = 0; l < hp->n_layer; l++) {
                const axp_layer *L = &m->layers[l];
                double *k = cache_at(r, r->key, l, pos), *v = cache_at(r, r->value, l, pos);

                /* attention */
                rmsnorm(r->h, r->x, &L->attn_norm, d, eps);
                matvec(r, r->q, &L->wq, r->h);
                matvec(r, k, &L->wk, r->h);
                matvec(r, v, &L->wv, r->h);
                if (hp->arch == AXP_ARCH_QWEN2) { /* qwen2: Q, K and V biases */
                        add_bias(r->q, &L->bq);
                        add_bias(k, &L->bk);
                        add_bias(v, &L->bv);
                } else { /* qwen3: each head of Q and of K RMS-normed */
                        head_rmsnorm(r->q, &L->q_norm, hp->n_head, hp->head_dim, eps);
                        head_rmsnorm(k, &L->k_norm, hp->n_head_kv, hp->head_dim, eps);
                }
                rope(m, l, r->q, hp->n_head, pos, AXP_ROPE_NEOX);
                rope(m, l, k, hp->n_head_kv, pos, AXP_ROPE_NEOX);
                attention(r, l, r->q, r->att);
                matvec(r, r->o, &L->wo, r->att);
                residual(r->x, r->o, d);

                /* feed-forward */
                rmsnorm(r->h, r->x, &L->ffn_norm, d, eps);
                if (hp->n_expert > 0)
                        moe(r, L, r->h, r->o);
                else
                        swiglu(r, L, r->h, r->o);
                residual(r->x, r->o, d);
        }
        if (logits)
                lm_head(r, logits);
}

/* OLMo 2: NeoX RoPE and Llama's SwiGLU FFN, but no norm before the attention or the FFN: each
 * reads the residual stream as it is, and its output is RMS-normed (post-attention, post-FFN
 * norms) before it joins the stream; Q and K are RMS-normed over all their heads at once. */
static void olmo2_forward(axp_ref *r, int32_t token, double *logits) {
        const axp_model *m = r->m;
        const axp_hparams *hp = &m->hp;
        const int d = hp->n_embd, pos = r->pos;
        const double eps = hp->rms_eps;

        embed(r, r->x, &m->tok_embd, token);
        for (int l = 0; l < hp->n_layer; l++) {
                const axp_layer *L = &m->layers[l];
                double *k = cache_at(r, r->key, l, pos), *v = cache_at(r, r->value, l, pos);

                /* attention of the stream itself */
                matvec(r, r->q, &L->wq, r->x);
                matvec(r, k, &L->wk, r->x);
                matvec(r, v, &L->wv, r->x);
                rmsnorm(r->q, r->q, &L->q_norm, hp->n_head * hp->head_dim, eps);
                rmsnorm(k, k, &L->k_norm, hp->n_head_kv * hp->head_dim, eps);
                rope(m, l, r->q, hp->n_head, pos, AXP_ROPE_NEOX);
                rope(m, l, k, hp->n_head_kv, pos, AXP_ROPE_NEOX);
                attention(r, l, r->q, r->att);
                matvec(r, r->o, &L->wo, r->att);
                rmsnorm(r->o, r->o, &L->post_attn_norm, d, eps);
                residual(r->x, r->o, d);

                /* feed-forward of the stream itself */
                swiglu(r, L, r->x, r->o);
                rmsnorm(r->o, r->o, &L->post_ffn_norm, d, eps);
                residual(r->x, r->o, d);
        }
        if (logits)
                lm_head(r, logits);
}

/* Gemma 3: Qwen3's attention (q/k norms, NeoX RoPE) and in addition
 *   the embedding row scaled by sqrt(n_embd);
 *   an RMSNorm of the attention's and of the FFN's output before each joins the residual;
 *   a GELU-gated FFN;
 *   sliding-window attention with its own RoPE base on the local layers (5 of every 6).
 * The norm weights are used as stored: GGUF converters already added Gemma's "+1".
 * Gemma 2 is the same without the q/k norms, its local layers every other one with the global
 * layers' RoPE base, and its attention scores and logits soft-capped (attention(), lm_head()). */
static void gemma_forward(axp_ref *r, int32_t token, double *logits) {
        const axp_model *m = r->m;
        const axp_hparams *hp = &m->hp;
        const int d = hp->n_embd, pos = r->pos;
        const double eps = hp->rms_eps;

        embed(r, r->x, &m->tok_embd, token);
        for (int i = 0; i < d; i++)
                r->x[i] *= (double) hp->embd_scale;
        for (int l = 0; l < hp->n_layer; l++) {
                const axp_layer *L = &m->layers[l];
                double *k = cache_at(r, r->key, l, pos), *v = cache_at(r, r->value, l, pos);

                /* attention (windowed on local layers: attention() reads axp_layer_kv_start) */
                rmsnorm(r->h, r->x, &L->attn_norm, d, eps);
                matvec(r, r->q, &L->wq, r->h);
                matvec(r, k, &L->wk, r->h);
                matvec(r, v, &L->wv, r->h);
                if (hp->arch == AXP_ARCH_GEMMA3) {
                        head_rmsnorm(r->q, &L->q_norm, hp->n_head, hp->head_dim, eps);
                        head_rmsnorm(k, &L->k_norm, hp->n_head_kv, hp->head_dim, eps);
                }
                rope(m, l, r->q, hp->n_head, pos, AXP_ROPE_NEOX);
                rope(m, l, k, hp->n_head_kv, pos, AXP_ROPE_NEOX);
                attention(r, l, r->q, r->att);
                matvec(r, r->o, &L->wo, r->att);
                rmsnorm(r->o, r->o, &L->post_attn_norm, d, eps); /* post-attention norm */
                residual(r->x, r->o, d);

                /* feed-forward */
                rmsnorm(r->h, r->x, &L->ffn_norm, d, eps);
                geglu(r, L, r->h, r->o);
                rmsnorm(r->o, r->o, &L->post_ffn_norm, d, eps); /* post-FFN norm */
                residual(r->x, r->o, d);
        }
        if (logits)
                lm_head(r, logits);
}

/* The state ----------------------------------------------------------------------------------- */

/* The file's tensors are those its architecture's forward pass above computes with. */
static int check_tensors(const axp_model *m, axp_error *err) {
        const axp_hparams *hp = &m->hp;
        for (int l = 0; l < hp->n_layer; l++) {
                const axp_layer *L = &m->layers[l];
                bool biases = L->bq.data || L->bk.data || L->bv.data;
                bool qk_norm = L->q_norm.data || L->k_norm.data;
                bool has_qk_norm = hp->arch == AXP_ARCH_QWEN3 || hp->arch == AXP_ARCH_QWEN3MOE ||
                                   hp->arch == AXP_ARCH_GEMMA3 || hp->arch == AXP_ARCH_OLMO2;
                if (!has_qk_norm && qk_norm)
                        return axp_errorf(err, -ENOTSUP, "layer %d of this %s model has q/k norms, which %s has not",
                                          l, axp_arch_name(hp->arch), axp_arch_name(hp->arch));
                if (has_qk_norm && biases)
                        return axp_errorf(err, -ENOTSUP,
                                          "layer %d of this %s model has Q/K/V biases, which %s has not", l,
                                          axp_arch_name(hp->arch), axp_arch_name(hp->arch));
        }
        return 0;
}

int axp_ref_new(const axp_model *m, int n_ctx, axp_ref **ret, axp_error *err) {
        const axp_hparams *hp = &m->hp;
        const size_t qd = (size_t) hp->n_head * hp->head_dim, kvd = (size_t) hp->n_head_kv * hp->head_dim;
        const int n_ff = MAX(hp->n_ff, hp->n_ff_exp);
        const size_t n_row = (size_t) MAX(MAX(hp->n_embd, n_ff), (int) qd);
        int r;

        if (n_ctx <= 0)
                return axp_errorf(err, -EINVAL, "the reference needs a context of at least one position");
        if ((r = check_tensors(m, err)) < 0)
                return r;
        axp_ref *s = calloc(1, sizeof(*s));
        if (!s)
                return axp_errorf(err, -ENOMEM, "out of memory");
        s->m = m;
        s->n_ctx = n_ctx;
        s->key = calloc((size_t) hp->n_layer * n_ctx * kvd, sizeof(double));
        s->value = calloc((size_t) hp->n_layer * n_ctx * kvd, sizeof(double));
        s->x = calloc((size_t) hp->n_embd, sizeof(double));
        s->h = calloc((size_t) hp->n_embd, sizeof(double));
        s->q = calloc(qd, sizeof(double));
        s->att = calloc(qd, sizeof(double));
        s->o = calloc((size_t) hp->n_embd, sizeof(double));
        s->gate = calloc((size_t) n_ff, sizeof(double));
        s->up = calloc((size_t) n_ff, sizeof(double));
        s->prob = calloc((size_t) MAX(hp->n_expert, 1), sizeof(double));
        s->eo = calloc((size_t) hp->n_embd, sizeof(double));
        s->score = calloc((size_t) n_ctx, sizeof(double));
        s->row = calloc(n_row, sizeof(float));
        if (!s->key || !s->value || !s->x || !s->h || !s->q || !s->att || !s->o || !s->gate || !s->up ||
            !s->prob || !s->eo || !s->score || !s->row) {
                axp_ref_free(s);
                return axp_errorf(err, -ENOMEM, "out of memory for the reference's cache of %d positions",
                                  n_ctx);
        }
        *ret = s;
        return 0;
}

void axp_ref_free(axp_ref *r) {
        if (!r)
                return;
        free(r->key), free(r->value), free(r->x), free(r->h), free(r->q), free(r->att), free(r->o);
        free(r->gate), free(r->up), free(r->prob), free(r->eo), free(r->score), free(r->row);
        free(r);
}

int axp_ref_step(axp_ref *r, int32_t token, double *logits, axp_error *err) {
        if (token < 0 || token >= r->m->hp.n_vocab)
                return axp_errorf(err, -EINVAL, "token id %d is outside the vocabulary", token);
        if (r->pos >= r->n_ctx)
                return axp_errorf(err, -E2BIG, "the reference's context of %d positions is full", r->n_ctx);
        switch (r->m->hp.arch) {
        case AXP_ARCH_LLAMA:
        case AXP_ARCH_GRANITE:
        case AXP_ARCH_SMOLLM3:
        case AXP_ARCH_EXAONE:
        case AXP_ARCH_MISTRAL3:
        case AXP_ARCH_PHI3: llama_forward(r, token, logits); break;
        case AXP_ARCH_QWEN2:
        case AXP_ARCH_QWEN3:
        case AXP_ARCH_QWEN3MOE: qwen_forward(r, token, logits); break;
        case AXP_ARCH_GEMMA2:
        case AXP_ARCH_GEMMA3: gemma_forward(r, token, logits); break;
        case AXP_ARCH_OLMO2: olmo2_forward(r, token, logits); break;
        default: return axp_errorf(err, -ENOTSUP, "the reference has no forward pass for %s",
                                   axp_arch_name(r->m->hp.arch));
        }
        r->pos++;
        return 0;
}

int axp_ref_logits(const axp_model *m, const int32_t *tokens, int n, int first, double **ret,
                   axp_error *err) {
        const size_t nv = (size_t) m->hp.n_vocab;
        int r;

        if (n <= 0 || first < 0 || first >= n)
                return axp_errorf(err, -EINVAL, "no logits to compute (positions %d..%d)", first, n - 1);
        _cleanup_(axp_ref_freep) axp_ref *ref = NULL;
        if ((r = axp_ref_new(m, n, &ref, err)) < 0)
                return r;
        _cleanup_free_ double *logits = calloc((size_t) (n - first) * nv, sizeof(double));
        if (!logits)
                return axp_errorf(err, -ENOMEM, "out of memory");
        for (int i = 0; i < n; i++)
                if ((r = axp_ref_step(ref, tokens[i], i >= first ? logits + (size_t) (i - first) * nv : NULL,
                                      err)) < 0)
                        return r;
        *ret = TAKE_PTR(logits);
        return 0;
}
