# The shared-memory ring's state words (tokenwire.shm): atomic loads, stores and
# compare-and-swaps on the aligned 8-byte words of a segment's header pages.
#
# Included by _core.pyx (the hub). The atomics are the C header include/tokenwire/shmring.h;
# this file only checks what Python hands it (alignment, bounds) and names the errors.

cdef extern from "tokenwire/shmring.h" nogil:
    uint64_t tw_shm_load(const uint64_t* word)
    void tw_shm_store(uint64_t* word, uint64_t value)
    int tw_shm_cas(uint64_t* word, uint64_t expect, uint64_t desired)
    ctypedef struct tw_shm_guard:
        int64_t users
        int32_t closing
    int tw_shm_enter(tw_shm_guard* g)
    void tw_shm_leave(tw_shm_guard* g)
    int tw_shm_close(tw_shm_guard* g)
    int tw_shm_wait(const uint64_t* word, uint64_t value, int64_t timeout_ns,
                    const tw_shm_guard* guard)

# Without a GIL every access to the words enters the guard; with one, only the wait (the one
# access made without it) does: release() and the other accesses hold the GIL.
cdef extern from *:
    """
    #ifdef Py_GIL_DISABLED
    #  define TW_SHM_GUARD_EACH 1
    #else
    #  define TW_SHM_GUARD_EACH 0
    #endif
    """
    const int TW_SHM_GUARD_EACH

#: The longest spin `Receiver.recv` and `Receiver.poll` accept, in microseconds (a minute).
cdef double _max_spin_us = 60_000_000.0
MAX_SPIN_US = _max_spin_us


cdef class _ShmWords:
    """The first `count` 8-byte words of a writable buffer (a segment's mapping), read and
    written atomically. The buffer must start on an 8-byte boundary (a mapping starts on a
    page). `release()` lets the mapping close: it waits for the accesses in progress (a spinning
    `wait` ends at once, with ValueError), and later ones raise ValueError."""
    cdef Py_buffer view
    cdef uint64_t* words
    cdef tw_shm_guard guard
    cdef readonly Py_ssize_t count

    def __cinit__(self, obj, Py_ssize_t count):
        self.words = NULL
        self.guard.users = 0
        self.guard.closing = 1
        PyObject_GetBuffer(obj, &self.view, PyBUF_SIMPLE | PyBUF_WRITABLE)
        if count < 0 or count > self.view.len // 8:
            PyBuffer_Release(&self.view)
            raise ValueError(f"_ShmWords: {count} words do not fit in {self.view.len} bytes")
        if (<uintptr_t>self.view.buf) % 8 != 0:
            PyBuffer_Release(&self.view)
            raise ValueError("_ShmWords: the buffer does not start on an 8-byte boundary")
        self.words = <uint64_t*>self.view.buf
        self.count = count
        self.guard.closing = 0

    def __dealloc__(self):
        if self.words != NULL:
            PyBuffer_Release(&self.view)

    cdef inline uint64_t* _at(self, Py_ssize_t i) except NULL:
        if self.words == NULL:
            raise ValueError("_ShmWords: released")
        if i < 0 or i >= self.count:
            raise IndexError(f"_ShmWords: word {i} outside [0, {self.count})")
        return self.words + i

    cdef inline int _enter(self) except -1:
        if TW_SHM_GUARD_EACH and not tw_shm_enter(&self.guard):
            raise ValueError("_ShmWords: released")
        return 0

    cdef inline void _leave(self) noexcept:
        if TW_SHM_GUARD_EACH:
            tw_shm_leave(&self.guard)

    def release(self):
        """Give the buffer back (the mapping may then close) once no access is in progress;
        later calls raise ValueError."""
        cdef int mine
        if self.words == NULL:
            return
        with nogil:
            mine = tw_shm_close(&self.guard)
        if mine:
            self.words = NULL
            PyBuffer_Release(&self.view)

    @property
    def users(self):
        """The accesses in progress (a spinning `wait`; with no GIL, any access)."""
        return self.guard.users

    def write(self, Py_ssize_t offset, data):
        """Copy the bytes of `data` into the buffer at byte `offset`, which lies past the
        words (a slot's bytes): IndexError when they do not fit there."""
        cdef Py_buffer src
        PyObject_GetBuffer(data, &src, PyBUF_SIMPLE)
        try:
            self._enter()
            try:
                if self.words == NULL:
                    raise ValueError("_ShmWords: released")
                if offset < self.count * 8 or src.len > self.view.len - offset:
                    raise IndexError(f"_ShmWords.write: {src.len} bytes at {offset} outside "
                                     f"[{self.count * 8}, {self.view.len})")
                memcpy(<char*>self.view.buf + offset, src.buf, <size_t>src.len)
            finally:
                self._leave()
        finally:
            PyBuffer_Release(&src)

    def load(self, Py_ssize_t i):
        """Word `i` (acquire)."""
        cdef uint64_t value
        self._enter()
        try:
            value = tw_shm_load(self._at(i))
        finally:
            self._leave()
        return value

    def store(self, Py_ssize_t i, uint64_t value):
        """Word `i` = `value` (release)."""
        self._enter()
        try:
            tw_shm_store(self._at(i), value)
        finally:
            self._leave()

    def cas(self, Py_ssize_t i, uint64_t expect, uint64_t desired):
        """Word `i` from `expect` to `desired` if it holds `expect`: True, else False. Loads
        before it (a slot's bytes) complete before it, stores after it (a slot's bytes) start
        after it."""
        cdef int done
        self._enter()
        try:
            done = tw_shm_cas(self._at(i), expect, desired)
        finally:
            self._leave()
        return done != 0

    def wait(self, Py_ssize_t i, uint64_t value, double timeout_us):
        """Spin, without the GIL, until word `i` holds `value` or `timeout_us` have passed:
        True if it does. The receiver's low-latency wait for the next message. The mapping
        stays while it spins; a `release()` meanwhile ends it with ValueError."""
        cdef const uint64_t* w
        cdef int64_t ns
        cdef int ok
        # Checked as a double, before the conversion: a double beyond int64 (or NaN) converted
        # to int64 is undefined behaviour.
        if not 0.0 <= timeout_us <= _max_spin_us:
            raise ValueError(f"_ShmWords.wait: timeout_us must be in [0, {_max_spin_us:.0f}] "
                             f"(a minute), got {timeout_us}")
        ns = <int64_t>(timeout_us * 1000.0)
        if not tw_shm_enter(&self.guard):
            raise ValueError("_ShmWords: released")
        try:
            w = self._at(i)
        except BaseException:
            tw_shm_leave(&self.guard)
            raise
        with nogil:
            ok = tw_shm_wait(w, value, ns, &self.guard)
            tw_shm_leave(&self.guard)
        if ok < 0:
            raise ValueError("_ShmWords: released while waiting")
        return ok != 0
