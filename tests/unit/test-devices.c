/* SPDX-License-Identifier: MIT */
/* Device specs, role resolution with the fallbacks of DESIGN §4, role binding on this
 * machine, and Level Zero discovery through the real loader (no driver here) and through a
 * fake one that offers an integrated GPU and an NPU. */
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "devices/discovery.h"
#include "devices/levelzero.h"
#include "test.h"

static axp_dev_entry entry(const char *spec, const char *backend, const char *name,
                           axp_dev_kind kind, bool can_run) {
        axp_dev_entry e = { .backend = backend, .kind = kind, .can_run = can_run };
        snprintf(e.spec, sizeof(e.spec), "%s", spec);
        snprintf(e.name, sizeof(e.name), "%s", name);
        return e;
}

static void test_specs(void) {
        const char *good[] = { "cpu", "opencl", "opencl:0", "opencl:12", "npu", "auto" };
        const char *bad[] = {
                "gpu", "opencl:", "opencl:x", "opencl:-1", "opencl:1x", "CPU", "cuda"
        };
        axp_error err = { 0 };
        for (size_t i = 0; i < ELEMENTSOF(good); i++)
                CHECK_MSG(axp_device_spec_check(good[i], &err) == 0, "%s", good[i]);
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                CHECK_MSG(axp_device_spec_check(bad[i], &err) == -EINVAL, "%s", bad[i]);
                CHECK(strstr(err.msg, bad[i]) != NULL);
        }
}

/* A Core Ultra laptop as discovery would list it: CPU, the Arc iGPU through OpenCL, both
 * GPU and NPU through Level Zero (listed only). */
static void test_resolve_laptop(void) {
        axp_dev_entry l[] = {
                entry("cpu", "cpu", "CPU", AXP_DEV_CPU, true),
                entry("opencl:0", "opencl", "Intel(R) Arc(TM) Graphics", AXP_DEV_IGPU, true),
                entry("", "levelzero", "Intel(R) Arc(TM) Graphics", AXP_DEV_IGPU, false),
                entry("", "levelzero", "Intel(R) AI Boost", AXP_DEV_NPU, false),
        };
        char why[200];
        int e;
        axp_error err = { 0 };

        CHECK(axp_roles_resolve(l, 4, AXP_ROLE_ID_STATIC, "auto", &e, why, sizeof(why), &err) == 0);
        CHECK_EQ_INT(e, 0);
        CHECK_MSG(strstr(why, "Intel(R) AI Boost") && strstr(why, "cannot run"), "%s", why);
        CHECK(axp_roles_resolve(l, 4, AXP_ROLE_ID_STATIC, "npu", &e, why, sizeof(why), &err) == 0);
        CHECK_EQ_INT(e, 0);
        CHECK(strstr(why, "AI Boost") != NULL);
        CHECK(axp_roles_resolve(l, 4, AXP_ROLE_ID_DYNAMIC, "auto", &e, why, sizeof(why), &err) ==
              0);
        CHECK_EQ_INT(e, 1);
        CHECK_EQ_INT(why[0], 0);
        CHECK(axp_roles_resolve(l, 4, AXP_ROLE_ID_STATIC, "opencl", &e, why, sizeof(why), &err) ==
              0);
        CHECK_EQ_INT(e, 1);
        CHECK(axp_roles_resolve(l, 4, AXP_ROLE_ID_DYNAMIC, "cpu", &e, why, sizeof(why), &err) == 0);
        CHECK_EQ_INT(e, 0);
        CHECK_EQ_INT(why[0], 0);
        CHECK(axp_roles_resolve(l, 4, AXP_ROLE_ID_DYNAMIC, "opencl:3", &e, why, sizeof(why),
                                &err) == 0);
        CHECK_EQ_INT(e, 0);
        CHECK_MSG(strstr(why, "no OpenCL device 3"), "%s", why);
        CHECK_EQ_INT(
                axp_roles_resolve(l, 4, AXP_ROLE_ID_DYNAMIC, "vulkan", &e, why, sizeof(why), &err),
                -EINVAL);

        /* with an NPU that could run our kernels, the static role would take it */
        l[3].can_run = true;
        snprintf(l[3].spec, sizeof(l[3].spec), "npu:0");
        CHECK(axp_roles_resolve(l, 4, AXP_ROLE_ID_STATIC, "auto", &e, why, sizeof(why), &err) == 0);
        CHECK_EQ_INT(e, 3);
}

/* Preference among OpenCL devices: integrated GPU, then discrete; OpenCL on the CPU is never
 * chosen by auto (the CPU backend is faster), only when asked for. */
static void test_resolve_preference(void) {
        axp_dev_entry l[] = {
                entry("cpu", "cpu", "CPU", AXP_DEV_CPU, true),
                entry("opencl:0", "opencl", "PoCL", AXP_DEV_CPU, true),
                entry("opencl:1", "opencl", "dGPU", AXP_DEV_DGPU, true),
                entry("opencl:2", "opencl", "iGPU", AXP_DEV_IGPU, true),
        };
        char why[200];
        int e;
        CHECK(axp_roles_resolve(l, 4, AXP_ROLE_ID_DYNAMIC, "auto", &e, why, sizeof(why), NULL) ==
              0);
        CHECK_EQ_INT(e, 3);
        CHECK(axp_roles_resolve(l, 3, AXP_ROLE_ID_DYNAMIC, "auto", &e, why, sizeof(why), NULL) ==
              0);
        CHECK_EQ_INT(e, 2);
        CHECK(axp_roles_resolve(l, 2, AXP_ROLE_ID_DYNAMIC, "auto", &e, why, sizeof(why), NULL) ==
              0);
        CHECK_EQ_INT(e, 0);
        CHECK(strstr(why, "no GPU") != NULL);
        CHECK(axp_roles_resolve(l, 2, AXP_ROLE_ID_DYNAMIC, "opencl", &e, why, sizeof(why), NULL) ==
              0);
        CHECK_EQ_INT(e, 1);
        CHECK(axp_roles_resolve(l, 1, AXP_ROLE_ID_DYNAMIC, "opencl", &e, why, sizeof(why), NULL) ==
              0);
        CHECK_EQ_INT(e, 0);
        CHECK(strstr(why, "no OpenCL device") != NULL);
        CHECK(axp_roles_resolve(l, 4, AXP_ROLE_ID_DYNAMIC, "opencl:0", &e, why, sizeof(why),
                                NULL) == 0);
        CHECK_EQ_INT(e, 1);
}

typedef struct log_buf {
        char text[2048];
        int lines;
} log_buf;

static void log_to(void *ud, const char *line) {
        log_buf *b = ud;
        size_t n = strlen(b->text);
        snprintf(b->text + n, sizeof(b->text) - n, "%s\n", line);
        b->lines++;
}

static bool has_opencl(const axp_discovery *d) {
        for (int i = 0; i < d->n; i++)
                if (strcmp(d->devs[i].backend, "opencl") == 0)
                        return true;
        return false;
}

/* Binding on this machine: one line per role; a device serving both roles is opened once. */
static void test_bind(void) {
        axp_discovery d;
        axp_role_binding b;
        axp_error err = { 0 };
        log_buf lb = { 0 };

        CHECK(axp_devices_discover(&d, &err) == 0);
        CHECK(d.n >= 1 && strcmp(d.devs[0].spec, "cpu") == 0 && d.devs[0].can_run);
        CHECK(axp_roles_bind("cpu", "cpu", 1, log_to, &lb, &b, &err) == 0);
        CHECK_EQ_INT(b.n_devs, 1);
        CHECK_EQ_INT(b.static_dev, b.dynamic_dev);
        CHECK_EQ_INT(lb.lines, 2);
        CHECK_MSG(strstr(lb.text, "static role: CPU") && strstr(lb.text, "dynamic role: CPU"), "%s",
                  lb.text);
        axp_role_binding_clear(&b);

        if (has_opencl(&d)) {
                lb = (log_buf) { 0 };
                CHECK_MSG(axp_roles_bind("cpu", "opencl", 1, log_to, &lb, &b, &err) == 0, "%s",
                          err.msg);
                CHECK_EQ_INT(b.n_devs, 2);
                CHECK(b.static_dev != b.dynamic_dev);
                CHECK(strcmp(axp_device_backend(b.devs[b.static_dev]), "cpu") == 0);
                CHECK(strcmp(axp_device_backend(b.devs[b.dynamic_dev]), "opencl") == 0);
                CHECK_MSG(strstr(lb.text, "[opencl:") != NULL, "%s", lb.text);
                axp_role_binding_clear(&b);
        } else
                printf("  no OpenCL device: the cpu+opencl binding is not checked\n");

        /* a device that is not there: the role falls back with a line saying why */
        lb = (log_buf) { 0 };
        CHECK(axp_roles_bind("npu", "opencl:99", 1, log_to, &lb, &b, &err) == 0);
        CHECK_EQ_INT(b.n_devs, 1);
        CHECK(strcmp(axp_device_backend(b.devs[0]), "cpu") == 0);
        CHECK_MSG(strstr(lb.text, "fallback for 'npu'") && strstr(lb.text, "no OpenCL device 99"),
                  "%s", lb.text);
        axp_role_binding_clear(&b);
        CHECK_EQ_INT(axp_roles_bind("cpu", "gpu", 1, log_to, &lb, &b, &err), -EINVAL);

        /* the command line's --device refuses what is not there instead of falling back */
        axp_device *dev = NULL;
        CHECK_EQ_INT(axp_device_open("opencl:99", 1, &dev, &err), -ENODEV);
        CHECK(strstr(err.msg, "opencl:99") != NULL);
        CHECK(axp_device_open("cpu", 1, &dev, &err) == 0);
        axp_device_free(dev);
        axp_discovery_clear(&d);
}

static const axp_dev_entry *find_entry(const axp_discovery *d, const char *backend,
                                       axp_dev_kind kind) {
        for (int i = 0; i < d->n; i++)
                if (strcmp(d->devs[i].backend, backend) == 0 && d->devs[i].kind == kind)
                        return &d->devs[i];
        return NULL;
}

/* The real loader on a machine without a Level Zero driver: a clean empty result. */
static void test_levelzero_no_driver(void) {
        const char *fake = getenv("AXP_ZE_LOADER");
        char *saved = fake ? strdup(fake) : NULL;
        unsetenv("AXP_ZE_LOADER");
        axp_ze *z = NULL;
        axp_error err = { 0 };
        int r = axp_ze_open(&z, &err);
        if (r == -ENOENT)
                printf("  no Level Zero loader here: %s\n", err.msg);
        else {
                CHECK_EQ_INT(r, 0);
                printf("  the real loader finds %d device(s)\n", axp_ze_n_devices(z));
                if (axp_ze_n_devices(z) == 0) {
                        axp_discovery d;
                        CHECK(axp_devices_discover(&d, &err) == 0);
                        CHECK_MSG(strstr(d.levelzero, "no Level Zero devices") != NULL, "%s",
                                  d.levelzero);
                        CHECK(!find_entry(&d, "levelzero", AXP_DEV_NPU));
                        axp_discovery_clear(&d);
                }
        }
        axp_ze_close(z);
        if (saved)
                setenv("AXP_ZE_LOADER", saved, 1);
        free(saved);
}

/* The fake driver: an NPU is listed as unable to run our kernels, the static role falls back
 * to the CPU naming it, and the GPU's Sysman render activity reads as configured. */
static void test_levelzero_fake(void) {
        if (!getenv("AXP_ZE_LOADER")) {
                printf("  AXP_ZE_LOADER is not set: skipped\n");
                return;
        }
        axp_discovery d;
        axp_error err = { 0 };
        setenv("AXP_FAKE_ZE_DEVICES", "all", 1);
        CHECK_MSG(axp_devices_discover(&d, &err) == 0, "%s", err.msg);
        CHECK_MSG(strcmp(d.levelzero, "2 devices") == 0, "%s", d.levelzero);
        const axp_dev_entry *npu = find_entry(&d, "levelzero", AXP_DEV_NPU);
        const axp_dev_entry *gpu = find_entry(&d, "levelzero", AXP_DEV_IGPU);
        CHECK(npu && !npu->can_run && strcmp(npu->name, "Intel(R) AI Boost") == 0);
        CHECK(npu && strstr(npu->note, "static role uses the CPU"));
        CHECK(gpu && !gpu->can_run && gpu->mem_bytes == 15ull << 30);
        CHECK(gpu && strstr(gpu->note, "Sysman render activity readable"));
        axp_discovery_clear(&d);

        axp_role_binding b;
        log_buf lb = { 0 };
        CHECK(axp_roles_bind("auto", "cpu", 1, log_to, &lb, &b, &err) == 0);
        CHECK_EQ_INT(b.n_devs, 1);
        CHECK_MSG(strstr(lb.text, "static role: CPU") &&
                          strstr(lb.text, "the NPU Intel(R) AI Boost (levelzero) "
                                          "cannot run agentxpu's kernels"),
                  "%s", lb.text);
        axp_role_binding_clear(&b);
        axp_device *dev = NULL;
        CHECK_EQ_INT(axp_device_open("npu", 1, &dev, &err), -ENODEV);
        CHECK_MSG(strstr(err.msg, "AI Boost") != NULL, "%s", err.msg);

        axp_ze *z;
        uint64_t a0, t0, a1, t1;
        setenv("AXP_FAKE_ZE_BUSY", "0.4", 1);
        CHECK(axp_ze_open(&z, &err) == 0);
        CHECK_EQ_INT(axp_ze_n_devices(z), 2);
        const axp_ze_device *g = axp_ze_device_get(z, 0);
        CHECK(g->kind == AXP_DEV_IGPU && g->sysman && g->vendor_id == 0x8086);
        CHECK(!axp_ze_device_get(z, 1)->sysman);
        CHECK_EQ_INT(axp_ze_render_activity(z, 1, &a0, &t0), -EOPNOTSUPP);
        CHECK(axp_ze_render_activity(z, 0, &a0, &t0) == 0);
        CHECK(axp_ze_render_activity(z, 0, &a1, &t1) == 0);
        CHECK_NEAR((double) (a1 - a0) / (double) (t1 - t0), 0.4, 1e-6);
        axp_ze_close(z);
        unsetenv("AXP_FAKE_ZE_BUSY");

        /* no driver behind the loader */
        setenv("AXP_FAKE_ZE_DEVICES", "none", 1);
        CHECK(axp_devices_discover(&d, &err) == 0);
        CHECK_MSG(strstr(d.levelzero, "no Level Zero devices") != NULL, "%s", d.levelzero);
        CHECK(!find_entry(&d, "levelzero", AXP_DEV_NPU));
        axp_discovery_clear(&d);
        unsetenv("AXP_FAKE_ZE_DEVICES");
}

/* `agentxpu devices` lists the NPU as unable to run and says where the static role went. */
static void test_cli(void) {
        const char *cli = getenv("AXP_CLI");
        if (!cli || !getenv("AXP_ZE_LOADER")) {
                printf("  AXP_CLI or AXP_ZE_LOADER is not set: skipped\n");
                return;
        }
        char cmd[1024], out[8192];
        snprintf(cmd, sizeof(cmd), "'%s' devices --json --static npu --dynamic cpu", cli);
        FILE *p = popen(cmd, "r");
        CHECK(p != NULL);
        if (!p)
                return;
        size_t n = fread(out, 1, sizeof(out) - 1, p);
        out[n] = 0;
        CHECK_EQ_INT(pclose(p), 0);
        CHECK_MSG(strstr(out, "\"name\": \"Intel(R) AI Boost\"") &&
                          strstr(out, "\"kind\": \"npu\""),
                  "%s", out);
        CHECK(strstr(out, "\"can_run\": false") != NULL);
        CHECK_MSG(strstr(out, "\"static\": {\"asked\": \"npu\", \"device\": \"cpu\", \"fallback\": "
                              "\"the NPU"),
                  "%s", out);
        CHECK(strstr(out, "\"telemetry\": {\"source\": \"sysman\"") != NULL);

        /* with a model: every device that runs kernels is calibrated, the others are not */
        char dir[] = "/tmp/axp-test-devices-XXXXXX";
        CHECK(mkdtemp(dir) != NULL);
        snprintf(cmd, sizeof(cmd),
                 "'%s' mkmodel --layers 1 -o '%s/m.gguf' >/dev/null && '%s' devices --json -m "
                 "'%s/m.gguf' --calib-cache '%s/calib'",
                 cli, dir, cli, dir, dir);
        p = popen(cmd, "r");
        CHECK(p != NULL);
        n = p ? fread(out, 1, sizeof(out) - 1, p) : 0;
        out[n] = 0;
        CHECK(p && pclose(p) == 0);
        const char *cpu = strstr(out, "\"spec\": \"cpu\""), *npu = strstr(out, "Intel(R) AI Boost");
        CHECK_MSG(cpu && strstr(cpu, "\"calibration\": {\"P_pk\": "), "%s", out);
        CHECK(npu && strstr(npu, "\"calibration\": null"));
        snprintf(cmd, sizeof(cmd), "grep -c . '%s/calib' >/dev/null && rm -rf '%s'", dir, dir);
        CHECK_EQ_INT(system(cmd), 0);

        snprintf(cmd, sizeof(cmd), "'%s' devices --static gpu >/dev/null 2>&1", cli);
        CHECK_EQ_INT(WEXITSTATUS(system(cmd)), 2);
}

int main(void) {
        RUN(test_specs);
        RUN(test_resolve_laptop);
        RUN(test_resolve_preference);
        RUN(test_bind);
        RUN(test_levelzero_no_driver);
        RUN(test_levelzero_fake);
        RUN(test_cli);
        TEST_EXIT();
}
