/* SPDX-License-Identifier: MIT */
#include "test.h"
#include "base/parse.h"
#include "base/sha256.h"
#include "base/utf8.h"
#include "base/util.h"

static void test_errorf(void) {
        axp_error e = { 0 };
        CHECK_EQ_INT(axp_errorf(&e, -EINVAL, "bad %s %d", "thing", 3), -EINVAL);
        CHECK(strcmp(e.msg, "bad thing 3") == 0);
        CHECK_EQ_INT(e.code, -EINVAL);
        CHECK_EQ_INT(axp_errorf(NULL, -ENOMEM, "x"), -ENOMEM);
}

static void test_overflow(void) {
        uint64_t r;
        CHECK(axp_mul_ok(1u << 20, 1u << 20, &r) && r == (1ull << 40));
        CHECK(!axp_mul_ok(UINT64_MAX / 2, 3, &r));
        CHECK(!axp_add_ok(UINT64_MAX, 1, &r));
}

static void test_alloc_aligned(void) {
        _cleanup_free_ char *p = axp_alloc(100);
        CHECK(p != NULL);
        CHECK(((uintptr_t) p & 63) == 0);
        CHECK(p[99] == 0);
}

static void test_quantile(void) {
        double v[] = { 5, 1, 4, 2, 3, 10, 9, 8, 7, 6 };
        double one[] = { 42 };
        CHECK(axp_quantile(v, 10, 0.9) == 9);  /* nearest rank: the 9th of 10 */
        CHECK(axp_quantile(v, 10, 0.99) == 10);
        CHECK(axp_quantile(v, 10, 0.5) == 5);
        CHECK(axp_quantile(v, 10, 1.0) == 10);
        CHECK(v[0] == 1 && v[9] == 10);        /* sorted in place */
        CHECK(axp_quantile(one, 1, 0.9) == 42);
        CHECK(axp_quantile(NULL, 0, 0.9) == 0);
}

/* Feed the pieces one by one into a stream; return what came out, flushed or not. */
static char *stream(bool no_nul, bool flush, const char *const *pieces, const size_t *lens, size_t n,
                    size_t *ret_len) {
        axp_utf8_stream s = { .no_nul = no_nul };
        char *out = NULL;
        size_t len = 0, cap = 0;

        for (size_t i = 0; i < n; i++)
                CHECK(axp_utf8_stream_push(&s, pieces[i], lens[i], &out, &len, &cap) == 0);
        if (flush) {
                CHECK(axp_utf8_stream_flush(&s, &out, &len, &cap) == 0);
                CHECK(axp_utf8_stream_flush(&s, &out, &len, &cap) == 0); /* nothing more */
        }
        *ret_len = len;
        return out ? out : calloc(1, 1);
}

#define STREAM_IS(no_nul, flush, want, ...)                                                        \
        do {                                                                                       \
                const char *const p_[] = { __VA_ARGS__ };                                          \
                size_t l_[ELEMENTSOF(p_)], n_;                                                     \
                for (size_t i_ = 0; i_ < ELEMENTSOF(p_); i_++)                                     \
                        l_[i_] = strlen(p_[i_]);                                                   \
                _cleanup_free_ char *got_ = stream(no_nul, flush, p_, l_, ELEMENTSOF(p_), &n_);     \
                CHECK_MSG(n_ == sizeof(want) - 1 && memcmp(got_, want, n_) == 0, "got '%s'", got_); \
        } while (0)

#define FFFD "\xef\xbf\xbd"

static void test_utf8_stream(void) {
        /* a character split between tokens is held until its last byte, then passes whole */
        STREAM_IS(false, false, "caf", "caf", "\xc3");
        STREAM_IS(false, false, "caf\xc3\xa9", "caf", "\xc3", "\xa9");
        STREAM_IS(false, false, "\xf0\x9f\x98\x80!", "\xf0", "\x9f", "\x98\x80!");
        /* at the end, held bytes that never completed a character are one U+FFFD */
        STREAM_IS(false, true, "ok " FFFD, "ok ", "\xf0\x9f");
        STREAM_IS(false, true, "ok", "ok");
        /* a character cut short by a byte that cannot continue it: one U+FFFD, then that byte */
        STREAM_IS(false, false, FFFD "x", "\xe2\x82", "x");
        STREAM_IS(false, false, FFFD "\xc3\xa9", "\xe2", "\xc3\xa9");
        /* bytes that cannot be in UTF-8 at all, one U+FFFD each: a byte-fallback token's 0xff,
         * a stray continuation byte, an overlong form, a surrogate, past U+10FFFF */
        STREAM_IS(false, true, "a" FFFD "b", "a", "\xff", "b");
        STREAM_IS(false, true, FFFD, "\x80");
        STREAM_IS(false, true, FFFD FFFD, "\xc0\xaf");
        STREAM_IS(false, true, FFFD FFFD FFFD, "\xed\xa0\x80");
        STREAM_IS(false, true, FFFD FFFD FFFD FFFD, "\xf4\x90\x80\x80");

        /* NUL: kept as text, or U+FFFD for a D-Bus string */
        const char *const nul[] = { "a", "b" };
        const size_t nul_len[] = { 2, 1 }; /* "a\0", then "b" */
        size_t n;
        _cleanup_free_ char *kept = stream(false, true, nul, nul_len, 2, &n);
        CHECK(n == 3 && memcmp(kept, "a\0b", 3) == 0);
        _cleanup_free_ char *replaced = stream(true, true, nul, nul_len, 2, &n);
        CHECK_MSG(n == 5 && memcmp(replaced, "a" FFFD "b", 5) == 0, "got '%s'", replaced);
}

/* The offset of the first byte that is not part of well-formed UTF-8; len if all is. */
static size_t utf8_invalid(const char *s, size_t len) {
        size_t bad;
        return axp_utf8_valid(s, len, &bad) ? len : bad;
}

static void test_utf8_invalid(void) {
        static const struct {
                const char *s;
                size_t at; /* SIZE_MAX: all well-formed */
        } cases[] = {
                { "", SIZE_MAX },
                { "plain ascii", SIZE_MAX },
                { "\xc3\xa4pfel \xe2\x82\xac \xf0\x9f\x98\x80", SIZE_MAX },
                { "\xef\xbf\xbf\xf4\x8f\xbf\xbf", SIZE_MAX }, /* U+FFFF, U+10FFFF */
                { "abc\xff", 3 },
                { "\x80", 0 },                 /* a continuation byte alone */
                { "a\xc3", 1 },                /* cut short */
                { "a\xc3(", 1 },
                { "\xc0\xaf", 0 },            /* overlong '/' */
                { "\xe0\x80\xaf", 0 },       /* overlong */
                { "ok\xed\xa0\x80", 2 },     /* a UTF-16 surrogate */
                { "\xf4\x90\x80\x80", 0 },  /* past U+10FFFF */
                { "\xc3\xa4\xf5", 2 },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                size_t len = strlen(cases[i].s);
                size_t want = cases[i].at == SIZE_MAX ? len : cases[i].at;
                CHECK_MSG(utf8_invalid(cases[i].s, len) == want, "case %zu: %zu, want %zu", i,
                          utf8_invalid(cases[i].s, len), want);
        }
        /* a NUL is text like any other character; the length decides */
        CHECK(utf8_invalid("a\0b", 3) == 3);
}

static void test_parse_uint(void) {
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
        const char *bad[] = { "", "-1", "+1", " 1", "1 ", "0x10", "1.5", "1e3", "abc", "12abc", NULL };
        for (const char **b = bad; *b; b++)
                CHECK_MSG(axp_parse_u64(*b, 0, UINT64_MAX, &v) == -EINVAL, "'%s'", *b);
        CHECK_EQ_INT(axp_parse_u64(NULL, 0, 1, &v), -EINVAL);
        CHECK(v == 7); /* untouched on failure */
}

static void test_parse_double(void) {
        double d = 7;
        CHECK(axp_parse_double("0.5", 0, 1, &d) == 0 && d == 0.5);
        CHECK(axp_parse_double("-2", -10, 10, &d) == 0 && d == -2);
        CHECK(axp_parse_double("1e2", 0, 100, &d) == 0 && d == 100);
        CHECK(axp_parse_double("1e-400", 0, 1, &d) == 0 && d == 0); /* underflow: about 0 */
        d = 7;
        CHECK_EQ_INT(axp_parse_double("1.5", 0, 1, &d), -ERANGE);
        CHECK_EQ_INT(axp_parse_double("-1", 0, 1, &d), -ERANGE);
        CHECK_EQ_INT(axp_parse_double("1e400", 0, HUGE_VAL, &d), -ERANGE);
        CHECK_EQ_INT(axp_parse_double("inf", -HUGE_VAL, HUGE_VAL, &d), -ERANGE);
        const char *bad[] = { "", " 1", "1 ", "nan", "abc", "1.5x", "--1", NULL };
        for (const char **b = bad; *b; b++)
                CHECK_MSG(axp_parse_double(*b, -HUGE_VAL, HUGE_VAL, &d) == -EINVAL, "'%s'", *b);
        CHECK(d == 7);
}

static char *visible(const char *s, size_t len) {
        char *buf = NULL;
        size_t size = 0;
        FILE *f = open_memstream(&buf, &size);
        axp_write_visible(f, s, len);
        fclose(f);
        return buf;
}

static void test_write_visible(void) {
        static const struct {
                const char *in, *out;
        } cases[] = {
                { "", "" },
                { "plain text\nand\ttabs", "plain text\nand\ttabs" },
                { "bell\a", "bell\\x07" },
                { "\x1b[31mred\x1b[0m", "\\x1b[31mred\\x1b[0m" },
                { "cr\rback\bdel\x7f", "cr\\x0dback\\x08del\\x7f" },
                { "\x01\x1f ", "\\x01\\x1f " },
                /* C1 controls (NEL, CSI) as UTF-8; the letters around them, and U+00A0, pass */
                { "a\xc2\x85" "b\xc2\x9b" "2J", "a\\xc2\\x85b\\xc2\\x9b2J" },
                { "\xc2\xa0\xc3\xa4\xe2\x80\x9b", "\xc2\xa0\xc3\xa4\xe2\x80\x9b" },
                /* a lone C2 at the end is no control character */
                { "x\xc2", "x\xc2" },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_free_ char *got = visible(cases[i].in, strlen(cases[i].in));
                CHECK_MSG(strcmp(got, cases[i].out) == 0, "case %zu: '%s'", i, got);
        }
        /* NUL is a control character too: the length, not the terminator, bounds the text */
        _cleanup_free_ char *got = visible("a\0b", 3);
        CHECK(strcmp(got, "a\\x00b") == 0);
}

static void sha256_of(const void *data, size_t len, size_t step, char hex[65]) {
        axp_sha256 s;
        uint8_t d[32];

        axp_sha256_init(&s);
        for (size_t o = 0; o < len; o += step)
                axp_sha256_update(&s, (const char *) data + o, len - o < step ? len - o : step);
        axp_sha256_final(&s, d);
        axp_sha256_hex(d, hex);
}

/* The FIPS 180-4 examples, and a million 'a' fed in pieces that straddle the blocks. */
static void test_sha256(void) {
        static const char two_blocks[] = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
        char hex[65];
        _cleanup_free_ char *a = malloc(1000000);

        sha256_of("", 0, 1, hex);
        CHECK(strcmp(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855") == 0);
        sha256_of("abc", 3, 1, hex);
        CHECK(strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") == 0);
        sha256_of(two_blocks, strlen(two_blocks), 7, hex);
        CHECK(strcmp(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1") == 0);
        CHECK(a != NULL);
        memset(a, 'a', 1000000);
        sha256_of(a, 1000000, 4097, hex);
        CHECK(strcmp(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0") == 0);
}

int main(void) {
        RUN(test_sha256);
        RUN(test_errorf);
        RUN(test_overflow);
        RUN(test_alloc_aligned);
        RUN(test_quantile);
        RUN(test_utf8_stream);
        RUN(test_utf8_invalid);
        RUN(test_parse_uint);
        RUN(test_parse_double);
        RUN(test_write_visible);
        TEST_EXIT();
}
