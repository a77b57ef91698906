/* SPDX-License-Identifier: MIT */
/* libFuzzer target: the HTTP bridge's split of a thinking model's answer into its thinking and
 * the rest (service/bridge/think.c), built from its source with GLib. The first byte picks
 * whether the prompt opened the block and seeds where the text is cut; the text is fed whole
 * and then in those pieces, and the two must give the same thinking and the same answer (a tag
 * or blanks cut across pieces change nothing), each no longer than the text. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bridge/think.h"

static void split(const char *text, size_t len, bool open, uint32_t seed, GString *thinking, GString *answer) {
        ThinkSplit s;
        think_split_init(&s, open);
        size_t at = 0;
        while (at < len) {
                /* pieces of 1 to 16 bytes, or all that is left with seed 0 */
                size_t n = seed ? 1 + (seed >> 7) % 16 : len - at;
                seed = seed * 1103515245u + 12345u;
                n = n < len - at ? n : len - at;
                char *piece = g_strndup(text + at, n);
                think_split_feed(&s, piece, thinking, answer);
                g_free(piece);
                at += n;
        }
        think_split_end(&s, thinking, answer);
        think_split_clear(&s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (size < 1)
                return 0;
        bool open = data[0] & 1;
        uint32_t seed = data[0] >> 1 | 1u;
        /* the engine's pieces are C strings: the text ends at a NUL */
        const char *text = (const char *) data + 1;
        size_t len = strnlen(text, size - 1);

        GString *t1 = g_string_new(NULL), *a1 = g_string_new(NULL);
        GString *t2 = g_string_new(NULL), *a2 = g_string_new(NULL);
        split(text, len, open, 0, t1, a1);
        split(text, len, open, seed, t2, a2);
        if (!g_string_equal(t1, t2) || !g_string_equal(a1, a2) || t1->len + a1->len > len)
                abort();
        g_string_free(t1, TRUE);
        g_string_free(a1, TRUE);
        g_string_free(t2, TRUE);
        g_string_free(a2, TRUE);
        return 0;
}
