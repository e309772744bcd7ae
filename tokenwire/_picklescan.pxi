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
    memo bomb. It also refuses an opcode that changes a global (``BUILD``, ``APPEND(S)``,
    ``SETITEM(S)``, ``ADDITEMS`` onto what ``GLOBAL``, ``STACK_GLOBAL`` or ``EXT1/2/4``
    pushed): a restricted load would rename an allowed function or fill its ``__dict__`` for
    the rest of the process. The walk stops where the unpickler itself would stop with an error.

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


# What the walk knows of the unpickler's stack, to refuse an opcode that changes an object the
# pickle did not create: a global (GLOBAL, STACK_GLOBAL, EXT1/2/4) is the process's own object,
# and BUILD onto it (or APPEND(S), SETITEM(S), ADDITEMS) would change it for the process
# (a function's name or __dict__, a class's attributes) whatever find_class allows. The
# pickler never writes that: it builds what its REDUCE, NEWOBJ or OBJ made. Each stack entry
# is one byte (_K_OBJECT, _K_GLOBAL, or _K_MARK for a MARK), each memo entry two bits (set,
# global). Where the unpickler would stop with an error (an empty stack, no MARK, an unset
# memo entry) the walk stops too.
cdef extern from *:
    """
    #define TWPK_K_OBJECT 1
    #define TWPK_K_GLOBAL 2
    #define TWPK_K_MARK 3
    #define TWPK_LOCAL_STACK 64
    #define TWPK_LOCAL_MEMO 64
    """
    const unsigned char _K_OBJECT "TWPK_K_OBJECT"
    const unsigned char _K_GLOBAL "TWPK_K_GLOBAL"
    const unsigned char _K_MARK "TWPK_K_MARK"
    const Py_ssize_t _LOCAL_STACK "TWPK_LOCAL_STACK"
    const Py_ssize_t _LOCAL_MEMO "TWPK_LOCAL_MEMO"   # bytes of each memo bitmap on the C stack
    void* PyMem_Calloc(size_t nelem, size_t elsize)
    void* memset(void* s, int c, size_t n) nogil

cdef struct _PickleStack:
    unsigned char* kinds
    Py_ssize_t depth
    Py_ssize_t room
    unsigned char* memo_set
    unsigned char* memo_global
    Py_ssize_t memo_bits
    Py_ssize_t memo_len         # distinct memo entries set: MEMOIZE's index
    unsigned char local[64]             # _LOCAL_STACK
    unsigned char local_set[64]         # _LOCAL_MEMO
    unsigned char local_global[64]


cdef int _stack_grow(_PickleStack* st) except -1:
    cdef unsigned char* grown = <unsigned char*>PyMem_Malloc(<size_t>(2 * st.room))
    if grown == NULL:
        raise MemoryError()
    memcpy(grown, st.kinds, <size_t>st.depth)
    if st.kinds != st.local:
        PyMem_Free(st.kinds)
    st.kinds = grown
    st.room *= 2
    return 0


cdef inline int _stack_push(_PickleStack* st, unsigned char kind) except -1:
    if st.depth == st.room:
        _stack_grow(st)
    st.kinds[st.depth] = kind
    st.depth += 1
    return 0


cdef inline int _stack_top(_PickleStack* st) noexcept:
    # The kind on top, above the last MARK; 0 when there is none (the unpickler underflows).
    if st.depth == 0 or st.kinds[st.depth - 1] == _K_MARK:
        return 0
    return st.kinds[st.depth - 1]


cdef inline Py_ssize_t _stack_mark(_PickleStack* st) noexcept:
    # The position of the last MARK, -1 when there is none.
    cdef Py_ssize_t i = st.depth - 1
    while i >= 0 and st.kinds[i] != _K_MARK:
        i -= 1
    return i


cdef int _memo_grow(_PickleStack* st, uint64_t index) except -1:
    # Room for memo entry `index` (below the pickle's length or 256: checked by the walk), so
    # the bitmaps cost what the pickle's memo uses, not its size.
    cdef Py_ssize_t bits = 2 * st.memo_bits
    cdef Py_ssize_t old = st.memo_bits // 8, nbytes
    cdef unsigned char* grown
    if <uint64_t>bits <= index:
        bits = <Py_ssize_t>index + 1
    nbytes = (bits + 7) // 8
    grown = <unsigned char*>PyMem_Calloc(<size_t>nbytes, 2)
    if grown == NULL:
        raise MemoryError()
    memcpy(grown, st.memo_set, <size_t>old)
    memcpy(grown + nbytes, st.memo_global, <size_t>old)
    if st.memo_set != st.local_set:
        PyMem_Free(st.memo_set)
    st.memo_set, st.memo_global, st.memo_bits = grown, grown + nbytes, nbytes * 8
    return 0


cdef inline int _memo_put(_PickleStack* st, uint64_t index) except -1:
    # 1 when the unpickler would stop (nothing on top).
    cdef int top = _stack_top(st)
    cdef unsigned char bit = <unsigned char>(1 << (index & 7))
    if top == 0:
        return 1
    if index >= <uint64_t>st.memo_bits:
        _memo_grow(st, index)
    if not st.memo_set[index >> 3] & bit:
        st.memo_set[index >> 3] |= bit
        st.memo_len += 1
    if top == _K_GLOBAL:
        st.memo_global[index >> 3] |= bit
    else:
        st.memo_global[index >> 3] &= ~bit
    return 0


cdef inline int _memo_get(_PickleStack* st, uint64_t index) except -1:
    # 1 when the unpickler would stop (no such entry).
    cdef unsigned char bit = <unsigned char>(1 << (index & 7))
    if index >= <uint64_t>st.memo_bits or not st.memo_set[index >> 3] & bit:
        return 1
    _stack_push(st, _K_GLOBAL if st.memo_global[index >> 3] & bit else _K_OBJECT)
    return 0


cdef int _refuse_changing_a_global(unsigned char op, Py_ssize_t start) except -1:
    raise _UnpicklingError(
        f"pickle opcode {_opcode_name(op)} at offset {start} changes a global (an object the "
        f"pickle did not create)")


# Each opcode's effect on the stack (_stack_effect), by opcode; 0: none (PROTO, FRAME, STOP).
cdef enum:
    _E_NONE, _E_PUSH, _E_GLOBAL, _E_STACK_GLOBAL, _E_GET, _E_PUT, _E_MEMOIZE, _E_NEW1, _E_NEW2,
    _E_NEW3, _E_DUP, _E_POP, _E_CHANGE1, _E_SETITEM, _E_CHANGE_MARK, _E_POP_MARK, _E_TO_MARK,
    _E_OBJ, _E_MARK

cdef unsigned char _pickle_effect[256]


cdef void _pickle_effect_init() noexcept:
    cdef int i
    for i in range(256):
        _pickle_effect[i] = _E_NONE
    for c in b"INFLSTUBCXVPGKJM]})":                     # a new object on top
        _pickle_effect[c] = _E_PUSH
    for i in (0x8a, 0x8b, 0x8c, 0x8d, 0x8e, 0x96, 0x88, 0x89, 0x8f, 0x97):
        _pickle_effect[i] = _E_PUSH
    for i in (ord("c"), 0x82, 0x83, 0x84):              # GLOBAL, EXT1/2/4
        _pickle_effect[i] = _E_GLOBAL
    _pickle_effect[0x93] = _E_STACK_GLOBAL
    for c in b"hjg":                                    # BINGET, LONG_BINGET, GET
        _pickle_effect[c] = _E_GET
    for c in b"qrp":                                    # BINPUT, LONG_BINPUT, PUT
        _pickle_effect[c] = _E_PUT
    _pickle_effect[0x94] = _E_MEMOIZE
    for i in (0x85, ord("Q"), 0x98):                    # TUPLE1, BINPERSID, READONLY_BUFFER
        _pickle_effect[i] = _E_NEW1
    for i in (0x86, ord("R"), 0x81):                    # TUPLE2, REDUCE, NEWOBJ
        _pickle_effect[i] = _E_NEW2
    for i in (0x87, 0x92):                              # TUPLE3, NEWOBJ_EX
        _pickle_effect[i] = _E_NEW3
    _pickle_effect[ord("2")] = _E_DUP
    _pickle_effect[ord("0")] = _E_POP
    for c in b"ba":                                     # BUILD, APPEND
        _pickle_effect[c] = _E_CHANGE1
    _pickle_effect[ord("s")] = _E_SETITEM
    for i in (ord("e"), ord("u"), 0x90):                # APPENDS, SETITEMS, ADDITEMS
        _pickle_effect[i] = _E_CHANGE_MARK
    _pickle_effect[ord("1")] = _E_POP_MARK
    for i in (ord("t"), ord("l"), ord("d"), 0x91, ord("i")):   # TUPLE, LIST, DICT,
        _pickle_effect[i] = _E_TO_MARK                          # FROZENSET, INST
    _pickle_effect[ord("o")] = _E_OBJ
    _pickle_effect[ord("(")] = _E_MARK


_pickle_effect_init()


cdef inline bint _above_fence(_PickleStack* st, Py_ssize_t k) noexcept:
    # Whether the top k entries are objects above the last MARK (else the unpickler underflows).
    cdef Py_ssize_t i
    if st.depth < k:
        return False
    for i in range(st.depth - k, st.depth):
        if st.kinds[i] == _K_MARK:
            return False
    return True


cdef inline int _stack_effect(_PickleStack* st, const unsigned char* p, Py_ssize_t start,
                       uint64_t arg) except -1:
    """Apply opcode p[start] (its integer argument `arg`, where it has one) to the stack: 0,
    or 1 where the unpickler would stop with an error."""
    cdef unsigned char op = p[start]
    cdef unsigned char effect = _pickle_effect[op]
    cdef Py_ssize_t mark, k
    if effect == _E_NONE:
        return 0
    if effect == _E_PUSH:
        return _stack_push(st, _K_OBJECT)
    if effect == _E_MARK:
        return _stack_push(st, _K_MARK)
    if effect == _E_GLOBAL:
        return _stack_push(st, _K_GLOBAL)
    if effect == _E_GET:
        return _memo_get(st, arg)
    if effect == _E_PUT:
        return _memo_put(st, arg)
    if effect == _E_MEMOIZE:
        return _memo_put(st, <uint64_t>st.memo_len)
    if effect == _E_STACK_GLOBAL or effect == _E_NEW1 or effect == _E_NEW2 \
            or effect == _E_NEW3:
        k = 2 if effect == _E_STACK_GLOBAL else effect - _E_NEW1 + 1
        if not _above_fence(st, k):
            return 1
        st.depth -= k - 1
        st.kinds[st.depth - 1] = _K_GLOBAL if effect == _E_STACK_GLOBAL else _K_OBJECT
        return 0
    if effect == _E_DUP:
        if not _above_fence(st, 1):
            return 1
        return _stack_push(st, st.kinds[st.depth - 1])
    if effect == _E_POP:                               # (a MARK on top is popped too)
        if st.depth == 0:
            return 1
        st.depth -= 1
        return 0
    if effect == _E_CHANGE1 or effect == _E_SETITEM:  # the object below the 1 or 2 arguments
        k = 3 if effect == _E_SETITEM else 2
        if not _above_fence(st, k):
            return 1
        if st.kinds[st.depth - k] == _K_GLOBAL:
            _refuse_changing_a_global(op, start)
        st.depth -= k - 1
        return 0
    mark = _stack_mark(st)
    if mark < 0:
        return 1
    if effect == _E_CHANGE_MARK:                      # the object below the MARK
        if mark == 0 or st.kinds[mark - 1] == _K_MARK:
            return 1
        if st.kinds[mark - 1] == _K_GLOBAL:
            _refuse_changing_a_global(op, start)
        st.depth = mark
        return 0
    if effect == _E_POP_MARK:
        st.depth = mark
        return 0
    if effect == _E_OBJ and mark == st.depth - 1:     # OBJ needs the class above the MARK
        return 1
    st.depth = mark                                   # _E_TO_MARK, _E_OBJ: a new object
    return _stack_push(st, _K_OBJECT)


cdef int _stack_open(_PickleStack* st) except -1:
    st.kinds, st.depth, st.room = st.local, 0, _LOCAL_STACK
    st.memo_set, st.memo_global = st.local_set, st.local_global
    st.memo_bits, st.memo_len = 8 * _LOCAL_MEMO, 0
    memset(st.local_set, 0, _LOCAL_MEMO)
    memset(st.local_global, 0, _LOCAL_MEMO)
    return 0


cdef void _stack_close(_PickleStack* st) noexcept:
    if st.kinds != st.local:
        PyMem_Free(st.kinds)
    if st.memo_set != st.local_set:
        PyMem_Free(st.memo_set)


cdef int _walk_pickle(const unsigned char* p, Py_ssize_t n) except -1:
    cdef _PickleStack st
    _stack_open(&st)
    try:
        return _walk_opcodes(p, n, &st)
    finally:
        _stack_close(&st)


cdef int _walk_opcodes(const unsigned char* p, Py_ssize_t n, _PickleStack* st) except -1:
    # `limit`: where the current frame ends (`in_frame`), else the pickle's end. An argument
    # that runs past the pickle's end outside a frame is truncated: the unpickler stops there
    # too (return). Past a frame's end it is refused (_refuse_crossing).
    cdef Py_ssize_t pos = 0, start, left, limit = n
    cdef bint in_frame = False
    cdef signed char kind
    cdef int k
    cdef uint64_t length
    cdef const unsigned char* nl
    cdef Py_ssize_t index
    while pos < n:
        if in_frame and pos == limit:
            in_frame = False                               # the frame ended between opcodes
            limit = n
        start = pos
        kind = _pickle_args[p[pos]]
        pos += 1
        left = limit - pos
        if kind == 0:
            if _stack_effect(st, p, start, 0):
                return 0
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
            elif _stack_effect(st, p, start, length):
                return 0
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
            if _stack_effect(st, p, start, 0):
                return 0
            continue
        nl = <const unsigned char*>memchr(p + pos, ord("\n"), <size_t>left)
        if nl == NULL:
            if in_frame:
                _refuse_crossing(p, start, limit)
            return 0                                       # no newline: the unpickler stops
        if kind == _PUT_TEXT or p[start] == ord("g"):
            index = _check_put_text(p, start, pos, nl - p, n, kind == _PUT_TEXT)
            pos = nl - p + 1
            if index < 0 or (_memo_put(st, <uint64_t>index) if kind == _PUT_TEXT
                             else _memo_get(st, <uint64_t>index)):
                return 0                                   # the unpickler stops there too
            continue
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
        if _stack_effect(st, p, start, 0):
            return 0
    return 0


cdef Py_ssize_t _check_put_text(const unsigned char* p, Py_ssize_t start, Py_ssize_t pos,
                         Py_ssize_t eol, Py_ssize_t n, bint put) except -2:
    """The memo index of a text PUT (`put`) or GET: the unpickler parses the line as a C string
    with PyLong_FromString (as int() does: signs, spaces, "\r", underscores; and the string
    ends at its first NUL byte) and refuses what does not parse or is negative; so does this
    (-1), and a PUT's index must be below the pickle's length (a GET's beyond it names no
    entry: -1)."""
    cdef const unsigned char* nul = <const unsigned char*>memchr(p + pos, 0, <size_t>(eol - pos))
    if nul != NULL:
        eol = nul - p
    text = PyBytes_FromStringAndSize(<const char*>p + pos, eol - pos)
    try:
        index = int(text)
    except ValueError:
        return -1                                          # the unpickler stops there too
    if index >= n:
        if not put:
            return -1
        raise _UnpicklingError(
            f"pickle opcode PUT at offset {start} puts memo index {text[:24]!r}: beyond a "
            f"{n}-byte pickle")
    return -1 if index < 0 else <Py_ssize_t>index
