/* SPDX-License-Identifier: MIT */
#include "engine-requests.h"

#include <string.h>

#define ORPHANS_MAX 256

typedef struct Entry {
        char *owner;
        void *req;
} Entry;

/* A signal for a path whose answer has not been handled yet. */
typedef struct Orphan {
        char *sender, *path, *member;
        GVariant *params;
} Orphan;

struct EngineRequests {
        EngineRequestsOps ops;
        GHashTable *entries; /* path → Entry */
        GQueue orphans;
};

static void entry_free(Entry *e) {
        g_free(e->owner);
        g_free(e);
}

static void orphan_free(Orphan *o) {
        g_free(o->sender);
        g_free(o->path);
        g_free(o->member);
        g_variant_unref(o->params);
        g_free(o);
}

EngineRequests *engine_requests_new(const EngineRequestsOps *ops) {
        EngineRequests *r = g_new0(EngineRequests, 1);
        r->ops = *ops;
        r->entries = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, (GDestroyNotify) entry_free);
        g_queue_init(&r->orphans);
        return r;
}

void engine_requests_free(EngineRequests *r) {
        if (!r)
                return;
        if (r->ops.drop) {
                GHashTableIter it;
                gpointer v;
                g_hash_table_iter_init(&it, r->entries);
                while (g_hash_table_iter_next(&it, NULL, &v))
                        r->ops.drop(((Entry *) v)->req);
        }
        g_hash_table_unref(r->entries);
        g_queue_clear_full(&r->orphans, (GDestroyNotify) orphan_free);
        g_free(r);
}

void engine_requests_signal(EngineRequests *r, const char *sender, const char *path, const char *member,
                            GVariant *params) {
        Entry *e = g_hash_table_lookup(r->entries, path);

        if (!e) {
                if (g_queue_get_length(&r->orphans) >= ORPHANS_MAX)
                        orphan_free(g_queue_pop_head(&r->orphans));
                Orphan *o = g_new0(Orphan, 1);
                o->sender = g_strdup(sender);
                o->path = g_strdup(path);
                o->member = g_strdup(member);
                o->params = g_variant_ref(params);
                g_queue_push_tail(&r->orphans, o);
                return;
        }
        if (g_strcmp0(sender, e->owner) != 0)
                return;
        if (strcmp(member, "Token") == 0 && g_variant_is_of_type(params, G_VARIANT_TYPE("(s)"))) {
                const char *text;
                g_variant_get(params, "(&s)", &text);
                r->ops.token(e->req, text);
        } else if (strcmp(member, "Logprobs") == 0 && r->ops.logprobs &&
                   g_variant_is_of_type(params, G_VARIANT_TYPE("(a(sayda(sayd)))"))) {
                g_autoptr(GVariant) tokens = g_variant_get_child_value(params, 0);
                r->ops.logprobs(e->req, tokens);
        } else if (strcmp(member, "Finished") == 0 && g_variant_is_of_type(params, G_VARIANT_TYPE("(sa{sv})"))) {
                const char *reason, *error = NULL;
                g_autoptr(GVariant) stats = NULL;
                void *req = e->req;
                g_variant_get(params, "(&s@a{sv})", &reason, &stats);
                g_variant_lookup(stats, "error", "&s", &error);
                g_hash_table_remove(r->entries, path);
                r->ops.finished(req, reason, error, stats);
        }
}

void engine_requests_add(EngineRequests *r, const char *path, const char *owner, void *req) {
        Entry *e = g_new0(Entry, 1);
        e->owner = g_strdup(owner);
        e->req = req;
        g_hash_table_replace(r->entries, g_strdup(path), e);
}

void engine_requests_replay(EngineRequests *r, const char *path) {
        /* while the request is in the table: a signal for a path not in it would be kept again */
        for (GList *it = r->orphans.head, *next; it && g_hash_table_contains(r->entries, path); it = next) {
                Orphan *o = it->data;
                next = it->next;
                if (strcmp(o->path, path) != 0)
                        continue;
                g_queue_delete_link(&r->orphans, it);
                engine_requests_signal(r, o->sender, o->path, o->member, o->params);
                orphan_free(o);
        }
}

void *engine_requests_lookup(EngineRequests *r, const char *path, const char **ret_owner) {
        Entry *e = path ? g_hash_table_lookup(r->entries, path) : NULL;
        if (ret_owner)
                *ret_owner = e ? e->owner : NULL;
        return e ? e->req : NULL;
}

void *engine_requests_remove(EngineRequests *r, const char *path) {
        void *req = engine_requests_lookup(r, path, NULL);
        if (req)
                g_hash_table_remove(r->entries, path);
        return req;
}

void engine_requests_lose(EngineRequests *r, const char *owner, const char *reason, const char *error) {
        g_autoptr(GPtrArray) lost = g_ptr_array_new();
        GHashTableIter it;
        gpointer v;

        g_hash_table_iter_init(&it, r->entries);
        while (g_hash_table_iter_next(&it, NULL, &v)) {
                Entry *e = v;
                if (owner && g_strcmp0(e->owner, owner) != 0)
                        continue;
                g_ptr_array_add(lost, e->req);
                g_hash_table_iter_remove(&it);
        }
        for (guint i = 0; i < lost->len; i++)
                r->ops.finished(lost->pdata[i], reason, error, NULL);
}
