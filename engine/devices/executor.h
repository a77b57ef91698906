/* SPDX-License-Identifier: MIT */
/* Running the scheduler on the wall clock with real devices: a mailbox the scheduler's
 * thread sleeps on (until a message or its timer), and one executor per device -- a thread
 * with a FIFO of tasks that runs each on the device and posts its completion to the
 * mailbox. */
#pragma once

#include <stdbool.h>

#include "base/queue.h"
#include "device.h"
#include "heg/heg.h"
#include "thread-class.h"

typedef struct axp_mailbox axp_mailbox;

typedef enum axp_mail_type {
        AXP_MAIL_DONE, /* a device finished a task */
        AXP_MAIL_CALL, /* run fn(arg) on the scheduler's thread */
} axp_mail_type;

typedef struct axp_mail {
        axp_mail_type type;
        int dev, rc;
        /* AXP_MAIL_DONE: how long the device really worked on a background task (the
         * proactive budgets charge it), as the CPU time its threads used (the executor's and
         * the device's helpers', summed, divided by their number: one second is all of them
         * for a second); -1 for other tasks, on a device whose work is not on the CPU, or
         * where the clocks cannot be read (the task's wall time then counts). */
        double busy_s;
        char err[320];
        void (*fn)(void *arg);
        void *arg;
        bool *call_done; /* AXP_MAIL_CALL: set once fn has run */
        axp_qnode node;
} axp_mail;

int axp_mailbox_new(axp_mailbox **ret);
/* Frees mails still queued. */
void axp_mailbox_free(axp_mailbox *mb);
/* Takes ownership of m (malloc'd). */
void axp_mailbox_post(axp_mailbox *mb, axp_mail *m);
/* The next mail, or NULL once the deadline (axp_now() seconds; INFINITY: none) has passed.
 * The caller frees it. */
axp_mail *axp_mailbox_wait(axp_mailbox *mb, double deadline);
/* Run fn(arg) on the thread that reads the mailbox and wait until it has run. Must not be
 * called from that thread. -ENOMEM if the mail cannot be made. */
int axp_mailbox_call(axp_mailbox *mb, void (*fn)(void *arg), void *arg);
/* Mark a call's work done: wakes axp_mailbox_call. Called by the reader after fn ran. */
void axp_mailbox_call_done(axp_mailbox *mb, axp_mail *m);

typedef struct axp_executor axp_executor;

/* Starts the device's thread; completions go to mb as AXP_MAIL_DONE with dev = index. */
int axp_executor_new(axp_device *d, int index, axp_mailbox *mb, axp_executor **ret,
                     axp_error *err);
/* Queue a task (copied). A task that is not background work raises the device's threads to
 * normal priority at once, before the executor's thread wakes for it. */
int axp_executor_submit(axp_executor *ex, const axp_task *t);
/* Run background tasks (axp_task.background) in class c: the executor's thread and the
 * device's helper threads (axp_device_threads) go down to it for each such task and back to
 * normal priority for any other. AXP_BG_NONE (the default): every task at normal priority.
 * Any thread may call it. */
void axp_executor_set_background(axp_executor *ex, axp_bg_class c);
/* Reactive work waits for this device: the background tasks submitted so far, the one in
 * progress and any the executor's thread has not started yet, run at normal priority (the
 * next background task submitted goes down again). Any thread may call it. */
void axp_executor_hurry(axp_executor *ex);
/* Runs the queued tasks to the end, then stops the thread. */
void axp_executor_free(axp_executor *ex);
