"""The GIL is released for large inputs, and only from the documented threshold."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import tokenwire
import tokenwire._core
from support.gil import longest_stall_fraction, stall_fraction_below

# Threads timed against the GIL: `pytest -m "not slow"` skips them.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def big() -> dict[str, Any]:
    i64 = np.arange(40_000_000, dtype=np.int64)         # 320 MB in, 160 MB out
    tv = tokenwire.as_tokens(i64)
    return {"int64": i64, "int32": i64.astype(np.int32),
            "tv3": tv * 3,          # 480 MB: the vocabulary check alone runs long enough to tell
            "frame": tokenwire.encode(tv, codec="raw", checksum=True),
            "pfor": tokenwire.encode(tv, codec="pfor")}


CALLS: dict[str, Callable[[dict[str, Any]], object]] = {
    "as_tokens int64": lambda b: tokenwire.as_tokens(b["int64"]),
    "as_tokens strided": lambda b: tokenwire.as_tokens(b["int64"][::2]),
    "as_tokens int32 (memcpy)": lambda b: tokenwire.as_tokens(b["int32"]),
    "encode packed": lambda b: tokenwire.encode(b["int32"], codec="packed"),
    "encode pfor": lambda b: tokenwire.encode(b["int32"], codec="pfor"),
    "decode pfor": lambda b: tokenwire.decode(b["pfor"]),
    # The one vocabulary check (as_tokens returns a TokenVector as it is: only the check runs),
    # and the frame checks with the checksum, which run in C without the GIL (frame.h).
    "as_tokens vocab check": lambda b: tokenwire.as_tokens(b["tv3"], vocab_size=2**31 - 1),
    "decode + checksum + vocab check": lambda b: tokenwire.decode(b["frame"],
                                                                  vocab_size=2**31 - 1),
}


@pytest.mark.parametrize("name", list(CALLS))
def test_released_above_the_threshold_held_below(threshold, big, name: str) -> None:  # type: ignore[no-untyped-def]
    call = CALLS[name]
    assert tokenwire._core.gil_release_threshold() == 8 * 1024 * 1024
    tokenwire._core.gil_release_threshold(0)
    assert stall_fraction_below(lambda: call(big), 0.3) < 0.3   # the other thread kept running
    tokenwire._core.gil_release_threshold(2**62)
    assert longest_stall_fraction(lambda: call(big)) > 0.5     # stopped for most of the call


def test_threshold_is_validated(threshold) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="must be >= 0 bytes, got -1"):
        tokenwire._core.gil_release_threshold(-1)
    assert tokenwire._core.gil_release_threshold(1024) == 8 * 1024 * 1024
    assert tokenwire._core.gil_release_threshold() == 1024
