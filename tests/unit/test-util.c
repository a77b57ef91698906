/* SPDX-License-Identifier: MIT */
#include "test.h"
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

/* axp_grow: at least what is asked, doubling, the contents kept; a size past size_t refused
 * with nothing changed. */
static void test_grow(void) {
        int *v = NULL;
        size_t cap = 0;
        CHECK(axp_grow((void **) &v, &cap, 3, sizeof(int)) == 0 && v && cap == 8);
        for (int i = 0; i < 8; i++)
                v[i] = i;
        CHECK(axp_grow((void **) &v, &cap, 8, sizeof(int)) == 0 && cap == 8);
        CHECK(axp_grow((void **) &v, &cap, 9, sizeof(int)) == 0 && cap == 16 && v[7] == 7);
        CHECK(axp_grow((void **) &v, &cap, 100, sizeof(int)) == 0 && cap == 128 && v[5] == 5);
        int *before = v;
        CHECK(axp_grow((void **) &v, &cap, SIZE_MAX / 2, sizeof(int)) == -ENOMEM && v == before && cap == 128);
        free(v);
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

static void put_memstream(void *ctx, const char *p, size_t n) {
        fwrite(p, 1, n, ctx);
}

/* one_line: newline and tab are escaped too, the rest as axp_write_visible does */
static void test_visible_one_line(void) {
        char *buf = NULL;
        size_t size = 0;
        FILE *f = open_memstream(&buf, &size);
        const char in[] = "/home/u/a\nfiles: forged\tline\r\x1b[2J\xc2\x9b caf\xc3\xa9 \xe9";

        axp_visible(in, sizeof(in) - 1, true, put_memstream, f);
        fclose(f);
        CHECK_MSG(strcmp(buf, "/home/u/a\\x0afiles: forged\\x09line\\x0d\\x1b[2J\\xc2\\x9b caf\xc3\xa9 \xe9") == 0,
                  "'%s'", buf);
        free(buf);
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
        RUN(test_grow);
        RUN(test_quantile);
        RUN(test_write_visible);
        RUN(test_visible_one_line);
        TEST_EXIT();
}
