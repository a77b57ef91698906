/* SPDX-License-Identifier: MIT */
#include "prompt.h"

#include <string.h>

#include "base/utf8.h"

#define BATCH_FOLDERS_SHOWN 20

char *prompt_render(const char *tpl, const char *const *vars) {
        GString *out = g_string_sized_new(strlen(tpl) + 256);

        for (const char *p = tpl; *p;) {
                const char *close;
                bool done = false;
                if (*p == '{' && (close = strchr(p + 1, '}'))) {
                        size_t n = (size_t) (close - p - 1);
                        for (size_t i = 0; vars && vars[i] && !done; i += 2)
                                if (strlen(vars[i]) == n && strncmp(p + 1, vars[i], n) == 0) {
                                        const char *v = vars[i + 1] ? vars[i + 1] : "";
                                        /* A file name need not be UTF-8, but the prompt goes
                                         * out as a D-Bus string, which must be. */
                                        if (g_utf8_validate(v, -1, NULL))
                                                g_string_append(out, v);
                                        else {
                                                g_autofree char *valid = g_utf8_make_valid(v, -1);
                                                g_string_append(out, valid);
                                        }
                                        p = close + 1;
                                        done = true;
                                }
                }
                if (!done)
                        g_string_append_c(out, *p++);
        }
        return g_string_free(out, FALSE);
}

bool prompt_is_text(const char *data, size_t len, bool truncated) {
        size_t bad, controls = 0;

        /* A cut read may end inside a character; anything else is not UTF-8. */
        if (!axp_utf8_valid(data, len, &bad) && !(truncated && axp_utf8_char_cut(data + bad, len - bad)))
                return false;
        for (size_t i = 0; i < len; i++) {
                unsigned char c = (unsigned char) data[i];
                if (c == 0)
                        return false;
                if (c < 0x20 && c != '\n' && c != '\r' && c != '\t' && c != '\f' && c != 0x1b)
                        controls++;
        }
        return controls * 100 <= len;
}

char *prompt_clip(const char *s, size_t len, size_t max) {
        if (len <= max)
                return g_strndup(s, len);
        /* Step back to a character start. */
        size_t cut = max;
        while (cut > 0 && ((unsigned char) s[cut] & 0xC0) == 0x80)
                cut--;
        return g_strdup_printf("%.*s\n[... %zu more bytes not shown]", (int) cut, s, len - cut);
}

/* Offsets of line starts in text[0..len), plus len at the end. */
static GArray *line_starts(const char *text, size_t len) {
        GArray *a = g_array_new(FALSE, FALSE, sizeof(size_t));
        size_t z = 0;
        g_array_append_val(a, z);
        for (size_t i = 0; i < len; i++)
                if (text[i] == '\n' && i + 1 < len) {
                        size_t s = i + 1;
                        g_array_append_val(a, s);
                }
        g_array_append_val(a, len);
        return a;
}

static void append_lines(GString *out, const char *prefix, const char *text, GArray *starts,
                         size_t from, size_t to, size_t budget) {
        size_t begin = out->len;
        for (size_t i = from; i < to; i++) {
                size_t a = g_array_index(starts, size_t, i), b = g_array_index(starts, size_t, i + 1);
                size_t n = b - a;
                if (n > 0 && text[b - 1] == '\n')
                        n--;
                if (out->len - begin + n > budget) {
                        g_string_append_printf(out, "%s[... %zu more lines]\n", prefix, to - i);
                        return;
                }
                g_string_append(out, prefix);
                g_string_append_len(out, text + a, (gssize) n);
                g_string_append_c(out, '\n');
        }
}

char *prompt_describe_change(const char *old, size_t old_len, const char *now, size_t now_len,
                             size_t max) {
        if (!old) {
                g_autofree char *clip = prompt_clip(now, now_len, max);
                return g_strdup_printf("Its content now:\n---\n%s\n---", clip);
        }
        if (old_len == now_len && memcmp(old, now, now_len) == 0)
                return NULL;

        /* The lines that differ: trim the common leading and trailing lines. Cheap, and
         * enough for the usual edit in one place. */
        g_autoptr(GArray) a = line_starts(old, old_len);
        g_autoptr(GArray) b = line_starts(now, now_len);
        size_t na = a->len - 1, nb = b->len - 1, head = 0, tail = 0;

#define LINE_EQ(i, j)                                                                              \
        ({                                                                                         \
                size_t _a0 = g_array_index(a, size_t, i), _a1 = g_array_index(a, size_t, (i) + 1); \
                size_t _b0 = g_array_index(b, size_t, j), _b1 = g_array_index(b, size_t, (j) + 1); \
                _a1 - _a0 == _b1 - _b0 && memcmp(old + _a0, now + _b0, _a1 - _a0) == 0;           \
        })
        while (head < na && head < nb && LINE_EQ(head, head))
                head++;
        while (tail < na - head && tail < nb - head && LINE_EQ(na - 1 - tail, nb - 1 - tail))
                tail++;
#undef LINE_EQ

        GString *out = g_string_new(NULL);
        g_string_append_printf(out, "It now has %zu lines (it had %zu). ", nb, na);
        if (head == na && head == nb)
                g_string_append(out, "Only line endings or white space at the end changed.\n");
        else
                g_string_append_printf(out, "Changed from line %zu (- before, + after):\n", head + 1);
        append_lines(out, "- ", old, a, head, na - tail, max / 2);
        append_lines(out, "+ ", now, b, head, nb - tail, max / 2);
        return g_string_free(out, FALSE);
}

Batch *batch_new(void) {
        Batch *b = g_new0(Batch, 1);
        b->listed = g_ptr_array_new_with_free_func(g_free);
        b->more = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
        return b;
}

void batch_free(Batch *b) {
        if (!b)
                return;
        g_free(b->root);
        g_ptr_array_unref(b->listed);
        g_hash_table_unref(b->more);
        g_free(b);
}

/* Narrows the root to the deepest folder holding both it and `folder`. */
static void widen_root(Batch *b, const char *folder) {
        size_t cut = 0;

        if (!b->root) {
                b->root = g_strdup(folder);
                return;
        }
        /* The last position where both paths end a component. */
        for (size_t n = 0;; n++) {
                char x = b->root[n], y = folder[n];
                if ((x == '/' || x == 0) && (y == '/' || y == 0))
                        cut = n;
                if (x != y || x == 0)
                        break;
        }
        b->root[cut == 0 ? 1 : cut] = 0;
}

void batch_add_count(Batch *b, const char *folder, guint64 count) {
        guint64 *c = g_hash_table_lookup(b->more, folder);
        widen_root(b, folder);
        if (!c) {
                c = g_new0(guint64, 1);
                g_hash_table_insert(b->more, g_strdup(folder), c);
        }
        *c += count;
        b->total += count;
}

void batch_add_path(Batch *b, const char *path, guint list_max) {
        g_autofree char *folder = g_path_get_dirname(path);
        if (b->listed->len < list_max) {
                widen_root(b, folder);
                g_ptr_array_add(b->listed, g_strdup(path));
                b->total++;
        } else
                batch_add_count(b, folder, 1);
}

void batch_merge(Batch *into, const Batch *from, guint list_max) {
        GHashTableIter it;
        gpointer k, v;

        for (guint i = 0; i < from->listed->len; i++)
                batch_add_path(into, from->listed->pdata[i], list_max);
        g_hash_table_iter_init(&it, from->more);
        while (g_hash_table_iter_next(&it, &k, &v))
                batch_add_count(into, k, *(guint64 *) v);
}

static const char *relative(const Batch *b, const char *path) {
        size_t n = strlen(b->root);
        if (strncmp(path, b->root, n) != 0)
                return path;
        path += n;
        while (*path == '/')
                path++;
        return path;
}

static gint by_count(gconstpointer x, gconstpointer y, gpointer data) {
        GHashTable *more = data;
        guint64 a = *(guint64 *) g_hash_table_lookup(more, *(char **) x);
        guint64 c = *(guint64 *) g_hash_table_lookup(more, *(char **) y);
        if (a != c)
                return a > c ? -1 : 1;
        return strcmp(*(char **) x, *(char **) y);
}

char *batch_render_files(const Batch *b) {
        GString *out = g_string_new(NULL);
        guint64 unlisted = b->total - b->listed->len;

        for (guint i = 0; i < b->listed->len; i++)
                g_string_append_printf(out, "- %s\n", relative(b, b->listed->pdata[i]));
        if (unlisted > 0) {
                g_autoptr(GPtrArray) folders = hash_table_keys(b->more);
                guint64 rest = unlisted;
                g_ptr_array_sort_with_data(folders, by_count, b->more);
                g_string_append_printf(out, "and %" G_GUINT64_FORMAT " more:", unlisted);
                for (guint i = 0; i < folders->len && i < BATCH_FOLDERS_SHOWN; i++) {
                        const char *rel = relative(b, folders->pdata[i]);
                        guint64 c = *(guint64 *) g_hash_table_lookup(b->more, folders->pdata[i]);
                        g_string_append_printf(out, "%s %" G_GUINT64_FORMAT " in %s%s", i ? "," : "",
                                               c, rel[0] ? rel : ".", "/");
                        rest -= c;
                }
                if (folders->len > BATCH_FOLDERS_SHOWN)
                        g_string_append_printf(out, ", %" G_GUINT64_FORMAT " in %u other folders",
                                               rest, folders->len - BATCH_FOLDERS_SHOWN);
                g_string_append_c(out, '\n');
        }
        if (out->len > 0 && out->str[out->len - 1] == '\n')
                g_string_truncate(out, out->len - 1);
        return g_string_free(out, FALSE);
}

char *batch_render_prompt(const Batch *b, const char *tpl) {
        g_autofree char *files = batch_render_files(b);
        g_autofree char *count = g_strdup_printf("%" G_GUINT64_FORMAT, b->total);
        const char *vars[] = { "count", count, "root", b->root ? b->root : "/", "files", files, NULL };
        return prompt_render(tpl, vars);
}
