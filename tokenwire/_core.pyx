# cython: language_level=3
"""tokenwire's native core: the int32 token buffer and the conversions into and out of it.

Layout of this module (kernels compute, wrappers check):
  * TokenVector      -- an immutable, owned, native int32 sequence exporting the buffer protocol;
  * as_tokens        -- every input a submit path sees, converted with exactly one pass in C;
  * tolist           -- list[int] materialization through a process-wide table of int objects;
  * the wire codec   -- in _wire.pxi, included below (kept in its own file, one module).
Kernels take raw pointers / typed memory, hold no references and are `noexcept nogil`; argument
checks and error messages live in the Python-facing wrappers above them.
"""

cimport cython
from cpython.buffer cimport (
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
from cpython.object cimport PyObject
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

from tokenwire._endian cimport TW_HOST_BIG_ENDIAN, tw_bswap16, tw_bswap32, tw_bswap64
from tokenwire._pyint cimport pyint_small_value

import operator
import sys
from collections.abc import Sequence as _Sequence
from pickle import PickleBuffer

from tokenwire.errors import (
    ChecksumError,
    TokenIdError,
    TokenIdOverflowError,
    TokenIdTypeError,
    WireFormatError,
)

cdef extern from "Python.h":
    # Declared with raw pointers: these steal / return references we manage by hand.
    PyObject* PyList_New(Py_ssize_t n)
    void PyList_SET_ITEM(PyObject* lst, Py_ssize_t i, PyObject* o)
    PyObject* PyLong_FromLong(long v)
    Py_ssize_t PySequence_Fast_GET_SIZE(object o)
    PyObject** PySequence_Fast_ITEMS(object o)
    Py_ssize_t PyList_GET_SIZE(object o)

# --------------------------------------------------------------------------------------------
# Constants

#: Inputs at least this many bytes are converted / copied / coded with the GIL released.
#: Releasing is not free for the caller: if another thread is running Python code when the work
#: ends, the caller waits for it to give the GIL back, up to the switch interval (5 ms) and more.
#: Measured here, as_tokens of a 160 KB int32 array beside a busy Python thread, 3000 calls:
#: releasing from 64 KiB gave p50 1.6 us but a worst call of 9.1 ms (1 in 100 to 1 in 3000 runs);
#: holding it, a worst call of 44 us. So only work large enough to dwarf such a wait (8 MiB,
#: about 2M ids) releases it by default; `gil_release_threshold()` tunes it.
cdef Py_ssize_t NOGIL_BYTES = 8 * 1024 * 1024


def gil_release_threshold(nbytes=None):
    """The size in bytes from which conversions, copies and codec kernels release the GIL
    (default 8 MiB). With `nbytes`, set it (0: always release) and return the previous value."""
    global NOGIL_BYTES
    cdef Py_ssize_t previous = NOGIL_BYTES
    if nbytes is not None:
        n = operator.index(nbytes)
        if n < 0:
            raise ValueError(f"gil_release_threshold must be >= 0 bytes, got {n}")
        NOGIL_BYTES = n
    return previous

#: Ids in [0, INT_CACHE_SIZE) are materialized from a process-wide table of int objects (see
#: `tolist`). 2**18 = 262,144 covers every current LLM vocabulary (Gemma's is exactly 262,144).
#: Memory: the pointer table is INT_CACHE_SIZE * 8 bytes = 2 MiB of calloc'ed virtual memory,
#: touched only where ids fall; each distinct id seen adds one int object (32 bytes). A process
#: that has seen every id holds 2 MiB + 8 MiB = 10 MiB; a typical vocabulary's working set far less.
cdef enum:
    _INT_CACHE = 262144
INT_CACHE_SIZE = _INT_CACHE

cdef int32_t _EMPTY[1]               # the data pointer of every empty vector (never NULL)
cdef Py_ssize_t _ITEMSIZE = 4        # strides[0] of every exported buffer
cdef char* _FORMAT_I = "i"           # format of every exported buffer (native int32)
cdef char* _FORMAT_B = "B"           # format of ImmutableBuffer's exports (bytes)
cdef Py_ssize_t _ONE = 1             # strides[0] of ImmutableBuffer's exports
cdef PyObject** _int_table = <PyObject**>calloc(_INT_CACHE, sizeof(PyObject*))
if _int_table == NULL:
    raise MemoryError("tokenwire: cannot allocate the int table")

cdef object _NOTHING = object()     # "no argument" default of TokenVector()


# --------------------------------------------------------------------------------------------
# Allocation

cdef TokenVector tv_alloc(Py_ssize_t n):
    cdef TokenVector tv = TokenVector.__new__(TokenVector)
    if n < 0:
        raise ValueError(f"negative length {n}")
    if n == 0:
        return tv
    if n > (<Py_ssize_t>(<size_t>-1 >> 1)) // 4:
        raise MemoryError(f"cannot allocate {n} token ids")
    # PyMem_Raw*: as fast as malloc (no GIL needed) and visible to tracemalloc and leak tests.
    cdef int32_t* p = <int32_t*>PyMem_RawMalloc(<size_t>n * 4)
    if p == NULL:
        raise MemoryError(f"cannot allocate {n} token ids ({n * 4} bytes)")
    tv._data = p
    tv._len = n
    tv._owned = True
    return tv


cdef TokenVector tv_from_int32(const int32_t* src, Py_ssize_t n):
    cdef TokenVector tv = tv_alloc(n)
    cdef size_t nbytes = <size_t>n * 4
    if n == 0:
        return tv
    if nbytes >= <size_t>NOGIL_BYTES:
        with nogil:
            memcpy(tv._data, src, nbytes)
    else:
        memcpy(tv._data, src, nbytes)
    return tv


cdef TokenVector tv_take_view(Py_buffer* view, const int32_t* data, Py_ssize_t n):
    cdef TokenVector tv
    cdef Py_buffer* held = <Py_buffer*>PyMem_Malloc(sizeof(Py_buffer))
    if held == NULL:
        PyBuffer_Release(view)
        raise MemoryError("cannot allocate a buffer view")
    memcpy(held, view, sizeof(Py_buffer))
    try:
        tv = TokenVector.__new__(TokenVector)
    except BaseException:
        PyBuffer_Release(held)
        PyMem_Free(held)
        raise
    tv._view = held
    if n > 0:
        tv._data = <int32_t*>data
        tv._len = n
    return tv


# --------------------------------------------------------------------------------------------
# Immutable sources (the zero-copy rule)

@cython.auto_pickle(False)
cdef class ImmutableBuffer:
    """A promise that the memory behind `obj` never changes while this object (or a view made
    from it) is alive, so tokenwire may view it instead of copying.

    Nothing can check such a promise, which is why tokenwire trusts only `bytes`, `TokenVector`
    and this wrapper. The case it exists for is a received pyzmq `Frame` (libzmq never rewrites
    a received message, but a `zmq.Frame` built over a bytearray looks the same, so frames are
    not trusted by type): `tokenwire.transport.recv_pyobj_oob` wraps the frames it receives, and
    `decode(ImmutableBuffer(frame))` decodes one without a copy. It exports the bytes read-only.
    """

    cdef Py_buffer _view
    cdef bint _held
    cdef object __weakref__

    def __cinit__(self, obj):
        PyObject_GetBuffer(obj, &self._view, PyBUF_SIMPLE)
        self._held = True

    def __dealloc__(self):
        if self._held:
            PyBuffer_Release(&self._view)

    def __getbuffer__(self, Py_buffer* buffer, int flags):
        if flags & PyBUF_WRITABLE:
            raise BufferError("ImmutableBuffer is read-only")
        buffer.buf = self._view.buf
        buffer.obj = self
        buffer.len = self._view.len
        buffer.readonly = 1
        buffer.itemsize = 1
        buffer.format = _FORMAT_B if flags & PyBUF_FORMAT else NULL
        buffer.ndim = 1
        buffer.shape = &self._view.len if flags & PyBUF_ND else NULL
        buffer.strides = &_ONE if flags & PyBUF_STRIDES else NULL
        buffer.suboffsets = NULL
        buffer.internal = NULL

    def __releasebuffer__(self, Py_buffer* buffer):
        pass

    def __len__(self):
        return self._view.len

    def __repr__(self):
        return f"ImmutableBuffer(<{self._view.len} bytes>)"


cpdef bint is_immutable_source(object obj):
    """True when the memory behind `obj` can never change, so a TokenVector may view it.

    A read-only flag is not enough (a read-only memoryview of a bytearray still changes), so
    this follows memoryviews and PickleBuffers to the object that owns the memory and accepts
    `bytes`, `TokenVector` and `ImmutableBuffer` (an explicit promise; see there).
    """
    cdef object t = type(obj)
    while t is memoryview or t is PickleBuffer:
        # memoryview(PickleBuffer(x)).obj is x: both wrappers lead to the owner of the memory.
        obj = (<memoryview>obj).obj if t is memoryview else memoryview(obj).obj
        t = type(obj)
    return t is bytes or t is TokenVector or t is ImmutableBuffer


# --------------------------------------------------------------------------------------------
# Kernels (no Python objects, no errors: they report the first bad index, or -1)

ctypedef fused src_int:
    int8_t
    uint8_t
    int16_t
    uint16_t
    int32_t
    uint32_t
    int64_t
    uint64_t


@cython.boundscheck(False)
@cython.wraparound(False)
cdef inline src_int _bswap(src_int v) noexcept nogil:
    if src_int is int16_t or src_int is uint16_t:
        return <src_int>tw_bswap16(<uint16_t>v)
    elif src_int is int32_t or src_int is uint32_t:
        return <src_int>tw_bswap32(<uint32_t>v)
    elif src_int is int64_t or src_int is uint64_t:
        return <src_int>tw_bswap64(<uint64_t>v)
    else:
        return v


cdef inline bint _in_int32(src_int v) noexcept nogil:
    if src_int is int64_t:
        # v fits int32 iff its high word is the sign extension of its low word; written with
        # 32-bit operations so that SSE2 (no 64-bit compare) can vectorize the loops below.
        return <int32_t>(<uint64_t>v >> 32) == (<int32_t>v >> 31)
    elif src_int is uint32_t or src_int is uint64_t:
        return v <= <src_int>INT32_MAX
    else:
        return True


@cython.boundscheck(False)
@cython.wraparound(False)
cdef Py_ssize_t _narrow_contiguous(const src_int* src, Py_ssize_t n, int32_t* dst,
                                   uint64_t* bad) noexcept nogil:
    # Branch-free over the whole input so that -O3 vectorizes it; the (rare) failure is located
    # afterwards. `dst` may hold garbage on failure: the caller drops it.
    cdef Py_ssize_t i
    cdef src_int v
    cdef bint ok = True
    for i in range(n):
        v = src[i]                      # one read: the value checked is the value stored
        ok &= _in_int32(v)
        dst[i] = <int32_t>v
    if ok:
        return -1
    # Another thread may write the source while the GIL is released, so the locating pass may no
    # longer see the bad value: then convert again with one read per id, each checked before it
    # is stored -- every id returned was in the source and in range when it was read.
    for i in range(n):
        v = src[i]
        if not _in_int32(v):
            bad[0] = <uint64_t>v
            return i
        dst[i] = <int32_t>v
    return -1


@cython.boundscheck(False)
@cython.wraparound(False)
cdef Py_ssize_t _narrow_strided(const char* src, Py_ssize_t n, Py_ssize_t stride, bint swap,
                                int32_t* dst, uint64_t* bad, src_int tag) noexcept nogil:
    cdef Py_ssize_t i
    cdef src_int v
    for i in range(n):
        memcpy(&v, src + i * stride, sizeof(src_int))
        if swap:
            v = _bswap(v)
        if not _in_int32(v):
            bad[0] = <uint64_t>v
            return i
        dst[i] = <int32_t>v
    return -1


ctypedef fused wide_int:
    int64_t
    uint64_t

cdef enum:
    _WIDE_CHUNK = 512           # 4 KiB of 64-bit ids: stays in L1 between the copy and the check


@cython.boundscheck(False)
@cython.wraparound(False)
cdef Py_ssize_t _narrow_wide(const char* src, Py_ssize_t n, Py_ssize_t stride, bint swap,
                             int32_t* dst, uint64_t* bad, wide_int tag) noexcept nogil:
    # A 64-bit id is checked on its two halves, which a compiler may load separately: with a
    # writer racing (the GIL released) they could come from different writes and pass as a value
    # never written. So each chunk is first copied into private memory (one read of each id), and
    # checked and narrowed from there, where nothing else writes.
    cdef wide_int buf[_WIDE_CHUNK]
    cdef Py_ssize_t start = 0, m, j, r
    while start < n:
        m = min(<Py_ssize_t>_WIDE_CHUNK, n - start)
        if stride == sizeof(wide_int):
            memcpy(buf, src + start * stride, <size_t>m * sizeof(wide_int))
        else:
            for j in range(m):
                memcpy(&buf[j], src + (start + j) * stride, sizeof(wide_int))
        if swap:
            r = _narrow_strided(<const char*>buf, m, sizeof(wide_int), True, dst + start, bad, tag)
        else:
            r = _narrow_contiguous(<const wide_int*>buf, m, dst + start, bad)
        if r >= 0:
            return start + r
        start += m
    return -1


@cython.boundscheck(False)
@cython.wraparound(False)
cdef Py_ssize_t _first_outside_vocab(const int32_t* p, Py_ssize_t n, uint32_t vocab) noexcept nogil:
    # Unsigned compare: a negative id wraps to >= 2**31 >= vocab. Branch-free first pass.
    cdef Py_ssize_t i
    cdef bint ok = True
    for i in range(n):
        ok &= <uint32_t>p[i] < vocab
    if ok:
        return -1
    for i in range(n):
        if <uint32_t>p[i] >= vocab:
            return i
    return -1


# --------------------------------------------------------------------------------------------
# Buffer-format parsing

cdef enum:
    KIND_BAD = 0
    KIND_SIGNED = 1
    KIND_UNSIGNED = 2


cdef int _parse_int_format(const char* fmt, Py_ssize_t itemsize, bint* swap):
    """KIND_SIGNED / KIND_UNSIGNED for a single integer item format, KIND_BAD otherwise."""
    if fmt == NULL:          # no format means unsigned bytes ("B")
        swap[0] = False
        return KIND_UNSIGNED if itemsize == 1 else KIND_BAD
    cdef char order = fmt[0]
    cdef bint big
    if order == b'@' or order == b'=' or order == b'<' or order == b'>' or order == b'!':
        fmt += 1
        big = (order == b'>' or order == b'!') or (order != b'<' and TW_HOST_BIG_ENDIAN)
    else:
        big = TW_HOST_BIG_ENDIAN
    swap[0] = big != TW_HOST_BIG_ENDIAN and itemsize > 1
    if fmt[0] == 0 or fmt[1] != 0:
        return KIND_BAD
    if itemsize not in (1, 2, 4, 8):
        return KIND_BAD
    cdef char c = fmt[0]
    if c in b'bhilqn':
        return KIND_SIGNED
    if c in b'BHILQN':
        return KIND_UNSIGNED
    return KIND_BAD


cdef enum:
    IDS_NOT_BUFFER = 0      # not a buffer of ids (or bytes / bytearray): nothing acquired
    IDS_OTHER = 1           # acquired: some other format, itemsize or shape
    IDS_INT32_STRIDED = 2   # acquired: native-order 1-D int32, any stride
    IDS_INT32 = 3           # acquired: native-order 1-D int32, C-contiguous


cdef int _acquire_ids(object obj, Py_buffer* view) except -1:
    """The one place that takes a buffer of token ids and decides whether it is native 1-D int32
    (usable as int32_t in place). Acquires `obj`'s buffer into `view` (PyBUF_RECORDS_RO) unless
    it returns IDS_NOT_BUFFER; the caller releases it. bytes and bytearray are text or frames,
    never ids: IDS_NOT_BUFFER."""
    cdef bint swap = False
    if not PyObject_CheckBuffer(obj) or isinstance(obj, (bytes, bytearray)):
        return IDS_NOT_BUFFER
    PyObject_GetBuffer(obj, view, PyBUF_RECORDS_RO)
    if not (view.ndim == 1 and view.itemsize == 4
            and _parse_int_format(view.format, 4, &swap) == KIND_SIGNED and not swap):
        return IDS_OTHER
    return IDS_INT32 if view.strides == NULL or view.strides[0] == 4 else IDS_INT32_STRIDED


cdef str _format_str(const char* fmt):
    return "B" if fmt == NULL else (<bytes>fmt).decode("ascii", "replace")


cdef tuple _shape_of(Py_buffer* view):
    if view.shape == NULL:
        return (view.len // view.itemsize,) if view.ndim == 1 else ()
    return tuple([view.shape[i] for i in range(view.ndim)])


# --------------------------------------------------------------------------------------------
# Conversions (wrappers: they check, then call a kernel)

cdef str _short_repr(object v):
    s = repr(v)
    return s if len(s) <= 40 else s[:18] + "..." + s[len(s) - 18:]


cdef object _overflow(Py_ssize_t index, object value):
    return TokenIdOverflowError(
        f"token id at index {index} is {_short_repr(value)}, "
        f"outside int32 [-2147483648, 2147483647]"
    )


cdef TokenVector _from_buffer(object obj):
    cdef Py_buffer view
    cdef bint swap = False
    cdef int kind
    cdef Py_ssize_t n, stride, bad_index = -1, itemsize
    cdef uint64_t bad = 0
    cdef TokenVector tv
    cdef const char* src
    cdef int ids = _acquire_ids(obj, &view)
    if ids == IDS_NOT_BUFFER:       # _convert rejects bytes and bytearray before it gets here
        raise TokenIdTypeError(f"token ids must be integers, got {type(obj).__name__}")
    try:
        kind = _parse_int_format(view.format, view.itemsize, &swap)
        if kind == KIND_BAD:
            raise TokenIdTypeError(
                f"token ids must be integers, got a buffer of format {_format_str(view.format)!r} "
                f"(itemsize {view.itemsize})"
            )
        if (type(obj) is memoryview and view.itemsize == 1
                and _format_str(view.format) in ("B", "@B", "c")):
            raise TokenIdTypeError(
                "as_tokens() does not take raw bytes (a memoryview of format 'B'); "
                "use tokenwire.decode() for wire frames, or memoryview.cast('i') for native int32"
            )
        if view.ndim != 1:
            raise TokenIdError(f"token ids must be 1-D, got shape {_shape_of(&view)}")
        itemsize = view.itemsize
        n = view.shape[0] if view.shape != NULL else view.len // itemsize
        stride = view.strides[0] if view.strides != NULL else itemsize
        src = <const char*>view.buf
        if ids == IDS_INT32:
            # The hot path: a native int32 C-contiguous buffer is exactly one memcpy.
            return tv_from_int32(<const int32_t*>src, n)
        tv = tv_alloc(n)
        if n == 0:
            return tv
        if n * itemsize >= NOGIL_BYTES:
            with nogil:
                bad_index = _dispatch_narrow(src, n, stride, itemsize, kind, swap, tv._data, &bad)
        else:
            bad_index = _dispatch_narrow(src, n, stride, itemsize, kind, swap, tv._data, &bad)
        if bad_index >= 0:
            raise _overflow(bad_index, <int64_t>bad if kind == KIND_SIGNED else bad)
        return tv
    finally:
        PyBuffer_Release(&view)


cdef inline Py_ssize_t _narrow_as(const char* src, Py_ssize_t n, Py_ssize_t stride, bint swap,
                                  int32_t* dst, uint64_t* bad, src_int tag) noexcept nogil:
    # The kernel for items of type src_int: 64-bit items chunk through private memory, aligned
    # contiguous native items take the vectorized loop, the rest one strided read per id.
    # (Native int32 arrives here only strided, misaligned or swapped: contiguous is a memcpy.)
    if src_int is int64_t or src_int is uint64_t:
        return _narrow_wide(src, n, stride, swap, dst, bad, tag)
    else:
        if (src_int is not int32_t and stride == sizeof(src_int) and not swap
                and (<uintptr_t>src) % sizeof(src_int) == 0):
            return _narrow_contiguous(<const src_int*>src, n, dst, bad)
        return _narrow_strided(src, n, stride, swap, dst, bad, tag)


cdef Py_ssize_t _dispatch_narrow(const char* src, Py_ssize_t n, Py_ssize_t stride,
                                 Py_ssize_t itemsize, int kind, bint swap, int32_t* dst,
                                 uint64_t* bad) noexcept nogil:
    # (kind, itemsize) -> the item type; everything else is decided once, in _narrow_as.
    if kind == KIND_SIGNED:
        if itemsize == 1:
            return _narrow_as(src, n, stride, swap, dst, bad, <int8_t>0)
        if itemsize == 2:
            return _narrow_as(src, n, stride, swap, dst, bad, <int16_t>0)
        if itemsize == 4:
            return _narrow_as(src, n, stride, swap, dst, bad, <int32_t>0)
        return _narrow_as(src, n, stride, swap, dst, bad, <int64_t>0)
    if itemsize == 1:
        return _narrow_as(src, n, stride, swap, dst, bad, <uint8_t>0)
    if itemsize == 2:
        return _narrow_as(src, n, stride, swap, dst, bad, <uint16_t>0)
    if itemsize == 4:
        return _narrow_as(src, n, stride, swap, dst, bad, <uint32_t>0)
    return _narrow_as(src, n, stride, swap, dst, bad, <uint64_t>0)


cdef int32_t _item_slow(object o, Py_ssize_t i) except? -1:
    """One element that is not a compact exact int: int subclasses, numpy scalars, big ints."""
    cdef int overflow = 0
    cdef long long v
    if isinstance(o, bool) or type(o).__name__ in ("bool", "bool_"):
        raise TokenIdTypeError(f"token id at index {i} must be an int, got bool")
    if not PyLong_Check(o):
        if not hasattr(type(o), "__index__"):
            raise TokenIdTypeError(f"token id at index {i} must be an int, got {type(o).__name__}")
        try:
            o = operator.index(o)
        except TypeError as e:
            # The element's own __index__ failed: keep its error (chained) and say where.
            raise TokenIdTypeError(
                f"token id at index {i}: {type(o).__name__}.__index__ raised TypeError: {e}"
            ) from e
    v = PyLong_AsLongLongAndOverflow(o, &overflow)
    if overflow or v < INT32_MIN or v > INT32_MAX:
        raise _overflow(i, int(o))
    return <int32_t>v


cdef TokenVector _from_sequence(object seq):
    """A list or tuple of ints: one typed C loop, no intermediate object."""
    cdef Py_ssize_t n = PySequence_Fast_GET_SIZE(seq)
    cdef TokenVector tv = tv_alloc(n)
    cdef int32_t* out = tv._data
    cdef PyObject** items = PySequence_Fast_ITEMS(seq)
    cdef PyObject* o
    cdef bint is_list = isinstance(seq, list)
    cdef Py_ssize_t i
    for i in range(n):
        o = items[i]
        if PyLong_CheckExact(<object>o) and pyint_small_value(o, &out[i]):
            continue
        out[i] = _item_slow(<object>o, i)
        if is_list:
            # _item_slow may have run Python code (an __index__) that resized the list.
            if PyList_GET_SIZE(seq) != n:
                raise RuntimeError("list changed size during as_tokens()")
            items = PySequence_Fast_ITEMS(seq)
    return tv


cdef TokenVector _from_range(object r):
    cdef Py_ssize_t n = len(r)
    if n == 0:
        return tv_alloc(0)
    start, step = r.start, r.step
    # Find the first element outside int32 (if any) before allocating anything.
    if not (INT32_MIN <= start <= INT32_MAX):
        raise _overflow(0, start)
    limit = INT32_MAX if step > 0 else INT32_MIN
    first_bad = (limit - start) // step + 1
    if first_bad < n:
        raise _overflow(first_bad, start + first_bad * step)
    cdef TokenVector tv = tv_alloc(n)
    # With two or more ids in int32 the step fits in 64 bits; with one it is never used (and may
    # be any size: range(5, 6, 10**30) is [5]).
    cdef int64_t s = start, d = step if n > 1 else 0
    cdef Py_ssize_t i
    for i in range(n):
        tv._data[i] = <int32_t>(s + i * d)
    return tv


cdef object _numpy():
    """numpy if it has been imported; nothing here imports it for inputs that are not arrays."""
    return sys.modules.get("numpy")


cdef TokenVector _convert(object obj):
    """A fresh TokenVector from anything as_tokens accepts (never `obj` itself)."""
    if isinstance(obj, (list, tuple)):
        return _from_sequence(obj)
    if type(obj) is TokenVector:
        return tv_from_int32((<TokenVector>obj)._data, (<TokenVector>obj)._len)
    if isinstance(obj, (bytes, bytearray, str)):
        raise TokenIdTypeError(
            f"as_tokens() does not take {type(obj).__name__}: text is not token ids, and wire "
            f"frames are read with tokenwire.decode()"
        )
    np = _numpy()
    if np is not None and isinstance(obj, np.ndarray):
        if obj.dtype.kind not in "iu":
            raise TokenIdTypeError(f"token ids must be integers, got an array of dtype {obj.dtype}")
        if obj.ndim != 1:
            raise TokenIdError(f"token ids must be 1-D, got shape {obj.shape}")
        return _from_buffer(obj)
    if PyObject_CheckBuffer(obj):
        return _from_buffer(obj)
    if isinstance(obj, range):
        return _from_range(obj)
    if isinstance(obj, (set, frozenset, dict)):
        raise TokenIdTypeError(f"token ids must be ordered; got an unordered {type(obj).__name__}")
    if hasattr(type(obj), "__array__"):
        import numpy
        arr = numpy.asarray(obj)
        if isinstance(arr, numpy.ndarray):
            return _convert(arr)
    try:
        it = iter(obj)
    except TypeError:
        raise TokenIdTypeError(
            f"as_tokens() expected a sequence, buffer or iterable of ints, "
            f"got {type(obj).__name__}"
        ) from None
    return _from_sequence(list(it))


cdef uint32_t _vocab_limit(object vocab_size) except 0:
    v = operator.index(vocab_size)
    if v <= 0:
        raise ValueError(f"vocab_size must be positive, got {v}")
    return <uint32_t>min(v, 2 ** 31)


cdef int _check_vocab(TokenVector tv, object vocab_size, object error=TokenIdError,
                      Py_ssize_t seq=-1, uint32_t limit=0) except -1:
    """The one vocabulary check: every id of `tv` in [0, vocab_size), else `error` (the caller's
    choice: TokenIdError for as_tokens, WireFormatError for decoders) naming the sequence (when
    `seq` >= 0), index and value. `limit`, when nonzero, is `_vocab_limit(vocab_size)` already
    computed. The kernel runs without the GIL from NOGIL_BYTES, like every other kernel."""
    cdef Py_ssize_t bad
    if limit == 0:
        limit = _vocab_limit(vocab_size)
    if tv._len * 4 >= NOGIL_BYTES:
        with nogil:
            bad = _first_outside_vocab(tv._data, tv._len, limit)
    else:
        bad = _first_outside_vocab(tv._data, tv._len, limit)
    if bad >= 0:
        where = f"sequence {seq}: " if seq >= 0 else ""
        raise error(
            f"{where}token id at index {bad} is {tv._data[bad]}, "
            f"outside the vocabulary [0, {vocab_size})"
        )
    return 0


def as_tokens(obj, *, vocab_size=None):
    """Convert token ids to a TokenVector: the one conversion every submit path calls.

    * a 1-D C-contiguous native int32 buffer (ndarray, memoryview, array.array('i')): one memcpy,
      with the GIL released for large inputs; a TokenVector is returned as it is (immutable);
    * strided int32 buffers and other integer buffers (int8..uint64, either byte order): one pass
      in C with a range check;
    * list / tuple of ints (int subclasses and numpy integer scalars included): one C loop;
    * range and other iterables of ints: accepted.

    Raises OverflowError (a value outside int32, naming the index and value), TypeError (a
    non-integer element or dtype, bool included; bytes/bytearray/str), ValueError (a 0-d or n-d
    array, naming the shape; with `vocab_size`, an id < 0 or >= vocab_size). Nothing partial is
    ever returned.
    """
    cdef TokenVector tv = obj if type(obj) is TokenVector else _convert(obj)
    if vocab_size is not None:
        _check_vocab(tv, vocab_size)
    return tv


# --------------------------------------------------------------------------------------------
# list materialization

@cython.boundscheck(False)
@cython.wraparound(False)
cdef list _tolist_strided(const char* src, Py_ssize_t n, Py_ssize_t stride):
    cdef PyObject* lst = PyList_New(n)
    cdef PyObject* o
    cdef int32_t v
    cdef Py_ssize_t i
    if lst == NULL:
        raise MemoryError()
    for i in range(n):
        memcpy(&v, src + i * stride, 4)
        if <uint32_t>v < _INT_CACHE:
            o = _int_table[v]
            if o == NULL:
                o = PyLong_FromLong(v)
                if o == NULL:
                    Py_DECREF(<object>lst)   # items not yet set are NULL: list dealloc skips them
                    raise MemoryError()
                _int_table[v] = o              # the table keeps this reference forever
            Py_INCREF(<object>o)
        else:
            o = PyLong_FromLong(v)
            if o == NULL:
                Py_DECREF(<object>lst)
                raise MemoryError()
        PyList_SET_ITEM(lst, i, o)
    result = <list>lst
    Py_DECREF(<object>lst)
    return result


def tolist(obj):
    """Token ids as a `list[int]`, built in C.

    `obj` is a TokenVector or any 1-D int32 buffer (no copy is made first); other inputs go
    through `as_tokens`. Ids in [0, 262144) reuse a process-wide table of int objects, which is
    what makes this several times faster than `ndarray.tolist()`; see INT_CACHE_SIZE.
    """
    cdef Py_buffer view
    if type(obj) is TokenVector:
        return (<TokenVector>obj).tolist()
    cdef int ids = _acquire_ids(obj, &view)
    if ids != IDS_NOT_BUFFER:
        try:
            if ids >= IDS_INT32_STRIDED:
                return _tolist_strided(<const char*>view.buf, view.shape[0], view.strides[0])
        finally:
            PyBuffer_Release(&view)
    return as_tokens(obj).tolist()


cdef Py_ssize_t _tv_find(TokenVector self, object value, Py_ssize_t start, Py_ssize_t stop) except -2:
    """Index of the first `value` in [start, stop), or -1 (also for non-int values)."""
    cdef int64_t v
    cdef Py_ssize_t i
    if isinstance(value, bool):
        value = int(value)
    try:
        value = operator.index(value)
    except TypeError:
        return -1
    if not (INT32_MIN <= value <= INT32_MAX):
        return -1
    v = value
    for i in range(start, stop):
        if self._data[i] == v:
            return i
    return -1


# --------------------------------------------------------------------------------------------
# TokenVector

cdef class TokenVector:
    """An immutable sequence of int32 token ids in native memory.

    The Python-side twin of an engine's `std::vector<int32>`: `numpy.asarray(tv)` and
    `memoryview(tv)` are zero-copy read-only views (format "i"), slicing returns a TokenVector,
    `tolist()` builds a `list[int]` in C, and pickling sends the ids as one bytes payload
    (out-of-band at protocol 5). Build one with `TokenVector(ids)` or `as_tokens(ids)`.
    """

    def __cinit__(self, tokens=_NOTHING, *, vocab_size=None):
        self._data = _EMPTY
        self._len = 0
        self._owned = False
        self._view = NULL
        if tokens is _NOTHING:
            return
        cdef TokenVector src = _convert(tokens)
        if vocab_size is not None:
            _check_vocab(src, vocab_size)
        # Take over the fresh vector's storage (nobody else can see it).
        self._data, self._len, self._owned, self._view = src._data, src._len, src._owned, src._view
        src._data, src._len, src._owned, src._view = _EMPTY, 0, False, NULL

    def __dealloc__(self):
        if self._owned:
            PyMem_RawFree(self._data)
        if self._view != NULL:
            PyBuffer_Release(self._view)
            PyMem_Free(self._view)

    @staticmethod
    def frombuffer(data):
        """A TokenVector from raw little-endian int32 bytes (any C-contiguous bytes-like object).

        Zero-copy when `data` is immutable and 4-byte aligned (see `is_immutable_source`): the
        vector views `data` and keeps it alive. Otherwise one memcpy, so later writes to a mutable
        source never show through. Raises ValueError when the byte count is not a multiple of 4.
        """
        cdef Py_buffer view
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        cdef Py_ssize_t n = view.len // 4
        cdef TokenVector tv
        cdef Py_ssize_t i
        cdef bint moved = False
        try:
            if view.len % 4:
                raise TokenIdError(
                    f"int32 token data must be a multiple of 4 bytes, got {view.len} bytes"
                )
            if (not TW_HOST_BIG_ENDIAN and (<uintptr_t>view.buf) % 4 == 0
                    and is_immutable_source(data)):
                moved = True         # the buffer now belongs to tv_take_view (even if it raises)
                return tv_take_view(&view, <const int32_t*>view.buf, n)
            tv = tv_from_int32(<const int32_t*>view.buf, n)
            if TW_HOST_BIG_ENDIAN:
                for i in range(n):
                    tv._data[i] = <int32_t>tw_bswap32(<uint32_t>tv._data[i])
            return tv
        finally:
            if not moved:
                PyBuffer_Release(&view)

    # -- buffer protocol -----------------------------------------------------------------------

    def __getbuffer__(self, Py_buffer* buffer, int flags):
        if flags & PyBUF_WRITABLE:
            raise BufferError("TokenVector is read-only")
        buffer.buf = <void*>self._data
        buffer.obj = self
        buffer.len = self._len * 4
        buffer.readonly = 1
        buffer.itemsize = 4
        buffer.format = _FORMAT_I if flags & PyBUF_FORMAT else NULL
        buffer.ndim = 1
        buffer.shape = &self._len if flags & PyBUF_ND else NULL
        buffer.strides = &_ITEMSIZE if flags & PyBUF_STRIDES else NULL
        buffer.suboffsets = NULL
        buffer.internal = NULL

    # -- sequence ------------------------------------------------------------------------------

    def __len__(self):
        return self._len

    def __getitem__(self, key):
        cdef Py_ssize_t i, start, stop, step, n
        if isinstance(key, slice):
            # Python ints first: the step may be huge (tv[::10**20] is one element, like a list).
            py_start, py_stop, py_step = key.indices(self._len)
            n = len(range(py_start, py_stop, py_step))
            start = py_start
            step = py_step if n > 1 else 1    # n >= 2 ids inside the vector: |step| < len
            if step == 1:
                return tv_from_int32(self._data + start, n)
            tv = tv_alloc(n)
            for i in range(n):
                (<TokenVector>tv)._data[i] = self._data[start + i * step]
            return tv
        try:
            i = operator.index(key)
        except TypeError:
            raise TypeError(
                f"TokenVector indices must be integers or slices, not {type(key).__name__}"
            ) from None
        except OverflowError:
            raise IndexError(f"TokenVector index {key} out of range for length {self._len}") from None
        if i < 0:
            i += self._len
        if i < 0 or i >= self._len:
            raise IndexError(f"TokenVector index {key} out of range for length {self._len}")
        return self._data[i]

    def __iter__(self):
        cdef Py_ssize_t i
        for i in range(self._len):
            yield self._data[i]

    def __reversed__(self):
        cdef Py_ssize_t i
        for i in range(self._len - 1, -1, -1):
            yield self._data[i]

    def __contains__(self, value):
        return _tv_find(self, value, 0, self._len) >= 0

    def count(self, value):
        """Number of occurrences of `value`."""
        cdef Py_ssize_t c = 0, i = _tv_find(self, value, 0, self._len)
        cdef int32_t v
        if i < 0:
            return 0
        v = self._data[i]
        for i in range(i, self._len):
            c += self._data[i] == v
        return c

    def index(self, value, start=0, stop=None):
        """Index of the first occurrence of `value` in [start, stop); ValueError if absent."""
        cdef Py_ssize_t a, b
        a, b, _ = slice(start, stop).indices(self._len)
        cdef Py_ssize_t i = _tv_find(self, value, a, b) if a < b else -1
        if i < 0:
            raise ValueError(f"{value!r} is not in TokenVector")
        return i

    # -- comparison ----------------------------------------------------------------------------

    def __eq__(self, other):
        cdef TokenVector o
        cdef Py_ssize_t i
        cdef PyObject* item
        cdef int32_t v
        if type(other) is TokenVector:
            o = other
            return self._len == o._len and memcmp(self._data, o._data, <size_t>self._len * 4) == 0
        if isinstance(other, (list, tuple)):
            # The real size, never len(): a subclass's __len__ may lie. Items are borrowed, so a
            # Python-level comparison holds its own reference (an __eq__ may remove the item).
            if PySequence_Fast_GET_SIZE(other) != self._len:
                return False
            for i in range(self._len):
                if PySequence_Fast_GET_SIZE(other) != self._len:    # resized by an __eq__
                    return False
                item = PySequence_Fast_ITEMS(other)[i]
                if PyLong_CheckExact(<object>item) and pyint_small_value(item, &v):
                    if v != self._data[i]:
                        return False
                    continue
                element = <object>item
                if not (element == self._data[i]):
                    return False
            return PySequence_Fast_GET_SIZE(other) == self._len
        return NotImplemented

    def __ne__(self, other):
        r = self.__eq__(other)
        return r if r is NotImplemented else not r

    __hash__ = None    # equal to lists, which are unhashable; like ndarray

    # -- conversions ---------------------------------------------------------------------------

    def tolist(self):
        """The ids as a `list[int]`, built in C (see tokenwire.tolist)."""
        return _tolist_strided(<const char*>self._data, self._len, 4)

    def tobytes(self):
        """The ids as little-endian int32 bytes (4 * len(self) bytes)."""
        cdef bytes out = PyBytes_FromStringAndSize(<const char*>self._data, self._len * 4)
        cdef int32_t* p
        cdef Py_ssize_t i
        if TW_HOST_BIG_ENDIAN:
            p = <int32_t*>PyBytes_AS_STRING(out)
            for i in range(self._len):
                p[i] = <int32_t>tw_bswap32(<uint32_t>p[i])
        return out

    @property
    def nbytes(self):
        """Size of the ids in bytes (4 per id)."""
        return self._len * 4

    @property
    def itemsize(self):
        return 4

    def __sizeof__(self):
        return sizeof(TokenVector) + (self._len * 4 if self._owned else 0)

    def __repr__(self):
        if self._len <= 8:
            return f"TokenVector({self.tolist()})"
        head = ", ".join([str(self._data[i]) for i in range(3)])
        tail = ", ".join([str(self._data[i]) for i in range(self._len - 3, self._len)])
        return f"TokenVector([{head}, ..., {tail}], len={self._len})"

    # -- pickling and copying ------------------------------------------------------------------

    def __reduce_ex__(self, protocol):
        if protocol >= 5:
            # Out-of-band when the pickler has a buffer_callback, in-band bytes otherwise.
            return _restore_token_vector, (PickleBuffer(self),)
        if protocol >= 3:
            return _restore_token_vector, (self.tobytes(),)
        # Protocols 0-2 have no bytes opcode: pickle spells bytes as `_codecs.encode(...)`, a
        # global a restricted unpickler would have to allow. A latin-1 str maps each byte to
        # one code point and needs no global at all (see tokenwire.PICKLE_GLOBALS).
        return _restore_token_vector, (self.tobytes().decode("latin-1"),)

    def __reduce__(self):
        return self.__reduce_ex__(2)

    # -- + and * (the rule is written once, above _tv_concat) ----------------------------------

    def __add__(self, other):
        return _tv_concat(self, other)

    def __radd__(self, other):
        return _tv_concat(other, self)

    def __mul__(self, times):
        return _tv_repeat(self, times)

    def __rmul__(self, times):
        return _tv_repeat(self, times)

    def __copy__(self):
        return self          # immutable: a copy is the same value

    def __deepcopy__(self, memo):
        if self._owned or self._view == NULL:
            return self
        # A view of someone else's buffer: a deep copy owns its memory (one memcpy).
        return tv_from_int32(self._data, self._len)


_Sequence.register(TokenVector)


def _restore_token_vector(data):
    """Unpickling constructor (a stable name: pickles refer to it, see PICKLE_GLOBALS).

    `data` is the raw int32 bytes, or at protocols 0-2 the same bytes as a latin-1 str."""
    if type(data) is str:
        try:
            data = (<str>data).encode("latin-1")
        except UnicodeEncodeError:
            raise TokenIdError("pickled TokenVector text holds a code point above 255") from None
    return TokenVector.frombuffer(data)


# -- concatenation and repetition (issue #12) --------------------------------------------------
# Rule: the result is a TokenVector only when every operand is one (tv + tv, tv * n: the ids
# stay int32 and stay immutable, like tuple + tuple); mixed with a list or a tuple, the result is
# a list, what code written for `list[int]` expects (`ids[1:] + [ids[0]]`, then `.append`).
# Caveat, as with an ndarray: `lst += tv` rebinds `lst` to a new list (Python asks the right
# operand before list's in-place concat); `lst.extend(tv)` extends in place.

cdef object _tv_concat(object left, object right):
    cdef TokenVector a, b, out
    if type(left) is TokenVector and type(right) is TokenVector:
        a, b = left, right
        out = tv_alloc(a._len + b._len)
        memcpy(out._data, a._data, <size_t>a._len * 4)
        memcpy(out._data + a._len, b._data, <size_t>b._len * 4)
        return out
    if isinstance(left, (list, tuple)) or isinstance(right, (list, tuple)):
        return (left.tolist() if type(left) is TokenVector else list(left)) + (
            right.tolist() if type(right) is TokenVector else list(right))
    return NotImplemented


cdef object _tv_repeat(TokenVector tv, object times):
    cdef Py_ssize_t n, i
    cdef TokenVector out
    try:
        n = operator.index(times)
    except TypeError:
        return NotImplemented
    if n <= 0 or tv._len == 0:
        return tv_alloc(0)
    if n > (<Py_ssize_t>(sys.maxsize // 4)) // tv._len:
        raise MemoryError(f"TokenVector of {tv._len} ids repeated {n} times")
    out = tv_alloc(tv._len * n)
    for i in range(n):
        memcpy(out._data + i * tv._len, tv._data, <size_t>tv._len * 4)
    return out




include "_wire.pxi"
