/* SPDX-License-Identifier: MIT */
/* Preemption on the wall clock with the real CPU device: a reactive request arrives while a
 * long proactive prompt is being prefilled. Prints how long the reactive request waited for
 * its first kernel and its time to first token, against the same request alone, and how
 * much the proactive request was delayed. Synthetic model, so it runs anywhere. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine.h"
#include "mkmodel.h"
#include "types.h"

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

int main(void) {
        char dir[] = "/tmp/axp-bench-sched-XXXXXX", path[256], long_prompt[16384];
        const char *words[] = { "files ", "change ", "while ", "the ", "user ", "reads ", "mail ",
                                "and ", "notes ", "pile ", "up " };
        axp_mkmodel_params mp;
        axp_engine_config c;
        axp_engine *e = NULL;
        axp_error err = { 0 };
        done p, r, alone;
        size_t len = 0;

        if (!mkdtemp(dir))
                return 77;
        snprintf(path, sizeof(path), "%s/model.gguf", dir);
        axp_mkmodel_defaults(&mp);
        mp.n_embd = 512;
        mp.n_ff = 1536;
        mp.n_layer = 4;
        mp.n_head = 8;
        mp.n_head_kv = 4;
        mp.n_ctx = 2048;
        mp.path = path;
        if (axp_mkmodel(&mp, &err) < 0) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
        }
        for (int i = 0; len + 16 < sizeof(long_prompt) && i < 250; i++) {
                const char *w = words[(i * 7) % 11];
                memcpy(long_prompt + len, w, strlen(w));
                len += strlen(w);
        }
        long_prompt[len] = 0;

        axp_engine_config_default(&c);
        c.model_path = path;
        if (axp_engine_new(&c, &e, &err) < 0) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
        }
        const char *question = "What changed in the notes?";

        if (submit(e, AXP_REACTIVE, question, 8, &alone) < 0)
                return 1;
        wait_done(&alone);

        if (submit(e, AXP_PROACTIVE, long_prompt, 8, &p) < 0)
                return 1;
        nanosleep(&(struct timespec) { .tv_nsec = 300000000 }, NULL);
        if (submit(e, AXP_REACTIVE, question, 8, &r) < 0)
                return 1;
        wait_done(&r);
        wait_done(&p);

        printf("reactive alone:         first kernel after %6.1f ms, first token after %6.1f ms\n",
               alone.st.queue_wait_s * 1e3, alone.st.ttft_s * 1e3);
        printf("reactive during prefill: first kernel after %6.1f ms, first token after %6.1f ms\n",
               r.st.queue_wait_s * 1e3, r.st.ttft_s * 1e3);
        printf("proactive (%u prompt tokens): first token after %.2f s, preempted %u times\n",
               p.st.prompt_tokens, p.st.ttft_s, p.st.preemptions);
        axp_engine_free(e);
        unlink(path);
        rmdir(dir);
        return 0;
}
