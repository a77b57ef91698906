/* SPDX-License-Identifier: MIT */
/* The AVX-512 path's Q4_K, Q5_K and Q6_K products: gemm-avx512.c compiled for them alone, so
 * a build compiles the path's parts at once (see there). */
#define AXP_AVX512_KQUANTS 1
#include "gemm-avx512.c"
