/* SPDX-License-Identifier: MIT */
/* agentxpu-engine: the system service org.agentxpu.Engine (DESIGN §7). One event loop owns
 * the bus; the engine runs on its own threads and hands tokens over through the bridge. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/parse.h"
#include "common/bus-common.h"
#include "bus-engine.h"
#include "client.h"
#include "config.h"
#include "context.h"
#include "flow.h"
#include "log.h"
#include "models.h"
#include "request.h"

typedef struct Args {
        const char *config;
        bool config_given;
        const char *model;
        const char *address;
        const char *policy;
        const char *models_dir;
        const char *state_dir;
        double exit_idle_s;     /* < 0: not given */
} Args;

static void help(void) {
        printf("usage: agentxpu-engine [OPTIONS]\n\n"
               "The agentxpu engine as the D-Bus service " AXP_BUS_NAME ".\n\n"
               "  --config FILE          configuration (default " DAEMON_CONFIG_FILE ")\n"
               "  --model PATH           GGUF model to load (overrides Model=)\n"
               "  --policy NAME          agentxpu, fcfs or serial (overrides Policy=)\n"
               "  --models-dir DIR       installed models (overrides ModelsDirectory=)\n"
               "  --state-dir DIR        the engine's state (overrides StateDirectory=)\n"
               "  --address ADDRESS      connect to this bus instead of the system bus\n"
               "  --exit-idle-time SEC   exit after SEC seconds without clients (0: never);\n"
               "                         by default only when started by bus activation\n"
               "  --version              print the version\n"
               "  --help                 this text\n");
}

/* Returns 1 to run, 0 to exit successfully (--help), < 0 on a usage error. */
static int parse_argv(int argc, char **argv, Args *args) {
        enum { ARG_CONFIG = 0x100, ARG_MODEL, ARG_ADDRESS, ARG_POLICY, ARG_EXIT_IDLE, ARG_VERSION,
               ARG_MODELS_DIR, ARG_STATE_DIR };
        static const struct option options[] = {
                { "config", required_argument, NULL, ARG_CONFIG },
                { "model", required_argument, NULL, ARG_MODEL },
                { "address", required_argument, NULL, ARG_ADDRESS },
                { "policy", required_argument, NULL, ARG_POLICY },
                { "models-dir", required_argument, NULL, ARG_MODELS_DIR },
                { "state-dir", required_argument, NULL, ARG_STATE_DIR },
                { "exit-idle-time", required_argument, NULL, ARG_EXIT_IDLE },
                { "version", no_argument, NULL, ARG_VERSION },
                { "help", no_argument, NULL, 'h' },
                {}
        };
        int c;

        *args = (Args) {
                .config = DAEMON_CONFIG_FILE,
                .exit_idle_s = -1,
        };
        while ((c = getopt_long(argc, argv, "h", options, NULL)) >= 0)
                switch (c) {
                case ARG_CONFIG:
                        args->config = optarg;
                        args->config_given = true;
                        break;
                case ARG_MODEL:
                        args->model = optarg;
                        break;
                case ARG_ADDRESS:
                        args->address = optarg;
                        break;
                case ARG_POLICY:
                        if (!policy_name_valid(optarg)) {
                                log_error("--policy must be agentxpu, fcfs or serial, got '%s'", optarg);
                                return -EINVAL;
                        }
                        args->policy = optarg;
                        break;
                case ARG_MODELS_DIR:
                case ARG_STATE_DIR:
                        if (optarg[0] != '/') {
                                log_error("--%s wants an absolute path, got '%s'",
                                          c == ARG_MODELS_DIR ? "models-dir" : "state-dir", optarg);
                                return -EINVAL;
                        }
                        if (c == ARG_MODELS_DIR)
                                args->models_dir = optarg;
                        else
                                args->state_dir = optarg;
                        break;
                case ARG_EXIT_IDLE:
                        if (axp_parse_double(optarg, 0, 1e9, &args->exit_idle_s) < 0) {
                                log_error("--exit-idle-time wants seconds >= 0, got '%s'", optarg);
                                return -EINVAL;
                        }
                        break;
                case ARG_VERSION:
                        printf("agentxpu-engine %s\n", AXP_VERSION);
                        return 0;
                case 'h':
                        help();
                        return 0;
                default:
                        return -EINVAL;
                }
        if (optind < argc) {
                log_error("Unexpected argument '%s'; see --help", argv[optind]);
                return -EINVAL;
        }
        return 1;
}

static int load_config(Context *c, const Args *args) {
        axp_error err = {};
        int r;

        daemon_config_init(&c->config);
        r = daemon_config_load(&c->config, args->config, !args->config_given, &err);
        if (r < 0)
                return log_error("%s", err.msg), r;
        if (args->model && daemon_config_set_string(&c->config.model_path, args->model) < 0)
                return log_oom();
        if (args->policy && daemon_config_set_string(&c->config.policy, args->policy) < 0)
                return log_oom();
        if (args->models_dir && daemon_config_set_string(&c->config.models_dir, args->models_dir) < 0)
                return log_oom();
        if (args->state_dir && daemon_config_set_string(&c->config.state_dir, args->state_dir) < 0)
                return log_oom();
        if (!c->config.models_dir || !c->config.state_dir)
                return log_oom();
        /* The model chosen with UseModel wins over Model=; --model over both. */
        c->default_model = models_read_default(&c->config);
        if (c->default_model && !args->model) {
                _cleanup_free_ char *file = NULL;

                if (asprintf(&file, "%s/%s.gguf", c->config.models_dir, c->default_model) < 0 ||
                    daemon_config_set_string(&c->config.model_path, file) < 0)
                        return log_oom();
                log_info("Serving %s, the model chosen with UseModel", c->default_model);
        }
        daemon_config_sync(&c->config);

        /* Idle exit is for an instance that the bus started and will start again. */
        c->bus_activated = getenv("DBUS_STARTER_BUS_TYPE") || getenv("DBUS_STARTER_ADDRESS");
        if (args->exit_idle_s >= 0)
                c->config.exit_idle_s = args->exit_idle_s;
        else if (!c->bus_activated)
                c->config.exit_idle_s = 0;
        return 0;
}

static int on_signal(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata) {
        context_stop(userdata);
        return 0;
}

static int connect_bus(Context *c, const Args *args) {
        const char *address = args->address;
        int r;

        /* Started by the bus itself: answer on that bus. */
        if (!address && getenv("DBUS_STARTER_ADDRESS"))
                address = getenv("DBUS_STARTER_ADDRESS");

        r = axp_bus_open(address, "agentxpu-engine", &c->bus);
        if (r < 0)
                return log_error_errno(r, "Failed to connect to %s", address ?: "the system bus");
        r = sd_bus_attach_event(c->bus, c->event, SD_EVENT_PRIORITY_NORMAL);
        if (r < 0)
                return log_error_errno(r, "Failed to attach the bus to the event loop");
        /* If the bus goes away there is nobody left to serve. */
        (void) sd_bus_set_exit_on_disconnect(c->bus, true);

        r = clients_watch(c);
        if (r < 0)
                return r;
        r = engine_object_register(c);
        if (r < 0)
                return r;
        r = request_register(c);
        if (r < 0)
                return r;
        r = flow_register(c);
        if (r < 0)
                return r;
        r = sd_bus_request_name(c->bus, AXP_BUS_NAME, 0);
        if (r == -EEXIST)
                return log_error("Another agentxpu-engine already owns " AXP_BUS_NAME " on this bus"), r;
        if (r < 0)
                return log_error_errno(r, "Failed to acquire the bus name " AXP_BUS_NAME);
        return 0;
}

static int run(int argc, char **argv) {
        _cleanup_(context_clear) Context c = {};
        axp_error err = {};
        sigset_t mask;
        Args args;
        int r;

        log_setup();
        r = parse_argv(argc, argv, &args);
        if (r <= 0)
                return r;
        r = load_config(&c, &args);
        if (r < 0)
                return r;

        /* Block the signals before the engine starts its threads, so they inherit the mask
         * and only the event loop's signalfd sees them. */
        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGPIPE);
        if (pthread_sigmask(SIG_BLOCK, &mask, NULL) != 0)
                return log_error("Failed to block signals"), -EINVAL;
        /* A file size limit makes a write fail (EFBIG) rather than end the engine: a copy of
         * a model that goes past it fails alone. */
        (void) signal(SIGXFSZ, SIG_IGN);

        r = sd_event_default(&c.event);
        if (r < 0)
                return log_error_errno(r, "Failed to allocate the event loop");
        r = sd_event_add_signal(c.event, NULL, SIGTERM, on_signal, &c);
        if (r >= 0)
                r = sd_event_add_signal(c.event, NULL, SIGINT, on_signal, &c);
        if (r < 0)
                return log_error_errno(r, "Failed to watch SIGTERM and SIGINT");
        r = bridge_init(&c.bridge, c.event, context_on_engine_event, &c);
        if (r < 0)
                return r;

        /* The name first, as systemd's daemons take theirs: a second instance learns at once
         * that it is not wanted rather than after loading the whole model. Calls that come
         * while the model loads wait in the connection until the event loop runs. */
        r = connect_bus(&c, &args);
        if (r < 0)
                return r;

        /* The engine tells its status through the bridge; the first before it returns. */
        c.config.engine.status_changed = bridge_status_changed;
        c.config.engine.status_userdata = &c.bridge;
        r = axp_engine_new(&c.config.engine, &c.engine, &err);
        if (r < 0)
                return log_error("Cannot start the engine: %s", err.msg[0] ? err.msg : strerror(-r)), r;

        /* the engine's first status, and the properties announced */
        bridge_dispatch(&c.bridge);
        if (c.status.model[0] && c.config.model_path && !(c.loaded_path = strdup(c.config.model_path)))
                return log_oom();
        models_clean_temporary(&c);
        models_scan(&c, false);
        log_info("agentxpu-engine %s: model '%s', policy %s, serving " AXP_BUS_NAME "%s", AXP_VERSION,
                 c.status.model, c.status.policy, c.config.exit_idle_s > 0 ? " until idle" : "");

        r = sd_event_loop(c.event);
        if (r < 0)
                return log_error_errno(r, "Event loop failed");
        if (r > 0) /* the bus went away (sd_bus_set_exit_on_disconnect) */
                return log_error("Lost the connection to the bus"), -ENOTCONN;
        return 0;
}

int main(int argc, char **argv) {
        int r = run(argc, argv);

        return r < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
