/* SPDX-License-Identifier: MIT */
/* The dispatcher: the queue of events between the sources and the engine. It journals each
 * event, submits it as a Proactive request within the rate limit (a token bucket of
 * [limits] burst and requests_per_minute, at most max_in_flight at once), folds queued file
 * events into one summary when they pile up, and turns each answer into a stored suggestion
 * and a notification. Events whose request was lost (the engine left, the monitor restarted)
 * are submitted again, once. */
#pragma once

#include "common.h"

#include <glib.h>

#include "monitor-config.h"
#include "event.h"
#include "journal.h"
#include "notify.h"
#include "store.h"

typedef struct Dispatcher Dispatcher;

/* `address`: the engine's bus (NULL: the system bus). */
Dispatcher *dispatcher_new(const MonitorConfig *cfg, Journal *journal, Store *store,
                           Notifier *notifier, const char *address, guint64 last_id);
void dispatcher_free(Dispatcher *d);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(Dispatcher, dispatcher_free)

/* Takes pending events from the journal (already journaled), in id order. */
void dispatcher_restore(Dispatcher *d, GPtrArray *events);
/* Takes a new event: gives it an id, journals it together with what it settles (a path
 * seen by the file watcher, or all of them), and queues it. */
void dispatcher_add(Dispatcher *d, Event *ev, const char *settles, bool settles_all);

/* Every live event (queued or at the engine), in id order, for a journal rewrite. */
GPtrArray *dispatcher_pending(Dispatcher *d);
guint64 dispatcher_last_id(Dispatcher *d);
