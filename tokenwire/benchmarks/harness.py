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


# --------------------------------------------------------------------------------------------
# Grouped suites: every group has one baseline row; ratio = baseline time / row time.

#: (description, group, method name, check on the ratio)
Target = tuple[str, str, str, Callable[[float], bool]]


def group_ratios(results: Sequence[Result]) -> dict[tuple[str, str, int], float]:
    base = {(r.group, r.isl): r.total_us() for r in results if r.baseline}
    return {(r.group, r.name, r.isl): base[(r.group, r.isl)] / r.total_us() for r in results}


def print_grouped_table(results: Sequence[Result]) -> None:
    isls = sorted({r.isl for r in results})
    rat = group_ratios(results)
    names: list[tuple[str, str]] = []
    for r in results:
        if (r.group, r.name) not in names:
            names.append((r.group, r.name))
    width = max(36, 2 + max(len(n) for _, n in names))
    by = {(r.group, r.name, r.isl): r for r in results}
    print(f"{'method':<{width}}" + "".join(f"{'ISL ' + format(i, ','):>30}" for i in isls))
    print(f"{'':<{width}}" + "".join(f"{'µs':>12}{'±IQR':>7}{'ratio':>11}" for _ in isls))
    group = None
    for g, name in names:
        if g != group:
            group = g
            print(f"-- {g}")
        cells = []
        for i in isls:
            r = by[(g, name, i)]
            cells.append(f"{r.total_us():>12.2f}{max(s.iqr_pct for s in r.stats.values()):>6.0f}%"
                         f"{rat[(g, name, i)]:>10.2f}x{'*' if r.baseline else ' '}")
        print(f"  {name:<{width - 2}}" + "".join(cells))


def check_grouped_targets(results: Sequence[Result], targets: Sequence[Target],
                          isl: int) -> bool:
    """Print each target's measured ratio with ok/MISSED; True when all hold."""
    if not any(r.isl == isl for r in results):
        return True
    rat = group_ratios(results)
    by = {(r.group, r.name, r.isl): r for r in results}
    base = {(r.group, r.isl): r for r in results if r.baseline}
    print(f"\nTargets at ISL {isl:,} (ratios from this run):")
    ok_all = True
    for desc, g, name, check in targets:
        ratio = rat[(g, name, isl)]
        ok = check(ratio)
        ok_all &= ok
        shown = f"{ratio:.1f}x faster" if ratio >= 1 else f"{1 / ratio:.2f}x the baseline's time"
        print(f"  [{'ok' if ok else 'MISSED'}] {desc}: {shown} "
              f"({by[(g, name, isl)].total_us():.1f} µs vs {base[(g, isl)].total_us():.1f} µs)")
    return ok_all


def grouped_suite_main(argv: list[str] | None, *, suite: str, doc: str, default_isl: str,
                       methods_for: Callable[[int], Sequence[Method]],
                       targets: Sequence[Target], note: str = "",
                       after: Callable[[Sequence[Result]], None] | None = None) -> int:
    """The command line of a grouped suite (bench_core, bench_request): measure, print the table
    and the targets, optionally write JSON. A missed target fails only with --check-targets."""
    import argparse
    import json

    p = argparse.ArgumentParser(prog=f"tokenwire bench-{suite}", description=doc)
    p.add_argument("--isl", default=default_isl, help="comma-separated prompt lengths")
    p.add_argument("--repeat", type=int, default=15, help="timed rounds per method (median)")
    p.add_argument("--round-ms", type=float, default=20.0, help="target duration of one round")
    p.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    p.add_argument("--check-targets", action="store_true",
                   help="exit 1 when a target is missed (off by default: shared machines are noisy)")
    args = p.parse_args(argv)
    isls = [int(x) for x in args.isl.split(",") if x]
    print(f"# tokenwire {suite} benchmark — {machine()}")
    print(f"# median of {args.repeat} interleaved rounds of ~{args.round_ms:g} ms; "
          f"ratio = baseline (*) time / method time{note}\n")
    results: list[Result] = []
    for isl in isls:
        results += measure(methods_for(isl), isl, args.repeat, args.round_ms / 1e3, stderr_progress)
    end_progress()
    print_grouped_table(results)
    ok = check_grouped_targets(results, targets, 40_000)
    if after:
        after(results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results_json(results, suite=suite), f, indent=1)
        print(f"\nwrote {args.json}")
    return 0 if ok or not args.check_targets else 1
