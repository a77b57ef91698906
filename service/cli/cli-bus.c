/* SPDX-License-Identifier: MIT */
/* agentxpu ask | submit | status | cancel | chat: the command line as a client of the engine
 * service over D-Bus (the system bus unless --address names another). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/bus-common.h"
#include "cli.h"
#include "cli-bus.h"
#include "base/parse.h"
#include "base/util.h"

#define MAX_STOP 16

/* What the user asked for; only options given on the command line are sent, so the
 * engine's defaults apply to the rest. */
typedef struct GenArgs {
        const char *address;
        bool verbose;
        bool wait;
        uint32_t max_tokens;
        bool has_max_tokens;
        double temperature, top_p, min_p, repeat_penalty, frequency_penalty, presence_penalty;
        bool has_temperature, has_top_p, has_min_p, has_repeat_penalty, has_frequency_penalty,
                has_presence_penalty;
        uint32_t top_k;
        bool has_top_k;
        uint64_t seed;
        bool has_seed;
        const char *stop[MAX_STOP];
        size_t n_stop;
        const char *system;
        bool raw;
        int think; /* -1: as the template, 0 off, 1 on */
        const char *flow;
        char *json_schema, *grammar, *tools; /* the files' text */
        const char *tool_choice;
} GenArgs;

enum {
        ARG_ADDRESS = 0x100,
        ARG_TEMPERATURE,
        ARG_TOP_K,
        ARG_TOP_P,
        ARG_MIN_P,
        ARG_REPEAT_PENALTY,
        ARG_FREQUENCY_PENALTY,
        ARG_PRESENCE_PENALTY,
        ARG_SEED,
        ARG_STOP,
        ARG_SYSTEM,
        ARG_RAW,
        ARG_THINK,
        ARG_FLOW,
        ARG_WAIT,
        ARG_JSON_SCHEMA,
        ARG_GRAMMAR,
        ARG_TOOLS,
        ARG_TOOL_CHOICE,
};

static const struct option gen_options[] = {
        { "address", required_argument, NULL, ARG_ADDRESS },
        { "max-tokens", required_argument, NULL, 'n' },
        { "temperature", required_argument, NULL, ARG_TEMPERATURE },
        { "top-k", required_argument, NULL, ARG_TOP_K },
        { "top-p", required_argument, NULL, ARG_TOP_P },
        { "min-p", required_argument, NULL, ARG_MIN_P },
        { "repeat-penalty", required_argument, NULL, ARG_REPEAT_PENALTY },
        { "frequency-penalty", required_argument, NULL, ARG_FREQUENCY_PENALTY },
        { "presence-penalty", required_argument, NULL, ARG_PRESENCE_PENALTY },
        { "seed", required_argument, NULL, ARG_SEED },
        { "stop", required_argument, NULL, ARG_STOP },
        { "system", required_argument, NULL, ARG_SYSTEM },
        { "raw", no_argument, NULL, ARG_RAW },
        { "think", required_argument, NULL, ARG_THINK },
        { "flow", required_argument, NULL, ARG_FLOW },
        { "json-schema", required_argument, NULL, ARG_JSON_SCHEMA },
        { "grammar", required_argument, NULL, ARG_GRAMMAR },
        { "tools", required_argument, NULL, ARG_TOOLS },
        { "tool-choice", required_argument, NULL, ARG_TOOL_CHOICE },
        { "wait", no_argument, NULL, ARG_WAIT },
        { "verbose", no_argument, NULL, 'v' },
        { "help", no_argument, NULL, 'h' },
        {}
};

static const char gen_options_help[] =
        "  -n, --max-tokens N      generate at most N tokens\n"
        "      --temperature T     0 is greedy\n"
        "      --top-k K           0 disables\n"
        "      --top-p P           1 disables\n"
        "      --min-p P           0 disables\n"
        "      --repeat-penalty R  1 disables\n"
        "      --frequency-penalty F  -2 to 2: less F per time a token is among the last 64\n"
        "      --presence-penalty P   -2 to 2: less P once for such a token\n"
        "      --seed S            sampling seed\n"
        "      --stop STRING       stop before STRING (repeatable)\n"
        "      --system TEXT       system prompt\n"
        "      --raw               no chat template\n"
        "      --think on|off      thinking on or off (off: the template's own switch, as\n"
        "                          Qwen3's enable_thinking)\n"
        "      --json-schema FILE  the answer is JSON valid under the JSON Schema in FILE\n"
        "      --grammar FILE      the answer follows the GBNF grammar in FILE (rule root)\n"
        "      --tools FILE        the tools the model may call (OpenAI's function list, JSON);\n"
        "                          the answer is text or one call ({\"name\", \"arguments\"})\n"
        "      --tool-choice C     auto (text or a call, the default), required (a call) or\n"
        "                          none (text: the tools in the prompt, no call)\n"
        "  -v, --verbose           print how the request finished, and its stats, on stderr\n"
        "      --address ADDRESS   the bus to use (default: the system bus)\n"
        "\nText (the prompt, --stop, --system, a line of chat) must be valid UTF-8; other bytes\n"
        "are refused, saying where (chat refuses the line and goes on). On a terminal, control\n"
        "characters in the answer (all but newline and tab) are shown as \\xNN escapes of their\n"
        "bytes, such as \\x07 for BEL; into a pipe or a file the answer passes unchanged.\n";

/* The files' text parse_gen_args read (--json-schema, --grammar, --tools). */
static void gen_args_done(GenArgs *a) {
        free(a->json_schema);
        free(a->grammar);
        free(a->tools);
        a->json_schema = a->grammar = a->tools = NULL;
}

/* Parses the shared options; returns -1 to go on, or an exit status. --flow and --wait are
 * allowed where allow_flow and allow_wait say. Text must be valid UTF-8, numbers fit their
 * D-Bus types; the engine judges their ranges. */
static int parse_gen_args(int argc, char **argv, const char *usage, bool allow_flow, bool allow_wait,
                          GenArgs *a) {
        uint64_t v;
        int c;

        *a = (GenArgs) { .think = -1 };
        optind = 1;
        while ((c = cli_getopt(argc, argv, "n:vh", gen_options)) >= 0)
                switch (c) {
                case ARG_ADDRESS:
                        a->address = optarg;
                        break;
                case 'n':
                        if (!cli_uint("-n", optarg, 1, UINT32_MAX, &v))
                                return 2;
                        a->max_tokens = (uint32_t) v;
                        a->has_max_tokens = true;
                        break;
                case ARG_TEMPERATURE:
                        if (!cli_double("--temperature", optarg, -HUGE_VAL, HUGE_VAL, &a->temperature))
                                return 2;
                        a->has_temperature = true;
                        break;
                case ARG_TOP_K:
                        if (!cli_uint("--top-k", optarg, 0, UINT32_MAX, &v))
                                return 2;
                        a->top_k = (uint32_t) v;
                        a->has_top_k = true;
                        break;
                case ARG_TOP_P:
                        if (!cli_double("--top-p", optarg, -HUGE_VAL, HUGE_VAL, &a->top_p))
                                return 2;
                        a->has_top_p = true;
                        break;
                case ARG_MIN_P:
                        if (!cli_double("--min-p", optarg, -HUGE_VAL, HUGE_VAL, &a->min_p))
                                return 2;
                        a->has_min_p = true;
                        break;
                case ARG_REPEAT_PENALTY:
                        if (!cli_double("--repeat-penalty", optarg, -HUGE_VAL, HUGE_VAL, &a->repeat_penalty))
                                return 2;
                        a->has_repeat_penalty = true;
                        break;
                case ARG_FREQUENCY_PENALTY:
                        if (!cli_double("--frequency-penalty", optarg, -HUGE_VAL, HUGE_VAL, &a->frequency_penalty))
                                return 2;
                        a->has_frequency_penalty = true;
                        break;
                case ARG_PRESENCE_PENALTY:
                        if (!cli_double("--presence-penalty", optarg, -HUGE_VAL, HUGE_VAL, &a->presence_penalty))
                                return 2;
                        a->has_presence_penalty = true;
                        break;
                case ARG_SEED:
                        if (!cli_uint("--seed", optarg, 0, UINT64_MAX, &a->seed))
                                return 2;
                        a->has_seed = true;
                        break;
                case ARG_STOP:
                        if (a->n_stop >= MAX_STOP)
                                return cli_usage_error("at most %d --stop strings, '%s' is one too many", MAX_STOP,
                                                       optarg);
                        if (!cli_utf8("--stop", optarg, strlen(optarg)))
                                return 1;
                        a->stop[a->n_stop++] = optarg;
                        break;
                case ARG_SYSTEM:
                        if (!cli_utf8("--system", optarg, strlen(optarg)))
                                return 1;
                        a->system = optarg;
                        break;
                case ARG_RAW:
                        a->raw = true;
                        break;
                case ARG_THINK:
                        if (strcmp(optarg, "on") != 0 && strcmp(optarg, "off") != 0)
                                return cli_usage_error("--think must be on or off, got '%s'", optarg);
                        a->think = strcmp(optarg, "on") == 0;
                        break;
                case ARG_FLOW:
                        if (!allow_flow)
                                return cli_usage_error("--flow does not apply here");
                        if (!sd_bus_object_path_is_valid(optarg))
                                return cli_usage_error("--flow '%s' is not a flow path (/org/agentxpu/Engine/flow/N)",
                                                       optarg);
                        a->flow = optarg;
                        break;
                case ARG_TOOL_CHOICE:
                        a->tool_choice = optarg;
                        break;
                case ARG_TOOLS:
                case ARG_JSON_SCHEMA:
                case ARG_GRAMMAR: {
                        axp_error err = {};
                        const char *flag = c == ARG_GRAMMAR ? "--grammar" : c == ARG_TOOLS ? "--tools" : "--json-schema";
                        char **dst = c == ARG_GRAMMAR ? &a->grammar : c == ARG_TOOLS ? &a->tools : &a->json_schema;
                        size_t len;
                        free(*dst);
                        *dst = NULL;
                        if (axp_read_file(optarg, AXP_TEXT_FILE_MAX, dst, &len, &err) < 0)
                                return cli_fail("%s", err.msg);
                        if (!cli_utf8(flag, *dst, len) || !cli_no_nul(flag, *dst, len))
                                return 1;
                        break;
                }
                case ARG_WAIT:
                        if (!allow_wait)
                                return cli_usage_error("--wait does not apply here");
                        a->wait = true;
                        break;
                case 'v':
                        a->verbose = true;
                        break;
                case 'h':
                        printf("%s\n%s", usage, gen_options_help);
                        return 0;
                default:
                        return 2;
                }
        return -1;
}

/* The options a{sv} of a Reactive, Proactive or Complete call. */
static int append_options(sd_bus_message *m, const GenArgs *a, const char *flow) {
        int r;

        r = sd_bus_message_open_container(m, 'a', "{sv}");
        if (r >= 0 && a->has_max_tokens)
                r = sd_bus_message_append(m, "{sv}", "max_tokens", "u", a->max_tokens);
        if (r >= 0 && a->has_temperature)
                r = sd_bus_message_append(m, "{sv}", "temperature", "d", a->temperature);
        if (r >= 0 && a->has_top_k)
                r = sd_bus_message_append(m, "{sv}", "top_k", "u", a->top_k);
        if (r >= 0 && a->has_top_p)
                r = sd_bus_message_append(m, "{sv}", "top_p", "d", a->top_p);
        if (r >= 0 && a->has_min_p)
                r = sd_bus_message_append(m, "{sv}", "min_p", "d", a->min_p);
        if (r >= 0 && a->has_repeat_penalty)
                r = sd_bus_message_append(m, "{sv}", "repeat_penalty", "d", a->repeat_penalty);
        if (r >= 0 && a->has_frequency_penalty)
                r = sd_bus_message_append(m, "{sv}", "frequency_penalty", "d", a->frequency_penalty);
        if (r >= 0 && a->has_presence_penalty)
                r = sd_bus_message_append(m, "{sv}", "presence_penalty", "d", a->presence_penalty);
        if (r >= 0 && a->has_seed)
                r = sd_bus_message_append(m, "{sv}", "seed", "t", a->seed);
        if (r >= 0 && a->n_stop > 0) {
                const char *strv[MAX_STOP + 1] = {};

                memcpy(strv, a->stop, a->n_stop * sizeof(char *));
                r = sd_bus_message_open_container(m, 'e', "sv");
                if (r >= 0)
                        r = sd_bus_message_append(m, "s", "stop");
                if (r >= 0)
                        r = sd_bus_message_open_container(m, 'v', "as");
                if (r >= 0)
                        r = sd_bus_message_append_strv(m, (char **) strv);
                if (r >= 0)
                        r = sd_bus_message_close_container(m);
                if (r >= 0)
                        r = sd_bus_message_close_container(m);
        }
        if (r >= 0 && a->system && !flow)
                r = sd_bus_message_append(m, "{sv}", "system", "s", a->system);
        if (r >= 0 && a->raw && !flow)
                r = sd_bus_message_append(m, "{sv}", "raw", "b", 1);
        if (r >= 0 && a->think >= 0)
                r = sd_bus_message_append(m, "{sv}", "think", "b", a->think);
        if (r >= 0 && flow)
                r = sd_bus_message_append(m, "{sv}", "flow", "o", flow);
        if (r >= 0 && a->json_schema)
                r = sd_bus_message_append(m, "{sv}", "json_schema", "s", a->json_schema);
        if (r >= 0 && a->grammar)
                r = sd_bus_message_append(m, "{sv}", "grammar", "s", a->grammar);
        if (r >= 0 && a->tools)
                r = sd_bus_message_append(m, "{sv}", "tools", "s", a->tools);
        if (r >= 0 && a->tool_choice)
                r = sd_bus_message_append(m, "{sv}", "tool_choice", "s", a->tool_choice);
        if (r >= 0)
                r = sd_bus_message_close_container(m);
        return r;
}

/* Ctrl-C and SIGTERM while a command waits on the bus. The handler counts them and writes a
 * byte to a pipe that cli_bus_wait() polls beside the bus: one that lands after a loop
 * looked at the count and before it waits wakes the wait at once, where sd_bus_wait() would
 * sleep on until the bus's next message (the next token or progress signal, if any came). */
static volatile sig_atomic_t interrupted;
static int interrupt_pipe[2] = { -1, -1 };

static void on_interrupt(int sig) {
        int saved_errno = errno;

        interrupted++;
        /* the count first: a wait that wakes for the byte finds it */
        if (interrupt_pipe[1] >= 0 && write(interrupt_pipe[1], "", 1) < 0) {
                /* the pipe is full: a byte is already waiting */
        }
        errno = saved_errno;
}

int cli_catch_interrupts(void) {
        struct sigaction sa = { .sa_handler = on_interrupt };

        if (interrupt_pipe[0] < 0 && pipe2(interrupt_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
                return cli_fail("cannot make a pipe: %s", strerror(errno));
        /* No SA_RESTART: chat's read of a line ends with EINTR. */
        sigemptyset(&sa.sa_mask);
        (void) sigaction(SIGINT, &sa, NULL);
        (void) sigaction(SIGTERM, &sa, NULL);
        return 0;
}

unsigned cli_interrupted(void) {
        return (unsigned) interrupted;
}

void cli_interrupted_reset(void) {
        interrupted = 0;
}

/* Waits for fd's events, the timeout or a Ctrl-C (the handler's byte in the pipe, which stays
 * there if it came before the wait began). */
static int wait_or_interrupt(int fd, short events, int timeout_ms) {
        struct pollfd p[2] = {
                { .fd = fd, .events = events },
                { .fd = interrupt_pipe[0], .events = POLLIN },
        };
        char drain[64];

        if (poll(p, 2, timeout_ms) < 0 && errno != EINTR)
                return -errno;
        while (p[1].fd >= 0 && read(p[1].fd, drain, sizeof(drain)) > 0)
                ;
        return 0;
}

int cli_bus_wait(sd_bus *bus) {
        uint64_t until;
        int fd = sd_bus_get_fd(bus), events, timeout_ms = -1, r;

        if (fd < 0)
                return fd;
        events = sd_bus_get_events(bus);
        if (events < 0)
                return events;
        r = sd_bus_get_timeout(bus, &until);
        if (r < 0)
                return r;
        if (until != UINT64_MAX) {
                struct timespec ts;
                uint64_t now;

                clock_gettime(CLOCK_MONOTONIC, &ts);
                now = (uint64_t) ts.tv_sec * UINT64_C(1000000) + (uint64_t) ts.tv_nsec / 1000;
                timeout_ms = until <= now ? 0 : (int) MIN((until - now + 999) / 1000, (uint64_t) INT_MAX);
        }
        return wait_or_interrupt(fd, (short) events, timeout_ms);
}

/* The bus at `address`, or the system bus; on failure one line saying what to check. */
int connect_engine(const char *address, sd_bus **ret) {
        int r = axp_bus_open(address, "agentxpu", ret);

        if (r < 0 && !address)
                return cli_fail("cannot connect to the system bus (%s); is the system bus running and the engine "
                                "installed? Use --address ADDRESS for a private bus", strerror(-r));
        if (r < 0)
                return cli_fail("cannot connect to %s (%s); is it a D-Bus address with a bus listening there?",
                                address, strerror(-r));
        return 0;
}

/* A failed call as one line a person can act on; `address` as connect_engine took it. */
int call_fail(const char *what, const char *address, const sd_bus_error *e, int r) {
        /* Nothing owns the name and the bus has no service file to start it with. */
        if (sd_bus_error_has_name(e, SD_BUS_ERROR_SERVICE_UNKNOWN) && !address)
                return cli_fail("the engine is not installed: no service on the system bus provides " AXP_BUS_NAME);
        if (sd_bus_error_has_name(e, SD_BUS_ERROR_SERVICE_UNKNOWN))
                return cli_fail("the engine is not running on %s; start agentxpu-engine --address %s",
                                address, address);
        if (sd_bus_error_has_name(e, SD_BUS_ERROR_NAME_HAS_NO_OWNER))
                return cli_fail("the engine is not running (" AXP_BUS_NAME " is not on the bus)");
        /* The bus tried to start it (directly or through systemd) and that failed. */
        if (e && e->name && (strncmp(e->name, "org.freedesktop.DBus.Error.Spawn.", 33) == 0 ||
                             strncmp(e->name, "org.freedesktop.systemd1.", 25) == 0))
                return cli_fail("the engine could not be started: %s (journalctl -u agentxpu-engine says more)",
                                e->message ?: e->name);
        if (sd_bus_error_has_name(e, SD_BUS_ERROR_UNKNOWN_OBJECT))
                return cli_fail("%s: no such request (finished and gone, or never made)", what);
        if (e && e->message)
                return cli_fail("%s: %s", what, e->message);
        return cli_fail("%s: %s", what, strerror(-r));
}

typedef struct Stats {
        uint32_t prompt_tokens, prefill_tokens, generated_tokens, preemptions;
        double queue_wait_s, ttft_s, tpot_s, latency_s;
        char error[256];
        char finish_reason[32]; /* with tools: "tool_calls" or how it finished */
        char *tool_call;        /* with tools: the call, if the answer is one */
} Stats;

/* Reads a stats a{sv}; keys it does not know are skipped (a newer engine may add some). */
static int stats_read(sd_bus_message *m, Stats *st) {
        const char *error = NULL, *finish_reason = NULL, *tool_call = NULL;
        const cli_dict_field fields[] = {
                { "prompt_tokens", 'u', &st->prompt_tokens },   { "prefill_tokens", 'u', &st->prefill_tokens },
                { "generated_tokens", 'u', &st->generated_tokens }, { "preemptions", 'u', &st->preemptions },
                { "queue_wait_s", 'd', &st->queue_wait_s },     { "ttft_s", 'd', &st->ttft_s },
                { "tpot_s", 'd', &st->tpot_s },                 { "latency_s", 'd', &st->latency_s },
                { "error", 's', &error },                       { "finish_reason", 's', &finish_reason },
                { "tool_call", 's', &tool_call },
        };
        int r = cli_read_dict(m, fields, sizeof(fields) / sizeof(fields[0]));

        if (r < 0)
                return r;
        if (error)
                snprintf(st->error, sizeof(st->error), "%s", error);
        if (finish_reason)
                snprintf(st->finish_reason, sizeof(st->finish_reason), "%s", finish_reason);
        if (tool_call) {
                free(st->tool_call);
                st->tool_call = strdup(tool_call);
        }
        return 0;
}

static void stats_print(FILE *f, const char *reason, const Stats *st) {
        fprintf(f, "finished: %s, prompt %u tokens (%u prefilled), %u generated, ttft %.3fs, "
                   "tpot %.3fs, latency %.3fs, queue wait %.3fs, %u preemptions\n",
                reason, st->prompt_tokens, st->prefill_tokens, st->generated_tokens, st->ttft_s,
                st->tpot_s, st->latency_s, st->queue_wait_s, st->preemptions);
        if (st->finish_reason[0])
                fprintf(f, "finish_reason: %s\n", st->finish_reason);
        if (st->tool_call)
                fprintf(f, "tool_call: %s\n", st->tool_call);
}

/* One request being followed: its tokens printed or collected, its Finished awaited. */
typedef struct Stream {
        char *path;
        bool print;
        bool finished;
        char reason[32];
        Stats stats;
        char *text;
        size_t len, cap;
        bool ends_in_newline;
        bool engine_lost;       /* the engine left the bus before Finished */
        bool refused;           /* the engine refused this request's text or options */
        int write_error;        /* standard output refused the answer (errno) */
        sd_bus_slot *owner_slot;
} Stream;

static void stream_done(Stream *s) {
        sd_bus_slot_unref(s->owner_slot);
        free(s->path);
        free(s->text);
        free(s->stats.tool_call);
}

static int stream_append(Stream *s, const char *text) {
        size_t n = strlen(text);

        if (s->len + n + 1 > s->cap) {
                size_t cap = MAX(s->cap * 2, s->len + n + 1);
                char *p = realloc(s->text, cap);
                if (!p)
                        return -ENOMEM;
                s->text = p;
                s->cap = cap;
        }
        memcpy(s->text + s->len, text, n + 1);
        s->len += n;
        return 0;
}

static int on_request_signal(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        Stream *s = userdata;
        const char *text;
        int r;

        /* Only ours: the match covers every request object of the engine. */
        if (!s->path || s->finished || strcmp(sd_bus_message_get_path(m) ?: "", s->path) != 0)
                return 0;

        if (sd_bus_message_is_signal(m, AXP_BUS_REQUEST_IFACE, "Token")) {
                r = sd_bus_message_read(m, "s", &text);
                if (r < 0 || !*text)
                        return 0;
                if (s->print) {
                        r = cli_write_text(text, strlen(text));
                        if (r < 0 && !s->write_error)
                                s->write_error = -r;
                        s->ends_in_newline = text[strlen(text) - 1] == '\n';
                } else if (stream_append(s, text) < 0)
                        return -ENOMEM;
        } else if (sd_bus_message_is_signal(m, AXP_BUS_REQUEST_IFACE, "Finished")) {
                r = sd_bus_message_read(m, "s", &text);
                if (r >= 0) {
                        snprintf(s->reason, sizeof(s->reason), "%s", text);
                        (void) stats_read(m, &s->stats);
                }
                s->finished = true;
        }
        return 0;
}

/* The engine's name lost its owner (it crashed or was stopped): no Finished will come. */
static int on_engine_owner(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        Stream *s = userdata;
        const char *name, *old_owner, *new_owner;

        if (sd_bus_message_read(m, "sss", &name, &old_owner, &new_owner) >= 0 && !*new_owner)
                s->engine_lost = true;
        return 0;
}

/* Subscribe to the engine's request signals, and to its leaving the bus; do this before
 * submitting (signals from one sender arrive in order, and those that come while a call
 * waits for its reply are kept). */
static int stream_subscribe(sd_bus *bus, Stream *s, sd_bus_slot **ret_slot) {
        int r = sd_bus_match_signal(bus, ret_slot, AXP_BUS_NAME, NULL, AXP_BUS_REQUEST_IFACE, NULL,
                                    on_request_signal, s);
        if (r >= 0)
                r = sd_bus_add_match(bus, &s->owner_slot,
                                     "type='signal',sender='org.freedesktop.DBus',"
                                     "interface='org.freedesktop.DBus',member='NameOwnerChanged',"
                                     "arg0='" AXP_BUS_NAME "'",
                                     on_engine_owner, s);
        if (r < 0)
                return cli_fail("cannot subscribe to the engine's signals: %s", strerror(-r));
        return 0;
}

static int stream_wait(sd_bus *bus, Stream *s) {
        bool cancel_sent = false;
        int r;

        while (!s->finished) {
                if (s->engine_lost)
                        return -ECONNRESET;
                if (cli_interrupted() >= 2)
                        return -EINTR;
                if (s->write_error) {
                        /* nobody reads the answer: stop the engine making it */
                        (void) sd_bus_call_method_async(bus, NULL, AXP_BUS_NAME, s->path, AXP_BUS_REQUEST_IFACE,
                                                        "Cancel", NULL, NULL, NULL);
                        return -EPIPE;
                }
                if (cli_interrupted() && !cancel_sent) {
                        r = sd_bus_call_method_async(bus, NULL, AXP_BUS_NAME, s->path, AXP_BUS_REQUEST_IFACE,
                                                     "Cancel", NULL, NULL, NULL);
                        if (r < 0)
                                return r;
                        cancel_sent = true;
                }
                r = sd_bus_process(bus, NULL);
                if (r < 0)
                        return r;
                if (r > 0)
                        continue;
                r = cli_bus_wait(bus);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* The exit status for how a request ended. */
static int stream_result(const Stream *s, bool verbose) {
        if (verbose)
                stats_print(stderr, s->reason, &s->stats);
        if (strcmp(s->reason, "stop") == 0 || strcmp(s->reason, "length") == 0)
                return 0;
        if (strcmp(s->reason, "cancelled") == 0)
                return cli_fail("the request was cancelled");
        return cli_fail("generation failed: %s", s->stats.error[0] ? s->stats.error : s->reason);
}

/* Submit one request and follow it to its end. */
static int run_request(sd_bus *bus, const char *method, const char *prompt, const GenArgs *a,
                       const char *flow, bool print_path, bool print_tokens, Stream *s) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL, *reply = NULL;
        _cleanup_bus_error_ sd_bus_error e = SD_BUS_ERROR_NULL;
        const char *path;
        int r;

        r = sd_bus_message_new_method_call(bus, &m, AXP_BUS_NAME, AXP_BUS_PATH, AXP_BUS_IFACE, method);
        if (r >= 0)
                r = sd_bus_message_append(m, "s", prompt);
        if (r >= 0)
                r = append_options(m, a, flow);
        if (r < 0)
                return cli_fail("cannot build the %s call: %s", method, strerror(-r));
        r = sd_bus_call(bus, m, 0, &e, &reply);
        if (r < 0) {
                s->refused = sd_bus_error_has_name(&e, AXP_ERROR_INVALID_ARGUMENT) ||
                             sd_bus_error_has_name(&e, AXP_ERROR_CONTEXT_OVERFLOW);
                return call_fail(method, a->address, &e, r);
        }
        r = sd_bus_message_read(reply, "o", &path);
        if (r < 0)
                return cli_fail("unexpected reply to %s: %s", method, strerror(-r));

        s->path = strdup(path);
        s->print = print_tokens;
        if (!s->path)
                return cli_fail("out of memory");
        if (print_path) {
                printf("%s\n", path);
                fflush(stdout);
        }
        if (a->verbose)
                fprintf(stderr, "request %s\n", path);
        r = stream_wait(bus, s);
        if (r == -EINTR)
                return cli_fail("interrupted");
        if (r == -ECONNRESET)
                return cli_fail("the engine left the bus before %s finished", path);
        if (r == -EPIPE && s->write_error)
                return cli_fail("cannot write the answer: %s; %s cancelled", strerror(s->write_error), path);
        if (r < 0)
                return cli_fail("lost the engine while waiting for %s: %s", path, strerror(-r));
        return -1; /* go on: the caller reports the result */
}

static int gen_command(int argc, char **argv, bool reactive) {
        _cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
        _cleanup_(sd_bus_slot_unrefp) sd_bus_slot *slot = NULL;
        Stream s = {};
        _cleanup_(gen_args_done) GenArgs a = {};
        int r;

        r = parse_gen_args(argc, argv,
                           reactive ? "usage: agentxpu ask [OPTIONS] PROMPT\n\n"
                                      "A reactive (foreground) request; prints the answer as it is generated."
                                    : "usage: agentxpu submit [OPTIONS] PROMPT\n\n"
                                      "A proactive (background) request. Prints the request's path at once,\n"
                                      "then the answer when it is complete; --wait streams it instead. The\n"
                                      "request lives as long as this command (Ctrl-C cancels it).\n\n"
                                      "      --wait              print tokens as they arrive\n"
                                      "      --flow PATH         continue a flow",
                           true, !reactive, &a);
        if (r >= 0)
                return r;
        if (optind + 1 != argc)
                return cli_usage_error("wants exactly one PROMPT (quote it)");
        if (!cli_utf8("the prompt", argv[optind], strlen(argv[optind])))
                return 1;

        if (connect_engine(a.address, &bus) != 0)
                return 1;
        if (stream_subscribe(bus, &s, &slot) != 0 || cli_catch_interrupts() != 0)
                return 1;

        r = run_request(bus, reactive ? "Reactive" : "Proactive", argv[optind], &a, a.flow,
                        !reactive, reactive || a.wait, &s);
        if (r < 0) {
                /* End the answer with exactly one newline. */
                if (!s.print && s.text)
                        cli_write_text(s.text, s.len);
                if ((s.print && !s.ends_in_newline) || (!s.print && (!s.text || s.text[s.len - 1] != '\n')))
                        putchar('\n');
                fflush(stdout);
                r = stream_result(&s, a.verbose);
        }
        stream_done(&s);
        return r;
}

int cli_ask(int argc, char **argv) {
        return gen_command(argc, argv, true);
}

int cli_submit(int argc, char **argv) {
        return gen_command(argc, argv, false);
}

int cli_chat(int argc, char **argv) {
        _cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
        _cleanup_(sd_bus_slot_unrefp) sd_bus_slot *slot = NULL;
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL, *reply = NULL;
        _cleanup_bus_error_ sd_bus_error e = SD_BUS_ERROR_NULL;
        _cleanup_free_ char *line = NULL, *flow = NULL;
        bool tty = isatty(STDIN_FILENO);
        size_t cap = 0;
        unsigned lineno = 0;
        const char *p;
        _cleanup_(gen_args_done) GenArgs a = {};
        int r, status = 0;

        r = parse_gen_args(argc, argv,
                           "usage: agentxpu chat [OPTIONS]\n\n"
                           "A conversation in the terminal: each line is a turn of one flow, so a\n"
                           "turn prefills only its new tokens. End with Ctrl-D.",
                           false, false, &a);
        if (r >= 0)
                return r;
        if (optind != argc)
                return cli_usage_error("takes no arguments; type the turns");

        if (connect_engine(a.address, &bus) != 0)
                return 1;
        r = sd_bus_message_new_method_call(bus, &m, AXP_BUS_NAME, AXP_BUS_PATH, AXP_BUS_IFACE, "OpenFlow");
        if (r >= 0)
                r = sd_bus_message_open_container(m, 'a', "{sv}");
        if (r >= 0 && a.system)
                r = sd_bus_message_append(m, "{sv}", "system", "s", a.system);
        if (r >= 0 && a.raw)
                r = sd_bus_message_append(m, "{sv}", "raw", "b", 1);
        if (r >= 0)
                r = sd_bus_message_close_container(m);
        if (r >= 0)
                r = sd_bus_call(bus, m, 0, &e, &reply);
        if (r < 0)
                return call_fail("OpenFlow", a.address, &e, r);
        r = sd_bus_message_read(reply, "o", &p);
        if (r < 0 || !(flow = strdup(p)))
                return cli_fail("unexpected reply to OpenFlow");
        if (a.verbose)
                fprintf(stderr, "flow %s\n", flow);
        if (cli_catch_interrupts() != 0) {
                status = 1;
                goto close;
        }
        /* Unbuffered, so that a wait on standard input sees every byte not yet read: a Ctrl-C
         * at the prompt ends the chat even where it lands just before the read. */
        setvbuf(stdin, NULL, _IONBF, 0);

        for (;;) {
                _cleanup_(stream_done) Stream s = {};
                ssize_t n;

                if (tty) {
                        fputs("> ", stdout);
                        fflush(stdout);
                }
                if (wait_or_interrupt(STDIN_FILENO, POLLIN, -1) < 0 || cli_interrupted())
                        break;
                n = getline(&line, &cap, stdin);
                if (n < 0 || cli_interrupted())
                        break;
                lineno++;
                while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
                        line[--n] = 0;
                if (n == 0)
                        continue;
                /* a line that cannot be sent is refused; the conversation goes on */
                char what[32];
                snprintf(what, sizeof(what), "line %u", lineno);
                if (!cli_utf8(what, line, (size_t) n) || !cli_no_nul(what, line, (size_t) n)) {
                        status = 1;
                        continue;
                }

                slot = sd_bus_slot_unref(slot);
                if (stream_subscribe(bus, &s, &slot) != 0) {
                        status = 1;
                        break;
                }
                r = run_request(bus, "Reactive", line, &a, flow, false, true, &s);
                if (r >= 0 && s.refused) {
                        /* that line only (too long for the context, ...): the flow is as it was */
                        status = 1;
                        continue;
                }
                if (r >= 0) {
                        status = r;
                        break;
                }
                if (!s.ends_in_newline)
                        putchar('\n');
                fflush(stdout);
                if (stream_result(&s, a.verbose) != 0 && strcmp(s.reason, "cancelled") != 0) {
                        status = 1;
                        break;
                }
                cli_interrupted_reset(); /* Ctrl-C cancelled this turn, not the chat */
        }

close:
        sd_bus_error_free(&e);
        r = sd_bus_call_method(bus, AXP_BUS_NAME, AXP_BUS_PATH, AXP_BUS_IFACE, "CloseFlow", &e, NULL, "o", flow);
        if (r < 0 && status == 0)
                status = call_fail("CloseFlow", a.address, &e, r);
        return status;
}

/* The options of a command that takes --address and --help alone, and no argument or
 * (n_args 1) a request's path after them: 0 to go on (*ret_address set, NULL for the system
 * bus), -1 after --help printed usage, 2 for a usage error. */
static int address_options(int argc, char **argv, const char *usage, int n_args, const char **ret_address) {
        static const struct option options[] = {
                { "address", required_argument, NULL, ARG_ADDRESS },
                { "help", no_argument, NULL, 'h' },
                {}
        };
        int c;

        *ret_address = NULL;
        optind = 1;
        while ((c = cli_getopt(argc, argv, "h", options)) >= 0)
                switch (c) {
                case ARG_ADDRESS:
                        *ret_address = optarg;
                        break;
                case 'h':
                        fputs(usage, stdout);
                        return -1;
                default:
                        return 2;
                }
        if (argc - optind != n_args)
                return n_args ? cli_usage_error("wants exactly one request PATH") : cli_usage_error("takes no arguments");
        return 0;
}

int cli_cancel(int argc, char **argv) {
        _cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
        _cleanup_bus_error_ sd_bus_error e = SD_BUS_ERROR_NULL;
        const char *address;
        int r;

        r = address_options(argc, argv,
                            "usage: agentxpu cancel [--address ADDRESS] PATH\n\n"
                            "Cancel a request of yours (PATH as submit printed it).\n",
                            1, &address);
        if (r != 0)
                return MAX(r, 0);
        if (!sd_bus_object_path_is_valid(argv[optind]))
                return cli_usage_error("'%s' is not an object path", argv[optind]);

        if (connect_engine(address, &bus) != 0)
                return 1;
        r = sd_bus_call_method(bus, AXP_BUS_NAME, argv[optind], AXP_BUS_REQUEST_IFACE, "Cancel", &e, NULL, NULL);
        if (r < 0)
                return call_fail(argv[optind], address, &e, r);
        return 0;
}

int cli_forget(int argc, char **argv) {
        _cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
        _cleanup_bus_error_ sd_bus_error e = SD_BUS_ERROR_NULL;
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        const char *address;
        uint32_t n = 0;
        int r;

        r = address_options(argc, argv,
                            "usage: agentxpu forget [--address ADDRESS]\n\n"
                            "Drop what the engine service's prompt cache keeps of your earlier requests (their\n"
                            "KV caches and tokens); your requests still running keep none when they end.\n"
                            "Conversations you keep open (chat, flows) are yours to close.\n",
                            0, &address);
        if (r != 0)
                return MAX(r, 0);

        if (connect_engine(address, &bus) != 0)
                return 1;
        r = sd_bus_call_method(bus, AXP_BUS_NAME, AXP_BUS_PATH, AXP_BUS_IFACE, "ForgetPromptCache", &e, &reply,
                               NULL);
        if (r < 0)
                return call_fail("ForgetPromptCache", address, &e, r);
        r = sd_bus_message_read(reply, "u", &n);
        if (r < 0)
                return cli_fail("unexpected reply to ForgetPromptCache: %s", strerror(-r));
        printf("%u cached prompt%s dropped\n", n, n == 1 ? "" : "s");
        return 0;
}

static int print_devices(sd_bus_message *m) {
        const char *name, *kind;
        int r, n = 0;

        r = sd_bus_message_enter_container(m, 'a', "(ssa{sv})");
        if (r < 0)
                return r;
        while ((r = sd_bus_message_enter_container(m, 'r', "ssa{sv}")) > 0) {
                const char *backend = "?";
                uint64_t memory = 0;
                char roles[64] = "";

                r = sd_bus_message_read(m, "ss", &name, &kind);
                if (r < 0)
                        return r;
                r = sd_bus_message_enter_container(m, 'a', "{sv}");
                if (r < 0)
                        return r;
                while ((r = sd_bus_message_enter_container(m, 'e', "sv")) > 0) {
                        const char *key, *contents, *role;

                        r = sd_bus_message_read(m, "s", &key);
                        if (r >= 0)
                                r = sd_bus_message_peek_type(m, NULL, &contents);
                        if (r < 0)
                                return r;
                        if (strcmp(key, "backend") == 0 && strcmp(contents, "s") == 0)
                                r = sd_bus_message_read(m, "v", "s", &backend);
                        else if (strcmp(key, "memory_bytes") == 0 && strcmp(contents, "t") == 0)
                                r = sd_bus_message_read(m, "v", "t", &memory);
                        else if (strcmp(key, "roles") == 0 && strcmp(contents, "as") == 0) {
                                r = sd_bus_message_enter_container(m, 'v', "as");
                                if (r >= 0)
                                        r = sd_bus_message_enter_container(m, 'a', "s");
                                while (r >= 0 && (r = sd_bus_message_read(m, "s", &role)) > 0) {
                                        if (roles[0])
                                                strncat(roles, "+", sizeof(roles) - strlen(roles) - 1);
                                        strncat(roles, role, sizeof(roles) - strlen(roles) - 1);
                                }
                                if (r >= 0)
                                        r = sd_bus_message_exit_container(m);
                                if (r >= 0)
                                        r = sd_bus_message_exit_container(m);
                        } else
                                r = sd_bus_message_skip(m, "v");
                        if (r >= 0)
                                r = sd_bus_message_exit_container(m);
                        if (r < 0)
                                return r;
                }
                if (r >= 0)
                        r = sd_bus_message_exit_container(m);
                if (r >= 0)
                        r = sd_bus_message_exit_container(m);
                if (r < 0)
                        return r;
                printf("%s%s (%s, backend %s, roles %s, %.1f GiB)\n", n++ ? "          " : "Devices:  ",
                       name, kind, backend, roles[0] ? roles : "none", (double) memory / (1 << 30));
        }
        if (r < 0)
                return r;
        if (n == 0)
                printf("Devices:  none\n");
        return sd_bus_message_exit_container(m);
}

int cli_read_dict(sd_bus_message *m, const cli_dict_field *fields, size_t n) {
        int r;

        r = sd_bus_message_enter_container(m, 'a', "{sv}");
        while (r >= 0 && (r = sd_bus_message_enter_container(m, 'e', "sv")) > 0) {
                const cli_dict_field *f = NULL;
                const char *key, *contents;

                r = sd_bus_message_read(m, "s", &key);
                if (r >= 0)
                        r = sd_bus_message_peek_type(m, NULL, &contents);
                if (r < 0)
                        break;
                for (size_t i = 0; i < n && !f; i++)
                        if (strcmp(fields[i].key, key) == 0 && contents[0] == fields[i].type && !contents[1])
                                f = &fields[i];
                if (f) {
                        const char sig[2] = { f->type, 0 };
                        r = sd_bus_message_read(m, "v", sig, f->ret);
                } else
                        r = sd_bus_message_skip(m, "v");
                if (r >= 0)
                        r = sd_bus_message_exit_container(m);
        }
        if (r >= 0)
                r = sd_bus_message_exit_container(m);
        return r;
}

/* The CPU guard (a{sv}): the scheduling class of proactive work, the pressure and the share
 * proactive work may take now. */
static int print_cpu_guard(sd_bus_message *m) {
        const char *priority = "?", *source = "?";
        double pressure = 0, share = 1, setting = 1;
        const cli_dict_field fields[] = {
                { "priority", 's', &priority },      { "pressure_source", 's', &source },
                { "pressure", 'd', &pressure },      { "proactive_share", 'd', &share },
                { "share_setting", 'd', &setting },
        };
        int r;

        r = cli_read_dict(m, fields, sizeof(fields) / sizeof(fields[0]));
        if (r < 0)
                return r;
        printf("CPU:      proactive work at %s priority, may take %.0f%% of the CPU now "
               "(%.0f%% at full pressure); CPU pressure %.2f (%s)\n",
               priority, share * 100, setting * 100, pressure, source);
        return 0;
}

/* ModelInfo: "llama, 1.24 billion parameters, Q4_K_M, context 4096, chat template llama3
 * (takes tools)"; nothing while no model is loaded. */
static int print_model_info(sd_bus_message *m) {
        const char *arch = "", *file_type = "", *chat = "";
        uint64_t params = 0;
        uint32_t n_ctx = 0;
        int tools = 0, fim = 0, r;
        const cli_dict_field fields[] = {
                { "architecture", 's', &arch },      { "file_type", 's', &file_type },
                { "chat_template", 's', &chat },     { "parameters", 't', &params },
                { "context_length", 'u', &n_ctx },   { "tools", 'b', &tools },
                { "fim", 'b', &fim },
        };

        r = cli_read_dict(m, fields, sizeof(fields) / sizeof(fields[0]));
        if (r < 0)
                return r;
        if (*arch) {
                const bool billions = params >= 1000000000;
                printf("          ");
                cli_put_visible(arch);
                printf(", %.*f %s parameters, %s, context %u, chat template %s%s%s\n", billions ? 2 : 1,
                       (double) params / (billions ? 1e9 : 1e6), billions ? "billion" : "million",
                       *file_type ? file_type : "type unknown", n_ctx, chat, tools ? " (takes tools)" : "",
                       fim ? ", fills in the middle" : "");
        }
        return 0;
}

/* The caller's own requests: the engine lists only those as children of the request path. */
static void print_requests(sd_bus *bus) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        const char *xml, *p;
        int n = 0;

        if (sd_bus_call_method(bus, AXP_BUS_NAME, AXP_BUS_REQUEST_PREFIX, "org.freedesktop.DBus.Introspectable",
                               "Introspect", NULL, &reply, NULL) < 0 ||
            sd_bus_message_read(reply, "s", &xml) < 0)
                return;
        for (p = strstr(xml, "<node name=\""); p; p = strstr(p, "<node name=\"")) {
                _cleanup_(sd_bus_message_unrefp) sd_bus_message *props = NULL;
                char path[256], num[32];
                const char *kind = "?", *state = "?";
                size_t len;

                p += strlen("<node name=\"");
                len = strcspn(p, "\"");
                if (len == 0 || len >= sizeof(num))
                        continue;
                memcpy(num, p, len);
                num[len] = 0;
                snprintf(path, sizeof(path), AXP_BUS_REQUEST_PREFIX "/%s", num);
                if (sd_bus_get_property_string(bus, AXP_BUS_NAME, path, AXP_BUS_REQUEST_IFACE, "Kind", NULL,
                                               (char **) &kind) < 0)
                        kind = NULL;
                if (sd_bus_get_property_string(bus, AXP_BUS_NAME, path, AXP_BUS_REQUEST_IFACE, "State", NULL,
                                               (char **) &state) < 0)
                        state = NULL;
                printf("%s%s  %s  %s\n", n++ ? "          " : "Yours:    ", path, kind ?: "?", state ?: "?");
                free((char *) kind);
                free((char *) state);
        }
}

int cli_status(int argc, char **argv) {
        _cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        _cleanup_bus_error_ sd_bus_error e = SD_BUS_ERROR_NULL;
        const char *address;
        uint32_t queued_reactive = 0, queued_proactive = 0, running = 0;
        uint64_t kv_memory = 0, kv_used = 0, kv_cached = 0;
        int r;

        r = address_options(argc, argv,
                            "usage: agentxpu status [--address ADDRESS]\n\n"
                            "The engine's model, devices, policy, CPU guard and queues, and your\n"
                            "requests.\n",
                            0, &address);
        if (r != 0)
                return MAX(r, 0);

        if (connect_engine(address, &bus) != 0)
                return 1;
        r = sd_bus_call_method(bus, AXP_BUS_NAME, AXP_BUS_PATH, "org.freedesktop.DBus.Properties", "GetAll",
                               &e, &reply, "s", AXP_BUS_IFACE);
        if (r < 0)
                return call_fail("status", address, &e, r);

        r = sd_bus_message_enter_container(reply, 'a', "{sv}");
        while (r >= 0 && (r = sd_bus_message_enter_container(reply, 'e', "sv")) > 0) {
                const char *key, *contents, *s;

                r = sd_bus_message_read(reply, "s", &key);
                if (r >= 0)
                        r = sd_bus_message_peek_type(reply, NULL, &contents);
                if (r < 0)
                        break;
                if (strcmp(contents, "s") == 0) {
                        r = sd_bus_message_read(reply, "v", "s", &s);
                        if (r >= 0) {
                                /* Model is the GGUF's general.name: text from the file */
                                printf("%-9s ", strcmp(key, "Version") == 0 ? "Version:" :
                                                strcmp(key, "Model") == 0 ? "Model:" :
                                                strcmp(key, "Policy") == 0 ? "Policy:" : key);
                                cli_put_visible(*s ? s : "(none)");
                                putchar('\n');
                        }
                } else if (strcmp(key, "Devices") == 0 || strcmp(key, "CpuGuard") == 0 ||
                           strcmp(key, "ModelInfo") == 0) {
                        r = sd_bus_message_enter_container(reply, 'v', contents);
                        if (r >= 0)
                                r = key[0] == 'D' ? print_devices(reply)
                                  : key[0] == 'C' ? print_cpu_guard(reply)
                                                  : print_model_info(reply);
                        if (r >= 0)
                                r = sd_bus_message_exit_container(reply);
                } else if (strcmp(contents, "u") == 0) {
                        uint32_t *u = strcmp(key, "QueuedReactive") == 0 ? &queued_reactive :
                                      strcmp(key, "QueuedProactive") == 0 ? &queued_proactive :
                                      strcmp(key, "Running") == 0 ? &running : NULL;
                        uint32_t ignored;
                        r = sd_bus_message_read(reply, "v", "u", u ?: &ignored);
                } else if (strcmp(contents, "t") == 0 && strncmp(key, "KVMemory", 8) == 0) {
                        uint64_t ignored;
                        r = sd_bus_message_read(reply, "v", "t", strcmp(key, "KVMemory") == 0         ? &kv_memory
                                                               : strcmp(key, "KVMemoryUsed") == 0   ? &kv_used
                                                               : strcmp(key, "KVMemoryCached") == 0 ? &kv_cached
                                                                                                    : &ignored);
                } else
                        r = sd_bus_message_skip(reply, "v");
                if (r >= 0)
                        r = sd_bus_message_exit_container(reply);
        }
        if (r < 0)
                return cli_fail("unexpected reply from the engine: %s", strerror(-r));
        if (kv_memory > 0) {
                char used[32], limit[32];
                axp_format_bytes(kv_used, used, sizeof(used));
                axp_format_bytes(kv_memory, limit, sizeof(limit));
                printf("KV cache: %s of %s in use (KVMemory=)", used, limit);
                if (kv_cached > 0) {
                        char cached[32];
                        axp_format_bytes(kv_cached, cached, sizeof(cached));
                        printf(", %s more kept by the prompt cache", cached);
                }
                putchar('\n');
        }
        printf("Queued:   %u reactive, %u proactive\n", queued_reactive, queued_proactive);
        printf("Running:  %u\n", running);
        print_requests(bus);
        return 0;
}
