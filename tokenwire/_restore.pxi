# Token data restored from a pickle: the unpickling constructor of TokenVector and the one rule
# for a source named many times (also used by the token fields of a pickled request state).
#
# Included by _core.pyx (the hub): one file per concept, one extension module, so every file
# sees TokenVector's fields and the other files' cdef functions directly.

def _restore_token_vector(data):
    """Unpickling constructor (a stable name: pickles refer to it, see PICKLE_GLOBALS).

    `data` is the raw int32 bytes, or at protocols 0-2 the same bytes as a latin-1 str. A
    pickle that names one source many times gets one vector (see `_restore_shared`)."""
    try:
        return _restore_shared(data, _frombuffer)
    except UnicodeEncodeError:
        raise TokenIdError("pickled TokenVector text holds a code point above 255") from None


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
#     a reused address holding other bytes is a miss. A hit costs a comparison, never memory;
#     and since a pickle can name one buffer again in 2 bytes, the comparisons are bounded too:
#     more than _MAX_REPEATS hits on one mutable source are refused (tokenwire never names one
#     buffer twice: each vector pickles its own, and the pickler memoizes the vector itself).
cdef dict _restored = {}
cdef Py_ssize_t _MAX_REPEATS = 64


def _forget_restored(key):
    def forget(ref):
        entry = _restored.get(key)
        if entry is not None and entry[1] is ref:
            del _restored[key]
    return forget


cdef object _remember(object key, object source, object result):
    _restored[key] = (source, _weakref.ref(result, _forget_restored(key)), [0])
    return result


def _restore_shared(data, make):
    """`make(frame)` for token data read from a pickle: `frame` is `data` when it is immutable,
    else a bytes copy of it (a str is its latin-1 bytes; UnicodeEncodeError otherwise). The
    same source (same object, or same unchanged mutable memory) gives the same result while
    that result is alive, without calling `make` again."""
    cdef Py_buffer view
    cdef object key, entry, result, snapshot
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
                entry[2][0] += 1
                if entry[2][0] > _MAX_REPEATS:
                    # A rule of the pickle, not of a frame: refused as find_class refuses a
                    # global it does not allow.
                    raise _UnpicklingError(
                        f"the pickle names one mutable buffer of {view.len} bytes more than "
                        f"{_MAX_REPEATS} times")
                if memcmp(PyBytes_AS_STRING(entry[0]), view.buf, <size_t>view.len) == 0:
                    return result
        snapshot = PyBytes_FromStringAndSize(<const char*>view.buf, view.len)
    finally:
        PyBuffer_Release(&view)
    result = make(snapshot)
    return _remember(key, snapshot, result)
