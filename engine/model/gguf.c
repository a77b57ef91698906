/* SPDX-License-Identifier: MIT */
/* GGUF reader: one pass over the header that checks every count, length, type, shape, offset
 * and alignment against the bytes actually present before anything is exposed. Nothing the
 * file says is trusted to size an allocation beyond what its remaining bytes could hold. */
#include "gguf.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/types.h"

#define GGUF_MAGIC "GGUF"

/* The public struct plus sorted indices for lookups (and for finding duplicates). */
typedef struct gguf_file_impl {
        gguf_file pub;
        size_t *kv_by_key;       /* kv indices sorted by key */
        size_t *tensor_by_name;  /* tensor indices sorted by name */
        gguf_part part0;         /* pub.parts of a whole file */
        gguf_file **more;        /* a split model's parts after the first (pub.n_parts - 1) */
} gguf_file_impl;

typedef struct reader {
        const uint8_t *base;
        uint64_t size;     /* bytes at base */
        uint64_t file_size; /* bytes in the file: more than size when only a prefix is read */
        bool short_read;   /* something ran past the prefix but not past the file */
        uint64_t pos;
        const char *src;   /* file name for messages */
        char detail[160];  /* what could not be read, for "truncated" messages */
        axp_error *err;
} reader;

size_t gguf_type_size(enum gguf_type t) {
        switch (t) {
        case GGUF_TYPE_UINT8:
        case GGUF_TYPE_INT8:
        case GGUF_TYPE_BOOL:
                return 1;
        case GGUF_TYPE_UINT16:
        case GGUF_TYPE_INT16:
                return 2;
        case GGUF_TYPE_UINT32:
        case GGUF_TYPE_INT32:
        case GGUF_TYPE_FLOAT32:
                return 4;
        case GGUF_TYPE_UINT64:
        case GGUF_TYPE_INT64:
        case GGUF_TYPE_FLOAT64:
                return 8;
        default:
                return 0;
        }
}

static const char *type_name(uint32_t t) {
        static const char *const names[GGUF_TYPE__COUNT] = {
                [GGUF_TYPE_UINT8] = "uint8",     [GGUF_TYPE_INT8] = "int8",
                [GGUF_TYPE_UINT16] = "uint16",   [GGUF_TYPE_INT16] = "int16",
                [GGUF_TYPE_UINT32] = "uint32",   [GGUF_TYPE_INT32] = "int32",
                [GGUF_TYPE_FLOAT32] = "float32", [GGUF_TYPE_BOOL] = "bool",
                [GGUF_TYPE_STRING] = "string",   [GGUF_TYPE_ARRAY] = "array",
                [GGUF_TYPE_UINT64] = "uint64",   [GGUF_TYPE_INT64] = "int64",
                [GGUF_TYPE_FLOAT64] = "float64",
        };
        return t < GGUF_TYPE__COUNT ? names[t] : "unknown";
}

const char *gguf_type_name(enum gguf_type t) {
        return type_name(t);
}

const char *gguf_show(gguf_str s, char *buf, size_t bufsz) {
        size_t o = 0;
        for (uint64_t i = 0; i < s.len; i++) {
                unsigned char c = (unsigned char) s.ptr[i];
                if (o + 8 >= bufsz) {
                        memcpy(buf + o, "...", 4);
                        return buf;
                }
                if (c >= 0x20 && c < 0x7f && c != '\\')
                        buf[o++] = (char) c;
                else
                        o += (size_t) snprintf(buf + o, bufsz - o, "\\x%02x", c);
        }
        buf[o] = 0;
        return buf;
}

static bool need(reader *r, uint64_t n, const char *what) {
        if (n <= r->size - r->pos)
                return true;
        if (n <= r->file_size - r->pos)
                r->short_read = true;
        snprintf(r->detail, sizeof(r->detail), "%s (%" PRIu64 " bytes at offset %" PRIu64 ")", what,
                 n, r->pos);
        return false;
}

static bool rd_u32(reader *r, uint32_t *v, const char *what) {
        if (!need(r, 4, what))
                return false;
        memcpy(v, r->base + r->pos, 4);
        r->pos += 4;
        return true;
}

static bool rd_u64(reader *r, uint64_t *v, const char *what) {
        if (!need(r, 8, what))
                return false;
        memcpy(v, r->base + r->pos, 8);
        r->pos += 8;
        return true;
}

static bool rd_str(reader *r, gguf_str *s, const char *what) {
        uint64_t len;
        char lenwhat[64];
        snprintf(lenwhat, sizeof(lenwhat), "the length of %s", what);
        if (!rd_u64(r, &len, lenwhat) || !need(r, len, what))
                return false;
        s->ptr = (const char *) r->base + r->pos;
        s->len = len;
        r->pos += len;
        return true;
}

/* Reads a scalar of type t into kv->v (integers widened: unsigned into u64, signed
 * sign-extended into i64; floats into f64; bool as 0/1). */
static bool rd_scalar(reader *r, enum gguf_type t, gguf_kv *kv) {
        const uint8_t *p;
        if (t == GGUF_TYPE_STRING)
                return rd_str(r, &kv->v.str, "a string value");
        if (!need(r, gguf_type_size(t), "a value"))
                return false;
        p = r->base + r->pos;
        r->pos += gguf_type_size(t);
        switch (t) {
        case GGUF_TYPE_UINT8:
                kv->v.u64 = p[0];
                break;
        case GGUF_TYPE_INT8:
                kv->v.i64 = (int8_t) p[0];
                break;
        case GGUF_TYPE_BOOL:
                kv->v.u64 = p[0] != 0;
                break;
        case GGUF_TYPE_UINT16: {
                uint16_t x;
                memcpy(&x, p, 2);
                kv->v.u64 = x;
                break;
        }
        case GGUF_TYPE_INT16: {
                int16_t x;
                memcpy(&x, p, 2);
                kv->v.i64 = x;
                break;
        }
        case GGUF_TYPE_UINT32: {
                uint32_t x;
                memcpy(&x, p, 4);
                kv->v.u64 = x;
                break;
        }
        case GGUF_TYPE_INT32: {
                int32_t x;
                memcpy(&x, p, 4);
                kv->v.i64 = x;
                break;
        }
        case GGUF_TYPE_FLOAT32: {
                float x;
                memcpy(&x, p, 4);
                kv->v.f64 = x;
                break;
        }
        case GGUF_TYPE_UINT64:
                memcpy(&kv->v.u64, p, 8);
                break;
        case GGUF_TYPE_INT64:
                memcpy(&kv->v.i64, p, 8);
                break;
        case GGUF_TYPE_FLOAT64:
                memcpy(&kv->v.f64, p, 8);
                break;
        default:
                break;
        }
        return true;
}

/* Parses one array value (after its kv type): element type, count, elements. Returns 0, or
 * -EBADMSG with a message, or 1 for "truncated" (r->detail says what: a count larger than
 * the rest of the file could hold counts as truncation too). */
static int rd_array(reader *r, gguf_kv *kv, const char *where) {
        uint32_t et;
        uint64_t n;
        if (!rd_u32(r, &et, "the array element type") || !rd_u64(r, &n, "the array length"))
                return 1;
        if (et == GGUF_TYPE_ARRAY)
                return axp_errorf(r->err, -EBADMSG, "%s: %s is an array of arrays (not supported)",
                                  r->src, where);
        if (et >= GGUF_TYPE__COUNT)
                return axp_errorf(r->err, -EBADMSG, "%s: %s is an array of unknown type %" PRIu32,
                                  r->src, where, et);
        kv->arr_type = et;
        kv->arr_n = n;
        if (et != GGUF_TYPE_STRING) {
                uint64_t bytes = 0;
                bool fits = axp_mul_ok(n, gguf_type_size(et), &bytes);
                if (!fits || bytes > r->size - r->pos) {
                        if (fits && bytes <= r->file_size - r->pos)
                                r->short_read = true;
                        snprintf(r->detail, sizeof(r->detail),
                                 "an array of %" PRIu64 " %s values at offset %" PRIu64, n,
                                 type_name(et), r->pos);
                        return 1;
                }
                kv->arr_data = r->base + r->pos;
                r->pos += bytes;
                return 0;
        }
        /* every string takes at least its 8-byte length: bound n before allocating */
        if (n > (r->size - r->pos) / 8) {
                if (n <= (r->file_size - r->pos) / 8)
                        r->short_read = true;
                snprintf(r->detail, sizeof(r->detail),
                         "an array of %" PRIu64 " strings at offset %" PRIu64, n, r->pos);
                return 1;
        }
        kv->arr_str = malloc(MAX(n, 1) * sizeof(gguf_str));
        if (!kv->arr_str)
                return axp_errorf(r->err, -ENOMEM, "%s: out of memory for %s (%" PRIu64 " strings)",
                                  r->src, where, n);
        for (uint64_t i = 0; i < n; i++) {
                uint64_t len;
                if (!need(r, 8, "the length of an array string"))
                        return 1;
                memcpy(&len, r->base + r->pos, 8);
                r->pos += 8;
                if (len > r->size - r->pos) {
                        if (len <= r->file_size - r->pos)
                                r->short_read = true;
                        snprintf(r->detail, sizeof(r->detail),
                                 "string %" PRIu64 " of the array (%" PRIu64 " bytes at offset %" PRIu64 ")",
                                 i, len, r->pos);
                        return 1;
                }
                kv->arr_str[i].ptr = (const char *) r->base + r->pos;
                kv->arr_str[i].len = len;
                r->pos += len;
        }
        return 0;
}

static int cmp_str(gguf_str a, gguf_str b) {
        if (a.len != b.len)
                return a.len < b.len ? -1 : 1;
        return a.len ? memcmp(a.ptr, b.ptr, a.len) : 0;
}

static int cmp_kv_idx(const void *a, const void *b, void *ctx) {
        const gguf_kv *kv = ctx;
        size_t i = *(const size_t *) a, j = *(const size_t *) b;
        int c = cmp_str(kv[i].key, kv[j].key);
        return c ? c : (i < j ? -1 : i > j);
}

static int cmp_tensor_name_idx(const void *a, const void *b, void *ctx) {
        const gguf_tensor *t = ctx;
        size_t i = *(const size_t *) a, j = *(const size_t *) b;
        int c = cmp_str(t[i].name, t[j].name);
        return c ? c : (i < j ? -1 : i > j);
}

static int cmp_tensor_off_idx(const void *a, const void *b, void *ctx) {
        const gguf_tensor *t = ctx;
        size_t i = *(const size_t *) a, j = *(const size_t *) b;
        if (t[i].offset != t[j].offset)
                return t[i].offset < t[j].offset ? -1 : 1;
        return i < j ? -1 : i > j;
}

/* Grows a zeroed array to hold at least n entries. Arrays grow as entries are parsed, so
 * memory follows the bytes actually present rather than a count field. */
static int grow(void **arr, size_t *cap, size_t n, size_t elsz) {
        size_t old = *cap;
        int r = axp_grow(arr, cap, n, elsz);
        if (r == 0 && *cap > old)
                memset((char *) *arr + old * elsz, 0, (*cap - old) * elsz);
        return r;
}

/* The key/value section ended inside key i (0-based) of n_kv; `where` names the key once
 * it has been read ("" before). */
static int kv_truncated(reader *r, const char *where, uint64_t i, uint64_t n_kv) {
        if (where[0])
                return axp_errorf(r->err, -EBADMSG,
                                  "%s: truncated in the key/value section at %s: %s; the file has %"
                                  PRIu64 " bytes",
                                  r->src, where, r->detail, r->size);
        return axp_errorf(r->err, -EBADMSG,
                          "%s: truncated in the key/value section (key %" PRIu64 " of %" PRIu64
                          ": %s; the file has %" PRIu64 " bytes)",
                          r->src, i + 1, n_kv, r->detail, r->size);
}

static int parse_kvs(reader *r, gguf_file *f, uint64_t n_kv) {
        size_t cap = 0;
        for (uint64_t i = 0; i < n_kv; i++) {
                gguf_kv *kv;
                uint32_t t;
                char where[128];
                int k;

                if (grow((void **) &f->kv, &cap, i + 1, sizeof(gguf_kv)) < 0)
                        return axp_errorf(r->err, -ENOMEM, "%s: out of memory", r->src);
                f->n_kv = i + 1; /* entries gguf_close must look at */
                kv = &f->kv[i];

                where[0] = 0;
                if (!rd_str(r, &kv->key, "a key"))
                        return kv_truncated(r, where, i, n_kv);
                snprintf(where, sizeof(where), "key '%s' (key %" PRIu64 " of %" PRIu64 ")",
                         GGUF_SHOW(kv->key), i + 1, n_kv);
                if (!rd_u32(r, &t, "the value type"))
                        return kv_truncated(r, where, i, n_kv);
                if (t >= GGUF_TYPE__COUNT)
                        return axp_errorf(r->err, -EBADMSG, "%s: %s has unknown value type %" PRIu32,
                                          r->src, where, t);
                kv->type = t;
                if (t != GGUF_TYPE_ARRAY) {
                        if (!rd_scalar(r, t, kv))
                                return kv_truncated(r, where, i, n_kv);
                        continue;
                }
                k = rd_array(r, kv, where);
                if (k < 0)
                        return k;
                if (k > 0)
                        return kv_truncated(r, where, i, n_kv);
        }
        return 0;
}

static int check_alignment(reader *r, gguf_file *f) {
        const gguf_kv *kv = gguf_find(f, "general.alignment");
        f->alignment = GGUF_DEFAULT_ALIGNMENT;
        if (!kv)
                return 0;
        if (kv->type != GGUF_TYPE_UINT32)
                return axp_errorf(r->err, -EBADMSG, "%s: general.alignment has type %s, expected uint32",
                                  r->src, type_name(kv->type));
        const char *problem = gguf_alignment_problem(kv->v.u64);
        if (problem)
                return axp_errorf(r->err, -EBADMSG, "%s: general.alignment %" PRIu64 " %s", r->src, kv->v.u64,
                                  problem);
        f->alignment = kv->v.u64;
        return 0;
}

/* The tensor info section ended inside tensor i (0-based) of n_tensors. */
static int tensor_truncated(reader *r, uint64_t i, uint64_t n_tensors) {
        return axp_errorf(r->err, -EBADMSG,
                          "%s: truncated in the tensor info section (tensor %" PRIu64 " of %" PRIu64
                          ": %s; the file has %" PRIu64 " bytes)",
                          r->src, i + 1, n_tensors, r->detail, r->size);
}

/* Reads one tensor info and checks everything that does not depend on the data section. */
static int parse_tensor_info(reader *r, gguf_file *f, uint64_t i, uint64_t n_tensors) {
        gguf_tensor *t = &f->tensors[i];
        const axp_type_traits *tr;
        uint64_t nel = 1, rows = 1, row_bytes, nbytes;

        if (!rd_str(r, &t->name, "a tensor name") || !rd_u32(r, &t->n_dims, "the number of dimensions"))
                return tensor_truncated(r, i, n_tensors);
        if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
                return axp_errorf(r->err, -EBADMSG,
                                  "%s: tensor '%s' has %" PRIu32 " dimensions (1 to %d allowed)", r->src,
                                  GGUF_SHOW(t->name), t->n_dims, GGUF_MAX_DIMS);
        for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
                uint64_t ne = 1;
                if (d < t->n_dims && !rd_u64(r, &ne, "a dimension"))
                        return tensor_truncated(r, i, n_tensors);
                if (ne < 1 || ne > INT64_MAX)
                        return axp_errorf(r->err, -EBADMSG,
                                          "%s: tensor '%s' dimension %" PRIu32 " has %" PRId64
                                          " elements (must be at least 1)",
                                          r->src, GGUF_SHOW(t->name), d, (int64_t) ne);
                t->ne[d] = (int64_t) ne;
                if (!axp_mul_ok(nel, ne, &nel) || nel > INT64_MAX)
                        return axp_errorf(r->err, -EBADMSG,
                                          "%s: tensor '%s' has too many elements (overflow at dimension %" PRIu32 ")",
                                          r->src, GGUF_SHOW(t->name), d);
                if (d > 0)
                        rows *= ne; /* <= nel, cannot overflow */
        }
        if (!rd_u32(r, &t->type, "the tensor type") || !rd_u64(r, &t->offset, "the tensor data offset"))
                return tensor_truncated(r, i, n_tensors);
        tr = axp_type_traits_get(t->type);
        if (!tr)
                return axp_errorf(r->err, -EBADMSG, "%s: tensor '%s' has unknown type id %" PRIu32,
                                  r->src, GGUF_SHOW(t->name), t->type);
        if (t->ne[0] % tr->blck != 0)
                return axp_errorf(r->err, -EBADMSG,
                                  "%s: tensor '%s' of type %s has rows of %" PRId64
                                  " elements, not a multiple of the block size %" PRIu32,
                                  r->src, GGUF_SHOW(t->name), tr->name, t->ne[0], tr->blck);
        if (!axp_mul_ok((uint64_t) t->ne[0] / tr->blck, tr->bytes, &row_bytes) ||
            !axp_mul_ok(row_bytes, rows, &nbytes))
                return axp_errorf(r->err, -EBADMSG, "%s: tensor '%s' size overflows", r->src,
                                  GGUF_SHOW(t->name));
        t->nbytes = nbytes;
        return 0;
}

/* The tensors sorted by name (for gguf_find_tensor), refusing a name given twice */
static int index_tensors(gguf_file_impl *fi, const char *src, axp_error *err) {
        gguf_file *f = &fi->pub;
        size_t n = f->n_tensors;

        free(fi->tensor_by_name);
        fi->tensor_by_name = malloc(MAX(n, 1) * sizeof(size_t));
        if (!fi->tensor_by_name)
                return axp_errorf(err, -ENOMEM, "%s: out of memory", src);
        for (size_t i = 0; i < n; i++)
                fi->tensor_by_name[i] = i;
        qsort_r(fi->tensor_by_name, n, sizeof(size_t), cmp_tensor_name_idx, f->tensors);
        for (size_t i = 1; i < n; i++) {
                const gguf_tensor *a = &f->tensors[fi->tensor_by_name[i - 1]];
                const gguf_tensor *b = &f->tensors[fi->tensor_by_name[i]];
                if (cmp_str(a->name, b->name) != 0)
                        continue;
                if (f->n_parts > 1)
                        return axp_errorf(err, -EBADMSG,
                                          "%s: duplicate tensor name '%s' (in parts %" PRIu32 " and %" PRIu32
                                          " of the split model)", src, GGUF_SHOW(a->name),
                                          MIN(a->part, b->part) + 1, MAX(a->part, b->part) + 1);
                return axp_errorf(err, -EBADMSG, "%s: duplicate tensor name '%s' (tensors %zu and %zu)", src,
                                  GGUF_SHOW(a->name), fi->tensor_by_name[i - 1] + 1, fi->tensor_by_name[i] + 1);
        }
        return 0;
}

/* Places every tensor in the data section: aligned, inside the file, not overlapping. */
static int check_tensor_data(reader *r, gguf_file_impl *fi) {
        gguf_file *f = &fi->pub;
        size_t *by_off;

        for (uint64_t i = 0; i < f->n_tensors; i++) {
                gguf_tensor *t = &f->tensors[i];
                uint64_t start, end;
                if (t->offset % f->alignment != 0)
                        return axp_errorf(r->err, -EBADMSG,
                                          "%s: tensor '%s' data offset %" PRIu64
                                          " is not a multiple of the alignment %" PRIu64,
                                          r->src, GGUF_SHOW(t->name), t->offset, f->alignment);
                if (!axp_add_ok(f->data_offset, t->offset, &start) || start > f->size)
                        return axp_errorf(r->err, -EBADMSG,
                                          "%s: tensor '%s' data offset %" PRIu64
                                          " (in the data section at %" PRIu64
                                          ") is past the end of the file (size %" PRIu64 ")",
                                          r->src, GGUF_SHOW(t->name), t->offset, f->data_offset, (uint64_t) f->size);
                if (!axp_add_ok(start, t->nbytes, &end) || end > f->size)
                        return axp_errorf(r->err, -EBADMSG,
                                          "%s: tensor '%s' data [offset %" PRIu64 ", %" PRIu64
                                          " bytes] extends past the end of the file (size %" PRIu64 ")",
                                          r->src, GGUF_SHOW(t->name), start, t->nbytes, (uint64_t) f->size);
                /* a prefix holds the header only: the data is checked for its place */
                t->data = f->size == r->size ? r->base + start : NULL;
        }

        by_off = malloc(MAX(f->n_tensors, 1) * sizeof(size_t));
        if (!by_off)
                return axp_errorf(r->err, -ENOMEM, "%s: out of memory", r->src);
        for (size_t i = 0; i < f->n_tensors; i++)
                by_off[i] = i;
        qsort_r(by_off, f->n_tensors, sizeof(size_t), cmp_tensor_off_idx, f->tensors);
        for (size_t k = 1; k < f->n_tensors; k++) {
                const gguf_tensor *a = &f->tensors[by_off[k - 1]], *b = &f->tensors[by_off[k]];
                if (a->offset + a->nbytes > b->offset) { /* both ends are inside the file */
                        int ret = axp_errorf(r->err, -EBADMSG,
                                             "%s: tensors '%s' [offset %" PRIu64 ", %" PRIu64
                                             " bytes] and '%s' [offset %" PRIu64 "] overlap",
                                             r->src, GGUF_SHOW(a->name), f->data_offset + a->offset,
                                             a->nbytes, GGUF_SHOW(b->name), f->data_offset + b->offset);
                        free(by_off);
                        return ret;
                }
        }
        free(by_off);
        return 0;
}

void gguf_close(gguf_file *f) {
        gguf_file_impl *fi = (gguf_file_impl *) f;
        if (!f)
                return;
        if (f->kv)
                for (uint64_t i = 0; i < f->n_kv; i++)
                        free(f->kv[i].arr_str);
        free(f->kv);
        free(f->tensors);
        free(fi->kv_by_key);
        free(fi->tensor_by_name);
        if (fi->more) {
                for (uint32_t i = 0; i + 1 < f->n_parts; i++)
                        gguf_close(fi->more[i]);
                free(fi->more);
        }
        if (f->parts != &fi->part0)
                free(f->parts);
        if (f->owns_map && f->map)
                munmap(f->map, f->size);
        free(fi);
}

/* The header of the bytes `r` holds, checked against the file's size. */
static int parse_body(reader *r, gguf_file_impl **ret) {
        _cleanup_(gguf_closep) gguf_file *f = NULL;
        gguf_file_impl *fi;
        const char *src = r->src;
        const void *data = r->base;
        size_t size = r->size;
        uint64_t file_size = r->file_size;
        axp_error *err = r->err;
        uint32_t version;
        uint64_t n_tensors, n_kv, rest;
        int k;

        if (size < 4)
                return axp_errorf(err, -EBADMSG, "%s: not a GGUF file (%s)", src,
                                  size ? "too short" : "empty");
        if (memcmp(data, GGUF_MAGIC, 4) != 0)
                return axp_errorf(err, -EBADMSG, "%s: not a GGUF file (bad magic)", src);
        r->pos = 4;
        if (!rd_u32(r, &version, "the version"))
                return axp_errorf(err, -EBADMSG, "%s: truncated in the header (%s)", src, r->detail);
        if (version == 1)
                return axp_errorf(err, -EPROTONOSUPPORT,
                                  "%s: GGUF version 1 is too old (only versions 2 and 3 are supported; "
                                  "convert the model again with a current llama.cpp)", src);
        if (version != 2 && version != 3) {
                if (__builtin_bswap32(version) >= 1 && __builtin_bswap32(version) <= 3)
                        return axp_errorf(err, -EPROTONOSUPPORT,
                                          "%s: big-endian GGUF files are not supported", src);
                return axp_errorf(err, -EPROTONOSUPPORT,
                                  "%s: GGUF version %" PRIu32 " is not supported (only 2 and 3)",
                                  src, version);
        }
        if (!rd_u64(r, &n_tensors, "the tensor count") || !rd_u64(r, &n_kv, "the key/value count"))
                return axp_errorf(err, -EBADMSG, "%s: truncated in the header (%s)", src, r->detail);

        /* a key/value takes at least 13 bytes (key length, type, one byte of value); a tensor
         * info at least 32 (name length, n_dims, one dimension, type, offset) */
        rest = file_size - r->pos;
        if (n_kv > rest / 13)
                return axp_errorf(err, -EBADMSG,
                                  "%s: header claims %" PRIu64 " key/values, more than the %" PRIu64
                                  "-byte file can hold",
                                  src, n_kv, file_size);
        if (n_tensors > rest / 32 || n_kv * 13 + n_tensors * 32 > rest)
                return axp_errorf(err, -EBADMSG,
                                  "%s: header claims %" PRIu64 " tensors and %" PRIu64
                                  " key/values, more than the %" PRIu64 "-byte file can hold",
                                  src, n_tensors, n_kv, file_size);

        fi = calloc(1, sizeof(*fi));
        if (!fi)
                return axp_errorf(err, -ENOMEM, "%s: out of memory", src);
        f = &fi->pub;
        f->map = (void *) data;
        f->size = file_size;
        f->version = version;

        k = parse_kvs(r, f, n_kv);
        if (k < 0)
                return k;
        fi->kv_by_key = malloc(MAX(n_kv, 1) * sizeof(size_t));
        if (!fi->kv_by_key)
                return axp_errorf(err, -ENOMEM, "%s: out of memory", src);
        for (size_t i = 0; i < n_kv; i++)
                fi->kv_by_key[i] = i;
        qsort_r(fi->kv_by_key, n_kv, sizeof(size_t), cmp_kv_idx, f->kv);
        for (size_t i = 1; i < n_kv; i++) {
                const gguf_kv *a = &f->kv[fi->kv_by_key[i - 1]], *b = &f->kv[fi->kv_by_key[i]];
                if (cmp_str(a->key, b->key) == 0)
                        return axp_errorf(err, -EBADMSG, "%s: duplicate key '%s' (keys %zu and %zu)",
                                          src, GGUF_SHOW(a->key), fi->kv_by_key[i - 1] + 1,
                                          fi->kv_by_key[i] + 1);
        }
        k = check_alignment(r, f);
        if (k < 0)
                return k;

        size_t tcap = 0;
        for (uint64_t i = 0; i < n_tensors; i++) {
                if (grow((void **) &f->tensors, &tcap, i + 1, sizeof(gguf_tensor)) < 0)
                        return axp_errorf(err, -ENOMEM, "%s: out of memory", src);
                f->n_tensors = i + 1;
                k = parse_tensor_info(r, f, i, n_tensors);
                if (k < 0)
                        return k;
        }
        k = index_tensors(fi, src, err);
        if (k < 0)
                return k;

        /* the data section starts at the aligned end of the header (r->pos <= size, and the
         * alignment is at most 2^31, so this cannot overflow) */
        f->data_offset = (r->pos + f->alignment - 1) / f->alignment * f->alignment;
        k = check_tensor_data(r, fi);
        if (k < 0)
                return k;
        fi->part0 = (gguf_part) { .map = data, .size = size, .data_offset = f->data_offset };
        f->parts = &fi->part0;
        f->n_parts = 1;
        f->total_size = file_size;

        *ret = (gguf_file_impl *) TAKE_PTR(f);
        return 0;
}


/* Parses and validates `size` bytes at `data`, the first bytes of a file of `file_size`
 * bytes. On success the result refers to `data`. -ENOBUFS: the header goes on past the
 * prefix (read more). */
static int parse_prefix(const char *src, const void *data, size_t size, uint64_t file_size,
                        gguf_file_impl **ret, axp_error *err) {
        reader r = { .base = data, .size = size, .file_size = file_size, .src = src, .err = err };
        int k = parse_body(&r, ret);

        if (k < 0 && r.short_read)
                return axp_errorf(err, -ENOBUFS, "%s: the header is longer than the %zu bytes read",
                                  src, size);
        return k;
}

static int parse(const char *src, const void *data, size_t size, gguf_file_impl **ret,
                 axp_error *err) {
        return parse_prefix(src, data, size, size, ret, err);
}

int gguf_open_prefix(const char *src, const void *data, size_t size, uint64_t file_size,
                     gguf_file **ret, axp_error *err) {
        gguf_file_impl *fi;
        int k;

        if (size > file_size)
                size = (size_t) file_size;
        k = parse_prefix(src, data, size, file_size, &fi, err);
        if (k < 0)
                return k;
        fi->pub.owns_map = false;
        *ret = &fi->pub;
        return 0;
}

int gguf_open_buffer(const void *data, size_t size, gguf_file **ret, axp_error *err) {
        gguf_file_impl *fi;
        int k = parse("(buffer)", data, size, &fi, err);
        if (k < 0)
                return k;
        fi->pub.owns_map = false;
        *ret = &fi->pub;
        return 0;
}

static int open_one(const char *path, gguf_file_impl **ret, axp_error *err) {
        gguf_file_impl *fi;
        struct stat st;
        void *map;
        int fd, k;

        /* O_NONBLOCK: a FIFO given by mistake must not hang the open */
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
        if (fd < 0)
                return axp_errorf(err, -errno, "%s: cannot open: %s", path, strerror(errno));
        if (fstat(fd, &st) < 0) {
                k = -errno;
                close(fd);
                return axp_errorf(err, k, "%s: cannot stat: %s", path, strerror(-k));
        }
        if (S_ISDIR(st.st_mode)) {
                close(fd);
                return axp_errorf(err, -EISDIR, "%s: is a directory, not a GGUF file", path);
        }
        if (!S_ISREG(st.st_mode)) {
                close(fd);
                return axp_errorf(err, -EINVAL, "%s: not a regular file", path);
        }
        if ((uint64_t) st.st_size > SIZE_MAX) {
                close(fd);
                return axp_errorf(err, -EFBIG, "%s: file too large to map", path);
        }
        if (st.st_size < 4) {
                close(fd);
                return axp_errorf(err, -EBADMSG, "%s: not a GGUF file (%s)", path,
                                  st.st_size ? "too short" : "empty");
        }
        map = mmap(NULL, (size_t) st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        k = -errno;
        close(fd);
        if (map == MAP_FAILED)
                return axp_errorf(err, k, "%s: cannot map: %s", path, strerror(-k));

        k = parse(path, map, (size_t) st.st_size, &fi, err);
        if (k < 0) {
                munmap(map, (size_t) st.st_size);
                return k;
        }
        fi->pub.owns_map = true;
        *ret = fi;
        return 0;
}

bool gguf_split_of(const gguf_file *f, uint32_t *no, uint32_t *count) {
        uint32_t n = 0, i = 0;

        if (!gguf_get_u32(f, "split.count", &n) || n <= 1)
                return false;
        (void) gguf_get_u32(f, "split.no", &i);
        *no = i;
        *count = n;
        return true;
}

/* the value of 5 decimal digits at p, or -1 */
static long digits5(const char *p) {
        long v = 0;
        for (int i = 0; i < 5; i++) {
                if (p[i] < '0' || p[i] > '9')
                        return -1;
                v = v * 10 + (p[i] - '0');
        }
        return v;
}

bool gguf_split_suffix(const char *s, size_t len, size_t *prefix, uint32_t *number, uint32_t *count) {
        if (len <= 15) /* a name before it, too */
                return false;
        const char *p = s + len - 15; /* -00002-of-00003 */
        long a = digits5(p + 1), b = digits5(p + 10);
        if (p[0] != '-' || a < 0 || strncmp(p + 6, "-of-", 4) != 0 || b < 0)
                return false;
        *prefix = len - 15;
        *number = (uint32_t) a;
        *count = (uint32_t) b;
        return true;
}

char *gguf_part_path(const char *path, uint32_t first, uint32_t i, uint32_t n) {
        size_t len = strlen(path), prefix;
        uint32_t number, count;
        if (len < 5 || strcmp(path + len - 5, ".gguf") != 0 ||
            !gguf_split_suffix(path, len - 5, &prefix, &number, &count) || number != first + 1 || count != n)
                return NULL;
        char *out = malloc(len + 1);
        if (out)
                snprintf(out, len + 1, "%.*s-%05" PRIu32 "-of-%05" PRIu32 ".gguf", (int) prefix, path, i + 1, n);
        return out;
}

bool gguf_split_key(gguf_str key) {
        return gguf_str_eq(key, "split.no") || gguf_str_eq(key, "split.count") || gguf_str_eq(key, "split.tensors.count");
}

int gguf_join(gguf_file *first, gguf_file **more, uint32_t n, const char *src, const char *const *names,
              axp_error *err) {
        gguf_file_impl *fi = (gguf_file_impl *) first;
        gguf_file *f = first;
        uint32_t want = 0;
        uint64_t total = f->n_tensors, bytes = f->total_size;

        /* first owns them from here, whatever happens */
        fi->more = calloc(MAX(n, 2) - 1, sizeof(*fi->more));
        gguf_part *parts = calloc(n, sizeof(*parts));
        if (!fi->more || !parts) {
                free(parts);
                for (uint32_t i = 0; i + 1 < n; i++)
                        gguf_close(more[i]);
                return axp_errorf(err, -ENOMEM, "%s: out of memory", src);
        }
        memcpy(fi->more, more, (n - 1) * sizeof(*more));
        parts[0] = fi->part0;
        f->parts = parts;
        f->n_parts = n;
        for (uint32_t i = 1; i < n; i++) {
                const gguf_file *pf = more[i - 1];
                uint32_t no = 0, count = 0;
                if (!gguf_split_of(pf, &no, &count) || no != i || count != n) {
                        char part[32];
                        snprintf(part, sizeof(part), "part %" PRIu32, i + 1);
                        return axp_errorf(err, -EBADMSG,
                                          "%s: not part %" PRIu32 " of %" PRIu32 " of the split model %s (its split.no "
                                          "and split.count say %s)", names ? names[i - 1] : part, i + 1, n, src,
                                          gguf_find(pf, "split.count") ? "another" : "none");
                }
                parts[i] = pf->parts[0];
                total += pf->n_tensors;
                bytes += pf->total_size;
        }
        if (gguf_get_u32(f, "split.tensors.count", &want) && want != total)
                return axp_errorf(err, -EBADMSG,
                                  "%s: the split model's split.tensors.count is %" PRIu32 ", and its %" PRIu32
                                  " parts hold %" PRIu64 " tensors", src, want, n, total);

        gguf_tensor *all = malloc(MAX(total, 1) * sizeof(*all));
        if (!all)
                return axp_errorf(err, -ENOMEM, "%s: out of memory", src);
        if (f->n_tensors) /* a first part may hold none (gguf-split --no-tensor-first-split) */
                memcpy(all, f->tensors, f->n_tensors * sizeof(*all));
        uint64_t at = f->n_tensors;
        for (uint32_t i = 1; i < n; i++) {
                const gguf_file *pf = more[i - 1];
                for (uint64_t j = 0; j < pf->n_tensors; j++) {
                        all[at] = pf->tensors[j];
                        all[at++].part = i;
                }
        }
        free(f->tensors);
        f->tensors = all;
        f->n_tensors = total;
        f->total_size = bytes;
        return index_tensors(fi, src, err);
}

/* The rest of a split model whose first part fi is, opened by their names and joined */
static int open_parts(const char *path, gguf_file_impl *fi, uint32_t n, axp_error *err) {
        gguf_file **more = calloc(n - 1, sizeof(*more));
        char **names = calloc(n - 1, sizeof(*names));
        int k = 0;

        if (!more || !names)
                k = axp_errorf(err, -ENOMEM, "%s: out of memory", path);
        for (uint32_t i = 1; i < n && k == 0; i++) {
                gguf_file_impl *pi = NULL;
                names[i - 1] = gguf_part_path(path, 0, i, n);
                if (!names[i - 1]) {
                        k = axp_errorf(err, -ENOMEM, "%s: out of memory", path);
                        break;
                }
                k = open_one(names[i - 1], &pi, err);
                if (k < 0) {
                        char why[sizeof(err->msg)];
                        snprintf(why, sizeof(why), "%s", err->msg);
                        axp_errorf(err, k, "%s is part 1 of %" PRIu32 " of a split model, and part %" PRIu32
                                   " cannot be read: %s", path, n, i + 1, why);
                        break;
                }
                more[i - 1] = &pi->pub;
        }
        if (k == 0)
                k = gguf_join(&fi->pub, more, n, path, (const char *const *) names, err);
        else if (more)
                for (uint32_t i = 0; i + 1 < n; i++)
                        gguf_close(more[i]);
        if (names)
                for (uint32_t i = 0; i + 1 < n; i++)
                        free(names[i]);
        free(names);
        free(more);
        return k;
}

int gguf_open(const char *path, gguf_file **ret, axp_error *err) {
        _cleanup_(gguf_closep) gguf_file *f = NULL;
        gguf_file_impl *fi;
        uint32_t no, n;
        int k = open_one(path, &fi, err);

        if (k < 0)
                return k;
        f = &fi->pub;
        if (gguf_split_of(f, &no, &n)) {
                if (n > GGUF_SPLIT_MAX || no >= n)
                        return axp_errorf(err, -EBADMSG, "%s: split.no %" PRIu32 " and split.count %" PRIu32
                                          " do not name a part of a split model (at most %d parts)",
                                          path, no, n, GGUF_SPLIT_MAX);
                _cleanup_free_ char *first = gguf_part_path(path, no, 0, n);
                if (no != 0 && first)
                        return axp_errorf(err, -EINVAL,
                                          "%s is part %" PRIu32 " of %" PRIu32 " of a split model; open its first part, %s",
                                          path, no + 1, n, first);
                if (no != 0)
                        return axp_errorf(err, -EINVAL,
                                          "%s is part %" PRIu32 " of %" PRIu32 " of a split model; open its first part "
                                          "(PREFIX-00001-of-%05" PRIu32 ".gguf)", path, no + 1, n, n);
                if (!first)
                        return axp_errorf(err, -EINVAL,
                                          "%s is part 1 of %" PRIu32 " of a split model, but not named "
                                          "PREFIX-00001-of-%05" PRIu32 ".gguf, the name the other parts' names "
                                          "are made from", path, n, n);
                k = open_parts(path, fi, n, err);
                if (k < 0)
                        return k;
        }
        *ret = TAKE_PTR(f);
        return 0;
}

/* Lookups ---------------------------------------------------------------------------------- */

bool gguf_str_eq(gguf_str s, const char *c) {
        size_t n = strlen(c);
        return s.len == n && (n == 0 || memcmp(s.ptr, c, n) == 0);
}

char *gguf_str_dup(gguf_str s) {
        char *p;
        if (s.len >= SIZE_MAX)
                return NULL;
        p = malloc(s.len + 1);
        if (!p)
                return NULL;
        if (s.len)
                memcpy(p, s.ptr, s.len);
        p[s.len] = 0;
        return p;
}

/* Binary search over an index sorted by (length, bytes). */
static size_t find_sorted(const size_t *idx, size_t n, const void *base, size_t stride,
                          size_t name_off, const char *name) {
        gguf_str key = { name, strlen(name) };
        size_t lo = 0, hi = n;
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                const gguf_str *s = (const gguf_str *) ((const char *) base + idx[mid] * stride + name_off);
                int c = cmp_str(*s, key);
                if (c == 0)
                        return idx[mid];
                if (c < 0)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return SIZE_MAX;
}

const gguf_kv *gguf_find(const gguf_file *f, const char *key) {
        const gguf_file_impl *fi = (const gguf_file_impl *) f;
        size_t i = find_sorted(fi->kv_by_key, f->n_kv, f->kv, sizeof(gguf_kv),
                               offsetof(gguf_kv, key), key);
        return i == SIZE_MAX ? NULL : &f->kv[i];
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
        const gguf_file_impl *fi = (const gguf_file_impl *) f;
        size_t i = find_sorted(fi->tensor_by_name, f->n_tensors, f->tensors, sizeof(gguf_tensor),
                               offsetof(gguf_tensor, name), name);
        return i == SIZE_MAX ? NULL : &f->tensors[i];
}

uint64_t gguf_n_elements(const gguf_file *f) {
        uint64_t total = 0;
        for (uint64_t i = 0; i < f->n_tensors; i++) {
                uint64_t n = 1;
                for (uint32_t d = 0; d < f->tensors[i].n_dims; d++)
                        n *= (uint64_t) f->tensors[i].ne[d];
                total += n;
        }
        return total;
}

static bool is_signed(enum gguf_type t) {
        return t == GGUF_TYPE_INT8 || t == GGUF_TYPE_INT16 || t == GGUF_TYPE_INT32 ||
               t == GGUF_TYPE_INT64;
}

static bool is_unsigned(enum gguf_type t) {
        return t == GGUF_TYPE_UINT8 || t == GGUF_TYPE_UINT16 || t == GGUF_TYPE_UINT32 ||
               t == GGUF_TYPE_UINT64;
}

bool gguf_get_u32(const gguf_file *f, const char *key, uint32_t *ret) {
        const gguf_kv *kv = gguf_find(f, key);
        if (!kv)
                return false;
        if (is_unsigned(kv->type) && kv->v.u64 <= UINT32_MAX)
                *ret = (uint32_t) kv->v.u64;
        else if (is_signed(kv->type) && kv->v.i64 >= 0 && kv->v.i64 <= UINT32_MAX)
                *ret = (uint32_t) kv->v.i64;
        else
                return false;
        return true;
}

bool gguf_get_i32(const gguf_file *f, const char *key, int32_t *ret) {
        const gguf_kv *kv = gguf_find(f, key);
        if (!kv)
                return false;
        if (is_unsigned(kv->type) && kv->v.u64 <= INT32_MAX)
                *ret = (int32_t) kv->v.u64;
        else if (is_signed(kv->type) && kv->v.i64 >= INT32_MIN && kv->v.i64 <= INT32_MAX)
                *ret = (int32_t) kv->v.i64;
        else
                return false;
        return true;
}

bool gguf_get_f32(const gguf_file *f, const char *key, float *ret) {
        const gguf_kv *kv = gguf_find(f, key);
        if (!kv || (kv->type != GGUF_TYPE_FLOAT32 && kv->type != GGUF_TYPE_FLOAT64))
                return false;
        *ret = (float) kv->v.f64;
        return true;
}

bool gguf_get_bool(const gguf_file *f, const char *key, bool *ret) {
        const gguf_kv *kv = gguf_find(f, key);
        if (!kv || kv->type != GGUF_TYPE_BOOL)
                return false;
        *ret = kv->v.u64 != 0;
        return true;
}

bool gguf_get_str(const gguf_file *f, const char *key, gguf_str *ret) {
        const gguf_kv *kv = gguf_find(f, key);
        if (!kv || kv->type != GGUF_TYPE_STRING)
                return false;
        *ret = kv->v.str;
        return true;
}

const gguf_kv *gguf_get_arr(const gguf_file *f, const char *key, enum gguf_type type) {
        const gguf_kv *kv = gguf_find(f, key);
        if (!kv || kv->type != GGUF_TYPE_ARRAY || kv->arr_type != type)
                return NULL;
        return kv;
}
