/* SPDX-License-Identifier: MIT */
/* The daemon's log: one line per event on stderr, with a syslog priority prefix that the
 * journal understands when stderr is connected to it (systemd's StandardError=journal). */
#pragma once

#include <errno.h>
#include <stdbool.h>
#include <syslog.h>

extern int log_max_level;
/* Prefix lines with <N> (set when stderr goes to the journal). */
extern bool log_prefix_priority;

void log_setup(void);
int log_full(int level, int error, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Each returns -abs(error) (or 0 where there is none) so `return log_error_errno(r, ...)`
 * logs and propagates. %m is not supported; the errno's text is appended. */
#define log_debug(...) log_full(LOG_DEBUG, 0, __VA_ARGS__)
#define log_info(...) log_full(LOG_INFO, 0, __VA_ARGS__)
#define log_notice(...) log_full(LOG_NOTICE, 0, __VA_ARGS__)
#define log_warning(...) log_full(LOG_WARNING, 0, __VA_ARGS__)
#define log_error(...) log_full(LOG_ERR, 0, __VA_ARGS__)
#define log_warning_errno(e, ...) log_full(LOG_WARNING, (e), __VA_ARGS__)
#define log_error_errno(e, ...) log_full(LOG_ERR, (e), __VA_ARGS__)
#define log_oom() log_full(LOG_ERR, -ENOMEM, "Out of memory")
