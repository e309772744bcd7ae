/* Checks of an untrusted frame that the Python extension (tokenwire/_frame.pxd, used by
 * _wire.pxi) and the C++ header (wire.hpp) share: one implementation, one text per message.
 *
 *   - the codec table: name, wire id (its index) and the widths a frame may declare for it;
 *     every list of codec names (Python's tokenwire.CODECS, FrameInfo.codec, C++'s FrameInfo,
 *     the messages below) is read from here, so adding a codec touches this table;
 *   - tw_check_codec_width: the header's codec and width bytes against that table;
 *   - tw_zstd_frame_size: the walk over a zstd frame's headers (RFC 8878, 3.1.1).
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

#include "byteorder.h"

#define TW_MSG_SIZE 256

/* ---- the codec table --------------------------------------------------------------------- */

typedef struct {
    const char *name;
    unsigned min_width, max_width;     /* the width byte a frame of this codec may carry */
} tw_codec_info;

enum { TW_CODEC_RAW = 0, TW_CODEC_U16 = 1, TW_CODEC_PACKED = 2, TW_NCODECS = 3 };

static const tw_codec_info tw_codecs[TW_NCODECS] = {
    {"raw", 32, 32},
    {"u16", 16, 16},
    {"packed", 1, 31},
};

/* The header's codec and width bytes. */
static int tw_check_codec_width(unsigned codec, unsigned width, char *msg, size_t cap) {
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

/* ---- zstd frame walk --------------------------------------------------------------------- */

#define TW_ZSTD_MAGIC 0xFD2FB528u
#define TW_ZSTD_BLOCK_MAX (128u * 1024u)     /* a zstd block never regenerates more than this */

/* The size in bytes of the zstd frame at p (n bytes available), from its headers alone: nothing
 * is decompressed. Raw and RLE blocks say how much they regenerate, so a frame whose blocks add
 * up to more than payload_len (what the tokenwire header needs) is refused before any output
 * exists; compressed blocks are bounded by the decompressor's output limit. -1 and a message
 * when the frame is corrupt or truncated. */
static int64_t tw_zstd_frame_size(const uint8_t *p, size_t n, uint64_t payload_len, char *msg,
                                  size_t cap) {
    static const size_t fcs_sizes[4] = {0, 2, 4, 8}, did_sizes[4] = {0, 1, 2, 4};
    if (n < 5 || tw_load_le32(p) != TW_ZSTD_MAGIC) {
        snprintf(msg, cap, "zstd payload is corrupt: it does not start with a zstd frame");
        return -1;
    }
    const unsigned fhd = p[4];
    if (fhd & 0x08) {
        snprintf(msg, cap, "zstd payload is corrupt: reserved bit set in the frame header");
        return -1;
    }
    size_t fcs_len = fcs_sizes[fhd >> 6];
    if (fcs_len == 0 && (fhd & 0x20)) fcs_len = 1;
    size_t off = 5 + ((fhd & 0x20) ? 0 : 1) + did_sizes[fhd & 3] + fcs_len;
    uint64_t regenerated = 0;
    for (;;) {
        if (off > n || n - off < 3) {
            snprintf(msg, cap, "zstd payload is truncated: block header at byte %llu of %llu",
                     (unsigned long long)off, (unsigned long long)n);
            return -1;
        }
        const uint32_t bh = (uint32_t)p[off] | ((uint32_t)p[off + 1] << 8) |
                            ((uint32_t)p[off + 2] << 16);
        const size_t at = off;
        off += 3;
        const unsigned btype = (bh >> 1) & 3;
        const uint32_t size = bh >> 3;
        if (btype == 3) {
            snprintf(msg, cap, "zstd payload is corrupt: reserved block type at byte %llu",
                     (unsigned long long)at);
            return -1;
        }
        if (size > TW_ZSTD_BLOCK_MAX) {
            snprintf(msg, cap, "zstd payload is corrupt: a block of %lu bytes at byte %llu",
                     (unsigned long)size, (unsigned long long)at);
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
            snprintf(msg, cap, "zstd payload is truncated: a block needs %llu bytes at byte %llu, has %llu",
                     (unsigned long long)stored, (unsigned long long)off,
                     (unsigned long long)(n - off));
            return -1;
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
