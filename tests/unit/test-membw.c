/* SPDX-License-Identifier: MIT */
/* The read-bandwidth probe on a small buffer: it runs every method this CPU has, each reads the
 * whole buffer (the probe checks every method's sum), the figures are positive and finite, and
 * the best per thread count is the largest of the methods'. No timing is asserted: the buffer
 * fits in the cache and the machine may be busy. */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/membw.h"
#include "test.h"

static bool has_method(const axp_membw *bw, const char *prefix) {
        for (int m = 0; m < bw->n_methods; m++)
                if (strncmp(bw->method[m], prefix, strlen(prefix)) == 0)
                        return true;
        return false;
}

static void test_small_buffer(void) {
        axp_membw bw;
        int r = axp_membw_read((4u << 20) + 100, 2, 2, &bw);
        CHECK_EQ_INT(r, 0);
        if (r < 0)
                return;
        CHECK_EQ_INT(bw.bytes, 4u << 20); /* whole pages */
        CHECK_EQ_INT(bw.max_threads, 2);
        CHECK_EQ_INT(bw.reps, 2);
        CHECK(bw.n_methods >= 1 && bw.n_methods <= AXP_MEMBW_MAX_METHODS);
        /* the portable loop everywhere; each vector path exactly where the CPU runs it */
        CHECK(has_method(&bw, "c-"));
        CHECK_EQ_INT(has_method(&bw, "avx512-"), axp_cpu_isa_available("avx512"));
        CHECK_EQ_INT(has_method(&bw, "avx2-"), axp_cpu_isa_available("avx2"));
        for (int m = 0; m < bw.n_methods; m++) {
                CHECK(bw.method[m] && *bw.method[m]);
                for (int o = 0; o < m; o++)
                        CHECK_MSG(strcmp(bw.method[m], bw.method[o]) != 0, "%s twice", bw.method[m]);
        }
        for (int t = 0; t < 2; t++) {
                double max = 0;
                int arg = -1;
                for (int m = 0; m < bw.n_methods; m++) {
                        double g = bw.gbps[m][t];
                        CHECK_MSG(isfinite(g) && g > 0 && g < 1e5, "%s, %d threads: %g GB/s", bw.method[m],
                                  t + 1, g);
                        if (g > max) {
                                max = g;
                                arg = m;
                        }
                }
                CHECK(bw.best[t] == max);
                CHECK_EQ_INT(bw.best_method[t], arg);
                printf("# %d thread%s: best %.1f GB/s (%s; a 4 MiB buffer, cached)\n", t + 1, t ? "s" : "",
                       bw.best[t], bw.method[bw.best_method[t]]);
        }
        /* the slots past the thread count stay empty */
        CHECK(bw.best[2] == 0 && bw.gbps[0][2] == 0);
}

static void test_bad_arguments(void) {
        axp_membw bw;
        CHECK_EQ_INT(axp_membw_read(1u << 20, 1, 1, NULL), -EINVAL);
        CHECK_EQ_INT(axp_membw_read((1u << 20) - 1, 1, 1, &bw), -EINVAL);
        CHECK_EQ_INT(axp_membw_read(1u << 20, 0, 1, &bw), -EINVAL);
        CHECK_EQ_INT(axp_membw_read(1u << 20, AXP_MEMBW_MAX_THREADS + 1, 1, &bw), -EINVAL);
        CHECK_EQ_INT(axp_membw_read(1u << 20, 1, 0, &bw), -EINVAL);
}

int main(void) {
        RUN(test_small_buffer);
        RUN(test_bad_arguments);
        TEST_EXIT();
}
