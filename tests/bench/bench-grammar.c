/* SPDX-License-Identifier: MIT */
/* The cost of constrained decoding per token on llama.cpp's Llama 3 vocabulary (128,256
 * tokens): answers under a JSON schema are generated from fresh random logits each step (a
 * random-weight model's), as axp_gen_next does it (sample; if the grammar refuses the token,
 * mask and sample again), and timed against sampling alone. Also the full mask's cost, which
 * a step pays when the grammar refuses the token drawn. Prints only.
 * Run: meson test -C build --benchmark --verbose bench-grammar */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/rng.h"
#include "model/grammar.h"
#include "model/sampler.h"
#include "tok-util.h"

static const char *SCHEMA =
        "{\"type\":\"object\",\"properties\":{"
        "\"title\":{\"type\":\"string\",\"maxLength\":40},"
        "\"body\":{\"type\":\"string\",\"maxLength\":200},"
        "\"kind\":{\"enum\":[\"summary\",\"reminder\",\"fix\",\"question\"]},"
        "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":12},\"maxItems\":4},"
        "\"score\":{\"type\":\"number\"}},\"required\":[\"title\",\"body\",\"kind\"]}";

/* A long bounded string (the cost of its first step grew with maxLength) and the monitor's
 * suggestion schema (service/monitor/suggestion.c, suggestion_schema(80, 400)). */
static const char *STRING_400 = "{\"type\":\"string\",\"maxLength\":400}";
static const char *SUGGESTION =
        "{\"type\":\"object\",\"properties\":{"
        "\"title\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":80},"
        "\"body\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":400},"
        "\"kind\":{\"enum\":[\"summary\",\"explanation\",\"next-step\",\"warning\"]}},"
        "\"required\":[\"title\",\"body\",\"kind\"],\"additionalProperties\":false}";

/* The full mask at every step of `answers` answers under one schema (each a new matcher, as
 * each request has its own): the first step into a string (the first mask that allows more
 * than half the vocabulary, which only a free string's inside does), the worst step and where,
 * how many steps took over 1 ms, and the average. */
static int mask_steps(const char *name, const char *schema, const axp_vocab_trie *trie, int n, int answers,
                      axp_rng *rng) {
        axp_error err = {};
        _cleanup_free_ char *gbnf = NULL;
        axp_grammar *g = NULL;
        double t0 = axp_now();
        if (axp_json_schema_to_gbnf(schema, strlen(schema), &gbnf, &err) < 0 ||
            axp_grammar_parse(gbnf, strlen(gbnf), &g, &err) < 0) {
                fprintf(stderr, "%s\n", err.msg);
                return -1;
        }
        double t_parse = axp_now() - t0;
        _cleanup_free_ float *logits = malloc(n * sizeof(float));
        _cleanup_free_ uint8_t *allowed = malloc(n);
        axp_sampler_params p;
        axp_sampler_params_default(&p);
        p.seed = 11;
        p.temperature = 0.8f;
        axp_sampler *s = axp_sampler_new(&p, n);
        printf("%s (grammar parsed in %.2f ms):\n", name, t_parse * 1e3);
        for (int a = 0; a < answers; a++) {
                axp_matcher *m = NULL;
                double first = 0, worst = 0, sum = 0;
                int steps = 0, first_at = -1, worst_at = 0, slow = 0;
                if (axp_matcher_new(g, trie, &m, &err) < 0)
                        return -1;
                for (; steps < 1000 && !axp_matcher_finished(m); steps++) {
                        double m0 = axp_now();
                        int k = axp_matcher_mask(m, allowed);
                        double dt = axp_now() - m0;
                        if (k == 0)
                                break;
                        for (int i = 0; i < n; i++)
                                logits[i] = allowed[i] ? (float) (axp_rng_uniform(rng) * 8.0 - 4.0) : -INFINITY;
                        int32_t id = axp_sampler_sample(s, logits);
                        axp_matcher_accept(m, id);
                        if (first_at < 0 && k > n / 2)
                                first = dt, first_at = steps;
                        if (dt > worst)
                                worst = dt, worst_at = steps;
                        slow += dt > 1e-3;
                        sum += dt;
                }
                axp_matcher_free(m);
                printf("  answer %d: %d steps; first step into a string %.2f ms (step %d); worst %.2f ms "
                       "(step %d); %d over 1 ms; average %.3f ms\n",
                       a + 1, steps, first * 1e3, first_at, worst * 1e3, worst_at, slow, steps ? sum / steps * 1e3 : 0);
        }
        axp_sampler_free(s);
        axp_grammar_free(g);
        return 0;
}

int main(int argc, char **argv) {
        _cleanup_free_ char *path = conformance_path("vocab/ggml-vocab-llama-bpe.gguf");
        loaded_vocab v;
        if (!path || vocab_open(path, &v) < 0) {
                printf("SKIP: no conformance vocabulary (AXP_CONFORMANCE_DIR)\n");
                return 77;
        }
        int n = axp_tokenizer_n_vocab(v.tok), answers = argc > 1 ? atoi(argv[1]) : 20;
        axp_error err = {};
        axp_vocab_trie *trie = NULL;
        double t0 = axp_now();
        if (axp_vocab_trie_new(v.tok, &trie, &err) < 0)
                return 1;
        printf("vocabulary: %d tokens; trie built once per model in %.1f ms\n", n, (axp_now() - t0) * 1e3);

        char *gbnf = NULL;
        axp_grammar *g = NULL;
        if (axp_json_schema_to_gbnf(SCHEMA, strlen(SCHEMA), &gbnf, &err) < 0 ||
            axp_grammar_parse(gbnf, strlen(gbnf), &g, &err) < 0) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
        }
        float *logits = malloc(n * sizeof(float)), *masked = malloc(n * sizeof(float));
        uint8_t *allowed = malloc(n);
        axp_rng rng;
        axp_rng_seed(&rng, 42);

        for (int greedy = 1; greedy >= 0; greedy--) {
                axp_sampler_params p;
                axp_sampler_params_default(&p);
                p.seed = 7;
                p.temperature = greedy ? 0 : 0.8f;
                axp_sampler *s = axp_sampler_new(&p, n);
                double t_sample = 0, t_grammar = 0, t_mask = 0, worst = 0;
                long tokens = 0, masks = 0;
                for (int a = 0; a < answers; a++) {
                        axp_matcher *m = NULL;
                        axp_matcher_new(g, trie, &m, &err);
                        for (int step = 0; step < 400 && !axp_matcher_finished(m); step++) {
                                for (int i = 0; i < n; i++)
                                        logits[i] = (float) (axp_rng_uniform(&rng) * 8.0 - 4.0);
                                double a0 = axp_now();
                                int32_t id = axp_sampler_sample(s, logits);
                                double a1 = axp_now();
                                if (!axp_matcher_allows(m, id)) {
                                        double m0 = axp_now();
                                        axp_matcher_mask(m, allowed);
                                        t_mask += axp_now() - m0;
                                        masks++;
                                        for (int i = 0; i < n; i++)
                                                masked[i] = allowed[i] ? logits[i] : -INFINITY;
                                        id = axp_sampler_sample(s, masked);
                                }
                                axp_matcher_accept(m, id);
                                double a2 = axp_now();
                                t_sample += a1 - a0;
                                t_grammar += a2 - a1;
                                worst = fmax(worst, a2 - a1);
                                tokens++;
                        }
                        axp_matcher_free(m);
                }
                printf("%s: %ld tokens in %d answers; sampling %.3f ms/token; grammar +%.3f ms/token "
                       "(worst step %.2f ms); %ld steps (%.0f%%) needed the full mask, %.3f ms each\n",
                       greedy ? "greedy" : "temperature 0.8", tokens, answers, t_sample / tokens * 1e3,
                       t_grammar / tokens * 1e3, worst * 1e3, masks, 100.0 * masks / tokens,
                       masks ? t_mask / masks * 1e3 : 0);
                axp_sampler_free(s);
        }
        if (mask_steps("string, maxLength 400", STRING_400, trie, n, 3, &rng) < 0 ||
            mask_steps("the monitor's suggestion schema", SUGGESTION, trie, n, 3, &rng) < 0)
                return 1;
        free(logits);
        free(masked);
        free(allowed);
        free(gbnf);
        axp_grammar_free(g);
        axp_vocab_trie_free(trie);
        vocab_close(&v);
        return 0;
}
