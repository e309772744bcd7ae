/* The codecs' payload kernels: one switch per direction over the wire ids of frame.h's codec
 * table, shared by the Python extension (tokenwire/_frame.pxd, used by _wire.pxi) and the C++
 * header (wire.hpp). A payload is the ids of all sequences back to back, `width` bits each
 * (tw_payload_size); docs/wire-format.md ("Codecs") specifies the bytes.
 *
 * Kernels: no allocation, no messages, no checks. The writer trusts its caller to have chosen a
 * codec that holds the ids (encode.h's tw_plan_frame); the reader trusts the frame checks of
 * frame.h to have run (for pfor: tw_decode_pfor, which checks while it decodes, has turned the
 * payload into int32 ids, and the reader takes slices of those).
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

/* The pfor payload of the ids of `nseq` sequences, as one sequence (blocks of 128 ids run across
 * sequence boundaries), into out (room for twpf_bound of their total); returns its size. One
 * sequence is encoded in place (the kernel copies each block to its stack once); several are
 * gathered block by block into a stack buffer, each id read once, and each block encoded from
 * there: a block's bytes depend only on its own ids, so this is the payload of the
 * concatenation. */
static inline size_t tw_write_pfor(uint8_t *out, const tw_seq *seqs, size_t nseq) {
    size_t nonempty = 0, last = 0;
    for (size_t k = 0; k < nseq; k++)
        if (seqs[k].n) {
            nonempty++;
            last = k;
        }
    if (nonempty <= 1) return nonempty ? twpf_encode(seqs[last].ids, seqs[last].n, out) : 0;
    int32_t block[TWPF_BLOCK];
    uint8_t *o = out;
    unsigned fill = 0;
    for (size_t k = 0; k < nseq; k++) {
        const uint8_t *src = (const uint8_t *)seqs[k].ids;
        size_t left = seqs[k].n;
        while (left) {
            const size_t take = left < TWPF_BLOCK - fill ? left : TWPF_BLOCK - fill;
            memcpy(block + fill, src, take * 4);
            src += take * 4;
            left -= take;
            fill += (unsigned)take;
            if (fill == TWPF_BLOCK) {
                o += twpf_encode(block, TWPF_BLOCK, o);
                fill = 0;
            }
        }
    }
    if (fill) o += twpf_encode(block, fill, o);
    return (size_t)(o - out);
}

/* The payload of `nseq` sequences in `codec` at `width` into out (tw_payload_size bytes; pfor:
 * room for twpf_bound of the ids). Returns the bytes written. */
static inline size_t tw_write_payload(uint8_t *out, const tw_seq *seqs, size_t nseq, unsigned codec,
                               unsigned width) {
    const uint8_t *const start = out;
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
        break;
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
        break;
    case TW_CODEC_PACKED: {
        twbp_packer pk;
        size_t total = 0;
        pk.out = out;
        pk.acc = 0;
        pk.bits = 0;
        for (size_t k = 0; k < nseq; k++) {
            twbp_pack(&pk, seqs[k].ids, seqs[k].n, width);
            total += seqs[k].n;
        }
        twbp_pack_finish(&pk);
        return tw_payload_size(width, total);
    }
    case TW_CODEC_PFOR:
        return tw_write_pfor(out, seqs, nseq);
    }
    return (size_t)(out - start);
}

/* Ids [start, start + n) of a checked payload of payload_len bytes into dst. For pfor,
 * `payload` is what tw_decode_pfor made of it: the frame's ids as native int32s. */
static inline void tw_read_payload(const uint8_t *payload, size_t payload_len, unsigned codec,
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
    case TW_CODEC_PFOR:
        memcpy(dst, payload + 4 * start, n * 4);
        return;
    }
}

#endif /* TOKENWIRE_PAYLOAD_H */
