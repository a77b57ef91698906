/* SPDX-License-Identifier: MIT */
/* The suggestion store, $XDG_STATE_HOME/agentxpu/suggestions.jsonl: one JSON object per
 * suggestion with "id", "source" ("file" or "clipboard"), "path" (files), "created" (ISO 8601,
 * UTC), the suggestion itself as "title", "body" and "kind" (see suggestion.h), "files" for
 * a summary of many files and "request" (the engine's request object). Records written
 * before suggestions were structured have "text" instead of title, body and kind. Readable by the user alone; the
 * newest half is kept when it outgrows its cap. `agentxpu suggestions` lists it. */
#pragma once

#include "common.h"

#include <glib.h>

#include "event.h"
#include "suggestion.h"

typedef struct Store Store;

int store_open(const char *path, goffset max_bytes, Store **ret, axp_error *err);
void store_free(Store *s);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(Store, store_free)

int store_append(Store *s, const Event *ev, const Suggestion *sug, axp_error *err);

/* Removes from `ids` (a set of guint64*) every id that the newest records already answer:
 * the store is written before the journal says done, so a kill in between must not lead
 * to a second suggestion. */
void store_forget_answered(Store *s, GHashTable *ids);
