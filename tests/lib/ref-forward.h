/* SPDX-License-Identifier: MIT */
/* A slow, obviously-correct forward pass in double precision, written from the model
 * definition alone (plain loops over dequantized weights), to check the engine's kernels. */
#pragma once

#include "model/model.h"

/* Logits for every position of tokens[0..n) (out: n * n_vocab doubles, malloc'd). */
int ref_forward(const axp_model *m, const int32_t *tokens, int n, double **ret_logits);
