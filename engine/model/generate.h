/* SPDX-License-Identifier: MIT */
/* The host side of generating one request: sample from the logits, stream the text as whole
 * UTF-8 characters, watch for end-of-generation tokens, stop strings and the token limit.
 * The command line and the engine's scheduler both drive a request through this. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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
        /* text released so far but not yet taken by the caller */
        char *out;
        size_t out_len, out_cap;
} axp_gen;

/* The prompt's tokens feed the repetition penalty. */
int axp_gen_init(axp_gen *g, const axp_model *m, const axp_sampler_params *sp,
                 const char *const *stops, size_t n_stops, uint32_t max_tokens,
                 const int32_t *prompt, int n_prompt, axp_error *err);
void axp_gen_free(axp_gen *g);

/* Choose the next token from logits and return it. If it ends the generation (end of
 * generation token, stop string, token limit), g->done is set and g->reason says why; else
 * the token is to be fed to the next decode step. Text released by this step is appended to
 * g->out. */
int32_t axp_gen_next(axp_gen *g, const float *logits);

/* The request cannot continue (context full, cancelled, error): flush held text. */
void axp_gen_finish(axp_gen *g, axp_finish_reason reason);
