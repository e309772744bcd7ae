# cython: language_level=3
"""CRC-32C (Castagnoli), the frame checksum: hardware CRC32 instruction where the CPU has it,
a slicing-by-8 table otherwise (C in include/tokenwire/crc32c.h). `twcrc_init` must run once before use (module
import does it)."""

from libc.stdint cimport uint32_t

cdef extern from "tokenwire/crc32c.h" nogil:
    void twcrc_init() noexcept
    uint32_t tw_crc32c(const void* data, size_t n) noexcept
    uint32_t tw_crc32c_portable(const void* data, size_t n) noexcept
    int twcrc_have_hw
