/* SPDX-License-Identifier: MIT */
/* A fixed thread pool for data-parallel kernels. The caller of axp_pool_run participates as
 * thread 0; the call returns when every thread has finished. Not reentrant: one run at a
 * time per pool (each device owns its pool and runs one task at a time). */
#pragma once

typedef struct axp_pool axp_pool;
typedef void (*axp_pool_fn)(void *arg, int ith, int nth);

/* n_threads <= 0: one per online CPU. */
axp_pool *axp_pool_new(int n_threads);
void axp_pool_free(axp_pool *p);
int axp_pool_size(const axp_pool *p);
/* The kernel thread ids (gettid) of the pool's workers, threads 1..n-1 (the caller is thread
 * 0 and not among them), so that their owner can set their scheduling class; fills up to cap
 * and returns how many workers there are. */
int axp_pool_worker_tids(axp_pool *p, int *ret, int cap);
void axp_pool_run(axp_pool *p, axp_pool_fn fn, void *arg);

/* Split [0, n) into nth nearly equal parts aligned to `align`; returns thread ith's range. */
static inline void axp_split(long n, int ith, int nth, long align, long *ret_lo, long *ret_hi) {
        long blocks = (n + align - 1) / align;
        long per = blocks / nth, extra = blocks % nth;
        long b0 = ith * per + (ith < extra ? ith : extra);
        long b1 = b0 + per + (ith < extra ? 1 : 0);
        long lo = b0 * align, hi = b1 * align;
        *ret_lo = lo < n ? lo : n;
        *ret_hi = hi < n ? hi : n;
}
