/* SPDX-License-Identifier: MIT */
#include "generate.h"

#include <math.h>
#include <string.h>

int axp_gen_init(axp_gen *g, const axp_model *m, const axp_sampler_params *sp,
                 const char *const *stops, size_t n_stops, uint32_t max_tokens,
                 const int32_t *prompt, int n_prompt, axp_error *err) {
        memset(g, 0, sizeof(*g));
        g->model = m;
        g->max_tokens = max_tokens;
        g->sampler = axp_sampler_new(sp, m->hp.n_vocab);
        if (!g->sampler)
                return axp_errorf(err, -ENOMEM, "out of memory");
        for (int i = 0; i < n_prompt; i++)
                axp_sampler_accept(g->sampler, prompt[i]);
        axp_detok_init(&g->detok, m->tok, false);
        axp_stopper_init(&g->stopper, stops, n_stops);
        return 0;
}

void axp_gen_free(axp_gen *g) {
        axp_matcher_free(g->matcher);
        axp_grammar_free(g->grammar);
        free(g->allowed);
        free(g->masked);
        axp_sampler_free(g->sampler);
        axp_stopper_done(&g->stopper);
        free(g->out);
        memset(g, 0, sizeof(*g));
}

void axp_gen_finish(axp_gen *g, axp_finish_reason reason) {
        if (g->done)
                return;
        char *text = NULL;
        size_t len = 0, cap = 0;
        axp_detok_flush(&g->detok, &text, &len, &cap);
        if (len > 0 && !g->stopper.stopped)
                axp_stopper_feed(&g->stopper, text, len, &g->out, &g->out_len, &g->out_cap);
        free(text);
        if (!g->stopper.stopped)
                axp_stopper_flush(&g->stopper, &g->out, &g->out_len, &g->out_cap);
        g->done = true;
        g->reason = reason;
}

int axp_gen_constrain(axp_gen *g, const char *grammar, const char *json_schema, axp_error *err) {
        _cleanup_free_ char *text = NULL;
        int r;
        if (!grammar && !json_schema)
                return 0;
        if (grammar && json_schema)
                return axp_errorf(err, -EINVAL, "give either a grammar or a JSON schema, not both");
        if (json_schema) {
                if ((r = axp_json_schema_to_gbnf(json_schema, strlen(json_schema), &text, err)) < 0)
                        return r;
                grammar = text;
        }
        axp_grammar *gr = NULL;
        if ((r = axp_grammar_parse(grammar, strlen(grammar), &gr, err)) < 0)
                return r;
        g->grammar = gr;
        axp_model *m = (axp_model *) g->model;
        if (!m->vocab_trie && (r = axp_vocab_trie_new(m->tok, &m->vocab_trie, err)) < 0)
                return r;
        size_t max_piece = MAX(axp_vocab_trie_max_piece(m->vocab_trie), (size_t) 1);
        size_t min_bytes = axp_grammar_min_bytes(gr);
        if (min_bytes > (size_t) g->max_tokens * max_piece)
                return axp_errorf(err, -EINVAL,
                                  "the shortest text the %s allows is %zu bytes, more than %u tokens of "
                                  "at most %zu bytes each can hold; raise max_tokens",
                                  json_schema ? "JSON schema" : "grammar", min_bytes, g->max_tokens, max_piece);
        if ((r = axp_matcher_new(gr, m->vocab_trie, &g->matcher, err)) < 0)
                return r;
        g->allowed = malloc((size_t) m->hp.n_vocab);
        g->masked = malloc((size_t) m->hp.n_vocab * sizeof(float));
        if (!g->allowed || !g->masked)
                return axp_errorf(err, -ENOMEM, "out of memory");
        return 0;
}

/* The token to take under the grammar: the one drawn if allowed, else a draw among the
 * allowed ones; -1 if none is. */
static int32_t constrained(axp_gen *g, const float *logits, int32_t id) {
        double t0 = axp_now();
        if (!axp_matcher_allows(g->matcher, id)) {
                int n_vocab = g->model->hp.n_vocab;
                int n = axp_matcher_mask(g->matcher, g->allowed);
                g->n_masked++;
                if (n == 0)
                        id = -1;
                else {
                        for (int i = 0; i < n_vocab; i++)
                                g->masked[i] = g->allowed[i] ? logits[i] : -INFINITY;
                        id = axp_sampler_sample(g->sampler, g->masked);
                        if (id < 0 || id >= n_vocab || !g->allowed[id]) /* every allowed logit NaN */
                                for (id = 0; id < n_vocab && !g->allowed[id]; id++)
                                        ;
                }
        }
        if (id >= 0 && !axp_matcher_accept(g->matcher, id))
                id = -1; /* allowed by the mask, past the bounds for the state itself (grammar.h) */
        g->mask_s += axp_now() - t0;
        return id;
}

int32_t axp_gen_next(axp_gen *g, const float *logits) {
        int32_t id = axp_sampler_sample(g->sampler, logits);
        if (g->matcher && (id = constrained(g, logits, id)) < 0) {
                snprintf(g->error, sizeof(g->error), "no token can continue the grammar here%s",
                         axp_matcher_overrun(g->matcher)
                                 ? ": characters it allows were refused, as it could be read more ways at "
                                   "once than the engine follows (too ambiguous)"
                                 : "");
                g->n_generated++;
                axp_gen_finish(g, AXP_FINISH_ERROR);
                return 0;
        }
        axp_sampler_accept(g->sampler, id);
        g->n_generated++;
        if (axp_tokenizer_is_eog(g->model->tok, id)) {
                axp_gen_finish(g, AXP_FINISH_STOP);
                return id;
        }
        char *text = NULL;
        size_t len = 0, cap = 0;
        axp_detok_push(&g->detok, id, &text, &len, &cap);
        bool stop = len > 0 && axp_stopper_feed(&g->stopper, text, len, &g->out, &g->out_len, &g->out_cap);
        free(text);
        if (stop || (g->matcher && axp_matcher_finished(g->matcher)))
                axp_gen_finish(g, AXP_FINISH_STOP);
        else if (g->n_generated >= g->max_tokens)
                axp_gen_finish(g, AXP_FINISH_LENGTH);
        return id;
}

const char *axp_finish_reason_name(axp_finish_reason r) {
        switch (r) {
        case AXP_FINISH_STOP:
                return "stop";
        case AXP_FINISH_LENGTH:
                return "length";
        case AXP_FINISH_CANCELLED:
                return "cancelled";
        case AXP_FINISH_ERROR:
                return "error";
        }
        return "unknown";
}
