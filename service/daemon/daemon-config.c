/* SPDX-License-Identifier: MIT */
#include "daemon-config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "base/parse.h"
#include "log.h"

void daemon_config_init(DaemonConfig *c) {
        *c = (DaemonConfig) {
                .max_requests_per_user = 16,
                .max_requests = 256,
                .max_flows_per_user = 4,
                .max_prompt_bytes = 1024 * 1024,
                .max_tokens = 4096,
                .max_stop_strings = 8,
                .max_stop_bytes = 256,
                .finished_keep_s = 30,
                .exit_idle_s = 60,
        };
        axp_engine_config_default(&c->engine);
        daemon_config_sync(c);
        /* NULL only when out of memory, which the first use reports */
        c->models_dir = strdup(DAEMON_MODELS_DIR);
        c->state_dir = strdup(DAEMON_STATE_DIR);
}

void daemon_config_done(DaemonConfig *c) {
        free(c->model_path);
        free(c->policy);
        free(c->static_dev);
        free(c->dynamic_dev);
        free(c->calib_cache);
        free(c->models_dir);
        free(c->state_dir);
        free(c->kv_type);
        *c = (DaemonConfig) {};
}

void daemon_config_sync(DaemonConfig *c) {
        /* NULL keeps the engine's default for that setting. */
        if (c->model_path)
                c->engine.model_path = c->model_path;
        if (c->policy)
                c->engine.policy = c->policy;
        if (c->static_dev)
                c->engine.static_dev = c->static_dev;
        if (c->dynamic_dev)
                c->engine.dynamic_dev = c->dynamic_dev;
        if (c->calib_cache)
                c->engine.calib_cache = c->calib_cache;
        if (c->kv_type)
                c->engine.kv_type = c->kv_type;
}

int daemon_config_set_string(char **field, const char *value) {
        char *s = strdup(value);

        if (!s)
                return -ENOMEM;
        free(*field);
        *field = s;
        return 0;
}

bool policy_name_valid(const char *s) {
        return s && (strcmp(s, "agentxpu") == 0 || strcmp(s, "fcfs") == 0 || strcmp(s, "serial") == 0);
}

typedef enum ValueKind {
        VALUE_PATH,     /* absolute path, or empty for none */
        VALUE_DIR,      /* absolute path, not empty */
        VALUE_POLICY,
        VALUE_DEVICE,
        VALUE_KV_TYPE,  /* f16, f32 or q8_0 */
        VALUE_INT,      /* int, >= 0 */
        VALUE_UNSIGNED, /* unsigned, >= 1 */
        VALUE_SIZE,     /* size_t, >= 1 */
        VALUE_U32,      /* uint32_t, >= 1 */
        VALUE_SECONDS,  /* double, >= 0 */
        VALUE_FRACTION, /* double in [0, 1] */
        VALUE_SHARE,    /* double in (0, 1] */
        VALUE_BOOL,     /* yes/no, true/false, on/off, 1/0 */
        VALUE_BYTES,    /* uint64_t: "auto" (0), or a size >= 1 with K, M, G or T (powers of 1024) */
} ValueKind;

typedef struct ConfigKey {
        const char *section;
        const char *key;
        ValueKind kind;
        size_t offset;
} ConfigKey;

#define ENGINE_FIELD(f) (offsetof(DaemonConfig, engine) + offsetof(axp_engine_config, f))

static const ConfigKey config_keys[] = {
        { "Engine", "Model",              VALUE_PATH,     offsetof(DaemonConfig, model_path) },
        { "Engine", "Policy",             VALUE_POLICY,   offsetof(DaemonConfig, policy) },
        { "Engine", "Threads",            VALUE_INT,      ENGINE_FIELD(n_threads) },
        { "Engine", "StaticDevice",       VALUE_DEVICE,   offsetof(DaemonConfig, static_dev) },
        { "Engine", "DynamicDevice",      VALUE_DEVICE,   offsetof(DaemonConfig, dynamic_dev) },
        { "Engine", "ContextSize",        VALUE_INT,      ENGINE_FIELD(n_ctx) },
        { "Engine", "KVType",             VALUE_KV_TYPE,  offsetof(DaemonConfig, kv_type) },
        { "Engine", "PromptCache",        VALUE_INT,      ENGINE_FIELD(prompt_cache) },
        { "Engine", "PreemptBoundSec",    VALUE_SECONDS,  ENGINE_FIELD(preempt_bound_s) },
        { "Engine", "BatchCap",           VALUE_INT,      ENGINE_FIELD(b_cap) },
        { "Engine", "MaxBatch",           VALUE_INT,      ENGINE_FIELD(max_batch) },
        { "Engine", "AgingSec",           VALUE_SECONDS,  ENGINE_FIELD(aging_s) },
        { "Engine", "ProactiveDutyCycle", VALUE_FRACTION, ENGINE_FIELD(proactive_duty) },
        { "Engine", "ProactiveCpuShare",  VALUE_SHARE,    ENGINE_FIELD(proactive_cpu_share) },
        { "Engine", "ProactiveIdleClass", VALUE_BOOL,     ENGINE_FIELD(proactive_idle) },
        { "Engine", "PiggybackSlack",     VALUE_FRACTION, ENGINE_FIELD(piggyback_slack) },
        { "Engine", "CalibrationCache",   VALUE_PATH,     offsetof(DaemonConfig, calib_cache) },
        { "Engine", "ModelsDirectory",    VALUE_DIR,      offsetof(DaemonConfig, models_dir) },
        { "Engine", "StateDirectory",     VALUE_DIR,      offsetof(DaemonConfig, state_dir) },
        { "Limits", "RequestsPerUser",    VALUE_UNSIGNED, offsetof(DaemonConfig, max_requests_per_user) },
        { "Limits", "Requests",           VALUE_UNSIGNED, offsetof(DaemonConfig, max_requests) },
        { "Limits", "FlowsPerUser",       VALUE_UNSIGNED, offsetof(DaemonConfig, max_flows_per_user) },
        { "Limits", "PromptBytes",        VALUE_SIZE,     offsetof(DaemonConfig, max_prompt_bytes) },
        { "Limits", "MaxTokens",          VALUE_U32,      offsetof(DaemonConfig, max_tokens) },
        { "Limits", "StopStrings",        VALUE_UNSIGNED, offsetof(DaemonConfig, max_stop_strings) },
        { "Limits", "StopBytes",          VALUE_SIZE,     offsetof(DaemonConfig, max_stop_bytes) },
        { "Limits", "KVMemory",           VALUE_BYTES,    ENGINE_FIELD(kv_memory) },
        { "Daemon", "FinishedKeepSec",    VALUE_SECONDS,  offsetof(DaemonConfig, finished_keep_s) },
        { "Daemon", "ExitIdleSec",        VALUE_SECONDS,  offsetof(DaemonConfig, exit_idle_s) },
};

static bool device_name_valid(const char *s) {
        if (strcmp(s, "auto") == 0 || strcmp(s, "cpu") == 0 || strcmp(s, "npu") == 0 ||
            strcmp(s, "opencl") == 0)
                return true;
        if (strncmp(s, "opencl:", 7) == 0 && s[7]) {
                for (const char *p = s + 7; *p; p++)
                        if (!isdigit((unsigned char) *p))
                                return false;
                return true;
        }
        return false;
}

static int config_assign(DaemonConfig *c, const ConfigKey *k, const char *v, const char *where,
                         axp_error *err) {
        void *field = (char *) c + k->offset;
        uint64_t u = 0;
        double d = 0;

        switch (k->kind) {
        case VALUE_PATH:
                if (*v && v[0] != '/')
                        return axp_errorf(err, -EINVAL, "%s: %s= must be an absolute path, got '%s'",
                                          where, k->key, v);
                if (!*v) {
                        free(*(char **) field);
                        *(char **) field = NULL;
                        return 0;
                }
                return daemon_config_set_string(field, v);
        case VALUE_DIR:
                if (v[0] != '/')
                        return axp_errorf(err, -EINVAL, "%s: %s= must be an absolute path, got '%s'",
                                          where, k->key, v);
                return daemon_config_set_string(field, v);
        case VALUE_POLICY:
                if (!policy_name_valid(v))
                        return axp_errorf(err, -EINVAL,
                                          "%s: %s= must be agentxpu, fcfs or serial, got '%s'",
                                          where, k->key, v);
                return daemon_config_set_string(field, v);
        case VALUE_DEVICE:
                if (!device_name_valid(v))
                        return axp_errorf(err, -EINVAL,
                                          "%s: %s= must be auto, cpu, npu, opencl or opencl:N, got '%s'",
                                          where, k->key, v);
                return daemon_config_set_string(field, v);
        case VALUE_KV_TYPE:
                if (strcmp(v, "f16") != 0 && strcmp(v, "f32") != 0 && strcmp(v, "q8_0") != 0)
                        return axp_errorf(err, -EINVAL, "%s: %s= must be f16, f32 or q8_0, got '%s'", where,
                                          k->key, v);
                return daemon_config_set_string(field, v);
        case VALUE_INT:
        case VALUE_UNSIGNED:
        case VALUE_SIZE:
        case VALUE_U32:
                if (axp_parse_u64(v, k->kind == VALUE_INT ? 0 : 1,
                                  k->kind == VALUE_SIZE ? UINT64_C(1000000000000) : INT32_MAX, &u) < 0)
                        return axp_errorf(err, -EINVAL, "%s: %s= must be a whole number%s, got '%s'",
                                          where, k->key, k->kind == VALUE_INT ? "" : " above 0", v);
                if (k->kind == VALUE_INT)
                        *(int *) field = (int) u;
                else if (k->kind == VALUE_UNSIGNED)
                        *(unsigned *) field = (unsigned) u;
                else if (k->kind == VALUE_SIZE)
                        *(size_t *) field = (size_t) u;
                else
                        *(uint32_t *) field = (uint32_t) u;
                return 0;
        case VALUE_SECONDS:
        case VALUE_FRACTION:
                if (axp_parse_double(v, 0, k->kind == VALUE_FRACTION ? 1 : HUGE_VAL, &d) < 0)
                        return axp_errorf(err, -EINVAL, "%s: %s= must be a number %s, got '%s'",
                                          where, k->key,
                                          k->kind == VALUE_FRACTION ? "from 0 to 1" : "of seconds >= 0", v);
                *(double *) field = d;
                return 0;
        case VALUE_SHARE:
                if (axp_parse_double(v, 0, 1, &d) < 0 || !(d > 0))
                        return axp_errorf(err, -EINVAL,
                                          "%s: %s= must be a number above 0 and at most 1, got '%s'",
                                          where, k->key, v);
                *(double *) field = d;
                return 0;
        case VALUE_BOOL:
                if (strcmp(v, "yes") == 0 || strcmp(v, "true") == 0 || strcmp(v, "on") == 0 ||
                    strcmp(v, "1") == 0)
                        *(bool *) field = true;
                else if (strcmp(v, "no") == 0 || strcmp(v, "false") == 0 || strcmp(v, "off") == 0 ||
                         strcmp(v, "0") == 0)
                        *(bool *) field = false;
                else
                        return axp_errorf(err, -EINVAL, "%s: %s= must be yes or no, got '%s'",
                                          where, k->key, v);
                return 0;
        case VALUE_BYTES:
                if (strcmp(v, "auto") == 0)
                        u = 0;
                else if (axp_parse_size(v, 1, UINT64_MAX, &u) < 0)
                        return axp_errorf(err, -EINVAL,
                                          "%s: %s= must be auto or a size above 0 in bytes, or with K, M, G or T "
                                          "(as 512M or 6G), got '%s'",
                                          where, k->key, v);
                *(uint64_t *) field = u;
                return 0;
        }
        return -EINVAL;
}

static char *strip(char *s) {
        char *e;

        while (isspace((unsigned char) *s))
                s++;
        e = s + strlen(s);
        while (e > s && isspace((unsigned char) e[-1]))
                *--e = 0;
        return s;
}

int daemon_config_parse(DaemonConfig *c, const char *name, const char *text, axp_error *err) {
        _cleanup_free_ char *copy = strdup(text);
        char section[64] = "";
        unsigned line_no = 0;
        int r;

        if (!copy)
                return axp_errorf(err, -ENOMEM, "Out of memory");

        /* strtok_r would skip empty lines and so miscount them; split by hand. */
        for (char *line = copy, *next; line; line = next) {
                char *eq, *key, *value, where[320];
                const ConfigKey *k = NULL;

                next = strchr(line, '\n');
                if (next)
                        *next++ = 0;
                line_no++;
                line = strip(line);
                if (!*line || *line == '#' || *line == ';')
                        continue;
                snprintf(where, sizeof(where), "%s:%u", name, line_no);

                if (*line == '[') {
                        size_t n = strlen(line);
                        if (n < 3 || line[n - 1] != ']' || n - 2 >= sizeof(section))
                                return axp_errorf(err, -EINVAL, "%s: bad section header '%s'", where, line);
                        memcpy(section, line + 1, n - 2);
                        section[n - 2] = 0;
                        continue;
                }

                eq = strchr(line, '=');
                if (!eq)
                        return axp_errorf(err, -EINVAL, "%s: expected Key=Value, got '%s'", where, line);
                *eq = 0;
                key = strip(line);
                value = strip(eq + 1);
                if (!*section)
                        return axp_errorf(err, -EINVAL, "%s: %s= is outside of any [Section]", where, key);

                for (size_t i = 0; i < ELEMENTSOF(config_keys); i++)
                        if (strcmp(config_keys[i].section, section) == 0 &&
                            strcmp(config_keys[i].key, key) == 0)
                                k = &config_keys[i];
                if (!k) {
                        log_warning("%s: unknown setting [%s] %s=, ignoring", where, section, key);
                        continue;
                }
                r = config_assign(c, k, value, where, err);
                if (r == -ENOMEM)
                        return axp_errorf(err, r, "Out of memory");
                if (r < 0)
                        return r;
        }
        daemon_config_sync(c);
        return 0;
}

int daemon_config_load(DaemonConfig *c, const char *path, bool missing_ok, axp_error *err) {
        _cleanup_free_ char *text = NULL;
        FILE *f;
        long n;

        f = fopen(path, "re");
        if (!f) {
                if (errno == ENOENT && missing_ok)
                        return 0;
                return axp_errorf(err, -errno, "Cannot open %s: %s", path, strerror(errno));
        }
        /* A config file is small; refuse anything that is clearly not one. */
        if (fseek(f, 0, SEEK_END) < 0 || (n = ftell(f)) < 0 || n > 1024 * 1024 ||
            fseek(f, 0, SEEK_SET) < 0) {
                fclose(f);
                return axp_errorf(err, -EFBIG, "%s is not a readable config file of at most 1 MiB", path);
        }
        text = malloc((size_t) n + 1);
        if (!text) {
                fclose(f);
                return axp_errorf(err, -ENOMEM, "Out of memory");
        }
        if (fread(text, 1, (size_t) n, f) != (size_t) n) {
                fclose(f);
                return axp_errorf(err, -EIO, "Cannot read %s", path);
        }
        fclose(f);
        text[n] = 0;
        if (strlen(text) != (size_t) n)
                return axp_errorf(err, -EINVAL, "%s contains a NUL byte; it is not a text file", path);
        return daemon_config_parse(c, path, text, err);
}
