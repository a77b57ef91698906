/* SPDX-License-Identifier: MIT */
#include "monitor-config.h"

#include <errno.h>
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

#include "base/parse.h"

/* Secrets, version-control internals, caches and editors' scratch files. They are ignored
 * unless the config says default_ignore=false. */
static const char *const default_ignore[] = {
        ".git/", ".hg/", ".svn/", ".ssh/", ".gnupg/", ".password-store/", "node_modules/",
        ".cache/", "__pycache__/",
        "*.key", "*.pem", "*.p12", "*.pfx", "*.kdbx", "*.gpg", "id_rsa*", "id_dsa*", "id_ecdsa*",
        "id_ed25519*", ".env", ".env.*", ".netrc", ".pgpass",
        "*.swp", "*.swo", "*.swx", "*~", ".#*", "#*#", "4913", "*.tmp", "*.part", "*.crdownload",
        ".~lock.*#",
        NULL,
};

#define DEFAULT_FILE_TEMPLATE                                                                      \
        "The user just saved the file {path}.\n{change}\n\n"                                       \
        "In two or three sentences, say what changed and why it might matter to the user."
#define DEFAULT_BATCH_TEMPLATE                                                                     \
        "{count} files changed at once under {root} (a checkout, an unpacked archive or a "       \
        "build, perhaps):\n{files}\n\n"                                                            \
        "In two or three sentences, say what this set of changes looks like and whether the "     \
        "user should look at anything."
#define DEFAULT_CLIPBOARD_TEMPLATE                                                                 \
        "The user copied this text:\n---\n{text}\n---\n\n"                                         \
        "In two or three sentences, explain what it is or suggest a useful next step."
#define DEFAULT_SYSTEM_PROMPT                                                                      \
        "You are a quiet assistant on the user's desktop. Be brief and concrete."

typedef enum KeyType { KEY_STRING, KEY_LIST, KEY_BOOL, KEY_UINT, KEY_SIZE, KEY_DOUBLE } KeyType;

typedef struct KeySpec {
        const char *group, *key;
        KeyType type;
        size_t offset;
        guint64 min, max;               /* KEY_UINT, KEY_SIZE, KEY_DOUBLE bounds */
} KeySpec;

#define F(field) offsetof(MonitorConfig, field)

/* Every key the file may hold; the dump writes them in this order. */
static const KeySpec keys[] = {
        { "files", "watch", KEY_LIST, F(watch), 0, 0 },
        { "files", "ignore", KEY_LIST, F(ignore), 0, 0 },
        { "files", "max_size", KEY_SIZE, F(max_file_size), 1, 64u << 20 },
        { "files", "debounce_ms", KEY_UINT, F(debounce_ms), 10, 60000 },
        { "files", "burst_threshold", KEY_UINT, F(burst_threshold), 2, 100000 },
        { "files", "burst_max_wait_ms", KEY_UINT, F(burst_max_wait_ms), 100, 600000 },
        { "files", "template", KEY_STRING, F(file_template), 0, 0 },
        { "files", "batch_template", KEY_STRING, F(batch_template), 0, 0 },
        { "clipboard", "enabled", KEY_BOOL, F(clipboard), 0, 0 },
        { "clipboard", "max_size", KEY_SIZE, F(clipboard_max_size), 1, 16u << 20 },
        { "clipboard", "template", KEY_STRING, F(clipboard_template), 0, 0 },
        { "limits", "requests_per_minute", KEY_DOUBLE, F(requests_per_minute), 0, 6000 },
        { "limits", "burst", KEY_UINT, F(request_burst), 1, 1000 },
        { "limits", "max_in_flight", KEY_UINT, F(max_in_flight), 1, 64 },
        { "limits", "max_queued", KEY_UINT, F(max_queued), 1, 10000 },
        { "limits", "batch_list_max", KEY_UINT, F(batch_list_max), 1, 10000 },
        { "limits", "memory_cap_mb", KEY_UINT, F(memory_cap_mb), 8, 65536 },
        { "limits", "snapshot_cache_kb", KEY_UINT, F(snapshot_cache_kb), 0, 1u << 20 },
        { "engine", "max_tokens", KEY_UINT, F(max_tokens), 1, 65536 },
        { "engine", "temperature", KEY_DOUBLE, F(temperature), 0, 10 },
        { "engine", "system", KEY_STRING, F(system_prompt), 0, 0 },
        { "engine", "prompt_max_bytes", KEY_UINT, F(prompt_max_bytes), 64, 1u << 20 },
        { "engine", "request_timeout_s", KEY_UINT, F(request_timeout_s), 1, 86400 },
        { "engine", "title_max_length", KEY_UINT, F(title_max_length), 1, 1000 },
        { "engine", "body_max_length", KEY_UINT, F(body_max_length), 1, 1000 },
};

void monitor_config_free(MonitorConfig *cfg) {
        if (!cfg)
                return;
        g_free(cfg->source);
        g_strfreev(cfg->watch);
        g_strfreev(cfg->ignore);
        g_strfreev(cfg->exclude);
        g_free(cfg->file_template);
        g_free(cfg->batch_template);
        g_free(cfg->clipboard_template);
        g_free(cfg->system_prompt);
        g_free(cfg);
}

/* "~" and "~/x" are the home folder; other relative paths are taken from the home folder.
 * Symlinks are resolved where the folder exists, since events carry the real paths. */
static char *expand_path(const char *p) {
        g_autofree char *path = NULL;
        char *real;

        if (strcmp(p, "~") == 0)
                path = g_strdup(g_get_home_dir());
        else if (g_str_has_prefix(p, "~/"))
                path = g_build_filename(g_get_home_dir(), p + 2, NULL);
        else
                path = g_canonicalize_filename(p, g_get_home_dir());
        real = realpath(path, NULL);
        if (!real)
                return g_steal_pointer(&path);
        g_free(path);
        path = g_strdup(real);
        free(real);
        return g_steal_pointer(&path);
}

MonitorConfig *monitor_config_defaults(void) {
        MonitorConfig *cfg = g_new0(MonitorConfig, 1);
        const char *const docs[] = { "~/Documents", NULL };

        cfg->watch = g_new0(char *, 2);
        cfg->watch[0] = expand_path(docs[0]);
        cfg->ignore = g_strdupv((char **) default_ignore);
        cfg->exclude = g_new0(char *, 1);
        cfg->max_file_size = 256 * 1024;
        cfg->debounce_ms = 500;
        cfg->burst_threshold = 20;
        cfg->burst_max_wait_ms = 10000;
        cfg->file_template = g_strdup(DEFAULT_FILE_TEMPLATE);
        cfg->batch_template = g_strdup(DEFAULT_BATCH_TEMPLATE);
        cfg->clipboard = true;
        cfg->clipboard_max_size = 16 * 1024;
        cfg->clipboard_template = g_strdup(DEFAULT_CLIPBOARD_TEMPLATE);
        cfg->requests_per_minute = 6;
        cfg->request_burst = 3;
        cfg->max_in_flight = 1;
        cfg->max_queued = 8;
        cfg->batch_list_max = 40;
        cfg->memory_cap_mb = 64;
        cfg->snapshot_cache_kb = 4096;
        cfg->max_tokens = 160;
        cfg->temperature = 0.3;
        cfg->system_prompt = g_strdup(DEFAULT_SYSTEM_PROMPT);
        cfg->prompt_max_bytes = 4096;
        cfg->request_timeout_s = 600;
        cfg->title_max_length = 80;
        cfg->body_max_length = 400;
        return cfg;
}

static int load_key(MonitorConfig *cfg, GKeyFile *kf, const KeySpec *k, const char *file,
                    axp_error *err) {
        g_autoptr(GError) e = NULL;
        g_autofree char *raw = NULL;
        char *field = (char *) cfg + k->offset;

        if (!g_key_file_has_key(kf, k->group, k->key, NULL))
                return 0;
        raw = g_key_file_get_value(kf, k->group, k->key, NULL);
        g_strstrip(raw);

        switch (k->type) {
        case KEY_STRING: {
                char *s = g_key_file_get_string(kf, k->group, k->key, &e);
                if (!s)
                        break;
                g_free(*(char **) field);
                *(char **) field = s;
                return 0;
        }
        case KEY_LIST: {
                gsize n = 0;
                g_auto(GStrv) list = g_key_file_get_string_list(kf, k->group, k->key, &n, &e);
                if (!list && !g_error_matches(e, G_KEY_FILE_ERROR, G_KEY_FILE_ERROR_INVALID_VALUE)) {
                        /* An empty value is an empty list. */
                        list = g_new0(char *, 1);
                        g_clear_error(&e);
                }
                if (!list)
                        break;
                g_autoptr(GPtrArray) out = g_ptr_array_new_with_free_func(g_free);
                for (gsize i = 0; list[i]; i++) {
                        g_strstrip(list[i]);
                        if (list[i][0] == 0)
                                continue;
                        g_ptr_array_add(out, k->offset == F(watch) ? expand_path(list[i])
                                                                     : g_strdup(list[i]));
                }
                g_ptr_array_add(out, NULL);
                g_strfreev(*(char ***) field);
                *(char ***) field = (char **) g_ptr_array_free(g_steal_pointer(&out), FALSE);
                return 0;
        }
        case KEY_BOOL: {
                gboolean b = g_key_file_get_boolean(kf, k->group, k->key, &e);
                if (e)
                        break;
                *(bool *) field = b;
                return 0;
        }
        case KEY_UINT:
        case KEY_SIZE: {
                guint64 v;
                int r = k->type == KEY_SIZE ? axp_parse_size(raw, 0, UINT64_MAX, &v) : axp_parse_u64(raw, 0, G_MAXUINT32, &v);
                if (r < 0 || v < k->min || v > k->max)
                        return axp_errorf(err, -EINVAL,
                                          "%s: [%s] %s=%s: expected a whole number from "
                                          "%" G_GUINT64_FORMAT " to %" G_GUINT64_FORMAT "%s",
                                          file, k->group, k->key, raw, k->min, k->max,
                                          k->type == KEY_SIZE ? " (K, M, G or T suffix allowed)" : "");
                if (k->type == KEY_SIZE)
                        *(guint64 *) field = v;
                else
                        *(guint *) field = (guint) v;
                return 0;
        }
        case KEY_DOUBLE: {
                double v;
                if (axp_parse_double(raw, (double) k->min, (double) k->max, &v) < 0)
                        return axp_errorf(err, -EINVAL,
                                          "%s: [%s] %s=%s: expected a number from %" G_GUINT64_FORMAT
                                          " to %" G_GUINT64_FORMAT,
                                          file, k->group, k->key, raw, k->min, k->max);
                *(double *) field = v;
                return 0;
        }
        }
        return axp_errorf(err, -EINVAL, "%s: [%s] %s: %s", file, k->group, k->key,
                          e ? e->message : "invalid value");
}

static void warn_unknown_keys(GKeyFile *kf, const char *file) {
        g_auto(GStrv) groups = g_key_file_get_groups(kf, NULL);
        for (size_t g = 0; groups[g]; g++) {
                g_auto(GStrv) names = g_key_file_get_keys(kf, groups[g], NULL, NULL);
                bool group_known = false;
                for (size_t i = 0; i < ELEMENTSOF(keys); i++)
                        group_known |= strcmp(keys[i].group, groups[g]) == 0;
                if (!group_known) {
                        g_warning("%s: unknown group [%s] ignored", file, groups[g]);
                        continue;
                }
                for (size_t n = 0; names && names[n]; n++) {
                        bool known = strcmp(groups[g], "files") == 0 &&
                                     strcmp(names[n], "default_ignore") == 0;
                        for (size_t i = 0; i < ELEMENTSOF(keys) && !known; i++)
                                known = strcmp(keys[i].group, groups[g]) == 0 &&
                                        strcmp(keys[i].key, names[n]) == 0;
                        if (!known)
                                g_warning("%s: unknown key [%s] %s ignored", file, groups[g], names[n]);
                }
        }
}

static int config_from_keyfile(GKeyFile *kf, const char *file, MonitorConfig **ret, axp_error *err) {
        g_autoptr(MonitorConfig) cfg = monitor_config_defaults();
        g_autoptr(GError) e = NULL;
        bool defaults = true;
        int r;

        for (size_t i = 0; i < ELEMENTSOF(keys); i++) {
                r = load_key(cfg, kf, &keys[i], file, err);
                if (r < 0)
                        return r;
        }
        if (g_key_file_has_key(kf, "files", "default_ignore", NULL)) {
                defaults = g_key_file_get_boolean(kf, "files", "default_ignore", &e);
                if (e)
                        return axp_errorf(err, -EINVAL, "%s: [files] default_ignore: %s", file,
                                          e->message);
        }
        /* The user's ignore list adds to the defaults, so that extending it cannot quietly
         * expose ~/.ssh; default_ignore=false drops them. */
        if (defaults && g_key_file_has_key(kf, "files", "ignore", NULL)) {
                g_autoptr(GStrvBuilder) b = g_strv_builder_new();
                g_strv_builder_addv(b, (const char **) default_ignore);
                for (size_t i = 0; cfg->ignore[i]; i++)
                        if (!g_strv_contains(default_ignore, cfg->ignore[i]))
                                g_strv_builder_add(b, cfg->ignore[i]);
                g_strfreev(cfg->ignore);
                cfg->ignore = g_strv_builder_end(b);
        } else if (!defaults && !g_key_file_has_key(kf, "files", "ignore", NULL)) {
                g_strfreev(cfg->ignore);
                cfg->ignore = g_new0(char *, 1);
        }
        warn_unknown_keys(kf, file);
        cfg->source = g_strdup(file);
        *ret = g_steal_pointer(&cfg);
        return 0;
}

int monitor_config_load(const char *path, MonitorConfig **ret, axp_error *err) {
        g_autoptr(GKeyFile) kf = g_key_file_new();
        g_autoptr(GError) e = NULL;
        g_autofree char *found = NULL;

        if (path) {
                if (!g_key_file_load_from_file(kf, path, G_KEY_FILE_NONE, &e))
                        return axp_errorf(err, -EINVAL, "cannot read config %s: %s", path,
                                          e->message);
                return config_from_keyfile(kf, path, ret, err);
        }

        g_autofree char *user = g_build_filename(g_get_user_config_dir(), "agentxpu",
                                                 "monitor.conf", NULL);
        if (g_file_test(user, G_FILE_TEST_EXISTS))
                found = g_steal_pointer(&user);
        for (const char *const *d = g_get_system_config_dirs(); !found && *d; d++) {
                g_autofree char *p = g_build_filename(*d, "agentxpu", "monitor.conf", NULL);
                if (g_file_test(p, G_FILE_TEST_EXISTS))
                        found = g_steal_pointer(&p);
        }
        if (!found) {
                *ret = monitor_config_defaults();
                return 0;
        }
        if (!g_key_file_load_from_file(kf, found, G_KEY_FILE_NONE, &e))
                return axp_errorf(err, -EINVAL, "cannot read config %s: %s", found, e->message);
        return config_from_keyfile(kf, found, ret, err);
}

int monitor_config_set_watch(MonitorConfig *cfg, char **dirs, axp_error *err) {
        g_autoptr(GStrvBuilder) b = g_strv_builder_new();
        for (size_t i = 0; dirs && dirs[i]; i++) {
                if (dirs[i][0] == 0)
                        return axp_errorf(err, -EINVAL, "--watch needs a folder");
                g_autofree char *dir = expand_path(dirs[i]);
                g_strv_builder_add(b, dir);
        }
        g_strfreev(cfg->watch);
        cfg->watch = g_strv_builder_end(b);
        return 0;
}

void monitor_config_add_exclude(MonitorConfig *cfg, const char *dir) {
        gsize n = g_strv_length(cfg->exclude);
        cfg->exclude = g_renew(char *, cfg->exclude, n + 2);
        cfg->exclude[n] = expand_path(dir);
        cfg->exclude[n + 1] = NULL;
}

char *monitor_config_dump(const MonitorConfig *cfg) {
        g_autoptr(GKeyFile) kf = g_key_file_new();

        for (size_t i = 0; i < ELEMENTSOF(keys); i++) {
                const KeySpec *k = &keys[i];
                const char *field = (const char *) cfg + k->offset;
                g_autofree char *v = NULL;

                switch (k->type) {
                case KEY_STRING:
                        g_key_file_set_string(kf, k->group, k->key, *(char *const *) field);
                        continue;
                case KEY_LIST: {
                        char *const *list = *(char *const *const *) field;
                        g_key_file_set_string_list(kf, k->group, k->key, (const char *const *) list,
                                                   g_strv_length((char **) list));
                        continue;
                }
                case KEY_BOOL:
                        g_key_file_set_boolean(kf, k->group, k->key, *(const bool *) field);
                        continue;
                case KEY_UINT:
                        v = g_strdup_printf("%u", *(const guint *) field);
                        break;
                case KEY_SIZE:
                        v = g_strdup_printf("%" G_GUINT64_FORMAT, *(const guint64 *) field);
                        break;
                case KEY_DOUBLE: {
                        char buf[G_ASCII_DTOSTR_BUF_SIZE];
                        g_ascii_formatd(buf, sizeof(buf), "%.6g", *(const double *) field);
                        v = g_strdup(buf);
                        break;
                }
                }
                g_key_file_set_value(kf, k->group, k->key, v);
        }
        return g_key_file_to_data(kf, NULL, NULL);
}

static bool under(const char *path, const char *dir) {
        size_t n = strlen(dir);
        if (n > 1 && dir[n - 1] == '/')
                n--;
        return strncmp(path, dir, n) == 0 && (path[n] == '/' || path[n] == 0);
}

bool monitor_config_watched(const MonitorConfig *cfg, const char *path) {
        for (size_t i = 0; cfg->watch[i]; i++)
                if (under(path, cfg->watch[i]))
                        return true;
        return false;
}

bool monitor_config_ignored(const MonitorConfig *cfg, const char *path, bool is_dir) {
        const char *rel = path;
        size_t best = 0;

        for (size_t i = 0; cfg->exclude[i]; i++)
                if (under(path, cfg->exclude[i]))
                        return true;
        /* Globs apply to the part below the watched folder, so that watching a folder that
         * itself lies in, say, ~/.cache still works. */
        for (size_t i = 0; cfg->watch[i]; i++) {
                size_t n = strlen(cfg->watch[i]);
                if (under(path, cfg->watch[i]) && n > best) {
                        best = n;
                        rel = path + n;
                }
        }
        while (*rel == '/')
                rel++;
        if (*rel == 0)
                return false;

        g_auto(GStrv) parts = g_strsplit(rel, "/", -1);
        guint nparts = g_strv_length(parts);
        for (size_t g = 0; cfg->ignore[g]; g++) {
                const char *pat = cfg->ignore[g];
                size_t len = strlen(pat);

                if (len > 1 && pat[len - 1] == '/') {
                        g_autofree char *dirpat = g_strndup(pat, len - 1);
                        guint folders = is_dir ? nparts : nparts - 1;
                        for (guint i = 0; i < folders; i++)
                                if (fnmatch(dirpat, parts[i], 0) == 0)
                                        return true;
                } else if (strchr(pat, '/')) {
                        if (fnmatch(pat, rel, FNM_PATHNAME) == 0)
                                return true;
                } else if (fnmatch(pat, parts[nparts - 1], 0) == 0)
                        return true;
        }
        return false;
}
