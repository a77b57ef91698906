/* SPDX-License-Identifier: MIT */
/* The daemon's configuration: /etc/agentxpu/engine.conf, a key-file:
 *
 *   [Engine]   Model= Policy= Threads= StaticDevice= DynamicDevice= ContextSize= KVType=
 *              PreemptBoundSec= BatchCap= MaxBatch= AgingSec= ProactiveDutyCycle=
 *              ProactiveCpuShare= ProactiveIdleClass= PiggybackSlack= CalibrationCache=
 *              ModelsDirectory= StateDirectory=
 *   [Limits]   RequestsPerUser= Requests= FlowsPerUser= PromptBytes= MaxTokens=
 *              StopStrings= StopBytes= KVMemory= (engine.kv_memory, 0: auto)
 *   [Daemon]   FinishedKeepSec= ExitIdleSec=
 *
 * Command line flags override the file. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "engine.h"

#define DAEMON_CONFIG_FILE AXP_SYSCONFDIR "/agentxpu/engine.conf"
#define DAEMON_STATE_DIR AXP_LOCALSTATEDIR "/lib/agentxpu"
#define DAEMON_MODELS_DIR DAEMON_STATE_DIR "/models"

typedef struct DaemonConfig {
        axp_engine_config engine;   /* its strings point at the owned copies below */
        char *model_path;
        char *policy;
        char *static_dev;
        char *dynamic_dev;
        char *calib_cache;
        char *models_dir;               /* installed models, NAME.gguf (never NULL) */
        char *state_dir;                /* the engine's state: the model chosen (never NULL) */
        char *kv_type;

        unsigned max_requests_per_user; /* queued + running requests of one uid */
        unsigned max_requests;          /* queued + running requests of everyone */
        unsigned max_flows_per_user;    /* open flows of one uid (each holds a KV cache) */
        size_t max_prompt_bytes;        /* prompt and system prompt size cap */
        uint32_t max_tokens;            /* upper bound of options.max_tokens */
        unsigned max_stop_strings;
        size_t max_stop_bytes;          /* length of one stop string */

        double finished_keep_s;         /* a finished request object stays this long */
        double exit_idle_s;             /* bus-activated: exit when idle this long; 0: never */
} DaemonConfig;

void daemon_config_init(DaemonConfig *c);
void daemon_config_done(DaemonConfig *c);

/* Parse a key-file. `missing_ok`: a file that does not exist leaves the defaults. Unknown
 * keys are warned about and skipped (an older daemon reading a newer file); bad values are
 * errors naming file, line and key. */
int daemon_config_load(DaemonConfig *c, const char *path, bool missing_ok, axp_error *err);

/* Parse the text of a key-file (`name` is used in messages). */
int daemon_config_parse(DaemonConfig *c, const char *name, const char *text, axp_error *err);

/* Replace one string setting (for the command line's overrides). */
int daemon_config_set_string(char **field, const char *value);

/* Refresh `engine`'s pointers after the string fields changed. */
void daemon_config_sync(DaemonConfig *c);

/* "agentxpu", "fcfs" or "serial". */
bool policy_name_valid(const char *s);
