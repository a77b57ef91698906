/* SPDX-License-Identifier: MIT */
#include "models.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "base/sha256.h"
#include "common/bus-common.h"
#include "log.h"

static void *mfree(void *p) {
        free(p);
        return NULL;
}

#define DEFAULT_MODEL_FILE "default-model"
#define TEMP_PREFIX ".install-"
#define COPY_CHUNK (4u << 20)
#define PROGRESS_USEC (200 * 1000)

typedef enum JobPhase {
        JOB_COPYING,
        JOB_VERIFYING,
        JOB_DONE,
        JOB_FAILED,
        JOB_CANCELLED,
} JobPhase;

static const char *const phase_names[] = {
        [JOB_COPYING] = "copying",
        [JOB_VERIFYING] = "verifying",
        [JOB_DONE] = "done",
        [JOB_FAILED] = "failed",
        [JOB_CANCELLED] = "cancelled",
};

struct InstallJob {
        Context *context;
        uint64_t n;
        char *path;              /* /org/agentxpu/Engine/job/N */
        char *owner;             /* unique name of the caller: its signals go there alone */
        uid_t uid;
        char *name;
        char *sha256;            /* the digest the caller expects, or NULL */
        int src_fd, tmp_fd;
        int *part_fds;           /* a split model's parts after the first (src_fd), joined into one file */
        uint32_t n_part_fds;
        char *tmp_path, *final_path;
        uint64_t size;
        unsigned delay_ms;       /* AGENTXPU_TEST_COPY_DELAY_MS: a pause per chunk, for tests */

        pthread_t thread;
        bool thread_running;
        _Atomic uint64_t done_bytes;
        _Atomic int phase;
        atomic_bool cancel;
        int result;              /* the worker's outcome, read after the join */
        axp_error err;

        uint64_t sent_bytes;     /* as last announced */
        int sent_phase;
        sd_bus_slot *object;
        sd_bus_track *track;
        sd_bus_slot *check_slot;
        sd_event_source *timer;
        LIST_FIELDS(InstallJob, jobs);
};

bool model_name_valid(const char *name) {
        size_t n = strlen(name);

        if (n == 0 || n > 100 || name[0] == '.' || name[0] == '-' || strstr(name, ".."))
                return false;
        for (const char *p = name; *p; p++)
                if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                      *p == '.' || *p == '_' || *p == '+' || *p == '-'))
                        return false;
        return true;
}

char *models_file(Context *c, const char *name) {
        char *p;

        if (!c->config.models_dir || asprintf(&p, "%s/%s.gguf", c->config.models_dir, name) < 0)
                return NULL;
        return p;
}

/* --- the folder and the Models property ------------------------------------------------ */

static void models_clear(Context *c) {
        for (size_t i = 0; i < c->n_models; i++)
                free(c->models[i].name);
        free(c->models);
        c->models = NULL;
        c->n_models = 0;
}

static int cmp_entry(const void *a, const void *b) {
        return strcmp(((const ModelEntry *) a)->name, ((const ModelEntry *) b)->name);
}

int models_scan(Context *c, bool announce) {
        ModelEntry *v = NULL;
        size_t n = 0, cap = 0;
        struct dirent *de;
        DIR *d;

        d = c->config.models_dir ? opendir(c->config.models_dir) : NULL;
        if (!d) {
                if (errno != ENOENT)
                        log_warning("Cannot read the models folder %s: %s", c->config.models_dir ?: "?",
                                    strerror(errno));
        } else {
                while ((de = readdir(d))) {
                        size_t len = strlen(de->d_name);
                        axp_error err = {};
                        ModelEntry e = {};
                        int fd;

                        if (len <= 5 || strcmp(de->d_name + len - 5, ".gguf") != 0)
                                continue;
                        e.name = strndup(de->d_name, len - 5);
                        if (!e.name)
                                break;
                        if (!model_name_valid(e.name)) {
                                free(e.name);
                                continue;
                        }
                        fd = openat(dirfd(d), de->d_name, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
                        if (fd < 0 || axp_model_probe_fd(fd, de->d_name, &e.info, &err) < 0) {
                                /* listed all the same, so that it can be removed */
                                snprintf(e.error, sizeof(e.error), "%s", fd < 0 ? strerror(errno) : err.msg);
                                log_warning("Installed model %s is not usable: %s", de->d_name, e.error);
                        }
                        if (fd >= 0)
                                close(fd);
                        if (n == cap) {
                                ModelEntry *nv = realloc(v, (cap = cap ? cap * 2 : 8) * sizeof(ModelEntry));
                                if (!nv) {
                                        free(e.name);
                                        break;
                                }
                                v = nv;
                        }
                        v[n++] = e;
                }
                closedir(d);
        }
        if (n)
                qsort(v, n, sizeof(ModelEntry), cmp_entry);
        models_clear(c);
        c->models = v;
        c->n_models = n;
        if (announce && c->bus)
                (void) sd_bus_emit_properties_changed(c->bus, AXP_BUS_PATH, AXP_BUS_IFACE, "Models", NULL);
        return 0;
}

void models_clean_temporary(Context *c) {
        struct dirent *de;
        DIR *d = c->config.models_dir ? opendir(c->config.models_dir) : NULL;

        if (!d)
                return;
        while ((de = readdir(d)))
                if (strncmp(de->d_name, TEMP_PREFIX, strlen(TEMP_PREFIX)) == 0) {
                        log_info("Removing %s/%s, left by an install that did not finish",
                                 c->config.models_dir, de->d_name);
                        (void) unlinkat(dirfd(d), de->d_name, 0);
                }
        closedir(d);
}

char *models_read_default(const DaemonConfig *config) {
        char *path = NULL, buf[128] = "", *name = NULL, *file = NULL;
        struct stat st;
        FILE *f;

        if (!config->state_dir || asprintf(&path, "%s/" DEFAULT_MODEL_FILE, config->state_dir) < 0)
                return NULL;
        f = fopen(path, "re");
        free(path);
        if (!f)
                return NULL;
        if (!fgets(buf, sizeof(buf), f))
                buf[0] = 0;
        fclose(f);
        buf[strcspn(buf, "\n")] = 0;
        if (!model_name_valid(buf)) {
                log_warning("Ignoring %s/" DEFAULT_MODEL_FILE ": '%s' is not a model name", config->state_dir, buf);
                return NULL;
        }
        if (asprintf(&file, "%s/%s.gguf", config->models_dir, buf) < 0)
                return NULL;
        if (stat(file, &st) < 0)
                log_warning("The default model '%s' is not installed (%s); ignoring it", buf, strerror(errno));
        else
                name = strdup(buf);
        free(file);
        return name;
}

int models_write_default(Context *c, const char *name) {
        _cleanup_free_ char *path = NULL, *tmp = NULL;
        int fd, r = 0;

        if (asprintf(&path, "%s/" DEFAULT_MODEL_FILE, c->config.state_dir) < 0 ||
            asprintf(&tmp, "%s/." DEFAULT_MODEL_FILE ".XXXXXX", c->config.state_dir) < 0)
                return -ENOMEM;
        if (!name)
                return unlink(path) < 0 && errno != ENOENT ? -errno : 0;
        fd = mkostemp(tmp, O_CLOEXEC);
        if (fd < 0)
                return -errno;
        if (dprintf(fd, "%s\n", name) < 0 || fchmod(fd, 0644) < 0 || fsync(fd) < 0)
                r = -errno;
        close(fd);
        if (r >= 0 && rename(tmp, path) < 0)
                r = -errno;
        if (r < 0)
                (void) unlink(tmp);
        return r;
}

int property_get_models(sd_bus *bus, const char *path, const char *iface, const char *property,
                        sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        Context *c = userdata;
        int r;

        r = sd_bus_message_open_container(reply, 'a', "(sa{sv})");
        for (size_t i = 0; r >= 0 && i < c->n_models; i++) {
                const ModelEntry *e = &c->models[i];
                _cleanup_free_ char *file = models_file(c, e->name);
                bool loaded = file && c->loaded_path && strcmp(file, c->loaded_path) == 0;
                bool is_default = c->default_model && strcmp(c->default_model, e->name) == 0;

                r = sd_bus_message_open_container(reply, 'r', "sa{sv}");
                if (r >= 0)
                        r = sd_bus_message_append(reply, "s", e->name);
                if (r >= 0)
                        r = sd_bus_message_open_container(reply, 'a', "{sv}");
                if (r >= 0 && e->error[0])
                        r = sd_bus_message_append(reply, "{sv}", "error", "s", e->error);
                else if (r >= 0)
                        r = sd_bus_message_append(reply, "{sv}{sv}{sv}{sv}{sv}",
                                                  "model_name", "s", e->info.name,
                                                  "architecture", "s", e->info.arch,
                                                  "parameters", "t", e->info.parameters,
                                                  "types", "s", e->info.types,
                                                  "size", "t", e->info.size);
                if (r >= 0 && !e->error[0] && e->info.chat_template[0])
                        r = sd_bus_message_append(reply, "{sv}", "chat_template", "s", e->info.chat_template);
                if (r >= 0)
                        r = sd_bus_message_append(reply, "{sv}{sv}", "loaded", "b", loaded, "default", "b",
                                                  is_default);
                if (r >= 0)
                        r = sd_bus_message_close_container(reply);
                if (r >= 0)
                        r = sd_bus_message_close_container(reply);
        }
        if (r >= 0)
                r = sd_bus_message_close_container(reply);
        return r;
}

/* An error of the model's file as the caller should see it: what we cannot run is
 * Unsupported, anything else wrong with the file InvalidArgument. */
static int bus_code(int r) {
        if (r == -ENOTSUP || r == -ENOMEM || r == -EIO || r == -ENOSPC)
                return r;
        return -EINVAL;
}

/* --- RemoveModel ------------------------------------------------------------------------- */

static void reply_error(sd_bus_message *call, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void reply_error(sd_bus_message *call, int code, const char *fmt, ...) {
        _cleanup_bus_error_ sd_bus_error e = SD_BUS_ERROR_NULL;
        char msg[512];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        axp_bus_error_setf(&e, code, "%s", msg);
        (void) sd_bus_reply_method_error(call, &e);
}

void models_remove(Context *c, sd_bus_message *call, const char *name) {
        _cleanup_free_ char *file = models_file(c, name);
        struct stat st;

        if (!file)
                return reply_error(call, -ENOMEM, "Out of memory");
        if (stat(file, &st) < 0)
                return reply_error(call, -ENOENT, "No model named '%s' is installed ('agentxpu model list' shows them)",
                                   name);
        if (c->loaded_path && strcmp(c->loaded_path, file) == 0)
                return reply_error(call, -EBUSY,
                                   "'%s' is the model in use; choose another with 'agentxpu model use' first", name);
        if (unlink(file) < 0)
                return reply_error(call, -errno, "Cannot remove %s: %s", file, strerror(errno));
        log_info("Removed model %s", name);
        if (c->default_model && strcmp(c->default_model, name) == 0) {
                (void) models_write_default(c, NULL);
                c->default_model = mfree(c->default_model);
        }
        models_scan(c, true);
        (void) sd_bus_reply_method_return(call, NULL);
}

/* --- install jobs ------------------------------------------------------------------------ */

bool install_in_progress(Context *c, const char *name) {
        LIST_FOREACH(jobs, j, c->install_jobs)
                if (strcmp(j->name, name) == 0)
                        return true;
        return false;
}

static void job_free(InstallJob *j) {
        Context *c;

        if (!j)
                return;
        c = j->context;
        LIST_REMOVE(jobs, c->install_jobs, j);
        if (j->thread_running)
                pthread_join(j->thread, NULL);
        sd_bus_slot_unref(j->object);
        sd_bus_track_unref(j->track);
        sd_bus_slot_unref(j->check_slot);
        sd_event_source_disable_unref(j->timer);
        if (j->src_fd >= 0)
                close(j->src_fd);
        for (uint32_t i = 0; i < j->n_part_fds; i++)
                close(j->part_fds[i]);
        free(j->part_fds);
        if (j->tmp_fd >= 0)
                close(j->tmp_fd);
        if (j->tmp_path)
                (void) unlink(j->tmp_path); /* gone already if it was renamed */
        free(j->tmp_path);
        free(j->final_path);
        free(j->path);
        free(j->owner);
        free(j->name);
        free(j->sha256);
        free(j);
        context_changed(c);
}

/* A signal of the job object to its caller alone. */
static int job_new_signal(InstallJob *j, const char *iface, const char *member, sd_bus_message **ret) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        int r;

        r = sd_bus_message_new_signal(j->context->bus, &m, j->path, iface, member);
        if (r >= 0)
                r = sd_bus_message_set_destination(m, j->owner);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(m);
        return 0;
}

static double job_progress(InstallJob *j) {
        int phase = atomic_load(&j->phase);

        if (phase == JOB_DONE)
                return 1.0;
        /* the copy is most of the work: the check after it gets the last hundredth */
        return j->size ? 0.99 * (double) atomic_load(&j->done_bytes) / (double) j->size : 0;
}

static void job_announce(InstallJob *j) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        uint64_t done = atomic_load(&j->done_bytes);
        int phase = atomic_load(&j->phase), r;

        if (done == j->sent_bytes && phase == j->sent_phase)
                return;
        j->sent_bytes = done;
        j->sent_phase = phase;
        r = job_new_signal(j, "org.freedesktop.DBus.Properties", "PropertiesChanged", &m);
        if (r >= 0)
                r = sd_bus_message_append(m, "sa{sv}", AXP_BUS_JOB_IFACE, 3, "State", "s", phase_names[phase],
                                          "Progress", "d", job_progress(j), "BytesDone", "t", done);
        if (r >= 0)
                r = sd_bus_message_append(m, "as", 0);
        if (r >= 0)
                r = sd_bus_send(j->context->bus, m, NULL);
        if (r < 0)
                log_warning_errno(r, "Failed to send PropertiesChanged of %s", j->path);
}

static int on_progress_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        InstallJob *j = userdata;

        job_announce(j);
        (void) sd_event_source_set_time_relative(s, PROGRESS_USEC);
        return 0;
}

static void job_cancel(InstallJob *j, const char *why) {
        if (!atomic_exchange(&j->cancel, true))
                log_info("Installing %s: cancelled (%s)", j->name, why);
}

static int on_track(sd_bus_track *t, void *userdata) {
        InstallJob *j = userdata;

        j->track = sd_bus_track_unref(j->track);
        job_cancel(j, "its caller left the bus");
        return 0;
}

static int on_name_owner(sd_bus_message *reply, void *userdata, sd_bus_error *ret_error) {
        InstallJob *j = userdata;

        j->check_slot = sd_bus_slot_unref(j->check_slot);
        /* NameHasNoOwner: it left before the tracking match was in place. */
        if (sd_bus_message_is_method_error(reply, NULL))
                job_cancel(j, "its caller left the bus");
        return 0;
}

static int write_all(int fd, const uint8_t *p, size_t n) {
        while (n) {
                ssize_t k = write(fd, p, n);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0)
                        return -errno;
                p += k;
                n -= (size_t) k;
        }
        return 0;
}

static int copy_error(InstallJob *j, int r, const char *what) {
        if (r == -ENOSPC || r == -EFBIG || r == -EDQUOT)
                return axp_errorf(&j->err, -ENOSPC,
                                  "The models folder %s has no room left for %s (%" PRIu64
                                  " bytes): %s; free some space and install it again",
                                  j->context->config.models_dir, j->name, j->size, strerror(-r));
        return axp_errorf(&j->err, r, "Cannot %s: %s", what, strerror(-r));
}

/* The engine's own copy at tmp_path, which nobody else writes: loaded as the engine would
 * load it, made readable and renamed to NAME.gguf (never over another) */
static int job_place(InstallJob *j) {
        int r = axp_model_check_file(j->tmp_path, &j->err);

        if (r < 0)
                return j->err.code = bus_code(r);
        if (fchmod(j->tmp_fd, 0644) < 0)
                return copy_error(j, -errno, "make the copy readable");
        if (atomic_load(&j->cancel))
                return axp_errorf(&j->err, -ECANCELED, "The installation of %s was cancelled", j->name);
        if (renameat2(AT_FDCWD, j->tmp_path, AT_FDCWD, j->final_path, RENAME_NOREPLACE) < 0)
                return errno == EEXIST ? axp_errorf(&j->err, -EEXIST, "A model named '%s' was installed meanwhile",
                                                    j->name)
                                       : copy_error(j, -errno, "rename the copy into place");
        j->tmp_path = mfree(j->tmp_path);
        return 0;
}

static bool join_progress(void *userdata, uint64_t bytes) {
        InstallJob *j = userdata;

        atomic_fetch_add(&j->done_bytes, bytes);
        if (j->delay_ms)
                usleep(j->delay_ms * 1000);
        return !atomic_load(&j->cancel);
}

/* A split model's parts joined into one file (written over tmp_path), then checked and
 * renamed into place as a copy is */
static int job_join(InstallJob *j) {
        _cleanup_free_ int *fds = malloc((j->n_part_fds + 1) * sizeof(int));
        int r;

        if (!fds)
                return axp_errorf(&j->err, -ENOMEM, "Out of memory");
        fds[0] = j->src_fd;
        memcpy(fds + 1, j->part_fds, j->n_part_fds * sizeof(int));
        r = axp_model_join_fds(fds, j->n_part_fds + 1, j->tmp_path, join_progress, j, &j->err);
        if (r == -ECANCELED || atomic_load(&j->cancel))
                return axp_errorf(&j->err, -ECANCELED, "The installation of %s was cancelled", j->name);
        if (r < 0)
                return r == -ENOSPC || r == -EDQUOT || r == -EFBIG ? copy_error(j, r, "write the model")
                                                                   : (j->err.code = bus_code(r));
        /* the writer renamed its file over the one opened for the copy */
        close(j->tmp_fd);
        j->tmp_fd = open(j->tmp_path, O_RDONLY | O_CLOEXEC);
        if (j->tmp_fd < 0 || fsync(j->tmp_fd) < 0)
                return copy_error(j, -errno, "write the model");
        atomic_store(&j->phase, JOB_VERIFYING);
        r = job_place(j);
        if (r < 0)
                return r;
        log_info("Installed model %s (%" PRIu32 " parts joined into one file)", j->name, j->n_part_fds + 1);
        return 0;
}

static int job_copy(InstallJob *j) {
        _cleanup_free_ uint8_t *buf = malloc(COPY_CHUNK);
        uint8_t got[32], again[32];
        char hex[65];
        axp_sha256 sha;
        uint64_t off = 0;
        int r;

        if (!buf)
                return axp_errorf(&j->err, -ENOMEM, "Out of memory");
        axp_sha256_init(&sha);
        while (off < j->size) {
                size_t want = j->size - off < COPY_CHUNK ? (size_t) (j->size - off) : COPY_CHUNK;
                ssize_t n;

                if (atomic_load(&j->cancel))
                        return axp_errorf(&j->err, -ECANCELED, "The installation of %s was cancelled", j->name);
                n = pread(j->src_fd, buf, want, (off_t) off);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return copy_error(j, -errno, "read the model");
                if (n == 0)
                        return axp_errorf(&j->err, -EBADMSG,
                                          "The file became shorter while it was copied (%" PRIu64 " of %" PRIu64
                                          " bytes); install it again once nothing writes it", off, j->size);
                axp_sha256_update(&sha, buf, (size_t) n);
                r = write_all(j->tmp_fd, buf, (size_t) n);
                if (r < 0)
                        return copy_error(j, r, "write the copy");
                off += (uint64_t) n;
                atomic_store(&j->done_bytes, off);
                if (j->delay_ms)
                        usleep(j->delay_ms * 1000);
        }
        if (fsync(j->tmp_fd) < 0)
                return copy_error(j, -errno, "write the copy");
        axp_sha256_final(&sha, got);

        /* What is on the disk is what was read, and what the caller expected. */
        atomic_store(&j->phase, JOB_VERIFYING);
        axp_sha256_init(&sha);
        for (off = 0;;) {
                ssize_t n = pread(j->tmp_fd, buf, COPY_CHUNK, (off_t) off);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return copy_error(j, -errno, "read the copy back");
                if (n == 0)
                        break;
                axp_sha256_update(&sha, buf, (size_t) n);
                off += (uint64_t) n;
                if (atomic_load(&j->cancel))
                        return axp_errorf(&j->err, -ECANCELED, "The installation of %s was cancelled", j->name);
        }
        axp_sha256_final(&sha, again);
        if (off != j->size || memcmp(got, again, 32) != 0)
                return axp_errorf(&j->err, -EIO, "The copy of %s differs from what was read; the disk may be "
                                  "failing", j->name);
        axp_sha256_hex(got, hex);
        if (j->sha256 && strcmp(hex, j->sha256) != 0)
                return axp_errorf(&j->err, -EBADMSG,
                                  "The file's SHA-256 is %s, not the %s its store names it by; the download is "
                                  "damaged: fetch it again", hex, j->sha256);

        r = job_place(j);
        if (r < 0)
                return r;
        log_info("Installed model %s (%" PRIu64 " bytes, sha256 %s)", j->name, j->size, hex);
        return 0;
}

static void *job_thread(void *userdata) {
        InstallJob *j = userdata;

        j->result = j->n_part_fds ? job_join(j) : job_copy(j);
        if (j->result < 0 && j->tmp_path)
                (void) unlink(j->tmp_path);
        bridge_post_install_done(&j->context->bridge, j);
        return NULL;
}

void install_job_done(Context *c, void *job) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        InstallJob *j = job;
        const char *error_name = "";
        int r;

        if (j->thread_running) {
                pthread_join(j->thread, NULL);
                j->thread_running = false;
        }
        if (j->result >= 0)
                atomic_store(&j->phase, JOB_DONE);
        else if (j->result == -ECANCELED)
                atomic_store(&j->phase, JOB_CANCELLED);
        else {
                atomic_store(&j->phase, JOB_FAILED);
                log_warning("Installing %s failed: %s", j->name, j->err.msg);
        }
        if (j->result < 0) {
                int code = j->err.code ? j->err.code : j->result;
                error_name = axp_bus_error_name(code) ?: SD_BUS_ERROR_FAILED;
        }
        job_announce(j);
        r = job_new_signal(j, AXP_BUS_JOB_IFACE, "Finished", &m);
        if (r >= 0)
                r = sd_bus_message_append(m, "sss", phase_names[atomic_load(&j->phase)], error_name,
                                          j->result < 0 ? j->err.msg : "");
        if (r >= 0)
                r = sd_bus_send(c->bus, m, NULL);
        if (r < 0)
                log_warning_errno(r, "Failed to send Finished of %s", j->path);
        job_free(j);
        if (!c->stopping)
                models_scan(c, true);
}

/* --- the job object ---------------------------------------------------------------------- */

static int job_property(sd_bus *bus, const char *path, const char *iface, const char *property,
                        sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        InstallJob *j = userdata;

        if (strcmp(property, "Name") == 0)
                return sd_bus_message_append(reply, "s", j->name);
        if (strcmp(property, "State") == 0)
                return sd_bus_message_append(reply, "s", phase_names[atomic_load(&j->phase)]);
        if (strcmp(property, "Progress") == 0)
                return sd_bus_message_append(reply, "d", job_progress(j));
        if (strcmp(property, "BytesDone") == 0)
                return sd_bus_message_append(reply, "t", (uint64_t) atomic_load(&j->done_bytes));
        return sd_bus_message_append(reply, "t", j->size);
}

static int method_job_cancel(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        InstallJob *j = userdata;
        uid_t uid;
        int r;

        r = context_sender_uid(j->context, m, &uid);
        if (r < 0)
                return sd_bus_error_set_errnof(error, r, "Cannot identify the caller");
        if (uid != j->uid)
                return sd_bus_error_setf(error, AXP_ERROR_ACCESS_DENIED, "The job %s is not yours", j->path);
        job_cancel(j, "Cancel was called");
        return sd_bus_reply_method_return(m, NULL);
}

static const sd_bus_vtable job_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_PROPERTY("Name", "s", job_property, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_PROPERTY("State", "s", job_property, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("Progress", "d", job_property, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("BytesDone", "t", job_property, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("BytesTotal", "t", job_property, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_METHOD_WITH_ARGS("Cancel", SD_BUS_NO_ARGS, SD_BUS_NO_RESULT, method_job_cancel,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_SIGNAL_WITH_ARGS("Finished", SD_BUS_ARGS("s", result, "s", error, "s", message), 0),
        SD_BUS_VTABLE_END
};

void install_start(Context *c, sd_bus_message *call, int fd, int *parts, uint32_t n_parts, const char *name,
                   const char *sha256) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        axp_model_info info;
        axp_error err = {};
        struct statvfs vfs;
        InstallJob *j;
        const char *delay;
        uid_t uid;
        int r;

        bool busy = install_in_progress(c, name);
        j = busy ? NULL : calloc(1, sizeof(InstallJob));
        if (!j) {
                close(fd);
                for (uint32_t i = 0; i < n_parts; i++)
                        close(parts[i]);
                free(parts);
                if (busy)
                        return reply_error(call, -EBUSY, "'%s' is being installed already; wait for that to end", name);
                return reply_error(call, -ENOMEM, "Out of memory");
        }
        *j = (InstallJob) {
                .context = c,
                .n = ++c->last_job_n,
                .src_fd = fd,
                .part_fds = parts,
                .n_part_fds = n_parts,
                .tmp_fd = -1,
                .sent_phase = -1,
                .sent_bytes = UINT64_MAX,
        };
        LIST_PREPEND(jobs, c->install_jobs, j);
        j->name = strdup(name);
        j->owner = strdup(sd_bus_message_get_sender(call) ?: "");
        j->final_path = models_file(c, name);
        if (!j->name || !j->owner || !j->final_path || (sha256 && !(j->sha256 = strdup(sha256))) ||
            asprintf(&j->path, AXP_BUS_JOB_PREFIX "/%" PRIu64, j->n) < 0 ||
            asprintf(&j->tmp_path, "%s/" TEMP_PREFIX "%s-XXXXXX", c->config.models_dir, name) < 0) {
                j->tmp_path = NULL;
                reply_error(call, -ENOMEM, "Out of memory");
                return job_free(j);
        }
        if (access(j->final_path, F_OK) == 0) {
                reply_error(call, -EEXIST, "A model named '%s' is installed already; remove it first "
                            "('agentxpu model remove %s') or choose another name", name, name);
                return job_free(j);
        }
        r = context_sender_uid(c, call, &uid);
        if (r < 0) {
                reply_error(call, r, "Cannot identify the caller");
                return job_free(j);
        }
        j->uid = uid;

        /* Nothing is written before the file is known to be a model the engine can run. */
        if (n_parts > 0) {
                int *all = malloc((n_parts + 1) * sizeof(int));
                if (!all) {
                        reply_error(call, -ENOMEM, "Out of memory");
                        return job_free(j);
                }
                all[0] = fd;
                memcpy(all + 1, parts, n_parts * sizeof(int));
                r = axp_model_probe_fds(all, n_parts + 1, "the file", &info, &err);
                free(all);
        } else
                r = axp_model_probe_fd(fd, "the file", &info, &err);
        if (r < 0) {
                reply_error(call, bus_code(r), "%s", err.msg);
                return job_free(j);
        }
        j->size = info.size;
        if (statvfs(c->config.models_dir, &vfs) == 0 &&
            (uint64_t) vfs.f_bavail * vfs.f_frsize < j->size) {
                reply_error(call, -ENOSPC, "The models folder %s has %" PRIu64 " bytes free; %s needs %" PRIu64
                            "; free some space and install it again", c->config.models_dir,
                            (uint64_t) vfs.f_bavail * vfs.f_frsize, name, j->size);
                return job_free(j);
        }
        j->tmp_fd = mkostemp(j->tmp_path, O_CLOEXEC);
        if (j->tmp_fd < 0) {
                r = -errno;
                j->tmp_path = mfree(j->tmp_path);
                reply_error(call, r == -ENOSPC || r == -EDQUOT ? -ENOSPC : r,
                            "Cannot write in the models folder %s: %s", c->config.models_dir, strerror(-r));
                return job_free(j);
        }
        delay = getenv("AGENTXPU_TEST_COPY_DELAY_MS");
        if (delay)
                j->delay_ms = (unsigned) strtoul(delay, NULL, 10);

        r = sd_bus_add_object_vtable(c->bus, &j->object, j->path, AXP_BUS_JOB_IFACE, job_vtable, j);
        if (r >= 0)
                r = sd_bus_track_new(c->bus, &j->track, on_track, j);
        if (r >= 0)
                r = sd_bus_track_add_name(j->track, j->owner);
        if (r >= 0)
                r = sd_bus_call_method_async(c->bus, &j->check_slot, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                                             "org.freedesktop.DBus", "GetNameOwner", on_name_owner, j, "s",
                                             j->owner);
        if (r >= 0)
                r = sd_event_add_time_relative(c->event, &j->timer, CLOCK_MONOTONIC, PROGRESS_USEC, 0,
                                               on_progress_timer, j);
        if (r >= 0)
                r = -pthread_create(&j->thread, NULL, job_thread, j);
        if (r < 0) {
                reply_error(call, r, "Cannot start the installation: %s", strerror(-r));
                return job_free(j);
        }
        j->thread_running = true;
        log_info("Installing %s (%" PRIu64 " bytes, %s, %s) as %s for uid %u", name, j->size, info.arch,
                 info.types, j->path, (unsigned) uid);
        (void) sd_bus_reply_method_return(call, "o", j->path);
}

void install_cancel_all(Context *c) {
        LIST_FOREACH(jobs, j, c->install_jobs) {
                job_cancel(j, "the engine is stopping");
                if (j->thread_running) {
                        pthread_join(j->thread, NULL);
                        j->thread_running = false;
                }
        }
}

void install_free_all(Context *c) {
        while (c->install_jobs)
                job_free(c->install_jobs);
        models_clear(c);
}

