/* SPDX-License-Identifier: MIT */
/* Device calibration: the micro-benchmark on the CPU device gives a usable roofline (a
 * chunk kernel predicted compute-bound, a decode kernel memory-bound, both predictions
 * finite), and the cache returns what was stored, skips what is damaged and is used instead
 * of measuring again. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "devices/calib.h"
#include "devices/cpu-device.h"
#include "mkmodel.h"
#include "test.h"
#include "kernels/cpu/kernels.h"
#include "kernels/types.h"

static char dir[] = "/tmp/axp-test-calib-XXXXXX";
static char model_path[256], cache[256];
static axp_model *model;
static axp_device *cpu;

static void test_measure(void) {
        axp_calib c;
        axp_heg_shape s;
        axp_error err = { 0 };

        CHECK(axp_calib_measure(cpu, model, &c, &err) == 0);
        CHECK(c.P_pk > 1e6 && c.B_pk > 1e6 && c.u_m == 1.0 && c.u_c > 0 && c.I_c > 0);
        CHECK(c.e_attn > 0 && c.e_attn <= 1);
        axp_heg_shape_from_model(model, AXP_TYPE_F32, &s);
        axp_cost chunk = axp_heg_cost(&s, AXP_OP_K3, 256, 1, 0, 0);
        axp_cost step = axp_heg_cost(&s, AXP_OP_K3, 1, 1, 0, 0);
        CHECK(isfinite(axp_calib_latency(&c, chunk)) && axp_calib_latency(&c, chunk) > 0);
        /* What the timings give depends on the machine's load (a loaded machine can stretch
         * the memory anchor more than the compute one), so only what holds at any speed is
         * asserted: a token's step does less work and reads fewer bytes than a chunk, so it
         * is faster, and its intensity is lower, so it is memory-bound whenever the chunk is. */
        CHECK(step.flops < chunk.flops && step.bytes < chunk.bytes);
        CHECK(step.flops / step.bytes < chunk.flops / chunk.bytes);
        CHECK(axp_calib_latency(&c, step) < axp_calib_latency(&c, chunk));
        CHECK(!axp_calib_memory_bound(&c, chunk) || axp_calib_memory_bound(&c, step));
        printf("  measured: %.1f GFLOP/s, %.1f GB/s, knee at %.1f FLOP/byte; step %.2f, chunk %.1f "
               "FLOP/byte\n", axp_calib_P_eff(&c) / 1e9, axp_calib_B_eff(&c) / 1e9,
               axp_calib_P_eff(&c) / axp_calib_B_eff(&c), step.flops / step.bytes, chunk.flops / chunk.bytes);
        /* the two sides of the knee, on a calibration of fixed figures (a laptop CPU's 200
         * GFLOP/s and 20 GB/s: the knee at 10 FLOP/byte) */
        const double I_c = chunk.flops / chunk.bytes, P = 200e9, B = 20e9;
        axp_calib fixed = { .P_pk = P, .B_pk = B, .u_m = 1.0, .u_c = P / (I_c * B), .I_c = I_c, .e_attn = 1 };
        CHECK(!axp_calib_memory_bound(&fixed, chunk));
        CHECK(axp_calib_memory_bound(&fixed, step));
        CHECK_NEAR(axp_calib_latency(&fixed, step), step.bytes / B, 1e-12);
        CHECK_NEAR(axp_calib_latency(&fixed, chunk), chunk.flops / P, 1e-12);
}

/* A mixture of experts: K3 is the MoE kernel, charged for the experts a task can read --
 * n_expert_used for one token, every expert for a chunk -- and the calibration measures it. */
static void test_moe_cost(void) {
        axp_mkmodel_params mp;
        axp_model *m = NULL;
        axp_device *d = NULL;
        axp_calib c;
        axp_heg_shape s;
        axp_error err = { 0 };
        char path[300];

        snprintf(path, sizeof(path), "%s/moe.gguf", dir);
        axp_mkmodel_defaults(&mp);
        mp.arch = AXP_ARCH_QWEN3MOE;
        mp.n_expert = 16;
        mp.n_expert_used = 4;
        mp.path = path;
        CHECK_MSG(axp_mkmodel(&mp, &err) == 0 && axp_model_load(path, &m, &err) == 0, "%s", err.msg);
        if (!m)
                return;
        axp_heg_shape_from_model(m, AXP_TYPE_F16, &s);
        /* the KV cache's bytes per value: F16 2, Q8_0 34 / 32, so that the scheduler's K2
         * estimate reads about half as much */
        axp_heg_shape q8;
        axp_heg_shape_from_model(m, AXP_TYPE_Q8_0, &q8);
        CHECK(s.kv_bytes == 2.0 && q8.kv_bytes == 34.0 / 32);
        CHECK(axp_heg_cost(&q8, AXP_OP_K2, 1, 1, 1000, 1000).bytes <
              0.6 * axp_heg_cost(&s, AXP_OP_K2, 1, 1, 1000, 1000).bytes);
        const double expert = (double) axp_model_expert_bytes(m, 0);
        CHECK(s.n_expert == 16 && s.n_expert_used == 4 && s.bytes_expert == expert && expert > 0);
        CHECK(strcmp(axp_heg_kernel_name(&s, AXP_OP_K3), "K3 moe") == 0);
        CHECK(strcmp(axp_heg_kernel_name(&s, AXP_OP_K1), "K1 qkv") == 0);
        axp_cost step = axp_heg_cost(&s, AXP_OP_K3, 1, 1, 0, 0), two = axp_heg_cost(&s, AXP_OP_K3, 2, 2, 0, 0),
                 chunk = axp_heg_cost(&s, AXP_OP_K3, 256, 1, 0, 0);
        /* the weights read beyond wo and the router: 4, 8 and all 16 experts; besides them,
         * per token, its float activations (in and out of wo, the residual, each expert's) */
        const double act = 4.0 * (3 * 256 + 2 * 4 * 256);
        CHECK_NEAR(step.bytes - s.bytes_k3, 4 * expert + act, 1);
        CHECK_NEAR(two.bytes - s.bytes_k3, 8 * expert + 2 * act, 1);
        CHECK_NEAR(chunk.bytes - s.bytes_k3, 16 * expert + 256 * act, 1);
        /* far less than a dense FFN of all the experts */
        CHECK(step.bytes < s.bytes_k3 + 5 * expert);
        CHECK_EQ_INT((int) axp_heg_experts_read(&s, 3), 12);
        CHECK_EQ_INT((int) axp_heg_experts_read(&s, 5), 16);
        CHECK(axp_cpu_device_new(2, &d, &err) == 0 && axp_device_prepare(d, m, &err) == 0);
        CHECK_MSG(axp_calib_measure(d, m, &c, &err) == 0, "%s", err.msg);
        CHECK(c.P_pk > 1e6 && c.B_pk > 1e6 && isfinite(axp_calib_latency(&c, chunk)));
        CHECK(axp_calib_latency(&c, step) < axp_calib_latency(&c, chunk));
        axp_device_free(d);
        axp_model_free(m);
        unlink(path);
}

/* The cache key names the file's type as llama.cpp does (mkmodel's default file is Q8_0,
 * general.file_type 7, which as a tensor type would read Q5_1). */
static void test_key(void) {
        char key[512];
        axp_calib_key(cpu, model, key, sizeof(key));
        size_t n = strlen(key);
        CHECK_MSG(n > 5 && strcmp(key + n - 5, ":Q8_0") == 0, "key %s", key);
        CHECK(strncmp(key, "cpu:CPU_(", 9) == 0 && !strchr(key, ' '));
        CHECK_EQ_INT(model->file_type, 7);
}

static void test_cache(void) {
        axp_calib a = { 1e12, 5e10, 0.9, 0.05, 512, 0.2 }, b = { 2e12, 6e10, 0.8, 0.04, 256, 0.3 };
        axp_calib got;
        axp_error err = { 0 };
        char key[512];
        FILE *f;

        unlink(cache);
        CHECK(axp_calib_cache_load(cache, "x", &got) == -ENOENT);
        CHECK(axp_calib_cache_store(cache, "dev:a:Q8_0", &a, &err) == 0);
        CHECK(axp_calib_cache_store(cache, "dev:b:Q8_0", &b, &err) == 0);
        CHECK(axp_calib_cache_load(cache, "dev:a:Q8_0", &got) == 0);
        CHECK_NEAR(got.P_pk, a.P_pk, 1e3);
        CHECK_NEAR(got.e_attn, a.e_attn, 1e-9);
        /* replacing a key keeps the others */
        a.P_pk = 3e12;
        CHECK(axp_calib_cache_store(cache, "dev:a:Q8_0", &a, &err) == 0);
        CHECK(axp_calib_cache_load(cache, "dev:a:Q8_0", &got) == 0 && got.P_pk == 3e12);
        CHECK(axp_calib_cache_load(cache, "dev:b:Q8_0", &got) == 0 && got.P_pk == 2e12);
        CHECK(axp_calib_cache_store(cache, "bad key", &a, &err) == -EINVAL);

        /* damaged lines are skipped */
        f = fopen(cache, "a");
        fputs("dev:c:Q8_0 nan 1 1 1 1 1\ndev:d:Q8_0 1 2\n\x01\x02garbage\n"
              "dev:e:Q8_0 -1 1 1 1 1 1\n", f);
        fclose(f);
        CHECK(axp_calib_cache_load(cache, "dev:c:Q8_0", &got) == -ENOENT);
        CHECK(axp_calib_cache_load(cache, "dev:d:Q8_0", &got) == -ENOENT);
        CHECK(axp_calib_cache_load(cache, "dev:e:Q8_0", &got) == -ENOENT);
        CHECK(axp_calib_cache_load(cache, "dev:b:Q8_0", &got) == 0);

        /* axp_calib_get takes the cached line instead of measuring */
        axp_calib_key(cpu, model, key, sizeof(key));
        CHECK(strchr(key, ' ') == NULL);
        /* the key names the CPU path the kernels run (AXP_CPU_ISA or the best here), so a
         * calibration measured on one path is never taken for another */
        CHECK(strstr(key, axp_cpu_isa()) != NULL);
        CHECK(axp_calib_cache_store(cache, key, &b, &err) == 0);
        CHECK(axp_calib_get(cpu, model, cache, &got, &err) == 0);
        CHECK(memcmp(&got, &b, sizeof(got)) == 0);
        /* without a cache it measures */
        CHECK(axp_calib_get(cpu, model, NULL, &got, &err) == 0);
        CHECK(got.u_m == 1.0);
        unlink(cache);
}

int main(void) {
        axp_mkmodel_params mp;
        axp_error err = { 0 };

        if (!mkdtemp(dir))
                TEST_SKIP("cannot make a temporary folder");
        snprintf(model_path, sizeof(model_path), "%s/model.gguf", dir);
        snprintf(cache, sizeof(cache), "%s/calib", dir);
        axp_mkmodel_defaults(&mp);
        mp.n_embd = 512;
        mp.n_ff = 1536;
        mp.n_layer = 4;
        mp.n_ctx = 1024;
        mp.path = model_path;
        if (axp_mkmodel(&mp, &err) < 0 || axp_model_load(model_path, &model, &err) < 0 ||
            axp_cpu_device_new(2, &cpu, &err) < 0 || axp_device_prepare(cpu, model, &err) < 0) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
        }
        RUN(test_measure);
        RUN(test_key);
        RUN(test_cache);
        RUN(test_moe_cost);
        axp_device_free(cpu);
        axp_model_free(model);
        unlink(model_path);
        rmdir(dir);
        TEST_EXIT();
}
