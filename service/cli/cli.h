/* SPDX-License-Identifier: MIT */
/* Subcommands of the `agentxpu` command line, one file each (service/cli-NAME.c). Each takes
 * argv with argv[0] = the subcommand name and returns the process exit status: 0 success,
 * 1 failure (after a one-line message on stderr), 2 usage error. */
#pragma once

int cli_generate(int argc, char **argv);
int cli_logits(int argc, char **argv);
int cli_tokenize(int argc, char **argv);
int cli_mkmodel(int argc, char **argv);
int cli_inspect(int argc, char **argv);
int cli_sim(int argc, char **argv);
int cli_bench(int argc, char **argv);
int cli_suggestions(int argc, char **argv);
int cli_devices(int argc, char **argv);
/* service/cli-bus.c: clients of the engine service */
int cli_ask(int argc, char **argv);
int cli_submit(int argc, char **argv);
int cli_status(int argc, char **argv);
int cli_cancel(int argc, char **argv);
int cli_chat(int argc, char **argv);

/* Print "agentxpu: <msg>" to stderr as one line and return 1. */
int cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
