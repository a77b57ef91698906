/* SPDX-License-Identifier: MIT */
/* The clipboard source. Backends: X11 (and XWayland) through XFixes selection-owner events,
 * Wayland through a data-control protocol (`wl-paste --watch`). Either way the offered
 * types are looked at first: content a password manager marks with x-kde-passwordManagerHint
 * is never read, and content over [clipboard] max_size is not fetched. Text that survives
 * is deduplicated against recent copies and becomes an event. */
#pragma once

#include "common.h"

#include <glib.h>

#include "monitor-config.h"
#include "dispatch.h"

/* The MIME type a password manager adds to mark its content as secret (KDE's convention,
 * honoured by KeePassXC and others). */
#define CLIPBOARD_PASSWORD_HINT "x-kde-passwordManagerHint"

typedef struct Clipboard Clipboard;

Clipboard *clipboard_new(const MonitorConfig *cfg, Dispatcher *dispatcher);
void clipboard_free(Clipboard *c);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(Clipboard, clipboard_free)

/* For the backends. */
gsize clipboard_max_size(Clipboard *c);
/* Whether a list of offered types marks the content as secret. */
bool clipboard_types_sensitive(const char *const *types);
void clipboard_offer(Clipboard *c, const char *data, gsize len);
void clipboard_skipped(Clipboard *c, const char *why);
/* A backend could not start or stopped for good. */
void clipboard_backend_failed(Clipboard *c, const char *backend, const char *why);

/* Backends: NULL with `why` set when they cannot start. */
typedef struct ClipboardX11 ClipboardX11;
ClipboardX11 *clipboard_x11_start(Clipboard *c, char **why);
void clipboard_x11_free(ClipboardX11 *x);
typedef struct ClipboardWayland ClipboardWayland;
ClipboardWayland *clipboard_wayland_start(Clipboard *c, char **why);
void clipboard_wayland_free(ClipboardWayland *w);
