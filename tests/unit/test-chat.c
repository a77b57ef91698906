/* SPDX-License-Identifier: MIT */
/* Chat templates: family detection from real templates and from vocabularies, and the exact
 * text each family renders (as the models' Jinja templates do, add_generation_prompt on). */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "model/chat.h"
#include "model/grammar.h"
#include "model/tools.h"
#include "test.h"
#include "tok-util.h"

/* Shortened from the models' tokenizer_config.json; the markers detection looks at are kept. */
static const char tmpl_llama3[] =
        "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
        "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | "
        "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
        "{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
        "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";
static const char tmpl_qwen2[] =
        "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
        "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}{{'<|im_start|>' "
        "+ message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if "
        "add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
static const char tmpl_mistral[] =
        "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
        "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
        "user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ "
        "'[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
        "{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant "
        "roles are supported!') }}{% endif %}{% endfor %}";
static const char tmpl_mistral_v3[] =
        "{%- if messages[0][\"role\"] == \"system\" %}...{%- if tools is not none and (message == "
        "user_messages[-1]) %}{{- \"[AVAILABLE_TOOLS] [\" }}...{{- \"[INST] \" + "
        "message[\"content\"] + \"[/INST]\" }}";
/* Mistral's later templates (their user/assistant/system lines, as the GGUF files carry them) */
static const char tmpl_mistral_v1[] =
        "{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = messages[0]['content'] %}"
        "...{{- bos_token }}...{%- if loop.first and system_message is defined %}\n            {{- ' [INST] ' "
        "+ system_message + '\\n\\n' + message['content'] + ' [/INST]' }}\n        {%- else %}\n            "
        "{{- ' [INST] ' + message['content'] + ' [/INST]' }}...{{- ' ' + message['content'] + eos_token}}";
static const char tmpl_mistral_nemo[] =
        "{%- if messages[0][\"role\"] == \"system\" %}...{{- \"[AVAILABLE_TOOLS][\" }}...{%- if loop.last "
        "and system_message is defined %}\n            {{- \"[INST]\" + system_message + \"\\n\\n\" + "
        "message[\"content\"] + \"[/INST]\" }}\n        {%- else %}\n            {{- \"[INST]\" + "
        "message[\"content\"] + \"[/INST]\" }}...{{- message[\"content\"] + eos_token}}";
static const char tmpl_mistral_large_2411[] =
        "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + "
        "message['content'] + '[/INST]' }}{% elif message['role'] == 'system' %}{{ '[SYSTEM_PROMPT] ' + "
        "message['content'] + '[/SYSTEM_PROMPT]' }}{% elif message['role'] == 'assistant' %}{{ ' ' + "
        "message['content'] + eos_token }}{% else %}{{ raise_exception('Only user, system and assistant "
        "roles are supported!') }}{% endif %}{% endfor %}";
static const char tmpl_mistral_small3[] =
        "...{{- '[SYSTEM_PROMPT]' + system_prompt + '[/SYSTEM_PROMPT]' }}...{%- if tools is not none and "
        "(message == user_messages[-1]) %}\n            {{- '[AVAILABLE_TOOLS]' + tools|tojson + "
        "'[/AVAILABLE_TOOLS]' }}\n        {%- endif %}\n        {{- '[INST]' }}...{{- '[/INST]' }}...{{- "
        "message['content'] + eos_token }}";
static const char tmpl_llama2[] =
        "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set "
        "system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
        "{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if "
        "loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + "
        "system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = "
        "message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + "
        "'[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ "
        "' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}";
static const char tmpl_phi3[] =
        "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') %}"
        "{{'<|user|>' + '\n' + message['content'] + '<|end|>' + '\n' + '<|assistant|>' + '\n'}}"
        "{% elif (message['role'] == 'assistant') %}{{message['content'] + '<|end|>' + '\n'}}"
        "{% endif %}{% endfor %}";

static const char tmpl_gemma3[] =
        "{{ bos_token }}{%- if messages[0]['role'] == 'system' -%}{%- set first_user_prefix = "
        "messages[0]['content'][0]['text'] + '\n\n' -%}{%- set loop_messages = messages[1:] -%}"
        "{%- for message in loop_messages -%}{%- if (message['role'] == 'assistant') -%}{%- set role "
        "= \"model\" -%}{%- else -%}{%- set role = message['role'] -%}{%- endif -%}{{ "
        "'<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else \"\") }}"
        "{{ message['content'] | trim }}{{ '<end_of_turn>\n' }}{%- endfor -%}{%- if "
        "add_generation_prompt -%}{{'<start_of_turn>model\n'}}{%- endif -%}";

/* Gemma 2's (gemma-2-2b-it): no system turn at all */
static const char tmpl_gemma2[] =
        "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not "
        "supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != "
        "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
        "user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}{% set "
        "role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role "
        "+ '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt "
        "%}{{'<start_of_turn>model\n'}}{% endif %}";

/* Granite 3.1's (granite-3.1-2b-instruct), cut after its first turns: the roles' markers */
static const char tmpl_granite[] =
        "{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content'] %}"
        "{%- set loop_messages = messages[1:] %}{%- else %}{%- set system_message = \"Knowledge Cutoff "
        "Date: April 2024.\" %}{%- set loop_messages = messages %}{%- endif %}{{- '<|start_of_role|>system"
        "<|end_of_role|>' + system_message + '<|end_of_text|>\n' }}{%- for message in loop_messages %}"
        "{{- '<|start_of_role|>' + message['role'] + '<|end_of_role|>' + message['content'] + "
        "'<|end_of_text|>\n' }}{%- if loop.last and add_generation_prompt %}{{- '<|start_of_role|>"
        "assistant<|end_of_role|>' }}{%- endif %}{%- endfor %}";

/* OLMo 2's (OLMo-2-1124-7B-Instruct: Tülu 3's), its newlines written out as the GGUF carries
 * them; and Zephyr's, which ends a question with the EOS and is not Tülu's */
static const char tmpl_tulu[] =
        "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'system' %}{{ '<|system|>\n' + "
        "message['content'] + '\n' }}{% elif message['role'] == 'user' %}{{ '<|user|>\n' + message['content'] + "
        "'\n' }}{% elif message['role'] == 'assistant' %}{% if not loop.last %}{{ '<|assistant|>\n'  + "
        "message['content'] + eos_token + '\n' }}{% else %}{{ '<|assistant|>\n'  + message['content'] + "
        "eos_token }}{% endif %}{% endif %}{% if loop.last and add_generation_prompt %}{{ '<|assistant|>\n' }}"
        "{% endif %}{% endfor %}";
static const char tmpl_zephyr[] =
        "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] "
        "+ eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + message['content'] + "
        "eos_token }}\n{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + "
        "eos_token }}\n{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif "
        "%}\n{% endfor %}";

/* EXAONE 3.5's (EXAONE-3.5-2.4B-Instruct), its turns' markers */
static const char tmpl_exaone3[] =
        "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}{{ '[|system|][|endofturn|]\n' "
        "}}{% endif %}{{ '[|' + message['role'] + '|]' + message['content'] }}{% if message['role'] == 'user' %}"
        "{{ '\n' }}{% else %}{{ '[|endofturn|]\n' }}{% endif %}{% endfor %}{% if add_generation_prompt %}"
        "{{ '[|assistant|]' }}{% endif %}";

static void test_detect_template(void) {
        CHECK_EQ_INT(axp_chat_detect(tmpl_exaone3, NULL), AXP_CHAT_EXAONE3);
        CHECK_EQ_INT(axp_chat_detect(tmpl_tulu, NULL), AXP_CHAT_TULU);
        CHECK(axp_chat_detect(tmpl_zephyr, NULL) != AXP_CHAT_TULU);
        CHECK_EQ_INT(axp_chat_detect(tmpl_granite, NULL), AXP_CHAT_GRANITE);
        CHECK(!axp_chat_template_unknown(tmpl_granite));
        CHECK_EQ_INT(axp_chat_detect(tmpl_gemma3, NULL), AXP_CHAT_GEMMA);
        CHECK_EQ_INT(axp_chat_detect(tmpl_gemma2, NULL), AXP_CHAT_GEMMA);
        CHECK(!axp_chat_template_unknown(tmpl_gemma2));
        CHECK_EQ_INT(axp_chat_detect(tmpl_llama3, NULL), AXP_CHAT_LLAMA3);
        CHECK_EQ_INT(axp_chat_detect(tmpl_qwen2, NULL), AXP_CHAT_CHATML);
        CHECK_EQ_INT(axp_chat_detect(tmpl_mistral, NULL), AXP_CHAT_MISTRAL);
        CHECK_EQ_INT(axp_chat_detect(tmpl_mistral_v1, NULL), AXP_CHAT_MISTRAL_V1);
        CHECK_EQ_INT(axp_chat_detect(tmpl_mistral_v3, NULL), AXP_CHAT_MISTRAL_V3);
        CHECK_EQ_INT(axp_chat_detect(tmpl_mistral_nemo, NULL), AXP_CHAT_MISTRAL_V3_TEKKEN);
        CHECK_EQ_INT(axp_chat_detect(tmpl_mistral_large_2411, NULL), AXP_CHAT_MISTRAL_V7);
        CHECK_EQ_INT(axp_chat_detect(tmpl_mistral_small3, NULL), AXP_CHAT_MISTRAL_V7_TEKKEN);
        for (int f = AXP_CHAT_RAW; f < AXP_CHAT__COUNT; f++)
                CHECK_EQ_INT(axp_chat_detect(axp_chat_family_name(f), NULL), f);
        CHECK_EQ_INT(axp_chat_detect(tmpl_llama2, NULL), AXP_CHAT_LLAMA2);
        CHECK_EQ_INT(axp_chat_detect(tmpl_phi3, NULL), AXP_CHAT_PHI3);
        CHECK_EQ_INT(axp_chat_detect("{{ messages }}", NULL), AXP_CHAT_RAW); /* not understood */
        /* a template not understood is used raw, with a warning; none, or "raw", without */
        CHECK(axp_chat_template_unknown("{{ messages }}"));
        CHECK(!axp_chat_template_unknown(tmpl_gemma3));
        CHECK(!axp_chat_template_unknown(tmpl_phi3));
        CHECK(!axp_chat_template_unknown("raw"));
        CHECK(!axp_chat_template_unknown("chatml"));
        CHECK(!axp_chat_template_unknown(""));
        CHECK(!axp_chat_template_unknown(NULL));
        CHECK_EQ_INT(axp_chat_detect("chatml", NULL), AXP_CHAT_CHATML);
        CHECK_EQ_INT(axp_chat_detect("llama2", NULL), AXP_CHAT_LLAMA2);
        CHECK_EQ_INT(axp_chat_detect("raw", NULL), AXP_CHAT_RAW);
        CHECK_EQ_INT(axp_chat_detect(NULL, NULL), AXP_CHAT_RAW);
        CHECK_EQ_INT(axp_chat_detect("", NULL), AXP_CHAT_RAW);
        CHECK(strcmp(axp_chat_family_name(AXP_CHAT_LLAMA3), "llama3") == 0);
        CHECK(strcmp(axp_chat_family_name(AXP_CHAT_MISTRAL), "mistral") == 0);
        CHECK(strcmp(axp_chat_family_name((axp_chat_family) 99), "raw") == 0);
}

static axp_chat_family detect_from_vocab(const char *const *tokens, size_t n) {
        gguf_build b = {};
        gb_kv_str(&b, "tokenizer.ggml.model", "llama");
        gb_kv_strs(&b, "tokenizer.ggml.tokens", tokens, n);
        size_t size;
        uint8_t *mem = gb_finish(&b, &size);
        loaded_vocab v;
        axp_error err = {};
        if (vocab_from_memory(mem, size, &v, &err) < 0) {
                CHECK_MSG(false, "%s", err.msg);
                return -1;
        }
        axp_chat_family f = axp_chat_detect(NULL, v.tok);
        vocab_close(&v);
        return f;
}

static void test_detect_vocab(void) {
        const char *l3[] = { "<unk>", "<s>", "</s>", "<|start_header_id|>", "<|end_header_id|>" };
        const char *cm[] = { "<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>" };
        const char *mi[] = { "<unk>", "<s>", "</s>", "[INST]", "[/INST]" };
        const char *none[] = { "<unk>", "<s>", "</s>", "a" };
        CHECK_EQ_INT(detect_from_vocab(l3, 5), AXP_CHAT_LLAMA3);
        CHECK_EQ_INT(detect_from_vocab(cm, 5), AXP_CHAT_CHATML);
        CHECK_EQ_INT(detect_from_vocab(mi, 5), AXP_CHAT_MISTRAL);
        CHECK_EQ_INT(detect_from_vocab(none, 4), AXP_CHAT_RAW);
}

static const axp_chat_msg conversation[] = {
        { "system", " You are helpful. " },
        { "user", "Hi\n" },
        { "assistant", "Hello!" },
        { "user", "How are you?" },
};

static void check_format(axp_chat_family f, const axp_chat_msg *m, size_t n, bool gen,
                         const char *want) {
        char *got = axp_chat_format(f, m, n, gen);
        CHECK_MSG(got && strcmp(got, want) == 0, "%s:\n got  '%s'\n want '%s'", axp_chat_family_name(f),
                  got, want);
        free(got);
}

static void test_format(void) {
        check_format(AXP_CHAT_LLAMA3, conversation, 4, true,
                     "<|start_header_id|>system<|end_header_id|>\n\nYou are helpful.<|eot_id|>"
                     "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                     "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
                     "<|start_header_id|>user<|end_header_id|>\n\nHow are you?<|eot_id|>"
                     "<|start_header_id|>assistant<|end_header_id|>\n\n");
        check_format(AXP_CHAT_LLAMA3, conversation + 1, 1, false,
                     "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
        check_format(AXP_CHAT_CHATML, conversation, 4, true,
                     "<|im_start|>system\n You are helpful. <|im_end|>\n"
                     "<|im_start|>user\nHi\n<|im_end|>\n"
                     "<|im_start|>assistant\nHello!<|im_end|>\n"
                     "<|im_start|>user\nHow are you?<|im_end|>\n"
                     "<|im_start|>assistant\n");
        check_format(AXP_CHAT_MISTRAL, conversation, 4, true,
                     "[INST]  You are helpful. \n\nHi\n [/INST]Hello!</s>[INST] How are you? [/INST]");
        check_format(AXP_CHAT_MISTRAL, conversation + 1, 1, true, "[INST] Hi\n [/INST]");
        check_format(AXP_CHAT_LLAMA2, conversation, 4, true,
                     "[INST] <<SYS>>\n You are helpful. \n<</SYS>>\n\nHi [/INST] Hello! </s>"
                     "<s>[INST] How are you? [/INST]");
        check_format(AXP_CHAT_LLAMA2, conversation + 1, 3, true,
                     "[INST] Hi [/INST] Hello! </s><s>[INST] How are you? [/INST]");
        /* a system prompt with nothing after it still reaches the model */
        check_format(AXP_CHAT_LLAMA2, conversation, 1, true,
                     "[INST] <<SYS>>\n You are helpful. \n<</SYS>> [/INST]");
        check_format(AXP_CHAT_PHI3, conversation + 1, 3, true,
                     "<|user|>\nHi\n<|end|>\n<|assistant|>\nHello!<|end|>\n"
                     "<|user|>\nHow are you?<|end|>\n<|assistant|>\n");
        check_format(AXP_CHAT_GEMMA, conversation, 4, true,
                     "<start_of_turn>user\nYou are helpful.\n\nHi<end_of_turn>\n"
                     "<start_of_turn>model\nHello!<end_of_turn>\n"
                     "<start_of_turn>user\nHow are you?<end_of_turn>\n<start_of_turn>model\n");
        check_format(AXP_CHAT_GRANITE, conversation, 4, true,
                     "<|start_of_role|>system<|end_of_role|> You are helpful. <|end_of_text|>\n"
                     "<|start_of_role|>user<|end_of_role|>Hi\n<|end_of_text|>\n"
                     "<|start_of_role|>assistant<|end_of_role|>Hello!<|end_of_text|>\n"
                     "<|start_of_role|>user<|end_of_role|>How are you?<|end_of_text|>\n"
                     "<|start_of_role|>assistant<|end_of_role|>");
        check_format(AXP_CHAT_TULU, conversation, 4, true,
                     "<|system|>\n You are helpful. \n<|user|>\nHi\n\n<|assistant|>\nHello!<|endoftext|>\n"
                     "<|user|>\nHow are you?\n<|assistant|>\n");
        /* the last answer without its "\n" */
        check_format(AXP_CHAT_TULU, conversation + 1, 2, false, "<|user|>\nHi\n\n<|assistant|>\nHello!<|endoftext|>");
        check_format(AXP_CHAT_EXAONE3, conversation, 4, true,
                     "[|system|]You are helpful.[|endofturn|]\n[|user|]Hi\n[|assistant|]Hello![|endofturn|]\n"
                     "[|user|]How are you?\n[|assistant|]");
        check_format(AXP_CHAT_RAW, conversation + 1, 1, true, "Hi\n");
        check_format(AXP_CHAT_RAW, conversation, 2, true, " You are helpful. \n\nHi\n");
        check_format(AXP_CHAT_CHATML, NULL, 0, false, "");

        /* trim is Python's: ideographic and no-break spaces go too, other text stays */
        const axp_chat_msg wide[] = { { "user", "\xe3\x80\x80\xc2\xa0 caf\xc3\xa9 \xe3\x80\x80" } };
        check_format(AXP_CHAT_LLAMA3, wide, 1, false,
                     "<|start_header_id|>user<|end_header_id|>\n\ncaf\xc3\xa9<|eot_id|>");
        /* missing fields do not crash */
        const axp_chat_msg holes[] = { { NULL, NULL }, { "user", NULL } };
        char *s = axp_chat_format(AXP_CHAT_LLAMA2, holes, 2, true);
        CHECK(s != NULL);
        free(s);
}

/* A later turn after an answer as the model wrote it (ending with its end-of-turn text), or
 * cut short (closed by format_next), reads as the whole conversation formatted at once. */
static void test_format_next(void) {
        static const struct {
                axp_chat_family f;
                const char *answer, *end;
        } cases[] = {
                { AXP_CHAT_LLAMA3, "Hello!", "<|eot_id|>" },
                { AXP_CHAT_CHATML, "Hello!", "<|im_end|>" },
                { AXP_CHAT_MISTRAL, "Hello!", "</s>" },
                { AXP_CHAT_LLAMA2, " Hello!", " </s>" },
                { AXP_CHAT_PHI3, "Hello!", "<|end|>" },
                { AXP_CHAT_GEMMA, "Hello!", "<end_of_turn>" },
                { AXP_CHAT_GRANITE, "Hello!", "<|end_of_text|>" },
                { AXP_CHAT_TULU, "Hello!", "<|endoftext|>" },
                { AXP_CHAT_EXAONE3, "Hello!", "[|endofturn|]" },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                axp_chat_family f = cases[i].f;
                _cleanup_free_ char *whole = axp_chat_format(f, conversation, 4, true);
                _cleanup_free_ char *first = axp_chat_format(f, conversation, 2, true);
                for (int cut = 0; cut <= 1; cut++) {
                        _cleanup_free_ char *next = axp_chat_format_next(f, conversation + 3, 1, cut);
                        char got[1024];
                        snprintf(got, sizeof(got), "%s%s%s%s", first, cases[i].answer,
                                 cut ? "" : cases[i].end, next);
                        CHECK_MSG(strcmp(got, whole) == 0, "%s (%s):\n got  '%s'\n want '%s'",
                                  axp_chat_family_name(f), cut ? "cut short" : "closed", got, whole);
                }
        }
        /* earlier turns in a later turn: the same */
        _cleanup_free_ char *whole = axp_chat_format(AXP_CHAT_CHATML, conversation, 4, true);
        _cleanup_free_ char *first = axp_chat_format(AXP_CHAT_CHATML, conversation, 1, false);
        _cleanup_free_ char *rest = axp_chat_format_next(AXP_CHAT_CHATML, conversation + 1, 3, false);
        char got[1024];
        snprintf(got, sizeof(got), "%.*s%s", (int) strlen(first) - 1, first, rest);
        CHECK_MSG(strcmp(got, whole) == 0, "chatml with turns:\n got  '%s'\n want '%s'", got, whole);
}

/* A system prompt, a user's question, the answer, and the next question through each of
 * Mistral's templates: the text each template renders (after the BOS, which the tokenizer
 * adds), written out by hand from the templates above. */
static void test_format_mistral(void) {
        const axp_chat_msg conv[] = {
                { "system", "You are helpful." },
                { "user", "Hi" },
                { "assistant", "  I am here.  " },
                { "user", "How are you?" },
        };
        /* v0.1/v0.2: no system role in the template; it goes before the first question */
        check_format(AXP_CHAT_MISTRAL, conv, 4, true,
                     "[INST] You are helpful.\n\nHi [/INST]  I am here.  </s>[INST] How are you? [/INST]");
        check_format(AXP_CHAT_MISTRAL, conv + 1, 3, true,
                     "[INST] Hi [/INST]  I am here.  </s>[INST] How are you? [/INST]");
        /* v1: a space before every [INST] and every answer */
        check_format(AXP_CHAT_MISTRAL_V1, conv, 4, true,
                     " [INST] You are helpful.\n\nHi [/INST]   I am here.  </s> [INST] How are you? [/INST]");
        /* v3: no space before [/INST], the answer trimmed after one space, the system prompt
         * in the last question */
        check_format(AXP_CHAT_MISTRAL_V3, conv, 4, true,
                     "[INST] Hi[/INST] I am here.</s>[INST] You are helpful.\n\nHow are you?[/INST]");
        check_format(AXP_CHAT_MISTRAL_V3, conv, 2, true, "[INST] You are helpful.\n\nHi[/INST]");
        /* the template drops a system prompt when the conversation ends with an answer */
        check_format(AXP_CHAT_MISTRAL_V3, conv, 3, false, "[INST] Hi[/INST] I am here.</s>");
        /* v3-tekken (Mistral-Nemo): no spaces at all, the answer as it is */
        check_format(AXP_CHAT_MISTRAL_V3_TEKKEN, conv, 4, true,
                     "[INST]Hi[/INST]  I am here.  </s>[INST]You are helpful.\n\nHow are you?[/INST]");
        /* v7: the system prompt in its own block */
        check_format(AXP_CHAT_MISTRAL_V7, conv, 4, true,
                     "[SYSTEM_PROMPT] You are helpful.[/SYSTEM_PROMPT][INST] Hi[/INST]   I am here.  </s>"
                     "[INST] How are you?[/INST]");
        check_format(AXP_CHAT_MISTRAL_V7_TEKKEN, conv, 4, true,
                     "[SYSTEM_PROMPT]You are helpful.[/SYSTEM_PROMPT][INST]Hi[/INST]  I am here.  </s>"
                     "[INST]How are you?[/INST]");
        check_format(AXP_CHAT_MISTRAL_V7_TEKKEN, conv + 1, 1, true, "[INST]Hi[/INST]");
}

/* The formatted text tokenizes to Llama 3's header tokens. */
static void test_llama3_tokens(void) {
        _cleanup_free_ char *path = conformance_path("vocab/ggml-vocab-llama-bpe.gguf");
        if (!path) {
                printf("  (conformance data not found, skipping)\n");
                return;
        }
        loaded_vocab v;
        if (vocab_open(path, &v) < 0) {
                CHECK(!"vocabulary loads");
                return;
        }
        CHECK_EQ_INT(axp_chat_detect(NULL, v.tok), AXP_CHAT_LLAMA3);
        const axp_chat_msg m[] = { { "user", "Hi" } };
        char *text = axp_chat_format(AXP_CHAT_LLAMA3, m, 1, true);
        int32_t *ids = NULL;
        int n = 0;
        axp_error err = {};
        CHECK(axp_tokenize(v.tok, text, strlen(text), AXP_TOK_ADD_BOS | AXP_TOK_PARSE_SPECIAL, &ids,
                           &n, &err) == 0);
        const int32_t want[] = { 128000, 128006, 882, 128007, 271, 13347, 128009, 128006, 78191,
                                 128007, 271 };
        CHECK_MSG(n == (int) ELEMENTSOF(want) && memcmp(ids, want, sizeof(want)) == 0, "%d tokens", n);
        free(ids);
        free(text);
        vocab_close(&v);

        _cleanup_free_ char *qwen = conformance_path("vocab/ggml-vocab-qwen2.gguf");
        if (qwen && vocab_open(qwen, &v) == 0) {
                CHECK_EQ_INT(axp_chat_detect(NULL, v.tok), AXP_CHAT_CHATML);
                vocab_close(&v);
        }
}

/* A tool loop's earlier turns (a question, the model's call, the tool's result) as each family
 * that takes tools writes them, the model then answering the result (no new user turn). */
static const char weather_tools[] =
        "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": "
        "\"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}}}]";
static const axp_chat_msg tool_loop[] = {
        { "user", "Weather in Paris?" },
        { "tool_call", "{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\":\\\"Paris\\\"}\"}" },
        { "tool", "{\"temp\": 22}" },
};

/* Two calls answered by two results, then a new question */
static const axp_chat_msg two[] = {
        { "user", "Paris and Rome?" },
        { "tool_call", "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}" },
        { "tool_call", "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}" },
        { "tool", "22" },
        { "tool", "25" },
        { "user", "Thanks. Warmer?" },
};

static void check_tools_tmpl(axp_chat_family f, const char *tmpl, const char *system, const axp_chat_msg *m,
                             size_t n, const char *want) {
        axp_tools *t = NULL;
        axp_error err = {};
        char *got = NULL;

        CHECK(axp_tools_parse(weather_tools, strlen(weather_tools), &t, &err) == 0);
        CHECK_MSG(axp_tools_format_chat(f, tmpl, t, system, m, n, &got, &err) == 0, "%s", err.msg);
        CHECK_MSG(got && strcmp(got, want) == 0, "%s:\n got  '%s'\n want '%s'", axp_chat_family_name(f), got, want);
        free(got);
        axp_tools_free(t);
}

static void check_tools(axp_chat_family f, const char *system, const axp_chat_msg *m, size_t n, const char *want) {
        check_tools_tmpl(f, NULL, system, m, n, want);
}

static void test_tool_loop(void) {
        check_tools(AXP_CHAT_LLAMA3, NULL, tool_loop, 3,
                    "<|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\nCutting Knowledge Date: "
                    "December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>"
                    "<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please respond "
                    "with a JSON for a function call with its proper arguments that best answers the given "
                    "prompt.\n\nRespond in the format {\"name\": function name, \"parameters\": dictionary of "
                    "argument name and its value}.Do not use variables.\n\n{\n    \"type\": \"function\",\n    "
                    "\"function\": {\n        \"name\": \"get_weather\",\n        \"parameters\": {\n            "
                    "\"type\": \"object\",\n            \"properties\": {\n                \"city\": {\n         "
                    "           \"type\": \"string\"\n                }\n            }\n        }\n    }\n}\n\n"
                    "Weather in Paris?<|eot_id|>"
                    "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"get_weather\", \"parameters\": "
                    "{\"city\": \"Paris\"}}<|eot_id|>"
                    "<|start_header_id|>ipython<|end_header_id|>\n\n{\"temp\": 22}<|eot_id|>"
                    "<|start_header_id|>assistant<|end_header_id|>\n\n");
        check_tools(AXP_CHAT_CHATML, "Be brief.", tool_loop, 3,
                    "<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or more functions to assist "
                    "with the user query.\n\nYou are provided with function signatures within <tools></tools> "
                    "XML tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
                    "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}}}"
                    "\n</tools>\n\nFor each function call, return a json object with function name and "
                    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
                    "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
                    "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
                    "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                    "\"Paris\"}}\n</tool_call><|im_end|>\n"
                    "<|im_start|>user\n<tool_response>\n{\"temp\": 22}\n</tool_response><|im_end|>\n"
                    "<|im_start|>assistant\n");
        /* two results in a row share one user turn */
        check_tools(AXP_CHAT_MISTRAL_V3_TEKKEN, "Be brief.", two, 6,
                    "[INST]Paris and Rome?[/INST]"
                    "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": "
                    "\"call00001\"}]</s>"
                    "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}, \"id\": "
                    "\"call00002\"}]</s>"
                    "[TOOL_RESULTS]{\"content\": 22, \"call_id\": \"call00001\"}[/TOOL_RESULTS]"
                    "[TOOL_RESULTS]{\"content\": 25, \"call_id\": \"call00002\"}[/TOOL_RESULTS]"
                    "[AVAILABLE_TOOLS][{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
                    "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}}}]"
                    "[/AVAILABLE_TOOLS][INST]Be brief.\n\nThanks. Warmer?[/INST]");
        /* v3: the spaces after the markers; a result that is not JSON is written as a string */
        const axp_chat_msg text_result[] = {
                { "user", "Weather in Paris?" },
                { "tool_call", "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}" },
                { "tool", "sunny" },
        };
        check_tools(AXP_CHAT_MISTRAL_V3, "Be brief.", text_result, 3,
                    "[AVAILABLE_TOOLS] [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
                    "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}}}]"
                    "[/AVAILABLE_TOOLS][INST] Weather in Paris?[/INST]"
                    "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": "
                    "\"call00001\"}]</s>"
                    "[TOOL_RESULTS] {\"content\": \"sunny\", \"call_id\": \"call00001\"}[/TOOL_RESULTS]");

        /* bad turns: a clear error, nothing rendered */
        axp_tools *t = NULL;
        axp_error err = {};
        char *got = NULL;
        CHECK(axp_tools_parse(weather_tools, strlen(weather_tools), &t, &err) == 0);
        const axp_chat_msg bad_call[] = { { "user", "hi" }, { "tool_call", "{\"name\": \"x\"}" } };
        CHECK(axp_tools_format_chat(AXP_CHAT_CHATML, NULL, t, NULL, bad_call, 2, &got, &err) == -EINVAL && !got);
        CHECK_MSG(strstr(err.msg, "turn 2: a tool_call must be"), "%s", err.msg);
        const axp_chat_msg stray[] = { { "user", "hi" }, { "tool", "22" } };
        CHECK(axp_tools_format_chat(AXP_CHAT_LLAMA3, NULL, t, NULL, stray, 2, &got, &err) == -EINVAL && !got);
        CHECK_MSG(strstr(err.msg, "turn 2: a tool result must follow a tool_call turn"), "%s", err.msg);
        const axp_chat_msg robot[] = { { "robot", "beep" } };
        CHECK(axp_tools_format_chat(AXP_CHAT_LLAMA3, NULL, t, NULL, robot, 1, &got, &err) == -EINVAL && !got);
        axp_tools_free(t);
}

/* Mistral's v7 family: the tool lines of Mistral-Small-3.2's template ([CALL_ID]) and of
 * Devstral's (no ids), as the GGUF files carry them; detection looks at these markers. */
static const char tmpl_small32[] =
        "{{- '[SYSTEM_PROMPT]' + system_prompt + '[/SYSTEM_PROMPT]' }}...{{- '[AVAILABLE_TOOLS]' + "
        "tools|tojson + '[/AVAILABLE_TOOLS]' }}...{{- '[INST]' }}...{{- '[TOOL_CALLS]' + "
        "tool_call.function.name }}...{{- '[CALL_ID]' + tool_call.id }}{{- '[ARGS]' + "
        "tool_call['function']['arguments']|tojson }}...{{- '[TOOL_RESULTS]' + message.tool_call_id + "
        "'[TOOL_CONTENT]' + content|string + '[/TOOL_RESULTS]' }}";
static const char tmpl_devstral[] =
        "{%- set tools_description = \"[AVAILABLE_TOOLS]\" + (tools | tojson) + \"[/AVAILABLE_TOOLS]\" %}"
        "...{{- '[INST]' + message['content'] + '[/INST]' }}...{{- '[SYSTEM_PROMPT]' + message['content'] + "
        "'[/SYSTEM_PROMPT]' }}...{{- \"[TOOL_CALLS]\" + tool['function']['name'] + \"[ARGS]\" + arguments }}"
        "...{{- \"[TOOL_RESULTS]\" + content|string + \"[/TOOL_RESULTS]\" }}";

/* Llama 3's vocabulary from the conformance data, for the grammar checks (false: skipped,
 * said so). */
static bool llama3_vocab(loaded_vocab *v) {
        _cleanup_free_ char *path = conformance_path("vocab/ggml-vocab-llama-bpe.gguf");
        if (!path || vocab_open(path, v) != 0) {
                printf("  no Llama 3 vocabulary: the grammar checks skipped\n");
                return false;
        }
        return true;
}

/* Walk the grammar over text, token by token on the vocabulary: -1 if a token of the text was
 * refused, else whether it may then end (id < 0) or take token id. */
static int grammar_walk(const loaded_vocab *v, axp_vocab_trie *trie, const char *gbnf, const char *text,
                        int32_t id) {
        axp_grammar *g = NULL;
        axp_matcher *mt = NULL;
        axp_error err = {};
        int32_t *ids = NULL;
        int n = 0;
        bool ok = axp_grammar_parse(gbnf, strlen(gbnf), &g, &err) == 0 && axp_matcher_new(g, trie, &mt, &err) == 0 &&
                  axp_tokenize(v->tok, text, strlen(text), 0, &ids, &n, &err) == 0;
        CHECK_MSG(ok, "%s", err.msg);
        int taken = ok;
        for (int i = 0; taken && i < n; i++) {
                taken = axp_matcher_allows(mt, ids[i]);
                if (taken)
                        axp_matcher_accept(mt, ids[i]);
        }
        int r = !ok ? 0 : !taken ? -1 : id < 0 ? axp_matcher_complete(mt) : axp_matcher_allows(mt, id);
        free(ids);
        axp_matcher_free(mt);
        axp_grammar_free(g);
        return r;
}

/* Does the grammar take text, token by token on the Llama 3 vocabulary? */
static bool grammar_takes(const loaded_vocab *v, axp_vocab_trie *trie, const char *gbnf, const char *text) {
        return grammar_walk(v, trie, gbnf, text, -1) == 1;
}

static void test_tools_mistral_v7(void) {
        CHECK_EQ_INT(axp_chat_detect(tmpl_small32, NULL), AXP_CHAT_MISTRAL_V7_TEKKEN);
        CHECK_EQ_INT(axp_chat_detect(tmpl_devstral, NULL), AXP_CHAT_MISTRAL_V7_TEKKEN);
        CHECK(axp_chat_takes_tools(AXP_CHAT_MISTRAL_V7_TEKKEN, tmpl_small32, NULL));
        CHECK(axp_chat_takes_tools(AXP_CHAT_MISTRAL_V7_TEKKEN, tmpl_devstral, NULL));
        /* Mistral-Small-3.2: the system block first, the tools before the last user turn, the
         * call with its id, the result naming it */
        check_tools_tmpl(AXP_CHAT_MISTRAL_V7_TEKKEN, tmpl_small32, "Be brief.", tool_loop, 3,
                         "[SYSTEM_PROMPT]Be brief.[/SYSTEM_PROMPT]"
                         "[AVAILABLE_TOOLS][{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
                         "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}}}]"
                         "[/AVAILABLE_TOOLS][INST]Weather in Paris?[/INST]"
                         "[TOOL_CALLS]get_weather[CALL_ID]call00001[ARGS]{\"city\": \"Paris\"}</s>"
                         "[TOOL_RESULTS]call00001[TOOL_CONTENT]{\"temp\": 22}[/TOOL_RESULTS]");
        /* Devstral: two calls of one answer share its </s>; results without ids; the tools
         * move to the last user turn */
        check_tools_tmpl(AXP_CHAT_MISTRAL_V7_TEKKEN, tmpl_devstral, NULL, two, 6,
                         "[INST]Paris and Rome?[/INST]"
                         "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}"
                         "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Rome\"}</s>"
                         "[TOOL_RESULTS]22[/TOOL_RESULTS][TOOL_RESULTS]25[/TOOL_RESULTS]"
                         "[AVAILABLE_TOOLS][{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
                         "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}}}]"
                         "[/AVAILABLE_TOOLS][INST]Thanks. Warmer?[/INST]");
        /* a v7 family named without a template: v3's JSON list */
        check_tools(AXP_CHAT_MISTRAL_V7_TEKKEN, NULL, tool_loop, 3,
                    "[AVAILABLE_TOOLS][{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
                    "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}}}]"
                    "[/AVAILABLE_TOOLS][INST]Weather in Paris?[/INST]"
                    "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": "
                    "\"call00001\"}]</s>"
                    "[TOOL_RESULTS]{\"content\": {\"temp\": 22}, \"call_id\": \"call00001\"}[/TOOL_RESULTS]");

        /* the answer read back: with and without the id; cut short or not an object: text */
        char *call = NULL;
        const char *a = "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}";
        CHECK(axp_tools_read_call(AXP_CHAT_MISTRAL_V7_TEKKEN, NULL, a, strlen(a), &call) == 1);
        CHECK_MSG(call && strcmp(call, "{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}") == 0, "%s",
                  call);
        free(call);
        call = NULL;
        const char *b = "[TOOL_CALLS]get_weather[CALL_ID]a1B2c3D4e[ARGS]{\"city\": \"Rome\"}";
        CHECK(axp_tools_read_call(AXP_CHAT_MISTRAL_V7_TEKKEN, NULL, b, strlen(b), &call) == 1);
        CHECK_MSG(call && strcmp(call, "{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Rome\"}}") == 0, "%s",
                  call);
        free(call);
        call = NULL;
        const char *cut = "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Ro";
        const char *list = "[TOOL_CALLS]get_weather[ARGS][1]";
        const char *noargs = "[TOOL_CALLS]get_weather";
        CHECK(axp_tools_read_call(AXP_CHAT_MISTRAL_V7_TEKKEN, NULL, cut, strlen(cut), &call) == 0 && !call);
        CHECK(axp_tools_read_call(AXP_CHAT_MISTRAL_V7_TEKKEN, NULL, list, strlen(list), &call) == 0 && !call);
        CHECK(axp_tools_read_call(AXP_CHAT_MISTRAL_V7_TEKKEN, NULL, noargs, strlen(noargs), &call) == 0 && !call);

        /* the grammar takes the template's form (Mistral-Small-3.2's id optional, nine letters
         * and digits) and nothing else */
        loaded_vocab v;
        if (!llama3_vocab(&v))
                return;
        axp_vocab_trie *trie = NULL;
        axp_error err = {};
        axp_tools *t = NULL;
        char *g32 = NULL, *gdev = NULL;
        CHECK(axp_vocab_trie_new(v.tok, &trie, &err) == 0);
        CHECK(axp_tools_parse(weather_tools, strlen(weather_tools), &t, &err) == 0);
        CHECK_MSG(axp_tools_grammar(AXP_CHAT_MISTRAL_V7_TEKKEN, tmpl_small32, t, AXP_TOOL_CHOICE_REQUIRED, &g32,
                                    &err) == 0, "%s", err.msg);
        CHECK_MSG(axp_tools_grammar(AXP_CHAT_MISTRAL_V7_TEKKEN, tmpl_devstral, t, AXP_TOOL_CHOICE_AUTO, &gdev,
                                    &err) == 0, "%s", err.msg);
        if (g32 && gdev && trie) {
                /* the arguments compact, as the schema's grammar writes JSON */
                const char *ac = "[TOOL_CALLS]get_weather[ARGS]{\"city\":\"Paris\"}",
                           *bc = "[TOOL_CALLS]get_weather[CALL_ID]a1B2c3D4e[ARGS]{\"city\":\"Rome\"}";
                CHECK(grammar_takes(&v, trie, g32, ac));
                CHECK(grammar_takes(&v, trie, g32, bc));
                CHECK(!grammar_takes(&v, trie, g32, "[TOOL_CALLS]get_weather[CALL_ID]a1B2[ARGS]{\"city\":\"Rome\"}"));
                CHECK(!grammar_takes(&v, trie, g32, "Sunny."));
                CHECK(grammar_takes(&v, trie, gdev, ac));
                CHECK(!grammar_takes(&v, trie, gdev, bc));
                CHECK(!grammar_takes(&v, trie, gdev, "[TOOL_CALLS]get_time[ARGS]{}"));
                CHECK(grammar_takes(&v, trie, gdev, "Sunny."));
        }
        free(g32);
        free(gdev);
        axp_tools_free(t);
        axp_vocab_trie_free(trie);
        vocab_close(&v);
}

/* tool_choice none: the prompt as with tools, earlier calls and results included; the answer
 * text that cannot be a call, in each family's form; nothing read back. Without tools, the
 * calls and results as the template writes them without a tool list. */
static const char tmpl_qwen_tools[] = "{{ '<|im_start|>' }}{% if tools %}<tools>{% endif %}";

static char *none_grammar(axp_chat_family f, const char *tmpl) {
        axp_tools *t = NULL;
        axp_error err = {};
        char *g = NULL;
        CHECK(axp_tools_parse(weather_tools, strlen(weather_tools), &t, &err) == 0);
        CHECK_MSG(axp_tools_grammar(f, tmpl, t, AXP_TOOL_CHOICE_NONE, &g, &err) == 0, "%s", err.msg);
        axp_tools_free(t);
        return g;
}

/* Can the model write token id, after text (which the grammar must take), under the grammar? */
static bool token_allowed_after(const loaded_vocab *v, axp_vocab_trie *trie, const char *gbnf, const char *text,
                                int32_t id) {
        int r = grammar_walk(v, trie, gbnf, text, id);
        CHECK(r >= 0);
        return r == 1;
}

static void test_tool_choice_none(void) {
        axp_tool_choice c = AXP_TOOL_CHOICE_REQUIRED;
        axp_error err = {};

        CHECK(axp_tool_choice_from_string(NULL, &c, &err) == 0 && c == AXP_TOOL_CHOICE_AUTO);
        CHECK(axp_tool_choice_from_string("none", &c, &err) == 0 && c == AXP_TOOL_CHOICE_NONE);
        CHECK(axp_tool_choice_from_string("sometimes", &c, &err) == -EINVAL);
        CHECK_MSG(strcmp(err.msg, "tool_choice must be 'auto', 'required' or 'none', got 'sometimes'") == 0, "%s",
                  err.msg);

        /* the prompt of auto, earlier call and result included; no call read back */
        char *text_auto = NULL, *text_none = NULL, *g_auto = NULL, *g_none = NULL;
        axp_chat_family fa = AXP_CHAT_RAW, fn = AXP_CHAT_CHATML;
        CHECK_MSG(axp_tools_prepare(tmpl_qwen_tools, NULL, weather_tools, NULL, "Be brief.", tool_loop, 3, "",
                                    &text_auto, &g_auto, &fa, NULL, &err) == 0, "%s", err.msg);
        CHECK_MSG(axp_tools_prepare(tmpl_qwen_tools, NULL, weather_tools, "none", "Be brief.", tool_loop, 3, "",
                                    &text_none, &g_none, &fn, NULL, &err) == 0, "%s", err.msg);
        CHECK_MSG(text_auto && text_none && strcmp(text_auto, text_none) == 0, "%s\n%s", text_auto, text_none);
        CHECK(text_none && strstr(text_none, "<tools>\n{\"type\": \"function\"") &&
              strstr(text_none, "<tool_call>\n{\"name\": \"get_weather\"") && strstr(text_none, "<tool_response>"));
        CHECK_EQ_INT(fa, AXP_CHAT_CHATML);
        CHECK_EQ_INT(fn, AXP_CHAT_RAW);
        CHECK(g_auto && strstr(g_auto, "call ::="));
        CHECK(g_none && !strstr(g_none, "call") && strncmp(g_none, "root ::= text\n", 14) == 0);
        free(text_auto);
        free(text_none);
        free(g_auto);
        free(g_none);
        text_none = g_none = NULL;
        CHECK(axp_tools_prepare(tmpl_qwen_tools, NULL, weather_tools, "sometimes", NULL, tool_loop, 3, "", &text_none,
                                &g_none, &fn, NULL, &err) == -EINVAL && !text_none && !g_none);
        CHECK_MSG(strstr(err.msg, "'auto', 'required' or 'none'"), "%s", err.msg);

        /* no tools: the calls and results without a tool list, none only */
        CHECK(axp_tools_prepare(tmpl_qwen_tools, NULL, NULL, "auto", NULL, tool_loop, 3, "", &text_none, &g_none, &fn, NULL,
                                &err) == -EINVAL && !text_none && !g_none);
        CHECK_MSG(strcmp(err.msg, "tool_choice needs tools") == 0, "%s", err.msg);
        CHECK_MSG(axp_tools_prepare(tmpl_qwen_tools, NULL, NULL, "none", "Be brief.", tool_loop, 3, "", &text_none,
                                    &g_none, &fn, NULL, &err) == 0, "%s", err.msg);
        const char *want = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n"
                           "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                           "\"Paris\"}}\n</tool_call><|im_end|>\n"
                           "<|im_start|>user\n<tool_response>\n{\"temp\": 22}\n</tool_response><|im_end|>\n"
                           "<|im_start|>assistant\n";
        CHECK_MSG(text_none && strcmp(text_none, want) == 0, "got  '%s'\nwant '%s'", text_none, want);
        CHECK(g_none && strncmp(g_none, "root ::= text\n", 14) == 0);
        free(text_none);
        free(g_none);
        char *got = NULL;
        CHECK_MSG(axp_tools_format_chat(AXP_CHAT_LLAMA3, NULL, NULL, NULL, tool_loop, 3, &got, &err) == 0, "%s",
                  err.msg);
        want = "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 "
               "Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWeather in Paris?<|eot_id|>"
               "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"get_weather\", \"parameters\": "
               "{\"city\": \"Paris\"}}<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n{\"temp\": 22}"
               "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n";
        CHECK_MSG(got && strcmp(got, want) == 0, "got  '%s'\nwant '%s'", got, want);
        free(got);
        got = NULL;
        CHECK_MSG(axp_tools_format_chat(AXP_CHAT_MISTRAL_V7_TEKKEN, tmpl_small32, NULL, NULL, tool_loop, 3, &got,
                                        &err) == 0, "%s", err.msg);
        want = "[INST]Weather in Paris?[/INST][TOOL_CALLS]get_weather[CALL_ID]call00001[ARGS]{\"city\": \"Paris\"}</s>"
               "[TOOL_RESULTS]call00001[TOOL_CONTENT]{\"temp\": 22}[/TOOL_RESULTS]";
        CHECK_MSG(got && strcmp(got, want) == 0, "got  '%s'\nwant '%s'", got, want);
        free(got);

        /* the grammars, token by token on the Llama 3 vocabulary */
        loaded_vocab v;
        if (!llama3_vocab(&v))
                return;
        axp_vocab_trie *trie = NULL;
        CHECK(axp_vocab_trie_new(v.tok, &trie, &err) == 0);
        char *gl = none_grammar(AXP_CHAT_LLAMA3, NULL), *gq = none_grammar(AXP_CHAT_CHATML, NULL),
             *gm = none_grammar(AXP_CHAT_MISTRAL_V7_TEKKEN, tmpl_small32);
        if (gl && gq && gm && trie) {
                /* Llama 3's call is plain JSON: text does not begin with '{' */
                CHECK(grammar_takes(&v, trie, gl, "It is 22 degrees in Paris."));
                CHECK(!grammar_takes(&v, trie, gl, "{\"name\": \"get_weather\", \"parameters\": {}}"));
                CHECK(!grammar_takes(&v, trie, gl, "{}"));
                /* Qwen's: <tool_call> nowhere, other tags and its beginnings anywhere */
                CHECK(grammar_takes(&v, trie, gq, "It is 22 degrees in Paris."));
                CHECK(grammar_takes(&v, trie, gq, "<think>\nwarm\n</think>\n\n22 <tool_cal> <tool_call"));
                CHECK(!grammar_takes(&v, trie, gq, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n"
                                                   "</tool_call>"));
                CHECK(!grammar_takes(&v, trie, gq, "Let me look. <tool_call>"));
                CHECK(!grammar_takes(&v, trie, gq, "<<tool_call>"));
                CHECK(!grammar_takes(&v, trie, gq, "<tool_<tool_call>"));
                /* Mistral's: [TOOL_CALLS] nowhere, brackets otherwise */
                CHECK(grammar_takes(&v, trie, gm, "[22, 25] degrees [TOOL_CALL] [[TOOL_CALLS"));
                CHECK(!grammar_takes(&v, trie, gm, "[TOOL_CALLS]get_weather[ARGS]{\"city\":\"Paris\"}"));
                CHECK(!grammar_takes(&v, trie, gm, "Sure: [[TOOL_CALLS][{\"name\": \"get_weather\"}]"));
        }
        free(gl);
        free(gq);
        free(gm);
        axp_vocab_trie_free(trie);
        vocab_close(&v);
}

/* Qwen's <tool_call> is one token with those bytes (user-defined, not a control token):
 * "auto" takes it to open the answer (a call) but not after text (neither text nor a call
 * read back), "none" nowhere; auto's text does not begin with '<' either. */
static void test_tool_choice_none_token(void) {
        static char bytes[256][3];
        const char *tokens[258];
        int32_t types[258];
        for (int b = 0; b < 256; b++) {
                gpt2_byte_char(b, bytes[b]);
                tokens[b] = bytes[b];
                types[b] = 1;
        }
        tokens[256] = "<|im_end|>", types[256] = 3;
        tokens[257] = "<tool_call>", types[257] = 4;
        gguf_build b = {};
        size_t size = 0;
        gb_kv_str(&b, "tokenizer.ggml.model", "gpt2");
        gb_kv_strs(&b, "tokenizer.ggml.tokens", tokens, 258);
        gb_kv_i32s(&b, "tokenizer.ggml.token_type", types, 258);
        const char *merges[] = { "" }; /* none: the byte tokens alone */
        gb_kv_strs(&b, "tokenizer.ggml.merges", merges, 0);
        gb_kv_u32(&b, "tokenizer.ggml.eos_token_id", 256);
        uint8_t *mem = gb_finish(&b, &size);
        axp_vocab_trie *trie = NULL;
        axp_error err = {};
        loaded_vocab v;
        bool loaded = mem && vocab_from_memory(mem, size, &v, &err) == 0;
        CHECK_MSG(loaded, "%s", err.msg);
        if (loaded && axp_vocab_trie_new(v.tok, &trie, &err) == 0) {
                axp_tools *t = NULL;
                char *ga = NULL, *gq = none_grammar(AXP_CHAT_CHATML, NULL);
                CHECK(axp_tools_parse(weather_tools, strlen(weather_tools), &t, &err) == 0);
                CHECK(axp_tools_grammar(AXP_CHAT_CHATML, NULL, t, AXP_TOOL_CHOICE_AUTO, &ga, &err) == 0);
                CHECK_EQ_INT(axp_tokenizer_find(v.tok, "<tool_call>"), 257);
                if (gq && ga) {
                        CHECK(token_allowed_after(&v, trie, ga, "", 257));
                        CHECK(!token_allowed_after(&v, trie, ga, "Let me look. ", 257));
                        CHECK(token_allowed_after(&v, trie, ga, "Let me look. ", '<')); /* the byte */
                        /* auto's text still does not begin as a call does */
                        CHECK(grammar_takes(&v, trie, ga, "Let me look. <b>hot</b>"));
                        CHECK(!grammar_takes(&v, trie, ga, "<b>hot</b>"));
                        CHECK(!grammar_takes(&v, trie, ga, "Let me look. <tool_call>"));
                        CHECK(!token_allowed_after(&v, trie, gq, "", 257));
                        CHECK(!token_allowed_after(&v, trie, gq, "Let me look. ", 257));
                        CHECK(token_allowed_after(&v, trie, gq, "Let me look. ", '<')); /* the byte */
                }
                free(ga);
                free(gq);
                axp_tools_free(t);
        }
        axp_vocab_trie_free(trie);
        if (loaded)
                vocab_close(&v);
}

/* Granite 3.3's template (granite-3.3-2b-instruct), its system prompt's and tools' lines; and
 * 3.1's form of them: its own words, the tools one by one, results in tool_response turns */
static const char tmpl_granite33[] =
        "{%- if tools and not available_tools -%}{%- set available_tools = tools -%}{%- endif -%}"
        "{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content'] %}"
        "{%- else %}{%- set system_message = \"Knowledge Cutoff Date: April 2024. Today's Date: \" + "
        "strftime_now('%B %d, %Y') + \". You are Granite, developed by IBM.\" %}{%- if available_tools and "
        "documents %}{%- set system_message = system_message + \" You are a helpful assistant with access to "
        "the following tools. (and documents)\" %}{%- elif available_tools %}{%- set system_message = "
        "system_message + \" You are a helpful assistant with access to the following tools. When a tool is "
        "required to answer the user's query, respond only with <|tool_call|> followed by a JSON list of tools "
        "used.\" %}{%- endif %}{%- endif %}{{- '<|start_of_role|>system<|end_of_role|>' + system_message + "
        "'<|end_of_text|>\n' }}{%- if available_tools %}{{- '<|start_of_role|>available_tools<|end_of_role|>' }}"
        "{{- available_tools | tojson(indent=4) }}{{- '<|end_of_text|>\n' }}{%- endif %}";
static const char tmpl_granite31[] =
        "{%- else %}{%- set system_message = \"Knowledge Cutoff Date: April 2024.\\nToday's Date: \" + "
        "strftime_now('%B %d, %Y') + \".\\nYou are Granite, developed by IBM.\" %}{%- if tools and documents %}"
        "{%- set system_message = system_message + \" With tools and documents.\" %}{%- elif tools %}{%- set "
        "system_message = system_message + \" You are a helpful AI assistant with access to the following "
        "tools. When a tool is required to answer the user\\'s query, respond with <|tool_call|>.\" %}"
        "{%- endif %}...{%- if tools %}{{- '<|start_of_role|>available_tools<|end_of_role|>\n' }}{%- for tool "
        "in tools %}{{- tool | tojson(indent=4) }}{%- if not loop.last %}{{- '\n\n' }}{%- endif %}{%- endfor %}"
        "{{- '<|end_of_text|>\n' }}{%- endif %}...{%- elif message['role'] == 'tool_response' %}";

static const char granite_tool_json[] =
        "{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"get_weather\",\n        "
        "\"parameters\": {\n            \"type\": \"object\",\n            \"properties\": {\n                "
        "\"city\": {\n                    \"type\": \"string\"\n                }\n            }\n        }\n    "
        "}\n}";

static void test_tools_granite(void) {
        char date[64], want[4096];
        time_t now = time(NULL);
        struct tm tm;
        CHECK(localtime_r(&now, &tm) && strftime(date, sizeof(date), "%B %d, %Y", &tm) > 0);

        CHECK_EQ_INT(axp_chat_detect(tmpl_granite33, NULL), AXP_CHAT_GRANITE);
        CHECK(axp_chat_takes_tools(AXP_CHAT_GRANITE, tmpl_granite33, NULL));
        CHECK(axp_chat_takes_tools(AXP_CHAT_GRANITE, tmpl_granite31, NULL));
        CHECK(!axp_chat_takes_tools(AXP_CHAT_GRANITE, tmpl_granite, NULL)); /* no tools in it */

        /* 3.3: its system prompt (dated, with the words on tools) where none is given, the
         * list as indented JSON, the call as a list, the result in a tool turn */
        snprintf(want, sizeof(want),
                 "<|start_of_role|>system<|end_of_role|>Knowledge Cutoff Date: April 2024. Today's Date: %s. You "
                 "are Granite, developed by IBM. You are a helpful assistant with access to the following tools. "
                 "When a tool is required to answer the user's query, respond only with <|tool_call|> followed by a "
                 "JSON list of tools used.<|end_of_text|>\n"
                 "<|start_of_role|>available_tools<|end_of_role|>[\n    %s\n]<|end_of_text|>\n"
                 "<|start_of_role|>user<|end_of_role|>Weather in Paris?<|end_of_text|>\n"
                 "<|start_of_role|>assistant<|end_of_role|><|tool_call|>[{\"name\": \"get_weather\", \"arguments\": "
                 "{\"city\": \"Paris\"}}]<|end_of_text|>\n"
                 "<|start_of_role|>tool<|end_of_role|>{\"temp\": 22}<|end_of_text|>\n"
                 "<|start_of_role|>assistant<|end_of_role|>",
                 date, "{\n        \"type\": \"function\",\n        \"function\": {\n            \"name\": "
                       "\"get_weather\",\n            \"parameters\": {\n                \"type\": \"object\",\n"
                       "                \"properties\": {\n                    \"city\": {\n                        "
                       "\"type\": \"string\"\n                    }\n                }\n            }\n        }\n"
                       "    }");
        check_tools_tmpl(AXP_CHAT_GRANITE, tmpl_granite33, NULL, tool_loop, 3, want);
        /* 3.1: its own words (escapes read), each tool alone, two calls in one turn, results
         * in tool_response turns; a system prompt given replaces the template's */
        snprintf(want, sizeof(want),
                 "<|start_of_role|>system<|end_of_role|>Knowledge Cutoff Date: April 2024.\nToday's Date: %s.\nYou "
                 "are Granite, developed by IBM. You are a helpful AI assistant with access to the following tools. "
                 "When a tool is required to answer the user's query, respond with <|tool_call|>.<|end_of_text|>\n"
                 "<|start_of_role|>available_tools<|end_of_role|>\n%s<|end_of_text|>\n"
                 "<|start_of_role|>user<|end_of_role|>Paris and Rome?<|end_of_text|>\n"
                 "<|start_of_role|>assistant<|end_of_role|><|tool_call|>[{\"name\": \"get_weather\", \"arguments\": "
                 "{\"city\": \"Paris\"}}, {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}]"
                 "<|end_of_text|>\n"
                 "<|start_of_role|>tool_response<|end_of_role|>22<|end_of_text|>\n"
                 "<|start_of_role|>tool_response<|end_of_role|>25<|end_of_text|>\n"
                 "<|start_of_role|>user<|end_of_role|>Thanks. Warmer?<|end_of_text|>\n"
                 "<|start_of_role|>assistant<|end_of_role|>",
                 date, granite_tool_json);
        check_tools_tmpl(AXP_CHAT_GRANITE, tmpl_granite31, NULL, two, 6, want);
        check_tools_tmpl(AXP_CHAT_GRANITE, tmpl_granite31, "Be brief.", tool_loop, 3,
                         "<|start_of_role|>system<|end_of_role|>Be brief.<|end_of_text|>\n"
                         "<|start_of_role|>available_tools<|end_of_role|>\n"
                         "{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"get_weather\",\n"
                         "        \"parameters\": {\n            \"type\": \"object\",\n            \"properties\": "
                         "{\n                \"city\": {\n                    \"type\": \"string\"\n                }"
                         "\n            }\n        }\n    }\n}<|end_of_text|>\n"
                         "<|start_of_role|>user<|end_of_role|>Weather in Paris?<|end_of_text|>\n"
                         "<|start_of_role|>assistant<|end_of_role|><|tool_call|>[{\"name\": \"get_weather\", "
                         "\"arguments\": {\"city\": \"Paris\"}}]<|end_of_text|>\n"
                         "<|start_of_role|>tool_response<|end_of_role|>{\"temp\": 22}<|end_of_text|>\n"
                         "<|start_of_role|>assistant<|end_of_role|>");
        /* no template (the family from the vocabulary): 3.3's words; without tools, no system
         * prompt of the template's (as without tools at all) */
        char *got = NULL;
        axp_error err = {};
        axp_tools *t = NULL;
        CHECK(axp_tools_parse(weather_tools, strlen(weather_tools), &t, &err) == 0);
        CHECK(axp_tools_format_chat(AXP_CHAT_GRANITE, NULL, t, NULL, tool_loop, 1, &got, &err) == 0);
        snprintf(want, sizeof(want),
                 "<|start_of_role|>system<|end_of_role|>Knowledge Cutoff Date: April 2024. Today's Date: %s. You "
                 "are Granite, developed by IBM. You are a helpful assistant with access to the following tools. When "
                 "a tool is required to answer the user's query, respond only with <|tool_call|> followed by a JSON "
                 "list of tools used. If a tool does not exist in the provided list of tools, notify the user that "
                 "you do not have the ability to fulfill the request.<|end_of_text|>\n"
                 "<|start_of_role|>available_tools<|end_of_role|>[",
                 date);
        CHECK_MSG(got && strncmp(got, want, strlen(want)) == 0, "got  '%s'\nwant '%s'", got, want);
        free(got);
        got = NULL;
        CHECK(axp_tools_format_chat(AXP_CHAT_GRANITE, tmpl_granite33, NULL, NULL, tool_loop, 3, &got, &err) == 0);
        const char *plain = "<|start_of_role|>user<|end_of_role|>Weather in Paris?<|end_of_text|>\n"
                            "<|start_of_role|>assistant<|end_of_role|><|tool_call|>[{\"name\": \"get_weather\", "
                            "\"arguments\": {\"city\": \"Paris\"}}]<|end_of_text|>\n"
                            "<|start_of_role|>tool<|end_of_role|>{\"temp\": 22}<|end_of_text|>\n"
                            "<|start_of_role|>assistant<|end_of_role|>";
        CHECK_MSG(got && strcmp(got, plain) == 0, "got  '%s'\nwant '%s'", got, plain);
        free(got);

        /* the answer read back: one call in the list; cut short, two calls or no list: text */
        char *call = NULL;
        const char *a = "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]";
        CHECK(axp_tools_read_call(AXP_CHAT_GRANITE, NULL, a, strlen(a), &call) == 1);
        CHECK_MSG(call && strcmp(call, "{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}") == 0, "%s",
                  call);
        free(call);
        call = NULL;
        const char *cut = "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa";
        const char *bare = "<|tool_call|>{\"name\": \"get_weather\", \"arguments\": {}}";
        const char *text = "It is sunny.";
        CHECK(axp_tools_read_call(AXP_CHAT_GRANITE, NULL, cut, strlen(cut), &call) == 0 && !call);
        CHECK(axp_tools_read_call(AXP_CHAT_GRANITE, NULL, bare, strlen(bare), &call) == 0 && !call);
        CHECK(axp_tools_read_call(AXP_CHAT_GRANITE, NULL, text, strlen(text), &call) == 0 && !call);

        /* the grammars: auto takes the call or text without the marker; none no call */
        loaded_vocab v;
        if (!llama3_vocab(&v)) {
                axp_tools_free(t);
                return;
        }
        axp_vocab_trie *trie = NULL;
        char *ga = NULL, *gn = none_grammar(AXP_CHAT_GRANITE, tmpl_granite33);
        CHECK(axp_vocab_trie_new(v.tok, &trie, &err) == 0);
        CHECK_MSG(axp_tools_grammar(AXP_CHAT_GRANITE, tmpl_granite33, t, AXP_TOOL_CHOICE_AUTO, &ga, &err) == 0, "%s",
                  err.msg);
        if (ga && gn && trie) {
                const char *ac = "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}]";
                CHECK(grammar_takes(&v, trie, ga, ac));
                CHECK(grammar_takes(&v, trie, ga, "It is sunny."));
                CHECK(!grammar_takes(&v, trie, ga, "<|tool_call|>[{\"name\": \"get_time\", \"arguments\": {}}]"));
                CHECK(!grammar_takes(&v, trie, ga, "Let me see. <|tool_call|>"));
                CHECK(!grammar_takes(&v, trie, gn, ac));
                CHECK(grammar_takes(&v, trie, gn, "<b>22</b> degrees <|tool_cal"));
        }
        free(ga);
        free(gn);
        axp_tools_free(t);
        axp_vocab_trie_free(trie);
        vocab_close(&v);
}

/* Qwen3-Coder's template (its turns, its tool lines) and tools with each kind of argument */
static const char tmpl_qwen3_coder[] =
        "{%- if system_message is defined %}{{- \"<|im_start|>system\\n\" + system_message }}{%- else %}...{{- "
        "\"\\n\\n# Tools\\n\\nYou have access to the following tools:\\n\\n\" }}{{- \"<tools>\" }}...{{- "
        "'\\n<tool_call>\\n<function=' + tool_call.name + '>\\n' }}...{{- '<parameter=' + args_name + '>\\n' }}"
        "...{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}";
static const char coder_tools[] =
        "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \" Weather now. \", "
        "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \"description\": "
        "\"City\"}, \"days\": {\"type\": \"integer\", \"minimum\": 1}, \"unit\": {\"type\": \"string\", \"enum\": "
        "[\"c\", \"f\"]}, \"tags\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}}, \"live\": {\"type\": "
        "\"boolean\"}, \"note\": {}}, \"required\": [\"city\"]}}}, {\"type\": \"function\", \"function\": {\"name\": "
        "\"ping\"}}]";

static void test_tools_qwen3_coder(void) {
        axp_tools *t = NULL;
        axp_error err = {};
        char *got = NULL;

        CHECK_EQ_INT(axp_chat_detect(tmpl_qwen3_coder, NULL), AXP_CHAT_QWEN3_CODER);
        CHECK_EQ_INT(axp_chat_detect(tmpl_qwen2, NULL), AXP_CHAT_CHATML);
        CHECK(axp_chat_takes_tools(AXP_CHAT_QWEN3_CODER, tmpl_qwen3_coder, NULL));
        /* its plain turns are ChatML's */
        const axp_chat_msg hi[] = { { "system", "Be brief." }, { "user", "Hi" } };
        char *a = axp_chat_format(AXP_CHAT_QWEN3_CODER, hi, 2, true), *b = axp_chat_format(AXP_CHAT_CHATML, hi, 2, true);
        CHECK(a && b && strcmp(a, b) == 0);
        free(a);
        free(b);

        CHECK_MSG(axp_tools_parse(coder_tools, strlen(coder_tools), &t, &err) == 0, "%s", err.msg);
        const axp_chat_msg loop[] = {
                { "user", "Weather in Paris?" },
                { "tool_call", "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3, "
                               "\"tags\": [\"a\", \"b\"], \"live\": true}}" },
                { "tool_call", "{\"name\": \"ping\", \"arguments\": {}}" },
                { "tool", "{\"temp\": 22}" },
                { "tool", "pong" },
        };
        CHECK_MSG(axp_tools_format_chat(AXP_CHAT_QWEN3_CODER, tmpl_qwen3_coder, t, NULL, loop, 5, &got, &err) == 0,
                  "%s", err.msg);
        const char *want =
                "<|im_start|>system\nYou are Qwen, a helpful AI assistant that can interact with a computer to solve "
                "tasks.\n\n# Tools\n\nYou have access to the following tools:\n\n<tools>\n<function>\n<name>get_weather"
                "</name>\n<description>Weather now.</description>\n<parameters>\n<parameter>\n<name>city</name>\n"
                "<type>string</type>\n<description>City</description>\n</parameter>\n<parameter>\n<name>days</name>\n"
                "<type>integer</type>\n<minimum>1</minimum>\n</parameter>\n<parameter>\n<name>unit</name>\n<type>string"
                "</type>\n<enum>[\"c\", \"f\"]</enum>\n</parameter>\n<parameter>\n<name>tags</name>\n<type>array</type>\n"
                "<items>{\"type\": \"string\"}</items>\n</parameter>\n<parameter>\n<name>live</name>\n<type>boolean"
                "</type>\n</parameter>\n<parameter>\n<name>note</name>\n</parameter>\n<required>[\"city\"]</required>\n"
                "</parameters>\n</function>\n<function>\n<name>ping</name>\n<parameters>\n</parameters>\n</function>\n"
                "</tools>\n\nIf you choose to call a tool ONLY reply in the following format with NO suffix:\n\n"
                "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n"
                "<parameter=example_parameter_2>\nvalue_2\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\n"
                "Reminder:\n- Function calls MUST follow the specified format: the tool calling block MUST begin with "
                "an opening <tool_call> tag and end with a closing </tool_call> tag.\n- Required parameters MUST be "
                "specified\n- You may provide optional reasoning for your function call in natural language BEFORE "
                "the function call, but NOT after\n- If there is no function call available, answer the question "
                "like normal with your current knowledge and do not tell the user about function calls\n</IMPORTANT>"
                "<|im_end|>\n"
                "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
                "<|im_start|>assistant\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                "<parameter=days>\n3\n</parameter>\n<parameter=tags>\n[\"a\", \"b\"]\n</parameter>\n<parameter=live>\n"
                "True\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=ping>\n</function>\n</tool_call>"
                "<|im_end|>\n"
                "<|im_start|>user\n<tool_response>\n{\"temp\": 22}\n</tool_response>\n<tool_response>\npong\n"
                "</tool_response>\n<|im_end|>\n<|im_start|>assistant\n";
        CHECK_MSG(got && strcmp(got, want) == 0, "got  '%s'\nwant '%s'", got, want);
        free(got);
        got = NULL;
        /* a system prompt given; no tools: no tool list, no system prompt of its own */
        CHECK(axp_tools_format_chat(AXP_CHAT_QWEN3_CODER, tmpl_qwen3_coder, NULL, "Be brief.", loop, 1, &got, &err) == 0);
        CHECK_MSG(got && strcmp(got, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWeather in Paris?"
                                     "<|im_end|>\n<|im_start|>assistant\n") == 0, "%s", got);
        free(got);

        /* the answer read back, each argument typed by its schema: a string that looks like a
         * number stays a string, text over lines kept; without the tools, JSON where it parses */
        const char *ans = "<tool_call>\n<function=get_weather>\n<parameter=city>\n42\n</parameter>\n<parameter=days>\n3\n"
                          "</parameter>\n<parameter=unit>\nc\n</parameter>\n<parameter=tags>\n[\"a\"]\n</parameter>\n"
                          "<parameter=live>\ntrue\n</parameter>\n<parameter=note>\n{\"x\": 1}\n</parameter>\n"
                          "</function>\n</tool_call>";
        char *call = NULL;
        CHECK(axp_tools_read_call(AXP_CHAT_QWEN3_CODER, t, ans, strlen(ans), &call) == 1);
        CHECK_MSG(call && strcmp(call, "{\"name\":\"get_weather\",\"arguments\":{\"city\":\"42\",\"days\":3,\"unit\":"
                                       "\"c\",\"tags\":[\"a\"],\"live\":true,\"note\":{\"x\":1}}}") == 0, "%s", call);
        free(call);
        call = NULL;
        CHECK(axp_tools_read_call(AXP_CHAT_QWEN3_CODER, NULL, ans, strlen(ans), &call) == 1);
        CHECK_MSG(call && strncmp(call, "{\"name\":\"get_weather\",\"arguments\":{\"city\":42,", 43) == 0, "%s", call);
        free(call);
        call = NULL;
        const char *lines = "<tool_call>\n<function=get_weather>\n<parameter=city>\nNew\nYork \"NY\"\n</parameter>\n"
                            "</function>\n</tool_call>";
        CHECK(axp_tools_read_call(AXP_CHAT_QWEN3_CODER, t, lines, strlen(lines), &call) == 1);
        CHECK_MSG(call && strcmp(call, "{\"name\":\"get_weather\",\"arguments\":{\"city\":\"New\\nYork \\\"NY\\\"\"}}") ==
                          0, "%s", call);
        free(call);
        call = NULL;
        const char *ping = "<tool_call>\n<function=ping>\n</function>\n</tool_call>";
        CHECK(axp_tools_read_call(AXP_CHAT_QWEN3_CODER, t, ping, strlen(ping), &call) == 1);
        CHECK_MSG(call && strcmp(call, "{\"name\":\"ping\",\"arguments\":{}}") == 0, "%s", call);
        free(call);
        call = NULL;
        const char *twice = "<tool_call>\n<function=get_weather>\n<parameter=city>\nA\n</parameter>\n<parameter=city>\n"
                            "B\n</parameter>\n</function>\n</tool_call>";
        const char *cut = "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar";
        const char *nokey = "<tool_call>\n<function=get_weather>\n<parameter=>\nA\n</parameter>\n</function>\n"
                            "</tool_call>";
        CHECK(axp_tools_read_call(AXP_CHAT_QWEN3_CODER, t, twice, strlen(twice), &call) == 0 && !call);
        CHECK(axp_tools_read_call(AXP_CHAT_QWEN3_CODER, t, cut, strlen(cut), &call) == 0 && !call);
        CHECK(axp_tools_read_call(AXP_CHAT_QWEN3_CODER, t, nokey, strlen(nokey), &call) == 0 && !call);
        CHECK(axp_tools_read_call(AXP_CHAT_QWEN3_CODER, t, "Sunny.", 6, &call) == 0 && !call);

        /* the grammar: the schema's order, required keys, each value's kind */
        loaded_vocab v;
        if (!llama3_vocab(&v)) {
                axp_tools_free(t);
                return;
        }
        axp_vocab_trie *trie = NULL;
        char *ga = NULL, *gr = NULL, *gn = NULL;
        CHECK(axp_vocab_trie_new(v.tok, &trie, &err) == 0);
        CHECK_MSG(axp_tools_grammar(AXP_CHAT_QWEN3_CODER, NULL, t, AXP_TOOL_CHOICE_AUTO, &ga, &err) == 0, "%s", err.msg);
        CHECK_MSG(axp_tools_grammar(AXP_CHAT_QWEN3_CODER, NULL, t, AXP_TOOL_CHOICE_REQUIRED, &gr, &err) == 0, "%s",
                  err.msg);
        CHECK_MSG(axp_tools_grammar(AXP_CHAT_QWEN3_CODER, NULL, t, AXP_TOOL_CHOICE_NONE, &gn, &err) == 0, "%s", err.msg);
        if (ga && gr && gn && trie) {
                const char *compact = "<tool_call>\n<function=get_weather>\n<parameter=city>\n42\n</parameter>\n"
                                      "<parameter=days>\n3\n</parameter>\n<parameter=unit>\nc\n</parameter>\n"
                                      "<parameter=tags>\n[\"a\"]\n</parameter>\n<parameter=live>\ntrue\n</parameter>\n"
                                      "<parameter=note>\nanything </param\n</parameter>\n</function>\n</tool_call>";
                CHECK(grammar_takes(&v, trie, ga, compact));
                CHECK(grammar_takes(&v, trie, gr, compact));
                CHECK(grammar_takes(&v, trie, gr, lines));
                CHECK(grammar_takes(&v, trie, gr, ping));
                CHECK(grammar_takes(&v, trie, ga, "It is sunny."));
                CHECK(!grammar_takes(&v, trie, gr, "It is sunny."));
                /* city is required; days is an integer; unit one of the enum; the schema's order */
                CHECK(!grammar_takes(&v, trie, gr, "<tool_call>\n<function=get_weather>\n<parameter=days>\n3\n"
                                                   "</parameter>\n</function>\n</tool_call>"));
                CHECK(!grammar_takes(&v, trie, gr, "<tool_call>\n<function=get_weather>\n<parameter=city>\nA\n"
                                                   "</parameter>\n<parameter=days>\nthree\n</parameter>\n</function>\n"
                                                   "</tool_call>"));
                CHECK(!grammar_takes(&v, trie, gr, "<tool_call>\n<function=get_weather>\n<parameter=city>\nA\n"
                                                   "</parameter>\n<parameter=unit>\nk\n</parameter>\n</function>\n"
                                                   "</tool_call>"));
                CHECK(!grammar_takes(&v, trie, gr, "<tool_call>\n<function=get_weather>\n<parameter=days>\n3\n"
                                                   "</parameter>\n<parameter=city>\nA\n</parameter>\n</function>\n"
                                                   "</tool_call>"));
                CHECK(!grammar_takes(&v, trie, gr, "<tool_call>\n<function=get_time>\n</function>\n</tool_call>"));
                /* text: no <tool_call> anywhere */
                CHECK(!grammar_takes(&v, trie, ga, "Let me see. <tool_call>"));
                CHECK(grammar_takes(&v, trie, gn, "<b>22</b> degrees <tool_cal"));
                CHECK(!grammar_takes(&v, trie, gn, compact));
        }
        /* a bad schema names its tool and parameter */
        axp_tools *bad = NULL;
        const char *bad_tools = "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": "
                                "\"object\", \"properties\": {\"n\": {\"type\": \"integer\", \"frobnicate\": 1}}}}}]";
        char *gbad = NULL;
        CHECK(axp_tools_parse(bad_tools, strlen(bad_tools), &bad, &err) == 0);
        CHECK(axp_tools_grammar(AXP_CHAT_QWEN3_CODER, NULL, bad, AXP_TOOL_CHOICE_AUTO, &gbad, &err) == -EINVAL && !gbad);
        CHECK_MSG(strstr(err.msg, "tools[0] (f) parameter 'n'"), "%s", err.msg);
        axp_tools_free(bad);
        free(ga);
        free(gr);
        free(gn);
        axp_tools_free(t);
        axp_vocab_trie_free(trie);
        vocab_close(&v);
}

/* Thinking switched off as each template does it: Qwen3's and SmolLM3's own empty think blocks
 * read from them; DeepSeek-R1's distills always think (no switch); Llama 3 never does. */
static const char tmpl_qwen3_think[] =
        "{%- if message.role == \"assistant\" %}{%- set reasoning_content = '' %}{{- '<|im_start|>' + message.role + "
        "'\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}{%- endif %}"
        "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- if enable_thinking is defined and "
        "enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}";
static const char tmpl_smollm3_think[] =
        "{%- if enable_thinking is not defined -%}{%- set enable_thinking = true -%}{%- endif -%}<|im_start|>..."
        "{%- if reasoning_mode == \"/think\" -%}{{ \"<|im_start|>assistant\\n\" }}{%- else -%}{{ "
        "\"<|im_start|>assistant\\n\" + \"<think>\\n\\n</think>\\n\" }}{%- endif -%}";
static const char tmpl_r1_distill[] =
        "{{'<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>'}}{% if add_generation_prompt and not ns.is_tool %}"
        "{{'<｜Assistant｜><think>\\n'}}{% endif %}";

static const char tmpl_qwq[] =
        "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + "
        "'<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n<think>\\n' }}"
        "{%- endif %}";

static void check_think(const char *tmpl, int on, int want_r, const char *want) {
        char *text = strdup("PROMPT");
        axp_error err = {};
        int r = axp_chat_apply_think(tmpl, on, &text, &err);
        CHECK_EQ_INT(r, want_r);
        if (r == 0)
                CHECK_MSG(strcmp(text, want) == 0, "got '%s', want '%s'", text, want);
        else
                CHECK_MSG(strstr(err.msg, want), "%s", err.msg);
        free(text);
}

static void test_think(void) {
        char *q = axp_chat_no_think(tmpl_qwen3_think), *sm = axp_chat_no_think(tmpl_smollm3_think);
        CHECK_MSG(q && strcmp(q, "<think>\n\n</think>\n\n") == 0, "%s", q);
        CHECK_MSG(sm && strcmp(sm, "<think>\n\n</think>\n") == 0, "%s", sm);
        free(q);
        free(sm);
        CHECK(axp_chat_thinks(tmpl_r1_distill) && !axp_chat_no_think(tmpl_r1_distill));
        CHECK(!axp_chat_thinks(tmpl_llama3) && !axp_chat_no_think(tmpl_llama3));
        CHECK(!axp_chat_thinks(NULL) && !axp_chat_no_think(NULL) && !axp_chat_thinks("chatml"));
        /* the generation prompt that opens the block itself (QwQ, Qwen3's thinking-only
         * models): the answer begins inside it; an earlier answer's <think> (Qwen3's history) or
         * the empty block of the off switch does not open it */
        /* R1's distills' own turns are none of our families: used raw, no opening written */
        CHECK(axp_chat_template_unknown(tmpl_r1_distill) && !axp_chat_think_opens(tmpl_r1_distill));
        CHECK(axp_chat_think_opens(tmpl_qwq));
        CHECK(!axp_chat_think_opens(tmpl_qwen3_think) && !axp_chat_think_opens(tmpl_smollm3_think));
        CHECK(!axp_chat_think_opens(tmpl_llama3) && !axp_chat_think_opens(NULL));
        CHECK(axp_chat_think_opens("{%- for m in messages %}{{- '<think>x</think>' }}{%- endfor %}"
                                   "{{- '<|im_start|>assistant\\n<think>\\n' }}"));
        CHECK(axp_chat_think_opens("{%- if add_generation_prompt %}{{- \"<|im_start|>assistant\\n<think>\" }}{%- endif %}"));
        CHECK(!axp_chat_think_opens("{%- for m in messages %}{{- '\\n<think>\\n' + m.r + '</think>' }}{%- endfor %}"
                                    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"));

        check_think(tmpl_qwen3_think, false, 0, "PROMPT<think>\n\n</think>\n\n");
        check_think(tmpl_qwen3_think, true, 0, "PROMPT");
        check_think(tmpl_smollm3_think, false, 0, "PROMPT<think>\n\n</think>\n");
        /* QwQ's (ChatML turns): the generation prompt's own opening of the block, on or by
         * default; R1's distills' used raw: none */
        check_think(tmpl_qwq, true, 0, "PROMPT<think>\n");
        check_think(tmpl_qwq, -1, 0, "PROMPT<think>\n");
        check_think(tmpl_qwq, false, -EINVAL, "no switch to turn thinking off");
        check_think(tmpl_r1_distill, true, 0, "PROMPT");
        check_think(tmpl_r1_distill, -1, 0, "PROMPT");
        check_think(tmpl_qwen3_think, -1, 0, "PROMPT");
        check_think(tmpl_llama3, -1, 0, "PROMPT");
        check_think(NULL, -1, 0, "PROMPT");
        check_think(tmpl_r1_distill, false, -EINVAL, "no switch to turn thinking off");
        check_think(tmpl_llama3, false, 0, "PROMPT");
        check_think(tmpl_llama3, true, -EINVAL, "the model does not think");
        check_think(NULL, true, -EINVAL, "the model does not think");
        /* literals cut short or odd: no switch found, nothing read past the end */
        CHECK(!axp_chat_no_think("enable_thinking '<think>\\n\\n</think"));
        CHECK(!axp_chat_no_think("enable_thinking <think></think>"));
        CHECK(!axp_chat_no_think("enable_thinking '<think>x</think>'"));
        char *esc = axp_chat_no_think("enable_thinking \"<think>\\n\\n</think>\\n\\n\"");
        CHECK_MSG(esc && strcmp(esc, "<think>\n\n</think>\n\n") == 0, "%s", esc);
        free(esc);
}

int main(void) {
        RUN(test_detect_template);
        RUN(test_detect_vocab);
        RUN(test_format);
        RUN(test_format_next);
        RUN(test_format_mistral);
        RUN(test_llama3_tokens);
        RUN(test_tool_loop);
        RUN(test_tools_mistral_v7);
        RUN(test_tool_choice_none);
        RUN(test_tool_choice_none_token);
        RUN(test_tools_granite);
        RUN(test_tools_qwen3_coder);
        RUN(test_think);
        TEST_EXIT();
}
