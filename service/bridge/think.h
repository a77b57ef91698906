/* SPDX-License-Identifier: MIT */
/* A thinking model's answer split into its thinking and the rest, as llama-server's
 * --reasoning-format deepseek splits it: the text between the template's "<think>" and
 * "</think>" is thinking, what follows it the answer, the blanks right after "</think>" left out
 * (and those around the thinking). An answer that does not open with "<think>" (blanks before
 * it aside) is all answer, unless the prompt opened the block (`open`: a template whose
 * generation prompt ends with "<think>", as QwQ's), when it begins inside the
 * thinking (a "<think>" the model writes anyway is taken as the opening). A block never closed
 * is all thinking.
 *
 * Fed piece by piece as the engine sends them (whole UTF-8 characters); a piece that may be
 * the beginning of a tag (or blanks that may end the thinking) is held back until the next one
 * says, so a tag split across pieces is found. Only GLib. */
#pragma once

#include <glib.h>
#include <stdbool.h>

typedef enum ThinkState {
        THINK_START,    /* nothing decided: blanks, maybe the start of "<think>" */
        THINK_INSIDE,   /* in the thinking */
        THINK_AFTER,    /* after "</think>": blanks are left out */
        THINK_ANSWER,   /* the rest is the answer as it comes */
} ThinkState;

typedef struct ThinkSplit {
        ThinkState state;
        bool open;              /* the answer begins inside the thinking */
        bool thought;           /* some thinking was given out (blanks before it are not) */
        GString *held;          /* what is not decided yet */
} ThinkSplit;

void think_split_init(ThinkSplit *s, bool open);
void think_split_clear(ThinkSplit *s);
/* A piece of the answer: what it decides is appended to `thinking` and `answer`. */
void think_split_feed(ThinkSplit *s, const char *text, GString *thinking, GString *answer);
/* The answer ended: what was held back goes where it belongs. */
void think_split_end(ThinkSplit *s, GString *thinking, GString *answer);
