/* pfor kernel benchmark: bytes per id, encode and decode time as multiples of memcpy of the
 * int32 ids, for the packed codec (bitpack.h, every id at the width of the largest) and pfor
 * (pfor.h), on the same ids, side by side in one run (median of repeats, interleaved).
 *
 *   gcc -O3 -std=c99 -I tokenwire/include bench/pfor_kernel.c -o /tmp/pfor_kernel -lm && \
 *       /tmp/pfor_kernel [--repeats R] [--paths avx2|sse2] FILE.i32...
 *
 * FILE.i32: raw little-endian int32 ids (bench/pfor_ids.py writes real tokenizer ids); the
 * special name "zipf" (with vocab 151936) gives a synthetic stream like
 * bench.data.token_stream (Zipf 1.2 ranks through a shuffled vocabulary; a
 * different generator, so the same distribution, not the same ids). Sizes: 1k, 8k, 40k, 128k ids
 * (the first n of the file). Packed encode here includes its OR scan and defensive copy, as
 * tokenwire's encoder does. pfor takes the best paths the CPU has (twpf_init: AVX-512 VBMI2,
 * else AVX2, else SSE2; printed first), or at most AVX2 or SSE2 with --paths; the ratio columns vary by +-20 % between runs on a shared machine, so compare
 * variants side by side in one run, and count instructions (valgrind --tool=callgrind on a
 * small driver that encodes and decodes a fixed number of times) for changes below that. */
#define _POSIX_C_SOURCE 199309L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tokenwire/pfor.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmpd);
    return v[n / 2];
}

/* packed as the frame encoder does it: copy + OR scan, then pack at the max width */
static size_t packed_encode(const int32_t *ids, size_t n, int32_t *scratch, uint8_t *out) {
    uint32_t orv = twbp_copy_or_all(scratch, ids, n);
    unsigned w = twpf_bitlen(orv);
    out[0] = (uint8_t)w;
    if (w == 0) return 1;
    twbp_packer pk = {out + 1, 0, 0};
    twbp_pack(&pk, scratch, n, w);
    twbp_pack_finish(&pk);
    return (size_t)(pk.out - out);
}

static void packed_decode(const uint8_t *src, size_t len, int32_t *dst, size_t n) {
    unsigned w = src[0];
    if (w == 0) memset(dst, 0, 4 * n);
    else twbp_unpack(src + 1, len - 1, 0, dst, n, w);
}

static int32_t *zipf_ids(size_t n) {
    const uint32_t vocab = 151936;
    uint32_t *perm = (uint32_t *)malloc(4 * vocab);
    uint64_t s = 12345;
    for (uint32_t i = 0; i < vocab; i++) perm[i] = i;
    for (uint32_t i = vocab - 1; i > 0; i--) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t j = (uint32_t)((s >> 33) % (i + 1));
        uint32_t t = perm[i]; perm[i] = perm[j]; perm[j] = t;
    }
    /* inverse-CDF sampling of a Zipf(1.2) over ranks 1..vocab */
    double *cdf = (double *)malloc(sizeof(double) * vocab);
    double acc = 0;
    for (uint32_t r = 0; r < vocab; r++) cdf[r] = (acc += pow((double)(r + 1), -1.2));
    int32_t *ids = (int32_t *)malloc(4 * n);
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        double u = (double)(s >> 11) / 9007199254740992.0 * acc;
        uint32_t lo = 0, hi = vocab - 1;
        while (lo < hi) { uint32_t mid = (lo + hi) / 2; if (cdf[mid] < u) lo = mid + 1; else hi = mid; }
        ids[i] = (int32_t)perm[lo];
    }
    free(cdf);
    free(perm);
    return ids;
}

int main(int argc, char **argv) {
    int repeats = 31;
    int a = 1;
    const char *paths = NULL;
    twpf_init();
    for (;;) {
        if (argc > a + 1 && strcmp(argv[a], "--repeats") == 0) { repeats = atoi(argv[a + 1]); a += 2; }
        else if (argc > a + 1 && strcmp(argv[a], "--paths") == 0) { paths = argv[a + 1]; a += 2; }
        else break;
    }
#if TWPF_AVX2_SHUFFLES
    if (paths && (strcmp(paths, "avx2") == 0 || strcmp(paths, "sse2") == 0)) twpf_have_512 = 0;
    if (paths && strcmp(paths, "sse2") == 0) twbp_have_avx2 = 0;
    printf("pfor paths: %s\n", twpf_have_512 ? "avx512" : twbp_have_avx2 ? "avx2" : "sse2");
#else
    (void)paths;
    printf("pfor paths: portable\n");
#endif
    static const size_t sizes[] = {1000, 8000, 40000, 131072};
    const size_t maxn = 131072;
    int32_t *scratch = (int32_t *)malloc(4 * maxn), *dec = (int32_t *)malloc(4 * maxn);
    int32_t *copy = (int32_t *)malloc(4 * maxn);
    uint8_t *pk = (uint8_t *)malloc(4 * maxn + 16), *pf = (uint8_t *)malloc(twpf_bound(maxn));
    printf("%-14s %7s | %8s %8s | %6s %6s %6s | %6s %6s %6s\n", "ids", "n", "packed", "pfor",
           "memcpy", "pk enc", "pf enc", "", "pk dec", "pf dec");
    printf("%-14s %7s | %8s %8s | %6s %6s %6s | %6s %6s %6s\n", "", "", "B/id", "B/id",
           "us", "x mcpy", "x mcpy", "", "x mcpy", "x mcpy");
    for (; a < argc; a++) {
        int32_t *ids;
        size_t have;
        if (strcmp(argv[a], "zipf") == 0) {
            have = maxn;
            ids = zipf_ids(maxn);
        } else {
            FILE *f = fopen(argv[a], "rb");
            if (!f) { perror(argv[a]); return 1; }
            ids = (int32_t *)malloc(4 * maxn);
            have = fread(ids, 4, maxn, f);
            fclose(f);
        }
        const char *name = strrchr(argv[a], '/') ? strrchr(argv[a], '/') + 1 : argv[a];
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            size_t n = sizes[si] < have ? sizes[si] : have;
            /* inner loop count so one sample takes ~0.2 ms at least */
            int inner = (int)(200000 / n) + 1;
            double *t[5];
            for (int k = 0; k < 5; k++) t[k] = (double *)malloc(sizeof(double) * (size_t)repeats);
            size_t lpk = 0, lpf = 0;
            for (int r = 0; r < repeats; r++) {
                double t0 = now();
                for (int i = 0; i < inner; i++) { memcpy(copy, ids, 4 * n); __asm__ volatile("" ::"r"(copy) : "memory"); }
                double t1 = now();
                for (int i = 0; i < inner; i++) lpk = packed_encode(ids, n, scratch, pk);
                double t2 = now();
                for (int i = 0; i < inner; i++) lpf = twpf_encode(ids, n, pf);
                double t3 = now();
                for (int i = 0; i < inner; i++) packed_decode(pk, lpk, dec, n);
                double t4 = now();
                for (int i = 0; i < inner; i++) {
                    twpf_error err;
                    if (twpf_decode(pf, lpf, dec, n, &err) != TWPF_OK) { fprintf(stderr, "decode: %s\n", err.msg); return 1; }
                }
                double t5 = now();
                t[0][r] = (t1 - t0) / inner; t[1][r] = (t2 - t1) / inner; t[2][r] = (t3 - t2) / inner;
                t[3][r] = (t4 - t3) / inner; t[4][r] = (t5 - t4) / inner;
            }
            if (memcmp(dec, ids, 4 * n) != 0) { fprintf(stderr, "round trip failed\n"); return 1; }
            double m[5];
            for (int k = 0; k < 5; k++) { m[k] = median(t[k], repeats); free(t[k]); }
            printf("%-14s %7zu | %8.3f %8.3f | %6.2f %6.2f %6.2f | %6s %6.2f %6.2f\n", name, n,
                   (double)lpk / (double)n, (double)lpf / (double)n, m[0] * 1e6, m[1] / m[0],
                   m[2] / m[0], "", m[3] / m[0], m[4] / m[0]);
        }
        free(ids);
    }
    return 0;
}
