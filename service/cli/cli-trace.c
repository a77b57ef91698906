/* SPDX-License-Identifier: MIT */
/* The synthetic trace's options, shared by `agentxpu bench` and `agentxpu sim` (cli-trace.h). */
#include "cli-trace.h"
#include "cli.h"

int cli_trace_option(int c, const char *arg, cli_trace *t) {
        switch (c) {
        case CLI_TRACE_RRATE:
                return cli_double("--reactive-rate", arg, 0, 10000, &t->p.reactive_per_min) ? 1 : -1;
        case CLI_TRACE_PRATE:
                return cli_double("--proactive-rate", arg, 0, 10000, &t->p.proactive_per_min) ? 1 : -1;
        case CLI_TRACE_RSET:
                t->rset = arg;
                return 1;
        case CLI_TRACE_PSET:
                t->pset = arg;
                return 1;
        case CLI_TRACE_MINUTES:
                return cli_double("--minutes", arg, 0.01, 10000, &t->p.minutes) ? 1 : -1;
        case CLI_TRACE_SEED:
                return cli_uint("--seed", arg, 0, 0x7fffffff, &t->p.seed) ? 1 : -1;
        default:
                return 0;
        }
}

int cli_trace_sets(cli_trace *t, axp_error *err) {
        int r = axp_workload_set_find(t->rset, AXP_REACTIVE, &t->p.reactive_set, err);
        return r < 0 ? r : axp_workload_set_find(t->pset, AXP_PROACTIVE, &t->p.proactive_set, err);
}
