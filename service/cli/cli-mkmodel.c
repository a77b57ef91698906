/* SPDX-License-Identifier: MIT */
/* agentxpu mkmodel: write a synthetic model with seeded random weights. */
#include <float.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/parse.h"
#include "cli.h"
#include "mkmodel.h"
#include "model/embedding.h"
#include "kernels/types.h"

static int help(FILE *f) {
        fprintf(f,
                "usage: agentxpu mkmodel [OPTIONS] -o FILE\n"
                "\n"
                "Write a synthetic GGUF model with seeded random weights (loadable by agentxpu\n"
                "and llama.cpp).\n"
                "\n"
                "  --arch ARCH        llama (default), qwen2, qwen3, phi3 (fused QKV and gate/up)\n"
                "                     gemma2 (sliding window on every other layer, soft-capped\n"
                "                     attention and logits), gemma3 (sliding window on 5 of every\n"
                "                     6 layers), granite (Granite 3's embedding, residual,\n"
                "                     attention and logit scales), smollm3 (no RoPE on every\n"
                "                     fourth layer), olmo2 (post-norms only), exaone (NeoX RoPE),\n"
                "                     mistral3 (with --rope-scaling yarn:F, Ministral 3's YaRN keys\n"
                "                     and attention temperature) or qwen3moe\n"
                "                     (a mixture of experts; --ffn is each expert's length)\n"
                "  --type TYPE        weight matrices: f32, f16, bf16, q8_0 (default), q4_0, q4_1,\n"
                "                     q5_0, q5_1, iq4_nl, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_xs;\n"
                "                     norms and biases stay f32\n"
                "  --vocab-from GGUF  copy the tokenizer of another GGUF (default: a small built-in\n"
                "                     byte-level BPE vocabulary)\n"
                "  --chat-template T  write T as tokenizer.chat_template (a Jinja template, or a\n"
                "                     family: llama3, chatml, mistral, llama2, raw)\n"
                "  --dim D            embedding length (default 256)\n"
                "  --layers L         blocks (default 2)\n"
                "  --heads H          attention heads (default 4)\n"
                "  --kv-heads K       key/value heads (default 2)\n"
                "  --ffn F            feed-forward length (default 512)\n"
                "  --ctx C            context length (default 512)\n"
                "  --head-dim N       per-head dimension (default dim/heads)\n"
                "  --rope-base B      RoPE frequency base (default 500000 llama, 10000 phi3\n"
                "                     and gemma2, 1000000 qwen and gemma3's global layers)\n"
                "  --rope-dim N       rotated dimensions per head (default: the head dimension)\n"
                "  --longrope C       LongRoPE as Phi-3.5 and Phi-4-mini carry it: C is the\n"
                "                     original context (at most --ctx), with long and short\n"
                "                     frequency factors and the attention factor\n"
                "  --rope-scaling T:F linear:F or yarn:F (Qwen2.5's long-context files; the original\n"
                "                     context --ctx / F)\n"
                "  --swa N            the sliding window (gemma2, gemma3: default 16; another\n"
                "                     architecture gets the key, as Mistral's llama files carry\n"
                "                     it, and attends to the whole context as llama.cpp does)\n"
                "  --attn-softcap X   gemma2's attention logit soft-cap (default 50)\n"
                "  --final-softcap X  gemma2's output logit soft-cap (default 30)\n"
                "  --pooling P        an embedding model's pooling_type: mean, cls or last\n"
                "                     (default: none written, as a chat model's file)\n"
                "  --experts N        qwen3moe's experts per layer (default 8)\n"
                "  --experts-used K   qwen3moe's experts per token (default 2)\n"
                "  --tied             no output.weight: the LM head uses token_embd\n"
                "  --fim              the built-in vocabulary with Qwen2.5-Coder's fill-in-the-middle\n"
                "                     tokens and their tokenizer.ggml.fim_*_token_id keys\n"
                "  --no-eog           the LM head never favours control tokens (end of generation\n"
                "                     among them): generation runs to its token limit\n"
                "  --seed S           random seed (default 1)\n"
                "  --name NAME        general.name (default synthetic-ARCH-TYPE)\n"
                "  --threads N        threads generating weights (default: all CPUs)\n"
                "  -o, --output FILE  the model file to write\n"
                "\n"
                "the K-quants and iq4_xs need --dim and --ffn (and heads × head-dim) to be multiples\n"
                "of 256;\n"
                "the other quantized types multiples of 32.\n");
        return f == stderr ? 2 : 0;
}

/* A whole-number shape option into an int field. */
static bool parse_int(const char *opt, const char *s, uint64_t lo, uint64_t hi, int *ret) {
        uint64_t v;
        if (!cli_uint(opt, s, lo, hi, &v))
                return false;
        *ret = (int) v;
        return true;
}

int cli_mkmodel(int argc, char **argv) {
        enum { O_ARCH = 256, O_TYPE, O_VOCAB, O_DIM, O_LAYERS, O_HEADS, O_KV_HEADS, O_FFN, O_CTX,
               O_HEAD_DIM, O_ROPE_DIM, O_LONGROPE, O_ROPE_SCALING, O_ROPE, O_SWA, O_ATTN_CAP, O_FINAL_CAP, O_EXPERTS, O_EXPERTS_USED, O_TIED, O_FIM, O_NO_EOG, O_POOLING, O_SEED, O_NAME, O_THREADS, O_TEMPLATE };
        static const struct option opts[] = {
                { "arch", required_argument, NULL, O_ARCH },
                { "type", required_argument, NULL, O_TYPE },
                { "vocab-from", required_argument, NULL, O_VOCAB },
                { "dim", required_argument, NULL, O_DIM },
                { "layers", required_argument, NULL, O_LAYERS },
                { "heads", required_argument, NULL, O_HEADS },
                { "kv-heads", required_argument, NULL, O_KV_HEADS },
                { "ffn", required_argument, NULL, O_FFN },
                { "ctx", required_argument, NULL, O_CTX },
                { "head-dim", required_argument, NULL, O_HEAD_DIM },
                { "swa", required_argument, NULL, O_SWA },
                { "attn-softcap", required_argument, NULL, O_ATTN_CAP },
                { "final-softcap", required_argument, NULL, O_FINAL_CAP },
                { "experts", required_argument, NULL, O_EXPERTS },
                { "experts-used", required_argument, NULL, O_EXPERTS_USED },
                { "rope-base", required_argument, NULL, O_ROPE },
                { "rope-dim", required_argument, NULL, O_ROPE_DIM },
                { "longrope", required_argument, NULL, O_LONGROPE },
                { "rope-scaling", required_argument, NULL, O_ROPE_SCALING },
                { "tied", no_argument, NULL, O_TIED },
                { "fim", no_argument, NULL, O_FIM },
                { "no-eog", no_argument, NULL, O_NO_EOG },
                { "pooling", required_argument, NULL, O_POOLING },
                { "seed", required_argument, NULL, O_SEED },
                { "name", required_argument, NULL, O_NAME },
                { "chat-template", required_argument, NULL, O_TEMPLATE },
                { "threads", required_argument, NULL, O_THREADS },
                { "output", required_argument, NULL, 'o' },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        axp_mkmodel_params p;
        axp_error err = { 0 };
        struct stat st;
        double t0, d;
        bool ok;
        int c, k, a;

        axp_mkmodel_defaults(&p);
        optind = 1;
        while ((c = cli_getopt(argc, argv, "o:h", opts)) >= 0) {
                ok = true;
                switch (c) {
                case O_ARCH:
                        a = axp_arch_from_name(optarg);
                        if (a < 0) {
                                char list[AXP_ARCH_LIST_MAX];
                                return cli_usage_error("unknown --arch '%s' (%s)", optarg,
                                                       axp_arch_list(list, sizeof(list)));
                        }
                        p.arch = (enum axp_arch) a;
                        break;
                case O_TYPE:
                        a = axp_type_from_name(optarg);
                        if (a < 0)
                                return cli_usage_error("unknown --type '%s' (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, "
                                                       "q5_1, iq4_nl, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_xs)",
                                                       optarg);
                        p.type = (uint32_t) a;
                        break;
                case O_VOCAB:
                        p.vocab_from = optarg;
                        break;
                case O_POOLING:
                        if (axp_pooling_from_name(optarg, &p.pooling) < 0 || p.pooling == AXP_POOLING_MODEL)
                                return cli_usage_error("unknown --pooling '%s' (mean, cls, last)", optarg);
                        break;
                case O_DIM:
                        ok = parse_int("--dim", optarg, 1, 1 << 16, &p.n_embd);
                        break;
                case O_LAYERS:
                        ok = parse_int("--layers", optarg, 1, 1024, &p.n_layer);
                        break;
                case O_HEADS:
                        ok = parse_int("--heads", optarg, 1, 1024, &p.n_head);
                        break;
                case O_KV_HEADS:
                        ok = parse_int("--kv-heads", optarg, 1, 1024, &p.n_head_kv);
                        break;
                case O_FFN:
                        ok = parse_int("--ffn", optarg, 1, 1 << 18, &p.n_ff);
                        break;
                case O_CTX:
                        ok = parse_int("--ctx", optarg, 1, 1 << 24, &p.n_ctx);
                        break;
                case O_SWA:
                        ok = parse_int("--swa", optarg, 1, 1 << 24, &p.n_swa);
                        break;
                case O_ATTN_CAP:
                        if ((ok = cli_double("--attn-softcap", optarg, 1e-3, 1e6, &d)))
                                p.attn_softcap = (float) d;
                        break;
                case O_FINAL_CAP:
                        if ((ok = cli_double("--final-softcap", optarg, 1e-3, 1e6, &d)))
                                p.final_softcap = (float) d;
                        break;
                case O_EXPERTS:
                        ok = parse_int("--experts", optarg, 1, AXP_MAX_EXPERTS, &p.n_expert);
                        break;
                case O_EXPERTS_USED:
                        ok = parse_int("--experts-used", optarg, 1, AXP_MAX_EXPERTS, &p.n_expert_used);
                        break;
                case O_HEAD_DIM:
                        ok = parse_int("--head-dim", optarg, 1, 1 << 12, &p.head_dim);
                        break;
                case O_ROPE_DIM:
                        ok = parse_int("--rope-dim", optarg, 2, 1 << 12, &p.rope_dim);
                        break;
                case O_ROPE_SCALING: {
                        char kind[16];
                        double f = 0;
                        int used = 0;
                        ok = sscanf(optarg, "%15[a-z]:%lf%n", kind, &f, &used) == 2 && optarg[used] == 0 &&
                             (strcmp(kind, "linear") == 0 || strcmp(kind, "yarn") == 0) && f > 1 && f <= 1024;
                        if (!ok)
                                return cli_usage_error("--rope-scaling '%s': want linear:FACTOR or yarn:FACTOR "
                                                       "(a factor above 1)", optarg);
                        p.rope_scaling = strcmp(kind, "yarn") == 0 ? "yarn" : "linear";
                        p.rope_factor = (float) f;
                        break;
                }
                case O_LONGROPE:
                        ok = parse_int("--longrope", optarg, 2, 1 << 24, &p.n_ctx_orig);
                        break;
                case O_ROPE:
                        if ((ok = cli_double("--rope-base", optarg, 1, 1e12, &d)))
                                p.rope_base = (float) d;
                        break;
                case O_TIED:
                        p.tied = true;
                        break;
                case O_FIM:
                        p.fim = true;
                        break;
                case O_NO_EOG:
                        p.no_eog = true;
                        break;
                case O_SEED:
                        ok = cli_uint("--seed", optarg, 0, UINT64_MAX, &p.seed);
                        break;
                case O_TEMPLATE:
                        p.chat_template = optarg;
                        break;
                case O_NAME:
                        p.name = optarg;
                        break;
                case O_THREADS:
                        ok = parse_int("--threads", optarg, 1, 64, &p.n_threads);
                        break;
                case 'o':
                        p.path = optarg;
                        break;
                case 'h':
                        return help(stdout);
                default:
                        return 2;
                }
                if (!ok)
                        return 2;
        }
        if (optind < argc)
                return cli_usage_error("unexpected argument '%s'", argv[optind]);
        if (!p.path)
                return cli_usage_error("no output file (-o FILE)");
        if (p.fim && p.vocab_from)
                return cli_usage_error("--fim adds to the built-in vocabulary, not to --vocab-from's");

        t0 = axp_now();
        k = axp_mkmodel(&p, &err);
        if (k < 0)
                return cli_fail("%s", err.msg);
        if (stat(p.path, &st) == 0)
                printf("wrote %s: %s, %s weights, %.1f MB in %.1f s\n", p.path,
                       axp_arch_name(p.arch), axp_type_traits_get(p.type)->name,
                       (double) st.st_size / 1e6, axp_now() - t0);
        return 0;
}
