/* SPDX-License-Identifier: MIT */
#include "cli-model.h"

#include <stdlib.h>
#include <string.h>

#include "base/parse.h"
#include "cli.h"
#include "devices/discovery.h"
#include "model/tokenizer.h"

int cli_prompt(const char *text, const char *file, char **ret, size_t *ret_len) {
        axp_error err = { 0 };
        if (!!text == !!file) {
                fprintf(stderr, "agentxpu: give the prompt with exactly one of -p TEXT or -f FILE\n");
                return 2;
        }
        if (text) {
                *ret = strdup(text);
                *ret_len = strlen(text);
                return *ret ? 0 : cli_fail("out of memory");
        }
        if (axp_read_file(file, ret, ret_len, &err) < 0)
                return cli_fail("%s", err.msg);
        return 0;
}

int cli_load(const char *path, const char *device, int n_threads, axp_model **ret_model, axp_device **ret_dev) {
        axp_error err = { 0 };
        axp_model *m;
        axp_device *d = NULL;

        if (!path) {
                fprintf(stderr, "agentxpu: no model given (-m MODEL.gguf)\n");
                return 2;
        }
        if (device && axp_device_spec_check(device, &err) < 0) {
                fprintf(stderr, "agentxpu: --device: %s\n", err.msg);
                return 2;
        }
        if (axp_model_load(path, &m, &err) < 0)
                return cli_fail("%s", err.msg);
        if (ret_dev) {
                if (axp_device_open(device ? device : "cpu", n_threads, &d, &err) < 0 ||
                    axp_device_prepare(d, m, &err) < 0) {
                        axp_device_free(d);
                        axp_model_free(m);
                        return cli_fail("%s", err.msg);
                }
                *ret_dev = d;
        }
        *ret_model = m;
        return 0;
}

int cli_tokenize_raw(const axp_model *m, const char *text, size_t len, int32_t **ret, int *ret_n) {
        axp_error err = { 0 };
        if (axp_tokenize(m->tok, text, len, AXP_TOK_ADD_BOS | AXP_TOK_PARSE_SPECIAL, ret, ret_n, &err) < 0)
                return cli_fail("%s", err.msg);
        if (*ret_n == 0) {
                free(*ret);
                return cli_fail("the prompt is empty");
        }
        return 0;
}

bool cli_int(const char *opt, const char *s, int min, int max, int *ret) {
        if (axp_parse_int(s, min, max, ret) < 0) {
                fprintf(stderr, "agentxpu: %s wants an integer in [%d, %d], not '%s'\n", opt, min, max, s);
                return false;
        }
        return true;
}

bool cli_double(const char *opt, const char *s, double min, double max, double *ret) {
        if (axp_parse_double(s, min, max, ret) < 0) {
                fprintf(stderr, "agentxpu: %s wants a number in [%g, %g], not '%s'\n", opt, min, max, s);
                return false;
        }
        return true;
}
