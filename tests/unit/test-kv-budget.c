/* SPDX-License-Identifier: MIT */
/* heg/kv-budget.h: the budget of KV-cache memory counts each hold once, refuses what does not
 * fit (busy) or could never fit (too big) with messages that say so, grows and settles a
 * flow's hold, chooses auto from the machine's and the model's memory, and stops the program
 * on a hold released twice or never taken. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "heg/kv-budget.h"
#include "test.h"

#define MiB (UINT64_C(1) << 20)
#define GiB (UINT64_C(1) << 30)

static void test_reserve_and_release(void) {
        axp_kv_budget b = { .limit = 1536 * MiB };
        axp_kv_hold h[4] = {};
        axp_error err = {};

        CHECK_EQ_INT(axp_kv_budget_reserve(&b, &h[0], 512 * MiB, &err), 0);
        CHECK_EQ_INT(axp_kv_budget_reserve(&b, &h[1], 512 * MiB, &err), 0);
        CHECK_EQ_INT(axp_kv_budget_reserve(&b, &h[2], 512 * MiB, &err), 0);
        CHECK(b.used == 1536 * MiB && b.holders == 3);
        CHECK(h[2].held && h[2].bytes == 512 * MiB);

        /* full: busy, saying how full and how much this one needs; nothing changes */
        CHECK_EQ_INT(axp_kv_budget_reserve(&b, &h[3], 1, &err), -EBUSY);
        CHECK_MSG(strcmp(err.msg, "the KV-cache budget (KVMemory=1.5 GiB) is full: 3 requests and flows hold "
                                  "1.5 GiB; this one needs 1 bytes; try again when one ends") == 0,
                  "%s", err.msg);
        CHECK(!h[3].held && h[3].bytes == 0 && b.used == 1536 * MiB && b.holders == 3);

        /* one ends: its room is free again, to the byte */
        axp_kv_budget_release(&b, &h[1]);
        CHECK(!h[1].held && h[1].bytes == 0 && b.used == 1024 * MiB && b.holders == 2);
        CHECK_EQ_INT(axp_kv_budget_reserve(&b, &h[3], 512 * MiB + 1, &err), -EBUSY);
        CHECK_MSG(strstr(err.msg, ": 2 requests and flows hold 1.0 GiB; this one needs 512.0 MiB;"), "%s", err.msg);
        CHECK_EQ_INT(axp_kv_budget_reserve(&b, &h[3], 512 * MiB, &err), 0);
        CHECK(b.used == b.limit);

        for (int i = 0; i < 4; i++)
                if (h[i].held)
                        axp_kv_budget_release(&b, &h[i]);
        CHECK(b.used == 0 && b.holders == 0);

        /* one holder: said in the singular */
        CHECK_EQ_INT(axp_kv_budget_reserve(&b, &h[0], GiB, &err), 0);
        CHECK_EQ_INT(axp_kv_budget_reserve(&b, &h[1], GiB, &err), -EBUSY);
        CHECK_MSG(strstr(err.msg, "is full: 1 request or flow holds 1.0 GiB; this one needs 1.0 GiB"), "%s", err.msg);
        axp_kv_budget_release(&b, &h[0]);
        CHECK(b.used == 0 && b.holders == 0);
}

/* More than the whole budget: too big, even with nothing else held, never busy. */
static void test_never_fits(void) {
        axp_kv_budget b = { .limit = 256 * MiB };
        axp_kv_hold h = {}, other = {};
        axp_error err = {};

        CHECK_EQ_INT(axp_kv_budget_reserve(&b, &h, 512 * MiB, &err), -E2BIG);
        CHECK_MSG(strcmp(err.msg, "this request needs 512.0 MiB of KV cache, more than the whole KV-cache budget "
                                  "(KVMemory=256.0 MiB) holds; ask for fewer tokens (max_tokens) or a shorter prompt") == 0,
                  "%s", err.msg);
        CHECK(!h.held && b.used == 0 && b.holders == 0);
        /* the whole budget fits when nothing else is held, and is then busy for more */
        CHECK_EQ_INT(axp_kv_budget_reserve(&b, &other, 200 * MiB, &err), 0);
        CHECK_EQ_INT(axp_kv_budget_reserve(&b, &h, 256 * MiB, &err), -EBUSY);
        CHECK_EQ_INT(axp_kv_budget_reserve(&b, &h, 257 * MiB, &err), -E2BIG);
        axp_kv_budget_release(&b, &other);
        CHECK_EQ_INT(axp_kv_budget_reserve(&b, &h, 256 * MiB, &err), 0);
        axp_kv_budget_release(&b, &h);
        CHECK(b.used == 0 && b.holders == 0);
}

/* A flow: between turns it holds what its cache holds; a turn raises the hold to the turn's
 * worst case, asking only for the difference; after the turn it settles to what is held. */
static void test_flow_hold(void) {
        axp_kv_budget b = { .limit = 100 * MiB };
        axp_kv_hold flow = {}, req = {};
        axp_error err = {};

        CHECK_EQ_INT(axp_kv_budget_reserve(&b, &flow, 40 * MiB, &err), 0);
        axp_kv_budget_set(&b, &flow, 30 * MiB); /* the turn ended, its cache holds 30 */
        CHECK(b.used == 30 * MiB && b.holders == 1);
        CHECK_EQ_INT(axp_kv_budget_reserve(&b, &req, 60 * MiB, &err), 0);
        /* the next turn needs 50: 20 more, with 10 free */
        CHECK_EQ_INT(axp_kv_budget_reserve(&b, &flow, 50 * MiB, &err), -EBUSY);
        CHECK_MSG(strstr(err.msg, "is full: 1 request or flow holds 60.0 MiB; this one needs 50.0 MiB"), "%s", err.msg);
        CHECK(flow.held && flow.bytes == 30 * MiB && b.used == 90 * MiB && b.holders == 2);
        CHECK_EQ_INT(axp_kv_budget_reserve(&b, &flow, 40 * MiB, &err), 0);
        CHECK(flow.bytes == 40 * MiB && b.used == 100 * MiB && b.holders == 2);
        /* a reservation never shrinks a hold: less than held is already reserved */
        CHECK_EQ_INT(axp_kv_budget_reserve(&b, &flow, 10 * MiB, &err), 0);
        CHECK(flow.bytes == 40 * MiB);
        /* what a cache holds is counted even beyond the limit (it is in use) */
        axp_kv_budget_set(&b, &flow, 45 * MiB);
        CHECK(b.used == 105 * MiB);
        axp_kv_budget_release(&b, &req);
        axp_kv_budget_release(&b, &flow);
        CHECK(b.used == 0 && b.holders == 0);
        /* set takes a hold not taken */
        axp_kv_budget_set(&b, &flow, 5 * MiB);
        CHECK(flow.held && b.used == 5 * MiB && b.holders == 1);
        axp_kv_budget_release(&b, &flow);
        CHECK(b.used == 0 && b.holders == 0);
}

static void test_auto(void) {
        /* half of what the weights leave */
        CHECK(axp_kv_budget_auto(16 * GiB, 4 * GiB) == 6 * GiB);
        CHECK(axp_kv_budget_auto(8 * GiB, 0) == 4 * GiB);
        /* never below the floor: a big model on a small machine, a machine unknown (0) */
        CHECK(axp_kv_budget_auto(2 * GiB, 2 * GiB) == AXP_KV_BUDGET_AUTO_FLOOR);
        CHECK(axp_kv_budget_auto(GiB, 8 * GiB) == AXP_KV_BUDGET_AUTO_FLOOR);
        CHECK(axp_kv_budget_auto(0, 0) == AXP_KV_BUDGET_AUTO_FLOOR);
        CHECK(AXP_KV_BUDGET_AUTO_FLOOR == 256 * MiB);
        uint64_t phys = axp_physical_memory();
        CHECK(phys >= 64 * MiB);
        CHECK(axp_kv_budget_auto(phys, 0) >= phys / 2 - 1);
}

static void put_file(const char *dir, const char *name, const char *text) {
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", dir, name);
        FILE *f = fopen(path, "w");
        CHECK(f && fputs(text, f) >= 0 && fclose(f) == 0);
}

/* A service or slice with MemoryMax= (cgroup v2 memory.max) bounds what auto takes. */
static void test_memory_limit(void) {
        char dir[] = "/tmp/axp-cgroup-XXXXXX", path[600], self[600];
        CHECK(mkdtemp(dir) != NULL);
        snprintf(path, sizeof(path), "%s/agentxpu.slice", dir);
        CHECK(mkdir(path, 0700) == 0);
        snprintf(path, sizeof(path), "%s/agentxpu.slice/agentxpu-engine.service", dir);
        CHECK(mkdir(path, 0700) == 0);
        snprintf(self, sizeof(self), "%s/self-cgroup", dir);
        put_file(dir, "self-cgroup", "0::/agentxpu.slice/agentxpu-engine.service\n");

        /* no memory.max anywhere, or "max": the machine's */
        CHECK(axp_memory_limit_at(self, dir, 16 * GiB) == 16 * GiB);
        put_file(dir, "agentxpu.slice/agentxpu-engine.service/memory.max", "max\n");
        CHECK(axp_memory_limit_at(self, dir, 16 * GiB) == 16 * GiB);
        /* the slice's limit applies to the service inside it; the lower one wins */
        put_file(dir, "agentxpu.slice/memory.max", "8589934592\n");
        CHECK(axp_memory_limit_at(self, dir, 16 * GiB) == 8 * GiB);
        put_file(dir, "agentxpu.slice/agentxpu-engine.service/memory.max", "4294967296\n");
        CHECK(axp_memory_limit_at(self, dir, 16 * GiB) == 4 * GiB);
        CHECK(axp_memory_limit_at(self, dir, 2 * GiB) == 2 * GiB);
        CHECK(axp_kv_budget_auto(axp_memory_limit_at(self, dir, 16 * GiB), 2 * GiB) == GiB);
        /* a machine unknown (0): the group's limit */
        CHECK(axp_memory_limit_at(self, dir, 0) == 4 * GiB);
        /* cgroup v1 only, or no such file: the machine's */
        put_file(dir, "self-cgroup", "12:memory:/agentxpu.slice\n");
        CHECK(axp_memory_limit_at(self, dir, 16 * GiB) == 16 * GiB);
        CHECK(axp_memory_limit_at("/nonexistent/cgroup", dir, 16 * GiB) == 16 * GiB);
        /* a path that climbs out of the mount is not followed */
        put_file(dir, "self-cgroup", "0::/../etc\n");
        CHECK(axp_memory_limit_at(self, dir, 16 * GiB) == 16 * GiB);
        /* this process: at most the machine's */
        CHECK(axp_memory_limit() <= axp_physical_memory() || axp_physical_memory() == 0);

        char cmd[700];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        CHECK(system(cmd) == 0);
}

static void test_format_bytes(void) {
        char buf[32];
        axp_format_bytes(0, buf, sizeof(buf));
        CHECK(strcmp(buf, "0 bytes") == 0);
        axp_format_bytes(1023, buf, sizeof(buf));
        CHECK(strcmp(buf, "1023 bytes") == 0);
        axp_format_bytes(1536, buf, sizeof(buf));
        CHECK(strcmp(buf, "1.5 KiB") == 0);
        axp_format_bytes(512 * MiB, buf, sizeof(buf));
        CHECK(strcmp(buf, "512.0 MiB") == 0);
        axp_format_bytes(6 * GiB, buf, sizeof(buf));
        CHECK(strcmp(buf, "6.0 GiB") == 0);
}

#ifndef NDEBUG
/* fn run in a child stops it with SIGABRT (an assert) */
static bool aborts(void (*fn)(void)) {
        pid_t pid = fork();
        int status;

        if (pid == 0) {
                /* no core dumps, no assert message to read */
                fclose(stderr);
                fn();
                _exit(0);
        }
        if (pid < 0 || waitpid(pid, &status, 0) != pid)
                return false;
        return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
}

static void release_twice(void) {
        axp_kv_budget b = { .limit = GiB };
        axp_kv_hold h = {};
        (void) axp_kv_budget_reserve(&b, &h, MiB, NULL);
        axp_kv_budget_release(&b, &h);
        axp_kv_budget_release(&b, &h);
}

static void release_copy(void) {
        /* two holds that claim one reservation: the second release finds nothing to give */
        axp_kv_budget b = { .limit = GiB };
        axp_kv_hold h = {}, copy;
        (void) axp_kv_budget_reserve(&b, &h, MiB, NULL);
        copy = h;
        axp_kv_budget_release(&b, &h);
        axp_kv_budget_release(&b, &copy);
}

static void release_never_taken(void) {
        axp_kv_budget b = { .limit = GiB };
        axp_kv_hold h = {};
        axp_kv_budget_release(&b, &h);
}

static void release_fine(void) {
        axp_kv_budget b = { .limit = GiB };
        axp_kv_hold h = {};
        (void) axp_kv_budget_reserve(&b, &h, MiB, NULL);
        axp_kv_budget_release(&b, &h);
}

static void test_misuse_aborts(void) {
        CHECK(aborts(release_twice));
        CHECK(aborts(release_copy));
        CHECK(aborts(release_never_taken));
        CHECK(!aborts(release_fine));
}
#endif

int main(void) {
        RUN(test_reserve_and_release);
        RUN(test_never_fits);
        RUN(test_flow_hold);
        RUN(test_auto);
        RUN(test_memory_limit);
        RUN(test_format_bytes);
#ifndef NDEBUG
        RUN(test_misuse_aborts);
#endif
        TEST_EXIT();
}
