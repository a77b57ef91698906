/* SPDX-License-Identifier: MIT */
/* Embeddings (implemented in embedding.c): a prompt's tokens' final hidden states after the
 * model's output norm (llama.cpp's result_norm), pooled as the model or the request says, and
 * scaled to unit length where asked (as OpenAI's and Ollama's /api/embed answer, and
 * llama-server by default). Computed on the host from the residual stream a prefill leaves
 * (axp_seq.x), once the last layer has run over every token. */
#pragma once

#include <stdbool.h>

#include "base/util.h"
#include "model.h"

/* The pooling an embedding of model m gets: `asked` unless AXP_POOLING_MODEL, else the model's.
 * -ENOTSUP (one line in err) for a model whose pooling is not an embedding's (a reranker's). */
int axp_embedding_pooling(const axp_model *m, enum axp_pooling asked, enum axp_pooling *ret, axp_error *err);

/* out[n_embd]: the rows x[0..n) ([n][n_embd], the residual stream after the last layer),
 * each through the output norm, pooled by `pool` (not AXP_POOLING_MODEL or _OTHER), and
 * divided by its Euclidean length where normalize is set (a zero vector stays zero). n >= 1. */
void axp_embedding_pool(const axp_model *m, const float *x, int n, enum axp_pooling pool, bool normalize,
                        float *out);

/* The pooling's name ("mean", "cls", "last"), and the pooling a name stands for ("model" is
 * AXP_POOLING_MODEL; -EINVAL for another). */
const char *axp_pooling_name(enum axp_pooling p);
int axp_pooling_from_name(const char *name, enum axp_pooling *ret);
