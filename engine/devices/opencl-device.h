/* SPDX-License-Identifier: MIT */
/* The OpenCL backend (DESIGN §4): any OpenCL 1.2 device reached through the ICD loader (an
 * Intel iGPU with intel-opencl-icd, PoCL on the CPU in tests) runs every HEG kernel with the
 * kernels of kernels/opencl, built into the binary. Weights are used in place where the
 * device shares host memory, else uploaded once; KV caches and activations stay in the
 * request's host memory and are wrapped for each task. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "device.h"

typedef struct axp_opencl_info {
        int index;          /* flat over platforms, then devices: the N of "opencl:N" */
        char name[128];
        char platform[64];
        char version[96];   /* the device's OpenCL version string */
        axp_dev_kind kind;  /* igpu: a GPU sharing host memory; dgpu; cpu; other */
        uint64_t mem_bytes;
        uint64_t max_alloc;
        int compute_units;
        bool host_unified;
        bool fp16, fp64;
} axp_opencl_info;

/* Every device of every OpenCL platform. *ret is malloc'd (NULL with 0 devices). No loader
 * or no platform is not an error: 0 devices. */
int axp_opencl_list(axp_opencl_info **ret, int *ret_n, axp_error *err);

/* The device to use when none is named: an integrated GPU, else a discrete GPU, else the
 * first device. -1 if n is 0. */
int axp_opencl_best(const axp_opencl_info *l, int n);

/* Open device index of axp_opencl_list and build the kernels for it. */
int axp_opencl_device_new(int index, axp_device **ret, axp_error *err);

/* How the device reaches the model's weights after prepare: true if in place (host-unified
 * memory), false if uploaded. */
bool axp_opencl_weights_zero_copy(const axp_device *d);

/* Whether the device runs a mixture of experts' FFN itself after prepare (false: the model has
 * none, or it runs on the CPU, as the load message said). */
bool axp_opencl_moe_on_device(const axp_device *d);

/* For tests and benchmarks, on buffers of the call (not while the device runs a task):
 * Y = X W^T for n_tok rows of x (w->n_in floats each) into y (n_tok rows of w->n_out), with
 * the kernels of the HEG tasks, w uploaded for the call. With ret_seconds, the product runs
 * once untimed, then reps times; *ret_seconds is the mean time of one. */
int axp_opencl_matmul(axp_device *d, const axp_weight *w, const float *x, int n_tok, float *y,
                      int reps, double *ret_seconds, axp_error *err);
/* The activations the device makes of n_tok rows of k floats before a product with weights
 * of `type`: int8 values (ret_q, n_tok * k), block scales (ret_d, n_tok * k / 32 for Q8_0
 * or k / 256 for Q8_K) and sums (ret_s, n_tok * k / 32: int16 sums of 32 values for Q8_K,
 * llama.cpp's float Q8_1 sums for Q8_0) for integer types; the values as the product takes
 * them (ret_f, n_tok * k) for float types. */
int axp_opencl_act(axp_device *d, uint32_t type, const float *x, int n_tok, int k,
                   int8_t *ret_q, float *ret_d, void *ret_s, float *ret_f, axp_error *err);
