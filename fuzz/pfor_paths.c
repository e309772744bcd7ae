/* libFuzzer target: pfor's decode and encode paths must agree byte for byte (docs/fuzzing.md).
 *
 * tokenwire/include/tokenwire/pfor.h has four paths: AVX-512 VBMI2 and AVX2 (chosen at run
 * time by twpf_init), SSE2 (what an x86-64 CPU without AVX2 runs) and plain C (TWPF_PORTABLE:
 * big-endian hosts, non-x86). This file is compiled twice: once with -DTWPF_PORTABLE, where it
 * only wraps the plain C encoder and decoder, and once as the harness, which forces the other
 * three the way tests/c/pfor_test.c does (twpf_have_512 / twbp_have_avx2 switched off) and
 * skips, at run time, a path the CPU lacks (it prints which paths run). Each input is used
 * three ways:
 *
 *   1. a payload: the first 2 bytes (little-endian) are the claimed id count n, the rest the
 *      payload; every path decodes it and all must agree (return code, error message and
 *      offset, and the ids when it decodes). Whatever decodes is encoded again on every path:
 *      the payloads must be byte-identical and decode to the same ids;
 *   2. ids: the bytes as int32s; every path encodes them (byte-identical payloads, at most
 *      twpf_bound(n) bytes) and every path decodes that payload to the same ids;
 *   3. the payload of 2 with one byte changed (position and XOR from the first 3 input
 *      bytes), decoded as in 1: damaged but nearly valid payloads from the start.
 *
 * Every output buffer is malloc'ed at its exact size, so ASan reports a write past n ids or
 * past twpf_bound(n) bytes; a disagreement prints both sides and aborts.
 *
 *   clang -fsanitize=fuzzer-no-link,address,undefined -O1 -g -DTWPF_PORTABLE \
 *       -I tokenwire/include -c fuzz/pfor_paths.c -o pfor_portable.o
 *   clang -fsanitize=fuzzer,address,undefined -O1 -g -I tokenwire/include \
 *       fuzz/pfor_paths.c pfor_portable.o -o pfor_paths
 *
 * fuzz/run.sh builds and runs it (target `pfor`), with a seed corpus from tests/fixtures'
 * pfor frames (fuzz/pfor_seeds.py).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenwire/pfor.h"

int pfor_portable_decode(const uint8_t *src, size_t len, int32_t *dst, size_t n,
                         const char **msg, size_t *offset);
size_t pfor_portable_encode(const int32_t *src, size_t n, uint8_t *dst);

#ifdef TWPF_PORTABLE

int pfor_portable_decode(const uint8_t *src, size_t len, int32_t *dst, size_t n,
                         const char **msg, size_t *offset) {
    twpf_error err = {NULL, 0};
    int rc = twpf_decode(src, len, dst, n, &err);
    *msg = err.msg;
    *offset = err.offset;
    return rc;
}

size_t pfor_portable_encode(const int32_t *src, size_t n, uint8_t *dst) {
    return twpf_encode(src, n, dst);
}

#else

enum { P512, PAVX2, PSSE2, PPORT, NPATHS };
static const char *const path_name[NPATHS] = {"avx512vbmi2", "avx2", "sse2", "portable"};
static int path_on[NPATHS];
static unsigned long long stat_inputs, stat_decoded;

/* Run the dispatching kernel with only `path`'s run-time switches on. */
static void select_path(int path) {
#if TWPF_AVX2_SHUFFLES
    twpf_have_512 = path == P512;
    twbp_have_avx2 = path == P512 || path == PAVX2;
#else
    (void)path;
#endif
}

static int decode_on(int path, const uint8_t *src, size_t len, int32_t *dst, size_t n,
                     const char **msg, size_t *offset) {
    if (path == PPORT) return pfor_portable_decode(src, len, dst, n, msg, offset);
    select_path(path);
    twpf_error err = {NULL, 0};
    int rc = twpf_decode(src, len, dst, n, &err);
    *msg = err.msg;
    *offset = err.offset;
    return rc;
}

static size_t encode_on(int path, const int32_t *src, size_t n, uint8_t *dst) {
    if (path == PPORT) return pfor_portable_encode(src, n, dst);
    select_path(path);
    return twpf_encode(src, n, dst);
}

static void fail(const char *what, int a, int b, size_t at) {
    fprintf(stderr, "pfor_paths: %s: path %s and path %s differ (at %zu)\n", what,
            path_name[a], path_name[b], at);
    abort();
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) abort();
    return p;
}

static void check_encode(const int32_t *ids, size_t n, const int32_t *want);

/* Decode (src, len) claiming n ids on every path; they must agree. On success, the ids are
 * encoded again on every path (check_encode). */
static void check_decode(const uint8_t *src, size_t len, size_t n) {
    int32_t *out[NPATHS] = {0};
    int rc[NPATHS];
    const char *msg[NPATHS];
    size_t off[NPATHS];
    int first = -1;
    for (int p = 0; p < NPATHS; p++) {
        if (!path_on[p]) continue;
        out[p] = (int32_t *)xmalloc(4 * n);
        rc[p] = decode_on(p, src, len, out[p], n, &msg[p], &off[p]);
        if (rc[p] < TWPF_OK || rc[p] > TWPF_E_TRAILING || (rc[p] != TWPF_OK && !msg[p])) {
            fprintf(stderr, "pfor_paths: path %s: code %d, message %s\n", path_name[p], rc[p],
                    msg[p] ? msg[p] : "(none)");
            abort();
        }
        if (first < 0) {
            first = p;
            continue;
        }
        if (rc[p] != rc[first]) fail("decode return code", first, p, (size_t)rc[p]);
        if (rc[p] != TWPF_OK) {
            if (strcmp(msg[p], msg[first]) != 0) {
                fprintf(stderr, "pfor_paths: %s says \"%s\", %s says \"%s\"\n",
                        path_name[first], msg[first], path_name[p], msg[p]);
                fail("decode error message", first, p, off[p]);
            }
            if (off[p] != off[first]) fail("decode error offset", first, p, off[p]);
        } else {
            for (size_t i = 0; i < n; i++)
                if (out[p][i] != out[first][i]) fail("decoded id", first, p, i);
        }
    }
    if (rc[first] == TWPF_OK) {
        stat_decoded++;
        check_encode(out[first], n, out[first]);
    }
    for (int p = 0; p < NPATHS; p++) free(out[p]);
}

/* Encode n ids on every path: the payloads must be byte-identical and within twpf_bound(n),
 * and every path must decode that payload to `want` (the ids). */
static void check_encode(const int32_t *ids, size_t n, const int32_t *want) {
    const size_t bound = twpf_bound(n);
    uint8_t *enc[NPATHS] = {0};
    size_t len[NPATHS];
    int first = -1;
    for (int p = 0; p < NPATHS; p++) {
        if (!path_on[p]) continue;
        enc[p] = (uint8_t *)xmalloc(bound);
        len[p] = encode_on(p, ids, n, enc[p]);
        if (len[p] > bound) fail("encoded size over twpf_bound", p, p, len[p]);
        if (first < 0) {
            first = p;
            continue;
        }
        if (len[p] != len[first]) fail("encoded size", first, p, len[p]);
        for (size_t i = 0; i < len[p]; i++)
            if (enc[p][i] != enc[first][i]) fail("encoded byte", first, p, i);
    }
    int32_t *back = (int32_t *)xmalloc(4 * n);
    for (int p = 0; p < NPATHS; p++) {
        if (!path_on[p]) continue;
        const char *msg;
        size_t off;
        int rc = decode_on(p, enc[first], len[first], back, n, &msg, &off);
        if (rc != TWPF_OK) {
            fprintf(stderr, "pfor_paths: path %s refuses the encoder's payload: %s at %zu\n",
                    path_name[p], msg ? msg : "?", off);
            abort();
        }
        for (size_t i = 0; i < n; i++)
            if (back[i] != want[i]) fail("round trip of the encoder's payload", first, p, i);
    }
    free(back);
    for (int p = 0; p < NPATHS; p++) free(enc[p]);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    twpf_init();
#if TWPF_AVX2_SHUFFLES
    path_on[P512] = twpf_have_512;
    path_on[PAVX2] = twbp_have_avx2;
#endif
    path_on[PSSE2] = TWPF_SSE2;
    path_on[PPORT] = 1;
    fprintf(stderr, "tokenwire fuzz: pfor paths run:");
    for (int p = 0; p < NPATHS; p++)
        if (path_on[p]) fprintf(stderr, " %s", path_name[p]);
    fprintf(stderr, "; skipped (not on this CPU or build):");
    for (int p = 0; p < NPATHS; p++)
        if (!path_on[p]) fprintf(stderr, " %s", path_name[p]);
    fprintf(stderr, "\n");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    stat_inputs++;
    if (stat_inputs >= 1u << 16 && (stat_inputs & (stat_inputs - 1)) == 0)
        fprintf(stderr, "tokenwire fuzz: pfor %llu inputs, %llu payloads decoded\n", stat_inputs,
                stat_decoded);
    /* 1. a claimed count and a payload; an exact-size copy, so a read past it is reported */
    if (size >= 2) {
        size_t n = (size_t)data[0] | (size_t)data[1] << 8, len = size - 2;
        uint8_t *payload = (uint8_t *)xmalloc(len);
        memcpy(payload, data + 2, len);
        check_decode(payload, len, n);
        free(payload);
    }
    /* 2. the bytes as ids */
    size_t n = size / 4;
    int32_t *ids = (int32_t *)xmalloc(4 * n);
    memcpy(ids, data, 4 * n);
    check_encode(ids, n, ids);
    /* 3. their payload with one byte changed */
    if (n && size >= 3) {
        uint8_t *enc = (uint8_t *)xmalloc(twpf_bound(n));
        size_t len = encode_on(PSSE2, ids, n, enc);
        enc[((size_t)data[0] | (size_t)data[1] << 8) % len] ^= data[2] ? data[2] : 1;
        uint8_t *exact = (uint8_t *)xmalloc(len);
        memcpy(exact, enc, len);
        check_decode(exact, len, n);
        free(exact);
        free(enc);
    }
    free(ids);
    return 0;
}

#endif
