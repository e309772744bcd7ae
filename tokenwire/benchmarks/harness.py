"""Measurement shared by every benchmark: peers measured side by side, in one process.

Each method is a set of named operations (`{"time": fn}` or `{"encode": f, "decode": g}`). Every
(method, operation) pair is calibrated to a batch that takes about `round_s`, then all pairs are
timed round after round, interleaved, so that a noisy neighbour slows every peer alike. A figure
is the median over rounds of the per-call time; the spread is the interquartile range relative to
the median.
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

Op = Callable[[], object]


@dataclass
class Method:
    name: str
    ops: dict[str, Op]
    group: str = ""
    baseline: bool = False           # the group's reference row
    nbytes: int | None = None        # wire size, for codecs


@dataclass
class Stat:
    median_us: float
    iqr_pct: float
    samples_us: list[float] = field(default_factory=list)


@dataclass
class Result:
    name: str
    group: str
    isl: int
    stats: dict[str, Stat]
    baseline: bool = False
    nbytes: int | None = None

    def total_us(self) -> float:
        return sum(s.median_us for s in self.stats.values())


def _calibrate(fn: Op, round_s: float) -> int:
    number = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        dt = time.perf_counter() - t0
        if dt >= round_s / 4 or number >= 1 << 20:
            return max(1, int(number * round_s / max(dt, 1e-9)))
        number *= 4


def measure(methods: Sequence[Method], isl: int, repeat: int, round_s: float,
            progress: Callable[[str], None] | None = None) -> list[Result]:
    pairs = [(m, op, fn) for m in methods for op, fn in m.ops.items()]
    numbers = [_calibrate(fn, round_s) for _, _, fn in pairs]      # doubles as the warm-up
    samples: list[list[float]] = [[] for _ in pairs]
    for r in range(repeat):
        if progress:
            progress(f"ISL {isl:,}: round {r + 1}/{repeat}")
        for (_, _, fn), number, out in zip(pairs, numbers, samples):
            t0 = time.perf_counter()
            for _ in range(number):
                fn()
            out.append((time.perf_counter() - t0) / number * 1e6)
    by_method: dict[int, dict[str, Stat]] = {}
    for (m, op, _), s in zip(pairs, samples):
        med = statistics.median(s)
        q = statistics.quantiles(s, n=4) if len(s) >= 2 else [med, med, med]
        by_method.setdefault(id(m), {})[op] = Stat(med, 100 * (q[2] - q[0]) / med if med else 0.0, s)
    return [Result(m.name, m.group, isl, by_method[id(m)], m.baseline, m.nbytes) for m in methods]


def machine() -> str:
    """One line describing where the figures come from."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    import numpy

    import tokenwire
    return (f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}; "
            f"Python {platform.python_version()}, numpy {numpy.__version__}, "
            f"tokenwire {tokenwire.__version__}")


def stderr_progress(msg: str) -> None:
    if sys.stderr.isatty():
        print(f"\r\033[K{msg}", end="", file=sys.stderr, flush=True)
    else:
        print(msg, file=sys.stderr, flush=True)


def end_progress() -> None:
    if sys.stderr.isatty():
        print("\r\033[K", end="", file=sys.stderr, flush=True)


def results_json(results: Sequence[Result], **meta: object) -> dict[str, object]:
    return {
        "machine": machine(),
        **meta,
        "rows": [
            {"name": r.name, "group": r.group, "isl": r.isl, "baseline": r.baseline,
             "nbytes": r.nbytes,
             **{f"{op}_us": s.median_us for op, s in r.stats.items()},
             **{f"{op}_iqr_pct": s.iqr_pct for op, s in r.stats.items()},
             "samples_us": {op: s.samples_us for op, s in r.stats.items()}}
            for r in results
        ],
    }
