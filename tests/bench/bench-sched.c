/* SPDX-License-Identifier: MIT */
/* Preemption on the wall clock with the real CPU device: a reactive request arrives while a
 * long proactive prompt is being prefilled. Prints how long the reactive request waited for
 * its first kernel and its time to first token, against the same request alone, and how
 * much the proactive request was delayed. Synthetic model, so it runs anywhere. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine.h"
#include "mkmodel.h"
#include "kernels/types.h"

typedef struct done {
        pthread_mutex_t lock;
        pthread_cond_t cond;
        bool done;
        axp_req_stats st;
} done;

static void on_finished(void *ud, uint64_t id, axp_finish_reason reason, const axp_req_stats *st) {
        done *d = ud;
        pthread_mutex_lock(&d->lock);
        d->done = true;
        d->st = *st;
        pthread_cond_broadcast(&d->cond);
        pthread_mutex_unlock(&d->lock);
}

static void wait_done(done *d) {
        pthread_mutex_lock(&d->lock);
        while (!d->done)
                pthread_cond_wait(&d->cond, &d->lock);
        pthread_mutex_unlock(&d->lock);
}

static int submit(axp_engine *e, axp_kind kind, const char *prompt, int max_tokens, done *d) {
        axp_request_opts o;
        axp_request_cbs cb = { .finished = on_finished, .userdata = d };
        axp_error err = { 0 };
        uint64_t id;

        memset(d, 0, sizeof(*d));
        pthread_mutex_init(&d->lock, NULL);
        pthread_cond_init(&d->cond, NULL);
        axp_request_opts_default(&o);
        o.sampling.temperature = 0;
        o.max_tokens = max_tokens;
        o.raw = true;
        if (axp_engine_submit(e, kind, prompt, &o, &cb, &id, &err) < 0) {
                fprintf(stderr, "submit: %s\n", err.msg);
                return -1;
        }
        return 0;
}

/* One scenario under one policy: proactive requests with long prompts keep the engine busy,
 * then a reactive question arrives. */
typedef struct outcome {
        double react_wait, react_ttft, react_latency, pro_latency, makespan;
        unsigned preemptions, pro_prompt_tokens;
} outcome;

#define N_PRO 3

static int scenario(const char *model, const char *policy, const char *long_prompt, const char *question,
                    outcome *ret) {
        axp_engine_config c;
        axp_engine *e = NULL;
        axp_error err = { 0 };
        done p[N_PRO], r;

        axp_engine_config_default(&c);
        c.model_path = model;
        c.policy = policy;
        c.n_ctx = 2048;
        const char *slack = getenv("PIGGYBACK_SLACK"); /* < 0: off */
        if (slack)
                c.piggyback_slack = atof(slack);
        if (axp_engine_new(&c, &e, &err) < 0) {
                fprintf(stderr, "%s\n", err.msg);
                return -1;
        }
        double t0 = axp_now();
        for (int i = 0; i < N_PRO; i++)
                if (submit(e, AXP_PROACTIVE, long_prompt, 64, &p[i]) < 0)
                        return -1;
        nanosleep(&(struct timespec) { .tv_nsec = 300000000 }, NULL);
        if (submit(e, AXP_REACTIVE, question, 32, &r) < 0)
                return -1;
        wait_done(&r);
        *ret = (outcome) { .react_wait = r.st.queue_wait_s, .react_ttft = r.st.ttft_s,
                           .react_latency = r.st.latency_s };
        for (int i = 0; i < N_PRO; i++) {
                wait_done(&p[i]);
                ret->pro_latency += p[i].st.latency_s / N_PRO;
                ret->preemptions += p[i].st.preemptions;
                ret->pro_prompt_tokens = p[i].st.prompt_tokens;
        }
        ret->makespan = axp_now() - t0;
        axp_engine_free(e);
        return 0;
}

int main(void) {
        char dir[] = "/tmp/axp-bench-sched-XXXXXX", path[256], long_prompt[32768];
        const char *words[] = { "files ", "change ", "while ", "the ", "user ", "reads ", "mail ",
                                "and ", "notes ", "pile ", "up " };
        const char *question = "What changed in the notes?";
        const char *policies[] = { "agentxpu", "fcfs", "serial" };
        axp_mkmodel_params mp;
        axp_engine_config c;
        axp_engine *e = NULL;
        axp_error err = { 0 };
        done alone;
        size_t len = 0;

        if (!mkdtemp(dir))
                return 77;
        snprintf(path, sizeof(path), "%s/model.gguf", dir);
        axp_mkmodel_defaults(&mp);
        mp.n_embd = 1024;
        mp.n_ff = 3072;
        mp.n_layer = 8;
        mp.n_head = 16;
        mp.n_head_kv = 8;
        mp.n_ctx = 2048;
        mp.no_eog = true; /* every answer runs to its token limit */
        mp.path = path;
        if (axp_mkmodel(&mp, &err) < 0) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
        }
        for (int i = 0; len + 16 < sizeof(long_prompt) && i < 600; i++) {
                const char *w = words[(i * 7) % 11];
                memcpy(long_prompt + len, w, strlen(w));
                len += strlen(w);
        }
        long_prompt[len] = 0;

        /* the reactive request alone, for reference */
        axp_engine_config_default(&c);
        c.model_path = path;
        if (axp_engine_new(&c, &e, &err) < 0) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
        }
        if (submit(e, AXP_REACTIVE, question, 32, &alone) < 0)
                return 1;
        wait_done(&alone);
        axp_engine_free(e);

        outcome o[ELEMENTSOF(policies)];
        for (size_t i = 0; i < ELEMENTSOF(policies); i++)
                if (scenario(path, policies[i], long_prompt, question, &o[i]) < 0)
                        return 1;
        printf("model: 1024-dim, 8 layers, Q8_0 (synthetic); %d proactive requests of %u prompt tokens "
               "and 64 output tokens, then a reactive question (32 tokens) 0.3 s later; CPU, 2 threads\n\n",
               N_PRO, o[0].pro_prompt_tokens);
        printf("reactive alone: first token after %.3f s, done after %.3f s\n\n", alone.st.ttft_s,
               alone.st.latency_s);
        printf("%-9s %14s %14s %14s %16s %10s %12s\n", "policy", "reactive wait", "reactive TTFT",
               "reactive done", "proactive mean", "makespan", "preemptions");
        for (size_t i = 0; i < ELEMENTSOF(policies); i++)
                printf("%-9s %12.3f s %12.3f s %12.3f s %14.3f s %8.2f s %12u\n", policies[i], o[i].react_wait,
                       o[i].react_ttft, o[i].react_latency, o[i].pro_latency, o[i].makespan, o[i].preemptions);
        unlink(path);
        rmdir(dir);
        return 0;
}
