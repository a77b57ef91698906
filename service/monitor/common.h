/* SPDX-License-Identifier: MIT */
/* Included first by every monitor file: util.h before GLib, since GLib undefines and
 * redefines MIN and MAX itself while util.h defines them plainly. */
#pragma once

#include "base/util.h"

#include <glib.h>

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
