/* SPDX-License-Identifier: MIT */
#include "flow.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bus-common.h"
#include "client.h"
#include "log.h"
#include "options.h"
#include "request.h"

int flow_new(Context *c, Client *cl, uint64_t engine_flow, Flow **ret) {
        Flow *f;
        int k;

        f = calloc(1, sizeof(Flow));
        if (!f)
                return -ENOMEM;
        *f = (Flow) {
                .context = c,
                .client = cl,
                .n = c->last_flow_n + 1,
                .engine_flow = engine_flow,
                .uid = cl->uid,
        };
        k = idmap_put(&c->flows, f->n, f);
        if (k < 0) {
                free(f);
                return k;
        }
        c->last_flow_n = f->n;
        LIST_PREPEND(flows, cl->flows, f);
        *ret = f;
        return 0;
}

Flow *flow_get(Context *c, uint64_t n) {
        Flow *f = idmap_get(&c->flows, n);

        return f && !f->closing ? f : NULL;
}

int flow_not_found(sd_bus_error *error, uint64_t n) {
        return sd_bus_error_setf(error, AXP_ERROR_NOT_FOUND,
                                 "Flow %" PRIu64 " does not exist (closed, or its owner left)", n);
}

/* A flow is a handle, not an object, so sd-bus would answer a call to its path with
 * UnknownObject whether the flow exists or not: say NotFound where it does not, as a
 * request's path does. */
static int flow_path_call(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        const char *path = sd_bus_message_get_path(m), *name = path_child(path, AXP_BUS_FLOW_PREFIX);
        uint64_t n;

        /* the folder of flows, or a path below one's: sd-bus answers */
        if (!name)
                return 0;
        /* a flow's path is PREFIX/N, N from 1 without leading zeros: .../flow/0 and
         * .../flow/007 name none */
        n = path_number(path, AXP_BUS_FLOW_PREFIX);
        if (n > 0 && flow_get(userdata, n))
                return 0;
        return sd_bus_error_setf(error, AXP_ERROR_NOT_FOUND,
                                 "Flow %.32s%s does not exist (closed, or its owner left)", name,
                                 strlen(name) > 32 ? "..." : "");
}

int flow_register(Context *c) {
        int k;

        k = sd_bus_add_fallback(c->bus, NULL, AXP_BUS_FLOW_PREFIX, flow_path_call, c);
        if (k < 0)
                return log_error_errno(k, "Failed to register the flow paths");
        return 0;
}

int flow_path(const Flow *f, char **ret) {
        return asprintf(ret, AXP_BUS_FLOW_PREFIX "/%" PRIu64, f->n) < 0 ? -ENOMEM : 0;
}

void flow_free(Flow *f) {
        Client *cl;

        if (!f)
                return;
        cl = f->client;
        idmap_remove(&f->context->flows, f->n);
        if (cl)
                LIST_REMOVE(flows, cl->flows, f);
        if (f->busy)
                f->busy->flow = NULL;
        free(f);
        client_maybe_free(cl);
}

static void flow_close_now(Flow *f) {
        int k;

        k = f->context->engine ? axp_engine_flow_close(f->context->engine, f->engine_flow) : 0;
        if (k < 0 && k != -ENOENT)
                log_warning_errno(k, "Failed to close flow %" PRIu64 " in the engine", f->n);
        log_debug("Flow %" PRIu64 " closed", f->n);
        flow_free(f);
}

void flow_close(Flow *f) {
        Client *cl = f->client;

        f->closing = true;
        if (cl) {
                LIST_REMOVE(flows, cl->flows, f);
                f->client = NULL;
        }
        if (f->busy) {
                /* It closes when its request has stopped using the KV cache. */
                (void) request_cancel(f->busy);
                return;
        }
        flow_close_now(f);
}

void flow_idle(Flow *f) {
        if (f->closing && !f->busy)
                flow_close_now(f);
}
