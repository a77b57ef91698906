/* SPDX-License-Identifier: MIT */
/* The scheduler (DESIGN §5, Agent.xpu §4): an event-driven, single-threaded state machine.
 *
 * It owns no thread and no clock. Its environment (the engine's wall-clock loop with real
 * devices behind executors, or the simulator's virtual clock with sim devices) feeds it
 * three kinds of event -- a request arrives (axp_sched_submit), a device finished the task
 * it was given (axp_sched_task_done), a timer expired (axp_sched_timer) -- and after each one
 * the scheduler decides which HEG tasks the idle devices run next, through env.issue. Every
 * device runs at most one task at a time, so every decision is taken at a kernel boundary.
 *
 * Requests are prefilled kernel by kernel on the devices bound to the static and dynamic
 * roles, then decoded in batches on the dynamic role; after each HEAD the request's client
 * chooses the next token (sampling happens on the host, in the callback). */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "request.h"
#include "heg/cost.h"
#include "heg/heg.h"

typedef struct axp_sched axp_sched;

typedef enum axp_policy {
        AXP_POLICY_AGENTXPU, /* the paper's scheduler */
        AXP_POLICY_FCFS,     /* continuous batching with chunked prefill, no priorities */
        AXP_POLICY_SERIAL,   /* one request at a time, end to end */
        AXP_POLICY__COUNT,
} axp_policy;

const char *axp_policy_name(axp_policy p);
/* -EINVAL if unknown. */
int axp_policy_from_name(const char *name, axp_policy *ret);

typedef enum axp_role {
        AXP_ROLE_STATIC,  /* static S_chk chunk kernels (the NPU role) */
        AXP_ROLE_DYNAMIC, /* dynamic and decode kernels (the iGPU role) */
        AXP_ROLE__COUNT,
} axp_role;

typedef struct axp_sched_config {
        axp_policy policy;
        double preempt_bound_s; /* a prefill kernel finishes within this (0.1 s) */
        int s_chk;              /* static chunk length; 0: derived from preempt_bound_s */
        int b_cap;              /* proactive slots in a decode batch with reactive members (3) */
        int max_batch;          /* decode batch limit (32) */
        double aging_s;         /* the oldest proactive request, once this old, is promoted
                                 * until it finishes (30 s); <= 0: never */
        double proactive_duty;  /* share of the dynamic role proactive work may use (0.5) */
        double duty_window_s;   /* burst the duty budget allows, in seconds of window (2 s) */
        double proactive_cpu_share; /* CPU pressure guard: share of a CPU device's time
                                 * proactive work may take while other processes keep the
                                 * CPU fully busy (0 < share <= 1; 1: no guard). With the
                                 * pressure p it may take 1 - p x (1 - share). */
        int max_ctx;            /* prefill buffer: most tokens one prefill stages (4096) */
        uint64_t first_id;      /* the first request's id (0: 1); an engine that replaces its
                                 * scheduler (a model swap) goes on from the last one's ids, so
                                 * that an id never names two requests */
        int fcfs_tokens;        /* tokens per continuous-batching iteration (256): fcfs's, and
                                 * agentxpu's proactive-only ones on one device (there at most
                                 * as many as the preemption bound allows) */
        double piggyback_slack; /* piggybacking: a reactive decode step may grow by this share
                                 * of its predicted time to carry proactive work (0: only
                                 * what the memory-bound step hides) */
        /* Mechanisms that can be switched off, for ablations and for tests that show each
         * one matters. All on by default. */
        bool preemption;        /* reactive prefill preempts proactive prefill */
        bool prefill_first;     /* prefill kernels take the dynamic role before decode */
        bool contention_guard;  /* defer lower-priority memory-bound kernels that would overlap */
        bool elastic_split;     /* Algorithm 1; off: all chunks on the static role */
        bool reactive_first;    /* Algorithm 2; off: FCFS batching up to max_batch */
        bool warmup;            /* prepare static-role kernels for queued proactive requests */
        bool assist;            /* a second proactive prefill on the dynamic role while no
                                 * reactive request is in the engine, within the duty budget */
        bool dual_reactive;     /* a reactive prefill arriving while another runs starts at
                                 * once on the dynamic role instead of waiting */
        bool pad;               /* a proactive remainder runs on the static role, padded to
                                 * S_chk, rather than on the dynamic role */
        bool pipeline;          /* a second proactive prefill fills the static role's gaps */
        bool piggyback;         /* one device serving both roles: slices of proactive prompts
                                 * ride in decode steps (slack-bounded next to reactive ones)
                                 * instead of waiting for them */
} axp_sched_config;

void axp_sched_config_default(axp_sched_config *c);

/* What the scheduler needs from its environment. */
typedef struct axp_sched_env {
        double (*now)(void *userdata);
        /* Start task t on device dev (t is copied or used before returning). The environment
         * calls axp_sched_task_done(s, dev, rc, msg, busy_s) once the device has finished
         * it. A negative return means the task was not started. */
        int (*issue)(void *userdata, int dev, const axp_task *t);
        /* Call axp_sched_timer() at time t (replaces the previous timer; INFINITY: none). */
        void (*set_timer)(void *userdata, double t);
        /* Optional: a reactive request arrived while device dev runs a background task
         * (axp_task.background): let that task finish at normal priority. */
        void (*hurry)(void *userdata, int dev);
        void *userdata;
} axp_sched_env;

typedef struct axp_sched_device {
        const char *name;
        axp_calib calib;
        /* Host time to prepare one request's dynamic-shape kernels (remainder, attention)
         * for this device: an NPU compiles them (Agent.xpu's on-the-fly warm-up, done for
         * queued proactive requests); 0: it runs any shape as it is; < 0: never. */
        double warmup_s;
        /* The desktop's GPU: proactive work on it keeps to the duty budget (graphics
         * protection). */
        bool graphics;
        /* The host's CPU: proactive work on it keeps to the CPU pressure guard's share. */
        bool cpu;
} axp_sched_device;

/* The client of a request. Both callbacks run inside axp_sched_* calls, on the scheduler's
 * thread, and must not call back into the scheduler. */
typedef struct axp_sched_req_ops {
        /* HEAD ran for the request's last pending token: seq->logits holds its logits (NULL
         * for a shape-only seq). Return true and set *ret_token to go on decoding, or false
         * and set *ret_reason to finish. */
        bool (*next)(void *userdata, uint64_t id, axp_seq *seq, int32_t *ret_token,
                     axp_finish_reason *ret_reason);
        /* Called exactly once, last. The seq is no longer used by the scheduler. */
        void (*finished)(void *userdata, uint64_t id, axp_finish_reason reason,
                         const axp_req_stats *stats);
} axp_sched_req_ops;

/* devs[static_dev] and devs[dynamic_dev] serve the two roles (they may be the same). */
int axp_sched_new(const axp_sched_config *c, const axp_heg_shape *shape, const axp_sched_env *env,
                  const axp_sched_device *devs, int n_devs, int static_dev, int dynamic_dev,
                  axp_sched **ret, axp_error *err);
/* Every request still known is finished as cancelled. Tasks in flight must have completed. */
void axp_sched_free(axp_sched *s);

/* Queue a request that prefills tokens[0..n) into seq (whose KV cache may already hold a
 * flow's earlier turns). A seq without a model (seq->model == NULL) is shape-only: nothing
 * is computed, costs follow its lengths; the simulator uses it. tokens are copied. */
int axp_sched_submit(axp_sched *s, axp_kind kind, axp_seq *seq, const int32_t *tokens, int n,
                     const axp_sched_req_ops *ops, void *userdata, uint64_t *ret_id,
                     axp_error *err);
/* The request finishes as cancelled as soon as no task of it is in flight. -ENOENT if
 * unknown or already finished. */
int axp_sched_cancel(axp_sched *s, uint64_t id);

/* Events from the environment. */
/* rc < 0: the task failed; msg (may be NULL) says why, for the requests' error. busy_s: how
 * long the device really worked on the task, where the environment measures it (on the CPU,
 * the CPU time of the device's threads per thread, less than the task's wall time while other
 * programs keep them off the CPU); the proactive budgets charge it. < 0: not measured, the
 * time from issue to completion is charged. */
void axp_sched_task_done(axp_sched *s, int dev, int rc, const char *msg, double busy_s);
void axp_sched_timer(axp_sched *s);

/* Share (0..1) of the dynamic role's device that other processes keep busy (graphics): the
 * proactive duty budget shrinks by it. Fed from GPU telemetry. */
void axp_sched_set_external_busy(axp_sched *s, double fraction);
/* CPU pressure (0..1: how much of the time other processes keep the CPU busy): the share of
 * the CPU devices' time proactive work may take shrinks from 1 towards proactive_cpu_share
 * as it rises (the same token bucket as the duty budget). Fed from PSI or /proc/stat. */
void axp_sched_set_cpu_pressure(axp_sched *s, double fraction);
/* The share of device dev's time proactive work may take now (1: not limited). */
double axp_sched_proactive_share(const axp_sched *s, int dev);

int axp_sched_set_policy(axp_sched *s, axp_policy p);
axp_policy axp_sched_policy(const axp_sched *s);
/* Host seconds spent preparing kernels (warm-up) so far. */
double axp_sched_warmup_seconds(const axp_sched *s);
/* The chunk length in use. */
int axp_sched_s_chk(const axp_sched *s);
/* Did the last decision round leave nothing running, queued or waiting on a timer? */
bool axp_sched_idle(const axp_sched *s);

typedef struct axp_sched_status {
        unsigned queued_reactive, queued_proactive, running;
} axp_sched_status;
void axp_sched_status_get(const axp_sched *s, axp_sched_status *ret);

/* -ENOENT if unknown (finished requests are forgotten once their callback ran). */
int axp_sched_request_info(const axp_sched *s, uint64_t id, axp_req_state *ret_state,
                           axp_req_stats *ret_stats);

typedef struct axp_sched_dev_stats {
        double busy_s;           /* time spent running tasks */
        double busy_proactive_s; /* of which tasks with proactive requests only */
        uint64_t tasks;
        /* busy time by kind of work: prefill kernels of the lanes (a request's own chunks),
         * and steps (decode iterations, with any prompt slices riding in them) with a
         * reactive member or of proactive requests only; steps begun of each */
        double prefill_reactive_s, prefill_proactive_s;
        double steps_reactive_s, steps_proactive_s;
        uint64_t steps_reactive, steps_proactive;
} axp_sched_dev_stats;
void axp_sched_device_stats(const axp_sched *s, int dev, axp_sched_dev_stats *ret);

/* Observer of decisions, for tests and traces: called when a task is issued. */
typedef void (*axp_sched_trace_fn)(void *userdata, double now, int dev, const axp_task *t,
                                   const uint64_t *ids, const axp_kind *kinds);
void axp_sched_set_trace(axp_sched *s, axp_sched_trace_fn fn, void *userdata);
