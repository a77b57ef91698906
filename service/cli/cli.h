/* SPDX-License-Identifier: MIT */
/* Subcommands of the `agentxpu` command line, one file each (service/cli-NAME.c). Each takes
 * argv with argv[0] = the subcommand name and returns the process exit status: 0 success,
 * 1 failure (after a one-line message on stderr), 2 usage error. */
#pragma once

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

int cli_generate(int argc, char **argv);
int cli_embed(int argc, char **argv);
int cli_logits(int argc, char **argv);
int cli_tokenize(int argc, char **argv);
int cli_mkmodel(int argc, char **argv);
int cli_inspect(int argc, char **argv);
int cli_quantize(int argc, char **argv);
int cli_sim(int argc, char **argv);
int cli_bench(int argc, char **argv);
int cli_suggestions(int argc, char **argv);
int cli_devices(int argc, char **argv);
/* service/cli-bus.c: clients of the engine service */
int cli_ask(int argc, char **argv);
int cli_submit(int argc, char **argv);
int cli_status(int argc, char **argv);
int cli_cancel(int argc, char **argv);
int cli_forget(int argc, char **argv);
int cli_serve(int argc, char **argv);
int cli_chat(int argc, char **argv);
/* service/cli-install.c: agentxpu model install|list|use|remove */
int cli_model(int argc, char **argv);

/* Print "agentxpu COMMAND: <msg>" to stderr as one line and return 1 (a failure). */
int cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The same for a usage error: returns 2. */
int cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A line on stderr, as cli_fail's, for what goes on despite it. */
void cli_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* getopt_long() for a subcommand. An option it does not know, or one without its value, gives
 * getopt's message naming the command ("agentxpu ask: unrecognized option '--colour'") and a
 * line pointing to --help; the caller then returns 2. */
int cli_getopt(int argc, char **argv, const char *shortopts, const struct option *longopts);

/* A number option's value in [min, max]; false after a usage error message such as "-n must
 * be a number from 1 to 4294967295, got '4294967296'". cli_double with infinite bounds takes
 * any finite number. */
bool cli_uint(const char *opt, const char *s, uint64_t min, uint64_t max, uint64_t *ret);
bool cli_double(const char *opt, const char *s, double min, double max, double *ret);
/* --kv-type: f16, f32 or q8_0 (AXP_TYPE_F16, AXP_TYPE_F32, AXP_TYPE_Q8_0); false after a usage
 * error message. */
bool cli_kv_type(const char *s, uint32_t *ret);

/* Generated text to standard output, flushed. On a terminal, control characters other than
 * \n and \t are shown as \xNN escapes (axp_write_visible), so a model cannot ring the bell,
 * move the cursor or recolour the terminal; elsewhere (a pipe, a file) the bytes pass
 * unchanged. Returns 0, or -errno when standard output cannot take it (a closed pipe with
 * SIGPIPE ignored, a full disk): the caller stops and fails rather than going on unheard. */
int cli_write_text(const char *s, size_t len);

/* A string the engine reports (a model's name from its GGUF, an error naming what the file
 * holds) in a line of text: every control character as its \xNN escape, newline and tab
 * included, wherever the output goes, since the file it comes from may hold escape sequences
 * or lines made to look like ours. */
void cli_put_visible(const char *s);

/* Text the user gives (a prompt, --stop, --system, a file, a line of chat) must be valid
 * UTF-8: false after a one-line message naming `what` and the first bad byte. */
bool cli_utf8(const char *what, const char *s, size_t len);
/* Text that goes on as a C string (a D-Bus string, a chat template's message) cannot hold a
 * NUL byte: false after a one-line message naming `what` and where the NUL is, rather than
 * the text being cut there without a word. */
bool cli_no_nul(const char *what, const char *s, size_t len);
