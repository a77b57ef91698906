/* SPDX-License-Identifier: MIT */
/* Chat templates by family. Each formatter writes what the model's own Jinja template renders
 * (with add_generation_prompt), without the leading BOS, which the tokenizer adds:
 *
 *   llama3   Meta-Llama-3-*-Instruct: each turn "<|start_header_id|>ROLE<|end_header_id|>\n\n"
 *            + trim(content) + "<|eot_id|>".
 *   chatml   "<|im_start|>ROLE\n" + content + "<|im_end|>\n" (Qwen, Hermes, ...). Qwen2's own
 *            template also adds a default system prompt when there is none; that prompt is
 *            model-specific and left to the caller.
 *   qwen3-coder  Qwen3-Coder: ChatML's turns (its template has a <function=NAME> tool-call
 *            form, tools.h's; without tools its turns are chatml's).
 *   mistral  Mistral-7B-Instruct v0.1/v0.2: "[INST] " + user + " [/INST]" + assistant + "</s>";
 *            the template has no system role: a system prompt goes before the first user
 *            message, separated by "\n\n", as in the templates that have one.
 *   mistral-v1         Mistral's "v1" (v0.2 with a system prompt): " [INST] " + user + " [/INST]"
 *                      + " " + assistant + "</s>"; the system prompt as mistral's.
 *   mistral-v3         "v3" (v0.3, Mixtral-8x22B, Mistral-Large-2407): "[INST] " + user +
 *                      "[/INST]" + " " + trim(assistant) + "</s>"; the system prompt + "\n\n"
 *                      goes into the conversation's last message if that is a user's (and is
 *                      dropped otherwise), as the template does.
 *   mistral-v3-tekken  Mistral-Nemo: "[INST]" + user + "[/INST]" + assistant + "</s>"; the
 *                      system prompt as v3's.
 *   mistral-v7         Mistral-Large-2411: "[SYSTEM_PROMPT] " + system + "[/SYSTEM_PROMPT]"
 *                      where it stands, "[INST] " + user + "[/INST]", " " + assistant + "</s>".
 *   mistral-v7-tekken  Mistral-Small-3.x, Devstral, Ministral: the same without the spaces.
 *                      (Their templates' default system prompt, when none is given, is
 *                      model-specific and left to the caller.)
 *   llama2   Llama-2-*-chat: "[INST] " + strip(user, with the system prompt as
 *            "<<SYS>>\n...\n<</SYS>>\n\n" before the first one) + " [/INST]", then
 *            " " + strip(assistant) + " </s>", and "<s>" before every later "[INST]".
 *   phi3     Phi-3/3.5/4-mini-instruct: "<|ROLE|>\n" + content + "<|end|>\n", then "<|assistant|>\n".
 *   gemma    Gemma 2/3 instruct: "<start_of_turn>ROLE\n" + trim(content) + "<end_of_turn>\n" with
 *            "assistant" named "model"; Gemma has no system turn: the system prompt (trimmed)
 *            goes before the first user message, separated by "\n\n"; then
 *            "<start_of_turn>model\n".
 *   tulu     AllenAI's Tülu 3 and OLMo 2 instruct: "<|ROLE|>\n" + content + "\n" for the system
 *            and user turns, "<|assistant|>\n" + content + "<|endoftext|>" (their EOS) + "\n"
 *            for answers (the last without the "\n"), then "<|assistant|>\n".
 *   exaone3  LG EXAONE 3.0/3.5 instruct: "[|system|]" + trim(content) + "[|endofturn|]\n",
 *            "[|user|]" + trim(content) + "\n", "[|assistant|]" + trim(content) +
 *            "[|endofturn|]\n", then "[|assistant|]", as llama.cpp writes it.
 *   granite  IBM Granite 3.x instruct: "<|start_of_role|>ROLE<|end_of_role|>" + content +
 *            "<|end_of_text|>\n", then "<|start_of_role|>assistant<|end_of_role|>", as
 *            llama.cpp writes it (the template's own default system prompt, dated, is left to
 *            the caller).
 *
 * Detection follows llama.cpp's substring heuristics on tokenizer.chat_template. */
#include "chat.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/strbuf.h"
#include "base/utf8.h"
#include "unicode.h"

static const char *const family_names[] = {
        [AXP_CHAT_RAW] = "raw",
        [AXP_CHAT_LLAMA3] = "llama3",
        [AXP_CHAT_CHATML] = "chatml",
        [AXP_CHAT_MISTRAL] = "mistral",
        [AXP_CHAT_LLAMA2] = "llama2",
        [AXP_CHAT_PHI3] = "phi3",
        [AXP_CHAT_GEMMA] = "gemma",
        [AXP_CHAT_MISTRAL_V1] = "mistral-v1",
        [AXP_CHAT_MISTRAL_V3] = "mistral-v3",
        [AXP_CHAT_MISTRAL_V3_TEKKEN] = "mistral-v3-tekken",
        [AXP_CHAT_MISTRAL_V7] = "mistral-v7",
        [AXP_CHAT_MISTRAL_V7_TEKKEN] = "mistral-v7-tekken",
        [AXP_CHAT_GRANITE] = "granite",
        [AXP_CHAT_TULU] = "tulu",
        [AXP_CHAT_EXAONE3] = "exaone3",
        [AXP_CHAT_QWEN3_CODER] = "qwen3-coder",
};

const char *axp_chat_family_name(axp_chat_family f) {
        if ((unsigned) f >= ELEMENTSOF(family_names))
                return "raw";
        return family_names[f];
}

static bool has(const char *s, const char *sub) {
        return strstr(s, sub) != NULL;
}

static bool vocab_has(const axp_tokenizer *tok, const char *a, const char *b) {
        return tok && axp_tokenizer_find(tok, a) >= 0 && axp_tokenizer_find(tok, b) >= 0;
}

axp_chat_family axp_chat_detect(const char *tmpl, const axp_tokenizer *tok) {
        if (tmpl && *tmpl) {
                /* a family named directly, as llama.cpp's --chat-template accepts */
                for (size_t i = 0; i < ELEMENTSOF(family_names); i++)
                        if (strcmp(tmpl, family_names[i]) == 0)
                                return i;
                /* Qwen3-Coder's: ChatML whose tool calls are XML, <function=NAME> */
                if (has(tmpl, "<|im_start|>") && has(tmpl, "<function=") && has(tmpl, "<parameter="))
                        return AXP_CHAT_QWEN3_CODER;
                if (has(tmpl, "<|im_start|>"))
                        return AXP_CHAT_CHATML;
                if (strncmp(tmpl, "mistral", 7) == 0 || has(tmpl, "[INST]")) {
                        /* Mistral's own templates, told apart by their markers and by the
                         * quote right after "[INST]" (no space: tekken); otherwise Llama 2
                         * if it has a system block */
                        bool tekken = has(tmpl, "[INST]'") || has(tmpl, "[INST]\"");
                        if (has(tmpl, "[SYSTEM_PROMPT]"))
                                return tekken ? AXP_CHAT_MISTRAL_V7_TEKKEN : AXP_CHAT_MISTRAL_V7;
                        if (has(tmpl, "[AVAILABLE_TOOLS]"))
                                return tekken ? AXP_CHAT_MISTRAL_V3_TEKKEN : AXP_CHAT_MISTRAL_V3;
                        if (has(tmpl, "' [INST] ' + system_message"))
                                return AXP_CHAT_MISTRAL_V1;
                        return has(tmpl, "<<SYS>>") ? AXP_CHAT_LLAMA2 : AXP_CHAT_MISTRAL;
                }
                if (has(tmpl, "<|start_header_id|>") && has(tmpl, "<|end_header_id|>"))
                        return AXP_CHAT_LLAMA3;
                if (has(tmpl, "<start_of_turn>"))
                        return AXP_CHAT_GEMMA;
                if (has(tmpl, "<|assistant|>") && has(tmpl, "<|end|>"))
                        return AXP_CHAT_PHI3;
                /* Tülu's: the answers end with the EOS the template names, a question with a
                 * newline (written out or escaped); Zephyr's end both with the EOS */
                if (has(tmpl, "<|assistant|>") && has(tmpl, "<|user|>") && has(tmpl, "eos_token") &&
                    (has(tmpl, "message['content'] + '\n'") || has(tmpl, "message['content'] + '\\n'")))
                        return AXP_CHAT_TULU;
                if (has(tmpl, "<|start_of_role|>"))
                        return AXP_CHAT_GRANITE;
                /* EXAONE 4's has a tool role and other turns: not this family */
                if (has(tmpl, "[|system|]") && has(tmpl, "[|assistant|]") && has(tmpl, "[|endofturn|]") &&
                    !has(tmpl, "[|tool|]"))
                        return AXP_CHAT_EXAONE3;
                return AXP_CHAT_RAW;
        }
        /* no template: what the vocabulary's special tokens suggest */
        if (vocab_has(tok, "<|start_header_id|>", "<|end_header_id|>"))
                return AXP_CHAT_LLAMA3;
        if (vocab_has(tok, "<|im_start|>", "<|im_end|>"))
                return AXP_CHAT_CHATML;
        if (vocab_has(tok, "[INST]", "[/INST]"))
                return AXP_CHAT_MISTRAL;
        if (vocab_has(tok, "<start_of_turn>", "<end_of_turn>"))
                return AXP_CHAT_GEMMA;
        if (vocab_has(tok, "<|assistant|>", "<|end|>"))
                return AXP_CHAT_PHI3;
        if (vocab_has(tok, "<|start_of_role|>", "<|end_of_role|>"))
                return AXP_CHAT_GRANITE;
        return AXP_CHAT_RAW;
}

bool axp_chat_template_unknown(const char *tmpl) {
        return tmpl && *tmpl && strcmp(tmpl, "raw") != 0 && axp_chat_detect(tmpl, NULL) == AXP_CHAT_RAW;
}

/* Python's str.isspace(), which Jinja's trim and str.strip() use. */
static bool py_space(uint32_t c) {
        return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
               c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
               c == 0x202f || c == 0x205f || c == 0x3000;
}

/* The bounds of s without leading and trailing white space. */
static void strip(const char *s, size_t *ret_off, size_t *ret_len) {
        const uint8_t *u = (const uint8_t *) s;
        size_t i = 0, j = strlen(s), k;

        while (i < j) {
                k = axp_utf8_char_len(s + i, j - i);
                if (k == 0 || !py_space(axp_utf8_decode(u + i, k, &k)))
                        break;
                i += k;
        }
        while (j > i) {
                size_t p = j - 1;
                while (p > i && (u[p] & 0xc0) == 0x80 && j - p < 4)
                        p--;
                k = axp_utf8_char_len(s + p, j - p);
                if (k != j - p || !py_space(axp_utf8_decode(u + p, k, &k)))
                        break;
                j = p;
        }
        *ret_off = i;
        *ret_len = j - i;
}

typedef struct out {
        char *buf;
        size_t len, cap;
        int r;
} out;

static void put(out *o, const char *s, size_t n) {
        if (o->r == 0)
                o->r = axp_strbuf_append(&o->buf, &o->len, &o->cap, s, n);
}

static void puts_(out *o, const char *s) {
        put(o, s, strlen(s));
}

static void put_stripped(out *o, const char *s) {
        size_t off, len;
        strip(s, &off, &len);
        put(o, s + off, len);
}

static const char *str_or_empty(const char *s) {
        return s ? s : "";
}

static bool is_role(const axp_chat_msg *m, const char *role) {
        return strcmp(str_or_empty(m->role), role) == 0;
}

/* The families whose turns are OPEN role CLOSE content END, and OPEN assistant CLOSE to
 * prompt the answer: llama3 (content trimmed), phi3, granite */
typedef struct turn_marks {
        const char *open, *close, *end;
        bool trim;
} turn_marks;

static const turn_marks llama3_marks = { "<|start_header_id|>", "<|end_header_id|>\n\n", "<|eot_id|>", true };
static const turn_marks phi3_marks = { "<|", "|>\n", "<|end|>\n", false };
static const turn_marks granite_marks = { "<|start_of_role|>", "<|end_of_role|>", "<|end_of_text|>\n", false };

static void format_turns(out *o, const axp_chat_msg *msgs, size_t n, bool gen, const turn_marks *k) {
        for (size_t i = 0; i < n; i++) {
                puts_(o, k->open);
                puts_(o, str_or_empty(msgs[i].role));
                puts_(o, k->close);
                if (k->trim)
                        put_stripped(o, str_or_empty(msgs[i].content));
                else
                        puts_(o, str_or_empty(msgs[i].content));
                puts_(o, k->end);
        }
        if (gen) {
                puts_(o, k->open);
                puts_(o, "assistant");
                puts_(o, k->close);
        }
}

static void format_chatml(out *o, const axp_chat_msg *msgs, size_t n, bool gen) {
        for (size_t i = 0; i < n; i++) {
                puts_(o, "<|im_start|>");
                puts_(o, str_or_empty(msgs[i].role));
                puts_(o, "\n");
                puts_(o, str_or_empty(msgs[i].content));
                puts_(o, "<|im_end|>\n");
        }
        if (gen)
                puts_(o, "<|im_start|>assistant\n");
}

/* One [INST] turn: the waiting system prompt (if any) and the user's text (if any). */
static void inst_user(out *o, out *sys, const char *user, bool llama2, bool started) {
        out content = {};

        if (sys->buf) {
                if (llama2) {
                        puts_(&content, "<<SYS>>\n");
                        put(&content, sys->buf, sys->len);
                        puts_(&content, "\n<</SYS>>\n\n");
                } else {
                        put(&content, sys->buf, sys->len);
                        if (user)
                                puts_(&content, "\n\n");
                }
                free(sys->buf);
                *sys = (out) {};
        }
        if (user)
                puts_(&content, user);
        put(&content, "", 0);
        if (content.r < 0)
                o->r = content.r;
        if (llama2 && started)
                puts_(o, "<s>");
        puts_(o, "[INST] ");
        if (llama2)
                put_stripped(o, content.buf ? content.buf : "");
        else
                put(o, content.buf, content.len);
        puts_(o, " [/INST]");
        free(content.buf);
}

/* [INST] families: system prompts wait for the next user message; one left over at the end
 * becomes a turn of its own. `started`: turns came before (llama2 opens each later one with
 * "<s>"). */
static void format_inst(out *o, const axp_chat_msg *msgs, size_t n, bool llama2, bool started) {
        out sys = {};

        for (size_t i = 0; i < n; i++) {
                const char *content = str_or_empty(msgs[i].content);
                if (is_role(&msgs[i], "system")) {
                        if (sys.len > 0)
                                puts_(&sys, "\n\n");
                        puts_(&sys, content);
                        put(&sys, "", 0);
                } else if (is_role(&msgs[i], "user"))
                        inst_user(o, &sys, content, llama2, started);
                else if (llama2) {
                        puts_(o, " ");
                        put_stripped(o, content);
                        puts_(o, " </s>");
                } else {
                        puts_(o, content);
                        puts_(o, "</s>");
                }
                started |= o->len > 0;
        }
        if (sys.buf)
                inst_user(o, &sys, NULL, llama2, started);
        if (sys.r < 0)
                o->r = sys.r;
        free(sys.buf);
}

/* Mistral's later templates, one row each: the [INST] markers, what opens an answer, where
 * the system prompt goes. */
typedef struct mistral_style {
        const char *inst, *inst_end, *answer;
        bool trim_answer;
        bool sys_last; /* the system prompt (+ "\n\n") opens the last message, if a user's */
        const char *sys, *sys_end; /* else: a block of its own where it stands (v7), or NULL:
                                    * before the first user message (v1) */
} mistral_style;

static const mistral_style mistral_styles[] = {
        [AXP_CHAT_MISTRAL_V1] = { " [INST] ", " [/INST]", " ", false, false, NULL, NULL },
        [AXP_CHAT_MISTRAL_V3] = { "[INST] ", "[/INST]", " ", true, true, NULL, NULL },
        [AXP_CHAT_MISTRAL_V3_TEKKEN] = { "[INST]", "[/INST]", "", false, true, NULL, NULL },
        [AXP_CHAT_MISTRAL_V7] = { "[INST] ", "[/INST]", " ", false, false, "[SYSTEM_PROMPT] ", "[/SYSTEM_PROMPT]" },
        [AXP_CHAT_MISTRAL_V7_TEKKEN] = { "[INST]", "[/INST]", "", false, false, "[SYSTEM_PROMPT]",
                                         "[/SYSTEM_PROMPT]" },
};

static void format_mistral(out *o, const axp_chat_msg *msgs, size_t n, const mistral_style *st) {
        out sys = {};
        bool first_user = true;

        for (size_t i = 0; i < n; i++) {
                const char *content = str_or_empty(msgs[i].content);
                if (is_role(&msgs[i], "system")) {
                        if (st->sys) {
                                puts_(o, st->sys);
                                puts_(o, content);
                                puts_(o, st->sys_end);
                                continue;
                        }
                        if (sys.len > 0)
                                puts_(&sys, "\n\n");
                        puts_(&sys, content);
                } else if (is_role(&msgs[i], "user")) {
                        puts_(o, st->inst);
                        if (sys.len > 0 && (st->sys_last ? i == n - 1 : first_user)) {
                                put(o, sys.buf, sys.len);
                                puts_(o, "\n\n");
                                sys.len = 0;
                        }
                        puts_(o, content);
                        puts_(o, st->inst_end);
                        first_user = false;
                } else {
                        puts_(o, st->answer);
                        if (st->trim_answer)
                                put_stripped(o, content);
                        else
                                puts_(o, content);
                        puts_(o, "</s>");
                }
        }
        if (sys.r < 0)
                o->r = sys.r;
        free(sys.buf);
}

static void format_tulu(out *o, const axp_chat_msg *msgs, size_t n, bool gen) {
        for (size_t i = 0; i < n; i++) {
                bool answer = is_role(&msgs[i], "assistant");
                puts_(o, "<|");
                puts_(o, str_or_empty(msgs[i].role));
                puts_(o, "|>\n");
                puts_(o, str_or_empty(msgs[i].content));
                if (answer)
                        puts_(o, "<|endoftext|>");
                if (!answer || i + 1 < n)
                        puts_(o, "\n");
        }
        if (gen)
                puts_(o, "<|assistant|>\n");
}

static void format_exaone3(out *o, const axp_chat_msg *msgs, size_t n, bool gen) {
        for (size_t i = 0; i < n; i++) {
                bool user = is_role(&msgs[i], "user");
                if (!user && !is_role(&msgs[i], "system") && !is_role(&msgs[i], "assistant"))
                        continue; /* the template has no other role */
                puts_(o, "[|");
                puts_(o, msgs[i].role);
                puts_(o, "|]");
                put_stripped(o, str_or_empty(msgs[i].content));
                puts_(o, user ? "\n" : "[|endofturn|]\n");
        }
        if (gen)
                puts_(o, "[|assistant|]");
}

static void format_gemma(out *o, const axp_chat_msg *msgs, size_t n, bool gen) {
        out sys = {};
        for (size_t i = 0; i < n; i++) {
                const char *content = str_or_empty(msgs[i].content);
                if (is_role(&msgs[i], "system")) {
                        put_stripped(&sys, content);
                        continue;
                }
                bool model = is_role(&msgs[i], "assistant");
                puts_(o, "<start_of_turn>");
                puts_(o, model ? "model" : str_or_empty(msgs[i].role));
                puts_(o, "\n");
                if (sys.len > 0 && !model) {
                        put(o, sys.buf, sys.len);
                        puts_(o, "\n\n");
                        sys.len = 0;
                }
                put_stripped(o, content);
                puts_(o, "<end_of_turn>\n");
        }
        if (gen)
                puts_(o, "<start_of_turn>model\n");
        if (sys.r < 0)
                o->r = sys.r;
        free(sys.buf);
}

static void format_raw(out *o, const axp_chat_msg *msgs, size_t n) {
        for (size_t i = 0; i < n; i++) {
                if (i > 0)
                        puts_(o, "\n\n");
                puts_(o, str_or_empty(msgs[i].content));
        }
}

char *axp_chat_format(axp_chat_family f, const axp_chat_msg *msgs, size_t n,
                      bool add_generation_prompt) {
        out o = {};

        switch (f) {
        case AXP_CHAT_LLAMA3:
                format_turns(&o, msgs, n, add_generation_prompt, &llama3_marks);
                break;
        case AXP_CHAT_CHATML:
        case AXP_CHAT_QWEN3_CODER:
                format_chatml(&o, msgs, n, add_generation_prompt);
                break;
        case AXP_CHAT_MISTRAL:
                format_inst(&o, msgs, n, false, false);
                break;
        case AXP_CHAT_LLAMA2:
                format_inst(&o, msgs, n, true, false);
                break;
        case AXP_CHAT_PHI3:
                format_turns(&o, msgs, n, add_generation_prompt, &phi3_marks);
                break;
        case AXP_CHAT_GEMMA:
                format_gemma(&o, msgs, n, add_generation_prompt);
                break;
        case AXP_CHAT_GRANITE:
                format_turns(&o, msgs, n, add_generation_prompt, &granite_marks);
                break;
        case AXP_CHAT_TULU:
                format_tulu(&o, msgs, n, add_generation_prompt);
                break;
        case AXP_CHAT_EXAONE3:
                format_exaone3(&o, msgs, n, add_generation_prompt);
                break;
        case AXP_CHAT_MISTRAL_V1:
        case AXP_CHAT_MISTRAL_V3:
        case AXP_CHAT_MISTRAL_V3_TEKKEN:
        case AXP_CHAT_MISTRAL_V7:
        case AXP_CHAT_MISTRAL_V7_TEKKEN:
                format_mistral(&o, msgs, n, &mistral_styles[f]);
                break;
        default:
                format_raw(&o, msgs, n);
                break;
        }
        put(&o, "", 0); /* an empty conversation is still a string */
        if (o.r < 0) {
                free(o.buf);
                return NULL;
        }
        return o.buf;
}

char *axp_chat_format_next(axp_chat_family f, const axp_chat_msg *msgs, size_t n,
                           bool close_answer) {
        out o = {};

        switch (f) {
        case AXP_CHAT_LLAMA3:
                if (close_answer)
                        puts_(&o, "<|eot_id|>");
                format_turns(&o, msgs, n, true, &llama3_marks);
                break;
        case AXP_CHAT_CHATML:
        case AXP_CHAT_QWEN3_CODER:
                puts_(&o, close_answer ? "<|im_end|>\n" : "\n");
                format_chatml(&o, msgs, n, true);
                break;
        case AXP_CHAT_MISTRAL:
        case AXP_CHAT_LLAMA2:
                if (close_answer)
                        puts_(&o, f == AXP_CHAT_LLAMA2 ? " </s>" : "</s>");
                format_inst(&o, msgs, n, f == AXP_CHAT_LLAMA2, true);
                break;
        case AXP_CHAT_PHI3:
                puts_(&o, close_answer ? "<|end|>\n" : "\n");
                format_turns(&o, msgs, n, true, &phi3_marks);
                break;
        case AXP_CHAT_GEMMA:
                puts_(&o, close_answer ? "<end_of_turn>\n" : "\n");
                format_gemma(&o, msgs, n, true);
                break;
        case AXP_CHAT_GRANITE:
                puts_(&o, close_answer ? "<|end_of_text|>\n" : "\n");
                format_turns(&o, msgs, n, true, &granite_marks);
                break;
        case AXP_CHAT_TULU:
                puts_(&o, close_answer ? "<|endoftext|>\n" : "\n");
                format_tulu(&o, msgs, n, true);
                break;
        case AXP_CHAT_EXAONE3:
                puts_(&o, close_answer ? "[|endofturn|]\n" : "\n");
                format_exaone3(&o, msgs, n, true);
                break;
        default:
                puts_(&o, "\n\n");
                format_raw(&o, msgs, n);
                break;
        }
        put(&o, "", 0);
        if (o.r < 0) {
                free(o.buf);
                return NULL;
        }
        return o.buf;
}

char *axp_jinja_literal(const char *p) {
        if (!p)
                return NULL;
        p += strspn(p, " \t\n");
        if (*p != '"' && *p != '\'')
                return NULL;
        char q = *p++;
        out o = {};
        for (; *p && *p != q; p++) {
                if (*p == '\\' && p[1]) {
                        p++;
                        put(&o, *p == 'n' ? "\n" : *p == 't' ? "\t" : p, 1);
                } else
                        put(&o, p, 1);
        }
        if (*p != q || o.r < 0) {
                free(o.buf);
                return NULL;
        }
        put(&o, "", 0); /* an empty literal is still a string */
        if (o.r < 0) {
                free(o.buf);
                return NULL;
        }
        return o.buf;
}

bool axp_chat_thinks(const char *tmpl) {
        return tmpl && has(tmpl, "<think>");
}

/* The generation prompt: after the template's last add_generation_prompt, or, where it has
 * none (a template that always adds the assistant's turn), after its last endfor. */
static const char *generation_part(const char *tmpl) {
        const char *g = NULL;
        for (const char *p = strstr(tmpl, "add_generation_prompt"); p; p = strstr(p + 1, "add_generation_prompt"))
                g = p;
        if (!g)
                for (const char *p = strstr(tmpl, "endfor"); p; p = strstr(p + 1, "endfor"))
                        g = p;
        return g;
}

char *axp_chat_think_open(const char *tmpl) {
        /* a template we do not know is used raw: no generation prompt of its own is written */
        if (!axp_chat_thinks(tmpl) || axp_chat_template_unknown(tmpl))
                return NULL;
        const char *g = generation_part(tmpl);
        if (!g)
                return NULL;
        for (const char *p = strstr(g, "<think>"); p; p = strstr(p + 1, "<think>")) {
                /* the literal that holds it, from its opening quote */
                const char *q = p;
                while (q > g && *q != '\'' && *q != '"')
                        q--;
                if (q == g)
                        continue;
                char *lit = axp_jinja_literal(q);
                const char *t = lit ? strstr(lit, "<think>") : NULL;
                if (t && !strstr(t, "</think>") && t[7 + strspn(t + 7, " \n")] == 0) {
                        char *open = strdup(t);
                        free(lit);
                        return open;
                }
                free(lit);
        }
        return NULL;
}

bool axp_chat_think_opens(const char *tmpl) {
        char *open = axp_chat_think_open(tmpl);
        free(open);
        return open != NULL;
}

/* "<think>" + blanks + "</think>" + blanks */
static bool empty_think(const char *s) {
        if (strncmp(s, "<think>", 7) != 0)
                return false;
        s += 7 + strspn(s + 7, " \n");
        if (strncmp(s, "</think>", 8) != 0)
                return false;
        s += 8;
        return s[strspn(s, " \n")] == 0;
}

char *axp_chat_no_think(const char *tmpl) {
        if (!axp_chat_thinks(tmpl) || !has(tmpl, "enable_thinking"))
                return NULL;
        for (const char *p = strstr(tmpl, "<think>"); p; p = strstr(p + 1, "<think>")) {
                if (p == tmpl || (p[-1] != '\'' && p[-1] != '"'))
                        continue;
                char *lit = axp_jinja_literal(p - 1);
                if (lit && empty_think(lit))
                        return lit;
                free(lit);
        }
        return NULL;
}

int axp_chat_apply_think(const char *tmpl, int think, char **text, axp_error *err) {
        char *add;
        if (think != 0) {
                if (think > 0 && !axp_chat_thinks(tmpl))
                        return axp_errorf(err, -EINVAL, "the model does not think (its chat template writes no "
                                                        "<think>): thinking cannot be on");
                add = axp_chat_think_open(tmpl);
                if (!add)
                        return 0; /* the model writes its own <think>, or never thinks */
        } else {
                add = axp_chat_no_think(tmpl);
                if (!add) {
                        if (axp_chat_thinks(tmpl))
                                return axp_errorf(err, -EINVAL, "the model's chat template has no switch to turn "
                                                                "thinking off (enable_thinking): thinking cannot be off");
                        return 0; /* a model that does not think: nothing to turn off */
                }
        }
        size_t a = strlen(*text), b = strlen(add);
        char *t = realloc(*text, a + b + 1);
        if (!t) {
                free(add);
                return axp_errorf(err, -ENOMEM, "out of memory");
        }
        memcpy(t + a, add, b + 1);
        free(add);
        *text = t;
        return 0;
}
