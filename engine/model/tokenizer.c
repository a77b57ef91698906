/* SPDX-License-Identifier: MIT */
/* Tokenizer from GGUF metadata, token for token what llama.cpp produces.
 *
 * Byte-level BPE: text -> special-token partition -> UTF-8 codepoints -> pre-tokenizer passes
 * -> words -> bytes mapped to the GPT-2 printable alphabet -> BPE merges by rank (a heap over
 * a linked list of symbols) -> token ids. SentencePiece ("llama"): text -> partition -> spaces
 * as U+2581 -> merges of adjacent symbols by the score of the merged token -> byte fallback.
 *
 * Strings are interned in one hash table; ids below n_vocab are tokens, ids above are strings
 * that only occur in merges. Merge ranks live in a second table keyed by the pair of ids, so
 * the merge loop never builds or hashes a string. */
#include "tokenizer.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/strbuf.h"
#include "base/utf8.h"
#include "unicode.h"

/* Token attributes as llama.cpp keeps them: a bit set, since text detection adds CONTROL to
 * whatever type the file gave. */
enum {
        ATTR_UNKNOWN = 1 << 0,
        ATTR_UNUSED = 1 << 1,
        ATTR_NORMAL = 1 << 2,
        ATTR_CONTROL = 1 << 3,
        ATTR_USER_DEFINED = 1 << 4,
        ATTR_BYTE = 1 << 5,
        ATTR_LSTRIP = 1 << 7,
        ATTR_RSTRIP = 1 << 8,
        ATTR_EOG = 1 << 15, /* ours: ends generation */
};

/* tokenizer.ggml.token_type values */
enum {
        TYPE_UNDEFINED = 0,
        TYPE_NORMAL = 1,
        TYPE_UNKNOWN = 2,
        TYPE_CONTROL = 3,
        TYPE_USER_DEFINED = 4,
        TYPE_UNUSED = 5,
        TYPE_BYTE = 6,
};

enum { VOCAB_SPM, VOCAB_BPE };

#define MAX_VOCAB (1 << 26)

/* Hash tables ------------------------------------------------------------------------- */

static inline uint64_t mix64(uint64_t h) {
        h ^= h >> 31;
        h *= 0xbf58476d1ce4e5b9ull;
        h ^= h >> 29;
        h *= 0x94d049bb133111ebull;
        h ^= h >> 32;
        return h;
}

static uint64_t hash_bytes(const void *p, size_t n) {
        const uint8_t *s = p;
        uint64_t h = 0x9e3779b97f4a7c15ull ^ (n * 0xff51afd7ed558ccdull);

        while (n >= 8) {
                uint64_t k;
                memcpy(&k, s, 8);
                h = (h ^ k) * 0xbf58476d1ce4e5b9ull;
                h ^= h >> 31;
                s += 8;
                n -= 8;
        }
        uint64_t k = 0;
        memcpy(&k, s, n);
        return mix64(h ^ k);
}

/* Interned strings: entry i is pool[ent[i].off, ent[i].off + ent[i].len). A slot keeps the
 * hash beside the id, so a probe touches the entry only when the hash matches. */
typedef struct str_ent {
        uint32_t off, len;
} str_ent;

typedef struct str_slot {
        uint32_t hash;
        int32_t id; /* -1: empty */
} str_slot;

typedef struct strtab {
        char *pool;
        size_t pool_len, pool_cap;
        str_ent *ent;
        uint32_t n, cap;
        str_slot *slot;
        uint32_t mask;
} strtab;

static void strtab_done(strtab *t) {
        free(t->pool);
        free(t->ent);
        free(t->slot);
        *t = (strtab) {};
}

static int strtab_rehash(strtab *t, uint32_t n_slots) {
        str_slot *slot = malloc(n_slots * sizeof(*slot));
        if (!slot)
                return -ENOMEM;
        for (uint32_t i = 0; i < n_slots; i++)
                slot[i] = (str_slot) { 0, -1 };
        for (uint32_t s = 0; s <= t->mask && t->slot; s++) {
                if (t->slot[s].id < 0)
                        continue;
                uint32_t i = t->slot[s].hash & (n_slots - 1);
                while (slot[i].id >= 0)
                        i = (i + 1) & (n_slots - 1);
                slot[i] = t->slot[s];
        }
        free(t->slot);
        t->slot = slot;
        t->mask = n_slots - 1;
        return 0;
}

static int strtab_init(strtab *t, uint32_t expect) {
        uint32_t n_slots = 64;
        while (n_slots < expect * 2u)
                n_slots *= 2;
        return strtab_rehash(t, n_slots);
}

static int32_t strtab_find_h(const strtab *t, const void *s, size_t n, uint32_t h) {
        for (uint32_t i = h & t->mask;; i = (i + 1) & t->mask) {
                str_slot sl = t->slot[i];
                if (sl.id < 0)
                        return -1;
                if (sl.hash == h && t->ent[sl.id].len == n &&
                    memcmp(t->pool + t->ent[sl.id].off, s, n) == 0)
                        return sl.id;
        }
}

static int32_t strtab_find(const strtab *t, const void *s, size_t n) {
        return strtab_find_h(t, s, n, (uint32_t) hash_bytes(s, n));
}

/* Add a string known to be absent; returns its id. */
static int strtab_add_h(strtab *t, const void *s, size_t n, uint32_t h, int32_t *ret_id) {
        if (n > UINT32_MAX || t->pool_len + n > UINT32_MAX || t->n >= INT32_MAX / 2)
                return -E2BIG;
        if (t->n == t->cap) {
                uint32_t cap = t->cap ? t->cap * 2 : 1024;
                str_ent *ent = realloc(t->ent, cap * sizeof(*ent));
                if (!ent)
                        return -ENOMEM;
                t->ent = ent;
                t->cap = cap;
        }
        if (t->pool_len + n > t->pool_cap) {
                size_t cap = t->pool_cap ? t->pool_cap * 2 : 65536;
                while (cap < t->pool_len + n)
                        cap *= 2;
                char *pool = realloc(t->pool, cap);
                if (!pool)
                        return -ENOMEM;
                t->pool = pool;
                t->pool_cap = cap;
        }
        if ((t->n + 1) * 2 > t->mask + 1) {
                int r = strtab_rehash(t, (t->mask + 1) * 2);
                if (r < 0)
                        return r;
        }
        memcpy(t->pool + t->pool_len, s, n);
        t->ent[t->n] = (str_ent) { t->pool_len, n };
        t->pool_len += n;
        uint32_t i = h & t->mask;
        while (t->slot[i].id >= 0)
                i = (i + 1) & t->mask;
        t->slot[i] = (str_slot) { h, (int32_t) t->n };
        *ret_id = t->n++;
        return 0;
}

static int strtab_intern(strtab *t, const void *s, size_t n, int32_t *ret_id) {
        uint32_t h = hash_bytes(s, n);
        int32_t id = strtab_find_h(t, s, n, h);
        if (id >= 0) {
                *ret_id = id;
                return 0;
        }
        return strtab_add_h(t, s, n, h, ret_id);
}

/* BPE merges: (left id, right id) -> rank and the id of the merged string. */
typedef struct merge_slot {
        uint64_t key; /* left << 32 | right; UINT64_MAX when empty */
        int32_t rank;
        int32_t result;
} merge_slot;

typedef struct merge_map {
        merge_slot *slot;
        uint32_t mask;
} merge_map;

static inline uint64_t merge_key(int32_t l, int32_t r) {
        return (uint64_t) (uint32_t) l << 32 | (uint32_t) r;
}

static const merge_slot *merge_find(const merge_map *m, int32_t l, int32_t r) {
        if (!m->slot)
                return NULL;
        uint64_t key = merge_key(l, r);
        for (uint32_t i = mix64(key) & m->mask;; i = (i + 1) & m->mask) {
                if (m->slot[i].key == key)
                        return &m->slot[i];
                if (m->slot[i].key == UINT64_MAX)
                        return NULL;
        }
}

/* Keeps the first (lowest) rank of a duplicated pair, as llama.cpp does. */
static void merge_insert(merge_map *m, int32_t l, int32_t r, int32_t rank, int32_t result) {
        uint64_t key = merge_key(l, r);
        uint32_t i = mix64(key) & m->mask;
        while (m->slot[i].key != UINT64_MAX) {
                if (m->slot[i].key == key)
                        return;
                i = (i + 1) & m->mask;
        }
        m->slot[i] = (merge_slot) { key, rank, result };
}

/* The tokenizer ---------------------------------------------------------------------- */

struct axp_tokenizer {
        int type;
        const axp_split *passes; /* BPE pre-tokenizer */
        size_t n_passes;
        bool ignore_merges;    /* BPE: a word that is a token is emitted as is */
        bool add_space_prefix; /* SPM: a space before text at the start or after a special */
        bool add_bos, add_eos;

        int32_t n_vocab;
        strtab str; /* ids < n_vocab: tokens; above: strings that only occur in merges */
        uint16_t *attr;
        float *score;

        /* what each token renders as, with special tokens shown */
        char *piece;
        uint32_t *piece_off, *piece_len;

        int32_t *special; /* CONTROL, USER_DEFINED and UNKNOWN tokens, longest text first */
        size_t n_special;

        merge_map merges;
        uint8_t byte_utf8[256][2]; /* BPE: the GPT-2 printable stand-in of each byte */
        uint8_t byte_utf8_len[256];
        int32_t byte_sym[256]; /* BPE: string id of the stand-in, -1 if none */
        int32_t byte_tok[256]; /* BPE: token of the one-byte string; SPM: the <0xNN> token */
        int16_t cpt_byte[0x144]; /* BPE: the byte a stand-in codepoint means, or -1 */

        int32_t bos, eos, eot, eom, unk;
        axp_fim_tokens fim; /* -1 where the vocabulary has none */
};

static inline const char *tok_text(const axp_tokenizer *t, int32_t id) {
        return t->str.pool + t->str.ent[id].off;
}

static int32_t find_token(const axp_tokenizer *t, const void *s, size_t n) {
        int32_t id = strtab_find(&t->str, s, n);
        return id < t->n_vocab ? id : -1;
}

void axp_tokenizer_free(axp_tokenizer *t) {
        if (!t)
                return;
        strtab_done(&t->str);
        free(t->attr);
        free(t->score);
        free(t->piece);
        free(t->piece_off);
        free(t->piece_len);
        free(t->special);
        free(t->merges.slot);
        free(t);
}

/* Pre-tokenizers by tokenizer.ggml.pre, with llama.cpp's regexes for each. */
static const axp_split passes_llama3[] = { AXP_SPLIT_LLAMA3 };
static const axp_split passes_qwen2[] = { AXP_SPLIT_QWEN2 };
static const axp_split passes_tekken[] = { AXP_SPLIT_TEKKEN };
static const axp_split passes_gpt2[] = { AXP_SPLIT_GPT2 };
static const axp_split passes_starcoder[] = { AXP_SPLIT_NUMBER_EACH, AXP_SPLIT_GPT2 };
static const axp_split passes_default[] = { AXP_SPLIT_PUNCT_RUNS, AXP_SPLIT_GPT2,
                                            AXP_SPLIT_NUMBER_RUNS, AXP_SPLIT_DIGITS3 };

static const struct pre_def {
        const char *names;
        const axp_split *passes;
        size_t n_passes;
        bool ignore_merges, add_bos;
} pre_defs[] = {
        { "llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2 jina-v5-nano",
          passes_llama3, 1, true, true },
        { "dbrx smaug-bpe", passes_llama3, 1, false, false },
        { "tekken", passes_tekken, 1, true, true },
        { "qwen2 deepseek-r1-qwen kormo f2llmv2 megrez stablelm2 hunyuan solar-open grok-2",
          passes_qwen2, 1, false, false },
        { "gpt-2 phi-2 jina-es jina-de gigachat jina-v2-es jina-v2-de a.x-4.0 mellum modern-bert "
          "mpt olmo jais trillion granite-docling exaone4 jina-v1-en jina-v2-code roberta-bpe",
          passes_gpt2, 1, false, false },
        { "starcoder refact command-r smollm codeshell exaone minerva-7b mellum2", passes_starcoder,
          2, false, false },
        { "default", passes_default, 4, false, false },
};

static bool name_in(const char *names, const char *name, size_t n) {
        for (const char *p = names; *p;) {
                size_t l = strcspn(p, " ");
                if (l == n && memcmp(p, name, n) == 0)
                        return true;
                p += l + (p[l] == ' ');
        }
        return false;
}

static const struct pre_def *pre_lookup(gguf_str pre) {
        if (pre.len == 0)
                return &pre_defs[ELEMENTSOF(pre_defs) - 1];
        for (size_t i = 0; i < ELEMENTSOF(pre_defs); i++)
                if (name_in(pre_defs[i].names, pre.ptr, pre.len))
                        return &pre_defs[i];
        return NULL;
}

/* GPT-2's bytes_to_unicode: printable bytes stand for themselves, the others for U+0100.. */
static void init_byte_map(axp_tokenizer *t) {
        int n = 0;
        memset(t->cpt_byte, 0xff, sizeof(t->cpt_byte));
        for (int b = 0; b < 256; b++) {
                bool self = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
                uint32_t cpt = self ? (uint32_t) b : 256u + n++;
                uint8_t u[4];
                t->byte_utf8_len[b] = axp_utf8_encode(cpt, u);
                memcpy(t->byte_utf8[b], u, 2);
                t->cpt_byte[cpt] = b;
        }
}

/* What a normal BPE token stands for. A stand-in outside the byte map is shown the way
 * llama.cpp shows it, with the whole token text inside; for long texts that would grow with
 * the square of the length, so there the text is left out. */
static int bpe_decode_text(const axp_tokenizer *t, const char *text, size_t n, char **buf,
                           size_t *len, size_t *cap) {
        const uint8_t *s = (const uint8_t *) text;
        for (size_t i = 0; i < n;) {
                size_t k;
                uint32_t cpt = axp_utf8_decode(s + i, n - i, &k);
                i += k;
                int b = cpt < ELEMENTSOF(t->cpt_byte) ? t->cpt_byte[cpt] : -1;
                if (b >= 0) {
                        char c = b;
                        if (axp_strbuf_append(buf, len, cap, &c, 1) < 0)
                                return -ENOMEM;
                        continue;
                }
                uint8_t u[4];
                size_t ul = axp_utf8_encode(cpt, u);
                char hex[16];
                if (axp_strbuf_puts(buf, len, cap, "[UNK_BYTE_0x") < 0)
                        return -ENOMEM;
                for (size_t j = 0; j < ul; j++) {
                        snprintf(hex, sizeof(hex), "%02x", u[j]);
                        if (axp_strbuf_puts(buf, len, cap, hex) < 0)
                                return -ENOMEM;
                }
                if (axp_strbuf_append(buf, len, cap, text, n <= 256 ? n : 0) < 0 ||
                    axp_strbuf_puts(buf, len, cap, "]") < 0)
                        return -ENOMEM;
        }
        return 0;
}

/* <0xNN> byte tokens: the value of the two hex digits (llama.cpp reads them with strtol). */
static uint8_t byte_token_value(const char *text, size_t n) {
        unsigned v = 0;
        for (size_t i = 3; i < n && i < 5; i++) {
                char c = text[i];
                int d = c >= '0' && c <= '9' ? c - '0' :
                        c >= 'a' && c <= 'f' ? c - 'a' + 10 :
                        c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
                if (d < 0)
                        break;
                v = v * 16 + d;
        }
        return v;
}

/* The piece of one token with special tokens rendered (llama.cpp's token-to-piece cache). */
static int render_piece(const axp_tokenizer *t, int32_t id, char **buf, size_t *len, size_t *cap) {
        const char *text = tok_text(t, id);
        size_t n = t->str.ent[id].len;
        unsigned attr = t->attr[id];

        if (attr & (ATTR_UNKNOWN | ATTR_CONTROL | ATTR_USER_DEFINED))
                return axp_strbuf_append(buf, len, cap, text, n);
        if (attr & ATTR_NORMAL) {
                if (t->type == VOCAB_BPE)
                        return bpe_decode_text(t, text, n, buf, len, cap);
                for (size_t i = 0; i < n;) {
                        if (n - i >= 3 && memcmp(text + i, "\xe2\x96\x81", 3) == 0) {
                                if (axp_strbuf_append(buf, len, cap, " ", 1) < 0)
                                        return -ENOMEM;
                                i += 3;
                        } else {
                                if (axp_strbuf_append(buf, len, cap, text + i, 1) < 0)
                                        return -ENOMEM;
                                i++;
                        }
                }
                return 0;
        }
        if (attr & ATTR_BYTE) {
                char c = byte_token_value(text, n);
                return axp_strbuf_append(buf, len, cap, &c, 1);
        }
        return 0;
}

static int build_pieces(axp_tokenizer *t) {
        size_t len = 0, cap = 0;
        char *buf = NULL;

        t->piece_off = malloc(t->n_vocab * sizeof(uint32_t));
        t->piece_len = malloc(t->n_vocab * sizeof(uint32_t));
        if (!t->piece_off || !t->piece_len)
                return -ENOMEM;
        for (int32_t id = 0; id < t->n_vocab; id++) {
                size_t start = len;
                int r = render_piece(t, id, &buf, &len, &cap);
                if (r < 0 || len > UINT32_MAX) {
                        free(buf);
                        return r < 0 ? r : -E2BIG;
                }
                t->piece_off[id] = start;
                t->piece_len[id] = len - start;
        }
        t->piece = buf;
        return 0;
}

static int cmp_special(const void *a, const void *b, void *userdata) {
        const axp_tokenizer *t = userdata;
        int32_t x = *(const int32_t *) a, y = *(const int32_t *) b;
        if (t->str.ent[x].len != t->str.ent[y].len)
                return t->str.ent[x].len > t->str.ent[y].len ? -1 : 1;
        return (x > y) - (x < y);
}

static int build_special(axp_tokenizer *t) {
        t->special = malloc(t->n_vocab * sizeof(int32_t));
        if (!t->special)
                return -ENOMEM;
        for (int32_t id = 0; id < t->n_vocab; id++)
                if (t->attr[id] & (ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN))
                        t->special[t->n_special++] = id;
        qsort_r(t->special, t->n_special, sizeof(int32_t), cmp_special, t);
        return 0;
}

/* Read an id key; ids outside the vocabulary are ignored, as llama.cpp does. */
static void read_id(const gguf_file *f, const char *key, int32_t n_vocab, int32_t *id) {
        uint32_t v;
        if (gguf_get_u32(f, key, &v) && v < (uint32_t) n_vocab)
                *id = v;
}

static int32_t find_cstr(const axp_tokenizer *t, const char *s) {
        return find_token(t, s, strlen(s));
}

static void mark_control(axp_tokenizer *t, int32_t id) {
        t->attr[id] |= ATTR_CONTROL;
}

/* The first of `texts` present in the vocabulary, marked CONTROL. */
static int32_t detect(axp_tokenizer *t, const char *const *texts) {
        for (; *texts; texts++) {
                int32_t id = find_cstr(t, *texts);
                if (id >= 0) {
                        mark_control(t, id);
                        return id;
                }
        }
        return -1;
}

/* EOT/EOM/FIM/EOG by token text, as llama.cpp does for vocabularies that do not say. */
static void detect_special(axp_tokenizer *t, const gguf_file *f) {
        static const char *const eot[] = { "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
                "<|endoftext|>", "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]",
                "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
                "<end_of_utterance>", NULL };
        static const char *const eom[] = { "<|eom_id|>", NULL };
        static const char *const fim_pre[] = { "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
                "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>", "<PRE>", "\xe2\x96\x81<PRE>",
                "<|code_prefix|>", "<|prefix|>", NULL };
        static const char *const fim_suf[] = { "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
                "<\xef\xbd\x9c" "fim\xe2\x96\x81hole\xef\xbd\x9c>", "<SUF>", "\xe2\x96\x81<SUF>",
                "<|code_suffix|>", "<|suffix|>", NULL };
        static const char *const fim_mid[] = { "<|fim_middle|>", "<fim-middle>", "<fim_middle>",
                "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>", "<MID>", "\xe2\x96\x81<MID>",
                "<|code_middle|>", "<|middle|>", NULL };
        static const char *const fim_pad[] = { "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>",
                "[PAD]", NULL };
        static const char *const fim_rep[] = { "<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
                "<REPO>", "<reponame>", NULL };
        static const char *const fim_sep[] = { "<|file_sep|>", NULL };
        static const char *const eog[] = { "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>",
                "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>",
                "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
                "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
                "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", "[e~[", NULL };
        static const char *const always_rendered[] = { "<|channel|>", "<|message|>", "<|start|>",
                "<|constrain|>", NULL };

        int32_t pre = -1, suf = -1, mid = -1, pad = -1, rep = -1, sep = -1;
        read_id(f, "tokenizer.ggml.fim_pre_token_id", t->n_vocab, &pre);
        read_id(f, "tokenizer.ggml.fim_suf_token_id", t->n_vocab, &suf);
        read_id(f, "tokenizer.ggml.fim_mid_token_id", t->n_vocab, &mid);
        read_id(f, "tokenizer.ggml.fim_pad_token_id", t->n_vocab, &pad);
        read_id(f, "tokenizer.ggml.fim_rep_token_id", t->n_vocab, &rep);
        read_id(f, "tokenizer.ggml.fim_sep_token_id", t->n_vocab, &sep);

        if (t->eot < 0)
                t->eot = detect(t, eot);
        if (t->eom < 0)
                t->eom = detect(t, eom);
        if (pre < 0)
                pre = detect(t, fim_pre);
        if (suf < 0)
                suf = detect(t, fim_suf);
        if (mid < 0)
                mid = detect(t, fim_mid);
        if (pad < 0)
                pad = detect(t, fim_pad);
        if (rep < 0)
                rep = detect(t, fim_rep);
        if (sep < 0)
                sep = detect(t, fim_sep);

        t->fim = (axp_fim_tokens) { .pre = pre, .suf = suf, .mid = mid, .rep = rep, .sep = sep };
        int32_t ids[] = { pad, rep, sep, t->eos, t->eot, t->eom };
        for (size_t i = 0; i < ELEMENTSOF(ids); i++)
                if (ids[i] >= 0)
                        t->attr[ids[i]] |= ATTR_EOG;
        for (const char *const *s = eog; *s; s++) {
                int32_t id = find_cstr(t, *s);
                if (id >= 0)
                        t->attr[id] |= ATTR_EOG | ATTR_CONTROL;
        }
        for (const char *const *s = always_rendered; *s; s++) {
                int32_t id = find_cstr(t, *s);
                if (id >= 0)
                        t->attr[id] = ATTR_USER_DEFINED | (t->attr[id] & ATTR_EOG);
        }

        /* Harmony-style vocabularies end a message with <|end|> but keep generating. */
        int32_t end = find_cstr(t, "<|end|>");
        bool eog_has[4] = {};
        const char *const harmony[4] = { "<|return|>", "<|call|>", "<|calls|>", "<|flush|>" };
        for (size_t i = 0; i < 4; i++) {
                int32_t id = find_cstr(t, harmony[i]);
                eog_has[i] = id >= 0 && (t->attr[id] & ATTR_EOG);
        }
        bool has_call = eog_has[1] || eog_has[2];
        if (end >= 0 && (t->attr[end] & ATTR_EOG) && has_call && (eog_has[0] || eog_has[3]))
                t->attr[end] = ATTR_USER_DEFINED;

        /* Vocabularies with <|tool_response> use </s> as text. */
        int32_t s_end = find_cstr(t, "</s>"), tool = find_cstr(t, "<|tool_response>");
        if (s_end >= 0 && tool >= 0 && (t->attr[s_end] & ATTR_EOG) && (t->attr[tool] & ATTR_EOG))
                t->attr[s_end] = ATTR_NORMAL;
}

/* Phi-3's special tokens swallow the white space after them (llama.cpp sets this by model
 * name, since GGUF has no per-token strip flags). */
static void apply_name_attrs(axp_tokenizer *t, const gguf_file *f) {
        gguf_str name;
        char lower[256];

        if (!gguf_get_str(f, "general.name", &name))
                return;
        size_t n = MIN(name.len, sizeof(lower) - 1);
        for (size_t i = 0; i < n; i++) {
                char c = name.ptr[i];
                lower[i] = c >= 'A' && c <= 'Z' ? c + 32 : c;
        }
        lower[n] = 0;
        if (!strstr(lower, "phi-3") && !strstr(lower, "phi3"))
                return;
        for (size_t i = 0; i < t->n_special; i++)
                t->attr[t->special[i]] |= ATTR_RSTRIP;
        int32_t id = find_cstr(t, "</s>");
        if (id >= 0)
                t->attr[id] |= ATTR_RSTRIP;
        const char *const keep[] = { "<unk>", "<s>", "<|endoftext|>" };
        for (size_t i = 0; i < ELEMENTSOF(keep); i++) {
                id = find_cstr(t, keep[i]);
                if (id >= 0)
                        t->attr[id] &= ~ATTR_RSTRIP;
        }
}

static int load_merges(axp_tokenizer *t, const gguf_file *f, axp_error *err) {
        const gguf_kv *kv = gguf_get_arr(f, "tokenizer.ggml.merges", GGUF_TYPE_STRING);
        if (!kv)
                return axp_errorf(err, -EINVAL, "tokenizer.ggml.merges %s; a byte-level BPE "
                                  "vocabulary needs its merges (the file is incomplete or damaged)",
                                  gguf_find(f, "tokenizer.ggml.merges") ?
                                          "is not an array of strings" : "is missing");
        if (kv->arr_n > INT32_MAX)
                return axp_errorf(err, -E2BIG, "tokenizer.ggml.merges has %llu entries, too many",
                                  (unsigned long long) kv->arr_n);

        uint32_t n_slots = 1024;
        while (n_slots < kv->arr_n + kv->arr_n / 3 + 1)
                n_slots *= 2;
        t->merges.slot = malloc(n_slots * sizeof(merge_slot));
        if (!t->merges.slot)
                return axp_errorf(err, -ENOMEM, "out of memory for %llu merges",
                                  (unsigned long long) kv->arr_n);
        memset(t->merges.slot, 0xff, n_slots * sizeof(merge_slot));
        t->merges.mask = n_slots - 1;

        char *cat = NULL;
        size_t cat_cap = 0;
        int r = 0;
        for (uint64_t i = 0; i < kv->arr_n; i++) {
                gguf_str m = kv->arr_str[i];
                /* "left right", split at the first space after the first byte */
                const char *sp = m.len > 1 ? memchr(m.ptr + 1, ' ', m.len - 1) : NULL;
                if (!sp)
                        continue;
                size_t nl = sp - m.ptr, nr = m.len - nl - 1;
                if (nr == 0)
                        continue;
                if (nl + nr > cat_cap) {
                        cat_cap = (nl + nr) * 2;
                        char *c = realloc(cat, cat_cap);
                        if (!c) {
                                r = -ENOMEM;
                                break;
                        }
                        cat = c;
                }
                memcpy(cat, m.ptr, nl);
                memcpy(cat + nl, sp + 1, nr);
                int32_t l, rt, res;
                if ((r = strtab_intern(&t->str, m.ptr, nl, &l)) < 0 ||
                    (r = strtab_intern(&t->str, sp + 1, nr, &rt)) < 0 ||
                    (r = strtab_intern(&t->str, cat, nl + nr, &res)) < 0)
                        break;
                merge_insert(&t->merges, l, rt, (int32_t) i, res);
        }
        free(cat);
        if (r < 0)
                return axp_errorf(err, r, "cannot index the BPE merges: %s", strerror(-r));
        return 0;
}

static int load_tokens(axp_tokenizer *t, const gguf_file *f, axp_error *err) {
        const gguf_kv *kv = gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_TYPE_STRING);
        if (!kv)
                return axp_errorf(err, -EINVAL, "%s; the file has no usable vocabulary",
                                  gguf_find(f, "tokenizer.ggml.tokens") ?
                                          "tokenizer.ggml.tokens is not an array of strings" :
                                          "tokenizer.ggml.tokens is missing");
        if (kv->arr_n == 0 || kv->arr_n > MAX_VOCAB)
                return axp_errorf(err, -EINVAL, "tokenizer.ggml.tokens has %llu entries; expected "
                                  "1 to %d", (unsigned long long) kv->arr_n, MAX_VOCAB);
        int32_t n = kv->arr_n;

        const gguf_kv *scores = gguf_get_arr(f, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32);
        const gguf_kv *iscores =
                scores ? NULL : gguf_get_arr(f, "tokenizer.ggml.scores", GGUF_TYPE_INT32);
        if (!scores && !iscores && gguf_find(f, "tokenizer.ggml.scores"))
                return axp_errorf(err, -EINVAL,
                                  "tokenizer.ggml.scores must be an array of float32 or int32");
        const gguf_kv *sc = scores ? scores : iscores;
        if (sc && sc->arr_n < (uint64_t) n)
                return axp_errorf(err, -EINVAL, "tokenizer.ggml.scores has %llu entries for %d "
                                  "tokens", (unsigned long long) sc->arr_n, n);
        const gguf_kv *types = gguf_get_arr(f, "tokenizer.ggml.token_type", GGUF_TYPE_INT32);
        if (!types && gguf_find(f, "tokenizer.ggml.token_type"))
                return axp_errorf(err, -EINVAL,
                                  "tokenizer.ggml.token_type must be an array of int32");
        if (types && types->arr_n < (uint64_t) n)
                return axp_errorf(err, -EINVAL, "tokenizer.ggml.token_type has %llu entries for "
                                  "%d tokens", (unsigned long long) types->arr_n, n);

        t->n_vocab = n;
        t->attr = calloc(n, sizeof(*t->attr));
        t->score = calloc(n, sizeof(*t->score));
        if (!t->attr || !t->score)
                return axp_errorf(err, -ENOMEM, "out of memory for %d tokens", n);
        int r = strtab_init(&t->str, n);
        if (r < 0)
                return axp_errorf(err, r, "out of memory for %d tokens", n);

        for (int32_t i = 0; i < n; i++) {
                gguf_str s = kv->arr_str[i];
                char empty[32];
                if (s.len == 0) {
                        /* llama.cpp's stand-in, so the id stays addressable */
                        s.len = snprintf(empty, sizeof(empty), "[EMPTY_%d]", i);
                        s.ptr = empty;
                }
                uint32_t h = hash_bytes(s.ptr, s.len);
                int32_t dup = strtab_find_h(&t->str, s.ptr, s.len, h);
                if (dup >= 0)
                        return axp_errorf(err, -EINVAL, "duplicate token in vocabulary: '%s' "
                                          "has ids %d and %d", GGUF_SHOW(s), dup, i);
                int32_t id;
                r = strtab_add_h(&t->str, s.ptr, s.len, h, &id);
                if (r < 0)
                        return axp_errorf(err, r, "cannot index the vocabulary: %s", strerror(-r));

                if (scores)
                        t->score[i] = gguf_arr_f32(scores, i);
                else if (iscores)
                        t->score[i] = gguf_arr_i32(iscores, i);
                int32_t type = types ? gguf_arr_i32(types, i) : TYPE_NORMAL;
                switch (type) {
                case TYPE_NORMAL:
                        t->attr[i] = ATTR_NORMAL;
                        break;
                case TYPE_UNKNOWN:
                        t->attr[i] = ATTR_UNKNOWN;
                        break;
                case TYPE_CONTROL:
                        t->attr[i] = ATTR_CONTROL;
                        break;
                case TYPE_USER_DEFINED:
                        t->attr[i] = ATTR_USER_DEFINED;
                        break;
                case TYPE_UNUSED:
                        t->attr[i] = ATTR_UNUSED;
                        break;
                case TYPE_BYTE:
                        t->attr[i] = ATTR_BYTE;
                        break;
                default:
                        t->attr[i] = 0;
                        break;
                }
        }
        return 0;
}

static int get_flag(const gguf_file *f, const char *key, bool *v, axp_error *err) {
        if (!gguf_find(f, key))
                return 0;
        if (!gguf_get_bool(f, key, v))
                return axp_errorf(err, -EINVAL, "%s must be a bool", key);
        return 0;
}

int axp_tokenizer_load(const gguf_file *f, axp_tokenizer **ret, axp_error *err) {
        _cleanup_(axp_tokenizer_freep) axp_tokenizer *t = NULL;
        gguf_str model = {}, pre = {};
        int r;

        if (!gguf_get_str(f, "tokenizer.ggml.model", &model))
                return axp_errorf(err, -EINVAL, "the model file has no tokenizer "
                                  "(tokenizer.ggml.model is missing or not a string)");
        gguf_get_str(f, "tokenizer.ggml.pre", &pre);

        t = calloc(1, sizeof(*t));
        if (!t)
                return axp_errorf(err, -ENOMEM, "out of memory");
        t->bos = t->eos = t->eot = t->eom = t->unk = -1;
        init_byte_map(t);

        if (gguf_str_eq(model, "llama")) {
                t->type = VOCAB_SPM;
                t->add_space_prefix = true;
                t->add_bos = true;
                t->bos = 1;
                t->eos = 2;
                t->unk = 0;
        } else if (gguf_str_eq(model, "gpt2")) {
                const struct pre_def *d = pre_lookup(pre);
                /* llama.cpp refuses unknown pre-tokenizers; GPT-2's regex is the closest guess */
                if (!d)
                        d = pre_lookup((gguf_str) { "gpt-2", 5 });
                t->type = VOCAB_BPE;
                t->passes = d->passes;
                t->n_passes = d->n_passes;
                t->ignore_merges = d->ignore_merges;
                t->add_bos = d->add_bos;
                t->bos = 11;
                t->eos = 11;
        } else
                return axp_errorf(err, -EOPNOTSUPP, "unsupported tokenizer '%s' "
                                  "(tokenizer.ggml.model); supported: gpt2 (byte-level BPE), "
                                  "llama (SentencePiece)", GGUF_SHOW(model));

        r = load_tokens(t, f, err);
        if (r < 0)
                return r;
        if (t->type == VOCAB_BPE) {
                r = load_merges(t, f, err);
                if (r < 0)
                        return r;
        }

        r = get_flag(f, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix, err);
        if (r < 0)
                return r;

        /* default ids outside the vocabulary mean "none" */
        int32_t *ids[] = { &t->bos, &t->eos, &t->unk };
        for (size_t i = 0; i < ELEMENTSOF(ids); i++)
                if (*ids[i] >= t->n_vocab)
                        *ids[i] = -1;
        read_id(f, "tokenizer.ggml.bos_token_id", t->n_vocab, &t->bos);
        read_id(f, "tokenizer.ggml.eos_token_id", t->n_vocab, &t->eos);
        read_id(f, "tokenizer.ggml.eot_token_id", t->n_vocab, &t->eot);
        read_id(f, "tokenizer.ggml.eom_token_id", t->n_vocab, &t->eom);
        read_id(f, "tokenizer.ggml.unknown_token_id", t->n_vocab, &t->unk);

        if ((r = get_flag(f, "tokenizer.ggml.add_bos_token", &t->add_bos, err)) < 0 ||
            (r = get_flag(f, "tokenizer.ggml.add_eos_token", &t->add_eos, err)) < 0)
                return r;
        if (t->add_bos && t->bos < 0)
                return axp_errorf(err, -EINVAL, "the vocabulary asks for a BOS token but has none "
                                  "(tokenizer.ggml.bos_token_id)");
        if (t->add_eos && t->eos < 0)
                return axp_errorf(err, -EINVAL, "the vocabulary asks for an EOS token but has none "
                                  "(tokenizer.ggml.eos_token_id)");

        detect_special(t, f);
        if ((r = build_special(t)) < 0 || (r = build_pieces(t)) < 0)
                return axp_errorf(err, r, "cannot prepare the vocabulary: %s", strerror(-r));
        apply_name_attrs(t, f);

        static const char hex[] = "0123456789ABCDEF";
        for (int b = 0; b < 256; b++) {
                char c = b;
                if (t->type == VOCAB_BPE) {
                        t->byte_sym[b] = strtab_find(&t->str, t->byte_utf8[b], t->byte_utf8_len[b]);
                        t->byte_tok[b] = find_token(t, &c, 1);
                } else {
                        char name[6] = { '<', '0', 'x', hex[b >> 4], hex[b & 15], '>' };
                        int32_t id = find_token(t, name, sizeof(name));
                        if (id < 0)
                                id = find_token(t, &c, 1);
                        t->byte_tok[b] = id >= 0 ? id : t->unk;
                }
        }

        *ret = TAKE_PTR(t);
        return 0;
}

int axp_tokenizer_n_vocab(const axp_tokenizer *t) {
        return t->n_vocab;
}

int32_t axp_tokenizer_bos(const axp_tokenizer *t) {
        return t->bos;
}

/* A FIM marker token, then the tokens of text (tokenized without special tokens), at the end
 * of out[0..*n); out has room. */
/* A growing array of token ids */
typedef struct tokvec {
        int32_t *v;
        size_t n, cap;
} tokvec;

static int tokvec_put(tokvec *tv, const int32_t *toks, size_t n) {
        if (n == 0)
                return 0; /* toks may be NULL */
        if (axp_grow((void **) &tv->v, &tv->cap, tv->n + n, sizeof(int32_t)) < 0)
                return -ENOMEM;
        memcpy(tv->v + tv->n, toks, sizeof(int32_t) * n);
        tv->n += n;
        return 0;
}

static int tokvec_put1(tokvec *tv, int32_t id) {
        return tokvec_put(tv, &id, 1);
}

/* src's n ids from `from` after tv's */
static int tokvec_put_from(tokvec *tv, const tokvec *src, size_t from, size_t n) {
        return n ? tokvec_put(tv, src->v + from, n) : 0;
}

/* text's tokens (no special tokens) after tv's */
static int tokvec_text(tokvec *tv, const axp_tokenizer *t, const char *text, axp_error *err) {
        _cleanup_free_ int32_t *toks = NULL;
        int n = 0, r;
        if ((r = axp_tokenize(t, text, strlen(text), 0, &toks, &n, err)) < 0)
                return r;
        return tokvec_put(tv, toks, (size_t) n) < 0 ? axp_errorf(err, -ENOMEM, "out of memory") : 0;
}

int axp_tokenize_fim(const axp_tokenizer *t, const axp_fim_prompt *p, int32_t **ret, int *ret_n, bool *ret_cut,
                     axp_error *err) {
        const axp_fim_tokens *fim = &t->fim;
        tokvec extra = { 0 }, pre = { 0 }, mid = { 0 }, suf = { 0 }, out = { 0 };
        int r;

        if (fim->pre < 0 || fim->suf < 0 || fim->mid < 0)
                return axp_errorf(err, -EINVAL, "this model has no fill-in-the-middle tokens "
                                                "(such as <|fim_prefix|>, <|fim_suffix|>, <|fim_middle|>)");
        /* the repository, the other files' chunks and this file's line, before the prefix */
        if (fim->rep >= 0 && ((r = tokvec_put1(&extra, fim->rep)) < 0 ||
                              (r = tokvec_text(&extra, t, "myproject\n", err)) < 0))
                goto done;
        for (size_t i = 0; i < p->n_extra; i++) {
                const char *name = p->extra[i].filename ? p->extra[i].filename : "tmp";
                if (fim->sep >= 0) {
                        _cleanup_free_ char *line = NULL;
                        if (asprintf(&line, "%s\n", name) < 0) {
                                r = axp_errorf(err, -ENOMEM, "out of memory");
                                goto done;
                        }
                        if ((r = tokvec_put1(&extra, fim->sep)) < 0 || (r = tokvec_text(&extra, t, line, err)) < 0)
                                goto done;
                } else if ((r = tokvec_text(&extra, t, "\n\n--- snippet ---\n\n", err)) < 0)
                        goto done;
                if ((r = tokvec_text(&extra, t, p->extra[i].text ? p->extra[i].text : "", err)) < 0)
                        goto done;
        }
        if (fim->sep >= 0 && ((r = tokvec_put1(&extra, fim->sep)) < 0 ||
                              (r = tokvec_text(&extra, t, "filename\n", err)) < 0))
                goto done;
        if ((r = tokvec_text(&pre, t, p->prefix, err)) < 0 || (r = tokvec_text(&suf, t, p->suffix, err)) < 0 ||
            (p->middle && (r = tokvec_text(&mid, t, p->middle, err)) < 0))
                goto done;

        /* llama-server's fit: the prefix's end, the suffix's beginning, the extra's end */
        size_t take_pre = pre.n, take_suf = suf.n, take_extra = extra.n;
        if (p->fit) {
                const long batch = AXP_FIM_BATCH;
                take_pre = MIN(pre.n, (size_t) (3 * (batch / 4)));
                take_suf = MIN(suf.n, (size_t) MAX(0L, batch / 4 - (2 + (long) mid.n)));
                take_extra = MIN(extra.n, (size_t) MAX(0L, (long) p->n_ctx - batch - 2L * p->n_predict));
        }
        if (ret_cut)
                *ret_cut = take_pre < pre.n || take_suf < suf.n || take_extra < extra.n;
        if ((r = tokvec_put_from(&out, &extra, extra.n - take_extra, take_extra)) < 0 ||
            (t->add_bos && t->bos >= 0 && (r = tokvec_put1(&out, t->bos)) < 0) ||
            (r = tokvec_put1(&out, fim->pre)) < 0 || (r = tokvec_put_from(&out, &pre, pre.n - take_pre, take_pre)) < 0 ||
            (r = tokvec_put_from(&out, &mid, 0, mid.n)) < 0 || (r = tokvec_put1(&out, fim->suf)) < 0 ||
            (r = tokvec_put_from(&out, &suf, 0, take_suf)) < 0 || (r = tokvec_put1(&out, fim->mid)) < 0) {
                r = axp_errorf(err, -ENOMEM, "out of memory");
                goto done;
        }
        if (out.n > INT_MAX) {
                r = axp_errorf(err, -E2BIG, "the prompt is too long");
                goto done;
        }
        *ret = out.v;
        *ret_n = (int) out.n;
        out.v = NULL;
        r = 0;
done:
        free(extra.v);
        free(pre.v);
        free(mid.v);
        free(suf.v);
        free(out.v);
        return r;
}

int32_t axp_tokenizer_eos(const axp_tokenizer *t) {
        return t->eos;
}

const axp_fim_tokens *axp_tokenizer_fim(const axp_tokenizer *t) {
        return &t->fim;
}

bool axp_tokenizer_add_bos(const axp_tokenizer *t) {
        return t->add_bos;
}

bool axp_tokenizer_is_eog(const axp_tokenizer *t, int32_t id) {
        return id >= 0 && id < t->n_vocab && (t->attr[id] & ATTR_EOG);
}

int32_t axp_tokenizer_find(const axp_tokenizer *t, const char *text) {
        return find_cstr(t, text);
}

/* Tokenizing ------------------------------------------------------------------------- */

typedef struct sym {
        int32_t prev, next;
        uint32_t start, len; /* bytes of the word buffer */
        int32_t id;          /* BPE: string id of the symbol, -1 if unknown */
} sym;

/* A pair of adjacent symbols that may merge. `order` sorts the work: the merge's priority in
 * the high half (BPE: its rank; SPM: the merged token's score, best first), the left symbol in
 * the low half, so equal priorities go left to right. The right symbol is the left one's next:
 * it is the same one for as long as the left symbol keeps its length. */
typedef struct bigram {
        uint64_t order;
        int32_t left;
        uint32_t size; /* bytes of both when the pair was seen */
        int32_t result; /* string id of the merged symbol */
        uint32_t pad_;
} bigram;

/* Scratch of one axp_tokenize call; the tokenizer itself is never written to. */
typedef struct tok_ctx {
        const axp_tokenizer *t;
        int32_t *out;
        size_t n_out, cap_out;
        uint32_t *cpts;
        size_t cap_cpts;
        axp_pieces words, tmp;
        uint8_t *buf;
        size_t n_buf, cap_buf;
        sym *sym;
        size_t n_sym, cap_sym;
        bigram *heap; /* 4-ary min-heap on order */
        size_t n_heap, cap_heap;
} tok_ctx;

static void tok_ctx_done(tok_ctx *c) {
        free(c->out);
        free(c->cpts);
        free(c->words.len);
        free(c->tmp.len);
        free(c->buf);
        free(c->sym);
        free(c->heap);
}

static int push_token(tok_ctx *c, int32_t id) {
        if (c->n_out >= INT32_MAX)
                return -E2BIG;
        int r = axp_grow((void **) &c->out, &c->cap_out, c->n_out + 1, sizeof(int32_t));
        if (r < 0)
                return r;
        c->out[c->n_out++] = id;
        return 0;
}

static int buf_put(tok_ctx *c, const void *p, size_t n) {
        if (c->n_buf + n > UINT32_MAX)
                return -E2BIG;
        int r = axp_grow((void **) &c->buf, &c->cap_buf, c->n_buf + n, 1);
        if (r < 0)
                return r;
        memcpy(c->buf + c->n_buf, p, n);
        c->n_buf += n;
        return 0;
}

static int sym_push(tok_ctx *c, uint32_t start, uint32_t len, int32_t id) {
        int r = axp_grow((void **) &c->sym, &c->cap_sym, c->n_sym + 1, sizeof(sym));
        if (r < 0)
                return r;
        int32_t i = c->n_sym++;
        c->sym[i] = (sym) { .prev = i - 1, .next = -1, .start = start, .len = len, .id = id };
        if (i > 0)
                c->sym[i - 1].next = i;
        return 0;
}

static int heap_push(tok_ctx *c, uint32_t priority, int32_t left, uint32_t size, int32_t result) {
        int r = axp_grow((void **) &c->heap, &c->cap_heap, c->n_heap + 1, sizeof(bigram));
        if (r < 0)
                return r;
        bigram b = { (uint64_t) priority << 32 | (uint32_t) left, left, size, result, 0 };
        size_t i = c->n_heap++;
        while (i > 0) {
                size_t p = (i - 1) / 4;
                if (c->heap[p].order <= b.order)
                        break;
                c->heap[i] = c->heap[p];
                i = p;
        }
        c->heap[i] = b;
        return 0;
}

static bigram heap_pop(tok_ctx *c) {
        bigram top = c->heap[0], last = c->heap[--c->n_heap];
        size_t i = 0, n = c->n_heap;
        for (;;) {
                size_t first = 4 * i + 1, best = first;
                if (first >= n)
                        break;
                for (size_t k = first + 1; k < first + 4 && k < n; k++)
                        if (c->heap[k].order < c->heap[best].order)
                                best = k;
                if (c->heap[best].order >= last.order)
                        break;
                c->heap[i] = c->heap[best];
                i = best;
        }
        if (n > 0)
                c->heap[i] = last;
        return top;
}

/* Merge the right symbol of a popped bigram into the left one, if it is still current. */
static bool apply_bigram(tok_ctx *c, const bigram *b) {
        sym *l = &c->sym[b->left];
        if (l->len == 0 || l->next < 0)
                return false;
        sym *r = &c->sym[l->next];
        if (r->len == 0 || l->len + r->len != b->size)
                return false;
        l->len += r->len;
        l->id = b->result;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0)
                c->sym[r->next].prev = b->left;
        return true;
}

static int bpe_add_bigram(tok_ctx *c, int32_t left, int32_t right) {
        if (left < 0 || right < 0 || c->sym[left].id < 0 || c->sym[right].id < 0)
                return 0;
        const merge_slot *m = merge_find(&c->t->merges, c->sym[left].id, c->sym[right].id);
        if (!m)
                return 0;
        return heap_push(c, m->rank, left, c->sym[left].len + c->sym[right].len, m->result);
}

/* One pre-tokenized word (codepoints) through the byte map and the BPE merges. */
static int bpe_word(tok_ctx *c, const uint32_t *cpts, size_t n) {
        const axp_tokenizer *t = c->t;
        int r;

        c->n_buf = c->n_sym = c->n_heap = 0;
        for (size_t i = 0; i < n; i++) {
                uint8_t u[4];
                size_t k = axp_utf8_encode(cpts[i], u);
                for (size_t j = 0; j < k; j++) {
                        uint32_t start = c->n_buf;
                        if ((r = buf_put(c, t->byte_utf8[u[j]], t->byte_utf8_len[u[j]])) < 0 ||
                            (r = sym_push(c, start, t->byte_utf8_len[u[j]], t->byte_sym[u[j]])) < 0)
                                return r;
                }
        }
        if (c->n_sym == 0)
                return 0;

        if (t->ignore_merges) {
                int32_t id = find_token(t, c->buf, c->n_buf);
                if (id >= 0)
                        return push_token(c, id);
        }

        for (int32_t i = 1; i < (int32_t) c->n_sym; i++)
                if ((r = bpe_add_bigram(c, i - 1, i)) < 0)
                        return r;
        while (c->n_heap > 0) {
                bigram b = heap_pop(c);
                if (!apply_bigram(c, &b))
                        continue;
                if ((r = bpe_add_bigram(c, c->sym[b.left].prev, b.left)) < 0 ||
                    (r = bpe_add_bigram(c, b.left, c->sym[b.left].next)) < 0)
                        return r;
        }

        for (int32_t i = 0; i >= 0; i = c->sym[i].next) {
                const sym *s = &c->sym[i];
                if (s->id >= 0 && s->id < t->n_vocab) {
                        if ((r = push_token(c, s->id)) < 0)
                                return r;
                        continue;
                }
                /* not a token: the bytes of its text, where they are one-byte tokens */
                for (uint32_t j = 0; j < s->len; j++) {
                        int32_t id = t->byte_tok[c->buf[s->start + j]];
                        if (id >= 0 && (r = push_token(c, id)) < 0)
                                return r;
                }
        }
        return 0;
}

static int bpe_fragment(tok_ctx *c, const uint8_t *text, size_t len) {
        const axp_tokenizer *t = c->t;
        size_t n = 0;
        int r;

        if ((r = axp_grow((void **) &c->cpts, &c->cap_cpts, len, sizeof(uint32_t))) < 0)
                return r;
        for (size_t i = 0; i < len;) {
                size_t k;
                c->cpts[n++] = axp_utf8_decode(text + i, len - i, &k);
                i += k;
        }

        c->words.n = 0;
        if ((r = axp_pieces_push(&c->words, n)) < 0)
                return r;
        for (size_t i = 0; i < t->n_passes; i++) {
                c->tmp.n = 0;
                if ((r = axp_pretokenize_pass(t->passes[i], c->cpts, &c->words, &c->tmp)) < 0)
                        return r;
                axp_pieces swap = c->words;
                c->words = c->tmp;
                c->tmp = swap;
        }

        size_t start = 0;
        for (size_t i = 0; i < c->words.n; i++) {
                if ((r = bpe_word(c, c->cpts + start, c->words.len[i])) < 0)
                        return r;
                start += c->words.len[i];
        }
        return 0;
}

/* Higher scores give lower priorities (the heap pops the lowest). */
static inline uint32_t score_priority(float score) {
        uint32_t u;
        if (score == 0)
                score = 0; /* -0 ties with 0, as in a float comparison */
        memcpy(&u, &score, sizeof(u));
        u = u & 0x80000000u ? ~u : u | 0x80000000u; /* ascending with the float */
        return ~u;
}

static int spm_add_bigram(tok_ctx *c, int32_t left, int32_t right) {
        if (left < 0 || right < 0)
                return 0;
        const sym *l = &c->sym[left], *r = &c->sym[right];
        int32_t id = find_token(c->t, c->buf + l->start, l->len + r->len);
        if (id < 0)
                return 0;
        return heap_push(c, score_priority(c->t->score[id]), left, l->len + r->len, id);
}

/* SentencePiece: spaces become U+2581, then the adjacent pair whose merge is the
 * best-scoring token is merged until none is left; leftovers fall back to byte tokens. */
static int spm_fragment(tok_ctx *c, const uint8_t *text, size_t len, bool space_prefix) {
        const axp_tokenizer *t = c->t;
        int r;

        c->n_buf = c->n_sym = c->n_heap = 0;
        if (space_prefix && (r = buf_put(c, "\xe2\x96\x81", 3)) < 0)
                return r;
        for (size_t i = 0; i < len; i++) {
                r = text[i] == ' ' ? buf_put(c, "\xe2\x96\x81", 3) : buf_put(c, text + i, 1);
                if (r < 0)
                        return r;
        }
        for (size_t off = 0; off < c->n_buf;) {
                size_t k = MIN(axp_utf8_len(c->buf[off]), c->n_buf - off);
                if ((r = sym_push(c, off, k, -1)) < 0)
                        return r;
                off += k;
        }
        if (c->n_sym == 0)
                return 0;

        for (int32_t i = 1; i < (int32_t) c->n_sym; i++)
                if ((r = spm_add_bigram(c, i - 1, i)) < 0)
                        return r;
        while (c->n_heap > 0) {
                bigram b = heap_pop(c);
                if (!apply_bigram(c, &b))
                        continue;
                if ((r = spm_add_bigram(c, c->sym[b.left].prev, b.left)) < 0 ||
                    (r = spm_add_bigram(c, b.left, c->sym[b.left].next)) < 0)
                        return r;
        }

        for (int32_t i = 0; i >= 0; i = c->sym[i].next) {
                const sym *s = &c->sym[i];
                int32_t id = find_token(t, c->buf + s->start, s->len);
                if (id >= 0) {
                        if ((r = push_token(c, id)) < 0)
                                return r;
                        continue;
                }
                for (uint32_t j = 0; j < s->len; j++) {
                        id = t->byte_tok[c->buf[s->start + j]];
                        if (id >= 0 && (r = push_token(c, id)) < 0)
                                return r;
                }
        }
        return 0;
}

/* A run of raw text, or a special token found in it. */
typedef struct frag {
        int32_t tok; /* -1: text */
        size_t off, len;
} frag;

typedef struct frag_list {
        frag *v;
        size_t n, cap;
} frag_list;

static void frag_list_done(frag_list *l) {
        free(l->v);
}

static int frag_push(frag_list *l, int32_t tok, size_t off, size_t len) {
        int r = axp_grow((void **) &l->v, &l->cap, l->n + 1, sizeof(frag));
        if (r < 0)
                return r;
        l->v[l->n++] = (frag) { tok, off, len };
        return 0;
}

static inline bool is_space(char c) {
        return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* Split one text fragment at every occurrence of special token `id`. */
static int split_at_special(const axp_tokenizer *t, int32_t id, const char *text, frag f,
                            frag_list *out) {
        const char *needle = tok_text(t, id);
        size_t nlen = t->str.ent[id].len;
        size_t off = f.off, rem = f.len;
        int r;

        while (rem > 0) {
                const char *m = memmem(text + off, rem, needle, nlen);
                if (!m)
                        return frag_push(out, -1, off, rem);
                size_t pos = m - text, left = pos - off;
                if (t->attr[id] & ATTR_LSTRIP)
                        while (left > 0 && is_space(text[off + left - 1]))
                                left--;
                if (left > 0 && (r = frag_push(out, -1, off, left)) < 0)
                        return r;
                if ((r = frag_push(out, id, 0, 0)) < 0)
                        return r;
                size_t end = off + rem;
                off = pos + nlen;
                rem = end - off;
                if (t->attr[id] & ATTR_RSTRIP)
                        while (rem > 0 && is_space(text[off])) {
                                off++;
                                rem--;
                        }
        }
        return 0;
}

/* Special-token text becomes its token: longest tokens first, each one's occurrences split
 * out of the text that is left. Without parse_special only user-defined tokens count. */
static int partition(const axp_tokenizer *t, const char *text, size_t len, bool parse_special,
                     frag_list *ret) {
        frag_list cur = {}, next = {};
        bool present[256] = {};
        int r = 0;

        if (len == 0)
                return 0;
        if ((r = frag_push(&cur, -1, 0, len)) < 0)
                return r;
        for (size_t i = 0; i < len; i++)
                present[(uint8_t) text[i]] = true;

        for (size_t s = 0; s < t->n_special; s++) {
                int32_t id = t->special[s];
                if (!parse_special && (t->attr[id] & (ATTR_CONTROL | ATTR_UNKNOWN)))
                        continue;
                if (t->str.ent[id].len > len || !present[(uint8_t) tok_text(t, id)[0]])
                        continue;
                next.n = 0;
                for (size_t i = 0; i < cur.n && r >= 0; i++) {
                        if (cur.v[i].tok >= 0 || cur.v[i].len < t->str.ent[id].len)
                                r = frag_push(&next, cur.v[i].tok, cur.v[i].off, cur.v[i].len);
                        else
                                r = split_at_special(t, id, text, cur.v[i], &next);
                }
                if (r < 0)
                        break;
                frag_list swap = cur;
                cur = next;
                next = swap;
        }
        free(next.v);
        if (r < 0) {
                free(cur.v);
                return r;
        }
        *ret = cur;
        return 0;
}

/* The tokens of text into c->out: the special tokens' text first, then each fragment. */
static int tokenize(tok_ctx *c, const char *text, size_t len, unsigned flags) {
        const axp_tokenizer *t = c->t;
        _cleanup_(frag_list_done) frag_list frags = {};
        bool add_special = flags & AXP_TOK_ADD_BOS;
        int r;

        r = partition(t, text, len, flags & AXP_TOK_PARSE_SPECIAL, &frags);
        if (r < 0)
                return r;

        if (add_special && t->add_bos && (r = push_token(c, t->bos)) < 0)
                return r;
        bool prev_special = true; /* SPM: text at the start gets the space prefix */
        for (size_t i = 0; i < frags.n; i++) {
                const frag *f = &frags.v[i];
                if (f->tok >= 0) {
                        r = push_token(c, f->tok);
                        prev_special = true;
                } else if (t->type == VOCAB_SPM) {
                        r = spm_fragment(c, (const uint8_t *) text + f->off, f->len,
                                         t->add_space_prefix && prev_special);
                        prev_special = false;
                } else
                        r = bpe_fragment(c, (const uint8_t *) text + f->off, f->len);
                if (r < 0)
                        return r;
        }
        if (add_special && t->add_eos && (r = push_token(c, t->eos)) < 0)
                return r;

        if (!c->out && !(c->out = malloc(sizeof(int32_t))))
                return -ENOMEM;
        return 0;
}

int axp_tokenize(const axp_tokenizer *t, const char *text, size_t len, unsigned flags,
                 int32_t **ret_tokens, int *ret_n, axp_error *err) {
        _cleanup_(tok_ctx_done) tok_ctx c = { .t = t };
        int r;

        if (len > INT32_MAX)
                return axp_errorf(err, -E2BIG, "text of %zu bytes is too long to tokenize", len);
        if (len > 0 && !text)
                return axp_errorf(err, -EINVAL, "no text given");

        r = tokenize(&c, text, len, flags);
        if (r < 0)
                return axp_errorf(err, r, "cannot tokenize %zu bytes of text: %s", len, strerror(-r));
        *ret_n = c.n_out;
        *ret_tokens = TAKE_PTR(c.out);
        return 0;
}

/* Pieces and streaming --------------------------------------------------------------- */

static bool piece_of(const axp_tokenizer *t, int32_t id, bool render_special, const char **ret,
                     size_t *ret_len) {
        if (id < 0 || id >= t->n_vocab)
                return false;
        if (!render_special && (t->attr[id] & (ATTR_UNKNOWN | ATTR_CONTROL)))
                return false;
        *ret = t->piece + t->piece_off[id];
        *ret_len = t->piece_len[id];
        return true;
}

int axp_token_to_piece(const axp_tokenizer *t, int32_t id, bool render_special, char *buf,
                       int cap) {
        const char *p;
        size_t n;

        if (!piece_of(t, id, render_special, &p, &n))
                return 0;
        if (n > (size_t) MAX(cap, 0))
                return -(int) n;
        memcpy(buf, p, n);
        return n;
}

void axp_detok_init(axp_detok *d, const axp_tokenizer *t, bool render_special) {
        *d = (axp_detok) {
                .tok = t,
                .render_special = render_special,
                .first = t->type == VOCAB_SPM && t->add_space_prefix,
        };
}

int axp_detok_push(axp_detok *d, int32_t id, char **out, size_t *out_len, size_t *out_cap) {
        const char *p;
        size_t n;

        bool strip = d->first;
        d->first = false;
        if (!piece_of(d->tok, id, d->render_special, &p, &n))
                return 0;
        if (strip && n > 0 && p[0] == ' ') {
                p++;
                n--;
        }
        return axp_utf8_stream_push(&d->utf8, p, n, out, out_len, out_cap);
}

int axp_detok_flush(axp_detok *d, char **out, size_t *out_len, size_t *out_cap) {
        return axp_utf8_stream_flush(&d->utf8, out, out_len, out_cap);
}
