/* SPDX-License-Identifier: MIT */
/* Interim kernels: dequantize-and-dot, correct but slow. Replaced by the SIMD kernels. */
#include <math.h>
#include <string.h>

#include "kernels.h"
#include "types.h"

const char *axp_cpu_isa(void) {
        return "generic";
}

bool axp_cpu_set_isa(const char *name) {
        return strcmp(name, "generic") == 0;
}

int axp_cpu_weight_prepare(axp_weight *w) {
        return 0;
}

void axp_cpu_weight_release(axp_weight *w) {
}

typedef struct mm_arg {
        int n_w;
        const axp_weight *const *w;
        const float *x;
        long ldx;
        float *const *y;
        const long *ldy;
        int n_tok;
} mm_arg;

static void mm_worker(void *a, int ith, int nth) {
        mm_arg *m = a;
        for (int i = 0; i < m->n_w; i++) {
                const axp_weight *w = m->w[i];
                long lo, hi;
                axp_split(w->n_out, ith, nth, 1, &lo, &hi);
                float *row = malloc((size_t) w->n_in * sizeof(float));
                for (long r = lo; r < hi; r++) {
                        axp_dequantize_row(w->type, (const char *) w->data + r * w->row_bytes, row, w->n_in);
                        for (int t = 0; t < m->n_tok; t++) {
                                const float *x = m->x + t * m->ldx;
                                float s = 0;
                                for (long k = 0; k < w->n_in; k++)
                                        s += row[k] * x[k];
                                m->y[i][t * m->ldy[i] + r] = s;
                        }
                }
                free(row);
        }
}

void axp_cpu_matmul(axp_pool *pool, int n_w, const axp_weight *const *w, const float *x, long ldx,
                    float *const *y, const long *ldy, int n_tok) {
        mm_arg a = { n_w, w, x, ldx, y, ldy, n_tok };
        axp_pool_run(pool, mm_worker, &a);
}

typedef struct at_arg {
        const float *q;
        long ldq;
        float *out;
        long ldo;
        const void *k, *v;
        uint32_t kv_type;
        int n_q;
        const int32_t *pos;
        int n_head, n_head_kv, hd;
        float scale;
} at_arg;

static float kv_at(const void *base, uint32_t type, long idx) {
        return type == AXP_TYPE_F16 ? axp_f16_to_f32(((const axp_f16 *) base)[idx]) : ((const float *) base)[idx];
}

static void at_worker(void *a_, int ith, int nth) {
        at_arg *a = a_;
        long lo, hi;
        axp_split((long) a->n_q * a->n_head, ith, nth, 1, &lo, &hi);
        int max_pos = 0;
        for (int i = 0; i < a->n_q; i++)
                max_pos = MAX(max_pos, a->pos[i]);
        float *sc = malloc((size_t) (max_pos + 1) * sizeof(float));
        float *acc = malloc((size_t) a->hd * sizeof(float));
        long kvd = (long) a->n_head_kv * a->hd;
        for (long job = lo; job < hi; job++) {
                int i = (int) (job / a->n_head), h = (int) (job % a->n_head);
                int kh = h / (a->n_head / a->n_head_kv);
                const float *q = a->q + i * a->ldq + h * a->hd;
                float mx = -INFINITY;
                for (int t = 0; t <= a->pos[i]; t++) {
                        float s = 0;
                        for (int d = 0; d < a->hd; d++)
                                s += q[d] * kv_at(a->k, a->kv_type, t * kvd + kh * a->hd + d);
                        sc[t] = s * a->scale;
                        mx = fmaxf(mx, sc[t]);
                }
                float sum = 0;
                for (int t = 0; t <= a->pos[i]; t++) {
                        sc[t] = expf(sc[t] - mx);
                        sum += sc[t];
                }
                memset(acc, 0, (size_t) a->hd * sizeof(float));
                for (int t = 0; t <= a->pos[i]; t++)
                        for (int d = 0; d < a->hd; d++)
                                acc[d] += sc[t] * kv_at(a->v, a->kv_type, t * kvd + kh * a->hd + d);
                float *o = a->out + i * a->ldo + h * a->hd;
                for (int d = 0; d < a->hd; d++)
                        o[d] = acc[d] / sum;
        }
        free(sc);
        free(acc);
}

void axp_cpu_attention(axp_pool *pool, const float *q, long ldq, float *out, long ldo, const void *k,
                       const void *v, uint32_t kv_type, int n_q, const int32_t *pos, int n_head,
                       int n_head_kv, int head_dim, float scale) {
        /* in place is safe: each (query, head) reads only its own q slice before writing it */
        at_arg a = { q, ldq, out, ldo, k, v, kv_type, n_q, pos, n_head, n_head_kv, head_dim, scale };
        axp_pool_run(pool, at_worker, &a);
}
