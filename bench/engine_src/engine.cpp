// A stand-in for an inference engine's request type, for tokenwire's tests and `python -m bench e2e
// --engine nanobind`: the constructor stores the prompt as std::vector<int32_t>, as
// TensorRT-LLM's `tle::Request(VecTokens input_token_ids, SizeType32 max_tokens, ...)` does.
// Two flavours of the same class differ only in how the binding converts the ids:
//   RequestStock   nanobind's stock std::vector<int32_t> caster (nanobind/stl/vector.h):
//                  what engines bind today; element by element.
//   RequestTokens  tokenwire::Tokens (tokenwire/nanobind.hpp): a buffer is one memcpy, a list
//                  one typed loop.
// The free functions are the micro-benchmark's subjects and references.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/vector.h>
#include <tokenwire/nanobind.hpp>
#include <tokenwire/wire.hpp>

#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

namespace nb = nanobind;

namespace {

struct Request {
    std::vector<int32_t> input_token_ids;
    int32_t max_tokens;
};
// One C++ type per Python class (nanobind binds a type once).
struct RequestStock : Request {};
struct RequestTokens : Request {};

// The stored ids as bytes (native int32): lets the caller check what the engine received.
template <class R> nb::bytes ids_bytes(const R& r) {
    return nb::bytes(reinterpret_cast<const char*>(r.input_token_ids.data()),
                     r.input_token_ids.size() * sizeof(int32_t));
}

template <class R> size_t size(const R& r) { return r.input_token_ids.size(); }
template <class R> int32_t max_tokens(const R& r) { return r.max_tokens; }

// The reference for a buffer hand-off: one plain memcpy of the buffer's bytes into a vector.
size_t memcpy_len(nb::handle obj) {
    Py_buffer view;
    if (PyObject_GetBuffer(obj.ptr(), &view, PyBUF_SIMPLE) != 0) throw nb::python_error();
    const int32_t* p = static_cast<const int32_t*>(view.buf);
    std::vector<int32_t> v(p, p + size_t(view.len) / sizeof(int32_t));   // allocate + memcpy
    PyBuffer_Release(&view);
    return v.size();
}

size_t decode_len(nb::bytes frame) {
    return tokenwire::decode(reinterpret_cast<const uint8_t*>(frame.c_str()), frame.size()).size();
}

}  // namespace

NB_MODULE(_tokenwire_engine, m) {
    m.doc() = "tokenwire's engine stand-in: Request(input_token_ids, max_tokens) in C++";
    nb::class_<RequestStock>(m, "RequestStock")
        .def("__init__",
             [](RequestStock* self, std::vector<int32_t> ids, int32_t max_tokens) {
                 new (self) RequestStock{{std::move(ids), max_tokens}};
             },
             nb::arg("input_token_ids"), nb::arg("max_tokens"))
        .def("__len__", &size<RequestStock>)
        .def_prop_ro("max_tokens", &max_tokens<RequestStock>)
        .def("ids_bytes", &ids_bytes<RequestStock>);
    nb::class_<RequestTokens>(m, "RequestTokens")
        .def("__init__",
             [](RequestTokens* self, tokenwire::Tokens ids, int32_t max_tokens) {
                 new (self) RequestTokens{{std::move(ids.ids), max_tokens}};
             },
             // .none(): let None reach the caster, which raises as_tokens' TypeError for it
             // (nanobind refuses None before any caster runs otherwise).
             nb::arg("input_token_ids").none(), nb::arg("max_tokens"))
        .def("__len__", &size<RequestTokens>)
        .def_prop_ro("max_tokens", &max_tokens<RequestTokens>)
        .def("ids_bytes", &ids_bytes<RequestTokens>);
    m.def("to_vector_len",
          [](nb::handle obj, std::optional<int64_t> vocab_size) {
              return tokenwire::to_vector(obj, vocab_size).size();
          },
          nb::arg("obj").none(), nb::arg("vocab_size").none() = nb::none());
    m.def("to_vector_bytes", [](nb::handle obj, std::optional<int64_t> vocab_size) {
        std::vector<int32_t> v = tokenwire::to_vector(obj, vocab_size);
        return nb::bytes(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int32_t));
    }, nb::arg("obj").none(), nb::arg("vocab_size").none() = nb::none());
    m.def("tokens_roundtrip", [](tokenwire::Tokens t) { return t; });
    m.def("stock_len", [](std::vector<int32_t> v) { return v.size(); });
    m.def("memcpy_len", &memcpy_len);
    m.def("decode_len", &decode_len);
}
