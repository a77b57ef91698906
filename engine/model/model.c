/* SPDX-License-Identifier: MIT */
/* Model loading: architecture and hyperparameters from the GGUF metadata, every tensor
 * checked for presence, type and shape before the engine touches it. */
#include "model.h"
#include "grammar.h"
#include "quantize.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tokenizer.h"
#include "kernels/cpu/kernels.h"
#include "kernels/types.h"

typedef struct load_ctx {
        axp_model *m;
        const char *file; /* base name for messages */
        char key[160];
        axp_error *err;
} load_ctx;

/* What differs between the architectures, one row each; load_hparams() and load_tensors()
 * read the rest of the file through it. */
typedef struct arch_info {
        const char *name;
        enum axp_rope_type rope_type;
        float rope_base;      /* when the file does not say */
        bool qkv_bias;        /* attn_{q,k,v}.bias required */
        bool qk_norm;         /* attn_{q,k}_norm required */
        bool post_norms;      /* post_attention_norm and post_ffw_norm required */
        bool fused;           /* attn_qkv and a fused gate/up ffn_up accepted (split at load) */
        bool scaled_embd;     /* the embedding row times sqrt(n_embd) */
        enum axp_ffn_act ffn_act;
        int swa_period;       /* local layers, when the file has a sliding window (-1: none) */
        int swa_default;      /* the window where the file has none (0: no local layers then) */
        float rope_base_swa;  /* local layers' base where the file does not say (0: rope_base) */
        bool softcap;         /* soft-capped attention and output logits (attn_logit_softcapping,
                               * final_logit_softcapping; llama.cpp's 50 and 30 without the keys) */
        bool moe;             /* a mixture of experts in every layer's FFN (expert_* keys, ffn_*_exps) */
        bool scales;          /* granite's embedding, residual, attention and logit scales */
        int nope_period;      /* every this many layers, the last without RoPE (0: none) */
        bool swa_scaled;      /* the sliding-window layers' positions scaled too (gemma2) */
        bool yarn_keys;       /* YaRN's beta_fast, beta_slow and log multiplier read from the file,
                               * and the attention temperature (mistral3; llama.cpp reads them for
                               * no other architecture here) */
        bool post_only;       /* no attn_norm and ffn_norm: the blocks read the residual stream as
                               * it is (olmo2); post_norms then, and q/k norms over all heads */
} arch_info;

static const arch_info archs[AXP_ARCH__COUNT] = {
        [AXP_ARCH_LLAMA] = { "llama", AXP_ROPE_NORM, 10000.0f, .swa_period = -1 },
        [AXP_ARCH_QWEN2] = { "qwen2", AXP_ROPE_NEOX, 1000000.0f, .qkv_bias = true, .swa_period = -1 },
        [AXP_ARCH_QWEN3] = { "qwen3", AXP_ROPE_NEOX, 1000000.0f, .qk_norm = true, .swa_period = -1 },
        /* llama.cpp ignores phi3's sliding window (its converters set it wrongly), and so do we */
        [AXP_ARCH_PHI3] = { "phi3", AXP_ROPE_NEOX, 10000.0f, .fused = true, .swa_period = -1 },
        [AXP_ARCH_GEMMA3] = { "gemma3", AXP_ROPE_NEOX, 1000000.0f, .qk_norm = true, .post_norms = true,
                              .scaled_embd = true, .ffn_act = AXP_FFN_GELU_TANH, .swa_period = 6,
                              .rope_base_swa = 10000.0f },
        /* llama.cpp's qwen3moe: softmax router, the picked experts' weights renormalized */
        [AXP_ARCH_QWEN3MOE] = { "qwen3moe", AXP_ROPE_NEOX, 1000000.0f, .qk_norm = true, .swa_period = -1,
                                .moe = true },
        /* every other layer local (the even ones), one rope base for both kinds, as llama.cpp */
        [AXP_ARCH_GEMMA2] = { "gemma2", AXP_ROPE_NEOX, 10000.0f, .post_norms = true, .scaled_embd = true,
                              .ffn_act = AXP_FFN_GELU_TANH, .swa_period = 2, .swa_default = 4096,
                              .softcap = true, .swa_scaled = true },
        /* llama's blocks and RoPE, and four scales (IBM Granite 3) */
        [AXP_ARCH_GRANITE] = { "granite", AXP_ROPE_NORM, 10000.0f, .swa_period = -1, .scales = true },
        /* SmolLM3: layers 3, 7, 11, ... without RoPE, as llama.cpp (which has no key for it) */
        [AXP_ARCH_SMOLLM3] = { "smollm3", AXP_ROPE_NORM, 10000.0f, .swa_period = -1, .nope_period = 4 },
        /* OLMo 2; Olmo 3's sliding window is not read (its files are `olmo3`, refused) */
        [AXP_ARCH_OLMO2] = { "olmo2", AXP_ROPE_NEOX, 10000.0f, .qk_norm = true, .post_norms = true, .swa_period = -1,
                             .post_only = true },
        /* EXAONE 3.0/3.5: llama's blocks, NeoX RoPE, Llama 3's rope_freqs where the file has them */
        [AXP_ARCH_EXAONE] = { "exaone", AXP_ROPE_NEOX, 10000.0f, .swa_period = -1 },
        /* Ministral 3, Devstral Small 2: llama's blocks */
        [AXP_ARCH_MISTRAL3] = { "mistral3", AXP_ROPE_NORM, 10000.0f, .swa_period = -1, .yarn_keys = true },
};

const char *axp_arch_name(enum axp_arch a) {
        return (unsigned) a < AXP_ARCH__COUNT ? archs[a].name : "?";
}

int axp_arch_from_name(const char *name) {
        for (enum axp_arch a = 0; a < AXP_ARCH__COUNT; a++)
                if (strcmp(axp_arch_name(a), name) == 0)
                        return (int) a;
        return -1;
}

int axp_arch_from_gguf(gguf_str name) {
        for (enum axp_arch a = 0; a < AXP_ARCH__COUNT; a++)
                if (gguf_str_eq(name, archs[a].name))
                        return (int) a;
        return -1;
}

char *axp_arch_list(char *buf, size_t size) {
        size_t o = 0;

        buf[0] = 0;
        for (enum axp_arch a = 0; a < AXP_ARCH__COUNT; a++) {
                int n = snprintf(buf + o, size - o, "%s%s", a ? ", " : "", archs[a].name);
                if (n < 0 || (size_t) n >= size - o)
                        break;
                o += (size_t) n;
        }
        return buf;
}

static const char *arch_key(load_ctx *c, const char *suffix) {
        snprintf(c->key, sizeof(c->key), "%s.%s", axp_arch_name(c->m->hp.arch), suffix);
        return c->key;
}

static int get_dim(load_ctx *c, const char *suffix, bool required, int def, int *ret) {
        uint32_t v;
        const char *key = arch_key(c, suffix);
        if (!gguf_get_u32(c->m->gguf, key, &v)) {
                if (gguf_find(c->m->gguf, key))
                        return axp_errorf(c->err, -EINVAL, "%s: metadata '%s' is not an unsigned integer",
                                          c->file, key);
                if (required)
                        return axp_errorf(c->err, -EINVAL, "%s: metadata '%s' is missing", c->file, key);
                *ret = def;
                return 0;
        }
        if (v == 0 || v > (1u << 24))
                return axp_errorf(c->err, -EINVAL, "%s: metadata '%s' = %u is out of range", c->file,
                                  key, v);
        *ret = (int) v;
        return 0;
}

static int get_float(load_ctx *c, const char *suffix, float def, float *ret) {
        const char *key = arch_key(c, suffix);
        float v;
        if (!gguf_get_f32(c->m->gguf, key, &v)) {
                if (gguf_find(c->m->gguf, key))
                        return axp_errorf(c->err, -EINVAL, "%s: metadata '%s' is not a number", c->file, key);
                v = def;
        }
        if (!isfinite(v) || v <= 0)
                return axp_errorf(c->err, -EINVAL, "%s: metadata '%s' = %g is out of range", c->file, key,
                                  (double) v);
        *ret = v;
        return 0;
}

/* An optional scale: 0 without the key, else a finite number >= 0 */
static int get_scale(load_ctx *c, const char *suffix, float *ret) {
        *ret = 0;
        if (!gguf_find(c->m->gguf, arch_key(c, suffix)))
                return 0;
        if (!gguf_get_f32(c->m->gguf, c->key, ret) || !isfinite(*ret) || *ret < 0)
                return axp_errorf(c->err, -EINVAL, "%s: metadata '%s' is not a scale", c->file, c->key);
        return 0;
}

/* ggml's ggml_rope_yarn_corr_dims: the pairs where YaRN's ramp starts and ends, for a base */
static void yarn_corr(const axp_hparams *hp, float base, float beta_fast, float beta_slow, float ret[2]) {
        const float n = (float) hp->rope_dim, orig = (float) hp->n_ctx_orig;
        float lo = floorf(n * logf(orig / (beta_fast * 2 * (float) M_PI)) / (2 * logf(base)));
        float hi = ceilf(n * logf(orig / (beta_slow * 2 * (float) M_PI)) / (2 * logf(base)));
        ret[0] = lo > 0 ? lo : 0;
        ret[1] = hi < n - 1 ? hi : n - 1;
}

/* granite's scales, as llama.cpp reads them: logit_scale required, the others optional (an
 * attention scale of 0, as llama.cpp takes it, is 1/sqrt(head_dim)); the file without RoPE
 * (rope.scaling.finetuned false: Granite's switch for it) and the blocks' optional biases,
 * which our kernels do not add, are refused */
static int load_scales(load_ctx *c) {
        axp_hparams *hp = &c->m->hp;
        float attn = 0;
        bool rope = true;
        int r;
        if (!gguf_find(c->m->gguf, arch_key(c, "logit_scale")))
                return axp_errorf(c->err, -EINVAL, "%s: metadata '%s' is missing", c->file, c->key);
        if ((r = get_float(c, "logit_scale", 1.0f, &hp->logit_scale)) < 0 ||
            (r = get_float(c, "residual_scale", 1.0f, &hp->residual_scale)) < 0 ||
            (r = get_float(c, "embedding_scale", 1.0f, &hp->embd_scale)) < 0)
                return r;
        if ((r = get_scale(c, "attention.scale", &attn)) < 0)
                return r;
        if (attn > 0)
                hp->attn_scale = attn;
        if (gguf_find(c->m->gguf, arch_key(c, "rope.scaling.finetuned")) &&
            gguf_get_bool(c->m->gguf, c->key, &rope) && !rope)
                return axp_errorf(c->err, -ENOTSUP, "%s: a granite model without RoPE (%s false) is not supported",
                                  c->file, c->key);
        const char *biases[] = { "blk.0.attn_output.bias", "blk.0.ffn_gate.bias", "blk.0.ffn_up.bias",
                                 "blk.0.ffn_down.bias" };
        for (size_t i = 0; i < ELEMENTSOF(biases); i++)
                if (gguf_find_tensor(c->m->gguf, biases[i]))
                        return axp_errorf(c->err, -ENOTSUP, "%s: tensor '%s': granite's biases are not supported",
                                          c->file, biases[i]);
        return 0;
}

/* Vectors (norms, biases, rope factors) are converted to owned F32 arrays. */
static int load_vector(load_ctx *c, const gguf_tensor *t, int64_t n, axp_weight *w) {
        if (t->n_dims != 1 || t->ne[0] != n)
                return axp_errorf(c->err, -EINVAL, "%s: tensor '%s' has shape [%lld], expected [%lld]",
                                  c->file, GGUF_SHOW(t->name), (long long) t->ne[0],
                                  (long long) n);
        if (t->type != AXP_TYPE_F32 && t->type != AXP_TYPE_F16 && t->type != AXP_TYPE_BF16)
                return axp_errorf(c->err, -EINVAL, "%s: tensor '%s' has type %s, expected F32, F16 or BF16",
                                  c->file, GGUF_SHOW(t->name),
                                  axp_type_traits_get(t->type)->name);
        float *data = axp_alloc((size_t) n * sizeof(float));
        if (!data)
                return axp_errorf(c->err, -ENOMEM, "out of memory");
        axp_dequantize_row(t->type, t->data, data, n);
        w->type = AXP_TYPE_F32;
        w->n_in = n;
        w->n_out = 1;
        w->row_bytes = (uint64_t) n * sizeof(float);
        w->data = data;
        return 0;
}

static int find(load_ctx *c, const char *name, bool required, const gguf_tensor **ret) {
        const gguf_tensor *t = gguf_find_tensor(c->m->gguf, name);
        if (!t && required)
                return axp_errorf(c->err, -EINVAL, "%s: tensor '%s' is missing (architecture %s)", c->file,
                                  name, axp_arch_name(c->m->hp.arch));
        *ret = t;
        return 0;
}

static int weight(load_ctx *c, const char *name, bool required, int64_t n_in, int64_t n_out,
                  axp_weight *w) {
        const gguf_tensor *t = NULL;
        int r = find(c, name, required, &t);
        if (r < 0 || !t)
                return r;
        w->name = strdup(name);
        if (!w->name)
                return axp_errorf(c->err, -ENOMEM, "out of memory");
        if (n_out == 0) /* a vector */
                return load_vector(c, t, n_in, w);
        const axp_type_traits *tt = axp_type_traits_get(t->type);
        if (!tt->supported)
                return axp_errorf(c->err, -ENOTSUP,
                                  "%s: tensor '%s' has type %s, which agentxpu cannot compute with "
                                  "(supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, "
                                  "IQ4_NL, IQ4_XS, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)",
                                  c->file, name, tt->name);
        if (t->n_dims != 2 || t->ne[0] != n_in || t->ne[1] != n_out)
                return axp_errorf(c->err, -EINVAL,
                                  "%s: tensor '%s' has shape [%lld, %lld], expected [%lld, %lld]",
                                  c->file, name, (long long) t->ne[0],
                                  (long long) (t->n_dims > 1 ? t->ne[1] : 1), (long long) n_in,
                                  (long long) n_out);
        w->type = t->type;
        w->n_in = n_in;
        w->n_out = n_out;
        w->row_bytes = axp_type_row_size(t->type, n_in);
        w->data = t->data;
        return 0;
}

/* A fused matrix as n consecutive views of its rows: parts[i] gets n_out[i] rows, in order.
 * The views point into the file's mapping like any weight; each has its own name. */
static int weight_split(load_ctx *c, const char *name, int64_t n_in, int n, axp_weight *const *parts,
                        const int64_t *n_out) {
        int64_t total = 0;
        for (int i = 0; i < n; i++)
                total += n_out[i];
        axp_weight whole = { 0 };
        int r = weight(c, name, true, n_in, total, &whole);
        if (r < 0) {
                free((char *) whole.name);
                return r;
        }
        int64_t row = 0;
        for (int i = 0; i < n; i++) {
                char part[112];
                snprintf(part, sizeof(part), "%s[%" PRId64 ":%" PRId64 "]", name, row, row + n_out[i]);
                *parts[i] = whole;
                parts[i]->name = strdup(part);
                parts[i]->n_out = n_out[i];
                parts[i]->data = (const char *) whole.data + (uint64_t) row * whole.row_bytes;
                if (!parts[i]->name) {
                        free((char *) whole.name);
                        return axp_errorf(c->err, -ENOMEM, "out of memory");
                }
                row += n_out[i];
        }
        free((char *) whole.name);
        return 0;
}

/* The experts' counts and size; the tensors are checked against them in load_tensors(). */
static int load_moe_hparams(load_ctx *c) {
        axp_hparams *hp = &c->m->hp;
        int r;
        if ((r = get_dim(c, "expert_count", true, 0, &hp->n_expert)) < 0 ||
            (r = get_dim(c, "expert_used_count", true, 0, &hp->n_expert_used)) < 0 ||
            (r = get_dim(c, "expert_feed_forward_length", true, 0, &hp->n_ff_exp)) < 0)
                return r;
        if (hp->n_expert > AXP_MAX_EXPERTS)
                return axp_errorf(c->err, -ENOTSUP, "%s: %d experts per layer; agentxpu handles up to %d",
                                  c->file, hp->n_expert, AXP_MAX_EXPERTS);
        if (hp->n_expert_used > hp->n_expert)
                return axp_errorf(c->err, -EINVAL, "%s: %d experts used per token of %d", c->file,
                                  hp->n_expert_used, hp->n_expert);
        hp->expert_norm = true;
        hp->expert_scale = 1.0f;
        if (gguf_find(c->m->gguf, arch_key(c, "expert_weights_scale")))
                return get_float(c, "expert_weights_scale", 1.0f, &hp->expert_scale);
        return 0;
}

static int load_hparams(load_ctx *c) {
        axp_model *m = c->m;
        axp_hparams *hp = &m->hp;
        gguf_str arch;
        int r;

        if (!gguf_get_str(m->gguf, "general.architecture", &arch))
                return axp_errorf(c->err, -EINVAL, "%s: metadata 'general.architecture' is missing", c->file);
        int a = axp_arch_from_gguf(arch);
        if (a < 0) {
                char list[AXP_ARCH_LIST_MAX];
                return axp_errorf(c->err, -ENOTSUP, "%s: architecture '%s' is not supported (supported: %s)",
                                  c->file, GGUF_SHOW(arch), axp_arch_list(list, sizeof(list)));
        }
        hp->arch = a;
        const arch_info *ai = &archs[a];
        hp->rope_type = ai->rope_type;
        hp->ffn_act = ai->ffn_act;
        hp->post_norms = ai->post_norms;
        hp->nope_period = ai->nope_period;
        hp->qk_norm_full = ai->post_only;

        if ((r = get_dim(c, "embedding_length", true, 0, &hp->n_embd)) < 0 ||
            (r = get_dim(c, "block_count", true, 0, &hp->n_layer)) < 0 ||
            (r = get_dim(c, "feed_forward_length", true, 0, &hp->n_ff)) < 0 ||
            (r = get_dim(c, "attention.head_count", true, 0, &hp->n_head)) < 0 ||
            (r = get_dim(c, "attention.head_count_kv", false, hp->n_head, &hp->n_head_kv)) < 0 ||
            (r = get_dim(c, "context_length", false, 4096, &hp->n_ctx_train)) < 0)
                return r;
        if (hp->n_embd % hp->n_head != 0 && !gguf_find(m->gguf, arch_key(c, "attention.key_length")))
                return axp_errorf(c->err, -EINVAL, "%s: embedding length %d is not a multiple of %d heads",
                                  c->file, hp->n_embd, hp->n_head);
        if ((r = get_dim(c, "attention.key_length", false, hp->n_embd / MAX(hp->n_head, 1), &hp->head_dim)) < 0)
                return r;
        int v_len;
        if ((r = get_dim(c, "attention.value_length", false, hp->head_dim, &v_len)) < 0)
                return r;
        if (v_len != hp->head_dim)
                return axp_errorf(c->err, -ENOTSUP, "%s: key length %d differs from value length %d",
                                  c->file, hp->head_dim, v_len);
        if (hp->n_head_kv > hp->n_head || hp->n_head % hp->n_head_kv != 0)
                return axp_errorf(c->err, -EINVAL, "%s: %d heads cannot share %d KV heads", c->file,
                                  hp->n_head, hp->n_head_kv);
        if (hp->head_dim % 2 != 0 || hp->head_dim > 1024)
                return axp_errorf(c->err, -EINVAL, "%s: head size %d is not supported", c->file, hp->head_dim);
        if ((r = get_dim(c, "rope.dimension_count", false, hp->head_dim, &hp->rope_dim)) < 0)
                return r;
        if (hp->rope_dim > hp->head_dim || hp->rope_dim % 2 != 0)
                return axp_errorf(c->err, -EINVAL, "%s: rope dimension %d does not fit head size %d",
                                  c->file, hp->rope_dim, hp->head_dim);
        if ((r = get_float(c, "rope.freq_base", ai->rope_base, &hp->rope_base)) < 0 ||
            (r = get_float(c, "attention.layer_norm_rms_epsilon", 1e-6f, &hp->rms_eps)) < 0)
                return r;
        /* the float32 square root, as llama.cpp scales */
        hp->embd_scale = ai->scaled_embd ? sqrtf((float) hp->n_embd) : 1.0f;
        hp->attn_scale = 1.0f / sqrtf((float) hp->head_dim);
        /* Gemma 3 27B (62 layers) and Gemma 2 27B (46) scale by the query's width per head
         * instead, as llama.cpp does */
        if ((hp->arch == AXP_ARCH_GEMMA3 && hp->n_layer == 62) || (hp->arch == AXP_ARCH_GEMMA2 && hp->n_layer == 46))
                hp->attn_scale = 1.0f / sqrtf((float) (hp->n_embd / hp->n_head));
        hp->residual_scale = hp->logit_scale = 1.0f;
        if (ai->scales && (r = load_scales(c)) < 0)
                return r;
        if (ai->softcap &&
            ((r = get_float(c, "attn_logit_softcapping", 50.0f, &hp->attn_softcap)) < 0 ||
             (r = get_float(c, "final_logit_softcapping", 30.0f, &hp->final_softcap)) < 0))
                return r;

        /* sliding-window attention where the architecture has local layers and the file (or
         * the architecture) a window */
        bool has_swa = ai->swa_period >= 0 && gguf_find(m->gguf, arch_key(c, "attention.sliding_window"));
        if (has_swa || ai->swa_default > 0) {
                if (!has_swa)
                        hp->n_swa = ai->swa_default;
                else if ((r = get_dim(c, "attention.sliding_window", true, 0, &hp->n_swa)) < 0)
                        return r;
                /* a window past the context the file was trained for: its numbers disagree */
                else if (hp->n_swa > hp->n_ctx_train)
                        return axp_errorf(c->err, -EINVAL, "%s: sliding window %d is longer than the context (%d)",
                                          c->file, hp->n_swa, hp->n_ctx_train);
                hp->swa_period = ai->swa_period;
                if (gguf_find(m->gguf, arch_key(c, "attention.sliding_window_pattern"))) {
                        uint32_t period;
                        if (!gguf_get_u32(m->gguf, arch_key(c, "attention.sliding_window_pattern"), &period) ||
                            period > (uint32_t) hp->n_layer)
                                return axp_errorf(c->err, -ENOTSUP,
                                                  "%s: metadata '%s' is not a layer period agentxpu understands",
                                                  c->file, c->key);
                        hp->swa_period = (int) period;
                }
                if ((r = get_float(c, "rope.freq_base_swa", ai->rope_base_swa > 0 ? ai->rope_base_swa : hp->rope_base,
                                   &hp->rope_base_swa)) < 0)
                        return r;
        }
        if (hp->rope_base_swa == 0)
                hp->rope_base_swa = hp->rope_base;

        /* an embedding model's pooling (llama.cpp's numbers: 0 none, 1 mean, 2 cls, 3 last, 4
         * rank); none, or no key, is a chat model's: its embeddings pool the mean. A
         * reranker's (or a later kind) still loads and generates; its embeddings are refused. */
        hp->pooling = AXP_POOLING_MEAN;
        if (gguf_find(m->gguf, arch_key(c, "pooling_type"))) {
                uint32_t pt;
                if (!gguf_get_u32(m->gguf, c->key, &pt))
                        return axp_errorf(c->err, -EINVAL, "%s: metadata '%s' is not an unsigned integer",
                                          c->file, c->key);
                hp->pooling = pt == 0 ? AXP_POOLING_MEAN : pt <= 3 ? (enum axp_pooling) pt : AXP_POOLING_OTHER;
        }

        gguf_str scaling;
        if (gguf_get_str(m->gguf, arch_key(c, "rope.scaling.type"), &scaling) &&
            !gguf_str_eq(scaling, "none")) {
                float factor = 1.0f;
                bool yarn = gguf_str_eq(scaling, "yarn");
                if (!yarn && !gguf_str_eq(scaling, "linear"))
                        return axp_errorf(c->err, -ENOTSUP, "%s: rope scaling '%s' is not supported (linear, yarn)",
                                          c->file, GGUF_SHOW(scaling));
                if (gguf_get_f32(m->gguf, arch_key(c, "rope.scaling.factor"), &factor) && factor > 1.0f) {
                        if (!(factor <= 1024))
                                return axp_errorf(c->err, -EINVAL, "%s: metadata '%s' = %g is out of range",
                                                  c->file, c->key, (double) factor);
                        hp->rope_scale = 1.0f / factor;
                        hp->rope_yarn = yarn;
                }
        }
        if (hp->rope_scale == 0)
                hp->rope_scale = 1.0f;
        /* llama.cpp's sliding-window layers take their own scale, 1 unless the architecture
         * sets it (gemma2: the same as the others) */
        hp->rope_scale_swa = ai->swa_scaled ? hp->rope_scale : 1.0f;
        if ((r = get_dim(c, "rope.scaling.original_context_length", false, hp->n_ctx_train, &hp->n_ctx_orig)) < 0 ||
            (r = get_float(c, "rope.scaling.attn_factor", 1.0f, &hp->rope_attn_factor)) < 0)
                return r;
        if (!(hp->rope_attn_factor > 0 && hp->rope_attn_factor <= 16))
                return axp_errorf(c->err, -EINVAL, "%s: rope.scaling.attn_factor %g is out of range (0, 16]", c->file,
                                  (double) hp->rope_attn_factor);
        float beta_fast = 32.0f, beta_slow = 1.0f; /* llama.cpp's, where it reads no key */
        if (ai->yarn_keys) {
                if ((r = get_float(c, "rope.scaling.yarn_beta_fast", beta_fast, &beta_fast)) < 0 ||
                    (r = get_float(c, "rope.scaling.yarn_beta_slow", beta_slow, &beta_slow)) < 0 ||
                    (r = get_scale(c, "rope.scaling.yarn_log_multiplier", &hp->yarn_log_mul)) < 0 ||
                    (r = get_scale(c, "attention.temperature_scale", &hp->attn_temp_scale)) < 0)
                        return r;
        }
        if (hp->rope_yarn) {
                yarn_corr(hp, hp->rope_base, beta_fast, beta_slow, hp->yarn_corr[0]);
                yarn_corr(hp, hp->rope_base_swa, beta_fast, beta_slow, hp->yarn_corr[1]);
        }
        return ai->moe ? load_moe_hparams(c) : 0;
}

/* A stacked expert tensor [n_in, n_out, n_expert] as n_expert matrices viewing its slices. */
static int weight_experts(load_ctx *c, const char *name, int64_t n_in, int64_t n_out, axp_weight **ret) {
        const axp_hparams *hp = &c->m->hp;
        const gguf_tensor *t = NULL;
        int r = find(c, name, true, &t);
        if (r < 0)
                return r;
        const axp_type_traits *tt = axp_type_traits_get(t->type);
        if (!tt->supported)
                return axp_errorf(c->err, -ENOTSUP, "%s: tensor '%s' has type %s, which agentxpu cannot compute with",
                                  c->file, name, tt->name);
        if (t->n_dims != 3 || t->ne[0] != n_in || t->ne[1] != n_out || t->ne[2] != hp->n_expert)
                return axp_errorf(c->err, -EINVAL,
                                  "%s: tensor '%s' has shape [%lld, %lld, %lld], expected [%lld, %lld, %d]",
                                  c->file, name, (long long) t->ne[0], (long long) t->ne[1],
                                  (long long) t->ne[2], (long long) n_in, (long long) n_out, hp->n_expert);
        axp_weight *w = calloc((size_t) hp->n_expert, sizeof(axp_weight));
        if (!w)
                return axp_errorf(c->err, -ENOMEM, "out of memory");
        *ret = w;
        const uint64_t row_bytes = axp_type_row_size(t->type, n_in);
        for (int e = 0; e < hp->n_expert; e++) {
                char part[112];
                snprintf(part, sizeof(part), "%s[%d]", name, e);
                w[e] = (axp_weight) { .type = t->type, .n_in = n_in, .n_out = n_out, .row_bytes = row_bytes,
                                      .data = (const char *) t->data + (uint64_t) e * n_out * row_bytes };
                if (!(w[e].name = strdup(part)))
                        return axp_errorf(c->err, -ENOMEM, "out of memory");
        }
        return 0;
}

/* A mixture-of-experts layer's FFN: the router and the three stacked expert tensors. */
static int load_experts(load_ctx *c, int i, axp_layer *l) {
        const axp_hparams *hp = &c->m->hp;
        const int64_t d = hp->n_embd, ff = hp->n_ff_exp;
        char name[96];
        int r;
        snprintf(name, sizeof(name), "blk.%d.ffn_gate_inp.weight", i);
        if ((r = weight(c, name, true, d, hp->n_expert, &l->ffn_router)) < 0)
                return r;
        if (l->ffn_router.type != AXP_TYPE_F32)
                return axp_errorf(c->err, -ENOTSUP, "%s: tensor '%s' has type %s, expected F32", c->file, name,
                                  axp_type_traits_get(l->ffn_router.type)->name);
        snprintf(name, sizeof(name), "blk.%d.ffn_gate_exps.weight", i);
        if ((r = weight_experts(c, name, d, ff, &l->exp_gate)) < 0)
                return r;
        snprintf(name, sizeof(name), "blk.%d.ffn_up_exps.weight", i);
        if ((r = weight_experts(c, name, d, ff, &l->exp_up)) < 0)
                return r;
        snprintf(name, sizeof(name), "blk.%d.ffn_down_exps.weight", i);
        return weight_experts(c, name, ff, d, &l->exp_down);
}

static int load_tensors(load_ctx *c) {
        axp_model *m = c->m;
        axp_hparams *hp = &m->hp;
        const int64_t d = hp->n_embd, qd = (int64_t) hp->n_head * hp->head_dim,
                      kvd = (int64_t) hp->n_head_kv * hp->head_dim;
        char name[96];
        int r;

        const gguf_tensor *te = NULL;
        if ((r = find(c, "token_embd.weight", true, &te)) < 0)
                return r;
        if (te->n_dims != 2 || te->ne[0] != d)
                return axp_errorf(c->err, -EINVAL, "%s: tensor 'token_embd.weight' has row length %lld, expected %lld",
                                  c->file, (long long) te->ne[0], (long long) d);
        hp->n_vocab = (int) te->ne[1];
        if (te->ne[1] > (1 << 24))
                return axp_errorf(c->err, -EINVAL, "%s: vocabulary of %lld tokens is too large", c->file,
                                  (long long) te->ne[1]);
        if ((r = weight(c, "token_embd.weight", true, d, hp->n_vocab, &m->tok_embd)) < 0 ||
            (r = weight(c, "output_norm.weight", true, d, 0, &m->output_norm)) < 0 ||
            (r = weight(c, "output.weight", false, d, hp->n_vocab, &m->output)) < 0)
                return r;
        hp->tied_output = m->output.data == NULL;
        if (hp->tied_output) {
                m->output = m->tok_embd;
                m->output.name = NULL; /* borrowed: freed with tok_embd */
        }
        if ((r = weight(c, "rope_freqs.weight", false, hp->rope_dim / 2, 0, &m->rope_freqs)) < 0)
                return r;

        /* LongRoPE (Phi-3.5, Phi-4-mini): two sets of divisors, both or neither */
        if ((r = weight(c, "rope_factors_long.weight", false, hp->rope_dim / 2, 0, &m->rope_long)) < 0 ||
            (r = weight(c, "rope_factors_short.weight", false, hp->rope_dim / 2, 0, &m->rope_short)) < 0)
                return r;
        if (!m->rope_long.data != !m->rope_short.data)
                return axp_errorf(c->err, -EINVAL, "%s: tensor '%s' is missing (LongRoPE needs both sets of factors)",
                                  c->file, m->rope_long.data ? "rope_factors_short.weight" : "rope_factors_long.weight");
        if (m->rope_long.data && m->rope_freqs.data)
                return axp_errorf(c->err, -EINVAL, "%s: both rope_freqs and LongRoPE factors: which apply is not defined",
                                  c->file);
        const axp_weight *divs[] = { &m->rope_freqs, &m->rope_long, &m->rope_short };
        for (size_t k = 0; k < ELEMENTSOF(divs); k++)
                for (int i = 0; divs[k]->data && i < hp->rope_dim / 2; i++) {
                        float f = ((const float *) divs[k]->data)[i];
                        if (!(f > 0) || !isfinite(f))
                                return axp_errorf(c->err, -EINVAL, "%s: tensor '%s' holds %g at %d: a frequency divisor must be positive",
                                                  c->file, divs[k]->name, (double) f, i);
                }
        axp_model_set_context(m, MIN(hp->n_ctx_train, AXP_MODEL_DEFAULT_CTX));

        /* every block has tensors of its own: a block_count past the file's tensors is
         * refused before the layer table it would size is allocated */
        if ((uint64_t) hp->n_layer > m->gguf->n_tensors)
                return axp_errorf(c->err, -EINVAL, "%s: block_count %d but the file holds only %llu tensors",
                                  c->file, hp->n_layer, (unsigned long long) m->gguf->n_tensors);
        m->layers = calloc((size_t) hp->n_layer, sizeof(axp_layer));
        if (!m->layers)
                return axp_errorf(c->err, -ENOMEM, "out of memory");
        const arch_info *ai = &archs[hp->arch];
        for (int i = 0; i < hp->n_layer; i++) {
                axp_layer *l = &m->layers[i];
#define LNAME(suffix) snprintf(name, sizeof(name), "blk.%d.%s", i, suffix)
#define W(field, suffix, req, nin, nout)                                                           \
        do {                                                                                       \
                LNAME(suffix);                                                                     \
                if ((r = weight(c, name, req, nin, nout, &l->field)) < 0)                          \
                        return r;                                                                  \
        } while (0)
                W(attn_norm, "attn_norm.weight", !ai->post_only, d, 0);
                /* phi3: Q, K and V as one matrix, rows Q then K then V: three views of it */
                LNAME("attn_qkv.weight");
                if (ai->fused && gguf_find_tensor(m->gguf, name)) {
                        axp_weight *parts[3] = { &l->wq, &l->wk, &l->wv };
                        const int64_t n_out[3] = { qd, kvd, kvd };
                        if ((r = weight_split(c, name, d, 3, parts, n_out)) < 0)
                                return r;
                } else {
                        W(wq, "attn_q.weight", true, d, qd);
                        W(wk, "attn_k.weight", true, d, kvd);
                        W(wv, "attn_v.weight", true, d, kvd);
                }
                W(wo, "attn_output.weight", true, qd, d);
                W(bq, "attn_q.bias", ai->qkv_bias, qd, 0);
                W(bk, "attn_k.bias", ai->qkv_bias, kvd, 0);
                W(bv, "attn_v.bias", ai->qkv_bias, kvd, 0);
                W(q_norm, "attn_q_norm.weight", ai->qk_norm, hp->qk_norm_full ? qd : hp->head_dim, 0);
                W(k_norm, "attn_k_norm.weight", ai->qk_norm, hp->qk_norm_full ? kvd : hp->head_dim, 0);
                W(post_attn_norm, "post_attention_norm.weight", ai->post_norms, d, 0);
                W(ffn_norm, "ffn_norm.weight", !ai->post_only, d, 0);
                /* phi3: no ffn_gate, ffn_up holds the gate's rows then the up rows */
                if (ai->moe) {
                        if ((r = load_experts(c, i, l)) < 0)
                                return r;
                        continue;
                }
                LNAME("ffn_gate.weight");
                if (ai->fused && !gguf_find_tensor(m->gguf, name)) {
                        LNAME("ffn_up.weight");
                        axp_weight *parts[2] = { &l->w_gate, &l->w_up };
                        const int64_t n_out[2] = { hp->n_ff, hp->n_ff };
                        if ((r = weight_split(c, name, d, 2, parts, n_out)) < 0)
                                return r;
                } else {
                        W(w_gate, "ffn_gate.weight", true, d, hp->n_ff);
                        W(w_up, "ffn_up.weight", true, d, hp->n_ff);
                }
                W(w_down, "ffn_down.weight", true, hp->n_ff, d);
                W(post_ffn_norm, "post_ffw_norm.weight", ai->post_norms, d, 0);
#undef W
#undef LNAME
        }
        return 0;
}

static void weight_clear(axp_weight *w, bool owned_data) {
        if (owned_data)
                free((void *) w->data);
        free((char *) w->name);
}

void axp_model_free(axp_model *m) {
        if (!m)
                return;
        axp_vocab_trie_free(m->vocab_trie);
        if (m->layers) {
                for (int i = 0; i < m->hp.n_layer; i++) {
                        axp_layer *l = &m->layers[i];
                        axp_weight *vecs[] = { &l->attn_norm, &l->bq,       &l->bk,
                                               &l->bv,        &l->q_norm,   &l->k_norm,
                                               &l->ffn_norm,  &l->post_attn_norm, &l->post_ffn_norm };
                        axp_weight *mats[] = { &l->wq, &l->wk, &l->wv, &l->wo,
                                               &l->w_gate, &l->w_up, &l->w_down };
                        for (size_t j = 0; j < ELEMENTSOF(vecs); j++)
                                weight_clear(vecs[j], true);
                        for (size_t j = 0; j < ELEMENTSOF(mats); j++)
                                weight_clear(mats[j], false);
                        weight_clear(&l->ffn_router, false);
                        axp_weight *exps[] = { l->exp_gate, l->exp_up, l->exp_down };
                        for (size_t j = 0; j < ELEMENTSOF(exps); j++) {
                                for (int e = 0; exps[j] && e < m->hp.n_expert; e++)
                                        weight_clear(&exps[j][e], false);
                                free(exps[j]);
                        }
                }
                free(m->layers);
        }
        weight_clear(&m->tok_embd, false);
        if (!m->hp.tied_output)
                weight_clear(&m->output, false);
        weight_clear(&m->output_norm, true);
        weight_clear(&m->rope_freqs, true);
        weight_clear(&m->rope_long, true);
        weight_clear(&m->rope_short, true);
        axp_tokenizer_free(m->tok);
        free(m->chat_template);
        free(m->name);
        free(m->path);
        gguf_close(m->gguf);
        free(m);
}

int axp_model_load(const char *path, axp_model **ret, axp_error *err) {
        _cleanup_(axp_model_freep) axp_model *m = calloc(1, sizeof(axp_model));
        int r;

        if (!m)
                return axp_errorf(err, -ENOMEM, "out of memory");
        m->path = strdup(path);
        if (!m->path)
                return axp_errorf(err, -ENOMEM, "out of memory");
        load_ctx c = { .m = m, .err = err };
        c.file = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;

        if ((r = gguf_open(path, &m->gguf, err)) < 0)
                return r;
        /* llama.cpp's tokenizer tests ship such files: say what they are, not which tensor of
         * many is missing */
        if (m->gguf->n_tensors == 0)
                return axp_errorf(err, -EINVAL, "%s holds %s (no tensors); running it needs a model with weights",
                                  c.file, gguf_find(m->gguf, "tokenizer.ggml.model") ? "a vocabulary only" : "no model");
        if ((r = load_hparams(&c)) < 0 || (r = load_tensors(&c)) < 0)
                return r;
        if ((r = axp_tokenizer_load(m->gguf, &m->tok, err)) < 0)
                return r;
        if (axp_tokenizer_n_vocab(m->tok) > m->hp.n_vocab)
                return axp_errorf(err, -EINVAL, "%s: the tokenizer has %d tokens but the embedding only %d",
                                  c.file, axp_tokenizer_n_vocab(m->tok), m->hp.n_vocab);

        gguf_str s;
        if (gguf_get_str(m->gguf, "tokenizer.chat_template", &s) && !(m->chat_template = gguf_str_dup(s)))
                return axp_errorf(err, -ENOMEM, "out of memory");
        if (gguf_get_str(m->gguf, "general.name", &s) && s.len > 0)
                m->name = gguf_str_dup(s);
        else
                m->name = strdup(c.file);
        if (!m->name)
                return axp_errorf(err, -ENOMEM, "out of memory");
        uint32_t ft;
        m->file_type = axp_file_type_of(m->layers[0].wq.type);
        if (gguf_get_u32(m->gguf, "general.file_type", &ft) && ft <= INT32_MAX)
                m->file_type = (int) ft;

        *ret = TAKE_PTR(m);
        return 0;
}

void axp_model_set_context(axp_model *m, int n_ctx) {
        if (m->rope_long.data)
                m->rope_divisors = n_ctx > m->hp.n_ctx_orig ? m->rope_long.data : m->rope_short.data;
        else
                m->rope_divisors = m->rope_freqs.data;
}

double axp_rope_mscale(const axp_hparams *hp, bool swa) {
        const double scale = swa ? hp->rope_scale_swa : hp->rope_scale, ln = log(1.0 / scale);
        if (!hp->rope_yarn)
                return hp->rope_attn_factor;
        return hp->rope_attn_factor * (1.0 + 0.1 * ln) / (hp->yarn_log_mul > 0 ? 1.0 + 0.1 * hp->yarn_log_mul * ln : 1.0);
}

float axp_attn_temp(const axp_hparams *hp, int pos) {
        if (hp->attn_temp_scale == 0)
                return 1.0f;
        return (float) (log(floor((float) pos / (float) hp->n_ctx_orig) + 1.0) * hp->attn_temp_scale + 1.0);
}

void axp_model_finish_logits(const axp_model *m, float *logits) {
        const float cap = m->hp.final_softcap, scale = 1.0f / m->hp.logit_scale;
        if (m->hp.logit_scale != 1.0f)
                for (int i = 0; i < m->hp.n_vocab; i++)
                        logits[i] *= scale;
        if (cap > 0)
                axp_cpu_softcap(logits, m->hp.n_vocab, cap);
}

uint64_t axp_model_expert_bytes(const axp_model *m, int l) {
        const axp_layer *L = &m->layers[l];
        if (m->hp.n_expert == 0 || !L->exp_gate)
                return 0;
        return L->exp_gate[0].row_bytes * (uint64_t) L->exp_gate[0].n_out +
               L->exp_up[0].row_bytes * (uint64_t) L->exp_up[0].n_out +
               L->exp_down[0].row_bytes * (uint64_t) L->exp_down[0].n_out;
}

uint64_t axp_model_weight_bytes(const axp_model *m) {
        uint64_t total = 0;
        for (int i = 0; i < m->hp.n_layer; i++) {
                const axp_layer *l = &m->layers[i];
                const axp_weight *ws[] = { &l->wq, &l->wk, &l->wv, &l->wo, &l->w_gate, &l->w_up, &l->w_down,
                                           &l->ffn_router };
                for (size_t j = 0; j < ELEMENTSOF(ws); j++)
                        if (ws[j]->data)
                                total += ws[j]->row_bytes * (uint64_t) ws[j]->n_out;
                total += axp_model_expert_bytes(m, i) * (uint64_t) m->hp.n_expert;
        }
        return total + m->output.row_bytes * (uint64_t) m->output.n_out;
}
