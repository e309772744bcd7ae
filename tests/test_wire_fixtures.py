"""Golden frames: every committed v1 frame decodes to exactly its ids, forever;
negative fixtures: every damaged frame fails with exactly the class and message its manifest
says; and the spec (docs/wire-format.md) describes both.

The frames and manifest.json are written by tests/fixtures/make_fixtures.py, the negative ones
by tests/fixtures/make_invalid_fixtures.py; see their docstrings.
"""

from __future__ import annotations

import builtins
import json
import pathlib
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

import tokenwire
from support import codec_harness as harness
from support.strategies import (
    ALL_WIRE_ERROR_KINDS,
    WIRE_ERROR_KINDS_WITHOUT_FIXTURE,
    ids_for_codec,
    wire_error_kind,
)

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
MANIFEST = json.loads((FIXTURES / "manifest.json").read_text())


def test_manifest_covers_the_format() -> None:
    infos = [tokenwire.frame_info((FIXTURES / f"{name}.bin").read_bytes()) for name in MANIFEST]
    assert {i.codec for i in infos} == set(tokenwire._core.CODECS) - {"auto", "zstd"}
    assert {i.checksum for i in infos} == {True, False}
    assert {i.multi for i in infos} == {True, False}
    assert any(sum(i.counts) == 0 for i in infos)
    assert any(i.compression == "zstd" for i in infos) or not harness.has_zstandard()


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_golden_frame_decodes(name: str) -> None:
    harness.check_golden_frame(name)


def test_known_bytes_of_a_small_frame() -> None:
    # Pinned by hand from docs/wire-format.md's worked example, independent of the fixture files.
    frame = tokenwire.encode([1, 2, 3])
    assert frame == bytes.fromhex("54574952 01 02 02 00 0300000000000000 39".replace(" ", ""))


# ---------------------------------------------------------------------------------------------
# Negative fixtures: one damaged frame per rejection rule, the exact exception and message each
# must produce (tests/fixtures/invalid/, written by tests/fixtures/make_invalid_fixtures.py).
# The same manifest is the conformance suite for every other decoder (tests/test_cpp_wire.py).

INVALID = FIXTURES / "invalid"
INVALID_MANIFEST = json.loads((INVALID / "manifest.json").read_text())
ENTRY_POINTS = {"decode": tokenwire.decode, "decode_many": tokenwire.decode_many,
                "frame_info": tokenwire.frame_info}


def expected_outcome_matches(expected: dict[str, object], error: BaseException | None) -> bool:
    """Whether an entry point's outcome (None: it returned) is the manifest's `expected`."""
    if "ok" in expected:
        return error is None
    if error is None:
        return False
    cls = getattr(tokenwire.errors, str(expected["error"]), None)
    if cls is None:        # a built-in class (an argument error): exactly it, not a subclass
        if type(error) is not getattr(builtins, str(expected["error"])):
            return False
    elif not isinstance(error, cls):
        return False
    if expected.get("match") == "prefix":
        return str(error).startswith(str(expected["message"]))
    return str(error) == expected["message"]


@pytest.mark.parametrize("name", sorted(INVALID_MANIFEST))
def test_negative_fixture_fails_with_its_exact_message(name: str) -> None:
    case = INVALID_MANIFEST[name]
    frame = (INVALID / f"{name}.bin").read_bytes()
    if frame[7:8] and frame[7] & 0x04 and not harness.has_zstandard():
        pytest.skip("zstandard not installed")
    for fn_name, fn in ENTRY_POINTS.items():
        kwargs = case["kwargs"] if fn_name != "frame_info" else {}
        error = None
        try:
            fn(frame, **kwargs)
        except Exception as e:  # noqa: BLE001 - compared with the manifest below
            error = e
        assert expected_outcome_matches(case[fn_name], error), (fn_name, case[fn_name], error)
        if error is not None and hasattr(tokenwire.errors, case[fn_name]["error"]):
            # every rejection is a WireFormatError (so a ValueError), whatever subclass it is
            assert isinstance(error, tokenwire.WireFormatError) and isinstance(error, ValueError)


def test_every_rejection_rule_has_a_negative_fixture() -> None:
    rules = {case["rule"] for case in INVALID_MANIFEST.values()}
    assert rules <= set(ALL_WIRE_ERROR_KINDS), rules - set(ALL_WIRE_ERROR_KINDS)
    missing = set(ALL_WIRE_ERROR_KINDS) - set(WIRE_ERROR_KINDS_WITHOUT_FIXTURE) - rules
    assert not missing, f"rejection rules without a negative fixture: {sorted(missing)}"
    for name, case in INVALID_MANIFEST.items():
        messages = [case[f]["message"] for f in ENTRY_POINTS if "message" in case[f]]
        assert messages and all(wire_error_kind(m) for m in messages), name
        assert any(wire_error_kind(m) == case["rule"] for m in messages), name


def _decoder_sources() -> list[pathlib.Path]:
    """Where the decoders build their messages: the Cython sources (an installed tokenwire
    ships them beside the extension; a source tree has them in tokenwire/), the C header both
    decoders share (frame.h: the header, count-table and frame checks), then the C++ header.
    Not _wires.pxi: it reads other formats' arrays (tokenwire.wires), not frames; its messages
    are tests/test_wires.py's."""
    for package in (pathlib.Path(tokenwire.__file__).parent, ROOT / "tokenwire"):
        cython = sorted(p for p in [*package.glob("*.pyx"), *package.glob("*.pxi")]
                        if p.name != "_wires.pxi")
        if cython:
            break
    include = pathlib.Path(tokenwire.get_include()) / "tokenwire"
    return [*cython, include / "frame.h", include / "wire.hpp"]


DECODER_SOURCES = _decoder_sources()
# The first literal piece of every message a decoder raises: `WireFormatError(f"...` or
# `WireFormatError("...`, `ChecksumError(f"...`, the C++ header's `fail("...`, and frame.h's
# `snprintf(msg, cap, "...` (up to the first conversion).
_MESSAGE_SITE = re.compile(
    r"(?:(?:WireFormatError|ChecksumError|checksum_error|\bfail)\(\s*"
    r"(?:std::string\()?f?|snprintf\(msg, cap,\s*)\"([^\"{%]*)")


def test_every_decoder_message_belongs_to_a_listed_rule() -> None:
    """A rejection rule added to either decoder without a kind in tests/support/strategies.py (and so
    without a negative fixture) fails here."""
    pieces = set()
    for path in DECODER_SOURCES:
        pieces.update(m for m in _MESSAGE_SITE.findall(path.read_text()) if m)
    assert len(pieces) >= 20, f"found only {sorted(pieces)}: did the decoders move?"
    # a literal piece either starts with a kind or is the start of one ("truncated: {what}")
    unlisted = [p for p in pieces
                if not any(p.startswith(k) or k.startswith(p) for k in ALL_WIRE_ERROR_KINDS)]
    assert not unlisted, f"messages of no kind in tests/support/strategies.py: {unlisted}"


def test_every_python_message_site_has_a_negative_fixture() -> None:
    """Finer than the kinds: each message the Python decoder can build (each `raise` site, by
    its literal start) begins some negative fixture's message."""
    pieces = set()
    for path in DECODER_SOURCES[:-1]:
        pieces.update(m for m in _MESSAGE_SITE.findall(path.read_text()) if m)
    messages = [re.sub(r"^sequence \d+: ", "", case[f]["message"])
                for case in INVALID_MANIFEST.values() for f in ENTRY_POINTS
                if "message" in case[f]]
    untested = [p for p in pieces if not any(m.startswith(p) for m in messages)
                and not any(p.startswith(k) for k in WIRE_ERROR_KINDS_WITHOUT_FIXTURE)]
    assert not untested, f"decoder messages no negative fixture produces: {untested}"


# ---------------------------------------------------------------------------------------------
# The spec's table of messages (docs/wire-format.md, "Decoding rules") describes every message
# the negative fixtures pin: an outsider implementing from the text alone produces them.

_PLACEHOLDER = re.compile(
    r"0x%08x|0xNN|b'…'|…|(?<![A-Za-z])n(?: − (?:off|E|16))?(?: − 8)?(?![A-Za-z])|"
    r"(?<![A-Za-z'])[A-Z]{1,2}(?![A-Za-z'])"
)
_PLACEHOLDER_REGEX = {"0x%08x": "0x[0-9a-f]{8}", "0xNN": "0x[0-9a-f]{2}", "b'…'": "b'.*'",
                      "…": ".*"}


def spec_message_patterns(rows: list[str] | None = None) -> list[re.Pattern[str]]:
    """Each message of the spec's decoding-rules table (or of `rows` of it) as a regex
    (placeholders: numbers)."""
    if rows is None:
        text = (ROOT / "docs" / "wire-format.md").read_text()
        rows = [line for line in text.splitlines() if re.match(r"\| \d+ \|", line)]
    patterns = []
    for row in rows:
        message_column = row.split(" | ", 2)[2]
        for code in re.findall(r"`([^`]+)`", message_column):
            out, pos = [], 0
            for m in _PLACEHOLDER.finditer(code):
                out.append(re.escape(code[pos:m.start()]))
                out.append(_PLACEHOLDER_REGEX.get(m.group(), r"-?\d+"))
                pos = m.end()
            out.append(re.escape(code[pos:]))
            patterns.append(re.compile("".join(out)))
    return patterns


def test_spec_table_describes_every_negative_fixture_message() -> None:
    patterns = spec_message_patterns()
    assert len(patterns) >= 25, [p.pattern for p in patterns]
    for name, case in INVALID_MANIFEST.items():
        for fn_name in ENTRY_POINTS:
            expected = case[fn_name]
            if "message" not in expected or not hasattr(tokenwire.errors, expected["error"]):
                continue        # the table lists frame errors; an argument error is not one
            message = re.sub(r"^sequence \d+: ", "", expected["message"])
            match = re.Pattern.match if expected.get("match") == "prefix" else re.Pattern.fullmatch
            assert any(match(p, message) or (expected.get("match") == "prefix"
                                             and p.pattern.startswith(re.escape(message)))
                       for p in patterns), (name, fn_name, message)


# ---------------------------------------------------------------------------------------------
# The encoder rules and the acceptance rules of the spec that no fixture shows by itself.


@given(st.lists(ids_for_codec("auto", max_size=60), max_size=5), st.booleans())
def test_encode_many_uses_one_codec_and_width_for_all_sequences(seqs: list[list[int]],
                                                                 checksum: bool) -> None:
    many = tokenwire.encode_many(seqs, checksum=checksum)
    one = tokenwire.encode([i for s in seqs for i in s], checksum=checksum)
    table = ((4 * len(seqs) + 7) // 8) * 8
    assert many[5:7] == one[5:7]                            # codec and width
    assert many[7] == one[7] | 0x02                         # flags: MULTI added
    assert int.from_bytes(many[8:16], "little") == len(seqs)
    end = len(many) - (4 if checksum else 0)
    assert many[16 + table:end] == one[16:len(one) - (4 if checksum else 0)]


@given(ids_for_codec("zstd"), st.booleans())
def test_zstd_is_kept_only_when_8_plus_c_is_below_p(ids: list[int], checksum: bool) -> None:
    """The encoder's zstd rule (docs/wire-format.md): zstd level 1 over the u16 payload when u16
    holds every id, else over the raw one; kept when 8 + C < P (auto's plain payload) and the
    section expands at most 64x; when only the expansion fails, zstd over auto's payload by the
    same test; otherwise auto's frame."""
    zstandard = pytest.importorskip("zstandard")
    auto = tokenwire.encode(ids)
    p = len(auto) - 16
    inner = "u16" if all(0 <= i < 65536 for i in ids) else "raw"
    tries = [tokenwire.encode(ids, codec=inner)]
    if auto[5:7] != tries[0][5:7]:
        tries.append(auto)
    expected = auto[:7] + bytes([auto[7] | checksum]) + auto[8:]
    for plain in tries:
        comp = zstandard.ZstdCompressor(level=1, write_content_size=True).compress(plain[16:])
        if not 8 + len(comp) < p:
            break
        if len(plain) - 16 <= 64 * len(comp):
            expected = (plain[:7] + bytes([plain[7] | 0x04 | checksum]) + plain[8:16]
                        + len(comp).to_bytes(8, "little") + comp)
            break
    frame = tokenwire.encode(ids, codec="zstd", checksum=checksum)
    assert (frame[:-4] if checksum else frame) == expected


def test_a_zstd_section_that_saves_nothing_is_accepted() -> None:
    zstandard = pytest.importorskip("zstandard")
    ids = [5, 7, 9]
    plain = tokenwire.encode(ids, codec="packed")[16:]
    comp = zstandard.ZstdCompressor(level=3).compress(plain)
    assert 8 + len(comp) >= len(plain)
    frame = tokenwire.encode(ids, codec="packed")[:16]
    frame = frame[:7] + b"\x04" + frame[8:] + len(comp).to_bytes(8, "little") + comp
    assert tokenwire.decode(frame).tolist() == ids
    assert [v.tolist() for v in tokenwire.decode_many(frame)] == [ids]


def test_decode_many_reads_single_sequence_frames() -> None:
    assert [v.tolist() for v in tokenwire.decode_many(tokenwire.encode([3, 4]))] == [[3, 4]]
    assert [v.tolist() for v in tokenwire.decode_many(tokenwire.encode([]))] == [[]]
    assert tokenwire.decode_many(tokenwire.encode_many([])) == []


@pytest.mark.parametrize(("codec", "head"), [
    ("auto", "0020"), ("raw", "0020"), ("u16", "0110"), ("packed", "0201"), ("zstd", "0020")])
def test_forced_codecs_on_empty_input(codec: str, head: str) -> None:
    if codec == "zstd":
        pytest.importorskip("zstandard")
    frame = tokenwire.encode([], codec=codec)
    assert frame == bytes.fromhex("5457495201" + head + "00" + "00" * 8)


@pytest.mark.parametrize("name", sorted(n for n, c in MANIFEST.items()
                                        if c["kwargs"].get("codec") == "zstd"
                                        and n != "zstd_repeated"))
def test_zstd_fixtures_pin_the_encoders_header(name: str) -> None:
    """The compressed bytes depend on libzstd; the header the encoder writes (codec, width,
    flags, count) and the count table do not, for inputs far from its thresholds."""
    pytest.importorskip("zstandard")
    case = MANIFEST[name]
    frame = (FIXTURES / f"{name}.bin").read_bytes()
    if case["kind"] == "one":
        again = tokenwire.encode(case["sequences"][0], **case["kwargs"])
    else:
        again = tokenwire.encode_many(case["sequences"], **case["kwargs"])
    info = tokenwire.frame_info(frame)
    start = 16 + (((4 * len(info.counts) + 7) // 8) * 8 if info.multi else 0)
    assert again[:start] == frame[:start]
    assert info.compression == "zstd"


# ---------------------------------------------------------------------------------------------
# `tokenwire inspect` on every fixture: the header fields frame_info gives, the ids, "valid";
# on a negative fixture, the manifest's message (frame_info's when it fails, else decode_many's).


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_inspect_prints_each_golden_frame(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    from tokenwire import cli

    case = MANIFEST[name]
    path = FIXTURES / f"{name}.bin"
    frame = path.read_bytes()
    info = tokenwire.frame_info(frame)
    if info.compression == "zstd" and not harness.has_zstandard():
        pytest.skip("zstandard not installed")
    assert cli.main(["inspect", str(path), "--show", "100000"]) == 0
    lines = capsys.readouterr().out.splitlines()
    seqs = case["sequences"]
    total = sum(len(s) for s in seqs)
    assert lines[0] == f"frame:     {len(frame)} bytes, version 1"
    assert lines[1] == f"codec:     {info.codec}, {info.width} bits per id"
    counts = [len(s) for s in seqs] if info.multi else [total]
    assert lines[2] == (f"sequences: {len(counts)} ({', '.join(f'{c:,}' for c in counts)} ids; "
                        f"{total:,} in all)")
    assert lines[3] == f"checksum:  {'present, verified' if info.checksum else 'none'}"
    shown = [line for line in lines if line.startswith("  [")]
    assert shown == [f"  [{i}] [{', '.join(map(str, s))}]" for i, s in enumerate(seqs)]
    assert lines[-1] == "valid"


# inspect reads a frame as decode_many does: the frames only decode refuses (a MULTI frame) are
# not refused there.
@pytest.mark.parametrize("name", sorted(n for n, case in INVALID_MANIFEST.items()
                                        if "ok" not in case["decode_many"]
                                        and hasattr(tokenwire.errors,
                                                    case["decode_many"]["error"])))
def test_inspect_refuses_each_negative_frame(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    from tokenwire import cli

    case = INVALID_MANIFEST[name]
    path = INVALID / f"{name}.bin"
    frame = path.read_bytes()
    if frame[7:8] and frame[7] & 0x04 and not harness.has_zstandard():
        pytest.skip("zstandard not installed")
    argv = ["inspect", str(path)]
    if "vocab_size" in case["kwargs"]:
        argv += ["--vocab-size", str(case["kwargs"]["vocab_size"])]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    expected = case["frame_info"] if "error" in case["frame_info"] else case["decode_many"]
    head = f"tokenwire inspect: invalid frame ({len(frame)} bytes): {expected['message']}"
    if expected.get("match") == "prefix":
        assert err.startswith(head)
    else:
        assert err == head + "\n"


def _plain_payload(ids: list[int], codec: str, width: int) -> bytes:
    """The payload of `ids` at a codec and width, from "Codecs" (not from the encoder)."""
    if codec == "raw":
        return b"".join(i.to_bytes(4, "little", signed=True) for i in ids)
    if codec == "u16":
        return b"".join(i.to_bytes(2, "little") for i in ids)
    bits = sum(i << (k * width) for k, i in enumerate(ids))
    return bits.to_bytes((len(ids) * width + 7) // 8, "little")


@pytest.mark.parametrize("name", sorted(n for n in MANIFEST
                                        if (FIXTURES / f"{n}.bin").read_bytes()[7] & 0x04))
def test_libzstd_decodes_each_zstd_fixture_to_its_payload(name: str) -> None:
    """Every ZSTD golden frame's section is valid zstd data by libzstd's own decoder (the
    zstandard package's), not only by tokenwire's: the sections built from RFC 8878 by
    tests/fixtures/zstd_frames.py are known good outside tokenwire."""
    zstandard = pytest.importorskip("zstandard")
    frame = (FIXTURES / f"{name}.bin").read_bytes()
    info = tokenwire.frame_info(frame)
    start = 16 + (((4 * len(info.counts) + 7) // 8) * 8 if info.multi else 0)
    clen = int.from_bytes(frame[start:start + 8], "little")
    section = frame[start + 8:start + 8 + clen]
    ids = [i for seq in MANIFEST[name]["sequences"] for i in seq]
    assert zstandard.ZstdDecompressor().decompress(section) == _plain_payload(
        ids, info.codec, info.width)
