/* SPDX-License-Identifier: MIT */
#include "kv-budget.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/parse.h"

uint64_t axp_memory_limit_at(const char *self_cgroup, const char *root, uint64_t phys) {
        _cleanup_free_ char *text = NULL;
        size_t len;
        axp_error err = {};
        uint64_t limit = phys;

        /* cgroup v2: the one line "0::/PATH" */
        if (axp_read_file(self_cgroup, 64 << 10, &text, &len, &err) < 0)
                return limit;
        const char *line = strstr(text, "0::/");
        if (!line || (line != text && line[-1] != '\n'))
                return limit;
        _cleanup_free_ char *path = strndup(line + 3, strcspn(line + 3, "\n"));
        if (!path || strstr(path, "/.."))
                return limit;
        /* the group's own limit and every one above it */
        for (char *end = path + strlen(path);;) {
                _cleanup_free_ char *file = NULL, *value = NULL;
                uint64_t v;
                *end = 0;
                if (asprintf(&file, "%s%s/memory.max", root, path) >= 0 &&
                    axp_read_file(file, 64, &value, &len, &err) == 0) {
                        value[strcspn(value, "\n")] = 0;
                        if (axp_parse_u64(value, 1, UINT64_MAX, &v) == 0 && (limit == 0 || v < limit))
                                limit = v;
                }
                if (end == path)
                        break;
                end = strrchr(path, '/');
        }
        return limit;
}

uint64_t axp_memory_limit(void) {
        return axp_memory_limit_at("/proc/self/cgroup", "/sys/fs/cgroup", axp_physical_memory());
}

uint64_t axp_kv_budget_auto(uint64_t phys_bytes, uint64_t model_bytes) {
        uint64_t left = phys_bytes > model_bytes ? phys_bytes - model_bytes : 0;
        return MAX(left / 2, AXP_KV_BUDGET_AUTO_FLOOR);
}

static void check(const axp_kv_budget *b) {
        assert(b->holders > 0 || b->used == 0);
}

int axp_kv_budget_reserve(axp_kv_budget *b, axp_kv_hold *h, uint64_t bytes, axp_error *err) {
        const uint64_t have = h->held ? h->bytes : 0;
        char need_s[32], limit_s[32], used_s[32];

        check(b);
        assert(!h->held || b->holders > 0);
        assert(b->used >= have);
        if (h->held && bytes <= h->bytes)
                return 0;
        axp_format_bytes(bytes, need_s, sizeof(need_s));
        axp_format_bytes(b->limit, limit_s, sizeof(limit_s));
        if (bytes > b->limit)
                return axp_errorf(err, -E2BIG,
                                  "this request needs %s of KV cache, more than the whole KV-cache budget "
                                  "(KVMemory=%s) holds; ask for fewer tokens (max_tokens) or a shorter prompt",
                                  need_s, limit_s);
        if (b->used - have + bytes > b->limit) {
                const unsigned others = b->holders - (h->held ? 1 : 0);
                axp_format_bytes(b->used - have, used_s, sizeof(used_s));
                return axp_errorf(err, -EBUSY,
                                  "the KV-cache budget (KVMemory=%s) is full: %u %s %s; this one needs %s; "
                                  "try again when one ends",
                                  limit_s, others, others == 1 ? "request or flow holds" : "requests and flows hold",
                                  used_s, need_s);
        }
        axp_kv_budget_set(b, h, bytes);
        return 0;
}

void axp_kv_budget_set(axp_kv_budget *b, axp_kv_hold *h, uint64_t bytes) {
        check(b);
        if (!h->held) {
                b->holders++;
                *h = (axp_kv_hold) { .held = true };
        }
        assert(b->used >= h->bytes);
        b->used = b->used - h->bytes + bytes;
        h->bytes = bytes;
}

void axp_kv_budget_release(axp_kv_budget *b, axp_kv_hold *h) {
        check(b);
        assert(h->held);
        assert(b->holders > 0 && b->used >= h->bytes);
        b->holders--;
        b->used -= h->bytes;
        *h = (axp_kv_hold) { 0 };
        check(b);
}
