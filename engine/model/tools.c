/* SPDX-License-Identifier: MIT */
/* Tool calls (tools.h explains the formats and the grammar). */
#include "tools.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/json.h"
#include "base/strbuf.h"
#include "grammar.h"

struct axp_tools {
        json_value *list;          /* the parsed list, as given */
        size_t n;
        const char **names;        /* into list */
        const json_value **params; /* into list, or &empty_object */
};

static json_value empty_object = { .type = JSON_OBJECT };

typedef struct out {
        char *buf;
        size_t len, cap;
        int r;
} out;

static void puts_(out *o, const char *s) {
        if (o->r == 0)
                o->r = axp_strbuf_puts(&o->buf, &o->len, &o->cap, s);
}

static void put(out *o, const char *s, size_t n) {
        if (o->r == 0)
                o->r = axp_strbuf_append(&o->buf, &o->len, &o->cap, s, n);
}

static void put_indent(out *o, int indent, int depth) {
        puts_(o, "\n");
        for (int i = 0; i < indent * depth; i++)
                puts_(o, " ");
}

/* v as Python's json.dumps(v, ensure_ascii=False) writes it (what the templates' tojson
 * gives): separators ", " and ": ", or with `indent`, one item a line. `compact`: no blanks. */
static void dump(out *o, const json_value *v, int indent, int depth, bool compact) {
        switch (v->type) {
        case JSON_NULL:
                puts_(o, "null");
                break;
        case JSON_BOOL:
                puts_(o, v->boolean ? "true" : "false");
                break;
        case JSON_NUMBER:
                puts_(o, v->text);
                break;
        case JSON_STRING:
                puts_(o, "\"");
                for (const unsigned char *c = (const unsigned char *) v->text; *c; c++) {
                        char e[8];
                        switch (*c) {
                        case '"': puts_(o, "\\\""); continue;
                        case '\\': puts_(o, "\\\\"); continue;
                        case '\n': puts_(o, "\\n"); continue;
                        case '\r': puts_(o, "\\r"); continue;
                        case '\t': puts_(o, "\\t"); continue;
                        case '\b': puts_(o, "\\b"); continue;
                        case '\f': puts_(o, "\\f"); continue;
                        }
                        if (*c < 0x20)
                                snprintf(e, sizeof(e), "\\u%04x", *c);
                        else
                                snprintf(e, sizeof(e), "%c", *c);
                        puts_(o, e);
                }
                puts_(o, "\"");
                break;
        case JSON_ARRAY:
        case JSON_OBJECT:
                puts_(o, v->type == JSON_ARRAY ? "[" : "{");
                for (size_t i = 0; i < v->n; i++) {
                        if (i)
                                puts_(o, indent || compact ? "," : ", ");
                        if (indent)
                                put_indent(o, indent, depth + 1);
                        if (v->type == JSON_OBJECT) {
                                json_value k = { .type = JSON_STRING, .text = v->keys[i] };
                                dump(o, &k, indent, depth + 1, compact);
                                puts_(o, compact ? ":" : ": ");
                        }
                        dump(o, v->items[i], indent, depth + 1, compact);
                }
                if (indent && v->n)
                        put_indent(o, indent, depth);
                puts_(o, v->type == JSON_ARRAY ? "]" : "}");
                break;
        }
}

/* Parsing ------------------------------------------------------------------------------------ */

void axp_tools_free(axp_tools *t) {
        if (!t)
                return;
        json_free(t->list);
        free(t->names);
        free(t->params);
        free(t);
}

size_t axp_tools_count(const axp_tools *t) {
        return t ? t->n : 0;
}

static bool valid_name(const char *s) {
        size_t n = strlen(s);
        if (n == 0 || n > 64)
                return false;
        for (const char *c = s; *c; c++)
                if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
                      *c == '_' || *c == '-'))
                        return false;
        return true;
}

int axp_tools_parse(const char *json, size_t len, axp_tools **ret, axp_error *err) {
        axp_error perr = {};
        _cleanup_(axp_tools_freep) axp_tools *t = NULL;

        if (len > AXP_TOOLS_MAX_BYTES)
                return axp_errorf(err, -EINVAL, "the tools are %zu bytes; at most %d are accepted", len,
                                  AXP_TOOLS_MAX_BYTES);
        t = calloc(1, sizeof(*t));
        if (!t)
                return axp_errorf(err, -ENOMEM, "out of memory");
        if (json_parse(json, len, &t->list, &perr) < 0)
                return axp_errorf(err, -EINVAL, "the tools are not valid JSON: %s", perr.msg);
        if (t->list->type != JSON_ARRAY || t->list->n == 0)
                return axp_errorf(err, -EINVAL,
                                  "the tools must be a non-empty list of {\"type\": \"function\", \"function\": "
                                  "{\"name\": ..., \"parameters\": {...}}}");
        if (t->list->n > AXP_TOOLS_MAX)
                return axp_errorf(err, -EINVAL, "%zu tools; at most %d are accepted", t->list->n, AXP_TOOLS_MAX);
        t->n = t->list->n;
        t->names = calloc(t->n, sizeof(char *));
        t->params = calloc(t->n, sizeof(json_value *));
        if (!t->names || !t->params)
                return axp_errorf(err, -ENOMEM, "out of memory");
        for (size_t i = 0; i < t->n; i++) {
                const json_value *e = t->list->items[i], *fn = json_get(e, "function"), *p;
                const char *type = json_get_string(e, "type");
                if (e->type != JSON_OBJECT || !type || strcmp(type, "function") != 0 || !fn ||
                    fn->type != JSON_OBJECT)
                        return axp_errorf(err, -EINVAL,
                                          "tools[%zu] must be {\"type\": \"function\", \"function\": {...}}", i);
                t->names[i] = json_get_string(fn, "name");
                if (!t->names[i] || !valid_name(t->names[i]))
                        return axp_errorf(err, -EINVAL,
                                          "tools[%zu].function.name must be 1 to 64 letters, digits, '_' or '-'", i);
                for (size_t j = 0; j < i; j++)
                        if (strcmp(t->names[i], t->names[j]) == 0)
                                return axp_errorf(err, -EINVAL, "tools[%zu]: the name '%s' is given twice", i,
                                                  t->names[i]);
                p = json_get(fn, "parameters");
                if (p && (p->type != JSON_OBJECT ||
                          (json_get_string(p, "type") && strcmp(json_get_string(p, "type"), "object") != 0)))
                        return axp_errorf(err, -EINVAL,
                                          "tools[%zu].function.parameters must be a JSON schema of type object", i);
                t->params[i] = p ? p : &empty_object;
        }
        *ret = TAKE_PTR(t);
        return 0;
}

/* Templates ---------------------------------------------------------------------------------- */

static bool has(const char *s, const char *sub) {
        return s && strstr(s, sub) != NULL;
}

/* Mistral's templates that take tools ([AVAILABLE_TOOLS], [TOOL_CALLS]): v3 and its tekken
 * form, which writes them without the space after the marker; the v0 family stands for v3
 * where the vocabulary has the markers but there is no template. */
static bool mistral_tools(axp_chat_family f) {
        return f == AXP_CHAT_MISTRAL || f == AXP_CHAT_MISTRAL_V3 || f == AXP_CHAT_MISTRAL_V3_TEKKEN;
}

/* How a v7 template ([SYSTEM_PROMPT]) writes a call: Mistral-Small-3.2's
 * [TOOL_CALLS]name[CALL_ID]id[ARGS]{...}, Devstral's, Magistral's and Ministral 3's
 * [TOOL_CALLS]name[ARGS]{...}, or (Mistral-Small-3.1, a family named without a template)
 * v3's JSON list. */
typedef enum { CALLS_LIST, CALLS_ARGS, CALLS_ARGS_ID } call_form;

static call_form v7_call_form(const char *tmpl) {
        if (!has(tmpl, "[ARGS]"))
                return CALLS_LIST;
        return has(tmpl, "[CALL_ID]") ? CALLS_ARGS_ID : CALLS_ARGS;
}

/* The families whose call is a JSON list of one call after a marker (Mistral's and Granite's) */
static bool calls_in_list(axp_chat_family f) {
        return mistral_tools(f) || f == AXP_CHAT_MISTRAL_V7 || f == AXP_CHAT_MISTRAL_V7_TEKKEN || f == AXP_CHAT_GRANITE;
}

bool axp_chat_takes_tools(axp_chat_family f, const char *tmpl, const axp_tokenizer *tok) {
        /* a template written out says; a family named directly or none: the vocabulary */
        bool written = tmpl && *tmpl;
        for (int i = AXP_CHAT_RAW; written && i < AXP_CHAT__COUNT; i++)
                written = strcmp(tmpl, axp_chat_family_name(i)) != 0;
        switch (f) {
        case AXP_CHAT_LLAMA3:
                return written ? has(tmpl, "tools") : tok && axp_tokenizer_find(tok, "<|python_tag|>") >= 0;
        case AXP_CHAT_CHATML:
                return written ? has(tmpl, "<tools>") || has(tmpl, "<tool_call>")
                               : tok && axp_tokenizer_find(tok, "<tool_call>") >= 0;
        case AXP_CHAT_MISTRAL:
        case AXP_CHAT_MISTRAL_V3:
        case AXP_CHAT_MISTRAL_V3_TEKKEN:
        case AXP_CHAT_MISTRAL_V7:
        case AXP_CHAT_MISTRAL_V7_TEKKEN:
                return written ? has(tmpl, "[AVAILABLE_TOOLS]")
                               : tok && axp_tokenizer_find(tok, "[AVAILABLE_TOOLS]") >= 0;
        case AXP_CHAT_GRANITE:
                return written ? has(tmpl, "available_tools") : tok && axp_tokenizer_find(tok, "<|tool_call|>") >= 0;
        case AXP_CHAT_QWEN3_CODER: /* detected from its template's tool-call form */
                return true;
        default:
                return false;
        }
}

/* Python's str.strip() of ASCII white space (what Jinja's trim leaves of a usual prompt). */
static void put_trimmed(out *o, const char *s) {
        size_t i = 0, j = strlen(s);
        while (i < j && strchr(" \t\n\r\v\f", s[i]))
                i++;
        while (j > i && strchr(" \t\n\r\v\f", s[j - 1]))
                j--;
        put(o, s + i, j - i);
}

/* A tool_call turn's content: {"name": "NAME", "arguments": {...}} (an "arguments" string that
 * holds a JSON object is read as that object). *ret_v owns what *ret_name and *ret_args point
 * into. */
static int read_call_turn(const char *content, size_t turn, json_value **ret_v, const char **ret_name,
                          const json_value **ret_args, axp_error *err) {
        _cleanup_json_ json_value *v = NULL;
        axp_error e = {};
        const json_value *args;
        const char *name;

        if (json_parse(content, strlen(content), &v, &e) < 0) {
                if (e.code == -ENOMEM)
                        return axp_errorf(err, -ENOMEM, "out of memory");
                return axp_errorf(err, -EINVAL, "turn %zu: a tool_call is not valid JSON: %s", turn, e.msg);
        }
        name = json_get_string(v, "name");
        args = json_get(v, "arguments");
        if (args && args->type == JSON_STRING) {
                json_value *inner = NULL;
                if (json_parse(args->text, strlen(args->text), &inner, &e) < 0 || inner->type != JSON_OBJECT) {
                        json_free(inner);
                        return axp_errorf(err, -EINVAL, "turn %zu: the tool_call's arguments are not a JSON object",
                                          turn);
                }
                /* keep the parsed arguments alive with v: put them in its place */
                for (size_t i = 0; i < v->n; i++)
                        if (v->items[i] == args) {
                                json_free(v->items[i]);
                                v->items[i] = inner;
                        }
                args = inner;
        }
        if (v->type != JSON_OBJECT || !name || !valid_name(name) || !args || args->type != JSON_OBJECT)
                return axp_errorf(err, -EINVAL,
                                  "turn %zu: a tool_call must be {\"name\": NAME, \"arguments\": {...}}", turn);
        *ret_name = name;
        *ret_args = args;
        *ret_v = TAKE_PTR(v);
        return 0;
}

int axp_tools_check_turns(const axp_chat_msg *msgs, size_t n, axp_error *err) {
        for (size_t i = 0; i < n; i++) {
                if (!msgs[i].role || !msgs[i].content)
                        return axp_errorf(err, -EINVAL, "turn %zu has no role or content", i + 1);
                if (strcmp(msgs[i].role, AXP_ROLE_TOOL_CALL) == 0) {
                        _cleanup_json_ json_value *v = NULL;
                        const char *name;
                        const json_value *args;
                        int r = read_call_turn(msgs[i].content, i + 1, &v, &name, &args, err);
                        if (r < 0)
                                return r;
                } else if (strcmp(msgs[i].role, AXP_ROLE_TOOL) == 0) {
                        if (i == 0 || (strcmp(msgs[i - 1].role, AXP_ROLE_TOOL_CALL) != 0 &&
                                       strcmp(msgs[i - 1].role, AXP_ROLE_TOOL) != 0))
                                return axp_errorf(err, -EINVAL, "turn %zu: a tool result must follow a tool_call turn",
                                                  i + 1);
                } else if (strcmp(msgs[i].role, "system") != 0 && strcmp(msgs[i].role, "user") != 0 &&
                           strcmp(msgs[i].role, "assistant") != 0)
                        return axp_errorf(err, -EINVAL, "turn %zu: the role must be system, user, assistant, "
                                                        "tool_call or tool", i + 1);
        }
        return 0;
}

static bool is(const axp_chat_msg *m, const char *role) {
        return strcmp(m->role, role) == 0;
}

/* An ordinary turn (system, user, assistant) as the family's template writes it. */
static void put_turn(out *o, axp_chat_family f, const axp_chat_msg *m) {
        char *turn = axp_chat_format(f, m, 1, false);
        if (!turn)
                o->r = -ENOMEM;
        else
                puts_(o, turn);
        free(turn);
}

/* A call as the family writes it (cf: a Mistral v7 template's form); `id`: Mistral's call id,
 * nine letters and digits (NULL: a form without ids). */
static void put_call(out *o, axp_chat_family f, call_form cf, const char *content, const char *id) {
        _cleanup_json_ json_value *v = NULL;
        const char *name;
        const json_value *args;
        axp_error e = {};

        if (o->r == 0 && read_call_turn(content, 0, &v, &name, &args, &e) < 0)
                o->r = e.code == -ENOMEM ? -ENOMEM : -EINVAL;
        if (o->r < 0)
                return;
        json_value n = { .type = JSON_STRING, .text = (char *) name };
        switch (f) {
        case AXP_CHAT_LLAMA3:
                puts_(o, "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": ");
                dump(o, &n, 0, 0, false);
                puts_(o, ", \"parameters\": ");
                dump(o, args, 0, 0, false);
                puts_(o, "}<|eot_id|>");
                break;
        case AXP_CHAT_CHATML:
                puts_(o, "<|im_start|>assistant\n<tool_call>\n{\"name\": ");
                dump(o, &n, 0, 0, false);
                puts_(o, ", \"arguments\": ");
                dump(o, args, 0, 0, false);
                puts_(o, "}\n</tool_call><|im_end|>\n");
                break;
        case AXP_CHAT_GRANITE: /* one call of the list the assistant's turn holds */
                puts_(o, "{\"name\": ");
                dump(o, &n, 0, 0, false);
                puts_(o, ", \"arguments\": ");
                dump(o, args, 0, 0, false);
                puts_(o, "}");
                break;
        default:
                if (cf != CALLS_LIST) { /* v7's [TOOL_CALLS]name[CALL_ID]id[ARGS]{...} */
                        puts_(o, "[TOOL_CALLS]");
                        puts_(o, name);
                        if (id) {
                                puts_(o, "[CALL_ID]");
                                puts_(o, id);
                        }
                        puts_(o, "[ARGS]");
                        dump(o, args, 0, 0, false);
                        break;
                }
                /* v3's JSON list, and its tekken form */
                puts_(o, f == AXP_CHAT_MISTRAL_V3_TEKKEN || f == AXP_CHAT_MISTRAL_V7_TEKKEN ? "[TOOL_CALLS][{\"name\": "
                                                                                             : "[TOOL_CALLS] [{\"name\": ");
                dump(o, &n, 0, 0, false);
                puts_(o, ", \"arguments\": ");
                dump(o, args, 0, 0, false);
                puts_(o, ", \"id\": \"");
                puts_(o, id);
                puts_(o, "\"}]</s>");
                break;
        }
}

/* Mistral's tool result: {"content": CONTENT, "call_id": ID}; the content as it is when it is
 * JSON (what the template writes), else as a JSON string so the whole stays JSON. */
static void put_mistral_result(out *o, axp_chat_family f, const char *content, const char *id) {
        _cleanup_json_ json_value *v = NULL;
        axp_error e = {};

        puts_(o, f == AXP_CHAT_MISTRAL_V3_TEKKEN || f == AXP_CHAT_MISTRAL_V7_TEKKEN ? "[TOOL_RESULTS]{\"content\": "
                                                                                     : "[TOOL_RESULTS] {\"content\": ");
        if (json_parse(content, strlen(content), &v, &e) == 0)
                puts_(o, content);
        else {
                json_value s = { .type = JSON_STRING, .text = (char *) content };
                dump(o, &s, 0, 0, false);
        }
        puts_(o, ", \"call_id\": \"");
        puts_(o, id);
        puts_(o, "\"}[/TOOL_RESULTS]");
}

/* Granite 3.x's system prompt when the caller gives none and there are tools: the template's
 * own, "Knowledge Cutoff Date: ... Today's Date: " + today ("%B %d, %Y") + ". You are Granite,
 * developed by IBM." + what it adds with tools (how to call one: <|tool_call|> and a JSON
 * list). Each part is the template's string literal where the template is written out (3.1's
 * and 3.3's words differ), else 3.3's. */
static const char granite_head[] = "Knowledge Cutoff Date: April 2024. Today's Date: ";
static const char granite_after_date[] = ". You are Granite, developed by IBM.";
static const char granite_tools_words[] =
        " You are a helpful assistant with access to the following tools. When a tool is required to answer the "
        "user's query, respond only with <|tool_call|> followed by a JSON list of tools used. If a tool does not "
        "exist in the provided list of tools, notify the user that you do not have the ability to fulfill the "
        "request.";

/* The literal after the first `key` in tmpl at or after `from`. */
static char *literal_after(const char *tmpl, const char *from, const char *key) {
        const char *at = from ? strstr(tmpl, from) : tmpl;
        const char *k = at ? strstr(at, key) : NULL;
        return k ? axp_jinja_literal(k + strlen(key)) : NULL;
}

static void put_granite_system(out *o, const char *tmpl) {
        _cleanup_free_ char *head = NULL, *after = NULL, *words = NULL;
        const char *h = tmpl ? strstr(tmpl, "Knowledge Cutoff Date") : NULL;
        if (h && h > tmpl && (h[-1] == '"' || h[-1] == '\''))
                head = axp_jinja_literal(h - 1);
        /* the literal after the date, and the words with tools (3.3: available_tools; 3.1: tools) */
        if (head && strstr(tmpl, "strftime_now("))
                after = literal_after(tmpl, "strftime_now(", ") +");
        if (head && after) {
                words = literal_after(tmpl, "elif available_tools %}", "system_message +");
                if (!words)
                        words = literal_after(tmpl, "elif tools %}", "system_message +");
        }
        if (!head || !after || !words) {
                puts_(o, granite_head);
                head = NULL;
        } else
                puts_(o, head);
        char date[64];
        time_t now = time(NULL);
        struct tm tm;
        if (localtime_r(&now, &tm) && strftime(date, sizeof(date), "%B %d, %Y", &tm) > 0)
                puts_(o, date);
        puts_(o, head ? after : granite_after_date);
        puts_(o, head ? words : granite_tools_words);
}

/* Qwen3-Coder's XML form --------------------------------------------------------------------- */

/* v as Jinja's `| string` writes it (Python's str()): a string as it is, true/false/null as
 * True/False/None, a number as written, lists and objects as Python's repr. */
static void put_pystr(out *o, const json_value *v, bool repr) {
        switch (v->type) {
        case JSON_NULL:
                puts_(o, "None");
                break;
        case JSON_BOOL:
                puts_(o, v->boolean ? "True" : "False");
                break;
        case JSON_NUMBER:
                puts_(o, v->text);
                break;
        case JSON_STRING:
                if (!repr) {
                        puts_(o, v->text);
                        break;
                }
                puts_(o, "'");
                for (const char *c = v->text; *c; c++) {
                        if (*c == '\'' || *c == '\\')
                                puts_(o, "\\");
                        if (*c == '\n')
                                puts_(o, "\\n");
                        else
                                put(o, c, 1);
                }
                puts_(o, "'");
                break;
        case JSON_ARRAY:
        case JSON_OBJECT:
                puts_(o, v->type == JSON_ARRAY ? "[" : "{");
                for (size_t i = 0; i < v->n; i++) {
                        if (i)
                                puts_(o, ", ");
                        if (v->type == JSON_OBJECT) {
                                json_value k = { .type = JSON_STRING, .text = v->keys[i] };
                                put_pystr(o, &k, true);
                                puts_(o, ": ");
                        }
                        put_pystr(o, v->items[i], true);
                }
                puts_(o, v->type == JSON_ARRAY ? "]" : "}");
                break;
        }
}

/* A value as the template writes an argument or an extra key: objects and lists as JSON
 * (tojson), anything else as Python's str() */
static void put_xml_value(out *o, const json_value *v) {
        if (v->type == JSON_OBJECT || v->type == JSON_ARRAY)
                dump(o, v, 0, 0, false);
        else
                put_pystr(o, v, false);
}

/* The template's render_extra_keys: each key of object v not in `handled` as
 * "\n<KEY>VALUE</KEY>" */
static void put_extra_keys(out *o, const json_value *v, const char *const *handled) {
        if (!v || v->type != JSON_OBJECT)
                return;
        for (size_t i = 0; i < v->n; i++) {
                bool skip = false;
                for (const char *const *h = handled; *h && !skip; h++)
                        skip = strcmp(v->keys[i], *h) == 0;
                if (skip)
                        continue;
                puts_(o, "\n<");
                puts_(o, v->keys[i]);
                puts_(o, ">");
                put_xml_value(o, v->items[i]);
                puts_(o, "</");
                puts_(o, v->keys[i]);
                puts_(o, ">");
        }
}

/* "\n<TAG>" + trim(str(v)) + "</TAG>" (descriptions) */
static void put_trimmed_tag(out *o, const char *tag, const json_value *v) {
        out s = {};
        put_pystr(&s, v, false);
        put(&s, "", 0);
        puts_(o, "\n<");
        puts_(o, tag);
        puts_(o, ">");
        if (s.r < 0)
                o->r = s.r;
        else
                put_trimmed(o, s.buf);
        puts_(o, "</");
        puts_(o, tag);
        puts_(o, ">");
        free(s.buf);
}

/* The tools as Qwen3-Coder's template lists them: <function>, <name>, <description>,
 * <parameters> with a <parameter> (name, type, description, its other keys) for each
 * property, the schema's and the function's other keys, in their order. */
static void put_xml_tools(out *o, const axp_tools *t) {
        static const char *const param_keys[] = { "name", "type", "description", NULL };
        static const char *const schema_keys[] = { "type", "properties", NULL };
        static const char *const function_keys[] = { "type", "name", "description", "parameters", NULL };
        puts_(o, "<tools>");
        for (size_t k = 0; k < t->n; k++) {
                const json_value *fn = json_get(t->list->items[k], "function"), *d = json_get(fn, "description");
                const json_value *params = json_get(fn, "parameters"), *props = json_get(params, "properties");
                puts_(o, "\n<function>\n<name>");
                puts_(o, t->names[k]);
                puts_(o, "</name>");
                if (d)
                        put_trimmed_tag(o, "description", d);
                puts_(o, "\n<parameters>");
                for (size_t i = 0; props && props->type == JSON_OBJECT && i < props->n; i++) {
                        const json_value *p = props->items[i], *pt = json_get(p, "type"), *pd = json_get(p, "description");
                        puts_(o, "\n<parameter>\n<name>");
                        puts_(o, props->keys[i]);
                        puts_(o, "</name>");
                        if (pt) {
                                puts_(o, "\n<type>");
                                put_pystr(o, pt, false);
                                puts_(o, "</type>");
                        }
                        if (pd)
                                put_trimmed_tag(o, "description", pd);
                        put_extra_keys(o, p, param_keys);
                        puts_(o, "\n</parameter>");
                }
                put_extra_keys(o, params, schema_keys);
                puts_(o, "\n</parameters>");
                put_extra_keys(o, fn, function_keys);
                puts_(o, "\n</function>");
        }
        puts_(o, "\n</tools>");
}

/* One call as its template writes it: <tool_call>, <function=NAME>, each argument in
 * <parameter=KEY> */
static void put_xml_call(out *o, const char *content) {
        _cleanup_json_ json_value *v = NULL;
        const char *name = NULL;
        const json_value *args = NULL;
        axp_error e = {};

        if (o->r == 0 && read_call_turn(content, 0, &v, &name, &args, &e) < 0)
                o->r = e.code == -ENOMEM ? -ENOMEM : -EINVAL;
        if (o->r < 0)
                return;
        puts_(o, "\n<tool_call>\n<function=");
        puts_(o, name);
        puts_(o, ">\n");
        for (size_t i = 0; i < args->n; i++) {
                puts_(o, "<parameter=");
                puts_(o, args->keys[i]);
                puts_(o, ">\n");
                put_xml_value(o, args->items[i]);
                puts_(o, "\n</parameter>\n");
        }
        puts_(o, "</function>\n</tool_call>");
}

static const char qwen3_coder_system[] =
        "You are Qwen, a helpful AI assistant that can interact with a computer to solve tasks.";
static const char qwen3_coder_instructions[] =
        "\n\nIf you choose to call a tool ONLY reply in the following format with NO suffix:\n\n<tool_call>\n"
        "<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n"
        "<parameter=example_parameter_2>\nvalue_2\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\n"
        "Reminder:\n- Function calls MUST follow the specified format: the tool calling block MUST begin with "
        "an opening <tool_call> tag and end with a closing </tool_call> tag.\n- Required parameters MUST be "
        "specified\n- You may provide optional reasoning for your function call in natural language BEFORE the "
        "function call, but NOT after\n- If there is no function call available, answer the question like "
        "normal with your current knowledge and do not tell the user about function calls\n</IMPORTANT>";

int axp_tools_format_chat(axp_chat_family f, const char *tmpl, const axp_tools *t, const char *system,
                          const axp_chat_msg *msgs, size_t n, char **ret, axp_error *err) {
        out o = {};
        bool sys = system && system[0];
        size_t last_user = n, first_user = n, calls = 0, run = 0, results = 0;
        char id[16] = "";
        int r;

        if ((r = axp_tools_check_turns(msgs, n, err)) < 0)
                return r;
        for (size_t i = 0; i < n; i++)
                if (is(&msgs[i], "user")) {
                        last_user = i;
                        if (first_user == n)
                                first_user = i;
                }
        if (first_user == n)
                return axp_errorf(err, -EINVAL, "a conversation with tools needs a user turn");

        switch (f) {
        case AXP_CHAT_LLAMA3:
                /* Llama 3.1's template with tools_in_user_message (its default): the tools in
                 * the first user turn, a call as the assistant's JSON, a result in an ipython turn */
                puts_(&o, "<|start_header_id|>system<|end_header_id|>\n\n");
                if (t)
                        puts_(&o, "Environment: ipython\n");
                puts_(&o, "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n");
                if (sys)
                        put_trimmed(&o, system);
                puts_(&o, "<|eot_id|>");
                for (size_t i = 0; i < n; i++) {
                        if (i == first_user && t) {
                                puts_(&o, "<|start_header_id|>user<|end_header_id|>\n\n");
                                puts_(&o, "Given the following functions, please respond with a JSON for a function "
                                          "call with its proper arguments that best answers the given prompt.\n\n");
                                puts_(&o, "Respond in the format {\"name\": function name, \"parameters\": dictionary "
                                          "of argument name and its value}.Do not use variables.\n\n");
                                for (size_t k = 0; k < t->n; k++) {
                                        dump(&o, t->list->items[k], 4, 0, false);
                                        puts_(&o, "\n\n");
                                }
                                put_trimmed(&o, msgs[i].content);
                                puts_(&o, "<|eot_id|>");
                        } else if (is(&msgs[i], AXP_ROLE_TOOL_CALL))
                                put_call(&o, f, CALLS_LIST, msgs[i].content, NULL);
                        else if (is(&msgs[i], AXP_ROLE_TOOL)) {
                                puts_(&o, "<|start_header_id|>ipython<|end_header_id|>\n\n");
                                puts_(&o, msgs[i].content);
                                puts_(&o, "<|eot_id|>");
                        } else {
                                put_turn(&o, f, &msgs[i]);
                        }
                }
                puts_(&o, "<|start_header_id|>assistant<|end_header_id|>\n\n");
                break;
        case AXP_CHAT_CHATML:
                /* Qwen2.5/3: the tools after the system prompt (Qwen2.5's default system prompt,
                 * when none is given, is left to the caller as without tools); a call in
                 * <tool_call>, the results of a run of tool turns in one user turn; without
                 * tools the system prompt alone */
                if (!t) {
                        if (sys)
                                put_turn(&o, f, &(axp_chat_msg) { "system", system });
                } else {
                        puts_(&o, "<|im_start|>system\n");
                        if (sys) {
                                puts_(&o, system);
                                puts_(&o, "\n\n");
                        }
                        puts_(&o, "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                                  "You are provided with function signatures within <tools></tools> XML tags:\n"
                                  "<tools>");
                        for (size_t k = 0; k < t->n; k++) {
                                puts_(&o, "\n");
                                dump(&o, t->list->items[k], 0, 0, false);
                        }
                        puts_(&o, "\n</tools>\n\nFor each function call, return a json object with function name "
                                  "and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
                                  "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n");
                }
                for (size_t i = 0; i < n; i++) {
                        if (is(&msgs[i], AXP_ROLE_TOOL_CALL))
                                put_call(&o, f, CALLS_LIST, msgs[i].content, NULL);
                        else if (is(&msgs[i], AXP_ROLE_TOOL)) {
                                if (i == 0 || !is(&msgs[i - 1], AXP_ROLE_TOOL))
                                        puts_(&o, "<|im_start|>user");
                                puts_(&o, "\n<tool_response>\n");
                                puts_(&o, msgs[i].content);
                                puts_(&o, "\n</tool_response>");
                                if (i == n - 1 || !is(&msgs[i + 1], AXP_ROLE_TOOL))
                                        puts_(&o, "<|im_end|>\n");
                        } else {
                                put_turn(&o, f, &msgs[i]);
                        }
                }
                puts_(&o, "<|im_start|>assistant\n");
                break;
        case AXP_CHAT_MISTRAL:
        case AXP_CHAT_MISTRAL_V3:
        case AXP_CHAT_MISTRAL_V3_TEKKEN:
        case AXP_CHAT_MISTRAL_V7:
        case AXP_CHAT_MISTRAL_V7_TEKKEN: {
                /* The tools before the last user turn (no space after the markers in the
                 * tekken forms). v3: the system prompt inside the last user turn when that is
                 * the conversation's last, a system turn in the middle dropped (the template
                 * has none). v7 (Mistral-Small-3.x, Devstral, Magistral, Ministral 3): the system
                 * prompt in its block first and system turns where they stand, where
                 * Mistral-Small-3.2's template puts them. Calls and results in the template's
                 * form (v7_call_form), an id naming each call where the form has ids: the
                 * calls' places, "call00001", nine letters and digits as the templates require;
                 * [TOOL_CALLS]name[ARGS] calls of one answer closed by one </s>. */
                const bool v7 = f == AXP_CHAT_MISTRAL_V7 || f == AXP_CHAT_MISTRAL_V7_TEKKEN;
                const bool tekken = f == AXP_CHAT_MISTRAL_V3_TEKKEN || f == AXP_CHAT_MISTRAL_V7_TEKKEN;
                const call_form cf = v7 ? v7_call_form(tmpl) : CALLS_LIST;
                const axp_chat_family ff = f == AXP_CHAT_MISTRAL ? AXP_CHAT_MISTRAL_V3 : f;
                if (v7 && sys)
                        put_turn(&o, f, &(axp_chat_msg) { "system", system });
                for (size_t i = 0; i < n; i++) {
                        if (i == last_user && t) {
                                puts_(&o, tekken ? "[AVAILABLE_TOOLS]" : "[AVAILABLE_TOOLS] ");
                                dump(&o, t->list, 0, 0, false);
                                puts_(&o, "[/AVAILABLE_TOOLS]");
                        }
                        if (is(&msgs[i], AXP_ROLE_TOOL_CALL)) {
                                /* a run of calls answered by a run of results, in order */
                                if (i == 0 || !is(&msgs[i - 1], AXP_ROLE_TOOL_CALL))
                                        run = calls;
                                snprintf(id, sizeof(id), "call%05zu", ++calls % 100000);
                                put_call(&o, ff, cf, msgs[i].content, cf == CALLS_ARGS ? NULL : id);
                                if (cf != CALLS_LIST && (i == n - 1 || !is(&msgs[i + 1], AXP_ROLE_TOOL_CALL)))
                                        puts_(&o, "</s>");
                        } else if (is(&msgs[i], AXP_ROLE_TOOL)) {
                                if (is(&msgs[i - 1], AXP_ROLE_TOOL_CALL))
                                        results = 0;
                                snprintf(id, sizeof(id), "call%05zu", (run + ++results) % 100000);
                                if (cf == CALLS_LIST)
                                        put_mistral_result(&o, ff, msgs[i].content, id);
                                else {
                                        puts_(&o, "[TOOL_RESULTS]");
                                        if (cf == CALLS_ARGS_ID) {
                                                puts_(&o, id);
                                                puts_(&o, "[TOOL_CONTENT]");
                                        }
                                        puts_(&o, msgs[i].content);
                                        puts_(&o, "[/TOOL_RESULTS]");
                                }
                        } else if (v7 || is(&msgs[i], "assistant")) {
                                put_turn(&o, f, &msgs[i]);
                        } else if (is(&msgs[i], "user")) {
                                axp_chat_msg two[2];
                                size_t k = 0;
                                if (sys && i == n - 1)
                                        two[k++] = (axp_chat_msg) { "system", system };
                                two[k++] = msgs[i];
                                char *turn = axp_chat_format(f, two, k, false);
                                if (!turn)
                                        o.r = -ENOMEM;
                                else
                                        puts_(&o, turn);
                                free(turn);
                        }
                }
                break;
        }
        case AXP_CHAT_GRANITE: {
                /* Granite 3.x: the system prompt (the template's own, which says how to call a
                 * tool, where none is given and there are tools), the tools in an
                 * available_tools turn (3.2+: the list as indented JSON; 3.1, whose template
                 * writes them one by one: each tool, a blank line between), a run of calls as
                 * one assistant turn <|tool_call|>[{...}, {...}], each result in a turn of the
                 * role the template names (3.1's tool_response, else tool) */
                const bool each = has(tmpl, "for tool in tools");
                const char *result_role = has(tmpl, "tool_response") ? "tool_response" : "tool";
                if (sys || t) {
                        puts_(&o, "<|start_of_role|>system<|end_of_role|>");
                        if (sys)
                                puts_(&o, system);
                        else
                                put_granite_system(&o, tmpl && *tmpl ? tmpl : NULL);
                        puts_(&o, "<|end_of_text|>\n");
                }
                if (t) {
                        puts_(&o, each ? "<|start_of_role|>available_tools<|end_of_role|>\n"
                                       : "<|start_of_role|>available_tools<|end_of_role|>");
                        if (each)
                                for (size_t k = 0; k < t->n; k++) {
                                        if (k)
                                                puts_(&o, "\n\n");
                                        dump(&o, t->list->items[k], 4, 0, false);
                                }
                        else
                                dump(&o, t->list, 4, 0, false);
                        puts_(&o, "<|end_of_text|>\n");
                }
                for (size_t i = 0; i < n; i++) {
                        if (is(&msgs[i], AXP_ROLE_TOOL_CALL)) {
                                bool first = i == 0 || !is(&msgs[i - 1], AXP_ROLE_TOOL_CALL);
                                bool last = i == n - 1 || !is(&msgs[i + 1], AXP_ROLE_TOOL_CALL);
                                puts_(&o, first ? "<|start_of_role|>assistant<|end_of_role|><|tool_call|>[" : ", ");
                                put_call(&o, f, CALLS_LIST, msgs[i].content, NULL);
                                if (last)
                                        puts_(&o, "]<|end_of_text|>\n");
                        } else if (is(&msgs[i], AXP_ROLE_TOOL)) {
                                puts_(&o, "<|start_of_role|>");
                                puts_(&o, result_role);
                                puts_(&o, "<|end_of_role|>");
                                puts_(&o, msgs[i].content);
                                puts_(&o, "<|end_of_text|>\n");
                        } else
                                put_turn(&o, f, &msgs[i]);
                }
                puts_(&o, "<|start_of_role|>assistant<|end_of_role|>");
                break;
        }
        case AXP_CHAT_QWEN3_CODER:
                /* Qwen3-Coder: the system prompt (its own where none is given and there are
                 * tools), then the tools in XML and how to call them; a run of calls in one
                 * assistant turn, each <tool_call><function=NAME> with its arguments in
                 * <parameter=KEY> (strings as they are, lists and objects as JSON); the
                 * results of a run of tool turns in one user turn */
                if (sys || t) {
                        puts_(&o, "<|im_start|>system\n");
                        puts_(&o, sys ? system : qwen3_coder_system);
                }
                if (t) {
                        puts_(&o, "\n\n# Tools\n\nYou have access to the following tools:\n\n");
                        put_xml_tools(&o, t);
                        puts_(&o, qwen3_coder_instructions);
                }
                if (sys || t)
                        puts_(&o, "<|im_end|>\n");
                for (size_t i = 0; i < n; i++) {
                        if (is(&msgs[i], AXP_ROLE_TOOL_CALL)) {
                                if (i == 0 || !is(&msgs[i - 1], AXP_ROLE_TOOL_CALL))
                                        puts_(&o, "<|im_start|>assistant");
                                put_xml_call(&o, msgs[i].content);
                                if (i == n - 1 || !is(&msgs[i + 1], AXP_ROLE_TOOL_CALL))
                                        puts_(&o, "<|im_end|>\n");
                        } else if (is(&msgs[i], AXP_ROLE_TOOL)) {
                                if (!is(&msgs[i - 1], AXP_ROLE_TOOL))
                                        puts_(&o, "<|im_start|>user\n");
                                puts_(&o, "<tool_response>\n");
                                puts_(&o, msgs[i].content);
                                puts_(&o, "\n</tool_response>\n");
                                if (i == n - 1 || !is(&msgs[i + 1], AXP_ROLE_TOOL))
                                        puts_(&o, "<|im_end|>\n");
                        } else
                                put_turn(&o, f, &msgs[i]);
                }
                puts_(&o, "<|im_start|>assistant\n");
                break;
        default:
                free(o.buf);
                return axp_errorf(err, -EINVAL, "the model's chat template does not take tools");
        }
        if (o.r < 0) {
                free(o.buf);
                return axp_errorf(err, o.r, o.r == -ENOMEM ? "out of memory" : "a tool_call turn is malformed");
        }
        *ret = o.buf;
        return 0;
}

/* Grammar ------------------------------------------------------------------------------------- */

/* A GBNF literal of s. */
static void put_literal(out *o, const char *s) {
        puts_(o, "\"");
        for (const char *c = s; *c; c++) {
                if (*c == '"' || *c == '\\') {
                        char e[3] = { '\\', *c, 0 };
                        puts_(o, e);
                } else if (*c == '\n')
                        puts_(o, "\\n");
                else
                        put(o, c, 1);
        }
        puts_(o, "\"");
}

/* One character in a GBNF character class. */
static void put_class_char(out *o, char c) {
        if (c == '\n')
                puts_(o, "\\n");
        else if (strchr("\\[]^-", c)) {
                char e[3] = { '\\', c, 0 };
                puts_(o, e);
        } else
                put(o, &c, 1);
}

/* The text the first character of the call does not begin. */
static void put_text(out *o, const char *first) {
        puts_(o, "text ::= [^");
        put_class_char(o, first[0]);
        puts_(o, "] [^\\x00]*\n");
}

/* Text without `marker` anywhere, as rule `rule`: a rule for each state of reading it,
 * RULE-N when the text ends with N of its first bytes (RULE: none), each taking a byte to the
 * state that follows (the longest of the marker's beginnings the text then ends with; any
 * byte that begins none back to RULE), the marker's last byte nowhere. The references are last
 * in their alternatives: the matcher's stacks do not grow. */
static void put_text_without(out *o, const char *marker, const char *rule) {
        size_t k = strlen(marker);
        char name[64];

        assert(k > 0 && k < 32 && strlen(rule) < 32);
        for (size_t q = 0; q < k; q++) {
                char special[32] = ""; /* the bytes that go elsewhere than back to RULE */
                size_t n = 0;
                if (q == 0)
                        snprintf(name, sizeof(name), "%s ::= \"\"", rule);
                else
                        snprintf(name, sizeof(name), "%s-%zu ::= \"\"", rule, q);
                puts_(o, name);
                for (size_t i = 0; i < k; i++) {
                        char c = marker[i];
                        if (memchr(special, c, n))
                                continue;
                        /* marker[0..q) then c: the longest beginning of the marker it ends with */
                        size_t to = q + 1;
                        while (to > 0 && !(marker[to - 1] == c && memcmp(marker, marker + q + 1 - to, to - 1) == 0))
                                to--;
                        if (to == 0)
                                continue;
                        special[n++] = c;
                        if (to == k)
                                continue;
                        char lit[2] = { c, 0 };
                        puts_(o, " | ");
                        put_literal(o, lit);
                        snprintf(name, sizeof(name), " %s-%zu", rule, to);
                        puts_(o, name);
                }
                puts_(o, " | [^");
                for (size_t i = 0; i < n; i++)
                        put_class_char(o, special[i]);
                snprintf(name, sizeof(name), "\\x00] %s\n", rule);
                puts_(o, name);
        }
}

int axp_tool_choice_from_string(const char *s, axp_tool_choice *ret, axp_error *err) {
        if (!s || strcmp(s, "auto") == 0)
                *ret = AXP_TOOL_CHOICE_AUTO;
        else if (strcmp(s, "required") == 0)
                *ret = AXP_TOOL_CHOICE_REQUIRED;
        else if (strcmp(s, "none") == 0)
                *ret = AXP_TOOL_CHOICE_NONE;
        else
                return axp_errorf(err, -EINVAL, "tool_choice must be 'auto', 'required' or 'none', got '%s'", s);
        return 0;
}

/* How an argument is written in the XML form (Qwen3-Coder's), by its schema: a string as the
 * text itself (read back as a string), an enum or const of strings as one of them, a value of
 * another type (or a structure) as JSON under its schema, a schema that says nothing of its
 * type as any text (read back as JSON where it is, else as a string). */
typedef enum { ARG_TEXT, ARG_ENUM, ARG_JSON, ARG_ANY } arg_kind;

static arg_kind xml_arg_kind(const json_value *s) {
        const json_value *type = json_get(s, "type"), *e = json_get(s, "enum"), *c = json_get(s, "const");
        if (c)
                return c->type == JSON_STRING ? ARG_ENUM : ARG_JSON;
        if (e) {
                bool strings = e->type == JSON_ARRAY && e->n > 0;
                for (size_t i = 0; strings && i < e->n; i++)
                        strings = e->items[i]->type == JSON_STRING;
                return strings ? ARG_ENUM : ARG_JSON;
        }
        if (type)
                return type->type == JSON_STRING && strcmp(type->text, "string") == 0 ? ARG_TEXT : ARG_JSON;
        static const char *const structure[] = { "properties", "items", "anyOf", "oneOf", "allOf", "$ref" };
        for (size_t i = 0; i < sizeof(structure) / sizeof(structure[0]); i++)
                if (json_get(s, structure[i]))
                        return ARG_JSON;
        return ARG_ANY;
}

/* The properties of tool i's parameters schema (NULL: none) and whether key is required */
static const json_value *xml_props(const axp_tools *t, size_t i) {
        const json_value *p = json_get(t->params[i], "properties");
        return p && p->type == JSON_OBJECT ? p : NULL;
}

static bool xml_required(const axp_tools *t, size_t i, const char *key) {
        const json_value *req = json_get(t->params[i], "required");
        for (size_t k = 0; req && req->type == JSON_ARRAY && k < req->n; k++)
                if (req->items[k]->type == JSON_STRING && strcmp(req->items[k]->text, key) == 0)
                        return true;
        return false;
}

/* The grammar of the XML form: a call is
 *   <tool_call>\n<function=NAME>\n (<parameter=KEY>\nVALUE\n</parameter>\n)* </function>\n</tool_call>
 * with the tool's properties in its schema's order, the required ones always; a text value
 * holds no "\n</parameter>". The text rules as chatml's (its marker <tool_call>). */
static int xml_grammar(const axp_tools *t, axp_tool_choice choice, char **ret, axp_error *err) {
        static const char marker[] = "<tool_call>", end_param[] = "\n</parameter>";
        out o = {};
        _cleanup_free_ char *rules = NULL;
        const json_value **schemas = NULL;
        char **names = NULL;
        size_t n_json = 0, cap = 0;
        int r = 0;

        if (choice == AXP_TOOL_CHOICE_NONE) {
                puts_(&o, "root ::= text\n");
                put_text_without(&o, marker, "text");
                goto done;
        }
        for (size_t i = 0; i < t->n; i++) {
                const json_value *props = xml_props(t, i);
                cap += props ? props->n : 0;
        }
        schemas = calloc(cap + 1, sizeof(*schemas));
        names = calloc(cap + 1, sizeof(*names));
        if (!schemas || !names) {
                r = axp_errorf(err, -ENOMEM, "out of memory");
                goto done;
        }
        puts_(&o, choice == AXP_TOOL_CHOICE_REQUIRED ? "root ::= call\n" : "root ::= call | text\n");
        puts_(&o, "call ::= \"<tool_call>\\n<function=\" (");
        for (size_t i = 0; i < t->n; i++) {
                char rule[64];
                snprintf(rule, sizeof(rule), "%stool%zu", i ? " | " : "", i);
                puts_(&o, rule);
        }
        puts_(&o, ") \"</function>\\n</tool_call>\"\n");
        for (size_t i = 0; i < t->n; i++) {
                const json_value *props = xml_props(t, i);
                char rule[96];
                _cleanup_free_ char *open = NULL;
                snprintf(rule, sizeof(rule), "tool%zu ::= ", i);
                puts_(&o, rule);
                if (asprintf(&open, "%s>\n", t->names[i]) < 0) {
                        open = NULL;
                        o.r = -ENOMEM;
                }
                put_literal(&o, open ? open : "");
                for (size_t k = 0; props && k < props->n; k++) {
                        snprintf(rule, sizeof(rule), " tool%zu-p%zu%s", i, k, xml_required(t, i, props->keys[k]) ? "" : "?");
                        puts_(&o, rule);
                }
                puts_(&o, "\n");
                for (size_t k = 0; props && k < props->n; k++) {
                        const json_value *s = props->items[k];
                        _cleanup_free_ char *param = NULL, *value = NULL;
                        snprintf(rule, sizeof(rule), "tool%zu-p%zu ::= ", i, k);
                        puts_(&o, rule);
                        if (asprintf(&param, "<parameter=%s>\n", props->keys[k]) < 0 ||
                            asprintf(&value, "tool%zu-v%zu", i, k) < 0) {
                                r = axp_errorf(err, -ENOMEM, "out of memory");
                                goto done;
                        }
                        put_literal(&o, param);
                        puts_(&o, " ");
                        puts_(&o, value);
                        puts_(&o, " ");
                        put_literal(&o, "\n</parameter>\n");
                        puts_(&o, "\n");
                        switch (s->type == JSON_OBJECT ? xml_arg_kind(s) : ARG_JSON) {
                        case ARG_TEXT:
                        case ARG_ANY:
                                put_text_without(&o, end_param, value);
                                break;
                        case ARG_ENUM: {
                                const json_value *c = json_get(s, "const"), *e = json_get(s, "enum");
                                puts_(&o, value);
                                puts_(&o, " ::= ");
                                for (size_t j = 0; j < (c ? 1 : e->n); j++) {
                                        if (j)
                                                puts_(&o, " | ");
                                        put_literal(&o, c ? c->text : e->items[j]->text);
                                }
                                puts_(&o, "\n");
                                break;
                        }
                        case ARG_JSON: {
                                /* each alone first, for an error that names it */
                                axp_error e = {};
                                _cleanup_free_ char *one = NULL;
                                const char *nm = value;
                                if ((r = axp_json_schemas_to_gbnf(&s, &nm, 1, &one, &e)) < 0) {
                                        r = axp_errorf(err, r, "tools[%zu] (%s) parameter '%s': %s", i, t->names[i],
                                                       props->keys[k], e.msg);
                                        goto done;
                                }
                                schemas[n_json] = s;
                                names[n_json++] = TAKE_PTR(value);
                                break;
                        }
                        }
                }
        }
        if (n_json > 0 &&
            (r = axp_json_schemas_to_gbnf(schemas, (const char *const *) names, n_json, &rules, err)) < 0)
                goto done;
        if (choice != AXP_TOOL_CHOICE_REQUIRED) {
                puts_(&o, "text ::= [^<\\x00] text-rest\n");
                put_text_without(&o, marker, "text-rest");
        }
        if (rules)
                puts_(&o, rules);
done:
        for (size_t i = 0; names && i < n_json; i++)
                free(names[i]);
        free(names);
        free(schemas);
        if (r == 0 && o.r < 0)
                r = axp_errorf(err, -ENOMEM, "out of memory");
        if (r < 0) {
                free(o.buf);
                return r;
        }
        *ret = o.buf;
        return 0;
}

int axp_tools_grammar(axp_chat_family f, const char *tmpl, const axp_tools *t, axp_tool_choice choice, char **ret,
                      axp_error *err) {
        const char *open, *args_key, *close, *first, *marker;
        call_form cf = CALLS_LIST;
        out o = {};
        _cleanup_free_ char *rules = NULL;
        _cleanup_free_ char **names = NULL;
        int r;

        if (f == AXP_CHAT_QWEN3_CODER)
                return xml_grammar(t, choice, ret, err);
        switch (f) {
        case AXP_CHAT_LLAMA3:
                open = "{\"name\": ", args_key = "parameters", close = "}", first = "{", marker = NULL;
                break;
        case AXP_CHAT_CHATML:
                open = "<tool_call>\n{\"name\": ", args_key = "arguments", close = "}\n</tool_call>", first = "<";
                marker = "<tool_call>";
                break;
        case AXP_CHAT_MISTRAL:
        case AXP_CHAT_MISTRAL_V3:
        case AXP_CHAT_MISTRAL_V7:
                open = "[TOOL_CALLS] [{\"name\": ", args_key = "arguments", close = "}]", first = "[";
                marker = "[TOOL_CALLS]";
                break;
        case AXP_CHAT_MISTRAL_V3_TEKKEN:
        case AXP_CHAT_MISTRAL_V7_TEKKEN:
                open = "[TOOL_CALLS][{\"name\": ", args_key = "arguments", close = "}]", first = "[";
                marker = "[TOOL_CALLS]";
                break;
        case AXP_CHAT_GRANITE:
                open = "<|tool_call|>[{\"name\": ", args_key = "arguments", close = "}]", first = "<";
                marker = "<|tool_call|>";
                break;
        default:
                return axp_errorf(err, -EINVAL, "the model's chat template does not take tools");
        }
        if (choice == AXP_TOOL_CHOICE_NONE) {
                /* text only: the tools' schemas play no part */
                puts_(&o, "root ::= text\n");
                if (marker)
                        put_text_without(&o, marker, "text");
                else
                        put_text(&o, first);
                if (o.r < 0) {
                        free(o.buf);
                        return axp_errorf(err, -ENOMEM, "out of memory");
                }
                *ret = o.buf;
                return 0;
        }
        names = calloc(t->n, sizeof(char *));
        if (f == AXP_CHAT_MISTRAL_V7 || f == AXP_CHAT_MISTRAL_V7_TEKKEN)
                cf = v7_call_form(tmpl);
        if (cf != CALLS_LIST) /* [TOOL_CALLS]name[ARGS]{...}: the name bare, the arguments whole */
                open = "[TOOL_CALLS]", close = "";
        if (!names)
                return axp_errorf(err, -ENOMEM, "out of memory");
        for (size_t i = 0; i < t->n; i++)
                if (asprintf(&names[i], "tool%zu-args", i) < 0) {
                        names[i] = NULL;
                        r = axp_errorf(err, -ENOMEM, "out of memory");
                        goto out;
                }
        for (size_t i = 0; i < t->n; i++) {
                axp_error e = {};
                _cleanup_free_ char *one = NULL;
                /* each schema alone first, for an error that names its tool */
                if ((r = axp_json_schemas_to_gbnf((const json_value *const *) &t->params[i], (const char *const *) &names[i], 1,
                                                    &one, &e)) < 0) {
                        r = axp_errorf(err, r, "tools[%zu] (%s) parameters: %s", i, t->names[i], e.msg);
                        goto out;
                }
        }
        if ((r = axp_json_schemas_to_gbnf((const json_value *const *) t->params, (const char *const *) names, t->n, &rules, err)) < 0)
                goto out;

        puts_(&o, choice == AXP_TOOL_CHOICE_REQUIRED ? "root ::= call\n" : "root ::= call | text\n");
        puts_(&o, "call ::= ");
        put_literal(&o, open);
        puts_(&o, " (");
        for (size_t i = 0; i < t->n; i++) {
                char key[64];
                _cleanup_free_ char *name_json = NULL;
                if (i)
                        puts_(&o, " | ");
                if ((cf == CALLS_LIST ? asprintf(&name_json, "\"%s\", \"%s\": ", t->names[i], args_key)
                                      : asprintf(&name_json, "%s", t->names[i])) < 0)
                        o.r = -ENOMEM;
                else
                        put_literal(&o, name_json);
                /* Mistral-Small-3.2 may write the call's id, nine letters and digits */
                if (cf == CALLS_ARGS_ID)
                        puts_(&o, " (\"[CALL_ID]\" [a-zA-Z0-9]{9})?");
                if (cf != CALLS_LIST)
                        puts_(&o, " \"[ARGS]\"");
                snprintf(key, sizeof(key), " tool%zu-args", i);
                puts_(&o, key);
        }
        puts_(&o, ") ");
        put_literal(&o, close);
        puts_(&o, "\n");
        /* auto's text does not begin as a call does; where a call opens with a marker, it
         * does not hold the marker further on either (a call written after some words
         * would be neither text nor read as a call) */
        if (choice != AXP_TOOL_CHOICE_REQUIRED && marker) {
                puts_(&o, "text ::= [^");
                put_class_char(&o, first[0]);
                puts_(&o, "\\x00] text-rest\n");
                put_text_without(&o, marker, "text-rest");
        } else if (choice != AXP_TOOL_CHOICE_REQUIRED)
                put_text(&o, first);
        puts_(&o, rules);
        if (o.r < 0) {
                r = axp_errorf(err, -ENOMEM, "out of memory");
                goto out;
        }
        *ret = TAKE_PTR(o.buf);
        r = 0;
out:
        for (size_t i = 0; i < t->n; i++)
                free(names[i]);
        free(o.buf);
        return r;
}

/* Reading the call back ------------------------------------------------------------------------ */

/* The compact call of name and its arguments (an object). */
static int write_call(const char *name, const json_value *args, char **ret_call) {
        out o = {};
        json_value n = { .type = JSON_STRING, .text = (char *) name };
        puts_(&o, "{\"name\":");
        dump(&o, &n, 0, 0, true);
        puts_(&o, ",\"arguments\":");
        dump(&o, args, 0, 0, true);
        puts_(&o, "}");
        if (o.r < 0) {
                free(o.buf);
                return -ENOMEM;
        }
        *ret_call = o.buf;
        return 1;
}

/* After [TOOL_CALLS]: name[ARGS]{...} or name[CALL_ID]id[ARGS]{...}, one call. */
static int read_args_call(const char *text, size_t len, char **ret_call) {
        const char *end = text + len, *args = memmem(text, len, "[ARGS]", 6);
        if (!args)
                return 0;
        const char *name_end = memmem(text, (size_t) (args - text), "[CALL_ID]", 9);
        if (!name_end)
                name_end = args;
        _cleanup_free_ char *name = strndup(text, (size_t) (name_end - text));
        if (!name)
                return -ENOMEM;
        if (!valid_name(name))
                return 0;
        _cleanup_json_ json_value *v = NULL;
        axp_error e = {};
        args += 6;
        if (json_parse(args, (size_t) (end - args), &v, &e) < 0)
                return e.code == -ENOMEM ? -ENOMEM : 0;
        if (v->type != JSON_OBJECT)
                return 0;
        return write_call(name, v, ret_call);
}

/* Qwen3-Coder's answer: <tool_call>\n<function=NAME>\n (<parameter=KEY>\nVALUE\n</parameter>\n)*
 * </function>\n</tool_call>, each value typed by the tool's schema (xml_arg_kind; unknown tool
 * or key, or no tools: JSON where it parses, else a string); a key twice is no call. */
static int read_xml_call(const axp_tools *t, const char *text, size_t len, char **ret_call) {
        static const char open[] = "<tool_call>\n<function=", close[] = "</function>\n</tool_call>";
        const char *p = text, *end = text + len;
        const size_t no = sizeof(open) - 1, nc = sizeof(close) - 1;

        if (len < no + nc || memcmp(p, open, no) != 0 || memcmp(end - nc, close, nc) != 0)
                return 0;
        p += no;
        end -= nc;
        const char *gt = memmem(p, (size_t) (end - p), ">\n", 2);
        if (!gt)
                return 0;
        _cleanup_free_ char *name = strndup(p, (size_t) (gt - p));
        if (!name)
                return -ENOMEM;
        if (!valid_name(name))
                return 0;
        p = gt + 2;
        const json_value *props = NULL;
        for (size_t i = 0; t && i < t->n && !props; i++)
                if (strcmp(t->names[i], name) == 0)
                        props = json_get(t->params[i], "properties");
        out o = {};
        json_value n = { .type = JSON_STRING, .text = name };
        puts_(&o, "{\"name\":");
        dump(&o, &n, 0, 0, true);
        puts_(&o, ",\"arguments\":{");
        /* the keys so far, each between NULs, for repeats */
        out keys = {};
        put(&keys, "", 1);
        int r = 1;
        for (bool first = true; p < end && r == 1; first = false) {
                static const char popen[] = "<parameter=", pclose[] = "\n</parameter>\n";
                const size_t npo = sizeof(popen) - 1, npc = sizeof(pclose) - 1;
                const char *kend, *vend;
                if ((size_t) (end - p) < npo || memcmp(p, popen, npo) != 0 ||
                    !(kend = memmem(p + npo, (size_t) (end - p - npo), ">\n", 2)) ||
                    !(vend = memmem(kend + 2, (size_t) (end - kend - 2), pclose, npc))) {
                        r = 0;
                        break;
                }
                _cleanup_free_ char *key = strndup(p + npo, (size_t) (kend - p - npo));
                _cleanup_free_ char *val = strndup(kend + 2, (size_t) (vend - kend - 2));
                if (!key || !val) {
                        r = -ENOMEM;
                        break;
                }
                if (!key[0] || strchr(key, '\n') || strlen(key) != (size_t) (kend - p - npo) ||
                    strlen(val) != (size_t) (vend - kend - 2)) {
                        r = 0; /* no key, or a NUL inside */
                        break;
                }
                /* a key given twice: no call ("\0KEY\0" among the keys so far) */
                size_t klen = strlen(key);
                _cleanup_free_ char *needle = malloc(klen + 2);
                if (!needle) {
                        r = -ENOMEM;
                        break;
                }
                needle[0] = 0;
                memcpy(needle + 1, key, klen + 1);
                if (keys.r == 0 && memmem(keys.buf, keys.len, needle, klen + 2))
                        r = 0;
                put(&keys, key, klen + 1);
                if (keys.r < 0)
                        r = -ENOMEM;
                if (r != 1)
                        break;
                const json_value *s = props && props->type == JSON_OBJECT ? json_get(props, key) : NULL;
                arg_kind kind = !s ? ARG_ANY : s->type == JSON_OBJECT ? xml_arg_kind(s) : ARG_JSON;
                _cleanup_json_ json_value *v = NULL;
                axp_error e = {};
                if (!first)
                        puts_(&o, ",");
                json_value k = { .type = JSON_STRING, .text = key };
                dump(&o, &k, 0, 0, true);
                puts_(&o, ":");
                if (kind != ARG_TEXT && kind != ARG_ENUM && json_parse(val, strlen(val), &v, &e) == 0)
                        dump(&o, v, 0, 0, true);
                else if (e.code == -ENOMEM)
                        r = -ENOMEM;
                else {
                        json_value sv = { .type = JSON_STRING, .text = val };
                        dump(&o, &sv, 0, 0, true);
                }
                p = vend + npc;
        }
        puts_(&o, "}}");
        free(keys.buf);
        if (r == 1 && o.r < 0)
                r = -ENOMEM;
        if (r != 1) {
                free(o.buf);
                return r;
        }
        *ret_call = o.buf;
        return 1;
}

int axp_tools_read_call(axp_chat_family f, const axp_tools *t, const char *text, size_t len, char **ret_call) {
        const char *open, *close, *args_key;
        _cleanup_json_ json_value *v = NULL;
        axp_error e = {};

        if (f == AXP_CHAT_QWEN3_CODER)
                return read_xml_call(t, text, len, ret_call);
        switch (f) {
        case AXP_CHAT_LLAMA3:
                open = "", close = "", args_key = "parameters";
                break;
        case AXP_CHAT_CHATML:
                open = "<tool_call>\n", close = "\n</tool_call>", args_key = "arguments";
                break;
        case AXP_CHAT_MISTRAL:
        case AXP_CHAT_MISTRAL_V3:
        case AXP_CHAT_MISTRAL_V7:
                open = "[TOOL_CALLS] ", close = "", args_key = "arguments";
                break;
        case AXP_CHAT_MISTRAL_V3_TEKKEN:
        case AXP_CHAT_MISTRAL_V7_TEKKEN:
                open = "[TOOL_CALLS]", close = "", args_key = "arguments";
                break;
        case AXP_CHAT_GRANITE:
                open = "<|tool_call|>", close = "", args_key = "arguments";
                break;
        default:
                return 0;
        }
        if ((f == AXP_CHAT_MISTRAL_V7 || f == AXP_CHAT_MISTRAL_V7_TEKKEN) && len > 12 &&
            memcmp(text, "[TOOL_CALLS]", 12) == 0 && text[12] != '[' && text[12] != ' ')
                return read_args_call(text + 12, len - 12, ret_call);
        size_t no = strlen(open), nc = strlen(close);
        if (len < no + nc + 2 || memcmp(text, open, no) != 0 || memcmp(text + len - nc, close, nc) != 0 ||
            text[no] != (calls_in_list(f) ? '[' : '{'))
                return 0;
        if (json_parse(text + no, len - no - nc, &v, &e) < 0)
                return e.code == -ENOMEM ? -ENOMEM : 0;
        const json_value *call = v;
        if (calls_in_list(f))
                call = v->type == JSON_ARRAY && v->n == 1 ? v->items[0] : NULL;
        const char *name = call ? json_get_string(call, "name") : NULL;
        const json_value *args = call ? json_get(call, args_key) : NULL;
        if (!name || !args)
                return 0;
        return write_call(name, args, ret_call);
}

int axp_tools_prepare(const char *chat_template, const axp_tokenizer *tok, const char *tools_json,
                      const char *tool_choice, const char *system, const axp_chat_msg *earlier,
                      size_t n_earlier, const char *user, char **ret_text, char **ret_grammar,
                      axp_chat_family *ret_family, axp_tools **ret_tools, axp_error *err) {
        _cleanup_(axp_tools_freep) axp_tools *t = NULL;
        _cleanup_free_ axp_chat_msg *msgs = NULL;
        size_t n = 0;
        axp_chat_family f = axp_chat_detect(chat_template, tok);
        axp_tool_choice choice;
        int r;

        if ((r = axp_tool_choice_from_string(tool_choice, &choice, err)) < 0)
                return r;
        if (!tools_json && choice != AXP_TOOL_CHOICE_NONE)
                return axp_errorf(err, -EINVAL, "tool_choice needs tools");
        if (tools_json && (r = axp_tools_parse(tools_json, strlen(tools_json), &t, err)) < 0)
                return r;
        if ((r = axp_tools_check_turns(earlier, n_earlier, err)) < 0)
                return r;
        if (!axp_chat_takes_tools(f, chat_template, tok))
                return axp_errorf(err, -EINVAL,
                                  "the model's chat template (%s) does not take tools%s; tools work with Llama 3.1+, "
                                  "Qwen2.5/3, Qwen3-Coder, Mistral and Granite 3 templates",
                                  axp_chat_family_name(f), t ? "" : " (the earlier turns hold tool calls)");
        if ((r = axp_tools_grammar(f, chat_template, t, choice, ret_grammar, err)) < 0)
                return r;
        msgs = calloc(n_earlier + 1, sizeof(*msgs));
        if (!msgs)
                r = axp_errorf(err, -ENOMEM, "out of memory");
        else {
                for (size_t i = 0; i < n_earlier; i++)
                        msgs[n++] = earlier[i];
                /* an empty prompt after a tool result: the model answers the result */
                if (user && (user[0] || n == 0 || strcmp(msgs[n - 1].role, AXP_ROLE_TOOL) != 0))
                        msgs[n++] = (axp_chat_msg) { "user", user };
                r = axp_tools_format_chat(f, chat_template, t, system, msgs, n, ret_text, err);
        }
        if (r < 0) {
                free(*ret_grammar);
                *ret_grammar = NULL;
                return r;
        }
        *ret_family = choice == AXP_TOOL_CHOICE_NONE ? AXP_CHAT_RAW : f;
        if (ret_tools)
                *ret_tools = TAKE_PTR(t);
        return 0;
}
