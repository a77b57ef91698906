/* SPDX-License-Identifier: MIT */
/* GGUF v3 writer. Key/values are kept already serialized; tensor data is either a private
 * copy or produced by a callback a bounded number of rows at a time while the file is
 * written, so writing a multi-gigabyte model needs little memory. */
#include "gguf.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/types.h"

/* llama.cpp keeps tensor names in a 64-byte field with its terminating NUL */
#define MAX_TENSOR_NAME 63
/* how much tensor data a fill callback produces per call */
#define FILL_CHUNK_BYTES (16u << 20)
#define OUT_BUF_BYTES (1u << 20)

typedef struct wkv {
        char *key;
        size_t key_len;
        uint32_t type;
        uint8_t *val; /* the value as it is stored in the file */
        size_t val_len;
} wkv;

typedef struct wtensor {
        char *name;
        uint32_t type;
        uint32_t n_dims;
        int64_t ne[GGUF_MAX_DIMS];
        uint64_t row_bytes, n_rows, nbytes;
        uint64_t offset;
        void *data; /* owned copy, or NULL when `fill` produces the data */
        gguf_fill_fn fill;
        void *userdata;
} wtensor;

struct gguf_writer {
        wkv *kv;
        size_t n_kv, cap_kv;
        wtensor *t;
        size_t n_t, cap_t;
        axp_error first_err; /* the first setter failure, reported by gguf_writer_write */
};

gguf_writer *gguf_writer_new(void) {
        return calloc(1, sizeof(gguf_writer));
}

void gguf_writer_free(gguf_writer *w) {
        if (!w)
                return;
        for (size_t i = 0; i < w->n_kv; i++) {
                free(w->kv[i].key);
                free(w->kv[i].val);
        }
        for (size_t i = 0; i < w->n_t; i++) {
                free(w->t[i].name);
                free(w->t[i].data);
        }
        free(w->kv);
        free(w->t);
        free(w);
}

static int fail(gguf_writer *w, int code, const char *fmt, ...) _printf_(3, 4);
static int fail(gguf_writer *w, int code, const char *fmt, ...) {
        if (w->first_err.code == 0) {
                va_list ap;
                va_start(ap, fmt);
                vsnprintf(w->first_err.msg, sizeof(w->first_err.msg), fmt, ap);
                va_end(ap);
                w->first_err.code = code;
        }
        return code;
}

/* Takes ownership of `val` (also on failure). */
static int set_raw(gguf_writer *w, const char *key, size_t key_len, uint32_t type, uint8_t *val,
                   size_t val_len) {
        wkv *kv = NULL;
        for (size_t i = 0; i < w->n_kv; i++)
                if (w->kv[i].key_len == key_len && memcmp(w->kv[i].key, key, key_len) == 0) {
                        kv = &w->kv[i];
                        break;
                }
        if (kv) {
                free(kv->val);
        } else {
                char *k;
                if (w->n_kv == w->cap_kv) {
                        size_t ncap = MAX(w->cap_kv * 2, (size_t) 32);
                        wkv *p = realloc(w->kv, ncap * sizeof(wkv));
                        if (!p) {
                                free(val);
                                return fail(w, -ENOMEM, "out of memory");
                        }
                        w->kv = p;
                        w->cap_kv = ncap;
                }
                k = malloc(key_len + 1);
                if (!k) {
                        free(val);
                        return fail(w, -ENOMEM, "out of memory");
                }
                memcpy(k, key, key_len);
                k[key_len] = 0;
                kv = &w->kv[w->n_kv++];
                kv->key = k;
                kv->key_len = key_len;
        }
        kv->type = type;
        kv->val = val;
        kv->val_len = val_len;
        return 0;
}

static int set_fixed(gguf_writer *w, const char *key, uint32_t type, const void *v, size_t n) {
        uint8_t *val = malloc(n);
        if (!val)
                return fail(w, -ENOMEM, "out of memory");
        memcpy(val, v, n);
        return set_raw(w, key, strlen(key), type, val, n);
}

int gguf_writer_set_u16(gguf_writer *w, const char *key, uint16_t v) {
        return set_fixed(w, key, GGUF_TYPE_UINT16, &v, 2);
}

int gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v) {
        return set_fixed(w, key, GGUF_TYPE_UINT32, &v, 4);
}

int gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v) {
        return set_fixed(w, key, GGUF_TYPE_INT32, &v, 4);
}

int gguf_writer_set_f32(gguf_writer *w, const char *key, float v) {
        return set_fixed(w, key, GGUF_TYPE_FLOAT32, &v, 4);
}

int gguf_writer_set_bool(gguf_writer *w, const char *key, bool v) {
        uint8_t b = v;
        return set_fixed(w, key, GGUF_TYPE_BOOL, &b, 1);
}

/* Serialized size of `n` strings; false on overflow. */
static bool strings_size(const gguf_str *s, const char *const *c, uint64_t n, uint64_t *ret) {
        uint64_t total = 0;
        for (uint64_t i = 0; i < n; i++) {
                uint64_t len = s ? s[i].len : strlen(c[i]);
                if (!axp_add_ok(total, 8, &total) || !axp_add_ok(total, len, &total))
                        return false;
        }
        *ret = total;
        return true;
}

static uint8_t *put_str(uint8_t *p, const char *s, uint64_t len) {
        memcpy(p, &len, 8);
        if (len)
                memcpy(p + 8, s, len);
        return p + 8 + len;
}

int gguf_writer_set_str(gguf_writer *w, const char *key, const char *v) {
        size_t len = strlen(v);
        uint8_t *val = malloc(8 + len);
        if (!val)
                return fail(w, -ENOMEM, "out of memory");
        put_str(val, v, len);
        return set_raw(w, key, strlen(key), GGUF_TYPE_STRING, val, 8 + len);
}

/* An array value: element type, count, then the elements (fixed-size data, or strings from
 * either a gguf_str index or C strings). */
static int set_array(gguf_writer *w, const char *key, size_t key_len, enum gguf_type type,
                     const void *data, const gguf_str *s, const char *const *c, uint64_t n) {
        uint64_t body, total;
        uint8_t *val, *p;
        uint32_t t = type;

        if (type == GGUF_TYPE_ARRAY || type >= GGUF_TYPE__COUNT)
                return fail(w, -EINVAL, "key '%.*s': arrays of type %s cannot be written",
                            (int) MIN(key_len, 100), key, gguf_type_name(type));
        if (type == GGUF_TYPE_STRING) {
                if (!strings_size(s, c, n, &body))
                        return fail(w, -EOVERFLOW, "key '%.*s': array too large", (int) MIN(key_len, 100), key);
        } else if (!axp_mul_ok(n, gguf_type_size(type), &body)) {
                return fail(w, -EOVERFLOW, "key '%.*s': array too large", (int) MIN(key_len, 100), key);
        }
        if (!axp_add_ok(body, 12, &total) || total > SIZE_MAX)
                return fail(w, -EOVERFLOW, "key '%.*s': array too large", (int) MIN(key_len, 100), key);
        val = malloc(total);
        if (!val)
                return fail(w, -ENOMEM, "out of memory for key '%.*s'", (int) MIN(key_len, 100), key);
        memcpy(val, &t, 4);
        memcpy(val + 4, &n, 8);
        p = val + 12;
        if (type != GGUF_TYPE_STRING) {
                if (body)
                        memcpy(p, data, body);
        } else {
                for (uint64_t i = 0; i < n; i++)
                        p = s ? put_str(p, s[i].ptr, s[i].len) : put_str(p, c[i], strlen(c[i]));
        }
        return set_raw(w, key, key_len, GGUF_TYPE_ARRAY, val, total);
}

int gguf_writer_set_arr(gguf_writer *w, const char *key, enum gguf_type type, const void *data,
                        uint64_t n) {
        if (type == GGUF_TYPE_STRING)
                return fail(w, -EINVAL, "key '%s': use gguf_writer_set_arr_str for strings", key);
        return set_array(w, key, strlen(key), type, data, NULL, NULL, n);
}

int gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *v, uint64_t n) {
        return set_array(w, key, strlen(key), GGUF_TYPE_STRING, NULL, NULL, v, n);
}

int gguf_writer_copy_kv(gguf_writer *w, const gguf_kv *kv) {
        size_t key_len = kv->key.len;
        uint8_t *val;
        size_t n;

        if (kv->key.len > SIZE_MAX / 2)
                return fail(w, -EOVERFLOW, "key too long");
        if (kv->type == GGUF_TYPE_ARRAY)
                return set_array(w, kv->key.ptr, key_len, kv->arr_type, kv->arr_data, kv->arr_str,
                                 NULL, kv->arr_n);
        if (kv->type == GGUF_TYPE_STRING) {
                if (kv->v.str.len > SIZE_MAX - 8)
                        return fail(w, -EOVERFLOW, "string too long");
                val = malloc(8 + kv->v.str.len);
                if (!val)
                        return fail(w, -ENOMEM, "out of memory");
                put_str(val, kv->v.str.ptr, kv->v.str.len);
                return set_raw(w, kv->key.ptr, key_len, GGUF_TYPE_STRING, val, 8 + kv->v.str.len);
        }
        n = gguf_type_size(kv->type);
        if (n == 0)
                return fail(w, -EINVAL, "key '%.*s' has unknown type %u", (int) MIN(key_len, 100),
                            kv->key.ptr, (unsigned) kv->type);
        val = malloc(8);
        if (!val)
                return fail(w, -ENOMEM, "out of memory");
        if (kv->type == GGUF_TYPE_FLOAT32) {
                float f = (float) kv->v.f64;
                memcpy(val, &f, 4);
        } else {
                /* integers (little-endian, low bytes; two's complement for signed), bool, f64 */
                memcpy(val, &kv->v.u64, 8);
        }
        return set_raw(w, kv->key.ptr, key_len, kv->type, val, n);
}

static int add_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                      const int64_t *ne, wtensor **ret) {
        const axp_type_traits *tr = axp_type_traits_get(type);
        uint64_t rows = 1, row_bytes, nbytes;
        wtensor *t;
        size_t len = strlen(name);

        if (len == 0 || len > MAX_TENSOR_NAME)
                return fail(w, -EINVAL, "tensor name '%.100s' must have 1 to %d bytes", name,
                            MAX_TENSOR_NAME);
        for (size_t i = 0; i < w->n_t; i++)
                if (strcmp(w->t[i].name, name) == 0)
                        return fail(w, -EEXIST, "tensor '%s' added twice", name);
        if (!tr)
                return fail(w, -EINVAL, "tensor '%s': unknown type id %" PRIu32, name, type);
        if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
                return fail(w, -EINVAL, "tensor '%s': %" PRIu32 " dimensions (1 to %d allowed)", name,
                            n_dims, GGUF_MAX_DIMS);
        for (uint32_t d = 0; d < n_dims; d++) {
                if (ne[d] < 1)
                        return fail(w, -EINVAL, "tensor '%s': dimension %" PRIu32 " is %" PRId64, name, d,
                                    ne[d]);
                if (d > 0 && !axp_mul_ok(rows, (uint64_t) ne[d], &rows))
                        return fail(w, -EOVERFLOW, "tensor '%s' is too large", name);
        }
        if (ne[0] % tr->blck != 0)
                return fail(w, -EINVAL,
                            "tensor '%s': rows of %" PRId64 " elements are not a multiple of %s's block of %" PRIu32,
                            name, ne[0], tr->name, tr->blck);
        if (!axp_mul_ok((uint64_t) ne[0] / tr->blck, tr->bytes, &row_bytes) ||
            !axp_mul_ok(row_bytes, rows, &nbytes) || nbytes > INT64_MAX)
                return fail(w, -EOVERFLOW, "tensor '%s' is too large", name);
        if (w->n_t == w->cap_t) {
                size_t ncap = MAX(w->cap_t * 2, (size_t) 64);
                wtensor *p = realloc(w->t, ncap * sizeof(wtensor));
                if (!p)
                        return fail(w, -ENOMEM, "out of memory");
                w->t = p;
                w->cap_t = ncap;
        }
        t = &w->t[w->n_t];
        *t = (wtensor) { .type = type, .n_dims = n_dims, .row_bytes = row_bytes,
                         .n_rows = rows, .nbytes = nbytes };
        for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++)
                t->ne[d] = d < n_dims ? ne[d] : 1;
        t->name = strdup(name);
        if (!t->name)
                return fail(w, -ENOMEM, "out of memory");
        w->n_t++;
        *ret = t;
        return 0;
}

/* Takes back the tensor add_tensor() added last (it has no data yet); returns k. */
static int drop_last_tensor(gguf_writer *w, int k) {
        assert(w->n_t > 0 && !w->t[w->n_t - 1].data);
        free(w->t[--w->n_t].name);
        return k;
}

int gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                           const int64_t *ne, const void *data, uint64_t nbytes) {
        wtensor *t;
        int k = add_tensor(w, name, type, n_dims, ne, &t);
        if (k < 0)
                return k;
        if (nbytes != t->nbytes) {
                k = fail(w, -EINVAL, "tensor '%s': %" PRIu64 " bytes given, its shape needs %" PRIu64,
                         name, nbytes, t->nbytes);
                return drop_last_tensor(w, k);
        }
        t->data = malloc(nbytes);
        if (!t->data) {
                k = fail(w, -ENOMEM, "out of memory for tensor '%s' (%" PRIu64 " bytes)", name, nbytes);
                return drop_last_tensor(w, k);
        }
        memcpy(t->data, data, nbytes);
        return 0;
}

int gguf_writer_add_tensor_fill(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                                const int64_t *ne, gguf_fill_fn fill, void *userdata) {
        wtensor *t;
        int k = add_tensor(w, name, type, n_dims, ne, &t);
        if (k < 0)
                return k;
        t->fill = fill;
        t->userdata = userdata;
        return 0;
}

/* Output ----------------------------------------------------------------------------------- */

typedef struct out {
        int fd;
        const char *path; /* for messages */
        uint8_t *buf;
        size_t n;
        axp_error *err;
} out;

static int write_all(out *o, const void *p, size_t n) {
        const uint8_t *c = p;
        while (n > 0) {
                ssize_t k = write(o->fd, c, MIN(n, (size_t) 1 << 30));
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return axp_errorf(o->err, -errno, "%s: cannot write: %s", o->path,
                                          strerror(errno));
                }
                c += k;
                n -= (size_t) k;
        }
        return 0;
}

static int flush(out *o) {
        int k = write_all(o, o->buf, o->n);
        o->n = 0;
        return k;
}

static int put(out *o, const void *p, size_t n) {
        if (o->n + n > OUT_BUF_BYTES) {
                int k = flush(o);
                if (k < 0)
                        return k;
                if (n > OUT_BUF_BYTES)
                        return write_all(o, p, n);
        }
        memcpy(o->buf + o->n, p, n);
        o->n += n;
        return 0;
}

static int put_u32(out *o, uint32_t v) {
        return put(o, &v, 4);
}

static int put_u64(out *o, uint64_t v) {
        return put(o, &v, 8);
}

static int pad(out *o, uint64_t pos, uint64_t alignment) {
        static const uint8_t zeros[256];
        uint64_t n = (alignment - pos % alignment) % alignment;
        while (n > 0) {
                int k = put(o, zeros, MIN(n, sizeof(zeros)));
                if (k < 0)
                        return k;
                n -= MIN(n, sizeof(zeros));
        }
        return 0;
}

static int alignment_of(gguf_writer *w, uint64_t *ret, axp_error *err) {
        for (size_t i = 0; i < w->n_kv; i++) {
                uint32_t a;
                if (strcmp(w->kv[i].key, "general.alignment") != 0)
                        continue;
                if (w->kv[i].type != GGUF_TYPE_UINT32)
                        return axp_errorf(err, -EINVAL, "general.alignment must be a uint32");
                memcpy(&a, w->kv[i].val, 4);
                const char *problem = gguf_alignment_problem(a);
                if (problem)
                        return axp_errorf(err, -EINVAL, "general.alignment %" PRIu32 " %s", a, problem);
                *ret = a;
                return 0;
        }
        *ret = GGUF_DEFAULT_ALIGNMENT;
        return 0;
}

static int write_body(gguf_writer *w, out *o, uint64_t alignment) {
        uint64_t pos = 24, data = 0, max_chunk = 0;
        _cleanup_free_ uint8_t *chunk = NULL;
        int k;

        /* header, then every offset is known before anything is written */
        for (size_t i = 0; i < w->n_kv; i++)
                pos += 8 + w->kv[i].key_len + 4 + w->kv[i].val_len;
        for (size_t i = 0; i < w->n_t; i++) {
                wtensor *t = &w->t[i];
                pos += 8 + strlen(t->name) + 4 + 8 * (uint64_t) t->n_dims + 4 + 8;
                t->offset = data;
                if (!axp_add_ok(data, t->nbytes, &data) ||
                    !axp_add_ok(data, (alignment - data % alignment) % alignment, &data))
                        return axp_errorf(o->err, -EOVERFLOW, "%s: model too large", o->path);
                if (t->fill) {
                        uint64_t rows = MAX(1, FILL_CHUNK_BYTES / t->row_bytes);
                        max_chunk = MAX(max_chunk, MIN(rows, t->n_rows) * t->row_bytes);
                }
        }

        if ((k = put(o, "GGUF", 4)) < 0 || (k = put_u32(o, 3)) < 0 ||
            (k = put_u64(o, w->n_t)) < 0 || (k = put_u64(o, w->n_kv)) < 0)
                return k;
        for (size_t i = 0; i < w->n_kv; i++) {
                const wkv *kv = &w->kv[i];
                if ((k = put_u64(o, kv->key_len)) < 0 || (k = put(o, kv->key, kv->key_len)) < 0 ||
                    (k = put_u32(o, kv->type)) < 0 || (k = put(o, kv->val, kv->val_len)) < 0)
                        return k;
        }
        for (size_t i = 0; i < w->n_t; i++) {
                const wtensor *t = &w->t[i];
                size_t len = strlen(t->name);
                if ((k = put_u64(o, len)) < 0 || (k = put(o, t->name, len)) < 0 ||
                    (k = put_u32(o, t->n_dims)) < 0)
                        return k;
                for (uint32_t d = 0; d < t->n_dims; d++)
                        if ((k = put_u64(o, (uint64_t) t->ne[d])) < 0)
                                return k;
                if ((k = put_u32(o, t->type)) < 0 || (k = put_u64(o, t->offset)) < 0)
                        return k;
        }
        if ((k = pad(o, pos, alignment)) < 0)
                return k;

        if (max_chunk > 0) {
                chunk = malloc(max_chunk);
                if (!chunk)
                        return axp_errorf(o->err, -ENOMEM, "%s: out of memory", o->path);
        }
        for (size_t i = 0; i < w->n_t; i++) {
                const wtensor *t = &w->t[i];
                if (t->data) {
                        if ((k = put(o, t->data, t->nbytes)) < 0)
                                return k;
                } else {
                        uint64_t step = MAX(1, FILL_CHUNK_BYTES / t->row_bytes);
                        for (uint64_t r = 0; r < t->n_rows; r += step) {
                                uint64_t n = MIN(step, t->n_rows - r);
                                if ((k = t->fill(t->userdata, r, n, chunk, o->err)) < 0)
                                        return k;
                                if ((k = put(o, chunk, n * t->row_bytes)) < 0)
                                        return k;
                        }
                }
                if ((k = pad(o, t->nbytes, alignment)) < 0)
                        return k;
        }
        return flush(o);
}

/* An unnamed file in path's folder (O_TMPFILE): a write cut short (Ctrl-C, SIGTERM, a crash)
 * leaves nothing behind. -EOPNOTSUPP where the file system has no unnamed files, or there is
 * no /proc to name one through. */
static int open_unnamed(const char *path) {
        _cleanup_free_ char *dir = strdup(path);
        char *slash;
        int fd;

        if (access("/proc/self/fd", F_OK) < 0)
                return -EOPNOTSUPP;
        if (!dir)
                return -ENOMEM;
        slash = strrchr(dir, '/');
        if (!slash)
                strcpy(dir, ".");
        else if (slash == dir)
                dir[1] = 0;
        else
                *slash = 0;
        fd = open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
        if (fd < 0)
                return errno == EISDIR || errno == EOPNOTSUPP || errno == EINVAL ? -EOPNOTSUPP : -errno;
        return fd;
}

/* Give the unnamed file fd a name beside path (path.tmp-PID-N), in *tmp. */
static int name_unnamed(int fd, const char *path, char **tmp) {
        char proc[64];
        int k;

        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
        for (unsigned i = 0; i < 100; i++) {
                free(*tmp);
                if (asprintf(tmp, "%s.tmp-%ld-%u", path, (long) getpid(), i) < 0) {
                        *tmp = NULL;
                        return -ENOMEM;
                }
                if (linkat(AT_FDCWD, proc, AT_FDCWD, *tmp, AT_SYMLINK_FOLLOW) == 0)
                        return 0;
                if (errno != EEXIST)
                        break;
        }
        k = errno == EEXIST || errno == 0 ? -EEXIST : -errno;
        free(*tmp);
        *tmp = NULL; /* not ours: never unlinked */
        return k;
}

int gguf_writer_write(gguf_writer *w, const char *path, axp_error *err) {
        _cleanup_free_ char *tmp = NULL;
        _cleanup_free_ uint8_t *buf = NULL;
        uint64_t alignment;
        out o = { .fd = -1, .path = path, .err = err };
        bool unnamed;
        struct stat st;
        int k;

        if (w->first_err.code != 0)
                return axp_errorf(err, w->first_err.code, "%s: %s", path, w->first_err.msg);
        k = alignment_of(w, &alignment, err);
        if (k < 0)
                return k;
        /* The file is renamed over path: a device, FIFO or socket there (/dev/null, as root)
         * would be replaced by a regular file rather than written to. */
        if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
                return axp_errorf(err, S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL,
                                  "%s: is %s, not a regular file; give a file's path", path,
                                  S_ISDIR(st.st_mode) ? "a directory" : "a device, FIFO or socket");
        buf = malloc(OUT_BUF_BYTES);
        if (!buf)
                return axp_errorf(err, -ENOMEM, "out of memory");
        o.buf = buf;
        o.fd = open_unnamed(path);
        unnamed = o.fd >= 0;
        if (o.fd == -ENOMEM)
                return axp_errorf(err, -ENOMEM, "out of memory");
        if (!unnamed) {
                if (asprintf(&tmp, "%s.tmp-XXXXXX", path) < 0) {
                        tmp = NULL;
                        return axp_errorf(err, -ENOMEM, "out of memory");
                }
                o.fd = mkostemp(tmp, O_CLOEXEC);
                if (o.fd < 0)
                        return axp_errorf(err, -errno, "%s: cannot create: %s", tmp, strerror(errno));
        }

        k = write_body(w, &o, alignment);
        /* a private file (0600) until now; a model is an ordinary readable file */
        if (k >= 0 && fchmod(o.fd, 0644) < 0)
                k = axp_errorf(err, -errno, "%s: cannot set permissions: %s", path, strerror(errno));
        if (k >= 0 && unnamed && (k = name_unnamed(o.fd, path, &tmp)) < 0)
                k = axp_errorf(err, k, "%s: cannot name the file written: %s", path, strerror(-k));
        if (close(o.fd) < 0 && k >= 0)
                k = axp_errorf(err, -errno, "%s: cannot write: %s", path, strerror(errno));
        if (k >= 0 && rename(tmp, path) < 0)
                k = axp_errorf(err, -errno, "%s: cannot rename the temporary file into place: %s",
                               path, strerror(errno));
        if (k < 0 && tmp)
                unlink(tmp);
        return k < 0 ? k : 0;
}
