/* SPDX-License-Identifier: MIT */
/* The engine as the daemon and the command line use it: a model, its devices bound to roles,
 * and the scheduler (DESIGN §5) on a thread of its own. Nothing here knows about D-Bus.
 *
 * Threads: submit/cancel/flow calls may come from any thread. The token, finished and
 * status_changed callbacks run on the engine's scheduler thread and must only hand the data
 * on (copy it, queue it, write an eventfd); they must not call back into the engine. Nothing
 * the engine returns points into its state: what a getter gives is a copy or a constant. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/embedding.h"
#include "model/model-info.h"
#include "model/sampler.h"
#include "base/util.h"
#include "sched/request.h"

typedef struct axp_engine axp_engine;

/* The model in place, for clients that describe it (ModelInfo, Ollama's /api/show). */
typedef struct axp_model_desc {
        char arch[32];           /* general.architecture */
        uint64_t parameters;     /* elements of every tensor */
        uint64_t file_bytes;     /* the size of its file */
        int n_ctx;               /* positions a request may use (ContextSize= or the model's) */
        int n_embd;              /* the width of its hidden states: an embedding's length */
        char file_type[16];      /* llama.cpp's name of general.file_type ("Q4_K_M"), "" if unknown */
        char chat[24];           /* the chat template's family (model/chat.h), "raw" for none */
        bool tools;              /* the template takes tools (options tools, tool_choice) */
        bool fim;                /* the vocabulary has fill-in-the-middle tokens (option suffix) */
        bool thinks;             /* the template writes think blocks (Qwen3, SmolLM3, R1's distills) */
        bool think_opens;        /* its generation prompt opens the block (model/chat.h) */
} axp_model_desc;

/* What the engine is doing, as one self-contained snapshot. */
typedef struct axp_engine_status {
        unsigned queued_reactive;
        unsigned queued_proactive;
        unsigned running;
        char model[256];         /* the model's name, "" if none (cut at a character boundary) */
        unsigned model_serial;   /* counts the models put in place: a reload of the same file
                                  * changes it, though not the name */
        char policy[16];         /* "agentxpu", "fcfs" or "serial" */
        axp_model_desc desc;     /* zero while no model is in place; changes only with model_serial */
        uint64_t kv_memory;      /* the KV-cache budget in bytes (kv_memory below, "auto"
                                  * resolved for the model in place; 0 without a model) */
        uint64_t kv_memory_used; /* what requests and open flows hold of it now */
        uint64_t kv_memory_cached; /* what the prompt cache holds of it (given back first) */
} axp_engine_status;

typedef struct axp_engine_config {
        const char *model_path;  /* NULL: start without a model (NoModel until LoadModel) */
        const char *policy;      /* "agentxpu" (default), "fcfs", "serial" */
        int n_threads;           /* CPU threads, 0: one per core */
        const char *static_dev;  /* device for the static (NPU) role: "auto", "cpu", "opencl[:N]", "npu" */
        const char *dynamic_dev; /* device for the dynamic (iGPU) role: "auto", "cpu", "opencl[:N]" */
        double preempt_bound_s;  /* kernel-time bound that sets S_chk (0.1) */
        int b_cap;               /* proactive piggyback cap while reactive requests decode (3) */
        int max_batch;           /* decode batch limit (32) */
        double aging_s;          /* proactive age threshold for promotion (30) */
        double proactive_duty;   /* duty-cycle budget of proactive work on the dynamic role (0.5) */
        /* The CPU guard. proactive_cpu_share: share of the CPU's time proactive work may take
         * while other processes keep the CPU fully busy (0 < share <= 1; 1: no pressure
         * guard); it takes 1 - pressure x (1 - share). proactive_idle: steps of proactive
         * requests only run on the CPU at an idle scheduling class (true). */
        double proactive_cpu_share;
        bool proactive_idle;
        double piggyback_slack;  /* one device for both roles: share by which a reactive decode
                                  * step may grow to carry proactive work (0: only what the
                                  * memory-bound step hides); < 0: none */
        int n_ctx;               /* per-request context limit, 0: the model's (capped at 4096) */
        const char *calib_cache; /* file caching device calibration, NULL: none */
        const char *kv_type;     /* each request's KV cache: "f16" (default, also NULL), "f32" or "q8_0" */
        /* Bytes of KV cache every request and open flow may hold together (KVMemory=); 0:
         * auto, half of what the model's weights leave of the machine's physical memory, at
         * least 256 MiB (heg/kv-budget.h), chosen again at each model load. A request reserves
         * the cache of min(context, prompt + max_tokens) positions when it is submitted (a
         * flow's turn: of the positions the flow may reach, and the flow keeps what its cache
         * holds between turns) and gives it back when it finishes. UINT64_MAX: no limit. */
        uint64_t kv_memory;
        /* The prompt cache (heg/prefix-cache.h): how many finished requests' KV caches are
         * kept, so that a request beginning as one of them did prefills only the rest
         * (PromptCache=; default 8, 0: none). Up to half the KV budget, given back first. */
        int prompt_cache;
#define AXP_PROMPT_CACHE_MAX 64

        /* Told, on the engine's thread, each time the status changes: once before
         * axp_engine_new returns, after every change of the queues, the model or the policy,
         * and before the call that changed it (submit, cancel, set_policy, load_model...)
         * returns. The snapshot is the callee's to copy. NULL: not told. */
        void (*status_changed)(void *userdata, const axp_engine_status *status);
        void *status_userdata;
} axp_engine_config;

void axp_engine_config_default(axp_engine_config *c);

int axp_engine_new(const axp_engine_config *c, axp_engine **ret, axp_error *err);
/* Cancels every request (their finished callbacks run), stops the threads, frees. */
void axp_engine_free(axp_engine *e);
static inline void axp_engine_freep(axp_engine **e) {
        axp_engine_free(*e);
}

/* A turn of a conversation: role "system", "user" or "assistant", and its text. */
typedef struct axp_turn {
        const char *role;
        const char *content;
} axp_turn;

typedef struct axp_request_opts {
        uint32_t max_tokens;          /* 0: default (256) */
        axp_sampler_params sampling;
        const char *const *stop;      /* copied */
        size_t n_stop;
        const char *system;           /* system prompt (chat template); NULL: none */
        /* the conversation's earlier turns, before the prompt (which is the user's new turn),
         * rendered with the chat template in their roles (system, user, assistant; copied at
         * submission). On a flow's first turn they follow the system prompt; on a later turn
         * they follow the flow's last answer. Not with raw. Also tool_call and tool turns
         * (model/tools.h), on a first turn only; the prompt may then be "" after a tool
         * result. Without tools they are written as the template writes them with none, and
         * the answer is text as with tool_choice "none" (or follows grammar or json_schema). */
        const axp_turn *messages;
        size_t n_messages;
        bool raw;                     /* no chat template */
        /* thinking (think_set: asked for; else as the template does): off adds the template's
         * own switch to the generation prompt (model/chat.h: axp_chat_no_think), on needs a
         * template that thinks; a template that always thinks cannot be turned off, one that
         * never does cannot be turned on: -EINVAL. Not with raw, a suffix or an embedding. */
        bool think_set, think;
        uint64_t flow;                /* 0: none */
        /* constrained decoding (model/grammar.h), at most one; NULL: none. Invalid or
         * unsupported input is -EINVAL at submission, saying what is wrong. */
        const char *grammar;          /* GBNF-style, start rule `root` */
        const char *json_schema;      /* JSON Schema, as text */
        /* tool calls (model/tools.h): OpenAI's function list as JSON text, rendered into the
         * chat template; the answer is free text or one call (neither grammar nor json_schema
         * with it). tool_choice: NULL or "auto" (text or a call), "required" (a call), or
         * "none" (the same prompt, text that cannot be a call; also without tools). The
         * finished callback's stats say which (finish_reason, tool_call). */
        const char *tools;
        const char *tool_choice;
        /* Whose entries of the prompt cache this request may take and leave (the daemon: the
         * caller's uid): requests of one scope never start from another's, since what a
         * cache saves shows in their statistics and their time to first token. 0 is a scope
         * like any other. */
        uint64_t cache_scope;
        /* Fill in the middle (code completion): the prompt is the text before the cursor and
         * this the text after it; the answer is what goes between, the prompt llama.cpp's
         * /infill one (axp_tokenize_fim). NULL: none. Not with messages, a system prompt,
         * tools or a flow; -EINVAL for a model without FIM tokens. With it: the text typed at
         * the cursor (after the prompt, tokenized on its own), other files' chunks before the
         * file, and whether to fit the prompt as llama-server's /infill does (max_tokens as its
         * n_predict; else a prompt over the context is -E2BIG). */
        const char *suffix;
        const char *fim_middle;
        const axp_fim_chunk *fim_extra;
        size_t n_fim_extra;
        bool fim_fit;
        /* Each generated token's log-probability and those of the top_logprobs (at most
         * AXP_LOGPROBS_MAX) most likely tokens at its step (model/generate.h), to
         * cbs.logprobs. */
        bool logprobs;
        uint32_t top_logprobs;
        /* An embedding of the prompt in place of an answer (model/embedding.h): the prompt as
         * it is (no chat template; BOS and EOS where the vocabulary adds them), run through the
         * model once, its tokens' final hidden states pooled (`pooling`; AXP_POOLING_MODEL:
         * the model's) and, with embed_normalize, scaled to unit length; to cbs.embedding,
         * then finished with AXP_FINISH_STOP and no generated tokens. Scheduled as any
         * prefill of its kind. Not with a flow, earlier turns, a system prompt, tools, a
         * grammar or schema, a suffix or logprobs (-EINVAL); it neither takes from nor leaves
         * anything in the prompt cache (every token's state is needed). With embed_truncate a
         * prompt beyond the context loses its end to fit (stats.prompt_cut), else -E2BIG. */
        bool embed;
        enum axp_pooling pooling;
        bool embed_normalize;
        bool embed_truncate;
} axp_request_opts;

void axp_request_opts_default(axp_request_opts *o);

typedef struct axp_request_cbs {
        /* A piece of text (whole UTF-8 characters, stop strings removed). */
        void (*token)(void *userdata, uint64_t id, const char *text, size_t len);
        /* With opts.logprobs: the records of the tokens whose text the next token callback
         * brings (or that made none), in order, before it; `tok` gives their bytes
         * (axp_engine_token_piece). Both valid during the call only. */
        void (*logprobs)(void *userdata, uint64_t id, const axp_token_logprob *lp, size_t n,
                         const axp_tokenizer *tok);
        /* With opts.embed: the embedding, n floats (the model's width), once, before finished;
         * valid during the call only. */
        void (*embedding)(void *userdata, uint64_t id, const float *v, size_t n);
        /* Always called exactly once per accepted request, last. */
        void (*finished)(void *userdata, uint64_t id, axp_finish_reason reason,
                         const axp_req_stats *stats);
        void *userdata;
} axp_request_cbs;

/* The bytes token `id` stands for (axp_token_to_piece: control tokens give none), in buf;
 * their number, or the negative size needed where cap is too small. */
int axp_engine_token_piece(const axp_tokenizer *tok, int32_t id, char *buf, int cap);

/* Tokenizes and queues a request. Errors (nothing queued, no callback): -EINVAL (bad
 * options), -E2BIG (prompt beyond the context, or a request whose KV cache could not fit in
 * the whole kv_memory budget), -ENOENT (unknown flow), -EBUSY (the flow has a request in
 * flight, or the kv_memory budget is full now: try again later), -ENOMEDIUM (no model
 * loaded). */
int axp_engine_submit(axp_engine *e, axp_kind kind, const char *prompt,
                      const axp_request_opts *opts, const axp_request_cbs *cbs,
                      uint64_t *ret_id, axp_error *err);
/* Cancel a request; its finished callback follows with AXP_FINISH_CANCELLED. -ENOENT if
 * unknown or already finished. */
int axp_engine_cancel(axp_engine *e, uint64_t id);

/* A flow keeps its KV cache between turns. */
int axp_engine_flow_open(axp_engine *e, const char *system, bool raw, uint64_t *ret_flow,
                         axp_error *err);
int axp_engine_flow_close(axp_engine *e, uint64_t flow);

/* Forget what the prompt cache keeps of requests of `scope` (axp_request_opts.cache_scope: the
 * daemon's is the user's): its entries go, and its requests still running neither share their
 * caches from now on nor leave one when they end. Flows are not touched (their owners close
 * them). *ret_n: the entries that went. -ENOMEM where the engine's thread could not be asked. */
int axp_engine_forget_prompt_cache(axp_engine *e, uint64_t scope, uint32_t *ret_n);

/* Snapshot of a request's state and stats; -ENOENT if unknown. */
int axp_engine_request_info(axp_engine *e, uint64_t id, axp_req_state *ret_state,
                            axp_req_stats *ret_stats);

/* The status now, copied on the engine's thread (a round trip to it: to follow the status,
 * take status_changed instead). */
void axp_engine_status_get(axp_engine *e, axp_engine_status *ret);

/* The policy's name: a constant string. */
const char *axp_engine_policy(axp_engine *e);
int axp_engine_set_policy(axp_engine *e, const char *policy, axp_error *err);
/* Replace the model: new requests wait; requests in flight finish first. */
int axp_engine_load_model(axp_engine *e, const char *path, axp_error *err);

typedef struct axp_device_info {
        char name[128];
        const char *kind;    /* "cpu", "igpu", "dgpu", "npu", "other" */
        const char *backend; /* "cpu", "opencl", "levelzero", "sim" */
        bool can_run;
        bool role_static, role_dynamic;
        uint64_t memory_bytes;
        double busy_s;       /* time spent running kernels */
        /* of which: prefill kernels of reactive / proactive requests' own chunks, and steps
         * (decode, with prompt slices riding) with a reactive member / of proactive requests
         * only; and how many steps of each began */
        double prefill_reactive_s, prefill_proactive_s, steps_reactive_s, steps_proactive_s;
        uint64_t steps_reactive, steps_proactive;
} axp_device_info;

/* Fills up to cap entries; returns the number of devices. */
int axp_engine_devices(axp_engine *e, axp_device_info *ret, int cap);

/* The CPU guard's state: how busy other processes keep the CPU and what proactive work may
 * take of it now. */
typedef struct axp_engine_cpu_guard {
        const char *pressure_source; /* "psi", "stat", "fake", "none" */
        double pressure;             /* last sampled (0 while the engine has been idle since
                                      * it started) */
        double proactive_share;      /* share of the CPU's time proactive work may take now
                                      * (1: not limited) */
        double share_setting;        /* proactive_cpu_share, what it falls to at full pressure */
        const char *priority;        /* proactive steps' scheduling class on the CPU: "idle"
                                      * (SCHED_IDLE), "nice" (nice 19) or "normal" */
} axp_engine_cpu_guard;

void axp_engine_cpu_guard_get(axp_engine *e, axp_engine_cpu_guard *ret);
