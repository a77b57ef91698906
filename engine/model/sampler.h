/* SPDX-License-Identifier: MIT */
/* Sampling on the host: greedy, temperature, top-k, top-p, min-p, repetition, frequency and
 * presence penalties, seed;
 * and stop strings over the streamed text. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct axp_sampler_params {
        float temperature;    /* <= 0: greedy (argmax, ties to the lowest id) */
        int top_k;            /* <= 0: off */
        float top_p;          /* >= 1: off */
        float min_p;          /* <= 0: off */
        float repeat_penalty; /* 1: off */
        /* OpenAI's penalties: a recent token's logit less frequency_penalty times its count
         * and presence_penalty once (after repeat_penalty, as llama.cpp); 0: off */
        float frequency_penalty;
        float presence_penalty;
        int repeat_last_n;    /* tokens looked back for the penalties (64 by default) */
        uint64_t seed;
} axp_sampler_params;

void axp_sampler_params_default(axp_sampler_params *p);

typedef struct axp_sampler axp_sampler;

axp_sampler *axp_sampler_new(const axp_sampler_params *p, int n_vocab);
void axp_sampler_free(axp_sampler *s);
/* Choose the next token from logits (not modified). */
int32_t axp_sampler_sample(axp_sampler *s, const float *logits);
/* Record a token (prompt or generated) for the repetition penalty. */
void axp_sampler_accept(axp_sampler *s, int32_t token);

/* Stop strings over streamed text: text that might be the start of a stop string is held
 * back until it is known not to be. */
typedef struct axp_stopper {
        char **stops;
        size_t n_stops;
        char *held;
        size_t n_held;
        bool stopped;
        int matched;    /* once stopped: which of stops was seen (the first listed of those
                           beginning at the same byte) */
} axp_stopper;

void axp_stopper_init(axp_stopper *s, const char *const *stops, size_t n);
void axp_stopper_done(axp_stopper *s);
/* Feed text; appends what may be released to *out. Returns true once a stop string is seen
 * (the stop string and what follows it are dropped). */
bool axp_stopper_feed(axp_stopper *s, const char *text, size_t len, char **out, size_t *out_len,
                      size_t *out_cap);
/* End of generation: release held text. */
void axp_stopper_flush(axp_stopper *s, char **out, size_t *out_len, size_t *out_cap);
