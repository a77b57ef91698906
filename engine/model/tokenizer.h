/* SPDX-License-Identifier: MIT */
/* Tokenizer from GGUF metadata: byte-level BPE (tokenizer.ggml.model = "gpt2", with the
 * pre-tokenizer named by tokenizer.ggml.pre: "llama-bpe", "qwen2", ...) and SentencePiece
 * style ("llama"). Matches llama.cpp's llama_tokenize / llama_token_to_piece. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf.h"
#include "base/utf8.h"
#include "base/util.h"

typedef struct axp_tokenizer axp_tokenizer;

enum {
        AXP_TOK_ADD_BOS = 1 << 0,       /* add BOS if the vocab asks for it (llama_vocab_get_add_bos);
                                         * also EOS if it asks for that (llama.cpp's add_special) */
        AXP_TOK_PARSE_SPECIAL = 1 << 1, /* special-token text ("<|eot_id|>") becomes that token */
};

int axp_tokenizer_load(const gguf_file *f, axp_tokenizer **ret, axp_error *err);
void axp_tokenizer_free(axp_tokenizer *t);
static inline void axp_tokenizer_freep(axp_tokenizer **t) {
        axp_tokenizer_free(*t);
}

int axp_tokenizer_n_vocab(const axp_tokenizer *t);
int32_t axp_tokenizer_bos(const axp_tokenizer *t); /* -1 if none */
int32_t axp_tokenizer_eos(const axp_tokenizer *t); /* -1 if none */
bool axp_tokenizer_add_bos(const axp_tokenizer *t);
/* End of generation: EOS, EOT (<|eot_id|>, <|im_end|>, <|end|>, ...). */
bool axp_tokenizer_is_eog(const axp_tokenizer *t, int32_t id);
/* Fill-in-the-middle: the tokens that open the prefix, the suffix and the middle, and the
 * repository and file separators of repo-level FIM (Qwen2.5-Coder's), from the GGUF's
 * tokenizer.ggml.fim_*_token_id or found by their text as llama.cpp finds them; -1 where
 * the vocabulary has none. */
typedef struct axp_fim_tokens {
        int32_t pre, suf, mid, rep, sep;
} axp_fim_tokens;
const axp_fim_tokens *axp_tokenizer_fim(const axp_tokenizer *t);
/* Fill in the middle: llama.cpp's /infill prompt. */
typedef struct axp_fim_chunk {
        const char *filename; /* NULL: "tmp", as llama.cpp names one without */
        const char *text;
} axp_fim_chunk;

/* llama-server's default batch, whose share the prefix and suffix take when fitted */
#define AXP_FIM_BATCH 2048

typedef struct axp_fim_prompt {
        const char *prefix;          /* the text before the cursor */
        const char *suffix;          /* after it */
        const char *middle;          /* typed at the cursor, after the prefix (/infill's "prompt"); NULL: none */
        const axp_fim_chunk *extra;  /* other files' text, before the file's (/infill's input_extra) */
        size_t n_extra;
        /* fit as llama-server's /infill does (n_batch AXP_FIM_BATCH): the prefix keeps its last
         * 3/4 batch tokens, the suffix its first batch/4 - 2 - middle's, and the tokens before
         * the prefix (the repository, the extra chunks, the file line) their last
         * n_ctx - batch - 2 n_predict; without, nothing is cut */
        bool fit;
        int n_ctx, n_predict;
} axp_fim_prompt;

/* The tokens of the prompt p: with repo-level FIM tokens first FIM_REP "myproject\n", then
 * each extra chunk as FIM_SEP "filename\n" text (without FIM_SEP, after "\n\n--- snippet
 * ---\n\n"), and FIM_SEP "filename\n"; then [BOS where the vocabulary adds one] FIM_PRE prefix
 * middle FIM_SUF suffix FIM_MID, each text tokenized on its own without special tokens.
 * *ret_cut: whether fitting cut any. -EINVAL for a vocabulary without FIM tokens, saying so.
 * *ret is malloc'd. */
int axp_tokenize_fim(const axp_tokenizer *t, const axp_fim_prompt *p, int32_t **ret, int *ret_n, bool *ret_cut,
                     axp_error *err);
/* Token id of an exact token text (e.g. "<|im_start|>"), -1 if absent. */
int32_t axp_tokenizer_find(const axp_tokenizer *t, const char *text);

/* Tokenize len bytes of text (need not be NUL-terminated). *ret_tokens is malloc'd. */
int axp_tokenize(const axp_tokenizer *t, const char *text, size_t len, unsigned flags,
                 int32_t **ret_tokens, int *ret_n, axp_error *err);

/* The bytes a token stands for (byte-level decoded, "▁" -> " " for SentencePiece, <0xNN>
 * byte tokens as that byte). Control tokens give their text only if render_special. Returns
 * the number of bytes written (at most cap), or the negative size needed if cap is too
 * small. */
int axp_token_to_piece(const axp_tokenizer *t, int32_t id, bool render_special, char *buf,
                       int cap);

/* Streaming detokenizer: collects token bytes and releases only complete UTF-8 characters
 * (a token that ends inside a multi-byte character is held back until it completes; bytes
 * that can never form a valid character are replaced by U+FFFD). */
typedef struct axp_detok {
        const axp_tokenizer *tok;
        bool render_special;
        bool first; /* SentencePiece: strip the leading space of the first piece */
        axp_utf8_stream utf8;
} axp_detok;

void axp_detok_init(axp_detok *d, const axp_tokenizer *t, bool render_special);
/* Append the complete text of token id to *out (malloc'd, grown; *out_len updated). */
int axp_detok_push(axp_detok *d, int32_t id, char **out, size_t *out_len, size_t *out_cap);
/* End of stream: flush held-back bytes (as U+FFFD). */
int axp_detok_flush(axp_detok *d, char **out, size_t *out_len, size_t *out_cap);
