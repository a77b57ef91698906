/* SPDX-License-Identifier: MIT */
/* gguf-corrupt DIR [--every-offset]: write the corrupt GGUF variants of gguf-corrupt.h into
 * DIR as NAME.gguf (plus the valid base as valid.gguf), and list "NAME<TAB>EXPECTED" on
 * stdout: a substring of the one-line message a consumer should print for that file. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf-corrupt.h"

static int write_file(const char *dir, const char *name, const uint8_t *p, size_t n) {
        char path[4096];
        FILE *f;
        snprintf(path, sizeof(path), "%s/%s.gguf", dir, name);
        f = fopen(path, "wb");
        if (!f || (n && fwrite(p, 1, n, f) != n) || fclose(f) != 0) {
                fprintf(stderr, "gguf-corrupt: cannot write %s: %s\n", path, strerror(errno));
                return -1;
        }
        return 0;
}

int main(int argc, char **argv) {
        gguf_variant *v;
        uint8_t *base;
        size_t n, base_size;
        bool every = argc > 2 && strcmp(argv[2], "--every-offset") == 0;

        if (argc < 2 || argc > 3 || (argc == 3 && !every)) {
                fprintf(stderr, "usage: gguf-corrupt DIR [--every-offset]\n");
                return 2;
        }
        if (gguf_corrupt_base(&base, &base_size) < 0 || gguf_corrupt_variants(every, &v, &n) < 0) {
                fprintf(stderr, "gguf-corrupt: out of memory\n");
                return 1;
        }
        if (write_file(argv[1], "valid", base, base_size) < 0)
                return 1;
        for (size_t i = 0; i < n; i++) {
                if (write_file(argv[1], v[i].name, v[i].data, v[i].size) < 0)
                        return 1;
                printf("%s\t%s\n", v[i].name, v[i].expect);
        }
        gguf_corrupt_free(v, n);
        free(base);
        return 0;
}
