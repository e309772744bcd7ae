/* The encoder, shared by the Python extension (tokenwire/_frame.pxd, used by _wire.pxi) and the
 * C++ header (wire.hpp), read from the codec table of frame.h: the codec choice (tw_choose_codec:
 * auto's choice, what a forced codec can hold), the error of a forced codec that cannot hold an
 * id (tw_codec_misfit), and the one frame writer, in two steps so that each language allocates
 * the frame itself (Python a bytes object, C++ a vector):
 *
 *     tw_plan_frame    the codec, width, flags and every size (plan.nbytes: the whole frame);
 *     tw_plan_zstd     (codec="zstd" only) whether a zstd section of C bytes replaces the plain
 *                      payload, and the sizes if so;
 *     tw_write_frame   header, count table, payload (or length prefix and zstd section) and
 *                      checksum into the caller's buffer of plan.nbytes bytes.
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
 * codec="auto", and codec="zstd" (auto's payload, then compressed when that pays off). */
enum { TW_REQUEST_AUTO = 0x100, TW_REQUEST_ZSTD = 0x101 };

static unsigned tw_bit_length(uint32_t v) {
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
static int tw_codec_width(unsigned c, uint32_t orv) {
    const tw_codec_info *info = &tw_codecs[c];
    if ((orv >> 31) ? info->min_id >= 0 : (int64_t)orv > info->max_id) return -1;
    if (info->min_width == info->max_width) return (int)info->min_width;
    const unsigned w = orv == 0 ? 1 : tw_bit_length(orv);
    return w < info->min_width ? (int)info->min_width : (int)w;
}

/* The wire codec (and *width) for ids whose bitwise OR is `orv`, `total` of them (the rule of
 * docs/wire-format.md), read from the codec table alone: a forced codec (a wire id) as asked,
 * or -1 when it cannot hold the ids (tw_codec_misfit names the first that does not fit); any
 * other request (TW_REQUEST_AUTO, TW_REQUEST_ZSTD) auto: of the codecs that hold the ids, the
 * smallest payload, on a tie the earlier in the table (raw, u16, packed: fastest first). */
static int tw_choose_codec(unsigned request, uint32_t orv, uint64_t total, unsigned *width) {
    if (request < TW_NCODECS) {
        const int w = tw_codec_width(request, orv);
        if (w < 0) return -1;
        *width = (unsigned)w;
        return (int)request;
    }
    int best = -1;
    size_t best_size = 0;
    for (unsigned c = 0; c < TW_NCODECS; c++) {
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
static int64_t tw_codec_misfit(unsigned codec, const int32_t *ids, size_t n, int64_t seq,
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
static uint32_t tw_seqs_or(const tw_seq *seqs, size_t nseq) {
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
    size_t nseq;             /* sequences the table lists (MULTI) */
    size_t table_len;        /* the count table, zero-padded to a multiple of 8 (MULTI), else 0 */
    size_t payload_off;      /* 16 + table_len */
    size_t payload_len;      /* P: the plain payload */
    size_t stored_len;       /* the payload region: P, or with ZSTD 8 + C */
    size_t nbytes;           /* the whole frame, checksum included: what the caller allocates */
} tw_frame_plan;

/* Plan the frame of `nseq` sequences holding `total` ids whose bitwise OR is `orv` (MULTI when
 * `multi`: encode_many's frame, even of one sequence). The codec and width as tw_choose_codec
 * says; the payload stored plain (tw_plan_zstd may change that). 0, or -1 when a forced codec
 * cannot hold the ids (then tw_codec_misfit names the first). */
static int tw_plan_frame(tw_frame_plan *P, unsigned request, uint32_t orv, uint64_t total,
                         size_t nseq, int multi, int checksum) {
    const int codec = tw_choose_codec(request, orv, total, &P->width);
    if (codec < 0) return -1;
    P->codec = (unsigned)codec;
    P->flags = (multi ? TW_FLAG_MULTI : 0u) | (checksum ? TW_FLAG_CHECKSUM : 0u);
    P->count = multi ? (uint64_t)nseq : total;
    P->nseq = multi ? nseq : 0;
    P->table_len = multi ? (nseq * 4 + 7) / 8 * 8 : 0;
    P->payload_off = TW_HEADER_SIZE + P->table_len;
    P->payload_len = tw_payload_size(P->width, total);
    P->stored_len = P->payload_len;
    P->nbytes = P->payload_off + P->stored_len + (checksum ? TW_CHECKSUM_SIZE : 0u);
    return 0;
}

/* The encoder's zstd rule: a zstd section of `clen` bytes replaces the plain payload only when it
 * saves bytes, the 8-byte length prefix counted (8 + C < P), and a decoder accepts its expansion
 * (P <= 64 C). Returns 1 and sets the ZSTD flag and the sizes when it does, else 0 (the plan, a
 * plain payload, unchanged). */
static int tw_plan_zstd(tw_frame_plan *P, size_t clen) {
    if (!(clen + TW_ZSTD_LENGTH_SIZE < P->payload_len &&
          P->payload_len <= clen * TW_ZSTD_MAX_EXPANSION))
        return 0;
    P->flags |= TW_FLAG_ZSTD;
    P->stored_len = TW_ZSTD_LENGTH_SIZE + clen;
    P->nbytes = P->payload_off + P->stored_len +
                ((P->flags & TW_FLAG_CHECKSUM) ? TW_CHECKSUM_SIZE : 0u);
    return 1;
}

/* The frame `P` plans into out (P->nbytes bytes): header, count table (the lengths of `seqs`),
 * the payload region and the checksum. The payload region is written from the ids when
 * `section` is NULL; otherwise it is copied from `section`: with the ZSTD flag the C compressed
 * bytes (the length prefix is written here), else the P bytes of the plain payload. */
static void tw_write_frame(uint8_t *out, const tw_frame_plan *P, const tw_seq *seqs, size_t nseq,
                           const uint8_t *section) {
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
    if (section == NULL) {
        tw_write_payload(region, seqs, nseq, P->codec, P->width);
    } else if (P->flags & TW_FLAG_ZSTD) {
        tw_store_le64(region, (uint64_t)(P->stored_len - TW_ZSTD_LENGTH_SIZE));
        memcpy(region + TW_ZSTD_LENGTH_SIZE, section, P->stored_len - TW_ZSTD_LENGTH_SIZE);
    } else if (P->payload_len) {
        memcpy(region, section, P->payload_len);
    }
    if (P->flags & TW_FLAG_CHECKSUM) {
        const size_t end = P->payload_off + P->stored_len;
        tw_store_le32(out + end, tw_crc32c(out, end));
    }
}

#endif /* TOKENWIRE_ENCODE_H */
