/* SPDX-License-Identifier: MIT */
/* How busy other processes keep the GPU's render engines (DESIGN §5, graphics protection).
 * The engine samples this every few hundred milliseconds and hands it to the scheduler
 * (axp_sched_set_external_busy), which shrinks the proactive duty budget of the dynamic
 * role by it. Sources, in the order "auto" tries them:
 *
 *   fake     AXP_GPU_BUSY=<fraction>, or AXP_GPU_BUSY_FILE=<file holding a fraction, re-read
 *            at every sample>: for tests and demos
 *   sysman   Level Zero Sysman render-engine activity (ZES_ENABLE_SYSMAN=1), minus our own
 *            render time from DRM fdinfo
 *   fdinfo   DRM fdinfo of every other process (/proc/PID/fdinfo: drm-engine-render,
 *            drm-engine-gfx, xe's drm-cycles-rcs); only processes we may inspect count
 *   pmu      the i915 or xe perf PMU (perf_event_open; needs perf_event_paranoid <= 0 or
 *            CAP_PERFMON), minus our own render time from DRM fdinfo
 *
 * AXP_TELEMETRY_PROC and AXP_TELEMETRY_SYSFS replace /proc and /sys (tests). */
#pragma once

#include <stdint.h>

#include "base/util.h"

typedef struct axp_gpu_telemetry axp_gpu_telemetry;

/* source: "auto", "fake", "sysman", "fdinfo", "pmu" or "none" (always 0). auto with
 * nothing usable gives "none". -ENODEV if a named source is unusable here. */
int axp_gpu_telemetry_open(const char *source, axp_gpu_telemetry **ret, axp_error *err);
void axp_gpu_telemetry_free(axp_gpu_telemetry *t);
static inline void axp_gpu_telemetry_freep(axp_gpu_telemetry **t) {
        axp_gpu_telemetry_free(*t);
}

/* The source in use: "fake", "sysman", "fdinfo", "pmu", "none". */
const char *axp_gpu_telemetry_source(const axp_gpu_telemetry *t);

/* The render engines' busy fraction (0..1) due to other processes between the previous
 * sample (or open) and now (seconds on any monotonic clock: the engine's wall clock, or a
 * test's virtual one). -EAGAIN if no time has passed; other negative errno if the source
 * failed (the caller keeps its last value). */
int axp_gpu_telemetry_sample(axp_gpu_telemetry *t, double now, double *ret_fraction);

/* The perf config of event `event` of the PMU at sysfs folder `pmu_dir` with the named
 * format fields set ("gt", "engine_class", ...; fields the PMU lacks are ignored), from its
 * events/ and format/ files. Exposed for tests. */
int axp_pmu_config(const char *pmu_dir, const char *event, const char *const *fields,
                   const uint64_t *values, int n_fields, uint64_t *ret_config);
