/* SPDX-License-Identifier: MIT */
/* agentxpu logits: the logits of the last prompt position, as little-endian float32. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli-model.h"
#include "cli.h"
#include "forward.h"
#include "types.h"

static int usage(FILE *f) {
        fprintf(f, "usage: agentxpu logits -m MODEL (-p PROMPT | -f FILE) -o OUT [--threads N] [--chunk N]\n"
                   "                      [--device cpu|opencl|opencl:N|auto]\n"
                   "Writes the logits of the last prompt position (tokenized as generate --raw does)\n"
                   "to OUT as n_vocab little-endian float32 values. The prompt must be valid UTF-8.\n");
        return f == stderr ? 2 : 0;
}

int cli_logits(int argc, char **argv) {
        static const struct option options[] = {
                { "model", required_argument, NULL, 'm' }, { "prompt", required_argument, NULL, 'p' },
                { "file", required_argument, NULL, 'f' },  { "output", required_argument, NULL, 'o' },
                { "threads", required_argument, NULL, 't' }, { "chunk", required_argument, NULL, 'c' },
                { "device", required_argument, NULL, 'd' }, { "help", no_argument, NULL, 'h' },
                {}
        };
        const char *model = NULL, *prompt = NULL, *file = NULL, *out = NULL, *device = NULL;
        uint64_t threads = 0, chunk = 256;
        int c, r;

        optind = 0;
        while ((c = cli_getopt(argc, argv, "m:p:f:o:h", options)) >= 0) {
                switch (c) {
                case 'm': model = optarg; break;
                case 'p': prompt = optarg; break;
                case 'f': file = optarg; break;
                case 'o': out = optarg; break;
                case 'd': device = optarg; break;
                case 't':
                        if (!cli_uint("--threads", optarg, 1, 1024, &threads))
                                return 2;
                        break;
                case 'c':
                        if (!cli_uint("--chunk", optarg, 1, 1 << 16, &chunk))
                                return 2;
                        break;
                case 'h': usage(stdout); return 0;
                default: return 2;
                }
        }
        if (optind < argc)
                return cli_usage_error("unexpected argument '%s'", argv[optind]);
        if (!out)
                return cli_usage_error("no output file (-o OUT)");

        _cleanup_free_ char *text = NULL;
        size_t len;
        if ((r = cli_prompt(prompt, file, &text, &len)) != 0)
                return r;
        _cleanup_(axp_model_freep) axp_model *m = NULL;
        _cleanup_(axp_device_freep) axp_device *dev = NULL;
        if ((r = cli_load(model, device, (int) threads, &m, &dev)) != 0)
                return r;
        _cleanup_free_ int32_t *toks = NULL;
        int n;
        if ((r = cli_tokenize_raw(m, text, len, &toks, &n)) != 0)
                return r;

        _cleanup_(axp_seq_free) axp_seq seq = { 0 };
        axp_error err = { 0 };
        if (axp_seq_init(&seq, m, AXP_TYPE_F32, m->hp.n_ctx_train, n, &err) < 0 ||
            axp_forward_prefill(dev, &seq, toks, n, (int) chunk, &err) < 0)
                return cli_fail("%s", err.msg);

        FILE *f = fopen(out, "wb");
        if (!f)
                return cli_fail("%s: %m", out);
        size_t w = fwrite(seq.logits, sizeof(float), (size_t) m->hp.n_vocab, f);
        if (fclose(f) != 0 || w != (size_t) m->hp.n_vocab)
                return cli_fail("%s: write failed", out);
        return 0;
}
