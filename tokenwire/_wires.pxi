# Token-id arrays in the wires serving stacks already speak -- a msgpack array of integers, a
# JSON array of integers, protobuf packed varints -- read into a TokenVector and written from one
# without a list (public as tokenwire.wires.read / write; docs/wires.md).
#
# Included by _core.pyx (the hub). The kernels are include/tokenwire/wires.h (plain C, no
# Python); this file checks the arguments, acquires the input, allocates what the input's size
# bounds (never what a header claims), releases the GIL from NOGIL_BYTES and raises
# WireFormatError with the kernel's message. The vocabulary check is _convert.pxi's.

cdef extern from "tokenwire/wires.h" nogil:
    enum:
        TWW_MSG_SIZE
        TWW_WRITE_SLACK
    int tww_have_ssse3
    void tww_init()
    int tww_msgpack_header(const uint8_t* p, size_t n, size_t* count, size_t* off, char* msg,
                           size_t msz)
    int tww_msgpack_items(const uint8_t* p, size_t n, size_t off, size_t count, int32_t* out,
                          char* msg, size_t msz)
    size_t tww_msgpack_bound(size_t n)
    size_t tww_msgpack_write(const int32_t* ids, size_t n, uint8_t* o)
    size_t tww_json_cap(size_t n)
    int tww_json_read(const uint8_t* p, size_t n, int32_t* out, size_t* count, char* msg,
                      size_t msz)
    size_t tww_json_bound(size_t n)
    size_t TWW_JSON_TABLE_IDS
    void tww_json_table_fill(uint64_t* tab)
    size_t tww_json_write(const int32_t* ids, size_t n, const uint64_t* tab, uint8_t* o)
    size_t tww_pb_cap(size_t n)
    int tww_pb_read_packed(const uint8_t* p, size_t n, size_t base, int32_t* out, size_t* count,
                           char* msg, size_t msz)
    int tww_pb_read_field(const uint8_t* p, size_t n, uint32_t field, int32_t* out,
                          size_t* count, char* msg, size_t msz)
    size_t tww_pb_payload_size(const int32_t* ids, size_t n)
    size_t tww_pb_size(size_t n, uint32_t field, size_t payload)
    void tww_pb_write(const int32_t* ids, size_t n, uint32_t field, size_t payload, uint8_t* o)

cdef extern from "Python.h":
    const char* _tw_utf8 "PyUnicode_AsUTF8AndSize"(object s, Py_ssize_t* size) except NULL
    void* _tw_raw_realloc "PyMem_RawRealloc"(void* p, size_t n) nogil

#: The wires `tokenwire.wires.read` and `write` speak.
WIRE_FORMATS = ("msgpack", "json", "protobuf")
#: The largest protobuf field number (2**29 - 1).
cdef uint32_t _PB_MAX_FIELD = (1 << 29) - 1

#: From this many ids, the JSON writer reads each id's text from a table (_json_table).
cdef size_t _JSON_TABLE_MIN = 64
cdef uint64_t* _json_table_slot = NULL

tww_init()
#: Whether the SSSE3 steps (x86-64) are taken: the msgpack reader's and writer's, the protobuf
#: writer's, several ids a step.
_WIRES_SSSE3 = bool(tww_have_ssse3)


def _set_wires_simd(bint enabled):
    """Test hook: turn the SSSE3 steps off (or back on, if the CPU has them) so that the scalar
    loops are tested on machines that would never take them alone. Returns the previous
    setting."""
    global tww_have_ssse3
    cdef bint before = tww_have_ssse3
    tww_have_ssse3 = enabled and _WIRES_SSSE3
    return before


cdef enum:
    _W_MSGPACK = 0
    _W_JSON = 1
    _W_PROTOBUF = 2


cdef int _wire_format(object format) except -1:
    if format == "msgpack" and type(format) is str:
        return _W_MSGPACK
    if format == "json" and type(format) is str:
        return _W_JSON
    if format == "protobuf" and type(format) is str:
        return _W_PROTOBUF
    raise ValueError(f"format must be 'msgpack', 'json' or 'protobuf', got {_describe(format)}")


cdef uint32_t _pb_field(object field, int fmt) except? 0:
    """The protobuf field number `field` names (0: None, the payload alone)."""
    if field is None:
        return 0
    if fmt != _W_PROTOBUF:
        raise ValueError("field= is for format='protobuf' only")
    if isinstance(field, bool):
        raise TypeError("field must be an int, got bool")
    f = operator.index(field)
    if not 1 <= f <= _PB_MAX_FIELD:
        raise ValueError(f"field must be a protobuf field number in [1, 2**29 - 1], got "
                         f"{_describe(f)}")
    return <uint32_t>f


cdef int _wire_kernel(int fmt, const uint8_t* p, size_t n, uint32_t field, int32_t* out,
                      size_t* count, char* msg) noexcept nogil:
    cdef size_t off = 0
    if fmt == _W_MSGPACK:
        if tww_msgpack_header(p, n, count, &off, msg, TWW_MSG_SIZE) != 0:
            return -1
        return tww_msgpack_items(p, n, off, count[0], out, msg, TWW_MSG_SIZE)
    if fmt == _W_JSON:
        return tww_json_read(p, n, out, count, msg, TWW_MSG_SIZE)
    count[0] = 0
    if field == 0:
        return tww_pb_read_packed(p, n, 0, out, count, msg, TWW_MSG_SIZE)
    return tww_pb_read_field(p, n, field, out, count, msg, TWW_MSG_SIZE)


cdef TokenVector _read_wire_bytes(int fmt, const uint8_t* p, size_t n, uint32_t field):
    """The ids of `n` bytes at `p`, in a vector allocated by the input's size (msgpack: the
    header's count, checked against the bytes first), shrunk to what it holds."""
    cdef char msg[TWW_MSG_SIZE]
    cdef size_t cap, count = 0, off
    cdef int r
    cdef void* shrunk
    if fmt == _W_MSGPACK:
        # The header is checked before anything is allocated: its count is then at most n.
        if tww_msgpack_header(p, n, &cap, &off, msg, TWW_MSG_SIZE) != 0:
            raise WireFormatError(_text(msg))
    elif fmt == _W_JSON:
        cap = tww_json_cap(n)
    else:
        cap = tww_pb_cap(n)
    cdef TokenVector tv = tv_alloc(<Py_ssize_t>cap)
    cdef int32_t* out = tv._data
    if _release_gil(<Py_ssize_t>n):
        with nogil:
            r = _wire_kernel(fmt, p, n, field, out, &count, msg)
    else:
        r = _wire_kernel(fmt, p, n, field, out, &count, msg)
    if r != 0:
        raise WireFormatError(_text(msg))
    if count == 0:
        return _EMPTY_VECTOR
    if count < cap:
        shrunk = _tw_raw_realloc(tv._data, count * 4)
        if shrunk != NULL:          # a failed shrink keeps the larger block, still valid
            tv._data = <int32_t*>shrunk
        tv._len = <Py_ssize_t>count
    return tv


def read_wire(data, format, *, vocab_size=None, field=None):
    """Token ids from a wire a serving stack speaks, as a TokenVector, without a list.

    `format` is one of:

    * "msgpack": `data` is one msgpack array of integers (every integer form msgpack has), as
      msgspec, msgpack-python and Rust's rmp-serde write a list of ints;
    * "json": `data` is one JSON array of integers (str, or UTF-8 bytes); an id is written
      `-?(0|[1-9][0-9]*)`: a fraction or exponent (`1.0`, `1e3`) is refused, `-0` reads as 0;
    * "protobuf": with `field=None`, `data` is a packed repeated uint32/int32 field's payload
      (the varints after its tag and length); with `field=N`, `data` is a serialized message
      and the ids are field N's, packed or not (other fields are skipped). A varint is an id
      when it is a uint32 below 2**31 or a sign-extended negative int32.

    `data` is any bytes-like object. Every byte is checked: anything else in the array, an id
    outside int32 (or, with `vocab_size`, outside [0, vocab_size)), a truncated or over-long
    item and trailing bytes raise WireFormatError (a ValueError) naming the item and its byte
    offset. Nothing partial is returned; the memory allocated is bounded by the input's size.
    """
    cdef int fmt = _wire_format(format)
    cdef uint32_t pb_field = _pb_field(field, fmt)
    cdef uint32_t limit = 0
    cdef Py_ssize_t size
    cdef const char* text
    cdef Py_buffer view
    cdef TokenVector tv
    if vocab_size is not None:
        limit = _vocab_limit(vocab_size)
    if isinstance(data, str):
        if fmt != _W_JSON:
            raise TypeError(f"format={format!r} reads bytes, got str")
        try:
            text = _tw_utf8(data, &size)  # the str's own UTF-8 (cached): no copy for ASCII
        except UnicodeEncodeError as e:
            raise WireFormatError(f"JSON: character {e.start} is a lone surrogate "
                                  f"({data[e.start]!a}), not text JSON can hold") from None
        tv = _read_wire_bytes(fmt, <const uint8_t*>text, <size_t>size, pb_field)
    else:
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        try:
            tv = _read_wire_bytes(fmt, <const uint8_t*>view.buf, <size_t>view.len, pb_field)
        finally:
            PyBuffer_Release(&view)
    if limit:
        _check_vocab(tv, vocab_size, WireFormatError, -1, limit)
    return tv


def write_wire(tokens, format, *, field=None):
    """Token ids as bytes in a wire a serving stack speaks: exactly what the stack's own encoder
    writes from the same ids as a list, so an unchanged receiver cannot tell.

    * "msgpack": msgspec's (and msgpack-python's) bytes for a list of ints;
    * "json": compact JSON as msgspec and orjson write it, `[1,2,3]`;
    * "protobuf": with `field=N`, the packed repeated field as protobuf serializes it (tag,
      length, varints; no bytes at all for no ids); with `field=None`, the payload alone. A
      negative id is written as an int32 field writes it (10 bytes).

    `tokens` is anything `as_tokens` takes.
    """
    cdef int fmt = _wire_format(format)
    cdef uint32_t pb_field = _pb_field(field, fmt)
    cdef TokenVector tv = tokens if type(tokens) is TokenVector else _convert(tokens)
    cdef const int32_t* ids = tv_data(tv) if tv._len else NULL
    cdef size_t n = <size_t>tv._len, size, payload = 0
    cdef const uint64_t* table = NULL
    if fmt == _W_MSGPACK:
        if n > 0xFFFFFFFF:
            raise TokenIdOverflowError(f"a msgpack array holds at most 2**32 - 1 items, got {n}")
        size = tww_msgpack_bound(n)       # written at the most it can take, then shrunk
    elif fmt == _W_JSON:
        size = tww_json_bound(n)          # the same
        if n >= _JSON_TABLE_MIN:
            table = _json_table()
    else:
        payload = tww_pb_payload_size(ids, n)
        size = tww_pb_size(n, pb_field, payload)
    # msgpack and JSON store 8 bytes at a time: room for that, given back once written.
    cdef size_t slack = 0 if fmt == _W_PROTOBUF else TWW_WRITE_SLACK
    cdef PyObject* raw = _tw_bytes_new(NULL, <Py_ssize_t>(size + slack))
    cdef uint8_t* o = <uint8_t*>PyBytes_AS_STRING(<object>raw)
    if _release_gil(<Py_ssize_t>size):
        with nogil:
            size = _wire_write(fmt, ids, n, pb_field, payload, table, size, o)
    else:
        size = _wire_write(fmt, ids, n, pb_field, payload, table, size, o)
    if slack:
        _PyBytes_Resize(&raw, <Py_ssize_t>size)       # on failure raw is released and NULL
    out = <bytes>raw            # a second reference ...
    Py_DECREF(out)              # ... and the raw one given up: `out` owns the object
    return out


cdef const uint64_t* _json_table() except NULL:
    """The JSON writer's table of each id's text (2 MiB), filled once per process on first
    use; of two threads filling it at once, the one that publishes second drops its copy."""
    cdef uint64_t* table = <uint64_t*>tw_ptr_load_acquire(<void**>&_json_table_slot)
    cdef uint64_t* winner
    if table != NULL:
        return table
    table = <uint64_t*>PyMem_RawMalloc(TWW_JSON_TABLE_IDS * sizeof(uint64_t))
    if table == NULL:
        raise MemoryError()
    with nogil:
        tww_json_table_fill(table)
    winner = <uint64_t*>tw_ptr_publish(<void**>&_json_table_slot, table)
    if winner != table:
        PyMem_RawFree(table)
    return winner


cdef size_t _wire_write(int fmt, const int32_t* ids, size_t n, uint32_t field, size_t payload,
                        const uint64_t* table, size_t size, uint8_t* o) noexcept nogil:
    """Writes the wire's bytes at `o`; returns their size (`size` for protobuf's)."""
    if fmt == _W_MSGPACK:
        return tww_msgpack_write(ids, n, o)
    elif fmt == _W_JSON:
        return tww_json_write(ids, n, table, o)
    else:
        tww_pb_write(ids, n, field, payload, o)
    return size
