/* SPDX-License-Identifier: MIT */
/* A small JSON reader: the monitor's journal and suggestion store (one object per line), the
 * command line reading the store, and the tests reading reference data. Input is untrusted:
 * anything malformed is an error with a message, never a crash. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h"

typedef enum json_type {
        JSON_NULL,
        JSON_BOOL,
        JSON_NUMBER,
        JSON_STRING,
        JSON_ARRAY,
        JSON_OBJECT,
} json_type;

typedef struct json_value json_value;
struct json_value {
        json_type type;
        bool boolean;
        double number;
        char *text;             /* JSON_STRING: the unescaped UTF-8 (no NUL inside);
                                 * JSON_NUMBER: the literal as written */
        size_t n;               /* JSON_ARRAY, JSON_OBJECT: number of items */
        json_value **items;
        char **keys;            /* JSON_OBJECT only */
};

/* Parses one JSON value filling all of text[0..len) (surrounding white space allowed).
 * Nesting deeper than 32 levels, strings holding \u0000 and invalid UTF-8 are errors. */
int json_parse(const char *text, size_t len, json_value **ret, axp_error *err);
void json_free(json_value *v);
static inline void json_freep(json_value **v) {
        json_free(*v);
}
#define _cleanup_json_ _cleanup_(json_freep)

/* Object member lookup; NULL if `obj` is not an object or has no such key. */
const json_value *json_get(const json_value *obj, const char *key);
/* The member's string, or NULL when absent or not a string. */
const char *json_get_string(const json_value *obj, const char *key);
/* A non-negative integer (exact up to 2^64-1); -EINVAL for any other value. */
int json_value_u64(const json_value *v, uint64_t *ret);
/* The member as a non-negative integer; -ENOENT if absent, -EINVAL if not one. */
int json_get_u64(const json_value *obj, const char *key, uint64_t *ret);
