"""atheris fuzz target for tokenwire.wires.read(data, "msgpack") (not part of pytest).

    python fuzz/fuzz_msgpack_ids.py --seconds 60
    fuzz/run.sh python 60 msgpack_ids                  # the clang fuzzer+ASan build

Differential against msgspec (wires_oracle.py): the same ids, or both refuse; tokenwire may
refuse what msgspec reads only when that is an id outside int32.
"""

from __future__ import annotations

import sys

import atheris
from harness import fuzz_main
with atheris.instrument_imports():
    from wires_oracle import INT32, check, fuzzed_input
    import msgspec

_stats = {"inputs": 0, "accepted": 0}
_decoder = msgspec.msgpack.Decoder(list[int])


def _outside_int32(ids: list[int], message: str) -> bool:
    return any(not INT32[0] <= v <= INT32[1] for v in ids)


@atheris.instrument_func
def test_one_input(raw: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(raw)
    check("msgpack_ids", _stats, "msgpack", fuzzed_input(fdp, "msgpack", None), _decoder.decode,
          _outside_int32)


def main() -> int:
    return fuzz_main(__doc__, test_one_input, "msgpack_ids", seconds=60, max_len=4096,
                     fixed_seed=True)


if __name__ == "__main__":
    sys.exit(main())
