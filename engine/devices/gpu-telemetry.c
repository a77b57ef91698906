/* SPDX-License-Identifier: MIT */
/* Sources of the render engines' busy fraction due to other processes (gpu-telemetry.h). */
#include "gpu-telemetry.h"
#include "probe-io.h"

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/perf_event.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifdef HAVE_LEVELZERO
#include "levelzero.h"
#endif

/* One DRM client's render counters, keyed by its device and client id. */
typedef struct drm_client {
        char key[96];
        uint64_t ns;                   /* drm-engine-render / -gfx: busy nanoseconds */
        uint64_t cycles, total_cycles; /* xe: drm-cycles-rcs, drm-total-cycles-rcs */
        bool has_ns, has_cycles;
} drm_client;

typedef struct client_set {
        drm_client *c;
        int n, cap;
} client_set;

typedef enum pmu_kind {
        PMU_I915, /* one counter: busy ns */
        PMU_XE,   /* two counters: active ticks, total ticks */
} pmu_kind;

struct axp_gpu_telemetry {
        const char *source;
        char proc[256];
        double last_now;
        axp_fake_fraction fake; /* the tests' stand-in */
        /* sysman */
#ifdef HAVE_LEVELZERO
        axp_ze *ze;
#endif
        int ze_dev;
        uint64_t last_active_us, last_ts_us;
        /* pmu */
        pmu_kind pmu;
        int fd[2];
        uint64_t last_pmu[2];
        /* fdinfo: others, and our own render time for sources that count everyone */
        client_set others, own;
};

static void clients_clear(client_set *s) {
        free(s->c);
        memset(s, 0, sizeof(*s));
}

static drm_client *clients_find(client_set *s, const char *key) {
        for (int i = 0; i < s->n; i++)
                if (strcmp(s->c[i].key, key) == 0)
                        return &s->c[i];
        return NULL;
}

static int clients_add(client_set *s, const drm_client *c) {
        drm_client *e = clients_find(s, c->key);
        if (e) /* the same client through a dup'ed or passed fd */
                return 0;
        if (s->n == s->cap) {
                int cap = s->cap ? s->cap * 2 : 16;
                drm_client *n = realloc(s->c, (size_t) cap * sizeof(*n));
                if (!n)
                        return -ENOMEM;
                s->c = n;
                s->cap = cap;
        }
        s->c[s->n++] = *c;
        return 0;
}

static bool field_u64(const char *line, const char *name, uint64_t *ret) {
        size_t l = strlen(name);
        if (strncmp(line, name, l) != 0 || line[l] != ':')
                return false;
        char *end;
        unsigned long long v = strtoull(line + l + 1, &end, 10);
        if (end == line + l + 1)
                return false;
        *ret = v;
        return true;
}

/* Parse one fdinfo file; false if it is not a DRM client. */
static bool parse_fdinfo(FILE *f, drm_client *ret) {
        char line[256], driver[32] = "", pdev[32] = "";
        uint64_t id = 0, v;
        bool drm = false, has_id = false;

        memset(ret, 0, sizeof(*ret));
        while (fgets(line, sizeof(line), f)) {
                if (sscanf(line, "drm-driver: %31s", driver) == 1)
                        drm = true;
                else if (sscanf(line, "drm-pdev: %31s", pdev) == 1)
                        ;
                else if (field_u64(line, "drm-client-id", &id))
                        has_id = true;
                else if (field_u64(line, "drm-engine-render", &v) ||
                         field_u64(line, "drm-engine-gfx", &v)) {
                        ret->ns += v;
                        ret->has_ns = true;
                } else if (field_u64(line, "drm-cycles-rcs", &v)) {
                        ret->cycles = v;
                        ret->has_cycles = true;
                } else if (field_u64(line, "drm-total-cycles-rcs", &v))
                        ret->total_cycles = v;
        }
        if (!drm || !has_id)
                return false;
        snprintf(ret->key, sizeof(ret->key), "%s/%s/%" PRIu64, driver, pdev, id);
        return true;
}

static void scan_pid(const char *proc, const char *pid, client_set *out) {
        char path[512];
        snprintf(path, sizeof(path), "%s/%s/fdinfo", proc, pid);
        DIR *d = opendir(path); /* fails for processes of other users: they do not count */
        if (!d)
                return;
        struct dirent *de;
        while ((de = readdir(d))) {
                if (de->d_name[0] == '.')
                        continue;
                char p[768];
                snprintf(p, sizeof(p), "%s/%s", path, de->d_name);
                FILE *f = fopen(p, "re");
                if (!f)
                        continue;
                drm_client c;
                if (parse_fdinfo(f, &c))
                        (void) clients_add(out, &c);
                fclose(f);
        }
        closedir(d);
}

/* Every DRM client of other processes (others) or of this one (own). */
static void scan_clients(const char *proc, bool own, client_set *out) {
        char self[32];
        snprintf(self, sizeof(self), "%d", (int) getpid());
        out->n = 0;
        if (own) {
                scan_pid(proc, self, out);
                return;
        }
        DIR *d = opendir(proc);
        if (!d)
                return;
        struct dirent *de;
        while ((de = readdir(d))) {
                if (de->d_name[0] < '0' || de->d_name[0] > '9' || strcmp(de->d_name, self) == 0)
                        continue;
                scan_pid(proc, de->d_name, out);
        }
        closedir(d);
}

/* Busy fraction of the clients in cur since prev over wall_ns, and prev := cur. Clients new
 * since the last scan only set their baseline. */
static double clients_delta(client_set *prev, client_set *cur, double wall_ns) {
        double f = 0;
        for (int i = 0; i < cur->n; i++) {
                const drm_client *c = &cur->c[i], *p = clients_find(prev, c->key);
                if (!p)
                        continue;
                if (c->has_ns && c->ns >= p->ns && wall_ns > 0)
                        f += (double) (c->ns - p->ns) / wall_ns;
                if (c->has_cycles && c->total_cycles > p->total_cycles && c->cycles >= p->cycles)
                        f += (double) (c->cycles - p->cycles) /
                             (double) (c->total_cycles - p->total_cycles);
        }
        client_set t = *prev;
        *prev = *cur;
        *cur = t;
        return f;
}

static double clamp01(double v) {
        return v > 0 ? (v < 1 ? v : 1) : 0; /* NaN too goes to 0 */
}

/* Our own render-engine share over wall_ns, to take out of sources that count everyone. */
static double own_fraction(axp_gpu_telemetry *t, double wall_ns) {
        client_set cur = { 0 };
        scan_clients(t->proc, true, &cur);
        double f = clients_delta(&t->own, &cur, wall_ns);
        clients_clear(&cur);
        return f;
}

/* PMU ------------------------------------------------------------------------------------------- */

/* Set `value` into the bits a format file ("config:12-19", "config:0") names. */
static int format_set(const char *pmu_dir, const char *field, uint64_t value, uint64_t *config) {
        char path[512], buf[64];
        unsigned lo, hi;
        snprintf(path, sizeof(path), "%s/format/%s", pmu_dir, field);
        if (axp_read_text(path, buf, sizeof(buf)) < 0)
                return -ENOENT;
        int n = sscanf(buf, "config:%u-%u", &lo, &hi);
        if (n == 1)
                hi = lo;
        else if (n != 2)
                return -EOPNOTSUPP; /* config1/config2 fields are not needed for our events */
        if (hi < lo || hi > 63)
                return -EINVAL;
        unsigned bits = hi - lo + 1;
        uint64_t mask = bits == 64 ? ~0ull : ((1ull << bits) - 1);
        *config = (*config & ~(mask << lo)) | ((value & mask) << lo);
        return 0;
}

int axp_pmu_config(const char *pmu_dir, const char *event, const char *const *fields,
                   const uint64_t *values, int n_fields, uint64_t *ret_config) {
        char path[512], buf[256];
        uint64_t config = 0;
        int r;

        snprintf(path, sizeof(path), "%s/events/%s", pmu_dir, event);
        if ((r = axp_read_text(path, buf, sizeof(buf))) < 0)
                return r;
        /* "event=0x02", "config=0x0", or terms joined by commas */
        for (char *save = NULL, *term = strtok_r(buf, ",", &save); term;
             term = strtok_r(NULL, ",", &save)) {
                char *eq = strchr(term, '=');
                if (!eq)
                        continue;
                *eq = 0;
                char *end;
                uint64_t v = strtoull(eq + 1, &end, 0);
                if (end == eq + 1)
                        continue; /* "?": a parameter the caller supplies */
                if (strcmp(term, "config") == 0)
                        config = v;
                else if ((r = format_set(pmu_dir, term, v, &config)) < 0)
                        return r;
        }
        for (int i = 0; i < n_fields; i++) {
                r = format_set(pmu_dir, fields[i], values[i], &config);
                if (r < 0 && r != -ENOENT)
                        return r;
        }
        *ret_config = config;
        return 0;
}

static int perf_open(const char *pmu_dir, uint64_t config) {
        char path[512], buf[64];
        snprintf(path, sizeof(path), "%s/type", pmu_dir);
        if (axp_read_text(path, buf, sizeof(buf)) < 0)
                return -ENOENT;
        int type = atoi(buf), cpu = 0;
        snprintf(path, sizeof(path), "%s/cpumask", pmu_dir);
        if (axp_read_text(path, buf, sizeof(buf)) == 0)
                cpu = atoi(buf);
        struct perf_event_attr a = { .type = (uint32_t) type, .size = sizeof(a), .config = config };
        /* uncore-style PMU: system wide on one CPU */
        long fd = syscall(SYS_perf_event_open, &a, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC);
        return fd < 0 ? -errno : (int) fd;
}

static int pmu_read(int fd, uint64_t *ret) {
        uint64_t v;
        if (read(fd, &v, sizeof(v)) != (ssize_t) sizeof(v))
                return -EIO;
        *ret = v;
        return 0;
}

static int pmu_open(axp_gpu_telemetry *t) {
        const char *sys = getenv("AXP_TELEMETRY_SYSFS");
        char dir[512];
        snprintf(dir, sizeof(dir), "%s/bus/event_source/devices", sys && *sys ? sys : "/sys");
        DIR *d = opendir(dir);
        if (!d)
                return -ENODEV;
        int r = -ENODEV;
        struct dirent *de;
        while (r < 0 && (de = readdir(d))) {
                char pmu[1024];
                bool i915 = strncmp(de->d_name, "i915", 4) == 0,
                     xe = strncmp(de->d_name, "xe_", 3) == 0;
                if (!i915 && !xe)
                        continue;
                snprintf(pmu, sizeof(pmu), "%s/%s", dir, de->d_name);
                uint64_t cfg[2];
                if (i915) {
                        if (axp_pmu_config(pmu, "rcs0-busy", NULL, NULL, 0, &cfg[0]) < 0)
                                continue;
                        if ((t->fd[0] = perf_open(pmu, cfg[0])) < 0) {
                                r = t->fd[0];
                                continue;
                        }
                        t->pmu = PMU_I915;
                } else {
                        /* render engine 0 of GT 0 */
                        static const char *const fields[] = { "gt", "engine_class",
                                                              "engine_instance" };
                        static const uint64_t values[] = { 0, 0, 0 };
                        if (axp_pmu_config(pmu, "engine-active-ticks", fields, values, 3, &cfg[0]) <
                                    0 ||
                            axp_pmu_config(pmu, "engine-total-ticks", fields, values, 3, &cfg[1]) <
                                    0)
                                continue;
                        if ((t->fd[0] = perf_open(pmu, cfg[0])) < 0) {
                                r = t->fd[0];
                                continue;
                        }
                        if ((t->fd[1] = perf_open(pmu, cfg[1])) < 0) {
                                r = t->fd[1];
                                close(t->fd[0]);
                                t->fd[0] = -1;
                                continue;
                        }
                        t->pmu = PMU_XE;
                }
                r = 0;
        }
        closedir(d);
        if (r < 0)
                return r;
        for (int i = 0; i < 2; i++)
                if (t->fd[i] >= 0 && pmu_read(t->fd[i], &t->last_pmu[i]) < 0)
                        return -EIO;
        return 0;
}

/* Opening --------------------------------------------------------------------------------------- */

static int sysman_open(axp_gpu_telemetry *t) {
#ifdef HAVE_LEVELZERO
        int r = axp_ze_open(&t->ze, NULL);
        if (r < 0)
                return r;
        /* the integrated GPU is the desktop's; else the first GPU Sysman can read */
        t->ze_dev = -1;
        for (int pass = 0; pass < 2 && t->ze_dev < 0; pass++)
                for (int i = 0; i < axp_ze_n_devices(t->ze) && t->ze_dev < 0; i++) {
                        const axp_ze_device *d = axp_ze_device_get(t->ze, i);
                        if (d->sysman && (pass == 1 || d->kind == AXP_DEV_IGPU))
                                t->ze_dev = i;
                }
        if (t->ze_dev < 0)
                return -ENODEV;
        return axp_ze_render_activity(t->ze, t->ze_dev, &t->last_active_us, &t->last_ts_us);
#else
        return -ENODEV;
#endif
}

static bool have_drm(void) {
        DIR *d = opendir("/dev/dri");
        if (!d)
                return false;
        bool found = false;
        struct dirent *de;
        while (!found && (de = readdir(d)))
                found = strncmp(de->d_name, "renderD", 7) == 0 ||
                        strncmp(de->d_name, "card", 4) == 0;
        closedir(d);
        return found;
}

static void telemetry_reset(axp_gpu_telemetry *t) {
#ifdef HAVE_LEVELZERO
        axp_ze_close(t->ze);
        t->ze = NULL;
#endif
        for (int i = 0; i < 2; i++) {
                if (t->fd[i] >= 0)
                        close(t->fd[i]);
                t->fd[i] = -1;
        }
        axp_fake_fraction_clear(&t->fake);
}

int axp_gpu_telemetry_open(const char *source, axp_gpu_telemetry **ret, axp_error *err) {
        _cleanup_(axp_gpu_telemetry_freep) axp_gpu_telemetry *t = calloc(1, sizeof(*t));
        if (!t)
                return axp_errorf(err, -ENOMEM, "out of memory");
        t->fd[0] = t->fd[1] = -1;
        t->last_now = -1;
        const char *proc = getenv("AXP_TELEMETRY_PROC");
        snprintf(t->proc, sizeof(t->proc), "%s", proc && *proc ? proc : "/proc");
        if (!source)
                source = "auto";
        bool any = strcmp(source, "auto") == 0;
        int r;

        if (any || strcmp(source, "fake") == 0) {
                if ((r = axp_fake_fraction_open(&t->fake, "AXP_GPU_BUSY", "AXP_GPU_BUSY_FILE")) == 0)
                        t->source = "fake";
                else if (r != -ENODEV || !any)
                        return axp_errorf(err, r == -ENODEV ? -ENODEV : r,
                                          "GPU telemetry 'fake' wants AXP_GPU_BUSY=<fraction> or "
                                          "AXP_GPU_BUSY_FILE=<file>");
        }
        if (!t->source && (any || strcmp(source, "sysman") == 0)) {
                if (sysman_open(t) == 0)
                        t->source = "sysman";
                else if (!any)
                        return axp_errorf(err, -ENODEV,
                                          "GPU telemetry 'sysman': no GPU with Level Zero Sysman "
                                          "engine activity");
                else
                        telemetry_reset(t);
        }
        if (!t->source && (any || strcmp(source, "pmu") == 0)) {
                if ((r = pmu_open(t)) == 0)
                        t->source = "pmu";
                else if (!any) {
                        bool denied = r == -EACCES || r == -EPERM;
                        return axp_errorf(err, -ENODEV, "GPU telemetry 'pmu': no usable i915/xe PMU (%s)",
                                          denied ? "not permitted: perf_event_paranoid or CAP_PERFMON"
                                                 : "none found");
                }
                else
                        telemetry_reset(t);
        }
        if (!t->source && (strcmp(source, "fdinfo") == 0 || (any && have_drm())))
                t->source = "fdinfo";
        if (!t->source && (any || strcmp(source, "none") == 0))
                t->source = "none";
        if (!t->source)
                return axp_errorf(err, -EINVAL, "unknown GPU telemetry source '%s' "
                                                "(auto, fake, sysman, fdinfo, pmu or none)",
                                  source);
        /* our own render time is taken out of the sources that count every process */
        if (strcmp(t->source, "sysman") == 0 || strcmp(t->source, "pmu") == 0)
                scan_clients(t->proc, true, &t->own);
        *ret = TAKE_PTR(t);
        return 0;
}

void axp_gpu_telemetry_free(axp_gpu_telemetry *t) {
        if (!t)
                return;
        telemetry_reset(t);
        clients_clear(&t->others);
        clients_clear(&t->own);
        free(t);
}

const char *axp_gpu_telemetry_source(const axp_gpu_telemetry *t) {
        return t->source;
}

int axp_gpu_telemetry_sample(axp_gpu_telemetry *t, double now, double *ret_fraction) {
        double f = 0;
        int r;
        const bool first = t->last_now < 0;
        const double wall_ns = first ? 0 : (now - t->last_now) * 1e9;

        if (!first && wall_ns <= 0)
                return -EAGAIN;
        if (strcmp(t->source, "fake") == 0) {
                if ((r = axp_fake_fraction_read(&t->fake, &f)) < 0)
                        return r;
        } else if (strcmp(t->source, "fdinfo") == 0) {
                client_set cur = { 0 };
                scan_clients(t->proc, false, &cur);
                f = clients_delta(&t->others, &cur, wall_ns);
                clients_clear(&cur);
        } else if (strcmp(t->source, "pmu") == 0) {
                uint64_t v[2] = { 0, 0 };
                for (int i = 0; i < 2; i++)
                        if (t->fd[i] >= 0 && pmu_read(t->fd[i], &v[i]) < 0)
                                return -EIO;
                if (t->pmu == PMU_I915)
                        f = wall_ns > 0 ? (double) (v[0] - t->last_pmu[0]) / wall_ns : 0;
                else
                        f = v[1] > t->last_pmu[1] ? (double) (v[0] - t->last_pmu[0]) /
                                                            (double) (v[1] - t->last_pmu[1])
                                                  : 0;
                memcpy(t->last_pmu, v, sizeof(v));
                f -= own_fraction(t, wall_ns);
        }
#ifdef HAVE_LEVELZERO
        else if (strcmp(t->source, "sysman") == 0) {
                uint64_t active, ts;
                int r = axp_ze_render_activity(t->ze, t->ze_dev, &active, &ts);
                if (r < 0)
                        return r;
                if (ts <= t->last_ts_us)
                        return -EAGAIN;
                f = (double) (active - t->last_active_us) / (double) (ts - t->last_ts_us);
                /* Sysman counts every process, this one included */
                f -= own_fraction(t, (double) (ts - t->last_ts_us) * 1e3);
                t->last_active_us = active;
                t->last_ts_us = ts;
        }
#endif
        t->last_now = now;
        /* these count against the wall clock: the first sample only starts the interval */
        if (first && (strcmp(t->source, "fdinfo") == 0 || strcmp(t->source, "pmu") == 0))
                return -EAGAIN;
        *ret_fraction = clamp01(f);
        return 0;
}
