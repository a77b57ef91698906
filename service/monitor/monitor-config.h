/* SPDX-License-Identifier: MIT */
/* The monitor's configuration: ~/.config/agentxpu/monitor.conf (a GKeyFile), else the first
 * agentxpu/monitor.conf in $XDG_CONFIG_DIRS, else the built-in defaults that
 * data/monitor.conf documents. */
#pragma once

#include "common.h"

#include <glib.h>
#include <stdbool.h>


/* Exit status for a configuration the user must fix (EX_CONFIG); the unit does not restart. */
#define MONITOR_EXIT_CONFIG 78

typedef struct MonitorConfig {
        char *source;                   /* the file read, or NULL for the defaults */

        /* [files] */
        char **watch;                   /* absolute folders */
        char **ignore;                  /* globs: "name/" a folder anywhere, else a name */
        char **exclude;                 /* absolute folders never watched (the state dir) */
        guint64 max_file_size;
        guint debounce_ms;
        guint burst_threshold;          /* paths changing at once that make a burst */
        guint burst_max_wait_ms;        /* a burst that never quiets is summarized anyway */
        char *file_template;
        char *batch_template;

        /* [clipboard] */
        bool clipboard;
        guint64 clipboard_max_size;
        char *clipboard_template;

        /* [limits] */
        double requests_per_minute;
        guint request_burst;
        guint max_in_flight;
        guint max_queued;               /* queued file events beyond this are summarized */
        guint batch_list_max;           /* paths named in a summary; the rest are counted */
        guint memory_cap_mb;
        guint snapshot_cache_kb;        /* earlier versions kept to say what changed */

        /* [engine] */
        guint max_tokens;
        double temperature;
        char *system_prompt;
        guint prompt_max_bytes;         /* of file or clipboard text quoted in a prompt */
        guint request_timeout_s;
        guint title_max_length;         /* of a suggestion's title and body, in characters */
        guint body_max_length;
} MonitorConfig;

/* Loads `path` (or the default locations when NULL). A missing default file means the
 * defaults; a malformed one, an unreadable `path` or a bad value is an error. Unknown keys
 * are logged and ignored. */
int monitor_config_load(const char *path, MonitorConfig **ret, axp_error *err);
MonitorConfig *monitor_config_defaults(void);
void monitor_config_free(MonitorConfig *cfg);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(MonitorConfig, monitor_config_free)

/* Replaces the watched folders (from --watch). */
int monitor_config_set_watch(MonitorConfig *cfg, char **dirs, axp_error *err);
void monitor_config_add_exclude(MonitorConfig *cfg, const char *dir);

/* Writes the effective configuration in monitor.conf syntax. */
char *monitor_config_dump(const MonitorConfig *cfg);

/* Whether `path` (absolute, below one of the watched folders) must be left alone: an ignore
 * glob matches one of its folders or its name, or it lies in an excluded folder. `is_dir`
 * says the path itself is a folder. */
bool monitor_config_ignored(const MonitorConfig *cfg, const char *path, bool is_dir);

/* Whether `path` is one of the watched folders or lies below one. */
bool monitor_config_watched(const MonitorConfig *cfg, const char *path);
