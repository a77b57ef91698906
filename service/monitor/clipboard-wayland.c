/* SPDX-License-Identifier: MIT */
/* The Wayland clipboard through wl-clipboard: `wl-paste --watch CMD` runs CMD on every
 * change where the compositor offers a data-control protocol. Our CMD only prints the
 * change's state (wl-paste's CLIPBOARD_STATE) and reads nothing; we then list the offered
 * types and fetch the text, bounded in size, only when no password-manager hint is among
 * them. */
#include "clipboard.h"

#include <gio/gio.h>
#include <string.h>

/* wl-paste --watch that exits this soon has failed to start (no data-control protocol). */
#define STARTUP_S 3
#define RESTARTS_MAX 5
#define FETCH_TIMEOUT_MS 3000

struct ClipboardWayland {
        Clipboard *cb;
        char *wl_paste;
        GCancellable *cancel;
        GSubprocess *watch;
        GDataInputStream *lines;
        gint64 started_us;
        bool got_line;
        guint restarts, restart_source;
        bool busy, again, fetch_timed_out;
        GSubprocess *fetch;
        guint fetch_timeout;
};

static void start_watch(ClipboardWayland *w, char **why);
static void query(ClipboardWayland *w);

static void done_query(ClipboardWayland *w) {
        w->busy = false;
        if (w->fetch_timeout) {
                g_source_remove(w->fetch_timeout);
                w->fetch_timeout = 0;
        }
        g_clear_object(&w->fetch);
        if (w->again) {
                w->again = false;
                query(w);
        }
}

static gboolean fetch_timeout_cb(gpointer data) {
        ClipboardWayland *w = data;
        w->fetch_timeout = 0;
        w->fetch_timed_out = true;
        if (w->fetch)
                g_subprocess_force_exit(w->fetch);
        return G_SOURCE_REMOVE;
}

typedef struct Fetch {
        ClipboardWayland *w;
        GByteArray *buf;
        guint8 chunk[8192];
        gsize max;
} Fetch;

static void fetch_free(Fetch *f) {
        g_byte_array_unref(f->buf);
        g_free(f);
}

static void on_text_read(GObject *src, GAsyncResult *res, gpointer data) {
        Fetch *f = data;
        g_autoptr(GError) e = NULL;
        gssize n = g_input_stream_read_finish(G_INPUT_STREAM(src), res, &e);
        ClipboardWayland *w = f->w;

        if (g_error_matches(e, G_IO_ERROR, G_IO_ERROR_CANCELLED)) {
                fetch_free(f);
                return;
        }
        if (n > 0) {
                g_byte_array_append(f->buf, f->chunk, (guint) n);
                if (f->buf->len > f->max) {
                        /* Never hold more than the cap: stop the transfer. */
                        g_subprocess_force_exit(w->fetch);
                        clipboard_skipped(w->cb, "over [clipboard] max_size");
                        fetch_free(f);
                        done_query(w);
                        return;
                }
                g_input_stream_read_async(G_INPUT_STREAM(src), f->chunk, sizeof(f->chunk),
                                          G_PRIORITY_DEFAULT, w->cancel, on_text_read, f);
                return;
        }
        if (w->fetch_timed_out)
                clipboard_skipped(w->cb, "the clipboard owner did not answer");
        else if (n == 0 && f->buf->len > 0)
                clipboard_offer(w->cb, (const char *) f->buf->data, f->buf->len);
        fetch_free(f);
        done_query(w);
}

static void fetch_text(ClipboardWayland *w, const char *type) {
        g_autoptr(GError) e = NULL;
        Fetch *f;

        w->fetch = g_subprocess_new(G_SUBPROCESS_FLAGS_STDOUT_PIPE | G_SUBPROCESS_FLAGS_STDERR_SILENCE,
                                    &e, w->wl_paste, "--no-newline", "--type", type, NULL);
        if (!w->fetch) {
                clipboard_skipped(w->cb, e->message);
                done_query(w);
                return;
        }
        f = g_new0(Fetch, 1);
        f->w = w;
        f->buf = g_byte_array_new();
        f->max = clipboard_max_size(w->cb);
        w->fetch_timeout = g_timeout_add(FETCH_TIMEOUT_MS, fetch_timeout_cb, w);
        g_input_stream_read_async(g_subprocess_get_stdout_pipe(w->fetch), f->chunk, sizeof(f->chunk),
                                  G_PRIORITY_DEFAULT, w->cancel, on_text_read, f);
}

static void on_types(GObject *src, GAsyncResult *res, gpointer data) {
        ClipboardWayland *w = data;
        g_autoptr(GError) e = NULL;
        g_autofree char *out = NULL;
        g_auto(GStrv) types = NULL;
        const char *want = NULL;

        if (!g_subprocess_communicate_utf8_finish(G_SUBPROCESS(src), res, &out, NULL, &e)) {
                if (g_error_matches(e, G_IO_ERROR, G_IO_ERROR_CANCELLED))
                        return;
                clipboard_skipped(w->cb, "the offered types are unreadable");
                done_query(w);
                return;
        }
        /* The --list-types step is over: its timer must not outlive it, or it fires during
         * the text fetch (or a later query) and kills that instead. */
        if (w->fetch_timeout) {
                g_source_remove(w->fetch_timeout);
                w->fetch_timeout = 0;
        }
        g_clear_object(&w->fetch);
        if (w->fetch_timed_out) {
                /* Killed by its timer: what it printed may be cut short. */
                clipboard_skipped(w->cb, "the clipboard owner did not answer");
                done_query(w);
                return;
        }
        types = g_strsplit(out ? out : "", "\n", -1);
        for (size_t i = 0; types[i]; i++)
                g_strstrip(types[i]);
        if (clipboard_types_sensitive((const char *const *) types)) {
                clipboard_skipped(w->cb, "a password manager marked it sensitive");
                done_query(w);
                return;
        }
        if (g_strv_contains((const char *const *) types, "text/plain;charset=utf-8"))
                want = "text/plain;charset=utf-8";
        else if (g_strv_contains((const char *const *) types, "UTF8_STRING"))
                want = "UTF8_STRING";
        if (!want) {
                g_debug("clipboard: no UTF-8 text offered");
                done_query(w);
                return;
        }
        fetch_text(w, want);
}

static void query(ClipboardWayland *w) {
        g_autoptr(GError) e = NULL;

        if (w->busy) {
                w->again = true;
                return;
        }
        w->busy = true;
        w->fetch_timed_out = false;
        w->fetch = g_subprocess_new(G_SUBPROCESS_FLAGS_STDOUT_PIPE | G_SUBPROCESS_FLAGS_STDERR_SILENCE,
                                    &e, w->wl_paste, "--list-types", NULL);
        if (!w->fetch) {
                clipboard_skipped(w->cb, e->message);
                done_query(w);
                return;
        }
        w->fetch_timeout = g_timeout_add(FETCH_TIMEOUT_MS, fetch_timeout_cb, w);
        g_subprocess_communicate_utf8_async(w->fetch, NULL, w->cancel, on_types, w);
}

static void on_line(GObject *src, GAsyncResult *res, gpointer data) {
        ClipboardWayland *w = data;
        g_autoptr(GError) e = NULL;
        g_autofree char *line = g_data_input_stream_read_line_finish_utf8(G_DATA_INPUT_STREAM(src),
                                                                          res, NULL, &e);
        if (g_error_matches(e, G_IO_ERROR, G_IO_ERROR_CANCELLED))
                return;
        if (!line)
                return;         /* End of output: the exit handler decides what follows. */
        w->got_line = true;
        g_strstrip(line);
        /* wl-paste says "sensitive" itself when it sees the password-manager hint. */
        if (strcmp(line, "sensitive") == 0)
                clipboard_skipped(w->cb, "a password manager marked it sensitive");
        else if (strcmp(line, "nil") != 0 && strcmp(line, "clear") != 0)
                query(w);
        g_data_input_stream_read_line_async(w->lines, G_PRIORITY_DEFAULT, w->cancel, on_line, w);
}

static gboolean restart_cb(gpointer data) {
        ClipboardWayland *w = data;
        g_autofree char *why = NULL;
        w->restart_source = 0;
        start_watch(w, &why);
        if (why)
                clipboard_backend_failed(w->cb, "wayland", why);
        return G_SOURCE_REMOVE;
}

static void on_watch_exit(GObject *src, GAsyncResult *res, gpointer data) {
        ClipboardWayland *w = data;
        g_autoptr(GError) e = NULL;
        g_autofree char *err_text = NULL;
        GInputStream *err_pipe;
        char buf[512];
        gssize n;

        if (!g_subprocess_wait_finish(G_SUBPROCESS(src), res, &e) &&
            g_error_matches(e, G_IO_ERROR, G_IO_ERROR_CANCELLED))
                return;
        /* What wl-paste said on the way out: the reason a person can act on. */
        err_pipe = g_subprocess_get_stderr_pipe(G_SUBPROCESS(src));
        n = err_pipe ? g_input_stream_read(err_pipe, buf, sizeof(buf) - 1, NULL, NULL) : -1;
        if (n > 0) {
                buf[n] = 0;
                err_text = g_strdup(g_strstrip(buf));
                char *nl = strchr(err_text, '\n');
                if (nl)
                        *nl = 0;
        }
        if (!w->got_line && g_get_monotonic_time() - w->started_us < STARTUP_S * G_USEC_PER_SEC) {
                const char *said = err_text && *err_text ? err_text : "no data-control protocol";
                g_autofree char *why = g_strdup_printf("wl-paste --watch failed: %s", said);
                clipboard_backend_failed(w->cb, "wayland", why);
                return;
        }
        if (++w->restarts > RESTARTS_MAX) {
                clipboard_backend_failed(w->cb, "wayland", "wl-paste --watch keeps exiting");
                return;
        }
        g_message("clipboard: wl-paste --watch exited (%s); restarting it",
                  err_text && *err_text ? err_text : "no message");
        w->restart_source = g_timeout_add_seconds(5, restart_cb, w);
}

static void start_watch(ClipboardWayland *w, char **why) {
        g_autoptr(GError) e = NULL;

        g_clear_object(&w->lines);
        g_clear_object(&w->watch);
        w->watch = g_subprocess_new(G_SUBPROCESS_FLAGS_STDOUT_PIPE | G_SUBPROCESS_FLAGS_STDERR_PIPE,
                                    &e, w->wl_paste, "--watch", "sh", "-c",
                                    "printf '%s\\n' \"${CLIPBOARD_STATE:-data}\"", NULL);
        if (!w->watch) {
                *why = g_strdup_printf("cannot run wl-paste: %s", e->message);
                return;
        }
        w->started_us = g_get_monotonic_time();
        w->got_line = false;
        w->lines = g_data_input_stream_new(g_subprocess_get_stdout_pipe(w->watch));
        g_data_input_stream_read_line_async(w->lines, G_PRIORITY_DEFAULT, w->cancel, on_line, w);
        g_subprocess_wait_async(w->watch, w->cancel, on_watch_exit, w);
}

ClipboardWayland *clipboard_wayland_start(Clipboard *c, char **why) {
        g_autofree char *prog = g_find_program_in_path("wl-paste");
        ClipboardWayland *w;

        if (!prog) {
                *why = g_strdup("wl-paste is not installed (package wl-clipboard)");
                return NULL;
        }
        w = g_new0(ClipboardWayland, 1);
        w->cb = c;
        w->wl_paste = g_steal_pointer(&prog);
        w->cancel = g_cancellable_new();
        start_watch(w, why);
        if (*why) {
                clipboard_wayland_free(w);
                return NULL;
        }
        g_message("clipboard: watching the Wayland clipboard through %s --watch", w->wl_paste);
        return w;
}

void clipboard_wayland_free(ClipboardWayland *w) {
        if (!w)
                return;
        g_cancellable_cancel(w->cancel);
        if (w->restart_source)
                g_source_remove(w->restart_source);
        if (w->fetch_timeout)
                g_source_remove(w->fetch_timeout);
        if (w->watch)
                g_subprocess_force_exit(w->watch);
        if (w->fetch)
                g_subprocess_force_exit(w->fetch);
        g_clear_object(&w->lines);
        g_clear_object(&w->watch);
        g_clear_object(&w->fetch);
        g_object_unref(w->cancel);
        g_free(w->wl_paste);
        g_free(w);
}
