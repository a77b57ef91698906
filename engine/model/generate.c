/* SPDX-License-Identifier: MIT */
#include "generate.h"

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

int32_t axp_gen_next(axp_gen *g, const float *logits) {
        int32_t id = axp_sampler_sample(g->sampler, logits);
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
        if (stop)
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
