/* SPDX-License-Identifier: MIT */
/* The AVX-512 path's Q2_K, Q3_K and IQ4_XS products: gemm-avx512.c compiled for them alone,
 * so a build compiles the path's parts at once (see there). */
#define AXP_AVX512_KQUANTS 2
#include "gemm-avx512.c"
