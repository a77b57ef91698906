/* SPDX-License-Identifier: MIT */
/* A suggestion as the monitor asks the engine for one and stores it: a JSON object with a
 * "title", a "body" and a "kind" from a fixed list. The request carries the JSON schema of
 * that object (the engine's json_schema option), so the answer always parses; the answer
 * is still checked here, since it comes from another process. */
#pragma once

#include "common.h"

#include <glib.h>

/* The kinds, NULL-terminated: what a suggestion is. */
extern const char *const suggestion_kinds[];

typedef struct Suggestion {
        char *title;
        char *body;
        const char *kind;       /* one of suggestion_kinds */
} Suggestion;

void suggestion_clear(Suggestion *s);

/* The JSON schema of a suggestion, strings at most this many characters long. */
char *suggestion_schema(guint title_max_length, guint body_max_length);

/* What the request's system prompt adds so that the model knows what the fields mean. */
#define SUGGESTION_INSTRUCTIONS                                                                  \
        "Answer with a JSON object: \"title\", a few words; \"body\", two or three sentences; " \
        "\"kind\", one of summary (what changed or what it is), explanation (what it means), " \
        "next-step (something the user could do) or warning (something to look at)."

/* Parses and checks an answer: a JSON object with exactly the three fields, strings of at
 * most the lengths given, a known kind, and a title and a body that are not blank. */
int suggestion_parse(const char *text, size_t len, guint title_max_length, guint body_max_length,
                     Suggestion *ret, axp_error *err);
