/* SPDX-License-Identifier: MIT */
/* The read-bandwidth probe (membw.h). Every method sums the buffer as 64-bit integers into
 * independent vector accumulators (an add per load, never the limit) and returns the sum,
 * which is checked, so no load can be dropped. The per-ISA loops carry their own target attributes and run only
 * where dispatch.c says this CPU may run that path. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu.h"
#include "kernels.h"
#include "membw.h"
#include "pool.h"

#if defined(__x86_64__) && !defined(AXP_PORTABLE_ONLY)
#include <immintrin.h>
#define ISA_PATHS 1
#endif

typedef uint64_t (*read_fn)(const uint8_t *p, size_t n);

/* portable C: eight scalar accumulators (the compiler may vectorize them) */
static uint64_t read_c(const uint8_t *p, size_t n) {
        const uint64_t *q = (const uint64_t *) p;
        uint64_t s[8] = { 0 };
        for (size_t i = 0; i + 8 <= n / 8; i += 8)
                for (int j = 0; j < 8; j++)
                        s[j] += q[i + j];
        return s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

#ifdef ISA_PATHS
#define AVX512 __attribute__((target("avx2,avx512f")))
#define AVX2 __attribute__((target("avx2")))

/* acc accumulators of 64 bytes each per step; pf > 0: prefetch every line of the step pf bytes
 * ahead (past the end is harmless: a prefetch never faults) into L1, or into L2 with l2 (as
 * the kernels' decode loops do); nt: vmovntdqa */
#define PREFETCH(p, l2) _mm_prefetch((const char *) (p), (l2) ? _MM_HINT_T1 : _MM_HINT_T0)
static inline __attribute__((always_inline)) AVX512 uint64_t read512(const uint8_t *p, size_t n, int acc,
                                                                     size_t pf, int l2, int nt) {
        __m512i s[4] = { _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                         _mm512_setzero_si512() };
        for (size_t i = 0; i < n; i += 64 * (size_t) acc) {
                if (pf)
                        for (int j = 0; j < acc; j++)
                                PREFETCH(p + i + pf + 64 * j, l2);
                for (int j = 0; j < acc; j++) {
                        void *a = (void *) (p + i + 64 * j);
                        __m512i v = nt ? _mm512_stream_load_si512(a) : _mm512_load_si512(a);
                        s[j] = _mm512_add_epi64(s[j], v);
                }
        }
        for (int j = 1; j < acc; j++)
                s[0] = _mm512_add_epi64(s[0], s[j]);
        return (uint64_t) _mm512_reduce_add_epi64(s[0]);
}

/* the same with 32-byte loads: acc accumulators of 32 bytes per step */
static inline __attribute__((always_inline)) AVX2 uint64_t read256(const uint8_t *p, size_t n, int acc,
                                                                   size_t pf, int l2, int nt) {
        __m256i s[4] = { _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                         _mm256_setzero_si256() };
        for (size_t i = 0; i < n; i += 32 * (size_t) acc) {
                if (pf)
                        for (int o = 0; o < 32 * acc; o += 64)
                                PREFETCH(p + i + pf + o, l2);
                for (int j = 0; j < acc; j++) {
                        __m256i *a = (__m256i *) (p + i + 32 * j);
                        __m256i v = nt ? _mm256_stream_load_si256(a) : _mm256_load_si256(a);
                        s[j] = _mm256_add_epi64(s[j], v);
                }
        }
        for (int j = 1; j < acc; j++)
                s[0] = _mm256_add_epi64(s[0], s[j]);
        __m128i h = _mm_add_epi64(_mm256_castsi256_si128(s[0]), _mm256_extracti128_si256(s[0], 1));
        return (uint64_t) _mm_cvtsi128_si64(h) + (uint64_t) _mm_extract_epi64(h, 1);
}

#define TARGET_512 AVX512
#define TARGET_256 AVX2
#define METHOD(width, acc, pf, l2, nt)                                                             \
        static TARGET_##width uint64_t read##width##_x##acc##_pf##pf##_l##l2##_nt##nt(const uint8_t *p, size_t n) { \
                return read##width(p, n, acc, pf, l2, nt);                                         \
        }
#define METHODS(width)                 \
        METHOD(width, 2, 0, 0, 0)      \
        METHOD(width, 2, 2048, 0, 0)   \
        METHOD(width, 4, 0, 0, 0)      \
        METHOD(width, 4, 512, 0, 0)    \
        METHOD(width, 4, 2048, 0, 0)   \
        METHOD(width, 4, 8192, 0, 0)   \
        METHOD(width, 4, 2048, 1, 0)   \
        METHOD(width, 4, 8192, 1, 0)   \
        METHOD(width, 4, 0, 0, 1)
METHODS(512)
METHODS(256)
#endif

typedef struct method {
        const char *isa; /* the dispatch path that must be available */
        const char *name;
        read_fn fn;
} method;

static const method methods[] = {
#ifdef ISA_PATHS
        { "avx512", "avx512-x2", read512_x2_pf0_l0_nt0 },
        { "avx512", "avx512-x2-pf2048", read512_x2_pf2048_l0_nt0 },
        { "avx512", "avx512-x4", read512_x4_pf0_l0_nt0 },
        { "avx512", "avx512-x4-pf512", read512_x4_pf512_l0_nt0 },
        { "avx512", "avx512-x4-pf2048", read512_x4_pf2048_l0_nt0 },
        { "avx512", "avx512-x4-pf8192", read512_x4_pf8192_l0_nt0 },
        { "avx512", "avx512-x4-pf2048-l2", read512_x4_pf2048_l1_nt0 },
        { "avx512", "avx512-x4-pf8192-l2", read512_x4_pf8192_l1_nt0 },
        { "avx512", "avx512-x4-nt", read512_x4_pf0_l0_nt1 },
        { "avx2", "avx2-x2", read256_x2_pf0_l0_nt0 },
        { "avx2", "avx2-x2-pf2048", read256_x2_pf2048_l0_nt0 },
        { "avx2", "avx2-x4", read256_x4_pf0_l0_nt0 },
        { "avx2", "avx2-x4-pf512", read256_x4_pf512_l0_nt0 },
        { "avx2", "avx2-x4-pf2048", read256_x4_pf2048_l0_nt0 },
        { "avx2", "avx2-x4-pf8192", read256_x4_pf8192_l0_nt0 },
        { "avx2", "avx2-x4-pf2048-l2", read256_x4_pf2048_l1_nt0 },
        { "avx2", "avx2-x4-pf8192-l2", read256_x4_pf8192_l1_nt0 },
        { "avx2", "avx2-x4-nt", read256_x4_pf0_l0_nt1 },
#endif
        { "generic", "c-x8", read_c },
};

typedef struct share {
        _Alignas(64) uint64_t sum;
} share;


typedef struct run_arg {
        const uint8_t *buf;
        size_t n;
        read_fn fn;
        share misread[AXP_MEMBW_MAX_THREADS];
} run_arg;

/* every byte of the buffer */
#define FILL 0x5a
#define FILL64 0x5a5a5a5a5a5a5a5aull

/* A thread's slice; its sum must be that of every word in it, so a method that skipped a
 * load would be caught rather than reported fast. */
static void run_share(void *arg, int ith, int nth) {
        run_arg *a = arg;
        long lo, hi;
        axp_split((long) a->n, ith, nth, 4096, &lo, &hi);
        if (hi > lo && a->fn(a->buf + lo, (size_t) (hi - lo)) != (uint64_t) (hi - lo) / 8 * FILL64)
                a->misread[ith].sum++;
}

/* the methods this CPU runs, in table order */
static int usable(const method **use) {
        int n = 0;
        for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]) && n < AXP_MEMBW_MAX_METHODS; i++)
                if (axp_cpu_isa_available(methods[i].isa))
                        use[n++] = &methods[i];
        return n;
}

int axp_membw_methods(const char **names) {
        const method *use[AXP_MEMBW_MAX_METHODS];
        int n = usable(use);
        for (int m = 0; m < n; m++)
                names[m] = use[m]->name;
        return n;
}

typedef struct region_arg {
        const uint8_t *p;
        size_t n;
        read_fn fn;
        share sum[AXP_MEMBW_MAX_THREADS];
} region_arg;

/* A thread's pages of a region: the method over whole steps of 256 bytes (every method's
 * step divides it), the portable loop over the rest (whole 64-byte lines). */
static void region_share(void *arg, int ith, int nth) {
        region_arg *a = arg;
        long lo, hi;
        axp_split((long) a->n, ith, nth, 4096, &lo, &hi);
        size_t n = (size_t) (hi - lo), body = n & ~(size_t) 255;
        uint64_t s = 0;
        if (body)
                s = a->fn(a->p + lo, body);
        if (n > body)
                s += read_c(a->p + lo + body, n - body);
        a->sum[ith].sum += s;
}

double axp_membw_read_regions(axp_pool *pool, int m, int n, const void *const *p, const size_t *bytes,
                              uint64_t *ret_sum) {
        const method *use[AXP_MEMBW_MAX_METHODS];
        int n_use = usable(use), nth = axp_pool_size(pool);
        if (m < 0 || m >= n_use || n < 0 || nth > AXP_MEMBW_MAX_THREADS || !ret_sum)
                return -EINVAL;
        for (int i = 0; i < n; i++)
                if (((uintptr_t) p[i] | bytes[i]) & 63)
                        return -EINVAL;
        region_arg a = { .fn = use[m]->fn };
        double t0 = axp_cpu_now();
        for (int i = 0; i < n; i++) {
                a.p = p[i];
                a.n = bytes[i];
                axp_pool_run(pool, region_share, &a);
        }
        double t = axp_cpu_now() - t0;
        *ret_sum = 0;
        for (int i = 0; i < nth; i++)
                *ret_sum += a.sum[i].sum;
        return t;
}

int axp_membw_read(size_t bytes, int max_threads, int reps, axp_membw *ret) {
        const method *use[AXP_MEMBW_MAX_METHODS];

        if (!ret || bytes < (1u << 20) || max_threads < 1 || max_threads > AXP_MEMBW_MAX_THREADS || reps < 1)
                return -EINVAL;
        bytes &= ~(size_t) 4095;
        int n_use = usable(use);

        uint8_t *buf = aligned_alloc(2u << 20, (bytes + (2u << 20) - 1) & ~(size_t) ((2u << 20) - 1));
        if (!buf)
                return -ENOMEM;
        /* on huge pages where the kernel gives them, as the packed weights are */
        axp_cpu_advise_huge(buf, bytes);
        /* nonzero bytes, so no page is the shared zero page */
        memset(buf, FILL, bytes);

        memset(ret, 0, sizeof(*ret));
        ret->bytes = bytes;
        ret->max_threads = max_threads;
        ret->reps = reps;
        ret->n_methods = n_use;
        for (int m = 0; m < n_use; m++)
                ret->method[m] = use[m]->name;

        run_arg *a = calloc(1, sizeof(*a));
        if (!a) {
                free(buf);
                return -ENOMEM;
        }
        /* windows of at least 128 MiB (four times the largest last-level caches of the
         * machines we run on and more; a window's start was read longest ago) */
        size_t win = bytes, n_win = 1;
        if (bytes >= (size_t) 256 << 20) {
                n_win = bytes / ((size_t) 128 << 20);
                win = bytes / n_win & ~(size_t) 4095;
        }
        a->buf = buf;
        a->n = bytes;
        for (int nth = 1; nth <= max_threads; nth++) {
                axp_pool *pool = axp_pool_new(nth);
                if (!pool) {
                        free(a);
                        free(buf);
                        return -ENOMEM;
                }
                /* a warm-up pass brings the pages and the workers in */
                a->fn = read_c;
                a->buf = buf;
                a->n = bytes;
                axp_pool_run(pool, run_share, a);
                /* the methods take turns within each repetition, so a busy moment of the
                 * machine falls on all of them alike */
                for (int r = 0; r < reps; r++)
                        for (int m = 0; m < n_use; m++) {
                                a->fn = use[m]->fn;
                                /* each window timed on its own: on a shared machine, more
                                 * chances to catch a quiet moment, as a product's timing does */
                                for (size_t w = 0; w < n_win; w++) {
                                        a->buf = buf + w * win;
                                        a->n = w + 1 < n_win ? win : bytes - w * win;
                                        double t0 = axp_cpu_now();
                                        axp_pool_run(pool, run_share, a);
                                        double gbps = (double) a->n / (axp_cpu_now() - t0) * 1e-9;
                                        if (gbps > ret->gbps[m][nth - 1])
                                                ret->gbps[m][nth - 1] = gbps;
                                }
                        }
                for (int m = 0; m < n_use; m++)
                        if (ret->gbps[m][nth - 1] > ret->best[nth - 1]) {
                                ret->best[nth - 1] = ret->gbps[m][nth - 1];
                                ret->best_method[nth - 1] = m;
                        }
                axp_pool_free(pool);
        }
        uint64_t misread = 0;
        for (int t = 0; t < AXP_MEMBW_MAX_THREADS; t++)
                misread += a->misread[t].sum;
        free(a);
        free(buf);
        return misread ? -EIO : 0;
}
