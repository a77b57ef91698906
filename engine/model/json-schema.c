/* SPDX-License-Identifier: MIT */
/* JSON Schema to grammar. The JSON written is compact (no white space between tokens), with
 * an object's properties in the schema's order. Supported: type (one or a list), properties,
 * required, additionalProperties (false; other properties are never written anyway), items,
 * minItems, maxItems, enum, const, anyOf, minLength, maxLength, format "date", and the
 * annotations (title, description, default, examples, $schema, $id, $comment). Anything
 * else is refused by name, so a request never gets output that its schema would reject. */
#include <errno.h>
#include <stdio.h>
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

static const char *const BASE =
        "char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n"
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
                "description", "default", "examples", "$schema", "$id", "$comment",
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

/* The body of a rule for one type of s. */
static int type_body(gen *g, const json_value *s, const char *type, const char *name, const char *path) {
        char child[32], p[256];
        int r;
        if (strcmp(type, "null") == 0 || strcmp(type, "boolean") == 0 || strcmp(type, "number") == 0 ||
            strcmp(type, "integer") == 0) {
                put(g, type);
                return 0;
        }
        if (strcmp(type, "string") == 0) {
                uint64_t min, max;
                const char *format = json_get_string(s, "format");
                if (json_get(s, "format") && (!format || strcmp(format, "date") != 0))
                        return fail(g, path, "the format '%s' is not supported (only 'date')",
                                    format ? format : "?");
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
        for (size_t i = 0; i < n && r >= 0; i++)
                r = rule(&g, schemas[i], names[i], "#");
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
        gen g = { .err = err };
        int r = rule(&g, s, "root", "#");
        put(&g, BASE);
        if (r < 0 || g.oom) {
                free(g.out);
                return r < 0 ? r : axp_errorf(err, -ENOMEM, "out of memory");
        }
        *ret = g.out;
        return 0;
}
