"""Valid input at the edges of what the conversions and codecs accept: int32 buffers that are
not 4-byte aligned, range and slice steps far past a C ssize_t, and inputs that every call
leaves unmodified."""

from __future__ import annotations

import numpy as np
import pytest

import tokenwire


@pytest.mark.parametrize("codec", ["auto", "raw", "u16", "packed", "zstd", "pfor"])
def test_encode_misaligned_int32_buffers(codec: str) -> None:
    if codec == "zstd":
        pytest.importorskip("zstandard")
    ids = [(i * 37) % 60_000 for i in range(1001)]
    blob = b"x" + np.array(ids, dtype=np.int32).tobytes()
    sources = {
        "ndarray at offset 1": np.frombuffer(blob, "i4", offset=1),
        "memoryview of bytes at offset 1": memoryview(blob)[1:].cast("i"),   # immutable: no copy
    }
    for name, src in sources.items():
        assert np.asarray(src).ctypes.data % 4 != 0, name
        assert tokenwire.decode(tokenwire.encode(src, codec=codec)).tolist() == ids, name
        assert tokenwire.as_tokens(src).tolist() == ids, name
        assert tokenwire._core.tolist(src) == ids, name


def test_huge_steps() -> None:
    assert tokenwire.as_tokens(range(5, 6, 10**30)) == [5]
    assert tokenwire.as_tokens(range(5, 4, -(10**30))) == [5]
    assert tokenwire.as_tokens(range(5, 6, 10**30)).tolist() == list(range(5, 6, 10**30))
    tv = tokenwire.as_tokens([10, 20, 30])
    for step in (10**20, -(10**20), 2**63, -(2**63)):
        assert tv[::step].tolist() == [10, 20, 30][::step]
    assert tv[1::10**20].tolist() == [20]
    assert tv[5::10**20].tolist() == []


def test_inputs_are_not_modified() -> None:
    arr = np.arange(1000, dtype=np.int32)
    frame = bytearray(tokenwire.encode(arr, codec="packed", checksum=True))
    before_arr, before_frame = arr.copy(), bytes(frame)
    for codec in ("auto", "raw", "u16", "packed"):
        tokenwire.encode(arr, codec=codec)
    tokenwire.decode(frame)
    tokenwire.decode_many(frame)
    assert np.array_equal(arr, before_arr) and bytes(frame) == before_frame
