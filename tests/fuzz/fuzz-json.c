/* SPDX-License-Identifier: MIT */
/* libFuzzer target: the monitor's JSON reader (journal and suggestion-store lines), then the
 * lookups its callers make. */
#include <stddef.h>
#include <stdint.h>

#include "base/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        json_value *v = NULL;
        uint64_t u;

        if (json_parse((const char *) data, size, &v, NULL) < 0)
                return 0;
        (void) json_get_string(v, "op");
        (void) json_get_u64(v, "id", &u);
        const json_value *items = json_get(v, "listed");
        for (size_t i = 0; items && items->type == JSON_ARRAY && i < items->n; i++)
                (void) json_value_u64(items->items[i], &u);
        json_free(v);
        return 0;
}
