/* SPDX-License-Identifier: MIT */
/* agentxpu generate: in-process generation on the CPU, without the daemon. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/parse.h"
#include "model/chat.h"
#include "cli-model.h"
#include "cli.h"
#include "devices/forward.h"
#include "kernels/cpu/kernels.h"
#include "model/generate.h"
#include "kernels/types.h"
#include "model/tools.h"

static int usage(FILE *f) {
        fprintf(f, "usage: agentxpu generate -m MODEL (-p PROMPT | -f FILE) [options]\n"
                   "  -n N               tokens to generate (default 128)\n"
                   "  --temperature T    0 is greedy (default 0.8)\n"
                   "  --top-k K          (default 40, 0 disables)\n"
                   "  --top-p P          (default 0.95, 1 disables)\n"
                   "  --min-p P          (default 0.05, 0 disables)\n"
                   "  --repeat-penalty R (default 1, disabled)\n"
                   "  --frequency-penalty F, --presence-penalty P\n"
                   "                     -2 to 2: a token among the last 64 loses F per time it is\n"
                   "                     there and P once (default 0, disabled)\n"
                   "  --seed S           sampling seed (default: random)\n"
                   "  --stop TEXT        stop before TEXT (repeatable)\n"
                   "  --system TEXT      system prompt for the chat template\n"
                   "  --raw              no chat template: BOS as the model says, special-token text parsed\n"
                   "  --think on|off     thinking on or off (off: the template's own switch, where it\n"
                   "                     has one, as Qwen3's enable_thinking; default: as the template)\n"
                   "  --suffix TEXT      fill in the middle: the prompt is the text before the cursor,\n"
                   "                     TEXT the text after it (the model's FIM tokens, as\n"
                   "                     llama.cpp's /infill; no chat template)\n"
                   "  --threads N        CPU threads (default: one per core)\n"
                   "  --device DEV       where every kernel runs: cpu (default), opencl, opencl:N, auto\n"
                   "  --chunk N          prefill chunk length (default 256)\n"
                   "  --kv-type T        KV cache: f16 (default), f32 or q8_0\n"
                   "  --json             print one JSON object with tokens, text and timings\n"
                   "  --logprobs N       with --json: each token's log-probability and the N (0..20)\n"
                   "                     most likely tokens' at its step (\"logprobs\")\n"
                   "  --json-schema FILE the output is JSON valid under the JSON Schema in FILE\n"
                   "  --grammar FILE     the output follows the GBNF grammar in FILE (rule root)\n"
                   "  --tools FILE       the tools the model may call (OpenAI's function list, JSON):\n"
                   "                     the output is text or one call; --json adds tool_call\n"
                   "  --tool-choice C    auto (text or a call, the default), required (a call) or\n"
                   "                     none (text: the tools in the prompt, no call)\n"
                   "  --parallel N       N completions of the prompt (1..64, default 1), decoded\n"
                   "                     together as the engine decodes N requests; with --seed S\n"
                   "                     completion i samples with seed S + i. Each is printed\n"
                   "                     whole under a '--- completion i ---' line; --json gives\n"
                   "                     them as \"choices\"\n"
                   "The prompt, its file, --stop and --system must be valid UTF-8; other bytes are\n"
                   "refused, saying where. On a terminal, control characters in the text (all but\n"
                   "newline and tab) are shown as \\xNN escapes of their bytes, such as \\x07 for BEL;\n"
                   "into a pipe or a file the text passes unchanged.\n");
        return f == stderr ? 2 : 0;
}

enum { OPT_TEMP = 256, OPT_TOPK, OPT_TOPP, OPT_MINP, OPT_REPEAT, OPT_SEED, OPT_STOP, OPT_SYSTEM,
       OPT_RAW, OPT_THREADS, OPT_CHUNK, OPT_JSON, OPT_DEVICE, OPT_SCHEMA, OPT_GRAMMAR, OPT_TOOLS,
       OPT_TOOL_CHOICE, OPT_KV_TYPE, OPT_FREQ, OPT_PRESENCE, OPT_PARALLEL, OPT_SUFFIX, OPT_LOGPROBS, OPT_THINK };

static const struct option options[] = {
        { "model", required_argument, NULL, 'm' },      { "prompt", required_argument, NULL, 'p' },
        { "file", required_argument, NULL, 'f' },       { "n-predict", required_argument, NULL, 'n' },
        { "temperature", required_argument, NULL, OPT_TEMP }, { "top-k", required_argument, NULL, OPT_TOPK },
        { "top-p", required_argument, NULL, OPT_TOPP }, { "min-p", required_argument, NULL, OPT_MINP },
        { "repeat-penalty", required_argument, NULL, OPT_REPEAT },
        { "frequency-penalty", required_argument, NULL, OPT_FREQ },
        { "presence-penalty", required_argument, NULL, OPT_PRESENCE },
        { "seed", required_argument, NULL, OPT_SEED },  { "stop", required_argument, NULL, OPT_STOP },
        { "system", required_argument, NULL, OPT_SYSTEM }, { "raw", no_argument, NULL, OPT_RAW },
        { "think", required_argument, NULL, OPT_THINK },
        { "threads", required_argument, NULL, OPT_THREADS }, { "chunk", required_argument, NULL, OPT_CHUNK },
        { "json", no_argument, NULL, OPT_JSON },        { "help", no_argument, NULL, 'h' },
        { "device", required_argument, NULL, OPT_DEVICE },
        { "kv-type", required_argument, NULL, OPT_KV_TYPE },
        { "json-schema", required_argument, NULL, OPT_SCHEMA }, { "grammar", required_argument, NULL, OPT_GRAMMAR },
        { "tools", required_argument, NULL, OPT_TOOLS }, { "tool-choice", required_argument, NULL, OPT_TOOL_CHOICE },
        { "parallel", required_argument, NULL, OPT_PARALLEL },
        { "suffix", required_argument, NULL, OPT_SUFFIX },
        { "logprobs", required_argument, NULL, OPT_LOGPROBS },
        {}
};

typedef struct gen_args {
        const char *model, *prompt, *file, *system, *device, *schema_file, *grammar_file, *tools_file, *tool_choice,
                *suffix;
        int n_predict, threads, chunk, parallel;
        int logprobs; /* alternatives; -1: none */
        uint32_t kv_type;
        bool raw, json;
        bool think_set, think;
        const char *stops[16];
        size_t n_stops;
        axp_sampler_params sp;
} gen_args;

static int parse(int argc, char **argv, gen_args *a) {
        axp_sampler_params_default(&a->sp);
        a->n_predict = 128;
        a->chunk = 256;
        a->parallel = 1;
        a->logprobs = -1;
        a->kv_type = AXP_TYPE_F16;
        uint64_t u;
        double d;
        int c;
        optind = 0;
        while ((c = cli_getopt(argc, argv, "m:p:f:n:h", options)) >= 0) {
                switch (c) {
                case 'm': a->model = optarg; break;
                case 'p': a->prompt = optarg; break;
                case 'f': a->file = optarg; break;
                case 'n':
                        if (!cli_uint("-n", optarg, 0, 1 << 20, &u))
                                return 2;
                        a->n_predict = (long) u;
                        break;
                case OPT_TEMP:
                        if (!cli_double("--temperature", optarg, 0, 100, &d))
                                return 2;
                        a->sp.temperature = (float) d;
                        break;
                case OPT_TOPK:
                        if (!cli_uint("--top-k", optarg, 0, 1 << 24, &u))
                                return 2;
                        a->sp.top_k = (int) u;
                        break;
                case OPT_TOPP:
                        if (!cli_double("--top-p", optarg, 0, 1, &d))
                                return 2;
                        a->sp.top_p = (float) d;
                        break;
                case OPT_MINP:
                        if (!cli_double("--min-p", optarg, 0, 1, &d))
                                return 2;
                        a->sp.min_p = (float) d;
                        break;
                case OPT_REPEAT:
                        if (!cli_double("--repeat-penalty", optarg, 0.01, 100, &d))
                                return 2;
                        a->sp.repeat_penalty = (float) d;
                        break;
                case OPT_FREQ:
                case OPT_PRESENCE:
                        if (!cli_double(c == OPT_FREQ ? "--frequency-penalty" : "--presence-penalty", optarg, -2, 2, &d))
                                return 2;
                        *(c == OPT_FREQ ? &a->sp.frequency_penalty : &a->sp.presence_penalty) = (float) d;
                        break;
                case OPT_SEED:
                        if (!cli_uint("--seed", optarg, 0, UINT64_MAX, &a->sp.seed))
                                return 2;
                        break;
                case OPT_STOP:
                        if (a->n_stops == ELEMENTSOF(a->stops))
                                return cli_usage_error("at most %zu --stop strings", ELEMENTSOF(a->stops));
                        if (!*optarg)
                                return cli_usage_error("--stop wants a non-empty string");
                        if (!cli_utf8("--stop", optarg, strlen(optarg)))
                                return 1;
                        a->stops[a->n_stops++] = optarg;
                        break;
                case OPT_SYSTEM:
                        if (!cli_utf8("--system", optarg, strlen(optarg)))
                                return 1;
                        a->system = optarg;
                        break;
                case OPT_RAW: a->raw = true; break;
                case OPT_THINK:
                        if (strcmp(optarg, "on") != 0 && strcmp(optarg, "off") != 0)
                                return cli_usage_error("--think must be on or off, got '%s'", optarg);
                        a->think_set = true;
                        a->think = strcmp(optarg, "on") == 0;
                        break;
                case OPT_THREADS:
                        if (!cli_uint("--threads", optarg, 1, 1024, &u))
                                return 2;
                        a->threads = (long) u;
                        break;
                case OPT_CHUNK:
                        if (!cli_uint("--chunk", optarg, 1, 1 << 16, &u))
                                return 2;
                        a->chunk = (long) u;
                        break;
                case OPT_PARALLEL:
                        if (!cli_uint("--parallel", optarg, 1, AXP_MAX_BATCH, &u))
                                return 2;
                        a->parallel = (int) u;
                        break;
                case OPT_JSON: a->json = true; break;
                case OPT_DEVICE: a->device = optarg; break;
                case OPT_KV_TYPE:
                        if (!cli_kv_type(optarg, &a->kv_type))
                                return 2;
                        break;
                case OPT_SCHEMA: a->schema_file = optarg; break;
                case OPT_GRAMMAR: a->grammar_file = optarg; break;
                case OPT_TOOLS: a->tools_file = optarg; break;
                case OPT_TOOL_CHOICE: a->tool_choice = optarg; break;
                case OPT_SUFFIX:
                        if (!cli_utf8("--suffix", optarg, strlen(optarg)))
                                return 2;
                        a->suffix = optarg;
                        break;
                case OPT_LOGPROBS:
                        if (!cli_uint("--logprobs", optarg, 0, AXP_LOGPROBS_MAX, &u))
                                return 2;
                        a->logprobs = (int) u;
                        break;
                case 'h': return usage(stdout) - 1; /* -1: stop, exit 0 */
                default: return 2;
                }
        }
        if (optind < argc)
                return cli_usage_error("unexpected argument '%s'", argv[optind]);
        if (!!a->schema_file + !!a->grammar_file + !!a->tools_file > 1)
                return cli_usage_error("give one of --json-schema, --grammar and --tools");
        if (a->think_set && (a->raw || a->suffix))
                return cli_usage_error("--think goes with the chat template (not --raw or --suffix)");
        if (a->tools_file && a->raw)
                return cli_usage_error("--tools needs the chat template (not --raw)");
        if (a->tool_choice && !a->tools_file)
                return cli_usage_error("--tool-choice needs --tools");
        if (a->logprobs >= 0 && !a->json)
                return cli_usage_error("--logprobs goes with --json");
        if (a->suffix && (a->tools_file || a->system || a->raw))
                return cli_usage_error("--suffix takes the text before and after the cursor alone "
                                       "(not --tools, --system or --raw)");
        return 0;
}

/* The prompt as the model sees it: raw text, or the chat template around it. */
static int build_prompt(const axp_model *m, const gen_args *a, const char *text, size_t len,
                        const char *tools, char **ret_grammar, axp_chat_family *ret_family,
                        axp_tools **ret_tools, int32_t **ret,
                        int *ret_n) {
        if (a->suffix) {
                axp_error err = { 0 };
                if (!cli_no_nul(a->file ? a->file : "the prompt", text, len))
                        return 1;
                return axp_tokenize_fim(m->tok, &(axp_fim_prompt) { .prefix = text, .suffix = a->suffix }, ret, ret_n, NULL,
                                        &err) < 0 ? cli_fail("%s", err.msg) : 0;
        }
        if (tools) {
                axp_error err = { 0 };
                if (!cli_no_nul(a->file ? a->file : "the prompt", text, len))
                        return 1;
                _cleanup_free_ char *formatted = NULL;
                if (axp_tools_prepare(m->chat_template, m->tok, tools, a->tool_choice, a->system, NULL, 0, text,
                                      &formatted, ret_grammar, ret_family, ret_tools, &err) < 0 ||
                    axp_chat_apply_think(m->chat_template, a->think_set ? a->think : -1, &formatted, &err) < 0)
                        return cli_fail("%s", err.msg);
                return cli_tokenize_raw(m, formatted, strlen(formatted), ret, ret_n);
        }
        if (a->raw)
                return cli_tokenize_raw(m, text, len, ret, ret_n);
        /* the chat template takes the prompt as a C string: a NUL would cut it short */
        if (!cli_no_nul(a->file ? a->file : "the prompt", text, len))
                return 1;
        axp_chat_msg msgs[2];
        size_t n = 0;
        if (a->system)
                msgs[n++] = (axp_chat_msg) { "system", a->system };
        msgs[n++] = (axp_chat_msg) { "user", text };
        if (axp_chat_template_unknown(m->chat_template))
                cli_warn("warning: " AXP_CHAT_UNKNOWN_WARNING);
        _cleanup_free_ char *formatted =
                axp_chat_format(axp_chat_detect(m->chat_template, m->tok), msgs, n, true);
        if (!formatted)
                return cli_fail("out of memory");
        axp_error err = { 0 };
        if (axp_chat_apply_think(m->chat_template, a->think_set ? a->think : -1, &formatted, &err) < 0)
                return cli_fail("%s", err.msg);
        return cli_tokenize_raw(m, formatted, strlen(formatted), ret, ret_n);
}

/* One completion's fields: its tokens, text, finish reason and, where a tool call was asked
 * for and made, the call. */
static void print_completion(const int32_t *toks, int n_toks, const char *text, size_t len, const axp_gen *g,
                             bool tools, axp_chat_family family, const axp_tools *call_tools) {
        printf("\"tokens\": [");
        for (int i = 0; i < n_toks; i++)
                printf("%s%d", i ? ", " : "", toks[i]);
        printf("], \"text\": ");
        axp_json_string(stdout, text, len);
        _cleanup_free_ char *call = NULL;
        if (tools && g->reason == AXP_FINISH_STOP && axp_tools_read_call(family, call_tools, text, len, &call) < 0)
                call = NULL;
        printf(", \"finish_reason\": \"%s\"", call ? "tool_calls" : axp_finish_reason_name(g->reason));
        if (call)
                printf(", \"tool_call\": %s", call);
        if (!g->logprobs)
                return;
        /* each token's id, bytes as text (a token may end inside a character: JSON escapes
         * what is not whole UTF-8), log-probability and alternatives */
        printf(", \"logprobs\": [");
        for (size_t i = 0; i < g->n_lp; i++) {
                const axp_token_logprob *r = &g->lp[i];
                printf("%s{", i ? ", " : "");
                for (uint32_t j = 0; j <= r->n_top; j++) {
                        int32_t id = j ? r->top[j - 1].token : r->token;
                        char piece[256];
                        int n = axp_token_to_piece(g->model->tok, id, false, piece, sizeof(piece));
                        if (j == 1)
                                printf(", \"top_logprobs\": [");
                        printf("%s\"token\": %d, \"piece\": ", j > 1 ? "}, {" : j ? "{" : "", id);
                        axp_json_string(stdout, piece, n > 0 ? (size_t) n : 0);
                        printf(", \"logprob\": %.9g", j ? r->top[j - 1].logprob : r->logprob);
                }
                printf("%s}", r->n_top ? "}]" : "");
        }
        printf("]");
}

/* Keep the text the generation released (appended to *all), or print it. */
static int take_text(axp_gen *g, bool keep, char **all, size_t *len, size_t *cap) {
        if (g->out_len == 0)
                return 0;
        if (!keep) {
                int k = cli_write_text(g->out, g->out_len);
                if (k < 0)
                        return cli_fail("cannot write the output: %s", strerror(-k));
        } else {
                if (*len + g->out_len + 1 > *cap) {
                        size_t ncap = (*len + g->out_len + 1) * 2;
                        char *n = realloc(*all, ncap);
                        if (!n)
                                return cli_fail("out of memory");
                        *all = n;
                        *cap = ncap;
                }
                memcpy(*all + *len, g->out, g->out_len);
                *len += g->out_len;
                (*all)[*len] = 0;
        }
        g->out_len = 0;
        return 0;
}

/* One completion of the prompt: its sequence, its sampler and what it produced. */
typedef struct completion {
        axp_seq seq;
        axp_gen gen;
        int32_t *toks;
        int n_toks;
        char *text;
        size_t len, cap;
} completion;

typedef struct completions {
        completion *c;
        int n;
} completions;

/* The command's status once the output is written: each completion that failed says why on
 * stderr (a step's error: the grammar), and the status is then 1. */
static int completions_status(const completions *cs) {
        int r = 0;
        for (int i = 0; i < cs->n; i++)
                if (cs->c[i].gen.reason == AXP_FINISH_ERROR && cs->c[i].gen.error[0]) {
                        if (cs->n > 1)
                                r = cli_fail("completion %d: %s", i, cs->c[i].gen.error);
                        else
                                r = cli_fail("%s", cs->c[i].gen.error);
                }
        return r;
}

static void completions_freep(completions *cs) {
        for (int i = 0; cs->c && i < cs->n; i++) {
                axp_seq_free(&cs->c[i].seq);
                axp_gen_free(&cs->c[i].gen);
                free(cs->c[i].toks);
                free(cs->c[i].text);
        }
        free(cs->c);
}

int cli_generate(int argc, char **argv) {
        gen_args a = { 0 };
        int r = parse(argc, argv, &a);
        if (r != 0)
                return r < 0 ? 0 : r;

        _cleanup_free_ char *text = NULL;
        size_t len;
        if ((r = cli_prompt(a.prompt, a.file, &text, &len)) != 0)
                return r;
        _cleanup_(axp_model_freep) axp_model *m = NULL;
        _cleanup_(axp_device_freep) axp_device *dev = NULL;
        /* the model's load: its file mapped and checked, then its weights prepared for the
         * device (packed for the CPU's kernels, uploaded to a GPU) */
        double load_t0 = axp_now();
        if ((r = cli_load(a.model, a.device, a.threads, &m, &dev)) != 0)
                return r;
        double load_s = axp_now() - load_t0;

        _cleanup_free_ int32_t *prompt = NULL;
        _cleanup_free_ char *tools = NULL, *tools_grammar = NULL;
        axp_chat_family family = AXP_CHAT_RAW;
        _cleanup_(axp_tools_freep) axp_tools *call_tools = NULL;
        int n_prompt = 0;
        axp_error terr = { 0 };
        size_t tlen;
        if (a.tools_file && axp_read_file(a.tools_file, AXP_TEXT_FILE_MAX, &tools, &tlen, &terr) < 0)
                return cli_fail("%s", terr.msg);
        if ((r = build_prompt(m, &a, text, len, tools, &tools_grammar, &family, &call_tools, &prompt, &n_prompt)) != 0)
                return r;
        if (n_prompt > m->hp.n_ctx_train)
                return cli_fail("the prompt has %d tokens but the model's context holds %d", n_prompt,
                                m->hp.n_ctx_train);

        long budget = MIN((long) a.n_predict, (long) m->hp.n_ctx_train - n_prompt);
        const int np = a.parallel;
        axp_error err = { 0 };
        _cleanup_free_ char *schema = NULL, *grammar = NULL;
        size_t flen;
        if ((a.schema_file && axp_read_file(a.schema_file, AXP_TEXT_FILE_MAX, &schema, &flen, &err) < 0) ||
            (a.grammar_file && axp_read_file(a.grammar_file, AXP_TEXT_FILE_MAX, &grammar, &flen, &err) < 0))
                return cli_fail("%s", err.msg);
        _cleanup_(completions_freep) completions cs = { calloc((size_t) np, sizeof(completion)), np };
        if (!cs.c)
                return cli_fail("out of memory");
        for (int i = 0; i < np; i++) {
                completion *c = &cs.c[i];
                axp_sampler_params sp = a.sp;
                sp.seed += (uint64_t) i;
                if (!(c->toks = malloc((size_t) (budget + 1) * sizeof(int32_t))))
                        return cli_fail("out of memory");
                if (axp_seq_init(&c->seq, m, a.kv_type, m->hp.n_ctx_train, (int) (n_prompt + budget), &err) < 0 ||
                    axp_gen_init(&c->gen, m, &sp, a.stops, a.n_stops, (uint32_t) budget, prompt, n_prompt, &err) < 0 ||
                    axp_gen_constrain(&c->gen, tools_grammar ? tools_grammar : grammar, schema, &err) < 0)
                        return cli_fail("%s", err.msg);
                if (a.logprobs >= 0)
                        axp_gen_want_logprobs(&c->gen, (uint32_t) a.logprobs);
        }

        double t0 = axp_now();
        long n_prefilled = 0;
        for (int i = 0; i < np; i++) {
                /* the prompt is prefilled once: the other completions copy its cache but for the
                 * last position, whose logits each computes (the same bits whatever the
                 * batching); not where sliding-window rings keep less than every position */
                axp_error cerr = { 0 };
                int from = i > 0 && n_prompt > 1 &&
                                           axp_seq_copy_prefix(&cs.c[i].seq, &cs.c[0].seq, n_prompt - 1, &cerr) == 0
                                   ? n_prompt - 1
                                   : 0;
                if (axp_forward_prefill(dev, &cs.c[i].seq, prompt + from, n_prompt - from, a.chunk, &err) < 0)
                        return cli_fail("%s", err.msg);
                n_prefilled += n_prompt - from;
        }
        double t1 = axp_now(), t2 = t1;

        /* one completion on text output streams; otherwise each keeps its text */
        const bool keep = a.json || np > 1;
        long n_decoded = 0;
        for (int step = 0; step < budget; step++) {
                axp_seq *seqs[AXP_MAX_BATCH];
                int32_t ids[AXP_MAX_BATCH];
                int n = 0;
                for (int i = 0; i < np; i++) {
                        completion *c = &cs.c[i];
                        if (c->gen.done)
                                continue;
                        int32_t id = axp_gen_next(&c->gen, c->seq.logits);
                        if (!(c->gen.done && c->gen.reason == AXP_FINISH_ERROR)) /* else no token */
                                c->toks[c->n_toks++] = id;
                        if ((r = take_text(&c->gen, keep, &c->text, &c->len, &c->cap)) != 0)
                                return r;
                        if (!c->gen.done) {
                                seqs[n] = &c->seq;
                                ids[n++] = id;
                        }
                }
                /* the last step's tokens are not decoded: nothing would read their logits */
                if (n == 0 || step + 1 == budget)
                        break;
                if (axp_forward_decode(dev, seqs, ids, n, &err) < 0)
                        return cli_fail("%s", err.msg);
                n_decoded += n;
                t2 = axp_now();
        }
        for (int i = 0; i < np; i++) {
                axp_gen_finish(&cs.c[i].gen, AXP_FINISH_LENGTH);
                if ((r = take_text(&cs.c[i].gen, keep, &cs.c[i].text, &cs.c[i].len, &cs.c[i].cap)) != 0)
                        return r;
        }
        if (!keep) {
                putchar('\n');
                return completions_status(&cs);
        }
        if (!a.json) {
                for (int i = 0; i < np; i++) {
                        printf("--- completion %d ---\n", i);
                        fflush(stdout);
                        int k = cli_write_text(cs.c[i].text ? cs.c[i].text : "", cs.c[i].len);
                        if (k < 0)
                                return cli_fail("cannot write the output: %s", strerror(-k));
                        putchar('\n');
                }
                return completions_status(&cs);
        }
        printf("{\"prompt_tokens\": [");
        for (int i = 0; i < n_prompt; i++)
                printf("%s%d", i ? ", " : "", prompt[i]);
        printf("], ");
        if (np > 1)
                printf("\"choices\": [");
        uint32_t n_masked = 0;
        double mask_s = 0;
        long n_toks = 0;
        for (int i = 0; i < np; i++) {
                const completion *c = &cs.c[i];
                if (np > 1)
                        printf("%s{\"index\": %d, ", i ? ", " : "", i);
                print_completion(c->toks, c->n_toks, c->text ? c->text : "", c->len, &c->gen, tools != NULL, family, call_tools);
                if (np > 1)
                        printf("}");
                n_masked += c->gen.n_masked;
                mask_s += c->gen.mask_s;
                n_toks += c->n_toks;
        }
        if (np > 1)
                printf("]");
        printf(", \"timings\": {\"load_s\": %.3f, \"prefill_tokens_per_s\": %.3f, \"decode_tokens_per_s\": %.3f",
               load_s, t1 > t0 ? (double) n_prefilled / (t1 - t0) : 0, n_decoded > 0 && t2 > t1 ? n_decoded / (t2 - t1) : 0);
        if (cs.c[0].gen.matcher)
                printf(", \"grammar_ms_per_token\": %.4f, \"grammar_masked_steps\": %u",
                       n_toks > 0 ? mask_s * 1e3 / n_toks : 0, n_masked);
        /* on the CPU, the path its kernels took and the prefetch plan timed on this model's
         * weights when it was loaded (kernels.h), which benchmarks print beside their figures */
        if (strcmp(axp_device_backend(dev), "cpu") == 0)
                printf(", \"cpu_path\": \"%s\", \"prefetch_plan\": \"%s\"", axp_cpu_isa(), axp_cpu_prefetch());
        printf("}}\n");
        fflush(stdout);
        return completions_status(&cs);
}
