/* SPDX-License-Identifier: MIT */
/* Well-formed UTF-8 (RFC 3629): no overlong forms, no UTF-16 surrogates (U+D800..U+DFFF),
 * nothing past U+10FFFF. The one place that decides it; the tokenizer's lenient decoding
 * (engine/model/unicode.h) is a different thing on purpose. A NUL byte is a character like
 * any other: the lengths decide. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The length (1..4) of the well-formed character at the start of s[0..len), or 0 if the
 * bytes there are not one (0 too when len is 0). */
size_t axp_utf8_char_len(const char *s, size_t len);

/* Whether s[0..len) (len 1..3) is the beginning of a well-formed character that was cut
 * short: more bytes could complete it. What a read that stops mid-character ends with. */
bool axp_utf8_char_cut(const char *s, size_t len);

/* Whether all of s[0..len) is well-formed UTF-8. When it is not and ret_bad is not NULL,
 * *ret_bad is the offset of the first byte that is not part of a well-formed character. */
bool axp_utf8_valid(const char *s, size_t len, size_t *ret_bad);

/* Encode a code point (<= U+10FFFF, not a surrogate, for well-formed output); returns the
 * number of bytes written (1..4). */
size_t axp_utf8_encode(uint32_t cp, uint8_t out[4]);

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
