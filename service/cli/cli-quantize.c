/* SPDX-License-Identifier: MIT */
/* agentxpu quantize IN OUT TYPE: requantize a GGUF model (engine/model/quantize.c). */
#include <getopt.h>
#include <stdio.h>
#include <sys/stat.h>

#include "cli.h"
#include "kernels/types.h"
#include "model/quantize.h"

static int help(FILE *f) {
        fprintf(f,
                "usage: agentxpu quantize [--threads N] IN OUT TYPE\n"
                "\n"
                "Write OUT, a copy of the GGUF model IN with its weight matrices requantized.\n"
                "IN may be any file agentxpu reads (F32, F16, BF16 or a quantized type). TYPE is\n"
                "  a tensor type: q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, iq4_xs, q2_k, q3_k, q4_k,\n"
                "                 q5_k, q6_k, f16, bf16 or f32: every weight matrix in that type\n"
                "                 (as llama-quantize --pure)\n"
                "  a mix:         Q3_K_M, Q4_K_M or Q5_K_M: llama-quantize's per-tensor choices\n"
                "                 (the output matrix Q6_K, some attn_v and ffn_down more bits)\n"
                "  keep:          every tensor as it is: the parts of a split model (IN its\n"
                "                 first, NAME-00001-of-0000N.gguf) joined into one file\n"
                "Rows that are not a multiple of a type's block fall back as llama-quantize's do\n"
                "(q4_k to q5_0, q5_k to q5_1, q6_k to q8_0, q2_k and q3_k to q4_0, iq4_xs to\n"
                "iq4_nl, then f16). Norms and biases keep their type. OUT appears whole or not at\n"
                "all.\n"
                "\n"
                "  --threads N        threads converting rows (default: all CPUs)\n");
        return f == stderr ? 2 : 0;
}

int cli_quantize(int argc, char **argv) {
        enum { O_THREADS = 256 };
        static const struct option opts[] = {
                { "threads", required_argument, NULL, O_THREADS },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        axp_error err = { 0 };
        axp_quant_target t;
        uint64_t threads = 0;
        int c;

        optind = 1;
        while ((c = cli_getopt(argc, argv, "h", opts)) >= 0) {
                switch (c) {
                case O_THREADS:
                        if (!cli_uint("--threads", optarg, 1, 64, &threads))
                                return 2;
                        break;
                case 'h':
                        return help(stdout);
                default:
                        return 2;
                }
        }
        if (argc - optind != 3)
                return cli_usage_error("expected IN OUT TYPE (see agentxpu quantize --help)");
        const char *in = argv[optind], *out = argv[optind + 1];
        if (axp_quant_target_parse(argv[optind + 2], &t, &err) < 0)
                return cli_usage_error("%s", err.msg);
        double t0 = axp_now();
        if (axp_quantize_file(in, out, &t, (int) threads, &err) < 0)
                return cli_fail("%s", err.msg);
        struct stat st;
        if (stat(out, &st) == 0)
                printf("wrote %s: %s, %.1f MB in %.1f s\n", out, t.name, (double) st.st_size / 1e6, axp_now() - t0);
        return 0;
}
