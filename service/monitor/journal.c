/* SPDX-License-Identifier: MIT */
#include "journal.h"

#include <errno.h>
#include <fcntl.h>
#include <glib/gstdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define JOURNAL_MAX_LINE (8u << 20)

struct Journal {
        char *path;
        int fd;
        goffset size;
        goffset compacted;      /* the size right after the last rewrite */
        bool warned;
        guint sync_source;
};

void journal_state_free(JournalState *st) {
        if (!st)
                return;
        g_ptr_array_unref(st->events);
        g_ptr_array_unref(st->seen);
        g_free(st);
}

void journal_free(Journal *j) {
        if (!j)
                return;
        if (j->sync_source)
                g_source_remove(j->sync_source);
        if (j->fd >= 0) {
                fdatasync(j->fd);
                close(j->fd);
        }
        g_free(j->path);
        g_free(j);
}

goffset journal_size(Journal *j) {
        return j->size;
}

goffset journal_growth(Journal *j) {
        return j->size - j->compacted;
}

/* Replays one record into the state. Ordered containers: a GPtrArray for the output and a
 * hash for lookups. */
typedef struct Replay {
        GHashTable *events;     /* id → Event* (owned) */
        GHashTable *seen;       /* path → sequence number */
        guint64 seq, last_id;
        unsigned bad, first_bad_line;
        char *first_bad;        /* why the first skipped record was skipped */
} Replay;

static void skip_record(Replay *rp, unsigned line, const char *fmt, ...) G_GNUC_PRINTF(3, 4);
static void skip_record(Replay *rp, unsigned line, const char *fmt, ...) {
        va_list ap;
        if (rp->bad++ > 0)
                return;
        rp->first_bad_line = line;
        va_start(ap, fmt);
        rp->first_bad = g_strdup_vprintf(fmt, ap);
        va_end(ap);
}

static void replay_record(Replay *rp, const json_value *obj, unsigned line) {
        const char *op = json_get_string(obj, "op");
        axp_error err = { 0 };
        uint64_t id = 0;

        if (!op) {
                skip_record(rp, line, "a record without \"op\"");
                return;
        }
        if (strcmp(op, "settle") == 0 && json_get(obj, "all")) {
                g_hash_table_remove_all(rp->seen);
                return;
        }
        if (strcmp(op, "seen") == 0 || strcmp(op, "settle") == 0) {
                const char *path = json_get_string(obj, "path");
                if (!path || path[0] != '/') {
                        skip_record(rp, line, "%s without an absolute path", op);
                        return;
                }
                if (strcmp(op, "seen") == 0)
                        g_hash_table_insert(rp->seen, g_strdup(path), GSIZE_TO_POINTER(++rp->seq));
                else
                        g_hash_table_remove(rp->seen, path);
                return;
        }
        if (strcmp(op, "event") == 0) {
                Event *ev = NULL;
                const json_value *all = json_get(obj, "settles_all");
                const json_value *replaces = json_get(obj, "replaces");
                const char *settles = json_get_string(obj, "settles");

                if (event_from_json(obj, &ev, &err) < 0) {
                        skip_record(rp, line, "%s", err.msg);
                        return;
                }
                rp->last_id = MAX(rp->last_id, ev->id);
                if (settles)
                        g_hash_table_remove(rp->seen, settles);
                if (all && all->type == JSON_BOOL && all->boolean)
                        g_hash_table_remove_all(rp->seen);
                for (size_t i = 0; replaces && replaces->type == JSON_ARRAY && i < replaces->n; i++) {
                        uint64_t r;
                        if (json_value_u64(replaces->items[i], &r) == 0)
                                g_hash_table_remove(rp->events, &r);
                }
                g_hash_table_replace(rp->events, &ev->id, ev);
                return;
        }
        if (strcmp(op, "done") == 0 || strcmp(op, "submit") == 0) {
                if (json_get_u64(obj, "id", &id) < 0) {
                        skip_record(rp, line, "%s without an id", op);
                        return;
                }
                rp->last_id = MAX(rp->last_id, id);
                if (op[0] == 'd')
                        g_hash_table_remove(rp->events, &id);
                return;
        }
        skip_record(rp, line, "unknown record \"%s\"", op);
}

static gint by_id(gconstpointer a, gconstpointer b) {
        guint64 x = (*(Event *const *) a)->id, y = (*(Event *const *) b)->id;
        return x < y ? -1 : x > y;
}

static gint by_seq(gconstpointer a, gconstpointer b, gpointer seen) {
        gsize x = GPOINTER_TO_SIZE(g_hash_table_lookup(seen, *(char *const *) a));
        gsize y = GPOINTER_TO_SIZE(g_hash_table_lookup(seen, *(char *const *) b));
        return x < y ? -1 : x > y;
}

static int replay(const char *path, JournalState **ret, axp_error *err) {
        g_autoptr(GError) e = NULL;
        g_autofree char *data = NULL;
        gsize len = 0;
        Replay rp = { 0 };
        unsigned line = 0;

        if (!g_file_get_contents(path, &data, &len, &e)) {
                if (g_error_matches(e, G_FILE_ERROR, G_FILE_ERROR_NOENT))
                        len = 0;
                else
                        return axp_errorf(err, -EIO, "cannot read journal %s: %s", path, e->message);
        }
        rp.events = g_hash_table_new_full(g_int64_hash, g_int64_equal, NULL,
                                          (GDestroyNotify) event_free);
        rp.seen = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);

        for (const char *p = data, *end = data + len; p && p < end;) {
                const char *nl = memchr(p, '\n', (size_t) (end - p));
                size_t n = nl ? (size_t) (nl - p) : (size_t) (end - p);
                _cleanup_json_ json_value *obj = NULL;
                axp_error perr = { 0 };

                line++;
                if (n > 0 && json_parse(p, n, &obj, &perr) == 0 && obj->type == JSON_OBJECT)
                        replay_record(&rp, obj, line);
                else if (n > 0 && nl)   /* A torn last line (no newline) is expected after a kill. */
                        skip_record(&rp, line, "%s", perr.msg[0] ? perr.msg : "not an object");
                p = nl ? nl + 1 : end;
        }
        /* One line however broken the file: it is ours, so damage means disk trouble or an
         * edit by hand, and what could be read is used. */
        if (rp.bad > 0)
                g_warning("%s: %u unreadable records skipped (the first, line %u: %s)", path, rp.bad,
                          rp.first_bad_line, rp.first_bad);
        g_free(rp.first_bad);

        JournalState *st = g_new0(JournalState, 1);
        GHashTableIter it;
        gpointer k, v;

        st->events = g_ptr_array_new_with_free_func((GDestroyNotify) event_free);
        g_hash_table_iter_init(&it, rp.events);
        while (g_hash_table_iter_next(&it, &k, &v)) {
                g_ptr_array_add(st->events, v);
                g_hash_table_iter_steal(&it);
        }
        g_ptr_array_sort(st->events, by_id);
        st->seen = hash_table_keys(rp.seen);
        g_ptr_array_sort_with_data(st->seen, by_seq, rp.seen);
        for (guint i = 0; i < st->seen->len; i++)
                st->seen->pdata[i] = g_strdup(st->seen->pdata[i]);
        g_ptr_array_set_free_func(st->seen, g_free);
        st->last_id = rp.last_id;
        g_hash_table_unref(rp.events);
        g_hash_table_unref(rp.seen);
        *ret = st;
        return 0;
}

int journal_open(const char *path, Journal **ret, JournalState **ret_state, axp_error *err) {
        g_autoptr(Journal) j = g_new0(Journal, 1);
        g_autoptr(JournalState) st = NULL;
        struct stat s;
        int r;

        j->fd = -1;
        j->path = g_strdup(path);
        r = replay(path, &st, err);
        if (r < 0)
                return r;
        j->fd = open(path, O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
        if (j->fd < 0)
                return axp_errorf(err, -errno, "cannot open journal %s: %s", path, g_strerror(errno));
        if (fstat(j->fd, &s) == 0)
                j->size = s.st_size;
        /* Records after a torn last line must start on a line of their own. */
        if (j->size > 0) {
                char last = '\n';
                if (pread(j->fd, &last, 1, j->size - 1) == 1 && last != '\n' &&
                    write(j->fd, "\n", 1) == 1)
                        j->size++;
        }
        *ret = g_steal_pointer(&j);
        *ret_state = g_steal_pointer(&st);
        return 0;
}

static gboolean sync_cb(gpointer data) {
        Journal *j = data;
        j->sync_source = 0;
        fdatasync(j->fd);
        return G_SOURCE_REMOVE;
}

/* One write per call keeps each record whole against a kill; fdatasync follows within a
 * second for power loss. */
static void write_records(Journal *j, GString *lines) {
        const char *p = lines->str;
        size_t left = lines->len;

        while (left > 0) {
                ssize_t n = write(j->fd, p, left);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0) {
                        if (!j->warned)
                                g_warning("cannot write journal %s: %s; pending work will not "
                                          "survive a restart", j->path, g_strerror(errno));
                        j->warned = true;
                        return;
                }
                p += n;
                left -= (size_t) n;
                j->size += n;
        }
        if (!j->sync_source)
                j->sync_source = g_timeout_add_seconds(1, sync_cb, j);
}

void journal_seen(Journal *j, GPtrArray *paths) {
        g_autoptr(GString) out = g_string_new(NULL);
        for (guint i = 0; i < paths->len; i++) {
                g_string_append(out, "{\"op\":\"seen\",\"path\":");
                json_append_string(out, paths->pdata[i]);
                g_string_append(out, "}\n");
        }
        if (out->len)
                write_records(j, out);
}

void journal_settle(Journal *j, const char *path) {
        g_autoptr(GString) out = g_string_new("{\"op\":\"settle\",");
        if (path) {
                g_string_append(out, "\"path\":");
                json_append_string(out, path);
        } else
                g_string_append(out, "\"all\":true");
        g_string_append(out, "}\n");
        write_records(j, out);
}

static void append_event(GString *out, const Event *ev, const char *settles, bool settles_all,
                         GArray *replaces) {
        g_string_append(out, "{\"op\":\"event\",");
        event_append_json(ev, out);
        if (settles) {
                g_string_append(out, ",\"settles\":");
                json_append_string(out, settles);
        }
        if (settles_all)
                g_string_append(out, ",\"settles_all\":true");
        if (replaces && replaces->len > 0) {
                g_string_append(out, ",\"replaces\":[");
                for (guint i = 0; i < replaces->len; i++)
                        g_string_append_printf(out, "%s%" G_GUINT64_FORMAT, i ? "," : "",
                                               g_array_index(replaces, guint64, i));
                g_string_append_c(out, ']');
        }
        g_string_append(out, "}\n");
}

void journal_event(Journal *j, const Event *ev, const char *settles, bool settles_all,
                   GArray *replaces) {
        g_autoptr(GString) out = g_string_new(NULL);
        append_event(out, ev, settles, settles_all, replaces);
        write_records(j, out);
}

void journal_submit(Journal *j, guint64 id, const char *request) {
        g_autoptr(GString) out = g_string_new(NULL);
        g_string_append_printf(out, "{\"op\":\"submit\",\"id\":%" G_GUINT64_FORMAT ",\"request\":", id);
        json_append_string(out, request);
        g_string_append(out, "}\n");
        write_records(j, out);
}

void journal_done(Journal *j, guint64 id, const char *outcome) {
        g_autoptr(GString) out = g_string_new(NULL);
        g_string_append_printf(out, "{\"op\":\"done\",\"id\":%" G_GUINT64_FORMAT ",\"outcome\":", id);
        json_append_string(out, outcome);
        g_string_append(out, "}\n");
        write_records(j, out);
}

int journal_rewrite(Journal *j, GPtrArray *events, GPtrArray *seen, guint64 last_id, axp_error *err) {
        g_autoptr(GString) out = g_string_new(NULL);
        g_autofree char *tmp = g_strconcat(j->path, ".new", NULL);
        int fd, newfd;

        /* A done record for the last id keeps ids increasing after a restart even when
         * nothing is pending. */
        if (last_id > 0)
                g_string_append_printf(out, "{\"op\":\"done\",\"id\":%" G_GUINT64_FORMAT
                                       ",\"outcome\":\"last\"}\n", last_id);
        for (guint i = 0; seen && i < seen->len; i++) {
                g_string_append(out, "{\"op\":\"seen\",\"path\":");
                json_append_string(out, seen->pdata[i]);
                g_string_append(out, "}\n");
        }
        for (guint i = 0; events && i < events->len; i++)
                append_event(out, events->pdata[i], NULL, false, NULL);

        fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0)
                return axp_errorf(err, -errno, "cannot write %s: %s", tmp, g_strerror(errno));
        if (write(fd, out->str, out->len) != (ssize_t) out->len || fsync(fd) < 0) {
                int e = errno ? errno : EIO;
                close(fd);
                unlink(tmp);
                return axp_errorf(err, -e, "cannot write %s: %s", tmp, g_strerror(e));
        }
        if (rename(tmp, j->path) < 0) {
                int e = errno;
                close(fd);
                unlink(tmp);
                return axp_errorf(err, -e, "cannot replace %s: %s", j->path, g_strerror(e));
        }
        newfd = open(j->path, O_WRONLY | O_APPEND | O_CLOEXEC);
        close(fd);
        if (newfd < 0)
                return axp_errorf(err, -errno, "cannot reopen %s: %s", j->path, g_strerror(errno));
        close(j->fd);
        j->fd = newfd;
        j->size = j->compacted = (goffset) out->len;
        return 0;
}
