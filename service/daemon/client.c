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
        sd_bus_slot_unref(cl->check_slot);
        free(cl->name);
        free(cl);
        context_changed(c);
}

void client_maybe_free(Client *cl) {
        if (cl && !cl->requests && !cl->flows)
                client_free(cl);
}

/* One match for every client, installed once at start: a match rule per client (what
 * sd_bus_track adds) counts against the bus's max_match_rules_per_connection (512 on the system
 * bus), and sd-bus closes the whole connection when an asynchronous AddMatch fails. */
static int on_name_owner_changed(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        const char *name, *old_owner, *new_owner;
        Context *c = userdata;
        Client *cl;

        if (sd_bus_message_read(m, "sss", &name, &old_owner, &new_owner) < 0)
                return 0;
        if (name[0] != ':' || new_owner[0])
                return 0;
        cl = client_find(c, name);
        if (cl)
                client_free(cl);
        return 0;
}

int clients_watch(Context *c) {
        int r;

        r = sd_bus_match_signal(c->bus, NULL, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                                "org.freedesktop.DBus", "NameOwnerChanged", on_name_owner_changed, c);
        if (r < 0)
                return log_error_errno(r, "Failed to watch bus clients leaving");
        return 0;
}

static int on_name_owner(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        Client *cl = userdata;

        cl->check_slot = sd_bus_slot_unref(cl->check_slot);
        /* NameHasNoOwner: it left before we knew it (its NameOwnerChanged came first). Any
         * other error (a timeout) says nothing about the client: keep it. */
        if (sd_bus_message_is_method_error(reply, "org.freedesktop.DBus.Error.NameHasNoOwner"))
                client_free(cl);
        else if (sd_bus_message_is_method_error(reply, NULL))
                log_warning("Cannot check that client %s is still on the bus: %s", cl->name,
                            sd_bus_message_get_error(reply)->message ?: "unknown error");
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

        r = sd_bus_call_method_async(c->bus, &cl->check_slot, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                                     "org.freedesktop.DBus", "GetNameOwner", on_name_owner, cl, "s", sender);
        if (r < 0) {
                client_free(cl);
                return log_error_errno(r, "Failed to track bus client %s", sender);
        }

        log_debug("Client %s (uid %u) is new", sender, (unsigned) uid);
        *ret = cl;
        return 0;
}
