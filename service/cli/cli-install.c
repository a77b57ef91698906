/* SPDX-License-Identifier: MIT */
/* agentxpu model install | list | use | remove: the models the engine service has installed.
 * `install` resolves PATH as the user who runs it (a file, ollama:NAME[:TAG] from the user's
 * Ollama store, hf:ORG/REPO[:FILE] from the user's Hugging Face cache), opens it and hands
 * the engine the open file, which the engine copies in: the engine never reads the user's
 * folders itself. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/json.h"
#include "base/util.h"
#include "cli-bus.h"
#include "cli.h"
#include "common/bus-common.h"
#include "model/gguf.h"
#include "model/model-info.h"

#define OLLAMA_MODEL_MEDIA_TYPE "application/vnd.ollama.image.model"
/* polkit may wait for a password */
#define ADMIN_CALL_USEC (UINT64_C(30) * 60 * 1000000)
/* What the command line reads of a model store: an Ollama manifest (JSON naming a few layers)
 * and a Hugging Face cache's refs/main (a commit's hash), far below these. */
#define MANIFEST_MAX ((size_t) 1 << 20)
#define REF_MAX ((size_t) 4096)

enum { ARG_ADDRESS = 0x100, ARG_NAME };

static bool name_valid(const char *name) {
        size_t n = strlen(name);

        if (n == 0 || n > 100 || name[0] == '.' || name[0] == '-' || strstr(name, ".."))
                return false;
        for (const char *p = name; *p; p++)
                if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                      *p == '.' || *p == '_' || *p == '+' || *p == '-'))
                        return false;
        return true;
}

static bool is_hex_digest(const char *s) {
        if (strlen(s) != 64)
                return false;
        for (; *s; s++)
                if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
                        return false;
        return true;
}

/* A part of a store path the user typed: no empty part, no "." or "..". */
static bool path_part_ok(const char *s) {
        if (!*s || s[0] == '/')
                return false;
        for (const char *p = s; *p;) {
                size_t n = strcspn(p, "/");
                if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
                        return false;
                p += n;
                if (*p == '/')
                        p++;
        }
        return true;
}

/* The file's base name without ".gguf": the model's name unless --name says otherwise. */
static char *name_from_file(const char *path) {
        const char *b = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
        size_t n = strlen(b);

        if (n > 5 && strcmp(b + n - 5, ".gguf") == 0)
                n -= 5;
        /* a split model's first part: NAME-00001-of-00003 is NAME */
        size_t prefix;
        uint32_t number, count;
        if (gguf_split_suffix(b, n, &prefix, &number, &count))
                n = prefix;
        return strndup(b, n);
}

typedef struct Source {
        char *file;        /* what to open */
        char *name;        /* the default name */
        char *sha256;      /* the digest the store names the file by, or NULL */
} Source;

static void source_done(Source *s) {
        free(s->file);
        free(s->name);
        free(s->sha256);
}

static const char *home(void) {
        const char *h = getenv("HOME");
        return h && *h ? h : "/";
}

/* ollama:NAME[:TAG]: the model layer of the manifest Ollama keeps for NAME:TAG. */
static int resolve_ollama(const char *spec, Source *ret) {
        _cleanup_free_ char *name = strdup(spec), *root = NULL, *manifest = NULL, *text = NULL;
        _cleanup_json_ json_value *j = NULL;
        const json_value *layers;
        const char *tag = "latest", *digest = NULL, *short_name;
        axp_error err = {};
        size_t len;
        char *colon;
        int r;

        if (!name)
                return cli_fail("out of memory");
        colon = strrchr(name, ':');
        if (colon) {
                *colon = 0;
                tag = colon + 1;
        }
        if (!path_part_ok(name) || !*tag || strchr(tag, '/') || strcmp(tag, "..") == 0 || strcmp(tag, ".") == 0)
                return cli_usage_error("'ollama:%s' is not NAME[:TAG] as 'ollama list' shows them", spec);
        if (getenv("OLLAMA_MODELS") && *getenv("OLLAMA_MODELS"))
                root = strdup(getenv("OLLAMA_MODELS"));
        else if (asprintf(&root, "%s/.ollama/models", home()) < 0)
                root = NULL;
        if (!root || asprintf(&manifest, "%s/manifests/registry.ollama.ai/%s%s/%s", root,
                              strchr(name, '/') ? "" : "library/", name, tag) < 0)
                return cli_fail("out of memory");
        r = axp_read_file(manifest, MANIFEST_MAX, &text, &len, &err);
        if (r == -EFBIG)
                return cli_fail("%s is not an Ollama manifest: %s", manifest, err.msg);
        if (r < 0)
                return cli_fail("no Ollama model %s:%s (%s); 'ollama pull %s:%s' fetches it, or set OLLAMA_MODELS "
                                "to the store's folder", name, tag, err.msg, name, tag);
        if (json_parse(text, len, &j, &err) < 0)
                return cli_fail("%s is not an Ollama manifest: %s", manifest, err.msg);
        layers = json_get(j, "layers");
        for (size_t i = 0; layers && layers->type == JSON_ARRAY && i < layers->n; i++) {
                const char *mt = json_get_string(layers->items[i], "mediaType");
                if (mt && strcmp(mt, OLLAMA_MODEL_MEDIA_TYPE) == 0) {
                        digest = json_get_string(layers->items[i], "digest");
                        break;
                }
        }
        if (!digest)
                return cli_fail("%s names no layer of type " OLLAMA_MODEL_MEDIA_TYPE, manifest);
        if (strncmp(digest, "sha256:", 7) != 0 || !is_hex_digest(digest + 7))
                return cli_fail("%s: the model layer's digest '%.80s' is not sha256:HEX", manifest, digest);
        short_name = strrchr(name, '/') ? strrchr(name, '/') + 1 : name;
        if (asprintf(&ret->file, "%s/blobs/sha256-%s", root, digest + 7) < 0 ||
            !(ret->sha256 = strdup(digest + 7)) ||
            (strcmp(tag, "latest") == 0 ? !(ret->name = strdup(short_name))
                                        : asprintf(&ret->name, "%s-%s", short_name, tag) < 0))
                return cli_fail("out of memory");
        return 0;
}

static char *hf_cache(void) {
        const char *e;
        char *p = NULL;

        if ((e = getenv("HF_HUB_CACHE")) && *e)
                return strdup(e);
        if ((e = getenv("HF_HOME")) && *e)
                return asprintf(&p, "%s/hub", e) < 0 ? NULL : p;
        if ((e = getenv("XDG_CACHE_HOME")) && *e)
                return asprintf(&p, "%s/huggingface/hub", e) < 0 ? NULL : p;
        return asprintf(&p, "%s/.cache/huggingface/hub", home()) < 0 ? NULL : p;
}

/* Whether a file's name is that of a split model's part after the first
 * (NAME-0000K-of-0000N.gguf, K > 1): its first part stands for the model */
static bool later_part(const char *name, size_t len) {
        size_t prefix;
        uint32_t number, count;
        return len > 5 && gguf_split_suffix(name, len - 5, &prefix, &number, &count) && number != 1;
}

/* The one *.gguf file of a snapshot folder (a split model's first part standing for its
 * parts), or the list of them for a message. */

static int only_gguf(const char *dir, char **ret, char *list, size_t list_cap) {
        struct dirent *de;
        DIR *d = opendir(dir);
        int n = 0;

        list[0] = 0;
        if (!d)
                return -errno;
        while ((de = readdir(d))) {
                size_t len = strlen(de->d_name);
                if (len <= 5 || strcmp(de->d_name + len - 5, ".gguf") != 0 || later_part(de->d_name, len))
                        continue;
                if (n++ == 0) {
                        free(*ret);
                        *ret = strdup(de->d_name);
                }
                size_t o = strlen(list);
                snprintf(list + o, list_cap - o, "%s%s", o ? ", " : "", de->d_name);
        }
        closedir(d);
        return n;
}

/* hf:ORG/REPO[:FILE]: FILE in the snapshot of the Hugging Face cache that refs/main names (or
 * the only snapshot). */
static int resolve_hf(const char *spec, Source *ret) {
        _cleanup_free_ char *repo = strdup(spec), *cache = hf_cache(), *base = NULL, *ref = NULL, *rev = NULL,
                               *snap = NULL, *file = NULL, *real = NULL;
        char list[512], *colon, *slash;
        axp_error err = {};
        size_t len;
        int n, r;

        if (!repo || !cache)
                return cli_fail("out of memory");
        colon = strchr(repo, ':');
        if (colon)
                *colon++ = 0;
        slash = strchr(repo, '/');
        if (!slash || !path_part_ok(repo) || strchr(slash + 1, '/') || (colon && !path_part_ok(colon)))
                return cli_usage_error("'hf:%s' is not ORG/REPO[:FILE]", spec);
        *slash = 0;
        if (asprintf(&base, "%s/models--%s--%s", cache, repo, slash + 1) < 0 ||
            asprintf(&ref, "%s/refs/main", base) < 0)
                return cli_fail("out of memory");
        r = axp_read_file(ref, REF_MAX, &rev, &len, &err);
        if (r == -EFBIG)
                return cli_fail("%s does not name a snapshot: %s", ref, err.msg);
        if (r >= 0) {
                rev[strcspn(rev, "\n")] = 0;
                if (!path_part_ok(rev) || strchr(rev, '/'))
                        return cli_fail("%s does not name a snapshot", ref);
        } else {
                /* no refs/main: the only snapshot there is */
                struct dirent *de;
                DIR *d;
                _cleanup_free_ char *snaps = NULL;

                if (asprintf(&snaps, "%s/snapshots", base) < 0)
                        return cli_fail("out of memory");
                d = opendir(snaps);
                if (!d)
                        return cli_fail("%s/%s is not in the Hugging Face cache %s (%s); 'huggingface-cli download "
                                        "%s/%s' fetches it, or set HF_HUB_CACHE", repo, slash + 1, cache,
                                        strerror(errno), repo, slash + 1);
                n = 0;
                while ((de = readdir(d)))
                        if (de->d_name[0] != '.' && n++ == 0)
                                rev = strdup(de->d_name);
                closedir(d);
                if (n != 1)
                        return cli_fail("%s has %d snapshots and no refs/main to choose one", snaps, n);
        }
        if (!rev || asprintf(&snap, "%s/snapshots/%s", base, rev) < 0)
                return cli_fail("out of memory");
        if (colon) {
                struct stat st;
                if (asprintf(&file, "%s/%s", snap, colon) < 0)
                        return cli_fail("out of memory");
                if (stat(file, &st) < 0 && (strlen(colon) < 5 || strcmp(colon + strlen(colon) - 5, ".gguf") != 0)) {
                        free(file);
                        if (asprintf(&file, "%s/%s.gguf", snap, colon) < 0)
                                return cli_fail("out of memory");
                }
        } else {
                _cleanup_free_ char *one = NULL;
                n = only_gguf(snap, &one, list, sizeof(list));
                if (n < 0)
                        return cli_fail("cannot read %s: %s", snap, strerror(-n));
                if (n == 0)
                        return cli_fail("%s/%s has no .gguf file in its snapshot %s", repo, slash + 1, rev);
                if (n > 1)
                        return cli_usage_error("%s/%s has %d .gguf files (%s); choose one with hf:%s/%s:FILE", repo,
                                               slash + 1, n, list, repo, slash + 1);
                if (asprintf(&file, "%s/%s", snap, one) < 0)
                        return cli_fail("out of memory");
        }
        /* The cache links each file to blobs/SHA256 (for files kept in Git LFS, as models are). */
        real = realpath(file, NULL);
        if (real) {
                const char *b = strrchr(real, '/') + 1;
                if (is_hex_digest(b) && b - real >= 7 && strncmp(b - 7, "/blobs/", 7) == 0)
                        ret->sha256 = strdup(b);
        }
        ret->name = name_from_file(file);
        ret->file = TAKE_PTR(file);
        if (!ret->name)
                return cli_fail("out of memory");
        return 0;
}

/* --- waiting for the job ------------------------------------------------------------------ */

typedef struct Job {
        const char *path;
        bool finished, engine_lost;
        char result[32], error[128], message[512];
        double progress;
        uint64_t done, total;
        char state[32];
        bool tty;
        int last_shown;
} Job;

static void show_progress(Job *j) {
        int pct = (int) (j->progress * 100.0 + 1e-9);
        char done[32], total[32];

        if (pct == j->last_shown)
                return;
        j->last_shown = pct;
        axp_format_bytes(j->done, done, sizeof(done));
        axp_format_bytes(j->total, total, sizeof(total));
        if (j->tty) {
                char bar[41];
                int fill = pct * 40 / 100;
                memset(bar, '#', (size_t) fill);
                memset(bar + fill, ' ', (size_t) (40 - fill));
                bar[40] = 0;
                fprintf(stderr, "\r[%s] %3d%% %s / %s %-9s", bar, pct, done, total, j->state);
        } else
                fprintf(stderr, "%3d%% %s / %s %s\n", pct, done, total, j->state);
        fflush(stderr);
}

static int on_job_signal(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        Job *j = userdata;
        const char *iface, *a, *b, *c;
        int r;

        if (!j->path || j->finished || strcmp(sd_bus_message_get_path(m) ?: "", j->path) != 0)
                return 0;
        if (sd_bus_message_is_signal(m, AXP_BUS_JOB_IFACE, "Finished")) {
                if (sd_bus_message_read(m, "sss", &a, &b, &c) >= 0) {
                        snprintf(j->result, sizeof(j->result), "%s", a);
                        snprintf(j->error, sizeof(j->error), "%s", b);
                        snprintf(j->message, sizeof(j->message), "%s", c);
                }
                j->finished = true;
                return 0;
        }
        if (!sd_bus_message_is_signal(m, "org.freedesktop.DBus.Properties", "PropertiesChanged"))
                return 0;
        r = sd_bus_message_read(m, "s", &iface);
        if (r < 0 || strcmp(iface, AXP_BUS_JOB_IFACE) != 0)
                return 0;
        const char *state = NULL;
        const cli_dict_field fields[] = {
                { "Progress", 'd', &j->progress }, { "BytesDone", 't', &j->done }, { "State", 's', &state },
        };
        if (cli_read_dict(m, fields, sizeof(fields) / sizeof(fields[0])) >= 0 && state)
                snprintf(j->state, sizeof(j->state), "%s", state);
        show_progress(j);
        return 0;
}

static int on_engine_owner(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        Job *j = userdata;
        const char *name, *old_owner, *new_owner;

        if (sd_bus_message_read(m, "sss", &name, &old_owner, &new_owner) >= 0 && !*new_owner)
                j->engine_lost = true;
        return 0;
}

static int install(const char *address, const char *spec, const char *name_opt) {
        _cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL, *reply = NULL;
        _cleanup_(sd_bus_slot_unrefp) sd_bus_slot *slot = NULL, *owner_slot = NULL;
        _cleanup_bus_error_ sd_bus_error e = SD_BUS_ERROR_NULL;
        Source src = {};
        Job job = { .tty = isatty(STDERR_FILENO), .last_shown = -1 };
        const char *name, *path;
        bool cancel_sent = false;
        struct stat st;
        int fd = -1, r;
        uint32_t part_no = 0, n_parts = 1, n_open = 0;
        int *parts = NULL;
        axp_error err = { 0 };

        if (strncmp(spec, "ollama:", 7) == 0)
                r = resolve_ollama(spec + 7, &src);
        else if (strncmp(spec, "hf:", 3) == 0)
                r = resolve_hf(spec + 3, &src);
        else {
                src.file = strdup(spec);
                src.name = name_from_file(spec);
                r = src.file && src.name ? 0 : cli_fail("out of memory");
        }
        if (r != 0)
                goto out;
        name = name_opt ?: src.name;
        if (!name_valid(name)) {
                r = name_opt ? cli_usage_error("--name '%s' is not a model name: use 1 to 100 letters, digits and "
                                               ". _ + -, not starting with . or -, without '/' or '..'", name)
                             : cli_usage_error("'%s' cannot be the model's name; give one with --name NAME", name);
                goto out;
        }
        /* As the user who runs this: the engine gets the open file, never the path. */
        fd = open(src.file, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        if (fd < 0) {
                r = cli_fail("cannot open %s: %s", src.file, strerror(errno));
                goto out;
        }
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
                r = cli_fail("%s is not a regular file", src.file);
                goto out;
        }
        /* A split model: its first part, the others opened beside it (the engine joins them) */
        if (axp_model_split_fd(fd, src.file, &part_no, &n_parts, &err) == 0 && n_parts > 1) {
                if (part_no != 0) {
                        _cleanup_free_ char *first = gguf_part_path(src.file, part_no, 0, n_parts);
                        r = cli_fail("%s is part %" PRIu32 " of %" PRIu32 " of a split model; install its first part%s%s",
                                     src.file, part_no + 1, n_parts, first ? ", " : "", first ? first : "");
                        goto out;
                }
                parts = calloc(n_parts - 1, sizeof(int));
                if (!parts) {
                        r = cli_fail("out of memory");
                        goto out;
                }
                for (uint32_t i = 1; i < n_parts; i++) {
                        _cleanup_free_ char *name = gguf_part_path(src.file, 0, i, n_parts);
                        if (!name) {
                                r = cli_fail("%s is part 1 of %" PRIu32 " of a split model, but not named "
                                             "PREFIX-00001-of-%05" PRIu32 ".gguf, from which the others' names are made",
                                             src.file, n_parts, n_parts);
                                goto out;
                        }
                        parts[i - 1] = open(name, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
                        if (parts[i - 1] < 0) {
                                r = cli_fail("%s is part 1 of %" PRIu32 " of a split model, and part %" PRIu32
                                             " cannot be opened: %s: %s", src.file, n_parts, i + 1, name, strerror(errno));
                                goto out;
                        }
                        n_open++;
                }
        }

        if (connect_engine(address, &bus) != 0) {
                r = 1;
                goto out;
        }
        (void) sd_bus_set_allow_interactive_authorization(bus, true);
        r = sd_bus_add_match(bus, &slot,
                             "type='signal',sender='" AXP_BUS_NAME "',path_namespace='" AXP_BUS_JOB_PREFIX "'",
                             on_job_signal, &job);
        if (r >= 0)
                r = sd_bus_add_match(bus, &owner_slot,
                                     "type='signal',sender='org.freedesktop.DBus',interface='org.freedesktop.DBus',"
                                     "member='NameOwnerChanged',arg0='" AXP_BUS_NAME "'",
                                     on_engine_owner, &job);
        if (r >= 0)
                r = sd_bus_message_new_method_call(bus, &m, AXP_BUS_NAME, AXP_BUS_PATH, AXP_BUS_IFACE, "InstallModel");
        if (r >= 0)
                r = sd_bus_message_append(m, "hs", fd, name);
        if (r >= 0 && n_parts > 1) {
                /* the parts after the first; a store's digest names one file, not a split model */
                r = sd_bus_message_open_container(m, 'a', "{sv}");
                if (r >= 0)
                        r = sd_bus_message_open_container(m, 'e', "sv");
                if (r >= 0)
                        r = sd_bus_message_append(m, "s", "parts");
                if (r >= 0)
                        r = sd_bus_message_open_container(m, 'v', "ah");
                if (r >= 0)
                        r = sd_bus_message_open_container(m, 'a', "h");
                for (uint32_t i = 0; i + 1 < n_parts && r >= 0; i++)
                        r = sd_bus_message_append(m, "h", parts[i]);
                for (int k = 0; k < 4 && r >= 0; k++)
                        r = sd_bus_message_close_container(m);
        } else if (r >= 0 && src.sha256)
                r = sd_bus_message_append(m, "a{sv}", 1, "sha256", "s", src.sha256);
        else if (r >= 0)
                r = sd_bus_message_append(m, "a{sv}", 0);
        if (r < 0) {
                r = cli_fail("cannot make the call: %s", strerror(-r));
                goto out;
        }
        r = sd_bus_call(bus, m, ADMIN_CALL_USEC, &e, &reply);
        if (r < 0) {
                r = call_fail("install", address, &e, r);
                goto out;
        }
        r = sd_bus_message_read(reply, "o", &path);
        if (r < 0) {
                r = cli_fail("unexpected reply from the engine: %s", strerror(-r));
                goto out;
        }
        job.path = path;
        job.total = (uint64_t) st.st_size;
        close(fd); /* the engine has its own */
        fd = -1;

        /* Ctrl-C cancels the copy; a second one leaves (and the engine cancels it then). */
        if (cli_catch_interrupts() != 0) {
                r = 1;
                goto out;
        }
        while (!job.finished) {
                if (job.engine_lost) {
                        r = cli_fail("the engine left the bus before the installation ended");
                        goto out;
                }
                if (cli_interrupted() >= 2) {
                        r = cli_fail("interrupted");
                        goto out;
                }
                if (cli_interrupted() && !cancel_sent) {
                        (void) sd_bus_call_method_async(bus, NULL, AXP_BUS_NAME, path, AXP_BUS_JOB_IFACE, "Cancel",
                                                        NULL, NULL, NULL);
                        cancel_sent = true;
                }
                r = sd_bus_process(bus, NULL);
                if (r < 0) {
                        r = cli_fail("lost the bus: %s", strerror(-r));
                        goto out;
                }
                if (r > 0)
                        continue;
                r = cli_bus_wait(bus);
                if (r < 0) {
                        r = cli_fail("lost the bus: %s", strerror(-r));
                        goto out;
                }
        }
        if (job.tty && job.last_shown >= 0)
                fputc('\n', stderr);
        if (strcmp(job.result, "done") == 0) {
                char size[32];
                axp_format_bytes((uint64_t) st.st_size, size, sizeof(size));
                printf("Installed %s (%s); 'agentxpu model use %s' serves it\n", name, size, name);
                r = 0;
        } else if (strcmp(job.result, "cancelled") == 0)
                r = cli_fail("cancelled; nothing was installed");
        else
                r = cli_fail("%s", job.message[0] ? job.message : "the installation failed");
out:
        if (fd >= 0)
                close(fd);
        for (uint32_t i = 0; i < n_open; i++)
                close(parts[i]);
        free(parts);
        source_done(&src);
        return r;
}

/* --- list, use, remove -------------------------------------------------------------------- */

static void human_count(uint64_t n, char *buf, size_t cap) {
        if (n >= UINT64_C(1000000000))
                snprintf(buf, cap, "%.1fB", (double) n / 1e9);
        else if (n >= 1000000)
                snprintf(buf, cap, "%.1fM", (double) n / 1e6);
        else
                snprintf(buf, cap, "%" PRIu64, n);
}

static int list(const char *address) {
        _cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        _cleanup_bus_error_ sd_bus_error e = SD_BUS_ERROR_NULL;
        unsigned n = 0;
        int r;

        if (connect_engine(address, &bus) != 0)
                return 1;
        r = sd_bus_get_property(bus, AXP_BUS_NAME, AXP_BUS_PATH, AXP_BUS_IFACE, "Models", &e, &reply, "a(sa{sv})");
        if (r < 0)
                return call_fail("list", address, &e, r);
        r = sd_bus_message_enter_container(reply, 'a', "(sa{sv})");
        while (r >= 0 && (r = sd_bus_message_enter_container(reply, 'r', "sa{sv}")) > 0) {
                const char *name, *arch = "", *types = "", *chat = "", *error = NULL;
                uint64_t params = 0, size = 0;
                int loaded = 0, is_default = 0;
                char p[32], sz[32];
                const cli_dict_field fields[] = {
                        { "architecture", 's', &arch }, { "types", 's', &types },   { "chat_template", 's', &chat },
                        { "error", 's', &error },       { "parameters", 't', &params }, { "size", 't', &size },
                        { "loaded", 'b', &loaded },     { "default", 'b', &is_default },
                };

                r = sd_bus_message_read(reply, "s", &name);
                if (r >= 0)
                        r = cli_read_dict(reply, fields, sizeof(fields) / sizeof(fields[0]));
                if (r >= 0)
                        r = sd_bus_message_exit_container(reply);
                if (r < 0)
                        break;
                if (n++ == 0)
                        printf("  %-32s %-7s %8s %10s  %s\n", "NAME", "ARCH", "PARAMS", "SIZE", "TYPES");
                human_count(params, p, sizeof(p));
                axp_format_bytes(size, sz, sizeof(sz));
                /* arch and error come from the file: shown, never obeyed, by a terminal */
                if (error) {
                        printf("%c %-32s unusable: ", loaded ? '*' : ' ', name);
                        cli_put_visible(error);
                        putchar('\n');
                } else {
                        printf("%c %-32s ", loaded ? '*' : ' ', name);
                        cli_put_visible(arch);
                        printf("%*s %8s %10s  ", strlen(arch) < 7 ? (int) (7 - strlen(arch)) : 0, "", p, sz);
                        cli_put_visible(types);
                        printf("%s%s\n", is_default ? "  (default)" : "",
                               strcmp(chat, "unrecognised") == 0 ? "  (chat template not recognised: prompts raw)" : "");
                }
        }
        if (r < 0)
                return cli_fail("unexpected reply from the engine: %s", strerror(-r));
        if (n == 0)
                printf("No models are installed; 'agentxpu model install FILE' installs one.\n");
        return 0;
}

static int admin_call(const char *address, const char *method, const char *name, const char *what) {
        _cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL, *reply = NULL;
        _cleanup_bus_error_ sd_bus_error e = SD_BUS_ERROR_NULL;
        int r;

        if (!name_valid(name))
                return cli_usage_error("'%s' is not a model name ('agentxpu model list' shows them)", name);
        if (connect_engine(address, &bus) != 0)
                return 1;
        (void) sd_bus_set_allow_interactive_authorization(bus, true);
        r = sd_bus_message_new_method_call(bus, &m, AXP_BUS_NAME, AXP_BUS_PATH, AXP_BUS_IFACE, method);
        if (r >= 0)
                r = sd_bus_message_append(m, "s", name);
        if (r >= 0)
                r = sd_bus_call(bus, m, ADMIN_CALL_USEC, &e, &reply);
        if (r < 0)
                return call_fail(what, address, &e, r);
        return 0;
}

static int usage(FILE *f) {
        fprintf(f, "usage: agentxpu model install PATH [--name NAME] [--address ADDRESS]\n"
                   "       agentxpu model list [--address ADDRESS]\n"
                   "       agentxpu model use NAME [--address ADDRESS]\n"
                   "       agentxpu model remove NAME [--address ADDRESS]\n\n"
                   "The models the engine service has installed.\n\n"
                   "  install PATH   copy a GGUF model into the engine's models folder; PATH is a file,\n"
                   "                 ollama:NAME[:TAG] (from your Ollama store, ~/.ollama/models or\n"
                   "                 $OLLAMA_MODELS) or hf:ORG/REPO[:FILE] (from your Hugging Face cache,\n"
                   "                 ~/.cache/huggingface/hub or $HF_HUB_CACHE); the name is the file's\n"
                   "                 (ollama: NAME-TAG) unless --name gives one. A split model\n"
                   "                 (NAME-00001-of-0000N.gguf ...) installs from its first part,\n"
                   "                 the others beside it, joined into one file. Ctrl-C cancels.\n"
                   "  list           the models installed; * marks the one loaded\n"
                   "  use NAME       load NAME and keep it as the engine's model across restarts\n"
                   "  remove NAME    delete NAME (not the one loaded)\n\n"
                   "  --name NAME        install under this name (letters, digits, . _ + -)\n"
                   "  --address ADDRESS  the bus to use (default: the system bus)\n\n"
                   "install, use and remove are administrative: polkit asks for an administrator's\n"
                   "password unless its rules say otherwise.\n");
        return f == stderr ? 2 : 0;
}

int cli_model(int argc, char **argv) {
        static const struct option options[] = {
                { "address", required_argument, NULL, ARG_ADDRESS },
                { "name", required_argument, NULL, ARG_NAME },
                { "help", no_argument, NULL, 'h' },
                {}
        };
        const char *address = NULL, *name = NULL, *verb;
        int c;

        optind = 1;
        while ((c = cli_getopt(argc, argv, "h", options)) >= 0)
                switch (c) {
                case ARG_ADDRESS:
                        address = optarg;
                        break;
                case ARG_NAME:
                        name = optarg;
                        break;
                case 'h':
                        return usage(stdout);
                default:
                        return 2;
                }
        if (optind >= argc)
                return cli_usage_error("which? install, list, use or remove ('agentxpu model --help')");
        verb = argv[optind++];
        if (name && strcmp(verb, "install") != 0)
                return cli_usage_error("--name is for install only");
        if (strcmp(verb, "list") == 0) {
                if (optind != argc)
                        return cli_usage_error("list takes no arguments");
                return list(address);
        }
        if (strcmp(verb, "install") != 0 && strcmp(verb, "use") != 0 && strcmp(verb, "remove") != 0)
                return cli_usage_error("unknown action '%s'; choose install, list, use or remove", verb);
        if (optind + 1 != argc)
                return cli_usage_error("%s takes one argument, %s", verb, strcmp(verb, "install") == 0 ? "PATH" : "NAME");
        if (strcmp(verb, "install") == 0)
                return install(address, argv[optind], name);
        if (strcmp(verb, "use") == 0) {
                int r = admin_call(address, "UseModel", argv[optind], "use");
                if (r == 0)
                        printf("The engine serves %s, now and after a restart\n", argv[optind]);
                return r;
        }
        {
                int r = admin_call(address, "RemoveModel", argv[optind], "remove");
                if (r == 0)
                        printf("Removed %s\n", argv[optind]);
                return r;
        }
}
