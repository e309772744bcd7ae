"""Core conversions against numpy and array.array: as_tokens, tolist, and their targets
(docs/benchmarks.md, "The core").
"""

from __future__ import annotations

import array

import numpy as np

import tokenwire
from bench.data import token_stream
from bench.harness import Method, Target, grouped_suite_main, ratio_target
from bench.harness import timed as m


def methods_for(n: int) -> list[Method]:
    ids = token_stream(n)
    lst = ids.tolist()
    i64 = ids.astype(np.int64)
    strided = np.repeat(ids, 2)[::2]
    dst = np.empty_like(ids)
    tv = tokenwire.as_tokens(ids)
    arr = array.array("i", lst)

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
        m("native -> list[int]", "array.array.tolist()", arr.tolist),
    ]


TARGETS: list[Target] = [
    ratio_target("as_tokens(int32 ndarray) <= 3x np.copyto", "int32 buffer -> native",
     "tokenwire.as_tokens(ndarray)", lambda ratio: 1 / ratio <= 3.0),
    ratio_target("as_tokens(list) >= 10x faster than np.array(list, int32)", "list[int] -> native",
     "tokenwire.as_tokens(list)", 10),
    ratio_target("TokenVector.tolist() >= 4x faster than ndarray.tolist()", "native -> list[int]",
     "TokenVector.tolist()", 4),
]


def main(argv: list[str] | None = None) -> int:
    return grouped_suite_main(argv, suite="core", doc=__doc__ or "", methods_for=methods_for,
                              targets=TARGETS)
