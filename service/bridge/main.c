/* SPDX-License-Identifier: MIT */
/* agentxpu-http (`agentxpu serve`): the per-user HTTP bridge to the engine. */
#include <errno.h>
#include <fcntl.h>
#include <glib-unix.h>
#include <gio/gunixsocketaddress.h>
#include <glib/gstdio.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "bridge.h"
#include "config.h"

#define TOKEN_BYTES 32
#define SD_LISTEN_FDS_START 3

static char *opt_address, *opt_socket, *opt_listen, *opt_token_file;
static gboolean opt_print_token, opt_no_socket, opt_version;
static gint64 opt_max_body = 8 << 20;
static gint opt_flows = 2;

static const GOptionEntry entries[] = {
        { "address", 0, 0, G_OPTION_ARG_STRING, &opt_address,
          "The bus of the engine (default: the system bus)", "ADDRESS" },
        { "socket", 0, 0, G_OPTION_ARG_FILENAME, &opt_socket,
          "The Unix socket to listen on (default: $XDG_RUNTIME_DIR/agentxpu/http.sock)", "PATH" },
        { "no-socket", 0, 0, G_OPTION_ARG_NONE, &opt_no_socket,
          "Listen on no Unix socket (only on --listen)", NULL },
        { "listen", 0, 0, G_OPTION_ARG_STRING, &opt_listen,
          "Listen on loopback TCP too, e.g. 127.0.0.1:11434; requests there need the token",
          "HOST:PORT" },
        { "print-token", 0, 0, G_OPTION_ARG_NONE, &opt_print_token,
          "Print the bearer token of TCP requests (made on first use) and exit", NULL },
        { "token-file", 0, 0, G_OPTION_ARG_FILENAME, &opt_token_file,
          "Where the token is kept (default: $XDG_CONFIG_HOME/agentxpu/token)", "PATH" },
        { "max-body", 0, 0, G_OPTION_ARG_INT64, &opt_max_body,
          "Largest request body in bytes; larger ones get 413 (default: 8 MiB)", "BYTES" },
        { "flows", 0, 0, G_OPTION_ARG_INT, &opt_flows,
          "Conversations kept in the engine's KV cache for their next turn, at most (each holds "
          "one of the engine's flows, FlowsPerUser= of them per user; 0: none; default: 2)", "N" },
        { "version", 0, 0, G_OPTION_ARG_NONE, &opt_version, "Print the version and exit", NULL },
        {},
};

static char *token_path(void) {
        if (opt_token_file)
                return g_strdup(opt_token_file);
        return g_build_filename(g_get_user_config_dir(), "agentxpu", "token", NULL);
}

/* The token in `path`, made (random, mode 0600) when there is none. */
static char *token_load(const char *path, GError **error) {
        g_autofree char *dir = g_path_get_dirname(path);
        g_autofree char *text = NULL;
        struct stat st;
        int fd;

        if (g_mkdir_with_parents(dir, 0700) < 0) {
                g_set_error(error, G_FILE_ERROR, g_file_error_from_errno(errno),
                            "Cannot make %s: %s", dir, g_strerror(errno));
                return NULL;
        }
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0) {
                guint8 raw[TOKEN_BYTES];
                g_autoptr(GString) hex = g_string_new(NULL);
                if (getrandom(raw, sizeof(raw), 0) != sizeof(raw)) {
                        close(fd);
                        unlink(path);
                        g_set_error(error, G_FILE_ERROR, G_FILE_ERROR_FAILED, "getrandom failed");
                        return NULL;
                }
                for (size_t i = 0; i < sizeof(raw); i++)
                        g_string_append_printf(hex, "%02x", raw[i]);
                g_string_append_c(hex, '\n');
                if (write(fd, hex->str, hex->len) != (ssize_t) hex->len || close(fd) < 0) {
                        unlink(path);
                        g_set_error(error, G_FILE_ERROR, G_FILE_ERROR_FAILED, "Cannot write %s: %s",
                                    path, g_strerror(errno));
                        return NULL;
                }
                g_message("Made a new token in %s", path);
        } else if (errno != EEXIST) {
                g_set_error(error, G_FILE_ERROR, g_file_error_from_errno(errno), "Cannot make %s: %s",
                            path, g_strerror(errno));
                return NULL;
        }
        if (lstat(path, &st) < 0 || !S_ISREG(st.st_mode)) {
                g_set_error(error, G_FILE_ERROR, G_FILE_ERROR_FAILED, "%s is not a regular file", path);
                return NULL;
        }
        if (st.st_uid != getuid() || (st.st_mode & 077)) {
                g_set_error(error, G_FILE_ERROR, G_FILE_ERROR_PERM,
                            "%s must be yours and private (chmod 600 %s)", path, path);
                return NULL;
        }
        if (!g_file_get_contents(path, &text, NULL, error))
                return NULL;
        g_strstrip(text);
        if (strlen(text) < 16 || strpbrk(text, " \t\r\n")) {
                g_set_error(error, G_FILE_ERROR, G_FILE_ERROR_FAILED,
                            "%s holds no usable token (16 characters or more, no spaces); remove it "
                            "to make a new one", path);
                return NULL;
        }
        return g_steal_pointer(&text);
}

/* Each connection is a file: the soft limit on open files up to the hard one, as a program
 * that polls rather than selects may (systemd's defaults: 1024 and 524288). libsoup's listener
 * stops accepting for good after an accept() fails, which running out of files did at a
 * thousand idle connections. */
static void raise_file_limit(void) {
        struct rlimit r;

        if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
                r.rlim_cur = r.rlim_max;
                (void) setrlimit(RLIMIT_NOFILE, &r);
        }
}

static bool is_loopback(GInetAddress *a) {
        return g_inet_address_get_is_loopback(a);
}

/* Listen on a bound socket the bridge made and serve on it: with the system's backlog, as
 * GLib's default of 10 refuses a burst of clients that connect at once. */
static bool serve_on(SoupServer *server, GSocket *sock, GError **error) {
        g_socket_set_listen_backlog(sock, SOMAXCONN);
        return g_socket_listen(sock, error) && soup_server_listen_socket(server, sock, 0, error);
}

static bool listen_tcp(SoupServer *server, const char *spec, GError **error) {
        g_autoptr(GSocketConnectable) c = NULL;
        g_autoptr(GSocketAddressEnumerator) en = NULL;
        g_autoptr(GSocketAddress) addr = NULL;
        g_autoptr(GSocket) sock = NULL;

        c = g_network_address_parse(spec, 0, error);
        if (!c)
                return false;
        if (!g_str_has_prefix(spec, "127.") && !g_str_has_prefix(spec, "[::1]") &&
            !g_str_has_prefix(spec, "localhost:")) {
                g_set_error(error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                            "--listen takes a loopback address (127.0.0.1:PORT, [::1]:PORT or "
                            "localhost:PORT), got '%s'", spec);
                return false;
        }
        en = g_socket_connectable_enumerate(c);
        addr = g_socket_address_enumerator_next(en, NULL, error);
        if (!addr)
                return false;
        if (!G_IS_INET_SOCKET_ADDRESS(addr) ||
            !is_loopback(g_inet_socket_address_get_address(G_INET_SOCKET_ADDRESS(addr)))) {
                g_set_error(error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                            "--listen takes a loopback address, got '%s'", spec);
                return false;
        }
        sock = g_socket_new(g_socket_address_get_family(addr), G_SOCKET_TYPE_STREAM,
                            G_SOCKET_PROTOCOL_DEFAULT, error);
        if (!sock)
                return false;
        if (g_socket_address_get_family(addr) == G_SOCKET_FAMILY_IPV6)
                (void) g_socket_set_option(sock, IPPROTO_IPV6, IPV6_V6ONLY, TRUE, NULL);
        return g_socket_bind(sock, addr, TRUE, error) && serve_on(server, sock, error);
}

/* Is someone listening on `path` already? */
static bool socket_alive(const char *path) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        bool alive;

        if (fd < 0)
                return false;
        g_strlcpy(sa.sun_path, path, sizeof(sa.sun_path));
        alive = connect(fd, (struct sockaddr *) &sa, sizeof(sa)) == 0;
        close(fd);
        return alive;
}

static bool listen_unix(SoupServer *server, const char *path, GError **error) {
        g_autofree char *dir = g_path_get_dirname(path);
        g_autoptr(GSocket) sock = NULL;
        g_autoptr(GSocketAddress) addr = NULL;
        mode_t old;
        bool ok;

        if (strlen(path) >= sizeof(((struct sockaddr_un *) NULL)->sun_path)) {
                g_set_error(error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                            "The socket path is too long: %s", path);
                return false;
        }
        if (g_mkdir_with_parents(dir, 0700) < 0) {
                g_set_error(error, G_IO_ERROR, g_io_error_from_errno(errno), "Cannot make %s: %s",
                            dir, g_strerror(errno));
                return false;
        }
        if (socket_alive(path)) {
                g_set_error(error, G_IO_ERROR, G_IO_ERROR_ADDRESS_IN_USE,
                            "Another agentxpu serve listens on %s", path);
                return false;
        }
        (void) unlink(path);    /* a stale socket of a bridge that is gone */
        sock = g_socket_new(G_SOCKET_FAMILY_UNIX, G_SOCKET_TYPE_STREAM, G_SOCKET_PROTOCOL_DEFAULT,
                            error);
        if (!sock)
                return false;
        addr = g_unix_socket_address_new(path);
        old = umask(0177);      /* the socket is born 0600 */
        ok = g_socket_bind(sock, addr, FALSE, error);
        umask(old);
        if (!ok)
                return false;
        if (chmod(path, 0600) < 0) {
                g_set_error(error, G_IO_ERROR, g_io_error_from_errno(errno), "chmod %s: %s", path,
                            g_strerror(errno));
                return false;
        }
        return serve_on(server, sock, error);
}

/* Is fd, passed by systemd, a socket that the bridge can serve on: a listening stream socket,
 * Unix or loopback TCP, as agentxpu-http.socket makes? */
static bool activated_fd_check(int fd, GError **error) {
        struct stat st;
        struct sockaddr_storage sa;
        socklen_t sa_len = sizeof(sa), len;
        int type = 0, listening = 0;
        g_autoptr(GSocketAddress) addr = NULL;

        if (fstat(fd, &st) < 0) {
                g_set_error(error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT, "fd %d %s", fd,
                            errno == EBADF ? "is not open" : g_strerror(errno));
                return false;
        }
        if (!S_ISSOCK(st.st_mode)) {
                g_set_error(error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT, "fd %d is not a socket", fd);
                return false;
        }
        len = sizeof(type);
        if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0 || type != SOCK_STREAM) {
                g_set_error(error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                            "fd %d is not a stream socket (the socket unit needs ListenStream=)", fd);
                return false;
        }
        len = sizeof(listening);
        if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) < 0 || !listening) {
                g_set_error(error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                            "fd %d is not a listening socket (the socket unit needs Accept=no)", fd);
                return false;
        }
        if (getsockname(fd, (struct sockaddr *) &sa, &sa_len) < 0) {
                g_set_error(error, G_IO_ERROR, g_io_error_from_errno(errno), "fd %d: %s", fd,
                            g_strerror(errno));
                return false;
        }
        if (sa.ss_family == AF_UNIX)
                return true;
        addr = g_socket_address_new_from_native(&sa, sa_len);
        if (!addr || !G_IS_INET_SOCKET_ADDRESS(addr)) {
                g_set_error(error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                            "fd %d is neither a Unix nor a TCP socket", fd);
                return false;
        }
        /* loopback only, as --listen: the token goes in the clear */
        if (!is_loopback(g_inet_socket_address_get_address(G_INET_SOCKET_ADDRESS(addr)))) {
                g_autofree char *host = g_inet_address_to_string(
                        g_inet_socket_address_get_address(G_INET_SOCKET_ADDRESS(addr)));
                g_set_error(error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                            "fd %d listens on %s port %u, not on loopback (ListenStream=127.0.0.1:PORT "
                            "or [::1]:PORT)", fd, host,
                            g_inet_socket_address_get_port(G_INET_SOCKET_ADDRESS(addr)));
                return false;
        }
        return true;
}

/* How many sockets systemd passed (socket activation; 0: none), each checked; -1 when they are
 * not what the bridge can serve on. Runs before the bridge opens any file of its own, so that
 * a LISTEN_FDS that counts more than were passed finds closed fds, not the bridge's. */
static int activated_fds(GError **error) {
        const char *pid = g_getenv("LISTEN_PID"), *fds = g_getenv("LISTEN_FDS");
        guint64 n;

        if (!pid || !fds || g_ascii_strtoull(pid, NULL, 10) != (guint64) getpid())
                return 0;
        if (!g_ascii_string_to_unsigned(fds, 10, 0, G_MAXINT - SD_LISTEN_FDS_START, &n, NULL)) {
                g_set_error(error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                            "LISTEN_FDS=%s is not a number of sockets", fds);
                return -1;
        }
        for (int i = 0; i < (int) n; i++)
                if (!activated_fd_check(SD_LISTEN_FDS_START + i, error)) {
                        g_prefix_error(error, "LISTEN_FDS=%d (fds %d to %d): ", (int) n,
                                       SD_LISTEN_FDS_START, SD_LISTEN_FDS_START + (int) n - 1);
                        return -1;
                }
        g_unsetenv("LISTEN_PID");
        g_unsetenv("LISTEN_FDS");
        g_unsetenv("LISTEN_FDNAMES");
        return (int) n;
}

/* Serve on the n sockets that activated_fds() checked. Any of them that is TCP needs the
 * token, as --listen does. */
static bool listen_activated(SoupServer *server, int n, bool *ret_tcp, GError **error) {
        bool tcp = false;

        for (int i = 0; i < n; i++) {
                int fd = SD_LISTEN_FDS_START + i;
                g_autoptr(GSocket) sock = NULL;
                (void) fcntl(fd, F_SETFD, FD_CLOEXEC);
                sock = g_socket_new_from_fd(fd, error);
                if (!sock)
                        return false;
                if (g_socket_get_family(sock) != G_SOCKET_FAMILY_UNIX)
                        tcp = true;
                if (!soup_server_listen_socket(server, sock, 0, error))
                        return false;
        }
        *ret_tcp = tcp;
        return true;
}

static gboolean on_signal(gpointer data) {
        g_main_loop_quit(data);
        return G_SOURCE_REMOVE;
}

int main(int argc, char **argv) {
        g_autoptr(GOptionContext) ctx = g_option_context_new(NULL);
        g_autoptr(GError) e = NULL;
        g_autoptr(GMainLoop) loop = NULL;
        g_autofree char *tpath = NULL, *sock_path = NULL;
        Bridge b = {};
        bool activated_tcp = false;
        int activated;

        g_set_prgname("agentxpu serve");
        g_option_context_set_summary(ctx, "OpenAI- and Ollama-compatible HTTP endpoints for the "
                                     "agentxpu engine, in the user's session: every request goes "
                                     "to the engine on the bus as this user.");
        g_option_context_add_main_entries(ctx, entries, NULL);
        if (!g_option_context_parse(ctx, &argc, &argv, &e)) {
                fprintf(stderr, "agentxpu serve: %s\n", e->message);
                return 2;
        }
        if (argc > 1) {
                fprintf(stderr, "agentxpu serve: unexpected argument '%s'\n", argv[1]);
                return 2;
        }
        if (opt_version) {
                printf("agentxpu %s\n", AXP_VERSION);
                return 0;
        }
        if (opt_max_body < 1) {
                fprintf(stderr, "agentxpu serve: --max-body must be at least 1\n");
                return 2;
        }
        if (opt_flows < 0 || opt_flows > 64) {
                fprintf(stderr, "agentxpu serve: --flows must be from 0 to 64\n");
                return 2;
        }
        activated = activated_fds(&e);
        if (activated < 0) {
                fprintf(stderr, "agentxpu serve: the sockets from systemd: %s\n", e->message);
                return 1;
        }
        tpath = token_path();
        if (opt_print_token) {
                g_autofree char *t = token_load(tpath, &e);
                if (!t) {
                        fprintf(stderr, "agentxpu serve: %s\n", e->message);
                        return 1;
                }
                printf("%s\n", t);
                return 0;
        }

        raise_file_limit();
        b.max_body = (gsize) opt_max_body;
        b.max_flows = (guint) opt_flows;
        b.server = soup_server_new("server-header", "agentxpu/" AXP_VERSION " ", NULL);
        soup_server_add_early_handler(b.server, NULL, http_early_handler, &b, NULL);
        soup_server_add_handler(b.server, NULL, http_handler, &b, NULL);

        if (activated > 0 && !listen_activated(b.server, activated, &activated_tcp, &e)) {
                fprintf(stderr, "agentxpu serve: the sockets from systemd: %s\n", e->message);
                return 1;
        }
        if (opt_listen || activated_tcp) {
                b.token = token_load(tpath, &e);
                if (!b.token) {
                        fprintf(stderr, "agentxpu serve: the token: %s\n", e->message);
                        return 1;
                }
        }
        if (activated == 0 && !opt_no_socket) {
                if (opt_socket)
                        sock_path = g_strdup(opt_socket);
                else if (g_getenv("XDG_RUNTIME_DIR"))
                        sock_path = g_build_filename(g_getenv("XDG_RUNTIME_DIR"), "agentxpu",
                                                     "http.sock", NULL);
                else {
                        fprintf(stderr, "agentxpu serve: XDG_RUNTIME_DIR is not set; name a socket "
                                "with --socket, or listen on TCP with --listen --no-socket\n");
                        return 1;
                }
                if (!listen_unix(b.server, sock_path, &e)) {
                        fprintf(stderr, "agentxpu serve: %s: %s\n", sock_path, e->message);
                        return 1;
                }
        }
        if (opt_listen && !listen_tcp(b.server, opt_listen, &e)) {
                fprintf(stderr, "agentxpu serve: --listen %s: %s\n", opt_listen, e->message);
                if (sock_path)
                        unlink(sock_path);
                return 1;
        }
        if (activated == 0 && !sock_path && !opt_listen) {
                fprintf(stderr, "agentxpu serve: nothing to listen on (--no-socket without --listen)\n");
                return 2;
        }

        b.link = engine_link_new(opt_address);
        /* Where it listens, on stdout (scripts and tests read the port from here). */
        if (sock_path)
                printf("Listening on unix:%s\n", sock_path);
        GSList *socks = soup_server_get_listeners(b.server);
        for (GSList *l = socks; l; l = l->next) {
                g_autoptr(GSocketAddress) a = g_socket_get_local_address(l->data, NULL);
                if (a && G_IS_INET_SOCKET_ADDRESS(a)) {
                        g_autofree char *host = g_inet_address_to_string(
                                g_inet_socket_address_get_address(G_INET_SOCKET_ADDRESS(a)));
                        bool v6 = strchr(host, ':') != NULL;
                        printf("Listening on http://%s%s%s:%u/ (bearer token required)\n", v6 ? "[" : "",
                               host, v6 ? "]" : "", g_inet_socket_address_get_port(G_INET_SOCKET_ADDRESS(a)));
                } else if (activated > 0 && a && G_IS_UNIX_SOCKET_ADDRESS(a))
                        printf("Listening on unix:%s\n",
                               g_unix_socket_address_get_path(G_UNIX_SOCKET_ADDRESS(a)));
        }
        g_slist_free(socks);
        fflush(stdout);

        loop = g_main_loop_new(NULL, FALSE);
        g_unix_signal_add(SIGTERM, on_signal, loop);
        g_unix_signal_add(SIGINT, on_signal, loop);
        g_main_loop_run(loop);

        soup_server_disconnect(b.server);
        if (sock_path)
                unlink(sock_path);
        /* the engine closes the flows of a connection that leaves */
        conversations_clear(&b);
        engine_link_free(b.link);
        b.link = NULL;
        g_object_unref(b.server);
        g_free(b.token);
        return 0;
}
