/* SPDX-License-Identifier: MIT */
/* The forward pass as the math reads: one function per architecture family, top to bottom,
 * one token at a time over a KV cache, in double precision with plain loops over weights
 * dequantized by the tensor types' reference routines (kernels/types.h). Slow and plainly
 * correct: the kernels are checked against it (tests/unit/test-forward.c,
 * tests/conformance/), and `agentxpu logits --reference` prints what it computes. */
#pragma once

#include <stdint.h>

#include "base/util.h"
#include "model.h"

typedef struct axp_ref axp_ref;

/* A reference run of model m with a KV cache for n_ctx positions. Fails with -ENOTSUP for a
 * file whose tensors do not fit its architecture (q/k norms in a llama or qwen2 file, biases
 * in a qwen3 file), which the kernels would compute differently from llama.cpp. */
int axp_ref_new(const axp_model *m, int n_ctx, axp_ref **ret, axp_error *err);
void axp_ref_free(axp_ref *r);
static inline void axp_ref_freep(axp_ref **r) {
        axp_ref_free(*r);
}

/* Run token at the next position; if logits is not NULL, write its n_vocab logits there
 * (without, the LM head is skipped: prompt positions before the last need none). */
int axp_ref_step(axp_ref *r, int32_t token, double *logits, axp_error *err);

/* After axp_ref_step: the token's final hidden state through the output norm, n_embd doubles
 * (what an embedding pools, model/embedding.h). */
void axp_ref_normed(const axp_ref *r, double *out);

/* Run tokens[0..n) from position 0 and return the logits of positions first..n-1:
 * *ret holds (n - first) * n_vocab doubles, position first's first, malloc'd. */
int axp_ref_logits(const axp_model *m, const int32_t *tokens, int n, int first, double **ret,
                   axp_error *err);
