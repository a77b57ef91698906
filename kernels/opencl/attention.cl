/* SPDX-License-Identifier: MIT */
/* K2: attention of a request's new tokens over its own KV cache, causal, with grouped KV
 * heads; with window > 0, a query at position pos sees positions pos - window + 1 .. pos only
 * (sliding-window layers), whose cache is a ring: position t is in row t % kv_rows. The cache
 * is head by head: KV head kh's row r starts at element (kh kv_rows + r) hd. One work-group
 * per (query, head): the items score WG positions at a time and the
 * softmax runs online (a running maximum rescales what was summed so far), so any context
 * length fits in a fixed amount of local memory. The output replaces the query in place.
 * softcap > 0 caps each score (after scale) to softcap tanh(s / softcap) before the softmax. */

#define ACC_PER_ITEM ((MAX_HD + WG - 1) / WG)

__kernel WG_ATTR void attention(__global float *QA, int q_row0, __global const uchar *Kc,
                                __global const uchar *Vc, int kv_kind, int pos0, int n_head,
                                int n_head_kv, int hd, int window, int kv_rows, float scale,
                                float softcap) {
        __local float qv[MAX_HD];
        __local float p[WG];
        __local float red[WG];
        const int g = get_group_id(0), lid = get_local_id(0);
        const int i = g / n_head, h = g % n_head, kh = h / (n_head / n_head_kv);
        const int qd = n_head * hd, pos = pos0 + i;
        __global float *q = QA + (long) (q_row0 + i) * qd + h * hd;

        for (int d = lid; d < hd; d += WG)
                qv[d] = q[d];
        barrier(CLK_LOCAL_MEM_FENCE);

        float m = -INFINITY, l = 0, acc[ACC_PER_ITEM];
        for (int j = 0; j < ACC_PER_ITEM; j++)
                acc[j] = 0;
        const int first = window > 0 && pos >= window ? pos - window + 1 : 0;
        for (int tb = first; tb <= pos; tb += WG) {
                const int t = tb + lid;
                float s = -INFINITY;
                if (t <= pos) {
                        const long k0 = ((long) kh * kv_rows + t % kv_rows) * hd;
                        float dot = 0;
                        for (int d = 0; d < hd; d++)
                                dot += qv[d] * kv_at(Kc, kv_kind, k0 + d);
                        s = dot * scale;
                        if (softcap > 0) /* gemma2: softcap tanh(s / softcap), as llama.cpp */
                                s = tanh(s * (1.0f / softcap)) * softcap;
                }
                const float mn = fmax(m, wg_maxf(s, red));
                const float e = t <= pos ? exp(s - mn) : 0.0f;
                p[lid] = e;
                const float corr = exp(m - mn); /* 0 on the first tile */
                l = l * corr + wg_sumf(e, red); /* its barriers publish p */
                const int nt = min(WG, pos - tb + 1);
                for (int j = 0; j < ACC_PER_ITEM; j++) {
                        const int d = lid + j * WG;
                        if (d < hd) {
                                float a = acc[j] * corr;
                                for (int u = 0; u < nt; u++)
                                        a += p[u] * kv_at(Vc, kv_kind, ((long) kh * kv_rows + (tb + u) % kv_rows) * hd + d);
                                acc[j] = a;
                        }
                }
                m = mn;
                barrier(CLK_LOCAL_MEM_FENCE); /* p is rewritten by the next tile */
        }
        for (int j = 0; j < ACC_PER_ITEM; j++) {
                const int d = lid + j * WG;
                if (d < hd)
                        q[d] = acc[j] / l;
        }
}
