/* SPDX-License-Identifier: MIT */
/* GGUF reader and writer: the conformance models and vocab files read as llama.cpp wrote
 * them; a hand-built file reads back exactly; the writer's output reads back byte for byte
 * and follows llama.cpp's layout; and every corrupt variant (tests/gguf-corrupt.h), every
 * truncation and many random mutations give a one-line error, never a crash. */
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf-corrupt.h"
#include "model/gguf.h"
#include "test.h"
#include "kernels/types.h"

static const char *conformance_dir(void) {
        const char *d = getenv("AXP_CONFORMANCE_DIR");
        struct stat st;
        if (!d || stat(d, &st) < 0 || !S_ISDIR(st.st_mode))
                return NULL;
        return d;
}

static gguf_file *open_conformance(const char *name) {
        char path[4096];
        gguf_file *f = NULL;
        axp_error err = { 0 };
        snprintf(path, sizeof(path), "%s/%s", conformance_dir(), name);
        if (gguf_open(path, &f, &err) < 0)
                fprintf(stderr, "%s\n", err.msg);
        return f;
}

static bool str_is(gguf_str s, const char *c) {
        return gguf_str_eq(s, c);
}

static void check_shape(const gguf_file *f, const char *name, uint32_t type, int64_t ne0, int64_t ne1) {
        const gguf_tensor *t = gguf_find_tensor(f, name);
        CHECK_MSG(t != NULL, "tensor %s missing", name);
        if (!t)
                return;
        CHECK_EQ_INT(t->type, type);
        CHECK_EQ_INT(t->n_dims, ne1 > 1 ? 2 : 1);
        CHECK_EQ_INT(t->ne[0], ne0);
        CHECK_EQ_INT(t->ne[1], ne1);
        CHECK_EQ_INT(t->nbytes, axp_type_row_size(type, ne0) * (uint64_t) ne1);
        CHECK(((uintptr_t) t->data - (uintptr_t) f->map) % f->alignment == 0);
}

/* Facts from conformance/models.json. */
static void check_tiny_llama3(const char *file, uint32_t wtype, uint32_t file_type) {
        gguf_file *f = open_conformance(file);
        uint32_t u;
        float x;
        gguf_str s;
        const gguf_kv *kv;
        int n_w = 0;

        CHECK(f != NULL);
        if (!f)
                return;
        CHECK_EQ_INT(f->version, 3);
        CHECK_EQ_INT(f->n_tensors, 20);
        CHECK_EQ_INT(f->n_kv, file_type == 0 ? 20 : 21);
        CHECK_EQ_INT(f->alignment, 32);
        CHECK(gguf_get_str(f, "general.architecture", &s) && str_is(s, "llama"));
        CHECK(gguf_get_u32(f, "general.file_type", &u) && u == file_type);
        CHECK(gguf_get_u32(f, "llama.embedding_length", &u) && u == 64);
        CHECK(gguf_get_u32(f, "llama.context_length", &u) && u == 512);
        CHECK(gguf_get_u32(f, "llama.block_count", &u) && u == 2);
        CHECK(gguf_get_u32(f, "llama.feed_forward_length", &u) && u == 192);
        CHECK(gguf_get_u32(f, "llama.attention.head_count_kv", &u) && u == 2);
        CHECK(gguf_get_u32(f, "llama.vocab_size", &u) && u == 128256);
        CHECK(gguf_get_u32(f, "tokenizer.ggml.bos_token_id", &u) && u == 128000);
        CHECK(gguf_get_f32(f, "llama.rope.freq_base", &x) && x == 500000.0f);
        CHECK(gguf_get_f32(f, "llama.attention.layer_norm_rms_epsilon", &x) && x == 1e-5f);
        CHECK(gguf_get_str(f, "tokenizer.ggml.pre", &s) && str_is(s, "llama-bpe"));
        kv = gguf_get_arr(f, "tokenizer.ggml.merges", GGUF_TYPE_STRING);
        CHECK(kv && kv->arr_n == 280147);
        CHECK(gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_INT32) == NULL);
        CHECK(gguf_find_tensor(f, "output.weight") == NULL); /* tied */
        check_shape(f, "token_embd.weight", wtype, 64, 128256);
        check_shape(f, "blk.0.attn_k.weight", wtype, 64, 32);
        check_shape(f, "blk.1.ffn_down.weight", wtype, 192, 64);
        check_shape(f, "blk.1.ffn_gate.weight", wtype, 64, 192);
        check_shape(f, "output_norm.weight", AXP_TYPE_F32, 64, 1);
        for (uint64_t i = 0; i < f->n_tensors; i++)
                n_w += f->tensors[i].type == wtype;
        CHECK_EQ_INT(n_w, wtype == AXP_TYPE_F32 ? 20 : 15);
        /* the norms are 1 + 0.05·N(0,1): a sanity check that data points at the weights */
        {
                const gguf_tensor *t = gguf_find_tensor(f, "output_norm.weight");
                double sum = 0;
                for (int i = 0; t && i < 64; i++)
                        sum += ((const float *) t->data)[i];
                CHECK_NEAR(sum / 64, 1.0, 0.05);
        }
        gguf_close(f);
}

static void test_conformance_models(void) {
        if (!conformance_dir())
                TEST_SKIP("no conformance data (AXP_CONFORMANCE_DIR)");
        check_tiny_llama3("tiny-llama3-f32.gguf", AXP_TYPE_F32, 0);
        check_tiny_llama3("tiny-llama3-q8_0.gguf", AXP_TYPE_Q8_0, 7);
}

static void check_vocab(const char *file, const char *model, uint64_t n_tokens, uint64_t n_merges,
                        uint32_t bos, const char *bos_text) {
        gguf_file *f = open_conformance(file);
        const gguf_kv *tok, *types, *merges;
        gguf_str s;
        uint32_t u;

        CHECK(f != NULL);
        if (!f)
                return;
        CHECK_EQ_INT(f->n_tensors, 0);
        CHECK(gguf_get_str(f, "tokenizer.ggml.model", &s) && str_is(s, model));
        tok = gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING);
        types = gguf_get_arr(f, "tokenizer.ggml.token_type", GGUF_TYPE_INT32);
        merges = gguf_get_arr(f, "tokenizer.ggml.merges", GGUF_TYPE_STRING);
        CHECK(tok && tok->arr_n == n_tokens);
        CHECK(types && types->arr_n == n_tokens);
        CHECK(n_merges ? merges && merges->arr_n == n_merges : merges == NULL);
        CHECK(gguf_get_u32(f, "tokenizer.ggml.bos_token_id", &u) && u == bos);
        if (tok && bos < tok->arr_n)
                CHECK_MSG(str_is(tok->arr_str[bos], bos_text), "token %u", bos);
        /* every string lies inside the file */
        for (uint64_t i = 0; tok && i < tok->arr_n; i++)
                CHECK((const char *) tok->arr_str[i].ptr >= (const char *) f->map &&
                      (const char *) tok->arr_str[i].ptr + tok->arr_str[i].len <=
                              (const char *) f->map + f->size);
        gguf_close(f);
}

static void test_conformance_vocabs(void) {
        if (!conformance_dir())
                TEST_SKIP("no conformance data (AXP_CONFORMANCE_DIR)");
        check_vocab("vocab/ggml-vocab-llama-bpe.gguf", "gpt2", 128256, 280147, 128000, "<|begin_of_text|>");
        check_vocab("vocab/ggml-vocab-qwen2.gguf", "gpt2", 151936, 151387, 151643, "<|endoftext|>");
        check_vocab("vocab/ggml-vocab-llama-spm.gguf", "llama", 32000, 0, 1, "<s>");
        check_vocab("vocab/ggml-vocab-phi-3.gguf", "llama", 32064, 0, 1, "<s>");
}

/* The hand-built file of gguf-corrupt.c reads as built. */
static void test_base_file(void) {
        uint8_t *base;
        size_t size;
        gguf_file *f = NULL;
        axp_error err = { 0 };
        uint32_t u;
        int32_t i;
        float x;
        bool b;
        gguf_str s;
        const gguf_kv *kv;

        CHECK(gguf_corrupt_base(&base, &size) == 0);
        CHECK_MSG(gguf_open_buffer(base, size, &f, &err) == 0, "%s", err.msg);
        if (!f) {
                free(base);
                return;
        }
        CHECK_EQ_INT(f->n_kv, 15);
        CHECK_EQ_INT(f->n_tensors, 3);
        CHECK_EQ_INT(f->alignment, 32);
        CHECK_EQ_INT(f->data_offset % 32, 0);
        CHECK(f->owns_map == false);
        CHECK(gguf_get_str(f, "general.architecture", &s) && str_is(s, "llama"));
        CHECK(gguf_get_u32(f, "test.key_a", &u) && u == 7);
        /* integer getters convert between widths when the value fits */
        CHECK(gguf_get_i32(f, "test.key_b", &i) && i == -3);
        CHECK(!gguf_get_u32(f, "test.key_b", &u));
        CHECK(gguf_get_u32(f, "test.u8", &u) && u == 200);
        CHECK(gguf_get_i32(f, "test.u16", &i) && i == 60000);
        CHECK(gguf_get_i32(f, "test.i16", &i) && i == -30000);
        CHECK(gguf_get_i32(f, "test.i32", &i) && i == -5);
        CHECK(!gguf_get_u32(f, "test.u64", &u));
        CHECK(!gguf_get_i32(f, "test.i64", &i));
        CHECK((kv = gguf_find(f, "test.u64")) && kv->type == GGUF_TYPE_UINT64 && kv->v.u64 == 1ull << 40);
        CHECK((kv = gguf_find(f, "test.i64")) && kv->v.i64 == -(1ll << 40));
        CHECK(gguf_get_f32(f, "test.f32", &x) && x == 0.5f);
        CHECK(gguf_get_f32(f, "test.f64", &x) && x == 0.25f);
        CHECK(!gguf_get_f32(f, "test.u8", &x));
        CHECK(gguf_get_bool(f, "test.bool", &b) && b);
        CHECK(!gguf_get_bool(f, "test.u8", &b));
        CHECK(!gguf_get_str(f, "test.u8", &s));
        CHECK(!gguf_get_u32(f, "no.such.key", &u));
        CHECK(gguf_find(f, "test") == NULL);
        CHECK(gguf_find(f, "") == NULL);
        kv = gguf_get_arr(f, "test.strs", GGUF_TYPE_STRING);
        CHECK(kv && kv->arr_n == 3);
        if (kv && kv->arr_n == 3) {
                CHECK(str_is(kv->arr_str[0], "a"));
                CHECK(str_is(kv->arr_str[1], "bc"));
                CHECK(str_is(kv->arr_str[2], ""));
        }
        CHECK(gguf_get_arr(f, "test.ints", GGUF_TYPE_UINT32) == NULL); /* exact element type only */
        kv = gguf_get_arr(f, "test.ints", GGUF_TYPE_INT32);
        CHECK(kv && kv->arr_n == 4 && gguf_arr_i32(kv, 3) == 4);
        {
                const gguf_tensor *a = gguf_find_tensor(f, "tensor.a");
                const gguf_tensor *c = gguf_find_tensor(f, "tensor.c");
                CHECK(a && a->n_dims == 1 && a->ne[0] == 8 && a->ne[1] == 1 && a->nbytes == 32);
                CHECK(a && (const uint8_t *) a->data == base + f->data_offset);
                CHECK(c && c->n_dims == 4 && c->ne[0] == 4 && c->ne[1] == 2 && c->ne[3] == 1);
                CHECK(c && c->type == AXP_TYPE_F16 && c->nbytes == 16 && c->offset == 128);
                CHECK(gguf_find_tensor(f, "tensor") == NULL);
        }
        {
                _cleanup_free_ char *d = gguf_str_dup(f->kv[0].key);
                CHECK(d && strcmp(d, "general.architecture") == 0);
        }
        gguf_close(f);

        /* version 2 has the same layout */
        memcpy(base + 4, (uint32_t[]) { 2 }, 4);
        f = NULL;
        CHECK_MSG(gguf_open_buffer(base, size, &f, &err) == 0, "%s", err.msg);
        CHECK(f && f->version == 2);
        gguf_close(f);
        free(base);
}

/* The header alone, from a prefix of the file: every prefix short of the header asks for more
 * (-ENOBUFS), every longer one gives the same header with the tensors' data left out, and a
 * file too short for its tensors is refused whatever was read of it. */
static void test_prefix(void) {
        uint8_t *base;
        size_t size;
        gguf_file *full = NULL;
        axp_error err = { 0 };

        CHECK(gguf_corrupt_base(&base, &size) == 0);
        CHECK_MSG(gguf_open_buffer(base, size, &full, &err) == 0, "%s", err.msg);
        if (!full) {
                free(base);
                return;
        }
        for (size_t n = 0; n <= size; n++) {
                gguf_file *f = NULL;
                int k = gguf_open_prefix("prefix", base, n, size, &f, &err);
                if (n < 24 || n < full->data_offset - 31) {
                        /* the header needs more than this (its padding aside) */
                        if (n >= 4)
                                CHECK_MSG(k == -ENOBUFS, "prefix %zu: %d %s", n, k, err.msg);
                        else
                                CHECK(k < 0);
                } else if (k == 0) {
                        CHECK_EQ_INT(f->n_tensors, full->n_tensors);
                        CHECK_EQ_INT(f->data_offset, full->data_offset);
                        CHECK_EQ_INT(f->size, size);
                        CHECK(n == size || f->tensors[0].data == NULL);
                } else
                        CHECK_MSG(k == -ENOBUFS, "prefix %zu: %d %s", n, k, err.msg);
                gguf_close(f);
        }
        {
                gguf_file *f = NULL;
                uint64_t end = 0;
                for (uint64_t t = 0; t < full->n_tensors; t++)
                        end = MAX(end, full->data_offset + full->tensors[t].offset + full->tensors[t].nbytes);
                CHECK(gguf_open_prefix("short", base, full->data_offset, end - 1, &f, &err) == -EBADMSG);
                CHECK(strstr(err.msg, "extends past the end of the file") != NULL);
                gguf_close(f);
        }
        gguf_close(full);
        free(base);
}

static bool one_line(const char *msg) {
        return msg[0] && !strchr(msg, '\n') && !strchr(msg, '\r') && strlen(msg) < sizeof(((axp_error *) 0)->msg) - 1;
}

static void test_corrupt_variants(void) {
        gguf_variant *v;
        size_t n;
        int bad = 0;

        CHECK(gguf_corrupt_variants(true, &v, &n) == 0);
        CHECK(n > 500);
        for (size_t i = 0; i < n; i++) {
                gguf_file *f = NULL;
                axp_error err = { 0 };
                /* a private copy of exactly the variant's size, so ASan sees any overread */
                uint8_t *copy = malloc(v[i].size ? v[i].size : 1);
                memcpy(copy, v[i].data, v[i].size);
                int k = gguf_open_buffer(copy, v[i].size, &f, &err);
                if (k >= 0 || err.code != k || !one_line(err.msg) || !strstr(err.msg, v[i].expect) ||
                    strncmp(err.msg, "(buffer): ", 10) != 0) {
                        fprintf(stderr, "variant %s: ret %d, message '%s' (expected '%s')\n", v[i].name,
                                k, err.msg, v[i].expect);
                        bad++;
                }
                gguf_close(f);
                free(copy);
        }
        CHECK_EQ_INT(bad, 0);
        gguf_corrupt_free(v, n);
}

/* The same through files: the message names the file. */
static void test_corrupt_files(void) {
        char dir[] = "/tmp/test-gguf-XXXXXX", path[4200];
        gguf_variant *v;
        size_t n;
        int bad = 0;

        CHECK(mkdtemp(dir) != NULL);
        CHECK(gguf_corrupt_variants(false, &v, &n) == 0);
        for (size_t i = 0; i < n; i++) {
                gguf_file *f = NULL;
                axp_error err = { 0 };
                FILE *fp;
                snprintf(path, sizeof(path), "%s/%s.gguf", dir, v[i].name);
                fp = fopen(path, "wb");
                CHECK(fp && fwrite(v[i].data, 1, v[i].size, fp) == v[i].size);
                if (fp)
                        fclose(fp);
                if (gguf_open(path, &f, &err) >= 0 || !one_line(err.msg) ||
                    strncmp(err.msg, path, strlen(path)) != 0 || !strstr(err.msg, v[i].expect)) {
                        fprintf(stderr, "file %s: message '%s'\n", path, err.msg);
                        bad++;
                }
                gguf_close(f);
                unlink(path);
        }
        CHECK_EQ_INT(bad, 0);
        gguf_corrupt_free(v, n);

        {
                gguf_file *f = NULL;
                axp_error err = { 0 };
                snprintf(path, sizeof(path), "%s/missing.gguf", dir);
                CHECK(gguf_open(path, &f, &err) == -ENOENT && strstr(err.msg, "cannot open"));
                CHECK(gguf_open(dir, &f, &err) == -EISDIR && strstr(err.msg, "is a directory"));
                snprintf(path, sizeof(path), "%s/empty.gguf", dir);
                close(open(path, O_CREAT | O_WRONLY, 0644));
                CHECK(gguf_open(path, &f, &err) < 0 && strstr(err.msg, "not a GGUF file (empty)"));
                CHECK(gguf_open("/dev/null", &f, &err) < 0 && one_line(err.msg));
                unlink(path);
        }
        rmdir(dir);
}

/* Random mutations of the base file: whatever happens, no crash and a one-line message. */
static void test_random_mutations(void) {
        uint8_t *base, *m;
        size_t size;
        uint64_t s = 42;
        int accepted = 0, rejected = 0, bad = 0;

        CHECK(gguf_corrupt_base(&base, &size) == 0);
        m = malloc(size);
        for (int iter = 0; iter < 20000; iter++) {
                gguf_file *f = NULL;
                axp_error err = { 0 };
                size_t len = size;
                memcpy(m, base, size);
                for (int j = 0, nmut = 1 + iter % 4; j < nmut; j++) {
                        s = s * 6364136223846793005ull + 1442695040888963407ull;
                        size_t at = (size_t) (s >> 33) % size;
                        switch ((s >> 20) % 4) {
                        case 0: /* flip a bit */
                                m[at] ^= (uint8_t) (1u << ((s >> 8) % 8));
                                break;
                        case 1: /* an extreme byte */
                                m[at] = (s >> 9) & 1 ? 0xff : 0x00;
                                break;
                        case 2: /* a large 64-bit value */
                                if (at + 8 <= size)
                                        memcpy(m + at, (uint64_t[]) { UINT64_MAX - ((s >> 12) % 64) }, 8);
                                break;
                        default: /* cut */
                                len = at;
                        }
                }
                if (gguf_open_buffer(m, len, &f, &err) == 0) {
                        /* whatever was accepted must be consistent */
                        for (uint64_t t = 0; t < f->n_tensors; t++)
                                if ((const uint8_t *) f->tensors[t].data + f->tensors[t].nbytes > m + len)
                                        bad++;
                        accepted++;
                } else {
                        if (!one_line(err.msg))
                                bad++;
                        rejected++;
                }
                gguf_close(f);
        }
        CHECK_EQ_INT(bad, 0);
        CHECK(rejected > 1000);
        CHECK(accepted > 100); /* mutations of data bytes are harmless */
        free(m);
        free(base);
}

/* Writer --------------------------------------------------------------------------------- */

static char tmpdir[64];

static const char *tmp_path(const char *name) {
        static char buf[256];
        if (!tmpdir[0]) {
                snprintf(tmpdir, sizeof(tmpdir), "/tmp/test-gguf-w-XXXXXX");
                if (!mkdtemp(tmpdir))
                        abort();
        }
        snprintf(buf, sizeof(buf), "%s/%s", tmpdir, name);
        return buf;
}

static bool kv_equal(const gguf_kv *a, const gguf_kv *b) {
        if (a->key.len != b->key.len || memcmp(a->key.ptr, b->key.ptr, a->key.len) || a->type != b->type)
                return false;
        if (a->type == GGUF_TYPE_STRING)
                return a->v.str.len == b->v.str.len && !memcmp(a->v.str.ptr, b->v.str.ptr, a->v.str.len);
        if (a->type != GGUF_TYPE_ARRAY)
                return a->type == GGUF_TYPE_FLOAT32 || a->type == GGUF_TYPE_FLOAT64 ? a->v.f64 == b->v.f64
                                                                                    : a->v.u64 == b->v.u64;
        if (a->arr_type != b->arr_type || a->arr_n != b->arr_n)
                return false;
        if (a->arr_type != GGUF_TYPE_STRING)
                return a->arr_n == 0 || !memcmp(a->arr_data, b->arr_data, a->arr_n * gguf_type_size(a->arr_type));
        for (uint64_t i = 0; i < a->arr_n; i++)
                if (a->arr_str[i].len != b->arr_str[i].len ||
                    memcmp(a->arr_str[i].ptr, b->arr_str[i].ptr, a->arr_str[i].len))
                        return false;
        return true;
}

/* llama.cpp's loader wants tensor i at the padded end of tensor i-1, and the data section at
 * the aligned end of the header. */
static void check_llama_cpp_layout(const gguf_file *f) {
        uint64_t expect = 0;
        for (uint64_t i = 0; i < f->n_tensors; i++) {
                const gguf_tensor *t = &f->tensors[i];
                CHECK_EQ_INT(t->offset, expect);
                expect = (t->offset + t->nbytes + f->alignment - 1) / f->alignment * f->alignment;
        }
        if (f->n_tensors)
                CHECK_EQ_INT(f->data_offset + expect, f->size);
}

static void test_writer_roundtrip(void) {
        uint8_t *base;
        size_t size;
        gguf_file *a = NULL, *b = NULL;
        gguf_writer *w;
        axp_error err = { 0 };
        const char *path = tmp_path("roundtrip.gguf");

        CHECK(gguf_corrupt_base(&base, &size) == 0);
        CHECK(gguf_open_buffer(base, size, &a, &err) == 0);
        w = gguf_writer_new();
        for (uint64_t i = 0; i < a->n_kv; i++)
                CHECK(gguf_writer_copy_kv(w, &a->kv[i]) == 0);
        for (uint64_t i = 0; i < a->n_tensors; i++) {
                const gguf_tensor *t = &a->tensors[i];
                char *name = gguf_str_dup(t->name);
                CHECK(gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data, t->nbytes) == 0);
                free(name);
        }
        CHECK_MSG(gguf_writer_write(w, path, &err) == 0, "%s", err.msg);
        gguf_writer_free(w);
        CHECK_MSG(gguf_open(path, &b, &err) == 0, "%s", err.msg);
        if (b) {
                CHECK_EQ_INT(b->version, 3);
                CHECK_EQ_INT(b->n_kv, a->n_kv);
                CHECK_EQ_INT(b->n_tensors, a->n_tensors);
                for (uint64_t i = 0; i < a->n_kv && i < b->n_kv; i++)
                        CHECK_MSG(kv_equal(&a->kv[i], &b->kv[i]), "kv %d", (int) i);
                for (uint64_t i = 0; i < a->n_tensors && i < b->n_tensors; i++) {
                        const gguf_tensor *x = &a->tensors[i], *y = &b->tensors[i];
                        CHECK(x->name.len == y->name.len && !memcmp(x->name.ptr, y->name.ptr, x->name.len));
                        CHECK(x->type == y->type && x->n_dims == y->n_dims && x->nbytes == y->nbytes);
                        CHECK(!memcmp(x->ne, y->ne, sizeof(x->ne)));
                        CHECK(!memcmp(x->data, y->data, x->nbytes));
                }
                check_llama_cpp_layout(b);
                /* the base file was laid out the same way, so the bytes agree too */
                CHECK(b->size == size && !memcmp(b->map, base, size));
        }
        gguf_close(a);
        gguf_close(b);
        free(base);
        unlink(path);
}

typedef struct fill_state {
        int calls;
        int fail_at;
} fill_state;

/* F32 rows whose values say where they are: row r, column c = r * 1000 + c. */
static int fill_rows(void *userdata, uint64_t row, uint64_t n_rows, void *dst, axp_error *err) {
        fill_state *s = userdata;
        float *x = dst;
        if (s->calls++ == s->fail_at)
                return axp_errorf(err, -EIO, "generator failed");
        for (uint64_t r = 0; r < n_rows; r++)
                for (int c = 0; c < 1024; c++)
                        x[r * 1024 + c] = (float) ((row + r) * 1000 + (uint64_t) c);
        return 0;
}

static void test_writer_api(void) {
        const char *path = tmp_path("api.gguf");
        const char *strs[] = { "x", "", "hello world" };
        const int16_t shorts[] = { -1, 2, -3 };
        gguf_writer *w = gguf_writer_new();
        fill_state fs = { 0, -1 };
        gguf_file *f = NULL;
        axp_error err = { 0 };
        const int64_t ne_big[2] = { 1024, 5000 }; /* 20 MB: more than one fill chunk */
        const int64_t ne_q[2] = { 64, 3 };
        uint8_t q[2 * 34 * 3] = { 0 };
        uint32_t u;
        int32_t i;
        bool b;
        float x;
        gguf_str s;
        const gguf_kv *kv;

        CHECK(gguf_writer_set_str(w, "general.architecture", "test") == 0);
        CHECK(gguf_writer_set_u32(w, "general.alignment", 64) == 0);
        CHECK(gguf_writer_set_u32(w, "a.u32", 1) == 0);
        CHECK(gguf_writer_set_i32(w, "a.i32", -7) == 0);
        CHECK(gguf_writer_set_f32(w, "a.f32", 1.5f) == 0);
        CHECK(gguf_writer_set_bool(w, "a.bool", true) == 0);
        CHECK(gguf_writer_set_arr_str(w, "a.strs", strs, 3) == 0);
        CHECK(gguf_writer_set_arr(w, "a.shorts", GGUF_TYPE_INT16, shorts, 3) == 0);
        CHECK(gguf_writer_set_arr(w, "a.empty", GGUF_TYPE_UINT8, NULL, 0) == 0);
        CHECK(gguf_writer_set_u32(w, "a.u32", 2) == 0); /* replaces, keeps its place */
        CHECK(gguf_writer_add_tensor_fill(w, "big", AXP_TYPE_F32, 2, ne_big, fill_rows, &fs) == 0);
        CHECK(gguf_writer_add_tensor(w, "q", AXP_TYPE_Q8_0, 2, ne_q, q, sizeof(q)) == 0);
        CHECK_MSG(gguf_writer_write(w, path, &err) == 0, "%s", err.msg);
        CHECK(fs.calls >= 2);
        CHECK_MSG(gguf_open(path, &f, &err) == 0, "%s", err.msg);
        if (f) {
                struct stat st;
                CHECK_EQ_INT(f->n_kv, 9);
                CHECK_EQ_INT(f->alignment, 64);
                CHECK_EQ_INT(f->data_offset % 64, 0);
                CHECK(str_is(f->kv[2].key, "a.u32") && gguf_get_u32(f, "a.u32", &u) && u == 2);
                CHECK(gguf_get_i32(f, "a.i32", &i) && i == -7);
                CHECK(gguf_get_f32(f, "a.f32", &x) && x == 1.5f);
                CHECK(gguf_get_bool(f, "a.bool", &b) && b);
                CHECK(gguf_get_str(f, "general.architecture", &s) && str_is(s, "test"));
                kv = gguf_get_arr(f, "a.strs", GGUF_TYPE_STRING);
                CHECK(kv && kv->arr_n == 3 && str_is(kv->arr_str[2], "hello world") && kv->arr_str[1].len == 0);
                kv = gguf_get_arr(f, "a.shorts", GGUF_TYPE_INT16);
                int16_t v2 = 0;
                if (kv && kv->arr_n == 3)
                        memcpy(&v2, (const char *) kv->arr_data + 4, 2);
                CHECK(kv && kv->arr_n == 3 && v2 == -3);
                kv = gguf_get_arr(f, "a.empty", GGUF_TYPE_UINT8);
                CHECK(kv && kv->arr_n == 0);
                const gguf_tensor *t = gguf_find_tensor(f, "big");
                CHECK(t && t->nbytes == 1024 * 5000 * 4);
                if (t) {
                        const float *v = t->data;
                        int wrong = 0;
                        for (uint64_t r = 0; r < 5000; r++)
                                for (int c = 0; c < 1024; c += 111)
                                        wrong += v[r * 1024 + (uint64_t) c] != (float) (r * 1000 + (uint64_t) c);
                        CHECK_EQ_INT(wrong, 0);
                }
                check_llama_cpp_layout(f);
                CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0644);
        }
        gguf_close(f);
        gguf_writer_free(w);
        unlink(path);
}

static int count_files(const char *dir) {
        DIR *d = opendir(dir);
        struct dirent *e;
        int n = 0;
        while (d && (e = readdir(d)))
                n += e->d_name[0] != '.';
        if (d)
                closedir(d);
        return n;
}

static void test_writer_errors(void) {
        const int64_t ne[2] = { 32, 2 }, ne_bad[2] = { 33, 2 }, ne_k[1] = { 64 };
        float data[64] = { 0 };
        axp_error err = { 0 };
        gguf_writer *w;
        fill_state fs = { 0, 1 };
        char longname[80];

        /* a failing generator: no file, no temporary left behind */
        CHECK(count_files(tmpdir) == 0);
        w = gguf_writer_new();
        CHECK(gguf_writer_add_tensor_fill(w, "t", AXP_TYPE_F32, 2, (int64_t[]) { 1024, 8192 }, fill_rows, &fs) == 0);
        CHECK(gguf_writer_write(w, tmp_path("fail.gguf"), &err) == -EIO && strstr(err.msg, "generator failed"));
        CHECK_EQ_INT(count_files(tmpdir), 0);
        gguf_writer_free(w);

        w = gguf_writer_new();
        CHECK(gguf_writer_add_tensor(w, "t", AXP_TYPE_F32, 2, ne, data, sizeof(data)) == 0);
        CHECK(gguf_writer_add_tensor(w, "t", AXP_TYPE_F32, 2, ne, data, sizeof(data)) == -EEXIST);
        CHECK(gguf_writer_write(w, tmp_path("dup.gguf"), &err) == -EEXIST && strstr(err.msg, "added twice"));
        gguf_writer_free(w);

        w = gguf_writer_new();
        CHECK(gguf_writer_add_tensor(w, "t", AXP_TYPE_Q8_0, 2, ne_bad, data, 0) == -EINVAL);
        CHECK(gguf_writer_write(w, tmp_path("x.gguf"), &err) < 0 && strstr(err.msg, "not a multiple"));
        gguf_writer_free(w);

        w = gguf_writer_new();
        CHECK(gguf_writer_add_tensor(w, "t", AXP_TYPE_F32, 1, ne_k, data, 4) == -EINVAL); /* wrong size */
        CHECK(gguf_writer_add_tensor(w, "u", 4, 1, ne_k, data, 4) == -EINVAL);           /* unknown type */
        memset(longname, 'n', 64);
        longname[64] = 0;
        CHECK(gguf_writer_add_tensor(w, longname, AXP_TYPE_F32, 1, ne_k, data, 256) == -EINVAL);
        gguf_writer_free(w);

        w = gguf_writer_new();
        CHECK(gguf_writer_set_u32(w, "general.alignment", 24) == 0);
        CHECK(gguf_writer_write(w, tmp_path("align.gguf"), &err) == -EINVAL && strstr(err.msg, "power of two"));
        gguf_writer_free(w);

        w = gguf_writer_new();
        CHECK(gguf_writer_set_u32(w, "general.alignment", 4) == 0);
        CHECK(gguf_writer_write(w, tmp_path("align.gguf"), &err) == -EINVAL && strstr(err.msg, "below 8"));
        gguf_writer_free(w);

        w = gguf_writer_new();
        CHECK(gguf_writer_write(w, "/nonexistent-dir/x.gguf", &err) < 0 && strstr(err.msg, "cannot create"));
        gguf_writer_free(w);
        CHECK_EQ_INT(count_files(tmpdir), 0);
}

/* Copying a whole tokenizer, as mkmodel --vocab-from does, keeps every string. */
/* Split models -------------------------------------------------------------------------------- */

/* Part `no` (0-based) of a split model of `count` parts named tmp/split-0000N-of-0000C.gguf
 * (or `name`): the first with a key of its own, tensors named by `tensors` ("a,b", F32 [4]
 * rows whose values are their name's first letter times 10 plus the index), split.tensors.count
 * `total` (-1: none) */
static void write_part(const char *name, int no, int count, int total, const char *tensors) {
        char path[256], list[64];
        gguf_writer *w = gguf_writer_new();
        axp_error err = { 0 };
        if (name)
                snprintf(path, sizeof(path), "%s", tmp_path(name));
        else {
                char n[64];
                snprintf(n, sizeof(n), "split-%05d-of-%05d.gguf", no + 1, count);
                snprintf(path, sizeof(path), "%s", tmp_path(n));
        }
        if (no == 0)
                CHECK(gguf_writer_set_str(w, "general.architecture", "llama") == 0);
        CHECK(gguf_writer_set_u16(w, "split.no", (uint16_t) no) == 0);
        CHECK(gguf_writer_set_u16(w, "split.count", (uint16_t) count) == 0);
        if (total >= 0)
                CHECK(gguf_writer_set_i32(w, "split.tensors.count", total) == 0);
        snprintf(list, sizeof(list), "%s", tensors);
        char *sv = NULL;
        for (char *t = strtok_r(list, ",", &sv); t; t = strtok_r(NULL, ",", &sv)) {
                const int64_t ne[1] = { 4 };
                float v[4];
                for (int i = 0; i < 4; i++)
                        v[i] = (float) (t[0] * 10 + i);
                CHECK(gguf_writer_add_tensor(w, t, AXP_TYPE_F32, 1, ne, v, sizeof(v)) == 0);
        }
        CHECK_MSG(gguf_writer_write(w, path, &err) == 0, "%s", err.msg);
        gguf_writer_free(w);
}

static int open_split(const char *name, gguf_file **f, axp_error *err) {
        char path[256];
        snprintf(path, sizeof(path), "%s", tmp_path(name));
        *f = NULL;
        return gguf_open(path, f, err);
}

static void test_split(void) {
        gguf_file *f = NULL;
        axp_error err = { 0 };
        uint32_t no = 9, count = 9;

        /* three parts, the first without tensors (gguf-split --no-tensor-first-split) */
        write_part(NULL, 0, 3, 3, "");
        write_part(NULL, 1, 3, 3, "a,b");
        write_part(NULL, 2, 3, 3, "c");
        CHECK_MSG(open_split("split-00001-of-00003.gguf", &f, &err) == 0, "%s", err.msg);
        if (f) {
                CHECK_EQ_INT(f->n_parts, 3);
                CHECK_EQ_INT(f->n_tensors, 3);
                CHECK(gguf_find(f, "general.architecture") != NULL);
                uint64_t sum = 0;
                for (uint32_t i = 0; i < f->n_parts; i++)
                        sum += f->parts[i].size;
                CHECK_EQ_INT(f->total_size, sum);
                CHECK(f->parts[0].map == f->map && f->parts[0].size == f->size);
                const char *names = "abc";
                for (int i = 0; i < 3; i++) {
                        const char nm[2] = { names[i], 0 };
                        const gguf_tensor *t = gguf_find_tensor(f, nm);
                        CHECK_MSG(t != NULL, "tensor %s", nm);
                        if (!t)
                                continue;
                        CHECK_EQ_INT(t->part, i < 2 ? 1 : 2);
                        const gguf_part *p = &f->parts[t->part];
                        CHECK((const char *) t->data >= (const char *) p->map &&
                              (const char *) t->data + t->nbytes <= (const char *) p->map + p->size);
                        float v[4];
                        memcpy(v, t->data, sizeof(v));
                        CHECK(v[0] == (float) (names[i] * 10) && v[3] == (float) (names[i] * 10 + 3));
                }
                CHECK(gguf_split_of(f, &no, &count) && no == 0 && count == 3);
                gguf_close(f);
        }

        /* any other part is refused, naming the first */
        CHECK(open_split("split-00002-of-00003.gguf", &f, &err) == -EINVAL);
        CHECK_MSG(strstr(err.msg, "is part 2 of 3 of a split model; open its first part") &&
                          strstr(err.msg, "split-00001-of-00003.gguf"), "%s", err.msg);
        /* as is a first part not named so (the others' names come from its name) */
        write_part("model.gguf", 0, 3, 3, "");
        CHECK(open_split("model.gguf", &f, &err) == -EINVAL);
        CHECK_MSG(strstr(err.msg, "but not named PREFIX-00001-of-00003.gguf"), "%s", err.msg);

        /* a part missing */
        char gone[256], moved[256];
        snprintf(gone, sizeof(gone), "%s", tmp_path("split-00003-of-00003.gguf"));
        snprintf(moved, sizeof(moved), "%s", tmp_path("moved.gguf"));
        CHECK(rename(gone, moved) == 0);
        CHECK(open_split("split-00001-of-00003.gguf", &f, &err) == -ENOENT);
        CHECK_MSG(strstr(err.msg, "is part 1 of 3 of a split model, and part 3 cannot be read") &&
                          strstr(err.msg, "No such file"), "%s", err.msg);
        CHECK(rename(moved, gone) == 0);

        /* a part that says it is another */
        write_part(NULL, 0, 3, 3, ""); /* (rewritten: unchanged) */
        write_part("split-00003-of-00003.gguf", 1, 3, 3, "c");
        CHECK(open_split("split-00001-of-00003.gguf", &f, &err) == -EBADMSG);
        CHECK_MSG(strstr(err.msg, "not part 3 of 3 of the split model"), "%s", err.msg);
        write_part(NULL, 2, 3, 3, "c");

        /* a tensor in two parts */
        write_part(NULL, 2, 3, 3, "a");
        CHECK(open_split("split-00001-of-00003.gguf", &f, &err) == -EBADMSG);
        CHECK_MSG(strstr(err.msg, "duplicate tensor name 'a' (in parts 2 and 3 of the split model)"), "%s", err.msg);
        write_part(NULL, 2, 3, 3, "c");

        /* the count of tensors the first part promises */
        write_part(NULL, 0, 3, 5, "");
        CHECK(open_split("split-00001-of-00003.gguf", &f, &err) == -EBADMSG);
        CHECK_MSG(strstr(err.msg, "split.tensors.count is 5, and its 3 parts hold 3 tensors"), "%s", err.msg);

        /* more parts than any model has, or a number past the count */
        write_part(NULL, 0, 10000, -1, "a");
        CHECK(open_split("split-00001-of-10000.gguf", &f, &err) == -EBADMSG);
        CHECK_MSG(strstr(err.msg, "at most 9999 parts"), "%s", err.msg);
        write_part("split-00004-of-00003.gguf", 3, 3, -1, "a");
        CHECK(open_split("split-00004-of-00003.gguf", &f, &err) == -EBADMSG);

        /* split.count 1 is a whole file */
        write_part("whole.gguf", 0, 1, 1, "a");
        CHECK_MSG(open_split("whole.gguf", &f, &err) == 0, "%s", err.msg);
        if (f) {
                CHECK(!gguf_split_of(f, &no, &count));
                CHECK_EQ_INT(f->n_parts, 1);
                CHECK_EQ_INT(f->total_size, f->size);
                gguf_close(f);
        }

        const char *left[] = { "split-00001-of-00003.gguf", "split-00002-of-00003.gguf", "split-00003-of-00003.gguf",
                               "model.gguf", "split-00001-of-10000.gguf", "split-00004-of-00003.gguf", "whole.gguf" };
        for (size_t i = 0; i < sizeof(left) / sizeof(left[0]); i++)
                unlink(tmp_path(left[i]));
}

static void test_copy_vocab(void) {
        gguf_file *a, *b = NULL;
        gguf_writer *w;
        axp_error err = { 0 };
        const char *path = tmp_path("vocab.gguf");

        if (!conformance_dir())
                TEST_SKIP("no conformance data (AXP_CONFORMANCE_DIR)");
        a = open_conformance("vocab/ggml-vocab-qwen2.gguf");
        CHECK(a != NULL);
        if (!a)
                return;
        w = gguf_writer_new();
        for (uint64_t i = 0; i < a->n_kv; i++)
                CHECK(gguf_writer_copy_kv(w, &a->kv[i]) == 0);
        CHECK_MSG(gguf_writer_write(w, path, &err) == 0, "%s", err.msg);
        gguf_writer_free(w);
        CHECK_MSG(gguf_open(path, &b, &err) == 0, "%s", err.msg);
        if (b) {
                CHECK_EQ_INT(b->n_kv, a->n_kv);
                for (uint64_t i = 0; i < a->n_kv && i < b->n_kv; i++)
                        CHECK_MSG(kv_equal(&a->kv[i], &b->kv[i]), "kv %d", (int) i);
        }
        gguf_close(a);
        gguf_close(b);
        unlink(path);
}

int main(int argc, char **argv) {
        /* "--conformance": only the cases that read ../shared/conformance (exit 77 without) */
        if (argc > 1 && strcmp(argv[1], "--conformance") == 0) {
                if (!conformance_dir())
                        TEST_SKIP("no conformance data (AXP_CONFORMANCE_DIR)");
                RUN(test_conformance_models);
                RUN(test_conformance_vocabs);
                RUN(test_copy_vocab);
        } else {
                RUN(test_base_file);
                RUN(test_prefix);
                RUN(test_corrupt_variants);
                RUN(test_corrupt_files);
                RUN(test_random_mutations);
                RUN(test_writer_roundtrip);
                RUN(test_writer_api);
                RUN(test_writer_errors);
                RUN(test_split);
        }
        if (tmpdir[0])
                rmdir(tmpdir);
        TEST_EXIT();
}
