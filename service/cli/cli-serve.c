/* SPDX-License-Identifier: MIT */
/* agentxpu serve: runs the HTTP bridge, agentxpu-http (service/bridge/), a program of its
 * own since it is built on GLib, libsoup and json-glib, which the command line does not
 * link. Every argument goes to it unchanged. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "config.h"

/* The bridge beside this agentxpu in a build tree (service/cli/ and service/bridge/), else
 * the installed one; $AGENTXPU_HTTP names another. */
static const char *bridge_path(char *buf, size_t size) {
        const char *env = getenv("AGENTXPU_HTTP");
        char self[PATH_MAX];
        ssize_t n;

        if (env && *env)
                return env;
        n = readlink("/proc/self/exe", self, sizeof(self) - 1);
        if (n > 0) {
                char *slash;
                self[n] = '\0';
                slash = strrchr(self, '/');
                if (slash) {
                        *slash = '\0';
                        snprintf(buf, size, "%s/../bridge/agentxpu-http", self);
                        if (access(buf, X_OK) == 0 && access(AXP_LIBEXECDIR "/agentxpu-http", X_OK) != 0)
                                return buf;
                }
        }
        return AXP_LIBEXECDIR "/agentxpu-http";
}

int cli_serve(int argc, char **argv) {
        char buf[PATH_MAX + 32];
        const char *path = bridge_path(buf, sizeof(buf));

        argv[0] = (char *) path;
        execv(path, argv);
        if (errno == ENOENT)
                return cli_fail("%s is not installed (it needs libsoup 3 and json-glib at build time)",
                                path);
        return cli_fail("cannot run %s: %s", path, strerror(errno));
}
