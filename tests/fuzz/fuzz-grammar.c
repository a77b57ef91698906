/* SPDX-License-Identifier: MIT */
/* libFuzzer target: what a request may bring for structured output, as the engine reads it
 * and then generates under it. The first input byte picks: even, the rest is a GBNF grammar;
 * odd, the rest is a JSON Schema, turned into a grammar (regular-expression patterns, $ref,
 * anyOf...). Either must parse or fail with a message, within the sanitizers. A grammar that
 * parses then drives the matcher over a small synthetic byte-level vocabulary for a few
 * tokens, the first byte's high bits picking which allowed token each step takes: every
 * mask must agree with the token-by-token check, every allowed token be taken, and some token
 * be allowed at every step (none may lead where nothing can follow), within the matcher's
 * bounds (grammar.h). */
#include <stdlib.h>
#include <string.h>

#include "model/grammar.h"
#include "tok-util.h"

#define STEPS 12

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static loaded_vocab vocab;
static axp_vocab_trie *trie;
static uint8_t *allowed;
static int n_vocab;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
        size_t size;
        uint8_t *mem = synthetic_bpe("llama-bpe", &size);
        axp_error err = {};
        (void) argc;
        (void) argv;
        if (vocab_from_memory(mem, size, &vocab, &err) < 0 || axp_vocab_trie_new(vocab.tok, &trie, &err) < 0) {
                fprintf(stderr, "synthetic vocabulary: %s\n", err.msg);
                abort();
        }
        n_vocab = axp_tokenizer_n_vocab(vocab.tok);
        allowed = malloc((size_t) n_vocab);
        if (!allowed)
                abort();
        return 0;
}

static void generate(const axp_grammar *g, unsigned pick) {
        axp_matcher *m = NULL;
        axp_error err = {};
        if (axp_matcher_new(g, trie, &m, &err) < 0)
                return;
        for (int step = 0; step < STEPS; step++) {
                int n = axp_matcher_mask(m, allowed);
                /* a grammar that parses can always go on (or end) from where it stands */
                if (n == 0 && !axp_matcher_overrun(m)) {
                        fprintf(stderr, "step %d: no token may follow\n", step);
                        abort();
                }
                if (n <= 0)
                        break;
                int k = (int) ((pick + 7u * (unsigned) step) % (unsigned) n), id = -1;
                for (int i = 0; i < n_vocab; i++) {
                        /* past the matcher's bounds the mask (over a canonical form of the
                         * state) may allow what the state itself cannot take (grammar.h) */
                        if ((bool) allowed[i] != axp_matcher_allows(m, i) && !axp_matcher_overrun(m)) {
                                fprintf(stderr, "token %d: mask %d, check %d\n", i, allowed[i], !allowed[i]);
                                abort();
                        }
                        if (allowed[i] && k-- == 0)
                                id = i;
                }
                if (id < 0 || axp_tokenizer_is_eog(vocab.tok, id))
                        break;
                if (!axp_matcher_accept(m, id)) {
                        if (!axp_matcher_overrun(m)) {
                                fprintf(stderr, "token %d: allowed, not taken\n", id);
                                abort();
                        }
                        break;
                }
                if (axp_matcher_finished(m))
                        break;
        }
        axp_matcher_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        axp_grammar *g = NULL;
        axp_error err = {};
        char *gbnf = NULL;

        if (size < 1)
                return 0;
        const char *text = (const char *) data + 1;
        size_t len = size - 1;
        if (data[0] & 1) {
                if (axp_json_schema_to_gbnf(text, len, &gbnf, &err) < 0)
                        return 0;
                text = gbnf;
                len = strlen(gbnf);
        }
        if (axp_grammar_parse(text, len, &g, &err) == 0) {
                generate(g, data[0] >> 1);
                axp_grammar_free(g);
        }
        free(gbnf);
        return 0;
}
