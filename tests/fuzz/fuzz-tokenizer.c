/* SPDX-License-Identifier: MIT */
/* libFuzzer target: arbitrary bytes through the tokenizer (with and without special-token
 * parsing, with and without BOS) and back through the streaming detokenizer. For byte-level
 * BPE, well-formed UTF-8 must come back byte for byte.
 *
 * The first input byte picks the vocabulary: a synthetic byte-level BPE one built in memory,
 * and, when the conformance data is there ($AXP_CONFORMANCE_DIR, else the folder meson was
 * configured with), llama.cpp's llama-bpe, qwen2 and llama-spm test vocabularies (each
 * loaded once). A first byte of 0xff instead makes the rest a GGUF file whose vocabulary is
 * loaded (it must load or fail with a message) and, if it loads, used on a few texts. Run
 * with tools/run-fuzz. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok-util.h"
#include "base/utf8.h"

typedef struct fuzz_vocab {
        loaded_vocab v;
        bool byte_level;
} fuzz_vocab;

static fuzz_vocab vocabs[4];
static size_t n_vocabs;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
#ifdef AXP_CONFORMANCE_DEFAULT
        setenv("AXP_CONFORMANCE_DIR", AXP_CONFORMANCE_DEFAULT, 0);
#endif
        size_t size;
        uint8_t *mem = synthetic_bpe("llama-bpe", &size);
        axp_error err = {};
        if (vocab_from_memory(mem, size, &vocabs[0].v, &err) < 0) {
                fprintf(stderr, "synthetic vocabulary: %s\n", err.msg);
                abort();
        }
        vocabs[0].byte_level = true;
        n_vocabs = 1;

        static const struct {
                const char *rel;
                bool byte_level;
        } files[] = {
                { "vocab/ggml-vocab-llama-bpe.gguf", true },
                { "vocab/ggml-vocab-qwen2.gguf", true },
                { "vocab/ggml-vocab-llama-spm.gguf", false },
        };
        for (size_t i = 0; i < ELEMENTSOF(files); i++) {
                char *path = conformance_path(files[i].rel);
                if (path && vocab_open(path, &vocabs[n_vocabs].v) == 0)
                        vocabs[n_vocabs++].byte_level = files[i].byte_level;
                free(path);
        }
        fprintf(stderr, "fuzz-tokenizer: %zu vocabularies\n", n_vocabs);
        return 0;
}

static const unsigned modes[] = { 0, AXP_TOK_PARSE_SPECIAL, AXP_TOK_ADD_BOS | AXP_TOK_PARSE_SPECIAL };

static void fuzz_text(const axp_tokenizer *t, bool byte_level, const char *text, size_t len);
static void fuzz_fim(const axp_tokenizer *t, const char *text, size_t len);

/* A hostile vocabulary: loading fails cleanly or gives a tokenizer that works. */
static void fuzz_vocab_file(const uint8_t *data, size_t size) {
        static const char *const texts[] = {
                "Hello world", "<|begin_of_text|>Hi<|eot_id|> <s>[INST]", "caf\xc3\xa9 \xf0\x9f\x98\x80 12345",
                "\xe2\x82 \xff", "",
        };
        gguf_file *f = NULL;
        axp_tokenizer *t = NULL;
        axp_error err = {};
        if (gguf_open_buffer(data, size, &f, &err) < 0)
                return;
        if (axp_tokenizer_load(f, &t, &err) < 0) {
                if (!err.msg[0] || strchr(err.msg, '\n'))
                        abort(); /* a one-line message, always */
        } else {
                for (size_t i = 0; i < ELEMENTSOF(texts); i++)
                        fuzz_text(t, false, texts[i], strlen(texts[i]));
        }
        axp_tokenizer_free(t);
        gguf_close(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (size == 0)
                return 0;
        if (data[0] == 0xff) {
                fuzz_vocab_file(data + 1, size - 1);
                return 0;
        }
        const fuzz_vocab *fv = &vocabs[data[0] % n_vocabs];
        fuzz_text(fv->v.tok, fv->byte_level, (const char *) data + 1, size - 1);
        fuzz_fim(fv->v.tok, (const char *) data + 1, size - 1);
        return 0;
}

/* Fill in the middle with the text cut in four (prefix, typed text, another file's chunk,
 * suffix), fitted in a small context and not: llama.cpp's markers in their places, or a
 * one-line refusal for a vocabulary without them. */
static void fuzz_fim(const axp_tokenizer *t, const char *text, size_t len) {
        if (memchr(text, 0, len))
                return;
        char *s = malloc(len + 4);
        if (!s)
                abort();
        const char *part[4];
        size_t at = 0;
        for (int i = 0; i < 4; i++) {
                size_t n = i < 3 ? len / 4 : len - 3 * (len / 4);
                memcpy(s + at + i, text + at, n);
                s[at + i + n] = 0;
                part[i] = s + at + i;
                at += n;
        }
        const axp_fim_tokens *fim = axp_tokenizer_fim(t);
        axp_fim_chunk chunk = { .filename = part[2][0] ? part[2] : NULL, .text = part[2] };
        for (int fit = 0; fit < 2; fit++) {
                axp_fim_prompt p = { .prefix = part[0], .suffix = part[3], .middle = part[1], .extra = &chunk,
                                     .n_extra = 1, .fit = fit, .n_ctx = 2048 + (int) len, .n_predict = 4 };
                int32_t *ids = NULL;
                int n = 0;
                bool cut = false;
                axp_error err = {};
                int r = axp_tokenize_fim(t, &p, &ids, &n, &cut, &err);
                if (r < 0) {
                        if (r != -EINVAL || fim->pre >= 0 || !err.msg[0] || strchr(err.msg, '\n'))
                                abort();
                        continue;
                }
                if (n < 3 || ids[n - 1] != fim->mid || (!fit && cut))
                        abort();
                for (int i = 0; i < n; i++)
                        if (ids[i] < 0 || ids[i] >= axp_tokenizer_n_vocab(t))
                                abort();
                /* fitted: the prefix at most 1536 tokens, the suffix 510, the extra part len - 8 */
                if (fit && n > 1536 + 512 + (int) len + 8)
                        abort();
                free(ids);
        }
        free(s);
}

static void fuzz_text(const axp_tokenizer *t, bool byte_level, const char *text, size_t len) {
        bool valid = axp_utf8_valid(text, len, NULL);

        for (size_t m = 0; m < ELEMENTSOF(modes); m++) {
                int32_t *ids = NULL;
                int n = 0;
                axp_error err = {};
                if (axp_tokenize(t, text, len, modes[m], &ids, &n, &err) < 0) {
                        fprintf(stderr, "tokenize failed: %s\n", err.msg);
                        abort();
                }
                for (int i = 0; i < n; i++) {
                        if (ids[i] < 0 || ids[i] >= axp_tokenizer_n_vocab(t))
                                abort();
                        char small[4];
                        int r = axp_token_to_piece(t, ids[i], true, small, sizeof(small));
                        if (r > (int) sizeof(small))
                                abort();
                }

                bool special = modes[m] & AXP_TOK_PARSE_SPECIAL;
                size_t out_len;
                char *out = detok_all(t, ids, n, special, &out_len);
                if (!axp_utf8_valid(out, out_len, NULL))
                        abort(); /* the detokenizer only ever releases well-formed text */
                if (byte_level && valid && !(modes[m] & AXP_TOK_ADD_BOS) &&
                    (out_len != len || memcmp(out, text, len) != 0)) {
                        fprintf(stderr, "round trip differs (mode %u): %zu bytes in, %zu out\n",
                                modes[m], len, out_len);
                        abort();
                }
                free(out);
                free(ids);
        }
}
