"""Core conversions against numpy and array.array: as_tokens, tolist (issue #2's targets).

Every group has a baseline (*); ratio = baseline time / method time, so > 1 is faster.
"""

from __future__ import annotations

import argparse
import array
import json
from collections.abc import Callable

import numpy as np

import tokenwire
from tokenwire.benchmarks.data import token_stream
from tokenwire.benchmarks.harness import (
    Method,
    Result,
    Target,
    check_grouped_targets,
    end_progress,
    machine,
    measure,
    print_grouped_table,
    results_json,
    stderr_progress,
)


def methods_for(n: int) -> list[Method]:
    ids = token_stream(n)
    lst = ids.tolist()
    i64 = ids.astype(np.int64)
    strided = np.repeat(ids, 2)[::2]
    dst = np.empty_like(ids)
    tv = tokenwire.as_tokens(ids)
    arr = array.array("i", lst)

    def m(group: str, name: str, fn: Callable[[], object], baseline: bool = False) -> Method:
        return Method(name, {"time": fn}, group, baseline)

    return [
        # from a native int32 buffer: the target is <= 3x a bare memcpy (np.copyto)
        m("int32 buffer -> native", "np.copyto(dst, ndarray)", lambda: np.copyto(dst, ids), True),
        m("int32 buffer -> native", "tokenwire.as_tokens(ndarray)", lambda: tokenwire.as_tokens(ids)),
        m("int32 buffer -> native", "tokenwire.as_tokens(array('i'))", lambda: tokenwire.as_tokens(arr)),
        m("int32 buffer -> native", "tokenwire.as_tokens(strided)", lambda: tokenwire.as_tokens(strided)),
        m("int32 buffer -> native", "ndarray.copy()", ids.copy),
        # from a list: the target is >= 10x faster than np.array(list, dtype=int32)
        m("list[int] -> native", "np.array(list, dtype=int32)", lambda: np.array(lst, dtype=np.int32), True),
        m("list[int] -> native", "tokenwire.as_tokens(list)", lambda: tokenwire.as_tokens(lst)),
        m("list[int] -> native", "array.array('i', list)", lambda: array.array("i", lst)),
        m("list[int] -> native", "np.fromiter(list, int32)", lambda: np.fromiter(lst, np.int32, n)),
        # other integer dtypes
        m("int64 ndarray -> int32", "ndarray.astype(int32)", lambda: i64.astype(np.int32), True),
        m("int64 ndarray -> int32", "tokenwire.as_tokens(int64)", lambda: tokenwire.as_tokens(i64)),
        # materializing list[int]: the target is >= 4x faster than ndarray.tolist()
        m("native -> list[int]", "ndarray.tolist()", ids.tolist, True),
        m("native -> list[int]", "TokenVector.tolist()", tv.tolist),
        m("native -> list[int]", "tokenwire.tolist(ndarray)", lambda: tokenwire.tolist(ids)),
        m("native -> list[int]", "array.array.tolist()", arr.tolist),
    ]


TARGETS: list[Target] = [
    ("as_tokens(int32 ndarray) <= 3x np.copyto", "int32 buffer -> native",
     "tokenwire.as_tokens(ndarray)", lambda ratio: 1 / ratio <= 3.0),
    ("as_tokens(list) >= 10x faster than np.array(list, int32)", "list[int] -> native",
     "tokenwire.as_tokens(list)", lambda ratio: ratio >= 10.0),
    ("TokenVector.tolist() >= 4x faster than ndarray.tolist()", "native -> list[int]",
     "TokenVector.tolist()", lambda ratio: ratio >= 4.0),
]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench_core", description=__doc__)
    p.add_argument("--isl", default="1000,40000,128000", help="comma-separated prompt lengths")
    p.add_argument("--repeat", type=int, default=15, help="timed rounds per method (median)")
    p.add_argument("--round-ms", type=float, default=20.0, help="target duration of one round")
    p.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    p.add_argument("--check-targets", action="store_true",
                   help="exit 1 when a target is missed (off by default: shared machines are noisy)")
    args = p.parse_args(argv)
    isls = [int(x) for x in args.isl.split(",") if x]
    print(f"# tokenwire core benchmark — {machine()}")
    print(f"# median of {args.repeat} interleaved rounds of ~{args.round_ms:g} ms; "
          f"ratio = baseline (*) time / method time\n")
    results: list[Result] = []
    for isl in isls:
        results += measure(methods_for(isl), isl, args.repeat, args.round_ms / 1e3, stderr_progress)
    end_progress()
    print_grouped_table(results)
    ok = check_grouped_targets(results, TARGETS, 40_000)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results_json(results, suite="core"), f, indent=1)
        print(f"\nwrote {args.json}")
    return 0 if ok or not args.check_targets else 1
