/* SPDX-License-Identifier: MIT */
/* A synchronous driver of the HEG on one device: the plain way to run a prefill or a decode
 * step without the scheduler (the command line's generate/logits, tests). It issues exactly
 * the tasks the scheduler issues, in the same order. */
#pragma once

#include "device.h"
#include "heg/heg.h"

/* The tasks of a prefill of the seq's pending tokens, in order: EMBED (chunked), then per
 * layer K1 over chunks, K2, K3 over chunks (on a sliding-window layer K1 and K2 of each chunk
 * in turn, as its KV ring needs), then HEAD over the last token. chunk <= 0: one task per
 * kernel. Chunks longer than the seq's kv_span are refused. *ret is malloc'd. */
int axp_prefill_plan(axp_seq *s, int chunk, axp_task **ret, int *ret_n, axp_error *err);

/* Prefill n tokens (staged with axp_seq_begin here) and leave the last token's logits in
 * s->logits; the tokens are committed. */
int axp_forward_prefill(axp_device *d, axp_seq *s, const int32_t *tokens, int n, int chunk,
                        axp_error *err);

/* One decode step for n requests, one token each; logits in each seq. */
int axp_forward_decode(axp_device *d, axp_seq *const *seqs, const int32_t *tokens, int n,
                       axp_error *err);
