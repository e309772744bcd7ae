/* The codecs' payload kernels: one switch per direction over the wire ids of frame.h's codec
 * table, shared by the Python extension (tokenwire/_frame.pxd, used by _wire.pxi) and the C++
 * header (wire.hpp). A payload is the ids of all sequences back to back, `width` bits each
 * (tw_payload_size); docs/wire-format.md ("Codecs") specifies the bytes.
 *
 * Kernels: no allocation, no messages, no checks. The writer trusts its caller to have chosen a
 * codec that holds the ids (encode.h's tw_plan_frame); the reader trusts the frame checks of
 * frame.h to have run.
 */
#ifndef TOKENWIRE_PAYLOAD_H
#define TOKENWIRE_PAYLOAD_H

#include "bitpack.h"
#include "frame.h"

/* One sequence of ids to encode: n int32s at `ids` (any alignment). */
typedef struct {
    const int32_t *ids;
    size_t n;
} tw_seq;

/* The payload of `nseq` sequences in `codec` at `width` into out (tw_payload_size bytes). */
static void tw_write_payload(uint8_t *out, const tw_seq *seqs, size_t nseq, unsigned codec,
                             unsigned width) {
    switch (codec) {
    case TW_CODEC_RAW:
        for (size_t k = 0; k < nseq; k++) {
            const size_t n = seqs[k].n;
#if TW_HOST_BIG_ENDIAN
            for (size_t i = 0; i < n; i++) {
                int32_t v;
                memcpy(&v, (const uint8_t *)seqs[k].ids + 4 * i, 4);
                tw_store_le32(out + 4 * i, (uint32_t)v);
            }
#else
            if (n) memcpy(out, seqs[k].ids, n * 4);
#endif
            out += n * 4;
        }
        return;
    case TW_CODEC_U16:
        for (size_t k = 0; k < nseq; k++) {
            const size_t n = seqs[k].n;
            if (((uintptr_t)out & 1) == 0) {
                twbp_narrow16(seqs[k].ids, n, out);
            } else {      /* narrow16 stores uint16 words; a frame at an odd address is rare */
                for (size_t i = 0; i < n; i++) {
                    int32_t v;
                    memcpy(&v, (const uint8_t *)seqs[k].ids + 4 * i, 4);
                    out[2 * i] = (uint8_t)v;
                    out[2 * i + 1] = (uint8_t)((uint32_t)v >> 8);
                }
            }
            out += n * 2;
        }
        return;
    case TW_CODEC_PACKED: {
        twbp_packer pk;
        pk.out = out;
        pk.acc = 0;
        pk.bits = 0;
        for (size_t k = 0; k < nseq; k++) twbp_pack(&pk, seqs[k].ids, seqs[k].n, width);
        twbp_pack_finish(&pk);
        return;
    }
    }
}

/* Ids [start, start + n) of a checked payload of payload_len bytes into dst. */
static void tw_read_payload(const uint8_t *payload, size_t payload_len, unsigned codec,
                            unsigned width, uint64_t start, size_t n, int32_t *dst) {
    if (n == 0) return;
    switch (codec) {
    case TW_CODEC_RAW:
#if TW_HOST_BIG_ENDIAN
        for (size_t i = 0; i < n; i++) dst[i] = (int32_t)tw_load_le32(payload + 4 * (start + i));
#else
        memcpy(dst, payload + 4 * start, n * 4);
#endif
        return;
    case TW_CODEC_U16:
        twbp_widen16(payload + 2 * start, n, dst);
        return;
    case TW_CODEC_PACKED: {
        const uint64_t bit = start * width;
        twbp_unpack(payload + (bit >> 3), payload_len - (size_t)(bit >> 3), (unsigned)(bit & 7),
                    dst, n, width);
        return;
    }
    }
}

#endif /* TOKENWIRE_PAYLOAD_H */
