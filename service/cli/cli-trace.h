/* SPDX-License-Identifier: MIT */
/* The options of a synthetic trace (sim/sim.h), which `agentxpu bench` and `agentxpu sim`
 * share: --reactive-rate, --proactive-rate, --reactive-set, --proactive-set, --minutes and
 * --seed. Each command lists CLI_TRACE_OPTIONS in its option table, sets its own defaults in a
 * cli_trace, and hands every option to cli_trace_option() before its own switch (cli-trace.c). */
#pragma once

#include <getopt.h>

#include "sim/sim.h"

enum {
        CLI_TRACE_RRATE = 0x200, /* above every command's own option values */
        CLI_TRACE_PRATE,
        CLI_TRACE_RSET,
        CLI_TRACE_PSET,
        CLI_TRACE_MINUTES,
        CLI_TRACE_SEED,
};

#define CLI_TRACE_OPTIONS                                                                          \
        { "reactive-rate", required_argument, NULL, CLI_TRACE_RRATE },                             \
        { "proactive-rate", required_argument, NULL, CLI_TRACE_PRATE },                            \
        { "reactive-set", required_argument, NULL, CLI_TRACE_RSET },                               \
        { "proactive-set", required_argument, NULL, CLI_TRACE_PSET },                              \
        { "minutes", required_argument, NULL, CLI_TRACE_MINUTES },                                 \
        { "seed", required_argument, NULL, CLI_TRACE_SEED }

typedef struct cli_trace {
        axp_trace_params p;
        const char *rset, *pset; /* workload set names, resolved by cli_trace_sets() */
} cli_trace;

/* Option c with its value arg: 1 if it was a trace option and was taken, 0 if c is not one,
 * -1 after a usage error message (the command returns 2). */
int cli_trace_option(int c, const char *arg, cli_trace *t);

/* The workload sets named by rset and pset into t->p; < 0 with err set for an unknown name. */
int cli_trace_sets(cli_trace *t, axp_error *err);
