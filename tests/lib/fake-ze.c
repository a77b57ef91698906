/* SPDX-License-Identifier: MIT */
/* A fake Level Zero loader with one driver, for tests: opened through AXP_ZE_LOADER in place
 * of libze_loader.so.1. It offers the devices of a Core Ultra laptop -- an integrated Arc GPU
 * whose Sysman render activity advances 100 ms per read at the busy fraction in
 * AXP_FAKE_ZE_BUSY (default 0.25), and an AI Boost NPU (a VPU) -- or, with
 * AXP_FAKE_ZE_DEVICES=none, no driver at all; =npu leaves the GPU out. */
#include <level_zero/ze_api.h>
#include <level_zero/zes_api.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef struct fake_dev {
        const char *name;
        ze_device_type_t type;
        uint32_t device_id;
        uint64_t mem;
        bool integrated;
} fake_dev;

static const fake_dev devs[] = {
        { "Intel(R) Arc(TM) Graphics", ZE_DEVICE_TYPE_GPU, 0x7d55, 15ull << 30, true },
        { "Intel(R) AI Boost", ZE_DEVICE_TYPE_VPU, 0x7d1d, 15ull << 30, true },
};

/* Engine groups of the GPU: everything, all render engines, one compute engine. */
static const zes_engine_group_t groups[] = { ZES_ENGINE_GROUP_ALL, ZES_ENGINE_GROUP_RENDER_ALL,
                                             ZES_ENGINE_GROUP_COMPUTE_ALL };
static uint64_t reads[3], active[3];

static int driver_token, engine_tokens[3];

static const char *mode(void) {
        const char *m = getenv("AXP_FAKE_ZE_DEVICES");
        return m ? m : "all";
}

static int first_dev(void) {
        return strcmp(mode(), "npu") == 0 ? 1 : 0;
}

EXPORT ze_result_t zeInit(ze_init_flags_t flags) {
        return strcmp(mode(), "none") == 0 ? ZE_RESULT_ERROR_UNINITIALIZED : ZE_RESULT_SUCCESS;
}

EXPORT ze_result_t zeDriverGet(uint32_t *count, ze_driver_handle_t *drivers) {
        if (strcmp(mode(), "none") == 0) {
                *count = 0;
                return ZE_RESULT_SUCCESS;
        }
        if (drivers && *count >= 1)
                drivers[0] = (ze_driver_handle_t) &driver_token;
        *count = 1;
        return ZE_RESULT_SUCCESS;
}

EXPORT ze_result_t zeDeviceGet(ze_driver_handle_t drv, uint32_t *count, ze_device_handle_t *out) {
        if (drv != (ze_driver_handle_t) &driver_token)
                return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
        uint32_t n = (uint32_t) (2 - first_dev());
        for (uint32_t i = 0; out && i < n && i < *count; i++)
                out[i] = (ze_device_handle_t) &devs[first_dev() + i];
        *count = n;
        return ZE_RESULT_SUCCESS;
}

static const fake_dev *dev_of(void *h) {
        for (size_t i = 0; i < 2; i++)
                if (h == (void *) &devs[i])
                        return &devs[i];
        return NULL;
}

EXPORT ze_result_t zeDeviceGetProperties(ze_device_handle_t h, ze_device_properties_t *p) {
        const fake_dev *d = dev_of(h);
        if (!d || !p || p->stype != ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES)
                return ZE_RESULT_ERROR_INVALID_ARGUMENT;
        p->type = d->type;
        p->vendorId = 0x8086;
        p->deviceId = d->device_id;
        p->flags = d->integrated ? ZE_DEVICE_PROPERTY_FLAG_INTEGRATED : 0;
        memset(p->uuid.id, 0, sizeof(p->uuid.id));
        p->uuid.id[0] = (uint8_t) (d - devs + 1);
        snprintf(p->name, sizeof(p->name), "%s", d->name);
        return ZE_RESULT_SUCCESS;
}

EXPORT ze_result_t zeDeviceGetMemoryProperties(ze_device_handle_t h, uint32_t *count,
                                               ze_device_memory_properties_t *p) {
        const fake_dev *d = dev_of(h);
        if (!d)
                return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
        if (p && *count >= 1)
                p[0].totalSize = d->mem;
        *count = 1;
        return ZE_RESULT_SUCCESS;
}

EXPORT ze_result_t zesDeviceEnumEngineGroups(zes_device_handle_t h, uint32_t *count,
                                             zes_engine_handle_t *out) {
        const fake_dev *d = dev_of(h);
        if (!d)
                return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
        /* Sysman is on only when asked for before zeInit, as with the real loader */
        const char *sys = getenv("ZES_ENABLE_SYSMAN");
        if (!sys || strcmp(sys, "1") != 0)
                return ZE_RESULT_ERROR_UNINITIALIZED;
        uint32_t n = d->type == ZE_DEVICE_TYPE_GPU ? 3 : 0;
        for (uint32_t i = 0; out && i < n && i < *count; i++)
                out[i] = (zes_engine_handle_t) &engine_tokens[i];
        *count = n;
        return ZE_RESULT_SUCCESS;
}

static int engine_index(zes_engine_handle_t h) {
        for (int i = 0; i < 3; i++)
                if (h == (zes_engine_handle_t) &engine_tokens[i])
                        return i;
        return -1;
}

EXPORT ze_result_t zesEngineGetProperties(zes_engine_handle_t h, zes_engine_properties_t *p) {
        int i = engine_index(h);
        if (i < 0)
                return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
        p->type = groups[i];
        p->onSubdevice = 0;
        p->subdeviceId = 0;
        return ZE_RESULT_SUCCESS;
}

EXPORT ze_result_t zesEngineGetActivity(zes_engine_handle_t h, zes_engine_stats_t *s) {
        int i = engine_index(h);
        if (i < 0)
                return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
        const char *b = getenv("AXP_FAKE_ZE_BUSY");
        double busy = b ? atof(b) : 0.25;
        reads[i]++;
        active[i] += (uint64_t) (100000 * busy);
        s->timestamp = 1000000 + reads[i] * 100000;
        s->activeTime = active[i];
        return ZE_RESULT_SUCCESS;
}
