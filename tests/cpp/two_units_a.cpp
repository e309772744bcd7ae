// One of two translation units that both include wire.hpp (tests/test_cpp_wire.py): each has its
// own copy of the kernels' tables, and a frame written by one must check out in the other.
#include <tokenwire/wire.hpp>

std::vector<uint8_t> frame_from_unit_a() {
    std::vector<int32_t> ids = {1, 2, 3, 151935, 0, 7};
    return tokenwire::encode(ids.data(), ids.size(), tokenwire::Codec::Packed, true);
}
