/* SPDX-License-Identifier: MIT */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int log_max_level = LOG_INFO;
bool log_prefix_priority = false;

void log_setup(void) {
        const char *e = getenv("AGENTXPU_LOG_LEVEL");

        if (e && strcmp(e, "debug") == 0)
                log_max_level = LOG_DEBUG;
        else if (e && strcmp(e, "warning") == 0)
                log_max_level = LOG_WARNING;
        /* systemd sets JOURNAL_STREAM when stderr is a journal stream. */
        log_prefix_priority = getenv("JOURNAL_STREAM") != NULL;
}

int log_full(int level, int error, const char *fmt, ...) {
        int saved = errno;
        va_list ap;
        char buf[1024];

        if (error > 0)
                error = -error;
        if (level > log_max_level)
                return error;

        va_start(ap, fmt);
        vsnprintf(buf, sizeof(buf), fmt, ap);
        va_end(ap);

        if (log_prefix_priority)
                fprintf(stderr, "<%d>", level);
        if (error < 0)
                fprintf(stderr, "%s: %s\n", buf, strerror(-error));
        else
                fprintf(stderr, "%s\n", buf);
        errno = saved;
        return error;
}
