/* SPDX-License-Identifier: MIT */
#include "util.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

int axp_errorf(axp_error *err, int code, const char *fmt, ...) {
        if (err) {
                va_list ap;
                va_start(ap, fmt);
                vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
                va_end(ap);
                err->code = code;
        }
        return code;
}

double axp_now(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}

void *axp_alloc(size_t size) {
        void *p = NULL;
        if (size == 0)
                size = 64;
        size = (size + 63) & ~(size_t) 63;
        if (posix_memalign(&p, 64, size) != 0)
                return NULL;
        memset(p, 0, size);
        return p;
}
