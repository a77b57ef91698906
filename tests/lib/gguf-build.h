/* SPDX-License-Identifier: MIT */
/* Build small GGUF files in memory (metadata only), so tests can make vocabularies, good and
 * broken, without data files. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"

typedef struct gguf_build {
        uint8_t *body;
        size_t len, cap;
        uint64_t n_kv;
} gguf_build;

static inline void gb_raw(gguf_build *b, const void *p, size_t n) {
        if (b->len + n > b->cap) {
                b->cap = (b->len + n) * 2 + 256;
                b->body = realloc(b->body, b->cap);
                if (!b->body)
                        abort();
        }
        memcpy(b->body + b->len, p, n);
        b->len += n;
}

static inline void gb_u32(gguf_build *b, uint32_t v) {
        gb_raw(b, &v, 4);
}

static inline void gb_u64(gguf_build *b, uint64_t v) {
        gb_raw(b, &v, 8);
}

static inline void gb_str(gguf_build *b, const char *s, size_t n) {
        gb_u64(b, n);
        gb_raw(b, s, n);
}

static inline void gb_key(gguf_build *b, const char *key, uint32_t type) {
        gb_str(b, key, strlen(key));
        gb_u32(b, type);
        b->n_kv++;
}

static inline void gb_kv_str(gguf_build *b, const char *key, const char *v) {
        gb_key(b, key, GGUF_TYPE_STRING);
        gb_str(b, v, strlen(v));
}

static inline void gb_kv_u32(gguf_build *b, const char *key, uint32_t v) {
        gb_key(b, key, GGUF_TYPE_UINT32);
        gb_u32(b, v);
}

static inline void gb_kv_bool(gguf_build *b, const char *key, bool v) {
        uint8_t x = v;
        gb_key(b, key, GGUF_TYPE_BOOL);
        gb_raw(b, &x, 1);
}

static inline void gb_kv_strs(gguf_build *b, const char *key, const char *const *v, size_t n) {
        gb_key(b, key, GGUF_TYPE_ARRAY);
        gb_u32(b, GGUF_TYPE_STRING);
        gb_u64(b, n);
        for (size_t i = 0; i < n; i++)
                gb_str(b, v[i], strlen(v[i]));
}

static inline void gb_kv_i32s(gguf_build *b, const char *key, const int32_t *v, size_t n) {
        gb_key(b, key, GGUF_TYPE_ARRAY);
        gb_u32(b, GGUF_TYPE_INT32);
        gb_u64(b, n);
        gb_raw(b, v, n * 4);
}

static inline void gb_kv_f32s(gguf_build *b, const char *key, const float *v, size_t n) {
        gb_key(b, key, GGUF_TYPE_ARRAY);
        gb_u32(b, GGUF_TYPE_FLOAT32);
        gb_u64(b, n);
        gb_raw(b, v, n * 4);
}

/* The whole file; free() it after gguf_close() of anything opened on it. */
static inline uint8_t *gb_finish(gguf_build *b, size_t *ret_size) {
        size_t n = 24 + b->len;
        uint8_t *f = malloc(n);
        if (!f)
                abort();
        uint32_t version = 3;
        uint64_t n_tensors = 0;
        memcpy(f, "GGUF", 4);
        memcpy(f + 4, &version, 4);
        memcpy(f + 8, &n_tensors, 8);
        memcpy(f + 16, &b->n_kv, 8);
        memcpy(f + 24, b->body, b->len);
        free(b->body);
        *b = (gguf_build) {};
        *ret_size = n;
        return f;
}
