/* SPDX-License-Identifier: MIT */
/* A test double of engine.h for the daemon's tests: no model, deterministic "tokens", a
 * scheduler thread with the real engine's threading contract (callbacks on that thread,
 * exactly one finished per accepted request, cancellation, flows that remember their
 * length, the status told on that thread before the call that changed it returns). Linked
 * only into agentxpu-engine-fake, never into the real daemon.
 *
 * Words of the prompt are its tokens. A request generates " t1", " t2", ... one per step of
 * AXP_FAKE_STEP_MS milliseconds (default 5), reactive requests before proactive ones, and
 * finishes with "length" at max_tokens, with "stop" at a stop string or after 3 tokens if
 * the prompt contains the word "short", and with "error" if it contains "fail". With the
 * word "bytes" the tokens are instead the pieces of byte_pieces, in turn. With the word
 * "controls", each token ends with the control characters a model may emit: BEL, an ESC
 * sequence and CSI (U+009B). With the word "silent" it stays queued, telling nothing, until
 * it is cancelled. An embedding (opts.embed) is four numbers after its prefill step: the
 * prompt's words, 1 if normalized, its pooling's number, 1 if truncate was asked. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine.h"

typedef struct fake_req fake_req;
struct fake_req {
        fake_req *next;
        uint64_t id;
        axp_kind kind;
        axp_req_state state;
        axp_request_cbs cbs;
        uint32_t max_tokens, generated, prompt_tokens, prefill_tokens;
        bool cancelled, fail, short_answer, bytes, controls, silent;
        bool embed;
        float embedding[4];
        char **stop;
        size_t n_stop;
        char text[4096];
        uint64_t flow;
        double t_submit, t_first;
};

/* What byte-fallback tokens give: characters split between tokens, bytes that are no UTF-8
 * (0xff), a NUL, and a character cut short at the end. */
static const struct {
        const char *s;
        size_t len;
} byte_pieces[] = {
        { " caf", 4 }, { "\xc3", 1 }, { "\xa9", 1 }, { " \xe2\x82", 3 }, { "\xac", 1 },
        { " \xff", 2 }, { " \0", 2 }, { " \xf0\x9f", 3 },
};

typedef struct fake_flow fake_flow;
struct fake_flow {
        fake_flow *next;
        uint64_t id;
        uint32_t tokens; /* the conversation so far */
        bool busy;
};

struct axp_engine {
        pthread_mutex_t lock;
        pthread_cond_t cond;      /* to the scheduler: work, a status to tell, quit */
        pthread_cond_t told_cond; /* from the scheduler: the status has been told */
        pthread_t thread;
        bool quit, stopped;
        void (*status_changed)(void *userdata, const axp_engine_status *status);
        void *status_userdata;
        uint64_t changes, told;   /* calls that changed the status / of them, told so far */
        axp_engine_status last;   /* as last told */
        bool told_once;
        unsigned model_serial;
        fake_req *reqs;
        fake_flow *flows;
        uint64_t last_id, last_flow;
        unsigned step_ms;
        int n_ctx;
        char model[256];
        char policy[16];
};

void axp_engine_config_default(axp_engine_config *c) {
        *c = (axp_engine_config) {
                .policy = "agentxpu",
                .static_dev = "auto",
                .dynamic_dev = "auto",
                .preempt_bound_s = 0.1,
                .b_cap = 3,
                .max_batch = 32,
                .aging_s = 30,
                .proactive_duty = 0.5,
                .proactive_cpu_share = 0.25,
                .proactive_idle = true,
        };
}

void axp_request_opts_default(axp_request_opts *o) {
        *o = (axp_request_opts) {
                .max_tokens = 0,
                .sampling = {
                        .temperature = 0.8f,
                        .top_k = 40,
                        .top_p = 0.95f,
                        .min_p = 0.05f,
                        .repeat_penalty = 1.0f,
                        .repeat_last_n = 64,
                },
        };
}

int axp_pooling_from_name(const char *name, enum axp_pooling *ret) {
        static const char *const names[] = { "model", "mean", "cls", "last" };
        for (size_t i = 0; i < ELEMENTSOF(names); i++)
                if (strcmp(name, names[i]) == 0) {
                        *ret = (enum axp_pooling) i;
                        return 0;
                }
        return -EINVAL;
}

const char *axp_kind_name(axp_kind k) {
        return k == AXP_REACTIVE ? "reactive" : "proactive";
}

const char *axp_finish_reason_name(axp_finish_reason r) {
        static const char *const names[] = { "stop", "length", "cancelled", "error" };
        return (unsigned) r < 4 ? names[r] : "error";
}

const char *axp_req_state_name(axp_req_state s) {
        static const char *const names[] = { "queued", "prefill", "decode", "finished" };
        return (unsigned) s < 4 ? names[s] : "finished";
}

static uint32_t count_words(const char *s) {
        uint32_t n = 0;
        bool in = false;

        for (; s && *s; s++) {
                bool space = *s == ' ' || *s == '\n' || *s == '\t';
                if (!space && !in)
                        n++;
                in = !space;
        }
        return n;
}

static bool has_word(const char *s, const char *w) {
        size_t n = strlen(w);

        for (const char *p = strstr(s, w); p; p = strstr(p + 1, w))
                if ((p == s || p[-1] == ' ') && (p[n] == 0 || p[n] == ' '))
                        return true;
        return false;
}

static fake_flow *flow_find(axp_engine *e, uint64_t id) {
        for (fake_flow *f = e->flows; f; f = f->next)
                if (f->id == id)
                        return f;
        return NULL;
}

static void req_free(fake_req *r) {
        for (size_t i = 0; i < r->n_stop; i++)
                free(r->stop[i]);
        free(r->stop);
        free(r);
}

static void fill_stats(const fake_req *r, axp_req_stats *st) {
        double now = axp_now();

        *st = (axp_req_stats) {
                .prompt_tokens = r->prompt_tokens,
                .prefill_tokens = r->prefill_tokens,
                .generated_tokens = r->generated,
                .queue_wait_s = 0,
                .ttft_s = r->t_first > 0 ? r->t_first - r->t_submit : 0,
                .latency_s = now - r->t_submit,
        };
}

/* Unlink and finish one request: callbacks run without the lock held. */
static void finish(axp_engine *e, fake_req *r, axp_finish_reason reason) {
        axp_req_stats st;

        for (fake_req **p = &e->reqs; *p; p = &(*p)->next)
                if (*p == r) {
                        *p = r->next;
                        break;
                }
        if (r->flow) {
                fake_flow *f = flow_find(e, r->flow);
                if (f) {
                        f->busy = false;
                        f->tokens += r->prefill_tokens + r->generated;
                }
        }
        fill_stats(r, &st);
        if (reason == AXP_FINISH_ERROR)
                snprintf(st.error, sizeof(st.error), "the fake engine was asked to fail");
        pthread_mutex_unlock(&e->lock);
        r->cbs.finished(r->cbs.userdata, r->id, reason, &st);
        pthread_mutex_lock(&e->lock);
        req_free(r);
}

static void status_snapshot(axp_engine *e, axp_engine_status *ret) {
        *ret = (axp_engine_status) { .model_serial = e->model_serial };
        for (fake_req *q = e->reqs; q; q = q->next) {
                if (q->state != AXP_STATE_QUEUED)
                        ret->running++;
                else if (q->kind == AXP_REACTIVE)
                        ret->queued_reactive++;
                else
                        ret->queued_proactive++;
        }
        snprintf(ret->model, sizeof(ret->model), "%s", e->model);
        snprintf(ret->policy, sizeof(ret->policy), "%s", e->policy);
}

/* On the scheduler thread, with the lock held: tell the status if it changed, and wake the
 * calls that wait for it to be told. */
static void status_tell(axp_engine *e) {
        uint64_t changes = e->changes;
        axp_engine_status st;

        status_snapshot(e, &st);
        if (e->status_changed && (!e->told_once || memcmp(&st, &e->last, sizeof(st)) != 0)) {
                e->last = st;
                e->told_once = true;
                pthread_mutex_unlock(&e->lock);
                e->status_changed(e->status_userdata, &st);
                pthread_mutex_lock(&e->lock);
        }
        e->told = changes;
        pthread_cond_broadcast(&e->told_cond);
}

/* A call changed the status (lock held): wait until the scheduler thread has told it. */
static void status_wait_told(axp_engine *e) {
        uint64_t want = ++e->changes;

        pthread_cond_signal(&e->cond);
        while (e->told < want && !e->stopped)
                pthread_cond_wait(&e->told_cond, &e->lock);
}

/* One step: advance every request of the most urgent kind present, one token each. */
static void step(axp_engine *e) {
        bool any_reactive = false;
        fake_req *batch[64];
        size_t n = 0;

        for (fake_req *r = e->reqs; r; r = r->next)
                if (r->kind == AXP_REACTIVE)
                        any_reactive = true;
        for (fake_req *r = e->reqs; r && n < 64; r = r->next)
                if (r->cancelled || !any_reactive || r->kind == AXP_REACTIVE)
                        batch[n++] = r;

        for (size_t i = 0; i < n; i++) {
                fake_req *r = batch[i];
                const char *piece;
                char tok[32];
                size_t len, piece_len;

                if (r->cancelled) {
                        finish(e, r, AXP_FINISH_CANCELLED);
                        continue;
                }
                if (r->silent)
                        continue;
                if (r->state == AXP_STATE_QUEUED) {
                        r->state = AXP_STATE_PREFILL;
                        continue;
                }
                if (r->fail) {
                        finish(e, r, AXP_FINISH_ERROR);
                        continue;
                }
                if (r->embed) {
                        pthread_mutex_unlock(&e->lock);
                        r->cbs.embedding(r->cbs.userdata, r->id, r->embedding, 4);
                        pthread_mutex_lock(&e->lock);
                        finish(e, r, AXP_FINISH_STOP);
                        continue;
                }
                r->state = AXP_STATE_DECODE;
                snprintf(tok, sizeof(tok), " t%u%s", r->generated + 1, r->controls ? "\a\x1b[7m\xc2\x9b" : "");
                piece = tok;
                piece_len = strlen(tok);
                if (r->bytes) {
                        piece = byte_pieces[r->generated % ELEMENTSOF(byte_pieces)].s;
                        piece_len = byte_pieces[r->generated % ELEMENTSOF(byte_pieces)].len;
                }
                len = strlen(r->text);
                if (len + strlen(tok) < sizeof(r->text))
                        strcat(r->text, tok);
                r->generated++;
                if (r->t_first == 0)
                        r->t_first = axp_now();

                for (size_t k = 0; k < r->n_stop; k++)
                        if (strstr(r->text, r->stop[k])) {
                                finish(e, r, AXP_FINISH_STOP);
                                goto next;
                        }
                pthread_mutex_unlock(&e->lock);
                r->cbs.token(r->cbs.userdata, r->id, piece, piece_len);
                pthread_mutex_lock(&e->lock);
                if (r->short_answer && r->generated >= 3)
                        finish(e, r, AXP_FINISH_STOP);
                else if (r->generated >= r->max_tokens)
                        finish(e, r, AXP_FINISH_LENGTH);
        next:;
        }
}

static struct timespec after_ms(unsigned ms) {
        struct timespec t;

        clock_gettime(CLOCK_MONOTONIC, &t);
        t.tv_sec += ms / 1000;
        t.tv_nsec += (long) (ms % 1000) * 1000000;
        if (t.tv_nsec >= 1000000000) {
                t.tv_sec++;
                t.tv_nsec -= 1000000000;
        }
        return t;
}

static void *scheduler(void *userdata) {
        axp_engine *e = userdata;
        struct timespec next_step = after_ms(0);

        pthread_mutex_lock(&e->lock);
        while (!e->quit) {
                if (e->told < e->changes)
                        status_tell(e);
                if (!e->reqs) {
                        if (e->told == e->changes && !e->quit)
                                pthread_cond_wait(&e->cond, &e->lock);
                        next_step = after_ms(0);
                        continue;
                }
                /* a step every step_ms; calls in between are told at once */
                if (pthread_cond_timedwait(&e->cond, &e->lock, &next_step) != ETIMEDOUT)
                        continue;
                step(e);
                status_tell(e);
                next_step = after_ms(e->step_ms);
        }
        /* Shutdown: everything left finishes as cancelled. */
        while (e->reqs)
                finish(e, e->reqs, AXP_FINISH_CANCELLED);
        status_tell(e);
        e->stopped = true;
        pthread_cond_broadcast(&e->told_cond);
        pthread_mutex_unlock(&e->lock);
        return NULL;
}

static int load(axp_engine *e, const char *path, axp_error *err) {
        struct stat st;
        const char *base;

        if (stat(path, &st) < 0)
                return axp_errorf(err, -errno, "Cannot open model %s: %s", path, strerror(errno));
        if (!S_ISREG(st.st_mode))
                return axp_errorf(err, -EINVAL, "%s is not a GGUF file", path);
        base = strrchr(path, '/');
        snprintf(e->model, sizeof(e->model), "%s", base ? base + 1 : path);
        e->model_serial++;
        return 0;
}

int axp_engine_new(const axp_engine_config *c, axp_engine **ret, axp_error *err) {
        axp_engine *e = calloc(1, sizeof(axp_engine));
        const char *ms = getenv("AXP_FAKE_STEP_MS");
        int r;

        pthread_condattr_t monotonic;

        if (!e)
                return axp_errorf(err, -ENOMEM, "Out of memory");
        pthread_mutex_init(&e->lock, NULL);
        pthread_condattr_init(&monotonic);
        pthread_condattr_setclock(&monotonic, CLOCK_MONOTONIC);
        pthread_cond_init(&e->cond, &monotonic);
        pthread_condattr_destroy(&monotonic);
        pthread_cond_init(&e->told_cond, NULL);
        e->status_changed = c->status_changed;
        e->status_userdata = c->status_userdata;
        e->step_ms = ms ? (unsigned) atoi(ms) : 5;
        e->n_ctx = c->n_ctx > 0 ? c->n_ctx : 64;
        snprintf(e->policy, sizeof(e->policy), "%s", c->policy ? c->policy : "agentxpu");
        if (c->model_path) {
                r = load(e, c->model_path, err);
                if (r < 0) {
                        free(e);
                        return r;
                }
        }
        if (pthread_create(&e->thread, NULL, scheduler, e) != 0) {
                free(e);
                return axp_errorf(err, -EAGAIN, "Cannot start the scheduler thread");
        }
        /* the first status is told before we return */
        pthread_mutex_lock(&e->lock);
        status_wait_told(e);
        pthread_mutex_unlock(&e->lock);
        *ret = e;
        return 0;
}

void axp_engine_free(axp_engine *e) {
        if (!e)
                return;
        pthread_mutex_lock(&e->lock);
        e->quit = true;
        pthread_cond_signal(&e->cond);
        pthread_mutex_unlock(&e->lock);
        pthread_join(e->thread, NULL);
        while (e->flows) {
                fake_flow *f = e->flows;
                e->flows = f->next;
                free(f);
        }
        pthread_cond_destroy(&e->cond);
        pthread_cond_destroy(&e->told_cond);
        pthread_mutex_destroy(&e->lock);
        free(e);
}

int axp_engine_submit(axp_engine *e, axp_kind kind, const char *prompt, const axp_request_opts *opts,
                      const axp_request_cbs *cbs, uint64_t *ret_id, axp_error *err) {
        uint32_t tokens = count_words(prompt) + count_words(opts->system) + (opts->raw ? 0 : 4);
        fake_flow *f = NULL;
        fake_req *r;

        pthread_mutex_lock(&e->lock);
        if (!e->model[0]) {
                pthread_mutex_unlock(&e->lock);
                return axp_errorf(err, -ENOMEDIUM, "No model is loaded");
        }
        if (opts->flow) {
                f = flow_find(e, opts->flow);
                if (!f) {
                        pthread_mutex_unlock(&e->lock);
                        return axp_errorf(err, -ENOENT, "Unknown flow");
                }
                if (f->busy) {
                        pthread_mutex_unlock(&e->lock);
                        return axp_errorf(err, -EBUSY, "The flow has a request in flight");
                }
        }
        if ((f ? f->tokens : 0) + tokens > (uint32_t) e->n_ctx) {
                pthread_mutex_unlock(&e->lock);
                if (f && f->tokens)
                        return axp_errorf(err, -E2BIG,
                                          "The prompt is %u tokens; the flow already holds %u of the context's %d positions",
                                          tokens, f->tokens, e->n_ctx);
                return axp_errorf(err, -E2BIG, "The prompt is %u tokens and the context holds %d", tokens,
                                  e->n_ctx);
        }
        r = calloc(1, sizeof(fake_req));
        if (!r) {
                pthread_mutex_unlock(&e->lock);
                return axp_errorf(err, -ENOMEM, "Out of memory");
        }
        *r = (fake_req) {
                .id = ++e->last_id,
                .kind = kind,
                .cbs = *cbs,
                .max_tokens = opts->max_tokens ? opts->max_tokens : 256,
                .prompt_tokens = tokens, /* this turn's, as the engine counts them */
                .prefill_tokens = tokens,
                .fail = has_word(prompt, "fail"),
                .short_answer = has_word(prompt, "short"),
                .bytes = has_word(prompt, "bytes"),
                .controls = has_word(prompt, "controls"),
                .silent = has_word(prompt, "silent"),
                .embed = opts->embed,
                .embedding = { (float) tokens, opts->embed_normalize, (float) opts->pooling, opts->embed_truncate },
                .flow = opts->flow,
                .t_submit = axp_now(),
        };
        if (opts->n_stop) {
                r->stop = calloc(opts->n_stop, sizeof(char *));
                for (size_t i = 0; r->stop && i < opts->n_stop; i++)
                        r->stop[r->n_stop++] = strdup(opts->stop[i]);
        }
        if (f)
                f->busy = true;
        /* Append: first come, first served within a kind. */
        fake_req **p = &e->reqs;
        while (*p)
                p = &(*p)->next;
        *p = r;
        *ret_id = r->id;
        status_wait_told(e);
        pthread_mutex_unlock(&e->lock);
        return 0;
}

/* No tokenizer here, and no request asks for log-probabilities of fake tokens */
int axp_engine_token_piece(const axp_tokenizer *tok, int32_t id, char *buf, int cap) {
        return 0;
}

int axp_engine_cancel(axp_engine *e, uint64_t id) {
        int r = -ENOENT;

        pthread_mutex_lock(&e->lock);
        for (fake_req *q = e->reqs; q; q = q->next)
                if (q->id == id && !q->cancelled) {
                        q->cancelled = true;
                        r = 0;
                }
        pthread_mutex_unlock(&e->lock);
        return r;
}

int axp_engine_flow_open(axp_engine *e, const char *system, bool raw, uint64_t *ret_flow, axp_error *err) {
        fake_flow *f;

        pthread_mutex_lock(&e->lock);
        if (!e->model[0]) {
                pthread_mutex_unlock(&e->lock);
                return axp_errorf(err, -ENOMEDIUM, "No model is loaded");
        }
        f = calloc(1, sizeof(fake_flow));
        if (!f) {
                pthread_mutex_unlock(&e->lock);
                return axp_errorf(err, -ENOMEM, "Out of memory");
        }
        f->id = ++e->last_flow;
        f->tokens = count_words(system);
        f->next = e->flows;
        e->flows = f;
        *ret_flow = f->id;
        pthread_mutex_unlock(&e->lock);
        return 0;
}

int axp_engine_flow_close(axp_engine *e, uint64_t flow) {
        int r = -ENOENT;

        pthread_mutex_lock(&e->lock);
        for (fake_flow **p = &e->flows; *p; p = &(*p)->next)
                if ((*p)->id == flow) {
                        fake_flow *f = *p;
                        r = f->busy ? -EBUSY : 0;
                        if (r == 0) {
                                *p = f->next;
                                free(f);
                        }
                        break;
                }
        pthread_mutex_unlock(&e->lock);
        return r;
}

/* The fake keeps no prompt cache: nothing to forget. */
int axp_engine_forget_prompt_cache(axp_engine *e, uint64_t scope, uint32_t *ret_n) {
        (void) e;
        (void) scope;
        if (ret_n)
                *ret_n = 0;
        return 0;
}

int axp_engine_request_info(axp_engine *e, uint64_t id, axp_req_state *ret_state, axp_req_stats *ret_stats) {
        int r = -ENOENT;

        pthread_mutex_lock(&e->lock);
        for (fake_req *q = e->reqs; q; q = q->next)
                if (q->id == id) {
                        *ret_state = q->state;
                        fill_stats(q, ret_stats);
                        r = 0;
                }
        pthread_mutex_unlock(&e->lock);
        return r;
}

void axp_engine_status_get(axp_engine *e, axp_engine_status *ret) {
        pthread_mutex_lock(&e->lock);
        status_snapshot(e, ret);
        pthread_mutex_unlock(&e->lock);
}

static const char *const policies[] = { "agentxpu", "fcfs", "serial" };

const char *axp_engine_policy(axp_engine *e) {
        const char *name = "agentxpu";

        pthread_mutex_lock(&e->lock);
        for (size_t i = 0; i < ELEMENTSOF(policies); i++)
                if (strcmp(e->policy, policies[i]) == 0)
                        name = policies[i];
        pthread_mutex_unlock(&e->lock);
        return name;
}

int axp_engine_set_policy(axp_engine *e, const char *policy, axp_error *err) {
        if (strcmp(policy, "agentxpu") != 0 && strcmp(policy, "fcfs") != 0 && strcmp(policy, "serial") != 0)
                return axp_errorf(err, -EINVAL, "Unknown policy '%s'", policy);
        pthread_mutex_lock(&e->lock);
        snprintf(e->policy, sizeof(e->policy), "%s", policy);
        status_wait_told(e);
        pthread_mutex_unlock(&e->lock);
        return 0;
}

int axp_engine_load_model(axp_engine *e, const char *path, axp_error *err) {
        int r;

        usleep(50 * 1000); /* long enough for a call to overlap it */
        pthread_mutex_lock(&e->lock);
        r = load(e, path, err);
        if (r >= 0)
                status_wait_told(e);
        pthread_mutex_unlock(&e->lock);
        return r;
}

void axp_engine_cpu_guard_get(axp_engine *e, axp_engine_cpu_guard *ret) {
        *ret = (axp_engine_cpu_guard) {
                .pressure_source = "fake",
                .pressure = 0.5,
                .proactive_share = 0.625,
                .share_setting = 0.25,
                .priority = "idle",
        };
}

int axp_engine_devices(axp_engine *e, axp_device_info *ret, int cap) {
        if (cap < 1)
                return 1;
        ret[0] = (axp_device_info) {
                .kind = "cpu",
                .backend = "cpu",
                .can_run = true,
                .role_static = true,
                .role_dynamic = true,
                .memory_bytes = UINT64_C(1) << 30,
        };
        snprintf(ret[0].name, sizeof(ret[0].name), "fake CPU");
        return 1;
}

/* Installed models: a file is a model when it starts with the GGUF magic; the real checks
 * are the engine's, tested with the real engine (test-daemon-model.py). */
int axp_model_probe_fd(int fd, const char *src, axp_model_info *ret, axp_error *err) {
        struct stat st;
        char magic[4];

        if (fstat(fd, &st) < 0)
                return axp_errorf(err, -errno, "%s: cannot stat: %s", src, strerror(errno));
        if (!S_ISREG(st.st_mode))
                return axp_errorf(err, -EINVAL, "%s: not a regular file", src);
        if (pread(fd, magic, 4, 0) != 4 || memcmp(magic, "GGUF", 4) != 0)
                return axp_errorf(err, -EBADMSG, "%s: not a GGUF file (bad magic)", src);
        *ret = (axp_model_info) { .size = (uint64_t) st.st_size, .parameters = 1 };
        snprintf(ret->arch, sizeof(ret->arch), "llama");
        snprintf(ret->types, sizeof(ret->types), "F32 1");
        return 0;
}

/* A split model's parts: the first checked as a whole file is; joining them writes the
 * first's bytes (the real join is tested with the real engine, test-daemon-install.py). */
int axp_model_probe_fds(const int *fds, uint32_t n, const char *src, axp_model_info *ret, axp_error *err) {
        return axp_model_probe_fd(fds[0], src, ret, err);
}

int axp_model_join_fds(const int *fds, uint32_t n, const char *path, bool (*progress)(void *userdata, uint64_t bytes),
                       void *userdata, axp_error *err) {
        return axp_errorf(err, -ENOTSUP, "%s: the test double does not join split models", path);
}

int axp_model_check_file(const char *path, axp_error *err) {
        return 0;
}
