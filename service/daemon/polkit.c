/* SPDX-License-Identifier: MIT */
#include "polkit.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "base/util.h"

struct PolkitQuery {
        sd_bus_slot *slot;
        uid_t caller_uid;
        char *action;
        PolkitDone done;
        void *userdata;
};

PolkitQuery *polkit_query_free(PolkitQuery *q) {
        if (!q)
                return NULL;
        sd_bus_slot_unref(q->slot);
        free(q->action);
        free(q);
        return NULL;
}

static int on_check_reply(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        PolkitQuery *q = userdata;
        PolkitDone done = q->done;
        void *data = q->userdata;
        uid_t caller_uid = q->caller_uid;
        int authorized = 0, challenge = 0, r;
        const sd_bus_error *e;

        e = sd_bus_message_get_error(reply);
        if (e) {
                /* No polkit on this bus: root alone may administer. */
                if (sd_bus_error_has_names(e, SD_BUS_ERROR_SERVICE_UNKNOWN, SD_BUS_ERROR_NAME_HAS_NO_OWNER)) {
                        log_debug("polkit is not available; authorizing %s for root only", q->action);
                        polkit_query_free(q);
                        done(data, 0, caller_uid == 0,
                             "polkit is not running on this bus, and only root may do this without it");
                        return 0;
                }
                log_warning("polkit failed to answer for %s: %s", q->action, e->message ?: e->name);
                polkit_query_free(q);
                done(data, -EACCES, false, NULL);
                return 0;
        }

        r = sd_bus_message_enter_container(reply, 'r', "bba{ss}");
        if (r >= 0)
                r = sd_bus_message_read(reply, "bb", &authorized, &challenge);
        polkit_query_free(q);
        if (r < 0) {
                log_warning_errno(r, "Unexpected answer from polkit");
                done(data, r, false, NULL);
                return 0;
        }
        done(data, 0, authorized,
             authorized ? NULL
                        : challenge ? "authentication is required (ask again with interactive authorization allowed)"
                                    : "");
        return 0;
}

int polkit_check_async(sd_bus *bus, sd_bus_message *call, const char *action, uid_t caller_uid,
                       PolkitDone done, void *userdata, PolkitQuery **ret) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        const char *sender = sd_bus_message_get_sender(call);
        PolkitQuery *q;
        int r;

        if (!sender)
                return -EBADMSG;

        q = calloc(1, sizeof(PolkitQuery));
        if (!q)
                return -ENOMEM;
        *q = (PolkitQuery) {
                .caller_uid = caller_uid,
                .done = done,
                .userdata = userdata,
        };
        q->action = strdup(action);
        if (!q->action) {
                free(q);
                return -ENOMEM;
        }

        r = sd_bus_message_new_method_call(bus, &m, POLKIT_BUS_NAME, POLKIT_BUS_PATH, POLKIT_BUS_IFACE,
                                           "CheckAuthorization");
        /* subject (sa{sv}), action_id s, details a{ss}, flags u (1: allow user interaction),
         * cancellation_id s */
        if (r >= 0)
                r = sd_bus_message_append(m, "(sa{sv})sa{ss}us", "system-bus-name", 1, "name", "s",
                                          sender, action, 0,
                                          (uint32_t) (sd_bus_message_get_allow_interactive_authorization(call) > 0),
                                          "");
        /* polkit may wait for the user to type a password: no reply timeout short of that. */
        if (r >= 0)
                r = sd_bus_call_async(bus, &q->slot, m, on_check_reply, q, UINT64_C(25) * 60 * 1000000);
        if (r < 0) {
                polkit_query_free(q);
                return r;
        }
        *ret = q;
        return 0;
}
