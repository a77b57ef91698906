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

#define ELEMENTSOF(x) (sizeof(x) / sizeof((x)[0]))
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define DIV_ROUND_UP(a, b) (((a) + (b) - 1) / (b))

/* Hand ownership on: returns the pointer and clears the variable so cleanup skips it. */
#define TAKE_PTR(p)                                                                                \
        ({                                                                                         \
                __typeof__(p) _ptr_ = (p);                                                         \
                (p) = NULL;                                                                        \
                _ptr_;                                                                             \
        })

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

/* Overflow-checked arithmetic for sizes read from untrusted files. Return false on overflow. */
static inline int axp_mul_ok(uint64_t a, uint64_t b, uint64_t *ret) {
        return !__builtin_mul_overflow(a, b, ret);
}
static inline int axp_add_ok(uint64_t a, uint64_t b, uint64_t *ret) {
        return !__builtin_add_overflow(a, b, ret);
}

/* Numbers as a person types them (command-line options, settings): a whole number in decimal
 * digits only (no sign, space or base prefix), or a decimal number as strtod() reads it, but
 * finite and without leading space. 0 and *ret on success; -EINVAL if s is not such a number,
 * -ERANGE if it is one outside [min, max] (or beyond what the type holds); *ret untouched on
 * failure. */
int axp_parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *ret);
int axp_parse_double(const char *s, double min, double max, double *ret);

/* Monotonic time in seconds. */
double axp_now(void);

/* The q-quantile (0 < q <= 1) of v[0..n) by the nearest-rank method: the smallest value that
 * at least a share q of the sample does not exceed. Sorts v in place; 0 if n == 0. */
double axp_quantile(double *v, size_t n, double q);

/* Aligned allocation (64 bytes), zeroed. Free with free(). */
void *axp_alloc(size_t size);

/* Length of the well-formed (RFC 3629) UTF-8 character at s (1..4), or 0 if it is not one:
 * no overlong forms, UTF-16 surrogates or code points past U+10FFFF. */
size_t axp_utf8_valid_char(const uint8_t *s, size_t len);
/* The offset of the first byte of s that is not part of well-formed UTF-8; len if all is. */
size_t axp_utf8_invalid(const char *s, size_t len);

#include <stdio.h>
/* Write s (len bytes) as a JSON string literal, quotes included. Invalid UTF-8 bytes are
 * written as U+FFFD so the output is always valid JSON. */
void axp_json_string(FILE *f, const char *s, size_t len);

/* UTF-8 text that arrives in pieces, as a generated token's bytes do: whole characters pass
 * on, a character split between pieces is held until its last byte comes, and bytes that
 * cannot become a character are U+FFFD, one for each maximal run that began one (a stray
 * byte, or a character cut short), as the Unicode standard recommends. Nothing is dropped. */
typedef struct axp_utf8_stream {
        unsigned char pend[4]; /* the start of a character, waiting for the rest */
        unsigned n_pend;
        bool no_nul;           /* U+0000 becomes U+FFFD too (a D-Bus string cannot carry it) */
} axp_utf8_stream;

/* Append the characters p[0..n) completes to *out (malloc'd, grown, kept NUL-terminated;
 * *out_len updated). */
int axp_utf8_stream_push(axp_utf8_stream *s, const char *p, size_t n, char **out, size_t *out_len,
                         size_t *out_cap);
/* The end of the text: a character still waiting for its last bytes is one U+FFFD. */
int axp_utf8_stream_flush(axp_utf8_stream *s, char **out, size_t *out_len, size_t *out_cap);

/* Write s (len bytes) so that a terminal shows it rather than obeys it: control characters
 * other than \n and \t (C0, DEL, and C1 as the UTF-8 bytes C2 80..C2 9F) are written as the
 * \xNN escapes of their bytes, BEL as \x07 and CSI (U+009B) as \xc2\x9b; all else passes
 * unchanged. For generated text, which may hold any of them. */
void axp_write_visible(FILE *f, const char *s, size_t len);

/* Read a whole file into a NUL-terminated buffer (*ret_len excludes the NUL). */
int axp_read_file(const char *path, char **ret, size_t *ret_len, axp_error *err);
