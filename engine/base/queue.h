/* SPDX-License-Identifier: MIT */
/* A FIFO between threads: intrusive (the queued struct holds an axp_qnode; container_of()
 * gets the struct back), under a mutex, with a condition variable for readers that wait on
 * it. A reader that waits elsewhere -- an event loop watching an eventfd the writer pokes --
 * takes what is there with axp_queue_pop_all(). Used by the engine's mailbox, the devices'
 * executors and the daemon's bridge from the engine's threads to its event loop. */
#pragma once

#include <pthread.h>
#include <stdbool.h>

#include "util.h"

typedef struct axp_qnode {
        struct axp_qnode *next;
} axp_qnode;

typedef struct axp_queue {
        pthread_mutex_t lock;
        pthread_cond_t cond; /* a node arrived, or the queue closed; on CLOCK_MONOTONIC */
        axp_qnode *head, *tail;
        bool closed;
} axp_queue;

void axp_queue_init(axp_queue *q);
/* Nodes still queued stay the caller's: take them with axp_queue_pop_all() first. */
void axp_queue_done(axp_queue *q);

/* Append n and wake a waiting reader. -ESHUTDOWN, and n not queued, once closed. */
int axp_queue_push(axp_queue *q, axp_qnode *n);

/* The oldest node, waiting for one until `deadline` (axp_now() seconds; INFINITY: no limit;
 * a time already past: no wait). NULL when the deadline passes first, or when the queue is
 * closed and empty. */
axp_qnode *axp_queue_pop(axp_queue *q, double deadline);

/* Everything queued, oldest first (linked by next), without waiting; NULL if nothing. */
axp_qnode *axp_queue_pop_all(axp_queue *q);

/* No more pushes; readers get what is left, then NULL. */
void axp_queue_close(axp_queue *q);
