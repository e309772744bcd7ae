"""Golden frames: every committed v1 frame decodes to exactly its ids, forever (STYLE.md lesson 8).

The frames and manifest.json are written by tests/fixtures/make_fixtures.py; see its docstring.
"""

from __future__ import annotations

import json
import pathlib

import pytest

import tokenwire

FIXTURES = pathlib.Path(__file__).resolve().parent / "fixtures"
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
