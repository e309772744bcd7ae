/* The pfor kernel: per-block bit width with patched exceptions (PFor), for int32 ids.
 *
 * Byte layout (specified in docs/wire-format.md, "pfor"; design notes: docs/pfor.md). Ids are
 * coded as their 32-bit two's-complement patterns (uint32), so any int32 round-trips; a negative
 * id costs a block of width 32. n ids form ceil(n / 128) blocks of m ids (128, the last one
 * 1..128), each:
 *
 *   byte 0        b | 0x80 * E: base width b (0..32) in bits 0-5, bit 6 zero, E = exceptions
 *   base          ceil(m*b / 8) bytes: the low b bits of every id. A full block (m = 128) is
 *                 vertical: id i is id r = i/8 of lane j = i%8, at bit r*b of that lane's
 *                 16*b-bit stream: its 32-bit word k (k < K = b/2) sits little-endian at bytes
 *                 [32k+4j, 32k+4j+4), and for odd b its last 16 bits (a half word) at bytes
 *                 [32K+2j, 32K+2j+2). At b = 32 that is the ids in order.
 *                 The last block when m < 128 is horizontal: id i at bits [i*b, (i+1)*b).
 *                 Bit k of an area is bit k%8 of its byte k/8 (LSB first); padding bits zero
 *   bitmap        ceil(m / 8) bytes (only when E): bit i set = id i is an exception
 *   high parts    e bytes (e = bits set in the bitmap; only when E), in id order
 *
 * The k-th set bit i of the bitmap takes the k-th high byte h: id[i] = base[i] | h << b; every
 * other id is its base value. Checked by the decoder: E only with b <= 31; bitmap not empty and
 * no bit at or past m; every h != 0 and h < 2**(32-b); when E == 0, b is exactly the bit length
 * of the OR of the block's ids; zero padding; no byte after the last block. What remains free is
 * the choice of b when E (any b whose high parts fit a byte): twpf_encode picks the b in
 * [M-8, M] (M the block's bit length) that gives the fewest bytes, the larger b on a tie; a
 * receiver that needs byte-exact canonical form re-encodes and compares.
 *
 * Sizes: a block twpf_encode writes takes at most 1 + 4m bytes (b = M, no exceptions, is always
 * a candidate), so twpf_bound(n) = 4n + ceil(n/128); a block valid at another b can take more
 * (up to 1 + ceil(31m/8) + ceil(m/8) + m), and a frame whose payload exceeds twpf_bound(n) is
 * refused from its header (frame.h; the spec's "length bound"). A block takes at least 1 byte,
 * so a payload of len bytes holds at most 128*len ids (twpf_min_size). The encoder copies each block of the source to a
 * stack buffer once and works from the copy: a source another thread is writing gives some valid
 * encoding of ids it held, never out-of-bounds writes. Paths (twpf_init detects the CPU):
 * AVX-512 VBMI2 (full blocks' high parts spread and gathered 64 at a time by vpexpandb and
 * vpcompressb), AVX2 (8 at a time by byte shuffles; one AVX2 register per row of 8 ids), SSE2,
 * and plain C (TWPF_PORTABLE, big-endian hosts, non-x86).
 *
 * C99 or later, and C++11 or later (compat.h spells restrict, the bit scans and counts).
 */
#ifndef TOKENWIRE_PFOR_H
#define TOKENWIRE_PFOR_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "bitpack.h"
#include "byteorder.h"
#include "compat.h"

#define TWPF_BLOCK 128u
#define TWPF_EXC_FLAG 0x80u   /* header bit: the block has exceptions */

enum {
    TWPF_OK = 0,
    TWPF_E_TRUNCATED = 1,      /* payload ends inside a block */
    TWPF_E_WIDTH = 2,          /* base width above 32 */
    TWPF_E_EXCEPTIONS = 3,     /* empty bitmap, exceptions at width 32, high part past bit 31 */
    TWPF_E_POSITION = 4,       /* exception bitmap marks an id past the block */
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
    return 4 * n + (n + TWPF_BLOCK - 1) / TWPF_BLOCK;
}

/* Fewest bytes any payload of n ids takes: reject a claimed count before allocating for it. */
static inline size_t twpf_min_size(size_t n) {
    return (n + TWPF_BLOCK - 1) / TWPF_BLOCK;
}

static inline unsigned twpf_bitlen(uint32_t v) {
    return v ? 32u - tw_clz32(v) : 0u;
}

/* ---- full blocks: vertical layout ---------------------------------------------------------- */

/* The base ids of a full block (128 ids) in 8 lanes: id i goes to lane j = i % 8 as that lane's
 * id r = i / 8, at bit r*b of the lane's bit stream (16*b bits). The stream is cut into
 * K = b / 2 32-bit words and, when b is odd, a 16-bit half word: word k of lane j is stored
 * little-endian at bytes [32k + 4j, 32k + 4j + 4), the half word at bytes [32K + 2j, 32K + 2j + 2).
 * Eight lanes side by side are one AVX2 register (two SSE2 registers), so packing and unpacking
 * are shifts, ORs and masks of whole registers (Lemire and Boytsov's SIMD-BP128, 8 lanes wide,
 * without padding for odd widths); the half words widen to a register with one zero-extension. */
/* TWPF_PORTABLE (a test knob) selects the plain C paths everywhere. */
#if defined(__SSE2__) && !TW_HOST_BIG_ENDIAN && !defined(TWPF_PORTABLE)
#  include <emmintrin.h>
#  define TWPF_SSE2 1
#else
#  define TWPF_SSE2 0
#endif

/* AVX2 paths (pack, unpack with the patch fused in, width counts, high-part gathers) are compiled
 * with target attributes and chosen at run time (twpf_init); SSE2 or plain C otherwise. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(TWPF_PORTABLE)
#  include <immintrin.h>
#  define TWPF_AVX2_SHUFFLES 1
/* Set by twpf_init when the CPU has AVX-512 BW, VL and VBMI2 (vpexpandb / vpcompressb): the
 * high parts of 64 ids spread or gathered by one instruction. Needs twbp_have_avx2 too. */
static int twpf_have_512 = 0;
#  define TWPF_T512 "avx2,popcnt,bmi2,avx512f,avx512bw,avx512vl,avx512vbmi2"
#else
#  define TWPF_AVX2_SHUFFLES 0
#endif

#if defined(__GNUC__)
#  define TWPF_UNROLL _Pragma("GCC unroll 32")
#else
#  define TWPF_UNROLL
#endif

static inline uint32_t twpf_load_le16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static inline void twpf_store_le16(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

#if TWPF_SSE2
/* Word k of lanes 4h..4h+3 (K full words; k == K is the half word, zero-extended). */
TW_INLINE __m128i twpf_word4(const uint8_t *in, unsigned k, unsigned K, unsigned h) {
    if (k < K) return _mm_loadu_si128((const __m128i *)(const void *)(in + 32 * k + 16 * h));
    return _mm_unpacklo_epi16(_mm_loadl_epi64((const __m128i *)(const void *)(in + 32 * K + 8 * h)), _mm_setzero_si128());
}
#endif

/* in: 128 ids, of which the low B bits (1 <= B <= 31) are packed; out: 16*B bytes. */
TW_INLINE void twpf_vpack_c(const uint32_t *in, uint8_t *out, const unsigned B) {
    const unsigned K = B / 2;
#if TWPF_SSE2
    const __m128i vmask = _mm_set1_epi32((int)((1u << B) - 1));
    for (unsigned h = 0; h < 2; h++) {
        __m128i acc = _mm_setzero_si128();
        unsigned sh = 0, k = 0;
        TWPF_UNROLL
        for (unsigned r = 0; r < 16; r++) {
            const __m128i v = _mm_and_si128(_mm_loadu_si128((const __m128i *)(const void *)(in + 8 * r + 4 * h)), vmask);
            acc = _mm_or_si128(acc, _mm_slli_epi32(v, (int)sh));
            sh += B;
            if (sh >= 32) {
                _mm_storeu_si128((__m128i *)(void *)(out + 32 * k + 16 * h), acc);
                k++;
                sh -= 32;
                acc = sh ? _mm_srli_epi32(v, (int)(B - sh)) : _mm_setzero_si128();
            }
        }
        if (B & 1) {        /* 16 bits left per lane: the half words (sign-extend, so packs keeps them) */
            acc = _mm_srai_epi32(_mm_slli_epi32(acc, 16), 16);
            _mm_storel_epi64((__m128i *)(void *)(out + 32 * K + 8 * h), _mm_packs_epi32(acc, acc));
        }
    }
#else
    for (unsigned j = 0; j < 8; j++) {
        uint32_t acc = 0;
        unsigned sh = 0, k = 0;
        for (unsigned r = 0; r < 16; r++) {
            const uint32_t v = in[8 * r + j] & ((1u << B) - 1);
            acc |= v << sh;
            sh += B;
            if (sh >= 32) {
                tw_store_le32(out + 32 * k + 4 * j, acc);
                k++;
                sh -= 32;
                acc = sh ? v >> (B - sh) : 0;
            }
        }
        if (B & 1) twpf_store_le16(out + 32 * K + 2 * j, acc);
    }
#endif
}

/* in: 16*B bytes; out: 128 ids; returns the OR of the ids (the decoder's canonical-width check
 * without a second pass). */
TW_INLINE uint32_t twpf_vunpack_c(const uint8_t *in, int32_t *out, const unsigned B) {
    const uint32_t mask = (1u << B) - 1;
    const unsigned K = B / 2;
#if TWPF_SSE2
    const __m128i vmask = _mm_set1_epi32((int)mask);
    __m128i orv = _mm_setzero_si128();
    for (unsigned h = 0; h < 2; h++) {
        unsigned sh = 0, k = 0;
        __m128i cur = twpf_word4(in, 0, K, h);
        TWPF_UNROLL
        for (unsigned r = 0; r < 16; r++) {
            __m128i v = _mm_srli_epi32(cur, (int)sh);
            if (sh + B > 32) {                     /* the id straddles words */
                cur = twpf_word4(in, ++k, K, h);
                v = _mm_or_si128(v, _mm_slli_epi32(cur, (int)(32 - sh)));
                sh = sh + B - 32;
            } else if (sh + B == 32) {             /* it ends its word: the next one, if any */
                if (r < 15) cur = twpf_word4(in, ++k, K, h);
                sh = 0;
            } else {
                sh += B;
            }
            v = _mm_and_si128(v, vmask);
            orv = _mm_or_si128(orv, v);
            _mm_storeu_si128((__m128i *)(void *)(out + 8 * r + 4 * h), v);
        }
    }
    orv = _mm_or_si128(orv, _mm_srli_si128(orv, 8));
    orv = _mm_or_si128(orv, _mm_srli_si128(orv, 4));
    return (uint32_t)_mm_cvtsi128_si32(orv);
#else
    uint32_t acc = 0;
    for (unsigned j = 0; j < 8; j++) {
        unsigned sh = 0, k = 0;
        uint32_t cur = K ? tw_load_le32(in + 4 * j) : twpf_load_le16(in + 2 * j);
        for (unsigned r = 0; r < 16; r++) {
            uint32_t v = cur >> sh;
            if (sh + B > 32 || (sh + B == 32 && r < 15)) {
                k++;
                cur = k < K ? tw_load_le32(in + 32 * k + 4 * j) : twpf_load_le16(in + 32 * K + 2 * j);
                if (sh + B > 32) v |= cur << (32 - sh);
            }
            sh = sh + B >= 32 ? sh + B - 32 : sh + B;
            acc |= v & mask;
            out[8 * r + j] = (int32_t)(v & mask);
        }
    }
    return acc;
#endif
}

#define TWPF_WIDTHS_1_31(X)                                                                    \
    X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15) X(16)    \
    X(17) X(18) X(19) X(20) X(21) X(22) X(23) X(24) X(25) X(26) X(27) X(28) X(29) X(30) X(31)

/* Full block at width b (0..32): 16*b bytes (at 32, the ids in order, little-endian). */
static inline void twpf_vpack(const uint32_t *in, uint8_t *out, unsigned b) {
    switch (b) {
#define TWPF_CASE(B) case B: twpf_vpack_c(in, out, B); return;
        TWPF_WIDTHS_1_31(TWPF_CASE)
#undef TWPF_CASE
        case 32:
            for (unsigned i = 0; i < TWPF_BLOCK; i++) tw_store_le32(out + 4 * i, in[i]);
            return;
        default: return;
    }
}

/* Full block at width b (0..32) from 16*b bytes; returns the OR of the 128 ids. */
static inline uint32_t twpf_vunpack(const uint8_t *in, int32_t *out, unsigned b) {
    switch (b) {
#define TWPF_CASE(B) case B: return twpf_vunpack_c(in, out, B);
        TWPF_WIDTHS_1_31(TWPF_CASE)
#undef TWPF_CASE
        case 32: {
            uint32_t acc = 0;
            for (unsigned i = 0; i < TWPF_BLOCK; i++) {
                const uint32_t v = tw_load_le32(in + 4 * i);
                acc |= v;
                out[i] = (int32_t)v;
            }
            return acc;
        }
        default: memset(out, 0, 4 * TWPF_BLOCK); return 0;
    }
}

#if TWPF_AVX2_SHUFFLES
/* twpf_vpack_c with AVX2: the 8 lanes in one register. */
__attribute__((target("avx2"))) __attribute__((always_inline))
static inline void twpf_vpack_avx2_c(const uint32_t *in, uint8_t *out, const unsigned B) {
    const __m256i vmask = _mm256_set1_epi32((int)((1u << B) - 1));
    __m256i acc = _mm256_setzero_si256();
    unsigned sh = 0;
    TWPF_UNROLL
    for (unsigned r = 0; r < 16; r++) {
        const __m256i v = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(const void *)(in + 8 * r)), vmask);
        acc = _mm256_or_si256(acc, _mm256_slli_epi32(v, (int)sh));
        sh += B;
        if (sh >= 32) {
            _mm256_storeu_si256((__m256i *)(void *)out, acc);
            out += 32;
            sh -= 32;
            acc = sh ? _mm256_srli_epi32(v, (int)(B - sh)) : _mm256_setzero_si256();
        }
    }
    if (B & 1)              /* the half words: acc < 2**16 in every lane */
        _mm_storeu_si128((__m128i *)(void *)out,
                         _mm_packus_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1)));
}

/* Full block at width b (0..32), as twpf_vpack. */
__attribute__((target("avx2")))
static inline void twpf_vpack_avx2(const uint32_t *in, uint8_t *out, unsigned b) {
    switch (b) {
#define TWPF_CASE(B) case B: twpf_vpack_avx2_c(in, out, B); return;
        TWPF_WIDTHS_1_31(TWPF_CASE)
#undef TWPF_CASE
        case 32: memcpy(out, in, 4 * TWPF_BLOCK); return;   /* little-endian host */
        default: return;
    }
}
#endif

/* ---- encoder ------------------------------------------------------------------------------- */

/* The one read of the source: a compiler may load a value from memory again instead of keeping
 * it in a register (the source is not volatile), and with another party writing the source the
 * copy and the OR would then see different ids (a width too small for an id of the copy). An
 * empty asm that "changes" the loaded register pins it: the OR and the copy use that one load. */
#if defined(__GNUC__)
#  define TWPF_PIN_VEC(x) __asm__("" : "+x"(x))
#  define TWPF_PIN_INT(x) __asm__("" : "+r"(x))
#else
#  define TWPF_PIN_VEC(x) ((void)0)
#  define TWPF_PIN_INT(x) ((void)0)
#endif

/* Copy m (1..128) ids of the source to v (zero-filled to 128) and return their OR: the one read
 * of the source, everything after works on the copy. */
TW_INLINE uint32_t twpf_copy_block(uint32_t *TW_RESTRICT v, const int32_t *TW_RESTRICT src, unsigned m) {
#if TWPF_SSE2
    if (m == TWPF_BLOCK) {
        __m128i acc = _mm_setzero_si128();
        TWPF_UNROLL
        for (unsigned r = 0; r < 32; r++) {
            __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(src + 4 * r));
            TWPF_PIN_VEC(x);
            acc = _mm_or_si128(acc, x);
            _mm_storeu_si128((__m128i *)(void *)(v + 4 * r), x);
        }
        acc = _mm_or_si128(acc, _mm_srli_si128(acc, 8));
        acc = _mm_or_si128(acc, _mm_srli_si128(acc, 4));
        return (uint32_t)_mm_cvtsi128_si32(acc);
    }
#endif
    uint32_t orv = 0;
    for (unsigned i = 0; i < m; i++) {
        uint32_t x = twbp_id(src, i);
        TWPF_PIN_INT(x);
        orv |= x;
        v[i] = x;
    }
    for (unsigned i = m; i < TWPF_BLOCK; i++) v[i] = 0;
    return orv;
}

/* u[i] = v[i] >> lo (every v[i] < 2**(lo+8)): the top 8 bits of a block's ids. */
TW_INLINE void twpf_narrow(const uint32_t *TW_RESTRICT v, unsigned lo, uint8_t *TW_RESTRICT u) {
#if TWPF_SSE2
    const __m128i sh = _mm_cvtsi32_si128((int)lo);
    const __m128i lo8 = _mm_set1_epi32(0xFF);   /* packs saturate signed: keep 0..255 */
    for (unsigned r = 0; r < TWPF_BLOCK; r += 16) {
        __m128i a = _mm_and_si128(_mm_srl_epi32(_mm_loadu_si128((const __m128i *)(const void *)(v + r)), sh), lo8);
        __m128i b = _mm_and_si128(_mm_srl_epi32(_mm_loadu_si128((const __m128i *)(const void *)(v + r + 4)), sh), lo8);
        __m128i c = _mm_and_si128(_mm_srl_epi32(_mm_loadu_si128((const __m128i *)(const void *)(v + r + 8)), sh), lo8);
        __m128i d = _mm_and_si128(_mm_srl_epi32(_mm_loadu_si128((const __m128i *)(const void *)(v + r + 12)), sh), lo8);
        _mm_storeu_si128((__m128i *)(void *)(u + r), _mm_packus_epi16(_mm_packs_epi32(a, b), _mm_packs_epi32(c, d)));
    }
#else
    for (unsigned i = 0; i < TWPF_BLOCK; i++) u[i] = (uint8_t)(v[i] >> lo);
#endif
}

/* cnt[k] = number of u[i] >= 2**k, k in 0..7. */
TW_INLINE void twpf_counts(const uint8_t *TW_RESTRICT u, unsigned *TW_RESTRICT cnt) {
#if TWPF_SSE2
    /* per threshold 2**k: u >= 2**k iff max(u, 2**k) == u; byte counters gain at most 8 */
    __m128i x[8];
    for (unsigned i = 0; i < 8; i++) x[i] = _mm_loadu_si128((const __m128i *)(const void *)(u + 16 * i));
    for (unsigned k = 0; k < 8; k++) {
        const __m128i t = _mm_set1_epi8((char)(1u << k));
        __m128i acc = _mm_setzero_si128();
        for (unsigned i = 0; i < 8; i++)
            acc = _mm_sub_epi8(acc, _mm_cmpeq_epi8(_mm_max_epu8(x[i], t), x[i]));
        const __m128i s = _mm_sad_epu8(acc, _mm_setzero_si128());
        cnt[k] = (unsigned)(_mm_cvtsi128_si32(s) + _mm_extract_epi16(s, 4));
    }
#else
    for (unsigned k = 0; k < 8; k++) {
        const uint8_t t = (uint8_t)(1u << k);
        unsigned c = 0;
        for (unsigned i = 0; i < TWPF_BLOCK; i++) c += u[i] >= t;
        cnt[k] = c;
    }
#endif
}

#if TWPF_AVX2_SHUFFLES
/* twpf_narrow then twpf_counts with AVX2 (half the steps); the counts come back as 8 uint16
 * lanes, lane k = number of u[i] >= 2**k. */
__attribute__((target("avx2")))
static inline __m128i twpf_narrow_counts_avx2(const uint32_t *TW_RESTRICT v, unsigned lo, uint8_t *TW_RESTRICT u) {
    const __m128i sh = _mm_cvtsi32_si128((int)lo);
    const __m256i lo8 = _mm256_set1_epi32(0xFF);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);   /* undo the in-lane packs */
    __m256i x[4], s[8];
    for (unsigned q = 0; q < 4; q++) {
        const uint32_t *w = v + 32 * q;
        const __m256i a = _mm256_and_si256(_mm256_srl_epi32(_mm256_loadu_si256((const __m256i *)(const void *)w), sh), lo8);
        const __m256i b = _mm256_and_si256(_mm256_srl_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(w + 8)), sh), lo8);
        const __m256i c = _mm256_and_si256(_mm256_srl_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(w + 16)), sh), lo8);
        const __m256i d = _mm256_and_si256(_mm256_srl_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(w + 24)), sh), lo8);
        x[q] = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(_mm256_packus_epi32(a, b), _mm256_packus_epi32(c, d)), order);
        _mm256_storeu_si256((__m256i *)(void *)(u + 32 * q), x[q]);
    }
    for (unsigned k = 0; k < 8; k++) {
        const __m256i t = _mm256_set1_epi8((char)(1u << k));
        __m256i acc = _mm256_setzero_si256();
        for (unsigned q = 0; q < 4; q++)    /* a byte lane gains at most 4 */
            acc = _mm256_sub_epi8(acc, _mm256_cmpeq_epi8(_mm256_max_epu8(x[q], t), x[q]));
        s[k] = _mm256_sad_epu8(acc, _mm256_setzero_si256());   /* 4 partial sums <= 32 */
    }
    /* the 8 counts' partial sums side by side as uint16 (no lane exceeds 128), then summed */
    const __m256i a = _mm256_or_si256(_mm256_or_si256(s[0], _mm256_slli_epi64(s[1], 16)),
                                      _mm256_slli_epi64(_mm256_or_si256(s[2], _mm256_slli_epi64(s[3], 16)), 32));
    const __m256i b = _mm256_or_si256(_mm256_or_si256(s[4], _mm256_slli_epi64(s[5], 16)),
                                      _mm256_slli_epi64(_mm256_or_si256(s[6], _mm256_slli_epi64(s[7], 16)), 32));
    const __m128i a2 = _mm_add_epi16(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    const __m128i b2 = _mm_add_epi16(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
    return _mm_add_epi16(_mm_unpacklo_epi64(a2, b2), _mm_unpackhi_epi64(a2, b2));
}

/* The base width of a full block from the counts (twpf_narrow_counts_avx2), as the scalar rule:
 * the shortest of 16c + 16 + cnt[c - lo] for lo <= c < M and 16M (c = M, no exceptions), the
 * larger c on a tie. One phminposuw over keys size*8 + (7 - k) (the larger k wins a tie). */
__attribute__((target("avx2")))
static inline unsigned twpf_choose_full_avx2(__m128i cnt, unsigned lo, unsigned M, size_t *best) {
    const __m128i k16 = _mm_setr_epi16(0, 16, 32, 48, 64, 80, 96, 112);
    const __m128i size = _mm_add_epi16(_mm_add_epi16(cnt, k16), _mm_set1_epi16((short)(16 * lo + 16)));
    __m128i key = _mm_add_epi16(_mm_slli_epi16(size, 3), _mm_setr_epi16(7, 6, 5, 4, 3, 2, 1, 0));
    const __m128i valid = _mm_cmpgt_epi16(_mm_set1_epi16((short)(M - lo)), _mm_setr_epi16(0, 1, 2, 3, 4, 5, 6, 7));
    key = _mm_or_si128(key, _mm_andnot_si128(valid, _mm_set1_epi16(-1)));
    const unsigned r = (unsigned)_mm_cvtsi128_si32(_mm_minpos_epu16(key));
    const size_t sz = (r & 0xFFFF) >> 3, full = 16 * (size_t)M;
    const size_t take = (size_t)0 - (size_t)(sz < full);
    *best = (sz & take) | (full & ~take);
    return (unsigned)(((lo + (r >> 16)) & take) | (M & ~take));
}
#endif

/* Bitmap of u[i] >= t (1 <= t <= 128): bit i of bm[i / 64]. */
TW_INLINE void twpf_bitmap(const uint8_t *TW_RESTRICT u, unsigned t, uint64_t *TW_RESTRICT bm) {
#if TWPF_SSE2
    const __m128i vt = _mm_set1_epi8((char)t);
    uint64_t w[8];
    for (unsigned i = 0; i < 8; i++) {
        const __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(u + 16 * i));
        w[i] = (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_max_epu8(x, vt), x));
    }
    bm[0] = w[0] | w[1] << 16 | w[2] << 32 | w[3] << 48;
    bm[1] = w[4] | w[5] << 16 | w[6] << 32 | w[7] << 48;
#else
    bm[0] = bm[1] = 0;
    for (unsigned i = 0; i < TWPF_BLOCK; i++) bm[i >> 6] |= (uint64_t)(u[i] >= t) << (i & 63);
#endif
}

/* twpf_compress8[k]: the pshufb control that gathers the bytes at k's set bits to the front. */
static const uint64_t twpf_compress8[256] = {
    0x8080808080808080ull, 0x8080808080808000ull, 0x8080808080808001ull, 0x8080808080800100ull,
    0x8080808080808002ull, 0x8080808080800200ull, 0x8080808080800201ull, 0x8080808080020100ull,
    0x8080808080808003ull, 0x8080808080800300ull, 0x8080808080800301ull, 0x8080808080030100ull,
    0x8080808080800302ull, 0x8080808080030200ull, 0x8080808080030201ull, 0x8080808003020100ull,
    0x8080808080808004ull, 0x8080808080800400ull, 0x8080808080800401ull, 0x8080808080040100ull,
    0x8080808080800402ull, 0x8080808080040200ull, 0x8080808080040201ull, 0x8080808004020100ull,
    0x8080808080800403ull, 0x8080808080040300ull, 0x8080808080040301ull, 0x8080808004030100ull,
    0x8080808080040302ull, 0x8080808004030200ull, 0x8080808004030201ull, 0x8080800403020100ull,
    0x8080808080808005ull, 0x8080808080800500ull, 0x8080808080800501ull, 0x8080808080050100ull,
    0x8080808080800502ull, 0x8080808080050200ull, 0x8080808080050201ull, 0x8080808005020100ull,
    0x8080808080800503ull, 0x8080808080050300ull, 0x8080808080050301ull, 0x8080808005030100ull,
    0x8080808080050302ull, 0x8080808005030200ull, 0x8080808005030201ull, 0x8080800503020100ull,
    0x8080808080800504ull, 0x8080808080050400ull, 0x8080808080050401ull, 0x8080808005040100ull,
    0x8080808080050402ull, 0x8080808005040200ull, 0x8080808005040201ull, 0x8080800504020100ull,
    0x8080808080050403ull, 0x8080808005040300ull, 0x8080808005040301ull, 0x8080800504030100ull,
    0x8080808005040302ull, 0x8080800504030200ull, 0x8080800504030201ull, 0x8080050403020100ull,
    0x8080808080808006ull, 0x8080808080800600ull, 0x8080808080800601ull, 0x8080808080060100ull,
    0x8080808080800602ull, 0x8080808080060200ull, 0x8080808080060201ull, 0x8080808006020100ull,
    0x8080808080800603ull, 0x8080808080060300ull, 0x8080808080060301ull, 0x8080808006030100ull,
    0x8080808080060302ull, 0x8080808006030200ull, 0x8080808006030201ull, 0x8080800603020100ull,
    0x8080808080800604ull, 0x8080808080060400ull, 0x8080808080060401ull, 0x8080808006040100ull,
    0x8080808080060402ull, 0x8080808006040200ull, 0x8080808006040201ull, 0x8080800604020100ull,
    0x8080808080060403ull, 0x8080808006040300ull, 0x8080808006040301ull, 0x8080800604030100ull,
    0x8080808006040302ull, 0x8080800604030200ull, 0x8080800604030201ull, 0x8080060403020100ull,
    0x8080808080800605ull, 0x8080808080060500ull, 0x8080808080060501ull, 0x8080808006050100ull,
    0x8080808080060502ull, 0x8080808006050200ull, 0x8080808006050201ull, 0x8080800605020100ull,
    0x8080808080060503ull, 0x8080808006050300ull, 0x8080808006050301ull, 0x8080800605030100ull,
    0x8080808006050302ull, 0x8080800605030200ull, 0x8080800605030201ull, 0x8080060503020100ull,
    0x8080808080060504ull, 0x8080808006050400ull, 0x8080808006050401ull, 0x8080800605040100ull,
    0x8080808006050402ull, 0x8080800605040200ull, 0x8080800605040201ull, 0x8080060504020100ull,
    0x8080808006050403ull, 0x8080800605040300ull, 0x8080800605040301ull, 0x8080060504030100ull,
    0x8080800605040302ull, 0x8080060504030200ull, 0x8080060504030201ull, 0x8006050403020100ull,
    0x8080808080808007ull, 0x8080808080800700ull, 0x8080808080800701ull, 0x8080808080070100ull,
    0x8080808080800702ull, 0x8080808080070200ull, 0x8080808080070201ull, 0x8080808007020100ull,
    0x8080808080800703ull, 0x8080808080070300ull, 0x8080808080070301ull, 0x8080808007030100ull,
    0x8080808080070302ull, 0x8080808007030200ull, 0x8080808007030201ull, 0x8080800703020100ull,
    0x8080808080800704ull, 0x8080808080070400ull, 0x8080808080070401ull, 0x8080808007040100ull,
    0x8080808080070402ull, 0x8080808007040200ull, 0x8080808007040201ull, 0x8080800704020100ull,
    0x8080808080070403ull, 0x8080808007040300ull, 0x8080808007040301ull, 0x8080800704030100ull,
    0x8080808007040302ull, 0x8080800704030200ull, 0x8080800704030201ull, 0x8080070403020100ull,
    0x8080808080800705ull, 0x8080808080070500ull, 0x8080808080070501ull, 0x8080808007050100ull,
    0x8080808080070502ull, 0x8080808007050200ull, 0x8080808007050201ull, 0x8080800705020100ull,
    0x8080808080070503ull, 0x8080808007050300ull, 0x8080808007050301ull, 0x8080800705030100ull,
    0x8080808007050302ull, 0x8080800705030200ull, 0x8080800705030201ull, 0x8080070503020100ull,
    0x8080808080070504ull, 0x8080808007050400ull, 0x8080808007050401ull, 0x8080800705040100ull,
    0x8080808007050402ull, 0x8080800705040200ull, 0x8080800705040201ull, 0x8080070504020100ull,
    0x8080808007050403ull, 0x8080800705040300ull, 0x8080800705040301ull, 0x8080070504030100ull,
    0x8080800705040302ull, 0x8080070504030200ull, 0x8080070504030201ull, 0x8007050403020100ull,
    0x8080808080800706ull, 0x8080808080070600ull, 0x8080808080070601ull, 0x8080808007060100ull,
    0x8080808080070602ull, 0x8080808007060200ull, 0x8080808007060201ull, 0x8080800706020100ull,
    0x8080808080070603ull, 0x8080808007060300ull, 0x8080808007060301ull, 0x8080800706030100ull,
    0x8080808007060302ull, 0x8080800706030200ull, 0x8080800706030201ull, 0x8080070603020100ull,
    0x8080808080070604ull, 0x8080808007060400ull, 0x8080808007060401ull, 0x8080800706040100ull,
    0x8080808007060402ull, 0x8080800706040200ull, 0x8080800706040201ull, 0x8080070604020100ull,
    0x8080808007060403ull, 0x8080800706040300ull, 0x8080800706040301ull, 0x8080070604030100ull,
    0x8080800706040302ull, 0x8080070604030200ull, 0x8080070604030201ull, 0x8007060403020100ull,
    0x8080808080070605ull, 0x8080808007060500ull, 0x8080808007060501ull, 0x8080800706050100ull,
    0x8080808007060502ull, 0x8080800706050200ull, 0x8080800706050201ull, 0x8080070605020100ull,
    0x8080808007060503ull, 0x8080800706050300ull, 0x8080800706050301ull, 0x8080070605030100ull,
    0x8080800706050302ull, 0x8080070605030200ull, 0x8080070605030201ull, 0x8007060503020100ull,
    0x8080808007060504ull, 0x8080800706050400ull, 0x8080800706050401ull, 0x8080070605040100ull,
    0x8080800706050402ull, 0x8080070605040200ull, 0x8080070605040201ull, 0x8007060504020100ull,
    0x8080800706050403ull, 0x8080070605040300ull, 0x8080070605040301ull, 0x8007060504030100ull,
    0x8080070605040302ull, 0x8007060504030200ull, 0x8007060504030201ull, 0x0706050403020100ull,
};

#if TWPF_AVX2_SHUFFLES
/* hb[0..e) = u[i] >> t for the bitmap's set bits i in order, 8 ids a step (hb has 8 bytes of
 * room past e). */
__attribute__((target("avx2,popcnt")))
static inline unsigned twpf_highs_avx2(const uint8_t *u, unsigned t, const uint64_t *bm, uint8_t *hb) {
    const __m128i cnt = _mm_cvtsi32_si128((int)t);
    const __m128i lowmask = _mm_set1_epi8((char)(0xFFu >> t));
    unsigned c = 0;
    for (unsigned g = 0; g < 16; g += 2) {
        /* 16 ids: bytes shifted right by t (16-bit shift, then the bits from the neighbour
         * byte masked off) */
        const __m128i h = _mm_and_si128(_mm_srl_epi16(_mm_loadu_si128((const __m128i *)(const void *)(u + 8 * g)), cnt), lowmask);
        const uint64_t w = bm[g >> 3] >> (8 * (g & 7));
        const unsigned m0 = (unsigned)(w & 0xFF), m1 = (unsigned)((w >> 8) & 0xFF);
        _mm_storel_epi64((__m128i *)(void *)(hb + c),
                         _mm_shuffle_epi8(h, _mm_loadl_epi64((const __m128i *)(const void *)&twpf_compress8[m0])));
        c += (unsigned)__builtin_popcount(m0);
        _mm_storel_epi64((__m128i *)(void *)(hb + c),
                         _mm_shuffle_epi8(_mm_srli_si128(h, 8), _mm_loadl_epi64((const __m128i *)(const void *)&twpf_compress8[m1])));
        c += (unsigned)__builtin_popcount(m1);
    }
    return c;
}
#endif

#if TWPF_AVX2_SHUFFLES
/* twpf_copy_block of a full block with AVX2. */
__attribute__((target("avx2")))
static inline uint32_t twpf_copy_full_avx2(uint32_t *TW_RESTRICT v, const int32_t *TW_RESTRICT src) {
    __m256i acc = _mm256_setzero_si256();
    TWPF_UNROLL
    for (unsigned r = 0; r < 16; r++) {
        __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)(src + 8 * r));
        TWPF_PIN_VEC(x);
        acc = _mm256_or_si256(acc, x);
        _mm256_storeu_si256((__m256i *)(void *)(v + 8 * r), x);
    }
    __m128i a = _mm_or_si128(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
    a = _mm_or_si128(a, _mm_srli_si128(a, 8));
    a = _mm_or_si128(a, _mm_srli_si128(a, 4));
    return (uint32_t)_mm_cvtsi128_si32(a);
}
#endif

#if TWPF_AVX2_SHUFFLES
/* (The AVX-512 code uses the zero-masking forms of intrinsics whose plain forms start from an
 * undefined register: GCC 12 in C++ warns about those as maybe-uninitialized.) */
/* twpf_narrow_counts_avx2 for a full block with AVX-512: 16 ids narrowed to bytes by one
 * shift and one vpmovdb (v >> lo < 256), each count two mask compares and two popcnts. */
__attribute__((target(TWPF_T512)))
static inline __m128i twpf_narrow_counts_512(const uint32_t *TW_RESTRICT v, unsigned lo, uint8_t *TW_RESTRICT u) {
    const __m128i sh = _mm_cvtsi32_si128((int)lo);
    __m128i b[8];
    for (unsigned q = 0; q < 8; q++)
        b[q] = _mm512_maskz_cvtepi32_epi8(0xFFFF, _mm512_maskz_srl_epi32(0xFFFF, _mm512_loadu_si512((const void *)(v + 16 * q)), sh));
    const __m512i x0 = _mm512_maskz_inserti64x4(0xFF, _mm512_maskz_inserti64x4(0xFF, _mm512_setzero_si512(), _mm256_set_m128i(b[1], b[0]), 0),
                                                 _mm256_set_m128i(b[3], b[2]), 1);
    const __m512i x1 = _mm512_maskz_inserti64x4(0xFF, _mm512_maskz_inserti64x4(0xFF, _mm512_setzero_si512(), _mm256_set_m128i(b[5], b[4]), 0),
                                                 _mm256_set_m128i(b[7], b[6]), 1);
    _mm512_storeu_si512((void *)u, x0);
    _mm512_storeu_si512((void *)(u + 64), x1);
    unsigned c[8];
    for (unsigned k = 0; k < 8; k++) {
        const __m512i t = _mm512_set1_epi8((char)(1u << k));
        c[k] = (unsigned)(_mm_popcnt_u64((uint64_t)_mm512_cmpge_epu8_mask(x0, t)) +
                          _mm_popcnt_u64((uint64_t)_mm512_cmpge_epu8_mask(x1, t)));
    }
    return _mm_setr_epi16((short)c[0], (short)c[1], (short)c[2], (short)c[3], (short)c[4], (short)c[5],
                          (short)c[6], (short)c[7]);
}

/* A full block's bitmap (u >= 2**t) and high parts (u >> t at its set bits, in order) to o with
 * AVX-512 VBMI2: per 64 ids one compare into a mask register and one vpcompressb, stored under a
 * mask of exactly the count (nothing past the block is written). Returns the end. */
__attribute__((target(TWPF_T512)))
static inline uint8_t *twpf_exc_512(const uint8_t *u, unsigned t, uint8_t *o) {
    const __m512i thr = _mm512_set1_epi8((char)(1u << t)), low = _mm512_set1_epi8((char)(0xFFu >> t));
    const __m128i cnt = _mm_cvtsi32_si128((int)t);
    const __m512i x0 = _mm512_loadu_si512((const void *)u), x1 = _mm512_loadu_si512((const void *)(u + 64));
    const __mmask64 b0 = _mm512_cmpge_epu8_mask(x0, thr), b1 = _mm512_cmpge_epu8_mask(x1, thr);
    tw_store_le64(o, (uint64_t)b0);
    tw_store_le64(o + 8, (uint64_t)b1);
    o += 16;
    const unsigned p0 = (unsigned)_mm_popcnt_u64((uint64_t)b0), p1 = (unsigned)_mm_popcnt_u64((uint64_t)b1);
    _mm512_mask_storeu_epi8(o, (__mmask64)_bzhi_u64(~0ull, p0),
                            _mm512_maskz_compress_epi8(b0, _mm512_and_si512(_mm512_srl_epi16(x0, cnt), low)));
    o += p0;
    _mm512_mask_storeu_epi8(o, (__mmask64)_bzhi_u64(~0ull, p1),
                            _mm512_maskz_compress_epi8(b1, _mm512_and_si512(_mm512_srl_epi16(x1, cnt), low)));
    return o + p1;
}
#endif

/* One block of m (1..128) ids from src to o; returns the end of what it wrote. Instantiated with
 * AVX-512 VBMI2 (V512: bitmap and high parts by mask compares and vpcompressb), with AVX2 (the
 * run-time AVX2 paths) and without. */
typedef struct {
    unsigned b, M, lo;   /* base width, bit length of the block, M - 8 (or 0) */
    size_t best;         /* bytes after the header */
} twpf_plan;

/* First half of a block: copy m (1..128) ids of src to v (the one read of the source), narrow
 * them to u (v >> lo) and choose the width. */
TW_INLINE void twpf_plan_block(const int32_t *src, unsigned m, uint32_t *v, uint8_t *u, twpf_plan *pl,
                                 const int AVX2, const int V512) {
    unsigned cnt[8];
    uint32_t orv;
    (void)AVX2;
    (void)V512;
#if TWPF_AVX2_SHUFFLES
    if (AVX2 && m == TWPF_BLOCK) orv = twpf_copy_full_avx2(v, src);
    else
#endif
        orv = twpf_copy_block(v, src, m);
    const unsigned M = twpf_bitlen(orv);
    const unsigned lo = M > 8 ? M - 8 : 0;
    const size_t nbm = (m + 7) / 8;
    unsigned b = M;
    size_t best = ((size_t)m * M + 7) / 8;
    if (M > 0) {
        int chosen = 0;
#if TWPF_AVX2_SHUFFLES
        if (AVX2) {
            const __m128i cv = V512 && m == TWPF_BLOCK ? twpf_narrow_counts_512(v, lo, u)
                                                       : twpf_narrow_counts_avx2(v, lo, u);
            if (m == TWPF_BLOCK) {
                b = twpf_choose_full_avx2(cv, lo, M, &best);
                chosen = 1;
            } else {
                uint16_t c16[8];
                _mm_storeu_si128((__m128i *)(void *)c16, cv);
                for (unsigned k = 0; k < 8; k++) cnt[k] = c16[k];
            }
        } else
#endif
        {
            twpf_narrow(v, lo, u);
            twpf_counts(u, cnt);
        }
        /* candidate base width c = lo + k, M-1 down to lo (every c < M has at least one
         * exception), the larger c on a tie; without branches (the choice is data-dependent) */
        if (chosen) {
        } else if (m == TWPF_BLOCK) {
            /* keys size * 64 + (63 - c): the smallest is the shortest, the larger c on a tie */
            unsigned key = (16 * M) << 6 | (63 - M);
            TWPF_UNROLL
            for (unsigned k = 0; k < 8; k++) {
                const unsigned c = lo + k;
                const unsigned kc = c < M ? (16 * c + 16 + cnt[k]) << 6 | (63 - c) : ~0u;
                key = kc < key ? kc : key;
            }
            best = key >> 6;
            b = 63 - (key & 63);
        } else {
            for (unsigned c = M; c-- > lo;) {
                const size_t size = ((size_t)m * c + 7) / 8 + nbm + cnt[c - lo];
                if (size < best) {
                    best = size;
                    b = c;
                }
            }
        }
    }
    pl->b = b;
    pl->M = M;
    pl->lo = lo;
    pl->best = best;
}

/* Second half: the block's bytes from v, u and its plan to o; returns the end of what it wrote. */
TW_INLINE uint8_t *twpf_emit_block(const uint32_t *v, const uint8_t *u, unsigned m, const twpf_plan *pl,
                                     uint8_t *o, const int AVX2, const int V512) {
    const unsigned b = pl->b, lo = pl->lo;
    const size_t best = pl->best, nbm = (m + 7) / 8;
    const int exc = b < pl->M;
    (void)AVX2;
    (void)V512;
    (void)best;
    *o++ = (uint8_t)(b | (exc ? TWPF_EXC_FLAG : 0u));
    if (m == TWPF_BLOCK) {
#if TWPF_AVX2_SHUFFLES
        if (AVX2) twpf_vpack_avx2(v, o, b);   /* keeps the low b bits itself */
        else
#endif
            twpf_vpack(v, o, b);
        o += 16 * b;
    } else if (b == 32) {
        for (unsigned i = 0; i < m; i++, o += 4) tw_store_le32(o, v[i]);
    } else if (b > 0) {
        uint32_t w[TWPF_BLOCK];
        const uint32_t mask = (uint32_t)((1ull << b) - 1);
        for (unsigned i = 0; i < m; i++) w[i] = v[i] & mask;
        twbp_packer pk = {o, 0, 0};
        twbp_pack(&pk, (const int32_t *)w, m, b);
        twbp_pack_finish(&pk);
        o = pk.out;
    }
#if TWPF_AVX2_SHUFFLES
    if (V512 && exc && m == TWPF_BLOCK) return twpf_exc_512(u, b - lo, o);
#endif
    if (exc) {
        /* exceptions: v >> b != 0, i.e. u >= 2**(b - lo) (b - lo <= 7); high part v >> b is
         * u >> (b - lo) < 256. u is zero past m, so the bitmap is too. */
        uint64_t bm[2];
        const unsigned t = b - lo;
        twpf_bitmap(u, 1u << t, bm);
        if (m == TWPF_BLOCK) {
            tw_store_le64(o, bm[0]);
            tw_store_le64(o + 8, bm[1]);
        } else {
            for (unsigned k = 0; k < nbm; k++) o[k] = (uint8_t)(bm[k >> 3] >> (8 * (k & 7)));
        }
        o += nbm;
#if TWPF_AVX2_SHUFFLES
        if (AVX2 && best + 8 <= 4 * (size_t)m) {
            /* straight to the output: the gather's last 8-byte store ends at most 8 bytes past
             * the block, which stays inside this block's share of twpf_bound (1 + 4m) */
            o += twpf_highs_avx2(u, t, bm, o);
        } else if (AVX2) {
            uint8_t hb[TWPF_BLOCK + 8];
            const unsigned e = twpf_highs_avx2(u, t, bm, hb);
            memcpy(o, hb, e);
            o += e;
        } else
#endif
        {
            for (unsigned h = 0; h < 2; h++)
                for (uint64_t w = bm[h]; w; w &= w - 1)
                    *o++ = (uint8_t)(u[64 * h + tw_ctz64(w)] >> t);
        }
    }
    return o;
}

/* One block of m (1..128) ids from src to o; returns the end of what it wrote. */
TW_INLINE uint8_t *twpf_encode_block(const int32_t *src, unsigned m, uint8_t *o, const int AVX2,
                                       const int V512) {
    uint32_t v[TWPF_BLOCK];
    uint8_t u[TWPF_BLOCK];
    twpf_plan pl;
    twpf_plan_block(src, m, v, u, &pl, AVX2, V512);
    return twpf_emit_block(v, u, m, &pl, o, AVX2, V512);
}

/* The full blocks software-pipelined: block i+1 is planned before block i is emitted, so the
 * branches on block i's width (the unrolled packer is chosen by it) find it computed already
 * instead of waiting at the end of the copy -> bit length -> counts -> choice chain (a
 * mispredicted jump then no longer discards the next block's work). Then the last block. */
TW_INLINE size_t twpf_encode_body(const int32_t *src, size_t n, uint8_t *dst, const int AVX2, const int V512) {
    uint32_t v[2][TWPF_BLOCK];
    uint8_t u[2][TWPF_BLOCK];
    twpf_plan pl[2];
    uint8_t *o = dst;
    const size_t full = n / TWPF_BLOCK;
    if (full) twpf_plan_block(src, TWPF_BLOCK, v[0], u[0], &pl[0], AVX2, V512);
    for (size_t i = 0; i < full; i++) {
        const unsigned c = (unsigned)(i & 1);
        if (i + 1 < full)
            twpf_plan_block(src + TWPF_BLOCK * (i + 1), TWPF_BLOCK, v[c ^ 1], u[c ^ 1], &pl[c ^ 1], AVX2, V512);
        o = twpf_emit_block(v[c], u[c], TWPF_BLOCK, &pl[c], o, AVX2, V512);
    }
    if (n % TWPF_BLOCK) o = twpf_encode_block(src + TWPF_BLOCK * full, (unsigned)(n % TWPF_BLOCK), o, AVX2, V512);
    return (size_t)(o - dst);
}

/* Encode n ids into dst (room for twpf_bound(n) bytes); returns the bytes written. */
#if TWPF_AVX2_SHUFFLES
__attribute__((target("avx2,popcnt")))
static inline size_t twpf_encode_avx2(const int32_t *src, size_t n, uint8_t *dst) {
    return twpf_encode_body(src, n, dst, 1, 0);
}

__attribute__((target(TWPF_T512)))
static inline size_t twpf_encode_512(const int32_t *src, size_t n, uint8_t *dst) {
    return twpf_encode_body(src, n, dst, 1, 1);
}
#endif

static inline size_t twpf_encode(const int32_t *src, size_t n, uint8_t *dst) {
#if TWPF_AVX2_SHUFFLES
    if (twpf_have_512) return twpf_encode_512(src, n, dst);
    if (twbp_have_avx2) return twpf_encode_avx2(src, n, dst);
#endif
    return twpf_encode_body(src, n, dst, 0, 0);
}

/* ---- decoder ------------------------------------------------------------------------------- */

/* twpf_spread8[k]: the vpshufb control (both 128-bit halves reading the same 8 bytes) that puts
 * the r-th of the first popcount(k) bytes into byte 0 of 32-bit lane i, for the r-th set bit i of
 * k, and zeros every other byte (0x80): the high parts of 8 ids, spread and widened at once. */
#define TWPF_POP8(m) (((m) & 1u) + ((m) >> 1 & 1u) + ((m) >> 2 & 1u) + ((m) >> 3 & 1u) +         \
                      ((m) >> 4 & 1u) + ((m) >> 5 & 1u) + ((m) >> 6 & 1u) + ((m) >> 7 & 1u))
#define TWPF_SP(m, i) (((m) >> (i) & 1u) ? 0x80808000u | TWPF_POP8((m) & ((1u << (i)) - 1u)) : 0x80808080u)
#define TWPF_SP1(m) {TWPF_SP(m, 0), TWPF_SP(m, 1), TWPF_SP(m, 2), TWPF_SP(m, 3),                  \
                     TWPF_SP(m, 4), TWPF_SP(m, 5), TWPF_SP(m, 6), TWPF_SP(m, 7)},
#define TWPF_SP4(m) TWPF_SP1(m) TWPF_SP1((m) + 1u) TWPF_SP1((m) + 2u) TWPF_SP1((m) + 3u)
#define TWPF_SP16(m) TWPF_SP4(m) TWPF_SP4((m) + 4u) TWPF_SP4((m) + 8u) TWPF_SP4((m) + 12u)
#define TWPF_SP64(m) TWPF_SP16(m) TWPF_SP16((m) + 16u) TWPF_SP16((m) + 32u) TWPF_SP16((m) + 48u)
static const uint32_t twpf_spread8[256][8] = {
    TWPF_SP64(0u) TWPF_SP64(64u) TWPF_SP64(128u) TWPF_SP64(192u)
};
#undef TWPF_SP64
#undef TWPF_SP16
#undef TWPF_SP4
#undef TWPF_SP1
#undef TWPF_SP
#undef TWPF_POP8

/* d[i] |= hb[k] << b for the k-th set bit i of the bitmap (bm0: ids 0..63, bm1: 64..127). */
TW_INLINE void twpf_patch_c(int32_t *d, const uint8_t *hb, uint64_t bm0, uint64_t bm1, unsigned b) {
    for (uint64_t w = bm0; w; w &= w - 1) {
        const unsigned i = tw_ctz64(w);
        d[i] = (int32_t)((uint32_t)d[i] | (uint32_t)*hb++ << b);
    }
    for (uint64_t w = bm1; w; w &= w - 1) {
        const unsigned i = 64u + tw_ctz64(w);
        d[i] = (int32_t)((uint32_t)d[i] | (uint32_t)*hb++ << b);
    }
}

#if TWPF_AVX2_SHUFFLES
/* Word k of the 8 lanes (K full words; k == K is the half word, zero-extended). */
__attribute__((target("avx2"))) __attribute__((always_inline))
static inline __m256i twpf_word8(const uint8_t *in, unsigned k, unsigned K) {
    if (k < K) return _mm256_loadu_si256((const __m256i *)(const void *)(in + 32 * k));
    return _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)(in + 32 * K)));
}

/* Row g (ids 8g..8g+7) of a full block at width B (1..31): *cur holds the word the row starts
 * in and moves on to the next word when the row reaches it. */
__attribute__((target("avx2"))) __attribute__((always_inline))
static inline __m256i twpf_row8(const uint8_t *in, const unsigned B, const unsigned g, __m256i *cur) {
    const unsigned K = B / 2, t = g * B, s = t % 32, k = t / 32;
    __m256i v = _mm256_srli_epi32(*cur, (int)s);
    if (s + B > 32 || (s + B == 32 && g < 15)) {   /* straddles, or ends its word */
        const __m256i nxt = twpf_word8(in, k + 1, K);
        if (s + B > 32) v = _mm256_or_si256(v, _mm256_slli_epi32(nxt, (int)(32 - s)));
        *cur = nxt;
    }
    if (s + B != 32 && !(k == K && s + B == 16)) v = _mm256_and_si256(v, _mm256_set1_epi32((int)((1u << B) - 1)));
    return v;
}

/* Full block at width B (0..31) with AVX2, one row of 8 ids (one id of every lane) a step: the
 * lanes' words are loaded once, each row is a shift (two and an OR when it straddles words) and
 * a mask. With P, the step's bitmap byte spreads the next high parts (8 bytes read at hb + c,
 * hb: the high parts and 8 readable bytes past them) to their ids, which are judged in that very
 * register: *hchk gets the OR of the high parts (when B > 24), | 0x100 if one of them is zero
 * (counted: the zero lanes of the block must be 128 - e). Returns the OR of the base values
 * without P (the canonical-width check), 0 with P (a block with exceptions has none). */
__attribute__((target("avx2,popcnt"))) __attribute__((always_inline))
static inline uint32_t twpf_vunpack_avx2_c(const uint8_t *in, int32_t *out, const unsigned B, const int P,
                                           const uint8_t *hb, const uint8_t *bmb, unsigned e,
                                           uint32_t *hchk) {
    __m256i orv = _mm256_setzero_si256(), orh = _mm256_setzero_si256(), zc = _mm256_setzero_si256();
    __m256i cur = _mm256_setzero_si256();
    unsigned c = 0;
    if (B) cur = twpf_word8(in, 0, B / 2);
    TWPF_UNROLL
    for (unsigned g = 0; g < 16; g++) {
        __m256i v = _mm256_setzero_si256();
        if (B) {
            v = twpf_row8(in, B, g, &cur);
            if (!P) orv = _mm256_or_si256(orv, v);
        }
        if (P) {
            const unsigned m8 = bmb[g];
            uint64_t raw;
            memcpy(&raw, hb + c, 8);
            const __m256i ctl = _mm256_loadu_si256((const __m256i *)(const void *)twpf_spread8[m8]);
            const __m256i h = _mm256_shuffle_epi8(_mm256_set1_epi64x((long long)raw), ctl);
            /* judged in the register that is applied: a lane of h is zero where the id has no
             * exception or a zero high part; there must be exactly 128 - e of them */
            zc = _mm256_sub_epi32(zc, _mm256_cmpeq_epi32(h, _mm256_setzero_si256()));
            if (B > 24) orh = _mm256_or_si256(orh, h);
            v = _mm256_or_si256(v, _mm256_slli_epi32(h, (int)B));
            c += (unsigned)__builtin_popcount(m8);
        }
        _mm256_storeu_si256((__m256i *)(void *)(out + 8 * g), v);
    }
    if (P) {
        __m128i h = _mm_or_si128(_mm256_castsi256_si128(orh), _mm256_extracti128_si256(orh, 1));
        h = _mm_or_si128(h, _mm_srli_si128(h, 8));
        h = _mm_or_si128(h, _mm_srli_si128(h, 4));
        __m128i z = _mm_add_epi32(_mm256_castsi256_si128(zc), _mm256_extracti128_si256(zc, 1));
        z = _mm_add_epi32(z, _mm_srli_si128(z, 8));
        z = _mm_add_epi32(z, _mm_srli_si128(z, 4));
        const int zero = (unsigned)_mm_cvtsi128_si32(z) != TWPF_BLOCK - e;
        *hchk = (uint32_t)_mm_cvtsi128_si32(h) | (zero ? 0x100u : 0u);
        return 0;
    }
    __m128i o = _mm_or_si128(_mm256_castsi256_si128(orv), _mm256_extracti128_si256(orv, 1));
    o = _mm_or_si128(o, _mm_srli_si128(o, 8));
    o = _mm_or_si128(o, _mm_srli_si128(o, 4));
    return (uint32_t)_mm_cvtsi128_si32(o);
}

#define TWPF_WIDTHS_0_31(X) X(0) TWPF_WIDTHS_1_31(X)

/* Full block at width b (0..31), patched from hb/bm when hb is not NULL (hb: the high parts and
 * 8 readable bytes past them); then *hchk = OR of the high parts (when b > 24), | 0x100 if one
 * was zero. */
__attribute__((target("avx2,popcnt")))
static inline uint32_t twpf_vunpack_avx2(const uint8_t *in, int32_t *out, unsigned b, const uint8_t *hb,
                                  const uint8_t *bmb, unsigned e, uint32_t *hchk) {
    if (hb) {
        switch (b) {
#define TWPF_CASE(B) case B: return twpf_vunpack_avx2_c(in, out, B, 1, hb, bmb, e, hchk);
            TWPF_WIDTHS_0_31(TWPF_CASE)
#undef TWPF_CASE
            default: return 0;
        }
    }
    switch (b) {
#define TWPF_CASE(B) case B: return twpf_vunpack_avx2_c(in, out, B, 0, hb, bmb, e, hchk);
        TWPF_WIDTHS_0_31(TWPF_CASE)
#undef TWPF_CASE
        default: return 0;
    }
}
#endif

#if TWPF_AVX2_SHUFFLES
/* A full block with exceptions at width B (0..31) with AVX-512 VBMI2: per half block (64 ids)
 * the high parts are loaded with a mask of exactly their count (no byte past them is read),
 * spread to their ids by one vpexpandb under the bitmap, and judged in that register (a zero
 * high part, or one of 32 - B bits or more, under the bitmap); the rows are twpf_row8's, each
 * ORed with its 8 high parts widened and shifted. *hchk: 0x100 if a high part was zero, 0xFF
 * if one was too wide. */
__attribute__((target("avx2"))) __attribute__((always_inline))
static inline void twpf_rows2_512(const uint8_t *in, int32_t *out, const unsigned B, const unsigned g0,
                                  const __m128i x16, __m256i *cur) {
    for (unsigned r = 0; r < 2; r++) {
        __m256i v = B ? twpf_row8(in, B, g0 + r, cur) : _mm256_setzero_si256();
        const __m256i h = _mm256_cvtepu8_epi32(r ? _mm_unpackhi_epi64(x16, x16) : x16);
        v = _mm256_or_si256(v, _mm256_slli_epi32(h, (int)B));
        _mm256_storeu_si256((__m256i *)(void *)(out + 8 * (g0 + r)), v);
    }
}

__attribute__((target(TWPF_T512))) __attribute__((always_inline))
static inline void twpf_vunpack_512_c(const uint8_t *in, int32_t *out, const unsigned B, const uint8_t *hb,
                                      uint64_t bm0, uint64_t bm1, uint32_t *hchk) {
    __m256i cur = _mm256_setzero_si256();
    __mmask64 zero = 0, wide = 0;
    unsigned c = 0;
    if (B) cur = twpf_word8(in, 0, B / 2);
    TWPF_UNROLL
    for (unsigned q = 0; q < 2; q++) {
        const uint64_t bm = q ? bm1 : bm0;
        const unsigned pop = (unsigned)_mm_popcnt_u64(bm);
        const __m512i x = _mm512_maskz_loadu_epi8((__mmask64)_bzhi_u64(~0ull, pop), hb + c);
        const __m512i ex = _mm512_maskz_expand_epi8((__mmask64)bm, x);
        zero |= _mm512_mask_cmpeq_epi8_mask((__mmask64)bm, ex, _mm512_setzero_si512());
        if (B > 24) wide |= _mm512_mask_cmpge_epu8_mask((__mmask64)bm, ex, _mm512_set1_epi8((char)(1u << (32 - B))));
        c += pop;
        /* the quarter index of an extract must be a literal (clang) */
        twpf_rows2_512(in, out, B, 8 * q + 0, _mm512_maskz_extracti32x4_epi32(0xF, ex, 0), &cur);
        twpf_rows2_512(in, out, B, 8 * q + 2, _mm512_maskz_extracti32x4_epi32(0xF, ex, 1), &cur);
        twpf_rows2_512(in, out, B, 8 * q + 4, _mm512_maskz_extracti32x4_epi32(0xF, ex, 2), &cur);
        twpf_rows2_512(in, out, B, 8 * q + 6, _mm512_maskz_extracti32x4_epi32(0xF, ex, 3), &cur);
    }
    *hchk = (zero ? 0x100u : 0u) | (wide ? 0xFFu : 0u);
}

__attribute__((target(TWPF_T512)))
static inline void twpf_vunpack_512(const uint8_t *in, int32_t *out, unsigned b, const uint8_t *hb,
                             uint64_t bm0, uint64_t bm1, uint32_t *hchk) {
    switch (b) {
#define TWPF_CASE(B) case B: twpf_vunpack_512_c(in, out, B, hb, bm0, bm1, hchk); return;
        TWPF_WIDTHS_0_31(TWPF_CASE)
#undef TWPF_CASE
        default: return;
    }
}
#endif

/* Whether any of hb[0..e) is zero, hb holding nonzero bytes from e on to the next multiple of
 * 16 (the caller fills 16 bytes of 0xFF past e). */
TW_INLINE int twpf_any_zero(const uint8_t *hb, unsigned e) {
#if TWPF_SSE2
    __m128i z = _mm_setzero_si128();
    for (unsigned k = 0; k < e; k += 16)
        z = _mm_or_si128(z, _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(const void *)(hb + k)), _mm_setzero_si128()));
    return _mm_movemask_epi8(z) != 0;
#else
    unsigned bad = 0;
    for (unsigned k = 0; k < e; k++) bad |= hb[k] == 0;
    return bad;
#endif
}

/* Once per process before the first encode or decode (CPU detection; idempotent). */
static inline void twpf_init(void) {
    twbp_init();
#if TWPF_AVX2_SHUFFLES
    twpf_have_512 = twbp_have_avx2 && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                    __builtin_cpu_supports("avx512vbmi2") && __builtin_cpu_supports("bmi2") &&
                    __builtin_cpu_supports("popcnt");
#endif
}

#define TWPF_FAIL(code, text, at)                                                               \
    do {                                                                                       \
        if (err) {                                                                             \
            err->msg = (text);                                                                 \
            err->offset = (at);                                                                \
        }                                                                                      \
        return (code);                                                                         \
    } while (0)

/* One block of m ids at *pp into d (m a constant for full blocks, so their sizes and branches
 * fold); moves *pp past it. */
TW_INLINE int twpf_decode_block(const uint8_t *src, size_t len, size_t *pp, const unsigned m, int32_t *d,
                                  twpf_error *err, const int AVX2, const int V512) {
    (void)V512;
    size_t p = *pp;
    const size_t at = p;
    if (p >= len) TWPF_FAIL(TWPF_E_TRUNCATED, "payload ends before a block", at);
    const unsigned hdr = src[p++];
    const unsigned b = hdr & ~TWPF_EXC_FLAG;
    const unsigned exc = hdr & TWPF_EXC_FLAG;
    if (b > 32) TWPF_FAIL(TWPF_E_WIDTH, "block width above 32", at);
    if (exc && b == 32) TWPF_FAIL(TWPF_E_EXCEPTIONS, "exceptions in a block of width 32", at);
    const size_t nbase = ((size_t)m * b + 7) / 8;
    if (len - p < nbase) TWPF_FAIL(TWPF_E_TRUNCATED, "payload ends inside a block's ids", at);
    const uint8_t *base = src + p;
    p += nbase;
    /* exceptions first (bitmap and high parts read once into locals and a stack copy, and
     * judged), so the ids are written in one pass */
    uint64_t bm0 = 0, bm1 = 0;
    uint8_t hb[TWPF_BLOCK + 16];
    const uint8_t *hp = hb;          /* where the AVX2 unpack reads the high parts */
    int direct = 0;
    (void)hp;
    size_t e = 0;
    if (exc) {
        const size_t nbm = (m + 7) / 8;
        if (len - p < nbm) TWPF_FAIL(TWPF_E_TRUNCATED, "payload ends inside a block's exception bitmap", at);
        if (m == TWPF_BLOCK) {
            bm0 = tw_load_le64(src + p);
            bm1 = tw_load_le64(src + p + 8);
        } else {
            for (unsigned k = 0; k < nbm; k++) {
                const uint64_t byte = src[p + k];
                if (k < 8) bm0 |= byte << (8 * k);
                else bm1 |= byte << (8 * (k - 8));
            }
            /* no bit at or past m (m < 128) */
            if (m <= 64 ? (bm1 || (m < 64 && (bm0 >> m))) : (bm1 >> (m - 64)) != 0)
                TWPF_FAIL(TWPF_E_POSITION, "exception bitmap marks an id past the block", p);
        }
        p += nbm;
        e = AVX2 ? (size_t)tw_popcount64(bm0) + tw_popcount64(bm1)
                 : (size_t)tw_popcount64_swar(bm0) + tw_popcount64_swar(bm1);
        if (e == 0) TWPF_FAIL(TWPF_E_EXCEPTIONS, "exception flag with an empty bitmap", at);
        if (len - p < e) TWPF_FAIL(TWPF_E_TRUNCATED, "payload ends inside a block's exceptions", at);
#if TWPF_AVX2_SHUFFLES
        /* the AVX2 unpack reads the high parts in place, judging each in the register it
         * applies (no copy, no second read); it loads 8 bytes at a time, so 8 must remain
         * (the AVX-512 one loads exactly e) */
        direct = AVX2 && m == TWPF_BLOCK && (V512 || len - p >= e + 8);
        if (direct) hp = src + p;
#endif
    }
    if (exc && !direct) {
        memcpy(hb, src + p, e);
        memset(hb + e, 0xFF, 16);        /* never spread: only e bits are set in the bitmap */
        if (twpf_any_zero(hb, (unsigned)e))
            TWPF_FAIL(TWPF_E_NONCANONICAL, "exception with a zero high part", at);
        if (b > 24) {
            unsigned orh = 0;
            for (size_t k = 0; k < e; k++) orh |= hb[k];
            if (orh >> (32 - b))
                TWPF_FAIL(TWPF_E_EXCEPTIONS, "exception high part wider than 32 bits minus the block width", at);
        }
    }
    p += e;
    uint32_t orv = 0;
    int patched = 0;
    if (m == TWPF_BLOCK) {
#if TWPF_AVX2_SHUFFLES
        if (AVX2 && b < 32) {
            uint32_t hchk = 0;
            if (V512 && direct) {
                twpf_vunpack_512(base, d, b, hp, bm0, bm1, &hchk);
            } else {
                uint8_t bmb[16];
                tw_store_le64(bmb, bm0);
                tw_store_le64(bmb + 8, bm1);
                orv = twpf_vunpack_avx2(base, d, b, exc ? hp : NULL, bmb, (unsigned)e, &hchk);
            }
            patched = 1;
            if (direct) {
                if (hchk & 0x100u) TWPF_FAIL(TWPF_E_NONCANONICAL, "exception with a zero high part", at);
                if (b > 24 && ((hchk & 0xFFu) >> (32 - b)))
                    TWPF_FAIL(TWPF_E_EXCEPTIONS, "exception high part wider than 32 bits minus the block width", at);
            }
        } else
#endif
            orv = twpf_vunpack(base, d, b);
    } else if (b == 0) {
        memset(d, 0, 4 * (size_t)m);
    } else if (b == 32) {
        for (unsigned i = 0; i < m; i++) {
            const uint32_t v = tw_load_le32(base + 4 * (size_t)i);
            orv |= v;
            d[i] = (int32_t)v;
        }
    } else {
        const unsigned used = (m * b) & 7;
        /* the last byte read once, before the ids: the padding check cannot race the unpack */
        const unsigned last = base[nbase - 1];
        if (used && (last >> used))
            TWPF_FAIL(TWPF_E_PADDING, "nonzero padding bits after a block's ids", (size_t)(base - src) + nbase - 1);
        twbp_unpack(base, nbase, 0, d, m, b);
        if (!exc) orv = twbp_or_all(d, m);
    }
    if (!exc) {
        if (b && !(orv >> (b - 1)))
            TWPF_FAIL(TWPF_E_NONCANONICAL, "block width larger than its largest id needs", at);
        *pp = p;
        return TWPF_OK;
    }
    if (!patched) {
        twpf_patch_c(d, hb, bm0, bm1, b);
    }
    *pp = p;
    return TWPF_OK;
}

/* Where decoded ids go: nparts arrays, part k taking count[k] ids at dst[k] (the counts add up
 * to the payload's n); `k` and `at` (ids written to part k) advance as blocks are decoded. */
typedef struct {
    int32_t *const *dst;
    const size_t *count;
    size_t k, at;
} twpf_parts;

/* One block of m ids into the parts: in place when it lies in part k (the common case), else
 * (a block running across parts: blocks cross sequence boundaries) through a stack buffer,
 * split from there. Parts that are full, empty ones included, are skipped first. */
TW_INLINE int twpf_decode_to_parts(const uint8_t *src, size_t len, size_t *pp, const unsigned m,
                                     twpf_parts *o, twpf_error *err, const int AVX2, const int V512) {
    int32_t tmp[TWPF_BLOCK];
    int rc;
    while (o->at == o->count[o->k]) {
        o->k++;
        o->at = 0;
    }
    if (o->count[o->k] - o->at >= m) {
        rc = twpf_decode_block(src, len, pp, m, o->dst[o->k] + o->at, err, AVX2, V512);
        o->at += m;
        return rc;
    }
    if ((rc = twpf_decode_block(src, len, pp, m, tmp, err, AVX2, V512)) != TWPF_OK) return rc;
    for (size_t i = 0; i < m;) {
        while (o->at == o->count[o->k]) {
            o->k++;
            o->at = 0;
        }
        size_t take = o->count[o->k] - o->at;
        if (take > m - i) take = m - i;
        memcpy(o->dst[o->k] + o->at, tmp + i, 4 * take);
        o->at += take;
        i += take;
    }
    return TWPF_OK;
}

/* twpf_decode_parts' body, instantiated three times: with AVX-512 VBMI2 (V512, the high parts
 * spread by vpexpandb), with AVX2 (the run-time AVX2 paths and the popcnt instruction) and
 * without. */
TW_INLINE int twpf_decode_body(const uint8_t *src, size_t len, int32_t *const *dst, const size_t *count,
                                 size_t n, twpf_error *err, const int AVX2, const int V512) {
    size_t p = 0, s = 0;
    twpf_parts o = {dst, count, 0, 0};
    int rc;
    if (err) {
        err->msg = NULL;
        err->offset = 0;
    }
    if (len < twpf_min_size(n))
        TWPF_FAIL(TWPF_E_TRUNCATED, "payload too short for its id count", len);
    for (; s + TWPF_BLOCK <= n; s += TWPF_BLOCK)
        if ((rc = twpf_decode_to_parts(src, len, &p, TWPF_BLOCK, &o, err, AVX2, V512)) != TWPF_OK) return rc;
    if (s < n && (rc = twpf_decode_to_parts(src, len, &p, (unsigned)(n - s), &o, err, AVX2, V512)) != TWPF_OK)
        return rc;
    if (p != len) TWPF_FAIL(TWPF_E_TRAILING, "bytes after the last block", p);
    return TWPF_OK;
}

#if TWPF_AVX2_SHUFFLES
__attribute__((target("avx2,popcnt")))
static inline int twpf_decode_avx2(const uint8_t *src, size_t len, int32_t *const *dst, const size_t *count,
                            size_t n, twpf_error *err) {
    return twpf_decode_body(src, len, dst, count, n, err, 1, 0);
}

__attribute__((target(TWPF_T512)))
static inline int twpf_decode_512(const uint8_t *src, size_t len, int32_t *const *dst, const size_t *count,
                           size_t n, twpf_error *err) {
    return twpf_decode_body(src, len, dst, count, n, err, 1, 1);
}
#endif

/* Decode a payload of len bytes holding n ids (both from a checked header) into parts: part k
 * gets count[k] ids at dst[k], in order; the counts must add up to n (the caller's checked count
 * table: a frame's blocks run across its sequences, and each sequence is decoded straight into
 * its own array). Reads only src[0..len), every field once into a local before use; writes only
 * the parts' ids (and a 128-id stack buffer); on error returns a TWPF_E_* code with err set, the
 * parts then hold garbage. Any byte string gives either TWPF_OK or an error, never UB. */
static inline int twpf_decode_parts(const uint8_t *src, size_t len, int32_t *const *dst, const size_t *count,
                             size_t n, twpf_error *err) {
#if TWPF_AVX2_SHUFFLES
    if (twpf_have_512) return twpf_decode_512(src, len, dst, count, n, err);
    if (twbp_have_avx2) return twpf_decode_avx2(src, len, dst, count, n, err);
#endif
    return twpf_decode_body(src, len, dst, count, n, err, 0, 0);
}

/* twpf_decode_parts into one array: dst[0..n). */
static inline int twpf_decode(const uint8_t *src, size_t len, int32_t *dst, size_t n, twpf_error *err) {
    return twpf_decode_parts(src, len, &dst, &n, n, err);
}

#undef TWPF_FAIL

#endif /* TOKENWIRE_PFOR_H */
