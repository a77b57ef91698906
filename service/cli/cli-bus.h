/* SPDX-License-Identifier: MIT */
/* What the command line's clients of the engine service share (cli-bus.c). */
#pragma once

#include <systemd/sd-bus.h>

/* The bus at `address`, or the system bus; on failure one line saying what to check and 1. */
int connect_engine(const char *address, sd_bus **ret);
/* A failed call as one line a person can act on; `address` as connect_engine took it.
 * Returns 1. */
int call_fail(const char *what, const char *address, const sd_bus_error *e, int r);
