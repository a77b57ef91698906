/* SPDX-License-Identifier: MIT */
/* SHA-256 (FIPS 180-4), to check a model file's copy and the digests Ollama and the Hugging
 * Face cache name their blobs by. */
#pragma once

#include <stddef.h>
#include <stdint.h>

typedef struct axp_sha256 {
        uint32_t h[8];
        uint64_t len;       /* bytes hashed */
        uint8_t buf[64];
        size_t n;           /* bytes waiting in buf */
} axp_sha256;

void axp_sha256_init(axp_sha256 *s);
void axp_sha256_update(axp_sha256 *s, const void *data, size_t len);
void axp_sha256_final(axp_sha256 *s, uint8_t digest[32]);
/* The digest as 64 lower-case hex digits and a NUL. */
void axp_sha256_hex(const uint8_t digest[32], char hex[65]);
