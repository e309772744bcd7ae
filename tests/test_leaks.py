"""Reference and memory leaks on the C paths: repeat a call many times, assert no growth.

Each check warms up first (the int table and interpreter caches fill once), then compares
`sys.getallocatedblocks()` and the RSS-independent tracemalloc total before and after many calls,
and the reference counts of the inputs. Error paths are included: they must free everything.
Token storage is allocated with PyMem_RawMalloc, so tracemalloc sees it (checked below): with
the free() removed from TokenVector.__dealloc__, the cases that build vectors fail.
"""

from __future__ import annotations

import array
import gc
import pickle
import sys
import tracemalloc
from collections.abc import Callable

import numpy as np
import pytest

import tokenwire
from tokenwire import TokenVector, as_tokens
from tokenwire._core import tolist
from support.leaks import ROUNDS, assert_no_growth, raising

# Repeated runs measured with tracemalloc and RSS: `pytest -m "not slow"` skips them.
pytestmark = pytest.mark.slow

def _pickle_oob(obj: object) -> object:
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    return pickle.loads(data, buffers=buffers)


IDS = list(range(0, 300_000, 97)) + [-5, 2**31 - 1]
ND = np.array(IDS, dtype=np.int32)
TV = TokenVector(IDS)

PACKED = tokenwire.encode(IDS[:-2], codec="packed")
RAW = tokenwire.encode(IDS, codec="raw")
MANY = tokenwire.encode_many([IDS[:100], [], IDS[100:400]], codec="auto")
PFOR = tokenwire.encode(IDS, codec="pfor")
PFOR_MANY = tokenwire.encode_many([IDS[:100], [], IDS[100:400]], codec="pfor", checksum=True)
# a pfor payload with a byte after its last block: refused after every block was decoded (the
# ids decoded so far are released on the error)
PFOR_BAD = (PFOR[:16] + (int.from_bytes(PFOR[16:24], "little") + 1).to_bytes(8, "little")
            + PFOR[24:] + b"\0")
MANY_MUTABLE = bytearray(tokenwire.encode_many([IDS[:3]] * 300, codec="raw"))   # 1.2 KB table

CASES: dict[str, Callable[[], object]] = {
    "as_tokens(list)": lambda: as_tokens(IDS),
    "as_tokens(tuple)": lambda: as_tokens(tuple(IDS[:50])),
    "as_tokens(int32 ndarray)": lambda: as_tokens(ND),
    "as_tokens(int64 strided)": lambda: as_tokens(ND.astype(np.int64)[::3]),
    "as_tokens(array)": lambda: as_tokens(array.array("i", IDS[:100])),
    "as_tokens(range)": lambda: as_tokens(range(1000)),
    "as_tokens(generator)": lambda: as_tokens(x for x in range(100)),
    "TokenVector.tolist()": TV.tolist,
    "tolist(ndarray)": lambda: tolist(ND),
    "tobytes": TV.tobytes,
    "frombuffer(bytes)": lambda: TokenVector.frombuffer(b"\x01\x00\x00\x00" * 100),
    "frombuffer(bytearray)": lambda: TokenVector.frombuffer(bytearray(400)),
    "slice": lambda: TV[1:500:3],
    "iterate": lambda: sum(TV[:200]),
    "eq list": lambda: TV == IDS,
    "pickle 5 oob": lambda: _pickle_oob(TV),
    "pickle 2": lambda: pickle.loads(pickle.dumps(TV, 2)),
    "numpy view": lambda: np.asarray(TV).sum(),
    "overflow in list": raising(lambda: as_tokens(IDS[:100] + [2**40]), OverflowError),
    "bad type in list": raising(lambda: as_tokens(IDS[:100] + [1.5]), TypeError),
    "overflow in int64 array": raising(lambda: as_tokens(np.array([1, 2**40])), OverflowError),
    "bad dtype": raising(lambda: as_tokens(np.array([1.5])), TypeError),
    "bad shape": raising(lambda: as_tokens(np.zeros((2, 2), dtype=np.int32)), ValueError),
    "vocab": raising(lambda: as_tokens(ND, vocab_size=10), ValueError),
    "bytes refused": raising(lambda: as_tokens(b"abc"), TypeError),
    "frombuffer odd length": raising(lambda: TokenVector.frombuffer(b"abc"), ValueError),
    "index error": raising(lambda: TV[10**9], IndexError),
    "encode ndarray (copied)": lambda: tokenwire.encode(ND[:-2], codec="packed"),
    "decode packed": lambda: tokenwire.decode(PACKED),
    "encode pfor": lambda: tokenwire.encode(ND, codec="pfor"),
    "encode_many pfor": lambda: tokenwire.encode_many([IDS[:100], IDS[100:400]], codec="pfor"),
    "decode pfor": lambda: tokenwire.decode(PFOR),
    "decode_many pfor": lambda: tokenwire.decode_many(PFOR_MANY),
    "decode pfor corrupt": raising(lambda: tokenwire.decode(PFOR_BAD), tokenwire.WireFormatError),
    "decode_many": lambda: tokenwire.decode_many(MANY),
    "decode zero-copy": lambda: tokenwire.decode(RAW),
    "decode truncated": raising(lambda: tokenwire.decode(PACKED[:-1]), tokenwire.WireFormatError),
    # A frame in mutable memory: its count table is copied once (PyMem) and freed on every path.
    "decode_many(bytearray)": lambda: tokenwire.decode_many(MANY_MUTABLE),
    "frame_info(bytearray)": lambda: tokenwire.frame_info(MANY_MUTABLE),
    "decode(bytearray multi) refused": raising(lambda: tokenwire.decode(MANY_MUTABLE),
                                               tokenwire.WireFormatError),
    "decode_many(bytearray truncated)": raising(lambda: tokenwire.decode_many(MANY_MUTABLE[:-1]),
                                                tokenwire.WireFormatError),
}


@pytest.mark.parametrize("name", list(CASES))
def test_no_leak(name: str) -> None:
    assert_no_growth(CASES[name], rounds=500 if "list" in name else ROUNDS)


def test_input_refcounts_unchanged() -> None:
    objs = [IDS, ND, TV, b"\x00" * 16]
    before = [sys.getrefcount(o) for o in objs]
    for _ in range(100):
        as_tokens(IDS)
        as_tokens(ND)
        as_tokens(TV)
        TokenVector.frombuffer(objs[3])
        try:
            as_tokens(ND, vocab_size=1)
        except ValueError:
            pass
    gc.collect()
    assert [sys.getrefcount(o) for o in objs] == before


def test_element_refcounts_unchanged_on_error() -> None:
    big = 10**30                                   # a unique int object
    items = [1, 2, big]
    before = sys.getrefcount(big)
    for _ in range(100):
        with pytest.raises(OverflowError):
            as_tokens(items)
    gc.collect()
    assert sys.getrefcount(big) == before


def test_the_leak_check_itself_catches_a_leak() -> None:
    kept: list[object] = []
    with pytest.raises(AssertionError, match="leaked"):
        assert_no_growth(lambda: kept.append(bytearray(64)), rounds=ROUNDS)


def test_tracemalloc_sees_token_storage() -> None:
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        held = [as_tokens(ND) for _ in range(10)]
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown >= 10 * ND.nbytes, grown
    del held
