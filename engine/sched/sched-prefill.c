/* SPDX-License-Identifier: MIT */
/* The prefill pipeline. A request's prompt is cut into chunks of S_chk tokens (the last one
 * shorter: the dynamic remainder) and each chunk runs K1, K2, K3 of every layer. The
 * kernels form a DAG (K2 of chunk c needs K1 of chunks 0..c; everything else only the
 * chunk's previous kernel), so the static role can run one chunk's K1/K3 while the dynamic
 * role runs another chunk's attention. Algorithm 1 decides per layer which full chunks go
 * to which role. A prefill may stop after any kernel and resume later: its activations stay
 * in its own seq and its KV cache in place, so nothing is recomputed. */
#include <assert.h>
#include <math.h>
#include <stdlib.h>

#include "sched-internal.h"

static axp_task one_span(const sreq *r, axp_op op, int layer, axp_variant v, int t0, int t1) {
        axp_task t = { .op = op, .variant = v, .layer = layer, .n_spans = 1 };
        t.spans[0] = (axp_span) { .seq = r->seq, .t0 = t0, .t1 = t1 };
        return t;
}

static double predict(axp_sched *s, const sreq *r, axp_op op, axp_role role, int t0, int t1) {
        axp_task t;

        if (t1 <= t0)
                return 0;
        t = one_span(r, op, 0, role == AXP_ROLE_STATIC ? AXP_VAR_STATIC : AXP_VAR_DYNAMIC, t0, t1);
        return sched_predict(s, role, &t);
}

static bool two_devices(const axp_sched *s) {
        return s->role_dev[AXP_ROLE_STATIC] != s->role_dev[AXP_ROLE_DYNAMIC];
}

int prefill_start(axp_sched *s, sreq *r) {
        int C = s->s_chk, S = r->n_tokens, L = s->shape.n_layer, nc = (S + C - 1) / C, ret;

        assert(!r->chunks && !r->splits && C > 0 && S > 0);
        if ((ret = sched_stage_prompt(s, r)) < 0)
                return ret;
        r->chunks = calloc(nc, sizeof(chunk));
        r->splits = calloc(2 * (size_t) L, sizeof(split));
        if (!r->chunks || !r->splits) {
                sched_fail(s, r, -ENOMEM, "cannot plan the prefill");
                return -ENOMEM;
        }
        for (int c = 0; c < nc; c++)
                r->chunks[c] = (chunk) { .t0 = c * C, .t1 = MIN(S, (c + 1) * C), .st = ST_K1 };
        for (int i = 0; i < 2 * L; i++)
                r->splits[i] = (split) { .n_static = -1 };
        r->n_chunks = nc;
        r->n_chunks_done = 0;
        r->embed = r->head = O_PENDING;
        r->where = W_PREFILL;
        return 0;
}

bool prefill_started(const sreq *r) {
        return r->staged && r->embed != O_PENDING;
}

/* r's prefill is over in its lane: drop its chunk layout and free the lane. */
static void leave_lane(axp_sched *s, sreq *r) {
        free(r->chunks);
        free(r->splits);
        r->chunks = NULL;
        r->splits = NULL;
        if (r->lane >= 0 && s->active[r->lane] == r)
                s->active[r->lane] = NULL;
        r->lane = -1;
}

void prefill_to_iter(axp_sched *s, sreq *r) {
        leave_lane(s, r);
        rlist_remove(s, r);
        r->where = W_FCFS;
        r->fcfs_done = 0;
        rlist_push(s, L_FCFS, r);
}

/* Is the dynamic role free to take a share of a prefill's chunks (Algorithm 1's decode
 * status, widened to the other prefills that run there)? */
static bool dynamic_free(axp_sched *s) {
        return sched_decode_idle(s) && !s->active[LANE_REACTIVE2] && !s->active[LANE_ASSIST];
}

/* Algorithm 1, taken for a whole layer (K1 and K3 together) since without layer barriers
 * the roles balance over the layer: scenario 1 (decode idle) gives the static role the
 * number of full chunks that makes its time match the dynamic role's (its chunks, the
 * remainder and the layer's attention); scenario 2 keeps every full chunk on the static
 * role and defers the remainder. Proactive prefill is scenario 2 unless promoted; serial
 * always balances (it decodes nothing while prefilling). */
static void decide_split(axp_sched *s, sreq *r, int layer) {
        int C = s->s_chk, S = r->n_tokens, N = S / C, n_static = N;
        bool balance, defer = false;

        if (s->cfg.policy == AXP_POLICY_SERIAL)
                balance = true;
        else {
                bool elastic = r->kind == AXP_REACTIVE || sched_aged(s, r);
                bool idle = dynamic_free(s);
                balance = elastic && s->cfg.elastic_split && idle;
                defer = !balance && !idle && two_devices(s) && S % C > 0;
        }
        if (balance && N > 0) {
                double ts = predict(s, r, AXP_OP_K1, AXP_ROLE_STATIC, 0, C) +
                            predict(s, r, AXP_OP_K3, AXP_ROLE_STATIC, 0, C);
                double td = predict(s, r, AXP_OP_K1, AXP_ROLE_DYNAMIC, 0, C) +
                            predict(s, r, AXP_OP_K3, AXP_ROLE_DYNAMIC, 0, C);
                double tr = predict(s, r, AXP_OP_K1, AXP_ROLE_DYNAMIC, N * C, S) +
                            predict(s, r, AXP_OP_K3, AXP_ROLE_DYNAMIC, N * C, S) +
                            predict(s, r, AXP_OP_K2, AXP_ROLE_DYNAMIC, 0, S);
                double best = INFINITY;
                for (int i = 0; i <= N; i++) {
                        double gap = fabs(i * ts - ((N - i) * td + tr));
                        if (gap < best - 1e-12) {
                                best = gap;
                                n_static = i;
                        }
                }
        }
        for (int k = 0; k < 2; k++)
                r->splits[k * s->shape.n_layer + layer] = (split) {
                        .n_static = n_static, .defer = defer, .t_last_static = -1,
                };
}

static split *split_of(axp_sched *s, sreq *r, axp_op op, int layer) {
        split *sp = &r->splits[(op == AXP_OP_K3) * s->shape.n_layer + layer];
        if (sp->n_static < 0)
                decide_split(s, r, layer);
        return sp;
}

/* A promoted (aged) proactive prefill sharing the pipeline with a reactive one leaves the
 * static role to it: its static chunks run on the dynamic role. */
static bool reroute(axp_sched *s, const sreq *r) {
        return r->kind == AXP_PROACTIVE && s->cfg.policy == AXP_POLICY_AGENTXPU &&
               s->cfg.preemption && s->active[AXP_REACTIVE] && s->active[AXP_REACTIVE] != r &&
               sched_aged(s, r);
}

/* A proactive request whose kernels the static role has prepared runs its whole prefill
 * there (attention and remainder too), leaving the dynamic role to decode and graphics. */
bool prefill_prepared(axp_sched *s, const sreq *r) {
        return lane_static_proactive(r->lane) && s->cfg.policy == AXP_POLICY_AGENTXPU &&
               s->cfg.warmup && two_devices(s) && r->prepared && !reroute(s, r);
}

static axp_op stage_op(stage st) {
        return st == ST_K1 ? AXP_OP_K1 : st == ST_K2 ? AXP_OP_K2 : AXP_OP_K3;
}

/* Role of chunk c's next kernel, and whether it must wait (not_before). */
static axp_role chunk_role(axp_sched *s, sreq *r, int c, double *ret_not_before) {
        chunk *ch = &r->chunks[c];
        int C = s->s_chk;
        split *sp;

        *ret_not_before = -INFINITY;
        if (r->lane == LANE_ASSIST || r->lane == LANE_REACTIVE2)
                return AXP_ROLE_DYNAMIC;
        if (prefill_prepared(s, r))
                return AXP_ROLE_STATIC;
        if (ch->st == ST_K2)
                return AXP_ROLE_DYNAMIC;
        sp = split_of(s, r, stage_op(ch->st), ch->layer);
        if (ch->t1 - ch->t0 == C) {
                /* a full chunk given to the dynamic role goes back to the static role if the
                 * dynamic role has found other work since */
                if (c < sp->n_static || (s->cfg.policy == AXP_POLICY_AGENTXPU &&
                                         (s->active[LANE_REACTIVE2] || s->active[LANE_ASSIST])))
                        return AXP_ROLE_STATIC;
                return AXP_ROLE_DYNAMIC;
        }
        /* a proactive remainder is padded to a static chunk: the dynamic role (graphics,
         * decode, its duty budget) is worth more than the static role's wasted rows */
        if (lane_static_proactive(r->lane) && s->cfg.policy == AXP_POLICY_AGENTXPU && s->cfg.pad &&
            two_devices(s))
                return AXP_ROLE_STATIC;
        /* the remainder; in scenario 2 it starts once the last static chunk of its op has,
         * late enough to end with it, leaving the dynamic role to decode meanwhile */
        if (sp->defer && sp->n_static > 0) {
                if (sp->static_issued < sp->n_static)
                        *ret_not_before = INFINITY;
                else {
                        double ts = predict(s, r, stage_op(ch->st), AXP_ROLE_STATIC, 0, C);
                        double tr = predict(s, r, stage_op(ch->st), AXP_ROLE_DYNAMIC, ch->t0, ch->t1);
                        *ret_not_before = sp->t_last_static + fmax(0.0, ts - tr);
                }
        }
        return AXP_ROLE_DYNAMIC;
}

/* Is layer l of r's seq a sliding-window ring shorter than the prompt's positions? */
static bool ring_wraps(const sreq *r, int l) {
        const axp_seq *q = r->seq;
        return q->model && axp_layer_is_swa(&q->model->hp, l) &&
               axp_seq_kv_rows(q, l) < q->n_past + q->n_new;
}

int prefill_pick(axp_sched *s, sreq *r, int dev, axp_task *t) {
        int L = s->shape.n_layer;
        int dyn = s->role_dev[prefill_prepared(s, r) ? AXP_ROLE_STATIC : AXP_ROLE_DYNAMIC];
        double now = sched_now(s);
        int best = -1, best_key = 0;
        int min_before = L * 3; /* least progress of the chunks before c */
        bool best_rerouted = false;

        /* the whole prompt is staged: the kernels' spans are its pending tokens */
        assert(r->staged && r->seq->n_new == r->n_tokens && r->chunks);
        if (r->embed != O_DONE) {
                if (r->embed == O_ISSUED || dev != dyn)
                        return -EAGAIN;
                *t = one_span(r, AXP_OP_EMBED, 0, AXP_VAR_DYNAMIC, 0, r->n_tokens);
                return 0;
        }
        if (r->n_chunks_done == r->n_chunks) {
                if (r->head != O_PENDING || dev != dyn)
                        return -EAGAIN;
                *t = one_span(r, AXP_OP_HEAD, 0, AXP_VAR_DYNAMIC, r->n_tokens - 1, r->n_tokens);
                return 0;
        }

        for (int c = 0; c < r->n_chunks; c++) {
                chunk *ch = &r->chunks[c];
                int progress = ch->layer * 3 + (int) ch->st;
                double nb;
                axp_role role;
                bool rr = false;
                int key, d;

                if (ch->st != ST_DONE && !ch->issued &&
                    /* causal attention: K1 of every earlier chunk of this layer is done */
                    (ch->st != ST_K2 || min_before >= ch->layer * 3 + 1) &&
                    /* a ring that wraps holds one chunk ahead of the window: K1 waits for
                     * the earlier chunks' attention on this layer */
                    (ch->st != ST_K1 || !ring_wraps(r, ch->layer) || min_before >= ch->layer * 3 + 2)) {
                        role = chunk_role(s, r, c, &nb);
                        if (role == AXP_ROLE_STATIC && reroute(s, r)) {
                                role = AXP_ROLE_DYNAMIC;
                                rr = true;
                        }
                        d = s->role_dev[role];
                        key = progress * (r->n_chunks + 1) + c; /* the wavefront: lowest layer first */
                        if (d == dev) {
                                if (nb > now + 1e-12) {
                                        if (nb < s->wake)
                                                s->wake = nb;
                                } else if (best < 0 || key < best_key) {
                                        best = c;
                                        best_key = key;
                                        best_rerouted = rr;
                                }
                        }
                }
                if (progress < min_before)
                        min_before = progress;
        }
        if (best < 0)
                return -EAGAIN;

        /* On the static role a full chunk is a static chunk kernel; a remainder is one too,
         * padded, unless warm-up has prepared the request's own shapes or the device runs
         * any shape as it is (a CPU standing in for the NPU: warmup_s 0). */
        chunk *ch = &r->chunks[best];
        bool full = ch->t1 - ch->t0 == s->s_chk;
        bool any_shape = s->devs[dev].warmup_s == 0;
        bool stat = !best_rerouted && ch->st != ST_K2 && dev == s->role_dev[AXP_ROLE_STATIC] &&
                    (full || (!prefill_prepared(s, r) && !any_shape));
        *t = one_span(r, stage_op(ch->st), ch->layer, stat ? AXP_VAR_STATIC : AXP_VAR_DYNAMIC,
                      ch->t0, ch->t1);
        if (stat)
                t->chunk = s->s_chk;
        return 0;
}

static int chunk_index(const axp_sched *s, const sreq *r, const axp_task *t) {
        int c = t->spans[0].t0 / s->s_chk;
        assert(c >= 0 && c < r->n_chunks);
        return c;
}

void prefill_issued(axp_sched *s, sreq *r, const axp_task *t) {
        chunk *ch;
        split *sp;
        int c;

        if (t->op == AXP_OP_EMBED) {
                assert(r->embed == O_PENDING);
                r->embed = O_ISSUED;
                return;
        }
        if (t->op == AXP_OP_HEAD) {
                assert(r->head == O_PENDING && r->n_chunks_done == r->n_chunks);
                r->head = O_ISSUED;
                return;
        }
        c = chunk_index(s, r, t);
        ch = &r->chunks[c];
        assert(!ch->issued && ch->st != ST_DONE && stage_op(ch->st) == t->op);
        ch->issued = true;
        if (t->op == AXP_OP_K2 || ch->t1 - ch->t0 != s->s_chk)
                return;
        sp = split_of(s, r, t->op, ch->layer);
        if (c < sp->n_static && ++sp->static_issued == sp->n_static)
                sp->t_last_static = sched_now(s);
}

void prefill_done(axp_sched *s, sreq *r, const axp_task *t, int rc, const char *msg) {
        if (rc < 0)
                sched_fail(s, r, rc, msg && msg[0] ? msg : "a device failed to run a prefill kernel");
        if (t->op == AXP_OP_EMBED) {
                assert(r->embed == O_ISSUED);
                r->embed = O_DONE;
        } else if (t->op == AXP_OP_HEAD) {
                assert(r->head == O_ISSUED);
                r->head = O_DONE;
        } else {
                chunk *ch = &r->chunks[chunk_index(s, r, t)];
                assert(ch->issued);
                ch->issued = false;
                if (ch->st == ST_K3) {
                        if (++ch->layer < s->shape.n_layer)
                                ch->st = ST_K1;
                        else {
                                ch->st = ST_DONE;
                                r->n_chunks_done++;
                                assert(r->n_chunks_done <= r->n_chunks);
                        }
                } else
                        ch->st++;
        }
        if (r->abort || r->head != O_DONE)
                return; /* an aborted request is reaped once nothing of it is in flight */

        sched_seq_end(r->seq);
        r->staged = false;
        leave_lane(s, r);
        sched_after_head(s, r);
}
