/* SPDX-License-Identifier: MIT */
/* The GDBus clients' table of requests in flight (service/common/engine-requests.c), without
 * a bus: signals routed by path and taken only from the request's answering name, kept when
 * they overtake the answer and replayed after it, bounded; lost requests finished; the rest
 * dropped when the table is freed. */
#include <stdbool.h>

#include "common/engine-requests.h"
#include "test.h"

typedef struct Req {
        int tokens, finished, dropped;
        char text[64], reason[32], error[64];
        bool stats;
} Req;

static void on_token(void *req, const char *text) {
        Req *r = req;
        r->tokens++;
        g_strlcat(r->text, text, sizeof(r->text));
}

static void on_finished(void *req, const char *reason, const char *error, GVariant *stats) {
        Req *r = req;
        r->finished++;
        g_strlcpy(r->reason, reason, sizeof(r->reason));
        g_strlcpy(r->error, error ? error : "", sizeof(r->error));
        r->stats = stats != NULL;
}

static void on_drop(void *req) {
        ((Req *) req)->dropped++;
}

static const EngineRequestsOps ops = { .token = on_token, .finished = on_finished, .drop = on_drop };

static void token(EngineRequests *t, const char *sender, const char *path, const char *text) {
        g_autoptr(GVariant) v = g_variant_ref_sink(g_variant_new("(s)", text));
        engine_requests_signal(t, sender, path, "Token", v);
}

static void finished(EngineRequests *t, const char *sender, const char *path, const char *reason) {
        GVariantBuilder b;
        g_variant_builder_init(&b, G_VARIANT_TYPE("a{sv}"));
        if (strcmp(reason, "error") == 0)
                g_variant_builder_add(&b, "{sv}", "error", g_variant_new_string("it broke"));
        g_autoptr(GVariant) v = g_variant_ref_sink(g_variant_new("(sa{sv})", reason, &b));
        engine_requests_signal(t, sender, path, "Finished", v);
}

static void test_routing(void) {
        EngineRequests *t = engine_requests_new(&ops);
        Req a = { 0 }, b = { 0 };
        engine_requests_add(t, "/r/1", ":1.5", &a);
        engine_requests_add(t, "/r/2", ":1.5", &b);
        token(t, ":1.5", "/r/1", "Hel");
        token(t, ":1.9", "/r/1", "XX"); /* another peer's signal: ignored */
        token(t, ":1.5", "/r/1", "lo");
        token(t, ":1.5", "/r/2", "B");
        g_autoptr(GVariant) bad = g_variant_ref_sink(g_variant_new("(u)", 7)); /* wrong type: ignored */
        engine_requests_signal(t, ":1.5", "/r/1", "Token", bad);
        finished(t, ":1.5", "/r/1", "stop");
        CHECK(strcmp(a.text, "Hello") == 0 && a.tokens == 2);
        CHECK(a.finished == 1 && strcmp(a.reason, "stop") == 0 && a.stats);
        CHECK(engine_requests_lookup(t, "/r/1", NULL) == NULL);
        const char *owner = NULL;
        CHECK(engine_requests_lookup(t, "/r/2", &owner) == &b && g_strcmp0(owner, ":1.5") == 0);
        finished(t, ":1.5", "/r/2", "error");
        CHECK(b.finished == 1 && strcmp(b.reason, "error") == 0 && strcmp(b.error, "it broke") == 0);
        engine_requests_free(t);
        CHECK(a.dropped == 0 && b.dropped == 0);
}

static void test_overtaking_signals(void) {
        EngineRequests *t = engine_requests_new(&ops);
        Req a = { 0 };
        /* the signals before the answer: kept, delivered by replay, not by add */
        token(t, ":1.5", "/r/3", "A");
        token(t, ":1.5", "/r/other", "Z");
        token(t, ":1.5", "/r/3", "B");
        finished(t, ":1.5", "/r/3", "length");
        engine_requests_add(t, "/r/3", ":1.5", &a);
        CHECK(a.tokens == 0 && a.finished == 0);
        engine_requests_replay(t, "/r/3");
        CHECK(strcmp(a.text, "AB") == 0 && a.finished == 1 && strcmp(a.reason, "length") == 0);
        CHECK(engine_requests_lookup(t, "/r/3", NULL) == NULL);
        /* cancelled before its replay: the kept signals stay kept, nothing loops */
        Req c = { 0 };
        token(t, ":1.5", "/r/4", "C");
        engine_requests_add(t, "/r/4", ":1.5", &c);
        CHECK(engine_requests_remove(t, "/r/4") == &c);
        engine_requests_replay(t, "/r/4");
        CHECK(c.tokens == 0 && c.finished == 0);
        engine_requests_free(t);
}

static void test_bounded_and_lost(void) {
        EngineRequests *t = engine_requests_new(&ops);
        Req a = { 0 }, b = { 0 }, c = { 0 };
        /* a flood of signals for paths nobody asked for: the oldest go, the newest stay */
        token(t, ":1.5", "/r/5", "first");
        for (int i = 0; i < 300; i++)
                token(t, ":1.5", "/r/flood", "x");
        token(t, ":1.5", "/r/5", "last");
        engine_requests_add(t, "/r/5", ":1.5", &a);
        engine_requests_replay(t, "/r/5");
        CHECK_MSG(strcmp(a.text, "last") == 0, "%s", a.text);
        /* the engine leaves: its requests are lost, another owner's stay */
        engine_requests_add(t, "/r/6", ":1.5", &b);
        engine_requests_add(t, "/r/7", ":1.6", &c);
        engine_requests_lose(t, ":1.5", "lost", NULL);
        CHECK(a.finished == 1 && b.finished == 1 && strcmp(b.reason, "lost") == 0 && !b.stats);
        CHECK(c.finished == 0 && engine_requests_lookup(t, "/r/7", NULL) == &c);
        engine_requests_free(t);
        CHECK(c.dropped == 1 && a.dropped == 0 && b.dropped == 0);
}

int main(void) {
        RUN(test_routing);
        RUN(test_overtaking_signals);
        RUN(test_bounded_and_lost);
        TEST_EXIT();
}
