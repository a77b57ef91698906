/* SPDX-License-Identifier: MIT */
/* agentxpu: the command line. Each subcommand lives in its own file (cli.h). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "config.h"
#include "base/parse.h"
#include "base/utf8.h"
#include "base/util.h"
#include "heg/seq.h"

typedef struct cli_command {
        const char *name;
        int (*fn)(int argc, char **argv);
        const char *help;
} cli_command;

/* Subcommands present in this build; each line is added with its implementation. */
static const cli_command commands[] = {
        { "generate", cli_generate, "generate text from a model, in-process" },
        { "logits", cli_logits, "write the last prompt position's logits" },
        { "tokenize", cli_tokenize, "print the token ids of a text" },
        { "inspect", cli_inspect, "print a GGUF file's key/values and tensors, and whether it runs and why not" },
        { "quantize", cli_quantize, "requantize a GGUF model into another tensor type or a llama-quantize mix" },
        { "mkmodel", cli_mkmodel, "write a synthetic model with seeded random weights" },
        { "sim", cli_sim, "replay a request trace on a simulated SoC under each scheduling policy" },
        { "bench", cli_bench, "replay a request trace on the real engine under each policy, side by side" },
        { "suggestions", cli_suggestions, "list what agentxpu-monitor suggested" },
        { "devices", cli_devices, "list every device, the roles they take, and graphics telemetry" },
        { "ask", cli_ask, "a reactive request to the engine service; prints the answer as it comes" },
        { "submit", cli_submit, "a proactive request to the engine service" },
        { "chat", cli_chat, "a conversation with the engine service (one flow)" },
        { "status", cli_status, "the engine service's model, devices, policy and queues" },
        { "cancel", cli_cancel, "cancel a request of yours" },
        { "embed", cli_embed, "an embedding of a text from the engine service (a JSON array)" },
        { "forget", cli_forget, "drop what the engine service's prompt cache keeps of your requests" },
        { "model", cli_model, "install, list, choose or remove the engine service's models" },
        { "serve", cli_serve, "OpenAI- and Ollama-compatible HTTP endpoints for your session (agentxpu-http)" },
        { NULL, NULL, NULL },
};

/* The subcommand running, for messages: this process runs one. */
static const char *command_name;

static void vmessage(const char *fmt, va_list ap) {
        if (command_name)
                fprintf(stderr, "agentxpu %s: ", command_name);
        else
                fputs("agentxpu: ", stderr);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
}

int cli_fail(const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vmessage(fmt, ap);
        va_end(ap);
        return 1;
}

void cli_warn(const char *fmt, ...) {
        va_list ap;
        fflush(stdout);
        va_start(ap, fmt);
        vmessage(fmt, ap);
        va_end(ap);
}

int cli_usage_error(const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vmessage(fmt, ap);
        va_end(ap);
        return 2;
}

int cli_getopt(int argc, char **argv, const char *shortopts, const struct option *longopts) {
        char prog[64], *name = argv[0];
        int c;

        /* getopt names the program by argv[0]: the subcommand's full name, just for the call */
        snprintf(prog, sizeof(prog), "agentxpu %s", name);
        argv[0] = prog;
        opterr = 1;
        c = getopt_long(argc, argv, shortopts, longopts, NULL);
        argv[0] = name;
        if (c == '?' || c == ':')
                fprintf(stderr, "'agentxpu %s --help' lists the options.\n", name);
        return c;
}

bool cli_uint(const char *opt, const char *s, uint64_t min, uint64_t max, uint64_t *ret) {
        if (axp_parse_u64(s, min, max, ret) == 0)
                return true;
        cli_usage_error("%s must be a number from %" PRIu64 " to %" PRIu64 ", got '%s'", opt, min, max, s);
        return false;
}

bool cli_double(const char *opt, const char *s, double min, double max, double *ret) {
        if (axp_parse_double(s, min, max, ret) == 0)
                return true;
        if (isinf(min) && isinf(max))
                cli_usage_error("%s must be a number, got '%s'", opt, s);
        else
                cli_usage_error("%s must be a number from %g to %g, got '%s'", opt, min, max, s);
        return false;
}

bool cli_kv_type(const char *s, uint32_t *ret) {
        if (axp_kv_type_from_name(s, ret) == 0)
                return true;
        cli_usage_error("--kv-type must be f16, f32 or q8_0, got '%s'", s);
        return false;
}

bool cli_utf8(const char *what, const char *s, size_t len) {
        size_t at;

        if (axp_utf8_valid(s, len, &at))
                return true;
        cli_fail("%s is not valid UTF-8 (byte 0x%02x at offset %zu)", what, (unsigned char) s[at], at);
        return false;
}

bool cli_no_nul(const char *what, const char *s, size_t len) {
        const char *z = memchr(s, 0, len);

        if (!z)
                return true;
        cli_fail("%s holds a NUL byte at offset %zu, which text cannot carry", what, (size_t) (z - s));
        return false;
}

/* The error of the last write to standard output that failed, for finish_output. */
static int stdout_errno;

int cli_write_text(const char *s, size_t len) {
        static int tty = -1;

        if (tty < 0)
                tty = isatty(STDOUT_FILENO);
        if (tty)
                axp_write_visible(stdout, s, len);
        else
                fwrite(s, 1, len, stdout);
        errno = 0;
        if (fflush(stdout) != 0 || ferror(stdout)) {
                stdout_errno = errno > 0 ? errno : EIO;
                return -stdout_errno;
        }
        return 0;
}

/* Whatever a command printed must have reached standard output: a write that failed (a full
 * disk, a closed pipe with SIGPIPE ignored) is a failure, not a success with output lost. */
static int finish_output(int status) {
        errno = 0;
        if (fflush(stdout) == 0 && !ferror(stdout))
                return status;
        if (status != 0)
                return status;
        return cli_fail("cannot write the output: %s",
                        strerror(errno > 0 ? errno : stdout_errno > 0 ? stdout_errno : EIO));
}

void cli_put_visible(const char *s) {
        axp_visible(s, strlen(s), true, axp_put_file, stdout);
}

static int usage(FILE *f) {
        fprintf(f, "usage: agentxpu COMMAND [OPTIONS]\n\ncommands:\n");
        for (const cli_command *c = commands; c->name; c++)
                fprintf(f, "  %-12s %s\n", c->name, c->help);
        fprintf(f, "  %-12s %s\n", "version", "print the version");
        fprintf(f, "\n'agentxpu COMMAND --help' describes a command's options.\n");
        return f == stderr ? 2 : 0;
}

int main(int argc, char **argv) {
        if (argc < 2)
                return usage(stderr);
        if (strcmp(argv[1], "version") == 0 || strcmp(argv[1], "--version") == 0) {
                printf("agentxpu %s\n", AXP_VERSION);
                return finish_output(0);
        }
        if (strcmp(argv[1], "help") == 0 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)
                return finish_output(usage(stdout));
        for (const cli_command *c = commands; c->name; c++)
                if (strcmp(argv[1], c->name) == 0) {
                        command_name = c->name;
                        return finish_output(c->fn(argc - 1, argv + 1));
                }
        fprintf(stderr, "agentxpu: unknown command '%s'\n", argv[1]);
        return usage(stderr);
}
