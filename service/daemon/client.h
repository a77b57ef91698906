/* SPDX-License-Identifier: MIT */
/* Clients: the connections that own requests and flows. */
#pragma once

#include "context.h"

/* Watch NameOwnerChanged for every client (once, before taking the bus name). */
int clients_watch(Context *c);

/* The sender's Client, created (with its uid) on first use. */
int client_get(Context *c, sd_bus_message *m, Client **ret);
Client *client_find(Context *c, const char *name);

/* The connection left: cancel its requests, close its flows, free what is not still in the
 * engine (the rest goes when the engine reports it finished). */
void client_free(Client *cl);

/* Free the client if it holds nothing any more. */
void client_maybe_free(Client *cl);
