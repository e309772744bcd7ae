"""atheris fuzz target for tokenwire.wires.read(data, "json") (not part of pytest).

    python fuzz/fuzz_json_ids.py --seconds 60
    fuzz/run.sh python 60 json_ids                     # the clang fuzzer+ASan build

Differential against orjson (wires_oracle.py): the same ids, or both refuse; tokenwire may
refuse what orjson reads only when that is not a list of ints within int32 (a float, whole or
not; any other JSON value; an id outside int32), as docs/wires.md writes down.
"""

from __future__ import annotations

import sys
from typing import Any

import atheris
from harness import fuzz_main
with atheris.instrument_imports():
    from wires_oracle import INT32, check, fuzzed_input
    import orjson

_stats = {"inputs": 0, "accepted": 0}


def _not_int32_ids(value: Any, message: str) -> bool:
    return not (isinstance(value, list) and all(
        type(v) is int and INT32[0] <= v <= INT32[1] for v in value))


@atheris.instrument_func
def test_one_input(raw: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(raw)
    check("json_ids", _stats, "json", fuzzed_input(fdp, "json", None), orjson.loads,
          _not_int32_ids)


def main() -> int:
    return fuzz_main(__doc__, test_one_input, "json_ids", seconds=60, max_len=4096,
                     fixed_seed=True)


if __name__ == "__main__":
    sys.exit(main())
