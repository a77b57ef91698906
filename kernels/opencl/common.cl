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

/* The KV cache's element type (kv_kind): F32, F16 or Q8_0 blocks of 32 (half d, char qs[32];
 * every head is whole blocks) */
#define KV_F32 0
#define KV_F16 1
#define KV_Q8_0 2

/* An element of the KV cache */
float kv_at(__global const uchar *c, int kind, long idx) {
        if (kind == KV_Q8_0) {
                __global const uchar *b = c + idx / 32 * 34;
                return vload_half(0, (__global const half *) b) * (float) ((__global const char *) b)[2 + idx % 32];
        }
        return kind == KV_F16 ? vload_half(idx, (__global const half *) c) : ((__global const float *) c)[idx];
}

/* F32 and F16 caches: one element (Q8_0 blocks are written whole, kv_put_q8_0 in rows.cl) */
void kv_put(__global uchar *c, int kind, long idx, float v) {
        if (kind == KV_F16)
                vstore_half(v, idx, (__global half *) c);
        else
                ((__global float *) c)[idx] = v;
}
