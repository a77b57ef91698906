/* SPDX-License-Identifier: MIT */
/* Synthetic models: every arch × type reads back with the keys, tensor names, shapes and
 * types llama.cpp expects; the bytes depend only on the seed; the weights have the intended
 * statistics; the built-in vocabulary is a consistent byte-level BPE vocabulary. */
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/gguf.h"
#include "mkmodel.h"
#include "test.h"
#include "kernels/types.h"

static char tmpdir[64];

static const char *tmp_path(const char *name) {
        static char buf[2][256];
        static int which;
        char *b = buf[which ^= 1];
        if (!tmpdir[0]) {
                snprintf(tmpdir, sizeof(tmpdir), "/tmp/test-mkmodel-XXXXXX");
                if (!mkdtemp(tmpdir))
                        abort();
        }
        snprintf(b, sizeof(buf[0]), "%s/%s", tmpdir, name);
        return b;
}

static const uint32_t all_types[] = { AXP_TYPE_F32,  AXP_TYPE_F16,  AXP_TYPE_BF16, AXP_TYPE_Q8_0,
                                      AXP_TYPE_Q4_0, AXP_TYPE_Q4_K, AXP_TYPE_Q6_K, AXP_TYPE_Q4_1,
                                      AXP_TYPE_Q5_0, AXP_TYPE_Q5_1, AXP_TYPE_IQ4_NL, AXP_TYPE_Q5_K };

static gguf_file *make(const axp_mkmodel_params *p) {
        axp_error err = { 0 };
        gguf_file *f = NULL;
        int k = axp_mkmodel(p, &err);
        CHECK_MSG(k == 0, "%s", err.msg);
        if (k < 0)
                return NULL;
        k = gguf_open(p->path, &f, &err);
        CHECK_MSG(k == 0, "%s", err.msg);
        return f;
}

static bool str_is(gguf_str s, const char *c) {
        return gguf_str_eq(s, c);
}

static uint32_t get_u32(const gguf_file *f, const char *arch, const char *suffix) {
        char key[128];
        uint32_t v = UINT32_MAX;
        snprintf(key, sizeof(key), "%s.%s", arch, suffix);
        CHECK_MSG(gguf_get_u32(f, key, &v), "%s missing", key);
        return v;
}

static void check_tensor(const gguf_file *f, const char *name, uint32_t type, int64_t ne0, int64_t ne1) {
        const gguf_tensor *t = gguf_find_tensor(f, name);
        CHECK_MSG(t != NULL, "tensor %s missing", name);
        if (!t)
                return;
        CHECK_MSG(t->type == type, "%s: type %u, expected %u", name, t->type, type);
        CHECK_MSG(t->ne[0] == ne0 && t->ne[1] == ne1, "%s: [%lld, %lld], expected [%lld, %lld]", name,
                  (long long) t->ne[0], (long long) t->ne[1], (long long) ne0, (long long) ne1);
        CHECK_EQ_INT(t->n_dims, ne1 > 1 ? 2 : 1);
}

/* Everything llama.cpp's loader reads for these archs is there, named and shaped as it
 * expects; tensors are laid out as its gguf reader requires. */
static void check_model(const gguf_file *f, const axp_mkmodel_params *p, int head_dim) {
        const char *arch = axp_arch_name(p->arch);
        const gguf_kv *tok;
        gguf_str s;
        float x;
        uint32_t ft, u;
        char name[64];
        int64_t q = (int64_t) p->n_head * head_dim, kv = (int64_t) p->n_head_kv * head_dim;
        uint64_t n_tensors = 3 + (uint64_t) p->n_layer * 9 - p->tied, expect = 0;

        CHECK(gguf_get_str(f, "general.architecture", &s) && str_is(s, arch));
        CHECK(gguf_get_str(f, "general.name", &s) && s.len > 0);
        CHECK(gguf_get_u32(f, "general.file_type", &ft));
        CHECK_EQ_INT(get_u32(f, arch, "context_length"), p->n_ctx);
        CHECK_EQ_INT(get_u32(f, arch, "embedding_length"), p->n_embd);
        CHECK_EQ_INT(get_u32(f, arch, "block_count"), p->n_layer);
        CHECK_EQ_INT(get_u32(f, arch, "feed_forward_length"), p->n_ff);
        CHECK_EQ_INT(get_u32(f, arch, "attention.head_count"), p->n_head);
        CHECK_EQ_INT(get_u32(f, arch, "attention.head_count_kv"), p->n_head_kv);
        CHECK_EQ_INT(get_u32(f, arch, "rope.dimension_count"), head_dim);
        if (p->arch == AXP_ARCH_QWEN3 || head_dim * p->n_head != p->n_embd) {
                CHECK_EQ_INT(get_u32(f, arch, "attention.key_length"), head_dim);
                CHECK_EQ_INT(get_u32(f, arch, "attention.value_length"), head_dim);
        }
        snprintf(name, sizeof(name), "%s.rope.freq_base", arch);
        CHECK(gguf_get_f32(f, name, &x) && x == (p->arch == AXP_ARCH_LLAMA ? 500000.0f : 1000000.0f));
        snprintf(name, sizeof(name), "%s.attention.layer_norm_rms_epsilon", arch);
        CHECK(gguf_get_f32(f, name, &x) && x > 0 && x <= 1e-5f);
        tok = gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING);
        CHECK(tok != NULL);
        if (!tok)
                return;
        CHECK_EQ_INT(get_u32(f, arch, "vocab_size"), tok->arr_n);
        CHECK(gguf_get_u32(f, "tokenizer.ggml.bos_token_id", &u) && u < tok->arr_n);
        CHECK(gguf_get_u32(f, "tokenizer.ggml.eos_token_id", &u) && u < tok->arr_n);

        if (p->arch == AXP_ARCH_QWEN2)
                n_tensors += 3 * (uint64_t) p->n_layer;
        if (p->arch == AXP_ARCH_QWEN3)
                n_tensors += 2 * (uint64_t) p->n_layer;
        CHECK_EQ_INT(f->n_tensors, n_tensors);
        check_tensor(f, "token_embd.weight", p->type, p->n_embd, (int64_t) tok->arr_n);
        check_tensor(f, "output_norm.weight", AXP_TYPE_F32, p->n_embd, 1);
        if (p->tied)
                CHECK(gguf_find_tensor(f, "output.weight") == NULL);
        else
                check_tensor(f, "output.weight", p->type, p->n_embd, (int64_t) tok->arr_n);
        for (int l = 0; l < p->n_layer; l++) {
#define T(what, type, ne0, ne1) (snprintf(name, sizeof(name), "blk.%d." what, l), check_tensor(f, name, type, ne0, ne1))
                T("attn_norm.weight", AXP_TYPE_F32, p->n_embd, 1);
                T("attn_q.weight", p->type, p->n_embd, q);
                T("attn_k.weight", p->type, p->n_embd, kv);
                T("attn_v.weight", p->type, p->n_embd, kv);
                T("attn_output.weight", p->type, q, p->n_embd);
                T("ffn_norm.weight", AXP_TYPE_F32, p->n_embd, 1);
                T("ffn_gate.weight", p->type, p->n_embd, p->n_ff);
                T("ffn_up.weight", p->type, p->n_embd, p->n_ff);
                T("ffn_down.weight", p->type, p->n_ff, p->n_embd);
                if (p->arch == AXP_ARCH_QWEN2) {
                        T("attn_q.bias", AXP_TYPE_F32, q, 1);
                        T("attn_k.bias", AXP_TYPE_F32, kv, 1);
                        T("attn_v.bias", AXP_TYPE_F32, kv, 1);
                } else {
                        snprintf(name, sizeof(name), "blk.%d.attn_q.bias", l);
                        CHECK(gguf_find_tensor(f, name) == NULL);
                }
                if (p->arch == AXP_ARCH_QWEN3) {
                        T("attn_q_norm.weight", AXP_TYPE_F32, head_dim, 1);
                        T("attn_k_norm.weight", AXP_TYPE_F32, head_dim, 1);
                } else {
                        snprintf(name, sizeof(name), "blk.%d.attn_q_norm.weight", l);
                        CHECK(gguf_find_tensor(f, name) == NULL);
                }
#undef T
        }
        for (uint64_t i = 0; i < f->n_tensors; i++) {
                CHECK_EQ_INT(f->tensors[i].offset, expect);
                expect = (f->tensors[i].offset + f->tensors[i].nbytes + 31) / 32 * 32;
        }
}

static void test_every_arch_and_type(void) {
        for (int a = AXP_ARCH_LLAMA; a <= AXP_ARCH_QWEN3; a++)
                for (size_t t = 0; t < ELEMENTSOF(all_types); t++) {
                        axp_mkmodel_params p;
                        gguf_file *f;
                        uint32_t ft;
                        axp_mkmodel_defaults(&p);
                        p.arch = (enum axp_arch) a;
                        p.type = all_types[t];
                        p.tied = t % 2; /* both kinds across the loop */
                        p.path = tmp_path("model.gguf");
                        f = make(&p);
                        if (!f)
                                continue;
                        check_model(f, &p, p.n_embd / p.n_head);
                        CHECK(gguf_get_u32(f, "general.file_type", &ft));
                        static const uint32_t file_types[] = { 0, 1, 32, 7, 2, 14, 18, 3, 8, 9, 25, 16 };
                        CHECK_EQ_INT(ft, file_types[t]);
                        gguf_close(f);
                }
}

static void test_head_dim_and_shape_options(void) {
        axp_mkmodel_params p;
        gguf_file *f;
        axp_mkmodel_defaults(&p);
        p.arch = AXP_ARCH_QWEN3;
        p.type = AXP_TYPE_Q6_K;
        p.n_embd = 256;
        p.n_head = 4;
        p.n_head_kv = 1;
        p.head_dim = 128; /* q is 512 wide, unlike dim */
        p.n_layer = 3;
        p.n_ff = 768;
        p.n_ctx = 4096;
        p.path = tmp_path("hd.gguf");
        f = make(&p);
        if (f)
                check_model(f, &p, 128);
        gguf_close(f);

        /* head_dim differing from dim/heads on llama writes key_length too */
        axp_mkmodel_defaults(&p);
        p.type = AXP_TYPE_F16;
        p.n_embd = 64;
        p.n_head = 2;
        p.n_head_kv = 2;
        p.head_dim = 16;
        p.n_ff = 96;
        p.path = tmp_path("hd2.gguf");
        f = make(&p);
        if (f)
                check_model(f, &p, 16);
        gguf_close(f);
}

static bool same_file(const char *a, const char *b) {
        FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
        bool same = fa && fb;
        while (same) {
                char x[65536], y[65536];
                size_t n = fread(x, 1, sizeof(x), fa), m = fread(y, 1, sizeof(y), fb);
                same = n == m && memcmp(x, y, n) == 0;
                if (n == 0)
                        break;
        }
        if (fa)
                fclose(fa);
        if (fb)
                fclose(fb);
        return same;
}

static void test_determinism(void) {
        axp_mkmodel_params p;
        axp_error err = { 0 };
        const char *a = tmp_path("a.gguf"), *b = tmp_path("b.gguf");

        axp_mkmodel_defaults(&p);
        p.arch = AXP_ARCH_QWEN2;
        p.n_ff = 256 * 3;
        p.seed = 7;
        p.n_threads = 1;
        p.path = a;
        CHECK_MSG(axp_mkmodel(&p, &err) == 0, "%s", err.msg);
        /* other thread counts split the rows differently: same bytes */
        p.n_threads = 3;
        p.path = b;
        CHECK_MSG(axp_mkmodel(&p, &err) == 0, "%s", err.msg);
        CHECK(same_file(a, b));
        p.seed = 8;
        CHECK_MSG(axp_mkmodel(&p, &err) == 0, "%s", err.msg);
        CHECK(!same_file(a, b));
        unlink(a);
        unlink(b);
}

typedef struct stats {
        double mean, std, kurtosis;
        int64_t n;
} stats;

static stats tensor_stats(const gguf_file *f, const char *name) {
        const gguf_tensor *t = gguf_find_tensor(f, name);
        stats st = { 0 };
        double s1 = 0, s2 = 0, s4 = 0;
        int64_t rows, n;
        float *row;

        CHECK_MSG(t != NULL, "tensor %s missing", name);
        if (!t)
                return st;
        rows = t->ne[1] * t->ne[2] * t->ne[3];
        row = malloc((size_t) t->ne[0] * sizeof(float));
        for (int64_t r = 0; r < rows; r++) {
                axp_dequantize_row(t->type, (const uint8_t *) t->data + r * axp_type_row_size(t->type, t->ne[0]),
                                   row, t->ne[0]);
                for (int64_t i = 0; i < t->ne[0]; i++)
                        s1 += row[i];
        }
        n = rows * t->ne[0];
        st.mean = s1 / (double) n;
        for (int64_t r = 0; r < rows; r++) {
                axp_dequantize_row(t->type, (const uint8_t *) t->data + r * axp_type_row_size(t->type, t->ne[0]),
                                   row, t->ne[0]);
                for (int64_t i = 0; i < t->ne[0]; i++) {
                        double d = row[i] - st.mean;
                        s2 += d * d;
                        s4 += d * d * d * d;
                }
        }
        st.std = sqrt(s2 / (double) n);
        st.kurtosis = (s4 / (double) n) / (st.std * st.std * st.std * st.std);
        st.n = n;
        free(row);
        return st;
}

/* token_embd N(0, 0.02²), projections N(0, 0.08²), norms 1 + 0.05·N, biases 0.02·N: checked
 * on the exact (f32) weights, and on every quantized type after dequantization. */
static void test_weight_statistics(void) {
        for (size_t t = 0; t < ELEMENTSOF(all_types); t++) {
                axp_mkmodel_params p;
                gguf_file *f;
                stats s;
                /* quantization error widens the distribution a little; 4-bit types most */
                uint32_t ty = all_types[t];
                double tol = ty == AXP_TYPE_Q4_0 || ty == AXP_TYPE_Q4_K || ty == AXP_TYPE_Q4_1 ||
                                             ty == AXP_TYPE_IQ4_NL
                                     ? 0.10
                                     : 0.03;

                axp_mkmodel_defaults(&p);
                p.arch = AXP_ARCH_QWEN2;
                p.type = all_types[t];
                p.n_layer = 1;
                p.n_ff = 1024;
                p.seed = 1234;
                p.path = tmp_path("stats.gguf");
                f = make(&p);
                if (!f)
                        continue;
                s = tensor_stats(f, "token_embd.weight");
                CHECK_NEAR(s.mean, 0.0, 0.002);
                CHECK_NEAR(s.std, 0.02, 0.02 * tol);
                s = tensor_stats(f, "blk.0.ffn_gate.weight");
                CHECK_NEAR(s.mean, 0.0, 0.002);
                CHECK_NEAR(s.std, 0.08, 0.08 * tol);
                if (all_types[t] == AXP_TYPE_F32) {
                        CHECK_NEAR(s.kurtosis, 3.0, 0.1); /* normal, not uniform (1.8) */
                        s = tensor_stats(f, "blk.0.ffn_down.weight");
                        CHECK_NEAR(s.std, 0.08, 0.08 * tol);
                }
                s = tensor_stats(f, "blk.0.attn_norm.weight");
                CHECK_NEAR(s.mean, 1.0, 0.01);
                CHECK_NEAR(s.std, 0.05, 0.01);
                s = tensor_stats(f, "blk.0.attn_q.bias");
                CHECK_NEAR(s.mean, 0.0, 0.005);
                CHECK_NEAR(s.std, 0.02, 0.004);
                gguf_close(f);
        }
}

/* The same seed gives the same underlying weights for every type: the q8_0 model is the
 * f32 model quantized. */
static void test_types_share_weights(void) {
        axp_mkmodel_params p;
        gguf_file *f32, *q8;
        axp_mkmodel_defaults(&p);
        p.type = AXP_TYPE_F32;
        p.path = tmp_path("w32.gguf");
        f32 = make(&p);
        p.type = AXP_TYPE_Q8_0;
        p.path = tmp_path("w8.gguf");
        q8 = make(&p);
        if (f32 && q8) {
                const gguf_tensor *a = gguf_find_tensor(f32, "blk.1.attn_v.weight");
                const gguf_tensor *b = gguf_find_tensor(q8, "blk.1.attn_v.weight");
                float row[256], ref[256];
                double max_err = 0;
                for (int64_t r = 0; a && b && r < a->ne[1]; r++) {
                        axp_dequantize_row(AXP_TYPE_Q8_0, (const uint8_t *) b->data + r * 272, row, 256);
                        memcpy(ref, (const float *) a->data + r * 256, sizeof(ref));
                        for (int i = 0; i < 256; i++)
                                max_err = fmax(max_err, fabs(row[i] - ref[i]));
                }
                CHECK(a && b);
                CHECK(max_err < 0.004); /* half a Q8_0 step for |w| up to ~0.4 */
                CHECK(max_err > 0);
        }
        gguf_close(f32);
        gguf_close(q8);
}

static int32_t find_token(const gguf_kv *tok, const char *text) {
        for (uint64_t i = 0; i < tok->arr_n; i++)
                if (str_is(tok->arr_str[i], text))
                        return (int32_t) i;
        return -1;
}

/* The built-in vocabulary: byte tokens in GPT-2 form, merges of existing tokens into
 * existing tokens, unique texts, control tokens for the arch's chat format. */
static void test_builtin_vocab(void) {
        for (int a = AXP_ARCH_LLAMA; a <= AXP_ARCH_QWEN2; a++) {
                axp_mkmodel_params p;
                gguf_file *f;
                const gguf_kv *tok, *types, *merges;
                gguf_str s;
                uint32_t bos, eos;
                bool add_bos;
                int dup = 0, bad_merge = 0;

                axp_mkmodel_defaults(&p);
                p.arch = (enum axp_arch) a;
                p.path = tmp_path("vocab.gguf");
                f = make(&p);
                if (!f)
                        continue;
                tok = gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING);
                types = gguf_get_arr(f, "tokenizer.ggml.token_type", GGUF_TYPE_INT32);
                merges = gguf_get_arr(f, "tokenizer.ggml.merges", GGUF_TYPE_STRING);
                CHECK(tok && types && merges && types->arr_n == tok->arr_n);
                if (!tok || !types || !merges) {
                        gguf_close(f);
                        continue;
                }
                CHECK(gguf_get_str(f, "tokenizer.ggml.model", &s) && str_is(s, "gpt2"));
                CHECK(gguf_get_str(f, "tokenizer.ggml.pre", &s) &&
                      str_is(s, a == AXP_ARCH_LLAMA ? "llama-bpe" : "qwen2"));
                CHECK(gguf_get_str(f, "tokenizer.chat_template", &s) &&
                      memmem(s.ptr, s.len, a == AXP_ARCH_LLAMA ? "<|start_header_id|>" : "<|im_start|>", 12));
                CHECK(tok->arr_n > 400 && merges->arr_n >= 200);
                /* GPT-2 byte-to-unicode: 'A' is itself, space is U+0120, newline U+010A */
                CHECK(str_is(tok->arr_str['A'], "A"));
                CHECK(str_is(tok->arr_str[' '], "\xc4\xa0"));
                CHECK(str_is(tok->arr_str['\n'], "\xc4\x8a"));
                CHECK(str_is(tok->arr_str[0xe9], "\xc3\xa9"));
                CHECK(find_token(tok, "\xc4\xa0the") > 255); /* " the" was learned */
                for (uint64_t i = 0; i < tok->arr_n; i++)
                        for (uint64_t j = i + 1; j < tok->arr_n; j++)
                                dup += tok->arr_str[i].len == tok->arr_str[j].len &&
                                       !memcmp(tok->arr_str[i].ptr, tok->arr_str[j].ptr, tok->arr_str[i].len);
                CHECK_EQ_INT(dup, 0);
                for (uint64_t m = 0; m < merges->arr_n; m++) {
                        char buf[256], *sp;
                        gguf_str ms = merges->arr_str[m];
                        if (ms.len >= sizeof(buf)) {
                                bad_merge++;
                                continue;
                        }
                        memcpy(buf, ms.ptr, ms.len);
                        buf[ms.len] = 0;
                        sp = strchr(buf, ' ');
                        if (!sp || strchr(sp + 1, ' ')) {
                                bad_merge++;
                                continue;
                        }
                        *sp = 0;
                        char joined[256];
                        snprintf(joined, sizeof(joined), "%s%s", buf, sp + 1);
                        bad_merge += find_token(tok, buf) < 0 || find_token(tok, sp + 1) < 0 ||
                                     find_token(tok, joined) < 0;
                }
                CHECK_EQ_INT(bad_merge, 0);
                CHECK(gguf_get_u32(f, "tokenizer.ggml.bos_token_id", &bos));
                CHECK(gguf_get_u32(f, "tokenizer.ggml.eos_token_id", &eos));
                CHECK(gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &add_bos));
                if (a == AXP_ARCH_LLAMA) {
                        const char *ctl[] = { "<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                                              "<|end_header_id|>", "<|eot_id|>" };
                        for (size_t i = 0; i < ELEMENTSOF(ctl); i++) {
                                int32_t id = find_token(tok, ctl[i]);
                                CHECK_MSG(id >= 0 && gguf_arr_i32(types, (uint64_t) id) == 3, "%s", ctl[i]);
                        }
                        CHECK(str_is(tok->arr_str[bos], "<|begin_of_text|>"));
                        CHECK(str_is(tok->arr_str[eos], "<|end_of_text|>"));
                        CHECK(add_bos);
                } else {
                        const char *ctl[] = { "<|endoftext|>", "<|im_start|>", "<|im_end|>" };
                        for (size_t i = 0; i < ELEMENTSOF(ctl); i++) {
                                int32_t id = find_token(tok, ctl[i]);
                                CHECK_MSG(id >= 0 && gguf_arr_i32(types, (uint64_t) id) == 3, "%s", ctl[i]);
                        }
                        CHECK(str_is(tok->arr_str[bos], "<|endoftext|>"));
                        CHECK(str_is(tok->arr_str[eos], "<|im_end|>"));
                        CHECK(!add_bos);
                }
                CHECK_EQ_INT(gguf_arr_i32(types, 'a'), 1);
                gguf_close(f);
        }
}

static void test_vocab_from(void) {
        const char *dir = getenv("AXP_CONFORMANCE_DIR");
        char vocab[4096];
        axp_mkmodel_params p;
        gguf_file *f, *v = NULL;
        struct stat st;
        axp_error err = { 0 };

        snprintf(vocab, sizeof(vocab), "%s/vocab/ggml-vocab-qwen2.gguf", dir ? dir : "");
        if (!dir || stat(vocab, &st) < 0) {
                printf("SKIP: --vocab-from (no conformance data)\n");
                return;
        }
        axp_mkmodel_defaults(&p);
        p.arch = AXP_ARCH_QWEN2;
        p.n_embd = 64;
        p.n_head = 4;
        p.n_head_kv = 4;
        p.n_ff = 128;
        p.n_layer = 1;
        p.tied = true;
        p.vocab_from = vocab;
        p.path = tmp_path("qv.gguf");
        f = make(&p);
        CHECK(gguf_open(vocab, &v, &err) == 0);
        if (f && v) {
                const gguf_kv *a = gguf_get_arr(v, "tokenizer.ggml.merges", GGUF_TYPE_STRING);
                const gguf_kv *b = gguf_get_arr(f, "tokenizer.ggml.merges", GGUF_TYPE_STRING);
                gguf_str s;
                check_model(f, &p, 16);
                CHECK_EQ_INT(get_u32(f, "qwen2", "vocab_size"), 151936);
                CHECK(a && b && a->arr_n == b->arr_n && str_is(b->arr_str[b->arr_n - 1], "") == str_is(a->arr_str[a->arr_n - 1], ""));
                CHECK(a && b && a->arr_str[1000].len == b->arr_str[1000].len &&
                      !memcmp(a->arr_str[1000].ptr, b->arr_str[1000].ptr, a->arr_str[1000].len));
                CHECK(gguf_get_str(f, "tokenizer.ggml.pre", &s) && str_is(s, "qwen2"));
                /* only tokenizer keys come across: the architecture stays the model's own */
                CHECK(gguf_get_str(f, "general.name", &s) && !str_is(s, "Qwen1.5-7B"));
                CHECK(gguf_find(f, "qwen2.embedding_length") && get_u32(f, "qwen2", "embedding_length") == 64);
        }
        gguf_close(f);
        gguf_close(v);
}

/* --no-eog: the LM head's rows of control tokens are zero, every other row is not, for an
 * untied head and for a tied one (token_embd), with the built-in and a copied vocabulary. */
static void check_no_eog(axp_mkmodel_params *p) {
        gguf_file *f = make(p);
        if (!f)
                return;
        const gguf_tensor *head = gguf_find_tensor(f, p->tied ? "token_embd.weight" : "output.weight");
        const gguf_kv *types = gguf_get_arr(f, "tokenizer.ggml.token_type", GGUF_TYPE_INT32);
        uint32_t eos = UINT32_MAX;
        CHECK(head && types && gguf_get_u32(f, "tokenizer.ggml.eos_token_id", &eos));
        if (!head || !types) {
                gguf_close(f);
                return;
        }
        int64_t n = head->ne[0];
        uint64_t row_bytes = axp_type_row_size(head->type, n);
        float *x = malloc((size_t) n * sizeof(float));
        int zero_control = 0, control = 0, zero_other = 0;
        for (int64_t r = 0; r < head->ne[1]; r++) {
                axp_dequantize_row(head->type, (const uint8_t *) head->data + r * row_bytes, x, n);
                bool zero = true;
                for (int64_t i = 0; i < n; i++)
                        zero &= x[i] == 0;
                bool is_control = gguf_arr_i32(types, (uint64_t) r) == 3 || (uint32_t) r == eos;
                control += is_control;
                zero_control += is_control && zero;
                zero_other += !is_control && zero;
        }
        CHECK(control > 0);
        CHECK_EQ_INT(zero_control, control);
        CHECK_EQ_INT(zero_other, 0);
        free(x);
        gguf_close(f);
}

static void test_no_eog(void) {
        axp_mkmodel_params p;
        axp_mkmodel_defaults(&p);
        p.no_eog = true;
        p.path = tmp_path("no-eog.gguf");
        check_no_eog(&p);
        p.tied = true;
        check_no_eog(&p);
        const char *dir = getenv("AXP_CONFORMANCE_DIR");
        char vocab[1024];
        snprintf(vocab, sizeof(vocab), "%s/vocab/ggml-vocab-qwen2.gguf", dir ? dir : "");
        if (dir && access(vocab, R_OK) == 0) {
                p.arch = AXP_ARCH_QWEN2;
                p.vocab_from = vocab;
                p.tied = false;
                check_no_eog(&p);
        }
}

static void test_errors(void) {
        axp_mkmodel_params p;
        axp_error err = { 0 };

        axp_mkmodel_defaults(&p);
        p.type = AXP_TYPE_Q4_K;
        p.n_embd = 64;
        p.n_ff = 256;
        p.path = tmp_path("e.gguf");
        CHECK(axp_mkmodel(&p, &err) == -EINVAL);
        CHECK_MSG(strstr(err.msg, "token_embd.weight") && strstr(err.msg, "256") && strstr(err.msg, "--dim"),
                  "%s", err.msg);
        p.n_embd = 256;
        p.n_ff = 96;
        CHECK(axp_mkmodel(&p, &err) == -EINVAL);
        CHECK_MSG(strstr(err.msg, "ffn_down") && strstr(err.msg, "--ffn"), "%s", err.msg);

        axp_mkmodel_defaults(&p);
        p.path = tmp_path("e.gguf");
        p.n_head = 6;
        p.n_head_kv = 4;
        CHECK(axp_mkmodel(&p, &err) == -EINVAL && strstr(err.msg, "--kv-heads"));
        p.n_head = 3;
        p.n_head_kv = 3;
        CHECK(axp_mkmodel(&p, &err) == -EINVAL && strstr(err.msg, "--head-dim"));
        p.n_head = 4;
        p.n_head_kv = 2;
        p.n_layer = 0;
        CHECK(axp_mkmodel(&p, &err) == -EINVAL && strstr(err.msg, "--layers"));
        p.n_layer = 1;
        p.type = AXP_TYPE_Q3_K;
        CHECK(axp_mkmodel(&p, &err) == -EINVAL && strstr(err.msg, "Q3_K"));
        p.type = AXP_TYPE_Q8_0;
        p.vocab_from = "/nonexistent.gguf";
        CHECK(axp_mkmodel(&p, &err) == -ENOENT && strstr(err.msg, "/nonexistent.gguf"));
        /* a GGUF without a vocabulary */
        p.vocab_from = tmp_path("novocab.gguf");
        {
                gguf_writer *w = gguf_writer_new();
                gguf_writer_set_str(w, "general.architecture", "llama");
                CHECK(gguf_writer_write(w, p.vocab_from, &err) == 0);
                gguf_writer_free(w);
        }
        CHECK(axp_mkmodel(&p, &err) == -EINVAL && strstr(err.msg, "tokenizer.ggml.tokens"));
        unlink(p.vocab_from);
        struct stat st;
        CHECK(stat(p.path, &st) < 0); /* nothing written on failure */
}

int main(void) {
        RUN(test_every_arch_and_type);
        RUN(test_head_dim_and_shape_options);
        RUN(test_determinism);
        RUN(test_weight_statistics);
        RUN(test_types_share_weights);
        RUN(test_builtin_vocab);
        RUN(test_vocab_from);
        RUN(test_no_eog);
        RUN(test_errors);
        unlink(tmp_path("model.gguf"));
        unlink(tmp_path("hd.gguf"));
        unlink(tmp_path("hd2.gguf"));
        unlink(tmp_path("stats.gguf"));
        unlink(tmp_path("w32.gguf"));
        unlink(tmp_path("w8.gguf"));
        unlink(tmp_path("vocab.gguf"));
        unlink(tmp_path("qv.gguf"));
        rmdir(tmpdir);
        TEST_EXIT();
}
