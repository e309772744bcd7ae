# Conversions into int32: the narrowing kernels (noexcept nogil), buffer-format parsing, the one
# buffer helper (_acquire_ids), as_tokens and the one vocabulary check (_check_vocab).
#
# Included by _core.pyx (the hub): one file per concept, one extension module, so every file
# sees TokenVector's fields and the other files' cdef functions directly.

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
        ok &= <uint32_t>_id_at(p, i) < vocab
    if ok:
        return -1
    for i in range(n):
        if <uint32_t>_id_at(p, i) >= vocab:
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


cdef bint _is_raw_bytes_format(const char* fmt, Py_ssize_t itemsize):
    """A buffer of raw bytes: 1-byte items with no format, or of format 'B', 'b' or 'c' (with or
    without a byte-order prefix, meaningless for one byte)."""
    if itemsize != 1:
        return False
    if fmt == NULL:
        return True
    if fmt[0] == b'@' or fmt[0] == b'=' or fmt[0] == b'<' or fmt[0] == b'>' or fmt[0] == b'!':
        fmt += 1
    return (fmt[0] == b'B' or fmt[0] == b'b' or fmt[0] == b'c') and fmt[1] == 0


cdef enum:
    IDS_NOT_BUFFER = 0      # not a buffer of ids (or bytes / bytearray): nothing acquired
    IDS_OTHER = 1           # acquired: some other format, itemsize or shape
    IDS_INT32_STRIDED = 2   # acquired: native-order 1-D int32, any stride
    IDS_INT32 = 3           # acquired: native-order 1-D int32, C-contiguous


cdef int _acquire_ids(object obj, Py_buffer* view, Py_ssize_t* n, Py_ssize_t* stride) except -1:
    """The one place that takes a buffer of token ids and decides whether it is native 1-D int32
    (usable as int32_t in place). Acquires `obj`'s buffer into `view` (PyBUF_RECORDS_RO) unless
    it returns IDS_NOT_BUFFER; the caller releases it. bytes and bytearray are text or frames,
    never ids: IDS_NOT_BUFFER.

    For a 1-D buffer it also decides the layout once, for every caller: `n[0]` items, `stride[0]`
    bytes apart. An exporter may leave `shape` NULL (then the items are len / itemsize) or
    `strides` NULL (then C-contiguous: ctypes arrays do); callers read the layout from here and
    never from the view's fields. For any other buffer (IDS_OTHER, not 1-D) both are 0."""
    cdef bint swap = False
    n[0] = 0
    stride[0] = 0
    if not PyObject_CheckBuffer(obj) or isinstance(obj, (bytes, bytearray)):
        return IDS_NOT_BUFFER
    try:
        PyObject_GetBuffer(obj, view, PyBUF_RECORDS_RO)
    except (ValueError, BufferError):
        # numpy cannot export some dtypes (datetime64, timedelta64) as a buffer at all: they are
        # not integers, and say so the way as_tokens does for any non-integer array.
        dtype = getattr(obj, "dtype", None)
        if dtype is not None and getattr(dtype, "kind", "i") not in "iu":
            raise TokenIdTypeError(f"token ids must be integers, got an array of dtype "
                                   f"{_describe(dtype, text=str)}") from None
        raise
    if view.ndim == 1 and view.itemsize == 0 and view.len == 0 and \
            _parse_int_format(view.format, 4, &swap) != KIND_BAD:
        # An empty array of an integer format whose exporter reports itemsize 0 (ctypes'
        # `c_int * 0` on Python 3.9): no ids, whatever their width would have been.
        return IDS_INT32
    if view.ndim != 1 or view.itemsize <= 0:
        return IDS_OTHER
    cdef Py_ssize_t count = view.shape[0] if view.shape != NULL else view.len // view.itemsize
    if count < 0 or (view.strides == NULL and count > view.len // view.itemsize):
        # A contiguous buffer whose shape claims more items than its bytes hold.
        PyBuffer_Release(view)
        raise TokenIdError(
            f"the buffer's shape ({count},) does not fit its {view.len} bytes "
            f"of itemsize {view.itemsize}")
    n[0] = count
    stride[0] = view.strides[0] if view.strides != NULL else view.itemsize
    if not (view.itemsize == 4
            and _parse_int_format(view.format, 4, &swap) == KIND_SIGNED and not swap):
        return IDS_OTHER
    return IDS_INT32 if stride[0] == 4 or count <= 1 else IDS_INT32_STRIDED


cdef str _format_str(const char* fmt):
    return "B" if fmt == NULL else (<bytes>fmt).decode("ascii", "replace")


cdef tuple _shape_of(Py_buffer* view):
    if view.shape == NULL:
        return (view.len // view.itemsize,) if view.ndim == 1 else ()
    return tuple([view.shape[i] for i in range(view.ndim)])


# --------------------------------------------------------------------------------------------
# Conversions (wrappers: they check, then call a kernel)

cdef object _overflow(Py_ssize_t index, object value):
    return TokenIdOverflowError(
        f"token id at index {index} is {_describe(value)}, "
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
    cdef int ids = _acquire_ids(obj, &view, &n, &stride)
    if ids == IDS_NOT_BUFFER:       # _convert rejects bytes and bytearray before it gets here
        raise TokenIdTypeError(f"token ids must be integers, got {type(obj).__name__}")
    try:
        if ids == IDS_INT32:
            # The hot path: a native int32 C-contiguous buffer is exactly one memcpy (the
            # helper has checked its format; an empty integer buffer is one too).
            return tv_from_int32(<const int32_t*>view.buf, n)
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
        src = <const char*>view.buf
        tv = tv_alloc(n)
        if n == 0:
            return tv
        if _release_gil(n * itemsize):
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
    """A list or tuple of ints: one typed C loop, no intermediate object.

    A list is read inside its critical section (free-threaded CPython: its per-object lock, so
    a thread that appends to it meanwhile waits, and the item array read here is never freed
    under it; nothing on a build with the GIL). A tuple is immutable: no lock."""
    cdef TokenVector tv
    if isinstance(seq, list):
        with cython.critical_section(seq):
            tv = tv_alloc(PyList_GET_SIZE(seq))
            _items_into(seq, 0, tv._len, tv._data)
        return tv
    tv = tv_alloc(PyTuple_GET_SIZE(seq))
    _items_into(seq, 0, tv._len, tv._data)
    return tv


cdef int _items_into(object seq, Py_ssize_t start, Py_ssize_t n, int32_t* out) except -1:
    """Items [start, n) of a list or tuple into out[start..n): the one conversion of a sequence
    of ids, which as_tokens runs from 0 and the C++ hand-off (tokenwire/python.hpp) from where
    its own loop stopped, through the capsule `_items_into_v1` (tokenwire/pyint.h describes
    the contract). A list's critical section is the caller's to hold."""
    cdef bint is_list = PyList_Check(seq)
    if not is_list and not PyTuple_Check(seq):
        raise TypeError(f"_items_into takes a list or tuple, got {type(seq).__name__}")
    if is_list and PyList_GET_SIZE(seq) != n:
        raise RuntimeError("list changed size during as_tokens()")
    if not 0 <= start <= n or PySequence_Fast_GET_SIZE(seq) != n:
        raise ValueError(f"_items_into: items [{start}, {n}) of a sequence of "
                         f"{PySequence_Fast_GET_SIZE(seq)}")
    cdef PyObject** items = PySequence_Fast_ITEMS(seq)
    cdef PyObject* o
    cdef Py_ssize_t i = start
    while True:
        # Exact ints of one digit (every real token id) in one C loop; it stops at the first
        # other item, which takes the general path (subclasses, bools, big ints, errors).
        i += pyints_small_values(items + i, n - i, out + i)
        if i >= n:
            return 0
        o = items[i]
        out[i] = _item_slow(<object>o, i)
        if is_list:
            # _item_slow may have run Python code (an __index__) that resized the list; while
            # it ran, the critical section may have been suspended and another thread may
            # have changed the list too.
            if PyList_GET_SIZE(seq) != n:
                raise RuntimeError("list changed size during as_tokens()")
            items = PySequence_Fast_ITEMS(seq)
        i += 1


cdef tw_items_into_fn _items_into_fn = _items_into
#: _items_into for C and C++ callers (tokenwire/python.hpp), found with PyCapsule_Import; the
#: name's version changes with the function's signature (tokenwire/pyint.h).
_items_into_v1 = PyCapsule_New(<void*>_items_into_fn, TW_ITEMS_INTO_CAPSULE, NULL)


cdef TokenVector _from_range(object r):
    cdef Py_ssize_t n
    try:
        count = len(r)
    except OverflowError:
        # More than 2**63 - 1 ids: more distinct values than int32 holds, so one is outside it
        # (found below).
        count = None
    if count == 0:
        return tv_alloc(0)
    start, step = r.start, r.step
    # Find the first element outside int32 (if any) before allocating anything.
    if not (INT32_MIN <= start <= INT32_MAX):
        raise _overflow(0, start)
    limit = INT32_MAX if step > 0 else INT32_MIN
    first_bad = (limit - start) // step + 1
    if count is None or first_bad < count:
        raise _overflow(first_bad, start + first_bad * step)
    n = count
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
        raise ValueError(f"vocab_size must be positive, got {_describe(v)}")
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
    if _release_gil(tv._len * 4):
        with nogil:
            bad = _first_outside_vocab(tv._data, tv._len, limit)
    else:
        bad = _first_outside_vocab(tv._data, tv._len, limit)
    if bad >= 0:
        where = f"sequence {seq}: " if seq >= 0 else ""
        raise error(
            f"{where}token id at index {bad} is {_id_at(tv._data, bad)}, "
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
