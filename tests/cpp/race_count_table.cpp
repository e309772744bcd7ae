// decode_many and frame_info on memory another thread writes (tests/test_cpp_wire.py): a
// two-sequence raw frame of N ids whose count table a writer thread flips between [N, 0] and
// [0, N] while this thread decodes it again and again. Every table the decoder can see sums to
// N, so the frame is always valid; a decoder that reads the table twice (once to check the sum,
// once to split the ids) can see [N, N] and read N ids past the payload -- past the end of the
// heap buffer, which AddressSanitizer reports (the test builds this with its flags).
//
// Prints "ok <decodes> <seen N,0> <seen 0,N> <refused>" and exits 0 when every result was one of
// the two tables with the frame's ids, or a wire_format_error (a torn read of the table: refused,
// never used); exits 1 naming the first inconsistent result.
#include <tokenwire/wire.hpp>

#include <atomic>
#include <cstdio>
#include <thread>
#include <vector>

namespace {

constexpr uint32_t kN = 1024;
constexpr long kMinDecodes = 20000, kMaxDecodes = 2000000, kEnough = 2000;

// Both counts in one 8-byte atomic store: every table a reader can see sums to N. (A decoder
// that copies the table with narrower loads may still see a mix of two tables, [N, N] or
// [0, 0]; it must then refuse the frame, which is counted as "refused".)
void store_counts(uint8_t* table, uint32_t a, uint32_t b) {
    uint8_t bytes[8];
    tw_store_le32(bytes, a);
    tw_store_le32(bytes + 4, b);
    uint64_t v;
    std::memcpy(&v, bytes, 8);
    __atomic_store_n(reinterpret_cast<uint64_t*>(table), v, __ATOMIC_RELAXED);
}

}  // namespace

int main() {
    std::vector<int32_t> ids(kN);
    for (uint32_t i = 0; i < kN; i++) ids[i] = int32_t(i * 7 + 1);
    const std::vector<uint8_t> encoded =
        tokenwire::encode_many({ids, {}}, tokenwire::Codec::Raw, false);
    // The frame in a heap block of exactly its size (so reading past it is an ASan error), with
    // the count table 4-aligned for the writer's stores (header 16 bytes; operator new aligns).
    uint8_t* frame = new uint8_t[encoded.size()];
    std::memcpy(frame, encoded.data(), encoded.size());
    uint8_t* table = frame + 16;

    std::atomic<bool> stop{false};
    std::thread writer([&] {
        while (!stop.load(std::memory_order_relaxed)) {
            store_counts(table, kN, 0);
            store_counts(table, 0, kN);
        }
    });

    long decodes = 0, first = 0, second = 0, refused = 0;
    int rc = 0;
    for (; decodes < kMaxDecodes; decodes++) {
        if (decodes >= kMinDecodes && first >= kEnough && second >= kEnough) break;
        std::vector<std::vector<int32_t>> seqs;
        tokenwire::FrameInfo info{};
        try {
            seqs = tokenwire::decode_many(frame, encoded.size());
            info = tokenwire::frame_info(frame, encoded.size());
        } catch (const tokenwire::wire_format_error&) {
            refused++;
            continue;
        }
        // frame_info describes the table as it copied it (it does not need the payload, so a
        // torn copy such as [0, 0] is a valid prefix): counts from the two tables, and nbytes
        // the size of exactly that frame.
        const bool ok_info = info.counts.size() == 2 &&
                             (info.counts[0] == 0 || info.counts[0] == kN) &&
                             (info.counts[1] == 0 || info.counts[1] == kN) &&
                             info.nbytes == 16 + 8 + 4 * (info.counts[0] + info.counts[1]);
        const bool ok = seqs.size() == 2 &&
                        ((seqs[0] == ids && seqs[1].empty()) || (seqs[0].empty() && seqs[1] == ids));
        if (!ok || !ok_info) {
            std::printf("inconsistent after %ld decodes: sizes %zu + %zu, frame_info %llu + %llu\n",
                        decodes, seqs.size() > 0 ? seqs[0].size() : 0,
                        seqs.size() > 1 ? seqs[1].size() : 0,
                        info.counts.size() > 0 ? (unsigned long long)info.counts[0] : 0ULL,
                        info.counts.size() > 1 ? (unsigned long long)info.counts[1] : 0ULL);
            rc = 1;
            break;
        }
        (seqs[0].empty() ? second : first)++;
    }
    stop.store(true);
    writer.join();
    delete[] frame;
    if (rc == 0) std::printf("ok %ld %ld %ld %ld\n", decodes, first, second, refused);
    return rc;
}
