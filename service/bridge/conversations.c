/* SPDX-License-Identifier: MIT */
/* Conversations that come back. OpenAI's and Ollama's clients send the whole conversation with
 * every request; the engine's flows keep a conversation's KV cache between turns. After a chat
 * turn, its flow is kept, keyed by a hash of what it holds: the model, every turn (role and
 * content) and the answer the engine gave. A later request whose turns begin with that
 * conversation continues on the flow with only its new turns, which the engine renders after
 * the answer with the model's chat template (as the whole conversation would render), so only
 * they are prefilled.
 *
 * The bridge holds at most max_flows flows (the engine allows FlowsPerUser=, 4 by default, to
 * each user, and the user's other programs may want some); when it needs another, the idle one
 * used longest ago is closed. A flow with a turn in flight is out of the cache until the turn
 * ends; one whose turn failed or was cancelled is closed. */
#include "bridge.h"

#include <string.h>

static void turn_clear(gpointer p) {
        Turn *t = p;
        g_free(t->role);
        g_free(t->content);
}

GArray *turns_new(void) {
        GArray *a = g_array_new(FALSE, TRUE, sizeof(Turn));
        g_array_set_clear_func(a, turn_clear);
        return a;
}

static void hash_str(GChecksum *h, const char *s) {
        /* with its terminating NUL, so that ("ab", "c") and ("a", "bc") differ */
        g_checksum_update(h, (const guchar *) s, strlen(s) + 1);
}

static void hash_turn(GChecksum *h, const char *role, const char *content) {
        hash_str(h, role);
        hash_str(h, content);
}

static GChecksum *hash_begin(const char *model) {
        GChecksum *h = g_checksum_new(G_CHECKSUM_SHA256);
        hash_str(h, "agentxpu conversation 1");
        hash_str(h, model);
        return h;
}

static Conversation *find(Bridge *b, const char *key, GList **ret_link) {
        for (GList *l = b->conversations.head; l; l = l->next) {
                Conversation *c = l->data;
                if (strcmp(c->key, key) == 0) {
                        *ret_link = l;
                        return c;
                }
        }
        return NULL;
}

/* Flows of an engine that left are gone with it. */
static void drop_stale(Bridge *b) {
        guint gen = engine_link_generation(b->link);
        for (GList *l = b->conversations.head, *next; l; l = next) {
                Conversation *c = l->data;
                next = l->next;
                if (c->generation != gen) {
                        g_queue_delete_link(&b->conversations, l);
                        conversation_drop(b, c, false);
                }
        }
}

Conversation *conversations_take(Bridge *b, const char *model, GArray *turns, guint *ret_covered) {
        g_autoptr(GChecksum) h = NULL;
        g_autoptr(GPtrArray) keys = g_ptr_array_new_with_free_func(g_free);
        g_autoptr(GArray) ends = g_array_new(FALSE, FALSE, sizeof(guint));

        drop_stale(b);
        if (g_queue_is_empty(&b->conversations))
                return NULL;
        h = hash_begin(model);
        for (guint i = 0; i < turns->len; i++) {
                Turn *t = &g_array_index(turns, Turn, i);
                hash_turn(h, t->role, t->content);
                if (strcmp(t->role, "assistant") == 0) {
                        g_autoptr(GChecksum) copy = g_checksum_copy(h);
                        guint end = i + 1;
                        g_ptr_array_add(keys, g_strdup(g_checksum_get_string(copy)));
                        g_array_append_val(ends, end);
                }
        }
        for (guint k = keys->len; k-- > 0;) {
                GList *link;
                Conversation *c = find(b, keys->pdata[k], &link);
                if (c) {
                        g_queue_delete_link(&b->conversations, link);
                        *ret_covered = g_array_index(ends, guint, k);
                        return c;
                }
        }
        return NULL;
}

bool conversations_room(Bridge *b) {
        drop_stale(b);
        if (b->max_flows == 0)
                return false;
        if (b->flows < b->max_flows)
                return true;
        Conversation *oldest = g_queue_pop_tail(&b->conversations);
        if (!oldest)
                return false;   /* every flow has a turn in flight */
        conversation_drop(b, oldest, true);
        return true;
}

Conversation *conversation_new(Bridge *b, const char *path) {
        Conversation *c = g_new0(Conversation, 1);
        c->flow = g_strdup(path);
        c->key = g_strdup("");
        c->generation = engine_link_generation(b->link);
        b->flows++;
        return c;
}

void conversation_put(Bridge *b, Conversation *conv, const char *model, GArray *turns,
                      const char *prompt, const char *answer, guint64 positions) {
        g_autoptr(GChecksum) h = hash_begin(model);
        GList *link;

        for (guint i = 0; i < turns->len; i++) {
                Turn *t = &g_array_index(turns, Turn, i);
                hash_turn(h, t->role, t->content);
        }
        hash_turn(h, "user", prompt);
        hash_turn(h, "assistant", answer);
        g_free(conv->key);
        conv->key = g_strdup(g_checksum_get_string(h));
        conv->positions = positions;
        /* the same conversation twice (two clients sent it at once): keep the newer */
        Conversation *old = find(b, conv->key, &link);
        if (old) {
                g_queue_delete_link(&b->conversations, link);
                conversation_drop(b, old, true);
        }
        g_queue_push_head(&b->conversations, conv);
}

void conversation_drop(Bridge *b, Conversation *conv, bool close) {
        if (!conv)
                return;
        if (close && b->link && conv->generation == engine_link_generation(b->link))
                engine_link_close_flow(b->link, conv->flow);
        b->flows--;
        g_free(conv->key);
        g_free(conv->flow);
        g_free(conv);
}

void conversations_clear(Bridge *b) {
        Conversation *c;
        while ((c = g_queue_pop_head(&b->conversations)))
                conversation_drop(b, c, false);
}
