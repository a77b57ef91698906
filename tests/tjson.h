/* SPDX-License-Identifier: MIT */
/* A small JSON reader for test data (the golden files of ../shared/conformance). */
#pragma once

#include <stdbool.h>
#include <stddef.h>

typedef enum { TJ_NULL, TJ_BOOL, TJ_NUM, TJ_STR, TJ_ARR, TJ_OBJ } tj_type;

typedef struct tj {
        tj_type type;
        double num;
        bool b;
        char *str;          /* TJ_STR (NUL-terminated; may contain NULs if escaped) */
        size_t str_len;
        struct tj **items;  /* TJ_ARR / TJ_OBJ values */
        char **keys;        /* TJ_OBJ */
        size_t n;
} tj;

tj *tj_parse(const char *text, size_t len);
tj *tj_parse_file(const char *path);
void tj_free(tj *v);
/* Member of an object by key ("a.b.c" walks nested objects); NULL if absent. */
const tj *tj_get(const tj *v, const char *path);
const tj *tj_at(const tj *v, size_t i);
