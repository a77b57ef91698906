/* SPDX-License-Identifier: MIT */
/* Two-point roofline calibration of a real device (Agent.xpu appendix A, DESIGN §3): a short
 * micro-benchmark that runs the loaded model's own kernels -- a compute-bound chunk of K3, a
 * memory-bound decode-shaped K3 over every layer, and an attention kernel -- and turns the
 * times into an axp_calib. Results are cached in a small text file, keyed by device and
 * weight type, so that start-up measures once. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "device.h"
#include "heg/cost.h"
#include "heg/heg.h"
#include "model/model.h"

/* The device must have the model prepared. Takes well under a second on a CPU for a 1B
 * model; the compute anchor uses up to 256 tokens. */
int axp_calib_measure(axp_device *d, const axp_model *m, axp_calib *ret, axp_error *err);

/* The cache key of a device running a model's weights: backend, device name, weight type. */
void axp_calib_key(const axp_device *d, const axp_model *m, char *buf, size_t size);

/* -ENOENT if the file or the key is absent; malformed lines are skipped. */
int axp_calib_cache_load(const char *path, const char *key, axp_calib *ret);
/* Add or replace the key's line (written to a temporary file, then renamed). */
int axp_calib_cache_store(const char *path, const char *key, const axp_calib *c, axp_error *err);

/* From the cache if there, else measured and stored (a cache that cannot be written is not
 * an error). path may be NULL: always measure. */
int axp_calib_get(axp_device *d, const axp_model *m, const char *path, axp_calib *ret,
                  axp_error *err);

/* Whether a discrete GPU that "auto" bound to the dynamic role keeps it for a model, given
 * both devices' calibrations for it: where it streams the model at least as fast as the CPU
 * (the memory anchor, one token through every layer's FFN with each task's overheads). Decode
 * runs on the dynamic role, and the OpenCL kernels, written for a GPU that shares memory with
 * the CPU, move each task's buffers across the bus: on an NVIDIA H200 decode ran slower than
 * on that machine's CPU. The engine and `agentxpu devices -m` both ask. */
bool axp_calib_gpu_keeps_dynamic(const axp_calib *gpu, const axp_calib *cpu);
