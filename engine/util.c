/* SPDX-License-Identifier: MIT */
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "strbuf.h"

int axp_errorf(axp_error *err, int code, const char *fmt, ...) {
        if (err) {
                va_list ap;
                va_start(ap, fmt);
                vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
                va_end(ap);
                err->code = code;
        }
        return code;
}

double axp_now(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
        double x = *(const double *) a, y = *(const double *) b;
        return x < y ? -1 : x > y;
}

double axp_quantile(double *v, size_t n, double q) {
        size_t k;

        if (n == 0)
                return 0;
        qsort(v, n, sizeof(*v), cmp_double);
        k = (size_t) ceil(q * (double) n);
        return v[k < 1 ? 0 : MIN(k, n) - 1];
}

void *axp_alloc(size_t size) {
        void *p = NULL;
        if (size == 0)
                size = 64;
        size = (size + 63) & ~(size_t) 63;
        if (posix_memalign(&p, 64, size) != 0)
                return NULL;
        memset(p, 0, size);
        return p;
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if the bytes are not one. */
static size_t utf8_len(const unsigned char *s, size_t n) {
        unsigned c = s[0];
        size_t len;
        uint32_t cp;
        if (c < 0x80)
                return 1;
        else if ((c & 0xe0) == 0xc0)
                len = 2, cp = c & 0x1f;
        else if ((c & 0xf0) == 0xe0)
                len = 3, cp = c & 0x0f;
        else if ((c & 0xf8) == 0xf0)
                len = 4, cp = c & 0x07;
        else
                return 0;
        if (len > n)
                return 0;
        for (size_t i = 1; i < len; i++) {
                if ((s[i] & 0xc0) != 0x80)
                        return 0;
                cp = (cp << 6) | (s[i] & 0x3f);
        }
        /* overlong forms, surrogates, beyond U+10FFFF */
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
            (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
                return 0;
        return len;
}

void axp_json_string(FILE *f, const char *s, size_t len) {
        const unsigned char *p = (const unsigned char *) s;
        fputc('"', f);
        for (size_t i = 0; i < len;) {
                unsigned char c = p[i];
                if (c == '"' || c == '\\') {
                        fputc('\\', f);
                        fputc(c, f);
                        i++;
                } else if (c < 0x20) {
                        switch (c) {
                        case '\n': fputs("\\n", f); break;
                        case '\t': fputs("\\t", f); break;
                        case '\r': fputs("\\r", f); break;
                        default: fprintf(f, "\\u%04x", c); break;
                        }
                        i++;
                } else {
                        size_t n = utf8_len(p + i, len - i);
                        if (n == 0) {
                                fputs("\xef\xbf\xbd", f);
                                i++;
                        } else {
                                fwrite(p + i, 1, n, f);
                                i += n;
                        }
                }
        }
        fputc('"', f);
}

static const char replacement[3] = { '\xef', '\xbf', '\xbd' };

/* Length of the character a lead byte begins, 0 if b cannot begin one. */
static unsigned lead_len(unsigned char b) {
        if (b < 0x80)
                return 1;
        if (b >= 0xc2 && b <= 0xdf)
                return 2;
        if (b >= 0xe0 && b <= 0xef)
                return 3;
        if (b >= 0xf0 && b <= 0xf4)
                return 4;
        return 0;
}

/* Whether b may follow the held bytes (RFC 3629: no overlong forms, surrogates or code
 * points past U+10FFFF). */
static bool continues(const axp_utf8_stream *s, unsigned char b) {
        unsigned char lo = 0x80, hi = 0xbf;

        if (s->n_pend == 1) {
                if (s->pend[0] == 0xe0)
                        lo = 0xa0;
                else if (s->pend[0] == 0xed)
                        hi = 0x9f;
                else if (s->pend[0] == 0xf0)
                        lo = 0x90;
                else if (s->pend[0] == 0xf4)
                        hi = 0x8f;
        }
        return b >= lo && b <= hi;
}

static int stream_byte(axp_utf8_stream *s, unsigned char b, char **out, size_t *out_len, size_t *out_cap) {
        int r;

        if (s->n_pend > 0) {
                if (continues(s, b)) {
                        s->pend[s->n_pend++] = b;
                        if (s->n_pend < lead_len(s->pend[0]))
                                return 0;
                        r = axp_strbuf_append(out, out_len, out_cap, s->pend, s->n_pend);
                        s->n_pend = 0;
                        return r;
                }
                /* the held bytes can never complete; b starts afresh */
                if ((r = axp_utf8_stream_flush(s, out, out_len, out_cap)) < 0)
                        return r;
        }
        switch (lead_len(b)) {
        case 0:
                return axp_strbuf_append(out, out_len, out_cap, replacement, sizeof(replacement));
        case 1:
                if (b == 0 && s->no_nul)
                        return axp_strbuf_append(out, out_len, out_cap, replacement, sizeof(replacement));
                return axp_strbuf_append(out, out_len, out_cap, &b, 1);
        default:
                s->pend[0] = b;
                s->n_pend = 1;
                return 0;
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

int axp_read_file(const char *path, char **ret, size_t *ret_len, axp_error *err) {
        FILE *f = fopen(path, "rb");
        if (!f)
                return axp_errorf(err, -errno, "%s: %s", path, strerror(errno));
        size_t cap = 4096, len = 0;
        char *buf = malloc(cap);
        while (buf) {
                size_t n = fread(buf + len, 1, cap - len - 1, f);
                len += n;
                if (n == 0)
                        break;
                if (cap - len - 1 == 0) {
                        char *nb = realloc(buf, cap * 2);
                        if (!nb) {
                                free(buf);
                                buf = NULL;
                                break;
                        }
                        buf = nb;
                        cap *= 2;
                }
        }
        int bad = ferror(f);
        fclose(f);
        if (!buf)
                return axp_errorf(err, -ENOMEM, "%s: out of memory", path);
        if (bad) {
                free(buf);
                return axp_errorf(err, -EIO, "%s: read error", path);
        }
        buf[len] = 0;
        *ret = buf;
        *ret_len = len;
        return 0;
}
