/* SPDX-License-Identifier: MIT */
/* agentxpu bench: the kind of trace `agentxpu sim` replays in virtual time, replayed on the
 * wall clock by the real engine in this process, once per policy, with the same requests
 * arriving at the same moments. Prompts are made of words to the trace's token counts;
 * answers run to the trace's output length (greedy, no stop strings; a model whose answer
 * ends early just ends early). Reports per policy the reactive latency (mean, P90), the
 * reactive prefill wait (submit to first kernel: how long a reactive request waited for the
 * device to be preempted or freed; mean, P99, max) and the proactive throughput, then the
 * agentxpu/fcfs ratios. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli-model.h"
#include "cli-trace.h"
#include "cli.h"
#include "engine.h"
#include "base/rng.h"
#include "sim/sim.h"
#include "model/tokenizer.h"

static int usage(FILE *f) {
        fprintf(f,
                "usage: agentxpu bench -m MODEL [OPTIONS]\n"
                "Replay a Poisson trace of reactive and proactive requests on the real engine,\n"
                "in this process on the wall clock, once per policy, and report side by side.\n\n"
                "  -m, --model FILE       GGUF model\n"
                "  --reactive-rate R      reactive requests per minute (default 6)\n"
                "  --proactive-rate P     proactive requests per minute (default 12)\n"
                "  --reactive-set NAME    lmsys, mtrag, bfcl, reactive-mixed (default)\n"
                "  --proactive-set NAME   proactivebench, samsum, cnndm, proactive-mixed (default)\n"
                "  --minutes M            arrivals over M minutes per policy (default 2)\n"
                "  --seed S               trace seed (default 1)\n"
                "  --policy NAME          agentxpu, fcfs, serial, or all: agentxpu and fcfs\n"
                "                         (default all; serial only when named)\n"
                "  --threads N            CPU threads (default: one per core)\n"
                "  --static DEV           device of the static role (default auto)\n"
                "  --dynamic DEV          device of the dynamic role (default auto)\n"
                "  --b-cap N              proactive requests riding along in a decode batch with\n"
                "                         reactive ones (agentxpu; default 3)\n"
                "  --piggyback-slack S    on one device, a reactive decode step may grow by this\n"
                "                         share to carry proactive work (agentxpu; default 0:\n"
                "                         only what the cost model predicts to cost nothing)\n"
                "  --no-piggyback         proactive prefill waits for reactive decode instead\n"
                "  --kv-type T            each request's KV cache: f16 (default), f32 or q8_0\n"
                "  --cpu-share S          the CPU guard: share of the CPU proactive work may take\n"
                "                         while other processes keep it busy (agentxpu; 0.01 to 1,\n"
                "                         default 0.25; 1: no guard)\n"
                "  --no-idle-class        proactive steps at normal priority, not SCHED_IDLE\n"
                "  --aging S              proactive age threshold, 0: no aging (agentxpu; 30)\n"
                "  --drain S              after the last arrival, wait at most S seconds for the\n"
                "                         requests in flight, then cancel them (default 600)\n"
                "  --json                 print JSON\n");
        return f == stderr ? 2 : 0;
}

typedef struct replay replay;

typedef struct bench_req {
        replay *rp;
        axp_trace_req t;
        char *prompt;
        int prompt_tokens; /* as tokenized, BOS included */
        bool done;
        axp_finish_reason reason;
        axp_req_stats st;
        uint64_t id;
        double t_done; /* seconds since the replay's start */
} bench_req;

struct replay {
        pthread_mutex_t lock;
        pthread_cond_t cond;
        int n_done;
        double t0;
};

static void on_finished(void *ud, uint64_t id, axp_finish_reason reason, const axp_req_stats *st) {
        bench_req *r = ud;
        replay *rp = r->rp;

        (void) id;
        pthread_mutex_lock(&rp->lock);
        r->done = true;
        r->reason = reason;
        r->st = *st;
        r->t_done = axp_now() - rp->t0;
        rp->n_done++;
        pthread_cond_broadcast(&rp->cond);
        pthread_mutex_unlock(&rp->lock);
}

/* Common words, each one token in byte-level BPE vocabularies with a leading space. */
static const char *const words[] = {
        " the", " file", " notes", " meeting", " change", " report", " user", " project",
        " code", " message", " time", " work", " data", " list", " page", " team", " plan",
        " review", " test", " build", " today", " next", " week", " and", " of", " to", " in",
        " for", " with", " on", " is", " was", " new", " old", " draft", " mail",
};

static char *words_text(uint64_t seed, int n_words) {
        size_t cap = (size_t) n_words * 10 + 1, len = 0;
        char *s = malloc(cap);
        axp_rng g;

        if (!s)
                return NULL;
        axp_rng_seed(&g, seed);
        for (int i = 0; i < n_words; i++) {
                const char *w = words[axp_rng_next(&g) % ELEMENTSOF(words)];
                size_t l = strlen(w);
                memcpy(s + len, w, l);
                len += l;
        }
        s[len] = 0;
        return s;
}

static int count_tokens(const axp_tokenizer *tok, const char *text, int *ret) {
        int32_t *ids = NULL;
        axp_error err = { 0 };
        int n = 0;

        if (axp_tokenize(tok, text, strlen(text), AXP_TOK_ADD_BOS | AXP_TOK_PARSE_SPECIAL, &ids, &n,
                         &err) < 0)
                return cli_fail("%s", err.msg);
        free(ids);
        *ret = n;
        return 0;
}

/* A raw prompt of at most `want` tokens (BOS included), as close to it as words allow: the
 * longest prefix of a seeded word sequence that fits, found by bisection. */
static int make_prompt(const axp_tokenizer *tok, uint64_t seed, int want, char **ret, int *ret_n) {
        int lo = 1, hi = want, best_n = 0, n = 0;
        char *best = NULL;

        while (lo <= hi) {
                int mid = lo + (hi - lo) / 2;
                char *s = words_text(seed, mid);
                if (!s)
                        return cli_fail("out of memory");
                if (count_tokens(tok, s, &n) != 0) {
                        free(s);
                        free(best);
                        return 1;
                }
                if (n <= want) {
                        free(best);
                        best = s;
                        best_n = n;
                        lo = mid + 1;
                } else {
                        free(s);
                        hi = mid - 1;
                }
        }
        if (!best)
                return cli_fail("the model's tokenizer makes more than %d tokens of one word", want);
        *ret = best;
        *ret_n = best_n;
        return 0;
}

typedef struct policy_result {
        const char *name;
        struct {
                double mean_latency_s, p90_latency_s, mean_ttft_s;
                double mean_prefill_wait_s, p99_prefill_wait_s, max_prefill_wait_s;
                int completed, submitted;
        } reactive;
        struct {
                double mean_latency_s, normalized_latency_s_per_token, throughput_req_per_min;
                int completed, submitted;
        } proactive;
        unsigned preemptions;
        int cancelled_at_drain;
        double makespan_s;
        /* device time over every device, by kind of work (engine.h: axp_device_info) */
        struct {
                double busy, prefill_reactive, prefill_proactive, steps_reactive, steps_proactive;
                uint64_t n_steps_reactive, n_steps_proactive;
        } dev;
} policy_result;

static void sleep_until(double t) {
        double now = axp_now();
        if (t <= now)
                return;
        double d = t - now;
        struct timespec ts = { .tv_sec = (time_t) d, .tv_nsec = (long) ((d - floor(d)) * 1e9) };
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

static int run_policy(const axp_engine_config *base, const char *policy, bench_req *reqs, int n,
                      double drain_s, policy_result *res) {
        axp_engine_config c = *base;
        axp_engine *e = NULL;
        axp_error err = { 0 };
        replay rp = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };
        int r, n_submitted = 0;

        c.policy = policy;
        if (axp_engine_new(&c, &e, &err) < 0)
                return cli_fail("%s", err.msg);
        for (int i = 0; i < n; i++) {
                reqs[i].rp = &rp;
                reqs[i].done = false;
                memset(&reqs[i].st, 0, sizeof(reqs[i].st));
        }

        rp.t0 = axp_now();
        for (int i = 0; i < n; i++) {
                axp_request_opts o;
                axp_request_cbs cb = { .finished = on_finished, .userdata = &reqs[i] };

                sleep_until(rp.t0 + reqs[i].t.t);
                axp_request_opts_default(&o);
                o.raw = true;
                o.sampling.temperature = 0;
                o.max_tokens = (uint32_t) reqs[i].t.output;
                r = axp_engine_submit(e, reqs[i].t.kind, reqs[i].prompt, &o, &cb, &reqs[i].id, &err);
                if (r < 0) {
                        axp_engine_free(e);
                        return cli_fail("request %d (%s, %d prompt tokens): %s", i,
                                        axp_kind_name(reqs[i].t.kind), reqs[i].prompt_tokens, err.msg);
                }
                n_submitted++;
        }

        /* drain */
        double deadline = axp_now() + drain_s;
        struct timespec ts;
        pthread_mutex_lock(&rp.lock);
        while (rp.n_done < n_submitted) {
                double left = deadline - axp_now();
                if (left <= 0)
                        break;
                clock_gettime(CLOCK_REALTIME, &ts);
                double until = (double) ts.tv_sec + ts.tv_nsec / 1e9 + MIN(left, 1.0);
                ts.tv_sec = (time_t) until;
                ts.tv_nsec = (long) ((until - floor(until)) * 1e9);
                pthread_cond_timedwait(&rp.cond, &rp.lock, &ts);
        }
        int left_over = n_submitted - rp.n_done;
        pthread_mutex_unlock(&rp.lock);
        axp_device_info di[8];
        int n_di = MIN(axp_engine_devices(e, di, (int) ELEMENTSOF(di)), (int) ELEMENTSOF(di));
        /* freeing the engine cancels what is left; their finished callbacks run */
        axp_engine_free(e);

        /* statistics */
        double *lat = calloc((size_t) n + 1, sizeof(double)), *wait = calloc((size_t) n + 1, sizeof(double));
        int nl = 0, nw = 0, p_done = 0;
        double p_lat = 0, p_norm = 0, first_p = -1, last_p = 0, makespan = 0;
        if (!lat || !wait) {
                free(lat);
                free(wait);
                return cli_fail("out of memory");
        }
        memset(res, 0, sizeof(*res));
        res->name = policy;
        for (int i = 0; i < n_di; i++) {
                res->dev.busy += di[i].busy_s;
                res->dev.prefill_reactive += di[i].prefill_reactive_s;
                res->dev.prefill_proactive += di[i].prefill_proactive_s;
                res->dev.steps_reactive += di[i].steps_reactive_s;
                res->dev.steps_proactive += di[i].steps_proactive_s;
                res->dev.n_steps_reactive += di[i].steps_reactive;
                res->dev.n_steps_proactive += di[i].steps_proactive;
        }
        res->cancelled_at_drain = left_over;
        for (int i = 0; i < n; i++) {
                const bench_req *q = &reqs[i];
                bool ok = q->reason == AXP_FINISH_STOP || q->reason == AXP_FINISH_LENGTH;
                res->preemptions += q->st.preemptions;
                if (q->t.kind == AXP_REACTIVE) {
                        res->reactive.submitted++;
                        if (!ok)
                                continue;
                        res->reactive.completed++;
                        lat[nl++] = q->st.latency_s;
                        wait[nw++] = q->st.queue_wait_s;
                        res->reactive.mean_latency_s += q->st.latency_s;
                        res->reactive.mean_ttft_s += q->st.ttft_s;
                        res->reactive.mean_prefill_wait_s += q->st.queue_wait_s;
                        res->reactive.max_prefill_wait_s = MAX(res->reactive.max_prefill_wait_s,
                                                               q->st.queue_wait_s);
                } else {
                        res->proactive.submitted++;
                        if (first_p < 0)
                                first_p = q->t.t;
                        if (!ok)
                                continue;
                        p_done++;
                        p_lat += q->st.latency_s;
                        p_norm += q->st.latency_s / MAX(1u, q->st.prompt_tokens + q->st.generated_tokens);
                        last_p = MAX(last_p, q->t_done);
                }
                if (ok)
                        makespan = MAX(makespan, q->t_done);
        }
        if (res->reactive.completed) {
                res->reactive.mean_latency_s /= res->reactive.completed;
                res->reactive.mean_ttft_s /= res->reactive.completed;
                res->reactive.mean_prefill_wait_s /= res->reactive.completed;
                res->reactive.p90_latency_s = axp_quantile(lat, (size_t) nl, 0.9);
                res->reactive.p99_prefill_wait_s = axp_quantile(wait, (size_t) nw, 0.99);
        }
        res->proactive.completed = p_done;
        if (p_done) {
                res->proactive.mean_latency_s = p_lat / p_done;
                res->proactive.normalized_latency_s_per_token = p_norm / p_done;
                /* completed per minute from the first proactive arrival to the last completion */
                if (last_p > first_p)
                        res->proactive.throughput_req_per_min = p_done / ((last_p - first_p) / 60.0);
        }
        res->makespan_s = makespan;
        free(lat);
        free(wait);
        return 0;
}

static void print_json_policy(const policy_result *r, bool last) {
        printf("    \"%s\": {\n", r->name);
        printf("      \"reactive\": {\"mean_latency_s\": %.6f, \"p90_latency_s\": %.6f, "
               "\"mean_ttft_s\": %.6f, \"mean_prefill_wait_s\": %.6f, \"p99_prefill_wait_s\": %.6f, "
               "\"max_prefill_wait_s\": %.6f, \"completed\": %d, \"submitted\": %d},\n",
               r->reactive.mean_latency_s, r->reactive.p90_latency_s, r->reactive.mean_ttft_s,
               r->reactive.mean_prefill_wait_s, r->reactive.p99_prefill_wait_s,
               r->reactive.max_prefill_wait_s, r->reactive.completed, r->reactive.submitted);
        printf("      \"proactive\": {\"mean_latency_s\": %.6f, \"normalized_latency_s_per_token\": %.7f, "
               "\"throughput_req_per_min\": %.6f, \"completed\": %d, \"submitted\": %d},\n",
               r->proactive.mean_latency_s, r->proactive.normalized_latency_s_per_token,
               r->proactive.throughput_req_per_min, r->proactive.completed, r->proactive.submitted);
        printf("      \"device_time_s\": {\"total\": %.3f, \"prefill_reactive\": %.3f, "
               "\"prefill_proactive\": %.3f, \"steps_reactive\": %.3f, \"steps_proactive\": %.3f},\n",
               r->dev.busy, r->dev.prefill_reactive, r->dev.prefill_proactive, r->dev.steps_reactive,
               r->dev.steps_proactive);
        printf("      \"steps\": {\"reactive\": %llu, \"proactive\": %llu},\n",
               (unsigned long long) r->dev.n_steps_reactive,
               (unsigned long long) r->dev.n_steps_proactive);
        printf("      \"preemptions\": %u, \"cancelled_at_drain\": %d, \"makespan_s\": %.3f\n",
               r->preemptions, r->cancelled_at_drain, r->makespan_s);
        printf("    }%s\n", last ? "" : ",");
}

static double ratio(double a, double b) {
        return b > 0 ? a / b : NAN;
}

/* v with `decimals` decimals, or `none` where there is no number (a ratio over nothing):
 * "null" in JSON, "none" for people. */
static const char *num_or(char buf[32], double v, int decimals, const char *none) {
        if (!isfinite(v))
                return none;
        snprintf(buf, 32, "%.*f", decimals, v);
        return buf;
}

int cli_bench(int argc, char **argv) {
        enum {
                O_POLICY = 256, O_THREADS,
                O_STATIC, O_DYNAMIC, O_DRAIN, O_BCAP, O_SLACK, O_NOPIG, O_KVTYPE, O_JSON, O_HELP,
                O_CPU_SHARE, O_NO_IDLE, O_AGING,
        };
        static const struct option opts[] = {
                { "model", required_argument, NULL, 'm' },
                CLI_TRACE_OPTIONS,
                { "policy", required_argument, NULL, O_POLICY },
                { "threads", required_argument, NULL, O_THREADS },
                { "static", required_argument, NULL, O_STATIC },
                { "dynamic", required_argument, NULL, O_DYNAMIC },
                { "drain", required_argument, NULL, O_DRAIN },
                { "b-cap", required_argument, NULL, O_BCAP },
                { "piggyback-slack", required_argument, NULL, O_SLACK },
                { "no-piggyback", no_argument, NULL, O_NOPIG },
                { "kv-type", required_argument, NULL, O_KVTYPE },
                { "cpu-share", required_argument, NULL, O_CPU_SHARE },
                { "no-idle-class", no_argument, NULL, O_NO_IDLE },
                { "aging", required_argument, NULL, O_AGING },
                { "json", no_argument, NULL, O_JSON },
                { "help", no_argument, NULL, O_HELP },
                {},
        };
        const char *model = NULL, *policy = "all";
        const char *names[3];
        cli_trace tr = { .p = { .reactive_per_min = 6, .proactive_per_min = 12, .minutes = 2, .seed = 1 },
                         .rset = "reactive-mixed", .pset = "proactive-mixed" };
        axp_engine_config ec;
        axp_error err = { 0 };
        double drain_s = 600;
        bool json = false;
        int c, n_names = 0, n = 0, r = 0;
        uint64_t u;

        axp_engine_config_default(&ec);
        /* a trace is replayed as written: no request is refused for the KV-cache budget */
        ec.kv_memory = UINT64_MAX;
        optind = 1;
        while ((c = cli_getopt(argc, argv, "m:", opts)) >= 0) {
                if ((r = cli_trace_option(c, optarg, &tr)) != 0) {
                        if (r < 0)
                                return 2;
                        continue;
                }
                switch (c) {
                case 'm':
                        model = optarg;
                        break;
                case O_POLICY:
                        policy = optarg;
                        break;
                case O_THREADS:
                        if (!cli_uint("--threads", optarg, 1, 1024, &u))
                                return 2;
                        ec.n_threads = (int) u;
                        break;
                case O_STATIC:
                        ec.static_dev = optarg;
                        break;
                case O_DYNAMIC:
                        ec.dynamic_dev = optarg;
                        break;
                case O_DRAIN:
                        if (!cli_double("--drain", optarg, 0, 1e6, &drain_s))
                                return 2;
                        break;
                case O_BCAP:
                        if (!cli_uint("--b-cap", optarg, 0, 32, &u))
                                return 2;
                        ec.b_cap = (int) u;
                        break;
                case O_SLACK:
                        if (!cli_double("--piggyback-slack", optarg, 0, 10, &ec.piggyback_slack))
                                return 2;
                        break;
                case O_NOPIG:
                        ec.piggyback_slack = -1;
                        break;
                case O_KVTYPE: {
                        uint32_t kt;
                        if (!cli_kv_type(optarg, &kt))
                                return 2;
                        ec.kv_type = optarg;
                        break;
                }
                case O_CPU_SHARE:
                        if (!cli_double("--cpu-share", optarg, 0.01, 1, &ec.proactive_cpu_share))
                                return 2;
                        break;
                case O_AGING:
                        if (!cli_double("--aging", optarg, 0, 1e6, &ec.aging_s))
                                return 2;
                        break;
                case O_NO_IDLE:
                        ec.proactive_idle = false;
                        break;
                case O_JSON:
                        json = true;
                        break;
                case O_HELP:
                        return usage(stdout);
                default:
                        return 2;
                }
        }
        if (optind < argc)
                return cli_usage_error("unexpected argument '%s'", argv[optind]);
        if (!model)
                return cli_usage_error("no model given (-m MODEL.gguf)");
        if (strcmp(policy, "all") == 0) {
                names[n_names++] = "agentxpu";
                names[n_names++] = "fcfs";
        } else if (strcmp(policy, "agentxpu") == 0 || strcmp(policy, "fcfs") == 0 ||
                   strcmp(policy, "serial") == 0) {
                names[n_names++] = policy;
        } else {
                return cli_usage_error("--policy: expected agentxpu, fcfs, serial or all, not '%s'",
                                       policy);
        }
        if (cli_trace_sets(&tr, &err) < 0)
                return cli_usage_error("%s", err.msg);

        _cleanup_(axp_model_freep) axp_model *m = NULL;
        if ((r = cli_load(model, NULL, 0, &m, NULL)) != 0)
                return r;
        ec.model_path = model;
        /* the engine's per-request context: the model's, capped at 4096 */
        int ctx = m->hp.n_ctx_train > 0 ? MIN(m->hp.n_ctx_train, 4096) : 4096;
        tr.p.max_ctx = ctx;

        axp_trace_req *trace = NULL;
        if (axp_trace_generate(&tr.p, &trace, &n, &err) < 0)
                return cli_fail("%s", err.msg);
        bench_req *reqs = calloc((size_t) MAX(n, 1), sizeof(*reqs));
        if (!reqs) {
                free(trace);
                return cli_fail("out of memory");
        }
        long long prompt_sum[2] = { 0 }, out_sum[2] = { 0 };
        int count[2] = { 0 };
        for (int i = 0; i < n && r == 0; i++) {
                reqs[i].t = trace[i];
                r = make_prompt(m->tok, tr.p.seed * 1000003ULL + (uint64_t) i, MAX(2, trace[i].prompt),
                                &reqs[i].prompt, &reqs[i].prompt_tokens);
                int k = trace[i].kind == AXP_REACTIVE;
                prompt_sum[k] += reqs[i].prompt_tokens;
                out_sum[k] += trace[i].output;
                count[k]++;
        }
        free(trace);

        policy_result res[3];
        if (r == 0 && !json) {
                printf("%s: %.3g reactive/min (%s, %d requests, mean %lld+%lld tokens) + %.3g proactive/min "
                       "(%s, %d requests, mean %lld+%lld tokens) over %.3g min, seed %llu\n\n",
                       m->name, tr.p.reactive_per_min, tr.rset, count[1],
                       count[1] ? prompt_sum[1] / count[1] : 0, count[1] ? out_sum[1] / count[1] : 0,
                       tr.p.proactive_per_min, tr.pset, count[0], count[0] ? prompt_sum[0] / count[0] : 0,
                       count[0] ? out_sum[0] / count[0] : 0, tr.p.minutes, (unsigned long long) tr.p.seed);
                fflush(stdout);
        }
        for (int i = 0; i < n_names && r == 0; i++)
                r = run_policy(&ec, names[i], reqs, n, drain_s, &res[i]);
        for (int i = 0; i < n; i++)
                free(reqs[i].prompt);
        free(reqs);
        if (r != 0)
                return r;

        int ia = -1, iff = -1;
        for (int i = 0; i < n_names; i++) {
                if (strcmp(names[i], "agentxpu") == 0)
                        ia = i;
                if (strcmp(names[i], "fcfs") == 0)
                        iff = i;
        }
        if (json) {
                printf("{\n  \"model\": \"%s\",\n", m->name);
                printf("  \"trace\": {\"reactive_per_min\": %g, \"proactive_per_min\": %g, \"minutes\": %g, "
                       "\"seed\": %llu, \"reactive_requests\": %d, \"proactive_requests\": %d},\n",
                       tr.p.reactive_per_min, tr.p.proactive_per_min, tr.p.minutes,
                       (unsigned long long) tr.p.seed, count[1], count[0]);
                printf("  \"policies\": {\n");
                for (int i = 0; i < n_names; i++)
                        print_json_policy(&res[i], i == n_names - 1);
                printf("  }");
                if (ia >= 0 && iff >= 0) {
                        char b1[32], b2[32];
                        printf(",\n  \"agentxpu_over_fcfs\": {\"reactive_p90_latency\": %s, "
                               "\"proactive_throughput\": %s}",
                               num_or(b1, ratio(res[ia].reactive.p90_latency_s,
                                                res[iff].reactive.p90_latency_s), 6, "null"),
                               num_or(b2, ratio(res[ia].proactive.throughput_req_per_min,
                                                res[iff].proactive.throughput_req_per_min), 6, "null"));
                }
                printf("\n}\n");
                return 0;
        }
        printf("%-9s %9s %9s %9s %9s %9s %11s %9s %11s %8s\n", "policy", "react.s", "p90 s", "TTFT s",
               "wait s", "p99 wait", "react.done", "pro/min", "pro.done", "preempt");
        for (int i = 0; i < n_names; i++)
                printf("%-9s %9.3f %9.3f %9.3f %9.3f %9.3f %5d/%-5d %9.2f %5d/%-5d %8u\n", res[i].name,
                       res[i].reactive.mean_latency_s, res[i].reactive.p90_latency_s,
                       res[i].reactive.mean_ttft_s, res[i].reactive.mean_prefill_wait_s,
                       res[i].reactive.p99_prefill_wait_s, res[i].reactive.completed,
                       res[i].reactive.submitted, res[i].proactive.throughput_req_per_min,
                       res[i].proactive.completed, res[i].proactive.submitted, res[i].preemptions);
        printf("\n%-9s %9s %13s %13s %13s %13s\n", "device s", "total", "reactive pre",
               "proactive pre", "reactive steps", "proactive steps");
        for (int i = 0; i < n_names; i++)
                printf("%-9s %9.2f %13.2f %13.2f %8.2f %4llu %8.2f %4llu\n", res[i].name, res[i].dev.busy,
                       res[i].dev.prefill_reactive, res[i].dev.prefill_proactive,
                       res[i].dev.steps_reactive, (unsigned long long) res[i].dev.n_steps_reactive,
                       res[i].dev.steps_proactive, (unsigned long long) res[i].dev.n_steps_proactive);
        if (ia >= 0 && iff >= 0) {
                char a[32], b[32];
                printf("\nagentxpu/fcfs: reactive P90 latency %s, proactive throughput %s\n",
                       num_or(a, ratio(res[ia].reactive.p90_latency_s, res[iff].reactive.p90_latency_s),
                              3, "none"),
                       num_or(b, ratio(res[ia].proactive.throughput_req_per_min,
                                       res[iff].proactive.throughput_req_per_min), 3, "none"));
        }
        for (int i = 0; i < n_names; i++)
                if (res[i].cancelled_at_drain)
                        printf("%s: %d requests were still running after --drain and were cancelled\n",
                               res[i].name, res[i].cancelled_at_drain);
        return 0;
}
