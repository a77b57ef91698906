/* SPDX-License-Identifier: MIT */
/* agentxpu logits: the logits of the last prompt position, as little-endian float32, from the
 * kernels or (--reference) from the double-precision reference forward pass. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli-model.h"
#include "cli.h"
#include "devices/forward.h"
#include "kernels/types.h"
#include "model/reference.h"

static int usage(FILE *f) {
        fprintf(f, "usage: agentxpu logits -m MODEL (-p PROMPT | -f FILE) -o OUT [--threads N] [--chunk N]\n"
                   "                      [--device cpu|opencl|opencl:N|auto]\n"
                   "       agentxpu logits -m MODEL (-p PROMPT | -f FILE) -o OUT --reference\n"
                   "Writes the logits of the last prompt position (tokenized as generate --raw does)\n"
                   "to OUT as n_vocab little-endian float32 values. --reference computes them with\n"
                   "the reference forward pass (double precision, plain loops, one thread; slow)\n"
                   "instead of the kernels.\n");
        return f == stderr ? 2 : 0;
}

int cli_logits(int argc, char **argv) {
        static const struct option options[] = {
                { "model", required_argument, NULL, 'm' }, { "prompt", required_argument, NULL, 'p' },
                { "file", required_argument, NULL, 'f' },  { "output", required_argument, NULL, 'o' },
                { "threads", required_argument, NULL, 't' }, { "chunk", required_argument, NULL, 'c' },
                { "device", required_argument, NULL, 'd' }, { "reference", no_argument, NULL, 'r' },
                { "help", no_argument, NULL, 'h' },
                {}
        };
        const char *model = NULL, *prompt = NULL, *file = NULL, *out = NULL, *device = NULL;
        int threads = 0, chunk = 256;
        bool reference = false;
        int c, r;

        optind = 0;
        while ((c = getopt_long(argc, argv, "m:p:f:o:h", options, NULL)) >= 0) {
                switch (c) {
                case 'm': model = optarg; break;
                case 'p': prompt = optarg; break;
                case 'f': file = optarg; break;
                case 'o': out = optarg; break;
                case 'd': device = optarg; break;
                case 'r': reference = true; break;
                case 't':
                        if (!cli_int("--threads", optarg, 1, 1024, &threads))
                                return 2;
                        break;
                case 'c':
                        if (!cli_int("--chunk", optarg, 1, 1 << 16, &chunk))
                                return 2;
                        break;
                case 'h': usage(stdout); return 0;
                default: return usage(stderr);
                }
        }
        if (!out || optind < argc)
                return usage(stderr);
        if (reference && device) {
                fprintf(stderr, "agentxpu: --reference runs on the host; --device does not apply\n");
                return 2;
        }

        _cleanup_free_ char *text = NULL;
        size_t len;
        if ((r = cli_prompt(prompt, file, &text, &len)) != 0)
                return r;
        _cleanup_(axp_model_freep) axp_model *m = NULL;
        _cleanup_(axp_device_freep) axp_device *dev = NULL;
        if ((r = cli_load(model, device, threads, &m, reference ? NULL : &dev)) != 0)
                return r;
        _cleanup_free_ int32_t *toks = NULL;
        int n;
        if ((r = cli_tokenize_raw(m, text, len, &toks, &n)) != 0)
                return r;

        const int nv = m->hp.n_vocab;
        _cleanup_free_ float *logits = malloc((size_t) nv * sizeof(float));
        if (!logits)
                return cli_fail("out of memory");
        axp_error err = { 0 };
        if (reference) {
                /* as the kernels' path below: the prompt must fit the model's context */
                if (n > m->hp.n_ctx_train)
                        return cli_fail("%d tokens do not fit: 0 of the context's %d positions are in use", n,
                                        m->hp.n_ctx_train);
                _cleanup_free_ double *exact = NULL;
                if (axp_ref_logits(m, toks, n, n - 1, &exact, &err) < 0)
                        return cli_fail("%s", err.msg);
                for (int i = 0; i < nv; i++)
                        logits[i] = (float) exact[i];
        } else {
                _cleanup_(axp_seq_free) axp_seq seq = { 0 };
                if (axp_seq_init(&seq, m, AXP_TYPE_F32, m->hp.n_ctx_train, n, &err) < 0 ||
                    axp_forward_prefill(dev, &seq, toks, n, chunk, &err) < 0)
                        return cli_fail("%s", err.msg);
                memcpy(logits, seq.logits, (size_t) nv * sizeof(float));
        }

        FILE *f = fopen(out, "wb");
        if (!f)
                return cli_fail("%s: %m", out);
        size_t w = fwrite(logits, sizeof(float), (size_t) nv, f);
        if (fclose(f) != 0 || w != (size_t) nv)
                return cli_fail("%s: write failed", out);
        return 0;
}
