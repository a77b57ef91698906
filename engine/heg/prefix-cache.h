/* SPDX-License-Identifier: MIT */
/* The engine's prompt cache: the KV caches of finished requests, kept by the tokens they hold,
 * so that a request whose prompt begins as one of them did (the same system prompt, tools and
 * earlier turns, as agents send them again and again) copies those positions instead of
 * prefilling them. The CPU kernels give the same bits whatever the batching (each position's
 * K and V depend only on the tokens before it), so an answer is the one a full prefill gives.
 *
 * Running requests share their caches too, from their first token until they end (without
 * a copy, holding nothing of the budget): requests that come meanwhile, n answers to one
 * prompt or agents with one system prompt, start from them.
 *
 * Entries hold a share of the KV budget (kv-budget.h) and give it back first: the least
 * recently used goes when a request or flow needs the room, when there are more than
 * `max_entries`, or when together they would hold more than half the budget.
 *
 * A model with sliding-window layers (Gemma 3) keeps entries too, but their rings hold only
 * the window behind an entry's last positions: a prompt takes from one only where it goes on
 * from where the entry ends (give or take the ring's spare rows), as the next turn of a chat
 * does; a running request's cache serves while its rings still hold the window behind the
 * prompt, the rows its pending token is writing counted (axp_seq_can_copy_prefix). Not
 * thread-safe: the engine's thread owns it. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "heg/kv-budget.h"
#include "heg/seq.h"

/* Fewer positions in common than this are prefilled as usual. */
#define AXP_PREFIX_MIN 16

typedef struct axp_prefix_entry {
        uint64_t scope;         /* whose it is: only requests of the same scope take it */
        int32_t *tokens;        /* the tokens at positions 0 .. seq.n_past - 1 */
        axp_seq seq;
        axp_kv_hold kv;
        uint64_t used;          /* when last put or taken (the cache's clock) */
} axp_prefix_entry;

/* A request still running, once its prompt is in its cache: requests that begin the same way
 * and come while it decodes copy from its cache (the prompt's positions are never written
 * again while it runs). It holds nothing of the budget and is forgotten when it ends. */
typedef struct axp_prefix_live {
        const void *owner;      /* the request */
        uint64_t scope;
        const axp_seq *seq;     /* its cache: positions 0 .. n - 1 hold its prompt */
        int32_t *tokens;        /* the prompt's n tokens (a copy) */
        int n;
} axp_prefix_live;

typedef struct axp_prefix_cache {
        axp_prefix_entry *e;
        int n, max_entries;     /* max_entries 0: the cache is off */
        axp_prefix_live *live;
        int n_live;
        size_t cap_live;
        uint64_t clock;
        uint64_t bytes;         /* what the entries hold of the budget */
} axp_prefix_cache;

void axp_prefix_cache_init(axp_prefix_cache *c, int max_entries);
/* Every entry freed and its hold given back (before a model goes: entries use it). */
void axp_prefix_cache_clear(axp_prefix_cache *c, axp_kv_budget *b);
void axp_prefix_cache_free(axp_prefix_cache *c, axp_kv_budget *b);

/* Start dst (initialised, empty, of the same model and KV type) with the longest run of
 * positions that an entry of `scope` holds in common with tokens[0..n) and can give
 * (axp_seq_can_copy_prefix), at most n - 1 of them
 * (the last token is fed for its logits) and none if fewer than AXP_PREFIX_MIN. Returns how
 * many positions dst holds now (its n_past), or a negative errno (dst then holds none). */
int axp_prefix_cache_seed(axp_prefix_cache *c, uint64_t scope, axp_seq *dst, const int32_t *tokens, int n,
                          axp_error *err);

/* Keep a finished request's cache, for requests of `scope`: seq (taken; zeroed) holding
 * tokens[0..seq->n_past). An entry of that scope that holds a beginning of it goes; nothing is kept where an entry already holds all
 * of it, or it is shorter than AXP_PREFIX_MIN, or it alone would hold more than half the
 * budget. The least recently used entries go to make room. */
void axp_prefix_cache_put(axp_prefix_cache *c, axp_kv_budget *b, uint64_t scope, axp_seq *seq,
                          const int32_t *tokens);

/* A request still running whose cache holds its prompt, tokens[0..seq->n_past), now: others
 * may start from it until axp_prefix_cache_forget(owner), which must come before seq changes
 * otherwise than by growing (its end). Nothing happens where it would not be kept. */
void axp_prefix_cache_share(axp_prefix_cache *c, const void *owner, uint64_t scope, const axp_seq *seq,
                            const int32_t *tokens);
void axp_prefix_cache_forget(axp_prefix_cache *c, const void *owner);

/* Free every entry of `scope` and forget its running requests' shares (a user who asks that
 * nothing of theirs be kept); returns how many entries went. */
int axp_prefix_cache_forget_scope(axp_prefix_cache *c, axp_kv_budget *b, uint64_t scope);

/* Free the least recently used entry, giving its hold back; false if there is none. */
bool axp_prefix_cache_evict(axp_prefix_cache *c, axp_kv_budget *b);

/* axp_kv_budget_reserve, with entries evicted (least recently used first) while the budget
 * is full (-EBUSY) and one is left. */
int axp_prefix_cache_reserve(axp_prefix_cache *c, axp_kv_budget *b, axp_kv_hold *h, uint64_t bytes,
                             axp_error *err);
