/* SPDX-License-Identifier: MIT */
/* Decode iterations: a batch of spans passes through EMBED, K1/K2/K3 of every layer and
 * HEAD on the dynamic role, one kernel at a time, so that prefill kernels can take the
 * dynamic role between any two of them. The batch is formed anew for every iteration
 * (continuous batching): by Algorithm 2 under agentxpu, in arrival order under fcfs (which
 * also fuses prefill chunks of waiting requests into the iteration, as llama-server and
 * OpenVINO's continuous batching do) and from the single running request under serial.
 * Under agentxpu on one shared device, slices of proactive prompts ride in the iterations
 * (slack-aware piggybacking, below). */
#include <assert.h>
#include <math.h>
#include <stdlib.h>

#include "sched-internal.h"

static bool add_member(axp_sched *s, sreq *r, int t0, int t1, bool head) {
        iter *it = &s->it;

        if (it->n >= AXP_MAX_BATCH)
                return false;
        /* a request is in the iteration once, with a span of its pending tokens */
        assert(t0 >= 0 && t0 < t1 && t1 <= r->seq->n_new);
        for (int i = 0; i < it->n; i++)
                assert(it->reqs[i] != r);
        it->reqs[it->n] = r;
        it->t0[it->n] = t0;
        it->t1[it->n] = t1;
        it->head[it->n] = head;
        it->n++;
        return true;
}

/* Stage the token sampled last for a decode member. */
static bool stage_decode(axp_sched *s, sreq *r) {
        axp_error err = { 0 };
        int ret = sched_seq_begin(r->seq, &r->next_tok, 1, &err);

        if (ret < 0) {
                sched_fail(s, r, ret, err.msg[0] ? err.msg : "cannot stage the next token");
                return false;
        }
        return true;
}

static int by_length(const void *a, const void *b) {
        const sreq *x = *(const sreq *const *) a, *y = *(const sreq *const *) b;
        int lx = x->seq->n_past, ly = y->seq->n_past;

        if (lx != ly)
                return lx < ly ? -1 : 1;
        return x->t_arrival < y->t_arrival ? -1 : x->t_arrival > y->t_arrival;
}

/* Algorithm 2, reactive-first batching: every reactive request; aged proactive requests
 * past the cap; other proactive requests, shortest first, while the batch is below B_cap
 * -- or freely (up to max_batch) when no reactive request decodes. The longest proactive
 * requests are the ones left out. */
static void pick_batch(axp_sched *s, sreq **batch, int *ret_n) {
        sreq *pro[AXP_MAX_BATCH * 4];
        int n = 0, n_pro = 0, n_react = 0, max = s->cfg.max_batch;
        bool rf = s->cfg.reactive_first && s->cfg.policy == AXP_POLICY_AGENTXPU;

        for (sreq *r = s->lists[L_DECODE].head; r; r = r->q_next) {
                if (r->abort || r->in_iter) /* in_iter: a member of the parked iteration */
                        continue;
                if (rf && r->kind == AXP_REACTIVE) {
                        if (n < max)
                                batch[n++] = r;
                        n_react++;
                } else if (rf && sched_aged(s, r)) {
                        if (n < max)
                                batch[n++] = r; /* promoted: bypasses B_cap */
                } else if (!rf) {
                        if (n < max)
                                batch[n++] = r; /* arrival order */
                } else if (n_pro < (int) ELEMENTSOF(pro)) {
                        pro[n_pro++] = r;
                }
        }
        qsort(pro, n_pro, sizeof(pro[0]), by_length);
        for (int i = 0; i < n_pro && n < max; i++)
                if (n_react == 0 || n < s->cfg.b_cap)
                        batch[n++] = pro[i];
        assert(n <= max && max <= AXP_MAX_BATCH);
        *ret_n = n;
}

static void start(axp_sched *s, axp_variant v) {
        iter *it = &s->it;

        assert(!it->active && it->n >= 1 && it->n <= AXP_MAX_BATCH);
        it->active = true;
        it->issued = false;
        it->ph = PH_EMBED;
        it->layer = 0;
        it->variant = v;
        it->prio = 0;
        for (int i = 0; i < it->n; i++) {
                it->reqs[i]->in_iter = true;
                if (it->reqs[i]->kind == AXP_REACTIVE)
                        it->prio = 1;
        }
}

/* Work riding in decode steps on one device serving both roles (no NPU, no usable GPU).
 * There is no second device to prefill on while this one decodes, so proactive prompts are
 * prefilled in slices inside the steps (W_FCFS), one pass over the weights for the decode
 * rows and the prompt rows: in a step of proactive requests only, up to it_tokens rows in
 * all, as continuous batching does; next to reactive requests (the paper's slack-aware
 * piggybacking) as many rows as keep the step's predicted time within (1 + piggyback_slack)
 * of the step alone, in slices of at most S_chk. it_tokens and S_chk come from the
 * preemption bound, so each kernel of a step stays within it and a reactive prefill still
 * takes the device at the next kernel boundary; a long proactive step is parked for the
 * reactive steps that follow (iter_form). */
bool sched_piggyback_on(const axp_sched *s) {
        return s->cfg.policy == AXP_POLICY_AGENTXPU && s->cfg.piggyback &&
               s->role_dev[AXP_ROLE_STATIC] == s->role_dev[AXP_ROLE_DYNAMIC];
}

/* Predicted time of one layer (K1, K2, K3) of the iteration formed so far, plus the span
 * [t0, t1) of r if r is given. */
static double layer_time(axp_sched *s, const sreq *r, int t0, int t1) {
        const iter *it = &s->it;
        axp_task t = { .variant = AXP_VAR_DYNAMIC };
        static const axp_op ops[] = { AXP_OP_K1, AXP_OP_K2, AXP_OP_K3 };
        double sum = 0;

        for (int i = 0; i < it->n; i++)
                t.spans[t.n_spans++] = (axp_span) { .seq = it->reqs[i]->seq,
                                                    .t0 = it->t0[i], .t1 = it->t1[i] };
        if (r && t1 > t0 && t.n_spans < AXP_MAX_BATCH)
                t.spans[t.n_spans++] = (axp_span) { .seq = r->seq, .t0 = t0, .t1 = t1 };
        if (t.n_spans == 0)
                return 0;
        for (size_t i = 0; i < ELEMENTSOF(ops); i++) {
                t.op = ops[i];
                sum += sched_predict(s, AXP_ROLE_DYNAMIC, &t);
        }
        return sum;
}

/* Tokens of r's prompt (from t0) that fit: all up to `cap`, or with a time limit, the most
 * that keep the layer's predicted time within it. */
static int slice_fits(axp_sched *s, const sreq *r, int t0, int cap, double limit) {
        int lo = 0, hi = MIN(cap, r->n_tokens - t0);

        if (hi <= 0)
                return 0;
        if (!(limit < INFINITY) || layer_time(s, r, t0, t0 + hi) <= limit)
                return hi;
        while (lo < hi) { /* the largest n with layer_time(n) <= limit */
                int mid = lo + (hi - lo + 1) / 2;
                if (layer_time(s, r, t0, t0 + mid) <= limit)
                        lo = mid;
                else
                        hi = mid - 1;
        }
        return lo;
}

static void add_slice(axp_sched *s, sreq *r, int n) {
        add_member(s, r, r->fcfs_done, r->fcfs_done + n, r->fcfs_done + n == r->n_tokens);
}

/* Add prompt slices to the iteration formed so far (react: it has reactive members;
 * pull: waiting proactive prompts may start riding). */
static bool piggyback(axp_sched *s, bool react, bool pull) {
        iter *it = &s->it;
        int budget = MAX(0, (react ? s->s_chk : s->it_tokens) - it->n);
        double limit = INFINITY;
        bool added = false;

        if (react) {
                bool aged = false;
                for (sreq *r = s->lists[L_FCFS].head; r && !aged; r = r->q_next)
                        aged = !r->abort && sched_aged(s, r);
                /* a promoted request rides with a whole chunk; otherwise within the slack */
                if (!aged)
                        limit = (1.0 + s->cfg.piggyback_slack) * layer_time(s, NULL, 0, 0);
                /* the slices are proactive work on the dynamic role */
                if (!sched_budget_ok(s, s->role_dev[AXP_ROLE_DYNAMIC]))
                        return false;
        }
        /* bandwidth slack: proactive requests Algorithm 2 left out of a reactive step ride
         * while the step stays within its slack, shortest first */
        if (react && limit < INFINITY) {
                sreq *cand[AXP_MAX_BATCH * 4];
                int n_cand = 0;
                for (sreq *r = s->lists[L_DECODE].head; r && n_cand < (int) ELEMENTSOF(cand);
                     r = r->q_next)
                        if (!r->abort && !r->in_iter && r->kind == AXP_PROACTIVE)
                                cand[n_cand++] = r;
                qsort(cand, n_cand, sizeof(cand[0]), by_length);
                for (int i = 0; i < n_cand && it->n < s->cfg.max_batch && budget > 0; i++) {
                        if (layer_time(s, cand[i], 0, 1) > limit)
                                break;
                        if (stage_decode(s, cand[i])) {
                                add_member(s, cand[i], 0, 1, true);
                                cand[i]->in_iter = true;
                                budget--;
                        }
                }
        }
        for (sreq *r = s->lists[L_FCFS].head; r && budget > 0 && it->n < AXP_MAX_BATCH;
             r = r->q_next) {
                int n;
                if (r->abort || r->in_iter)
                        continue;
                n = slice_fits(s, r, r->fcfs_done, budget, limit);
                if (n <= 0)
                        return added;
                add_slice(s, r, n);
                budget -= n;
                added = true;
        }
        while (pull && budget > 0 && it->n < AXP_MAX_BATCH && s->pending_policy == s->cfg.policy) {
                /* the proactive lane's request if its prefill has not begun, else the queue's */
                sreq *r = s->active[LANE_PROACTIVE];
                int n;
                if (!r || r->abort || !r->staged || prefill_started(r))
                        r = s->lists[L_PREFILL_PROACTIVE].head;
                if (!r || r->abort)
                        break;
                n = slice_fits(s, r, 0, budget, limit);
                if (n <= 0)
                        break;
                if (!r->staged && sched_stage_prompt(s, r) < 0)
                        continue;
                prefill_to_iter(s, r);
                add_slice(s, r, n);
                budget -= n;
                added = true;
        }
        return added;
}

/* Is a prompt part-way through the iterations and not in the parked one? */
static bool fcfs_waiting(const axp_sched *s) {
        for (const sreq *r = s->lists[L_FCFS].head; r; r = r->q_next)
                if (!r->abort && !r->in_iter)
                        return true;
        return false;
}

static bool form_pool(axp_sched *s) {
        sreq *batch[AXP_MAX_BATCH];
        iter *it = &s->it;
        int n = 0;
        bool react = false, pig = sched_piggyback_on(s), chunk = false;

        pick_batch(s, batch, &n);
        if (n == 0 && !(pig && fcfs_waiting(s)))
                return false;
        for (int i = 0; i < n; i++)
                react |= batch[i]->kind == AXP_REACTIVE;
        /* graphics protection, CPU guard: a decode step of proactive requests only spends
         * the dynamic role's budget */
        if (!react && s->cfg.policy == AXP_POLICY_AGENTXPU &&
            !sched_budget_ok(s, s->role_dev[AXP_ROLE_DYNAMIC]))
                return false;

        it->n = 0;
        for (int i = 0; i < n; i++)
                if (stage_decode(s, batch[i])) {
                        add_member(s, batch[i], 0, 1, true);
                        batch[i]->in_iter = true; /* start() sets it for all; here for piggyback() */
                }
        /* prompts start riding in steps that carry other work; the proactive lane starts
         * them on an otherwise idle device (sched.c: admit) */
        if (pig)
                chunk = piggyback(s, react, it->n > 0 || fcfs_waiting(s));
        /* a request batched last time and left out now was evicted: count it */
        for (sreq *r = s->lists[L_DECODE].head; r; r = r->q_next) {
                bool in = false;
                for (int i = 0; i < it->n && !in; i++)
                        in = it->reqs[i] == r;
                if (!in && r->in_iter)
                        continue; /* parked, and counted as preempted there */
                if (r->was_batched && !in)
                        r->preemptions++;
                r->was_batched = in;
        }
        if (it->n == 0)
                return false;
        start(s, chunk ? AXP_VAR_DYNAMIC : AXP_VAR_DECODE);
        return true;
}

static sreq *fcfs_next_waiting(axp_sched *s) {
        sreq *hr = s->lists[L_PREFILL_REACTIVE].head, *hp = s->lists[L_PREFILL_PROACTIVE].head;

        if (hr && hp)
                return hr->t_arrival <= hp->t_arrival ? hr : hp;
        return hr ? hr : hp;
}

/* fcfs: decode tokens of the running requests first (arrival order), then prefill chunks of
 * waiting requests in arrival order up to the iteration's token budget -- no priorities. */
static bool form_fcfs(axp_sched *s) {
        iter *it = &s->it;
        int budget = s->cfg.fcfs_tokens;
        bool chunk = false;

        it->n = 0;
        for (sreq *r = s->lists[L_DECODE].head; r && it->n < s->cfg.max_batch; r = r->q_next) {
                if (r->abort || !stage_decode(s, r))
                        continue;
                add_member(s, r, 0, 1, true);
                budget--;
        }
        for (sreq *r = s->lists[L_FCFS].head; r && budget > 0 && it->n < AXP_MAX_BATCH;
             r = r->q_next) {
                int c;
                if (r->abort)
                        continue;
                c = MIN(budget, r->n_tokens - r->fcfs_done);
                add_slice(s, r, c);
                budget -= c;
                chunk = true;
        }
        while (budget > 0 && it->n < AXP_MAX_BATCH && s->pending_policy == s->cfg.policy &&
               (int) (s->lists[L_DECODE].n + s->lists[L_FCFS].n) < s->cfg.max_batch) {
                sreq *r = fcfs_next_waiting(s);
                int c;
                if (!r)
                        break;
                if (sched_stage_prompt(s, r) < 0)
                        continue;
                prefill_to_iter(s, r);
                c = MIN(budget, r->n_tokens);
                add_slice(s, r, c);
                budget -= c;
                chunk = true;
        }
        if (it->n == 0)
                return false;
        start(s, chunk ? AXP_VAR_DYNAMIC : AXP_VAR_DECODE);
        return true;
}

/* Preemption of a long step. On one device an iteration of proactive requests carries
 * prompt slices and takes as long as a prefill chunk through every layer; a reactive request
 * that has finished its prefill meanwhile does not wait for it: between two kernels the
 * iteration is parked (its members keep their activations and their place, as a preempted
 * prefill does) and a reactive step runs. The parked iteration goes on once no reactive
 * request waits for a step, or at once if it carries the request aging has promoted. */
static bool reactive_waits(const axp_sched *s) {
        for (const sreq *r = s->lists[L_DECODE].head; r; r = r->q_next)
                if (r->kind == AXP_REACTIVE && !r->abort && !r->in_iter)
                        return true;
        return false;
}

static bool carries_aged(axp_sched *s, const iter *it) {
        for (int i = 0; i < it->n; i++)
                if (sched_aged(s, it->reqs[i]))
                        return true;
        return false;
}

static bool may_park(axp_sched *s) {
        const iter *it = &s->it;
        return s->cfg.policy == AXP_POLICY_AGENTXPU && s->cfg.preemption && it->active &&
               !it->issued && it->prio == 0 && it->variant == AXP_VAR_DYNAMIC &&
               !s->parked.active && reactive_waits(s) && !carries_aged(s, it);
}

static void park(axp_sched *s) {
        assert(s->it.active && !s->it.issued && !s->parked.active);
        for (int i = 0; i < s->it.n; i++)
                s->it.reqs[i]->preemptions++;
        s->parked = s->it;
        s->it.active = false;
        s->it.n = 0;
}

static bool unpark(axp_sched *s) {
        assert(s->parked.active && !s->it.active);
        s->it = s->parked;
        s->parked.active = false;
        s->parked.n = 0;
        return true;
}

bool iter_form(axp_sched *s) {
        if (s->it.active && !may_park(s))
                return true;
        if (s->it.active)
                park(s);
        else if (s->parked.active && (!reactive_waits(s) || carries_aged(s, &s->parked)))
                return unpark(s);
        if (s->cfg.policy == AXP_POLICY_FCFS)
                return form_fcfs(s);
        if (form_pool(s))
                return true;
        return s->parked.active && unpark(s); /* nothing else to run after all */
}

static const axp_op phase_op[] = {
        [PH_EMBED] = AXP_OP_EMBED, [PH_K1] = AXP_OP_K1, [PH_K2] = AXP_OP_K2,
        [PH_K3] = AXP_OP_K3,       [PH_HEAD] = AXP_OP_HEAD,
};

void iter_task(axp_sched *s, axp_task *t) {
        const iter *it = &s->it;

        assert(it->active && !it->issued && it->n >= 1 && it->n <= AXP_MAX_BATCH);
        /* every field set, those the step does not use zero (background included: the
         * scheduler decides it when it issues the task) */
        *t = (axp_task) {
                .op = phase_op[it->ph],
                .variant = it->variant,
                .layer = it->ph == PH_EMBED || it->ph == PH_HEAD ? 0 : it->layer,
        };
        for (int i = 0; i < it->n; i++) {
                int t0 = it->t0[i];
                if (it->ph == PH_HEAD) {
                        if (!it->head[i])
                                continue;
                        t0 = it->t1[i] - 1; /* logits of the last token only */
                }
                t->spans[t->n_spans++] = (axp_span) {
                        .seq = it->reqs[i]->seq, .t0 = t0, .t1 = it->t1[i],
                };
        }
        assert(t->n_spans >= 1); /* HEAD comes only for an iteration with a head span */
}

static bool any_head(const iter *it) {
        for (int i = 0; i < it->n; i++)
                if (it->head[i])
                        return true;
        return false;
}

static void finish_iter(axp_sched *s) {
        iter *it = &s->it;
        int n = it->n;
        sreq *reqs[AXP_MAX_BATCH];
        int t1[AXP_MAX_BATCH];
        bool head[AXP_MAX_BATCH];

        /* copy first: the callbacks below may end requests */
        for (int i = 0; i < n; i++) {
                reqs[i] = it->reqs[i];
                t1[i] = it->t1[i];
                head[i] = it->head[i];
                reqs[i]->in_iter = false;
        }
        it->active = false;
        it->issued = false;
        it->n = 0;

        for (int i = 0; i < n; i++) {
                sreq *r = reqs[i];
                if (r->abort)
                        continue; /* reaped by the dispatcher */
                if (r->where == W_FCFS) {
                        r->fcfs_done = t1[i];
                        if (!head[i])
                                continue;
                        rlist_remove(s, r);
                }
                sched_seq_end(r->seq);
                r->staged = false;
                sched_after_head(s, r);
        }
}

void iter_task_done(axp_sched *s, int rc, const char *msg) {
        iter *it = &s->it;

        it->issued = false;
        if (rc < 0) {
                for (int i = 0; i < it->n; i++)
                        sched_fail(s, it->reqs[i], rc,
                                   msg && msg[0] ? msg : "a device failed to run a decode kernel");
                finish_iter(s);
                return;
        }
        switch (it->ph) {
        case PH_EMBED:
                it->ph = PH_K1;
                break;
        case PH_K1:
                it->ph = PH_K2;
                break;
        case PH_K2:
                it->ph = PH_K3;
                break;
        case PH_K3:
                if (++it->layer < s->shape.n_layer)
                        it->ph = PH_K1;
                else if (any_head(it))
                        it->ph = PH_HEAD;
                else
                        finish_iter(s);
                break;
        case PH_HEAD:
        default:
                finish_iter(s);
                break;
        }
}
