/* SPDX-License-Identifier: MIT */
/* Small helpers shared by every part of agentxpu: cleanup attributes, ownership transfer,
 * errors that carry a sentence a person can act on. */
#pragma once

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#define _cleanup_(f) __attribute__((cleanup(f)))
#define _unused_ __attribute__((unused))
#define _printf_(a, b) __attribute__((format(printf, a, b)))
#define _likely_(x) __builtin_expect(!!(x), 1)
#define _unlikely_(x) __builtin_expect(!!(x), 0)

#include "kernels/macros.h"

/* Hand ownership on: returns the pointer and clears the variable so cleanup skips it. */
#define TAKE_PTR(p)                                                                                \
        ({                                                                                         \
                __typeof__(p) _ptr_ = (p);                                                         \
                (p) = NULL;                                                                        \
                _ptr_;                                                                             \
        })

/* The struct that holds `ptr` as its field `member`. */
#define container_of(ptr, type, member) ((type *) ((char *) (ptr) - offsetof(type, member)))

static inline void freep(void *p) {
        free(*(void **) p);
}
#define _cleanup_free_ _cleanup_(freep)

/* An error: a negative errno and a one-line message for the user. Functions that can fail
 * take an `axp_error *` (may be NULL) and return a negative errno; on success they leave it
 * untouched. */
typedef struct axp_error {
        int code;
        char msg[320];
} axp_error;

/* Fills `err` (if not NULL) and returns `code` (a negative errno) so callers can write
 * `return axp_errorf(err, -EINVAL, "...");`. */
int axp_errorf(axp_error *err, int code, const char *fmt, ...) _printf_(3, 4);


/* Monotonic time in seconds. */
double axp_now(void);

/* The q-quantile (0 < q <= 1) of v[0..n) by the nearest-rank method: the smallest value that
 * at least a share q of the sample does not exceed. Sorts v in place; 0 if n == 0. */
double axp_quantile(double *v, size_t n, double q);

/* Aligned allocation (64 bytes), zeroed. Free with free(). */
void *axp_alloc(size_t size);

/* An array *v of *cap elements of `size` bytes grown (realloc, doubling, at least 8) to hold
 * at least `need`; the new elements are not initialised. -ENOMEM (nothing changed) where
 * memory or size_t runs out. */
int axp_grow(void **v, size_t *cap, size_t need, size_t size);

#include <stdio.h>
/* s (len bytes) as a JSON string literal, quotes included, handed to put piece by piece:
 * quotes, backslashes and control characters (DEL and C1 too, which JSON allows raw but a
 * terminal may obey) escaped, each byte that is not UTF-8 as U+FFFD, so the output is
 * always valid JSON. The one JSON string writer of the project; axp_json_string writes to
 * a stream. */
typedef void (*axp_put_fn)(void *ctx, const char *p, size_t n);
/* An axp_put_fn writing to the FILE * ctx. */
void axp_put_file(void *ctx, const char *p, size_t n);
void axp_json_quote(const char *s, size_t len, axp_put_fn put, void *ctx);
void axp_json_string(FILE *f, const char *s, size_t len);

/* Write s (len bytes) so that a terminal shows it rather than obeys it: control characters
 * other than \n and \t (C0, DEL, and C1 as the UTF-8 bytes C2 80..C2 9F) are written as the
 * \xNN escapes of their bytes, BEL as \x07 and CSI (U+009B) as \xc2\x9b; all else passes
 * unchanged. For generated text, which may hold any of them. axp_visible hands the same
 * piece by piece to put; with one_line, \n and \t are escaped too (\x0a, \x09), for text
 * that must not end or break a line, such as a file's name in a log line. */
void axp_write_visible(FILE *f, const char *s, size_t len);
void axp_visible(const char *s, size_t len, bool one_line, axp_put_fn put, void *ctx);

/* Read a whole file into a NUL-terminated buffer (*ret_len excludes the NUL). A file of more
 * than `max` bytes fails with -EFBIG ("PATH is larger than N MiB") once max + 1 bytes are
 * read, or before reading for a regular file, so that /dev/zero or a FIFO that never ends
 * cannot take all memory. */
int axp_read_file(const char *path, size_t max, char **ret, size_t *ret_len, axp_error *err);

/* The cap of axp_read_file for text a user gives in a file: a prompt, a JSON schema, a
 * grammar, a tool list. Generous: the engine service has its own, smaller, limits
 * (PromptBytes=), which the command line does not know. */
#define AXP_TEXT_FILE_MAX ((size_t) 64 << 20)

/* The machine's physical memory in bytes (sysconf), 0 if unknown. */
uint64_t axp_physical_memory(void);

/* "512.0 MiB", "5.8 GiB", "900.0 KiB", "12 bytes": a size for people to read. */
void axp_format_bytes(uint64_t bytes, char *buf, size_t size);
