/* SPDX-License-Identifier: MIT */
/* GBNF-style grammars: the parser, the checks a grammar must pass before a request is queued,
 * and the matcher (grammar.h explains the design). */
#include "grammar.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

enum { E_END, E_REF, E_CHARS };

#define MAX_ELEMS (1u << 16)
/* A step's mask comes from two tries, the tokens of at most SHORT_PIECE bytes and the longer
 * ones; each part is remembered by the state as that trie sees it, a bounded repetition's count
 * clamped past what its longest token can reach (canon()). */
#define SHORT_PIECE 16
/* Trie parts remembered per matcher (each n_vocab bits: 16 KiB for 128k tokens, 512 KiB in
 * all). */
#define MASK_CACHE 32
#define MAX_REPEAT 4096
#define INF_LEN ((size_t) -1)

typedef struct gelem {
        uint8_t type;
        uint8_t neg;
        uint32_t rule;             /* E_REF */
        uint32_t range, n_ranges;  /* E_CHARS: pairs in g->ranges */
        uint64_t ascii[2];         /* E_CHARS: which of 0..127 match (negation applied) */
} gelem;

struct axp_grammar {
        gelem *elems;
        size_t n_elems;
        uint32_t *ranges; /* lo, hi pairs */
        size_t n_ranges;
        uint32_t *alts;   /* first element of each alternative, rule by rule */
        uint32_t *rule_alt, *rule_n_alts;
        char **names;
        uint32_t *elem_rule; /* the rule each element belongs to */
        /* rep_k[r] = k for the k-th rule of a bounded repetition's chain (X_k ::= item X_{k-1},
         * X_1 the last; X_k = r - k + 1 + j for X_j), 0 for other rules and for chains whose
         * item may match nothing */
        uint32_t *rep_k;
        size_t n_rules;
        uint32_t root;
        size_t min_bytes;
};

/* Parsing ------------------------------------------------------------------------------------ */

typedef struct pelem {
        uint8_t type, neg;
        uint32_t a, n; /* E_REF: a = rule; E_CHARS: ranges [a, a + n) */
} pelem;

typedef struct pseq {
        pelem *v;
        size_t n, cap;
} pseq;

typedef struct prule {
        char *name;
        pseq *alts;
        size_t n_alts, cap_alts;
        bool defined;
        int line; /* where first used or defined */
        unsigned n_generated;
        uint32_t rep_k;
} prule;

typedef struct parser {
        const char *text, *p, *end;
        prule *rules;
        size_t n_rules, cap_rules;
        uint32_t *ranges;
        size_t n_ranges, cap_ranges;
        size_t n_elems;
        unsigned depth;         /* groups open */
        axp_error *err;
        const char *line_at;    /* line_of's last answer: line_no is the line of line_at */
        int line_no;
} parser;

/* The line of `at`, counted on from the last one asked (the parser asks in order, mostly),
 * so that a grammar's lines are counted once, not once per rule. */
static int line_of(parser *ps, const char *at) {
        if (at > ps->end)
                at = ps->end;
        if (!ps->line_at || at < ps->line_at) {
                ps->line_at = ps->text;
                ps->line_no = 1;
        }
        for (const char *c = ps->line_at; c < at; c++)
                ps->line_no += *c == '\n';
        ps->line_at = at;
        return ps->line_no;
}

#define FAIL(ps, at, ...)                                                                       \
        ({                                                                                      \
                char _m[240];                                                                   \
                snprintf(_m, sizeof(_m), __VA_ARGS__);                                          \
                axp_errorf((ps)->err, -EINVAL, "grammar, line %d: %s", line_of(ps, at), _m);    \
        })

static int seq_push(parser *ps, pseq *s, pelem e) {
        if (++ps->n_elems > MAX_ELEMS)
                return axp_errorf(ps->err, -EINVAL, "the grammar is too large (more than %u symbols)",
                                  MAX_ELEMS);
        if (axp_grow((void **) &s->v, &s->cap, s->n + 1, sizeof(pelem)) < 0)
                return axp_errorf(ps->err, -ENOMEM, "out of memory");
        s->v[s->n++] = e;
        return 0;
}

static int add_range(parser *ps, uint32_t lo, uint32_t hi) {
        if (axp_grow((void **) &ps->ranges, &ps->cap_ranges, ps->n_ranges + 2, sizeof(uint32_t)) < 0)
                return axp_errorf(ps->err, -ENOMEM, "out of memory");
        ps->ranges[ps->n_ranges++] = lo;
        ps->ranges[ps->n_ranges++] = hi;
        return 0;
}

static int rule_add(parser *ps, const char *name, size_t len, int line) {
        if (axp_grow((void **) &ps->rules, &ps->cap_rules, ps->n_rules + 1, sizeof(prule)) < 0)
                return axp_errorf(ps->err, -ENOMEM, "out of memory");
        prule *r = &ps->rules[ps->n_rules];
        *r = (prule) { .name = strndup(name, len), .line = line };
        if (!r->name)
                return axp_errorf(ps->err, -ENOMEM, "out of memory");
        return (int) ps->n_rules++;
}

static int rule_id(parser *ps, const char *name, size_t len, int line) {
        for (size_t i = 0; i < ps->n_rules; i++)
                if (strlen(ps->rules[i].name) == len && memcmp(ps->rules[i].name, name, len) == 0)
                        return (int) i;
        return rule_add(ps, name, len, line);
}

static int rule_generated(parser *ps, uint32_t parent, int line) {
        char name[128];
        snprintf(name, sizeof(name), "%s-%u", ps->rules[parent].name, ++ps->rules[parent].n_generated);
        int r = rule_add(ps, name, strlen(name), line);
        if (r >= 0)
                ps->rules[r].defined = true;
        return r;
}

static pseq *rule_new_alt(parser *ps, uint32_t rule) {
        prule *r = &ps->rules[rule];
        if (axp_grow((void **) &r->alts, &r->cap_alts, r->n_alts + 1, sizeof(pseq)) < 0)
                return NULL;
        r->alts[r->n_alts] = (pseq) {};
        return &r->alts[r->n_alts++];
}

static bool is_name_char(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
               c == '_';
}

/* Skip blanks and comments; newlines too when `newlines`. */
static void skip_space(parser *ps, bool newlines) {
        while (ps->p < ps->end) {
                char c = *ps->p;
                if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n'))
                        ps->p++;
                else if (c == '#')
                        while (ps->p < ps->end && *ps->p != '\n')
                                ps->p++;
                else
                        break;
        }
}

static int hex_value(char c) {
        return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* One character of a literal or class: an escape or one UTF-8 character. */
static int parse_char(parser *ps, uint32_t *cp) {
        const char *at = ps->p;
        if (ps->p >= ps->end)
                return FAIL(ps, at, "unexpected end of the grammar");
        unsigned char c = (unsigned char) *ps->p;
        if (c == '\\') {
                if (++ps->p >= ps->end)
                        return FAIL(ps, at, "unexpected end after '\\'");
                char e = *ps->p++;
                int digits = 0;
                switch (e) {
                case 'n': *cp = '\n'; return 0;
                case 'r': *cp = '\r'; return 0;
                case 't': *cp = '\t'; return 0;
                case '\\': case '"': case '[': case ']': case '-': case '^': case '\'':
                        *cp = (uint32_t) e;
                        return 0;
                case 'x': digits = 2; break;
                case 'u': digits = 4; break;
                case 'U': digits = 8; break;
                default:
                        return FAIL(ps, at, "unknown escape '\\%c'", e);
                }
                uint32_t v = 0;
                for (int i = 0; i < digits; i++) {
                        int h = ps->p < ps->end ? hex_value(*ps->p) : -1;
                        if (h < 0)
                                return FAIL(ps, at, "'\\%c' wants %d hex digits", e, digits);
                        v = v << 4 | (uint32_t) h;
                        ps->p++;
                }
                if (v > 0x10FFFF)
                        return FAIL(ps, at, "escape beyond U+10FFFF");
                if (v >= 0xD800 && v <= 0xDFFF)
                        return FAIL(ps, at, "U+%04X is a UTF-16 surrogate, not a character (UTF-8 text holds none)", v);
                *cp = v;
                return 0;
        }
        int n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
        if (n == 0 || ps->end - ps->p < n)
                return FAIL(ps, at, "invalid UTF-8");
        uint32_t v = n == 1 ? c : n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
        for (int i = 1; i < n; i++) {
                unsigned char k = (unsigned char) ps->p[i];
                if ((k & 0xC0) != 0x80)
                        return FAIL(ps, at, "invalid UTF-8");
                v = v << 6 | (k & 0x3F);
        }
        if ((v >= 0xD800 && v <= 0xDFFF) || v > 0x10FFFF || v < (n == 2 ? 0x80u : n == 3 ? 0x800u : n == 4 ? 0x10000u : 0))
                return FAIL(ps, at, "invalid UTF-8");
        ps->p += n;
        *cp = v;
        return 0;
}

static int parse_alternates(parser *ps, uint32_t rule, bool nested);

/* Repeat the symbol seq[from..] min..max times (max < 0: no limit). */
static int repeat(parser *ps, uint32_t rule, pseq *seq, size_t from, long min, long max, const char *at) {
        int r;
        if (from >= seq->n)
                return FAIL(ps, at, "a repetition with nothing before it");
        if (max >= 0 && min > max)
                return FAIL(ps, at, "a repetition {m,n} with m > n");
        if (min > MAX_REPEAT || max > MAX_REPEAT)
                return FAIL(ps, at, "repetitions beyond %d are not supported", MAX_REPEAT);
        pelem item;
        size_t n = seq->n - from;
        if (n == 1)
                item = seq->v[from];
        else {
                /* seq may move when rules grow: copy the symbol out first */
                pelem *copy = malloc(n * sizeof(pelem));
                if (!copy)
                        return axp_errorf(ps->err, -ENOMEM, "out of memory");
                memcpy(copy, seq->v + from, n * sizeof(pelem));
                int id = rule_generated(ps, rule, line_of(ps, at));
                pseq *alt = id < 0 ? NULL : rule_new_alt(ps, (uint32_t) id);
                r = alt ? 0 : -ENOMEM;
                for (size_t i = 0; r == 0 && i < n; i++)
                        r = seq_push(ps, alt, copy[i]);
                free(copy);
                if (id < 0)
                        return id;
                if (r < 0)
                        return r == -ENOMEM ? axp_errorf(ps->err, r, "out of memory") : r;
                item = (pelem) { .type = E_REF, .a = (uint32_t) id };
        }
        /* seq belongs to a rule whose alternatives may move as rules are added: keep its place */
        prule *owner = &ps->rules[rule];
        size_t alt_index = (size_t) (seq - owner->alts);
        seq->n = from;
        ps->n_elems -= n;
        /* the required part: the item min times, or past SHORT_PIECE + 1 times a chain M_min
         * where M_k ::= item M_{k-1} and M_1 ::= item (one rule per count, so that counts past
         * what a token can reach look the same to the mask; rep_k) */
        for (long i = 0; i < min && min <= SHORT_PIECE + 1; i++)
                if ((r = seq_push(ps, &ps->rules[rule].alts[alt_index], item)) < 0)
                        return r;
        if (min > SHORT_PIECE + 1) {
                int prev = -1;
                for (long i = 0; i < min; i++) {
                        int id = rule_generated(ps, rule, line_of(ps, at));
                        if (id < 0)
                                return id;
                        if (!rule_new_alt(ps, (uint32_t) id))
                                return axp_errorf(ps->err, -ENOMEM, "out of memory");
                        ps->rules[id].rep_k = (uint32_t) i + 1;
                        if ((r = seq_push(ps, &ps->rules[id].alts[0], item)) < 0 ||
                            (prev >= 0 && (r = seq_push(ps, &ps->rules[id].alts[0],
                                                         (pelem) { .type = E_REF, .a = (uint32_t) prev })) < 0))
                                return r;
                        prev = id;
                }
                if ((r = seq_push(ps, &ps->rules[rule].alts[alt_index], (pelem) { .type = E_REF, .a = (uint32_t) prev })) < 0)
                        return r;
        }
        if (max == min)
                return 0;
        /* the optional part: S ::= item S | (no limit); O_k ::= item O_{k-1} | */
        int tail = -1;
        long k = max < 0 ? 1 : max - min;
        for (long i = 0; i < k; i++) {
                int id = rule_generated(ps, rule, line_of(ps, at));
                if (id < 0)
                        return id;
                pseq *a = rule_new_alt(ps, (uint32_t) id);
                if (!a || !rule_new_alt(ps, (uint32_t) id))
                        return axp_errorf(ps->err, -ENOMEM, "out of memory");
                if (max >= 0)
                        ps->rules[id].rep_k = (uint32_t) i + 1;
                a = &ps->rules[id].alts[0];
                if ((r = seq_push(ps, a, item)) < 0)
                        return r;
                int next = max < 0 ? id : tail;
                if (next >= 0 && (r = seq_push(ps, &ps->rules[id].alts[0],
                                                (pelem) { .type = E_REF, .a = (uint32_t) next })) < 0)
                        return r;
                tail = id;
        }
        return seq_push(ps, &ps->rules[rule].alts[alt_index], (pelem) { .type = E_REF, .a = (uint32_t) tail });
}

static int parse_number(parser *ps, long *ret) {
        const char *at = ps->p;
        long v = 0;
        if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
                return FAIL(ps, at, "expected a number in a repetition");
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
                v = v * 10 + (*ps->p++ - '0');
                if (v > 1000000)
                        return FAIL(ps, at, "repetitions beyond %d are not supported", MAX_REPEAT);
        }
        *ret = v;
        return 0;
}

static int parse_sequence(parser *ps, uint32_t rule, size_t alt_index, bool nested) {
        size_t last = SIZE_MAX;
        int r;
#define SEQ (&ps->rules[rule].alts[alt_index])
        for (;;) {
                skip_space(ps, nested);
                if (ps->p >= ps->end)
                        return 0;
                const char *at = ps->p;
                char c = *ps->p;
                if (c == '"') {
                        ps->p++;
                        last = SEQ->n;
                        while (ps->p < ps->end && *ps->p != '"') {
                                uint32_t cp;
                                if ((r = parse_char(ps, &cp)) < 0)
                                        return r;
                                uint32_t ri = (uint32_t) ps->n_ranges / 2;
                                if ((r = add_range(ps, cp, cp)) < 0 ||
                                    (r = seq_push(ps, SEQ, (pelem) { .type = E_CHARS, .a = ri, .n = 1 })) < 0)
                                        return r;
                        }
                        if (ps->p >= ps->end)
                                return FAIL(ps, at, "a string literal without its closing '\"'");
                        ps->p++;
                        if (SEQ->n == last) /* "" is the empty sequence */
                                last = SIZE_MAX;
                } else if (c == '[') {
                        ps->p++;
                        bool neg = ps->p < ps->end && *ps->p == '^';
                        ps->p += neg;
                        uint32_t ri = (uint32_t) ps->n_ranges / 2, n = 0;
                        while (ps->p < ps->end && *ps->p != ']') {
                                uint32_t lo, hi;
                                if ((r = parse_char(ps, &lo)) < 0)
                                        return r;
                                hi = lo;
                                if (ps->p + 1 < ps->end && *ps->p == '-' && ps->p[1] != ']') {
                                        ps->p++;
                                        if ((r = parse_char(ps, &hi)) < 0)
                                                return r;
                                        if (hi < lo)
                                                return FAIL(ps, at, "a character range that ends before it starts");
                                }
                                if ((r = add_range(ps, lo, hi)) < 0)
                                        return r;
                                n++;
                        }
                        if (ps->p >= ps->end)
                                return FAIL(ps, at, "a character class without its closing ']'");
                        if (n == 0 && !neg)
                                return FAIL(ps, at, "an empty character class '[]', which matches nothing");
                        ps->p++;
                        last = SEQ->n;
                        if ((r = seq_push(ps, SEQ, (pelem) { .type = E_CHARS, .neg = neg, .a = ri, .n = n })) < 0)
                                return r;
                } else if (c == '.') {
                        ps->p++;
                        uint32_t ri = (uint32_t) ps->n_ranges / 2;
                        last = SEQ->n;
                        if ((r = add_range(ps, 0, 0x10FFFF)) < 0 ||
                            (r = seq_push(ps, SEQ, (pelem) { .type = E_CHARS, .a = ri, .n = 1 })) < 0)
                                return r;
                } else if (is_name_char(c)) {
                        const char *s = ps->p;
                        while (ps->p < ps->end && is_name_char(*ps->p))
                                ps->p++;
                        const char *save = ps->p;
                        skip_space(ps, false);
                        if (ps->end - ps->p >= 3 && memcmp(ps->p, "::=", 3) == 0)
                                return FAIL(ps, at, "a new rule must start on a line of its own");
                        ps->p = save;
                        int id = rule_id(ps, s, (size_t) (ps->p - s), line_of(ps, s));
                        if (id < 0)
                                return id;
                        last = SEQ->n;
                        if ((r = seq_push(ps, SEQ, (pelem) { .type = E_REF, .a = (uint32_t) id })) < 0)
                                return r;
                } else if (c == '(') {
                        if (ps->depth >= AXP_GRAMMAR_MAX_NESTING)
                                return FAIL(ps, at, "groups nested more than %d deep", AXP_GRAMMAR_MAX_NESTING);
                        ps->p++;
                        int id = rule_generated(ps, rule, line_of(ps, at));
                        if (id < 0)
                                return id;
                        ps->depth++;
                        r = parse_alternates(ps, (uint32_t) id, true);
                        ps->depth--;
                        if (r < 0)
                                return r;
                        skip_space(ps, true);
                        if (ps->p >= ps->end || *ps->p != ')')
                                return FAIL(ps, at, "a '(' without its ')'");
                        ps->p++;
                        last = SEQ->n;
                        if ((r = seq_push(ps, SEQ, (pelem) { .type = E_REF, .a = (uint32_t) id })) < 0)
                                return r;
                } else if (c == '*' || c == '+' || c == '?' || c == '{') {
                        long min = 0, max = -1;
                        ps->p++;
                        if (c == '+')
                                min = 1;
                        else if (c == '?')
                                max = 1;
                        else if (c == '{') {
                                skip_space(ps, false);
                                if ((r = parse_number(ps, &min)) < 0)
                                        return r;
                                skip_space(ps, false);
                                if (ps->p < ps->end && *ps->p == ',') {
                                        ps->p++;
                                        skip_space(ps, false);
                                        if (ps->p < ps->end && *ps->p != '}' && (r = parse_number(ps, &max)) < 0)
                                                return r;
                                } else
                                        max = min;
                                skip_space(ps, false);
                                if (ps->p >= ps->end || *ps->p != '}')
                                        return FAIL(ps, at, "a '{' repetition without its '}'");
                                ps->p++;
                        }
                        if (last == SIZE_MAX)
                                return FAIL(ps, at, "'%c' with nothing before it to repeat", c);
                        if ((r = repeat(ps, rule, SEQ, last, min, max, at)) < 0)
                                return r;
                        last = SIZE_MAX;
                } else
                        return 0;
        }
#undef SEQ
}

static int parse_alternates(parser *ps, uint32_t rule, bool nested) {
        for (;;) {
                if (!rule_new_alt(ps, rule))
                        return axp_errorf(ps->err, -ENOMEM, "out of memory");
                int r = parse_sequence(ps, rule, ps->rules[rule].n_alts - 1, nested);
                if (r < 0)
                        return r;
                /* a line that starts with '|' continues the rule */
                const char *save = ps->p;
                skip_space(ps, true);
                if (ps->p < ps->end && *ps->p == '|') {
                        ps->p++;
                        skip_space(ps, true);
                        continue;
                }
                ps->p = save;
                return 0;
        }
}

static int parse_rules(parser *ps) {
        for (;;) {
                skip_space(ps, true);
                if (ps->p >= ps->end)
                        return 0;
                const char *at = ps->p, *s = ps->p;
                while (ps->p < ps->end && is_name_char(*ps->p))
                        ps->p++;
                if (ps->p == s)
                        return FAIL(ps, at, "expected a rule name, found '%c'", *at);
                size_t len = (size_t) (ps->p - s);
                skip_space(ps, false);
                if (ps->end - ps->p < 3 || memcmp(ps->p, "::=", 3) != 0)
                        return FAIL(ps, at, "expected '::=' after the rule name '%.*s'", (int) MIN(len, (size_t) 64), s);
                ps->p += 3;
                skip_space(ps, true);
                int id = rule_id(ps, s, len, line_of(ps, s));
                if (id < 0)
                        return id;
                if (ps->rules[id].defined)
                        return FAIL(ps, at, "the rule '%s' is defined twice", ps->rules[id].name);
                ps->rules[id].defined = true;
                ps->rules[id].line = line_of(ps, s);
                int r = parse_alternates(ps, (uint32_t) id, false);
                if (r < 0)
                        return r;
                skip_space(ps, false);
                if (ps->p < ps->end && *ps->p != '\n')
                        return FAIL(ps, ps->p, "unexpected '%c'", *ps->p);
        }
}

static void parser_done(parser *ps) {
        for (size_t i = 0; i < ps->n_rules; i++) {
                for (size_t j = 0; j < ps->rules[i].n_alts; j++)
                        free(ps->rules[i].alts[j].v);
                free(ps->rules[i].alts);
                free(ps->rules[i].name);
        }
        free(ps->rules);
        free(ps->ranges);
}

/* Checks -------------------------------------------------------------------------------------- */

static size_t utf8_len(uint32_t cp) {
        return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
}

static size_t add_len(size_t a, size_t b) {
        return a == INF_LEN || b == INF_LEN || a + b > INF_LEN / 2 ? INF_LEN : a + b;
}

/* The fewest bytes a character class's match takes: 1 where an ASCII character matches, else
 * the UTF-8 length of the smallest code point it takes (INF_LEN if none; the surrogates are
 * none, and a positive class's ranges never start or end in them, as the parser refuses). */
static size_t chars_min_len(const axp_grammar *g, const gelem *e) {
        if (e->ascii[0] | e->ascii[1])
                return 1;
        uint32_t c = 128;
        if (!e->neg) {
                size_t m = INF_LEN;
                for (uint32_t i = 0; i < e->n_ranges; i++) {
                        uint32_t lo = g->ranges[2 * (e->range + i)], hi = g->ranges[2 * (e->range + i) + 1];
                        if (hi >= c)
                                m = MIN(m, utf8_len(MAX(lo, c)));
                }
                return m;
        }
        for (bool moved = true; moved && c <= 0x10FFFF;) {
                moved = false;
                if (c >= 0xD800 && c <= 0xDFFF) /* no character: the class's range skips past them */
                        c = 0xE000;
                for (uint32_t i = 0; i < e->n_ranges; i++) {
                        uint32_t lo = g->ranges[2 * (e->range + i)], hi = g->ranges[2 * (e->range + i) + 1];
                        if (lo <= c && c <= hi) {
                                c = hi + 1;
                                moved = true;
                        }
                }
        }
        return c > 0x10FFFF ? INF_LEN : utf8_len(c);
}

/* Left recursion: a rule reachable from itself without consuming anything. */
static int left_dfs(const axp_grammar *g, const size_t *min, uint32_t r, uint8_t *color, uint32_t *path,
                    size_t depth, axp_error *err) {
        color[r] = 1;
        path[depth] = r;
        for (uint32_t a = 0; a < g->rule_n_alts[r]; a++)
                for (const gelem *e = &g->elems[g->alts[g->rule_alt[r] + a]]; e->type == E_REF; e++) {
                        uint32_t s = e->rule;
                        if (color[s] == 1) {
                                char chain[200] = "";
                                size_t k = 0;
                                while (k < depth && path[k] != s)
                                        k++;
                                for (size_t i = k; i <= depth; i++) {
                                        size_t l = strlen(chain);
                                        snprintf(chain + l, sizeof(chain) - l, "%s -> ", g->names[path[i]]);
                                }
                                size_t l = strlen(chain);
                                snprintf(chain + l, sizeof(chain) - l, "%s", g->names[s]);
                                return axp_errorf(err, -EINVAL,
                                                  "grammar: the rule '%s' is left-recursive (%s); write it "
                                                  "with repetition instead",
                                                  g->names[s], chain);
                        }
                        if (color[s] == 0) {
                                int r2 = left_dfs(g, min, s, color, path, depth + 1, err);
                                if (r2 < 0)
                                        return r2;
                        }
                        if (min[s] != 0)
                                break;
                }
        color[r] = 2;
        return 0;
}

static int check(axp_grammar *g, axp_error *err) {
        size_t n = g->n_rules;
        _cleanup_free_ size_t *min = calloc(n, sizeof(size_t));
        _cleanup_free_ uint8_t *color = calloc(n, 1);
        _cleanup_free_ uint32_t *path = malloc(n * sizeof(uint32_t));
        if (!min || !color || !path)
                return axp_errorf(err, -ENOMEM, "out of memory");
        for (size_t i = 0; i < n; i++)
                min[i] = INF_LEN;
        for (bool changed = true; changed;) {
                changed = false;
                for (size_t r = 0; r < n; r++)
                        for (uint32_t a = 0; a < g->rule_n_alts[r]; a++) {
                                size_t len = 0;
                                for (const gelem *e = &g->elems[g->alts[g->rule_alt[r] + a]]; e->type != E_END; e++)
                                        len = add_len(len, e->type == E_REF ? min[e->rule] : chars_min_len(g, e));
                                if (len < min[r]) {
                                        min[r] = len;
                                        changed = true;
                                }
                        }
        }
        for (size_t r = 0; r < n; r++)
                if (color[r] == 0) {
                        int k = left_dfs(g, min, (uint32_t) r, color, path, 0, err);
                        if (k < 0)
                                return k;
                }
        if (min[g->root] == INF_LEN)
                return axp_errorf(err, -EINVAL, "grammar: no text can ever complete the rule 'root' "
                                                "(every way through it recurses without end)");
        g->min_bytes = min[g->root];
        /* a chain whose item may match nothing may pass several counts without a byte: no
         * canonical count for it */
        for (size_t r = 0; r < n; r++) {
                const gelem *item = &g->elems[g->alts[g->rule_alt[r]]];
                if (g->rep_k[r] && item->type == E_REF && min[item->rule] == 0)
                        g->rep_k[r] = 0;
        }
        return 0;
}

void axp_grammar_free(axp_grammar *g) {
        if (!g)
                return;
        for (size_t i = 0; i < g->n_rules; i++)
                free(g->names[i]);
        free(g->names);
        free(g->elems);
        free(g->ranges);
        free(g->alts);
        free(g->rule_alt);
        free(g->rule_n_alts);
        free(g->elem_rule);
        free(g->rep_k);
        free(g);
}

size_t axp_grammar_min_bytes(const axp_grammar *g) {
        return g->min_bytes;
}

static void chars_prepare(axp_grammar *g, gelem *e) {
        for (uint32_t c = 0; c < 128; c++) {
                bool in = false;
                for (uint32_t i = 0; i < e->n_ranges && !in; i++)
                        in = g->ranges[2 * (e->range + i)] <= c && c <= g->ranges[2 * (e->range + i) + 1];
                if (in != (bool) e->neg)
                        e->ascii[c >> 6] |= 1ull << (c & 63);
        }
}

int axp_grammar_parse(const char *text, size_t len, axp_grammar **ret, axp_error *err) {
        if (len > AXP_GRAMMAR_MAX_BYTES)
                return axp_errorf(err, -EINVAL, "the grammar is %zu bytes; at most %d are accepted", len,
                                  AXP_GRAMMAR_MAX_BYTES);
        parser ps = { .text = text, .p = text, .end = text + len, .err = err };
        int r = parse_rules(&ps);
        if (r < 0)
                goto out;
        int root = -1;
        for (size_t i = 0; i < ps.n_rules; i++) {
                if (!ps.rules[i].defined) {
                        r = axp_errorf(err, -EINVAL, "grammar, line %d: the rule '%s' is used but not defined",
                                       ps.rules[i].line, ps.rules[i].name);
                        goto out;
                }
                if (strcmp(ps.rules[i].name, "root") == 0)
                        root = (int) i;
        }
        if (root < 0) {
                r = axp_errorf(err, -EINVAL, "grammar: there is no rule 'root' to start from");
                goto out;
        }

        axp_grammar *g = calloc(1, sizeof(*g));
        if (!g) {
                r = axp_errorf(err, -ENOMEM, "out of memory");
                goto out;
        }
        size_t n_alts = 0;
        for (size_t i = 0; i < ps.n_rules; i++)
                n_alts += ps.rules[i].n_alts;
        g->n_rules = ps.n_rules;
        g->root = (uint32_t) root;
        g->n_elems = ps.n_elems + n_alts;
        g->elems = calloc(g->n_elems, sizeof(gelem));
        g->alts = malloc(MAX(n_alts, (size_t) 1) * sizeof(uint32_t));
        g->rule_alt = malloc(ps.n_rules * sizeof(uint32_t));
        g->rule_n_alts = malloc(ps.n_rules * sizeof(uint32_t));
        g->names = calloc(ps.n_rules, sizeof(char *));
        g->elem_rule = malloc(g->n_elems * sizeof(uint32_t));
        g->rep_k = calloc(ps.n_rules, sizeof(uint32_t));
        g->ranges = ps.ranges;
        g->n_ranges = ps.n_ranges / 2;
        ps.ranges = NULL;
        if (!g->elems || !g->alts || !g->rule_alt || !g->rule_n_alts || !g->names || !g->elem_rule || !g->rep_k) {
                axp_grammar_free(g);
                r = axp_errorf(err, -ENOMEM, "out of memory");
                goto out;
        }
        size_t e = 0, a = 0;
        for (size_t i = 0; i < ps.n_rules; i++) {
                prule *pr = &ps.rules[i];
                g->names[i] = pr->name;
                pr->name = NULL;
                g->rule_alt[i] = (uint32_t) a;
                g->rule_n_alts[i] = (uint32_t) pr->n_alts;
                g->rep_k[i] = pr->rep_k;
                for (size_t j = 0; j < pr->n_alts; j++) {
                        g->alts[a++] = (uint32_t) e;
                        for (size_t k = 0; k < pr->alts[j].n; k++) {
                                pelem *p = &pr->alts[j].v[k];
                                g->elem_rule[e] = (uint32_t) i;
                                gelem *ge = &g->elems[e++];
                                ge->type = p->type;
                                ge->neg = p->neg;
                                if (p->type == E_REF)
                                        ge->rule = p->a;
                                else {
                                        ge->range = p->a;
                                        ge->n_ranges = p->n;
                                        chars_prepare(g, ge);
                                }
                        }
                        g->elem_rule[e] = (uint32_t) i;
                        g->elems[e++].type = E_END;
                }
        }
        g->n_elems = e;
        r = check(g, err);
        if (r < 0)
                axp_grammar_free(g);
        else
                *ret = g;
out:
        parser_done(&ps);
        return r;
}

/* The vocabulary's trie --------------------------------------------------------------------- */

typedef struct tnode {
        uint8_t byte;
        uint16_t depth;  /* 1 for a first byte */
        uint32_t end;    /* one past the subtree's last node (preorder) */
        uint32_t tok, n_tok; /* tokens whose bytes end here: toks[tok .. tok + n_tok) */
} tnode;

struct axp_vocab_trie {
        int n_vocab;
        tnode *nodes[2];    /* preorder: [0] tokens of at most SHORT_PIECE bytes, [1] the longer */
        uint32_t n_nodes[2];
        int32_t *toks;
        uint32_t *piece_off; /* n_vocab + 1 */
        char *pieces;
        uint8_t *eog;
        int32_t *eog_ids;
        size_t n_eog;
        size_t max_piece;
};

void axp_vocab_trie_free(axp_vocab_trie *v) {
        if (!v)
                return;
        free(v->nodes[0]);
        free(v->nodes[1]);
        free(v->toks);
        free(v->piece_off);
        free(v->pieces);
        free(v->eog);
        free(v->eog_ids);
        free(v);
}

size_t axp_vocab_trie_max_piece(const axp_vocab_trie *v) {
        return v->max_piece;
}

static int piece_cmp(const void *a, const void *b, void *ud) {
        const axp_vocab_trie *v = ud;
        int32_t x = *(const int32_t *) a, y = *(const int32_t *) b;
        uint32_t lx = v->piece_off[x + 1] - v->piece_off[x], ly = v->piece_off[y + 1] - v->piece_off[y];
        int c = memcmp(v->pieces + v->piece_off[x], v->pieces + v->piece_off[y], MIN(lx, ly));
        if (c)
                return c;
        return lx != ly ? (lx < ly ? -1 : 1) : (x < y ? -1 : x > y);
}

int axp_vocab_trie_new(const axp_tokenizer *t, axp_vocab_trie **ret, axp_error *err) {
        int n = axp_tokenizer_n_vocab(t);
        axp_vocab_trie *v = calloc(1, sizeof(*v));
        if (!v)
                return axp_errorf(err, -ENOMEM, "out of memory");
        v->n_vocab = n;
        v->piece_off = malloc((size_t) (n + 1) * sizeof(uint32_t));
        v->eog = calloc((size_t) n, 1);
        v->eog_ids = malloc((size_t) n * sizeof(int32_t));
        v->toks = malloc((size_t) n * sizeof(int32_t));
        size_t cap = (size_t) n * 8 + 64, len = 0;
        v->pieces = malloc(cap);
        if (!v->piece_off || !v->eog || !v->eog_ids || !v->toks || !v->pieces)
                goto oom;
        for (int i = 0; i < n; i++) {
                v->piece_off[i] = (uint32_t) len;
                if (axp_tokenizer_is_eog(t, i)) {
                        v->eog[i] = 1;
                        v->eog_ids[v->n_eog++] = i;
                        continue;
                }
                for (;;) {
                        int k = axp_token_to_piece(t, i, false, v->pieces + len, (int) MIN(cap - len, (size_t) 1 << 20));
                        if (k >= 0) {
                                len += (size_t) k;
                                break;
                        }
                        char *p = realloc(v->pieces, cap * 2 + (size_t) -k);
                        if (!p)
                                goto oom;
                        v->pieces = p;
                        cap = cap * 2 + (size_t) -k;
                }
                v->max_piece = MAX(v->max_piece, len - v->piece_off[i]);
        }
        v->piece_off[n] = (uint32_t) len;

        /* tokens with bytes, sorted by them; the trie in preorder */
        size_t m = 0;
        for (int i = 0; i < n; i++)
                if (v->piece_off[i + 1] > v->piece_off[i])
                        v->toks[m++] = i;
        qsort_r(v->toks, m, sizeof(int32_t), piece_cmp, v);
        uint32_t *path = malloc((v->max_piece + 1) * sizeof(uint32_t));
        if (!path)
                goto oom;
        /* two tries: the tokens of at most SHORT_PIECE bytes, whose mask a matcher remembers,
         * and the longer ones */
        for (int t = 0; t < 2; t++) {
                v->nodes[t] = malloc((len + 1) * sizeof(tnode));
                if (!v->nodes[t]) {
                        free(path);
                        goto oom;
                }
                size_t depth = 0;
                const char *prev = NULL;
                size_t prev_len = 0;
                for (size_t k = 0; k < m; k++) {
                        int32_t id = v->toks[k];
                        const char *p = v->pieces + v->piece_off[id];
                        size_t l = v->piece_off[id + 1] - v->piece_off[id], common = 0;
                        if ((l > SHORT_PIECE) != (t == 1))
                                continue;
                        while (prev && common < l && common < prev_len && p[common] == prev[common])
                                common++;
                        while (depth > common)
                                v->nodes[t][path[--depth]].end = v->n_nodes[t];
                        for (; depth < l; depth++) {
                                path[depth] = v->n_nodes[t];
                                v->nodes[t][v->n_nodes[t]++] = (tnode) { .byte = (uint8_t) p[depth],
                                                                         .depth = (uint16_t) (depth + 1),
                                                                         .tok = (uint32_t) k };
                        }
                        tnode *last = &v->nodes[t][path[l - 1]];
                        if (last->n_tok == 0)
                                last->tok = (uint32_t) k;
                        last->n_tok++;
                        prev = p;
                        prev_len = l;
                }
                while (depth > 0)
                        v->nodes[t][path[--depth]].end = v->n_nodes[t];
        }
        free(path);
        *ret = v;
        return 0;
oom:
        axp_vocab_trie_free(v);
        return axp_errorf(err, -ENOMEM, "out of memory");
}

/* The matcher -------------------------------------------------------------------------------- */

typedef struct frame frame;
struct frame {
        const gelem *pos;  /* the next element to match */
        frame *parent;     /* where to go on after pos's alternative ends; NULL: the end */
        frame *canon[2];   /* the stack as each trie's mask sees it (canon()); NULL until known */
        uint32_t emark, amark;
        int32_t memo_n;    /* the stacks after one character: memo[memo_off..], -1 until known,
                            * MEMO_OVER where they are more than a step may take (grammar.h) */
        uint32_t memo_off;
};

#define MEMO_OVER (-2)

typedef struct chunk {
        struct chunk *next;
        size_t n;
        frame f[1024];
} chunk;

struct axp_matcher {
        const axp_grammar *g;
        const axp_vocab_trie *v;
        chunk *chunks;
        frame **table; /* interning: open addressing */
        size_t table_cap, n_frames;
        frame **memo;
        size_t n_memo, cap_memo;
        frame **dfs; /* expand's stack of frames to visit */
        size_t cap_dfs;
        uint32_t egen, agen;
        /* the current state: a set of stacks (NULL: complete) and a partial character */
        frame **cur;
        size_t n_cur, cap_cur;
        uint32_t cp, rem, lo; /* lo: the least code point the partial character's length allows */
        /* scratch for stepping: sets one after another */
        frame **buf;
        size_t cap_buf;
        struct wstate { size_t off, n, top; uint32_t cp, rem, lo; } *st;
        /* the masks of the short tokens by canonical state, least recently used replaced */
        struct mask_entry {
                uint64_t hash, used;
                frame **key;
                size_t n_key;
                int t;
                uint32_t cp, rem, lo;
                uint64_t *bits;
                int count;
        } cache[MASK_CACHE];
        size_t n_cache;
        uint64_t clock;
        frame **key;
        size_t cap_key;
        bool oom;
        bool null_seen;
        bool overrun; /* a step went past the bounds (grammar.h) and was refused */
};

static size_t hash_frame(const gelem *pos, const frame *parent) {
        uint64_t h = (uint64_t) (uintptr_t) pos * 0x9E3779B97F4A7C15ull ^ (uint64_t) (uintptr_t) parent * 0xC2B2AE3D27D4EB4Full;
        return (size_t) (h ^ (h >> 29));
}

static frame *intern(axp_matcher *m, const gelem *pos, frame *parent) {
        if (m->n_frames * 2 >= m->table_cap) {
                size_t cap = m->table_cap ? m->table_cap * 2 : 1024;
                frame **t = calloc(cap, sizeof(frame *));
                if (!t) {
                        m->oom = true;
                        return NULL;
                }
                for (size_t i = 0; i < m->table_cap; i++)
                        if (m->table[i]) {
                                size_t h = hash_frame(m->table[i]->pos, m->table[i]->parent) & (cap - 1);
                                while (t[h])
                                        h = (h + 1) & (cap - 1);
                                t[h] = m->table[i];
                        }
                free(m->table);
                m->table = t;
                m->table_cap = cap;
        }
        size_t h = hash_frame(pos, parent) & (m->table_cap - 1);
        for (; m->table[h]; h = (h + 1) & (m->table_cap - 1))
                if (m->table[h]->pos == pos && m->table[h]->parent == parent)
                        return m->table[h];
        if (!m->chunks || m->chunks->n == ELEMENTSOF(m->chunks->f)) {
                chunk *c = malloc(sizeof(chunk));
                if (!c) {
                        m->oom = true;
                        return NULL;
                }
                c->next = m->chunks;
                c->n = 0;
                m->chunks = c;
        }
        frame *f = &m->chunks->f[m->chunks->n++];
        *f = (frame) { .pos = pos, .parent = parent, .memo_n = -1 };
        m->table[h] = f;
        m->n_frames++;
        return f;
}

static void memo_push(axp_matcher *m, frame *f) {
        if (axp_grow((void **) &m->memo, &m->cap_memo, m->n_memo + 1, sizeof(frame *)) < 0) {
                m->oom = true;
                return;
        }
        m->memo[m->n_memo++] = f;
}

static bool dfs_push(axp_matcher *m, size_t *n, frame *f) {
        if (axp_grow((void **) &m->dfs, &m->cap_dfs, *n + 1, sizeof(frame *)) < 0) {
                m->oom = true;
                return false;
        }
        m->dfs[(*n)++] = f;
        return true;
}

/* Every stack f can be at with a character set on top (or NULL: complete), into m->memo, in the
 * order of a depth-first walk, visiting at most *budget frames (false where that ran out, or
 * on running out of memory). The walk keeps its own stack: as calls, a grammar of nested
 * repetitions of things that may be empty ((("a"? "b"?){273})...{273}) went tens of thousands
 * of calls deep and overflowed the thread's stack (a fuzz input); unbounded, one of three such
 * levels took 11 s and 4.7 GB to find its start's 10 million places. */
static bool expand(axp_matcher *m, frame *root, size_t *budget) {
        size_t n = 0;
        if (!dfs_push(m, &n, root))
                return false;
        while (n > 0) {
                if (*budget == 0)
                        return false;
                (*budget)--;
                frame *f = m->dfs[--n];
                if (!f) {
                        if (!m->null_seen) {
                                m->null_seen = true;
                                memo_push(m, NULL);
                        }
                        continue;
                }
                if (f->emark == m->egen)
                        continue;
                f->emark = m->egen;
                switch (f->pos->type) {
                case E_END:
                        if (!dfs_push(m, &n, f->parent))
                                return false;
                        break;
                case E_CHARS:
                        memo_push(m, f);
                        break;
                case E_REF: {
                        /* a reference last in its alternative goes on where the alternative
                         * would: the stack does not grow with right recursion (X_k ::= item
                         * X_{k-1}) */
                        frame *cont = f->pos[1].type == E_END ? f->parent : intern(m, f->pos + 1, f->parent);
                        if (m->oom)
                                return false;
                        uint32_t r = f->pos->rule;
                        /* pushed last to first, so that they are walked first to last */
                        for (uint32_t a = m->g->rule_n_alts[r]; a-- > 0;) {
                                frame *s = intern(m, &m->g->elems[m->g->alts[m->g->rule_alt[r] + a]], cont);
                                if (!s || !dfs_push(m, &n, s))
                                        return false;
                        }
                        break;
                }
                }
        }
        return !m->oom;
}

static void memo_of(axp_matcher *m, frame *f) {
        if (f->memo_n != -1)
                return;
        m->egen++;
        m->null_seen = false;
        size_t off = m->n_memo, budget = AXP_GRAMMAR_MAX_STEP;
        frame *next = intern(m, f->pos + 1, f->parent);
        if (next && !expand(m, next, &budget) && !m->oom) {
                m->n_memo = off;
                f->memo_n = MEMO_OVER;
                return;
        }
        f->memo_off = (uint32_t) off;
        f->memo_n = (int32_t) (m->n_memo - off);
}

static inline bool chars_match(const axp_grammar *g, const gelem *e, uint32_t cp) {
        if (cp < 128)
                return e->ascii[cp >> 6] >> (cp & 63) & 1;
        bool in = false;
        for (uint32_t i = 0; i < e->n_ranges && !in; i++)
                in = g->ranges[2 * (e->range + i)] <= cp && cp <= g->ranges[2 * (e->range + i) + 1];
        return in != (bool) e->neg;
}

/* May some character in [lo, hi] match? */
static bool chars_meet(const axp_grammar *g, const gelem *e, uint32_t lo, uint32_t hi) {
        for (uint32_t i = 0; i < e->n_ranges; i++) {
                uint32_t a = g->ranges[2 * (e->range + i)], b = g->ranges[2 * (e->range + i) + 1];
                if (!e->neg && a <= hi && b >= lo)
                        return true;
                if (e->neg && a <= lo && b >= hi)
                        return false;
        }
        return e->neg;
}

static bool ensure_buf(axp_matcher *m, size_t need) {
        if (axp_grow((void **) &m->buf, &m->cap_buf, need, sizeof(frame *)) < 0) {
                m->oom = true;
                return false;
        }
        return true;
}

/* The stacks of buf[off..off+n) after character cp, appended at *top; returns how many (0
 * also where the step would exceed the matcher's bounds, grammar.h). */
static size_t advance(axp_matcher *m, size_t off, size_t n, uint32_t cp, size_t *top) {
        size_t start = *top, work = 0;
        bool null_added = false;
        m->agen++;
        for (size_t i = 0; i < n; i++) {
                frame *f = m->buf[off + i];
                if (!f || !chars_match(m->g, f->pos, cp))
                        continue;
                memo_of(m, f);
                if (f->memo_n == MEMO_OVER || (work += (size_t) f->memo_n) > AXP_GRAMMAR_MAX_STEP) {
                        m->overrun = true;
                        *top = start;
                        return 0;
                }
                if (m->oom || !ensure_buf(m, *top + (size_t) f->memo_n))
                        return 0;
                for (int32_t k = 0; k < f->memo_n; k++) {
                        frame *s = m->memo[f->memo_off + (uint32_t) k];
                        if (!s) {
                                if (null_added)
                                        continue;
                                null_added = true;
                        } else if (s->amark == m->agen)
                                continue;
                        else
                                s->amark = m->agen;
                        m->buf[(*top)++] = s;
                }
        }
        if (*top - start > AXP_GRAMMAR_MAX_STACKS) {
                m->overrun = true;
                *top = start;
        }
        return *top - start;
}

/* Whether some character the partial one can still become (its code points lo..hi, less the
 * surrogates, which no UTF-8 text holds) is one a stack may take next. */
static bool viable_partial(axp_matcher *m, size_t off, size_t n, uint32_t cp, uint32_t rem, uint32_t least) {
        uint32_t lo = MAX(cp << (6 * rem), least), hi = MIN((cp << (6 * rem)) | ((1u << (6 * rem)) - 1), 0x10FFFFu);
        /* the code points either side of the surrogates (0xD800..0xDFFF) */
        uint32_t span[2][2] = { { lo, MIN(hi, 0xD7FFu) }, { MAX(lo, 0xE000u), hi } };
        for (size_t s = 0; s < 2; s++) {
                if (span[s][0] > span[s][1])
                        continue;
                for (size_t i = 0; i < n; i++) {
                        frame *f = m->buf[off + i];
                        if (f && chars_meet(m->g, f->pos, span[s][0], span[s][1]))
                                return true;
                }
        }
        return false;
}

/* One byte from state *in to *out (sets live in m->buf; new ones go at *top). */
static bool step(axp_matcher *m, const struct wstate *in, uint8_t b, struct wstate *out, size_t *top) {
        uint32_t cp, rem, lo = 0;
        if (in->rem > 0) {
                if ((b & 0xC0) != 0x80)
                        return false;
                cp = in->cp << 6 | (b & 0x3F);
                rem = in->rem - 1;
                lo = in->lo;
        } else if (b < 0x80) {
                cp = b;
                rem = 0;
        } else if ((b & 0xE0) == 0xC0 && b >= 0xC2) {
                cp = b & 0x1F;
                rem = 1;
                lo = 0x80;
        } else if ((b & 0xF0) == 0xE0) {
                cp = b & 0x0F;
                rem = 2;
                lo = 0x800;
        } else if ((b & 0xF8) == 0xF0 && b <= 0xF4) {
                cp = b & 0x07;
                rem = 3;
                lo = 0x10000;
        } else
                return false;
        out->cp = cp;
        out->rem = rem;
        out->lo = lo;
        if (rem > 0) {
                out->off = in->off;
                out->n = in->n;
                return viable_partial(m, in->off, in->n, cp, rem, lo);
        }
        if (cp < lo || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000))
                return false;
        out->off = *top;
        out->n = advance(m, in->off, in->n, cp, top);
        out->cp = 0;
        return out->n > 0;
}

static bool load_cur(axp_matcher *m, struct wstate *s, size_t *top) {
        if (!ensure_buf(m, m->n_cur))
                return false;
        memcpy(m->buf, m->cur, m->n_cur * sizeof(frame *));
        *s = (struct wstate) { .off = 0, .n = m->n_cur, .cp = m->cp, .rem = m->rem, .lo = m->lo };
        *top = m->n_cur;
        return true;
}

bool axp_matcher_complete(const axp_matcher *m) {
        if (m->rem)
                return false;
        for (size_t i = 0; i < m->n_cur; i++)
                if (!m->cur[i])
                        return true;
        return false;
}

bool axp_matcher_overrun(const axp_matcher *m) {
        return m->overrun;
}

bool axp_matcher_finished(const axp_matcher *m) {
        return m->rem == 0 && m->n_cur == 1 && !m->cur[0];
}

/* Run token id's bytes from the current state; the final state in *s. */
static bool run_token(axp_matcher *m, int32_t id, struct wstate *s) {
        const axp_vocab_trie *v = m->v;
        if (id < 0 || id >= v->n_vocab)
                return false;
        uint32_t a = v->piece_off[id], b = v->piece_off[id + 1];
        if (a == b)
                return false;
        size_t top;
        if (!load_cur(m, s, &top))
                return false;
        for (uint32_t i = a; i < b; i++) {
                struct wstate next;
                if (!step(m, s, (uint8_t) v->pieces[i], &next, &top))
                        return false;
                *s = next;
        }
        return true;
}

bool axp_matcher_allows(axp_matcher *m, int32_t id) {
        if (id >= 0 && id < m->v->n_vocab && m->v->eog[id])
                return axp_matcher_complete(m);
        struct wstate s;
        return run_token(m, id, &s);
}

bool axp_matcher_accept(axp_matcher *m, int32_t id) {
        struct wstate s;
        if (id >= 0 && id < m->v->n_vocab && m->v->eog[id]) {
                m->cur[0] = NULL;
                m->n_cur = 1;
                return true;
        }
        if (!run_token(m, id, &s))
                return false;
        if (axp_grow((void **) &m->cur, &m->cap_cur, s.n, sizeof(frame *)) < 0) {
                m->oom = true;
                return false;
        }
        memcpy(m->cur, m->buf + s.off, s.n * sizeof(frame *));
        m->n_cur = s.n;
        m->cp = s.cp;
        m->rem = s.rem;
        m->lo = s.lo;
        return true;
}

/* The longest token of trie t. */
static size_t trie_max_piece(const axp_vocab_trie *v, int t) {
        return t == 0 ? MIN(v->max_piece, (size_t) SHORT_PIECE) : v->max_piece;
}

/* The stack f as trie t's mask sees it, B the trie's longest token: a frame in X_k of a bounded
 * repetition's chain with k > B + 1 moved to the same place in X_{B+1}. Each X_j is entered
 * only after the item before it consumed at least a byte, so within B bytes X_k reaches X_{k-B}
 * at most, never X_1's end: the two stacks accept the same token strings of up to B bytes, and
 * the places of a long bounded string farther than B from its end have one canonical state. */
static frame *canon(axp_matcher *m, frame *f, int t) {
        if (!f || f->canon[t])
                return f ? f->canon[t] : NULL;
        const axp_grammar *g = m->g;
        frame *parent = canon(m, f->parent, t);
        const gelem *pos = f->pos;
        uint32_t r = g->elem_rule[pos - g->elems], k = g->rep_k[r], b = (uint32_t) trie_max_piece(m->v, t) + 1;
        if (k > b) {
                uint32_t to = r - (k - b);
                pos = &g->elems[g->alts[g->rule_alt[to]]] + (pos - &g->elems[g->alts[g->rule_alt[r]]]);
        }
        frame *c = pos == f->pos && parent == f->parent ? f : intern(m, pos, parent);
        if (m->oom)
                return NULL;
        f->canon[t] = c;
        return c;
}

static int ptr_cmp(const void *a, const void *b) {
        uintptr_t x = (uintptr_t) *(frame *const *) a, y = (uintptr_t) *(frame *const *) b;
        return x < y ? -1 : x > y;
}

static bool load_set(axp_matcher *m, frame *const *set, size_t n, uint32_t cp, uint32_t rem, uint32_t lo) {
        if (!ensure_buf(m, n))
                return false;
        memcpy(m->buf, set, n * sizeof(frame *));
        m->st[0] = (struct wstate) { .off = 0, .n = n, .top = n, .cp = cp, .rem = rem, .lo = lo };
        return true;
}

/* Walk trie t from the state in m->st[0]: allowed (and bits) for each token that may come. */
static int walk(axp_matcher *m, int t, uint8_t *allowed, uint64_t *bits) {
        const axp_vocab_trie *v = m->v;
        const tnode *nodes = v->nodes[t];
        int count = 0;
        for (uint32_t i = 0; i < v->n_nodes[t]; i++) {
                const tnode *nd = &nodes[i];
                struct wstate *parent = &m->st[nd->depth - 1], *s = &m->st[nd->depth];
                size_t top = parent->top;
                if (!step(m, parent, nd->byte, s, &top)) {
                        i = nd->end - 1;
                        continue;
                }
                s->top = top;
                for (uint32_t k = 0; k < nd->n_tok; k++) {
                        int32_t id = v->toks[nd->tok + k];
                        allowed[id] = 1;
                        if (bits)
                                bits[id >> 6] |= 1ull << (id & 63);
                        count++;
                }
        }
        return count;
}

/* Trie t's part of the mask: remembered by canonical state, else walked and remembered. */
static int mask_trie(axp_matcher *m, int t, uint8_t *allowed) {
        const axp_vocab_trie *v = m->v;
        size_t n = 0, words = ((size_t) v->n_vocab + 63) / 64;
        if (axp_grow((void **) &m->key, &m->cap_key, MAX(m->n_cur, (size_t) 1), sizeof(frame *)) < 0) {
                m->oom = true;
                return 0;
        }
        for (size_t i = 0; i < m->n_cur; i++)
                m->key[i] = canon(m, m->cur[i], t);
        if (m->oom)
                return 0;
        qsort(m->key, m->n_cur, sizeof(frame *), ptr_cmp);
        for (size_t i = 0; i < m->n_cur; i++)
                if (n == 0 || m->key[i] != m->key[n - 1])
                        m->key[n++] = m->key[i];
        uint64_t h = 0xcbf29ce484222325ull ^ ((uint64_t) t << 62 ^ (uint64_t) m->cp << 40 ^ (uint64_t) m->rem << 32 ^ m->lo);
        for (size_t i = 0; i < n; i++)
                h = (h ^ (uint64_t) (uintptr_t) m->key[i]) * 0x100000001b3ull;
        for (size_t e = 0; e < m->n_cache; e++) {
                struct mask_entry *c = &m->cache[e];
                if (c->hash != h || c->t != t || c->n_key != n || c->cp != m->cp || c->rem != m->rem || c->lo != m->lo ||
                    memcmp(c->key, m->key, n * sizeof(frame *)) != 0)
                        continue;
                c->used = ++m->clock;
                for (size_t w = 0; w < words; w++)
                        for (uint64_t b = c->bits[w]; b; b &= b - 1)
                                allowed[w * 64 + (size_t) __builtin_ctzll(b)] = 1;
                return c->count;
        }
        /* a new entry, or the least recently used one again */
        struct mask_entry *c = NULL;
        if (m->n_cache < MASK_CACHE) {
                struct mask_entry fresh = { .n_key = SIZE_MAX, .bits = malloc(words * sizeof(uint64_t)) };
                if (fresh.bits)
                        m->cache[m->n_cache++] = fresh, c = &m->cache[m->n_cache - 1];
        } else {
                c = &m->cache[0];
                for (size_t e = 1; e < m->n_cache; e++)
                        if (m->cache[e].used < c->used)
                                c = &m->cache[e];
        }
        if (c)
                c->n_key = SIZE_MAX; /* matches nothing until walked */
        frame **key = c ? realloc(c->key, MAX(n, (size_t) 1) * sizeof(frame *)) : NULL;
        if (c && key) {
                c->key = key;
                memcpy(key, m->key, n * sizeof(frame *));
                memset(c->bits, 0, words * sizeof(uint64_t));
        }
        if (!load_set(m, m->key, n, m->cp, m->rem, m->lo))
                return 0;
        int count = walk(m, t, allowed, c && key ? c->bits : NULL);
        if (c && key && !m->oom)
                *c = (struct mask_entry) { .hash = h, .used = ++m->clock, .key = key, .n_key = n, .t = t, .cp = m->cp,
                                           .rem = m->rem, .lo = m->lo, .bits = c->bits, .count = count };
        return count;
}

int axp_matcher_mask(axp_matcher *m, uint8_t *allowed) {
        const axp_vocab_trie *v = m->v;
        int count = 0;
        memset(allowed, 0, (size_t) v->n_vocab);
        if (axp_matcher_complete(m))
                for (size_t i = 0; i < v->n_eog; i++) {
                        allowed[v->eog_ids[i]] = 1;
                        count++;
                }
        count += mask_trie(m, 0, allowed);
        count += mask_trie(m, 1, allowed);
        return m->oom ? 0 : count;
}

void axp_matcher_free(axp_matcher *m) {
        if (!m)
                return;
        while (m->chunks) {
                chunk *c = m->chunks;
                m->chunks = c->next;
                free(c);
        }
        for (size_t e = 0; e < m->n_cache; e++) {
                free(m->cache[e].key);
                free(m->cache[e].bits);
        }
        free(m->key);
        free(m->table);
        free(m->memo);
        free(m->dfs);
        free(m->cur);
        free(m->buf);
        free(m->st);
        free(m);
}

int axp_matcher_new(const axp_grammar *g, const axp_vocab_trie *v, axp_matcher **ret, axp_error *err) {
        axp_matcher *m = calloc(1, sizeof(*m));
        if (!m)
                return axp_errorf(err, -ENOMEM, "out of memory");
        m->g = g;
        m->v = v;
        m->st = calloc(v->max_piece + 2, sizeof(*m->st));
        /* the start: rule root's alternatives */
        frame *start = NULL;
        bool over = false; /* the walk of the start ran past its bound */
        if (m->st) {
                m->egen++;
                m->null_seen = false;
                size_t off = m->n_memo, budget = AXP_GRAMMAR_MAX_STEP;
                uint32_t r = g->root;
                for (uint32_t a = 0; a < g->rule_n_alts[r] && !over && !m->oom; a++) {
                        start = intern(m, &g->elems[g->alts[g->rule_alt[r] + a]], NULL);
                        if (start && !expand(m, start, &budget) && !m->oom)
                                over = true;
                }
                size_t n = m->n_memo - off;
                if (!m->oom && axp_grow((void **) &m->cur, &m->cap_cur, MAX(n, (size_t) 1), sizeof(frame *)) == 0) {
                        if (n > 0) /* none where the walk stopped at its bound at once */
                                memcpy(m->cur, m->memo + off, n * sizeof(frame *));
                        m->n_cur = n;
                } else
                        m->oom = true;
        }
        if (!m->st || m->oom) {
                axp_matcher_free(m);
                return axp_errorf(err, -ENOMEM, "out of memory");
        }
        if (over || m->n_cur > AXP_GRAMMAR_MAX_STACKS) {
                char ways[48];
                if (over)
                        snprintf(ways, sizeof(ways), "more than %d ways", AXP_GRAMMAR_MAX_STEP);
                else
                        snprintf(ways, sizeof(ways), "%zu ways", m->n_cur);
                axp_matcher_free(m);
                return axp_errorf(err, -EINVAL,
                                  "the grammar is too ambiguous: its start can be read %s at once, and the engine "
                                  "follows at most %d (a bounded repetition of something that may be empty, such as "
                                  "(\"a\"?){1000}, does this; make the repeated part non-empty)",
                                  ways, AXP_GRAMMAR_MAX_STACKS);
        }
        *ret = m;
        return 0;
}
