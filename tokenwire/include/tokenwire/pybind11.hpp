// Token ids from Python into C++ for pybind11 extensions (include after <pybind11/pybind11.h>).
//
//   std::vector<int32_t> tokenwire::to_vector(pybind11::handle obj,
//                                             std::optional<int64_t> vocab_size = std::nullopt);
//   tokenwire::Tokens   a type with a caster: `Request(tokenwire::Tokens ids, ...)` accepts a
//                       list, a tuple, an ndarray, a TokenVector -- what tokenwire.as_tokens does.
//
// Same rules and errors as tokenwire/nanobind.hpp (both in tokenwire/python.hpp).
#ifndef TOKENWIRE_PYBIND11_HPP
#define TOKENWIRE_PYBIND11_HPP

#include <pybind11/pybind11.h>

#include "python.hpp"

namespace tokenwire {

// The ids in obj; with a vocab_size each must lie in [0, vocab_size) (a vocab_size < 1 raises
// as_tokens' ValueError; std::nullopt, Python's None, checks nothing). Call with the GIL
// held; raises (pybind11::error_already_set) OverflowError / TypeError / ValueError like
// as_tokens.
inline std::vector<int32_t> to_vector(pybind11::handle obj,
                                      std::optional<int64_t> vocab_size = std::nullopt) {
    std::vector<int32_t> out;
    if (!detail_py::to_vector(obj.ptr(), vocab_size, out)) throw pybind11::error_already_set();
    return out;
}

}  // namespace tokenwire

namespace pybind11 {
namespace detail {

// pybind11 runs argument loading inside its exception handler, so a failed conversion raises
// as_tokens' own error right away (returning false would replace it with a generic TypeError).
template <> struct type_caster<tokenwire::Tokens> {
    PYBIND11_TYPE_CASTER(tokenwire::Tokens, const_name("collections.abc.Sequence[int]"));

    bool load(handle src, bool) {
        if (!tokenwire::detail_py::to_vector(src.ptr(), std::nullopt, value.ids)) throw error_already_set();
        return true;
    }

    static handle cast(const tokenwire::Tokens& v, return_value_policy, handle) {
        list out(v.ids.size());
        for (size_t i = 0; i < v.ids.size(); i++) out[i] = int_(v.ids[i]);
        return out.release();
    }
};

}  // namespace detail
}  // namespace pybind11

#endif  // TOKENWIRE_PYBIND11_HPP
