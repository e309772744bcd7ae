"""C++ and Python read and write the same frames (tokenwire/include/tokenwire/wire.hpp).

A C++ program compiled here against tokenwire.get_include() (tests/cpp/conformance.cpp) runs as
one long-lived subprocess for the session; every check sends it a frame and compares its answer
with what the Python extension does with the same bytes: the same ids, byte-identical re-encoded
frames, and for a damaged frame the same exception class and the same message.
"""

from __future__ import annotations

import json
import os
import pathlib
import struct
import subprocess
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

import tokenwire
from tokenwire import WireFormatError
from tokenwire.errors import ChecksumError
from cpp.harness import (
    Conformance,
    CppError,
    compile_conformance,
    cxx,
    extra_flags,
    have_zstd_header,
    require_compiler,
)
from strategies import CODECS, damaged_frames, frames, ids_for_codec

# A C++ compiler and a long-lived subprocess (pyproject.toml's markers).
pytestmark = pytest.mark.integration

FIXTURES = pathlib.Path(__file__).resolve().parent / "fixtures"
MANIFEST = json.loads((FIXTURES / "manifest.json").read_text())
INVALID = FIXTURES / "invalid"
INVALID_MANIFEST = json.loads((INVALID / "manifest.json").read_text())
#: The manifest's exception classes as the conformance server names them.
CPP_ERROR_KINDS = {"WireFormatError": "wire", "ChecksumError": "checksum"}


def _zstd_in_cpp() -> bool:
    if have_zstd_header():
        return True
    if os.environ.get("CI"):
        raise RuntimeError("zstd.h not found: CI installs libzstd-dev (.ci/run)")
    return False


@pytest.fixture(scope="session")
def cpp_build_dir(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    require_compiler()
    return tmp_path_factory.mktemp("cpp-conformance")


@pytest.fixture(scope="session")
def cpp(cpp_build_dir: pathlib.Path) -> Iterator[Conformance]:
    server = Conformance(compile_conformance(cpp_build_dir, zstd=_zstd_in_cpp()))
    yield server
    server.close()


def python_outcome(frame: bytes, *, many: bool, vocab_size: int = -1) -> tuple[str, object]:
    """What the Python extension does with `frame`: ("ok", sequences) or (error kind, message)."""
    kw = {} if vocab_size == -1 else {"vocab_size": vocab_size}
    try:
        if many:
            return "ok", [v.tolist() for v in tokenwire.decode_many(frame, **kw)]
        return "ok", [tokenwire.decode(frame, **kw).tolist()]
    except ChecksumError as e:
        return "checksum", str(e)
    except WireFormatError as e:
        return "wire", str(e)


def cpp_outcome(cpp: Conformance, frame: bytes, *, many: bool,
                vocab_size: int = -1) -> tuple[str, object]:
    try:
        if many:
            return "ok", cpp.decode_many(frame, vocab_size=vocab_size)[0]
        return "ok", [cpp.decode(frame, vocab_size=vocab_size)[0]]
    except CppError as e:
        return e.kind, e.message


def assert_agree(cpp: Conformance, frame: bytes, vocab_size: int = -1) -> None:
    for many in (False, True):
        expected = python_outcome(frame, many=many, vocab_size=vocab_size)
        assert cpp_outcome(cpp, frame, many=many, vocab_size=vocab_size) == expected, frame.hex()


# ---------------------------------------------------------------------------------------------
# Golden frames


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_golden_frame_decodes_and_reencodes_byte_exactly(cpp: Conformance, name: str) -> None:
    case = MANIFEST[name]
    frame = (FIXTURES / f"{name}.bin").read_bytes()
    seqs = case["sequences"]
    info = tokenwire.frame_info(frame)
    assert cpp.frame_info(frame) == {"version": info.version, "codec": info.codec,
                                     "width": info.width, "checksum": info.checksum,
                                     "nbytes": info.nbytes, "counts": tuple(info.counts)}
    codec = case["kwargs"].get("codec", "auto")
    checksum = case["kwargs"].get("checksum", False)
    many, again = cpp.decode_many(frame, reencode=codec, checksum=checksum)
    assert many == seqs
    if case["kind"] == "one":
        one, again = cpp.decode(frame, reencode=codec, checksum=checksum)
        assert one == seqs[0]
        assert cpp.encode(seqs[0], codec, checksum) == again
    else:
        assert cpp.encode_many(seqs, codec, checksum) == again
    if case["reencode_exact"]:
        assert again == frame, "the C++ encoder writes a different frame than Python's"
    # Whatever C++ wrote, Python reads back to the same ids.
    assert [v.tolist() for v in tokenwire.decode_many(again)] == seqs


def _damaged(frame: bytes) -> Iterator[bytes]:
    cuts = range(len(frame)) if len(frame) <= 160 else [*range(40), *range(40, len(frame), 97)]
    for n in cuts:
        yield frame[:n]
    yield frame + b"\0"
    yield frame + b"\x01\x02\x03"
    for i in range(min(len(frame), 48)):
        for bit in (0x01, 0x80):
            yield frame[:i] + bytes([frame[i] ^ bit]) + frame[i + 1:]
    if frame:
        yield frame[:-1] + bytes([frame[-1] ^ 0xFF])


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_damaged_golden_frames_fail_with_python_messages(cpp: Conformance, name: str) -> None:
    frame = (FIXTURES / f"{name}.bin").read_bytes()
    for bad in _damaged(frame):
        assert_agree(cpp, bad)


@pytest.mark.parametrize("name", sorted(INVALID_MANIFEST))
def test_negative_fixtures_fail_with_the_manifest_messages(cpp: Conformance, name: str) -> None:
    """The conformance suite (tests/fixtures/invalid/): every damaged frame is refused by
    decode / decode_many / frame_info with the manifest's error class and exact message."""
    case = INVALID_MANIFEST[name]
    frame = (INVALID / f"{name}.bin").read_bytes()
    if frame[7:8] and frame[7] & 0x04 and not _zstd_in_cpp():
        pytest.skip("libzstd headers not installed (CI has them)")
    vocab = case["kwargs"].get("vocab_size", -1)
    calls = {"decode": lambda: cpp.decode(frame, vocab_size=vocab),
             "decode_many": lambda: cpp.decode_many(frame, vocab_size=vocab),
             "frame_info": lambda: cpp.frame_info(frame)}
    for fn_name, call in calls.items():
        expected = case[fn_name]
        try:
            call()
        except CppError as e:
            assert "error" in expected, (fn_name, e)
            assert e.kind == CPP_ERROR_KINDS[expected["error"]], (fn_name, e)
            if expected.get("match") == "prefix":
                assert e.message.startswith(expected["message"]), (fn_name, e.message)
            else:
                assert e.message == expected["message"], fn_name
        else:
            assert "ok" in expected, (fn_name, expected)


def _header(codec: int = 0, width: int = 32, flags: int = 0, count: int = 0,
            magic: bytes = b"TWIR", version: int = 1) -> bytes:
    return magic + struct.pack("<BBBBQ", version, codec, width, flags, count)


@pytest.mark.parametrize("frame", [
    b"", b"T", b"TW", b"TWIX", b"PK\x03\x04", b"'\"\\\n\x7f\xff", b"ab'c", b"TWIR",
    _header(version=2), _header(codec=3), _header(codec=1, width=15), _header(codec=2, width=0),
    _header(codec=2, width=32), _header(flags=0x08), _header(flags=0x81),
    _header(count=2**40) + b"\0" * 4, _header(codec=2, width=1, count=2**64 - 1),
    _header(codec=2, width=31, count=2**58, flags=0x01) + b"\0" * 9,
    _header(flags=0x02, count=3) + b"\0" * 8, _header(flags=0x02, count=2**62),
    _header(flags=0x02, count=2**64 - 1) + b"\0" * 16,
    _header(flags=0x02, count=1) + struct.pack("<II", 0, 9),
    _header(flags=0x02, count=2) + struct.pack("<II", 2**32 - 1, 2**32 - 1),
    _header(codec=2, width=3, count=1) + b"\x08",
    _header(flags=0x01, count=1) + b"\0" * 6,
    _header(flags=0x04, count=4) + b"\0" * 3,
    _header(flags=0x05, count=4) + struct.pack("<Q", 2**64 - 1) + b"\0" * 4,
    _header(flags=0x04, count=1000) + struct.pack("<Q", 2) + b"\0\0",
    _header(flags=0x04, count=4) + struct.pack("<Q", 4) + b"\0" * 4,
    _header(flags=0x04, count=4) + struct.pack("<Q", 4) + b"\x28\xb5\x2f\xfd",
])
def test_malformed_frames_fail_with_python_messages(cpp: Conformance, frame: bytes) -> None:
    assert_agree(cpp, frame)


def _zstd_section(frame: bytes, section: bytes, checksum: bool = False) -> bytes:
    """`frame` (single-sequence, zstd) with its zstd section replaced; checksum recomputed."""
    body = frame[:16] + struct.pack("<Q", len(section)) + section
    return body + struct.pack("<I", tokenwire._core._crc32c(body)) if checksum else body


def test_zstd_sections_fail_with_python_messages(cpp: Conformance) -> None:
    import zstandard

    ids = [1, 2, 3, 4] * 50
    frame = tokenwire.encode(ids, codec="zstd")
    (clen,) = struct.unpack_from("<Q", frame, 16)
    comp = frame[24:24 + clen]
    plain = tokenwire.encode(ids, codec="packed")[16:]
    cases = [
        comp + b"abcde",                                   # trailing bytes after the zstd frame
        comp + comp,                                       # two zstd frames
        comp[:-3],                                         # the zstd frame does not end
        comp[:6],
        comp[:-4] + bytes([comp[-4] ^ 0x40]) + comp[-3:],  # corrupt block
        zstandard.ZstdCompressor(write_content_size=False).compress(plain),     # size unknown
        zstandard.ZstdCompressor().compress(plain + b"\0"),                     # wrong size
        zstandard.ZstdCompressor(write_checksum=True).compress(plain),
        b"\0" * len(comp),
    ]
    for section in cases:
        for checksum in (False, True):
            bad = _zstd_section(frame, section, checksum)
            if checksum:
                bad = bad[:7] + bytes([bad[7] | 0x01]) + bad[8:-4]
                bad += struct.pack("<I", tokenwire._core._crc32c(bad))
            assert_agree(cpp, bad)


def test_vocab_check_matches(cpp: Conformance) -> None:
    one = tokenwire.encode([1, 5, 3, 70000])
    many = tokenwire.encode_many([[1, 2], [3, 9, 4]], codec="raw")
    for frame in (one, many, tokenwire.encode([-1, 2], codec="raw")):
        for vocab in (4, 10, 70000, 70001, 2**31, 2**40):
            assert_agree(cpp, frame, vocab)
    with pytest.raises(CppError, match="vocab_size must be positive, got 0") as exc:
        cpp.decode(one, vocab_size=0)
    assert exc.value.kind == "invalid"


def test_decode_refuses_multi_sequence_frames(cpp: Conformance) -> None:
    assert_agree(cpp, tokenwire.encode_many([[1], [2, 3]]))


# ---------------------------------------------------------------------------------------------
# Encoding


@pytest.mark.parametrize("codec", ["u16", "packed"])
def test_forced_codec_errors_match(cpp: Conformance, codec: str) -> None:
    bad = [1, 2, 70000, -5] if codec == "u16" else [1, 2, -5]
    with pytest.raises(ValueError) as py:
        tokenwire.encode(bad, codec=codec)
    with pytest.raises(CppError) as cc:
        cpp.encode(bad, codec)
    assert (cc.value.kind, cc.value.message) == ("invalid", str(py.value))
    with pytest.raises(ValueError) as py:
        tokenwire.encode_many([[1], bad], codec=codec)
    with pytest.raises(CppError) as cc:
        cpp.encode_many([[1], bad], codec)
    assert (cc.value.kind, cc.value.message) == ("invalid", str(py.value))


def _same_zstd(cpp: Conformance) -> bool:
    """Whether C++ and Python compress with the same libzstd release: only then must their zstd
    frames be byte-identical (any two releases read each other's frames)."""
    import zstandard

    return cpp.zstd_version() == tuple(zstandard.ZSTD_VERSION)


def assert_same_frame(cpp: Conformance, ours: bytes, theirs: bytes) -> None:
    if tokenwire.frame_info(theirs).compression == "zstd" and not _same_zstd(cpp):
        assert tokenwire.frame_info(ours).compression == "zstd"
        assert [v.tolist() for v in tokenwire.decode_many(ours)] == \
            [v.tolist() for v in tokenwire.decode_many(theirs)]
    else:
        assert ours == theirs


@given(st.data())
def test_encode_is_byte_identical(cpp: Conformance, data: st.DataObject) -> None:
    codec = data.draw(st.sampled_from(CODECS))
    checksum = data.draw(st.booleans())
    if data.draw(st.booleans()):
        seqs = data.draw(st.lists(ids_for_codec(codec, max_size=60), max_size=5))
        frame = tokenwire.encode_many(seqs, codec=codec, checksum=checksum)
        assert_same_frame(cpp, cpp.encode_many(seqs, codec, checksum), frame)
    else:
        ids = data.draw(ids_for_codec(codec))
        frame = tokenwire.encode(ids, codec=codec, checksum=checksum)
        assert_same_frame(cpp, cpp.encode(ids, codec, checksum), frame)


# ---------------------------------------------------------------------------------------------
# Fuzzing: the same generated frames, valid and damaged, through both decoders


@given(frames())
def test_valid_frames_agree(cpp: Conformance, case: tuple[bytes, list[list[int]], bool]) -> None:
    frame, seqs, multi = case
    assert cpp.decode_many(frame)[0] == seqs
    assert_agree(cpp, frame)


@given(damaged_frames())
def test_damaged_frames_agree(cpp: Conformance, frame: bytes) -> None:
    assert_agree(cpp, frame)


# ---------------------------------------------------------------------------------------------
# Without zstd compiled in


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_two_translation_units_share_frames(cpp_build_dir: pathlib.Path, opt: str) -> None:
    # The kernels keep tables and CPU flags in file-local statics: every unit must use its own.
    exe = cpp_build_dir / f"two-units{opt}"
    cpp_dir = pathlib.Path(__file__).resolve().parent / "cpp"
    subprocess.run([cxx(), "-std=c++17", opt, "-Wall", "-Wextra", "-Werror",
                    "-I", tokenwire.get_include(), str(cpp_dir / "two_units_a.cpp"),
                    str(cpp_dir / "two_units_b.cpp"), "-o", str(exe), *extra_flags()], check=True)
    r = subprocess.run([str(exe)], capture_output=True, text=True)
    assert (r.returncode, r.stdout.strip()) == (0, "ok")


def test_without_zstd_zstd_frames_are_refused(cpp_build_dir: pathlib.Path) -> None:
    server = Conformance(compile_conformance(cpp_build_dir, zstd=False))
    try:
        frame = (FIXTURES / "zstd_repeated.bin").read_bytes()
        with pytest.raises(CppError, match="zstd support is not compiled in") as exc:
            server.decode(frame)
        assert exc.value.kind == "wire"
        with pytest.raises(CppError, match="needs zstd support compiled in") as exc:
            server.encode([1, 2, 3], "zstd")
        assert exc.value.kind == "invalid"
        # everything else works the same without it
        frame = tokenwire.encode([1, 2, 3])
        assert server.decode(frame, reencode="auto") == ([1, 2, 3], frame)
    finally:
        server.close()
