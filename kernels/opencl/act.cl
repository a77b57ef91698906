/* SPDX-License-Identifier: MIT */
/* Activations as the CPU kernels take them before a matrix product (kernels/cpu/quant-act.c),
 * bit for bit, so that both devices compute the same products: Q8_0 blocks of 32 for Q8_0 and
 * Q4_0 weights, Q8_K blocks of 256 for Q4_K and Q6_K, values rounded to f16 for F16 weights.
 *
 * Quantized rows of k values go to three planes: AQ[t * k + i] the int8 values,
 * AD[t * (k / 32) + b] the scale of block b (Q8_0: blocks of 32; Q8_K: of 256, the row's
 * first k / 256 entries), and for Q8_K AS[t * (k / 32) + j] the sum of the 32 values j * 32 ..
 * of the row (for the Q4_K minimums).
 *
 * Bit-exactness needs correctly rounded division (OpenCL 1.2 allows 2.5 ulp) and no
 * contraction of the float operations into FMAs. */

#pragma OPENCL FP_CONTRACT OFF

/* a / b rounded to nearest: of the floats next to the device's quotient, the one whose
 * residual a - q b (exact with fma) is smallest. A quotient of two floats is never halfway
 * between two floats, so there are no ties. */
float div_rn(float a, float b) {
        float q = a / b;
        if (!isfinite(q) || q == 0.0f)
                return q;
#ifdef AXP_DIV_ERROR
        /* tests: a quotient 2 ulp off, as a device's division may give */
        const float dir = as_uint(a) & 1 ? INFINITY : -INFINITY;
        q = nextafter(nextafter(q, dir), dir);
#endif
        float best = q, rbest = fabs(fma(-q, b, a)), lo = q, hi = q;
        for (int i = 0; i < 3; i++) {
                lo = nextafter(lo, -INFINITY);
                hi = nextafter(hi, INFINITY);
                const float rl = fabs(fma(-lo, b, a)), rh = fabs(fma(-hi, b, a));
                if (rl < rbest) {
                        best = lo;
                        rbest = rl;
                }
                if (rh < rbest) {
                        best = hi;
                        rbest = rh;
                }
        }
        return best;
}

/* f rounded to the nearest half (ties to even, subnormal halves included, overflow to
 * infinity), as a float: integer arithmetic, so that neither the device's rounding of
 * vstore_half nor a flush of denormals can change it. */
float round_f16(float f) {
        const uint u = as_uint(f), sign = u & 0x80000000u;
        uint a = u & 0x7fffffffu;
        if (a >= 0x7f800000u) /* inf or nan */
                return f;
        if (a >= 0x477ff000u) /* rounds to 65520 or more */
                return as_float(sign | 0x7f800000u);
        if (a < 0x38800000u) /* a subnormal half: a multiple of 2^-24 (exact products) */
                return as_float(sign | as_uint(rint(as_float(a) * 0x1p24f) * 0x1p-24f));
        a += 0xfffu + ((a >> 13) & 1);
        return as_float(sign | (a & ~0x1fffu));
}

/* Q8_0, one item per block of 32 of one token: d = amax / 127 rounded to f16,
 * q = round-half-even(x * (127 / amax)); AS gets llama.cpp's Q8_1 sum for Q4_1/Q5_1 weights,
 * (amax / 127) * sum(q) rounded to f16. */
__kernel void act_q8_0(__global const float *X, int x_off, int ldx, int k, __global char *AQ,
                       __global float *AD, __global float *AS) {
        const int b = get_global_id(0), t = get_global_id(1);
        if (b >= k / 32)
                return;
        __global const float *x = X + x_off + (long) t * ldx + b * 32;
        float amax = 0;
        for (int j = 0; j < 32; j++)
                amax = fmax(amax, fabs(x[j]));
        const float id = amax != 0.0f ? div_rn(127.0f, amax) : 0.0f;
        __global char *q = AQ + (long) t * k + b * 32;
        int sum = 0;
        for (int j = 0; j < 32; j++) {
                q[j] = convert_char_sat_rte(x[j] * id);
                sum += q[j];
        }
        const float d = div_rn(amax, 127.0f);
        AD[(long) t * (k / 32) + b] = round_f16(d);
        AS[(long) t * (k / 32) + b] = round_f16(d * (float) sum);
}

/* Q8_K, one item per block of 256 of one token: the first value of largest magnitude, max,
 * maps to -127: q = min(round-half-even(x * (-127 / max)), 127), d = 1 / (-127 / max). */
__kernel void act_q8_k(__global const float *X, int x_off, int ldx, int k, __global char *AQ,
                       __global float *AD, __global short *AS) {
        const int s = get_global_id(0), t = get_global_id(1);
        if (s >= k / 256)
                return;
        __global const float *x = X + x_off + (long) t * ldx + s * 256;
        __global char *q = AQ + (long) t * k + s * 256;
        __global short *bs = AS + (long) t * (k / 32) + s * 8;
        float amax = 0, max = 0;
        for (int j = 0; j < 256; j++)
                if (fabs(x[j]) > amax) {
                        amax = fabs(x[j]);
                        max = x[j];
                }
        if (amax == 0.0f) {
                for (int j = 0; j < 256; j++)
                        q[j] = 0;
                for (int j = 0; j < 8; j++)
                        bs[j] = 0;
                AD[(long) t * (k / 32) + s] = 0.0f;
                return;
        }
        const float iscale = div_rn(-127.0f, max);
        for (int j = 0; j < 8; j++) {
                int sum = 0;
                for (int i = 0; i < 32; i++) {
                        const int v = min(convert_int_rte(x[32 * j + i] * iscale), 127);
                        q[32 * j + i] = (char) v;
                        sum += v;
                }
                bs[j] = (short) sum;
        }
        AD[(long) t * (k / 32) + s] = div_rn(1.0f, iscale);
}

/* f rounded to the nearest bf16 (ties to even) as llama.cpp rounds BF16 weights' activations,
 * as a float; a NaN stays a (quiet) NaN */
float round_bf16(float f) {
        const uint u = as_uint(f);
        if ((u & 0x7fffffffu) > 0x7f800000u)
                return as_float((u | 0x00400000u) & 0xffff0000u);
        return as_float((u + 0x7fffu + ((u >> 16) & 1)) & 0xffff0000u);
}

/* BF16 weights: AF[t * k + i] = x rounded to bf16, one item per value. */
__kernel void act_bf16(__global const float *X, int x_off, int ldx, int k, __global float *AF) {
        const int i = get_global_id(0), t = get_global_id(1);
        if (i < k)
                AF[(long) t * k + i] = round_bf16(X[x_off + (long) t * ldx + i]);
}

/* F16 weights: AF[t * k + i] = x rounded to f16, one item per value. */
__kernel void act_f16(__global const float *X, int x_off, int ldx, int k, __global float *AF) {
        const int i = get_global_id(0), t = get_global_id(1);
        if (i < k)
                AF[(long) t * k + i] = round_f16(X[x_off + (long) t * ldx + i]);
}

#pragma OPENCL FP_CONTRACT ON
