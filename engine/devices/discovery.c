/* SPDX-License-Identifier: MIT */
/* Discovery over every backend, device specs, and role binding with the fallbacks of
 * DESIGN §4: a role whose device cannot run our kernels goes to the CPU, and says so. */
#include "discovery.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/parse.h"
#include "kernels/cpu/kernels.h"
#ifdef HAVE_OPENCL
#include "cpu-device.h"
#include "opencl-device.h"
#endif
#ifdef HAVE_LEVELZERO
#include "levelzero.h"
#endif

static int push(axp_discovery *d, axp_dev_entry **ret) {
        axp_dev_entry *n = realloc(d->devs, (size_t) (d->n + 1) * sizeof(*n));
        if (!n)
                return -ENOMEM;
        d->devs = n;
        *ret = memset(&n[d->n++], 0, sizeof(*n));
        return 0;
}

static int add_cpu(axp_discovery *d) {
        axp_dev_entry *e;
        if (push(d, &e) < 0)
                return -ENOMEM;
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        snprintf(e->spec, sizeof(e->spec), "cpu");
        e->backend = "cpu";
        snprintf(e->name, sizeof(e->name), "CPU (%ld threads, %s)", n > 0 ? n : 1, axp_cpu_isa());
        e->kind = AXP_DEV_CPU;
        e->mem_bytes = axp_physical_memory(); /* the CPU's memory */
        e->can_run = true;
        snprintf(e->note, sizeof(e->note), "every kernel; the static and dynamic roles' fallback");
        return 0;
}

static int add_opencl(axp_discovery *d) {
#ifdef HAVE_OPENCL
        _cleanup_free_ axp_opencl_info *l = NULL;
        int n = 0;
        if (axp_opencl_list(&l, &n, NULL) < 0)
                return -ENOMEM;
        if (n == 0)
                snprintf(d->opencl, sizeof(d->opencl),
                         "no OpenCL device (install an ICD: intel-opencl-icd for Intel GPUs, "
                         "pocl-opencl-icd)");
        else
                snprintf(d->opencl, sizeof(d->opencl), "%d device%s", n, n == 1 ? "" : "s");
        for (int i = 0; i < n; i++) {
                axp_dev_entry *e;
                char m[32];
                if (push(d, &e) < 0)
                        return -ENOMEM;
                snprintf(e->spec, sizeof(e->spec), "opencl:%d", l[i].index);
                e->backend = "opencl";
                snprintf(e->name, sizeof(e->name), "%.90s (%.30s)", l[i].name, l[i].platform);
                e->kind = l[i].kind;
                e->mem_bytes = l[i].mem_bytes;
                e->can_run = true;
                axp_format_bytes(l[i].max_alloc, m, sizeof(m));
                snprintf(e->note, sizeof(e->note),
                         "%.70s, %d compute units, %s, largest buffer %s, fp16 %s", l[i].version,
                         l[i].compute_units,
                         l[i].host_unified ? "shares host memory (weights used in place)"
                                           : "own memory (weights uploaded)",
                         m, l[i].fp16 ? "yes" : "storage only");
        }
#else
        snprintf(d->opencl, sizeof(d->opencl), "not built (no OpenCL headers at build time)");
#endif
        return 0;
}

static int add_levelzero(axp_discovery *d) {
#ifdef HAVE_LEVELZERO
        _cleanup_(axp_ze_closep) axp_ze *z = NULL;
        axp_error err = { 0 };
        int r = axp_ze_open(&z, &err);
        if (r == -ENOMEM)
                return r;
        if (r < 0) {
                snprintf(d->levelzero, sizeof(d->levelzero), "%.159s", err.msg);
                return 0;
        }
        int n = axp_ze_n_devices(z);
        if (n == 0)
                snprintf(d->levelzero, sizeof(d->levelzero),
                         "no Level Zero devices (the loader found no driver)");
        else
                snprintf(d->levelzero, sizeof(d->levelzero), "%d device%s", n, n == 1 ? "" : "s");
        for (int i = 0; i < n; i++) {
                const axp_ze_device *zd = axp_ze_device_get(z, i);
                axp_dev_entry *e;
                if (push(d, &e) < 0)
                        return -ENOMEM;
                e->backend = "levelzero";
                snprintf(e->name, sizeof(e->name), "%s", zd->name);
                e->kind = zd->kind;
                e->mem_bytes = zd->mem_bytes;
                e->can_run = false;
                if (zd->kind == AXP_DEV_NPU)
                        snprintf(e->note, sizeof(e->note),
                                 "NPU: listed only; agentxpu's kernels do not run on it yet, "
                                 "so the static role uses the CPU");
                else
                        snprintf(e->note, sizeof(e->note),
                                 "discovery and telemetry only (kernels run through OpenCL); "
                                 "Sysman render activity %s",
                                 zd->sysman ? "readable" : "not readable");
        }
#else
        snprintf(d->levelzero, sizeof(d->levelzero),
                 "not built (no Level Zero headers at build time)");
#endif
        return 0;
}

int axp_devices_discover(axp_discovery *ret, axp_error *err) {
        axp_discovery d = { 0 };
        if (add_cpu(&d) < 0 || add_opencl(&d) < 0 || add_levelzero(&d) < 0) {
                axp_discovery_clear(&d);
                return axp_errorf(err, -ENOMEM, "out of memory");
        }
        *ret = d;
        return 0;
}

void axp_discovery_clear(axp_discovery *d) {
        free(d->devs);
        memset(d, 0, sizeof(*d));
}

/* Specs ------------------------------------------------------------------------------------------ */

typedef enum spec_kind {
        SPEC_CPU,
        SPEC_OPENCL, /* index -1: the best */
        SPEC_NPU,
        SPEC_AUTO,
} spec_kind;

static int spec_parse(const char *s, spec_kind *ret_kind, int *ret_index, axp_error *err) {
        *ret_index = -1;
        if (!s || strcmp(s, "auto") == 0 || !*s)
                *ret_kind = SPEC_AUTO;
        else if (strcmp(s, "cpu") == 0)
                *ret_kind = SPEC_CPU;
        else if (strcmp(s, "npu") == 0)
                *ret_kind = SPEC_NPU;
        else if (strcmp(s, "opencl") == 0)
                *ret_kind = SPEC_OPENCL;
        else if (strncmp(s, "opencl:", 7) == 0) {
                if (axp_parse_int(s + 7, 0, 1000, ret_index) < 0)
                        return axp_errorf(err, -EINVAL,
                                          "device '%s': want opencl:N with N a device number", s);
                *ret_kind = SPEC_OPENCL;
        } else
                return axp_errorf(err, -EINVAL,
                                  "unknown device '%s' (cpu, opencl, opencl:N, npu or auto)", s);
        return 0;
}

int axp_device_spec_check(const char *spec, axp_error *err) {
        spec_kind k;
        int i;
        return spec_parse(spec, &k, &i, err);
}

bool axp_device_spec_auto(const char *spec) {
        spec_kind k = SPEC_CPU;
        int i;
        return spec_parse(spec, &k, &i, NULL) == 0 && k == SPEC_AUTO;
}

/* The entry of a GPU-like OpenCL device, by preference; -1 if none. */
static int find_opencl(const axp_dev_entry *l, int n, bool gpu_only) {
        static const axp_dev_kind order[] = { AXP_DEV_IGPU, AXP_DEV_DGPU };
        for (size_t k = 0; k < ELEMENTSOF(order); k++)
                for (int i = 0; i < n; i++)
                        if (strcmp(l[i].backend, "opencl") == 0 && l[i].kind == order[k])
                                return i;
        if (!gpu_only)
                for (int i = 0; i < n; i++)
                        if (strcmp(l[i].backend, "opencl") == 0)
                                return i;
        return -1;
}

static void why_npu(const axp_dev_entry *l, int n, char *why, size_t size) {
        for (int i = 0; i < n; i++)
                if (l[i].kind == AXP_DEV_NPU && !l[i].can_run) {
                        snprintf(why, size, "the NPU %s (%s) cannot run agentxpu's kernels",
                                 l[i].name, l[i].backend);
                        return;
                }
        snprintf(why, size, "no NPU found");
}

int axp_roles_resolve(const axp_dev_entry *l, int n, axp_role_id role, const char *spec,
                      int *ret_entry, char *why, size_t why_size, axp_error *err) {
        char dummy[2];
        spec_kind k;
        int idx, r, pick = -1;

        if ((r = spec_parse(spec, &k, &idx, err)) < 0)
                return r;
        if (!why) {
                why = dummy;
                why_size = sizeof(dummy);
        }
        *why = 0;
        if (k == SPEC_AUTO)
                k = role == AXP_ROLE_ID_STATIC ? SPEC_NPU : SPEC_OPENCL;
        switch (k) {
        case SPEC_CPU: pick = 0; break;
        case SPEC_NPU:
                for (int i = 0; i < n && pick < 0; i++)
                        if (l[i].kind == AXP_DEV_NPU && l[i].can_run)
                                pick = i;
                if (pick < 0)
                        why_npu(l, n, why, why_size);
                break;
        case SPEC_OPENCL:
                if (idx >= 0) {
                        char want[24];
                        snprintf(want, sizeof(want), "opencl:%d", idx);
                        for (int i = 0; i < n && pick < 0; i++)
                                if (strcmp(l[i].spec, want) == 0)
                                        pick = i;
                        if (pick < 0)
                                snprintf(why, why_size, "no OpenCL device %d", idx);
                } else {
                        /* auto wants a GPU: OpenCL on the CPU (PoCL) is slower than our CPU backend */
                        bool gpu_only = !spec || strcmp(spec, "opencl") != 0;
                        pick = find_opencl(l, n, gpu_only);
                        if (pick < 0)
                                snprintf(why, why_size,
                                         gpu_only ? "no GPU found" : "no OpenCL device found");
                }
                break;
        default: break;
        }
        *ret_entry = pick >= 0 ? pick : 0;
        return 0;
}

/* Opening devices --------------------------------------------------------------------------------- */

static int open_entry(const axp_dev_entry *e, int n_threads, axp_device **ret, axp_error *err) {
        if (strcmp(e->backend, "cpu") == 0)
                return axp_cpu_device_new(n_threads, ret, err);
#ifdef HAVE_OPENCL
        if (strcmp(e->backend, "opencl") == 0)
                return axp_opencl_device_new(atoi(e->spec + strlen("opencl:")), ret, err);
#endif
        return axp_errorf(err, -ENODEV, "%s cannot run agentxpu's kernels", e->name);
}

int axp_device_open(const char *spec, int n_threads, axp_device **ret, axp_error *err) {
        _cleanup_(axp_discovery_clear) axp_discovery d = { 0 };
        char why[200];
        int pick, r;

        if ((r = axp_device_spec_check(spec, err)) < 0 || (r = axp_devices_discover(&d, err)) < 0 ||
            (r = axp_roles_resolve(d.devs, d.n, AXP_ROLE_ID_DYNAMIC, spec, &pick, why, sizeof(why),
                                   err)) < 0)
                return r;
        /* auto may settle for the CPU; a device asked for by name may not */
        if (*why && spec && strcmp(spec, "auto") != 0)
                return axp_errorf(err, -ENODEV, "device '%s' is not available: %s%s%s", spec, why,
                                  strncmp(spec, "opencl", 6) == 0 && *d.opencl ? "; OpenCL: " : "",
                                  strncmp(spec, "opencl", 6) == 0 ? d.opencl : "");
        return open_entry(&d.devs[pick], n_threads, ret, err);
}

static void log_stderr(void *userdata, const char *line) {
        fprintf(stderr, "agentxpu: %s\n", line);
}

static const char *role_name(axp_role_id r) {
        return r == AXP_ROLE_ID_STATIC ? "static" : "dynamic";
}

int axp_roles_bind(const char *static_spec, const char *dynamic_spec, int n_threads, axp_log_fn log,
                   void *userdata, axp_role_binding *ret, axp_error *err) {
        _cleanup_(axp_discovery_clear) axp_discovery d = { 0 };
        axp_role_binding b = { .static_dev = -1, .dynamic_dev = -1 };
        const char *specs[2] = { static_spec ? static_spec : "auto",
                                 dynamic_spec ? dynamic_spec : "auto" };
        int entry[2], opened[2] = { -1, -1 }, r;
        char why[2][200], line[640];

        if (!log)
                log = log_stderr;
        for (int i = 0; i < 2; i++)
                if ((r = axp_device_spec_check(specs[i], err)) < 0)
                        return r;
        if ((r = axp_devices_discover(&d, err)) < 0)
                return r;
        for (int i = 0; i < 2; i++)
                if ((r = axp_roles_resolve(d.devs, d.n, (axp_role_id) i, specs[i], &entry[i],
                                           why[i], sizeof(why[i]), err)) < 0)
                        return r;

        for (int i = 0; i < 2; i++) {
                int *slot = i == AXP_ROLE_ID_STATIC ? &b.static_dev : &b.dynamic_dev;
                axp_error oerr = { 0 };
                for (int k = 0; k < b.n_devs; k++)
                        if (opened[k] == entry[i])
                                *slot = k;
                if (*slot < 0) {
                        axp_device *dev = NULL;
                        if (open_entry(&d.devs[entry[i]], n_threads, &dev, &oerr) < 0) {
                                /* a device that fails to start leaves its role to the CPU */
                                snprintf(why[i], sizeof(why[i]), "%s failed: %.160s",
                                         d.devs[entry[i]].spec, oerr.msg);
                                entry[i] = 0;
                                for (int k = 0; k < b.n_devs; k++)
                                        if (opened[k] == 0)
                                                *slot = k;
                                if (*slot < 0 &&
                                    (r = axp_cpu_device_new(n_threads, &dev, err)) < 0) {
                                        axp_role_binding_clear(&b);
                                        return r;
                                }
                        }
                        if (*slot < 0) {
                                opened[b.n_devs] = entry[i];
                                b.devs[b.n_devs] = dev;
                                *slot = b.n_devs++;
                        }
                }
                const axp_dev_entry *e = &d.devs[entry[i]];
                if (*why[i])
                        snprintf(line, sizeof(line),
                                 "%s role: %s [%s] (fallback for '%.24s': %.199s)", role_name(i),
                                 e->name, e->spec, specs[i], why[i]);
                else
                        snprintf(line, sizeof(line), "%s role: %s [%s]", role_name(i), e->name,
                                 e->spec);
                log(userdata, line);
        }
        *ret = b;
        return 0;
}

void axp_role_binding_clear(axp_role_binding *b) {
        for (int i = 0; i < b->n_devs; i++)
                axp_device_free(b->devs[i]);
        memset(b, 0, sizeof(*b));
        b->static_dev = b->dynamic_dev = -1;
}
