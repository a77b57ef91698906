/* SPDX-License-Identifier: MIT */
/* Seeded random numbers, the same on every machine: splitmix64 (seeding, hashing) and
 * xoshiro256** (streams). Used by the sampler, the simulator's traces and mkmodel. */
#pragma once

#include <stdint.h>

static inline uint64_t axp_splitmix64(uint64_t *state) {
        uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
}

typedef struct axp_rng {
        uint64_t s[4];
} axp_rng;

static inline void axp_rng_seed(axp_rng *g, uint64_t seed) {
        for (int i = 0; i < 4; i++)
                g->s[i] = axp_splitmix64(&seed);
}

static inline uint64_t axp_rotl64(uint64_t x, int k) {
        return (x << k) | (x >> (64 - k));
}

static inline uint64_t axp_rng_next(axp_rng *g) {
        uint64_t *s = g->s, r = axp_rotl64(s[1] * 5, 7) * 9, t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = axp_rotl64(s[3], 45);
        return r;
}

/* Uniform in [0, 1), 53 bits. */
static inline double axp_rng_uniform(axp_rng *g) {
        return (double) (axp_rng_next(g) >> 11) * 0x1.0p-53;
}
