/* SPDX-License-Identifier: MIT */
#include "unicode.h"

#include <errno.h>
#include <stdlib.h>

uint32_t axp_utf8_decode(const uint8_t *s, size_t len, size_t *ret_n) {
        uint8_t b0 = s[0];
        uint32_t cpt;
        size_t n;

        *ret_n = 1; /* an ASCII byte, or a bad one (U+FFFD) */
        if (b0 < 0x80)
                return b0;
        if (!(b0 & 0x40))
                return 0xfffd;
        if (!(b0 & 0x20)) {
                n = 2;
                cpt = b0 & 0x1f;
        } else if (!(b0 & 0x10)) {
                n = 3;
                cpt = b0 & 0x0f;
        } else if (!(b0 & 0x08)) {
                n = 4;
                cpt = b0 & 0x07;
        } else
                return 0xfffd;
        if (len < n)
                return 0xfffd;
        for (size_t i = 1; i < n; i++) {
                if ((s[i] & 0xc0) != 0x80)
                        return 0xfffd;
                cpt = cpt << 6 | (s[i] & 0x3f);
        }
        *ret_n = n;
        return cpt <= 0x10ffff ? cpt : 0xfffd;
}

int axp_pieces_push(axp_pieces *p, size_t len) {
        if (p->n == p->cap) {
                size_t cap = p->cap ? p->cap * 2 : 64;
                size_t *v = realloc(p->len, cap * sizeof(*v));
                if (!v)
                        return -ENOMEM;
                p->len = v;
                p->cap = cap;
        }
        p->len[p->n++] = len;
        return 0;
}

/* The pre-tokenizer regexes only tell four kinds of codepoint apart. */
enum { CLS_OTHER, CLS_LETTER, CLS_NUMBER, CLS_SPACE };

static inline int cls_of(uint32_t cpt) {
        unsigned f = axp_ucd_flags(cpt);
        if (f & AXP_UCD_LETTER)
                return CLS_LETTER;
        if (f & AXP_UCD_NUMBER)
                return CLS_NUMBER;
        if (f & AXP_UCD_SPACE)
                return CLS_SPACE;
        return CLS_OTHER;
}

/* One piece of the input being split; positions are absolute indices into cpts. */
typedef struct seg {
        const uint32_t *c;
        size_t end;
        size_t prev; /* end of the last piece emitted */
        axp_pieces *out;
        int r;
} seg;

static inline int seg_cls(const seg *s, size_t pos) {
        return pos < s->end ? cls_of(s->c[pos]) : -1;
}

static inline bool seg_is_rn(const seg *s, size_t pos) {
        return pos < s->end && (s->c[pos] == '\r' || s->c[pos] == '\n');
}

static size_t seg_emit(seg *s, size_t end) {
        if (end > s->prev) {
                int r = axp_pieces_push(s->out, end - s->prev);
                if (r < 0 && s->r == 0)
                        s->r = r;
        }
        s->prev = end;
        return end;
}

static inline uint32_t ascii_lower(uint32_t c) {
        return c >= 'A' && c <= 'Z' ? c + 32 : c;
}

/* 's|'t|'re|'ve|'m|'ll|'d at pos: returns its length or 0. */
static size_t contraction(const seg *s, size_t pos, bool any_case) {
        if (s->c[pos] != '\'' || pos + 1 >= s->end)
                return 0;
        uint32_t a = s->c[pos + 1];
        if (any_case)
                a = ascii_lower(a);
        if (a == 's' || a == 't' || a == 'm' || a == 'd')
                return 2;
        if (pos + 2 >= s->end)
                return 0;
        uint32_t b = s->c[pos + 2];
        if (any_case)
                b = ascii_lower(b);
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
                return 3;
        return 0;
}

/* \s*[\r\n]+ (if with_rn), then \s+(?!\S), then \s+, at a whitespace run. */
static size_t whitespace_end(const seg *s, size_t pos, bool with_rn) {
        size_t n = 0, last_rn = 0;

        while (seg_cls(s, pos + n) == CLS_SPACE) {
                if (seg_is_rn(s, pos + n))
                        last_rn = pos + n + 1;
                n++;
        }
        if (with_rn && last_rn > 0)
                return last_rn;
        if (n > 1 && pos + n < s->end)
                return pos + n - 1;
        if (n > 0)
                return pos + n;
        return pos + 1; /* not reached: every codepoint belongs to some alternative */
}

static void split_gpt2(seg *s, size_t pos) {
        while (pos < s->end) {
                size_t n = contraction(s, pos, false);
                if (n > 0) {
                        pos = seg_emit(s, pos + n);
                        continue;
                }

                /* ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+' */
                size_t p = pos + (s->c[pos] == ' ');
                int cls = seg_cls(s, p);
                if (cls >= 0 && cls != CLS_SPACE) {
                        while (seg_cls(s, p) == cls)
                                p++;
                        pos = seg_emit(s, p);
                        continue;
                }
                pos = seg_emit(s, whitespace_end(s, pos, false));
        }
}

/* Tekken's words, as llama.cpp reads its regex: an "upper" letter is any letter but a-z, a
 * "lower" one any letter but A-Z (letters outside ASCII are both). */
static inline bool tekken_upper(const seg *s, size_t p) {
        return seg_cls(s, p) == CLS_LETTER && !(s->c[p] >= 'a' && s->c[p] <= 'z');
}

static inline bool tekken_lower(const seg *s, size_t p) {
        return seg_cls(s, p) == CLS_LETTER && !(s->c[p] >= 'A' && s->c[p] <= 'Z');
}

/* upper* lower+ | upper+ lower*, from a letter at p; returns the end. */
static size_t tekken_word(const seg *s, size_t p) {
        size_t a = p, e;
        while (tekken_upper(s, a))
                a++;
        for (size_t k = a;; k--) {
                if (tekken_lower(s, k)) {
                        for (e = k; tekken_lower(s, e); e++)
                                ;
                        return e;
                }
                if (k == p)
                        break;
        }
        for (e = a; tekken_lower(s, e); e++)
                ;
        return e;
}

typedef enum { WORDS_LLAMA3, WORDS_TEKKEN } words_kind;

/* The llama3 family: llama3 (digits in threes), qwen2 (one digit at a time) and tekken (one
 * digit, case-split words, no contractions, '/' joins the newlines after punctuation). */
static void split_llama3(seg *s, size_t pos, words_kind kind, size_t max_digits) {
        bool tekken = kind == WORDS_TEKKEN;

        while (pos < s->end) {
                size_t n = tekken ? 0 : contraction(s, pos, true);
                if (n > 0) {
                        pos = seg_emit(s, pos + n);
                        continue;
                }

                int cls = seg_cls(s, pos);

                /* [^\r\n\p{L}\p{N}]?\p{L}+ */
                if (!seg_is_rn(s, pos) && cls != CLS_NUMBER &&
                    (cls == CLS_LETTER || seg_cls(s, pos + 1) == CLS_LETTER)) {
                        size_t p = pos + (cls != CLS_LETTER);
                        if (tekken)
                                p = tekken_word(s, p);
                        else
                                while (seg_cls(s, p) == CLS_LETTER)
                                        p++;
                        pos = seg_emit(s, p);
                        continue;
                }

                /* \p{N}{1,max_digits} */
                if (cls == CLS_NUMBER) {
                        size_t ini = pos;
                        while (seg_cls(s, pos) == CLS_NUMBER) {
                                pos++;
                                if (pos - ini >= max_digits)
                                        ini = seg_emit(s, pos);
                        }
                        seg_emit(s, pos);
                        continue;
                }

                /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
                size_t p = pos + (s->c[pos] == ' ');
                if (seg_cls(s, p) == CLS_OTHER) {
                        while (seg_cls(s, p) == CLS_OTHER)
                                p++;
                        while (seg_is_rn(s, p) || (tekken && p < s->end && s->c[p] == '/'))
                                p++;
                        pos = seg_emit(s, p);
                        continue;
                }

                pos = seg_emit(s, whitespace_end(s, pos, true));
        }
}

static bool is_punct_run(uint32_t c) {
        if (axp_ucd_flags(c) & AXP_UCD_PUNCT)
                return true;
        return c == '$' || c == '+' || c == '<' || c == '=' || c == '>' || c == '^' || c == '~' ||
               c == '|';
}

static bool is_number(uint32_t c) {
        return axp_ucd_flags(c) & AXP_UCD_NUMBER;
}

/* Regex iterator over a one-class pattern: matches and the gaps between them are pieces. */
static void split_runs(seg *s, size_t pos, bool (*match)(uint32_t), bool each) {
        while (pos < s->end) {
                bool m = match(s->c[pos]);
                size_t p = pos + 1;
                if (!(m && each))
                        while (p < s->end && match(s->c[p]) == m)
                                p++;
                pos = seg_emit(s, p);
        }
}

static bool is_digit(uint32_t c) {
        return c >= '0' && c <= '9';
}

static void split_digits3(seg *s, size_t pos) {
        while (pos < s->end) {
                if (pos + 3 <= s->end && is_digit(s->c[pos]) && is_digit(s->c[pos + 1]) &&
                    is_digit(s->c[pos + 2])) {
                        seg_emit(s, pos); /* the gap before */
                        pos = seg_emit(s, pos + 3);
                } else
                        pos++;
        }
}

int axp_pretokenize_pass(axp_split pass, const uint32_t *cpts, const axp_pieces *in,
                         axp_pieces *out) {
        size_t start = 0;

        for (size_t i = 0; i < in->n; i++) {
                seg s = { .c = cpts, .end = start + in->len[i], .prev = start, .out = out };

                switch (pass) {
                case AXP_SPLIT_GPT2:
                        split_gpt2(&s, start);
                        break;
                case AXP_SPLIT_LLAMA3:
                        split_llama3(&s, start, WORDS_LLAMA3, 3);
                        break;
                case AXP_SPLIT_QWEN2:
                        split_llama3(&s, start, WORDS_LLAMA3, 1);
                        break;
                case AXP_SPLIT_TEKKEN:
                        split_llama3(&s, start, WORDS_TEKKEN, 1);
                        break;
                case AXP_SPLIT_PUNCT_RUNS:
                        split_runs(&s, start, is_punct_run, false);
                        break;
                case AXP_SPLIT_NUMBER_RUNS:
                        split_runs(&s, start, is_number, false);
                        break;
                case AXP_SPLIT_NUMBER_EACH:
                        split_runs(&s, start, is_number, true);
                        break;
                case AXP_SPLIT_DIGITS3:
                        split_digits3(&s, start);
                        break;
                }
                seg_emit(&s, s.end);
                if (s.r < 0)
                        return s.r;
                start = s.end;
        }
        return 0;
}
