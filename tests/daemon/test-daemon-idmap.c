/* SPDX-License-Identifier: MIT */
/* The daemon's id map against a plain array, through inserts, lookups and removals in a
 * seeded random order (removal shifts entries back, the part that is easy to get wrong). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "idmap.h"
#include "test.h"

#define N 4096

static uint64_t rng_state = 0x2545F4914F6CDD1DULL;
static uint64_t rnd(void) {
        rng_state ^= rng_state << 13;
        rng_state ^= rng_state >> 7;
        rng_state ^= rng_state << 17;
        return rng_state;
}

static void test_random_against_array(void) {
        static void *present[N];
        static int tokens[N];
        IdMap m = {};
        size_t count = 0;

        for (int step = 0; step < 200000; step++) {
                /* Sequential-ish ids like the daemon's, plus some far apart. */
                uint64_t key = rnd() % N;
                uint64_t id = key * (key % 3 == 0 ? 1 : 1000003);
                int op = (int) (rnd() % 3);

                if (op == 0) {
                        int r = idmap_put(&m, id, &tokens[key]);
                        CHECK_EQ_INT(r, present[key] ? -EEXIST : 0);
                        if (r == 0) {
                                present[key] = &tokens[key];
                                count++;
                        }
                } else if (op == 1) {
                        void *v = idmap_remove(&m, id);
                        CHECK(v == present[key]);
                        if (v) {
                                present[key] = NULL;
                                count--;
                        }
                } else
                        CHECK(idmap_get(&m, id) == present[key]);
                if (test_case_failed_)
                        break;
        }
        CHECK_EQ_INT(idmap_size(&m), count);

        /* Every present key is found, and iteration visits each exactly once. */
        size_t seen = 0, i = 0;
        uint64_t k;
        void *v;
        while (idmap_next(&m, &i, &k, &v)) {
                CHECK(v == idmap_get(&m, k));
                seen++;
        }
        CHECK_EQ_INT(seen, count);

        void **values;
        size_t n;
        CHECK_EQ_INT(idmap_values(&m, &values, &n), 0);
        CHECK_EQ_INT(n, count);
        free(values);
        idmap_done(&m);
}

static void test_edges(void) {
        IdMap m = {};
        int x;

        CHECK(idmap_get(&m, 1) == NULL);
        CHECK(idmap_remove(&m, 1) == NULL);
        CHECK_EQ_INT(idmap_put(&m, 0, &x), 0); /* 0 is a key like any other */
        CHECK(idmap_get(&m, 0) == &x);
        CHECK_EQ_INT(idmap_put(&m, 5, NULL), -EINVAL);
        CHECK_EQ_INT(idmap_put(&m, UINT64_MAX, &x), 0);
        CHECK(idmap_remove(&m, UINT64_MAX) == &x);
        CHECK_EQ_INT(idmap_size(&m), 1);
        idmap_done(&m);
}

int main(void) {
        RUN(test_random_against_array);
        RUN(test_edges);
        TEST_EXIT();
}
