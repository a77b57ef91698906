/* SPDX-License-Identifier: MIT */
/* An event: something the user did that becomes one Proactive request. Its journal form
 * (one JSON object) carries everything needed to submit it again after a restart. */
#pragma once

#include "common.h"

#include <glib.h>
#include <stdbool.h>

#include "base/json.h"
#include "prompt.h"

typedef enum EventSource {
        EVENT_FILE,
        EVENT_CLIPBOARD,
        EVENT_BATCH,            /* a summary of many files */
} EventSource;

typedef enum EventState {
        EVENT_QUEUED,
        EVENT_SUBMITTING,       /* Proactive called, no reply yet */
        EVENT_RUNNING,          /* the engine holds it as a request object */
} EventState;

typedef struct Event {
        guint64 id;             /* unique across restarts: see event_next_id() */
        EventSource source;
        char *path;             /* EVENT_FILE: the file; EVENT_BATCH: the root folder */
        char *prompt;
        gint64 created_us;      /* wall clock */
        Batch *batch;           /* EVENT_BATCH only */

        /* Dispatch state; not journaled (a restart submits every pending event afresh). */
        EventState state;
        guint attempts;
        bool cancelled;         /* the engine cancelled its request: charged as an attempt
                                 * when next submitted, unless the engine left meanwhile */
        char *request;          /* the engine's request object while running */
        char *engine;           /* the engine's unique bus name for that request */
        GString *answer;
        guint timeout_source;
} Event;

Event *event_new(EventSource source, const char *path, char *prompt);
void event_free(Event *ev);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(Event, event_free)

/* "file", "clipboard" or "batch". */
const char *event_source_name(EventSource s);
/* The store's source: a batch is a "file" suggestion. */
const char *event_store_source(EventSource s);

/* Ids are wall-clock microseconds, bumped past `last`, so they stay unique and ordered
 * across restarts as long as the journal keeps the last one. */
guint64 event_next_id(guint64 *last);

/* Appends the event's fields ("id", "source", ...) to an open JSON object in `out`. */
void event_append_json(const Event *ev, GString *out);
/* Reads an event from a journal object; -EINVAL with a message when malformed. */
int event_from_json(const json_value *obj, Event **ret, axp_error *err);

/* JSON writing: a quoted, escaped string (invalid UTF-8 is replaced, never written). */
void json_append_string(GString *out, const char *s);
