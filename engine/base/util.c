/* SPDX-License-Identifier: MIT */
#include "util.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "utf8.h"

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
                        size_t n = axp_utf8_char_len(s + i, len - i);
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
