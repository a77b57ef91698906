/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "embedding.h"
#include "kernels/cpu/kernels.h"

static const char *const names[] = {
        [AXP_POOLING_MODEL] = "model",
        [AXP_POOLING_MEAN] = "mean",
        [AXP_POOLING_CLS] = "cls",
        [AXP_POOLING_LAST] = "last",
};

const char *axp_pooling_name(enum axp_pooling p) {
        return (unsigned) p < ELEMENTSOF(names) ? names[p] : "other";
}

int axp_pooling_from_name(const char *name, enum axp_pooling *ret) {
        for (size_t i = 0; name && i < ELEMENTSOF(names); i++)
                if (strcmp(name, names[i]) == 0) {
                        *ret = (enum axp_pooling) i;
                        return 0;
                }
        return -EINVAL;
}

int axp_embedding_pooling(const axp_model *m, enum axp_pooling asked, enum axp_pooling *ret, axp_error *err) {
        if (asked == AXP_POOLING_MODEL && m->hp.pooling == AXP_POOLING_OTHER)
                return axp_errorf(err, -ENOTSUP, "the model's pooling is not an embedding's (a reranker's score); "
                                                 "ask for mean, cls or last pooling");
        if (asked != AXP_POOLING_MODEL && asked != AXP_POOLING_MEAN && asked != AXP_POOLING_CLS &&
            asked != AXP_POOLING_LAST)
                return axp_errorf(err, -EINVAL, "the pooling must be mean, cls or last");
        *ret = asked == AXP_POOLING_MODEL ? m->hp.pooling : asked;
        return 0;
}

/* acc += x through the output norm (row: scratch for it) */
static void add_normed(double *acc, float *row, const float *x, const axp_model *m) {
        const int d = m->hp.n_embd;
        axp_cpu_rmsnorm(row, x, m->output_norm.data, d, m->hp.rms_eps);
        for (int i = 0; i < d; i++)
                acc[i] += row[i];
}

void axp_embedding_pool(const axp_model *m, const float *x, int n, enum axp_pooling pool, bool normalize,
                        float *out) {
        const int d = m->hp.n_embd;
        _cleanup_free_ double *acc = calloc((size_t) d, sizeof(double));
        _cleanup_free_ float *row = malloc(sizeof(float) * (size_t) d);
        double scale = 1.0;

        if (!acc || !row) { /* a few KB; nothing better to give than zeros */
                memset(out, 0, sizeof(float) * (size_t) d);
                return;
        }
        switch (pool) {
        case AXP_POOLING_CLS:
                add_normed(acc, row, x, m);
                break;
        case AXP_POOLING_LAST:
                add_normed(acc, row, x + (size_t) (n - 1) * d, m);
                break;
        default:
                for (int t = 0; t < n; t++)
                        add_normed(acc, row, x + (size_t) t * d, m);
                scale = 1.0 / n;
                break;
        }
        if (normalize) {
                double ss = 0;
                for (int i = 0; i < d; i++)
                        ss += acc[i] * scale * (acc[i] * scale);
                scale = ss > 0 ? scale / sqrt(ss) : 0;
        }
        for (int i = 0; i < d; i++)
                out[i] = (float) (acc[i] * scale);
}
