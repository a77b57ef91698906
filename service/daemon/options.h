/* SPDX-License-Identifier: MIT */
/* The options a{sv} of Reactive, Proactive, Complete, OpenFlow and Embed: every key known, every
 * type checked, every value within its range; anything else is InvalidArgument naming the
 * key. Strings point into the message, which must outlive the parsed options. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-bus.h>

#include "daemon-config.h"
#include "engine.h"

/* Earlier turns a request may carry (the option `messages`). */
#define OPTIONS_MAX_MESSAGES 1024

typedef enum OptionSet {
        OPTIONS_SUBMIT,   /* Reactive, Proactive */
        OPTIONS_COMPLETE, /* as SUBMIT, plus priority */
        OPTIONS_FLOW,     /* OpenFlow: system, raw */
        OPTIONS_EMBED,    /* Embed: priority, pooling, normalize, truncate */
} OptionSet;

typedef struct RequestOptions {
        axp_request_opts opts;  /* .stop points at `stop`; .flow is left 0 for the caller */
        const char **stop;
        axp_turn *messages;     /* .messages points at it */
        axp_fim_chunk *fim_extra; /* .fim_extra points at it */
        uint64_t flow;          /* N of /org/agentxpu/Engine/flow/N, 0: none */
        axp_kind priority;      /* Complete: reactive unless options.priority says otherwise */
} RequestOptions;

void request_options_done(RequestOptions *o);

/* Reads the a{sv} at the message's read position. Errors set `error` and return its
 * negative errno. */
int request_options_parse(sd_bus_message *m, OptionSet set, const DaemonConfig *c,
                          RequestOptions *ret, sd_bus_error *error);

/* The prompt (or system prompt) check: not empty, valid UTF-8, at most the configured size. */
int prompt_check(const char *what, const char *s, bool empty_ok, const DaemonConfig *c,
                 sd_bus_error *error);

/* The one element of a path PREFIX/NAME (NAME not empty, without '/'), NULL for another path
 * (PREFIX itself, a path below PREFIX/NAME, or outside PREFIX). */
const char *path_child(const char *path, const char *prefix);
/* N of a path PREFIX/N (N > 0, decimal, no leading zero); 0 if the path is not of that form. */
uint64_t path_number(const char *path, const char *prefix);
