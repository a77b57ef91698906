/* SPDX-License-Identifier: MIT */
/* The AMX path: placeholder until the tile kernels land. */
#include "cpu.h"

const axp_gemm_fn axp_amx_gemm[AXP_TYPE__MAX];
