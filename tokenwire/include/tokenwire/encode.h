/* The encoder's rules that the Python extension (tokenwire/_frame.pxd, used by _wire.pxi) and
 * the C++ header (wire.hpp) share, read from the codec table of frame.h: tw_choose_codec (auto's
 * choice, what a forced codec can hold), tw_codec_misfit (the id a forced codec cannot hold,
 * and its message) and tw_write_header. Kept apart from frame.h, which holds only what a
 * decoder checks (tests/test_wire_fixtures.py scans frame.h for the decoder's messages).
 */
#ifndef TOKENWIRE_ENCODE_H
#define TOKENWIRE_ENCODE_H

#include "frame.h"

/* ---- the encoder's rules ------------------------------------------------------------------ */

/* encode's codec="auto" (and zstd's inner payload): not a wire id. */
#define TW_REQUEST_AUTO 0x100

static unsigned tw_bit_length(uint32_t v) {
    unsigned w = 0;
    while (v) {
        w++;
        v >>= 1;
    }
    return w;
}

/* The wire codec (and *width) for ids whose bitwise OR is `orv`, `total` of them (the rule of
 * docs/wire-format.md): a forced codec (a wire id) as asked, or -1 when it cannot hold the ids
 * (tw_codec_misfit names the first that does not fit); auto, the smallest payload, on a tie the
 * faster codec in the order raw, u16, packed. */
static int tw_choose_codec(unsigned request, uint32_t orv, uint64_t total, unsigned *width) {
    const int negative = (orv >> 31) != 0;
    const unsigned w = orv == 0 ? 1 : tw_bit_length(orv);
    if (request == TW_CODEC_RAW) {
        *width = 32;
        return TW_CODEC_RAW;
    }
    if (request == TW_CODEC_U16) {
        if (orv > (uint32_t)tw_codecs[TW_CODEC_U16].max_id) return -1;
        *width = 16;
        return TW_CODEC_U16;
    }
    if (request == TW_CODEC_PACKED) {
        if (negative) return -1;
        *width = w;
        return TW_CODEC_PACKED;
    }
    *width = 32;
    if (negative) return TW_CODEC_RAW;
    int best = TW_CODEC_RAW;
    size_t best_size = tw_payload_size(TW_CODEC_RAW, 32, total);
    if (orv <= (uint32_t)tw_codecs[TW_CODEC_U16].max_id &&
        tw_payload_size(TW_CODEC_U16, 16, total) < best_size) {
        best = TW_CODEC_U16;
        best_size = tw_payload_size(TW_CODEC_U16, 16, total);
        *width = 16;
    }
    if (tw_payload_size(TW_CODEC_PACKED, w, total) < best_size) {
        best = TW_CODEC_PACKED;
        *width = w;
    }
    return best;
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

/* The 16-byte header (the count table, if any, follows; the caller writes it). */
static void tw_write_header(uint8_t *out, unsigned codec, unsigned width, unsigned flags,
                            uint64_t count) {
    memcpy(out, "TWIR", 4);
    out[4] = (uint8_t)TW_WIRE_VERSION;
    out[5] = (uint8_t)codec;
    out[6] = (uint8_t)width;
    out[7] = (uint8_t)flags;
    tw_store_le64(out + 8, count);
}

#endif /* TOKENWIRE_ENCODE_H */
