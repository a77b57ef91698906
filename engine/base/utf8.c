/* SPDX-License-Identifier: MIT */
#include "utf8.h"

#include "strbuf.h"

#include <stdint.h>

/* How many of the bytes of s[0..len) (len >= 1) agree with a well-formed character, and in
 * *ret_need the length of that character (0 if s[0] cannot start one). The second byte's
 * range rules out overlong forms (E0, F0), surrogates (ED) and code points past U+10FFFF
 * (F4); C0, C1 and F5..FF never start one. */
static size_t prefix(const uint8_t *s, size_t len, size_t *ret_need) {
        uint8_t b0 = s[0], lo = 0x80, hi = 0xbf;
        size_t n, i;

        if (b0 < 0x80)
                n = 1;
        else if (b0 >= 0xc2 && b0 <= 0xdf)
                n = 2;
        else if (b0 >= 0xe0 && b0 <= 0xef)
                n = 3;
        else if (b0 >= 0xf0 && b0 <= 0xf4)
                n = 4;
        else {
                *ret_need = 0;
                return 0;
        }
        if (b0 == 0xe0)
                lo = 0xa0;
        else if (b0 == 0xed)
                hi = 0x9f;
        else if (b0 == 0xf0)
                lo = 0x90;
        else if (b0 == 0xf4)
                hi = 0x8f;
        for (i = 1; i < n && i < len; i++) {
                if (s[i] < lo || s[i] > hi)
                        break;
                lo = 0x80;
                hi = 0xbf;
        }
        *ret_need = n;
        return i;
}

size_t axp_utf8_char_len(const char *s, size_t len) {
        size_t need, k;

        if (len == 0)
                return 0;
        k = prefix((const uint8_t *) s, len, &need);
        return need > 0 && k == need ? need : 0;
}

bool axp_utf8_char_cut(const char *s, size_t len) {
        size_t need, k;

        if (len == 0)
                return false;
        k = prefix((const uint8_t *) s, len, &need);
        return k == len && len < need;
}

bool axp_utf8_valid(const char *s, size_t len, size_t *ret_bad) {
        size_t i = 0, n;

        while (i < len) {
                /* ASCII runs are most of what passes here */
                if ((unsigned char) s[i] < 0x80) {
                        i++;
                        continue;
                }
                n = axp_utf8_char_len(s + i, len - i);
                if (n == 0) {
                        if (ret_bad)
                                *ret_bad = i;
                        return false;
                }
                i += n;
        }
        return true;
}

size_t axp_utf8_encode(uint32_t cp, uint8_t out[4]) {
        if (cp < 0x80) {
                out[0] = cp;
                return 1;
        }
        if (cp < 0x800) {
                out[0] = 0xc0 | cp >> 6;
                out[1] = 0x80 | (cp & 0x3f);
                return 2;
        }
        if (cp < 0x10000) {
                out[0] = 0xe0 | cp >> 12;
                out[1] = 0x80 | (cp >> 6 & 0x3f);
                out[2] = 0x80 | (cp & 0x3f);
                return 3;
        }
        out[0] = 0xf0 | (cp >> 18 & 0x07);
        out[1] = 0x80 | (cp >> 12 & 0x3f);
        out[2] = 0x80 | (cp >> 6 & 0x3f);
        out[3] = 0x80 | (cp & 0x3f);
        return 4;
}

static const char replacement[3] = { '\xef', '\xbf', '\xbd' };

static int stream_byte(axp_utf8_stream *s, unsigned char b, char **out, size_t *out_len, size_t *out_cap) {
        int r;

        s->pend[s->n_pend++] = b;
        for (;;) {
                size_t n = axp_utf8_char_len((const char *) s->pend, s->n_pend);
                if (n == s->n_pend) {
                        s->n_pend = 0;
                        if (n == 1 && b == 0 && s->no_nul)
                                return axp_strbuf_append(out, out_len, out_cap, replacement, sizeof(replacement));
                        return axp_strbuf_append(out, out_len, out_cap, s->pend, n);
                }
                if (axp_utf8_char_cut((const char *) s->pend, s->n_pend))
                        return 0; /* wait for the rest */
                /* What is held can never become a character: one U+FFFD for it, and b, if it
                 * came after held bytes, starts afresh. */
                if ((r = axp_strbuf_append(out, out_len, out_cap, replacement, sizeof(replacement))) < 0)
                        return r;
                if (s->n_pend == 1) {
                        s->n_pend = 0;
                        return 0;
                }
                s->pend[0] = b;
                s->n_pend = 1;
        }
}

int axp_utf8_stream_push(axp_utf8_stream *s, const char *p, size_t n, char **out, size_t *out_len,
                         size_t *out_cap) {
        int r = 0;

        for (size_t i = 0; i < n && r >= 0; i++)
                r = stream_byte(s, (unsigned char) p[i], out, out_len, out_cap);
        return r;
}

int axp_utf8_stream_flush(axp_utf8_stream *s, char **out, size_t *out_len, size_t *out_cap) {
        if (s->n_pend == 0)
                return 0;
        s->n_pend = 0;
        return axp_strbuf_append(out, out_len, out_cap, replacement, sizeof(replacement));
}
