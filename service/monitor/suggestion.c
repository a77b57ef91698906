/* SPDX-License-Identifier: MIT */
#include "suggestion.h"

#include <errno.h>
#include <string.h>

#include "base/json.h"

const char *const suggestion_kinds[] = { "summary", "explanation", "next-step", "warning", NULL };

void suggestion_clear(Suggestion *s) {
        g_clear_pointer(&s->title, g_free);
        g_clear_pointer(&s->body, g_free);
        s->kind = NULL;
}

char *suggestion_schema(guint title_max_length, guint body_max_length) {
        GString *s = g_string_new(NULL);

        g_string_append_printf(s,
                               "{\"type\":\"object\",\"properties\":{"
                               "\"title\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":%u},"
                               "\"body\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":%u},"
                               "\"kind\":{\"enum\":[",
                               title_max_length, body_max_length);
        for (size_t i = 0; suggestion_kinds[i]; i++)
                g_string_append_printf(s, "%s\"%s\"", i ? "," : "", suggestion_kinds[i]);
        g_string_append(s, "]}},\"required\":[\"title\",\"body\",\"kind\"],"
                           "\"additionalProperties\":false}");
        return g_string_free(s, FALSE);
}

static bool blank(const char *s) {
        for (; *s; s++)
                if (!g_ascii_isspace(*s))
                        return false;
        return true;
}

static int field(const json_value *obj, const char *key, guint max, char **ret, axp_error *err) {
        const char *v = json_get_string(obj, key);

        if (!v)
                return axp_errorf(err, -EBADMSG, "the answer has no string \"%s\"", key);
        if (blank(v))
                return axp_errorf(err, -EBADMSG, "the answer's \"%s\" is blank", key);
        if (!g_utf8_validate(v, -1, NULL) || g_utf8_strlen(v, -1) > (glong) max)
                return axp_errorf(err, -EBADMSG, "the answer's \"%s\" is longer than %u characters", key,
                                  max);
        *ret = g_strstrip(g_strdup(v));
        return 0;
}

int suggestion_parse(const char *text, size_t len, guint title_max_length, guint body_max_length,
                     Suggestion *ret, axp_error *err) {
        _cleanup_json_ json_value *obj = NULL;
        Suggestion s = { 0 };
        axp_error perr = { 0 };
        const char *kind;
        int r;

        if (json_parse(text, len, &obj, &perr) < 0)
                return axp_errorf(err, -EBADMSG, "the answer is not JSON (%s)", perr.msg);
        if (obj->type != JSON_OBJECT)
                return axp_errorf(err, -EBADMSG, "the answer is not a JSON object");
        for (size_t i = 0; i < obj->n; i++)
                if (strcmp(obj->keys[i], "title") != 0 && strcmp(obj->keys[i], "body") != 0 &&
                    strcmp(obj->keys[i], "kind") != 0)
                        return axp_errorf(err, -EBADMSG, "the answer has an unknown field \"%s\"",
                                          obj->keys[i]);
        kind = json_get_string(obj, "kind");
        for (size_t i = 0; kind && suggestion_kinds[i]; i++)
                if (strcmp(kind, suggestion_kinds[i]) == 0)
                        s.kind = suggestion_kinds[i];
        if (!s.kind)
                return axp_errorf(err, -EBADMSG, "the answer's \"kind\" is not one of summary, "
                                  "explanation, next-step, warning");
        if ((r = field(obj, "title", title_max_length, &s.title, err)) < 0 ||
            (r = field(obj, "body", body_max_length, &s.body, err)) < 0) {
                suggestion_clear(&s);
                return r;
        }
        *ret = s;
        return 0;
}
