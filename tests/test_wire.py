"""The wire codec's contract: round trips, codec choice, sizes, zero-copy, and every malformed
frame class with its exception type and message (docs/wire-format.md is the spec)."""

from __future__ import annotations

import array
import gc
import os
import pickle
import random
import struct
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tokenwire
import tokenwire._core
from tokenwire import WireFormatError
from tokenwire.errors import ChecksumError, TokenIdOverflowError
from tokenwire import _core
from tokenwire._core import _crc32c

from support.buffers import owns_memory
from support.strategies import (
    BOUNDARY_IDS,
    CODECS,
    VOCAB_SIZES,
    WIRE_ERROR_KINDS,
    damage_frame,
    frames,
    wire_error_kind,
)

HAS_ZSTD = "zstd" in CODECS


def header(codec: int = 0, width: int = 32, flags: int = 0, count: int = 0,
           magic: bytes = b"TWIR", version: int = 1) -> bytes:
    return magic + struct.pack("<BBBBQ", version, codec, width, flags, count)


VALID_HEADERS = [header(codec=2, width=9, count=5), header(flags=0x02, count=3),
                 header(codec=1, width=16, flags=0x05, count=7), header(flags=0x04, count=4)]


def crc_frame(body: bytes) -> bytes:
    return body + struct.pack("<I", _crc32c(body))


def bit_length_width(ids: list[int]) -> int:
    return max(1, max(ids, default=0).bit_length())


# ---------------------------------------------------------------------------------------------
# Round trips


@pytest.fixture(params=["simd", "portable"])
def unpack_path(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    """Run a test with the AVX2 unpack (where the CPU has it) and with the portable one."""
    before = _core._set_unpack_avx2(request.param == "simd")
    yield request.param
    _core._set_unpack_avx2(before)


@pytest.mark.parametrize("width", range(1, 32))
@pytest.mark.parametrize("n", [1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 1000])
def test_packed_every_width_and_tail(width: int, n: int, unpack_path: str) -> None:
    rng = np.random.default_rng(width * 1000 + n)
    ids = rng.integers(0, 2**width, size=n, dtype=np.int64).astype(np.int32)
    ids[0] = 2**width - 1           # force exactly this width
    frame = tokenwire.encode(ids, codec="packed")
    assert frame[6] == width
    assert len(frame) == 16 + (n * width + 7) // 8          # payload exactly ceil(n*w/8)
    assert tokenwire.decode(frame).tolist() == ids.tolist()
    # the same ids at every bit offset 0..7 inside a multi-sequence frame
    for lead in range(8):
        seqs = [[0] * lead, ids.tolist(), ids[: n // 2].tolist()]
        many = tokenwire.encode_many(seqs, codec="packed")
        assert [v.tolist() for v in tokenwire.decode_many(many)] == seqs


def test_large_inputs_take_the_nogil_paths() -> None:
    ids = np.arange(300_000, dtype=np.int32) % 151_936
    for codec in ["raw", "u16" if ids.max() < 65536 else "packed", "packed", "auto"]:
        frame = tokenwire.encode(ids, codec=codec, checksum=True)
        assert np.array_equal(np.asarray(tokenwire.decode(frame)), ids)
        assert np.array_equal(np.asarray(tokenwire.decode(bytearray(frame))), ids)


@pytest.mark.parametrize(
    "tokens",
    [
        [3, 1, 2],
        (3, 1, 2),
        np.array([3, 1, 2], dtype=np.int32),
        np.array([3, 1, 2], dtype=np.int64),
        np.array([3, 0, 1, 0, 2], dtype=np.int32)[::2],
        array.array("i", [3, 1, 2]),
        tokenwire.TokenVector([3, 1, 2]),
        range(3, 0, -1),
    ],
    ids=["list", "tuple", "int32", "int64", "strided", "array", "TokenVector", "range"],
)
def test_encode_accepts_what_as_tokens_accepts(tokens: object) -> None:
    expected = tokenwire.as_tokens(tokens).tolist()
    assert tokenwire.decode(tokenwire.encode(tokens)).tolist() == expected


def test_encode_rejects_what_as_tokens_rejects() -> None:
    with pytest.raises(TypeError):
        tokenwire.encode(b"\x01\x02")
    with pytest.raises(OverflowError):
        tokenwire.encode([2**31])
    with pytest.raises(TypeError):
        tokenwire.encode([1.0])


@pytest.mark.parametrize("bad", [2**31, -2**31 - 1, 2**40])
def test_ids_outside_int32_name_index_value_and_for_encode_many_the_sequence(bad: int) -> None:
    # docs/wire-format.md, "Encoder rules": the class and the exact text, the sequence index
    # in front for encode_many (as for a forced codec's misfit)
    text = f"token id at index 1 is {bad}, outside int32 [-2147483648, 2147483647]"
    with pytest.raises(tokenwire.errors.TokenIdOverflowError) as one:
        tokenwire.encode([5, bad])
    assert str(one.value) == text
    with pytest.raises(tokenwire.errors.TokenIdOverflowError) as many:
        tokenwire.encode_many([[1], [2], [5, bad]])
    assert str(many.value) == f"sequence 2: {text}"
    with pytest.raises(tokenwire.errors.TokenIdOverflowError, match=r"^sequence 1: token id at index 0 "):
        tokenwire.encode_many([[1], np.array([bad], dtype=np.int64)])


@pytest.mark.parametrize(("bad", "text"), [(10**5000, "an int of 16610 bits"),
                                           (-(10**5000), "a negative int of 16610 bits")],
                         ids=["10**5000", "-10**5000"])
def test_an_id_too_long_to_print_is_named_by_its_size(bad: int, text: str) -> None:
    # Python refuses to write an int of more than 4300 digits (sys.set_int_max_str_digits):
    # the message names its size, and the error is still tokenwire's
    message = f"token id at index 1 is {text}, outside int32 [-2147483648, 2147483647]"
    with pytest.raises(TokenIdOverflowError) as one:
        tokenwire.encode([5, bad])
    assert str(one.value) == message
    with pytest.raises(TokenIdOverflowError) as many:
        tokenwire.encode_many([[1], [5, bad]])
    assert str(many.value) == f"sequence 1: {message}"
    with pytest.raises(tokenwire.TokenwireError):
        tokenwire.encode_many([iter([5, bad])], codec="u16")
    with pytest.raises(ValueError, match=rf"^unknown codec {text} \(expected 'auto'"):
        tokenwire.encode([1], codec=bad)  # type: ignore[arg-type]


def test_encode_many_names_the_sequence_of_any_conversion_error() -> None:
    with pytest.raises(tokenwire.errors.TokenIdTypeError) as info:
        tokenwire.encode_many([[1, 2], [3, "4"]])
    assert str(info.value) == "sequence 1: token id at index 1 must be an int, got str"
    with pytest.raises(tokenwire.errors.TokenIdTypeError, match=r"^sequence 0: "):
        tokenwire.encode_many([[1.5]])


# ---------------------------------------------------------------------------------------------
# Codec choice and sizes


@pytest.mark.parametrize(
    "ids, codec, width",
    [
        ([], "raw", 32),                     # every size 0: the fastest wins
        ([0] * 10, "packed", 1),             # all-zero packs at width 1
        ([1, 2, 3], "packed", 2),
        ([2**15 - 1] * 8, "packed", 15),
        ([2**16 - 1] * 8, "u16", 16),        # tie with packed-16: u16 is faster
        ([2**16] * 8, "packed", 17),
        ([151_935] * 8, "packed", 18),
        ([2**31 - 1] * 8, "packed", 31),
        ([5, -1], "raw", 32),                # negative ids force raw
        ([2**24], "raw", 32),                # 1 id of width 25: 4 bytes either way, raw wins
    ],
)
def test_auto_picks_smallest_then_fastest(ids: list[int], codec: str, width: int) -> None:
    info = tokenwire.frame_info(tokenwire.encode(ids))
    assert (info.codec, info.width) == (codec, width)


@pytest.mark.parametrize("vocab", VOCAB_SIZES)
def test_packed_size_is_exact(vocab: int) -> None:
    ids = list(range(0, vocab, max(1, vocab // 997)))[:1000]
    frame = tokenwire.encode(ids, codec="packed")
    w = bit_length_width(ids)
    assert len(frame) == 16 + (len(ids) * w + 7) // 8
    assert len(tokenwire.encode(ids, codec="packed", checksum=True)) == len(frame) + 4


def test_multi_frame_adds_only_its_count_table() -> None:
    a, b, c = [1, 2, 3], [4, 5], [6]
    single = tokenwire.encode(a + b + c, codec="packed")
    many = tokenwire.encode_many([a, b, c], codec="packed")
    assert len(many) == len(single) + 16           # 3 uint32 counts padded to 16 bytes
    assert many[8:16] == struct.pack("<Q", 3)
    assert many[16:28] == struct.pack("<III", 3, 2, 1) and many[28:32] == b"\0" * 4


def test_boundary_ids_round_trip_through_auto() -> None:
    for v in BOUNDARY_IDS:
        assert tokenwire.decode(tokenwire.encode([v, v, 0])).tolist() == [v, v, 0]


# ---------------------------------------------------------------------------------------------
# decode / decode_many / frame_info contract


def test_decode_refuses_multi_sequence_frames() -> None:
    frame = tokenwire.encode_many([[1], [2, 3], [4]])
    with pytest.raises(WireFormatError, match=r"multi-sequence frame \(3 sequences\): read it with decode_many\(\)"):
        tokenwire.decode(frame)
    # ... even with a single sequence in it: the frame says it is multi
    with pytest.raises(WireFormatError, match="decode_many"):
        tokenwire.decode(tokenwire.encode_many([[1]]))


def test_every_frame_starts_with_the_magic() -> None:
    assert tokenwire._core.MAGIC == b"TWIR"
    for frame in (tokenwire.encode([]), tokenwire.encode_many([[1], [2]], checksum=True)):
        assert frame[:4] == tokenwire._core.MAGIC


def test_decode_many_of_single_frame_is_one_element_list() -> None:
    out = tokenwire.decode_many(tokenwire.encode([7, 8]))
    assert isinstance(out, list) and len(out) == 1 and out[0].tolist() == [7, 8]
    assert tokenwire.decode_many(tokenwire.encode_many([])) == []


def test_frame_info_fields() -> None:
    frame = tokenwire.encode_many([[1, 2], [], [151_935]], checksum=True)
    info = tokenwire.frame_info(frame)
    assert (info.version, info.codec, info.width, info.counts, info.checksum, info.multi,
            info.compression, info.nbytes) == (1, "packed", 18, (2, 0, 1), True, True, None,
                                               len(frame))
    assert "codec='packed'" in repr(info)
    assert isinstance(info, tokenwire._core.FrameInfo)


def test_frame_info_counts_and_flags_as_the_spec_lists_them() -> None:
    # docs/wire-format.md, "frame_info": counts is the table (empty for S = 0) or (N,); multi is
    # the MULTI flag, also for one sequence; no vocab_size (it reads no ids)
    assert tokenwire.frame_info(tokenwire.encode([])).counts == (0,)
    assert tokenwire.frame_info(tokenwire.encode_many([])).counts == ()
    one = tokenwire.frame_info(tokenwire.encode_many([[4, 5]]))
    assert (one.counts, one.multi) == ((2,), True)
    with pytest.raises(TypeError):
        tokenwire.frame_info(tokenwire.encode([1]), vocab_size=3)  # type: ignore[call-arg]


def test_frame_info_finds_the_end_of_a_frame_in_a_stream() -> None:
    a, b = tokenwire.encode([1, 2, 3]), tokenwire.encode(list(range(100)), checksum=True)
    stream = a + b
    n = tokenwire.frame_info(stream).nbytes
    assert stream[:n] == a
    assert tokenwire.frame_info(stream[n:]).nbytes == len(b)
    assert tokenwire.frame_info(b[:16]).nbytes == len(b)   # the header alone is enough


@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview, lambda b: np.frombuffer(b, np.uint8)])
def test_decode_accepts_any_bytes_like(wrap: object) -> None:
    frame = tokenwire.encode([5, 6, 7], codec="raw")
    assert tokenwire.decode(wrap(frame)).tolist() == [5, 6, 7]  # type: ignore[operator]


def test_decode_rejects_non_bytes_like() -> None:
    with pytest.raises(TypeError):
        tokenwire.decode("TWIR")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# Vocabulary checks


def test_vocab_violation_names_index_and_value() -> None:
    frame = tokenwire.encode([1, 2, 151_936, 3])
    with pytest.raises(WireFormatError, match=r"token id at index 2 is 151936, outside the vocabulary \[0, 151936\)"):
        tokenwire.decode(frame, vocab_size=151_936)
    assert tokenwire.decode(frame, vocab_size=151_937).tolist() == [1, 2, 151_936, 3]
    with pytest.raises(WireFormatError, match=r"index 1 is -7, outside"):
        tokenwire.decode(tokenwire.encode([0, -7]), vocab_size=10)
    with pytest.raises(WireFormatError, match=r"sequence 1: token id at index 0 is 10"):
        tokenwire.decode_many(tokenwire.encode_many([[1], [10]]), vocab_size=10)
    # decode_many names the sequence on every frame, a single-sequence one included ("sequence
    # 0: "); decode never does
    single = tokenwire.encode([3, 12])
    with pytest.raises(WireFormatError) as info:
        tokenwire.decode_many(single, vocab_size=10)
    assert str(info.value) == "sequence 0: token id at index 1 is 12, outside the vocabulary [0, 10)"
    with pytest.raises(WireFormatError) as info:
        tokenwire.decode(single, vocab_size=10)
    assert str(info.value) == "token id at index 1 is 12, outside the vocabulary [0, 10)"
    with pytest.raises(ValueError, match="vocab_size must be positive"):
        tokenwire.decode(frame, vocab_size=0)


# ---------------------------------------------------------------------------------------------
# Malformed frames: every class, its type and its message


GOOD = tokenwire.encode([1, 2, 3, 4, 5], codec="raw")          # header(0, 32, 0, 5) + 20 bytes


@pytest.mark.parametrize(
    "data, message",
    [
        (b"", r"truncated: header needs 16 bytes, has 0"),
        (b"TW", r"truncated: header needs 16 bytes, has 2"),
        (GOOD[:15], r"truncated: header needs 16 bytes, has 15"),
        (b"TWIX" + GOOD[4:], r"bad magic b'TWIX': not a tokenwire frame \(expected b'TWIR'\)"),
        (b"PK\x03\x04", r"bad magic b'PK\\x03\\x04'"),
        (b"X", r"bad magic b'X'"),
        (header(version=2), r"unsupported version 2 \(this tokenwire reads version 1\)"),
        (header(version=0), r"unsupported version 0"),
        (header(codec=4), r"unknown codec 4 \(known: 0 raw, 1 u16, 2 packed, 3 pfor\)"),
        (header(codec=3), r"bad width 32 for codec 'pfor' \(must be 0\)"),
        (header(codec=3, width=0, flags=0x04), r"reserved flag bits set: 0x04"),
        (header(codec=0, width=16), r"bad width 16 for codec 'raw' \(must be 32\)"),
        (header(codec=1, width=15), r"bad width 15 for codec 'u16' \(must be 16\)"),
        (header(codec=2, width=0), r"bad width 0 for codec 'packed' \(must be 1..31\)"),
        (header(codec=2, width=32), r"bad width 32 for codec 'packed' \(must be 1..31\)"),
        (header(flags=0x08), r"reserved flag bits set: 0x08"),
        (header(flags=0x81), r"reserved flag bits set: 0x80"),
        (GOOD[:-1], r"truncated: payload needs 20 bytes, has 19"),
        (header(count=5), r"truncated: payload needs 20 bytes, has 0"),
        (GOOD + b"\0", r"trailing bytes: the frame ends at byte 36, the buffer has 37 \(1 extra\)"),
        (header(count=2**40) + b"\0" * 4, r"truncated: payload needs 4398046511104 bytes, has 4"),
        (header(codec=2, width=1, count=2**64 - 1), r"truncated: payload needs 2305843009213693952 bytes, has 0"),
        (header(flags=0x02, count=3) + b"\0" * 8, r"truncated: count table needs 16 bytes, has 8"),
        (header(flags=0x02, count=2**62), r"truncated: count table needs 18446744073709551616 bytes, has 0"),
        (header(flags=0x02, count=1) + struct.pack("<II", 0, 9),
         r"nonzero padding byte at offset 20, after the count table"),
        (header(flags=0x02, count=1) + struct.pack("<II", 0, 9 << 24),    # the last one
         r"nonzero padding byte at offset 23, after the count table"),
        (header(flags=0x02, count=2) + struct.pack("<II", 2**32 - 1, 2**32 - 1),
         r"truncated: payload needs 34359738360 bytes, has 0"),
        (header(codec=2, width=3, count=1) + b"\x08", r"nonzero padding bits after the last id"),
        (header(flags=0x01, count=1) + b"\0" * 4 + b"\0\0", r"truncated: checksum needs 4 bytes, has 2"),
    ],
)
def test_malformed_frame_messages(data: bytes, message: str) -> None:
    with pytest.raises(WireFormatError, match=message) as exc:
        tokenwire.decode(data)
    assert type(exc.value) is WireFormatError
    assert isinstance(exc.value, ValueError) and isinstance(exc.value, tokenwire.TokenwireError)
    with pytest.raises(WireFormatError, match=message):
        tokenwire.decode_many(data)


def test_frame_info_raises_on_bad_headers_but_not_on_missing_payload() -> None:
    with pytest.raises(WireFormatError, match="bad magic"):
        tokenwire.frame_info(b"nope, not a frame")
    with pytest.raises(WireFormatError, match="reserved flag"):
        tokenwire.frame_info(header(flags=0x10))
    assert tokenwire.frame_info(header(count=2**40)).nbytes == 16 + 4 * 2**40


def test_checksum_mismatch_is_a_checksum_error() -> None:
    frame = bytearray(tokenwire.encode(list(range(50)), checksum=True))
    frame[20] ^= 0x01
    with pytest.raises(ChecksumError, match=r"checksum mismatch: the frame says 0x[0-9a-f]{8}, its contents give 0x[0-9a-f]{8}"):
        tokenwire.decode(bytes(frame))
    frame[20] ^= 0x01
    frame[-1] ^= 0x80                                  # the trailer itself
    with pytest.raises(ChecksumError):
        tokenwire.decode_many(bytes(frame))
    assert issubclass(ChecksumError, WireFormatError)


def test_checksum_covers_the_header() -> None:
    payload = struct.pack("<i", 9)
    frame = crc_frame(header(flags=0x01, count=1) + payload)
    assert tokenwire.decode(frame).tolist() == [9]
    # Reinterpret the same 4 payload bytes as two u16 ids: structurally valid, so only the
    # checksum (which covers the header) can catch it.
    forged = header(codec=1, width=16, flags=0x01, count=2) + payload + frame[-4:]
    with pytest.raises(ChecksumError, match="checksum mismatch"):
        tokenwire.decode(forged)


def test_crc32c_matches_reference_values() -> None:
    assert _crc32c(b"123456789") == 0xE3069283          # the standard check value
    assert _crc32c(b"") == 0
    data = bytes(range(256)) * 37 + b"tail"
    for k in [0, 1, 3, 7, 8, 9, 31, 32, 33, len(data)]:
        assert _crc32c(data[:k]) == _crc32c(data[:k], portable=True)


# ---------------------------------------------------------------------------------------------
# zstd


@pytest.mark.skipif(not HAS_ZSTD, reason="zstandard not installed")
class TestZstd:
    def test_repetitive_ids_compress(self) -> None:
        rng = np.random.default_rng(7)
        ids = (100_000 + 4096 * rng.integers(0, 4, size=6000)).tolist()   # 4 distinct ids > 2**16
        frame = tokenwire.encode(ids, codec="zstd", checksum=True)
        info = tokenwire.frame_info(frame)
        assert info.compression == "zstd" and info.codec == "raw" and info.nbytes == len(frame)
        assert len(frame) < len(tokenwire.encode(ids)) // 2
        assert tokenwire.decode(frame).tolist() == ids

    def test_beyond_the_expansion_bound_is_stored_plain(self) -> None:
        ids = [151_000, 3, 77] * 2000        # zstd would shrink this > 64x: the decoder refuses
        frame = tokenwire.encode(ids, codec="zstd")
        assert tokenwire.frame_info(frame).compression is None
        assert tokenwire.decode(frame).tolist() == ids

    def test_incompressible_is_stored_plain(self) -> None:
        frame = tokenwire.encode([1, 2, 3], codec="zstd")
        assert tokenwire.frame_info(frame).compression is None
        assert frame == tokenwire.encode([1, 2, 3])

    def test_expansion_bound_refused(self) -> None:
        # 1 MiB of zeros compresses to a few dozen bytes: far beyond 64x.
        import zstandard

        payload = zstandard.ZstdCompressor().compress(b"\0" * (1 << 20))
        frame = header(codec=0, width=32, flags=0x04, count=(1 << 18)) + struct.pack("<Q", len(payload)) + payload
        with pytest.raises(WireFormatError, match=r"claims to expand to 1048576 bytes, more than the 64x"):
            tokenwire.decode(frame)

    def test_expansion_bound_at_its_boundary(self) -> None:
        # 64 times the compressed size passes the bound (these 16 bytes are then no zstd
        # frame), 4 bytes more do not.
        body = struct.pack("<Q", 16) + bytes(16)
        with pytest.raises(WireFormatError, match="it does not start with a zstd frame"):
            tokenwire.decode(header(codec=0, width=32, flags=0x04, count=256) + body)
        with pytest.raises(WireFormatError,
                           match=r"16 bytes claims to expand to 1028 bytes, more than the 64x"):
            tokenwire.decode(header(codec=0, width=32, flags=0x04, count=257) + body)

    def test_corrupt_and_mismatched_payloads(self) -> None:
        import zstandard

        ids = [5, 6, 7, 8] * 300
        frame = bytearray(tokenwire.encode(ids, codec="zstd"))
        assert frame[7] & 0x04
        frame[30] ^= 0xFF
        with pytest.raises(WireFormatError, match="zstd payload"):
            tokenwire.decode(bytes(frame))
        # a valid zstd frame of the wrong size
        payload = zstandard.ZstdCompressor().compress(bytes(range(200)) * 2)
        frame2 = header(codec=0, width=32, flags=0x04, count=50) + struct.pack("<Q", len(payload)) + payload
        with pytest.raises(WireFormatError, match=r"zstd payload declares 400 bytes, the header needs 200"):
            tokenwire.decode(frame2)
        with pytest.raises(WireFormatError, match=r"truncated: zstd length needs 8 bytes, has 3"):
            tokenwire.decode(header(flags=0x04, count=1) + b"abc")
        with pytest.raises(WireFormatError, match=r"truncated: zstd payload needs"):
            tokenwire.decode(header(flags=0x04, count=1) + struct.pack("<Q", 1000) + b"\0" * 10)


# ---------------------------------------------------------------------------------------------
# Robustness: random and damaged bytes give correct ids or WireFormatError, nothing else


def _rejections(data: bytes) -> list[str]:
    """Run the three readers on `data`: each gives a result or a WireFormatError whose message
    belongs to a known rejection branch (wire_error_kind raises otherwise)."""
    kinds = []
    for fn in (tokenwire.decode, tokenwire.decode_many, tokenwire.frame_info):
        try:
            fn(data)
        except WireFormatError as e:
            kinds.append(wire_error_kind(str(e)))
    return kinds


@given(st.one_of(
    st.binary(max_size=200),
    st.builds(lambda f, seed: damage_frame(random.Random(seed), f[0]), frames(), st.integers()),
    st.builds(lambda h, tail: h + tail, st.sampled_from(VALID_HEADERS), st.binary(max_size=120)),
))
def test_random_bytes_never_crash(data: bytes) -> None:
    _rejections(data)


def _valid_frame_pool() -> list[bytes]:
    ids = [list(range(n)) for n in (0, 1, 3, 9, 40)] + [[7] * 300, [2**31 - 1, -5, 0]]
    pool = []
    for codec in CODECS:
        for checksum in (False, True):
            for seq in ids:
                try:
                    pool.append(tokenwire.encode(seq, codec=codec, checksum=checksum))
                except ValueError:                                  # a codec that cannot hold them
                    pass
            seqs = [[1, 2, 3], [], [4] * 200]
            pool.append(tokenwire.encode_many(seqs, codec=codec, checksum=checksum))
    if HAS_ZSTD:
        # A zstd section holding a raw block (incompressible ids; valid though it saves nothing,
        # so no encoder writes it): a smaller count makes it regenerate more than the header needs.
        import zstandard

        ids = np.random.default_rng(11).integers(0, 2**31 - 1, size=40, dtype=np.int32)
        plain = tokenwire.encode(ids, codec="raw")
        comp = zstandard.ZstdCompressor(level=1).compress(plain[16:])
        pool.append(plain[:7] + b"\x04" + plain[8:16] + len(comp).to_bytes(8, "little") + comp)
    return pool


def test_every_rejection_branch_is_reached() -> None:
    """Random bytes almost only reach "bad magic"; damaged valid frames (every codec, checksum,
    multi-sequence and zstd) reach every rejection of the decoder. Each branch must be hit."""
    rng = random.Random(20261130)
    pool = _valid_frame_pool()
    seen: dict[str, int] = {}
    for i in range(12000):      # seeded: the same frames every run
        frame = rng.choice(pool)
        data = frame if i % 50 == 0 else damage_frame(rng, frame)
        for kind in _rejections(data):
            seen[kind] = seen.get(kind, 0) + 1
    expected = [k for k in WIRE_ERROR_KINDS if HAS_ZSTD or "zstd" not in k]
    missing = [k for k in expected if k not in seen]
    assert not missing, f"never reached: {missing}; reached: {seen}"


@given(st.binary(max_size=120))
def test_random_bytes_after_a_valid_header(tail: bytes) -> None:
    for prefix in VALID_HEADERS:
        _rejections(prefix + tail)


# ---------------------------------------------------------------------------------------------
# Zero-copy and lifetimes


def test_raw_decode_from_bytes_is_zero_copy_and_keeps_source_alive() -> None:
    frame = tokenwire.encode(list(range(1000)), codec="raw")
    before = sys.getrefcount(frame)
    tv = tokenwire.decode(frame)
    assert sys.getrefcount(frame) == before + 1        # the vector holds the frame
    arr = np.asarray(tv)
    assert arr.ctypes.data == np.frombuffer(frame, np.uint8).ctypes.data + 16
    del frame
    gc.collect()
    assert tv.tolist() == list(range(1000))            # still valid: the vector owns a reference


def test_raw_decode_from_readonly_memoryview_views_it() -> None:
    frame = tokenwire.encode([9, 8, 7], codec="raw")
    mv = memoryview(frame)
    tv = tokenwire.decode(mv)
    assert np.asarray(tv).ctypes.data == np.frombuffer(frame, np.uint8).ctypes.data + 16
    del mv, frame
    gc.collect()
    assert tv.tolist() == [9, 8, 7]


def test_raw_decode_from_mutable_source_copies() -> None:
    buf = bytearray(tokenwire.encode([9, 8, 7], codec="raw"))
    tv = tokenwire.decode(buf)
    buf[16] = 1                                        # mutating the source ...
    assert tv.tolist() == [9, 8, 7]                    # ... does not change the vector
    buf.extend(b"x")                                   # and the source is not pinned by an export
    tv2 = tokenwire.decode(memoryview(bytearray(tokenwire.encode([1], codec="raw"))))
    assert tv2.tolist() == [1]


def test_readonly_view_of_bytearray_is_copied() -> None:
    buf = bytearray(tokenwire.encode([9, 8, 7], codec="raw"))
    tv = tokenwire.decode(memoryview(buf).toreadonly())
    buf[16] = 1                                        # the memory behind the view changes ...
    assert tv.tolist() == [9, 8, 7]                    # ... the vector does not


def test_received_zmq_frame_is_viewed_only_when_promised_immutable() -> None:
    zmq = pytest.importorskip("zmq")
    ctx = zmq.Context()
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    a.bind("inproc://tw-wire-test")
    b.connect("inproc://tw-wire-test")
    try:
        a.send(tokenwire.encode(list(range(10_000)), codec="raw"))
        frame = b.recv(copy=False)
        base = np.frombuffer(frame.buffer, np.uint8).ctypes.data
        copied = tokenwire.decode(frame)                       # a Frame is not trusted by type
        assert np.asarray(copied).ctypes.data != base + 16
        tv = tokenwire.decode(tokenwire._core.ImmutableBuffer(frame))   # the explicit promise
        assert np.asarray(tv).ctypes.data == base + 16
        del frame
        gc.collect()
        assert tv.tolist() == list(range(10_000)) and copied == tv
    finally:
        a.close(0)
        b.close(0)
        ctx.term()


def test_zmq_frame_over_a_bytearray_is_copied() -> None:
    zmq = pytest.importorskip("zmq")
    ba = bytearray(tokenwire.encode(list(range(40_000)), codec="raw"))
    tv = tokenwire.decode(zmq.Frame(ba))       # zero-copy Frame over mutable memory
    ba[16:20] = b"\xf9\xff\xff\xff"
    assert tv[0] == 0


@pytest.mark.skipif(not HAS_ZSTD, reason="zstandard not installed (the zstd extra)")
def test_zstd_section_must_be_exactly_one_zstd_frame() -> None:
    frame = tokenwire.encode([1, 2, 3, 4] * 50, codec="zstd")
    assert tokenwire.frame_info(frame).compression == "zstd"
    (clen,) = struct.unpack_from("<Q", frame, 16)
    comp = frame[24:24 + clen]
    for extra, message in ((b"abcde", "5 trailing bytes after its zstd frame"),
                           (comp, "trailing bytes after its zstd frame")):
        bad = frame[:16] + struct.pack("<Q", clen + len(extra)) + comp + extra
        with pytest.raises(tokenwire.WireFormatError, match=message):
            tokenwire.decode(bad)


def test_misaligned_immutable_source_is_viewed_and_exported_aligned() -> None:
    frame = tokenwire.encode([1, 2, 3], codec="raw")
    blob = b"x" + frame
    empty = sys.getsizeof(tokenwire.TokenVector())
    tv = tokenwire.decode(memoryview(blob)[1:])        # payload now at an odd address
    assert sys.getsizeof(tv) == empty                  # a view: no copy to align it
    assert tv.tolist() == [1, 2, 3] and tv[2] == 3
    for tv in (tv, tokenwire.decode_many(memoryview(blob)[1:])[0],
               tokenwire.TokenVector.frombuffer(memoryview(blob)[17:])):
        assert sys.getsizeof(tv) == empty
        view = memoryview(tv)                          # an export is int32 at a 4-aligned address
        assert np.frombuffer(view, np.int32).ctypes.data % 4 == 0 and view.tolist() == [1, 2, 3]
        assert sys.getsizeof(tv) == empty + 12         # aligned once, into storage of its own
        assert np.asarray(tv).ctypes.data == np.frombuffer(view, np.int32).ctypes.data


def test_an_unaligned_view_is_checked_and_read_in_place() -> None:
    # vocab_size checks the ids where they lie; the error names the id read there.
    ids = list(range(1000)) + [70_000]
    frame = tokenwire.encode(ids, codec="raw")
    for pad in range(1, 4):
        msg = b"\0" * pad + frame
        with pytest.raises(tokenwire.WireFormatError, match="index 1000 is 70000"):
            tokenwire.decode(memoryview(msg)[pad:], vocab_size=65_536)
        out = tokenwire.decode(memoryview(msg)[pad:], vocab_size=70_001)
        assert not owns_memory(out) and out == ids and repr(out).endswith("999, 70000], len=1001)")
        assert out == array.array("q", ids) and (out + array.array("i", [5]))[-2:].tolist() == \
            [70_000, 5]
        with pytest.raises(TokenIdOverflowError, match="index 1000 is 70000"):
            out + array.array("h", [5])
        assert tokenwire.decode(tokenwire.encode(out, codec="packed")) == ids
        assert pickle.loads(pickle.dumps(out, protocol=5)) == ids


def test_decode_many_raw_views_share_the_frame() -> None:
    frame = tokenwire.encode_many([[1, 2], [3], [4, 5, 6]], codec="raw")
    out = tokenwire.decode_many(frame)
    base = np.frombuffer(frame, np.uint8).ctypes.data
    addrs = [np.asarray(v).ctypes.data - base for v in out]
    assert addrs == [32, 40, 44]                       # header 16 + table 16, then the ids
    del frame
    gc.collect()
    assert [v.tolist() for v in out] == [[1, 2], [3], [4, 5, 6]]


def test_views_survive_source_deletion_with_checksum_and_zstd() -> None:
    codecs = ["raw", "zstd"] if HAS_ZSTD else ["raw"]
    for codec in codecs:
        frame = tokenwire.encode([42] * 5000, codec=codec, checksum=True)
        tv = tokenwire.decode(frame)
        del frame
        gc.collect()
        assert tv.tolist() == [42] * 5000


def _refcount_stable(fn, obj, rounds: int = 200) -> int:
    for _ in range(10):
        fn(obj)
    gc.collect()
    before = sys.getrefcount(obj)
    for _ in range(rounds):
        fn(obj)
    gc.collect()
    return sys.getrefcount(obj) - before


@pytest.mark.parametrize("codec", _core.CODEC_NAMES)
def test_decode_paths_do_not_leak_references(codec: str) -> None:
    frame = tokenwire.encode(list(range(100)), codec=codec, checksum=True)
    many = tokenwire.encode_many([list(range(10))] * 3, codec=codec)
    assert _refcount_stable(tokenwire.decode, frame) == 0
    assert _refcount_stable(tokenwire.decode_many, many) == 0
    assert _refcount_stable(tokenwire.frame_info, frame) == 0
    bad = frame[:-1]
    def failing(b: bytes) -> None:
        with pytest.raises(WireFormatError):
            tokenwire.decode(b)
    assert _refcount_stable(failing, bad) == 0
    arr = np.arange(100, dtype=np.int32)
    assert _refcount_stable(lambda a: tokenwire.encode(a, codec=codec), arr) == 0


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
@pytest.mark.skipif("libasan" in os.environ.get("LD_PRELOAD", ""),
                    reason="ASan's quarantine keeps freed memory resident")
def test_decode_does_not_leak_memory() -> None:
    # The resident set as well as tracemalloc (tests/test_leaks.py): a leak outside Python's
    # allocators (libzstd, the C library) shows here only.
    frame = tokenwire.encode(list(range(50_000)), codec="packed")   # 200 kB per decoded vector
    bad = frame + b"\0"
    for _ in range(50):
        tokenwire.decode(frame)
    gc.collect()
    base = _rss_bytes()
    for _ in range(2000):                                # 400 MB if every vector leaked
        tokenwire.decode(frame)
        tokenwire.decode_many(frame)
        try:
            tokenwire.decode(bad)
        except WireFormatError:
            pass
    gc.collect()
    assert _rss_bytes() - base < 16 * 2**20


# ---------------------------------------------------------------------------------------------
# The codec table (include/tokenwire/frame.h): the one list of codec names and widths


def test_check_codec_accepts_what_encode_accepts() -> None:
    for name in tokenwire._core.CODECS:
        if name != "zstd" or HAS_ZSTD:
            assert tokenwire._core.check_codec(name) == name
            tokenwire.encode([1], codec=name)


def test_check_codec_raises_what_encode_raises() -> None:
    with pytest.raises(ValueError) as by_check:
        tokenwire._core.check_codec("lz4")
    with pytest.raises(ValueError) as by_encode:
        tokenwire.encode([1], codec="lz4")
    *first, last = tokenwire._core.CODECS
    assert str(by_check.value) == str(by_encode.value) == (
        f"unknown codec 'lz4' (expected {', '.join(map(repr, first))} or {last!r})")


@pytest.mark.parametrize("fn", [tokenwire.decode, tokenwire.decode_many])
def test_a_bad_vocab_size_is_reported_before_the_frame(fn) -> None:
    """decode and decode_many (and the C++ header) check their arguments before the data: a
    vocab_size <= 0 is the caller's mistake whatever the frame holds."""
    for data in (b"TX", tokenwire.encode([1, 2])):
        with pytest.raises(ValueError, match="vocab_size must be positive, got 0") as e:
            fn(data, vocab_size=0)
        assert not isinstance(e.value, tokenwire.WireFormatError)


# ---------------------------------------------------------------------------------------------
# The encoder's codec choice, as docs/wire-format.md ("Encoder rules") writes it


def _documented_auto(ids: list[int]) -> tuple[str, int]:
    """auto by the words of the spec: of the codecs that hold the ids, the smallest payload
    ceil(n * width / 8); on a tie the earlier of raw, u16, packed. u16 holds ids in
    [0, 65536); packed ids >= 0, at the bit length of the largest id (1 when all are 0 or
    there are none)."""
    n = len(ids)
    candidates = [("raw", 32)]
    if all(0 <= i < 65536 for i in ids):
        candidates.append(("u16", 16))
    if all(i >= 0 for i in ids):
        candidates.append(("packed", max([1] + [i.bit_length() for i in ids])))
    return min(candidates, key=lambda c: ((n * c[1] + 7) // 8, candidates.index(c)))


@pytest.mark.parametrize(("ids", "codec", "width"), [
    ([], "raw", 32),                        # every payload is 0 bytes: the tie goes to raw
    ([0], "packed", 1),
    ([65535], "u16", 16),                   # packed at 16 bits is as large: u16
    ([65535, 0, 1], "u16", 16),
    ([32767, 0], "u16", 16),                # packed 15: ceil(30 / 8) = 4 bytes, u16's 4
    ([32767] * 7, "u16", 16),               # 14 bytes either way
    ([32767] * 8, "packed", 15),            # 15 bytes against 16
    ([40000] * 64, "u16", 16),              # packed 16 always ties
    ([65536], "packed", 17),                # u16 cannot hold it; 3 bytes against raw's 4
    ([70000] * 10, "packed", 17),           # the spec's example: 22 bytes
    ([1, 0, 1, 0], "packed", 1),            # the spec's example: 1 byte
    ([-1], "raw", 32),                      # a negative id: only raw holds it
    ([5, -2**31, 7], "raw", 32),
    ([2**31 - 1], "raw", 32),               # packed 31: 4 bytes, raw's 4
    ([2**31 - 1] * 8, "packed", 31),        # 31 bytes against 32
])
def test_auto_follows_the_documented_rule_at_its_boundaries(ids: list[int], codec: str,
                                                            width: int) -> None:
    assert _documented_auto(ids) == (codec, width)
    for frame in (tokenwire.encode(ids), tokenwire.encode_many([ids[:1], ids[1:]])):
        info = tokenwire.frame_info(frame)
        assert (info.codec, info.width) == (codec, width)


@given(st.lists(st.one_of(st.integers(0, 2**16 + 5), st.integers(-2**31, 2**31 - 1)),
                max_size=40))
def test_auto_is_the_documented_rule(ids: list[int]) -> None:
    info = tokenwire.frame_info(tokenwire.encode(ids))
    assert (info.codec, info.width) == _documented_auto(ids)


@pytest.mark.skipif(not HAS_ZSTD, reason="zstandard not installed")
class TestZstdCodecChoice:
    """codec="zstd" compresses a byte-aligned payload (u16 when it holds every id, else raw),
    not auto's, whose bit-packing hides the repeats zstd matches on."""

    def test_ids_below_65536_are_compressed_as_u16(self) -> None:
        phrase = np.random.default_rng(5).integers(0, 1024, size=500).tolist()
        ids = phrase * 4                            # auto packs these at 10 bits
        assert tokenwire.frame_info(tokenwire.encode(ids)).codec == "packed"
        info = tokenwire.frame_info(tokenwire.encode(ids, codec="zstd"))
        assert (info.codec, info.width, info.compression) == ("u16", 16, "zstd")

    def test_larger_or_negative_ids_are_compressed_as_raw(self) -> None:
        phrase = np.random.default_rng(6).integers(0, 150_000, size=500).tolist()
        for ids in (phrase * 4, [-1] + phrase * 4):
            info = tokenwire.frame_info(tokenwire.encode(ids, codec="zstd"))
            assert (info.codec, info.width, info.compression) == ("raw", 32, "zstd")
            assert tokenwire.decode(tokenwire.encode(ids, codec="zstd")).tolist() == ids

    def test_beyond_64x_the_packed_payload_is_compressed_instead(self) -> None:
        """zstd over the raw payload of these ids expands more than 64x, which a decoder refuses;
        over auto's packed payload (18/32 the size) it stays within the bound and is kept."""
        import zstandard

        ids = [151_000, 3, 77] * 200
        raw = tokenwire.encode(ids, codec="raw")[16:]
        assert len(raw) > 64 * len(zstandard.ZstdCompressor(level=1).compress(raw))
        frame = tokenwire.encode(ids, codec="zstd")
        info = tokenwire.frame_info(frame)
        assert (info.codec, info.width, info.compression) == ("packed", 18, "zstd")
        assert len(frame) < len(tokenwire.encode(ids)) // 10
        assert tokenwire.decode(frame).tolist() == ids

    def test_threads_share_no_compressor(self) -> None:
        """Each thread compresses with its own context (the GIL is released while zstd runs):
        frames made in 4 threads at once are those made in one."""
        import threading

        rng = np.random.default_rng(3)
        inputs = [np.repeat(rng.integers(0, 150_000, size=2000, dtype=np.int32), 1 + k % 3)
                  for k in range(16)]
        expected = [tokenwire.encode(a, codec="zstd") for a in inputs]
        got: dict[int, object] = {}

        def work(t: int) -> None:
            try:
                got[t] = [tokenwire.encode(a, codec="zstd") for _ in range(20) for a in inputs]
            except Exception as e:      # reported by the assertion below
                got[t] = e

        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert all(got[t] == expected * 20 for t in range(4))


# ---------------------------------------------------------------------------------------------
# pfor: every block shape through encode / decode and encode_many / decode_many


@st.composite
def pfor_ids(draw: st.DrawFn) -> list[int]:
    """Ids whose blocks take every base width (0..32, negative ids at 32), with exceptions (a
    few ids up to 8 bits wider, or any int32), in short (< 128) and full blocks, or none."""
    n = draw(st.sampled_from([0, 1, 7, 127, 128, 129, 255, 256, 300, 700]))
    width = draw(st.integers(0, 32))
    if width == 32:
        base = st.integers(-(2**31), 2**31 - 1)
    else:
        base = st.integers(0, 2**width - 1)
    rnd = random.Random(draw(st.integers(0, 2**32)))
    ids = [draw(base) if i < 4 else 0 for i in range(n)]
    top = 2**width - 1 if width < 32 else 2**31 - 1
    for i in range(4, n):
        ids[i] = rnd.randint(0, top) if width < 32 else rnd.randint(-(2**31), 2**31 - 1)
    wider = draw(st.integers(0, 8))
    for _ in range(draw(st.integers(0, 40)) if n else 0):
        i = rnd.randrange(n)
        ids[i] = rnd.randint(0, min(2**(width + wider) - 1, 2**31 - 1)) if rnd.random() < 0.9 \
            else rnd.randint(-(2**31), 2**31 - 1)
    return ids


@given(pfor_ids(), st.booleans(), st.integers(1, 4))
def test_pfor_round_trips_every_block_shape(ids: list[int], checksum: bool, parts: int) -> None:
    frame = tokenwire.encode(ids, codec="pfor", checksum=checksum)
    info = tokenwire.frame_info(frame)
    assert (info.codec, info.width, info.counts, info.nbytes) == ("pfor", 0, (len(ids),), len(frame))
    assert tokenwire.decode(frame).tolist() == ids
    size = int.from_bytes(frame[16:24], "little")              # the length prefix L
    blocks = -(-len(ids) // 128)
    assert blocks <= size <= 4 * len(ids) + blocks
    assert len(frame) == 24 + size + 4 * checksum
    if all(i >= 0 for i in ids):
        # every block is at most the sequence's width: never more than packed + 1 byte a block
        packed = len(tokenwire.encode(ids, codec="packed")) - 16
        assert size <= packed + blocks
    # several sequences: one payload over their concatenation (blocks cross sequences)
    cuts = sorted(random.Random(len(ids)).sample(range(len(ids) + 1), min(parts - 1, len(ids) + 1)))
    seqs = [ids[a:b] for a, b in zip([0, *cuts], [*cuts, len(ids)])]
    many = tokenwire.encode_many(seqs, codec="pfor", checksum=checksum)
    table = -(-4 * len(seqs) // 8) * 8
    assert many[16 + table:len(many) - 4 * checksum] == frame[16:len(frame) - 4 * checksum]
    assert [v.tolist() for v in tokenwire.decode_many(many)] == seqs
    assert tokenwire.decode_many(frame)[0].tolist() == ids


def test_pfor_decodes_from_mutable_memory_and_names_the_frame_offset() -> None:
    frame = tokenwire.encode_many([[1, 2], [3]], codec="pfor")      # table of 8 bytes
    assert tokenwire.decode_many(bytearray(frame))[1].tolist() == [3]
    bad = bytearray(frame)
    bad[32] = 0x21                                                   # the block's header: width 33
    with pytest.raises(WireFormatError, match=r"^pfor payload is corrupt at byte 32: block width"):
        tokenwire.decode_many(memoryview(bad))


def test_auto_does_not_pick_pfor() -> None:
    """auto's rule (docs/wire-format.md, "codec=auto") chooses among the fixed-width codecs only:
    ids where pfor is much smaller still give the smallest fixed-width payload, on any count."""
    for ids, codec in (([1] * 100_000 + [70_000], "packed"), ([-1] + [1] * 100_000, "raw")):
        pfor = tokenwire.encode(ids, codec="pfor")
        assert len(pfor) < len(tokenwire.encode(ids, codec=codec)) / 10
        assert tokenwire.encode(ids) == tokenwire.encode(ids, codec=codec)
        assert tokenwire.encode_many([ids, ids]) == tokenwire.encode_many([ids, ids], codec=codec)
