/* SPDX-License-Identifier: MIT */
/* The scheduler's core: requests and queues, events, arbitration of the devices at every
 * kernel boundary, the contention guard, the proactive duty budget, timers and stats. The
 * prefill pipeline is in sched-prefill.c, decode iterations in sched-decode.c. */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "sched-internal.h"

static const char *const policy_names[AXP_POLICY__COUNT] = {
        [AXP_POLICY_AGENTXPU] = "agentxpu",
        [AXP_POLICY_FCFS] = "fcfs",
        [AXP_POLICY_SERIAL] = "serial",
};

const char *axp_policy_name(axp_policy p) {
        return p >= 0 && p < AXP_POLICY__COUNT ? policy_names[p] : "unknown";
}

int axp_policy_from_name(const char *name, axp_policy *ret) {
        for (int i = 0; name && i < AXP_POLICY__COUNT; i++)
                if (strcmp(name, policy_names[i]) == 0) {
                        *ret = (axp_policy) i;
                        return 0;
                }
        return -EINVAL;
}

void axp_sched_config_default(axp_sched_config *c) {
        *c = (axp_sched_config) {
                .policy = AXP_POLICY_AGENTXPU,
                .preempt_bound_s = 0.1,
                .s_chk = 0,
                .b_cap = 3,
                .max_batch = 32,
                .aging_s = 30.0,
                .proactive_duty = 0.5,
                .duty_window_s = 2.0,
                .proactive_cpu_share = 1.0,
                .max_ctx = 4096,
                .fcfs_tokens = 256,
                .piggyback_slack = 0,
                .preemption = true,
                .prefill_first = true,
                .contention_guard = true,
                .elastic_split = true,
                .reactive_first = true,
                .warmup = true,
                .assist = true,
                .dual_reactive = true,
                .pad = true,
                .pipeline = true,
                .piggyback = true,
        };
}

/* Shape-only seqs (no model) carry lengths only: the simulator's requests. */
int sched_seq_begin(axp_seq *q, const int32_t *tokens, int n, axp_error *err) {
        if (q->model)
                return axp_seq_begin(q, tokens, n, err);
        if (n <= 0)
                return axp_errorf(err, -EINVAL, "nothing to stage");
        if (q->n_past + n > q->n_ctx_max)
                return axp_seq_overflow_error(err, n, q->n_past, q->n_ctx_max);
        q->n_new = n;
        return 0;
}

void sched_seq_end(axp_seq *q) {
        if (q->model) {
                axp_seq_end(q);
                return;
        }
        q->n_past += q->n_new;
        q->n_new = 0;
}

int sched_stage_prompt(axp_sched *s, sreq *r) {
        axp_error err = { 0 };
        int ret;

        /* a prefill writes at most a chunk (a lane) or an iteration's slice ahead of its
         * attention: the sliding-window layers' rings hold that beyond the window */
        if (r->seq->model)
                axp_seq_set_span(r->seq, MAX(s->s_chk, s->it_tokens));
        ret = sched_seq_begin(r->seq, r->tokens, r->n_tokens, &err);

        if (ret < 0) {
                rlist_remove(s, r);
                sched_fail(s, r, ret, err.msg[0] ? err.msg : "cannot stage the prompt");
                return ret;
        }
        r->staged = true;
        return 0;
}

double sched_now(axp_sched *s) {
        return s->env.now(s->env.userdata);
}

static bool aging_on(const axp_sched *s) {
        return s->cfg.policy == AXP_POLICY_AGENTXPU && s->cfg.aging_s > 0;
}

/* Aging: the oldest proactive request that has waited aging_s is promoted, one at a time
 * until it finishes. Under overload every proactive request ages; promoting them all would
 * hand the reactive requests' priority to the whole backlog, while promoting the oldest
 * still guarantees that each one finishes in turn. */
bool sched_aged(axp_sched *s, const sreq *r) {
        return r && r == s->promoted && aging_on(s);
}

static sreq *oldest_proactive(const axp_sched *s) {
        sreq *oldest = NULL;

        for (sreq *r = s->all; r; r = r->all_next)
                if (r->kind == AXP_PROACTIVE && !r->abort && r->where != W_FINISHED &&
                    (!oldest || r->t_arrival < oldest->t_arrival))
                        oldest = r;
        return oldest;
}

static void promote(axp_sched *s) {
        sreq *oldest;

        if (s->promoted || !aging_on(s))
                return;
        oldest = oldest_proactive(s);
        if (oldest && sched_now(s) - oldest->t_arrival >= s->cfg.aging_s)
                s->promoted = oldest;
}

void rlist_push(axp_sched *s, int list, sreq *r) {
        rlist *l = &s->lists[list];

        assert(list >= 0 && list < L__COUNT);
        assert(r->q_list < 0 && !r->q_prev && !r->q_next); /* in at most one list */
        r->q_list = list;
        r->q_next = NULL;
        r->q_prev = l->tail;
        if (l->tail)
                l->tail->q_next = r;
        else
                l->head = r;
        l->tail = r;
        l->n++;
}

void rlist_remove(axp_sched *s, sreq *r) {
        if (r->q_list < 0)
                return;
        rlist *l = &s->lists[r->q_list];
        assert(r->q_list < L__COUNT && l->n > 0);
        assert(r->q_prev ? r->q_prev->q_next == r : l->head == r);
        assert(r->q_next ? r->q_next->q_prev == r : l->tail == r);
        if (r->q_prev)
                r->q_prev->q_next = r->q_next;
        else
                l->head = r->q_next;
        if (r->q_next)
                r->q_next->q_prev = r->q_prev;
        else
                l->tail = r->q_prev;
        l->n--;
        r->q_prev = r->q_next = NULL;
        r->q_list = -1;
}

static sreq *find(const axp_sched *s, uint64_t id) {
        for (sreq *r = s->all; r; r = r->all_next)
                if (r->id == id)
                        return r;
        return NULL;
}

static void fill_stats(const sreq *r, double now, axp_req_stats *st) {
        *st = (axp_req_stats) {
                .prompt_tokens = (uint32_t) r->n_tokens,
                .prefill_tokens = (uint32_t) r->n_tokens,
                .generated_tokens = r->n_generated,
                .preemptions = r->preemptions,
        };
        double end = r->t_finish >= 0 ? r->t_finish : now;
        st->queue_wait_s = (r->t_first_kernel >= 0 ? r->t_first_kernel : end) - r->t_arrival;
        st->ttft_s = r->t_first_token >= 0 ? r->t_first_token - r->t_arrival : 0.0;
        if (r->n_generated > 1)
                st->tpot_s = (r->t_last_token - r->t_first_token) / (r->n_generated - 1);
        st->latency_s = end - r->t_arrival;
        if (r->abort && r->abort_reason == AXP_FINISH_ERROR)
                snprintf(st->error, sizeof(st->error), "%s", r->error);
}

void sched_finish(axp_sched *s, sreq *r, axp_finish_reason reason) {
        axp_req_stats st;

        assert(r->where != W_FINISHED);
        r->t_finish = sched_now(s);
        r->where = W_FINISHED;
        rlist_remove(s, r);
        if (r->lane >= 0 && s->active[r->lane] == r)
                s->active[r->lane] = NULL;
        if (s->warming == r)
                s->warming = NULL;
        if (s->promoted == r)
                s->promoted = NULL;
        assert(!r->abort || s->n_abort > 0);
        if (r->abort)
                s->n_abort--;
        assert(r->kind != AXP_REACTIVE || s->n_reactive > 0);
        if (r->kind == AXP_REACTIVE)
                s->n_reactive--;
        for (sreq **p = &s->all; *p; p = &(*p)->all_next)
                if (*p == r) {
                        *p = r->all_next;
                        break;
                }
        fill_stats(r, r->t_finish, &st);
        if (r->ops.finished) {
                s->in_event = true;
                r->ops.finished(r->userdata, r->id, reason, &st);
                s->in_event = false;
        }
        free(r->chunks);
        free(r->splits);
        free(r->tokens);
        free(r);
}

void sched_fail(axp_sched *s, sreq *r, int code, const char *what) {
        if (r->abort)
                return;
        r->abort = true;
        s->n_abort++;
        r->abort_reason = AXP_FINISH_ERROR;
        snprintf(r->error, sizeof(r->error), "%s (%s)", what, strerror(code < 0 ? -code : code));
}

void sched_after_head(axp_sched *s, sreq *r) {
        double now = sched_now(s);
        int32_t tok = 0;
        axp_finish_reason why = AXP_FINISH_STOP;
        bool go;

        if (r->abort) {
                sched_finish(s, r, r->abort_reason);
                return;
        }
        s->in_event = true;
        go = r->ops.next(r->userdata, r->id, r->seq, &tok, &why);
        s->in_event = false;
        r->n_generated++;
        if (r->t_first_token < 0)
                r->t_first_token = now;
        r->t_last_token = now;
        if (!go) {
                sched_finish(s, r, why);
                return;
        }
        if (r->seq->n_past + 1 > r->seq->n_ctx_max) {
                sched_finish(s, r, AXP_FINISH_LENGTH);
                return;
        }
        r->next_tok = tok;
        r->where = W_DECODE;
        if (r->q_list != L_DECODE) {
                rlist_remove(s, r);
                rlist_push(s, L_DECODE, r);
        }
}

double sched_predict(axp_sched *s, axp_role role, const axp_task *t) {
        axp_cost c = axp_task_cost(&s->shape, t);
        return axp_calib_latency(&s->devs[s->role_dev[role]].calib, c);
}

bool sched_decode_idle(axp_sched *s) {
        return !s->it.active && !s->parked.active && s->lists[L_DECODE].n == 0;
}

/* Proactive budgets: a token bucket of busy seconds per device, refilled at the share of its
 * time proactive work may take, holding at most duty_window_s of refill. On the desktop's GPU
 * (graphics protection) that is proactive_duty x (1 - external busy share); on the CPU (the
 * pressure guard) 1 - pressure x (1 - proactive_cpu_share): all of it while nothing else
 * wants the CPU, proactive_cpu_share while other processes keep it fully busy. Other devices
 * have no budget. */
static double budget_rate(const axp_sched *s, int dev) {
        const sdev *d = &s->devs[dev];
        double r = 1.0;

        if (d->graphics)
                r = s->cfg.proactive_duty * (1.0 - d->external_busy);
        else if (d->cpu)
                r = 1.0 - d->external_busy * (1.0 - s->cfg.proactive_cpu_share);
        return r > 0 ? r : 0;
}

static bool budget_unlimited(const axp_sched *s, int dev) {
        return s->cfg.policy != AXP_POLICY_AGENTXPU || budget_rate(s, dev) >= 1.0;
}

static void budget_refill(axp_sched *s, int dev) {
        sdev *d = &s->devs[dev];
        double now = sched_now(s);
        double cap = budget_rate(s, dev) * s->cfg.duty_window_s;

        d->credit += budget_rate(s, dev) * (now - d->credit_t);
        if (d->credit > cap)
                d->credit = cap;
        d->credit_t = now;
}

bool sched_budget_ok(axp_sched *s, int dev) {
        if (budget_unlimited(s, dev))
                return true;
        budget_refill(s, dev);
        if (s->devs[dev].credit > 1e-9)
                return true;
        s->devs[dev].budget_blocked = true;
        return false;
}

static bool reactive_decoding(const axp_sched *s) {
        for (const sreq *r = s->lists[L_DECODE].head; r; r = r->q_next)
                if (r->kind == AXP_REACTIVE)
                        return true;
        return false;
}

/* Contention guard: a memory-bound kernel does not start next to memory-bound work of
 * higher priority on the other role's device -- a running kernel, or a decode iteration in
 * progress (all its kernels stream the weights) -- until that side is done; but it waits no
 * longer than one preemption bound, so that the lower-priority pipeline is slowed, not
 * stopped. */
bool sched_guard_ok(axp_sched *s, int dev, const axp_task *t, int prio) {
        int dyn = s->role_dev[AXP_ROLE_DYNAMIC];
        sdev *me = &s->devs[dev];
        bool conflict = false;
        double now;

        if (s->cfg.policy != AXP_POLICY_AGENTXPU || !s->cfg.contention_guard)
                return true;
        for (int o = 0; o < s->n_devs && !conflict; o++) {
                sdev *d = &s->devs[o];
                if (o == dev)
                        continue;
                if (d->busy && d->mem_bound && d->prio > prio)
                        conflict = true;
                if (o == dyn && prio == 0 &&
                    (s->it.active ? s->it.prio > 0 : reactive_decoding(s)))
                        conflict = true;
        }
        if (!conflict || !axp_calib_memory_bound(&me->calib, axp_task_cost(&s->shape, t)))
                return true;
        now = sched_now(s);
        if (me->guard_since < 0)
                me->guard_since = now;
        if (now - me->guard_since >= s->cfg.preempt_bound_s)
                return true;
        if (me->guard_since + s->cfg.preempt_bound_s < s->wake)
                s->wake = me->guard_since + s->cfg.preempt_bound_s;
        return false;
}

static void task_reqs(axp_sched *s, const axp_task *t, src_kind src, sreq *r, uint64_t *ids,
                      axp_kind *kinds) {
        for (int i = 0; i < t->n_spans; i++) {
                sreq *q = r;
                if (src == SRC_ITER) {
                        /* HEAD covers only the members with a head span, in order */
                        int k = -1;
                        for (int j = 0, seen = -1; j < s->it.n; j++) {
                                if (t->op == AXP_OP_HEAD && !s->it.head[j])
                                        continue;
                                if (++seen == i) {
                                        k = j;
                                        break;
                                }
                        }
                        q = k >= 0 ? s->it.reqs[k] : NULL;
                }
                ids[i] = q ? q->id : 0;
                kinds[i] = q ? q->kind : AXP_PROACTIVE;
        }
}

int sched_issue(axp_sched *s, int dev, const axp_task *task, src_kind src, sreq *r, int prio,
                bool proactive) {
        sdev *d = &s->devs[dev];
        double now = sched_now(s);
        uint64_t ids[AXP_MAX_BATCH];
        axp_kind kinds[AXP_MAX_BATCH];
        axp_task bt;
        const axp_task *t = task;
        int ret;

        assert(dev >= 0 && dev < s->n_devs && !d->busy);
        assert(src == SRC_UNIT ? r != NULL : src == SRC_ITER && s->it.active && !s->it.issued);
        /* a batch within the limit, each span within its seq's pending tokens */
        assert(t->n_spans >= 1 && t->n_spans <= AXP_MAX_BATCH);
        for (int i = 0; i < t->n_spans; i++)
                assert(t->spans[i].seq && t->spans[i].t0 >= 0 &&
                       t->spans[i].t0 < t->spans[i].t1 && t->spans[i].t1 <= t->spans[i].seq->n_new);
        /* a task of proactive requests only is background work, which the device may run
         * at a lower priority than the rest of the desktop; but not while a reactive request
         * is in the engine, which must not wait behind a kernel other programs keep off the
         * CPU, nor under the baselines, which have no priorities */
        bool background = proactive && s->n_reactive == 0 &&
                          s->cfg.policy == AXP_POLICY_AGENTXPU;
        if (background != task->background) {
                bt = *task;
                bt.background = background;
                t = &bt;
        }
        task_reqs(s, t, src, r, ids, kinds);
        s->in_event = true;
        ret = s->env.issue(s->env.userdata, dev, t);
        s->in_event = false;
        if (ret < 0)
                return ret;
        d->busy = true;
        d->guard_since = -1;
        d->t_start = now;
        d->src = src;
        d->req = r;
        d->task = *t;
        d->prio = prio;
        d->proactive = proactive;
        d->mem_bound = axp_calib_memory_bound(&d->calib, axp_task_cost(&s->shape, t));
        if (s->trace) {
                s->in_event = true;
                s->trace(s->trace_ud, now, dev, t, ids, kinds);
                s->in_event = false;
        }

        if (src == SRC_UNIT) {
                r->in_flight++;
                r->suspended = false;
                prefill_issued(s, r, t);
                if (t->op != AXP_OP_EMBED && r->t_first_kernel < 0)
                        r->t_first_kernel = now;
        } else {
                s->it.issued = true;
                for (int i = 0; i < s->it.n; i++) {
                        sreq *q = s->it.reqs[i];
                        q->in_flight++;
                        if (t->op != AXP_OP_EMBED && q->t_first_kernel < 0)
                                q->t_first_kernel = now;
                }
        }
        return 0;
}

static bool serves_role(const axp_sched *s, int dev) {
        return dev == s->role_dev[AXP_ROLE_STATIC] || dev == s->role_dev[AXP_ROLE_DYNAMIC];
}

static bool draining(const axp_sched *s) {
        return s->pending_policy != s->cfg.policy;
}

static void activate(axp_sched *s, sreq *r, int lane) {
        assert(lane >= 0 && lane < LANE__COUNT && !s->active[lane]);
        rlist_remove(s, r);
        s->active[lane] = r;
        r->lane = lane;
        if (!r->staged && prefill_start(s, r) < 0)
                return; /* failed: reaped on the next round */
}

/* A started prefill that stops issuing because a reactive one takes over is preempted. */
static void suspend(axp_sched *s, sreq *p) {
        if (p && prefill_started(p) && !sched_aged(s, p) && !p->suspended) {
                p->suspended = true;
                p->preemptions++;
        }
}

/* The assist lane may run while no reactive request is in the engine. */
static bool assist_allowed(axp_sched *s) {
        return s->cfg.policy == AXP_POLICY_AGENTXPU && s->cfg.assist && s->n_reactive == 0 &&
               s->role_dev[AXP_ROLE_STATIC] != s->role_dev[AXP_ROLE_DYNAMIC];
}

/* On-the-fly warm-up (Agent.xpu §4.3): while proactive requests wait (queued, or preempted
 * in the proactive lane), one host worker prepares the static role's kernels for their own
 * shapes (remainder, attention), the request the proactive lane runs next first. A prepared
 * request prefills on the static role alone. */
static void warmup_step(axp_sched *s) {
        double w = s->devs[s->role_dev[AXP_ROLE_STATIC]].warmup_s;
        sreq *r = NULL;

        /* a preempted request of the static lanes waits too */
        for (int l = LANE_PROACTIVE; l <= LANE_PROACTIVE2 && !r; l++) {
                sreq *q = s->active[l];
                if (q && q->suspended && !q->prepared && !q->abort)
                        r = q;
        }

        if (s->warming && sched_now(s) >= s->warm_end) {
                s->warming->prepared = true;
                s->warming = NULL;
        }
        if (s->warming || !(w > 0) || !s->cfg.warmup || s->cfg.policy != AXP_POLICY_AGENTXPU ||
            s->role_dev[AXP_ROLE_STATIC] == s->role_dev[AXP_ROLE_DYNAMIC])
                return;
        if (!r)
                for (r = s->lists[L_PREFILL_PROACTIVE].head; r; r = r->q_next)
                        if (!r->prepared && !r->abort)
                                break;
        if (!r)
                return;
        s->warming = r;
        s->warm_end = sched_now(s) + w;
        s->warmup_total += w;
}

/* The assist lane takes a request the warm-up has not reached, else the newest: the static
 * lane serves the queue's head. */
static sreq *assist_pick(axp_sched *s) {
        for (sreq *r = s->lists[L_PREFILL_PROACTIVE].head; r; r = r->q_next)
                if (!r->prepared && s->warming != r)
                        return r;
        return s->lists[L_PREFILL_PROACTIVE].tail;
}

/* On one device serving both roles, proactive prompts ride in the iterations beside the
 * decode rows (continuous batching: one pass over the weights for both) whenever there is
 * decode work; the proactive lane, whose chunks run alone, starts a prompt only when there
 * is none. */
static bool lane_device_idle(axp_sched *s) {
        return sched_decode_idle(s) && s->lists[L_FCFS].n == 0;
}

/* Move queue heads into the prefill lanes as the policy allows. */
static void admit(axp_sched *s) {
        sreq *hr = s->lists[L_PREFILL_REACTIVE].head, *hp = s->lists[L_PREFILL_PROACTIVE].head;

        if (draining(s))
                return;
        switch (s->cfg.policy) {
        case AXP_POLICY_AGENTXPU: {
                sreq *p = s->active[LANE_PROACTIVE];
                if (!s->active[LANE_REACTIVE] && s->active[LANE_REACTIVE2]) {
                        /* the first reactive prefill is done: the second takes its lane */
                        sreq *r2 = s->active[LANE_REACTIVE2];
                        s->active[LANE_REACTIVE2] = NULL;
                        s->active[LANE_REACTIVE] = r2;
                        r2->lane = LANE_REACTIVE;
                }
                if (!s->active[LANE_REACTIVE] && hr) {
                        /* without preemption a started proactive prefill runs to its end */
                        if (s->cfg.preemption || !p || !prefill_started(p)) {
                                suspend(s, p);
                                suspend(s, s->active[LANE_PROACTIVE2]);
                                suspend(s, s->active[LANE_ASSIST]);
                                activate(s, hr, LANE_REACTIVE);
                        }
                }
                hr = s->lists[L_PREFILL_REACTIVE].head;
                if (s->active[LANE_REACTIVE] && !s->active[LANE_REACTIVE2] && hr &&
                    s->cfg.dual_reactive &&
                    s->role_dev[AXP_ROLE_STATIC] != s->role_dev[AXP_ROLE_DYNAMIC])
                        activate(s, hr, LANE_REACTIVE2);
                if (!s->active[LANE_PROACTIVE] && s->active[LANE_PROACTIVE2]) {
                        sreq *p2 = s->active[LANE_PROACTIVE2];
                        s->active[LANE_PROACTIVE2] = NULL;
                        s->active[LANE_PROACTIVE] = p2;
                        p2->lane = LANE_PROACTIVE;
                }
                hp = s->lists[L_PREFILL_PROACTIVE].head;
                if (!s->active[LANE_PROACTIVE] && hp &&
                    (!s->active[LANE_REACTIVE] || sched_aged(s, hp) || !s->cfg.preemption) &&
                    (!sched_piggyback_on(s) || lane_device_idle(s) || sched_aged(s, hp)))
                        activate(s, hp, LANE_PROACTIVE);
                hp = s->lists[L_PREFILL_PROACTIVE].head;
                if (s->active[LANE_PROACTIVE] && !s->active[LANE_PROACTIVE2] && hp &&
                    s->cfg.pipeline && !s->active[LANE_REACTIVE] &&
                    s->role_dev[AXP_ROLE_STATIC] != s->role_dev[AXP_ROLE_DYNAMIC])
                        activate(s, hp, LANE_PROACTIVE2);
                /* the static role is taken and more proactive work waits: a second prefill
                 * on the dynamic role, if the budget has room */
                if (!s->active[LANE_ASSIST] && s->active[LANE_PROACTIVE] &&
                    s->lists[L_PREFILL_PROACTIVE].head && assist_allowed(s) &&
                    sched_budget_ok(s, s->role_dev[AXP_ROLE_DYNAMIC]))
                        activate(s, assist_pick(s), LANE_ASSIST);
                break;
        }
        case AXP_POLICY_SERIAL:
                /* one request end to end: the next starts once nothing else is in the engine */
                if (s->active[LANE_REACTIVE] || s->active[LANE_PROACTIVE] || s->it.active ||
                    s->lists[L_DECODE].n)
                        break;
                if (hr && (!hp || hr->t_arrival <= hp->t_arrival))
                        activate(s, hr, LANE_REACTIVE);
                else if (hp)
                        activate(s, hp, LANE_PROACTIVE);
                break;
        case AXP_POLICY_FCFS:
        default:
                break; /* iterations take their requests from the queues themselves */
        }
}

/* May r's prefill issue on device dev at all right now? */
static bool prefill_may_run(axp_sched *s, sreq *r, int dev) {
        if (s->cfg.policy != AXP_POLICY_AGENTXPU || r->kind == AXP_REACTIVE)
                return true;
        if (r->lane == LANE_ASSIST && !assist_allowed(s) && !sched_aged(s, r))
                return false;
        if (!s->active[LANE_REACTIVE] || !s->cfg.preemption)
                return true;
        /* an aged proactive prefill runs beside the reactive one, on the dynamic role */
        return sched_aged(s, r) && dev == s->role_dev[AXP_ROLE_DYNAMIC];
}

static void use_decay(axp_sched *s) {
        double now = sched_now(s), k = exp(-(now - s->use_t) / 10.0);

        s->use_decode *= k;
        s->use_lane *= k;
        s->use_t = now;
}

/* May a prefill lane running whole on the dynamic role go before decode? */
static bool use_lane_ok(axp_sched *s) {
        use_decay(s);
        return sched_decode_idle(s) || s->use_lane <= s->use_decode;
}

static bool issue_iter(axp_sched *s, int dev) {
        axp_task t;

        if (dev != s->role_dev[AXP_ROLE_DYNAMIC])
                return false;
        if (!iter_form(s) || s->it.issued)
                return false;
        iter_task(s, &t);
        if (!sched_guard_ok(s, dev, &t, s->it.prio))
                return false;
        /* a step of proactive requests only keeps to the device's budget kernel by kernel: it
         * waits between two kernels once the budget is spent (as a preempted one does), unless
         * a reactive request is in the engine, which may be waiting for the step to end */
        if (s->it.prio == 0 && s->n_reactive == 0 && s->cfg.policy == AXP_POLICY_AGENTXPU &&
            !sched_budget_ok(s, dev))
                return false;
        if (sched_issue(s, dev, &t, SRC_ITER, NULL, s->it.prio, s->it.prio == 0) < 0)
                return false;
        s->last_lane = -1;
        return true;
}

static bool issue_lane(axp_sched *s, int lane, int dev) {
        sreq *r = s->active[lane];
        axp_task t;

        if (!r || r->abort || !r->staged || !prefill_may_run(s, r, dev))
                return false;
        if (prefill_pick(s, r, dev, &t) < 0)
                return false;
        if (r->kind == AXP_PROACTIVE && !sched_budget_ok(s, dev))
                return false;
        if (!sched_guard_ok(s, dev, &t, r->kind == AXP_REACTIVE))
                return false;
        if (sched_issue(s, dev, &t, SRC_UNIT, r, r->kind == AXP_REACTIVE,
                        r->kind == AXP_PROACTIVE) < 0)
                return false;
        s->devs[dev].lane_kernel = lane == LANE_ASSIST || lane == LANE_REACTIVE2;
        if (dev == s->role_dev[AXP_ROLE_DYNAMIC])
                s->last_lane = lane;
        return true;
}

/* One device serving both roles runs the static role's proactive chunks not beside decode,
 * as an NPU would, but in its place: there they yield to a decode iteration that carries
 * reactive requests, as the contention guard defers lower-priority work (an aged request
 * does not yield, so an unbroken reactive stream cannot starve it). */
static bool yields_to_reactive_decode(const axp_sched *s, int dev) {
        const sreq *p = s->active[LANE_PROACTIVE];
        return s->cfg.policy == AXP_POLICY_AGENTXPU && s->cfg.contention_guard &&
               dev == s->role_dev[AXP_ROLE_STATIC] && dev == s->role_dev[AXP_ROLE_DYNAMIC] &&
               reactive_decoding(s) && !(p && sched_aged((axp_sched *) s, p));
}

static bool try_issue(axp_sched *s, int dev) {
        bool lane_first, p_aged;

        if (s->cfg.policy == AXP_POLICY_FCFS)
                return issue_iter(s, dev);
        /* prefill-first arbitration: a ready prefill kernel takes the dynamic role before the
         * next decode kernel */
        if (s->cfg.policy == AXP_POLICY_AGENTXPU && !s->cfg.prefill_first && issue_iter(s, dev))
                return true;
        /* two reactive prefills share the dynamic role kernel by kernel: the second one
         * starts at once (it does not preempt the first; both go on) */
        if (s->last_lane == LANE_REACTIVE && dev == s->role_dev[AXP_ROLE_DYNAMIC] &&
            use_lane_ok(s) && issue_lane(s, LANE_REACTIVE2, dev))
                return true;
        if (issue_lane(s, LANE_REACTIVE, dev))
                return true;
        if (yields_to_reactive_decode(s, dev) && issue_iter(s, dev))
                return true;
        /* a promoted (aged) proactive prefill comes before a second reactive one */
        p_aged = s->active[LANE_PROACTIVE] && sched_aged(s, s->active[LANE_PROACTIVE]);
        if (p_aged && issue_lane(s, LANE_PROACTIVE, dev))
                return true;
        if (!p_aged && issue_lane(s, LANE_PROACTIVE, dev))
                return true;
        if (issue_lane(s, LANE_PROACTIVE2, dev))
                return true;
        /* A whole prefill on the dynamic role (the second reactive lane, the assist lane) is
         * more than the short bursts prefill-first is meant for: it shares the dynamic role
         * with decode, whichever used less of it lately going first. */
        lane_first = use_lane_ok(s);
        if (lane_first && (issue_lane(s, LANE_REACTIVE2, dev) || issue_lane(s, LANE_ASSIST, dev)))
                return true;
        if (issue_iter(s, dev))
                return true;
        return !lane_first && (issue_lane(s, LANE_REACTIVE2, dev) || issue_lane(s, LANE_ASSIST, dev));
}

/* Finish requests that were cancelled or failed once nothing of them is in flight. */
static void reap(axp_sched *s) {
        sreq *r = s->all;

        if (s->n_abort == 0)
                return;
        while (r) {
                sreq *next = r->all_next;
                if (r->abort && r->in_flight == 0 && !r->in_iter)
                        sched_finish(s, r, r->abort_reason);
                r = next;
        }
}

static bool anything_in_flight(const axp_sched *s) {
        for (int i = 0; i < s->n_devs; i++)
                if (s->devs[i].busy)
                        return true;
        for (int l = 0; l < LANE__COUNT; l++)
                if (s->active[l])
                        return true;
        return s->it.active || s->parked.active || s->lists[L_DECODE].n || s->lists[L_FCFS].n;
}

static void arm_timer(axp_sched *s) {
        double now = sched_now(s), t = s->wake;

        if (s->warming)
                t = fmin(t, s->warm_end);
        for (int i = 0; i < s->n_devs; i++) {
                const sdev *d = &s->devs[i];
                if (d->budget_blocked && budget_rate(s, i) > 0)
                        t = fmin(t, d->credit_t + (1e-9 - d->credit) / budget_rate(s, i) + 1e-9);
        }
        if (aging_on(s) && !s->promoted) {
                /* promotion changes decisions: wake when the oldest proactive request ages */
                const sreq *oldest = oldest_proactive(s);
                if (oldest)
                        t = fmin(t, oldest->t_arrival + s->cfg.aging_s);
        }
        if (t <= now)
                t = now + 1e-9;
        if (t != s->timer_armed) {
                s->timer_armed = t;
                s->in_event = true;
                s->env.set_timer(s->env.userdata, t);
                s->in_event = false;
        }
}

static void dispatch(axp_sched *s) {
        reap(s);
        if (draining(s) && !anything_in_flight(s))
                s->cfg.policy = s->pending_policy;
        for (int i = 0; i < s->n_devs; i++)
                s->devs[i].budget_blocked = false;
        s->wake = INFINITY;
        promote(s);
        for (int round = 0; round < 2 * s->n_devs + 2; round++) {
                bool any = false;
                warmup_step(s);
                admit(s);
                reap(s);
                for (int d = 0; d < s->n_devs; d++)
                        if (!s->devs[d].busy && serves_role(s, d) && try_issue(s, d))
                                any = true;
                if (!any)
                        break;
        }
        arm_timer(s);
}

/* The largest power of two up to limit whose chunk kernels -- K1 and K3 on either role, and
 * the attention of a chunk's rows at the longest context on the dynamic role -- finish
 * within the preemption bound. S_chk is that up to max_ctx / 16, so that a prompt splits
 * into enough chunks for Algorithm 1 and leaves only a small dynamic remainder. */
static int fit_bound(const axp_sched *s, int limit) {
        int best = 16;
        double ctx = s->cfg.max_ctx;

        for (int n = 16; n <= limit; n *= 2) {
                axp_cost attn = axp_heg_cost(&s->shape, AXP_OP_K2, n, 1, n * ctx, ctx);
                double worst = axp_calib_latency(&s->devs[s->role_dev[AXP_ROLE_DYNAMIC]].calib, attn);
                for (int role = 0; role < AXP_ROLE__COUNT; role++)
                        for (axp_op op = AXP_OP_K1; op <= AXP_OP_K3; op += 2) {
                                axp_cost c = axp_heg_cost(&s->shape, op, n, 1, 0, 0);
                                worst = fmax(worst, axp_calib_latency(
                                                            &s->devs[s->role_dev[role]].calib, c));
                        }
                if (worst > s->cfg.preempt_bound_s)
                        break;
                best = n;
        }
        return best;
}

int axp_sched_new(const axp_sched_config *c, const axp_heg_shape *shape, const axp_sched_env *env,
                  const axp_sched_device *devs, int n_devs, int static_dev, int dynamic_dev,
                  axp_sched **ret, axp_error *err) {
        axp_sched *s;

        if (!c || !shape || !env || !env->now || !env->issue || !env->set_timer || !devs)
                return axp_errorf(err, -EINVAL, "scheduler: missing configuration");
        if (n_devs <= 0 || static_dev < 0 || static_dev >= n_devs || dynamic_dev < 0 ||
            dynamic_dev >= n_devs)
                return axp_errorf(err, -EINVAL, "scheduler: roles must name one of the %d devices",
                                  n_devs);
        if (c->policy < 0 || c->policy >= AXP_POLICY__COUNT)
                return axp_errorf(err, -EINVAL, "scheduler: unknown policy");
        if (!(c->preempt_bound_s > 0) || c->b_cap < 0 || c->max_batch < 1 ||
            c->max_batch > AXP_MAX_BATCH || c->max_ctx < 16 || c->s_chk < 0 ||
            c->proactive_duty < 0 || c->proactive_duty > 1 || c->duty_window_s <= 0 ||
            !(c->proactive_cpu_share > 0 && c->proactive_cpu_share <= 1) ||
            c->fcfs_tokens < 1 || !(c->piggyback_slack >= 0) || c->piggyback_slack > 10)
                return axp_errorf(err, -EINVAL,
                                  "scheduler: a setting is out of range (batch 1..%d, duty 0..1, "
                                  "CPU share above 0 up to 1, bound and window > 0, context >= 16, "
                                  "slack 0..10)",
                                  AXP_MAX_BATCH);
        if (shape->n_layer <= 0 || shape->n_embd <= 0)
                return axp_errorf(err, -EINVAL, "scheduler: the model shape is empty");
        for (int i = 0; i < n_devs; i++)
                if (!(axp_calib_latency(&devs[i].calib, (axp_cost) { 1e9, 1e9, 0 }) < INFINITY))
                        return axp_errorf(err, -EINVAL,
                                          "scheduler: device '%s' has no calibration",
                                          devs[i].name ? devs[i].name : "?");

        s = calloc(1, sizeof(*s));
        if (!s)
                return axp_errorf(err, -ENOMEM, "out of memory");
        s->devs = calloc(n_devs, sizeof(*s->devs));
        if (!s->devs) {
                free(s);
                return axp_errorf(err, -ENOMEM, "out of memory");
        }
        s->cfg = *c;
        s->pending_policy = c->policy;
        s->shape = *shape;
        s->env = *env;
        s->n_devs = n_devs;
        for (int i = 0; i < n_devs; i++) {
                s->devs[i].name = devs[i].name;
                s->devs[i].calib = devs[i].calib;
                s->devs[i].warmup_s = devs[i].warmup_s;
                s->devs[i].graphics = devs[i].graphics;
                s->devs[i].cpu = devs[i].cpu;
                s->devs[i].guard_since = -1;
        }
        s->role_dev[AXP_ROLE_STATIC] = static_dev;
        s->role_dev[AXP_ROLE_DYNAMIC] = dynamic_dev;
        s->next_id = c->first_id ? c->first_id : 1;
        s->timer_armed = INFINITY;
        s->last_lane = -1;
        s->use_t = sched_now(s);
        s->s_chk = c->s_chk > 0 ? c->s_chk : fit_bound(s, MAX(16, c->max_ctx / 16));
        s->it_tokens = MAX(s->s_chk, fit_bound(s, c->fcfs_tokens));
        for (int i = 0; i < n_devs; i++) {
                s->devs[i].credit_t = sched_now(s);
                s->devs[i].credit = budget_rate(s, i) * s->cfg.duty_window_s;
        }
        *ret = s;
        return 0;
}

void axp_sched_free(axp_sched *s) {
        if (!s)
                return;
        assert(!s->in_event);
        while (s->all) {
                sreq *r = s->all;
                if (!r->abort) {
                        r->abort = true;
                        s->n_abort++;
                }
                r->abort_reason = AXP_FINISH_CANCELLED;
                sched_finish(s, r, AXP_FINISH_CANCELLED);
        }
        free(s->devs);
        free(s);
}

int axp_sched_submit(axp_sched *s, axp_kind kind, axp_seq *seq, const int32_t *tokens, int n,
                     const axp_sched_req_ops *ops, void *userdata, uint64_t *ret_id,
                     axp_error *err) {
        sreq *r;

        assert(!s->in_event);
        if (kind != AXP_REACTIVE && kind != AXP_PROACTIVE)
                return axp_errorf(err, -EINVAL, "unknown request kind");
        if (!seq || !ops || !ops->next || n <= 0 || (seq->model && !tokens))
                return axp_errorf(err, -EINVAL, "a request needs a sequence and tokens");
        if (seq->n_past + n > seq->n_ctx_max)
                return axp_seq_overflow_error(err, n, seq->n_past, seq->n_ctx_max);
        if (n > s->cfg.max_ctx)
                return axp_errorf(err, -E2BIG, "the prompt is %d tokens; one turn may prefill at most %d",
                                  n, s->cfg.max_ctx);
        r = calloc(1, sizeof(*r));
        if (!r)
                return axp_errorf(err, -ENOMEM, "out of memory");
        if (tokens) {
                r->tokens = malloc(sizeof(int32_t) * n);
                if (!r->tokens) {
                        free(r);
                        return axp_errorf(err, -ENOMEM, "out of memory");
                }
                memcpy(r->tokens, tokens, sizeof(int32_t) * n);
        }
        r->id = s->next_id++;
        r->kind = kind;
        r->seq = seq;
        r->n_tokens = n;
        r->ops = *ops;
        r->userdata = userdata;
        r->where = W_QUEUED;
        r->q_list = -1;
        r->lane = -1;
        r->t_arrival = sched_now(s);
        r->t_first_kernel = r->t_first_token = r->t_last_token = r->t_finish = -1;
        if (kind == AXP_REACTIVE) {
                s->n_reactive++;
                /* a background task in progress holds up the reactive request until the next
                 * kernel boundary: it finishes at normal priority */
                for (int i = 0; i < s->n_devs && s->env.hurry; i++)
                        if (s->devs[i].busy && s->devs[i].proactive) {
                                s->in_event = true;
                                s->env.hurry(s->env.userdata, i);
                                s->in_event = false;
                        }
        }
        r->prepared = kind == AXP_PROACTIVE && s->devs[s->role_dev[AXP_ROLE_STATIC]].warmup_s == 0;
        r->all_next = s->all;
        s->all = r;
        rlist_push(s, kind == AXP_REACTIVE ? L_PREFILL_REACTIVE : L_PREFILL_PROACTIVE, r);
        if (ret_id)
                *ret_id = r->id;
        dispatch(s);
        return 0;
}

int axp_sched_cancel(axp_sched *s, uint64_t id) {
        sreq *r = find(s, id);

        assert(!s->in_event);
        if (!r || r->where == W_FINISHED)
                return -ENOENT;
        if (!r->abort) {
                r->abort = true;
                s->n_abort++;
                r->abort_reason = AXP_FINISH_CANCELLED;
        }
        dispatch(s);
        return 0;
}

void axp_sched_task_done(axp_sched *s, int dev, int rc, const char *msg, double busy_s) {
        sdev *d;
        double dt;

        assert(!s->in_event);
        if (dev < 0 || dev >= s->n_devs || !s->devs[dev].busy)
                return;
        d = &s->devs[dev];
        dt = sched_now(s) - d->t_start;
        d->busy = false;
        d->st.busy_s += dt;
        d->st.tasks++;
        if (d->proactive)
                d->st.busy_proactive_s += dt;
        if (d->proactive && !budget_unlimited(s, dev)) {
                /* what the device really worked, where the environment measured it (never
                 * more than the task's time, which a clock's granularity could exceed) */
                budget_refill(s, dev);
                d->credit -= busy_s >= 0 && busy_s < dt ? busy_s : dt;
        }
        if (dev == s->role_dev[AXP_ROLE_DYNAMIC]) {
                use_decay(s);
                if (d->lane_kernel)
                        s->use_lane += dt;
                else if (d->src == SRC_ITER)
                        s->use_decode += dt;
        }
        d->lane_kernel = false;
        if (d->src == SRC_UNIT) {
                *(d->req->kind == AXP_REACTIVE ? &d->st.prefill_reactive_s
                                               : &d->st.prefill_proactive_s) += dt;
                assert(d->req->in_flight > 0);
                d->req->in_flight--;
                prefill_done(s, d->req, &d->task, rc, msg);
        } else if (d->src == SRC_ITER) {
                bool react = s->it.prio > 0;
                *(react ? &d->st.steps_reactive_s : &d->st.steps_proactive_s) += dt;
                if (d->task.op == AXP_OP_EMBED)
                        (*(react ? &d->st.steps_reactive : &d->st.steps_proactive))++;
                assert(s->it.active && s->it.issued);
                for (int i = 0; i < s->it.n; i++) {
                        assert(s->it.reqs[i]->in_flight > 0);
                        s->it.reqs[i]->in_flight--;
                }
                iter_task_done(s, rc, msg);
        }
        d->src = SRC_NONE;
        d->req = NULL;
        dispatch(s);
}

void axp_sched_timer(axp_sched *s) {
        assert(!s->in_event);
        s->timer_armed = INFINITY;
        dispatch(s);
}

static void set_external(axp_sched *s, int dev, double fraction) {
        if (!(fraction >= 0))
                fraction = 0;
        if (fraction > 1)
                fraction = 1;
        budget_refill(s, dev);
        s->devs[dev].external_busy = fraction;
}

void axp_sched_set_external_busy(axp_sched *s, double fraction) {
        assert(!s->in_event);
        set_external(s, s->role_dev[AXP_ROLE_DYNAMIC], fraction);
        dispatch(s);
}

void axp_sched_set_cpu_pressure(axp_sched *s, double fraction) {
        assert(!s->in_event);
        for (int i = 0; i < s->n_devs; i++)
                if (s->devs[i].cpu)
                        set_external(s, i, fraction);
        dispatch(s);
}

double axp_sched_proactive_share(const axp_sched *s, int dev) {
        if (dev < 0 || dev >= s->n_devs || budget_unlimited(s, dev))
                return 1.0;
        return budget_rate(s, dev);
}

int axp_sched_set_policy(axp_sched *s, axp_policy p) {
        assert(!s->in_event);
        if (p < 0 || p >= AXP_POLICY__COUNT)
                return -EINVAL;
        s->pending_policy = p;
        dispatch(s);
        return 0;
}

axp_policy axp_sched_policy(const axp_sched *s) {
        return s->pending_policy;
}

double axp_sched_warmup_seconds(const axp_sched *s) {
        return s->warmup_total;
}

int axp_sched_s_chk(const axp_sched *s) {
        return s->s_chk;
}

bool axp_sched_idle(const axp_sched *s) {
        return !s->all && !anything_in_flight(s);
}

void axp_sched_status_get(const axp_sched *s, axp_sched_status *ret) {
        unsigned running = 0;

        for (const sreq *r = s->all; r; r = r->all_next)
                if (r->where != W_QUEUED)
                        running++;
        *ret = (axp_sched_status) {
                .queued_reactive = 0,
                .queued_proactive = 0,
                .running = running,
        };
        for (const sreq *r = s->all; r; r = r->all_next)
                if (r->where == W_QUEUED) {
                        if (r->kind == AXP_REACTIVE)
                                ret->queued_reactive++;
                        else
                                ret->queued_proactive++;
                }
}

int axp_sched_request_info(const axp_sched *s, uint64_t id, axp_req_state *ret_state,
                           axp_req_stats *ret_stats) {
        const sreq *r = find(s, id);

        if (!r)
                return -ENOENT;
        if (ret_state)
                *ret_state = r->where == W_QUEUED    ? AXP_STATE_QUEUED
                             : r->where == W_DECODE  ? AXP_STATE_DECODE
                             : r->where == W_FINISHED ? AXP_STATE_FINISHED
                                                      : AXP_STATE_PREFILL;
        if (ret_stats)
                fill_stats(r, s->env.now(s->env.userdata), ret_stats);
        return 0;
}

void axp_sched_device_stats(const axp_sched *s, int dev, axp_sched_dev_stats *ret) {
        if (dev < 0 || dev >= s->n_devs) {
                *ret = (axp_sched_dev_stats) { 0 };
                return;
        }
        *ret = s->devs[dev].st;
}

void axp_sched_set_trace(axp_sched *s, axp_sched_trace_fn fn, void *userdata) {
        s->trace = fn;
        s->trace_ud = userdata;
}

const char *axp_kind_name(axp_kind k) {
        return k == AXP_REACTIVE ? "reactive" : k == AXP_PROACTIVE ? "proactive" : "unknown";
}

const char *axp_req_state_name(axp_req_state s) {
        switch (s) {
        case AXP_STATE_QUEUED:
                return "queued";
        case AXP_STATE_PREFILL:
                return "prefill";
        case AXP_STATE_DECODE:
                return "decode";
        case AXP_STATE_FINISHED:
                return "finished";
        }
        return "unknown";
}
