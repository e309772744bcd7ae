/* Checks of an untrusted frame that the Python extension (tokenwire/_frame.pxd, used by
 * _wire.pxi) and the C++ header (wire.hpp) share: one implementation, one text per message.
 *
 *   - the magic bytes (TW_MAGIC) and the codec table: name, wire id (its index), the widths a
 *     frame may declare for it and the ids it holds; every list of codec names (Python's
 *     tokenwire.CODECS, FrameInfo.codec, C++'s FrameInfo, the messages below) and the
 *     encoder's choice (encode.h) are read from here. A payload is `width` bits per id for every
 *     fixed-width codec (raw: 32, u16: 16), so its size is one formula (tw_payload_size); the
 *     variable-size codec (pfor: width byte 0) carries its payload's size in a length prefix,
 *     as a zstd section does (TW_CODEC_PREFIXED). Adding a codec is an entry here and its case
 *     in each of payload.h's switches (the kernels that write and read it); beyond C, only what
 *     cannot read a C table names codecs: C++'s tokenwire::Codec, the Literal types of
 *     _core.pyi, and docs/wire-format.md;
 *   - tw_check_codec_width: the header's codec and width bytes against that table;
 *   - tw_parse_prefix / tw_parse_rest: the header, the count table and the zstd length prefix
 *     (everything frame_info needs), in two steps so that a caller whose memory may change can
 *     copy the count table in between (the decoder then never reads the frame's table again);
 *   - tw_check_frame: the checks of a whole frame (sizes, trailing bytes, checksum, padding);
 *   - tw_zstd_frame_size: the walk over a zstd frame's headers (RFC 8878, 3.1.1).
 *
 * (The encoder's rules and its frame writer, which read the same table, are in encode.h.)
 *
 * A check returns 0 (or a size) when the input passes; otherwise -1, with the message (exactly
 * the text of WireFormatError / tokenwire::wire_format_error, docs/wire-format.md) written into
 * the caller's buffer of TW_MSG_SIZE bytes. Nothing here allocates or reads past `n`.
 */
#ifndef TOKENWIRE_FRAME_H
#define TOKENWIRE_FRAME_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "byteorder.h"
#include "crc32c.h"
#include "pfor.h"

#define TW_MSG_SIZE 256

/* The 4 bytes every frame starts with ("TWIR": tokenwire). */
#define TW_MAGIC "TWIR"
#define TW_MAGIC_SIZE 4u

/* ---- the codec table --------------------------------------------------------------------- */

typedef struct {
    const char *name;
    unsigned min_width, max_width;     /* the width byte a frame of this codec may carry */
    int64_t min_id, max_id;            /* the ids the codec holds (max_id: 2**k - 1; encode.h's
                                          tw_codec_width and auto's choice read these) */
    const char *id_range;              /* the same, as the messages print it */
} tw_codec_info;

/* In table order, which is also auto's tie-break order among the fixed-width codecs (fastest to
 * decode first). pfor (a width per block of 128 ids, exceptions patched; pfor.h) has
 * no single width: its width byte is 0 and its payload size is in the frame (a length prefix). */
enum { TW_CODEC_RAW = 0, TW_CODEC_U16 = 1, TW_CODEC_PACKED = 2, TW_CODEC_PFOR = 3, TW_NCODECS = 4 };

static const tw_codec_info tw_codecs[TW_NCODECS] = {
    {"raw", 32, 32, INT32_MIN, INT32_MAX, "[-2147483648, 2147483647]"},
    {"u16", 16, 16, 0, 65535, "[0, 65536)"},
    {"packed", 1, 31, 0, INT32_MAX, "[0, 2147483647]"},
    {"pfor", 0, 0, INT32_MIN, INT32_MAX, "[-2147483648, 2147483647]"},
};

/* Whether a codec's payload size varies with the ids (pfor): its payload region is then a uint64
 * length L and L bytes, and its width byte is 0. */
#define TW_CODEC_PREFIXED(codec) ((codec) == TW_CODEC_PFOR)

/* The header's codec and width bytes. */
static inline int tw_check_codec_width(unsigned codec, unsigned width, char *msg, size_t cap) {
    if (codec >= TW_NCODECS) {
        int len = snprintf(msg, cap, "unknown codec %u (known:", codec);
        for (unsigned c = 0; c < TW_NCODECS && len > 0 && (size_t)len < cap; c++)
            len += snprintf(msg + len, cap - (size_t)len, "%s %u %s", c ? "," : "", c,
                            tw_codecs[c].name);
        if (len > 0 && (size_t)len < cap) snprintf(msg + len, cap - (size_t)len, ")");
        return -1;
    }
    const tw_codec_info *info = &tw_codecs[codec];
    if (width < info->min_width || width > info->max_width) {
        if (info->min_width == info->max_width)
            snprintf(msg, cap, "bad width %u for codec '%s' (must be %u)", width, info->name,
                     info->min_width);
        else
            snprintf(msg, cap, "bad width %u for codec '%s' (must be %u..%u)", width, info->name,
                     info->min_width, info->max_width);
        return -1;
    }
    return 0;
}

/* ---- the header and the count table ----------------------------------------------------- */

#define TW_WIRE_VERSION 1u
#define TW_HEADER_SIZE 16u
#define TW_CHECKSUM_SIZE 4u
#define TW_ZSTD_LENGTH_SIZE 8u
#define TW_FLAG_CHECKSUM 0x01u
#define TW_FLAG_MULTI 0x02u
#define TW_FLAG_ZSTD 0x04u
#define TW_FLAG_RESERVED 0xF8u
/* pfor frames reserve the ZSTD bit too (a pfor payload is not compressed further). */
#define TW_FLAG_RESERVED_PFOR (TW_FLAG_RESERVED | TW_FLAG_ZSTD)
/* A pfor payload's length prefix, like a zstd section's. */
#define TW_PFOR_LENGTH_SIZE 8u
/* A zstd payload may not decompress to more than this many times its compressed size. */
#define TW_ZSTD_MAX_EXPANSION 64u
/* No count can be this large in a frame that fits in memory; bounding counts keeps every size
 * computation in 64-bit range (2**58 ids * 32 bits = 2**63 bits). */
#define TW_COUNT_LIMIT (UINT64_C(1) << 58)
/* Nor can a zstd section of this many bytes; the bound keeps 64 * C and the frame's size in
 * 64-bit range without comparing C with the bytes present (frame_info reads a prefix). */
#define TW_ZSTD_LENGTH_LIMIT (UINT64_C(1) << 58)

/* What a frame's header says. */
typedef struct {
    unsigned codec, width, flags;
    uint64_t nseq;             /* sequences (1 for a single-sequence frame) */
    uint64_t total;            /* ids over all sequences */
    size_t payload_off;        /* offset of the payload (after header and count table) */
    size_t payload_len;        /* decoded payload size, bytes */
    size_t stored_len;         /* bytes the payload takes in the frame (zstd: prefix + data) */
    size_t nbytes;             /* the whole frame, checksum included */
    /* The count table (nseq little-endian uint32s; NULL for a single-sequence frame): after
     * tw_parse_prefix it points into the frame; a caller may point it at its own copy of the
     * table (`counts_copy`, which it owns and frees; these functions never allocate) before
     * tw_parse_rest, and then reads the counts only from there. */
    const uint8_t *counts;
    uint8_t *counts_copy;
} tw_layout;

/* Exact sizes of absurd claims, for messages: a count table's sum and the bytes it would take
 * can pass 2**64 (a sum stays below 2**94, a size below 2**99). Two 64-bit halves, in plain C:
 * no compiler's 128-bit integer type is needed. */
typedef struct {
    uint64_t hi, lo;
} tw_u128;

static inline tw_u128 tw_u128_of(uint64_t v) {
    tw_u128 r;
    r.hi = 0;
    r.lo = v;
    return r;
}

static inline tw_u128 tw_u128_add(tw_u128 a, uint64_t b) {
    a.lo += b;
    a.hi += a.lo < b;
    return a;
}

/* a * m; the product must stay below 2**128 (the callers' values are below 2**99). */
static inline tw_u128 tw_u128_mul(tw_u128 a, uint32_t m) {
    const uint64_t p0 = (a.lo & 0xFFFFFFFFu) * m, p1 = (a.lo >> 32) * m;
    tw_u128 r;
    r.lo = p0 + (p1 << 32);
    r.hi = a.hi * m + (p1 >> 32) + (r.lo < p0);
    return r;
}

/* *a /= d (d > 0), returning the remainder: long division over 32-bit limbs. */
static inline uint32_t tw_u128_divmod(tw_u128 *a, uint32_t d) {
    uint32_t limb[4] = {(uint32_t)(a->hi >> 32), (uint32_t)a->hi, (uint32_t)(a->lo >> 32),
                        (uint32_t)a->lo};
    uint64_t rem = 0;
    for (int k = 0; k < 4; k++) {
        const uint64_t cur = rem << 32 | limb[k];
        limb[k] = (uint32_t)(cur / d);
        rem = cur % d;
    }
    a->hi = (uint64_t)limb[0] << 32 | limb[1];
    a->lo = (uint64_t)limb[2] << 32 | limb[3];
    return (uint32_t)rem;
}

static inline tw_u128 tw_u128_div(tw_u128 a, uint32_t d) {
    (void)tw_u128_divmod(&a, d);
    return a;
}

/* Decimal text of v (at most 39 digits) at out. */
static inline const char *tw_u128_str(tw_u128 v, char out[48]) {
    char *p = out + 47;
    *p = 0;
    do {
        *--p = (char)('0' + tw_u128_divmod(&v, 10));
    } while (v.hi | v.lo);
    return p;
}

/* repr() of a Python bytes object of n <= 4 bytes, at out (24 bytes suffice). */
static inline void tw_bytes_repr(const uint8_t *p, size_t n, char *out) {
    int has_single = 0, has_double = 0;
    for (size_t i = 0; i < n; i++) {
        has_single |= p[i] == '\'';
        has_double |= p[i] == '"';
    }
    const char quote = (has_single && !has_double) ? '"' : '\'';
    char *o = out;
    *o++ = 'b';
    *o++ = quote;
    for (size_t i = 0; i < n; i++) {
        const uint8_t c = p[i];
        if (c == (uint8_t)quote || c == '\\') {
            *o++ = '\\';
            *o++ = (char)c;
        } else if (c == '\t' || c == '\n' || c == '\r') {
            *o++ = '\\';
            *o++ = c == '\t' ? 't' : c == '\n' ? 'n' : 'r';
        } else if (c < 0x20 || c >= 0x7f) {
            o += sprintf(o, "\\x%02x", c);
        } else {
            *o++ = (char)c;
        }
    }
    *o++ = quote;
    *o = 0;
}

/* Step 1: magic, header size, version, codec and width, reserved flags, and whether the count
 * table fits in the n bytes present. Sets every field of L but the sums (total, payload_*,
 * stored_len, nbytes). 0, or -1 and a message. */
static inline int tw_parse_prefix(const uint8_t *buf, size_t n, tw_layout *L, char *msg,
                                  size_t cap) {
    char num[48], rep[24];
    L->counts = NULL;
    L->counts_copy = NULL;
    const size_t k = n >= TW_MAGIC_SIZE ? TW_MAGIC_SIZE : n;
    if (k != 0 && memcmp(buf, TW_MAGIC, k) != 0) {
        tw_bytes_repr(buf, k, rep);
        snprintf(msg, cap, "bad magic %s: not a tokenwire frame (expected b'" TW_MAGIC "')", rep);
        return -1;
    }
    if (n < TW_HEADER_SIZE) {
        snprintf(msg, cap, "truncated: header needs %u bytes, has %llu", TW_HEADER_SIZE,
                 (unsigned long long)n);
        return -1;
    }
    const unsigned version = buf[4], codec = buf[5], width = buf[6], flags = buf[7];
    if (version != TW_WIRE_VERSION) {
        snprintf(msg, cap, "unsupported version %u (this tokenwire reads version %u)", version,
                 TW_WIRE_VERSION);
        return -1;
    }
    if (tw_check_codec_width(codec, width, msg, cap) != 0) return -1;
    const unsigned reserved = codec == TW_CODEC_PFOR ? TW_FLAG_RESERVED_PFOR : TW_FLAG_RESERVED;
    if (flags & reserved) {
        snprintf(msg, cap, "reserved flag bits set: 0x%02x", flags & reserved);
        return -1;
    }
    const uint64_t count = tw_load_le64(buf + 8);
    L->codec = codec;
    L->width = width;
    L->flags = flags;
    if (flags & TW_FLAG_MULTI) {
        /* The table: `count` uint32 counts, zero-padded to a multiple of 8 bytes. */
        if (count > (n - TW_HEADER_SIZE) / 4 ||
            TW_HEADER_SIZE + (count * 4 + 7) / 8 * 8 > n) {
            /* (count * 4 + 7) / 8 * 8 = 4 * (count rounded up to even), past 2**64 */
            snprintf(msg, cap, "truncated: count table needs %s bytes, has %llu",
                     tw_u128_str(tw_u128_mul(tw_u128_add(tw_u128_of(count), count & 1), 4), num),
                     (unsigned long long)(n - TW_HEADER_SIZE));
            return -1;
        }
        L->nseq = count;
        L->counts = buf + TW_HEADER_SIZE;
    } else {
        L->nseq = 1;
        L->total = count;
    }
    return 0;
}

/* Payload bytes of `total` ids at `width` bits each: every fixed-width codec stores `width` bits
 * per id (raw 32, u16 16, packed 1..31), so this holds for all of them (total < 2**58, width <=
 * 32: no overflow). Not for pfor (TW_CODEC_PREFIXED): its size is in the frame. */
static inline size_t tw_payload_size(unsigned width, uint64_t total) {
    return (size_t)((total * width + 7) / 8);
}

/* Step 2: the sum of the counts (read from L->counts only), the table's padding, the size limit
 * and the zstd length prefix. Does not need the payload to be present (nor, for zstd, more than
 * the length prefix: frame_info works on a prefix of a frame). 0, or -1 and a message. */
static inline int tw_parse_rest(const uint8_t *buf, size_t n, tw_layout *L, char *msg, size_t cap) {
    char num[48];
    size_t off = TW_HEADER_SIZE;
    /* The exact number of ids: a table holds fewer than 2**62 entries (it is in the buffer),
     * each below 2**32, so the sum stays below 2**94 and never wraps. */
    tw_u128 total = tw_u128_of(L->total);
    if (L->flags & TW_FLAG_MULTI) {
        const size_t table_len = (size_t)((L->nseq * 4 + 7) / 8 * 8);
        total = tw_u128_of(0);
        for (uint64_t k = 0; k < L->nseq; k++)
            total = tw_u128_add(total, tw_load_le32(L->counts + 4 * k));
        for (size_t k = TW_HEADER_SIZE + (size_t)L->nseq * 4; k < TW_HEADER_SIZE + table_len; k++)
            if (buf[k] != 0) {
                snprintf(msg, cap, "nonzero padding byte at offset %llu, after the count table",
                         (unsigned long long)k);
                return -1;
            }
        off += table_len;
    }
    L->payload_off = off;
    const int prefixed = TW_CODEC_PREFIXED(L->codec);
    if (total.hi || total.lo >= TW_COUNT_LIMIT) {
        /* Cannot be in memory; say what it would need (exactly: the product can exceed 2**64;
         * pfor: its length prefix and the fewest bytes N ids take, one per block of 128).
         * Like every "truncated" message, "has" counts the bytes from where the part starts to
         * the end of the buffer (here the payload region, a checksum trailer's place included). */
        const tw_u128 need =
            prefixed ? tw_u128_add(tw_u128_div(tw_u128_add(total, TWPF_BLOCK - 1), TWPF_BLOCK),
                                   TW_PFOR_LENGTH_SIZE)
                     : tw_u128_div(tw_u128_add(tw_u128_mul(total, L->width), 7), 8);
        snprintf(msg, cap, "truncated: payload needs %s bytes, has %llu", tw_u128_str(need, num),
                 (unsigned long long)(n - off));
        return -1;
    }
    L->total = total.lo;
    if (prefixed) {
        /* The payload's size L (a uint64 before it), bounded as a zstd length is, then against
         * the sizes a pfor payload of N ids can take: at least twpf_min_size(N) (one byte per
         * block; so N <= 128 L: what the decoder allocates stays proportional to what it
         * received) and at most twpf_bound(N). */
        if (n - off < TW_PFOR_LENGTH_SIZE) {
            snprintf(msg, cap, "truncated: pfor length needs %u bytes, has %llu",
                     TW_PFOR_LENGTH_SIZE, (unsigned long long)(n - off));
            return -1;
        }
        const uint64_t plen = tw_load_le64(buf + off);
        if (plen >= TW_ZSTD_LENGTH_LIMIT) {
            snprintf(msg, cap, "truncated: pfor payload needs %llu bytes, has %llu",
                     (unsigned long long)plen,
                     (unsigned long long)(n - off - TW_PFOR_LENGTH_SIZE));
            return -1;
        }
        const uint64_t lo = twpf_min_size((size_t)L->total), hi = twpf_bound((size_t)L->total);
        if (plen < lo || plen > hi) {
            snprintf(msg, cap, "pfor payload of %llu bytes cannot hold %llu ids (it takes %llu "
                     "to %llu bytes)", (unsigned long long)plen, (unsigned long long)L->total,
                     (unsigned long long)lo, (unsigned long long)hi);
            return -1;
        }
        L->payload_len = (size_t)plen;
        L->stored_len = TW_PFOR_LENGTH_SIZE + (size_t)plen;
        L->nbytes = off + L->stored_len + ((L->flags & TW_FLAG_CHECKSUM) ? TW_CHECKSUM_SIZE : 0);
        return 0;
    }
    L->payload_len = tw_payload_size(L->width, L->total);
    if (L->flags & TW_FLAG_ZSTD) {
        if (n - off < TW_ZSTD_LENGTH_SIZE) {
            snprintf(msg, cap, "truncated: zstd length needs %u bytes, has %llu",
                     TW_ZSTD_LENGTH_SIZE, (unsigned long long)(n - off));
            return -1;
        }
        const uint64_t clen = tw_load_le64(buf + off);      /* compressed size */
        if (clen >= TW_ZSTD_LENGTH_LIMIT) {
            snprintf(msg, cap, "truncated: zstd payload needs %llu bytes, has %llu",
                     (unsigned long long)clen,
                     (unsigned long long)(n - off - TW_ZSTD_LENGTH_SIZE));
            return -1;
        }
        if (L->payload_len > clen * TW_ZSTD_MAX_EXPANSION) {
            snprintf(msg, cap,
                     "zstd payload of %llu bytes claims to expand to %llu bytes, more than the "
                     "%ux this decoder accepts",
                     (unsigned long long)clen, (unsigned long long)L->payload_len,
                     TW_ZSTD_MAX_EXPANSION);
            return -1;
        }
        L->stored_len = TW_ZSTD_LENGTH_SIZE + (size_t)clen;
    } else {
        L->stored_len = L->payload_len;
    }
    L->nbytes = off + L->stored_len + ((L->flags & TW_FLAG_CHECKSUM) ? TW_CHECKSUM_SIZE : 0);
    return 0;
}

/* A packed payload's unused high bits of the last byte must be 0: one frame per content. */
static inline int tw_check_padding_bits(const uint8_t *payload, const tw_layout *L, char *msg,
                                 size_t cap) {
    if (L->codec == TW_CODEC_PACKED && L->payload_len > 0) {
        const unsigned tail_bits = (unsigned)((L->total * L->width) & 7);
        if (tail_bits && (payload[L->payload_len - 1] >> tail_bits)) {
            snprintf(msg, cap, "nonzero padding bits after the last id of the packed payload");
            return -1;
        }
    }
    return 0;
}

#define TW_CHECKSUM_MISMATCH (-2)

/* The checks of a whole frame after tw_parse_rest: the payload and checksum are present, nothing
 * trails the frame, the checksum matches (else TW_CHECKSUM_MISMATCH and its message), and a
 * plain packed payload has zero padding bits (a zstd one is checked after decompression).
 * Pure C, no allocation: a caller may run it without the GIL. */
static inline int tw_check_frame(const uint8_t *buf, size_t n, const tw_layout *L, char *msg,
                          size_t cap) {
    const size_t trailer = (L->flags & TW_FLAG_CHECKSUM) ? TW_CHECKSUM_SIZE : 0;
    const size_t have = n - L->payload_off;
    const int zstd = (L->flags & TW_FLAG_ZSTD) != 0, pfor = TW_CODEC_PREFIXED(L->codec);
    if (have < L->stored_len) {
        /* tw_parse_rest saw the length prefix (zstd, pfor): have >= prefix. */
        const size_t prefix = zstd ? TW_ZSTD_LENGTH_SIZE : pfor ? TW_PFOR_LENGTH_SIZE : 0;
        snprintf(msg, cap, "truncated: %s needs %llu bytes, has %llu",
                 zstd ? "zstd payload" : pfor ? "pfor payload" : "payload",
                 (unsigned long long)(L->stored_len - prefix),
                 (unsigned long long)(have - prefix));
        return -1;
    }
    if (have < L->stored_len + trailer) {
        snprintf(msg, cap, "truncated: checksum needs %u bytes, has %llu", TW_CHECKSUM_SIZE,
                 (unsigned long long)(have - L->stored_len));
        return -1;
    }
    if (n > L->nbytes) {
        snprintf(msg, cap, "trailing bytes: the frame ends at byte %llu, the buffer has %llu "
                 "(%llu extra)", (unsigned long long)L->nbytes, (unsigned long long)n,
                 (unsigned long long)(n - L->nbytes));
        return -1;
    }
    if (trailer) {
        const uint32_t stored = tw_load_le32(buf + n - TW_CHECKSUM_SIZE);
        const uint32_t actual = tw_crc32c(buf, n - TW_CHECKSUM_SIZE);
        if (stored != actual) {
            snprintf(msg, cap, "checksum mismatch: the frame says 0x%08x, its contents give 0x%08x",
                     (unsigned)stored, (unsigned)actual);
            return TW_CHECKSUM_MISMATCH;
        }
    }
    if (!zstd) return tw_check_padding_bits(buf + L->payload_off, L, msg, cap);
    return 0;
}

/* The ids of a checked pfor frame (tw_check_frame passed) into nparts arrays: part k takes
 * count[k] ids at dst[k], the counts adding up to L->total (one part of L->total ids, or a
 * multi-sequence frame's checked table: each sequence decoded straight into its own array).
 * pfor.h's decoder over the L->payload_len bytes after the length prefix, which judges every
 * block (the payload rules of docs/wire-format.md, "pfor"). 0, or -1 and the message: the
 * kernel's text after "pfor payload is truncated at byte K: " (a block cut short) or "pfor
 * payload is corrupt at byte K: " (any other rule), K the frame offset of the block (or byte) at
 * fault. The parts then hold garbage: the caller discards them. Pure C, no allocation: runs
 * without the GIL. */
static inline int tw_decode_pfor(const uint8_t *buf, const tw_layout *L,
                                 int32_t *const *dst, const size_t *count, char *msg,
                                 size_t cap) {
    twpf_error err;
    const size_t at = L->payload_off + TW_PFOR_LENGTH_SIZE;
    const int r = twpf_decode_parts(buf + at, L->payload_len, dst, count, (size_t)L->total, &err);
    if (r == TWPF_OK) return 0;
    snprintf(msg, cap, "pfor payload is %s at byte %llu: %s",
             r == TWPF_E_TRUNCATED ? "truncated" : "corrupt",
             (unsigned long long)(at + err.offset), err.msg ? err.msg : "invalid");
    return -1;
}

/* ---- zstd frame walk --------------------------------------------------------------------- */

#define TW_ZSTD_MAGIC 0xFD2FB528u
#define TW_ZSTD_BLOCK_MAX (128u * 1024u)     /* no zstd block may be larger than this */

/* The size in bytes of the zstd frame at p (n bytes available), from its headers alone: nothing
 * is decompressed. It refuses, in this order (docs/wire-format.md, "The zstd walk"):
 *   - not the zstd magic over the first min(4, n) bytes; a frame header cut short; the reserved
 *     descriptor bit; a dictionary ID other than 0 (tokenwire frames use no dictionary); a
 *     Window_Descriptor exponent above 21 (a window of 2**32 bytes or more);
 *   - then block by block, K being the offset of the block's 3-byte header: a block header cut
 *     short; block type 3; a Block_Size above the block maximum min(Window_Size, 128 KiB) (for an
 *     RLE block Block_Size is what it regenerates); raw and RLE blocks regenerating more than
 *     payload_len in all; a block's stored bytes cut short; in a compressed block, literals
 *     above the block maximum and the sequences section's reserved mode bits (libzstd releases
 *     differ on those two: tokenwire decides them itself);
 *   - a content checksum cut short.
 * Window_Size is RFC 8878's: Frame_Content_Size for a single-segment frame, else from the
 * Window_Descriptor. Every rule libzstd releases disagree on that the headers can show is here,
 * so that the answer on those does not depend on the release (damaged compressed content is
 * libzstd's to judge: docs/wire-format.md, "Which frames libzstd decides"). -1 and a message
 * when refused. */
static inline int64_t tw_zstd_frame_size(const uint8_t *p, size_t n, uint64_t payload_len,
                                         char *msg, size_t cap) {
    static const size_t fcs_sizes[4] = {0, 2, 4, 8}, did_sizes[4] = {0, 1, 2, 4};
    static const uint8_t magic[4] = {0x28, 0xB5, 0x2F, 0xFD};
    if (n != 0 && memcmp(p, magic, n < 4 ? n : 4) != 0) {    /* p may be null when n is 0 */
        snprintf(msg, cap, "zstd payload is corrupt: it does not start with a zstd frame");
        return -1;
    }
    if (n < 5) {
        snprintf(msg, cap, "zstd payload is truncated: frame header needs 5 bytes, has %llu",
                 (unsigned long long)n);
        return -1;
    }
    const unsigned fhd = p[4];
    if (fhd & 0x08) {
        snprintf(msg, cap, "zstd payload is corrupt: reserved bit set in the frame header");
        return -1;
    }
    const int single = (fhd & 0x20) != 0;
    size_t fcs_len = fcs_sizes[fhd >> 6];
    if (fcs_len == 0 && single) fcs_len = 1;
    const size_t did_len = did_sizes[fhd & 3];
    const size_t header_len = 5 + (single ? 0 : 1) + did_len + fcs_len;
    if (n < header_len) {
        snprintf(msg, cap, "zstd payload is truncated: frame header needs %llu bytes, has %llu",
                 (unsigned long long)header_len, (unsigned long long)n);
        return -1;
    }
    size_t off = 5;
    uint64_t window;
    unsigned exponent = 0;     /* the Window_Descriptor's (0 for a single-segment frame) */
    if (!single) {
        const unsigned wd = p[off++];
        exponent = wd >> 3;
        const uint64_t base = UINT64_C(1) << (10 + (wd >> 3));
        window = base + (base / 8) * (wd & 7);
    } else {
        window = 0;     /* Frame_Content_Size, below */
    }
    uint64_t dict = 0;
    for (size_t i = 0; i < did_len; i++) dict |= (uint64_t)p[off + i] << (8 * i);
    off += did_len;
    if (dict != 0) {
        snprintf(msg, cap, "zstd payload is corrupt: the frame needs dictionary %llu "
                 "(tokenwire frames use none)", (unsigned long long)dict);
        return -1;
    }
    /* A window of 2**32 bytes or more (exponent 22 and up) is refused here rather than left to
     * libzstd, so that every decoder refuses it alike, whatever its libzstd's largest window;
     * the text is libzstd's own for a frame header it cannot read. */
    if (exponent > 21) {
        snprintf(msg, cap, "zstd payload is corrupt: error when determining content size");
        return -1;
    }
    if (single) {
        uint64_t fcs = 0;
        for (size_t i = 0; i < fcs_len; i++) fcs |= (uint64_t)p[off + i] << (8 * i);
        if (fcs_len == 2) fcs += 256;
        window = fcs;
    }
    off += fcs_len;
    const uint64_t block_max = window < TW_ZSTD_BLOCK_MAX ? window : TW_ZSTD_BLOCK_MAX;
    uint64_t regenerated = 0;
    for (;;) {
        const size_t at = off;     /* K: the block header's offset */
        if (n - off < 3) {
            snprintf(msg, cap, "zstd payload is truncated: block header at byte %llu of %llu",
                     (unsigned long long)at, (unsigned long long)n);
            return -1;
        }
        const uint32_t bh = (uint32_t)p[off] | ((uint32_t)p[off + 1] << 8) |
                            ((uint32_t)p[off + 2] << 16);
        off += 3;
        const unsigned btype = (bh >> 1) & 3;
        const uint32_t size = bh >> 3;
        if (btype == 3) {
            snprintf(msg, cap, "zstd payload is corrupt: reserved block type at byte %llu",
                     (unsigned long long)at);
            return -1;
        }
        if (size > block_max) {
            snprintf(msg, cap,
                     "zstd payload is corrupt: a block of %lu bytes at byte %llu, above the block "
                     "maximum of %llu bytes", (unsigned long)size, (unsigned long long)at,
                     (unsigned long long)block_max);
            return -1;
        }
        if (btype <= 1) {
            regenerated += size;
            if (regenerated > payload_len) {
                snprintf(msg, cap,
                         "zstd payload regenerates more than the %llu bytes the header needs "
                         "(block at byte %llu)",
                         (unsigned long long)payload_len, (unsigned long long)at);
                return -1;
            }
        }
        const size_t stored = btype == 1 ? 1 : size;
        if (n - off < stored) {
            snprintf(msg, cap,
                     "zstd payload is truncated: a block needs %llu bytes at byte %llu, has %llu",
                     (unsigned long long)stored, (unsigned long long)at,
                     (unsigned long long)(n - off));
            return -1;
        }
        if (btype == 2 && size >= 1) {
            /* Compressed block (RFC 8878 3.1.1.3): the literals section header gives how many
             * literals the block holds and where the sequences section starts. */
            const uint8_t *b = p + off;
            const unsigned ltype = b[0] & 3, sf = (b[0] >> 2) & 3;
            size_t lh = 0;
            uint64_t lit = 0, lit_stored = 0;
            if (ltype <= 1) {                          /* raw or RLE literals */
                lh = sf == 1 ? 2 : sf == 3 ? 3 : 1;
                if (size >= lh) {
                    const uint32_t v = (uint32_t)b[0] | (lh > 1 ? (uint32_t)b[1] << 8 : 0) |
                                       (lh > 2 ? (uint32_t)b[2] << 16 : 0);
                    lit = lh == 1 ? v >> 3 : v >> 4;
                    lit_stored = ltype == 0 ? lit : 1;
                }
            } else {                                   /* compressed or treeless literals */
                lh = sf <= 1 ? 3 : sf == 2 ? 4 : 5;
                if (size >= lh) {
                    uint64_t v = 0;
                    for (size_t i = 0; i < lh; i++) v |= (uint64_t)b[i] << (8 * i);
                    const unsigned bits = sf <= 1 ? 10 : sf == 2 ? 14 : 18;
                    lit = (v >> 4) & ((UINT64_C(1) << bits) - 1);
                    lit_stored = v >> (4 + bits);
                }
            }
            if (size >= lh && lit > block_max) {
                snprintf(msg, cap,
                         "zstd payload is corrupt: %llu literals in the block at byte %llu, above "
                         "the block maximum of %llu bytes", (unsigned long long)lit,
                         (unsigned long long)at, (unsigned long long)block_max);
                return -1;
            }
            /* The sequences section header: Number_of_Sequences (1-3 bytes), then, when it is
             * not 0, Symbol_Compression_Modes whose 2 low bits are reserved (must be 0). */
            const uint64_t seq = (uint64_t)lh + lit_stored;
            if (size >= lh && seq < size) {
                const uint8_t *s = b + seq;
                const size_t left = size - (size_t)seq;
                const size_t nlen = s[0] < 128 ? 1 : s[0] < 255 ? 2 : 3;
                if (s[0] != 0 && left > nlen && (s[nlen] & 3) != 0) {
                    snprintf(msg, cap,
                             "zstd payload is corrupt: reserved bits set in the sequences "
                             "section of the block at byte %llu", (unsigned long long)at);
                    return -1;
                }
            }
        }
        off += stored;
        if (bh & 1) break;
    }
    if (fhd & 0x04) {
        if (n - off < 4) {
            snprintf(msg, cap, "zstd payload is truncated: content checksum needs 4 bytes, has %llu",
                     (unsigned long long)(n - off));
            return -1;
        }
        off += 4;
    }
    return (int64_t)off;
}

#endif /* TOKENWIRE_FRAME_H */
