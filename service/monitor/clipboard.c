/* SPDX-License-Identifier: MIT */
#include "clipboard.h"

#include <string.h>

#include "prompt.h"

#define RECENT_MAX 16

struct Clipboard {
        const MonitorConfig *cfg;
        Dispatcher *dispatcher;
        ClipboardX11 *x11;
        ClipboardWayland *wayland;
        bool tried_x11;
        GQueue recent;          /* digests of recent copies, newest first */
};

gsize clipboard_max_size(Clipboard *c) {
        return (gsize) c->cfg->clipboard_max_size;
}

bool clipboard_types_sensitive(const char *const *types) {
        for (size_t i = 0; types && types[i]; i++)
                if (g_ascii_strcasecmp(types[i], CLIPBOARD_PASSWORD_HINT) == 0)
                        return true;
        return false;
}

void clipboard_skipped(Clipboard *c, const char *why) {
        /* Never the content, only why it was left alone. */
        g_message("clipboard: copy skipped: %s", why);
}

void clipboard_offer(Clipboard *c, const char *data, gsize len) {
        g_autofree char *digest = NULL, *clipped = NULL, *stripped = NULL;

        if (len > c->cfg->clipboard_max_size) {
                clipboard_skipped(c, "over [clipboard] max_size");
                return;
        }
        if (!prompt_is_text(data, len, false)) {
                clipboard_skipped(c, "not text");
                return;
        }
        stripped = g_strstrip(g_strndup(data, len));
        if (stripped[0] == 0)
                return;
        digest = g_compute_checksum_for_string(G_CHECKSUM_SHA256, stripped, -1);
        for (GList *l = c->recent.head; l; l = l->next)
                if (strcmp(l->data, digest) == 0) {
                        clipboard_skipped(c, "a repeat of a recent copy");
                        return;
                }
        g_queue_push_head(&c->recent, g_strdup(digest));
        while (g_queue_get_length(&c->recent) > RECENT_MAX)
                g_free(g_queue_pop_tail(&c->recent));

        clipped = prompt_clip(stripped, strlen(stripped), c->cfg->prompt_max_bytes);
        const char *vars[] = { "text", clipped, NULL };
        Event *ev = event_new(EVENT_CLIPBOARD, NULL, prompt_render(c->cfg->clipboard_template, vars));
        dispatcher_add(c->dispatcher, ev, NULL, false);
        g_message("clipboard: %zu bytes of text copied: event %" G_GUINT64_FORMAT, len, ev->id);
}

static void start_x11(Clipboard *c, const char *wayland_why) {
        g_autofree char *why = NULL;

        c->tried_x11 = true;
        if (g_getenv("DISPLAY") && *g_getenv("DISPLAY")) {
                c->x11 = clipboard_x11_start(c, &why);
                if (c->x11) {
                        g_message("clipboard: watching the X11 clipboard on %s%s", g_getenv("DISPLAY"),
                                  wayland_why ? " (XWayland)" : "");
                        return;
                }
        } else
                why = g_strdup("no X11 display (DISPLAY is unset)");
        if (wayland_why)
                g_warning("clipboard: the compositor offers neither a data-control protocol (%s) "
                          "nor X11 selections (%s); clipboard suggestions are off",
                          wayland_why, why);
        else
                g_warning("clipboard: %s; clipboard suggestions are off", why);
}

void clipboard_backend_failed(Clipboard *c, const char *backend, const char *why) {
        if (strcmp(backend, "wayland") == 0 && !c->tried_x11) {
                g_clear_pointer(&c->wayland, clipboard_wayland_free);
                start_x11(c, why);
                return;
        }
        g_warning("clipboard: the %s clipboard stopped (%s); clipboard suggestions are off",
                  backend, why);
}

Clipboard *clipboard_new(const MonitorConfig *cfg, Dispatcher *dispatcher) {
        Clipboard *c = g_new0(Clipboard, 1);
        const char *wl = g_getenv("WAYLAND_DISPLAY");
        g_autofree char *why = NULL;

        c->cfg = cfg;
        c->dispatcher = dispatcher;
        g_queue_init(&c->recent);
        if (!cfg->clipboard) {
                g_message("clipboard: off ([clipboard] enabled=false)");
                return c;
        }
        /* On Wayland the data-control protocol sees every client's copies; XWayland would
         * see only what the compositor passes on. X11 is the fallback. */
        if (wl && *wl) {
                c->wayland = clipboard_wayland_start(c, &why);
                if (c->wayland)
                        return c;
                start_x11(c, why);
                return c;
        }
        start_x11(c, NULL);
        return c;
}

void clipboard_free(Clipboard *c) {
        if (!c)
                return;
        clipboard_x11_free(c->x11);
        clipboard_wayland_free(c->wayland);
        g_queue_clear_full(&c->recent, g_free);
        g_free(c);
}

#ifndef HAVE_X11
ClipboardX11 *clipboard_x11_start(Clipboard *c, char **why) {
        *why = g_strdup("this build has no X11 support");
        return NULL;
}

void clipboard_x11_free(ClipboardX11 *x) {
}
#endif
