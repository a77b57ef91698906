/* SPDX-License-Identifier: MIT */
/* base/utf8.h: the one check of well-formed UTF-8 (RFC 3629). */
#include "test.h"
#include "base/util.h"
#include "base/utf8.h"

/* An independent statement of RFC 3629 for one character: decode by the lead byte's
 * pattern, then refuse overlong forms, surrogates and code points past U+10FFFF. */
static size_t ref_char_len(const uint8_t *s, size_t len) {
        size_t n;
        uint32_t cp;

        if (len == 0)
                return 0;
        if (s[0] < 0x80)
                return 1;
        if ((s[0] & 0xe0) == 0xc0)
                n = 2, cp = s[0] & 0x1f;
        else if ((s[0] & 0xf0) == 0xe0)
                n = 3, cp = s[0] & 0x0f;
        else if ((s[0] & 0xf8) == 0xf0)
                n = 4, cp = s[0] & 0x07;
        else
                return 0;
        if (n > len)
                return 0;
        for (size_t i = 1; i < n; i++) {
                if ((s[i] & 0xc0) != 0x80)
                        return 0;
                cp = cp << 6 | (s[i] & 0x3f);
        }
        if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
            (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
                return 0;
        return n;
}

static void test_char_len_cases(void) {
        static const struct {
                const char *s;
                size_t len, want;
        } cases[] = {
                { "a", 1, 1 },
                { "\0", 1, 1 },                    /* NUL is a character */
                { "\x7f", 1, 1 },
                { "\xc2\x80", 2, 2 },              /* U+0080, the first two-byte one */
                { "\xc3\xa9", 2, 2 },              /* é */
                { "\xdf\xbf", 2, 2 },              /* U+07FF */
                { "\xe0\xa0\x80", 3, 3 },          /* U+0800 */
                { "\xe2\x82\xac", 3, 3 },          /* € */
                { "\xed\x9f\xbf", 3, 3 },          /* U+D7FF, just below the surrogates */
                { "\xee\x80\x80", 3, 3 },          /* U+E000, just above */
                { "\xef\xbf\xbf", 3, 3 },          /* U+FFFF: a noncharacter, but well-formed */
                { "\xf0\x90\x80\x80", 4, 4 },      /* U+10000 */
                { "\xf0\x9f\x99\x82", 4, 4 },      /* 🙂 */
                { "\xf4\x8f\xbf\xbf", 4, 4 },      /* U+10FFFF, the last */
                { "\xc3\xa9xyz", 5, 2 },           /* only the first character counts */
                /* overlong forms */
                { "\xc0\xaf", 2, 0 },              /* '/' in two bytes */
                { "\xc1\xbf", 2, 0 },
                { "\xe0\x80\xaf", 3, 0 },
                { "\xe0\x9f\xbf", 3, 0 },          /* U+07FF in three bytes */
                { "\xf0\x80\x80\xaf", 4, 0 },
                { "\xf0\x8f\xbf\xbf", 4, 0 },      /* U+FFFF in four bytes */
                /* UTF-16 surrogates */
                { "\xed\xa0\x80", 3, 0 },          /* U+D800 */
                { "\xed\xbf\xbf", 3, 0 },          /* U+DFFF */
                /* past U+10FFFF */
                { "\xf4\x90\x80\x80", 4, 0 },      /* U+110000 */
                { "\xf5\x80\x80\x80", 4, 0 },
                { "\xf7\xbf\xbf\xbf", 4, 0 },
                { "\xf8\x88\x80\x80\x80", 5, 0 },  /* the old five-byte form */
                { "\xff", 1, 0 },
                /* cut short, or a continuation missing */
                { "\xc3", 1, 0 },
                { "\xe2\x82", 2, 0 },
                { "\xf0\x9f\x99", 3, 0 },
                { "\xc3(", 2, 0 },
                { "\xe2\x28\xa1", 3, 0 },
                { "\xf0\x9f\x99(", 4, 0 },
                { "\x80", 1, 0 },                  /* a continuation byte alone */
                { "\xbf\xbf", 2, 0 },
                { "", 0, 0 },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++)
                CHECK_MSG(axp_utf8_char_len(cases[i].s, cases[i].len) == cases[i].want,
                          "case %zu: %zu, want %zu", i, axp_utf8_char_len(cases[i].s, cases[i].len),
                          cases[i].want);
}

/* Every one-, two- and three-byte string, and every four-byte one from the leads that could
 * start a character (with each kind of last byte), against the reference. */
static void test_char_len_exhaustive(void) {
        uint8_t s[4];
        size_t bad = 0;

        for (unsigned a = 0; a < 256; a++) {
                s[0] = (uint8_t) a;
                bad += axp_utf8_char_len((char *) s, 1) != ref_char_len(s, 1);
                for (unsigned b = 0; b < 256; b++) {
                        s[1] = (uint8_t) b;
                        bad += axp_utf8_char_len((char *) s, 2) != ref_char_len(s, 2);
                        for (unsigned c = 0; c < 256; c++) {
                                s[2] = (uint8_t) c;
                                bad += axp_utf8_char_len((char *) s, 3) != ref_char_len(s, 3);
                                if (a < 0xf0 || a > 0xf7)
                                        continue;
                                static const uint8_t last[] = { 0x00, 0x7f, 0x80, 0xa5, 0xbf, 0xc0, 0xff };
                                for (size_t d = 0; d < ELEMENTSOF(last); d++) {
                                        s[3] = last[d];
                                        bad += axp_utf8_char_len((char *) s, 4) != ref_char_len(s, 4);
                                }
                        }
                }
        }
        CHECK_EQ_INT(bad, 0);
}

/* Whether continuation bytes after s[0..len) make a character, by the reference. */
static bool completes(const uint8_t *s, size_t len) {
        uint8_t t[4];

        if (len >= 4)
                return false;
        memcpy(t, s, len);
        for (unsigned x = 0x80; x <= 0xbf; x++) {
                t[len] = (uint8_t) x;
                if (ref_char_len(t, len + 1) == len + 1 || completes(t, len + 1))
                        return true;
        }
        return false;
}

static void test_char_cut(void) {
        uint8_t s[4];
        size_t bad = 0;

        CHECK(axp_utf8_char_cut("\xc3", 1));
        CHECK(axp_utf8_char_cut("\xe2\x82", 2));
        CHECK(axp_utf8_char_cut("\xf0\x9f\x99", 3));
        CHECK(axp_utf8_char_cut("\xf4\x8f", 2));
        CHECK(!axp_utf8_char_cut("a", 1));
        CHECK(!axp_utf8_char_cut("\xc3\xa9", 2));      /* complete */
        CHECK(!axp_utf8_char_cut("\xc0", 1));          /* could only be overlong */
        CHECK(!axp_utf8_char_cut("\xe0\x80", 2));
        CHECK(!axp_utf8_char_cut("\xed\xa0", 2));      /* could only be a surrogate */
        CHECK(!axp_utf8_char_cut("\xf4\x90", 2));      /* could only be past U+10FFFF */
        CHECK(!axp_utf8_char_cut("\xf5", 1));
        CHECK(!axp_utf8_char_cut("\x80", 1));
        CHECK(!axp_utf8_char_cut("\xe2(", 2));
        CHECK(!axp_utf8_char_cut("", 0));

        /* every proper beginning of every character is a cut one ... */
        for (uint32_t cp = 0x80; cp <= 0x10ffff; cp++) {
                size_t n = axp_utf8_encode(cp, s);
                if (cp >= 0xd800 && cp <= 0xdfff)
                        continue;
                for (size_t k = 1; k < n; k++)
                        bad += !axp_utf8_char_cut((char *) s, k);
        }
        /* ... and whatever is called cut can be completed to a character */
        for (unsigned a = 0; a < 256; a++) {
                s[0] = (uint8_t) a;
                if (axp_utf8_char_cut((char *) s, 1))
                        bad += !completes(s, 1);
                for (unsigned b = 0; b < 256; b++) {
                        s[1] = (uint8_t) b;
                        if (axp_utf8_char_cut((char *) s, 2))
                                bad += !completes(s, 2);
                        for (unsigned c = 0; c < 256; c++) {
                                s[2] = (uint8_t) c;
                                if (axp_utf8_char_cut((char *) s, 3))
                                        bad += !completes(s, 3);
                        }
                }
        }
        CHECK_EQ_INT(bad, 0);
}

static void test_valid(void) {
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
                { "\xc0\xaf", 0 },             /* overlong '/' */
                { "\xe0\x80\xaf", 0 },         /* overlong */
                { "ok\xed\xa0\x80", 2 },       /* a UTF-16 surrogate */
                { "\xf4\x90\x80\x80", 0 },     /* past U+10FFFF */
                { "\xc3\xa4\xf5", 2 },
                { "\xe2\x9c", 0 },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                size_t len = strlen(cases[i].s), at = 12345;
                bool ok = axp_utf8_valid(cases[i].s, len, &at);
                CHECK_MSG(ok == (cases[i].at == SIZE_MAX), "case %zu", i);
                if (!ok)
                        CHECK_MSG(at == cases[i].at, "case %zu: at %zu, want %zu", i, at, cases[i].at);
                else
                        CHECK_MSG(at == 12345, "case %zu: offset written on success", i);
                CHECK(axp_utf8_valid(cases[i].s, len, NULL) == ok);
        }
        /* a NUL is text like any other character; the length decides */
        CHECK(axp_utf8_valid("a\0b", 3, NULL));
        CHECK(!axp_utf8_valid("a\0\xff", 3, NULL));
        /* the length bounds the look-ahead: a character cut by it is not one */
        CHECK(!axp_utf8_valid("\xc3\xa9", 1, NULL));
}

/* Every code point encodes to a well-formed character of the length RFC 3629 gives it, and
 * back to itself. */
static void test_encode(void) {
        size_t bad = 0;

        for (uint32_t cp = 0; cp <= 0x10ffff; cp++) {
                uint8_t s[4];
                size_t n = axp_utf8_encode(cp, s), want = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
                uint32_t back = n == 1 ? s[0] : (uint32_t) (s[0] & (0x7f >> n));
                for (size_t i = 1; i < n; i++)
                        back = back << 6 | (s[i] & 0x3f);
                if (cp >= 0xd800 && cp <= 0xdfff)
                        bad += n != 3 || back != cp || axp_utf8_char_len((char *) s, n) != 0;
                else
                        bad += n != want || back != cp || axp_utf8_char_len((char *) s, n) != n;
        }
        CHECK_EQ_INT(bad, 0);
}

/* The JSON writer and reader in base both stand on the same check. */
static void test_json_uses_it(void) {
        char *out = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&out, &len);

        axp_json_string(f, "a\xc0\xaf\xc3\xa9\xed\xa0\x80", 8);
        fclose(f);
        CHECK_MSG(strcmp(out, "\"a\xef\xbf\xbd\xef\xbf\xbd\xc3\xa9\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"") == 0,
                  "%s", out);
        free(out);

        /* escapes between plain runs, DEL and NUL included */
        f = open_memstream(&out, &len);
        axp_json_string(f, "x\x7f\"\\\x01y\n\r\tz\0\xc3\xa9", 13);
        fclose(f);
        CHECK_MSG(strcmp(out, "\"x\\u007f\\\"\\\\\\u0001y\\n\\r\\tz\\u0000\xc3\xa9\"") == 0, "%s", out);
        free(out);
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
        RUN(test_utf8_stream);
        RUN(test_char_len_cases);
        RUN(test_char_len_exhaustive);
        RUN(test_char_cut);
        RUN(test_valid);
        RUN(test_encode);
        RUN(test_json_uses_it);
        TEST_EXIT();
}
