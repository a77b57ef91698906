/* SPDX-License-Identifier: MIT */
/* The one way into the event loop from the engine's threads: the engine's callbacks (and the
 * model loader's thread) queue events (base/queue.h) and write an eventfd; the event loop
 * thread drains the queue in order. Nothing here touches sd-bus. The engine's status comes
 * this way too: the event loop keeps its own copy and never asks the engine for it. */
#pragma once

#include <stdint.h>
#include <systemd/sd-event.h>

#include "base/queue.h"
#include "engine.h"

typedef enum BridgeEventType {
        BRIDGE_TOKEN,
        BRIDGE_FINISHED,
        BRIDGE_JOB_DONE, /* a job run on a worker thread (LoadModel) is over */
        BRIDGE_STATUS,   /* the engine's status changed */
        BRIDGE_INSTALL_DONE, /* an InstallModel job's worker is over */
        BRIDGE_LOGPROBS,     /* records of log-probabilities (bridge_logprobs_next) */
        BRIDGE_EMBEDDING,    /* an embedding: len bytes of floats in text */
} BridgeEventType;

typedef struct BridgeEvent BridgeEvent;
struct BridgeEvent {
        axp_qnode node;
        BridgeEventType type;
        uint64_t id;                 /* TOKEN, FINISHED: the engine's request id */
        axp_finish_reason reason;    /* FINISHED */
        union {
                axp_req_stats stats;         /* FINISHED */
                axp_engine_status status;    /* STATUS: a copy */
        };
        void *job;                   /* JOB_DONE: the job's own pointer */
        size_t len;                  /* TOKEN: bytes of text; LOGPROBS: of the records;
                                      * EMBEDDING: of the floats */
        char text[];                 /* TOKEN: NUL-terminated; FINISHED: the tool call, if any;
                                      * LOGPROBS: the records; EMBEDDING: the floats (unaligned:
                                      * copy them out) */
};

/* Called for each event in order, then once with NULL at the end of a batch. */
typedef void (*BridgeHandler)(void *userdata, const BridgeEvent *ev);

typedef struct Bridge {
        axp_queue events;
        int fd;                      /* eventfd */
        sd_event_source *source;
        BridgeHandler handler;
        void *userdata;
} Bridge;

int bridge_init(Bridge *b, sd_event *event, BridgeHandler handler, void *userdata);
void bridge_done(Bridge *b);

/* Callbacks for axp_engine_submit() that queue into this bridge. */
void bridge_request_cbs(Bridge *b, axp_request_cbs *ret);
/* The engine's status_changed (userdata: the Bridge). */
void bridge_status_changed(void *userdata, const axp_engine_status *status);

/* From any thread. */
void bridge_post_job_done(Bridge *b, void *job);
void bridge_post_install_done(Bridge *b, void *job);

/* LOGPROBS records, one after another: a token's (its bytes, log-probability and number of
 * alternatives) followed by its alternatives' (their bytes and log-probabilities). Each call
 * reads the next from *p (up to end) and moves *p past it; false at the end. */
typedef struct BridgeLogprob {
        const char *bytes;
        uint32_t len;
        float logprob;
        uint32_t n_alt; /* a token's record: the alternatives that follow it */
} BridgeLogprob;
bool bridge_logprob_next(const char **p, const char *end, bool token, BridgeLogprob *ret);

/* Handle everything queued now (the event loop calls this when the eventfd fires; shutdown
 * calls it after the engine stopped to deliver the last events). */
void bridge_dispatch(Bridge *b);
