/* SPDX-License-Identifier: MIT */
/* Tokenizer speed: vocabulary load time and tokens per second on the conformance paragraph
 * (and on one long text, to show the merge loop stays linear-ish). Not a test: prints only.
 * Run: meson test -C build --benchmark --verbose bench-tokenizer */
#include "tok-util.h"

static void bench_vocab(const char *name, const char *text, size_t len) {
        char rel[128];
        snprintf(rel, sizeof(rel), "vocab/ggml-vocab-%s.gguf", name);
        _cleanup_free_ char *path = conformance_path(rel);
        if (!path)
                return;

        gguf_file *f = NULL;
        axp_tokenizer *t = NULL;
        axp_error err = {};
        if (gguf_open(path, &f, &err) < 0) {
                fprintf(stderr, "%s\n", err.msg);
                return;
        }
        double best_load = 1e9;
        for (int i = 0; i < 3; i++) {
                double t0 = axp_now();
                if (axp_tokenizer_load(f, &t, &err) < 0) {
                        fprintf(stderr, "%s\n", err.msg);
                        gguf_close(f);
                        return;
                }
                best_load = MIN(best_load, axp_now() - t0);
                if (i < 2)
                        axp_tokenizer_free(t);
        }

        int n = 0, reps = 0;
        int32_t *ids = NULL;
        double t0 = axp_now(), dt;
        do {
                free(ids);
                axp_tokenize(t, text, len, AXP_TOK_ADD_BOS | AXP_TOK_PARSE_SPECIAL, &ids, &n, &err);
                reps++;
        } while ((dt = axp_now() - t0) < 0.5);
        printf("%-10s n_vocab %6d  load %6.1f ms  p3_paragraph: %d tokens, %8.0f tokens/s, "
               "%6.2f MB/s\n", name, axp_tokenizer_n_vocab(t), best_load * 1e3, n,
               (double) n * reps / dt, (double) len * reps / dt / 1e6);
        free(ids);

        /* 200 paragraphs as one text, and one 64 KiB word without spaces */
        size_t big_len = len * 200;
        char *big = malloc(big_len);
        for (int i = 0; i < 200; i++)
                memcpy(big + i * len, text, len);
        t0 = axp_now();
        axp_tokenize(t, big, big_len, 0, &ids, &n, &err);
        dt = axp_now() - t0;
        printf("%-10s %zu KiB text: %d tokens in %.1f ms (%.0f tokens/s)\n", name, big_len >> 10, n,
               dt * 1e3, n / dt);
        free(ids);
        for (size_t i = 0; i < 65536; i++)
                big[i] = 'a' + (i * 7919 % 26);
        t0 = axp_now();
        axp_tokenize(t, big, 65536, 0, &ids, &n, &err);
        dt = axp_now() - t0;
        printf("%-10s 64 KiB word: %d tokens in %.1f ms\n", name, n, dt * 1e3);
        free(ids);
        free(big);

        axp_tokenizer_free(t);
        gguf_close(f);
}

int main(void) {
        _cleanup_free_ char *path = conformance_path("golden/prompts/p3_paragraph.txt");
        if (!path) {
                printf("SKIP: conformance data not found (set AXP_CONFORMANCE_DIR)\n");
                return 77;
        }
        size_t len = 0;
        _cleanup_free_ char *text = read_file(path, &len);
        bench_vocab("llama-bpe", text, len);
        bench_vocab("qwen2", text, len);
        bench_vocab("llama-spm", text, len);
        return 0;
}
