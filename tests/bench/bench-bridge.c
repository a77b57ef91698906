/* SPDX-License-Identifier: MIT */
/* What agentxpu serve adds: the same greedy request, one user message, streamed from the
 * engine over D-Bus (Reactive, Token signals) and through the bridge (POST
 * /v1/chat/completions with "stream": true on its Unix socket), alternately, RUNS times each.
 * Time to first token and time per later token are taken by this one client in both cases,
 * from the call to the first piece of text and from there to the last; the table gives their
 * medians and the bridge's difference. Not a test: tools/bench-bridge runs it on a private bus.
 *
 *   bench-bridge --address BUS --socket PATH --model NAME [-n TOKENS] [--runs N] [PROMPT] */
#include <gio/gio.h>
#include <gio/gunixsocketaddress.h>
#include <json-glib/json-glib.h>
#include <libsoup/soup.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct Sample {
        double ttft, per_token; /* seconds */
        int tokens;
} Sample;

static GMainLoop *loop;

/* ---- D-Bus ------------------------------------------------------------------------------ */

typedef struct BusRun {
        gint64 t0, t_first, t_last;
        int pieces;
        char *path;
        bool done;
} BusRun;

static void on_signal(GDBusConnection *c, const char *sender, const char *path, const char *iface,
                      const char *member, GVariant *params, gpointer data) {
        BusRun *r = data;
        gint64 now = g_get_monotonic_time();
        if (r->path && strcmp(path, r->path) != 0)
                return;
        if (strcmp(member, "Token") == 0) {
                if (r->pieces++ == 0)
                        r->t_first = now;
                r->t_last = now;
        } else if (strcmp(member, "Finished") == 0) {
                r->done = true;
                g_main_loop_quit(loop);
        }
}

static Sample bus_run(GDBusConnection *conn, const char *prompt, guint n) {
        BusRun r = {};
        g_autoptr(GError) e = NULL;
        GVariantBuilder o;
        guint sub = g_dbus_connection_signal_subscribe(conn, NULL, "org.agentxpu.Engine.Request", NULL,
                                                       NULL, NULL, G_DBUS_SIGNAL_FLAGS_NONE, on_signal,
                                                       &r, NULL);

        g_variant_builder_init(&o, G_VARIANT_TYPE_VARDICT);
        g_variant_builder_add(&o, "{sv}", "max_tokens", g_variant_new_uint32(n));
        g_variant_builder_add(&o, "{sv}", "temperature", g_variant_new_double(0));
        r.t0 = g_get_monotonic_time();
        g_autoptr(GVariant) v = g_dbus_connection_call_sync(
                conn, "org.agentxpu.Engine", "/org/agentxpu/Engine", "org.agentxpu.Engine", "Reactive",
                g_variant_new("(sa{sv})", prompt, &o), G_VARIANT_TYPE("(o)"), G_DBUS_CALL_FLAGS_NONE, -1,
                NULL, &e);
        if (!v) {
                fprintf(stderr, "bench-bridge: Reactive: %s\n", e->message);
                exit(1);
        }
        g_variant_get(v, "(o)", &r.path);
        while (!r.done)
                g_main_loop_run(loop);
        g_dbus_connection_signal_unsubscribe(conn, sub);
        g_free(r.path);
        return (Sample) { (r.t_first - r.t0) / 1e6,
                          r.pieces > 1 ? (r.t_last - r.t_first) / 1e6 / (r.pieces - 1) : 0, r.pieces };
}

/* ---- HTTP -------------------------------------------------------------------------------- */

/* Reads the server-sent events as they come; a piece of text is an event whose delta has
 * non-empty content. */
static Sample http_run(SoupSession *s, const char *model, const char *prompt, guint n) {
        g_autoptr(GError) e = NULL;
        g_autoptr(JsonBuilder) jb = json_builder_new();
        g_autoptr(JsonGenerator) gen = json_generator_new();
        g_autoptr(SoupMessage) msg = soup_message_new("POST", "http://localhost/v1/chat/completions");
        g_autoptr(GString) buf = g_string_new(NULL);
        g_autoptr(GInputStream) in = NULL;
        gint64 t0, t_first = 0, t_last = 0;
        int pieces = 0;
        char chunk[4096];
        gssize got;
        gsize len;

        json_builder_begin_object(jb);
        json_builder_set_member_name(jb, "model");
        json_builder_add_string_value(jb, model);
        json_builder_set_member_name(jb, "max_tokens");
        json_builder_add_int_value(jb, n);
        json_builder_set_member_name(jb, "temperature");
        json_builder_add_int_value(jb, 0);
        json_builder_set_member_name(jb, "stream");
        json_builder_add_boolean_value(jb, TRUE);
        json_builder_set_member_name(jb, "messages");
        json_builder_begin_array(jb);
        json_builder_begin_object(jb);
        json_builder_set_member_name(jb, "role");
        json_builder_add_string_value(jb, "user");
        json_builder_set_member_name(jb, "content");
        json_builder_add_string_value(jb, prompt);
        json_builder_end_object(jb);
        json_builder_end_array(jb);
        json_builder_end_object(jb);
        g_autoptr(JsonNode) root = json_builder_get_root(jb);
        json_generator_set_root(gen, root);
        char *body = json_generator_to_data(gen, &len);
        g_autoptr(GBytes) bytes = g_bytes_new_take(body, len);
        soup_message_set_request_body_from_bytes(msg, "application/json", bytes);

        t0 = g_get_monotonic_time();
        in = soup_session_send(s, msg, NULL, &e);
        if (!in || soup_message_get_status(msg) != 200) {
                fprintf(stderr, "bench-bridge: POST /v1/chat/completions: %s\n",
                        e ? e->message : soup_message_get_reason_phrase(msg));
                exit(1);
        }
        while ((got = g_input_stream_read(in, chunk, sizeof(chunk), NULL, &e)) > 0) {
                gint64 now = g_get_monotonic_time();
                char *end;
                g_string_append_len(buf, chunk, got);
                while ((end = strstr(buf->str, "\n\n"))) {
                        *end = 0;
                        /* the role's chunk has "content":"", the last has none */
                        if (strstr(buf->str, "\"content\":\"") && !strstr(buf->str, "\"content\":\"\"")) {
                                if (pieces++ == 0)
                                        t_first = now;
                                t_last = now;
                        }
                        g_string_erase(buf, 0, end + 2 - buf->str);
                }
        }
        if (got < 0) {
                fprintf(stderr, "bench-bridge: reading the stream: %s\n", e->message);
                exit(1);
        }
        return (Sample) { (t_first - t0) / 1e6, pieces > 1 ? (t_last - t_first) / 1e6 / (pieces - 1) : 0,
                          pieces };
}

/* ---- the table ----------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b) {
        double x = *(const double *) a, y = *(const double *) b;
        return x < y ? -1 : x > y;
}

static double median(Sample *s, int n, bool ttft) {
        double v[n];
        for (int i = 0; i < n; i++)
                v[i] = ttft ? s[i].ttft : s[i].per_token;
        qsort(v, n, sizeof(double), cmp_double);
        return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv) {
        g_autofree char *address = NULL, *socket_path = NULL, *model = NULL;
        gint tokens = 32, runs = 10;
        g_autoptr(GError) e = NULL;
        GOptionEntry entries[] = {
                { "address", 0, 0, G_OPTION_ARG_STRING, &address, "The engine's bus", "ADDRESS" },
                { "socket", 0, 0, G_OPTION_ARG_FILENAME, &socket_path, "The bridge's Unix socket", "PATH" },
                { "model", 0, 0, G_OPTION_ARG_STRING, &model, "The model's name", "NAME" },
                { "tokens", 'n', 0, G_OPTION_ARG_INT, &tokens, "Tokens per answer (32)", "N" },
                { "runs", 0, 0, G_OPTION_ARG_INT, &runs, "Requests each way (10)", "N" },
                {},
        };
        g_autoptr(GOptionContext) ctx = g_option_context_new("[PROMPT]");
        g_option_context_add_main_entries(ctx, entries, NULL);
        if (!g_option_context_parse(ctx, &argc, &argv, &e) || !address || !socket_path || !model ||
            tokens < 2 || runs < 1) {
                fprintf(stderr, "bench-bridge: %s\n",
                        e ? e->message : "--address, --socket and --model are needed; -n 2 or more");
                return 2;
        }
        const char *prompt = argc > 1 ? argv[1] : "Write a haiku about the sea";

        loop = g_main_loop_new(NULL, FALSE);
        GDBusConnection *conn = g_dbus_connection_new_for_address_sync(
                address, G_DBUS_CONNECTION_FLAGS_AUTHENTICATION_CLIENT |
                                 G_DBUS_CONNECTION_FLAGS_MESSAGE_BUS_CONNECTION,
                NULL, NULL, &e);
        if (!conn) {
                fprintf(stderr, "bench-bridge: %s: %s\n", address, e->message);
                return 1;
        }
        g_autoptr(GSocketAddress) sa = g_unix_socket_address_new(socket_path);
        SoupSession *s = soup_session_new_with_options("remote-connectable", sa, NULL);
        Sample *bus = g_new0(Sample, runs), *http = g_new0(Sample, runs);

        /* one of each first, not counted: the model's pages and the bridge's connection warm */
        bus_run(conn, prompt, tokens);
        http_run(s, model, prompt, tokens);
        for (int i = 0; i < runs; i++) {
                bus[i] = bus_run(conn, prompt, tokens);
                http[i] = http_run(s, model, prompt, tokens);
                if (bus[i].tokens != http[i].tokens)
                        fprintf(stderr, "bench-bridge: run %d: %d pieces over D-Bus, %d over HTTP\n", i,
                                bus[i].tokens, http[i].tokens);
        }
        double bt = median(bus, runs, true), ht = median(http, runs, true);
        double bp = median(bus, runs, false), hp = median(http, runs, false);
        printf("%d runs each way, %d tokens per answer, medians:\n", runs, tokens);
        printf("%-34s %12s %14s\n", "", "TTFT ms", "per token ms");
        printf("%-34s %12.2f %14.3f\n", "D-Bus (Reactive, Token signals)", bt * 1e3, bp * 1e3);
        printf("%-34s %12.2f %14.3f\n", "HTTP (agentxpu serve, SSE)", ht * 1e3, hp * 1e3);
        printf("%-34s %12.2f %14.3f\n", "what the bridge adds", (ht - bt) * 1e3, (hp - bp) * 1e3);
        g_free(bus);
        g_free(http);
        g_object_unref(s);
        g_object_unref(conn);
        return 0;
}
