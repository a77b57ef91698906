/* SPDX-License-Identifier: MIT */
/* Request objects, /org/agentxpu/Engine/request/N, in the manner of systemd's jobs: the
 * submitting call returns the path at once; the object streams Token signals to its owner
 * and ends with Finished. A finished object stays for the configured grace period (so its
 * owner can still read Stats), or until its owner leaves the bus. */
#pragma once

#include "context.h"

extern const sd_bus_vtable request_vtable[];

/* Register the request objects' fallback vtable and node enumerator. */
int request_register(Context *c);

/* A new request of `cl`, numbered and in the daemon's table, not yet in the engine. */
int request_new(Context *c, Client *cl, axp_kind kind, Request **ret);
/* The engine accepted it under `engine_id`. */
int request_started(Request *r, uint64_t engine_id);
void request_free(Request *r);

/* The owner left: cancel it; it is freed once the engine confirms. */
void request_orphan(Request *r);
int request_cancel(Request *r);

void request_on_token(Request *r, const char *text, size_t len);
/* The log-probabilities of tokens whose text comes next (bridge.h's records) */
void request_on_logprobs(Request *r, const char *records, size_t len);
/* An Embed request's embedding: n floats at v (unaligned), kept for the reply */
void request_on_embedding(Request *r, const void *v, size_t n);
void request_on_finished(Request *r, axp_finish_reason reason, const axp_req_stats *stats);

/* Append the stats a{sv} (with `reason` first when not NULL, and "logprobs" when records are
 * given). */
int stats_append(sd_bus_message *m, const axp_req_stats *st, bool with_error, const char *reason,
                 const char *logprobs, size_t logprobs_len);
