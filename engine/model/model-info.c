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

int axp_model_probe_fd(int fd, const char *src, axp_model_info *ret, axp_error *err) {
        _cleanup_(gguf_closep) gguf_file *f = NULL;
        _cleanup_free_ uint8_t *buf = NULL;
        uint64_t have = 0, want;
        struct stat st;
        int r;

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
                nb = realloc(buf, (size_t) want);
                if (!nb)
                        return axp_errorf(err, -ENOMEM, "%s: out of memory for its header", src);
                buf = nb;
                r = read_prefix(fd, src, buf, have, want, err);
                if (r < 0)
                        return r;
                have = want;
                gguf_close(f);
                f = NULL;
                r = gguf_open_prefix(src, buf, (size_t) have, (uint64_t) st.st_size, &f, err);
                if (r != -ENOBUFS)
                        break;
                if (have >= PREFIX_MAX)
                        return axp_errorf(err, -EBADMSG, "%s: the header is larger than %" PRIu64
                                          " MiB; no model we can run has one so large", src, PREFIX_MAX >> 20);
        }
        if (r < 0)
                return r;
        uint32_t no, n;
        if (gguf_split_of(f, &no, &n))
                return axp_errorf(err, -EXDEV,
                                  "%s is part %" PRIu32 " of %" PRIu32 " of a split model, and a model is installed "
                                  "from one file: join the parts first with 'agentxpu quantize FIRST-PART OUT.gguf "
                                  "keep'", src, no + 1, n);
        return probe_checks(f, src, (uint64_t) st.st_size, ret, err);
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
