/* SPDX-License-Identifier: MIT */
/* base/parse.h: numbers as a person types them. */
#include <locale.h>

#include "test.h"
#include "base/parse.h"
#include "base/util.h"

static void test_u64(void) {
        uint64_t v = 7;
        CHECK(axp_parse_u64("0", 0, 10, &v) == 0 && v == 0);
        CHECK(axp_parse_u64("4294967295", 1, UINT32_MAX, &v) == 0 && v == UINT32_MAX);
        CHECK(axp_parse_u64("18446744073709551615", 0, UINT64_MAX, &v) == 0 && v == UINT64_MAX);
        CHECK(axp_parse_u64("007", 0, 10, &v) == 0 && v == 7);
        v = 7;
        /* out of range: beyond max, below min, beyond 64 bits */
        CHECK_EQ_INT(axp_parse_u64("4294967296", 1, UINT32_MAX, &v), -ERANGE);
        CHECK_EQ_INT(axp_parse_u64("0", 1, 10, &v), -ERANGE);
        CHECK_EQ_INT(axp_parse_u64("18446744073709551616", 0, UINT64_MAX, &v), -ERANGE);
        CHECK_EQ_INT(axp_parse_u64("99999999999999999999999", 0, UINT64_MAX, &v), -ERANGE);
        /* not a whole number: signs (strtoull would wrap "-1"), space, bases, fractions, junk */
        const char *bad[] = { "", "-1", "+1", " 1", "1 ", "\t1", "0x10", "1.5", "1e3", "abc", "12abc", NULL };
        for (const char **b = bad; *b; b++)
                CHECK_MSG(axp_parse_u64(*b, 0, UINT64_MAX, &v) == -EINVAL, "'%s'", *b);
        CHECK_EQ_INT(axp_parse_u64(NULL, 0, 1, &v), -EINVAL);
        CHECK(v == 7); /* untouched on failure */
}

static void test_u32(void) {
        uint32_t v = 7;
        CHECK(axp_parse_u32("4294967295", 1, UINT32_MAX, &v) == 0 && v == UINT32_MAX);
        CHECK(axp_parse_u32("1", 1, UINT32_MAX, &v) == 0 && v == 1);
        v = 7;
        CHECK_EQ_INT(axp_parse_u32("4294967296", 1, UINT32_MAX, &v), -ERANGE);
        CHECK_EQ_INT(axp_parse_u32("18446744073709551617", 0, UINT32_MAX, &v), -ERANGE);
        CHECK_EQ_INT(axp_parse_u32("0", 1, UINT32_MAX, &v), -ERANGE);
        CHECK_EQ_INT(axp_parse_u32("-1", 0, UINT32_MAX, &v), -EINVAL);
        CHECK_EQ_INT(axp_parse_u32("x", 0, UINT32_MAX, &v), -EINVAL);
        CHECK(v == 7);
}

static void test_int(void) {
        int v = 7;
        CHECK(axp_parse_int("0", 0, 10, &v) == 0 && v == 0);
        CHECK(axp_parse_int("-0", 0, 10, &v) == 0 && v == 0);
        CHECK(axp_parse_int("-5", -10, 10, &v) == 0 && v == -5);
        CHECK(axp_parse_int("2147483647", 0, INT32_MAX, &v) == 0 && v == INT32_MAX);
        CHECK(axp_parse_int("-2147483648", INT32_MIN, 0, &v) == 0 && v == INT32_MIN);
        v = 7;
        CHECK_EQ_INT(axp_parse_int("-1", 0, 10, &v), -ERANGE);
        CHECK_EQ_INT(axp_parse_int("11", 0, 10, &v), -ERANGE);
        CHECK_EQ_INT(axp_parse_int("2147483648", INT32_MIN, INT32_MAX, &v), -ERANGE);
        CHECK_EQ_INT(axp_parse_int("-2147483649", INT32_MIN, INT32_MAX, &v), -ERANGE);
        CHECK_EQ_INT(axp_parse_int("99999999999999999999999", INT32_MIN, INT32_MAX, &v), -ERANGE);
        const char *bad[] = { "", "-", "--1", "+1", " 1", "1 ", "- 1", "0x10", "1.5", "abc", NULL };
        for (const char **b = bad; *b; b++)
                CHECK_MSG(axp_parse_int(*b, INT32_MIN, INT32_MAX, &v) == -EINVAL, "'%s'", *b);
        CHECK_EQ_INT(axp_parse_int(NULL, 0, 1, &v), -EINVAL);
        CHECK(v == 7);
}

static void test_double(void) {
        double d = 7;
        CHECK(axp_parse_double("0.5", 0, 1, &d) == 0 && d == 0.5);
        CHECK(axp_parse_double("-2", -10, 10, &d) == 0 && d == -2);
        CHECK(axp_parse_double("+2", -10, 10, &d) == 0 && d == 2);
        CHECK(axp_parse_double("1e2", 0, 100, &d) == 0 && d == 100);
        CHECK(axp_parse_double(".25", 0, 1, &d) == 0 && d == 0.25);
        CHECK(axp_parse_double("1e-400", 0, 1, &d) == 0 && d == 0); /* underflow: about 0 */
        d = 7;
        CHECK_EQ_INT(axp_parse_double("1.5", 0, 1, &d), -ERANGE);
        CHECK_EQ_INT(axp_parse_double("-1", 0, 1, &d), -ERANGE);
        CHECK_EQ_INT(axp_parse_double("1e400", 0, HUGE_VAL, &d), -ERANGE);
        CHECK_EQ_INT(axp_parse_double("inf", -HUGE_VAL, HUGE_VAL, &d), -ERANGE);
        CHECK_EQ_INT(axp_parse_double("-inf", -HUGE_VAL, HUGE_VAL, &d), -ERANGE);
        const char *bad[] = { "", " 1", "\n1", "1 ", "nan", "abc", "1.5x", "--1", "0,5", NULL };
        for (const char **b = bad; *b; b++)
                CHECK_MSG(axp_parse_double(*b, -HUGE_VAL, HUGE_VAL, &d) == -EINVAL, "'%s'", *b);
        CHECK_EQ_INT(axp_parse_double(NULL, 0, 1, &d), -EINVAL);
        CHECK(d == 7);
}

/* A program in a locale with a decimal comma (the monitor runs in the user's) still reads
 * "0.5" as configuration files and options write it. */
static void test_double_locale(void) {
        static const char *const commas[] = { "de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8", "ru_RU.UTF-8", NULL };
        double d = 7;
        const char *set = NULL;

        for (const char *const *l = commas; *l && !set; l++)
                set = setlocale(LC_NUMERIC, *l);
        if (!set) {
                printf("     (no locale with a decimal comma installed; checked in C only)\n");
                set = setlocale(LC_NUMERIC, "C");
        }
        CHECK(axp_parse_double("0.5", 0, 1, &d) == 0 && d == 0.5);
        CHECK_EQ_INT(axp_parse_double("0,5", 0, 1, &d), -EINVAL);
        setlocale(LC_NUMERIC, "C");
}

static void test_size(void) {
        uint64_t v = 7;
        CHECK(axp_parse_size("0", 0, UINT64_MAX, &v) == 0 && v == 0);
        CHECK(axp_parse_size("4096", 0, UINT64_MAX, &v) == 0 && v == 4096);
        CHECK(axp_parse_size("1K", 0, UINT64_MAX, &v) == 0 && v == 1024);
        CHECK(axp_parse_size("512M", 0, UINT64_MAX, &v) == 0 && v == UINT64_C(512) << 20);
        CHECK(axp_parse_size("512m", 0, UINT64_MAX, &v) == 0 && v == UINT64_C(512) << 20);
        CHECK(axp_parse_size("6G", 0, UINT64_MAX, &v) == 0 && v == UINT64_C(6) << 30);
        CHECK(axp_parse_size("2t", 0, UINT64_MAX, &v) == 0 && v == UINT64_C(2) << 40);
        CHECK(axp_parse_size("16777215T", 0, UINT64_MAX, &v) == 0 && v == UINT64_C(16777215) << 40);
        v = 7;
        /* out of range: beyond max or min, or beyond 64 bits once multiplied */
        CHECK_EQ_INT(axp_parse_size("2G", 0, UINT64_C(1) << 30, &v), -ERANGE);
        CHECK_EQ_INT(axp_parse_size("0M", 1, UINT64_MAX, &v), -ERANGE);
        CHECK_EQ_INT(axp_parse_size("16777216T", 0, UINT64_MAX, &v), -ERANGE);
        CHECK_EQ_INT(axp_parse_size("99999999999999999999999G", 0, UINT64_MAX, &v), -ERANGE);
        /* not a size: no digits, other suffixes, two suffixes, space, fractions, signs */
        const char *bad[] = { "", "G", "6GB", "6GiB", "6X", "6KK", "6 G", " 6G", "1.5G", "-1G", "+1G", "auto", NULL };
        for (const char **b = bad; *b; b++)
                CHECK_MSG(axp_parse_size(*b, 0, UINT64_MAX, &v) == -EINVAL, "'%s'", *b);
        CHECK_EQ_INT(axp_parse_size(NULL, 0, 1, &v), -EINVAL);
        CHECK(v == 7);
}

int main(void) {
        RUN(test_u64);
        RUN(test_u32);
        RUN(test_int);
        RUN(test_size);
        RUN(test_double);
        RUN(test_double_locale);
        TEST_EXIT();
}
