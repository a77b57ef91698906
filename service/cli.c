/* SPDX-License-Identifier: MIT */
/* agentxpu: the command line. */
#include <stdio.h>
#include <string.h>

#include "cli-suggestions.h"
#include "config.h"

static int usage(FILE *f) {
        fprintf(f, "usage: agentxpu COMMAND [OPTIONS]\n"
                   "commands: generate, logits, tokenize, mkmodel, suggestions, version\n");
        return f == stderr ? 2 : 0;
}

int main(int argc, char **argv) {
        if (argc < 2)
                return usage(stderr);
        if (strcmp(argv[1], "version") == 0 || strcmp(argv[1], "--version") == 0) {
                printf("agentxpu %s\n", AXP_VERSION);
                return 0;
        }
        if (strcmp(argv[1], "suggestions") == 0)
                return cli_suggestions(argc - 1, argv + 1);
        if (strcmp(argv[1], "help") == 0 || strcmp(argv[1], "--help") == 0)
                return usage(stdout);
        fprintf(stderr, "agentxpu: unknown command '%s'\n", argv[1]);
        return usage(stderr);
}
