/* SPDX-License-Identifier: MIT */
/* The HEG's cost annotations and the roofline model (implemented in cost.c): each kernel's
 * FLOPs W and bytes moved Q, and a device's two-point calibrated roofline (Agent.xpu,
 * appendix A) that turns them into a predicted latency. */
#pragma once

#include <stdbool.h>

#include "heg.h"
#include "model/model.h"

/* What the cost model needs to know of a model: shapes and bytes moved. Built from a loaded
 * model or from a simulated profile (e.g. Llama-3.1-8B in W8A16). */
typedef struct axp_heg_shape {
        int n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab;
        double bytes_k1;    /* weight bytes read by K1 of one layer (wq, wk, wv, norms) */
        double bytes_k3;    /* weight bytes read by K3 of one layer (wo, gate, up, down; with
                             * experts: wo and the router, the experts being counted apart) */
        /* A mixture of experts (n_expert > 0): K3 is the MoE kernel, "K3 moe". Each token runs
         * n_expert_used experts of n_ff_exp hidden units, bytes_expert bytes each; a task reads
         * each expert its tokens picked once, so n tokens read min(n * n_expert_used, n_expert)
         * experts at most, which is what the model charges: exact for a lone decode step,
         * for a prefill chunk of more tokens than n_expert / n_expert_used (every expert is
         * read), and an upper bound in between, so a preemption bound it meets holds. */
        int n_expert, n_expert_used, n_ff_exp;
        double bytes_expert;
        double bytes_head;  /* output weight bytes */
        double act_bytes;   /* bytes per activation element (2 for fp16 activations) */
        double kv_bytes;    /* bytes per KV element */
} axp_heg_shape;

void axp_heg_shape_from_model(const axp_model *m, uint32_t kv_type, axp_heg_shape *ret);

typedef struct axp_cost {
        double flops;      /* W */
        double bytes;      /* Q */
        double attn_flops; /* the part of W that is attention (K2): it runs at e_attn of P_eff */
} axp_cost;

/* Cost of one kernel over n_tokens tokens (summed over all spans), n_seqs requests, where
 * attn_ctx is the sum over the new tokens of the context each attends to (K2 only) and
 * kv_ctx the sum over requests of the KV positions read (K2 only). */
axp_cost axp_heg_cost(const axp_heg_shape *s, axp_op op, int n_tokens, int n_seqs,
                      double attn_ctx, double kv_ctx);
/* The experts a K3 over n tokens is charged for reading (0 for a dense model). */
double axp_heg_experts_read(const axp_heg_shape *s, int n_tokens);
/* The kernel a task of op runs, by name: "K3 moe" for K3 on a mixture of experts. */
const char *axp_heg_kernel_name(const axp_heg_shape *s, axp_op op);
/* Cost of a concrete task. */
axp_cost axp_task_cost(const axp_heg_shape *s, const axp_task *t);

/* Two-point calibrated roofline of a device (Agent.xpu appendix A). */
typedef struct axp_calib {
        double P_pk; /* peak FLOP/s */
        double B_pk; /* peak bytes/s */
        double u_m;  /* bandwidth utilization at the memory-bound anchor */
        double u_c;  /* bandwidth utilization at the compute-bound anchor */
        double I_c;  /* intensity of the compute-bound anchor (FLOP/byte) */
        /* Attention reaches only this fraction of P_eff (softmax, masking and short dot
         * products keep it below the GEMM roof); 0 means 1. A third calibration point. */
        double e_attn;
} axp_calib;

double axp_calib_B_eff(const axp_calib *c);
double axp_calib_P_eff(const axp_calib *c);
/* T = max(W / P_eff, Q / B_eff), in seconds. */
double axp_calib_latency(const axp_calib *c, axp_cost cost);
/* Achieved bandwidth b(I) = min(B_eff, P_eff / I), bytes/s. */
double axp_calib_bandwidth(const axp_calib *c, axp_cost cost);
/* Memory-bound at this cost (I <= I_star)? */
bool axp_calib_memory_bound(const axp_calib *c, axp_cost cost);
