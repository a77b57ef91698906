/* SPDX-License-Identifier: MIT */
/* A growable byte string in the (char **buf, size_t *len, size_t *cap) form the text APIs
 * (detokenizer, stop strings, chat templates) hand to their callers. Kept NUL-terminated. */
#pragma once

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static inline int axp_strbuf_append(char **buf, size_t *len, size_t *cap, const void *p, size_t n) {
        if (*len + n + 1 > *cap || !*buf) {
                size_t c = *cap ? *cap : 64;
                while (c < *len + n + 1)
                        c *= 2;
                char *b = realloc(*buf, c);
                if (!b)
                        return -ENOMEM;
                *buf = b;
                *cap = c;
        }
        if (n > 0)
                memcpy(*buf + *len, p, n);
        *len += n;
        (*buf)[*len] = 0;
        return 0;
}

static inline int axp_strbuf_puts(char **buf, size_t *len, size_t *cap, const char *s) {
        return axp_strbuf_append(buf, len, cap, s, strlen(s));
}
