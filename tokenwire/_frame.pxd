# cython: language_level=3
"""Frame checks shared with the C++ header: the codec table, the codec/width check and the zstd
frame walk (C in include/tokenwire/frame.h). A check returns -1 and writes its message (the text
of WireFormatError) into a caller buffer of TW_MSG_SIZE bytes."""

from libc.stdint cimport int64_t, uint8_t, uint64_t

cdef extern from "tokenwire/frame.h" nogil:
    enum:
        TW_MSG_SIZE
        TW_CODEC_RAW
        TW_CODEC_U16
        TW_CODEC_PACKED
        TW_NCODECS
    ctypedef struct tw_codec_info:
        const char* name
        unsigned min_width
        unsigned max_width
    const tw_codec_info tw_codecs[]
    int tw_check_codec_width(unsigned codec, unsigned width, char* msg, size_t cap) noexcept
    int64_t tw_zstd_frame_size(const uint8_t* p, size_t n, uint64_t payload_len, char* msg,
                               size_t cap) noexcept
