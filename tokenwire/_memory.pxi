# Where token ids live: the GIL-release threshold (_release_gil), the int table of `tolist`,
# allocation of TokenVector storage (tv_*), and the zero-copy rule (ImmutableBuffer,
# is_immutable_source, _can_view_ids).
#
# Included by _core.pyx (the hub): one file per concept, one extension module, so every file
# sees TokenVector's fields and the other files' cdef functions directly.

from tokenwire._bitpack cimport twbp_id

# Process-wide state that threads share without a GIL (compat.h): the int table's slots are
# published once; settings and counters are words loaded and stored atomically.
cdef extern from "tokenwire/compat.h" nogil:
    void* tw_ptr_load_acquire(void* const* slot)
    void* tw_ptr_publish(void** slot, void* p)
    void* tw_ptr_cas(void** slot, void* expected, void* desired)
    size_t tw_size_load_relaxed(const size_t* word)
    void tw_size_store_relaxed(size_t* word, size_t value)


# --------------------------------------------------------------------------------------------
# Reading ids: a view may sit at any address

cdef inline int32_t _id_at(const int32_t* p, Py_ssize_t i) noexcept nogil:
    """Id `i` of the ids at `p`. A TokenVector may view a raw frame at any address (msgspec
    places an Ext payload where the message puts it), so every read of `_data` goes through
    bitpack.h's memcpy load, which compiles to one (unaligned) load."""
    return <int32_t>twbp_id(p, <size_t>i)


# --------------------------------------------------------------------------------------------
# Constants

#: Inputs at least this many bytes are converted / copied / coded with the GIL released.
#: Releasing is not free for the caller: if another thread is running Python code when the work
#: ends, the caller waits for it to give the GIL back, up to the switch interval (5 ms by
#: default) and more: now and then a wait far longer than the work itself for inputs of a few
#: hundred KB. So only work large enough to dwarf such a wait (8 MiB, about 2M ids) releases it
#: by default; `gil_release_threshold()` tunes it.
cdef size_t NOGIL_BYTES = 8 * 1024 * 1024     # read and set atomically (tw_size_*_relaxed)


def gil_release_threshold(nbytes=None):
    """The size in bytes from which conversions, copies and codec kernels release the GIL
    (default 8 MiB). With `nbytes`, set it (0: always release) and return the previous value."""
    cdef size_t previous = tw_size_load_relaxed(&NOGIL_BYTES)
    cdef Py_ssize_t value
    if nbytes is not None:
        n = operator.index(nbytes)
        if n < 0:
            raise ValueError(f"gil_release_threshold must be >= 0 bytes, got {_describe(n)}")
        value = n
        tw_size_store_relaxed(&NOGIL_BYTES, <size_t>value)
    return previous


cdef inline bint _release_gil(Py_ssize_t nbytes) noexcept nogil:
    """Whether work over `nbytes` bytes runs without the GIL: the one test of NOGIL_BYTES, used
    by every kernel call (`if _release_gil(n): with nogil: ... else: ...`)."""
    return <size_t>nbytes >= tw_size_load_relaxed(&NOGIL_BYTES)

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

cdef extern from *:
    """
    #if defined(__GLIBC__)
    #define TW_GLIBC_MALLOC 1
    #else
    #define TW_GLIBC_MALLOC 0
    #endif
    /* malloc and free one block, untouched. The volatile keeps the compiler from removing the
       pair (an unused malloc/free pair is otherwise optimized away). */
    static void tw_malloc_free_block(size_t n) {
        void* volatile p = malloc(n);
        free(p);
    }
    """
    int TW_GLIBC_MALLOC
    void tw_malloc_free_block(size_t n) noexcept nogil

#: glibc's malloc serves a block of at least its mmap threshold (128 KiB at start) with its own
#: mmap and munmaps it on free, so every page of the next such block is faulted in again (one
#: minor fault per 4 KiB). When it frees such a block it raises the threshold to the block's size
#: (and its heap trim threshold to twice that): a process settles once it has freed its largest
#: block. A proxy pickling 40,000 ids may never settle: pickle.dumps grows its output to 1.5x
#: the ids (mmapped), shrinks it to 1x before returning it, and the free of that sets the
#: threshold just below the next request's 1.5x, so every request faults its blocks in
#: (`python tests/proxy_faults.py --mode pickle` counts the faults and times the serialize step;
#: whether a process falls into that cycle depends on the allocations it made first). So when
#: tokenwire allocates a vector of `nbytes` it first makes glibc settle for blocks of up to
#: MALLOC_SETTLE_FACTOR * nbytes, rounded up to a power of two:
#: malloc and free of one untouched block that size, which is glibc's own adaptation, done
#: before the first request instead of never. At most one per power of two up to glibc's cap on
#: the threshold (32 MiB), so a handful per process; no-op off glibc, and a no-op for the
#: thresholds when MALLOC_MMAP_THRESHOLD_ / M_MMAP_THRESHOLD fixes them (glibc then stops adapting).
#: The factor is 4, above the vector and its pickle's 1.5x, because the settled size also sets
#: glibc's trim threshold (twice it) and a proxy's free heap top holds more than one vector:
#: beside the vector lies the request's list (8 bytes per id: 2*nbytes), and a vector sent
#: out-of-band (copy=False) is freed by pyzmq's garbage-collector thread, which releases the
#: frames of several requests at once when it runs late. Such a burst (4 vectors and a list:
#: 1.2 MB at 40,000 ids) stays below the trim threshold a factor of 4 sets, so the heap top is not
#: given back to the kernel and faulted in again (`TOKENWIRE_MALLOC_SETTLE=1 python
#: tests/proxy_faults.py --mode oob --late 3`; tests/test_proxy_faults.py checks it).
#: The thresholds are process-wide and stay raised: the settling is a switch (malloc_settling(),
#: TOKENWIRE_MALLOC_SETTLE), so that a host process decides whether tokenwire touches them.
cdef size_t MALLOC_SETTLE_FACTOR = 4
cdef size_t MALLOC_SETTLE_MIN = 64 * 1024
cdef size_t MALLOC_SETTLE_MAX = 32 * 1024 * 1024
cdef size_t _malloc_settled = 0
cdef size_t _malloc_settling = _env_flag("TOKENWIRE_MALLOC_SETTLE")   # 0 or 1, atomic


def malloc_settling(enabled=None):
    """Whether tokenwire makes glibc's malloc settle before it allocates a large vector.

    Process-wide, off unless asked for. Settling mallocs and frees one untouched block of four
    times the vector (a power of two, at most 32 MiB), which raises glibc's mmap threshold to
    that size and its trim threshold to twice it, for the whole process and for good: a proxy
    that pickles 40,000-id requests then stops page-faulting its blocks in again; in exchange,
    blocks below the threshold come from the heap and up to twice it of free heap may stay with
    the process (docs/benchmarks.md, "glibc malloc settling", measures both). With `enabled`,
    sets it and returns the previous value; without, returns it. Starts from the environment
    variable TOKENWIRE_MALLOC_SETTLE (1/true/yes/on or 0/false/no/off, unset off; any other
    value fails at import). No effect off glibc, or when the process fixes the thresholds itself
    (``MALLOC_MMAP_THRESHOLD_``, ``mallopt``).
    """
    previous = bool(tw_size_load_relaxed(&_malloc_settling))
    if enabled is not None:
        tw_size_store_relaxed(&_malloc_settling, 1 if enabled else 0)
    return previous


cdef void malloc_settle(size_t nbytes) noexcept nogil:
    # Without the GIL two threads may settle at once: the high-water mark is one atomic word,
    # and glibc's own lock serializes the settling frees; a mark that two threads raise to
    # different sizes may end at the smaller one, which only makes a later vector settle again.
    cdef size_t want = MALLOC_SETTLE_MIN
    cdef size_t settled = tw_size_load_relaxed(&_malloc_settled)
    if (not tw_size_load_relaxed(&_malloc_settling) or not TW_GLIBC_MALLOC or nbytes < MALLOC_SETTLE_MIN // 2
            or nbytes * MALLOC_SETTLE_FACTOR <= settled):
        return
    if settled >= MALLOC_SETTLE_MAX:
        return
    while want < nbytes * MALLOC_SETTLE_FACTOR and want < MALLOC_SETTLE_MAX:
        want *= 2
    tw_size_store_relaxed(&_malloc_settled, want)
    # libc's malloc, not PyMem_Raw*: the point is to reach glibc's allocator (debug hooks would
    # also write every byte), and the block is freed at once, untouched: it holds no memory.
    tw_malloc_free_block(want)


def _buffer_address(obj):
    """The address of `obj`'s buffer, an int (where an Ext's data lies in the message msgspec
    decodes: tokenwire.msgspec's aux_ext_hook follows one decode by it)."""
    cdef Py_buffer view
    PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE)
    address = <uintptr_t>view.buf
    PyBuffer_Release(&view)
    return address


def _malloc_settled_bytes():
    """The largest block size tokenwire has made glibc's malloc settle for (0: none yet, or
    not glibc). For tests."""
    return tw_size_load_relaxed(&_malloc_settled)


cdef TokenVector tv_alloc(Py_ssize_t n):
    cdef TokenVector tv = TokenVector.__new__(TokenVector)
    if n < 0:
        raise ValueError(f"negative length {n}")
    if n == 0:
        return tv
    if n > (<Py_ssize_t>(<size_t>-1 >> 1)) // 4:
        raise MemoryError(f"cannot allocate {n} token ids")
    malloc_settle(<size_t>n * 4)
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
    if _release_gil(<Py_ssize_t>nbytes):
        with nogil:
            memcpy(tv._data, src, nbytes)
    else:
        memcpy(tv._data, src, nbytes)
    return tv


cdef int32_t* tv_aligned(TokenVector tv) except NULL:
    """`tv`'s ids at a 4-aligned address: a view of a frame at an unaligned address (decode
    reads those in place rather than copying them) gets an aligned copy of its own, once, on
    the first call, for those who dereference the pointer as int32 (the buffer protocol, a
    cimporting extension through `tv_data`). The view stays held until the vector dies: a
    reader that took the old pointer (a kernel running without the GIL) keeps reading valid,
    unchanged memory."""
    cdef int32_t* p
    cdef int32_t* view = <int32_t*>tw_ptr_load_acquire(<void**>&tv._data)
    cdef int32_t* now
    cdef size_t nbytes
    if (<uintptr_t>view) % 4 == 0:
        return view
    nbytes = <size_t>tv._len * 4
    # Only views are ever unaligned (owned storage comes from malloc): _owned is False here.
    p = <int32_t*>PyMem_RawMalloc(nbytes)
    if p == NULL:
        raise MemoryError(f"cannot allocate {tv._len} token ids ({nbytes} bytes)")
    memcpy(p, view, nbytes)
    # Published with one compare-and-swap: without the GIL two threads may make the copy at
    # once; the one whose swap failed frees its copy and takes the winner's.
    now = <int32_t*>tw_ptr_cas(<void**>&tv._data, view, p)
    if now != p:
        PyMem_RawFree(p)
        return now
    tv._owned = True
    return p


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
    and this wrapper. The case it exists for is a pyzmq `Frame` read from a tcp or ipc stream
    (libzmq never rewrites a received message, but a `zmq.Frame` built over a bytearray looks
    the same, so frames are not trusted by type, and over inproc a frame is the sender's own
    memory): `tokenwire.transport.received_buffer` wraps those, and
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
    `bytes`, `TokenVector` and `ImmutableBuffer` (an explicit promise; see there), and a read-only
    buffer of Ray's object store (`ray._raylet.SubBuffer`: Ray seals an object before any
    reader gets it and never changes it, so a request Ray delivers views its ids in the
    receiving node's object store, as numpy arrays do; Ray is never imported for the check).
    """
    cdef object t = type(obj)
    while t is memoryview or t is PickleBuffer:
        # memoryview(PickleBuffer(x)).obj is x: both wrappers lead to the owner of the memory.
        obj = (<memoryview>obj).obj if t is memoryview else memoryview(obj).obj
        t = type(obj)
    return t is bytes or t is TokenVector or t is ImmutableBuffer or _is_ray_object_buffer(obj)


cdef bint _is_ray_object_buffer(object obj) except -1:
    """Whether `obj` is a read-only buffer of a Ray object (`ray._raylet.SubBuffer`: what Ray's
    deserializer hands pickle for an out-of-band buffer). Ray seals an object before any reader
    can get it and never changes it afterwards (docs/transport.md, Ray), so the ids are viewed in
    the object store, as numpy arrays are. Ray is looked up, never imported: without it loaded,
    no object is one of its buffers."""
    raylet = sys.modules.get("ray._raylet")
    if raylet is None or type(obj) is not getattr(raylet, "SubBuffer", None):
        return False
    return memoryview(obj).readonly


cdef inline bint _can_view_ids(object owner, const void* ids) except -1:
    """Whether native int32 ids at `ids`, inside the memory of `owner`, may be viewed rather than
    copied: the host is little-endian (the wire's byte order) and the memory can never change
    (`is_immutable_source`). Any address: a vector reads its ids through `_id_at` and aligns
    them only when someone asks for an int32 pointer (`tv_aligned`). The one zero-copy test
    (decode, decode_many, TokenVector.frombuffer)."""
    return not TW_HOST_BIG_ENDIAN and is_immutable_source(owner)
