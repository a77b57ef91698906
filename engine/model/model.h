/* SPDX-License-Identifier: MIT */
/* A loaded model: hyperparameters and weights of a llama / qwen2 / qwen3 / qwen3moe / phi3 /
 * gemma3 GGUF,
 * mapped from the file and checked against the architecture's expected shapes. What differs
 * between the architectures is said once, in model.c's table and load_hparams(); the kernels
 * and the reference read the flags below, never the architecture's name. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "gguf.h"
#include "base/util.h"
#include "kernels/weight.h"

/* The most experts per layer a mixture-of-experts model may have (Qwen3-30B-A3B: 128). */
#define AXP_MAX_EXPERTS 512

enum axp_arch {
        AXP_ARCH_LLAMA,
        AXP_ARCH_QWEN2,
        AXP_ARCH_QWEN3,
        AXP_ARCH_PHI3,   /* llama's blocks, fused attn_qkv and gate/up (split at load), NeoX RoPE */
        AXP_ARCH_GEMMA3, /* scaled embeddings, q/k norms, post-norms, GELU, sliding-window layers */
        AXP_ARCH_QWEN3MOE, /* qwen3's attention, a mixture-of-experts FFN in every layer */
        AXP_ARCH_GEMMA2, /* gemma3 without q/k norms, with soft-capped attention and output logits */
        AXP_ARCH_GRANITE, /* llama with scaled embeddings, residual branches, attention and logits */
        AXP_ARCH_SMOLLM3, /* llama without RoPE on every fourth layer */
        AXP_ARCH_OLMO2,   /* no pre-norms: post-norms only; q/k norms over the whole Q and K */
        AXP_ARCH_EXAONE,  /* llama's blocks with NeoX RoPE (EXAONE 3.x) */
        AXP_ARCH_MISTRAL3, /* llama with YaRN's keys and Llama 4's attention temperature (Ministral 3) */
        AXP_ARCH__COUNT,
};

/* The feed-forward network's gate activation: down(act(gate x) * up x) */
enum axp_ffn_act {
        AXP_FFN_SILU,      /* SwiGLU: llama, qwen, phi3 */
        AXP_FFN_GELU_TANH, /* GeGLU with the tanh form of GELU: gemma3 */
};

/* How an embedding pools its tokens' final hidden states (llama.cpp's pooling_type; the file's
 * `{arch}.pooling_type`: 1 mean, 2 cls, 3 last) */
enum axp_pooling {
        AXP_POOLING_MODEL = 0, /* the file's, mean where it names none (a chat model) */
        AXP_POOLING_MEAN,      /* the mean over the prompt's tokens */
        AXP_POOLING_CLS,       /* the first token's */
        AXP_POOLING_LAST,      /* the last token's (Qwen3-Embedding, decoder embedding models) */
        AXP_POOLING_OTHER,     /* a file's other pooling (4: a reranker's score): no embeddings */
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
        /* the sliding-window layers' (gemma3: 1, their positions unscaled, as llama.cpp; the
         * others: rope_scale) */
        float rope_scale_swa;
        /* YaRN (rope.scaling.type yarn: Qwen2.5/Qwen3 long-context files): each pair's angle
         * blends the scaled (interpolated) angle and the unscaled one by a ramp over the pairs
         * between yarn_corr[kind][0] and [1] (from beta_fast 32 and beta_slow 1 over the
         * original context, per RoPE base: [0] global, [1] sliding-window layers), and cos and
         * sin are multiplied by 1 + 0.1 ln(1 / scale), as ggml's rope_yarn does */
        bool rope_yarn;
        float yarn_corr[2][2];
        /* mistral3's rope.scaling.yarn_log_multiplier L (0: none): YaRN's factor on cos and sin
         * becomes (1 + 0.1 ln f) / (1 + 0.1 L ln f), as llama.cpp computes it */
        float yarn_log_mul;
        /* mistral3's attention temperature (attention.temperature_scale; 0: none): queries at
         * position p are multiplied by ln(floor(p / n_ctx_orig) + 1) attn_temp_scale + 1 */
        float attn_temp_scale;
        /* LongRoPE (Phi-3.5, Phi-4-mini): the rotated dimensions' cos and sin are multiplied by
         * rope_attn_factor (rope.scaling.attn_factor; 1 without); the long frequency divisors
         * apply when the context is longer than n_ctx_orig (rope.scaling.original_context_length;
         * n_ctx_train without), the short ones otherwise, as llama.cpp chooses */
        float rope_attn_factor;
        int n_ctx_orig;
        float rms_eps;
        bool tied_output; /* no output.weight: the LM head is token_embd */
        float embd_scale; /* the embedding row is multiplied by this (gemma3: sqrt(n_embd); else 1) */
        float attn_scale; /* attention logits q·k are multiplied by this (1/sqrt(head_dim) mostly) */
        /* Soft-capping (gemma2): an attention logit s (after attn_scale) becomes
         * attn_softcap tanh(s / attn_softcap) before the softmax, an output logit z becomes
         * final_softcap tanh(z / final_softcap); 0: none */
        float attn_softcap;
        float final_softcap;
        /* granite: each block's attention and FFN output is multiplied by residual_scale before
         * it joins the residual stream, and the output logits divided by logit_scale (1 and 1
         * for the others) */
        float residual_scale;
        float logit_scale;
        /* smollm3: layer l rotates no query or key (NoPE) where (l + 1) % nope_period == 0;
         * 0: every layer rotates */
        int nope_period;
        /* olmo2: the q/k norms span all heads of Q and of K (one RMS each, weights of
         * n_head * head_dim and n_head_kv * head_dim); false: one per head (qwen3, gemma3) */
        bool qk_norm_full;
        enum axp_ffn_act ffn_act;
        bool post_norms;  /* gemma3: RMSNorm of the attention's and the FFN's outputs before the residual */
        /* Sliding-window attention: a local layer's query at position i sees keys at positions j
         * with i - j < n_swa only. n_swa 0: no local layers. swa_period P > 0: layer l is local
         * iff l % P < P - 1 (gemma3: 6, five local layers then a global one); P = 0: every layer
         * is local. Local layers rotate with rope_base_swa. */
        int n_swa;
        int swa_period;
        float rope_base_swa;
        /* Mixture of experts (n_expert > 0): every layer's FFN is n_expert SwiGLU experts of
         * n_ff_exp hidden units; a router (softmax over the experts) picks the n_expert_used
         * most probable per token, whose outputs are summed weighted by their probabilities
         * renormalized to sum 1 (expert_norm) and times expert_scale. */
        int n_expert;
        int n_expert_used;
        int n_ff_exp;
        bool expert_norm;
        float expert_scale;
        /* what an embedding of this model pools (never AXP_POOLING_MODEL): the file's
         * `{arch}.pooling_type`, mean where it has none */
        enum axp_pooling pooling;
} axp_hparams;

static inline bool axp_layer_is_swa(const axp_hparams *hp, int l) {
        return hp->n_swa > 0 && (hp->swa_period == 0 || l % hp->swa_period < hp->swa_period - 1);
}

/* RoPE's angle for pair i (of rope_dim / 2) at position pos, inv_freq the pair's frequency
 * (base^(-2i / rope_dim) over the file's divisor), on a global or a sliding-window layer:
 * linearly scaled, or YaRN's blend */
static inline double axp_rope_theta(const axp_hparams *hp, bool swa, int i, double pos, double inv_freq) {
        const double extrap = pos * inv_freq, interp = extrap * (swa ? hp->rope_scale_swa : hp->rope_scale);
        if (!hp->rope_yarn)
                return interp;
        const float *corr = hp->yarn_corr[swa];
        double y = (i - corr[0]) / (corr[1] - corr[0] > 0.001f ? corr[1] - corr[0] : 0.001f);
        double ramp = 1 - (y < 0 ? 0 : y > 1 ? 1 : y);
        return interp * (1 - ramp) + extrap * ramp;
}

/* What RoPE multiplies cos and sin by: LongRoPE's attention factor, YaRN's 1 + 0.1 ln(1 /
 * scale); 1 for the others */
double axp_rope_mscale(const axp_hparams *hp, bool swa);

/* What the queries at position pos are multiplied by (mistral3's attention temperature; 1
 * for the others and for positions below the original context) */
float axp_attn_temp(const axp_hparams *hp, int pos);

/* Whether layer l's queries and keys are rotated */
static inline bool axp_layer_has_rope(const axp_hparams *hp, int l) {
        return hp->nope_period <= 0 || (l + 1) % hp->nope_period != 0;
}

static inline float axp_layer_rope_base(const axp_hparams *hp, int l) {
        return axp_layer_is_swa(hp, l) ? hp->rope_base_swa : hp->rope_base;
}

/* The first KV position a query at position pos of layer l attends to. */
static inline int axp_layer_kv_start(const axp_hparams *hp, int l, int pos) {
        return axp_layer_is_swa(hp, l) && pos >= hp->n_swa ? pos - hp->n_swa + 1 : 0;
}

typedef struct axp_layer {
        axp_weight attn_norm;          /* F32 [n_embd] */
        axp_weight wq, wk, wv, wo;
        axp_weight bq, bk, bv;         /* qwen2 only: F32 biases (data NULL otherwise) */
        axp_weight q_norm, k_norm;     /* qwen3 only: F32 [head_dim] (data NULL otherwise) */
        axp_weight ffn_norm;
        axp_weight w_gate, w_up, w_down;
        axp_weight post_attn_norm, post_ffn_norm; /* gemma3 only: F32 [n_embd] (data NULL otherwise) */
        /* mixture of experts (hp.n_expert > 0; w_gate, w_up, w_down unused): the router
         * [n_embd -> n_expert] and per expert e views exp_gate[e], exp_up[e] [n_embd -> n_ff_exp]
         * and exp_down[e] [n_ff_exp -> n_embd] of the file's stacked ffn_*_exps tensors */
        axp_weight ffn_router;
        axp_weight *exp_gate, *exp_up, *exp_down;
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
        axp_weight rope_long, rope_short; /* optional F32 [rope_dim/2]: LongRoPE's two sets of divisors */
        /* The divisors RoPE uses, one per rotated pair (NULL: none): rope_freqs, or rope_long or
         * rope_short as axp_model_set_context chose */
        const float *rope_divisors;
        axp_layer *layers;
        axp_tokenizer *tok;
        char *chat_template;   /* tokenizer.chat_template, or NULL */
        int file_type;         /* llama.cpp's general.file_type (llama_ftype), else that of the
                                * first layer's query matrix's type; -1 if neither */
        /* the vocabulary's byte strings as a trie for constrained decoding (grammar.h): built
         * on the first constrained request by the thread that generates */
        struct axp_vocab_trie *vocab_trie;
} axp_model;

/* Load and validate a GGUF model: architecture, hyperparameters, every tensor's presence,
 * type and shape, and the tokenizer. On failure: negative errno and a one-line message (a
 * vocabulary-only file, which only the tokenizer can use, is refused as such). */
int axp_model_load(const char *path, axp_model **ret, axp_error *err);
void axp_model_free(axp_model *m);

/* Tell the model the longest context it will run at, before a device prepares for it: a
 * LongRoPE model then rotates with its long divisors if n_ctx > hp.n_ctx_orig and its short
 * ones otherwise, as llama.cpp does for its context size. A model is loaded for
 * AXP_MODEL_DEFAULT_CTX (or n_ctx_train, if less). */
#define AXP_MODEL_DEFAULT_CTX 4096
void axp_model_set_context(axp_model *m, int n_ctx);
/* The model's output logits from its LM head's, in place: granite's divided by logit_scale
 * (times 1 / logit_scale, as llama.cpp scales them), gemma2's soft-capped (final_softcap: z *
 * (1 / cap), tanh, * cap, as llama.cpp computes it); nothing for the others. Every device
 * calls it on the logits of its HEAD tasks. */
void axp_model_finish_logits(const axp_model *m, float *logits);
static inline void axp_model_freep(axp_model **m) {
        axp_model_free(*m);
}

/* The bytes of one expert's three matrices in layer l (0 without experts). */
uint64_t axp_model_expert_bytes(const axp_model *m, int l);
/* Size in bytes of all weights (a dense model's decode step streams them all; a mixture of
 * experts' reads only the experts its tokens pick). */
uint64_t axp_model_weight_bytes(const axp_model *m);
const char *axp_arch_name(enum axp_arch a);
/* The architecture named as in GGUF's general.architecture; -1 if unknown. */
int axp_arch_from_name(const char *name);
/* The same, of the string in a GGUF's metadata: the one table the loader reads, so that what
 * is checked before a model is installed is what the loader accepts. */
int axp_arch_from_gguf(gguf_str name);
/* The architectures the engine runs, for messages: "llama, qwen2, ..." into buf. */
#define AXP_ARCH_LIST_MAX 128
char *axp_arch_list(char *buf, size_t size);
