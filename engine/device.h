/* SPDX-License-Identifier: MIT */
/* A compute device behind a small vtable (DESIGN §4). The scheduler never names a backend:
 * it binds devices to roles and hands them HEG tasks. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "heg.h"
#include "model.h"
#include "util.h"

typedef enum axp_dev_kind {
        AXP_DEV_CPU,
        AXP_DEV_IGPU,
        AXP_DEV_DGPU,
        AXP_DEV_NPU,
        AXP_DEV_OTHER,
} axp_dev_kind;

typedef struct axp_device axp_device;

typedef struct axp_device_ops {
        const char *backend; /* "cpu", "opencl", "levelzero", "sim" */
        /* Map or upload the model's weights for this device. */
        int (*prepare)(axp_device *d, axp_model *m, axp_error *err);
        /* Run one task to completion on the calling thread (the device's executor). */
        int (*run)(axp_device *d, const axp_task *t, axp_error *err);
        void (*free)(axp_device *d);
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

const char *axp_dev_kind_name(axp_dev_kind k);

/* The CPU backend: a thread pool of n_threads (0: one per core). */
int axp_cpu_device_new(int n_threads, axp_device **ret, axp_error *err);
/* The CPU's memory: the machine's physical memory in bytes (0 if unknown). */
uint64_t axp_cpu_memory_bytes(void);

static inline void axp_device_free(axp_device *d) {
        if (d && d->ops && d->ops->free)
                d->ops->free(d);
}

static inline void axp_device_freep(axp_device **d) {
        axp_device_free(*d);
}
