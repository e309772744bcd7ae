# cython: language_level=3
"""tokenwire's native core: the int32 token buffer and the conversions into and out of it.
The layout of the modules: CONTRIBUTING.md, "Building and layout"."""

cimport cython
from cpython.buffer cimport (
    PyBUF_C_CONTIGUOUS,
    PyBUF_FORMAT,
    PyBUF_ND,
    PyBUF_RECORDS_RO,
    PyBUF_SIMPLE,
    PyBUF_STRIDES,
    PyBUF_WRITABLE,
    PyBuffer_Release,
    PyObject_CheckBuffer,
    PyObject_GetBuffer,
)
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_Check, PyLong_CheckExact
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_RawFree, PyMem_RawMalloc
from cpython.list cimport PyList_Check
from cpython.object cimport PyObject
from cpython.pycapsule cimport PyCapsule_New
from cpython.ref cimport Py_DECREF, Py_INCREF
from libc.stdint cimport (
    INT32_MAX,
    INT32_MIN,
    int8_t,
    int16_t,
    int32_t,
    int64_t,
    uint8_t,
    uint16_t,
    uint32_t,
    uint64_t,
    uintptr_t,
)
from libc.stdlib cimport calloc, free, malloc
from libc.string cimport memcmp, memcpy

from tokenwire._byteorder cimport TW_HOST_BIG_ENDIAN, tw_bswap16, tw_bswap32, tw_bswap64
from tokenwire._pyint cimport (
    TW_ITEMS_INTO_CAPSULE,
    pyint_small_value,
    pyints_small_values,
    tw_items_into_fn,
)

import operator
import sys
from collections.abc import Sequence as _Sequence
from pickle import PickleBuffer, UnpicklingError as _UnpicklingError

from tokenwire._envflag import env_flag as _env_flag

from tokenwire.errors import (
    ChecksumError,
    TokenIdError,
    TokenIdOverflowError,
    TokenIdTypeError,
    WireFormatError,
    _describe,
)

cdef extern from "Python.h":
    # Declared with raw pointers: these steal / return references we manage by hand.
    PyObject* PyList_New(Py_ssize_t n)
    void PyList_SET_ITEM(PyObject* lst, Py_ssize_t i, PyObject* o)
    PyObject* PyLong_FromLong(long v)
    Py_ssize_t PySequence_Fast_GET_SIZE(object o)
    PyObject** PySequence_Fast_ITEMS(object o)
    Py_ssize_t PyList_GET_SIZE(object o)
    Py_ssize_t PyTuple_GET_SIZE(object o)
    bint PyTuple_Check(object o)


include "_memory.pxi"
include "_convert.pxi"
include "_tolist.pxi"
include "_tokenvector.pxi"
include "_restore.pxi"
include "_wire.pxi"
include "_inspect.pxi"
include "_picklescan.pxi"
include "_shmring.pxi"
include "_wires.pxi"
