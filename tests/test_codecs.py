"""Every codec against one harness (tests/support/codec_harness.py), parametrized by the names of
tokenwire._core.CODECS: a codec added to the codec table (frame.h) is tested here as it is added.
Also the lists of codec names that cannot be read from the table at run time (the stubs' Literal
types, the test helpers' codec numbers): each is compared with the table, so one left behind
fails here."""

from __future__ import annotations

import ast
import pathlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

import tokenwire
import tokenwire._core
from support import codec_harness as harness
from support import cpp_harness, frame_damage
from support.frame_damage import DrawChooser
from support.strategies import CODEC_RANGES, ids_for_codec

CODECS = harness.HARNESS_CODECS


# ---------------------------------------------------------------------------------------------
# Round trips


@pytest.mark.parametrize("codec", CODECS)
@given(data=st.data())
def test_round_trip(codec: str, data: st.DataObject) -> None:
    harness.check_round_trip(codec, data.draw(ids_for_codec(codec)), data.draw(st.booleans()))


@pytest.mark.parametrize("codec", CODECS)
@given(data=st.data())
def test_round_trip_many(codec: str, data: st.DataObject) -> None:
    seqs = data.draw(st.lists(ids_for_codec(codec, max_size=50), max_size=6))
    harness.check_round_trip_many(codec, seqs, data.draw(st.booleans()))


@pytest.mark.parametrize("codec", CODECS)
def test_frames_decode_at_any_address(codec: str) -> None:
    for frame, seqs, _ in harness.sample_frames(codec):
        assert max(max(s) for s in seqs if s) > 255      # both bytes of a 2-byte id matter
        harness.check_unaligned(frame, seqs)


# ---------------------------------------------------------------------------------------------
# Bounds


@pytest.mark.parametrize("codec", CODECS)
def test_ids_just_outside_the_range_are_refused(codec: str) -> None:
    harness.check_bounds(codec)


def test_ranges_are_the_codec_tables() -> None:
    # The strategies read the table; the expected ranges are the spec's, written out here.
    int32 = (-(2**31), 2**31 - 1)
    spec_ranges = {"raw": int32, "u16": (0, 2**16 - 1), "packed": (0, 2**31 - 1), "pfor": int32}
    for spec in tokenwire._core.CODEC_TABLE:
        assert CODEC_RANGES[spec.name] == (spec.min_id, spec.max_id) == spec_ranges[spec.name]
    assert set(CODEC_RANGES) == set(tokenwire._core.CODECS)


# ---------------------------------------------------------------------------------------------
# Damaged frames


@pytest.mark.parametrize("codec", CODECS)
def test_truncated_frames_are_refused(codec: str) -> None:
    for frame, _, _ in harness.sample_frames(codec):
        harness.check_truncations(frame)


@pytest.mark.parametrize("codec", CODECS)
def test_bit_flips_are_refused_when_checksummed(codec: str) -> None:
    for frame, _, checksum in harness.sample_frames(codec):
        harness.check_bit_flips(frame, checksum)


@pytest.mark.parametrize("codec", CODECS)
@given(data=st.data())
def test_damaged_frames_give_ids_or_wire_format_error(codec: str, data: st.DataObject) -> None:
    checksum = data.draw(st.booleans())
    if data.draw(st.booleans()):
        seqs = data.draw(st.lists(ids_for_codec(codec, max_size=60), max_size=5))
        frame = tokenwire.encode_many(seqs, codec=codec, checksum=checksum)
    else:
        ids = data.draw(ids_for_codec(codec, max_size=200))
        frame = tokenwire.encode(ids, codec=codec, checksum=checksum)
    harness.check_damage(frame, DrawChooser(data.draw))


# ---------------------------------------------------------------------------------------------
# Golden frames: each codec's share of tests/fixtures/manifest.json, checked as
# tests/test_wire_fixtures.py checks every frame (harness.check_golden_frame)


@pytest.mark.parametrize("codec", CODECS)
def test_golden_frames_decode(codec: str) -> None:
    names = harness.golden_fixtures(codec)
    assert names, f"no golden frame of codec {codec!r} (tests/fixtures/make_fixtures.py)"
    for name in names:
        harness.check_golden_frame(name)


# ---------------------------------------------------------------------------------------------
# C++ agreement (the session's conformance server, `cpp` of tests/conftest.py)


@pytest.mark.integration
@pytest.mark.parametrize("codec", CODECS)
@given(data=st.data())
def test_cpp_agrees(cpp: cpp_harness.Conformance, codec: str, data: st.DataObject) -> None:
    multi = data.draw(st.booleans())
    if multi:
        seqs = data.draw(st.lists(ids_for_codec(codec, max_size=60), max_size=5))
    else:
        seqs = [data.draw(ids_for_codec(codec))]
    harness.check_cpp_round_trip(cpp, codec, seqs, multi, data.draw(st.booleans()))


@pytest.mark.integration
@pytest.mark.parametrize("codec", CODECS)
def test_cpp_agrees_on_damaged_frames_and_misfits(cpp: cpp_harness.Conformance,
                                                  codec: str) -> None:
    for frame, _, _ in harness.sample_frames(codec):
        harness.check_cpp_damage(cpp, frame)
    harness.check_cpp_misfit(cpp, codec)


# ---------------------------------------------------------------------------------------------
# The lists of codec names that cannot read the codec table


def _stub() -> ast.Module:
    return ast.parse((pathlib.Path(tokenwire.__file__).parent / "_core.pyi").read_text())


def _literal(node: ast.expr | None) -> tuple[object, ...]:
    assert isinstance(node, ast.Subscript) and ast.unparse(node.value) == "Literal", node
    elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    return tuple(ast.literal_eval(e) for e in elts)


def test_the_stubs_codec_literal_is_codecs() -> None:
    """tokenwire/_core.pyi's `_Codec` (encode's codec=) lists tokenwire._core.CODECS."""
    [value] = [n.value for n in _stub().body if isinstance(n, ast.Assign)
               and [ast.unparse(t) for t in n.targets] == ["_Codec"]]
    assert _literal(value) == tokenwire._core.CODECS


def test_the_stubs_frame_info_codec_literal_is_the_table() -> None:
    """FrameInfo.codec's Literal in tokenwire/_core.pyi lists the codec table's names."""
    [cls] = [n for n in _stub().body if isinstance(n, ast.ClassDef) and n.name == "FrameInfo"]
    [prop] = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "codec"]
    assert _literal(prop.returns) == tuple(s.name for s in tokenwire._core.CODEC_TABLE)


def test_the_test_helpers_codec_numbers_follow_the_table() -> None:
    """tests/support/cpp_harness.py numbers every codec for the conformance server (its
    tests/cpp/conformance.cpp maps them to tokenwire::Codec; a wrong entry there makes
    test_cpp_agrees fail), and frame_damage.py knows pfor's wire id."""
    assert set(cpp_harness.CODEC_IDS) - {None} == set(tokenwire._core.CODECS)
    names = [s.name for s in tokenwire._core.CODEC_TABLE]
    assert frame_damage.CODEC_PFOR == names.index("pfor")


def test_codec_table_records() -> None:
    table = tokenwire._core.CODEC_TABLE
    assert tokenwire._core.CODECS == ("auto", *(s.name for s in table), "zstd")
    for wire_id, spec in enumerate(table):
        assert spec.wire_id == wire_id and spec.min_width <= spec.max_width <= 32
        assert -(2**31) <= spec.min_id <= spec.max_id <= 2**31 - 1
        assert spec.id_range.startswith(f"[{spec.min_id}, ")
    with pytest.raises((AttributeError, TypeError)):
        table[0].name = "other"  # type: ignore[misc]
