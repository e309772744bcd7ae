# list[int] materialization: `tolist`, built in C through the process-wide int table.
#
# Included by _core.pyx (the hub): one file per concept, one extension module, so every file
# sees TokenVector's fields and the other files' cdef functions directly.

# --------------------------------------------------------------------------------------------
# list materialization

@cython.boundscheck(False)
@cython.wraparound(False)
cdef list _tolist_strided(const char* src, Py_ssize_t n, Py_ssize_t stride):
    cdef PyObject* lst = PyList_New(n)
    cdef PyObject* o
    cdef PyObject* winner
    cdef int32_t v
    cdef Py_ssize_t i
    if lst == NULL:
        raise MemoryError()
    for i in range(n):
        memcpy(&v, src + i * stride, 4)
        if <uint32_t>v < _INT_CACHE:
            o = <PyObject*>tw_ptr_load_acquire(<void**>&_int_table[v])
            if o == NULL:
                o = PyLong_FromLong(v)
                if o == NULL:
                    Py_DECREF(<object>lst)   # items not yet set are NULL: list dealloc skips them
                    raise MemoryError()
                # Published once: the table keeps this reference forever. A thread that lost
                # the race (no GIL: another filled the slot meanwhile) takes the winner's.
                winner = <PyObject*>tw_ptr_publish(<void**>&_int_table[v], o)
                if winner != o:
                    Py_DECREF(<object>o)
                    o = winner
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
    cdef Py_ssize_t n, stride
    if type(obj) is TokenVector:
        return (<TokenVector>obj).tolist()
    cdef int ids = _acquire_ids(obj, &view, &n, &stride)
    if ids != IDS_NOT_BUFFER:
        try:
            if ids >= IDS_INT32_STRIDED:      # the layout as _acquire_ids decided it
                return _tolist_strided(<const char*>view.buf, n, stride)
        finally:
            PyBuffer_Release(&view)
    return as_tokens(obj).tolist()
