# Bounds of a received pickle, checked before the unpickler runs: _check_pickle.
#
# Included by _core.pyx (the hub). CPython's unpickler (3.10 to 3.13 at least) allocates what
# some opcodes declare before it reads their bytes: BINBYTES, BINBYTES8 and BYTEARRAY8 allocate
# their declared length (up to 2**64), and a memo put (PUT, LONG_BINPUT) at index i grows the
# memo to 2*i slots and zeroes them. A restricted `find_class` does not stop either: a 9-byte
# pickle can make a worker touch gigabytes. tokenwire's receivers (tokenwire._oob.unpickle, used
# by loads_oob, recv_pyobj_oob and the shared-memory Receiver) call this first, so a pickle's
# allocations stay bounded by its own size: a counted argument must fit in the bytes that
# follow it, a memo index must be below the pickle's length (the pickler numbers memo entries
# from 0, one per memoized object: never beyond its own opcodes).
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
    _pickle_args[0x95] = 8            # FRAME (a hint; its bytes are the opcodes that follow)
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


def _check_pickle(data):
    """Raise pickle.UnpicklingError when `data` (a pickle, any buffer) declares an allocation
    larger than itself: a counted argument longer than the bytes left, or a memo index at or
    above its length. Returns None; reads `data` once and keeps nothing."""
    cdef Py_buffer buf
    PyObject_GetBuffer(data, &buf, PyBUF_SIMPLE)
    try:
        _walk_pickle(<const unsigned char*>buf.buf, buf.len)
    finally:
        PyBuffer_Release(&buf)


cdef int _walk_pickle(const unsigned char* p, Py_ssize_t n) except -1:
    cdef Py_ssize_t pos = 0, start, left
    cdef signed char kind
    cdef int k
    cdef uint64_t length
    cdef const unsigned char* nl
    while pos < n:
        start = pos
        kind = _pickle_args[p[pos]]
        pos += 1
        left = n - pos
        if kind == 0:
            continue
        if kind == _STOP or kind == _UNKNOWN:
            return 0
        if 0 < kind <= 8:
            pos += kind
            continue
        if kind < 0:
            k = -kind
            if left < k:
                return 0                                   # truncated: the unpickler stops
            length = _le_uint(p + pos, k)
            if (p[start] == ord("T") or p[start] == 0x8b) and length >= <uint64_t>0x80000000:
                return 0                                   # negative: the unpickler refuses
            if length > <uint64_t>(left - k):
                raise _UnpicklingError(
                    f"pickle opcode {_COUNTED_NAMES[p[start]]} at offset {start} declares "
                    f"{length} bytes, {left - k} follow it")
            pos += k + <Py_ssize_t>length
            continue
        if kind == _PUT4:
            if left < 4:
                return 0
            length = _le_uint(p + pos, 4)
            if length >= <uint64_t>n:
                raise _UnpicklingError(
                    f"pickle opcode LONG_BINPUT at offset {start} puts memo index {length}, "
                    f"beyond a {n}-byte pickle")
            pos += 4
            continue
        nl = <const unsigned char*>memchr(p + pos, ord("\n"), <size_t>left)
        if nl == NULL:
            return 0                                       # no newline: the unpickler stops
        if kind == _PUT_TEXT:
            # The pickler writes `p<index>\n`; the unpickler also takes what int() takes
            # (signs, spaces, underscores): anything but plain digits is refused here.
            text = PyBytes_FromStringAndSize(<const char*>p + pos, nl - p - pos)
            if not (text.isdigit() and len(text) < 20 and int(text) < n):
                raise _UnpicklingError(
                    f"pickle opcode PUT at offset {start} puts memo index {text[:24]!r}: not "
                    f"a decimal index below the pickle's {n} bytes")
        pos = nl - p + 1
        if kind == _TWO_LINES:
            left = n - pos
            if left <= 0:
                return 0
            nl = <const unsigned char*>memchr(p + pos, ord("\n"), <size_t>left)
            if nl == NULL:
                return 0
            pos = nl - p + 1
    return 0
