/* SPDX-License-Identifier: MIT */
#include "probe-io.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int axp_read_text(const char *path, char *buf, size_t size) {
        FILE *f = fopen(path, "re");
        if (!f)
                return -errno;
        size_t n = fread(buf, 1, size - 1, f);
        fclose(f);
        buf[n] = 0;
        while (n > 0 && strchr(" \t\n", buf[n - 1]))
                buf[--n] = 0;
        return n > 0 ? 0 : -EIO;
}

int axp_fake_fraction_open(axp_fake_fraction *f, const char *value_env, const char *file_env) {
        const char *v = getenv(value_env), *file = getenv(file_env);
        *f = (axp_fake_fraction) { 0 };
        if (file && *file) {
                f->file = strdup(file);
                return f->file ? 0 : -ENOMEM;
        }
        if (v && *v) {
                char *end;
                f->value = strtod(v, &end);
                return end != v && !*end ? 0 : -EINVAL;
        }
        return -ENODEV;
}

int axp_fake_fraction_read(const axp_fake_fraction *f, double *ret) {
        if (!f->file) {
                *ret = f->value;
                return 0;
        }
        char buf[64], *end;
        if (axp_read_text(f->file, buf, sizeof(buf)) < 0)
                return -EIO;
        *ret = strtod(buf, &end);
        return end == buf ? -EINVAL : 0;
}

void axp_fake_fraction_clear(axp_fake_fraction *f) {
        free(f->file);
        *f = (axp_fake_fraction) { 0 };
}
