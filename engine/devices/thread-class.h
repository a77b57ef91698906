/* SPDX-License-Identifier: MIT */
/* The scheduling class of the threads that run device work on the CPU. A step of proactive
 * requests only is background work: its executor and pool threads run it at an idle class
 * (SCHED_IDLE, or nice 19 where that is refused) with their I/O (the weights' page faults)
 * in the idle I/O class, so that every other program on the machine goes first; a step with
 * reactive work runs at the process's own priority.
 *
 * Going down is always allowed; coming back is not: the kernel lets a thread leave SCHED_IDLE
 * or lower its nice value only with CAP_SYS_NICE or an RLIMIT_NICE that allows the old nice
 * value (20 - nice, so 20 for nice 0; the engine's systemd unit sets LimitNICE=+0). A class
 * the process could not leave again is never used, since reactive work must not be stuck
 * in it: without the permission background work runs at normal priority. */
#pragma once

#include <stdbool.h>

typedef enum axp_bg_class {
        AXP_BG_NONE, /* background work runs at normal priority */
        AXP_BG_IDLE, /* SCHED_IDLE */
        AXP_BG_NICE, /* nice 19, where SCHED_IDLE is refused */
} axp_bg_class;

/* "none", "idle", "nice". */
const char *axp_bg_class_name(axp_bg_class c);

/* What this process may use, found once (on a thread of its own, which goes down and back
 * up) and then remembered; with it the process's normal policy, nice value and I/O priority,
 * as threads created from now on inherit them. AXP_BACKGROUND_CLASS=idle|nice|none in the
 * environment limits the choice (tests, benchmarks). *ret_why (may be NULL) says why, for
 * AXP_BG_NONE. */
axp_bg_class axp_bg_class_probe(const char **ret_why);

/* Put thread tid (a gettid() value; 0: the calling thread) in class c for background work,
 * its I/O in the idle I/O class; or, !background, back to the normal policy, nice value and
 * I/O priority. Negative errno if the kernel refused (the thread keeps its class). */
int axp_thread_set_background(int tid, axp_bg_class c, bool background);

/* The CPU time thread tid (a gettid() value of this process; 0: the calling thread) has
 * used, in seconds; -1 if it cannot be read (the thread has ended). */
double axp_thread_cpu_s(int tid);
