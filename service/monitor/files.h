/* SPDX-License-Identifier: MIT */
/* The file source on the main loop: changed paths from the watcher thread wait in a debounce
 * table until they have been quiet for debounce_ms (an editor's save burst becomes one
 * event); then each is checked (a regular text file within max_size, changed since last
 * time) and becomes an event. When burst_threshold paths change at once (a checkout), they
 * wait until the whole burst is quiet and become one summary instead. */
#pragma once

#include "common.h"

#include <glib.h>

#include "monitor-config.h"
#include "dispatch.h"
#include "journal.h"

typedef struct Files Files;

/* `restored`: paths the journal had seen but not settled before a restart. */
Files *files_new(const MonitorConfig *cfg, Journal *journal, Dispatcher *dispatcher,
                 GPtrArray *restored);
void files_free(Files *f);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(Files, files_free)

/* The paths waiting in the debounce table, for a journal rewrite. */
GPtrArray *files_pending(Files *f);
/* Memory is short: forget the texts of earlier versions and summarize what waits. */
void files_shed(Files *f);
