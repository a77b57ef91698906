/* SPDX-License-Identifier: MIT */
/* How much other processes keep the CPU busy: the input of the CPU pressure guard, which
 * shrinks the share of the CPU's time proactive work may take while the person's own
 * programs want it (axp_sched_set_cpu_pressure), as GPU telemetry (gpu-telemetry.h) feeds
 * the iGPU's duty budget. The engine samples it every half second while it has work.
 * Sources, in the order "auto" tries them:
 *
 *   fake   AXP_CPU_PRESSURE=<fraction>, or AXP_CPU_PRESSURE_FILE=<file holding a fraction,
 *          re-read at every sample>: for tests and benchmarks
 *   psi    the kernel's pressure stall information, /proc/pressure/cpu: the share of the
 *          time at least one runnable task waited for a CPU ("some"). The engine's own
 *          threads count when they wait: with proactive work at the idle class that is when
 *          other programs hold the CPUs it would run on
 *   stat   /proc/stat: the share of all CPUs' time spent busy, less this process's own
 *          (/proc/self/stat), for kernels without PSI (CONFIG_PSI off, or psi=0)
 *
 * AXP_CPU_PRESSURE_SOURCE=psi|stat|none makes "auto" use that one; AXP_TELEMETRY_PROC
 * replaces /proc (tests). */
#pragma once

#include "base/util.h"

typedef struct axp_cpu_pressure axp_cpu_pressure;

/* source: "auto", "fake", "psi", "stat" or "none" (always 0). auto with nothing usable
 * gives "none". -ENODEV if a named source is unusable here, -EINVAL if unknown. */
int axp_cpu_pressure_open(const char *source, axp_cpu_pressure **ret, axp_error *err);
void axp_cpu_pressure_free(axp_cpu_pressure *p);
static inline void axp_cpu_pressure_freep(axp_cpu_pressure **p) {
        axp_cpu_pressure_free(*p);
}

/* The source in use: "fake", "psi", "stat", "none". */
const char *axp_cpu_pressure_source(const axp_cpu_pressure *p);

/* The pressure (0..1) between the previous sample (or open) and now (seconds on any
 * monotonic clock: the engine's wall clock, or a test's virtual one). -EAGAIN if no time
 * (or, for stat, no clock tick) has passed; other negative errno if the source failed (the
 * caller keeps its last value). */
int axp_cpu_pressure_sample(axp_cpu_pressure *p, double now, double *ret_fraction);
