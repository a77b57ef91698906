/* SPDX-License-Identifier: MIT */
#include "test.h"
#include "util.h"

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

int main(void) {
        RUN(test_errorf);
        RUN(test_overflow);
        RUN(test_alloc_aligned);
        RUN(test_quantile);
        RUN(test_utf8_stream);
        TEST_EXIT();
}
