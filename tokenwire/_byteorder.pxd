# cython: language_level=3
"""Byte order and unaligned little-endian loads/stores (after asyncpg's hton.pxd).

The C lives in include/tokenwire/byteorder.h, the one byte-order layer shared with the C kernels
(bitpack.h, crc32c.h) and the C++ header (wire.hpp). All wire data is little-endian; on a
little-endian host the helpers compile to plain loads and stores.
"""

from libc.stdint cimport uint16_t, uint32_t, uint64_t

cdef extern from "tokenwire/byteorder.h" nogil:
    const bint TW_HOST_BIG_ENDIAN
    uint16_t tw_bswap16(uint16_t x) noexcept
    uint32_t tw_bswap32(uint32_t x) noexcept
    uint64_t tw_bswap64(uint64_t x) noexcept
    uint32_t load_le32 "tw_load_le32"(const void* p) noexcept
    uint64_t load_le64 "tw_load_le64"(const void* p) noexcept
    void store_le32 "tw_store_le32"(void* p, uint32_t v) noexcept
    void store_le64 "tw_store_le64"(void* p, uint64_t v) noexcept
