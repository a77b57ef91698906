/* SPDX-License-Identifier: MIT */
/* libFuzzer target: tool calling as the engine does it, from what a request brings and what
 * the model writes. The first input byte picks the chat family (Llama 3, ChatML, Mistral's
 * forms, Granite, Qwen3-Coder) and tool_choice; the rest, split at its first NUL, is a tools list (JSON) and
 * an answer (on Granite also the template, whose system prompt it writes: no system given). The tools list is parsed; if it is taken, its grammar is written and parsed, and a
 * conversation with an earlier call and its result (the answer as both) is checked and
 * formatted. The answer is read back as a call. Each must succeed or fail with a message,
 * within the sanitizers. */
#include <stdlib.h>
#include <string.h>

#include "model/grammar.h"
#include "model/tools.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const axp_chat_family families[] = {
        AXP_CHAT_LLAMA3, AXP_CHAT_CHATML, AXP_CHAT_MISTRAL, AXP_CHAT_MISTRAL_V3, AXP_CHAT_MISTRAL_V7, AXP_CHAT_GRANITE,
        AXP_CHAT_QWEN3_CODER,
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (size < 1)
                return 0;
        axp_chat_family f = families[(data[0] & 0x7f) % (sizeof(families) / sizeof(families[0]))];
        /* the top bit: required; else the next: none; else auto */
        axp_tool_choice choice = data[0] & 0x80 ? AXP_TOOL_CHOICE_REQUIRED
                               : data[0] & 0x40 ? AXP_TOOL_CHOICE_NONE
                                                : AXP_TOOL_CHOICE_AUTO;
        const char *rest = (const char *) data + 1;
        size_t n = size - 1;
        const char *nul = memchr(rest, 0, n);
        size_t tools_len = nul ? (size_t) (nul - rest) : n;
        /* the answer as a string (the engine's text is NUL-terminated) */
        size_t answer_len = nul ? n - tools_len - 1 : 0;
        char *answer = malloc(answer_len + 1);
        if (!answer)
                return 0;
        memcpy(answer, nul ? nul + 1 : "", answer_len);
        answer[answer_len] = 0;
        const char *tmpl = f == AXP_CHAT_GRANITE ? answer : NULL;
        const char *system = f == AXP_CHAT_GRANITE ? NULL : "You help.";

        axp_tools *t = NULL;
        axp_error err = {};
        if (axp_tools_parse(rest, tools_len, &t, &err) == 0) {
                char *gbnf = NULL, *text = NULL;
                axp_grammar *g = NULL;
                if (axp_tools_grammar(f, tmpl, t, choice, &gbnf, &err) == 0 &&
                    axp_grammar_parse(gbnf, strlen(gbnf), &g, &err) == 0)
                        axp_grammar_free(g);
                free(gbnf);
                const axp_chat_msg msgs[] = {
                        { .role = "user", .content = "hi" },
                        { .role = AXP_ROLE_TOOL_CALL, .content = answer },
                        { .role = AXP_ROLE_TOOL, .content = answer },
                        { .role = "user", .content = answer },
                };
                if (axp_tools_check_turns(msgs, 4, &err) == 0 &&
                    axp_tools_format_chat(f, tmpl, t, system, msgs, 4, &text, &err) == 0)
                        free(text);
        }
        char *call = NULL;
        /* the tools type the XML form's arguments */
        if (axp_tools_read_call(f, t, answer, answer_len, &call) == 1)
                free(call);
        axp_tools_free(t);
        free(answer);
        return 0;
}
