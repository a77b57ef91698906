/* SPDX-License-Identifier: MIT */
/* Choosing the instruction-set path at run time. Each path lives in its own file compiled
 * with its own flags; nothing from an ISA file runs unless the CPU (and, for AVX-512 and AMX,
 * the kernel's saved-state support) says it may. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "cpu.h"
#include "kernels/macros.h"

/* The per-ISA files are left out of the fuzz build (-DAXP_PORTABLE_ONLY): its targets parse
 * and dequantize, and clang's sanitizers make the intrinsics-heavy files take minutes each. */
#if defined(__x86_64__) && !defined(AXP_PORTABLE_ONLY)
#define ISA_PATHS 1
#endif

#ifdef ISA_PATHS
static bool cpuid_bit(unsigned leaf, unsigned sub, int reg, int bit) {
        unsigned r[4];
        if (!__get_cpuid_count(leaf, sub, &r[0], &r[1], &r[2], &r[3]))
                return false;
        return (r[reg] >> bit) & 1;
}

static bool have_avx2(void) {
        __builtin_cpu_init();
        /* F16C: cpuid 1, ecx bit 29 (__builtin_cpu_supports has no name for it) */
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
               cpuid_bit(1, 0, 2, 29);
}

/* AVX-VNNI: cpuid 7.1 eax bit 4 (sub-leaf 1 exists where 7.0 eax, the last sub-leaf, is at
 * least 1), on top of AVX2; the same ymm state, so no further OS check */
bool axp_cpu_has_avx_vnni(void) {
        unsigned r[4];
        if (!__get_cpuid_count(7, 0, &r[0], &r[1], &r[2], &r[3]) || r[0] < 1)
                return false;
        return cpuid_bit(7, 1, 0, 4) && have_avx2();
}

static bool have_avx_vnni(void) {
        return axp_avx_vnni_built && axp_cpu_has_avx_vnni();
}

static bool have_avx512(void) {
        __builtin_cpu_init();
        return have_avx2() && __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni");
}

/* AVX512-BF16: cpuid 7.1 eax bit 5, on top of the AVX-512 path */
static bool have_avx512_bf16(void) {
        unsigned r[4];
        if (!__get_cpuid_count(7, 0, &r[0], &r[1], &r[2], &r[3]) || r[0] < 1)
                return false;
        return cpuid_bit(7, 1, 0, 5) && have_avx512();
}

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

/* AMX needs the kernel's permission to use the large tile state, once per process. */
bool axp_amx_request(void) {
        static _Atomic int state; /* 0 unknown, 1 yes, -1 no */
        int s = atomic_load(&state);
        if (s)
                return s > 0;
        bool ok = cpuid_bit(7, 0, 3, 24) /* AMX-TILE */ && cpuid_bit(7, 0, 3, 25) /* AMX-INT8 */ &&
                  have_avx512() && syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
        atomic_store(&state, ok ? 1 : -1);
        return ok;
}
#elif defined(__x86_64__)
bool axp_cpu_has_avx_vnni(void) {
        return false;
}

bool axp_amx_request(void) {
        return false;
}
#endif

#if !defined(ISA_PATHS)
static bool have_avx512_bf16(void) {
        return false;
}
#endif

#ifdef ISA_PATHS
static axp_cpu_ops amx_ops;
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;

static void amx_ops_init(void) {
        amx_ops = axp_cpu_ops_avx512;
        amx_ops.name = "amx";
        for (int t = 0; t < AXP_TYPE__MAX; t++)
                if (axp_amx_gemm[t])
                        amx_ops.gemm[t] = axp_amx_gemm[t];
}

static bool have_amx(void) {
        bool built = false;
        for (int t = 0; t < AXP_TYPE__MAX; t++)
                built |= axp_amx_gemm[t] != NULL;
        if (!built || !axp_amx_request())
                return false;
        pthread_once(&amx_once, amx_ops_init);
        return true;
}
#endif

typedef struct isa_entry {
        const axp_cpu_ops *ops;
        bool (*available)(void);
} isa_entry;

static bool always(void) {
        return true;
}

/* best first */
static const isa_entry isas[] = {
#ifdef ISA_PATHS
        { &amx_ops, have_amx },
        { &axp_cpu_ops_avx512, have_avx512 },
        { &axp_cpu_ops_avx_vnni, have_avx_vnni },
        { &axp_cpu_ops_avx2, have_avx2 },
#endif
        { &axp_cpu_ops_generic, always },
};

static _Atomic(const axp_cpu_ops *) active;

_Atomic int axp_cpu_pf_sparse;
_Atomic int axp_cpu_pf_l1;
_Atomic int axp_cpu_bf16_dot;

/* AMD's CPUs (and Hygon's, the same cores) streamed the 32-element block types faster with
 * sparse prefetches on one Zen 5 machine: decode of Q8_0, Q4_0 and IQ4_NL took 6-47% more
 * GB/s with them on every path and thread count but one (AVX-VNNI IQ4_NL, one thread: 8%
 * less). On another, dense was as fast for Q8_0 and Q4_0 and up to twice as fast for
 * IQ4_NL, Q4_1, Q5_0 and Q5_1 (docs/performance.md): so this is only the plan until
 * axp_cpu_prefetch_tune has timed both on a model's weights. */
static bool vendor_amd(void) {
#if defined(__x86_64__)
        unsigned a, b, c, d;
        char v[13] = "";
        if (__get_cpuid(0, &a, &b, &c, &d)) {
                memcpy(v, &b, 4);
                memcpy(v + 4, &d, 4);
                memcpy(v + 8, &c, 4);
        }
        return strcmp(v, "AuthenticAMD") == 0 || strcmp(v, "HygonGenuine") == 0;
#else
        return false;
#endif
}

/* A plan as a number: bit 0 sparse, bit 1 into L1; its name by that number */
enum { PLAN_SPARSE = 1, PLAN_L1 = 2 };
static const char *const plan_names[] = { "dense", "sparse", "dense-l1", "sparse-l1" };

/* the plan of that name, or -1 */
static int plan_of(const char *name) {
        for (int i = 0; i < (int) ELEMENTSOF(plan_names); i++)
                if (strcmp(name, plan_names[i]) == 0)
                        return i;
        return -1;
}

/* the default plan: sparse on AMD's CPUs (above), into L2 (cpu.h) */
static int plan_default(void) {
        return vendor_amd() ? PLAN_SPARSE : 0;
}

static void plan_set(int plan) {
        atomic_store_explicit(&axp_cpu_pf_sparse, (plan & PLAN_SPARSE) != 0, memory_order_relaxed);
        atomic_store_explicit(&axp_cpu_pf_l1, (plan & PLAN_L1) != 0, memory_order_relaxed);
}

static int plan_get(void) {
        return (atomic_load_explicit(&axp_cpu_pf_sparse, memory_order_relaxed) ? PLAN_SPARSE : 0) |
               (atomic_load_explicit(&axp_cpu_pf_l1, memory_order_relaxed) ? PLAN_L1 : 0);
}

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
/* whether AXP_CPU_PREFETCH or axp_cpu_set_prefetch chose the plan (tuning leaves it) */
static _Atomic int plan_forced;

/* what is decided once, before any product runs: the prefetch plan and whether the AVX-512
 * path's BF16 products take vdpbf16ps */
static void cpu_init(void) {
        atomic_store_explicit(&axp_cpu_bf16_dot, have_avx512_bf16(), memory_order_relaxed);
        const char *want = secure_getenv("AXP_CPU_PREFETCH");
        int plan = want ? plan_of(want) : -1;
        atomic_store_explicit(&plan_forced, plan >= 0, memory_order_relaxed);
        if (plan < 0) {
                plan = plan_default();
                if (want)
                        fprintf(stderr,
                                "agentxpu: AXP_CPU_PREFETCH=%s is not a plan (dense, sparse, dense-l1, sparse-l1); "
                                "using %s\n",
                                want, plan_names[plan]);
        }
        plan_set(plan);
}

const char *axp_cpu_prefetch(void) {
        pthread_once(&init_once, cpu_init);
        return plan_names[plan_get()];
}

bool axp_cpu_set_prefetch(const char *name) {
        int plan = name ? plan_of(name) : plan_default();
        pthread_once(&init_once, cpu_init);
        if (plan >= 0) {
                plan_set(plan);
                atomic_store_explicit(&plan_forced, name != NULL, memory_order_relaxed);
        }
        return plan >= 0;
}

#define TUNE_MAX_BYTES (512ull << 20)

/* the types whose decode follows the plan's form: all but Q2_K, Q3_K, Q4_1, Q5_0 and Q5_1,
 * which keep their own prefetches, dense (cpu.h: prefetch_kstep, prefetch_q3_K,
 * prefetch_block); the level concerns every type */
static bool form_type(uint32_t type) {
        return type != AXP_TYPE_Q2_K && type != AXP_TYPE_Q3_K && type != AXP_TYPE_Q4_1 && type != AXP_TYPE_Q5_0 &&
               type != AXP_TYPE_Q5_1;
}

/* Up to TUNE_MAX_BYTES of the prepared weights (those whose type the plan's form concerns, with
 * forms_only): how many, into sel, with their bytes and largest shapes */
static int tune_select(const axp_weight *const *w, int n, bool forms_only, const axp_weight **sel, uint64_t *bytes,
                       int64_t *max_in, int64_t *max_out) {
        int n_sel = 0;
        *bytes = 0;
        for (int i = 0; i < n && *bytes < TUNE_MAX_BYTES; i++) {
                /* prepared (so a type with kernels) */
                if (!w[i] || !axp_packed_of(w[i]) || (forms_only && !form_type(w[i]->type)))
                        continue;
                sel[n_sel++] = w[i];
                *bytes += axp_type_row_size(w[i]->type, w[i]->n_in) * (uint64_t) w[i]->n_out;
                *max_in = MAX(*max_in, w[i]->n_in);
                *max_out = MAX(*max_out, w[i]->n_out);
        }
        return n_sel;
}

/* Of plans a and b, the one whose one-token products over sel run faster (best of three
 * rounds, the plans taking turns), their times in ret_s */
static int tune_pick(axp_pool *pool, const axp_weight **sel, int n_sel, const float *x, float *y, int a, int b,
                     double ret_s[2]) {
        const int plans[2] = { a, b };
        ret_s[0] = ret_s[1] = INFINITY;
        for (int round = 0; round < 3; round++)
                for (int i = 0; i < 2; i++) {
                        plan_set(plans[i]);
                        double t0 = axp_cpu_now();
                        for (int k = 0; k < n_sel; k++) {
                                long ldy = (long) sel[k]->n_out;
                                axp_cpu_matmul(pool, 1, &sel[k], x, (long) sel[k]->n_in, &y, &ldy, 1);
                        }
                        ret_s[i] = fmin(ret_s[i], axp_cpu_now() - t0);
                }
        return ret_s[1] < ret_s[0] ? b : a;
}

int axp_cpu_prefetch_tune(axp_pool *pool, const axp_weight *const *w, int n, uint64_t min_bytes,
                          double ret_s[4]) {
        pthread_once(&init_once, cpu_init);
        if (atomic_load_explicit(&plan_forced, memory_order_relaxed))
                return 0;
        const axp_weight **all = malloc(sizeof(*all) * (size_t) (n > 0 ? n : 1));
        const axp_weight **forms = malloc(sizeof(*forms) * (size_t) (n > 0 ? n : 1));
        if (!all || !forms) {
                free(all), free(forms);
                return -ENOMEM;
        }
        uint64_t all_bytes, form_bytes;
        int64_t max_in = 0, max_out = 0;
        int n_all = tune_select(w, n, false, all, &all_bytes, &max_in, &max_out);
        int n_forms = tune_select(w, n, true, forms, &form_bytes, &max_in, &max_out);
        bool level = n_all > 0 && all_bytes >= min_bytes, form = n_forms > 0 && form_bytes >= min_bytes;
        float *x = NULL, *y = NULL;
        int ret = 0;
        if (level || form) {
                x = malloc(sizeof(float) * (size_t) max_in);
                y = malloc(sizeof(float) * (size_t) max_out);
                ret = x && y ? 1 : -ENOMEM;
        }
        if (ret == 1) {
                for (int64_t i = 0; i < max_in; i++)
                        x[i] = (float) ((i * 7919) % 2001 - 1000) * 1e-3f;
                int plan = plan_get();
                /* the level over every type, then the form over its own types at that level */
                if (level)
                        plan = tune_pick(pool, all, n_all, x, y, plan & ~PLAN_L1, plan | PLAN_L1, ret_s + 2);
                if (form)
                        plan = tune_pick(pool, forms, n_forms, x, y, plan & ~PLAN_SPARSE, plan | PLAN_SPARSE, ret_s);
                plan_set(plan);
        }
        free(all), free(forms), free(x), free(y);
        return ret;
}

bool axp_cpu_set_bf16_dot(bool on) {
        pthread_once(&init_once, cpu_init);
        if (on && !have_avx512_bf16())
                return false;
        atomic_store_explicit(&axp_cpu_bf16_dot, on, memory_order_relaxed);
        return true;
}

bool axp_cpu_amx_weights_s8(const uint8_t *g, int64_t nb, uint32_t type, uint8_t *out, uint16_t *sc) {
#ifdef ISA_PATHS
        if (have_avx512()) {
                axp_amx_weights_s8(g, nb, (int) type, out, sc);
                return true;
        }
#else
        (void) g, (void) nb, (void) type, (void) out, (void) sc;
#endif
        return false;
}

const axp_cpu_ops *axp_cpu_ops_get(void) {
        /* the prefetch plan and the BF16 products' form are decided before any product can run */
        pthread_once(&init_once, cpu_init);
        const axp_cpu_ops *o = atomic_load_explicit(&active, memory_order_acquire);
        if (o)
                return o;
        /* AXP_CPU_ISA=generic|avx2|avx-vnni|avx512|amx runs the whole engine on one path (tests, CI) */
        const char *want = secure_getenv("AXP_CPU_ISA");
        for (size_t i = 0; i < sizeof(isas) / sizeof(isas[0]) && !o; i++)
                if (isas[i].available() && (!want || strcmp(isas[i].ops->name, want) == 0))
                        o = isas[i].ops;
        if (!o) {
                /* a path this CPU (or this build) cannot run: the best one it can, said once */
                char can[128] = "";
                for (size_t i = 0; i < sizeof(isas) / sizeof(isas[0]); i++)
                        if (isas[i].available()) {
                                if (!o)
                                        o = isas[i].ops;
                                if (strlen(can) + strlen(isas[i].ops->name) + 3 < sizeof(can)) {
                                        if (can[0])
                                                strcat(can, ", ");
                                        strcat(can, isas[i].ops->name);
                                }
                        }
                const axp_cpu_ops *expected = NULL;
                if (atomic_compare_exchange_strong(&active, &expected, o))
                        fprintf(stderr, "agentxpu: AXP_CPU_ISA=%s is not a path this CPU runs (it runs: %s); using %s\n",
                                want, can, o->name);
                return atomic_load_explicit(&active, memory_order_acquire);
        }
        atomic_store_explicit(&active, o, memory_order_release);
        return o;
}

const char *axp_cpu_isa(void) {
        return axp_cpu_ops_get()->name;
}

bool axp_cpu_set_isa(const char *name) {
        /* available() first: it also fills in the AMX table, name included */
        for (size_t i = 0; i < sizeof(isas) / sizeof(isas[0]); i++)
                if (isas[i].available() && strcmp(isas[i].ops->name, name) == 0) {
                        atomic_store_explicit(&active, isas[i].ops, memory_order_release);
                        return true;
                }
        return false;
}

bool axp_cpu_isa_available(const char *name) {
        /* available() first, as above: the AMX table has no name before it */
        for (size_t i = 0; i < sizeof(isas) / sizeof(isas[0]); i++)
                if (isas[i].available() && strcmp(isas[i].ops->name, name) == 0)
                        return true;
        return false;
}

void axp_cpu_rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
        double sum = 0;
        for (int i = 0; i < n; i++)
                sum += (double) x[i] * x[i];
        float scale = 1.0f / sqrtf((float) (sum / n) + eps);
        for (int i = 0; i < n; i++)
                out[i] = x[i] * scale * w[i];
}

void axp_cpu_glu(int act, float *g, const float *u, long n) {
        axp_cpu_ops_get()->glu(act, g, u, n);
}

void axp_cpu_softcap(float *x, long n, float cap) {
        axp_cpu_ops_get()->softcap(x, n, cap);
}
