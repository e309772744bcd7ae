// The other unit: decodes (checksum, packed kernels) what unit a encoded, and the reverse.
#include <tokenwire/wire.hpp>

#include <cstdio>

std::vector<uint8_t> frame_from_unit_a();

int main() {
    const std::vector<uint8_t> frame = frame_from_unit_a();
    std::vector<int32_t> ids = {1, 2, 3, 151935, 0, 7};
    try {
        const bool same_bytes =
            tokenwire::encode(ids.data(), ids.size(), tokenwire::Codec::Packed, true) == frame;
        const bool same_ids = tokenwire::decode(frame.data(), frame.size()) == ids;
        std::printf("%s\n", same_bytes && same_ids ? "ok" : "different");
        return same_bytes && same_ids ? 0 : 1;
    } catch (const std::exception& e) {
        std::printf("%s\n", e.what());
        return 1;
    }
}
