/* SPDX-License-Identifier: MIT */
/* GGUF v2/v3 reader (over mmap) and writer.
 *
 * The reader validates every count, offset, size, alignment and type before anything is
 * exposed: a hostile or truncated file gives a clear error, never an out-of-bounds read.
 * Strings returned by the reader point into the mapping and are NOT NUL-terminated. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/util.h"

enum gguf_type {
        GGUF_TYPE_UINT8 = 0,
        GGUF_TYPE_INT8 = 1,
        GGUF_TYPE_UINT16 = 2,
        GGUF_TYPE_INT16 = 3,
        GGUF_TYPE_UINT32 = 4,
        GGUF_TYPE_INT32 = 5,
        GGUF_TYPE_FLOAT32 = 6,
        GGUF_TYPE_BOOL = 7,
        GGUF_TYPE_STRING = 8,
        GGUF_TYPE_ARRAY = 9,
        GGUF_TYPE_UINT64 = 10,
        GGUF_TYPE_INT64 = 11,
        GGUF_TYPE_FLOAT64 = 12,
        GGUF_TYPE__COUNT,
};

#define GGUF_MAX_DIMS 4
#define GGUF_DEFAULT_ALIGNMENT 32
/* The least general.alignment read or written: the GGUF specification asks for a multiple of
 * 8, and below it the blocks' scales (and F32 weights) would sit at unaligned addresses. */
#define GGUF_MIN_ALIGNMENT 8
/* What is wrong with an alignment, as the rest of a sentence that starts with it (NULL: nothing),
 * for the reader and the writer alike */
static inline const char *gguf_alignment_problem(uint64_t a) {
        if (a == 0 || (a & (a - 1)) != 0)
                return "is not a nonzero power of two";
        if (a < GGUF_MIN_ALIGNMENT)
                return "is below 8, the least the GGUF specification allows (the tensors' data would sit "
                       "unaligned)";
        return NULL;
}

typedef struct gguf_str {
        const char *ptr; /* into the mapping, not NUL-terminated */
        uint64_t len;
} gguf_str;

typedef struct gguf_kv {
        gguf_str key;
        enum gguf_type type;
        /* scalars (integers widened; bool as 0/1) */
        union {
                uint64_t u64;
                int64_t i64;
                double f64;
                gguf_str str;
        } v;
        /* arrays (type == GGUF_TYPE_ARRAY) */
        enum gguf_type arr_type;
        uint64_t arr_n;
        const void *arr_data; /* element data for non-string arrays, little-endian and NOT
                               * aligned: read elements with memcpy or gguf_arr_i32/_f32 */
        gguf_str *arr_str;    /* index of the strings for string arrays (owned) */
} gguf_kv;

typedef struct gguf_tensor {
        gguf_str name;
        uint32_t n_dims;
        int64_t ne[GGUF_MAX_DIMS]; /* ne[0] is the row length; unused dims are 1 */
        uint32_t type;             /* ggml type id, see types.h */
        uint64_t offset;           /* relative to the data section (of its part's file) */
        const void *data;          /* validated: [data, data + nbytes) is inside the file */
        uint64_t nbytes;
        uint32_t part;             /* the part of a split model whose file holds it (0-based) */
} gguf_tensor;

/* One file of a model: the whole model, or one part of a split one */
typedef struct gguf_part {
        const void *map;
        size_t size;
        uint64_t data_offset; /* where its tensors' offsets count from */
} gguf_part;

typedef struct gguf_file {
        void *map;
        size_t size;
        bool owns_map; /* false for gguf_open_buffer */
        uint32_t version;
        uint64_t n_kv;
        gguf_kv *kv;
        uint64_t n_tensors;
        gguf_tensor *tensors;   /* a split model's: every part's (gguf_open) */
        uint64_t alignment;
        uint64_t data_offset;
        /* The files the tensors lie in: parts[0] is this one (map, size); a split model opened
         * by gguf_open has one a part, parts[i] its part i + 1 */
        uint32_t n_parts;
        gguf_part *parts;
        uint64_t total_size; /* the bytes of every part */
} gguf_file;

/* A split model is several GGUF files, as llama.cpp's gguf-split writes them and Hugging Face
 * repositories carry large models: PREFIX-00001-of-0000N.gguf holds the metadata (and maybe
 * tensors), every part split.no (0-based) and split.count, and the first split.tensors.count. */
#define GGUF_SPLIT_MAX 9999
/* Whether the `len` characters at s end in a part's number as llama.cpp names parts
 * ("-00002-of-00003", before ".gguf") after a name: the number as written (1-based) of
 * *count, and *prefix, the name's length */
bool gguf_split_suffix(const char *s, size_t len, size_t *prefix, uint32_t *number, uint32_t *count);
/* The name of part i (0-based) of a split model of n parts whose part `from` is at `path`
 * (PREFIX-%05d-of-%05d.gguf, llama.cpp's names), newly allocated; NULL where path is not named
 * so (or out of memory). */
char *gguf_part_path(const char *path, uint32_t from, uint32_t i, uint32_t n);
/* Whether a key is one of the split keys (split.no, split.count, split.tensors.count): a
 * part's place, which a model written whole leaves out */
bool gguf_split_key(gguf_str key);
/* Whether f (one file, whichever way it was opened) is a part of a split model: its 0-based
 * number and the count of parts. false for a whole model (no split.count, or one of 1). */
bool gguf_split_of(const gguf_file *f, uint32_t *no, uint32_t *count);

/* A split model from its parts opened some other way (gguf_open_prefix of each, say): first,
 * its part 1, takes the others (more[i] is part i + 2 of n; names[i] its name for messages,
 * or NULL) and owns them from then on, also on failure (close first alone). The checks
 * gguf_open makes: each part's split.no and split.count, split.tensors.count, no tensor in
 * two parts. */
int gguf_join(gguf_file *first, gguf_file **more, uint32_t n, const char *src, const char *const *names,
              axp_error *err);

/* Open and validate a GGUF file. On failure returns a negative errno and a one-line message.
 * The first part of a split model brings in the others, found by their names beside it, and
 * checked as it is: the result holds every part's tensors. Any other part is refused, with
 * the first part's name. */
int gguf_open(const char *path, gguf_file **ret, axp_error *err);
/* Same over a caller-owned buffer (fuzzing, tests). The buffer must outlive the result. */
int gguf_open_buffer(const void *data, size_t size, gguf_file **ret, axp_error *err);
/* Only the header, from the first `size` bytes of a file of `file_size` bytes (read with
 * pread, say): the same checks, each tensor's extent against `file_size`, and the tensors'
 * `data` NULL. -ENOBUFS: the header goes on past `size`; read more. The buffer must outlive
 * the result. */
int gguf_open_prefix(const char *src, const void *data, size_t size, uint64_t file_size,
                     gguf_file **ret, axp_error *err);
void gguf_close(gguf_file *f);
static inline void gguf_closep(gguf_file **f) {
        gguf_close(*f);
}

const gguf_kv *gguf_find(const gguf_file *f, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);
/* Elements of every tensor: a model's parameter count (the reader bounded each product by
 * the file). */
uint64_t gguf_n_elements(const gguf_file *f);
bool gguf_str_eq(gguf_str s, const char *c);
/* Copy into a freshly allocated NUL-terminated string (NULL on OOM). */
char *gguf_str_dup(gguf_str s);

/* Typed getters: return false if the key is missing or of an incompatible type (integers
 * convert between widths when the value fits). */
bool gguf_get_u32(const gguf_file *f, const char *key, uint32_t *ret);
bool gguf_get_i32(const gguf_file *f, const char *key, int32_t *ret);
bool gguf_get_f32(const gguf_file *f, const char *key, float *ret);
bool gguf_get_bool(const gguf_file *f, const char *key, bool *ret);
bool gguf_get_str(const gguf_file *f, const char *key, gguf_str *ret);
/* Array accessor: returns the kv if it is an array of `type` (any integer type for
 * GGUF_TYPE_INT32 requests is NOT converted: exact match only). */
const gguf_kv *gguf_get_arr(const gguf_file *f, const char *key, enum gguf_type type);

/* Element i of an INT32 / FLOAT32 array (the caller checked arr_type and i < arr_n). */
static inline int32_t gguf_arr_i32(const gguf_kv *kv, uint64_t i) {
        int32_t v;
        memcpy(&v, (const char *) kv->arr_data + i * 4, 4);
        return v;
}
static inline float gguf_arr_f32(const gguf_kv *kv, uint64_t i) {
        float v;
        memcpy(&v, (const char *) kv->arr_data + i * 4, 4);
        return v;
}

/* "uint32", "string", "array", ... ("unknown" past the enum). */
const char *gguf_type_name(enum gguf_type t);

/* A string from the file, made printable (other bytes as \xNN) and cut to fit a one-line
 * message, in buf; GGUF_SHOW(s) with a buffer of its own, for a message's arguments. */
const char *gguf_show(gguf_str s, char *buf, size_t bufsz);
#define GGUF_SHOW(s) gguf_show((s), (char[72]) { 0 }, 72)
/* Bytes of one value of a fixed-size type; 0 for string, array and unknown types. */
size_t gguf_type_size(enum gguf_type t);

/* Writer ------------------------------------------------------------------------------ *
 * Writes GGUF v3 as llama.cpp expects it: tensors laid out in the order added, each at an
 * offset padded to the alignment (general.alignment if set as a uint32, else 32). Setting
 * a key again replaces its value. Setters return a negative errno; the first failure is
 * also remembered and reported (with a message) by gguf_writer_write. The file appears
 * atomically: written to a temporary file beside it, then renamed. */

typedef struct gguf_writer gguf_writer;

gguf_writer *gguf_writer_new(void);
void gguf_writer_free(gguf_writer *w);
int gguf_writer_set_u16(gguf_writer *w, const char *key, uint16_t v);
int gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v);
int gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v);
int gguf_writer_set_f32(gguf_writer *w, const char *key, float v);
int gguf_writer_set_bool(gguf_writer *w, const char *key, bool v);
int gguf_writer_set_str(gguf_writer *w, const char *key, const char *v);
/* Copy a kv (scalar or array) from an open file, e.g. the tokenizer of another model. */
int gguf_writer_copy_kv(gguf_writer *w, const gguf_kv *kv);
/* Add a tensor; `data` (nbytes, already in the tensor's type) is copied. */
int gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                           const int64_t *ne, const void *data, uint64_t nbytes);
/* Arrays: `n` little-endian elements of a fixed-size `type`, or `n` NUL-terminated strings. */
int gguf_writer_set_arr(gguf_writer *w, const char *key, enum gguf_type type, const void *data,
                        uint64_t n);
int gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *v, uint64_t n);

/* Produces rows [row, row + n_rows) of a tensor (a row is ne[0] elements in the tensor's
 * type; rows count over ne[1..3]) into dst. Returns 0 or a negative errno with `err` set. */
typedef int (*gguf_fill_fn)(void *userdata, uint64_t row, uint64_t n_rows, void *dst,
                            axp_error *err);
/* Add a tensor whose data is produced while the file is written, a bounded number of rows
 * at a time, so a large model never sits in memory whole. `userdata` must stay valid until
 * gguf_writer_write returns. */
int gguf_writer_add_tensor_fill(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                                const int64_t *ne, gguf_fill_fn fill, void *userdata);
int gguf_writer_write(gguf_writer *w, const char *path, axp_error *err);
