/* SPDX-License-Identifier: MIT */
#include "bus-common.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "base/util.h"

const sd_bus_error_map axp_bus_error_map[] = {
        SD_BUS_ERROR_MAP(AXP_ERROR_INVALID_ARGUMENT, EINVAL),
        SD_BUS_ERROR_MAP(AXP_ERROR_CONTEXT_OVERFLOW, E2BIG),
        SD_BUS_ERROR_MAP(AXP_ERROR_BUSY, EBUSY),
        SD_BUS_ERROR_MAP(AXP_ERROR_NOT_FOUND, ENOENT),
        SD_BUS_ERROR_MAP(AXP_ERROR_ACCESS_DENIED, EACCES),
        SD_BUS_ERROR_MAP(AXP_ERROR_NO_MODEL, ENOMEDIUM),
        SD_BUS_ERROR_MAP(AXP_ERROR_CANCELLED, ECANCELED),
        SD_BUS_ERROR_MAP(AXP_ERROR_EXISTS, EEXIST),
        SD_BUS_ERROR_MAP(AXP_ERROR_NO_SPACE, ENOSPC),
        SD_BUS_ERROR_MAP(AXP_ERROR_UNSUPPORTED, EOPNOTSUPP),
        SD_BUS_ERROR_MAP_END,
};

int axp_bus_error_map_register(void) {
        /* sd_bus_error_add_map() ignores a map it already has. */
        return sd_bus_error_add_map(axp_bus_error_map);
}

const char *axp_bus_error_name(int error) {
        if (error < 0)
                error = -error;
        if (error == EPERM) /* the one alias: both mean "not yours" */
                error = EACCES;
        for (const sd_bus_error_map *m = axp_bus_error_map; m->name; m++)
                if (m->code == error)
                        return m->name;
        return NULL;
}

int axp_bus_error_setf(sd_bus_error *error, int code, const char *fmt, ...) {
        const char *name = axp_bus_error_name(code);
        char msg[512];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);

        if (!name)
                return sd_bus_error_set_errnof(error, code, "%s", msg);
        return sd_bus_error_setf(error, name, "%s", msg);
}

int axp_bus_open(const char *address, const char *description, sd_bus **ret) {
        sd_bus *bus = NULL;
        int r;

        (void) axp_bus_error_map_register();

        if (!address) {
                r = sd_bus_open_system_with_description(&bus, description);
                if (r < 0)
                        return r;
                *ret = bus;
                return 0;
        }

        r = sd_bus_new(&bus);
        if (r < 0)
                return r;
        r = sd_bus_set_description(bus, description);
        if (r >= 0)
                r = sd_bus_set_address(bus, address);
        if (r >= 0)
                r = sd_bus_set_bus_client(bus, true);
        if (r >= 0)
                r = sd_bus_start(bus);
        if (r < 0) {
                sd_bus_unref(bus);
                return r;
        }
        *ret = bus;
        return 0;
}
