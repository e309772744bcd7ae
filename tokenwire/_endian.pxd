# cython: language_level=3
"""Byte order and unaligned loads/stores, as small inline helpers (after asyncpg's hton.pxd).

All wire data is little-endian. On a little-endian host (every platform LLM serving runs on) the
`le*` helpers compile to plain loads and stores; on a big-endian host they swap.
"""

from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy

cdef extern from *:
    """
    #if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    #  define TW_HOST_BIG_ENDIAN 1
    #else
    #  define TW_HOST_BIG_ENDIAN 0
    #endif
    #define tw_bswap16(x) __builtin_bswap16(x)
    #define tw_bswap32(x) __builtin_bswap32(x)
    #define tw_bswap64(x) __builtin_bswap64(x)
    """
    const bint TW_HOST_BIG_ENDIAN
    uint16_t tw_bswap16(uint16_t x) nogil
    uint32_t tw_bswap32(uint32_t x) nogil
    uint64_t tw_bswap64(uint64_t x) nogil


cdef inline uint16_t load_le16(const void* p) noexcept nogil:
    cdef uint16_t v
    memcpy(&v, p, 2)
    return tw_bswap16(v) if TW_HOST_BIG_ENDIAN else v


cdef inline uint32_t load_le32(const void* p) noexcept nogil:
    cdef uint32_t v
    memcpy(&v, p, 4)
    return tw_bswap32(v) if TW_HOST_BIG_ENDIAN else v


cdef inline uint64_t load_le64(const void* p) noexcept nogil:
    cdef uint64_t v
    memcpy(&v, p, 8)
    return tw_bswap64(v) if TW_HOST_BIG_ENDIAN else v


cdef inline void store_le16(void* p, uint16_t v) noexcept nogil:
    if TW_HOST_BIG_ENDIAN:
        v = tw_bswap16(v)
    memcpy(p, &v, 2)


cdef inline void store_le32(void* p, uint32_t v) noexcept nogil:
    if TW_HOST_BIG_ENDIAN:
        v = tw_bswap32(v)
    memcpy(p, &v, 4)


cdef inline void store_le64(void* p, uint64_t v) noexcept nogil:
    if TW_HOST_BIG_ENDIAN:
        v = tw_bswap64(v)
    memcpy(p, &v, 8)
