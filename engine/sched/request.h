/* SPDX-License-Identifier: MIT */
/* What a request is to the scheduler and to the engine's callers: its kind, its state and
 * what it cost (the engine's API, engine.h, hands these on). */
#pragma once

#include <stdint.h>

#include "model/generate.h"

typedef enum axp_kind {
        AXP_REACTIVE,
        AXP_PROACTIVE,
} axp_kind;

const char *axp_kind_name(axp_kind k);

typedef enum axp_req_state {
        AXP_STATE_QUEUED,
        AXP_STATE_PREFILL,
        AXP_STATE_DECODE,
        AXP_STATE_FINISHED,
} axp_req_state;

const char *axp_req_state_name(axp_req_state s);

typedef struct axp_req_stats {
        uint32_t prompt_tokens;   /* tokens of this turn's prompt, after templating */
        uint32_t prefill_tokens;  /* tokens actually prefilled (fewer on a flow's later turns) */
        uint32_t generated_tokens;
        uint32_t preemptions;
        double queue_wait_s;      /* submit -> first kernel */
        double ttft_s;            /* submit -> first token */
        double tpot_s;            /* mean time per output token after the first */
        double latency_s;         /* submit -> finished */
        char error[256];          /* AXP_FINISH_ERROR: why */
        /* A request with tools, in its finished callback only (NULL otherwise; the strings are
         * the engine's until the callback returns): "tool_calls" when the answer is a call,
         * else the finish reason's name; and the call, {"name":...,"arguments":{...}}. */
        const char *finish_reason;
        const char *tool_call;
        bool prompt_cut;          /* fill in the middle fitted, or an embedding truncated: text was left out */
        /* the stop string that ended the answer (AXP_FINISH_STOP), in the finished callback
         * only (the engine's until it returns); NULL where none did */
        const char *stop_word;
} axp_req_stats;
