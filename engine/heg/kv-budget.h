/* SPDX-License-Identifier: MIT */
/* The engine's budget of KV-cache memory (KVMemory= in engine.conf): what every request and
 * open flow may hold together. A request reserves its worst case when it is accepted and
 * gives it back when it ends; a flow holds what its cache holds between turns and, for a
 * turn, the most that turn can grow it to. A submission that does not fit is refused at once
 * (-EBUSY, to retry later), one that could not fit even alone as too big (-E2BIG).
 *
 * The accounting checks itself: each hold is taken once and released once, and the budget
 * counts its holders, so a release of a hold not taken, a second release or a hold never
 * released (the engine asserts none is left once every request and flow is gone) trips an
 * assert rather than drifting. Not thread-safe: the engine's thread owns it. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/util.h"

typedef struct axp_kv_budget {
        uint64_t limit;   /* bytes; 0: none yet (no model: nothing can be reserved) */
        uint64_t used;    /* bytes held, the sum of the holds */
        unsigned holders; /* holds taken and not released */
} axp_kv_budget;

/* What one request or flow holds. Zeroed: nothing. */
typedef struct axp_kv_hold {
        uint64_t bytes;
        bool held;
} axp_kv_hold;

/* KVMemory=auto: half of the memory that the model's weights leave of what the engine may use
 * (axp_memory_limit), (phys_bytes - model_bytes) / 2, and never below AXP_KV_BUDGET_AUTO_FLOOR;
 * the other half stays for the desktop and the page cache. */
#define AXP_KV_BUDGET_AUTO_FLOOR (UINT64_C(256) << 20)
uint64_t axp_kv_budget_auto(uint64_t phys_bytes, uint64_t model_bytes);

/* What this process may use: `phys`, or less where its control group (v2) or one above it
 * sets memory.max (MemoryMax= of its service or slice). `self_cgroup` is /proc/self/cgroup,
 * `root` the cgroup file system's mount (/sys/fs/cgroup); files missing or unreadable, or
 * "max", limit nothing. */
uint64_t axp_memory_limit_at(const char *self_cgroup, const char *root, uint64_t phys);
/* axp_memory_limit_at for this process and this machine */
uint64_t axp_memory_limit(void);

/* Reserve `bytes` for h. A hold already taken (a flow's, between turns) grows to `bytes`
 * (never shrinks here), asking the budget only for the difference. -EBUSY: the budget is
 * full now; -E2BIG: `bytes` exceed the whole budget; both say so in err, and leave h and
 * the budget as they were. */
int axp_kv_budget_reserve(axp_kv_budget *b, axp_kv_hold *h, uint64_t bytes, axp_error *err);

/* Set a taken hold to `bytes` (a flow's cache after a turn: what it holds now), or take it
 * if it was not: this never refuses (the memory is already in use). */
void axp_kv_budget_set(axp_kv_budget *b, axp_kv_hold *h, uint64_t bytes);

/* Give a taken hold back; h is zeroed. */
void axp_kv_budget_release(axp_kv_budget *b, axp_kv_hold *h);
