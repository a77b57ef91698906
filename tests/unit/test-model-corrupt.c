/* SPDX-License-Identifier: MIT */
/* Models whose metadata disagrees with itself or with its tensors: a valid synthetic model
 * (mkmodel) rewritten through the GGUF writer with one key or one tensor changed must be
 * refused by the loader with one line naming the file and what is wrong, never loaded half
 * way. The container's own corruptions are tests/lib/gguf-corrupt.c's. */
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "model/gguf.h"
#include "model/model.h"
#include "mkmodel.h"
#include "test.h"
#include "kernels/types.h"

static char tmpdir[] = "/tmp/test-model-corrupt-XXXXXX";
static char path_buf[2][256];

static const char *tmp_path(int which, const char *name) {
        snprintf(path_buf[which], sizeof(path_buf[0]), "%s/%s", tmpdir, name);
        return path_buf[which];
}

/* One change to a model: a key set to a u32 (or a string, or removed; a second key too), a
 * tensor's last dimension shrunk by one (its data cut to match), a tensor dropped or zeroed,
 * or an F32 tensor of n values added. */
typedef struct change {
        const char *key;
        bool remove_key;
        uint32_t value;
        const char *str;
        const char *key2;
        uint32_t value2;
        const char *tensor;
        enum { T_KEEP, T_SHRINK, T_DROP, T_ZERO, T_ADD } op;
        int64_t add_n;
} change;

static int rewrite(const char *src, const char *dst, const change *ch) {
        gguf_file *f = NULL;
        axp_error err = { 0 };
        int r;
        if ((r = gguf_open(src, &f, &err)) < 0) {
                fprintf(stderr, "%s\n", err.msg);
                return r;
        }
        gguf_writer *w = gguf_writer_new();
        for (uint64_t i = 0; i < f->n_kv; i++)
                if ((!ch->key || !gguf_str_eq(f->kv[i].key, ch->key)) &&
                    (!ch->key2 || !gguf_str_eq(f->kv[i].key, ch->key2)))
                        gguf_writer_copy_kv(w, &f->kv[i]);
        if (ch->key && !ch->remove_key && ch->str)
                gguf_writer_set_str(w, ch->key, ch->str);
        else if (ch->key && !ch->remove_key)
                gguf_writer_set_u32(w, ch->key, ch->value);
        if (ch->key2)
                gguf_writer_set_u32(w, ch->key2, ch->value2);
        for (uint64_t i = 0; i < f->n_tensors; i++) {
                const gguf_tensor *t = &f->tensors[i];
                char name[128];
                snprintf(name, sizeof(name), "%.*s", (int) t->name.len, t->name.ptr);
                int64_t ne[GGUF_MAX_DIMS];
                memcpy(ne, t->ne, sizeof(ne));
                uint64_t nbytes = t->nbytes;
                if (ch->tensor && strcmp(name, ch->tensor) == 0) {
                        if (ch->op == T_DROP)
                                continue;
                        if (ch->op == T_SHRINK) {
                                nbytes = nbytes / (uint64_t) ne[t->n_dims - 1] * (uint64_t) (ne[t->n_dims - 1] - 1);
                                ne[t->n_dims - 1]--;
                        }
                }
                void *zeros = ch->tensor && strcmp(name, ch->tensor) == 0 && ch->op == T_ZERO ? calloc(1, nbytes) : NULL;
                gguf_writer_add_tensor(w, name, t->type, t->n_dims, ne, zeros ? zeros : t->data, nbytes);
                free(zeros);
        }
        if (ch->op == T_ADD) {
                float *v = calloc((size_t) ch->add_n, sizeof(float));
                for (int64_t i = 0; i < ch->add_n; i++)
                        v[i] = 1.0f + (float) i / 8;
                gguf_writer_add_tensor(w, ch->tensor, AXP_TYPE_F32, 1, (int64_t[]) { ch->add_n }, v,
                                       (uint64_t) ch->add_n * sizeof(float));
                free(v);
        }
        r = gguf_writer_write(w, dst, &err);
        if (r < 0)
                fprintf(stderr, "%s\n", err.msg);
        gguf_writer_free(w);
        gguf_close(f);
        return r;
}

/* The changed model is refused with one line that names the file and contains `expect`. */
static void refused(const char *src, const change *ch, const char *expect) {
        const char *dst = tmp_path(1, "changed.gguf");
        CHECK(rewrite(src, dst, ch) == 0);
        axp_model *m = NULL;
        axp_error err = { 0 };
        int r = axp_model_load(dst, &m, &err);
        CHECK_MSG(r < 0 && m == NULL, "%s %s: loaded", ch->key ? ch->key : "", ch->tensor ? ch->tensor : "");
        /* the file by its name, as the loader names it */
        CHECK_MSG(strncmp(err.msg, "changed.gguf: ", 14) == 0 && strstr(err.msg, expect) &&
                          !strchr(err.msg, '\n'),
                  "'%s' (want '%s')", err.msg, expect);
        printf("  %s\n", err.msg);
        if (m)
                axp_model_free(m);
        unlink(dst);
}

static const char *make_longrope(enum axp_arch arch, const char *name, int n_ctx_orig) {
        axp_mkmodel_params p;
        axp_error err = { 0 };
        axp_mkmodel_defaults(&p);
        p.arch = arch;
        p.n_ctx_orig = n_ctx_orig;
        p.type = AXP_TYPE_Q8_0;
        p.n_layer = 2;
        p.seed = 5;
        p.path = tmp_path(0, name);
        CHECK_MSG(axp_mkmodel(&p, &err) == 0, "%s", err.msg);
        /* the unchanged copy loads */
        const char *copy = tmp_path(1, "copy.gguf");
        axp_model *m = NULL;
        CHECK(rewrite(p.path, copy, &(change) { 0 }) == 0);
        CHECK_MSG(axp_model_load(copy, &m, &err) == 0, "%s", err.msg);
        if (m)
                axp_model_free(m);
        unlink(copy);
        return p.path;
}

static const char *make(enum axp_arch arch, const char *name) {
        return make_longrope(arch, name, 0);
}

/* qwen3moe (mkmodel: 8 experts, 2 used): counts out of range, missing, disagreeing with each
 * other and with the stacked expert tensors and the router. */
static void test_moe_keys(void) {
        const char *src = make(AXP_ARCH_QWEN3MOE, "moe.gguf");
        refused(src, &(change) { .key = "qwen3moe.expert_count", .remove_key = true },
                "metadata 'qwen3moe.expert_count' is missing");
        refused(src, &(change) { .key = "qwen3moe.expert_used_count", .remove_key = true },
                "metadata 'qwen3moe.expert_used_count' is missing");
        refused(src, &(change) { .key = "qwen3moe.expert_feed_forward_length", .remove_key = true },
                "metadata 'qwen3moe.expert_feed_forward_length' is missing");
        refused(src, &(change) { .key = "qwen3moe.expert_count", .str = "8" },
                "metadata 'qwen3moe.expert_count' is not an unsigned integer");
        refused(src, &(change) { .key = "qwen3moe.expert_count", .value = 0 }, "= 0 is out of range");
        refused(src, &(change) { .key = "qwen3moe.expert_count", .value = UINT32_MAX },
                "is out of range");
        refused(src, &(change) { .key = "qwen3moe.expert_count", .value = 1000 },
                "1000 experts per layer; agentxpu handles up to");
        refused(src, &(change) { .key = "qwen3moe.expert_used_count", .value = 0 }, "= 0 is out of range");
        refused(src, &(change) { .key = "qwen3moe.expert_used_count", .value = 9 },
                "9 experts used per token of 8");
        /* counts that disagree with the tensors */
        refused(src, &(change) { .key = "qwen3moe.expert_count", .value = 7 }, "ffn_gate_inp");
        refused(src, &(change) { .key = "qwen3moe.expert_count", .value = 9 }, "ffn_gate_inp");
        refused(src, &(change) { .key = "qwen3moe.expert_feed_forward_length", .value = 96 }, "_exps");
        refused(src, &(change) { .key = "qwen3moe.expert_feed_forward_length", .value = UINT32_MAX },
                "is out of range");
        /* tensors that disagree with the counts */
        refused(src, &(change) { .tensor = "blk.1.ffn_up_exps.weight", .op = T_SHRINK }, "ffn_up_exps");
        refused(src, &(change) { .tensor = "blk.0.ffn_down_exps.weight", .op = T_SHRINK }, "ffn_down_exps");
        refused(src, &(change) { .tensor = "blk.1.ffn_gate_inp.weight", .op = T_SHRINK }, "ffn_gate_inp");
        refused(src, &(change) { .tensor = "blk.0.ffn_gate_exps.weight", .op = T_DROP },
                "tensor 'blk.0.ffn_gate_exps.weight' is missing");
        refused(src, &(change) { .tensor = "blk.1.ffn_gate_inp.weight", .op = T_DROP },
                "tensor 'blk.1.ffn_gate_inp.weight' is missing");
        /* a block count past the file's tensors, refused before the layer table it would
         * size (fuzz-model found 2.8 GB asked for) */
        refused(src, &(change) { .key = "qwen3moe.block_count", .value = 1u << 24 },
                "block_count 16777216 but the file holds only");
        unlink(src);
}

/* gemma3 (mkmodel: 2 layers, a window of 16, a context of 512): a window of 0, past the
 * context or past any size, of the wrong type; a layer period past the layers or no number. */
static void test_window_keys(void) {
        const char *src = make(AXP_ARCH_GEMMA3, "gemma3-window.gguf");
        refused(src, &(change) { .key = "gemma3.attention.sliding_window", .value = 0 }, "= 0 is out of range");
        refused(src, &(change) { .key = "gemma3.attention.sliding_window", .value = 513 },
                "sliding window 513 is longer than the context (512)");
        refused(src, &(change) { .key = "gemma3.attention.sliding_window", .value = 1u << 24 },
                "sliding window 16777216 is longer than the context (512)");
        refused(src, &(change) { .key = "gemma3.attention.sliding_window", .value = UINT32_MAX },
                "is out of range");
        refused(src, &(change) { .key = "gemma3.attention.sliding_window", .str = "16" },
                "metadata 'gemma3.attention.sliding_window' is not an unsigned integer");
        refused(src, &(change) { .key = "gemma3.attention.sliding_window_pattern", .value = 3 },
                "metadata 'gemma3.attention.sliding_window_pattern' is not a layer period agentxpu understands");
        refused(src, &(change) { .key = "gemma3.attention.sliding_window_pattern", .value = UINT32_MAX },
                "is not a layer period agentxpu understands");
        refused(src, &(change) { .key = "gemma3.attention.sliding_window_pattern", .str = "6" },
                "is not a layer period agentxpu understands");
        unlink(src);
}

/* The changed model loads; its hyperparameters are returned in *hp. */
static void loads(const char *src, const change *ch, axp_hparams *hp) {
        const char *dst = tmp_path(1, "changed.gguf");
        CHECK(rewrite(src, dst, ch) == 0);
        axp_model *m = NULL;
        axp_error err = { 0 };
        CHECK_MSG(axp_model_load(dst, &m, &err) == 0, "%s", err.msg);
        if (m) {
                *hp = m->hp;
                axp_model_free(m);
        }
        unlink(dst);
}

/* gemma2 (mkmodel: 2 layers, a window of 16, soft-caps 50 and 30): the file's keys, llama.cpp's
 * defaults without them (a window of 4096, caps 50 and 30), the even layers local with the
 * global layers' RoPE base; a cap that is no number is refused. */
/* granite (mkmodel: Granite 3.1 2B's scales): logit_scale missing (llama.cpp requires it), a
 * scale that is no number, the blocks' biases; without the optional scales, 1 and
 * 1/sqrt(head_dim). */
static void test_granite_keys(void) {
        const char *src = make(AXP_ARCH_GRANITE, "granite.gguf");
        axp_hparams hp = { 0 };
        loads(src, &(change) { 0 }, &hp);
        CHECK(hp.embd_scale == 12.0f && hp.residual_scale == 0.22f && hp.logit_scale == 8.0f &&
              hp.attn_scale == 0.015625f);
        loads(src, &(change) { .key = "granite.residual_scale", .remove_key = true }, &hp);
        CHECK(hp.residual_scale == 1.0f && hp.embd_scale == 12.0f);
        loads(src, &(change) { .key = "granite.attention.scale", .remove_key = true }, &hp);
        CHECK(hp.attn_scale == 0.125f);
        refused(src, &(change) { .key = "granite.logit_scale", .remove_key = true },
                "metadata 'granite.logit_scale' is missing");
        refused(src, &(change) { .key = "granite.logit_scale", .str = "8" },
                "metadata 'granite.logit_scale' is not a number");
        refused(src, &(change) { .key = "granite.embedding_scale", .value = 12 },
                "metadata 'granite.embedding_scale' is not a number");
        refused(src, &(change) { .key = "granite.attention.scale", .str = "x" },
                "metadata 'granite.attention.scale' is not a scale");
        refused(src, &(change) { .tensor = "blk.0.attn_output.bias", .op = T_ADD, .add_n = 256 },
                "tensor 'blk.0.attn_output.bias': granite's biases are not supported");
        unlink(src);
}

/* A RoPE scaling other than linear and YaRN (as llama.cpp also reads "none"), and YaRN with
 * DeepSeek's log multiplier */
static void test_rope_scaling_keys(void) {
        const char *src = make(AXP_ARCH_QWEN2, "qwen2-rope.gguf");
        refused(src, &(change) { .key = "qwen2.rope.scaling.type", .str = "dynamic" },
                "rope scaling 'dynamic' is not supported (linear, yarn)");
        axp_hparams hp = { 0 };
        loads(src, &(change) { .key = "qwen2.rope.scaling.type", .str = "yarn" }, &hp);
        CHECK(!hp.rope_yarn && hp.rope_scale == 1.0f); /* no factor: nothing to scale */
        /* a key llama.cpp reads for mistral3 only is ignored elsewhere, as there */
        loads(src, &(change) { .key = "qwen2.attention.temperature_scale", .str = "x" }, &hp);
        CHECK(hp.attn_temp_scale == 0);
        unlink(src);
        src = make(AXP_ARCH_MISTRAL3, "mistral3.gguf");
        refused(src, &(change) { .key = "mistral3.attention.temperature_scale", .str = "0.1" },
                "metadata 'mistral3.attention.temperature_scale' is not a scale");
        refused(src, &(change) { .key = "mistral3.rope.scaling.yarn_log_multiplier", .value = 1 },
                "metadata 'mistral3.rope.scaling.yarn_log_multiplier' is not a scale");
        unlink(src);
}

static void test_gemma2_keys(void) {
        const char *src = make(AXP_ARCH_GEMMA2, "gemma2.gguf");
        axp_hparams hp = { 0 };
        loads(src, &(change) { 0 }, &hp);
        CHECK_EQ_INT(hp.n_swa, 16);
        CHECK(hp.attn_softcap == 50.0f && hp.final_softcap == 30.0f);
        CHECK(axp_layer_is_swa(&hp, 0) && !axp_layer_is_swa(&hp, 1));
        CHECK(hp.rope_base_swa == hp.rope_base && hp.rope_base == 10000.0f);
        CHECK(hp.attn_scale == 1.0f / 8.0f); /* 1/sqrt(64): not Gemma 2 27B's 46 layers */
        loads(src, &(change) { .key = "gemma2.attention.sliding_window", .remove_key = true }, &hp);
        CHECK_EQ_INT(hp.n_swa, 4096);
        CHECK(axp_layer_is_swa(&hp, 0) && !axp_layer_is_swa(&hp, 1));
        loads(src, &(change) { .key = "gemma2.attn_logit_softcapping", .remove_key = true }, &hp);
        CHECK(hp.attn_softcap == 50.0f && hp.final_softcap == 30.0f);
        loads(src, &(change) { .key = "gemma2.final_logit_softcapping", .remove_key = true }, &hp);
        CHECK(hp.attn_softcap == 50.0f && hp.final_softcap == 30.0f);
        refused(src, &(change) { .key = "gemma2.attn_logit_softcapping", .str = "50" },
                "metadata 'gemma2.attn_logit_softcapping' is not a number");
        refused(src, &(change) { .key = "gemma2.final_logit_softcapping", .value = 30 },
                "metadata 'gemma2.final_logit_softcapping' is not a number");
        unlink(src);
}

/* Head counts and sizes (mkmodel: 4 heads of 64, 2 KV heads, in 256) that overflow, disagree
 * with each other, or disagree with the attention tensors: gemma3 and qwen3moe carry
 * key_length and value_length, phi3 has one fused attn_qkv [256, 4*64 + 2*2*64]. */
static void check_head_keys(enum axp_arch arch, const char *name) {
        const char *src = make(arch, name);
        char k_head[64], k_kv[64], k_key[64], k_value[64], k_rope[64];
        const char *a = axp_arch_name(arch);
        bool fused = arch == AXP_ARCH_PHI3;
        snprintf(k_head, sizeof(k_head), "%s.attention.head_count", a);
        snprintf(k_kv, sizeof(k_kv), "%s.attention.head_count_kv", a);
        snprintf(k_key, sizeof(k_key), "%s.attention.key_length", a);
        snprintf(k_value, sizeof(k_value), "%s.attention.value_length", a);
        snprintf(k_rope, sizeof(k_rope), "%s.rope.dimension_count", a);
        const char *q = fused ? "attn_qkv" : "attn_q", *k = fused ? "attn_qkv" : "attn_k";

        refused(src, &(change) { .key = k_head, .value = 0 }, "= 0 is out of range");
        refused(src, &(change) { .key = k_head, .value = UINT32_MAX }, "is out of range");
        /* phi3's files give no head size: it is the embedding's share of a head */
        refused(src, &(change) { .key = k_head, .value = 1u << 24 },
                fused ? "embedding length 256 is not a multiple of 16777216 heads" : "has shape");
        refused(src, &(change) { .key = k_head, .value = 8 }, fused ? "rope dimension 64 does not fit head size 32" : q);
        refused(src, &(change) { .key = k_head, .value = 3 },
                fused ? "embedding length 256 is not a multiple of 3 heads" : "3 heads cannot share 2 KV heads");
        refused(src, &(change) { .key = k_head, .remove_key = true }, "is missing");
        refused(src, &(change) { .key = k_kv, .value = 0 }, "= 0 is out of range");
        refused(src, &(change) { .key = k_kv, .value = 8 }, "4 heads cannot share 8 KV heads");
        refused(src, &(change) { .key = k_kv, .value = 4 }, k);
        refused(src, &(change) { .key = k_kv, .value = 1 }, k);
        /* sizes per head: both (they must agree), past any head, and one only */
        refused(src, &(change) { .key = k_key, .value = 128, .key2 = k_value, .value2 = 128 }, q);
        refused(src, &(change) { .key = k_key, .value = 32, .key2 = k_value, .value2 = 32 },
                "rope dimension 64 does not fit head size 32");
        refused(src, &(change) { .key = k_key, .value = 2048, .key2 = k_value, .value2 = 2048 },
                "head size 2048 is not supported");
        refused(src, &(change) { .key = k_key, .value = UINT32_MAX, .key2 = k_value, .value2 = UINT32_MAX },
                "is out of range");
        refused(src, &(change) { .key = k_key, .value = 32, .key2 = k_rope, .value2 = 32 },
                fused ? q : "key length 32 differs from value length 64");
        refused(src, &(change) { .key = k_value, .value = 128 }, "key length 64 differs from value length 128");
        refused(src, &(change) { .key = k_rope, .value = 128 }, "rope dimension 128 does not fit head size 64");
        if (!fused)
                refused(src, &(change) { .tensor = "blk.1.attn_k_norm.weight", .op = T_SHRINK }, "attn_k_norm");
        refused(src, &(change) { .tensor = fused ? "blk.0.attn_qkv.weight" : "blk.0.attn_v.weight", .op = T_SHRINK },
                fused ? "attn_qkv" : "attn_v");
        unlink(src);
}

static void test_head_keys(void) {
        check_head_keys(AXP_ARCH_GEMMA3, "gemma3-heads.gguf");
        check_head_keys(AXP_ARCH_PHI3, "phi3-heads.gguf");
        check_head_keys(AXP_ARCH_QWEN3MOE, "qwen3moe-heads.gguf");
}

/* Phi-3.5-mini and Phi-4-mini carry LongRoPE factors (rope_factors_long/short, one per rotated
 * pair) and an attention factor: one set without the other, a set of the wrong length, a
 * zero divisor (every angle infinite), rope_freqs besides them, a factor that is no number. */
static void test_longrope_keys(void) {
        const char *src = make_longrope(AXP_ARCH_PHI3, "phi3.gguf", 256);
        refused(src, &(change) { .tensor = "rope_factors_short.weight", .op = T_DROP },
                "tensor 'rope_factors_short.weight' is missing (LongRoPE needs both sets of factors)");
        refused(src, &(change) { .tensor = "rope_factors_long.weight", .op = T_DROP },
                "tensor 'rope_factors_long.weight' is missing (LongRoPE needs both sets of factors)");
        refused(src, &(change) { .tensor = "rope_factors_long.weight", .op = T_SHRINK },
                "tensor 'rope_factors_long.weight' has shape [31], expected [32]");
        refused(src, &(change) { .tensor = "rope_factors_short.weight", .op = T_ZERO },
                "tensor 'rope_factors_short.weight' holds 0 at 0: a frequency divisor must be positive");
        refused(src, &(change) { .tensor = "rope_freqs.weight", .op = T_ADD, .add_n = 32 },
                "both rope_freqs and LongRoPE factors");
        refused(src, &(change) { .key = "phi3.rope.scaling.attn_factor", .value = 2 },
                "metadata 'phi3.rope.scaling.attn_factor' is not a number");
        refused(src, &(change) { .key = "phi3.rope.scaling.original_context_length", .value = 0 },
                "= 0 is out of range");
        unlink(src);
}

int main(void) {
        if (!mkdtemp(tmpdir))
                TEST_SKIP("cannot make a temporary folder");
        RUN(test_moe_keys);
        RUN(test_window_keys);
        RUN(test_gemma2_keys);
        RUN(test_granite_keys);
        RUN(test_rope_scaling_keys);
        RUN(test_head_keys);
        RUN(test_longrope_keys);
        rmdir(tmpdir);
        TEST_EXIT();
}
