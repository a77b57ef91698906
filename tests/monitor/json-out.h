/* SPDX-License-Identifier: MIT */
/* JSON string output for the test tools. */
#pragma once

#include <glib.h>

static inline void json_out_string(GString *s, const char *v) {
        g_string_append_c(s, '"');
        for (const char *p = v ? v : ""; *p; p++) {
                unsigned char c = (unsigned char) *p;
                if (c == '"' || c == '\\')
                        g_string_append_printf(s, "\\%c", c);
                else if (c == '\n')
                        g_string_append(s, "\\n");
                else if (c < 0x20)
                        g_string_append_printf(s, "\\u%04x", c);
                else
                        g_string_append_c(s, (char) c);
        }
        g_string_append_c(s, '"');
}
