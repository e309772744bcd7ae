# Token data restored from a pickle: the unpickling constructor of TokenVector and the one rule
# for a source named many times (also used by the token fields of a pickled request state).
#
# Included by _core.pyx (the hub): one file per concept, one extension module, so every file
# sees TokenVector's fields and the other files' cdef functions directly.

def _restore_token_vector(data):
    """Unpickling constructor (a stable name: pickles refer to it, see tokenwire.unpickle._PICKLE_GLOBALS).

    `data` is the raw int32 bytes, or at protocols 0-2 the same bytes as a latin-1 str. A
    pickle that names one source many times gets one vector (see `_restore_shared`)."""
    try:
        return _restore_shared(data, _frombuffer)
    except UnicodeEncodeError:
        raise TokenIdError("pickled TokenVector text holds a code point above 255") from None


import threading as _threading
import weakref as _weakref

_frombuffer = TokenVector.frombuffer

# Token data restored from a pickle (_restore_token_vector, the token fields of a pickled
# request state): share what is immutable, copy what is mutable at most once per source, so
# memory stays within a constant factor of the pickle however often it names one source (its
# memo lets 2 bytes name an object again; one 1 MB bytearray restored 300 times cost 300 MiB).
# The table maps a source to the vector made from it, weakly: an entry lives only as long as
# that vector, so it never holds more than the caller keeps.
#   immutable source (bytes, str, ImmutableBuffer, ...): keyed by identity; the entry holds the
#     source, so its id cannot be reused while the entry exists;
#   mutable source (bytearray, a memoryview of writable memory, a zmq.Frame): copied once into
#     a bytes snapshot, keyed by (address, size); a hit returns the earlier vector only when
#     the memory still equals the snapshot (memcmp), so a write made since is never hidden, and
#     a reused address holding other bytes is a miss. A hit costs a comparison, never memory.
#
# Inside a load scope (`load_scope`, public as tokenwire.unpickle.load_scope: tokenwire's
# receivers open one around each pickle they load, a stack opens one around its own unpickler) the table is the load's own:
# it holds its entries strongly and counts repeats per pickle, and it is dropped when the load
# returns. Since a pickle can name one buffer again in 2 bytes, the comparisons are bounded
# there: more than _MAX_REPEATS hits on one mutable source in one load are refused (tokenwire
# never names one buffer twice: each vector pickles its own, and the pickler memoizes the
# vector itself). Dropping a restored vector (a pickle can pop what it built) neither forgets
# the source nor resets its count, and one message's count never reaches the next message,
# however its frames land at the address of the last one. Outside a scope (a bare
# pickle.loads) the table is the process-wide weak one above, which counts nothing: it cannot
# tell where one load ends and the next begins, and a count kept across loads would refuse a
# valid message that arrives into the same buffer as 64 before it.
cdef dict _restored = {}
cdef Py_ssize_t _MAX_REPEATS = 64
_scope = _threading.local()              # .table: the table of this thread's load in progress


@cython.final
cdef class _LoadScope:
    """``with load_scope():`` a pickle loaded in the block restores its token data through a
    table of its own (see above), dropped at the end of the block. Scopes nest: an inner one
    (a load inside a load) has its own table, and the outer one's comes back after it."""
    cdef object _outer

    def __enter__(self):
        self._outer = getattr(_scope, "table", None)
        _scope.table = {}
        return self

    def __exit__(self, *exc):
        _scope.table = self._outer
        self._outer = None
        return False


def load_scope():
    """``with load_scope(): unpickler.load()``: the pickle loaded in the block restores its token
    data (TokenVector buffers, request token fields) through a table of its own, dropped when
    the block ends. One source named many times gives one vector (immutable: viewed or decoded
    once; mutable: copied once while its bytes are unchanged), and a pickle that names one
    mutable buffer more than 64 times is refused with ``pickle.UnpicklingError``, counted per
    pickle: a vector dropped during the load does not reset the count, and nothing carries over
    to the next pickle. A request state applied to a second object of the load is refused.
    tokenwire's receivers load every pickle in one; a stack with its own ``Unpickler`` opens it
    around ``load()``. Outside a scope the table is process-wide and weak (an entry lives as
    long as its vector), which bounds only what stays alive."""
    return _LoadScope()


cdef object _too_many_repeats(Py_ssize_t nbytes):
    # A rule of the pickle, not of a frame: refused as find_class refuses a global it does not
    # allow.
    return _UnpicklingError(f"the pickle names one mutable buffer of {nbytes} bytes more than "
                            f"{_MAX_REPEATS} times")


def _forget_restored(key):
    def forget(ref):
        entry = _restored.get(key)
        if entry is not None and entry[1] is ref:
            # pop, not del: without the GIL another thread may have replaced or removed the
            # entry since the get (a lost entry costs a copy, a KeyError here would be raised
            # from a weakref callback)
            _restored.pop(key, None)
    return forget


cdef object _remember(object key, object source, object result):
    _restored[key] = (source, _weakref.ref(result, _forget_restored(key)))
    return result


def _restore_shared(data, make):
    """`make(frame)` for token data read from a pickle: `frame` is `data` when it is immutable,
    else a bytes copy of it (a str is its latin-1 bytes; UnicodeEncodeError otherwise). The
    same source (same object, or same unchanged mutable memory) gives the same result while
    that result is alive, without calling `make` again."""
    cdef Py_buffer view
    cdef object key, entry, result, snapshot
    cdef object table = getattr(_scope, "table", None)
    if table is not None:
        return _restore_in_load(<dict>table, data, make)
    if type(data) is str or is_immutable_source(data):
        key = (make, id(data))
        entry = _restored.get(key)
        if entry is not None and entry[0] is data:
            result = entry[1]()
            if result is not None:
                return result
        result = make((<str>data).encode("latin-1") if type(data) is str else data)
        return _remember(key, data, result)
    try:
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    except (TypeError, ValueError, BufferError):
        return make(data)            # not plain bytes: `make` says what is wrong with it
    try:
        key = (make, <uintptr_t>view.buf, view.len)
        entry = _restored.get(key)
        if entry is not None:
            result = entry[1]()
            if result is not None:
                if memcmp(PyBytes_AS_STRING(entry[0]), view.buf, <size_t>view.len) == 0:
                    return result
        snapshot = PyBytes_FromStringAndSize(<const char*>view.buf, view.len)
    finally:
        PyBuffer_Release(&view)
    result = make(snapshot)
    return _remember(key, snapshot, result)


cdef object _restore_in_load(dict table, object data, object make):
    """`_restore_shared` inside a load scope: entries held strongly, for this load only. An
    immutable source is keyed by identity (the entry keeps it alive, so its id is not reused);
    a mutable one by (address, size), each repeat counted, and a hit taken only while the memory
    still equals the snapshot (a changed buffer gives a new copy; the count goes on)."""
    cdef Py_buffer view
    cdef object key, entry, result, snapshot
    cdef Py_ssize_t repeats = 0
    if type(data) is str or is_immutable_source(data):
        key = (make, id(data))
        entry = table.get(key)
        if entry is not None and entry[0] is data:
            return entry[1]
        result = make((<str>data).encode("latin-1") if type(data) is str else data)
        table[key] = (data, result)
        return result
    try:
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    except (TypeError, ValueError, BufferError):
        return make(data)            # not plain bytes: `make` says what is wrong with it
    try:
        key = (make, <uintptr_t>view.buf, view.len)
        entry = table.get(key)
        if entry is not None:
            repeats = <Py_ssize_t>entry[2] + 1
            if repeats > _MAX_REPEATS:
                raise _too_many_repeats(view.len)
            if memcmp(PyBytes_AS_STRING(entry[0]), view.buf, <size_t>view.len) == 0:
                table[key] = (entry[0], entry[1], repeats)
                return entry[1]
        snapshot = PyBytes_FromStringAndSize(<const char*>view.buf, view.len)
    finally:
        PyBuffer_Release(&view)
    result = make(snapshot)
    table[key] = (snapshot, result, repeats)
    return result


def _claim_state(state):
    """Inside a load scope, refuse a state object applied to a second object of the same load:
    each object takes a copy of its state, so a pickle naming one state again in 2 bytes per
    object would take memory quadratic in its size. The pickler writes each object's own
    state; outside a scope nothing is counted (as for repeated buffers)."""
    cdef object table = getattr(_scope, "table", None)
    if table is None:
        return
    key = (_claim_state, id(state))
    if key in table:
        raise _UnpicklingError(f"the pickle applies one state of {len(state)} entries to more "
                               f"than one object")
    table[key] = state            # held: its id is not reused while the load lasts
