/* SPDX-License-Identifier: MIT */
/* The CPU backend: every kernel of kernels/cpu on a thread pool. */
#pragma once

#include "device.h"

/* A thread pool of n_threads (0: one per core). */
int axp_cpu_device_new(int n_threads, axp_device **ret, axp_error *err);
