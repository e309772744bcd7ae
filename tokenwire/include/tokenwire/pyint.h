/* Reading exact Python ints without a function call per element.
 *
 * tw_pyint_small_value handles the common case of a list of token ids: exact `int` objects whose
 * value fits one CPython digit (|value| < 2**30, every real token id). It reads CPython's
 * (version-specific) representation directly, which is what makes converting a list several
 * times faster than a PyLong_AsLong loop. Shared by the Cython extension (_pyint.pxd) and the
 * C++ binding headers (tokenwire/python.hpp).
 */
#ifndef TOKENWIRE_PYINT_H
#define TOKENWIRE_PYINT_H

/* Python.h comes before any system header (it sets feature macros): first here, and a no-op
   when the includer has already included it. */
#ifndef PY_SSIZE_T_CLEAN
#  define PY_SSIZE_T_CLEAN
#endif
#include <Python.h>
#include <stdint.h>

#include "compat.h"

/* 1 and *out = the value when `o` (an exact int) has a single CPython digit (|value| < 2**30
   with 30-bit digits), else 0. One predictable branch; no range check is needed after it.
   Always inlined: at -Os (nanobind's default for extension modules) GCC would otherwise make it
   a call per item. */
TW_INLINE int tw_pyint_small_value(PyObject *o, int32_t *out) {
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

#ifndef TW_PYINT_PREFETCH
/* How many items ahead tw_pyints_small_values prefetches the int object. The loop is bound by
   loading each object's header. Objects laid out in order (a fresh list in a fresh process) are
   streamed by the hardware prefetcher, and there the software prefetch costs a few percent;
   scattered objects (pymalloc pools reused in a long-running process, lists joined from older
   pieces) are not, and there it saves more (as_tokens(list) is timed by `python -m bench
   core`; docs/benchmarks.md). */
#  define TW_PYINT_PREFETCH 16
#endif

#if TW_GNUC
#  define TW_PREFETCH(p) __builtin_prefetch((p), 0, 3)
/* Keeps a pointer in a register across a loop: at -Os GCC reloads &PyLong_Type from the GOT on
   every item (rematerializing is "cheaper" than a live register); `python -m bench cpp` times
   the C++ hand-off built that way. */
#  define TW_KEEP_IN_REGISTER(p) __asm__("" : "+r"(p))
#else
#  define TW_PREFETCH(p) ((void)0)
#  define TW_KEEP_IN_REGISTER(p) ((void)0)
#endif

/* The values of items[0..n) into out while each is an exact int of a single CPython digit
   (tw_pyint_small_value); returns the index of the first item that is not (the caller takes
   its general path for that one and calls again after it), or n. Reads each item pointer and
   each object once; prefetches the object TW_PYINT_PREFETCH items ahead. The one loop of both
   as_tokens(list) (_convert.pxi) and the C++ hand-off (python.hpp), whatever their -O level.
   Never inlined: a call per list costs nothing, and inlined GCC may spill &PyLong_Type
   (docs/design.md, "Why tw_pyints_small_values is never inlined"). */
static TW_NOINLINE Py_ssize_t tw_pyints_small_values(PyObject *const *items, Py_ssize_t n,
                                                     int32_t *out) {
    PyTypeObject *long_type = &PyLong_Type;     /* the PyLong_CheckExact test, hoisted */
    Py_ssize_t i = 0;
    TW_KEEP_IN_REGISTER(long_type);
    for (; i + TW_PYINT_PREFETCH < n; i++) {
        PyObject *o = items[i];
        TW_PREFETCH(items[i + TW_PYINT_PREFETCH]);
        if (Py_TYPE(o) != long_type || !tw_pyint_small_value(o, &out[i])) return i;
    }
    for (; i < n; i++) {
        PyObject *o = items[i];
        if (Py_TYPE(o) != long_type || !tw_pyint_small_value(o, &out[i])) return i;
    }
    return n;
}

/* The rest of a list or tuple of token ids after tw_pyints_small_values stopped: items
   [start, n) of `seq` into out[start..n), every item as tokenwire.as_tokens takes it (int
   subclasses, numpy integer scalars, anything with __index__; bools refused), with as_tokens'
   errors naming the item's index in `seq`. Returns 0, or -1 with a Python error set (out's
   contents then undefined). n is the sequence's length as the caller read it: a list whose
   length is no longer n (changed by an item's __index__, or by another thread while it ran) is
   a RuntimeError. The caller holds the list's critical section on a free-threaded build, as it
   did for the loop before; the function does not begin it again (on CPython 3.13 that would
   suspend the caller's section, letting other threads change the list between the caller's
   loop and this one).

   One function, defined once in tokenwire._core (_convert.pxi, `_items_into`): as_tokens calls
   it directly, and the C++ hand-off (tokenwire/python.hpp) through the capsule
   TW_ITEMS_INTO_CAPSULE, so an odd item late in a long list costs that item, not a second
   conversion of the list. */
typedef int (*tw_items_into_fn)(PyObject *seq, Py_ssize_t start, Py_ssize_t n, int32_t *out);
/* The name carries the signature's version: a binding built against these headers and run
   with a tokenwire whose function differs finds no capsule (and falls back), never a wrong
   function. */
#define TW_ITEMS_INTO_CAPSULE "tokenwire._core._items_into_v1"

#endif /* TOKENWIRE_PYINT_H */
