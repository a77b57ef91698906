/* SPDX-License-Identifier: MIT */
/* The engine: a model, its devices bound to roles, and the scheduler on a thread of its own
 * on the wall clock. Every API call runs on that thread (posted to its mailbox, the caller
 * waiting for the answer), so the engine's state has one owner and needs no locks; the
 * devices run kernels on their executors' threads and post completions to the same mailbox. */
#include <assert.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "devices/calib.h"
#include "base/strbuf.h"
#include "devices/cpu-pressure.h"
#include "model/chat.h"
#include "devices/discovery.h"
#include "engine.h"
#include "devices/executor.h"
#include "model/generate.h"
#include "devices/gpu-telemetry.h"
#include "model/model.h"
#include "model/quantize.h"
#include "heg/kv-budget.h"
#include "heg/prefix-cache.h"
#include "heg/seq.h"
#include "sched/scheduler.h"
#include "model/tokenizer.h"
#include "model/tools.h"
#include "kernels/types.h"

#define MAX_DEVS 4
#define DEFAULT_MAX_TOKENS 256
#define PREFILL_MAX_CTX 4096
#define TELEMETRY_PERIOD_S 0.5 /* how often the desktop's GPU and CPU use is sampled while busy */

typedef struct flow flow;
typedef struct ereq ereq;
typedef struct axp_engine axp_engine;

static void engine_flow_free(axp_engine *e, flow *f);

struct flow {
        uint64_t id;
        char *system;
        bool raw;
        axp_seq seq;       /* its KV cache, kept between turns */
        int32_t pending;   /* last sampled token, not yet in the KV cache; -1: none */
        ereq *busy;        /* the request in flight, if any */
        bool closing;      /* closed while busy: freed when its request finishes */
        axp_kv_hold kv;    /* what the budget counts for its cache: what the cache holds
                            * between turns, the most a turn can grow it to during one */
        flow *next;
};

struct ereq {
        axp_engine *e;
        uint64_t id;
        axp_kind kind;
        axp_request_cbs cbs;
        axp_gen gen;
        bool gen_ok;
        axp_seq own_seq;   /* without a flow */
        axp_kv_hold kv;    /* own_seq's reservation in the KV-cache budget (without a flow) */
        /* without a flow: the tokens fed so far (the prompt, then each one sampled to go on),
         * what own_seq's positions hold, for the prompt cache */
        int32_t *toks;
        int n_toks;
        size_t cap_toks;
        uint64_t cache_scope; /* whose prompt cache entries it takes and leaves */
        axp_seq *seq;
        flow *flow;
        int32_t prev_pending; /* the flow's pending token this turn consumed */
        int32_t last_tok;
        uint32_t prompt_tokens;
        bool prompt_cut;   /* fill in the middle fitted, or an embedding truncated: text was left out */
        /* an embedding (opts.embed) in place of an answer: how it pools, whether normalized */
        bool embed;
        enum axp_pooling pooling;
        bool embed_normalize;
        /* with tools: the family that wrote the turn, and the answer so far, read back as a
         * call when the request finishes */
        bool tools;
        axp_chat_family tools_family;
        axp_tools *call_tools; /* the tools given, which type a call's arguments (tools.h) */
        char *answer;
        size_t answer_len, answer_cap;
        bool stop_sent;    /* cancelled by the engine stopping */
        bool submitting;   /* inside axp_sched_submit, which may finish it at once */
        bool finished;     /* finished while submitting: do_submit frees it */
        ereq *next;
};

typedef struct deferred {
        axp_mail *mail;
        struct deferred *next;
} deferred;

struct axp_engine {
        axp_engine_config cfg;
        char *model_path, *policy, *static_dev, *dynamic_dev, *calib_cache;

        pthread_t thread;
        bool thread_started, stop;
        axp_mailbox *mb;
        double timer;

        axp_model *model;
        axp_device *devs[MAX_DEVS];
        bool role_static[MAX_DEVS], role_dynamic[MAX_DEVS];
        /* dynamic_dev_i: the dynamic role's device for the model in place; dynamic_bound_i:
         * the one bound at start (they differ where setup_model gives the role to the CPU) */
        int n_devs, static_dev_i, dynamic_dev_i, dynamic_bound_i;
        axp_executor *ex[MAX_DEVS];
        axp_sched *sched;
        axp_gpu_telemetry *telemetry;
        axp_cpu_pressure *cpu_pressure; /* the CPU guard's input; NULL: no guard */
        double cpu_pressure_last;
        axp_bg_class bg_class; /* of proactive steps on the CPU devices */
        double telemetry_next; /* next sample, INFINITY while the engine is idle */
        axp_policy pol;
        int n_ctx;
        uint32_t kv_type;          /* AXP_TYPE_F16, AXP_TYPE_F32 or AXP_TYPE_Q8_0 */
        axp_kv_budget kv_budget;   /* its limit set for each model (setup_model) */
        axp_prefix_cache prefix;   /* finished requests' caches, emptied when the model goes */

        ereq *reqs;
        flow *flows;
        uint64_t next_flow;

        /* LoadModel: the new model waits here until requests in flight are done; calls that
         * need a model wait in `deferred` meanwhile */
        axp_model *next_model;
        int swap_rc;
        axp_error swap_err;
        bool swapping;
        deferred *deferred;

        uint64_t next_req_id;      /* past every request id handed out, schedulers before included */
        unsigned model_serial;     /* models put in place so far */
        axp_model_desc model_desc; /* the model in place described, set once in setup_model:
                                    * status_snapshot runs every step */
        axp_engine_status told;    /* what status_changed was last told */
        bool told_once;
};

void axp_engine_config_default(axp_engine_config *c) {
        *c = (axp_engine_config) {
                .policy = "agentxpu",
                .static_dev = "auto",
                .dynamic_dev = "auto",
                .preempt_bound_s = 0.1,
                .b_cap = 3,
                .max_batch = 32,
                .aging_s = 30,
                .proactive_duty = 0.5,
                .proactive_cpu_share = 0.25,
                .proactive_idle = true,
                .piggyback_slack = 0,
                .prompt_cache = 8,
        };
}

void axp_request_opts_default(axp_request_opts *o) {
        *o = (axp_request_opts) { 0 };
        axp_sampler_params_default(&o->sampling);
}

/* The scheduler's environment on the wall clock ---------------------------------------------- */

static double env_now(void *ud) {
        return axp_now();
}

static int env_issue(void *ud, int dev, const axp_task *t) {
        axp_engine *e = ud;
        return dev >= 0 && dev < e->n_devs ? axp_executor_submit(e->ex[dev], t) : -EINVAL;
}

static void env_set_timer(void *ud, double t) {
        ((axp_engine *) ud)->timer = t;
}

static void env_hurry(void *ud, int dev) {
        axp_engine *e = ud;
        if (dev >= 0 && dev < e->n_devs)
                axp_executor_hurry(e->ex[dev]);
}

/* Requests ------------------------------------------------------------------------------------- */

static void deliver_text(ereq *q) {
        size_t n_lp = q->gen.logprobs ? axp_gen_logprobs_ready(&q->gen) : 0;
        if (n_lp > 0) {
                if (q->cbs.logprobs)
                        q->cbs.logprobs(q->cbs.userdata, q->id, q->gen.lp, n_lp, q->e->model->tok);
                axp_gen_logprobs_drop(&q->gen, n_lp);
        }
        if (q->tools && q->gen.out_len > 0 &&
            axp_strbuf_append(&q->answer, &q->answer_len, &q->answer_cap, q->gen.out, q->gen.out_len) < 0)
                q->tools = false; /* out of memory: reported as text */
        if (q->gen.out_len > 0 && q->cbs.token)
                q->cbs.token(q->cbs.userdata, q->id, q->gen.out, q->gen.out_len);
        q->gen.out_len = 0;
}

int axp_engine_token_piece(const axp_tokenizer *tok, int32_t id, char *buf, int cap) {
        return axp_token_to_piece(tok, id, false, buf, cap);
}

/* An embedding request's prefill is over: its tokens' final residual stream is still in the
 * seq's activations (axp_seq_end keeps them), every position its own (no prompt cache). */
static void req_embed(ereq *q, axp_seq *seq, axp_finish_reason *ret_reason) {
        const axp_model *m = q->e->model;
        _cleanup_free_ float *v = malloc(sizeof(float) * (size_t) m->hp.n_embd);

        assert(seq->n_past == (int) q->prompt_tokens && seq->x);
        if (!v) {
                snprintf(q->gen.error, sizeof(q->gen.error), "out of memory for the embedding");
                *ret_reason = AXP_FINISH_ERROR;
                return;
        }
        axp_embedding_pool(m, seq->x, seq->n_past, q->pooling, q->embed_normalize, v);
        if (q->cbs.embedding)
                q->cbs.embedding(q->cbs.userdata, q->id, v, (size_t) m->hp.n_embd);
        *ret_reason = AXP_FINISH_STOP;
}

static bool req_next(void *ud, uint64_t id, axp_seq *seq, int32_t *ret_token,
                     axp_finish_reason *ret_reason) {
        ereq *q = ud;
        if (q->embed) {
                req_embed(q, seq, ret_reason);
                return false;
        }
        int32_t tok = axp_gen_next(&q->gen, seq->logits);

        q->last_tok = tok;
        /* the prompt is in the cache now: shared with requests that begin the same way and come
         * while this one decodes (n requests of one prompt, agents sharing a system prompt) */
        if (q->gen.n_generated == 1 && !q->flow && q->toks && seq->n_past <= q->n_toks)
                axp_prefix_cache_share(&q->e->prefix, q, q->cache_scope, seq, q->toks);
        deliver_text(q);
        if (q->gen.done) {
                *ret_reason = q->gen.reason;
                return false;
        }
        *ret_token = tok;
        if (!q->flow && q->toks) {
                if (axp_grow((void **) &q->toks, &q->cap_toks, (size_t) q->n_toks + 1, sizeof(int32_t)) < 0) {
                        free(q->toks); /* out of memory: this request's cache is not kept */
                        q->toks = NULL;
                        return true;
                }
                q->toks[q->n_toks++] = tok;
        }
        return true;
}

static void req_unlink(axp_engine *e, ereq *q) {
        for (ereq **p = &e->reqs; *p; p = &(*p)->next)
                if (*p == q) {
                        *p = q->next;
                        return;
                }
        assert(!"a request is in the engine's table until it finishes");
}

/* A request out of the engine's table: its sampler, its own KV cache if it has no flow. */
static void req_free(ereq *q) {
        if (!q)
                return;
        if (q->gen_ok)
                axp_gen_free(&q->gen);
        if (!q->flow) {
                axp_seq_free(&q->own_seq);
                if (q->kv.held)
                        axp_kv_budget_release(&q->e->kv_budget, &q->kv);
        }
        free(q->answer);
        axp_tools_free(q->call_tools);
        free(q->toks);
        free(q);
}

static void req_freep(ereq **q) {
        req_free(*q);
}

/* What the budget counts for a flow between turns: what its cache holds (nothing once its
 * cache is freed). */
static void flow_kv_settle(axp_engine *e, flow *f) {
        if (f->seq.model)
                axp_kv_budget_set(&e->kv_budget, &f->kv, axp_seq_kv_bytes(&f->seq));
        else if (f->kv.held)
                axp_kv_budget_release(&e->kv_budget, &f->kv);
}

/* A flow's turn that was not accepted after its reservation: the flow holds what it held. */
typedef struct flow_turn {
        axp_engine *e;
        flow *f; /* NULL: accepted (or no flow) */
} flow_turn;

static void flow_turn_done(flow_turn *t) {
        if (t->f)
                flow_kv_settle(t->e, t->f);
}

static void req_finished(void *ud, uint64_t id, axp_finish_reason reason, const axp_req_stats *st) {
        ereq *q = ud;
        axp_req_stats stats = *st;

        assert(q->seq == (q->flow ? &q->flow->seq : &q->own_seq));
        assert(!q->flow || q->flow->busy == q);
        axp_gen_finish(&q->gen, reason);
        deliver_text(q);
        stats.prompt_tokens = q->prompt_tokens;
        stats.prompt_cut = q->prompt_cut;
        stats.generated_tokens = q->gen.n_generated;
        if (reason == AXP_FINISH_STOP && q->gen_ok && q->gen.stopper.stopped)
                stats.stop_word = q->gen.stopper.stops[q->gen.stopper.matched];
        /* a step's own failure (the grammar), where the scheduler had none to say */
        if (reason == AXP_FINISH_ERROR && !stats.error[0] && q->gen.error[0])
                snprintf(stats.error, sizeof(stats.error), "%s", q->gen.error);
        _cleanup_free_ char *call = NULL;
        if (q->tools) {
                if (reason == AXP_FINISH_STOP && q->answer &&
                    axp_tools_read_call(q->tools_family, q->call_tools, q->answer, q->answer_len, &call) < 0)
                        call = NULL;
                stats.tool_call = call;
                stats.finish_reason = call ? "tool_calls" : axp_finish_reason_name(reason);
        }
        if (q->flow) {
                flow *f = q->flow;
                /* what the KV cache holds: the turn's tokens if its prefill completed, and every
                 * generated token but the last, which the next turn feeds first */
                if (q->gen.n_generated == 0) {
                        axp_seq_truncate(&f->seq, f->seq.n_past);
                        f->pending = q->prev_pending;
                } else {
                        axp_seq_truncate(&f->seq, f->seq.n_past);
                        f->pending = q->last_tok;
                }
                axp_seq_release_activations(&f->seq);
                f->busy = NULL;
                flow_kv_settle(q->e, f);
        }
        if (q->flow && q->flow->closing)
                engine_flow_free(q->e, q->flow);
        axp_prefix_cache_forget(&q->e->prefix, q);
        /* an answer's cache, every position holding what the tokens say, for a later prompt
         * that begins the same way */
        if (!q->flow && q->toks && (reason == AXP_FINISH_STOP || reason == AXP_FINISH_LENGTH) &&
            q->own_seq.model && q->own_seq.n_past <= q->n_toks) {
                axp_seq_truncate(&q->own_seq, q->own_seq.n_past);
                axp_prefix_cache_put(&q->e->prefix, &q->e->kv_budget, q->cache_scope, &q->own_seq, q->toks);
        }
        if (q->cbs.finished)
                q->cbs.finished(q->cbs.userdata, q->id, reason, &stats);
        req_unlink(q->e, q);
        if (q->submitting) {
                q->finished = true; /* do_submit still holds it */
                return;
        }
        req_free(q);
}

static const axp_sched_req_ops req_ops = { .next = req_next, .finished = req_finished };

static flow *find_flow(axp_engine *e, uint64_t id) {
        for (flow *f = e->flows; f; f = f->next)
                if (f->id == id && !f->closing)
                        return f;
        return NULL;
}

static int check_sampling(const axp_sampler_params *p, axp_error *err) {
        if (!isfinite(p->temperature) || p->temperature < 0 || p->temperature > 100)
                return axp_errorf(err, -EINVAL, "temperature must be between 0 and 100");
        if (p->top_k < 0)
                return axp_errorf(err, -EINVAL, "top_k must not be negative");
        /* 0 keeps the best candidate alone, as llama.cpp's top-p (which keeps at least one) */
        if (!isfinite(p->top_p) || p->top_p < 0 || p->top_p > 1)
                return axp_errorf(err, -EINVAL, "top_p must be in [0, 1]");
        if (!isfinite(p->min_p) || p->min_p < 0 || p->min_p > 1)
                return axp_errorf(err, -EINVAL, "min_p must be in [0, 1]");
        if (!isfinite(p->repeat_penalty) || p->repeat_penalty <= 0 || p->repeat_penalty > 100)
                return axp_errorf(err, -EINVAL, "repeat_penalty must be in (0, 100]");
        if (!isfinite(p->frequency_penalty) || fabsf(p->frequency_penalty) > 2)
                return axp_errorf(err, -EINVAL, "frequency_penalty must be in [-2, 2]");
        if (!isfinite(p->presence_penalty) || fabsf(p->presence_penalty) > 2)
                return axp_errorf(err, -EINVAL, "presence_penalty must be in [-2, 2]");
        if (p->repeat_last_n < 0)
                return axp_errorf(err, -EINVAL, "repeat_last_n must not be negative");
        return 0;
}

/* The turn's text as the model reads it: chat-templated unless raw. A first turn is the
 * system prompt, the earlier turns and the user's prompt; a flow's later turn follows its last
 * answer (`pending`: the token that answer ended with, -1: none), closed first if the model
 * did not close it. */
static char *format_turn(axp_engine *e, const char *prompt, const char *system,
                         const axp_request_opts *o, bool raw, bool first_turn, int32_t pending) {
        _cleanup_free_ axp_chat_msg *msgs = NULL;
        size_t n = 0;
        axp_chat_family family;

        if (raw)
                return strdup(prompt);
        msgs = calloc(o->n_messages + 2, sizeof(*msgs));
        if (!msgs)
                return NULL;
        if (system && system[0])
                msgs[n++] = (axp_chat_msg) { "system", system };
        for (size_t i = 0; i < o->n_messages; i++)
                msgs[n++] = (axp_chat_msg) { o->messages[i].role, o->messages[i].content };
        msgs[n++] = (axp_chat_msg) { "user", prompt };
        family = axp_chat_detect(e->model->chat_template, e->model->tok);
        if (first_turn)
                return axp_chat_format(family, msgs, n, true);
        return axp_chat_format_next(family, msgs, n,
                                    pending >= 0 && !axp_tokenizer_is_eog(e->model->tok, pending));
}

static int check_messages(const axp_request_opts *o, bool raw, axp_error *err) {
        if (o->n_messages == 0)
                return 0;
        if (!o->messages)
                return axp_errorf(err, -EINVAL, "the earlier turns are missing");
        if (raw)
                return axp_errorf(err, -EINVAL, "earlier turns need the chat template (not raw)");
        for (size_t i = 0; i < o->n_messages; i++) {
                const char *role = o->messages[i].role;
                if (!role || (strcmp(role, "system") != 0 && strcmp(role, "user") != 0 &&
                              strcmp(role, "assistant") != 0 && strcmp(role, AXP_ROLE_TOOL_CALL) != 0 &&
                              strcmp(role, AXP_ROLE_TOOL) != 0))
                        return axp_errorf(err, -EINVAL, "turn %zu: the role must be system, user, assistant, "
                                                        "tool_call or tool", i + 1);
                if (!o->messages[i].content)
                        return axp_errorf(err, -EINVAL, "turn %zu has no content", i + 1);
        }
        return 0;
}

/* Earlier tool calls or results (which only the tools' formatting writes). */
static bool has_tool_turns(const axp_request_opts *o) {
        for (size_t i = 0; i < o->n_messages; i++) {
                const char *role = o->messages[i].role;
                if (strcmp(role, AXP_ROLE_TOOL_CALL) == 0 || strcmp(role, AXP_ROLE_TOOL) == 0)
                        return true;
        }
        return false;
}

typedef struct submit_args {
        axp_kind kind;
        const char *prompt;
        const axp_request_opts *opts;
        const axp_request_cbs *cbs;
        uint64_t id;
        axp_error *err;
        int ret;
} submit_args;

static int do_submit(axp_engine *e, submit_args *a) {
        const axp_request_opts *o = a->opts;
        _cleanup_free_ char *text = NULL;
        _cleanup_free_ int32_t *toks = NULL, *all = NULL;
        flow *f = NULL;
        _cleanup_(req_freep) ereq *q = NULL;
        int n = 0, n_all, r;
        bool first_turn = true, prompt_cut = false;
        uint32_t max_tokens;

        if (!e->model)
                return axp_errorf(a->err, -ENOMEDIUM, "no model is loaded");
        if (a->kind != AXP_REACTIVE && a->kind != AXP_PROACTIVE)
                return axp_errorf(a->err, -EINVAL, "unknown request kind");
        if (!a->prompt)
                return axp_errorf(a->err, -EINVAL, "the prompt is missing");
        if ((r = check_sampling(&o->sampling, a->err)) < 0)
                return r;
        if (o->n_stop > 16)
                return axp_errorf(a->err, -EINVAL, "at most 16 stop strings");
        for (size_t i = 0; i < o->n_stop; i++)
                if (!o->stop[i] || !o->stop[i][0] || strlen(o->stop[i]) > 256)
                        return axp_errorf(a->err, -EINVAL, "stop strings must be 1 to 256 bytes");
        if (o->flow) {
                f = find_flow(e, o->flow);
                if (!f)
                        return axp_errorf(a->err, -ENOENT, "no such flow");
                if (f->busy)
                        return axp_errorf(a->err, -EBUSY, "the flow has a request in flight");
                first_turn = f->seq.n_past == 0 && f->pending < 0;
        }

        if (o->logprobs && o->top_logprobs > AXP_LOGPROBS_MAX)
                return axp_errorf(a->err, -EINVAL, "top_logprobs is at most %d", AXP_LOGPROBS_MAX);
        if (o->suffix && (o->flow || o->n_messages > 0 || o->tools || o->system))
                return axp_errorf(a->err, -EINVAL, "fill in the middle (a suffix) takes the text before and after "
                                                   "the cursor alone: no messages, system prompt, tools or flow");
        enum axp_pooling pooling = AXP_POOLING_MEAN;
        if (o->embed) {
                if (o->flow || o->n_messages > 0 || o->system || o->tools || o->tool_choice || o->grammar ||
                    o->json_schema || o->suffix || o->logprobs || o->think_set)
                        return axp_errorf(a->err, -EINVAL, "an embedding takes its text alone: no flow, earlier turns, "
                                                           "system prompt, tools, grammar, schema, suffix, logprobs "
                                                           "or think");
                if ((r = axp_embedding_pooling(e->model, o->pooling, &pooling, a->err)) < 0)
                        return r;
        } else if (o->pooling != AXP_POOLING_MODEL || o->embed_normalize || o->embed_truncate)
                return axp_errorf(a->err, -EINVAL, "pooling, normalizing and truncating are an embedding's");
        const char *system = first_turn ? (o->system ? o->system : f ? f->system : NULL) : NULL;
        if ((r = check_messages(o, o->raw || (f && f->raw), a->err)) < 0)
                return r;
        _cleanup_free_ char *tools_grammar = NULL;
        axp_chat_family tools_family = AXP_CHAT_RAW;
        _cleanup_(axp_tools_freep) axp_tools *call_tools = NULL;
        if (!o->tools && o->tool_choice && strcmp(o->tool_choice, "none") != 0)
                return axp_errorf(a->err, -EINVAL, "tool_choice needs tools");
        if (o->think_set && (o->raw || (f && f->raw) || o->suffix))
                return axp_errorf(a->err, -EINVAL, "think goes with the chat template (not raw or a suffix)");
        if ((o->fim_middle || o->n_fim_extra || o->fim_fit) && !o->suffix)
                return axp_errorf(a->err, -EINVAL, "fim_middle, fim_extra and fim_fit go with a suffix");
        if (o->suffix) {
                const axp_fim_prompt fp = {
                        .prefix = a->prompt,
                        .suffix = o->suffix,
                        .middle = o->fim_middle,
                        .extra = o->fim_extra,
                        .n_extra = o->n_fim_extra,
                        .fit = o->fim_fit,
                        .n_ctx = e->n_ctx,
                        .n_predict = (int) MIN(o->max_tokens ? o->max_tokens : DEFAULT_MAX_TOKENS, (uint32_t) INT_MAX),
                };
                if ((r = axp_tokenize_fim(e->model->tok, &fp, &toks, &n, &prompt_cut, a->err)) < 0)
                        return r;
        } else if (o->tools || has_tool_turns(o)) {
                /* without tools, earlier calls and results are written as the template writes
                 * them without a tool list, and the answer is text, as with tool_choice none
                 * (or follows the grammar or schema given) */
                if (o->tools && (o->grammar || o->json_schema))
                        return axp_errorf(a->err, -EINVAL, "tools cannot be combined with a grammar or a JSON schema");
                if (o->raw || (f && f->raw))
                        return axp_errorf(a->err, -EINVAL, "tools need the chat template (not raw)");
                if (!first_turn)
                        return axp_errorf(a->err, -EINVAL, o->tools ? "tools are given on a flow's first turn only"
                                                                    : "tool calls and results are given on a flow's "
                                                                      "first turn only");
                _cleanup_free_ axp_chat_msg *earlier = calloc(o->n_messages + 1, sizeof(*earlier));
                if (!earlier)
                        return axp_errorf(a->err, -ENOMEM, "out of memory");
                for (size_t i = 0; i < o->n_messages; i++)
                        earlier[i] = (axp_chat_msg) { o->messages[i].role, o->messages[i].content };
                r = axp_tools_prepare(e->model->chat_template, e->model->tok, o->tools,
                                      o->tools ? o->tool_choice : "none", system, earlier, o->n_messages, a->prompt,
                                      &text, &tools_grammar, &tools_family, &call_tools, a->err);
                if (r < 0)
                        return r;
                if (!o->tools && (o->grammar || o->json_schema)) {
                        free(tools_grammar);
                        tools_grammar = NULL;
                }
        } else {
                /* an embedding's text as it is */
                text = format_turn(e, a->prompt, system, o, o->raw || o->embed || (f && f->raw), first_turn,
                                   f ? f->pending : -1);
        }
        /* a chat prompt's end for the thinking asked (and the opening of the think block where
         * the template's generation prompt writes it: QwQ, Qwen3's thinking-only models) */
        if (!o->suffix && text && !(o->raw || o->embed || (f && f->raw)) &&
            (r = axp_chat_apply_think(e->model->chat_template, o->think_set ? o->think : -1, &text, a->err)) < 0)
                return r;
        if (!o->suffix) {
                if (!text)
                        return axp_errorf(a->err, -ENOMEM, "out of memory");
                r = axp_tokenize(e->model->tok, text, strlen(text),
                                 AXP_TOK_PARSE_SPECIAL | (first_turn ? AXP_TOK_ADD_BOS : 0), &toks, &n, a->err);
                if (r < 0)
                        return r;
        }
        /* a flow's next turn first feeds the token its last answer ended with */
        n_all = n + (f && f->pending >= 0);
        if (n_all == 0)
                return axp_errorf(a->err, -EINVAL, "the prompt is empty");
        all = malloc(sizeof(int32_t) * n_all);
        if (!all)
                return axp_errorf(a->err, -ENOMEM, "out of memory");
        if (n_all > n)
                all[0] = f->pending;
        memcpy(all + (n_all - n), toks, sizeof(int32_t) * n);

        /* an embedding asked to fit loses its end (one position stays free, as for an answer) */
        if (o->embed && o->embed_truncate && n_all >= MIN(e->n_ctx, PREFILL_MAX_CTX + 1)) {
                n_all = MIN(e->n_ctx - 1, PREFILL_MAX_CTX);
                prompt_cut = true;
        }
        /* one position more for the answer's first token */
        int used = f ? f->seq.n_past : 0;
        if (used + n_all + 1 > e->n_ctx)
                return axp_seq_overflow_error(a->err, n_all, used, e->n_ctx);
        if (n_all > PREFILL_MAX_CTX)
                return axp_errorf(a->err, -E2BIG, "the prompt is %d tokens; one turn may prefill at most %d",
                                  n_all, PREFILL_MAX_CTX);
        max_tokens = o->embed ? 1 : o->max_tokens ? o->max_tokens : DEFAULT_MAX_TOKENS;
        /* the most positions the cache can reach this turn: its worst case in the budget */
        const int reach = (int) MIN((uint64_t) e->n_ctx, (uint64_t) used + n_all + max_tokens);
        const uint64_t kv_need = axp_kv_cache_bytes(&e->model->hp, e->kv_type, reach, n_all);

        q = calloc(1, sizeof(*q));
        if (!q)
                return axp_errorf(a->err, -ENOMEM, "out of memory");
        q->e = e;
        if ((r = axp_prefix_cache_reserve(&e->prefix, &e->kv_budget, f ? &f->kv : &q->kv, kv_need, a->err)) < 0)
                return r;
        _cleanup_(flow_turn_done) flow_turn turn = { e, f };
        q->kind = a->kind;
        q->cbs = a->cbs ? *a->cbs : (axp_request_cbs) { 0 };
        q->flow = f;
        q->prompt_tokens = (uint32_t) n_all;
        q->prompt_cut = prompt_cut;
        q->cache_scope = o->cache_scope;
        q->last_tok = -1;
        q->embed = o->embed;
        q->pooling = pooling;
        q->embed_normalize = o->embed_normalize;
        if (f) {
                if (!f->seq.model) {
                        r = axp_seq_init(&f->seq, e->model, e->kv_type, e->n_ctx, n_all, a->err);
                        if (r < 0)
                                return r;
                }
                q->seq = &f->seq;
                q->prev_pending = f->pending;
        } else {
                int reserve = (int) MIN((uint64_t) e->n_ctx, (uint64_t) n_all + max_tokens);
                r = axp_seq_init(&q->own_seq, e->model, e->kv_type, e->n_ctx, reserve, a->err);
                if (r < 0)
                        return r;
                q->seq = &q->own_seq;
                /* the tokens the prompt cache keeps by (an embedding's: none) */
                if (!o->embed && axp_grow((void **) &q->toks, &q->cap_toks, (size_t) n_all + 16, sizeof(int32_t)) == 0) {
                        memcpy(q->toks, all, sizeof(int32_t) * (size_t) n_all);
                        q->n_toks = n_all;
                }
        }
        r = axp_gen_init(&q->gen, e->model, &o->sampling, o->stop, o->n_stop, max_tokens, all,
                         n_all, a->err);
        if (r < 0)
                return r;
        q->gen_ok = true;
        if (o->logprobs)
                axp_gen_want_logprobs(&q->gen, o->top_logprobs);
        if ((r = axp_gen_constrain(&q->gen, tools_grammar ? tools_grammar : o->grammar, o->json_schema,
                                   a->err)) < 0)
                return r;
        q->tools = o->tools != NULL;
        q->tools_family = tools_family;
        q->call_tools = TAKE_PTR(call_tools);
        q->next = e->reqs;
        e->reqs = q;
        /* The flow is busy before the scheduler sees the request, and q stays ours until
         * axp_sched_submit returns: the scheduler may finish the request before that, e.g.
         * when its prompt cannot be staged. */
        if (f) {
                f->pending = -1;
                f->busy = q;
        }
        /* positions a finished request's cache holds in common with this prompt are copied,
         * not prefilled (a flow's first turn too); none where that fails */
        int cached = 0;
        if (q->seq->n_past == 0 && (!f || f->pending < 0) && !o->embed) {
                axp_error ignored = { 0 };
                int k = axp_prefix_cache_seed(&e->prefix, o->cache_scope, q->seq, all, n_all, &ignored);
                cached = MAX(k, 0);
        }
        q->submitting = true;
        r = axp_sched_submit(e->sched, a->kind, q->seq, all + cached, n_all - cached, &req_ops, q, &q->id, a->err);
        q->submitting = false;
        if (r < 0) {
                /* refused: nothing was queued and no callback ran */
                if (f) {
                        f->pending = q->prev_pending;
                        f->busy = NULL;
                        if (cached)
                                axp_seq_truncate(&f->seq, 0); /* the copied positions go */
                }
                req_unlink(e, q);
                return r;
        }
        a->id = q->id;
        /* ids stay unique across model swaps: the next scheduler starts past this one */
        e->next_req_id = MAX(e->next_req_id, q->id + 1);
        turn.f = NULL; /* accepted: the flow's reservation is its request's */
        if (q->finished)
                return 0; /* accepted and already finished: its callbacks ran; the cleanup frees it */
        TAKE_PTR(q); /* the engine's table holds it until it finishes */
        return 0;
}


/* Flows -------------------------------------------------------------------------------------- */

static void engine_flow_free(axp_engine *e, flow *f) {
        for (flow **p = &e->flows; *p; p = &(*p)->next)
                if (*p == f) {
                        *p = f->next;
                        break;
                }
        if (f->seq.model)
                axp_seq_free(&f->seq);
        if (f->kv.held)
                axp_kv_budget_release(&e->kv_budget, &f->kv);
        free(f->system);
        free(f);
}

/* Status ---------------------------------------------------------------------------------------- */

/* A copy, names and all: nothing in it points into the model, which a swap frees. */
static void status_snapshot(axp_engine *e, axp_engine_status *ret) {
        axp_sched_status st = { 0 };
        const char *name = e->model && e->model->name ? e->model->name : "";
        size_t n = strlen(name);

        if (e->sched)
                axp_sched_status_get(e->sched, &st);
        *ret = (axp_engine_status) {
                .queued_reactive = st.queued_reactive,
                .queued_proactive = st.queued_proactive,
                .running = st.running,
                .model_serial = e->model_serial,
                .kv_memory = e->model ? e->kv_budget.limit : 0,
                .kv_memory_used = e->kv_budget.used - e->prefix.bytes,
                .kv_memory_cached = e->prefix.bytes,
        };
        /* a long name ends before the character the buffer cannot hold whole */
        if (n >= sizeof(ret->model)) {
                n = sizeof(ret->model) - 1;
                while (n > 0 && ((uint8_t) name[n] & 0xc0) == 0x80)
                        n--;
        }
        memcpy(ret->model, name, n);
        ret->model[n] = 0;
        snprintf(ret->policy, sizeof(ret->policy), "%s",
                 axp_policy_name(e->sched ? axp_sched_policy(e->sched) : e->pol));
        if (e->model)
                ret->desc = e->model_desc;
}

/* ModelInfo's fields for the model in place (status_snapshot copies them). */
static void describe_model(axp_engine *e) {
        const axp_model *m = e->model;
        const char *ft = axp_file_type_name(m->file_type);
        axp_chat_family f = axp_chat_detect(m->chat_template, m->tok);
        axp_model_desc *d = &e->model_desc;
        const axp_fim_tokens *fim = axp_tokenizer_fim(m->tok);

        *d = (axp_model_desc) { .parameters = gguf_n_elements(m->gguf), .file_bytes = m->gguf->total_size,
                                   .n_ctx = e->n_ctx, .n_embd = m->hp.n_embd,
                                   .tools = axp_chat_takes_tools(f, m->chat_template, m->tok),
                                   .fim = fim->pre >= 0 && fim->suf >= 0 && fim->mid >= 0,
                                   .thinks = axp_chat_thinks(m->chat_template),
                                   .think_opens = axp_chat_think_opens(m->chat_template) };
        snprintf(d->arch, sizeof(d->arch), "%s", axp_arch_name(m->hp.arch));
        snprintf(d->file_type, sizeof(d->file_type), "%s", ft ? ft : "");
        snprintf(d->chat, sizeof(d->chat), "%s", axp_chat_family_name(f));
}

static bool status_equal(const axp_engine_status *a, const axp_engine_status *b) {
        return a->queued_reactive == b->queued_reactive &&
               a->queued_proactive == b->queued_proactive && a->running == b->running &&
               a->model_serial == b->model_serial && a->kv_memory == b->kv_memory &&
               a->kv_memory_used == b->kv_memory_used && a->kv_memory_cached == b->kv_memory_cached && strcmp(a->model, b->model) == 0 &&
               strcmp(a->policy, b->policy) == 0;
}

/* On the engine's thread: tell status_changed if anything changed since it was last told. */
static void status_tell(axp_engine *e) {
        axp_engine_status st;

        if (!e->cfg.status_changed)
                return;
        status_snapshot(e, &st);
        if (e->told_once && status_equal(&st, &e->told))
                return;
        e->told = st;
        e->told_once = true;
        e->cfg.status_changed(e->cfg.status_userdata, &st);
}

/* Calls: every API function runs on the engine's thread ---------------------------------------- */

typedef struct call {
        axp_engine *e;
        void (*fn)(axp_engine *e, void *arg);
        void *arg;
        bool needs_model; /* waits while a new model is swapped in */
} call;

static void run_call(void *p) {
        call *c = p;
        c->fn(c->e, c->arg);
}

static void engine_call(axp_engine *e, void (*fn)(axp_engine *e, void *arg), void *arg,
                        bool needs_model) {
        call c = { e, fn, arg, needs_model };

        /* with no memory for the mail, run nothing: callers see their default answer */
        (void) axp_mailbox_call(e->mb, run_call, &c);
}

/* Model, devices, scheduler ------------------------------------------------------------------ */

/* A model whose chat template is not understood: its prompts are used raw. One line on
 * stderr (the daemon's journal) per model load says so. */
static void warn_chat_template(const char *path, const axp_model *m) {
        if (axp_chat_template_unknown(m->chat_template))
                fprintf(stderr, "agentxpu: warning: %s: " AXP_CHAT_UNKNOWN_WARNING "\n", path);
}

static int setup_devices(axp_engine *e, axp_error *err) {
        axp_role_binding b;
        int r;

        /* roles that cannot be met fall back to the CPU, each with a line on stderr (the
         * daemon's journal) saying why */
        r = axp_roles_bind(e->static_dev, e->dynamic_dev, e->cfg.n_threads, NULL, NULL, &b, err);
        if (r < 0)
                return r;
        for (int i = 0; i < b.n_devs; i++) {
                e->devs[i] = TAKE_PTR(b.devs[i]);
                e->role_static[i] = i == b.static_dev;
                e->role_dynamic[i] = i == b.dynamic_dev;
        }
        e->n_devs = b.n_devs;
        e->static_dev_i = b.static_dev;
        e->dynamic_dev_i = e->dynamic_bound_i = b.dynamic_dev;
        for (int i = 0; i < e->n_devs; i++)
                if ((r = axp_executor_new(e->devs[i], i, e->mb, &e->ex[i], err)) < 0)
                        return r;

        /* graphics protection: how busy other processes keep the dynamic role's GPU */
        if (axp_device_kind(e->devs[e->dynamic_dev_i]) == AXP_DEV_IGPU ||
            axp_device_kind(e->devs[e->dynamic_dev_i]) == AXP_DEV_DGPU)
                if (axp_gpu_telemetry_open("auto", &e->telemetry, NULL) < 0)
                        e->telemetry = NULL;

        /* the CPU guard: proactive steps on the CPU at an idle class, and a share of the CPU
         * that shrinks while other processes keep it busy */
        e->bg_class = AXP_BG_NONE;
        if (e->cfg.proactive_idle) {
                const char *why;
                e->bg_class = axp_bg_class_probe(&why);
                if (e->bg_class == AXP_BG_NONE)
                        fprintf(stderr, "agentxpu: proactive work runs at normal priority: %s\n", why);
        }
        for (int i = 0; i < e->n_devs; i++)
                if (axp_device_kind(e->devs[i]) == AXP_DEV_CPU)
                        axp_executor_set_background(e->ex[i], e->bg_class);
        if (e->cfg.proactive_cpu_share < 1)
                if (axp_cpu_pressure_open("auto", &e->cpu_pressure, NULL) < 0)
                        e->cpu_pressure = NULL;
        return 0;
}

/* While the engine has work, feed the desktop's GPU use and the CPU pressure to the
 * scheduler's proactive budgets; while it is idle, stay asleep. */
static void telemetry_tick(axp_engine *e) {
        double now = axp_now(), busy;
        if ((!e->telemetry && !e->cpu_pressure) || !e->sched || axp_sched_idle(e->sched)) {
                e->telemetry_next = INFINITY;
                return;
        }
        if (e->telemetry_next == INFINITY) {
                /* start a window */
                if (e->telemetry)
                        (void) axp_gpu_telemetry_sample(e->telemetry, now, &busy);
                if (e->cpu_pressure)
                        (void) axp_cpu_pressure_sample(e->cpu_pressure, now, &busy);
                e->telemetry_next = now + TELEMETRY_PERIOD_S;
        } else if (now >= e->telemetry_next) {
                if (e->telemetry && axp_gpu_telemetry_sample(e->telemetry, now, &busy) >= 0)
                        axp_sched_set_external_busy(e->sched, busy);
                if (e->cpu_pressure && axp_cpu_pressure_sample(e->cpu_pressure, now, &busy) >= 0) {
                        e->cpu_pressure_last = busy;
                        axp_sched_set_cpu_pressure(e->sched, busy);
                }
                e->telemetry_next = now + TELEMETRY_PERIOD_S;
        }
}

/* The dynamic role for the model just calibrated: bound by "auto" to a discrete GPU, it stays
 * there only where axp_calib_gpu_keeps_dynamic says so; otherwise the CPU takes the role for
 * this model, the GPU gives back its copy of the weights, and stderr (the journal) says so. */
static void pick_dynamic(axp_engine *e) {
        int cpu = -1;
        axp_device *g = e->devs[e->dynamic_bound_i];

        e->dynamic_dev_i = e->dynamic_bound_i;
        for (int i = 0; i < e->n_devs; i++)
                if (axp_device_kind(e->devs[i]) == AXP_DEV_CPU)
                        cpu = i;
        if (cpu >= 0 && axp_device_spec_auto(e->dynamic_dev) && axp_device_kind(g) == AXP_DEV_DGPU) {
                const axp_calib *cg = axp_device_calib(g), *cc = axp_device_calib(e->devs[cpu]);
                if (!axp_calib_gpu_keeps_dynamic(cg, cc)) {
                        fprintf(stderr,
                                "agentxpu: dynamic role (auto): %s streams this model at %.2f GB/s, "
                                "the CPU at %.2f: the CPU takes the role for it "
                                "(DynamicDevice=opencl keeps the GPU)\n",
                                axp_device_name(g), axp_calib_B_eff(cg) / 1e9,
                                axp_calib_B_eff(cc) / 1e9);
                        e->dynamic_dev_i = cpu;
                        (void) axp_device_prepare(g, NULL, NULL);
                }
        }
        for (int i = 0; i < e->n_devs; i++)
                e->role_dynamic[i] = i == e->dynamic_dev_i;
}

/* Prepare the devices for m, calibrate them and start a scheduler. */
static int setup_model(axp_engine *e, axp_model *m, axp_error *err) {
        axp_sched_device sd[MAX_DEVS];
        axp_sched_config sc;
        axp_heg_shape shape;
        axp_sched_env env = { .now = env_now, .issue = env_issue, .set_timer = env_set_timer,
                              .hurry = env_hurry, .userdata = e };
        int r;

        if ((r = axp_kv_type_check(&m->hp, e->kv_type, err)) < 0)
                return r;
        e->n_ctx = e->cfg.n_ctx > 0 ? MIN(e->cfg.n_ctx, m->hp.n_ctx_train)
                                    : MIN(m->hp.n_ctx_train, PREFILL_MAX_CTX);
        /* LongRoPE's factors depend on the context: chosen before the devices read them */
        axp_model_set_context(m, e->n_ctx);
        for (int i = 0; i < e->n_devs; i++) {
                axp_device *d = e->devs[i];
                if ((r = axp_device_prepare(d, m, err)) < 0)
                        return r;
                r = axp_calib_get(d, m, e->calib_cache, axp_device_calib(d), err);
                if (r < 0)
                        return r;
                sd[i] = (axp_sched_device) {
                        .name = axp_device_name(d),
                        .calib = *axp_device_calib(d),
                        .warmup_s = 0,
                        .graphics = axp_device_kind(d) == AXP_DEV_IGPU || axp_device_kind(d) == AXP_DEV_DGPU,
                        .cpu = axp_device_kind(d) == AXP_DEV_CPU,
                };
        }
        pick_dynamic(e);
        axp_sched_config_default(&sc);
        sc.policy = e->pol;
        sc.preempt_bound_s = e->cfg.preempt_bound_s;
        sc.b_cap = e->cfg.b_cap;
        sc.max_batch = e->cfg.max_batch;
        sc.aging_s = e->cfg.aging_s;
        sc.proactive_duty = e->cfg.proactive_duty;
        sc.proactive_cpu_share = e->cfg.proactive_cpu_share;
        sc.piggyback = e->cfg.piggyback_slack >= 0;
        if (sc.piggyback)
                sc.piggyback_slack = e->cfg.piggyback_slack;
        sc.max_ctx = MIN(e->n_ctx, PREFILL_MAX_CTX);
        sc.first_id = e->next_req_id;
        axp_heg_shape_from_model(m, e->kv_type, &shape);
        r = axp_sched_new(&sc, &shape, &env, sd, e->n_devs, e->static_dev_i, e->dynamic_dev_i,
                          &e->sched, err);
        if (r < 0)
                return r;
        e->model = m;
        e->model_serial++;
        describe_model(e);
        e->kv_budget.limit = e->cfg.kv_memory > 0 ? e->cfg.kv_memory
                                                  : axp_kv_budget_auto(axp_memory_limit(), axp_model_weight_bytes(m));
        return 0;
}

static void teardown_model(axp_engine *e) {
        axp_sched_free(e->sched);
        e->sched = NULL;
        axp_prefix_cache_clear(&e->prefix, &e->kv_budget);
        /* a flow's context belongs to the old model: it starts afresh with the next one */
        for (flow *f = e->flows; f; f = f->next) {
                if (f->seq.model)
                        axp_seq_free(&f->seq);
                flow_kv_settle(e, f);
                f->pending = -1;
        }
        /* no request is left, and no flow holds a cache */
        assert(e->kv_budget.used == 0 && e->kv_budget.holders == 0);
        for (int i = 0; i < e->n_devs; i++)
                (void) axp_device_prepare(e->devs[i], NULL, NULL);
        axp_model_free(e->model);
        e->model = NULL;
}

/* A call has run: tell what it changed before its caller goes on. */
static void call_finish(axp_engine *e, axp_mail *m) {
        status_tell(e);
        axp_mailbox_call_done(e->mb, m);
        free(m);
}

/* LoadModel: once nothing is in flight, put the new model in place, then run the calls that
 * waited for it. */
static void maybe_swap(axp_engine *e) {
        if (!e->swapping || (e->sched && !axp_sched_idle(e->sched)))
                return;
        assert(!e->reqs); /* every request has finished */
        if (e->model)
                teardown_model(e);
        e->swap_err = (axp_error) { 0 };
        e->swap_rc = setup_model(e, e->next_model, &e->swap_err);
        if (e->swap_rc >= 0)
                axp_sched_set_cpu_pressure(e->sched, e->cpu_pressure_last);
        if (e->swap_rc < 0) {
                axp_sched_free(e->sched);
                e->sched = NULL;
                axp_model_free(e->next_model);
        }
        e->next_model = NULL;
        e->swapping = false;
        while (e->deferred) {
                deferred *d = e->deferred;
                e->deferred = d->next;
                d->mail->fn(d->mail->arg);
                call_finish(e, d->mail);
                free(d);
        }
}

static void *engine_main(void *p) {
        axp_engine *e = p;

        status_tell(e);
        for (;;) {
                axp_mail *m = axp_mailbox_wait(e->mb, MIN(e->timer, e->telemetry_next));
                telemetry_tick(e);
                if (!m) {
                        if (axp_now() >= e->timer) {
                                e->timer = INFINITY;
                                if (e->sched)
                                        axp_sched_timer(e->sched);
                        }
                } else if (m->type == AXP_MAIL_DONE) {
                        if (e->sched)
                                axp_sched_task_done(e->sched, m->dev, m->rc, m->err, m->busy_s);
                        free(m);
                } else if (e->swapping && ((call *) m->arg)->needs_model) {
                        deferred *d = malloc(sizeof(*d));
                        if (d) {
                                /* in order: append */
                                deferred **t = &e->deferred;
                                while (*t)
                                        t = &(*t)->next;
                                *d = (deferred) { .mail = m };
                                *t = d;
                        } else {
                                m->fn(m->arg);
                                call_finish(e, m);
                        }
                } else {
                        m->fn(m->arg);
                        call_finish(e, m);
                }
                maybe_swap(e);
                status_tell(e);
                if (e->stop && (!e->sched || axp_sched_idle(e->sched)) && !e->swapping)
                        return NULL;
        }
}

/* The API --------------------------------------------------------------------------------------- */

static char *strdup_or(const char *s, const char *def) {
        return strdup(s ? s : def);
}

static void api_nothing(axp_engine *e, void *arg) {
}

int axp_engine_new(const axp_engine_config *c, axp_engine **ret, axp_error *err) {
        _cleanup_(axp_engine_freep) axp_engine *e = NULL;
        _cleanup_(axp_model_freep) axp_model *m = NULL;
        int r;

        e = calloc(1, sizeof(*e));
        if (!e)
                return axp_errorf(err, -ENOMEM, "out of memory");
        e->cfg = *c;
        e->timer = INFINITY;
        e->telemetry_next = INFINITY;
        e->next_flow = 1;
        e->policy = strdup_or(c->policy, "agentxpu");
        e->static_dev = strdup_or(c->static_dev, "auto");
        e->dynamic_dev = strdup_or(c->dynamic_dev, "auto");
        e->model_path = c->model_path ? strdup(c->model_path) : NULL;
        e->calib_cache = c->calib_cache ? strdup(c->calib_cache) : NULL;
        if (!e->policy || !e->static_dev || !e->dynamic_dev || (c->model_path && !e->model_path) ||
            (c->calib_cache && !e->calib_cache))
                return axp_errorf(err, -ENOMEM, "out of memory");
        if (axp_policy_from_name(e->policy, &e->pol) < 0)
                return axp_errorf(err, -EINVAL, "unknown policy '%s' (agentxpu, fcfs or serial)",
                                  e->policy);
        if (!(c->preempt_bound_s > 0) || c->b_cap < 0 || c->max_batch < 1 ||
            c->max_batch > AXP_MAX_BATCH || !(c->proactive_duty >= 0 && c->proactive_duty <= 1) ||
            !(c->proactive_cpu_share > 0 && c->proactive_cpu_share <= 1) ||
            c->n_ctx < 0 || c->n_threads < 0 || !(c->piggyback_slack <= 10) || c->prompt_cache < 0 ||
            c->prompt_cache > AXP_PROMPT_CACHE_MAX)
                return axp_errorf(err, -EINVAL, "an engine setting is out of range");
        axp_prefix_cache_init(&e->prefix, c->prompt_cache);
        if (axp_kv_type_from_name(c->kv_type ? c->kv_type : "f16", &e->kv_type) < 0)
                return axp_errorf(err, -EINVAL, "unknown KV cache type '%s' (f16, f32 or q8_0)", c->kv_type);
        if ((r = axp_mailbox_new(&e->mb)) < 0)
                return axp_errorf(err, r, "out of memory");
        if ((r = setup_devices(e, err)) < 0)
                return r;
        if (c->model_path) {
                if ((r = axp_model_load(c->model_path, &m, err)) < 0)
                        return r;
                if ((r = setup_model(e, m, err)) < 0)
                        return r;
                warn_chat_template(c->model_path, m);
                TAKE_PTR(m); /* the engine's now */
        }
        r = pthread_create(&e->thread, NULL, engine_main, e);
        if (r != 0)
                return axp_errorf(err, -r, "cannot start the engine's thread");
        e->thread_started = true;
        /* the first status_changed has been told once a call has gone through */
        if (c->status_changed)
                engine_call(e, api_nothing, NULL, false);
        *ret = TAKE_PTR(e);
        return 0;
}

static void api_stop(axp_engine *e, void *arg) {
        /* A cancel may finish requests at once (its own, and others already cancelled),
         * freeing them: walk the list again after each one rather than keep a pointer. */
        bool again = e->sched != NULL;
        while (again) {
                again = false;
                for (ereq *q = e->reqs; q; q = q->next)
                        if (!q->stop_sent) {
                                q->stop_sent = true;
                                (void) axp_sched_cancel(e->sched, q->id);
                                again = true;
                                break;
                        }
        }
        e->stop = true;
}

void axp_engine_free(axp_engine *e) {
        if (!e)
                return;
        if (e->thread_started) {
                engine_call(e, api_stop, NULL, false);
                pthread_join(e->thread, NULL);
        }
        /* the thread ends once every request has finished and no call waits for a model */
        assert(!e->reqs && !e->deferred);
        if (e->model)
                teardown_model(e);
        while (e->flows)
                engine_flow_free(e, e->flows);
        axp_prefix_cache_free(&e->prefix, &e->kv_budget);
        /* every hold was given back once */
        assert(e->kv_budget.used == 0 && e->kv_budget.holders == 0);
        for (int i = 0; i < e->n_devs; i++) {
                axp_executor_free(e->ex[i]);
                axp_device_free(e->devs[i]);
        }
        axp_gpu_telemetry_free(e->telemetry);
        axp_cpu_pressure_free(e->cpu_pressure);
        axp_mailbox_free(e->mb);
        free(e->policy);
        free(e->static_dev);
        free(e->dynamic_dev);
        free(e->model_path);
        free(e->calib_cache);
        free(e);
}

static void api_submit(axp_engine *e, void *arg) {
        submit_args *a = arg;
        a->ret = do_submit(e, a);
}

int axp_engine_submit(axp_engine *e, axp_kind kind, const char *prompt,
                      const axp_request_opts *opts, const axp_request_cbs *cbs,
                      uint64_t *ret_id, axp_error *err) {
        axp_request_opts def;
        submit_args a = { .kind = kind, .prompt = prompt, .opts = opts, .cbs = cbs, .err = err,
                          .ret = -ENOMEM };

        if (!opts) {
                axp_request_opts_default(&def);
                a.opts = &def;
        }
        engine_call(e, api_submit, &a, true);
        if (a.ret == -ENOMEM && err && !err->msg[0])
                axp_errorf(err, -ENOMEM, "out of memory");
        if (a.ret >= 0 && ret_id)
                *ret_id = a.id;
        return a.ret;
}

typedef struct id_args {
        uint64_t id;
        int ret;
} id_args;

static void api_cancel(axp_engine *e, void *arg) {
        id_args *a = arg;
        a->ret = e->sched ? axp_sched_cancel(e->sched, a->id) : -ENOENT;
}

int axp_engine_cancel(axp_engine *e, uint64_t id) {
        id_args a = { .id = id, .ret = -ENOENT };
        engine_call(e, api_cancel, &a, false);
        return a.ret;
}

typedef struct flow_args {
        const char *system;
        bool raw;
        uint64_t id;
        int ret;
} flow_args;

static void api_flow_open(axp_engine *e, void *arg) {
        flow_args *a = arg;
        flow *f = calloc(1, sizeof(*f));

        if (!f || (a->system && !(f->system = strdup(a->system)))) {
                free(f);
                a->ret = -ENOMEM;
                return;
        }
        f->id = e->next_flow++;
        f->raw = a->raw;
        f->pending = -1;
        f->next = e->flows;
        e->flows = f;
        a->id = f->id;
        a->ret = 0;
}

int axp_engine_flow_open(axp_engine *e, const char *system, bool raw, uint64_t *ret_flow,
                         axp_error *err) {
        flow_args a = { .system = system, .raw = raw, .ret = -ENOMEM };

        engine_call(e, api_flow_open, &a, false);
        if (a.ret < 0)
                return axp_errorf(err, a.ret, "out of memory");
        *ret_flow = a.id;
        return 0;
}

static void api_flow_close(axp_engine *e, void *arg) {
        id_args *a = arg;
        flow *f = find_flow(e, a->id);

        if (!f) {
                a->ret = -ENOENT;
                return;
        }
        a->ret = 0;
        if (f->busy) {
                /* its request finishes as cancelled; the flow goes with it */
                f->closing = true;
                if (e->sched)
                        (void) axp_sched_cancel(e->sched, f->busy->id);
                return;
        }
        engine_flow_free(e, f);
}

int axp_engine_flow_close(axp_engine *e, uint64_t id) {
        id_args a = { .id = id, .ret = -ENOENT };
        engine_call(e, api_flow_close, &a, false);
        return a.ret;
}

typedef struct forget_args {
        uint64_t scope;
        uint32_t n;
        int ret;
} forget_args;

static void api_forget(axp_engine *e, void *arg) {
        forget_args *a = arg;
        a->ret = 0;
        a->n = (uint32_t) axp_prefix_cache_forget_scope(&e->prefix, &e->kv_budget, a->scope);
        /* its requests still running: their tokens go, so that they neither share their
         * caches nor leave one (as when the tokens find no memory) */
        for (ereq *q = e->reqs; q; q = q->next)
                if (q->cache_scope == a->scope) {
                        free(q->toks);
                        q->toks = NULL;
                        q->n_toks = 0;
                        q->cap_toks = 0;
                }
}

int axp_engine_forget_prompt_cache(axp_engine *e, uint64_t scope, uint32_t *ret_n) {
        forget_args a = { .scope = scope, .ret = -ENOMEM }; /* no memory for the call: none ran */
        engine_call(e, api_forget, &a, false);
        if (ret_n)
                *ret_n = a.n;
        return a.ret;
}

typedef struct info_args {
        uint64_t id;
        axp_req_state *state;
        axp_req_stats *stats;
        int ret;
} info_args;

static void api_info(axp_engine *e, void *arg) {
        info_args *a = arg;
        a->ret = e->sched ? axp_sched_request_info(e->sched, a->id, a->state, a->stats) : -ENOENT;
}

int axp_engine_request_info(axp_engine *e, uint64_t id, axp_req_state *ret_state,
                            axp_req_stats *ret_stats) {
        axp_req_state st;
        axp_req_stats sts;
        info_args a = { .id = id, .state = &st, .stats = &sts, .ret = -ENOENT };

        engine_call(e, api_info, &a, false);
        if (a.ret < 0)
                return a.ret;
        if (ret_state)
                *ret_state = st;
        if (ret_stats)
                *ret_stats = sts;
        return 0;
}

static void api_status(axp_engine *e, void *arg) {
        status_snapshot(e, arg);
}

void axp_engine_status_get(axp_engine *e, axp_engine_status *ret) {
        *ret = (axp_engine_status) { 0 };
        engine_call(e, api_status, ret, false);
}

/* axp_policy_name() gives constant strings. */
static void api_policy(axp_engine *e, void *arg) {
        *(const char **) arg = axp_policy_name(e->sched ? axp_sched_policy(e->sched) : e->pol);
}

const char *axp_engine_policy(axp_engine *e) {
        const char *name = "";
        engine_call(e, api_policy, &name, false);
        return name;
}

typedef struct policy_args {
        axp_policy p;
        int ret;
} policy_args;

static void api_set_policy(axp_engine *e, void *arg) {
        policy_args *a = arg;
        e->pol = a->p;
        a->ret = e->sched ? axp_sched_set_policy(e->sched, a->p) : 0;
}

int axp_engine_set_policy(axp_engine *e, const char *policy, axp_error *err) {
        policy_args a = { .ret = -ENOMEM };

        if (axp_policy_from_name(policy, &a.p) < 0)
                return axp_errorf(err, -EINVAL, "unknown policy '%s' (agentxpu, fcfs or serial)",
                                  policy ? policy : "");
        engine_call(e, api_set_policy, &a, false);
        return a.ret < 0 ? axp_errorf(err, a.ret, "cannot change the policy") : 0;
}

static void api_swap_begin(axp_engine *e, void *arg) {
        /* two LoadModel calls in a row: the later model wins */
        if (e->next_model)
                axp_model_free(e->next_model);
        e->next_model = arg;
        e->swapping = true;
}

typedef struct swap_result_args {
        int rc;
        axp_error err;
} swap_result_args;

/* Copied on the engine's thread: another LoadModel may swap again and overwrite them. */
static void api_swap_result(axp_engine *e, void *arg) {
        swap_result_args *a = arg;
        a->rc = e->swap_rc;
        a->err = e->swap_err;
}

int axp_engine_load_model(axp_engine *e, const char *path, axp_error *err) {
        swap_result_args a = { .rc = -EIO };
        axp_model *m = NULL;
        int r;

        r = axp_model_load(path, &m, err);
        if (r < 0)
                return r;
        /* refused before the swap, so that the engine keeps its model (kv_type never changes) */
        if ((r = axp_kv_type_check(&m->hp, e->kv_type, err)) < 0) {
                axp_model_free(m);
                return r;
        }
        warn_chat_template(path, m);
        engine_call(e, api_swap_begin, m, false);
        /* waits (as new requests do) until the requests in flight are done and m is in place */
        engine_call(e, api_swap_result, &a, true);
        if (a.rc < 0)
                return axp_errorf(err, a.rc, "%s",
                                  a.err.msg[0] ? a.err.msg : "cannot load the model");
        return 0;
}

typedef struct dev_args {
        axp_device_info *out;
        int cap, n;
} dev_args;

static void api_devices(axp_engine *e, void *arg) {
        dev_args *a = arg;

        a->n = e->n_devs;
        for (int i = 0; i < e->n_devs && i < a->cap; i++) {
                axp_device *d = e->devs[i];
                axp_sched_dev_stats st = { 0 };
                if (e->sched)
                        axp_sched_device_stats(e->sched, i, &st);
                a->out[i] = (axp_device_info) {
                        .kind = axp_dev_kind_name(axp_device_kind(d)),
                        .backend = axp_device_backend(d),
                        .can_run = axp_device_can_run(d, NULL),
                        .role_static = e->role_static[i],
                        .role_dynamic = e->role_dynamic[i],
                        .memory_bytes = axp_device_mem_bytes(d),
                        .busy_s = st.busy_s,
                        .prefill_reactive_s = st.prefill_reactive_s,
                        .prefill_proactive_s = st.prefill_proactive_s,
                        .steps_reactive_s = st.steps_reactive_s,
                        .steps_proactive_s = st.steps_proactive_s,
                        .steps_reactive = st.steps_reactive,
                        .steps_proactive = st.steps_proactive,
                };
                snprintf(a->out[i].name, sizeof(a->out[i].name), "%s", axp_device_name(d));
        }
}

int axp_engine_devices(axp_engine *e, axp_device_info *ret, int cap) {
        dev_args a = { .out = ret, .cap = cap };
        engine_call(e, api_devices, &a, false);
        return a.n;
}

static void api_cpu_guard(axp_engine *e, void *arg) {
        axp_engine_cpu_guard *g = arg;

        *g = (axp_engine_cpu_guard) {
                .pressure_source = e->cpu_pressure ? axp_cpu_pressure_source(e->cpu_pressure) : "none",
                .pressure = e->cpu_pressure_last,
                .proactive_share = 1.0,
                .share_setting = e->cfg.proactive_cpu_share,
                .priority = e->bg_class == AXP_BG_NONE ? "normal" : axp_bg_class_name(e->bg_class),
        };
        for (int i = 0; i < e->n_devs && e->sched; i++)
                if (axp_device_kind(e->devs[i]) == AXP_DEV_CPU)
                        g->proactive_share = MIN(g->proactive_share,
                                                 axp_sched_proactive_share(e->sched, i));
}

void axp_engine_cpu_guard_get(axp_engine *e, axp_engine_cpu_guard *ret) {
        *ret = (axp_engine_cpu_guard) { .pressure_source = "none", .proactive_share = 1.0,
                                        .priority = "normal" };
        engine_call(e, api_cpu_guard, ret, false);
}
