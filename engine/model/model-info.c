/* SPDX-License-Identifier: MIT */
#include "model-info.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chat.h"
#include "gguf.h"
#include "model.h"
#include "kernels/types.h"

_Static_assert(AXP_MODEL_PARTS_MAX == GGUF_SPLIT_MAX, "one bound on a split model's parts");

/* The header is read in growing prefixes: most models' headers (the vocabulary is the bulk)
 * fit in the first, and none we can run needs more than the last. */
#define PREFIX_FIRST (UINT64_C(8) << 20)
#define PREFIX_MAX (UINT64_C(512) << 20)

static int read_prefix(int fd, const char *src, uint8_t *buf, uint64_t from, uint64_t to,
                       axp_error *err) {
        while (from < to) {
                ssize_t n = pread(fd, buf + from, (size_t) (to - from), (off_t) from);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return axp_errorf(err, -errno, "%s: cannot read: %s", src, strerror(errno));
                if (n == 0)
                        return axp_errorf(err, -EBADMSG, "%s: the file ended at %" PRIu64
                                          " bytes while it was read (it is changing?)", src, from);
                from += (uint64_t) n;
        }
        return 0;
}

/* The header's types, tallied. */
static void describe_types(const gguf_file *f, axp_model_info *info) {
        uint64_t count[64] = {};
        size_t o = 0;

        for (uint64_t i = 0; i < f->n_tensors; i++)
                if (f->tensors[i].type < 64)
                        count[f->tensors[i].type]++;
        info->types[0] = 0;
        for (;;) {
                uint32_t best = 64;
                for (uint32_t t = 0; t < 64; t++)
                        if (count[t] && (best == 64 || count[t] > count[best]))
                                best = t;
                if (best == 64)
                        break;
                int n = snprintf(info->types + o, sizeof(info->types) - o, "%s%s %" PRIu64, o ? ", " : "",
                                 axp_type_traits_get(best)->name, count[best]);
                if (n < 0 || (size_t) n >= sizeof(info->types) - o) {
                        info->types[o] = 0;
                        break;
                }
                o += (size_t) n;
                count[best] = 0;
        }
}

static void copy_str(char *dst, size_t cap, gguf_str s) {
        size_t n = s.len < cap - 1 ? (size_t) s.len : cap - 1;

        /* cut at a character boundary: never leave half of a UTF-8 sequence */
        if (n < s.len)
                while (n > 0 && ((unsigned char) s.ptr[n] & 0xc0) == 0x80)
                        n--;
        memcpy(dst, s.ptr, n);
        dst[n] = 0;
}

static int probe_checks(const gguf_file *f, const char *src, uint64_t size, axp_model_info *ret,
                        axp_error *err);

/* The header of the file open at fd, from prefixes of it read with pread into *buf (which
 * the result refers to: free it after closing the result) */
static int read_header(int fd, const char *src, uint8_t **buf, gguf_file **ret, axp_error *err) {
        gguf_file *f = NULL;
        uint64_t have = 0, want;
        struct stat st;
        int r;

        *buf = NULL;
        if (fstat(fd, &st) < 0)
                return axp_errorf(err, -errno, "%s: cannot stat: %s", src, strerror(errno));
        if (!S_ISREG(st.st_mode))
                return axp_errorf(err, -EINVAL, "%s: not a regular file", src);
        if (st.st_size < 4)
                return axp_errorf(err, -EBADMSG, "%s: not a GGUF file (%s)", src,
                                  st.st_size ? "too short" : "empty");

        for (want = PREFIX_FIRST;; want *= 2) {
                uint8_t *nb;
                if (want > (uint64_t) st.st_size)
                        want = (uint64_t) st.st_size;
                nb = realloc(*buf, (size_t) want);
                if (!nb) {
                        r = axp_errorf(err, -ENOMEM, "%s: out of memory for its header", src);
                        break;
                }
                *buf = nb;
                r = read_prefix(fd, src, *buf, have, want, err);
                if (r < 0)
                        break;
                have = want;
                gguf_close(f);
                f = NULL;
                r = gguf_open_prefix(src, *buf, (size_t) have, (uint64_t) st.st_size, &f, err);
                if (r != -ENOBUFS)
                        break;
                if (have >= PREFIX_MAX) {
                        r = axp_errorf(err, -EBADMSG, "%s: the header is larger than %" PRIu64
                                       " MiB; no model we can run has one so large", src, PREFIX_MAX >> 20);
                        break;
                }
        }
        if (r < 0) {
                gguf_close(f);
                free(*buf);
                *buf = NULL;
                return r;
        }
        *ret = f;
        return 0;
}

int axp_model_probe_fd(int fd, const char *src, axp_model_info *ret, axp_error *err) {
        _cleanup_(gguf_closep) gguf_file *f = NULL;
        _cleanup_free_ uint8_t *buf = NULL;
        uint32_t no, n;
        int r = read_header(fd, src, &buf, &f, err);

        if (r < 0)
                return r;
        if (gguf_split_of(f, &no, &n))
                return axp_errorf(err, -EXDEV,
                                  "%s is part %" PRIu32 " of %" PRIu32 " of a split model: it is installed from its "
                                  "first part with the others beside it ('agentxpu model install FIRST-PART')",
                                  src, no + 1, n);
        return probe_checks(f, src, f->total_size, ret, err);
}

int axp_model_split_fd(int fd, const char *src, uint32_t *no, uint32_t *count, axp_error *err) {
        _cleanup_(gguf_closep) gguf_file *f = NULL;
        _cleanup_free_ uint8_t *buf = NULL;
        int r = read_header(fd, src, &buf, &f, err);

        if (r < 0)
                return r;
        if (!gguf_split_of(f, no, count)) {
                *no = 0;
                *count = 1;
        } else if (*count > GGUF_SPLIT_MAX || *no >= *count)
                return axp_errorf(err, -EBADMSG, "%s: split.no %" PRIu32 " and split.count %" PRIu32
                                  " do not name a part of a split model (at most %d parts)", src, *no, *count,
                                  GGUF_SPLIT_MAX);
        return 0;
}

/* axp_model_probe_fds; with ret_file, the joined header on success (its tensors' data NULL:
 * they are read from the files at gguf_part.data_offset + offset) and the n buffers it refers
 * to: close the one, then free each of the others and their array */
static int probe_parts(const int *fds, uint32_t n, const char *src, axp_model_info *ret, gguf_file **ret_file,
                       uint8_t ***ret_bufs, axp_error *err) {
        uint8_t **bufs = calloc(n, sizeof(*bufs));
        gguf_file **more = calloc(MAX(n, 2) - 1, sizeof(*more));
        gguf_file *first = NULL;
        uint32_t no = 0, count = 0;
        int r = 0;

        if (!bufs || !more)
                r = axp_errorf(err, -ENOMEM, "%s: out of memory", src);
        for (uint32_t i = 0; i < n && r == 0; i++) {
                gguf_file *f = NULL;
                char part[256];
                snprintf(part, sizeof(part), "%s (part %" PRIu32 " of %" PRIu32 ")", src, i + 1, n);
                r = read_header(fds[i], i ? part : src, &bufs[i], &f, err);
                if (r < 0)
                        break;
                if (i == 0)
                        first = f;
                else
                        more[i - 1] = f;
        }
        if (r == 0 && (!gguf_split_of(first, &no, &count) || no != 0 || count != n)) {
                r = axp_errorf(err, -EINVAL, "%s: given as part 1 of a split model of %" PRIu32 " parts, but its "
                               "split.no and split.count say %s", src, n,
                               gguf_find(first, "split.count") ? "otherwise" : "it is a whole model");
        }
        if (r == 0)
                r = gguf_join(first, more, n, src, NULL, err);
        else if (more)
                for (uint32_t i = 0; i + 1 < n; i++)
                        gguf_close(more[i]);
        free(more);
        if (r == 0)
                r = probe_checks(first, src, first->total_size, ret, err);
        if (r < 0 || !ret_file) {
                gguf_close(first);
                first = NULL;
                for (uint32_t i = 0; bufs && i < n; i++)
                        free(bufs[i]);
                free(bufs);
                bufs = NULL;
        }
        if (ret_file) {
                *ret_file = first;
                *ret_bufs = bufs;
        }
        return r;
}

int axp_model_probe_path(const char *path, axp_model_info *ret, axp_error *err) {
        _cleanup_(gguf_closep) gguf_file *f = NULL;
        int r = gguf_open(path, &f, err);

        if (r < 0)
                return r;
        return probe_checks(f, path, f->total_size, ret, err);
}

/* The checks of an open header (of every part of a split model) */
static int probe_checks(const gguf_file *f, const char *src, uint64_t size, axp_model_info *ret,
                        axp_error *err) {
        gguf_str arch, name;

        if (f->n_tensors == 0)
                return axp_errorf(err, -EBADMSG, "%s holds %s (no tensors); the engine needs a model with weights",
                                  src, gguf_find(f, "tokenizer.ggml.model") ? "a vocabulary only" : "no model");
        if (!gguf_get_str(f, "general.architecture", &arch))
                return axp_errorf(err, -EBADMSG, "%s: metadata 'general.architecture' is missing", src);
        if (axp_arch_from_gguf(arch) < 0) {
                char list[AXP_ARCH_LIST_MAX];
                return axp_errorf(err, -ENOTSUP, "%s: architecture '%s' is not one the engine runs (%s)",
                                  src, GGUF_SHOW(arch), axp_arch_list(list, sizeof(list)));
        }

        *ret = (axp_model_info) { .size = size, .parts = f->n_parts };
        for (uint64_t i = 0; i < f->n_tensors; i++) {
                const gguf_tensor *t = &f->tensors[i];
                const axp_type_traits *tt = axp_type_traits_get(t->type);

                if (!tt || !tt->supported)
                        return axp_errorf(err, -ENOTSUP,
                                          "%s: tensor '%s' has type %s, which the engine cannot compute with "
                                          "(supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, "
                                          "IQ4_XS, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)",
                                          src, GGUF_SHOW(t->name), tt ? tt->name : "unknown");
        }
        ret->parameters = gguf_n_elements(f);
        copy_str(ret->arch, sizeof(ret->arch), arch);
        if (gguf_get_str(f, "general.name", &name))
                copy_str(ret->name, sizeof(ret->name), name);
        describe_types(f, ret);
        gguf_str tmpl;
        if (gguf_get_str(f, "tokenizer.chat_template", &tmpl) && tmpl.len > 0) {
                _cleanup_free_ char *t = strndup(tmpl.ptr, (size_t) tmpl.len);
                if (!t)
                        return axp_errorf(err, -ENOMEM, "%s: out of memory for its header", src);
                snprintf(ret->chat_template, sizeof(ret->chat_template), "%s",
                         axp_chat_template_unknown(t) ? "unrecognised"
                                                      : axp_chat_family_name(axp_chat_detect(t, NULL)));
        }
        return 0;
}

int axp_model_check_file(const char *path, axp_error *err) {
        axp_model *m = NULL;
        int r = axp_model_load(path, &m, err);

        axp_model_free(m);
        return r;
}

/* Joining a split model's parts: each tensor read from its part's file as the writer asks */
typedef struct join_src {
        const gguf_file *f;
        const gguf_tensor *t;
        const int *fds;
        bool (*progress)(void *userdata, uint64_t bytes);
        void *userdata;
} join_src;

#define JOIN_CHUNK (4u << 20)

static int join_fill(void *userdata, uint64_t row, uint64_t n_rows, void *dst, axp_error *err) {
        const join_src *src = userdata;
        const gguf_tensor *t = src->t;
        uint64_t row_bytes = axp_type_row_size(t->type, t->ne[0]);
        uint64_t off = src->f->parts[t->part].data_offset + t->offset + row * row_bytes, n = n_rows * row_bytes;

        for (uint64_t done = 0; done < n;) {
                ssize_t k = pread(src->fds[t->part], (uint8_t *) dst + done, (size_t) MIN(n - done, (uint64_t) JOIN_CHUNK),
                                  (off_t) (off + done));
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0)
                        return axp_errorf(err, -errno, "cannot read part %" PRIu32 " of the model: %s", t->part + 1,
                                          strerror(errno));
                if (k == 0)
                        return axp_errorf(err, -EBADMSG, "part %" PRIu32 " of the model became shorter while it was "
                                          "read", t->part + 1);
                done += (uint64_t) k;
                if (src->progress && !src->progress(src->userdata, (uint64_t) k))
                        return axp_errorf(err, -ECANCELED, "cancelled");
        }
        return 0;
}

int axp_model_probe_fds(const int *fds, uint32_t n, const char *src, axp_model_info *ret, axp_error *err) {
        return probe_parts(fds, n, src, ret, NULL, NULL, err);
}

int axp_model_join_fds(const int *fds, uint32_t n, const char *path, bool (*progress)(void *userdata, uint64_t bytes),
                       void *userdata, axp_error *err) {
        gguf_file *f = NULL;
        uint8_t **bufs = NULL;
        axp_model_info info;
        int r = probe_parts(fds, n, path, &info, &f, &bufs, err);

        if (r < 0)
                return r;
        join_src *srcs = calloc(MAX(f->n_tensors, 1), sizeof(*srcs));
        gguf_writer *w = gguf_writer_new();
        if (!srcs || !w)
                r = axp_errorf(err, -ENOMEM, "out of memory");
        for (uint64_t i = 0; r == 0 && i < f->n_kv; i++) {
                const gguf_kv *kv = &f->kv[i];
                if (!gguf_split_key(kv->key))
                        gguf_writer_copy_kv(w, kv);
        }
        for (uint64_t i = 0; r == 0 && i < f->n_tensors; i++) {
                const gguf_tensor *t = &f->tensors[i];
                char *name = gguf_str_dup(t->name);
                srcs[i] = (join_src) { .f = f, .t = t, .fds = fds, .progress = progress, .userdata = userdata };
                r = name ? gguf_writer_add_tensor_fill(w, name, t->type, t->n_dims, t->ne, join_fill, &srcs[i])
                         : axp_errorf(err, -ENOMEM, "out of memory");
                free(name);
        }
        if (r == 0)
                r = gguf_writer_write(w, path, err);
        gguf_writer_free(w);
        free(srcs);
        gguf_close(f);
        for (uint32_t i = 0; i < n; i++)
                free(bufs[i]);
        free(bufs);
        return r;
}
