/* SPDX-License-Identifier: MIT */
/* Model loading: architecture and hyperparameters from the GGUF metadata, every tensor
 * checked for presence, type and shape before the engine touches it. */
#include "model.h"
#include "grammar.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tokenizer.h"
#include "kernels/types.h"

typedef struct load_ctx {
        axp_model *m;
        const char *file; /* base name for messages */
        char key[160];
        axp_error *err;
} load_ctx;

const char *axp_arch_name(enum axp_arch a) {
        switch (a) {
        case AXP_ARCH_LLAMA:
                return "llama";
        case AXP_ARCH_QWEN2:
                return "qwen2";
        case AXP_ARCH_QWEN3:
                return "qwen3";
        }
        return "?";
}

int axp_arch_from_name(const char *name) {
        for (enum axp_arch a = AXP_ARCH_LLAMA; a <= AXP_ARCH_QWEN3; a++)
                if (strcmp(axp_arch_name(a), name) == 0)
                        return (int) a;
        return -1;
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

/* Vectors (norms, biases, rope factors) are converted to owned F32 arrays. */
static int load_vector(load_ctx *c, const gguf_tensor *t, int64_t n, axp_weight *w) {
        if (t->n_dims != 1 || t->ne[0] != n)
                return axp_errorf(c->err, -EINVAL, "%s: tensor '%.*s' has shape [%lld], expected [%lld]",
                                  c->file, (int) t->name.len, t->name.ptr, (long long) t->ne[0],
                                  (long long) n);
        if (t->type != AXP_TYPE_F32 && t->type != AXP_TYPE_F16 && t->type != AXP_TYPE_BF16)
                return axp_errorf(c->err, -EINVAL, "%s: tensor '%.*s' has type %s, expected F32, F16 or BF16",
                                  c->file, (int) t->name.len, t->name.ptr,
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
                                  "IQ4_NL, Q4_K, Q5_K, Q6_K)",
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

static int load_hparams(load_ctx *c) {
        axp_model *m = c->m;
        axp_hparams *hp = &m->hp;
        gguf_str arch;
        int r;

        if (!gguf_get_str(m->gguf, "general.architecture", &arch))
                return axp_errorf(c->err, -EINVAL, "%s: metadata 'general.architecture' is missing", c->file);
        if (gguf_str_eq(arch, "llama"))
                hp->arch = AXP_ARCH_LLAMA;
        else if (gguf_str_eq(arch, "qwen2"))
                hp->arch = AXP_ARCH_QWEN2;
        else if (gguf_str_eq(arch, "qwen3"))
                hp->arch = AXP_ARCH_QWEN3;
        else
                return axp_errorf(c->err, -ENOTSUP,
                                  "%s: architecture '%.*s' is not supported (supported: llama, qwen2, qwen3)",
                                  c->file, (int) MIN(arch.len, 64), arch.ptr);
        hp->rope_type = hp->arch == AXP_ARCH_LLAMA ? AXP_ROPE_NORM : AXP_ROPE_NEOX;

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
        if ((r = get_float(c, "rope.freq_base", hp->arch == AXP_ARCH_LLAMA ? 10000.0f : 1000000.0f,
                           &hp->rope_base)) < 0 ||
            (r = get_float(c, "attention.layer_norm_rms_epsilon", 1e-6f, &hp->rms_eps)) < 0)
                return r;

        gguf_str scaling;
        if (gguf_get_str(m->gguf, arch_key(c, "rope.scaling.type"), &scaling) &&
            !gguf_str_eq(scaling, "none")) {
                float factor = 1.0f;
                if (gguf_str_eq(scaling, "linear") &&
                    gguf_get_f32(m->gguf, arch_key(c, "rope.scaling.factor"), &factor) && factor >= 1.0f)
                        hp->rope_scale = 1.0f / factor;
                else if (!gguf_str_eq(scaling, "linear"))
                        return axp_errorf(c->err, -ENOTSUP, "%s: rope scaling '%.*s' is not supported",
                                          c->file, (int) MIN(scaling.len, 32), scaling.ptr);
        }
        if (hp->rope_scale == 0)
                hp->rope_scale = 1.0f;
        return 0;
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

        m->layers = calloc((size_t) hp->n_layer, sizeof(axp_layer));
        if (!m->layers)
                return axp_errorf(c->err, -ENOMEM, "out of memory");
        for (int i = 0; i < hp->n_layer; i++) {
                axp_layer *l = &m->layers[i];
                bool qwen3 = hp->arch == AXP_ARCH_QWEN3, qwen2 = hp->arch == AXP_ARCH_QWEN2;
#define W(field, suffix, req, nin, nout)                                                           \
        do {                                                                                       \
                snprintf(name, sizeof(name), "blk.%d.%s", i, suffix);                              \
                if ((r = weight(c, name, req, nin, nout, &l->field)) < 0)                          \
                        return r;                                                                  \
        } while (0)
                W(attn_norm, "attn_norm.weight", true, d, 0);
                W(wq, "attn_q.weight", true, d, qd);
                W(wk, "attn_k.weight", true, d, kvd);
                W(wv, "attn_v.weight", true, d, kvd);
                W(wo, "attn_output.weight", true, qd, d);
                W(bq, "attn_q.bias", qwen2, qd, 0);
                W(bk, "attn_k.bias", qwen2, kvd, 0);
                W(bv, "attn_v.bias", qwen2, kvd, 0);
                W(q_norm, "attn_q_norm.weight", qwen3, hp->head_dim, 0);
                W(k_norm, "attn_k_norm.weight", qwen3, hp->head_dim, 0);
                W(ffn_norm, "ffn_norm.weight", true, d, 0);
                W(w_gate, "ffn_gate.weight", true, d, hp->n_ff);
                W(w_up, "ffn_up.weight", true, d, hp->n_ff);
                W(w_down, "ffn_down.weight", true, hp->n_ff, d);
#undef W
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
                        axp_weight *vecs[] = { &l->attn_norm, &l->bq, &l->bk, &l->bv,
                                               &l->q_norm, &l->k_norm, &l->ffn_norm };
                        axp_weight *mats[] = { &l->wq, &l->wk, &l->wv, &l->wo,
                                               &l->w_gate, &l->w_up, &l->w_down };
                        for (size_t j = 0; j < ELEMENTSOF(vecs); j++)
                                weight_clear(vecs[j], true);
                        for (size_t j = 0; j < ELEMENTSOF(mats); j++)
                                weight_clear(mats[j], false);
                }
                free(m->layers);
        }
        weight_clear(&m->tok_embd, false);
        if (!m->hp.tied_output)
                weight_clear(&m->output, false);
        weight_clear(&m->output_norm, true);
        weight_clear(&m->rope_freqs, true);
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
        m->file_type = m->layers[0].wq.type;
        if (gguf_get_u32(m->gguf, "general.file_type", &ft))
                m->file_type = ft;

        *ret = TAKE_PTR(m);
        return 0;
}

uint64_t axp_model_weight_bytes(const axp_model *m) {
        uint64_t total = 0;
        for (int i = 0; i < m->hp.n_layer; i++) {
                const axp_layer *l = &m->layers[i];
                const axp_weight *ws[] = { &l->wq, &l->wk, &l->wv, &l->wo, &l->w_gate, &l->w_up, &l->w_down };
                for (size_t j = 0; j < ELEMENTSOF(ws); j++)
                        total += ws[j]->row_bytes * (uint64_t) ws[j]->n_out;
        }
        return total + m->output.row_bytes * (uint64_t) m->output.n_out;
}
