# cython: language_level=3
"""Reading exact Python ints without a function call per element.

`pyint_small_value` handles the common case of a list of token ids: exact `int` objects whose
value fits one CPython digit (|value| < 2**30, every real token id). It reads CPython's (version-specific) representation
directly, which is what makes `as_tokens(list)` several times faster than a `PyLong_AsLong` loop.
Anything else returns 0 and the caller takes the general path. The C lives in
include/tokenwire/pyint.h, shared with the C++ binding headers.
"""

from cpython.object cimport PyObject
from libc.stdint cimport int32_t

cdef extern from "tokenwire/pyint.h":
    # `o` must be an exact int (PyLong_CheckExact).
    bint pyint_small_value "tw_pyint_small_value"(PyObject* o, int32_t* out) noexcept nogil
    # The values of items[0..n) while each is an exact int of one digit; the index of the first
    # that is not, or n. (The items must stay alive: the caller holds the sequence.)
    Py_ssize_t pyints_small_values "tw_pyints_small_values"(PyObject** items, Py_ssize_t n,
                                                            int32_t* out) noexcept nogil
    # The C type of _convert.pxi's `_items_into` (the rest of a sequence after the loop above
    # stopped), and the name of the capsule that exports it to tokenwire/python.hpp.
    ctypedef int (*tw_items_into_fn)(object seq, Py_ssize_t start, Py_ssize_t n,
                                     int32_t* out) except -1
    const char* TW_ITEMS_INTO_CAPSULE
