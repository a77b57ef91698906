/* SPDX-License-Identifier: MIT */
/* Preemption costs nothing but time: a proactive request preempted in the middle of its
 * prefill by a reactive one resumes where it stopped and generates exactly the tokens it
 * generates alone. The scheduler runs in virtual time on simulated devices that also run
 * every kernel on the real CPU device, so the tokens are real and the schedule is
 * deterministic. The same holds under every policy, on a dense llama model, on a gemma3
 * model whose sliding-window rings wrap and on a qwen3moe model whose tokens pick experts. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "devices/device.h"
#include "devices/cpu-device.h"
#include "devices/forward.h"
#include "mkmodel.h"
#include "sim/sim.h"
#include "test.h"
#include "kernels/types.h"

#define N_OUT 12

static axp_model *model;
static axp_device *cpu;
/* how much a reactive decode step on one device may grow to carry proactive rows */
static double slack = 0.25;

typedef struct run_req {
        axp_seq seq;
        int32_t out[4 * N_OUT];
        int n_out, want;
        bool done;
        axp_req_stats st;
} run_req;

static bool greedy_next(void *ud, uint64_t id, axp_seq *seq, int32_t *ret_token,
                        axp_finish_reason *ret_reason) {
        run_req *q = ud;
        int best = 0;

        for (int i = 1; i < model->hp.n_vocab; i++)
                if (seq->logits[i] > seq->logits[best])
                        best = i;
        q->out[q->n_out++] = best;
        if (q->n_out >= q->want) {
                *ret_reason = AXP_FINISH_LENGTH;
                return false;
        }
        *ret_token = best;
        return true;
}

static void greedy_finished(void *ud, uint64_t id, axp_finish_reason reason, const axp_req_stats *st) {
        run_req *q = ud;
        q->done = true;
        q->st = *st;
}

static const axp_sched_req_ops ops = { .next = greedy_next, .finished = greedy_finished };

typedef struct world {
        axp_sim *sim;
        axp_sched *sched;
        run_req p, r, q;
        int32_t p_tokens[600], r_tokens[100], q_tokens[100];
        bool with_q; /* Q, proactive, arrives first and decodes 4 * N_OUT tokens */
        /* one device (the CPU) for both roles; P arrives at t_p; R generates r_want tokens */
        bool shared;
        double t_p;
        int r_want;
        double r_done, p_first_kernel;
        int p_swa_cap; /* rows of P's sliding-window rings (gemma3) */
} world;

static void arrive_p(void *ud) {
        world *w = ud;
        axp_error err;
        CHECK(axp_sched_submit(w->sched, AXP_PROACTIVE, &w->p.seq, w->p_tokens, 600, &ops, &w->p,
                               NULL, &err) == 0);
}

static void arrive_r(void *ud) {
        world *w = ud;
        axp_error err;
        CHECK(axp_sched_submit(w->sched, AXP_REACTIVE, &w->r.seq, w->r_tokens, 100, &ops, &w->r, NULL,
                               &err) == 0);
}

static void arrive_q(void *ud) {
        world *w = ud;
        axp_error err;
        CHECK(axp_sched_submit(w->sched, AXP_PROACTIVE, &w->q.seq, w->q_tokens, 100, &ops, &w->q,
                               NULL, &err) == 0);
}

/* Run P alone (t_reactive < 0) or with R arriving at t_reactive; returns P's first-token time. */
static double run(world *w, axp_policy policy, double t_reactive) {
        const axp_soc_profile *soc;
        axp_sched_device devs[AXP_SIM_MAX_DEVS];
        axp_heg_shape shape;
        axp_sched_config cfg;
        axp_error err = { 0 };

        memset(&w->p, 0, sizeof(w->p));
        memset(&w->r, 0, sizeof(w->r));
        memset(&w->q, 0, sizeof(w->q));
        for (int i = 0; i < 100; i++)
                w->q_tokens[i] = (i * 7877 + 3) % model->hp.n_vocab;
        w->q.want = 4 * N_OUT;
        if (w->with_q)
                CHECK(axp_seq_init(&w->q.seq, model, AXP_TYPE_F32, 1024, 200, &err) == 0);
        for (int i = 0; i < 600; i++)
                w->p_tokens[i] = (i * 7919 + 11) % model->hp.n_vocab;
        for (int i = 0; i < 100; i++)
                w->r_tokens[i] = (i * 104729 + 5) % model->hp.n_vocab;
        w->p.want = N_OUT;
        w->r.want = w->r_want > 0 ? w->r_want : 4;
        CHECK(axp_seq_init(&w->p.seq, model, AXP_TYPE_F32, 1024, 700, &err) == 0);
        CHECK(axp_seq_init(&w->r.seq, model, AXP_TYPE_F32, 1024, 200, &err) == 0);

        CHECK(axp_soc_profile_find("core-ultra-125h", &soc, &err) == 0);
        axp_heg_shape_from_model(model, AXP_TYPE_F32, &shape);
        CHECK(axp_sim_new(soc, &shape, &w->sim, &err) == 0);
        for (int i = 0; i < soc->n_devs; i++) {
                devs[i] = (axp_sched_device) { .name = soc->devs[i].name, .calib = soc->devs[i].calib,
                                               .warmup_s = soc->devs[i].warmup_s,
                                               .graphics = soc->devs[i].kind == AXP_DEV_IGPU };
                axp_sim_wrap_device(w->sim, i, cpu);
        }
        axp_sched_config_default(&cfg);
        cfg.policy = policy;
        cfg.max_ctx = 1024; /* the model's context: S_chk = 64, many kernels to stop between */
        cfg.piggyback_slack = slack; /* on one device, let the steps carry slices */
        int st = soc->static_dev, dy = soc->dynamic_dev;
        for (int i = 0; w->shared && i < soc->n_devs; i++)
                if (soc->devs[i].kind == AXP_DEV_CPU)
                        st = dy = i;
        CHECK(axp_sched_new(&cfg, &shape, axp_sim_env(w->sim), devs, soc->n_devs, st, dy,
                            &w->sched, &err) == 0);
        axp_sim_attach(w->sim, w->sched);
        if (w->with_q)
                arrive_q(w);
        if (w->t_p > 0)
                axp_sim_at(w->sim, w->t_p, arrive_p, w);
        else
                arrive_p(w);
        if (t_reactive >= 0)
                axp_sim_at(w->sim, t_reactive, arrive_r, w);
        CHECK(axp_sim_run(w->sim, INFINITY, &err) == 0);
        CHECK(w->p.done && w->p.n_out == N_OUT);
        CHECK(t_reactive < 0 || (w->r.done && w->r.n_out == w->r.want));
        CHECK(!w->with_q || (w->q.done && w->q.n_out == w->q.want));
        w->r_done = t_reactive + w->r.st.latency_s;
        w->p_first_kernel = (w->t_p > 0 ? w->t_p : 0) + w->p.st.queue_wait_s;
        w->p_swa_cap = w->p.seq.swa_cap;
        axp_sched_free(w->sched);
        axp_sim_free(w->sim);
        axp_seq_free(&w->p.seq);
        axp_seq_free(&w->r.seq);
        if (w->with_q)
                axp_seq_free(&w->q.seq);
        return w->p.st.ttft_s;
}

/* P's tokens from a plain whole prefill and greedy decode on the CPU device: a sliding-window
 * layer's ring then holds the whole prompt (no wrap), which the scheduler's chunks do not. */
static void forward_greedy(const int32_t *prompt, int n, int32_t *out) {
        axp_seq q;
        axp_error err = { 0 };
        CHECK(axp_seq_init(&q, model, AXP_TYPE_F32, 1024, n + N_OUT, &err) == 0);
        CHECK_MSG(axp_forward_prefill(cpu, &q, prompt, n, 0, &err) == 0, "%s", err.msg);
        for (int k = 0; k < N_OUT; k++) {
                int best = 0;
                for (int i = 1; i < model->hp.n_vocab; i++)
                        if (q.logits[i] > q.logits[best])
                                best = i;
                out[k] = best;
                if (k + 1 < N_OUT)
                        CHECK(axp_forward_decode(cpu, &(axp_seq *) { &q }, &out[k], 1, &err) == 0);
        }
        axp_seq_free(&q);
}

static void test_preempted_tokens(void) {
        static world w;
        int32_t alone[N_OUT], plain[N_OUT];

        double ttft = run(&w, AXP_POLICY_AGENTXPU, -1);
        memcpy(alone, w.p.out, sizeof(alone));
        CHECK_EQ_INT(w.p.st.preemptions, 0);
        forward_greedy(w.p_tokens, 600, plain);
        CHECK(memcmp(alone, plain, sizeof(alone)) == 0);
        if (model->hp.n_swa > 0) {
                printf("  P's sliding-window rings: %d rows of its 612 positions\n", w.p_swa_cap);
                CHECK(w.p_swa_cap < 600);
        }

        /* the reactive request arrives a third of the way into the proactive prefill */
        run(&w, AXP_POLICY_AGENTXPU, ttft / 3);
        CHECK(w.p.st.preemptions >= 1);
        CHECK(w.r.st.ttft_s < w.p.st.ttft_s);
        CHECK(memcmp(alone, w.p.out, sizeof(alone)) == 0);

        /* and under the baselines, which schedule the same kernels differently */
        for (int pol = AXP_POLICY_FCFS; pol <= AXP_POLICY_SERIAL; pol++) {
                run(&w, (axp_policy) pol, ttft / 3);
                CHECK_MSG(memcmp(alone, w.p.out, sizeof(alone)) == 0, "policy %s",
                          axp_policy_name((axp_policy) pol));
        }
}

/* On one device a proactive prompt arriving while a reactive request decodes is prefilled
 * in slices inside the reactive decode steps (piggybacking); it still generates exactly the
 * tokens it generates alone. */
static void test_piggybacked_tokens(void) {
        static world w;
        int32_t alone[N_OUT];

        run(&w, AXP_POLICY_AGENTXPU, -1);
        memcpy(alone, w.p.out, sizeof(alone));

        /* R alone on the one device, to place P's arrival inside its decode */
        w.shared = true;
        w.r_want = N_OUT;
        w.t_p = 1e6; /* after R is done */
        run(&w, AXP_POLICY_AGENTXPU, 0);
        double r_first = w.r.st.ttft_s, r_done = w.r.st.latency_s;
        int32_t r_alone[N_OUT];
        memcpy(r_alone, w.r.out, sizeof(r_alone));
        CHECK(w.p_first_kernel >= r_done);

        w.t_p = r_first + (r_done - r_first) / 4;
        run(&w, AXP_POLICY_AGENTXPU, 0);
        CHECK_MSG(w.p_first_kernel < w.r_done, "P began at %.4f s, R done at %.4f s",
                  w.p_first_kernel, w.r_done);
        CHECK(memcmp(alone, w.p.out, sizeof(alone)) == 0);
        CHECK(memcmp(r_alone, w.r.out, sizeof(r_alone)) == 0);
        w.shared = false;
        w.r_want = 0;
        w.t_p = 0;
}

/* On one device P's prompt rides in Q's decode steps; R arrives meanwhile, and when its
 * prefill is done the step carrying P's slice and Q's token is parked part-way for R's
 * steps, then goes on. Every request generates exactly the tokens it generates alone. */
static void test_parked_tokens(void) {
        static world w;
        int32_t p_alone[N_OUT], r_alone[N_OUT], q_alone[4 * N_OUT];

        run(&w, AXP_POLICY_AGENTXPU, -1);
        memcpy(p_alone, w.p.out, sizeof(p_alone));
        w.shared = true;
        w.t_p = 1e6;
        run(&w, AXP_POLICY_AGENTXPU, 0); /* R alone */
        memcpy(r_alone, w.r.out, sizeof(r_alone));
        w.with_q = true;
        w.t_p = 2e6;
        run(&w, AXP_POLICY_AGENTXPU, 1e6); /* Q alone, then R and P long after */
        memcpy(q_alone, w.q.out, sizeof(q_alone));
        double q_first = w.q.st.ttft_s;

        w.t_p = q_first * 1.5; /* while Q decodes */
        double p_ttft = run(&w, AXP_POLICY_AGENTXPU, -1);
        CHECK_EQ_INT(w.p.st.preemptions, 0);
        run(&w, AXP_POLICY_AGENTXPU, w.t_p + p_ttft / 3);
        CHECK_MSG(w.p.st.preemptions >= 1, "P was not parked");
        CHECK(memcmp(p_alone, w.p.out, sizeof(p_alone)) == 0);
        CHECK(memcmp(r_alone, w.r.out, sizeof(r_alone)) == 0);
        CHECK(memcmp(q_alone, w.q.out, sizeof(q_alone)) == 0);
        w.shared = false;
        w.with_q = false;
        w.t_p = 0;
}

int main(void) {
        char dir[] = "/tmp/axp-test-tokens-XXXXXX", path[256];
        axp_mkmodel_params mp;
        axp_error err = { 0 };

        if (!mkdtemp(dir))
                TEST_SKIP("cannot make a temporary folder");
        snprintf(path, sizeof(path), "%s/model.gguf", dir);
        axp_mkmodel_defaults(&mp);
        mp.type = AXP_TYPE_F32;
        mp.n_layer = 3;
        mp.n_ctx = 1024;
        mp.seed = 7;
        mp.path = path;
        if (axp_mkmodel(&mp, &err) < 0 || axp_model_load(path, &model, &err) < 0 ||
            axp_cpu_device_new(2, &cpu, &err) < 0 || axp_device_prepare(cpu, model, &err) < 0) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
        }
        RUN(test_preempted_tokens);
        RUN(test_piggybacked_tokens);
        RUN(test_parked_tokens);
        axp_device_prepare(cpu, NULL, NULL);
        axp_model_free(model);
        model = NULL;

        /* gemma3, six layers of which five slide a window of 40: their rings (the window
         * and a chunk or an iteration's slice) are shorter than P's prompt and wrap */
        mp.arch = AXP_ARCH_GEMMA3;
        mp.n_layer = 6;
        mp.n_swa = 40;
        mp.tied = true;
        if (axp_mkmodel(&mp, &err) < 0 || axp_model_load(path, &model, &err) < 0 ||
            axp_device_prepare(cpu, model, &err) < 0) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
        }
        RUN(test_preempted_tokens);
        RUN(test_piggybacked_tokens);
        RUN(test_parked_tokens);
        axp_device_prepare(cpu, NULL, NULL);
        axp_model_free(model);
        model = NULL;

        /* qwen3moe, 8 experts of which each token's router picks 2: a chunk's tokens pick
         * different experts, so the expert kernels run on token subsets that differ between
         * a whole prefill, the scheduler's chunks and a preempted prefill's halves. A row
         * added to a one-token decode step brings experts of its own to stream (a step reads
         * up to all 8 where the token alone reads 2), which a slack of 0.25 never pays for */
        mp.arch = AXP_ARCH_QWEN3MOE;
        mp.n_layer = 3;
        mp.n_swa = 0;
        mp.tied = false;
        mp.n_expert = 8;
        mp.n_expert_used = 2;
        slack = 1.0;
        if (axp_mkmodel(&mp, &err) < 0 || axp_model_load(path, &model, &err) < 0 ||
            axp_device_prepare(cpu, model, &err) < 0) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
        }
        CHECK_EQ_INT(model->hp.n_expert, 8);
        CHECK_EQ_INT(model->hp.n_expert_used, 2);
        RUN(test_preempted_tokens);
        RUN(test_piggybacked_tokens);
        RUN(test_parked_tokens);
        axp_device_prepare(cpu, NULL, NULL);
        axp_device_free(cpu);
        axp_model_free(model);
        unlink(path);
        rmdir(dir);
        TEST_EXIT();
}
