/* SPDX-License-Identifier: MIT */
/* Chat templates: the family is detected from tokenizer.chat_template (or, when the model has
 * none, from the special tokens of its vocabulary), and system/user/assistant turns are
 * formatted as that family expects. The result contains special-token text and is tokenized
 * with AXP_TOK_PARSE_SPECIAL. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "tokenizer.h"

typedef enum axp_chat_family {
        AXP_CHAT_RAW,     /* no template: the text as is */
        AXP_CHAT_LLAMA3,  /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
        AXP_CHAT_CHATML,  /* <|im_start|>role\n...<|im_end|>\n (qwen) */
        AXP_CHAT_MISTRAL, /* [INST] ... [/INST] (Mistral-7B-Instruct v0.1, v0.2) */
        AXP_CHAT_LLAMA2,  /* [INST] <<SYS>>\n...\n<</SYS>>\n\n ... [/INST] */
        AXP_CHAT_PHI3,    /* <|role|>\n...<|end|>\n (Phi-3, Phi-3.5, Phi-4-mini) */
        AXP_CHAT_GEMMA,   /* <start_of_turn>role\n...<end_of_turn>\n (Gemma 2 and 3) */
        /* Mistral's later templates ("v1", "v3", "v3-tekken", "v7", "v7-tekken" as llama.cpp
         * names them), which differ in the spaces around [INST] and where the system prompt goes */
        AXP_CHAT_MISTRAL_V1,        /* " [INST] " ... " [/INST]", system before the first user */
        AXP_CHAT_MISTRAL_V3,        /* "[INST] " ... "[/INST]", system in the last user turn */
        AXP_CHAT_MISTRAL_V3_TEKKEN, /* "[INST]" ... "[/INST]" (Mistral-Nemo), likewise */
        AXP_CHAT_MISTRAL_V7,        /* "[SYSTEM_PROMPT] ...[/SYSTEM_PROMPT][INST] ...[/INST]" */
        AXP_CHAT_MISTRAL_V7_TEKKEN, /* "[SYSTEM_PROMPT]...[/SYSTEM_PROMPT][INST]...[/INST]" */
        AXP_CHAT_GRANITE, /* <|start_of_role|>role<|end_of_role|>...<|end_of_text|>\n (Granite 3) */
        AXP_CHAT_TULU,    /* <|role|>\n...\n, answers ending <|endoftext|> (Tülu 3, OLMo 2) */
        AXP_CHAT_EXAONE3, /* [|role|]...[|endofturn|]\n, questions ending \n (EXAONE 3.x) */
        AXP_CHAT_QWEN3_CODER, /* ChatML's turns; tool calls in XML, <function=NAME> (Qwen3-Coder) */
        AXP_CHAT__COUNT,
} axp_chat_family;

/* One of the [INST] families of Mistral's own templates (not Llama 2's)? */
static inline bool axp_chat_is_mistral(axp_chat_family f) {
        return f == AXP_CHAT_MISTRAL || (f >= AXP_CHAT_MISTRAL_V1 && f <= AXP_CHAT_MISTRAL_V7_TEKKEN);
}

typedef struct axp_chat_msg {
        const char *role; /* "system", "user", "assistant" */
        const char *content;
} axp_chat_msg;

axp_chat_family axp_chat_detect(const char *chat_template, const axp_tokenizer *tok);
/* Does the file carry a template that none of the families matches? Its prompts are then
 * used raw (axp_chat_detect says AXP_CHAT_RAW), which AXP_CHAT_UNKNOWN_WARNING tells the user:
 * the command line on stderr, the engine in its log once per model load. A family's name
 * ("raw" included) is understood; no template at all is not a warning. */
bool axp_chat_template_unknown(const char *chat_template);
#define AXP_CHAT_UNKNOWN_WARNING                                                                 \
        "the model's chat template (tokenizer.chat_template) is not one agentxpu recognises "   \
        "(Llama 3, ChatML, Gemma, Phi-3, Mistral, Llama 2); prompts are used raw, without a "   \
        "template"
const char *axp_chat_family_name(axp_chat_family f);

/* Thinking (Qwen3, SmolLM3, DeepSeek-R1's distills, ...): whether the template writes <think>
 * at all, and the text its generation prompt adds to turn thinking off where it has that
 * switch (enable_thinking false: Qwen3's "<think>\n\n</think>\n\n", SmolLM3's
 * "<think>\n\n</think>\n", the template's own empty think block, read from it; malloc'd),
 * else NULL (a template that always thinks, or never does). */
bool axp_chat_thinks(const char *chat_template);
char *axp_chat_no_think(const char *chat_template);
/* Whether the template's generation prompt opens the think block itself (a literal ending in
 * "<think>" after add_generation_prompt, as QwQ's and Qwen3's thinking-only models' write it)
 * and the engine writes it (not a template used raw): the answer may begin inside the
 * thinking, without "<think>". */
bool axp_chat_think_opens(const char *chat_template);
/* That opening as the template writes it ("<think>\n"), or NULL (none, a template used raw
 * because its turns are none of our families', or out of memory). */
char *axp_chat_think_open(const char *chat_template);
/* A chat prompt's end as the template writes it for the thinking asked (think: 1 on, 0 off,
 * -1 as the template does), on its text (which ends with the generation prompt): off appends
 * axp_chat_no_think's switch (nothing for a template that never thinks), on needs a template
 * that thinks; on and the template's default append the template's opening of the block where
 * its generation prompt opens it (axp_chat_think_open), as it renders it; what the template
 * cannot do is -EINVAL saying so. */
int axp_chat_apply_think(const char *chat_template, int think, char **text, axp_error *err);

/* The Jinja string literal (quoted with ' or ") that starts at p or after blanks, unescaped
 * (\n, \t, \\, \', \"); NULL where there is none or out of memory. Malloc'd. */
char *axp_jinja_literal(const char *p);

/* Format messages; if add_generation_prompt, end with the assistant turn's opening. Returns
 * a malloc'd string. BOS is not included (the tokenizer adds it as the vocab says). */
char *axp_chat_format(axp_chat_family f, const axp_chat_msg *msgs, size_t n,
                      bool add_generation_prompt);

/* A later turn of a conversation whose text so far ends with an assistant's answer as the
 * model wrote it: the text the template puts between that answer and the next turns (the
 * family's end-of-turn marker first when `close_answer`, the answer having been cut short
 * before the model wrote it), then msgs, then the assistant turn's opening. With what came
 * before, it reads as axp_chat_format of the whole conversation. malloc'd; NULL: out of
 * memory. */
char *axp_chat_format_next(axp_chat_family f, const axp_chat_msg *msgs, size_t n,
                           bool close_answer);
