/* SPDX-License-Identifier: MIT */
/* Sampler and stop strings. Draws use fixed seeds, so frequencies are exact reruns, not
 * chance. */
#include <math.h>
#include <string.h>

#include "model/generate.h"
#include "model/sampler.h"
#include "test.h"
#include "base/util.h"

static axp_sampler_params params(float temperature, int top_k, float top_p, float min_p,
                                 uint64_t seed) {
        axp_sampler_params p;
        axp_sampler_params_default(&p);
        p.temperature = temperature;
        p.top_k = top_k;
        p.top_p = top_p;
        p.min_p = min_p;
        p.seed = seed;
        return p;
}

/* Logits whose softmax is 0.5, 0.3, 0.15, 0.05. */
static void four(float l[4]) {
        const float p[4] = { 0.5f, 0.3f, 0.15f, 0.05f };
        for (int i = 0; i < 4; i++)
                l[i] = logf(p[i]);
}

static void draw(axp_sampler *s, const float *logits, int n_draws, int *counts, int n_vocab) {
        memset(counts, 0, n_vocab * sizeof(int));
        for (int i = 0; i < n_draws; i++) {
                int32_t id = axp_sampler_sample(s, logits);
                CHECK(id >= 0 && id < n_vocab);
                if (id >= 0 && id < n_vocab)
                        counts[id]++;
        }
}

static void test_defaults(void) {
        axp_sampler_params a, b;
        axp_sampler_params_default(&a);
        axp_sampler_params_default(&b);
        CHECK_NEAR(a.temperature, 0.8, 1e-6);
        CHECK_EQ_INT(a.top_k, 40);
        CHECK_NEAR(a.top_p, 0.95, 1e-6);
        CHECK_NEAR(a.min_p, 0.05, 1e-6);
        CHECK_NEAR(a.repeat_penalty, 1.0, 0);
        CHECK_EQ_INT(a.repeat_last_n, 64);
        CHECK(a.seed != b.seed); /* a fresh random seed each time */
        CHECK(axp_sampler_new(&a, 0) == NULL);
}

static void test_greedy(void) {
        axp_sampler_params p = params(0, 0, 1, 0, 1);
        axp_sampler *s = axp_sampler_new(&p, 8);
        float l[8] = { 0.1f, -2, 0.5f, 3, 1, 2, -1, 3 };
        CHECK_EQ_INT(axp_sampler_sample(s, l), 3); /* tie between 3 and 7: lowest id */
        l[3] = NAN;
        CHECK_EQ_INT(axp_sampler_sample(s, l), 7);
        for (int i = 0; i < 8; i++)
                l[i] = -INFINITY;
        CHECK_EQ_INT(axp_sampler_sample(s, l), 0);
        axp_sampler_free(s);

        /* top-k 1 is greedy at any temperature */
        p = params(1.5f, 1, 1, 0, 7);
        s = axp_sampler_new(&p, 4);
        float f[4];
        four(f);
        int counts[4];
        draw(s, f, 200, counts, 4);
        CHECK_EQ_INT(counts[0], 200);
        axp_sampler_free(s);

        /* NaN logits are never drawn, with or without top-k */
        f[1] = NAN;
        for (int k = 0; k <= 2; k += 2) {
                p = params(1, k, 1, 0, 9);
                s = axp_sampler_new(&p, 4);
                draw(s, f, 500, counts, 4);
                CHECK_EQ_INT(counts[1], 0);
                CHECK(counts[0] > 0 && counts[2] > 0);
                axp_sampler_free(s);
        }
}

static void test_distribution(void) {
        float l[4];
        int counts[4];
        four(l);

        axp_sampler_params p = params(1, 0, 1, 0, 42);
        axp_sampler *s = axp_sampler_new(&p, 4);
        draw(s, l, 20000, counts, 4);
        CHECK_NEAR(counts[0] / 20000.0, 0.5, 0.02);
        CHECK_NEAR(counts[1] / 20000.0, 0.3, 0.02);
        CHECK_NEAR(counts[2] / 20000.0, 0.15, 0.02);
        CHECK_NEAR(counts[3] / 20000.0, 0.05, 0.01);
        axp_sampler_free(s);

        /* a low temperature sharpens towards the top token */
        p = params(0.1f, 0, 1, 0, 42);
        s = axp_sampler_new(&p, 4);
        draw(s, l, 2000, counts, 4);
        CHECK(counts[0] > 1980);
        axp_sampler_free(s);
}

static void test_seed(void) {
        float l[64];
        for (int i = 0; i < 64; i++)
                l[i] = 0.01f * i;
        axp_sampler_params p = params(1, 0, 1, 0, 1234);
        axp_sampler *a = axp_sampler_new(&p, 64), *b = axp_sampler_new(&p, 64);
        p.seed = 1235;
        axp_sampler *c = axp_sampler_new(&p, 64);
        int same_ab = 0, same_ac = 0;
        for (int i = 0; i < 100; i++) {
                int32_t x = axp_sampler_sample(a, l), y = axp_sampler_sample(b, l),
                        z = axp_sampler_sample(c, l);
                same_ab += x == y;
                same_ac += x == z;
        }
        CHECK_EQ_INT(same_ab, 100);
        CHECK(same_ac < 20);
        axp_sampler_free(a);
        axp_sampler_free(b);
        axp_sampler_free(c);
}

static void test_top_p_min_p(void) {
        float l[4];
        int counts[4];
        four(l);

        /* top-p 0.7: 0.5 + 0.3 reaches it, so only the first two */
        axp_sampler_params p = params(1, 0, 0.7f, 0, 5);
        axp_sampler *s = axp_sampler_new(&p, 4);
        draw(s, l, 4000, counts, 4);
        CHECK(counts[0] > 0 && counts[1] > 0);
        CHECK_EQ_INT(counts[2] + counts[3], 0);
        CHECK_NEAR(counts[0] / 4000.0, 0.5 / 0.8, 0.03);
        axp_sampler_free(s);

        /* top-p 0: the best alone */
        p = params(1, 0, 0, 0, 5);
        s = axp_sampler_new(&p, 4);
        draw(s, l, 400, counts, 4);
        CHECK_EQ_INT(counts[0], 400);
        axp_sampler_free(s);

        /* min-p 0.2: keeps p >= 0.1 (ids 0..2) */
        p = params(1, 0, 1, 0.2f, 5);
        s = axp_sampler_new(&p, 4);
        draw(s, l, 4000, counts, 4);
        CHECK(counts[0] > 0 && counts[1] > 0 && counts[2] > 0);
        CHECK_EQ_INT(counts[3], 0);
        axp_sampler_free(s);

        /* top-k 2 then top-p 0.9 over those two (0.5/0.8, 0.3/0.8): both stay */
        p = params(1, 2, 0.9f, 0, 5);
        s = axp_sampler_new(&p, 4);
        draw(s, l, 4000, counts, 4);
        CHECK(counts[0] > 0 && counts[1] > 0);
        CHECK_EQ_INT(counts[2] + counts[3], 0);
        axp_sampler_free(s);

        /* several candidates in one bucket of the top-p search: the order inside it counts */
        float close[5] = { -0.02f, 0, -0.03f, -0.01f, -5 };
        int c5[5];
        p = params(1, 0, 0.4f, 0, 5);
        s = axp_sampler_new(&p, 5);
        draw(s, close, 2000, c5, 5);
        CHECK(c5[1] > 0 && c5[3] > 0);
        CHECK_EQ_INT(c5[0] + c5[2] + c5[4], 0);
        axp_sampler_free(s);

        /* top-p 0: only the best */
        p = params(1, 0, 0, 0, 5);
        s = axp_sampler_new(&p, 4);
        draw(s, l, 100, counts, 4);
        CHECK_EQ_INT(counts[0], 100);
        axp_sampler_free(s);
}

/* OpenAI's penalties, as llama.cpp applies them: a recent token's logit less its count times
 * frequency_penalty and presence_penalty once, after repeat_penalty; negative values favour
 * what was said. */
static void test_frequency_and_presence_penalties(void) {
        float l[8] = { 0, 0, 0, 1.45f, 0, 2.0f, 0, 1.9f };
        const struct {
                float repeat, freq, presence;
                int want;
        } cases[] = {
                { 1, 0, 0, 5 },        /* off: 2.0 */
                { 1, 0.3f, 0.1f, 7 },  /* 5: 2.0 - 0.6 - 0.1 = 1.3; 7: 1.9 - 0.3 - 0.1 = 1.5; 3: 1.45 */
                { 1, 0, 0.6f, 3 },     /* 5: 1.4, 7: 1.3, 3: 1.45 */
                { 1, 0.3f, 0, 7 },     /* 5: 1.4, 7: 1.6 */
                { 1, -0.1f, 0, 5 },    /* 5: 2.2, 7: 2.0 */
                { 1.25f, 0.1f, 0, 3 }, /* 5: 1.6 - 0.2 = 1.4, 7: 1.52 - 0.1 = 1.42, 3: 1.45 */
        };
        for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
                axp_sampler_params p = params(0, 0, 1, 0, 1);
                p.repeat_penalty = cases[c].repeat;
                p.frequency_penalty = cases[c].freq;
                p.presence_penalty = cases[c].presence;
                axp_sampler *s = axp_sampler_new(&p, 8);
                axp_sampler_accept(s, 5);
                axp_sampler_accept(s, 7);
                axp_sampler_accept(s, 5);
                CHECK_EQ_INT(axp_sampler_sample(s, l), cases[c].want);
                /* twice: the counts are gone after each draw */
                CHECK_EQ_INT(axp_sampler_sample(s, l), cases[c].want);
                axp_sampler_free(s);
        }
}

static void test_repeat_penalty(void) {
        axp_sampler_params p = params(0, 0, 1, 0, 1);
        p.repeat_penalty = 1.5f;
        p.repeat_last_n = 2;
        axp_sampler *s = axp_sampler_new(&p, 8);
        float l[8] = { 2.0f, 1.9f, -1, -1, -1, -1, -1, -1.2f };
        float copy[8];
        memcpy(copy, l, sizeof(l));
        CHECK_EQ_INT(axp_sampler_sample(s, l), 0);
        axp_sampler_accept(s, 0);
        axp_sampler_accept(s, 0); /* counted once: 2.0 / 1.5, not / 2.25 */
        CHECK_EQ_INT(axp_sampler_sample(s, l), 1);
        CHECK(memcmp(l, copy, sizeof(l)) == 0); /* the caller's logits are left alone */
        axp_sampler_accept(s, 1);
        /* window of 2 is {0, 1}: 2.0/1.5 = 1.33 beats 1.9/1.5 = 1.27 */
        CHECK_EQ_INT(axp_sampler_sample(s, l), 0);
        axp_sampler_accept(s, 5);
        axp_sampler_accept(s, 6); /* 0 and 1 fall out of the window */
        CHECK_EQ_INT(axp_sampler_sample(s, l), 0);
        /* negative logits are pushed further down */
        l[0] = l[1] = -5;
        axp_sampler_accept(s, 2);
        axp_sampler_accept(s, 3);
        CHECK_EQ_INT(axp_sampler_sample(s, l), 4); /* -1 beats -1.5 (2, 3) and -1.2 (7) */
        axp_sampler_accept(s, -1);                 /* ignored */
        axp_sampler_accept(s, 1000);
        axp_sampler_free(s);
}

static int cmp_desc(const void *a, const void *b) {
        float x = *(const float *) a, y = *(const float *) b;
        return (x < y) - (x > y);
}

/* A 150k vocabulary: the draw stays inside the filters. */
static void test_large_vocab(void) {
        const int n = 151936;
        float *l = malloc(n * sizeof(float));
        uint64_t x = 99;
        for (int i = 0; i < n; i++) {
                x = x * 6364136223846793005ull + 1442695040888963407ull;
                l[i] = (float) ((x >> 40) % 100000) / 10000.0f; /* 0 .. 10 */
        }
        /* the 40th best logit */
        float *sorted = malloc(n * sizeof(float));
        memcpy(sorted, l, n * sizeof(float));
        for (int k = 0; k < 40; k++) {
                int best = k;
                for (int i = k + 1; i < n; i++)
                        if (sorted[i] > sorted[best])
                                best = i;
                float t = sorted[k];
                sorted[k] = sorted[best];
                sorted[best] = t;
        }
        axp_sampler_params p = params(1, 40, 0.95f, 0.05f, 3);
        axp_sampler *s = axp_sampler_new(&p, n);
        for (int i = 0; i < 50; i++) {
                int32_t id = axp_sampler_sample(s, l);
                CHECK(id >= 0 && id < n && l[id] >= sorted[39]);
        }
        axp_sampler_free(s);

        /* no top-k: min-p alone (p >= 0.5 * p_max means logit >= max - 0.69) */
        p = params(1, 0, 1, 0.5f, 3);
        s = axp_sampler_new(&p, n);
        for (int i = 0; i < 50; i++) {
                int32_t id = axp_sampler_sample(s, l);
                CHECK(id >= 0 && id < n && l[id] >= sorted[0] - 0.7f);
        }
        axp_sampler_free(s);

        /* top-p alone over everything: the nucleus by brute force (sorted softmax) */
        double z = 0, cum = 0;
        for (int i = 0; i < n; i++)
                z += exp(l[i] - sorted[0]);
        float *all = malloc(n * sizeof(float));
        memcpy(all, l, n * sizeof(float));
        qsort(all, n, sizeof(float), cmp_desc);
        float cut = all[0];
        for (int i = 0; i < n && cum < 0.5 * z; i++) {
                cum += exp(all[i] - sorted[0]);
                cut = all[i];
        }
        free(all);
        p = params(1, 0, 0.5f, 0, 3);
        s = axp_sampler_new(&p, n);
        for (int i = 0; i < 200; i++) {
                int32_t id = axp_sampler_sample(s, l);
                CHECK(id >= 0 && id < n && l[id] >= cut);
        }
        axp_sampler_free(s);
        p = params(1, 0, 1, 0, 3);
        s = axp_sampler_new(&p, n);
        for (int i = 0; i < 20; i++) {
                int32_t id = axp_sampler_sample(s, l);
                CHECK(id >= 0 && id < n);
        }
        axp_sampler_free(s);
        free(sorted);
        free(l);
}

/* Stop strings ----------------------------------------------------------------------- */

typedef struct stream {
        axp_stopper st;
        char *out;
        size_t len, cap;
} stream;

static bool feed(stream *s, const char *text) {
        return axp_stopper_feed(&s->st, text, strlen(text), &s->out, &s->len, &s->cap);
}

static const char *released(stream *s) {
        return s->out ? s->out : "";
}

static void test_stopper(void) {
        const char *stops[] = { "</answer>", "\n\nUser:", "" };
        stream s = {};
        axp_stopper_init(&s.st, stops, 3);

        CHECK(!feed(&s, "Hello"));
        CHECK(strcmp(released(&s), "Hello") == 0);
        /* could be the start of a stop string: held back */
        CHECK(!feed(&s, " world</"));
        CHECK(strcmp(released(&s), "Hello world") == 0);
        /* it was not: released */
        CHECK(!feed(&s, "b>"));
        CHECK(strcmp(released(&s), "Hello world</b>") == 0);
        /* split across three pieces, then dropped with what follows */
        CHECK(!feed(&s, " </ans"));
        CHECK(!feed(&s, "wer"));
        CHECK(feed(&s, "> trailing"));
        CHECK(strcmp(released(&s), "Hello world</b> ") == 0);
        CHECK(s.st.stopped && s.st.matched == 0);
        CHECK(feed(&s, "more"));
        axp_stopper_flush(&s.st, &s.out, &s.len, &s.cap);
        CHECK(strcmp(released(&s), "Hello world</b> ") == 0);
        axp_stopper_done(&s.st);
        free(s.out);

        /* held text comes out at the end of generation */
        s = (stream) {};
        axp_stopper_init(&s.st, stops, 2);
        CHECK(!feed(&s, "a\n\nUse"));
        CHECK(strcmp(released(&s), "a") == 0);
        axp_stopper_flush(&s.st, &s.out, &s.len, &s.cap);
        CHECK(strcmp(released(&s), "a\n\nUse") == 0);
        axp_stopper_done(&s.st);
        free(s.out);

        /* the earliest stop wins; a stop at the very start releases nothing */
        const char *two[] = { "cd", "bc" };
        s = (stream) {};
        axp_stopper_init(&s.st, two, 2);
        CHECK(feed(&s, "abcd"));
        CHECK(strcmp(released(&s), "a") == 0);
        CHECK_EQ_INT(s.st.matched, 1); /* "bc", the one seen */
        axp_stopper_done(&s.st);
        free(s.out);
        s = (stream) {};
        axp_stopper_init(&s.st, two, 2);
        CHECK(feed(&s, "cd!"));
        CHECK(s.len == 0);
        CHECK_EQ_INT(s.st.matched, 0);
        axp_stopper_done(&s.st);
        free(s.out);

        /* no stop strings: everything passes */
        s = (stream) {};
        axp_stopper_init(&s.st, NULL, 0);
        CHECK(!feed(&s, "x</answer>"));
        CHECK(strcmp(released(&s), "x</answer>") == 0);
        axp_stopper_done(&s.st);
        free(s.out);
}

/* Log-probabilities: the log-softmax of the logits, the most likely tokens in order (ties by
 * token id), NaN and -inf as tokens no draw can take. */
static void test_logprobs(void) {
        float l[4];
        axp_token_logprob r;
        four(l);
        axp_logprob_compute(l, 4, 2, 3, &r);
        CHECK_EQ_INT(r.token, 2);
        CHECK(fabsf(r.logprob - logf(0.15f)) < 1e-6f);
        CHECK_EQ_INT(r.n_top, 3);
        const int order[3] = { 0, 1, 2 };
        const float p[3] = { 0.5f, 0.3f, 0.15f };
        for (int i = 0; i < 3; i++) {
                CHECK_EQ_INT(r.top[i].token, order[i]);
                CHECK(fabsf(r.top[i].logprob - logf(p[i])) < 1e-6f);
        }
        /* shifted logits, the same distribution; no alternatives asked for */
        for (int i = 0; i < 4; i++)
                l[i] += 1000;
        axp_logprob_compute(l, 4, 3, 0, &r);
        CHECK(fabsf(r.logprob - logf(0.05f)) < 1e-4f);
        CHECK_EQ_INT(r.n_top, 0);
        /* more asked for than there are tokens; ties by id; NaN and -inf last */
        float m[6] = { 1, NAN, 2, 1, -INFINITY, 2 };
        axp_logprob_compute(m, 6, 4, AXP_LOGPROBS_MAX + 5, &r);
        CHECK_EQ_INT(r.n_top, 6);
        const int want[6] = { 2, 5, 0, 3, 1, 4 };
        for (int i = 0; i < 6; i++)
                CHECK_MSG(r.top[i].token == want[i], "rank %d: token %d, not %d", i, r.top[i].token, want[i]);
        double z = log(2 * exp(2.0) + 2 * exp(1.0));
        CHECK(fabs(r.top[0].logprob - (2 - z)) < 1e-6 && fabs(r.top[2].logprob - (1 - z)) < 1e-6);
        CHECK(isinf(r.logprob) && r.logprob < 0 && isinf(r.top[5].logprob) && isinf(r.top[4].logprob));
        /* a large vocabulary: the top 20 of 50000 in order, the same as a full sort gives */
        enum { N = 50000 };
        static float big[N];
        uint64_t x = 12345;
        for (int i = 0; i < N; i++) {
                x = x * 6364136223846793005ull + 1442695040888963407ull;
                big[i] = (float) (x >> 40) / (1 << 20) - 8; /* repeats, so ties occur */
        }
        axp_logprob_compute(big, N, 7, AXP_LOGPROBS_MAX, &r);
        CHECK_EQ_INT(r.n_top, AXP_LOGPROBS_MAX);
        for (int i = 0; i < AXP_LOGPROBS_MAX; i++) {
                int32_t t = r.top[i].token;
                int above = 0;
                for (int j = 0; j < N; j++)
                        above += big[j] > big[t] || (big[j] == big[t] && j < t);
                CHECK_MSG(above == i, "rank %d holds a token with %d above it", i, above);
        }
        double sum = 0;
        for (int i = 0; i < N; i++)
                sum += exp(big[i] - big[r.top[0].token]);
        CHECK(fabs(r.logprob - (big[7] - big[r.top[0].token] - log(sum))) < 1e-4);
}

int main(void) {
        RUN(test_defaults);
        RUN(test_greedy);
        RUN(test_distribution);
        RUN(test_seed);
        RUN(test_top_p_min_p);
        RUN(test_repeat_penalty);
        RUN(test_frequency_and_presence_penalties);
        RUN(test_large_vocab);
        RUN(test_stopper);
        RUN(test_logprobs);
        TEST_EXIT();
}
