/* SPDX-License-Identifier: MIT */
/* agentxpu sim: replay a Poisson trace of reactive and proactive requests on a simulated
 * SoC under each scheduling policy, with the engine's own scheduler on a virtual clock. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/parse.h"
#include "cli-trace.h"
#include "cli.h"
#include "sim/sim.h"

static void fclosep(FILE **f) {
        if (*f)
                fclose(*f);
}

static int usage(FILE *f) {
        fprintf(f,
                "usage: agentxpu sim [OPTIONS]\n"
                "Replay a Poisson trace on a simulated SoC and report per policy.\n\n"
                "  --soc NAME             core-ultra-125h (default)\n"
                "  --model NAME           llama-3b (default) or llama-8b, W8A16\n"
                "  --reactive-rate R      reactive requests per minute (default 3)\n"
                "  --proactive-rate P     proactive requests per minute (default 6)\n"
                "  --reactive-set NAME    lmsys, mtrag, bfcl, reactive-mixed (default)\n"
                "  --proactive-set NAME   proactivebench, samsum, cnndm, proactive-mixed (default)\n"
                "  --minutes M            trace length (default 15)\n"
                "  --seed S               trace seed (default 1)\n"
                "  --policy NAME          agentxpu, fcfs, serial or all (default)\n"
                "  --json                 print JSON\n"
                "scheduler settings (agentxpu):\n"
                "  --preempt-bound S      kernel-time bound that sets S_chk (0.1)\n"
                "  --s-chk N              fix the chunk length instead\n"
                "  --b-cap N              proactive piggyback cap (3)\n"
                "  --max-batch N          decode batch limit (32)\n"
                "  --aging S              proactive age threshold, 0: no aging (30)\n"
                "  --duty F               proactive duty budget on the dynamic role (0.5)\n"
                "  --gpu-busy F           share of the GPU other processes use (0)\n"
                "  --warmup S             time to compile a request's NPU kernels (profile: 2)\n"
                "  --disable MECH         preemption, prefill-first, contention-guard,\n"
                "                         elastic-split, reactive-first, warmup, assist,\n"
                "                         dual-reactive, pad, pipeline (repeatable)\n"
                "  --trace FILE           write every kernel the scheduler issues to FILE\n");
        return f == stderr ? 2 : 0;
}

static void print_json_policy(const char *name, const axp_sim_result *r, bool last) {
        printf("    \"%s\": {\n", name);
        printf("      \"reactive\": {\"mean_latency_s\": %.4f, \"p90_latency_s\": %.4f, "
               "\"mean_prefill_wait_s\": %.4f, \"completed\": %d, \"submitted\": %d, "
               "\"max_prefill_wait_s\": %.4f, \"mean_ttft_s\": %.4f, \"mean_tpot_s\": %.4f},\n",
               r->reactive.mean_latency_s, r->reactive.p90_latency_s,
               r->reactive.mean_prefill_wait_s, r->reactive.completed, r->reactive.submitted,
               r->reactive.max_prefill_wait_s, r->reactive.mean_ttft_s, r->reactive.mean_tpot_s);
        printf("      \"proactive\": {\"normalized_latency_s_per_token\": %.5f, "
               "\"throughput_req_per_min\": %.4f, \"completed\": %d, \"submitted\": %d, "
               "\"mean_latency_s\": %.4f, \"mean_prefill_wait_s\": %.4f},\n",
               r->proactive.normalized_latency_s_per_token, r->proactive.throughput_req_per_min,
               r->proactive.completed, r->proactive.submitted, r->proactive.mean_latency_s,
               r->proactive.mean_prefill_wait_s);
        printf("      \"igpu_busy_fraction\": %.4f,\n", r->igpu_busy_fraction);
        printf("      \"npu_busy_fraction\": %.4f,\n", r->npu_busy_fraction);
        printf("      \"energy_j_per_token\": %.5f,\n", r->energy_j_per_token);
        printf("      \"makespan_s\": %.3f,\n", r->makespan_s);
        printf("      \"s_chk\": %d\n", r->s_chk);
        printf("    }%s\n", last ? "" : ",");
}

static void print_table_row(const char *name, const axp_sim_result *r) {
        printf("%-9s %9.2f %9.2f %8.3f %5d/%-5d %9.4f %8.2f %5d/%-5d %6.1f%% %7.3f\n", name,
               r->reactive.mean_latency_s, r->reactive.p90_latency_s,
               r->reactive.mean_prefill_wait_s, r->reactive.completed, r->reactive.submitted,
               r->proactive.normalized_latency_s_per_token, r->proactive.throughput_req_per_min,
               r->proactive.completed, r->proactive.submitted, 100.0 * r->igpu_busy_fraction,
               r->energy_j_per_token);
}

int cli_sim(int argc, char **argv) {
        enum {
                O_SOC = 256, O_MODEL, O_POLICY,
                O_JSON, O_BOUND, O_SCHK, O_BCAP, O_MAXB, O_AGING, O_DUTY, O_GPUBUSY, O_DISABLE,
                O_TRACE, O_WARMUP, O_HELP,
        };
        static const struct option opts[] = {
                { "soc", required_argument, NULL, O_SOC },
                { "model", required_argument, NULL, O_MODEL },
                CLI_TRACE_OPTIONS,
                { "policy", required_argument, NULL, O_POLICY },
                { "json", no_argument, NULL, O_JSON },
                { "preempt-bound", required_argument, NULL, O_BOUND },
                { "s-chk", required_argument, NULL, O_SCHK },
                { "b-cap", required_argument, NULL, O_BCAP },
                { "max-batch", required_argument, NULL, O_MAXB },
                { "aging", required_argument, NULL, O_AGING },
                { "duty", required_argument, NULL, O_DUTY },
                { "gpu-busy", required_argument, NULL, O_GPUBUSY },
                { "disable", required_argument, NULL, O_DISABLE },
                { "trace", required_argument, NULL, O_TRACE },
                { "warmup", required_argument, NULL, O_WARMUP },
                { "help", no_argument, NULL, O_HELP },
                {},
        };
        const char *soc_name = "core-ultra-125h", *model = "llama-3b", *policy = "all";
        axp_sim_replay_opts ro = { 0 };
        _cleanup_(fclosep) FILE *log = NULL;
        bool json = false;
        cli_trace tr = { .p = { .reactive_per_min = 3, .proactive_per_min = 6, .minutes = 15, .seed = 1 },
                         .rset = "reactive-mixed", .pset = "proactive-mixed" };
        axp_sched_config cfg;
        const axp_soc_profile *soc;
        axp_heg_shape shape;
        axp_trace_req *trace = NULL;
        axp_sim_result res[AXP_POLICY__COUNT];
        bool run[AXP_POLICY__COUNT] = { 0 };
        axp_error err = { 0 };
        int n = 0, c, r;
        uint64_t u;

        axp_sched_config_default(&cfg);
        optind = 1;
        while ((c = cli_getopt(argc, argv, "", opts)) >= 0) {
                if ((r = cli_trace_option(c, optarg, &tr)) != 0) {
                        if (r < 0)
                                return 2;
                        continue;
                }
                switch (c) {
                case O_SOC:
                        soc_name = optarg;
                        break;
                case O_MODEL:
                        model = optarg;
                        break;
                case O_POLICY:
                        policy = optarg;
                        break;
                case O_JSON:
                        json = true;
                        break;
                case O_BOUND:
                        if (!cli_double("--preempt-bound", optarg, 0.001, 10, &cfg.preempt_bound_s))
                                return 2;
                        break;
                case O_SCHK:
                        if (!cli_uint("--s-chk", optarg, 1, 4096, &u))
                                return 2;
                        cfg.s_chk = (int) u;
                        break;
                case O_BCAP:
                        if (!cli_uint("--b-cap", optarg, 0, AXP_MAX_BATCH, &u))
                                return 2;
                        cfg.b_cap = (int) u;
                        break;
                case O_MAXB:
                        if (!cli_uint("--max-batch", optarg, 1, AXP_MAX_BATCH, &u))
                                return 2;
                        cfg.max_batch = (int) u;
                        break;
                case O_AGING:
                        if (!cli_double("--aging", optarg, 0, 1e6, &cfg.aging_s))
                                return 2;
                        break;
                case O_DUTY:
                        if (!cli_double("--duty", optarg, 0, 1, &cfg.proactive_duty))
                                return 2;
                        break;
                case O_GPUBUSY:
                        if (!cli_double("--gpu-busy", optarg, 0, 1, &ro.gpu_busy))
                                return 2;
                        break;
                case O_DISABLE:
                        if (strcmp(optarg, "preemption") == 0)
                                cfg.preemption = false;
                        else if (strcmp(optarg, "prefill-first") == 0)
                                cfg.prefill_first = false;
                        else if (strcmp(optarg, "contention-guard") == 0)
                                cfg.contention_guard = false;
                        else if (strcmp(optarg, "elastic-split") == 0)
                                cfg.elastic_split = false;
                        else if (strcmp(optarg, "reactive-first") == 0)
                                cfg.reactive_first = false;
                        else if (strcmp(optarg, "warmup") == 0)
                                cfg.warmup = false;
                        else if (strcmp(optarg, "assist") == 0)
                                cfg.assist = false;
                        else if (strcmp(optarg, "dual-reactive") == 0)
                                cfg.dual_reactive = false;
                        else if (strcmp(optarg, "pad") == 0)
                                cfg.pad = false;
                        else if (strcmp(optarg, "pipeline") == 0)
                                cfg.pipeline = false;
                        else
                                return cli_usage_error("--disable: unknown mechanism '%s'", optarg);
                        break;
                case O_TRACE:
                        if (log)
                                fclose(log);
                        log = fopen(optarg, "we");
                        if (!log)
                                return cli_fail("--trace: cannot write '%s': %s", optarg,
                                                strerror(errno));
                        ro.log = log;
                        break;
                case O_WARMUP:
                        if (!cli_double("--warmup", optarg, 0.001, 3600, &ro.warmup_s))
                                return 2;
                        break;
                case O_HELP:
                        return usage(stdout);
                default:
                        return 2;
                }
        }
        if (optind < argc)
                return cli_usage_error("unexpected argument '%s'", argv[optind]);

        if (strcmp(policy, "all") == 0) {
                for (int i = 0; i < AXP_POLICY__COUNT; i++)
                        run[i] = true;
        } else {
                axp_policy p;
                if (axp_policy_from_name(policy, &p) < 0)
                        return cli_usage_error("--policy: expected agentxpu, fcfs, serial or all, not '%s'",
                                               policy);
                run[p] = true;
        }
        if (axp_soc_profile_find(soc_name, &soc, &err) < 0 ||
            axp_sim_model_shape(model, &shape, &err) < 0 ||
            cli_trace_sets(&tr, &err) < 0)
                return cli_usage_error("%s", err.msg);
        tr.p.max_ctx = cfg.max_ctx;
        r = axp_trace_generate(&tr.p, &trace, &n, &err);
        if (r < 0)
                return cli_fail("%s", err.msg);

        for (int i = 0; i < AXP_POLICY__COUNT; i++) {
                if (!run[i])
                        continue;
                cfg.policy = (axp_policy) i;
                r = axp_sim_replay(soc, &shape, &cfg, &ro, trace, n, &res[i], &err);
                if (r < 0) {
                        free(trace);
                        return cli_fail("%s: %s", axp_policy_name(i), err.msg);
                }
        }
        free(trace);

        if (json) {
                int last = -1;
                for (int i = 0; i < AXP_POLICY__COUNT; i++)
                        if (run[i])
                                last = i;
                printf("{\n  \"policies\": {\n");
                for (int i = 0; i < AXP_POLICY__COUNT; i++)
                        if (run[i])
                                print_json_policy(axp_policy_name(i), &res[i], i == last);
                printf("  }\n}\n");
                return 0;
        }
        printf("%s, %s, %.3g reactive/min (%s) + %.3g proactive/min (%s), %.3g min, seed %llu: "
               "%d requests\n\n",
               soc->name, model, tr.p.reactive_per_min, tr.rset, tr.p.proactive_per_min, tr.pset, tr.p.minutes,
               (unsigned long long) tr.p.seed, n);
        printf("%-9s %9s %9s %8s %11s %9s %8s %11s %7s %7s\n", "policy", "react.s", "p90 s",
               "wait s", "react.done", "pro.s/tok", "pro/min", "pro.done", "iGPU", "J/tok");
        for (int i = 0; i < AXP_POLICY__COUNT; i++)
                if (run[i])
                        print_table_row(axp_policy_name(i), &res[i]);
        return 0;
}
