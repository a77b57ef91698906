/* SPDX-License-Identifier: MIT */
/* Asking polkit, asynchronously, whether the sender of a call may perform an action: a
 * CheckAuthorization call for the subject "system-bus-name" of that sender. Where no polkit
 * answers (a private bus without its stand-in, a system without polkit), only root is
 * authorized. */
#pragma once

#include <stdbool.h>
#include <sys/types.h>
#include <systemd/sd-bus.h>

#define POLKIT_BUS_NAME "org.freedesktop.PolicyKit1"
#define POLKIT_BUS_PATH "/org/freedesktop/PolicyKit1/Authority"
#define POLKIT_BUS_IFACE "org.freedesktop.PolicyKit1.Authority"

/* `authorized` is meaningful when `r` >= 0; when not authorized, `why` says why (it is
 * empty when polkit said no without a reason). `r` < 0: the question could not be asked. */
typedef void (*PolkitDone)(void *userdata, int r, bool authorized, const char *why);

typedef struct PolkitQuery PolkitQuery;

/* `caller_uid`: the uid of the call's sender, for the no-polkit fallback. */
int polkit_check_async(sd_bus *bus, sd_bus_message *call, const char *action, uid_t caller_uid,
                       PolkitDone done, void *userdata, PolkitQuery **ret);
/* Forget a query in flight (its callback will not run). */
PolkitQuery *polkit_query_free(PolkitQuery *q);
