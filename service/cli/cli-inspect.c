/* SPDX-License-Identifier: MIT */
/* agentxpu inspect: dump a GGUF file's header (version, key/values, tensors) and say whether
 * the engine runs it and why not, or say in one line why the file cannot be read. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/utf8.h"
#include "base/util.h"
#include "cli.h"
#include "model/gguf.h"
#include "model/model-info.h"
#include "kernels/types.h"

#define ARRAY_PREVIEW 5
#define TEXT_PREVIEW 120

static int help(FILE *f) {
        fprintf(f,
                "usage: agentxpu inspect -m FILE [--json]\n"
                "\n"
                "Print a GGUF file's version, key/values (arrays summarized: element type, count,\n"
                "first items) and tensors (name, type, shape, offset), and whether the engine runs\n"
                "it: \"runs: ARCH, N parameters, types TYPE COUNT, ...\" or \"does not run: REASON\"\n"
                "(the checks installing a model makes, then a load as the engine would).\n"
                "\n"
                "Exit status 0 for a file that is read, whether or not it runs; 1 for a file that\n"
                "cannot be read as GGUF (truncated, corrupt, not GGUF), with a one-line reason\n"
                "on stderr (with --json, also as the verdict); 2 for a usage error.\n"
                "\n"
                "  -m, --model FILE   the GGUF file\n"
                "  --json             print JSON instead of text\n");
        return f == stderr ? 2 : 0;
}

/* A string as text: control bytes escaped (C0, DEL, and C1 as the UTF-8 bytes C2 80..C2 9F,
 * which a terminal may obey as CSI, OSC ...), long values cut (with their length noted);
 * names (keys, tensors) are printed without quotes. */
static void print_text_q(gguf_str s, size_t max, bool quote) {
        size_t n = MIN(s.len, max);
        if (quote)
                putchar('"');
        for (size_t i = 0; i < n; i++) {
                unsigned char c = (unsigned char) s.ptr[i];
                if (c == '\n')
                        fputs("\\n", stdout);
                else if (c == '\t')
                        fputs("\\t", stdout);
                else if ((c == '"' && quote) || c == '\\')
                        printf("\\%c", c);
                else if (c < 0x20 || c == 0x7f || (c == ' ' && !quote))
                        printf("\\x%02x", c);
                else if (c == 0xc2 && i + 1 < s.len && (unsigned char) s.ptr[i + 1] >= 0x80 &&
                         (unsigned char) s.ptr[i + 1] <= 0x9f) {
                        printf("\\x%02x\\x%02x", c, (unsigned char) s.ptr[i + 1]);
                        i++;
                } else
                        putchar(c);
        }
        if (quote)
                putchar('"');
        if (s.len > max)
                printf("... (%" PRIu64 " bytes)", s.len);
}

static void print_text(gguf_str s, size_t max) {
        print_text_q(s, max, true);
}

static void print_json_str(gguf_str s) {
        axp_json_string(stdout, s.ptr, s.len);
}

static void print_json_cstr(const char *s) {
        print_json_str((gguf_str) { s, strlen(s) });
}

/* One scalar element of type t at p (little-endian), as a number or true/false. */
static void print_elem(enum gguf_type t, const uint8_t *p, bool json) {
        switch (t) {
        case GGUF_TYPE_UINT8:
                printf("%u", p[0]);
                break;
        case GGUF_TYPE_INT8:
                printf("%d", (int8_t) p[0]);
                break;
        case GGUF_TYPE_BOOL:
                fputs(p[0] ? "true" : "false", stdout);
                break;
        case GGUF_TYPE_UINT16: {
                uint16_t v;
                memcpy(&v, p, 2);
                printf("%u", v);
                break;
        }
        case GGUF_TYPE_INT16: {
                int16_t v;
                memcpy(&v, p, 2);
                printf("%d", v);
                break;
        }
        case GGUF_TYPE_UINT32: {
                uint32_t v;
                memcpy(&v, p, 4);
                printf("%" PRIu32, v);
                break;
        }
        case GGUF_TYPE_INT32: {
                int32_t v;
                memcpy(&v, p, 4);
                printf("%" PRId32, v);
                break;
        }
        case GGUF_TYPE_UINT64: {
                uint64_t v;
                memcpy(&v, p, 8);
                printf("%" PRIu64, v);
                break;
        }
        case GGUF_TYPE_INT64: {
                int64_t v;
                memcpy(&v, p, 8);
                printf("%" PRId64, v);
                break;
        }
        case GGUF_TYPE_FLOAT32:
        case GGUF_TYPE_FLOAT64: {
                double v;
                if (t == GGUF_TYPE_FLOAT32) {
                        float f;
                        memcpy(&f, p, 4);
                        v = f;
                } else {
                        memcpy(&v, p, 8);
                }
                if (json && (v != v || v - v != 0))
                        fputs("null", stdout); /* JSON has no nan/inf */
                else
                        printf("%.9g", v);
                break;
        }
        default:
                fputs(json ? "null" : "?", stdout);
        }
}

/* Scalars are re-encoded from the widened value so both paths print the same way. */
static void print_scalar(const gguf_kv *kv, bool json) {
        uint8_t buf[8];
        if (kv->type == GGUF_TYPE_STRING) {
                if (json)
                        print_json_str(kv->v.str);
                else
                        print_text(kv->v.str, TEXT_PREVIEW);
                return;
        }
        if (kv->type == GGUF_TYPE_FLOAT32) {
                float f = (float) kv->v.f64;
                memcpy(buf, &f, 4);
        } else {
                memcpy(buf, &kv->v.u64, 8);
        }
        print_elem(kv->type, buf, json);
}

static void print_array_items(const gguf_kv *kv, bool json) {
        uint64_t n = MIN(kv->arr_n, (uint64_t) ARRAY_PREVIEW);
        size_t es = gguf_type_size(kv->arr_type);
        for (uint64_t i = 0; i < n; i++) {
                if (i)
                        fputs(", ", stdout);
                if (kv->arr_type == GGUF_TYPE_STRING) {
                        if (json)
                                print_json_str(kv->arr_str[i]);
                        else
                                print_text(kv->arr_str[i], 40);
                } else {
                        print_elem(kv->arr_type, (const uint8_t *) kv->arr_data + i * es, json);
                }
        }
}

static void print_shape(const gguf_tensor *t) {
        putchar('[');
        for (uint32_t d = 0; d < t->n_dims; d++)
                printf("%s%" PRId64, d ? ", " : "", t->ne[d]);
        putchar(']');
}

static const char *tensor_type_name(uint32_t type) {
        const axp_type_traits *tr = axp_type_traits_get(type);
        return tr ? tr->name : "?";
}

/* Whether the engine runs the file at `path`: the header checks that installing a model makes,
 * then a load as the engine would. 0, or a negative errno with the one-line reason. */
static int verdict(const char *path, axp_model_info *info, axp_error *err) {
        int r = axp_model_probe_path(path, info, err);

        if (r < 0)
                return r;
        return axp_model_check_file(path, err);
}

static void print_text_verdict(int r, const axp_model_info *info, const axp_error *err) {
        if (r < 0) {
                printf("does not run: %s\n", err->msg);
                return;
        }
        printf("runs: %s, %" PRIu64 " parameters, types %s", info->arch, info->parameters, info->types);
        if (info->parts > 1)
                printf(" (a split model of %" PRIu32 " parts)", info->parts);
        putchar('\n');
}

static void print_json_verdict(int r, const axp_model_info *info, const axp_error *err) {
        fputs("\"verdict\": {\"runs\": ", stdout);
        if (r < 0) {
                fputs("false, \"reason\": ", stdout);
                print_json_cstr(err->msg);
        } else {
                fputs("true, \"architecture\": ", stdout);
                print_json_cstr(info->arch);
                printf(", \"parameters\": %" PRIu64 ", \"parts\": %" PRIu32 ", \"types\": ", info->parameters,
                       info->parts);
                print_json_cstr(info->types);
        }
        putchar('}');
}

static void print_text_dump(const char *path, const gguf_file *f, int r, const axp_model_info *info,
                            const axp_error *err) {
        uint64_t tensor_bytes = 0;
        for (uint64_t i = 0; i < f->n_tensors; i++)
                tensor_bytes += f->tensors[i].nbytes;
        printf("%s: GGUF version %" PRIu32 ", %zu bytes, %" PRIu64 " key/values, %" PRIu64
               " tensors (%" PRIu64 " bytes of data at offset %" PRIu64 ", alignment %" PRIu64 ")\n",
               path, f->version, f->size, f->n_kv, f->n_tensors, tensor_bytes, f->data_offset,
               f->alignment);
        if (f->n_parts > 1)
                printf("a split model of %" PRIu32 " parts, %" PRIu64 " bytes in all; its tensors name the part "
                       "that holds them\n", f->n_parts, f->total_size);
        print_text_verdict(r, info, err);
        printf("\nkey/values:\n");
        for (uint64_t i = 0; i < f->n_kv; i++) {
                const gguf_kv *kv = &f->kv[i];
                putchar(' ');
                putchar(' ');
                print_text_q(kv->key, 80, false);
                if (kv->type == GGUF_TYPE_ARRAY) {
                        printf(" = array of %" PRIu64 " %s: [", kv->arr_n, gguf_type_name(kv->arr_type));
                        print_array_items(kv, false);
                        printf("%s]\n", kv->arr_n > ARRAY_PREVIEW ? ", ..." : "");
                } else {
                        printf(" = %s ", gguf_type_name(kv->type));
                        print_scalar(kv, false);
                        putchar('\n');
                }
        }
        printf("\ntensors:\n");
        for (uint64_t i = 0; i < f->n_tensors; i++) {
                const gguf_tensor *t = &f->tensors[i];
                putchar(' ');
                putchar(' ');
                print_text_q(t->name, 80, false);
                printf(" %s ", tensor_type_name(t->type));
                print_shape(t);
                if (f->n_parts > 1)
                        printf(" part %" PRIu32, t->part + 1);
                printf(" offset %" PRIu64 " (%" PRIu64 " bytes)\n", t->offset, t->nbytes);
        }
}

static void print_json_dump(const char *path, const gguf_file *f, int r, const axp_model_info *info,
                            const axp_error *err) {
        fputs("{\"file\": ", stdout);
        print_json_cstr(path);
        fputs(", ", stdout);
        print_json_verdict(r, info, err);
        printf(",\n \"version\": %" PRIu32 ", \"size\": %zu, \"parts\": %" PRIu32 ", \"total_size\": %" PRIu64
               ", \"alignment\": %" PRIu64 ", \"data_offset\": %" PRIu64 ",\n \"kv\": [",
               f->version, f->size, f->n_parts, f->total_size, f->alignment, f->data_offset);
        for (uint64_t i = 0; i < f->n_kv; i++) {
                const gguf_kv *kv = &f->kv[i];
                fputs(i ? ",\n  {\"key\": " : "\n  {\"key\": ", stdout);
                print_json_str(kv->key);
                if (kv->type == GGUF_TYPE_ARRAY) {
                        printf(", \"type\": \"array\", \"element_type\": \"%s\", \"count\": %" PRIu64
                               ", \"first\": [",
                               gguf_type_name(kv->arr_type), kv->arr_n);
                        print_array_items(kv, true);
                        fputs("]}", stdout);
                } else {
                        printf(", \"type\": \"%s\", \"value\": ", gguf_type_name(kv->type));
                        print_scalar(kv, true);
                        putchar('}');
                }
        }
        fputs("],\n \"tensors\": [", stdout);
        for (uint64_t i = 0; i < f->n_tensors; i++) {
                const gguf_tensor *t = &f->tensors[i];
                fputs(i ? ",\n  {\"name\": " : "\n  {\"name\": ", stdout);
                print_json_str(t->name);
                printf(", \"type\": \"%s\", \"shape\": ", tensor_type_name(t->type));
                print_shape(t);
                printf(", \"part\": %" PRIu32 ", \"offset\": %" PRIu64 ", \"bytes\": %" PRIu64 "}", t->part + 1,
                       t->offset, t->nbytes);
        }
        fputs("]}\n", stdout);
}

int cli_inspect(int argc, char **argv) {
        static const struct option opts[] = {
                { "model", required_argument, NULL, 'm' },
                { "json", no_argument, NULL, 'j' },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        const char *path = NULL;
        bool json = false;
        gguf_file *f;
        axp_model_info info = { 0 };
        axp_error err = { 0 }, why = { 0 };
        int c, r;

        optind = 1;
        while ((c = cli_getopt(argc, argv, "m:h", opts)) >= 0) {
                switch (c) {
                case 'm':
                        path = optarg;
                        break;
                case 'j':
                        json = true;
                        break;
                case 'h':
                        return help(stdout);
                default:
                        return 2;
                }
        }
        if (optind < argc)
                return cli_usage_error("unexpected argument '%s'", argv[optind]);
        if (!path)
                return cli_usage_error("no file given (-m FILE)");
        if (gguf_open(path, &f, &err) < 0) {
                if (json) {
                        fputs("{\"file\": ", stdout);
                        print_json_cstr(path);
                        fputs(", ", stdout);
                        print_json_verdict(-EBADMSG, NULL, &err);
                        fputs("}\n", stdout);
                        fflush(stdout);
                }
                return cli_fail("%s", err.msg);
        }
        r = verdict(path, &info, &why);
        if (json)
                print_json_dump(path, f, r, &info, &why);
        else
                print_text_dump(path, f, r, &info, &why);
        gguf_close(f);
        if (fflush(stdout) != 0 || ferror(stdout))
                return cli_fail("cannot write the output");
        return 0;
}
