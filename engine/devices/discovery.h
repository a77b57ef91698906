/* SPDX-License-Identifier: MIT */
/* Every device of every backend, the spec strings that name one, and the binding of the
 * scheduler's roles to devices (DESIGN §4).
 *
 * Specs, as the config and the command line take them:
 *   cpu        the CPU backend
 *   opencl     the best OpenCL device: an integrated GPU, else a discrete GPU, else the first
 *   opencl:N   OpenCL device N as `agentxpu devices` lists it
 *   npu        an NPU that runs agentxpu's kernels (none does yet: the CPU stands in)
 *   auto       static role: npu; dynamic role and a single device: the integrated GPU, or
 *              any GPU, through OpenCL, else the CPU */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "device.h"
#include "base/util.h"

typedef struct axp_dev_entry {
        char spec[24];       /* the spec that names exactly this device; "" if it runs nothing */
        const char *backend; /* "cpu", "opencl", "levelzero" */
        char name[128];
        axp_dev_kind kind;
        uint64_t mem_bytes;
        bool can_run;   /* runs agentxpu's kernels */
        char note[200]; /* what it offers, or why it runs nothing */
} axp_dev_entry;

typedef struct axp_discovery {
        axp_dev_entry *devs; /* the CPU first, then OpenCL, then Level Zero */
        int n;
        char opencl[160]; /* how the backend fared: "2 devices", "no platform", "not built" */
        char levelzero[160];
} axp_discovery;

/* Every device of every backend. Missing backends are not errors; they add no device and
 * say why in their status line. */
int axp_devices_discover(axp_discovery *ret, axp_error *err);
void axp_discovery_clear(axp_discovery *d);

/* -EINVAL with a message if spec is none of the forms above. */
int axp_device_spec_check(const char *spec, axp_error *err);
/* Whether spec is "auto" (NULL and "" are too). */
bool axp_device_spec_auto(const char *spec);

/* Open the device a spec names, for running every kernel of a model there (the command
 * line's --device). auto: as for the dynamic role. -ENODEV with a message if the spec names
 * no device that can run (no OpenCL device, no NPU that runs our kernels). */
int axp_device_open(const char *spec, int n_threads, axp_device **ret, axp_error *err);

typedef enum axp_role_id {
        AXP_ROLE_ID_STATIC,  /* static S_chk chunks: the NPU role */
        AXP_ROLE_ID_DYNAMIC, /* dynamic and decode kernels: the iGPU role */
} axp_role_id;

/* Which entry of a discovery each role would use: the spec's device, or the CPU (entry 0)
 * when it cannot run there. why (may be NULL) gets the reason for a fallback, "" if none. */
int axp_roles_resolve(const axp_dev_entry *l, int n, axp_role_id role, const char *spec,
                      int *ret_entry, char *why, size_t why_size, axp_error *err);

typedef void (*axp_log_fn)(void *userdata, const char *line);

typedef struct axp_role_binding {
        axp_device *devs[2]; /* the distinct devices, owned */
        int n_devs;
        int static_dev, dynamic_dev; /* indices into devs (equal when one device serves both) */
} axp_role_binding;

/* Open the devices of both roles. A spec that cannot be met (no NPU that runs our kernels,
 * no OpenCL device, one that fails to start) falls back to the CPU; every binding and
 * fallback is told in one line through log (NULL: stderr). A malformed spec is -EINVAL. */
int axp_roles_bind(const char *static_spec, const char *dynamic_spec, int n_threads, axp_log_fn log,
                   void *userdata, axp_role_binding *ret, axp_error *err);
void axp_role_binding_clear(axp_role_binding *b);
