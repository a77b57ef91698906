/* SPDX-License-Identifier: MIT */
#include "event.h"

#include <errno.h>
#include <string.h>

#include "base/utf8.h"
#include "base/util.h"

Event *event_new(EventSource source, const char *path, char *prompt) {
        Event *ev = g_new0(Event, 1);
        ev->source = source;
        ev->path = g_strdup(path);
        ev->prompt = prompt;
        ev->created_us = g_get_real_time();
        return ev;
}

void event_free(Event *ev) {
        if (!ev)
                return;
        if (ev->timeout_source)
                g_source_remove(ev->timeout_source);
        g_free(ev->path);
        g_free(ev->prompt);
        batch_free(ev->batch);
        g_free(ev->request);
        g_free(ev->engine);
        if (ev->answer)
                g_string_free(ev->answer, TRUE);
        g_free(ev);
}

const char *event_source_name(EventSource s) {
        switch (s) {
        case EVENT_FILE: return "file";
        case EVENT_CLIPBOARD: return "clipboard";
        case EVENT_BATCH: return "batch";
        }
        return "?";
}

const char *event_store_source(EventSource s) {
        return s == EVENT_CLIPBOARD ? "clipboard" : "file";
}

guint64 event_next_id(guint64 *last) {
        guint64 now = (guint64) g_get_real_time();
        *last = MAX(now, *last + 1);
        return *last;
}

void json_append_string(GString *out, const char *s) {
        axp_json_quote(s, strlen(s), put_gstring, out);
}

void event_append_json(const Event *ev, GString *out) {
        g_string_append_printf(out, "\"id\":%" G_GUINT64_FORMAT ",\"source\":\"%s\"", ev->id,
                               event_source_name(ev->source));
        g_string_append_printf(out, ",\"created\":%" G_GINT64_FORMAT, ev->created_us);
        if (ev->path) {
                g_string_append(out, ",\"path\":");
                json_append_string(out, ev->path);
        }
        g_string_append(out, ",\"prompt\":");
        json_append_string(out, ev->prompt);
        if (ev->batch) {
                GHashTableIter it;
                gpointer k, v;
                bool first = true;

                g_string_append_printf(out, ",\"total\":%" G_GUINT64_FORMAT ",\"listed\":[",
                                       ev->batch->total);
                for (guint i = 0; i < ev->batch->listed->len; i++) {
                        if (i)
                                g_string_append_c(out, ',');
                        json_append_string(out, ev->batch->listed->pdata[i]);
                }
                g_string_append(out, "],\"more\":{");
                g_hash_table_iter_init(&it, ev->batch->more);
                while (g_hash_table_iter_next(&it, &k, &v)) {
                        if (!first)
                                g_string_append_c(out, ',');
                        first = false;
                        json_append_string(out, k);
                        g_string_append_printf(out, ":%" G_GUINT64_FORMAT, *(guint64 *) v);
                }
                g_string_append_c(out, '}');
        }
}

static int batch_from_json(const json_value *obj, Batch **ret, axp_error *err) {
        g_autoptr(Batch) b = batch_new();
        const json_value *listed = json_get(obj, "listed"), *more = json_get(obj, "more");
        guint64 total;

        if (!listed || listed->type != JSON_ARRAY || !more || more->type != JSON_OBJECT ||
            json_get_u64(obj, "total", &total) < 0)
                return axp_errorf(err, -EINVAL, "batch event without total, listed and more");
        for (size_t i = 0; i < listed->n; i++) {
                if (listed->items[i]->type != JSON_STRING || listed->items[i]->text[0] != '/')
                        return axp_errorf(err, -EINVAL, "batch lists a path that is not absolute");
                batch_add_path(b, listed->items[i]->text, G_MAXUINT);
        }
        for (size_t i = 0; i < more->n; i++) {
                uint64_t c;
                if (more->keys[i][0] != '/' || json_value_u64(more->items[i], &c) < 0)
                        return axp_errorf(err, -EINVAL, "batch counts need folders and numbers");
                batch_add_count(b, more->keys[i], c);
        }
        if (b->total != total)
                return axp_errorf(err, -EINVAL, "batch total %" G_GUINT64_FORMAT " does not add up",
                                  total);
        *ret = g_steal_pointer(&b);
        return 0;
}

int event_from_json(const json_value *obj, Event **ret, axp_error *err) {
        const char *source = json_get_string(obj, "source");
        const char *prompt = json_get_string(obj, "prompt");
        const char *path = json_get_string(obj, "path");
        const json_value *created = json_get(obj, "created");
        g_autoptr(Event) ev = NULL;
        uint64_t id;
        EventSource s;
        int r;

        if (json_get_u64(obj, "id", &id) < 0 || id == 0)
                return axp_errorf(err, -EINVAL, "event without a valid id");
        if (!source || !prompt)
                return axp_errorf(err, -EINVAL, "event %" G_GUINT64_FORMAT " without source or prompt",
                                  id);
        if (strcmp(source, "file") == 0)
                s = EVENT_FILE;
        else if (strcmp(source, "clipboard") == 0)
                s = EVENT_CLIPBOARD;
        else if (strcmp(source, "batch") == 0)
                s = EVENT_BATCH;
        else
                return axp_errorf(err, -EINVAL, "event %" G_GUINT64_FORMAT " has unknown source", id);
        if (s != EVENT_CLIPBOARD && (!path || path[0] != '/'))
                return axp_errorf(err, -EINVAL, "event %" G_GUINT64_FORMAT " needs an absolute path",
                                  id);

        ev = event_new(s, s == EVENT_CLIPBOARD ? NULL : path, g_strdup(prompt));
        ev->id = id;
        /* Only a number a gint64 holds: converting any other is undefined behaviour. */
        if (created && created->type == JSON_NUMBER && created->number >= -9.2e18 &&
            created->number <= 9.2e18)
                ev->created_us = (gint64) created->number;
        if (s == EVENT_BATCH) {
                r = batch_from_json(obj, &ev->batch, err);
                if (r < 0)
                        return r;
        }
        *ret = g_steal_pointer(&ev);
        return 0;
}
