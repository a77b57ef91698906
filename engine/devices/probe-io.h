/* SPDX-License-Identifier: MIT */
/* What the graphics telemetry (gpu-telemetry.c) and the CPU pressure (cpu-pressure.c) share:
 * reading a small text file of the kernel's, and a test's stand-in for a measured fraction. */
#pragma once

#include <stddef.h>

/* Read the file into buf (at most size - 1 bytes, NUL-terminated, trailing white space cut):
 * 0, -errno, or -EIO when it is empty. */
int axp_read_text(const char *path, char *buf, size_t size);

/* A fraction the tests set instead of measuring it: the number in the environment variable
 * value_env, or the number in the file that file_env names, read again at every sample (so a
 * test can change it while the engine runs). */
typedef struct axp_fake_fraction {
        double value;
        char *file;
} axp_fake_fraction;

/* 0; -ENODEV: neither variable is set; -EINVAL: value_env is not a number; -ENOMEM. */
int axp_fake_fraction_open(axp_fake_fraction *f, const char *value_env, const char *file_env);
/* 0; -EIO: the file cannot be read; -EINVAL: it holds no number. */
int axp_fake_fraction_read(const axp_fake_fraction *f, double *ret);
void axp_fake_fraction_clear(axp_fake_fraction *f);
