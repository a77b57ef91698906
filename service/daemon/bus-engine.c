/* SPDX-License-Identifier: MIT */
#include "bus-engine.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "admin.h"
#include "common/bus-common.h"
#include "client.h"
#include "config.h"
#include "daemon-config.h"
#include "flow.h"
#include "log.h"
#include "models.h"
#include "options.h"
#include "request.h"

static int property_get_version(sd_bus *bus, const char *path, const char *iface, const char *property,
                                sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        return sd_bus_message_append(reply, "s", AXP_VERSION);
}

/* Model, Policy and the queues: the engine's status as it last told us (context.h), on this
 * thread; the engine is not asked. */
static int property_get_model(sd_bus *bus, const char *path, const char *iface, const char *property,
                              sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        Context *c = userdata;

        return sd_bus_message_append(reply, "s", c->engine ? c->status.model : "");
}

static int property_get_policy(sd_bus *bus, const char *path, const char *iface, const char *property,
                               sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        Context *c = userdata;

        return sd_bus_message_append(reply, "s", c->engine ? c->status.policy : "");
}

/* ModelInfo: the model of the Model property, described; empty while there is none. */
static int property_get_model_info(sd_bus *bus, const char *path, const char *iface, const char *property,
                                   sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        Context *c = userdata;
        const axp_model_desc *d = &c->status.desc;
        int r;

        r = sd_bus_message_open_container(reply, 'a', "{sv}");
        if (r >= 0 && c->engine && c->status.model[0])
                r = sd_bus_message_append(reply, "{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}{sv}", "name", "s", c->status.model,
                                          "architecture", "s", d->arch, "parameters", "t", d->parameters,
                                          "size", "t", d->file_bytes, "context_length", "u", (uint32_t) d->n_ctx,
                                          "embedding_length", "u", (uint32_t) d->n_embd,
                                          "file_type", "s", d->file_type, "chat_template", "s", d->chat,
                                          "tools", "b", d->tools, "fim", "b", d->fim,
                                          "thinking", "b", d->thinks, "thinking_open", "b", d->think_opens);
        if (r >= 0)
                r = sd_bus_message_close_container(reply);
        return r;
}

/* MaxTokens=: the most options.max_tokens may ask for. */
static int property_get_max_tokens(sd_bus *bus, const char *path, const char *iface, const char *property,
                                   sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        Context *c = userdata;

        return sd_bus_message_append(reply, "u", c->config.max_tokens);
}

/* KVMemory, KVMemoryUsed, KVMemoryCached: the KV-cache budget (KVMemory=, auto resolved for
 * the model in place), what requests and open flows hold of it and what the prompt cache
 * holds, as the engine last told them. */
static int property_get_kv_memory(sd_bus *bus, const char *path, const char *iface, const char *property,
                                  sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        Context *c = userdata;
        axp_engine_status st = {};

        if (c->engine)
                st = c->status;
        return sd_bus_message_append(reply, "t", strcmp(property, "KVMemory") == 0       ? st.kv_memory
                                                 : strcmp(property, "KVMemoryCached") == 0 ? st.kv_memory_cached
                                                                                           : st.kv_memory_used);
}

static int property_get_status(sd_bus *bus, const char *path, const char *iface, const char *property,
                               sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        Context *c = userdata;
        axp_engine_status st = {};

        if (c->engine)
                st = c->status;
        if (strcmp(property, "QueuedReactive") == 0)
                return sd_bus_message_append(reply, "u", st.queued_reactive);
        if (strcmp(property, "QueuedProactive") == 0)
                return sd_bus_message_append(reply, "u", st.queued_proactive);
        return sd_bus_message_append(reply, "u", st.running);
}

static int property_get_devices(sd_bus *bus, const char *path, const char *iface, const char *property,
                                sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        Context *c = userdata;
        axp_device_info devs[16];
        int n = 0, r;

        if (c->engine)
                n = axp_engine_devices(c->engine, devs, (int) ELEMENTSOF(devs));
        n = MAX(0, MIN(n, (int) ELEMENTSOF(devs)));

        r = sd_bus_message_open_container(reply, 'a', "(ssa{sv})");
        if (r < 0)
                return r;
        for (int i = 0; i < n; i++) {
                const axp_device_info *d = &devs[i];

                r = sd_bus_message_open_container(reply, 'r', "ssa{sv}");
                if (r >= 0)
                        r = sd_bus_message_append(reply, "ss", d->name, d->kind ?: "other");
                if (r >= 0)
                        r = sd_bus_message_open_container(reply, 'a', "{sv}");
                if (r >= 0)
                        r = sd_bus_message_append(reply, "{sv}{sv}{sv}{sv}",
                                                  "backend", "s", d->backend ?: "",
                                                  "can_run", "b", d->can_run,
                                                  "memory_bytes", "t", d->memory_bytes,
                                                  "busy_s", "d", d->busy_s);
                if (r >= 0)
                        r = sd_bus_message_open_container(reply, 'e', "sv");
                if (r >= 0)
                        r = sd_bus_message_append(reply, "s", "roles");
                if (r >= 0)
                        r = sd_bus_message_open_container(reply, 'v', "as");
                if (r >= 0)
                        r = sd_bus_message_open_container(reply, 'a', "s");
                if (r >= 0 && d->role_static)
                        r = sd_bus_message_append(reply, "s", "static");
                if (r >= 0 && d->role_dynamic)
                        r = sd_bus_message_append(reply, "s", "dynamic");
                if (r >= 0)
                        r = sd_bus_message_close_container(reply); /* as */
                if (r >= 0)
                        r = sd_bus_message_close_container(reply); /* v */
                if (r >= 0)
                        r = sd_bus_message_close_container(reply); /* e */
                if (r >= 0)
                        r = sd_bus_message_close_container(reply); /* a{sv} */
                if (r >= 0)
                        r = sd_bus_message_close_container(reply); /* r */
                if (r < 0)
                        return r;
        }
        return sd_bus_message_close_container(reply);
}

static int property_get_cpu_guard(sd_bus *bus, const char *path, const char *iface, const char *property,
                                  sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        Context *c = userdata;
        axp_engine_cpu_guard g = { .pressure_source = "none", .proactive_share = 1, .share_setting = 1,
                                   .priority = "normal" };

        if (c->engine)
                axp_engine_cpu_guard_get(c->engine, &g);
        return sd_bus_message_append(reply, "a{sv}", 5,
                                     "priority", "s", g.priority,
                                     "pressure", "d", g.pressure,
                                     "pressure_source", "s", g.pressure_source,
                                     "proactive_share", "d", g.proactive_share,
                                     "share_setting", "d", g.share_setting);
}

/* The engine's errno, with its message, as the named bus error the interface documents. The
 * engine writes its messages as clauses ("the prompt is ..."); the bus's errors are sentences. */
static int engine_error(sd_bus_error *error, int r, const axp_error *err) {
        const char *msg = err->msg[0] ? err->msg : strerror(-r);
        char first = msg[0] >= 'a' && msg[0] <= 'z' ? (char) (msg[0] - 'a' + 'A') : msg[0];

        if (r == -ENOMEDIUM)
                return sd_bus_error_setf(error, AXP_ERROR_NO_MODEL,
                                         "No model is loaded; an administrator can load one with LoadModel");
        if (axp_bus_error_name(r))
                return axp_bus_error_setf(error, r, "%c%s", first, msg + 1);
        return sd_bus_error_setf(error, SD_BUS_ERROR_FAILED, "%c%s", first, msg + 1);
}

static int check_limits(Context *c, Client *cl, sd_bus_error *error) {
        unsigned total, mine = context_count_active(c, cl->uid, &total);

        if (mine >= c->config.max_requests_per_user)
                return sd_bus_error_setf(error, AXP_ERROR_BUSY,
                                         "You have %u requests queued or running, the most one user may have; "
                                         "wait for one to finish", mine);
        if (total >= c->config.max_requests)
                return sd_bus_error_setf(error, AXP_ERROR_BUSY,
                                         "The engine has %u requests queued or running, its limit; try again later",
                                         total);
        return 0;
}

/* What a submitting method answers: the request's object at once (SubmitReactive,
 * SubmitProactive), or when it has finished its text (Complete) or its embedding (Embed) */
typedef enum CallForm {
        CALL_SUBMIT,
        CALL_COMPLETE,
        CALL_EMBED,
} CallForm;

/* Reactive and Proactive (a request object that streams), Complete (one reply with the text)
 * and Embed (complete and embed: one reply with the embedding) */
static int submit(Context *c, sd_bus_message *m, axp_kind kind, CallForm form, sd_bus_error *error) {
        const bool complete = form != CALL_SUBMIT, embed = form == CALL_EMBED;
        _cleanup_(request_options_done) RequestOptions o = {};
        axp_request_cbs cbs;
        axp_error err = {};
        const char *prompt;
        Flow *f = NULL;
        Client *cl;
        Request *req;
        uint64_t id;
        int r;

        r = sd_bus_message_read(m, "s", &prompt);
        if (r < 0)
                return r;
        r = prompt_check(embed ? "text" : "prompt", prompt, true, &c->config, error);
        if (r < 0)
                return r;
        r = request_options_parse(m, embed ? OPTIONS_EMBED : complete ? OPTIONS_COMPLETE : OPTIONS_SUBMIT, &c->config,
                                  &o, error);
        if (r < 0)
                return r;
        /* empty only where the earlier turns end with a tool's result, which the model answers,
         * or before a suffix (the cursor at the file's beginning) */
        if (!prompt[0] && !o.opts.suffix && !(o.opts.n_messages > 0 && strcmp(o.opts.messages[o.opts.n_messages - 1].role, "tool") == 0))
                return sd_bus_error_setf(error, AXP_ERROR_INVALID_ARGUMENT, embed ? "The text is empty" : "The prompt is empty");
        if (complete)
                kind = o.priority;
        if (c->stopping || !c->engine)
                return sd_bus_error_setf(error, AXP_ERROR_BUSY, "The engine is shutting down");
        /* The engine defers a submission while it swaps models, until the requests in flight
         * have finished: waiting for that here would stop this thread, and with it every
         * client's calls (and the bus connection, once sd-bus's calls time out). */
        if (c->loader_running)
                return sd_bus_error_setf(error, AXP_ERROR_BUSY,
                                         "A model is being loaded; submit again once it is in place");

        r = client_get(c, m, &cl);
        if (r < 0)
                return sd_bus_error_set_errnof(error, r, "Cannot identify the caller");

        r = check_limits(c, cl, error);
        if (r >= 0 && o.flow) {
                f = flow_get(c, o.flow);
                if (!f)
                        r = flow_not_found(error, o.flow);
                else if (f->uid != cl->uid)
                        r = sd_bus_error_setf(error, AXP_ERROR_ACCESS_DENIED,
                                              "Flow %" PRIu64 " belongs to another user", o.flow);
                else if (f->busy)
                        r = sd_bus_error_setf(error, AXP_ERROR_BUSY,
                                              "Flow %" PRIu64 " has a request in flight; a flow takes one turn at a time",
                                              o.flow);
                else
                        o.opts.flow = f->engine_flow;
        }
        if (r < 0) {
                client_maybe_free(cl);
                return r;
        }

        r = request_new(c, cl, kind, &req);
        if (r < 0) {
                client_maybe_free(cl);
                return r;
        }
        req->complete = complete;
        req->embed = embed;
        req->logprobs_wanted = o.opts.logprobs;

        bridge_request_cbs(&c->bridge, &cbs);
        /* one user's requests never start from another's cache */
        o.opts.cache_scope = (uint64_t) cl->uid;
        r = axp_engine_submit(c->engine, kind, prompt, &o.opts, &cbs, &id, &err);
        if (r < 0) {
                request_free(req); /* frees the client too if this was all it had */
                return engine_error(error, r, &err);
        }
        r = request_started(req, id);
        if (r < 0) {
                (void) axp_engine_cancel(c->engine, id);
                request_free(req);
                return r;
        }
        if (f) {
                f->busy = req;
                req->flow = f;
        }
        log_debug("%s: %s %s from %s (uid %u)", req->path, axp_kind_name(kind), embed ? "embedding" : "request", cl->name,
                  (unsigned) cl->uid);
        context_changed(c);

        if (complete) {
                req->complete_call = sd_bus_message_ref(m);
                return 1; /* answered when it finishes */
        }
        return sd_bus_reply_method_return(m, "o", req->path);
}

static int method_reactive(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        return submit(userdata, m, AXP_REACTIVE, CALL_SUBMIT, error);
}

static int method_proactive(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        return submit(userdata, m, AXP_PROACTIVE, CALL_SUBMIT, error);
}

static int method_complete(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        return submit(userdata, m, AXP_REACTIVE, CALL_COMPLETE, error);
}

static int method_embed(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        return submit(userdata, m, AXP_REACTIVE, CALL_EMBED, error);
}

static int method_open_flow(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        _cleanup_(request_options_done) RequestOptions o = {};
        _cleanup_free_ char *path = NULL;
        Context *c = userdata;
        axp_error err = {};
        uint64_t id;
        Client *cl;
        Flow *f;
        int r;

        r = request_options_parse(m, OPTIONS_FLOW, &c->config, &o, error);
        if (r < 0)
                return r;
        if (c->stopping || !c->engine)
                return sd_bus_error_setf(error, AXP_ERROR_BUSY, "The engine is shutting down");

        r = client_get(c, m, &cl);
        if (r < 0)
                return sd_bus_error_set_errnof(error, r, "Cannot identify the caller");
        if (context_count_flows(c, cl->uid) >= c->config.max_flows_per_user) {
                client_maybe_free(cl);
                return sd_bus_error_setf(error, AXP_ERROR_BUSY,
                                         "You have %u flows open, the most one user may have; close one first",
                                         c->config.max_flows_per_user);
        }

        r = axp_engine_flow_open(c->engine, o.opts.system, o.opts.raw, &id, &err);
        if (r < 0) {
                client_maybe_free(cl);
                return engine_error(error, r, &err);
        }
        r = flow_new(c, cl, id, &f);
        if (r >= 0) {
                r = flow_path(f, &path);
                if (r < 0)
                        flow_close(f);
        } else
                (void) axp_engine_flow_close(c->engine, id);
        if (r < 0) {
                client_maybe_free(cl);
                return r;
        }
        log_debug("%s opened by %s", path, cl->name);
        context_changed(c);
        return sd_bus_reply_method_return(m, "o", path);
}

static int method_close_flow(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Context *c = userdata;
        const char *path;
        Client *cl;
        uint64_t n;
        uid_t uid;
        Flow *f;
        int r;

        r = sd_bus_message_read(m, "o", &path);
        if (r < 0)
                return r;
        n = path_number(path, AXP_BUS_FLOW_PREFIX);
        if (n == 0)
                return sd_bus_error_setf(error, AXP_ERROR_INVALID_ARGUMENT,
                                         "'%.200s' is not a flow path (" AXP_BUS_FLOW_PREFIX "/N)", path);
        f = flow_get(c, n);
        if (!f)
                return flow_not_found(error, n);
        r = context_sender_uid(c, m, &uid);
        if (r < 0)
                return sd_bus_error_set_errnof(error, r, "Cannot identify the caller");
        if (uid != f->uid)
                return sd_bus_error_setf(error, AXP_ERROR_ACCESS_DENIED,
                                         "Flow %" PRIu64 " belongs to another user", n);
        cl = f->client;
        flow_close(f);
        client_maybe_free(cl);
        context_changed(c);
        return sd_bus_reply_method_return(m, NULL);
}

static int method_forget_prompt_cache(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Context *c = userdata;
        uint32_t n = 0;
        uid_t uid;
        int r;

        r = context_sender_uid(c, m, &uid);
        if (r < 0)
                return sd_bus_error_set_errnof(error, r, "Cannot identify the caller");
        if (c->engine) {
                /* the scope the caller's requests are made with (method_submit) */
                r = axp_engine_forget_prompt_cache(c->engine, (uint64_t) uid, &n);
                if (r < 0)
                        return sd_bus_error_set_errnof(error, r, "Cannot reach the engine");
                context_changed(c);
        }
        return sd_bus_reply_method_return(m, "u", n);
}

const sd_bus_vtable engine_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_PROPERTY("Version", "s", property_get_version, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_PROPERTY("Model", "s", property_get_model, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("ModelInfo", "a{sv}", property_get_model_info, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("Devices", "a(ssa{sv})", property_get_devices, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("Policy", "s", property_get_policy, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("QueuedReactive", "u", property_get_status, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("QueuedProactive", "u", property_get_status, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("Running", "u", property_get_status, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("Models", "a(sa{sv})", property_get_models, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("CpuGuard", "a{sv}", property_get_cpu_guard, 0, 0),
        SD_BUS_PROPERTY("MaxTokens", "u", property_get_max_tokens, 0, 0),
        SD_BUS_PROPERTY("KVMemory", "t", property_get_kv_memory, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("KVMemoryUsed", "t", property_get_kv_memory, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("KVMemoryCached", "t", property_get_kv_memory, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),

        SD_BUS_METHOD_WITH_ARGS("Reactive",
                                SD_BUS_ARGS("s", prompt, "a{sv}", options),
                                SD_BUS_RESULT("o", request),
                                method_reactive, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Proactive",
                                SD_BUS_ARGS("s", prompt, "a{sv}", options),
                                SD_BUS_RESULT("o", request),
                                method_proactive, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Complete",
                                SD_BUS_ARGS("s", prompt, "a{sv}", options),
                                SD_BUS_RESULT("s", text, "a{sv}", stats),
                                method_complete, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Embed",
                                SD_BUS_ARGS("s", text, "a{sv}", options),
                                SD_BUS_RESULT("ad", embedding, "a{sv}", stats),
                                method_embed, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("OpenFlow",
                                SD_BUS_ARGS("a{sv}", options),
                                SD_BUS_RESULT("o", flow),
                                method_open_flow, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("CloseFlow",
                                SD_BUS_ARGS("o", flow),
                                SD_BUS_NO_RESULT,
                                method_close_flow, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("ForgetPromptCache",
                                SD_BUS_NO_ARGS,
                                SD_BUS_RESULT("u", entries),
                                method_forget_prompt_cache, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("LoadModel",
                                SD_BUS_ARGS("s", path),
                                SD_BUS_NO_RESULT,
                                method_load_model, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("SetPolicy",
                                SD_BUS_ARGS("s", policy),
                                SD_BUS_NO_RESULT,
                                method_set_policy, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("InstallModel",
                                SD_BUS_ARGS("h", fd, "s", name, "a{sv}", options),
                                SD_BUS_RESULT("o", job),
                                method_install_model, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("UseModel",
                                SD_BUS_ARGS("s", name),
                                SD_BUS_NO_RESULT,
                                method_use_model, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("RemoveModel",
                                SD_BUS_ARGS("s", name),
                                SD_BUS_NO_RESULT,
                                method_remove_model, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_VTABLE_END
};

int engine_object_register(Context *c) {
        int r;

        r = sd_bus_add_object_vtable(c->bus, NULL, AXP_BUS_PATH, AXP_BUS_IFACE, engine_vtable, c);
        if (r < 0)
                return log_error_errno(r, "Failed to register the engine object");
        return 0;
}
