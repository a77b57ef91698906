/* SPDX-License-Identifier: MIT */
/* libFuzzer target: the GGUF reader on arbitrary bytes, and a split model's two parts joined
 * where the input holds a second GGUF file after the first. Whatever it accepts is walked in
 * full (every key, value, array element, string and tensor byte) so that any pointer the
 * reader hands out that reaches past the input is caught by AddressSanitizer; the first and
 * last rows of every tensor of a type the engine computes with are dequantized, so the block
 * decoders meet arbitrary bytes too (scales that are NaN or infinite, any quant bits). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/types.h"
#include "model/gguf.h"

/* Dequantize row r of a tensor (rows of ne[0] elements) and fold it into h. */
static uint64_t dequant_row(const gguf_tensor *t, uint64_t r) {
        static float row[1 << 16];
        const axp_type_traits *tt = axp_type_traits_get(t->type);
        uint64_t rb = axp_type_row_size(t->type, t->ne[0]), h = 0;
        if (!tt || !tt->supported || t->type == AXP_TYPE_Q8_K || rb == 0 || t->ne[0] > (1 << 16) ||
            (r + 1) * rb > t->nbytes)
                return 0;
        axp_dequantize_row(t->type, (const uint8_t *) t->data + r * rb, row, t->ne[0]);
        for (int64_t i = 0; i < t->ne[0]; i++) {
                uint32_t u;
                memcpy(&u, &row[i], 4);
                h += u;
        }
        return h;
}

static volatile uint64_t sink;

/* A split model of two parts: the input cut where a second GGUF magic starts, the halves
 * opened and joined (gguf_join); every tensor of the result lies in its part's bytes. */
static void fuzz_split(const uint8_t *data, size_t size) {
        const uint8_t *second = size > 8 ? memmem(data + 4, size - 4, "GGUF", 4) : NULL;
        gguf_file *a = NULL, *b = NULL;
        axp_error err = { 0 };
        uint32_t no, count;
        uint64_t h = 0;

        if (!second)
                return;
        size_t k = (size_t) (second - data);
        if (gguf_open_buffer(data, k, &a, &err) < 0 || gguf_open_buffer(second, size - k, &b, &err) < 0 ||
            !gguf_split_of(a, &no, &count) || count != 2) {
                gguf_close(a);
                gguf_close(b);
                return;
        }
        if (gguf_join(a, &b, 2, "(buffer)", NULL, &err) < 0) {
                if (!err.msg[0] || strchr(err.msg, '\n'))
                        __builtin_trap();
        } else {
                if (a->n_parts != 2)
                        __builtin_trap();
                for (uint64_t i = 0; i < a->n_tensors; i++) {
                        const gguf_tensor *t = &a->tensors[i];
                        const gguf_part *p = &a->parts[t->part];
                        const uint8_t *d = t->data;
                        if (t->part > 1 || d < (const uint8_t *) p->map || d + t->nbytes > (const uint8_t *) p->map + p->size)
                                __builtin_trap();
                        /* the joined index finds every part's tensors by name */
                        char *name = memchr(t->name.ptr, 0, t->name.len) ? NULL : gguf_str_dup(t->name);
                        if (name && gguf_find_tensor(a, name) != t)
                                __builtin_trap();
                        free(name);
                        if (t->nbytes)
                                h += d[0] + d[t->nbytes - 1];
                }
        }
        sink = h;
        gguf_close(a); /* and b, which it took */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        gguf_file *f = NULL;
        axp_error err = { 0 };
        uint64_t h = 0;

        fuzz_split(data, size);
        if (gguf_open_buffer(data, size, &f, &err) < 0) {
                /* a one-line message, always */
                if (!err.msg[0] || strchr(err.msg, '\n'))
                        __builtin_trap();
                return 0;
        }
        for (uint64_t i = 0; i < f->n_kv; i++) {
                const gguf_kv *kv = &f->kv[i];
                char key[64];
                uint32_t u;
                int32_t s;
                float x;
                bool b;
                gguf_str str;

                for (uint64_t j = 0; j < kv->key.len; j++)
                        h += (uint8_t) kv->key.ptr[j];
                if (kv->type == GGUF_TYPE_STRING)
                        for (uint64_t j = 0; j < kv->v.str.len; j++)
                                h += (uint8_t) kv->v.str.ptr[j];
                if (kv->type == GGUF_TYPE_ARRAY) {
                        if (kv->arr_type == GGUF_TYPE_STRING) {
                                for (uint64_t j = 0; j < kv->arr_n; j++)
                                        for (uint64_t c = 0; c < kv->arr_str[j].len; c++)
                                                h += (uint8_t) kv->arr_str[j].ptr[c];
                        } else {
                                const uint8_t *p = kv->arr_data;
                                uint64_t n = kv->arr_n * gguf_type_size(kv->arr_type);
                                for (uint64_t j = 0; j < n; j++)
                                        h += p[j];
                        }
                }
                /* lookups by the key itself find this very kv (keys are unique) */
                if (kv->key.len < sizeof(key) && !memchr(kv->key.ptr, 0, kv->key.len)) {
                        memcpy(key, kv->key.ptr, kv->key.len);
                        key[kv->key.len] = 0;
                        if (gguf_find(f, key) != kv)
                                __builtin_trap();
                        h += gguf_get_u32(f, key, &u) + gguf_get_i32(f, key, &s) +
                             gguf_get_f32(f, key, &x) + gguf_get_bool(f, key, &b) +
                             gguf_get_str(f, key, &str);
                }
        }
        for (uint64_t i = 0; i < f->n_tensors; i++) {
                const gguf_tensor *t = &f->tensors[i];
                const uint8_t *p = t->data;
                if (p < data || p + t->nbytes > data + size)
                        __builtin_trap();
                for (uint64_t j = 0; j < t->nbytes; j += 61)
                        h += p[j];
                if (t->nbytes)
                        h += p[t->nbytes - 1];
                for (uint64_t j = 0; j < t->name.len; j++)
                        h += (uint8_t) t->name.ptr[j];
                uint64_t rb = axp_type_row_size(t->type, t->ne[0]);
                if (rb && t->nbytes >= rb) {
                        h += dequant_row(t, 0);
                        h += dequant_row(t, t->nbytes / rb - 1);
                }
        }
        sink = h;
        gguf_close(f);
        return 0;
}
