/* SPDX-License-Identifier: MIT */
/* The installed models: the models folder (ModelsDirectory=, NAME.gguf each), the Models
 * property, the model chosen with UseModel (StateDirectory=/default-model, read at start), and
 * InstallModel's jobs: /org/agentxpu/Engine/job/N, in the manner of systemd's jobs. A job
 * copies the caller's file descriptor into the folder under a temporary name on a worker
 * thread, with its progress as properties, checks the copy's SHA-256 and the model, and
 * renames it into place; whatever stops it (a failure, Cancel, the caller leaving the bus,
 * shutdown) removes the temporary file. */
#pragma once

#include <stdbool.h>

#include "context.h"

/* NAME: 1 to 100 of A-Z a-z 0-9 . _ + -, not starting with '.' or '-', without "..". */
bool model_name_valid(const char *name);

/* DIR/NAME.gguf of the models folder (NULL when out of memory). */
char *models_file(Context *c, const char *name);

/* Read the models folder again; announce Models when `announce`. */
int models_scan(Context *c, bool announce);
/* Remove temporary files that an engine stopped mid-copy left in the models folder. */
void models_clean_temporary(Context *c);

/* The name in StateDirectory=/default-model if it names an installed model (NULL if none:
 * no file, or a model since removed). */
char *models_read_default(const DaemonConfig *config);
/* Keep NAME as the default (NULL: none), atomically. */
int models_write_default(Context *c, const char *name);

int property_get_models(sd_bus *bus, const char *path, const char *iface, const char *property,
                        sd_bus_message *reply, void *userdata, sd_bus_error *error);

/* After polkit said yes: check the name is free and the file a model we can run, then start
 * the job and answer the call with its path (or with the error). Takes `fd`. */
void install_start(Context *c, sd_bus_message *call, int fd, int *parts, uint32_t n_parts, const char *name,
                   const char *sha256);
/* RemoveModel, after polkit: answers the call. */
void models_remove(Context *c, sd_bus_message *call, const char *name);
/* A job's worker thread is done (from the bridge). */
void install_job_done(Context *c, void *job);
/* Is a model of this name being installed? */
bool install_in_progress(Context *c, const char *name);
/* Shutdown: cancel every job and wait for its worker; their ends come through the bridge. */
void install_cancel_all(Context *c);
/* Forget every job (the bus is gone). */
void install_free_all(Context *c);
