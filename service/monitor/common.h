/* SPDX-License-Identifier: MIT */
/* Included first by every monitor file: util.h before GLib, since GLib undefines and
 * redefines MIN and MAX itself while util.h defines them plainly. */
#pragma once

#include "base/util.h"

#include <glib.h>
#include <string.h>

/* An axp_put_fn that appends to a GString. */
static inline void put_gstring(void *ctx, const char *p, size_t n) {
        g_string_append_len(ctx, p, (gssize) n);
}

/* s as it goes into a log line: control characters, newline and tab too, as \xNN escapes
 * (axp_visible), so that a file's name can neither end the line and forge the next one nor
 * drive a terminal. For every name from the file system that a message holds; g_free it. */
static inline char *log_visible(const char *s) {
        GString *out = g_string_sized_new(strlen(s));

        axp_visible(s, strlen(s), true, put_gstring, out);
        return g_string_free(out, FALSE);
}

/* The keys of a hash table (borrowed) in an array; GLib's own is newer than 2.74. */
static inline GPtrArray *hash_table_keys(GHashTable *h) {
        GPtrArray *out = g_ptr_array_sized_new(g_hash_table_size(h));
        GHashTableIter it;
        gpointer k;
        g_hash_table_iter_init(&it, h);
        while (g_hash_table_iter_next(&it, &k, NULL))
                g_ptr_array_add(out, k);
        return out;
}
