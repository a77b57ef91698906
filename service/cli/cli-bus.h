/* SPDX-License-Identifier: MIT */
/* What the command line's clients of the engine service share (cli-bus.c). */
#pragma once

#include <systemd/sd-bus.h>

/* The bus at `address`, or the system bus; on failure one line saying what to check and 1. */
int connect_engine(const char *address, sd_bus **ret);
/* A failed call as one line a person can act on; `address` as connect_engine took it.
 * Returns 1. */
int call_fail(const char *what, const char *address, const sd_bus_error *e, int r);

/* Ctrl-C (and SIGTERM) from here on are counted rather than ending the process, and wake
 * cli_bus_wait(); a loop on the bus reads the count with cli_interrupted(). Without
 * SA_RESTART, so a read from the terminal ends with EINTR. Returns 0, or 1 after a message. */
int cli_catch_interrupts(void);
unsigned cli_interrupted(void);
void cli_interrupted_reset(void);
/* Waits until the bus has something for sd_bus_process(), its next timeout, or a Ctrl-C (even
 * one that came after the caller last looked at cli_interrupted()); the caller then
 * processes the bus and looks again. The one wait of every loop on the bus: sd_bus_wait()
 * sleeps through a Ctrl-C that lands just before it. Returns 0 or a negative errno. */
int cli_bus_wait(sd_bus *bus);

/* One field of an a{sv} for cli_read_dict: its key, its D-Bus type ('s', 'b', 'u', 't' or
 * 'd') and where its value goes (a const char * for 's', valid while the message is; an int
 * for 'b'). */
typedef struct cli_dict_field {
        const char *key;
        char type;
        void *ret;
} cli_dict_field;
/* Reads an a{sv} (entered here and left): the fields named whose value has the type expected;
 * other keys and types are skipped (a newer engine may add some). 0 or a negative errno. */
int cli_read_dict(sd_bus_message *m, const cli_dict_field *fields, size_t n);
