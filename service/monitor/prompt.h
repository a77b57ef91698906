/* SPDX-License-Identifier: MIT */
/* Turning what the user did into prompt text: templates, the text test, what changed in a
 * file, and the summary of a burst of files. */
#pragma once

#include "common.h"

#include <glib.h>
#include <stdbool.h>

/* Replaces each {name} in `tpl` by its value; `vars` alternates names and values and ends
 * with NULL. Unknown {names} stay as written. */
char *prompt_render(const char *tpl, const char *const *vars);

/* Whether `data` reads as text: valid UTF-8 without NUL or stray control characters. When
 * `truncated`, an incomplete character at the very end is allowed. */
bool prompt_is_text(const char *data, size_t len, bool truncated);

/* At most `max` bytes of `s`, cut on a character boundary, with a note when cut. */
char *prompt_clip(const char *s, size_t len, size_t max);

/* What changed from `old` to `now` (both text), in at most about `max` bytes: the lines
 * that differ, or the whole text when `old` is NULL (no earlier version known). NULL when
 * nothing changed. */
char *prompt_describe_change(const char *old, size_t old_len, const char *now, size_t now_len,
                             size_t max);

/* A summary of many changed files: the first ones by name, the rest counted by folder, so
 * every file is accounted for without a request each. */
typedef struct Batch {
        char *root;             /* the deepest folder holding every file */
        guint64 total;
        GPtrArray *listed;      /* absolute paths, in the order they came */
        GHashTable *more;       /* folder → guint64 count of files not listed */
} Batch;

Batch *batch_new(void);
void batch_free(Batch *b);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(Batch, batch_free)
void batch_add_path(Batch *b, const char *path, guint list_max);
void batch_add_count(Batch *b, const char *folder, guint64 count);
void batch_merge(Batch *into, const Batch *from, guint list_max);
/* The {files} text: "- a/b.txt" lines, then "and N more: K in dir/, ...". */
char *batch_render_files(const Batch *b);
/* The template with {count}, {root} and {files} filled in. */
char *batch_render_prompt(const Batch *b, const char *tpl);
