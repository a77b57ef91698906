/* SPDX-License-Identifier: MIT */
/* The daemon's argument checks: options a{sv} (keys, types, ranges, which call takes
 * which), prompts, flow paths, UTF-8, and the error names they answer with. */
#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/socket.h>
#include <systemd/sd-bus.h>
#include <unistd.h>

#include "common/bus-common.h"
#include "daemon-config.h"
#include "options.h"
#include "test.h"

static sd_bus *bus;
static DaemonConfig config;

/* A bus object good enough to build and read messages: nothing is ever sent. */
static void bus_setup(void) {
        int fds[2];

        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) < 0 || sd_bus_new(&bus) < 0 ||
            sd_bus_set_fd(bus, fds[0], fds[0]) < 0 || sd_bus_start(bus) < 0)
                TEST_SKIP("cannot set up an sd-bus object");
        axp_bus_error_map_register();
        daemon_config_init(&config);
}

typedef struct Opt {
        const char *key;
        const char *type; /* "u", "d", "t", "b", "s", "o", "as", or a wrong one */
        double num;
        const char *str;
        const char *strv[12];
} Opt;

static sd_bus_message *options_message(const Opt *opts, size_t n) {
        sd_bus_message *m = NULL;

        CHECK(sd_bus_message_new_method_call(bus, &m, "org.agentxpu.Engine", "/", "org.agentxpu.Engine", "Reactive") >= 0);
        CHECK(sd_bus_message_open_container(m, 'a', "{sv}") >= 0);
        for (size_t i = 0; i < n; i++) {
                const Opt *o = &opts[i];
                CHECK(sd_bus_message_open_container(m, 'e', "sv") >= 0);
                CHECK(sd_bus_message_append(m, "s", o->key) >= 0);
                CHECK(sd_bus_message_open_container(m, 'v', o->type) >= 0);
                if (strcmp(o->type, "u") == 0)
                        CHECK(sd_bus_message_append(m, "u", (uint32_t) o->num) >= 0);
                else if (strcmp(o->type, "i") == 0)
                        CHECK(sd_bus_message_append(m, "i", (int32_t) o->num) >= 0);
                else if (strcmp(o->type, "d") == 0)
                        CHECK(sd_bus_message_append(m, "d", o->num) >= 0);
                else if (strcmp(o->type, "t") == 0)
                        CHECK(sd_bus_message_append(m, "t", (uint64_t) o->num) >= 0);
                else if (strcmp(o->type, "b") == 0)
                        CHECK(sd_bus_message_append(m, "b", (int) o->num) >= 0);
                else if (strcmp(o->type, "s") == 0)
                        CHECK(sd_bus_message_append(m, "s", o->str) >= 0);
                else if (strcmp(o->type, "o") == 0)
                        CHECK(sd_bus_message_append(m, "o", o->str) >= 0);
                else if (strcmp(o->type, "as") == 0)
                        CHECK(sd_bus_message_append_strv(m, (char **) o->strv) >= 0);
                CHECK(sd_bus_message_close_container(m) >= 0);
                CHECK(sd_bus_message_close_container(m) >= 0);
        }
        CHECK(sd_bus_message_close_container(m) >= 0);
        CHECK(sd_bus_message_seal(m, 1, 0) >= 0);
        CHECK(sd_bus_message_rewind(m, true) >= 0);
        return m;
}

/* Parse; on failure return the errno and copy the error message into msg. */
static int parse(const Opt *opts, size_t n, OptionSet set, RequestOptions *ret, char *msg, size_t msg_size) {
        sd_bus_error e = SD_BUS_ERROR_NULL;
        sd_bus_message *m = options_message(opts, n);
        int r = request_options_parse(m, set, &config, ret, &e);

        if (r < 0) {
                CHECK_MSG(sd_bus_error_has_name(&e, AXP_ERROR_INVALID_ARGUMENT), "%s", e.name ?: "(none)");
                snprintf(msg, msg_size, "%s", e.message ?: "");
                CHECK_EQ_INT(r, -EINVAL); /* the error map turns the name into EINVAL */
        }
        sd_bus_error_free(&e);
        sd_bus_message_unref(m);
        return r;
}

static void test_no_options_gives_defaults(void) {
        RequestOptions o;
        char msg[512];

        CHECK_EQ_INT(parse(NULL, 0, OPTIONS_SUBMIT, &o, msg, sizeof(msg)), 0);
        CHECK_EQ_INT(o.opts.max_tokens, 0);
        CHECK_EQ_INT(o.opts.n_stop, 0);
        CHECK(o.opts.system == NULL && !o.opts.raw && !o.opts.think_set && o.flow == 0);
        CHECK(o.priority == AXP_REACTIVE);
        request_options_done(&o);
}

static void test_every_option_lands(void) {
        const Opt opts[] = {
                { "max_tokens", "u", 77 },
                { "temperature", "d", 0.25 },
                { "top_k", "u", 5 },
                { "top_p", "d", 0.5 },
                { "min_p", "d", 0.1 },
                { "repeat_penalty", "d", 1.3 },
                { "frequency_penalty", "d", 0.5 },
                { "presence_penalty", "d", -1.5 },
                { "seed", "t", 12345 },
                { "stop", "as", .strv = { "END", "\n\n", NULL } },
                { "system", "s", .str = "Be brief." },
                { "flow", "o", .str = "/org/agentxpu/Engine/flow/12" },
                { "raw", "b", 1 },
                { "think", "b", 0 },
                { "priority", "s", .str = "proactive" },
        };
        RequestOptions o;
        char msg[512];
        sd_bus_message *m;
        sd_bus_error e = SD_BUS_ERROR_NULL;

        /* Parse on a message that stays alive: the strings point into it. */
        m = options_message(opts, ELEMENTSOF(opts));
        CHECK_EQ_INT(request_options_parse(m, OPTIONS_COMPLETE, &config, &o, &e), 0);
        CHECK_EQ_INT(o.opts.max_tokens, 77);
        CHECK_NEAR(o.opts.sampling.temperature, 0.25, 1e-6);
        CHECK_EQ_INT(o.opts.sampling.top_k, 5);
        CHECK_NEAR(o.opts.sampling.top_p, 0.5, 1e-6);
        CHECK_NEAR(o.opts.sampling.min_p, 0.1, 1e-6);
        CHECK_NEAR(o.opts.sampling.repeat_penalty, 1.3, 1e-6);
        CHECK_NEAR(o.opts.sampling.frequency_penalty, 0.5, 1e-6);
        CHECK_NEAR(o.opts.sampling.presence_penalty, -1.5, 1e-6);
        CHECK_EQ_INT(o.opts.sampling.seed, 12345);
        CHECK_EQ_INT(o.opts.n_stop, 2);
        CHECK(o.opts.n_stop == 2 && strcmp(o.opts.stop[0], "END") == 0 && strcmp(o.opts.stop[1], "\n\n") == 0);
        CHECK(o.opts.system && strcmp(o.opts.system, "Be brief.") == 0);
        CHECK_EQ_INT(o.flow, 12);
        CHECK(o.opts.raw);
        CHECK(o.opts.think_set && !o.opts.think);
        CHECK(o.priority == AXP_PROACTIVE);
        request_options_done(&o);
        sd_bus_message_unref(m);
        (void) msg;
}

/* Embed's options: an embedding, normalized unless asked otherwise */
static void test_embed_options(void) {
        const Opt opts[] = {
                { "pooling", "s", .str = "last" },
                { "truncate", "b", 1 },
                { "priority", "s", .str = "proactive" },
        };
        const Opt off[] = { { "normalize", "b", 0 } };
        RequestOptions o;
        char msg[512];

        CHECK_EQ_INT(parse(NULL, 0, OPTIONS_EMBED, &o, msg, sizeof(msg)), 0);
        CHECK(o.opts.embed && o.opts.embed_normalize && !o.opts.embed_truncate && o.opts.pooling == AXP_POOLING_MODEL);
        request_options_done(&o);
        CHECK_EQ_INT(parse(opts, ELEMENTSOF(opts), OPTIONS_EMBED, &o, msg, sizeof(msg)), 0);
        CHECK(o.opts.embed && o.opts.embed_normalize && o.opts.embed_truncate && o.opts.pooling == AXP_POOLING_LAST);
        CHECK(o.priority == AXP_PROACTIVE);
        request_options_done(&o);
        CHECK_EQ_INT(parse(off, ELEMENTSOF(off), OPTIONS_EMBED, &o, msg, sizeof(msg)), 0);
        CHECK(o.opts.embed && !o.opts.embed_normalize);
        request_options_done(&o);
        /* other sets make no embedding */
        CHECK_EQ_INT(parse(NULL, 0, OPTIONS_COMPLETE, &o, msg, sizeof(msg)), 0);
        CHECK(!o.opts.embed && !o.opts.embed_normalize);
        request_options_done(&o);
}

typedef struct BadCase {
        Opt opt[2];
        size_t n;
        OptionSet set;
        const char *message; /* part of the error message */
} BadCase;

static void test_bad_options_are_refused_by_name(void) {
        static const BadCase cases[] = {
                { { { "colour", "s", .str = "red" } }, 1, OPTIONS_SUBMIT, "Unknown option 'colour'" },
                { { { "max_tokens", "i", 5 } }, 1, OPTIONS_SUBMIT, "'max_tokens' must be of type u (uint32), got 'i'" },
                { { { "temperature", "u", 1 } }, 1, OPTIONS_SUBMIT, "'temperature' must be of type d" },
                { { { "stop", "s", .str = "x" } }, 1, OPTIONS_SUBMIT, "'stop' must be of type as" },
                { { { "flow", "s", .str = "/org/agentxpu/Engine/flow/1" } }, 1, OPTIONS_SUBMIT, "'flow' must be of type o" },
                { { { "max_tokens", "u", 0 } }, 1, OPTIONS_SUBMIT, "'max_tokens' must be from 1 to 4096, got 0" },
                { { { "max_tokens", "u", 4097 } }, 1, OPTIONS_SUBMIT, "'max_tokens' must be from 1 to 4096, got 4097" },
                { { { "temperature", "d", -1 } }, 1, OPTIONS_SUBMIT, "'temperature' must be at least 0" },
                { { { "temperature", "d", NAN } }, 1, OPTIONS_SUBMIT, "'temperature' must be at least 0" },
                { { { "temperature", "d", INFINITY } }, 1, OPTIONS_SUBMIT, "'temperature'" },
                { { { "top_p", "d", 1.01 } }, 1, OPTIONS_SUBMIT, "'top_p' must be at least 0 and at most 1" },
                { { { "min_p", "d", -0.01 } }, 1, OPTIONS_SUBMIT, "'min_p'" },
                { { { "repeat_penalty", "d", 0 } }, 1, OPTIONS_SUBMIT, "'repeat_penalty' must be above 0" },
                { { { "repeat_penalty", "d", 1e-300 } }, 1, OPTIONS_SUBMIT, "'repeat_penalty' must be above 0 and at most 10, got 1e-300" },
                { { { "repeat_penalty", "d", 11 } }, 1, OPTIONS_SUBMIT, "at most 10" },
                { { { "frequency_penalty", "d", 2.5 } }, 1, OPTIONS_SUBMIT, "'frequency_penalty' must be at least -2 and at most 2, got 2.5" },
                { { { "presence_penalty", "d", -3 } }, 1, OPTIONS_SUBMIT, "'presence_penalty' must be at least -2 and at most 2, got -3" },
                { { { "presence_penalty", "d", NAN } }, 1, OPTIONS_SUBMIT, "'presence_penalty'" },
                { { { "top_k", "u", 3000000000.0 } }, 1, OPTIONS_SUBMIT, "'top_k' is too large" },
                { { { "stop", "as", .strv = { "", NULL } } }, 1, OPTIONS_SUBMIT, "'stop' contains an empty string" },
                { { { "stop", "as", .strv = { "a", "b", "c", "d", "e", "f", "g", "h", "i", NULL } } }, 1,
                  OPTIONS_SUBMIT, "'stop' has more than 8 stop strings" },
                { { { "flow", "o", .str = "/org/agentxpu/Engine" } }, 1, OPTIONS_SUBMIT, "'flow' must be a flow path" },
                { { { "flow", "o", .str = "/org/agentxpu/Engine/flow/0" } }, 1, OPTIONS_SUBMIT, "'flow' must be a flow path" },
                { { { "flow", "o", .str = "/org/agentxpu/Engine/request/3" } }, 1, OPTIONS_SUBMIT, "'flow' must be a flow path" },
                { { { "priority", "s", .str = "proactive" } }, 1, OPTIONS_SUBMIT, "Unknown option 'priority'" },
                { { { "priority", "s", .str = "now" } }, 1, OPTIONS_COMPLETE, "'priority' must be 'reactive' or 'proactive'" },
                { { { "temperature", "d", 0.5 } }, 1, OPTIONS_FLOW, "Unknown option 'temperature'; accepted here: system, raw" },
                { { { "raw", "b", 1 }, { "raw", "b", 0 } }, 2, OPTIONS_SUBMIT, "'raw' is given twice" },
                { { { "max_tokens", "u", 8 } }, 1, OPTIONS_EMBED,
                  "Unknown option 'max_tokens'; accepted here: priority, pooling, normalize, truncate" },
                { { { "pooling", "s", .str = "mean" } }, 1, OPTIONS_SUBMIT, "Unknown option 'pooling'" },
                { { { "truncate", "b", 1 } }, 1, OPTIONS_COMPLETE, "Unknown option 'truncate'" },
                { { { "pooling", "s", .str = "best" } }, 1, OPTIONS_EMBED, "'pooling' must be 'model', 'mean', 'cls' or 'last'" },
                { { { "normalize", "s", .str = "yes" } }, 1, OPTIONS_EMBED, "'normalize' must be of type b" },
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                RequestOptions o;
                char msg[512] = "";
                int r = parse(cases[i].opt, cases[i].n, cases[i].set, &o, msg, sizeof(msg));

                CHECK_MSG(r == -EINVAL, "case %zu accepted", i);
                CHECK_MSG(strstr(msg, cases[i].message), "case %zu: '%s' lacks '%s'", i, msg, cases[i].message);
        }
}

static void test_hostile_key_is_named_briefly(void) {
        char key[300], msg[512];
        RequestOptions o;

        memset(key, 'k', sizeof(key) - 1);
        key[sizeof(key) - 1] = 0;
        const Opt opt = { key, "s", .str = "v" };
        CHECK_EQ_INT(parse(&opt, 1, OPTIONS_SUBMIT, &o, msg, sizeof(msg)), -EINVAL);
        /* the key cut to 64 bytes, then the list of the keys accepted */
        CHECK(strlen(msg) < 420); /* the whole key (300 bytes) and the list would be 560 */
        CHECK(strstr(msg, "...") != NULL);
}

static void test_prompt_check(void) {
        sd_bus_error e = SD_BUS_ERROR_NULL;
        DaemonConfig small = config;
        char big[40];

        small.max_prompt_bytes = 32;
        memset(big, 'a', sizeof(big) - 1);
        big[sizeof(big) - 1] = 0;

        CHECK_EQ_INT(prompt_check("prompt", "hello", false, &small, &e), 0);
        CHECK_EQ_INT(prompt_check("prompt", "héllo ✓ 🙂", false, &small, &e), 0);
        CHECK_EQ_INT(prompt_check("system prompt", "", true, &small, &e), 0);

        CHECK_EQ_INT(prompt_check("prompt", "", false, &small, &e), -EINVAL);
        CHECK(sd_bus_error_has_name(&e, AXP_ERROR_INVALID_ARGUMENT) && strstr(e.message, "empty"));
        sd_bus_error_free(&e);
        CHECK_EQ_INT(prompt_check("prompt", big, false, &small, &e), -EINVAL);
        CHECK(e.message && strstr(e.message, "39 bytes; the limit is 32"));
        sd_bus_error_free(&e);
        CHECK_EQ_INT(prompt_check("prompt", "bad \xc3\x28 byte", false, &small, &e), -EINVAL);
        CHECK(e.message && strstr(e.message, "not valid UTF-8"));
        sd_bus_error_free(&e);
}

static void test_path_number(void) {
        CHECK_EQ_INT(path_number("/org/agentxpu/Engine/flow/7", AXP_BUS_FLOW_PREFIX), 7);
        CHECK_EQ_INT(path_number("/org/agentxpu/Engine/flow/18446744073709551615", AXP_BUS_FLOW_PREFIX), UINT64_MAX);
        CHECK_EQ_INT(path_number("/org/agentxpu/Engine/flow/18446744073709551616", AXP_BUS_FLOW_PREFIX), 0);
        CHECK_EQ_INT(path_number("/org/agentxpu/Engine/flow/07", AXP_BUS_FLOW_PREFIX), 0);
        CHECK_EQ_INT(path_number("/org/agentxpu/Engine/flow/", AXP_BUS_FLOW_PREFIX), 0);
        CHECK_EQ_INT(path_number("/org/agentxpu/Engine/flow", AXP_BUS_FLOW_PREFIX), 0);
        CHECK_EQ_INT(path_number("/org/agentxpu/Engine/flowers/1", AXP_BUS_FLOW_PREFIX), 0);
        CHECK_EQ_INT(path_number("/org/agentxpu/Engine/flow/1/2", AXP_BUS_FLOW_PREFIX), 0);
        CHECK_EQ_INT(path_number(NULL, AXP_BUS_FLOW_PREFIX), 0);
        /* the one element under the folder, whatever it is */
        CHECK(strcmp(path_child("/org/agentxpu/Engine/flow/007", AXP_BUS_FLOW_PREFIX), "007") == 0);
        CHECK(path_child("/org/agentxpu/Engine/flow/", AXP_BUS_FLOW_PREFIX) == NULL);
        CHECK(path_child("/org/agentxpu/Engine/flow", AXP_BUS_FLOW_PREFIX) == NULL);
        CHECK(path_child("/org/agentxpu/Engine/flowers/1", AXP_BUS_FLOW_PREFIX) == NULL);
        CHECK(path_child("/org/agentxpu/Engine/flow/1/2", AXP_BUS_FLOW_PREFIX) == NULL);
        CHECK(path_child(NULL, AXP_BUS_FLOW_PREFIX) == NULL);
}

static void test_error_names(void) {
        sd_bus_error e = SD_BUS_ERROR_NULL;

        CHECK(strcmp(axp_bus_error_name(-EINVAL), AXP_ERROR_INVALID_ARGUMENT) == 0);
        CHECK(strcmp(axp_bus_error_name(-E2BIG), AXP_ERROR_CONTEXT_OVERFLOW) == 0);
        CHECK(strcmp(axp_bus_error_name(-EBUSY), AXP_ERROR_BUSY) == 0);
        CHECK(strcmp(axp_bus_error_name(-ENOENT), AXP_ERROR_NOT_FOUND) == 0);
        CHECK(strcmp(axp_bus_error_name(-EPERM), AXP_ERROR_ACCESS_DENIED) == 0);
        CHECK(strcmp(axp_bus_error_name(-ENOMEDIUM), AXP_ERROR_NO_MODEL) == 0);
        CHECK(strcmp(axp_bus_error_name(-ECANCELED), AXP_ERROR_CANCELLED) == 0);
        CHECK(axp_bus_error_name(-EIO) == NULL);

        CHECK_EQ_INT(axp_bus_error_setf(&e, -E2BIG, "The prompt is %d tokens", 9000), -E2BIG);
        CHECK(sd_bus_error_has_name(&e, AXP_ERROR_CONTEXT_OVERFLOW));
        CHECK(strcmp(e.message, "The prompt is 9000 tokens") == 0);
        CHECK_EQ_INT(sd_bus_error_get_errno(&e), E2BIG);
        sd_bus_error_free(&e);

        /* An errno without a name of ours keeps sd-bus's own mapping. */
        CHECK(axp_bus_error_setf(&e, -EIO, "disk") < 0);
        CHECK(e.name && strncmp(e.name, "org.agentxpu.", 13) != 0);
        sd_bus_error_free(&e);
}

int main(void) {
        bus_setup();
        RUN(test_no_options_gives_defaults);
        RUN(test_every_option_lands);
        RUN(test_embed_options);
        RUN(test_bad_options_are_refused_by_name);
        RUN(test_hostile_key_is_named_briefly);
        RUN(test_prompt_check);
        RUN(test_path_number);
        RUN(test_error_names);
        sd_bus_unref(bus);
        daemon_config_done(&config);
        TEST_EXIT();
}
