/* SPDX-License-Identifier: MIT */
/* agentxpu tokenize: token ids of a text, as the model's tokenizer makes them. Only the
 * vocabulary is read, so a vocabulary-only GGUF (as llama.cpp's tokenizer tests have) works
 * as well as a model. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli-model.h"
#include "cli.h"
#include "model/tokenizer.h"

static int usage(FILE *f) {
        fprintf(f, "usage: agentxpu tokenize -m MODEL (-p TEXT | -f FILE) [--no-bos] [--no-parse-special] [--json]\n"
                   "Prints the token ids (space-separated, or {\"tokens\": [...]} with --json).\n"
                   "MODEL may hold a vocabulary only: the weights are not read.\n"
                   "BOS is added if the model's vocabulary asks for it; special-token text is parsed.\n"
                   "The text must be valid UTF-8; other bytes are refused, saying where.\n");
        return f == stderr ? 2 : 0;
}

int cli_tokenize(int argc, char **argv) {
        enum { OPT_NO_BOS = 256, OPT_NO_SPECIAL, OPT_JSON };
        static const struct option options[] = {
                { "model", required_argument, NULL, 'm' }, { "prompt", required_argument, NULL, 'p' },
                { "file", required_argument, NULL, 'f' },  { "no-bos", no_argument, NULL, OPT_NO_BOS },
                { "no-parse-special", no_argument, NULL, OPT_NO_SPECIAL },
                { "json", no_argument, NULL, OPT_JSON },   { "help", no_argument, NULL, 'h' },
                {}
        };
        const char *model = NULL, *prompt = NULL, *file = NULL;
        unsigned flags = AXP_TOK_ADD_BOS | AXP_TOK_PARSE_SPECIAL;
        bool json = false;
        int c, r;

        optind = 0;
        while ((c = cli_getopt(argc, argv, "m:p:f:h", options)) >= 0) {
                switch (c) {
                case 'm': model = optarg; break;
                case 'p': prompt = optarg; break;
                case 'f': file = optarg; break;
                case OPT_NO_BOS: flags &= ~AXP_TOK_ADD_BOS; break;
                case OPT_NO_SPECIAL: flags &= ~AXP_TOK_PARSE_SPECIAL; break;
                case OPT_JSON: json = true; break;
                case 'h': usage(stdout); return 0;
                default: return 2;
                }
        }
        if (optind < argc)
                return cli_usage_error("unexpected argument '%s'", argv[optind]);

        _cleanup_free_ char *text = NULL;
        size_t len;
        if ((r = cli_prompt(prompt, file, &text, &len)) != 0)
                return r;
        if (!model)
                return cli_usage_error("no model given (-m MODEL.gguf)");
        _cleanup_(gguf_closep) gguf_file *f = NULL;
        _cleanup_(axp_tokenizer_freep) axp_tokenizer *tok = NULL;
        axp_error err = { 0 };
        if (gguf_open(model, &f, &err) < 0 || axp_tokenizer_load(f, &tok, &err) < 0)
                return cli_fail("%s", err.msg);

        _cleanup_free_ int32_t *toks = NULL;
        int n;
        if (axp_tokenize(tok, text, len, flags, &toks, &n, &err) < 0)
                return cli_fail("%s", err.msg);
        printf(json ? "{\"tokens\": [" : "");
        for (int i = 0; i < n; i++)
                printf(json ? "%s%d" : "%s%d", i ? (json ? ", " : " ") : "", toks[i]);
        printf(json ? "]}\n" : "\n");
        return 0;
}
