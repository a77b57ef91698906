/* SPDX-License-Identifier: MIT */
/* The scheduler's state, shared by sched.c (events, arbitration of the devices, budget,
 * stats), sched-prefill.c (the prefill pipeline, Algorithm 1) and sched-decode.c (decode
 * iterations, Algorithm 2, the fcfs and serial iterations). */
#pragma once

#include "scheduler.h"

/* A prefill as a DAG of kernels over chunks of the prompt (the HEG's prefill graph): chunk c
 * runs K1, K2, K3 of layer 0, then of layer 1, ...; K1 and K3 are token-wise, K2 of chunk c
 * (attention of its rows) needs K1 of chunks 0..c of the same layer (causal). EMBED comes
 * first, HEAD last. Chunks are S_chk long except a shorter last one, the dynamic remainder.
 * Without layer barriers the static role works on one chunk while the dynamic role runs
 * another chunk's attention. */
typedef enum stage {
        ST_K1,
        ST_K2,
        ST_K3,
        ST_DONE,
} stage;

typedef struct chunk {
        int t0, t1;
        int layer;
        stage st;
        bool issued;
} chunk;

/* Algorithm 1's decision for one token-wise op of one layer, taken when its first chunk
 * becomes ready. */
typedef struct split {
        int n_static; /* chunks 0..n_static-1 run on the static role; -1: not decided yet */
        bool defer;   /* scenario 2: the remainder waits so that it ends with the static chunks */
        int static_issued;
        double t_last_static;
} split;

typedef enum once_state {
        O_PENDING,
        O_ISSUED,
        O_DONE,
} once_state;

typedef enum req_where {
        W_QUEUED,     /* in a prefill queue, nothing run yet */
        W_PREFILL,    /* the active prefill of its kind, or suspended in its queue */
        W_FCFS,       /* prefilled slice by slice inside iterations (fcfs; piggybacking) */
        W_DECODE,     /* in the decode pool (or in the running iteration) */
        W_FINISHED,
} req_where;

/* Prefill lanes: the reactive prefill and the proactive prefill (both static role first,
 * placed by Algorithm 1); a second proactive prefill that fills the static role's gaps when
 * the first waits on the dynamic role; a second reactive prefill on the dynamic role
 * (instead of waiting behind the first); and the assist lane, a proactive prefill on the
 * dynamic role while no reactive request is in the engine. */
enum {
        LANE_REACTIVE = AXP_REACTIVE,
        LANE_PROACTIVE = AXP_PROACTIVE,
        LANE_PROACTIVE2,
        LANE_REACTIVE2,
        LANE_ASSIST,
        LANE__COUNT,
};

/* The lanes whose prefill prefers the static role. */
static inline bool lane_static_proactive(int lane) {
        return lane == LANE_PROACTIVE || lane == LANE_PROACTIVE2;
}

typedef struct sreq sreq;
struct sreq {
        uint64_t id;
        axp_kind kind;
        axp_seq *seq;
        int32_t *tokens;
        int n_tokens;
        axp_sched_req_ops ops;
        void *userdata;

        req_where where;
        bool staged;       /* the prompt's tokens are staged in seq (axp_seq_begin) */
        bool abort;        /* cancelled or failed: finish once nothing of it is in flight */
        axp_finish_reason abort_reason;
        char error[256];
        int in_flight;     /* tasks in flight that include this request */
        int lane;          /* prefill lane it is active in, -1: none */
        bool in_iter;      /* member of the running iteration */

        /* prefill progress */
        once_state embed, head;
        chunk *chunks;
        int n_chunks, n_chunks_done;
        split *splits;     /* [2][n_layer]: K1, K3 */
        bool suspended;    /* preempted by a reactive prefill, not resumed yet */
        bool prepared;     /* warm-up done: its whole prefill may run on the static role */
        int fcfs_done;     /* W_FCFS: prompt tokens through every layer */

        /* decode */
        int32_t next_tok;
        bool was_batched;  /* in the previous decode batch (eviction counts as preemption) */

        /* stats */
        double t_arrival, t_first_kernel, t_first_token, t_last_token, t_finish;
        uint32_t n_generated, preemptions;

        sreq *all_next;    /* every live request */
        sreq *q_prev, *q_next; /* the list it is in (prefill queue, decode pool, fcfs list) */
        int q_list;        /* which list, -1: none */
};

typedef struct rlist {
        sreq *head, *tail;
        unsigned n;
} rlist;

enum {
        L_PREFILL_REACTIVE,
        L_PREFILL_PROACTIVE,
        L_DECODE,  /* decode pool: prefilled requests waiting for or in a batch */
        L_FCFS,    /* requests part-way through a prefill inside iterations (W_FCFS) */
        L__COUNT,
};

/* Where an iteration is: EMBED, then K1, K2, K3 of each layer, then HEAD. */
typedef enum phase {
        PH_EMBED,
        PH_K1,
        PH_K2,
        PH_K3,
        PH_HEAD,
} phase;

/* A pass of a batch of spans through every layer: a decode step (one token per request),
 * or for fcfs a decode step fused with prefill chunks of other requests. */
typedef struct iter {
        bool active;
        bool issued; /* the current phase's task is in flight */
        int n;
        sreq *reqs[AXP_MAX_BATCH];
        int t0[AXP_MAX_BATCH], t1[AXP_MAX_BATCH];
        bool head[AXP_MAX_BATCH];
        phase ph;
        int layer;
        axp_variant variant;
        int prio; /* 1: has a reactive member */
} iter;

typedef enum src_kind {
        SRC_NONE,
        SRC_UNIT,
        SRC_ITER,
} src_kind;

typedef struct sdev {
        const char *name;
        axp_calib calib;
        double warmup_s;
        bool graphics;
        bool cpu;
        bool busy;
        double t_start;
        src_kind src;
        sreq *req;   /* SRC_UNIT */
        axp_task task;
        int prio;
        bool mem_bound;
        double guard_since; /* a kernel for it is deferred by the contention guard since */
        bool proactive; /* only proactive requests in the running task */
        bool lane_kernel; /* of a prefill lane living on the dynamic role (reactive2, assist) */
        /* proactive budget (graphics: the duty budget; CPU: the pressure guard), a token
         * bucket of busy seconds */
        double credit, credit_t;
        double external_busy; /* share other processes keep the device busy */
        bool budget_blocked;
        axp_sched_dev_stats st;
} sdev;

struct axp_sched {
        axp_sched_config cfg;
        axp_policy pending_policy; /* applied once nothing is in flight */
        axp_heg_shape shape;
        axp_sched_env env;
        int s_chk;
        int it_tokens; /* tokens of an iteration of proactive requests only (one device) */

        sdev *devs;
        int n_devs;
        int role_dev[AXP_ROLE__COUNT];

        uint64_t next_id;
        sreq *all;
        rlist lists[L__COUNT];
        sreq *active[LANE__COUNT];
        unsigned n_reactive; /* reactive requests in the engine */
        unsigned n_abort;    /* cancelled or failed requests not finished yet */
        iter it;
        iter parked; /* a proactive iteration with prompt slices, preempted for a reactive step */

        double wake; /* earliest time a deferred kernel becomes ready */
        sreq *promoted;     /* the proactive request aging has promoted, if any */
        sreq *warming;      /* the request the host's warm-up worker prepares kernels for */
        double warm_end;
        /* recent dynamic-role time of decode and of the prefill lanes that run there whole
         * (decaying), to share the dynamic role between them */
        double use_decode, use_lane, use_t;
        int last_lane; /* lane of the last prefill kernel issued on the dynamic role */
        double warmup_total;

        double timer_armed;
        bool in_event; /* re-entrancy guard: callbacks must not call back in */

        axp_sched_trace_fn trace;
        void *trace_ud;
};

/* sched.c */
double sched_now(axp_sched *s);
bool sched_aged(axp_sched *s, const sreq *r);
void rlist_push(axp_sched *s, int list, sreq *r);
void rlist_remove(axp_sched *s, sreq *r);
int sched_seq_begin(axp_seq *q, const int32_t *tokens, int n, axp_error *err);
void sched_seq_end(axp_seq *q);
/* Stage r's whole prompt in its seq; if it cannot be, r fails and leaves its list. */
int sched_stage_prompt(axp_sched *s, sreq *r);
void sched_finish(axp_sched *s, sreq *r, axp_finish_reason reason);
void sched_fail(axp_sched *s, sreq *r, int code, const char *what);
/* The request's HEAD ran: ask its client for the next token; on to decode or finished. */
void sched_after_head(axp_sched *s, sreq *r);
double sched_predict(axp_sched *s, axp_role role, const axp_task *t);
/* May proactive work start on device dev within its budget? */
bool sched_budget_ok(axp_sched *s, int dev);
bool sched_guard_ok(axp_sched *s, int dev, const axp_task *t, int prio);
int sched_issue(axp_sched *s, int dev, const axp_task *t, src_kind src, sreq *r, int prio,
                bool proactive);
bool sched_decode_idle(axp_sched *s);

/* sched-prefill.c */
/* Stage the prompt and lay out its chunks. */
int prefill_start(axp_sched *s, sreq *r);
/* Has any kernel of r's prefill been issued? */
bool prefill_started(const sreq *r);
/* Hand a staged request whose prefill has not started (from its queue or its lane) to the
 * iterations, which prefill it slice by slice: it joins L_FCFS as W_FCFS. */
void prefill_to_iter(axp_sched *s, sreq *r);
/* The next kernel of r that may run on device dev now: fills *t and returns 0, or -EAGAIN
 * (and lowers s->wake if one becomes ready later). */
int prefill_pick(axp_sched *s, sreq *r, int dev, axp_task *t);
/* The kernel was issued / has finished. After HEAD the request leaves the prefill. */
void prefill_issued(axp_sched *s, sreq *r, const axp_task *t);
void prefill_done(axp_sched *s, sreq *r, const axp_task *t, int rc, const char *msg);
/* Are r's dynamic-shape kernels prepared for the static role (warm-up done)? */
bool prefill_prepared(axp_sched *s, const sreq *r);

/* sched-decode.c */
/* Form the next iteration if none is running; false if there is nothing to run. */
bool iter_form(axp_sched *s);
/* Do slices of proactive prompts ride in the iterations (agentxpu, one device for both
 * roles)? */
bool sched_piggyback_on(const axp_sched *s);
void iter_task(axp_sched *s, axp_task *t);
void iter_task_done(axp_sched *s, int rc, const char *msg);
