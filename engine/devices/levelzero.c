/* SPDX-License-Identifier: MIT */
/* Level Zero discovery and Sysman activity through a dlopen'ed loader. The headers give the
 * types; every entry point is looked up at run time. */
#include "levelzero.h"

#include <dlfcn.h>
#include <level_zero/ze_api.h>
#include <level_zero/zes_api.h>
#include <stdio.h>
#include <string.h>

typedef struct ze_fns {
        ze_result_t (*zeInit)(ze_init_flags_t);
        ze_result_t (*zeDriverGet)(uint32_t *, ze_driver_handle_t *);
        ze_result_t (*zeDeviceGet)(ze_driver_handle_t, uint32_t *, ze_device_handle_t *);
        ze_result_t (*zeDeviceGetProperties)(ze_device_handle_t, ze_device_properties_t *);
        ze_result_t (*zeDeviceGetMemoryProperties)(ze_device_handle_t, uint32_t *,
                                                   ze_device_memory_properties_t *);
        /* Sysman: optional */
        ze_result_t (*zesDeviceEnumEngineGroups)(zes_device_handle_t, uint32_t *,
                                                 zes_engine_handle_t *);
        ze_result_t (*zesEngineGetProperties)(zes_engine_handle_t, zes_engine_properties_t *);
        ze_result_t (*zesEngineGetActivity)(zes_engine_handle_t, zes_engine_stats_t *);
} ze_fns;

#define MAX_ENGINES 16

typedef struct ze_dev {
        axp_ze_device pub;
        ze_device_handle_t h;
        zes_engine_handle_t render[MAX_ENGINES]; /* one RENDER_ALL, or every RENDER_SINGLE */
        int n_render;
} ze_dev;

struct axp_ze {
        void *lib;
        ze_fns f;
        ze_dev *devs;
        int n_devs;
};

static void sysman_engines(axp_ze *z, ze_dev *d) {
        uint32_t n = 0;
        if (!z->f.zesDeviceEnumEngineGroups || !z->f.zesEngineGetProperties ||
            !z->f.zesEngineGetActivity)
                return;
        /* with ZES_ENABLE_SYSMAN=1 a core device handle is also a Sysman handle */
        zes_device_handle_t sh = (zes_device_handle_t) d->h;
        if (z->f.zesDeviceEnumEngineGroups(sh, &n, NULL) != ZE_RESULT_SUCCESS || n == 0)
                return;
        _cleanup_free_ zes_engine_handle_t *hs = calloc(n, sizeof(*hs));
        if (!hs || z->f.zesDeviceEnumEngineGroups(sh, &n, hs) != ZE_RESULT_SUCCESS)
                return;
        int all = -1;
        d->n_render = 0;
        for (uint32_t i = 0; i < n; i++) {
                zes_engine_properties_t p = { .stype = ZES_STRUCTURE_TYPE_ENGINE_PROPERTIES };
                if (z->f.zesEngineGetProperties(hs[i], &p) != ZE_RESULT_SUCCESS)
                        continue;
                if (p.type == ZES_ENGINE_GROUP_RENDER_ALL && all < 0)
                        all = (int) i;
                else if (p.type == ZES_ENGINE_GROUP_RENDER_SINGLE && d->n_render < MAX_ENGINES)
                        d->render[d->n_render++] = hs[i];
        }
        if (all >= 0) {
                d->render[0] = hs[all];
                d->n_render = 1;
        }
        d->pub.sysman = d->n_render > 0;
}

static axp_dev_kind kind_of(const ze_device_properties_t *p) {
        switch (p->type) {
        case ZE_DEVICE_TYPE_GPU:
                return p->flags & ZE_DEVICE_PROPERTY_FLAG_INTEGRATED ? AXP_DEV_IGPU : AXP_DEV_DGPU;
        case ZE_DEVICE_TYPE_VPU: return AXP_DEV_NPU;
        default: return AXP_DEV_OTHER;
        }
}

static int add_device(axp_ze *z, ze_device_handle_t h, int driver, int index) {
        ze_device_properties_t p = { .stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES };
        if (z->f.zeDeviceGetProperties(h, &p) != ZE_RESULT_SUCCESS)
                return 0; /* a device that will not describe itself is skipped */
        ze_dev *n = realloc(z->devs, (size_t) (z->n_devs + 1) * sizeof(ze_dev));
        if (!n)
                return -ENOMEM;
        z->devs = n;
        ze_dev *d = &z->devs[z->n_devs++];
        memset(d, 0, sizeof(*d));
        d->h = h;
        p.name[sizeof(p.name) - 1] = 0;
        snprintf(d->pub.name, sizeof(d->pub.name), "%.127s", p.name);
        d->pub.kind = kind_of(&p);
        d->pub.vendor_id = p.vendorId;
        d->pub.device_id = p.deviceId;
        memcpy(d->pub.uuid, p.uuid.id, sizeof(d->pub.uuid));
        d->pub.driver = driver;
        d->pub.index = index;

        uint32_t nm = 0;
        if (z->f.zeDeviceGetMemoryProperties(h, &nm, NULL) == ZE_RESULT_SUCCESS && nm > 0) {
                nm = MIN(nm, 8u);
                ze_device_memory_properties_t mp[8];
                for (uint32_t i = 0; i < nm; i++)
                        mp[i] = (ze_device_memory_properties_t) {
                                .stype = ZE_STRUCTURE_TYPE_DEVICE_MEMORY_PROPERTIES
                        };
                if (z->f.zeDeviceGetMemoryProperties(h, &nm, mp) == ZE_RESULT_SUCCESS)
                        for (uint32_t i = 0; i < nm && i < 8; i++)
                                d->pub.mem_bytes += mp[i].totalSize;
        }
        if (d->pub.kind == AXP_DEV_IGPU || d->pub.kind == AXP_DEV_DGPU)
                sysman_engines(z, d);
        return 0;
}

int axp_ze_open(axp_ze **ret, axp_error *err) {
        const char *path = getenv("AXP_ZE_LOADER");
        _cleanup_(axp_ze_closep) axp_ze *z = calloc(1, sizeof(*z));
        if (!z)
                return axp_errorf(err, -ENOMEM, "out of memory");
        z->lib = dlopen(path && *path ? path : "libze_loader.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!z->lib)
                return axp_errorf(err, -ENOENT, "Level Zero is not installed (%s)", dlerror());

        struct {
                void **slot;
                const char *name;
                bool required;
        } syms[] = {
                { (void **) &z->f.zeInit, "zeInit", true },
                { (void **) &z->f.zeDriverGet, "zeDriverGet", true },
                { (void **) &z->f.zeDeviceGet, "zeDeviceGet", true },
                { (void **) &z->f.zeDeviceGetProperties, "zeDeviceGetProperties", true },
                { (void **) &z->f.zeDeviceGetMemoryProperties, "zeDeviceGetMemoryProperties",
                  true },
                { (void **) &z->f.zesDeviceEnumEngineGroups, "zesDeviceEnumEngineGroups", false },
                { (void **) &z->f.zesEngineGetProperties, "zesEngineGetProperties", false },
                { (void **) &z->f.zesEngineGetActivity, "zesEngineGetActivity", false },
        };
        for (size_t i = 0; i < ELEMENTSOF(syms); i++) {
                *syms[i].slot = dlsym(z->lib, syms[i].name);
                if (!*syms[i].slot && syms[i].required)
                        return axp_errorf(err, -ENOENT, "the Level Zero loader lacks %s",
                                          syms[i].name);
        }

        setenv("ZES_ENABLE_SYSMAN", "1", 0);
        /* no driver: the loader fails zeInit (ZE_RESULT_ERROR_UNINITIALIZED): 0 devices */
        if (z->f.zeInit(0) != ZE_RESULT_SUCCESS) {
                *ret = TAKE_PTR(z);
                return 0;
        }
        uint32_t nd = 0;
        if (z->f.zeDriverGet(&nd, NULL) != ZE_RESULT_SUCCESS || nd == 0) {
                *ret = TAKE_PTR(z);
                return 0;
        }
        _cleanup_free_ ze_driver_handle_t *drv = calloc(nd, sizeof(*drv));
        if (!drv)
                return axp_errorf(err, -ENOMEM, "out of memory");
        if (z->f.zeDriverGet(&nd, drv) != ZE_RESULT_SUCCESS)
                nd = 0;
        for (uint32_t i = 0; i < nd; i++) {
                uint32_t n = 0;
                if (z->f.zeDeviceGet(drv[i], &n, NULL) != ZE_RESULT_SUCCESS || n == 0)
                        continue;
                _cleanup_free_ ze_device_handle_t *hs = calloc(n, sizeof(*hs));
                if (!hs)
                        return axp_errorf(err, -ENOMEM, "out of memory");
                if (z->f.zeDeviceGet(drv[i], &n, hs) != ZE_RESULT_SUCCESS)
                        continue;
                for (uint32_t j = 0; j < n; j++)
                        if (add_device(z, hs[j], (int) i, (int) j) < 0)
                                return axp_errorf(err, -ENOMEM, "out of memory");
        }
        *ret = TAKE_PTR(z);
        return 0;
}

void axp_ze_close(axp_ze *z) {
        if (!z)
                return;
        free(z->devs);
        /* the loader stays loaded: drivers keep threads and atexit handlers of their own */
        free(z);
}

int axp_ze_n_devices(const axp_ze *z) {
        return z ? z->n_devs : 0;
}

const axp_ze_device *axp_ze_device_get(const axp_ze *z, int i) {
        return z && i >= 0 && i < z->n_devs ? &z->devs[i].pub : NULL;
}

int axp_ze_render_activity(axp_ze *z, int i, uint64_t *ret_active_us, uint64_t *ret_timestamp_us) {
        if (!z || i < 0 || i >= z->n_devs)
                return -EINVAL;
        ze_dev *d = &z->devs[i];
        if (d->n_render == 0)
                return -EOPNOTSUPP;
        uint64_t active = 0, ts = 0;
        for (int k = 0; k < d->n_render; k++) {
                zes_engine_stats_t st = { 0 };
                if (z->f.zesEngineGetActivity(d->render[k], &st) != ZE_RESULT_SUCCESS)
                        return -EIO;
                active += st.activeTime;
                ts = MAX(ts, st.timestamp);
        }
        /* several single engines busy at once: report their mean, a fraction of one engine */
        *ret_active_us = active / (uint64_t) d->n_render;
        *ret_timestamp_us = ts;
        return 0;
}
