/* SPDX-License-Identifier: MIT */
#include "parse.h"

#include <errno.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static int is_digit(char c) {
        return c >= '0' && c <= '9';
}

int axp_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *ret) {
        unsigned long long v;
        char *end;

        /* strtoull would take space, '+', and "-1" as 2^64-1 */
        if (!s || !is_digit(*s))
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

int axp_parse_size(const char *s, uint64_t min, uint64_t max, uint64_t *ret) {
        static const char suffixes[] = "KMGT";
        char digits[32];
        size_t n = s ? strlen(s) : 0;
        unsigned shift = 0;
        uint64_t v;
        int r;

        if (n == 0 || n >= sizeof(digits))
                return n == 0 ? -EINVAL : -ERANGE;
        memcpy(digits, s, n + 1);
        for (int i = 0; suffixes[i]; i++)
                if (s[n - 1] == suffixes[i] || s[n - 1] == suffixes[i] - 'A' + 'a') {
                        shift = 10 * (unsigned) (i + 1);
                        digits[n - 1] = 0;
                }
        if ((r = axp_parse_u64(digits, 0, UINT64_MAX, &v)) < 0)
                return r;
        if (v > (UINT64_MAX >> shift))
                return -ERANGE;
        v <<= shift;
        if (v < min || v > max)
                return -ERANGE;
        *ret = v;
        return 0;
}

int axp_parse_u32(const char *s, uint32_t min, uint32_t max, uint32_t *ret) {
        uint64_t v;
        int r = axp_parse_u64(s, min, max, &v);

        if (r < 0)
                return r;
        *ret = (uint32_t) v;
        return 0;
}

int axp_parse_int(const char *s, int min, int max, int *ret) {
        long long v;
        char *end;

        if (!s || !is_digit(s[*s == '-']))
                return -EINVAL;
        errno = 0;
        v = strtoll(s, &end, 10);
        if (*end)
                return -EINVAL;
        if (errno == ERANGE || v < min || v > max)
                return -ERANGE;
        *ret = (int) v;
        return 0;
}

static locale_t c_locale;

static void c_locale_init(void) {
        c_locale = newlocale(LC_ALL_MASK, "C", (locale_t) 0);
}

int axp_parse_double(const char *s, double min, double max, double *ret) {
        static pthread_once_t once = PTHREAD_ONCE_INIT;
        char *end;
        double v;

        /* strtod would skip leading space */
        if (!s || !*s || *s == ' ' || (*s >= '\t' && *s <= '\r'))
                return -EINVAL;
        /* "0.5" whatever LC_NUMERIC says (the monitor runs in the user's locale) */
        pthread_once(&once, c_locale_init);
        v = c_locale ? strtod_l(s, &end, c_locale) : strtod(s, &end);
        if (end == s || *end || isnan(v))
                return -EINVAL;
        /* overflow gives ±HUGE_VAL, judged out of range like "inf"; underflow a value near 0,
         * judged like any other */
        if (!isfinite(v) || v < min || v > max)
                return -ERANGE;
        *ret = v;
        return 0;
}
