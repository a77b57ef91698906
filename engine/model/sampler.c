/* SPDX-License-Identifier: MIT */
/* Sampling in llama.cpp's default order: repetition penalty, top-k, top-p, min-p, then
 * temperature and a draw. top-p and min-p both keep a prefix of the candidates sorted by
 * logit, so the result is the shorter prefix; it is found with a heap that is popped only as
 * far as needed, so a 150k vocabulary is never fully sorted. */
#include "sampler.h"

#include <math.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "base/rng.h"
#include "base/strbuf.h"
#include "base/util.h"

typedef struct cand {
        float logit;
        int32_t id;
        float w; /* exp(logit - max), once top-p needs it */
} cand;

struct axp_sampler {
        axp_sampler_params p;
        int n_vocab;
        axp_rng rng;
        int32_t *hist; /* the last repeat_last_n accepted tokens, a ring */
        int n_hist, hist_pos;
        float *logits;     /* penalized copy */
        uint16_t *count;   /* a token's count in hist while the penalties are applied, else 0 */
        cand *cand;
};

void axp_sampler_params_default(axp_sampler_params *p) {
        uint64_t seed;
        if (getrandom(&seed, sizeof(seed), GRND_NONBLOCK) != sizeof(seed))
                seed = (uint64_t) time(NULL) ^ ((uint64_t) getpid() << 32);
        *p = (axp_sampler_params) {
                .temperature = 0.8f,
                .top_k = 40,
                .top_p = 0.95f,
                .min_p = 0.05f,
                .repeat_penalty = 1.0f,
                .repeat_last_n = 64,
                .seed = seed,
        };
}

void axp_sampler_free(axp_sampler *s) {
        if (!s)
                return;
        free(s->hist);
        free(s->logits);
        free(s->count);
        free(s->cand);
        free(s);
}

axp_sampler *axp_sampler_new(const axp_sampler_params *p, int n_vocab) {
        if (n_vocab <= 0)
                return NULL;
        axp_sampler *s = calloc(1, sizeof(*s));
        if (!s)
                return NULL;
        s->p = *p;
        s->n_vocab = n_vocab;
        s->p.repeat_last_n = MIN(MAX(s->p.repeat_last_n, 0), UINT16_MAX);
        axp_rng_seed(&s->rng, p->seed);
        s->hist = malloc(MAX(s->p.repeat_last_n, 1) * sizeof(int32_t));
        s->logits = malloc(n_vocab * sizeof(float));
        s->count = calloc(n_vocab, sizeof(*s->count));
        s->cand = malloc(n_vocab * sizeof(cand));
        if (!s->hist || !s->logits || !s->count || !s->cand) {
                axp_sampler_free(s);
                return NULL;
        }
        return s;
}

void axp_sampler_accept(axp_sampler *s, int32_t token) {
        if (s->p.repeat_last_n == 0 || token < 0 || token >= s->n_vocab)
                return;
        s->hist[s->hist_pos] = token;
        s->hist_pos = (s->hist_pos + 1) % s->p.repeat_last_n;
        s->n_hist = MIN(s->n_hist + 1, s->p.repeat_last_n);
}

/* The logits with the penalties applied once per distinct recent token (a copy; the caller's
 * stay as they are). NaN logits are never chosen: every comparison below is false for them,
 * and where a value is taken as is, NaN becomes -inf. */
static const float *prepare(axp_sampler *s, const float *logits) {
        const bool repeat = s->p.repeat_penalty != 1.0f && s->p.repeat_penalty > 0;
        const float freq = s->p.frequency_penalty, presence = s->p.presence_penalty;

        if ((!repeat && freq == 0 && presence == 0) || s->n_hist == 0)
                return logits;
        memcpy(s->logits, logits, s->n_vocab * sizeof(float));
        for (int i = 0; i < s->n_hist; i++)
                s->count[s->hist[i]]++;
        for (int i = 0; i < s->n_hist; i++) {
                int32_t id = s->hist[i];
                unsigned c = s->count[id];
                if (c == 0) /* done already */
                        continue;
                s->count[id] = 0;
                float *l = &s->logits[id];
                if (repeat)
                        *l = *l <= 0 ? *l * s->p.repeat_penalty : *l / s->p.repeat_penalty;
                *l -= (float) c * freq + presence;
        }
        return s->logits;
}

static inline float not_nan(float x) {
        return isnan(x) ? -INFINITY : x;
}

/* a ranks before b: higher logit, then lower id */
static inline bool better(const cand *a, const cand *b) {
        return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

/* Binary heap with the best candidate on top when best_on_top, the worst otherwise. */
static void sift_down(cand *h, size_t n, size_t i, bool best_on_top) {
        cand x = h[i];
        for (;;) {
                size_t c = 2 * i + 1;
                if (c >= n)
                        break;
                if (c + 1 < n && (best_on_top ? better(&h[c + 1], &h[c]) : better(&h[c], &h[c + 1])))
                        c++;
                if (best_on_top ? !better(&h[c], &x) : !better(&x, &h[c]))
                        break;
                h[i] = h[c];
                i = c;
        }
        h[i] = x;
}

static void heapify(cand *h, size_t n, bool best_on_top) {
        for (size_t i = n / 2; i-- > 0;)
                sift_down(h, n, i, best_on_top);
}

/* The k best of logits into s->cand (unordered); returns k. Most logits lose to the heap's
 * worst at a single compare. */
static size_t top_k(axp_sampler *s, const float *logits, size_t k) {
        cand *h = s->cand;
        size_t n = 0;
        int i = 0;
        for (; i < s->n_vocab && n < k; i++)
                h[n++] = (cand) { not_nan(logits[i]), i, 0 };
        heapify(h, n, false);
        float worst = h[0].logit;
        for (; i < s->n_vocab; i++) {
                if (!(logits[i] > worst)) /* ties lose: the earlier (lower) id stays */
                        continue;
                h[0] = (cand) { logits[i], i, 0 };
                sift_down(h, n, 0, false);
                worst = h[0].logit;
        }
        return n;
}

/* The first index of the largest value. Blocks of 256 get their maximum with eight independent
 * lanes (the loop vectorizes); the first block holding the overall maximum is then searched. */
static int32_t argmax(const float *l, int n) {
        float best = -INFINITY;
        int best_block = -1;

        for (int b = 0; b < n; b += 256) {
                int e = MIN(b + 256, n), i = b;
                float m[8];
                for (int j = 0; j < 8; j++)
                        m[j] = -INFINITY;
                for (; i + 8 <= e; i += 8)
                        for (int j = 0; j < 8; j++)
                                m[j] = l[i + j] > m[j] ? l[i + j] : m[j];
                for (; i < e; i++)
                        m[0] = l[i] > m[0] ? l[i] : m[0];
                for (int j = 0; j < 8; j++)
                        if (m[j] > best || (best_block < 0 && m[j] == best)) {
                                best = m[j];
                                best_block = b;
                        }
        }
        for (int i = MAX(best_block, 0); i < n; i++)
                if (l[i] == best)
                        return i;
        return 0;
}

/* exp(d) for d <= 0; far below the best a candidate counts as nothing. */
static inline float weight(float d) {
        return d > -30.0f ? expf(d) : 0.0f;
}

enum { N_BUCKETS = 64 };

/* Buckets of width 1/4 by distance below the best logit; they keep the candidates' order. */
static inline int bucket(float logit, float max) {
        float d = (max - logit) * 4.0f;
        return d < N_BUCKETS - 1 ? (int) d : N_BUCKETS - 1;
}

/* top-p: the fewest best candidates whose mass reaches want, moved to the front. Only the
 * bucket in which the mass is reached is put in order (by popping a heap). */
static size_t top_p_prefix(axp_sampler *s, size_t n, float max, double want) {
        double mass[N_BUCKETS] = {}, cum = 0;
        int b;

        for (size_t i = 0; i < n; i++)
                mass[bucket(s->cand[i].logit, max)] += s->cand[i].w;
        for (b = 0; b < N_BUCKETS; b++) {
                if (cum + mass[b] >= want)
                        break;
                cum += mass[b];
        }
        if (b == N_BUCKETS)
                return n;

        /* the buckets before b, then bucket b */
        size_t front = 0;
        for (size_t i = 0; i < n; i++)
                if (bucket(s->cand[i].logit, max) < b) {
                        cand t = s->cand[front];
                        s->cand[front++] = s->cand[i];
                        s->cand[i] = t;
                }
        size_t end = front;
        for (size_t i = front; i < n; i++)
                if (bucket(s->cand[i].logit, max) == b) {
                        cand t = s->cand[end];
                        s->cand[end++] = s->cand[i];
                        s->cand[i] = t;
                }

        /* pop bucket b's best until the mass is reached; popped ones collect behind the heap */
        cand *h = s->cand + front;
        size_t size = end - front, popped = 0;
        heapify(h, size, true);
        while (size > 0 && (front + popped == 0 || cum < want)) {
                cand c = h[0];
                h[0] = h[--size];
                sift_down(h, size, 0, true);
                h[size] = c;
                popped++;
                cum += c.w;
        }
        memmove(h, h + size, popped * sizeof(cand));
        return front + popped;
}

int32_t axp_sampler_sample(axp_sampler *s, const float *logits) {
        const float *l = prepare(s, logits);
        int32_t best = argmax(l, s->n_vocab);
        float max = l[best];

        if (s->p.temperature <= 0 || !isfinite(max))
                return best;

        /* top-k */
        size_t n;
        if (s->p.top_k > 0 && s->p.top_k < s->n_vocab)
                n = top_k(s, l, s->p.top_k);
        else {
                n = s->n_vocab;
                for (size_t i = 0; i < n; i++)
                        s->cand[i] = (cand) { not_nan(l[i]), (int32_t) i, 0 };
        }

        /* top-p needs the softmax mass of the top-k set (temperature 1) */
        bool top_p = s->p.top_p < 1.0f;
        double z = 0;
        for (size_t i = 0; top_p && i < n; i++) {
                s->cand[i].w = weight(s->cand[i].logit - max);
                z += s->cand[i].w;
        }

        /* min-p's prefix: p >= min_p * p_max */
        if (s->p.min_p > 0) {
                float threshold = max + logf(MIN(s->p.min_p, 1.0f));
                size_t m = 0;
                for (size_t i = 0; i < n; i++)
                        if (s->cand[i].logit >= threshold)
                                s->cand[m++] = s->cand[i];
                n = m;
        }

        if (top_p)
                n = top_p_prefix(s, n, max, MAX(s->p.top_p, 0.0f) * z);

        /* temperature and the draw */
        double total = 0;
        float inv_t = 1.0f / s->p.temperature;
        bool reuse = top_p && inv_t == 1.0f;
        for (size_t i = 0; i < n; i++) {
                if (!reuse)
                        s->cand[i].w = weight((s->cand[i].logit - max) * inv_t);
                total += s->cand[i].w;
        }
        double r = axp_rng_uniform(&s->rng) * total;
        for (size_t i = 0; i < n; i++) {
                r -= s->cand[i].w;
                if (r < 0)
                        return s->cand[i].id;
        }
        /* rounding left r at the very end: the last candidate with weight */
        for (size_t i = n; i-- > 0;)
                if (s->cand[i].w > 0)
                        return s->cand[i].id;
        return best;
}

/* Stop strings ----------------------------------------------------------------------- */

void axp_stopper_init(axp_stopper *s, const char *const *stops, size_t n) {
        *s = (axp_stopper) {};
        s->stops = calloc(n ? n : 1, sizeof(char *));
        for (size_t i = 0; s->stops && i < n; i++) {
                if (!stops[i] || !*stops[i])
                        continue;
                char *c = strdup(stops[i]);
                if (c)
                        s->stops[s->n_stops++] = c;
        }
}

void axp_stopper_done(axp_stopper *s) {
        for (size_t i = 0; i < s->n_stops; i++)
                free(s->stops[i]);
        free(s->stops);
        free(s->held);
        *s = (axp_stopper) {};
}

/* Length of the longest end of held that begins some stop string. */
static size_t partial_stop(const axp_stopper *s) {
        size_t keep = 0;
        for (size_t i = 0; i < s->n_stops; i++) {
                size_t sl = strlen(s->stops[i]);
                for (size_t k = MIN(sl - 1, s->n_held); k > keep; k--)
                        if (memcmp(s->held + s->n_held - k, s->stops[i], k) == 0) {
                                keep = k;
                                break;
                        }
        }
        return keep;
}

bool axp_stopper_feed(axp_stopper *s, const char *text, size_t len, char **out, size_t *out_len,
                      size_t *out_cap) {
        if (s->stopped)
                return true;
        size_t cap = s->n_held;
        if (axp_strbuf_append(&s->held, &s->n_held, &cap, text, len) < 0) {
                /* out of memory: give the text through unchecked rather than lose it */
                axp_strbuf_append(out, out_len, out_cap, text, len);
                return false;
        }

        const char *first = NULL;
        for (size_t i = 0; i < s->n_stops; i++) {
                const char *m = memmem(s->held, s->n_held, s->stops[i], strlen(s->stops[i]));
                if (m && (!first || m < first)) {
                        first = m;
                        s->matched = (int) i;
                }
        }
        if (first) {
                axp_strbuf_append(out, out_len, out_cap, s->held, first - s->held);
                s->n_held = 0;
                s->stopped = true;
                return true;
        }

        size_t keep = partial_stop(s), release = s->n_held - keep;
        axp_strbuf_append(out, out_len, out_cap, s->held, release);
        memmove(s->held, s->held + release, keep);
        s->n_held = keep;
        return false;
}

void axp_stopper_flush(axp_stopper *s, char **out, size_t *out_len, size_t *out_cap) {
        if (!s->stopped && s->n_held > 0)
                axp_strbuf_append(out, out_len, out_cap, s->held, s->n_held);
        s->n_held = 0;
}
