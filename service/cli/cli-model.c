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
        _cleanup_free_ char *buf = NULL;
        size_t len;

        if (!!text == !!file)
                return cli_usage_error("give the prompt with exactly one of -p TEXT or -f FILE");
        if (text) {
                len = strlen(text);
                if (!cli_utf8("the prompt", text, len))
                        return 1;
                if (!(buf = strdup(text)))
                        return cli_fail("out of memory");
        } else {
                if (axp_read_file(file, AXP_TEXT_FILE_MAX, &buf, &len, &err) < 0)
                        return cli_fail("%s", err.msg);
                if (!cli_utf8(file, buf, len))
                        return 1;
        }
        *ret = TAKE_PTR(buf);
        *ret_len = len;
        return 0;
}

int cli_load(const char *path, const char *device, int n_threads, axp_model **ret_model, axp_device **ret_dev) {
        axp_error err = { 0 };
        axp_model *m;
        axp_device *d = NULL;

        if (!path)
                return cli_usage_error("no model given (-m MODEL.gguf)");
        if (device && axp_device_spec_check(device, &err) < 0)
                return cli_usage_error("--device: %s", err.msg);
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
