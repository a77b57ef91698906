/* SPDX-License-Identifier: MIT */
/* Sampler speed on a 151936-entry vocabulary for a few settings, and what a token's
 * log-probabilities cost (the option logprobs) on top. Prints only.
 * Run: meson test -C build --benchmark --verbose bench-sampler */
#include <stdio.h>
#include <stdlib.h>

#include "model/generate.h"
#include "model/sampler.h"
#include "base/util.h"

static void bench(const char *name, const float *logits, int n, axp_sampler_params p) {
        axp_sampler *s = axp_sampler_new(&p, n);
        for (int i = 0; i < 64; i++)
                axp_sampler_accept(s, i * 97);
        int reps = 0;
        double t0 = axp_now(), dt;
        do {
                axp_sampler_sample(s, logits);
                reps++;
        } while ((dt = axp_now() - t0) < 0.3);
        printf("%-44s %8.1f us/token\n", name, dt / reps * 1e6);
        axp_sampler_free(s);
}

static void bench_logprobs(const float *logits, int n, uint32_t top) {
        axp_token_logprob r;
        int reps = 0;
        double t0 = axp_now(), dt;
        do {
                axp_logprob_compute(logits, n, reps % n, top, &r);
                reps++;
        } while ((dt = axp_now() - t0) < 0.3);
        char name[64];
        snprintf(name, sizeof(name), "logprobs, %u alternatives", top);
        printf("%-44s %8.1f us/token\n", name, dt / reps * 1e6);
}

int main(void) {
        const int n = 151936;
        float *l = malloc(n * sizeof(float));
        uint64_t x = 1;
        for (int i = 0; i < n; i++) {
                x = x * 6364136223846793005ull + 1442695040888963407ull;
                l[i] = (float) ((x >> 40) % 200000) / 10000.0f - 10.0f;
        }
        axp_sampler_params p;
        axp_sampler_params_default(&p);
        p.seed = 1;
        bench("defaults (T 0.8, top-k 40, top-p .95, min-p .05)", l, n, p);
        p.repeat_penalty = 1.1f;
        bench("defaults + repeat penalty 1.1", l, n, p);
        p.repeat_penalty = 1;
        p.top_k = 0;
        bench("no top-k (top-p .95, min-p .05)", l, n, p);
        p.min_p = 0;
        bench("top-p .95 only", l, n, p);
        p.top_p = 1;
        bench("temperature only", l, n, p);
        p.temperature = 0;
        bench("greedy", l, n, p);
        bench_logprobs(l, n, 0);
        bench_logprobs(l, n, 5);
        bench_logprobs(l, n, 20);
        free(l);
        return 0;
}
