/* SPDX-License-Identifier: MIT */
/* Intrusive doubly linked lists: an item carries its own next/prev pointers, so one object
 * can sit in several lists (a request in its client's list and in its flow's). */
#pragma once

#include <stddef.h>

#define LIST_FIELDS(t, name) t *name##_next, *name##_prev

#define LIST_PREPEND(name, head, item)                                                             \
        do {                                                                                       \
                __typeof__(item) _i_ = (item);                                                     \
                _i_->name##_prev = NULL;                                                           \
                _i_->name##_next = (head);                                                         \
                if (head)                                                                          \
                        (head)->name##_prev = _i_;                                                 \
                (head) = _i_;                                                                      \
        } while (0)

#define LIST_REMOVE(name, head, item)                                                              \
        do {                                                                                       \
                __typeof__(item) _i_ = (item);                                                     \
                if (_i_->name##_next)                                                              \
                        _i_->name##_next->name##_prev = _i_->name##_prev;                          \
                if (_i_->name##_prev)                                                              \
                        _i_->name##_prev->name##_next = _i_->name##_next;                          \
                else if ((head) == _i_)                                                            \
                        (head) = _i_->name##_next;                                                 \
                _i_->name##_next = _i_->name##_prev = NULL;                                        \
        } while (0)

#define LIST_FOREACH(name, i, head) for (__typeof__(head) i = (head); i; i = i->name##_next)

/* Safe against removal of the current item. */
#define LIST_FOREACH_SAFE(name, i, n, head)                                                        \
        for (__typeof__(head) i = (head), n = i ? i->name##_next : NULL; i;                        \
             i = n, n = i ? i->name##_next : NULL)
