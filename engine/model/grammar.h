/* SPDX-License-Identifier: MIT */
/* Constrained decoding: GBNF-style grammars (the syntax llama.cpp users write), JSON Schema
 * turned into such a grammar, and the matcher that says which tokens may come next.
 *
 * A grammar is a set of rules; each rule a list of alternatives; each alternative a sequence
 * of character sets and references to rules. Repetition and groups become rules of their
 * own. The matcher's state is a set of stacks (the positions the input may have reached);
 * stacks are interned, so equal stacks are one pointer and the stacks that follow a stack
 * after one character are computed once and remembered.
 *
 * The mask for a step walks a trie of the vocabulary's byte strings (built once per model)
 * with the state: a subtree whose prefix the grammar refuses is skipped whole. Token bytes
 * are decoded as UTF-8 as they come, so a token may end inside a character (the next one
 * completes it) and one token may cover several grammar symbols. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/util.h"
#include "tokenizer.h"

/* Limits on what a request may bring. */
#define AXP_GRAMMAR_MAX_BYTES (64 * 1024)
/* groups in groups: the parser recurses into each, and 30000 of them (60 KB) overflowed the
 * stack of whoever parsed them, the engine included */
#define AXP_GRAMMAR_MAX_NESTING 256
#define AXP_JSON_SCHEMA_MAX_BYTES (64 * 1024)
/* The matcher's work, bounded whatever the grammar: the places (stacks) its state may hold at
 * once, and the stacks one character may lead to, counted over the state's places (with
 * duplicates: the work of the step; the walk that finds them visits at most as many). A
 * grammar written with a bounded repetition of something that can be empty, ("a"? "b"?){4000},
 * can be at thousands of places at once, each leading to thousands, and took 2 s a token to
 * mask over a 128k vocabulary; the JSON schemas and grammars of the tests stay under 20
 * places. A grammar whose start holds more places is refused; a character whose step would
 * exceed either bound is refused as the grammar would refuse it. */
#define AXP_GRAMMAR_MAX_STACKS 4096
#define AXP_GRAMMAR_MAX_STEP (64 * 1024)

typedef struct axp_grammar axp_grammar;

/* Parse a grammar; the start rule is `root`. Errors (-EINVAL) say what and where: syntax,
 * an undefined rule, left recursion, a grammar that can never complete, one too large. */
int axp_grammar_parse(const char *text, size_t len, axp_grammar **ret, axp_error *err);
void axp_grammar_free(axp_grammar *g);
static inline void axp_grammar_freep(axp_grammar **g) {
        axp_grammar_free(*g);
}
/* The fewest bytes of any text the grammar accepts. */
size_t axp_grammar_min_bytes(const axp_grammar *g);

/* A JSON Schema (as text) as a grammar in the syntax above (malloc'd). Unsupported keywords
 * and schemas nothing can satisfy are errors (-EINVAL) naming them. */
int axp_json_schema_to_gbnf(const char *schema, size_t len, char **ret, axp_error *err);
/* Several parsed schemas in one grammar: rule names[i] matches schemas[i] (generated rules
 * are named rN, the shared ones char, string, integer, number, boolean, null, value,
 * object-any, array-any, date); no root rule unless one of the names is "root". */
struct json_value;
int axp_json_schemas_to_gbnf(const struct json_value *const *schemas, const char *const *names, size_t n,
                             char **ret, axp_error *err);

/* The vocabulary's byte strings as a trie, built once per tokenizer. */
typedef struct axp_vocab_trie axp_vocab_trie;
int axp_vocab_trie_new(const axp_tokenizer *t, axp_vocab_trie **ret, axp_error *err);
void axp_vocab_trie_free(axp_vocab_trie *v);
/* The longest token's bytes. */
size_t axp_vocab_trie_max_piece(const axp_vocab_trie *v);

/* One request's position in a grammar. */
typedef struct axp_matcher axp_matcher;
int axp_matcher_new(const axp_grammar *g, const axp_vocab_trie *v, axp_matcher **ret, axp_error *err);
void axp_matcher_free(axp_matcher *m);
/* May token id come next? (End of generation tokens: only where the grammar is complete.) */
bool axp_matcher_allows(axp_matcher *m, int32_t id);
/* Take token id (which must be allowed); false, the state unchanged, where it cannot be taken
 * after all. That happens only past the bounds above: the mask walks a canonical form of the
 * state (the places of a long bounded repetition folded together), whose steps may stay within
 * them where the state's own do not, so the mask may allow a token that the state cannot take
 * (axp_matcher_overrun is then true). */
bool axp_matcher_accept(axp_matcher *m, int32_t id);
/* Write into allowed[0..n_vocab) 1 for each token that may come next, 0 otherwise; returns
 * how many may. */
int axp_matcher_mask(axp_matcher *m, uint8_t *allowed);
/* The text so far is a whole sentence of the grammar / nothing more may follow it. */
bool axp_matcher_complete(const axp_matcher *m);
bool axp_matcher_finished(const axp_matcher *m);
/* Whether any step so far refused a character for the bounds above, not for the grammar. */
bool axp_matcher_overrun(const axp_matcher *m);
