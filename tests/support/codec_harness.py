"""The checks every codec passes, by codec name: tests/test_codecs.py runs each of them for every
name of tokenwire._core.CODECS, so a new entry of the codec table (frame.h's tw_codecs, read as
tokenwire._core.CODEC_TABLE) is tested here without an edit.

- round trips: `check_round_trip`, `check_round_trip_many` (ids from the codec's range,
  support.strategies.ids_for_codec), and `check_unaligned`: a frame read at every address
  modulo 8, odd ones included;
- bounds: `outside_ids` / `check_bounds`, an id just outside the codec's range refused by a
  forced codec with the documented class and message (docs/wire-format.md, "Encoder rules"),
  from a list and from a writable int32 array;
- damage: `sample_frames` (valid frames of the codec), `check_truncations`, `check_bit_flips`,
  `check_damage` (tests/support/frame_damage.py's edits);
- golden frames: `golden_fixtures`, the committed frames of tests/fixtures/manifest.json of the
  codec, checked as tests/test_wire_fixtures.py checks every one;
- C++ agreement: `check_cpp_round_trip`, `check_cpp_damage` (tests/test_cpp_wire.py's rules).
"""

from __future__ import annotations

import importlib.util
import json
import pathlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import tokenwire
import tokenwire._core
from tokenwire import WireFormatError
from tokenwire.errors import TokenIdError, TokenIdOverflowError

from support.cpp_agreement import assert_agree, assert_same_frame, damaged_variants
from support.frame_damage import Chooser, damage
from support.strategies import BOUNDARY_IDS, CODEC_RANGES, CODECS, INT32_MAX, INT32_MIN

FIXTURES = pathlib.Path(__file__).resolve().parent.parent / "fixtures"
MANIFEST: dict[str, Any] = json.loads((FIXTURES / "manifest.json").read_text())

#: Every codec `encode` accepts here (tokenwire._core.CODECS; "zstd" where zstandard is installed).
HARNESS_CODECS = list(CODECS)
#: The wire codecs by name: their records of the codec table.
WIRE_CODECS = {spec.name: spec for spec in tokenwire._core.CODEC_TABLE}


def _seqs(out: object) -> list[list[int]]:
    return [v.tolist() for v in out]


# ---------------------------------------------------------------------------------------------
# Round trips


def _check_header(codec: str, frame: bytes, counts: tuple[int, ...], checksum: bool,
                  multi: bool) -> None:
    info = tokenwire.frame_info(frame)
    assert info.nbytes == len(frame) and info.counts == counts
    assert info.checksum == checksum and info.multi == multi
    spec = WIRE_CODECS.get(codec)
    if spec is not None:            # a wire codec is what the frame says, at a width it allows
        assert frame[5] == spec.wire_id and info.codec == codec
        assert spec.min_width <= info.width <= spec.max_width
        assert info.compression is None


def check_round_trip(codec: str, ids: list[int], checksum: bool) -> bytes:
    """`ids` through encode(codec=) and back through decode, decode_many and frame_info."""
    frame = tokenwire.encode(ids, codec=codec, checksum=checksum)
    # A writable int32 buffer is copied and scanned in one pass (not converted): the same frame.
    assert tokenwire.encode(np.array(ids, np.int32), codec=codec, checksum=checksum) == frame
    out = tokenwire.decode(frame)
    assert type(out) is tokenwire.TokenVector and out.tolist() == ids
    assert _seqs(tokenwire.decode_many(frame)) == [ids]
    _check_header(codec, frame, (len(ids),), checksum, multi=False)
    return frame


def check_round_trip_many(codec: str, seqs: list[list[int]], checksum: bool) -> bytes:
    """`seqs` through encode_many(codec=) and back through decode_many and frame_info."""
    frame = tokenwire.encode_many(seqs, codec=codec, checksum=checksum)
    assert _seqs(tokenwire.decode_many(frame)) == seqs
    _check_header(codec, frame, tuple(len(s) for s in seqs), checksum, multi=True)
    return frame


def check_unaligned(frame: bytes, seqs: list[list[int]]) -> None:
    """`frame` read where it lies at each of 8 consecutive offsets into a larger buffer, so at
    every address modulo 8 whatever the allocator aligns (odd addresses included, where a
    2-byte or 4-byte load is unaligned): decode_many (and decode, for a single-sequence frame)
    give `seqs`, from bytes (which the raw codec views in place) and from a bytearray."""
    multi = tokenwire.frame_info(frame).multi
    for offset in range(8):
        for padded in (b"x" * offset + frame, bytearray(b"x" * offset + frame)):
            view = memoryview(padded)[offset:]
            assert _seqs(tokenwire.decode_many(view)) == seqs, f"frame at offset {offset}"
            if not multi:
                assert tokenwire.decode(view).tolist() == seqs[0], f"frame at offset {offset}"


# ---------------------------------------------------------------------------------------------
# Bounds


def outside_ids(codec: str) -> list[tuple[int, type[Exception], str, str]]:
    """The ids just outside `codec`'s range, each with what a forced codec raises for it: the
    class, and the start of the message of encode([lo, id]) and of encode_many([[lo], [lo, id]]).
    Inside int32 that is the codec's misfit (a TokenIdError, so a ValueError, naming the codec
    and its range, then the sequence); outside int32, what every codec says of such an id."""
    lo, hi = CODEC_RANGES[codec]
    cases = []
    for bad in (lo - 1, hi + 1):
        if INT32_MIN <= bad <= INT32_MAX:
            head = f"codec '{codec}' needs ids in {WIRE_CODECS[codec].id_range}; "
            tail = f"id at index 1 is {bad}"
            cases.append((bad, TokenIdError, head + tail, head + "sequence 1: " + tail))
        else:
            text = f"token id at index 1 is {bad}, outside int32"
            cases.append((bad, TokenIdOverflowError, text, "sequence 1: " + text))
    return cases


def _raised(call: Any) -> Exception:
    try:
        call()
    except Exception as e:  # noqa: BLE001 - the caller compares it
        return e
    raise AssertionError("no exception")


def check_bounds(codec: str) -> None:
    """The range's ends encode with the codec forced; one past either end is refused, by encode
    and by encode_many (which names the sequence), with the class and message above."""
    lo, hi = CODEC_RANGES[codec]
    check_round_trip(codec, [lo, hi, lo], checksum=False)
    check_round_trip_many(codec, [[hi], [lo]], checksum=True)
    for bad, error, one, many in outside_ids(codec):
        e = _raised(lambda: tokenwire.encode([lo, bad], codec=codec))
        assert type(e) is error and str(e).startswith(one), (codec, bad, e)
        if error is TokenIdError:       # in int32: also from a writable int32 buffer
            e = _raised(lambda: tokenwire.encode(np.array([lo, bad], np.int32), codec=codec))
            assert type(e) is error and str(e).startswith(one), (codec, bad, e)
        e = _raised(lambda: tokenwire.encode_many([[lo], [lo, bad]], codec=codec))
        assert type(e) is error and str(e).startswith(many), (codec, bad, e)


# ---------------------------------------------------------------------------------------------
# Damaged frames


def sample_ids(codec: str, n: int = 300) -> list[int]:
    """`n` ids `codec` holds: its boundary ids, then a spread over its range (more than one pfor
    block, both ends of the range included)."""
    lo, hi = CODEC_RANGES[codec]
    ids = [b for b in BOUNDARY_IDS if lo <= b <= hi] + [lo, hi]
    step = (hi - lo) // 97
    ids += [lo + (i * 37 % 97) * step for i in range(97)]
    ids += [max(lo, 0) + i % 1000 for i in range(n - len(ids))]   # small ids: narrow widths
    return ids[:n]


def sample_frames(codec: str) -> Iterator[tuple[bytes, list[list[int]], bool]]:
    """Valid frames of `codec`: (frame, its sequences, checksummed), one and many sequences."""
    ids = sample_ids(codec)
    for checksum in (False, True):
        yield tokenwire.encode(ids, codec=codec, checksum=checksum), [ids], checksum
        seqs = [ids[:130], [], ids[130:]]
        yield tokenwire.encode_many(seqs, codec=codec, checksum=checksum), seqs, checksum


def _outcome(frame: bytes) -> list[list[int]] | None:
    """decode_many's ids, or None for a WireFormatError (any other exception propagates)."""
    try:
        return _seqs(tokenwire.decode_many(frame))
    except WireFormatError:
        return None


def check_truncations(frame: bytes) -> None:
    """Every strict prefix of a valid frame is refused with a WireFormatError."""
    for n in range(len(frame)):
        assert _outcome(frame[:n]) is None, f"a frame cut to {n} of {len(frame)} bytes decoded"


def check_bit_flips(frame: bytes, checksum: bool) -> None:
    """Every single-bit flip of a valid frame: a checksummed frame is refused with a
    WireFormatError; any other decodes to ids or is refused, never anything else."""
    for i in range(len(frame)):
        for bit in range(8):
            bad = frame[:i] + bytes([frame[i] ^ (1 << bit)]) + frame[i + 1:]
            out = _outcome(bad)
            if checksum:
                assert out is None, f"byte {i} bit {bit} flipped: decoded {out!r:.80}"


def check_damage(frame: bytes, chooser: Chooser) -> None:
    """A valid frame after frame_damage.py's edits: ids or a WireFormatError (never another
    exception), and ids that decode re-encode to a frame of the same ids."""
    bad = damage(frame, chooser)
    for fn in (tokenwire.decode, tokenwire.decode_many):
        try:
            out = fn(bad)
        except WireFormatError:
            continue
        seqs = [out] if isinstance(out, tokenwire.TokenVector) else out
        for v in seqs:
            assert tokenwire.decode(tokenwire.encode(v)).tolist() == v.tolist()


# ---------------------------------------------------------------------------------------------
# Golden frames (tests/fixtures/manifest.json)


def golden_fixtures(codec: str) -> list[str]:
    """The golden frames of `codec`: those whose header names it (a wire codec, or "zstd" as
    the compression) and those written by requesting it ("auto" and "zstd" among them)."""
    names = []
    for name, case in sorted(MANIFEST.items()):
        info = tokenwire.frame_info((FIXTURES / f"{name}.bin").read_bytes())
        if codec in (info.codec, info.compression, case["kwargs"].get("codec", "auto")):
            names.append(name)
    return names


def has_zstandard() -> bool:
    """Whether Python can read zstd frames here (the `zstd` extra is installed)."""
    return importlib.util.find_spec("zstandard") is not None


def check_golden_frame(name: str) -> None:
    """The committed frame `name` decodes to its sequences, and where the manifest says so the
    encoder writes it again byte for byte (tests/test_wire_fixtures.py runs it for every frame)."""
    case = MANIFEST[name]
    frame = (FIXTURES / f"{name}.bin").read_bytes()
    info = tokenwire.frame_info(frame)
    if info.compression == "zstd" and not has_zstandard():
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


# ---------------------------------------------------------------------------------------------
# C++ agreement (tests/support/cpp_harness.py's conformance server)


def check_cpp_round_trip(cpp: Any, codec: str, seqs: list[list[int]], multi: bool,
                         checksum: bool) -> None:
    """C++ encodes `seqs` with `codec` to the frame Python writes (zstd: the same ids where the
    libzstd releases differ), decodes Python's frame to the same ids, and both agree on it."""
    if multi:
        frame = tokenwire.encode_many(seqs, codec=codec, checksum=checksum)
        assert_same_frame(cpp, cpp.encode_many(seqs, codec, checksum), frame)
    else:
        frame = tokenwire.encode(seqs[0], codec=codec, checksum=checksum)
        assert_same_frame(cpp, cpp.encode(seqs[0], codec, checksum), frame)
    assert cpp.decode_many(frame)[0] == seqs
    assert_agree(cpp, frame)


def check_cpp_damage(cpp: Any, frame: bytes) -> None:
    """C++ and Python answer alike (same ids, or same class and message) for the cuts and bit
    flips of a valid frame that tests/test_cpp_wire.py makes of every golden frame."""
    for bad in damaged_variants(frame):
        assert_agree(cpp, bad)


def check_cpp_misfit(cpp: Any, codec: str) -> None:
    """C++ refuses an int32 id outside a forced codec's range with Python's class and message
    (the conformance server takes int32 ids only: ids outside int32 are Python's alone)."""
    lo = CODEC_RANGES[codec][0]
    for bad, error, _, _ in outside_ids(codec):
        if error is not TokenIdError:
            continue
        py = _raised(lambda: tokenwire.encode([lo, bad], codec=codec))
        cc = _raised(lambda: cpp.encode([lo, bad], codec))
        assert (cc.kind, cc.message) == ("invalid", str(py))
        py = _raised(lambda: tokenwire.encode_many([[lo], [lo, bad]], codec=codec))
        cc = _raised(lambda: cpp.encode_many([[lo], [lo, bad]], codec))
        assert (cc.kind, cc.message) == ("invalid", str(py))
