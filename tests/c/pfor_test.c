/* Tests of the codec v2 kernel (tokenwire/pfor.h): round trips, the byte layout, every decoder
 * error, a seeded fuzz loop over mangled payloads and an encoder racing a writer.
 *
 *   pfor_test [SEED] [FUZZ_ITERATIONS]
 *
 * Built and run by tests/test_pfor_kernel.py (with -fsanitize=address,undefined). Prints "ok" and
 * exits 0 when every check passed; prints each failure and exits 1 otherwise. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Encode into an exact-size heap buffer (ASan sees any write past the bound), decode, compare.
 * Returns the encoded size. */
static size_t roundtrip(const int32_t *ids, size_t n, const char *what) {
    size_t bound = twpf_bound(n);
    uint8_t *buf = (uint8_t *)malloc(bound ? bound : 1);
    size_t len = twpf_encode(ids, n, buf);
    CHECK(len <= bound, "%s n=%zu: %zu bytes > bound %zu", what, n, len, bound);
    CHECK(len >= twpf_min_size(n), "%s n=%zu: below min size", what, n);
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

/* The spec's layout read bit by bit (docs/codec-v2-draft.md), sharing no code with pfor.h:
 * the fast decoder and this one must agree on every payload the encoder writes. Returns 0 when
 * the payload is not well-formed for this reader (it checks sizes, not canonical form). */
static int spec_bit(const uint8_t *area, size_t bit) { return (area[bit / 8] >> (bit % 8)) & 1; }

static int spec_decode(const uint8_t *src, size_t len, int32_t *out, size_t n) {
    size_t p = 0;
    for (size_t s = 0; s < n; s += 128) {
        size_t m = n - s < 128 ? n - s : 128;
        if (p + 2 > len) return 0;
        unsigned b = src[p], e = src[p + 1], x = 0;
        p += 2;
        if (e) { if (p + 1 > len) return 0; x = src[p++]; }
        size_t nbase = (m * b + 7) / 8;
        if (p + nbase > len) return 0;
        for (size_t i = 0; i < m; i++) {
            uint32_t v = 0;
            for (unsigned t = 0; t < b; t++) {
                size_t bit;
                if (m == 128) {                          /* vertical: lane i%4, row i/4 */
                    size_t lb = (i / 4) * b + t;         /* bit in the lane's stream */
                    bit = 8 * (16 * (lb / 32) + 4 * (i % 4)) + lb % 32;
                } else {                                 /* horizontal */
                    bit = i * b + t;
                }
                v |= (uint32_t)spec_bit(src + p, bit) << t;
            }
            out[s + i] = (int32_t)v;
        }
        p += nbase;
        size_t nexc = ((size_t)e * (7 + x) + 7) / 8;
        if (p + nexc > len) return 0;
        for (unsigned j = 0; j < e; j++) {
            uint64_t fld = 0;
            for (unsigned t = 0; t < 7 + x; t++) fld |= (uint64_t)spec_bit(src + p, (size_t)j * (7 + x) + t) << t;
            unsigned pos = (unsigned)(fld & 127);
            if (pos >= m) return 0;
            out[s + pos] = (int32_t)((uint32_t)out[s + pos] | (uint32_t)(fld >> 7) << b);
        }
        p += nexc;
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
    const uint8_t want3[] = {0x02, 0x00, 0x39};     /* b=2, e=0, 1 | 2<<2 | 3<<4 */
    CHECK(len == sizeof want3 && memcmp(buf, want3, len) == 0, "layout of [1,2,3]");

    /* 8 ids: seven 1s and one 300 at position 5. M=9; b=1 with one exception of x=8 bits:
     * 1 base byte + 1 + ceil(15/8) = 4 bytes beats b=9 (9 bytes). 300 = 0b100101100: base
     * bit 0, high part 300 >> 1 = 150; field 5 | 150 << 7 = 0x4B05 (15 bits). */
    int32_t ids8[8] = {1, 1, 1, 1, 1, 300, 1, 1};
    len = twpf_encode(ids8, 8, buf);
    const uint8_t want8[] = {0x01, 0x01, 0x08, 0xDF, 0x05, 0x4B};
    CHECK(len == sizeof want8 && memcmp(buf, want8, len) == 0, "layout of one exception");
    int32_t out[8];
    twpf_error err;
    CHECK(twpf_decode(want8, sizeof want8, out, 8, &err) == TWPF_OK && memcmp(out, ids8, 32) == 0,
          "decode of one exception");

    /* negative id: width 32, little-endian two's complement */
    int32_t neg[1] = {-2};
    len = twpf_encode(neg, 1, buf);
    const uint8_t wantneg[] = {0x20, 0x00, 0xFE, 0xFF, 0xFF, 0xFF};
    CHECK(len == sizeof wantneg && memcmp(buf, wantneg, len) == 0, "layout of [-2]");

    /* a full block is vertical: 128 ids i % 4 at width 2 put lane j's ids (all j) in lane j's
     * two words: 00000000 55555555 AAAAAAAA FFFFFFFF, twice */
    {
        int32_t lanes[128];
        uint8_t big[64], want[34] = {0x02, 0x00};
        for (int i = 0; i < 128; i++) lanes[i] = i % 4;
        for (int k = 0; k < 2; k++)
            for (int j = 0; j < 4; j++) memset(want + 2 + 16 * k + 4 * j, (int)(0x55u * (unsigned)j), 4);
        len = twpf_encode(lanes, 128, big);
        CHECK(len == 34 && memcmp(big, want, 34) == 0, "layout of a full block");
    }

    /* all zeros: 2 bytes a block */
    int32_t zeros[300] = {0};
    len = twpf_encode(zeros, 300, buf);
    const uint8_t wantz[] = {0, 0, 0, 0, 0, 0};
    CHECK(len == 6 && memcmp(buf, wantz, 6) == 0, "layout of 300 zeros");
    CHECK(twpf_decode(buf, 0, out, 0, &err) == TWPF_OK, "empty payload, no ids");
}

static void expect_error(const uint8_t *p, size_t len, size_t n, int code, const char *what) {
    twpf_error err;
    int rc = decode_guarded(p, len, NULL, n, &err);
    CHECK(rc == code, "%s: got %d (%s), want %d", what, rc, err.msg ? err.msg : "ok", code);
}

static void test_errors(void) {
    /* base payload: 8 ids {1,1,1,1,1,300,1,1} = 01 01 08 DF 05 4B */
    const uint8_t ok[] = {0x01, 0x01, 0x08, 0xDF, 0x05, 0x4B};
    expect_error(ok, sizeof ok, 8, TWPF_OK, "reference payload");
    uint8_t p[16];
    memcpy(p, ok, 6); p[0] = 33;
    expect_error(p, 6, 8, TWPF_E_WIDTH, "width 33");
    memcpy(p, ok, 6); p[1] = 8;
    expect_error(p, 6, 8, TWPF_E_EXCEPTIONS, "exception count = block size");
    memcpy(p, ok, 6); p[2] = 0;
    expect_error(p, 6, 8, TWPF_E_EXCEPTIONS, "exception width 0");
    memcpy(p, ok, 6); p[2] = 32;
    expect_error(p, 6, 8, TWPF_E_EXCEPTIONS, "width sum 33");
    memcpy(p, ok, 6); p[4] = 0x08;                    /* position 8 in a block of 8 */
    expect_error(p, 6, 8, TWPF_E_POSITION, "position past the block");
    memcpy(p, ok, 6); p[4] = 0x05; p[5] = 0x00;       /* high part 0 (and x then too wide) */
    expect_error(p, 6, 8, TWPF_E_NONCANONICAL, "zero high part");
    /* two exceptions out of order: b=1, e=2, x=8, 15-bit fields (5, 150), (3, 150) */
    {
        uint8_t q[] = {0x01, 0x02, 0x08, 0xFF, 0, 0, 0, 0};
        uint64_t f = (5u | 150u << 7) | (uint64_t)(3u | 150u << 7) << 15;
        for (int k = 0; k < 4; k++) q[4 + k] = (uint8_t)(f >> (8 * k));
        expect_error(q, 8, 8, TWPF_E_POSITION, "positions decreasing");
        f = (5u | 150u << 7) | (uint64_t)(5u | 150u << 7) << 15;
        for (int k = 0; k < 4; k++) q[4 + k] = (uint8_t)(f >> (8 * k));
        expect_error(q, 8, 8, TWPF_E_POSITION, "positions repeated");
    }
    /* x one too large: high part 150 coded in 9 bits (field 16 bits, 2 bytes) */
    {
        const uint8_t q[] = {0x01, 0x01, 0x09, 0xDF, 0x05, 0x4B};
        expect_error(q, 6, 8, TWPF_E_NONCANONICAL, "exception width too large");
    }
    /* e = 0 with b larger than the ids need: [1,2,3] at width 3 */
    {
        const uint8_t q[] = {0x03, 0x00, 0xD1, 0x00};   /* 1 | 2<<3 | 3<<6 = 0xD1, 0x00: 9 bits */
        expect_error(q, 4, 3, TWPF_E_NONCANONICAL, "width too large");
    }
    /* nonzero padding after the base bits ([1,2,3] at width 2: 6 of 8 bits used) */
    {
        const uint8_t q[] = {0x02, 0x00, 0x39 | 0x40};
        expect_error(q, 3, 3, TWPF_E_PADDING, "base padding");
    }
    /* nonzero padding after the exception fields: one exception of 7+9=16 bits uses whole bytes,
     * so take x such that bits remain: ids {1,...,1, 64 at pos 5} -> b=1, x=6, field 13 bits */
    {
        int32_t ids[8] = {1, 1, 1, 1, 1, 64, 1, 1};
        uint8_t q[16];
        size_t len = twpf_encode(ids, 8, q);
        CHECK(len == 6 && q[0] == 1 && q[1] == 1 && q[2] == 6, "13-bit exception layout");
        expect_error(q, len, 8, TWPF_OK, "13-bit exception");
        q[len - 1] |= 0x80;
        expect_error(q, len, 8, TWPF_E_PADDING, "exception padding");
    }
    /* the same checks on a full block followed by more payload (the decoder's fast path):
     * 256 ids of 1 with 300 at positions 5 and 9 -> block 0 = 01 02 08, 16 base bytes, then
     * two 15-bit fields (5, 150) (9, 150) in 4 bytes at offset 19 */
    {
        int32_t ids[256];
        for (int i = 0; i < 256; i++) ids[i] = 1;
        ids[5] = ids[9] = 300;
        uint8_t q[600];
        size_t len = twpf_encode(ids, 256, q);
        uint64_t f = (5u | 150u << 7) | (uint64_t)(9u | 150u << 7) << 15;
        CHECK(q[0] == 1 && q[1] == 2 && q[2] == 8, "full-block exception header");
        CHECK((q[19] | q[20] << 8 | q[21] << 16 | (uint64_t)q[22] << 24) == f, "full-block fields");
        expect_error(q, len, 256, TWPF_OK, "full block with two exceptions");
        uint64_t g = (9u | 150u << 7) | (uint64_t)(5u | 150u << 7) << 15;
        for (int k = 0; k < 4; k++) q[19 + k] = (uint8_t)(g >> (8 * k));
        expect_error(q, len, 256, TWPF_E_POSITION, "full block, positions decreasing");
        g = (5u | 150u << 7) | (uint64_t)(5u | 150u << 7) << 15;
        for (int k = 0; k < 4; k++) q[19 + k] = (uint8_t)(g >> (8 * k));
        expect_error(q, len, 256, TWPF_E_POSITION, "full block, positions repeated");
        g = (5u | 150u << 7) | (uint64_t)9u << 15;
        for (int k = 0; k < 4; k++) q[19 + k] = (uint8_t)(g >> (8 * k));
        expect_error(q, len, 256, TWPF_E_NONCANONICAL, "full block, zero high part");
    }
    /* wide exception fields this encoder never writes (its b is at least M - 8) but other
     * encoders may: b = 0 and one exception of x = 31 bits (a 38-bit field), and b = 1 with
     * x = 31 (field of 38 bits too), decoded by the general path */
    {
        const uint64_t f1 = 7u | (uint64_t)0x7FFFFFFFu << 7;
        uint8_t q[8] = {0x00, 0x01, 0x1F};
        for (int k = 0; k < 5; k++) q[3 + k] = (uint8_t)(f1 >> (8 * k));
        int32_t got[8];
        twpf_error err;
        int rc = twpf_decode(q, 8, got, 8, &err);
        CHECK(rc == TWPF_OK && got[7] == 0x7FFFFFFF && got[0] == 0 && got[6] == 0,
              "38-bit exception field: %d %s", rc, err.msg ? err.msg : "");
        /* ids {1, 1, 1, 1, 1, 1, 1, INT32_MIN | 1}: b=1, x=31, high part 1 << 30 at position 7 */
        const uint64_t f2 = 7u | (uint64_t)(1u << 30) << 7;
        uint8_t r[9] = {0x01, 0x01, 0x1F, 0xFF};
        for (int k = 0; k < 5; k++) r[4 + k] = (uint8_t)(f2 >> (8 * k));
        rc = twpf_decode(r, 9, got, 8, &err);
        CHECK(rc == TWPF_OK && got[0] == 1 && got[7] == (int32_t)(0x80000001u),
              "b=1, x=31: %d %s", rc, err.msg ? err.msg : "");
        r[8] |= 0x80;    /* bit 39: padding after the 38-bit field */
        expect_error(r, 9, 8, TWPF_E_PADDING, "padding after a 38-bit field");
    }
    const uint8_t two[] = {0x00, 0x00};
    expect_error(two, 2, 128, TWPF_OK, "128 zeros");
    expect_error(two, 2, 129, TWPF_E_TRUNCATED, "claimed count beyond the payload");
    expect_error(two, 1, 1, TWPF_E_TRUNCATED, "half a header");
    {   /* refused before any write: dst has room for one id only */
        int32_t one[1];
        twpf_error err;
        CHECK(twpf_decode(two, 2, one, (size_t)1 << 40, &err) == TWPF_E_TRUNCATED, "huge claimed count");
    }
    expect_error(ok, 3, 8, TWPF_E_TRUNCATED, "ends after the header");
    expect_error(ok, 5, 8, TWPF_E_TRUNCATED, "ends inside the exceptions");
    const uint8_t hdr[] = {0x01, 0x01};
    expect_error(hdr, 2, 8, TWPF_E_TRUNCATED, "ends before the exception width");
    expect_error(two, 2, 0, TWPF_E_TRAILING, "bytes with no ids");
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
            case 4: if (mlen >= 3) { size_t blk = (size_t)(rnd() % (mlen - 2));
                        mut[blk] = (uint8_t)(rnd() % 40); mut[blk + 1] = (uint8_t)(rnd() % 140); }
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
typedef struct { volatile int32_t *ids; size_t n; volatile int stop; } race_arg;

static void *race_writer(void *p) {
    race_arg *a = (race_arg *)p;
    uint32_t k = 0;
    while (!a->stop) {
        for (size_t i = 0; i < a->n; i++) a->ids[i] = (k & 1) ? (int32_t)(i % 50000) : -1 - (int32_t)(i % 7);
        k++;
    }
    return NULL;
}

static void test_race(void) {
    const size_t n = 4096;
    int32_t *ids = (int32_t *)malloc(sizeof(int32_t) * n);
    for (size_t i = 0; i < n; i++) ids[i] = (int32_t)(i % 50000);
    race_arg a = {ids, n, 0};
    pthread_t t;
    pthread_create(&t, NULL, race_writer, &a);
    uint8_t *buf = (uint8_t *)malloc(twpf_bound(n));
    int32_t *out = (int32_t *)malloc(sizeof(int32_t) * n);
    for (int r = 0; r < 200; r++) {
        size_t len = twpf_encode(ids, n, buf);
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
    free(out);
    free(buf);
    free(ids);
}

int main(int argc, char **argv) {
    rng_state = argc > 1 ? strtoull(argv[1], NULL, 10) : 1;
    unsigned iterations = argc > 2 ? (unsigned)strtoul(argv[2], NULL, 10) : 20000;
    twpf_init();
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
    if (failures) {
        fprintf(stderr, "%d failures\n", failures);
        return 1;
    }
    printf("ok\n");
    return 0;
}
