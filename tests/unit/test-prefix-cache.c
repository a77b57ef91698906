/* SPDX-License-Identifier: MIT */
/* heg/prefix-cache.h on a small model's caches: an entry starts a new cache with the longest
 * run of positions it shares with a prompt (never the last token, never fewer than
 * AXP_PREFIX_MIN), bytes and all; entries of another scope, model or KV type are not used;
 * an entry that holds a beginning of a new one goes, one that holds all of it keeps it out;
 * the least recently used go past max_entries, past half the budget, and when a reservation
 * needs the room; a running request's cache serves others until it is forgotten; every hold
 * goes back. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "heg/prefix-cache.h"
#include "kernels/types.h"
#include "mkmodel.h"
#include "test.h"

static axp_model *model;

/* A cache of n positions (the tokens 0..n-1 of toks) whose every byte says which position
 * and which token it holds. */
static void filled(axp_seq *s, const int32_t *toks, int n) {
        axp_error err = { 0 };
        CHECK(axp_seq_init(s, model, AXP_TYPE_F16, 1024, n, &err) == 0);
        const axp_hparams *hp = &model->hp;
        const size_t hb = axp_kv_head_bytes(hp, AXP_TYPE_F16);
        for (int l = 0; l < hp->n_layer; l++)
                for (int h = 0; h < hp->n_head_kv; h++)
                        for (int p = 0; p < n; p++) {
                                memset((char *) s->k[l] + axp_kv_offset(hb, s->kv_cap, h, p), (toks[p] + p) & 0x7f, hb);
                                memset((char *) s->v[l] + axp_kv_offset(hb, s->kv_cap, h, p), (toks[p] * 3 + l) & 0x7f, hb);
                        }
        s->n_past = n;
}

/* Whether s holds positions 0..n-1 as filled() wrote them. */
static bool holds(const axp_seq *s, const int32_t *toks, int n) {
        const axp_hparams *hp = &model->hp;
        const size_t hb = axp_kv_head_bytes(hp, AXP_TYPE_F16);
        for (int l = 0; l < hp->n_layer; l++)
                for (int h = 0; h < hp->n_head_kv; h++)
                        for (int p = 0; p < n; p++) {
                                const unsigned char *k = (const unsigned char *) s->k[l] + axp_kv_offset(hb, s->kv_cap, h, p);
                                const unsigned char *v = (const unsigned char *) s->v[l] + axp_kv_offset(hb, s->kv_cap, h, p);
                                for (size_t i = 0; i < hb; i++)
                                        if (k[i] != ((toks[p] + p) & 0x7f) || v[i] != ((toks[p] * 3 + l) & 0x7f))
                                                return false;
                        }
        return s->n_past == n;
}

static void put(axp_prefix_cache *c, axp_kv_budget *b, uint64_t scope, const int32_t *toks, int n) {
        axp_seq s;
        filled(&s, toks, n);
        axp_prefix_cache_put(c, b, scope, &s, toks);
        CHECK(s.model == NULL); /* taken, or freed */
}

/* Seed an empty cache from c with tokens[0..n); returns the positions it got. */
static int seed(axp_prefix_cache *c, uint64_t scope, const int32_t *toks, int n, bool check) {
        axp_seq s;
        axp_error err = { 0 };
        CHECK(axp_seq_init(&s, model, AXP_TYPE_F16, 1024, n, &err) == 0);
        int k = axp_prefix_cache_seed(c, scope, &s, toks, n, &err);
        CHECK(k >= 0 && s.n_past == k);
        if (check)
                CHECK(holds(&s, toks, k));
        axp_seq_free(&s);
        return k;
}

static void test_longest_run(void) {
        axp_kv_budget b = { .limit = UINT64_C(1) << 30 };
        axp_prefix_cache c;
        int32_t a[100], x[100];
        for (int i = 0; i < 100; i++)
                a[i] = x[i] = 10 + i;
        x[60] = 7; /* x leaves a after 60 tokens */
        axp_prefix_cache_init(&c, 4);
        put(&c, &b, 0, a, 80);
        CHECK(c.n == 1 && c.bytes > 0 && b.used == c.bytes && b.holders == 1);
        CHECK_EQ_INT(seed(&c, 0, a, 100, true), 80);     /* all it holds */
        CHECK_EQ_INT(seed(&c, 0, a, 80, true), 79);      /* never the last token */
        CHECK_EQ_INT(seed(&c, 0, x, 100, true), 60);     /* up to where they part */
        CHECK_EQ_INT(seed(&c, 0, a, AXP_PREFIX_MIN, false), 0); /* fewer than the least: none */
        CHECK_EQ_INT(seed(&c, 1, a, 100, false), 0);     /* another scope: none */
        /* a longer one replaces the one holding its beginning; a shorter one is not kept */
        put(&c, &b, 0, a, 90);
        CHECK(c.n == 1 && c.e[0].seq.n_past == 90);
        put(&c, &b, 0, a, 50);
        CHECK(c.n == 1 && c.e[0].seq.n_past == 90);
        /* one that parts from it is kept beside it; the other scope's apart */
        put(&c, &b, 0, x, 70);
        put(&c, &b, 1, a, 40);
        CHECK(c.n == 3);
        CHECK_EQ_INT(seed(&c, 1, a, 100, true), 40);
        CHECK_EQ_INT(seed(&c, 0, x, 100, true), 70);
        /* too short to keep */
        put(&c, &b, 0, x + 50, AXP_PREFIX_MIN - 1);
        CHECK(c.n == 3);
        axp_prefix_cache_free(&c, &b);
        CHECK(b.used == 0 && b.holders == 0);
        /* off: nothing kept */
        axp_prefix_cache_init(&c, 0);
        put(&c, &b, 0, a, 80);
        CHECK(c.n == 0 && b.used == 0);
        axp_prefix_cache_free(&c, &b);
}

static void test_room(void) {
        int32_t t[5][64];
        for (int i = 0; i < 5; i++)
                for (int p = 0; p < 64; p++)
                        t[i][p] = 100 * i + p + 1;
        axp_seq probe;
        filled(&probe, t[0], 64);
        const uint64_t one = axp_seq_kv_bytes(&probe);
        axp_seq_free(&probe);

        /* at most max_entries: the least recently used goes (using one counts) */
        axp_kv_budget b = { .limit = 100 * one };
        axp_prefix_cache c;
        axp_prefix_cache_init(&c, 3);
        put(&c, &b, 0, t[0], 64);
        put(&c, &b, 0, t[1], 64);
        put(&c, &b, 0, t[2], 64);
        CHECK_EQ_INT(seed(&c, 0, t[0], 64, true), 63); /* t[0] used last now */
        put(&c, &b, 0, t[3], 64);
        CHECK(c.n == 3 && c.bytes == 3 * one && b.used == 3 * one);
        CHECK_EQ_INT(seed(&c, 0, t[1], 64, false), 0); /* t[1] went */
        CHECK_EQ_INT(seed(&c, 0, t[0], 64, true), 63);
        axp_prefix_cache_free(&c, &b);

        /* at most half the budget */
        b = (axp_kv_budget) { .limit = 5 * one };
        axp_prefix_cache_init(&c, 8);
        put(&c, &b, 0, t[0], 64);
        put(&c, &b, 0, t[1], 64);
        put(&c, &b, 0, t[2], 64);
        CHECK(c.n == 2 && c.bytes == 2 * one);
        /* a reservation that needs the room takes it, the least recently used first */
        axp_kv_hold h = { 0 };
        axp_error err = { 0 };
        CHECK_EQ_INT(axp_prefix_cache_reserve(&c, &b, &h, 4 * one, &err), 0);
        CHECK(c.n == 1 && b.used == 5 * one);
        CHECK_EQ_INT(seed(&c, 0, t[2], 64, true), 63);
        /* more than there is even with the cache gone: busy, and the cache is gone */
        axp_kv_hold h2 = { 0 };
        CHECK_EQ_INT(axp_prefix_cache_reserve(&c, &b, &h2, 2 * one, &err), -EBUSY);
        CHECK(c.n == 0 && strstr(err.msg, "is full") != NULL);
        axp_kv_budget_release(&b, &h);
        axp_prefix_cache_free(&c, &b);
        CHECK(b.used == 0 && b.holders == 0);
}

/* A running request's cache, shared: others start from it (holding nothing of the budget)
 * until it is forgotten; one the cache already holds whole is not shared again. */
static void test_live(void) {
        axp_kv_budget b = { .limit = UINT64_C(1) << 30 };
        axp_prefix_cache c;
        int32_t a[100], x[100];
        for (int i = 0; i < 100; i++)
                a[i] = x[i] = 10 + i;
        x[30] = 5;
        int owner1, owner2;
        axp_seq running;
        filled(&running, a, 64);
        axp_prefix_cache_init(&c, 4);
        axp_prefix_cache_share(&c, &owner1, 0, &running, a);
        CHECK(c.n_live == 1 && c.n == 0 && b.used == 0);
        CHECK_EQ_INT(seed(&c, 0, a, 100, true), 64);
        CHECK_EQ_INT(seed(&c, 0, x, 100, true), 30);
        CHECK_EQ_INT(seed(&c, 7, a, 100, false), 0);
        /* it grows (decodes) and stays shared up to its prompt */
        running.n_past = 70;
        CHECK_EQ_INT(seed(&c, 0, a, 100, true), 64);
        /* an entry already holding all of a prompt: not shared again */
        put(&c, &b, 0, a, 80);
        axp_seq other;
        filled(&other, a, 50);
        axp_prefix_cache_share(&c, &owner2, 0, &other, a);
        CHECK(c.n_live == 1);
        /* the longer of the two serves */
        CHECK_EQ_INT(seed(&c, 0, a, 100, true), 80);
        axp_prefix_cache_forget(&c, &owner2); /* never shared: nothing to forget */
        axp_prefix_cache_forget(&c, &owner1);
        CHECK(c.n_live == 0 && c.n == 1);
        axp_seq_free(&running);
        axp_seq_free(&other);
        /* freed while shared: the cache lets go of it */
        filled(&running, x, 40);
        axp_prefix_cache_share(&c, &owner1, 0, &running, x);
        CHECK(c.n_live == 1);
        axp_prefix_cache_free(&c, &b);
        CHECK(c.n_live == 0 && b.used == 0 && b.holders == 0);
        axp_seq_free(&running);
}

int main(void) {
        char dir[] = "/tmp/axp-test-prefix-XXXXXX", path[64];
        axp_mkmodel_params mp;
        axp_error err = { 0 };

        if (!mkdtemp(dir))
                TEST_SKIP("cannot make a temporary folder");
        snprintf(path, sizeof(path), "%s/m.gguf", dir);
        axp_mkmodel_defaults(&mp);
        mp.type = AXP_TYPE_Q8_0;
        mp.path = path;
        if (axp_mkmodel(&mp, &err) < 0 || axp_model_load(path, &model, &err) < 0) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
        }
        unlink(path);
        rmdir(dir);
        RUN(test_longest_run);
        RUN(test_room);
        RUN(test_live);
        axp_model_free(model);
        TEST_EXIT();
}
