/* SPDX-License-Identifier: MIT */
/* The read-bandwidth probe on a small buffer: it runs every method this CPU has, each reads the
 * whole buffer (the probe checks every method's sum), the figures are positive and finite, and
 * the best per thread count is the largest of the methods'. No timing is asserted: the buffer
 * fits in the cache and the machine may be busy. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
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

/* Regions the caller holds: every method gives the sum of every 64-bit word read (each region
 * split among the pool's threads, the tails of whole lines included), and misaligned regions
 * or methods past the list are refused. */
static void test_regions(void) {
        const char *names[AXP_MEMBW_MAX_METHODS];
        int n = axp_membw_methods(names);
        CHECK(n >= 1 && n <= AXP_MEMBW_MAX_METHODS);
        /* three regions: 1 MiB, 4096 + 320 bytes (tails of 64-byte lines past the 256-byte
         * steps) and 64 bytes */
        static const size_t off[3] = { 0, (1u << 20) + 4096, (1u << 20) + 16384 };
        static const size_t len[3] = { 1u << 20, 4096 + 320, 64 };
        uint64_t *buf = aligned_alloc(64, (1u << 20) + 32768);
        CHECK_MSG(buf != NULL, "out of memory for the regions' buffer");
        if (!buf)
                return;
        for (size_t i = 0; i < ((1u << 20) + 32768) / 8; i++)
                buf[i] = i * 0x9e3779b97f4a7c15ull;
        const void *p[3];
        uint64_t want = 0;
        for (int r = 0; r < 3; r++) {
                p[r] = (const uint8_t *) buf + off[r];
                for (size_t i = 0; i < len[r] / 8; i++)
                        want += buf[off[r] / 8 + i];
        }
        for (int th = 1; th <= 3; th++) {
                axp_pool *pool = axp_pool_new(th);
                for (int m = 0; m < n; m++) {
                        uint64_t sum = 0;
                        double t = axp_membw_read_regions(pool, m, 3, p, len, &sum);
                        CHECK_MSG(t >= 0 && sum == want, "%s, %d threads: sum %llx, want %llx", names[m], th,
                                  (unsigned long long) sum, (unsigned long long) want);
                }
                uint64_t sum;
                const void *odd[1] = { (const uint8_t *) buf + 8 };
                size_t odd_len[1] = { 64 }, short_len[1] = { 100 };
                CHECK(axp_membw_read_regions(pool, n, 3, p, len, &sum) == -EINVAL);
                CHECK(axp_membw_read_regions(pool, -1, 3, p, len, &sum) == -EINVAL);
                CHECK(axp_membw_read_regions(pool, 0, 1, odd, odd_len, &sum) == -EINVAL);
                CHECK(axp_membw_read_regions(pool, 0, 1, p, short_len, &sum) == -EINVAL);
                axp_pool_free(pool);
        }
        free(buf);
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
        RUN(test_regions);
        RUN(test_bad_arguments);
        TEST_EXIT();
}
