/* SPDX-License-Identifier: MIT */
/* The OpenCL backend: HEG tasks as sequences of kernels of kernels/opencl on one in-order
 * queue. A task is enqueued whole and the executor's thread waits for its last command, so
 * the scheduler sees one completion per task.
 *
 * Memory. Weights: on a device that shares host memory the model's mapping is wrapped
 * (CL_MEM_USE_HOST_PTR) in as few buffers as the device's largest allocation allows, so the
 * weights are never copied; elsewhere every weight is uploaded once. A request's KV cache
 * and activations (page-aligned host memory, engine/seq.c) are wrapped for the duration of
 * one task and the rows the task wrote are mapped back before it completes, so another
 * device may work on the same request's other rows meanwhile. AXP_OPENCL_MEM=copy copies
 * them in and out instead.
 *
 * Products take their activations exactly as the CPU kernels do (quantized to Q8_0 or Q8_K
 * blocks for integer weights, rounded to f16 for F16 weights; kernels/opencl/act.cl), so that
 * the scheduler may give any kernel to either device and get the same tokens. */
#define CL_TARGET_OPENCL_VERSION 120
#include "backend.h"
#include "cpu-device.h"
#include "opencl-device.h"

#include <CL/cl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/types.h"

extern const char axp_opencl_source[]; /* the .cl files of kernels/opencl, embedded at build */

#define TILE   256 /* rows per pass of a token-wise kernel: bounds the scratch buffers */
#define MAX_HD 256 /* largest head dimension the attention kernel is built for */
#define TT     8   /* tokens per work-group of a matrix product */
#define GPU_ITEMS_PER_ROW 8 /* items sharing a row of a matrix product on a GPU (items_per_row) */

/* How a product's activations are taken, per weight type, as the CPU kernels take them
 * (kernels/cpu/kernels.h): as they are, rounded to f16 or bf16, or quantized to 8 bits per
 * block. */
enum {
        ACT_F32,
        ACT_F16,
        ACT_BF16,
        ACT_Q8_0,
        ACT_Q8_K,
        ACT__MAX,
};

/* Weight types the kernels read, the suffix of their kernels' names and their activations. */
static const struct {
        uint32_t type;
        const char *suffix;
        int act;
} wtypes[] = {
        { AXP_TYPE_F32, "f32", ACT_F32 },    { AXP_TYPE_F16, "f16", ACT_F16 },
        { AXP_TYPE_BF16, "bf16", ACT_BF16 },  { AXP_TYPE_Q8_0, "q8_0", ACT_Q8_0 },
        { AXP_TYPE_Q4_0, "q4_0", ACT_Q8_0 }, { AXP_TYPE_Q4_1, "q4_1", ACT_Q8_0 },
        { AXP_TYPE_Q5_0, "q5_0", ACT_Q8_0 }, { AXP_TYPE_Q5_1, "q5_1", ACT_Q8_0 },
        { AXP_TYPE_IQ4_NL, "iq4_nl", ACT_Q8_0 }, { AXP_TYPE_Q4_K, "q4_k", ACT_Q8_K },
        { AXP_TYPE_Q5_K, "q5_k", ACT_Q8_K },     { AXP_TYPE_Q6_K, "q6_k", ACT_Q8_K },
        { AXP_TYPE_Q2_K, "q2_k", ACT_Q8_K },     { AXP_TYPE_Q3_K, "q3_k", ACT_Q8_K },
        { AXP_TYPE_IQ4_XS, "iq4_xs", ACT_Q8_K },
};
#define N_WTYPES ELEMENTSOF(wtypes)

typedef struct wref {
        cl_mem buf; /* NULL: the weight is absent */
        cl_ulong off;
        int type; /* index into wtypes, matrices only */
        const axp_weight *w;
        cl_ulong estride; /* a stacked expert tensor: bytes from one expert's matrix to the next */
} wref;

typedef struct layer_refs {
        wref attn_norm, wq, wk, wv, bq, bk, bv, q_norm, k_norm, wo, ffn_norm, w_gate, w_up, w_down;
        wref post_attn_norm, post_ffn_norm;
        /* a mixture of experts: the router, and expert 0 of each stacked tensor (w = its view) */
        wref router, exp_gate, exp_up, exp_down;
} layer_refs;

/* A request's host memory wrapped for the current task. */
typedef struct wrap {
        void *ptr;
        size_t bytes;
        cl_mem mem;
} wrap;

/* A region a task wrote, to hand back to the host before the task completes. */
typedef struct dirty {
        cl_mem mem;
        void *ptr;
        size_t off, bytes;
} dirty;

typedef struct row_ref {
        axp_seq *seq;
        int t, pos;
} row_ref;

/* Consecutive rows of one request: scratch rows [row, row + n) are its tokens [t, t + n). */
typedef struct run {
        axp_seq *seq;
        int row, t, n;
} run;

typedef struct prof_sum {
        const char *name;
        uint64_t n;
        double s;
} prof_sum;

typedef struct ocl_dev {
        axp_opencl_info info;
        cl_device_id dev;
        cl_context ctx;
        cl_command_queue q;
        cl_program prog;
        int wg;
        int kl_fixed;   /* items sharing one row of a matmul at most (items_per_row) */
        bool copy_mode; /* activations copied in and out instead of wrapped */
        cl_kernel k_matmul[N_WTYPES], k_matmul_id[N_WTYPES], k_embed[N_WTYPES];
        cl_kernel k_act[ACT__MAX]; /* NULL for ACT_F32 */
        cl_kernel k_rmsnorm, k_residual_rmsnorm, k_residual, k_swiglu, k_k1_post, k_attention;
        cl_kernel k_geglu, k_scale_rows;
        cl_kernel k_moe_route, k_moe_plan, k_moe_gather, k_moe_combine;

        axp_model *model;
        /* A mixture of experts' FFN (K3 of a qwen3moe layer) the kernels cannot run (expert
         * weights of a type they do not read, a stacked tensor larger than the device's largest
         * buffer, AXP_OPENCL_MOE=cpu): those tasks run on this CPU device, on the same host
         * memory (every task hands its results back to the host before it returns) */
        axp_device *moe_cpu;
        bool zero_copy; /* weights used in place */
        cl_mem *wbufs;  /* segments of the mapping, or one buffer per uploaded weight */
        int n_wbufs, cap_wbufs;
        layer_refs *layers;
        wref tok_embd, output, output_norm;
        double *inv_freq;

        /* scratch on the device */
        cl_mem h, sq, sk, sv, a, o, g, u;
        cl_mem rope, tokens, logits;
        size_t rope_rows, token_rows, logits_rows;
        /* a mixture of experts on the device, for TILE tokens (moe.cl): router logits, picked
         * experts and weights, slots' tokens and tokens' slots, counts, the block table, the
         * slots' inputs (then the down products' outputs) and gate/up outputs */
        cl_mem m_logit, m_sel, m_wt, m_slot_tok, m_slot_of, m_cnt, m_blk, m_hx, m_g, m_u;
        int m_blocks;
        /* a product's activations (act.cl): int8 values, block scales, Q8_K sums of 32, F16
         * rounded values; rows of act_k values */
        cl_mem aq, ad, as, af;
        size_t aq_rows, ad_rows, as_rows, af_rows;
        int act_k;
        float *rope_host;
        int32_t *rope_pos; /* positions the rope table holds, to skip recomputing it */
        int rope_n, rope_host_cap;
        bool rope_swa; /* the table holds the sliding-window layers' angles */

        row_ref *rows;
        int rows_cap;
        run *runs;
        int runs_cap;
        wrap wraps[2 * AXP_MAX_BATCH + 8];
        int n_wraps;
        dirty *dirt; /* grown as a task needs: the cache's heads are apart, a region each */
        int n_dirt, dirt_cap;

        /* AXP_OPENCL_PROFILE=1 (for tuning): the device time of each kernel and the host's
         * time of each kind of task, summed and printed when the device is closed */
        bool profile;
        cl_event *pev;
        const char **pev_name;
        int n_pev, pev_cap;
        prof_sum prof[24];
        int n_prof;
        prof_sum task_prof[AXP_OP__COUNT];
} ocl_dev;

static const char *cl_err_name(cl_int e) {
        switch (e) {
        case CL_DEVICE_NOT_FOUND: return "device not found";
        case CL_DEVICE_NOT_AVAILABLE: return "device not available";
        case CL_COMPILER_NOT_AVAILABLE: return "compiler not available";
        case CL_MEM_OBJECT_ALLOCATION_FAILURE: return "memory allocation failure";
        case CL_OUT_OF_RESOURCES: return "out of resources";
        case CL_OUT_OF_HOST_MEMORY: return "out of host memory";
        case CL_BUILD_PROGRAM_FAILURE: return "build failure";
        case CL_INVALID_VALUE: return "invalid value";
        case CL_INVALID_BUFFER_SIZE: return "invalid buffer size";
        case CL_INVALID_HOST_PTR: return "invalid host pointer";
        case CL_INVALID_MEM_OBJECT: return "invalid memory object";
        case CL_INVALID_KERNEL_ARGS: return "invalid kernel arguments";
        case CL_INVALID_WORK_GROUP_SIZE: return "invalid work-group size";
        case CL_INVALID_GLOBAL_WORK_SIZE: return "invalid global work size";
        case CL_INVALID_ARG_INDEX: return "invalid argument index";
        case CL_INVALID_ARG_SIZE: return "invalid argument size";
        case CL_INVALID_ARG_VALUE: return "invalid argument value";
        case CL_MISALIGNED_SUB_BUFFER_OFFSET: return "misaligned sub-buffer offset";
        default: return "error";
        }
}

static int cl_fail(axp_error *err, cl_int e, const char *what) {
        return axp_errorf(err, e == CL_OUT_OF_HOST_MEMORY ? -ENOMEM : -EIO,
                          "OpenCL: %s failed: %s (%d)", what, cl_err_name(e), (int) e);
}

/* Discovery ------------------------------------------------------------------------------------ */

static bool has_ext(cl_device_id d, const char *ext) {
        size_t n = 0;
        if (clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS, 0, NULL, &n) != CL_SUCCESS || n == 0)
                return false;
        _cleanup_free_ char *s = malloc(n + 1);
        if (!s || clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS, n, s, NULL) != CL_SUCCESS)
                return false;
        s[n] = 0;
        size_t l = strlen(ext);
        for (const char *p = s; (p = strstr(p, ext)); p += l)
                if ((p == s || p[-1] == ' ') && (p[l] == ' ' || p[l] == 0))
                        return true;
        return false;
}

/* A string property of a device (d) or a platform, cut to size. */
static void info_str(cl_device_id d, cl_platform_id p, cl_uint what, char *buf, size_t size) {
        size_t n = 0;
        *buf = 0;
        cl_int e =
                d ? clGetDeviceInfo(d, what, 0, NULL, &n) : clGetPlatformInfo(p, what, 0, NULL, &n);
        if (e != CL_SUCCESS || n == 0)
                return;
        _cleanup_free_ char *s = malloc(n + 1);
        if (!s)
                return;
        e = d ? clGetDeviceInfo(d, what, n, s, NULL) : clGetPlatformInfo(p, what, n, s, NULL);
        if (e != CL_SUCCESS)
                return;
        s[n] = 0;
        snprintf(buf, size, "%s", s);
}

static void describe(cl_platform_id p, cl_device_id d, int index, axp_opencl_info *ret) {
        cl_device_type type = 0;
        cl_bool unified = CL_FALSE;
        cl_ulong mem = 0, max_alloc = 0;
        cl_uint cu = 0;

        memset(ret, 0, sizeof(*ret));
        ret->index = index;
        info_str(d, NULL, CL_DEVICE_NAME, ret->name, sizeof(ret->name));
        info_str(NULL, p, CL_PLATFORM_NAME, ret->platform, sizeof(ret->platform));
        info_str(d, NULL, CL_DEVICE_VERSION, ret->version, sizeof(ret->version));
        clGetDeviceInfo(d, CL_DEVICE_TYPE, sizeof(type), &type, NULL);
        clGetDeviceInfo(d, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof(unified), &unified, NULL);
        clGetDeviceInfo(d, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof(mem), &mem, NULL);
        clGetDeviceInfo(d, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof(max_alloc), &max_alloc, NULL);
        clGetDeviceInfo(d, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof(cu), &cu, NULL);
        ret->host_unified = unified;
        ret->mem_bytes = mem;
        ret->max_alloc = max_alloc;
        ret->compute_units = (int) cu;
        ret->fp16 = has_ext(d, "cl_khr_fp16");
        ret->fp64 = has_ext(d, "cl_khr_fp64");
        if (type & CL_DEVICE_TYPE_GPU)
                ret->kind = unified ? AXP_DEV_IGPU : AXP_DEV_DGPU;
        else if (type & CL_DEVICE_TYPE_CPU)
                ret->kind = AXP_DEV_CPU;
        else
                ret->kind = AXP_DEV_OTHER;
        /* for tests: AXP_OPENCL_KIND=igpu|dgpu, every device taken for that kind of GPU */
        const char *kind = getenv("AXP_OPENCL_KIND");
        if (kind && strcmp(kind, "igpu") == 0)
                ret->kind = AXP_DEV_IGPU;
        else if (kind && strcmp(kind, "dgpu") == 0)
                ret->kind = AXP_DEV_DGPU;
}

/* Calls fn for every (platform, device) in order until it returns non-zero. */
static int for_each_device(int (*fn)(cl_platform_id p, cl_device_id d, int index, void *ud),
                           void *ud) {
        cl_uint np = 0;
        if (clGetPlatformIDs(0, NULL, &np) != CL_SUCCESS || np == 0)
                return 0;
        _cleanup_free_ cl_platform_id *ps = calloc(np, sizeof(cl_platform_id));
        if (!ps || clGetPlatformIDs(np, ps, NULL) != CL_SUCCESS)
                return 0;
        int index = 0;
        for (cl_uint i = 0; i < np; i++) {
                cl_uint nd = 0;
                if (clGetDeviceIDs(ps[i], CL_DEVICE_TYPE_ALL, 0, NULL, &nd) != CL_SUCCESS ||
                    nd == 0)
                        continue;
                _cleanup_free_ cl_device_id *ds = calloc(nd, sizeof(cl_device_id));
                if (!ds || clGetDeviceIDs(ps[i], CL_DEVICE_TYPE_ALL, nd, ds, NULL) != CL_SUCCESS)
                        continue;
                for (cl_uint j = 0; j < nd; j++, index++) {
                        int r = fn(ps[i], ds[j], index, ud);
                        if (r)
                                return r;
                }
        }
        return 0;
}

typedef struct list_ctx {
        axp_opencl_info *l;
        int n, cap;
        bool oom;
} list_ctx;

static int list_one(cl_platform_id p, cl_device_id d, int index, void *ud) {
        list_ctx *c = ud;
        if (c->n == c->cap) {
                int cap = c->cap ? c->cap * 2 : 4;
                axp_opencl_info *l = realloc(c->l, (size_t) cap * sizeof(*l));
                if (!l) {
                        c->oom = true;
                        return 1;
                }
                c->l = l;
                c->cap = cap;
        }
        describe(p, d, index, &c->l[c->n++]);
        return 0;
}

int axp_opencl_list(axp_opencl_info **ret, int *ret_n, axp_error *err) {
        list_ctx c = { 0 };
        for_each_device(list_one, &c);
        if (c.oom) {
                free(c.l);
                return axp_errorf(err, -ENOMEM, "out of memory");
        }
        *ret = c.l;
        *ret_n = c.n;
        return 0;
}

int axp_opencl_best(const axp_opencl_info *l, int n) {
        static const axp_dev_kind order[] = { AXP_DEV_IGPU, AXP_DEV_DGPU };
        for (size_t k = 0; k < ELEMENTSOF(order); k++)
                for (int i = 0; i < n; i++)
                        if (l[i].kind == order[k])
                                return i;
        return n > 0 ? 0 : -1;
}

/* Kernel launches ------------------------------------------------------------------------------ */

typedef struct karg {
        size_t size;
        const void *ptr;
} karg;

#define KM(v)     ((karg) { sizeof(cl_mem), &(cl_mem) { (v) } })
#define KI(v)     ((karg) { sizeof(cl_int), &(cl_int) { (cl_int) (v) } })
#define KU(v)     ((karg) { sizeof(cl_ulong), &(cl_ulong) { (cl_ulong) (v) } })
#define KF(v)     ((karg) { sizeof(cl_float), &(cl_float) { (cl_float) (v) } })
#define ARGS(...) (karg[]) { __VA_ARGS__ }, (int) (sizeof((karg[]) { __VA_ARGS__ }) / sizeof(karg))

/* Profiling (AXP_OPENCL_PROFILE) ------------------------------------------------------------------ */

static void prof_add(prof_sum *tab, int *n, int cap, const char *name, double s) {
        int i = 0;
        while (i < *n && strcmp(tab[i].name, name) != 0)
                i++;
        if (i == *n) {
                if (*n == cap)
                        return;
                tab[(*n)++] = (prof_sum) { name, 0, 0 };
        }
        tab[i].n++;
        tab[i].s += s;
}

static void prof_event(ocl_dev *c, cl_event ev, const char *name) {
        if (c->n_pev == c->pev_cap) {
                const int cap = MAX(256, 2 * c->pev_cap);
                cl_event *e = realloc(c->pev, sizeof(*e) * (size_t) cap);
                if (e)
                        c->pev = e;
                const char **nm = realloc(c->pev_name, sizeof(*nm) * (size_t) cap);
                if (nm)
                        c->pev_name = nm;
                if (!e || !nm) {
                        clReleaseEvent(ev);
                        return;
                }
                c->pev_cap = cap;
        }
        c->pev[c->n_pev] = ev;
        c->pev_name[c->n_pev++] = name;
}

/* After the queue finished: the kernels' device times into the sums. */
static void prof_collect(ocl_dev *c) {
        for (int i = 0; i < c->n_pev; i++) {
                cl_ulong t0 = 0, t1 = 0;
                if (clGetEventProfilingInfo(c->pev[i], CL_PROFILING_COMMAND_START, sizeof(t0), &t0,
                                            NULL) == CL_SUCCESS &&
                    clGetEventProfilingInfo(c->pev[i], CL_PROFILING_COMMAND_END, sizeof(t1), &t1,
                                            NULL) == CL_SUCCESS && t1 >= t0)
                        prof_add(c->prof, &c->n_prof, (int) ELEMENTSOF(c->prof), c->pev_name[i],
                                 (double) (t1 - t0) * 1e-9);
                clReleaseEvent(c->pev[i]);
        }
        c->n_pev = 0;
}

static void prof_print(ocl_dev *c) {
        double tasks = 0, kernels = 0;
        fprintf(stderr, "agentxpu: OpenCL profile of %s (device time per kernel, host time per task):\n",
                c->info.name);
        for (int i = 0; i < c->n_prof; i++) {
                kernels += c->prof[i].s;
                fprintf(stderr, "  kernel %-18s %8" PRIu64 " runs %10.3f ms %9.2f us each\n",
                        c->prof[i].name, c->prof[i].n, c->prof[i].s * 1e3,
                        c->prof[i].s * 1e6 / (double) c->prof[i].n);
        }
        for (int i = 0; i < AXP_OP__COUNT; i++) {
                const prof_sum *p = &c->task_prof[i];
                if (!p->n)
                        continue;
                tasks += p->s;
                fprintf(stderr, "  task   %-18s %8" PRIu64 " runs %10.3f ms %9.2f us each\n",
                        axp_op_name(i), p->n, p->s * 1e3, p->s * 1e6 / (double) p->n);
        }
        fprintf(stderr, "  kernels %.3f ms of the tasks' %.3f ms\n", kernels * 1e3, tasks * 1e3);
}

/* global work size gx by gy; lx = local size in x (0: let the runtime choose). */
static int launch(ocl_dev *c, cl_kernel k, const char *name, size_t gx, size_t gy, size_t lx,
                  const karg *args, int n_args, axp_error *err) {
        cl_int e;
        for (int i = 0; i < n_args; i++)
                if ((e = clSetKernelArg(k, (cl_uint) i, args[i].size, args[i].ptr)) != CL_SUCCESS)
                        return cl_fail(err, e, name);
        if (gx == 0 || gy == 0)
                return 0;
        size_t gws[2] = { gx, gy }, lws[2] = { lx, 1 };
        cl_event ev = NULL;
        e = clEnqueueNDRangeKernel(c->q, k, 2, NULL, gws, lx ? lws : NULL, 0, NULL,
                                   c->profile ? &ev : NULL);
        if (ev)
                prof_event(c, ev, name);
        return e == CL_SUCCESS ? 0 : cl_fail(err, e, name);
}

static size_t round_up(size_t v, int m) {
        return (v + (size_t) m - 1) / (size_t) m * (size_t) m;
}

static int ilog2(int v) {
        int l = 0;
        while ((1 << (l + 1)) <= v)
                l++;
        return l;
}

/* A request's memory, wrapped for this task --------------------------------------------------- */

static int wrap_get(ocl_dev *c, void *ptr, size_t bytes, bool init, cl_mem *ret, axp_error *err) {
        for (int i = 0; i < c->n_wraps; i++)
                if (c->wraps[i].ptr == ptr) {
                        if (c->wraps[i].bytes < bytes)
                                return axp_errorf(
                                        err, -EINVAL,
                                        "OpenCL: a request's buffer was wrapped too short");
                        *ret = c->wraps[i].mem;
                        return 0;
                }
        if (c->n_wraps == (int) ELEMENTSOF(c->wraps))
                return axp_errorf(err, -E2BIG, "OpenCL: too many buffers in one task");
        cl_int e;
        cl_mem_flags fl = CL_MEM_READ_WRITE;
        if (!c->copy_mode)
                fl |= CL_MEM_USE_HOST_PTR;
        else if (init)
                fl |= CL_MEM_COPY_HOST_PTR;
        cl_mem m = clCreateBuffer(c->ctx, fl, bytes,
                                  (fl & (CL_MEM_USE_HOST_PTR | CL_MEM_COPY_HOST_PTR)) ? ptr : NULL,
                                  &e);
        if (!m)
                return cl_fail(err, e, "wrapping a request's memory");
        c->wraps[c->n_wraps++] = (wrap) { ptr, bytes, m };
        *ret = m;
        return 0;
}

static int mark_dirty(ocl_dev *c, cl_mem m, void *ptr, size_t off, size_t bytes, axp_error *err) {
        if (c->n_dirt == c->dirt_cap) {
                int cap = MAX(64, 2 * c->dirt_cap);
                dirty *d = realloc(c->dirt, sizeof(*d) * (size_t) cap);
                if (!d)
                        return axp_errorf(err, -ENOMEM, "out of memory");
                c->dirt = d;
                c->dirt_cap = cap;
        }
        c->dirt[c->n_dirt++] = (dirty) { m, ptr, off, bytes };
        return 0;
}

/* Hand the written regions back to the host and wait for the task's last command. */
static int finish_task(ocl_dev *c, axp_error *err) {
        cl_int e = CL_SUCCESS;
        for (int i = 0; i < c->n_dirt && e == CL_SUCCESS; i++) {
                dirty *d = &c->dirt[i];
                if (c->copy_mode) {
                        e = clEnqueueReadBuffer(c->q, d->mem, CL_FALSE, d->off, d->bytes,
                                                (char *) d->ptr + d->off, 0, NULL, NULL);
                        continue;
                }
                /* mapping a CL_MEM_USE_HOST_PTR buffer makes the host pointer hold the latest bits */
                void *p = clEnqueueMapBuffer(c->q, d->mem, CL_FALSE, CL_MAP_READ, d->off, d->bytes,
                                             0, NULL, NULL, &e);
                if (p)
                        e = clEnqueueUnmapMemObject(c->q, d->mem, p, 0, NULL, NULL);
        }
        cl_int f = clFinish(c->q);
        c->n_dirt = 0;
        if (c->profile)
                prof_collect(c);
        if (e != CL_SUCCESS)
                return cl_fail(err, e, "returning results to the host");
        return f == CL_SUCCESS ? 0 : cl_fail(err, f, "running the task");
}

static void release_wraps(ocl_dev *c) {
        for (int i = 0; i < c->n_wraps; i++)
                clReleaseMemObject(c->wraps[i].mem);
        c->n_wraps = 0;
        c->n_dirt = 0;
}

/* Bytes of one KV head's values at one position */
static size_t kv_head_bytes(const axp_seq *s) {
        return axp_kv_head_bytes(&s->model->hp, s->kv_type);
}

/* kv_kind of the kernels (common.cl) */
static int kv_kind(const axp_seq *s) {
        return s->kv_type == AXP_TYPE_Q8_0 ? 2 : s->kv_type == AXP_TYPE_F16 ? 1 : 0;
}

/* Scratch ---------------------------------------------------------------------------------------- */

static int grow(ocl_dev *c, cl_mem *m, size_t *cap, size_t need, size_t row_bytes, axp_error *err) {
        if (need <= *cap)
                return 0;
        cl_int e;
        cl_mem n = clCreateBuffer(c->ctx, CL_MEM_READ_WRITE, need * row_bytes, NULL, &e);
        if (!n)
                return cl_fail(err, e, "allocating scratch memory");
        if (*m)
                clReleaseMemObject(*m);
        *m = n;
        *cap = need;
        return 0;
}

/* Matrix products ----------------------------------------------------------------------------- */

/* A product's activations: n_tok rows of k floats of x (row t at x_off + t * ldx) taken as
 * the weights of kind `act` need them, into the scratch planes. */
static int act_convert(ocl_dev *c, int act, cl_mem x, long x_off, long ldx, int k, int n_tok,
                       axp_error *err) {
        const size_t kb = (size_t) c->act_k;
        int r;
        if (k > c->act_k)
                return axp_errorf(err, -EINVAL, "OpenCL: a product of %d inputs (at most %d)", k,
                                  c->act_k);
        switch (act) {
        case ACT_F16:
        case ACT_BF16:
                if ((r = grow(c, &c->af, &c->af_rows, (size_t) n_tok, kb * sizeof(float), err)) < 0)
                        return r;
                return launch(c, c->k_act[act], act == ACT_F16 ? "act_f16" : "act_bf16",
                              round_up((size_t) k, c->wg),
                              (size_t) n_tok, 0,
                              ARGS(KM(x), KI(x_off), KI(ldx), KI(k), KM(c->af)), err);
        case ACT_Q8_0:
        case ACT_Q8_K:
                if ((r = grow(c, &c->aq, &c->aq_rows, (size_t) n_tok, kb, err)) < 0 ||
                    (r = grow(c, &c->ad, &c->ad_rows, (size_t) n_tok, kb / 32 * sizeof(float),
                              err)) < 0 ||
                    (r = grow(c, &c->as, &c->as_rows, (size_t) n_tok, kb / 32 * sizeof(float),
                              err)) < 0)
                        return r;
                if (act == ACT_Q8_0)
                        return launch(c, c->k_act[act], "act_q8_0", (size_t) (k / 32),
                                      (size_t) n_tok, 0,
                                      ARGS(KM(x), KI(x_off), KI(ldx), KI(k), KM(c->aq),
                                           KM(c->ad), KM(c->as)),
                                      err);
                return launch(c, c->k_act[act], "act_q8_k", (size_t) (k / 256), (size_t) n_tok, 0,
                              ARGS(KM(x), KI(x_off), KI(ldx), KI(k), KM(c->aq), KM(c->ad),
                                   KM(c->as)),
                              err);
        default:
                return 0;
        }
}

/* Items of a work-group that share one row of a product (a power of two, one unit of the
 * row at most each: a block of 32, or a super-block of 256 where the activations are Q8_K).
 * Fewer items a row means the items of a warp take more rows, and so read fewer of the
 * activations' blocks at once, each for several rows; more means more items in all where a
 * pass has few rows. On a GPU at most 8 (GPU_ITEMS_PER_ROW): on an NVIDIA H200 (bench-opencl
 * with AXP_OPENCL_KL from 2 to 64, the 1B shapes) 8 was the fastest or within 10% of it for one
 * token on every type measured, and 1.5x to 3.6x faster than all of a row's units at once (64)
 * for 64 tokens, where 2 or 4 would be faster still. It may not depend on the tokens of the pass:
 * the sums' order would then depend on how a prompt is chunked, and a chunked prefill must give
 * the logits of a whole one (test-forward). A CPU runs a work-group's items one after the
 * other: one row per item is cheapest there. */
static int items_per_row(const ocl_dev *c, int n_in, bool super_blocks) {
        const int n_units = n_in / (super_blocks ? 256 : 32);
        const int cap = MIN(c->kl_fixed, c->wg);
        int kl = 1;
        while (kl < n_units && kl < cap)
                kl *= 2;
        return kl;
}

/* Y_i[t * ldy_i + r] = W_i X^T for weights of the same input length sharing the input X (n_tok
 * rows at x_off + t * ldx). The input is converted once per kind of activations the weights
 * take, as the CPU kernels do (one in-order queue: the scratch planes are reused safely).
 * With blk (stacked expert tensors), the rows are a mixture of experts' slots and each work-group
 * row takes the expert and rows of its entry of the n_blk entries of moe_plan's table. */
static int matmuls_at(ocl_dev *c, int n_w, const wref *const *w, cl_mem x, long x_off, long ldx,
                      const cl_mem *y, const long *ldy, int n_tok, cl_mem blk, int n_blk,
                      axp_error *err) {
        const int k = (int) w[0]->w->n_in;
        int r;
        for (int act = 0; act < ACT__MAX; act++) {
                bool converted = false;
                for (int i = 0; i < n_w; i++) {
                        const wref *wi = w[i];
                        if (wtypes[wi->type].act != act)
                                continue;
                        if (!converted &&
                            (r = act_convert(c, act, x, x_off, ldx, k, n_tok, err)) < 0)
                                return r;
                        converted = true;
                        const int kl = items_per_row(c, k, act == ACT_Q8_K);
                        const int rows_per_group = c->wg / kl;
                        const size_t gx = (size_t) DIV_ROUND_UP(wi->w->n_out, rows_per_group) *
                                          (size_t) c->wg,
                                     gy = blk ? (size_t) n_blk : (size_t) DIV_ROUND_UP(n_tok, TT);
                        /* the activations: the quantized planes, the rounded rows or X */
                        const bool q = act == ACT_Q8_0 || act == ACT_Q8_K;
                        const bool rounded = act == ACT_F16 || act == ACT_BF16;
                        const cl_mem a0 = q ? c->aq : rounded ? c->af : x;
                        const cl_int a1 = rounded ? 0 : (cl_int) x_off,
                                     a2 = rounded ? k : (cl_int) ldx;
                        karg args[] = { KM(wi->buf), KU(wi->off), KU(wi->w->row_bytes), KI(k),
                                        KI(wi->w->n_out), KI(ilog2(kl)), KM(a0),
                                        q ? KM(c->ad) : KI(a1), q ? KM(c->as) : KI(a2),
                                        KM(y[i]), KI(0), KI(ldy[i]),
                                        blk ? KM(blk) : KI(n_tok), KU(wi->estride) };
                        cl_kernel kern = blk ? c->k_matmul_id[wi->type] : c->k_matmul[wi->type];
                        if ((r = launch(c, kern, "matmul", gx, gy, (size_t) c->wg, args,
                                        (int) ELEMENTSOF(args) - (blk ? 0 : 1), err)) < 0)
                                return r;
                }
        }
        return 0;
}

static int matmuls(ocl_dev *c, int n_w, const wref *const *w, cl_mem x, long x_off, long ldx,
                   const cl_mem *y, const long *ldy, int n_tok, axp_error *err) {
        return matmuls_at(c, n_w, w, x, x_off, ldx, y, ldy, n_tok, NULL, 0, err);
}

static int matmul(ocl_dev *c, const wref *w, cl_mem x, long ldx, cl_mem y, long ldy, int n_tok,
                  axp_error *err) {
        return matmuls(c, 1, &w, x, 0, ldx, &y, &ldy, n_tok, err);
}

static int collect_rows(ocl_dev *c, const axp_task *t, bool last_only, int *ret_n, axp_error *err) {
        int n = 0;
        for (int i = 0; i < t->n_spans; i++) {
                const axp_span *s = &t->spans[i];
                if (!s->seq || s->t0 < 0 || s->t1 > s->seq->n_new || s->t0 >= s->t1)
                        return axp_errorf(err, -EINVAL, "task %s: span %d [%d, %d) is not pending",
                                          axp_op_name(t->op), i, s->t0, s->t1);
                n += last_only ? 1 : s->t1 - s->t0;
        }
        if (n > c->rows_cap) {
                free(c->rows);
                free(c->runs);
                c->rows = malloc((size_t) n * sizeof(row_ref));
                c->runs = malloc((size_t) n * sizeof(run)); /* a run has at least one row */
                c->rows_cap = c->rows && c->runs ? n : 0;
                if (!c->rows_cap)
                        return axp_errorf(err, -ENOMEM, "out of memory");
        }
        n = 0;
        for (int i = 0; i < t->n_spans; i++) {
                const axp_span *s = &t->spans[i];
                for (int k = last_only ? s->t1 - 1 : s->t0; k < s->t1; k++)
                        c->rows[n++] = (row_ref) { s->seq, k, s->seq->n_past + k };
        }
        *ret_n = n;
        return 0;
}

/* The runs of rows [base, base + n): consecutive tokens of one request. */
static int make_runs(ocl_dev *c, int base, int n) {
        int nr = 0;
        for (int i = base; i < base + n; i++) {
                row_ref *r = &c->rows[i];
                run *p = nr ? &c->runs[nr - 1] : NULL;
                if (p && p->seq == r->seq && p->t + p->n == r->t)
                        p->n++;
                else
                        c->runs[nr++] = (run) { r->seq, i - base, r->t, 1 };
        }
        return nr;
}

/* A request's memory as a task uses it: written only, or read too (copied in when the
 * memory is copied rather than wrapped). */
enum {
        USE_X = 1 << 0,
        READ_X = 1 << 1 | USE_X,
        USE_QA = 1 << 2,
        READ_QA = 1 << 3 | USE_QA,
        USE_KV = 1 << 4,
        READ_KV = 1 << 5 | USE_KV,
};

typedef struct seq_bufs {
        cl_mem x, qa, k, v;
} seq_bufs;

/* Wrap a request of the task: its activations up to the last pending token the task
 * touches, the KV cache of the task's layer up to that token's row in the last head (the
 * cache is head by head, axp_kv_offset). */
static int seq_wrap(ocl_dev *c, const axp_task *t, axp_seq *s, unsigned use, seq_bufs *ret,
                    axp_error *err) {
        const axp_hparams *hp = &c->model->hp;
        int t1 = 0, r;
        for (int i = 0; i < t->n_spans; i++)
                if (t->spans[i].seq == s)
                        t1 = MAX(t1, t->spans[i].t1);
        const size_t xb = (size_t) t1 * hp->n_embd * sizeof(float),
                     qab = (size_t) t1 * hp->n_head * hp->head_dim * sizeof(float),
                     kvb = axp_kv_offset(kv_head_bytes(s), axp_seq_kv_rows(s, t->layer), hp->n_head_kv - 1,
                                         MIN(s->n_past + t1, axp_seq_kv_rows(s, t->layer)));
        if ((use & USE_X) &&
            (r = wrap_get(c, s->x, xb, (use & READ_X) == READ_X, &ret->x, err)) < 0)
                return r;
        if ((use & USE_QA) &&
            (r = wrap_get(c, s->qa, qab, (use & READ_QA) == READ_QA, &ret->qa, err)) < 0)
                return r;
        if ((use & USE_KV) &&
            ((r = wrap_get(c, s->k[t->layer], kvb, (use & READ_KV) == READ_KV, &ret->k, err)) < 0 ||
             (r = wrap_get(c, s->v[t->layer], kvb, (use & READ_KV) == READ_KV, &ret->v, err)) < 0))
                return r;
        return 0;
}

/* EMBED ------------------------------------------------------------------------------------------- */

static int run_embed(ocl_dev *c, const axp_task *t, int n, axp_error *err) {
        const int d = c->model->hp.n_embd;
        const wref *w = &c->tok_embd;
        int r;
        if ((r = grow(c, &c->tokens, &c->token_rows, (size_t) n, sizeof(cl_int), err)) < 0)
                return r;
        int nr = make_runs(c, 0, n);
        for (int i = 0; i < nr; i++) {
                run *u = &c->runs[i];
                seq_bufs b;
                if ((r = seq_wrap(c, t, u->seq, USE_X, &b, err)) < 0)
                        return r;
                cl_int e = clEnqueueWriteBuffer(
                        c->q, c->tokens, CL_FALSE, (size_t) u->row * sizeof(cl_int),
                        (size_t) u->n * sizeof(cl_int), u->seq->tokens + u->t, 0, NULL, NULL);
                if (e != CL_SUCCESS)
                        return cl_fail(err, e, "uploading tokens");
                if ((r = launch(c, c->k_embed[w->type], "embed", round_up((size_t) (d / 32), c->wg),
                                (size_t) u->n, (size_t) c->wg,
                                ARGS(KM(w->buf), KU(w->off), KU(w->w->row_bytes), KI(d),
                                     KM(c->tokens), KI(u->row), KM(b.x), KI((long) u->t * d),
                                     KI(d)),
                                err)) < 0)
                        return r;
                const float scale = c->model->hp.embd_scale;
                if (scale != 1.0f &&
                    (r = launch(c, c->k_scale_rows, "scale_rows", round_up((size_t) d, c->wg), (size_t) u->n,
                                (size_t) c->wg, ARGS(KM(b.x), KI((long) u->t * d), KI(d), KF(scale), KI(d)),
                                err)) < 0)
                        return r;
                if ((r = mark_dirty(c, b.x, u->seq->x, (size_t) u->t * d * sizeof(float),
                                    (size_t) u->n * d * sizeof(float), err)) < 0)
                        return r;
        }
        return 0;
}

/* K1 ---------------------------------------------------------------------------------------------- */

/* cos/sin of every (row, rotated pair) of the task, computed in double as the CPU backend
 * does; kept while the positions repeat (every layer of one prefill or decode step). */
static int rope_table(ocl_dev *c, int n, bool swa, axp_error *err) {
        const axp_hparams *hp = &c->model->hp;
        const int half = hp->rope_dim / 2;
        const double *inv_freq = c->inv_freq + (swa ? half : 0);
        bool same = c->rope_n == n && c->rope_swa == swa;
        for (int i = 0; same && i < n; i++)
                same = c->rope_pos[i] == c->rows[i].pos;
        if (same)
                return 0;
        int r;
        if (n > c->rope_host_cap) {
                free(c->rope_host);
                free(c->rope_pos);
                c->rope_host = malloc((size_t) n * MAX(half, 1) * 2 * sizeof(float));
                c->rope_pos = malloc((size_t) n * sizeof(int32_t));
                c->rope_n = 0;
                c->rope_host_cap = c->rope_host && c->rope_pos ? n : 0;
                if (!c->rope_host_cap)
                        return axp_errorf(err, -ENOMEM, "out of memory");
        }
        if ((r = grow(c, &c->rope, &c->rope_rows, (size_t) n,
                      (size_t) MAX(half, 1) * 2 * sizeof(float), err)) < 0)
                return r;
        const float mscale = (float) axp_rope_mscale(hp, swa);
        for (int i = 0; i < n; i++) {
                for (int k = 0; k < half; k++) {
                        double theta = axp_rope_theta(hp, swa, k, c->rows[i].pos, inv_freq[k]);
                        c->rope_host[(size_t) i * 2 * half + 2 * k] = (float) cos(theta) * mscale;
                        c->rope_host[(size_t) i * 2 * half + 2 * k + 1] = (float) sin(theta) * mscale;
                }
                c->rope_pos[i] = c->rows[i].pos;
        }
        c->rope_n = n;
        c->rope_swa = swa;
        if (half == 0)
                return 0;
        /* blocking: the host table is rewritten by the next task */
        cl_int e = clEnqueueWriteBuffer(c->q, c->rope, CL_TRUE, 0,
                                        (size_t) n * half * 2 * sizeof(float), c->rope_host, 0,
                                        NULL, NULL);
        if (e != CL_SUCCESS) {
                c->rope_n = 0;
                return cl_fail(err, e, "uploading the RoPE table");
        }
        return 0;
}

static int run_k1(ocl_dev *c, const axp_task *t, int n, axp_error *err) {
        const axp_hparams *hp = &c->model->hp;
        const long d = hp->n_embd, qd = (long) hp->n_head * hp->head_dim,
                   kvd = (long) hp->n_head_kv * hp->head_dim;
        const layer_refs *L = &c->layers[t->layer];
        const wref *anyw = &L->wq; /* stands in for absent optional weights */
        int r;

        if ((r = rope_table(c, n, axp_layer_is_swa(hp, t->layer), err)) < 0)
                return r;
        for (int base = 0; base < n; base += TILE) {
                const int nt = MIN(TILE, n - base);
                const int nr = make_runs(c, base, nt);
                for (int i = 0; i < nr; i++) {
                        run *u = &c->runs[i];
                        seq_bufs b;
                        if ((r = seq_wrap(c, t, u->seq, READ_X, &b, err)) < 0)
                                return r;
                        if (!L->attn_norm.buf) { /* olmo2: no pre-norm, the rows as they are */
                                cl_int e = clEnqueueCopyBuffer(c->q, b.x, c->h, (size_t) u->t * d * sizeof(float),
                                                               (size_t) u->row * d * sizeof(float),
                                                               (size_t) u->n * d * sizeof(float), 0, NULL, NULL);
                                if (e != CL_SUCCESS)
                                        return cl_fail(err, e, "copying the residual rows");
                        } else if ((r = launch(c, c->k_rmsnorm, "rmsnorm", (size_t) u->n * c->wg, 1,
                                               (size_t) c->wg,
                                               ARGS(KM(b.x), KI(u->t * d), KI(d), KM(L->attn_norm.buf),
                                                    KU(L->attn_norm.off), KM(c->h), KI(u->row * d), KI(d),
                                                    KI(d), KF(hp->rms_eps)),
                                               err)) < 0)
                                return r;
                }
                if ((r = matmuls(c, 3, (const wref *[]) { &L->wq, &L->wk, &L->wv }, c->h, 0, d,
                                 (cl_mem[]) { c->sq, c->sk, c->sv }, (long[]) { qd, kvd, kvd }, nt,
                                 err)) < 0)
                        return r;
                for (int i = 0; i < nr; i++) {
                        run *u = &c->runs[i];
                        axp_seq *s = u->seq;
                        seq_bufs b;
                        if ((r = seq_wrap(c, t, s, USE_QA | USE_KV, &b, err)) < 0)
                                return r;
                        const bool bias = L->bq.buf, norm = L->q_norm.buf;
                        const wref *bq = bias ? &L->bq : anyw, *bk = bias ? &L->bk : anyw,
                                   *bv = bias ? &L->bv : anyw;
                        const wref *qn = norm ? &L->q_norm : anyw, *kn = norm ? &L->k_norm : anyw;
                        const int pos0 = s->n_past + u->t, rows = axp_seq_kv_rows(s, t->layer);
                        if ((r = launch(c, c->k_k1_post, "k1_post", (size_t) u->n * c->wg, 1,
                                        (size_t) c->wg,
                                        ARGS(KM(c->sq), KM(c->sk), KM(c->sv), KI(u->row),
                                             KI(hp->n_head), KI(hp->n_head_kv), KI(hp->head_dim),
                                             KI(bias), KM(bq->buf), KU(bq->off), KM(bk->buf),
                                             KU(bk->off), KM(bv->buf), KU(bv->off),
                                             KI(norm ? (hp->qk_norm_full ? 2 : 1) : 0),
                                             KM(qn->buf), KU(qn->off), KM(kn->buf), KU(kn->off),
                                             KF(hp->rms_eps), KM(c->rope), KI(base + u->row),
                                             /* no pairs to rotate: smollm3's NoPE layers */
                                             KI(axp_layer_has_rope(hp, t->layer) ? hp->rope_dim / 2 : 0),
                                             KI(hp->rope_type == AXP_ROPE_NEOX), KM(b.qa), KI(u->t),
                                             KM(b.k), KM(b.v), KI(pos0), KI(rows),
                                             KI(kv_kind(s)), KF(hp->attn_temp_scale),
                                             KI(hp->n_ctx_orig)),
                                        err)) < 0)
                                return r;
                        /* the rows written, in each head: up to the ring's end, and from its
                         * start if they wrap */
                        const size_t hb = kv_head_bytes(s);
                        const int row0 = pos0 % rows, n1 = MIN(u->n, rows - row0);
                        if ((r = mark_dirty(c, b.qa, s->qa, (size_t) u->t * qd * sizeof(float),
                                            (size_t) u->n * qd * sizeof(float), err)) < 0)
                                return r;
                        for (int h = 0; h < hp->n_head_kv; h++) {
                                const size_t at = axp_kv_offset(hb, rows, h, row0), start = axp_kv_offset(hb, rows, h, 0);
                                if ((r = mark_dirty(c, b.k, s->k[t->layer], at, (size_t) n1 * hb, err)) < 0 ||
                                    (r = mark_dirty(c, b.v, s->v[t->layer], at, (size_t) n1 * hb, err)) < 0)
                                        return r;
                                if (n1 < u->n &&
                                    ((r = mark_dirty(c, b.k, s->k[t->layer], start, (size_t) (u->n - n1) * hb, err)) < 0 ||
                                     (r = mark_dirty(c, b.v, s->v[t->layer], start, (size_t) (u->n - n1) * hb, err)) < 0))
                                        return r;
                        }
                }
        }
        return 0;
}

/* K2 ---------------------------------------------------------------------------------------------- */

static int run_k2(ocl_dev *c, const axp_task *t, axp_error *err) {
        const axp_hparams *hp = &c->model->hp;
        const long qd = (long) hp->n_head * hp->head_dim;
        int r;
        for (int i = 0; i < t->n_spans; i++) {
                const axp_span *sp = &t->spans[i];
                axp_seq *s = sp->seq;
                const int n_q = sp->t1 - sp->t0;
                seq_bufs b;
                if ((r = seq_wrap(c, t, s, READ_QA | READ_KV, &b, err)) < 0)
                        return r;
                if ((r = launch(c, c->k_attention, "attention", (size_t) n_q * hp->n_head * c->wg,
                                1, (size_t) c->wg,
                                ARGS(KM(b.qa), KI(sp->t0), KM(b.k), KM(b.v),
                                     KI(kv_kind(s)), KI(s->n_past + sp->t0),
                                     KI(hp->n_head), KI(hp->n_head_kv), KI(hp->head_dim),
                                     KI(axp_layer_is_swa(hp, t->layer) ? hp->n_swa : 0),
                                     KI(axp_seq_kv_rows(s, t->layer)), KF(hp->attn_scale),
                                     KF(hp->attn_softcap)),
                                err)) < 0)
                        return r;
                if ((r = mark_dirty(c, b.qa, s->qa, (size_t) sp->t0 * qd * sizeof(float),
                                    (size_t) n_q * qd * sizeof(float), err)) < 0)
                        return r;
        }
        return 0;
}

/* K3 ---------------------------------------------------------------------------------------------- */

/* gemma3: the nt rows of a block's output O normed in place before they join the residual */
static int post_norm(ocl_dev *c, const wref *w, int nt, axp_error *err) {
        const int d = c->model->hp.n_embd;
        if (!w->buf)
                return 0;
        return launch(c, c->k_rmsnorm, "rmsnorm", (size_t) nt * c->wg, 1, (size_t) c->wg,
                      ARGS(KM(c->o), KI(0), KI(d), KM(w->buf), KU(w->off), KM(c->o), KI(0), KI(d), KI(d),
                           KF(c->model->hp.rms_eps)),
                      err);
}

/* The gated FFN of nt rows of H into O. */
static int dense_ffn(ocl_dev *c, const layer_refs *L, int nt, axp_error *err) {
        const axp_hparams *hp = &c->model->hp;
        const long d = hp->n_embd, ff = hp->n_ff;
        int r;
        if ((r = matmuls(c, 2, (const wref *[]) { &L->w_gate, &L->w_up }, c->h, 0, d,
                         (cl_mem[]) { c->g, c->u }, (long[]) { ff, ff }, nt, err)) < 0)
                return r;
        const bool gelu = hp->ffn_act == AXP_FFN_GELU_TANH;
        if ((r = launch(c, gelu ? c->k_geglu : c->k_swiglu, gelu ? "geglu" : "swiglu",
                        round_up((size_t) nt * ff, c->wg), 1, (size_t) c->wg,
                        ARGS(KM(c->g), KM(c->u), KI((long) nt * ff)), err)) < 0)
                return r;
        return matmul(c, &L->w_down, c->g, ff, c->o, d, nt, err);
}

/* The mixture of experts' FFN of nt rows of H into O (moe.cl): the router's logits, each
 * token's experts, its rows gathered into slots grouped by expert, the picked experts' gate, up
 * and down products over their slots, and each token's weighted sum. All on the device: the
 * host never waits for the routing, the products run over a table of blocks sized for the
 * worst case (the blocks beyond the ones used return at once). */
static int moe_ffn(ocl_dev *c, const layer_refs *L, int nt, axp_error *err) {
        const axp_hparams *hp = &c->model->hp;
        const long d = hp->n_embd, ff = hp->n_ff_exp, ne = hp->n_expert;
        const int nk = hp->n_expert_used, slots = nt * nk;
        const int n_blk = DIV_ROUND_UP(slots, TT) + MIN(hp->n_expert, slots);
        int r;
        if (n_blk > c->m_blocks)
                return axp_errorf(err, -EINVAL, "OpenCL: %d expert blocks (at most %d)", n_blk,
                                  c->m_blocks);
        if ((r = matmul(c, &L->router, c->h, d, c->m_logit, ne, nt, err)) < 0 ||
            (r = launch(c, c->k_moe_route, "moe_route", (size_t) nt, 1, 0,
                        ARGS(KM(c->m_logit), KI(ne), KI(nk), KI(hp->expert_norm),
                             KF(hp->expert_scale), KI(nt), KM(c->m_sel), KM(c->m_wt)),
                        err)) < 0 ||
            (r = launch(c, c->k_moe_plan, "moe_plan", 1, 1, 1,
                        ARGS(KM(c->m_sel), KI(nt), KI(nk), KI(ne), KM(c->m_cnt),
                             KM(c->m_slot_tok), KM(c->m_slot_of), KM(c->m_blk), KI(n_blk)),
                        err)) < 0 ||
            (r = launch(c, c->k_moe_gather, "moe_gather", round_up((size_t) d, c->wg),
                        (size_t) slots, (size_t) c->wg,
                        ARGS(KM(c->h), KM(c->m_slot_tok), KM(c->m_hx), KI(d)), err)) < 0)
                return r;
        if ((r = matmuls_at(c, 2, (const wref *[]) { &L->exp_gate, &L->exp_up }, c->m_hx, 0, d,
                            (cl_mem[]) { c->m_g, c->m_u }, (long[]) { ff, ff }, slots,
                            c->m_blk, n_blk, err)) < 0 ||
            (r = launch(c, c->k_swiglu, "swiglu", round_up((size_t) slots * ff, c->wg), 1,
                        (size_t) c->wg, ARGS(KM(c->m_g), KM(c->m_u), KI((long) slots * ff)),
                        err)) < 0)
                return r;
        /* the down products' outputs take the place of the slots' inputs, read by now */
        if ((r = matmuls_at(c, 1, (const wref *[]) { &L->exp_down }, c->m_g, 0, ff,
                            (cl_mem[]) { c->m_hx }, (long[]) { d }, slots, c->m_blk, n_blk,
                            err)) < 0)
                return r;
        return launch(c, c->k_moe_combine, "moe_combine", round_up((size_t) d, c->wg),
                      (size_t) nt, (size_t) c->wg,
                      ARGS(KM(c->m_hx), KM(c->m_slot_of), KM(c->m_wt), KI(nk), KM(c->o), KI(d)),
                      err);
}

static int run_k3(ocl_dev *c, const axp_task *t, int n, axp_error *err) {
        const axp_hparams *hp = &c->model->hp;
        const long d = hp->n_embd, qd = (long) hp->n_head * hp->head_dim;
        const layer_refs *L = &c->layers[t->layer];
        int r;

        for (int base = 0; base < n; base += TILE) {
                const int nt = MIN(TILE, n - base);
                const int nr = make_runs(c, base, nt);
                for (int i = 0; i < nr; i++) {
                        run *u = &c->runs[i];
                        seq_bufs b;
                        if ((r = seq_wrap(c, t, u->seq, READ_X | READ_QA, &b, err)) < 0)
                                return r;
                        cl_int e = clEnqueueCopyBuffer(
                                c->q, b.qa, c->a, (size_t) u->t * qd * sizeof(float),
                                (size_t) u->row * qd * sizeof(float),
                                (size_t) u->n * qd * sizeof(float), 0, NULL, NULL);
                        if (e != CL_SUCCESS)
                                return cl_fail(err, e, "gathering attention rows");
                }
                if ((r = matmul(c, &L->wo, c->a, qd, c->o, d, nt, err)) < 0 ||
                    (r = post_norm(c, &L->post_attn_norm, nt, err)) < 0)
                        return r;
                for (int i = 0; i < nr; i++) {
                        run *u = &c->runs[i];
                        seq_bufs b;
                        if ((r = seq_wrap(c, t, u->seq, READ_X | READ_QA, &b, err)) < 0)
                                return r;
                        if ((r = launch(c, c->k_residual_rmsnorm, "residual_rmsnorm",
                                        (size_t) u->n * c->wg, 1, (size_t) c->wg,
                                        ARGS(KM(b.x), KI(u->t * d), KI(d), KM(c->o), KI(u->row * d),
                                             /* without ffn_norm (olmo2) any buffer: not read */
                                             KI(d), KM(L->ffn_norm.buf ? L->ffn_norm.buf : c->o),
                                             KU(L->ffn_norm.off), KM(c->h), KI(u->row * d), KI(d), KI(d),
                                             KF(hp->rms_eps), KF(hp->residual_scale),
                                             KI(L->ffn_norm.buf != NULL)),
                                        err)) < 0)
                                return r;
                }
                if ((r = hp->n_expert > 0 ? moe_ffn(c, L, nt, err) : dense_ffn(c, L, nt, err)) < 0 ||
                    (r = post_norm(c, &L->post_ffn_norm, nt, err)) < 0)
                        return r;
                for (int i = 0; i < nr; i++) {
                        run *u = &c->runs[i];
                        seq_bufs b;
                        if ((r = seq_wrap(c, t, u->seq, READ_X | READ_QA, &b, err)) < 0)
                                return r;
                        if ((r = launch(c, c->k_residual, "residual", round_up((size_t) d, c->wg),
                                        (size_t) u->n, (size_t) c->wg,
                                        ARGS(KM(b.x), KI(u->t * d), KI(d), KM(c->o), KI(u->row * d),
                                             KI(d), KI(d), KF(hp->residual_scale)),
                                        err)) < 0)
                                return r;
                        if ((r = mark_dirty(c, b.x, u->seq->x, (size_t) u->t * d * sizeof(float),
                                            (size_t) u->n * d * sizeof(float), err)) < 0)
                                return r;
                }
        }
        return 0;
}

/* HEAD -------------------------------------------------------------------------------------------- */

static int run_head(ocl_dev *c, const axp_task *t, int n, axp_error *err) {
        const axp_hparams *hp = &c->model->hp;
        const long d = hp->n_embd, nv = hp->n_vocab;
        int r;

        if ((r = grow(c, &c->logits, &c->logits_rows, (size_t) n, (size_t) nv * sizeof(float),
                      err)) < 0)
                return r;
        for (int i = 0; i < n; i++) {
                row_ref *rr = &c->rows[i];
                seq_bufs b;
                if ((r = seq_wrap(c, t, rr->seq, READ_X, &b, err)) < 0)
                        return r;
                if ((r = launch(c, c->k_rmsnorm, "rmsnorm", (size_t) c->wg, 1, (size_t) c->wg,
                                ARGS(KM(b.x), KI(rr->t * d), KI(d), KM(c->output_norm.buf),
                                     KU(c->output_norm.off), KM(c->h), KI(i * d), KI(d), KI(d),
                                     KF(hp->rms_eps)),
                                err)) < 0)
                        return r;
        }
        if ((r = matmul(c, &c->output, c->h, d, c->logits, nv, n, err)) < 0)
                return r;
        for (int i = 0; i < n; i++) {
                cl_int e = clEnqueueReadBuffer(
                        c->q, c->logits, CL_FALSE, (size_t) i * nv * sizeof(float),
                        (size_t) nv * sizeof(float), c->rows[i].seq->logits, 0, NULL, NULL);
                if (e != CL_SUCCESS)
                        return cl_fail(err, e, "reading logits");
        }
        return 0;
}

/* The device ------------------------------------------------------------------------------------ */

static int ocl_run(axp_device *dev, const axp_task *t, axp_error *err) {
        ocl_dev *c = dev->priv;
        int n = 0, r;

        if (!c->model)
                return axp_errorf(err, -EINVAL, "the OpenCL device has no model prepared");
        if (t->n_spans < 1 || t->n_spans > AXP_MAX_BATCH)
                return axp_errorf(err, -EINVAL, "task with %d spans", t->n_spans);
        if (t->op != AXP_OP_EMBED && t->op != AXP_OP_HEAD &&
            (t->layer < 0 || t->layer >= c->model->hp.n_layer))
                return axp_errorf(err, -EINVAL, "task for layer %d of %d", t->layer,
                                  c->model->hp.n_layer);
        for (int i = 0; i < t->n_spans; i++)
                if (t->spans[i].seq && t->spans[i].seq->model != c->model)
                        return axp_errorf(err, -EINVAL, "task for a request of another model");
        if ((r = collect_rows(c, t, t->op == AXP_OP_HEAD, &n, err)) < 0)
                return r;

        const double t0 = c->profile ? axp_now() : 0;
        switch (t->op) {
        case AXP_OP_EMBED: r = run_embed(c, t, n, err); break;
        case AXP_OP_K1: r = run_k1(c, t, n, err); break;
        case AXP_OP_K2: r = run_k2(c, t, err); break;
        case AXP_OP_K3:
                r = c->moe_cpu ? axp_device_run(c->moe_cpu, t, err) : run_k3(c, t, n, err);
                break;
        case AXP_OP_HEAD: r = run_head(c, t, n, err); break;
        default: r = axp_errorf(err, -EINVAL, "unknown kernel %d", t->op); break;
        }
        /* even after a failure: nothing may still run on the request's memory when we return */
        int f = finish_task(c, r < 0 ? NULL : err);
        release_wraps(c);
        if (c->profile && t->op >= 0 && t->op < AXP_OP__COUNT) {
                c->task_prof[t->op].n++;
                c->task_prof[t->op].s += axp_now() - t0;
        }
        if (r >= 0 && f < 0)
                r = f;
        if (r >= 0 && t->op == AXP_OP_HEAD)
                for (int i = 0; i < n; i++) {
                        axp_model_finish_logits(c->model, c->rows[i].seq->logits);
                        c->rows[i].seq->logits_pos = c->rows[i].pos;
                }
        return r;
}

/* Weights ---------------------------------------------------------------------------------------- */

static int wbuf_add(ocl_dev *c, cl_mem m, axp_error *err) {
        if (c->n_wbufs == c->cap_wbufs) {
                int cap = c->cap_wbufs ? c->cap_wbufs * 2 : 16;
                cl_mem *n = realloc(c->wbufs, (size_t) cap * sizeof(cl_mem));
                if (!n) {
                        clReleaseMemObject(m);
                        return axp_errorf(err, -ENOMEM, "out of memory");
                }
                c->wbufs = n;
                c->cap_wbufs = cap;
        }
        c->wbufs[c->n_wbufs++] = m;
        return 0;
}

static void weights_release(ocl_dev *c) {
        for (int i = 0; i < c->n_wbufs; i++)
                clReleaseMemObject(c->wbufs[i]);
        c->n_wbufs = 0;
}

static uint64_t weight_bytes(const axp_weight *w) {
        return (uint64_t) w->n_out * w->row_bytes;
}

/* Segments of the model's mappings (one a file; a split model has a file a part): each `len`
 * bytes, every `step` bytes, so that any weight lies wholly inside one of them (step = len -
 * the largest weight); part i's are the device's weight buffers first .. first + count - 1. */
typedef struct seg_part {
        const char *base;
        uint64_t size, len, step;
        int first, count;
} seg_part;

typedef struct segs {
        seg_part *p;
        uint32_t n;
} segs;

static int segments_make(ocl_dev *c, axp_model *m, segs *s, axp_error *err) {
        const gguf_file *f = m->gguf;
        uint64_t largest = 0;
        for (uint64_t i = 0; i < f->n_tensors; i++)
                largest = MAX(largest, f->tensors[i].nbytes);
        s->p = calloc(f->n_parts, sizeof(*s->p));
        if (!s->p)
                return axp_errorf(err, -ENOMEM, "out of memory");
        s->n = f->n_parts;
        for (uint32_t i = 0; i < f->n_parts; i++) {
                seg_part *p = &s->p[i];
                uint64_t len = f->parts[i].size;
                *p = (seg_part) { .base = f->parts[i].map, .size = len, .len = len, .step = len, .first = c->n_wbufs };
                if (p->size > c->info.max_alloc) {
                        len = c->info.max_alloc & ~(uint64_t) 4095;
                        if (largest + 4096 > len)
                                return axp_errorf(err, -E2BIG,
                                                  "OpenCL: a weight of %" PRIu64
                                                  " bytes exceeds the device's largest buffer "
                                                  "(%" PRIu64 " bytes)",
                                                  largest, c->info.max_alloc);
                        p->step = (len - largest) & ~(uint64_t) 4095;
                        p->len = len;
                }
                for (uint64_t off = 0; off < p->size; off += p->step) {
                        cl_int e;
                        cl_mem b = clCreateBuffer(c->ctx, CL_MEM_READ_ONLY | CL_MEM_USE_HOST_PTR,
                                                  MIN(len, p->size - off), (void *) (p->base + off), &e);
                        if (!b)
                                return cl_fail(err, e, "wrapping the model's weights");
                        int r = wbuf_add(c, b, err);
                        if (r < 0)
                                return r;
                        p->count++;
                        if (off + len >= p->size)
                                break;
                }
        }
        return 0;
}

static int type_index(uint32_t type) {
        for (size_t i = 0; i < N_WTYPES; i++)
                if (wtypes[i].type == type)
                        return (int) i;
        return -1;
}

static int wref_make(ocl_dev *c, const segs *s, const axp_weight *w, bool matrix, wref *ret,
                     axp_error *err) {
        *ret = (wref) { .w = w, .type = -1 };
        if (!w->data)
                return 0;
        if (matrix) {
                ret->type = type_index(w->type);
                if (ret->type < 0)
                        return axp_errorf(err, -EOPNOTSUPP,
                                          "OpenCL: %s has a weight type the kernels do not read",
                                          w->name);
                if (w->n_in % 32 != 0)
                        return axp_errorf(err, -EOPNOTSUPP,
                                          "OpenCL: %s has rows of %" PRId64
                                          " values; the kernels need multiples of 32",
                                          w->name, w->n_in);
        }
        if (c->zero_copy) {
                const char *d = w->data;
                for (uint32_t i = 0; i < s->n; i++) {
                        const seg_part *p = &s->p[i];
                        if (d < p->base || d >= p->base + p->size)
                                continue;
                        uint64_t off = (uint64_t) (d - p->base);
                        /* the last segment runs to the end of the mapping */
                        uint64_t k = MIN(off / p->step, (uint64_t) p->count - 1);
                        ret->buf = c->wbufs[p->first + k];
                        ret->off = off - k * p->step;
                        /* wholly inside its segment, which the kernels read it from */
                        if (ret->off + weight_bytes(w) > MIN(p->len, p->size - k * p->step))
                                return axp_errorf(err, -EINVAL, "OpenCL: %s does not lie within one of the "
                                                  "buffers wrapping the model's files", w->name);
                        return 0;
                }
                /* not in the files: a vector the model converted to F32 (norms, biases), its
                 * own buffer as when weights are uploaded. (Taken as an offset from the
                 * mapping, as it once was, it read past the buffer: what PoCL's CPU device
                 * forgives and a GPU need not.) */
        }
        cl_int e;
        cl_mem b = clCreateBuffer(c->ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, weight_bytes(w),
                                  (void *) w->data, &e);
        if (!b)
                return cl_fail(err, e, "uploading the model's weights");
        int r = wbuf_add(c, b, err);
        if (r < 0)
                return r;
        ret->buf = b;
        return 0;
}

/* A stacked expert tensor, viewed as the n_expert matrices ws (consecutive in the file): a
 * reference to expert 0, the others estride bytes apart. Where the kernels cannot read it,
 * 1 with the reason in why. */
static int experts_make(ocl_dev *c, const segs *s, const axp_weight *ws, int n_expert, wref *ret,
                        char *why, size_t why_size, axp_error *err) {
        const uint64_t wb = weight_bytes(&ws[0]);
        axp_weight all = ws[0];
        all.n_out *= n_expert;
        if (type_index(ws[0].type) < 0 || ws[0].n_in % 32 != 0) {
                snprintf(why, why_size, "its experts' %s weights of rows of %" PRId64
                         " values are not read by the OpenCL kernels",
                         axp_type_traits_get(ws[0].type)->name, ws[0].n_in);
                return 1;
        }
        if (!c->zero_copy && wb * (uint64_t) n_expert > c->info.max_alloc) {
                snprintf(why, why_size, "a stacked expert tensor of %" PRIu64
                         " bytes exceeds the device's largest buffer (%" PRIu64 " bytes)",
                         wb * (uint64_t) n_expert, (uint64_t) c->info.max_alloc);
                return 1;
        }
        int r = wref_make(c, s, &all, true, ret, err);
        if (r < 0)
                return r;
        ret->w = &ws[0];
        ret->estride = wb;
        return 0;
}

static int weights_make(ocl_dev *c, axp_model *m, char *moe_why, size_t moe_why_size,
                        axp_error *err) {
        segs s = { 0 };
        int r;

        c->zero_copy = c->info.host_unified && !getenv("AXP_OPENCL_UPLOAD");
        r = c->zero_copy ? segments_make(c, m, &s, NULL) : 0;
        _cleanup_free_ seg_part *parts = s.p;
        if (r < 0) {
                /* some drivers refuse a read-only mapping: upload instead */
                weights_release(c);
                c->zero_copy = false;
        }
        if ((r = wref_make(c, &s, &m->tok_embd, true, &c->tok_embd, err)) < 0 ||
            (r = wref_make(c, &s, &m->output_norm, false, &c->output_norm, err)) < 0)
                return r;
        if (m->output.data == m->tok_embd.data)
                c->output = c->tok_embd;
        else if ((r = wref_make(c, &s, &m->output, true, &c->output, err)) < 0)
                return r;
        for (int i = 0; i < m->hp.n_layer; i++) {
                const axp_layer *l = &m->layers[i];
                layer_refs *o = &c->layers[i];
                struct {
                        const axp_weight *w;
                        wref *ref;
                        bool matrix;
                } ws[] = {
                        { &l->attn_norm, &o->attn_norm, false },
                        { &l->wq, &o->wq, true },
                        { &l->wk, &o->wk, true },
                        { &l->wv, &o->wv, true },
                        { &l->bq, &o->bq, false },
                        { &l->bk, &o->bk, false },
                        { &l->bv, &o->bv, false },
                        { &l->q_norm, &o->q_norm, false },
                        { &l->k_norm, &o->k_norm, false },
                        { &l->wo, &o->wo, true },
                        { &l->ffn_norm, &o->ffn_norm, false },
                        { &l->w_gate, &o->w_gate, true },
                        { &l->w_up, &o->w_up, true },
                        { &l->w_down, &o->w_down, true },
                        { &l->post_attn_norm, &o->post_attn_norm, false },
                        { &l->post_ffn_norm, &o->post_ffn_norm, false },
                };
                for (size_t j = 0; j < ELEMENTSOF(ws); j++)
                        if ((r = wref_make(c, &s, ws[j].w, ws[j].matrix, ws[j].ref, err)) < 0)
                                return r;
                /* a mixture of experts: on the device unless one of its tensors says why not */
                if (m->hp.n_expert > 0 && !*moe_why) {
                        if ((r = wref_make(c, &s, &l->ffn_router, true, &o->router, err)) < 0)
                                return r;
                        const struct {
                                const axp_weight *ws;
                                wref *ref;
                        } ex[] = { { l->exp_gate, &o->exp_gate },
                                   { l->exp_up, &o->exp_up },
                                   { l->exp_down, &o->exp_down } };
                        for (size_t j = 0; j < ELEMENTSOF(ex) && !*moe_why; j++)
                                if ((r = experts_make(c, &s, ex[j].ws, m->hp.n_expert, ex[j].ref,
                                                      moe_why, moe_why_size, err)) < 0)
                                        return r;
                }
                /* the kernels take biases and q/k norms all or none */
                if (!!o->bq.buf != !!o->bk.buf || !!o->bq.buf != !!o->bv.buf ||
                    !!o->q_norm.buf != !!o->k_norm.buf)
                        return axp_errorf(err, -EOPNOTSUPP,
                                          "OpenCL: layer %d has only some of its biases or norms",
                                          i);
        }
        return 0;
}

static void model_release(ocl_dev *c) {
        if (c->moe_cpu) {
                axp_device_free(c->moe_cpu);
                c->moe_cpu = NULL;
        }
        weights_release(c);
        free(c->layers);
        free(c->inv_freq);
        c->layers = NULL;
        c->inv_freq = NULL;
        cl_mem *ms[] = { &c->h,          &c->sq,      &c->sk,      &c->sv,     &c->a,
                         &c->o,          &c->g,       &c->u,       &c->rope,   &c->tokens,
                         &c->logits,     &c->aq,      &c->ad,      &c->as,     &c->af,
                         &c->m_logit,    &c->m_sel,   &c->m_wt,    &c->m_slot_tok,
                         &c->m_slot_of,  &c->m_cnt,   &c->m_blk,   &c->m_hx,   &c->m_g,
                         &c->m_u };
        for (size_t i = 0; i < ELEMENTSOF(ms); i++) {
                if (*ms[i])
                        clReleaseMemObject(*ms[i]);
                *ms[i] = NULL;
        }
        c->rope_rows = c->token_rows = c->logits_rows = 0;
        c->aq_rows = c->ad_rows = c->as_rows = c->af_rows = 0;
        c->act_k = 0;
        c->m_blocks = 0;
        /* the host rope table's rows are as wide as this model's rotary dimension */
        free(c->rope_host);
        free(c->rope_pos);
        c->rope_host = NULL;
        c->rope_pos = NULL;
        c->rope_host_cap = 0;
        c->rope_n = 0;
        /* the host table's rows are as wide as the model's rotated pairs: the next model
         * may rotate more */
        free(c->rope_host);
        free(c->rope_pos);
        c->rope_host = NULL;
        c->rope_pos = NULL;
        c->rope_host_cap = 0;
        c->model = NULL;
}

static int ocl_prepare(axp_device *dev, axp_model *m, axp_error *err) {
        ocl_dev *c = dev->priv;
        int r;

        model_release(c);
        if (!m)
                return 0;
        const axp_hparams *hp = &m->hp;
        if (hp->head_dim > MAX_HD)
                return axp_errorf(err, -EOPNOTSUPP,
                                  "OpenCL: heads of %d values; the kernels handle up to %d",
                                  hp->head_dim, MAX_HD);
        c->layers = calloc((size_t) hp->n_layer, sizeof(layer_refs));
        /* per rotated pair: global layers, then sliding-window layers (their own base) */
        const int half = hp->rope_dim / 2;
        c->inv_freq = malloc((size_t) MAX(2 * half, 1) * sizeof(double));
        if (!c->layers || !c->inv_freq) {
                model_release(c);
                return axp_errorf(err, -ENOMEM, "out of memory");
        }
        for (int i = 0; i < 2 * half; i++) {
                double base = i < half ? hp->rope_base : hp->rope_base_swa;
                c->inv_freq[i] = pow(base, -2.0 * (i % half) / hp->rope_dim);
                if (m->rope_divisors)
                        c->inv_freq[i] /= m->rope_divisors[i % half];
        }
        /* AXP_OPENCL_MOE=cpu: the mixture of experts on the CPU, for tests and comparisons */
        char moe_why[192] = "";
        const char *moe_env = getenv("AXP_OPENCL_MOE");
        if (hp->n_expert > 0 && moe_env && strcmp(moe_env, "cpu") == 0)
                snprintf(moe_why, sizeof(moe_why), "AXP_OPENCL_MOE=cpu");
        if ((r = weights_make(c, m, moe_why, sizeof(moe_why), err)) < 0) {
                model_release(c);
                return r;
        }
        if (hp->n_expert > 0 && *moe_why) {
                if ((r = axp_cpu_device_new(0, &c->moe_cpu, err)) < 0 ||
                    (r = axp_device_prepare(c->moe_cpu, m, err)) < 0) {
                        model_release(c);
                        return r;
                }
                fprintf(stderr, "agentxpu: %s: the mixture-of-experts FFN of %s's layers runs on the CPU "
                        "(%s)\n", dev->name, axp_arch_name(hp->arch), moe_why);
        }
        const bool moe = hp->n_expert > 0 && !c->moe_cpu;
        const size_t d = (size_t) hp->n_embd, qd = (size_t) hp->n_head * hp->head_dim,
                     kvd = (size_t) hp->n_head_kv * hp->head_dim,
                     ff = hp->n_expert > 0 ? 0 : (size_t) hp->n_ff, /* a dense FFN's */
                     ne = moe ? (size_t) hp->n_expert : 0, nk = moe ? (size_t) hp->n_expert_used : 0,
                     ffe = moe ? (size_t) hp->n_ff_exp : 0;
        /* the worst case of moe_ffn's block table: every expert's last block partly filled */
        c->m_blocks = moe ? (int) (DIV_ROUND_UP(TILE * nk, TT) + MIN(ne, TILE * nk)) : 0;
        struct {
                cl_mem *m;
                size_t rows, bytes;
        } sc[] = {
                { &c->h, TILE, d * 4 },  { &c->sq, TILE, qd * 4 }, { &c->sk, TILE, kvd * 4 },
                { &c->sv, TILE, kvd * 4 }, { &c->a, TILE, qd * 4 }, { &c->o, TILE, d * 4 },
                { &c->g, TILE, ff * 4 },  { &c->u, TILE, ff * 4 },
                /* a mixture of experts: per token, per slot (token and expert), per block */
                { &c->m_logit, TILE, ne * 4 },  { &c->m_sel, TILE, nk * 4 },
                { &c->m_wt, TILE, nk * 4 },     { &c->m_slot_of, TILE, nk * 4 },
                { &c->m_slot_tok, TILE * nk, 4 }, { &c->m_hx, TILE * nk, d * 4 },
                { &c->m_g, TILE * nk, ffe * 4 }, { &c->m_u, TILE * nk, ffe * 4 },
                { &c->m_cnt, 2, ne * 4 },       { &c->m_blk, (size_t) c->m_blocks, 3 * 4 },
        };
        for (size_t i = 0; i < ELEMENTSOF(sc); i++) {
                size_t cap = 0;
                if (sc[i].rows * sc[i].bytes == 0)
                        continue;
                if ((r = grow(c, sc[i].m, &cap, sc[i].rows, sc[i].bytes, err)) < 0) {
                        model_release(c);
                        return r;
                }
        }
        /* the longest input of a product; the activation planes grow on first use */
        c->act_k = (int) MAX(MAX(d, ffe), MAX(qd, ff));
        c->model = m;
        return 0;
}

/* Build the program ------------------------------------------------------------------------------ */

static void release_kernels(ocl_dev *c) {
        cl_kernel *ks[] = { &c->k_rmsnorm,    &c->k_residual_rmsnorm, &c->k_residual,
                            &c->k_swiglu,     &c->k_k1_post,          &c->k_attention,
                            &c->k_geglu,      &c->k_scale_rows,       &c->k_moe_route,
                            &c->k_moe_plan,   &c->k_moe_gather,       &c->k_moe_combine };
        for (size_t i = 0; i < ELEMENTSOF(ks); i++) {
                if (*ks[i])
                        clReleaseKernel(*ks[i]);
                *ks[i] = NULL;
        }
        for (size_t i = 0; i < ACT__MAX; i++) {
                if (c->k_act[i])
                        clReleaseKernel(c->k_act[i]);
                c->k_act[i] = NULL;
        }
        for (size_t i = 0; i < N_WTYPES; i++) {
                if (c->k_matmul[i])
                        clReleaseKernel(c->k_matmul[i]);
                if (c->k_matmul_id[i])
                        clReleaseKernel(c->k_matmul_id[i]);
                if (c->k_embed[i])
                        clReleaseKernel(c->k_embed[i]);
                c->k_matmul[i] = c->k_matmul_id[i] = c->k_embed[i] = NULL;
        }
        if (c->prog)
                clReleaseProgram(c->prog);
        c->prog = NULL;
}

static int build(ocl_dev *c, int wg, axp_error *err) {
        const char *src = axp_opencl_source;
        char opts[192];
        cl_int e;

        release_kernels(c);
        /* division and square root as the CPU's (RMSNorm, attention) where the device offers
         * it; the activation quantizers round their divisions themselves either way */
        cl_device_fp_config fp = 0;
        clGetDeviceInfo(c->dev, CL_DEVICE_SINGLE_FP_CONFIG, sizeof(fp), &fp, NULL);
        /* for tests: AXP_OPENCL_NO_FP64, the kernels of devices without doubles;
         * AXP_OPENCL_DIV_ERROR, the quantizers' divisions 2 ulp off before they correct them */
        snprintf(opts, sizeof(opts), "-cl-std=CL1.2 -DWG=%d -DMAX_HD=%d -DTT=%d%s%s%s", wg,
                 MAX_HD, TT, getenv("AXP_OPENCL_NO_FP64") ? " -DAXP_NO_FP64" : "",
                 getenv("AXP_OPENCL_DIV_ERROR") ? " -DAXP_DIV_ERROR" : "",
                 fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT
                         ? " -cl-fp32-correctly-rounded-divide-sqrt"
                         : "");
        c->prog = clCreateProgramWithSource(c->ctx, 1, &src, NULL, &e);
        if (!c->prog)
                return cl_fail(err, e, "creating the kernel program");
        e = clBuildProgram(c->prog, 1, &c->dev, opts, NULL, NULL);
        if (e != CL_SUCCESS) {
                char log[2048] = "";
                clGetProgramBuildInfo(c->prog, c->dev, CL_PROGRAM_BUILD_LOG, sizeof(log) - 1, log,
                                      NULL);
                for (char *p = log; *p; p++) /* one line for the user */
                        if (*p == '\n')
                                *p = ' ';
                return axp_errorf(err, -EIO, "OpenCL: building the kernels for %s failed: %.240s",
                                  c->info.name, log);
        }
        struct {
                cl_kernel *k;
                const char *name;
        } ks[] = { { &c->k_rmsnorm, "rmsnorm" },   { &c->k_residual_rmsnorm, "residual_rmsnorm" },
                   { &c->k_residual, "residual" }, { &c->k_swiglu, "swiglu" },
                   { &c->k_k1_post, "k1_post" },   { &c->k_attention, "attention" },
                   { &c->k_geglu, "geglu" },       { &c->k_scale_rows, "scale_rows" },
                   { &c->k_act[ACT_F16], "act_f16" }, { &c->k_act[ACT_BF16], "act_bf16" },
                   { &c->k_act[ACT_Q8_0], "act_q8_0" },
                   { &c->k_act[ACT_Q8_K], "act_q8_k" }, { &c->k_moe_route, "moe_route" },
                   { &c->k_moe_plan, "moe_plan" },     { &c->k_moe_gather, "moe_gather" },
                   { &c->k_moe_combine, "moe_combine" } };
        for (size_t i = 0; i < ELEMENTSOF(ks); i++)
                if (!(*ks[i].k = clCreateKernel(c->prog, ks[i].name, &e)))
                        return cl_fail(err, e, ks[i].name);
        for (size_t i = 0; i < N_WTYPES; i++) {
                char name[32];
                snprintf(name, sizeof(name), "matmul_%s", wtypes[i].suffix);
                if (!(c->k_matmul[i] = clCreateKernel(c->prog, name, &e)))
                        return cl_fail(err, e, name);
                snprintf(name, sizeof(name), "matmul_id_%s", wtypes[i].suffix);
                if (!(c->k_matmul_id[i] = clCreateKernel(c->prog, name, &e)))
                        return cl_fail(err, e, name);
                snprintf(name, sizeof(name), "embed_%s", wtypes[i].suffix);
                if (!(c->k_embed[i] = clCreateKernel(c->prog, name, &e)))
                        return cl_fail(err, e, name);
        }
        c->wg = wg;
        c->kl_fixed = c->info.kind == AXP_DEV_CPU ? 1 : GPU_ITEMS_PER_ROW; /* items_per_row */
        const char *kl = getenv("AXP_OPENCL_KL");
        if (kl && atoi(kl) > 0)
                c->kl_fixed = atoi(kl);
        return 0;
}

/* Largest work-group every reducing kernel accepts on this device. */
static size_t kernels_max_wg(ocl_dev *c) {
        cl_kernel ks[] = { c->k_rmsnorm, c->k_residual_rmsnorm, c->k_k1_post, c->k_attention,
                           c->k_matmul[0] };
        size_t best = SIZE_MAX;
        for (size_t i = 0; i < ELEMENTSOF(ks); i++) {
                size_t w = 0;
                if (clGetKernelWorkGroupInfo(ks[i], c->dev, CL_KERNEL_WORK_GROUP_SIZE, sizeof(w),
                                             &w, NULL) == CL_SUCCESS)
                        best = MIN(best, w);
        }
        for (size_t i = 0; i < N_WTYPES; i++) {
                size_t w = 0;
                if (clGetKernelWorkGroupInfo(c->k_matmul[i], c->dev, CL_KERNEL_WORK_GROUP_SIZE,
                                             sizeof(w), &w, NULL) == CL_SUCCESS)
                        best = MIN(best, w);
                if (clGetKernelWorkGroupInfo(c->k_matmul_id[i], c->dev, CL_KERNEL_WORK_GROUP_SIZE,
                                             sizeof(w), &w, NULL) == CL_SUCCESS)
                        best = MIN(best, w);
        }
        return best;
}

static void ocl_free(axp_device *dev) {
        ocl_dev *c = dev->priv;
        if (c) {
                if (c->profile)
                        prof_print(c);
                free(c->pev);
                free(c->pev_name);
                model_release(c);
                release_kernels(c);
                if (c->q)
                        clReleaseCommandQueue(c->q);
                if (c->ctx)
                        clReleaseContext(c->ctx);
                free(c->wbufs);
                free(c->dirt);
                free(c->rows);
                free(c->runs);
                free(c->rope_host);
                free(c->rope_pos);
                free(c);
        }
        free(dev);
}

static const axp_device_ops ocl_ops = {
        .backend = "opencl",
        .prepare = ocl_prepare,
        .run = ocl_run,
        .free = ocl_free,
};

typedef struct find_ctx {
        int index;
        cl_platform_id p;
        cl_device_id d;
} find_ctx;

static int find_one(cl_platform_id p, cl_device_id d, int index, void *ud) {
        find_ctx *f = ud;
        if (index != f->index)
                return 0;
        f->p = p;
        f->d = d;
        return 1;
}

int axp_opencl_device_new(int index, axp_device **ret, axp_error *err) {
        find_ctx f = { .index = index };
        if (index < 0 || !for_each_device(find_one, &f))
                return axp_errorf(err, -ENODEV, "no OpenCL device %d (agentxpu devices lists them)",
                                  index);

        _cleanup_(axp_device_freep) axp_device *d = calloc(1, sizeof(*d));
        ocl_dev *c = calloc(1, sizeof(*c));
        if (!d || !c) {
                free(c);
                return axp_errorf(err, -ENOMEM, "out of memory");
        }
        d->ops = &ocl_ops;
        d->priv = c;
        c->dev = f.d;
        describe(f.p, f.d, index, &c->info);
        const char *mem = getenv("AXP_OPENCL_MEM");
        c->copy_mode = mem && strcmp(mem, "copy") == 0;

        cl_int e;
        cl_context_properties props[] = { CL_CONTEXT_PLATFORM, (cl_context_properties) f.p, 0 };
        if (!(c->ctx = clCreateContext(props, 1, &f.d, NULL, NULL, &e)))
                return cl_fail(err, e, "creating a context");
        c->profile = getenv("AXP_OPENCL_PROFILE") && atoi(getenv("AXP_OPENCL_PROFILE")) > 0;
        if (!(c->q = clCreateCommandQueue(c->ctx, f.d,
                                          c->profile ? CL_QUEUE_PROFILING_ENABLE : 0, &e)))
                return cl_fail(err, e, "creating a command queue");

        size_t max_wg = 0;
        clGetDeviceInfo(f.d, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof(max_wg), &max_wg, NULL);
        /* AXP_OPENCL_WG: work-group size to try first (a power of two), for tuning */
        const char *wgs = getenv("AXP_OPENCL_WG");
        int wg = wgs && atoi(wgs) > 0 && atoi(wgs) <= 1024 ? 1 << ilog2(atoi(wgs)) : 64;
        while (wg > 1 && (size_t) wg > max_wg)
                wg /= 2;
        int r;
        for (;;) {
                if ((r = build(c, wg, err)) < 0)
                        return r;
                size_t k = kernels_max_wg(c);
                if ((size_t) wg <= k || wg == 1)
                        break;
                while (wg > 1 && (size_t) wg > k)
                        wg /= 2;
        }

        snprintf(d->name, sizeof(d->name), "%.90s (%.30s)", c->info.name, c->info.platform);
        d->kind = c->info.kind;
        d->mem_bytes = c->info.mem_bytes;
        d->can_run = true;
        *ret = TAKE_PTR(d);
        return 0;
}

/* Tests and benchmarks: one product or one activation conversion, on buffers of the call -- */

static void act_planes_fit(ocl_dev *c, int k) {
        if (k <= c->act_k)
                return;
        cl_mem *ms[] = { &c->aq, &c->ad, &c->as, &c->af };
        for (size_t i = 0; i < ELEMENTSOF(ms); i++) {
                if (*ms[i])
                        clReleaseMemObject(*ms[i]);
                *ms[i] = NULL;
        }
        c->aq_rows = c->ad_rows = c->as_rows = c->af_rows = 0;
        c->act_k = k;
}

static int buf_new(ocl_dev *c, size_t bytes, const void *init, cl_mem *ret, axp_error *err) {
        cl_int e;
        cl_mem m = clCreateBuffer(c->ctx, CL_MEM_READ_WRITE | (init ? CL_MEM_COPY_HOST_PTR : 0),
                                  bytes, (void *) init, &e);
        if (!m)
                return cl_fail(err, e, "allocating a buffer");
        *ret = m;
        return 0;
}

static void buf_freep(cl_mem *m) {
        if (*m)
                clReleaseMemObject(*m);
}

static int read_back(ocl_dev *c, cl_mem m, size_t bytes, void *dst, axp_error *err) {
        cl_int e = clEnqueueReadBuffer(c->q, m, CL_TRUE, 0, bytes, dst, 0, NULL, NULL);
        return e == CL_SUCCESS ? 0 : cl_fail(err, e, "reading results");
}

int axp_opencl_matmul(axp_device *d, const axp_weight *w, const float *x, int n_tok, float *y,
                      int reps, double *ret_seconds, axp_error *err) {
        if (!d || d->ops != &ocl_ops)
                return axp_errorf(err, -EINVAL, "not an OpenCL device");
        ocl_dev *c = d->priv;
        const int ti = type_index(w->type);
        const int unit = ti >= 0 && wtypes[ti].act == ACT_Q8_K ? 256 : 32;
        if (ti < 0 || w->n_in % unit != 0 || n_tok < 1 || w->n_out < 1)
                return axp_errorf(err, -EINVAL, "OpenCL: no product for this weight");
        __attribute__((cleanup(buf_freep))) cl_mem wb = NULL, xb = NULL, yb = NULL;
        int r;
        act_planes_fit(c, (int) w->n_in);
        if ((r = buf_new(c, weight_bytes(w), w->data, &wb, err)) < 0 ||
            (r = buf_new(c, (size_t) n_tok * w->n_in * sizeof(float), x, &xb, err)) < 0 ||
            (r = buf_new(c, (size_t) n_tok * w->n_out * sizeof(float), NULL, &yb, err)) < 0)
                return r;
        const wref ref = { .buf = wb, .type = ti, .w = w };
        /* the first run builds what the runtime builds lazily; the others are timed */
        double t0 = 0;
        for (int i = 0; i < MAX(reps, 1) + (ret_seconds ? 1 : 0); i++) {
                if (i == 1) {
                        cl_int e = clFinish(c->q);
                        if (e != CL_SUCCESS)
                                return cl_fail(err, e, "running a product");
                        t0 = axp_now();
                }
                if ((r = matmul(c, &ref, xb, w->n_in, yb, w->n_out, n_tok, err)) < 0)
                        return r;
        }
        if ((r = read_back(c, yb, (size_t) n_tok * w->n_out * sizeof(float), y, err)) < 0)
                return r;
        if (ret_seconds)
                *ret_seconds = (axp_now() - t0) / MAX(reps, 1);
        return 0;
}

int axp_opencl_act(axp_device *d, uint32_t type, const float *x, int n_tok, int k,
                   int8_t *ret_q, float *ret_d, void *ret_s, float *ret_f, axp_error *err) {
        if (!d || d->ops != &ocl_ops)
                return axp_errorf(err, -EINVAL, "not an OpenCL device");
        ocl_dev *c = d->priv;
        const int ti = type_index(type);
        if (ti < 0 || k < 1 || k % (wtypes[ti].act == ACT_Q8_K ? 256 : 32) != 0 || n_tok < 1)
                return axp_errorf(err, -EINVAL, "OpenCL: no activations for this weight type");
        const int act = wtypes[ti].act;
        __attribute__((cleanup(buf_freep))) cl_mem xb = NULL;
        int r;
        act_planes_fit(c, k);
        if ((r = buf_new(c, (size_t) n_tok * k * sizeof(float), x, &xb, err)) < 0 ||
            (r = act_convert(c, act, xb, 0, k, k, n_tok, err)) < 0)
                return r;
        /* the planes' rows are act_k apart: read them whole, keep k per row */
        const size_t rows = (size_t) n_tok, kk = (size_t) c->act_k;
        switch (act) {
        case ACT_F16:
        case ACT_BF16: {
                _cleanup_free_ float *f = malloc(rows * kk * sizeof(float));
                if (!f)
                        return axp_errorf(err, -ENOMEM, "out of memory");
                if ((r = read_back(c, c->af, rows * kk * sizeof(float), f, err)) < 0)
                        return r;
                for (size_t t = 0; t < rows; t++)
                        memcpy(ret_f + t * k, f + t * kk, (size_t) k * sizeof(float));
                return 0;
        }
        case ACT_Q8_0:
        case ACT_Q8_K: {
                _cleanup_free_ int8_t *q = malloc(rows * kk);
                _cleanup_free_ float *dd = malloc(rows * kk / 32 * sizeof(float));
                /* sums: int16 (Q8_K) or float (Q8_0) per 32 values */
                const size_t se = act == ACT_Q8_K ? sizeof(int16_t) : sizeof(float);
                _cleanup_free_ uint8_t *ss = malloc(rows * kk / 32 * se);
                if (!q || !dd || !ss)
                        return axp_errorf(err, -ENOMEM, "out of memory");
                if ((r = read_back(c, c->aq, rows * kk, q, err)) < 0 ||
                    (r = read_back(c, c->ad, rows * kk / 32 * sizeof(float), dd, err)) < 0 ||
                    (r = read_back(c, c->as, rows * kk / 32 * se, ss, err)) < 0)
                        return r;
                const size_t nb = (size_t) k / (act == ACT_Q8_K ? 256 : 32);
                for (size_t t = 0; t < rows; t++) {
                        memcpy(ret_q + t * k, q + t * kk, (size_t) k);
                        memcpy(ret_d + t * nb, dd + t * (kk / 32), nb * sizeof(float));
                        memcpy((uint8_t *) ret_s + t * (k / 32) * se, ss + t * (kk / 32) * se,
                               (size_t) k / 32 * se);
                }
                return 0;
        }
        default:
                memcpy(ret_f, x, rows * k * sizeof(float));
                return 0;
        }
}

bool axp_opencl_weights_zero_copy(const axp_device *d) {
        return d && d->ops == &ocl_ops && ((const ocl_dev *) d->priv)->zero_copy;
}

bool axp_opencl_moe_on_device(const axp_device *d) {
        if (!d || d->ops != &ocl_ops)
                return false;
        const ocl_dev *c = d->priv;
        return c->model && c->model->hp.n_expert > 0 && !c->moe_cpu;
}
