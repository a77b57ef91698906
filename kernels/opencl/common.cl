/* SPDX-License-Identifier: MIT */
/* Shared pieces of the HEG kernels (OpenCL C 1.2). The host builds every .cl file of this
 * folder as one program with -DWG=<work-group size> (a power of two), -DMAX_HD=<largest
 * head dimension> and -DTT=<tokens per matrix-product work-group>; every kernel with a
 * work-group reduction runs with exactly WG items.
 *
 * Without cl_khr_fp16 a half is storage only: read with vload_half, write with vstore_half
 * (round to nearest even), compute in float. Sums of squares for RMSNorm accumulate in
 * double where the device has it, as the CPU backend does (-DAXP_NO_FP64 takes the float
 * path of GPUs without doubles, such as Intel's Xe iGPUs, on any device). */

#if defined(cl_khr_fp64) && !defined(AXP_NO_FP64)
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
typedef double acc_t;
#else
typedef float acc_t;
#endif

#define WG_ATTR __attribute__((reqd_work_group_size(WG, 1, 1)))

/* Sum over the work-group; every item gets the result. red holds WG values. */
acc_t wg_sum(acc_t v, __local acc_t *red) {
        const int lid = get_local_id(0);
        red[lid] = v;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int s = WG / 2; s > 0; s >>= 1) {
                if (lid < s)
                        red[lid] += red[lid + s];
                barrier(CLK_LOCAL_MEM_FENCE);
        }
        acc_t r = red[0];
        barrier(CLK_LOCAL_MEM_FENCE); /* red is reused by the next reduction */
        return r;
}

float wg_sumf(float v, __local float *red) {
        const int lid = get_local_id(0);
        red[lid] = v;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int s = WG / 2; s > 0; s >>= 1) {
                if (lid < s)
                        red[lid] += red[lid + s];
                barrier(CLK_LOCAL_MEM_FENCE);
        }
        float r = red[0];
        barrier(CLK_LOCAL_MEM_FENCE);
        return r;
}

float wg_maxf(float v, __local float *red) {
        const int lid = get_local_id(0);
        red[lid] = v;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int s = WG / 2; s > 0; s >>= 1) {
                if (lid < s)
                        red[lid] = fmax(red[lid], red[lid + s]);
                barrier(CLK_LOCAL_MEM_FENCE);
        }
        float r = red[0];
        barrier(CLK_LOCAL_MEM_FENCE);
        return r;
}

/* An element of the KV cache, F32 or F16. */
float kv_at(__global const uchar *c, int f16, long idx) {
        return f16 ? vload_half(idx, (__global const half *) c) : ((__global const float *) c)[idx];
}

void kv_put(__global uchar *c, int f16, long idx, float v) {
        if (f16)
                vstore_half(v, idx, (__global half *) c);
        else
                ((__global float *) c)[idx] = v;
}
