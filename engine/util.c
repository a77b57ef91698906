/* SPDX-License-Identifier: MIT */
#include "util.h"

#include <ctype.h>
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

int axp_parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *ret) {
        unsigned long long v;
        char *end;

        if (!s || *s < '0' || *s > '9')
                return -EINVAL;
        errno = 0;
        v = strtoull(s, &end, 10);
        if (*end)
                return -EINVAL;
        if (errno == ERANGE || v < min || v > max)
                return -ERANGE;
        *ret = v;
        return 0;
}

int axp_parse_double(const char *s, double min, double max, double *ret) {
        char *end;
        double v;

        if (!s || !*s || isspace((unsigned char) *s))
                return -EINVAL;
        v = strtod(s, &end);
        if (end == s || *end || isnan(v))
                return -EINVAL;
        /* underflow gives a value near 0, which the range judges like any other */
        if (!isfinite(v) || v < min || v > max)
                return -ERANGE;
        *ret = v;
        return 0;
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

size_t axp_utf8_valid_char(const uint8_t *s, size_t len) {
        uint8_t b0 = s[0], lo = 0x80, hi = 0xbf;
        size_t n;

        if (b0 < 0x80)
                return 1;
        if (b0 >= 0xc2 && b0 <= 0xdf)
                n = 2;
        else if (b0 >= 0xe0 && b0 <= 0xef)
                n = 3;
        else if (b0 >= 0xf0 && b0 <= 0xf4)
                n = 4;
        else
                return 0;
        /* overlong forms, UTF-16 surrogates, beyond U+10FFFF */
        if (b0 == 0xe0)
                lo = 0xa0;
        else if (b0 == 0xed)
                hi = 0x9f;
        else if (b0 == 0xf0)
                lo = 0x90;
        else if (b0 == 0xf4)
                hi = 0x8f;
        if (len < n || s[1] < lo || s[1] > hi)
                return 0;
        for (size_t i = 2; i < n; i++)
                if ((s[i] & 0xc0) != 0x80)
                        return 0;
        return n;
}

size_t axp_utf8_invalid(const char *s, size_t len) {
        const uint8_t *p = (const uint8_t *) s;
        size_t i = 0, n;

        while (i < len && (n = axp_utf8_valid_char(p + i, len - i)) > 0)
                i += n;
        return i;
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
                        size_t n = axp_utf8_valid_char(p + i, len - i);
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

void axp_write_visible(FILE *f, const char *s, size_t len) {
        const unsigned char *p = (const unsigned char *) s;
        size_t start = 0;

        for (size_t i = 0; i < len;) {
                size_t n = (p[i] < 0x20 && p[i] != '\n' && p[i] != '\t') || p[i] == 0x7f ? 1 :
                           p[i] == 0xc2 && i + 1 < len && p[i + 1] >= 0x80 && p[i + 1] <= 0x9f ? 2 : 0;
                if (n == 0) {
                        i++;
                        continue;
                }
                fwrite(p + start, 1, i - start, f);
                for (size_t k = 0; k < n; k++)
                        fprintf(f, "\\x%02x", p[i + k]);
                i += n;
                start = i;
        }
        fwrite(p + start, 1, len - start, f);
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
