/* SPDX-License-Identifier: MIT */
#include "cpu.h"
const axp_cpu_ops axp_cpu_ops_avx2 = { .name = "avx2-todo" };
