# TokenVector: the immutable int32 sequence (buffer protocol, sequence methods, pickling,
# + and *).
#
# Included by _core.pyx (the hub): one file per concept, one extension module, so every file
# sees TokenVector's fields and the other files' cdef functions directly.

from array import array as _pyarray

cdef Py_ssize_t _tv_find(TokenVector self, object value, Py_ssize_t start,
                         Py_ssize_t stop) except -2:
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
        if _id_at(self._data, i) == v:
            return i
    return -1


# --------------------------------------------------------------------------------------------
# TokenVector

cdef class TokenVector:
    """An immutable sequence of int32 token ids in native memory.

    The Python-side twin of an engine's `std::vector<int32>`: `numpy.asarray(tv)` and
    `memoryview(tv)` are zero-copy read-only views (format "i"), slicing returns a TokenVector,
    `tolist()` (and `copy()`, for code written for a list field) builds a `list[int]` in C, and
    pickling sends the ids as one bytes payload (out-of-band at protocol 5). Build one with
    `TokenVector(ids)` or `as_tokens(ids)`. It compares equal to a list, tuple or integer
    array.array of the same values, and is a pydantic v2 field type.

    It accepts what `as_tokens` accepts. Indexing, iteration, `len`, `in`, `count` and `index`
    behave like a list's; `tobytes()` gives the ids as little-endian int32 on every host (the
    raw codec's and the pickle's bytes; `memoryview(tv)` is native order). `copy()` returns a new
    list, because code written for a list field calls ``ids = req.ids.copy()`` and appends to
    it, while `copy.copy(tv)` returns `tv` itself. ``+`` and ``*`` give a TokenVector when every
    operand is one (a list when mixed with a list or tuple). It is unhashable.
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

        The memory is read as bytes, whatever its item type, so it must hold bytes or integers:

        * raw bytes: a buffer with no format, or 1-byte items of format 'B', 'b' or 'c' (`bytes`,
          `bytearray`, `memoryview`, `mmap`, a ctypes `c_char`/`c_ubyte`/`c_byte` array);
        * integer items: one integer code (b h i l q n, B H I L Q N, with or without a byte-order
          prefix @ = < > !), of any size; their bytes are read as little-endian int32 all the
          same (an int32 array of this host's order gives its own ids).

        Anything else (floats, bool, pointers such as ctypes `c_char_p` / `c_void_p` arrays,
        Python objects, structures) is refused with TypeError naming its format: those bytes
        are not token ids.

        Zero-copy when `data` is immutable (`bytes`, a memoryview of bytes, a TokenVector), at
        any address: the vector views `data` and keeps it alive (an unaligned view is aligned,
        once, when its buffer is first exported). Otherwise one memcpy, so later writes to a
        mutable source never show through. Raises ValueError when the byte count is not a
        multiple of 4 or the memory is not C-contiguous.
        """
        cdef Py_buffer view
        cdef bint swap
        try:
            PyObject_GetBuffer(data, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT)
        except (ValueError, BufferError) as e:      # numpy says ValueError, memoryview BufferError
            raise TokenIdError(f"frombuffer() needs C-contiguous bytes: {e}") from None
        if not _is_raw_bytes_format(view.format, view.itemsize) and \
                _parse_int_format(view.format, view.itemsize, &swap) == KIND_BAD:
            PyBuffer_Release(&view)
            raise TokenIdTypeError(
                f"frombuffer() reads raw bytes or integers; a buffer of format "
                f"{_format_str(view.format)!r} (itemsize {view.itemsize}) does not hold token ids")
        cdef Py_ssize_t n = view.len // 4
        cdef TokenVector tv
        cdef Py_ssize_t i
        cdef bint moved = False
        try:
            if view.len % 4:
                raise TokenIdError(
                    f"int32 token data must be a multiple of 4 bytes, got {view.len} bytes"
                )
            if _can_view_ids(data, view.buf):
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
        # Consumers read the export as int32 (numpy, C): an unaligned view is aligned first.
        buffer.buf = <void*>tv_aligned(self)
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
                (<TokenVector>tv)._data[i] = _id_at(self._data, start + i * step)
            return tv
        try:
            i = operator.index(key)
        except TypeError:
            raise TypeError(
                f"TokenVector indices must be integers or slices, not {type(key).__name__}"
            ) from None
        except OverflowError:
            raise IndexError(
                f"TokenVector index {key} out of range for length {self._len}") from None
        if i < 0:
            i += self._len
        if i < 0 or i >= self._len:
            raise IndexError(f"TokenVector index {key} out of range for length {self._len}")
        return _id_at(self._data, i)

    def __iter__(self):
        cdef Py_ssize_t i
        for i in range(self._len):
            yield _id_at(self._data, i)

    def __reversed__(self):
        cdef Py_ssize_t i
        for i in range(self._len - 1, -1, -1):
            yield _id_at(self._data, i)

    def __contains__(self, value):
        return _tv_find(self, value, 0, self._len) >= 0

    def count(self, value):
        """Number of occurrences of `value`."""
        cdef Py_ssize_t c = 0, i = _tv_find(self, value, 0, self._len)
        cdef int32_t v
        if i < 0:
            return 0
        v = _id_at(self._data, i)
        for i in range(i, self._len):
            c += _id_at(self._data, i) == v
        return c

    def index(self, value, start=0, stop=None):
        """Index of the first occurrence of `value` in [start, stop); ValueError if absent."""
        cdef Py_ssize_t a, b
        a, b, _ = slice(start, stop).indices(self._len)
        cdef Py_ssize_t i = _tv_find(self, value, a, b) if a < b else -1
        if i < 0:
            raise ValueError(f"{_describe(value)} is not in TokenVector")
        return i

    # -- comparison ----------------------------------------------------------------------------

    def __eq__(self, other):
        cdef TokenVector o
        if type(other) is TokenVector:
            o = other
            return self._len == o._len and memcmp(self._data, o._data, <size_t>self._len * 4) == 0
        if isinstance(other, list):
            # Read inside the list's critical section (see _from_sequence); a tuple needs none.
            with cython.critical_section(other):
                return _tv_equal_items(self, other)
        if isinstance(other, tuple):
            return _tv_equal_items(self, other)
        if isinstance(other, _pyarray):
            return _tv_equal_array(self, other)
        return NotImplemented

    def __ne__(self, other):
        r = self.__eq__(other)
        return r if r is NotImplemented else not r

    __hash__ = None    # equal to lists, which are unhashable; like ndarray

    # -- conversions ---------------------------------------------------------------------------

    def tolist(self):
        """The ids as a `list[int]`, built in C (small ids share one table of int objects)."""
        return _tolist_strided(<const char*>self._data, self._len, 4)

    def copy(self):
        """A new `list[int]` of the ids, built in C: the same as `tolist()`.

        The mutable copy code written for a `list[int]` field expects: `ids =
        req.prompt_token_ids.copy()` then `ids.append(t)` works whether the field holds a list or
        a TokenVector. (`copy.copy(tv)` is another thing: a TokenVector is immutable, so it
        returns `tv` itself.)
        """
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

    @property
    def base(self):
        """The object whose memory the ids are read from in place (a `bytes` frame, the
        wrapper around a received pyzmq frame, a read-only exporter), or None when the vector
        owns its memory (built from a list, copied from a mutable source, sliced, or empty). As
        numpy's ``ndarray.base``: ``tv.base is frame`` tells a zero-copy decode from a copy. A
        view at an unaligned address gets an aligned copy of its own the first time its buffer
        is exported (``memoryview(tv)``, ``numpy.asarray(tv)``): from then on it owns that copy
        and `base` is None."""
        if self._owned or self._view == NULL or <PyObject*>self._view.obj == NULL:
            return None
        return <object>self._view.obj

    def __sizeof__(self):
        return sizeof(TokenVector) + (self._len * 4 if self._owned else 0)

    def __repr__(self):
        if self._len <= 8:
            return f"TokenVector({self.tolist()})"
        head = ", ".join([str(_id_at(self._data, i)) for i in range(3)])
        tail = ", ".join([str(_id_at(self._data, i)) for i in range(self._len - 3, self._len)])
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

    # -- pydantic v2 (tokenwire/_interop.py; pydantic is imported only when a model uses the type)

    @classmethod
    def __get_pydantic_core_schema__(cls, source, handler):
        from tokenwire._interop import pydantic_core_schema
        return pydantic_core_schema()

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema, handler):
        from tokenwire._interop import pydantic_json_schema
        return pydantic_json_schema(handler.mode)

    def __copy__(self):
        return self          # immutable: a copy is the same value

    def __deepcopy__(self, memo):
        if self._owned or self._view == NULL:
            return self
        # A view of someone else's buffer: a deep copy owns its memory (one memcpy).
        return tv_from_int32(self._data, self._len)


_Sequence.register(TokenVector)


# -- concatenation and repetition ------------------------------------------------------------
# Rule: the result is a TokenVector only when every operand is one (tv + tv, tv * n: the ids
# stay int32 and stay immutable, like tuple + tuple); mixed with a list or a tuple, the result is
# a list, what code written for `list[int]` expects (`ids[1:] + [ids[0]]`, then `.append`).
# Caveat, as with an ndarray: `lst += tv` rebinds `lst` to a new list (Python asks the right
# operand before list's in-place concat); `lst.extend(tv)` extends in place.
# Mixed with an array.array of an integer typecode, the result is an array.array of that
# typecode: array + array is an array in Python, and a stack that keeps its ids in an
# array('q') keeps holding one (then `.append`, `.extend`, `np.frombuffer` work as before). An id
# the typecode cannot hold ('b', 'B', 'h', 'H', or a negative id into an unsigned code) raises
# TokenIdOverflowError naming it; float and unicode arrays are not token ids (TypeError).

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
    if isinstance(left, _pyarray) or isinstance(right, _pyarray):
        return _tv_concat_array(left, right)
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



# -- array.array (typed buffers of ids, compared and converted in C) ---------------------------

@cython.boundscheck(False)
@cython.wraparound(False)
cdef bint _equal_as(const char* src, Py_ssize_t n, const int32_t* ids, src_int tag) noexcept nogil:
    # Branch-free (vectorizable): every item in int32 and equal to the id at its index.
    cdef const src_int* p = <const src_int*>src
    cdef Py_ssize_t i
    cdef bint ok = True
    for i in range(n):
        ok &= _in_int32(p[i]) & (<int32_t>p[i] == _id_at(ids, i))
    return ok


cdef inline bint _fits(int32_t v, src_int tag) noexcept nogil:
    # Does the id v survive a round trip through src_int (no negative id into an unsigned type)?
    if src_int is uint8_t or src_int is uint16_t or src_int is uint32_t or src_int is uint64_t:
        return v >= 0 and <int64_t>(<src_int>v) == <int64_t>v
    else:
        return <int64_t>(<src_int>v) == <int64_t>v


@cython.boundscheck(False)
@cython.wraparound(False)
cdef Py_ssize_t _widen_as(const int32_t* ids, Py_ssize_t n, char* dst, src_int tag) noexcept nogil:
    # The ids into items of type src_int; the index of the first id the type cannot hold, or -1.
    cdef src_int* out = <src_int*>dst
    cdef Py_ssize_t i
    cdef int32_t v
    for i in range(n):
        v = _id_at(ids, i)
        if not _fits(v, tag):
            return i
        out[i] = <src_int>v
    return -1


cdef inline Py_ssize_t _array_as(bint widen, const int32_t* ids, Py_ssize_t n, char* items,
                                 src_int tag) noexcept nogil:
    if widen:
        return _widen_as(ids, n, items, tag)
    return _equal_as(items, n, ids, tag)


cdef Py_ssize_t _array_kernel(bint widen, const int32_t* ids, Py_ssize_t n, char* items,
                              Py_ssize_t itemsize, int kind) noexcept nogil:
    # (kind, itemsize) -> the item type, as _dispatch_narrow does. widen: ids -> items (returns the
    # first bad index or -1); else: 1 when items == ids, 0 otherwise.
    if kind == KIND_SIGNED:
        if itemsize == 1:
            return _array_as(widen, ids, n, items, <int8_t>0)
        if itemsize == 2:
            return _array_as(widen, ids, n, items, <int16_t>0)
        if itemsize == 4:
            return _array_as(widen, ids, n, items, <int32_t>0)
        return _array_as(widen, ids, n, items, <int64_t>0)
    if itemsize == 1:
        return _array_as(widen, ids, n, items, <uint8_t>0)
    if itemsize == 2:
        return _array_as(widen, ids, n, items, <uint16_t>0)
    if itemsize == 4:
        return _array_as(widen, ids, n, items, <uint32_t>0)
    return _array_as(widen, ids, n, items, <uint64_t>0)


cdef int _array_kind(Py_buffer* view):
    """KIND_SIGNED / KIND_UNSIGNED for an array.array of an integer typecode, KIND_BAD otherwise
    (float and unicode typecodes are not token ids)."""
    cdef bint swap = False
    return _parse_int_format(view.format, view.itemsize, &swap)     # arrays are native order


cdef object _tv_equal_array(TokenVector tv, object arr):
    cdef Py_buffer view
    cdef Py_ssize_t n, r
    cdef int kind
    # The buffer, not len(): a subclass's __len__ may lie; while exported, the array cannot be
    # resized (array raises BufferError), so the comparison may run without the GIL.
    PyObject_GetBuffer(arr, &view, PyBUF_FORMAT | PyBUF_ND)
    try:
        kind = _array_kind(&view)
        if kind == KIND_BAD:
            return NotImplemented
        n = view.len // view.itemsize
        if n != tv._len:
            return False
        if _release_gil(view.len):
            with nogil:
                r = _array_kernel(False, tv._data, n, <char*>view.buf, view.itemsize, kind)
        else:
            r = _array_kernel(False, tv._data, n, <char*>view.buf, view.itemsize, kind)
        return r == 1
    finally:
        PyBuffer_Release(&view)


cdef object _tv_concat_array(object left, object right):
    """tv + array / array + tv: an array.array of the array's typecode (the rule above
    _tv_concat); NotImplemented for a float or unicode array."""
    cdef bint tv_first = type(left) is TokenVector
    cdef TokenVector tv = left if tv_first else right
    arr = right if tv_first else left
    cdef Py_buffer src, dst
    cdef Py_ssize_t itemsize, n_arr, bad = -1
    cdef int kind
    cdef char* ids_at
    cdef char* arr_at
    PyObject_GetBuffer(arr, &src, PyBUF_FORMAT | PyBUF_ND)
    try:
        kind = _array_kind(&src)
        if kind == KIND_BAD:
            return NotImplemented
        itemsize = src.itemsize
        n_arr = src.len // itemsize
        if tv._len > (<Py_ssize_t>(sys.maxsize // 8)) - n_arr:
            raise MemoryError(f"array of {n_arr} items + TokenVector of {tv._len} ids")
        # A zeroed array of the result's size (array's repeat is a memcpy doubling), filled in C.
        out = _pyarray(arr.typecode, bytes(itemsize)) * (n_arr + tv._len)
        PyObject_GetBuffer(out, &dst, PyBUF_WRITABLE | PyBUF_ND)
        try:
            ids_at = <char*>dst.buf + (0 if tv_first else src.len)
            arr_at = <char*>dst.buf + (tv._len * itemsize if tv_first else 0)
            memcpy(arr_at, src.buf, <size_t>src.len)
            bad = _array_kernel(True, tv._data, tv._len, ids_at, itemsize, kind)
        finally:
            PyBuffer_Release(&dst)
    finally:
        PyBuffer_Release(&src)
    if bad >= 0:
        raise TokenIdOverflowError(
            f"token id at index {bad} is {_id_at(tv._data, bad)}, outside the range of "
            f"array typecode {arr.typecode!r}")
    return out


def _ids_from_int32_bytes(bytes data, vocab_size=None):
    """The ids of received little-endian int32 bytes (from_base64's "int32" form), viewing them.

    They are bad data as a bad frame is: WireFormatError for a byte count that is not a
    multiple of 4 and, with `vocab_size`, for an id outside [0, vocab_size) (a bad `vocab_size`
    itself is a ValueError, reported first)."""
    cdef uint32_t limit = 0
    if vocab_size is not None:
        limit = _vocab_limit(vocab_size)
    cdef TokenVector tv
    try:
        tv = TokenVector.frombuffer(data)
    except TokenIdError as e:
        # frombuffer's byte-count rule (bytes are C-contiguous and not objects: its only error
        # here), raised as what it is in received data, not a frame rule of its own.
        raise WireFormatError(str(e)) from None
    if vocab_size is not None:
        _check_vocab(tv, vocab_size, WireFormatError, -1, limit)
    return tv


cdef bint _tv_equal_items(TokenVector self, object other) except -1:
    """Equal to the list or tuple `other`, item by item. The real size, never len(): a
    subclass's __len__ may lie. Items are borrowed, so a Python-level comparison holds its
    own reference (an __eq__ may remove the item)."""
    cdef Py_ssize_t i
    cdef PyObject* item
    cdef int32_t v
    if PySequence_Fast_GET_SIZE(other) != self._len:
        return False
    for i in range(self._len):
        if PySequence_Fast_GET_SIZE(other) != self._len:    # resized by an __eq__
            return False
        item = PySequence_Fast_ITEMS(other)[i]
        if PyLong_CheckExact(<object>item) and pyint_small_value(item, &v):
            if v != _id_at(self._data, i):
                return False
            continue
        element = <object>item
        if not (element == _id_at(self._data, i)):
            return False
    return PySequence_Fast_GET_SIZE(other) == self._len
