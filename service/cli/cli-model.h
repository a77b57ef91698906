/* SPDX-License-Identifier: MIT */
/* Shared by the subcommands that run a model in-process (generate, logits, tokenize). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "devices/device.h"
#include "model/model.h"

/* The prompt from -p TEXT or -f FILE (exactly one), which must be valid UTF-8. Returns 0 or
 * the exit status. */
int cli_prompt(const char *text, const char *file, char **ret, size_t *ret_len);
/* Load a model (and prepare the device `device` names, CPU threads n_threads, if ret_dev;
 * NULL: the CPU). Returns 0, 1 after a one-line message, or 2 for a malformed --device. */
int cli_load(const char *path, const char *device, int n_threads, axp_model **ret_model,
             axp_device **ret_dev);
/* Tokenize the prompt as --raw does: BOS as the vocab says, special-token text parsed. */
int cli_tokenize_raw(const axp_model *m, const char *text, size_t len, int32_t **ret, int *ret_n);
