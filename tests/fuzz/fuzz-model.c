/* SPDX-License-Identifier: MIT */
/* libFuzzer target: the model loader on arbitrary bytes. The bytes are written to a memfd
 * and loaded through its /proc/self/fd path with axp_model_load() itself, so every check a
 * model file meets on its way in runs here: the GGUF reader, the architecture's
 * hyperparameters (heads, experts, sliding window, RoPE), every tensor's presence, type and
 * shape, and the tokenizer. A refusal must be a one-line message; a model that loads must
 * have every weight's rows inside the file (or in a copy of its own, which AddressSanitizer
 * watches), so no forward pass could read past what the file holds. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "model/model.h"
#include "model/tokenizer.h"

static volatile uint64_t sink;

/* The weight's rows are inside the file's map, or a buffer of the loader's own (read in
 * full, first and last byte, so that AddressSanitizer sees a short allocation). */
static uint64_t check_weight(const axp_model *m, const axp_weight *w) {
        const uint8_t *map = m->gguf->map, *p = w->data;
        if (!p)
                return 0;
        uint64_t n = w->row_bytes * (uint64_t) w->n_out;
        if (w->n_in <= 0 || w->n_out <= 0 || w->row_bytes == 0)
                __builtin_trap();
        if (p >= map && p < map + m->gguf->size) {
                if (n > (uint64_t) (map + m->gguf->size - p))
                        __builtin_trap();
        }
        return p[0] + p[n - 1];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static int fd = -1;
        static char path[64];
        axp_model *m = NULL;
        axp_error err = { 0 };
        uint64_t h = 0;

        if (fd < 0) {
                fd = memfd_create("fuzz-model", MFD_CLOEXEC);
                if (fd < 0)
                        __builtin_trap();
                snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        }
        if (ftruncate(fd, 0) < 0 || (size && pwrite(fd, data, size, 0) != (ssize_t) size))
                __builtin_trap();

        if (axp_model_load(path, &m, &err) < 0) {
                /* a one-line message, always */
                if (!err.msg[0] || strchr(err.msg, '\n'))
                        __builtin_trap();
                return 0;
        }
        const axp_hparams *hp = &m->hp;
        if (hp->n_layer <= 0 || hp->n_embd <= 0 || hp->n_head <= 0 || hp->n_head_kv <= 0 ||
            hp->n_head % hp->n_head_kv != 0 || hp->head_dim <= 0 || hp->n_vocab <= 0 ||
            hp->rope_dim > hp->head_dim ||
            (hp->n_expert > 0 && (hp->n_expert_used <= 0 || hp->n_expert_used > hp->n_expert ||
                                  hp->n_expert > AXP_MAX_EXPERTS)))
                __builtin_trap();
        h += check_weight(m, &m->tok_embd) + check_weight(m, &m->output) +
             check_weight(m, &m->output_norm) + check_weight(m, &m->rope_freqs) +
             check_weight(m, &m->rope_long) + check_weight(m, &m->rope_short);
        for (int l = 0; l < hp->n_layer; l++) {
                const axp_layer *L = &m->layers[l];
                const axp_weight *ws[] = { &L->attn_norm, &L->wq, &L->wk, &L->wv, &L->wo,
                                           &L->bq, &L->bk, &L->bv, &L->q_norm, &L->k_norm,
                                           &L->ffn_norm, &L->w_gate, &L->w_up, &L->w_down,
                                           &L->post_attn_norm, &L->post_ffn_norm, &L->ffn_router };
                for (size_t i = 0; i < sizeof(ws) / sizeof(ws[0]); i++)
                        h += check_weight(m, ws[i]);
                for (int e = 0; L->exp_gate && e < hp->n_expert; e++)
                        h += check_weight(m, &L->exp_gate[e]) + check_weight(m, &L->exp_up[e]) +
                             check_weight(m, &L->exp_down[e]);
        }
        h += axp_model_weight_bytes(m);
        /* the loaded vocabulary reads a short text both ways */
        int32_t *toks = NULL;
        int n = 0;
        if (axp_tokenize(m->tok, "Hello, world 12", 15, 0, &toks, &n, &err) == 0) {
                char piece[256];
                for (int i = 0; i < n; i++) {
                        if (toks[i] < 0 || toks[i] >= hp->n_vocab)
                                __builtin_trap();
                        h += (uint64_t) axp_token_to_piece(m->tok, toks[i], true, piece, sizeof(piece));
                }
        } else if (!err.msg[0] || strchr(err.msg, '\n')) {
                __builtin_trap();
        }
        free(toks);
        sink = h + (uint64_t) n;
        axp_model_free(m);
        return 0;
}
