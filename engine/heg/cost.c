/* SPDX-License-Identifier: MIT */
/* HEG cost annotations (DESIGN §3): FLOPs W and bytes Q of each kernel, and the two-point
 * calibrated roofline of the Agent.xpu appendix that turns them into a predicted latency. */
#include <math.h>

#include "cost.h"
#include "kernels/types.h"

static double weight_bytes(const axp_weight *w) {
        if (!w->data)
                return 0.0;
        return (double) w->row_bytes * (double) w->n_out;
}

void axp_heg_shape_from_model(const axp_model *m, uint32_t kv_type, axp_heg_shape *ret) {
        const axp_hparams *hp = &m->hp;
        const axp_layer *l = &m->layers[0]; /* every layer has the same shapes */

        *ret = (axp_heg_shape) {
                .n_embd = hp->n_embd,
                .n_layer = hp->n_layer,
                .n_head = hp->n_head,
                .n_head_kv = hp->n_head_kv,
                .head_dim = hp->head_dim,
                .n_ff = hp->n_ff,
                .n_vocab = hp->n_vocab,
                .bytes_k1 = weight_bytes(&l->attn_norm) + weight_bytes(&l->wq) +
                            weight_bytes(&l->wk) + weight_bytes(&l->wv) + weight_bytes(&l->bq) +
                            weight_bytes(&l->bk) + weight_bytes(&l->bv) +
                            weight_bytes(&l->q_norm) + weight_bytes(&l->k_norm),
                .bytes_k3 = weight_bytes(&l->wo) + weight_bytes(&l->ffn_norm) +
                            weight_bytes(&l->w_gate) + weight_bytes(&l->w_up) +
                            weight_bytes(&l->w_down) + weight_bytes(&l->ffn_router),
                .n_expert = hp->n_expert,
                .n_expert_used = hp->n_expert_used,
                .n_ff_exp = hp->n_ff_exp,
                .bytes_expert = hp->n_expert > 0 ? (double) axp_model_expert_bytes(m, 0) : 0.0,
                .bytes_head = weight_bytes(&m->output_norm) + weight_bytes(&m->output),
                /* our kernels keep activations in float */
                .act_bytes = 4.0,
                /* a Q8_0 cache: 34 bytes per block of 32 */
                .kv_bytes = (double) axp_type_row_size(kv_type, QK8_0) / QK8_0,
        };
}

double axp_heg_experts_read(const axp_heg_shape *s, int n_tokens) {
        if (s->n_expert <= 0 || n_tokens <= 0)
                return 0.0;
        return fmin((double) n_tokens * s->n_expert_used, (double) s->n_expert);
}

const char *axp_heg_kernel_name(const axp_heg_shape *s, axp_op op) {
        return op == AXP_OP_K3 && s->n_expert > 0 ? "K3 moe" : axp_op_name(op);
}

axp_cost axp_heg_cost(const axp_heg_shape *s, axp_op op, int n_tokens, int n_seqs,
                      double attn_ctx, double kv_ctx) {
        double n = n_tokens > 0 ? n_tokens : 0;
        double d = s->n_embd;
        double q_dim = (double) s->n_head * s->head_dim;
        double kv_dim = (double) s->n_head_kv * s->head_dim;
        double a = s->act_bytes;
        axp_cost c = { 0 };

        switch (op) {
        case AXP_OP_EMBED:
                /* a row gather: one embedding row read and one residual row written per token */
                c.flops = n * d;
                c.bytes = n * (s->n_vocab > 0 ? s->bytes_head / s->n_vocab : d) + n * d * a;
                break;
        case AXP_OP_K1:
                c.flops = 2.0 * n * d * (q_dim + 2.0 * kv_dim) +
                          n * (4.0 * d + 6.0 * (q_dim + kv_dim));
                c.bytes = s->bytes_k1 + n * (d * a + q_dim * a + 2.0 * kv_dim * s->kv_bytes);
                break;
        case AXP_OP_K2:
                /* QK^T and PV: 2 * head_dim each per (head, query, key); softmax ~5 per score */
                c.attn_flops = 4.0 * q_dim * attn_ctx + 5.0 * s->n_head * attn_ctx;
                c.flops = c.attn_flops;
                c.bytes = kv_ctx * 2.0 * kv_dim * s->kv_bytes + 2.0 * n * q_dim * a;
                break;
        case AXP_OP_K3:
                if (s->n_expert > 0) {
                        /* wo, the router, then n_expert_used SwiGLU experts per token; the
                         * CPU and OpenCL kernels alike read only the picked experts' rows */
                        double k = s->n_expert_used, ff = s->n_ff_exp;
                        c.flops = 2.0 * n * (q_dim * d + d * s->n_expert + 3.0 * k * d * ff) +
                                  n * (6.0 * d + 5.0 * s->n_expert + k * (4.0 * ff + 2.0 * d));
                        c.bytes = s->bytes_k3 + axp_heg_experts_read(s, n_tokens) * s->bytes_expert +
                                  n * (2.0 * d * a + q_dim * a + 2.0 * k * d * a);
                        break;
                }
                c.flops = 2.0 * n * (q_dim * d + 3.0 * d * s->n_ff) + n * (6.0 * d + 4.0 * s->n_ff);
                c.bytes = s->bytes_k3 + n * (2.0 * d * a + q_dim * a);
                break;
        case AXP_OP_HEAD:
                c.flops = 2.0 * n * d * s->n_vocab;
                c.bytes = s->bytes_head + n * (d * a + 4.0 * s->n_vocab);
                break;
        default:
                break;
        }
        (void) n_seqs;
        return c;
}

axp_cost axp_task_cost(const axp_heg_shape *s, const axp_task *t) {
        int n_tokens = 0;
        double attn_ctx = 0, kv_ctx = 0;

        for (int i = 0; i < t->n_spans; i++) {
                const axp_span *sp = &t->spans[i];
                double past = sp->seq ? sp->seq->n_past : 0;
                double n = sp->t1 - sp->t0;

                n_tokens += sp->t1 - sp->t0;
                /* pending token i sits at position past + i and attends to past + i + 1 keys */
                attn_ctx += n * past +
                            ((double) sp->t1 * (sp->t1 + 1) - (double) sp->t0 * (sp->t0 + 1)) / 2.0;
                kv_ctx += past + sp->t1;
        }
        /* a padded static chunk costs its full shape (token-wise kernels only) */
        if (t->variant == AXP_VAR_STATIC && t->chunk > n_tokens && axp_op_tokenwise(t->op))
                n_tokens = t->chunk;
        return axp_heg_cost(s, t->op, n_tokens, t->n_spans, attn_ctx, kv_ctx);
}

double axp_calib_B_eff(const axp_calib *c) {
        return c->u_m * c->B_pk;
}

double axp_calib_P_eff(const axp_calib *c) {
        double p = c->u_c * c->B_pk * c->I_c;
        if (c->P_pk > 0 && c->P_pk < p)
                p = c->P_pk;
        return p;
}

static double compute_time(const axp_calib *c, axp_cost cost) {
        double p = axp_calib_P_eff(c);
        double e = c->e_attn > 0 ? c->e_attn : 1.0;
        double other = cost.flops - cost.attn_flops;

        if (p <= 0)
                return INFINITY;
        return (other > 0 ? other : 0) / p + cost.attn_flops / (e * p);
}

static double memory_time(const axp_calib *c, axp_cost cost) {
        double b = axp_calib_B_eff(c);
        return b > 0 ? cost.bytes / b : INFINITY;
}

double axp_calib_latency(const axp_calib *c, axp_cost cost) {
        return fmax(compute_time(c, cost), memory_time(c, cost));
}

double axp_calib_bandwidth(const axp_calib *c, axp_cost cost) {
        double t = axp_calib_latency(c, cost);
        return t > 0 && isfinite(t) ? cost.bytes / t : 0.0;
}

bool axp_calib_memory_bound(const axp_calib *c, axp_cost cost) {
        /* I <= I_star, written with times so that attention's lower roof is honoured */
        return memory_time(c, cost) >= compute_time(c, cost);
}
