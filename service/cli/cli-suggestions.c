/* SPDX-License-Identifier: MIT */
/* `agentxpu suggestions`: lists what the monitor suggested, from
 * $XDG_STATE_HOME/agentxpu/suggestions.jsonl (see service/monitor/store.h), oldest first. */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "base/parse.h"
#include "base/util.h"

/* agentxpu-monitor keeps its store to 8 MiB (it drops the older half beyond): a larger file
 * is none of its stores. */
#define STORE_READ_MAX ((size_t) 64 << 20)

typedef struct Options {
        bool json;
        uint64_t last;          /* 0: all */
        const char *source;     /* NULL: any */
        const char *store;
} Options;

static int usage(FILE *f) {
        fprintf(f, "usage: agentxpu suggestions [--json] [--last N] [--source file|clipboard] "
                   "[--store PATH]\n"
                   "Lists the suggestions of agentxpu-monitor, oldest first.\n"
                   "  --json          print the stored JSON lines\n"
                   "  --last N        only the newest N\n"
                   "  --source S      only those about files or about the clipboard\n"
                   "  --store PATH    read this store (default: "
                   "$XDG_STATE_HOME/agentxpu/suggestions.jsonl)\n");
        return f == stderr ? 2 : 0;
}

static char *default_store(void) {
        const char *state = getenv("XDG_STATE_HOME");
        const char *home = getenv("HOME");
        char *path = NULL;

        if (state && state[0] == '/') {
                if (asprintf(&path, "%s/agentxpu/suggestions.jsonl", state) < 0)
                        return NULL;
        } else if (home && home[0]) {
                if (asprintf(&path, "%s/.local/state/agentxpu/suggestions.jsonl", home) < 0)
                        return NULL;
        }
        return path;
}

/* Model output and file names reach a terminal: keep line breaks and tabs, drop other
 * control characters (C0, DEL and C1) so no escape sequence gets through. */
static void put_clean(const char *s, const char *indent) {
        for (const unsigned char *p = (const unsigned char *) s; *p; p++) {
                bool c1 = *p == 0xC2 && p[1] >= 0x80 && p[1] <= 0x9F;   /* U+0080..U+009F */
                if (*p == '\n') {
                        fputc('\n', stdout);
                        fputs(indent, stdout);
                } else if (c1)
                        p++;
                else if (*p == '\t' || (*p >= 0x20 && *p != 0x7f))
                        fputc(*p, stdout);
        }
}

static void print_record(const json_value *obj) {
        const char *created = json_get_string(obj, "created");
        const char *source = json_get_string(obj, "source");
        const char *path = json_get_string(obj, "path");
        const char *text = json_get_string(obj, "text");
        const char *title = json_get_string(obj, "title"), *body = json_get_string(obj, "body");
        const char *kind = json_get_string(obj, "kind");
        uint64_t files = 0;

        put_clean(created ? created : "?", "");
        fputs("  ", stdout);
        put_clean(source ? source : "?", "");
        if (path) {
                fputs("  ", stdout);
                put_clean(path, "");
        }
        if (json_get_u64(obj, "files", &files) == 0)
                printf("  (%llu files)", (unsigned long long) files);
        fputs("\n    ", stdout);
        /* A structured suggestion; records from before had only "text". */
        if (title || body) {
                if (kind) {
                        put_clean(kind, "");
                        fputs(": ", stdout);
                }
                put_clean(title ? title : "", "    ");
                fputs("\n    ", stdout);
                put_clean(body ? body : "", "    ");
        } else
                put_clean(text ? text : "", "    ");
        fputs("\n\n", stdout);
}

int cli_suggestions(int argc, char **argv) {
        static const struct option longopts[] = {
                { "json", no_argument, NULL, 'j' },
                { "last", required_argument, NULL, 'n' },
                { "source", required_argument, NULL, 's' },
                { "store", required_argument, NULL, 'f' },
                { "help", no_argument, NULL, 'h' },
                { NULL, 0, NULL, 0 },
        };
        Options o = { 0 };
        _cleanup_free_ char *store = NULL, *data = NULL;
        const char **lines = NULL;
        json_value **records = NULL;
        size_t len = 0, n = 0, cap = 0, first;
        unsigned lineno = 0;
        axp_error read_err = { 0 };
        int c, r;

        optind = 1;
        while ((c = cli_getopt(argc, argv, "jn:s:f:h", longopts)) != -1) {
                switch (c) {
                case 'j': o.json = true; break;
                case 'n':
                        if (!cli_uint("--last", optarg, 1, UINT32_MAX, &o.last))
                                return 2;
                        break;
                case 's':
                        if (strcmp(optarg, "file") != 0 && strcmp(optarg, "clipboard") != 0)
                                return cli_usage_error("--source is 'file' or 'clipboard', not '%s'", optarg);
                        o.source = optarg;
                        break;
                case 'f': o.store = optarg; break;
                case 'h': return usage(stdout);
                default: return 2;
                }
        }
        if (optind < argc)
                return cli_usage_error("unexpected argument '%s'", argv[optind]);
        if (!o.store) {
                store = default_store();
                if (!store)
                        return cli_fail("neither XDG_STATE_HOME nor HOME is set; give --store PATH");
                o.store = store;
        }

        r = axp_read_file(o.store, STORE_READ_MAX, &data, &len, &read_err);
        if (r == -ENOENT) {
                /* --json prints JSON lines only: none, as for an empty store */
                if (!o.json)
                        printf("No suggestions yet (%s does not exist).\n", o.store);
                return 0;
        }
        if (r == -EFBIG)
                return cli_fail("%s", read_err.msg);
        if (r < 0)
                return cli_fail("cannot read %s: %s", o.store, strerror(-r));

        for (char *p = data, *end = data + len; p < end;) {
                char *nl = memchr(p, '\n', (size_t) (end - p));
                size_t l = nl ? (size_t) (nl - p) : (size_t) (end - p);
                json_value *obj = NULL;
                axp_error err = { 0 };
                const char *src;

                lineno++;
                if (nl)
                        *nl = 0;
                if (l > 0 && (json_parse(p, l, &obj, &err) < 0 || obj->type != JSON_OBJECT)) {
                        cli_warn("%s:%u: skipped: %s", o.store, lineno, err.msg[0] ? err.msg : "not a JSON object");
                        json_free(obj);
                        obj = NULL;
                }
                src = obj ? json_get_string(obj, "source") : NULL;
                if (obj && (!o.source || (src && strcmp(src, o.source) == 0))) {
                        if (n == cap) {
                                cap = cap ? cap * 2 : 64;
                                json_value **rv = realloc(records, cap * sizeof(*rv));
                                const char **lv = realloc(lines, cap * sizeof(*lv));
                                if (rv)
                                        records = rv;
                                if (lv)
                                        lines = lv;
                                if (!rv || !lv) {
                                        cli_warn("out of memory");
                                        json_free(obj);
                                        break;
                                }
                        }
                        records[n] = obj;
                        lines[n++] = p;
                } else
                        json_free(obj);
                p = nl ? nl + 1 : end;
        }

        first = o.last > 0 && o.last < n ? n - (size_t) o.last : 0;
        if (n == 0 && !o.json)
                printf("No suggestions%s%s.\n", o.source ? " from " : "", o.source ? o.source : "");
        for (size_t i = first; i < n; i++) {
                if (o.json)
                        printf("%s\n", lines[i]);
                else
                        print_record(records[i]);
        }
        for (size_t i = 0; i < n; i++)
                json_free(records[i]);
        free(records);
        free(lines);
        return 0;
}
