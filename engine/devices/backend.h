/* SPDX-License-Identifier: MIT */
/* What a device backend implements (the CPU, OpenCL, Level Zero and the simulator's virtual
 * devices): a small ops table and the device's common fields. Only backends include this;
 * everyone else uses the accessors of device.h. */
#pragma once

#include "device.h"

typedef struct axp_device_ops {
        const char *backend; /* "cpu", "opencl", "levelzero", "sim" */
        /* Map or upload the model's weights for this device. */
        int (*prepare)(axp_device *d, axp_model *m, axp_error *err);
        /* Run one task to completion on the calling thread (the device's executor). */
        int (*run)(axp_device *d, const axp_task *t, axp_error *err);
        void (*free)(axp_device *d);
        /* Optional: the kernel thread ids of the helper threads that run the device's work
         * besides its executor (a CPU's thread pool), as axp_device_threads() describes. */
        int (*threads)(axp_device *d, int *ret, int cap);
} axp_device_ops;

struct axp_device {
        const axp_device_ops *ops;
        char name[128];
        axp_dev_kind kind;
        uint64_t mem_bytes;
        bool can_run;       /* false: discovered but unable to run our kernels (listed only) */
        char why_not[160];  /* if !can_run: why */
        axp_calib calib;
        void *priv;
};
