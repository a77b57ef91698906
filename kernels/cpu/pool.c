/* SPDX-License-Identifier: MIT */
/* Placeholder until the CPU kernel work lands. */
#include "pool.h"
