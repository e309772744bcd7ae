/* Token-id arrays in the wires serving stacks already speak, read and written without a list:
 *
 *   - msgpack: an array of integers (every integer form: positive/negative fixint, uint8..64,
 *     int8..64; fixarray, array16 and array32 headers);
 *   - JSON: an array of integers, `-?(0|[1-9][0-9]*)` with JSON's four whitespace bytes between
 *     tokens (a fraction, an exponent and a leading zero are refused: see docs/wires.md);
 *   - protobuf: packed varints (a `repeated uint32` / `int32` field), as a field's payload or
 *     inside a serialized message (tww_pb_read_field).
 *
 * Readers check every byte, read each byte once (the input may be memory another thread writes)
 * and write int32 ids into a caller buffer whose size the caller derived from the input's size,
 * never from a count the input declares (tww_*_cap). They return 0, or -1 with the message --
 * the text of WireFormatError -- in the caller's buffer of TWW_MSG_SIZE bytes; on error the
 * output holds garbage, which the caller drops. The protobuf writer fills a buffer of the exact
 * size tww_pb_size returned; the msgpack and JSON writers write into one of the size their
 * tww_*_bound function returned (the most bytes the ids can take) and return the size written.
 * Nothing here allocates (the JSON writer's table is the caller's), and nothing reads past `n`.
 * tww_init(), called once before any other function here (and not while one runs), fills the
 * tables of the x86-64 SSSE3 steps and turns them on where the CPU has SSSE3; without it, and
 * on every other platform, the portable loops alone run, with the same results.
 */
#ifndef TOKENWIRE_WIRES_H
#define TOKENWIRE_WIRES_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "byteorder.h"   /* TW_INLINE, tw_bswap32, tw_store_le64 */

#define TWW_MSG_SIZE 256
/* The msgpack and JSON writers store 8 bytes at a time: their buffer holds this many bytes more
 * than the size their tww_*_bound function returns. */
#define TWW_WRITE_SLACK 8

TW_INLINE uint16_t tww_load_be16(const uint8_t *p) {
    return (uint16_t)(((unsigned)p[0] << 8) | p[1]);
}
TW_INLINE uint32_t tww_load_be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
TW_INLINE uint64_t tww_load_be64(const uint8_t *p) {
    return ((uint64_t)tww_load_be32(p) << 32) | tww_load_be32(p + 4);
}

/* ---- msgpack ------------------------------------------------------------------------------ */

/* What a msgpack type byte that is not an integer holds, as messages name it. */
static inline const char *tww_msgpack_kind(uint8_t b) {
    if (b >= 0x80 && b <= 0x8f) return "a map";
    if (b >= 0x90 && b <= 0x9f) return "an array";
    if (b >= 0xa0 && b <= 0xbf) return "a string";
    switch (b) {
    case 0xc0: return "nil";
    case 0xc1: return "the unused type byte 0xc1";
    case 0xc2: case 0xc3: return "a bool";
    case 0xc4: case 0xc5: case 0xc6: return "binary";
    case 0xc7: case 0xc8: case 0xc9: case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8:
        return "an extension";
    case 0xca: case 0xcb: return "a float";
    case 0xd9: case 0xda: case 0xdb: return "a string";
    case 0xdc: case 0xdd: return "an array";
    case 0xde: case 0xdf: return "a map";
    default: return "an integer";
    }
}

/* The array header at the start of `p`: its item count and the offset of the first item. The
 * count is checked against the bytes that follow (every item takes at least one), so a caller
 * may allocate `*count` ids: at most n. */
static inline int tww_msgpack_header(const uint8_t *p, size_t n, size_t *count, size_t *off,
                              char *msg, size_t msz) {
    uint8_t b;
    size_t c, o;
    if (n == 0) {
        snprintf(msg, msz, "msgpack: empty input, expected an array of integers");
        return -1;
    }
    b = p[0];
    if ((b & 0xf0) == 0x90) {
        c = b & 0x0fu;
        o = 1;
    } else if (b == 0xdc || b == 0xdd) {
        o = b == 0xdc ? 3 : 5;
        if (n < o) {
            snprintf(msg, msz, "msgpack: truncated array header: array%s needs %zu bytes, "
                     "the input has %zu", b == 0xdc ? "16" : "32", o, n);
            return -1;
        }
        c = b == 0xdc ? tww_load_be16(p + 1) : tww_load_be32(p + 1);
    } else {
        snprintf(msg, msz, "msgpack: expected an array of integers, got %s (type byte 0x%02x) "
                 "at byte offset 0", tww_msgpack_kind(b), b);
        return -1;
    }
    if (c > n - o) {
        snprintf(msg, msz, "msgpack: the array header declares %zu items, but only %zu bytes "
                 "follow it (an item takes at least 1)", c, n - o);
        return -1;
    }
    *count = c;
    *off = o;
    return 0;
}

/* An item from its type byte `b` and the 8 bytes after it (`w`, big-endian): 1 with its value
 * and size, when it is an integer form holding an int32; 0 otherwise. No branch on the form. */
TW_INLINE int tww_msgpack_int(unsigned b, uint64_t w, int32_t *value, size_t *size) {
    unsigned lg = b & 3u, nbytes = 1u << lg;                 /* 0xcc..0xcf, 0xd0..0xd3 */
    uint64_t vu = w >> (64 - 8 * nbytes);
    uint64_t sign = (uint64_t)1 << (8 * nbytes - 1);
    int fix = (b < 0x80) | (b >= 0xe0);
    int isint = ((b & 0xfc) == 0xcc) | ((b & 0xfc) == 0xd0);
    int issigned = (b & 0xfc) == 0xd0;
    int64_t v = (int64_t)((vu ^ sign) - sign);              /* as a signed form reads it */
    int ok = issigned ? (v >= INT32_MIN) & (v <= INT32_MAX) : vu <= (uint64_t)INT32_MAX;
    v = fix ? (int64_t)(int8_t)b : issigned ? v : (int64_t)vu;
    *value = (int32_t)v;
    *size = fix ? 1 : 1 + (size_t)nbytes;
    return fix | (isint & ok);
}

/* tww_msgpack_int for the two forms most token ids take (uint16, uint32), in fewer
 * operations: 0 for any other form, which tww_msgpack_int then reads. */
TW_INLINE int tww_msgpack_uint(unsigned b, uint64_t w, int32_t *value, size_t *size) {
    uint64_t vu = b & 1u ? w >> 48 : w >> 32;                /* 0xcd: 2 bytes, 0xce: 4 */
    *value = (int32_t)vu;
    *size = 1 + 2 * (size_t)(b & 3u);
    return (b - 0xcdu < 2u) & (vu <= (uint64_t)INT32_MAX);
}

/* ---- msgpack, x86-64: three uint16/uint32 items a step (SSSE3, chosen at run time) ---------
 *
 * Where an item starts depends on every type byte before it: a scalar loop waits for one item's
 * type byte before it can load the next. Here the type bytes of a 64-byte window are compared
 * with 0xce at once (one bit a byte), and the bits at a step's offset name the layout of its next
 * three items, when they are uint16 (0xcd, 3 bytes) or uint32 (0xce, 5 bytes): the bit of the
 * first item's type byte gives the second's offset, and so on, so the 11 bits from the step's
 * offset pick one of 8 layouts (tww_mp_layout). One byte shuffle of the step's 16 bytes puts the
 * three big-endian values in int32 lanes and the three type bytes in the fourth lane; those are
 * compared with the layout's (so the layout read from the window is checked against the bytes
 * the values come from, each read once), and a uint32 from 2**31 shows as a lane's sign bit.
 * Four steps (12 items, at most 60 bytes) a window; a window with any other item, or an id
 * outside int32, is left whole to the scalar loops, which read it as they read everything. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(TWW_PORTABLE)
#  include <immintrin.h>
#  define TWW_SSSE3 1
/* Set by tww_init when the CPU has SSSE3 (and the tables are filled); a test hook may clear it. */
static int tww_have_ssse3 = 0;
/* How many ids the scalar loops take after the SSSE3 steps stop, before those are tried again:
 * 16 after steps that took ids, else twice as many as last time (up to 1024), so that input
 * they rarely take (many ids below 256, say) costs little more than the scalar loops alone. */
TW_INLINE size_t tww_simd_backoff(size_t took, size_t backoff) {
    return took ? 16 : backoff < 1024 ? 2 * backoff : backoff;
}
/* By the bits (byte == 0xce) of the 11 bytes from a step's offset: the step's size in bytes
 * (9 to 15) | its layout (bit k: item k is a uint32) << 4. */
static uint8_t tww_mp_layout[2048];
/* By layout: the shuffle that puts the items' values and type bytes in lanes, and the type
 * bytes those lanes must hold (0 in the value lanes). */
static uint8_t tww_mp_shuffle[8][16], tww_mp_types[8][16];

static inline void tww_mp_tables(void) {
    unsigned key, layout, k, b;
    for (key = 0; key < 2048; key++) {
        unsigned at = 0, bits = 0;
        for (k = 0; k < 3; k++) {
            unsigned big = (key >> at) & 1u;
            bits |= big << k;
            at += 3 + 2 * big;
        }
        tww_mp_layout[key] = (uint8_t)(at | bits << 4);
    }
    for (layout = 0; layout < 8; layout++) {
        unsigned at = 0;
        memset(tww_mp_shuffle[layout], 0x80, 16);        /* 0x80: a zero byte */
        memset(tww_mp_types[layout], 0, 16);
        for (k = 0; k < 3; k++) {
            unsigned big = (layout >> k) & 1u, size = big ? 4 : 2;
            for (b = 0; b < size; b++)       /* big-endian value bytes into a little-endian lane */
                tww_mp_shuffle[layout][4 * k + b] = (uint8_t)(at + size - b);
            tww_mp_shuffle[layout][12 + k] = (uint8_t)at;
            tww_mp_types[layout][12 + k] = (uint8_t)(0xcd + big);
            at += 1 + size;
        }
    }
}

/* The writer's, by the bits (id >= 65536) of three ids in [256, 2**31): the shuffle of their
 * int32 lanes into msgpack's bytes (0 where a type byte goes), those type bytes, the size. */
static uint8_t tww_mpw_shuffle[8][16], tww_mpw_types[8][16], tww_mpw_size[8];

static inline void tww_mpw_tables(void) {
    unsigned layout, k, b;
    for (layout = 0; layout < 8; layout++) {
        unsigned at = 0;
        memset(tww_mpw_shuffle[layout], 0x80, 16);
        memset(tww_mpw_types[layout], 0, 16);
        for (k = 0; k < 3; k++) {
            unsigned big = (layout >> k) & 1u, size = big ? 4 : 2;
            tww_mpw_types[layout][at] = (uint8_t)(0xcd + big);
            for (b = 0; b < size; b++)       /* a little-endian lane's bytes, big-endian */
                tww_mpw_shuffle[layout][at + 1 + b] = (uint8_t)(4 * k + size - 1 - b);
            at += 1 + size;
        }
        tww_mpw_size[layout] = (uint8_t)at;
    }
}

/* The protobuf writer's, by the bits (id >= 2**7) | (id >= 2**14) << 4 of four ids below 2**21:
 * the shuffle that packs each lane's 1 to 3 varint bytes together, and their size. */
static uint8_t tww_pbw_shuffle[256][16], tww_pbw_size[256];

static inline void tww_pbw_tables(void) {
    unsigned key, k, b;
    for (key = 0; key < 256; key++) {
        unsigned at = 0;
        memset(tww_pbw_shuffle[key], 0x80, 16);
        for (k = 0; k < 4; k++) {
            unsigned size = 1 + ((key >> k) & 1u) + ((key >> (4 + k)) & 1u);
            for (b = 0; b < size; b++)
                tww_pbw_shuffle[key][at + b] = (uint8_t)(4 * k + b);
            at += size;
        }
        tww_pbw_size[key] = (uint8_t)at;
    }
}

static inline void tww_init(void) {
    tww_mp_tables();
    tww_mpw_tables();
    tww_pbw_tables();
    __builtin_cpu_init();
    tww_have_ssse3 = __builtin_cpu_supports("ssse3") ? 1 : 0;
}

/* Items from (`*pos`, `*i`) in windows of 12 while the input has 64 bytes and `out` 13 slots
 * (each step stores 4 lanes) left; stops at the first window it does not take. */
__attribute__((target("ssse3")))
static inline void tww_msgpack_ssse3(const uint8_t *p, size_t n, size_t *pos_, size_t count,
                                     size_t *i_, int32_t *TW_RESTRICT out) {
    const __m128i ce = _mm_set1_epi8((char)0xce);
    const __m128i checked = _mm_set_epi32(-1, (int)0x80000000u, (int)0x80000000u,
                                          (int)0x80000000u);
    size_t pos = *pos_, i = *i_;
    while (n - pos >= 64 && count - i >= 13) {
        const uint8_t *q = p + pos;
        uint64_t big = 0;
        size_t at = 0;
        unsigned k;
        __m128i bad = _mm_setzero_si128();
        for (k = 0; k < 4; k++) {
            __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(q + 16 * k));
            big |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_cmpeq_epi8(x, ce)) << (16 * k);
        }
        for (k = 0; k < 4; k++) {
            unsigned e = tww_mp_layout[(big >> at) & 0x7ffu], layout = e >> 4;
            __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(q + at));
            __m128i v = _mm_shuffle_epi8(
                x, _mm_loadu_si128((const __m128i *)(const void *)tww_mp_shuffle[layout]));
            _mm_storeu_si128((__m128i *)(void *)(out + i + 3 * k), v);
            bad = _mm_or_si128(bad, _mm_xor_si128(
                v, _mm_loadu_si128((const __m128i *)(const void *)tww_mp_types[layout])));
            at += e & 15u;
        }
        bad = _mm_and_si128(bad, checked);
        if (_mm_movemask_epi8(_mm_cmpeq_epi8(bad, _mm_setzero_si128())) != 0xffff)
            break;
        i += 12;
        pos += at;
    }
    *pos_ = pos;
    *i_ = i;
}
/* Ids from `ids` at `o`, three a step while they lie in [256, 2**31) and 4 are left (a step
 * loads 4 and stores 16 bytes: the buffer has room, tww_msgpack_write's); returns the byte
 * after them, how many in `*done`. */
__attribute__((target("ssse3")))
static inline uint8_t *tww_msgpack_write_ssse3(const int32_t *ids, size_t n, uint8_t *o,
                                               size_t *done) {
    const __m128i below = _mm_set1_epi32(255), wide = _mm_set1_epi32(65535);
    size_t i = 0;
    for (; n - i >= 4; i += 3) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(ids + i));
        unsigned layout;
        if ((_mm_movemask_ps(_mm_castsi128_ps(_mm_cmpgt_epi32(v, below))) & 7) != 7)
            break;                                     /* an id below 256, or negative */
        layout = (unsigned)_mm_movemask_ps(_mm_castsi128_ps(_mm_cmpgt_epi32(v, wide))) & 7u;
        v = _mm_or_si128(_mm_shuffle_epi8(v, _mm_loadu_si128(
                             (const __m128i *)(const void *)tww_mpw_shuffle[layout])),
                         _mm_loadu_si128((const __m128i *)(const void *)tww_mpw_types[layout]));
        _mm_storeu_si128((__m128i *)(void *)o, v);
        o += tww_mpw_size[layout];
    }
    *done = i;
    return o;
}
#else
#  define TWW_SSSE3 0
static int tww_have_ssse3 = 0;      /* always 0 here */
static inline void tww_init(void) { tww_have_ssse3 = 0; }
#endif

/* The `count` items from offset `off` (tww_msgpack_header's), into `out`; the input must end
 * with the last item. */
static inline int tww_msgpack_items(const uint8_t *p, size_t n, size_t off, size_t count,
                             int32_t *TW_RESTRICT out, char *msg, size_t msz) {
    static const uint8_t size_of[32] = {  /* item size by type byte - 0xc0 (integers only) */
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 3, 5, 9, 2, 3, 5, 9, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 0};
    size_t i = 0, pos = off, k;
    /* Two uint16/uint32 items a step while both fit: the second's type byte is taken from the
     * register that holds the first, so the step's only load on the chain from one position to
     * the next is the first. Any other item is read alone while the widest (9 bytes) fits,
     * without a branch on its form. Anything neither takes (not an integer, outside int32)
     * ends both; the exact loop below resumes at that item and reports it. */
#if TWW_SSSE3
    size_t retry = 0, backoff = 8;
#endif
    for (;;) {
        int32_t v0, v1;
        size_t k1, stop = count;
#if TWW_SSSE3
        if (tww_have_ssse3) {
            /* windows while they hold uint16/uint32 ids, then the loops here up to `retry` */
            if (i >= retry) {
                size_t from = i;
                tww_msgpack_ssse3(p, n, &pos, count, &i, out);
                backoff = tww_simd_backoff(i - from, backoff);
                retry = i + backoff;
            }
            if (count - i > retry - i) stop = retry;
        }
#endif
        while (stop - i >= 2 && n - pos >= 18) {
            uint64_t w0 = tw_load_le64(p + pos);
            if (!tww_msgpack_uint((unsigned)(w0 & 0xff), tw_bswap64(w0) << 8, &v0, &k))
                break;
            if (!tww_msgpack_uint((unsigned)(w0 >> (8 * k)) & 0xffu,
                                  tww_load_be64(p + pos + k + 1), &v1, &k1))
                break;
            out[i] = v0;
            out[i + 1] = v1;
            i += 2;
            pos += k + k1;
        }
        if (i >= count || n - pos < 9 ||
            !tww_msgpack_int(p[pos], tww_load_be64(p + pos + 1), &v0, &k))
            break;
        out[i++] = v0;
        pos += k;
    }
    for (; i < count; i++) {
        uint8_t b;
        int64_t v;
        if (pos >= n) {
            snprintf(msg, msz, "msgpack: truncated: item %zu at byte offset %zu is missing "
                     "(the array declares %zu items)", i, pos, count);
            return -1;
        }
        b = p[pos];
        if (b < 0x80) {
            out[i] = b;
            pos++;
            continue;
        }
        if (b >= 0xe0) {
            out[i] = (int8_t)b;
            pos++;
            continue;
        }
        k = b >= 0xc0 ? size_of[b - 0xc0] : 0;
        if (k == 0) {
            snprintf(msg, msz, "msgpack: item %zu at byte offset %zu is %s (type byte 0x%02x), "
                     "not an integer", i, pos, tww_msgpack_kind(b), b);
            return -1;
        }
        if (k > n - pos) {
            snprintf(msg, msz, "msgpack: truncated: item %zu at byte offset %zu needs %zu "
                     "bytes, %zu remain", i, pos, k, n - pos);
            return -1;
        }
        switch (b) {
        case 0xcc: v = p[pos + 1]; break;
        case 0xcd: v = tww_load_be16(p + pos + 1); break;
        case 0xce: v = tww_load_be32(p + pos + 1); break;
        case 0xcf: {
            uint64_t u = tww_load_be64(p + pos + 1);
            if (u > (uint64_t)INT32_MAX) {
                snprintf(msg, msz, "msgpack: item %zu at byte offset %zu is %llu, outside int32",
                         i, pos, (unsigned long long)u);
                return -1;
            }
            v = (int64_t)u;
            break;
        }
        case 0xd0: v = (int8_t)p[pos + 1]; break;
        case 0xd1: v = (int16_t)tww_load_be16(p + pos + 1); break;
        case 0xd2: v = (int32_t)tww_load_be32(p + pos + 1); break;
        default: v = (int64_t)tww_load_be64(p + pos + 1); break;      /* 0xd3 */
        }
        if (v < INT32_MIN || v > INT32_MAX) {
            snprintf(msg, msz, "msgpack: item %zu at byte offset %zu is %lld, outside int32",
                     i, pos, (long long)v);
            return -1;
        }
        out[i] = (int32_t)v;
        pos += k;
    }
    if (pos != n) {
        snprintf(msg, msz, "msgpack: %zu trailing bytes at byte offset %zu, after the array's "
                 "%zu items", n - pos, pos, count);
        return -1;
    }
    return 0;
}

/* The most bytes msgpack takes for n ids (n < 2**32): a 5-byte header, 5 bytes an id. */
TW_INLINE size_t tww_msgpack_bound(size_t n) { return 5 + 5 * n; }

TW_INLINE uint8_t *tww_store_be16(uint8_t *o, uint32_t v) {
    o[0] = (uint8_t)(v >> 8);
    o[1] = (uint8_t)v;
    return o + 2;
}
TW_INLINE uint8_t *tww_store_be32(uint8_t *o, uint32_t v) {
    o[0] = (uint8_t)(v >> 24);
    o[1] = (uint8_t)(v >> 16);
    o[2] = (uint8_t)(v >> 8);
    o[3] = (uint8_t)v;
    return o + 4;
}

/* A non-negative id in its smallest form at `o` (room for 8 bytes); returns the byte after
 * it. One 8-byte store of the smallest of its candidate forms, all computed up front. */
TW_INLINE uint8_t *tww_msgpack_put_uint(uint8_t *o, uint32_t u) {
    uint64_t w4 = 0xceu | (uint64_t)tw_bswap32(u) << 8;
    uint64_t w2 = 0xcdu | (uint64_t)tw_bswap16((uint16_t)u) << 8;
    uint64_t w1 = 0xccu | (uint64_t)u << 8;
    uint64_t w = u < 65536u ? w2 : w4;
    size_t k = u < 65536u ? 3 : 5;
    w = u < 256u ? w1 : w;
    k = u < 256u ? 2 : k;
    w = u < 128u ? (uint64_t)u : w;
    k = u < 128u ? 1 : k;
    tw_store_le64(o, w);
    return o + k;
}

/* Any id in its smallest form at `o` (room for 8 bytes); returns the byte after it. */
TW_INLINE uint8_t *tww_msgpack_put_id(uint8_t *o, int32_t v) {
    uint32_t u = (uint32_t)v;
    if (v >= 0) return tww_msgpack_put_uint(o, u);
    if (v >= -32) { o[0] = (uint8_t)u; return o + 1; }
    if (v >= -128) { o[0] = 0xd0; o[1] = (uint8_t)u; return o + 2; }
    if (v >= -32768) { o[0] = 0xd1; return tww_store_be16(o + 1, u); }
    o[0] = 0xd2;
    return tww_store_be32(o + 1, u);
}

/* msgpack as msgspec writes a list of ints (each id in its smallest form) at `o`, which has
 * room for tww_msgpack_bound(n) + TWW_WRITE_SLACK bytes (n < 2**32: the caller checks);
 * returns the size written. One pass, no size pass before it; with SSSE3, three ids a step
 * (tww_msgpack_write_ssse3) and, after a step that stopped, tww_simd_backoff's count here;
 * here, four ids a step, their signs checked at once. */
static inline size_t tww_msgpack_write(const int32_t *ids, size_t n, uint8_t *TW_RESTRICT o) {
    uint8_t *start = o;
    size_t i, j, at = 0, end;
#if TWW_SSSE3
    size_t retry = 0, backoff = 8;
#endif
    if (n < 16) {
        *o++ = (uint8_t)(0x90 | n);
    } else if (n < 65536) {
        *o++ = 0xdc;
        o = tww_store_be16(o, (uint32_t)n);
    } else {
        *o++ = 0xdd;
        o = tww_store_be32(o, (uint32_t)n);
    }
    while (at < n) {
        end = n;
#if TWW_SSSE3
        if (tww_have_ssse3) {
            if (at >= retry) {
                o = tww_msgpack_write_ssse3(ids + at, n - at, o, &j);
                at += j;
                backoff = tww_simd_backoff(j, backoff);
                retry = at + backoff;
            }
            if (n - at > retry - at) end = retry;
        }
#endif
        for (i = at; i + 4 <= end; i += 4) {
            if ((ids[i] | ids[i + 1] | ids[i + 2] | ids[i + 3]) >= 0) {
                o = tww_msgpack_put_uint(o, (uint32_t)ids[i]);
                o = tww_msgpack_put_uint(o, (uint32_t)ids[i + 1]);
                o = tww_msgpack_put_uint(o, (uint32_t)ids[i + 2]);
                o = tww_msgpack_put_uint(o, (uint32_t)ids[i + 3]);
            } else {
                for (j = i; j < i + 4; j++)
                    o = tww_msgpack_put_id(o, ids[j]);
            }
        }
        for (; i < end; i++)
            o = tww_msgpack_put_id(o, ids[i]);
        at = end;
    }
    return (size_t)(o - start);
}

/* ---- JSON --------------------------------------------------------------------------------- */

/* The most ids `n` bytes of JSON can hold: "[1,2]" is 2k + 1 bytes for k ids. */
TW_INLINE size_t tww_json_cap(size_t n) { return n / 2; }

TW_INLINE int tww_json_ws(uint8_t c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

/* What was found where a JSON integer belongs, as messages name it. */
static inline void tww_json_found(const uint8_t *p, size_t n, size_t pos, char *buf, size_t bsz) {
    if (pos >= n)
        snprintf(buf, bsz, "the end of the input");
    else if (p[pos] >= 0x20 && p[pos] < 0x7f)
        snprintf(buf, bsz, "'%c'", p[pos]);
    else
        snprintf(buf, bsz, "byte 0x%02x", p[pos]);
}

/* How many of the 8 bytes of `x` (loaded little-endian) are decimal digits before the first
 * that is not; 8 when all are. A borrow or carry only runs towards later bytes, past the first
 * non-digit, so that byte is flagged exactly. */
TW_INLINE size_t tww_swar_digits(uint64_t x) {
    uint64_t bad = ((x + 0x4646464646464646ull) | (x - 0x3030303030303030ull) | x)
                   & 0x8080808080808080ull;
    return bad ? tw_ctz64(bad) >> 3 : 8;
}

/* The value of the first `d` (1..7) digit bytes of `x`: left-padded with '0' to eight digits,
 * then combined in pairs, fours and eights by multiplication. */
TW_INLINE uint32_t tww_swar_value(uint64_t x, size_t d) {
    unsigned s = (unsigned)(8 * (8 - d));
    uint64_t v = ((x << s) | (0x3030303030303030ull >> (64 - s))) - 0x3030303030303030ull;
    v = v * 10 + (v >> 8);
    v = ((v & 0x000000FF000000FFull) * (100 + (1000000ull << 32)) +
         ((v >> 16) & 0x000000FF000000FFull) * (1 + (10000ull << 32))) >> 32;
    return (uint32_t)v;
}

/* The bytes of `x` that are not decimal digits, each flagged exactly by its top bit (no
 * borrow or carry crosses a byte). */
TW_INLINE uint64_t tww_swar_nondigits(uint64_t x) {
    const uint64_t hi = 0x8080808080808080ull;
    uint64_t ge0 = (x | hi) - 0x3030303030303030ull;            /* low 7 bits >= '0' */
    uint64_t le9 = (0x3939393939393939ull | hi) - (x & ~hi);    /* low 7 bits <= '9' */
    return ~(ge0 & le9 & ~x) & hi;
}

/* A JSON array of integers into `out` (room for tww_json_cap(n) ids), its length in `*count`. */
static inline int tww_json_read(const uint8_t *p, size_t n, int32_t *TW_RESTRICT out, size_t *count,
                         char *msg, size_t msz) {
    char what[32];
    size_t pos = 0, i = 0;
    while (pos < n && tww_json_ws(p[pos])) pos++;
    if (pos >= n || p[pos] != '[') {
        tww_json_found(p, n, pos, what, sizeof what);
        snprintf(msg, msz, "JSON: expected '[' at byte offset %zu, found %s", pos, what);
        return -1;
    }
    pos++;
    while (pos < n && tww_json_ws(p[pos])) pos++;
    if (pos < n && p[pos] == ']') {
        pos++;
    } else {
        for (;;) {
            size_t start, digits;
            int neg = 0;
            uint64_t v = 0;
            /* The common item, 1 to 7 digits and a ',' or ']' right after them, is read from
             * one 8-byte load: its end and what follows are in the register, so the next
             * item's load depends on no other load. Anything else takes the exact path. */
            /* Two such items from one 16-byte window: "d+,d+," found by one mask. */
            while (n - pos >= 16) {
                uint64_t x0 = tw_load_le64(p + pos), x1 = tw_load_le64(p + pos + 8), x2;
                uint64_t m0 = tww_swar_nondigits(x0), m1 = tww_swar_nondigits(x1), rest;
                size_t d0, t1, d1;
                if (m0 == 0)
                    break;
                d0 = tw_ctz64(m0) >> 3;                  /* item 0: bytes [0, d0) */
                rest = m0 & (m0 - 1);
                if (rest == 0 && m1 == 0)
                    break;
                t1 = rest ? tw_ctz64(rest) >> 3 : 8 + (tw_ctz64(m1) >> 3);
                d1 = t1 - d0 - 1;                        /* item 1: bytes (d0, t1) */
                /* item 1's bytes and its terminator, from the registers (each byte read once) */
                x2 = (x0 >> 8 >> (8 * d0)) | (x1 << (56 - 8 * (d0 & 7)));
                if (d0 - 1 >= 7 || d1 - 1 >= 7 || (unsigned)(x0 >> (8 * d0) & 0xff) != ',' ||
                    (unsigned)(x2 >> (8 * d1) & 0xff) != ',' ||
                    (d0 > 1 && (x0 & 0xff) == '0') || (d1 > 1 && (x2 & 0xff) == '0'))
                    break;
                out[i] = (int32_t)tww_swar_value(x0, d0);
                out[i + 1] = (int32_t)tww_swar_value(x2, d1);
                i += 2;
                pos += t1 + 1;
            }
            while (n - pos >= 8) {
                uint64_t x = tw_load_le64(p + pos);
                size_t d = tww_swar_digits(x);
                unsigned c;
                if (d - 1 >= 7 || (d > 1 && (x & 0xff) == '0'))
                    break;
                c = (unsigned)(x >> (8 * d)) & 0xffu;
                if (c != ',' && c != ']')
                    break;
                out[i++] = (int32_t)tww_swar_value(x, d);
                pos += d + 1;
                if (c == ']')
                    goto closed;
            }
            while (pos < n && tww_json_ws(p[pos])) pos++;
            start = pos;
            if (pos < n && p[pos] == '-') { neg = 1; pos++; }
            if (n - pos >= 8) {
                /* 1 to 7 digits, not a fraction or exponent: read from one 8-byte load */
                uint64_t x = tw_load_le64(p + pos);
                size_t d = tww_swar_digits(x), next = pos + d;
                if (d - 1 < 7 && (d == 1 || p[pos] != '0') && p[next] != '.' &&
                    (p[next] | 0x20) != 'e') {
                    v = tww_swar_value(x, d);
                    pos = next;
                    goto have_value;
                }
            }
            digits = pos;
            while (pos < n && (unsigned)(p[pos] - '0') < 10u) {
                if (pos - digits < 11) v = v * 10 + (unsigned)(p[pos] - '0');
                pos++;
            }
            if (pos == digits) {
                tww_json_found(p, n, start, what, sizeof what);
                snprintf(msg, msz, "JSON: item %zu at byte offset %zu: expected an integer, "
                         "found %s", i, start, what);
                return -1;
            }
            if (p[digits] == '0' && pos - digits > 1) {
                snprintf(msg, msz, "JSON: item %zu at byte offset %zu: a number with a leading "
                         "zero is not JSON", i, start);
                return -1;
            }
            if (pos < n && (p[pos] == '.' || p[pos] == 'e' || p[pos] == 'E')) {
                snprintf(msg, msz, "JSON: item %zu at byte offset %zu is not an integer (a "
                         "fraction or exponent): token ids are written as integers", i, start);
                return -1;
            }
            if (pos - digits > 10 || v > (uint64_t)INT32_MAX + (uint64_t)neg) {
                snprintf(msg, msz, "JSON: item %zu at byte offset %zu is outside int32 "
                         "(%.*s%s)", i, start, (int)(pos - start < 24 ? pos - start : 20),
                         (const char *)p + start, pos - start < 24 ? "" : "...");
                return -1;
            }
        have_value:
            out[i++] = neg ? (int32_t)(0 - v) : (int32_t)v;
            while (pos < n && tww_json_ws(p[pos])) pos++;
            if (pos < n && p[pos] == ',') {
                pos++;
                while (pos < n && tww_json_ws(p[pos])) pos++;
                continue;
            }
            if (pos < n && p[pos] == ']') {
                pos++;
                break;
            }
            tww_json_found(p, n, pos, what, sizeof what);
            snprintf(msg, msz, "JSON: expected ',' or ']' after item %zu at byte offset %zu, "
                     "found %s", i - 1, pos, what);
            return -1;
        }
    }
closed:
    while (pos < n && tww_json_ws(p[pos])) pos++;
    if (pos != n) {
        snprintf(msg, msz, "JSON: %zu trailing bytes at byte offset %zu, after the array",
                 n - pos, pos);
        return -1;
    }
    *count = i;
    return 0;
}

TW_INLINE size_t tww_dec_digits(uint32_t u) {
    return (size_t)1 + (u >= 10u) + (u >= 100u) + (u >= 1000u) + (u >= 10000u) + (u >= 100000u)
           + (u >= 1000000u) + (u >= 10000000u) + (u >= 100000000u) + (u >= 1000000000u);
}

/* The most bytes compact JSON takes for n ids ("-2147483648," is 12 bytes). */
TW_INLINE size_t tww_json_bound(size_t n) { return 12 * n + 2; }

/* The 8 decimal digits of u < 10**8, leading zeros included, as the bytes of a little-endian
 * word (the first digit in its lowest byte): both halves of 4 digits at once, each split in
 * hundreds and then tens by multiplications in the word's lanes (no table, one division). */
TW_INLINE uint64_t tww_digits8(uint32_t u) {
    uint64_t merged = (uint64_t)(u / 10000u) | (uint64_t)(u % 10000u) << 32;
    uint64_t top = ((merged * 10486u) >> 20) & ((0x7Full << 32) | 0x7Full);     /* / 100 */
    uint64_t bot = merged - 100u * top;
    uint64_t hundreds = (bot << 16) + top;
    uint64_t tens = (hundreds * 103u) >> 10;                                      /* / 10 */
    tens &= (0xFull << 48) | (0xFull << 32) | (0xFull << 16) | 0xFull;
    tens += (hundreds - 10u * tens) << 8;
    return tens + 0x3030303030303030ull;
}

/* One id's decimal text at `o` (8-byte stores); returns the byte after it. */
TW_INLINE uint8_t *tww_json_put_id(uint8_t *o, int32_t v) {
    uint32_t u;
    size_t d;
    if (v < 0) { *o++ = '-'; u = 0u - (uint32_t)v; } else { u = (uint32_t)v; }
    d = tww_dec_digits(u);
    if (u < 100000000u) {
        tw_store_le64(o, tww_digits8(u) >> (8 * (8 - d)));
    } else {
        tw_store_le64(o + d - 8, tww_digits8(u % 100000000u));
        if (d == 10) {
            o[0] = (uint8_t)('0' + u / 1000000000u);
            o[1] = (uint8_t)('0' + u / 100000000u % 10u);
        } else {
            o[0] = (uint8_t)('0' + u / 100000000u);
        }
    }
    return o + d;
}

/* The ids whose text a digit table holds: [0, 2**18), every id of the vocabularies in use. */
#define TWW_JSON_TABLE_IDS ((size_t)1 << 18)

/* Fills `tab` (TWW_JSON_TABLE_IDS words, 2 MiB) with each id's text and a ',' in a word's low
 * bytes (the first digit lowest) and that text's size in its top byte: an id is then one load,
 * one 8-byte store and an add. */
static inline void tww_json_table_fill(uint64_t *tab) {
    uint32_t u;
    for (u = 0; u < TWW_JSON_TABLE_IDS; u++) {
        size_t d = tww_dec_digits(u);       /* at most 6: the text and ',' fit 7 bytes */
        tab[u] = tww_digits8(u) >> (8 * (8 - d)) | (uint64_t)',' << (8 * d)
                 | (uint64_t)(d + 1) << 56;
    }
}

/* One id's text and a ',' at `o` (room for 12 + 8 bytes); returns the byte after them. */
TW_INLINE uint8_t *tww_json_put_item(uint8_t *o, int32_t v, const uint64_t *tab, size_t limit) {
    if ((uint32_t)v < limit) {
        uint64_t e = tab[v];
        tw_store_le64(o, e);
        return o + (e >> 56);
    }
    o = tww_json_put_id(o, v);
    *o++ = ',';
    return o;
}

/* Compact JSON, as msgspec and orjson write a list of ints ("[1,-2,3]"), at `o`, which has
 * room for tww_json_bound(n) + TWW_WRITE_SLACK bytes; returns the size written. `tab` is a
 * table tww_json_table_fill filled, or NULL: each id's digits are then computed (an id below
 * 10**8 is one 8-byte store of them). Four ids a step, checked against the table at once. */
static inline size_t tww_json_write(const int32_t *ids, size_t n, const uint64_t *tab,
                                    uint8_t *TW_RESTRICT o) {
    uint8_t *start = o;
    size_t i, j, limit = tab ? TWW_JSON_TABLE_IDS : 0;   /* a power of two: one OR checks 4 */
    *o++ = '[';
    for (i = 0; i < (n & ~(size_t)3); i += 4) {
        uint32_t a = (uint32_t)ids[i], b = (uint32_t)ids[i + 1], c = (uint32_t)ids[i + 2],
                 d = (uint32_t)ids[i + 3];
        if ((a | b | c | d) < limit) {
            uint64_t ea = tab[a], eb = tab[b], ec = tab[c], ed = tab[d];
            tw_store_le64(o, ea);
            o += ea >> 56;
            tw_store_le64(o, eb);
            o += eb >> 56;
            tw_store_le64(o, ec);
            o += ec >> 56;
            tw_store_le64(o, ed);
            o += ed >> 56;
        } else {
            for (j = i; j < i + 4; j++)
                o = tww_json_put_item(o, ids[j], tab, limit);
        }
    }
    for (; i < n; i++)
        o = tww_json_put_item(o, ids[i], tab, limit);
    if (n) o--;                             /* the last ',' */
    *o++ = ']';
    return (size_t)(o - start);
}

/* ---- protobuf ----------------------------------------------------------------------------- */

/* The most ids `n` bytes of packed varints can hold (a varint takes at least one byte). */
TW_INLINE size_t tww_pb_cap(size_t n) { return n; }

/* One varint of at most `limit` bytes at `*pos`: 0, or the reason it is refused (TWW_TRUNCATED,
 * TWW_OVERLONG: more than `limit` bytes). A value takes up to 10 bytes (TWW_VARINT_MAX); bits
 * beyond the 64th (in the 10th byte) are dropped, as protobuf's parsers drop them. A tag or a
 * length is a 32-bit varint: up to 5 bytes (TWW_VARINT32_MAX), where protobuf's parser (upb)
 * refuses longer ones even when the extra bytes are zeros. */
enum { TWW_TRUNCATED = 1, TWW_OVERLONG = 2 };
enum { TWW_VARINT_MAX = 10, TWW_VARINT32_MAX = 5 };

static inline int tww_pb_varint(const uint8_t *p, size_t n, size_t *pos, uint64_t *value,
                                size_t limit) {
    size_t at = *pos, k;
    uint64_t v = 0;
    for (k = 0; k < limit; k++) {
        uint8_t b;
        if (at + k >= n)
            return TWW_TRUNCATED;
        b = p[at + k];
        v |= (uint64_t)(b & 0x7f) << (7 * k);
        if (b < 0x80) {
            *pos = at + k + 1;
            *value = v;
            return 0;
        }
    }
    return TWW_OVERLONG;
}

/* The message for a varint tww_pb_varint refused. */
static inline int tww_pb_bad_varint(int reason, const char *what, size_t at, size_t limit,
                                    char *msg, size_t msz) {
    if (reason == TWW_TRUNCATED)
        snprintf(msg, msz, "protobuf: truncated %s at byte offset %zu", what, at);
    else
        snprintf(msg, msz, "protobuf: over-long %s at byte offset %zu (more than %zu bytes)",
                 what, at, limit);
    return -1;
}

/* A varint as an id: a uint32 below 2**31, or an int32 (negative: sign-extended to 64 bits). */
TW_INLINE int tww_pb_id(uint64_t v, size_t i, size_t at, int32_t *id, char *msg, size_t msz) {
    if (v <= (uint64_t)INT32_MAX || v >= (uint64_t)0 - ((uint64_t)1 << 31)) {
        *id = (int32_t)(uint32_t)v;
        return 0;
    }
    snprintf(msg, msz, "protobuf: item %zu at byte offset %zu is %llu, outside int32 (an id is "
             "a uint32 below 2**31 or an int32)", i, at, (unsigned long long)v);
    return -1;
}

/* Packed varints (a field's payload: what follows its tag and length) from `out[*count]` on;
 * `base` is the payload's offset in the caller's input, for messages. */
static inline int tww_pb_read_packed(const uint8_t *p, size_t n, size_t base, int32_t *TW_RESTRICT out,
                              size_t *count, char *msg, size_t msz) {
    size_t pos = 0, i = *count;
    while (pos < n) {
        uint64_t v;
        size_t at = pos;
        uint8_t b = p[pos];
        if (b < 0x80) {               /* the one-byte varint, the common case */
            out[i++] = b;
            pos++;
            continue;
        }
        int r = tww_pb_varint(p, n, &pos, &v, TWW_VARINT_MAX);
        if (r != 0) {
            char what[48];
            snprintf(what, sizeof what, "varint (item %zu)", i);
            return tww_pb_bad_varint(r, what, base + at, TWW_VARINT_MAX, msg, msz);
        }
        if (tww_pb_id(v, i, base + at, &out[i], msg, msz) != 0)
            return -1;
        i++;
    }
    *count = i;
    return 0;
}

/* Field `field`'s ids in a serialized message: its packed chunks and its unpacked elements, in
 * order, as protobuf's parsers concatenate them; other fields are skipped (groups refused). */
static inline int tww_pb_read_field(const uint8_t *p, size_t n, uint32_t field,
                             int32_t *TW_RESTRICT out, size_t *count, char *msg, size_t msz) {
    size_t pos = 0;
    *count = 0;
    while (pos < n) {
        uint64_t tag, len, v;
        size_t at = pos;
        uint32_t number, type;
        int r = tww_pb_varint(p, n, &pos, &tag, TWW_VARINT32_MAX);
        if (r != 0)
            return tww_pb_bad_varint(r, "tag", at, TWW_VARINT32_MAX, msg, msz);
        number = (uint32_t)(tag >> 3);
        type = (uint32_t)(tag & 7);
        if (tag >> 32 || number == 0) {
            snprintf(msg, msz, "protobuf: invalid field number %llu at byte offset %zu",
                     (unsigned long long)(tag >> 3), at);
            return -1;
        }
        switch (type) {
        case 0:
            at = pos;
            r = tww_pb_varint(p, n, &pos, &v, TWW_VARINT_MAX);
            if (r != 0)
                return tww_pb_bad_varint(r, "varint", at, TWW_VARINT_MAX, msg, msz);
            if (number == field) {
                if (tww_pb_id(v, *count, at, &out[*count], msg, msz) != 0)
                    return -1;
                (*count)++;
            }
            break;
        case 1: case 5: {
            size_t k = type == 1 ? 8 : 4;
            if (number == field) {
                snprintf(msg, msz, "protobuf: field %u at byte offset %zu has wire type %u, "
                         "not varints", number, at, type);
                return -1;
            }
            if (k > n - pos) {
                snprintf(msg, msz, "protobuf: truncated field %u at byte offset %zu", number, at);
                return -1;
            }
            pos += k;
            break;
        }
        case 2:
            r = tww_pb_varint(p, n, &pos, &len, TWW_VARINT32_MAX);
            if (r != 0)
                return tww_pb_bad_varint(r, "length", pos, TWW_VARINT32_MAX, msg, msz);
            if (len > n - pos) {
                snprintf(msg, msz, "protobuf: truncated: field %u at byte offset %zu declares "
                         "%llu bytes, %zu remain", number, at, (unsigned long long)len, n - pos);
                return -1;
            }
            if (number == field &&
                tww_pb_read_packed(p + pos, (size_t)len, pos, out, count, msg, msz) != 0)
                return -1;
            pos += (size_t)len;
            break;
        default:
            snprintf(msg, msz, "protobuf: field %u at byte offset %zu has wire type %u (%s)",
                     number, at, type, type == 3 || type == 4 ? "a group: not supported"
                                                               : "not a protobuf wire type");
            return -1;
        }
    }
    return 0;
}

TW_INLINE size_t tww_varint_size(uint64_t v) {
    size_t k = 1;
    while (v >= 0x80) { v >>= 7; k++; }
    return k;
}

/* The payload of packed ids: a negative id takes 10 bytes (an int32 sign-extended). A sum of
 * comparisons, which compilers vectorize. */
static inline size_t tww_pb_payload_size(const int32_t *ids, size_t n) {
    size_t i, s = 0;
    for (i = 0; i < n; i++) {
        int32_t v = ids[i];
        s += (size_t)(1 + (v >= (1 << 7)) + (v >= (1 << 14)) + (v >= (1 << 21)) +
                      (v >= (1 << 28)) + 9 * (v < 0));
    }
    return s;
}

/* Field `field` as protobuf serializes a packed repeated field: tag, length, payload; nothing
 * at all for no ids; with field 0, the payload alone. */
static inline size_t tww_pb_size(size_t n, uint32_t field, size_t payload) {
    if (n == 0) return 0;
    if (field == 0) return payload;
    return tww_varint_size(((uint64_t)field << 3) | 2) + tww_varint_size(payload) + payload;
}

TW_INLINE uint8_t *tww_put_varint(uint8_t *o, uint64_t v) {
    while (v >= 0x80) { *o++ = (uint8_t)(v | 0x80); v >>= 7; }
    *o++ = (uint8_t)v;
    return o;
}

#if TWW_SSSE3
/* Ids from `ids` as varints at `o`, four a step while they lie in [0, 2**21) (every id of the
 * vocabularies in use: at most 3 bytes each) and 16 bytes are left before `end`: each lane's
 * 7-bit groups and continuation bits computed at once, then one byte shuffle packs the lanes'
 * bytes together. Returns the byte after them, how many in `*done`. */
__attribute__((target("ssse3")))
static inline uint8_t *tww_pb_write_ssse3(const int32_t *ids, size_t n, uint8_t *o,
                                          const uint8_t *end, size_t *done) {
    const __m128i over = _mm_set1_epi32((1 << 21) - 1), two = _mm_set1_epi32((1 << 7) - 1),
                  three = _mm_set1_epi32((1 << 14) - 1), low7 = _mm_set1_epi32(0x7f),
                  mid7 = _mm_set1_epi32(0x7f00), high7 = _mm_set1_epi32(0x7f0000),
                  more1 = _mm_set1_epi32(0x80), more2 = _mm_set1_epi32(0x8000);
    size_t i = 0;
    for (; n - i >= 4 && end - o >= 16; i += 4) {
        __m128i u = _mm_loadu_si128((const __m128i *)(const void *)(ids + i));
        __m128i g2 = _mm_cmpgt_epi32(u, two), g3 = _mm_cmpgt_epi32(u, three), w;
        unsigned key;
        if (_mm_movemask_ps(_mm_castsi128_ps(_mm_or_si128(_mm_cmpgt_epi32(u, over), u))))
            break;                                     /* an id from 2**21, or negative */
        w = _mm_or_si128(_mm_and_si128(u, low7),
                         _mm_or_si128(_mm_and_si128(_mm_slli_epi32(u, 1), mid7),
                                      _mm_and_si128(_mm_slli_epi32(u, 2), high7)));
        w = _mm_or_si128(w, _mm_or_si128(_mm_and_si128(g2, more1), _mm_and_si128(g3, more2)));
        key = (unsigned)_mm_movemask_ps(_mm_castsi128_ps(g2)) |
              (unsigned)_mm_movemask_ps(_mm_castsi128_ps(g3)) << 4;
        w = _mm_shuffle_epi8(w, _mm_loadu_si128((const __m128i *)(const void *)
                                                tww_pbw_shuffle[key]));
        _mm_storeu_si128((__m128i *)(void *)o, w);
        o += tww_pbw_size[key];
    }
    *done = i;
    return o;
}
#endif

/* Writes tww_pb_size(n, field, payload) bytes at `o`; with field 0, the payload alone. With
 * SSSE3, four ids a step (tww_pb_write_ssse3) and, after a step that stopped,
 * tww_simd_backoff's count here. */
static inline void tww_pb_write(const int32_t *ids, size_t n, uint32_t field, size_t payload,
                                uint8_t *TW_RESTRICT o) {
    size_t i, at = 0, stop;
    const uint8_t *end = o + tww_pb_size(n, field, payload);
#if TWW_SSSE3
    size_t retry = 0, backoff = 8;
#endif
    if (n == 0) return;
    if (field) {
        o = tww_put_varint(o, ((uint64_t)field << 3) | 2);
        o = tww_put_varint(o, payload);
    }
    while (at < n) {
        stop = n;
#if TWW_SSSE3
        if (tww_have_ssse3) {
            if (at >= retry) {
                o = tww_pb_write_ssse3(ids + at, n - at, o, end, &i);
                at += i;
                backoff = tww_simd_backoff(i, backoff);
                retry = at + backoff;
            }
            if (n - at > retry - at) stop = retry;
        }
#endif
        for (i = at; i < stop; i++) {
            int32_t v = ids[i];
            if ((uint32_t)v < 0x80u) *o++ = (uint8_t)v;
            else o = tww_put_varint(o, (uint64_t)(int64_t)v);
        }
        at = stop;
    }
    (void)end;
}

#endif /* TOKENWIRE_WIRES_H */
