/* SPDX-License-Identifier: MIT */
/* Writes a GGUF model as a split model, laid out as llama.cpp's gguf-split lays one out, for
 * the tests: N files PREFIX-00001-of-0000N.gguf ..., the first with every key of IN, each with
 * split.no and split.count (uint16) and split.tensors.count (int32), and the tensors spread
 * over them in order (none in the first with --no-tensors-first, as gguf-split's option).
 *
 *   gguf-split IN PREFIX N [--no-tensors-first] */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"

int main(int argc, char **argv) {
        gguf_file *f = NULL;
        axp_error err = { 0 };
        if (argc < 4 || argc > 5 || (argc == 5 && strcmp(argv[4], "--no-tensors-first") != 0)) {
                fprintf(stderr, "usage: gguf-split IN PREFIX N [--no-tensors-first]\n");
                return 2;
        }
        int n = atoi(argv[3]), skip = argc == 5;
        if (n < 1 || n > GGUF_SPLIT_MAX || n - skip < 1) {
                fprintf(stderr, "gguf-split: N must be 1 to %d (2 or more with --no-tensors-first)\n", GGUF_SPLIT_MAX);
                return 2;
        }
        if (gguf_open(argv[1], &f, &err) < 0) {
                fprintf(stderr, "gguf-split: %s\n", err.msg);
                return 1;
        }
        int status = 0;
        for (int p = 0; p < n && status == 0; p++) {
                gguf_writer *w = gguf_writer_new();
                char path[4096];
                if (!w) {
                        fprintf(stderr, "gguf-split: out of memory\n");
                        status = 1;
                        break;
                }
                if (p == 0)
                        for (uint64_t i = 0; i < f->n_kv; i++)
                                if (!gguf_split_key(f->kv[i].key))
                                        gguf_writer_copy_kv(w, &f->kv[i]);
                gguf_writer_set_u16(w, "split.no", (uint16_t) p);
                gguf_writer_set_u16(w, "split.count", (uint16_t) n);
                gguf_writer_set_i32(w, "split.tensors.count", (int32_t) f->n_tensors);
                /* tensor i goes to part skip + i * (n - skip) / n_tensors */
                for (uint64_t i = 0; i < f->n_tensors; i++) {
                        const gguf_tensor *t = &f->tensors[i];
                        if ((uint64_t) skip + i * (uint64_t) (n - skip) / f->n_tensors != (uint64_t) p)
                                continue;
                        char name[256];
                        snprintf(name, sizeof(name), "%.*s", (int) t->name.len, t->name.ptr);
                        gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data, t->nbytes);
                }
                snprintf(path, sizeof(path), "%s-%05d-of-%05d.gguf", argv[2], p + 1, n);
                if (gguf_writer_write(w, path, &err) < 0) {
                        fprintf(stderr, "gguf-split: %s\n", err.msg);
                        status = 1;
                }
                gguf_writer_free(w);
        }
        gguf_close(f);
        return status;
}
