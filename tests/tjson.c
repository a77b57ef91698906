/* SPDX-License-Identifier: MIT */
#include "tjson.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

typedef struct parser {
        const char *p, *end;
        bool bad;
} parser;

static void ws(parser *ps) {
        while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\n' || *ps->p == '\t' || *ps->p == '\r'))
                ps->p++;
}

static tj *value(parser *ps, int depth);

static void put_utf8(char **out, size_t *n, unsigned cp) {
        char *o = *out + *n;
        if (cp < 0x80)
                o[0] = (char) cp, *n += 1;
        else if (cp < 0x800)
                o[0] = (char) (0xc0 | cp >> 6), o[1] = (char) (0x80 | (cp & 63)), *n += 2;
        else if (cp < 0x10000)
                o[0] = (char) (0xe0 | cp >> 12), o[1] = (char) (0x80 | ((cp >> 6) & 63)),
                o[2] = (char) (0x80 | (cp & 63)), *n += 3;
        else
                o[0] = (char) (0xf0 | cp >> 18), o[1] = (char) (0x80 | ((cp >> 12) & 63)),
                o[2] = (char) (0x80 | ((cp >> 6) & 63)), o[3] = (char) (0x80 | (cp & 63)), *n += 4;
}

static bool hex4(parser *ps, unsigned *ret) {
        unsigned v = 0;
        for (int i = 0; i < 4; i++) {
                if (ps->p >= ps->end)
                        return false;
                char c = *ps->p++;
                v <<= 4;
                if (c >= '0' && c <= '9') v |= (unsigned) (c - '0');
                else if (c >= 'a' && c <= 'f') v |= (unsigned) (c - 'a' + 10);
                else if (c >= 'A' && c <= 'F') v |= (unsigned) (c - 'A' + 10);
                else return false;
        }
        *ret = v;
        return true;
}

static char *string(parser *ps, size_t *ret_len) {
        if (ps->p >= ps->end || *ps->p != '"')
                return NULL;
        ps->p++;
        char *out = malloc((size_t) (ps->end - ps->p) * 2 + 1);
        size_t n = 0;
        while (ps->p < ps->end && *ps->p != '"') {
                char c = *ps->p++;
                if (c != '\\') {
                        out[n++] = c;
                        continue;
                }
                if (ps->p >= ps->end)
                        break;
                c = *ps->p++;
                unsigned cp;
                switch (c) {
                case 'n': out[n++] = '\n'; break;
                case 't': out[n++] = '\t'; break;
                case 'r': out[n++] = '\r'; break;
                case 'b': out[n++] = '\b'; break;
                case 'f': out[n++] = '\f'; break;
                case 'u':
                        if (!hex4(ps, &cp))
                                goto bad;
                        if (cp >= 0xd800 && cp < 0xdc00 && ps->p + 6 <= ps->end && ps->p[0] == '\\' && ps->p[1] == 'u') {
                                unsigned lo;
                                ps->p += 2;
                                if (!hex4(ps, &lo))
                                        goto bad;
                                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                        }
                        put_utf8(&out, &n, cp);
                        break;
                default: out[n++] = c; break;
                }
        }
        if (ps->p >= ps->end)
                goto bad;
        ps->p++;
        out[n] = 0;
        *ret_len = n;
        return out;
bad:
        free(out);
        return NULL;
}

static tj *container(parser *ps, bool obj, int depth) {
        tj *v = calloc(1, sizeof(tj));
        v->type = obj ? TJ_OBJ : TJ_ARR;
        size_t cap = 0;
        ps->p++;
        ws(ps);
        if (ps->p < ps->end && *ps->p == (obj ? '}' : ']')) {
                ps->p++;
                return v;
        }
        for (;;) {
                char *key = NULL;
                size_t kl;
                ws(ps);
                if (obj) {
                        if (!(key = string(ps, &kl)))
                                break;
                        ws(ps);
                        if (ps->p >= ps->end || *ps->p++ != ':') {
                                free(key);
                                break;
                        }
                }
                tj *item = value(ps, depth + 1);
                if (!item) {
                        free(key);
                        break;
                }
                if (v->n == cap) {
                        cap = cap ? cap * 2 : 8;
                        v->items = realloc(v->items, cap * sizeof(tj *));
                        if (obj)
                                v->keys = realloc(v->keys, cap * sizeof(char *));
                }
                v->items[v->n] = item;
                if (obj)
                        v->keys[v->n] = key;
                v->n++;
                ws(ps);
                if (ps->p < ps->end && *ps->p == ',') {
                        ps->p++;
                        continue;
                }
                if (ps->p < ps->end && *ps->p == (obj ? '}' : ']')) {
                        ps->p++;
                        return v;
                }
                break;
        }
        tj_free(v);
        return NULL;
}

static tj *value(parser *ps, int depth) {
        ws(ps);
        if (ps->p >= ps->end || depth > 64)
                return NULL;
        char c = *ps->p;
        if (c == '{' || c == '[')
                return container(ps, c == '{', depth);
        tj *v = calloc(1, sizeof(tj));
        if (c == '"') {
                v->type = TJ_STR;
                if (!(v->str = string(ps, &v->str_len))) {
                        free(v);
                        return NULL;
                }
        } else if (ps->end - ps->p >= 4 && !strncmp(ps->p, "true", 4)) {
                v->type = TJ_BOOL, v->b = true, ps->p += 4;
        } else if (ps->end - ps->p >= 5 && !strncmp(ps->p, "false", 5)) {
                v->type = TJ_BOOL, ps->p += 5;
        } else if (ps->end - ps->p >= 4 && !strncmp(ps->p, "null", 4)) {
                v->type = TJ_NULL, ps->p += 4;
        } else {
                char buf[64];
                size_t n = 0;
                while (ps->p < ps->end && n < sizeof(buf) - 1 && strchr("+-0123456789.eE", *ps->p))
                        buf[n++] = *ps->p++;
                buf[n] = 0;
                char *e;
                v->type = TJ_NUM;
                v->num = strtod(buf, &e);
                if (n == 0 || *e) {
                        free(v);
                        return NULL;
                }
        }
        return v;
}

tj *tj_parse(const char *text, size_t len) {
        parser ps = { text, text + len, false };
        tj *v = value(&ps, 0);
        ws(&ps);
        if (v && ps.p != ps.end) {
                tj_free(v);
                return NULL;
        }
        return v;
}

tj *tj_parse_file(const char *path) {
        char *buf;
        size_t len;
        if (axp_read_file(path, &buf, &len, NULL) < 0)
                return NULL;
        tj *v = tj_parse(buf, len);
        free(buf);
        return v;
}

void tj_free(tj *v) {
        if (!v)
                return;
        for (size_t i = 0; i < v->n; i++) {
                tj_free(v->items[i]);
                if (v->keys)
                        free(v->keys[i]);
        }
        free(v->items);
        free(v->keys);
        free(v->str);
        free(v);
}

const tj *tj_get(const tj *v, const char *path) {
        char key[128];
        while (v && *path) {
                const char *dot = strchr(path, '.');
                size_t n = dot ? (size_t) (dot - path) : strlen(path);
                if (v->type != TJ_OBJ || n >= sizeof(key))
                        return NULL;
                memcpy(key, path, n);
                key[n] = 0;
                const tj *next = NULL;
                for (size_t i = 0; i < v->n; i++)
                        if (strcmp(v->keys[i], key) == 0) {
                                next = v->items[i];
                                break;
                        }
                v = next;
                path += n + (dot ? 1 : 0);
        }
        return v;
}

const tj *tj_at(const tj *v, size_t i) {
        return v && (v->type == TJ_ARR || v->type == TJ_OBJ) && i < v->n ? v->items[i] : NULL;
}
