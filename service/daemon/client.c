/* SPDX-License-Identifier: MIT */
#include "client.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/bus-common.h"
#include "flow.h"
#include "log.h"
#include "request.h"

Client *client_find(Context *c, const char *name) {
        LIST_FOREACH(clients, cl, c->clients)
                if (strcmp(cl->name, name) == 0)
                        return cl;
        return NULL;
}

void client_free(Client *cl) {
        Context *c;

        if (!cl)
                return;
        c = cl->context;

        log_debug("Client %s is gone", cl->name);
        LIST_FOREACH_SAFE(requests, r, n, cl->requests)
                request_orphan(r);
        LIST_FOREACH_SAFE(flows, f, n, cl->flows)
                flow_orphan(f);

        LIST_REMOVE(clients, c->clients, cl);
        sd_bus_track_unref(cl->track);
        sd_bus_slot_unref(cl->check_slot);
        free(cl->name);
        free(cl);
        context_changed(c);
}

void client_maybe_free(Client *cl) {
        if (cl && !cl->requests && !cl->flows)
                client_free(cl);
}

static int on_track(sd_bus_track *t, void *userdata) {
        client_free(userdata);
        return 0;
}

static int on_name_owner(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        Client *cl = userdata;

        cl->check_slot = sd_bus_slot_unref(cl->check_slot);
        /* NameHasNoOwner: it left before the tracking match was in place. */
        if (sd_bus_message_is_method_error(reply, NULL))
                client_free(cl);
        return 0;
}

int client_get(Context *c, sd_bus_message *m, Client **ret) {
        const char *sender = sd_bus_message_get_sender(m);
        Client *cl;
        uid_t uid;
        int r;

        if (!sender)
                return -ENXIO;
        cl = client_find(c, sender);
        if (cl) {
                *ret = cl;
                return 0;
        }

        r = context_sender_uid(c, m, &uid);
        if (r < 0)
                return r;

        cl = calloc(1, sizeof(Client));
        if (!cl)
                return -ENOMEM;
        *cl = (Client) {
                .context = c,
                .uid = uid,
        };
        cl->name = strdup(sender);
        if (!cl->name) {
                free(cl);
                return -ENOMEM;
        }
        LIST_PREPEND(clients, c->clients, cl);

        r = sd_bus_track_new(c->bus, &cl->track, on_track, cl);
        if (r >= 0)
                r = sd_bus_track_add_name(cl->track, sender);
        if (r >= 0)
                r = sd_bus_call_method_async(c->bus, &cl->check_slot, "org.freedesktop.DBus",
                                             "/org/freedesktop/DBus", "org.freedesktop.DBus",
                                             "GetNameOwner", on_name_owner, cl, "s", sender);
        if (r < 0) {
                client_free(cl);
                return log_error_errno(r, "Failed to track bus client %s", sender);
        }

        log_debug("Client %s (uid %u) is new", sender, (unsigned) uid);
        *ret = cl;
        return 0;
}
