/* SPDX-License-Identifier: MIT */
/* What a GGUF model file is, told from its header alone: for installing a model from a file
 * descriptor (nothing mapped, nothing written) and for listing the models installed. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "base/util.h"

/* The most parts a split model has (model/gguf.h's GGUF_SPLIT_MAX) */
#define AXP_MODEL_PARTS_MAX 9999

typedef struct axp_model_info {
        char name[128];      /* general.name, "" if the file has none (cut at a character boundary) */
        char arch[32];       /* general.architecture */
        uint64_t parameters; /* elements of every tensor */
        uint64_t size;       /* bytes of the file (of every part of a split model) */
        uint32_t parts;      /* 1, or a split model's parts (axp_model_probe_path) */
        char types[128];     /* tensor types by count, most first: "Q8_0 28, F32 9" */
        /* the family of chat template the file carries ("llama3", "chatml", "gemma"...,
         * model/chat.h), "unrecognised" for one that none matches (prompts are used raw),
         * "" for none (the vocabulary then decides) */
        char chat_template[24];
} axp_model_info;

/* Check the GGUF file open at `fd` (a regular file, read with pread from offset 0, never
 * mapped: the file may change under us): its header (every count, key, tensor's type and
 * shape, and each tensor's extent against the file's size), an architecture the engine runs
 * (llama, qwen2, qwen3, qwen3moe, phi3, gemma2, gemma3, granite, smollm3, olmo2, exaone,
 * mistral3) and tensor types it computes with. `src` names the file in messages.
 * Returns 0, or a negative errno with a one-line message: -EBADMSG (not GGUF, truncated,
 * corrupt), -ENOTSUP (an architecture or type the engine cannot run), -EPROTONOSUPPORT (a
 * GGUF version it cannot read), or the error of reading. */
int axp_model_probe_fd(int fd, const char *src, axp_model_info *ret, axp_error *err);
/* The same checks of the model at `path`, mapped: a split model's first part brings in its
 * other parts (model/gguf.h), where axp_model_probe_fd refuses any part of one (-EXDEV: a
 * model is installed from one file). */
int axp_model_probe_path(const char *path, axp_model_info *ret, axp_error *err);
/* Which part of a split model the GGUF file open at fd is (0-based *no of *count), from its
 * header: 0 of 1 for a whole model. */
int axp_model_split_fd(int fd, const char *src, uint32_t *no, uint32_t *count, axp_error *err);
/* axp_model_probe_fd's checks of a split model given as its n parts' files, in order, with
 * gguf_join's of their places. */
int axp_model_probe_fds(const int *fds, uint32_t n, const char *src, axp_model_info *ret, axp_error *err);
/* A split model's parts (their files open at fds, in order) joined into one GGUF file at
 * path, written whole or not at all (as gguf_writer_write writes): its keys but the parts'
 * split.*, every part's tensors in order. progress (or NULL) hears of each read's bytes and
 * cancels the join (-ECANCELED) by returning false. */
int axp_model_join_fds(const int *fds, uint32_t n, const char *path, bool (*progress)(void *userdata, uint64_t bytes),
                       void *userdata, axp_error *err);

/* Load the model at `path` as the engine would (hyperparameters, every tensor's presence, type
 * and shape, the tokenizer), then free it. */
int axp_model_check_file(const char *path, axp_error *err);
