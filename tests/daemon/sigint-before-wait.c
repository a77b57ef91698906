/* SPDX-License-Identifier: MIT */
/* LD_PRELOAD for the command line's tests: the first time the process is about to wait
 * without a timeout (poll or ppoll, as sd_bus_wait and the command line's own waits do), it
 * sends itself SIGINT first. Its handler runs there, after the code looked for a Ctrl-C and
 * before it waits: the moment a Ctrl-C can land by chance, made certain. A wait that does
 * not also wait for the signal then sleeps until something else wakes it.
 * AXP_SIGINT_SKIP=N lets the first N such waits go by (chat's prompt, to reach its turn's). */
#include <dlfcn.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

static bool fired;
static int skipped;

static void before_wait(bool forever) {
        const char *skip = getenv("AXP_SIGINT_SKIP");

        if (!forever || fired)
                return;
        if (skip && skipped < atoi(skip)) {
                skipped++;
                return;
        }
        fired = true;
        (void) raise(SIGINT);
}

int poll(struct pollfd *fds, nfds_t n, int timeout) {
        int (*real)(struct pollfd *, nfds_t, int) = dlsym(RTLD_NEXT, "poll");

        before_wait(timeout < 0);
        return real(fds, n, timeout);
}

int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *timeout, const sigset_t *mask) {
        int (*real)(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *) =
                dlsym(RTLD_NEXT, "ppoll");

        before_wait(!timeout);
        return real(fds, n, timeout, mask);
}

/* What _FORTIFY_SOURCE builds call instead. */
int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fds_len) {
        int (*real)(struct pollfd *, nfds_t, int, size_t) = dlsym(RTLD_NEXT, "__poll_chk");

        before_wait(timeout < 0);
        return real(fds, n, timeout, fds_len);
}

int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *timeout, const sigset_t *mask,
                size_t fds_len) {
        int (*real)(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *, size_t) =
                dlsym(RTLD_NEXT, "__ppoll_chk");

        before_wait(!timeout);
        return real(fds, n, timeout, mask, fds_len);
}
