/* SPDX-License-Identifier: MIT */
/* The bridge's split of a thinking model's answer (service/bridge/think.c): the thinking
 * between <think> and </think> (or from the start where the prompt opened it) apart from the
 * rest, blanks after </think> left out; fed whole, in every cut into two and three pieces at
 * character boundaries (tags and blanks split across pieces), and a character at a time. */
#include <glib.h>
#include <string.h>

#include "bridge/think.h"
#include "test.h"

typedef struct Case {
        const char *text;
        bool open;
        const char *thinking, *answer;
} Case;

static const Case cases[] = {
        { "<think>\nplan\n</think>\n\nHello", false, "plan", "Hello" },
        { "<think>\nplan\n</think>\n\nHello", true, "plan", "Hello" },
        { "\n <think>plan</think>Hello\n", false, "plan", "Hello\n" },
        { "plan </think>  Hi there", true, "plan", "Hi there" },
        { "plan </think>  Hi there", false, "", "plan </think>  Hi there" },
        { "Hello <think>x</think> y", false, "", "Hello <think>x</think> y" },
        { "  <think>abc", false, "abc", "" },
        { "  <think>abc  \n", true, "abc", "" },
        { "abc", true, "abc", "" },
        { "abc", false, "", "abc" },
        { "", false, "", "" },
        { "", true, "", "" },
        { "<thi", false, "", "<thi" },
        { "<think>a</thin", false, "a</thin", "" },
        { "<think></think>answer", false, "", "answer" },
        { "<think>\n\n</think>\n\nanswer", true, "", "answer" },
        { "<think>a < b </ c</think>\nd", false, "a < b </ c", "d" },
        { "<think>\xc3\xa9 \xc3\xbc</think> \xc3\xb1", false, "\xc3\xa9 \xc3\xbc", "\xc3\xb1" },
        { "\n\nHi", false, "", "\n\nHi" },
        { "<think>a\n\nb\n</think>c  d ", false, "a\n\nb", "c  d " },
        { "x</think></think>y", true, "x", "</think>y" },
        { "<think>x</think>\n\n", false, "x", "" },
        { "<thinker>x", false, "", "<thinker>x" },
        { "<think><think>x</think>y", false, "<think>x", "y" },
};

/* The case fed in pieces cut at these byte offsets (n of them, increasing). */
static void run_cut(const Case *c, const gsize *cuts, int n, const char *how) {
        ThinkSplit s;
        g_autoptr(GString) thinking = g_string_new(NULL);
        g_autoptr(GString) answer = g_string_new(NULL);
        gsize len = strlen(c->text), from = 0;

        think_split_init(&s, c->open);
        for (int i = 0; i <= n; i++) {
                gsize to = i < n ? cuts[i] : len;
                g_autofree char *piece = g_strndup(c->text + from, to - from);
                think_split_feed(&s, piece, thinking, answer);
                /* what is given out is never a tag's beginning that may yet be one */
                CHECK_MSG(!strstr(thinking->str, "</think>"), "%s: '%s' gave thinking '%s'", how, c->text,
                          thinking->str);
                from = to;
        }
        think_split_end(&s, thinking, answer);
        think_split_clear(&s);
        CHECK_MSG(strcmp(thinking->str, c->thinking) == 0 && strcmp(answer->str, c->answer) == 0,
                  "%s: '%s' (open %d): thinking '%s' answer '%s', want '%s' and '%s'", how, c->text, c->open,
                  thinking->str, answer->str, c->thinking, c->answer);
}

/* Character boundaries of the text (byte offsets), 1..len-1 */
static GArray *boundaries(const char *text) {
        GArray *a = g_array_new(FALSE, FALSE, sizeof(gsize));
        for (const char *p = g_utf8_next_char(text); *text && *p; p = g_utf8_next_char(p)) {
                gsize at = (gsize) (p - text);
                g_array_append_val(a, at);
        }
        return a;
}

static void test_whole(void) {
        for (size_t i = 0; i < G_N_ELEMENTS(cases); i++)
                run_cut(&cases[i], NULL, 0, "whole");
}

static void test_two_and_three_pieces(void) {
        for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
                g_autoptr(GArray) b = boundaries(cases[i].text);
                for (guint x = 0; x < b->len; x++) {
                        gsize two[1] = { g_array_index(b, gsize, x) };
                        run_cut(&cases[i], two, 1, "two pieces");
                        for (guint y = x + 1; y < b->len; y++) {
                                gsize three[2] = { g_array_index(b, gsize, x), g_array_index(b, gsize, y) };
                                run_cut(&cases[i], three, 2, "three pieces");
                        }
                }
        }
}

static void test_character_at_a_time(void) {
        for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
                g_autoptr(GArray) b = boundaries(cases[i].text);
                run_cut(&cases[i], (const gsize *) (void *) b->data, (int) b->len, "a character at a time");
        }
}

/* Streamed: the thinking goes out as it comes, a possible tag held back until it is one */
static void test_streamed_pieces(void) {
        ThinkSplit s;
        g_autoptr(GString) thinking = g_string_new(NULL);
        g_autoptr(GString) answer = g_string_new(NULL);

        think_split_init(&s, false);
        think_split_feed(&s, "<th", thinking, answer);
        CHECK(thinking->len == 0 && answer->len == 0);
        think_split_feed(&s, "ink>\nLet me see", thinking, answer);
        CHECK_MSG(strcmp(thinking->str, "Let me see") == 0, "'%s'", thinking->str);
        think_split_feed(&s, ".\n</", thinking, answer);
        CHECK_MSG(strcmp(thinking->str, "Let me see.") == 0 && answer->len == 0, "'%s'", thinking->str);
        think_split_feed(&s, "think", thinking, answer);
        CHECK(strcmp(thinking->str, "Let me see.") == 0 && answer->len == 0);
        think_split_feed(&s, ">\n", thinking, answer);
        CHECK(answer->len == 0);
        think_split_feed(&s, "\nThe ", thinking, answer);
        CHECK_MSG(strcmp(answer->str, "The ") == 0, "'%s'", answer->str);
        think_split_feed(&s, "answer </think>", thinking, answer);
        think_split_end(&s, thinking, answer);
        CHECK(strcmp(thinking->str, "Let me see.") == 0 && strcmp(answer->str, "The answer </think>") == 0);
        think_split_clear(&s);

        /* not a tag after all: what was held goes out with the next piece */
        think_split_init(&s, true);
        g_string_truncate(thinking, 0);
        g_string_truncate(answer, 0);
        think_split_feed(&s, "a </thi", thinking, answer);
        CHECK_MSG(strcmp(thinking->str, "a") == 0, "'%s'", thinking->str);
        think_split_feed(&s, "s", thinking, answer);
        CHECK_MSG(strcmp(thinking->str, "a </this") == 0, "'%s'", thinking->str);
        think_split_end(&s, thinking, answer);
        CHECK(strcmp(thinking->str, "a </this") == 0 && answer->len == 0);
        think_split_clear(&s);
}

int main(void) {
        RUN(test_whole);
        RUN(test_two_and_three_pieces);
        RUN(test_character_at_a_time);
        RUN(test_streamed_pieces);
        TEST_EXIT();
}
