/* Codec v2 kernel ("pfor"): per-block bit width with patched exceptions (PFor), for int32 ids.
 *
 * Byte layout (draft spec: docs/codec-v2-draft.md). Ids are coded as their 32-bit two's-complement
 * patterns (uint32), so any int32 round-trips; a negative id costs a block of width 32. n ids form
 * ceil(n / 128) blocks of m ids (128, the last one 1..128), each:
 *
 *   byte 0        b: base width, 0..32
 *   byte 1        e: exception count, 0..m-1
 *   byte 2        x: exception width, 1..32-b (present only when e > 0)
 *   base          ceil(m*b / 8) bytes: the low b bits of every id. A full block (m = 128) is
 *                 vertical: id i is id r = i/4 of lane j = i%4, at bit r*b of that lane's
 *                 stream, whose 32-bit word k sits little-endian at bytes [16k+4j, 16k+4j+4).
 *                 The last block when m < 128 is horizontal: id i at bits [i*b, (i+1)*b).
 *                 Bit k of an area is bit k%8 of its byte k/8 (LSB first); padding bits zero
 *   exceptions    ceil(e*(7+x) / 8) bytes (only when e > 0): e fields of 7+x bits in the same bit
 *                 order, field j = position p_j (7 bits) | high part h_j << 7 (x bits); padding zero
 *
 * id[p_j] = base[p_j] | h_j << b; every other id is its base value. Canonical form, checked by the
 * decoder: positions strictly increasing and < m; every h_j != 0; x is exactly the bit length of
 * the OR of the h_j; when e == 0, b is exactly the bit length of the OR of the block's ids; zero
 * padding; no byte after the last block. What remains free is the choice of b (any b below the
 * block's bit length with exceptions is valid): twpf_encode picks the b in [M-8, M] (M the block's
 * bit length) that gives the fewest bytes, the larger b on a tie; a receiver that needs byte-exact
 * canonical form re-encodes and compares.
 *
 * Sizes: a block takes at most 2 + 4m bytes (b = M, e = 0 is always a candidate), so
 * twpf_bound(n) = 4n + 2*ceil(n/128); a block takes at least 2 bytes, so a payload of len bytes
 * holds at most 64*len ids (twpf_min_size). The encoder copies each block of the source to a
 * stack buffer once and works from the copy: a source another thread is writing gives some valid
 * encoding of ids it held, never out-of-bounds writes.
 *
 * C99, compiles as C++17 too (restrict is spelled by the includer, as for bitpack.h).
 */
#ifndef TOKENWIRE_PFOR_H
#define TOKENWIRE_PFOR_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "bitpack.h"
#include "byteorder.h"

#define TWPF_BLOCK 128u

enum {
    TWPF_OK = 0,
    TWPF_E_TRUNCATED = 1,      /* payload ends inside a block */
    TWPF_E_WIDTH = 2,          /* base width above 32 */
    TWPF_E_EXCEPTIONS = 3,     /* exception count or width out of range */
    TWPF_E_POSITION = 4,       /* exception positions not increasing or past the block */
    TWPF_E_NONCANONICAL = 5,   /* valid bits, but not the one canonical form */
    TWPF_E_PADDING = 6,        /* nonzero padding bits */
    TWPF_E_TRAILING = 7        /* bytes after the last block */
};

typedef struct {
    const char *msg;   /* static string; NULL when ok */
    size_t offset;     /* byte offset in the payload of the block (or byte) at fault */
} twpf_error;

/* Most bytes twpf_encode writes for n ids (n < 2**61). */
static inline size_t twpf_bound(size_t n) {
    return 4 * n + 2 * ((n + TWPF_BLOCK - 1) / TWPF_BLOCK);
}

/* Fewest bytes any payload of n ids takes: reject a claimed count before allocating for it. */
static inline size_t twpf_min_size(size_t n) {
    return 2 * ((n + TWPF_BLOCK - 1) / TWPF_BLOCK);
}

static inline unsigned twpf_bitlen(uint32_t v) {
    return v ? 32u - (unsigned)__builtin_clz(v) : 0u;
}

/* ---- bit fields up to 39 bits at any bit offset -------------------------------------------- */

/* Field of f (<= 39) bits at bit q of src, which holds len bytes (the caller checked the field
 * lies inside). One 8-byte load when 8 bytes remain, bytes otherwise. */
TWBP_INLINE uint64_t twpf_get(const uint8_t *src, size_t len, uint64_t q, unsigned f) {
    size_t at = (size_t)(q >> 3);
    unsigned sh = (unsigned)(q & 7);
    uint64_t v;
    if (at + 8 <= len) {
        v = tw_load_le64(src + at);
    } else {
        v = 0;
        for (size_t k = 0; at + k < len && k < 8; k++) v |= (uint64_t)src[at + k] << (8 * k);
    }
    return (v >> sh) & ((1ull << f) - 1);
}

/* ---- full blocks: vertical layout ---------------------------------------------------------- */

/* The base ids of a full block (128 ids) in 4 lanes: id i goes to lane i % 4 as that lane's id
 * r = i / 4, at bit r*b of the lane's bit stream; the lane's stream is cut into b 32-bit words
 * and word k of lane j is stored little-endian at bytes [16k + 4j, 16k + 4j + 4). Four lanes
 * side by side are one SSE2 register (baseline x86-64), so packing and unpacking are shifts,
 * ORs and masks of whole registers (the layout of Lemire and Boytsov's SIMD-BP128). */
/* TWPF_PORTABLE (a test knob) selects the plain C paths everywhere. */
#if defined(__SSE2__) && !TW_HOST_BIG_ENDIAN && !defined(TWPF_PORTABLE)
#  include <emmintrin.h>
#  define TWPF_SSE2 1
#else
#  define TWPF_SSE2 0
#endif

#if defined(__GNUC__)
#  define TWPF_UNROLL _Pragma("GCC unroll 32")
#else
#  define TWPF_UNROLL
#endif

/* in: 128 ids, of which the low B bits (1 <= B <= 31) are packed; out: 16*B bytes. */
TWBP_INLINE void twpf_vpack_c(const uint32_t *in, uint8_t *out, const unsigned B) {
#if TWPF_SSE2
    const __m128i vmask = _mm_set1_epi32((int)((1u << B) - 1));
    __m128i acc = _mm_setzero_si128();
    unsigned sh = 0;
    TWPF_UNROLL
    for (unsigned r = 0; r < 32; r++) {
        const __m128i v = _mm_and_si128(_mm_loadu_si128((const __m128i *)(const void *)(in + 4 * r)), vmask);
        acc = _mm_or_si128(acc, _mm_slli_epi32(v, (int)sh));
        sh += B;
        if (sh >= 32) {
            _mm_storeu_si128((__m128i *)(void *)out, acc);
            out += 16;
            sh -= 32;
            acc = sh ? _mm_srli_epi32(v, (int)(B - sh)) : _mm_setzero_si128();
        }
    }
#else
    for (unsigned j = 0; j < 4; j++) {
        uint32_t acc = 0;
        unsigned sh = 0;
        uint8_t *o = out + 4 * j;
        for (unsigned r = 0; r < 32; r++) {
            const uint32_t v = in[4 * r + j] & ((1u << B) - 1);
            acc |= v << sh;
            sh += B;
            if (sh >= 32) {
                tw_store_le32(o, acc);
                o += 16;
                sh -= 32;
                acc = sh ? v >> (B - sh) : 0;
            }
        }
    }
#endif
}

/* in: 16*B bytes; out: 128 ids. */
TWBP_INLINE void twpf_vunpack_c(const uint8_t *in, int32_t *out, const unsigned B) {
    const uint32_t mask = (1u << B) - 1;
#if TWPF_SSE2
    const __m128i vmask = _mm_set1_epi32((int)mask);
    __m128i cur = _mm_loadu_si128((const __m128i *)(const void *)in);
    unsigned sh = 0;
    TWPF_UNROLL
    for (unsigned r = 0; r < 32; r++) {
        __m128i v = _mm_srli_epi32(cur, (int)sh);
        if (sh + B >= 32) {
            in += 16;
            if (r < 31) {                          /* the last id ends the last word exactly */
                cur = _mm_loadu_si128((const __m128i *)(const void *)in);
                if (sh + B > 32) v = _mm_or_si128(v, _mm_slli_epi32(cur, (int)(32 - sh)));
            }
            sh = sh + B - 32;
        } else {
            sh += B;
        }
        _mm_storeu_si128((__m128i *)(void *)(out + 4 * r), _mm_and_si128(v, vmask));
    }
#else
    for (unsigned j = 0; j < 4; j++) {
        const uint8_t *p = in + 4 * j;
        uint32_t cur = tw_load_le32(p);
        unsigned sh = 0;
        for (unsigned r = 0; r < 32; r++) {
            uint32_t v = cur >> sh;
            if (sh + B >= 32) {
                p += 16;
                if (r < 31) {
                    cur = tw_load_le32(p);
                    if (sh + B > 32) v |= cur << (32 - sh);
                }
                sh = sh + B - 32;
            } else {
                sh += B;
            }
            out[4 * r + j] = (int32_t)(v & mask);
        }
    }
#endif
}

#define TWPF_WIDTHS_1_31(X)                                                                    \
    X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15) X(16)    \
    X(17) X(18) X(19) X(20) X(21) X(22) X(23) X(24) X(25) X(26) X(27) X(28) X(29) X(30) X(31)

/* Full block at width b (0..32): 16*b bytes. */
static void twpf_vpack(const uint32_t *in, uint8_t *out, unsigned b) {
    switch (b) {
#define TWPF_CASE(B) case B: twpf_vpack_c(in, out, B); return;
        TWPF_WIDTHS_1_31(TWPF_CASE)
#undef TWPF_CASE
        case 32:
            for (unsigned r = 0; r < 32; r++)
                for (unsigned j = 0; j < 4; j++) tw_store_le32(out + 16 * r + 4 * j, in[4 * r + j]);
            return;
        default: return;
    }
}

static void twpf_vunpack(const uint8_t *in, int32_t *out, unsigned b) {
    switch (b) {
#define TWPF_CASE(B) case B: twpf_vunpack_c(in, out, B); return;
        TWPF_WIDTHS_1_31(TWPF_CASE)
#undef TWPF_CASE
        case 32:
            for (unsigned i = 0; i < TWPF_BLOCK; i++) out[i] = (int32_t)tw_load_le32(in + 4 * i);
            return;
        default: memset(out, 0, 4 * TWPF_BLOCK); return;
    }
}

/* ---- encoder ------------------------------------------------------------------------------- */

/* cnt[k] = number of u[i] >= 2**k, for k in 0..7 (u zero-filled to 128). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(TWPF_PORTABLE)
#  define TWPF_AVX2_COUNTS 1
#else
#  define TWPF_AVX2_COUNTS 0
#endif
#if TWPF_AVX2_COUNTS
__attribute__((target("avx2")))
static void twpf_counts_avx2(const uint8_t *u, unsigned *cnt) {
    __m256i a[4];
    for (unsigned i = 0; i < 4; i++) a[i] = _mm256_loadu_si256((const __m256i *)(const void *)(u + 32 * i));
    for (unsigned k = 0; k < 8; k++) {
        const __m256i t = _mm256_set1_epi8((char)(1u << k));
        __m256i acc = _mm256_setzero_si256();
        for (unsigned i = 0; i < 4; i++)    /* a byte lane gains at most 4: no overflow */
            acc = _mm256_sub_epi8(acc, _mm256_cmpeq_epi8(_mm256_max_epu8(a[i], t), a[i]));
        __m256i s4 = _mm256_sad_epu8(acc, _mm256_setzero_si256());
        __m128i s2 = _mm_add_epi64(_mm256_castsi256_si128(s4), _mm256_extracti128_si256(s4, 1));
        cnt[k] = (unsigned)(_mm_cvtsi128_si64(s2) + _mm_extract_epi64(s2, 1));
    }
}
#endif

static void twpf_counts(const uint8_t *restrict u, unsigned *restrict cnt) {
#if TWPF_AVX2_COUNTS
    if (twbp_have_avx2) {
        twpf_counts_avx2(u, cnt);
        return;
    }
#endif
    for (unsigned k = 0; k < 8; k++) {
        const uint8_t t = (uint8_t)(1u << k);
        unsigned c = 0;
        for (unsigned i = 0; i < TWPF_BLOCK; i++) c += u[i] >= t;
        cnt[k] = c;
    }
}

/* u[i] = v[i] >> lo (every v[i] < 2**(lo+8)): the top 8 bits of a block's ids. */
TWBP_CLONES
static void twpf_narrow(const uint32_t *restrict v, unsigned lo, uint8_t *restrict u) {
    for (unsigned i = 0; i < TWPF_BLOCK; i++) u[i] = (uint8_t)(v[i] >> lo);
}

TWBP_CLONES
static void twpf_mask(const uint32_t *restrict v, uint32_t mask, uint32_t *restrict w) {
    for (unsigned i = 0; i < TWPF_BLOCK; i++) w[i] = v[i] & mask;
}

/* One block of m (1..128) ids from src to o; returns the end of what it wrote. */
static uint8_t *twpf_encode_block(const int32_t *src, unsigned m, uint8_t *o) {
    uint32_t v[TWPF_BLOCK];
    uint32_t w[TWPF_BLOCK];
    uint8_t u[TWPF_BLOCK];
    unsigned cnt[8];
    /* the one read of the source: everything below works on the copy */
    uint32_t orv = twbp_copy_or_all((int32_t *)v, src, m);
    if (m < TWPF_BLOCK) memset(v + m, 0, 4 * (TWPF_BLOCK - m));
    const unsigned M = twpf_bitlen(orv);
    const unsigned lo = M > 8 ? M - 8 : 0;
    unsigned b = M, e = 0;
    size_t best = ((size_t)m * M + 7) / 8;
    if (M > 0) {
        twpf_narrow(v, lo, u);
        twpf_counts(u, cnt);
        for (unsigned c = M; c-- > lo;) {  /* c = candidate base width, M-1 down to lo */
            unsigned ec = cnt[c - lo];
            if (ec >= m) continue;
            size_t size = ((size_t)m * c + 7) / 8 + 1 + ((size_t)ec * (7 + M - c) + 7) / 8;
            if (size < best) {
                best = size;
                b = c;
                e = ec;
            }
        }
    }
    *o++ = (uint8_t)b;
    *o++ = (uint8_t)e;
    if (e) *o++ = (uint8_t)(M - b);
    if (m == TWPF_BLOCK) {
        twpf_vpack(v, o, b);                 /* keeps the low b bits itself */
        o += 16 * b;
    } else if (b == 32) {
        for (unsigned i = 0; i < m; i++, o += 4) tw_store_le32(o, v[i]);
    } else if (b > 0) {
        twpf_mask(v, (uint32_t)((1ull << b) - 1), w);
        twbp_packer pk = {o, 0, 0};
        twbp_pack(&pk, (const int32_t *)w, m, b);
        twbp_pack_finish(&pk);
        o = pk.out;
    }
    if (e) {
        /* exceptions: ids with v >> b != 0, i.e. u >= 2**(b-lo) (b - lo < 8); found 8 at a time:
         * a byte of x is nonzero iff the id is one, and its bit 7 then lights in z */
        const unsigned f = 7 + (M - b);
        const uint64_t hib = 0x0101010101010101ull * (uint8_t)(0xFFu << (b - lo));
        const uint64_t lo7 = 0x7F7F7F7F7F7F7F7Full, top = 0x8080808080808080ull;
        uint64_t acc = 0;
        unsigned bits = 0;
        for (unsigned g = 0; g < TWPF_BLOCK; g += 8) {
            uint64_t x;
            memcpy(&x, u + g, 8);
#if TW_HOST_BIG_ENDIAN
            x = tw_bswap64(x);
#endif
            x &= hib;
            uint64_t z = (x | ((x & lo7) + lo7)) & top;
            for (; z; z &= z - 1) {
                const unsigned i = g + ((unsigned)__builtin_ctzll(z) >> 3);
                /* f = 7 + M - b <= 15 (b >= M - 8) onto fewer than 32 pending bits */
                acc |= ((uint64_t)i | (uint64_t)(v[i] >> b) << 7) << bits;
                bits += f;
                if (bits >= 32) {
                    tw_store_le32(o, (uint32_t)acc);
                    o += 4;
                    acc >>= 32;
                    bits -= 32;
                }
            }
        }
        while (bits >= 8) {
            *o++ = (uint8_t)acc;
            acc >>= 8;
            bits -= 8;
        }
        if (bits) *o++ = (uint8_t)acc;
    }
    return o;
}

/* Encode n ids into dst (room for twpf_bound(n) bytes); returns the bytes written. */
static size_t twpf_encode(const int32_t *src, size_t n, uint8_t *dst) {
    uint8_t *o = dst;
    for (size_t s = 0; s < n; s += TWPF_BLOCK) {
        unsigned m = (unsigned)(n - s < TWPF_BLOCK ? n - s : TWPF_BLOCK);
        o = twpf_encode_block(src + s, m, o);
    }
    return (size_t)(o - dst);
}

/* ---- decoder ------------------------------------------------------------------------------- */

/* Once per process before the first encode or decode (CPU detection; idempotent). */
static void twpf_init(void) {
    twbp_init();
}

/* d[p] |= h << b for the validated fields p | h << 7 of one block. */
TWBP_INLINE void twpf_patch(int32_t *d, const uint32_t *fl, unsigned e, unsigned b) {
    for (unsigned k = 0; k < e; k++)
        d[fl[k] & 127] = (int32_t)((uint32_t)d[fl[k] & 127] | (fl[k] >> 7) << b);
}

#define TWPF_FAIL(code, text, at)                                                               \
    do {                                                                                       \
        if (err) {                                                                             \
            err->msg = (text);                                                                 \
            err->offset = (at);                                                                \
        }                                                                                      \
        return (code);                                                                         \
    } while (0)

/* Decode a payload of len bytes holding n ids (both from a checked header) into dst[0..n).
 * Reads only src[0..len), writes only dst[0..n); on error returns a TWPF_E_* code with err set,
 * dst then holds garbage. Any byte string gives either TWPF_OK or an error, never UB. */
static int twpf_decode(const uint8_t *src, size_t len, int32_t *dst, size_t n, twpf_error *err) {
    size_t p = 0;
    if (err) {
        err->msg = NULL;
        err->offset = 0;
    }
    if (len < twpf_min_size(n))
        TWPF_FAIL(TWPF_E_TRUNCATED, "payload too short for its id count", len);
    for (size_t s = 0; s < n; s += TWPF_BLOCK) {
        const unsigned m = (unsigned)(n - s < TWPF_BLOCK ? n - s : TWPF_BLOCK);
        int32_t *d = dst + s;
        const size_t at = p;
        if (len - p < 2) TWPF_FAIL(TWPF_E_TRUNCATED, "payload ends inside a block header", at);
        const unsigned b = src[p], e = src[p + 1];
        p += 2;
        if (b > 32) TWPF_FAIL(TWPF_E_WIDTH, "block width above 32", at);
        unsigned x = 0;
        if (e) {
            if (e >= m) TWPF_FAIL(TWPF_E_EXCEPTIONS, "exception count not below the block's id count", at);
            if (len - p < 1) TWPF_FAIL(TWPF_E_TRUNCATED, "payload ends inside a block header", at);
            x = src[p++];
            if (x == 0 || b + x > 32)
                TWPF_FAIL(TWPF_E_EXCEPTIONS, "exception width 0 or block width plus exception width above 32", at);
        }
        const size_t nbase = ((size_t)m * b + 7) / 8;
        if (len - p < nbase) TWPF_FAIL(TWPF_E_TRUNCATED, "payload ends inside a block's ids", at);
        if (m == TWPF_BLOCK) {
            twpf_vunpack(src + p, d, b);
        } else if (b == 0) {
            memset(d, 0, 4 * (size_t)m);
        } else if (b == 32) {
            for (unsigned i = 0; i < m; i++) d[i] = (int32_t)tw_load_le32(src + p + 4 * (size_t)i);
        } else {
            twbp_unpack(src + p, len - p, 0, d, m, b);
            const unsigned used = (m * b) & 7;
            if (used && (src[p + nbase - 1] >> used))
                TWPF_FAIL(TWPF_E_PADDING, "nonzero padding bits after a block's ids", p + nbase - 1);
        }
        p += nbase;
        if (!e) {
            if (b && !(twbp_or_all(d, m) >> (b - 1)))
                TWPF_FAIL(TWPF_E_NONCANONICAL, "block width larger than its largest id needs", at);
            continue;
        }
        const unsigned f = 7 + x;
        const size_t nexc = ((size_t)e * f + 7) / 8;
        if (len - p < nexc) TWPF_FAIL(TWPF_E_TRUNCATED, "payload ends inside a block's exceptions", at);
        const uint8_t *q = src + p;
        const size_t qlen = len - p;
        uint32_t orh = 0;
        int prev = -1;
        uint64_t bit = 0;
        unsigned j = 0;
        if (f <= 31) {
            /* fields extracted and judged in one pass, applied once the block is valid */
            uint32_t fl[TWPF_BLOCK];
            const uint64_t fmask = (1ull << f) - 1;
            unsigned bad = 0, badpos = 0, e_done = 0;
            int pv = -1;
#define TWPF_JUDGE(k)                                                                          \
            do {                                                                               \
                const int pk = (int)(fl[k] & 127);                                             \
                bad |= fl[k] < 128;                                                            \
                badpos |= pk <= pv;                                                            \
                pv = pk;                                                                       \
                orh |= fl[k];                                                                  \
            } while (0)
            if (m == TWPF_BLOCK && qlen >= nexc + 8) {
                /* full block: every 7-bit position is inside it, so patch in the same pass
                 * (a bad block's ids are garbage anyway); one 8-byte load per field */
                for (unsigned k = 0, bk = 0; k < e; k++, bk += f) {
                    fl[k] = (uint32_t)((tw_load_le64(q + (bk >> 3)) >> (bk & 7)) & fmask);
                    TWPF_JUDGE(k);
                    d[fl[k] & 127] = (int32_t)((uint32_t)d[fl[k] & 127] | (fl[k] >> 7) << b);
                }
                e_done = 1;
            } else if (qlen >= nexc + 8) {
                for (unsigned k = 0, bk = 0; k < e; k++, bk += f) {
                    fl[k] = (uint32_t)((tw_load_le64(q + (bk >> 3)) >> (bk & 7)) & fmask);
                    TWPF_JUDGE(k);
                }
            } else {
                for (unsigned k = 0; k < e; k++) {
                    fl[k] = (uint32_t)twpf_get(q, qlen, (uint64_t)k * f, f);
                    TWPF_JUDGE(k);
                }
            }
#undef TWPF_JUDGE
            orh >>= 7;
            if (badpos || pv >= (int)m)
                TWPF_FAIL(TWPF_E_POSITION, "exception positions not increasing or past the block", at);
            if (bad) TWPF_FAIL(TWPF_E_NONCANONICAL, "exception with zero high bits", at);
            if (!e_done) twpf_patch(d, fl, e, b);
            j = e;
        }
        for (; j < e; j++, bit += f) {
            uint64_t fld = twpf_get(q, qlen, bit, f);
            int pos = (int)(fld & 127);
            uint32_t h = (uint32_t)(fld >> 7);
            if (pos <= prev || pos >= (int)m)
                TWPF_FAIL(TWPF_E_POSITION, "exception positions not increasing or past the block", at);
            if (h == 0) TWPF_FAIL(TWPF_E_NONCANONICAL, "exception with zero high bits", at);
            prev = pos;
            orh |= h;
            d[pos] = (int32_t)((uint32_t)d[pos] | h << b);
        }
        if (!(orh >> (x - 1)))
            TWPF_FAIL(TWPF_E_NONCANONICAL, "exception width larger than its largest exception needs", at);
        const unsigned used = (unsigned)(((size_t)e * f) & 7);
        if (used && (q[nexc - 1] >> used))
            TWPF_FAIL(TWPF_E_PADDING, "nonzero padding bits after a block's exceptions", p + nexc - 1);
        p += nexc;
    }
    if (p != len) TWPF_FAIL(TWPF_E_TRAILING, "bytes after the last block", p);
    return TWPF_OK;
}

#undef TWPF_FAIL

#endif /* TOKENWIRE_PFOR_H */
