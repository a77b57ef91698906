/* SPDX-License-Identifier: MIT */
#include "idmap.h"

#include <errno.h>
#include <stdlib.h>

static size_t slot_of(uint64_t key, size_t n_slots) {
        /* Fibonacci hashing spreads sequential ids. */
        return (size_t) ((key * UINT64_C(0x9E3779B97F4A7C15)) >> 17) & (n_slots - 1);
}

void idmap_done(IdMap *m) {
        free(m->slots);
        *m = (IdMap) {};
}

static int idmap_resize(IdMap *m, size_t n_slots) {
        IdMapEntry *slots = calloc(n_slots, sizeof(IdMapEntry));

        if (!slots)
                return -ENOMEM;
        for (size_t i = 0; i < m->n_slots; i++) {
                size_t j;

                if (!m->slots[i].value)
                        continue;
                for (j = slot_of(m->slots[i].key, n_slots); slots[j].value; j = (j + 1) & (n_slots - 1))
                        ;
                slots[j] = m->slots[i];
        }
        free(m->slots);
        m->slots = slots;
        m->n_slots = n_slots;
        return 0;
}

int idmap_put(IdMap *m, uint64_t key, void *value) {
        size_t i;
        int r;

        if (!value)
                return -EINVAL;
        if (idmap_get(m, key))
                return -EEXIST;
        /* keep the load at most 1/2 */
        if ((m->n_items + 1) * 2 > m->n_slots) {
                r = idmap_resize(m, m->n_slots ? m->n_slots * 2 : 16);
                if (r < 0)
                        return r;
        }
        for (i = slot_of(key, m->n_slots); m->slots[i].value; i = (i + 1) & (m->n_slots - 1))
                ;
        m->slots[i] = (IdMapEntry) { key, value };
        m->n_items++;
        return 0;
}

static size_t idmap_find(const IdMap *m, uint64_t key) {
        if (m->n_slots == 0)
                return SIZE_MAX;
        for (size_t i = slot_of(key, m->n_slots); m->slots[i].value; i = (i + 1) & (m->n_slots - 1))
                if (m->slots[i].key == key)
                        return i;
        return SIZE_MAX;
}

void *idmap_get(const IdMap *m, uint64_t key) {
        size_t i = idmap_find(m, key);

        return i == SIZE_MAX ? NULL : m->slots[i].value;
}

void *idmap_remove(IdMap *m, uint64_t key) {
        size_t i = idmap_find(m, key), mask = m->n_slots - 1;
        void *value;

        if (i == SIZE_MAX)
                return NULL;
        value = m->slots[i].value;
        m->slots[i].value = NULL;
        m->n_items--;

        /* Backward shift: move later entries of the probe run into the hole when their home
         * slot does not lie cyclically between the hole and their position. */
        for (size_t j = (i + 1) & mask; m->slots[j].value; j = (j + 1) & mask) {
                size_t home = slot_of(m->slots[j].key, m->n_slots);
                bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);

                if (stays)
                        continue;
                m->slots[i] = m->slots[j];
                m->slots[j].value = NULL;
                i = j;
        }
        return value;
}

bool idmap_next(const IdMap *m, size_t *i, uint64_t *ret_key, void **ret_value) {
        for (; *i < m->n_slots; (*i)++)
                if (m->slots[*i].value) {
                        if (ret_key)
                                *ret_key = m->slots[*i].key;
                        if (ret_value)
                                *ret_value = m->slots[*i].value;
                        (*i)++;
                        return true;
                }
        return false;
}

int idmap_values(const IdMap *m, void ***ret, size_t *ret_n) {
        void **v = calloc(m->n_items + 1, sizeof(void *));
        size_t i = 0, n = 0;
        void *value;

        if (!v)
                return -ENOMEM;
        while (idmap_next(m, &i, NULL, &value))
                v[n++] = value;
        *ret = v;
        *ret_n = n;
        return 0;
}
