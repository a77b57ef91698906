/* SPDX-License-Identifier: MIT */
#include "admin.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/bus-common.h"
#include "log.h"
#include "models.h"
#include "polkit.h"

typedef enum AdminAction {
        ADMIN_LOAD_MODEL,
        ADMIN_SET_POLICY,
        ADMIN_INSTALL_MODEL,
        ADMIN_USE_MODEL,
        ADMIN_REMOVE_MODEL,
} AdminAction;

struct AdminCall {
        Context *context;
        sd_bus_message *call;
        AdminAction action;
        char *arg;               /* the model path, the policy or the model's name */
        char *path;              /* UseModel: the model's file */
        int fd;                  /* InstallModel: the caller's file, -1 otherwise */
        int *parts;              /* InstallModel: a split model's other parts' files */
        uint32_t n_parts;
        char *sha256;            /* InstallModel: the digest expected, or NULL */
        PolkitQuery *polkit;     /* while asking */
        int result;              /* LoadModel: set by the loader thread */
        axp_error err;
        LIST_FIELDS(AdminCall, admin_calls);
};

#define ADMIN_CALLS_MAX 32

static unsigned admin_calls_count(Context *c) {
        unsigned n = 0;

        LIST_FOREACH(admin_calls, a, c->admin_calls)
                n++;
        return n;
}

static void admin_call_free(AdminCall *a) {
        Context *c = a->context;

        LIST_REMOVE(admin_calls, c->admin_calls, a);
        polkit_query_free(a->polkit);
        sd_bus_message_unref(a->call);
        if (a->fd >= 0)
                close(a->fd);
        for (uint32_t i = 0; i < a->n_parts; i++)
                if (a->parts[i] >= 0)
                        close(a->parts[i]);
        free(a->parts);
        free(a->arg);
        free(a->path);
        free(a->sha256);
        free(a);
        context_changed(c);
}

static void admin_reply_error(AdminCall *a, int code, const char *fmt, const char *detail) {
        _cleanup_bus_error_ sd_bus_error e = SD_BUS_ERROR_NULL;

        axp_bus_error_setf(&e, code, fmt, detail);
        (void) sd_bus_reply_method_error(a->call, &e);
}

static void *loader_thread(void *userdata) {
        AdminCall *a = userdata;
        Context *c = a->context;

        a->result = axp_engine_load_model(c->engine, a->path, &a->err);
        bridge_post_job_done(&c->bridge, a);
        return NULL;
}

void admin_job_done(Context *c, void *job) {
        AdminCall *a = job;
        int r;

        /* Shutdown may have joined it already (admin_cancel_all). */
        if (c->loader_running) {
                pthread_join(c->loader, NULL);
                c->loader_running = false;
        }

        if (a->result < 0) {
                /* A file that is there but no usable model (corrupt, truncated, unsupported) is
                 * the caller's argument at fault, whatever errno the loader chose. */
                int code = a->result == -ENOENT || a->result == -EACCES || a->result == -ENOMEM
                                   ? a->result
                                   : -EINVAL;
                log_warning("Loading model %s failed: %s", a->path, a->err.msg);
                if (!c->status.model[0]) { /* the old model is gone */
                        free(c->loaded_path);
                        c->loaded_path = NULL;
                        models_scan(c, true);
                }
                context_emit_status(c); /* the old model may be gone */
                admin_reply_error(a, code, "%s", a->err.msg[0] ? a->err.msg : strerror(-a->result));
        } else {
                log_info("Loaded model %s", a->path);
                free(c->loaded_path);
                c->loaded_path = strdup(a->path);
                if (a->action == ADMIN_USE_MODEL) {
                        r = models_write_default(c, a->arg);
                        if (r < 0) {
                                log_warning_errno(r, "Cannot keep %s as the default model", a->arg);
                                char why[512];

                                snprintf(why, sizeof(why), "%s: %s", c->config.state_dir, strerror(-r));
                                admin_reply_error(a, r, "The model is loaded, but the engine cannot keep it as the "
                                                  "default in %s", why);
                                models_scan(c, true);
                                context_emit_status(c);
                                admin_call_free(a);
                                return;
                        }
                        free(c->default_model);
                        c->default_model = strdup(a->arg);
                }
                models_scan(c, true);
                /* The engine told its new status (a new model) before LoadModel returned, so it
                 * came through the bridge before this and waits to be announced, with Devices,
                 * before the reply. */
                c->devices_changed = true;
                context_emit_status(c);
                (void) sd_bus_reply_method_return(a->call, NULL);
        }
        admin_call_free(a);
}

static void admin_run(AdminCall *a) {
        Context *c = a->context;
        axp_error err = {};
        int r;

        switch (a->action) {
        case ADMIN_SET_POLICY:
                r = axp_engine_set_policy(c->engine, a->arg, &err);
                if (r < 0) {
                        admin_reply_error(a, r, "%s", err.msg);
                        break;
                }
                log_info("Scheduling policy is now %s", a->arg);
                /* The engine told its new status before set_policy returned: take it in (with
                 * whatever else it said before), so the property has changed by the reply. */
                bridge_dispatch(&c->bridge);
                (void) sd_bus_reply_method_return(a->call, NULL);
                break;
        case ADMIN_INSTALL_MODEL:
                install_start(c, a->call, a->fd, a->parts, a->n_parts, a->arg, a->sha256);
                a->fd = -1; /* install_start took them */
                a->parts = NULL;
                a->n_parts = 0;
                break;
        case ADMIN_REMOVE_MODEL:
                models_remove(c, a->call, a->arg);
                break;
        case ADMIN_USE_MODEL:
                a->path = models_file(c, a->arg);
                if (!a->path) {
                        admin_reply_error(a, -ENOMEM, "%s", "Out of memory");
                        break;
                }
                if (access(a->path, R_OK) < 0) {
                        admin_reply_error(a, -ENOENT, "No model named '%s' is installed ('agentxpu model list' shows them)",
                                          a->arg);
                        break;
                }
                __attribute__((fallthrough));
        case ADMIN_LOAD_MODEL:
                if (c->loader_running) {
                        admin_reply_error(a, -EBUSY, "%s", "Another model is being loaded; try again when it is done");
                        break;
                }
                r = -pthread_create(&c->loader, NULL, loader_thread, a);
                if (r < 0) {
                        admin_reply_error(a, r, "Cannot start loading the model: %s", strerror(-r));
                        break;
                }
                c->loader_running = true;
                return; /* admin_job_done() answers */
        }
        admin_call_free(a);
}

static void on_authorized(void *userdata, int r, bool authorized, const char *why) {
        AdminCall *a = userdata;

        a->polkit = NULL; /* freed by the query itself */
        if (r < 0) {
                admin_reply_error(a, -EACCES, "Cannot check authorization with polkit: %s", strerror(-r));
                admin_call_free(a);
                return;
        }
        if (!authorized) {
                if (why && *why)
                        admin_reply_error(a, -EACCES, "Not authorized to manage the engine: %s", why);
                else
                        admin_reply_error(a, -EACCES, "%s", "Not authorized to manage the engine");
                admin_call_free(a);
                return;
        }
        if (a->context->stopping) {
                admin_reply_error(a, -ECANCELED, "%s", "The engine is shutting down");
                admin_call_free(a);
                return;
        }
        admin_run(a);
}

static const char *admin_polkit_action(AdminAction action) {
        return action == ADMIN_INSTALL_MODEL ? ADMIN_POLKIT_ACTION_INSTALL : ADMIN_POLKIT_ACTION;
}

static int admin_start_full(Context *c, sd_bus_message *m, AdminAction action, const char *arg, int fd,
                            const int *parts, uint32_t n_parts, const char *sha256, sd_bus_error *error) {
        AdminCall *a;
        uid_t uid;
        int r;

        if (c->stopping)
                return sd_bus_error_setf(error, AXP_ERROR_BUSY, "The engine is shutting down");
        /* Each waits for polkit, which may wait for a password: keep their number bounded. */
        if (admin_calls_count(c) >= ADMIN_CALLS_MAX)
                return sd_bus_error_setf(error, AXP_ERROR_BUSY,
                                         "Too many administrative calls are waiting; try again later");
        r = context_sender_uid(c, m, &uid);
        if (r < 0)
                return sd_bus_error_set_errnof(error, r, "Cannot identify the caller");

        a = calloc(1, sizeof(AdminCall));
        if (!a)
                return -ENOMEM;
        *a = (AdminCall) {
                .context = c,
                .call = sd_bus_message_ref(m),
                .action = action,
                .fd = -1,
        };
        a->arg = strdup(arg);
        LIST_PREPEND(admin_calls, c->admin_calls, a);
        if (fd >= 0) {
                a->fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
                if (a->fd < 0) {
                        r = -errno;
                        admin_call_free(a);
                        return sd_bus_error_set_errnof(error, r, "Cannot take the file descriptor");
                }
        }
        if (n_parts > 0) {
                a->parts = malloc(n_parts * sizeof(int));
                if (!a->parts) {
                        admin_call_free(a);
                        return -ENOMEM;
                }
                for (; a->n_parts < n_parts; a->n_parts++) {
                        a->parts[a->n_parts] = fcntl(parts[a->n_parts], F_DUPFD_CLOEXEC, 3);
                        if (a->parts[a->n_parts] < 0) {
                                r = -errno;
                                admin_call_free(a);
                                return sd_bus_error_set_errnof(error, r, "Cannot take the file descriptor");
                        }
                }
        }
        if (a->action == ADMIN_LOAD_MODEL)
                a->path = strdup(arg);
        if (sha256)
                a->sha256 = strdup(sha256);
        if (!a->arg || (a->action == ADMIN_LOAD_MODEL && !a->path) || (sha256 && !a->sha256)) {
                admin_call_free(a);
                return -ENOMEM;
        }
        r = polkit_check_async(c->bus, m, admin_polkit_action(action), uid, on_authorized, a, &a->polkit);
        if (r < 0) {
                admin_call_free(a);
                return sd_bus_error_set_errnof(error, r, "Cannot ask polkit for authorization");
        }
        return 1; /* answered once polkit has */
}

static int admin_start(Context *c, sd_bus_message *m, AdminAction action, const char *arg,
                       sd_bus_error *error) {
        return admin_start_full(c, m, action, arg, -1, NULL, 0, NULL, error);
}

static int check_model_name(const char *name, sd_bus_error *error) {
        if (!model_name_valid(name))
                return sd_bus_error_setf(error, AXP_ERROR_INVALID_ARGUMENT,
                                         "'%.120s' is not a model name: use 1 to 100 letters, digits and . _ + -, "
                                         "not starting with . or -, without '/' or '..'", name);
        return 0;
}

static bool hex_digest(const char *s) {
        if (strlen(s) != 64)
                return false;
        for (; *s; s++)
                if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
                        return false;
        return true;
}

/* Whether fd is a regular file open for reading; else false with the error set */
static bool readable_file(int fd, const char *what, sd_bus_error *error) {
        struct stat st;
        int flags;

        if (fstat(fd, &st) < 0) {
                sd_bus_error_set_errnof(error, errno, "Cannot examine the file descriptor of %s", what);
                return false;
        }
        if (!S_ISREG(st.st_mode)) {
                sd_bus_error_setf(error, AXP_ERROR_INVALID_ARGUMENT,
                                  "The file descriptor of %s is not a regular file; pass a GGUF file opened for reading",
                                  what);
                return false;
        }
        flags = fcntl(fd, F_GETFL);
        if (flags < 0 || (flags & O_ACCMODE) == O_WRONLY || (flags & O_PATH)) {
                sd_bus_error_setf(error, AXP_ERROR_INVALID_ARGUMENT, "The file descriptor of %s is not open for reading",
                                  what);
                return false;
        }
        return true;
}

int method_install_model(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        const char *name, *sha256 = NULL;
        int parts[AXP_MODEL_PARTS_MAX];
        uint32_t n_parts = 0;
        bool has_parts = false;
        int fd, r;

        r = sd_bus_message_read(m, "hs", &fd, &name);
        if (r < 0)
                return r;
        r = check_model_name(name, error);
        if (r < 0)
                return r;
        r = sd_bus_message_enter_container(m, 'a', "{sv}");
        while (r >= 0 && (r = sd_bus_message_enter_container(m, 'e', "sv")) > 0) {
                const char *key;

                r = sd_bus_message_read(m, "s", &key);
                if (r < 0)
                        return r;
                if (strcmp(key, "parts") == 0) {
                        /* a split model: its parts after the first, in order */
                        if (has_parts)
                                return sd_bus_error_setf(error, AXP_ERROR_INVALID_ARGUMENT, "Option 'parts' is given twice");
                        has_parts = true;
                        if (sd_bus_message_enter_container(m, 'v', "ah") <= 0 ||
                            sd_bus_message_enter_container(m, 'a', "h") <= 0)
                                return sd_bus_error_setf(error, AXP_ERROR_INVALID_ARGUMENT,
                                                         "Option 'parts' must be an array of file descriptors (ah)");
                        int p;
                        while ((r = sd_bus_message_read(m, "h", &p)) > 0) {
                                if (n_parts + 2 > AXP_MODEL_PARTS_MAX)
                                        return sd_bus_error_setf(error, AXP_ERROR_INVALID_ARGUMENT,
                                                                 "A split model has at most %d parts", AXP_MODEL_PARTS_MAX);
                                parts[n_parts++] = p;
                        }
                        if (r < 0 || (r = sd_bus_message_exit_container(m)) < 0 ||
                            (r = sd_bus_message_exit_container(m)) < 0 || (r = sd_bus_message_exit_container(m)) < 0)
                                return r;
                        continue;
                }
                if (strcmp(key, "sha256") != 0)
                        return sd_bus_error_setf(error, AXP_ERROR_INVALID_ARGUMENT, "Unknown option '%.64s'", key);
                if (sha256)
                        return sd_bus_error_setf(error, AXP_ERROR_INVALID_ARGUMENT, "Option 'sha256' is given twice");
                if (sd_bus_message_read(m, "v", "s", &sha256) < 0 || !hex_digest(sha256))
                        return sd_bus_error_setf(error, AXP_ERROR_INVALID_ARGUMENT,
                                                 "Option 'sha256' must be 64 lower-case hex digits");
                r = sd_bus_message_exit_container(m);
        }
        if (r < 0)
                return r;
        if (!readable_file(fd, "the model", error))
                return -EINVAL;
        for (uint32_t i = 0; i < n_parts; i++) {
                char what[32];
                snprintf(what, sizeof(what), "part %" PRIu32, i + 2);
                if (!readable_file(parts[i], what, error))
                        return -EINVAL;
        }
        if (sha256 && n_parts > 0)
                return sd_bus_error_setf(error, AXP_ERROR_INVALID_ARGUMENT,
                                         "Option 'sha256' names one file's digest; a split model's parts have one each");
        return admin_start_full(userdata, m, ADMIN_INSTALL_MODEL, name, fd, parts, n_parts, sha256, error);
}

int method_use_model(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        const char *name;
        int r;

        r = sd_bus_message_read(m, "s", &name);
        if (r < 0)
                return r;
        r = check_model_name(name, error);
        if (r < 0)
                return r;
        return admin_start(userdata, m, ADMIN_USE_MODEL, name, error);
}

int method_remove_model(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        const char *name;
        int r;

        r = sd_bus_message_read(m, "s", &name);
        if (r < 0)
                return r;
        r = check_model_name(name, error);
        if (r < 0)
                return r;
        return admin_start(userdata, m, ADMIN_REMOVE_MODEL, name, error);
}

int method_load_model(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        const char *path;
        int r;

        r = sd_bus_message_read(m, "s", &path);
        if (r < 0)
                return r;
        if (path[0] != '/')
                return sd_bus_error_setf(error, AXP_ERROR_INVALID_ARGUMENT,
                                         "The model path must be absolute, got '%.200s'", path);
        if (strlen(path) >= PATH_MAX)
                return sd_bus_error_setf(error, AXP_ERROR_INVALID_ARGUMENT, "The model path is too long");
        return admin_start(userdata, m, ADMIN_LOAD_MODEL, path, error);
}

int method_set_policy(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        const char *policy;
        int r;

        r = sd_bus_message_read(m, "s", &policy);
        if (r < 0)
                return r;
        if (!policy_name_valid(policy))
                return sd_bus_error_setf(error, AXP_ERROR_INVALID_ARGUMENT,
                                         "Unknown policy '%.64s'; choose agentxpu, fcfs or serial", policy);
        return admin_start(userdata, m, ADMIN_SET_POLICY, policy, error);
}

void admin_cancel_all(Context *c) {
        LIST_FOREACH_SAFE(admin_calls, a, n, c->admin_calls) {
                if (a->polkit) {
                        admin_reply_error(a, -ECANCELED, "%s", "The engine is shutting down");
                        admin_call_free(a);
                }
        }
        /* A model being loaded finishes first: the engine cannot be stopped halfway. Its
         * JOB_DONE event is then in the bridge, and the shutdown's last dispatch answers it. */
        if (c->loader_running) {
                pthread_join(c->loader, NULL);
                c->loader_running = false;
        }
}

void admin_free_all(Context *c) {
        if (c->loader_running) {
                pthread_join(c->loader, NULL);
                c->loader_running = false;
        }
        while (c->admin_calls)
                admin_call_free(c->admin_calls);
}
