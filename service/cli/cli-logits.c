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
                   "                      [--device cpu|opencl|opencl:N|auto] [--kv-type f16|f32|q8_0]\n"
                   "       agentxpu logits -m MODEL (-p PROMPT | -f FILE) -o OUT --reference\n"
                   "Writes the logits of the last prompt position (tokenized as generate --raw does)\n"
                   "to OUT as n_vocab little-endian float32 values. The prompt must be valid UTF-8.\n"
                   "--reference computes them with the reference forward pass (double precision,\n"
                   "plain loops, one thread; slow) instead of the kernels. --kv-type is the KV\n"
                   "cache's element type (default f16, as llama.cpp's).\n");
        return f == stderr ? 2 : 0;
}

int cli_logits(int argc, char **argv) {
        static const struct option options[] = {
                { "model", required_argument, NULL, 'm' }, { "prompt", required_argument, NULL, 'p' },
                { "file", required_argument, NULL, 'f' },  { "output", required_argument, NULL, 'o' },
                { "threads", required_argument, NULL, 't' }, { "chunk", required_argument, NULL, 'c' },
                { "device", required_argument, NULL, 'd' }, { "reference", no_argument, NULL, 'r' },
                { "kv-type", required_argument, NULL, 'k' }, { "help", no_argument, NULL, 'h' },
                {}
        };
        const char *model = NULL, *prompt = NULL, *file = NULL, *out = NULL, *device = NULL;
        uint64_t threads = 0, chunk = 256;
        bool reference = false, kv_given = false;
        uint32_t kv_type = AXP_TYPE_F16;
        int c, r;

        optind = 0;
        while ((c = cli_getopt(argc, argv, "m:p:f:o:h", options)) >= 0) {
                switch (c) {
                case 'm': model = optarg; break;
                case 'p': prompt = optarg; break;
                case 'f': file = optarg; break;
                case 'o': out = optarg; break;
                case 'd': device = optarg; break;
                case 'r': reference = true; break;
                case 'k':
                        if (!cli_kv_type(optarg, &kv_type))
                                return 2;
                        kv_given = true;
                        break;
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
        if (reference && device)
                return cli_usage_error("--reference runs on the host; --device does not apply");
        if (reference && kv_given)
                return cli_usage_error("--reference keeps K and V in double; --kv-type does not apply");

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
                if (axp_seq_init(&seq, m, kv_type, m->hp.n_ctx_train, n, &err) < 0 ||
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
