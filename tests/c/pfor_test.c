/* Tests of the pfor kernel (tokenwire/pfor.h): round trips, the byte layout, every decoder
 * error, a seeded fuzz loop over mangled payloads and an encoder racing a writer.
 *
 *   pfor_test [SEED] [FUZZ_ITERATIONS] [noavx2 | noavx512]
 *
 * "noavx2" turns the run-time AVX2 and AVX-512 paths off after twpf_init, so the SSE2 paths
 * (what a CPU without AVX2 runs) face the same checks on a machine that has them; "noavx512"
 * turns off only the AVX-512 VBMI2 paths, leaving the AVX2 ones. The first line printed names
 * the paths the run took.
 *
 * Built and run by tests/test_pfor_kernel.py (with -fsanitize=address,undefined). Prints "ok" and
 * exits 0 when every check passed; prints each failure and exits 1 otherwise. */
#define _POSIX_C_SOURCE 200809L     /* clock_gettime, sched_yield under -std=c99 */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tokenwire/pfor.h"

static int failures = 0;

#define CHECK(cond, ...)                                                                       \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            failures++;                                                                        \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                               \
            fprintf(stderr, __VA_ARGS__);                                                      \
            fprintf(stderr, "\n");                                                             \
        }                                                                                      \
    } while (0)

static uint64_t rng_state;
static uint64_t rnd(void) {                 /* splitmix64 */
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static uint32_t rnd_bits(unsigned w) { return w ? (uint32_t)(rnd() >> (64 - w)) : 0; }

#define GUARD 16
#define CANARY ((int32_t)0x5A5A5A5A)

/* Decode into a buffer with canaries on both sides; checks nothing past n ids is written. */
static int decode_guarded(const uint8_t *src, size_t len, int32_t *out, size_t n, twpf_error *err) {
    int32_t *buf = (int32_t *)malloc(sizeof(int32_t) * (n + 2 * GUARD));
    for (size_t i = 0; i < n + 2 * GUARD; i++) buf[i] = CANARY;
    int rc = twpf_decode(src, len, buf + GUARD, n, err);
    for (size_t i = 0; i < GUARD; i++) {
        CHECK(buf[i] == CANARY, "decoder wrote before dst");
        CHECK(buf[GUARD + n + i] == CANARY, "decoder wrote past dst[n]");
    }
    if (out) memcpy(out, buf + GUARD, sizeof(int32_t) * n);
    free(buf);
    CHECK(rc == TWPF_OK || (err && err->msg), "error %d without a message", rc);
    return rc;
}

/* The encoder's rule for each block's width, written from the spec and sharing no code with
 * pfor.h: b in [max(0, M-8), M] (M the block's bit length) giving the fewest bytes, the larger b
 * on a tie. Walks the payload by its headers and checks every block's header byte; every path
 * (AVX-512, AVX2, SSE2, plain C) must make the same choice. */
static void check_widths(const int32_t *ids, size_t n, const uint8_t *buf, size_t len, const char *what) {
    size_t p = 0;
    for (size_t s = 0; s < n; s += 128) {
        size_t m = n - s < 128 ? n - s : 128;
        uint32_t orv = 0;
        for (size_t i = 0; i < m; i++) orv |= (uint32_t)ids[s + i];
        unsigned M = 0;
        while (M < 32 && (orv >> M)) M++;
        unsigned want = M;
        size_t best = (m * M + 7) / 8;
        for (unsigned c = M; c-- > (M > 8 ? M - 8 : 0);) {
            size_t e = 0;
            for (size_t i = 0; i < m; i++) e += ((uint32_t)ids[s + i] >> c) != 0;
            size_t size = (m * c + 7) / 8 + (m + 7) / 8 + e;
            if (size < best) {
                best = size;
                want = c;
            }
        }
        uint8_t hdr = (uint8_t)(want | (want < M ? 0x80 : 0));
        if (p >= len || buf[p] != hdr) {
            CHECK(0, "%s n=%zu: block at %zu has header %02x, want %02x", what, n, s, p < len ? buf[p] : 0, hdr);
            return;
        }
        p += 1 + best;
    }
    CHECK(p == len, "%s n=%zu: blocks end at %zu, payload at %zu", what, n, p, len);
}

/* Encode into an exact-size heap buffer (ASan sees any write past the bound), decode, compare.
 * Returns the encoded size. */
static size_t roundtrip(const int32_t *ids, size_t n, const char *what) {
    size_t bound = twpf_bound(n);
    uint8_t *buf = (uint8_t *)malloc(bound ? bound : 1);
    size_t len = twpf_encode(ids, n, buf);
    CHECK(len <= bound, "%s n=%zu: %zu bytes > bound %zu", what, n, len, bound);
    CHECK(len >= twpf_min_size(n), "%s n=%zu: below min size", what, n);
    check_widths(ids, n, buf, len, what);
    int32_t *out = (int32_t *)malloc(sizeof(int32_t) * (n ? n : 1));
    twpf_error err;
    int rc = decode_guarded(buf, len, out, n, &err);
    CHECK(rc == TWPF_OK, "%s n=%zu: decode error %d %s at %zu", what, n, rc, err.msg, err.offset);
    if (rc == TWPF_OK) {
        size_t i = 0;
        while (i < n && out[i] == ids[i]) i++;
        CHECK(i == n, "%s n=%zu: id %zu is %d, want %d", what, n, i, out[i], ids[i]);
        /* decoded ids encode to the same bytes (the encoder is deterministic) */
        uint8_t *again = (uint8_t *)malloc(bound ? bound : 1);
        size_t len2 = twpf_encode(out, n, again);
        CHECK(len2 == len && memcmp(again, buf, len) == 0, "%s n=%zu: re-encode differs", what, n);
        free(again);
    }
    /* every proper prefix and the payload with a byte more are refused */
    if (n) {
        for (size_t cut = 0; cut < len; cut += (len > 64 ? len / 16 : 1)) {
            rc = decode_guarded(buf, cut, NULL, n, &err);
            CHECK(rc != TWPF_OK, "%s n=%zu: prefix of %zu bytes accepted", what, n, cut);
        }
    }
    uint8_t *longer = (uint8_t *)malloc(len + 1);
    memcpy(longer, buf, len);
    longer[len] = 0;
    rc = decode_guarded(longer, len + 1, NULL, n, &err);
    CHECK(rc == TWPF_E_TRAILING, "%s n=%zu: trailing byte gave %d", what, n, rc);
    free(longer);
    free(out);
    free(buf);
    return len;
}

static const size_t SIZES[] = {0, 1, 2, 7, 8, 9, 127, 128, 129, 255, 256, 257, 1000, 4096 + 3};
#define NSIZES (sizeof SIZES / sizeof SIZES[0])

static void test_roundtrips(void) {
    int32_t *ids = (int32_t *)malloc(sizeof(int32_t) * 5000);
    char what[96];
    for (size_t si = 0; si < NSIZES; si++) {
        size_t n = SIZES[si];
        for (unsigned w = 0; w <= 32; w++) {
            /* every id exactly w bits wide, then uniform below 2**w */
            for (size_t i = 0; i < n; i++) ids[i] = (int32_t)(w ? (rnd_bits(w - 1) | (1u << (w - 1))) : 0);
            snprintf(what, sizeof what, "full width %u", w);
            roundtrip(ids, n, what);
            for (size_t i = 0; i < n; i++) ids[i] = (int32_t)rnd_bits(w);
            snprintf(what, sizeof what, "uniform width %u", w);
            roundtrip(ids, n, what);
            /* mostly narrow ids with a few wide ones: the exception path at every width */
            for (size_t i = 0; i < n; i++)
                ids[i] = (int32_t)(rnd() % 10 == 0 ? rnd_bits(w) : rnd_bits(w / 2));
            snprintf(what, sizeof what, "patched width %u", w);
            roundtrip(ids, n, what);
        }
        /* negative ids: coded as their 32-bit pattern */
        for (size_t i = 0; i < n; i++) ids[i] = (i % 5 == 0) ? -(int32_t)(i + 1) : (int32_t)i;
        roundtrip(ids, n, "negative ids");
        for (size_t i = 0; i < n; i++) ids[i] = (i % 2) ? INT32_MIN : INT32_MAX;
        roundtrip(ids, n, "extremes");
        /* a few byte-sized ids among zeros: width 0 with exceptions (no base area at all) */
        for (size_t i = 0; i < n; i++) ids[i] = (i % 37 == 5) ? (int32_t)(1 + rnd() % 255) : 0;
        roundtrip(ids, n, "sparse bytes at width 0");
        if (n >= 128) {
            uint8_t *b0 = (uint8_t *)malloc(twpf_bound(128));
            CHECK(twpf_encode(ids, 128, b0) == 1 + 16 + 4 && b0[0] == 0x80, "sparse bytes: b = 0 with exceptions");
            free(b0);
        }
        /* one huge id among zeros, at the first and the last position of each block */
        for (size_t i = 0; i < n; i++) ids[i] = (i % 128 == 0 || i % 128 == 127) ? 151935 : 3;
        roundtrip(ids, n, "edge exceptions");
        /* Zipf-like ranks as real tokenizers give them */
        for (size_t i = 0; i < n; i++) {
            unsigned w = 6 + (unsigned)(rnd() % 12);
            ids[i] = (int32_t)(rnd_bits(w) % 151936);
        }
        roundtrip(ids, n, "log-uniform vocab ids");
    }
    free(ids);
}

/* The spec's layout read bit by bit (docs/wire-format.md, "pfor"), sharing no code with pfor.h:
 * the fast decoder and this one must agree on every payload the encoder writes. Returns 0 when
 * the payload is not well-formed for this reader (it checks sizes, not canonical form). */
static int spec_bit(const uint8_t *area, size_t bit) { return (area[bit / 8] >> (bit % 8)) & 1; }

static int spec_decode(const uint8_t *src, size_t len, int32_t *out, size_t n) {
    size_t p = 0;
    for (size_t s = 0; s < n; s += 128) {
        size_t m = n - s < 128 ? n - s : 128;
        if (p + 1 > len) return 0;
        unsigned b = src[p] & 0x7F, exc = src[p] >> 7;
        p += 1;
        size_t nbase = (m * b + 7) / 8;
        if (p + nbase > len) return 0;
        for (size_t i = 0; i < m; i++) {
            uint32_t v = 0;
            for (unsigned t = 0; t < b; t++) {
                size_t bit;
                if (m == 128) {                          /* vertical: lane i%8, row i/8 */
                    size_t lb = (i / 8) * b + t;         /* bit in the lane's stream */
                    size_t K = b / 2;                    /* full 32-bit words per lane */
                    if (lb < 32 * K)
                        bit = 8 * (32 * (lb / 32) + 4 * (i % 8)) + lb % 32;
                    else                                 /* odd b: the lane's 16-bit half word */
                        bit = 8 * (32 * K + 2 * (i % 8)) + (lb - 32 * K);
                } else {                                 /* horizontal */
                    bit = i * b + t;
                }
                v |= (uint32_t)spec_bit(src + p, bit) << t;
            }
            out[s + i] = (int32_t)v;
        }
        p += nbase;
        if (!exc) continue;
        size_t nbm = (m + 7) / 8;                        /* bitmap: bit i = id i is patched */
        if (p + nbm > len) return 0;
        const uint8_t *bm = src + p;
        p += nbm;
        for (size_t i = 0; i < m; i++) {
            if (!spec_bit(bm, i)) continue;
            if (p + 1 > len) return 0;
            out[s + i] = (int32_t)((uint32_t)out[s + i] | (uint32_t)src[p++] << b);
        }
    }
    return p == len;
}

static void test_spec_reader(void) {
    int32_t ids[700], back[700];
    uint8_t buf[4096];
    for (int it = 0; it < 300; it++) {
        size_t n = (size_t)(rnd() % 700);
        unsigned w = (unsigned)(rnd() % 33), w2 = (unsigned)(rnd() % 33);
        for (size_t i = 0; i < n; i++) ids[i] = (int32_t)(rnd() % 6 ? rnd_bits(w) : rnd_bits(w2));
        size_t len = twpf_encode(ids, n, buf);
        int ok = spec_decode(buf, len, back, n);
        CHECK(ok && memcmp(back, ids, 4 * n) == 0, "spec reader disagrees, n=%zu w=%u/%u", n, w, w2);
    }
}

/* The layout, byte for byte (these bytes must decode forever). */
static void test_layout(void) {
    uint8_t buf[64];
    int32_t ids3[3] = {1, 2, 3};
    size_t len = twpf_encode(ids3, 3, buf);
    const uint8_t want3[] = {0x02, 0x39};           /* b=2, no exceptions, 1 | 2<<2 | 3<<4 */
    CHECK(len == sizeof want3 && memcmp(buf, want3, len) == 0, "layout of [1,2,3]");

    /* 8 ids: seven 1s and one 300 at position 5. M=9; b=1 with one exception: 1 base byte +
     * 1 bitmap byte + 1 high byte beats b=9 (9 bytes). 300 = 0b100101100: base bit 0, bitmap
     * bit 5, high part 300 >> 1 = 150. */
    int32_t ids8[8] = {1, 1, 1, 1, 1, 300, 1, 1};
    len = twpf_encode(ids8, 8, buf);
    const uint8_t want8[] = {0x81, 0xDF, 0x20, 0x96};
    CHECK(len == sizeof want8 && memcmp(buf, want8, len) == 0, "layout of one exception");
    int32_t out[8];
    twpf_error err;
    CHECK(twpf_decode(want8, sizeof want8, out, 8, &err) == TWPF_OK && memcmp(out, ids8, 32) == 0,
          "decode of one exception");

    /* negative id: width 32, little-endian two's complement */
    int32_t neg[1] = {-2};
    len = twpf_encode(neg, 1, buf);
    const uint8_t wantneg[] = {0x20, 0xFE, 0xFF, 0xFF, 0xFF};
    CHECK(len == sizeof wantneg && memcmp(buf, wantneg, len) == 0, "layout of [-2]");

    /* a full block is vertical: 128 ids i % 4 at width 2 put lane j's ids (all j) in lane j's
     * two words: 00000000 55555555 AAAAAAAA FFFFFFFF, twice */
    {
        int32_t lanes[128];
        uint8_t big[64], want[33] = {0x02};
        for (int i = 0; i < 128; i++) lanes[i] = i % 4;
        for (int k = 0; k < 2; k++)
            for (int j = 0; j < 4; j++) memset(want + 1 + 16 * k + 4 * j, (int)(0x55u * (unsigned)j), 4);
        len = twpf_encode(lanes, 128, big);
        CHECK(len == 33 && memcmp(big, want, 33) == 0, "layout of a full block");
    }

    /* an odd width: 128 ids i % 8 at width 3. Lane j holds 16 ids equal to j, 48 bits: one word
     * (all lanes' first words, 32 bytes) and a half word (all lanes' last 16 bits, 16 bytes) */
    {
        int32_t lanes[128];
        uint8_t big[64];
        static const uint8_t want[49] = {
            0x03,
            0x00, 0x00, 0x00, 0x00, 0x49, 0x92, 0x24, 0x49, 0x92, 0x24, 0x49, 0x92, 0xDB, 0xB6, 0x6D, 0xDB,
            0x24, 0x49, 0x92, 0x24, 0x6D, 0xDB, 0xB6, 0x6D, 0xB6, 0x6D, 0xDB, 0xB6, 0xFF, 0xFF, 0xFF, 0xFF,
            0x00, 0x00, 0x92, 0x24, 0x24, 0x49, 0xB6, 0x6D, 0x49, 0x92, 0xDB, 0xB6, 0x6D, 0xDB, 0xFF, 0xFF};
        for (int i = 0; i < 128; i++) lanes[i] = i % 8;
        len = twpf_encode(lanes, 128, big);
        CHECK(len == 49 && memcmp(big, want, 49) == 0, "layout of an odd-width full block");
    }

    /* a full block with exceptions: 128 ids of 1 but 300 at positions 5 and 70: b=1, 16 base
     * bytes 0xFF except the two cleared low bits, 16 bitmap bytes, two high bytes 150 */
    {
        int32_t ids[128];
        uint8_t big[64], want[35];
        for (int i = 0; i < 128; i++) ids[i] = 1;
        ids[5] = ids[70] = 300;
        memset(want, 0, sizeof want);
        want[0] = 0x81;
        memset(want + 1, 0xFF, 16);
        /* b = 1 is odd with no full word: lane j's 16 ids are the half word at bytes 2j, 2j+1 */
        want[1 + 2 * (5 % 8) + (5 / 8) / 8] &= (uint8_t)~(1u << ((5 / 8) % 8));    /* lane 5, row 0 */
        want[1 + 2 * (70 % 8) + (70 / 8) / 8] &= (uint8_t)~(1u << ((70 / 8) % 8)); /* lane 6, row 8 */
        want[17 + 0] = 0x20;
        want[17 + 8] = 0x40;                         /* bit 70 = bit 6 of byte 8 */
        want[33] = 150;
        want[34] = 150;
        len = twpf_encode(ids, 128, big);
        CHECK(len == 35 && memcmp(big, want, 35) == 0, "layout of a full block with exceptions");
    }

    /* all zeros: 1 byte a block */
    int32_t zeros[300] = {0};
    len = twpf_encode(zeros, 300, buf);
    const uint8_t wantz[] = {0, 0, 0};
    CHECK(len == 3 && memcmp(buf, wantz, 3) == 0, "layout of 300 zeros");
    CHECK(twpf_decode(buf, 0, out, 0, &err) == TWPF_OK, "empty payload, no ids");
}

static void expect_error(const uint8_t *p, size_t len, size_t n, int code, const char *what) {
    twpf_error err;
    int rc = decode_guarded(p, len, NULL, n, &err);
    CHECK(rc == code, "%s: got %d (%s), want %d", what, rc, err.msg ? err.msg : "ok", code);
}

static void test_errors(void) {
    /* base payload: 8 ids {1,1,1,1,1,300,1,1} = 81 DF 20 96 */
    const uint8_t ok[] = {0x81, 0xDF, 0x20, 0x96};
    expect_error(ok, sizeof ok, 8, TWPF_OK, "reference payload");
    uint8_t p[16];
    memcpy(p, ok, 4); p[0] = 33;
    expect_error(p, 1, 8, TWPF_E_WIDTH, "width 33");
    memcpy(p, ok, 4); p[0] = 0x80 | 33;
    expect_error(p, 4, 8, TWPF_E_WIDTH, "width 33 with exceptions");
    memcpy(p, ok, 4); p[0] = 0x40 | 1;
    expect_error(p, 4, 8, TWPF_E_WIDTH, "reserved header bit 6");
    memcpy(p, ok, 4); p[2] = 0x00;
    expect_error(p, 4, 8, TWPF_E_EXCEPTIONS, "exception flag with an empty bitmap");
    memcpy(p, ok, 4); p[3] = 0x00;
    expect_error(p, 4, 8, TWPF_E_NONCANONICAL, "zero high part");
    /* width 32 leaves no room for a high part: 1 id, 4 base bytes, bitmap, high */
    {
        const uint8_t q[] = {0xA0, 1, 0, 0, 0, 0x01, 0x01};
        expect_error(q, sizeof q, 1, TWPF_E_EXCEPTIONS, "exceptions at width 32");
    }
    /* b = 25: a high part of 7 bits fits (id 0x7F << 25), one of 8 bits does not */
    {
        uint8_t q[] = {0x80 | 25, 0, 0, 0, 0, 0x01, 0x7F};
        int32_t got[1];
        twpf_error err;
        int rc = twpf_decode(q, sizeof q, got, 1, &err);
        CHECK(rc == TWPF_OK && got[0] == (int32_t)0xFE000000u, "b=25 high 0x7F: %d", rc);
        q[6] = 0x80;
        expect_error(q, sizeof q, 1, TWPF_E_EXCEPTIONS, "high part past bit 31");
    }
    /* the same on a full block with 8 more bytes after it (8 zero blocks), so the AVX2 decoder
     * reads the high part in place and judges it in its register */
    {
        static uint8_t q[1 + 400 + 16 + 1 + 8];
        memset(q, 0, sizeof q);
        q[0] = 0x80 | 25;
        q[401] = 0x01;                              /* bitmap: id 0 */
        q[417] = 0x7F;
        int32_t *got = (int32_t *)malloc(sizeof(int32_t) * 128 * 9);
        twpf_error err;
        int rc = twpf_decode(q, sizeof q, got, 128 * 9, &err);
        CHECK(rc == TWPF_OK && got[0] == (int32_t)0xFE000000u && got[1] == 0, "full block b=25 high 0x7F: %d", rc);
        free(got);
        q[417] = 0x80;
        expect_error(q, sizeof q, 128 * 9, TWPF_E_EXCEPTIONS, "full block, high part past bit 31");
        q[417] = 0x00;
        expect_error(q, sizeof q, 128 * 9, TWPF_E_NONCANONICAL, "full block, zero high part, read in place");
    }
    /* bitmap bit past the block: 5 ids {1,1,1,1,300} = 81 0F 10 96; bit 5 marks a sixth id */
    {
        int32_t ids[5] = {1, 1, 1, 1, 300};
        uint8_t q[16];
        size_t len = twpf_encode(ids, 5, q);
        const uint8_t want[] = {0x81, 0x0F, 0x10, 0x96};
        CHECK(len == 4 && memcmp(q, want, 4) == 0, "layout of 5 ids with one exception");
        q[2] = 0x30;
        expect_error(q, 4, 5, TWPF_E_POSITION, "bitmap bit past the block");
        q[2] = 0x20;
        expect_error(q, 4, 5, TWPF_E_POSITION, "only bitmap bit past the block");
    }
    /* no exceptions with b larger than the ids need: [1,2,3] at width 3 */
    {
        const uint8_t q[] = {0x03, 0xD1, 0x00};   /* 1 | 2<<3 | 3<<6 = 0xD1, 0x00: 9 bits */
        expect_error(q, 3, 3, TWPF_E_NONCANONICAL, "width too large");
    }
    /* nonzero padding after the base bits ([1,2,3] at width 2: 6 of 8 bits used) */
    {
        const uint8_t q[] = {0x02, 0x39 | 0x40};
        expect_error(q, 2, 3, TWPF_E_PADDING, "base padding");
    }
    /* the same checks on a full block followed by more payload: 256 ids of 1 with 300 at
     * positions 5 and 9 -> block 0 = 81, 16 base bytes, bitmap at 17 (bits 5, 9), highs at
     * 33 and 34, then block 1 = 01 and 16 bytes of FF */
    {
        int32_t ids[256];
        for (int i = 0; i < 256; i++) ids[i] = 1;
        ids[5] = ids[9] = 300;
        uint8_t q[600];
        size_t len = twpf_encode(ids, 256, q);
        CHECK(len == 35 + 17 && q[0] == 0x81 && q[17] == 0x20 && q[18] == 0x02 && q[33] == 150 &&
              q[34] == 150 && q[35] == 0x01, "full-block exception layout");
        expect_error(q, len, 256, TWPF_OK, "full block with two exceptions");
        q[34] = 0;
        expect_error(q, len, 256, TWPF_E_NONCANONICAL, "full block, zero high part");
        q[34] = 150;
        q[17] = q[18] = 0;
        expect_error(q, len, 256, TWPF_E_EXCEPTIONS, "full block, empty bitmap");
        q[17] = 0x20; q[18] = 0x02;
        q[35] = 0x02;                                /* block 1 claims width 2 for ids of 1 */
        expect_error(q, len, 256, TWPF_E_TRUNCATED, "second block longer than the payload");
    }
    const uint8_t one[] = {0x00};
    expect_error(one, 1, 128, TWPF_OK, "128 zeros");
    expect_error(one, 1, 129, TWPF_E_TRUNCATED, "claimed count beyond the payload");
    expect_error(one, 0, 1, TWPF_E_TRUNCATED, "no header");
    {   /* refused before any write: dst has room for one id only */
        int32_t dst1[1];
        twpf_error err;
        CHECK(twpf_decode(one, 1, dst1, (size_t)1 << 40, &err) == TWPF_E_TRUNCATED, "huge claimed count");
    }
    {   /* a header per block is there (min size passes) but the first block's ids are not */
        const uint8_t q[] = {0x05, 0x00};
        expect_error(q, 2, 200, TWPF_E_TRUNCATED, "ends inside a block's ids");
    }
    expect_error(ok, 1, 8, TWPF_E_TRUNCATED, "ends after the header");
    expect_error(ok, 2, 8, TWPF_E_TRUNCATED, "ends before the bitmap");
    expect_error(ok, 3, 8, TWPF_E_TRUNCATED, "ends before the high parts");
    expect_error(one, 1, 0, TWPF_E_TRAILING, "bytes with no ids");
}

/* Mangled payloads: flipped bits, overwritten bytes, cuts, insertions, random headers and
 * random bytes, decoded with the right and wrong counts. Only clean outcomes are allowed: a
 * known code with a message, nothing written outside dst (the sanitizers watch the reads). */
static unsigned fuzz_outcomes[TWPF_E_TRAILING + 1];

static void test_fuzz(unsigned iterations) {
    int32_t ids[700];
    uint8_t enc[4096], mut[4200];
    for (unsigned it = 0; it < iterations; it++) {
        size_t n = (size_t)(rnd() % 700);
        unsigned w = (unsigned)(rnd() % 33), w2 = (unsigned)(rnd() % 33);
        for (size_t i = 0; i < n; i++) ids[i] = (int32_t)(rnd() % 8 ? rnd_bits(w) : rnd_bits(w2));
        size_t len = twpf_encode(ids, n, enc);
        size_t mlen = len;
        memcpy(mut, enc, len);
        unsigned edits = 1 + (unsigned)(rnd() % 4);
        for (unsigned k = 0; k < edits; k++) {
            switch (rnd() % 6) {
            case 0: if (mlen) mut[rnd() % mlen] ^= (uint8_t)(1u << (rnd() % 8)); break;
            case 1: if (mlen) mut[rnd() % mlen] = (uint8_t)rnd(); break;
            case 2: if (mlen) mlen = (size_t)(rnd() % mlen); break;
            case 3: if (mlen < sizeof mut - 8) { size_t at = mlen ? rnd() % mlen : 0;
                        memmove(mut + at + 1, mut + at, mlen - at); mut[at] = (uint8_t)rnd(); mlen++; }
                    break;
            case 4: if (mlen) mut[rnd() % mlen] = (uint8_t)((rnd() % 2 ? 0x80 : 0) | rnd() % 34);
                    break;
            default: for (size_t i = 0; i < mlen; i++) mut[i] = (uint8_t)rnd(); break;
            }
        }
        /* exact-size heap copy: ASan flags any read past mlen */
        uint8_t *heap = (uint8_t *)malloc(mlen ? mlen : 1);
        memcpy(heap, mut, mlen);
        size_t claims[3] = {n, n + 1 + (size_t)(rnd() % 300), n ? (size_t)(rnd() % n) : 0};
        for (int c = 0; c < 3; c++) {
            twpf_error err;
            int rc = decode_guarded(heap, mlen, NULL, claims[c], &err);
            CHECK(rc >= TWPF_OK && rc <= TWPF_E_TRAILING, "fuzz: unknown code %d", rc);
            CHECK(rc == TWPF_OK || err.offset <= mlen, "fuzz: error offset past the payload");
            if (rc >= TWPF_OK && rc <= TWPF_E_TRAILING) fuzz_outcomes[rc]++;
        }
        free(heap);
    }
}

/* The encoder reads each id once (into its stack block), so a writer changing the source during
 * encoding still yields a valid payload whose ids are each an old or a new value. */
typedef struct { volatile int32_t *ids; size_t n; volatile int stop; volatile unsigned long passes; } race_arg;

static void *race_writer(void *p) {
    race_arg *a = (race_arg *)p;
    uint32_t k = 0;
    while (!a->stop) {
        for (size_t i = 0; i < a->n; i++) a->ids[i] = (k & 1) ? (int32_t)(i % 50000) : -1 - (int32_t)(i % 7);
        k++;
        a->passes = k;
    }
    return NULL;
}

/* The race tests count only the calls the writer overlapped (its pass counter moved during the
 * call), and go on until `want` of them did or RACE_SECONDS have passed: on a busy machine the
 * writer thread may not run at all during a fixed number of calls, and such a run could not
 * fail. Fewer than RACE_MIN_OVERLAPS overlapped calls fail the test. */
#define RACE_MIN_OVERLAPS 20
#define RACE_SECONDS 20.0

static void wait_for_writer(volatile unsigned long *passes) {
    while (*passes == 0) sched_yield();
}

static double race_clock(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Whether a race loop goes on after `calls` calls, `overlapped` of them overlapped. */
static int race_more(long calls, unsigned overlapped, unsigned want, double start) {
    if (overlapped >= want) return 0;
    return (calls & 1023) != 0 || race_clock() - start < RACE_SECONDS;
}

static void test_race(void) {
    const size_t n = 4096;
    int32_t *ids = (int32_t *)malloc(sizeof(int32_t) * n);
    for (size_t i = 0; i < n; i++) ids[i] = (int32_t)(i % 50000);
    race_arg a = {ids, n, 0, 0};
    pthread_t t;
    pthread_create(&t, NULL, race_writer, &a);
    uint8_t *buf = (uint8_t *)malloc(twpf_bound(n));
    int32_t *out = (int32_t *)malloc(sizeof(int32_t) * n);
    wait_for_writer(&a.passes);
    unsigned overlapped = 0;
    double start = race_clock();
    for (long r = 0; race_more(r, overlapped, 2000, start); r++) {
        unsigned long before = a.passes;
        size_t len = twpf_encode(ids, n, buf);
        overlapped += a.passes != before;
        CHECK(len <= twpf_bound(n), "race: over the bound");
        twpf_error err;
        int rc = twpf_decode(buf, len, out, n, &err);
        CHECK(rc == TWPF_OK, "race: decode error %d %s", rc, err.msg);
        for (size_t i = 0; rc == TWPF_OK && i < n; i++)
            if (out[i] != (int32_t)(i % 50000) && out[i] != -1 - (int32_t)(i % 7)) {
                CHECK(0, "race: id %zu is %d, neither value written", i, out[i]);
                break;
            }
    }
    a.stop = 1;
    pthread_join(t, NULL);
    CHECK(overlapped >= RACE_MIN_OVERLAPS, "race: the writer overlapped only %u encodes",
          overlapped);
    free(out);
    free(buf);
    free(ids);
}

/* A payload in shared memory whose high parts another party keeps rewriting while it is
 * decoded: one high part of a block cycles 150, 0, 200, 0 (the others stay 150). Every outcome is
 * an error (a zero high part was seen) or ids made of high parts that were checked (each
 * exception 300 or 400), never an exception applied with a high part that was not judged (a
 * zero read again after the check would give 0). */
typedef struct { volatile uint8_t *bytes; size_t len; volatile int stop; volatile unsigned long passes; } hb_race_arg;

static void *hb_writer(void *p) {
    hb_race_arg *a = (hb_race_arg *)p;
    static const uint8_t vals[4] = {150, 0, 200, 0};
    unsigned k = 0;
    while (!a->stop) {
        /* block layout: header, 16 base bytes, 16 bitmap bytes, 16 high parts; one high part
         * of block 5 (moving on every 4 writes) changes, the others are reset to 150 */
        a->bytes[5 * 49 + 33 + (k / 4) % 16] = vals[k % 4];
        k++;
        if (k % 4 == 0)
            for (size_t h = 0; h < 16; h++) a->bytes[5 * 49 + 33 + h] = 150;
        a->passes = k;
    }
    return NULL;
}

static void test_decode_race(void) {
    const size_t n = 128 * 16;
    int32_t *ids = (int32_t *)malloc(sizeof(int32_t) * n), *out = (int32_t *)malloc(sizeof(int32_t) * n);
    for (size_t i = 0; i < n; i++) ids[i] = i % 8 == 3 ? 300 : 1;
    uint8_t *buf = (uint8_t *)malloc(twpf_bound(n));
    size_t len = twpf_encode(ids, n, buf);
    CHECK(len == 16 * 49 && buf[0] == 0x81 && buf[33] == 150, "decode race: payload layout");
    hb_race_arg a = {buf, len, 0, 0};
    pthread_t t;
    pthread_create(&t, NULL, hb_writer, &a);
    wait_for_writer(&a.passes);
    unsigned overlapped = 0;
    double start = race_clock();
    for (long r = 0; race_more(r, overlapped, 20000, start); r++) {
        twpf_error err;
        unsigned long before = a.passes;
        int rc = twpf_decode(buf, len, out, n, &err);
        overlapped += a.passes != before;
        CHECK(rc == TWPF_OK || rc == TWPF_E_NONCANONICAL, "decode race: code %d", rc);
        for (size_t i = 0; rc == TWPF_OK && i < n; i++) {
            int ok = i % 8 == 3 ? (out[i] == 300 || out[i] == 400) : out[i] == 1;
            if (!ok) {
                CHECK(0, "decode race: id %zu is %d, not from a checked high part", i, out[i]);
                break;
            }
        }
    }
    a.stop = 1;
    pthread_join(t, NULL);
    CHECK(overlapped >= RACE_MIN_OVERLAPS, "decode race: the writer overlapped only %u decodes",
          overlapped);
    free(buf);
    free(out);
    free(ids);
}

int main(int argc, char **argv) {
    rng_state = argc > 1 ? strtoull(argv[1], NULL, 10) : 1;
    unsigned iterations = argc > 2 ? (unsigned)strtoul(argv[2], NULL, 10) : 20000;
    twpf_init();
#if TWPF_AVX2_SHUFFLES
    /* which paths this run takes: "noavx2" the SSE2 ones, "noavx512" the AVX2 ones, otherwise
     * the best the CPU has (printed, so a run can be matched to the path it covered) */
    if (argc > 3 && (strcmp(argv[3], "noavx2") == 0 || strcmp(argv[3], "noavx512") == 0)) twpf_have_512 = 0;
    if (argc > 3 && strcmp(argv[3], "noavx2") == 0) twbp_have_avx2 = 0;
    printf("paths: %s\n", twpf_have_512 ? "avx512" : twbp_have_avx2 ? "avx2" : "sse2");
#else
    printf("paths: portable\n");
#endif
    test_layout();
    test_spec_reader();
    test_errors();
    test_roundtrips();
    test_fuzz(iterations);
    /* every outcome must have been reached, or the fuzz loop is not reaching the checks */
    for (int k = TWPF_OK; k <= TWPF_E_TRAILING; k++) {
        printf("fuzz outcome %d: %u\n", k, fuzz_outcomes[k]);
        CHECK(iterations < 2000 || fuzz_outcomes[k] > 0, "fuzz never reached outcome %d", k);
    }
    test_race();
    test_decode_race();
    if (failures) {
        fprintf(stderr, "%d failures\n", failures);
        return 1;
    }
    printf("ok\n");
    return 0;
}
