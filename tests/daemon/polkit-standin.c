/* SPDX-License-Identifier: MIT */
/* TEST STAND-IN for polkit, never installed: owns org.freedesktop.PolicyKit1 on a private
 * test bus and answers CheckAuthorization by a rule the test sets:
 *
 *   polkit-standin --address ADDRESS [--allow-uid UID]... [--hang]
 *
 * A subject ("system-bus-name") is authorized when the uid owning that bus name is one of
 * the --allow-uid values; otherwise the answer is "not authorized". Each question is printed
 * on stdout as "check ACTION uid=UID -> yes|no", so a test can see that it was asked. With
 * --hang it never answers, like a polkit waiting for a password. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-bus.h>

#define MAX_UIDS 16

typedef struct Rule {
        unsigned uids[MAX_UIDS];
        size_t n_uids;
        bool hang;              /* never answer (a polkit waiting for the user) */
        sd_bus_message *held[64];
        size_t n_held;
} Rule;

static int subject_uid(sd_bus *bus, sd_bus_message *m, unsigned *ret) {
        sd_bus_message *reply = NULL;
        const char *kind, *key, *name = NULL;
        int r;

        r = sd_bus_message_enter_container(m, 'r', "sa{sv}");
        if (r < 0)
                return r;
        r = sd_bus_message_read(m, "s", &kind);
        if (r < 0)
                return r;
        if (strcmp(kind, "system-bus-name") != 0)
                return -EINVAL;
        r = sd_bus_message_enter_container(m, 'a', "{sv}");
        if (r < 0)
                return r;
        while ((r = sd_bus_message_enter_container(m, 'e', "sv")) > 0) {
                r = sd_bus_message_read(m, "s", &key);
                if (r < 0)
                        return r;
                if (strcmp(key, "name") == 0)
                        r = sd_bus_message_read(m, "v", "s", &name);
                else
                        r = sd_bus_message_skip(m, "v");
                if (r < 0)
                        return r;
                r = sd_bus_message_exit_container(m);
                if (r < 0)
                        return r;
        }
        if (r < 0)
                return r;
        r = sd_bus_message_exit_container(m);
        if (r >= 0)
                r = sd_bus_message_exit_container(m);
        if (r < 0)
                return r;
        if (!name)
                return -EINVAL;

        r = sd_bus_call_method(bus, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                               "GetConnectionUnixUser", NULL, &reply, "s", name);
        if (r < 0)
                return r;
        r = sd_bus_message_read(reply, "u", ret);
        sd_bus_message_unref(reply);
        return r;
}

static int method_check(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Rule *rule = userdata;
        const char *action;
        bool yes = false;
        unsigned uid;
        int r;

        if (rule->hang) {
                printf("holding a question\n");
                fflush(stdout);
                if (rule->n_held < 64)
                        rule->held[rule->n_held++] = sd_bus_message_ref(m);
                return 1;
        }
        r = subject_uid(sd_bus_message_get_bus(m), m, &uid);
        if (r < 0)
                return sd_bus_error_setf(error, "org.freedesktop.PolicyKit1.Error.Failed",
                                         "Cannot resolve the subject: %s", strerror(-r));
        r = sd_bus_message_read(m, "s", &action);
        if (r < 0)
                return r;
        for (size_t i = 0; i < rule->n_uids; i++)
                if (rule->uids[i] == uid)
                        yes = true;
        printf("check %s uid=%u -> %s\n", action, uid, yes ? "yes" : "no");
        fflush(stdout);
        return sd_bus_reply_method_return(m, "(bba{ss})", yes, false, 0);
}

static const sd_bus_vtable authority_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_METHOD("CheckAuthorization", "(sa{sv})sa{ss}us", "(bba{ss})", method_check,
                      SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_VTABLE_END
};

int main(int argc, char **argv) {
        sd_bus *bus = NULL;
        const char *address = NULL;
        Rule rule = {};
        int r;

        for (int i = 1; i < argc; i++) {
                if (strcmp(argv[i], "--address") == 0 && i + 1 < argc)
                        address = argv[++i];
                else if (strcmp(argv[i], "--hang") == 0)
                        rule.hang = true;
                else if (strcmp(argv[i], "--allow-uid") == 0 && i + 1 < argc && rule.n_uids < MAX_UIDS)
                        rule.uids[rule.n_uids++] = (unsigned) strtoul(argv[++i], NULL, 10);
                else {
                        fprintf(stderr, "usage: polkit-standin --address ADDRESS [--allow-uid UID]... [--hang]\n");
                        return 2;
                }
        }
        if (!address) {
                fprintf(stderr, "polkit-standin: --address is required (never on a real bus)\n");
                return 2;
        }

        r = sd_bus_new(&bus);
        if (r >= 0)
                r = sd_bus_set_address(bus, address);
        if (r >= 0)
                r = sd_bus_set_bus_client(bus, true);
        if (r >= 0)
                r = sd_bus_start(bus);
        if (r >= 0)
                r = sd_bus_add_object_vtable(bus, NULL, "/org/freedesktop/PolicyKit1/Authority",
                                             "org.freedesktop.PolicyKit1.Authority", authority_vtable, &rule);
        if (r >= 0)
                r = sd_bus_request_name(bus, "org.freedesktop.PolicyKit1", 0);
        if (r < 0) {
                fprintf(stderr, "polkit-standin: %s\n", strerror(-r));
                return 1;
        }
        printf("ready\n");
        fflush(stdout);

        for (;;) {
                r = sd_bus_process(bus, NULL);
                if (r < 0)
                        break;
                if (r > 0)
                        continue;
                r = sd_bus_wait(bus, UINT64_MAX);
                if (r < 0)
                        break;
        }
        sd_bus_flush_close_unref(bus);
        return 0;
}
