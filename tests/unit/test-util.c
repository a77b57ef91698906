/* SPDX-License-Identifier: MIT */
#include "test.h"
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

int main(void) {
        RUN(test_errorf);
        RUN(test_overflow);
        RUN(test_alloc_aligned);
        RUN(test_quantile);
        TEST_EXIT();
}
