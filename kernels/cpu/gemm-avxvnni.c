/* SPDX-License-Identifier: MIT */
/* The AVX2 path with AVX-VNNI (cpuid 7.1 eax bit 4): the same kernels, the 8-bit dot
 * products of the 32-element block types through VEX vpdpbusd (see gemm-avx2.c). Built with
 * -mavxvnni; without a compiler that knows it (AXP_NO_AVX_VNNI) only an empty table that
 * dispatch.c never chooses. */
#ifndef AXP_NO_AVX_VNNI
#define AXP_AVX_VNNI 1
#include "gemm-avx2.c"
#else
#include "cpu.h"

const bool axp_avx_vnni_built = false;
const axp_cpu_ops axp_cpu_ops_avx_vnni = { .name = "avx-vnni" };
#endif
