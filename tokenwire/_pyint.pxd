# cython: language_level=3
"""Reading exact Python ints without a function call per element.

`pyint_compact_value` handles the common case of a list of token ids: exact `int` objects whose
value fits one or two CPython digits. It reads CPython's (version-specific) representation
directly, which is what makes `as_tokens(list)` several times faster than a `PyLong_AsLong` loop.
Anything else returns 0 and the caller takes the general path.
"""

from cpython.object cimport PyObject
from libc.stdint cimport int64_t

cdef extern from *:
    """
    #include <stdint.h>
    static inline int tw_pyint_compact_value(PyObject *o, int64_t *out) {
    #if PY_VERSION_HEX >= 0x030C0000
        if (PyUnstable_Long_IsCompact((PyLongObject *)o)) {
            *out = (int64_t)PyUnstable_Long_CompactValue((PyLongObject *)o);
            return 1;
        }
        return 0;
    #else
        const digit *d = ((PyLongObject *)o)->ob_digit;
        switch (Py_SIZE(o)) {
        case 0: *out = 0; return 1;
        case 1: *out = (int64_t)d[0]; return 1;
        case -1: *out = -(int64_t)d[0]; return 1;
        case 2: *out = (int64_t)(((uint64_t)d[1] << PyLong_SHIFT) | d[0]); return 1;
        case -2: *out = -(int64_t)(((uint64_t)d[1] << PyLong_SHIFT) | d[0]); return 1;
        default: return 0;
        }
    #endif
    }
    """
    # `o` must be an exact int (PyLong_CheckExact).
    bint pyint_compact_value "tw_pyint_compact_value"(PyObject* o, int64_t* out) noexcept nogil
