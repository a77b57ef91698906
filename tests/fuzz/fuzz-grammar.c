/* SPDX-License-Identifier: MIT */
/* libFuzzer target: what a request may bring for structured output, as the engine reads it.
 * The first input byte picks: even, the rest is a GBNF grammar, parsed and checked; odd, the
 * rest is a JSON Schema, turned into a grammar (regular-expression patterns, $ref, anyOf...)
 * which is then parsed. Either must succeed or fail with a message, within the sanitizers. */
#include <stdlib.h>
#include <string.h>

#include "model/grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
        if (axp_grammar_parse(text, len, &g, &err) == 0)
                axp_grammar_free(g);
        free(gbnf);
        return 0;
}
