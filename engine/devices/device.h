/* SPDX-License-Identifier: MIT */
/* A compute device, an opaque handle (DESIGN §4). The scheduler never names a backend: it
 * binds devices to roles and hands them HEG tasks. Backends implement the ops table of
 * backend.h. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "heg/cost.h"
#include "heg/heg.h"
#include "model/model.h"
#include "base/util.h"

typedef enum axp_dev_kind {
        AXP_DEV_CPU,
        AXP_DEV_IGPU,
        AXP_DEV_DGPU,
        AXP_DEV_NPU,
        AXP_DEV_OTHER,
} axp_dev_kind;

typedef struct axp_device axp_device;

const char *axp_dev_kind_name(axp_dev_kind k);

/* What a caller may know of a device: what its properties say. */
const char *axp_device_name(const axp_device *d);
axp_dev_kind axp_device_kind(const axp_device *d);
const char *axp_device_backend(const axp_device *d); /* "cpu", "opencl", "levelzero", "sim" */
uint64_t axp_device_mem_bytes(const axp_device *d);
/* false: discovered but unable to run our kernels (listed only); *ret_why says why. */
bool axp_device_can_run(const axp_device *d, const char **ret_why);
/* The device's calibrated roofline, which the cost model and the scheduler use. */
axp_calib *axp_device_calib(axp_device *d);

/* Map or upload the model's weights for this device; m NULL releases what was prepared. */
int axp_device_prepare(axp_device *d, axp_model *m, axp_error *err);
/* Run one task to completion on the calling thread (the device's executor). */
int axp_device_run(axp_device *d, const axp_task *t, axp_error *err);

/* The kernel thread ids (gettid) of the threads that run the device's work besides the
 * executor calling axp_device_run (a CPU's pool workers), so that the executor can set their
 * scheduling class with its own: fills up to cap, returns how many there are (0: none). */
int axp_device_threads(axp_device *d, int *ret, int cap);

void axp_device_free(axp_device *d);
static inline void axp_device_freep(axp_device **d) {
        axp_device_free(*d);
}
