/* SPDX-License-Identifier: MIT */
/* Requantizing a GGUF model (agentxpu quantize): every weight matrix of a readable file into
 * one tensor type, or into one of llama-quantize's mixes with its per-tensor choices. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "base/util.h"
#include "model/gguf.h"

/* llama.cpp's general.file_type (llama_ftype) of a file whose matrices are mostly `type`
 * (every matrix, for the K-quants the _S variant); -1 for types without one. */
int axp_file_type_of(uint32_t type);
/* The name llama.cpp gives a llama_ftype ("Q4_K_M"), NULL for one this table lacks. */
const char *axp_file_type_name(int ftype);

/* A target: a tensor type's name (q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, iq4_xs, q2_k, q3_k,
 * q4_k, q5_k, q6_k, f16, bf16, f32: every matrix in that type, as llama-quantize --pure), a
 * mix (Q3_K_M, Q4_K_M, Q5_K_M), any case, or keep: every tensor as it is (a split model's
 * parts joined into one file). */
typedef struct axp_quant_target {
        bool keep;          /* every tensor in its own type, general.file_type as it was */
        uint32_t base;      /* the type matrices get unless the mix says otherwise */
        int mix;            /* 0, or the mix's llama_ftype (12, 15, 17) */
        int file_type;      /* general.file_type to write */
        char name[16];      /* as given, upper case */
} axp_quant_target;

/* Parse a target; -EINVAL with a one-line message listing the accepted names. */
int axp_quant_target_parse(const char *name, axp_quant_target *ret, axp_error *err);

/* The type each tensor of `f` gets (types[i] for tensor i): its own where it is not a weight
 * matrix llama-quantize would quantize, else the target's choice with llama-quantize's
 * fallbacks for rows that are not a multiple of the type's block (Q2_K and Q3_K to Q4_0,
 * Q4_K to Q5_0, Q5_K to Q5_1, Q6_K to Q8_0, IQ4_XS to IQ4_NL, then F16). -ENOTSUP where a
 * matrix to convert has a type the engine cannot read. */
int axp_quant_plan(const gguf_file *f, const axp_quant_target *t, uint32_t *types, axp_error *err);

/* Write `out` from `in` (any GGUF the engine can read) for the target. The file appears
 * whole or not at all. n_threads <= 0: every CPU. */
int axp_quantize_file(const char *in, const char *out, const axp_quant_target *t, int n_threads,
                      axp_error *err);
