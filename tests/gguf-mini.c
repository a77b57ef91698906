/* SPDX-License-Identifier: MIT */
/* A stop-gap GGUF reader for the tokenizer tests until engine/gguf.c exists: just enough of
 * gguf.h (metadata only, bounds-checked) to load vocabularies. Not linked into the engine. */
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf.h"

typedef struct rd {
        const uint8_t *p;
        size_t n, off;
} rd;

static bool rd_bytes(rd *r, void *out, size_t n) {
        if (r->n - r->off < n)
                return false;
        memcpy(out, r->p + r->off, n);
        r->off += n;
        return true;
}

static bool rd_str(rd *r, gguf_str *s) {
        uint64_t n;
        if (!rd_bytes(r, &n, 8) || r->n - r->off < n)
                return false;
        s->ptr = (const char *) r->p + r->off;
        s->len = n;
        r->off += n;
        return true;
}

static size_t type_size(uint32_t t) {
        static const size_t sz[] = { 1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8 };
        return t < GGUF_TYPE__COUNT ? sz[t] : 0;
}

static bool rd_kv(rd *r, gguf_kv *kv) {
        uint32_t t;
        if (!rd_str(r, &kv->key) || !rd_bytes(r, &t, 4) || t >= GGUF_TYPE__COUNT)
                return false;
        kv->type = t;
        if (t == GGUF_TYPE_STRING)
                return rd_str(r, &kv->v.str);
        if (t != GGUF_TYPE_ARRAY) {
                uint8_t b[8] = {};
                size_t n = type_size(t);
                if (!rd_bytes(r, b, n))
                        return false;
                switch (t) {
                case GGUF_TYPE_INT8: kv->v.i64 = (int8_t) b[0]; break;
                case GGUF_TYPE_INT16: { int16_t v; memcpy(&v, b, 2); kv->v.i64 = v; break; }
                case GGUF_TYPE_INT32: { int32_t v; memcpy(&v, b, 4); kv->v.i64 = v; break; }
                case GGUF_TYPE_INT64: memcpy(&kv->v.i64, b, 8); break;
                case GGUF_TYPE_FLOAT32: { float v; memcpy(&v, b, 4); kv->v.f64 = v; break; }
                case GGUF_TYPE_FLOAT64: memcpy(&kv->v.f64, b, 8); break;
                default: memcpy(&kv->v.u64, b, 8); break; /* unsigned and bool, little-endian */
                }
                return true;
        }
        uint32_t at;
        uint64_t n;
        if (!rd_bytes(r, &at, 4) || !rd_bytes(r, &n, 8) || at >= GGUF_TYPE__COUNT ||
            at == GGUF_TYPE_ARRAY)
                return false;
        kv->arr_type = at;
        kv->arr_n = n;
        if (at == GGUF_TYPE_STRING) {
                if (n > (r->n - r->off) / 8)
                        return false;
                kv->arr_str = calloc(n ? n : 1, sizeof(gguf_str));
                if (!kv->arr_str)
                        return false;
                for (uint64_t i = 0; i < n; i++)
                        if (!rd_str(r, &kv->arr_str[i]))
                                return false;
                return true;
        }
        size_t es = type_size(at);
        if (n > (r->n - r->off) / es)
                return false;
        kv->arr_data = r->p + r->off;
        r->off += n * es;
        return true;
}

int gguf_open_buffer(const void *data, size_t size, gguf_file **ret, axp_error *err) {
        rd r = { data, size, 0 };
        uint32_t magic, version;
        uint64_t n_tensors, n_kv;

        if (!rd_bytes(&r, &magic, 4) || memcmp(&magic, "GGUF", 4) != 0 || !rd_bytes(&r, &version, 4) ||
            (version != 2 && version != 3) || !rd_bytes(&r, &n_tensors, 8) || !rd_bytes(&r, &n_kv, 8) ||
            n_kv > size / 12)
                return axp_errorf(err, -EINVAL, "not a GGUF v2/v3 file");
        gguf_file *f = calloc(1, sizeof(*f));
        if (!f)
                return -ENOMEM;
        f->map = (void *) data;
        f->size = size;
        f->version = version;
        f->kv = calloc(n_kv ? n_kv : 1, sizeof(gguf_kv));
        if (!f->kv) {
                free(f);
                return -ENOMEM;
        }
        for (uint64_t i = 0; i < n_kv; i++) {
                f->n_kv = i + 1;
                if (!rd_kv(&r, &f->kv[i])) {
                        gguf_close(f);
                        return axp_errorf(err, -EINVAL, "truncated or damaged GGUF metadata");
                }
        }
        *ret = f;
        return 0;
}

int gguf_open(const char *path, gguf_file **ret, axp_error *err) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return axp_errorf(err, -errno, "cannot open %s: %m", path);
        struct stat st;
        if (fstat(fd, &st) < 0 || st.st_size == 0) {
                close(fd);
                return axp_errorf(err, -EINVAL, "%s is empty", path);
        }
        void *m = mmap(NULL, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        close(fd);
        if (m == MAP_FAILED)
                return axp_errorf(err, -errno, "cannot map %s: %m", path);
        int r = gguf_open_buffer(m, st.st_size, ret, err);
        if (r < 0) {
                munmap(m, st.st_size);
                return r;
        }
        (*ret)->owns_map = true;
        return 0;
}

void gguf_close(gguf_file *f) {
        if (!f)
                return;
        for (uint64_t i = 0; i < f->n_kv; i++)
                free(f->kv[i].arr_str);
        free(f->kv);
        if (f->owns_map)
                munmap(f->map, f->size);
        free(f);
}

bool gguf_str_eq(gguf_str s, const char *c) {
        return strlen(c) == s.len && memcmp(s.ptr, c, s.len) == 0;
}

const gguf_kv *gguf_find(const gguf_file *f, const char *key) {
        for (uint64_t i = 0; i < f->n_kv; i++)
                if (gguf_str_eq(f->kv[i].key, key))
                        return &f->kv[i];
        return NULL;
}

bool gguf_get_u32(const gguf_file *f, const char *key, uint32_t *ret) {
        const gguf_kv *kv = gguf_find(f, key);
        if (!kv)
                return false;
        switch (kv->type) {
        case GGUF_TYPE_UINT8: case GGUF_TYPE_UINT16: case GGUF_TYPE_UINT32: case GGUF_TYPE_UINT64:
                if (kv->v.u64 > UINT32_MAX)
                        return false;
                *ret = kv->v.u64;
                return true;
        case GGUF_TYPE_INT8: case GGUF_TYPE_INT16: case GGUF_TYPE_INT32: case GGUF_TYPE_INT64:
                if (kv->v.i64 < 0 || kv->v.i64 > UINT32_MAX)
                        return false;
                *ret = kv->v.i64;
                return true;
        default:
                return false;
        }
}

bool gguf_get_bool(const gguf_file *f, const char *key, bool *ret) {
        const gguf_kv *kv = gguf_find(f, key);
        if (!kv || kv->type != GGUF_TYPE_BOOL)
                return false;
        *ret = kv->v.u64 & 0xff;
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
