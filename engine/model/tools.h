/* SPDX-License-Identifier: MIT */
/* Tool calls: OpenAI's function list rendered into the model's chat template, a grammar that
 * holds the answer to free text or a call of one of the tools with arguments matching its
 * parameters schema, and the call read back from the answer.
 *
 * Families that take tools, and how a call is written (what the model was trained on):
 *   llama3   Llama 3.1+ (a template that mentions tools): the tools as JSON in the first
 *            user message; a call is {"name": "NAME", "parameters": {...}}.
 *   chatml   Qwen2.5/3 (a template with <tools> or <tool_call>): the tools in the system
 *            prompt between <tools> and </tools>; a call is
 *            <tool_call>\n{"name": "NAME", "arguments": {...}}\n</tool_call>.
 *   mistral  (a template with [AVAILABLE_TOOLS], or a vocabulary with that token): the tools
 *            in [AVAILABLE_TOOLS] [...][/AVAILABLE_TOOLS] before the turn; a call is
 *            [TOOL_CALLS] [{"name": "NAME", "arguments": {...}}].
 *   qwen3-coder  Qwen3-Coder (a ChatML template with <function= and <parameter=): the tools
 *            in XML in the system prompt (its own where none is given), as its template lists
 *            them; a call is <tool_call>\n<function=NAME>\n then each argument as
 *            <parameter=KEY>\nVALUE\n</parameter>\n, then </function>\n</tool_call>, a string
 *            argument as its text, others as JSON; the grammar takes the schema's properties
 *            in its order, the required ones always (a string's own constraints other than
 *            enum and const are not held), and the call read back types each argument by
 *            its schema.
 *   granite  Granite 3.x (a template with available_tools, or a vocabulary with
 *            <|tool_call|>): the tools in an available_tools turn after the system prompt,
 *            which where none is given is the template's own, dated, saying how to call; a
 *            call is <|tool_call|>[{"name": "NAME", "arguments": {...}}].
 *
 * The grammar (tool_choice "auto"): root ::= call | text, where text is any text that does not
 * begin with the call's first character ('{', '<', '['), so an answer is one or the other from
 * its first byte; text ends with the end of generation token (or max_tokens), a call when its
 * last byte is written. tool_choice "required": root ::= call. Only one call per answer.
 * tool_choice "none": the prompt as with "auto", root ::= text, and no call is read back; where
 * the call opens with a marker (chatml's <tool_call>, Mistral's [TOOL_CALLS], Granite's
 * <|tool_call|>) the text is any text without it, anywhere (Qwen's <tool_call> is a token with
 * those bytes, which the model could write after a few words; Mistral's and Granite's are
 * control tokens no grammar lets through, but their letters could spell them), else (llama3's
 * plain {"name": ...}) the text of "auto". */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "base/util.h"
#include "chat.h"

#define AXP_TOOLS_MAX_BYTES (64 * 1024)
#define AXP_TOOLS_MAX 64

typedef struct axp_tools axp_tools;

/* Parse a tools list (OpenAI's shape: [{"type": "function", "function": {"name": ...,
 * "description": ..., "parameters": {JSON Schema}}}]). Errors (-EINVAL) say what is wrong. */
int axp_tools_parse(const char *json, size_t len, axp_tools **ret, axp_error *err);
void axp_tools_free(axp_tools *t);
static inline void axp_tools_freep(axp_tools **t) {
        axp_tools_free(*t);
}
size_t axp_tools_count(const axp_tools *t);

/* Does this model's template take tools? (The family as axp_chat_detect says.) */
bool axp_chat_takes_tools(axp_chat_family f, const char *chat_template, const axp_tokenizer *tok);

/* Roles of earlier turns with tools, besides system, user and assistant: an assistant's call,
 * its content {"name": NAME, "arguments": {...}} (the arguments may also be a string holding
 * the JSON object, as OpenAI writes them), and the result of the call before it, its content
 * the tool's output as text. Each family writes them as its template does: llama3 the call as
 * the assistant's JSON and the result in an "ipython" turn; chatml <tool_call> and, in a user
 * turn, <tool_response>; mistral [TOOL_CALLS] and [TOOL_RESULTS] with a call id (v7's newer
 * templates: [TOOL_CALLS]name[ARGS]{...}, with [CALL_ID] where the template has it); granite a
 * run of calls as one <|tool_call|>[...] answer and each result in a turn of its own (3.1's
 * role tool_response, later templates' tool). */
#define AXP_ROLE_TOOL_CALL "tool_call"
#define AXP_ROLE_TOOL "tool"

/* Check earlier turns' roles and tool_call contents; a tool turn follows a tool_call. */
int axp_tools_check_turns(const axp_chat_msg *msgs, size_t n, axp_error *err);

/* The conversation (the system prompt, then msgs: system, user, assistant, tool_call and tool
 * turns) with the tools, as the family's template renders it with add_generation_prompt. The
 * template's text (NULL: none) tells the forms of Mistral's v7 family apart. t NULL: as the
 * template renders it without tools (no tool list; the calls and results all the same). */
int axp_tools_format_chat(axp_chat_family f, const char *chat_template, const axp_tools *t, const char *system,
                          const axp_chat_msg *msgs, size_t n, char **ret, axp_error *err);

typedef enum axp_tool_choice {
        AXP_TOOL_CHOICE_AUTO,     /* text or a call */
        AXP_TOOL_CHOICE_REQUIRED, /* a call */
        AXP_TOOL_CHOICE_NONE,     /* text: the tools are in the prompt, no call in the answer */
} axp_tool_choice;

/* tool_choice's value: NULL or "auto", "required", "none"; anything else -EINVAL naming the
 * three. */
int axp_tool_choice_from_string(const char *s, axp_tool_choice *ret, axp_error *err);

/* The grammar for the answer (see above). */
int axp_tools_grammar(axp_chat_family f, const char *chat_template, const axp_tools *t, axp_tool_choice choice,
                      char **ret, axp_error *err);

/* If the answer is a complete call, *ret_call = {"name":"NAME","arguments":{...}} (compact
 * JSON, malloc'd) and 1; else 0 (text, or a call cut short); -ENOMEM. t: the tools the
 * request gave, which type the arguments of qwen3-coder's XML form (NULL: each is JSON where
 * it parses, else a string); the other forms' arguments are JSON already. */
int axp_tools_read_call(axp_chat_family f, const axp_tools *t, const char *text, size_t len, char **ret_call);

/* Everything a request with tools needs: checks the family takes tools, parses the tools,
 * formats the conversation (the earlier turns, then the user's text; an empty text after a
 * tool result adds no user turn) and writes the grammar. tool_choice: NULL or "auto",
 * "required" or "none". tools_json NULL (with "none" only): earlier calls and results without
 * a tool list, the answer text. *ret_family: the family to read the answer's call in
 * (axp_tools_read_call); AXP_CHAT_RAW with "none", whose answer holds no call. ret_tools (or
 * NULL): the parsed tools, to read the call with (NULL without tools). */
int axp_tools_prepare(const char *chat_template, const axp_tokenizer *tok, const char *tools_json,
                      const char *tool_choice, const char *system, const axp_chat_msg *earlier,
                      size_t n_earlier, const char *user, char **ret_text, char **ret_grammar,
                      axp_chat_family *ret_family, axp_tools **ret_tools, axp_error *err);
