/* SPDX-License-Identifier: MIT */
/* A loaded model: hyperparameters and weights of a llama / qwen2 / qwen3 GGUF, mapped from
 * the file and checked against the architecture's expected shapes. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "gguf.h"
#include "base/util.h"
#include "kernels/weight.h"

enum axp_arch {
        AXP_ARCH_LLAMA,
        AXP_ARCH_QWEN2,
        AXP_ARCH_QWEN3,
};

enum axp_rope_type {
        AXP_ROPE_NORM, /* rotates adjacent pairs (x[2i], x[2i+1]): llama */
        AXP_ROPE_NEOX, /* rotates (x[i], x[i + n/2]): qwen2, qwen3 */
};

typedef struct axp_hparams {
        enum axp_arch arch;
        int n_vocab;
        int n_embd;
        int n_layer;
        int n_head;
        int n_head_kv;
        int head_dim;   /* key/value length per head (n_embd / n_head unless given) */
        int n_ff;
        int n_ctx_train;
        int rope_dim;   /* rotated dimensions per head (<= head_dim) */
        enum axp_rope_type rope_type;
        float rope_base;
        float rope_scale; /* linear scaling: positions are multiplied by this (1: none) */
        float rms_eps;
        bool tied_output; /* no output.weight: the LM head is token_embd */
} axp_hparams;

typedef struct axp_layer {
        axp_weight attn_norm;          /* F32 [n_embd] */
        axp_weight wq, wk, wv, wo;
        axp_weight bq, bk, bv;         /* qwen2 only: F32 biases (data NULL otherwise) */
        axp_weight q_norm, k_norm;     /* qwen3 only: F32 [head_dim] (data NULL otherwise) */
        axp_weight ffn_norm;
        axp_weight w_gate, w_up, w_down;
} axp_layer;

typedef struct axp_tokenizer axp_tokenizer;

typedef struct axp_model {
        char *path;
        char *name;            /* general.name, or the file's base name */
        gguf_file *gguf;
        axp_hparams hp;
        axp_weight tok_embd;   /* [n_vocab][n_embd] */
        axp_weight output_norm;
        axp_weight output;     /* == tok_embd when tied */
        axp_weight rope_freqs; /* optional F32 [rope_dim/2] frequency divisors (llama 3.1 rope scaling) */
        axp_layer *layers;
        axp_tokenizer *tok;
        char *chat_template;   /* tokenizer.chat_template, or NULL */
        uint32_t file_type;    /* dominant weight type, for display */
} axp_model;

/* Load and validate a GGUF model: architecture, hyperparameters, every tensor's presence,
 * type and shape, and the tokenizer. On failure: negative errno and a one-line message (a
 * vocabulary-only file, which only the tokenizer can use, is refused as such). */
int axp_model_load(const char *path, axp_model **ret, axp_error *err);
void axp_model_free(axp_model *m);
static inline void axp_model_freep(axp_model **m) {
        axp_model_free(*m);
}

/* Size in bytes of all weights (what a decode step streams). */
uint64_t axp_model_weight_bytes(const axp_model *m);
const char *axp_arch_name(enum axp_arch a);
/* The architecture named as in GGUF's general.architecture; -1 if unknown. */
int axp_arch_from_name(const char *name);
