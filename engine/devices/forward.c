/* SPDX-License-Identifier: MIT */
#include "forward.h"

#include <string.h>

static void add_chunks(axp_task *tasks, int *n, axp_op op, int layer, axp_seq *s, int chunk) {
        int len = s->n_new, step = chunk > 0 ? chunk : len;
        for (int t0 = 0; t0 < len; t0 += step)
                tasks[(*n)++] = (axp_task) {
                        .op = op, .layer = layer, .n_spans = 1,
                        .variant = t0 + step <= len && chunk > 0 ? AXP_VAR_STATIC : AXP_VAR_DYNAMIC,
                        .spans = { { s, t0, MIN(t0 + step, len) } },
                };
}

int axp_prefill_plan(axp_seq *s, int chunk, axp_task **ret, int *ret_n, axp_error *err) {
        const int n_layer = s->model->hp.n_layer;
        int per = chunk > 0 ? DIV_ROUND_UP(s->n_new, chunk) : 1;
        axp_task *tasks = calloc((size_t) (per * (1 + 3 * n_layer) + n_layer + 1), sizeof(axp_task));
        int n = 0;

        if (!tasks)
                return axp_errorf(err, -ENOMEM, "out of memory");
        if (s->kv_span > 0 && (chunk <= 0 || chunk > s->kv_span)) {
                free(tasks);
                return axp_errorf(err, -EINVAL, "the KV cache is sized for chunks of %d tokens, not %d",
                                  s->kv_span, chunk > 0 ? chunk : s->n_new);
        }
        add_chunks(tasks, &n, AXP_OP_EMBED, 0, s, chunk);
        for (int l = 0; l < n_layer; l++) {
                if (chunk > 0 && axp_layer_is_swa(&s->model->hp, l)) {
                        /* a sliding-window layer's ring holds one chunk ahead of the window:
                         * each chunk's attention runs before the next chunk's K1 */
                        for (int t0 = 0; t0 < s->n_new; t0 += chunk) {
                                int t1 = MIN(t0 + chunk, s->n_new);
                                axp_variant v = t1 - t0 == chunk ? AXP_VAR_STATIC : AXP_VAR_DYNAMIC;
                                tasks[n++] = (axp_task) { .op = AXP_OP_K1, .layer = l, .n_spans = 1, .variant = v,
                                                          .spans = { { s, t0, t1 } } };
                                tasks[n++] = (axp_task) { .op = AXP_OP_K2, .layer = l, .n_spans = 1,
                                                          .variant = AXP_VAR_DYNAMIC, .spans = { { s, t0, t1 } } };
                        }
                } else {
                        add_chunks(tasks, &n, AXP_OP_K1, l, s, chunk);
                        tasks[n++] = (axp_task) { .op = AXP_OP_K2, .layer = l, .n_spans = 1,
                                                  .variant = AXP_VAR_DYNAMIC, .spans = { { s, 0, s->n_new } } };
                }
                add_chunks(tasks, &n, AXP_OP_K3, l, s, chunk);
        }
        tasks[n++] = (axp_task) { .op = AXP_OP_HEAD, .n_spans = 1, .variant = AXP_VAR_DYNAMIC,
                                  .spans = { { s, s->n_new - 1, s->n_new } } };
        *ret = tasks;
        *ret_n = n;
        return 0;
}

/* The seqs whose tokens a step has staged (axp_seq_begin): unless the step commits them
 * (staged_commit), they are dropped again when it returns -- the pending tokens go, and the
 * KV cache beyond n_past is ignored. */
typedef struct staged {
        axp_seq *const *seqs;
        int n;
} staged;

static void staged_drop(staged *st) {
        for (int i = 0; i < st->n; i++)
                axp_seq_truncate(st->seqs[i], st->seqs[i]->n_past);
}

static void staged_commit(staged *st) {
        for (int i = 0; i < st->n; i++)
                axp_seq_end(st->seqs[i]);
        st->n = 0;
}

int axp_forward_prefill(axp_device *d, axp_seq *s, const int32_t *tokens, int n, int chunk,
                        axp_error *err) {
        _cleanup_free_ axp_task *tasks = NULL;
        _cleanup_(staged_drop) staged st = { &s, 0 };
        int n_tasks, r;

        /* the rings of sliding-window layers need hold only one chunk ahead of the window */
        axp_seq_set_span(s, chunk > 0 ? chunk : 0);
        if ((r = axp_seq_begin(s, tokens, n, err)) < 0)
                return r;
        st.n = 1;
        if ((r = axp_prefill_plan(s, chunk, &tasks, &n_tasks, err)) < 0)
                return r;
        for (int i = 0; i < n_tasks; i++)
                if ((r = axp_device_run(d, &tasks[i], err)) < 0)
                        return r;
        staged_commit(&st);
        return 0;
}

int axp_forward_decode(axp_device *d, axp_seq *const *seqs, const int32_t *tokens, int n,
                       axp_error *err) {
        axp_task t = { .variant = AXP_VAR_DECODE, .n_spans = n };
        _cleanup_(staged_drop) staged st = { seqs, 0 };
        int r;

        if (n < 1 || n > AXP_MAX_BATCH)
                return axp_errorf(err, -EINVAL, "decode batch of %d requests (1..%d)", n, AXP_MAX_BATCH);
        for (; st.n < n; st.n++) {
                if ((r = axp_seq_begin(seqs[st.n], &tokens[st.n], 1, err)) < 0)
                        return r;
                t.spans[st.n] = (axp_span) { seqs[st.n], 0, 1 };
        }
        const int n_layer = seqs[0]->model->hp.n_layer;
        t.op = AXP_OP_EMBED;
        if ((r = axp_device_run(d, &t, err)) < 0)
                return r;
        for (int l = 0; l < n_layer; l++) {
                t.layer = l;
                for (axp_op op = AXP_OP_K1; op <= AXP_OP_K3; op++) {
                        t.op = op;
                        if ((r = axp_device_run(d, &t, err)) < 0)
                                return r;
                }
        }
        t.op = AXP_OP_HEAD;
        if ((r = axp_device_run(d, &t, err)) < 0)
                return r;
        staged_commit(&st);
        return 0;
}
