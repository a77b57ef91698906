/* SPDX-License-Identifier: MIT */
/* agentxpu embed: an embedding of a text from the engine service (Engine.Embed), or with -m
 * of a model run in-process as the engine runs it, printed as a JSON array of numbers on one
 * line. */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <systemd/sd-bus.h>

#include "base/util.h"
#include "devices/forward.h"
#include "heg/seq.h"
#include "kernels/types.h"
#include "model/embedding.h"
#include "cli.h"
#include "cli-bus.h"
#include "cli-model.h"
#include "common/bus-common.h"

static int usage(FILE *f) {
        fprintf(f, "usage: agentxpu embed [OPTIONS] (-p TEXT | -f FILE | TEXT)\n"
                   "\n"
                   "An embedding of the text from the engine service: the model's last hidden states\n"
                   "of its tokens, pooled, as a JSON array of numbers on one line (unit length unless\n"
                   "--no-normalize). The text is taken as it is, without the chat template. With -m,\n"
                   "the model runs in this process instead (no service), as the engine runs it.\n"
                   "\n"
                   "  -m, --model FILE    run this GGUF model in-process\n"
                   "  --device SPEC       with -m: cpu (default), opencl, ...\n"
                   "  --threads N         with -m: CPU threads (default: one per core)\n"
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

/* The embedding as one JSON line */
static void print_vector(const double *v, const float *f, size_t n) {
        fputc('[', stdout);
        for (size_t i = 0; i < n; i++)
                printf("%s%.9g", i ? ", " : "", v ? v[i] : (double) f[i]);
        fputs("]\n", stdout);
}

/* -m: the engine's embedding (engine.c, req_embed) without the service: the text's tokens
 * prefilled at once on the device, their residual stream pooled */
static int embed_here(const char *path, const char *device, int threads, const char *text, size_t len,
                      enum axp_pooling pool, bool normalize, bool truncate, bool stats) {
        _cleanup_free_ int32_t *toks = NULL;
        _cleanup_free_ float *v = NULL;
        axp_model *m = NULL;
        axp_device *d = NULL;
        axp_seq q = { 0 };
        axp_error err = { 0 };
        bool cut = false;
        double t0 = axp_now();
        int n = 0, r;

        if ((r = cli_load(path, device, threads, &m, &d)) != 0)
                return r;
        if (axp_embedding_pooling(m, pool, &pool, &err) < 0) {
                r = cli_fail("%s", err.msg);
                goto out;
        }
        if ((r = cli_tokenize_raw(m, text, len, &toks, &n)) != 0)
                goto out;
        if (n > m->hp.n_ctx_train) {
                if (!truncate) {
                        r = cli_fail("the text is %d tokens and the model's context holds %d (--truncate cuts it)", n,
                                     m->hp.n_ctx_train);
                        goto out;
                }
                n = m->hp.n_ctx_train;
                cut = true;
        }
        if (axp_seq_init(&q, m, AXP_TYPE_F16, n, n, &err) < 0 || axp_forward_prefill(d, &q, toks, n, 0, &err) < 0) {
                r = cli_fail("%s", err.msg);
                goto out;
        }
        if (!(v = malloc(sizeof(float) * (size_t) m->hp.n_embd))) {
                r = cli_fail("out of memory");
                goto out;
        }
        axp_embedding_pool(m, q.x, n, pool, normalize, v);
        print_vector(NULL, v, (size_t) m->hp.n_embd);
        if (stats)
                fprintf(stderr, "%d tokens%s, %.3f s (%s pooling)\n", n, cut ? " (the text was cut to fit)" : "",
                        axp_now() - t0, axp_pooling_name(pool));
        r = fflush(stdout) == 0 ? 0 : cli_fail("cannot write the embedding");
out:
        axp_seq_free(&q);
        axp_device_free(d);
        axp_model_free(m);
        return r;
}

int cli_embed(int argc, char **argv) {
        enum { O_ADDRESS = 256, O_POOLING, O_NO_NORMALIZE, O_TRUNCATE, O_PROACTIVE, O_STATS, O_DEVICE, O_THREADS };
        static const struct option options[] = {
                { "prompt", required_argument, NULL, 'p' },
                { "file", required_argument, NULL, 'f' },
                { "model", required_argument, NULL, 'm' },
                { "device", required_argument, NULL, O_DEVICE },
                { "threads", required_argument, NULL, O_THREADS },
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
        const char *address = NULL, *prompt = NULL, *file = NULL, *model = NULL, *device = NULL;
        enum axp_pooling pool = AXP_POOLING_MODEL;
        uint64_t threads = 0;
        bool normalize = true, truncate = false, proactive = false, stats = false;
        const double *v;
        size_t len, size;
        int c, r;

        optind = 1;
        while ((c = cli_getopt(argc, argv, "p:f:m:h", options)) >= 0)
                switch (c) {
                case 'p': prompt = optarg; break;
                case 'f': file = optarg; break;
                case 'm': model = optarg; break;
                case O_DEVICE: device = optarg; break;
                case O_THREADS:
                        if (!cli_uint("--threads", optarg, 1, 1024, &threads))
                                return 2;
                        break;
                case O_POOLING:
                        if (axp_pooling_from_name(optarg, &pool) < 0 || pool == AXP_POOLING_MODEL)
                                return cli_usage_error("unknown --pooling '%s' (mean, cls, last)", optarg);
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
        if (model) {
                if (address || proactive)
                        return cli_usage_error("--address and --proactive are the service's; -m runs the model here");
                return embed_here(model, device, (int) threads, text, len, pool, normalize, truncate, stats);
        }
        if (device || threads)
                return cli_usage_error("--device and --threads go with -m");

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
        if (r >= 0 && pool != AXP_POOLING_MODEL)
                r = sd_bus_message_append(call, "{sv}", "pooling", "s", axp_pooling_name(pool));
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
        print_vector(v, NULL, size / sizeof(double));
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
