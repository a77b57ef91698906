/* SPDX-License-Identifier: MIT */
/* The scheduler with real devices in its roles, and graphics telemetry in its budget.
 *
 * 1. The static role on the CPU and the dynamic role on OpenCL, under the scheduler, with a
 *    reactive request preempting a proactive prefill: both requests generate what the CPU
 *    alone generates. The clock is virtual (the simulated Core Ultra's cost model) and every
 *    task also runs on the real device bound to its role, so the schedule is deterministic
 *    and the tokens are real.
 * 2. The fake telemetry source reports a busy desktop, sampled into the scheduler as the
 *    engine does: proactive work on the dynamic role stays under the duty budget less the
 *    desktop's share, recovers when the desktop goes idle, and a reactive request meanwhile
 *    uses the dynamic role as much as it needs, as fast as on an idle desktop. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "devices/discovery.h"
#include "devices/cpu-device.h"
#include "devices/forward.h"
#include "devices/gpu-telemetry.h"
#include "mkmodel.h"
#include "sched-harness.h"
#include "test.h"
#include "kernels/types.h"

/* 1. Roles on real devices ----------------------------------------------------------------- */

#define P_LEN 600
#define R_LEN 100
#define P_OUT 10
#define R_OUT 6

static axp_model *model;
static axp_device *cpu, *ocl;

typedef struct run_req {
        axp_seq seq;
        int32_t out[16];
        int n_out, want;
        bool done;
        axp_req_stats st;
} run_req;

static int32_t argmax(const float *x, int n) {
        int32_t best = 0;
        for (int i = 1; i < n; i++)
                if (x[i] > x[best])
                        best = i;
        return best;
}

static bool greedy_next(void *ud, uint64_t id, axp_seq *seq, int32_t *ret_token,
                        axp_finish_reason *ret_reason) {
        run_req *q = ud;
        int32_t best = argmax(seq->logits, model->hp.n_vocab);
        q->out[q->n_out++] = best;
        if (q->n_out >= q->want) {
                *ret_reason = AXP_FINISH_LENGTH;
                return false;
        }
        *ret_token = best;
        return true;
}

static void greedy_finished(void *ud, uint64_t id, axp_finish_reason reason,
                            const axp_req_stats *st) {
        run_req *q = ud;
        q->done = true;
        q->st = *st;
}

static const axp_sched_req_ops greedy_ops = { .next = greedy_next, .finished = greedy_finished };

typedef struct world {
        axp_sim *sim;
        axp_sched *sched;
        run_req p, r;
        int32_t p_tokens[P_LEN], r_tokens[R_LEN];
        int tasks_on[AXP_SIM_MAX_DEVS];
        int static_dev, dynamic_dev;
} world;

static void count_task(void *ud, double now, int dev, const axp_task *t, const uint64_t *ids,
                       const axp_kind *kinds) {
        world *w = ud;
        if (dev >= 0 && dev < AXP_SIM_MAX_DEVS)
                w->tasks_on[dev]++;
}

static void arrive_r(void *ud) {
        world *w = ud;
        axp_error err = { 0 };
        CHECK(axp_sched_submit(w->sched, AXP_REACTIVE, &w->r.seq, w->r_tokens, R_LEN, &greedy_ops,
                               &w->r, NULL, &err) == 0);
}

/* The proactive request alone (t_reactive < 0) or with the reactive one arriving then;
 * returns the proactive request's time to first token. */
static double run_roles(world *w, double t_reactive) {
        const axp_soc_profile *soc;
        axp_sched_device devs[AXP_SIM_MAX_DEVS];
        axp_heg_shape shape;
        axp_sched_config cfg;
        axp_error err = { 0 };

        memset(&w->p, 0, sizeof(w->p));
        memset(&w->r, 0, sizeof(w->r));
        memset(w->tasks_on, 0, sizeof(w->tasks_on));
        w->p.want = P_OUT;
        w->r.want = R_OUT;
        CHECK(axp_seq_init(&w->p.seq, model, AXP_TYPE_F32, 1024, P_LEN + P_OUT, &err) == 0);
        CHECK(axp_seq_init(&w->r.seq, model, AXP_TYPE_F32, 1024, R_LEN + R_OUT, &err) == 0);
        CHECK(axp_soc_profile_find("core-ultra-125h", &soc, &err) == 0);
        axp_heg_shape_from_model(model, AXP_TYPE_F32, &shape);
        CHECK(axp_sim_new(soc, &shape, &w->sim, &err) == 0);
        w->static_dev = soc->static_dev;
        w->dynamic_dev = soc->dynamic_dev;
        for (int i = 0; i < soc->n_devs; i++) {
                devs[i] = (axp_sched_device) { .name = soc->devs[i].name,
                                              .calib = soc->devs[i].calib,
                                              .warmup_s = soc->devs[i].warmup_s,
                                              .graphics = soc->devs[i].kind == AXP_DEV_IGPU };
                /* the static role's tasks run on the CPU, the dynamic role's on OpenCL */
                axp_sim_wrap_device(w->sim, i, i == soc->dynamic_dev ? ocl : cpu);
        }
        axp_sched_config_default(&cfg);
        cfg.max_ctx = 1024; /* S_chk = 64: many kernels to stop between */
        CHECK(axp_sched_new(&cfg, &shape, axp_sim_env(w->sim), devs, soc->n_devs, soc->static_dev,
                            soc->dynamic_dev, &w->sched, &err) == 0);
        axp_sim_attach(w->sim, w->sched);
        axp_sched_set_trace(w->sched, count_task, w);
        CHECK(axp_sched_submit(w->sched, AXP_PROACTIVE, &w->p.seq, w->p_tokens, P_LEN, &greedy_ops,
                               &w->p, NULL, &err) == 0);
        if (t_reactive >= 0)
                axp_sim_at(w->sim, t_reactive, arrive_r, w);
        CHECK_MSG(axp_sim_run(w->sim, INFINITY, &err) == 0, "%s", err.msg);
        CHECK(w->p.done && w->p.n_out == P_OUT);
        CHECK(t_reactive < 0 || (w->r.done && w->r.n_out == R_OUT));
        axp_sched_free(w->sched);
        axp_sim_free(w->sim);
        axp_seq_free(&w->p.seq);
        axp_seq_free(&w->r.seq);
        return w->p.st.ttft_s;
}

/* Greedy continuation on the CPU alone; margins[i]: top-1 minus top-2 logit at step i. */
static void cpu_alone(const int32_t *prompt, int n, int n_out, int32_t *out, double *margins) {
        axp_seq s;
        axp_error err = { 0 };
        CHECK(axp_seq_init(&s, model, AXP_TYPE_F32, 1024, n + n_out, &err) == 0);
        CHECK(axp_forward_prefill(cpu, &s, prompt, n, 64, &err) == 0);
        for (int i = 0; i < n_out; i++) {
                const int nv = model->hp.n_vocab;
                out[i] = argmax(s.logits, nv);
                double second = -INFINITY;
                for (int k = 0; k < nv; k++)
                        if (k != out[i])
                                second = fmax(second, s.logits[k]);
                margins[i] = s.logits[out[i]] - second;
                if (i + 1 < n_out)
                        CHECK(axp_forward_decode(cpu, &(axp_seq *) { &s }, &out[i], 1, &err) == 0);
        }
        axp_seq_free(&s);
}

/* Equal up to the first step whose margin is too thin for two float orders to agree on. */
static int compare_tokens(const char *who, const int32_t *want, const double *margins,
                          const int32_t *got, int n) {
        int i = 0;
        for (; i < n && got[i] == want[i]; i++)
                ;
        if (i < n && margins[i] < 1e-4) {
                printf("  %s: %d tokens equal, then a step with margin %.1e\n", who, i, margins[i]);
                return 0;
        }
        printf("  %s: %d of %d tokens equal to the CPU alone's\n", who, i, n);
        return i == n ? 0 : -1;
}

static void test_roles_with_preemption(void) {
        static world w;
        int32_t p_cpu[P_OUT], r_cpu[R_OUT];
        double p_margin[P_OUT], r_margin[R_OUT];

        for (int i = 0; i < P_LEN; i++)
                w.p_tokens[i] = (i * 7919 + 11) % model->hp.n_vocab;
        for (int i = 0; i < R_LEN; i++)
                w.r_tokens[i] = (i * 104729 + 5) % model->hp.n_vocab;
        cpu_alone(w.p_tokens, P_LEN, P_OUT, p_cpu, p_margin);
        cpu_alone(w.r_tokens, R_LEN, R_OUT, r_cpu, r_margin);

        double ttft = run_roles(&w, -1);
        CHECK_EQ_INT(compare_tokens("proactive alone", p_cpu, p_margin, w.p.out, P_OUT), 0);
        CHECK(w.tasks_on[w.static_dev] > 0 && w.tasks_on[w.dynamic_dev] > 0);

        /* the reactive request arrives a third of the way into the proactive prefill */
        run_roles(&w, ttft / 3);
        printf("  preemptions of the proactive request: %u; tasks: %d static (CPU), "
               "%d dynamic (OpenCL)\n",
               w.p.st.preemptions, w.tasks_on[w.static_dev], w.tasks_on[w.dynamic_dev]);
        CHECK(w.p.st.preemptions >= 1);
        CHECK(w.r.st.ttft_s < w.p.st.ttft_s);
        CHECK(w.tasks_on[w.static_dev] > 0 && w.tasks_on[w.dynamic_dev] > 0);
        CHECK_EQ_INT(compare_tokens("proactive, preempted", p_cpu, p_margin, w.p.out, P_OUT), 0);
        CHECK_EQ_INT(compare_tokens("reactive", r_cpu, r_margin, w.r.out, R_OUT), 0);
}

/* 2. Telemetry and the duty budget --------------------------------------------------------- */

#define SAMPLE_S 0.5
#define WIN_S    10.0

static harness h;
static char busy_file[256];

typedef struct sampler {
        axp_gpu_telemetry *t;
        double until;
        int samples;
} sampler;

/* What the engine does on its timer: sample the telemetry, hand it to the scheduler. */
static void sample(void *ud) {
        sampler *s = ud;
        double f;
        if (axp_gpu_telemetry_sample(s->t, axp_sim_now(h.sim), &f) == 0) {
                axp_sched_set_external_busy(h.sched, f);
                s->samples++;
        }
        if (axp_sim_now(h.sim) + SAMPLE_S < s->until)
                axp_sim_at(h.sim, axp_sim_now(h.sim) + SAMPLE_S, sample, s);
}

static void set_busy(const char *v) {
        FILE *f = fopen(busy_file, "w");
        if (f) {
                fputs(v, f);
                fclose(f);
        }
}

static void desktop_idle(void *ud) {
        set_busy("0.0\n");
}

typedef struct budget_run {
        double proactive_share[64]; /* per window of WIN_S: proactive busy / window */
        int n_win;
        double reactive_latency, reactive_dyn_share;
} budget_run;

/* 20 proactive requests from t = 0; a reactive one at t = 40; the desktop keeps the GPU
 * `busy` until idle_at (if > 0), then goes idle. */
static void budget(const char *busy, double idle_at, budget_run *ret) {
        axp_sched_config cfg;
        axp_error err = { 0 };
        sampler s = { .until = 640 };

        set_busy(busy);
        axp_sched_config_default(&cfg); /* proactive duty 0.5 */
        cfg.aging_s = 0; /* no promotion: proactive requests stay proactive throughout */
        CHECK(h_init(&h, "llama-3b", &cfg) == 0);
        CHECK(axp_gpu_telemetry_open("auto", &s.t, &err) == 0);
        CHECK(strcmp(axp_gpu_telemetry_source(s.t), "fake") == 0);
        axp_sim_at(h.sim, 0, sample, &s);
        if (idle_at > 0)
                axp_sim_at(h.sim, idle_at, desktop_idle, NULL);
        for (int i = 0; i < 20; i++)
                h_add(&h, 0.0, AXP_PROACTIVE, 200, 300);
        h_req *r = h_add(&h, 40.0, AXP_REACTIVE, 500, 150);

        double prev = 0;
        memset(ret, 0, sizeof(*ret));
        for (int k = 0; k < 64; k++) {
                axp_sched_dev_stats st;
                h_run(&h, (k + 1) * WIN_S);
                axp_sched_device_stats(h.sched, h_dynamic_dev(&h), &st);
                ret->proactive_share[ret->n_win++] = (st.busy_proactive_s - prev) / WIN_S;
                prev = st.busy_proactive_s;
        }
        CHECK(r->done);
        ret->reactive_latency = r->st.latency_s;
        /* the dynamic role's time spent on tasks with the reactive request in them */
        double dyn = 0;
        for (int i = 0; i < h.n_tasks; i++)
                if (h.tasks[i].dev == h_dynamic_dev(&h) && !h.tasks[i].proactive_only)
                        dyn += h.tasks[i].dur;
        ret->reactive_dyn_share = dyn / r->st.latency_s;
        CHECK(s.samples > 100);
        axp_gpu_telemetry_free(s.t);
        h_free(&h);
}

static void test_telemetry_budget(void) {
        budget_run busy, idle;
        const double duty = 0.5, desktop = 0.6, allowed = duty * (1 - desktop);
        /* slack per window: the burst the budget holds (2 s of refill) and one kernel */
        const double slack = (allowed * 2.0 + 0.2) / WIN_S;

        budget("0.6\n", 60, &busy);
        budget("0.0\n", 0, &idle);
        double worst_busy = 0, best_after = 0, best_idle = 0;
        for (int k = 0; k < 6; k++) /* windows inside [0, 60 s): the desktop is busy */
                worst_busy = fmax(worst_busy, busy.proactive_share[k]);
        for (int k = 7; k < busy.n_win; k++)
                best_after = fmax(best_after, busy.proactive_share[k]);
        for (int k = 0; k < 6; k++)
                best_idle = fmax(best_idle, idle.proactive_share[k]);
        printf("  proactive share of the dynamic role per %.0f s: at most %.3f while the desktop "
               "is busy (budget %.2f), up to %.3f after it goes idle, up to %.3f on an idle "
               "desktop\n",
               WIN_S, worst_busy, allowed, best_after, best_idle);
        printf("  reactive request: latency %.2f s on a busy desktop, %.2f s on an idle one; "
               "it kept the dynamic role busy %.0f%% of its life\n",
               busy.reactive_latency, idle.reactive_latency, busy.reactive_dyn_share * 100);

        CHECK_MSG(worst_busy <= allowed + slack, "%.3f > %.3f", worst_busy, allowed + slack);
        CHECK_MSG(worst_busy >= allowed * 0.5, "the shrunk budget should still be used: %.3f",
                  worst_busy);
        CHECK_MSG(best_after > allowed + slack, "no recovery after the desktop went idle: %.3f",
                  best_after);
        CHECK_MSG(best_idle > allowed + slack, "%.3f", best_idle);
        /* reactive work is not throttled: it takes more of the GPU than proactive work may,
         * and it is no slower than on an idle desktop */
        CHECK_MSG(busy.reactive_dyn_share > allowed + slack, "%.3f", busy.reactive_dyn_share);
        CHECK_MSG(busy.reactive_latency <= idle.reactive_latency * 1.02, "%.3f > %.3f",
                  busy.reactive_latency, idle.reactive_latency);
}

int main(void) {
        char dir[] = "/tmp/axp-test-sched-devices-XXXXXX", path[256];
        axp_mkmodel_params mp;
        axp_error err = { 0 };

        if (!mkdtemp(dir))
                TEST_SKIP("cannot make a temporary folder");
        snprintf(busy_file, sizeof(busy_file), "%s/gpu-busy", dir);
        setenv("AXP_GPU_BUSY_FILE", busy_file, 1);
        RUN(test_telemetry_budget);

        snprintf(path, sizeof(path), "%s/model.gguf", dir);
        axp_mkmodel_defaults(&mp);
        mp.type = AXP_TYPE_F32;
        mp.n_layer = 3;
        mp.n_ctx = 1024;
        mp.seed = 7;
        mp.path = path;
        int r = 0;
        if (axp_mkmodel(&mp, &err) < 0 || axp_model_load(path, &model, &err) < 0 ||
            axp_cpu_device_new(2, &cpu, &err) < 0 || axp_device_prepare(cpu, model, &err) < 0)
                r = -EIO;
        else if ((r = axp_device_open("opencl", 2, &ocl, &err)) == 0)
                r = axp_device_prepare(ocl, model, &err);
        if (r == -ENODEV)
                printf("SKIP test_roles_with_preemption: %s\n", err.msg);
        else if (r < 0) {
                fprintf(stderr, "%s\n", err.msg);
                test_failures_++;
        } else {
                printf("static role: %s; dynamic role: %s\n", axp_device_name(cpu), axp_device_name(ocl));
                RUN(test_roles_with_preemption);
        }
        axp_device_free(ocl);
        axp_device_free(cpu);
        axp_model_free(model);
        unlink(path);
        unlink(busy_file);
        rmdir(dir);
        TEST_EXIT();
}
