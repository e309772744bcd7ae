"""Whether a call holds the GIL, timed from another thread: tests/test_gil.py (the extension)
and tests/test_cpp_bindings.py (the C++ casters) use it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from support.wait import WAIT_S


def longest_stall_fraction(call: Callable[[], object]) -> float:
    """The longest time a busy Python thread could not run during `call`, as a fraction of the
    call. While the caller holds the GIL in C code the other thread cannot run at all (the
    interpreter switches only between bytecodes); while it is released, it runs throughout."""
    stamps: list[float] = []
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            stamps.append(time.perf_counter())

    t = threading.Thread(target=spin)
    t.start()
    time.sleep(0.01)
    t0 = time.perf_counter()
    call()
    t1 = time.perf_counter()
    stop.set()
    t.join()
    assert t1 - t0 > 0.015, f"the call took {t1 - t0:.4f} s: too short to tell"
    inside = [t0] + [s for s in stamps if t0 < s < t1] + [t1]
    return max(b - a for a, b in zip(inside, inside[1:])) / (t1 - t0)


def stall_fraction_below(call: Callable[[], object], bound: float,
                         deadline: float = WAIT_S) -> float:
    """The smallest longest_stall_fraction(call), measured again until one is below `bound` or
    `deadline` seconds have passed. On a machine whose cores are busy the other thread also
    waits for a core, not only for the GIL: one measurement with the thread running throughout
    shows that the call released the GIL (while C code holds it the thread cannot run at all,
    however idle the cores are)."""
    end = time.monotonic() + deadline
    best = longest_stall_fraction(call)
    while best >= bound and time.monotonic() < end:
        best = min(best, longest_stall_fraction(call))
    return best
