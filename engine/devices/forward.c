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
        axp_task *tasks = calloc((size_t) (per * (1 + 2 * n_layer) + n_layer + 1), sizeof(axp_task));
        int n = 0;

        if (!tasks)
                return axp_errorf(err, -ENOMEM, "out of memory");
        add_chunks(tasks, &n, AXP_OP_EMBED, 0, s, chunk);
        for (int l = 0; l < n_layer; l++) {
                add_chunks(tasks, &n, AXP_OP_K1, l, s, chunk);
                tasks[n++] = (axp_task) { .op = AXP_OP_K2, .layer = l, .n_spans = 1, .variant = AXP_VAR_DYNAMIC,
                                          .spans = { { s, 0, s->n_new } } };
                add_chunks(tasks, &n, AXP_OP_K3, l, s, chunk);
        }
        tasks[n++] = (axp_task) { .op = AXP_OP_HEAD, .n_spans = 1, .variant = AXP_VAR_DYNAMIC,
                                  .spans = { { s, s->n_new - 1, s->n_new } } };
        *ret = tasks;
        *ret_n = n;
        return 0;
}

int axp_forward_prefill(axp_device *d, axp_seq *s, const int32_t *tokens, int n, int chunk,
                        axp_error *err) {
        _cleanup_free_ axp_task *tasks = NULL;
        int n_tasks, r;

        if ((r = axp_seq_begin(s, tokens, n, err)) < 0)
                return r;
        if ((r = axp_prefill_plan(s, chunk, &tasks, &n_tasks, err)) < 0)
                goto fail;
        for (int i = 0; i < n_tasks; i++)
                if ((r = axp_device_run(d, &tasks[i], err)) < 0)
                        goto fail;
        axp_seq_end(s);
        return 0;
fail:
        axp_seq_truncate(s, s->n_past); /* drop the pending tokens; KV beyond n_past is ignored */
        return r;
}

int axp_forward_decode(axp_device *d, axp_seq *const *seqs, const int32_t *tokens, int n,
                       axp_error *err) {
        axp_task t = { .variant = AXP_VAR_DECODE, .n_spans = n };
        int r, staged = 0;

        if (n < 1 || n > AXP_MAX_BATCH)
                return axp_errorf(err, -EINVAL, "decode batch of %d requests (1..%d)", n, AXP_MAX_BATCH);
        for (; staged < n; staged++) {
                if ((r = axp_seq_begin(seqs[staged], &tokens[staged], 1, err)) < 0)
                        goto fail;
                t.spans[staged] = (axp_span) { seqs[staged], 0, 1 };
        }
        const int n_layer = seqs[0]->model->hp.n_layer;
        t.op = AXP_OP_EMBED;
        if ((r = axp_device_run(d, &t, err)) < 0)
                goto fail;
        for (int l = 0; l < n_layer; l++) {
                t.layer = l;
                for (axp_op op = AXP_OP_K1; op <= AXP_OP_K3; op++) {
                        t.op = op;
                        if ((r = axp_device_run(d, &t, err)) < 0)
                                goto fail;
                }
        }
        t.op = AXP_OP_HEAD;
        if ((r = axp_device_run(d, &t, err)) < 0)
                goto fail;
        for (int i = 0; i < n; i++)
                axp_seq_end(seqs[i]);
        return 0;
fail:
        for (int i = 0; i < staged; i++)
                axp_seq_truncate(seqs[i], seqs[i]->n_past);
        return r;
}
