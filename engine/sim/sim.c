/* SPDX-License-Identifier: MIT */
/* The simulated SoC: profiles, sim devices, the virtual clock, the trace generator and the
 * replay that `agentxpu sim` prints. The scheduler driven here is the engine's own. */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/rng.h"
#include "sim.h"

/* Profiles ------------------------------------------------------------------------------- */

/* Intel Core Ultra 5 125H with dual-channel DDR5-5600 (89.6 GB/s peak), the paper's testbed.
 * Compute ceilings are what W8A16 GEMMs reach, set so that an 8B model's 256-token chunk
 * kernel (K3) takes 34-36 ms on NPU and iGPU and attention over 2048 tokens about 92 ms on
 * the iGPU, within the paper's 38 ms and 97 ms. Powers are the paper's: NPU ~10 W, iGPU 25 W
 * decoding and 31 W prefilling, CPU up to 58 W on all threads. The compute anchor of the
 * two-point calibration is a 256-token W8 GEMM (I_c = 512 FLOP/byte). */
#define DDR5_5600_DUAL 89.6e9
#define ANCHOR_I_C 512.0

static const axp_soc_profile soc_profiles[] = {
        {
                .name = "core-ultra-125h",
                .description = "Intel Core Ultra 5 125H: AI Boost NPU, Arc iGPU (7 Xe-cores), "
                               "4P+8E+2LPE CPU, DDR5-5600",
                .dram_bw = 0.85 * DDR5_5600_DUAL,
                .host_compile_w = 12.0,
                .n_devs = 3,
                .devs = {
                        {
                                .name = "Intel AI Boost NPU (sim)",
                                .kind = AXP_DEV_NPU,
                                .calib = { .P_pk = 5.7e12, .B_pk = DDR5_5600_DUAL, .u_m = 0.50,
                                           .u_c = 2.75e12 / (DDR5_5600_DUAL * ANCHOR_I_C),
                                           .I_c = ANCHOR_I_C, .e_attn = 0.12 },
                                .power_prefill_w = 10.0,
                                .power_decode_w = 10.0,
                                /* compiling a request's remainder and attention shapes on
                                 * one CPU thread; the paper gives no figure: an assumption */
                                .warmup_s = 2.0,
                        },
                        {
                                .name = "Intel Arc iGPU (sim)",
                                .kind = AXP_DEV_IGPU,
                                .calib = { .P_pk = 7.4e12, .B_pk = DDR5_5600_DUAL, .u_m = 0.70,
                                           .u_c = 2.9e12 / (DDR5_5600_DUAL * ANCHOR_I_C),
                                           .I_c = ANCHOR_I_C, .e_attn = 0.13 },
                                .power_prefill_w = 31.0,
                                .power_decode_w = 25.0,
                        },
                        {
                                .name = "Intel Core Ultra 5 125H CPU (sim)",
                                .kind = AXP_DEV_CPU,
                                .calib = { .P_pk = 1.2e12, .B_pk = DDR5_5600_DUAL, .u_m = 0.75,
                                           .u_c = 0.6e12 / (DDR5_5600_DUAL * ANCHOR_I_C),
                                           .I_c = ANCHOR_I_C, .e_attn = 0.3 },
                                .power_prefill_w = 58.0,
                                .power_decode_w = 58.0,
                        },
                },
                .static_dev = 0,
                .dynamic_dev = 1,
        },
};

int axp_soc_profile_find(const char *name, const axp_soc_profile **ret, axp_error *err) {
        for (size_t i = 0; name && i < ELEMENTSOF(soc_profiles); i++)
                if (strcmp(name, soc_profiles[i].name) == 0) {
                        *ret = &soc_profiles[i];
                        return 0;
                }
        return axp_errorf(err, -ENOENT, "unknown SoC '%s' (known: core-ultra-125h)",
                          name ? name : "");
}

/* W8A16: int8 weights with a scale per output channel (~1 byte per weight), fp16
 * activations and KV cache. */
static void llama_shape(axp_heg_shape *s, int n_embd, int n_layer, int n_head, int n_kv, int n_ff,
                        int n_vocab) {
        double d = n_embd, hd = (double) n_embd / n_head, kv = n_kv * hd;

        *s = (axp_heg_shape) {
                .n_embd = n_embd,
                .n_layer = n_layer,
                .n_head = n_head,
                .n_head_kv = n_kv,
                .head_dim = n_embd / n_head,
                .n_ff = n_ff,
                .n_vocab = n_vocab,
                .bytes_k1 = d * (d + 2 * kv) + 2 * (d + 2 * kv) + 2 * d,
                .bytes_k3 = d * d + 3 * d * n_ff + 2 * (2 * d + n_ff) + 2 * d,
                .bytes_head = (double) n_vocab * d + 2.0 * n_vocab + 2 * d,
                .act_bytes = 2.0,
                .kv_bytes = 2.0,
        };
}

int axp_sim_model_shape(const char *name, axp_heg_shape *ret, axp_error *err) {
        if (name && strcmp(name, "llama-3b") == 0) {
                llama_shape(ret, 3072, 28, 24, 8, 8192, 128256); /* Llama-3.2-3B */
                return 0;
        }
        if (name && strcmp(name, "llama-8b") == 0) {
                llama_shape(ret, 4096, 32, 32, 8, 14336, 128256); /* Llama-3.1-8B */
                return 0;
        }
        return axp_errorf(err, -ENOENT, "unknown model shape '%s' (known: llama-3b, llama-8b)",
                          name ? name : "");
}

/* The virtual-time world ---------------------------------------------------------------- */

typedef struct simdev {
        const axp_sim_dev_profile *prof;
        axp_device *real;
        bool busy;
        int rc;
        char err[320];     /* the wrapped device's error */
        double t0;         /* standalone duration of the running task */
        double left;       /* work left, as a fraction of t0 */
        double rate;       /* work per second under the current contention */
        double t_update;
        double demand;     /* bytes/s the task streams when alone */
        double power;
        double started;
        axp_sim_dev_stats st;
} simdev;

typedef struct sim_event {
        double t;
        uint64_t seq;
        void (*fn)(void *userdata);
        void *userdata;
} sim_event;

struct axp_sim {
        const axp_soc_profile *soc;
        axp_heg_shape shape;
        axp_sched_env env;
        axp_sched *sched;
        double now;
        double timer;
        simdev devs[AXP_SIM_MAX_DEVS];
        sim_event *heap;
        int n_heap, cap_heap;
        uint64_t next_seq;
};

static double env_now(void *ud) {
        return ((axp_sim *) ud)->now;
}

static void env_set_timer(void *ud, double t) {
        ((axp_sim *) ud)->timer = t;
}

static void advance(axp_sim *sim) {
        for (int i = 0; i < sim->soc->n_devs; i++) {
                simdev *d = &sim->devs[i];
                if (!d->busy)
                        continue;
                d->left -= (sim->now - d->t_update) * d->rate;
                if (d->left < 0)
                        d->left = 0;
                d->t_update = sim->now;
        }
}

/* HeRo's model: a kernel's slowdown grows with the total DRAM demand B(t) of the kernels
 * running together; past what the DRAM sustains, a kernel that streams at its device's
 * memory ceiling slows by B(t)/B_dram, and a compute-bound one only in proportion to the
 * share of that ceiling it uses. Called whenever the set of running kernels changes. */
static void recompute(axp_sim *sim) {
        double total = 0, over;

        for (int i = 0; i < sim->soc->n_devs; i++)
                if (sim->devs[i].busy)
                        total += sim->devs[i].demand;
        over = total > sim->soc->dram_bw ? total / sim->soc->dram_bw : 1.0;
        for (int i = 0; i < sim->soc->n_devs; i++) {
                simdev *d = &sim->devs[i];
                double share, phi;
                if (!d->busy)
                        continue;
                share = fmin(1.0, d->demand / axp_calib_B_eff(&d->prof->calib));
                phi = 1.0 + (over - 1.0) * share;
                d->rate = d->t0 > 0 ? 1.0 / (d->t0 * phi) : INFINITY;
        }
}

static double finish_time(const simdev *d) {
        if (!d->busy)
                return INFINITY;
        if (!isfinite(d->rate))
                return d->t_update;
        return d->t_update + d->left / d->rate;
}

static int env_issue(void *ud, int dev, const axp_task *t) {
        axp_sim *sim = ud;
        simdev *d;
        axp_cost c;

        if (dev < 0 || dev >= sim->soc->n_devs || sim->devs[dev].busy)
                return -EBUSY;
        d = &sim->devs[dev];
        advance(sim);
        c = axp_task_cost(&sim->shape, t);
        d->busy = true;
        d->rc = 0;
        d->t0 = axp_calib_latency(&d->prof->calib, c);
        d->left = 1.0;
        d->t_update = sim->now;
        d->started = sim->now;
        d->demand = d->t0 > 0 ? c.bytes / d->t0 : 0;
        d->power = t->variant == AXP_VAR_DECODE ? d->prof->power_decode_w : d->prof->power_prefill_w;
        d->err[0] = 0;
        if (d->real) {
                axp_error err = { 0 };
                d->rc = axp_device_run(d->real, t, &err);
                if (d->rc < 0)
                        snprintf(d->err, sizeof(d->err), "%s", err.msg);
        }
        recompute(sim);
        return 0;
}

int axp_sim_new(const axp_soc_profile *soc, const axp_heg_shape *shape, axp_sim **ret,
                axp_error *err) {
        axp_sim *sim;

        if (!soc || !shape || soc->n_devs <= 0 || soc->n_devs > AXP_SIM_MAX_DEVS)
                return axp_errorf(err, -EINVAL, "simulator: bad SoC profile");
        sim = calloc(1, sizeof(*sim));
        if (!sim)
                return axp_errorf(err, -ENOMEM, "out of memory");
        sim->soc = soc;
        sim->shape = *shape;
        sim->timer = INFINITY;
        sim->env = (axp_sched_env) {
                .now = env_now, .issue = env_issue, .set_timer = env_set_timer, .userdata = sim,
        };
        for (int i = 0; i < soc->n_devs; i++)
                sim->devs[i].prof = &soc->devs[i];
        *ret = sim;
        return 0;
}

void axp_sim_free(axp_sim *sim) {
        if (!sim)
                return;
        free(sim->heap);
        free(sim);
}

const axp_sched_env *axp_sim_env(axp_sim *sim) {
        return &sim->env;
}

void axp_sim_attach(axp_sim *sim, axp_sched *s) {
        sim->sched = s;
}

void axp_sim_wrap_device(axp_sim *sim, int dev, axp_device *real) {
        if (dev >= 0 && dev < sim->soc->n_devs)
                sim->devs[dev].real = real;
}

double axp_sim_now(const axp_sim *sim) {
        return sim->now;
}

static bool ev_before(const sim_event *a, const sim_event *b) {
        return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

int axp_sim_at(axp_sim *sim, double t, void (*fn)(void *userdata), void *userdata) {
        int i;

        if (sim->n_heap == sim->cap_heap) {
                int cap = sim->cap_heap ? 2 * sim->cap_heap : 64;
                sim_event *h = realloc(sim->heap, sizeof(*h) * cap);
                if (!h)
                        return -ENOMEM;
                sim->heap = h;
                sim->cap_heap = cap;
        }
        i = sim->n_heap++;
        sim->heap[i] = (sim_event) { .t = t, .seq = sim->next_seq++, .fn = fn, .userdata = userdata };
        while (i > 0) {
                int p = (i - 1) / 2;
                if (!ev_before(&sim->heap[i], &sim->heap[p]))
                        break;
                sim_event tmp = sim->heap[p];
                sim->heap[p] = sim->heap[i];
                sim->heap[i] = tmp;
                i = p;
        }
        return 0;
}

static sim_event heap_pop(axp_sim *sim) {
        assert(sim->n_heap > 0);
        sim_event top = sim->heap[0];
        int i = 0;

        sim->heap[0] = sim->heap[--sim->n_heap];
        for (;;) {
                int l = 2 * i + 1, r = l + 1, m = i;
                if (l < sim->n_heap && ev_before(&sim->heap[l], &sim->heap[m]))
                        m = l;
                if (r < sim->n_heap && ev_before(&sim->heap[r], &sim->heap[m]))
                        m = r;
                if (m == i)
                        break;
                sim_event tmp = sim->heap[m];
                sim->heap[m] = sim->heap[i];
                sim->heap[i] = tmp;
                i = m;
        }
        return top;
}

int axp_sim_run(axp_sim *sim, double t_end, axp_error *err) {
        long stuck = 0;

        for (;;) {
                double t_dev = INFINITY, t_ev = sim->n_heap ? sim->heap[0].t : INFINITY, t;
                int dev = -1;

                for (int i = 0; i < sim->soc->n_devs; i++) {
                        double f = finish_time(&sim->devs[i]);
                        if (f < t_dev) {
                                t_dev = f;
                                dev = i;
                        }
                }
                t = fmin(t_dev, fmin(sim->timer, t_ev));
                if (!isfinite(t) || t > t_end)
                        break;
                if (t < sim->now)
                        t = sim->now;
                /* the scheduler may legitimately act several times at one instant, but not
                 * forever */
                if (t <= sim->now + 1e-12) {
                        if (++stuck > 1000000)
                                return axp_errorf(err, -ELOOP, "simulation stopped advancing at t=%.6f s",
                                                  sim->now);
                } else
                        stuck = 0;
                sim->now = t;

                if (dev >= 0 && t_dev <= sim->timer && t_dev <= t_ev) {
                        simdev *d = &sim->devs[dev];
                        double dt;
                        assert(d->busy); /* only a running task has a finish time */
                        advance(sim);
                        dt = sim->now - d->started;
                        d->busy = false;
                        d->st.busy_s += dt;
                        d->st.energy_j += dt * d->power;
                        d->st.slowdown_s += dt - d->t0 > 0 ? dt - d->t0 : 0;
                        recompute(sim);
                        if (sim->sched)
                                axp_sched_task_done(sim->sched, dev, d->rc, d->err, -1);
                } else if (sim->timer <= t_ev) {
                        sim->timer = INFINITY;
                        if (sim->sched)
                                axp_sched_timer(sim->sched);
                } else {
                        sim_event ev = heap_pop(sim);
                        ev.fn(ev.userdata);
                }
        }
        return 0;
}

void axp_sim_device_stats(const axp_sim *sim, int dev, axp_sim_dev_stats *ret) {
        if (dev < 0 || dev >= sim->soc->n_devs) {
                *ret = (axp_sim_dev_stats) { 0 };
                return;
        }
        *ret = sim->devs[dev].st;
}

/* Workloads ------------------------------------------------------------------------------ */

typedef struct workload_set {
        const char *name;
        axp_kind kind;
        double prompt_mean, output_mean;
} workload_set;

/* papers.md: approximate means of the public datasets behind the paper's traces */
static const workload_set sets[] = {
        { "proactivebench", AXP_PROACTIVE, 900, 100 },
        { "samsum", AXP_PROACTIVE, 200, 30 },
        { "cnndm", AXP_PROACTIVE, 1000, 70 },
        { "lmsys", AXP_REACTIVE, 100, 220 },
        { "mtrag", AXP_REACTIVE, 1500, 130 },
        { "bfcl", AXP_REACTIVE, 600, 40 },
};
#define SET_PROACTIVE_MIXED 6
#define SET_REACTIVE_MIXED 7

const char *axp_workload_set_name(int set) {
        if (set >= 0 && set < (int) ELEMENTSOF(sets))
                return sets[set].name;
        if (set == SET_PROACTIVE_MIXED)
                return "proactive-mixed";
        if (set == SET_REACTIVE_MIXED)
                return "reactive-mixed";
        return "?";
}

int axp_workload_set_find(const char *name, axp_kind kind, int *ret, axp_error *err) {
        const char *mixed = kind == AXP_REACTIVE ? "reactive-mixed" : "proactive-mixed";

        if (name && strcmp(name, mixed) == 0) {
                *ret = kind == AXP_REACTIVE ? SET_REACTIVE_MIXED : SET_PROACTIVE_MIXED;
                return 0;
        }
        for (int i = 0; name && i < (int) ELEMENTSOF(sets); i++)
                if (strcmp(name, sets[i].name) == 0 && sets[i].kind == kind) {
                        *ret = i;
                        return 0;
                }
        return axp_errorf(err, -ENOENT, "unknown %s workload set '%s' (known: %s)",
                          axp_kind_name(kind), name ? name : "",
                          kind == AXP_REACTIVE ? "lmsys, mtrag, bfcl, reactive-mixed"
                                               : "proactivebench, samsum, cnndm, proactive-mixed");
}

/* uniform in (0, 1) */
static double rng_unit(axp_rng *g) {
        return ((axp_rng_next(g) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

static double rng_normal(axp_rng *g) {
        return sqrt(-2.0 * log(rng_unit(g))) * cos(2.0 * M_PI * rng_unit(g));
}

/* log-normal with the given mean */
static double rng_lognormal(axp_rng *g, double mean, double sigma) {
        return exp(log(mean) - sigma * sigma / 2.0 + sigma * rng_normal(g));
}

#define PROMPT_SIGMA 0.5
#define OUTPUT_SIGMA 0.9
#define OUTPUT_CAP 1600

static void draw_lengths(axp_rng *g, int set, int max_ctx, axp_trace_req *r) {
        const workload_set *w;
        int p, o;

        if (set == SET_PROACTIVE_MIXED)
                set = (int) (rng_unit(g) * 3); /* the three proactive sets */
        else if (set == SET_REACTIVE_MIXED)
                set = 3 + (int) (rng_unit(g) * 3);
        w = &sets[set];
        p = (int) lround(rng_lognormal(g, w->prompt_mean, PROMPT_SIGMA));
        o = (int) lround(rng_lognormal(g, w->output_mean, OUTPUT_SIGMA));
        o = MAX(1, MIN(o, OUTPUT_CAP));
        p = MAX(8, p);
        if (p + o > max_ctx)
                p = MAX(8, max_ctx - o);
        r->set = set;
        r->prompt = p;
        r->output = o;
}

static int by_time(const void *a, const void *b) {
        const axp_trace_req *x = a, *y = b;
        return x->t < y->t ? -1 : x->t > y->t;
}

int axp_trace_generate(const axp_trace_params *p, axp_trace_req **ret, int *ret_n, axp_error *err) {
        axp_trace_req *v = NULL;
        int n = 0, cap = 0;

        if (!(p->reactive_per_min >= 0) || !(p->proactive_per_min >= 0) || !(p->minutes > 0) ||
            p->reactive_per_min > 1e4 || p->proactive_per_min > 1e4 || p->minutes > 1e4 ||
            p->max_ctx < 64)
                return axp_errorf(err, -EINVAL,
                                  "trace: rates must be 0..10000 per minute and minutes 0..10000");
        for (int kind = 0; kind < 2; kind++) {
                double per_min = kind == AXP_REACTIVE ? p->reactive_per_min : p->proactive_per_min;
                double rate = per_min / 60.0;
                int set = kind == AXP_REACTIVE ? p->reactive_set : p->proactive_set;
                /* each kind has its own stream, so changing one rate leaves the other's trace */
                axp_rng k;
                axp_rng_seed(&k, p->seed * 2 + (uint64_t) kind + 1);
                if (rate <= 0)
                        continue;
                for (double t = -log(rng_unit(&k)) / rate; t < p->minutes * 60.0;
                     t += -log(rng_unit(&k)) / rate) {
                        if (n == cap) {
                                int c = cap ? 2 * cap : 256;
                                axp_trace_req *nv = realloc(v, sizeof(*v) * c);
                                if (!nv) {
                                        free(v);
                                        return axp_errorf(err, -ENOMEM, "out of memory");
                                }
                                v = nv;
                                cap = c;
                        }
                        v[n] = (axp_trace_req) { .t = t, .kind = (axp_kind) kind };
                        draw_lengths(&k, set, p->max_ctx, &v[n]);
                        n++;
                }
        }
        qsort(v, n, sizeof(*v), by_time);
        *ret = v;
        *ret_n = n;
        return 0;
}

/* Replay ----------------------------------------------------------------------------------- */

typedef struct replay replay;

typedef struct replay_req {
        replay *rp;
        const axp_trace_req *tr;
        axp_seq seq;
        int generated;
        bool done;
        axp_finish_reason reason;
        axp_req_stats st;
} replay_req;

struct replay {
        FILE *log;
        axp_sim *sim;
        axp_sched *sched;
        replay_req *reqs;
        int next_arrival;
        int n;
        int failed;
        axp_error err;
};

static bool replay_next(void *ud, uint64_t id, axp_seq *seq, int32_t *ret_token,
                        axp_finish_reason *ret_reason) {
        replay_req *q = ud;

        if (++q->generated >= q->tr->output) {
                *ret_reason = AXP_FINISH_LENGTH;
                return false;
        }
        *ret_token = 0;
        return true;
}

static void replay_finished(void *ud, uint64_t id, axp_finish_reason reason, const axp_req_stats *st) {
        replay_req *q = ud;

        q->done = true;
        q->reason = reason;
        q->st = *st;
        q->st.generated_tokens = q->generated;
}

static const axp_sched_req_ops replay_ops = {
        .next = replay_next,
        .finished = replay_finished,
};

static void replay_arrive(void *ud) {
        replay_req *q = ud;
        replay *rp = q->rp;
        uint64_t id = 0;
        int ret;

        q->seq = (axp_seq) { .n_ctx_max = q->tr->prompt + q->tr->output + 1, .logits_pos = -1 };
        ret = axp_sched_submit(rp->sched, q->tr->kind, &q->seq, NULL, q->tr->prompt, &replay_ops, q,
                               &id, &rp->err);
        if (ret < 0)
                rp->failed++;
        else if (rp->log)
                fprintf(rp->log, "%.6f arrive %c%llu prompt=%d output=%d\n", q->tr->t,
                        q->tr->kind == AXP_REACTIVE ? 'R' : 'P', (unsigned long long) id,
                        q->tr->prompt, q->tr->output);
}

static void log_task(void *ud, double now, int dev, const axp_task *t, const uint64_t *ids,
                     const axp_kind *kinds) {
        static const char *const ops[] = { "embed", "k1", "k2", "k3", "head" };
        static const char *const vars[] = { "static", "dynamic", "decode" };
        replay *rp = ud;
        FILE *f = rp->log;

        fprintf(f, "%.6f dev=%d t0=%.6f %s l=%d %s", now, dev, rp->sim->devs[dev].t0,
                t->op < AXP_OP__COUNT ? ops[t->op] : "?",
                t->layer, t->variant <= AXP_VAR_DECODE ? vars[t->variant] : "?");
        for (int i = 0; i < t->n_spans; i++)
                fprintf(f, " %c%llu[%d,%d)", kinds[i] == AXP_REACTIVE ? 'R' : 'P',
                        (unsigned long long) ids[i], t->spans[i].t0, t->spans[i].t1);
        fputc('\n', f);
}

/* The scheduler goes first: the requests still in it have their seqs in rp->reqs, and
 * freeing it calls their finished callbacks, which write there. */
static void replay_done(replay *rp) {
        axp_sched_free(rp->sched);
        axp_sim_free(rp->sim);
        free(rp->reqs);
}

int axp_sim_replay(const axp_soc_profile *soc, const axp_heg_shape *shape,
                   const axp_sched_config *cfg, const axp_sim_replay_opts *opts,
                   const axp_trace_req *trace, int n, axp_sim_result *ret, axp_error *err) {
        axp_sched_device devs[AXP_SIM_MAX_DEVS];
        _cleanup_(replay_done) replay rp = { 0 };
        axp_sim_result res = { 0 };
        _cleanup_free_ double *lat = NULL;
        double energy = 0, tokens = 0;
        double first_p = INFINITY, last_p = 0, end = 0;
        int r, n_lat = 0;

        r = axp_sim_new(soc, shape, &rp.sim, err);
        if (r < 0)
                return r;
        for (int i = 0; i < soc->n_devs; i++)
                devs[i] = (axp_sched_device) { .name = soc->devs[i].name, .calib = soc->devs[i].calib,
                                               .warmup_s = soc->devs[i].warmup_s,
                                               .graphics = soc->devs[i].kind == AXP_DEV_IGPU };
        if (opts && opts->warmup_s > 0 && devs[soc->static_dev].warmup_s > 0)
                devs[soc->static_dev].warmup_s = opts->warmup_s;
        r = axp_sched_new(cfg, shape, axp_sim_env(rp.sim), devs, soc->n_devs, soc->static_dev,
                          soc->dynamic_dev, &rp.sched, err);
        if (r < 0)
                return r;
        axp_sim_attach(rp.sim, rp.sched);
        if (opts && opts->gpu_busy > 0)
                axp_sched_set_external_busy(rp.sched, opts->gpu_busy);
        if (opts && opts->log) {
                rp.log = opts->log;
                axp_sched_set_trace(rp.sched, log_task, &rp);
        }
        rp.reqs = calloc(n > 0 ? n : 1, sizeof(*rp.reqs));
        lat = calloc(n > 0 ? n : 1, sizeof(double));
        if (!rp.reqs || !lat)
                return axp_errorf(err, -ENOMEM, "out of memory");
        rp.n = n;
        for (int i = 0; i < n; i++) {
                rp.reqs[i] = (replay_req) { .rp = &rp, .tr = &trace[i] };
                r = axp_sim_at(rp.sim, trace[i].t, replay_arrive, &rp.reqs[i]);
                if (r < 0)
                        return axp_errorf(err, r, "out of memory");
        }
        r = axp_sim_run(rp.sim, INFINITY, err);
        if (r < 0)
                return r;
        if (rp.failed)
                return axp_errorf(err, -EINVAL, "%d requests were refused: %s", rp.failed, rp.err.msg);

        res.s_chk = axp_sched_s_chk(rp.sched);
        for (int i = 0; i < n; i++) {
                replay_req *q = &rp.reqs[i];
                bool react = q->tr->kind == AXP_REACTIVE;
                if (react)
                        res.reactive.submitted++;
                else
                        res.proactive.submitted++;
                if (!q->done)
                        continue;
                end = fmax(end, q->tr->t + q->st.latency_s);
                tokens += q->st.prefill_tokens + q->st.generated_tokens;
                if (react) {
                        res.reactive.completed++;
                        res.reactive.mean_latency_s += q->st.latency_s;
                        res.reactive.mean_prefill_wait_s += q->st.queue_wait_s;
                        res.reactive.max_prefill_wait_s =
                                fmax(res.reactive.max_prefill_wait_s, q->st.queue_wait_s);
                        res.reactive.mean_ttft_s += q->st.ttft_s;
                        res.reactive.mean_tpot_s += q->st.tpot_s;
                        lat[n_lat++] = q->st.latency_s;
                } else {
                        res.proactive.completed++;
                        res.proactive.mean_latency_s += q->st.latency_s;
                        res.proactive.mean_prefill_wait_s += q->st.queue_wait_s;
                        res.proactive.normalized_latency_s_per_token +=
                                q->st.latency_s / (q->tr->prompt + q->tr->output);
                        first_p = fmin(first_p, q->tr->t);
                        last_p = fmax(last_p, q->tr->t + q->st.latency_s);
                }
        }
        if (res.reactive.completed) {
                double k = res.reactive.completed;
                res.reactive.mean_latency_s /= k;
                res.reactive.mean_prefill_wait_s /= k;
                res.reactive.mean_ttft_s /= k;
                res.reactive.mean_tpot_s /= k;
                res.reactive.p90_latency_s = axp_quantile(lat, n_lat, 0.9);
        }
        if (res.proactive.completed) {
                double k = res.proactive.completed;
                res.proactive.mean_latency_s /= k;
                res.proactive.mean_prefill_wait_s /= k;
                res.proactive.normalized_latency_s_per_token /= k;
                if (last_p > first_p)
                        res.proactive.throughput_req_per_min = k / ((last_p - first_p) / 60.0);
        }
        res.makespan_s = end;
        for (int i = 0; i < soc->n_devs; i++) {
                axp_sim_dev_stats st;
                axp_sim_device_stats(rp.sim, i, &st);
                energy += st.energy_j;
                res.contention_s += st.slowdown_s;
                if (end > 0 && i == soc->dynamic_dev)
                        res.igpu_busy_fraction = st.busy_s / end;
                if (end > 0 && i == soc->static_dev)
                        res.npu_busy_fraction = st.busy_s / end;
        }
        energy += axp_sched_warmup_seconds(rp.sched) * soc->host_compile_w;
        res.energy_j_per_token = tokens > 0 ? energy / tokens : 0;
        *ret = res;
        return 0;
}
