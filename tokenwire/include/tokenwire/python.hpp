// The Python -> std::vector<int32_t> hand-off shared by tokenwire/nanobind.hpp and
// tokenwire/pybind11.hpp, written against the CPython C API only. It includes Python.h first
// (before any standard header, as Python requires; a no-op after a binding library's).
//
// The rules are as_tokens' (tokenwire/_core.pyx), and so are the error types and messages: every
// input the fast paths below do not take, and every input they reject, goes to as_tokens' own
// code (tokenwire.as_tokens, or for the rest of a list its item conversion, through a capsule),
// so a bad input raises exactly what as_tokens raises.
//   * 1-D native int32 buffer (TokenVector, numpy int32, array('i'), memoryview.cast('i')):
//     one memcpy, or one strided copy; the GIL is released from tokenwire.gil_release_threshold().
//   * list / tuple: one typed loop reading exact ints of one CPython digit (every real token
//     id) in place (tokenwire/pyint.h, the kernel as_tokens uses); from the first other item
//     on, as_tokens' own conversion of the rest (tokenwire._core, through a capsule), with its
//     errors.
//   * anything else (other integer dtypes, byte-swapped buffers, ranges, iterables, and every
//     error outside a list or tuple): as_tokens' own one range-checked pass, then a memcpy of
//     its result.
// vocab_size is as_tokens' (and wire.hpp's decode): std::nullopt (Python: None) checks nothing;
// a value must be >= 1 and every id must lie in [0, vocab_size). A bad value or a failing check
// is handed to as_tokens(obj, vocab_size=...) so that the ValueError is the one Python users see
// ("vocab_size must be positive, got -1").
#ifndef TOKENWIRE_PYTHON_HPP
#define TOKENWIRE_PYTHON_HPP

#ifndef PY_SSIZE_T_CLEAN
#define PY_SSIZE_T_CLEAN
#endif
#include <Python.h>

#include <cstdint>
#include <cstring>
#include <new>
#include <optional>
#include <stdexcept>
#include <vector>

#include "byteorder.h"
#include "pyint.h"

namespace tokenwire {
namespace detail_py {

// A new reference to tokenwire._core.<name>, or nullptr with an error set. The function is
// looked up once and kept for the life of the process (one reference, never released): a
// lookup per call would cost more than copying a short prompt. Each is a plain static slot (not
// a C++ function-local static: its guard could deadlock with an import that releases the GIL),
// filled with one compare-and-swap (tokenwire/compat.h): on a free-threaded build two first
// calls may look the function up at once, and the one that loses drops its reference (when
// both found the same object, as they do, the loser cannot tell it lost, and that function
// keeps one more reference: it is kept for the whole process anyway).
inline PyObject* core_attr(const char* name) {
    PyObject* mod = PyImport_ImportModule("tokenwire._core");
    if (!mod) return nullptr;
    PyObject* attr = PyObject_GetAttrString(mod, name);
    Py_DECREF(mod);
    return attr;
}

inline PyObject* cached(void** slot, const char* name) {
    PyObject* f = static_cast<PyObject*>(tw_ptr_load_acquire(slot));
    if (!f) {
        PyObject* mine = core_attr(name);
        if (!mine) return nullptr;
        f = static_cast<PyObject*>(tw_ptr_publish(slot, mine));
        if (f != mine) Py_DECREF(mine);
    }
    Py_INCREF(f);
    return f;
}

inline PyObject* as_tokens_function() {
    static void* fn = nullptr;
    return cached(&fn, "as_tokens");
}

// tokenwire._core's conversion of a sequence's remaining items (tokenwire/pyint.h,
// TW_ITEMS_INTO_CAPSULE), or nullptr (no error set) when the tokenwire installed does not
// export it -- an older one than these headers, or one whose function has another signature
// (a new capsule name): then such sequences go to as_tokens whole, as before the capsule. Looked
// up once, like the functions above; a failed lookup is remembered too.
inline tw_items_into_fn items_into_function() {
    static void* fn = nullptr;
    static char missing;
    void* f = tw_ptr_load_acquire(&fn);
    if (!f) {
        f = PyCapsule_Import(TW_ITEMS_INTO_CAPSULE, 0);
        if (!f) {
            PyErr_Clear();                      // as_tokens, if it is called, reports its own
            f = &missing;
        }
        tw_ptr_publish(&fn, f);                 // a loser found the same pointer
    }
    return f == &missing ? nullptr : reinterpret_cast<tw_items_into_fn>(f);
}

inline PyObject* gil_release_threshold_function() {
    static void* fn = nullptr;
    return cached(&fn, "gil_release_threshold");
}

// tokenwire.gil_release_threshold(): bytes from which copies run with the GIL released.
inline bool gil_threshold(Py_ssize_t* out) {
    PyObject* f = gil_release_threshold_function();
    if (!f) return false;
    PyObject* r = PyObject_CallNoArgs(f);
    Py_DECREF(f);
    if (!r) return false;
    *out = PyLong_AsSsize_t(r);
    Py_DECREF(r);
    return !(*out == -1 && PyErr_Occurred());
}

inline bool resize(std::vector<int32_t>& out, size_t n) {
    try {
        out.resize(n);
    } catch (const std::bad_alloc&) {
        PyErr_NoMemory();
        return false;
    } catch (const std::length_error&) {
        PyErr_NoMemory();
        return false;
    }
    return true;
}

// A C-contiguous or strided 1-D native int32 buffer into out: one memcpy (vector::assign of a
// contiguous range) or one strided pass; allocation and copy run without the GIL from
// tokenwire.gil_release_threshold() bytes on.
inline bool copy_int32(const Py_buffer& view, std::vector<int32_t>& out) {
    const Py_ssize_t n = view.shape ? view.shape[0] : view.len / 4;
    const Py_ssize_t stride = view.strides ? view.strides[0] : 4;
    Py_ssize_t threshold = 0;
    if (!gil_threshold(&threshold)) return false;
    const char* src = static_cast<const char*>(view.buf);
    bool ok = true;
    auto copy = [&] {
        try {
            if (stride == 4) {
                const int32_t* p = reinterpret_cast<const int32_t*>(src);
                out.assign(p, p + n);
            } else {
                out.resize(size_t(n));
                for (Py_ssize_t i = 0; i < n; i++)
                    std::memcpy(&out[size_t(i)], src + i * stride, 4);
            }
        } catch (const std::exception&) {   // bad_alloc, length_error
            ok = false;
        }
    };
    if (n > 0 && n * 4 >= threshold) {
        Py_BEGIN_ALLOW_THREADS
        copy();
        Py_END_ALLOW_THREADS
    } else {
        copy();
    }
    if (!ok) PyErr_NoMemory();
    return ok;
}

// A 1-D buffer of native-order 4-byte signed ints: usable as int32_t where it lies.
inline bool is_native_int32(const Py_buffer& view) {
    if (view.ndim != 1 || view.itemsize != 4 || view.format == nullptr) return false;
    const char* f = view.format;
#if TW_HOST_BIG_ENDIAN
    if (*f == '@' || *f == '=' || *f == '>' || *f == '!') f++;
#else
    if (*f == '@' || *f == '=' || *f == '<') f++;
#endif
    return f[0] != 0 && f[1] == 0 && std::strchr("ilqn", f[0]) != nullptr;
}

// as_tokens(obj[, vocab_size=...]) copied into out: the general path and every error.
inline bool via_as_tokens(PyObject* obj, std::optional<int64_t> vocab_size,
                          std::vector<int32_t>& out) {
    PyObject* as_tokens = as_tokens_function();
    if (!as_tokens) return false;
    PyObject* args = PyTuple_Pack(1, obj);
    PyObject* kwargs = nullptr;
    PyObject* tv = nullptr;
    if (args && vocab_size) {
        kwargs = Py_BuildValue("{s:L}", "vocab_size", static_cast<long long>(*vocab_size));
        if (!kwargs) Py_CLEAR(args);
    }
    if (args) tv = PyObject_Call(as_tokens, args, kwargs);
    Py_XDECREF(kwargs);
    Py_XDECREF(args);
    Py_DECREF(as_tokens);
    if (!tv) return false;
    Py_buffer view;
    if (PyObject_GetBuffer(tv, &view, PyBUF_RECORDS_RO) != 0) {
        Py_DECREF(tv);
        return false;
    }
    const bool ok = copy_int32(view, out);
    PyBuffer_Release(&view);
    Py_DECREF(tv);
    return ok;
}

// Holds a list's critical section for its scope: on free-threaded CPython (Py_GIL_DISABLED,
// 3.13+) the list's per-object lock, so a thread that appends to the list meanwhile waits and
// the item array read under it is never freed; nothing on a build with the GIL. A tuple (or
// anything else) is not locked: a tuple's items never change.
class list_lock {
public:
    explicit list_lock(PyObject* obj) {
#ifdef Py_GIL_DISABLED
        held_ = PyList_Check(obj);
        if (held_) PyCriticalSection_Begin(&cs_, obj);
#else
        (void)obj;
#endif
    }
    ~list_lock() {
#ifdef Py_GIL_DISABLED
        if (held_) PyCriticalSection_End(&cs_);
#endif
    }
    list_lock(const list_lock&) = delete;
    list_lock& operator=(const list_lock&) = delete;

private:
#ifdef Py_GIL_DISABLED
    PyCriticalSection cs_;
    bool held_ = false;
#endif
};

// out = the ids in obj (as_tokens' rules and errors). Returns false with a Python error set.
inline bool to_vector(PyObject* obj, std::optional<int64_t> vocab_size,
                      std::vector<int32_t>& out) {
    if (vocab_size && *vocab_size <= 0)                 // as_tokens raises its ValueError
        return via_as_tokens(obj, vocab_size, out);
    bool done = false;
    if (PyList_Check(obj) || PyTuple_Check(obj)) {
        // Looked up before the list is read: the first lookup imports, which may let other
        // threads run (and change the list) between the read of its size and the conversion.
        const tw_items_into_fn items_into = items_into_function();
        list_lock lock(obj);
        const Py_ssize_t n = PySequence_Fast_GET_SIZE(obj);
        PyObject** items = PySequence_Fast_ITEMS(obj);
        if (!resize(out, size_t(n))) return false;
        // as_tokens' own loop (tokenwire/pyint.h). Where it stops, the item needs as_tokens'
        // general path (an int subclass, a numpy scalar, a big int, a bool, a non-int): the
        // rest of the sequence, from that item on, is converted by as_tokens' own function
        // (which raises its error, naming the index), still inside the list's lock; the items
        // before it are not read again.
        const Py_ssize_t stop = tw_pyints_small_values(items, n, out.data());
        if (stop == n) {
            done = true;
        } else if (items_into) {
            if (items_into(obj, stop, n, out.data()) != 0) return false;
            done = true;
        }
    } else if (PyObject_CheckBuffer(obj) && !PyBytes_Check(obj) && !PyByteArray_Check(obj)) {
        Py_buffer view;
        if (PyObject_GetBuffer(obj, &view, PyBUF_RECORDS_RO) == 0) {
            if (is_native_int32(view)) {
                const bool ok = copy_int32(view, out);
                PyBuffer_Release(&view);
                if (!ok) return false;
                done = true;
            } else {
                PyBuffer_Release(&view);
            }
        } else {
            PyErr_Clear();                              // as_tokens reports it below
        }
    }
    if (!done) return via_as_tokens(obj, vocab_size, out);
    if (vocab_size) {
        // Unsigned compare: a negative id wraps to >= 2**31. Branch-free, so it vectorizes.
        const uint32_t limit = *vocab_size > (int64_t(1) << 31) ? uint32_t(1) << 31
                                                                : uint32_t(*vocab_size);
        bool ok = true;
        for (int32_t v : out) ok &= uint32_t(v) < limit;
        if (!ok) return via_as_tokens(obj, vocab_size, out);    // raises as_tokens' ValueError
    }
    return true;
}

// Move the pending Python error into a holder and back (for casters that must not throw).
struct saved_error {
#if PY_VERSION_HEX >= 0x030C0000
    PyObject* exc = nullptr;
    void fetch() { exc = PyErr_GetRaisedException(); }
    void restore() { PyErr_SetRaisedException(exc); exc = nullptr; }
    bool set() const { return exc != nullptr; }
    void clear() { Py_CLEAR(exc); }
#else
    PyObject *type = nullptr, *value = nullptr, *tb = nullptr;
    void fetch() { PyErr_Fetch(&type, &value, &tb); }
    void restore() { PyErr_Restore(type, value, tb); type = value = tb = nullptr; }
    bool set() const { return type != nullptr; }
    void clear() { Py_CLEAR(type); Py_CLEAR(value); Py_CLEAR(tb); }
#endif
};

}  // namespace detail_py

// Token ids taken from Python by a binding's type caster (tokenwire/nanobind.hpp,
// tokenwire/pybind11.hpp): declare a constructor parameter as `tokenwire::Tokens` and it accepts
// a list, a tuple, an ndarray, a TokenVector -- whatever tokenwire.as_tokens accepts.
struct Tokens {
    std::vector<int32_t> ids;

    Tokens() = default;
    explicit Tokens(std::vector<int32_t> v) : ids(std::move(v)) {}
    operator std::vector<int32_t>&() & { return ids; }
    operator std::vector<int32_t>&&() && { return std::move(ids); }
};

}  // namespace tokenwire

#endif  // TOKENWIRE_PYTHON_HPP
