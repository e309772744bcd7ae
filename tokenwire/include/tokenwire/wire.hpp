// tokenwire wire format, version 1, for C++17: decode, encode and inspect frames without Python.
//
// Header-only; needs nothing beyond the standard library. zstd frames need libzstd: define
// TOKENWIRE_WITH_ZSTD and link -lzstd (Debian: libzstd-dev); without it they are refused.
//
// The format and every validation message are specified in docs/wire-format.md. The checks of
// an untrusted frame (header, count table, sizes, checksum, padding, the zstd frame walk), their
// messages and the codec table are C in tokenwire/frame.h, and the bit-packing, CRC-32C and
// byte-order kernels are tokenwire/bitpack.h, crc32c.h and byteorder.h, the codecs' payload
// kernels payload.h (pfor's: pfor.h, decoded through frame.h's tw_decode_pfor), and the encoder (codec choice, misfit message, the one frame writer)
// encode.h: the very headers the Python extension compiles, one implementation for both
// languages. What is left here (zstd compression and decompression, the vocabulary check)
// follows tokenwire/_wire.pxi, so that both accept and reject the same frames with the same text
// and encode byte-for-byte the same frames.
// The test suite checks the agreement (tests/test_cpp_wire.py).
//
// Allocation bound (untrusted input): nothing is allocated before the frame has been checked to
// hold what its header claims; the ids then take 4*N bytes. The count table and a zstd section
// are copied once (each at most the frame's size: the memory passed in may change, see
// docs/cpp.md). A zstd payload additionally takes its declared size, at most 64x the compressed
// bytes received, and the decompressor is never given room for more than that size + 1 byte.
// A pfor frame holds at most 128 ids per payload byte (checked from its length prefix before
// the 4*N bytes of ids are allocated; decode_many decodes each sequence into its own vector).
// The bound per codec: docs/wire-format.md, "Allocation bound".
#ifndef TOKENWIRE_WIRE_HPP
#define TOKENWIRE_WIRE_HPP

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#ifdef TOKENWIRE_WITH_ZSTD
#include <zstd.h>
#endif

// The kernels are C (file-local statics; compat.h spells restrict for C++). Some of their
// helpers go unused in a given translation unit, and C-style casts are theirs: not worth a
// warning in the includer's stricter C++ settings.
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wunused-variable"
#pragma GCC diagnostic ignored "-Wold-style-cast"
#pragma GCC diagnostic ignored "-Wsign-conversion"
#pragma GCC diagnostic ignored "-Wconversion"
#pragma GCC diagnostic ignored "-Wcast-align"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuseless-cast"
#endif
#endif
#include "byteorder.h"
#include "bitpack.h"
#include "crc32c.h"
#include "pfor.h"
#include "frame.h"
#include "payload.h"
#include "encode.h"
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

namespace tokenwire {

// ---- errors ---------------------------------------------------------------------------------

// A malformed frame. what() is the text Python's tokenwire.WireFormatError carries.
class wire_format_error : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

// A checksum mismatch (Python: tokenwire.ChecksumError).
class checksum_error : public wire_format_error {
  public:
    using wire_format_error::wire_format_error;
};

// A wire codec's value is its wire id (frame.h's codec table); Auto and Zstd are the encoder's
// requests that are not wire codecs (encode.h). encode_frame passes the value on as it is.
enum class Codec : unsigned {
    Auto = TW_REQUEST_AUTO,
    Raw = TW_CODEC_RAW,
    U16 = TW_CODEC_U16,
    Packed = TW_CODEC_PACKED,
    Zstd = TW_REQUEST_ZSTD,
    Pfor = TW_CODEC_PFOR,
};

struct FrameInfo {
    int version;
    std::string codec;                 // "raw", "u16", "packed" or "pfor"
    int width;                         // bits per id (0 for pfor: a width per block)
    std::vector<uint64_t> counts;      // ids per sequence (one entry for a single-sequence frame)
    bool checksum;
    size_t nbytes;                     // the whole frame, checksum included
};

// Every function below has internal linkage (an unnamed namespace): the kernels' tables and CPU
// flags are file-local statics of each translation unit, so a function that reads them must be
// that unit's own copy too. (With ordinary inline functions the linker keeps one copy of each,
// possibly from different units: one unit's init would fill another unit's tables.)
namespace detail {
namespace {

// ---- format constants (docs/wire-format.md) --------------------------------------------------

constexpr unsigned kVersion = TW_WIRE_VERSION;
constexpr size_t kZstdLengthSize = TW_ZSTD_LENGTH_SIZE;
constexpr unsigned kRaw = TW_CODEC_RAW, kPfor = TW_CODEC_PFOR;
constexpr unsigned kFlagChecksum = TW_FLAG_CHECKSUM, kFlagMulti = TW_FLAG_MULTI,
                   kFlagZstd = TW_FLAG_ZSTD;

// The kernels probe the CPU once (AVX2 unpack, SSE4.2 CRC, pfor's paths); C++ guarantees this
// runs once.
inline void init_kernels() {
    static const bool done = [] {
        twcrc_init();
        twbp_init();
        twpf_init();
        return true;
    }();
    (void)done;
}

// Byte order lives in byteorder.h (shared with the C kernels and Cython); this name stays for
// code written against it (tests/cpp/conformance.cpp).
inline uint32_t load_le32(const uint8_t* p) { return tw_load_le32(p); }

// ---- message formatting (the same text as Python's f-strings) --------------------------------

inline std::string dec(uint64_t v) {
    char buf[24];
    size_t i = sizeof buf;
    do {
        buf[--i] = char('0' + unsigned(v % 10));
        v /= 10;
    } while (v);
    return std::string(buf + i, sizeof buf - i);
}
inline std::string dec(int64_t v) {
    return v < 0 ? "-" + dec(0 - uint64_t(v)) : dec(uint64_t(v));
}
inline std::string dec(unsigned v) { return dec(uint64_t(v)); }
inline std::string dec(int v) { return dec(int64_t(v)); }

[[noreturn]] inline void fail(const std::string& msg) { throw wire_format_error(msg); }

// ---- frame layout -----------------------------------------------------------------------------

// What a frame's header says: frame.h's tw_layout.
using Layout = tw_layout;

// A parsed header and its own copy of the count table. The table is read from the caller's
// memory exactly once (between tw_parse_prefix and tw_parse_rest, as the Python extension does):
// its sum is checked on the copy, and every later reader (decode_many, frame_info) reads the
// copy, so a writer racing with the decoder cannot make the counts disagree with the total that
// bounds every read. L.counts is left null: nothing reads the frame's table after parsing.
struct Parsed {
    Layout L;
    std::vector<uint8_t> table;       // nseq little-endian uint32 counts (multi-sequence only)
    uint64_t count(uint64_t k) const {
        return (L.flags & TW_FLAG_MULTI) ? tw_load_le32(table.data() + 4 * k) : L.total;
    }
};

// Header, count table and zstd length prefix: everything frame_info needs (not the payload).
// The checks and their messages are frame.h's, the very functions the Python extension calls.
// The table is copied once (it fits in the n bytes: checked by tw_parse_prefix) and only the
// copy is read.
inline Parsed parse_header(const uint8_t* buf, size_t n) {
    Parsed p{};
    char msg[TW_MSG_SIZE];
    if (tw_parse_prefix(buf, n, &p.L, msg, sizeof msg) != 0) fail(msg);
    if (p.L.counts != nullptr && p.L.nseq != 0) {
        p.table.assign(p.L.counts, p.L.counts + size_t(p.L.nseq) * 4);   // the one read
        p.L.counts = p.table.data();
    }
    if (tw_parse_rest(buf, n, &p.L, msg, sizeof msg) != 0) fail(msg);
    p.L.counts = nullptr;
    return p;
}

inline void check_padding_bits(const uint8_t* payload, const Layout& L) {
    char msg[TW_MSG_SIZE];
    if (tw_check_padding_bits(payload, &L, msg, sizeof msg) != 0) fail(msg);
}

// All structural checks of a whole frame, and the checksum.
inline Parsed check_frame(const uint8_t* buf, size_t n) {
    init_kernels();
    Parsed p = parse_header(buf, n);
    char msg[TW_MSG_SIZE];
    const int r = tw_check_frame(buf, n, &p.L, msg, sizeof msg);
    if (r == TW_CHECKSUM_MISMATCH) throw checksum_error(msg);
    if (r != 0) fail(msg);
    return p;
}

// The zstd frame's size from its headers (the walk and its messages: tw_zstd_frame_size in
// frame.h, the very function the Python extension calls).
inline size_t zstd_frame_size(const uint8_t* p, size_t n, uint64_t payload_len) {
    char msg[TW_MSG_SIZE];
    const int64_t size = tw_zstd_frame_size(p, n, payload_len, msg, sizeof msg);
    if (size < 0) fail(msg);
    return size_t(size);
}

// The decompressed payload of a checked zstd frame: exactly L.payload_len bytes. The zstd
// section is copied first (at most the frame's size), so that the walk over its headers and
// libzstd read the same bytes.
inline std::vector<uint8_t> zstd_payload(const uint8_t* buf, const Layout& L) {
#ifdef TOKENWIRE_WITH_ZSTD
    const size_t clen = L.stored_len - kZstdLengthSize;
    const std::vector<uint8_t> section(buf + L.payload_off + kZstdLengthSize,
                                       buf + L.payload_off + kZstdLengthSize + clen);
    const uint8_t* comp = section.data();
    const size_t flen = zstd_frame_size(comp, clen, L.payload_len);
    if (flen != clen)
        fail("zstd payload has " + dec(uint64_t(clen - flen)) +
             " trailing bytes after its zstd frame");
    const unsigned long long declared = ZSTD_getFrameContentSize(comp, clen);
    if (declared == ZSTD_CONTENTSIZE_ERROR)
        fail("zstd payload is corrupt: error when determining content size");
    if (declared != uint64_t(L.payload_len))     // ZSTD_CONTENTSIZE_UNKNOWN prints as -1
        fail("zstd payload declares " +
             (declared == ZSTD_CONTENTSIZE_UNKNOWN ? std::string("-1")
                                                   : dec(uint64_t(declared))) +
             " bytes, the header needs " + dec(uint64_t(L.payload_len)));
    // Streaming, so that the end of the zstd frame is seen (trailing data is an error), into a
    // buffer of the declared size + 1: libzstd can never write more than that.
    std::vector<uint8_t> out(L.payload_len + 1);
    struct DCtx {
        ZSTD_DCtx* p = ZSTD_createDCtx();
        ~DCtx() { ZSTD_freeDCtx(p); }
    } dctx;
    if (!dctx.p) throw std::bad_alloc();
    ZSTD_inBuffer in{comp, clen, 0};
    ZSTD_outBuffer ob{out.data(), out.size(), 0};
    bool eof = false;
    while (in.pos < in.size) {
        const size_t r = ZSTD_decompressStream(dctx.p, &ob, &in);
        if (ZSTD_isError(r))
            fail(std::string("zstd payload is corrupt: zstd decompress error: ") +
                 ZSTD_getErrorName(r));
        if (r == 0) {
            eof = true;
            break;
        }
        if (ob.pos == ob.size) break;     // more output than declared: reported below
    }
    if (eof && in.pos < in.size)
        fail("zstd payload has " + dec(uint64_t(in.size - in.pos)) +
             " trailing bytes after its zstd frame");
    if (ob.pos != L.payload_len)
        fail("zstd payload decompresses to " +
             (ob.pos > L.payload_len ? "more than " + dec(uint64_t(L.payload_len))
                                     : dec(uint64_t(ob.pos))) +
             " bytes, the header needs " + dec(uint64_t(L.payload_len)));
    out.resize(L.payload_len);
    check_padding_bits(out.data(), L);
    return out;
#else
    (void)buf;
    (void)L;
    fail("zstd-compressed frame, but zstd support is not compiled in "
         "(define TOKENWIRE_WITH_ZSTD and link -lzstd)");
#endif
}

// The frame's plain payload: in the frame itself, or for a zstd frame decompressed into `plain`.
inline const uint8_t* plain_payload(const uint8_t* data, const Layout& L,
                                    std::vector<uint8_t>& plain) {
    if (!(L.flags & kFlagZstd)) return data + L.payload_off;
    plain = zstd_payload(data, L);
    return plain.data();
}

// Every id of a checked pfor frame (frame.h's tw_decode_pfor: the kernel judges the payload's
// rules while it decodes). Allocated only now: the frame checks bound the count by the payload's
// size (at most 128 ids per byte).
inline std::vector<int32_t> pfor_ids(const uint8_t* buf, const Layout& L) {
    std::vector<int32_t> ids(size_t(L.total));
    int32_t* dst = ids.data();
    size_t n = ids.size();
    char msg[TW_MSG_SIZE];
    if (n != 0 && tw_decode_pfor(buf, &L, &dst, &n, msg, sizeof msg) != 0) fail(msg);
    return ids;
}

// Ids [start, start + n) of a checked payload into dst (payload.h's kernel, shared with Python).
inline void read_payload(const uint8_t* payload, const Layout& L, uint64_t start, size_t n,
                         int32_t* dst) {
    tw_read_payload(payload, L.payload_len, L.codec, L.width, start, n, dst);
}

// The vocabulary rule, as Python's: no value (std::nullopt; Python: None) means no check; a
// value must be positive (std::invalid_argument with Python's ValueError text otherwise).
// 0 when there is nothing to check.
inline uint32_t vocab_limit(std::optional<int64_t> vocab_size) {
    if (!vocab_size) return 0;
    if (*vocab_size <= 0)
        throw std::invalid_argument("vocab_size must be positive, got " + dec(*vocab_size));
    return *vocab_size > (int64_t(1) << 31) ? uint32_t(1) << 31 : uint32_t(*vocab_size);
}

inline void check_vocab(const std::vector<int32_t>& ids, uint32_t limit, int64_t vocab_size,
                        int64_t seq) {
    // Unsigned compare: a negative id wraps to >= 2**31 >= limit. Branch-free first pass.
    bool ok = true;
    for (int32_t v : ids) ok &= uint32_t(v) < limit;
    if (ok) return;
    for (size_t i = 0; i < ids.size(); i++)
        if (uint32_t(ids[i]) >= limit)
            fail((seq >= 0 ? "sequence " + dec(seq) + ": " : std::string()) + "token id at index " +
                 dec(uint64_t(i)) + " is " + dec(ids[i]) + ", outside the vocabulary [0, " +
                 dec(vocab_size) + ")");
}

// ---- encoding ---------------------------------------------------------------------------------

// One sequence to encode: encode.h's tw_seq {ids, n}.
using Seq = tw_seq;

// A forced codec that cannot hold the ids: the first that does not fit, named (encode.h's rule
// and text, shared with the Python extension).
[[noreturn]] inline void codec_error(unsigned codec, const Seq* seqs, size_t nseq, bool multi) {
    char msg[TW_MSG_SIZE];
    for (size_t k = 0; k < nseq; k++)
        if (tw_codec_misfit(codec, seqs[k].ids, seqs[k].n, multi ? int64_t(k) : -1, msg,
                            sizeof msg) >= 0)
            throw std::invalid_argument(msg);
    throw std::invalid_argument("codec cannot hold these ids");
}

// The frame, planned and written by encode.h (the writer the Python extension uses too) into a
// vector of the planned size; only the zstd compression itself is libzstd's, here.
inline std::vector<uint8_t> encode_frame(const Seq* seqs, size_t nseq, bool multi, Codec request,
                                         bool checksum) {
    init_kernels();
#ifndef TOKENWIRE_WITH_ZSTD
    if (request == Codec::Zstd)
        throw std::invalid_argument(
            "codec 'zstd' needs zstd support compiled in (define TOKENWIRE_WITH_ZSTD and link "
            "-lzstd)");
#endif
    // the request as encode.h takes it: a wire id or TW_REQUEST_ZSTD; any other value is auto
    const unsigned given = static_cast<unsigned>(request);
    const unsigned wire =
        given < TW_NCODECS || given == TW_REQUEST_ZSTD ? given : unsigned(TW_REQUEST_AUTO);
    uint64_t total = 0;
    for (size_t k = 0; k < nseq; k++) total += seqs[k].n;
    // raw and pfor hold every int32: no OR needed (and pfor's kernel reads each id once)
    const uint32_t orv = wire == kRaw || wire == kPfor ? 0 : tw_seqs_or(seqs, nseq);
    tw_frame_plan plan{};               // zeroed: GCC cannot see tw_choose_codec set the width
    if (tw_plan_frame(&plan, wire, orv, total, nseq, multi, checksum) != 0)
        codec_error(wire, seqs, nseq, multi);
    std::vector<uint8_t> frame;
#ifdef TOKENWIRE_WITH_ZSTD
    if (request == Codec::Zstd) {
        // encode.h's rule: zstd (level TW_ZSTD_LEVEL, content size written as Python's
        // zstandard does, no zstd checksum) over the payload of tw_zstd_codec's codec; on
        // TW_ZSTD_RETRY over auto's (the plan's); tw_plan_zstd decides what the frame keeps.
        // One compression context per thread, reused: a short frame pays for no new one.
        struct CCtx {
            ZSTD_CCtx* p = ZSTD_createCCtx();
            ~CCtx() { ZSTD_freeCCtx(p); }
        };
        static thread_local CCtx cctx;
        if (!cctx.p) throw std::bad_alloc();
        std::vector<uint8_t> comp;
        auto compress = [&](unsigned codec, unsigned width) {
            std::vector<uint8_t> plain(tw_payload_size(width, plan.total));
            tw_write_payload(plain.data(), seqs, nseq, codec, width);
            comp.resize(ZSTD_compressBound(plain.size()));
            ZSTD_CCtx_reset(cctx.p, ZSTD_reset_session_and_parameters);
            ZSTD_CCtx_setParameter(cctx.p, ZSTD_c_compressionLevel, TW_ZSTD_LEVEL);
            ZSTD_CCtx_setParameter(cctx.p, ZSTD_c_contentSizeFlag, 1);
            ZSTD_CCtx_setParameter(cctx.p, ZSTD_c_checksumFlag, 0);
            const size_t clen = ZSTD_compress2(cctx.p, comp.data(), comp.size(), plain.data(),
                                               plain.size());
            if (ZSTD_isError(clen))
                throw std::runtime_error(std::string("zstd compression failed: ") +
                                         ZSTD_getErrorName(clen));
            comp.resize(clen);
            return tw_plan_zstd(&plan, codec, width, clen);
        };
        unsigned width = 0;
        const unsigned codec = tw_zstd_codec(orv, &width);
        int kept = compress(codec, width);
        if (kept == TW_ZSTD_RETRY) kept = compress(plan.codec, plan.width);
        frame.resize(plan.nbytes);
        tw_write_frame(frame.data(), &plan, seqs, nseq,
                       kept == TW_ZSTD_KEPT ? comp.data() : nullptr);
        return frame;
    }
#endif
    frame.resize(plan.nbytes);     // pfor: the most it can take; shrunk to what it took
    frame.resize(tw_write_frame(frame.data(), &plan, seqs, nseq, nullptr));
    return frame;
}

}  // namespace
}  // namespace detail

namespace {

// ---- public API -------------------------------------------------------------------------------

// What a frame's header says, without decoding its payload (which `data` need not hold yet:
// `nbytes` tells a stream reader where the frame ends). The checksum is not verified.
inline FrameInfo frame_info(const uint8_t* data, size_t size) {
    using namespace detail;
    const Parsed p = parse_header(data, size);
    const Layout& L = p.L;
    FrameInfo info;
    info.version = int(kVersion);
    info.codec = tw_codecs[L.codec].name;
    info.width = int(L.width);
    info.counts.resize(size_t(L.nseq));
    for (size_t k = 0; k < L.nseq; k++) info.counts[k] = p.count(k);
    info.checksum = (L.flags & kFlagChecksum) != 0;
    info.nbytes = L.nbytes;
    return info;
}

// Decode a single-sequence frame. With a vocab_size, every id must lie in [0, vocab_size);
// without one (std::nullopt, the default) ids are not checked. Throws std::invalid_argument for
// a vocab_size < 1 (Python's ValueError: "vocab_size must be positive, got -1"), before reading
// the frame; wire_format_error (checksum_error on a checksum mismatch) for a malformed frame,
// and for a multi-sequence frame (read those with decode_many).
inline std::vector<int32_t> decode(const uint8_t* data, size_t size,
                                   std::optional<int64_t> vocab_size = std::nullopt) {
    using namespace detail;
    const uint32_t limit = vocab_limit(vocab_size);
    const Parsed p = check_frame(data, size);
    const Layout& L = p.L;
    if (L.flags & kFlagMulti)
        fail("multi-sequence frame (" + dec(L.nseq) + " sequences): read it with decode_many()");
    if (L.codec == kPfor) {
        std::vector<int32_t> ids = pfor_ids(data, L);
        if (limit) check_vocab(ids, limit, *vocab_size, -1);
        return ids;
    }
    std::vector<uint8_t> plain;
    const uint8_t* payload = plain_payload(data, L, plain);
    std::vector<int32_t> ids(size_t(L.total));
    read_payload(payload, L, 0, ids.size(), ids.data());
    if (limit) check_vocab(ids, limit, *vocab_size, -1);
    return ids;
}

// Decode a frame to one vector per sequence (a one-element result for a single-sequence frame).
// vocab_size and errors as decode's.
inline std::vector<std::vector<int32_t>> decode_many(
    const uint8_t* data, size_t size, std::optional<int64_t> vocab_size = std::nullopt) {
    using namespace detail;
    const uint32_t limit = vocab_limit(vocab_size);
    const Parsed p = check_frame(data, size);
    const Layout& L = p.L;
    std::vector<std::vector<int32_t>> out(size_t(L.nseq));
    if (L.codec == kPfor) {
        // Each sequence decoded straight into its own vector (the kernel splits the blocks that
        // run across sequences): the ids take 4*N bytes, no second copy of them.
        std::vector<int32_t*> dst(out.size());
        std::vector<size_t> count(out.size());
        for (size_t k = 0; k < out.size(); k++) {
            count[k] = size_t(p.count(k));    // the copy checked: the counts sum to L.total
            out[k].resize(count[k]);
            dst[k] = out[k].data();
        }
        char msg[TW_MSG_SIZE];
        if (L.total != 0 && tw_decode_pfor(data, &L, dst.data(), count.data(), msg, sizeof msg) != 0)
            fail(msg);
        for (size_t k = 0; limit && k < out.size(); k++)
            check_vocab(out[k], limit, *vocab_size, int64_t(k));
        return out;
    }
    std::vector<uint8_t> plain;
    const uint8_t* payload = plain_payload(data, L, plain);
    uint64_t start = 0;
    for (size_t k = 0; k < L.nseq; k++) {
        const size_t n = size_t(p.count(k));      // the copy checked: the counts sum to L.total
        out[k].resize(n);
        read_payload(payload, L, start, n, out[k].data());
        start += n;
        if (limit) check_vocab(out[k], limit, *vocab_size, int64_t(k));
    }
    return out;
}

// Encode ids as one frame: byte-for-byte what Python's tokenwire.encode returns for the same
// arguments. Throws std::invalid_argument when a forced codec cannot hold an id (naming it).
inline std::vector<uint8_t> encode(const int32_t* ids, size_t n, Codec codec = Codec::Auto,
                                   bool checksum = false) {
    const detail::Seq seq{ids, n};
    return detail::encode_frame(&seq, 1, false, codec, checksum);
}

// Several sequences in one frame (Python: tokenwire.encode_many); each holds < 2**32 ids.
inline std::vector<uint8_t> encode_many(const std::vector<std::vector<int32_t>>& seqs,
                                        Codec codec = Codec::Auto, bool checksum = false) {
    std::vector<detail::Seq> v(seqs.size());
    for (size_t k = 0; k < seqs.size(); k++) {
        if (seqs[k].size() > 0xFFFFFFFFu)
            throw std::length_error("sequence " + detail::dec(uint64_t(k)) + " has " +
                                    detail::dec(uint64_t(seqs[k].size())) +
                                    " ids; a multi-sequence frame holds < 2**32 per sequence");
        v[k] = detail::Seq{seqs[k].data(), seqs[k].size()};
    }
    return detail::encode_frame(v.data(), v.size(), true, codec, checksum);
}

}  // namespace
}  // namespace tokenwire

#endif  // TOKENWIRE_WIRE_HPP
