/* SPDX-License-Identifier: MIT */
/* Sources of the CPU pressure that the CPU guard shrinks proactive work by (cpu-pressure.h). */
#include "cpu-pressure.h"
#include "probe-io.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct axp_cpu_pressure {
        const char *source;
        char proc[256];
        double last_now;
        axp_fake_fraction fake; /* the tests' stand-in */
        /* psi: the file read and its last "some" total (microseconds) */
        char psi_path[1024];
        uint64_t last_some_us;
        /* stat: all CPUs' busy and total ticks, this process's ticks */
        uint64_t last_busy, last_total, last_self;
};

static double clamp01(double f) {
        return f < 0 || f != f ? 0 : f > 1 ? 1 : f;
}

/* "some avg10=0.00 avg60=0.00 avg300=0.00 total=12345" */
static int psi_read(const char *path, uint64_t *ret_us) {
        char buf[512];
        int r = axp_read_text(path, buf, sizeof(buf));
        if (r < 0)
                return r;
        for (char *line = buf; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
                const char *t;
                if (strncmp(line, "some ", 5) != 0)
                        continue;
                t = strstr(line, "total=");
                if (!t || t > line + strcspn(line, "\n"))
                        return -EINVAL;
                char *end;
                errno = 0;
                unsigned long long v = strtoull(t + 6, &end, 10);
                if (end == t + 6 || errno)
                        return -EINVAL;
                *ret_us = v;
                return 0;
        }
        return -EINVAL;
}

/* The first line of /proc/stat: busy and total ticks of all CPUs. */
static int stat_read(const char *proc, uint64_t *ret_busy, uint64_t *ret_total) {
        char path[300], buf[1024];
        unsigned long long v[10] = { 0 };
        int n, r;

        snprintf(path, sizeof(path), "%s/stat", proc);
        if ((r = axp_read_text(path, buf, sizeof(buf))) < 0)
                return r;
        n = sscanf(buf, "cpu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1],
                   &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9]);
        if (n < 4)
                return -EINVAL;
        /* user nice system idle iowait irq softirq steal (guest time is inside user) */
        uint64_t idle = v[3] + v[4];
        uint64_t busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
        *ret_busy = busy;
        *ret_total = busy + idle;
        return 0;
}

/* utime + stime of this process, in the same ticks, from /proc/self/stat. */
static int self_read(const char *proc, uint64_t *ret) {
        char path[300], buf[1024];
        unsigned long long ut, st;
        const char *p;
        int r;

        snprintf(path, sizeof(path), "%s/self/stat", proc);
        if ((r = axp_read_text(path, buf, sizeof(buf))) < 0)
                return r;
        p = strrchr(buf, ')'); /* the command may hold spaces and parentheses */
        if (!p)
                return -EINVAL;
        /* after the command: state ppid pgrp session tty_nr tpgid flags minflt cminflt
         * majflt cmajflt utime stime */
        if (sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
                return -EINVAL;
        *ret = ut + st;
        return 0;
}

/* /proc/pressure/cpu; where /proc shows only processes (a sandbox's ProcSubset=pid) the root
 * cgroup's cpu.pressure holds the same numbers. */
static int psi_open(axp_cpu_pressure *p) {
        const char *sys = getenv("AXP_TELEMETRY_SYSFS");
        char cand[3][320];
        uint64_t v;

        if (!sys || !*sys)
                sys = "/sys";
        snprintf(cand[0], sizeof(cand[0]), "%s/pressure/cpu", p->proc);
        snprintf(cand[1], sizeof(cand[1]), "%s/fs/cgroup/cpu.pressure", sys);
        snprintf(cand[2], sizeof(cand[2]), "%s/fs/cgroup/unified/cpu.pressure", sys);
        for (int i = 0; i < 3; i++)
                if (psi_read(cand[i], &v) == 0) {
                        snprintf(p->psi_path, sizeof(p->psi_path), "%s", cand[i]);
                        p->last_some_us = v;
                        return 0;
                }
        return -ENODEV;
}

static int stat_open(axp_cpu_pressure *p) {
        int r = stat_read(p->proc, &p->last_busy, &p->last_total);
        if (r == 0)
                r = self_read(p->proc, &p->last_self);
        return r < 0 ? -ENODEV : 0;
}

int axp_cpu_pressure_open(const char *source, axp_cpu_pressure **ret, axp_error *err) {
        _cleanup_(axp_cpu_pressure_freep) axp_cpu_pressure *p = calloc(1, sizeof(*p));
        const char *proc = getenv("AXP_TELEMETRY_PROC"), *want = getenv("AXP_CPU_PRESSURE_SOURCE");
        bool any;
        int r;

        if (!p)
                return axp_errorf(err, -ENOMEM, "out of memory");
        p->last_now = -1;
        snprintf(p->proc, sizeof(p->proc), "%s", proc && *proc ? proc : "/proc");
        if (!source)
                source = "auto";
        if (strcmp(source, "auto") == 0 && want && *want)
                source = want;
        any = strcmp(source, "auto") == 0;

        if (any || strcmp(source, "fake") == 0) {
                if ((r = axp_fake_fraction_open(&p->fake, "AXP_CPU_PRESSURE", "AXP_CPU_PRESSURE_FILE")) == 0)
                        p->source = "fake";
                else if (r != -ENODEV || !any)
                        return axp_errorf(err, r == -ENODEV ? -ENODEV : r,
                                          "CPU pressure 'fake' wants AXP_CPU_PRESSURE=<fraction> or "
                                          "AXP_CPU_PRESSURE_FILE=<file>");
        }
        if (!p->source && (any || strcmp(source, "psi") == 0)) {
                if (psi_open(p) == 0)
                        p->source = "psi";
                else if (!any)
                        return axp_errorf(err, -ENODEV,
                                          "CPU pressure 'psi': neither %s/pressure/cpu nor the root "
                                          "cgroup's cpu.pressure can be read",
                                          p->proc);
        }
        if (!p->source && (any || strcmp(source, "stat") == 0)) {
                if (stat_open(p) == 0)
                        p->source = "stat";
                else if (!any)
                        return axp_errorf(err, -ENODEV, "CPU pressure 'stat': cannot read %s/stat",
                                          p->proc);
        }
        if (!p->source && (any || strcmp(source, "none") == 0))
                p->source = "none";
        if (!p->source)
                return axp_errorf(err, -EINVAL,
                                  "unknown CPU pressure source '%s' (auto, fake, psi, stat or none)",
                                  source);
        *ret = TAKE_PTR(p);
        return 0;
}

void axp_cpu_pressure_free(axp_cpu_pressure *p) {
        if (!p)
                return;
        axp_fake_fraction_clear(&p->fake);
        free(p);
}

const char *axp_cpu_pressure_source(const axp_cpu_pressure *p) {
        return p->source;
}

int axp_cpu_pressure_sample(axp_cpu_pressure *p, double now, double *ret_fraction) {
        const bool first = p->last_now < 0;
        const double dt = first ? 0 : now - p->last_now;
        double f = 0;
        int r;

        if (!first && !(dt > 0))
                return -EAGAIN;
        if (strcmp(p->source, "fake") == 0) {
                if ((r = axp_fake_fraction_read(&p->fake, &f)) < 0)
                        return r;
        } else if (strcmp(p->source, "psi") == 0) {
                uint64_t some;
                if ((r = psi_read(p->psi_path, &some)) < 0)
                        return r;
                f = dt > 0 && some >= p->last_some_us ? (double) (some - p->last_some_us) / (dt * 1e6)
                                                      : 0;
                p->last_some_us = some;
        } else if (strcmp(p->source, "stat") == 0) {
                uint64_t busy, total, self;
                if ((r = stat_read(p->proc, &busy, &total)) < 0 ||
                    (r = self_read(p->proc, &self)) < 0)
                        return r;
                if (!first && total <= p->last_total)
                        return -EAGAIN; /* no tick yet: keep the interval open */
                /* busy time of the others: everyone's less ours */
                f = ((double) (busy - p->last_busy) - (double) (self - p->last_self)) /
                    (double) (total - p->last_total);
                p->last_busy = busy;
                p->last_total = total;
                p->last_self = self;
        }
        p->last_now = now;
        /* psi and stat count over an interval: the first sample only starts it */
        if (first && (strcmp(p->source, "psi") == 0 || strcmp(p->source, "stat") == 0))
                return -EAGAIN;
        *ret_fraction = clamp01(f);
        return 0;
}
