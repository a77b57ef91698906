/* SPDX-License-Identifier: MIT */
/* What the engine's daemon and its clients (the agentxpu command line) share about the bus:
 * names, paths, the org.agentxpu.Error.* errors, connecting, and sd-bus cleanup helpers. */
#pragma once

#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#define AXP_BUS_NAME "org.agentxpu.Engine"
#define AXP_BUS_PATH "/org/agentxpu/Engine"
#define AXP_BUS_IFACE "org.agentxpu.Engine"
#define AXP_BUS_REQUEST_IFACE "org.agentxpu.Engine.Request"
#define AXP_BUS_REQUEST_PREFIX "/org/agentxpu/Engine/request"
#define AXP_BUS_FLOW_PREFIX "/org/agentxpu/Engine/flow"
#define AXP_BUS_JOB_IFACE "org.agentxpu.Engine.Job"
#define AXP_BUS_JOB_PREFIX "/org/agentxpu/Engine/job"

#define AXP_ERROR_INVALID_ARGUMENT "org.agentxpu.Error.InvalidArgument"
#define AXP_ERROR_CONTEXT_OVERFLOW "org.agentxpu.Error.ContextOverflow"
#define AXP_ERROR_BUSY "org.agentxpu.Error.Busy"
#define AXP_ERROR_NOT_FOUND "org.agentxpu.Error.NotFound"
#define AXP_ERROR_ACCESS_DENIED "org.agentxpu.Error.AccessDenied"
#define AXP_ERROR_NO_MODEL "org.agentxpu.Error.NoModel"
#define AXP_ERROR_CANCELLED "org.agentxpu.Error.Cancelled"
#define AXP_ERROR_EXISTS "org.agentxpu.Error.Exists"
#define AXP_ERROR_NO_SPACE "org.agentxpu.Error.NoSpace"
#define AXP_ERROR_UNSUPPORTED "org.agentxpu.Error.Unsupported"

/* Name <-> errno for the errors above; registered with sd_bus_error_add_map() so that
 * sd_bus_error_get_errno() and the client's messages know them. */
extern const sd_bus_error_map axp_bus_error_map[];

/* Register the map (idempotent). */
int axp_bus_error_map_register(void);

/* The org.agentxpu.Error name for a negative errno, NULL if none fits. */
const char *axp_bus_error_name(int error);

/* Set `error` to the org.agentxpu.Error.* name for `code` (a negative errno; falls back to
 * sd-bus's own mapping) with the printf-style message. Returns `code`, as sd_bus_error_setf
 * does, so handlers can write `return axp_bus_error_setf(error, -EBUSY, "...")`. */
int axp_bus_error_setf(sd_bus_error *error, int code, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

/* Connect to the bus at `address`, or to the system bus if NULL, as a message bus client.
 * `description` names the connection in sd-bus's debug output. */
int axp_bus_open(const char *address, const char *description, sd_bus **ret);

static inline void sd_bus_error_freep_(sd_bus_error *e) {
        sd_bus_error_free(e);
}
#define _cleanup_bus_error_ __attribute__((cleanup(sd_bus_error_freep_)))
