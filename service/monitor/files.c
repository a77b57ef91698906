/* SPDX-License-Identifier: MIT */
#include "files.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "prompt.h"
#include "watcher.h"

/* A burst is summarized at the latest when this many paths wait, whatever its pace. */
#define PENDING_MAX 50000
/* Files up to this size keep their last version to say what changed next time. */
#define SNAPSHOT_FILE_MAX (64 * 1024)
/* A burst's files are only sniffed, not read whole. */
#define SNIFF_BYTES 4096

typedef struct PendingPath {
        gint64 last_us;
} PendingPath;

/* What this monitor last turned into an event about a file: its stat stamp, so the same
 * version reported twice (a slow main loop, a rescan) counts once, and for files it read
 * whole, a digest and (when small) the text, to say what changed next time. */
typedef struct Snapshot {
        char *path;
        ino_t ino;
        off_t size;
        gint64 mtime_ns;
        char *digest;           /* NULL when only sniffed (in a burst) */
        char *data;             /* NULL when too large to keep */
        gsize len;
        GList link;             /* in Files.lru */
} Snapshot;

#define SNAPSHOTS_MAX 16384

struct Files {
        const MonitorConfig *cfg;
        Journal *journal;
        Dispatcher *dispatcher;
        Watcher *watcher;

        GHashTable *pending;    /* path → PendingPath */
        gint64 latest_us;
        bool burst;
        gint64 burst_start_us;
        guint tick_source;

        GHashTable *snapshots;  /* path → Snapshot (owned) */
        GQueue lru;             /* most recent first */
        gsize snapshot_bytes;
};

static void snapshot_free(Snapshot *s) {
        g_free(s->path);
        g_free(s->data);
        g_free(s->digest);
        g_free(s);
}

static void snapshot_drop(Files *f, const char *path) {
        Snapshot *s = g_hash_table_lookup(f->snapshots, path);
        if (!s)
                return;
        f->snapshot_bytes -= s->len;
        g_queue_unlink(&f->lru, &s->link);
        g_hash_table_remove(f->snapshots, path);
}

static gint64 mtime_ns(const struct stat *st) {
        return (gint64) st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

static bool same_version(const Snapshot *s, const struct stat *st) {
        return s && s->ino == st->st_ino && s->size == st->st_size && s->mtime_ns == mtime_ns(st);
}

/* `data` NULL: the file was only sniffed. */
static void snapshot_put(Files *f, const char *path, const struct stat *st, const char *data,
                         gsize len) {
        gsize cap = (gsize) f->cfg->snapshot_cache_kb * 1024;
        Snapshot *s;

        snapshot_drop(f, path);
        s = g_new0(Snapshot, 1);
        s->path = g_strdup(path);
        s->ino = st->st_ino;
        s->size = st->st_size;
        s->mtime_ns = mtime_ns(st);
        if (data)
                s->digest = g_compute_checksum_for_data(G_CHECKSUM_SHA256, (const guchar *) data, len);
        if (data && len <= SNAPSHOT_FILE_MAX && len <= cap) {
                s->data = g_memdup2(data, len);
                s->len = len;
        }
        s->link.data = s;
        g_queue_push_head_link(&f->lru, &s->link);
        g_hash_table_insert(f->snapshots, s->path, s);
        f->snapshot_bytes += s->len;
        /* Oldest out, until the versions kept fit the cap; a bound on the count too, since
         * digests alone take room. */
        while ((f->snapshot_bytes > cap || g_hash_table_size(f->snapshots) > SNAPSHOTS_MAX) &&
               f->lru.tail)
                snapshot_drop(f, ((Snapshot *) f->lru.tail->data)->path);
}

/* Reads a regular file (never through a symlink, never a FIFO or device) of at most `max`
 * bytes (or its first `max` bytes when `sniff`). Returns a reason to skip it, or NULL. */
static const char *read_regular(const char *path, gsize max, bool sniff, char **ret, gsize *ret_len,
                                bool *ret_truncated, struct stat *ret_st) {
        g_autofree char *buf = NULL;
        struct stat st;
        gsize len = 0, want;
        int fd;

        if (lstat(path, &st) < 0)
                return "gone";
        if (!S_ISREG(st.st_mode))
                return "not a regular file";
        if (st.st_size == 0)
                return "empty";
        if (!sniff && (guint64) st.st_size > max)
                return "over max_size";
        fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return "unreadable";
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
                close(fd);
                return "not a regular file";
        }
        want = sniff ? MIN(max, (gsize) st.st_size) : max + 1;
        buf = g_malloc(want + 1);
        while (len < want) {
                ssize_t n = read(fd, buf + len, want - len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        break;
                len += (gsize) n;
        }
        close(fd);
        if (!sniff && len > max)
                return "over max_size";
        if (len == 0)
                return "empty";
        buf[len] = 0;
        *ret_truncated = sniff && (guint64) st.st_size > len;
        *ret_st = st;
        *ret_len = len;
        *ret = g_steal_pointer(&buf);
        return NULL;
}

static void settle_one(Files *f, const char *path) {
        g_autofree char *data = NULL, *change = NULL, *digest = NULL;
        gsize len = 0;
        bool truncated = false;
        const char *skip = NULL;
        Snapshot *snap = g_hash_table_lookup(f->snapshots, path);
        struct stat st;

        if (snap && lstat(path, &st) == 0 && same_version(snap, &st))
                skip = "already seen";
        if (!skip)
                skip = read_regular(path, f->cfg->max_file_size, false, &data, &len, &truncated, &st);
        if (!skip && !prompt_is_text(data, len, false))
                skip = "not text";
        if (!skip) {
                digest = g_compute_checksum_for_data(G_CHECKSUM_SHA256, (const guchar *) data, len);
                if (snap && snap->digest && strcmp(snap->digest, digest) == 0)
                        skip = "unchanged";
                else {
                        change = prompt_describe_change(snap ? snap->data : NULL,
                                                        snap ? snap->len : 0, data, len,
                                                        f->cfg->prompt_max_bytes);
                        if (!change)
                                skip = "unchanged";
                }
        }
        g_autofree char *shown = log_visible(path);
        if (skip) {
                g_debug("files: %s skipped (%s)", shown, skip);
                journal_settle(f->journal, path);
                return;
        }
        snapshot_put(f, path, &st, data, len);

        g_autofree char *name = g_path_get_basename(path);
        const char *vars[] = { "path", path, "name", name, "change", change, NULL };
        Event *ev = event_new(EVENT_FILE, path, prompt_render(f->cfg->file_template, vars));
        dispatcher_add(f->dispatcher, ev, path, false);
        g_message("files: %s changed: event %" G_GUINT64_FORMAT, shown, ev->id);
}

static gint cmp_str(gconstpointer a, gconstpointer b) {
        return strcmp(*(char *const *) a, *(char *const *) b);
}

/* The paths in an order that takes one from each folder in turn, so the ones a summary
 * names show the spread of the burst rather than the first folder alone. */
static GPtrArray *spread_by_folder(GHashTable *pending) {
        g_autoptr(GPtrArray) paths = hash_table_keys(pending);
        g_autoptr(GPtrArray) folders =
                g_ptr_array_new_with_free_func((GDestroyNotify) g_ptr_array_unref);
        g_autoptr(GHashTable) index = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
        GPtrArray *out = g_ptr_array_sized_new(paths->len);

        g_ptr_array_sort(paths, cmp_str);
        for (guint i = 0; i < paths->len; i++) {
                char *dir = g_path_get_dirname(paths->pdata[i]);
                gpointer at;
                if (!g_hash_table_lookup_extended(index, dir, NULL, &at)) {
                        at = GUINT_TO_POINTER(folders->len);
                        g_ptr_array_add(folders, g_ptr_array_new());
                        g_hash_table_insert(index, dir, at);
                } else
                        g_free(dir);
                g_ptr_array_add(folders->pdata[GPOINTER_TO_UINT(at)], paths->pdata[i]);
        }
        for (guint round = 0; out->len < paths->len; round++)
                for (guint k = 0; k < folders->len; k++) {
                        GPtrArray *in = folders->pdata[k];
                        if (round < in->len)
                                g_ptr_array_add(out, in->pdata[round]);
                }
        return out;
}

/* Every waiting path becomes part of one summary. */
static void flush_burst(Files *f) {
        g_autoptr(GPtrArray) paths = spread_by_folder(f->pending);
        g_autoptr(Batch) batch = batch_new();
        guint skipped = 0, seen = 0;

        for (guint i = 0; i < paths->len; i++) {
                const char *path = paths->pdata[i];
                g_autofree char *data = NULL;
                gsize len = 0;
                bool truncated = false;
                struct stat st;

                if (lstat(path, &st) == 0 &&
                    same_version(g_hash_table_lookup(f->snapshots, path), &st)) {
                        seen++;
                        continue;
                }
                if (read_regular(path, SNIFF_BYTES, true, &data, &len, &truncated, &st) ||
                    !prompt_is_text(data, len, truncated) ||
                    (guint64) st.st_size > f->cfg->max_file_size) {
                        skipped++;
                        continue;
                }
                /* Only sniffed: the stamp, but no earlier version to compare with later. */
                snapshot_put(f, path, &st, NULL, 0);
                batch_add_path(batch, path, f->cfg->batch_list_max);
        }
        /* The paths borrow the table's keys: keep them until here. */
        guint changes = paths->len;
        g_clear_pointer(&paths, g_ptr_array_unref);
        g_hash_table_remove_all(f->pending);
        f->burst = false;

        if (batch->total == 0) {
                g_message("files: a burst of %u changes held no new text files", changes);
                journal_settle(f->journal, NULL);
                return;
        }
        Event *ev = event_new(EVENT_BATCH, batch->root,
                              batch_render_prompt(batch, f->cfg->batch_template));
        ev->batch = g_steal_pointer(&batch);
        dispatcher_add(f->dispatcher, ev, NULL, true);
        g_autofree char *root = log_visible(ev->path);
        g_message("files: a burst of %u changes under %s: %" G_GUINT64_FORMAT " text files "
                  "summarized in event %" G_GUINT64_FORMAT " (%u left out: not text, too large or "
                  "gone; %u already reported)", changes, root, ev->batch->total, ev->id,
                  skipped, seen);
}

static gboolean tick_cb(gpointer data) {
        Files *f = data;
        gint64 now = g_get_monotonic_time();
        gint64 quiet = (gint64) f->cfg->debounce_ms * 1000;
        guint n = g_hash_table_size(f->pending);

        if (!f->burst && n >= f->cfg->burst_threshold) {
                f->burst = true;
                f->burst_start_us = now;
                g_message("files: %u files changing at once; they will be summarized together", n);
        }
        if (f->burst) {
                if (now - f->latest_us >= quiet ||
                    now - f->burst_start_us >= (gint64) f->cfg->burst_max_wait_ms * 1000 ||
                    n >= PENDING_MAX)
                        flush_burst(f);
        } else {
                g_autoptr(GPtrArray) ready = g_ptr_array_new_with_free_func(g_free);
                GHashTableIter it;
                gpointer k, v;

                g_hash_table_iter_init(&it, f->pending);
                while (g_hash_table_iter_next(&it, &k, &v))
                        if (now - ((PendingPath *) v)->last_us >= quiet) {
                                g_ptr_array_add(ready, g_strdup(k));
                                g_hash_table_iter_remove(&it);
                        }
                g_ptr_array_sort(ready, cmp_str);
                for (guint i = 0; i < ready->len; i++)
                        settle_one(f, ready->pdata[i]);
        }
        if (g_hash_table_size(f->pending) == 0) {
                f->tick_source = 0;
                return G_SOURCE_REMOVE;
        }
        return G_SOURCE_CONTINUE;
}

static void add_pending(Files *f, const char *path, GPtrArray *new_paths) {
        PendingPath *p = g_hash_table_lookup(f->pending, path);
        gint64 now = g_get_monotonic_time();

        if (!p) {
                p = g_new0(PendingPath, 1);
                g_hash_table_insert(f->pending, g_strdup(path), p);
                if (new_paths)
                        g_ptr_array_add(new_paths, (gpointer) path);
        }
        p->last_us = now;
        f->latest_us = now;
        if (!f->tick_source)
                f->tick_source = g_timeout_add(MAX(20u, f->cfg->debounce_ms / 4), tick_cb, f);
}

static void on_watch(void *userdata, GPtrArray *msgs) {
        Files *f = userdata;
        g_autoptr(GPtrArray) fresh = g_ptr_array_new();

        for (guint i = 0; i < msgs->len; i++) {
                WatchMsg *m = msgs->pdata[i];
                switch (m->kind) {
                case WATCH_CHANGED:
                        add_pending(f, m->text, fresh);
                        break;
                case WATCH_READY:
                case WATCH_OVERFLOW:
                        g_message("%s", m->text);
                        break;
                case WATCH_ERROR:
                        g_warning("%s", m->text);
                        break;
                }
        }
        /* One journal write for the lot. */
        journal_seen(f->journal, fresh);
}

Files *files_new(const MonitorConfig *cfg, Journal *journal, Dispatcher *dispatcher,
                 GPtrArray *restored) {
        Files *f = g_new0(Files, 1);

        f->cfg = cfg;
        f->journal = journal;
        f->dispatcher = dispatcher;
        f->pending = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
        f->snapshots = g_hash_table_new_full(g_str_hash, g_str_equal, NULL,
                                             (GDestroyNotify) snapshot_free);
        g_queue_init(&f->lru);
        guint again = 0;
        for (guint i = 0; restored && i < restored->len; i++) {
                const char *path = restored->pdata[i];
                /* The configuration may have changed since (a folder no longer watched, a new
                 * ignore glob), and the journal is only a file: the same checks as a live event. */
                if (!monitor_config_watched(cfg, path) || monitor_config_ignored(cfg, path, false)) {
                        journal_settle(journal, path);
                        continue;
                }
                add_pending(f, path, NULL);
                again++;
        }
        if (again > 0)
                g_message("files: %u changed paths from before the restart wait again", again);
        if (cfg->watch[0])
                f->watcher = watcher_start(cfg, on_watch, f);
        else
                g_message("files: no folders to watch ([files] watch in monitor.conf)");
        return f;
}

void files_free(Files *f) {
        if (!f)
                return;
        watcher_stop(f->watcher);
        if (f->tick_source)
                g_source_remove(f->tick_source);
        g_hash_table_unref(f->pending);
        g_queue_init(&f->lru);
        g_hash_table_unref(f->snapshots);
        g_free(f);
}

GPtrArray *files_pending(Files *f) {
        GPtrArray *out = hash_table_keys(f->pending);
        g_ptr_array_sort(out, cmp_str);
        return out;
}

void files_shed(Files *f) {
        /* The texts go; the stamps and digests stay, so nothing is reported twice. */
        for (GList *l = f->lru.head; l; l = l->next) {
                Snapshot *s = l->data;
                g_clear_pointer(&s->data, g_free);
                s->len = 0;
        }
        f->snapshot_bytes = 0;
        if (g_hash_table_size(f->pending) > 0)
                flush_burst(f);
}
