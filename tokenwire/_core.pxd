# cython: language_level=3
"""C-level interface of tokenwire's token buffer, for other Cython extensions (tests/test_cimport.py
builds one against this file).

    from tokenwire._core cimport TokenVector, tv_data, tv_len, tv_from_int32

A TokenVector is immutable: `tv_data` points at `tv_len` native int32 ids that stay valid, and
unchanged, for as long as the caller holds a reference to the vector.
"""

cimport cython
from cpython.buffer cimport Py_buffer
from libc.stdint cimport int32_t, uintptr_t


@cython.final
cdef class TokenVector:
    # Read-only from outside: `_data` is either our own allocation (`_owned`, PyMem_RawMalloc)
    # or points into the buffer held by `_view` (a zero-copy view of an immutable exporter, e.g. a
    # `bytes` frame; NULL when there is none). The Py_buffer lives on the heap, only for views, so
    # that an owned vector stays a 64-byte object (decode_many's allocation bound depends on it).
    cdef int32_t* _data
    cdef Py_ssize_t _len
    cdef bint _owned
    cdef Py_buffer* _view
    cdef object __weakref__


# The ids at a 4-aligned address (a view of a frame at an unaligned address gets an aligned
# copy once, on the first call; MemoryError when it cannot).
cdef int32_t* tv_aligned(TokenVector tv) except NULL


cdef inline const int32_t* tv_data(TokenVector tv) except NULL:
    if (<uintptr_t>tv._data) % 4:
        return tv_aligned(tv)
    return tv._data


cdef inline Py_ssize_t tv_len(TokenVector tv) noexcept:
    return tv._len


# A new vector of `n` uninitialized ids; the caller fills `tv_data(...)` before sharing it.
cdef TokenVector tv_alloc(Py_ssize_t n)
# A new vector holding a copy of `n` ids at `src` (one memcpy; releases the GIL when large).
cdef TokenVector tv_from_int32(const int32_t* src, Py_ssize_t n)
# A vector that views `n` ids at `data` inside `view` without copying, taking ownership of the
# (already acquired) buffer `view` -- also when it raises (MemoryError): the buffer is then
# released before it returns. `data` must lie inside the buffer (any address: `tv_data` aligns
# on demand), and the exporter must be immutable.
cdef TokenVector tv_take_view(Py_buffer* view, const int32_t* data, Py_ssize_t n)
