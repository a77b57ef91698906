/* SPDX-License-Identifier: MIT */
/* The simulated SoC: its kernel latencies agree with the figures the paper measured, DRAM
 * contention slows memory-bound kernels that overlap (and barely compute-bound ones), the
 * trace generator is deterministic and follows the workload mixes, and a replay completes
 * every request under every policy. */
#include <stdio.h>

#include "sched-harness.h"
#include "test.h"

static const axp_soc_profile *soc125(void) {
        const axp_soc_profile *p = NULL;
        axp_error err;
        CHECK(axp_soc_profile_find("core-ultra-125h", &p, &err) == 0);
        return p;
}

static double lat(const axp_calib *c, const axp_heg_shape *s, axp_op op, int n, double attn,
                  double kv) {
        return axp_calib_latency(c, axp_heg_cost(s, op, n, 1, attn, kv));
}

/* papers.md: with Llama-3.1-8B a 256-token chunk kernel takes <= 38 ms on NPU and iGPU and
 * attention over 2048 tokens <= 97 ms. The profile sits just under both. */
static void test_calibration_figures(void) {
        const axp_soc_profile *p = soc125();
        axp_heg_shape s8;
        axp_error err;

        CHECK(axp_sim_model_shape("llama-8b", &s8, &err) == 0);
        for (int d = 0; d < 2; d++) {
                const axp_calib *c = &p->devs[d].calib;
                double k3 = lat(c, &s8, AXP_OP_K3, 256, 0, 0), k1 = lat(c, &s8, AXP_OP_K1, 256, 0, 0);
                CHECK_MSG(k3 <= 0.038 && k3 >= 0.030, "%s: K3(256) %.4f s", p->devs[d].name, k3);
                CHECK(k1 < k3);
                /* a chunk is compute-bound, a decode step memory-bound */
                CHECK(!axp_calib_memory_bound(c, axp_heg_cost(&s8, AXP_OP_K3, 256, 1, 0, 0)));
                CHECK(axp_calib_memory_bound(c, axp_heg_cost(&s8, AXP_OP_K3, 1, 1, 0, 0)));
        }
        double attn = lat(&p->devs[p->dynamic_dev].calib, &s8, AXP_OP_K2, 2048,
                          2048.0 * 2049 / 2, 2048);
        CHECK_MSG(attn <= 0.097 && attn >= 0.080, "K2(2048) %.4f s", attn);

        /* a decode step of the 8B model streams its ~7.5 GB of weights at the iGPU's
         * bandwidth: about 120 ms */
        const axp_calib *g = &p->devs[p->dynamic_dev].calib;
        double layer = lat(g, &s8, AXP_OP_K1, 1, 0, 0) + lat(g, &s8, AXP_OP_K3, 1, 0, 0);
        double step = s8.n_layer * layer + lat(g, &s8, AXP_OP_HEAD, 1, 0, 0);
        CHECK_MSG(step > 0.10 && step < 0.14, "decode step %.4f s", step);
}

/* S_chk comes from the preemption bound: 256 on this SoC; on a slow device it shrinks so
 * that every chunk kernel still fits the bound. */
static void test_s_chk(void) {
        static harness h;
        axp_sched_config cfg;

        axp_sched_config_default(&cfg);
        CHECK(h_init(&h, "llama-8b", &cfg) == 0);
        CHECK_EQ_INT(axp_sched_s_chk(h.sched), 256);
        h_free(&h);

        /* a device a tenth as fast */
        const axp_soc_profile *p = soc125();
        axp_heg_shape s8;
        axp_sim *sim;
        axp_sched *s;
        axp_error err;
        axp_sched_device d[2];
        CHECK(axp_sim_model_shape("llama-8b", &s8, &err) == 0);
        for (int i = 0; i < 2; i++) {
                d[i] = (axp_sched_device) { .name = "slow", .calib = p->devs[i].calib };
                d[i].calib.u_c /= 10;
        }
        CHECK(axp_sim_new(p, &s8, &sim, &err) == 0);
        CHECK(axp_sched_new(&cfg, &s8, axp_sim_env(sim), d, 2, 0, 1, &s, &err) == 0);
        int n = axp_sched_s_chk(s);
        CHECK_MSG(n < 256 && n >= 16, "S_chk %d", n);
        for (int i = 0; i < 2; i++)
                CHECK(lat(&d[i].calib, &s8, AXP_OP_K3, n, 0, 0) <= cfg.preempt_bound_s);
        axp_sched_free(s);
        axp_sim_free(sim);
}

static double run_alone_or_with(const axp_task *a, int dev_a, const axp_task *b, int dev_b) {
        const axp_soc_profile *p = soc125();
        axp_heg_shape s8;
        axp_sim *sim;
        axp_sim_dev_stats st;
        axp_error err;

        CHECK(axp_sim_model_shape("llama-8b", &s8, &err) == 0);
        CHECK(axp_sim_new(p, &s8, &sim, &err) == 0);
        const axp_sched_env *env = axp_sim_env(sim);
        CHECK(env->issue(env->userdata, dev_a, a) == 0);
        if (b)
                CHECK(env->issue(env->userdata, dev_b, b) == 0);
        CHECK(axp_sim_run(sim, INFINITY, &err) == 0);
        axp_sim_device_stats(sim, dev_a, &st);
        axp_sim_free(sim);
        return st.busy_s;
}

/* HeRo's model: memory-bound kernels that overlap slow each other; a compute-bound kernel
 * barely notices. */
static void test_contention(void) {
        const axp_soc_profile *p = soc125();
        axp_seq q = { .n_past = 512, .n_ctx_max = 4096 };
        axp_task decode = { .op = AXP_OP_K3, .variant = AXP_VAR_DECODE, .n_spans = 1 };
        axp_task chunk = { .op = AXP_OP_K3, .variant = AXP_VAR_STATIC, .n_spans = 1 };
        decode.spans[0] = (axp_span) { .seq = &q, .t0 = 0, .t1 = 1 };
        chunk.spans[0] = (axp_span) { .seq = &q, .t0 = 0, .t1 = 256 };
        int npu = p->static_dev, igpu = p->dynamic_dev;

        double gemv_alone = run_alone_or_with(&decode, igpu, NULL, 0);
        double gemv_both = run_alone_or_with(&decode, igpu, &decode, npu);
        double gemm_alone = run_alone_or_with(&chunk, npu, NULL, 0);
        double gemm_with = run_alone_or_with(&chunk, npu, &decode, igpu);
        CHECK_MSG(gemv_both > 1.2 * gemv_alone, "GEMV %.5f alone, %.5f together", gemv_alone,
                  gemv_both);
        CHECK_MSG(gemm_with < 1.02 * gemm_alone, "GEMM %.5f alone, %.5f with a GEMV", gemm_alone,
                  gemm_with);
        CHECK(gemm_with >= gemm_alone - 1e-12);
}

static void test_trace(void) {
        axp_trace_params tp = { .reactive_per_min = 3, .proactive_per_min = 6, .minutes = 600,
                                .seed = 42, .max_ctx = 4096 };
        axp_trace_req *a = NULL, *b = NULL, *c = NULL;
        int na, nb, nc, nr = 0;
        double psum[8] = { 0 }, osum[8] = { 0 };
        int pcount[8] = { 0 };
        axp_error err;

        CHECK(axp_workload_set_find("reactive-mixed", AXP_REACTIVE, &tp.reactive_set, &err) == 0);
        CHECK(axp_workload_set_find("proactive-mixed", AXP_PROACTIVE, &tp.proactive_set, &err) == 0);
        CHECK(axp_workload_set_find("lmsys", AXP_PROACTIVE, &tp.proactive_set, &err) == -ENOENT);
        CHECK(axp_trace_generate(&tp, &a, &na, &err) == 0);
        CHECK(axp_trace_generate(&tp, &b, &nb, &err) == 0);
        CHECK(na == nb && memcmp(a, b, sizeof(*a) * na) == 0);
        /* 9 per minute over 600 minutes: 5400, within 4 standard deviations */
        CHECK_MSG(fabs(na - 5400.0) < 4 * sqrt(5400.0), "%d arrivals", na);
        for (int i = 0; i < na; i++) {
                CHECK(a[i].prompt >= 8 && a[i].output >= 1 && a[i].output <= 1600);
                CHECK(a[i].prompt + a[i].output <= 4096);
                if (i)
                        CHECK(a[i].t >= a[i - 1].t);
                nr += a[i].kind == AXP_REACTIVE;
                psum[a[i].set] += a[i].prompt;
                osum[a[i].set] += a[i].output;
                pcount[a[i].set]++;
        }
        CHECK_MSG(fabs(nr - 1800.0) < 4 * sqrt(1800.0), "%d reactive", nr);
        /* each set's mean lengths follow papers.md (log-normal around the mean) */
        static const double pm[6] = { 900, 200, 1000, 100, 1500, 600 };
        static const double om[6] = { 100, 30, 70, 220, 130, 40 };
        for (int s = 0; s < 6; s++) {
                CHECK(pcount[s] > 300);
                CHECK_MSG(fabs(psum[s] / pcount[s] / pm[s] - 1) < 0.1, "%s prompt mean %.0f",
                          axp_workload_set_name(s), psum[s] / pcount[s]);
                CHECK_MSG(fabs(osum[s] / pcount[s] / om[s] - 1) < 0.15, "%s output mean %.0f",
                          axp_workload_set_name(s), osum[s] / pcount[s]);
        }

        /* a different reactive rate leaves the proactive arrivals as they were */
        tp.reactive_per_min = 5;
        CHECK(axp_trace_generate(&tp, &c, &nc, &err) == 0);
        int j = 0, same = 1, np = 0;
        for (int i = 0; i < na; i++) {
                if (a[i].kind != AXP_PROACTIVE)
                        continue;
                np++;
                while (j < nc && c[j].kind != AXP_PROACTIVE)
                        j++;
                if (j >= nc || c[j].t != a[i].t || c[j].prompt != a[i].prompt)
                        same = 0;
                j++;
        }
        CHECK(same && np > 0);
        tp.seed = 43;
        free(b);
        CHECK(axp_trace_generate(&tp, &b, &nb, &err) == 0);
        CHECK(nb != nc || memcmp(b, c, sizeof(*b) * nb) != 0);

        tp.minutes = -1;
        CHECK(axp_trace_generate(&tp, &b, &nb, &err) == -EINVAL);
        free(a);
        free(b);
        free(c);
}

/* Every policy completes every request of a trace; under load, agentxpu answers reactive
 * requests much sooner than fcfs, without using more of the iGPU. */
static void test_replay(void) {
        const axp_soc_profile *p = soc125();
        axp_trace_params tp = { .reactive_per_min = 5, .proactive_per_min = 10, .minutes = 10,
                                .seed = 3, .max_ctx = 4096 };
        axp_trace_req *tr = NULL;
        axp_sim_result res[AXP_POLICY__COUNT];
        axp_heg_shape s8;
        axp_error err;
        int n;

        CHECK(axp_sim_model_shape("llama-8b", &s8, &err) == 0);
        CHECK(axp_workload_set_find("reactive-mixed", AXP_REACTIVE, &tp.reactive_set, &err) == 0);
        CHECK(axp_workload_set_find("proactive-mixed", AXP_PROACTIVE, &tp.proactive_set, &err) == 0);
        CHECK(axp_trace_generate(&tp, &tr, &n, &err) == 0);
        for (int i = 0; i < AXP_POLICY__COUNT; i++) {
                axp_sched_config cfg;
                axp_sched_config_default(&cfg);
                cfg.policy = (axp_policy) i;
                CHECK(axp_sim_replay(p, &s8, &cfg, NULL, tr, n, &res[i], &err) == 0);
                CHECK_EQ_INT(res[i].reactive.completed, res[i].reactive.submitted);
                CHECK_EQ_INT(res[i].proactive.completed, res[i].proactive.submitted);
                CHECK(res[i].reactive.completed + res[i].proactive.completed == n);
                CHECK(res[i].energy_j_per_token > 0);
                CHECK(res[i].igpu_busy_fraction > 0 && res[i].igpu_busy_fraction <= 1.0);
        }
        const axp_sim_result *ax = &res[AXP_POLICY_AGENTXPU], *fc = &res[AXP_POLICY_FCFS];
        CHECK_MSG(ax->reactive.mean_latency_s < 0.5 * fc->reactive.mean_latency_s,
                  "reactive %.2f s vs fcfs %.2f s", ax->reactive.mean_latency_s,
                  fc->reactive.mean_latency_s);
        CHECK(ax->reactive.mean_prefill_wait_s < 0.1);
        CHECK(ax->igpu_busy_fraction < fc->igpu_busy_fraction);
        CHECK(res[AXP_POLICY_SERIAL].npu_busy_fraction > 0);
        CHECK_EQ_INT(fc->npu_busy_fraction, 0); /* fcfs, like iGPU serving, leaves the NPU idle */

        /* the same trace replays to the same numbers */
        axp_sched_config cfg;
        axp_sim_result again;
        axp_sched_config_default(&cfg);
        CHECK(axp_sim_replay(p, &s8, &cfg, NULL, tr, n, &again, &err) == 0);
        CHECK(memcmp(&again, ax, sizeof(again)) == 0);
        free(tr);
}

int main(void) {
        RUN(test_calibration_figures);
        RUN(test_s_chk);
        RUN(test_contention);
        RUN(test_trace);
        RUN(test_replay);
        TEST_EXIT();
}
