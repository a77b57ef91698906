/* SPDX-License-Identifier: MIT */
/* Flows: a caller's conversation whose KV cache stays in the engine between turns. A flow
 * has a path, /org/agentxpu/Engine/flow/N, but no object: it is a handle for options.flow
 * and CloseFlow. Any connection of the owner's uid may use it; it is closed when the
 * connection that opened it leaves. */
#pragma once

#include "context.h"

/* Calls to the path of a flow that does not exist answer NotFound. */
int flow_register(Context *c);

int flow_new(Context *c, Client *cl, uint64_t engine_flow, Flow **ret);
/* An open flow by number; NULL if unknown or closing. */
Flow *flow_get(Context *c, uint64_t n);
/* The NotFound error for flow n. */
int flow_not_found(sd_bus_error *error, uint64_t n);
int flow_path(const Flow *f, char **ret);

/* Close it (CloseFlow, or its owner left): cancel its request in flight, then free the
 * engine's flow once that request is over. */
void flow_close(Flow *f);
#define flow_orphan flow_close

/* Its request finished. */
void flow_idle(Flow *f);

/* Free without telling the engine (the engine is gone). */
void flow_free(Flow *f);
