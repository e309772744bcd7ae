/* Reading exact Python ints without a function call per element (include after Python.h).
 *
 * tw_pyint_small_value handles the common case of a list of token ids: exact `int` objects whose
 * value fits one CPython digit (|value| < 2**30, every real token id). It reads CPython's
 * (version-specific) representation directly, which is what makes converting a list several
 * times faster than a PyLong_AsLong loop. Shared by the Cython extension (_pyint.pxd) and the
 * C++ binding headers (tokenwire/python.hpp).
 */
#ifndef TOKENWIRE_PYINT_H
#define TOKENWIRE_PYINT_H

#include <stdint.h>

/* 1 and *out = the value when `o` (an exact int) has a single CPython digit (|value| < 2**30
   with 30-bit digits), else 0. One predictable branch; no range check is needed after it. */
static inline int tw_pyint_small_value(PyObject *o, int32_t *out) {
#if PY_VERSION_HEX >= 0x030C0000
    if (PyUnstable_Long_IsCompact((PyLongObject *)o)) {
        *out = (int32_t)PyUnstable_Long_CompactValue((PyLongObject *)o);
        return PyLong_SHIFT <= 31;
    }
    return 0;
#else
    Py_ssize_t size = Py_SIZE(o);
    if ((size_t)(size + 1) <= 2) {     /* size in {-1, 0, 1} */
        *out = (int32_t)(size * (Py_ssize_t)((PyLongObject *)o)->ob_digit[0]);
        return 1;
    }
    return 0;
#endif
}

#endif /* TOKENWIRE_PYINT_H */
