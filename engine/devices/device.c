/* SPDX-License-Identifier: MIT */
/* The device handle's accessors, over the backend's ops table. */
#include "backend.h"

const char *axp_dev_kind_name(axp_dev_kind k) {
        switch (k) {
        case AXP_DEV_CPU:
                return "cpu";
        case AXP_DEV_IGPU:
                return "igpu";
        case AXP_DEV_DGPU:
                return "dgpu";
        case AXP_DEV_NPU:
                return "npu";
        case AXP_DEV_OTHER:
                break;
        }
        return "other";
}

const char *axp_device_name(const axp_device *d) {
        return d->name;
}

axp_dev_kind axp_device_kind(const axp_device *d) {
        return d->kind;
}

const char *axp_device_backend(const axp_device *d) {
        return d->ops && d->ops->backend ? d->ops->backend : "?";
}

uint64_t axp_device_mem_bytes(const axp_device *d) {
        return d->mem_bytes;
}

bool axp_device_can_run(const axp_device *d, const char **ret_why) {
        if (ret_why)
                *ret_why = d->can_run ? "" : d->why_not;
        return d->can_run;
}

axp_calib *axp_device_calib(axp_device *d) {
        return &d->calib;
}

int axp_device_prepare(axp_device *d, axp_model *m, axp_error *err) {
        return d->ops->prepare ? d->ops->prepare(d, m, err) : 0;
}

int axp_device_run(axp_device *d, const axp_task *t, axp_error *err) {
        return d->ops->run(d, t, err);
}

int axp_device_threads(axp_device *d, int *ret, int cap) {
        return d->ops->threads ? d->ops->threads(d, ret, cap) : 0;
}

void axp_device_free(axp_device *d) {
        if (d && d->ops && d->ops->free)
                d->ops->free(d);
}
