/* SPDX-License-Identifier: MIT */
/* Scheduler tests in virtual time: the real scheduler on simulated devices, requests placed
 * at exact instants, and a record of every kernel it issued. */
#pragma once

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim.h"

#define H_MAX_REQS 512
#define H_MAX_TASKS (1 << 21)

typedef struct harness harness;

typedef struct h_req {
        harness *h;
        double t;
        axp_kind kind;
        int prompt, output;
        uint64_t id;
        axp_seq seq;
        int generated;
        bool submitted, done;
        axp_finish_reason reason;
        axp_req_stats st;
        double t_done;
} h_req;

typedef struct h_task {
        double t, dur;
        int dev;
        axp_op op;
        int layer;
        axp_variant variant;
        int n;
        uint64_t ids[8];    /* the first spans' requests */
        axp_kind kinds[8];
        int t0, t1;         /* of the first span */
        int chunk;
        bool proactive_only;
        bool background; /* the scheduler marked it background work */
} h_task;

struct harness {
        axp_sim *sim;
        axp_sched *sched;
        axp_heg_shape shape;
        const axp_soc_profile *soc;
        h_req reqs[H_MAX_REQS];
        int n;
        h_task *tasks;
        int n_tasks;
        int static_dev, dynamic_dev;
};

static inline void h_trace(void *ud, double now, int dev, const axp_task *t, const uint64_t *ids,
                    const axp_kind *kinds) {
        harness *h = ud;
        h_task *k;

        if (h->n_tasks >= H_MAX_TASKS)
                return;
        k = &h->tasks[h->n_tasks++];
        *k = (h_task) { .t = now, .dev = dev, .op = t->op, .layer = t->layer,
                        .variant = t->variant, .n = t->n_spans, .t0 = t->spans[0].t0,
                        .t1 = t->spans[0].t1, .chunk = t->chunk, .proactive_only = true,
                        .background = t->background };
        k->dur = axp_calib_latency(&h->soc->devs[dev].calib, axp_task_cost(&h->shape, t));
        for (int i = 0; i < t->n_spans; i++) {
                if (i < 8) {
                        k->ids[i] = ids[i];
                        k->kinds[i] = kinds[i];
                }
                if (kinds[i] == AXP_REACTIVE)
                        k->proactive_only = false;
        }
}

static inline bool h_next(void *ud, uint64_t id, axp_seq *seq, int32_t *ret_token,
                   axp_finish_reason *ret_reason) {
        h_req *q = ud;
        if (++q->generated >= q->output) {
                *ret_reason = AXP_FINISH_LENGTH;
                return false;
        }
        *ret_token = 0;
        return true;
}

static inline void h_finished(void *ud, uint64_t id, axp_finish_reason reason,
                              const axp_req_stats *st) {
        h_req *q = ud;
        q->done = true;
        q->reason = reason;
        q->st = *st;
        q->t_done = axp_sim_now(q->h->sim);
}

static const axp_sched_req_ops h_ops = { .next = h_next, .finished = h_finished };

static inline void h_arrive(void *ud) {
        h_req *q = ud;
        axp_error err = { 0 };

        q->seq = (axp_seq) { .n_ctx_max = 8192, .logits_pos = -1 };
        if (axp_sched_submit(q->h->sched, q->kind, &q->seq, NULL, q->prompt, &h_ops, q, &q->id,
                             &err) == 0)
                q->submitted = true;
        else
                fprintf(stderr, "submit: %s\n", err.msg);
}

/* Both roles on the profile's device of kind `shared` (e.g. AXP_DEV_CPU: a machine without
 * NPU or usable GPU), or on the profile's own static and dynamic devices if shared < 0. */
static inline int h_init_roles(harness *h, const char *model, const axp_sched_config *cfg, int shared) {
        axp_sched_device devs[AXP_SIM_MAX_DEVS];
        axp_error err = { 0 };

        memset(h, 0, sizeof(*h));
        h->tasks = calloc(H_MAX_TASKS, sizeof(h_task));
        if (!h->tasks || axp_soc_profile_find("core-ultra-125h", &h->soc, &err) < 0 ||
            axp_sim_model_shape(model, &h->shape, &err) < 0 ||
            axp_sim_new(h->soc, &h->shape, &h->sim, &err) < 0)
                return -1;
        for (int i = 0; i < h->soc->n_devs; i++)
                devs[i] = (axp_sched_device) { .name = h->soc->devs[i].name,
                                               .calib = h->soc->devs[i].calib,
                                               .warmup_s = h->soc->devs[i].warmup_s,
                                               .graphics = h->soc->devs[i].kind == AXP_DEV_IGPU,
                                               .cpu = h->soc->devs[i].kind == AXP_DEV_CPU };
        h->static_dev = h->soc->static_dev;
        h->dynamic_dev = h->soc->dynamic_dev;
        for (int i = 0; shared >= 0 && i < h->soc->n_devs; i++)
                if ((int) h->soc->devs[i].kind == shared)
                        h->static_dev = h->dynamic_dev = i;
        if (axp_sched_new(cfg, &h->shape, axp_sim_env(h->sim), devs, h->soc->n_devs,
                          h->static_dev, h->dynamic_dev, &h->sched, &err) < 0) {
                fprintf(stderr, "sched: %s\n", err.msg);
                return -1;
        }
        axp_sim_attach(h->sim, h->sched);
        axp_sched_set_trace(h->sched, h_trace, h);
        return 0;
}

static inline int h_init(harness *h, const char *model, const axp_sched_config *cfg) {
        return h_init_roles(h, model, cfg, -1);
}

static inline h_req *h_add(harness *h, double t, axp_kind kind, int prompt, int output) {
        h_req *q = &h->reqs[h->n++];
        *q = (h_req) { .h = h, .t = t, .kind = kind, .prompt = prompt, .output = output };
        axp_sim_at(h->sim, t, h_arrive, q);
        return q;
}

static inline void h_run(harness *h, double t_end) {
        axp_error err = { 0 };
        if (axp_sim_run(h->sim, t_end, &err) < 0)
                fprintf(stderr, "sim: %s\n", err.msg);
}

static inline void h_free(harness *h) {
        axp_sched_free(h->sched);
        axp_sim_free(h->sim);
        free(h->tasks);
}

static inline bool h_task_has(const h_task *k, uint64_t id) {
        for (int i = 0; i < k->n && i < 8; i++)
                if (k->ids[i] == id)
                        return true;
        return false;
}

static inline int h_dynamic_dev(const harness *h) {
        return h->dynamic_dev;
}

static inline int h_static_dev(const harness *h) {
        return h->static_dev;
}
