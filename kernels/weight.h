/* SPDX-License-Identifier: MIT */
/* The weight descriptor the kernels compute with: a tensor's type, shape and rows. The
 * engine fills it from a model file; the kernels read it and nothing else of the model. */
#pragma once

#include <stdint.h>

/* A weight matrix [n_out rows][n_in] (GGUF ne = {n_in, n_out}), or a vector (n_out = 1). */
typedef struct axp_weight {
        const char *name; /* owned by the model */
        uint32_t type;
        int64_t n_in;
        int64_t n_out;
        uint64_t row_bytes;
        const void *data;  /* row r at data + r * row_bytes */
        void *priv;        /* backend-prepared copy (repacked, uploaded), owned by the backend */
} axp_weight;
