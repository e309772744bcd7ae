// The C++ side of tokenwire's cross-language conformance tests (tests/test_cpp_wire.py).
//
// A long-lived server: it reads requests from stdin and answers on stdout, so that one process
// serves thousands of hypothesis examples. Built by the tests with the system C++ compiler
// against tokenwire.get_include() (and with sanitizers by .ci/run).
//
// Request (little-endian): op u8, codec u8, checksum u8, has_vocab u8, vocab_size i64,
// length u64, then `length` bytes of data. vocab_size is passed to decode / decode_many only
// when has_vocab is 1 (otherwise std::nullopt: no check).
//   op 'd' decode(data), 'm' decode_many(data), 'i' frame_info(data): data is a frame; after a
//          successful decode the ids are re-encoded with `codec` unless codec is 255;
//   op 'e' encode(ids), 'E' encode_many(seqs): data is u32 count + int32 ids (for 'E': u32
//          nseq, then per sequence u32 count + int32 ids);
//   op 'v': the libzstd version compiled in ("zstd 1.5.4", or "zstd none");
//   op 'f': data is ops ('d', 'm', 'i'), a NUL byte, then a file path: each op on the file's
//          bytes, read here once (a frame of hundreds of MiB, not sent through the pipe); the
//          answer is each op's answer in turn, as "<its length in bytes>\n<it>".
// codec: 0 auto, 1 raw, 2 u16, 3 packed, 4 zstd, 5 pfor.
// Answer: u64 length, then that many bytes of text:
//   "error <kind>\n<what()>"   kind: wire, checksum, invalid, length
//   "ids <nseq>\n" + per sequence "<n>[ id]*\n" [+ "frame <hex>\n"]
//   "info <version> <codec> <width> <checksum> <nbytes>\n<count>*\n"
//   "frame <hex>\n"
#include <tokenwire/wire.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

namespace {

bool read_exact(void* p, size_t n) { return n == 0 || std::fread(p, 1, n, stdin) == n; }

void answer(const std::string& s) {
    uint8_t n[8];                       // little-endian on every host (s390x: .ci/cross)
    tw_store_le64(n, s.size());
    std::fwrite(n, 8, 1, stdout);
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
}

std::string hex(const std::vector<uint8_t>& b) {
    static const char* x = "0123456789abcdef";
    std::string s;
    s.reserve(b.size() * 2);
    for (uint8_t c : b) {
        s += x[c >> 4];
        s += x[c & 15];
    }
    return s;
}

tokenwire::Codec codec_of(uint8_t c) {
    static const tokenwire::Codec codecs[] = {tokenwire::Codec::Auto, tokenwire::Codec::Raw,
                                              tokenwire::Codec::U16, tokenwire::Codec::Packed,
                                              tokenwire::Codec::Zstd, tokenwire::Codec::Pfor};
    return codecs[c < 6 ? c : 0];
}

struct Reader {
    const uint8_t* p;
    const uint8_t* end;
    uint32_t u32() {
        if (end - p < 4) throw std::length_error("request too short");
        uint32_t v = tokenwire::detail::load_le32(p);
        p += 4;
        return v;
    }
    std::vector<int32_t> ids() {
        const uint32_t n = u32();
        if (size_t(end - p) / 4 < n) throw std::length_error("request too short");
        std::vector<int32_t> v(n);
        for (auto& x : v) x = int32_t(u32());
        return v;
    }
};

std::string ids_text(const std::vector<std::vector<int32_t>>& seqs) {
    std::string s = "ids " + std::to_string(seqs.size()) + "\n";
    for (const auto& ids : seqs) {
        s += std::to_string(ids.size());
        for (int32_t v : ids) s += " " + std::to_string(v);
        s += "\n";
    }
    return s;
}

std::string outcome(uint8_t op, uint8_t codec, bool checksum, std::optional<int64_t> vocab,
                    const std::vector<uint8_t>& data);

std::string serve(uint8_t op, uint8_t codec, bool checksum, std::optional<int64_t> vocab,
                  const std::vector<uint8_t>& data) {
    const uint8_t* p = data.data();
    const size_t n = data.size();
    if (op == 'v') {
#ifdef TOKENWIRE_WITH_ZSTD
        return std::string("zstd ") + ZSTD_versionString();
#else
        return "zstd none";
#endif
    }
    if (op == 'f') {
        const auto nul = std::find(data.begin(), data.end(), uint8_t(0));
        if (nul == data.end()) throw std::length_error("request too short");
        std::ifstream file(std::string(nul + 1, data.end()), std::ios::binary | std::ios::ate);
        if (!file) throw std::length_error("cannot open the file");
        std::vector<uint8_t> bytes(size_t(file.tellg()));
        file.seekg(0);
        if (!file.read(reinterpret_cast<char*>(bytes.data()), std::streamsize(bytes.size())))
            throw std::length_error("cannot read the file");
        std::string s;
        for (auto o = data.begin(); o != nul; ++o) {
            if (*o == 'f') throw std::length_error("op 'f' in op 'f'");
            const std::string part = outcome(*o, codec, checksum, vocab, bytes);
            s += std::to_string(part.size()) + "\n" + part;
        }
        return s;
    }
    if (op == 'i') {
        const tokenwire::FrameInfo info = tokenwire::frame_info(p, n);
        std::string s = "info " + std::to_string(info.version) + " " + info.codec + " " +
                        std::to_string(info.width) + " " + (info.checksum ? "1" : "0") + " " +
                        std::to_string(info.nbytes) + "\n";
        for (uint64_t c : info.counts) s += std::to_string(c) + "\n";
        return s;
    }
    if (op == 'd' || op == 'm') {
        std::vector<std::vector<int32_t>> seqs;
        if (op == 'd')
            seqs.push_back(tokenwire::decode(p, n, vocab));
        else
            seqs = tokenwire::decode_many(p, n, vocab);
        std::string s = ids_text(seqs);
        if (codec != 255) {
            const auto again = op == 'd'
                ? tokenwire::encode(seqs[0].data(), seqs[0].size(), codec_of(codec), checksum)
                : tokenwire::encode_many(seqs, codec_of(codec), checksum);
            s += "frame " + hex(again) + "\n";
        }
        return s;
    }
    Reader r{p, p + n};
    if (op == 'e') {
        const std::vector<int32_t> ids = r.ids();
        const auto frame = tokenwire::encode(ids.data(), ids.size(), codec_of(codec), checksum);
        return "frame " + hex(frame) + "\n";
    }
    std::vector<std::vector<int32_t>> seqs(r.u32());
    for (auto& s : seqs) s = r.ids();
    return "frame " + hex(tokenwire::encode_many(seqs, codec_of(codec), checksum)) + "\n";
}

// serve's answer, or the exception it threw as "error <kind>\n<what()>".
std::string outcome(uint8_t op, uint8_t codec, bool checksum, std::optional<int64_t> vocab,
                    const std::vector<uint8_t>& data) {
    try {
        return serve(op, codec, checksum, vocab, data);
    } catch (const tokenwire::checksum_error& e) {
        return std::string("error checksum\n") + e.what();
    } catch (const tokenwire::wire_format_error& e) {
        return std::string("error wire\n") + e.what();
    } catch (const std::invalid_argument& e) {
        return std::string("error invalid\n") + e.what();
    } catch (const std::length_error& e) {
        return std::string("error length\n") + e.what();
    }
}

}  // namespace

int main() {
    for (;;) {
        uint8_t head[4], le[16];
        if (!read_exact(head, 4) || !read_exact(le, 16)) return 0;
        const int64_t vocab = int64_t(tw_load_le64(le));
        const uint64_t len = tw_load_le64(le + 8);
        std::vector<uint8_t> data(len);
        if (!read_exact(data.data(), len)) return 1;
        answer(outcome(head[0], head[1], head[2] != 0,
                       head[3] ? std::optional<int64_t>(vocab) : std::nullopt, data));
    }
}
