/* SPDX-License-Identifier: MIT */
/* The simulated SoC (DESIGN §6): device profiles, sim devices whose kernel latencies come
 * from the HEG cost model with a shared-DRAM contention slowdown (HeRo's model), a
 * discrete-event driver on a virtual clock that runs the real scheduler, and a Poisson
 * trace generator over the workload mixes of papers.md. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "devices/device.h"
#include "heg/cost.h"
#include "heg/heg.h"
#include "sched/scheduler.h"

#define AXP_SIM_MAX_DEVS 4

typedef struct axp_sim_dev_profile {
        const char *name;
        axp_dev_kind kind;
        axp_calib calib;
        double power_prefill_w; /* busy power running prefill-shaped kernels */
        double power_decode_w;  /* busy power running decode kernels */
        double warmup_s;        /* host time to prepare a request's dynamic kernels */
} axp_sim_dev_profile;

typedef struct axp_soc_profile {
        const char *name;
        const char *description;
        double dram_bw; /* bytes/s the shared DRAM sustains before kernels slow each other */
        double host_compile_w; /* host power while it prepares kernels */
        int n_devs;
        axp_sim_dev_profile devs[AXP_SIM_MAX_DEVS];
        int static_dev, dynamic_dev; /* role bindings */
} axp_soc_profile;

/* -ENOENT with a message listing the known names. */
int axp_soc_profile_find(const char *name, const axp_soc_profile **ret, axp_error *err);
/* Model shapes in W8A16 with fp16 activations and KV: "llama-3b" (Llama-3.2-3B),
 * "llama-8b" (Llama-3.1-8B). */
int axp_sim_model_shape(const char *name, axp_heg_shape *ret, axp_error *err);

/* The virtual-time world: sim devices, the clock and an event queue. */
typedef struct axp_sim axp_sim;

int axp_sim_new(const axp_soc_profile *soc, const axp_heg_shape *shape, axp_sim **ret,
                axp_error *err);
void axp_sim_free(axp_sim *sim);
/* The environment to create the scheduler with; then attach the scheduler. */
const axp_sched_env *axp_sim_env(axp_sim *sim);
void axp_sim_attach(axp_sim *sim, axp_sched *s);
/* Also run every task of device dev on a real device (synchronously, when it is issued),
 * while the clock still follows the cost model: real tokens, deterministic time. */
void axp_sim_wrap_device(axp_sim *sim, int dev, axp_device *real);
/* Call fn at virtual time t (an arrival, a cancel, ...). */
int axp_sim_at(axp_sim *sim, double t, void (*fn)(void *userdata), void *userdata);
/* Process events in time order until none is left or the clock would pass t_end.
 * -ELOOP if time stops advancing (a scheduler bug). */
int axp_sim_run(axp_sim *sim, double t_end, axp_error *err);
double axp_sim_now(const axp_sim *sim);

typedef struct axp_sim_dev_stats {
        double busy_s, energy_j;
        double slowdown_s; /* extra time caused by DRAM contention */
} axp_sim_dev_stats;
void axp_sim_device_stats(const axp_sim *sim, int dev, axp_sim_dev_stats *ret);

/* Workload sets of papers.md, and traces drawn from them. */
typedef struct axp_trace_req {
        double t;
        axp_kind kind;
        int prompt, output;
        int set; /* index into the workload sets */
} axp_trace_req;

const char *axp_workload_set_name(int set);
/* Known: proactivebench, samsum, cnndm, lmsys, mtrag, bfcl, proactive-mixed,
 * reactive-mixed. */
int axp_workload_set_find(const char *name, axp_kind kind, int *ret, axp_error *err);

typedef struct axp_trace_params {
        double reactive_per_min, proactive_per_min, minutes;
        uint64_t seed;
        int reactive_set, proactive_set; /* from axp_workload_set_find */
        int max_ctx;                     /* prompt + output stay within it */
} axp_trace_params;

/* Independent Poisson arrivals per kind, lengths drawn log-normally around the set's means
 * (outputs long-tailed, capped at 1600). Sorted by time; *ret is malloc'd. */
int axp_trace_generate(const axp_trace_params *p, axp_trace_req **ret, int *ret_n, axp_error *err);

typedef struct axp_sim_replay_opts {
        double gpu_busy; /* share of the dynamic role's device other processes keep busy */
        double warmup_s; /* > 0: NPU kernel warm-up time instead of the profile's */
        FILE *log;       /* if set: one line per task issued */
} axp_sim_replay_opts;

/* Replay a trace on a simulated SoC under the real scheduler. opts may be NULL. */
typedef struct axp_sim_result {
        int s_chk;
        double makespan_s;
        struct {
                double mean_latency_s, p90_latency_s, mean_prefill_wait_s, max_prefill_wait_s;
                double mean_ttft_s, mean_tpot_s;
                int completed, submitted;
        } reactive;
        struct {
                double normalized_latency_s_per_token, mean_latency_s, throughput_req_per_min;
                double mean_prefill_wait_s;
                int completed, submitted;
        } proactive;
        double igpu_busy_fraction;  /* dynamic role's device busy / makespan */
        double npu_busy_fraction;   /* static role's device busy / makespan */
        double energy_j_per_token;  /* energy / (prompt + generated tokens) */
        double contention_s;        /* extra time from DRAM contention, all devices */
} axp_sim_result;

int axp_sim_replay(const axp_soc_profile *soc, const axp_heg_shape *shape,
                   const axp_sched_config *cfg, const axp_sim_replay_opts *opts,
                   const axp_trace_req *trace, int n, axp_sim_result *ret, axp_error *err);
