/* SPDX-License-Identifier: MIT */
/* The machine's read bandwidth (kernels/cpu/membw.h): a buffer far larger than the last-level
 * cache read with every method this CPU runs (AVX-512 and AVX2 loads, two and four
 * accumulators, software prefetch at several distances, non-temporal loads, portable C), with
 * 1..N threads of a kernel pool, best of several repetitions. Prints each method's figure and
 * the best per thread count, the bound decode's share of the read bandwidth is taken against.
 *
 *   membw [--mib N (512)] [--threads N (2)] [--reps N (5)] [--json] */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/membw.h"

static int usage(FILE *f) {
        fprintf(f, "usage: membw [--mib N (512)] [--threads N (2)] [--reps N (5)] [--json]\n");
        return f == stderr ? 2 : 0;
}

static bool parse_int(const char *s, int lo, int hi, int *ret) {
        char *end;
        long v = strtol(s, &end, 10);
        if (!*s || *end || v < lo || v > hi)
                return false;
        *ret = (int) v;
        return true;
}

int main(int argc, char **argv) {
        int mib = 512, threads = 2, reps = 5, json = 0, c;
        static const struct option opts[] = {
                { "mib", required_argument, NULL, 'm' },  { "threads", required_argument, NULL, 't' },
                { "reps", required_argument, NULL, 'r' }, { "json", no_argument, NULL, 'j' },
                { "help", no_argument, NULL, 'h' },       {},
        };
        while ((c = getopt_long(argc, argv, "", opts, NULL)) >= 0) {
                switch (c) {
                case 'm':
                        if (!parse_int(optarg, 1, 1 << 20, &mib))
                                return fprintf(stderr, "membw: --mib wants 1 to 1048576\n"), 2;
                        break;
                case 't':
                        if (!parse_int(optarg, 1, AXP_MEMBW_MAX_THREADS, &threads))
                                return fprintf(stderr, "membw: --threads wants 1 to %d\n", AXP_MEMBW_MAX_THREADS), 2;
                        break;
                case 'r':
                        if (!parse_int(optarg, 1, 1000, &reps))
                                return fprintf(stderr, "membw: --reps wants 1 to 1000\n"), 2;
                        break;
                case 'j': json = 1; break;
                case 'h': return usage(stdout);
                default: return usage(stderr);
                }
        }
        if (optind < argc)
                return usage(stderr);

        axp_membw bw;
        int r = axp_membw_read((size_t) mib << 20, threads, reps, &bw);
        if (r < 0) {
                fprintf(stderr, "membw: cannot read a buffer of %d MiB: %s\n", mib, strerror(-r));
                return 1;
        }
        if (json) {
                printf("{\"bytes\": %zu, \"reps\": %d, \"methods\": {", bw.bytes, bw.reps);
                for (int m = 0; m < bw.n_methods; m++) {
                        printf("%s\"%s\": [", m ? ", " : "", bw.method[m]);
                        for (int t = 0; t < threads; t++)
                                printf("%s%.2f", t ? ", " : "", bw.gbps[m][t]);
                        printf("]");
                }
                printf("}, \"best\": [");
                for (int t = 0; t < threads; t++)
                        printf("%s{\"threads\": %d, \"gbps\": %.2f, \"method\": \"%s\"}", t ? ", " : "", t + 1,
                               bw.best[t], bw.method[bw.best_method[t]]);
                printf("]}\n");
                return 0;
        }
        printf("read bandwidth, GB/s: a %d MiB buffer, best of %d repetitions\n%-18s", mib, reps, "method");
        for (int t = 1; t <= threads; t++)
                printf(" %7d thr", t);
        printf("\n");
        for (int m = 0; m < bw.n_methods; m++) {
                printf("%-18s", bw.method[m]);
                for (int t = 0; t < threads; t++)
                        printf(" %11.1f", bw.gbps[m][t]);
                printf("\n");
        }
        for (int t = 0; t < threads; t++)
                printf("best, %d thread%s: %.1f GB/s (%s)\n", t + 1, t ? "s" : "", bw.best[t],
                       bw.method[bw.best_method[t]]);
        return 0;
}
