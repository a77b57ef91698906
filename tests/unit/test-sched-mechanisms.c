/* SPDX-License-Identifier: MIT */
/* The scheduler's mechanisms, one test each, in virtual time on the simulated Core Ultra
 * 125H with a Llama-3.2-3B shape. Each test also runs with its mechanism switched off and
 * checks that the property is then lost, so that the test cannot pass by accident. */
#include <stdio.h>

#include "sched-harness.h"
#include "test.h"

static harness h;

static double longest_kernel_of(const harness *hh, uint64_t id) {
        double m = 0;
        for (int i = 0; i < hh->n_tasks; i++)
                if (h_task_has(&hh->tasks[i], id) && hh->tasks[i].dur > m)
                        m = hh->tasks[i].dur;
        return m;
}

/* A reactive request arriving during a long proactive prefill starts within one kernel's
 * time, and the proactive prefill is preempted, then completes. */
static void test_preemption(void) {
        for (int on = 1; on >= 0; on--) {
                axp_sched_config cfg;
                axp_sched_config_default(&cfg);
                cfg.preemption = on;
                CHECK(h_init(&h, "llama-3b", &cfg) == 0);
                h_req *p = h_add(&h, 0.0, AXP_PROACTIVE, 4000, 4);
                h_req *r = h_add(&h, 3.0, AXP_REACTIVE, 300, 4);
                h_run(&h, INFINITY);
                CHECK(p->done && r->done);
                CHECK(p->reason == AXP_FINISH_LENGTH && r->reason == AXP_FINISH_LENGTH);
                double longest = longest_kernel_of(&h, p->id);
                if (on) {
                        CHECK_MSG(r->st.queue_wait_s <= longest + 1e-9,
                                  "reactive waited %.4f s, longest proactive kernel %.4f s",
                                  r->st.queue_wait_s, longest);
                        CHECK(r->st.queue_wait_s <= cfg.preempt_bound_s);
                        CHECK_EQ_INT(p->st.preemptions, 1);
                        CHECK(r->t_done < p->t_done);
                } else {
                        /* without preemption it waits for the rest of the proactive prefill */
                        CHECK_MSG(r->st.queue_wait_s > 1.0, "waited only %.3f s", r->st.queue_wait_s);
                        CHECK_EQ_INT(p->st.preemptions, 0);
                }
                h_free(&h);
        }
}

/* While a reactive request decodes, a decode batch holds at most B_cap requests, and the
 * proactive requests left out are the longest ones. */
static void test_reactive_first_batching(void) {
        for (int on = 1; on >= 0; on--) {
                axp_sched_config cfg;
                axp_sched_config_default(&cfg);
                cfg.reactive_first = on;
                cfg.aging_s = 0; /* no promotion in this test */
                CHECK(h_init(&h, "llama-3b", &cfg) == 0);
                h_req *p[6];
                for (int i = 0; i < 6; i++)
                        p[i] = h_add(&h, 0.0, AXP_PROACTIVE, 100 * (i + 1), 800);
                h_req *r = h_add(&h, 20.0, AXP_REACTIVE, 50, 40);
                h_run(&h, INFINITY);
                for (int i = 0; i < 6; i++)
                        CHECK(p[i]->done);
                CHECK(r->done);

                int with_r = 0, wrong = 0, max_n = 0, full_after = 0;
                for (int i = 0; i < h.n_tasks; i++) {
                        const h_task *k = &h.tasks[i];
                        if (k->variant != AXP_VAR_DECODE || k->op != AXP_OP_K1 || k->layer != 0)
                                continue;
                        if (k->t > r->t_done && k->n == 6)
                                full_after++;
                        if (!h_task_has(k, r->id))
                                continue;
                        with_r++;
                        max_n = MAX(max_n, k->n);
                        /* the proactive members must be the two shortest */
                        for (int j = 0; j < k->n; j++)
                                if (k->ids[j] != r->id && k->ids[j] != p[0]->id &&
                                    k->ids[j] != p[1]->id)
                                        wrong++;
                }
                CHECK(with_r > 0);
                if (on) {
                        CHECK_EQ_INT(max_n, cfg.b_cap);
                        CHECK_EQ_INT(wrong, 0);
                        CHECK(full_after > 0); /* the batch grows back once it is gone */
                        for (int i = 2; i < 6; i++)
                                CHECK(p[i]->st.preemptions >= 1); /* evicted */
                } else {
                        CHECK(max_n == 7);
                }
                h_free(&h);
        }
}

/* Under an unbroken stream of reactive requests a proactive request still completes once
 * it has aged. */
static void test_aging(void) {
        for (int on = 1; on >= 0; on--) {
                axp_sched_config cfg;
                axp_sched_config_default(&cfg);
                cfg.aging_s = on ? 30.0 : 0;
                CHECK(h_init(&h, "llama-3b", &cfg) == 0);
                h_req *last = NULL;
                for (double t = 0; t < 200; t += 1.5)
                        last = h_add(&h, t, AXP_REACTIVE, 2000, 2);
                h_req *p = h_add(&h, 1.0, AXP_PROACTIVE, 500, 10);
                h_run(&h, INFINITY);
                CHECK(p->done && last->done);
                if (on) {
                        CHECK_MSG(p->t_done < 200, "the proactive request finished at %.1f s",
                                  p->t_done);
                        /* reactive work was still queued when it completed */
                        CHECK(last->t_done > p->t_done + 10);
                } else {
                        CHECK_MSG(p->t_done > 200, "finished at %.1f s without aging", p->t_done);
                }
                h_free(&h);
        }
}

/* Under overload every proactive request ages; promotion goes to one at a time, the oldest,
 * until it finishes: next to an unbroken reactive stream a decode batch then holds at most
 * B_cap proactive requests plus the promoted one (promoting every aged request would hand
 * the whole backlog the batch), and still every proactive request finishes in turn. */
static void test_aging_one_at_a_time(void) {
        axp_sched_config cfg;
        axp_sched_config_default(&cfg);
        cfg.aging_s = 5.0;
        CHECK(h_init(&h, "llama-3b", &cfg) == 0);
        h_req *p[6], *last = NULL;
        for (int i = 0; i < 6; i++)
                p[i] = h_add(&h, 0.0, AXP_PROACTIVE, 100 * (i + 1), 200);
        for (double t = 0.5; t < 200; t += 5)
                last = h_add(&h, t, AXP_REACTIVE, 50, 400);
        h_run(&h, INFINITY);
        CHECK(last->done);
        int max_pro = 0, with_r = 0;
        for (int i = 0; i < h.n_tasks; i++) {
                const h_task *k = &h.tasks[i];
                int pro = 0;
                bool react = false;
                if (k->variant != AXP_VAR_DECODE || k->op != AXP_OP_K1 || k->layer != 0)
                        continue;
                for (int j = 0; j < k->n && j < 8; j++) {
                        pro += k->kinds[j] == AXP_PROACTIVE;
                        react |= k->kinds[j] == AXP_REACTIVE;
                }
                if (!react)
                        continue;
                with_r++;
                max_pro = MAX(max_pro, pro);
        }
        CHECK(with_r > 0);
        CHECK_MSG(max_pro <= cfg.b_cap + 1, "%d proactive requests in a reactive decode batch",
                  max_pro);
        for (int i = 0; i < 6; i++)
                CHECK_MSG(p[i]->done && p[i]->t_done < 150,
                          "proactive %d finished at %.1f s under the reactive stream", i,
                          p[i]->t_done);
        h_free(&h);
}

/* A prefill kernel waiting for the dynamic role runs before the next decode kernel. */
static void test_prefill_first(void) {
        for (int on = 1; on >= 0; on--) {
                axp_sched_config cfg;
                axp_sched_config_default(&cfg);
                cfg.prefill_first = on;
                CHECK(h_init(&h, "llama-3b", &cfg) == 0);
                h_req *d1 = h_add(&h, 0.0, AXP_REACTIVE, 50, 300);
                h_req *d2 = h_add(&h, 0.0, AXP_REACTIVE, 60, 300);
                h_req *r = h_add(&h, 10.0, AXP_REACTIVE, 300, 5);
                h_run(&h, INFINITY);
                CHECK(d1->done && d2->done && r->done);
                const h_task *first = NULL;
                for (int i = 0; i < h.n_tasks && !first; i++)
                        if (h.tasks[i].t >= r->t && h.tasks[i].dev == h_dynamic_dev(&h))
                                first = &h.tasks[i];
                CHECK(first != NULL);
                if (!first)
                        continue;
                if (on) {
                        CHECK(h_task_has(first, r->id) && first->variant != AXP_VAR_DECODE);
                        CHECK(r->t_done < d1->t_done);
                } else {
                        CHECK(first->variant == AXP_VAR_DECODE && !h_task_has(first, r->id));
                }
                h_free(&h);
        }
}

/* Proactive work on the dynamic role stays within the duty budget, over the run and over
 * every window; an external GPU load shrinks the budget further. */
static void duty_run(double duty, double external, double *ret_worst_window, double *ret_share) {
        axp_sched_config cfg;
        axp_sched_dev_stats st;
        double prev = 0, worst = 0, end = 0;
        const double win = 10.0;

        axp_sched_config_default(&cfg);
        cfg.proactive_duty = duty;
        CHECK(h_init(&h, "llama-3b", &cfg) == 0);
        if (external > 0)
                axp_sched_set_external_busy(h.sched, external);
        for (int i = 0; i < 20; i++)
                h_add(&h, 0.0, AXP_PROACTIVE, 200, 300);
        for (double t = win; t < 2000; t += win) {
                bool all = true;
                h_run(&h, t);
                axp_sched_device_stats(h.sched, h_dynamic_dev(&h), &st);
                worst = fmax(worst, st.busy_proactive_s - prev);
                prev = st.busy_proactive_s;
                for (int i = 0; i < h.n; i++)
                        all &= h.reqs[i].done;
                end = t;
                if (all)
                        break;
        }
        for (int i = 0; i < h.n; i++)
                CHECK(h.reqs[i].done);
        *ret_worst_window = worst / win;
        *ret_share = prev / end;
        h_free(&h);
}

static void test_duty_budget(void) {
        double worst, share;
        /* slack: the burst the bucket holds (duty x 2 s) and one kernel beyond it, per window */
        duty_run(0.5, 0, &worst, &share);
        CHECK_MSG(worst <= 0.5 + (0.5 * 2.0 + 0.2) / 10.0, "worst window %.3f", worst);
        CHECK_MSG(share <= 0.5 + 0.01, "share %.3f", share);
        CHECK_MSG(worst >= 0.4, "the budget should be used: worst window %.3f", worst);

        duty_run(0.5, 0.6, &worst, &share);
        CHECK_MSG(worst <= 0.2 + (0.2 * 2.0 + 0.2) / 10.0, "worst window %.3f", worst);

        /* no budget: the dynamic role runs proactive work most of the time */
        duty_run(1.0, 0, &worst, &share);
        CHECK_MSG(worst > 0.8, "worst window %.3f", worst);
}

/* Algorithm 1: with decode idle a reactive prefill's chunks go to both roles; with decode
 * busy they all go to the static role and the remainder waits for them. */
static void test_elastic_split(void) {
        for (int on = 1; on >= 0; on--) {
                axp_sched_config cfg;
                axp_sched_config_default(&cfg);
                cfg.elastic_split = on;
                CHECK(h_init(&h, "llama-3b", &cfg) == 0);
                h_req *a = h_add(&h, 0.0, AXP_REACTIVE, 2000, 300); /* decode idle */
                h_req *b = h_add(&h, 8.0, AXP_REACTIVE, 2000, 2);   /* a decodes */
                h_run(&h, INFINITY);
                CHECK(a->done && b->done);
                int a_dyn_chunks = 0, b_dyn_chunks = 0, late = 0, rems = 0;
                for (int i = 0; i < h.n_tasks; i++) {
                        const h_task *k = &h.tasks[i];
                        bool tokenwise = k->op == AXP_OP_K1 || k->op == AXP_OP_K3;
                        if (!tokenwise || k->n != 1)
                                continue;
                        bool full = k->t1 - k->t0 == axp_sched_s_chk(h.sched);
                        if (full && k->dev == h_dynamic_dev(&h)) {
                                if (k->ids[0] == a->id)
                                        a_dyn_chunks++;
                                if (k->ids[0] == b->id)
                                        b_dyn_chunks++;
                        }
                        /* b's remainder starts no earlier than the last static chunk of its
                         * op and layer */
                        if (!full && k->ids[0] == b->id) {
                                double last = -1;
                                for (int j = 0; j < h.n_tasks; j++) {
                                        const h_task *q = &h.tasks[j];
                                        if (q->n == 1 && q->ids[0] == b->id && q->op == k->op &&
                                            q->layer == k->layer && q->dev == h_static_dev(&h))
                                                last = fmax(last, q->t);
                                }
                                rems++;
                                if (k->t + 1e-9 < last)
                                        late++;
                        }
                }
                CHECK_EQ_INT(b_dyn_chunks, 0);
                CHECK(rems > 0);
                CHECK_EQ_INT(late, 0);
                if (on)
                        CHECK(a_dyn_chunks > 0);
                else
                        CHECK_EQ_INT(a_dyn_chunks, 0);
                h_free(&h);
        }
}

/* A reactive request arriving while another reactive prefill runs starts at once on the
 * dynamic role rather than waiting behind it. */
static void test_dual_reactive(void) {
        for (int on = 1; on >= 0; on--) {
                axp_sched_config cfg;
                axp_sched_config_default(&cfg);
                cfg.dual_reactive = on;
                CHECK(h_init(&h, "llama-3b", &cfg) == 0);
                h_req *a = h_add(&h, 0.0, AXP_REACTIVE, 3000, 2);
                h_req *b = h_add(&h, 1.0, AXP_REACTIVE, 200, 2);
                h_run(&h, INFINITY);
                CHECK(a->done && b->done);
                if (on) {
                        CHECK(b->st.queue_wait_s <= cfg.preempt_bound_s);
                        CHECK(b->t_done < a->t_done);
                } else {
                        CHECK(b->st.queue_wait_s > 1.0);
                }
                h_free(&h);
        }
}

/* Warm-up: a proactive request that waited long enough for its kernels to be prepared runs
 * its attention on the static role; an unprepared one runs it on the dynamic role. */
static void test_warmup(void) {
        for (int on = 1; on >= 0; on--) {
                axp_sched_config cfg;
                axp_sched_config_default(&cfg);
                cfg.warmup = on;
                cfg.assist = false;
                cfg.pipeline = false;
                CHECK(h_init(&h, "llama-3b", &cfg) == 0);
                h_req *a = h_add(&h, 0.0, AXP_PROACTIVE, 3000, 2);
                h_req *b = h_add(&h, 0.1, AXP_PROACTIVE, 700, 2);
                h_run(&h, INFINITY);
                CHECK(a->done && b->done);
                int b_attn_static = 0, b_attn_dyn = 0;
                for (int i = 0; i < h.n_tasks; i++) {
                        const h_task *k = &h.tasks[i];
                        if (k->op != AXP_OP_K2 || k->variant == AXP_VAR_DECODE ||
                            !h_task_has(k, b->id))
                                continue;
                        if (k->dev == h_static_dev(&h))
                                b_attn_static++;
                        else
                                b_attn_dyn++;
                }
                if (on) {
                        CHECK(b_attn_static > 0 && b_attn_dyn == 0);
                        CHECK(axp_sched_warmup_seconds(h.sched) > 0);
                } else
                        CHECK(b_attn_static == 0 && b_attn_dyn > 0);
                h_free(&h);
        }
}

/* Padding: a proactive remainder runs on the static role as a static chunk padded to
 * S_chk, not on the dynamic role. */
static void test_pad(void) {
        for (int on = 1; on >= 0; on--) {
                axp_sched_config cfg;
                axp_sched_config_default(&cfg);
                cfg.pad = on;
                cfg.warmup = false; /* prepared shapes would run as they are */
                CHECK(h_init(&h, "llama-3b", &cfg) == 0);
                h_req *p = h_add(&h, 0.0, AXP_PROACTIVE, 300, 2);
                h_run(&h, INFINITY);
                CHECK(p->done);
                int padded = 0, on_dyn = 0, s_chk = axp_sched_s_chk(h.sched);
                for (int i = 0; i < h.n_tasks; i++) {
                        const h_task *k = &h.tasks[i];
                        bool tokenwise = k->op == AXP_OP_K1 || k->op == AXP_OP_K3;
                        if (!tokenwise || k->variant == AXP_VAR_DECODE || k->t1 - k->t0 == s_chk)
                                continue;
                        if (k->dev == h_static_dev(&h) && k->variant == AXP_VAR_STATIC &&
                            k->chunk == s_chk)
                                padded++;
                        if (k->dev == h_dynamic_dev(&h))
                                on_dyn++;
                }
                if (on)
                        CHECK(padded == 2 * h.shape.n_layer && on_dyn == 0);
                else
                        CHECK(padded == 0 && on_dyn == 2 * h.shape.n_layer);
                h_free(&h);
        }
}

/* Pipelining: a second proactive prefill uses the static role while the first waits on the
 * dynamic role, so the second starts before the first has finished. */
static void test_pipeline(void) {
        for (int on = 1; on >= 0; on--) {
                axp_sched_config cfg;
                axp_sched_config_default(&cfg);
                cfg.pipeline = on;
                cfg.warmup = false;
                cfg.assist = false;
                CHECK(h_init(&h, "llama-3b", &cfg) == 0);
                h_req *a = h_add(&h, 0.0, AXP_PROACTIVE, 200, 2);
                h_req *b = h_add(&h, 0.0, AXP_PROACTIVE, 200, 2);
                h_run(&h, INFINITY);
                CHECK(a->done && b->done);
                double a_head = -1, b_first = -1;
                for (int i = 0; i < h.n_tasks; i++) {
                        const h_task *k = &h.tasks[i];
                        if (k->variant == AXP_VAR_DECODE)
                                continue;
                        if (k->op == AXP_OP_HEAD && h_task_has(k, a->id))
                                a_head = k->t;
                        if (k->op == AXP_OP_K1 && h_task_has(k, b->id) && b_first < 0)
                                b_first = k->t;
                }
                if (on)
                        CHECK(b_first < a_head);
                else
                        CHECK(b_first > a_head);
                h_free(&h);
        }
}

/* Assist: with proactive work queued and no reactive request, a second proactive prefill
 * runs on the dynamic role; never while a reactive request is in the engine. */
static void test_assist(void) {
        for (int on = 1; on >= 0; on--) {
                axp_sched_config cfg;
                axp_sched_config_default(&cfg);
                cfg.assist = on;
                CHECK(h_init(&h, "llama-3b", &cfg) == 0);
                for (int i = 0; i < 6; i++)
                        h_add(&h, 0.0, AXP_PROACTIVE, 1000, 20);
                h_req *r = h_add(&h, 4.0, AXP_REACTIVE, 500, 200);
                h_run(&h, INFINITY);
                int assisted = 0, during_r = 0;
                for (int i = 0; i < h.n_tasks; i++) {
                        const h_task *k = &h.tasks[i];
                        if (k->dev != h_dynamic_dev(&h) || !k->proactive_only ||
                            k->variant == AXP_VAR_DECODE || k->op != AXP_OP_K3 ||
                            k->t1 - k->t0 != axp_sched_s_chk(h.sched))
                                continue;
                        assisted++;
                        if (k->t >= r->t && k->t < r->t_done)
                                during_r++;
                }
                CHECK(r->done);
                CHECK_EQ_INT(during_r, 0);
                if (on)
                        CHECK(assisted > 0);
                else
                        CHECK_EQ_INT(assisted, 0);
                h_free(&h);
        }
}

/* Contention guard: a memory-bound proactive kernel does not start on the static role
 * while a reactive decode streams the weights on the dynamic role -- unless it has already
 * been held back for a preemption bound (the guard slows the proactive pipeline, it does not
 * stop it). Returns the overlaps that started without being held back. */
static int guard_violations(bool on, int *ret_overlaps) {
        axp_sched_config cfg;
        axp_trace_params tp = { .reactive_per_min = 6, .proactive_per_min = 12, .minutes = 5,
                                .seed = 7, .max_ctx = 4096 };
        axp_trace_req *tr = NULL;
        int n = 0, bad = 0, overlaps = 0;
        axp_error err;

        axp_sched_config_default(&cfg);
        cfg.contention_guard = on;
        CHECK(axp_workload_set_find("reactive-mixed", AXP_REACTIVE, &tp.reactive_set, &err) == 0);
        CHECK(axp_workload_set_find("samsum", AXP_PROACTIVE, &tp.proactive_set, &err) == 0);
        CHECK(axp_trace_generate(&tp, &tr, &n, &err) == 0);
        CHECK(h_init(&h, "llama-3b", &cfg) == 0);
        for (int i = 0; i < n; i++)
                h_add(&h, tr[i].t, tr[i].kind, tr[i].prompt, tr[i].output);
        h_run(&h, INFINITY);
        for (int i = 0; i < h.n; i++)
                CHECK(h.reqs[i].done);
        double prev_end = 0;
        for (int i = 0; i < h.n_tasks; i++) {
                const h_task *k = &h.tasks[i];
                if (k->dev != h_static_dev(&h))
                        continue;
                double idle = k->t - prev_end;
                prev_end = k->t + k->dur;
                if (!k->proactive_only)
                        continue;
                axp_task t = { .op = k->op, .variant = k->variant, .chunk = k->chunk, .n_spans = 1 };
                axp_seq q = { .n_past = 0 };
                t.spans[0] = (axp_span) { .seq = &q, .t0 = k->t0, .t1 = k->t1 };
                if (!axp_calib_memory_bound(&h.soc->devs[k->dev].calib, axp_task_cost(&h.shape, &t)))
                        continue;
                for (int j = 0; j < h.n_tasks; j++) {
                        const h_task *d = &h.tasks[j];
                        if (d->dev == h_dynamic_dev(&h) && d->variant == AXP_VAR_DECODE &&
                            !d->proactive_only && d->t <= k->t && k->t < d->t + d->dur) {
                                overlaps++;
                                if (idle < cfg.preempt_bound_s - 1e-6)
                                        bad++;
                                break;
                        }
                }
        }
        h_free(&h);
        free(tr);
        *ret_overlaps = overlaps;
        return bad;
}

static void test_contention_guard(void) {
        int overlaps;
        CHECK_EQ_INT(guard_violations(true, &overlaps), 0);
        CHECK(guard_violations(false, &overlaps) > 0);
}

/* One device serving both roles (no NPU, no usable GPU): a reactive request's decode is not
 * interleaved with the proactive prefill chunks that run there instead of on an NPU; its
 * latency stays close to what it is alone. Without the rule (the contention guard off) the
 * chunks slip between its decode kernels. */
static int shared_device_run(bool guard, double *ret_latency, double *ret_alone) {
        axp_sched_config cfg;
        int interleaved = 0;

        for (int loaded = 0; loaded <= 1; loaded++) {
                axp_sched_config_default(&cfg);
                cfg.contention_guard = guard;
                CHECK(h_init_roles(&h, "llama-3b", &cfg, AXP_DEV_CPU) == 0);
                CHECK(h_static_dev(&h) == h_dynamic_dev(&h));
                for (int i = 0; loaded && i < 3; i++)
                        h_add(&h, 0.0, AXP_PROACTIVE, 2000, 64);
                h_req *r = h_add(&h, 1.0, AXP_REACTIVE, 40, 48);
                h_run(&h, INFINITY);
                CHECK(r->done);
                /* from its first token (its decode begins) to its last */
                double decoding = r->t + r->st.ttft_s;
                for (int i = 0; i < h.n_tasks; i++) {
                        const h_task *k = &h.tasks[i];
                        if (k->t > decoding && k->t < r->t_done && k->variant != AXP_VAR_DECODE &&
                            k->proactive_only)
                                interleaved++;
                }
                *(loaded ? ret_latency : ret_alone) = r->st.latency_s;
                h_free(&h);
        }
        return interleaved;
}

static void test_shared_device_reactive_decode(void) {
        double lat, alone;
        CHECK_EQ_INT(shared_device_run(true, &lat, &alone), 0);
        CHECK_MSG(lat < 1.5 * alone, "%.3f s loaded vs %.3f s alone", lat, alone);
        double lat_off, alone_off;
        int n_off = shared_device_run(false, &lat_off, &alone_off);
        printf("  reactive latency on one device under proactive prefill: %.3f s (alone %.3f s); "
               "without the rule %.3f s, %d proactive prefill kernels while it decodes\n",
               lat, alone, lat_off, n_off);
        CHECK(n_off > 0);
        CHECK_MSG(lat_off > 2 * lat, "%.3f s without the rule vs %.3f s with it", lat_off, lat);
}

/* Slack-aware piggybacking on one device: while a reactive request decodes, a waiting
 * proactive prompt is prefilled in slices riding in its decode steps, and the reactive
 * request's time per token stays within the slack of its time alone. Without it the prompt
 * waits until the reactive request is done. */
static void test_piggyback(void) {
        double tpot_alone = 0;
        for (int run = 0; run < 3; run++) { /* alone, with piggybacking, without */
                axp_sched_config cfg;
                axp_sched_config_default(&cfg);
                cfg.piggyback = run != 2;
                cfg.piggyback_slack = 0.25; /* a step may grow: the bound is what is checked */
                CHECK(h_init_roles(&h, "llama-3b", &cfg, AXP_DEV_CPU) == 0);
                h_req *r = h_add(&h, 0.0, AXP_REACTIVE, 40, 64);
                h_req *p = run ? h_add(&h, 1.0, AXP_PROACTIVE, 600, 4) : NULL;
                h_run(&h, INFINITY);
                CHECK(r->done && (!p || p->done));
                if (run == 0) {
                        tpot_alone = r->st.tpot_s;
                        h_free(&h);
                        continue;
                }
                int shared = 0;
                for (int i = 0; i < h.n_tasks; i++)
                        if (h_task_has(&h.tasks[i], r->id) && h_task_has(&h.tasks[i], p->id))
                                shared++;
                double p_start = p->t + p->st.queue_wait_s;
                if (run == 1) {
                        CHECK_MSG(shared > 0 && p_start < r->t_done,
                                  "proactive prefill began at %.2f s, reactive done at %.2f s",
                                  p_start, r->t_done);
                        CHECK_MSG(r->st.tpot_s <= (1 + cfg.piggyback_slack) * tpot_alone * 1.01,
                                  "reactive %.1f ms per token, alone %.1f ms",
                                  1e3 * r->st.tpot_s, 1e3 * tpot_alone);
                        CHECK(r->st.tpot_s > tpot_alone * 1.001); /* it did carry work */
                        printf("  reactive %.1f ms per token with piggybacking (alone %.1f); "
                               "the proactive prompt began at %.2f s, done at %.2f s\n",
                               1e3 * r->st.tpot_s, 1e3 * tpot_alone, p_start, p->t_done);
                } else {
                        CHECK_EQ_INT(shared, 0);
                        CHECK_MSG(p_start >= r->t_done - 1e-9,
                                  "without piggybacking the prompt began at %.2f s", p_start);
                }
                h_free(&h);
        }
}

/* Continuous batching on one device: a proactive prompt arriving while another proactive
 * request decodes is prefilled in slices inside the decode steps (one pass over the weights
 * for both), not in the proactive lane whose chunks would run alone and stall the decode. */
static void test_fused_prefill(void) {
        for (int fused = 1; fused >= 0; fused--) {
                axp_sched_config cfg;
                axp_sched_config_default(&cfg);
                cfg.piggyback = fused;
                CHECK(h_init_roles(&h, "llama-3b", &cfg, AXP_DEV_CPU) == 0);
                h_req *q = h_add(&h, 0.0, AXP_PROACTIVE, 100, 400);
                h_req *p = h_add(&h, 5.0, AXP_PROACTIVE, 600, 4);
                h_run(&h, INFINITY);
                CHECK(q->done && p->done);
                int shared = 0, alone = 0, q_during = 0;
                double p_start = p->t + p->st.queue_wait_s, p_end = p->t + p->st.ttft_s;
                CHECK(p_start < q->t_done);
                for (int i = 0; i < h.n_tasks; i++) {
                        const h_task *k = &h.tasks[i];
                        bool has_p = h_task_has(k, p->id), has_q = h_task_has(k, q->id);
                        if (k->t >= p_end)
                                break; /* P's decode steps are not its prefill */
                        shared += has_p && has_q && k->op == AXP_OP_K3;
                        alone += has_p && !has_q && k->op == AXP_OP_K3;
                        q_during += has_q && k->op == AXP_OP_HEAD && k->t > p_start && k->t < p_end;
                }
                if (fused) {
                        /* every layer of P's prompt ran together with Q's decode rows */
                        CHECK_MSG(alone == 0 && shared > 0, "%d K3 kernels of P alone, %d with Q",
                                  alone, shared);
                        CHECK(q_during > 0);
                        printf("  P's prompt in %d fused FFN kernels; Q made %d tokens meanwhile\n",
                               shared, q_during);
                } else {
                        CHECK_EQ_INT(shared, 0);
                        CHECK_EQ_INT(q_during, 0); /* prefill-first: Q's decode waited */
                }
                h_free(&h);
        }
}

/* A reactive request that finishes its prefill while a long proactive step (decode rows and
 * a prompt slice through every layer) is part-way does not wait for that step: it is parked
 * at the next kernel boundary, the reactive step runs, and the parked step goes on after;
 * everything completes. */
static void test_parked_step(void) {
        double gap[2];
        for (int park = 1; park >= 0; park--) {
                axp_sched_config cfg;
                axp_sched_config_default(&cfg);
                cfg.preemption = park; /* parking is preemption of a step */
                CHECK(h_init_roles(&h, "llama-3b", &cfg, AXP_DEV_CPU) == 0);
                h_req *q = h_add(&h, 0.0, AXP_PROACTIVE, 100, 600);
                h_req *p = h_add(&h, 5.0, AXP_PROACTIVE, 3000, 4);
                h_req *r = h_add(&h, 9.0, AXP_REACTIVE, 40, 8);
                h_run(&h, INFINITY);
                CHECK(q->done && p->done && r->done);
                double head_end = -1, first_step = -1;
                for (int i = 0; i < h.n_tasks; i++) {
                        const h_task *k = &h.tasks[i];
                        if (!h_task_has(k, r->id))
                                continue;
                        if (k->op == AXP_OP_HEAD && head_end < 0)
                                head_end = k->t + k->dur;
                        else if (k->op == AXP_OP_EMBED && head_end >= 0 && first_step < 0)
                                first_step = k->t;
                }
                CHECK(head_end > 0 && first_step >= head_end - 1e-9);
                gap[park] = first_step - head_end;
                if (park) {
                        CHECK(p->st.preemptions >= 1 && q->st.preemptions >= 1);
                        CHECK_MSG(gap[1] < 1e-6, "the reactive step began %.3f s after its prefill",
                                  gap[1]);
                }
                h_free(&h);
        }
        printf("  reactive step %.3f s after its prefill with parking, %.3f s without\n", gap[1],
               gap[0]);
        CHECK(gap[0] > 0.05);
}

static void cancel_at(void *ud) {
        h_req *q = ud;
        CHECK(axp_sched_cancel(q->h->sched, q->id) == 0);
}

/* A request cancelled while its step is parked finishes as cancelled; the others of that
 * step, and the reactive request, complete. */
static void test_cancel_parked(void) {
        axp_sched_config cfg;
        axp_sched_config_default(&cfg);
        CHECK(h_init_roles(&h, "llama-3b", &cfg, AXP_DEV_CPU) == 0);
        h_req *q = h_add(&h, 0.0, AXP_PROACTIVE, 100, 600);
        h_req *p = h_add(&h, 5.0, AXP_PROACTIVE, 3000, 4);
        h_req *r = h_add(&h, 9.0, AXP_REACTIVE, 40, 32);
        /* R's prefill takes well under a second; it decodes for longer, P's step parked */
        axp_sim_at(h.sim, 10.0, cancel_at, p);
        h_run(&h, INFINITY);
        CHECK(q->done && q->reason == AXP_FINISH_LENGTH);
        CHECK(r->done && r->reason == AXP_FINISH_LENGTH);
        CHECK(p->done && p->reason == AXP_FINISH_CANCELLED);
        CHECK(p->st.preemptions >= 1); /* it was parked when cancelled */
        CHECK(r->t + r->st.ttft_s < 10.0 && r->t_done > 10.0);
        h_free(&h);
}

int main(void) {
        RUN(test_preemption);
        RUN(test_reactive_first_batching);
        RUN(test_aging);
        RUN(test_aging_one_at_a_time);
        RUN(test_prefill_first);
        RUN(test_duty_budget);
        RUN(test_elastic_split);
        RUN(test_dual_reactive);
        RUN(test_warmup);
        RUN(test_pad);
        RUN(test_pipeline);
        RUN(test_assist);
        RUN(test_contention_guard);
        RUN(test_shared_device_reactive_decode);
        RUN(test_piggyback);
        RUN(test_fused_prefill);
        RUN(test_parked_step);
        RUN(test_cancel_parked);
        TEST_EXIT();
}
