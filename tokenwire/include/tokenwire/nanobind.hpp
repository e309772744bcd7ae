// Token ids from Python into C++ for nanobind extensions (include after <nanobind/nanobind.h>).
//
//   std::vector<int32_t> tokenwire::to_vector(nanobind::handle obj,
//                                             std::optional<int64_t> vocab_size = std::nullopt);
//   tokenwire::Tokens   a type with a caster: `Request(tokenwire::Tokens ids, ...)` accepts a
//                       list, a tuple, an ndarray, a TokenVector -- what tokenwire.as_tokens does.
//
// A native int32 buffer is one memcpy; a list of ints one typed loop; bad input raises what
// as_tokens raises (same types, same messages). The rules live in tokenwire/python.hpp. Needs
// the tokenwire Python package at run time (errors and the rare input types are delegated to it).
#ifndef TOKENWIRE_NANOBIND_HPP
#define TOKENWIRE_NANOBIND_HPP

#include <nanobind/nanobind.h>

#include "python.hpp"

namespace tokenwire {

// The ids in obj; with a vocab_size each must lie in [0, vocab_size) (a vocab_size < 1 raises
// as_tokens' ValueError; std::nullopt, Python's None, checks nothing). Call with the GIL
// held; raises (nanobind::python_error) OverflowError / TypeError / ValueError like as_tokens.
inline std::vector<int32_t> to_vector(nanobind::handle obj,
                                      std::optional<int64_t> vocab_size = std::nullopt) {
    std::vector<int32_t> out;
    if (!detail_py::to_vector(obj.ptr(), vocab_size, out)) throw nanobind::python_error();
    return out;
}

}  // namespace tokenwire

namespace nanobind {
namespace detail {

// nanobind casters must not throw while arguments are being converted, and returning false
// would replace as_tokens' message with a generic "incompatible arguments" TypeError. So a
// failed conversion keeps its Python error and raises it when the bound function asks for the
// value (nanobind translates that exception back into the original Python error).
template <> struct type_caster<tokenwire::Tokens> {
    using Value = tokenwire::Tokens;
    static constexpr auto Name = const_name("collections.abc.Sequence[int]");
    template <typename T_> using Cast = movable_cast_t<T_>;
    template <typename T_> static constexpr bool can_cast() { return true; }

    Value value;
    tokenwire::detail_py::saved_error error;

    type_caster() = default;
    type_caster(const type_caster&) = delete;
    type_caster& operator=(const type_caster&) = delete;
    ~type_caster() { error.clear(); }     // an error nobody asked for (another overload won)

    bool from_python(handle src, uint32_t, cleanup_list*) noexcept {
        if (!tokenwire::detail_py::to_vector(src.ptr(), std::nullopt, value.ids)) error.fetch();
        return true;
    }

    static handle from_cpp(const Value& v, rv_policy, cleanup_list*) noexcept {
        PyObject* lst = PyList_New(Py_ssize_t(v.ids.size()));
        for (size_t i = 0; lst && i < v.ids.size(); i++) {
            PyObject* o = PyLong_FromLong(v.ids[i]);
            if (!o) {
                Py_CLEAR(lst);
                break;
            }
            PyList_SET_ITEM(lst, Py_ssize_t(i), o);
        }
        return lst;
    }

    void raise_if_failed() {
        if (error.set()) {
            error.restore();
            throw python_error();
        }
    }
    explicit operator Value*() { raise_if_failed(); return &value; }
    explicit operator Value&() { raise_if_failed(); return value; }
    explicit operator Value&&() { raise_if_failed(); return std::move(value); }
};

}  // namespace detail
}  // namespace nanobind

#endif  // TOKENWIRE_NANOBIND_HPP
