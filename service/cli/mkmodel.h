/* SPDX-License-Identifier: MIT */
/* Synthetic models: a GGUF of any architecture agentxpu opens, with seeded random weights, loadable by
 * agentxpu and by llama.cpp, for tests, demos and benchmarks of any shape. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "model/model.h"
#include "base/util.h"

typedef struct axp_mkmodel_params {
        enum axp_arch arch;
        uint32_t type;          /* axp_type of every weight matrix; norms and biases stay F32 */
        const char *vocab_from; /* copy every tokenizer.* key of this GGUF; NULL: a small
                                 * built-in byte-level BPE vocabulary */
        const char *chat_template; /* tokenizer.chat_template to write (a Jinja template or a
                                    * family name, see model/chat.h); NULL: the copied
                                    * vocabulary's, or the built-in one's */
        int n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx;
        int head_dim;           /* 0: n_embd / n_head */
        int rope_dim;           /* rotated dimensions per head (Phi-4-mini: 3/4); 0: head_dim */
        int n_ctx_orig;         /* > 0: LongRoPE as Phi-3.5/Phi-4-mini files carry it: this
                                 * original context, long and short frequency factors and the
                                 * attention factor sqrt(1 + ln(n_ctx / n_ctx_orig) / ln(n_ctx_orig)) */
        const char *rope_scaling; /* "linear" or "yarn" with rope_factor > 1: rope.scaling.type,
                                   * .factor and (yarn) .original_context_length n_ctx / factor,
                                   * as converters write them; NULL: none */
        float rope_factor;
        bool tied;              /* no output.weight: the LM head is token_embd */
        bool fim;               /* the built-in vocabulary with Qwen2.5-Coder's fill-in-the-middle
                                 * tokens (<|fim_prefix|>, <|fim_middle|>, <|fim_suffix|>,
                                 * <|fim_pad|>, <|repo_name|>, <|file_sep|>) and their
                                 * tokenizer.ggml.fim_*_token_id keys */
        bool no_eog;            /* zero the LM head's rows of control tokens (end of
                                 * generation among them): their logits are always 0, below
                                 * many others, so generation runs to its token limit (for
                                 * benchmarks and tests) */
        float rope_base;        /* 0: 500000 for llama, 10000 for phi3 and gemma2, 1000000 for
                                 * qwen2/qwen3/gemma3 */
        int n_swa;              /* the sliding window; 0: 16 for gemma2 and gemma3, none written
                                 * for the others */
        float attn_softcap, final_softcap; /* gemma2's soft-capping; 0: 50 and 30, as Gemma 2's
                                            * files carry */
        int n_expert, n_expert_used; /* qwen3moe's experts per layer and per token; 0: 8 and 2
                                      * (each expert's FFN is n_ff long) */
        enum axp_pooling pooling; /* an embedding model's {arch}.pooling_type (mean, cls,
                                   * last); AXP_POOLING_MODEL: none written (a chat model) */
        uint64_t seed;          /* same seed and shape: same weights, for every --type */
        const char *name;       /* general.name; NULL: "synthetic-<arch>-<type>" */
        int n_threads;          /* 0: one per online CPU */
        const char *path;       /* output file */
} axp_mkmodel_params;

/* Defaults: llama, Q8_0, dim 256, 2 layers, 4 heads, 2 KV heads, FFN 512, context 512,
 * seed 1: small, and every dimension is a multiple of 256 so every --type works. */
void axp_mkmodel_defaults(axp_mkmodel_params *p);

/* Write the model to p->path (atomically). Weights: token_embd ~ N(0, 0.02²), projections
 * ~ N(0, 0.08²), norms 1 + 0.05·N(0,1), biases 0.02·N(0,1), drawn per row from a stream
 * keyed by (seed, tensor name, row), so the values do not depend on the thread count or
 * on which other tensors exist. */
int axp_mkmodel(const axp_mkmodel_params *p, axp_error *err);

/* "llama", "qwen2", "qwen3"; parse returns -1 for an unknown name. */
