"""Memory checks. The leak check of tests/test_leaks.py, which test_interop runs on the
integrations too: a call repeated many times after a warm-up must not grow the interpreter's
allocated blocks or the memory tracemalloc sees (token storage is PyMem_RawMalloc'd, so
tracemalloc counts it). And the peak of one call (`traced_peak`), which the hostile-input tests
bound by the input's size."""

from __future__ import annotations

import gc
import sys
import tracemalloc
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

ROUNDS = 2000


def _allocated_after(fn: Callable[[], object], rounds: int) -> tuple[int, int]:
    for _ in range(rounds):
        fn()
    gc.collect()
    return sys.getallocatedblocks(), tracemalloc.get_traced_memory()[0]


def assert_no_growth(fn: Callable[[], object], rounds: int = ROUNDS) -> None:
    tracemalloc.start()
    try:
        _allocated_after(fn, 200)                       # warm-up
        blocks0, traced0 = _allocated_after(fn, 10)
        blocks1, traced1 = _allocated_after(fn, rounds)
    finally:
        tracemalloc.stop()
    # A leak of even one block per call would show as >= `rounds` blocks.
    assert blocks1 - blocks0 < rounds // 10, f"{blocks1 - blocks0} blocks leaked over {rounds} calls"
    assert traced1 - traced0 < 64 * 1024, f"{traced1 - traced0} bytes leaked over {rounds} calls"


def raising(fn: Callable[[], object], exc: type[BaseException]) -> Callable[[], None]:
    """A call of `fn` that must raise `exc` (its error path is what the leak check repeats)."""
    def call() -> None:
        try:
            fn()
        except exc:
            return
        raise AssertionError("expected an error")
    return call


def traced_peak(fn: Callable[[], T]) -> tuple[T, int]:
    """(fn(), the peak of the memory tracemalloc saw during the call, above what was traced when
    it started). An exception from `fn` propagates (use `pytest.raises` inside `fn` to measure
    an error path)."""
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        result = fn()
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    return result, peak
