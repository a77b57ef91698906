/* SPDX-License-Identifier: MIT */
/* GPU telemetry: the fake source, DRM fdinfo over a fake /proc (other processes counted
 * once per client, our own process left out, i915 nanoseconds and xe cycles), Level Zero
 * Sysman through the fake loader with our own render time taken out, and the encoding of
 * i915/xe PMU events from a fake sysfs. Times are virtual: the sampler is told "now". */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "devices/gpu-telemetry.h"
#include "test.h"

static char root[256];

static void write_file(const char *rel, const char *fmt, ...) {
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", root, rel);
        /* make the parent folders */
        for (char *p = path + strlen(root) + 1; (p = strchr(p, '/')); p++) {
                *p = 0;
                mkdir(path, 0755);
                *p = '/';
        }
        FILE *f = fopen(path, "w");
        if (!f)
                return;
        va_list ap;
        va_start(ap, fmt);
        vfprintf(f, fmt, ap);
        va_end(ap);
        fclose(f);
}

static void fdinfo_i915(const char *pid, const char *fd, int client, unsigned long long render_ns) {
        char rel[128];
        snprintf(rel, sizeof(rel), "proc/%s/fdinfo/%s", pid, fd);
        write_file(rel,
                   "pos:\t0\nflags:\t02100002\nmnt_id:\t24\nino:\t1046\ndrm-driver:\ti915\n"
                   "drm-pdev:\t0000:00:02.0\ndrm-client-id:\t%d\ndrm-engine-render:\t%llu ns\n"
                   "drm-engine-copy:\t999999999 ns\ndrm-engine-video:\t0 ns\n",
                   client, render_ns);
}

static void fdinfo_xe(const char *pid, const char *fd, int client, unsigned long long cycles,
                      unsigned long long total) {
        char rel[128];
        snprintf(rel, sizeof(rel), "proc/%s/fdinfo/%s", pid, fd);
        write_file(rel,
                   "pos:\t0\ndrm-driver:\txe\ndrm-pdev:\t0000:00:02.0\ndrm-client-id:\t%d\n"
                   "drm-cycles-rcs:\t%llu\ndrm-total-cycles-rcs:\t%llu\ndrm-cycles-bcs:\t5\n",
                   client, cycles, total);
}

static void test_fake(void) {
        axp_gpu_telemetry *t;
        double f = -1;
        axp_error err = { 0 };

        unsetenv("AXP_GPU_BUSY_FILE");
        setenv("AXP_GPU_BUSY", "0.6", 1);
        CHECK(axp_gpu_telemetry_open("auto", &t, &err) == 0);
        CHECK(strcmp(axp_gpu_telemetry_source(t), "fake") == 0);
        CHECK(axp_gpu_telemetry_sample(t, 1.0, &f) == 0);
        CHECK_NEAR(f, 0.6, 1e-12);
        axp_gpu_telemetry_free(t);
        unsetenv("AXP_GPU_BUSY");

        write_file("busy", "0.25\n");
        char path[512];
        snprintf(path, sizeof(path), "%s/busy", root);
        setenv("AXP_GPU_BUSY_FILE", path, 1);
        CHECK(axp_gpu_telemetry_open("fake", &t, &err) == 0);
        CHECK(axp_gpu_telemetry_sample(t, 1.0, &f) == 0);
        CHECK_NEAR(f, 0.25, 1e-12);
        write_file("busy", "0.9");
        CHECK(axp_gpu_telemetry_sample(t, 2.0, &f) == 0);
        CHECK_NEAR(f, 0.9, 1e-12);
        CHECK_EQ_INT(axp_gpu_telemetry_sample(t, 2.0, &f), -EAGAIN);
        write_file("busy", "7");
        CHECK(axp_gpu_telemetry_sample(t, 3.0, &f) == 0);
        CHECK_NEAR(f, 1.0, 1e-12);
        write_file("busy", "nan");
        CHECK(axp_gpu_telemetry_sample(t, 4.0, &f) == 0);
        CHECK_NEAR(f, 0.0, 0);
        write_file("busy", "lots");
        CHECK_EQ_INT(axp_gpu_telemetry_sample(t, 5.0, &f), -EINVAL);
        axp_gpu_telemetry_free(t);
        unsetenv("AXP_GPU_BUSY_FILE");

        CHECK_EQ_INT(axp_gpu_telemetry_open("fake", &t, &err), -ENODEV);
        CHECK(strstr(err.msg, "AXP_GPU_BUSY") != NULL);
        CHECK_EQ_INT(axp_gpu_telemetry_open("vibes", &t, &err), -EINVAL);
}

static void test_fdinfo(void) {
        char self[32], proc[512];
        snprintf(self, sizeof(self), "%d", (int) getpid());
        snprintf(proc, sizeof(proc), "%s/proc", root);
        /* a compositor (i915, one client through two fds), a game on xe, us, and a process
         * holding an ordinary file */
        fdinfo_i915("100", "5", 7, 1000000000ull);
        fdinfo_i915("100", "6", 7, 1000000000ull);
        fdinfo_xe("200", "3", 9, 500, 10000);
        fdinfo_i915(self, "4", 11, 0);
        write_file("proc/300/fdinfo/0", "pos:\t0\nflags:\t0100002\n");
        setenv("AXP_TELEMETRY_PROC", proc, 1);

        axp_gpu_telemetry *t;
        double f = -1;
        axp_error err = { 0 };
        CHECK(axp_gpu_telemetry_open("fdinfo", &t, &err) == 0);
        CHECK(strcmp(axp_gpu_telemetry_source(t), "fdinfo") == 0);
        CHECK_EQ_INT(axp_gpu_telemetry_sample(t, 10.0, &f), -EAGAIN); /* the baseline */

        /* over 0.5 s: the compositor renders 100 ms, the game 20% of its cycles, we 400 ms */
        fdinfo_i915("100", "5", 7, 1100000000ull);
        fdinfo_i915("100", "6", 7, 1100000000ull);
        fdinfo_xe("200", "3", 9, 500 + 2000, 10000 + 10000);
        fdinfo_i915(self, "4", 11, 400000000ull);
        CHECK(axp_gpu_telemetry_sample(t, 10.5, &f) == 0);
        CHECK_NEAR(f, 0.1 / 0.5 + 0.2, 1e-9);

        /* a new client only sets its baseline; one that left is forgotten */
        fdinfo_i915("400", "3", 12, 123456789ull);
        char gone[512];
        snprintf(gone, sizeof(gone), "%s/proc/200/fdinfo/3", root);
        unlink(gone);
        CHECK(axp_gpu_telemetry_sample(t, 11.5, &f) == 0);
        CHECK_NEAR(f, 0.0, 1e-12);
        fdinfo_i915("400", "3", 12, 123456789ull + 300000000ull);
        CHECK(axp_gpu_telemetry_sample(t, 12.5, &f) == 0);
        CHECK_NEAR(f, 0.3, 1e-9);
        axp_gpu_telemetry_free(t);
}

static void test_sysman(void) {
        if (!getenv("AXP_ZE_LOADER")) {
                printf("  AXP_ZE_LOADER is not set: skipped\n");
                return;
        }
        char self[32];
        snprintf(self, sizeof(self), "%d", (int) getpid());
        fdinfo_i915(self, "4", 11, 0);
        setenv("AXP_FAKE_ZE_BUSY", "0.5", 1);

        axp_gpu_telemetry *t;
        double f = -1;
        axp_error err = { 0 };
        CHECK_MSG(axp_gpu_telemetry_open("auto", &t, &err) == 0, "%s", err.msg);
        CHECK(strcmp(axp_gpu_telemetry_source(t), "sysman") == 0);
        /* the fake device reads 100 ms apart: half of it render work, none of it ours */
        CHECK(axp_gpu_telemetry_sample(t, 1.0, &f) == 0);
        CHECK_NEAR(f, 0.5, 1e-9);
        /* 30 ms of those 100 were our own kernels: only the rest is the desktop's */
        fdinfo_i915(self, "4", 11, 30000000ull);
        CHECK(axp_gpu_telemetry_sample(t, 2.0, &f) == 0);
        CHECK_NEAR(f, 0.2, 1e-9);
        setenv("AXP_FAKE_ZE_BUSY", "0.05", 1);
        fdinfo_i915(self, "4", 11, 30000000ull + 90000000ull);
        CHECK(axp_gpu_telemetry_sample(t, 3.0, &f) == 0);
        CHECK_NEAR(f, 0.0, 1e-12); /* never below zero */
        axp_gpu_telemetry_free(t);
        unsetenv("AXP_FAKE_ZE_BUSY");
}

static void test_pmu_config(void) {
        /* xe: events with a parameterized engine, fields in the format folder */
        write_file("sys/xe/events/engine-active-ticks", "event=0x02\n");
        write_file("sys/xe/events/engine-total-ticks", "event=0x03,gt=?\n");
        write_file("sys/xe/format/event", "config:0-11\n");
        write_file("sys/xe/format/engine_instance", "config:12-19\n");
        write_file("sys/xe/format/engine_class", "config:20-27\n");
        write_file("sys/xe/format/gt", "config:60-63\n");
        /* i915: one event per engine counter */
        write_file("sys/i915/events/rcs0-busy", "config=0x0\n");
        write_file("sys/i915/events/vcs0-busy", "config=0x2000\n");
        write_file("sys/bad/events/x", "event=0x1\n");
        write_file("sys/bad/format/event", "config1:0-7\n");

        char dir[512];
        uint64_t c = 0;
        const char *fields[] = { "gt", "engine_class", "engine_instance", "function" };
        uint64_t vals[] = { 1, 0, 2, 5 };
        snprintf(dir, sizeof(dir), "%s/sys/xe", root);
        CHECK(axp_pmu_config(dir, "engine-active-ticks", fields, vals, 4, &c) == 0);
        CHECK_EQ_INT(c, 0x02 | (2ull << 12) | (1ull << 60));
        CHECK(axp_pmu_config(dir, "engine-total-ticks", fields, vals, 3, &c) == 0);
        CHECK_EQ_INT(c, 0x03 | (2ull << 12) | (1ull << 60));
        CHECK_EQ_INT(axp_pmu_config(dir, "no-such-event", NULL, NULL, 0, &c), -ENOENT);
        snprintf(dir, sizeof(dir), "%s/sys/i915", root);
        CHECK(axp_pmu_config(dir, "vcs0-busy", NULL, NULL, 0, &c) == 0);
        CHECK_EQ_INT(c, 0x2000);
        CHECK(axp_pmu_config(dir, "rcs0-busy", NULL, NULL, 0, &c) == 0);
        CHECK_EQ_INT(c, 0);
        snprintf(dir, sizeof(dir), "%s/sys/bad", root);
        CHECK_EQ_INT(axp_pmu_config(dir, "x", NULL, NULL, 0, &c), -EOPNOTSUPP);
}

/* A named source that this machine lacks is an error that says so; auto settles. */
static void test_unavailable(void) {
        axp_gpu_telemetry *t;
        axp_error err = { 0 };
        char sys[512];
        snprintf(sys, sizeof(sys), "%s/empty-sys", root);
        mkdir(sys, 0755);
        setenv("AXP_TELEMETRY_SYSFS", sys, 1);
        CHECK_EQ_INT(axp_gpu_telemetry_open("pmu", &t, &err), -ENODEV);
        CHECK(strstr(err.msg, "PMU") != NULL);
        unsetenv("AXP_TELEMETRY_SYSFS");
        CHECK(axp_gpu_telemetry_open("none", &t, &err) == 0);
        double f = -1;
        CHECK(axp_gpu_telemetry_sample(t, 1.0, &f) == 0);
        CHECK_NEAR(f, 0, 0);
        axp_gpu_telemetry_free(t);
}

int main(void) {
        snprintf(root, sizeof(root), "/tmp/axp-test-telemetry-XXXXXX");
        if (!mkdtemp(root))
                return 1;
        RUN(test_fake);
        RUN(test_fdinfo);
        RUN(test_sysman);
        RUN(test_pmu_config);
        RUN(test_unavailable);
        char cmd[300];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
        if (system(cmd) != 0)
                return 1;
        TEST_EXIT();
}
