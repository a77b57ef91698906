/* SPDX-License-Identifier: MIT */
/* Background and normal scheduling classes of device threads (thread-class.h). */
#include "thread-class.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define IOPRIO_WHO_PROCESS 1
#define IOPRIO_CLASS_SHIFT 13
#define IOPRIO_CLASS_IDLE 3
#define BG_NICE 19

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static axp_bg_class probed = AXP_BG_NONE;
static const char *probe_why = "not probed";
/* the process's own class, which threads created by it inherit */
static int normal_policy = SCHED_OTHER, normal_nice = 0, normal_ioprio = 0;

const char *axp_bg_class_name(axp_bg_class c) {
        switch (c) {
        case AXP_BG_IDLE:
                return "idle";
        case AXP_BG_NICE:
                return "nice";
        case AXP_BG_NONE:
                break;
        }
        return "none";
}

static int gettid_(void) {
        return (int) syscall(SYS_gettid);
}

static int set_policy(int tid, int policy) {
        struct sched_param sp = { 0 };
        return sched_setscheduler(tid, policy, &sp) < 0 ? -errno : 0;
}

static int set_nice(int tid, int nice) {
        return setpriority(PRIO_PROCESS, (id_t) tid, nice) < 0 ? -errno : 0;
}

static int set_ioprio(int tid, int ioprio) {
        return syscall(SYS_ioprio_set, IOPRIO_WHO_PROCESS, tid, ioprio) < 0 ? -errno : 0;
}

int axp_thread_set_background(int tid, axp_bg_class c, bool background) {
        int r = 0;

        if (tid == 0)
                tid = gettid_();
        switch (c) {
        case AXP_BG_IDLE:
                r = set_policy(tid, background ? SCHED_IDLE : normal_policy);
                break;
        case AXP_BG_NICE:
                r = set_nice(tid, background ? BG_NICE : normal_nice);
                break;
        case AXP_BG_NONE:
                return 0;
        }
        /* The weights' page faults are the model reads of a step: the I/O class follows (best
         * effort: without a block device scheduler that honours it, nothing changes). */
        (void) set_ioprio(tid, background ? IOPRIO_CLASS_IDLE << IOPRIO_CLASS_SHIFT : normal_ioprio);
        return r;
}

double axp_thread_cpu_s(int tid) {
        struct timespec ts;
        /* the kernel's per-thread CPU clock of another thread of this process (what
         * pthread_getcpuclockid() returns, reached by thread id): CPUCLOCK_SCHED (2) with the
         * per-thread bit (4), the id complemented above them */
        clockid_t id = tid ? (clockid_t) ((~(unsigned) tid << 3) | 6) : CLOCK_THREAD_CPUTIME_ID;
        if (clock_gettime(id, &ts) < 0)
                return -1;
        return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}

/* Can this thread go down to class c and come back? It is a throwaway thread. */
static bool try_class(axp_bg_class c) {
        int tid = gettid_();
        if (c == AXP_BG_IDLE)
                return set_policy(tid, SCHED_IDLE) == 0 && set_policy(tid, normal_policy) == 0;
        return set_nice(tid, BG_NICE) == 0 && set_nice(tid, normal_nice) == 0;
}

static void *probe_main(void *arg) {
        const char *want = getenv("AXP_BACKGROUND_CLASS");
        bool idle_ok = !want || strcmp(want, "idle") == 0;
        bool nice_ok = !want || strcmp(want, "nice") == 0;

        (void) arg;
        if (want && strcmp(want, "none") == 0) {
                probe_why = "AXP_BACKGROUND_CLASS=none";
                return NULL;
        }
        if (normal_policy == SCHED_IDLE || normal_nice >= BG_NICE) {
                probe_why = "the engine itself already runs at the lowest priority";
                return NULL;
        }
        if (normal_policy != SCHED_OTHER && normal_policy != SCHED_BATCH) {
                probe_why = "the engine runs at a real-time policy";
                return NULL;
        }
        if (idle_ok && try_class(AXP_BG_IDLE)) {
                probed = AXP_BG_IDLE;
                return NULL;
        }
        if (nice_ok && try_class(AXP_BG_NICE)) {
                probed = AXP_BG_NICE;
                return NULL;
        }
        probe_why = "a thread may lower its priority but not raise it again here (that needs "
                    "CAP_SYS_NICE or RLIMIT_NICE of at least 20, LimitNICE=+0 in a systemd unit)";
        return NULL;
}

static void probe(void) {
        pthread_t t;
        int r;

        errno = 0;
        normal_policy = sched_getscheduler(0);
        if (normal_policy < 0)
                normal_policy = SCHED_OTHER;
        errno = 0;
        r = getpriority(PRIO_PROCESS, (id_t) gettid_());
        normal_nice = errno ? 0 : r;
        r = (int) syscall(SYS_ioprio_get, IOPRIO_WHO_PROCESS, gettid_());
        normal_ioprio = r > 0 ? r : 0;
        /* the probing thread inherits this thread's class, as pool threads do */
        if (pthread_create(&t, NULL, probe_main, NULL) != 0) {
                probe_why = "cannot start a thread";
                return;
        }
        pthread_join(t, NULL);
}

axp_bg_class axp_bg_class_probe(const char **ret_why) {
        pthread_once(&probe_once, probe);
        if (ret_why)
                *ret_why = probed == AXP_BG_NONE ? probe_why : "";
        return probed;
}
