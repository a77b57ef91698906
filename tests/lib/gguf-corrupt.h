/* SPDX-License-Identifier: MIT */
/* Corrupt GGUF files for tests: a small valid file built byte by byte (independently of
 * the writer), and variants of it that every GGUF consumer must reject with a one-line
 * message: cut at and inside every section, counts, lengths and offsets that overflow,
 * wrong types, bad alignment, misaligned and overlapping data, duplicates. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct gguf_variant {
        char name[64];    /* short, usable as a file name */
        uint8_t *data;
        size_t size;
        char expect[64];  /* a substring the reader's message must contain */
} gguf_variant;

/* The valid file the variants derive from (malloc'd). It has every scalar type, a string
 * and an int32 array, general.alignment 32, and three tensors (F32, Q8_0, F16). */
int gguf_corrupt_base(uint8_t **ret, size_t *ret_size);

/* The corrupt variants. every_offset: truncate at every offset of the file rather than at
 * the section boundaries and a few points inside each section. */
int gguf_corrupt_variants(bool every_offset, gguf_variant **ret, size_t *ret_n);
void gguf_corrupt_free(gguf_variant *v, size_t n);
