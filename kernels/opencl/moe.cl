/* SPDX-License-Identifier: MIT */
/* The mixture-of-experts FFN of K3 (qwen3moe), the same arithmetic as run_k3_moe of
 * engine/devices/cpu-device.c, on the device from the router's logits to the weighted sum of
 * the experts' outputs, with no round trip through the host:
 *
 *   moe_route    per token: softmax over the experts, the top n_expert_used, their weights
 *                (renormalized to sum 1 and scaled); stored in ascending expert order
 *   moe_plan     one item: the (token, expert) slots grouped by expert, tokens in order, and
 *                a table of blocks of at most TT slots of one expert for matmul_id_* (quant.cl)
 *   moe_gather   the normed rows of the slots' tokens, in slot order
 *   matmul_id_*  gate, up and down of each block's expert only (the other experts' bytes are
 *                never read), SwiGLU in between (rows.cl)
 *   moe_combine  per token, its experts' outputs weighted and added in ascending expert order,
 *                as the CPU adds them */

#pragma OPENCL FP_CONTRACT OFF

/* L: n rows of ne router logits; SEL/WT: n rows of nk picked experts and their weights. */
__kernel void moe_route(__global const float *L, int ne, int nk, int norm, float scale, int n,
                        __global int *SEL, __global float *WT) {
        const int i = get_global_id(0);
        if (i >= n)
                return;
        __global const float *lg = L + (long) i * ne;
        __global int *sel = SEL + (long) i * nk;
        __global float *wt = WT + (long) i * nk;
        acc_t mx = -INFINITY, z = 0, sum = 0;
        for (int e = 0; e < ne; e++)
                mx = fmax(mx, (acc_t) lg[e]);
        for (int e = 0; e < ne; e++)
                z += exp((acc_t) lg[e] - mx);
        for (int k = 0; k < nk; k++) {
                int best = -1;
                acc_t pb = 0;
                for (int e = 0; e < ne; e++) {
                        bool taken = false;
                        for (int j = 0; j < k; j++)
                                taken |= sel[j] == e;
                        if (taken)
                                continue;
                        const acc_t p = exp((acc_t) lg[e] - mx);
                        if (best < 0 || p > pb) {
                                best = e;
                                pb = p;
                        }
                }
                sel[k] = best;
                sum += pb / z;
        }
        for (int k = 0; k < nk; k++) {
                acc_t w = exp((acc_t) lg[sel[k]] - mx) / z;
                if (norm)
                        w /= fmax(sum, (acc_t) 6.103515625e-5);
                wt[k] = (float) (w * scale);
        }
        /* ascending expert order: the order the CPU adds the experts' outputs in */
        for (int k = 1; k < nk; k++)
                for (int j = k; j > 0 && sel[j - 1] > sel[j]; j--) {
                        const int e = sel[j];
                        const float w = wt[j];
                        sel[j] = sel[j - 1];
                        wt[j] = wt[j - 1];
                        sel[j - 1] = e;
                        wt[j - 1] = w;
                }
}

/* One item. The n * nk slots of SEL ordered by expert, then token: SLOT_TOK[s] the token of
 * slot s, SLOT_OF[i * nk + k] the slot of token i's k-th expert. BLK: max_blocks triples
 * (expert, first slot, slots) of at most TT slots of one expert, then (-1, 0, 0). CNT: 2 * ne
 * ints of scratch. */
__kernel void moe_plan(__global const int *SEL, int n, int nk, int ne, __global int *CNT,
                       __global int *SLOT_TOK, __global int *SLOT_OF, __global int *BLK,
                       int max_blocks) {
        if (get_global_id(0) != 0)
                return;
        for (int e = 0; e < ne; e++)
                CNT[e] = 0;
        for (int s = 0; s < n * nk; s++)
                CNT[SEL[s]]++;
        int start = 0;
        for (int e = 0; e < ne; e++) {
                CNT[ne + e] = start;
                start += CNT[e];
        }
        for (int i = 0; i < n; i++)
                for (int k = 0; k < nk; k++) {
                        const int s = CNT[ne + SEL[i * nk + k]]++;
                        SLOT_TOK[s] = i;
                        SLOT_OF[i * nk + k] = s;
                }
        int b = 0;
        for (int e = 0; e < ne; e++) {
                const int end = CNT[ne + e];
                for (int s = end - CNT[e]; s < end && b < max_blocks; s += TT, b++) {
                        BLK[3 * b] = e;
                        BLK[3 * b + 1] = s;
                        BLK[3 * b + 2] = min(TT, end - s);
                }
        }
        for (; b < max_blocks; b++) {
                BLK[3 * b] = -1;
                BLK[3 * b + 1] = 0;
                BLK[3 * b + 2] = 0;
        }
}

/* HX row s = H row SLOT_TOK[s] (rows of d) */
__kernel void moe_gather(__global const float *H, __global const int *SLOT_TOK,
                         __global float *HX, int d) {
        const int j = get_global_id(0), s = get_global_id(1);
        if (j < d)
                HX[(long) s * d + j] = H[(long) SLOT_TOK[s] * d + j];
}

/* O row i = sum over k of WT[i][k] * EO row SLOT_OF[i][k] (rows of d) */
__kernel void moe_combine(__global const float *EO, __global const int *SLOT_OF,
                          __global const float *WT, int nk, __global float *O, int d) {
        const int j = get_global_id(0), i = get_global_id(1);
        if (j >= d)
                return;
        float acc = 0;
        for (int k = 0; k < nk; k++)
                acc += WT[i * nk + k] * EO[(long) SLOT_OF[i * nk + k] * d + j];
        O[(long) i * d + j] = acc;
}
