/* SPDX-License-Identifier: MIT */
/* Recursive file watches through libinotifytools. The library keeps process-global state and
 * a private fd, so it lives on a thread of its own; that thread walks the watched folders,
 * follows new and moved subfolders, and hands changed paths to the main loop in batches.
 * When the main loop falls behind, the thread waits (the kernel queue absorbs the rest); a
 * kernel queue overflow makes it rescan for files changed since the last event it saw. */
#pragma once

#include "common.h"

#include <glib.h>

#include "monitor-config.h"

typedef enum WatchKind {
        WATCH_CHANGED,          /* path: a file was written or moved in */
        WATCH_READY,            /* text: the initial watches are set */
        WATCH_OVERFLOW,         /* text: events were lost; a rescan follows */
        WATCH_ERROR,            /* text: something the user should know */
} WatchKind;

typedef struct WatchMsg {
        WatchKind kind;
        char *text;             /* the path, or a message */
} WatchMsg;

void watch_msg_free(WatchMsg *m);

typedef struct Watcher Watcher;

/* Called on the main loop with a batch of WatchMsg (the callee may steal entries). */
typedef void (*WatcherFn)(void *userdata, GPtrArray *msgs);

/* Starts the thread on cfg->watch (cfg must outlive the watcher). */
Watcher *watcher_start(const MonitorConfig *cfg, WatcherFn fn, void *userdata);
void watcher_stop(Watcher *w);
