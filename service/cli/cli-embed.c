/* SPDX-License-Identifier: MIT */
/* agentxpu embed: an embedding of a text from the engine service (Engine.Embed), printed as a
 * JSON array of numbers on one line. */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <systemd/sd-bus.h>

#include "base/util.h"
#include "cli.h"
#include "cli-bus.h"
#include "cli-model.h"
#include "common/bus-common.h"

static int usage(FILE *f) {
        fprintf(f, "usage: agentxpu embed [OPTIONS] (-p TEXT | -f FILE | TEXT)\n"
                   "\n"
                   "An embedding of the text from the engine service: the model's last hidden states\n"
                   "of its tokens, pooled, as a JSON array of numbers on one line (unit length unless\n"
                   "--no-normalize). The text is taken as it is, without the chat template.\n"
                   "\n"
                   "  -p, --prompt TEXT   the text\n"
                   "  -f, --file FILE     the text from a file\n"
                   "  --pooling P         mean, cls or last (default: the model's; mean for a chat\n"
                   "                      model's file)\n"
                   "  --no-normalize      the pooled vector as it is, not scaled to unit length\n"
                   "  --truncate          a text beyond the context loses its end instead of\n"
                   "                      being refused\n"
                   "  --proactive         background priority (default: reactive)\n"
                   "  --stats             the request's statistics on stderr\n"
                   "  --address ADDRESS   the engine's bus (default: the system bus)\n");
        return f == stderr ? 2 : 0;
}

int cli_embed(int argc, char **argv) {
        enum { O_ADDRESS = 256, O_POOLING, O_NO_NORMALIZE, O_TRUNCATE, O_PROACTIVE, O_STATS };
        static const struct option options[] = {
                { "prompt", required_argument, NULL, 'p' },
                { "file", required_argument, NULL, 'f' },
                { "pooling", required_argument, NULL, O_POOLING },
                { "no-normalize", no_argument, NULL, O_NO_NORMALIZE },
                { "truncate", no_argument, NULL, O_TRUNCATE },
                { "proactive", no_argument, NULL, O_PROACTIVE },
                { "stats", no_argument, NULL, O_STATS },
                { "address", required_argument, NULL, O_ADDRESS },
                { "help", no_argument, NULL, 'h' },
                {}
        };
        _cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
        _cleanup_bus_error_ sd_bus_error e = SD_BUS_ERROR_NULL;
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *call = NULL, *reply = NULL;
        _cleanup_free_ char *text = NULL;
        const char *address = NULL, *prompt = NULL, *file = NULL, *pooling = NULL;
        bool normalize = true, truncate = false, proactive = false, stats = false;
        const double *v;
        size_t len, size;
        int c, r;

        optind = 1;
        while ((c = cli_getopt(argc, argv, "p:f:h", options)) >= 0)
                switch (c) {
                case 'p': prompt = optarg; break;
                case 'f': file = optarg; break;
                case O_POOLING:
                        if (strcmp(optarg, "mean") != 0 && strcmp(optarg, "cls") != 0 && strcmp(optarg, "last") != 0)
                                return cli_usage_error("unknown --pooling '%s' (mean, cls, last)", optarg);
                        pooling = optarg;
                        break;
                case O_NO_NORMALIZE: normalize = false; break;
                case O_TRUNCATE: truncate = true; break;
                case O_PROACTIVE: proactive = true; break;
                case O_STATS: stats = true; break;
                case O_ADDRESS: address = optarg; break;
                case 'h': return usage(stdout);
                default: return 2;
                }
        if (optind < argc) {
                if (prompt || file || argc - optind > 1)
                        return cli_usage_error("give the text once: -p TEXT, -f FILE or one argument");
                prompt = argv[optind];
        }
        if ((r = cli_prompt(prompt, file, &text, &len)) != 0)
                return r;
        if (memchr(text, 0, len))
                return cli_usage_error("the text holds a NUL byte");

        if (connect_engine(address, &bus) != 0)
                return 1;
        r = sd_bus_message_new_method_call(bus, &call, AXP_BUS_NAME, AXP_BUS_PATH, AXP_BUS_IFACE, "Embed");
        if (r >= 0)
                r = sd_bus_message_append(call, "s", text);
        if (r >= 0)
                r = sd_bus_message_open_container(call, 'a', "{sv}");
        if (r >= 0)
                r = sd_bus_message_append(call, "{sv}{sv}{sv}", "priority", "s", proactive ? "proactive" : "reactive",
                                          "normalize", "b", normalize, "truncate", "b", truncate);
        if (r >= 0 && pooling)
                r = sd_bus_message_append(call, "{sv}", "pooling", "s", pooling);
        if (r >= 0)
                r = sd_bus_message_close_container(call);
        if (r < 0)
                return cli_fail("cannot build the call: %s", strerror(-r));
        /* a long text waits behind other requests: no time limit but the engine's */
        r = sd_bus_call(bus, call, UINT64_MAX, &e, &reply);
        if (r < 0)
                return call_fail("Embed", address, &e, r);
        r = sd_bus_message_read_array(reply, 'd', (const void **) &v, &size);
        if (r < 0)
                return cli_fail("unexpected reply to Embed: %s", strerror(-r));
        fputc('[', stdout);
        for (size_t i = 0; i < size / sizeof(double); i++)
                printf("%s%.9g", i ? ", " : "", v[i]);
        fputs("]\n", stdout);
        if (stats) {
                uint32_t prompt_tokens = 0;
                double latency = 0;
                int cut = 0;
                const cli_dict_field fields[] = {
                        { "prompt_tokens", 'u', &prompt_tokens },
                        { "latency_s", 'd', &latency },
                        { "prompt_cut", 'b', &cut },
                };
                if (cli_read_dict(reply, fields, ELEMENTSOF(fields)) >= 0)
                        fprintf(stderr, "%u tokens%s, %.3f s\n", prompt_tokens, cut ? " (the text was cut to fit)" : "",
                                latency);
        }
        return fflush(stdout) == 0 ? 0 : cli_fail("cannot write the embedding");
}
