/* SPDX-License-Identifier: MIT */
/* The thinking of an answer apart from the rest (think.h). */
#include "think.h"

#include <string.h>

#define OPEN_TAG "<think>"
#define CLOSE_TAG "</think>"

static bool blank(char ch) {
        return ch == ' ' || ch == '\n' || ch == '\t' || ch == '\r';
}

static gsize skip_blanks(const char *s, gsize from, gsize len) {
        while (from < len && blank(s[from]))
                from++;
        return from;
}

/* The length of the longest end of s[0..len) that begins `tag` without being all of it. */
static gsize partial_tag(const char *s, gsize len, const char *tag) {
        gsize n = strlen(tag);
        for (gsize k = MIN(len, n - 1); k > 0; k--)
                if (memcmp(s + len - k, tag, k) == 0)
                        return k;
        return 0;
}

void think_split_init(ThinkSplit *s, bool open) {
        *s = (ThinkSplit) { .state = THINK_START, .open = open, .held = g_string_new(NULL) };
}

void think_split_clear(ThinkSplit *s) {
        if (s->held)
                g_string_free(s->held, TRUE);
        s->held = NULL;
}

/* Thinking text s[0..len): blanks before the first of it are left out. */
static void give_thinking(ThinkSplit *s, const char *text, gsize len, GString *thinking) {
        gsize from = s->thought ? 0 : skip_blanks(text, 0, len);
        if (from < len) {
                g_string_append_len(thinking, text + from, (gssize) (len - from));
                s->thought = true;
        }
}

/* Inside the thinking: what is in s->held. */
static void inside(ThinkSplit *s, GString *thinking) {
        GString *h = s->held;
        const char *close = strstr(h->str, CLOSE_TAG);

        if (close) {
                gsize end = (gsize) (close - h->str), rest = end + strlen(CLOSE_TAG);
                while (end > 0 && blank(h->str[end - 1]))
                        end--;  /* blanks before the tag */
                give_thinking(s, h->str, end, thinking);
                g_string_erase(h, 0, (gssize) rest);
                s->state = THINK_AFTER;
                return;
        }
        /* give out all but a possible start of the tag and the blanks before it */
        gsize keep = h->len - partial_tag(h->str, h->len, CLOSE_TAG);
        while (keep > 0 && blank(h->str[keep - 1]))
                keep--;
        give_thinking(s, h->str, keep, thinking);
        g_string_erase(h, 0, (gssize) keep);
}

void think_split_feed(ThinkSplit *s, const char *text, GString *thinking, GString *answer) {
        GString *h = s->held;

        if (s->state == THINK_ANSWER) {
                g_string_append(answer, text);
                return;
        }
        g_string_append(h, text);
        if (s->state == THINK_START) {
                gsize at = skip_blanks(h->str, 0, h->len), n = h->len - at, tag = strlen(OPEN_TAG);
                if (n < tag && memcmp(h->str + at, OPEN_TAG, n) == 0)
                        return; /* blanks, or the tag's beginning so far: not decided */
                if (n >= tag && memcmp(h->str + at, OPEN_TAG, tag) == 0) {
                        g_string_erase(h, 0, (gssize) (at + tag));
                        s->state = THINK_INSIDE;
                } else if (s->open)
                        s->state = THINK_INSIDE;
                else {
                        /* no thinking: the answer as it is, blanks and all */
                        s->state = THINK_ANSWER;
                        g_string_append_len(answer, h->str, (gssize) h->len);
                        g_string_truncate(h, 0);
                        return;
                }
        }
        if (s->state == THINK_INSIDE)
                inside(s, thinking);
        if (s->state == THINK_AFTER) {
                gsize at = skip_blanks(h->str, 0, h->len);
                if (at == h->len) {
                        g_string_truncate(h, 0);
                        return;
                }
                s->state = THINK_ANSWER;
                g_string_append_len(answer, h->str + at, (gssize) (h->len - at));
                g_string_truncate(h, 0);
        }
}

void think_split_end(ThinkSplit *s, GString *thinking, GString *answer) {
        GString *h = s->held;

        switch (s->state) {
        case THINK_START:
                /* blanks, or the beginning of "<think>" and no more */
                if (s->open) {
                        gsize end = h->len;
                        while (end > 0 && blank(h->str[end - 1]))
                                end--;
                        give_thinking(s, h->str, end, thinking);
                } else
                        g_string_append_len(answer, h->str, (gssize) h->len);
                break;
        case THINK_INSIDE: {
                /* never closed: all of it is thinking (an unfinished tag too), but trailing blanks */
                gsize end = h->len;
                while (end > 0 && blank(h->str[end - 1]))
                        end--;
                give_thinking(s, h->str, end, thinking);
                break;
        }
        case THINK_AFTER:
        case THINK_ANSWER:
                break;
        }
        g_string_truncate(h, 0);
}
