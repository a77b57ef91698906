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
        free(g->lp);
        memset(g, 0, sizeof(*g));
}

/* Text to the stopper, the bytes it releases counted */
static bool gen_feed(axp_gen *g, const char *text, size_t len) {
        size_t before = g->out_len;
        bool stop = axp_stopper_feed(&g->stopper, text, len, &g->out, &g->out_len, &g->out_cap);
        g->released_total += g->out_len - before;
        return stop;
}

void axp_gen_want_logprobs(axp_gen *g, uint32_t top) {
        g->logprobs = true;
        g->top_logprobs = top < AXP_LOGPROBS_MAX ? top : AXP_LOGPROBS_MAX;
}

size_t axp_gen_logprobs_ready(const axp_gen *g) {
        size_t n = 0;
        if (g->done)
                return g->n_lp;
        while (n < g->n_lp && g->lp[n].end <= g->released_total)
                n++;
        return n;
}

void axp_gen_logprobs_drop(axp_gen *g, size_t n) {
        if (n >= g->n_lp) {
                g->n_lp = 0;
                return;
        }
        memmove(g->lp, g->lp + n, (g->n_lp - n) * sizeof(*g->lp));
        g->n_lp -= n;
}

/* Whether logit a ranks above b (token ids breaking ties) */
static bool ranks_above(float a, int32_t ia, float b, int32_t ib) {
        return a > b || (a == b && ia < ib);
}

/* Four floats at once in GCC's vector extensions (SSE2 on a baseline x86-64 build, NEON on
 * arm64): libm's expf is a call a logit, 0.5 ms a token on a 151936-entry vocabulary
 * against 0.17 this way (bench-sampler). */
typedef float vf __attribute__((vector_size(16)));
typedef int32_t vi __attribute__((vector_size(16)));
#define VW 4

static inline vf vf_select(vi mask, vf a, vf b) {
        return (vf) (((vi) a & mask) | ((vi) b & ~mask));
}

static inline vf vf_splat(float x) {
        return (vf) { x, x, x, x };
}

static inline vf vf_load(const float *p) {
        vf v;
        memcpy(&v, p, sizeof(v));
        return v;
}

/* e^x for x <= 0, to a few ulp: x below -87 (or NaN) counts as -87, whose e^x no sum of a
 * vocabulary's terms beside the largest one (1) can notice */
static inline vf exp_nonpositive(vf x) {
        const vf lo = vf_splat(-87.0f), shift = vf_splat(12582912.0f); /* 1.5 * 2^23 rounds */
        x = vf_select(x > lo, x, lo);
        vf n = (x * 1.44269504f + shift) - shift;
        vf r = x - n * 0.693145752f; /* ln 2 in two parts */
        r = r - n * 1.42860677e-6f;
        /* e^r on [-ln2/2, ln2/2]: its Taylor series to r^7 */
        vf p = vf_splat(1.98412698e-4f);
        p = p * r + 1.38888889e-3f;
        p = p * r + 8.33333333e-3f;
        p = p * r + 4.16666667e-2f;
        p = p * r + 1.66666667e-1f;
        p = p * r + 0.5f;
        p = p * r + 1.0f;
        p = p * r + 1.0f;
        vi bits = (__builtin_convertvector(n, vi) + 127) << 23;
        return p * (vf) bits;
}

enum { LP_LANES = 16 }; /* the top's scan: four vectors a step */

void axp_logprob_compute(const float *logits, int n, int32_t token, uint32_t n_top, axp_token_logprob *ret) {
        /* the largest logit, NaN left out (a > b is false for it) */
        vf vm0 = vf_splat(-INFINITY), vm1 = vm0;
        int i = 0;
        for (; i + 2 * VW <= n; i += 2 * VW) {
                vf x0 = vf_load(logits + i), x1 = vf_load(logits + i + VW);
                vm0 = vf_select(x0 > vm0, x0, vm0);
                vm1 = vf_select(x1 > vm1, x1, vm1);
        }
        float mx = -INFINITY;
        for (int j = 0; j < VW; j++) {
                mx = vm0[j] > mx ? vm0[j] : mx;
                mx = vm1[j] > mx ? vm1[j] : mx;
        }
        for (; i < n; i++)
                mx = logits[i] > mx ? logits[i] : mx;
        /* sum e^(l - max), two chains */
        double sum = 0;
        if (mx > -INFINITY) {
                vf acc0 = vf_splat(0), acc1 = acc0, m = vf_splat(mx);
                for (i = 0; i + 2 * VW <= n; i += 2 * VW) {
                        acc0 += exp_nonpositive(vf_load(logits + i) - m);
                        acc1 += exp_nonpositive(vf_load(logits + i + VW) - m);
                }
                for (; i < n; i++) {
                        float x = logits[i] - mx;
                        acc0[0] += x > -87.0f ? exp_nonpositive(vf_splat(x))[0] : 0;
                }
                for (int j = 0; j < VW; j++)
                        sum += (double) acc0[j] + acc1[j];
        }
        /* every logit -inf or NaN: no distribution; each token -inf but the chosen one */
        float lse = mx > -INFINITY ? mx + (float) log(sum) : 0;
        float lt = token >= 0 && token < n ? logits[token] : NAN;
        ret->token = token;
        ret->logprob = lt > -INFINITY ? lt - lse : mx > -INFINITY ? -INFINITY : 0;
        ret->n_top = 0;
        if (n_top > AXP_LOGPROBS_MAX)
                n_top = AXP_LOGPROBS_MAX;
        if (n_top > (uint32_t) n)
                n_top = (uint32_t) n;
        /* insertion into a short list in rank order; once it is full, a run of logits all
         * below its last (their largest below it: vectorized) is passed over whole */
        float v[AXP_LOGPROBS_MAX];
        uint32_t k = 0;
        for (int b = 0; b < n && n_top > 0; b += LP_LANES) {
                int e = b + LP_LANES < n ? b + LP_LANES : n;
                if (k == n_top && e - b == LP_LANES) {
                        vf t = vf_splat(v[k - 1]);
                        vi below = (vf_load(logits + b) < t) & (vf_load(logits + b + VW) < t) &
                                   (vf_load(logits + b + 2 * VW) < t) & (vf_load(logits + b + 3 * VW) < t);
                        /* NaN is never below: such a run is looked at */
                        if (below[0] && below[1] && below[2] && below[3])
                                continue;
                }
                for (int t = b; t < e; t++) {
                        float x = isnan(logits[t]) ? -INFINITY : logits[t];
                        if (k == n_top && !ranks_above(x, t, v[k - 1], ret->top[k - 1].token))
                                continue;
                        uint32_t j = k < n_top ? k++ : k - 1;
                        while (j > 0 && ranks_above(x, t, v[j - 1], ret->top[j - 1].token)) {
                                v[j] = v[j - 1];
                                ret->top[j] = ret->top[j - 1];
                                j--;
                        }
                        v[j] = x;
                        ret->top[j].token = t;
                }
        }
        for (uint32_t j = 0; j < k; j++)
                ret->top[j].logprob = v[j] > -INFINITY ? v[j] - lse : -INFINITY;
        ret->n_top = k;
}

void axp_gen_finish(axp_gen *g, axp_finish_reason reason) {
        if (g->done)
                return;
        char *text = NULL;
        size_t len = 0, cap = 0;
        axp_detok_flush(&g->detok, &text, &len, &cap);
        g->text_total += len;
        if (len > 0 && !g->stopper.stopped)
                gen_feed(g, text, len);
        free(text);
        if (!g->stopper.stopped) {
                size_t before = g->out_len;
                axp_stopper_flush(&g->stopper, &g->out, &g->out_len, &g->out_cap);
                g->released_total += g->out_len - before;
        }
        /* a stop string and what followed it are not the answer: neither are the tokens that
         * made only them */
        while (g->stopper.stopped && g->n_lp > 0 && g->lp[g->n_lp - 1].start >= g->released_total)
                g->n_lp--;
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
        axp_token_logprob *rec = NULL;
        if (g->logprobs && axp_grow((void **) &g->lp, &g->cap_lp, g->n_lp + 1, sizeof(*g->lp)) == 0) {
                rec = &g->lp[g->n_lp++];
                axp_logprob_compute(logits, g->model->hp.n_vocab, id, g->top_logprobs, rec);
        }
        char *text = NULL;
        size_t len = 0, cap = 0;
        axp_detok_push(&g->detok, id, &text, &len, &cap);
        if (rec) {
                rec->start = g->text_total;
                rec->end = g->text_total + len;
        }
        g->text_total += len;
        bool stop = len > 0 && gen_feed(g, text, len);
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
