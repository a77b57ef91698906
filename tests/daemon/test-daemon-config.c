/* SPDX-License-Identifier: MIT */
/* engine.conf: every key reaches its setting, bad values are refused with file, line and
 * key, unknown keys are skipped, a missing default file is fine and a missing given one is not. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include "daemon-config.h"
#include "test.h"

static void test_defaults(void) {
        DaemonConfig c;

        daemon_config_init(&c);
        CHECK_EQ_INT(c.max_requests_per_user, 16);
        CHECK_EQ_INT(c.max_prompt_bytes, 1024 * 1024);
        CHECK_EQ_INT(c.max_tokens, 4096);
        CHECK_EQ_INT(c.max_stop_strings, 8);
        CHECK_NEAR(c.finished_keep_s, 30, 0);
        CHECK(c.engine.model_path == NULL);
        CHECK(c.engine.policy && strcmp(c.engine.policy, "agentxpu") == 0);
        CHECK(c.engine.kv_memory == 0); /* auto */
        daemon_config_done(&c);
}

static void test_every_key(void) {
        static const char text[] =
                "# agentxpu engine\n"
                "[Engine]\n"
                "Model = /var/lib/agentxpu/model.gguf\n"
                "Policy=fcfs\n"
                "Threads=6\n"
                "StaticDevice=npu\n"
                "DynamicDevice=opencl:1\n"
                "ContextSize=2048\n"
                "KVType=f32\n"
                "PromptCache=3\n"
                "PreemptBoundSec=0.05\n"
                "BatchCap=2\n"
                "MaxBatch=16\n"
                "AgingSec=12.5\n"
                "ProactiveDutyCycle=0.25\n"
                "ProactiveCpuShare=0.4\n"
                "ProactiveIdleClass=no\n"
                "PiggybackSlack=0.5\n"
                "CalibrationCache=/var/cache/agentxpu/calibration\n"
                "\n"
                "; limits\n"
                "[Limits]\n"
                "RequestsPerUser=4\n"
                "Requests=100\n"
                "FlowsPerUser=2\n"
                "PromptBytes=65536\n"
                "MaxTokens=1024\n"
                "StopStrings=3\n"
                "StopBytes=64\n"
                "KVMemory=6G\n"
                "[Daemon]\n"
                "FinishedKeepSec=5\n"
                "ExitIdleSec=120\n";
        axp_error err = {};
        DaemonConfig c;

        daemon_config_init(&c);
        CHECK_EQ_INT(daemon_config_parse(&c, "engine.conf", text, &err), 0);
        CHECK(strcmp(c.engine.model_path, "/var/lib/agentxpu/model.gguf") == 0);
        CHECK(strcmp(c.engine.policy, "fcfs") == 0);
        CHECK_EQ_INT(c.engine.n_threads, 6);
        CHECK(strcmp(c.engine.static_dev, "npu") == 0);
        CHECK(strcmp(c.engine.dynamic_dev, "opencl:1") == 0);
        CHECK_EQ_INT(c.engine.n_ctx, 2048);
        CHECK(strcmp(c.engine.kv_type, "f32") == 0);
        CHECK_EQ_INT(c.engine.prompt_cache, 3);
        CHECK_NEAR(c.engine.preempt_bound_s, 0.05, 1e-12);
        CHECK_EQ_INT(c.engine.b_cap, 2);
        CHECK_EQ_INT(c.engine.max_batch, 16);
        CHECK_NEAR(c.engine.aging_s, 12.5, 0);
        CHECK_NEAR(c.engine.proactive_duty, 0.25, 0);
        CHECK_NEAR(c.engine.proactive_cpu_share, 0.4, 0);
        CHECK(!c.engine.proactive_idle);
        CHECK_NEAR(c.engine.piggyback_slack, 0.5, 0);
        CHECK(strcmp(c.engine.calib_cache, "/var/cache/agentxpu/calibration") == 0);
        CHECK_EQ_INT(c.max_requests_per_user, 4);
        CHECK_EQ_INT(c.max_requests, 100);
        CHECK_EQ_INT(c.max_flows_per_user, 2);
        CHECK_EQ_INT(c.max_prompt_bytes, 65536);
        CHECK_EQ_INT(c.max_tokens, 1024);
        CHECK_EQ_INT(c.max_stop_strings, 3);
        CHECK_EQ_INT(c.max_stop_bytes, 64);
        CHECK(c.engine.kv_memory == UINT64_C(6) << 30);
        CHECK_NEAR(c.finished_keep_s, 5, 0);
        CHECK_NEAR(c.exit_idle_s, 120, 0);
        daemon_config_done(&c);
}

/* KVType=q8_0: llama.cpp's Q8_0 cache, passed to the engine by name */
static void test_kv_type_q8_0(void) {
        axp_error err = {};
        DaemonConfig c;

        daemon_config_init(&c);
        CHECK_EQ_INT(daemon_config_parse(&c, "engine.conf", "[Engine]\nKVType=q8_0\n", &err), 0);
        CHECK(strcmp(c.engine.kv_type, "q8_0") == 0);
        daemon_config_done(&c);
}

/* KVMemory=: a size with K, M, G or T (powers of 1024), bytes, or auto (0); the last one
 * given wins */
static void test_kv_memory(void) {
        static const struct { const char *value; uint64_t bytes; } cases[] = {
                { "512M", UINT64_C(512) << 20 },
                { "6G", UINT64_C(6) << 30 },
                { "6g", UINT64_C(6) << 30 },
                { "1T", UINT64_C(1) << 40 },
                { "64K", UINT64_C(64) << 10 },
                { "200000", 200000 },
                { "auto", 0 },
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                char text[64];
                axp_error err = {};
                DaemonConfig c;

                daemon_config_init(&c);
                c.engine.kv_memory = 1; /* auto must reset it */
                snprintf(text, sizeof(text), "[Limits]\nKVMemory = %s\n", cases[i].value);
                CHECK_MSG(daemon_config_parse(&c, "engine.conf", text, &err) == 0, "%s: %s", cases[i].value, err.msg);
                CHECK_MSG(c.engine.kv_memory == cases[i].bytes, "%s: %llu", cases[i].value,
                          (unsigned long long) c.engine.kv_memory);
                daemon_config_done(&c);
        }
}

static void test_bad_values(void) {
        static const struct { const char *text, *message; } cases[] = {
                { "[Engine]\nPolicy=fastest\n", "x.conf:2: Policy= must be agentxpu, fcfs or serial, got 'fastest'" },
                { "[Engine]\nKVType=q4_0\n", "x.conf:2: KVType= must be f16, f32 or q8_0, got 'q4_0'" },
                { "[Engine]\nKVType=Q8_0\n", "x.conf:2: KVType= must be f16, f32 or q8_0, got 'Q8_0'" },
                { "[Engine]\nModel=model.gguf\n", "x.conf:2: Model= must be an absolute path" },
                { "[Engine]\nStaticDevice=gpu\n", "x.conf:2: StaticDevice= must be auto" },
                { "[Engine]\nDynamicDevice=opencl:x\n", "DynamicDevice=" },
                { "[Engine]\nThreads=-1\n", "x.conf:2: Threads= must be a whole number" },
                { "[Engine]\nThreads=four\n", "Threads=" },
                { "\n\n[Limits]\nRequestsPerUser=0\n", "x.conf:4: RequestsPerUser= must be a whole number above 0" },
                { "[Limits]\nMaxTokens=1e3\n", "MaxTokens=" },
                { "[Limits]\nPromptBytes=99999999999999\n", "PromptBytes=" },
                { "[Limits]\nKVMemory=6GB\n",
                  "x.conf:2: KVMemory= must be auto or a size above 0 in bytes, or with K, M, G or T (as 512M or 6G), got '6GB'" },
                { "[Limits]\nKVMemory=0\n", "KVMemory= must be auto or a size above 0" },
                { "[Limits]\nKVMemory=0G\n", "KVMemory=" },
                { "[Limits]\nKVMemory=1.5G\n", "KVMemory=" },
                { "[Limits]\nKVMemory=-1\n", "KVMemory=" },
                { "[Limits]\nKVMemory=Auto\n", "KVMemory=" },
                { "[Limits]\nKVMemory=\n", "KVMemory=" },
                { "[Limits]\nKVMemory=99999999999T\n", "KVMemory=" },
                { "[Engine]\nProactiveDutyCycle=1.5\n", "ProactiveDutyCycle= must be a number from 0 to 1" },
                { "[Engine]\nProactiveCpuShare=0\n", "ProactiveCpuShare= must be a number above 0 and at most 1, got '0'" },
                { "[Engine]\nProactiveCpuShare=1.01\n", "ProactiveCpuShare=" },
                { "[Engine]\nProactiveIdleClass=maybe\n", "ProactiveIdleClass= must be yes or no, got 'maybe'" },
                { "[Daemon]\nExitIdleSec=-3\n", "ExitIdleSec= must be a number of seconds >= 0" },
                { "[Daemon]\nExitIdleSec=inf\n", "ExitIdleSec=" },
                { "Model=/x\n", "x.conf:1: Model= is outside of any [Section]" },
                { "[Engine\n", "x.conf:1: bad section header" },
                { "[Engine]\nno equals sign\n", "x.conf:2: expected Key=Value" },
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                axp_error err = {};
                DaemonConfig c;

                daemon_config_init(&c);
                CHECK_MSG(daemon_config_parse(&c, "x.conf", cases[i].text, &err) == -EINVAL, "case %zu", i);
                CHECK_MSG(strstr(err.msg, cases[i].message), "case %zu: '%s' lacks '%s'", i, err.msg,
                          cases[i].message);
                daemon_config_done(&c);
        }
}

static void test_unknown_keys_are_skipped(void) {
        axp_error err = {};
        DaemonConfig c;

        daemon_config_init(&c);
        CHECK_EQ_INT(daemon_config_parse(&c, "x.conf", "[Engine]\nFutureKnob=1\nPolicy=serial\n[Future]\nA=b\n",
                                         &err), 0);
        CHECK(strcmp(c.engine.policy, "serial") == 0);
        daemon_config_done(&c);
}

static void test_files(void) {
        char path[] = "/tmp/axp-conf-XXXXXX";
        axp_error err = {};
        DaemonConfig c;
        int fd;

        daemon_config_init(&c);
        CHECK_EQ_INT(daemon_config_load(&c, "/nonexistent/engine.conf", true, &err), 0);
        CHECK_EQ_INT(daemon_config_load(&c, "/nonexistent/engine.conf", false, &err), -ENOENT);
        CHECK(strstr(err.msg, "Cannot open /nonexistent/engine.conf"));

        fd = mkstemp(path);
        CHECK(fd >= 0);
        CHECK(write(fd, "[Limits]\nRequestsPerUser=3\n\0junk", 32) == 32);
        close(fd);
        CHECK_EQ_INT(daemon_config_load(&c, path, false, &err), -EINVAL);
        CHECK(strstr(err.msg, "NUL byte"));

        fd = open(path, O_WRONLY | O_TRUNC);
        CHECK(write(fd, "[Limits]\nRequestsPerUser=3\n", 27) == 27);
        close(fd);
        CHECK_EQ_INT(daemon_config_load(&c, path, false, &err), 0);
        CHECK_EQ_INT(c.max_requests_per_user, 3);
        unlink(path);
        daemon_config_done(&c);
}

int main(void) {
        RUN(test_defaults);
        RUN(test_every_key);
        RUN(test_kv_memory);
        RUN(test_kv_type_q8_0);
        RUN(test_bad_values);
        RUN(test_unknown_keys_are_skipped);
        RUN(test_files);
        TEST_EXIT();
}
