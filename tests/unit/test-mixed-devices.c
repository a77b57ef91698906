/* SPDX-License-Identifier: MIT */
/* The static role on the CPU and the dynamic role on OpenCL working on the same requests:
 * static chunks of K1/K3 on the CPU, remainders, attention, the head and decode on OpenCL,
 * one after the other and at the same time (two threads writing different rows of one
 * request's activations and KV cache). The outputs must be those of the CPU alone. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "devices/discovery.h"
#include "devices/cpu-device.h"
#include "devices/forward.h"
#include "model/model.h"
#include "test.h"
#include "kernels/types.h"

static char tmpdir[256];
static axp_device *cpu, *ocl;

static axp_model *make_model(const char *type, int seed) {
        char path[512], cmd[1536];
        snprintf(path, sizeof(path), "%s/llama-%s-%d.gguf", tmpdir, type, seed);
        snprintf(cmd, sizeof(cmd),
                 "'%s' mkmodel --arch llama --type %s --dim 256 --layers 2 --heads 4 --kv-heads 2 "
                 "--ffn 512 --ctx 256 --seed %d -o '%s' >/dev/null",
                 getenv("AXP_CLI"), type, seed, path);
        if (system(cmd) != 0)
                return NULL;
        axp_model *m;
        axp_error err = { 0 };
        if (axp_model_load(path, &m, &err) < 0)
                return NULL;
        if (axp_device_prepare(cpu, m, &err) < 0 || axp_device_prepare(ocl, m, &err) < 0) {
                fprintf(stderr, "%s\n", err.msg);
                axp_model_free(m);
                return NULL;
        }
        return m;
}

static void prompt_tokens(const axp_model *m, int32_t *t, int n, unsigned seed) {
        for (int i = 0; i < n; i++) {
                seed = seed * 1103515245u + 12345u;
                t[i] = (int32_t) ((seed >> 8) % (unsigned) m->hp.n_vocab);
        }
}

static double rel_diff(const float *a, const float *b, int n) {
        double md = 0, mb = 0;
        for (int i = 0; i < n; i++) {
                if (!isfinite(a[i]))
                        return INFINITY;
                md = fmax(md, fabs(a[i] - b[i]));
                mb = fmax(mb, fabs(b[i]));
        }
        return md / fmax(mb, 1e-12);
}

static int32_t argmax(const float *x, int n) {
        int32_t best = 0;
        for (int i = 1; i < n; i++)
                if (x[i] > x[best])
                        best = i;
        return best;
}

/* The role a task takes: static chunks to the CPU, everything else to OpenCL. */
static axp_device *role_of(const axp_task *t) {
        return t->variant == AXP_VAR_STATIC ? cpu : ocl;
}

typedef struct batch {
        axp_task *tasks;
        int n;
        int rc;
        axp_error err;
} batch;

static void *run_batch(void *arg) {
        batch *b = arg;
        for (int i = 0; i < b->n && b->rc == 0; i++)
                b->rc = axp_device_run(cpu, &b->tasks[i], &b->err);
        return NULL;
}

/* Prefill with the static chunks of each token-wise kernel on a CPU thread while OpenCL runs
 * the remainder, as the scheduler overlaps the two roles. */
static int prefill_mixed(axp_seq *s, const int32_t *toks, int n, int chunk, bool concurrent,
                         axp_error *err) {
        axp_task *tasks;
        int n_tasks, r;
        if ((r = axp_seq_begin(s, toks, n, err)) < 0 ||
            (r = axp_prefill_plan(s, chunk, &tasks, &n_tasks, err)) < 0)
                return r;
        for (int i = 0; i < n_tasks && r == 0;) {
                /* a group: the tasks of one kernel (EMBED, K1 or K3 of a layer) over its chunks */
                int j = i + 1;
                while (j < n_tasks && tasks[j].op == tasks[i].op &&
                       tasks[j].layer == tasks[i].layer)
                        j++;
                if (!concurrent) {
                        for (int k = i; k < j && r == 0; k++)
                                r = axp_device_run(role_of(&tasks[k]), &tasks[k],
                                                                 err);
                } else {
                        batch b = { .tasks = tasks + i };
                        int k = i;
                        while (k < j && tasks[k].variant == AXP_VAR_STATIC)
                                k++;
                        b.n = k - i;
                        pthread_t th;
                        pthread_create(&th, NULL, run_batch, &b);
                        for (; k < j && r == 0; k++)
                                r = axp_device_run(ocl, &tasks[k], err);
                        pthread_join(th, NULL);
                        if (r == 0 && b.rc < 0) {
                                r = b.rc;
                                *err = b.err;
                        }
                }
                i = j;
        }
        free(tasks);
        if (r == 0)
                axp_seq_end(s);
        return r;
}

#define N_PROMPT 45
#define N_GEN    8

static void check_mixed(const char *type, uint32_t kv_type, bool concurrent, double tol) {
        axp_model *m = make_model(type, 21);
        CHECK_MSG(m != NULL, "%s", type);
        if (!m)
                return;
        const int nv = m->hp.n_vocab;
        int32_t p[N_PROMPT];
        prompt_tokens(m, p, N_PROMPT, 77);
        axp_seq a, b;
        axp_error err = { 0 };
        CHECK(axp_seq_init(&a, m, kv_type, 256, 16, &err) == 0);
        CHECK(axp_seq_init(&b, m, kv_type, 256, 16, &err) == 0);

        /* CPU alone, and the two roles; both chunked the same way */
        CHECK(axp_forward_prefill(cpu, &a, p, N_PROMPT, 8, &err) == 0);
        CHECK_MSG(prefill_mixed(&b, p, N_PROMPT, 8, concurrent, &err) == 0, "%s", err.msg);
        double worst = rel_diff(b.logits, a.logits, nv);
        int same = 0;
        for (int step = 0; step < N_GEN; step++) {
                int32_t ta = argmax(a.logits, nv), tb = argmax(b.logits, nv);
                same += ta == tb;
                /* both go on with the CPU's token: a difference cannot carry over */
                CHECK(axp_forward_decode(cpu, &(axp_seq *) { &a }, &ta, 1, &err) == 0);
                CHECK(axp_forward_decode(ocl, &(axp_seq *) { &b }, &ta, 1, &err) == 0);
                worst = fmax(worst, rel_diff(b.logits, a.logits, nv));
                if (step == N_GEN / 2) {
                        /* a follow-up turn: prefill over the context kept so far */
                        int32_t turn[10];
                        prompt_tokens(m, turn, 10, (unsigned) step);
                        CHECK(axp_forward_prefill(cpu, &a, turn, 10, 4, &err) == 0);
                        CHECK_MSG(prefill_mixed(&b, turn, 10, 4, concurrent, &err) == 0, "%s",
                                  err.msg);
                        worst = fmax(worst, rel_diff(b.logits, a.logits, nv));
                }
        }
        printf("  %s, %s KV, %s: max relative difference %.2e, %d/%d greedy tokens equal\n", type,
               kv_type == AXP_TYPE_F16 ? "F16" : kv_type == AXP_TYPE_Q8_0 ? "Q8_0" : "F32", concurrent ? "concurrent" : "in turn",
               worst, same, N_GEN);
        CHECK_MSG(worst <= tol, "%g > %g", worst, tol);
        CHECK_EQ_INT(same, N_GEN);
        CHECK_EQ_INT(a.n_past, b.n_past);
        axp_seq_free(&a);
        axp_seq_free(&b);
        axp_device_prepare(cpu, NULL, NULL);
        axp_device_prepare(ocl, NULL, NULL);
        axp_model_free(m);
}

/* Tolerances. The devices add a product's float terms in different orders, so a value can
 * differ in its last bit; where the products round their activations (to f16 for F16
 * weights, to bf16 for BF16 weights, to 8 bits for integer weights, as llama.cpp does) such a
 * value may now and then round to the other neighbour. The CPU's own instruction-set paths
 * differ from each other by the same amount on these models: 3-7e-4 for F16 weights, up to
 * 2e-2 for Q4_K/Q6_K when one 8-bit step flips; a bf16 step is 8 times an f16 step. A fault in sharing a request between devices gives errors of order 1 and
 * different tokens. */
static void test_in_turn(void) {
        check_mixed("f32", AXP_TYPE_F32, false, 1e-5);
}

static void test_concurrent(void) {
        check_mixed("f32", AXP_TYPE_F32, true, 1e-5);
        check_mixed("f32", AXP_TYPE_F16, true, 1e-4);
        check_mixed("bf16", AXP_TYPE_F32, true, 1.6e-2);
        check_mixed("f16", AXP_TYPE_F16, true, 2e-3);
        check_mixed("f16", AXP_TYPE_F32, true, 2e-3);
        /* the devices' quantized activations are the same bits: no difference at all here */
        check_mixed("q8_0", AXP_TYPE_F32, true, 1e-4);
        check_mixed("q8_0", AXP_TYPE_F16, true, 1e-4);
        /* a Q8_0 cache: the devices quantize K and V rows to the same bits when they get the
         * same floats (none differ with Q8_0 weights); F32 products may differ in a last bit,
         * which can move a value to the next 8-bit step (measured 2.7e-4) */
        check_mixed("f32", AXP_TYPE_Q8_0, true, 1e-3);
        check_mixed("q8_0", AXP_TYPE_Q8_0, true, 1e-4);
        check_mixed("q4_0", AXP_TYPE_F32, true, 1e-4);
        check_mixed("q4_k", AXP_TYPE_F32, true, 5e-2);
        check_mixed("q6_k", AXP_TYPE_F32, true, 5e-2);
}

int main(void) {
        if (!getenv("AXP_CLI"))
                TEST_SKIP("AXP_CLI is not set");
        axp_error err = { 0 };
        int r = axp_device_open("opencl", 1, &ocl, &err);
        if (r == -ENODEV)
                TEST_SKIP("%s", err.msg);
        if (r < 0 || axp_cpu_device_new(1, &cpu, &err) < 0) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
        }
        printf("static role: %s; dynamic role: %s\n", axp_device_name(cpu), axp_device_name(ocl));
        snprintf(tmpdir, sizeof(tmpdir), "/tmp/axp-test-mixed-XXXXXX");
        if (!mkdtemp(tmpdir))
                return 1;
        RUN(test_in_turn);
        RUN(test_concurrent);
        axp_device_free(cpu);
        axp_device_free(ocl);
        char cmd[300];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
        if (system(cmd) != 0)
                return 1;
        TEST_EXIT();
}
