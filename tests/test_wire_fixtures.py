"""Golden frames: every committed v1 frame decodes to exactly its ids, forever (STYLE.md lesson 8).

The frames and manifest.json are written by tests/fixtures/make_fixtures.py; see its docstring.
"""

from __future__ import annotations

import json
import os
import pathlib
import re

import pytest

import tokenwire
from strategies import (
    ALL_WIRE_ERROR_KINDS,
    WIRE_ERROR_KINDS_WITHOUT_FIXTURE,
    wire_error_kind,
)

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
MANIFEST = json.loads((FIXTURES / "manifest.json").read_text())


def _has_zstd() -> bool:
    try:
        import zstandard  # noqa: F401
    except ImportError:
        return False
    return True


def test_manifest_covers_the_format() -> None:
    infos = [tokenwire.frame_info((FIXTURES / f"{name}.bin").read_bytes()) for name in MANIFEST]
    assert {i.codec for i in infos} == {"raw", "u16", "packed"}
    assert {i.checksum for i in infos} == {True, False}
    assert {i.multi for i in infos} == {True, False}
    assert any(sum(i.counts) == 0 for i in infos)
    assert any(i.compression == "zstd" for i in infos) or not _has_zstd()


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_golden_frame_decodes(name: str) -> None:
    case = MANIFEST[name]
    frame = (FIXTURES / f"{name}.bin").read_bytes()
    info = tokenwire.frame_info(frame)
    if info.compression == "zstd" and not _has_zstd():
        pytest.skip("zstandard not installed")
    seqs = case["sequences"]
    assert info.version == 1
    assert info.nbytes == len(frame)
    assert list(info.counts) == [len(s) for s in seqs] or (not info.multi and seqs == [[]])
    decoded = tokenwire.decode_many(frame)
    assert [v.tolist() for v in decoded] == seqs
    if case["kind"] == "one":
        assert tokenwire.decode(frame).tolist() == seqs[0]
    if case["reencode_exact"]:
        if case["kind"] == "one":
            again = tokenwire.encode(seqs[0], **case["kwargs"])
        else:
            again = tokenwire.encode_many(seqs, **case["kwargs"])
        assert again == frame, "encoder output changed: a v1 wire-format break"


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
    if error is None or not isinstance(error, getattr(tokenwire, str(expected["error"]))):
        return False
    if expected.get("match") == "prefix":
        return str(error).startswith(str(expected["message"]))
    return str(error) == expected["message"]


@pytest.mark.parametrize("name", sorted(INVALID_MANIFEST))
def test_negative_fixture_fails_with_its_exact_message(name: str) -> None:
    case = INVALID_MANIFEST[name]
    frame = (INVALID / f"{name}.bin").read_bytes()
    if frame[7:8] and frame[7] & 0x04 and not _has_zstd() and not os.environ.get("CI"):
        pytest.skip("zstandard not installed")
    for fn_name, fn in ENTRY_POINTS.items():
        kwargs = case["kwargs"] if fn_name != "frame_info" else {}
        error = None
        try:
            fn(frame, **kwargs)
        except Exception as e:  # noqa: BLE001 - compared with the manifest below
            error = e
        assert expected_outcome_matches(case[fn_name], error), (fn_name, case[fn_name], error)
        if error is not None:
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


#: Where the decoders build their messages: the Cython extension and the C++ header.
DECODER_SOURCES = [*sorted((ROOT / "tokenwire").glob("*.p[xy][xi]")),
                   ROOT / "tokenwire" / "include" / "tokenwire" / "wire.hpp"]
# The first literal piece of every message a decoder raises: `_wire_error(f"...`,
# `WireFormatError("...`, `ChecksumError(f"...`, and the C++ header's `fail("...`.
_MESSAGE_SITE = re.compile(
    r"(?:_wire_error|WireFormatError|ChecksumError|checksum_error|\bfail)\(\s*"
    r"(?:std::string\()?f?\"([^\"{]*)")


def test_every_decoder_message_belongs_to_a_listed_rule() -> None:
    """A rejection rule added to either decoder without a kind in tests/strategies.py (and so
    without a negative fixture) fails here."""
    pieces = set()
    for path in DECODER_SOURCES:
        pieces.update(m for m in _MESSAGE_SITE.findall(path.read_text()) if m)
    assert len(pieces) >= 20, f"found only {sorted(pieces)}: did the decoders move?"
    # a literal piece either starts with a kind or is the start of one ("truncated: {what}")
    unlisted = [p for p in pieces
                if not any(p.startswith(k) or k.startswith(p) for k in ALL_WIRE_ERROR_KINDS)]
    assert not unlisted, f"messages of no kind in tests/strategies.py: {unlisted}"


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
