"""atheris fuzz target for tokenwire.from_base64 (not part of pytest).

    python fuzz/fuzz_base64.py --seconds 60                # against the installed/in-place build
    fuzz/run.sh python 60 base64                           # the clang fuzzer+ASan build

The properties: `from_base64` of any text (str, bytes, bytearray, a memoryview contiguous,
strided or reversed; either alphabet) raises only WireFormatError (any other exception, a
TypeError or BufferError included, is a failure); pybase64 and binascii (the two backends)
accept and refuse the same texts with the same result or the same message; and a text that is
accepted is canonical -- re-encoding the bytes it holds gives the text back (one frame, one
text). The first input byte picks a mode: the rest of the input as text, or the `to_base64`
text of fuzzed ids with fuzzed character edits (replaced, inserted, deleted, padding moved,
cut).
"""

from __future__ import annotations

import base64
import sys
from typing import Any

import atheris
from harness import count_input, fuzz_main

with atheris.instrument_imports():
    import tokenwire
    import tokenwire.text as text
    from tokenwire import WireFormatError

_CHARS = "ABCDQgw09+/-_= \n\r\t\x00é\u0100*."
_stats = {"inputs": 0, "accepted": 0}


@atheris.instrument_func
def build(fdp: atheris.FuzzedDataProvider, urlsafe: bool) -> str:
    codec = ["raw", "auto", "packed", "u16"][fdp.ConsumeIntInRange(0, 3)]
    hi = 2**16 - 1 if codec == "u16" else 2**20
    ids = [fdp.ConsumeIntInRange(0, hi) for _ in range(fdp.ConsumeIntInRange(0, 64))]
    s = tokenwire.to_base64(ids, codec=codec, checksum=fdp.ConsumeBool(), urlsafe=urlsafe)
    for _ in range(fdp.ConsumeIntInRange(0, 3)):
        at = fdp.ConsumeIntInRange(0, len(s))
        ch = _CHARS[fdp.ConsumeIntInRange(0, len(_CHARS) - 1)]
        kind = fdp.ConsumeIntInRange(0, 3)
        if kind == 0:
            s = s[:at] + ch + s[at + 1:]
        elif kind == 1:
            s = s[:at] + ch + s[at:]
        elif kind == 2:
            s = s[:at] + s[at + 1:]
        else:
            s = s[:at]
    return s


def attempt(data: Any, urlsafe: bool, vocab: Any) -> tuple[str, Any]:
    try:
        return "ok", tokenwire.from_base64(data, urlsafe=urlsafe, vocab_size=vocab).tolist()
    except WireFormatError as e:        # the one documented error for text of an accepted type
        return type(e).__name__, str(e)


@atheris.instrument_func
def test_one_input(raw: bytes) -> None:
    count_input("base64", _stats, lambda: f"{_stats['accepted']} accepted")
    fdp = atheris.FuzzedDataProvider(raw)
    mode = fdp.ConsumeIntInRange(0, 1)
    urlsafe = fdp.ConsumeBool()
    form = fdp.ConsumeIntInRange(0, 5)
    vocab = [None, 2**16][fdp.ConsumeIntInRange(0, 1)]
    s = build(fdp, urlsafe) if mode else fdp.ConsumeUnicodeNoSurrogates(fdp.remaining_bytes())
    data: Any = s
    if form and s.isascii():
        b = s.encode("ascii")
        if form == 4:                              # every other byte of a buffer: strided
            data = memoryview(bytes(x for c in b for x in (c, 0x2A)))[::2]
        elif form == 5:                            # a reversed view of the reversed bytes
            data = memoryview(b[::-1])[::-1]
        else:
            data = b if form == 1 else bytearray(b) if form == 2 else memoryview(b)
    results = []
    for backend in (True, False):
        previous = text._set_pybase64(backend)
        try:
            results.append(attempt(data, urlsafe, vocab))
        finally:
            text._set_pybase64(previous)
    assert results[0] == results[1], results
    if results[0][0] != "ok":
        return
    _stats["accepted"] += 1
    plain = s.translate(str.maketrans("-_", "+/")) if urlsafe else s
    assert base64.b64encode(base64.b64decode(plain)).decode() == plain, "non-canonical accepted"


def main() -> int:
    if text._pybase64 is None:
        print("fuzz_base64: pybase64 is not installed (both backends are compared)", file=sys.stderr)
        return 2
    return fuzz_main(__doc__, test_one_input, "base64", seconds=60, max_len=4096)


if __name__ == "__main__":
    sys.exit(main())
