# Bounds of a received pickle, checked before the unpickler runs: check_pickle
# (public as tokenwire.unpickle.check_pickle).
#
# Included by _core.pyx (the hub). CPython's unpickler (3.10 to 3.13 at least) allocates what
# some opcodes declare before it reads their bytes: BINBYTES, BINBYTES8 and BYTEARRAY8 allocate
# their declared length (up to 2**64), and a memo put (PUT, LONG_BINPUT) at index i grows the
# memo to 2*i slots and zeroes them. A restricted `find_class` does not stop either: a 9-byte
# pickle can make a worker touch gigabytes. tokenwire's receivers (tokenwire._oob.unpickle, used
# by loads_oob, recv_pyobj_oob and the shared-memory Receiver) call this first, so a pickle's
# allocations stay bounded by its own size: a counted argument must fit in the bytes that
# follow it, a memo index must be below the pickle's length (the pickler numbers memo entries
# from 0, one per memoized object: never beyond its own opcodes). An opcode may not cross the
# end of its frame, nor a frame start inside another: read from a file, CPython's unpickler
# would parse such a pickle as other opcodes than it holds in memory (check_pickle).
#
# The walk follows the unpickler opcode by opcode (pickletools documents each argument) and
# stops where the unpickler itself would stop with an error (an unknown opcode, a truncated
# argument, a missing newline): the unpickler never reaches the bytes after that point.

cdef extern from "<string.h>":
    const void* memchr(const void* s, int c, size_t n) nogil

# Arguments by opcode: 0 none, 1..8 fixed bytes, negative a count of that many bytes
# (little-endian) before the counted bytes, _LINE / _TWO_LINES newline-terminated text, _STOP
# the end. Opcodes not listed are unknown (the unpickler refuses them).
cdef extern from *:
    """
    #define TWPK_UNKNOWN 100
    #define TWPK_LINE 101
    #define TWPK_TWO_LINES 102
    #define TWPK_STOP 103
    #define TWPK_PUT_TEXT 104
    #define TWPK_PUT4 105
    """
    const signed char _UNKNOWN "TWPK_UNKNOWN"
    const signed char _LINE "TWPK_LINE"
    const signed char _TWO_LINES "TWPK_TWO_LINES"
    const signed char _STOP "TWPK_STOP"
    const signed char _PUT_TEXT "TWPK_PUT_TEXT"
    const signed char _PUT4 "TWPK_PUT4"

cdef signed char _pickle_args[256]


cdef void _pickle_args_init() noexcept:
    cdef int i, c
    for i in range(256):
        _pickle_args[i] = _UNKNOWN
    for c in b"(012N]aedlo)RstubQ}":                        # no argument
        _pickle_args[c] = 0
    for c in (0x81, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8f, 0x90, 0x91, 0x92, 0x93, 0x94, 0x97,
              0x98):
        _pickle_args[c] = 0
    _pickle_args[ord("K")] = 1        # BININT1
    _pickle_args[ord("h")] = 1        # BINGET
    _pickle_args[ord("q")] = 1        # BINPUT (an index below 256)
    _pickle_args[0x80] = 1            # PROTO
    _pickle_args[0x82] = 1            # EXT1
    _pickle_args[ord("M")] = 2        # BININT2
    _pickle_args[0x83] = 2            # EXT2
    _pickle_args[ord("J")] = 4        # BININT
    _pickle_args[ord("j")] = 4        # LONG_BINGET
    _pickle_args[0x84] = 4            # EXT4
    _pickle_args[ord("G")] = 8        # BINFLOAT
    _pickle_args[0x95] = 8            # FRAME: the length of the frame of opcodes that follows
    _pickle_args[ord("r")] = _PUT4    # LONG_BINPUT
    _pickle_args[ord("U")] = -1       # SHORT_BINSTRING
    _pickle_args[ord("C")] = -1       # SHORT_BINBYTES
    _pickle_args[0x8c] = -1           # SHORT_BINUNICODE
    _pickle_args[0x8a] = -1           # LONG1
    _pickle_args[ord("T")] = -4       # BINSTRING
    _pickle_args[ord("B")] = -4       # BINBYTES
    _pickle_args[ord("X")] = -4       # BINUNICODE
    _pickle_args[0x8b] = -4           # LONG4
    _pickle_args[0x8e] = -8           # BINBYTES8
    _pickle_args[0x8d] = -8           # BINUNICODE8
    _pickle_args[0x96] = -8           # BYTEARRAY8
    for c in b"ILFSVPg":                                    # one line of text
        _pickle_args[c] = _LINE
    _pickle_args[ord("p")] = _PUT_TEXT                      # PUT: a decimal memo index
    _pickle_args[ord("c")] = _TWO_LINES                     # GLOBAL: module, name
    _pickle_args[ord("i")] = _TWO_LINES                     # INST
    _pickle_args[ord(".")] = _STOP


_pickle_args_init()


cdef inline uint64_t _le_uint(const unsigned char* p, int k) noexcept nogil:
    cdef uint64_t v = 0
    cdef int j
    for j in range(k - 1, -1, -1):
        v = (v << 8) | p[j]
    return v


_COUNTED_NAMES = {ord("U"): "SHORT_BINSTRING", ord("C"): "SHORT_BINBYTES",
                  0x8c: "SHORT_BINUNICODE", 0x8a: "LONG1", ord("T"): "BINSTRING",
                  ord("B"): "BINBYTES", ord("X"): "BINUNICODE", 0x8b: "LONG4",
                  0x8e: "BINBYTES8", 0x8d: "BINUNICODE8", 0x96: "BYTEARRAY8"}


def check_pickle(data):
    """Raise ``pickle.UnpicklingError`` when the pickle `data` (any bytes-like object) declares
    an allocation larger than itself; return None otherwise. Call it on received bytes before
    ``pickle.loads`` or an ``Unpickler``, restricted or not.

    CPython's unpickler allocates a counted argument before reading it (``BINBYTES`` up to
    4 GiB, ``BINBYTES8`` and ``BYTEARRAY8`` up to 2**64 bytes) and grows its memo to a put's
    index, zeroing each slot (``LONG_BINPUT`` up to 2**32), so a 9-byte pickle can make a
    process touch gigabytes whatever ``find_class`` allows. This walks the opcodes once, in C,
    and refuses, naming the opcode and its offset, a counted argument or a ``FRAME`` longer
    than the bytes after it (a file with ``peek()`` reads a frame with ``read(length)``,
    which allocates first), a memo index not below the pickle's length (a text ``PUT`` read
    as the unpickler reads it), an opcode that runs past the end of its ``FRAME``, and a
    ``FRAME`` inside another: read from a file, CPython's unpickler parses those as other opcodes than
    the walk reads (it rereads from the file what crosses a frame's end), so they could hide a
    memo bomb. The walk stops where the unpickler itself would stop with an error.

    What passes: every pickle ``pickle.dumps`` writes (memo entries numbered from 0, one per
    memoized object; opcodes wholly inside or outside frames), and a ``Pickler``'s at
    protocol 4 and later. A ``Pickler`` reused for several ``dump`` calls at protocol 3 or
    lower keeps numbering its memo across them, so a later pickle may name an index beyond its
    own length and is refused: call ``clear_memo()`` between dumps, or use protocol 4 or 5.
    It reads `data` once and keeps nothing; it costs ~0.3 µs for a request whose ids travel as
    a buffer, ~150 µs for the pickle of a plain list of 40,000 ints (a tenth of its load).
    tokenwire's receivers (``loads_oob``, ``recv_pyobj_oob``, the channel's ``Receiver``) call
    it on every pickle they load.

    Frames. Protocol 4 and later group opcodes in frames (FRAME: an 8-byte length, then that
    many bytes of opcodes). Reading from memory (`pickle.loads`) a frame is only a hint; reading
    from a file (`Unpickler(io.BytesIO(data))`) CPython's C unpickler loads the frame into a
    buffer, and when an opcode or its argument runs past the frame's end it reads that part
    fresh from the file and drops what was left of the frame: the two readings then parse
    different opcodes, and a check that read one stream would pass bytes the other runs. The
    pickler never writes such a pickle (an opcode lies wholly inside a frame or outside every
    frame, and a frame starts where the one before ended), the pure-Python unpickler refuses
    both, and so does this walk: then every reader parses the opcodes it checked.
    """
    cdef Py_buffer buf
    PyObject_GetBuffer(data, &buf, PyBUF_SIMPLE)
    try:
        _walk_pickle(<const unsigned char*>buf.buf, buf.len)
    finally:
        PyBuffer_Release(&buf)


cdef str _opcode_name(unsigned char op):
    import pickletools
    for info in pickletools.opcodes:
        if ord(info.code) == op:
            return info.name
    return f"0x{op:02x}"


cdef int _refuse_crossing(const unsigned char* p, Py_ssize_t start,
                          Py_ssize_t frame_end) except -1:
    raise _UnpicklingError(
        f"pickle opcode {_opcode_name(p[start])} at offset {start} runs past the end of its "
        f"frame at offset {frame_end}: read from a file it would parse as other opcodes")


cdef int _walk_pickle(const unsigned char* p, Py_ssize_t n) except -1:
    # `limit`: where the current frame ends (`in_frame`), else the pickle's end. An argument
    # that runs past the pickle's end outside a frame is truncated: the unpickler stops there
    # too (return). Past a frame's end it is refused (_refuse_crossing).
    cdef Py_ssize_t pos = 0, start, left, limit = n
    cdef bint in_frame = False
    cdef signed char kind
    cdef int k
    cdef uint64_t length
    cdef const unsigned char* nl
    while pos < n:
        if in_frame and pos == limit:
            in_frame = False                               # the frame ended between opcodes
            limit = n
        start = pos
        kind = _pickle_args[p[pos]]
        pos += 1
        left = limit - pos
        if kind == 0:
            continue
        if kind == _STOP or kind == _UNKNOWN:
            return 0
        if 0 < kind <= 8 or kind == _PUT4:
            k = 4 if kind == _PUT4 else kind
            if left < k:
                if in_frame:
                    _refuse_crossing(p, start, limit)
                return 0
            length = _le_uint(p + pos, k)
            pos += k
            if kind == _PUT4 and length >= <uint64_t>n:
                raise _UnpicklingError(
                    f"pickle opcode LONG_BINPUT at offset {start} puts memo index {length}, "
                    f"beyond a {n}-byte pickle")
            if p[start] == 0x95:                           # FRAME
                if in_frame:
                    raise _UnpicklingError(
                        f"pickle opcode FRAME at offset {start} starts inside the frame that "
                        f"ends at offset {limit}")
                if length > <uint64_t>(n - pos):
                    # A file with peek() (io.BufferedReader, socket.makefile) reads the frame
                    # with read(length), which allocates `length` bytes before it reads.
                    raise _UnpicklingError(
                        f"pickle opcode FRAME at offset {start} declares {length} bytes, "
                        f"{n - pos} follow it")
                in_frame = True
                limit = pos + <Py_ssize_t>length
            continue
        if kind < 0:
            k = -kind
            if left < k:
                if in_frame:
                    _refuse_crossing(p, start, limit)
                return 0                                   # truncated: the unpickler stops
            length = _le_uint(p + pos, k)
            # Only LONG4's count is signed (_pickle.c: calc_binint); BINSTRING's, like every
            # other count, is unsigned (calc_binsize).
            if p[start] == 0x8b and length >= <uint64_t>0x80000000:
                return 0                                   # negative: the unpickler refuses
            if length > <uint64_t>(n - pos - k):
                raise _UnpicklingError(
                    f"pickle opcode {_COUNTED_NAMES[p[start]]} at offset {start} declares "
                    f"{length} bytes, {n - pos - k} follow it")
            if length > <uint64_t>(left - k):
                _refuse_crossing(p, start, limit)
            pos += k + <Py_ssize_t>length
            continue
        nl = <const unsigned char*>memchr(p + pos, ord("\n"), <size_t>left)
        if nl == NULL:
            if in_frame:
                _refuse_crossing(p, start, limit)
            return 0                                       # no newline: the unpickler stops
        if kind == _PUT_TEXT:
            _check_put_text(p, start, pos, nl - p, n)
        pos = nl - p + 1
        if kind == _TWO_LINES:
            left = limit - pos
            nl = NULL if left <= 0 else <const unsigned char*>memchr(p + pos, ord("\n"),
                                                                   <size_t>left)
            if nl == NULL:
                if in_frame:
                    _refuse_crossing(p, start, limit)
                return 0
            pos = nl - p + 1
    return 0


cdef int _check_put_text(const unsigned char* p, Py_ssize_t start, Py_ssize_t pos,
                         Py_ssize_t eol, Py_ssize_t n) except -1:
    """PUT's index: the unpickler parses the line as a C string with PyLong_FromString (as
    int() does: signs, spaces, "\r", underscores; and the string ends at its first NUL byte)
    and refuses what does not parse or is negative; so does this, and a parsed index must be
    below the pickle's length."""
    cdef const unsigned char* nul = <const unsigned char*>memchr(p + pos, 0, <size_t>(eol - pos))
    if nul != NULL:
        eol = nul - p
    text = PyBytes_FromStringAndSize(<const char*>p + pos, eol - pos)
    try:
        index = int(text)
    except ValueError:
        return 0                                           # the unpickler stops there too
    if index >= n:
        raise _UnpicklingError(
            f"pickle opcode PUT at offset {start} puts memo index {text[:24]!r}: beyond a "
            f"{n}-byte pickle")
    return 0
