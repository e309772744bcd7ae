"""Benchmark tokenwire's core conversions against numpy and array.array, side by side.

    python bench/bench_core.py                      # ISL 1k / 40k / 128k, table + target check
    python bench/bench_core.py --isl 40000 --json out.json --repeat 31

Every method of a group is measured in the same process and interleaved round by round (so a
noisy neighbour hurts all of them alike); each figure is the median of `--repeat` rounds, each
round timing a batch of calls sized to take about `--round-ms`. The spread column is the
interquartile range relative to the median. Ratios are against the group's baseline (marked *).
"""

from __future__ import annotations

import argparse
import array
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np

import tokenwire

VOCAB = 151_936      # Qwen2 / Qwen3 vocabulary size


def token_stream(n: int, vocab: int = VOCAB, seed: int = 0) -> np.ndarray:
    """Seeded, realistic ids: Zipf-distributed ranks mapped through a fixed vocabulary shuffle
    (frequent tokens are not all small ids in real tokenizers)."""
    rng = np.random.default_rng(seed)
    ranks = rng.zipf(1.2, size=n) - 1
    ranks = ranks[ranks < vocab] if ranks.max() >= vocab else ranks
    while ranks.size < n:   # refill what the vocabulary cut off
        extra = rng.zipf(1.2, size=n) - 1
        ranks = np.concatenate([ranks, extra[extra < vocab]])
    perm = np.random.default_rng(12345).permutation(vocab)
    return perm[ranks[:n]].astype(np.int32)


@dataclass
class Method:
    group: str
    name: str
    fn: Callable[[], object]
    baseline: bool = False


@dataclass
class Row:
    group: str
    name: str
    isl: int
    median_us: float
    iqr_pct: float
    ratio: float = float("nan")      # baseline time / this time (> 1 means faster)
    baseline: bool = False
    samples_us: list[float] = field(default_factory=list)


def methods_for(n: int) -> list[Method]:
    ids = token_stream(n)
    lst = ids.tolist()
    i64 = ids.astype(np.int64)
    strided = np.repeat(ids, 2)[::2]
    dst = np.empty_like(ids)
    tv = tokenwire.as_tokens(ids)
    arr = array.array("i", lst)
    return [
        # as_tokens from a native int32 buffer: the target is <= 3x a bare memcpy (np.copyto)
        Method("int32 buffer -> native", "np.copyto(dst, ndarray)", lambda: np.copyto(dst, ids), True),
        Method("int32 buffer -> native", "tokenwire.as_tokens(ndarray)", lambda: tokenwire.as_tokens(ids)),
        Method("int32 buffer -> native", "tokenwire.as_tokens(array('i'))", lambda: tokenwire.as_tokens(arr)),
        Method("int32 buffer -> native", "tokenwire.as_tokens(strided)", lambda: tokenwire.as_tokens(strided)),
        Method("int32 buffer -> native", "ndarray.copy()", lambda: ids.copy()),
        # as_tokens from a list: the target is >= 10x faster than np.array(list, dtype=int32)
        Method("list[int] -> native", "np.array(list, dtype=int32)", lambda: np.array(lst, dtype=np.int32), True),
        Method("list[int] -> native", "tokenwire.as_tokens(list)", lambda: tokenwire.as_tokens(lst)),
        Method("list[int] -> native", "array.array('i', list)", lambda: array.array("i", lst)),
        Method("list[int] -> native", "np.fromiter(list, int32)", lambda: np.fromiter(lst, np.int32, n)),
        # other integer dtypes
        Method("int64 ndarray -> int32", "ndarray.astype(int32)", lambda: i64.astype(np.int32), True),
        Method("int64 ndarray -> int32", "tokenwire.as_tokens(int64)", lambda: tokenwire.as_tokens(i64)),
        # materializing list[int]: the target is >= 4x faster than ndarray.tolist()
        Method("native -> list[int]", "ndarray.tolist()", lambda: ids.tolist(), True),
        Method("native -> list[int]", "TokenVector.tolist()", lambda: tv.tolist()),
        Method("native -> list[int]", "tokenwire.tolist(ndarray)", lambda: tokenwire.tolist(ids)),
        Method("native -> list[int]", "array.array.tolist()", lambda: arr.tolist()),
    ]


def _calibrate(fn: Callable[[], object], round_s: float) -> int:
    number = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        dt = time.perf_counter() - t0
        if dt >= round_s / 4 or number >= 1 << 20:
            return max(1, int(number * round_s / max(dt, 1e-9)))
        number *= 4


def measure(methods: list[Method], isl: int, repeat: int, round_s: float) -> list[Row]:
    numbers = [_calibrate(m.fn, round_s) for m in methods]    # also the warm-up
    samples: list[list[float]] = [[] for _ in methods]
    for _ in range(repeat):
        for m, number, out in zip(methods, numbers, samples):
            t0 = time.perf_counter()
            for _ in range(number):
                m.fn()
            out.append((time.perf_counter() - t0) / number * 1e6)
    rows = []
    for m, s in zip(methods, samples):
        q = statistics.quantiles(s, n=4) if len(s) >= 2 else [s[0]] * 3
        med = statistics.median(s)
        rows.append(Row(m.group, m.name, isl, med, 100 * (q[2] - q[0]) / med, baseline=m.baseline,
                        samples_us=s))
    base = {r.group: r.median_us for r in rows if r.baseline}
    for r in rows:
        r.ratio = base[r.group] / r.median_us
    return rows


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return (f"{cpu}, {os.cpu_count()} cores; Python {platform.python_version()}, "
            f"numpy {np.__version__}, tokenwire {tokenwire.__version__}")


def print_table(rows: list[Row]) -> None:
    isls = sorted({r.isl for r in rows})
    names: list[tuple[str, str]] = []
    for r in rows:
        if (r.group, r.name) not in names:
            names.append((r.group, r.name))
    by = {(r.group, r.name, r.isl): r for r in rows}
    head = f"{'method':<36}" + "".join(f"{'ISL ' + format(i, ','):>30}" for i in isls)
    sub = f"{'':<36}" + "".join(f"{'µs':>12}{'±IQR':>7}{'ratio':>11}" for _ in isls)
    group = None
    print(head)
    print(sub)
    for g, name in names:
        if g != group:
            group = g
            print(f"-- {g}")
        cells = []
        for i in isls:
            r = by[(g, name, i)]
            mark = "*" if r.baseline else " "
            cells.append(f"{r.median_us:>12.2f}{r.iqr_pct:>6.0f}%{r.ratio:>10.2f}x{mark}")
        print(f"  {name:<34}" + "".join(cells))


TARGETS = [
    # (description, group, method, baseline-relative check)
    ("as_tokens(int32 ndarray) <= 3x np.copyto", "int32 buffer -> native",
     "tokenwire.as_tokens(ndarray)", lambda ratio: 1 / ratio <= 3.0),
    ("as_tokens(list) >= 10x faster than np.array(list, int32)", "list[int] -> native",
     "tokenwire.as_tokens(list)", lambda ratio: ratio >= 10.0),
    ("TokenVector.tolist() >= 4x faster than ndarray.tolist()", "native -> list[int]",
     "TokenVector.tolist()", lambda ratio: ratio >= 4.0),
]


def check_targets(rows: list[Row], isl: int = 40_000) -> bool:
    by = {(r.group, r.name, r.isl): r for r in rows}
    if not any(r.isl == isl for r in rows):
        return True
    print(f"\nTargets at ISL {isl:,} (ratios from this run):")
    ok_all = True
    for desc, g, name, check in TARGETS:
        r = by[(g, name, isl)]
        ok = check(r.ratio)
        ok_all &= ok
        shown = f"{1 / r.ratio:.2f}x the baseline's time" if r.ratio < 1 else f"{r.ratio:.1f}x faster"
        print(f"  [{'ok' if ok else 'MISSED'}] {desc}: {shown}")
    return ok_all


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
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
    rows: list[Row] = []
    for isl in isls:
        print(f"measuring ISL {isl:,} ...", file=sys.stderr, flush=True)
        rows += measure(methods_for(isl), isl, args.repeat, args.round_ms / 1e3)
    print_table(rows)
    ok = check_targets(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine(), "rows": [asdict(r) for r in rows]}, f, indent=1)
        print(f"\nwrote {args.json}")
    return 0 if ok or not args.check_targets else 1


if __name__ == "__main__":
    sys.exit(main())
