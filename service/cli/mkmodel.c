/* SPDX-License-Identifier: MIT */
/* Synthetic models. The weights are drawn row by row while the file is written (a gguf
 * fill callback), on every CPU, from a random stream keyed by (seed, tensor, row): the same
 * seed gives the same bytes whatever the thread count, and the same underlying weights for
 * every --type. */
#include "mkmodel.h"

#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "model/gguf.h"
#include "model/quantize.h"
#include "base/rng.h"
#include "base/utf8.h"
#include "kernels/types.h"

#define STD_EMBD 0.02f
#define STD_PROJ 0.08f
#define STD_NORM 0.05f
#define STD_BIAS 0.02f
#define MAX_THREADS 64

void axp_mkmodel_defaults(axp_mkmodel_params *p) {
        *p = (axp_mkmodel_params) {
                .arch = AXP_ARCH_LLAMA,
                .type = AXP_TYPE_Q8_0,
                .n_embd = 256,
                .n_layer = 2,
                .n_head = 4,
                .n_head_kv = 2,
                .n_ff = 512,
                .n_ctx = 512,
                .seed = 1,
        };
}

/* Random numbers ------------------------------------------------------------------------- */

static uint64_t hash_name(uint64_t seed, const char *s) {
        uint64_t h = 0xcbf29ce484222325ull ^ seed; /* FNV-1a, then mixed */
        for (; *s; s++)
                h = (h ^ (uint8_t) *s) * 0x100000001b3ull;
        return axp_splitmix64(&h);
}

/* Standard normal values by Marsaglia and Tsang's ziggurat (128 strips): one 64-bit draw
 * per value in the common case, the strip index and the value from separate bits. */
typedef struct ziggurat {
        uint32_t k[128];
        float w[128], f[128];
} ziggurat;

#define ZIG_R 3.442619855899
#define ZIG_V 9.91256303526217e-3

static void ziggurat_init(ziggurat *z) {
        const double m = 2147483648.0;
        double dn = ZIG_R, tn = dn, q = ZIG_V / exp(-0.5 * dn * dn);
        z->k[0] = (uint32_t) (dn / q * m);
        z->k[1] = 0;
        z->w[0] = (float) (q / m);
        z->w[127] = (float) (dn / m);
        z->f[0] = 1.0f;
        z->f[127] = (float) exp(-0.5 * dn * dn);
        for (int i = 126; i >= 1; i--) {
                dn = sqrt(-2.0 * log(ZIG_V / dn + exp(-0.5 * dn * dn)));
                z->k[i + 1] = (uint32_t) (dn / tn * m);
                tn = dn;
                z->f[i] = (float) exp(-0.5 * dn * dn);
                z->w[i] = (float) (dn / m);
        }
}

static inline float uniform01(uint64_t *s) { /* (0, 1] */
        return (float) ((axp_splitmix64(s) >> 40) + 1) * 0x1p-24f;
}

/* The rare case: the wedge of a strip, or the tail beyond ZIG_R. */
static __attribute__((noinline)) float normal_slow(const ziggurat *z, uint64_t *s, uint64_t x) {
        for (;;) {
                int32_t hz = (int32_t) (x >> 32);
                uint32_t iz = x & 127;
                uint32_t a = hz < 0 ? (uint32_t) -(int64_t) hz : (uint32_t) hz;
                float v = (float) hz * z->w[iz];
                if (a < z->k[iz])
                        return v;
                if (iz == 0) {
                        const float r = (float) ZIG_R;
                        float t, y;
                        do {
                                t = -logf(uniform01(s)) / r;
                                y = -logf(uniform01(s));
                        } while (y + y < t * t);
                        return hz > 0 ? r + t : -r - t;
                }
                if (z->f[iz] + uniform01(s) * (z->f[iz - 1] - z->f[iz]) < expf(-0.5f * v * v))
                        return v;
                x = axp_splitmix64(s);
        }
}

static inline float normal(const ziggurat *z, uint64_t *s) {
        uint64_t x = axp_splitmix64(s);
        int32_t hz = (int32_t) (x >> 32);
        uint32_t iz = x & 127;
        uint32_t a = hz < 0 ? (uint32_t) -(int64_t) hz : (uint32_t) hz;
        if (_likely_(a < z->k[iz]))
                return (float) hz * z->w[iz];
        return normal_slow(z, s, x);
}

/* Tensors --------------------------------------------------------------------------------- */

/* W_FACTOR_*: LongRoPE's frequency divisors, 1 + |N| scaled: near 1 (short) or up to ~15 (long) */
enum weight_kind { W_EMBD, W_PROJ, W_NORM, W_BIAS, W_FACTOR_LONG, W_FACTOR_SHORT };

typedef struct spec {
        char name[64];
        uint32_t type;
        uint32_t n_dims;
        int64_t ne[3];
        enum weight_kind kind;
        const char *hint;  /* which option sets ne[0], for error messages */
        uint64_t stream;   /* hash of (seed, name) */
        int n_threads;
        const ziggurat *zig;
        const bool *zero_rows; /* rows left at zero (--no-eog), NULL: none */
} spec;

typedef struct fill_job {
        const spec *t;
        uint64_t row, n_rows;
        uint8_t *dst;
        int ret;
} fill_job;

static void *fill_rows(void *arg) {
        fill_job *j = arg;
        const spec *t = j->t;
        uint64_t row_bytes = axp_type_row_size(t->type, t->ne[0]);
        float *x = malloc((size_t) (t->ne[0] + 1) * sizeof(float));

        if (!x) {
                j->ret = -ENOMEM;
                return NULL;
        }
        for (uint64_t r = 0; r < j->n_rows; r++) {
                uint64_t state = t->stream + (j->row + r) * 0xd1b54a32d192ed03ull;
                float scale = t->kind == W_EMBD ? STD_EMBD : t->kind == W_PROJ ? STD_PROJ :
                              t->kind == W_NORM ? STD_NORM : STD_BIAS;
                float base = t->kind == W_NORM ? 1.0f : 0.0f;
                axp_splitmix64(&state);
                for (int64_t i = 0; i < t->ne[0]; i++)
                        x[i] = base + scale * normal(t->zig, &state);
                for (int64_t i = 0; (t->kind == W_FACTOR_LONG || t->kind == W_FACTOR_SHORT) && i < t->ne[0]; i++)
                        x[i] = 1.0f + (t->kind == W_FACTOR_LONG ? 4.0f : STD_NORM) * fabsf(x[i]);
                if (t->zero_rows && t->zero_rows[j->row + r])
                        memset(x, 0, (size_t) t->ne[0] * sizeof(float));
                axp_quantize_row(t->type, x, j->dst + r * row_bytes, t->ne[0]);
        }
        free(x);
        j->ret = 0;
        return NULL;
}

/* gguf_fill_fn: rows [row, row + n_rows), split over the threads. */
static int fill_tensor(void *userdata, uint64_t row, uint64_t n_rows, void *dst, axp_error *err) {
        const spec *t = userdata;
        uint64_t row_bytes = axp_type_row_size(t->type, t->ne[0]);
        fill_job jobs[MAX_THREADS];
        pthread_t th[MAX_THREADS];
        bool joinable[MAX_THREADS] = { false };
        int nth = t->n_threads, ret = 0;

        /* small tensors are not worth a thread */
        if (n_rows * (uint64_t) t->ne[0] < (1u << 16))
                nth = 1;
        nth = (int) MIN((uint64_t) nth, n_rows);
        for (int i = 0; i < nth; i++) {
                uint64_t lo = n_rows * (uint64_t) i / (uint64_t) nth;
                uint64_t hi = n_rows * (uint64_t) (i + 1) / (uint64_t) nth;
                jobs[i] = (fill_job) { t, row + lo, hi - lo, (uint8_t *) dst + lo * row_bytes, 0 };
        }
        for (int i = 1; i < nth; i++)
                joinable[i] = pthread_create(&th[i], NULL, fill_rows, &jobs[i]) == 0;
        for (int i = 0; i < nth; i++)
                if (!joinable[i]) /* ours, or a thread that could not start */
                        fill_rows(&jobs[i]);
        for (int i = 1; i < nth; i++)
                if (joinable[i])
                        pthread_join(th[i], NULL);
        for (int i = 0; i < nth; i++)
                if (jobs[i].ret < 0)
                        ret = jobs[i].ret;
        if (ret < 0)
                return axp_errorf(err, ret, "out of memory generating '%s'", t->name);
        return 0;
}

/* Built-in vocabulary ---------------------------------------------------------------------- *
 * A byte-level BPE vocabulary trained at run time on a short text: the 256 byte tokens in
 * GPT-2's byte-to-unicode form, a few hundred merges, and the control tokens the arch's chat
 * format needs. Small, so synthetic models stay small, yet it tokenizes like a real one. */

static const char corpus[] =
        "The engine runs one model for every program on the desktop. When you ask a question, "
        "the answer should come back quickly, and the work that runs in the background should "
        "still make progress without getting in the way. The scheduler splits the work of each "
        "request into small pieces and decides where every piece runs: on the processor, on the "
        "graphics unit, or on the neural unit. A request that the user is waiting for is served "
        "first; a background request waits for a gap, and it is paused when the user needs the "
        "machine. The model is read from a file that holds its weights and its vocabulary. "
        "Each word of the text is split into tokens, and each token becomes a vector of numbers. "
        "The layers of the model turn these vectors into a guess of the next token, one token "
        "at a time, until the answer is complete. Hello, world! This is a test of the "
        "tokenizer, with some numbers like 12, 345 and 2024, and a question: what is the time? "
        "Please write a short summary of the following text, and then list three ideas for "
        "the next step. Thank you for your help with this, and have a good day.\n"
        "The quick brown fox jumps over the lazy dog. She sells sea shells by the sea shore.\n";

#define BUILTIN_MERGES 300

typedef struct vocab {
        char **text;    /* tokens in byte-to-unicode form, NUL-terminated */
        int32_t *ttype; /* 1 normal, 3 control */
        size_t n, cap;
        char **merges;
        size_t n_merges;
        int32_t bos, eos, eot, pad;
        int32_t fim; /* the first of fim_special's tokens, -1: none */
} vocab;

static void vocab_free(vocab *v) {
        for (size_t i = 0; i < v->n; i++)
                free(v->text[i]);
        for (size_t i = 0; i < v->n_merges; i++)
                free(v->merges[i]);
        free(v->text);
        free(v->ttype);
        free(v->merges);
}

/* GPT-2's byte-to-unicode map: printable Latin-1 bytes stand for themselves, the others
 * are moved to U+0100 and up in byte order. Returns the UTF-8 length written to out. */
static int byte_to_utf8(uint8_t b, char *out) {
        unsigned cp;
        if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) {
                cp = b;
        } else {
                unsigned n = 0;
                for (unsigned c = 0; c < b; c++)
                        if (!((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || c >= 174))
                                n++;
                cp = 256 + n;
        }
        uint8_t u[4]; /* at most 2 bytes: cp < 0x800 */
        size_t n = axp_utf8_encode(cp, u);
        memcpy(out, u, n);
        return (int) n;
}

static char *encode_bytes(const uint8_t *p, size_t n) {
        char *s = malloc(2 * n + 1), *o = s;
        if (!s)
                return NULL;
        for (size_t i = 0; i < n; i++)
                o += byte_to_utf8(p[i], o);
        *o = 0;
        return s;
}

static int vocab_add(vocab *v, char *text, int32_t type) {
        if (!text)
                return -ENOMEM;
        if (v->n == v->cap) {
                size_t ncap = MAX(v->cap * 2, (size_t) 512);
                char **t = realloc(v->text, ncap * sizeof(char *));
                int32_t *y;
                if (!t) {
                        free(text);
                        return -ENOMEM;
                }
                v->text = t;
                y = realloc(v->ttype, ncap * sizeof(int32_t));
                if (!y) {
                        free(text);
                        return -ENOMEM;
                }
                v->ttype = y;
                v->cap = ncap;
        }
        v->text[v->n] = text;
        v->ttype[v->n] = type;
        return (int) v->n++;
}

typedef struct word {
        int32_t *ids;
        int n;
        int count;
} word;

static int cmp_u64(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;
        return x < y ? -1 : x > y;
}

/* Splits the corpus into words the way a GPT-2 style pre-tokenizer roughly would: letters
 * with an optional leading space, digit runs, single other characters. */
static int corpus_words(word **ret, size_t *ret_n) {
        const char *s = corpus;
        word *w = NULL;
        size_t n = 0, cap = 0;
        while (*s) {
                const char *b = s;
                size_t len, k;
                if (*s == ' ' && s[1] && (isalpha((unsigned char) s[1]) || isdigit((unsigned char) s[1])))
                        s++;
                if (isalpha((unsigned char) *s))
                        while (isalpha((unsigned char) *s))
                                s++;
                else if (isdigit((unsigned char) *s))
                        while (isdigit((unsigned char) *s))
                                s++;
                else
                        s++;
                len = (size_t) (s - b);
                for (k = 0; k < n; k++)
                        if (w[k].n == (int) len) {
                                int j = 0;
                                while (j < (int) len && w[k].ids[j] == (uint8_t) b[j])
                                        j++;
                                if (j == (int) len)
                                        break;
                        }
                if (k < n) {
                        w[k].count++;
                        continue;
                }
                if (n == cap) {
                        cap = MAX(cap * 2, (size_t) 64);
                        word *p = realloc(w, cap * sizeof(word));
                        if (!p)
                                goto oom;
                        w = p;
                }
                w[n].ids = malloc(len * sizeof(int32_t));
                if (!w[n].ids)
                        goto oom;
                for (size_t j = 0; j < len; j++)
                        w[n].ids[j] = (uint8_t) b[j];
                w[n].n = (int) len;
                w[n].count = 1;
                n++;
        }
        *ret = w;
        *ret_n = n;
        return 0;
oom:
        for (size_t k = 0; k < n; k++)
                free(w[k].ids);
        free(w);
        return -ENOMEM;
}

/* Byte strings of the tokens, to build merged tokens and find existing ones. */
typedef struct tokbytes {
        uint8_t *p;
        size_t n;
} tokbytes;

static int train_merges(vocab *v, tokbytes **bytes) {
        word *w = NULL;
        size_t n_words = 0, n_pairs_cap = 0;
        uint64_t *pairs = NULL;
        int k = corpus_words(&w, &n_words);
        if (k < 0)
                return k;
        for (size_t i = 0; i < n_words; i++)
                n_pairs_cap += (size_t) w[i].n * (size_t) w[i].count;
        pairs = malloc(MAX(n_pairs_cap, (size_t) 1) * sizeof(uint64_t));
        v->merges = calloc(BUILTIN_MERGES, sizeof(char *));
        if (!pairs || !v->merges) {
                k = -ENOMEM;
                goto out;
        }
        for (int m = 0; m < BUILTIN_MERGES; m++) {
                size_t np = 0, best_count = 0;
                uint64_t best = 0;
                int32_t a, b, id = -1;
                tokbytes nb;
                /* every adjacent pair, once per occurrence; counted after sorting */
                for (size_t i = 0; i < n_words; i++)
                        for (int j = 0; j + 1 < w[i].n; j++)
                                for (int c = 0; c < w[i].count; c++)
                                        pairs[np++] = ((uint64_t) w[i].ids[j] << 32) | (uint32_t) w[i].ids[j + 1];
                qsort(pairs, np, sizeof(uint64_t), cmp_u64);
                for (size_t i = 0; i < np;) {
                        size_t j = i;
                        while (j < np && pairs[j] == pairs[i])
                                j++;
                        if (j - i > best_count) { /* ties: the lowest pair wins (sorted order) */
                                best_count = j - i;
                                best = pairs[i];
                        }
                        i = j;
                }
                if (best_count == 0) /* every word is a single token */
                        break;
                a = (int32_t) (best >> 32);
                b = (int32_t) (best & 0xffffffff);
                nb.n = (*bytes)[a].n + (*bytes)[b].n;
                nb.p = malloc(nb.n);
                if (!nb.p) {
                        k = -ENOMEM;
                        goto out;
                }
                memcpy(nb.p, (*bytes)[a].p, (*bytes)[a].n);
                memcpy(nb.p + (*bytes)[a].n, (*bytes)[b].p, (*bytes)[b].n);
                for (size_t t = 0; t < v->n; t++)
                        if ((*bytes)[t].n == nb.n && memcmp((*bytes)[t].p, nb.p, nb.n) == 0)
                                id = (int32_t) t;
                if (id < 0) {
                        tokbytes *p = realloc(*bytes, (v->n + 1) * sizeof(tokbytes));
                        if (!p) {
                                free(nb.p);
                                k = -ENOMEM;
                                goto out;
                        }
                        *bytes = p;
                        id = vocab_add(v, encode_bytes(nb.p, nb.n), 1);
                        if (id < 0) {
                                free(nb.p);
                                k = id;
                                goto out;
                        }
                        (*bytes)[id] = nb;
                } else {
                        free(nb.p);
                }
                if (asprintf(&v->merges[v->n_merges], "%s %s", v->text[a], v->text[b]) < 0) {
                        v->merges[v->n_merges] = NULL;
                        k = -ENOMEM;
                        goto out;
                }
                v->n_merges++;
                /* apply the merge to every word */
                for (size_t i = 0; i < n_words; i++) {
                        int o = 0;
                        for (int j = 0; j < w[i].n; j++) {
                                if (j + 1 < w[i].n && w[i].ids[j] == a && w[i].ids[j + 1] == b) {
                                        w[i].ids[o++] = id;
                                        j++;
                                } else {
                                        w[i].ids[o++] = w[i].ids[j];
                                }
                        }
                        w[i].n = o;
                }
        }
        k = 0;
out:
        for (size_t i = 0; i < n_words; i++)
                free(w[i].ids);
        free(w);
        free(pairs);
        return k;
}

/* Qwen2.5-Coder's, in its order: prefix, middle, suffix, pad, repository, file separator */
static const char *const fim_special[] = { "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
                                           "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>" };

static int builtin_vocab(enum axp_arch arch, bool fim, vocab *v) {
        static const char *const llama_special[] = {
                "<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                "<|end_header_id|>", "<|eot_id|>",
        };
        static const char *const qwen_special[] = { "<|endoftext|>", "<|im_start|>", "<|im_end|>" };
        const char *const *special = arch == AXP_ARCH_LLAMA ? llama_special : qwen_special;
        size_t n_special = arch == AXP_ARCH_LLAMA ? ELEMENTSOF(llama_special) : ELEMENTSOF(qwen_special);
        tokbytes *bytes = calloc(256, sizeof(tokbytes));
        int k = 0, first_special;

        if (!bytes)
                return -ENOMEM;
        for (int b = 0; b < 256 && k >= 0; b++) {
                uint8_t c = (uint8_t) b;
                bytes[b].p = malloc(1);
                bytes[b].n = 1;
                if (!bytes[b].p) {
                        k = -ENOMEM;
                        break;
                }
                bytes[b].p[0] = c;
                k = vocab_add(v, encode_bytes(&c, 1), 1);
        }
        if (k >= 0)
                k = train_merges(v, &bytes);
        /* entries past 256 exist only for tokens the merges added */
        for (size_t i = 0; i < MAX(v->n, (size_t) 256); i++)
                free(bytes[i].p);
        free(bytes);
        if (k < 0)
                return k;
        first_special = (int) v->n;
        for (size_t i = 0; i < n_special; i++) {
                k = vocab_add(v, strdup(special[i]), 3);
                if (k < 0)
                        return k;
        }
        v->fim = -1;
        if (fim) {
                v->fim = (int32_t) v->n;
                for (size_t i = 0; i < ELEMENTSOF(fim_special); i++)
                        if ((k = vocab_add(v, strdup(fim_special[i]), 3)) < 0)
                                return k;
        }
        if (arch == AXP_ARCH_LLAMA) {
                v->bos = first_special;     /* <|begin_of_text|> */
                v->eos = first_special + 1; /* <|end_of_text|> */
                v->eot = first_special + 4; /* <|eot_id|> */
                v->pad = -1;
        } else {
                v->bos = first_special;     /* <|endoftext|> */
                v->eos = first_special + 2; /* <|im_end|> */
                v->eot = first_special + 2;
                v->pad = first_special;
        }
        return 0;
}

/* Jinja chat templates in the form llama.cpp and common runtimes recognize. */
static const char llama3_template[] =
        "{{ bos_token }}{% for message in messages %}"
        "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + "
        "message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
        "{% endif %}";
static const char chatml_template[] =
        "{% for message in messages %}"
        "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/* Control tokens and the end-of-generation ids: the rows --no-eog leaves at zero. */
static bool *control_rows(const int32_t *ttype, size_t n, const int32_t *ids, size_t n_ids) {
        bool *rows = calloc(n, sizeof(bool));
        if (!rows)
                return NULL;
        for (size_t i = 0; i < n; i++)
                rows[i] = ttype && ttype[i] == 3; /* CONTROL */
        for (size_t i = 0; i < n_ids; i++)
                if (ids[i] >= 0 && (size_t) ids[i] < n)
                        rows[ids[i]] = true;
        return rows;
}

static int write_builtin_vocab(gguf_writer *w, enum axp_arch arch, bool fim, const char *chat_template,
                               int *ret_n_vocab, bool **ret_control) {
        vocab v = { 0 };
        int k = builtin_vocab(arch, fim, &v);
        if (k >= 0 && ret_control) {
                int32_t ids[2] = { v.eos, v.eot };
                if (!(*ret_control = control_rows(v.ttype, v.n, ids, 2)))
                        k = -ENOMEM;
        }
        if (k >= 0) {
                gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
                gguf_writer_set_str(w, "tokenizer.ggml.pre", arch == AXP_ARCH_LLAMA ? "llama-bpe" : "qwen2");
                gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *) v.text, v.n);
                gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, v.ttype, v.n);
                gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *) v.merges,
                                        v.n_merges);
                gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t) v.bos);
                gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t) v.eos);
                gguf_writer_set_u32(w, "tokenizer.ggml.eot_token_id", (uint32_t) v.eot);
                if (v.pad >= 0)
                        gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t) v.pad);
                if (v.fim >= 0) {
                        static const char *const keys[] = { "tokenizer.ggml.fim_pre_token_id",
                                "tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.fim_suf_token_id",
                                "tokenizer.ggml.fim_pad_token_id", "tokenizer.ggml.fim_rep_token_id",
                                "tokenizer.ggml.fim_sep_token_id" };
                        for (size_t i = 0; i < ELEMENTSOF(keys); i++)
                                gguf_writer_set_u32(w, keys[i], (uint32_t) (v.fim + (int32_t) i));
                }
                gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", arch == AXP_ARCH_LLAMA);
                gguf_writer_set_str(w, "tokenizer.chat_template",
                                    chat_template ? chat_template
                                    : arch == AXP_ARCH_LLAMA ? llama3_template : chatml_template);
                *ret_n_vocab = (int) v.n;
        }
        vocab_free(&v);
        return k;
}

static int copy_vocab(gguf_writer *w, const char *path, const char *chat_template, int *ret_n_vocab,
                      bool **ret_control, axp_error *err) {
        gguf_file *f;
        const gguf_kv *tokens;
        int k = gguf_open(path, &f, err);
        if (k < 0)
                return k;
        tokens = gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING);
        if (!tokens || tokens->arr_n == 0 || tokens->arr_n > INT32_MAX) {
                gguf_close(f);
                return axp_errorf(err, -EINVAL, "%s: no usable tokenizer.ggml.tokens array to copy",
                                  path);
        }
        for (uint64_t i = 0; i < f->n_kv; i++) {
                const gguf_kv *kv = &f->kv[i];
                bool tmpl = kv->key.len == strlen("tokenizer.chat_template") &&
                            memcmp(kv->key.ptr, "tokenizer.chat_template", kv->key.len) == 0;
                if (kv->key.len > 10 && memcmp(kv->key.ptr, "tokenizer.", 10) == 0 && !(tmpl && chat_template))
                        gguf_writer_copy_kv(w, kv);
        }
        if (chat_template)
                gguf_writer_set_str(w, "tokenizer.chat_template", chat_template);
        *ret_n_vocab = (int) tokens->arr_n;
        if (ret_control) {
                const gguf_kv *tt = gguf_get_arr(f, "tokenizer.ggml.token_type", GGUF_TYPE_INT32);
                int32_t *ttype = tt && tt->arr_n == tokens->arr_n ? malloc(tt->arr_n * sizeof(int32_t)) : NULL;
                int32_t ids[3] = { -1, -1, -1 };
                uint32_t id;
                const char *keys[3] = { "tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                                        "tokenizer.ggml.eom_token_id" };
                for (int i = 0; i < 3; i++)
                        if (gguf_get_u32(f, keys[i], &id))
                                ids[i] = (int32_t) id;
                for (uint64_t i = 0; ttype && i < tt->arr_n; i++)
                        ttype[i] = gguf_arr_i32(tt, i);
                *ret_control = control_rows(ttype, tokens->arr_n, ids, 3);
                free(ttype);
                if (!*ret_control) {
                        gguf_close(f);
                        return axp_errorf(err, -ENOMEM, "out of memory");
                }
        }
        gguf_close(f);
        return 0;
}

/* The model --------------------------------------------------------------------------------- */

typedef struct plan {
        spec *t;
        size_t n;
} plan;

static void add_spec(plan *pl, const axp_mkmodel_params *p, const char *name, uint32_t type,
                     int64_t ne0, int64_t ne1, enum weight_kind kind, const char *hint) {
        spec *t = &pl->t[pl->n++];
        *t = (spec) { .type = type, .n_dims = ne1 > 1 || kind == W_EMBD || kind == W_PROJ ? 2 : 1,
                      .ne = { ne0, ne1, 1 }, .kind = kind, .hint = hint };
        snprintf(t->name, sizeof(t->name), "%s", name);
        t->stream = hash_name(p->seed, name);
}

static void layer_name(char *buf, size_t n, int l, const char *what) {
        snprintf(buf, n, "blk.%d.%s", l, what);
}

static int check_params(const axp_mkmodel_params *p, int *ret_head_dim, axp_error *err) {
        const axp_type_traits *tr = axp_type_traits_get(p->type);
        int head_dim;

        if ((unsigned) p->arch >= AXP_ARCH__COUNT)
                return axp_errorf(err, -EINVAL, "unknown architecture %d", (int) p->arch);
        if (!tr || axp_file_type_of(p->type) < 0)
                return axp_errorf(err, -EINVAL,
                                  "weight type %s is not one mkmodel writes (f32, f16, bf16, q8_0, "
                                  "q4_0, q4_1, q5_0, q5_1, iq4_nl, q4_k, q5_k, q6_k)", tr ? tr->name : "?");
        if (!p->path || !*p->path)
                return axp_errorf(err, -EINVAL, "no output file given");
#define RANGE(v, lo, hi, opt)                                                                      \
        if ((v) < (lo) || (v) > (hi))                                                              \
                return axp_errorf(err, -EINVAL, "%s %d is out of range (%d to %d)", opt, (v), (lo), (hi))
        RANGE(p->n_embd, 1, 1 << 16, "--dim");
        RANGE(p->n_layer, 1, 1024, "--layers");
        RANGE(p->n_head, 1, 1024, "--heads");
        RANGE(p->n_head_kv, 1, 1024, "--kv-heads");
        RANGE(p->n_ff, 1, 1 << 18, "--ffn");
        RANGE(p->n_ctx, 1, 1 << 24, "--ctx");
        RANGE(p->head_dim, 0, 1 << 12, "--head-dim");
        RANGE(p->n_expert, 0, AXP_MAX_EXPERTS, "--experts");
        RANGE(p->n_expert_used, 0, p->n_expert > 0 ? p->n_expert : 8, "--experts-used");
#undef RANGE
        if (p->n_head % p->n_head_kv != 0)
                return axp_errorf(err, -EINVAL, "--heads %d is not a multiple of --kv-heads %d",
                                  p->n_head, p->n_head_kv);
        head_dim = p->head_dim;
        if (head_dim == 0) {
                if (p->n_embd % p->n_head != 0)
                        return axp_errorf(err, -EINVAL,
                                          "--dim %d is not a multiple of --heads %d (or give --head-dim)",
                                          p->n_embd, p->n_head);
                head_dim = p->n_embd / p->n_head;
        }
        if (head_dim % 2 != 0)
                return axp_errorf(err, -EINVAL, "the head dimension %d must be even (RoPE rotates pairs)",
                                  head_dim);
        if ((int64_t) head_dim * p->n_head > 1 << 18)
                return axp_errorf(err, -EINVAL, "--heads × head dimension is too large");
        if (p->rope_base < 0 || !isfinite(p->rope_base))
                return axp_errorf(err, -EINVAL, "the rope base must be positive");
        if (p->rope_dim < 0 || p->rope_dim > head_dim || p->rope_dim % 2 != 0)
                return axp_errorf(err, -EINVAL, "--rope-dim %d must be even and at most the head dimension %d",
                                  p->rope_dim, head_dim);
        if (p->n_ctx_orig < 0 || p->n_ctx_orig > p->n_ctx)
                return axp_errorf(err, -EINVAL, "--longrope %d must be at most --ctx %d", p->n_ctx_orig, p->n_ctx);
        *ret_head_dim = head_dim;
        return 0;
}

static int n_cpus(void) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        return n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : (int) n;
}

int axp_mkmodel(const axp_mkmodel_params *p, axp_error *err) {
        const char *arch;
        const axp_type_traits *tr;
        gguf_writer *w = NULL;
        plan pl = { 0 };
        ziggurat zig;
        char key[128], name[64], default_name[64];
        int head_dim = 0, n_vocab = 0, k, nth;
        int64_t q_dim, kv_dim;
        bool qwen, *control = NULL;

        k = check_params(p, &head_dim, err);
        if (k < 0)
                return k;
        arch = axp_arch_name(p->arch);
        tr = axp_type_traits_get(p->type);
        /* qwen2, qwen3, gemma2/3: eps 1e-6; base 1e6 but gemma2 (granite as llama) */
        qwen = p->arch != AXP_ARCH_LLAMA && p->arch != AXP_ARCH_GRANITE && p->arch != AXP_ARCH_SMOLLM3 &&
               p->arch != AXP_ARCH_OLMO2 && p->arch != AXP_ARCH_EXAONE && p->arch != AXP_ARCH_MISTRAL3;
        q_dim = (int64_t) p->n_head * head_dim;
        kv_dim = (int64_t) p->n_head_kv * head_dim;
        nth = p->n_threads > 0 ? MIN(p->n_threads, MAX_THREADS) : n_cpus();

        ziggurat_init(&zig);
        w = gguf_writer_new();
        if (!w)
                return axp_errorf(err, -ENOMEM, "out of memory");

        /* general and architecture keys first, as converters write them */
        snprintf(default_name, sizeof(default_name), "synthetic-%s-%s", arch, tr->name);
        for (char *c = default_name; *c; c++)
                *c = (char) tolower((unsigned char) *c);
        gguf_writer_set_str(w, "general.architecture", arch);
        gguf_writer_set_str(w, "general.name", p->name ? p->name : default_name);
        gguf_writer_set_u32(w, "general.file_type", (uint32_t) axp_file_type_of(p->type));
        if (p->type != AXP_TYPE_F32 && p->type != AXP_TYPE_F16 && p->type != AXP_TYPE_BF16)
                gguf_writer_set_u32(w, "general.quantization_version", 2);
#define ARCH_U32(suffix, v)                                                                        \
        (snprintf(key, sizeof(key), "%s." suffix, arch), gguf_writer_set_u32(w, key, (uint32_t) (v)))
#define ARCH_F32(suffix, v)                                                                        \
        (snprintf(key, sizeof(key), "%s." suffix, arch), gguf_writer_set_f32(w, key, (v)))
        ARCH_U32("vocab_size", 0); /* set again below, once the vocabulary is known */
        ARCH_U32("context_length", p->n_ctx);
        ARCH_U32("embedding_length", p->n_embd);
        ARCH_U32("block_count", p->n_layer);
        ARCH_U32("feed_forward_length", p->n_ff);
        ARCH_U32("attention.head_count", p->n_head);
        ARCH_U32("attention.head_count_kv", p->n_head_kv);
        /* olmo2: no pre-norms, post-norms, q/k norms over all heads */
        const bool olmo2 = p->arch == AXP_ARCH_OLMO2;
        const bool moe = p->arch == AXP_ARCH_QWEN3MOE, qk_norm = p->arch == AXP_ARCH_QWEN3 ||
                                                                   p->arch == AXP_ARCH_GEMMA3 || moe || olmo2;
        const int n_expert = p->n_expert > 0 ? p->n_expert : 8,
                  n_expert_used = p->n_expert_used > 0 ? p->n_expert_used : MIN(2, n_expert);
        if (moe) {
                ARCH_U32("expert_count", n_expert);
                ARCH_U32("expert_used_count", n_expert_used);
                ARCH_U32("expert_feed_forward_length", p->n_ff);
        }
        const bool gemma = p->arch == AXP_ARCH_GEMMA2 || p->arch == AXP_ARCH_GEMMA3;
        if (gemma || qk_norm || head_dim * p->n_head != p->n_embd) {
                ARCH_U32("attention.key_length", head_dim);
                ARCH_U32("attention.value_length", head_dim);
        }
        const int rope_dim = p->rope_dim > 0 ? p->rope_dim : head_dim;
        ARCH_U32("rope.dimension_count", rope_dim);
        if (p->rope_scaling && p->rope_factor > 1) { /* as llama.cpp's converter writes them */
                snprintf(key, sizeof(key), "%s.rope.scaling.type", arch);
                gguf_writer_set_str(w, key, p->rope_scaling);
                ARCH_F32("rope.scaling.factor", p->rope_factor);
                if (strcmp(p->rope_scaling, "yarn") == 0)
                        ARCH_U32("rope.scaling.original_context_length", (uint32_t) (p->n_ctx / p->rope_factor));
                if (strcmp(p->rope_scaling, "yarn") == 0 && p->arch == AXP_ARCH_MISTRAL3) {
                        /* as Ministral 3's: its betas, mscale_all_dim and Llama 4's beta */
                        ARCH_F32("rope.scaling.yarn_beta_fast", 32.0f);
                        ARCH_F32("rope.scaling.yarn_beta_slow", 1.0f);
                        ARCH_F32("rope.scaling.yarn_log_multiplier", 1.0f);
                        ARCH_F32("attention.temperature_scale", 0.1f);
                }
        }
        if (p->n_ctx_orig > 0) { /* as llama.cpp's converter writes LongRoPE */
                double scale = (double) p->n_ctx / p->n_ctx_orig;
                ARCH_U32("rope.scaling.original_context_length", p->n_ctx_orig);
                ARCH_F32("rope.scaling.attn_factor",
                         scale > 1 ? (float) sqrt(1 + log(scale) / log((double) p->n_ctx_orig)) : 1.0f);
        }
        ARCH_F32("rope.freq_base",
                 p->rope_base > 0                                              ? p->rope_base
                 : p->arch == AXP_ARCH_PHI3 || p->arch == AXP_ARCH_GEMMA2 ? 1e4f
                 : qwen                                                        ? 1e6f
                                                                               : 5e5f);
        ARCH_F32("attention.layer_norm_rms_epsilon", qwen && p->arch != AXP_ARCH_PHI3 ? 1e-6f : 1e-5f);
        if (p->arch == AXP_ARCH_GEMMA3) {
                /* five local layers of every six (llama.cpp's default period), base 10000 */
                ARCH_U32("attention.sliding_window", p->n_swa > 0 ? p->n_swa : 16);
                ARCH_F32("rope.freq_base_swa", 10000.0f);
        } else if (p->arch == AXP_ARCH_GEMMA2) {
                /* every other layer local, as Gemma 2's files carry it (4096 there) */
                ARCH_U32("attention.sliding_window", p->n_swa > 0 ? p->n_swa : 16);
                ARCH_F32("attn_logit_softcapping", p->attn_softcap > 0 ? p->attn_softcap : 50.0f);
                ARCH_F32("final_logit_softcapping", p->final_softcap > 0 ? p->final_softcap : 30.0f);
        } else if (p->arch == AXP_ARCH_GRANITE) {
                /* Granite 3.1 2B's multipliers; its attention scale 1/64 is not 1/sqrt(head_dim) */
                ARCH_F32("embedding_scale", 12.0f);
                ARCH_F32("residual_scale", 0.22f);
                ARCH_F32("attention.scale", 0.015625f);
                ARCH_F32("logit_scale", 8.0f);
        } else if (p->n_swa > 0) /* the key alone (Mistral 7B v0.1's llama files carry it) */
                ARCH_U32("attention.sliding_window", p->n_swa);
        if (p->pooling != AXP_POOLING_MODEL)
                ARCH_U32("pooling_type", (uint32_t) p->pooling);

        if (p->vocab_from)
                k = copy_vocab(w, p->vocab_from, p->chat_template, &n_vocab, p->no_eog ? &control : NULL, err);
        else if ((k = write_builtin_vocab(w, p->arch, p->fim, p->chat_template, &n_vocab,
                                          p->no_eog ? &control : NULL)) < 0)
                axp_errorf(err, k, "cannot build the vocabulary: %s", strerror(-k));
        if (k < 0)
                goto out;
        ARCH_U32("vocab_size", n_vocab); /* replaces the value, keeps the key's place */
#undef ARCH_U32
#undef ARCH_F32

        pl.t = calloc(5 + (size_t) p->n_layer * 16, sizeof(spec));
        if (!pl.t) {
                k = axp_errorf(err, -ENOMEM, "out of memory");
                goto out;
        }
        if (p->n_ctx_orig > 0) {
                add_spec(&pl, p, "rope_factors_long.weight", AXP_TYPE_F32, rope_dim / 2, 1, W_FACTOR_LONG, NULL);
                add_spec(&pl, p, "rope_factors_short.weight", AXP_TYPE_F32, rope_dim / 2, 1, W_FACTOR_SHORT, NULL);
        }
        add_spec(&pl, p, "token_embd.weight", p->type, p->n_embd, n_vocab, W_EMBD, "--dim");
        for (int l = 0; l < p->n_layer; l++) {
#define LAYER(what, type, ne0, ne1, kind, hint)                                                    \
        (layer_name(name, sizeof(name), l, what), add_spec(&pl, p, name, type, ne0, ne1, kind, hint))
                if (!olmo2)
                        LAYER("attn_norm.weight", AXP_TYPE_F32, p->n_embd, 1, W_NORM, NULL);
                if (p->arch == AXP_ARCH_PHI3) { /* Q, K and V in one matrix */
                        LAYER("attn_qkv.weight", p->type, p->n_embd, q_dim + 2 * kv_dim, W_PROJ, "--dim");
                } else {
                        LAYER("attn_q.weight", p->type, p->n_embd, q_dim, W_PROJ, "--dim");
                        LAYER("attn_k.weight", p->type, p->n_embd, kv_dim, W_PROJ, "--dim");
                        LAYER("attn_v.weight", p->type, p->n_embd, kv_dim, W_PROJ, "--dim");
                }
                if (p->arch == AXP_ARCH_QWEN2) {
                        LAYER("attn_q.bias", AXP_TYPE_F32, q_dim, 1, W_BIAS, NULL);
                        LAYER("attn_k.bias", AXP_TYPE_F32, kv_dim, 1, W_BIAS, NULL);
                        LAYER("attn_v.bias", AXP_TYPE_F32, kv_dim, 1, W_BIAS, NULL);
                }
                if (qk_norm) {
                        LAYER("attn_q_norm.weight", AXP_TYPE_F32, olmo2 ? q_dim : head_dim, 1, W_NORM, NULL);
                        LAYER("attn_k_norm.weight", AXP_TYPE_F32, olmo2 ? kv_dim : head_dim, 1, W_NORM, NULL);
                }
                LAYER("attn_output.weight", p->type, q_dim, p->n_embd, W_PROJ,
                      "--heads × head dimension");
                if (gemma || olmo2)
                        LAYER("post_attention_norm.weight", AXP_TYPE_F32, p->n_embd, 1, W_NORM, NULL);
                if (!olmo2)
                        LAYER("ffn_norm.weight", AXP_TYPE_F32, p->n_embd, 1, W_NORM, NULL);
                if (moe) { /* the router, then each expert's matrices stacked */
                        LAYER("ffn_gate_inp.weight", AXP_TYPE_F32, p->n_embd, n_expert, W_PROJ, NULL);
                        LAYER("ffn_gate_exps.weight", p->type, p->n_embd, p->n_ff, W_PROJ, "--dim");
                        pl.t[pl.n - 1].ne[2] = n_expert;
                        LAYER("ffn_up_exps.weight", p->type, p->n_embd, p->n_ff, W_PROJ, "--dim");
                        pl.t[pl.n - 1].ne[2] = n_expert;
                        LAYER("ffn_down_exps.weight", p->type, p->n_ff, p->n_embd, W_PROJ, "--ffn");
                        pl.t[pl.n - 1].ne[2] = n_expert;
                        continue;
                }
                if (p->arch == AXP_ARCH_PHI3) { /* the gate's rows, then the up rows */
                        LAYER("ffn_up.weight", p->type, p->n_embd, 2 * p->n_ff, W_PROJ, "--dim");
                } else {
                        LAYER("ffn_gate.weight", p->type, p->n_embd, p->n_ff, W_PROJ, "--dim");
                        LAYER("ffn_up.weight", p->type, p->n_embd, p->n_ff, W_PROJ, "--dim");
                }
                LAYER("ffn_down.weight", p->type, p->n_ff, p->n_embd, W_PROJ, "--ffn");
                if (gemma || olmo2)
                        LAYER("post_ffw_norm.weight", AXP_TYPE_F32, p->n_embd, 1, W_NORM, NULL);
#undef LAYER
        }
        add_spec(&pl, p, "output_norm.weight", AXP_TYPE_F32, p->n_embd, 1, W_NORM, NULL);
        if (!p->tied)
                add_spec(&pl, p, "output.weight", p->type, p->n_embd, n_vocab, W_PROJ, "--dim");
        pl.t[p->tied ? 0 : pl.n - 1].zero_rows = control; /* the LM head */

        for (size_t i = 0; i < pl.n; i++) {
                spec *t = &pl.t[i];
                const axp_type_traits *tt = axp_type_traits_get(t->type);
                t->n_threads = nth;
                t->zig = &zig;
                if (t->ne[0] % tt->blck != 0) {
                        k = axp_errorf(err, -EINVAL,
                                       "tensor '%s' has rows of %" PRId64 " elements, not a multiple "
                                       "of %s's block of %" PRIu32 " (choose %s as a multiple of %" PRIu32 ")",
                                       t->name, t->ne[0], tt->name, tt->blck, t->hint ? t->hint : "the size",
                                       tt->blck);
                        goto out;
                }
                gguf_writer_add_tensor_fill(w, t->name, t->type, t->ne[2] > 1 ? 3 : t->n_dims, t->ne,
                                            fill_tensor, t);
        }
        k = gguf_writer_write(w, p->path, err);
out:
        gguf_writer_free(w);
        free(pl.t);
        free(control);
        return k;
}
