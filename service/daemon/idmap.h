/* SPDX-License-Identifier: MIT */
/* A map from uint64_t ids to pointers (open addressing, linear probing, backward-shift
 * deletion, so there are no tombstones to clean up). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct IdMapEntry {
        uint64_t key;
        void *value; /* NULL: empty slot */
} IdMapEntry;

typedef struct IdMap {
        IdMapEntry *slots;
        size_t n_slots; /* 0 or a power of two */
        size_t n_items;
} IdMap;

void idmap_done(IdMap *m);
/* -EEXIST if the key is present, -EINVAL for a NULL value, -ENOMEM. */
int idmap_put(IdMap *m, uint64_t key, void *value);
void *idmap_get(const IdMap *m, uint64_t key);
/* Returns the removed value, NULL if absent. */
void *idmap_remove(IdMap *m, uint64_t key);
static inline size_t idmap_size(const IdMap *m) {
        return m->n_items;
}

/* Iterate: `*i` starts at 0. Do not modify the map while iterating. */
bool idmap_next(const IdMap *m, size_t *i, uint64_t *ret_key, void **ret_value);

/* A snapshot of the values, for loops that change the map; free() it. *ret_n = count. */
int idmap_values(const IdMap *m, void ***ret, size_t *ret_n);
