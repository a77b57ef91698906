/* SPDX-License-Identifier: MIT */
#include "watcher.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inotifytools/inotify.h>
#include <inotifytools/inotifytools.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define WATCH_MASK                                                                                 \
        (IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE | IN_DELETE_SELF | IN_MOVE_SELF | \
         IN_ONLYDIR | IN_DONT_FOLLOW | IN_EXCL_UNLINK)
/* Messages waiting for the main loop before the thread pauses. */
#define OUTBOX_MAX 8192
/* A rescan after an overflow also looks at files this much older than the last event. */
#define RESCAN_SLACK_S 2

struct Watcher {
        const MonitorConfig *cfg;
        WatcherFn fn;
        void *userdata;
        GMainContext *ctx;
        GThread *thread;

        GMutex lock;
        GCond drained;
        GPtrArray *outbox;
        GSource *wakeup;        /* the pending idle on the main loop, if any */
        gint stop;

        /* Thread-only state. */
        GHashTable *dirs;       /* watched folder (no trailing slash) → wd */
        time_t last_quiet;      /* the kernel queue was last seen empty */
        bool told_limit;
        guint32 move_cookie;    /* a folder moved out, waiting for its MOVED_TO */
        char *move_from;
        GHashTable *lost_roots; /* watched folders deleted or moved away: watched again
                                 * once they are back */
        gint64 lost_check_us;
};

void watch_msg_free(WatchMsg *m) {
        if (!m)
                return;
        g_free(m->text);
        g_free(m);
}

static gboolean deliver_cb(gpointer data) {
        Watcher *w = data;
        g_autoptr(GPtrArray) msgs = NULL;

        g_mutex_lock(&w->lock);
        msgs = w->outbox;
        w->outbox = g_ptr_array_new_with_free_func((GDestroyNotify) watch_msg_free);
        g_source_unref(w->wakeup);
        w->wakeup = NULL;
        g_cond_broadcast(&w->drained);
        g_mutex_unlock(&w->lock);
        w->fn(w->userdata, msgs);
        return G_SOURCE_REMOVE;
}

static void post(Watcher *w, WatchKind kind, char *text) {
        WatchMsg *m = g_new0(WatchMsg, 1);
        m->kind = kind;
        m->text = text;

        g_mutex_lock(&w->lock);
        while (w->outbox->len >= OUTBOX_MAX && !g_atomic_int_get(&w->stop))
                g_cond_wait(&w->drained, &w->lock);
        g_ptr_array_add(w->outbox, m);
        if (!w->wakeup) {
                w->wakeup = g_idle_source_new();
                g_source_set_callback(w->wakeup, deliver_cb, w, NULL);
                g_source_attach(w->wakeup, w->ctx);
        }
        g_mutex_unlock(&w->lock);
}

static void postf(Watcher *w, WatchKind kind, const char *fmt, ...) G_GNUC_PRINTF(3, 4);
static void postf(Watcher *w, WatchKind kind, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        post(w, kind, g_strdup_vprintf(fmt, ap));
        va_end(ap);
}

static void watch_dir(Watcher *w, const char *dir) {
        int wd;

        if (g_hash_table_contains(w->dirs, dir))
                return;
        if (!inotifytools_watch_file(dir, WATCH_MASK)) {
                int e = inotifytools_error();
                g_autofree char *shown = log_visible(dir);
                if (e == ENOSPC && !w->told_limit) {
                        w->told_limit = true;
                        postf(w, WATCH_ERROR,
                              "files: the inotify watch limit is reached (fs.inotify.max_user_watches="
                              "%d); folders from %s on are not watched",
                              inotifytools_get_max_user_watches(), shown);
                } else if (e != ENOENT && e != ENOSPC)
                        postf(w, WATCH_ERROR, "files: cannot watch %s: %s", shown, g_strerror(e));
                return;
        }
        wd = inotifytools_wd_from_filename(dir);
        if (wd < 0) {
                g_autofree char *slash = g_strconcat(dir, "/", NULL);
                wd = inotifytools_wd_from_filename(slash);
        }
        g_hash_table_insert(w->dirs, g_strdup(dir), GINT_TO_POINTER(wd));
}

/* Watches `top` and every folder below it that is not ignored. With `since` >= 0, also
 * reports the files found that were modified at or after `since` (files that appeared in a
 * new folder before its watch was set, or whose events an overflow lost). */
static void add_tree(Watcher *w, const char *top, time_t since) {
        g_autoptr(GPtrArray) stack = g_ptr_array_new_with_free_func(g_free);

        g_ptr_array_add(stack, g_strdup(top));
        while (stack->len > 0 && !g_atomic_int_get(&w->stop)) {
                g_autofree char *dir = g_ptr_array_steal_index(stack, stack->len - 1);
                DIR *d;
                struct dirent *de;

                if (monitor_config_ignored(w->cfg, dir, true))
                        continue;
                /* Watch first, list second: a file created in between shows up twice, which
                 * the debounce merges, rather than not at all. */
                watch_dir(w, dir);
                d = opendir(dir);
                if (!d)
                        continue;
                while ((de = readdir(d))) {
                        struct stat st;
                        char *path;

                        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                                continue;
                        path = g_build_filename(dir, de->d_name, NULL);
                        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
                                g_free(path);
                                continue;
                        }
                        if (S_ISDIR(st.st_mode)) {
                                g_ptr_array_add(stack, path);
                                continue;
                        }
                        if (since >= 0 && S_ISREG(st.st_mode) && st.st_mtime >= since &&
                            !monitor_config_ignored(w->cfg, path, false)) {
                                post(w, WATCH_CHANGED, path);
                                continue;
                        }
                        g_free(path);
                }
                closedir(d);
        }
}

static bool under(const char *path, const char *dir) {
        size_t n = strlen(dir);
        return strncmp(path, dir, n) == 0 && (path[n] == '/' || path[n] == 0);
}

/* Forgets the folders at and below `dir`; with `unwatch` the kernel watches go too (a
 * folder moved out of the tree keeps sending events under a name no longer true). */
static void forget_tree(Watcher *w, const char *dir, bool unwatch) {
        GHashTableIter it;
        gpointer k, v;

        g_hash_table_iter_init(&it, w->dirs);
        while (g_hash_table_iter_next(&it, &k, &v)) {
                if (!under(k, dir))
                        continue;
                if (unwatch)
                        inotifytools_remove_watch_by_wd(GPOINTER_TO_INT(v));
                g_hash_table_iter_remove(&it);
        }
}

/* A folder renamed inside the tree: its watches stay, only their names change. */
static void rename_tree(Watcher *w, const char *from, const char *to) {
        g_autoptr(GPtrArray) moved = g_ptr_array_new();
        g_autofree char *from_slash = g_strconcat(from, "/", NULL);
        g_autofree char *to_slash = g_strconcat(to, "/", NULL);
        GHashTableIter it;
        gpointer k, v;

        inotifytools_replace_filename(from_slash, to_slash);
        g_hash_table_iter_init(&it, w->dirs);
        while (g_hash_table_iter_next(&it, &k, &v))
                if (under(k, from))
                        g_ptr_array_add(moved, g_strdup(k));
        for (guint i = 0; i < moved->len; i++) {
                char *old = moved->pdata[i];
                gpointer wd = g_hash_table_lookup(w->dirs, old);
                g_hash_table_remove(w->dirs, old);
                g_hash_table_insert(w->dirs, g_strconcat(to, old + strlen(from), NULL), wd);
                g_free(old);
        }
}

static void finish_move(Watcher *w) {
        if (!w->move_from)
                return;
        forget_tree(w, w->move_from, true);
        g_clear_pointer(&w->move_from, g_free);
}

static void rescan(Watcher *w) {
        /* Every event queued before the last quiet moment was read; lost ones are younger. */
        time_t since = w->last_quiet - RESCAN_SLACK_S;
        finish_move(w);
        postf(w, WATCH_OVERFLOW, "files: the kernel's event queue overflowed; rescanning for "
              "files changed since the last event seen");
        for (size_t i = 0; w->cfg->watch[i]; i++)
                add_tree(w, w->cfg->watch[i], since);
}

static void handle_event(Watcher *w, struct inotify_event *ev) {
        const char *dir;
        g_autofree char *path = NULL;
        bool is_dir = ev->mask & IN_ISDIR;

        if (ev->mask & IN_Q_OVERFLOW) {
                rescan(w);
                return;
        }
        if (w->move_from && !((ev->mask & IN_MOVED_TO) && ev->cookie == w->move_cookie))
                finish_move(w);
        dir = inotifytools_filename_from_wd(ev->wd);
        if (!dir)
                return;
        if (ev->len > 0 && ev->name[0])
                path = g_build_filename(dir, ev->name, NULL);
        else {
                path = g_strdup(dir);
                if (strlen(path) > 1 && g_str_has_suffix(path, "/"))
                        path[strlen(path) - 1] = 0;
        }

        if (ev->mask & IN_IGNORED) {
                g_hash_table_remove(w->dirs, path);
                return;
        }
        if (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF)) {
                for (size_t i = 0; w->cfg->watch[i]; i++)
                        if (strcmp(w->cfg->watch[i], path) == 0) {
                                g_autofree char *shown = log_visible(path);
                                postf(w, WATCH_ERROR, "files: the watched folder %s was %s; it is "
                                      "watched again if it comes back", shown,
                                      ev->mask & IN_DELETE_SELF ? "deleted" : "moved");
                                /* A moved tree keeps its watches under names no longer true. */
                                forget_tree(w, path, true);
                                g_hash_table_add(w->lost_roots, g_strdup(path));
                        }
                return;
        }
        if (is_dir) {
                if (ev->mask & IN_MOVED_FROM) {
                        w->move_cookie = ev->cookie;
                        w->move_from = g_steal_pointer(&path);
                } else if ((ev->mask & IN_MOVED_TO) && w->move_from) {
                        rename_tree(w, w->move_from, path);
                        g_clear_pointer(&w->move_from, g_free);
                } else if (ev->mask & (IN_CREATE | IN_MOVED_TO))
                        /* Files may land in a new folder before its watch exists. */
                        add_tree(w, path, 0);
                return;
        }
        if ((ev->mask & (IN_CLOSE_WRITE | IN_MOVED_TO)) && !monitor_config_ignored(w->cfg, path, false))
                post(w, WATCH_CHANGED, g_steal_pointer(&path));
}

/* A watched folder that was deleted or moved away and exists again (a restore, a sync
 * client, a fresh clone) is watched again, its files reported as new. */
static void check_lost_roots(Watcher *w) {
        g_autoptr(GPtrArray) back = g_ptr_array_new_with_free_func(g_free);
        GHashTableIter it;
        gpointer k;
        gint64 now = g_get_monotonic_time();

        if (g_hash_table_size(w->lost_roots) == 0 || now - w->lost_check_us < G_USEC_PER_SEC)
                return;
        w->lost_check_us = now;
        g_hash_table_iter_init(&it, w->lost_roots);
        while (g_hash_table_iter_next(&it, &k, NULL)) {
                struct stat st;
                if (stat(k, &st) == 0 && S_ISDIR(st.st_mode)) {
                        g_ptr_array_add(back, g_strdup(k));
                        g_hash_table_iter_remove(&it);
                }
        }
        for (guint i = 0; i < back->len; i++) {
                g_autofree char *shown = log_visible(back->pdata[i]);
                postf(w, WATCH_READY, "files: the watched folder %s is back; watching it again", shown);
                add_tree(w, back->pdata[i], 0);
        }
}

static gpointer thread_main(gpointer data) {
        Watcher *w = data;
        guint roots = 0;

        w->last_quiet = time(NULL);
        if (!inotifytools_initialize()) {
                postf(w, WATCH_ERROR, "files: cannot start inotify: %s; file suggestions are off",
                      g_strerror(inotifytools_error()));
                return NULL;
        }
        for (size_t i = 0; w->cfg->watch[i]; i++) {
                struct stat st;
                if (stat(w->cfg->watch[i], &st) < 0 || !S_ISDIR(st.st_mode)) {
                        g_autofree char *shown = log_visible(w->cfg->watch[i]);
                        postf(w, WATCH_ERROR, "files: %s is not a folder; not watched", shown);
                        continue;
                }
                add_tree(w, w->cfg->watch[i], -1);
                roots++;
        }
        postf(w, WATCH_READY, "files: watching %u folders in %u trees", g_hash_table_size(w->dirs),
              roots);

        while (!g_atomic_int_get(&w->stop)) {
                /* A timeout of a second lets the thread notice the stop request. */
                struct inotify_event *ev = inotifytools_next_event(1);
                check_lost_roots(w);
                if (!ev) {
                        int e = inotifytools_error();
                        if (e == 0)
                                w->last_quiet = time(NULL);
                        finish_move(w);
                        if (e != 0 && e != EINTR) {
                                postf(w, WATCH_ERROR, "files: reading inotify events failed: %s",
                                      g_strerror(e));
                                g_usleep(G_USEC_PER_SEC);
                        }
                        continue;
                }
                handle_event(w, ev);
        }
        inotifytools_cleanup();
        return NULL;
}

Watcher *watcher_start(const MonitorConfig *cfg, WatcherFn fn, void *userdata) {
        Watcher *w = g_new0(Watcher, 1);
        w->cfg = cfg;
        w->fn = fn;
        w->userdata = userdata;
        w->ctx = g_main_context_ref_thread_default();
        g_mutex_init(&w->lock);
        g_cond_init(&w->drained);
        w->outbox = g_ptr_array_new_with_free_func((GDestroyNotify) watch_msg_free);
        w->dirs = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
        w->lost_roots = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
        w->thread = g_thread_new("inotify", thread_main, w);
        return w;
}

void watcher_stop(Watcher *w) {
        if (!w)
                return;
        g_atomic_int_set(&w->stop, 1);
        g_mutex_lock(&w->lock);
        g_cond_broadcast(&w->drained);
        g_mutex_unlock(&w->lock);
        g_thread_join(w->thread);
        if (w->wakeup) {
                g_source_destroy(w->wakeup);
                g_source_unref(w->wakeup);
        }
        g_ptr_array_unref(w->outbox);
        g_hash_table_unref(w->dirs);
        g_hash_table_unref(w->lost_roots);
        g_free(w->move_from);
        g_mutex_clear(&w->lock);
        g_cond_clear(&w->drained);
        g_main_context_unref(w->ctx);
        g_free(w);
}
