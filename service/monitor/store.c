/* SPDX-License-Identifier: MIT */
#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The crash window between store and journal covers the last few records at most. */
#define STORE_TAIL_SCAN (256 * 1024)

struct Store {
        char *path;
        int fd;
        goffset size, max_bytes;
};

void store_free(Store *s) {
        if (!s)
                return;
        if (s->fd >= 0)
                close(s->fd);
        g_free(s->path);
        g_free(s);
}

int store_open(const char *path, goffset max_bytes, Store **ret, axp_error *err) {
        g_autoptr(Store) s = g_new0(Store, 1);
        struct stat st;

        s->path = g_strdup(path);
        s->max_bytes = max_bytes;
        s->fd = open(path, O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
        if (s->fd < 0)
                return axp_errorf(err, -errno, "cannot open the suggestion store %s: %s", path,
                                  g_strerror(errno));
        if (fstat(s->fd, &st) == 0)
                s->size = st.st_size;
        if (s->size > 0) {
                char last = '\n';
                if (pread(s->fd, &last, 1, s->size - 1) == 1 && last != '\n' &&
                    write(s->fd, "\n", 1) == 1)
                        s->size++;
        }
        *ret = g_steal_pointer(&s);
        return 0;
}

/* Keeps the newest half of the records: write a new file and rename it over the old. */
static void rotate(Store *s) {
        g_autofree char *data = NULL, *tmp = g_strconcat(s->path, ".new", NULL);
        gsize len = 0;
        const char *keep;
        int fd;

        if (!g_file_get_contents(s->path, &data, &len, NULL))
                return;
        keep = data + len / 2;
        keep = memchr(keep, '\n', (size_t) (data + len - keep));
        keep = keep ? keep + 1 : data + len;
        fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0)
                return;
        if (write(fd, keep, (size_t) (data + len - keep)) != (ssize_t) (data + len - keep) ||
            fsync(fd) < 0 || rename(tmp, s->path) < 0) {
                close(fd);
                unlink(tmp);
                return;
        }
        close(fd);
        fd = open(s->path, O_RDWR | O_APPEND | O_CLOEXEC);
        if (fd < 0)
                return;
        close(s->fd);
        s->fd = fd;
        s->size = (goffset) (data + len - keep);
        g_message("suggestion store over %" G_GOFFSET_FORMAT " bytes: kept the newest half",
                  s->max_bytes);
}

int store_append(Store *s, const Event *ev, const Suggestion *sug, axp_error *err) {
        g_autoptr(GString) out = g_string_new(NULL);
        g_autoptr(GDateTime) now = g_date_time_new_now_utc();
        g_autofree char *created = g_date_time_format(now, "%Y-%m-%dT%H:%M:%SZ");

        if (s->fd < 0)
                return axp_errorf(err, -EBADF, "the suggestion store %s is not open", s->path);
        g_string_append_printf(out, "{\"id\":%" G_GUINT64_FORMAT ",\"source\":\"%s\"", ev->id,
                               event_store_source(ev->source));
        if (ev->path) {
                g_string_append(out, ",\"path\":");
                json_append_string(out, ev->path);
        }
        if (ev->batch)
                g_string_append_printf(out, ",\"files\":%" G_GUINT64_FORMAT, ev->batch->total);
        g_string_append_printf(out, ",\"created\":\"%s\",\"kind\":\"%s\",\"title\":", created,
                               sug->kind);
        json_append_string(out, sug->title);
        g_string_append(out, ",\"body\":");
        json_append_string(out, sug->body);
        if (ev->request) {
                g_string_append(out, ",\"request\":");
                json_append_string(out, ev->request);
        }
        g_string_append(out, "}\n");

        if (write(s->fd, out->str, out->len) != (ssize_t) out->len)
                return axp_errorf(err, -errno, "cannot write the suggestion store %s: %s", s->path,
                                  g_strerror(errno ? errno : EIO));
        s->size += (goffset) out->len;
        if (s->max_bytes > 0 && s->size > s->max_bytes)
                rotate(s);
        return 0;
}

void store_forget_answered(Store *s, GHashTable *ids) {
        g_autofree char *buf = NULL;
        goffset from;
        ssize_t n;

        if (g_hash_table_size(ids) == 0 || s->fd < 0 || s->size == 0)
                return;
        from = MAX(0, s->size - STORE_TAIL_SCAN);
        buf = g_malloc((gsize) (s->size - from) + 1);
        n = pread(s->fd, buf, (size_t) (s->size - from), from);
        if (n <= 0)
                return;
        buf[n] = 0;
        for (char *line = buf, *nl; line < buf + n; line = nl + 1) {
                _cleanup_json_ json_value *obj = NULL;
                uint64_t id;

                nl = memchr(line, '\n', (size_t) (buf + n - line));
                if (!nl)
                        break;
                if (json_parse(line, (size_t) (nl - line), &obj, NULL) == 0 &&
                    json_get_u64(obj, "id", &id) == 0)
                        g_hash_table_remove(ids, &id);
        }
}
