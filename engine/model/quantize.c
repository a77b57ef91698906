/* SPDX-License-Identifier: MIT */
/* agentxpu quantize: a GGUF model's weight matrices into another tensor type. The rows are
 * read with the reference dequantizer and written with the reference quantizer (kernels/
 * types.c) while the output file is written, a bounded number of rows at a time. Which
 * tensors are converted, and into what for the mixes, follows llama.cpp's llama-quant.cpp
 * (tensor_allows_quantization, llama_tensor_get_type_impl, tensor_type_fallback) for the
 * architectures the engine runs. */
#include "quantize.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "kernels/types.h"

/* llama_ftype values */
enum {
        FT_Q3_K_M = 12,
        FT_Q4_K_M = 15,
        FT_Q5_K_M = 17,
};

int axp_file_type_of(uint32_t type) {
        switch (type) {
        case AXP_TYPE_F32:
                return 0;
        case AXP_TYPE_F16:
                return 1;
        case AXP_TYPE_Q4_0:
                return 2;
        case AXP_TYPE_Q4_1:
                return 3;
        case AXP_TYPE_Q8_0:
                return 7;
        case AXP_TYPE_Q5_0:
                return 8;
        case AXP_TYPE_Q5_1:
                return 9;
        case AXP_TYPE_Q2_K:
                return 10;
        case AXP_TYPE_Q3_K:
                return 11; /* MOSTLY_Q3_K_S: every matrix Q3_K */
        case AXP_TYPE_Q4_K:
                return 14; /* MOSTLY_Q4_K_S */
        case AXP_TYPE_Q5_K:
                return 16; /* MOSTLY_Q5_K_S */
        case AXP_TYPE_Q6_K:
                return 18;
        case AXP_TYPE_IQ4_NL:
                return 25;
        case AXP_TYPE_IQ4_XS:
                return 30;
        case AXP_TYPE_BF16:
                return 32;
        default:
                return -1;
        }
}

const char *axp_file_type_name(int ftype) {
        static const struct {
                int ftype;
                const char *name;
        } names[] = { { 0, "F32" },     { 1, "F16" },     { 2, "Q4_0" },    { 3, "Q4_1" },
                      { 7, "Q8_0" },    { 8, "Q5_0" },    { 9, "Q5_1" },    { 10, "Q2_K" },
                      { 11, "Q3_K_S" }, { 12, "Q3_K_M" }, { 13, "Q3_K_L" }, { 14, "Q4_K_S" },
                      { 15, "Q4_K_M" }, { 16, "Q5_K_S" }, { 17, "Q5_K_M" }, { 18, "Q6_K" },
                      { 25, "IQ4_NL" }, { 30, "IQ4_XS" }, { 32, "BF16" } };
        for (size_t i = 0; i < ELEMENTSOF(names); i++)
                if (names[i].ftype == ftype)
                        return names[i].name;
        return NULL;
}

#define TARGETS "q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, iq4_xs, q2_k, q3_k, q4_k, q5_k, q6_k, f16, bf16, f32, Q3_K_M, Q4_K_M, Q5_K_M, keep"

int axp_quant_target_parse(const char *name, axp_quant_target *ret, axp_error *err) {
        static const struct {
                const char *name;
                uint32_t base;
                int ftype;
        } mixes[] = {
                { "q3_k_m", AXP_TYPE_Q3_K, FT_Q3_K_M },
                { "q4_k_m", AXP_TYPE_Q4_K, FT_Q4_K_M },
                { "q5_k_m", AXP_TYPE_Q5_K, FT_Q5_K_M },
        };
        memset(ret, 0, sizeof(*ret));
        if (!name || strlen(name) >= sizeof(ret->name))
                return axp_errorf(err, -EINVAL, "unknown type '%s' (one of " TARGETS ")", name ? name : "");
        for (size_t i = 0; name[i]; i++)
                ret->name[i] = (char) toupper((unsigned char) name[i]);
        if (strcasecmp(name, "keep") == 0) {
                ret->keep = true;
                return 0;
        }
        for (size_t i = 0; i < ELEMENTSOF(mixes); i++)
                if (strcasecmp(name, mixes[i].name) == 0) {
                        ret->base = mixes[i].base;
                        ret->mix = mixes[i].ftype;
                        ret->file_type = mixes[i].ftype;
                        return 0;
                }
        int t = axp_type_from_name(name);
        if (t < 0 || axp_file_type_of((uint32_t) t) < 0 || !axp_type_traits_get((uint32_t) t)->supported)
                return axp_errorf(err, -EINVAL, "unknown type '%s' (one of " TARGETS ")", name);
        ret->base = (uint32_t) t;
        ret->file_type = axp_file_type_of((uint32_t) t);
        return 0;
}

static bool contains(gguf_str s, const char *needle) {
        size_t n = strlen(needle);
        for (uint64_t i = 0; i + n <= s.len; i++)
                if (memcmp(s.ptr + i, needle, n) == 0)
                        return true;
        return false;
}

static bool ends_with(gguf_str s, const char *suffix) {
        size_t n = strlen(suffix);
        return s.len >= n && memcmp(s.ptr + s.len - n, suffix, n) == 0;
}

/* llama-quantize's tensor_allows_quantization, for the tensors our architectures have */
static bool quantizable(const gguf_tensor *t) {
        uint32_t dims = t->n_dims;
        while (dims > 1 && t->ne[dims - 1] == 1)
                dims--;
        return dims >= 2 && ends_with(t->name, "weight") && !contains(t->name, "_norm.weight") &&
               !contains(t->name, "ffn_gate_inp.weight") && !gguf_str_eq(t->name, "position_embd.weight") &&
               !gguf_str_eq(t->name, "token_types.weight");
}

enum cat { C_OTHER, C_OUTPUT, C_TOKEN_EMBD, C_ATTN_V, C_ATTN_K, C_ATTN_Q, C_ATTN_OUT, C_FFN_UP, C_FFN_GATE, C_FFN_DOWN };

/* llama-quantize's tensor_get_category (attn_qkv and attn_kv_b count as attn_v, as its
 * category_is_attn_v takes them) */
static enum cat category(gguf_str name) {
        if (gguf_str_eq(name, "output.weight"))
                return C_OUTPUT;
        if (gguf_str_eq(name, "token_embd.weight") || gguf_str_eq(name, "per_layer_token_embd.weight"))
                return C_TOKEN_EMBD;
        if (contains(name, "attn_qkv.weight") || contains(name, "attn_kv_b.weight") || contains(name, "attn_v.weight"))
                return C_ATTN_V;
        if (contains(name, "attn_k.weight"))
                return C_ATTN_K;
        if (contains(name, "attn_q.weight"))
                return C_ATTN_Q;
        if (contains(name, "attn_output.weight"))
                return C_ATTN_OUT;
        if (contains(name, "ffn_up"))
                return C_FFN_UP;
        if (contains(name, "ffn_gate"))
                return C_FFN_GATE;
        if (contains(name, "ffn_down"))
                return C_FFN_DOWN;
        return C_OTHER;
}

static bool use_more_bits(int i_layer, int n_layer) {
        return i_layer < n_layer / 8 || i_layer >= 7 * n_layer / 8 || (i_layer - n_layer / 8) % 3 == 2;
}

/* tensor_type_fallback */
static uint32_t fallback(uint32_t type, int64_t ncols) {
        if (ncols % axp_type_traits_get(type)->blck == 0)
                return type;
        switch (type) {
        case AXP_TYPE_IQ4_XS:
                type = AXP_TYPE_IQ4_NL;
                break;
        case AXP_TYPE_Q2_K:
        case AXP_TYPE_Q3_K:
                type = AXP_TYPE_Q4_0;
                break;
        case AXP_TYPE_Q4_K:
                type = AXP_TYPE_Q5_0;
                break;
        case AXP_TYPE_Q5_K:
                type = AXP_TYPE_Q5_1;
                break;
        case AXP_TYPE_Q6_K:
                type = AXP_TYPE_Q8_0;
                break;
        default:
                break;
        }
        return ncols % axp_type_traits_get(type)->blck == 0 ? type : AXP_TYPE_F16;
}

/* An integer hyperparameter "ARCH.key" of the file, or def. */
static int64_t arch_u32(const gguf_file *f, const char *key, int64_t def) {
        gguf_str arch;
        char k[128];
        uint32_t v;
        if (!gguf_get_str(f, "general.architecture", &arch) || arch.len > 64)
                return def;
        snprintf(k, sizeof(k), "%.*s.%s", (int) arch.len, arch.ptr, key);
        return gguf_get_u32(f, k, &v) ? v : def;
}

int axp_quant_plan(const gguf_file *f, const axp_quant_target *t, uint32_t *types, axp_error *err) {
        int n_attention_wv = 0, i_attention_wv = 0, i_ffn_down = 0;
        bool tied = true;
        for (uint64_t i = 0; i < f->n_tensors; i++) {
                enum cat c = category(f->tensors[i].name);
                n_attention_wv += c == C_ATTN_V;
                tied &= c != C_OUTPUT;
        }
        int n_layer = (int) arch_u32(f, "block_count", 0);
        int n_expert = (int) MAX(1, arch_u32(f, "expert_count", 1));
        for (uint64_t i = 0; i < f->n_tensors; i++) {
                const gguf_tensor *ts = &f->tensors[i];
                types[i] = ts->type;
                if (t->keep || !quantizable(ts))
                        continue;
                uint32_t nt = t->base;
                enum cat c = category(ts->name);
                int ftype = t->mix;
                if (ftype && (c == C_OUTPUT || (tied && c == C_TOKEN_EMBD))) {
                        if (ts->ne[0] % axp_type_traits_get(nt)->blck != 0)
                                nt = AXP_TYPE_Q8_0;
                        else if (nt != AXP_TYPE_Q8_0)
                                nt = AXP_TYPE_Q6_K;
                } else if (ftype && c == C_ATTN_V) {
                        if (ftype == FT_Q3_K_M)
                                nt = i_attention_wv < 2 ? AXP_TYPE_Q5_K : AXP_TYPE_Q4_K;
                        else if (use_more_bits(i_attention_wv, n_attention_wv))
                                nt = AXP_TYPE_Q6_K;
                        if (n_expert == 8)
                                nt = AXP_TYPE_Q8_0;
                        i_attention_wv++;
                } else if (ftype && c == C_ATTN_K) {
                        if (n_expert == 8)
                                nt = AXP_TYPE_Q8_0;
                } else if (ftype && c == C_FFN_DOWN) {
                        int i_layer = i_ffn_down;
                        if (n_expert > 1) { /* experts' tensors need not come in layer order */
                                _cleanup_free_ char *name = gguf_str_dup(ts->name);
                                if (!name)
                                        return axp_errorf(err, -ENOMEM, "out of memory");
                                if (sscanf(name, "blk.%d.", &i_layer) != 1 || i_layer < 0 || i_layer >= n_layer)
                                        return axp_errorf(err, -EINVAL, "cannot tell the layer of tensor '%.96s'", name);
                        }
                        if (ftype == FT_Q3_K_M)
                                nt = i_layer < n_layer / 16 ? AXP_TYPE_Q5_K : AXP_TYPE_Q4_K;
                        else if (use_more_bits(i_layer, n_layer))
                                nt = AXP_TYPE_Q6_K;
                        i_ffn_down++;
                } else if (ftype && c == C_ATTN_OUT) {
                        if (n_expert == 8 && (ftype == FT_Q3_K_M || ftype == FT_Q4_K_M))
                                nt = AXP_TYPE_Q5_K;
                        else if (n_expert != 8 && ftype == FT_Q3_K_M)
                                nt = AXP_TYPE_Q4_K;
                }
                nt = fallback(nt, ts->ne[0]);
                const axp_type_traits *tr = axp_type_traits_get(ts->type);
                if (nt != ts->type && (!tr || !tr->supported))
                        return axp_errorf(err, -ENOTSUP, "tensor '%s' has type %s, which agentxpu cannot read",
                                          GGUF_SHOW(ts->name), tr ? tr->name : "unknown");
                types[i] = nt;
        }
        return 0;
}

/* Writing ----------------------------------------------------------------------------------- */

typedef struct conv {
        const gguf_tensor *t;
        uint32_t to;
        int n_threads;
} conv;

typedef struct conv_job {
        const conv *c;
        uint64_t row, n_rows;
        uint8_t *dst;
        int ret;
} conv_job;

static void *conv_rows(void *arg) {
        conv_job *j = arg;
        const gguf_tensor *t = j->c->t;
        int64_t n = t->ne[0];
        uint64_t sb = axp_type_row_size(t->type, n), db = axp_type_row_size(j->c->to, n);
        float *x = malloc((size_t) n * sizeof(float));
        if (!x) {
                j->ret = -ENOMEM;
                return NULL;
        }
        for (uint64_t r = 0; r < j->n_rows; r++) {
                axp_dequantize_row(t->type, (const uint8_t *) t->data + (j->row + r) * sb, x, n);
                axp_quantize_row(j->c->to, x, j->dst + r * db, n);
        }
        free(x);
        return NULL;
}

static int fill(void *userdata, uint64_t row, uint64_t n_rows, void *dst, axp_error *err) {
        const conv *c = userdata;
        const gguf_tensor *t = c->t;
        uint64_t sb = axp_type_row_size(t->type, t->ne[0]);
        if (c->to == t->type) {
                memcpy(dst, (const uint8_t *) t->data + row * sb, n_rows * sb);
                return 0;
        }
        int nt = (int) MIN((uint64_t) c->n_threads, n_rows);
        conv_job jobs[64];
        pthread_t th[64];
        bool started[64] = { false };
        nt = MAX(1, MIN(nt, 64));
        uint64_t db = axp_type_row_size(c->to, t->ne[0]), per = n_rows / (uint64_t) nt, extra = n_rows % (uint64_t) nt;
        uint64_t r = row;
        for (int i = 0; i < nt; i++) {
                uint64_t k = per + ((uint64_t) i < extra);
                jobs[i] = (conv_job) { .c = c, .row = r, .n_rows = k, .dst = (uint8_t *) dst + (r - row) * db };
                r += k;
                if (i > 0)
                        started[i] = pthread_create(&th[i], NULL, conv_rows, &jobs[i]) == 0;
        }
        conv_rows(&jobs[0]);
        int ret = jobs[0].ret;
        for (int i = 1; i < nt; i++) {
                if (started[i])
                        pthread_join(th[i], NULL);
                else
                        conv_rows(&jobs[i]);
                if (jobs[i].ret < 0)
                        ret = jobs[i].ret;
        }
        if (ret < 0)
                return axp_errorf(err, ret, "out of memory converting '%s'", GGUF_SHOW(t->name));
        return 0;
}

int axp_quantize_file(const char *in, const char *out, const axp_quant_target *t, int n_threads,
                      axp_error *err) {
        _cleanup_(gguf_closep) gguf_file *f = NULL;
        int k = gguf_open(in, &f, err);
        if (k < 0)
                return k;
        if (n_threads <= 0)
                n_threads = (int) MAX(1, sysconf(_SC_NPROCESSORS_ONLN));
        _cleanup_free_ uint32_t *types = calloc(MAX(f->n_tensors, 1), sizeof(*types));
        _cleanup_free_ conv *convs = calloc(MAX(f->n_tensors, 1), sizeof(*convs));
        if (!types || !convs)
                return axp_errorf(err, -ENOMEM, "out of memory");
        k = axp_quant_plan(f, t, types, err);
        if (k < 0)
                return axp_errorf(err, k, "%s: %s", in, err->msg);

        gguf_writer *w = gguf_writer_new();
        if (!w)
                return axp_errorf(err, -ENOMEM, "out of memory");
        /* one file out, whole: a split model's parts' keys stay behind */
        for (uint64_t i = 0; i < f->n_kv; i++) {
                const gguf_kv *kv = &f->kv[i];
                if (gguf_split_key(kv->key))
                        continue;
                if (!t->keep && (gguf_str_eq(kv->key, "general.file_type") ||
                                 gguf_str_eq(kv->key, "general.quantization_version")))
                        continue;
                gguf_writer_copy_kv(w, kv);
        }
        if (!t->keep) {
                gguf_writer_set_u32(w, "general.file_type", (uint32_t) t->file_type);
                gguf_writer_set_u32(w, "general.quantization_version", 2);
        }
        for (uint64_t i = 0; i < f->n_tensors; i++) {
                const gguf_tensor *ts = &f->tensors[i];
                convs[i] = (conv) { .t = ts, .to = types[i], .n_threads = n_threads };
                _cleanup_free_ char *name = gguf_str_dup(ts->name);
                if (!name) {
                        gguf_writer_free(w);
                        return axp_errorf(err, -ENOMEM, "out of memory");
                }
                gguf_writer_add_tensor_fill(w, name, types[i], ts->n_dims, ts->ne, fill, &convs[i]);
        }
        k = gguf_writer_write(w, out, err);
        gguf_writer_free(w);
        return k;
}
