/* SPDX-License-Identifier: MIT */
/* The machine's read bandwidth: the best rate at which this CPU streams a buffer far larger
 * than its last-level cache, over every way of reading we know (AVX-512 and AVX2 loads with
 * two and four independent accumulators, with software prefetch at several distances, with
 * non-temporal loads, and portable C), each path only where the CPU runs it, with 1..N threads
 * of a kernel pool. Decode streams its weights and can go no faster than this, so it is the
 * figure "share of the read bandwidth" is taken against. */
#pragma once

#include <stddef.h>
#include <stdint.h>

typedef struct axp_pool axp_pool;

#define AXP_MEMBW_MAX_METHODS 24
#define AXP_MEMBW_MAX_THREADS 16

typedef struct axp_membw {
        size_t bytes; /* the buffer, rounded down to whole pages */
        int max_threads, reps;
        int n_methods;
        const char *method[AXP_MEMBW_MAX_METHODS]; /* e.g. "avx512-x4-pf2048", "avx2-x2-nt" */
        /* GB/s (1e9 bytes per second), the best repetition; [method][threads - 1] */
        double gbps[AXP_MEMBW_MAX_METHODS][AXP_MEMBW_MAX_THREADS];
        /* per thread count: the best method's figure and its index */
        double best[AXP_MEMBW_MAX_THREADS];
        int best_method[AXP_MEMBW_MAX_THREADS];
} axp_membw;

/* Read a buffer of `bytes` (at least 1 MiB; the probe wants 16x the last-level cache or more)
 * with every method this CPU runs, with pools of 1..max_threads threads, the methods taking
 * turns within each of `reps` repetitions; a buffer of 256 MiB or more is read in windows of
 * at least 128 MiB, each timed on its own (the best window counts). 0, -EINVAL for bad arguments, -ENOMEM, -EIO if a
 * method's sum of the buffer came out wrong (a load it skipped). */
int axp_membw_read(size_t bytes, int max_threads, int reps, axp_membw *ret);

/* The same methods on memory the caller already holds, the very bytes a product streams (its
 * weights), so that a product is compared with reads of its own pages timed beside it rather
 * than with another buffer read at another moment. The methods this CPU runs, in the order
 * axp_membw_read uses them: their count, and their names in names[AXP_MEMBW_MAX_METHODS]. */
int axp_membw_methods(const char **names);

/* Read n regions in turn with method m of axp_membw_methods, each region split among the
 * pool's threads in pages as the probe's buffer is. Each region must start on a 64-byte
 * boundary and be a multiple of 64 bytes long. Returns the seconds taken and sets *ret_sum to
 * the sum of every 64-bit word read, the same for every method (a caller compares them to
 * catch a method that skipped a load); -EINVAL for a bad method or region. */
double axp_membw_read_regions(axp_pool *pool, int m, int n, const void *const *p, const size_t *bytes,
                              uint64_t *ret_sum);
