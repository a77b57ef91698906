/* SPDX-License-Identifier: MIT */
/* The journal of pending work, $XDG_STATE_HOME/agentxpu/monitor-journal.jsonl: one JSON
 * object per line, appended with a single write each, so a kill at any point leaves at
 * worst a torn last line (ignored on reading). Records ("op"):
 *   seen     a changed path entered the debounce table
 *   settle   that path left it without an event (deleted, binary, unchanged...);
 *            with "all", every path seen so far did
 *   event    a new event (settles: its path; settles_all: every path seen so far;
 *            replaces: ids it summarizes, which are then done)
 *   submit   the event went to the engine (informational: after a restart every pending
 *            event is submitted again, once)
 *   done     the event is over (answered and stored, failed, or dropped)
 * At startup the journal is replayed and rewritten with only what is still pending. */
#pragma once

#include "common.h"

#include <glib.h>

#include "event.h"

typedef struct Journal Journal;

typedef struct JournalState {
        GPtrArray *events;      /* Event*, pending, in id order */
        GPtrArray *seen;        /* char* paths seen and not settled, in order */
        guint64 last_id;
} JournalState;

void journal_state_free(JournalState *st);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(JournalState, journal_state_free)

/* Opens (creating) the journal and replays it. Malformed lines are skipped with a warning. */
int journal_open(const char *path, Journal **ret, JournalState **ret_state, axp_error *err);
void journal_free(Journal *j);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(Journal, journal_free)

/* Replaces the file with exactly this state (write, fsync, rename). */
int journal_rewrite(Journal *j, GPtrArray *events, GPtrArray *seen, guint64 last_id, axp_error *err);
goffset journal_size(Journal *j);
/* What was appended since the last rewrite. */
goffset journal_growth(Journal *j);

void journal_seen(Journal *j, GPtrArray *paths);
/* `path` NULL: every path seen so far. */
void journal_settle(Journal *j, const char *path);
void journal_event(Journal *j, const Event *ev, const char *settles, bool settles_all,
                   GArray *replaces);
void journal_submit(Journal *j, guint64 id, const char *request);
void journal_done(Journal *j, guint64 id, const char *outcome);
