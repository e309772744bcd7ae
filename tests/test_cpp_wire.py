"""C++ and Python read and write the same frames (tokenwire/include/tokenwire/wire.hpp).

A C++ program compiled here against tokenwire.get_include() (tests/cpp/conformance.cpp) runs as
one long-lived subprocess for the session; every check sends it a frame and compares its answer
with what the Python extension does with the same bytes: the same ids, byte-identical re-encoded
frames, and for a damaged frame the same exception class and the same message -- on every
frame, except where docs/wire-format.md ("Which frames libzstd decides") lets the two libzstd
builds differ: a zstd frame whose compressed content is damaged, answered by libzstd itself
(`assert_agree` holds that rule).
"""

from __future__ import annotations

import collections
import json
import mmap
import pathlib
import random
import struct
import subprocess

import pytest
from hypothesis import given
from hypothesis import strategies as st

import tokenwire
from tokenwire import WireFormatError
from support.cpp_harness import (
    Conformance,
    CppError,
    compile_conformance,
    compile_race_count_table,
    cxx,
    extra_flags,
)
from support.cpp_agreement import (
    agree,
    assert_agree,
    assert_same_frame,
    cpp_outcome,
    damaged_variants,
    libzstd_decided,
    libzstd_text,
    python_outcome,
)
from support.strategies import CODECS, damaged_frames, frames, ids_for_codec
from support.wait import WAIT_S

# A C++ compiler and a long-lived subprocess (pyproject.toml's markers).
pytestmark = pytest.mark.integration

FIXTURES = pathlib.Path(__file__).resolve().parent / "fixtures"
MANIFEST = json.loads((FIXTURES / "manifest.json").read_text())
INVALID = FIXTURES / "invalid"
INVALID_MANIFEST = json.loads((INVALID / "manifest.json").read_text())
#: The manifest's exception classes as the conformance server names them.
CPP_ERROR_KINDS = {"WireFormatError": "wire", "ChecksumError": "checksum", "ValueError": "invalid"}


# The fixtures `cpp_build_dir` and `cpp` (the conformance server) are tests/conftest.py's:
# one server per session, shared with tests/test_codecs.py.


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


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_damaged_golden_frames_fail_with_python_messages(cpp: Conformance, name: str) -> None:
    frame = (FIXTURES / f"{name}.bin").read_bytes()
    for bad in damaged_variants(frame):
        assert_agree(cpp, bad)


@pytest.mark.parametrize("name", sorted(INVALID_MANIFEST))
def test_negative_fixtures_fail_with_the_manifest_messages(cpp: Conformance, name: str) -> None:
    """The conformance suite (tests/fixtures/invalid/): every damaged frame is refused by
    decode / decode_many / frame_info with the manifest's error class and exact message."""
    case = INVALID_MANIFEST[name]
    frame = (INVALID / f"{name}.bin").read_bytes()
    vocab = case["kwargs"].get("vocab_size")
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
    _header(version=2), _header(codec=3), _header(codec=4), _header(codec=3, width=0, flags=4),
    _header(codec=1, width=15), _header(codec=2, width=0),
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


def test_frame_info_reads_a_prefix_of_a_zstd_frame(cpp: Conformance) -> None:
    """frame_info needs the header, the count table and the zstd length prefix only: on any
    prefix that holds them it gives the whole frame's nbytes, in Python and C++ alike (it once
    compared the zstd length with the bytes present and refused a partial frame)."""
    rng = random.Random(5)
    ids = [rng.choice([3, 70, 500, 900]) for _ in range(5000)]    # compresses, C ~ 1/4 of P
    for frame in (tokenwire.encode(ids, codec="zstd", checksum=True),
                  tokenwire.encode_many([ids, ids[:7]], codec="zstd")):
        full = tokenwire.frame_info(frame)
        assert full.compression == "zstd"
        table = 8 * ((len(full.counts) * 4 + 7) // 8) if frame[7] & 0x02 else 0
        # the zstd section is longer than the shorter prefixes below
        assert struct.unpack_from("<Q", frame, 16 + table)[0] > 100
        for cut in (16 + table + 8, 16 + table + 9, (16 + table + 8 + len(frame)) // 2,
                    len(frame) - 1):
            info = tokenwire.frame_info(frame[:cut])
            assert (info.nbytes, tuple(info.counts)) == (len(frame), tuple(full.counts))
            assert cpp.frame_info(frame[:cut])["nbytes"] == len(frame)
        with pytest.raises(WireFormatError, match="truncated: zstd length needs 8 bytes"):
            tokenwire.frame_info(frame[:16 + table + 7])


def test_vocab_check_matches(cpp: Conformance) -> None:
    one = tokenwire.encode([1, 5, 3, 70000])
    many = tokenwire.encode_many([[1, 2], [3, 9, 4]], codec="raw")
    for frame in (one, many, tokenwire.encode([-1, 2], codec="raw")):
        for vocab in (None, 4, 10, 70000, 70001, 2**31, 2**40):
            assert_agree(cpp, frame, vocab)


@pytest.mark.parametrize("vocab", [0, -1, -5, -(2**63)])
def test_vocab_size_below_one_is_refused_like_python(cpp: Conformance, vocab: int) -> None:
    """One rule in both languages: no vocab_size (None / std::nullopt) checks nothing, and any
    value below 1 -- -1 included -- is refused before the frame is read, with Python's message."""
    frame = tokenwire.encode([1, 2, 3])
    for bad in (frame, frame[:-1]):
        for many in (False, True):
            with pytest.raises(ValueError) as py:
                (tokenwire.decode_many if many else tokenwire.decode)(bad, vocab_size=vocab)
            assert str(py.value) == f"vocab_size must be positive, got {vocab}"
            assert cpp_outcome(cpp, bad, many=many, vocab_size=vocab) == ("invalid", str(py.value))


def test_decode_refuses_multi_sequence_frames(cpp: Conformance) -> None:
    assert_agree(cpp, tokenwire.encode_many([[1], [2, 3]]))


# ---------------------------------------------------------------------------------------------
# Check 9 on a MULTI frame: N is the sum of the count table, not S (no fixture can show it)


def test_check_9_sums_the_count_table(cpp: Conformance, tmp_path: pathlib.Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """docs/wire-format.md, check 9: on a MULTI frame N is the sum of the table. The smallest
    frame where that sum reaches 2**58 has a table of 2**26 + 1 entries of 2**32 - 1 (256 MiB;
    S = 2**26 + 1 itself is far below 2**58, and a frame claiming S >= 2**58 fails check 7
    first), too large to commit, so it is written here, read by the Python decoder, the C++
    header (the server reads the file) and `tokenwire inspect`, each held to the exact message.
    A decoder that took S for N in check 9 passes it and answers a later check: the zstd frame
    (C = 1) check 12, `zstd payload of 1 bytes claims to expand to ...`, the pfor frame (L =
    ceil(N/128), check 12 passed) check 13, `truncated: pfor payload needs L bytes, has 0`.
    (A raw frame cannot tell the two apart: check 13 gives check 9's message.)"""
    from tokenwire import cli
    from tokenwire._core import ImmutableBuffer

    nseq = 2**26 + 1
    total = nseq * (2**32 - 1)                       # 2**58 + 2**32 - 2**26 - 1
    table_len = (4 * nseq + 7) // 8 * 8
    path = tmp_path / "count_table_2_58.bin"
    with path.open("wb") as f:
        f.write(_header(flags=0x02, count=nseq))
        chunk = b"\xff" * 2**24
        for _ in range(4 * nseq // len(chunk)):
            f.write(chunk)
        f.write(b"\xff" * (4 * nseq % len(chunk)) + bytes(table_len - 4 * nseq))
    cases = [   # codec, width, flags, what follows the table, check 9's B
        (1, 16, 0x06, struct.pack("<Q", 1) + b"\0", 2 * total),       # ZSTD over u16
        (3, 0, 0x02, struct.pack("<Q", -(-total // 128)), 8 + -(-total // 128)),   # pfor
    ]
    assert total >= 2**58 > nseq
    for codec, width, flags, tail, need in cases:
        with path.open("r+b") as f:
            f.write(_header(codec=codec, width=width, flags=flags, count=nseq))
            f.truncate(16 + table_len)
            f.seek(0, 2)
            f.write(tail)
        message = f"truncated: payload needs {need} bytes, has {len(tail)}"
        with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            frame = ImmutableBuffer(m)      # read in place: no copy of the table
            for fn in (tokenwire.decode, tokenwire.decode_many, tokenwire.frame_info):
                with pytest.raises(WireFormatError) as py:
                    fn(frame)
                assert (type(py.value), str(py.value)) == (WireFormatError, message), fn
            del frame
        # decode, decode_many, frame_info
        assert cpp.on_file(path) == [("wire", message)] * 3
        assert cli.main(["inspect", str(path)]) == 1
        size = 16 + table_len + len(tail)
        assert capsys.readouterr().err == f"tokenwire inspect: invalid frame ({size} bytes): " \
                                          f"{message}\n"


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
# zstd: the same answer whatever libzstd release each side links


def _zstd_block(btype: int, size: int, last: bool) -> bytes:
    return ((size << 3) | (btype << 1) | int(last)).to_bytes(3, "little")


def _zstd_frame_header(rng: random.Random, content_size: int) -> bytes:
    """A zstd frame header for `content_size` bytes with random field choices: single segment
    or a Window_Descriptor (tiny to huge windows), 0-4 byte dictionary ID, content size field
    of every width, content checksum flag."""
    single = rng.random() < 0.5
    fcs_code = rng.choice([0, 1, 2, 3])
    if fcs_code == 1 and content_size < 256:
        fcs_code = 2
    did_code = rng.choice([0, 0, 0, 1, 2, 3])
    fhd = (fcs_code << 6) | (0x20 if single else 0) | (0x04 if rng.random() < 0.2 else 0) \
        | did_code
    out = struct.pack("<IB", 0xFD2FB528, fhd)
    if not single:
        out += bytes([rng.choice([0, 1, 8, 0x10, 0x38, 0x58, 0x88, 0xF0, rng.randrange(256)])])
    out += [b"", bytes([rng.choice([0, 1])]), struct.pack("<H", rng.choice([0, 7])),
            struct.pack("<I", rng.choice([0, 123]))][did_code]
    size_len = {0: 1 if single else 0, 1: 2, 2: 4, 3: 8}[fcs_code]
    value = content_size - 256 if size_len == 2 else content_size
    out += value.to_bytes(8, "little")[:size_len]
    if fhd & 0x04:
        out += b""      # the checksum itself is appended after the blocks
    return out


def _random_zstd_section(rng: random.Random, plain: bytes) -> tuple[bytes, bytes, bool]:
    """A zstd frame of `plain` (from the zstandard compressor, or built block by block: raw, RLE
    and compressed blocks of raw literals, sometimes padded), a copy of it, maybe damaged, and
    whether the frame is one a decoder must accept (the compressor's, with its content size)."""
    import zstandard

    valid = False
    if rng.random() < 0.5:
        valid = rng.random() < 0.95
        section = zstandard.ZstdCompressor(level=rng.choice([1, 3, 19]),
                                           write_checksum=rng.random() < 0.3,
                                           write_content_size=valid).compress(plain)
    else:
        head = _zstd_frame_header(rng, len(plain))
        body, pos, nblocks = b"", 0, rng.choice([1, 1, 2, 3])
        for b in range(nblocks):
            last = b == nblocks - 1
            take = len(plain) - pos if last else rng.randrange(0, len(plain) - pos + 1)
            chunk, pos = plain[pos:pos + take], pos + take
            btype = rng.choice([0, 1, 2, 2])
            if btype == 0:
                body += _zstd_block(0, len(chunk), last) + chunk
            elif btype == 1:
                body += _zstd_block(1, len(chunk), last) + (chunk[:1] or b"\0")
            else:       # raw literals, no sequences
                n = len(chunk)
                lit = bytes([n << 3]) if n < 32 else (
                    struct.pack("<H", (n << 4) | 0b0100) if n < 4096
                    else ((n << 4) | 0b1100).to_bytes(3, "little"))
                content = lit + chunk + b"\0" + bytes(rng.randrange(1, 40) if rng.random() < 0.3
                                                       else 0)
                body += _zstd_block(2, len(content), last) + content
        if head[4] & 0x04:
            body += rng.randbytes(4)
        section = head + body
    edit = rng.random()
    damaged = bytearray(section)
    if edit < 0.4 and damaged:
        for _ in range(rng.choice([1, 1, 2])):
            damaged[rng.randrange(len(damaged))] ^= 1 << rng.randrange(8)
    elif edit < 0.5 and damaged:
        del damaged[rng.randrange(len(damaged)):]
    return section, bytes(damaged), valid


def test_zstd_answers_do_not_depend_on_the_libzstd_release(cpp: Conformance) -> None:
    """Differential: seeded zstd frames and damaged copies through C++ (the system libzstd) and
    Python (zstandard's bundled libzstd), held to the rule of docs/wire-format.md ("Which frames
    libzstd decides", `agree`): the same answer, except that damaged compressed content without
    the frame checksum may be accepted by one release and refused by the other, or decoded to
    different ids. The same damage done to a frame written with checksum=True is refused by
    both alike (check 16), and a section zstandard wrote, undamaged, gets the same answer in
    both: its ids, or the same refusal (a section that expands more than 64x)."""
    rng = random.Random(20261201)
    seen: collections.Counter[str] = collections.Counter()
    for _ in range(1500):
        n = rng.choice([0, 1, 3, 10, 50, 110, 200, 1000, 5000])
        width = rng.choice([1, 2, 3, 8, 16])
        ids = [rng.randrange(1 << width) for _ in range(n)]
        if n and rng.random() < 0.5:
            ids = [ids[0]] * n
        plain_frame = tokenwire.encode(ids, codec="packed")
        written, section, valid = _random_zstd_section(rng, plain_frame[16:])
        header = plain_frame[:7] + b"\x04" + plain_frame[8:16]
        frame = header + struct.pack("<Q", len(section)) + section
        py = python_outcome(frame, many=False)
        cc = cpp_outcome(cpp, frame, many=False)
        seen[py[0]] += 1
        assert agree(frame, py, cc), (frame.hex(), py, cc)
        if libzstd_text(py) != libzstd_text(cc):
            seen["libzstd releases differ"] += 1
        if valid and section == written:        # valid zstd data: the same answer everywhere
            assert py == cc and py in (("ok", [ids]), ("wire", py[1])), (frame.hex(), py, cc)
            seen["valid"] += py[0] == "ok"
        # The frame as checksum=True writes it (the CRC over the section written), then the
        # damage: refused alike. (Undamaged, it is the section written, checksummed: the rule.)
        sealed = header[:7] + b"\x05" + header[8:] + struct.pack("<Q", len(written)) + written
        sealed += struct.pack("<I", tokenwire._core._crc32c(sealed))
        sealed = sealed[:24] + section + sealed[24 + len(written):]
        py, cc = python_outcome(sealed, many=False), cpp_outcome(cpp, sealed, many=False)
        if section != written:
            assert libzstd_text(py) == libzstd_text(cc), (sealed.hex(), py, cc)
            # refused before libzstd sees it: by the checksum (16), or an earlier check
            assert not libzstd_decided(sealed, py), (sealed.hex(), py)
            seen["checksum"] += py[0] == "checksum"
        assert agree(sealed, py, cc), (sealed.hex(), py, cc)
    # The generator reaches every case, many times.
    assert seen["ok"] > 200 and seen["wire"] > 200, seen
    assert seen["valid"] > 100 and seen["checksum"] > 200, seen


# ---------------------------------------------------------------------------------------------
# Memory another thread writes


def test_decode_many_reads_the_count_table_once(cpp_build_dir: pathlib.Path) -> None:
    """A thread flips a valid frame's count table between [N, 0] and [0, N] while decode_many
    and frame_info run on it: each result is one of the two tables (or a refusal of a torn
    read), never [N, N] -- 2N ids read from an N-id payload, past the frame (under .ci/run's
    AddressSanitizer build: a heap-buffer-overflow report and a nonzero exit)."""
    exe = compile_race_count_table(cpp_build_dir)
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=WAIT_S)
    assert r.returncode == 0, r.stdout + r.stderr
    word, decodes, first, second, refused = r.stdout.split()
    assert word == "ok"
    # The writer really raced the decoder: both tables were decoded, many times.
    assert int(first) > 0 and int(second) > 0, r.stdout


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
