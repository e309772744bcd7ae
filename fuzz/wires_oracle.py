"""What the three wire targets (fuzz_msgpack_ids.py, fuzz_json_ids.py, fuzz_protobuf_ids.py)
share: the input to try -- the fuzzer's bytes as they are, or the encoding of fuzzed ids with
fuzzed byte edits -- and the differential property: tokenwire.wires.read and the stack's own
decoder give the same ids, or both refuse (tokenwire with WireFormatError only: any other
exception is a failure); where tokenwire is stricter than the stack by design (docs/wires.md:
an id outside int32, JSON's fractions), the stack's value (and tokenwire's message) is checked to be one of those."""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional

import atheris
from harness import count_input

with atheris.instrument_imports():
    import tokenwire.wires as wires
    from tokenwire import WireFormatError

INT32 = (-(2**31), 2**31 - 1)


def fuzzed_input(fdp: atheris.FuzzedDataProvider, fmt: str, field: Optional[int]) -> bytes:
    """The rest of the input as it is, or an encoding of fuzzed ids, edited."""
    if fdp.ConsumeBool():
        return fdp.ConsumeBytes(fdp.remaining_bytes())
    ids = [fdp.ConsumeIntInRange(*INT32) if fdp.ConsumeBool() else fdp.ConsumeIntInRange(0, 300)
           for _ in range(fdp.ConsumeIntInRange(0, 40))]
    data = bytearray(wires.write(ids, fmt, field=field))
    for _ in range(fdp.ConsumeIntInRange(0, 3)):
        at = fdp.ConsumeIntInRange(0, len(data))
        kind = fdp.ConsumeIntInRange(0, 3)
        byte = fdp.ConsumeIntInRange(0, 255)
        if kind == 0 and at < len(data):
            data[at] = byte
        elif kind == 1:
            data[at:at] = bytes([byte])
        elif kind == 2:
            del data[at:at + 1]
        else:
            del data[at:]
    return bytes(data)


def check(name: str, stats: Dict[str, int], fmt: str, data: bytes, reference: Callable[[bytes], Any],
          stricter: Callable[[Any, str], bool], field: Optional[int] = None) -> None:
    """tokenwire against `reference` (the stack's decoder: a list of ints, or an exception)."""
    count_input(name, stats, lambda: f"{stats['accepted']} accepted")
    try:
        ours: Any = wires.read(data, fmt, field=field).tolist()
    except WireFormatError as e:
        ours = e
    try:
        theirs: Any = reference(data)
    except Exception as e:            # the stack's own error classes differ; any refusal counts
        theirs = e
    if isinstance(ours, list):
        stats["accepted"] += 1
        assert ours == theirs, (data, ours, theirs)
        assert wires.read(wires.write(ours, fmt, field=field), fmt, field=field) == ours
    elif not isinstance(theirs, BaseException):
        assert stricter(theirs, str(ours)), (data, str(ours), theirs)
