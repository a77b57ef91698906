/* SPDX-License-Identifier: MIT */
/* Executors and the mailbox: every task a device runs comes back to the scheduler's thread
 * as one completion, in the order each device ran them, with the device's error; calls run
 * on the mailbox reader's thread. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "devices/backend.h" /* this test implements a device backend of its own */
#include "devices/executor.h"
#include "test.h"

typedef struct fake {
        int ran[256];
        int n;
} fake;

static int fake_run(axp_device *d, const axp_task *t, axp_error *err) {
        fake *f = d->priv;
        nanosleep(&(struct timespec) { .tv_nsec = 200000 }, NULL);
        f->ran[f->n++] = t->layer;
        if (t->layer == 7)
                return axp_errorf(err, -EIO, "layer 7 failed on purpose");
        return 0;
}

static const axp_device_ops fake_ops = { .backend = "fake", .run = fake_run };

static void test_completions(void) {
        axp_mailbox *mb;
        axp_executor *ex[2];
        fake f[2] = { 0 };
        axp_device d[2] = { { .ops = &fake_ops, .priv = &f[0] }, { .ops = &fake_ops, .priv = &f[1] } };
        int seen[2] = { 0 }, errors = 0;
        axp_error err;

        CHECK(axp_mailbox_new(&mb) == 0);
        for (int i = 0; i < 2; i++)
                CHECK(axp_executor_new(&d[i], i, mb, &ex[i], &err) == 0);
        for (int k = 0; k < 40; k++)
                for (int i = 0; i < 2; i++) {
                        axp_task t = { .op = AXP_OP_K1, .layer = k };
                        CHECK(axp_executor_submit(ex[i], &t) == 0);
                }
        for (int got = 0; got < 80; got++) {
                axp_mail *m = axp_mailbox_wait(mb, INFINITY);
                CHECK(m && m->type == AXP_MAIL_DONE && m->dev >= 0 && m->dev < 2);
                if (!m)
                        break;
                if (m->rc < 0) {
                        errors++;
                        CHECK_EQ_INT(m->rc, -EIO);
                        CHECK(strstr(m->err, "layer 7") != NULL);
                }
                seen[m->dev]++;
                free(m);
        }
        CHECK_EQ_INT(seen[0], 40);
        CHECK_EQ_INT(seen[1], 40);
        CHECK_EQ_INT(errors, 2);
        /* nothing more: a deadline already passed returns at once */
        CHECK(axp_mailbox_wait(mb, axp_now()) == NULL);
        for (int i = 0; i < 2; i++) {
                axp_executor_free(ex[i]);
                for (int k = 0; k < 40; k++)
                        CHECK_EQ_INT(f[i].ran[k], k); /* FIFO per device */
        }
        axp_mailbox_free(mb);
}

typedef struct caller {
        axp_mailbox *mb;
        pthread_t reader;
        pthread_t ran_on;
        int value;
} caller;

static void call_fn(void *arg) {
        caller *c = arg;
        c->ran_on = pthread_self();
        c->value = 42;
}

static void *call_thread(void *arg) {
        caller *c = arg;
        CHECK(axp_mailbox_call(c->mb, call_fn, c) == 0);
        /* the call has run by the time it returns */
        CHECK_EQ_INT(c->value, 42);
        return NULL;
}

static void test_call(void) {
        caller c = { 0 };
        pthread_t t;
        axp_mail *m;

        CHECK(axp_mailbox_new(&c.mb) == 0);
        c.reader = pthread_self();
        pthread_create(&t, NULL, call_thread, &c);
        m = axp_mailbox_wait(c.mb, INFINITY);
        CHECK(m && m->type == AXP_MAIL_CALL);
        if (m) {
                m->fn(m->arg);
                axp_mailbox_call_done(c.mb, m);
                free(m);
        }
        pthread_join(t, NULL);
        CHECK(pthread_equal(c.ran_on, c.reader));
        axp_mailbox_free(c.mb);
}

int main(void) {
        RUN(test_completions);
        RUN(test_call);
        TEST_EXIT();
}
