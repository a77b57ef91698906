/* SPDX-License-Identifier: MIT */
/* Small arithmetic helpers for every layer, from the kernels up (engine/base/util.h
 * includes this file rather than defining its own). */
#pragma once

#include <stdint.h>

#define ELEMENTSOF(x) (sizeof(x) / sizeof((x)[0]))
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define DIV_ROUND_UP(a, b) (((a) + (b) - 1) / (b))

/* Overflow-checked arithmetic for sizes read from untrusted files. Return false on overflow. */
static inline int axp_mul_ok(uint64_t a, uint64_t b, uint64_t *ret) {
        return !__builtin_mul_overflow(a, b, ret);
}
static inline int axp_add_ok(uint64_t a, uint64_t b, uint64_t *ret) {
        return !__builtin_add_overflow(a, b, ret);
}
