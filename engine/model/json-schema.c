/* SPDX-License-Identifier: MIT */
/* JSON Schema to grammar. The JSON written is compact (no white space between tokens), with
 * an object's properties in the schema's order. Supported: type (one or a list), properties,
 * required, additionalProperties (false; other properties are never written anyway), items,
 * minItems, maxItems, enum, const, anyOf, minLength, maxLength, format "date", pattern (the
 * regular-expression subset below), minimum, maximum, exclusiveMinimum and exclusiveMaximum
 * for integers, $ref to a local JSON pointer ("#", "#/$defs/NAME", "#/definitions/NAME", any
 * "#/..."; recursive ones too) with $defs and definitions, and the annotations (title,
 * description, default, examples, $schema, $id, $comment). Anything else is refused by name,
 * so a request never gets output that its schema would reject.
 *
 * pattern: literal characters and escapes (\. \\ \/ \- ... \t \n \r), ".", classes
 * [a-z0-9_] and [^...], \d \w \s \D \W \S, groups (...) and (?:...), alternation |,
 * quantifiers * + ? {n} {n,} {n,m} (lazy forms too: they match the same strings), and ^ and $
 * at the ends (without them the pattern may match anywhere in the string, as JSON Schema
 * says). Refused by name: backreferences, lookaround, named groups, \b and \B, \p{...},
 * and ^ or $ elsewhere. "." and negated classes write only characters that need no escape
 * in JSON, a subset of what they match. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "base/strbuf.h"
#include "grammar.h"

#define MAX_COUNT 1000

typedef struct gen {
        char *out;
        size_t len, cap;
        unsigned n_rules;
        bool oom;
        axp_error *err;
        const json_value *root;         /* what "#" names in a $ref */
        const json_value *refs[256];    /* $ref targets written, and their rules */
        unsigned ref_rules[256];
        size_t n_refs;
} gen;

static void put(gen *g, const char *s) {
        if (axp_strbuf_puts(&g->out, &g->len, &g->cap, s) < 0)
                g->oom = true;
}

static void putf(gen *g, const char *fmt, ...) _printf_(2, 3);
static void putf(gen *g, const char *fmt, ...) {
        char buf[256];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof(buf), fmt, ap);
        va_end(ap);
        put(g, buf);
}

/* v as compact JSON, into *buf. */
static void json_write(const json_value *v, char **buf, size_t *len, size_t *cap) {
        switch (v->type) {
        case JSON_NULL:
                axp_strbuf_puts(buf, len, cap, "null");
                break;
        case JSON_BOOL:
                axp_strbuf_puts(buf, len, cap, v->boolean ? "true" : "false");
                break;
        case JSON_NUMBER:
                axp_strbuf_puts(buf, len, cap, v->text);
                break;
        case JSON_STRING:
                axp_strbuf_puts(buf, len, cap, "\"");
                for (const unsigned char *c = (const unsigned char *) v->text; *c; c++) {
                        char e[8];
                        if (*c == '"' || *c == '\\')
                                snprintf(e, sizeof(e), "\\%c", *c);
                        else if (*c < 0x20)
                                snprintf(e, sizeof(e), "\\u%04x", *c);
                        else
                                snprintf(e, sizeof(e), "%c", *c);
                        axp_strbuf_puts(buf, len, cap, e);
                }
                axp_strbuf_puts(buf, len, cap, "\"");
                break;
        case JSON_ARRAY:
        case JSON_OBJECT:
                axp_strbuf_puts(buf, len, cap, v->type == JSON_ARRAY ? "[" : "{");
                for (size_t i = 0; i < v->n; i++) {
                        if (i)
                                axp_strbuf_puts(buf, len, cap, ",");
                        if (v->type == JSON_OBJECT) {
                                json_value k = { .type = JSON_STRING, .text = v->keys[i] };
                                json_write(&k, buf, len, cap);
                                axp_strbuf_puts(buf, len, cap, ":");
                        }
                        json_write(v->items[i], buf, len, cap);
                }
                axp_strbuf_puts(buf, len, cap, v->type == JSON_ARRAY ? "]" : "}");
                break;
        }
}

/* A grammar literal that matches exactly v's compact JSON. */
static void put_literal(gen *g, const json_value *v) {
        _cleanup_free_ char *j = NULL;
        size_t len = 0, cap = 0;
        json_write(v, &j, &len, &cap);
        if (!j) {
                g->oom = true;
                return;
        }
        put(g, "\"");
        for (const char *c = j; *c; c++) {
                char e[4] = { *c, 0 };
                if (*c == '"' || *c == '\\')
                        e[0] = '\\', e[1] = *c;
                put(g, e);
        }
        put(g, "\"");
}

/* A \u escape names a character: a code point outside the surrogates, or a high surrogate
 * escaped with its low one (a lone surrogate escape is no text, and JSON readers refuse it) */
static const char *const BASE =
        "char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" ([0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | "
        "[dD] [0-7] [0-9a-fA-F]{2} | [dD] [89abAB] [0-9a-fA-F]{2} \"\\\\u\" [dD] [c-fC-F] [0-9a-fA-F]{2}))\n"
        "string ::= \"\\\"\" char* \"\\\"\"\n"
        "integer ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15})\n"
        "number ::= integer (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?\n"
        "boolean ::= \"true\" | \"false\"\n"
        "null ::= \"null\"\n"
        "value ::= object-any | array-any | string | number | boolean | null\n"
        "object-any ::= \"{\" (string \":\" value (\",\" string \":\" value)*)? \"}\"\n"
        "array-any ::= \"[\" (value (\",\" value)*)? \"]\"\n"
        "date ::= [0-9]{4} \"-\" (\"0\" [1-9] | \"1\" [0-2]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01])\n";

static int fail(gen *g, const char *path, const char *fmt, ...) _printf_(3, 4);
static int fail(gen *g, const char *path, const char *fmt, ...) {
        char m[240];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(m, sizeof(m), fmt, ap);
        va_end(ap);
        return axp_errorf(g->err, -EINVAL, "JSON schema at %s: %s", path, m);
}

static bool known(const char *k) {
        static const char *const keys[] = {
                "type", "properties", "required", "additionalProperties", "items", "minItems",
                "maxItems", "enum", "const", "anyOf", "minLength", "maxLength", "format", "title",
                "description", "default", "examples", "$schema", "$id", "$comment", "pattern",
                "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "$ref", "$defs",
                "definitions",
        };
        for (size_t i = 0; i < ELEMENTSOF(keys); i++)
                if (strcmp(k, keys[i]) == 0)
                        return true;
        return false;
}

static int count(gen *g, const json_value *s, const char *key, const char *path, uint64_t dflt, uint64_t *ret) {
        const json_value *v = json_get(s, key);
        *ret = dflt;
        if (!v)
                return 0;
        if (json_value_u64(v, ret) < 0 || *ret > MAX_COUNT)
                return fail(g, path, "'%s' must be a whole number from 0 to %d", key, MAX_COUNT);
        return 0;
}

static int rule(gen *g, const json_value *s, const char *name, const char *path);

/* ---- pattern: a regular-expression subset as grammar text ---- */

/* The JSON text of a string's characters that need no escape. */
#define PLAIN_CHAR "[^\"\\\\\\x00-\\x1F]"

typedef struct rx {
        gen *g;
        const char *s;
        size_t i, n;
        const char *path;
        unsigned depth;
} rx;

typedef struct cprange {
        uint32_t lo, hi;
} cprange;

/* One UTF-8 character at s (of at most n bytes): its code point and length; 0 when bad. */
static size_t utf8_char(const char *s, size_t n, uint32_t *cp) {
        const unsigned char *u = (const unsigned char *) s;
        size_t len = u[0] < 0x80 ? 1 : (u[0] & 0xE0) == 0xC0 ? 2 : (u[0] & 0xF0) == 0xE0 ? 3 : (u[0] & 0xF8) == 0xF0 ? 4 : 0;
        if (len == 0 || len > n)
                return 0;
        *cp = len == 1 ? u[0] : u[0] & (0x7F >> len);
        for (size_t k = 1; k < len; k++) {
                if ((u[k] & 0xC0) != 0x80)
                        return 0;
                *cp = *cp << 6 | (u[k] & 0x3F);
        }
        return len;
}

static void put_cp_utf8(gen *g, uint32_t cp) {
        char b[5] = {};
        if (cp < 0x80)
                b[0] = (char) cp;
        else if (cp < 0x800)
                b[0] = (char) (0xC0 | cp >> 6), b[1] = (char) (0x80 | (cp & 0x3F));
        else if (cp < 0x10000)
                b[0] = (char) (0xE0 | cp >> 12), b[1] = (char) (0x80 | (cp >> 6 & 0x3F)),
                b[2] = (char) (0x80 | (cp & 0x3F));
        else
                b[0] = (char) (0xF0 | cp >> 18), b[1] = (char) (0x80 | (cp >> 12 & 0x3F)),
                b[2] = (char) (0x80 | (cp >> 6 & 0x3F)), b[3] = (char) (0x80 | (cp & 0x3F));
        put(g, b);
}

/* A character inside a grammar class [...]. */
static void put_class_cp(gen *g, uint32_t cp) {
        if (cp == ']' || cp == '[' || cp == '\\' || cp == '-' || cp == '^' || cp == '"') {
                char e[3] = { '\\', (char) cp, 0 };
                put(g, e);
        } else if (cp < 0x20 || cp == 0x7F)
                putf(g, "\\x%02X", cp);
        else
                put_cp_utf8(g, cp);
}

/* The grammar literal of character cp as JSON writes it inside a string. */
static void put_json_char(gen *g, uint32_t cp) {
        switch (cp) {
        case '"': put(g, "\"\\\\\\\"\""); return;          /* JSON \" */
        case '\\': put(g, "\"\\\\\\\\\""); return;         /* JSON \\ */
        case '\t': put(g, "\"\\\\t\""); return;
        case '\n': put(g, "\"\\\\n\""); return;
        case '\r': put(g, "\"\\\\r\""); return;
        case '\f': put(g, "\"\\\\f\""); return;
        }
        if (cp < 0x20) {
                putf(g, "\"\\\\u%04x\"", cp);
                return;
        }
        put(g, "[");
        put_class_cp(g, cp);
        put(g, "]");
}

static int rx_fail(rx *x, const char *what) {
        return fail(x->g, x->path, "the pattern's %s (at offset %zu) is not supported", what, x->i);
}

static int rx_alt(rx *x, bool *nullable);

/* The ranges of \d, \w, \s (negated: \D, \W, \S is `neg`). */
static int class_escape(char c, cprange *r, size_t *n, bool *neg) {
        *neg = c == 'D' || c == 'W' || c == 'S';
        switch (c) {
        case 'd': case 'D':
                r[(*n)++] = (cprange) { '0', '9' };
                return 1;
        case 'w': case 'W':
                r[(*n)++] = (cprange) { 'a', 'z' };
                r[(*n)++] = (cprange) { 'A', 'Z' };
                r[(*n)++] = (cprange) { '0', '9' };
                r[(*n)++] = (cprange) { '_', '_' };
                return 1;
        case 's': case 'S':
                r[(*n)++] = (cprange) { ' ', ' ' };
                r[(*n)++] = (cprange) { '\t', '\r' };
                return 1;
        }
        return 0;
}

static int escaped_char(char c, uint32_t *cp) {
        switch (c) {
        case 't': *cp = '\t'; return 1;
        case 'n': *cp = '\n'; return 1;
        case 'r': *cp = '\r'; return 1;
        case 'f': *cp = '\f'; return 1;
        case 'v': *cp = '\v'; return 1;
        }
        if ((unsigned char) c < 0x80 && !isalnum((unsigned char) c) && c != '_' && (unsigned char) c >= 0x20) {
                *cp = (uint32_t) (unsigned char) c;
                return 1;
        }
        return 0;
}

/* The ranges as grammar text: plain characters as a class, the ones JSON escapes as their
 * escapes; negated, only plain characters outside the ranges. */
static int put_ranges(rx *x, const cprange *r, size_t n, bool neg) {
        gen *g = x->g;
        if (neg) {
                put(g, "[^");
                for (size_t k = 0; k < n; k++) {
                        put_class_cp(g, r[k].lo);
                        if (r[k].hi > r[k].lo) {
                                put(g, "-");
                                put_class_cp(g, r[k].hi);
                        }
                }
                put(g, "\\\"\\\\\\x00-\\x1F]");
                return 0;
        }
        bool any = false;
        put(g, "(");
        /* The plain part: each range without control characters, '"' and '\'. */
        bool open = false;
        for (size_t k = 0; k < n; k++) {
                uint32_t lo = MAX(r[k].lo, 0x20u), hi = r[k].hi;
                uint32_t cut[3][2] = { { lo, MIN(hi, 0x21u) }, { MAX(lo, 0x23u), MIN(hi, 0x5Bu) }, { MAX(lo, 0x5Du), hi } };
                for (int c = 0; c < 3; c++) {
                        if (cut[c][0] > cut[c][1])
                                continue;
                        if (!open) {
                                put(g, "[");
                                open = true;
                        }
                        put_class_cp(g, cut[c][0]);
                        if (cut[c][1] > cut[c][0]) {
                                put(g, "-");
                                put_class_cp(g, cut[c][1]);
                        }
                }
        }
        if (open) {
                put(g, "]");
                any = true;
        }
        static const uint32_t special[] = { '"', '\\', '\t', '\n', '\r', '\f', '\v' };
        for (size_t e = 0; e < ELEMENTSOF(special); e++)
                for (size_t k = 0; k < n; k++)
                        if (r[k].lo <= special[e] && special[e] <= r[k].hi) {
                                if (any)
                                        put(g, " | ");
                                put_json_char(g, special[e]);
                                any = true;
                                break;
                        }
        put(g, ")");
        if (!any)
                return rx_fail(x, "class, which has no character that can be written,");
        return 0;
}

static int rx_class(rx *x) {
        cprange r[128];
        size_t n = 0;
        bool neg = false;
        x->i++;         /* [ */
        if (x->i < x->n && x->s[x->i] == '^') {
                neg = true;
                x->i++;
        }
        bool first = true;
        while (x->i < x->n && (x->s[x->i] != ']' || first)) {
                uint32_t lo, hi;
                size_t len;
                first = false;
                if (n + 4 > ELEMENTSOF(r))
                        return rx_fail(x, "class, which is too long,");
                if (x->s[x->i] == '\\') {
                        bool eneg;
                        if (x->i + 1 >= x->n)
                                return rx_fail(x, "trailing '\\'");
                        char c = x->s[x->i + 1];
                        if (class_escape(c, r, &n, &eneg)) {
                                if (eneg)
                                        return rx_fail(x, "negated escape inside a class");
                                x->i += 2;
                                continue;
                        }
                        if (!escaped_char(c, &lo))
                                return rx_fail(x, "escape inside a class");
                        x->i += 2;
                } else {
                        if (x->s[x->i] == '[')
                                return rx_fail(x, "nested class or POSIX class");
                        len = utf8_char(x->s + x->i, x->n - x->i, &lo);
                        if (!len)
                                return rx_fail(x, "bytes, which are not UTF-8,");
                        x->i += len;
                }
                hi = lo;
                if (x->i + 1 < x->n && x->s[x->i] == '-' && x->s[x->i + 1] != ']') {
                        x->i++;
                        if (x->s[x->i] == '\\') {
                                if (x->i + 1 >= x->n || !escaped_char(x->s[x->i + 1], &hi))
                                        return rx_fail(x, "escape at the end of a range");
                                x->i += 2;
                        } else {
                                len = utf8_char(x->s + x->i, x->n - x->i, &hi);
                                if (!len)
                                        return rx_fail(x, "bytes, which are not UTF-8,");
                                x->i += len;
                        }
                        if (hi < lo)
                                return fail(x->g, x->path, "the pattern has a backward range in a class");
                }
                r[n++] = (cprange) { lo, hi };
        }
        if (x->i >= x->n)
                return fail(x->g, x->path, "the pattern has a class without its ']'");
        x->i++;         /* ] */
        if (n == 0)
                return fail(x->g, x->path, "the pattern has an empty class");
        return put_ranges(x, r, n, neg);
}

/* An atom, then its quantifier; *nullable: whether it may match nothing. A part that may
 * match nothing repeated without bound (`(a*)*`, `(a|)+`, `(b?){2,}`) is refused: its grammar
 * rule would reach itself without reading a character. */
static int rx_atom(rx *x, bool *nullable) {
        gen *g = x->g;
        char c = x->s[x->i];
        size_t at = x->i;
        int r;
        *nullable = false;
        if (c == '(') {
                if (++x->depth > 32)
                        return rx_fail(x, "nesting, which is too deep,");
                x->i++;
                if (x->i + 1 < x->n && x->s[x->i] == '?') {
                        if (x->s[x->i + 1] != ':')
                                return rx_fail(x, x->s[x->i + 1] == '<' && x->i + 2 < x->n &&
                                                          x->s[x->i + 2] != '=' && x->s[x->i + 2] != '!'
                                                          ? "named group"
                                                          : "lookaround or group option");
                        x->i += 2;
                }
                put(g, "(");
                if ((r = rx_alt(x, nullable)) < 0)
                        return r;
                if (x->i >= x->n || x->s[x->i] != ')')
                        return fail(g, x->path, "the pattern has a '(' without its ')'");
                x->i++;
                x->depth--;
                put(g, ")");
        } else if (c == '[') {
                if ((r = rx_class(x)) < 0)
                        return r;
        } else if (c == '.') {
                put(g, PLAIN_CHAR);
                x->i++;
        } else if (c == '\\') {
                cprange rg[8];
                size_t n = 0;
                bool neg;
                uint32_t cp;
                if (x->i + 1 >= x->n)
                        return rx_fail(x, "trailing '\\'");
                c = x->s[x->i + 1];
                if (c >= '1' && c <= '9')
                        return rx_fail(x, "backreference");
                if (c == 'b' || c == 'B')
                        return rx_fail(x, "word boundary");
                if (c == 'p' || c == 'P')
                        return rx_fail(x, "Unicode property");
                if (class_escape(c, rg, &n, &neg)) {
                        if ((r = put_ranges(x, rg, n, neg)) < 0)
                                return r;
                } else if (escaped_char(c, &cp))
                        put_json_char(g, cp);
                else
                        return rx_fail(x, "escape");
                x->i += 2;
        } else if (c == '^' || c == '$')
                return rx_fail(x, "anchor ('^' or '$' not at the pattern's ends)");
        else if (c == '*' || c == '+' || c == '?' || c == '{')
                return fail(g, x->path, "the pattern has a quantifier with nothing to repeat (at offset %zu)", x->i);
        else {
                uint32_t cp;
                size_t len = utf8_char(x->s + x->i, x->n - x->i, &cp);
                if (!len)
                        return rx_fail(x, "bytes, which are not UTF-8,");
                put_json_char(g, cp);
                x->i += len;
        }

        /* The quantifier. */
        if (x->i >= x->n)
                return 0;
        c = x->s[x->i];
        bool unbounded, optional; /* the quantifier's */
        if (c == '*' || c == '+' || c == '?') {
                char q[2] = { c, 0 };
                put(g, q);
                unbounded = c != '?';
                optional = c != '+';
                x->i++;
        } else if (c == '{') {
                unsigned long lo, hi;
                char *end;
                const char *p = x->s + x->i + 1;
                if (!isdigit((unsigned char) *p))
                        return rx_fail(x, "'{' (a literal brace is written '\\{')");
                lo = strtoul(p, &end, 10);
                hi = lo;
                if (*end == ',') {
                        if (end[1] == '}')
                                hi = ULONG_MAX, end++;
                        else if (isdigit((unsigned char) end[1]))
                                hi = strtoul(end + 1, &end, 10);
                        else
                                return rx_fail(x, "quantifier");
                }
                if (*end != '}')
                        return rx_fail(x, "quantifier");
                if (lo > MAX_COUNT || (hi != ULONG_MAX && hi > MAX_COUNT))
                        return fail(g, x->path, "the pattern repeats something more than %d times", MAX_COUNT);
                if (hi < lo)
                        return fail(g, x->path, "the pattern has a quantifier {%lu,%lu} with its bounds backward", lo, hi);
                unbounded = hi == ULONG_MAX;
                optional = lo == 0;
                if (hi == ULONG_MAX)
                        putf(g, "{%lu,}", lo);
                else
                        putf(g, "{%lu,%lu}", lo, hi);
                x->i = (size_t) (end + 1 - x->s);
        } else
                return 0;
        if (*nullable && unbounded)
                return fail(g, x->path, "the pattern repeats without bound a part that may match nothing "
                                        "(at offset %zu); make it match at least one character", at);
        *nullable = *nullable || optional;
        /* Lazy and possessive forms match the same strings. */
        if (x->i < x->n && (x->s[x->i] == '?' || x->s[x->i] == '+'))
                x->i++;
        if (x->i < x->n && (x->s[x->i] == '*' || x->s[x->i] == '+' || x->s[x->i] == '?' || x->s[x->i] == '{'))
                return fail(g, x->path, "the pattern has a quantifier after a quantifier (at offset %zu)", x->i);
        return 0;
}

/* Alternatives; *nullable: whether one of them may match nothing. */
static int rx_alt(rx *x, bool *nullable) {
        int r;
        *nullable = false;
        for (bool first = true;; first = false) {
                bool all = true, one;
                if (!first)
                        put(x->g, " | ");
                put(x->g, "(\"\"");
                while (x->i < x->n && x->s[x->i] != '|' && x->s[x->i] != ')') {
                        put(x->g, " ");
                        if ((r = rx_atom(x, &one)) < 0)
                                return r;
                        all = all && one;
                }
                put(x->g, ")");
                *nullable = *nullable || all;
                if (x->i < x->n && x->s[x->i] == '|') {
                        x->i++;
                        continue;
                }
                return 0;
        }
}

/* The string rule's body for `pattern`. */
static int pattern_body(gen *g, const char *pattern, const char *path) {
        size_t n = strlen(pattern);
        bool start = n > 0 && pattern[0] == '^', end = false;
        rx x = { .g = g, .s = pattern, .n = n, .path = path };
        int r;
        if (n > 1000)
                return fail(g, path, "the pattern is longer than 1000 bytes");
        if (n > (size_t) start && pattern[n - 1] == '$') {
                size_t bs = 0;
                while (bs + 2 <= n && pattern[n - 2 - bs] == '\\')
                        bs++;
                end = bs % 2 == 0;
        }
        x.i = start;
        x.n = n - end;
        put(g, "\"\\\"\" ");
        if (!start)
                put(g, "char* ");
        put(g, "(");
        bool nullable;
        if ((r = rx_alt(&x, &nullable)) < 0)
                return r;
        if (x.i < x.n)
                return fail(g, path, "the pattern has a ')' without its '(' (at offset %zu)", x.i);
        put(g, ")");
        if (!end)
                put(g, " char*");
        put(g, " \"\\\"\"");
        return 0;
}

/* ---- minimum and maximum: integers of a range as grammar text ---- */

/* Digit strings of length n from lo to hi (same length, lo <= hi). */
static void digits_range(gen *g, const char *lo, const char *hi, size_t n) {
        char nines[24], zeros[24];
        bool sep = false;
        if (n == 0) {
                put(g, "\"\"");
                return;
        }
        if (lo[0] == hi[0]) {
                putf(g, "\"%c\"", lo[0]);
                if (n > 1) {
                        put(g, " ");
                        digits_range(g, lo + 1, hi + 1, n - 1);
                }
                return;
        }
        memset(nines, '9', n - 1);
        memset(zeros, '0', n - 1);
        bool lo_min = strncmp(lo + 1, zeros, n - 1) == 0, hi_max = strncmp(hi + 1, nines, n - 1) == 0;
        char a = lo[0], b = hi[0];
        put(g, "(");
        if (!lo_min) {
                putf(g, "\"%c\" (", a);
                digits_range(g, lo + 1, nines, n - 1);
                put(g, ")");
                a++;
                sep = true;
        }
        if (!hi_max)
                b--;
        if (a <= b) {
                putf(g, "%s[%c-%c]", sep ? " | " : "", a, b);
                if (n > 1)
                        putf(g, " [0-9]{%zu}", n - 1);
                sep = true;
        }
        if (!hi_max) {
                putf(g, "%s\"%c\" (", sep ? " | " : "", hi[0]);
                digits_range(g, zeros, hi + 1, n - 1);
                put(g, ")");
        }
        put(g, ")");
}

#define INT_DIGITS 16
static const uint64_t INT_LIMIT = 9999999999999999ULL;   /* the integer rule's 16 digits */

/* The decimal numbers from a to b (b at most INT_LIMIT), without leading zeros. */
static void nonneg_range(gen *g, uint64_t a, uint64_t b) {
        char ls[24], hs[24];
        uint64_t p = 1;
        bool sep = false;
        put(g, "(");
        for (size_t d = 1; d <= INT_DIGITS && (d == 1 || p <= b); d++, p *= 10) { /* 0..0 too */
                uint64_t lo = d == 1 ? 0 : p, hi = p * 10 - 1;
                lo = MAX(lo, a);
                hi = MIN(hi, b);
                if (lo > hi)
                        continue;
                snprintf(ls, sizeof(ls), "%0*llu", (int) d, (unsigned long long) lo);
                snprintf(hs, sizeof(hs), "%0*llu", (int) d, (unsigned long long) hi);
                if (sep)
                        put(g, " | ");
                digits_range(g, ls, hs, d);
                sep = true;
        }
        put(g, ")");
}

static int bound(gen *g, const json_value *s, const char *key, const char *path, bool upper, bool exclusive,
                 int64_t *v) {
        const json_value *b = json_get(s, key);
        double x;
        if (!b)
                return 0;
        if (b->type == JSON_BOOL)
                return fail(g, path, "a boolean '%s' (draft 4) is not supported; give the bound itself as a number",
                            key);
        if (b->type != JSON_NUMBER)
                return fail(g, path, "'%s' must be a number", key);
        x = b->number;
        if (!(x >= -(double) INT_LIMIT && x <= (double) INT_LIMIT))
                return fail(g, path, "'%s' is beyond the %d digits an integer may have here", key, INT_DIGITS);
        if (upper) {
                double f = floor(x);
                int64_t k = (int64_t) f - (exclusive && f == x);
                *v = MIN(*v, k);
        } else {
                double c = ceil(x);
                int64_t k = (int64_t) c + (exclusive && c == x);
                *v = MAX(*v, k);
        }
        return 0;
}

static bool has_bounds(const json_value *s) {
        return json_get(s, "minimum") || json_get(s, "maximum") || json_get(s, "exclusiveMinimum") ||
               json_get(s, "exclusiveMaximum");
}

static int integer_body(gen *g, const json_value *s, const char *path) {
        int64_t lo = -(int64_t) INT_LIMIT, hi = (int64_t) INT_LIMIT;
        int r;
        if (!has_bounds(s)) {
                put(g, "integer");
                return 0;
        }
        if ((r = bound(g, s, "minimum", path, false, false, &lo)) < 0 ||
            (r = bound(g, s, "exclusiveMinimum", path, false, true, &lo)) < 0 ||
            (r = bound(g, s, "maximum", path, true, false, &hi)) < 0 ||
            (r = bound(g, s, "exclusiveMaximum", path, true, true, &hi)) < 0)
                return r;
        if (lo > hi)
                return fail(g, path, "no integer lies between the minimum and the maximum");
        put(g, "(");
        if (lo < 0) {
                put(g, "\"-\" ");
                nonneg_range(g, hi < 0 ? (uint64_t) -hi : 1, (uint64_t) -lo);
        }
        if (hi >= 0) {
                if (lo < 0)
                        put(g, " | ");
                nonneg_range(g, lo > 0 ? (uint64_t) lo : 0, (uint64_t) hi);
        }
        put(g, ")");
        return 0;
}

/* ---- $ref ---- */

/* The schema a local JSON pointer names, or NULL. */
static const json_value *resolve_ref(const json_value *root, const char *ref) {
        const json_value *cur = root;
        const char *p = ref + 1;
        char tok[256];
        if (ref[0] != '#')
                return NULL;
        if (!*p)
                return root;
        if (*p != '/')
                return NULL;
        while (*p == '/') {
                size_t n = 0;
                for (p++; *p && *p != '/'; p++) {
                        char c = *p;
                        if (c == '~' && (p[1] == '0' || p[1] == '1'))
                                c = *++p == '0' ? '~' : '/';
                        if (n + 1 >= sizeof(tok))
                                return NULL;
                        tok[n++] = c;
                }
                tok[n] = 0;
                if (cur->type == JSON_OBJECT)
                        cur = json_get(cur, tok);
                else if (cur->type == JSON_ARRAY) {
                        char *end;
                        unsigned long k = strtoul(tok, &end, 10);
                        cur = *tok && !*end && k < cur->n ? cur->items[k] : NULL;
                } else
                        cur = NULL;
                if (!cur)
                        return NULL;
        }
        return cur;
}

static bool annotation(const char *k) {
        static const char *const keys[] = { "title", "description", "default", "examples", "$schema", "$id",
                                            "$comment", "$defs", "definitions", "$ref" };
        for (size_t i = 0; i < ELEMENTSOF(keys); i++)
                if (strcmp(k, keys[i]) == 0)
                        return true;
        return false;
}

static int ref_rule(gen *g, const json_value *s, const json_value *ref, const char *name, const char *path) {
        const json_value *target;
        char child[32];
        if (ref->type != JSON_STRING)
                return fail(g, path, "'$ref' must be a string");
        for (size_t i = 0; i < s->n; i++)
                if (!annotation(s->keys[i]))
                        return fail(g, path, "'$ref' beside '%s' is not supported", s->keys[i]);
        if (ref->text[0] != '#')
                return fail(g, path, "only local $refs (\"#\", \"#/$defs/NAME\", ...) are supported, not '%s'",
                            ref->text);
        target = resolve_ref(g->root, ref->text);
        if (!target)
                return fail(g, path, "the $ref '%s' names nothing in the schema", ref->text);
        for (size_t i = 0; i < g->n_refs; i++)
                if (g->refs[i] == target) {
                        putf(g, "%s ::= r%u\n", name, g->ref_rules[i]);
                        return 0;
                }
        if (g->n_refs == ELEMENTSOF(g->refs))
                return fail(g, path, "more than %zu different $refs", ELEMENTSOF(g->refs));
        g->refs[g->n_refs] = target;
        g->ref_rules[g->n_refs] = ++g->n_rules;
        snprintf(child, sizeof(child), "r%u", g->n_rules);
        g->n_refs++;
        putf(g, "%s ::= %s\n", name, child);
        return rule(g, target, child, ref->text);
}

/* The body of a rule for one type of s. */
static int type_body(gen *g, const json_value *s, const char *type, const char *name, const char *path) {
        char child[32], p[256];
        int r;
        if (strcmp(type, "integer") == 0)
                return integer_body(g, s, path);
        if (strcmp(type, "number") == 0 && has_bounds(s))
                return fail(g, path, "minimum, maximum, exclusiveMinimum and exclusiveMaximum are supported for "
                                     "'integer' only, not 'number'");
        if (strcmp(type, "null") == 0 || strcmp(type, "boolean") == 0 || strcmp(type, "number") == 0) {
                put(g, type);
                return 0;
        }
        if (strcmp(type, "string") == 0) {
                uint64_t min, max;
                const char *format = json_get_string(s, "format");
                if (json_get(s, "format") && (!format || strcmp(format, "date") != 0))
                        return fail(g, path, "the format '%s' is not supported (only 'date')",
                                    format ? format : "?");
                const json_value *pattern = json_get(s, "pattern");
                if (pattern) {
                        if (pattern->type != JSON_STRING)
                                return fail(g, path, "'pattern' must be a string");
                        if (format || json_get(s, "minLength") || json_get(s, "maxLength"))
                                return fail(g, path, "minLength, maxLength or format beside a pattern are not supported");
                        return pattern_body(g, pattern->text, path);
                }
                if (format) {
                        if (json_get(s, "minLength") || json_get(s, "maxLength"))
                                return fail(g, path, "minLength and maxLength beside a format are not supported");
                        put(g, "\"\\\"\" date \"\\\"\"");
                        return 0;
                }
                if ((r = count(g, s, "minLength", path, 0, &min)) < 0 ||
                    (r = count(g, s, "maxLength", path, UINT64_MAX, &max)) < 0)
                        return r;
                if (max != UINT64_MAX && min > max)
                        return fail(g, path, "minLength is greater than maxLength; no string can satisfy it");
                if (min == 0 && max == UINT64_MAX)
                        put(g, "string");
                else if (max == UINT64_MAX)
                        putf(g, "\"\\\"\" char{%llu,} \"\\\"\"", (unsigned long long) min);
                else
                        putf(g, "\"\\\"\" char{%llu,%llu} \"\\\"\"", (unsigned long long) min,
                             (unsigned long long) max);
                return 0;
        }
        if (strcmp(type, "array") == 0) {
                uint64_t min, max;
                const json_value *items = json_get(s, "items");
                if ((r = count(g, s, "minItems", path, 0, &min)) < 0 ||
                    (r = count(g, s, "maxItems", path, UINT64_MAX, &max)) < 0)
                        return r;
                if (max != UINT64_MAX && min > max)
                        return fail(g, path, "minItems is greater than maxItems; no array can satisfy it");
                if (items) {
                        snprintf(p, sizeof(p), "%s/items", path);
                        /* written after this rule's line: keep the name, emit below */
                        snprintf(child, sizeof(child), "r%u", ++g->n_rules);
                } else
                        snprintf(child, sizeof(child), "value");
                if (max == 0)
                        put(g, "\"[]\"");
                else {
                        put(g, "\"[\" ");
                        if (min == 0)
                                put(g, "(");
                        putf(g, "%s", child);
                        uint64_t lo = min > 0 ? min - 1 : 0;
                        if (max == UINT64_MAX)
                                putf(g, " (\",\" %s){%llu,}", child, (unsigned long long) lo);
                        else if (max > 1)
                                putf(g, " (\",\" %s){%llu,%llu}", child, (unsigned long long) lo,
                                     (unsigned long long) (max - 1));
                        if (min == 0)
                                put(g, ")?");
                        put(g, " \"]\"");
                }
                if (items) {
                        put(g, "\n");
                        return rule(g, items, child, p);
                }
                return 0;
        }
        if (strcmp(type, "object") == 0) {
                const json_value *props = json_get(s, "properties"), *req = json_get(s, "required"),
                                 *add = json_get(s, "additionalProperties");
                if (props && props->type != JSON_OBJECT)
                        return fail(g, path, "'properties' must be an object");
                if (req && req->type != JSON_ARRAY)
                        return fail(g, path, "'required' must be an array of names");
                if (add && !(add->type == JSON_BOOL && !add->boolean))
                        return fail(g, path, "additionalProperties other than false is not supported");
                size_t n = props ? props->n : 0;
                if (n > 256)
                        return fail(g, path, "more than 256 properties");
                bool required[256] = {};
                for (size_t i = 0; req && i < req->n; i++) {
                        if (req->items[i]->type != JSON_STRING)
                                return fail(g, path, "'required' must be an array of names");
                        size_t k = 0;
                        while (k < n && strcmp(props->keys[k], req->items[i]->text) != 0)
                                k++;
                        if (k == n)
                                return fail(g, path, "the required property '%s' is not among 'properties'",
                                            req->items[i]->text);
                        required[k] = true;
                }
                if (!props || n == 0) {
                        put(g, add || props ? "\"{}\"" : "object-any");
                        return 0;
                }
                /* tail rules: T_k^c = the properties from k on, c: a comma comes first */
                unsigned base = g->n_rules;
                g->n_rules += 2 * (unsigned) n + n;
                putf(g, "\"{\" %s-t0-0 \"}\"\n", name);
                for (size_t k = 0; k < n; k++)
                        for (int c = 0; c < 2; c++) {
                                putf(g, "%s-t%zu-%d ::= ", name, k, c);
                                json_value key = { .type = JSON_STRING, .text = props->keys[k] };
                                if (c)
                                        put(g, "\",\" ");
                                put_literal(g, &key);
                                putf(g, " \":\" r%u", base + 1 + (unsigned) k);
                                if (k + 1 < n)
                                        putf(g, " %s-t%zu-1", name, k + 1);
                                if (!required[k]) {
                                        if (k + 1 < n)
                                                putf(g, " | %s-t%zu-%d", name, k + 1, c);
                                        else
                                                put(g, " | \"\"");
                                }
                                put(g, "\n");
                        }
                for (size_t k = 0; k < n; k++) {
                        snprintf(child, sizeof(child), "r%u", base + 1 + (unsigned) k);
                        snprintf(p, sizeof(p), "%s/properties/%s", path, props->keys[k]);
                        if ((r = rule(g, props->items[k], child, p)) < 0)
                                return r;
                }
                return 1; /* the rule's line is written */
        }
        return fail(g, path, "the type '%s' is not a JSON Schema type", type);
}

static int rule(gen *g, const json_value *s, const char *name, const char *path) {
        char child[32], p[256];
        int r;
        if (g->oom)
                return axp_errorf(g->err, -ENOMEM, "out of memory");
        if (g->n_rules > 4096)
                return fail(g, path, "the schema is too large");
        if (s->type == JSON_BOOL) {
                if (!s->boolean)
                        return fail(g, path, "the schema false accepts nothing");
                putf(g, "%s ::= value\n", name);
                return 0;
        }
        if (s->type != JSON_OBJECT)
                return fail(g, path, "a schema must be an object or true");
        for (size_t i = 0; i < s->n; i++)
                if (!known(s->keys[i]))
                        return fail(g, path, "the keyword '%s' is not supported", s->keys[i]);

        const json_value *ref = json_get(s, "$ref");
        if (ref)
                return ref_rule(g, s, ref, name, path);
        const json_value *cst = json_get(s, "const"), *en = json_get(s, "enum"), *any = json_get(s, "anyOf"),
                         *type = json_get(s, "type");
        if (cst) {
                putf(g, "%s ::= ", name);
                put_literal(g, cst);
                put(g, "\n");
                return 0;
        }
        if (en) {
                if (en->type != JSON_ARRAY || en->n == 0)
                        return fail(g, path, "'enum' must be a non-empty array");
                putf(g, "%s ::= ", name);
                for (size_t i = 0; i < en->n; i++) {
                        if (i)
                                put(g, " | ");
                        put_literal(g, en->items[i]);
                }
                put(g, "\n");
                return 0;
        }
        if (any) {
                if (any->type != JSON_ARRAY || any->n == 0)
                        return fail(g, path, "'anyOf' must be a non-empty array of schemas");
                if (type)
                        return fail(g, path, "'type' beside 'anyOf' is not supported; put it in each choice");
                unsigned first = g->n_rules + 1;
                g->n_rules += (unsigned) any->n;
                putf(g, "%s ::= ", name);
                for (size_t i = 0; i < any->n; i++)
                        putf(g, "%sr%u", i ? " | " : "", first + (unsigned) i);
                put(g, "\n");
                for (size_t i = 0; i < any->n; i++) {
                        snprintf(child, sizeof(child), "r%u", first + (unsigned) i);
                        snprintf(p, sizeof(p), "%s/anyOf/%zu", path, i);
                        if ((r = rule(g, any->items[i], child, p)) < 0)
                                return r;
                }
                return 0;
        }

        const char *types[8];
        size_t n_types = 0;
        if (type && type->type == JSON_STRING)
                types[n_types++] = type->text;
        else if (type && type->type == JSON_ARRAY && type->n > 0 && type->n <= ELEMENTSOF(types)) {
                for (size_t i = 0; i < type->n; i++) {
                        if (type->items[i]->type != JSON_STRING)
                                return fail(g, path, "'type' must be a name or a list of names");
                        types[n_types++] = type->items[i]->text;
                }
        } else if (type)
                return fail(g, path, "'type' must be a name or a list of names");
        else if (json_get(s, "properties"))
                types[n_types++] = "object";
        else if (json_get(s, "items"))
                types[n_types++] = "array";
        else if (json_get(s, "pattern"))
                return fail(g, path, "'pattern' without \"type\": \"string\" is not supported");
        else if (has_bounds(s))
                return fail(g, path, "minimum and maximum without \"type\": \"integer\" are not supported");
        else {
                putf(g, "%s ::= value\n", name);
                return 0;
        }
        if (n_types == 1) {
                putf(g, "%s ::= ", name);
                r = type_body(g, s, types[0], name, path);
                if (r == 0)
                        put(g, "\n");
                return r < 0 ? r : 0;
        }
        unsigned first = g->n_rules + 1;
        g->n_rules += (unsigned) n_types;
        putf(g, "%s ::= ", name);
        for (size_t i = 0; i < n_types; i++)
                putf(g, "%sr%u", i ? " | " : "", first + (unsigned) i);
        put(g, "\n");
        for (size_t i = 0; i < n_types; i++) {
                snprintf(child, sizeof(child), "r%u", first + (unsigned) i);
                putf(g, "%s ::= ", child);
                r = type_body(g, s, types[i], child, path);
                if (r < 0)
                        return r;
                if (r == 0)
                        put(g, "\n");
        }
        return 0;
}

int axp_json_schemas_to_gbnf(const json_value *const *schemas, const char *const *names, size_t n,
                             char **ret, axp_error *err) {
        gen g = { .err = err };
        int r = 0;
        for (size_t i = 0; i < n && r >= 0; i++) {
                g.root = schemas[i];
                r = rule(&g, schemas[i], names[i], "#");
        }
        put(&g, BASE);
        if (r < 0 || g.oom) {
                free(g.out);
                return r < 0 ? r : axp_errorf(err, -ENOMEM, "out of memory");
        }
        *ret = g.out;
        return 0;
}

int axp_json_schema_to_gbnf(const char *schema, size_t len, char **ret, axp_error *err) {
        if (len > AXP_JSON_SCHEMA_MAX_BYTES)
                return axp_errorf(err, -EINVAL, "the JSON schema is %zu bytes; at most %d are accepted", len,
                                  AXP_JSON_SCHEMA_MAX_BYTES);
        _cleanup_json_ json_value *s = NULL;
        axp_error perr = {};
        if (json_parse(schema, len, &s, &perr) < 0)
                return axp_errorf(err, -EINVAL, "the JSON schema is not valid JSON: %s", perr.msg);
        gen g = { .err = err, .root = s };
        int r = rule(&g, s, "root", "#");
        put(&g, BASE);
        if (r < 0 || g.oom) {
                free(g.out);
                return r < 0 ? r : axp_errorf(err, -ENOMEM, "out of memory");
        }
        *ret = g.out;
        return 0;
}
