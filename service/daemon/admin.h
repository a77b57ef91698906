/* SPDX-License-Identifier: MIT */
/* The administrative calls, LoadModel and SetPolicy: polkit first (action
 * org.agentxpu.engine.manage), then the change. A model loads on a worker thread so the bus
 * keeps answering; its completion comes back through the bridge. */
#pragma once

#include "context.h"

#define ADMIN_POLKIT_ACTION "org.agentxpu.engine.manage"
/* InstallModel: an action of its own, so that a site can let its users install models
 * without letting them change the engine's settings (data/org.agentxpu.engine.policy). */
#define ADMIN_POLKIT_ACTION_INSTALL "org.agentxpu.engine.install-model"

int method_load_model(sd_bus_message *m, void *userdata, sd_bus_error *error);
int method_set_policy(sd_bus_message *m, void *userdata, sd_bus_error *error);
/* InstallModel (h fd, s name, a{sv} options), UseModel (s name), RemoveModel (s name):
 * models.h does the work once polkit said yes. UseModel and RemoveModel are authorized as
 * LoadModel is; InstallModel as ADMIN_POLKIT_ACTION_INSTALL. */
int method_install_model(sd_bus_message *m, void *userdata, sd_bus_error *error);
int method_use_model(sd_bus_message *m, void *userdata, sd_bus_error *error);
int method_remove_model(sd_bus_message *m, void *userdata, sd_bus_error *error);

/* The loader thread posted its result. */
void admin_job_done(Context *c, void *job);

/* Shutdown: answer every administrative call still waiting for polkit, and wait for a model
 * being loaded. */
void admin_cancel_all(Context *c);
/* Forget every administrative call without an answer (the bus is gone). */
void admin_free_all(Context *c);
