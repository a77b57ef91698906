/* SPDX-License-Identifier: MIT */
/* Unit tests of the monitor's pieces: the JSON reader, prompts and summaries, ignore globs,
 * the journal's replay, the store's crash window and the suggestions' schema and checks. */
#include "common.h"

#include <glib/gstdio.h>
#include <unistd.h>

#include "event.h"
#include "journal.h"
#include "base/json.h"
#include "monitor-config.h"
#include "prompt.h"
#include "store.h"
#include "suggestion.h"
#include "test.h"

static int parse(const char *s, json_value **ret) {
        axp_error err = { 0 };
        return json_parse(s, strlen(s), ret, &err);
}

static void test_json_valid(void) {
        _cleanup_json_ json_value *v = NULL;
        uint64_t u = 0;

        CHECK_EQ_INT(parse(" {\"a\":[1,2.5,-3e2,true,false,null],\"s\":\"x\\n\\u00e9\\ud83d\\ude00\\\"\","
                           "\"big\":18446744073709551615,\"o\":{}} ", &v), 0);
        CHECK(v && v->type == JSON_OBJECT && v->n == 4);
        CHECK(json_get(v, "a")->n == 6);
        CHECK_NEAR(json_get(v, "a")->items[2]->number, -300, 0);
        CHECK(strcmp(json_get_string(v, "s"), "x\n\xc3\xa9\xf0\x9f\x98\x80\"") == 0);
        CHECK_EQ_INT(json_get_u64(v, "big", &u), 0);
        CHECK(u == UINT64_MAX);
        CHECK_EQ_INT(json_get_u64(v, "s", &u), -EINVAL);
        CHECK_EQ_INT(json_get_u64(v, "missing", &u), -ENOENT);
        CHECK(json_get_string(v, "a") == NULL);
}

static void test_json_invalid(void) {
        static const char *const bad[] = {
                "", "{", "{\"a\":}", "{\"a\":1,}", "[1 2]", "{\"a\":1} x", "\"\\x\"", "\"\\u12\"",
                "\"\\u0000\"", "\"\\ud800\"", "\"\\udc00\"", "\"a\nb\"", "01", "1.", "-", "tru",
                "\"\xff\"", "\"\xc0\x80\"", "\"\xed\xa0\x80\"", "{1:2}",
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                json_value *v = NULL;
                axp_error err = { 0 };
                int r = json_parse(bad[i], strlen(bad[i]), &v, &err);
                CHECK_MSG(r == -EINVAL && !v && err.msg[0], "accepted %s", bad[i]);
        }
        /* Nesting is bounded, so a hostile line cannot exhaust the stack. */
        char deep[200];
        memset(deep, '[', 100);
        memset(deep + 100, ']', 100);
        json_value *v = NULL;
        CHECK_EQ_INT(json_parse(deep, sizeof(deep), &v, NULL), -EINVAL);
        /* Negative and fractional numbers are no ids. */
        _cleanup_json_ json_value *n = NULL;
        uint64_t u;
        CHECK_EQ_INT(parse("{\"a\":-1,\"b\":1.5,\"c\":99999999999999999999}", &n), 0);
        CHECK_EQ_INT(json_get_u64(n, "a", &u), -EINVAL);
        CHECK_EQ_INT(json_get_u64(n, "b", &u), -EINVAL);
        CHECK_EQ_INT(json_get_u64(n, "c", &u), -EINVAL);
}

static void test_render(void) {
        const char *vars[] = { "path", "/a/b.txt", "change", "+ x", NULL };
        g_autofree char *s = prompt_render("File {path}: {change} {unknown} {path", vars);
        CHECK(strcmp(s, "File /a/b.txt: + x {unknown} {path") == 0);
}

static void test_is_text(void) {
        CHECK(prompt_is_text("hello\nworld\t\n", 13, false));
        CHECK(prompt_is_text("caf\xc3\xa9", 5, false));
        CHECK(!prompt_is_text("a\0b", 3, false));
        CHECK(!prompt_is_text("caf\xe9", 4, false));                    /* Latin-1 */
        CHECK(!prompt_is_text("caf\xc3", 4, false));                    /* cut character */
        CHECK(prompt_is_text("caf\xc3", 4, true));                      /* ... at a cut read */
        CHECK(!prompt_is_text("caf\xc0", 4, true));                     /* no character starts so */
        CHECK(!prompt_is_text("caf\xed\xa0", 5, true));                 /* nor so (a surrogate) */
        CHECK(!prompt_is_text("\x01\x02\x03\x04", 4, false));
}

static void test_clip(void) {
        g_autofree char *s = prompt_clip("ab\xc3\xa9z", 5, 3);         /* é spans bytes 2-3 */
        CHECK(g_str_has_prefix(s, "ab\n[... 3 more bytes"));
        g_autofree char *t = prompt_clip("short", 5, 10);
        CHECK(strcmp(t, "short") == 0);
}

static void test_change(void) {
        const char *old = "one\ntwo\nthree\nfour\n", *now = "one\ntwo\nTHREE!\nfour\nfive\n";
        g_autofree char *unknown = prompt_describe_change(NULL, 0, now, strlen(now), 4096);
        g_autofree char *same = prompt_describe_change(old, strlen(old), old, strlen(old), 4096);
        g_autofree char *diff = prompt_describe_change(old, strlen(old), now, strlen(now), 4096);

        CHECK(strstr(unknown, "THREE!") && strstr(unknown, "five"));
        CHECK(same == NULL);
        CHECK_MSG(strstr(diff, "Changed from line 3") && strstr(diff, "- three\n") &&
                  strstr(diff, "+ THREE!\n") && strstr(diff, "+ five\n") && !strstr(diff, "two"),
                  "%s", diff);
        CHECK(strstr(diff, "It now has 5 lines (it had 4)"));
}

static void test_batch(void) {
        g_autoptr(Batch) b = batch_new();
        g_autoptr(Batch) c = batch_new();

        batch_add_path(b, "/w/src/a.c", 2);
        batch_add_path(b, "/w/src/b.c", 2);
        batch_add_path(b, "/w/src/c.c", 2);
        batch_add_path(b, "/w/doc/x.md", 2);
        CHECK(strcmp(b->root, "/w") == 0);
        CHECK(b->total == 4);
        g_autofree char *files = batch_render_files(b);
        CHECK_MSG(strcmp(files, "- src/a.c\n- src/b.c\nand 2 more: 1 in doc/, 1 in src/") == 0, "%s",
                  files);

        batch_add_path(c, "/w2/z.txt", 5);
        batch_merge(c, b, 5);
        CHECK(c->total == 5);
        CHECK(strcmp(c->root, "/") == 0);
        g_autofree char *prompt = batch_render_prompt(c, "{count} under {root}:\n{files}");
        CHECK_MSG(g_str_has_prefix(prompt, "5 under /:\n- w2/z.txt\n- w/src/a.c\n"), "%s", prompt);

        /* A root that is a prefix of a sibling's name is no common folder. */
        g_autoptr(Batch) d = batch_new();
        batch_add_path(d, "/a/b/x", 5);
        batch_add_path(d, "/a/bc/y", 5);
        CHECK(strcmp(d->root, "/a") == 0);
}

static void test_ignore(void) {
        g_autoptr(MonitorConfig) cfg = monitor_config_defaults();
        char *watch[] = { "/home/u/.cache/project", "/home/u/docs", NULL };
        axp_error err = { 0 };

        CHECK_EQ_INT(monitor_config_set_watch(cfg, watch, &err), 0);
        monitor_config_add_exclude(cfg, "/home/u/docs/state");
        CHECK(monitor_config_ignored(cfg, "/home/u/docs/repo/.git/config", false));
        CHECK(monitor_config_ignored(cfg, "/home/u/docs/repo/.git", true));
        CHECK(monitor_config_ignored(cfg, "/home/u/docs/.ssh/known_hosts", false));
        CHECK(monitor_config_ignored(cfg, "/home/u/docs/keys/server.key", false));
        CHECK(monitor_config_ignored(cfg, "/home/u/docs/id_ed25519.pub", false));
        CHECK(monitor_config_ignored(cfg, "/home/u/docs/.env", false));
        CHECK(monitor_config_ignored(cfg, "/home/u/docs/notes.txt~", false));
        CHECK(monitor_config_ignored(cfg, "/home/u/docs/state/suggestions.jsonl", false));
        CHECK(!monitor_config_ignored(cfg, "/home/u/docs/notes.txt", false));
        CHECK(!monitor_config_ignored(cfg, "/home/u/docs/keys.txt", false));
        CHECK(!monitor_config_ignored(cfg, "/home/u/docs/git/readme", false));
        /* The glob .cache/ applies below the watched folder, not to the folder itself. */
        CHECK(!monitor_config_ignored(cfg, "/home/u/.cache/project/main.c", false));
        CHECK(monitor_config_ignored(cfg, "/home/u/.cache/project/.cache/x", false));
}

static char *temp_dir(void) {
        return g_dir_make_tmp("axp-unit-XXXXXX", NULL);
}

/* An event as a damaged or hostile journal may hold it: a "created" no gint64 holds keeps the
 * time of reading (converting it was undefined, INT64_MIN on x86-64) */
static void test_event_created_out_of_range(void) {
        const char *lines[] = {
                "{\"id\":1,\"source\":\"clipboard\",\"prompt\":\"x\",\"created\":1e300}",
                "{\"id\":2,\"source\":\"clipboard\",\"prompt\":\"x\",\"created\":-1e300}",
        };
        for (size_t i = 0; i < G_N_ELEMENTS(lines); i++) {
                json_value *v = NULL;
                Event *ev = NULL;
                axp_error err = { 0 };
                gint64 now = g_get_real_time();
                CHECK_EQ_INT(parse(lines[i], &v), 0);
                CHECK_EQ_INT(event_from_json(v, &ev, &err), 0);
                CHECK(ev && ev->created_us >= now && ev->created_us <= now + 60 * G_USEC_PER_SEC);
                event_free(ev);
                json_free(v);
        }
}

static void test_journal(void) {
        g_autofree char *dir = temp_dir();
        g_autofree char *path = g_build_filename(dir, "journal.jsonl", NULL);
        g_autoptr(Journal) j = NULL;
        g_autoptr(JournalState) st = NULL;
        g_autoptr(GPtrArray) seen = g_ptr_array_new();
        g_autoptr(GArray) replaces = g_array_new(FALSE, FALSE, sizeof(guint64));
        axp_error err = { 0 };
        guint64 last = 0;

        CHECK_EQ_INT(journal_open(path, &j, &st, &err), 0);
        CHECK(st->events->len == 0 && st->seen->len == 0);
        g_clear_pointer(&st, journal_state_free);

        g_ptr_array_add(seen, "/w/a.txt");
        g_ptr_array_add(seen, "/w/b.txt");
        g_ptr_array_add(seen, "/w/c.txt");
        journal_seen(j, seen);
        g_autoptr(Event) a = event_new(EVENT_FILE, "/w/a.txt", g_strdup("FILE a"));
        a->id = event_next_id(&last);
        journal_event(j, a, "/w/a.txt", false, NULL);
        g_autoptr(Event) clip = event_new(EVENT_CLIPBOARD, NULL, g_strdup("CLIP \"quoted\"\n"));
        clip->id = event_next_id(&last);
        journal_event(j, clip, NULL, false, NULL);
        journal_submit(j, clip->id, "/org/agentxpu/Engine/request/1");
        journal_settle(j, "/w/b.txt");
        g_autoptr(Event) sum = event_new(EVENT_BATCH, "/w", g_strdup("BATCH"));
        sum->batch = batch_new();
        batch_add_path(sum->batch, "/w/a.txt", 1);
        batch_add_path(sum->batch, "/w/d/e.txt", 1);
        sum->id = event_next_id(&last);
        g_array_append_val(replaces, a->id);
        journal_event(j, sum, NULL, false, replaces);
        g_clear_pointer(&j, journal_free);

        /* A torn last line, as after a kill in the middle of a write. */
        FILE *f = fopen(path, "a");
        fputs("{\"op\":\"done\",\"id\":", f);
        fclose(f);

        CHECK_EQ_INT(journal_open(path, &j, &st, &err), 0);
        CHECK_EQ_INT(st->events->len, 2);       /* the clipboard event and the summary */
        CHECK(st->last_id == sum->id);
        if (st->events->len == 2) {
                Event *e0 = st->events->pdata[0], *e1 = st->events->pdata[1];
                CHECK(e0->id == clip->id && e0->source == EVENT_CLIPBOARD &&
                      strcmp(e0->prompt, "CLIP \"quoted\"\n") == 0);
                CHECK(e1->id == sum->id && e1->batch && e1->batch->total == 2 &&
                      e1->batch->listed->len == 1 && strcmp(e1->batch->root, "/w") == 0);
        }
        CHECK_EQ_INT(st->seen->len, 1);
        CHECK(st->seen->len == 1 && strcmp(st->seen->pdata[0], "/w/c.txt") == 0);

        /* The rewrite holds the same state, and ids keep growing past it. */
        CHECK_EQ_INT(journal_rewrite(j, st->events, st->seen, st->last_id, &err), 0);
        journal_done(j, clip->id, "stored");
        g_clear_pointer(&j, journal_free);
        guint64 before = st->last_id;
        g_clear_pointer(&st, journal_state_free);
        CHECK_EQ_INT(journal_open(path, &j, &st, &err), 0);
        CHECK_EQ_INT(st->events->len, 1);
        CHECK(st->last_id == before);
        CHECK_EQ_INT(st->seen->len, 1);

        g_clear_pointer(&j, journal_free);
        g_unlink(path);
        g_rmdir(dir);
}

static void test_store(void) {
        g_autofree char *dir = temp_dir();
        g_autofree char *path = g_build_filename(dir, "suggestions.jsonl", NULL);
        g_autoptr(Store) s = NULL;
        g_autoptr(GHashTable) ids = g_hash_table_new(g_int64_hash, g_int64_equal);
        g_autoptr(Event) a = event_new(EVENT_FILE, "/w/a.txt", g_strdup("p"));
        g_autoptr(Event) b = event_new(EVENT_CLIPBOARD, NULL, g_strdup("p"));
        axp_error err = { 0 };

        a->id = 11;
        b->id = 12;
        CHECK_EQ_INT(store_open(path, 0, &s, &err), 0);
        Suggestion sug = { .title = (char *) "A title", .body = (char *) "line one\nline \"two\"",
                           .kind = "next-step" };
        CHECK_EQ_INT(store_append(s, a, &sug, &err), 0);
        g_hash_table_add(ids, &a->id);
        g_hash_table_add(ids, &b->id);
        store_forget_answered(s, ids);
        CHECK(!g_hash_table_contains(ids, &a->id) && g_hash_table_contains(ids, &b->id));

        g_autofree char *data = NULL;
        CHECK(g_file_get_contents(path, &data, NULL, NULL));
        _cleanup_json_ json_value *v = NULL;
        CHECK_EQ_INT(json_parse(data, strlen(data), &v, &err), 0);
        CHECK(strcmp(json_get_string(v, "source"), "file") == 0);
        CHECK(strcmp(json_get_string(v, "path"), "/w/a.txt") == 0);
        CHECK(strcmp(json_get_string(v, "body"), "line one\nline \"two\"") == 0);
        CHECK(strcmp(json_get_string(v, "title"), "A title") == 0);
        CHECK(strcmp(json_get_string(v, "kind"), "next-step") == 0);
        CHECK(!json_get(v, "text"));
        CHECK(g_str_has_suffix(json_get_string(v, "created"), "Z"));
        struct stat st;
        CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);

        g_clear_pointer(&s, store_free);
        g_unlink(path);
        g_rmdir(dir);
}

static int sparse(const char *text, Suggestion *s, axp_error *err) {
        return suggestion_parse(text, strlen(text), 10, 20, s, err);
}

static void test_suggestion(void) {
        g_autofree char *schema = suggestion_schema(10, 20);
        _cleanup_json_ json_value *v = NULL;
        Suggestion s = { 0 };
        axp_error err = { 0 };

        /* The schema: the three fields, required, the lengths and the kinds. */
        CHECK_EQ_INT(parse(schema, &v), 0);
        const json_value *props = json_get(v, "properties");
        CHECK(props && props->n == 3);
        CHECK(json_get(v, "required")->n == 3);
        uint64_t max = 0;
        CHECK(json_get_u64(json_get(props, "title"), "maxLength", &max) == 0 && max == 10);
        CHECK(json_get_u64(json_get(props, "body"), "maxLength", &max) == 0 && max == 20);
        const json_value *kinds = json_get(json_get(props, "kind"), "enum");
        CHECK(kinds && kinds->n == 4);
        for (size_t i = 0; i < kinds->n; i++)
                CHECK(strcmp(kinds->items[i]->text, suggestion_kinds[i]) == 0);

        CHECK_EQ_INT(sparse("{\"title\":\"Dates\",\"body\":\"Add a due date \u00e9.\",\"kind\":\"next-step\"}",
                            &s, &err), 0);
        CHECK(strcmp(s.title, "Dates") == 0 && strcmp(s.body, "Add a due date \u00e9.") == 0);
        CHECK(strcmp(s.kind, "next-step") == 0 && s.kind == suggestion_kinds[2]);
        suggestion_clear(&s);
        CHECK(!s.title && !s.body && !s.kind);

        /* What the engine should never send, checked all the same. */
        static const char *const bad[] = {
                "{\"title\":\"T\",\"body\":\"B\",\"kind\":\"advice\"}",
                "{\"title\":\"T\",\"body\":\"B\"}",
                "{\"title\":\"T\",\"kind\":\"summary\"}",
                "{\"title\":\"  \",\"body\":\"B\",\"kind\":\"summary\"}",
                "{\"title\":\"eleven char\",\"body\":\"B\",\"kind\":\"summary\"}",
                "{\"title\":\"T\",\"body\":\"B\",\"kind\":\"summary\",\"extra\":1}",
                "{\"title\":1,\"body\":\"B\",\"kind\":\"summary\"}",
                "{\"title\":\"T\",\"body\":\"B\",\"ki",
                "[\"T\",\"B\",\"summary\"]",
                "A plain sentence.",
        };
        for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
                err.msg[0] = 0;
                CHECK_EQ_INT(sparse(bad[i], &s, &err), -EBADMSG);
                CHECK(err.msg[0] != 0);
                CHECK(!s.title && !s.body);
        }
}

int main(void) {
        RUN(test_json_valid);
        RUN(test_json_invalid);
        RUN(test_render);
        RUN(test_is_text);
        RUN(test_clip);
        RUN(test_change);
        RUN(test_batch);
        RUN(test_ignore);
        RUN(test_event_created_out_of_range);
        RUN(test_journal);
        RUN(test_store);
        RUN(test_suggestion);
        TEST_EXIT();
}
