/* SPDX-License-Identifier: MIT */
/* Desktop notifications (org.freedesktop.Notifications on the session bus) offering each
 * suggestion with "open" and "dismiss" actions. Nothing happens unless the user picks one.
 * The summary is the suggestion's title; the body its body and what it is about.
 * Without a notification server the monitor says so once and keeps to the store. */
#pragma once

#include "common.h"

#include <gio/gio.h>

#include "event.h"
#include "suggestion.h"

typedef struct Notifier Notifier;

Notifier *notifier_new(void);
void notifier_free(Notifier *n);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(Notifier, notifier_free)

void notifier_show(Notifier *n, const Event *ev, const Suggestion *sug);
