/* SPDX-License-Identifier: MIT */
/* Level Zero through its loader, opened with dlopen so the engine runs where it is absent:
 * device discovery (GPUs and NPUs, which Level Zero calls VPUs) and Sysman engine activity
 * for graphics protection. agentxpu runs no kernels through Level Zero.
 *
 * AXP_ZE_LOADER names another library to open instead of libze_loader.so.1 (tests use a
 * fake driver this way). */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "device.h"
#include "base/util.h"

typedef struct axp_ze axp_ze;

typedef struct axp_ze_device {
        char name[128];
        axp_dev_kind kind; /* igpu, dgpu, npu or other */
        uint32_t vendor_id, device_id;
        uint8_t uuid[16];
        uint64_t mem_bytes;
        int driver, index; /* driver index, device index within it */
        bool sysman;       /* Sysman engine activity is readable */
} axp_ze_device;

/* Load the loader and initialize the drivers. -ENOENT: no loader; a loader that finds no
 * driver gives a handle with 0 devices. Sets ZES_ENABLE_SYSMAN=1 unless the environment
 * already decides it (Sysman must be asked for before the first zeInit of the process). */
int axp_ze_open(axp_ze **ret, axp_error *err);
void axp_ze_close(axp_ze *z);
static inline void axp_ze_closep(axp_ze **z) {
        axp_ze_close(*z);
}

int axp_ze_n_devices(const axp_ze *z);
const axp_ze_device *axp_ze_device_get(const axp_ze *z, int i);

/* Microseconds the device's render engines were active, and the timestamp they were read at,
 * from Sysman (all render engines combined where the driver offers it, else the sum of
 * single render engines). -EOPNOTSUPP without Sysman or render engines. */
int axp_ze_render_activity(axp_ze *z, int i, uint64_t *ret_active_us, uint64_t *ret_timestamp_us);
