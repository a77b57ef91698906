/* SPDX-License-Identifier: MIT */
/* The host side of generating one request: sample from the logits, stream the text as whole
 * UTF-8 characters, watch for end-of-generation tokens, stop strings and the token limit.
 * The command line and the engine's scheduler both drive a request through this. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "grammar.h"
#include "model.h"
#include "sampler.h"
#include "tokenizer.h"

typedef enum axp_finish_reason {
        AXP_FINISH_STOP,      /* end of generation token or a stop string */
        AXP_FINISH_LENGTH,    /* max_tokens or the context limit */
        AXP_FINISH_CANCELLED,
        AXP_FINISH_ERROR,
} axp_finish_reason;

const char *axp_finish_reason_name(axp_finish_reason r);

/* Log-probabilities of the generated tokens (OpenAI's and Ollama's logprobs): each token's,
 * and those of the most likely tokens at its step, from the model's own distribution (the
 * log-softmax of the logits, before penalties, temperature, truncation or a grammar). */
#define AXP_LOGPROBS_MAX 20
typedef struct axp_logprob_alt {
        int32_t token;
        float logprob;
} axp_logprob_alt;

typedef struct axp_token_logprob {
        int32_t token;
        float logprob;
        uint32_t n_top;                     /* the most likely first; ties by token id */
        axp_logprob_alt top[AXP_LOGPROBS_MAX];
        uint64_t start, end;                /* its text: bytes start..end of the generated text */
} axp_token_logprob;

/* The n_top most likely of n logits (n_top <= AXP_LOGPROBS_MAX) and the log-probability of
 * `token` among them all, in *ret (start and end not set). NaN logits count as -inf. */
void axp_logprob_compute(const float *logits, int n, int32_t token, uint32_t n_top, axp_token_logprob *ret);

typedef struct axp_gen {
        const axp_model *model;
        axp_sampler *sampler;
        axp_detok detok;
        axp_stopper stopper;
        uint32_t max_tokens;
        uint32_t n_generated;
        bool done;
        axp_finish_reason reason;
        char error[192]; /* AXP_FINISH_ERROR from a step: why (else empty) */
        /* constrained decoding (NULL: none): the grammar, where the request is in it, and the
         * step's mask; a step samples as usual and computes the mask only when the grammar
         * refuses the token drawn, then draws again among the allowed tokens */
        axp_grammar *grammar;
        axp_matcher *matcher;
        uint8_t *allowed;
        float *masked;
        uint32_t n_masked;  /* steps that needed the mask */
        double mask_s;      /* time spent checking tokens and computing masks */
        /* text released so far but not yet taken by the caller */
        char *out;
        size_t out_len, out_cap;
        /* logprobs (axp_gen_want_logprobs): one record a generated token (end of generation
         * tokens have none), kept until the text it makes is released */
        bool logprobs;
        uint32_t top_logprobs;
        axp_token_logprob *lp;
        size_t n_lp, cap_lp;
        uint64_t text_total;     /* bytes of text the tokens made so far */
        uint64_t released_total; /* bytes of it released to out (the rest held or a stop string) */
} axp_gen;

/* The prompt's tokens feed the repetition penalty. */
int axp_gen_init(axp_gen *g, const axp_model *m, const axp_sampler_params *sp,
                 const char *const *stops, size_t n_stops, uint32_t max_tokens,
                 const int32_t *prompt, int n_prompt, axp_error *err);
void axp_gen_free(axp_gen *g);

/* Constrain the output to a grammar (GBNF-style text) or a JSON schema (text), at most one
 * of them (NULL: none). Call after axp_gen_init and before the first step. Errors (-EINVAL)
 * say what is wrong: invalid or unsupported input, or output that cannot fit in the token
 * limit. */
int axp_gen_constrain(axp_gen *g, const char *grammar, const char *json_schema, axp_error *err);

/* Record each generated token's log-probability and the `top` most likely alternatives at its
 * step (at most AXP_LOGPROBS_MAX). Call before the first step. */
void axp_gen_want_logprobs(axp_gen *g, uint32_t top);

/* How many of the first records in g->lp belong to text released so far (all of them once the
 * request is done; a stop string's tokens have none) */
size_t axp_gen_logprobs_ready(const axp_gen *g);
/* The first n records taken */
void axp_gen_logprobs_drop(axp_gen *g, size_t n);

/* Choose the next token from logits and return it. If it ends the generation (end of
 * generation token, stop string, token limit), g->done is set and g->reason says why; else
 * the token is to be fed to the next decode step. Text released by this step is appended to
 * g->out. */
int32_t axp_gen_next(axp_gen *g, const float *logits);

/* The request cannot continue (context full, cancelled, error): flush held text. */
void axp_gen_finish(axp_gen *g, axp_finish_reason reason);
