/* SPDX-License-Identifier: MIT */
/* A minimal test harness: each test program runs its cases, prints one line per case, and
 * exits 0 (all passed), 1 (a failure) or 77 (skipped, as meson expects). */
#pragma once

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test_failures_;
static int test_case_failed_;

#define CHECK(cond)                                                                                \
        do {                                                                                       \
                if (!(cond)) {                                                                     \
                        fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);   \
                        test_case_failed_ = 1;                                                     \
                }                                                                                  \
        } while (0)

#define CHECK_MSG(cond, ...)                                                                       \
        do {                                                                                       \
                if (!(cond)) {                                                                     \
                        fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);   \
                        fprintf(stderr, __VA_ARGS__);                                              \
                        fputc('\n', stderr);                                                       \
                        test_case_failed_ = 1;                                                     \
                }                                                                                  \
        } while (0)

#define CHECK_EQ_INT(a, b)                                                                         \
        do {                                                                                       \
                long long _a = (long long) (a), _b = (long long) (b);                              \
                CHECK_MSG(_a == _b, "%lld != %lld", _a, _b);                                       \
        } while (0)

#define CHECK_NEAR(a, b, tol)                                                                      \
        do {                                                                                       \
                double _a = (a), _b = (b);                                                         \
                CHECK_MSG(fabs(_a - _b) <= (tol), "%.9g vs %.9g (tol %g)", _a, _b, (double) (tol)); \
        } while (0)

#define RUN(fn)                                                                                    \
        do {                                                                                       \
                test_case_failed_ = 0;                                                             \
                fn();                                                                              \
                printf("%s %s\n", test_case_failed_ ? "FAIL" : "ok  ", #fn);                       \
                fflush(stdout);                                                                    \
                test_failures_ += test_case_failed_;                                               \
        } while (0)

#define TEST_EXIT() return test_failures_ ? 1 : 0

#define TEST_SKIP(...)                                                                             \
        do {                                                                                       \
                printf("SKIP: ");                                                                  \
                printf(__VA_ARGS__);                                                               \
                printf("\n");                                                                      \
                exit(77);                                                                          \
        } while (0)
