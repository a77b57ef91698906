/* SPDX-License-Identifier: MIT */
/* agentxpu-monitor: the per-session proactive monitor. It watches folders and the clipboard
 * as the user, and asks the engine (org.agentxpu.Engine) for suggestions in the background;
 * see DESIGN.md §8. One Context holds the daemon's state; run() owns it. */
#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <glib-unix.h>
#include <glib/gstdio.h>
#include <locale.h>
#include <malloc.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "clipboard.h"
#include "config.h"
#include "dispatch.h"
#include "files.h"
#include "journal.h"
#include "monitor-config.h"
#include "notify.h"
#include "store.h"

#define HOUSEKEEPING_S 2
#define JOURNAL_COMPACT_BYTES (1 << 20)
#define STORE_MAX_BYTES (8 << 20)

typedef struct Context {
        MonitorConfig *cfg;
        char *address;
        char *state_dir;
        int lock_fd;
        Journal *journal;
        Store *store;
        Notifier *notifier;
        Dispatcher *dispatcher;
        Files *files;
        Clipboard *clipboard;
        GMainLoop *loop;
        guint housekeeping;
        bool shedding;
} Context;

static void context_clear(Context *c) {
        if (c->housekeeping)
                g_source_remove(c->housekeeping);
        g_clear_pointer(&c->clipboard, clipboard_free);
        g_clear_pointer(&c->files, files_free);
        g_clear_pointer(&c->dispatcher, dispatcher_free);
        g_clear_pointer(&c->notifier, notifier_free);
        g_clear_pointer(&c->store, store_free);
        g_clear_pointer(&c->journal, journal_free);
        g_clear_pointer(&c->loop, g_main_loop_unref);
        g_clear_pointer(&c->cfg, monitor_config_free);
        g_free(c->address);
        g_free(c->state_dir);
        if (c->lock_fd >= 0)
                close(c->lock_fd);
}

/* Resident memory in bytes, from /proc/self/statm. */
static guint64 rss_bytes(void) {
        unsigned long size = 0, resident = 0;
        FILE *f = fopen("/proc/self/statm", "re");
        if (!f)
                return 0;
        if (fscanf(f, "%lu %lu", &size, &resident) != 2)
                resident = 0;
        fclose(f);
        return (guint64) resident * (guint64) sysconf(_SC_PAGESIZE);
}

static void compact_journal(Context *c) {
        g_autoptr(GPtrArray) events = dispatcher_pending(c->dispatcher);
        g_autoptr(GPtrArray) seen = c->files ? files_pending(c->files) : NULL;
        axp_error err = { 0 };

        if (journal_rewrite(c->journal, events, seen, dispatcher_last_id(c->dispatcher), &err) < 0)
                g_warning("%s", err.msg);
}

static gboolean housekeeping_cb(gpointer data) {
        Context *c = data;
        guint64 rss = rss_bytes(), cap = (guint64) c->cfg->memory_cap_mb << 20;

        /* Past three quarters of the cap, drop what can be rebuilt and summarize what waits. */
        if (rss > cap / 4 * 3) {
                if (!c->shedding)
                        g_warning("memory: %" G_GUINT64_FORMAT " MiB resident, near the cap of %u MiB "
                                  "([limits] memory_cap_mb); summarizing pending changes",
                                  rss >> 20, c->cfg->memory_cap_mb);
                c->shedding = true;
                if (c->files)
                        files_shed(c->files);
                malloc_trim(0);
        } else
                c->shedding = false;
        /* Compact what was appended, not what is pending: pending events larger than the
         * threshold would otherwise rewrite (and fsync) the whole file every time. */
        if (journal_growth(c->journal) > JOURNAL_COMPACT_BYTES)
                compact_journal(c);
        return G_SOURCE_CONTINUE;
}

static gboolean on_quit_signal(gpointer data) {
        Context *c = data;
        g_message("stopping");
        g_main_loop_quit(c->loop);
        return G_SOURCE_CONTINUE;
}

/* One monitor per user: a second one (the autostart entry beside the unit, say) would
 * submit every journaled event twice. */
static int take_lock(Context *c, axp_error *err) {
        g_autofree char *path = g_build_filename(c->state_dir, "monitor.lock", NULL);

        c->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (c->lock_fd < 0)
                return axp_errorf(err, -errno, "cannot open %s: %s", path, g_strerror(errno));
        if (flock(c->lock_fd, LOCK_EX | LOCK_NB) < 0)
                return axp_errorf(err, -errno, "another agentxpu-monitor runs for this user (%s is "
                                  "locked)", path);
        return 0;
}

static int open_state(Context *c, JournalState **ret_state, axp_error *err) {
        g_autofree char *journal_path = g_build_filename(c->state_dir, "monitor-journal.jsonl", NULL);
        g_autofree char *store_path = g_build_filename(c->state_dir, "suggestions.jsonl", NULL);
        g_autoptr(JournalState) st = NULL;
        g_autoptr(GHashTable) ids = g_hash_table_new(g_int64_hash, g_int64_equal);
        int r;

        r = journal_open(journal_path, &c->journal, &st, err);
        if (r < 0)
                return r;
        r = store_open(store_path, STORE_MAX_BYTES, &c->store, err);
        if (r < 0)
                return r;

        /* Answered but not marked done (killed in between): never again. */
        for (guint i = 0; i < st->events->len; i++)
                g_hash_table_add(ids, &((Event *) st->events->pdata[i])->id);
        store_forget_answered(c->store, ids);
        /* ... and what the configuration no longer allows (a folder no longer watched, a glob
         * since added, the clipboard turned off: the events were made under the configuration
         * of before the restart) is dropped, not sent. */
        for (guint i = st->events->len; i > 0; i--) {
                const Event *ev = st->events->pdata[i - 1];
                bool allowed = ev->source == EVENT_CLIPBOARD
                                       ? c->cfg->clipboard
                                       : monitor_config_watched(c->cfg, ev->path) &&
                                                 !monitor_config_ignored(c->cfg, ev->path, ev->source == EVENT_BATCH);
                if (!g_hash_table_contains(ids, &ev->id))
                        g_message("journal: event %" G_GUINT64_FORMAT " was answered before the restart", ev->id);
                else if (!allowed)
                        g_message("journal: event %" G_GUINT64_FORMAT " from before the restart is "
                                  "not sent: the configuration no longer allows it", ev->id);
                else
                        continue;
                g_ptr_array_remove_index(st->events, i - 1);
        }
        r = journal_rewrite(c->journal, st->events, st->seen, st->last_id, err);
        if (r < 0)
                return r;
        *ret_state = g_steal_pointer(&st);
        return 0;
}

static int run(int argc, char **argv) {
        _cleanup_(context_clear) Context c = { .lock_fd = -1 };
        g_autofree char *config_path = NULL;
        g_auto(GStrv) watch = NULL;
        gboolean no_clipboard = FALSE, dump = FALSE, version = FALSE;
        g_autoptr(GError) e = NULL;
        g_autoptr(JournalState) st = NULL;
        axp_error err = { 0 };
        GOptionEntry entries[] = {
                { "address", 0, 0, G_OPTION_ARG_STRING, &c.address,
                  "The engine's bus (default: the system bus)", "BUS_ADDRESS" },
                { "watch", 0, 0, G_OPTION_ARG_FILENAME_ARRAY, &watch,
                  "Watch this folder instead of the configured ones (repeatable)", "DIR" },
                { "no-clipboard", 0, 0, G_OPTION_ARG_NONE, &no_clipboard,
                  "Leave the clipboard alone", NULL },
                { "config", 0, 0, G_OPTION_ARG_FILENAME, &config_path,
                  "Read this configuration file instead of monitor.conf", "FILE" },
                { "dump-config", 0, 0, G_OPTION_ARG_NONE, &dump,
                  "Print the effective configuration and exit", NULL },
                { "version", 0, 0, G_OPTION_ARG_NONE, &version, "Print the version and exit", NULL },
                { NULL },
        };
        g_autoptr(GOptionContext) opts = g_option_context_new("- suggest help for what you do");
        int r;

        g_option_context_set_summary(opts, "Watches folders and the clipboard and asks the "
                                     "agentxpu engine for suggestions in the background.");
        g_option_context_add_main_entries(opts, entries, NULL);
        if (!g_option_context_parse(opts, &argc, &argv, &e)) {
                fprintf(stderr, "agentxpu-monitor: %s (see --help)\n", e->message);
                return 2;
        }
        if (argc > 1) {
                fprintf(stderr, "agentxpu-monitor: unexpected argument '%s' (see --help)\n", argv[1]);
                return 2;
        }
        if (version) {
                printf("agentxpu-monitor %s\n", AXP_VERSION);
                return 0;
        }

        r = monitor_config_load(config_path, &c.cfg, &err);
        if (r == 0 && watch)
                r = monitor_config_set_watch(c.cfg, watch, &err);
        if (r < 0) {
                fprintf(stderr, "agentxpu-monitor: %s\n", err.msg);
                return MONITOR_EXIT_CONFIG;
        }
        if (no_clipboard)
                c.cfg->clipboard = false;
        if (dump) {
                g_autofree char *text = monitor_config_dump(c.cfg);
                fputs(text, stdout);
                return 0;
        }

        c.state_dir = g_build_filename(g_get_user_state_dir(), "agentxpu", NULL);
        if (g_mkdir_with_parents(c.state_dir, 0700) < 0) {
                fprintf(stderr, "agentxpu-monitor: cannot create %s: %s\n", c.state_dir,
                        g_strerror(errno));
                return 1;
        }
        /* The monitor's own files must never feed it: its state and its config. */
        monitor_config_add_exclude(c.cfg, c.state_dir);
        {
                g_autofree char *conf = g_build_filename(g_get_user_config_dir(), "agentxpu", NULL);
                monitor_config_add_exclude(c.cfg, conf);
        }
        r = take_lock(&c, &err);
        if (r == -EWOULDBLOCK) {
                g_message("%s; exiting", err.msg);
                return 0;
        }
        if (r < 0 || open_state(&c, &st, &err) < 0) {
                fprintf(stderr, "agentxpu-monitor: %s\n", err.msg);
                return 1;
        }

        c.loop = g_main_loop_new(NULL, FALSE);
        c.notifier = notifier_new();
        c.dispatcher = dispatcher_new(c.cfg, c.journal, c.store, c.notifier, c.address, st->last_id);
        dispatcher_restore(c.dispatcher, st->events);
        c.files = files_new(c.cfg, c.journal, c.dispatcher, st->seen);
        c.clipboard = clipboard_new(c.cfg, c.dispatcher);
        c.housekeeping = g_timeout_add_seconds(HOUSEKEEPING_S, housekeeping_cb, &c);
        g_unix_signal_add(SIGTERM, on_quit_signal, &c);
        g_unix_signal_add(SIGINT, on_quit_signal, &c);

        g_message("agentxpu-monitor %s: config %s, %u folders, clipboard %s, engine on %s",
                  AXP_VERSION, c.cfg->source ? c.cfg->source : "(defaults)",
                  g_strv_length(c.cfg->watch), c.cfg->clipboard ? "on" : "off",
                  c.address ? c.address : "the system bus");
        g_main_loop_run(c.loop);

        /* Stop the sources first so nothing new arrives, then save what is pending. */
        g_clear_pointer(&c.clipboard, clipboard_free);
        compact_journal(&c);
        return 0;
}

int main(int argc, char **argv) {
        setlocale(LC_ALL, "");
        return run(argc, argv);
}
