/* SPDX-License-Identifier: MIT */
/* agentxpu devices: every device of every backend, what it can do, the roles it would take,
 * and where graphics telemetry comes from. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "devices/calib.h"
#include "cli-model.h"
#include "cli.h"
#include "devices/discovery.h"
#include "devices/gpu-telemetry.h"

static int usage(FILE *f) {
        fprintf(f, "usage: agentxpu devices [--json] [--static DEV] [--dynamic DEV]\n"
                   "                        [-m MODEL [--calib-cache FILE]]\n"
                   "Lists every device of every backend (CPU, OpenCL, Level Zero) with its type,\n"
                   "memory, whether it runs agentxpu's kernels, and the role it takes when the\n"
                   "static and dynamic roles are bound as given (default: auto).\n"
                   "  --static DEV   cpu, opencl, opencl:N, npu or auto\n"
                   "  --dynamic DEV  cpu, opencl, opencl:N, npu or auto\n"
                   "  -m MODEL       calibrate every device that runs kernels with this model's\n"
                   "                 kernels (the roofline figures the scheduler plans with)\n"
                   "  --calib-cache FILE  read and keep calibrations there\n"
                   "  --json         one JSON object\n");
        return f == stderr ? 2 : 0;
}

static const char *mem_str(uint64_t b, char *buf, size_t size) {
        if (b == 0)
                snprintf(buf, size, "-");
        else
                axp_format_bytes(b, buf, size);
        return buf;
}

typedef struct calib_view {
        bool done;
        axp_calib c;
        char err[200];
} calib_view;

/* Calibrate every device that runs kernels, with the model's own kernels. */
static int calibrate(const axp_discovery *d, const char *model, const char *cache,
                     calib_view *out) {
        _cleanup_(axp_model_freep) axp_model *m = NULL;
        axp_error err = { 0 };
        if (axp_model_load(model, &m, &err) < 0)
                return cli_fail("%s", err.msg);
        for (int i = 0; i < d->n; i++) {
                const axp_dev_entry *e = &d->devs[i];
                _cleanup_(axp_device_freep) axp_device *dev = NULL;
                if (!e->can_run || !*e->spec)
                        continue;
                if (axp_device_open(e->spec, 0, &dev, &err) < 0 ||
                    axp_device_prepare(dev, m, &err) < 0 ||
                    axp_calib_get(dev, m, cache, &out[i].c, &err) < 0) {
                        snprintf(out[i].err, sizeof(out[i].err), "%.199s", err.msg);
                        continue;
                }
                axp_device_prepare(dev, NULL, NULL);
                out[i].done = true;
        }
        return 0;
}

static void print_calib(const calib_view *c) {
        if (c->done)
                printf("%-10s calibration: P_pk %.1f GFLOP/s, B_pk %.1f GB/s, u_m %.2f, u_c %.2f, "
                       "I_c %.0f FLOP/B, attention at %.0f%% of P_eff\n",
                       "", c->c.P_pk / 1e9, c->c.B_pk / 1e9, c->c.u_m, c->c.u_c, c->c.I_c,
                       c->c.e_attn * 100);
        else if (*c->err)
                printf("%-10s calibration failed: %s\n", "", c->err);
}

typedef struct role_view {
        const char *spec;
        int entry;
        char why[200];
} role_view;

/* As the engine does when it loads the model: a discrete GPU bound by "auto" to the dynamic
 * role keeps it only where axp_calib_gpu_keeps_dynamic says so, else the CPU takes it. */
static void dynamic_for_model(const axp_discovery *d, const calib_view *cal, role_view *dyn) {
        const axp_dev_entry *g = &d->devs[dyn->entry];
        int cpu = -1;
        for (int i = 0; i < d->n; i++)
                if (d->devs[i].kind == AXP_DEV_CPU && strcmp(d->devs[i].backend, "cpu") == 0)
                        cpu = i;
        if (cpu < 0 || !axp_device_spec_auto(dyn->spec) || g->kind != AXP_DEV_DGPU ||
            !cal[dyn->entry].done || !cal[cpu].done ||
            axp_calib_gpu_keeps_dynamic(&cal[dyn->entry].c, &cal[cpu].c))
                return;
        snprintf(dyn->why, sizeof(dyn->why),
                 "for this model: %.100s streams it at %.2f GB/s, the CPU at %.2f "
                 "(DynamicDevice=opencl keeps the GPU)",
                 g->name, axp_calib_B_eff(&cal[dyn->entry].c) / 1e9, axp_calib_B_eff(&cal[cpu].c) / 1e9);
        dyn->entry = cpu;
}

static void roles_of(const role_view *roles, int entry, char *buf, size_t size) {
        snprintf(buf, size, "%s%s%s", roles[0].entry == entry ? "static" : "",
                 roles[0].entry == entry && roles[1].entry == entry ? "," : "",
                 roles[1].entry == entry ? "dynamic" : "");
        if (!*buf)
                snprintf(buf, size, "-");
}

/* Two samples 200 ms apart; a negative value if the source cannot tell. */
static double telemetry_now(axp_gpu_telemetry *t) {
        double f = -1;
        if (strcmp(axp_gpu_telemetry_source(t), "none") == 0)
                return -1;
        if (axp_gpu_telemetry_sample(t, axp_now(), &f) == -EAGAIN) {
                usleep(200 * 1000);
                if (axp_gpu_telemetry_sample(t, axp_now(), &f) < 0)
                        f = -1;
        }
        return f;
}

static void print_text(const axp_discovery *d, const role_view *roles, const char *tsrc,
                       double busy, const calib_view *cal) {
        printf("%-10s %-5s %-10s %-9s %-4s %-14s %s\n", "SPEC", "KIND", "BACKEND", "MEMORY", "RUNS",
               "ROLE", "NAME");
        for (int i = 0; i < d->n; i++) {
                const axp_dev_entry *e = &d->devs[i];
                char m[32], r[32];
                roles_of(roles, i, r, sizeof(r));
                printf("%-10s %-5s %-10s %-9s %-4s %-14s %s\n", *e->spec ? e->spec : "-",
                       axp_dev_kind_name(e->kind), e->backend, mem_str(e->mem_bytes, m, sizeof(m)),
                       e->can_run ? "yes" : "no", r, e->name);
                printf("%-10s %s\n", "", e->note);
                if (cal)
                        print_calib(&cal[i]);
        }
        printf("\n");
        for (int k = 0; k < 2; k++) {
                const axp_dev_entry *e = &d->devs[roles[k].entry];
                printf("%s role (%s): %s [%s]", k == 0 ? "static" : "dynamic", roles[k].spec,
                       e->name, e->spec);
                if (*roles[k].why)
                        printf("; %s", roles[k].why);
                printf("\n");
        }
        printf("OpenCL: %s\n", d->opencl);
        printf("Level Zero: %s\n", d->levelzero);
        printf("graphics telemetry: %s", tsrc);
        if (busy >= 0)
                printf(" (render engines busy with other processes: %.0f%%)", busy * 100);
        printf("\n");
}

static void json_str(const char *s) {
        axp_json_string(stdout, s, strlen(s));
}

static void print_json(const axp_discovery *d, const role_view *roles, const char *tsrc,
                       double busy, const calib_view *cal) {
        printf("{\"devices\": [");
        for (int i = 0; i < d->n; i++) {
                const axp_dev_entry *e = &d->devs[i];
                printf("%s{\"spec\": ", i ? ", " : "");
                json_str(e->spec);
                printf(", \"backend\": ");
                json_str(e->backend);
                printf(", \"kind\": ");
                json_str(axp_dev_kind_name(e->kind));
                printf(", \"name\": ");
                json_str(e->name);
                printf(", \"memory_bytes\": %llu, \"can_run\": %s, \"roles\": [%s%s%s], \"note\": ",
                       (unsigned long long) e->mem_bytes, e->can_run ? "true" : "false",
                       roles[0].entry == i ? "\"static\"" : "",
                       roles[0].entry == i && roles[1].entry == i ? ", " : "",
                       roles[1].entry == i ? "\"dynamic\"" : "");
                json_str(e->note);
                printf(", \"calibration\": ");
                if (cal && cal[i].done)
                        printf("{\"P_pk\": %.6g, \"B_pk\": %.6g, \"u_m\": %.6g, \"u_c\": %.6g, "
                               "\"I_c\": %.6g, \"e_attn\": %.6g}",
                               cal[i].c.P_pk, cal[i].c.B_pk, cal[i].c.u_m, cal[i].c.u_c,
                               cal[i].c.I_c, cal[i].c.e_attn);
                else if (cal && *cal[i].err) {
                        printf("{\"error\": ");
                        json_str(cal[i].err);
                        printf("}");
                } else
                        printf("null");
                printf("}");
        }
        printf("], \"roles\": {");
        for (int k = 0; k < 2; k++) {
                printf("%s\"%s\": {\"asked\": ", k ? ", " : "", k == 0 ? "static" : "dynamic");
                json_str(roles[k].spec);
                printf(", \"device\": ");
                json_str(d->devs[roles[k].entry].spec);
                printf(", \"fallback\": ");
                if (*roles[k].why)
                        json_str(roles[k].why);
                else
                        printf("null");
                printf("}");
        }
        printf("}, \"backends\": {\"opencl\": ");
        json_str(d->opencl);
        printf(", \"levelzero\": ");
        json_str(d->levelzero);
        printf("}, \"telemetry\": {\"source\": ");
        json_str(tsrc);
        if (busy >= 0)
                printf(", \"busy\": %.4f}}\n", busy);
        else
                printf(", \"busy\": null}}\n");
}

int cli_devices(int argc, char **argv) {
        static const struct option options[] = { { "json", no_argument, NULL, 'j' },
                                                 { "static", required_argument, NULL, 's' },
                                                 { "dynamic", required_argument, NULL, 'd' },
                                                 { "help", no_argument, NULL, 'h' },
                                                 { "model", required_argument, NULL, 'm' },
                                                 { "calib-cache", required_argument, NULL, 'c' },
                                                 {} };
        role_view roles[2] = { { .spec = "auto" }, { .spec = "auto" } };
        const char *model = NULL, *cache = NULL;
        bool json = false;
        axp_error err = { 0 };
        int c;

        optind = 0;
        while ((c = cli_getopt(argc, argv, "hm:", options)) >= 0) {
                switch (c) {
                case 'j': json = true; break;
                case 's': roles[0].spec = optarg; break;
                case 'd': roles[1].spec = optarg; break;
                case 'm': model = optarg; break;
                case 'c': cache = optarg; break;
                case 'h': return usage(stdout);
                default: return 2;
                }
        }
        if (optind < argc)
                return cli_usage_error("unexpected argument '%s'", argv[optind]);
        if (cache && !model)
                return cli_usage_error("--calib-cache goes with -m MODEL");
        for (int k = 0; k < 2; k++)
                if (axp_device_spec_check(roles[k].spec, &err) < 0)
                        return cli_usage_error("--%s: %s", k == 0 ? "static" : "dynamic", err.msg);

        _cleanup_(axp_discovery_clear) axp_discovery d = { 0 };
        if (axp_devices_discover(&d, &err) < 0)
                return cli_fail("%s", err.msg);
        for (int k = 0; k < 2; k++)
                if (axp_roles_resolve(d.devs, d.n, (axp_role_id) k, roles[k].spec, &roles[k].entry,
                                      roles[k].why, sizeof(roles[k].why), &err) < 0)
                        return cli_fail("%s", err.msg);

        _cleanup_free_ calib_view *cal = NULL;
        if (model) {
                int r;
                if (!(cal = calloc((size_t) d.n, sizeof(*cal))))
                        return cli_fail("out of memory");
                if ((r = calibrate(&d, model, cache, cal)) != 0)
                        return r;
                dynamic_for_model(&d, cal, &roles[1]);
        }

        _cleanup_(axp_gpu_telemetry_freep) axp_gpu_telemetry *t = NULL;
        const char *tsrc = "none";
        double busy = -1;
        if (axp_gpu_telemetry_open("auto", &t, NULL) == 0) {
                tsrc = axp_gpu_telemetry_source(t);
                busy = telemetry_now(t);
        }
        if (json)
                print_json(&d, roles, tsrc, busy, cal);
        else
                print_text(&d, roles, tsrc, busy, cal);
        return 0;
}
