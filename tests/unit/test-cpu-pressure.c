/* SPDX-License-Identifier: MIT */
/* CPU pressure, the CPU guard's input: the fake source, PSI over a fake /proc (and the root
 * cgroup's cpu.pressure where /proc shows processes only), /proc/stat less our own CPU time
 * where the kernel has no PSI, and the real machine's. Times are virtual: the sampler is
 * told "now". */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "devices/cpu-pressure.h"
#include "test.h"

static char root[256];

static void write_file(const char *rel, const char *fmt, ...) {
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", root, rel);
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

static void psi(const char *rel, unsigned long long some_us) {
        write_file(rel, "some avg10=12.00 avg60=3.00 avg300=1.00 total=%llu\n"
                        "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", some_us);
}

/* all CPUs' ticks: user nice system idle iowait irq softirq steal; ours: utime stime */
static void stat_(unsigned long long user, unsigned long long idle, unsigned long long self) {
        write_file("proc/stat", "cpu  %llu 0 0 %llu 0 0 0 0 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n", user, idle);
        write_file("proc/self/stat",
                   "4242 (a (strange) name) R 1 2 3 0 -1 4194560 100 0 0 0 %llu 0 0 0 20 0 9 0 1 2 3\n",
                   self);
}

static void set_roots(void) {
        char proc[300], sys[300];
        snprintf(proc, sizeof(proc), "%s/proc", root);
        snprintf(sys, sizeof(sys), "%s/sys", root);
        setenv("AXP_TELEMETRY_PROC", proc, 1);
        setenv("AXP_TELEMETRY_SYSFS", sys, 1);
}

static void test_fake(void) {
        axp_cpu_pressure *p;
        axp_error err = { 0 };
        char file[300];
        double f = -1;

        setenv("AXP_CPU_PRESSURE", "0.7", 1);
        CHECK(axp_cpu_pressure_open("auto", &p, &err) == 0);
        CHECK(strcmp(axp_cpu_pressure_source(p), "fake") == 0);
        CHECK(axp_cpu_pressure_sample(p, 1.0, &f) == 0);
        CHECK_NEAR(f, 0.7, 1e-12);
        axp_cpu_pressure_free(p);
        unsetenv("AXP_CPU_PRESSURE");

        snprintf(file, sizeof(file), "%s/pressure-now", root);
        setenv("AXP_CPU_PRESSURE_FILE", file, 1);
        write_file("pressure-now", "0.25\n");
        CHECK(axp_cpu_pressure_open("fake", &p, &err) == 0);
        CHECK(axp_cpu_pressure_sample(p, 1.0, &f) == 0);
        CHECK_NEAR(f, 0.25, 1e-12);
        write_file("pressure-now", "3\n"); /* clamped */
        CHECK(axp_cpu_pressure_sample(p, 2.0, &f) == 0);
        CHECK_NEAR(f, 1.0, 1e-12);
        CHECK_EQ_INT(axp_cpu_pressure_sample(p, 2.0, &f), -EAGAIN);
        axp_cpu_pressure_free(p);
        unsetenv("AXP_CPU_PRESSURE_FILE");

        CHECK_EQ_INT(axp_cpu_pressure_open("fake", &p, &err), -ENODEV);
        CHECK(strstr(err.msg, "AXP_CPU_PRESSURE") != NULL);
        CHECK_EQ_INT(axp_cpu_pressure_open("vibes", &p, &err), -EINVAL);
        CHECK(strstr(err.msg, "psi") != NULL);
}

static void test_psi(void) {
        axp_cpu_pressure *p;
        axp_error err = { 0 };
        double f = -1;

        set_roots();
        psi("proc/pressure/cpu", 1000000);
        CHECK(axp_cpu_pressure_open("auto", &p, &err) == 0);
        CHECK(strcmp(axp_cpu_pressure_source(p), "psi") == 0);
        CHECK_EQ_INT(axp_cpu_pressure_sample(p, 10.0, &f), -EAGAIN); /* starts the interval */
        psi("proc/pressure/cpu", 1000000 + 300000); /* 0.3 s of stall in 0.5 s */
        CHECK(axp_cpu_pressure_sample(p, 10.5, &f) == 0);
        CHECK_NEAR(f, 0.6, 1e-9);
        psi("proc/pressure/cpu", 1300000); /* nothing waited */
        CHECK(axp_cpu_pressure_sample(p, 11.0, &f) == 0);
        CHECK_NEAR(f, 0.0, 1e-12);
        psi("proc/pressure/cpu", 1300000 + 2000000); /* more than the interval: clamped */
        CHECK(axp_cpu_pressure_sample(p, 12.0, &f) == 0);
        CHECK_NEAR(f, 1.0, 1e-12);
        axp_cpu_pressure_free(p);

        /* a sandbox with /proc showing processes only: the root cgroup has the same numbers */
        write_file("proc/pressure/cpu", "");
        psi("sys/fs/cgroup/cpu.pressure", 5000000);
        CHECK(axp_cpu_pressure_open("psi", &p, &err) == 0);
        CHECK(axp_cpu_pressure_sample(p, 1.0, &f) == -EAGAIN);
        psi("sys/fs/cgroup/cpu.pressure", 5000000 + 250000);
        CHECK(axp_cpu_pressure_sample(p, 2.0, &f) == 0);
        CHECK_NEAR(f, 0.25, 1e-9);
        axp_cpu_pressure_free(p);
        unlink(strcat(strcpy((char[400]) { 0 }, root), "/sys/fs/cgroup/cpu.pressure"));
}

static void test_stat(void) {
        axp_cpu_pressure *p;
        axp_error err = { 0 };
        double f = -1;

        set_roots();
        /* no PSI anywhere: auto falls back to /proc/stat */
        write_file("proc/pressure/cpu", "");
        stat_(1000, 5000, 100);
        CHECK(axp_cpu_pressure_open("auto", &p, &err) == 0);
        CHECK(strcmp(axp_cpu_pressure_source(p), "stat") == 0);
        CHECK_EQ_INT(axp_cpu_pressure_sample(p, 1.0, &f), -EAGAIN);
        /* 100 ticks pass on all CPUs: 80 busy, of which 30 ours: the others kept it 50% busy */
        stat_(1080, 5020, 130);
        CHECK(axp_cpu_pressure_sample(p, 2.0, &f) == 0);
        CHECK_NEAR(f, 0.5, 1e-9);
        /* only we were busy: no pressure */
        stat_(1180, 5020, 230);
        CHECK(axp_cpu_pressure_sample(p, 3.0, &f) == 0);
        CHECK_NEAR(f, 0.0, 1e-9);
        /* no tick since: the interval stays open */
        CHECK_EQ_INT(axp_cpu_pressure_sample(p, 4.0, &f), -EAGAIN);
        axp_cpu_pressure_free(p);

        write_file("proc/stat", "garbage\n");
        CHECK_EQ_INT(axp_cpu_pressure_open("stat", &p, &err), -ENODEV);
        CHECK(axp_cpu_pressure_open("auto", &p, &err) == 0);
        CHECK(strcmp(axp_cpu_pressure_source(p), "none") == 0);
        CHECK(axp_cpu_pressure_sample(p, 1.0, &f) == 0);
        CHECK_NEAR(f, 0.0, 1e-12);
        axp_cpu_pressure_free(p);
}

/* The machine's own source reads and gives a fraction. */
static void test_real(void) {
        axp_cpu_pressure *p;
        axp_error err = { 0 };
        double f = -1;
        int r;

        unsetenv("AXP_TELEMETRY_PROC");
        unsetenv("AXP_TELEMETRY_SYSFS");
        CHECK(axp_cpu_pressure_open("auto", &p, &err) == 0);
        printf("  this machine's source: %s\n", axp_cpu_pressure_source(p));
        (void) axp_cpu_pressure_sample(p, 0.0, &f);
        usleep(200000);
        r = axp_cpu_pressure_sample(p, 0.2, &f);
        CHECK(r == 0 || r == -EAGAIN);
        if (r == 0) {
                CHECK(f >= 0 && f <= 1);
                printf("  pressure over 0.2 s: %.2f\n", f);
        }
        axp_cpu_pressure_free(p);
}

int main(void) {
        char dir[] = "/tmp/axp-test-cpu-pressure-XXXXXX";

        if (!mkdtemp(dir))
                TEST_SKIP("cannot make a temporary folder");
        snprintf(root, sizeof(root), "%s", dir);
        unsetenv("AXP_CPU_PRESSURE");
        unsetenv("AXP_CPU_PRESSURE_FILE");
        unsetenv("AXP_CPU_PRESSURE_SOURCE");
        RUN(test_fake);
        RUN(test_psi);
        RUN(test_stat);
        RUN(test_real);
        char cmd[300];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        if (system(cmd) != 0)
                fprintf(stderr, "could not remove %s\n", dir);
        TEST_EXIT();
}
