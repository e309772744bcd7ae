# The shared-memory ring's state words (tokenwire.shm): atomic loads, stores and
# compare-and-swaps on the aligned 8-byte words of a segment's header pages.
#
# Included by _core.pyx (the hub). The atomics are the C header include/tokenwire/shmring.h;
# this file only checks what Python hands it (alignment, bounds) and names the errors.

cdef extern from "tokenwire/shmring.h" nogil:
    uint64_t tw_shm_load(const uint64_t* word)
    void tw_shm_store(uint64_t* word, uint64_t value)
    int tw_shm_cas(uint64_t* word, uint64_t expect, uint64_t desired)
    int tw_shm_wait(const uint64_t* word, uint64_t value, int64_t timeout_ns)

#: The longest spin `Receiver.recv` and `Receiver.poll` accept, in microseconds (a minute).
cdef double _max_spin_us = 60_000_000.0
MAX_SPIN_US = _max_spin_us


cdef class _ShmWords:
    """The first `count` 8-byte words of a writable buffer (a segment's mapping), read and
    written atomically. The buffer must start on an 8-byte boundary (a mapping starts on a
    page). `release()` lets the mapping close."""
    cdef Py_buffer view
    cdef uint64_t* words
    cdef readonly Py_ssize_t count

    def __cinit__(self, obj, Py_ssize_t count):
        self.words = NULL
        PyObject_GetBuffer(obj, &self.view, PyBUF_SIMPLE | PyBUF_WRITABLE)
        if count < 0 or count > self.view.len // 8:
            PyBuffer_Release(&self.view)
            raise ValueError(f"_ShmWords: {count} words do not fit in {self.view.len} bytes")
        if (<uintptr_t>self.view.buf) % 8 != 0:
            PyBuffer_Release(&self.view)
            raise ValueError("_ShmWords: the buffer does not start on an 8-byte boundary")
        self.words = <uint64_t*>self.view.buf
        self.count = count

    def __dealloc__(self):
        if self.words != NULL:
            PyBuffer_Release(&self.view)

    cdef inline uint64_t* _at(self, Py_ssize_t i) except NULL:
        if self.words == NULL:
            raise ValueError("_ShmWords: released")
        if i < 0 or i >= self.count:
            raise IndexError(f"_ShmWords: word {i} outside [0, {self.count})")
        return self.words + i

    def release(self):
        """Give the buffer back (the mapping may then close); later calls raise ValueError."""
        if self.words != NULL:
            self.words = NULL
            PyBuffer_Release(&self.view)

    def load(self, Py_ssize_t i):
        """Word `i` (acquire)."""
        return tw_shm_load(self._at(i))

    def store(self, Py_ssize_t i, uint64_t value):
        """Word `i` = `value` (release)."""
        tw_shm_store(self._at(i), value)

    def cas(self, Py_ssize_t i, uint64_t expect, uint64_t desired):
        """Word `i` from `expect` to `desired` if it holds `expect`: True, else False. Loads
        before it (a slot's bytes) complete before it, stores after it (a slot's bytes) start
        after it."""
        return tw_shm_cas(self._at(i), expect, desired) != 0

    def wait(self, Py_ssize_t i, uint64_t value, double timeout_us):
        """Spin, without the GIL, until word `i` holds `value` or `timeout_us` have passed:
        True if it does. The receiver's low-latency wait for the next message."""
        cdef const uint64_t* w = self._at(i)
        cdef int64_t ns
        cdef int ok
        # Checked as a double, before the conversion: a double beyond int64 (or NaN) converted
        # to int64 is undefined behaviour.
        if not 0.0 <= timeout_us <= _max_spin_us:
            raise ValueError(f"_ShmWords.wait: timeout_us must be in [0, {_max_spin_us:.0f}] "
                             f"(a minute), got {timeout_us}")
        ns = <int64_t>(timeout_us * 1000.0)
        with nogil:
            ok = tw_shm_wait(w, value, ns)
        return ok != 0
