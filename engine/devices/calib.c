/* SPDX-License-Identifier: MIT */
/* The start-up micro-benchmark of a device and its cache file. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "calib.h"
#include "kernels/types.h"
#include "model/quantize.h"

#define CACHE_HEADER "# agentxpu device calibration v1: key P_pk B_pk u_m u_c I_c e_attn"

static void seq_freep(axp_seq *s) {
        if (s->model)
                axp_seq_free(s);
}

static axp_task span_task(axp_seq *q, axp_op op, int layer, axp_variant v, int t0, int t1) {
        axp_task t = { .op = op, .layer = layer, .variant = v, .n_spans = 1 };
        t.spans[0] = (axp_span) { .seq = q, .t0 = t0, .t1 = t1 };
        return t;
}

static int run_timed(axp_device *d, const axp_task *t, double *ret_s, axp_error *err) {
        double t0 = axp_now();
        int r = axp_device_run(d, t, err);
        if (r < 0)
                return r;
        *ret_s = axp_now() - t0;
        return 0;
}

int axp_calib_measure(axp_device *d, const axp_model *m, axp_calib *ret, axp_error *err) {
        _cleanup_(seq_freep) axp_seq q = { 0 };
        _cleanup_free_ int32_t *tokens = NULL;
        const axp_hparams *hp = &m->hp;
        axp_heg_shape shape;
        int n = MIN(256, MAX(16, hp->n_ctx_train / 2)), r;
        double t_c = INFINITY, t_a = INFINITY, t_m = 0, dt;
        axp_task t;

        if (!axp_device_can_run(d, NULL))
                return axp_errorf(err, -EINVAL, "device '%s' cannot run kernels", axp_device_name(d));
        axp_heg_shape_from_model(m, AXP_TYPE_F32, &shape);
        tokens = malloc(sizeof(int32_t) * n);
        if (!tokens)
                return axp_errorf(err, -ENOMEM, "out of memory");
        for (int i = 0; i < n; i++)
                tokens[i] = (int32_t) (((int64_t) i * 7919 + 13) % hp->n_vocab);
        r = axp_seq_init(&q, m, AXP_TYPE_F32, n + 2, n + 2, err);
        if (r < 0)
                return r;
        r = axp_seq_begin(&q, tokens, n, err);
        if (r < 0)
                return r;

        /* compute anchor and attention: layer 0 over n tokens; the best of two runs */
        t = span_task(&q, AXP_OP_EMBED, 0, AXP_VAR_DYNAMIC, 0, n);
        if ((r = axp_device_run(d, &t, err)) < 0)
                return r;
        t = span_task(&q, AXP_OP_K1, 0, AXP_VAR_DYNAMIC, 0, n);
        if ((r = axp_device_run(d, &t, err)) < 0)
                return r;
        for (int rep = 0; rep < 2; rep++) {
                t = span_task(&q, AXP_OP_K2, 0, AXP_VAR_DYNAMIC, 0, n);
                if ((r = run_timed(d, &t, &dt, err)) < 0)
                        return r;
                t_a = fmin(t_a, dt);
                t = span_task(&q, AXP_OP_K3, 0, AXP_VAR_DYNAMIC, 0, n);
                if ((r = run_timed(d, &t, &dt, err)) < 0)
                        return r;
                t_c = fmin(t_c, dt);
        }
        axp_seq_end(&q);

        /* memory anchor: one token's K3 through every layer streams all FFN weights */
        r = axp_seq_begin(&q, tokens, 1, err);
        if (r < 0)
                return r;
        t = span_task(&q, AXP_OP_EMBED, 0, AXP_VAR_DECODE, 0, 1);
        if ((r = axp_device_run(d, &t, err)) < 0)
                return r;
        for (int l = 0; l < hp->n_layer; l++) {
                t = span_task(&q, AXP_OP_K3, l, AXP_VAR_DECODE, 0, 1);
                if ((r = run_timed(d, &t, &dt, err)) < 0)
                        return r;
                t_m += dt;
        }

        axp_cost cc = axp_heg_cost(&shape, AXP_OP_K3, n, 1, 0, 0);
        axp_cost ca = axp_heg_cost(&shape, AXP_OP_K2, n, 1, (double) n * (n + 1) / 2, n);
        axp_cost cm = axp_heg_cost(&shape, AXP_OP_K3, 1, 1, 0, 0);
        double P = cc.flops / fmax(t_c, 1e-9), I_c = cc.flops / cc.bytes;
        double B = hp->n_layer * cm.bytes / fmax(t_m, 1e-9);
        double e = (ca.attn_flops / fmax(t_a, 1e-9)) / P;

        if (!isfinite(P) || !isfinite(B) || P <= 0 || B <= 0 || !(I_c > 0))
                return axp_errorf(err, -EIO, "calibrating '%s' gave no usable timings", axp_device_name(d));
        /* B_pk is the best bandwidth seen, so u_m = 1; P_eff = u_c * B_pk * I_c = P */
        *ret = (axp_calib) {
                .P_pk = P,
                .B_pk = B,
                .u_m = 1.0,
                .u_c = P / (I_c * B),
                .I_c = I_c,
                .e_attn = fmin(1.0, fmax(0.01, e)),
        };
        return 0;
}

void axp_calib_key(const axp_device *d, const axp_model *m, char *buf, size_t size) {
        const char *ft = axp_file_type_name(m->file_type);
        char num[24], *p;

        snprintf(num, sizeof(num), "ftype%d", m->file_type);
        snprintf(buf, size, "%s:%s:%s", axp_device_backend(d), axp_device_name(d), ft ? ft : num);
        /* one whitespace-free word per key */
        for (p = buf; *p; p++)
                if (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
                        *p = '_';
}

static bool plausible(const axp_calib *c) {
        const double v[] = { c->P_pk, c->B_pk, c->u_m, c->u_c, c->I_c, c->e_attn };
        for (size_t i = 0; i < ELEMENTSOF(v); i++)
                if (!isfinite(v[i]) || v[i] <= 0 || v[i] > 1e18)
                        return false;
        return c->u_m <= 1 && c->e_attn <= 1;
}

int axp_calib_cache_load(const char *path, const char *key, axp_calib *ret) {
        _cleanup_free_ char *line = NULL;
        size_t cap = 0;
        FILE *f;
        int r = -ENOENT;

        if (!path || !(f = fopen(path, "re")))
                return -ENOENT;
        while (getline(&line, &cap, f) >= 0) {
                char k[512];
                axp_calib c;
                if (line[0] == '#' ||
                    sscanf(line, "%511s %lg %lg %lg %lg %lg %lg", k, &c.P_pk, &c.B_pk, &c.u_m,
                           &c.u_c, &c.I_c, &c.e_attn) != 7)
                        continue;
                if (strcmp(k, key) == 0 && plausible(&c)) {
                        *ret = c;
                        r = 0;
                }
        }
        fclose(f);
        return r;
}

int axp_calib_cache_store(const char *path, const char *key, const axp_calib *c, axp_error *err) {
        _cleanup_free_ char *tmp = NULL, *line = NULL;
        size_t cap = 0;
        FILE *in, *out;

        if (!path || strpbrk(key, " \t\n"))
                return axp_errorf(err, -EINVAL, "bad calibration cache key");
        if (asprintf(&tmp, "%s.%d.tmp", path, (int) getpid()) < 0) {
                tmp = NULL;
                return axp_errorf(err, -ENOMEM, "out of memory");
        }
        out = fopen(tmp, "we");
        if (!out)
                return axp_errorf(err, -errno, "cannot write '%s': %s", tmp, strerror(errno));
        fprintf(out, "%s\n", CACHE_HEADER);
        in = fopen(path, "re");
        while (in && getline(&line, &cap, in) >= 0) {
                char k[512];
                if (line[0] == '#' || sscanf(line, "%511s", k) != 1 || strcmp(k, key) == 0)
                        continue;
                fputs(line, out);
                if (line[strlen(line) - 1] != '\n')
                        fputc('\n', out);
        }
        if (in)
                fclose(in);
        fprintf(out, "%s %.9g %.9g %.9g %.9g %.9g %.9g\n", key, c->P_pk, c->B_pk, c->u_m, c->u_c,
                c->I_c, c->e_attn);
        if (fclose(out) != 0 || rename(tmp, path) < 0) {
                int e = errno;
                unlink(tmp);
                return axp_errorf(err, -e, "cannot write '%s': %s", path, strerror(e));
        }
        return 0;
}

int axp_calib_get(axp_device *d, const axp_model *m, const char *path, axp_calib *ret,
                  axp_error *err) {
        char key[512];
        int r;

        axp_calib_key(d, m, key, sizeof(key));
        if (path && axp_calib_cache_load(path, key, ret) == 0)
                return 0;
        r = axp_calib_measure(d, m, ret, err);
        if (r < 0)
                return r;
        if (path)
                (void) axp_calib_cache_store(path, key, ret, NULL);
        return 0;
}

bool axp_calib_gpu_keeps_dynamic(const axp_calib *gpu, const axp_calib *cpu) {
        return axp_calib_B_eff(gpu) >= axp_calib_B_eff(cpu);
}
