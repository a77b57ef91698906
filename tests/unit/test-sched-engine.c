/* SPDX-License-Identifier: MIT */
/* The engine on the wall clock with a real model: concurrent reactive and proactive requests
 * each stream exactly the text the synchronous reference driver generates for them alone;
 * cancel, flows, errors, policies, stats, devices, model reloading and the status told to
 * status_changed behave as engine.h says. No timing is asserted. */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "devices/calib.h"
#include "devices/discovery.h"
#include "devices/cpu-device.h"
#include "engine.h"
#include "devices/forward.h"
#include "heg/kv-budget.h"
#include "heg/prefix-cache.h"
#include "heg/seq.h"
#include "model/generate.h"
#include "model/reference.h"
#include "mkmodel.h"
#include "model/tokenizer.h"
#include "base/utf8.h"
#include "test.h"
#include "kernels/types.h"

#define MODEL_NAME "model-one"
#define MODEL_B_NAME "model-two"

static char model_path[256], model_b_path[256], calib_path[256], gemma_path[256], embed_path[256];

typedef struct result {
        pthread_mutex_t lock;
        pthread_cond_t cond;
        char text[8192];
        size_t len;
        bool done;
        int n_token_calls;
        axp_finish_reason reason;
        axp_req_stats st;
} result;

static void on_token(void *ud, uint64_t id, const char *text, size_t len) {
        result *r = ud;
        pthread_mutex_lock(&r->lock);
        if (r->len + len < sizeof(r->text)) {
                memcpy(r->text + r->len, text, len);
                r->len += len;
        }
        r->n_token_calls++;
        pthread_mutex_unlock(&r->lock);
}

static void on_finished(void *ud, uint64_t id, axp_finish_reason reason, const axp_req_stats *st) {
        result *r = ud;
        pthread_mutex_lock(&r->lock);
        r->done = true;
        r->reason = reason;
        r->st = *st;
        pthread_cond_broadcast(&r->cond);
        pthread_mutex_unlock(&r->lock);
}

static void result_init(result *r) {
        memset(r, 0, sizeof(*r));
        pthread_mutex_init(&r->lock, NULL);
        pthread_cond_init(&r->cond, NULL);
}

static void result_wait(result *r) {
        pthread_mutex_lock(&r->lock);
        while (!r->done)
                pthread_cond_wait(&r->cond, &r->lock);
        pthread_mutex_unlock(&r->lock);
}

static axp_request_cbs cbs_for(result *r) {
        return (axp_request_cbs) { .token = on_token, .finished = on_finished, .userdata = r };
}

/* The engine's KV cache type (NULL: its default, f16), which the reference uses too. */
static const char *kv_type;

/* The reference texts' lengths: an answer of random weights may hold a NUL byte */
static size_t want_len[4];

/* The reference: tokenize raw, prefill and decode greedily on a device of our own, with the
 * engine's KV cache type; with `stop`, that stop string; with lp, each token's record (top
 * alternatives, *ret_n_lp of them, at most 64). */
static size_t reference_gen(axp_model *m, axp_device *d, const char *prompt, int max_tokens, const char *stop,
                            uint32_t top, axp_token_logprob *lp, size_t *ret_n_lp, char *out, size_t cap) {
        _cleanup_free_ int32_t *toks = NULL;
        axp_seq q = { 0 };
        axp_gen g = { 0 };
        axp_sampler_params sp;
        axp_error err = { 0 };
        size_t len = 0;
        int n = 0;

        axp_sampler_params_default(&sp);
        sp.temperature = 0;
        CHECK(axp_tokenize(m->tok, prompt, strlen(prompt), AXP_TOK_PARSE_SPECIAL | AXP_TOK_ADD_BOS,
                           &toks, &n, &err) == 0);
        uint32_t kt = AXP_TYPE_F16;
        CHECK(axp_kv_type_from_name(kv_type ? kv_type : "f16", &kt) == 0);
        CHECK(axp_seq_init(&q, m, kt, m->hp.n_ctx_train, n + max_tokens, &err) == 0);
        CHECK(axp_gen_init(&g, m, &sp, stop ? &stop : NULL, stop ? 1 : 0, max_tokens, toks, n, &err) == 0);
        if (lp)
                axp_gen_want_logprobs(&g, top);
        CHECK(axp_forward_prefill(d, &q, toks, n, 0, &err) == 0);
        while (!g.done) {
                int32_t id = axp_gen_next(&g, q.logits);
                if (g.done)
                        break;
                CHECK(axp_forward_decode(d, &(axp_seq *) { &q }, &id, 1, &err) == 0);
        }
        axp_gen_finish(&g, AXP_FINISH_LENGTH);
        if (lp) {
                size_t n_lp = axp_gen_logprobs_ready(&g);
                CHECK(n_lp == g.n_lp && n_lp <= 64);
                memcpy(lp, g.lp, MIN(n_lp, 64) * sizeof(*lp));
                *ret_n_lp = n_lp;
        }
        len = MIN(g.out_len, cap - 1);
        memcpy(out, g.out, len);
        out[len] = 0;
        axp_gen_free(&g);
        axp_seq_free(&q);
        return len;
}

static size_t reference(axp_model *m, axp_device *d, const char *prompt, int max_tokens, char *out,
                        size_t cap) {
        return reference_gen(m, d, prompt, max_tokens, NULL, 0, NULL, NULL, out, cap);
}

/* reference() for the model at path, on a CPU device of its own */
static size_t reference_of(const char *path, const char *prompt, int max_tokens, char *out, size_t cap) {
        axp_model *m = NULL;
        axp_device *d = NULL;
        axp_error err = { 0 };
        size_t n = 0;

        CHECK(axp_model_load(path, &m, &err) == 0);
        CHECK(axp_cpu_device_new(1, &d, &err) == 0 && axp_device_prepare(d, m, &err) == 0);
        if (m && d)
                n = reference(m, d, prompt, max_tokens, out, cap);
        axp_device_free(d);
        axp_model_free(m);
        return n;
}

/* A tiny preemption bound gives the smallest S_chk (16 tokens), so short prompts still split
 * into static chunks and a dynamic remainder. */
static bool small_chunks;
/* the engine's KVMemory budget (0: auto) */
static uint64_t kv_memory;
/* the engine's PromptCache= (-1: its default) */
static int prompt_cache = -1;

static axp_engine *new_engine_on(const char *policy, const char *static_dev, const char *dynamic_dev) {
        axp_engine_config c;
        axp_engine *e = NULL;
        axp_error err = { 0 };

        axp_engine_config_default(&c);
        c.model_path = model_path;
        c.policy = policy;
        c.static_dev = static_dev;
        c.dynamic_dev = dynamic_dev;
        if (small_chunks)
                c.preempt_bound_s = 1e-6;
        c.n_threads = 2;
        c.calib_cache = calib_path;
        c.kv_type = kv_type;
        c.kv_memory = kv_memory;
        if (prompt_cache >= 0)
                c.prompt_cache = prompt_cache;
        if (axp_engine_new(&c, &e, &err) < 0)
                fprintf(stderr, "engine: %s\n", err.msg);
        return e;
}

static axp_engine *new_engine(const char *policy) {
        return new_engine_on(policy, "auto", "auto");
}

static void greedy_opts(axp_request_opts *o, int max_tokens) {
        axp_request_opts_default(o);
        o->sampling.temperature = 0;
        o->max_tokens = max_tokens;
        o->raw = true;
}

static const char *prompts[4] = {
        "The model is read from a file that holds its weights and its vocabulary.",
        "A machine reads text and writes text, one token at a time, until it stops.",
        "Short.",
        "Every request waits in a queue until the scheduler gives it a device to run on, "
        "and then it runs kernel after kernel until its answer is complete.",
};

/* The first n prompts at once, reactive and proactive in turn, greedy: each streams what it
 * generates alone (want), with sane statistics. what names the run in a failure. */
static void run_prompts(axp_engine *e, int n, char want[4][8192], const char *what) {
        static result res[4];
        axp_error err = { 0 };
        for (int i = 0; i < n; i++) {
                axp_request_opts o;
                axp_request_cbs cb = cbs_for(&res[i]);
                uint64_t id;
                result_init(&res[i]);
                greedy_opts(&o, 24);
                axp_kind kind = i % 2 ? AXP_PROACTIVE : AXP_REACTIVE;
                CHECK(axp_engine_submit(e, kind, prompts[i], &o, &cb, &id, &err) == 0);
        }
        for (int i = 0; i < n; i++) {
                result_wait(&res[i]);
                bool same = res[i].len == want_len[i] && memcmp(res[i].text, want[i], res[i].len) == 0;
                CHECK_MSG(same, "%s, request %d: '%.*s' vs '%s'", what, i, (int) res[i].len,
                          res[i].text, want[i]);
                CHECK(res[i].reason == AXP_FINISH_LENGTH || res[i].reason == AXP_FINISH_STOP);
                CHECK(res[i].st.generated_tokens >= 1 && res[i].st.generated_tokens <= 24);
                CHECK(res[i].st.queue_wait_s >= 0 && res[i].st.ttft_s <= res[i].st.latency_s);
                CHECK(res[i].st.prompt_tokens > 0);
                CHECK(res[i].st.prefill_tokens == res[i].st.prompt_tokens);
        }
}

/* Reactive and proactive requests at once stream what each generates alone. */
static void run_concurrent(const char *policy, const char *static_dev, const char *dynamic_dev,
                           char want[4][8192], int expect_devs) {
        char what[96];
        axp_engine *e = new_engine_on(policy, static_dev, dynamic_dev);
        CHECK(e != NULL);
        if (!e)
                return;
        CHECK(strcmp(axp_engine_policy(e), policy) == 0);
        snprintf(what, sizeof(what), "%s on %s+%s", policy, static_dev, dynamic_dev);
        run_prompts(e, 4, want, what);
        axp_device_info info[4];
        int n = axp_engine_devices(e, info, 4);
        CHECK_EQ_INT(n, expect_devs);
        if (n == 1) {
                CHECK(info[0].role_static && info[0].role_dynamic && info[0].busy_s > 0);
                CHECK(strcmp(info[0].kind, "cpu") == 0);
        } else if (n == 2) {
                /* each role on its own device, and both did work */
                CHECK(info[0].role_static != info[1].role_static);
                CHECK(info[0].role_dynamic != info[1].role_dynamic);
                CHECK(info[0].busy_s > 0 && info[1].busy_s > 0);
        }
        axp_engine_free(e);
}

static void reference_texts(char want[4][8192]) {
        axp_model *m = NULL;
        axp_device *d = NULL;
        axp_error err = { 0 };

        CHECK(axp_model_load(model_path, &m, &err) == 0);
        CHECK(axp_cpu_device_new(1, &d, &err) == 0 && axp_device_prepare(d, m, &err) == 0);
        for (int i = 0; i < 4; i++)
                want_len[i] = reference(m, d, prompts[i], 24, want[i], sizeof(want[i]));
        axp_device_free(d);
        axp_model_free(m);
}

static void test_concurrent_requests_match_reference(void) {
        static char want[4][8192];
        reference_texts(want);
        run_concurrent("agentxpu", "auto", "auto", want, 1);
        run_concurrent("fcfs", "auto", "auto", want, 1);
        run_concurrent("serial", "auto", "auto", want, 1);
        /* an F32 cache: the same as an F32 reference */
        kv_type = "f32";
        reference_texts(want);
        run_concurrent("agentxpu", "auto", "auto", want, 1);
        /* a Q8_0 cache: each row is quantized as it is written, whatever the batch */
        kv_type = "q8_0";
        reference_texts(want);
        run_concurrent("agentxpu", "auto", "auto", want, 1);
        kv_type = NULL;
}

/* A KV cache type the engine does not have is refused, naming it. */
static void test_unknown_kv_type(void) {
        axp_engine_config c;
        axp_engine *e = NULL;
        axp_error err = { 0 };
        axp_engine_config_default(&c);
        c.kv_type = "q4_0";
        CHECK(axp_engine_new(&c, &e, &err) == -EINVAL);
        CHECK(e == NULL);
        CHECK(strstr(err.msg, "'q4_0'") != NULL);
}

/* The static role on the CPU and the dynamic role on OpenCL (PoCL here): the same text as
 * the CPU alone, under every policy. */
static void test_roles_on_two_devices(void) {
        static char want[4][8192];
        axp_device *probe = NULL;
        if (axp_device_open("opencl", 1, &probe, NULL) < 0) {
                printf("  no OpenCL device here: the two-device run is not possible\n");
                return;
        }
        axp_device_free(probe);
        reference_texts(want);
        small_chunks = true;
        run_concurrent("agentxpu", "cpu", "opencl", want, 2);
        run_concurrent("serial", "cpu", "opencl", want, 2);
        small_chunks = false;
}

/* The calibration of the device of spec for the model, in the cache file at path: a memory
 * anchor of B bytes/s (and plausible other figures). */
static void store_calib(const char *path, const char *spec, double B) {
        _cleanup_(axp_model_freep) axp_model *m = NULL;
        _cleanup_(axp_device_freep) axp_device *d = NULL;
        axp_error err = { 0 };
        char key[512];
        CHECK(axp_model_load(model_path, &m, &err) == 0);
        CHECK(axp_device_open(spec, 2, &d, &err) == 0);
        if (!m || !d)
                return;
        axp_calib_key(d, m, key, sizeof(key));
        axp_calib c = { .P_pk = 1e11, .B_pk = B, .u_m = 1, .u_c = 0.05, .I_c = 100, .e_attn = 0.5 };
        CHECK(axp_calib_cache_store(path, key, &c, &err) == 0);
}

/* "auto" with a discrete GPU (PoCL, taken for one with AXP_OPENCL_KIND=dgpu) whose calibration
 * for the model streams it slower than the CPU's: the CPU takes the dynamic role for the model
 * and the requests generate what the CPU alone generates. Faster, or named explicitly, the GPU
 * keeps the role. The calibrations are set in a cache file of their own, so the outcome does
 * not hang on how busy the machine is. */
static void test_auto_leaves_a_slower_discrete_gpu(void) {
        static char want[4][8192];
        char saved[sizeof(calib_path)];
        axp_device *probe = NULL;
        if (axp_device_open("opencl", 1, &probe, NULL) < 0) {
                printf("  no OpenCL device here: nothing to take for a discrete GPU\n");
                return;
        }
        axp_device_free(probe);
        reference_texts(want);
        setenv("AXP_OPENCL_KIND", "dgpu", 1);
        memcpy(saved, calib_path, sizeof(saved));
        snprintf(calib_path, sizeof(calib_path), "%.240s-dgpu", saved);
        store_calib(calib_path, "cpu", 10e9);
        static const struct {
                const char *dynamic;
                double gpu_B;
                bool gpu_keeps;
        } cases[] = { { "auto", 1e9, false }, { "auto", 100e9, true }, { "opencl", 1e9, true } };
        for (size_t k = 0; k < ELEMENTSOF(cases); k++) {
                store_calib(calib_path, "opencl", cases[k].gpu_B);
                axp_engine *e = new_engine_on("agentxpu", "auto", cases[k].dynamic);
                CHECK(e != NULL);
                if (!e)
                        continue;
                axp_device_info info[4];
                int n = axp_engine_devices(e, info, 4);
                CHECK_EQ_INT(n, 2);
                for (int i = 0; i < n && i < 4; i++) {
                        bool gpu = strcmp(info[i].kind, "dgpu") == 0;
                        CHECK_MSG(info[i].role_dynamic == (gpu == cases[k].gpu_keeps),
                                  "dynamic role %s, GPU at %g B/s: %s (%s) has it: %d", cases[k].dynamic,
                                  cases[k].gpu_B, info[i].name, info[i].kind, info[i].role_dynamic);
                        CHECK(info[i].role_static == !gpu);
                }
                /* on the CPU alone: the CPU's texts (the GPU sums its rows in a GPU's order) */
                if (!cases[k].gpu_keeps)
                        run_prompts(e, 2, want, "a discrete GPU slower than the CPU");
                axp_engine_free(e);
        }
        unlink(calib_path);
        memcpy(calib_path, saved, sizeof(saved));
        unsetenv("AXP_OPENCL_KIND");
}

static void test_cancel_and_errors(void) {
        axp_engine *e = new_engine("agentxpu");
        axp_request_opts o;
        axp_error err = { 0 };
        static result r;
        axp_request_cbs cb = cbs_for(&r);
        uint64_t id, flow;

        CHECK(e != NULL);
        if (!e)
                return;
        result_init(&r);
        greedy_opts(&o, 400);
        CHECK(axp_engine_submit(e, AXP_PROACTIVE, prompts[3], &o, &cb, &id, &err) == 0);
        CHECK(axp_engine_cancel(e, id) == 0);
        result_wait(&r);
        CHECK(r.reason == AXP_FINISH_CANCELLED);
        CHECK(axp_engine_cancel(e, id) == -ENOENT);
        CHECK(axp_engine_request_info(e, id, NULL, NULL) == -ENOENT);

        o.sampling.temperature = -1;
        CHECK(axp_engine_submit(e, AXP_REACTIVE, "x", &o, &cb, &id, &err) == -EINVAL);
        /* top_p 0, which the bus, the bridge and the command line let through: the best alone */
        greedy_opts(&o, 4);
        o.sampling.temperature = 1;
        o.sampling.top_p = 0;
        result_init(&r);
        CHECK(axp_engine_submit(e, AXP_REACTIVE, prompts[2], &o, &cb, &id, &err) == 0);
        result_wait(&r);
        CHECK(r.reason == AXP_FINISH_LENGTH);
        o.sampling.top_p = 1.5f;
        CHECK(axp_engine_submit(e, AXP_REACTIVE, "x", &o, &cb, &id, &err) == -EINVAL);
        greedy_opts(&o, 4);
        o.flow = 999;
        CHECK(axp_engine_submit(e, AXP_REACTIVE, "x", &o, &cb, &id, &err) == -ENOENT);

        /* beyond the context (the model holds 1024 positions) */
        char *big = malloc(40000);
        for (int i = 0; i < 39999; i++)
                big[i] = "abcdefghij klmnop"[i % 17];
        big[39999] = 0;
        greedy_opts(&o, 4);
        CHECK(axp_engine_submit(e, AXP_REACTIVE, big, &o, &cb, &id, &err) == -E2BIG);
        /* no flow: the prompt and the context, nothing about positions in use */
        CHECK_MSG(strncmp(err.msg, "the prompt is ", 14) == 0 &&
                  strstr(err.msg, " tokens and the context holds 1024") && !strstr(err.msg, "use"),
                  "%s", err.msg);

        /* a flow with a request in flight is busy */
        static result f1;
        axp_request_cbs fcb = cbs_for(&f1);
        result_init(&f1);
        CHECK(axp_engine_flow_open(e, NULL, true, &flow, &err) == 0);
        greedy_opts(&o, 200);
        o.flow = flow;
        CHECK(axp_engine_submit(e, AXP_REACTIVE, prompts[0], &o, &fcb, &id, &err) == 0);
        CHECK(axp_engine_submit(e, AXP_REACTIVE, prompts[1], &o, &cb, &id, &err) == -EBUSY);
        result_wait(&f1);
        /* on a flow that holds a conversation, the message says how much of the context it holds */
        CHECK(axp_engine_submit(e, AXP_REACTIVE, big, &o, &cb, &id, &err) == -E2BIG);
        CHECK_MSG(strstr(err.msg, " tokens; the flow already holds ") &&
                  strstr(err.msg, " of the context's 1024 positions"), "%s", err.msg);
        free(big);
        CHECK(axp_engine_flow_close(e, flow) == 0);
        CHECK(axp_engine_flow_close(e, flow) == -ENOENT);

        CHECK(axp_engine_set_policy(e, "nonsense", &err) == -EINVAL);
        CHECK(axp_engine_set_policy(e, "serial", &err) == 0);
        CHECK(strcmp(axp_engine_policy(e), "serial") == 0);
        axp_engine_status st;
        axp_engine_status_get(e, &st);
        CHECK(st.running == 0 && st.queued_reactive == 0 && st.queued_proactive == 0);
        CHECK(strcmp(st.policy, "serial") == 0 && strcmp(st.model, MODEL_NAME) == 0);
        axp_engine_free(e);

        /* no model: NoModel */
        axp_engine_config c;
        axp_engine_config_default(&c);
        CHECK(axp_engine_new(&c, &e, &err) == 0);
        greedy_opts(&o, 4);
        CHECK(axp_engine_submit(e, AXP_REACTIVE, "x", &o, &cb, &id, &err) == -ENOMEDIUM);
        axp_engine_status_get(e, &st);
        CHECK(strcmp(st.model, "") == 0 && st.model_serial == 0);
        CHECK(strcmp(st.policy, "agentxpu") == 0);
        /* LoadModel puts one in place */
        CHECK(axp_engine_load_model(e, model_path, &err) == 0);
        axp_engine_status_get(e, &st);
        CHECK(strcmp(st.model, MODEL_NAME) == 0 && st.model_serial == 1);
        result_init(&r);
        CHECK(axp_engine_submit(e, AXP_REACTIVE, prompts[2], &o, &cb, &id, &err) == 0);
        result_wait(&r);
        CHECK(r.st.generated_tokens >= 1);
        /* a new model, a new scheduler: its ids go on from the last one's, so that an id
         * never stands for two requests of one engine (they used to start again at 1) */
        uint64_t before = id;
        CHECK(axp_engine_load_model(e, model_path, &err) == 0);
        result_init(&r);
        CHECK(axp_engine_submit(e, AXP_REACTIVE, prompts[2], &o, &cb, &id, &err) == 0);
        result_wait(&r);
        CHECK_MSG(id > before, "%" PRIu64 " after %" PRIu64, id, before);
        CHECK(axp_engine_load_model(e, "/nonexistent/model.gguf", &err) < 0);
        axp_engine_free(e);
}

/* Freeing the engine with requests queued and running cancels each one exactly once (a
 * cancel finishes requests at once, which once left the stop walking freed ones). */
static void test_free_with_requests_in_flight(void) {
        enum { N = 12 };
        static result rs[N];
        axp_engine *e = new_engine("agentxpu");
        axp_request_opts o;
        axp_error err = { 0 };

        CHECK(e != NULL);
        if (!e)
                return;
        greedy_opts(&o, 400);
        for (int i = 0; i < N; i++) {
                axp_request_cbs cb = cbs_for(&rs[i]);
                uint64_t id;
                result_init(&rs[i]);
                CHECK(axp_engine_submit(e, i % 3 ? AXP_PROACTIVE : AXP_REACTIVE,
                                        prompts[i % 4], &o, &cb, &id, &err) == 0);
        }
        axp_engine_free(e);
        for (int i = 0; i < N; i++) {
                CHECK(rs[i].done);
                CHECK_MSG(rs[i].reason == AXP_FINISH_CANCELLED || rs[i].reason == AXP_FINISH_LENGTH,
                          "request %d ended %d", i, (int) rs[i].reason);
        }
}

/* A flow keeps its KV cache: the second turn prefills only its own tokens (plus the token
 * the first answer ended with). */
static void test_flow_reuses_kv(void) {
        axp_engine *e = new_engine("agentxpu");
        axp_request_opts o;
        axp_error err = { 0 };
        static result t1, t2, plain;
        uint64_t flow, id;

        CHECK(e != NULL);
        if (!e)
                return;
        CHECK(axp_engine_flow_open(e, NULL, true, &flow, &err) == 0);
        greedy_opts(&o, 8);
        o.flow = flow;
        result_init(&t1);
        axp_request_cbs cb1 = cbs_for(&t1);
        CHECK(axp_engine_submit(e, AXP_REACTIVE, prompts[3], &o, &cb1, &id, &err) == 0);
        result_wait(&t1);
        result_init(&t2);
        axp_request_cbs cb2 = cbs_for(&t2);
        CHECK(axp_engine_submit(e, AXP_REACTIVE, prompts[2], &o, &cb2, &id, &err) == 0);
        result_wait(&t2);
        /* the same turn without the flow: BOS and all */
        result_init(&plain);
        axp_request_cbs cb3 = cbs_for(&plain);
        o.flow = 0;
        CHECK(axp_engine_submit(e, AXP_REACTIVE, prompts[2], &o, &cb3, &id, &err) == 0);
        result_wait(&plain);
        CHECK(t1.reason != AXP_FINISH_ERROR && t2.reason != AXP_FINISH_ERROR);
        CHECK(t2.st.prefill_tokens < t1.st.prefill_tokens);
        /* no BOS on a later turn, but the last answer's token comes first */
        CHECK_EQ_INT(t2.st.prefill_tokens, plain.st.prefill_tokens);
        axp_engine_free(e);
}

/* The KV-cache budget ------------------------------------------------------------------------ */

static uint64_t kv_used(axp_engine *e) {
        axp_engine_status st;
        axp_engine_status_get(e, &st);
        return st.kv_memory_used;
}

/* Submit prompt raw and greedy for max_tokens (the model never stops by itself). */
static int submit_held(axp_engine *e, const char *prompt, int max_tokens, uint64_t flow, result *r,
                       uint64_t *id, axp_error *err) {
        axp_request_opts o;
        axp_request_cbs cb = cbs_for(r);

        greedy_opts(&o, max_tokens);
        o.flow = flow;
        result_init(r);
        return axp_engine_submit(e, AXP_REACTIVE, prompt, &o, &cb, id, err);
}

static void cancel_wait(axp_engine *e, uint64_t id, result *r) {
        CHECK(axp_engine_cancel(e, id) == 0);
        result_wait(r);
}

/* A request reserves the cache of its prompt and max_tokens (at most the context) while it is
 * in flight, whatever ends it; what does not fit now is busy, what never fits too big; an open
 * flow holds its cache between turns, until it is closed or a new model empties it. */
static void test_kv_budget(void) {
        static result a, b, c, f1;
        axp_model *m = NULL;
        axp_error err = { 0 };
        axp_engine_status st;
        _cleanup_free_ int32_t *toks = NULL;
        uint64_t ida, idb, idc, idf, flow;
        uint32_t kt = AXP_TYPE_F16;
        int n = 0;

        /* what one request of prompts[0] and 200 tokens needs, and the whole context */
        CHECK(axp_model_load(model_path, &m, &err) == 0);
        if (!m)
                return;
        CHECK(axp_tokenize(m->tok, prompts[0], strlen(prompts[0]), AXP_TOK_PARSE_SPECIAL | AXP_TOK_ADD_BOS,
                           &toks, &n, &err) == 0);
        CHECK(axp_kv_type_from_name(kv_type ? kv_type : "f16", &kt) == 0);
        const uint64_t x = axp_kv_cache_bytes(&m->hp, kt, n + 200, n);
        const uint64_t whole = axp_kv_cache_bytes(&m->hp, kt, 1024, n);
        const uint64_t auto_bytes = axp_kv_budget_auto(axp_memory_limit(), axp_model_weight_bytes(m));
        axp_model_free(m);

        /* auto: the rule of heg/kv-budget.h; a request holds its worst case until it ends */
        kv_memory = 0;
        axp_engine *e = new_engine("agentxpu");
        CHECK(e != NULL);
        if (!e)
                return;
        axp_engine_status_get(e, &st);
        CHECK(st.kv_memory == auto_bytes && st.kv_memory_used == 0);
        CHECK(submit_held(e, prompts[0], 200, 0, &a, &ida, &err) == 0);
        CHECK_MSG(kv_used(e) == x, "%" PRIu64 " held, %" PRIu64 " expected", kv_used(e), x);
        cancel_wait(e, ida, &a);
        CHECK(kv_used(e) == 0);
        /* run to its end: given back too */
        CHECK(submit_held(e, prompts[0], 4, 0, &a, &ida, &err) == 0);
        result_wait(&a);
        CHECK(a.reason == AXP_FINISH_LENGTH);
        CHECK(kv_used(e) == 0);
        axp_engine_free(e);

        /* room for two such requests and a half */
        kv_memory = 2 * x + x / 2;
        e = new_engine("agentxpu");
        CHECK(e != NULL);
        if (!e)
                return;
        axp_engine_status_get(e, &st);
        CHECK(st.kv_memory == kv_memory);
        CHECK(submit_held(e, prompts[0], 200, 0, &a, &ida, &err) == 0);
        CHECK(submit_held(e, prompts[0], 200, 0, &b, &idb, &err) == 0);
        CHECK(kv_used(e) == 2 * x);
        CHECK(submit_held(e, prompts[0], 200, 0, &c, &idc, &err) == -EBUSY);
        CHECK_MSG(strncmp(err.msg, "the KV-cache budget (KVMemory=", 30) == 0 &&
                  strstr(err.msg, " is full: 2 requests and flows hold ") && strstr(err.msg, "; this one needs "),
                  "%s", err.msg);
        CHECK(!c.done && kv_used(e) == 2 * x);
        /* a short one still fits in what is left */
        CHECK(submit_held(e, "Short.", 1, 0, &c, &idc, &err) == 0);
        result_wait(&c);
        /* more than the whole budget: too big, not busy */
        CHECK(whole > kv_memory);
        CHECK(submit_held(e, prompts[0], 1000, 0, &c, &idc, &err) == -E2BIG);
        CHECK_MSG(strstr(err.msg, "more than the whole KV-cache budget (KVMemory="), "%s", err.msg);
        /* one cancelled: room again */
        cancel_wait(e, ida, &a);
        CHECK(kv_used(e) == x);
        CHECK(submit_held(e, prompts[0], 200, 0, &c, &idc, &err) == 0);
        cancel_wait(e, idb, &b);
        cancel_wait(e, idc, &c);
        CHECK(kv_used(e) == 0);

        /* a flow holds its cache between turns */
        CHECK(axp_engine_flow_open(e, NULL, true, &flow, &err) == 0);
        CHECK(kv_used(e) == 0);
        CHECK(submit_held(e, prompts[0], 200, flow, &f1, &idf, &err) == 0);
        CHECK(kv_used(e) == x); /* a turn: its worst case */
        CHECK(submit_held(e, prompts[0], 200, 0, &a, &ida, &err) == 0);
        CHECK(submit_held(e, prompts[0], 200, 0, &b, &idb, &err) == -EBUSY);
        cancel_wait(e, idf, &f1);
        const uint64_t held = kv_used(e) - x;
        CHECK(held > x / 2); /* the flow keeps its cache: the test's premise */
        CHECK(submit_held(e, prompts[0], 200, 0, &b, &idb, &err) == -EBUSY);
        CHECK_MSG(strstr(err.msg, " is full: 2 requests and flows hold "), "%s", err.msg);
        /* its next turn asks for what it may reach beyond what it holds: with 400 tokens, more
         * than the budget has beside the request in flight (for any prompt under 198 tokens) */
        CHECK(n < 198);
        CHECK(submit_held(e, prompts[0], 400, flow, &f1, &idf, &err) == -EBUSY);
        CHECK(kv_used(e) == x + held);
        /* closed: its cache is given back */
        CHECK(axp_engine_flow_close(e, flow) == 0);
        CHECK(kv_used(e) == x);
        CHECK(submit_held(e, prompts[0], 200, 0, &b, &idb, &err) == 0);
        cancel_wait(e, ida, &a);
        cancel_wait(e, idb, &b);
        CHECK(kv_used(e) == 0);

        /* closed with a turn in flight: the turn is cancelled, and both are given back */
        CHECK(axp_engine_flow_open(e, NULL, true, &flow, &err) == 0);
        CHECK(submit_held(e, prompts[0], 200, flow, &f1, &idf, &err) == 0);
        CHECK(axp_engine_flow_close(e, flow) == 0);
        result_wait(&f1);
        CHECK(f1.reason == AXP_FINISH_CANCELLED);
        CHECK(kv_used(e) == 0);

        /* a new model empties the flows' caches */
        CHECK(axp_engine_flow_open(e, NULL, true, &flow, &err) == 0);
        CHECK(submit_held(e, prompts[0], 4, flow, &f1, &idf, &err) == 0);
        result_wait(&f1);
        CHECK(kv_used(e) > 0);
        CHECK(axp_engine_load_model(e, model_path, &err) == 0);
        CHECK(kv_used(e) == 0);
        CHECK(submit_held(e, prompts[0], 4, flow, &f1, &idf, &err) == 0);
        result_wait(&f1);
        CHECK(kv_used(e) > 0);
        /* freed with a flow holding its cache (the engine asserts every hold went back) */
        axp_engine_free(e);
        kv_memory = 0;
}

/* The prompt cache --------------------------------------------------------------------------- */

static uint64_t kv_cached(axp_engine *e) {
        axp_engine_status st;
        axp_engine_status_get(e, &st);
        return st.kv_memory_cached;
}

/* Until the request has streamed its first text */
static void wait_first_token(result *r) {
        for (;;) {
                pthread_mutex_lock(&r->lock);
                int n = r->n_token_calls;
                pthread_mutex_unlock(&r->lock);
                if (n > 0)
                        return;
                usleep(1000);
        }
}

static void run_one(axp_engine *e, const char *prompt, int max_tokens, uint64_t flow, result *r) {
        uint64_t id;
        axp_error err = { 0 };
        CHECK_MSG(submit_held(e, prompt, max_tokens, flow, r, &id, &err) == 0, "%s", err.msg);
        result_wait(r);
        CHECK(r->reason == AXP_FINISH_LENGTH);
}

/* A finished request's cache is kept: the same prompt again prefills its last token alone, a
 * longer one what is new, and each answer is the reference's, the one a whole prefill gives
 * (for every KV cache type); a flow's first turn takes from it too. The cache is not what
 * requests hold; it makes room when a request needs it, a new model empties it, a request of
 * another scope never takes it, and with PromptCache=0 nothing is kept. */
static void test_prompt_cache(void) {
        static const char *const types[] = { NULL, "q8_0" };
        static char want[8192];
        static result r1, r2, r3, r4;
        char longer[1024];
        axp_model *m = NULL;
        axp_error err = { 0 };
        uint64_t flow;

        snprintf(longer, sizeof(longer), "%s And then it says so.", prompts[3]);
        for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
                kv_type = types[t];
                size_t want_n = reference_of(model_path, longer, 12, want, sizeof(want));

                axp_engine *e = new_engine("agentxpu");
                CHECK(e != NULL);
                if (!e)
                        return;
                run_one(e, prompts[3], 12, 0, &r1);
                CHECK(r1.st.prefill_tokens == r1.st.prompt_tokens && r1.st.prompt_tokens > AXP_PREFIX_MIN);
                CHECK(kv_used(e) == 0 && kv_cached(e) > 0);
                run_one(e, prompts[3], 12, 0, &r2);
                CHECK_EQ_INT(r2.st.prefill_tokens, 1);
                CHECK(r2.len == r1.len && memcmp(r2.text, r1.text, r1.len) == 0);
                run_one(e, longer, 12, 0, &r3);
                CHECK(r3.st.prompt_tokens > r1.st.prompt_tokens && r3.st.prefill_tokens < r3.st.prompt_tokens);
                /* what r1's cache held: its prompt and its answer, all but the last token */
                CHECK(r3.st.prompt_tokens - r3.st.prefill_tokens <= r1.st.prompt_tokens + 11);
                CHECK_MSG(r3.len == want_n && memcmp(r3.text, want, want_n) == 0, "kv %s: '%.*s' vs '%s'",
                          kv_type ? kv_type : "f16", (int) r3.len, r3.text, want);
                /* a flow's first turn starts from it, and its next turn goes on as usual */
                CHECK(axp_engine_flow_open(e, NULL, true, &flow, &err) == 0);
                run_one(e, longer, 12, flow, &r4);
                CHECK_EQ_INT(r4.st.prefill_tokens, 1);
                CHECK(r4.len == want_n && memcmp(r4.text, want, want_n) == 0);
                run_one(e, " Then what?", 4, flow, &r4);
                CHECK(r4.st.prefill_tokens == r4.st.prompt_tokens);
                CHECK(axp_engine_flow_close(e, flow) == 0);
                /* a new model: nothing of the old one's is kept */
                CHECK(axp_engine_load_model(e, model_path, &err) == 0);
                CHECK(kv_cached(e) == 0);
                run_one(e, prompts[3], 12, 0, &r2);
                CHECK(r2.st.prefill_tokens == r2.st.prompt_tokens);
                CHECK(r2.len == r1.len && memcmp(r2.text, r1.text, r1.len) == 0);
                /* a cache sized for a long answer is kept at the size of what it holds: a
                 * stop string ends this one early, with room reserved for 900 tokens */
                if (t == 0 && r1.len > 8) {
                        char stop[8];
                        memcpy(stop, r1.text + r1.len - 6, 6);
                        stop[6] = 0;
                        axp_request_opts o;
                        greedy_opts(&o, 900);
                        const char *stops[] = { stop };
                        o.stop = stops;
                        o.n_stop = 1;
                        axp_request_cbs cb = cbs_for(&r4);
                        uint64_t id;
                        result_init(&r4);
                        CHECK(axp_engine_load_model(e, model_path, &err) == 0); /* the cache emptied */
                        CHECK(axp_engine_submit(e, AXP_REACTIVE, prompts[3], &o, &cb, &id, &err) == 0);
                        result_wait(&r4);
                        CHECK(r4.reason == AXP_FINISH_STOP && r4.st.generated_tokens < 20);
                        CHECK(axp_model_load(model_path, &m, &err) == 0);
                        const int held = (int) (r4.st.prompt_tokens + r4.st.generated_tokens - 1);
                        CHECK_MSG(kv_cached(e) == axp_kv_cache_bytes(&m->hp, AXP_TYPE_F16, MAX(held, 256), 1),
                                  "%" PRIu64 " cached for %d positions", kv_cached(e), held);
                        axp_model_free(m);
                }
                axp_engine_free(e);
        }
        kv_type = NULL;

        /* a request shares its prompt's cache once it is prefilled, before it ends: one that
         * begins the same way and comes while the first decodes takes it */
        {
                axp_engine *e = new_engine("agentxpu");
                uint64_t ida;
                CHECK(e != NULL);
                if (!e)
                        return;
                CHECK(submit_held(e, longer, 900, 0, &r1, &ida, &err) == 0);
                wait_first_token(&r1);
                run_one(e, longer, 4, 0, &r2);
                CHECK_EQ_INT(r2.st.prefill_tokens, 1);
                /* it was still running then, unless this thread was held up for all of its 900
                 * tokens (then its end left the entry, and this proves nothing more) */
                (void) axp_engine_cancel(e, ida);
                result_wait(&r1);
                CHECK(r1.reason == AXP_FINISH_CANCELLED || r1.reason == AXP_FINISH_LENGTH);
                if (r1.reason != AXP_FINISH_CANCELLED)
                        printf("  note: the first request ended before the second came\n");
                axp_engine_free(e);
        }

        /* the dynamic role on OpenCL (PoCL here): a prompt begun from the cache gives the
         * reference's answer there too */
        axp_device *probe = NULL;
        if (axp_device_open("opencl", 1, &probe, NULL) == 0) {
                axp_device_free(probe);
                size_t want_n = reference_of(model_path, longer, 12, want, sizeof(want));
                small_chunks = true;
                axp_engine *e = new_engine_on("agentxpu", "cpu", "opencl");
                small_chunks = false;
                CHECK(e != NULL);
                if (!e)
                        return;
                run_one(e, prompts[3], 12, 0, &r1);
                run_one(e, longer, 12, 0, &r3);
                CHECK(r3.st.prefill_tokens < r3.st.prompt_tokens);
                CHECK_MSG(r3.len == want_n && memcmp(r3.text, want, want_n) == 0, "opencl: '%.*s' vs '%s'",
                          (int) r3.len, r3.text, want);
                axp_engine_free(e);
        }

        /* another scope (the daemon's: another user) never starts from this one's */
        {
                axp_engine *e = new_engine("agentxpu");
                CHECK(e != NULL);
                if (!e)
                        return;
                run_one(e, prompts[3], 4, 0, &r1);
                axp_request_opts o;
                greedy_opts(&o, 4);
                o.cache_scope = 1000;
                axp_request_cbs cb = cbs_for(&r2);
                uint64_t id;
                result_init(&r2);
                CHECK(axp_engine_submit(e, AXP_REACTIVE, prompts[3], &o, &cb, &id, &err) == 0);
                result_wait(&r2);
                CHECK(r2.st.prefill_tokens == r2.st.prompt_tokens);
                result_init(&r2);
                CHECK(axp_engine_submit(e, AXP_REACTIVE, prompts[3], &o, &cb, &id, &err) == 0);
                result_wait(&r2);
                CHECK_EQ_INT(r2.st.prefill_tokens, 1);
                axp_engine_free(e);
        }

        /* a budget of about two requests: the cache gives its room to requests */
        CHECK(axp_model_load(model_path, &m, &err) == 0);
        const uint64_t x = axp_kv_cache_bytes(&m->hp, AXP_TYPE_F16, 300, 64);
        axp_model_free(m);
        kv_memory = 2 * x + x / 4;
        axp_engine *e = new_engine("agentxpu");
        CHECK(e != NULL);
        if (!e)
                return;
        run_one(e, prompts[3], 12, 0, &r1);
        CHECK(kv_cached(e) > 0);
        uint64_t ida, idb;
        CHECK(submit_held(e, prompts[0], 250, 0, &r2, &ida, &err) == 0);
        CHECK_MSG(submit_held(e, prompts[1], 250, 0, &r3, &idb, &err) == 0, "%s", err.msg);
        CHECK(kv_cached(e) == 0);
        cancel_wait(e, ida, &r2);
        cancel_wait(e, idb, &r3);
        axp_engine_free(e);
        kv_memory = 0;

        /* PromptCache=0: nothing kept */
        prompt_cache = 0;
        e = new_engine("agentxpu");
        CHECK(e != NULL);
        if (!e)
                return;
        run_one(e, prompts[3], 12, 0, &r1);
        run_one(e, prompts[3], 12, 0, &r2);
        CHECK(r2.st.prefill_tokens == r2.st.prompt_tokens && kv_cached(e) == 0);
        axp_engine_free(e);
        prompt_cache = -1;
}

/* Forgetting a scope's prompt cache: its entries go (not another scope's), its next request
 * prefills all of its prompt, and a request of it still running then keeps none when it ends. */
static void test_forget_prompt_cache(void) {
        static result r1, r2;
        axp_error err = { 0 };
        axp_request_opts o;
        axp_request_cbs cb = cbs_for(&r2);
        uint32_t n = 99;
        uint64_t id;

        axp_engine *e = new_engine("agentxpu");
        CHECK(e != NULL);
        if (!e)
                return;
        run_one(e, prompts[3], 4, 0, &r1);
        /* another scope's entry stays */
        greedy_opts(&o, 4);
        o.cache_scope = 7;
        result_init(&r2);
        CHECK(axp_engine_submit(e, AXP_REACTIVE, prompts[3], &o, &cb, &id, &err) == 0);
        result_wait(&r2);
        const uint64_t one = kv_cached(e) / 2;
        CHECK(one > 0);
        CHECK(axp_engine_forget_prompt_cache(e, 0, &n) == 0);
        CHECK_EQ_INT(n, 1);
        CHECK(kv_cached(e) == one);
        run_one(e, prompts[3], 4, 0, &r1);
        CHECK(r1.st.prefill_tokens == r1.st.prompt_tokens);
        result_init(&r2);
        CHECK(axp_engine_submit(e, AXP_REACTIVE, prompts[3], &o, &cb, &id, &err) == 0);
        result_wait(&r2);
        CHECK_EQ_INT(r2.st.prefill_tokens, 1);

        /* a request running when its scope is forgotten leaves nothing when it ends */
        CHECK(axp_engine_forget_prompt_cache(e, 0, &n) == 0 && n == 1);
        CHECK(axp_engine_forget_prompt_cache(e, 7, &n) == 0 && n == 1);
        CHECK(kv_cached(e) == 0);
        CHECK(submit_held(e, prompts[1], 200, 0, &r1, &id, &err) == 0);
        wait_first_token(&r1);
        CHECK(axp_engine_forget_prompt_cache(e, 0, &n) == 0);
        result_wait(&r1);
        CHECK(r1.reason == AXP_FINISH_LENGTH);
        /* n 1: it had ended before (its entry went then); 0: it ran, and kept none */
        CHECK_MSG(n <= 1 && kv_cached(e) == 0, "%u forgotten, %" PRIu64 " bytes cached", n, kv_cached(e));
        axp_engine_free(e);
}

/* A model with sliding-window layers (gemma3, window 8) keeps its caches too: a chat's next
 * turn (the last prompt, its answer and a question) starts from the last turn's cache and gets
 * the answer a whole prefill gives. */
static void test_prompt_cache_sliding_window(void) {
        static char want[8192], turn2[8192];
        static result r1, r2;
        char saved[256];

        snprintf(saved, sizeof(saved), "%s", model_path);
        snprintf(model_path, sizeof(model_path), "%s", gemma_path);
        axp_engine *e = new_engine("agentxpu");
        CHECK(e != NULL);
        if (e) {
                run_one(e, prompts[3], 12, 0, &r1);
                CHECK(r1.st.prefill_tokens == r1.st.prompt_tokens && kv_cached(e) > 0);
                const size_t n1 = strlen(prompts[3]);
                memcpy(turn2, prompts[3], n1);
                memcpy(turn2 + n1, r1.text, r1.len);
                snprintf(turn2 + n1 + r1.len, sizeof(turn2) - n1 - r1.len, " And then?");
                run_one(e, turn2, 12, 0, &r2);
                printf("  gemma3: the next turn prefilled %u of its %u tokens\n", (unsigned) r2.st.prefill_tokens,
                       (unsigned) r2.st.prompt_tokens);
                CHECK(r2.st.prompt_tokens - r2.st.prefill_tokens >= r1.st.prompt_tokens / 2);
                size_t want_n = reference_of(gemma_path, turn2, 12, want, sizeof(want));
                CHECK_MSG(r2.len == want_n && memcmp(r2.text, want, want_n) == 0, "'%.*s' vs '%s'", (int) r2.len,
                          r2.text, want);
                axp_engine_free(e);
        }
        snprintf(model_path, sizeof(model_path), "%s", saved);
}

/* Embeddings ------------------------------------------------------------------------------------ */

typedef struct embedded {
        result r; /* first: the finished callback's */
        float v[1024];
        size_t n;
        int n_calls;
} embedded;

static void on_embedding(void *ud, uint64_t id, const float *v, size_t n) {
        embedded *x = ud;
        pthread_mutex_lock(&x->r.lock);
        x->n_calls++;
        x->n = n;
        memcpy(x->v, v, MIN(n, ELEMENTSOF(x->v)) * sizeof(float));
        pthread_mutex_unlock(&x->r.lock);
}

static int submit_embed(axp_engine *e, axp_kind kind, const char *text, enum axp_pooling pool, bool normalize,
                        embedded *x, axp_error *err) {
        axp_request_opts o;
        axp_request_cbs cb = { .token = on_token, .embedding = on_embedding, .finished = on_finished, .userdata = x };
        uint64_t id;

        axp_request_opts_default(&o);
        o.embed = true;
        o.pooling = pool;
        o.embed_normalize = normalize;
        memset(x, 0, sizeof(*x));
        result_init(&x->r);
        return axp_engine_submit(e, kind, text, &o, &cb, &id, err);
}

/* What the embedding of text is, computed without the engine: the whole prompt prefilled at
 * once on a CPU device of its own, its residual stream pooled. Also the reference forward
 * pass's (double precision, one token at a time), pooled the same way, in ref. */
static size_t embedding_of(const char *path, const char *text, enum axp_pooling pool, bool normalize, float *out,
                           double *ref) {
        _cleanup_free_ int32_t *toks = NULL;
        axp_model *m = NULL;
        axp_device *d = NULL;
        axp_ref *rf = NULL;
        axp_seq q = { 0 };
        axp_error err = { 0 };
        _cleanup_free_ double *h = NULL;
        size_t dim = 0;
        int n = 0;

        CHECK(axp_model_load(path, &m, &err) == 0);
        CHECK(axp_cpu_device_new(1, &d, &err) == 0 && axp_device_prepare(d, m, &err) == 0);
        if (!m || !d)
                goto out;
        if (pool == AXP_POOLING_MODEL)
                pool = m->hp.pooling;
        dim = (size_t) m->hp.n_embd;
        CHECK(axp_tokenize(m->tok, text, strlen(text), AXP_TOK_PARSE_SPECIAL | AXP_TOK_ADD_BOS, &toks, &n, &err) == 0);
        uint32_t kt = AXP_TYPE_F16;
        CHECK(axp_seq_init(&q, m, kt, m->hp.n_ctx_train, n, &err) == 0);
        CHECK(axp_forward_prefill(d, &q, toks, n, 0, &err) == 0);
        axp_embedding_pool(m, q.x, n, pool, normalize, out);
        axp_seq_free(&q);
        /* the reference: each position's normed state, pooled in double */
        h = calloc(dim, sizeof(double));
        CHECK(h && axp_ref_new(m, n, &rf, &err) == 0);
        for (size_t i = 0; i < dim; i++)
                ref[i] = 0;
        for (int t = 0; rf && h && t < n; t++) {
                CHECK(axp_ref_step(rf, toks[t], NULL, &err) == 0);
                if (pool == AXP_POOLING_MEAN || (pool == AXP_POOLING_CLS && t == 0) ||
                    (pool == AXP_POOLING_LAST && t == n - 1)) {
                        axp_ref_normed(rf, h);
                        for (size_t i = 0; i < dim; i++)
                                ref[i] += pool == AXP_POOLING_MEAN ? h[i] / n : h[i];
                }
        }
        if (normalize) {
                double ss = 0;
                for (size_t i = 0; i < dim; i++)
                        ss += ref[i] * ref[i];
                for (size_t i = 0; i < dim; i++)
                        ref[i] /= sqrt(ss);
        }
        axp_ref_free(rf);
out:
        axp_device_free(d);
        axp_model_free(m);
        return dim;
}

/* The engine's embedding is the whole prefill's, bit for bit, and within a float's rounding
 * of the reference forward pass's (cosine and largest difference against the largest value). */
static void check_embedding(const embedded *x, const char *path, const char *text, enum axp_pooling pool,
                            bool normalize, const char *what) {
        static float want[1024];
        static double ref[1024];
        size_t dim = embedding_of(path, text, pool, normalize, want, ref);

        CHECK_MSG(x->r.reason == AXP_FINISH_STOP && x->n_calls == 1 && x->n == dim, "%s: reason %d, %d calls of %zu",
                  what, (int) x->r.reason, x->n_calls, x->n);
        CHECK_MSG(x->r.len == 0 && x->r.st.generated_tokens == 0 && x->r.st.prefill_tokens == x->r.st.prompt_tokens,
                  "%s: %zu bytes of text, %u generated, %u of %u prefilled", what, x->r.len,
                  (unsigned) x->r.st.generated_tokens, (unsigned) x->r.st.prefill_tokens,
                  (unsigned) x->r.st.prompt_tokens);
        CHECK_MSG(dim > 0 && memcmp(x->v, want, dim * sizeof(float)) == 0, "%s: not the whole prefill's embedding",
                  what);
        double dot = 0, na = 0, nb = 0, diff = 0, amax = 0, ss = 0;
        for (size_t i = 0; i < dim; i++) {
                dot += x->v[i] * ref[i];
                na += (double) x->v[i] * x->v[i];
                nb += ref[i] * ref[i];
                diff = fmax(diff, fabs(x->v[i] - ref[i]));
                amax = fmax(amax, fabs(ref[i]));
                ss += (double) x->v[i] * x->v[i];
        }
        double cosine = dot / sqrt(na * nb);
        printf("  %s: %zu values, cosine to the reference %.6f, largest difference %.2e of %.2e\n", what, dim, cosine,
               diff, amax);
        CHECK_MSG(cosine > 0.9995 && diff < 0.03 * amax, "%s: cosine %.6f, difference %.3g of %.3g", what, cosine,
                  diff, amax);
        if (normalize)
                CHECK_MSG(fabs(ss - 1) < 1e-4, "%s: length %.6f", what, sqrt(ss));
}

/* An embedding runs as a prefill of its kind (in chunks beside other requests) and gives the
 * whole prefill's pooled states: mean (the default of a chat model's file), cls and last,
 * normalized or not; a file that names its pooling gets it; sliding-window layers too. Asked
 * with what only an answer takes, or too long, it is refused; asked to fit, it is cut. */
static void test_embedding(void) {
        static char want0[8192];
        static embedded x[4];
        static result gen;
        static char longer[6000];
        axp_error err = { 0 };
        char saved[256];

        small_chunks = true;
        axp_engine *e = new_engine("agentxpu");
        small_chunks = false;
        CHECK(e != NULL);
        if (!e)
                return;
        /* beside a generation, proactive and reactive */
        size_t want0_n = reference_of(model_path, prompts[0], 16, want0, sizeof(want0));
        uint64_t gid;
        CHECK(submit_held(e, prompts[0], 16, 0, &gen, &gid, &err) == 0);
        CHECK_MSG(submit_embed(e, AXP_PROACTIVE, prompts[3], AXP_POOLING_MODEL, true, &x[0], &err) == 0, "%s", err.msg);
        CHECK(submit_embed(e, AXP_REACTIVE, prompts[1], AXP_POOLING_LAST, false, &x[1], &err) == 0);
        CHECK(submit_embed(e, AXP_REACTIVE, prompts[3], AXP_POOLING_CLS, true, &x[2], &err) == 0);
        CHECK(submit_embed(e, AXP_PROACTIVE, prompts[2], AXP_POOLING_MEAN, false, &x[3], &err) == 0);
        for (int i = 0; i < 4; i++)
                result_wait(&x[i].r);
        result_wait(&gen);
        CHECK_MSG(gen.len == want0_n && memcmp(gen.text, want0, want0_n) == 0, "the answer beside them: '%.*s' vs '%s'",
                  (int) gen.len, gen.text, want0);
        check_embedding(&x[0], model_path, prompts[3], AXP_POOLING_MEAN, true, "mean, normalized, proactive");
        check_embedding(&x[1], model_path, prompts[1], AXP_POOLING_LAST, false, "last");
        check_embedding(&x[2], model_path, prompts[3], AXP_POOLING_CLS, true, "cls, normalized");
        check_embedding(&x[3], model_path, prompts[2], AXP_POOLING_MEAN, false, "mean of a short text");
        CHECK(x[0].r.st.prompt_tokens > 16); /* more than a chunk */

        /* what only an answer takes */
        axp_request_opts o;
        axp_request_cbs cb = { .finished = on_finished, .userdata = &gen };
        uint64_t id, flow;
        CHECK(axp_engine_flow_open(e, NULL, true, &flow, &err) == 0);
        axp_request_opts_default(&o);
        o.embed = true;
        o.flow = flow;
        CHECK(axp_engine_submit(e, AXP_REACTIVE, "x", &o, &cb, &id, &err) == -EINVAL && strstr(err.msg, "flow"));
        axp_request_opts_default(&o);
        o.embed = true;
        o.json_schema = "{}";
        CHECK(axp_engine_submit(e, AXP_REACTIVE, "x", &o, &cb, &id, &err) == -EINVAL);
        axp_request_opts_default(&o);
        o.pooling = AXP_POOLING_LAST; /* without embed */
        CHECK(axp_engine_submit(e, AXP_REACTIVE, "x", &o, &cb, &id, &err) == -EINVAL);
        axp_request_opts_default(&o);
        o.embed = true;
        o.pooling = (enum axp_pooling) 9;
        CHECK(axp_engine_submit(e, AXP_REACTIVE, "x", &o, &cb, &id, &err) == -EINVAL);
        CHECK(axp_engine_flow_close(e, flow) == 0);
        /* beyond the context: refused, or cut to fit */
        for (size_t i = 0; i + 1 < sizeof(longer); i++)
                longer[i] = (char) ('a' + (i * 7 + i / 13) % 26);
        CHECK(submit_embed(e, AXP_REACTIVE, longer, AXP_POOLING_MODEL, true, &x[0], &err) == -E2BIG);
        axp_request_opts_default(&o);
        o.embed = o.embed_truncate = o.embed_normalize = true;
        axp_request_cbs cbe = { .embedding = on_embedding, .finished = on_finished, .userdata = &x[0] };
        memset(&x[0], 0, sizeof(x[0]));
        result_init(&x[0].r);
        CHECK_MSG(axp_engine_submit(e, AXP_REACTIVE, longer, &o, &cbe, &id, &err) == 0, "%s", err.msg);
        result_wait(&x[0].r);
        CHECK(x[0].r.reason == AXP_FINISH_STOP && x[0].n_calls == 1 && x[0].r.st.prompt_cut);
        CHECK_EQ_INT((int) x[0].r.st.prompt_tokens, 1023);
        axp_engine_free(e);

        /* a file that names its pooling (last, as Qwen3-Embedding's), and sliding-window layers */
        snprintf(saved, sizeof(saved), "%s", model_path);
        for (int k = 0; k < 2; k++) {
                snprintf(model_path, sizeof(model_path), "%s", k ? gemma_path : embed_path);
                e = new_engine("agentxpu");
                CHECK(e != NULL);
                if (!e)
                        break;
                CHECK(submit_embed(e, AXP_REACTIVE, prompts[3], AXP_POOLING_MODEL, true, &x[0], &err) == 0);
                result_wait(&x[0].r);
                check_embedding(&x[0], model_path, prompts[3], k ? AXP_POOLING_MEAN : AXP_POOLING_LAST, true,
                                k ? "gemma3 (sliding window 8), mean" : "a file's own pooling (last)");
                axp_engine_free(e);
        }
        snprintf(model_path, sizeof(model_path), "%s", saved);
}

/* Swapping models under load while other threads read the status --------------------------- */

/* What status_changed was told, from which thread. */
typedef struct told_log {
        pthread_mutex_t lock;
        unsigned n, bad_model, bad_policy, other_thread;
        pthread_t thread;
        axp_engine_status last;
} told_log;

static bool known_model(const char *name) {
        return strcmp(name, MODEL_NAME) == 0 || strcmp(name, MODEL_B_NAME) == 0;
}

static void on_status(void *ud, const axp_engine_status *st) {
        told_log *t = ud;

        pthread_mutex_lock(&t->lock);
        if (t->n == 0)
                t->thread = pthread_self();
        else if (!pthread_equal(t->thread, pthread_self()))
                t->other_thread++;
        t->n++;
        t->bad_model += !known_model(st->model);
        t->bad_policy += strcmp(st->policy, "agentxpu") != 0;
        t->last = *st;
        pthread_mutex_unlock(&t->lock);
}

typedef struct load {
        axp_engine *e;
        atomic_bool stop;
        /* submitter */
        result *res;
        int cap, n_submitted, n_refused;
        /* reader */
        unsigned n_reads, bad_reads;
} load;

/* Keeps requests coming, reactive and proactive, each a few tokens long. */
static void *submitter(void *p) {
        load *l = p;
        axp_request_opts o;
        axp_error err = { 0 };

        greedy_opts(&o, 6);
        while (!atomic_load(&l->stop) && l->n_submitted < l->cap) {
                result *r = &l->res[l->n_submitted];
                axp_request_cbs cb = cbs_for(r);
                uint64_t id;

                result_init(r);
                if (axp_engine_submit(l->e, l->n_submitted % 2 ? AXP_PROACTIVE : AXP_REACTIVE,
                                      prompts[l->n_submitted % 4], &o, &cb, &id, &err) == 0)
                        l->n_submitted++;
                else
                        l->n_refused++;
                /* a few in flight at a time */
                if (l->n_submitted >= 3)
                        result_wait(&l->res[l->n_submitted - 3]);
        }
        return NULL;
}

/* Reads the status (model name and all) as fast as it can. */
static void *reader(void *p) {
        load *l = p;

        while (!atomic_load(&l->stop)) {
                axp_engine_status st;
                axp_engine_status_get(l->e, &st);
                l->bad_reads += !known_model(st.model) || strcmp(st.policy, "agentxpu") != 0 ||
                                strcmp(axp_engine_policy(l->e), "agentxpu") != 0;
                l->n_reads++;
        }
        return NULL;
}

/* LoadModel again and again, between two models, with requests in flight and another thread
 * reading the status: the names read and told are always one of the two (never freed
 * memory: the model is freed by each swap), the new one by the time LoadModel returns, and
 * every request finishes once. Run under ASan and TSan (tools/run-sanitized). */
static void test_swap_models_under_load(void) {
        enum { SWAPS = 40, CAP = 1024 };
        static result res[CAP];
        static told_log told = { .lock = PTHREAD_MUTEX_INITIALIZER };
        axp_engine_config c;
        axp_engine *e = NULL;
        axp_error err = { 0 };
        axp_engine_status st;
        pthread_t sub, rd;
        load l = { .res = res, .cap = CAP };
        unsigned serial;
        int busy_swaps = 0;

        axp_engine_config_default(&c);
        c.model_path = model_path;
        c.n_threads = 2;
        c.calib_cache = calib_path;
        c.status_changed = on_status;
        c.status_userdata = &told;
        if (axp_engine_new(&c, &e, &err) < 0)
                fprintf(stderr, "engine: %s\n", err.msg);
        CHECK(e != NULL);
        if (!e)
                return;
        /* told before axp_engine_new returned */
        pthread_mutex_lock(&told.lock);
        CHECK(told.n >= 1 && strcmp(told.last.model, MODEL_NAME) == 0);
        serial = told.last.model_serial;
        pthread_mutex_unlock(&told.lock);

        l.e = e;
        CHECK(pthread_create(&sub, NULL, submitter, &l) == 0);
        CHECK(pthread_create(&rd, NULL, reader, &l) == 0);
        for (int i = 0; i < SWAPS; i++) {
                const char *path = i % 2 ? model_path : model_b_path;
                const char *name = i % 2 ? MODEL_NAME : MODEL_B_NAME;

                /* a request in flight first: the swap waits for it */
                for (int k = 0; k < 100000; k++) {
                        axp_engine_status_get(e, &st);
                        if (st.running + st.queued_reactive + st.queued_proactive > 0)
                                break;
                        usleep(100);
                }
                busy_swaps += st.running + st.queued_reactive + st.queued_proactive > 0;
                CHECK(axp_engine_load_model(e, path, &err) == 0);
                /* told before LoadModel returned */
                pthread_mutex_lock(&told.lock);
                CHECK_MSG(strcmp(told.last.model, name) == 0, "swap %d: told '%s'", i,
                          told.last.model);
                CHECK_EQ_INT(told.last.model_serial, serial + i + 1);
                pthread_mutex_unlock(&told.lock);
                axp_engine_status_get(e, &st);
                CHECK(strcmp(st.model, name) == 0);
        }
        atomic_store(&l.stop, true);
        pthread_join(sub, NULL);
        pthread_join(rd, NULL);
        for (int i = 0; i < l.n_submitted; i++)
                result_wait(&res[i]);
        axp_engine_free(e);

        printf("  %d swaps (%d with requests in flight): %d requests, %u status reads, %u told\n",
               SWAPS, busy_swaps, l.n_submitted, l.n_reads, told.n);
        CHECK(busy_swaps > SWAPS / 2);
        CHECK(l.n_submitted > 0 && l.n_refused == 0);
        CHECK(l.n_reads > 0 && l.bad_reads == 0);
        for (int i = 0; i < l.n_submitted; i++)
                CHECK_MSG(res[i].done && (res[i].reason == AXP_FINISH_LENGTH ||
                                          res[i].reason == AXP_FINISH_STOP),
                          "request %d ended %d", i, (int) res[i].reason);
        CHECK(told.bad_model == 0 && told.bad_policy == 0 && told.other_thread == 0);
        /* the last word: nothing queued or running */
        CHECK(told.last.running == 0 && told.last.queued_reactive == 0 &&
              told.last.queued_proactive == 0);
}

/* Log-probabilities through the engine ------------------------------------------------------ */

typedef struct lp_result {
        result r;
        axp_token_logprob lp[64];
        size_t n_lp;
        bool early; /* a text callback brought text of a token whose record had not come */
        bool late;  /* a record came after text past its token */
} lp_result;

static void on_lp_token(void *ud, uint64_t id, const char *text, size_t len) {
        lp_result *l = ud;
        on_token(&l->r, id, text, len);
        pthread_mutex_lock(&l->r.lock);
        /* the records come before the text their tokens make: every record here ends within
         * the text delivered so far */
        if (l->n_lp > 0 && l->lp[l->n_lp - 1].end > l->r.len)
                l->early = true;
        pthread_mutex_unlock(&l->r.lock);
}

static void on_lp(void *ud, uint64_t id, const axp_token_logprob *lp, size_t n, const axp_tokenizer *tok) {
        lp_result *l = ud;
        pthread_mutex_lock(&l->r.lock);
        for (size_t i = 0; i < n; i++) {
                if (lp[i].start < l->r.len)
                        l->late = true;
                if (l->n_lp < 64)
                        l->lp[l->n_lp++] = lp[i];
                char piece[64];
                CHECK(axp_token_to_piece(tok, lp[i].token, false, piece, sizeof(piece)) >= 0);
        }
        pthread_mutex_unlock(&l->r.lock);
}

/* The reference's records, with a stop string or none */
static size_t reference_lp(axp_model *m, axp_device *d, const char *prompt, int max_tokens, const char *stop,
                           uint32_t top, axp_token_logprob *ret, char *out, size_t cap) {
        size_t n_lp = 0;
        reference_gen(m, d, prompt, max_tokens, stop, top, ret, &n_lp, out, cap);
        return n_lp;
}

/* The engine's records are the reference's, in order, each before the text of its token; a
 * stop string's tokens have none; more than AXP_LOGPROBS_MAX alternatives is refused. */
static void test_logprobs(void) {
        axp_model *m = NULL;
        axp_device *d = NULL;
        axp_error err = { 0 };
        static axp_token_logprob want[64];
        static char text[8192];
        const char *prompt = prompts[1];

        CHECK(axp_model_load(model_path, &m, &err) == 0);
        CHECK(axp_cpu_device_new(1, &d, &err) == 0 && axp_device_prepare(d, m, &err) == 0);
        size_t n_want = reference_lp(m, d, prompt, 24, NULL, 5, want, text, sizeof(text));
        CHECK_EQ_INT((int) n_want, 24); /* the model has no end of generation token */
        /* a stop string from the middle of the answer: three bytes, none of them NUL */
        char stop[4] = { 0 };
        size_t at = want[12].start;
        for (; at + 3 <= want[23].end; at++)
                if (text[at] && text[at + 1] && text[at + 2] && axp_utf8_valid(text + at, 3, NULL))
                        break;
        CHECK(at + 3 <= want[23].end);
        memcpy(stop, text + at, 3);
        const char *first = strstr(text, stop);
        size_t cut = first ? (size_t) (first - text) : 0, n_cut = 0;
        while (n_cut < n_want && want[n_cut].start < cut)
                n_cut++;
        CHECK(n_cut > 0 && n_cut < n_want);
        static axp_token_logprob want_stop[64];
        static char text_stop[8192];
        CHECK_EQ_INT((int) reference_lp(m, d, prompt, 24, stop, 5, want_stop, text_stop, sizeof(text_stop)),
                     (int) n_cut);
        axp_device_free(d);
        axp_model_free(m);

        axp_engine *e = new_engine("agentxpu");
        CHECK(e != NULL);
        if (!e)
                return;
        for (int run = 0; run < 2; run++) {
                static lp_result l;
                memset(&l, 0, sizeof(l));
                result_init(&l.r);
                axp_request_opts o;
                axp_request_cbs cb = { .token = on_lp_token, .logprobs = on_lp, .finished = on_finished,
                                       .userdata = &l };
                greedy_opts(&o, 24);
                o.logprobs = true;
                o.top_logprobs = 5;
                const char *stops[1] = { stop };
                if (run == 1) {
                        o.stop = stops;
                        o.n_stop = 1;
                }
                uint64_t id;
                CHECK(axp_engine_submit(e, AXP_REACTIVE, prompt, &o, &cb, &id, &err) == 0);
                result_wait(&l.r);
                size_t n = run == 1 ? n_cut : n_want;
                const axp_token_logprob *w = run == 1 ? want_stop : want;
                CHECK_MSG(l.n_lp == n, "run %d: %zu records, not %zu", run, l.n_lp, n);
                CHECK(!l.early && !l.late);
                for (size_t i = 0; i < MIN(n, l.n_lp); i++) {
                        CHECK(l.lp[i].token == w[i].token && l.lp[i].n_top == 5);
                        CHECK(l.lp[i].start == w[i].start && l.lp[i].end == w[i].end);
                        CHECK_MSG(fabsf(l.lp[i].logprob - w[i].logprob) < 1e-4f, "token %zu: %g vs %g", i,
                                  l.lp[i].logprob, w[i].logprob);
                        /* greedy: the chosen token is the most likely */
                        CHECK(l.lp[i].top[0].token == l.lp[i].token);
                        for (int k = 0; k < 5; k++)
                                CHECK(l.lp[i].top[k].token == w[i].top[k].token);
                }
        }
        /* a record holds at most AXP_LOGPROBS_MAX alternatives */
        axp_request_opts o;
        greedy_opts(&o, 4);
        o.logprobs = true;
        o.top_logprobs = AXP_LOGPROBS_MAX + 1;
        result r;
        result_init(&r);
        axp_request_cbs cb = cbs_for(&r);
        uint64_t id;
        CHECK(axp_engine_submit(e, AXP_REACTIVE, prompt, &o, &cb, &id, &err) == -EINVAL);
        CHECK(strstr(err.msg, "top_logprobs") != NULL);
        axp_engine_free(e);
}

static int make_model(const axp_mkmodel_params *mp) {
        axp_error err = { 0 };
        if (axp_mkmodel(mp, &err) < 0) {
                fprintf(stderr, "%s\n", err.msg);
                return -1;
        }
        return 0;
}

int main(void) {
        char dir[] = "/tmp/axp-test-engine-XXXXXX";
        axp_mkmodel_params mp;

        if (!mkdtemp(dir))
                TEST_SKIP("cannot make a temporary folder");
        snprintf(model_path, sizeof(model_path), "%s/model.gguf", dir);
        snprintf(calib_path, sizeof(calib_path), "%s/calib", dir);
        axp_mkmodel_defaults(&mp);
        mp.type = AXP_TYPE_Q8_0;
        mp.n_ctx = 1024;
        mp.seed = 11;
        /* no end-of-generation token can be chosen: a request runs to its max_tokens, so one
         * cancelled (or found busy) right after it was submitted is still running then, however
         * slowly this thread gets back to it on a loaded machine */
        mp.no_eog = true;
        mp.path = model_path;
        mp.name = MODEL_NAME;
        if (make_model(&mp) < 0)
                return 1;
        /* the same shape (the calibration cache serves both), other weights and name */
        snprintf(model_b_path, sizeof(model_b_path), "%s/model-b.gguf", dir);
        mp.seed = 12;
        mp.name = MODEL_B_NAME;
        mp.path = model_b_path;
        if (make_model(&mp) < 0)
                return 1;
        /* sliding-window layers (gemma3, a window of 8) */
        snprintf(gemma_path, sizeof(gemma_path), "%s/gemma3.gguf", dir);
        axp_mkmodel_defaults(&mp);
        mp.arch = AXP_ARCH_GEMMA3;
        mp.type = AXP_TYPE_Q8_0;
        mp.n_ctx = 1024;
        mp.n_swa = 8;
        mp.seed = 13;
        mp.no_eog = true;
        mp.path = gemma_path;
        if (make_model(&mp) < 0)
                return 1;
        /* an embedding model's file (qwen3, last-token pooling, as Qwen3-Embedding's) */
        snprintf(embed_path, sizeof(embed_path), "%s/embed.gguf", dir);
        axp_mkmodel_defaults(&mp);
        mp.arch = AXP_ARCH_QWEN3;
        mp.pooling = AXP_POOLING_LAST;
        mp.seed = 14;
        mp.path = embed_path;
        if (make_model(&mp) < 0)
                return 1;
        RUN(test_concurrent_requests_match_reference);
        RUN(test_roles_on_two_devices);
        RUN(test_auto_leaves_a_slower_discrete_gpu);
        RUN(test_cancel_and_errors);
        RUN(test_unknown_kv_type);
        RUN(test_free_with_requests_in_flight);
        RUN(test_flow_reuses_kv);
        RUN(test_kv_budget);
        RUN(test_prompt_cache);
        RUN(test_prompt_cache_sliding_window);
        RUN(test_forget_prompt_cache);
        RUN(test_logprobs);
        RUN(test_embedding);
        RUN(test_swap_models_under_load);
        unlink(model_path);
        unlink(model_b_path);
        unlink(gemma_path);
        unlink(embed_path);
        unlink(calib_path);
        rmdir(dir);
        TEST_EXIT();
}
