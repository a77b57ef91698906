/* SPDX-License-Identifier: MIT */
/* Grammars and the matcher on llama.cpp's Llama 3 vocabulary (128k tokens): grammars that
 * must be refused (with what the message names), and random walks through classic shapes,
 * where every step's mask agrees with the token-by-token check and the text that comes out
 * is checked by a small parser written for each shape. */
#include <ctype.h>
#include <errno.h>

#include "model/grammar.h"
#include "test.h"
#include "tok-util.h"
#include "base/rng.h"

static loaded_vocab vocab;
static axp_vocab_trie *trie;

static void refuse(const char *g, const char *want) {
        axp_grammar *gr = NULL;
        axp_error err = {};
        int r = axp_grammar_parse(g, strlen(g), &gr, &err);
        CHECK_MSG(r == -EINVAL, "accepted: %s", g);
        CHECK_MSG(strstr(err.msg, want) != NULL, "'%s' does not say '%s'", err.msg, want);
        axp_grammar_free(gr);
}

static size_t min_bytes(const char *g) {
        axp_grammar *gr = NULL;
        axp_error err = {};
        CHECK_MSG(axp_grammar_parse(g, strlen(g), &gr, &err) == 0, "%s: %s", g, err.msg);
        size_t n = gr ? axp_grammar_min_bytes(gr) : 0;
        axp_grammar_free(gr);
        return n;
}

/* The shortest text of a grammar (a request whose max_tokens cannot hold it is refused): a
 * character class takes the UTF-8 length of the smallest character it matches, not of its
 * first range's start (which made [\u00e9a]{3} six bytes and read past the ranges of []). */
static void test_min_bytes(void) {
        CHECK_EQ_INT((long) min_bytes("root ::= [\\u00e9a]{3}\n"), 3);
        CHECK_EQ_INT((long) min_bytes("root ::= [\\u4e00-\\u9fff] \"x\"\n"), 4);
        CHECK_EQ_INT((long) min_bytes("root ::= [^\\x00-\\x7f]\n"), 2);
        CHECK_EQ_INT((long) min_bytes("root ::= [^\\x00-\\x7f\\u0080-\\u07ff]\n"), 3);
        CHECK_EQ_INT((long) min_bytes("root ::= [^a]\n"), 1);
        CHECK_EQ_INT((long) min_bytes("root ::= [^]\n"), 1);
        CHECK_EQ_INT((long) min_bytes("root ::= [\\u00e9-\\u00ff0-9]{2} | \"\\u00e9\\u00e9\\u00e9\"\n"), 2);
}

/* A pattern in a schema of one string, as a grammar */
static int pattern_to_gbnf(const char *pattern, char **gbnf, axp_error *err) {
        char schema[128];
        snprintf(schema, sizeof(schema), "{\"type\": \"string\", \"pattern\": \"%s\"}", pattern);
        return axp_json_schema_to_gbnf(schema, strlen(schema), gbnf, err);
}

/* A JSON Schema pattern that repeats without bound a part that may match nothing was refused
 * with the grammar's message about a left-recursive generated rule, naming nothing the user
 * wrote; the pattern's converter now says what is wrong. Bounded repeats of such a part, and
 * unbounded ones of parts that always read a character, still convert. */
static void test_patterns_repeating_nothing(void) {
        static const char *const refused[] = { "^((a|b)*)*$", "^(a|)+$", "^(b?){2,}$", "(c*d?)*" };
        static const char *const taken[] = { "^(b?){2,5}$", "^(a*|b)c$", "^((a|b)+)*$", "^(x?y)*$", "^(a|b?)c+$" };
        for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
                char *gbnf = NULL;
                axp_error err = {};
                int r = pattern_to_gbnf(refused[i], &gbnf, &err);
                CHECK_MSG(r == -EINVAL && strstr(err.msg, "may match nothing"), "%s: %d %s", refused[i], r, err.msg);
                free(gbnf);
        }
        for (size_t i = 0; i < sizeof(taken) / sizeof(taken[0]); i++) {
                char *gbnf = NULL;
                axp_error err = {};
                axp_grammar *g = NULL;
                int r = pattern_to_gbnf(taken[i], &gbnf, &err);
                CHECK_MSG(r == 0, "%s: %s", taken[i], err.msg);
                CHECK_MSG(r < 0 || axp_grammar_parse(gbnf, strlen(gbnf), &g, &err) == 0, "%s: %s", taken[i], err.msg);
                axp_grammar_free(g);
                free(gbnf);
        }
}

static void test_refused(void) {
        refuse("root ::= []\n", "empty character class");
        refuse("root ::= item\n", "'item' is used but not defined");
        refuse("item ::= \"a\"\n", "no rule 'root'");
        refuse("root ::= root \"a\" | \"b\"\n", "left-recursive");
        refuse("root ::= a\na ::= b? root \"x\" | \"y\"\nb ::= \"z\"\n", "left-recursive");
        refuse("root ::= \"a\" root\n", "can ever complete");
        refuse("root ::= \"a\n", "closing");
        refuse("root ::= [ab\n", "closing");
        refuse("root ::= (\"a\" | \"b\"\n", "')'");
        refuse("root ::= \"a\"{3,2}\n", "m > n");
        refuse("root ::= \"\\q\"\n", "unknown escape");
        /* a surrogate is no character UTF-8 holds: as an escape, in a range, encoded; and an
         * overlong encoding */
        refuse("root ::= \"a\" [\\uD800-\\uDFFF]\n", "U+D800 is a UTF-16 surrogate");
        refuse("root ::= \"\\uDE00\"\n", "surrogate");
        refuse("root ::= [^\\x00-\\uD7FF\\uE000-\\U0010FFFF]\n", "can ever complete");
        refuse("root ::= \"\xed\xa0\x80\"\n", "invalid UTF-8");
        refuse("root ::= \"\xc1\x81\"\n", "invalid UTF-8");
        refuse("root ::= \"\xe0\x81\x81\"\n", "invalid UTF-8");
        refuse("root ::= \"a\"\nroot ::= \"b\"\n", "defined twice");
        refuse("root = \"a\"\n", "'::='");
        refuse("root ::= *\n", "nothing before it");
        char *big = malloc(AXP_GRAMMAR_MAX_BYTES + 64);
        strcpy(big, "root ::= \"");
        memset(big + 10, 'a', AXP_GRAMMAR_MAX_BYTES);
        strcpy(big + 10 + AXP_GRAMMAR_MAX_BYTES, "\"\n");
        refuse(big, "at most");
        /* groups nested deeper than the bound (the parser recursed until the stack overflowed:
         * 30000 crashed a process with an 8 MiB stack), and the bound itself accepted */
        static const int depths[] = { AXP_GRAMMAR_MAX_NESTING, AXP_GRAMMAR_MAX_NESTING + 1, 30000 };
        for (size_t i = 0; i < sizeof(depths) / sizeof(depths[0]); i++) {
                int depth = depths[i];
                int n = sprintf(big, "root ::= ");
                memset(big + n, '(', (size_t) depth);
                n += depth;
                n += sprintf(big + n, "\"a\"");
                memset(big + n, ')', (size_t) depth);
                strcpy(big + n + depth, "\n");
                if (depth > AXP_GRAMMAR_MAX_NESTING)
                        refuse(big, "nested more than");
                else {
                        axp_grammar *gr = NULL;
                        axp_error err = {};
                        CHECK_MSG(axp_grammar_parse(big, strlen(big), &gr, &err) == 0, "%d groups deep: %s", depth,
                                  err.msg);
                        axp_grammar_free(gr);
                }
        }
        free(big);
        refuse("root ::= \"a\"{4000} \"b\"{4000} \"c\"{4000} \"d\"{4000} \"e\"{4000} \"f\"{4000} "
               "\"g\"{4000} \"h\"{4000} \"i\"{4000} \"j\"{4000} \"k\"{4000} \"l\"{4000} \"m\"{4000} "
               "\"n\"{4000} \"o\"{4000} \"p\"{4000} \"q\"{4000}\n",
               "too large");
}

static char *piece(int32_t id) {
        static char buf[1024];
        int n = axp_token_to_piece(vocab.tok, id, false, buf, sizeof(buf) - 1);
        buf[n > 0 ? n : 0] = 0;
        return buf;
}

/* Walk the grammar with random allowed tokens (each step checks the mask against the
 * token-by-token check on a sample); the text into out. Returns false if it did not end. */
static bool walk(const char *grammar, uint64_t seed, int max_steps, char *out, size_t cap) {
        axp_grammar *g = NULL;
        axp_matcher *m = NULL;
        axp_error err = {};
        int n_vocab = axp_tokenizer_n_vocab(vocab.tok);
        uint8_t *allowed = malloc(n_vocab);
        axp_rng rng;
        bool ended = false;
        size_t len = 0;
        axp_rng_seed(&rng, seed);
        out[0] = 0;
        CHECK_MSG(axp_grammar_parse(grammar, strlen(grammar), &g, &err) == 0, "%s", err.msg);
        if (!g)
                goto done;
        CHECK(axp_matcher_new(g, trie, &m, &err) == 0);
        for (int step = 0; step < max_steps; step++) {
                int n = axp_matcher_mask(m, allowed);
                CHECK(n > 0);
                if (n == 0)
                        break;
                for (int k = 0; k < 300; k++) {
                        int32_t id = (int32_t) (axp_rng_uniform(&rng) * n_vocab);
                        CHECK_MSG(axp_matcher_allows(m, id) == (bool) allowed[id], "token %d '%s': mask %d",
                                  id, piece(id), allowed[id]);
                }
                /* prefer longer tokens now and then, to cross symbols */
                int pick = (int) (axp_rng_uniform(&rng) * n), id = -1;
                for (int i = 0; i < n_vocab; i++)
                        if (allowed[i] && pick-- == 0) {
                                id = i;
                                break;
                        }
                CHECK(axp_matcher_allows(m, id));
                if (axp_tokenizer_is_eog(vocab.tok, id)) {
                        ended = true;
                        break;
                }
                axp_matcher_accept(m, id);
                const char *p = piece(id);
                size_t l = strlen(p);
                if (len + l + 1 < cap) {
                        memcpy(out + len, p, l + 1);
                        len += l;
                }
                if (axp_matcher_finished(m)) {
                        ended = true;
                        break;
                }
        }
done:
        axp_matcher_free(m);
        axp_grammar_free(g);
        free(allowed);
        return ended;
}

/* Checkers ----------------------------------------------------------------------------------- */

static bool is_number_list(const char *s) {
        if (*s++ != '[')
                return false;
        if (*s == ']')
                return s[1] == 0;
        for (;;) {
                if (*s == '-')
                        s++;
                if (!isdigit((unsigned char) *s))
                        return false;
                while (isdigit((unsigned char) *s))
                        s++;
                if (*s == ']')
                        return s[1] == 0;
                if (*s++ != ',')
                        return false;
                while (*s == ' ')
                        s++;
        }
}

static bool is_date(const char *s) {
        int y, mo, d, n = 0;
        return strlen(s) == 10 && sscanf(s, "%4d-%2d-%2d%n", &y, &mo, &d, &n) == 3 && n == 10 && mo >= 1 &&
               mo <= 12 && d >= 1 && d <= 31;
}

static const char *expr(const char *s);
static const char *term(const char *s) {
        if (*s == '(') {
                s = expr(s + 1);
                return s && *s == ')' ? s + 1 : NULL;
        }
        if (!isdigit((unsigned char) *s) && !(*s >= 'a' && *s <= 'z'))
                return NULL;
        while (isdigit((unsigned char) *s) || (*s >= 'a' && *s <= 'z'))
                s++;
        return s;
}
static const char *expr(const char *s) {
        for (;;) {
                while (*s == ' ')
                        s++;
                if (!(s = term(s)))
                        return NULL;
                while (*s == ' ')
                        s++;
                if (*s != '+' && *s != '-' && *s != '*' && *s != '/')
                        return s;
                s++;
        }
}

static void run_shape(const char *name, const char *grammar, bool (*ok)(const char *), int walks) {
        char text[4096];
        int ended = 0;
        for (int i = 0; i < walks; i++) {
                if (!walk(grammar, 1000 + i, 200, text, sizeof(text)))
                        continue;
                ended++;
                CHECK_MSG(ok(text), "%s: '%s'", name, text);
        }
        CHECK_MSG(ended > 0, "%s: no walk ended", name);
}

static bool is_arith(const char *s) {
        const char *e = expr(s);
        return e && *e == 0;
}

static bool is_utf8_choice(const char *s) {
        return strcmp(s, "café") == 0 || strcmp(s, "日本語") == 0 || strcmp(s, "🙂 ok") == 0;
}

/* 18 to 20 of x, up to 20 digits and ';' */
static bool is_segments(const char *s) {
        int n = 0;
        for (; *s; n++) {
                if (*s++ != 'x')
                        return false;
                int d = 0;
                while (isdigit((unsigned char) *s))
                        s++, d++;
                if (d > 20 || *s++ != ';')
                        return false;
        }
        return n >= 18 && n <= 20;
}

static void test_shapes(void) {
        run_shape("number list",
                  "root ::= \"[\" (num (\",\" \" \"? num)*)? \"]\"\nnum ::= \"-\"? [0-9]{1,6}\n",
                  is_number_list, 20);
        run_shape("date",
                  "root ::= year \"-\" month \"-\" day\nyear ::= [12] [0-9]{3}\n"
                  "month ::= \"0\" [1-9] | \"1\" [0-2]\nday ::= \"0\" [1-9] | [12] [0-9] | \"3\" [01]\n",
                  is_date, 20);
        run_shape("arithmetic",
                  "root ::= expr\nexpr ::= term (\" \"? [-+*/] \" \"? term){0,4}\n"
                  "term ::= [0-9]{1,4} | [a-z]{1,3} | \"(\" expr \")\"\n",
                  is_arith, 20);
        run_shape("bounded repetitions past a token's length",
                  "root ::= (\"x\" [0-9]{0,20} \";\"){18,20}\n", is_segments, 20);
        run_shape("UTF-8 choice", "root ::= \"café\" | \"日本語\" | \"🙂 ok\"\n", is_utf8_choice, 20);
}

/* One token covering several symbols: '{"' and '":' each cover two; and tokens ending inside a character are allowed only where
 * the character may come. */
static void test_spanning(void) {
        axp_grammar *g = NULL;
        axp_matcher *m = NULL;
        axp_error err = {};
        const char *gr = "root ::= \"{\" \"\\\"\" [a-z]+ \"\\\"\" \":\" [0-9]+ \"}\"\n";
        CHECK_MSG(axp_grammar_parse(gr, strlen(gr), &g, &err) == 0, "%s", err.msg);
        CHECK(axp_matcher_new(g, trie, &m, &err) == 0);
        int32_t open_quote = axp_tokenizer_find(vocab.tok, "{\""), quote_colon = axp_tokenizer_find(vocab.tok, "\":"),
                open = axp_tokenizer_find(vocab.tok, "["), close = axp_tokenizer_find(vocab.tok, "}");
        CHECK(open_quote >= 0 && quote_colon >= 0 && open >= 0 && close >= 0);
        CHECK(axp_matcher_allows(m, open_quote));
        CHECK(!axp_matcher_allows(m, open));
        axp_matcher_accept(m, open_quote);
        int32_t *ids = NULL;
        int n = 0;
        CHECK(axp_tokenize(vocab.tok, "key", 3, 0, &ids, &n, &err) == 0);
        CHECK(n == 1 && axp_matcher_allows(m, ids[0]));
        CHECK(!axp_matcher_allows(m, quote_colon));
        axp_matcher_accept(m, ids[0]);
        free(ids);
        CHECK(axp_matcher_allows(m, quote_colon));
        CHECK(!axp_matcher_allows(m, close));
        axp_matcher_accept(m, quote_colon);
        CHECK(axp_tokenize(vocab.tok, "42", 2, 0, &ids, &n, &err) == 0);
        CHECK(n == 1 && axp_matcher_allows(m, ids[0]));
        axp_matcher_accept(m, ids[0]);
        free(ids);
        CHECK(!axp_matcher_complete(m));
        CHECK(axp_matcher_allows(m, close));
        axp_matcher_accept(m, close);
        CHECK(axp_matcher_finished(m));
        axp_matcher_free(m);
        axp_grammar_free(g);

        /* "é" is two bytes: a byte token holding its first byte is allowed, another is not */
        gr = "root ::= \"é\" \"!\"\n";
        CHECK(axp_grammar_parse(gr, strlen(gr), &g, &err) == 0);
        CHECK(axp_matcher_new(g, trie, &m, &err) == 0);
        int32_t c3 = axp_tokenizer_find(vocab.tok, "Ã"), c4 = axp_tokenizer_find(vocab.tok, "Ä"),
                a9 = axp_tokenizer_find(vocab.tok, "©");
        CHECK(c3 >= 0 && c4 >= 0 && a9 >= 0);
        CHECK(axp_matcher_allows(m, c3));
        CHECK(!axp_matcher_allows(m, c4));
        axp_matcher_accept(m, c3);
        CHECK(axp_matcher_allows(m, a9));
        CHECK(!axp_matcher_allows(m, open));
        axp_matcher_accept(m, a9);
        CHECK(!axp_matcher_complete(m));
        axp_matcher_free(m);
        axp_grammar_free(g);
}

/* The token whose bytes are the one byte b. */
static int32_t byte_token(uint8_t b) {
        for (int32_t id = 0; id < axp_tokenizer_n_vocab(vocab.tok); id++) {
                char buf[8];
                if (axp_token_to_piece(vocab.tok, id, false, buf, sizeof(buf)) == 1 && (uint8_t) buf[0] == b)
                        return id;
        }
        return -1;
}

static void mask_agrees(axp_matcher *m, uint8_t *allowed, const char *where);

/* A partial character is allowed only where it can still become one that UTF-8 holds: after
 * 0xED, a continuation byte of 0xA0 or more makes a surrogate (U+D800..U+DFFF), which no byte
 * can finish; were it taken, no token could follow (a sampled byte token did that once). */
static void test_no_surrogates(void) {
        axp_grammar *g = NULL;
        axp_matcher *m = NULL;
        axp_error err = {};
        const char *gr = "root ::= [^\\x00]*\n";
        int32_t ed = byte_token(0xED), b9 = byte_token(0xB9), a0 = byte_token(0xA0), x9f = byte_token(0x9F),
                x80 = byte_token(0x80);
        uint8_t *allowed = malloc((size_t) axp_tokenizer_n_vocab(vocab.tok));
        CHECK(ed >= 0 && b9 >= 0 && a0 >= 0 && x9f >= 0 && x80 >= 0 && allowed);
        CHECK_MSG(axp_grammar_parse(gr, strlen(gr), &g, &err) == 0, "%s", err.msg);
        CHECK(axp_matcher_new(g, trie, &m, &err) == 0);
        CHECK(axp_matcher_allows(m, ed));
        CHECK(axp_matcher_accept(m, ed));
        CHECK(!axp_matcher_allows(m, b9));
        CHECK(!axp_matcher_allows(m, a0));
        CHECK(axp_matcher_allows(m, x9f));
        mask_agrees(m, allowed, "after 0xED");
        CHECK(axp_matcher_accept(m, x9f));
        CHECK(axp_matcher_allows(m, x80)); /* U+D7C0 */
        CHECK(axp_matcher_accept(m, x80));
        CHECK(axp_matcher_complete(m));
        axp_matcher_free(m);
        axp_grammar_free(g);
        free(allowed);
}

/* Whether a grammar takes text whole, fed one byte token at a time */
static bool takes_text(const char *gbnf, const char *text) {
        axp_grammar *g = NULL;
        axp_matcher *m = NULL;
        axp_error err = {};
        bool ok = true;
        CHECK_MSG(axp_grammar_parse(gbnf, strlen(gbnf), &g, &err) == 0, "%s", err.msg);
        CHECK(axp_matcher_new(g, trie, &m, &err) == 0);
        for (const char *c = text; ok && *c; c++) {
                int32_t t = byte_token((uint8_t) *c);
                ok = t >= 0 && axp_matcher_allows(m, t) && axp_matcher_accept(m, t);
        }
        ok = ok && axp_matcher_complete(m);
        axp_matcher_free(m);
        axp_grammar_free(g);
        return ok;
}

/* A JSON string's \u escapes name characters: a lone surrogate escape (which JSON readers,
 * the monitor's among them, refuse) is not JSON a schema's answer may hold; a pair is. */
static void test_json_escapes(void) {
        char *gbnf = NULL;
        axp_error err = {};
        const char *schema = "{\"type\": \"string\"}";
        CHECK_MSG(axp_json_schema_to_gbnf(schema, strlen(schema), &gbnf, &err) == 0, "%s", err.msg);
        static const char *const good[] = { "\"ab\"", "\"\\u00e9\"", "\"\\ud83d\\ude00\"", "\"\\uD83D\\uDE00\"",
                                            "\"\\uE000\\n\"", "\"\\ud7ff\"" };
        static const char *const bad[] = { "\"\\ud800\"", "\"\\uDC00\"", "\"\\ud83d\\u0041\"", "\"\\ud83d\"",
                                           "\"\\ude00\\ud83d\"" };
        for (size_t i = 0; i < ELEMENTSOF(good); i++)
                CHECK_MSG(takes_text(gbnf, good[i]), "%s refused", good[i]);
        for (size_t i = 0; i < ELEMENTSOF(bad); i++)
                CHECK_MSG(!takes_text(gbnf, bad[i]), "%s taken", bad[i]);
        free(gbnf);
}

/* Every token: the mask says what the token-by-token check says. */
static void mask_agrees(axp_matcher *m, uint8_t *allowed, const char *where) {
        int n_vocab = axp_tokenizer_n_vocab(vocab.tok), n = axp_matcher_mask(m, allowed), count = 0;
        for (int32_t id = 0; id < n_vocab; id++) {
                count += allowed[id];
                CHECK_MSG(axp_matcher_allows(m, id) == (bool) allowed[id], "%s: token %d '%s': mask %d", where,
                          id, piece(id), allowed[id]);
        }
        CHECK(n == count);
}

/* Bounded strings at their bounds: after c characters a token of L more is allowed exactly when
 * c + L <= maxLength, the closing quote exactly when c >= minLength; with lengths past what one
 * token can hold, where the mask is remembered for the places a token cannot tell apart. */
static void test_bounded_strings(void) {
        static const struct { unsigned min, max; } cases[] = { { 0, 400 }, { 1, 80 }, { 30, 60 }, { 40, 40 }, { 3, 17 } };
        int n_vocab = axp_tokenizer_n_vocab(vocab.tok);
        uint8_t *allowed = malloc(n_vocab);
        /* a token of each length 1..40 made of letters only */
        int32_t of_len[41] = {};
        for (int32_t id = 0; id < n_vocab; id++) {
                const char *p = piece(id);
                size_t l = strlen(p), k = 0;
                while (k < l && isalpha((unsigned char) p[k]))
                        k++;
                if (k == l && l >= 1 && l <= 40 && !of_len[l])
                        of_len[l] = id;
        }
        int32_t a = axp_tokenizer_find(vocab.tok, "a"), quote = axp_tokenizer_find(vocab.tok, "\"");
        CHECK(a >= 0 && quote >= 0 && of_len[1] && of_len[16] && of_len[17] && of_len[18]);
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                char schema[160], *gbnf = NULL;
                axp_grammar *g = NULL;
                axp_matcher *m = NULL;
                axp_error err = {};
                unsigned min = cases[i].min, max = cases[i].max;
                snprintf(schema, sizeof(schema), "{\"type\":\"string\",\"minLength\":%u,\"maxLength\":%u}", min, max);
                CHECK_MSG(axp_json_schema_to_gbnf(schema, strlen(schema), &gbnf, &err) == 0, "%s", err.msg);
                CHECK_MSG(axp_grammar_parse(gbnf, strlen(gbnf), &g, &err) == 0, "%s", err.msg);
                CHECK(axp_matcher_new(g, trie, &m, &err) == 0);
                axp_matcher_accept(m, quote);
                for (unsigned c = 0; c <= max; c++) {
                        char where[80];
                        snprintf(where, sizeof(where), "%s after %u characters", schema, c);
                        axp_matcher_mask(m, allowed);
                        CHECK_MSG((bool) allowed[quote] == (c >= min), "%s: closing quote %d", where, allowed[quote]);
                        for (unsigned l = 1; l <= 40; l++)
                                if (of_len[l])
                                        CHECK_MSG((bool) allowed[of_len[l]] == (c + l <= max), "%s: '%s' (%u) %d",
                                                  where, piece(of_len[l]), l, allowed[of_len[l]]);
                        if (c < 3 || c + 20 > max || c % 50 == 0)
                                mask_agrees(m, allowed, where);
                        if (c < max)
                                axp_matcher_accept(m, a);
                }
                CHECK(!axp_matcher_allows(m, a));
                axp_matcher_accept(m, quote);
                CHECK(axp_matcher_finished(m));
                axp_matcher_free(m);
                axp_grammar_free(g);
                free(gbnf);
        }
        free(allowed);
}

/* The matcher's bounds (grammar.h): a start read more than AXP_GRAMMAR_MAX_STACKS ways (or
 * whose walk visits more than AXP_GRAMMAR_MAX_STEP places) is refused with a message; a
 * character whose step would go past AXP_GRAMMAR_MAX_STEP is refused as the grammar would
 * refuse it, and the rest of the grammar still runs; a grammar of the same shape within them
 * runs whole, its mask agreeing with the token-by-token check. */
static void test_ambiguity_bounds(void) {
        int n_vocab = axp_tokenizer_n_vocab(vocab.tok);
        uint8_t *allowed = malloc(n_vocab);
        int32_t a = axp_tokenizer_find(vocab.tok, "a"), x = axp_tokenizer_find(vocab.tok, "x");
        CHECK(a >= 0 && x >= 0);
        static const struct {
                const char *grammar;
                bool starts, a_allowed;
        } cases[] = {
                /* 2 x 4096 + 1 places at the start */
                { "root ::= (\"a\"? \"b\"?){4096} \"x\"\n", false, false },
                { "root ::= ((\"a\"? \"b\"?){60}){60} \"x\"\n", false, false },
                /* millions: the walk of the start stops at its bound (it went tens of thousands
                 * of calls deep, past the thread's stack, and took seconds and gigabytes) */
                { "root ::= ((((\"a\"? \"b\")? \"c\"?){273}) \"d\"?){273} \"x\"\n", false, false },
                { "root ::= ((((((\"a\"? \"b\")? \"c\"?){300}) \"d\"?){300}) \"e\"?){40} \"x\"\n", false, false },
                /* the walk's bound met before any place is found */
                { "root ::= (( | \"b\")? (( | \"b\")?){2125}){2125} \"x\"\n", false, false },
                /* 2001 places, each leading to up to 2000 after an "a": the step's bound */
                { "root ::= (\"a\"? \"b\"?){1000} \"x\"\n", true, false },
                { "root ::= (\"a\"? \"b\"?){100} \"x\"\n", true, true },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                const char *gr = cases[i].grammar;
                axp_grammar *g = NULL;
                axp_matcher *m = NULL;
                axp_error err = {};
                CHECK_MSG(axp_grammar_parse(gr, strlen(gr), &g, &err) == 0, "%s", err.msg);
                int r = axp_matcher_new(g, trie, &m, &err);
                CHECK_MSG((r == 0) == cases[i].starts, "%s: %d %s", gr, r, err.msg);
                if (r < 0) {
                        CHECK_MSG(r == -EINVAL && strstr(err.msg, "too ambiguous"), "%s: %s", gr, err.msg);
                        axp_grammar_free(g);
                        continue;
                }
                CHECK_MSG(axp_matcher_allows(m, a) == cases[i].a_allowed, "%s: 'a'", gr);
                CHECK_MSG(axp_matcher_allows(m, x), "%s: 'x'", gr);
                mask_agrees(m, allowed, gr);
                CHECK(axp_matcher_accept(m, x));
                CHECK(axp_matcher_finished(m));
                axp_matcher_free(m);
                axp_grammar_free(g);
        }
        free(allowed);
}

int main(void) {
        /* these need no vocabulary */
        RUN(test_min_bytes);
        RUN(test_patterns_repeating_nothing);
        _cleanup_free_ char *path = conformance_path("vocab/ggml-vocab-llama-bpe.gguf");
        if (!path || vocab_open(path, &vocab) < 0)
                TEST_SKIP("no conformance vocabulary");
        axp_error err = {};
        if (axp_vocab_trie_new(vocab.tok, &trie, &err) < 0) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
        }
        RUN(test_refused);
        RUN(test_spanning);
        RUN(test_no_surrogates);
        RUN(test_json_escapes);
        RUN(test_shapes);
        RUN(test_bounded_strings);
        RUN(test_ambiguity_bounds);
        axp_vocab_trie_free(trie);
        vocab_close(&vocab);
        TEST_EXIT();
}
