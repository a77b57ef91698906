/* SPDX-License-Identifier: MIT */
/* TEST TOOL: a password manager's clipboard owner. Takes CLIPBOARD and offers TARGETS,
 * UTF8_STRING (the secret) and x-kde-passwordManagerHint ("secret"); logs each target a
 * client asks for, so a test can tell that the secret was never fetched.
 *   x11-secret-owner SECRET LOGFILE [PAD]   (prints "owned" once it owns CLIPBOARD; exits
 *                                           when another client takes it)
 * PAD: that many more targets (made-up formats) before the hint, so that it comes late in a
 * long list. */
#include <X11/Xatom.h>
#include <X11/Xlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
        Display *dpy;
        Window win;
        Atom clipboard, targets, utf8, hint, timestamp;
        FILE *log;
        Atom *list;
        int pad, n = 0;

        if (argc != 3 && argc != 4) {
                fprintf(stderr, "usage: x11-secret-owner SECRET LOGFILE [PAD]\n");
                return 2;
        }
        pad = argc == 4 ? atoi(argv[3]) : 0;
        dpy = XOpenDisplay(NULL);
        log = fopen(argv[2], "a");
        if (!dpy || !log) {
                fprintf(stderr, "x11-secret-owner: no display or log\n");
                return 1;
        }
        clipboard = XInternAtom(dpy, "CLIPBOARD", False);
        targets = XInternAtom(dpy, "TARGETS", False);
        utf8 = XInternAtom(dpy, "UTF8_STRING", False);
        hint = XInternAtom(dpy, "x-kde-passwordManagerHint", False);
        timestamp = XInternAtom(dpy, "TIMESTAMP", False);
        list = calloc((size_t) pad + 4, sizeof(Atom));
        if (!list)
                return 1;
        list[n++] = targets;
        list[n++] = timestamp;
        list[n++] = utf8;
        for (int i = 0; i < pad; i++) {
                char name[64];
                snprintf(name, sizeof(name), "application/x-made-up-format-%d", i);
                list[n++] = XInternAtom(dpy, name, False);
        }
        list[n++] = hint;
        win = XCreateSimpleWindow(dpy, DefaultRootWindow(dpy), 0, 0, 1, 1, 0, 0, 0);
        XSetSelectionOwner(dpy, clipboard, win, CurrentTime);
        if (XGetSelectionOwner(dpy, clipboard) != win) {
                fprintf(stderr, "x11-secret-owner: could not take CLIPBOARD\n");
                return 1;
        }
        printf("owned\n");
        fflush(stdout);

        for (;;) {
                XEvent ev, reply;
                XNextEvent(dpy, &ev);
                if (ev.type == SelectionClear)
                        return 0;
                if (ev.type != SelectionRequest)
                        continue;
                XSelectionRequestEvent *rq = &ev.xselectionrequest;
                char *name = XGetAtomName(dpy, rq->target);
                fprintf(log, "%s\n", name ? name : "?");
                fflush(log);
                if (name)
                        XFree(name);

                memset(&reply, 0, sizeof(reply));
                reply.xselection.type = SelectionNotify;
                reply.xselection.requestor = rq->requestor;
                reply.xselection.selection = rq->selection;
                reply.xselection.target = rq->target;
                reply.xselection.time = rq->time;
                reply.xselection.property = rq->property ? rq->property : rq->target;
                if (rq->target == targets) {
                        XChangeProperty(dpy, rq->requestor, reply.xselection.property, XA_ATOM, 32,
                                        PropModeReplace, (unsigned char *) list, n);
                } else if (rq->target == utf8) {
                        XChangeProperty(dpy, rq->requestor, reply.xselection.property, utf8, 8,
                                        PropModeReplace, (unsigned char *) argv[1],
                                        (int) strlen(argv[1]));
                } else if (rq->target == hint) {
                        XChangeProperty(dpy, rq->requestor, reply.xselection.property, hint, 8,
                                        PropModeReplace, (unsigned char *) "secret", 6);
                } else
                        reply.xselection.property = None;
                XSendEvent(dpy, rq->requestor, False, 0, &reply);
                XFlush(dpy);
        }
}
