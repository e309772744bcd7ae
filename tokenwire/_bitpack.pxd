# cython: language_level=3
"""Bit-packing kernels of the "packed" and "u16" codecs (C in include/tokenwire/bitpack.h; see
its header comment).

All are `noexcept nogil` and trust their caller: lengths are checked by the frame parser in
_wire.pxi before any of these runs.
"""

from libc.stdint cimport int32_t, uint8_t, uint32_t, uint64_t

cdef extern from "tokenwire/bitpack.h" nogil:
    ctypedef struct twbp_packer:
        uint8_t* out
        uint64_t acc
        unsigned bits

    # Id i of n int32s at p, read through memcpy: p may sit at any address (a view of a frame).
    uint32_t twbp_id(const int32_t* p, size_t i) noexcept
    # Probe the CPU once (module import) for the AVX2 unpack path.
    void twbp_init() noexcept
    int twbp_have_avx2
    # n ids of width w (1..31) from bit s (0..7) of src (srclen bytes, >= ceil((s + n*w)/8)).
    void twbp_unpack(const uint8_t* src, size_t srclen, unsigned s, int32_t* dst, size_t n,
                     unsigned w) noexcept
    # Append n ids, each in [0, 2**w), to the packer's bit stream; then flush the last byte.
    void twbp_pack(twbp_packer* pk, const int32_t* src, size_t n, unsigned w) noexcept
    void twbp_pack_finish(twbp_packer* pk) noexcept
    # OR of all ids: sign bit set iff some id is negative, else bit_length == bit_length(max).
    uint32_t twbp_or_all(const int32_t* src, size_t n) noexcept
    # The same while copying the ids to dst (one read of each: the source may be changing).
    uint32_t twbp_copy_or_all(int32_t* dst, const int32_t* src, size_t n) noexcept
    # u16 codec: little-endian uint16 <-> int32 (dst of narrow16 must be 2-aligned).
    void twbp_narrow16(const int32_t* src, size_t n, uint8_t* dst) noexcept
    void twbp_widen16(const uint8_t* src, size_t n, int32_t* dst) noexcept
