/* SPDX-License-Identifier: MIT */
#include "admin.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "common/bus-common.h"
#include "log.h"
#include "polkit.h"

typedef enum AdminAction {
        ADMIN_LOAD_MODEL,
        ADMIN_SET_POLICY,
} AdminAction;

struct AdminCall {
        Context *context;
        sd_bus_message *call;
        AdminAction action;
        char *arg;               /* the model path or the policy */
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
        free(a->arg);
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

        a->result = axp_engine_load_model(c->engine, a->arg, &a->err);
        bridge_post_job_done(&c->bridge, a);
        return NULL;
}

void admin_job_done(Context *c, void *job) {
        AdminCall *a = job;

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
                log_warning("LoadModel %s failed: %s", a->arg, a->err.msg);
                context_emit_status(c); /* the old model may be gone */
                admin_reply_error(a, code, "%s", a->err.msg[0] ? a->err.msg : strerror(-a->result));
        } else {
                log_info("Loaded model %s", a->arg);
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

static int admin_start(Context *c, sd_bus_message *m, AdminAction action, const char *arg,
                       sd_bus_error *error) {
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
        };
        a->arg = strdup(arg);
        LIST_PREPEND(admin_calls, c->admin_calls, a);
        if (!a->arg) {
                admin_call_free(a);
                return -ENOMEM;
        }
        r = polkit_check_async(c->bus, m, ADMIN_POLKIT_ACTION, uid, on_authorized, a, &a->polkit);
        if (r < 0) {
                admin_call_free(a);
                return sd_bus_error_set_errnof(error, r, "Cannot ask polkit for authorization");
        }
        return 1; /* answered once polkit has */
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
