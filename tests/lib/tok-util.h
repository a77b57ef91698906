/* SPDX-License-Identifier: MIT */
/* Helpers shared by the tokenizer tests, benchmark and fuzzer: reading the conformance data,
 * loading a vocabulary, detokenizing a whole sequence, and two small synthetic vocabularies. */
#pragma once

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf-build.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

/* Whole file, NUL-terminated; NULL if unreadable. */
static inline char *read_file(const char *path, size_t *ret_len) {
        FILE *f = fopen(path, "rb");
        if (!f)
                return NULL;
        size_t cap = 4096, n = 0;
        char *buf = malloc(cap);
        for (;;) {
                if (n + 4096 + 1 > cap)
                        buf = realloc(buf, cap *= 2);
                size_t k = fread(buf + n, 1, 4096, f);
                n += k;
                if (k == 0)
                        break;
        }
        fclose(f);
        buf[n] = 0;
        if (ret_len)
                *ret_len = n;
        return buf;
}

/* $AXP_CONFORMANCE_DIR/<rel>, or NULL when the data is not there. */
static inline char *conformance_path(const char *rel) {
        const char *dir = getenv("AXP_CONFORMANCE_DIR");
        if (!dir || !*dir)
                return NULL;
        size_t n = strlen(dir) + strlen(rel) + 2;
        char *p = malloc(n);
        snprintf(p, n, "%s/%s", dir, rel);
        FILE *f = fopen(p, "rb");
        if (!f) {
                free(p);
                return NULL;
        }
        fclose(f);
        return p;
}

typedef struct loaded_vocab {
        gguf_file *file;
        axp_tokenizer *tok;
        uint8_t *mem; /* for in-memory files */
} loaded_vocab;

static inline int vocab_open(const char *path, loaded_vocab *v) {
        axp_error err = {};
        *v = (loaded_vocab) {};
        if (gguf_open(path, &v->file, &err) < 0 || axp_tokenizer_load(v->file, &v->tok, &err) < 0) {
                fprintf(stderr, "%s: %s\n", path, err.msg);
                gguf_close(v->file);
                return -1;
        }
        return 0;
}

static inline void vocab_close(loaded_vocab *v) {
        axp_tokenizer_free(v->tok);
        gguf_close(v->file);
        free(v->mem);
        *v = (loaded_vocab) {};
}

/* Detokenize a whole sequence through the streaming detokenizer. */
static inline char *detok_all(const axp_tokenizer *t, const int32_t *ids, int n, bool special,
                              size_t *ret_len) {
        axp_detok d;
        char *out = NULL;
        size_t len = 0, cap = 0;
        axp_detok_init(&d, t, special);
        for (int i = 0; i < n; i++)
                if (axp_detok_push(&d, ids[i], &out, &len, &cap) < 0)
                        abort();
        if (axp_detok_flush(&d, &out, &len, &cap) < 0)
                abort();
        if (!out)
                out = calloc(1, 1);
        *ret_len = len;
        return out;
}

/* GPT-2's printable stand-in for a byte, as UTF-8. */
static inline void gpt2_byte_char(int b, char out[3]) {
        int n = 0, cpt = b;
        bool self = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
        if (!self) {
                for (int x = 0; x < b; x++)
                        if (!((x >= 0x21 && x <= 0x7e) || (x >= 0xa1 && x <= 0xac) || x >= 0xae))
                                n++;
                cpt = 256 + n;
        }
        if (cpt < 0x80) {
                out[0] = cpt;
                out[1] = 0;
        } else {
                out[0] = 0xc0 | cpt >> 6;
                out[1] = 0x80 | (cpt & 0x3f);
                out[2] = 0;
        }
}

/* A byte-level BPE vocabulary: the 256 byte tokens (ids 0..255), a few merges, specials. */
enum {
        SYN_BPE_HE = 256, SYN_BPE_LL, SYN_BPE_HELL, SYN_BPE_HELLO, SYN_BPE_SP_W, SYN_BPE_OR,
        SYN_BPE_SP_WOR, SYN_BPE_SP_WORL, SYN_BPE_SP_WORLD, SYN_BPE_E_ACUTE, SYN_BPE_BOS,
        SYN_BPE_EOT, SYN_BPE_TOOL, SYN_BPE_N,
};

static inline uint8_t *synthetic_bpe(const char *pre, size_t *ret_size) {
        static char bytes[256][3];
        const char *tokens[SYN_BPE_N];
        int32_t types[SYN_BPE_N];
        for (int b = 0; b < 256; b++) {
                gpt2_byte_char(b, bytes[b]);
                tokens[b] = bytes[b];
                types[b] = 1;
        }
        const char *extra[] = { "he", "ll", "hell", "hello", "\xc4\xa0w", "or", "\xc4\xa0wor",
                                "\xc4\xa0worl", "\xc4\xa0world", "\xc3\x83\xc2\xa9",
                                "<|begin_of_text|>", "<|eot_id|>", "<tool>" };
        for (int i = 0; i < SYN_BPE_N - 256; i++) {
                tokens[256 + i] = extra[i];
                types[256 + i] = 1;
        }
        types[SYN_BPE_BOS] = types[SYN_BPE_EOT] = 3;
        types[SYN_BPE_TOOL] = 4;
        const char *merges[] = { "h e", "l l", "he ll", "hell o", "\xc4\xa0 w", "o r",
                                 "\xc4\xa0w or", "\xc4\xa0wor l", "\xc4\xa0worl d",
                                 "\xc3\x83 \xc2\xa9" };
        gguf_build b = {};
        gb_kv_str(&b, "general.name", "synthetic-bpe");
        gb_kv_str(&b, "tokenizer.ggml.model", "gpt2");
        if (pre)
                gb_kv_str(&b, "tokenizer.ggml.pre", pre);
        gb_kv_strs(&b, "tokenizer.ggml.tokens", tokens, SYN_BPE_N);
        gb_kv_i32s(&b, "tokenizer.ggml.token_type", types, SYN_BPE_N);
        gb_kv_strs(&b, "tokenizer.ggml.merges", merges, sizeof(merges) / sizeof(merges[0]));
        gb_kv_u32(&b, "tokenizer.ggml.bos_token_id", SYN_BPE_BOS);
        gb_kv_u32(&b, "tokenizer.ggml.eos_token_id", SYN_BPE_EOT);
        return gb_finish(&b, ret_size);
}

/* A SentencePiece vocabulary: <unk> <s> </s>, <0x00>..<0xFF> (ids 3..258), then pieces. */
enum {
        SYN_SPM_UNK, SYN_SPM_BOS, SYN_SPM_EOS, SYN_SPM_BYTE0,
        SYN_SPM_SP = 259, SYN_SPM_H, SYN_SPM_E, SYN_SPM_L, SYN_SPM_O, SYN_SPM_SP_H, SYN_SPM_HE,
        SYN_SPM_LL, SYN_SPM_HELL, SYN_SPM_SP_HELL, SYN_SPM_SP_HELLO, SYN_SPM_INST, SYN_SPM_N,
};

static inline uint8_t *synthetic_spm(size_t *ret_size) {
        static char bytes[256][8];
        const char *tokens[SYN_SPM_N] = { "<unk>", "<s>", "</s>" };
        int32_t types[SYN_SPM_N] = { 2, 3, 3 };
        float scores[SYN_SPM_N] = {};
        for (int b = 0; b < 256; b++) {
                snprintf(bytes[b], sizeof(bytes[b]), "<0x%02X>", b);
                tokens[SYN_SPM_BYTE0 + b] = bytes[b];
                types[SYN_SPM_BYTE0 + b] = 6;
        }
        const struct {
                const char *text;
                float score;
        } pieces[] = {
                { "\xe2\x96\x81", -1 }, { "h", -10 }, { "e", -10 }, { "l", -10 }, { "o", -10 },
                { "\xe2\x96\x81h", -5 }, { "he", -4 }, { "ll", -3 }, { "hell", -2 },
                { "\xe2\x96\x81hell", -6 }, { "\xe2\x96\x81hello", -1 }, { "[INST]", 0 },
        };
        for (size_t i = 0; i < sizeof(pieces) / sizeof(pieces[0]); i++) {
                tokens[SYN_SPM_SP + i] = pieces[i].text;
                scores[SYN_SPM_SP + i] = pieces[i].score;
                types[SYN_SPM_SP + i] = 1;
        }
        types[SYN_SPM_INST] = 3;
        gguf_build b = {};
        gb_kv_str(&b, "tokenizer.ggml.model", "llama");
        gb_kv_strs(&b, "tokenizer.ggml.tokens", tokens, SYN_SPM_N);
        gb_kv_f32s(&b, "tokenizer.ggml.scores", scores, SYN_SPM_N);
        gb_kv_i32s(&b, "tokenizer.ggml.token_type", types, SYN_SPM_N);
        return gb_finish(&b, ret_size);
}

/* Load a vocabulary from an in-memory file (takes ownership of mem). */
static inline int vocab_from_memory(uint8_t *mem, size_t size, loaded_vocab *v, axp_error *err) {
        *v = (loaded_vocab) { .mem = mem };
        int r = gguf_open_buffer(mem, size, &v->file, err);
        if (r >= 0)
                r = axp_tokenizer_load(v->file, &v->tok, err);
        if (r < 0) {
                gguf_close(v->file);
                free(mem);
                *v = (loaded_vocab) {};
        }
        return r;
}
