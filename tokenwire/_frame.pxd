# cython: language_level=3
"""The wire format's C, shared with the C++ header: the magic, the codec table, the header and
count-table parse, the whole-frame checks and the zstd frame walk (include/tokenwire/frame.h);
the codecs' payload kernels (payload.h; pfor's: pfor.h, through frame.h's tw_decode_pfor); the
encoder's rules and its one frame writer over the same table (encode.h). A check
returns -1 (TW_CHECKSUM_MISMATCH for a bad checksum) and writes its message -- the text of
WireFormatError / ChecksumError -- into a caller buffer of TW_MSG_SIZE bytes."""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t

cdef extern from "tokenwire/frame.h" nogil:
    const char* TW_MAGIC
    enum:
        TW_MAGIC_SIZE
        TW_MSG_SIZE
        TW_CHECKSUM_MISMATCH
        TW_WIRE_VERSION
        TW_HEADER_SIZE
        TW_CHECKSUM_SIZE
        TW_ZSTD_LENGTH_SIZE
        TW_FLAG_CHECKSUM
        TW_FLAG_MULTI
        TW_FLAG_ZSTD
        TW_FLAG_RESERVED
        TW_ZSTD_MAX_EXPANSION
        TW_CODEC_RAW
        TW_CODEC_U16
        TW_CODEC_PACKED
        TW_CODEC_PFOR
        TW_NCODECS
        TW_PFOR_LENGTH_SIZE
    ctypedef struct tw_codec_info:
        const char* name
        unsigned min_width
        unsigned max_width
        int64_t min_id
        int64_t max_id
        const char* id_range
    const tw_codec_info tw_codecs[]

    ctypedef struct tw_layout:
        unsigned codec
        unsigned width
        unsigned flags
        uint64_t nseq
        uint64_t total
        size_t payload_off
        size_t payload_len
        size_t stored_len
        size_t nbytes
        const uint8_t* counts
        uint8_t* counts_copy

    int tw_check_codec_width(unsigned codec, unsigned width, char* msg, size_t cap) noexcept
    int tw_parse_prefix(const uint8_t* buf, size_t n, tw_layout* L, char* msg, size_t cap) noexcept
    int tw_parse_rest(const uint8_t* buf, size_t n, tw_layout* L, char* msg, size_t cap) noexcept
    int tw_check_frame(const uint8_t* buf, size_t n, const tw_layout* L, char* msg,
                       size_t cap) noexcept
    int tw_check_padding_bits(const uint8_t* payload, const tw_layout* L, char* msg,
                              size_t cap) noexcept
    size_t tw_payload_size(unsigned width, uint64_t total) noexcept
    int64_t tw_zstd_frame_size(const uint8_t* p, size_t n, uint64_t payload_len, char* msg,
                               size_t cap) noexcept
    int tw_decode_pfor(const uint8_t* buf, const tw_layout* L, int32_t** dst,
                       const size_t* count, char* msg, size_t cap) noexcept


# The pfor kernel's CPU probe (include/tokenwire/pfor.h; frame.h includes it).
cdef extern from "tokenwire/pfor.h" nogil:
    void twpf_init() noexcept


# The codecs' payload kernels: one switch per direction (include/tokenwire/payload.h).
cdef extern from "tokenwire/payload.h" nogil:
    ctypedef struct tw_seq:
        const int32_t* ids
        size_t n

    size_t tw_write_payload(uint8_t* out, const tw_seq* seqs, size_t nseq, unsigned codec,
                            unsigned width) noexcept
    void tw_read_payload(const uint8_t* payload, size_t payload_len, unsigned codec,
                         unsigned width, uint64_t start, size_t n, int32_t* dst) noexcept


# The encoder's rules and its frame writer, read from the same codec table
# (include/tokenwire/encode.h).
cdef extern from "tokenwire/encode.h" nogil:
    enum:
        TW_REQUEST_AUTO
        TW_REQUEST_ZSTD
        TW_ZSTD_LEVEL
        TW_ZSTD_PLAIN
        TW_ZSTD_KEPT
        TW_ZSTD_RETRY

    ctypedef struct tw_frame_plan:
        unsigned codec
        unsigned width
        unsigned flags
        uint64_t count
        uint64_t total
        size_t nseq
        size_t table_len
        size_t payload_off
        size_t payload_len
        size_t stored_len
        size_t nbytes

    int tw_choose_codec(unsigned request, uint32_t orv, uint64_t total, unsigned* width) noexcept
    int64_t tw_codec_misfit(unsigned codec, const int32_t* ids, size_t n, int64_t seq, char* msg,
                            size_t cap) noexcept
    uint32_t tw_seqs_or(const tw_seq* seqs, size_t nseq) noexcept
    int tw_plan_frame(tw_frame_plan* P, unsigned request, uint32_t orv, uint64_t total,
                      size_t nseq, int multi, int checksum) noexcept
    unsigned tw_zstd_codec(uint32_t orv, unsigned* width) noexcept
    int tw_plan_zstd(tw_frame_plan* P, unsigned codec, unsigned width, size_t clen) noexcept
    size_t tw_write_frame(uint8_t* out, const tw_frame_plan* P, const tw_seq* seqs, size_t nseq,
                          const uint8_t* section) noexcept
