"""atheris fuzz target for tokenwire.decode / decode_many / frame_info (not part of pytest).

    python fuzz/fuzz_decode.py --seconds 60                 # against the installed/in-place build
    python fuzz/fuzz_decode.py --seconds 60 -- -jobs=1      # extra args go to libFuzzer

The property: any byte string gives ids or WireFormatError -- never another exception, never a
crash. Anything that decodes must re-encode (with the frame's own codec and checksum flag) to a
frame that decodes to the same ids, and frame_info must agree with the decoded counts. For
memory errors as well, run it against the ASan build (docs/fuzzing.md).

Run it through fuzz/run.sh, which builds the extension with clang and
-fsanitize=fuzzer-no-link,address, so libFuzzer gets edge coverage of the C decoder itself (and
ASan checks every access); see docs/fuzzing.md. Against a gcc build it still runs, with coverage
of this harness only. The harness is also structure-aware: the first input byte picks a mode --
the bytes as they are, or a valid frame built from fuzzed ids / codec / checksum /
multi-sequence and then damaged by fuzzed edits -- the same edits the hypothesis tests make
(tests/support/frame_damage.py: bit flips, header and count overwrites, cuts, appends, inserts,
and edits of a zstd section or of a pfor frame's length prefix and payload; pfor frames come
from the codec table like the others). The corpus is seeded with tests/fixtures/ (the golden
frames and the negative fixtures in invalid/, pfor's among them). Every WireFormatError message must belong to a rejection branch
listed in tests/support/strategies.py (WIRE_ERROR_KINDS).
"""

from __future__ import annotations

import pathlib
import sys

import atheris
from harness import count_input, fuzz_main

with atheris.instrument_imports():
    import tokenwire
    from tokenwire import WireFormatError

TESTS = pathlib.Path(__file__).resolve().parent.parent / "tests"
FIXTURES = TESTS / "fixtures"
sys.path.insert(0, str(TESTS))
from support.frame_damage import FuzzChooser, damage  # noqa: E402  (the edits the hypothesis tests make)
from support.strategies import CODECS, wire_error_kind  # noqa: E402  (codec table; rejection branches)

_stats = {"inputs": 0, "decoded": 0}


@atheris.instrument_func
def build_damaged_frame(fdp: atheris.FuzzedDataProvider) -> bytes:
    """A valid frame from fuzzed parameters, then fuzzed damage."""
    codec = CODECS[fdp.ConsumeIntInRange(0, len(CODECS) - 1)]
    width = fdp.ConsumeIntInRange(1, 31)
    lo = 0 if codec in ("u16", "packed") else -(2**31)
    hi = 2**16 - 1 if codec == "u16" else 2**width - 1
    nseq = fdp.ConsumeIntInRange(0, 4)
    seqs = []
    for _ in range(max(nseq, 1)):
        n = fdp.ConsumeIntInRange(0, 70)
        if fdp.ConsumeBool():
            seqs.append([fdp.ConsumeIntInRange(lo, hi) for _ in range(n)])
        else:
            v = fdp.ConsumeIntInRange(lo, hi)
            seqs.append([v] * (n * 8))               # long runs: zstd compresses them
    checksum = fdp.ConsumeBool()
    frame = bytearray(tokenwire.encode_many(seqs, codec=codec, checksum=checksum) if nseq
                      else tokenwire.encode(seqs[0], codec=codec, checksum=checksum))
    return damage(bytes(frame), FuzzChooser(fdp), min_edits=0)


@atheris.instrument_func
def test_one_input(raw: bytes) -> None:
    count_input("decode", _stats, lambda: f"{_stats['decoded']} decoded to ids", 1 << 16)
    if raw and raw[0] & 1:
        data = build_damaged_frame(atheris.FuzzedDataProvider(raw[1:]))
    else:
        data = raw[1:]
    check(data)


@atheris.instrument_func
def check(data: bytes) -> None:
    try:
        info = tokenwire.frame_info(data)
    except WireFormatError:
        info = None
    try:
        seqs = tokenwire.decode_many(data)
    except WireFormatError as e:
        seqs = None
        wire_error_kind(str(e))
    try:
        one = tokenwire.decode(data)
    except WireFormatError:
        one = None
    if seqs is None:
        assert one is None, "decode accepted what decode_many refused"
        return
    _stats["decoded"] += 1
    assert info is not None and info.nbytes == len(data)
    assert tuple(len(s) for s in seqs) == info.counts or (not info.multi and len(seqs) == 1)
    if one is not None:
        assert not info.multi and one == seqs[0]
    codec = "zstd" if info.compression else info.codec
    again = tokenwire.encode_many(seqs, codec=codec, checksum=info.checksum)
    assert [s.tolist() for s in tokenwire.decode_many(again)] == [s.tolist() for s in seqs]


def seed(corpus: pathlib.Path) -> None:
    for f in sorted(FIXTURES.glob("*.bin")) + sorted(FIXTURES.glob("invalid/*.bin")):
        # the first byte picks the mode (test_one_input): 0 = the bytes as they are
        (corpus / f"{f.parent.name}-{f.name}").write_bytes(b"\0" + f.read_bytes())


def main() -> int:
    return fuzz_main(__doc__, test_one_input, "decode", seconds=60, max_len=4096, seed=seed)


if __name__ == "__main__":
    sys.exit(main())
