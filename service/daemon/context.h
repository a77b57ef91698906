/* SPDX-License-Identifier: MIT */
/* The daemon's state. One Context owns everything; only the event loop thread touches it
 * (the engine's threads reach it through the Bridge). */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>

#include "base/utf8.h"
#include "bridge.h"
#include "daemon-config.h"
#include "engine.h"
#include "idmap.h"
#include "list.h"

typedef struct Context Context;
typedef struct Client Client;
typedef struct Request Request;
typedef struct Flow Flow;
typedef struct AdminCall AdminCall;
typedef struct InstallJob InstallJob;

/* A model in the models folder (models.h). */
typedef struct ModelEntry {
        char *name;              /* NAME of NAME.gguf */
        axp_model_info info;
        char error[320];         /* why it cannot be used, "" if it can */
} ModelEntry;

/* A connection that submitted requests or opened flows; it lives while it has either, and
 * goes when the connection leaves the bus (NameOwnerChanged, clients_watch). */
struct Client {
        Context *context;
        char *name;              /* unique bus name */
        uid_t uid;
        sd_bus_slot *check_slot; /* GetNameOwner: did it leave before we tracked it? */
        Request *requests;       /* LIST of its requests, finished ones too */
        Flow *flows;             /* LIST */
        LIST_FIELDS(Client, clients);
};

struct Request {
        Context *context;
        Client *client;          /* NULL once its client left (orphan, cancelled) */
        Flow *flow;              /* the flow it continues, NULL if none */
        uint64_t n;              /* /org/agentxpu/Engine/request/N */
        uint64_t engine_id;
        char *path;
        char *owner;             /* unique name: destination of its signals */
        uid_t uid;
        axp_kind kind;
        bool complete;           /* made by Complete or Embed: no object, no signals, one reply */
        bool embed;              /* made by Embed: the reply is the embedding */
        float *embedding;        /* Embed: the engine's answer, n_embedding floats */
        size_t n_embedding;
        axp_req_state state;     /* as last seen by the daemon */
        bool finished;
        axp_finish_reason reason;
        axp_req_stats stats;     /* final, once finished; its tool_call and stop_word point to ours */
        char *tool_call;
        char *stop_word;

        sd_bus_message *complete_call; /* Complete: replied at finish; the request has no object */
        axp_utf8_stream utf8;    /* the engine's text, made whole characters */
        char *text;              /* Complete: the answer so far; else text not yet sent */
        size_t text_len, text_cap;
        bool logprobs_wanted;    /* option logprobs given */
        char *logprobs;          /* Complete with option logprobs: the records so far (bridge.h) */
        size_t logprobs_len, logprobs_cap;

        sd_event_source *expire; /* drops a finished request's object after the grace period */
        LIST_FIELDS(Request, requests); /* in its client's list */
};

struct Flow {
        Context *context;
        Client *client;          /* NULL once its client left or it was closed */
        uint64_t n;              /* /org/agentxpu/Engine/flow/N */
        uint64_t engine_flow;
        uid_t uid;
        Request *busy;           /* its request in flight, if any */
        bool closing;            /* closed by its owner or orphaned: close once idle */
        LIST_FIELDS(Flow, flows);
};

struct Context {
        DaemonConfig config;
        sd_event *event;
        sd_bus *bus;
        axp_engine *engine;
        Bridge bridge;

        IdMap requests;          /* by N; Complete requests are here too (no object) */
        IdMap requests_by_id;    /* unfinished, by engine id */
        IdMap flows;             /* by N, closing ones too (until the engine's flow is closed) */
        Client *clients;         /* LIST */
        uint64_t last_request_n, last_flow_n;

        AdminCall *admin_calls;  /* LIST: waiting for polkit or running */
        pthread_t loader;        /* LoadModel's worker thread */
        bool loader_running;

        InstallJob *install_jobs; /* LIST: InstallModel's jobs, copying or checking */
        uint64_t last_job_n;
        ModelEntry *models;       /* the models folder as last read, by name */
        size_t n_models;
        char *loaded_path;        /* the file of the model loaded, NULL if none or unknown */
        char *default_model;      /* the name UseModel chose (StateDirectory=), or NULL */

        /* The engine's status as it last told us (BRIDGE_STATUS), which the properties show,
         * and as last announced, to emit PropertiesChanged only on change. */
        axp_engine_status status;
        axp_engine_status status_sent;
        bool devices_changed;    /* announce Devices with the next status */

        bool trim_pending;       /* requests came and went since the heap was last trimmed */
        sd_event_source *idle_timer;
        bool bus_activated;
        bool stopping;           /* SIGTERM: no new work; exit once everything is answered */
};

/* The uid of the message's sender (cached for known clients). */
int context_sender_uid(Context *c, sd_bus_message *m, uid_t *ret);

/* Count unfinished requests of one uid (orphans included) and of everyone. */
unsigned context_count_active(Context *c, uid_t uid, unsigned *ret_total);
unsigned context_count_flows(Context *c, uid_t uid);

/* Announce changed Engine properties; re-arm or disarm the idle timer. Called after anything
 * that may change them. */
void context_changed(Context *c);
/* Only the first half: PropertiesChanged for what differs from what was last announced. */
void context_emit_status(Context *c);

/* The engine's events, from the bridge (NULL: the end of a batch). */
void context_on_engine_event(void *userdata, const BridgeEvent *ev);

/* SIGTERM: refuse new work, answer every pending call, finish every request as cancelled,
 * then leave the event loop with 0. */
void context_stop(Context *c);

void context_clear(Context *c);
