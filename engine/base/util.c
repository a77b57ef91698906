/* SPDX-License-Identifier: MIT */
#include "util.h"

#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

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

int axp_grow(void **v, size_t *cap, size_t need, size_t size) {
        if (need <= *cap)
                return 0;
        size_t c = MAX(*cap, (size_t) 8);
        while (c < need)
                c = c > SIZE_MAX / 2 ? need : 2 * c;
        if (c > SIZE_MAX / size)
                return -ENOMEM;
        void *n = realloc(*v, c * size);
        if (!n)
                return -ENOMEM;
        *v = n;
        *cap = c;
        return 0;
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

void axp_json_quote(const char *s, size_t len, axp_put_fn put, void *ctx) {
        static const char fffd[] = "\xef\xbf\xbd";
        size_t run = 0; /* start of the bytes that go out as they are */

        put(ctx, "\"", 1);
        for (size_t i = 0; i < len;) {
                unsigned char c = (unsigned char) s[i];
                size_t n = c < 0x80 ? 1 : axp_utf8_char_len(s + i, len - i);
                char esc[8];
                const char *e = NULL;
                if (n == 0)
                        e = fffd, n = 1;
                else if (c == '"' || c == '\\')
                        esc[0] = '\\', esc[1] = (char) c, esc[2] = 0, e = esc;
                else if (c == '\n')
                        e = "\\n";
                else if (c == '\t')
                        e = "\\t";
                else if (c == '\r')
                        e = "\\r";
                else if (c < 0x20 || c == 0x7f)
                        snprintf(esc, sizeof esc, "\\u%04x", c), e = esc;
                else if (c == 0xc2 && n == 2 && (unsigned char) s[i + 1] <= 0x9f)
                        /* C1 (U+0080..U+009F: CSI, OSC, ...), which a terminal may obey too */
                        snprintf(esc, sizeof esc, "\\u%04x", (unsigned char) s[i + 1]), e = esc;
                if (e) {
                        if (i > run)
                                put(ctx, s + run, i - run);
                        put(ctx, e, strlen(e));
                        run = i + n;
                }
                i += n;
        }
        if (len > run)
                put(ctx, s + run, len - run);
        put(ctx, "\"", 1);
}

void axp_put_file(void *ctx, const char *p, size_t n) {
        fwrite(p, 1, n, ctx);
}

void axp_json_string(FILE *f, const char *s, size_t len) {
        axp_json_quote(s, len, axp_put_file, f);
}

void axp_visible(const char *s, size_t len, bool one_line, axp_put_fn put, void *ctx) {
        const unsigned char *p = (const unsigned char *) s;
        size_t start = 0;

        for (size_t i = 0; i < len;) {
                bool c0 = p[i] < 0x20 && (one_line || (p[i] != '\n' && p[i] != '\t'));
                size_t n = c0 || p[i] == 0x7f ? 1 :
                           p[i] == 0xc2 && i + 1 < len && p[i + 1] >= 0x80 && p[i + 1] <= 0x9f ? 2 : 0;
                if (n == 0) {
                        i++;
                        continue;
                }
                if (i > start)
                        put(ctx, s + start, i - start);
                for (size_t k = 0; k < n; k++) {
                        char esc[8];
                        snprintf(esc, sizeof(esc), "\\x%02x", p[i + k]);
                        put(ctx, esc, 4);
                }
                i += n;
                start = i;
        }
        if (len > start)
                put(ctx, s + start, len - start);
}

void axp_write_visible(FILE *f, const char *s, size_t len) {
        axp_visible(s, len, false, axp_put_file, f);
}

static int too_large(axp_error *err, const char *path, size_t max) {
        if (max >= (1u << 20) && max % (1u << 20) == 0)
                return axp_errorf(err, -EFBIG, "%s is larger than %zu MiB", path, max >> 20);
        if (max >= 1024 && max % 1024 == 0)
                return axp_errorf(err, -EFBIG, "%s is larger than %zu KiB", path, max >> 10);
        return axp_errorf(err, -EFBIG, "%s is larger than %zu bytes", path, max);
}

int axp_read_file(const char *path, size_t max, char **ret, size_t *ret_len, axp_error *err) {
        struct stat st;
        FILE *f = fopen(path, "rb");
        if (!f)
                return axp_errorf(err, -errno, "%s: %s", path, strerror(errno));
        /* A regular file says its size; a device or a FIFO may never end: read up to the cap. */
        if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) && (uint64_t) st.st_size > max) {
                fclose(f);
                return too_large(err, path, max);
        }
        size_t cap = 4096, len = 0;
        size_t most = max < SIZE_MAX - 1 ? max + 2 : SIZE_MAX; /* max + 1 bytes and the NUL */
        char *buf = malloc(cap);
        int read_errno = 0;
        while (buf) {
                errno = 0;
                size_t n = fread(buf + len, 1, cap - len - 1, f);
                len += n;
                if (len > max)
                        break;
                if (n == 0) {
                        read_errno = errno; /* EISDIR for a directory, EIO ... */
                        break;
                }
                if (cap - len - 1 == 0) {
                        size_t ncap = cap <= most / 2 ? cap * 2 : most;
                        char *nb = realloc(buf, ncap);
                        if (!nb) {
                                free(buf);
                                buf = NULL;
                                break;
                        }
                        buf = nb;
                        cap = ncap;
                }
        }
        int bad = ferror(f);
        fclose(f);
        if (!buf)
                return axp_errorf(err, -ENOMEM, "%s: out of memory", path);
        if (len > max) {
                free(buf);
                return too_large(err, path, max);
        }
        if (bad) {
                free(buf);
                read_errno = read_errno > 0 ? read_errno : EIO;
                return axp_errorf(err, -read_errno, "%s: cannot read: %s", path, strerror(read_errno));
        }
        buf[len] = 0;
        *ret = buf;
        *ret_len = len;
        return 0;
}

void axp_format_bytes(uint64_t bytes, char *buf, size_t size) {
        if (bytes >= UINT64_C(1) << 30)
                snprintf(buf, size, "%.1f GiB", (double) bytes / (double) (UINT64_C(1) << 30));
        else if (bytes >= UINT64_C(1) << 20)
                snprintf(buf, size, "%.1f MiB", (double) bytes / (double) (UINT64_C(1) << 20));
        else if (bytes >= UINT64_C(1) << 10)
                snprintf(buf, size, "%.1f KiB", (double) bytes / (double) (UINT64_C(1) << 10));
        else
                snprintf(buf, size, "%" PRIu64 " bytes", bytes);
}

uint64_t axp_physical_memory(void) {
        long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);

        if (pages <= 0 || size <= 0)
                return 0;
        return (uint64_t) pages * (uint64_t) size;
}
