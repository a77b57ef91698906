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

/* Choose the next token from logits and return it. If it ends the generation (end of
 * generation token, stop string, token limit), g->done is set and g->reason says why; else
 * the token is to be fed to the next decode step. Text released by this step is appended to
 * g->out. */
int32_t axp_gen_next(axp_gen *g, const float *logits);

/* The request cannot continue (context full, cancelled, error): flush held text. */
void axp_gen_finish(axp_gen *g, axp_finish_reason reason);
