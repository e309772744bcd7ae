"""atheris fuzz target for tokenwire.msgspec.Decoder (not part of pytest).

    python fuzz/fuzz_msgspec.py --seconds 60               # against the installed/in-place build
    fuzz/run.sh python 60 msgspec                          # the clang fuzzer+ASan build

The property: ``Decoder(T).decode(frames)`` of any frames raises only msgspec.DecodeError,
msgspec.ValidationError or WireFormatError -- never another exception, never a crash -- and a
message that was not damaged decodes to what was encoded. The first input byte picks a mode:
the rest of the input cut into frames as it is, or a valid message (TokenVector fields inline and
out-of-band, an Any-typed list of them) built from fuzzed ids by `Encoder`, then damaged by
fuzzed edits of the main frame (bit flips, overwrites, cuts, inserts, a forged out-of-band
reference naming any frame with any count, repeated many times) and of the frame list (frames
dropped, duplicated, cut; bytes, bytearray or ImmutableBuffer). A forged reference repeated
in a list names one frame many times: when that decodes, every item is the same vector (a frame
is copied at most once per decode).
"""

from __future__ import annotations

import struct
import sys
from typing import Any, List, Optional

import atheris
from harness import count_input, fuzz_main

with atheris.instrument_imports():
    import msgspec

    import tokenwire
    import tokenwire.msgspec as tm
    from tokenwire import TokenIdError, TokenVector, WireFormatError
    from tokenwire._core import ImmutableBuffer

EXPECTED = (msgspec.DecodeError, msgspec.ValidationError, WireFormatError, TokenIdError)


class Request(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    request_id: str
    prompt: Optional[TokenVector]
    extra: List[TokenVector] = []
    note: Any = None


_stats = {"inputs": 0, "decoded": 0}


@atheris.instrument_func
def build(fdp: atheris.FuzzedDataProvider) -> tuple[Any, List[Any], type]:
    """A valid message from fuzzed ids: (the object, its frames, its type)."""
    codec = ["raw", "auto", "packed"][fdp.ConsumeIntInRange(0, 2)]
    lo = 0 if codec == "packed" else -(2**31)

    def ids() -> TokenVector:
        n = fdp.ConsumeIntInRange(0, 40)
        if fdp.ConsumeBool():
            n *= 64                                       # big enough to go out of band
        return tokenwire.as_tokens([fdp.ConsumeIntInRange(lo, 2**31 - 1)] * n
                                   if fdp.ConsumeBool() else
                                   [fdp.ConsumeIntInRange(0, 2**17) for _ in range(n)])
    threshold = [None, 0, 64, 1024][fdp.ConsumeIntInRange(0, 3)]
    enc = tm.Encoder(threshold=threshold, codec=codec, checksum=fdp.ConsumeBool())
    if fdp.ConsumeBool():
        obj: Any = Request("r", ids() if fdp.ConsumeBool() else None,
                           [ids() for _ in range(fdp.ConsumeIntInRange(0, 3))],
                           ids() if fdp.ConsumeBool() else fdp.ConsumeIntInRange(0, 9))
        return obj, enc.encode(obj), Request
    obj = [ids() for _ in range(fdp.ConsumeIntInRange(0, 4))]
    return obj, enc.encode(obj), Any


@atheris.instrument_func
def damage(frames: List[Any], fdp: atheris.FuzzedDataProvider) -> tuple[List[Any], bool]:
    """(damaged frames, whether the main frame is a list of one forged reference repeated)."""
    main = bytearray(frames[0])
    forged = False
    for _ in range(fdp.ConsumeIntInRange(0, 4)):
        kind = fdp.ConsumeIntInRange(0, 6)
        forged = forged and kind > 4
        at = fdp.ConsumeIntInRange(0, max(len(main) - 1, 0))
        if kind == 0 and main:
            main[at] ^= 1 << fdp.ConsumeIntInRange(0, 7)
        elif kind == 1 and main:
            main[at] = fdp.ConsumeIntInRange(0, 255)
        elif kind == 2:
            del main[at:]
        elif kind == 3:
            main[at:at] = fdp.ConsumeBytes(fdp.ConsumeIntInRange(1, 16))
        elif kind == 4:                                   # a forged reference, repeated
            ref = msgspec.msgpack.encode(msgspec.msgpack.Ext(
                tm.Hooks.BUFFER_EXT_CODE, struct.pack("<IQ", fdp.ConsumeIntInRange(0, 4),
                                                fdp.ConsumeIntInRange(0, 2**20))))
            times = fdp.ConsumeIntInRange(1, 64)
            main = bytearray(b"\xdc" + struct.pack(">H", times) + ref * times)
            forged = True
        elif kind == 5 and len(frames) > 1:
            frames = frames[:-1] if fdp.ConsumeBool() else frames + [frames[-1]]
        elif kind == 6 and len(frames) > 1:
            i = fdp.ConsumeIntInRange(1, len(frames) - 1)
            frames = [*frames[:i], bytes(frames[i])[:fdp.ConsumeIntInRange(0, 64)], *frames[i + 1:]]
    return [bytes(main), *frames[1:]], forged


def wrap(frames: List[Any], fdp: atheris.FuzzedDataProvider) -> List[Any]:
    kind = fdp.ConsumeIntInRange(0, 2)
    if kind == 0:
        return [bytes(f) for f in frames]
    if kind == 1:
        return [bytes(frames[0]), *(bytearray(f) for f in frames[1:])]
    return [ImmutableBuffer(bytes(f)) for f in frames]


@atheris.instrument_func
def test_one_input(raw: bytes) -> None:
    count_input("msgspec", _stats, lambda: f"{_stats['decoded']} decoded")
    fdp = atheris.FuzzedDataProvider(raw)
    mode = fdp.ConsumeIntInRange(0, 2)
    expected: Any = None
    typ: Any = Any
    forged = False
    if mode == 0:                                         # the bytes as frames
        frames: List[Any] = []
        for _ in range(fdp.ConsumeIntInRange(1, 4)):
            frames.append(fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 512)))
        typ = Request if fdp.ConsumeBool() else Any
    else:
        obj, frames, typ = build(fdp)
        if mode == 1:
            frames, forged = damage(frames, fdp)
        else:
            expected = obj
    frames = wrap(frames, fdp)
    vocab = [None, 2**17 + 1, 2**31][fdp.ConsumeIntInRange(0, 2)]
    if vocab is not None and expected is not None:
        expected = None                                   # fuzzed ids may be outside it
    try:
        out = tm.Decoder(typ, vocab_size=vocab).decode(frames)
    except EXPECTED:
        assert expected is None, "a message that was not damaged failed to decode"
        return
    _stats["decoded"] += 1
    if forged and typ is Any:
        # One frame named many times: one vector (a frame is copied at most once per decode).
        assert all(v is out[0] for v in out), "a repeated reference made another vector"
    if expected is not None:
        assert out == expected, (out, expected)


def main() -> int:
    return fuzz_main(__doc__, test_one_input, "msgspec", seconds=60, max_len=4096)


if __name__ == "__main__":
    sys.exit(main())
