/* The encoder, shared by the Python extension (tokenwire/_frame.pxd, used by _wire.pxi) and the
 * C++ header (wire.hpp), read from the codec table of frame.h: the codec choice (tw_choose_codec:
 * auto's choice, what a forced codec can hold), the error of a forced codec that cannot hold an
 * id (tw_codec_misfit), and the one frame writer, in two steps so that each language allocates
 * the frame itself (Python a bytes object, C++ a vector):
 *
 *     tw_plan_frame    the codec, width, flags and every size (plan.nbytes: the whole frame;
 *                      for pfor the most it can take, twpf_bound of the ids);
 *     tw_zstd_codec    (codec="zstd" only) the codec whose payload is compressed: u16 when it
 *                      holds every id, else raw (byte-aligned, so that zstd finds the repeats);
 *     tw_plan_zstd     (codec="zstd" only) whether a zstd section of C bytes replaces auto's
 *                      plain payload, and the codec and sizes if so;
 *     tw_write_frame   header, count table, payload (or length prefix and zstd section, or
 *                      length prefix and pfor payload) and checksum into the caller's buffer
 *                      of plan.nbytes bytes; returns the frame's size (pfor: at most that,
 *                      the caller shrinks its buffer to it).
 *
 * zstd compression itself stays with each language (Python's zstandard, libzstd in C++); the
 * framing around it is here. Kept apart from frame.h, which holds only what a decoder checks
 * (tests/test_wire_fixtures.py scans frame.h for the decoder's messages).
 */
#ifndef TOKENWIRE_ENCODE_H
#define TOKENWIRE_ENCODE_H

#include "frame.h"
#include "payload.h"

/* ---- the encoder's rules ------------------------------------------------------------------ */

/* Requests that are not wire codecs (a wire codec is requested by its id): encode's
 * codec="auto", and codec="zstd" (the ids zstd-compressed in a byte-aligned codec when that is
 * smaller than auto's payload, else auto's frame). */
enum { TW_REQUEST_AUTO = 0x100, TW_REQUEST_ZSTD = 0x101 };

/* The zstd level codec="zstd" compresses at, in every language (Python's zstandard, libzstd in
 * C++): level 1 over the byte-aligned payload is smaller than level 3 over the packed one and
 * about twice as fast (docs/benchmarks.md). */
enum { TW_ZSTD_LEVEL = 1 };

static inline unsigned tw_bit_length(uint32_t v) {
    unsigned w = 0;
    while (v) {
        w++;
        v >>= 1;
    }
    return w;
}

/* The width codec `c` of the table would code ids whose bitwise OR is `orv` at, or -1 when it
 * cannot hold them: a negative id (the sign bit of orv) needs min_id < 0; otherwise the largest
 * id is at most max_id exactly when orv is (every max_id is 2**k - 1). A codec of one width
 * uses it; a variable-width one the bit length of orv (that of the largest id), at least 1. */
static inline int tw_codec_width(unsigned c, uint32_t orv) {
    const tw_codec_info *info = &tw_codecs[c];
    if ((orv >> 31) ? info->min_id >= 0 : (int64_t)orv > info->max_id) return -1;
    if (info->min_width == info->max_width) return (int)info->min_width;
    const unsigned w = orv == 0 ? 1 : tw_bit_length(orv);
    return w < info->min_width ? (int)info->min_width : (int)w;
}

/* The wire codec (and *width) for ids whose bitwise OR is `orv`, `total` of them (the rule of
 * docs/wire-format.md), read from the codec table alone: a forced codec (a wire id) as asked,
 * or -1 when it cannot hold the ids (tw_codec_misfit names the first that does not fit); any
 * other request (TW_REQUEST_AUTO, TW_REQUEST_ZSTD) auto: of the fixed-width codecs that hold
 * the ids, the smallest payload, on a tie the earlier in the table (raw, u16, packed: fastest
 * first). Auto never gives pfor (a prefixed codec), which is asked for: docs/wire-format.md,
 * "codec=auto", says why. (TW_REQUEST_ZSTD plans auto's plain fixed-width frame, which
 * tw_plan_zstd may then replace.) */
static inline int tw_choose_codec(unsigned request, uint32_t orv, uint64_t total, unsigned *width) {
    if (request < TW_NCODECS) {
        const int w = tw_codec_width(request, orv);
        if (w < 0) return -1;
        *width = (unsigned)w;
        return (int)request;
    }
    int best = -1;
    size_t best_size = 0;
    for (unsigned c = 0; c < TW_NCODECS; c++) {
        if (TW_CODEC_PREFIXED(c)) continue;
        const int w = tw_codec_width(c, orv);
        if (w < 0) continue;
        const size_t size = tw_payload_size((unsigned)w, total);
        if (best < 0 || size < best_size) {
            best = (int)c;
            best_size = size;
            *width = (unsigned)w;
        }
    }
    return best;      /* raw holds every int32 */
}

/* The first of n ids at `ids` (any alignment) that `codec` cannot hold, or -1. When found, the
 * message: "codec 'u16' needs ids in [0, 65536); [sequence K: ]id at index I is V" (seq < 0: no
 * sequence part). */
static inline int64_t tw_codec_misfit(unsigned codec, const int32_t *ids, size_t n, int64_t seq,
                               char *msg, size_t cap) {
    const tw_codec_info *info = &tw_codecs[codec];
    for (size_t i = 0; i < n; i++) {
        int32_t v;
        memcpy(&v, (const uint8_t *)ids + 4 * i, 4);
        if (v < info->min_id || v > info->max_id) {
            char where[48] = "";
            if (seq >= 0) snprintf(where, sizeof where, "sequence %lld: ", (long long)seq);
            snprintf(msg, cap, "codec '%s' needs ids in %s; %sid at index %llu is %ld", info->name,
                     info->id_range, where, (unsigned long long)i, (long)v);
            return (int64_t)i;
        }
    }
    return -1;
}

/* The bitwise OR of every id of `nseq` sequences (its sign bit: some id is negative). */
static inline uint32_t tw_seqs_or(const tw_seq *seqs, size_t nseq) {
    uint32_t orv = 0;
    for (size_t k = 0; k < nseq; k++)
        if (seqs[k].n) orv |= twbp_or_all(seqs[k].ids, seqs[k].n);
    return orv;
}

/* ---- the frame writer --------------------------------------------------------------------- */

/* What tw_write_frame writes: every field the header, the sizes and the allocation need. */
typedef struct {
    unsigned codec, width, flags;
    uint64_t count;          /* the header's count: the ids, or (MULTI) the sequences */
    uint64_t total;          /* the ids, of every sequence */
    size_t nseq;             /* sequences the table lists (MULTI) */
    size_t table_len;        /* the count table, zero-padded to a multiple of 8 (MULTI), else 0 */
    size_t payload_off;      /* 16 + table_len */
    size_t payload_len;      /* P: the plain payload (pfor: at most this, twpf_bound) */
    size_t stored_len;       /* the payload region: P, or with ZSTD 8 + C, pfor 8 + P */
    size_t nbytes;           /* the whole frame, checksum included: what the caller allocates
                                (pfor: the most it can take; tw_write_frame says the size) */
} tw_frame_plan;

/* Plan the frame of `nseq` sequences holding `total` ids whose bitwise OR is `orv` (MULTI when
 * `multi`: encode_many's frame, even of one sequence). The codec and width as tw_choose_codec
 * says; the payload stored plain (tw_plan_zstd may change that). 0, or -1 when a forced codec
 * cannot hold the ids (then tw_codec_misfit names the first). */
static inline int tw_plan_frame(tw_frame_plan *P, unsigned request, uint32_t orv, uint64_t total,
                         size_t nseq, int multi, int checksum) {
    const int codec = tw_choose_codec(request, orv, total, &P->width);
    if (codec < 0) return -1;
    P->codec = (unsigned)codec;
    P->flags = (multi ? TW_FLAG_MULTI : 0u) | (checksum ? TW_FLAG_CHECKSUM : 0u);
    P->count = multi ? (uint64_t)nseq : total;
    P->total = total;
    P->nseq = multi ? nseq : 0;
    P->table_len = multi ? (nseq * 4 + 7) / 8 * 8 : 0;
    P->payload_off = TW_HEADER_SIZE + P->table_len;
    if (TW_CODEC_PREFIXED(P->codec)) {
        P->payload_len = twpf_bound((size_t)total);
        P->stored_len = TW_PFOR_LENGTH_SIZE + P->payload_len;
    } else {
        P->payload_len = tw_payload_size(P->width, total);
        P->stored_len = P->payload_len;
    }
    P->nbytes = P->payload_off + P->stored_len + (checksum ? TW_CHECKSUM_SIZE : 0u);
    return 0;
}

/* The codec (and *width) whose payload codec="zstd" compresses, for ids whose bitwise OR is
 * `orv`: u16 when it holds every id, else raw. Byte-aligned on purpose: a repeated run of ids
 * is a repeated run of bytes there, which zstd matches; bit-packing shifts each id by a
 * different bit offset and hides most repeats (zstd over packed is larger, and slower). */
static inline unsigned tw_zstd_codec(uint32_t orv, unsigned *width) {
    const int w = tw_codec_width(TW_CODEC_U16, orv);
    if (w >= 0) {
        *width = (unsigned)w;
        return TW_CODEC_U16;
    }
    *width = (unsigned)tw_codec_width(TW_CODEC_RAW, orv);
    return TW_CODEC_RAW;
}

/* What tw_plan_zstd decided. */
enum {
    TW_ZSTD_PLAIN = 0,   /* auto's plain frame: the plan unchanged */
    TW_ZSTD_KEPT = 1,    /* the zstd section replaces the payload: codec, width, sizes set */
    TW_ZSTD_RETRY = 2    /* expands more than a decoder accepts: compress auto's payload (the
                            plan's codec and width) and ask again */
};

/* The encoder's zstd rule, for `P` planned as auto's plain frame (tw_plan_frame with
 * TW_REQUEST_ZSTD) and a zstd section of `clen` bytes compressing the payload of `codec` at
 * `width` (Q bytes; tw_zstd_codec's choice, or on a retry the plan's own). The section is kept
 * only when it saves bytes over auto's plain payload of P bytes, the 8-byte length prefix
 * counted (8 + C < P), and a decoder accepts its expansion (Q <= 64 C). When only the
 * expansion fails and `codec` is not already auto's, TW_ZSTD_RETRY: auto's payload is smaller,
 * so its section may pass. */
static inline int tw_plan_zstd(tw_frame_plan *P, unsigned codec, unsigned width, size_t clen) {
    const size_t qlen = tw_payload_size(width, P->total);
    if (!(clen + TW_ZSTD_LENGTH_SIZE < P->payload_len)) return TW_ZSTD_PLAIN;
    if (qlen > clen * TW_ZSTD_MAX_EXPANSION)
        return (codec == P->codec && width == P->width) ? TW_ZSTD_PLAIN : TW_ZSTD_RETRY;
    P->codec = codec;
    P->width = width;
    P->payload_len = qlen;
    P->flags |= TW_FLAG_ZSTD;
    P->stored_len = TW_ZSTD_LENGTH_SIZE + clen;
    P->nbytes = P->payload_off + P->stored_len +
                ((P->flags & TW_FLAG_CHECKSUM) ? TW_CHECKSUM_SIZE : 0u);
    return TW_ZSTD_KEPT;
}

/* The frame `P` plans into out (P->nbytes bytes): header, count table (the lengths of `seqs`),
 * the payload region and the checksum. The payload region is written from the ids when
 * `section` is NULL; otherwise it is copied from `section`: with the ZSTD flag the C compressed
 * bytes (the length prefix is written here), else the P bytes of the plain payload. A pfor
 * payload is written from the ids after its length prefix, which then gets its size. Returns
 * the frame's size: P->nbytes, or for pfor what the payload took (at most P->nbytes). */
static inline size_t tw_write_frame(uint8_t *out, const tw_frame_plan *P, const tw_seq *seqs,
                             size_t nseq, const uint8_t *section) {
    memcpy(out, TW_MAGIC, TW_MAGIC_SIZE);
    out[4] = (uint8_t)TW_WIRE_VERSION;
    out[5] = (uint8_t)P->codec;
    out[6] = (uint8_t)P->width;
    out[7] = (uint8_t)P->flags;
    tw_store_le64(out + 8, P->count);
    if (P->flags & TW_FLAG_MULTI) {
        memset(out + TW_HEADER_SIZE, 0, P->table_len);
        for (size_t k = 0; k < P->nseq; k++)
            tw_store_le32(out + TW_HEADER_SIZE + 4 * k, (uint32_t)seqs[k].n);
    }
    uint8_t *region = out + P->payload_off;
    size_t stored = P->stored_len;
    if (TW_CODEC_PREFIXED(P->codec)) {
        const size_t plen = tw_write_payload(region + TW_PFOR_LENGTH_SIZE, seqs, nseq, P->codec,
                                             P->width);
        tw_store_le64(region, (uint64_t)plen);
        stored = TW_PFOR_LENGTH_SIZE + plen;
    } else if (section == NULL) {
        tw_write_payload(region, seqs, nseq, P->codec, P->width);
    } else if (P->flags & TW_FLAG_ZSTD) {
        tw_store_le64(region, (uint64_t)(P->stored_len - TW_ZSTD_LENGTH_SIZE));
        memcpy(region + TW_ZSTD_LENGTH_SIZE, section, P->stored_len - TW_ZSTD_LENGTH_SIZE);
    } else if (P->payload_len) {
        memcpy(region, section, P->payload_len);
    }
    const size_t end = P->payload_off + stored;
    if (P->flags & TW_FLAG_CHECKSUM) {
        tw_store_le32(out + end, tw_crc32c(out, end));
        return end + TW_CHECKSUM_SIZE;
    }
    return end;
}

#endif /* TOKENWIRE_ENCODE_H */
