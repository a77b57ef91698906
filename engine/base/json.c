/* SPDX-License-Identifier: MIT */
#include "json.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "utf8.h"

#define JSON_MAX_DEPTH 32

typedef struct parser {
        const char *p, *end;
        axp_error *err;
} parser;

void json_free(json_value *v) {
        if (!v)
                return;
        for (size_t i = 0; i < v->n; i++) {
                json_free(v->items[i]);
                if (v->keys)
                        free(v->keys[i]);
        }
        free(v->items);
        free(v->keys);
        free(v->text);
        free(v);
}

static int fail(parser *ps, const char *what) {
        return axp_errorf(ps->err, -EINVAL, "malformed JSON: %s", what);
}

static void skip_ws(parser *ps) {
        while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
                ps->p++;
}

static int hex4(parser *ps, uint32_t *ret) {
        uint32_t v = 0;
        if (ps->end - ps->p < 4)
                return fail(ps, "short \\u escape");
        for (int i = 0; i < 4; i++) {
                char c = *ps->p++;
                v <<= 4;
                if (c >= '0' && c <= '9')
                        v |= (uint32_t) (c - '0');
                else if (c >= 'a' && c <= 'f')
                        v |= (uint32_t) (c - 'a' + 10);
                else if (c >= 'A' && c <= 'F')
                        v |= (uint32_t) (c - 'A' + 10);
                else
                        return fail(ps, "bad \\u escape");
        }
        *ret = v;
        return 0;
}

static int parse_string(parser *ps, char **ret) {
        /* The unescaped text is never longer than the escaped one. */
        const char *start = ++ps->p;
        _cleanup_free_ char *out = malloc((size_t) (ps->end - start) + 1);
        size_t o = 0;
        int r;

        if (!out)
                return axp_errorf(ps->err, -ENOMEM, "out of memory");
        for (;;) {
                if (ps->p >= ps->end)
                        return fail(ps, "unterminated string");
                unsigned char c = (unsigned char) *ps->p;
                if (c == '"') {
                        ps->p++;
                        break;
                }
                if (c < 0x20)
                        return fail(ps, "control character in string");
                if (c != '\\') {
                        size_t n = axp_utf8_char_len(ps->p, (size_t) (ps->end - ps->p));
                        if (n == 0)
                                return fail(ps, "invalid UTF-8 in string");
                        memcpy(out + o, ps->p, n);
                        o += n;
                        ps->p += n;
                        continue;
                }
                if (++ps->p >= ps->end)
                        return fail(ps, "unterminated escape");
                c = (unsigned char) *ps->p++;
                switch (c) {
                case '"': out[o++] = '"'; break;
                case '\\': out[o++] = '\\'; break;
                case '/': out[o++] = '/'; break;
                case 'b': out[o++] = '\b'; break;
                case 'f': out[o++] = '\f'; break;
                case 'n': out[o++] = '\n'; break;
                case 'r': out[o++] = '\r'; break;
                case 't': out[o++] = '\t'; break;
                case 'u': {
                        uint32_t cp, lo;
                        r = hex4(ps, &cp);
                        if (r < 0)
                                return r;
                        if (cp >= 0xD800 && cp <= 0xDBFF) {
                                if (ps->end - ps->p < 2 || ps->p[0] != '\\' || ps->p[1] != 'u')
                                        return fail(ps, "lone surrogate");
                                ps->p += 2;
                                r = hex4(ps, &lo);
                                if (r < 0)
                                        return r;
                                if (lo < 0xDC00 || lo > 0xDFFF)
                                        return fail(ps, "bad surrogate pair");
                                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                        } else if (cp >= 0xDC00 && cp <= 0xDFFF)
                                return fail(ps, "lone surrogate");
                        if (cp == 0)
                                return fail(ps, "\\u0000 in string");
                        /* A \uXXXX escape (6 bytes) never expands beyond 3 bytes, a pair
                         * (12 bytes) never beyond 4: the buffer bound holds. */
                        o += axp_utf8_encode(cp, (uint8_t *) out + o);
                        break;
                }
                default:
                        return fail(ps, "unknown escape");
                }
        }
        out[o] = 0;
        *ret = TAKE_PTR(out);
        return 0;
}

static int parse_value(parser *ps, int depth, json_value **ret);

static int push(json_value *v, json_value *item, char *key) {
        if ((v->n & (v->n - 1)) == 0) {
                size_t cap = v->n ? v->n * 2 : 4;
                json_value **items = realloc(v->items, cap * sizeof(*items));
                if (!items)
                        return -ENOMEM;
                v->items = items;
                if (v->type == JSON_OBJECT) {
                        char **keys = realloc(v->keys, cap * sizeof(*keys));
                        if (!keys)
                                return -ENOMEM;
                        v->keys = keys;
                }
        }
        v->items[v->n] = item;
        if (v->type == JSON_OBJECT)
                v->keys[v->n] = key;
        v->n++;
        return 0;
}

static int parse_container(parser *ps, int depth, json_value *v) {
        char close = v->type == JSON_OBJECT ? '}' : ']';
        int r;

        ps->p++;
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == close) {
                ps->p++;
                return 0;
        }
        for (;;) {
                _cleanup_free_ char *key = NULL;
                json_value *item = NULL;

                skip_ws(ps);
                if (v->type == JSON_OBJECT) {
                        if (ps->p >= ps->end || *ps->p != '"')
                                return fail(ps, "expected a key");
                        r = parse_string(ps, &key);
                        if (r < 0)
                                return r;
                        skip_ws(ps);
                        if (ps->p >= ps->end || *ps->p != ':')
                                return fail(ps, "expected ':'");
                        ps->p++;
                }
                r = parse_value(ps, depth + 1, &item);
                if (r < 0)
                        return r;
                r = push(v, item, key);
                if (r < 0) {
                        json_free(item);
                        return axp_errorf(ps->err, r, "out of memory");
                }
                key = NULL;
                skip_ws(ps);
                if (ps->p < ps->end && *ps->p == ',') {
                        ps->p++;
                        continue;
                }
                if (ps->p < ps->end && *ps->p == close) {
                        ps->p++;
                        return 0;
                }
                return fail(ps, "expected ',' or a closing bracket");
        }
}

static int parse_number(parser *ps, json_value *v) {
        const char *start = ps->p;
        if (ps->p < ps->end && *ps->p == '-')
                ps->p++;
        if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
                return fail(ps, "bad number");
        if (*ps->p == '0')
                ps->p++;
        else
                while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
                        ps->p++;
        if (ps->p < ps->end && *ps->p == '.') {
                ps->p++;
                if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
                        return fail(ps, "bad number");
                while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
                        ps->p++;
        }
        if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E')) {
                ps->p++;
                if (ps->p < ps->end && (*ps->p == '+' || *ps->p == '-'))
                        ps->p++;
                if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
                        return fail(ps, "bad number");
                while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
                        ps->p++;
        }
        v->text = strndup(start, (size_t) (ps->p - start));
        if (!v->text)
                return axp_errorf(ps->err, -ENOMEM, "out of memory");
        v->number = strtod(v->text, NULL);
        return 0;
}

static int literal(parser *ps, const char *word) {
        size_t n = strlen(word);
        if ((size_t) (ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0)
                return fail(ps, "unexpected character");
        ps->p += n;
        return 0;
}

static int parse_value(parser *ps, int depth, json_value **ret) {
        json_value *v;
        int r;

        if (depth > JSON_MAX_DEPTH)
                return fail(ps, "nested too deeply");
        skip_ws(ps);
        if (ps->p >= ps->end)
                return fail(ps, "unexpected end");
        v = calloc(1, sizeof(*v));
        if (!v)
                return axp_errorf(ps->err, -ENOMEM, "out of memory");
        switch (*ps->p) {
        case '{':
                v->type = JSON_OBJECT;
                r = parse_container(ps, depth, v);
                break;
        case '[':
                v->type = JSON_ARRAY;
                r = parse_container(ps, depth, v);
                break;
        case '"':
                v->type = JSON_STRING;
                r = parse_string(ps, &v->text);
                break;
        case 't':
                v->type = JSON_BOOL;
                v->boolean = true;
                r = literal(ps, "true");
                break;
        case 'f':
                v->type = JSON_BOOL;
                r = literal(ps, "false");
                break;
        case 'n':
                v->type = JSON_NULL;
                r = literal(ps, "null");
                break;
        default:
                v->type = JSON_NUMBER;
                r = parse_number(ps, v);
                break;
        }
        if (r < 0) {
                json_free(v);
                return r;
        }
        *ret = v;
        return 0;
}

int json_parse(const char *text, size_t len, json_value **ret, axp_error *err) {
        parser ps = { .p = text, .end = text + len, .err = err };
        json_value *v = NULL;
        int r;

        r = parse_value(&ps, 0, &v);
        if (r < 0)
                return r;
        skip_ws(&ps);
        if (ps.p != ps.end) {
                json_free(v);
                return fail(&ps, "trailing characters");
        }
        *ret = v;
        return 0;
}

const json_value *json_get(const json_value *obj, const char *key) {
        if (!obj || obj->type != JSON_OBJECT)
                return NULL;
        /* The last of duplicate keys wins, as most readers do. */
        for (size_t i = obj->n; i > 0; i--)
                if (strcmp(obj->keys[i - 1], key) == 0)
                        return obj->items[i - 1];
        return NULL;
}

const char *json_get_string(const json_value *obj, const char *key) {
        const json_value *v = json_get(obj, key);
        return v && v->type == JSON_STRING ? v->text : NULL;
}

int json_value_u64(const json_value *v, uint64_t *ret) {
        char *end;
        unsigned long long u;

        if (v->type != JSON_NUMBER || v->text[0] == '-' || strpbrk(v->text, ".eE"))
                return -EINVAL;
        errno = 0;
        u = strtoull(v->text, &end, 10);
        if (errno != 0 || *end != 0)
                return -EINVAL;
        *ret = u;
        return 0;
}

int json_get_u64(const json_value *obj, const char *key, uint64_t *ret) {
        const json_value *v = json_get(obj, key);
        return v ? json_value_u64(v, ret) : -ENOENT;
}
