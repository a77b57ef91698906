/* SPDX-License-Identifier: MIT */
/* Corrupt GGUF variants (see gguf-corrupt.h). The base file is assembled here field by
 * field, recording where each field lies, so a variant is the base with one field patched
 * or the file cut short. */
#include "gguf-corrupt.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_KV 15
#define N_T 3
#define ALIGN 32

typedef struct layout {
        size_t n_tensors, n_kv;                        /* header count fields */
        size_t kv[N_KV], kv_type[N_KV], kv_val[N_KV];  /* key length, type, value */
        size_t t[N_T], t_ndims[N_T], t_ne[N_T], t_type[N_T], t_off[N_T];
        size_t header_end, data, t_data[N_T], data_end, end;
        int kv_strs, kv_ints, kv_align, kv_name;       /* which kv is which */
} layout;

typedef struct buf {
        uint8_t *p;
        size_t n, cap;
        bool oom;
} buf;

static void put(buf *b, const void *p, size_t n) {
        if (b->n + n > b->cap) {
                size_t cap = (b->n + n) * 2;
                uint8_t *q = realloc(b->p, cap);
                if (!q) {
                        b->oom = true;
                        return;
                }
                b->p = q;
                b->cap = cap;
        }
        memcpy(b->p + b->n, p, n);
        b->n += n;
}

static void put_u32(buf *b, uint32_t v) {
        put(b, &v, 4);
}

static void put_u64(buf *b, uint64_t v) {
        put(b, &v, 8);
}

static void put_str(buf *b, const char *s) {
        put_u64(b, strlen(s));
        put(b, s, strlen(s));
}

static void pad(buf *b) {
        while (b->n % ALIGN)
                put(b, "", 1);
}

static int build(uint8_t **ret, size_t *ret_size, layout *l) {
        static const char *const tnames[N_T] = { "tensor.a", "tensor.b", "tensor.c" };
        static const uint32_t ttypes[N_T] = { 0 /* F32 */, 8 /* Q8_0 */, 1 /* F16 */ };
        static const uint32_t tdims[N_T] = { 1, 2, 4 };
        static const uint64_t tne[N_T][4] = { { 8 }, { 32, 2 }, { 4, 2, 1, 1 } };
        static const size_t tbytes[N_T] = { 32, 68, 16 };
        buf b = { 0 };
        size_t off = 0;
        int k = 0;

#define KV(key, type)                                                                              \
        (l->kv[k] = b.n, put_str(&b, key), l->kv_type[k] = b.n, put_u32(&b, type),                 \
         l->kv_val[k] = b.n, k++)
        put(&b, "GGUF", 4);
        put_u32(&b, 3);
        l->n_tensors = b.n;
        put_u64(&b, N_T);
        l->n_kv = b.n;
        put_u64(&b, N_KV);
        l->kv_name = k;
        KV("general.architecture", 8), put_str(&b, "llama");
        l->kv_align = k;
        KV("general.alignment", 4), put_u32(&b, ALIGN);
        KV("test.key_a", 4), put_u32(&b, 7);
        KV("test.key_b", 1), put(&b, (int8_t[]) { -3 }, 1);
        KV("test.u8", 0), put(&b, (uint8_t[]) { 200 }, 1);
        KV("test.u16", 2), put(&b, (uint16_t[]) { 60000 }, 2);
        KV("test.i16", 3), put(&b, (int16_t[]) { -30000 }, 2);
        KV("test.i32", 5), put(&b, (int32_t[]) { -5 }, 4);
        KV("test.f32", 6), put(&b, (float[]) { 0.5f }, 4);
        KV("test.bool", 7), put(&b, (uint8_t[]) { 1 }, 1);
        KV("test.u64", 10), put_u64(&b, 1ull << 40);
        KV("test.i64", 11), put(&b, (int64_t[]) { -(1ll << 40) }, 8);
        KV("test.f64", 12), put(&b, (double[]) { 0.25 }, 8);
        l->kv_strs = k;
        KV("test.strs", 9), put_u32(&b, 8), put_u64(&b, 3), put_str(&b, "a"), put_str(&b, "bc"),
                put_str(&b, "");
        l->kv_ints = k;
        KV("test.ints", 9), put_u32(&b, 5), put_u64(&b, 4), put(&b, (int32_t[]) { 1, 2, 3, 4 }, 16);
#undef KV
        for (int i = 0; i < N_T; i++) {
                l->t[i] = b.n;
                put_str(&b, tnames[i]);
                l->t_ndims[i] = b.n;
                put_u32(&b, tdims[i]);
                l->t_ne[i] = b.n;
                for (uint32_t d = 0; d < tdims[i]; d++)
                        put_u64(&b, tne[i][d]);
                l->t_type[i] = b.n;
                put_u32(&b, ttypes[i]);
                l->t_off[i] = b.n;
                put_u64(&b, off);
                off += (tbytes[i] + ALIGN - 1) / ALIGN * ALIGN;
        }
        l->header_end = b.n;
        pad(&b);
        l->data = b.n;
        for (int i = 0; i < N_T; i++) {
                l->t_data[i] = b.n;
                for (size_t j = 0; j < tbytes[i]; j++)
                        put(&b, (uint8_t[]) { (uint8_t) (i * 50 + j) }, 1);
                if (i == 1) /* Q8_0 scales: finite fp16 values (0x3c00 = 1.0) */
                        memcpy(b.p + l->t_data[i], (uint16_t[]) { 0x3c00 }, 2),
                                memcpy(b.p + l->t_data[i] + 34, (uint16_t[]) { 0x3c00 }, 2);
                pad(&b);
        }
        l->data_end = l->t_data[N_T - 1] + tbytes[N_T - 1]; /* the rest is padding */
        l->end = b.n;
        if (b.oom) {
                free(b.p);
                return -ENOMEM;
        }
        *ret = b.p;
        *ret_size = b.n;
        return 0;
}

int gguf_corrupt_base(uint8_t **ret, size_t *ret_size) {
        layout l;
        return build(ret, ret_size, &l);
}

typedef struct list {
        gguf_variant *v;
        size_t n, cap;
        const uint8_t *base;
        size_t base_size;
        bool oom;
} list;

/* A copy of the base (or its first `size` bytes) under a name; NULL when out of memory. */
static gguf_variant *add(list *ls, size_t size, const char *expect, const char *fmt, ...) {
        gguf_variant *v;
        va_list ap;
        if (ls->n == ls->cap) {
                size_t cap = ls->cap ? ls->cap * 2 : 64;
                gguf_variant *p = realloc(ls->v, cap * sizeof(*p));
                if (!p) {
                        ls->oom = true;
                        return NULL;
                }
                ls->v = p;
                ls->cap = cap;
        }
        v = &ls->v[ls->n];
        memset(v, 0, sizeof(*v));
        v->data = malloc(size ? size : 1);
        if (!v->data) {
                ls->oom = true;
                return NULL;
        }
        memcpy(v->data, ls->base, size);
        v->size = size;
        va_start(ap, fmt);
        vsnprintf(v->name, sizeof(v->name), fmt, ap);
        va_end(ap);
        snprintf(v->expect, sizeof(v->expect), "%s", expect);
        ls->n++;
        return v;
}

static void patch(gguf_variant *v, size_t at, const void *p, size_t n) {
        if (v)
                memcpy(v->data + at, p, n);
}

static void patch_u32(gguf_variant *v, size_t at, uint32_t x) {
        patch(v, at, &x, 4);
}

static void patch_u64(gguf_variant *v, size_t at, uint64_t x) {
        patch(v, at, &x, 8);
}

/* What a reader should say about a file cut at `at`. */
static const char *cut_expect(const layout *l, size_t at) {
        if (at < 4)
                return "not a GGUF file";
        if (at < 24)
                return "truncated in the header";
        /* too short for the counts in the header: rejected before any key is read */
        if ((at - 24) / 13 < N_KV || (at - 24) / 32 < N_T || N_KV * 13 + N_T * 32 > at - 24)
                return "more than the";
        if (at < l->t[0])
                return "truncated in the key/value section";
        if (at < l->header_end)
                return "truncated in the tensor info section";
        return "past the end of the file";
}

static void add_cut(list *ls, const layout *l, size_t at) {
        if (at >= l->data_end) /* only the final padding is lost: still a valid file */
                return;
        add(ls, at, cut_expect(l, at), "cut-at-%zu", at);
}

int gguf_corrupt_variants(bool every_offset, gguf_variant **ret, size_t *ret_n) {
        _Static_assert(N_KV >= 15, "layout");
        uint8_t *base;
        size_t size;
        layout l;
        list ls = { 0 };
        gguf_variant *v;
        int k = build(&base, &size, &l);

        if (k < 0)
                return k;
        ls.base = base;
        ls.base_size = size;

        /* the file cut short */
        if (every_offset) {
                for (size_t at = 0; at < size; at++)
                        add_cut(&ls, &l, at);
        } else {
                size_t marks[64], n = 0;
                marks[n++] = 0;
                marks[n++] = 4;
                marks[n++] = l.n_tensors;
                marks[n++] = l.n_kv;
                for (int i = 0; i < N_KV; i += 3)
                        marks[n++] = l.kv[i];
                marks[n++] = l.kv_val[l.kv_strs];
                marks[n++] = l.kv_val[l.kv_ints];
                for (int i = 0; i < N_T; i++)
                        marks[n++] = l.t[i];
                marks[n++] = l.header_end;
                marks[n++] = l.data;
                for (int i = 0; i < N_T; i++)
                        marks[n++] = l.t_data[i];
                for (size_t i = 0; i < n; i++) {
                        /* at the boundary, just after it, and halfway to the next one */
                        size_t next = i + 1 < n ? marks[i + 1] : l.end;
                        add_cut(&ls, &l, marks[i]);
                        if (marks[i] + 1 < next)
                                add_cut(&ls, &l, marks[i] + 1);
                        if (marks[i] + 2 < next)
                                add_cut(&ls, &l, (marks[i] + next) / 2);
                }
                add_cut(&ls, &l, size - 1);
        }

        /* header */
        v = add(&ls, size, "not a GGUF file (bad magic)", "bad-magic");
        patch(v, 0, "GGML", 4);
        v = add(&ls, size, "version 1", "version-1");
        patch_u32(v, 4, 1);
        v = add(&ls, size, "version 0", "version-0");
        patch_u32(v, 4, 0);
        v = add(&ls, size, "version 4", "version-4");
        patch_u32(v, 4, 4);
        v = add(&ls, size, "big-endian", "big-endian");
        patch_u32(v, 4, 0x03000000);
        v = add(&ls, size, "key/values", "n-kv-max");
        patch_u64(v, l.n_kv, UINT64_MAX);
        v = add(&ls, size, "key/values", "n-kv-2p40");
        patch_u64(v, l.n_kv, 1ull << 40);
        v = add(&ls, size, "tensors", "n-tensors-max");
        patch_u64(v, l.n_tensors, UINT64_MAX);
        v = add(&ls, size, "tensors", "n-tensors-2p59");
        patch_u64(v, l.n_tensors, 1ull << 59);
        /* one more tensor than present: its info is read from the padding and data */
        v = add(&ls, size, "tensor", "n-tensors-plus-1");
        patch_u64(v, l.n_tensors, N_T + 1);
        v = add(&ls, size, "", "n-kv-plus-1");
        patch_u64(v, l.n_kv, N_KV + 1);

        /* key/values */
        v = add(&ls, size, "truncated in the key/value section", "key-len-max");
        patch_u64(v, l.kv[2], UINT64_MAX);
        v = add(&ls, size, "truncated in the key/value section", "key-len-size");
        patch_u64(v, l.kv[2], size);
        v = add(&ls, size, "truncated in the key/value section", "str-len-max");
        patch_u64(v, l.kv_val[l.kv_name], UINT64_MAX);
        v = add(&ls, size, "truncated in the key/value section", "str-len-2p63");
        patch_u64(v, l.kv_val[l.kv_name], 1ull << 63);
        v = add(&ls, size, "unknown value type 13", "kv-type-13");
        patch_u32(v, l.kv_type[2], 13);
        v = add(&ls, size, "unknown value type 4294967295", "kv-type-max");
        patch_u32(v, l.kv_type[2], UINT32_MAX);
        v = add(&ls, size, "array of arrays", "nested-array");
        patch_u32(v, l.kv_val[l.kv_ints], 9);
        v = add(&ls, size, "array of unknown type 13", "array-type-13");
        patch_u32(v, l.kv_val[l.kv_ints], 13);
        v = add(&ls, size, "truncated in the key/value section", "array-n-max");
        patch_u64(v, l.kv_val[l.kv_ints] + 4, UINT64_MAX);
        v = add(&ls, size, "truncated in the key/value section", "array-n-2p62");
        patch_u64(v, l.kv_val[l.kv_ints] + 4, 1ull << 62); /* n × 4 overflows */
        v = add(&ls, size, "truncated in the key/value section", "array-n-size");
        patch_u64(v, l.kv_val[l.kv_ints] + 4, size);
        v = add(&ls, size, "truncated in the key/value section", "str-array-n-max");
        patch_u64(v, l.kv_val[l.kv_strs] + 4, UINT64_MAX);
        v = add(&ls, size, "truncated in the key/value section", "str-array-n-plus");
        patch_u64(v, l.kv_val[l.kv_strs] + 4, 40);
        v = add(&ls, size, "truncated in the key/value section", "str-array-elem-len-max");
        patch_u64(v, l.kv_val[l.kv_strs] + 12, UINT64_MAX);
        v = add(&ls, size, "duplicate key 'test.key_a'", "duplicate-key");
        patch(v, l.kv[3] + 8, "test.key_a", 10);
        /* an int8 where a uint32 was: the rest of the file is misread, whatever it gives
         * must be an error */
        v = add(&ls, size, "", "kv-type-shrunk");
        patch_u32(v, l.kv_type[2], 0);
        v = add(&ls, size, "", "kv-type-grown");
        patch_u32(v, l.kv_type[3], 12);

        /* alignment */
        v = add(&ls, size, "not a nonzero power of two", "alignment-0");
        patch_u32(v, l.kv_val[l.kv_align], 0);
        v = add(&ls, size, "not a nonzero power of two", "alignment-48");
        patch_u32(v, l.kv_val[l.kv_align], 48);
        v = add(&ls, size, "not a nonzero power of two", "alignment-max");
        patch_u32(v, l.kv_val[l.kv_align], UINT32_MAX);
        v = add(&ls, size, "general.alignment 1 is below 8", "alignment-1");
        patch_u32(v, l.kv_val[l.kv_align], 1);
        v = add(&ls, size, "general.alignment 4 is below 8", "alignment-4");
        patch_u32(v, l.kv_val[l.kv_align], 4);
        v = add(&ls, size, "past the end", "alignment-2p31");
        patch_u32(v, l.kv_val[l.kv_align], 1u << 31);
        v = add(&ls, size, "general.alignment has type int32", "alignment-int32");
        patch_u32(v, l.kv_type[l.kv_align], 5);
        v = add(&ls, size, "not a multiple of the alignment 64", "alignment-64");
        patch_u32(v, l.kv_val[l.kv_align], 64);

        /* tensor infos */
        v = add(&ls, size, "0 dimensions", "ndims-0");
        patch_u32(v, l.t_ndims[0], 0);
        v = add(&ls, size, "5 dimensions", "ndims-5");
        patch_u32(v, l.t_ndims[2], 5);
        v = add(&ls, size, "4294967295 dimensions", "ndims-max");
        patch_u32(v, l.t_ndims[0], UINT32_MAX);
        v = add(&ls, size, "dimension 0 has 0 elements", "ne-0");
        patch_u64(v, l.t_ne[0], 0);
        v = add(&ls, size, "dimension 1 has -1 elements", "ne-negative");
        patch_u64(v, l.t_ne[1] + 8, UINT64_MAX);
        v = add(&ls, size, "too many elements", "ne-product");
        patch_u64(v, l.t_ne[2], 1ull << 32);
        patch_u64(v, l.t_ne[2] + 8, 1ull << 32);
        v = add(&ls, size, "size overflows", "nbytes-overflow");
        patch_u64(v, l.t_ne[0], 1ull << 62); /* F32: 2^64 bytes */
        v = add(&ls, size, "past the end of the file", "ne-past-end");
        patch_u64(v, l.t_ne[1] + 8, 1000);
        v = add(&ls, size, "not a multiple of the block size 32", "ne0-block");
        patch_u64(v, l.t_ne[1], 48);
        v = add(&ls, size, "unknown type id 4", "ttype-4");
        patch_u32(v, l.t_type[0], 4);
        v = add(&ls, size, "unknown type id 40", "ttype-40");
        patch_u32(v, l.t_type[0], 40);
        v = add(&ls, size, "unknown type id 4294967295", "ttype-max");
        patch_u32(v, l.t_type[0], UINT32_MAX);
        v = add(&ls, size, "not a multiple of the alignment", "offset-misaligned");
        patch_u64(v, l.t_off[1], 33);
        v = add(&ls, size, "past the end of the file", "offset-max");
        patch_u64(v, l.t_off[1], UINT64_MAX - 31); /* aligned, and start = data + offset wraps */
        v = add(&ls, size, "past the end of the file", "offset-past-end");
        patch_u64(v, l.t_off[2], 1u << 20);
        v = add(&ls, size, "past the end of the file", "data-past-end");
        patch_u64(v, l.t_off[2], (l.end - l.data) - 32 + 0); /* 16 bytes at the last 32: fits */
        patch_u64(v, l.t_ne[2] + 8, 64);                     /* but 512 bytes do not */
        v = add(&ls, size, "overlap", "overlap");
        patch_u64(v, l.t_off[1], 0);
        v = add(&ls, size, "overlap", "overlap-partial");
        patch_u64(v, l.t_ne[0], 16); /* 64 bytes: runs into tensor.b at 32 */
        v = add(&ls, size, "duplicate tensor name 'tensor.a'", "duplicate-tensor");
        patch(v, l.t[2] + 8, "tensor.a", 8);
        v = add(&ls, size, "", "tensor-name-len-max");
        patch_u64(v, l.t[1], UINT64_MAX);

        /* the block types added with the 32-element ones, Q5_K, Q2_K, Q3_K and IQ4_XS (ggml ids; elements and
         * bytes per block): rows that are not whole blocks, blocks cut off by the end of the
         * file, block counts that overflow or run past the end. tensor.b is 2-D, tensor.c the
         * last tensor (4-D, a 32-byte slot). */
        static const struct { uint32_t id, blck, bytes; const char *name; } blk[] = {
                { 3, 32, 20, "q4_1" }, { 6, 32, 22, "q5_0" },    { 7, 32, 24, "q5_1" },
                { 20, 32, 18, "iq4_nl" }, { 13, 256, 176, "q5_k" }, { 10, 256, 84, "q2_k" },
                { 11, 256, 110, "q3_k" }, { 23, 256, 136, "iq4_xs" },
        };
        for (size_t i = 0; i < sizeof(blk) / sizeof(blk[0]); i++) {
                char expect[64];
                snprintf(expect, sizeof(expect), "not a multiple of the block size %u", (unsigned) blk[i].blck);
                v = add(&ls, size, expect, "%s-ne0-block", blk[i].name);
                patch_u32(v, l.t_type[1], blk[i].id);
                patch_u64(v, l.t_ne[1], blk[i].blck + 16);
                /* one block in tensor.c, the file ending one byte before the block does */
                if (l.t_data[2] + blk[i].bytes <= size) {
                        v = add(&ls, l.t_data[2] + blk[i].bytes - 1, "past the end of the file",
                                "%s-block-truncated", blk[i].name);
                        patch_u32(v, l.t_type[2], blk[i].id);
                        patch_u64(v, l.t_ne[2], blk[i].blck);
                        patch_u64(v, l.t_ne[2] + 8, 1);
                }
                /* 64 blocks where a 32-byte slot ends the file */
                v = add(&ls, size, "past the end of the file", "%s-blocks-past-end", blk[i].name);
                patch_u32(v, l.t_type[2], blk[i].id);
                patch_u64(v, l.t_ne[2], blk[i].blck);
                patch_u64(v, l.t_ne[2] + 8, 64);
                /* 2^62 elements: the byte count fits, the file does not hold it */
                v = add(&ls, size, "past the end of the file", "%s-blocks-huge", blk[i].name);
                patch_u32(v, l.t_type[1], blk[i].id);
                patch_u64(v, l.t_ne[1], 1ull << 62);
                patch_u64(v, l.t_ne[1] + 8, 1);
                /* 2^62 x 4 elements: the element count overflows first */
                v = add(&ls, size, "too many elements", "%s-blocks-overflow", blk[i].name);
                patch_u32(v, l.t_type[1], blk[i].id);
                patch_u64(v, l.t_ne[1], 1ull << 62);
                patch_u64(v, l.t_ne[1] + 8, 4);
        }

        free(base);
        if (ls.oom) {
                gguf_corrupt_free(ls.v, ls.n);
                return -ENOMEM;
        }
        *ret = ls.v;
        *ret_n = ls.n;
        return 0;
}

void gguf_corrupt_free(gguf_variant *v, size_t n) {
        for (size_t i = 0; i < n; i++)
                free(v[i].data);
        free(v);
}
