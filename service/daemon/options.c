/* SPDX-License-Identifier: MIT */
#include "options.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"
#include "common/bus-common.h"

typedef struct OptionSpec {
        const char *key;
        const char *type;      /* D-Bus signature of the variant's content */
        const char *type_name; /* for messages */
        bool complete_only;
        bool flow_ok;          /* accepted by OpenFlow */
        bool embed_ok;         /* accepted by Embed */
        bool embed_only;
} OptionSpec;

static const OptionSpec option_specs[] = {
        { "max_tokens",        "u",  "uint32" },
        { "temperature",       "d",  "double" },
        { "top_k",             "u",  "uint32" },
        { "top_p",             "d",  "double" },
        { "min_p",             "d",  "double" },
        { "repeat_penalty",    "d",  "double" },
        { "frequency_penalty", "d",  "double" },
        { "presence_penalty",  "d",  "double" },
        { "seed",              "t",  "uint64" },
        { "stop",              "as", "array of strings" },
        { "system",            "s",  "string", .flow_ok = true },
        { "messages",          "a(ss)", "array of (role, content)" },
        { "flow",              "o",  "object path" },
        { "raw",               "b",  "boolean", .flow_ok = true },
        { "think",             "b",  "boolean" },
        { "priority",          "s",  "string", .complete_only = true, .embed_ok = true },
        { "json_schema",       "s",  "string" },
        { "grammar",           "s",  "string" },
        { "tools",             "s",  "string" },
        { "tool_choice",       "s",  "string" },
        { "suffix",            "s",  "string" },
        { "logprobs",          "u",  "uint32" },
        { "fim_middle",        "s",  "string" },
        { "fim_extra",         "a(ss)", "array of (filename, text)" },
        { "fim_fit",           "b",  "boolean" },
        { "pooling",           "s",  "string", .embed_ok = true, .embed_only = true },
        { "normalize",         "b",  "boolean", .embed_ok = true, .embed_only = true },
        { "truncate",          "b",  "boolean", .embed_ok = true, .embed_only = true },
};

/* request_options_parse marks the keys seen in 32 bits */
_Static_assert(ELEMENTSOF(option_specs) <= 32, "too many options for the seen mask");

static bool spec_allowed(const OptionSpec *s, OptionSet set) {
        switch (set) {
        case OPTIONS_SUBMIT:
                return !s->complete_only && !s->embed_only;
        case OPTIONS_COMPLETE:
                return !s->embed_only;
        case OPTIONS_FLOW:
                return s->flow_ok;
        case OPTIONS_EMBED:
                return s->embed_ok;
        }
        return false;
}

static int unknown_key(sd_bus_error *error, const char *key, OptionSet set) {
        char known[512] = "";

        for (size_t i = 0; i < ELEMENTSOF(option_specs); i++) {
                if (!spec_allowed(&option_specs[i], set))
                        continue;
                if (known[0])
                        strncat(known, ", ", sizeof(known) - strlen(known) - 1);
                strncat(known, option_specs[i].key, sizeof(known) - strlen(known) - 1);
        }
        /* Name the key the caller gave, but keep a hostile key from making the message huge. */
        return sd_bus_error_setf(error, AXP_ERROR_INVALID_ARGUMENT,
                                 "Unknown option '%.64s'%s; accepted here: %s", key,
                                 strlen(key) > 64 ? "..." : "", known);
}

void request_options_done(RequestOptions *o) {
        free(o->stop);
        o->stop = NULL;
        free(o->messages);
        o->messages = NULL;
        free(o->fim_extra);
        o->fim_extra = NULL;
}

const char *path_child(const char *path, const char *prefix) {
        size_t n = strlen(prefix);

        if (!path || strncmp(path, prefix, n) != 0 || path[n] != '/' || !path[n + 1] || strchr(path + n + 1, '/'))
                return NULL;
        return path + n + 1;
}

uint64_t path_number(const char *path, const char *prefix) {
        const char *p = path_child(path, prefix);
        uint64_t v = 0;

        if (!p || *p < '1' || *p > '9')
                return 0;
        for (; *p; p++) {
                if (*p < '0' || *p > '9' || __builtin_mul_overflow(v, 10, &v) ||
                    __builtin_add_overflow(v, (uint64_t) (*p - '0'), &v))
                        return 0;
        }
        return v;
}

int prompt_check(const char *what, const char *s, bool empty_ok, const DaemonConfig *c,
                 sd_bus_error *error) {
        size_t n = strlen(s);

        if (n == 0 && !empty_ok)
                return sd_bus_error_setf(error, AXP_ERROR_INVALID_ARGUMENT, "The %s is empty", what);
        if (n > c->max_prompt_bytes)
                return sd_bus_error_setf(error, AXP_ERROR_INVALID_ARGUMENT,
                                         "The %s is %zu bytes; the limit is %zu", what, n,
                                         c->max_prompt_bytes);
        if (!axp_utf8_valid(s, n, NULL))
                return sd_bus_error_setf(error, AXP_ERROR_INVALID_ARGUMENT,
                                         "The %s is not valid UTF-8", what);
        return 0;
}

static int bad_value(sd_bus_error *error, const char *key, const char *why) {
        return sd_bus_error_setf(error, AXP_ERROR_INVALID_ARGUMENT, "Option '%s' %s", key, why);
}

/* The options are kept as floats: a value above lo that rounds to it (1e-300) is refused here,
 * where the message names the option, not by the engine. */
static int read_double(sd_bus_message *m, const char *key, double lo, double hi, bool lo_open,
                       double *ret, sd_bus_error *error) {
        char why[96];
        double d;
        int r;

        r = sd_bus_message_read_basic(m, 'd', &d);
        if (r < 0)
                return r;
        if (r == 0) /* no value where the variant's type said one is */
                return -EBADMSG;
        if (!isfinite(d) || d < lo || d > hi || (lo_open && (float) d <= (float) lo)) {
                snprintf(why, sizeof(why), "must be %s %g and at most %g, got %g",
                         lo_open ? "above" : "at least", lo, hi, d);
                return bad_value(error, key, why);
        }
        *ret = d;
        return 0;
}

static int read_stop(sd_bus_message *m, const DaemonConfig *c, RequestOptions *o,
                     sd_bus_error *error) {
        const char *s;
        char why[128];
        size_t n = 0;
        int r;

        free(o->stop);
        o->stop = calloc(c->max_stop_strings ? c->max_stop_strings : 1, sizeof(char *));
        if (!o->stop)
                return -ENOMEM;

        r = sd_bus_message_enter_container(m, 'a', "s");
        if (r < 0)
                return r;
        while ((r = sd_bus_message_read_basic(m, 's', &s)) > 0) {
                if (n >= c->max_stop_strings) {
                        snprintf(why, sizeof(why), "has more than %u stop strings", c->max_stop_strings);
                        return bad_value(error, "stop", why);
                }
                if (!*s)
                        return bad_value(error, "stop", "contains an empty string");
                if (strlen(s) > c->max_stop_bytes) {
                        snprintf(why, sizeof(why), "has a string longer than %zu bytes", c->max_stop_bytes);
                        return bad_value(error, "stop", why);
                }
                o->stop[n++] = s;
        }
        if (r < 0)
                return r;
        o->opts.stop = o->stop;
        o->opts.n_stop = n;
        return sd_bus_message_exit_container(m);
}

/* A text of an a(ss) option's `i`th item (what names it: "turn", "chunk"): its bytes added to
 * *bytes, all of the option's within the prompt's limit, and valid UTF-8. */
static int check_item_text(const char *key, const char *what, size_t i, const char *s, size_t *bytes,
                           const DaemonConfig *c, sd_bus_error *error) {
        char why[96];
        size_t n = strlen(s);

        *bytes += n;
        if (*bytes > c->max_prompt_bytes) {
                snprintf(why, sizeof(why), "holds more than %zu bytes", c->max_prompt_bytes);
                return bad_value(error, key, why);
        }
        if (!axp_utf8_valid(s, n, NULL)) {
                snprintf(why, sizeof(why), "has %s %zu not valid UTF-8", what, i + 1);
                return bad_value(error, key, why);
        }
        return 0;
}

/* fim_extra a(ss): (filename, text) chunks of other files, before the file's text */
static int read_fim_extra(sd_bus_message *m, const DaemonConfig *c, RequestOptions *o, sd_bus_error *error) {
        const char *name, *text;
        size_t n = 0, cap = 0, bytes = 0;
        int r;

        r = sd_bus_message_enter_container(m, 'a', "(ss)");
        if (r < 0)
                return r;
        while ((r = sd_bus_message_read(m, "(ss)", &name, &text)) > 0) {
                if ((r = check_item_text("fim_extra", "chunk", n, name, &bytes, c, error)) < 0 ||
                    (r = check_item_text("fim_extra", "chunk", n, text, &bytes, c, error)) < 0)
                        return r;
                if (axp_grow((void **) &o->fim_extra, &cap, n + 1, sizeof(*o->fim_extra)) < 0)
                        return -ENOMEM;
                o->fim_extra[n++] = (axp_fim_chunk) { *name ? name : NULL, text };
        }
        if (r < 0)
                return r;
        o->opts.fim_extra = o->fim_extra;
        o->opts.n_fim_extra = n;
        return sd_bus_message_exit_container(m);
}

/* messages a(ss): (role, content) pairs, the conversation before the prompt. */
static int read_messages(sd_bus_message *m, const DaemonConfig *c, RequestOptions *o,
                         sd_bus_error *error) {
        const char *role, *content;
        char why[160];
        size_t n = 0, cap = 0, bytes = 0;
        int r;

        r = sd_bus_message_enter_container(m, 'a', "(ss)");
        if (r < 0)
                return r;
        while ((r = sd_bus_message_read(m, "(ss)", &role, &content)) > 0) {
                if (n >= OPTIONS_MAX_MESSAGES) {
                        snprintf(why, sizeof(why), "has more than %d turns", OPTIONS_MAX_MESSAGES);
                        return bad_value(error, "messages", why);
                }
                if (strcmp(role, "system") != 0 && strcmp(role, "user") != 0 &&
                    strcmp(role, "assistant") != 0 && strcmp(role, "tool_call") != 0 && strcmp(role, "tool") != 0) {
                        snprintf(why, sizeof(why),
                                 "has turn %zu of the role '%.32s%s'; use system, user, assistant, tool_call or tool",
                                 n + 1, role, strlen(role) > 32 ? "..." : "");
                        return bad_value(error, "messages", why);
                }
                if ((r = check_item_text("messages", "turn", n, content, &bytes, c, error)) < 0)
                        return r;
                if (axp_grow((void **) &o->messages, &cap, n + 1, sizeof(*o->messages)) < 0)
                        return -ENOMEM;
                o->messages[n++] = (axp_turn) { role, content };
        }
        if (r < 0)
                return r;
        o->opts.messages = o->messages;
        o->opts.n_messages = n;
        return sd_bus_message_exit_container(m);
}

/* A text option (what names it in messages) within the prompt's limits */
static int read_text(sd_bus_message *m, const char *what, const DaemonConfig *c, const char **ret,
                     sd_bus_error *error) {
        int r = sd_bus_message_read_basic(m, 's', ret);
        if (r < 0)
                return r;
        return prompt_check(what, *ret, true, c, error);
}

static int read_value(sd_bus_message *m, const OptionSpec *spec, const DaemonConfig *c,
                      RequestOptions *o, sd_bus_error *error) {
        const char *key = spec->key, *s;
        char why[128];
        uint32_t u;
        double d = 0; /* read_double sets it where it returns 0 */
        int b, r;

        if (strcmp(key, "max_tokens") == 0) {
                r = sd_bus_message_read_basic(m, 'u', &u);
                if (r < 0)
                        return r;
                if (u < 1 || u > c->max_tokens) {
                        snprintf(why, sizeof(why), "must be from 1 to %u, got %u", c->max_tokens, u);
                        return bad_value(error, key, why);
                }
                o->opts.max_tokens = u;
        } else if (strcmp(key, "temperature") == 0) {
                r = read_double(m, key, 0, 100, false, &d, error);
                if (r < 0)
                        return r;
                o->opts.sampling.temperature = (float) d;
        } else if (strcmp(key, "logprobs") == 0) {
                /* each token's log-probability and that many alternatives' */
                r = sd_bus_message_read_basic(m, 'u', &u);
                if (r < 0)
                        return r;
                if (u > AXP_LOGPROBS_MAX) {
                        snprintf(why, sizeof(why), "must be from 0 to %d alternatives, got %u", AXP_LOGPROBS_MAX, u);
                        return bad_value(error, key, why);
                }
                o->opts.logprobs = true;
                o->opts.top_logprobs = u;
        } else if (strcmp(key, "top_k") == 0) {
                r = sd_bus_message_read_basic(m, 'u', &u);
                if (r < 0)
                        return r;
                if (u > INT_MAX)
                        return bad_value(error, key, "is too large");
                o->opts.sampling.top_k = (int) u;
        } else if (strcmp(key, "top_p") == 0 || strcmp(key, "min_p") == 0) {
                r = read_double(m, key, 0, 1, false, &d, error);
                if (r < 0)
                        return r;
                if (key[0] == 't')
                        o->opts.sampling.top_p = (float) d;
                else
                        o->opts.sampling.min_p = (float) d;
        } else if (strcmp(key, "repeat_penalty") == 0) {
                r = read_double(m, key, 0, 10, true, &d, error);
                if (r < 0)
                        return r;
                o->opts.sampling.repeat_penalty = (float) d;
        } else if (strcmp(key, "frequency_penalty") == 0 || strcmp(key, "presence_penalty") == 0) {
                r = read_double(m, key, -2, 2, false, &d, error);
                if (r < 0)
                        return r;
                if (key[0] == 'f')
                        o->opts.sampling.frequency_penalty = (float) d;
                else
                        o->opts.sampling.presence_penalty = (float) d;
        } else if (strcmp(key, "seed") == 0) {
                r = sd_bus_message_read_basic(m, 't', &o->opts.sampling.seed);
                if (r < 0)
                        return r;
        } else if (strcmp(key, "stop") == 0) {
                return read_stop(m, c, o, error);
        } else if (strcmp(key, "messages") == 0) {
                return read_messages(m, c, o, error);
        } else if (strcmp(key, "system") == 0) {
                r = read_text(m, "system prompt", c, &s, error);
                if (r < 0)
                        return r;
                o->opts.system = *s ? s : NULL;
        } else if (strcmp(key, "suffix") == 0) {
                /* fill in the middle: the text after the cursor (the engine says if the model
                 * has no FIM tokens) */
                r = read_text(m, "suffix", c, &s, error);
                if (r < 0)
                        return r;
                o->opts.suffix = s;
        } else if (strcmp(key, "fim_middle") == 0) {
                /* fill in the middle: the text typed at the cursor, after the prompt */
                r = read_text(m, "fim_middle", c, &s, error);
                if (r < 0)
                        return r;
                o->opts.fim_middle = *s ? s : NULL;
        } else if (strcmp(key, "fim_extra") == 0) {
                return read_fim_extra(m, c, o, error);
        } else if (strcmp(key, "fim_fit") == 0) {
                r = sd_bus_message_read_basic(m, 'b', &b);
                if (r < 0)
                        return r;
                o->opts.fim_fit = b;
        } else if (strcmp(key, "flow") == 0) {
                r = sd_bus_message_read_basic(m, 'o', &s);
                if (r < 0)
                        return r;
                o->flow = path_number(s, AXP_BUS_FLOW_PREFIX);
                if (o->flow == 0)
                        return bad_value(error, key,
                                         "must be a flow path from OpenFlow (" AXP_BUS_FLOW_PREFIX "/N)");
        } else if (strcmp(key, "raw") == 0) {
                r = sd_bus_message_read_basic(m, 'b', &b);
                if (r < 0)
                        return r;
                o->opts.raw = b;
        } else if (strcmp(key, "think") == 0) {
                r = sd_bus_message_read_basic(m, 'b', &b);
                if (r < 0)
                        return r;
                o->opts.think_set = true;
                o->opts.think = b;
        } else if (strcmp(key, "tool_choice") == 0) {
                r = sd_bus_message_read_basic(m, 's', &s);
                if (r < 0)
                        return r;
                if (strcmp(s, "auto") != 0 && strcmp(s, "required") != 0 && strcmp(s, "none") != 0)
                        return bad_value(error, key, "must be 'auto', 'required' or 'none'");
                o->opts.tool_choice = s;
        } else if (strcmp(key, "json_schema") == 0 || strcmp(key, "grammar") == 0 || strcmp(key, "tools") == 0) {
                /* the engine compiles it at submission and says what is wrong with it */
                r = sd_bus_message_read_basic(m, 's', &s);
                if (r < 0)
                        return r;
                size_t max = 64 * 1024; /* as the engine's caps (engine/model/grammar.h) */
                if (strlen(s) > max) {
                        snprintf(why, sizeof(why), "is %zu bytes; the limit is %zu", strlen(s), max);
                        return bad_value(error, key, why);
                }
                if (!axp_utf8_valid(s, strlen(s), NULL))
                        return bad_value(error, key, "is not valid UTF-8");
                if (key[0] == 't')
                        o->opts.tools = s;
                else if (key[0] == 'j')
                        o->opts.json_schema = s;
                else
                        o->opts.grammar = s;
        } else if (strcmp(key, "pooling") == 0) {
                r = sd_bus_message_read_basic(m, 's', &s);
                if (r < 0)
                        return r;
                if (axp_pooling_from_name(s, &o->opts.pooling) < 0)
                        return bad_value(error, key, "must be 'model', 'mean', 'cls' or 'last'");
        } else if (strcmp(key, "normalize") == 0 || strcmp(key, "truncate") == 0) {
                r = sd_bus_message_read_basic(m, 'b', &b);
                if (r < 0)
                        return r;
                *(key[0] == 'n' ? &o->opts.embed_normalize : &o->opts.embed_truncate) = b;
        } else if (strcmp(key, "priority") == 0) {
                r = sd_bus_message_read_basic(m, 's', &s);
                if (r < 0)
                        return r;
                if (strcmp(s, "reactive") == 0)
                        o->priority = AXP_REACTIVE;
                else if (strcmp(s, "proactive") == 0)
                        o->priority = AXP_PROACTIVE;
                else
                        return bad_value(error, key, "must be 'reactive' or 'proactive'");
        } else
                return -EINVAL; /* every spec has a branch above */
        return 0;
}

int request_options_parse(sd_bus_message *m, OptionSet set, const DaemonConfig *c,
                          RequestOptions *ret, sd_bus_error *error) {
        _cleanup_(request_options_done) RequestOptions o = { .priority = AXP_REACTIVE };
        uint32_t seen = 0;
        int r;

        axp_request_opts_default(&o.opts);
        if (set == OPTIONS_EMBED) { /* normalized unless asked otherwise, as OpenAI's */
                o.opts.embed = true;
                o.opts.embed_normalize = true;
        }

        r = sd_bus_message_enter_container(m, 'a', "{sv}");
        if (r < 0)
                return r;
        while ((r = sd_bus_message_enter_container(m, 'e', "sv")) > 0) {
                const char *key, *contents;
                const OptionSpec *spec = NULL;
                size_t i;

                r = sd_bus_message_read_basic(m, 's', &key);
                if (r < 0)
                        return r;
                for (i = 0; i < ELEMENTSOF(option_specs); i++)
                        if (strcmp(option_specs[i].key, key) == 0) {
                                spec = &option_specs[i];
                                break;
                        }
                if (!spec || !spec_allowed(spec, set))
                        return unknown_key(error, key, set);
                if (seen & (1u << i))
                        return bad_value(error, key, "is given twice");
                seen |= 1u << i;

                r = sd_bus_message_peek_type(m, NULL, &contents);
                if (r < 0)
                        return r;
                if (strcmp(contents, spec->type) != 0)
                        return sd_bus_error_setf(error, AXP_ERROR_INVALID_ARGUMENT,
                                                 "Option '%s' must be of type %s (%s), got '%.16s'",
                                                 key, spec->type, spec->type_name, contents);
                r = sd_bus_message_enter_container(m, 'v', contents);
                if (r < 0)
                        return r;
                r = read_value(m, spec, c, &o, error);
                if (r < 0)
                        return r;
                r = sd_bus_message_exit_container(m);
                if (r < 0)
                        return r;
                r = sd_bus_message_exit_container(m);
                if (r < 0)
                        return r;
        }
        if (r < 0)
                return r;
        r = sd_bus_message_exit_container(m);
        if (r < 0)
                return r;

        *ret = o;
        o.stop = NULL; /* now owned by *ret */
        o.messages = NULL;
        o.fim_extra = NULL;
        return 0;
}
