/* SPDX-License-Identifier: MIT */
/* The machine's read bandwidth: the best rate at which this CPU streams a buffer far larger
 * than its last-level cache, over every way of reading we know (AVX-512 and AVX2 loads with
 * two and four independent accumulators, with software prefetch at several distances, with
 * non-temporal loads, and portable C), each path only where the CPU runs it, with 1..N threads
 * of a kernel pool. Decode streams its weights and can go no faster than this, so it is the
 * figure "share of the read bandwidth" is taken against. */
#pragma once

#include <stddef.h>

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
