// The pybind11 flavour of the engine stand-in (the nanobind one is
// bench/engine_src/engine.cpp): Request(input_token_ids, max_tokens) storing
// std::vector<int32_t>, converted by pybind11's stock caster (RequestStock) or by
// tokenwire::Tokens (RequestTokens).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <tokenwire/pybind11.hpp>

#include <cstdint>
#include <optional>
#include <vector>

namespace py = pybind11;

namespace {
struct Request {
    std::vector<int32_t> input_token_ids;
    int32_t max_tokens;
};
struct RequestStock : Request {};
struct RequestTokens : Request {};

template <class R> py::bytes ids_bytes(const R& r) {
    return py::bytes(reinterpret_cast<const char*>(r.input_token_ids.data()),
                     r.input_token_ids.size() * sizeof(int32_t));
}
}  // namespace

// mod_gil_not_used: on a free-threaded CPython the module keeps the GIL off (the hand-off reads a
// list inside its critical section: tokenwire/python.hpp); nothing on a build with the GIL.
PYBIND11_MODULE(_tokenwire_pybind_engine, m, py::mod_gil_not_used()) {
    py::class_<RequestStock>(m, "RequestStock")
        .def(py::init([](std::vector<int32_t> ids, int32_t max_tokens) {
                 return RequestStock{{std::move(ids), max_tokens}};
             }),
             py::arg("input_token_ids"), py::arg("max_tokens"))
        .def("__len__", [](const RequestStock& r) { return r.input_token_ids.size(); })
        .def("ids_bytes", &ids_bytes<RequestStock>);
    py::class_<RequestTokens>(m, "RequestTokens")
        .def(py::init([](tokenwire::Tokens ids, int32_t max_tokens) {
                 return RequestTokens{{std::move(ids.ids), max_tokens}};
             }),
             py::arg("input_token_ids"), py::arg("max_tokens"))
        .def("__len__", [](const RequestTokens& r) { return r.input_token_ids.size(); })
        .def_property_readonly("max_tokens", [](const RequestTokens& r) { return r.max_tokens; })
        .def("ids_bytes", &ids_bytes<RequestTokens>);
    m.def("to_vector_bytes", [](py::handle obj, std::optional<int64_t> vocab_size) {
        std::vector<int32_t> v = tokenwire::to_vector(obj, vocab_size);
        return py::bytes(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int32_t));
    }, py::arg("obj"), py::arg("vocab_size") = py::none());
    m.def("tokens_roundtrip", [](tokenwire::Tokens t) { return t; });
}
