/* SPDX-License-Identifier: MIT */
/* Tokenizer tests. `unit`: synthetic vocabularies built in memory (merges, scores, byte
 * fallback, special tokens, streaming detokenization, bad files). `conformance`: llama.cpp's
 * own test vectors and golden token ids from ../shared/conformance (skipped when absent). */
#include <stdbool.h>
#include <string.h>

#include "test.h"
#include "tok-util.h"
#include "model/unicode.h"

static int32_t *tok(const axp_tokenizer *t, const char *s, unsigned flags, int *n) {
        int32_t *ids = NULL;
        axp_error err = {};
        int r = axp_tokenize(t, s, strlen(s), flags, &ids, n, &err);
        CHECK_MSG(r == 0, "tokenize '%s': %s", s, err.msg);
        return r == 0 ? ids : NULL;
}

#define CHECK_IDS(t, s, flags, ...)                                                                \
        do {                                                                                       \
                const int32_t _want[] = { __VA_ARGS__ };                                           \
                int _n = 0;                                                                        \
                int32_t *_got = tok(t, s, flags, &_n);                                             \
                bool _ok = _got && _n == (int) ELEMENTSOF(_want) &&                                \
                           memcmp(_got, _want, sizeof(_want)) == 0;                                \
                CHECK_MSG(_ok, "tokenize '%s': got %d tokens, first %d", s, _n,                    \
                          _got && _n > 0 ? _got[0] : -1);                                          \
                free(_got);                                                                        \
        } while (0)

static void load_synthetic_bpe(loaded_vocab *v, const char *pre) {
        size_t size;
        uint8_t *mem = synthetic_bpe(pre, &size);
        axp_error err = {};
        int r = vocab_from_memory(mem, size, v, &err);
        CHECK_MSG(r == 0, "%s", err.msg);
}

static void load_synthetic_spm(loaded_vocab *v) {
        size_t size;
        uint8_t *mem = synthetic_spm(&size);
        axp_error err = {};
        int r = vocab_from_memory(mem, size, v, &err);
        CHECK_MSG(r == 0, "%s", err.msg);
}

static void test_bpe_merges(void) {
        loaded_vocab v;
        load_synthetic_bpe(&v, "llama-bpe");
        if (!v.tok)
                return;
        /* a word that is a token is taken whole (ignore_merges) */
        CHECK_IDS(v.tok, "hello", 0, SYN_BPE_HELLO);
        /* otherwise merges by rank: he, ll, hell, hello; twice */
        CHECK_IDS(v.tok, "hellohello", 0, SYN_BPE_HELLO, SYN_BPE_HELLO);
        CHECK_IDS(v.tok, "hello world", 0, SYN_BPE_HELLO, SYN_BPE_SP_WORLD);
        /* no merge: single bytes */
        CHECK_IDS(v.tok, "xyz", 0, 'x', 'y', 'z');
        /* a two-byte character merged from its byte stand-ins */
        CHECK_IDS(v.tok, "\xc3\xa9", 0, SYN_BPE_E_ACUTE);
        /* BOS as the pre-tokenizer (llama-bpe) asks */
        CHECK(axp_tokenizer_add_bos(v.tok));
        CHECK_IDS(v.tok, "hello", AXP_TOK_ADD_BOS, SYN_BPE_BOS, SYN_BPE_HELLO);
        /* llama3 digits come in threes */
        CHECK_IDS(v.tok, "12345", 0, '1', '2', '3', '4', '5');
        CHECK_EQ_INT(axp_tokenizer_n_vocab(v.tok), SYN_BPE_N);
        vocab_close(&v);
}

static void test_bpe_special(void) {
        loaded_vocab v;
        load_synthetic_bpe(&v, "llama-bpe");
        if (!v.tok)
                return;
        /* control tokens only with PARSE_SPECIAL; user-defined ones always */
        CHECK_IDS(v.tok, "hello<|eot_id|>", AXP_TOK_PARSE_SPECIAL, SYN_BPE_HELLO, SYN_BPE_EOT);
        int n = 0;
        int32_t *ids = tok(v.tok, "hello<|eot_id|>", 0, &n);
        CHECK(n > 2);
        for (int i = 0; ids && i < n; i++)
                CHECK(ids[i] != SYN_BPE_EOT);
        free(ids);
        CHECK_IDS(v.tok, "<tool>hello", 0, SYN_BPE_TOOL, SYN_BPE_HELLO);
        CHECK(axp_tokenizer_is_eog(v.tok, SYN_BPE_EOT));
        CHECK(!axp_tokenizer_is_eog(v.tok, SYN_BPE_BOS));
        CHECK(!axp_tokenizer_is_eog(v.tok, -1));
        CHECK(!axp_tokenizer_is_eog(v.tok, SYN_BPE_N));
        CHECK_EQ_INT(axp_tokenizer_find(v.tok, "<|eot_id|>"), SYN_BPE_EOT);
        CHECK_EQ_INT(axp_tokenizer_find(v.tok, "<|nope|>"), -1);
        CHECK_EQ_INT(axp_tokenizer_bos(v.tok), SYN_BPE_BOS);
        CHECK_EQ_INT(axp_tokenizer_eos(v.tok), SYN_BPE_EOT);

        /* pieces: byte stand-ins decoded; control text only when asked */
        char buf[32];
        CHECK_EQ_INT(axp_token_to_piece(v.tok, SYN_BPE_SP_WORLD, false, buf, sizeof(buf)), 6);
        CHECK(memcmp(buf, " world", 6) == 0);
        CHECK_EQ_INT(axp_token_to_piece(v.tok, SYN_BPE_EOT, false, buf, sizeof(buf)), 0);
        CHECK_EQ_INT(axp_token_to_piece(v.tok, SYN_BPE_EOT, true, buf, sizeof(buf)), 10);
        CHECK(memcmp(buf, "<|eot_id|>", 10) == 0);
        CHECK_EQ_INT(axp_token_to_piece(v.tok, SYN_BPE_TOOL, false, buf, sizeof(buf)), 6);
        CHECK_EQ_INT(axp_token_to_piece(v.tok, SYN_BPE_SP_WORLD, false, buf, 3), -6);
        CHECK_EQ_INT(axp_token_to_piece(v.tok, 1 << 30, true, buf, sizeof(buf)), 0);
        vocab_close(&v);
}

static void test_pre_gpt2(void) {
        loaded_vocab v;
        /* an unknown pre-tokenizer falls back to GPT-2's regex: digits stay together, and
         * merges always run (no ignore_merges) */
        load_synthetic_bpe(&v, "something-new");
        if (!v.tok)
                return;
        CHECK(!axp_tokenizer_add_bos(v.tok));
        CHECK_IDS(v.tok, "12345 hello", 0, '1', '2', '3', '4', '5', ' ', SYN_BPE_HELLO);
        vocab_close(&v);
}

/* Piece lengths (in codepoints) of text after the given passes. */
static void check_split(const axp_split *passes, size_t n_passes, const char *text,
                        const size_t *want, size_t n_want) {
        uint32_t cpts[256];
        size_t n = 0, len = strlen(text);
        for (size_t i = 0; i < len && n < 256;) {
                size_t k;
                cpts[n++] = axp_utf8_decode((const uint8_t *) text + i, len - i, &k);
                i += k;
        }
        axp_pieces a = {}, b = {};
        axp_pieces_push(&a, n);
        for (size_t i = 0; i < n_passes; i++) {
                b.n = 0;
                CHECK(axp_pretokenize_pass(passes[i], cpts, &a, &b) == 0);
                axp_pieces t = a;
                a = b;
                b = t;
        }
        bool ok = a.n == n_want;
        for (size_t i = 0; ok && i < n_want; i++)
                ok = a.len[i] == want[i];
        CHECK_MSG(ok, "split '%s': %zu pieces, want %zu", text, a.n, n_want);
        free(a.len);
        free(b.len);
}

#define CHECK_SPLIT(passes, text, ...)                                                             \
        do {                                                                                       \
                const axp_split _p[] = { passes };                                                 \
                const size_t _w[] = { __VA_ARGS__ };                                               \
                check_split(_p, ELEMENTSOF(_p), text, _w, ELEMENTSOF(_w));                         \
        } while (0)
#define COMMA ,

/* Expected pieces are what the regexes give (checked with Python's regex module). */
static void test_pretokenizer(void) {
        CHECK_SPLIT(AXP_SPLIT_LLAMA3, "Hello world's 12345  end\n\n x", 5, 6, 2, 1, 3, 2, 1, 4, 2, 2);
        CHECK_SPLIT(AXP_SPLIT_QWEN2, "Ab 123", 2, 1, 1, 1, 1);
        CHECK_SPLIT(AXP_SPLIT_TEKKEN,
                    "HelloWorld HELLOworld \xc3\x89t\xc3\xa9\xd0\x9f\xd1\x80\xd0\xb8"
                    "\xd0\xb2\xd0\xb5\xd1\x82 42/\n",
                    5, 5, 11, 10, 1, 1, 1, 2);
        CHECK_SPLIT(AXP_SPLIT_GPT2, "it's  12 ab\t!!", 2, 2, 1, 3, 3, 1, 2);
        CHECK_SPLIT(AXP_SPLIT_GPT2, "x ", 1, 1);
        CHECK_SPLIT(AXP_SPLIT_PUNCT_RUNS COMMA AXP_SPLIT_GPT2 COMMA AXP_SPLIT_NUMBER_RUNS COMMA
                            AXP_SPLIT_DIGITS3,
                    "a, b + 12345 1234567", 1, 1, 2, 1, 1, 1, 3, 2, 1, 3, 3, 1);
        /* invalid UTF-8 decodes as U+FFFD, one byte at a time */
        size_t k;
        CHECK_EQ_INT(axp_utf8_decode((const uint8_t *) "\xe2\x82", 2, &k), 0xfffd);
        CHECK_EQ_INT(k, 1);
        CHECK_EQ_INT(axp_utf8_decode((const uint8_t *) "\xf4\x90\x80\x80", 4, &k), 0xfffd);
        CHECK_EQ_INT(axp_utf8_decode((const uint8_t *) "\xc3\xa9", 2, &k), 0xe9);
        CHECK_EQ_INT(k, 2);
}

static void test_spm(void) {
        loaded_vocab v;
        load_synthetic_spm(&v);
        if (!v.tok)
                return;
        CHECK(axp_tokenizer_add_bos(v.tok));
        CHECK_EQ_INT(axp_tokenizer_bos(v.tok), SYN_SPM_BOS);
        CHECK_EQ_INT(axp_tokenizer_eos(v.tok), SYN_SPM_EOS);
        CHECK(axp_tokenizer_is_eog(v.tok, SYN_SPM_EOS));
        /* merges in score order reach the best token through lower-scored steps */
        CHECK_IDS(v.tok, "hello", AXP_TOK_ADD_BOS, SYN_SPM_BOS, SYN_SPM_SP_HELLO);
        /* unknown characters fall back to <0xNN> byte tokens */
        CHECK_IDS(v.tok, "hex", 0, SYN_SPM_SP, SYN_SPM_HE, SYN_SPM_BYTE0 + 'x');
        CHECK_IDS(v.tok, "\xc3\xa9", 0, SYN_SPM_SP, SYN_SPM_BYTE0 + 0xc3, SYN_SPM_BYTE0 + 0xa9);
        /* text after a special token gets the space prefix again */
        CHECK_IDS(v.tok, "[INST]hello", AXP_TOK_PARSE_SPECIAL, SYN_SPM_INST, SYN_SPM_SP_HELLO);
        CHECK_IDS(v.tok, "", AXP_TOK_ADD_BOS, SYN_SPM_BOS);
        int n = -1;
        int32_t *ids = tok(v.tok, "", 0, &n);
        CHECK(ids != NULL);
        CHECK_EQ_INT(n, 0);
        free(ids);

        /* detokenizing strips the space the tokenizer added, and joins byte tokens */
        const int32_t seq[] = { SYN_SPM_SP_HELLO, SYN_SPM_SP, SYN_SPM_BYTE0 + 0xc3,
                                SYN_SPM_BYTE0 + 0xa9 };
        size_t len;
        char *s = detok_all(v.tok, seq, 4, false, &len);
        CHECK_MSG(strcmp(s, "hello \xc3\xa9") == 0, "'%s'", s);
        free(s);
        vocab_close(&v);
}

/* Streaming: a character split across tokens is held back until it completes. */
static void test_detok_streaming(void) {
        loaded_vocab v;
        load_synthetic_spm(&v);
        if (!v.tok)
                return;
        axp_detok d;
        char *out = NULL;
        size_t len = 0, cap = 0;
        axp_detok_init(&d, v.tok, false);
        d.first = false;

        CHECK_EQ_INT(axp_detok_push(&d, SYN_SPM_BYTE0 + 0xf0, &out, &len, &cap), 0);
        CHECK_EQ_INT(len, 0);
        axp_detok_push(&d, SYN_SPM_BYTE0 + 0x9f, &out, &len, &cap);
        axp_detok_push(&d, SYN_SPM_BYTE0 + 0x98, &out, &len, &cap);
        CHECK_EQ_INT(len, 0);
        axp_detok_push(&d, SYN_SPM_BYTE0 + 0x80, &out, &len, &cap);
        CHECK(len == 4 && memcmp(out, "\xf0\x9f\x98\x80", 4) == 0);

        /* a lead byte followed by ASCII: U+FFFD at the point it cannot complete, then the
         * ASCII */
        len = 0;
        axp_detok_push(&d, SYN_SPM_BYTE0 + 0xc3, &out, &len, &cap);
        CHECK_EQ_INT(len, 0);
        axp_detok_push(&d, SYN_SPM_H, &out, &len, &cap);
        CHECK(len == 4 && memcmp(out, "\xef\xbf\xbdh", 4) == 0);

        /* stray continuation byte, invalid lead bytes */
        len = 0;
        axp_detok_push(&d, SYN_SPM_BYTE0 + 0x80, &out, &len, &cap);
        axp_detok_push(&d, SYN_SPM_BYTE0 + 0xff, &out, &len, &cap);
        axp_detok_push(&d, SYN_SPM_BYTE0 + 0xc0, &out, &len, &cap);
        CHECK(len == 9 && memcmp(out, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd", 9) == 0);

        /* surrogate (ED A0) and overlong (E0 80) second bytes end the sequence early */
        len = 0;
        axp_detok_push(&d, SYN_SPM_BYTE0 + 0xed, &out, &len, &cap);
        axp_detok_push(&d, SYN_SPM_BYTE0 + 0xa0, &out, &len, &cap);
        CHECK(len == 6 && memcmp(out, "\xef\xbf\xbd\xef\xbf\xbd", 6) == 0);

        /* end of stream with an incomplete character */
        len = 0;
        axp_detok_push(&d, SYN_SPM_BYTE0 + 0xe2, &out, &len, &cap);
        axp_detok_push(&d, SYN_SPM_BYTE0 + 0x82, &out, &len, &cap);
        CHECK_EQ_INT(len, 0);
        CHECK_EQ_INT(axp_detok_flush(&d, &out, &len, &cap), 0);
        CHECK(len == 3 && memcmp(out, "\xef\xbf\xbd", 3) == 0);
        CHECK(out[len] == 0);

        /* control tokens are rendered only when asked */
        len = 0;
        axp_detok_push(&d, SYN_SPM_EOS, &out, &len, &cap);
        CHECK_EQ_INT(len, 0);
        axp_detok_init(&d, v.tok, true);
        axp_detok_push(&d, SYN_SPM_EOS, &out, &len, &cap);
        CHECK(len == 4 && memcmp(out, "</s>", 4) == 0);
        free(out);
        vocab_close(&v);
}

static int load_built(gguf_build *b, axp_error *err) {
        size_t size;
        uint8_t *mem = gb_finish(b, &size);
        loaded_vocab v;
        int r = vocab_from_memory(mem, size, &v, err);
        if (r == 0)
                vocab_close(&v);
        return r;
}

static void test_bad_files(void) {
        const char *toks[] = { "a", "b", "c" };
        const char *dups[] = { "a", "b", "a" };
        const float scores[] = { 0, 0 };
        axp_error err = {};
        gguf_build b = {};

        gb_kv_strs(&b, "tokenizer.ggml.tokens", toks, 3);
        CHECK_EQ_INT(load_built(&b, &err), -EINVAL);
        CHECK(strstr(err.msg, "tokenizer.ggml.model"));

        gb_kv_str(&b, "tokenizer.ggml.model", "bert");
        gb_kv_strs(&b, "tokenizer.ggml.tokens", toks, 3);
        CHECK_EQ_INT(load_built(&b, &err), -EOPNOTSUPP);
        CHECK(strstr(err.msg, "bert"));

        gb_kv_str(&b, "tokenizer.ggml.model", "llama");
        CHECK_EQ_INT(load_built(&b, &err), -EINVAL);
        CHECK(strstr(err.msg, "tokenizer.ggml.tokens is missing"));

        gb_kv_str(&b, "tokenizer.ggml.model", "llama");
        gb_kv_u32(&b, "tokenizer.ggml.tokens", 3);
        CHECK_EQ_INT(load_built(&b, &err), -EINVAL);
        CHECK(strstr(err.msg, "not an array of strings"));

        gb_kv_str(&b, "tokenizer.ggml.model", "llama");
        gb_kv_strs(&b, "tokenizer.ggml.tokens", dups, 3);
        CHECK_EQ_INT(load_built(&b, &err), -EINVAL);
        CHECK(strstr(err.msg, "duplicate token"));

        gb_kv_str(&b, "tokenizer.ggml.model", "llama");
        gb_kv_strs(&b, "tokenizer.ggml.tokens", toks, 3);
        gb_kv_f32s(&b, "tokenizer.ggml.scores", scores, 2);
        CHECK_EQ_INT(load_built(&b, &err), -EINVAL);
        CHECK(strstr(err.msg, "scores"));

        gb_kv_str(&b, "tokenizer.ggml.model", "llama");
        gb_kv_strs(&b, "tokenizer.ggml.tokens", toks, 3);
        gb_kv_f32s(&b, "tokenizer.ggml.token_type", scores, 2);
        CHECK_EQ_INT(load_built(&b, &err), -EINVAL);
        CHECK(strstr(err.msg, "token_type"));

        gb_kv_str(&b, "tokenizer.ggml.model", "gpt2");
        gb_kv_strs(&b, "tokenizer.ggml.tokens", toks, 3);
        CHECK_EQ_INT(load_built(&b, &err), -EINVAL);
        CHECK(strstr(err.msg, "merges"));

        /* llama-bpe adds BOS, but this vocabulary has none */
        gb_kv_str(&b, "tokenizer.ggml.model", "gpt2");
        gb_kv_str(&b, "tokenizer.ggml.pre", "llama-bpe");
        gb_kv_strs(&b, "tokenizer.ggml.tokens", toks, 3);
        gb_kv_strs(&b, "tokenizer.ggml.merges", toks, 0);
        CHECK_EQ_INT(load_built(&b, &err), -EINVAL);
        CHECK(strstr(err.msg, "BOS"));

        /* unusual but valid: empty tokens get a stand-in name, junk merges are ignored */
        const char *odd[] = { "", "a", " ", "a b c", "[EMPTY_9]" };
        gb_kv_str(&b, "tokenizer.ggml.model", "gpt2");
        gb_kv_strs(&b, "tokenizer.ggml.tokens", odd, 5);
        gb_kv_i32s(&b, "tokenizer.ggml.token_type", (const int32_t[]) { 1, 1, 99, 1, 1 }, 5);
        gb_kv_strs(&b, "tokenizer.ggml.merges", odd, 5);
        CHECK_MSG(load_built(&b, &err) == 0, "%s", err.msg);
}

/* Conformance ------------------------------------------------------------------------ */

static const char *const vocabs[] = { "llama-bpe", "qwen2", "llama-spm", "phi-3" };

static char *vocab_path(const char *name, const char *ext) {
        char rel[128];
        snprintf(rel, sizeof(rel), "vocab/ggml-vocab-%s.gguf%s", name, ext);
        return conformance_path(rel);
}

/* llama.cpp's test-tokenizer-0 vectors: add_special=false, parse_special=false. */
static void test_vocab_vectors(void) {
        for (size_t v = 0; v < ELEMENTSOF(vocabs); v++) {
                _cleanup_free_ char *gguf = vocab_path(vocabs[v], "");
                _cleanup_free_ char *inp_path = vocab_path(vocabs[v], ".inp");
                _cleanup_free_ char *out_path = vocab_path(vocabs[v], ".out");
                CHECK(gguf && inp_path && out_path);
                if (!gguf || !inp_path || !out_path)
                        continue;
                loaded_vocab lv;
                if (vocab_open(gguf, &lv) < 0) {
                        CHECK(!"vocabulary loads");
                        continue;
                }
                size_t inp_len;
                _cleanup_free_ char *inp = read_file(inp_path, &inp_len);
                _cleanup_free_ char *out = read_file(out_path, NULL);
                static const char sep[] = "\n__ggml_vocab_test__\n";
                char *p = inp, *line = out;
                int n_cases = 0, n_ok = 0, n_roundtrip = 0;
                while (p < inp + inp_len) {
                        char *end = strstr(p, sep);
                        size_t len = end ? (size_t) (end - p) : strlen(p);
                        char *eol = strchr(line, '\n');
                        if (!eol)
                                break;
                        *eol = 0;

                        int n = 0;
                        int32_t *ids = NULL;
                        axp_error err = {};
                        int r = axp_tokenize(lv.tok, p, len, 0, &ids, &n, &err);
                        char got[8192] = "";
                        size_t gl = 0;
                        for (int i = 0; r == 0 && i < n && gl < sizeof(got) - 16; i++)
                                gl += snprintf(got + gl, sizeof(got) - gl, i ? " %d" : "%d", ids[i]);
                        /* the .out lines have a leading space per id in some files; compare
                         * numbers, not spacing */
                        char want[8192] = "";
                        size_t wl = 0;
                        for (char *q = line; *q && wl < sizeof(want) - 1;) {
                                while (*q == ' ')
                                        q++;
                                if (!*q)
                                        break;
                                char *e = q;
                                while (*e && *e != ' ')
                                        e++;
                                wl += snprintf(want + wl, sizeof(want) - wl, wl ? " %.*s" : "%.*s",
                                               (int) (e - q), q);
                                q = e;
                        }
                        n_cases++;
                        if (r == 0 && strcmp(got, want) == 0)
                                n_ok++;
                        else
                                fprintf(stderr, "%s case %d '%.*s':\n  want %s\n  got  %s\n",
                                        vocabs[v], n_cases, (int) MIN(len, 60), p, want, got);

                        /* detokenizing gives the text back */
                        size_t dl;
                        char *back = detok_all(lv.tok, ids, n, false, &dl);
                        if (dl == len && memcmp(back, p, len) == 0)
                                n_roundtrip++;
                        else
                                fprintf(stderr, "%s case %d does not round-trip: '%s'\n", vocabs[v],
                                        n_cases, back);
                        free(back);
                        free(ids);
                        line = eol + 1;
                        if (!end)
                                break;
                        p = end + strlen(sep);
                }
                printf("  %s: %d/%d vectors match, %d round-trip\n", vocabs[v], n_ok, n_cases,
                       n_roundtrip);
                CHECK(n_cases >= 40);
                CHECK_EQ_INT(n_ok, n_cases);
                CHECK_EQ_INT(n_roundtrip, n_cases);
                vocab_close(&lv);
        }
}

/* The ids of "key": [ ... ] after `after` in a JSON text (enough for the golden files). */
static int json_ids(const char *json, const char *after, const char *key, int32_t *ids, int max) {
        const char *p = strstr(json, after);
        if (!p || !(p = strstr(p, key)) || !(p = strchr(p, '[')))
                return -1;
        int n = 0;
        for (p++; *p && *p != ']' && n < max;) {
                char *e;
                long v = strtol(p, &e, 10);
                if (e == p) {
                        p++;
                        continue;
                }
                ids[n++] = v;
                p = e;
        }
        return n;
}

static void test_golden_tokens(void) {
        static const char *const prompts[] = { "p1_hello", "p2_fox", "p3_paragraph", "p4_unicode",
                                               "p5_special_tokenize_only" };
        static const struct {
                const char *name;
                unsigned flags;
        } variants[] = {
                { "\"default\"", AXP_TOK_ADD_BOS | AXP_TOK_PARSE_SPECIAL },
                { "\"no_bos\"", AXP_TOK_PARSE_SPECIAL },
                { "\"no_bos_no_special\"", 0 },
                { "\"bos_no_special\"", AXP_TOK_ADD_BOS },
        };
        _cleanup_free_ char *model = conformance_path("tiny-llama3-f32.gguf");
        CHECK(model);
        loaded_vocab lv;
        if (!model || vocab_open(model, &lv) < 0)
                return;
        for (size_t p = 0; p < ELEMENTSOF(prompts); p++) {
                char rel[128];
                snprintf(rel, sizeof(rel), "golden/prompts/%s.txt", prompts[p]);
                _cleanup_free_ char *prompt_path = conformance_path(rel);
                snprintf(rel, sizeof(rel), "golden/tiny-llama3-f32/%s.tokens.json", prompts[p]);
                _cleanup_free_ char *json_path = conformance_path(rel);
                CHECK(prompt_path && json_path);
                if (!prompt_path || !json_path)
                        continue;
                size_t len;
                _cleanup_free_ char *text = read_file(prompt_path, &len);
                _cleanup_free_ char *json = read_file(json_path, NULL);
                for (size_t v = 0; v < ELEMENTSOF(variants); v++) {
                        int32_t want[2048];
                        int nw = json_ids(json, variants[v].name, "\"ids\"", want, 2048);
                        int n = 0;
                        int32_t *ids = NULL;
                        axp_error err = {};
                        int r = axp_tokenize(lv.tok, text, len, variants[v].flags, &ids, &n, &err);
                        bool ok = r == 0 && nw == n && memcmp(ids, want, n * sizeof(int32_t)) == 0;
                        CHECK_MSG(ok, "%s %s: %d tokens, want %d", prompts[p], variants[v].name, n, nw);
                        free(ids);
                }
        }
        vocab_close(&lv);
}

/* The golden greedy continuations, detokenized with special tokens rendered. */
static void test_golden_detok(void) {
        static const char *const prompts[] = { "p1_hello", "p2_fox", "p3_paragraph", "p4_unicode" };
        _cleanup_free_ char *model = conformance_path("tiny-llama3-f32.gguf");
        CHECK(model);
        loaded_vocab lv;
        if (!model || vocab_open(model, &lv) < 0)
                return;
        for (size_t p = 0; p < ELEMENTSOF(prompts); p++) {
                char rel[128];
                snprintf(rel, sizeof(rel), "golden/tiny-llama3-f32/%s.ref.json", prompts[p]);
                _cleanup_free_ char *path = conformance_path(rel);
                CHECK(path);
                if (!path)
                        continue;
                _cleanup_free_ char *json = read_file(path, NULL);
                int32_t ids[64];
                int n = json_ids(json, "\"greedy\"", "\"tokens\"", ids, 64);
                const char *hex = strstr(json, "\"text_hex\"");
                CHECK(n == 32 && hex);
                if (n != 32 || !hex)
                        continue;
                hex = strchr(hex + 10, '"') + 1;
                char want[4096];
                size_t wl = 0;
                while (hex[0] != '"' && wl < sizeof(want)) {
                        unsigned b;
                        sscanf(hex, "%2x", &b);
                        want[wl++] = b;
                        hex += 2;
                }
                size_t len;
                char *got = detok_all(lv.tok, ids, n, true, &len);
                CHECK_MSG(len == wl && memcmp(got, want, wl) == 0, "%s: '%s'", prompts[p], got);
                free(got);
        }
        vocab_close(&lv);
}

static void test_vocab_specials(void) {
        loaded_vocab lv;
        _cleanup_free_ char *bpe = vocab_path("llama-bpe", "");
        if (bpe && vocab_open(bpe, &lv) == 0) {
                CHECK_EQ_INT(axp_tokenizer_n_vocab(lv.tok), 128256);
                CHECK_EQ_INT(axp_tokenizer_bos(lv.tok), 128000);
                CHECK_EQ_INT(axp_tokenizer_eos(lv.tok), 128001);
                CHECK(axp_tokenizer_add_bos(lv.tok));
                CHECK(axp_tokenizer_is_eog(lv.tok, 128001));
                CHECK(axp_tokenizer_is_eog(lv.tok, 128009));
                CHECK(!axp_tokenizer_is_eog(lv.tok, 128000));
                CHECK(!axp_tokenizer_is_eog(lv.tok, 128006));
                CHECK_EQ_INT(axp_tokenizer_find(lv.tok, "<|eot_id|>"), 128009);
                CHECK_EQ_INT(axp_tokenizer_find(lv.tok, "<|start_header_id|>"), 128006);
                int n_eog = 0;
                for (int i = 0; i < 128256; i++)
                        n_eog += axp_tokenizer_is_eog(lv.tok, i);
                CHECK_EQ_INT(n_eog, 2);
                vocab_close(&lv);
        }
        _cleanup_free_ char *qwen = vocab_path("qwen2", "");
        if (qwen && vocab_open(qwen, &lv) == 0) {
                CHECK(!axp_tokenizer_add_bos(lv.tok));
                CHECK_EQ_INT(axp_tokenizer_bos(lv.tok), 151643);
                CHECK(axp_tokenizer_is_eog(lv.tok, 151643));
                CHECK(axp_tokenizer_is_eog(lv.tok, 151645));
                CHECK(!axp_tokenizer_is_eog(lv.tok, 151644));
                /* user-defined tokens are matched even without PARSE_SPECIAL */
                CHECK_IDS(lv.tok, "a[PAD151700]b", 0, 64, 151700, 65);
                CHECK_IDS(lv.tok, "<|im_start|>user", AXP_TOK_PARSE_SPECIAL, 151644, 872);
                CHECK_IDS(lv.tok, "hi", AXP_TOK_ADD_BOS, 6023);
                vocab_close(&lv);
        }
        _cleanup_free_ char *spm = vocab_path("llama-spm", "");
        if (spm && vocab_open(spm, &lv) == 0) {
                CHECK(axp_tokenizer_add_bos(lv.tok));
                CHECK_EQ_INT(axp_tokenizer_bos(lv.tok), 1);
                CHECK(axp_tokenizer_is_eog(lv.tok, 2));
                CHECK(!axp_tokenizer_is_eog(lv.tok, 1));
                vocab_close(&lv);
        }
        _cleanup_free_ char *phi = vocab_path("phi-3", "");
        if (phi && vocab_open(phi, &lv) == 0) {
                CHECK_EQ_INT(axp_tokenizer_eos(lv.tok), 32000);
                CHECK(axp_tokenizer_is_eog(lv.tok, 32000));
                CHECK(axp_tokenizer_is_eog(lv.tok, 32007));
                CHECK(!axp_tokenizer_is_eog(lv.tok, 32010));
                /* Phi-3's special tokens swallow the white space after them */
                int n = 0;
                int32_t *a = tok(lv.tok, "<|user|>\nHi", AXP_TOK_PARSE_SPECIAL, &n);
                int m = 0;
                int32_t *b = tok(lv.tok, "<|user|>Hi", AXP_TOK_PARSE_SPECIAL, &m);
                CHECK(a && b && n == m && memcmp(a, b, n * sizeof(int32_t)) == 0);
                free(a);
                free(b);
                vocab_close(&lv);
        }
}

int main(int argc, char **argv) {
        bool conformance = argc > 1 && strcmp(argv[1], "conformance") == 0;

        if (!conformance) {
                RUN(test_bpe_merges);
                RUN(test_bpe_special);
                RUN(test_pre_gpt2);
                RUN(test_pretokenizer);
                RUN(test_spm);
                RUN(test_detok_streaming);
                RUN(test_bad_files);
                TEST_EXIT();
        }

        _cleanup_free_ char *probe = conformance_path("vocab/ggml-vocab-llama-bpe.gguf");
        if (!probe)
                TEST_SKIP("conformance data not found (set AXP_CONFORMANCE_DIR)");
        RUN(test_vocab_vectors);
        RUN(test_golden_tokens);
        RUN(test_golden_detok);
        RUN(test_vocab_specials);
        TEST_EXIT();
}
