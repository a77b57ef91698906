/* SPDX-License-Identifier: MIT */
/* Numbers as a person types them, in command-line options and configuration files: the one
 * way every program of agentxpu reads them.
 *
 * A whole number is decimal digits only: no sign, space, base prefix or digit grouping
 * (axp_parse_int also takes a leading '-'). A number is what strtod() reads in the C locale,
 * whatever the program's locale, but finite and with nothing before or after it.
 *
 * Each returns 0 and sets *ret, or leaves *ret alone and returns -EINVAL when s is not such
 * a number (NULL and "" included) and -ERANGE when it is one outside [min, max] (or beyond
 * what the type holds). The caller words the message: it knows the option and its range. */
#pragma once

#include <stdint.h>

int axp_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *ret);
int axp_parse_u32(const char *s, uint32_t min, uint32_t max, uint32_t *ret);
int axp_parse_int(const char *s, int min, int max, int *ret);
int axp_parse_double(const char *s, double min, double max, double *ret);
/* A size in bytes: a whole number, alone or with one of the suffixes K, M, G and T (or k, m,
 * g, t), powers of 1024: "6G" is 6 GiB, "512M" 512 MiB, "4096" bytes. */
int axp_parse_size(const char *s, uint64_t min, uint64_t max, uint64_t *ret);
