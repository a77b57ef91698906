/* SPDX-License-Identifier: MIT */
/* The X11 clipboard: XFixes tells us when CLIPBOARD changes owner; we ask the new owner for
 * its TARGETS, and only when they hold no password-manager hint and a UTF-8 text type do we
 * ask for the text, after checking its size. */
#include "clipboard.h"

#include <X11/Xatom.h>
#include <X11/Xlib.h>
#include <X11/extensions/Xfixes.h>
#include <string.h>

/* An owner that does not answer within this time is given up on. */
#define CONVERT_TIMEOUT_MS 3000

typedef enum XState { X_IDLE, X_WANT_TARGETS, X_WANT_TEXT } XState;

typedef struct XSource {
        GSource base;
        ClipboardX11 *x;
        GPollFD pfd;
} XSource;

struct ClipboardX11 {
        Clipboard *cb;
        Display *dpy;
        Window win;
        int xfixes_event;
        Atom clipboard, targets, utf8, text_utf8, prop, hint, incr;
        XSource *source;
        XState state;
        bool again;             /* the owner changed while we were busy */
        guint timeout;
        bool dead;
};

/* Xlib reports a dead connection through process-global handlers; there is one display. */
static ClipboardX11 *the_x11;

static int on_x_error(Display *dpy, XErrorEvent *e) {
        char text[128];
        XGetErrorText(dpy, e->error_code, text, sizeof(text));
        g_debug("clipboard: X11 error: %s", text);
        return 0;
}

static int on_x_io_error(Display *dpy) {
        return 0;
}

static void on_x_io_exit(Display *dpy, void *data) {
        /* Returning here instead of exiting: the display is unusable from now on. */
        if (the_x11)
                the_x11->dead = true;
}

static void request(ClipboardX11 *x, Atom target, Time when, XState state);

static gboolean timeout_cb(gpointer data) {
        ClipboardX11 *x = data;
        x->timeout = 0;
        clipboard_skipped(x->cb, "the clipboard owner did not answer");
        x->state = X_IDLE;
        if (x->again) {
                x->again = false;
                request(x, x->targets, CurrentTime, X_WANT_TARGETS);
        }
        return G_SOURCE_REMOVE;
}

static void request(ClipboardX11 *x, Atom target, Time when, XState state) {
        XConvertSelection(x->dpy, x->clipboard, target, x->prop, x->win, when);
        XFlush(x->dpy);
        x->state = state;
        if (x->timeout)
                g_source_remove(x->timeout);
        x->timeout = g_timeout_add(CONVERT_TIMEOUT_MS, timeout_cb, x);
}

static void idle(ClipboardX11 *x) {
        if (x->timeout) {
                g_source_remove(x->timeout);
                x->timeout = 0;
        }
        x->state = X_IDLE;
        if (x->again) {
                x->again = false;
                request(x, x->targets, CurrentTime, X_WANT_TARGETS);
        }
}

static void got_targets(ClipboardX11 *x) {
        Atom type = None, *atoms = NULL, want = None;
        int format = 0;
        unsigned long n = 0, after = 0;
        g_autoptr(GPtrArray) names = g_ptr_array_new_with_free_func(g_free);

        /* A list longer than we read may hold the password-manager hint further on: without
         * the whole list, a secret cannot be ruled out. */
        if (XGetWindowProperty(x->dpy, x->win, x->prop, 0, 1024, True, XA_ATOM, &type, &format, &n,
                               &after, (unsigned char **) &atoms) != Success ||
            type != XA_ATOM || format != 32 || after > 0) {
                if (atoms)
                        XFree(atoms);
                XDeleteProperty(x->dpy, x->win, x->prop);
                clipboard_skipped(x->cb, "the owner's TARGETS are unreadable");
                idle(x);
                return;
        }
        for (unsigned long i = 0; i < n; i++) {
                char *name = XGetAtomName(x->dpy, atoms[i]);
                if (name) {
                        g_ptr_array_add(names, g_strdup(name));
                        XFree(name);
                }
                if (atoms[i] == x->utf8 || (atoms[i] == x->text_utf8 && want == None))
                        want = atoms[i];
        }
        XFree(atoms);
        g_ptr_array_add(names, NULL);
        if (clipboard_types_sensitive((const char *const *) names->pdata)) {
                clipboard_skipped(x->cb, "a password manager marked it sensitive");
                idle(x);
                return;
        }
        if (want == None) {
                g_debug("clipboard: no UTF-8 text offered");
                idle(x);
                return;
        }
        request(x, want, CurrentTime, X_WANT_TEXT);
}

static void got_text(ClipboardX11 *x) {
        Atom type = None;
        int format = 0;
        unsigned long n = 0, after = 0;
        unsigned char *data = NULL;
        gsize max = clipboard_max_size(x->cb);

        /* Size first: zero length returns the type and the total in `after`. */
        if (XGetWindowProperty(x->dpy, x->win, x->prop, 0, 0, False, AnyPropertyType, &type, &format,
                               &n, &after, &data) != Success) {
                idle(x);
                return;
        }
        if (data)
                XFree(data);
        data = NULL;
        /* INCR: the owner sends large content in pieces; large is over any sane cap. */
        if (type == x->incr || after > max) {
                XDeleteProperty(x->dpy, x->win, x->prop);
                clipboard_skipped(x->cb, "over [clipboard] max_size");
                idle(x);
                return;
        }
        if (XGetWindowProperty(x->dpy, x->win, x->prop, 0, (long) (after + 3) / 4, True,
                               AnyPropertyType, &type, &format, &n, &after, &data) == Success &&
            format == 8 && data)
                clipboard_offer(x->cb, (const char *) data, n);
        if (data)
                XFree(data);
        idle(x);
}

static void handle_event(ClipboardX11 *x, XEvent *ev) {
        if (ev->type == x->xfixes_event + XFixesSelectionNotify) {
                XFixesSelectionNotifyEvent *se = (XFixesSelectionNotifyEvent *) ev;
                if (se->selection != x->clipboard || se->owner == None || se->owner == x->win)
                        return;
                if (x->state != X_IDLE) {
                        x->again = true;
                        return;
                }
                request(x, x->targets, se->selection_timestamp, X_WANT_TARGETS);
                return;
        }
        if (ev->type == SelectionNotify && ev->xselection.requestor == x->win &&
            ev->xselection.selection == x->clipboard) {
                if (ev->xselection.property == None) {
                        /* The owner refused; without TARGETS we cannot rule out a secret. */
                        idle(x);
                        return;
                }
                if (x->state == X_WANT_TARGETS)
                        got_targets(x);
                else if (x->state == X_WANT_TEXT)
                        got_text(x);
        }
}

static gboolean x_prepare(GSource *src, gint *timeout) {
        XSource *s = (XSource *) src;
        *timeout = -1;
        return !s->x->dead && XPending(s->x->dpy) > 0;
}

static gboolean x_check(GSource *src) {
        XSource *s = (XSource *) src;
        return s->x->dead || (s->pfd.revents & (G_IO_IN | G_IO_HUP | G_IO_ERR)) ||
               XPending(s->x->dpy) > 0;
}

static gboolean x_dispatch(GSource *src, GSourceFunc cb, gpointer data) {
        ClipboardX11 *x = ((XSource *) src)->x;

        while (!x->dead && XPending(x->dpy) > 0) {
                XEvent ev;
                XNextEvent(x->dpy, &ev);
                handle_event(x, &ev);
        }
        if (x->dead) {
                clipboard_backend_failed(x->cb, "X11", "the X11 display went away");
                x->source = NULL;
                return G_SOURCE_REMOVE;
        }
        return G_SOURCE_CONTINUE;
}

static GSourceFuncs x_funcs = {
        .prepare = x_prepare,
        .check = x_check,
        .dispatch = x_dispatch,
};

ClipboardX11 *clipboard_x11_start(Clipboard *c, char **why) {
        ClipboardX11 *x;
        Display *dpy;
        int event_base, error_base;

        if (the_x11) {
                *why = g_strdup("the X11 clipboard is already watched");
                return NULL;
        }
        dpy = XOpenDisplay(NULL);
        if (!dpy) {
                *why = g_strdup_printf("cannot open the X11 display %s", g_getenv("DISPLAY"));
                return NULL;
        }
        if (!XFixesQueryExtension(dpy, &event_base, &error_base)) {
                XCloseDisplay(dpy);
                *why = g_strdup("the X server lacks the XFixes extension");
                return NULL;
        }
        XSetErrorHandler(on_x_error);
        XSetIOErrorHandler(on_x_io_error);
        XSetIOErrorExitHandler(dpy, on_x_io_exit, NULL);

        x = g_new0(ClipboardX11, 1);
        x->cb = c;
        x->dpy = dpy;
        x->xfixes_event = event_base;
        x->clipboard = XInternAtom(dpy, "CLIPBOARD", False);
        x->targets = XInternAtom(dpy, "TARGETS", False);
        x->utf8 = XInternAtom(dpy, "UTF8_STRING", False);
        x->text_utf8 = XInternAtom(dpy, "text/plain;charset=utf-8", False);
        x->prop = XInternAtom(dpy, "AGENTXPU_CLIPBOARD", False);
        x->incr = XInternAtom(dpy, "INCR", False);
        x->win = XCreateSimpleWindow(dpy, DefaultRootWindow(dpy), -10, -10, 1, 1, 0, 0, 0);
        XFixesSelectSelectionInput(dpy, DefaultRootWindow(dpy), x->clipboard,
                                   XFixesSetSelectionOwnerNotifyMask);
        XFlush(dpy);

        x->source = (XSource *) g_source_new(&x_funcs, sizeof(XSource));
        x->source->x = x;
        x->source->pfd.fd = ConnectionNumber(dpy);
        x->source->pfd.events = G_IO_IN | G_IO_HUP | G_IO_ERR;
        g_source_add_poll(&x->source->base, &x->source->pfd);
        g_source_attach(&x->source->base, NULL);
        g_source_unref(&x->source->base);
        the_x11 = x;
        return x;
}

void clipboard_x11_free(ClipboardX11 *x) {
        if (!x)
                return;
        if (x->source)
                g_source_destroy(&x->source->base);
        if (x->timeout)
                g_source_remove(x->timeout);
        /* A dead display cannot be closed without tripping the error handlers again. */
        if (!x->dead)
                XCloseDisplay(x->dpy);
        the_x11 = NULL;
        g_free(x);
}
