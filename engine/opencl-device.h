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
