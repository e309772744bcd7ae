"""Threads: does tokenwire's work scale across threads of one process (free-threaded CPython)?
docs/benchmarks.md, "Threads", describes the rows, the columns and the target.
"""

from __future__ import annotations

import math
import os
import pickle
import platform
import statistics
import sys
import sysconfig
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import tokenwire
from tokenwire import GenerationRequest, token_buffer
from bench.data import PlainGenerationRequest, SamplingParams, token_stream
from bench.harness import (Op, Stat, Target, arg_parser, calibrate, counts as thread_counts,
                           end_progress, gil_enabled, machine, report_targets, stderr_progress,
                           write_json)

try:
    import resource
    RUSAGE_THREAD: int | None = getattr(resource, "RUSAGE_THREAD", None)     # Linux
except ImportError:                                                          # Windows
    RUSAGE_THREAD = None

PROTOCOL = 5
#: Untimed operations each thread runs on its own inputs before the barrier.
WARMUP = 3
#: The target for the tokenwire rows at 2 threads: this scaling, or this fraction of the
#: floor row's.
TARGET_SCALING = 1.8
TARGET_OF_FLOOR = 0.9


def round_trip(ids: np.ndarray) -> Op:
    lst = ids.tolist()                      # the tokenizer's output, this thread's own list

    def op() -> Any:
        req = GenerationRequest(tokenwire.as_tokens(lst), SamplingParams(), id=1)
        got = pickle.loads(pickle.dumps(req, protocol=PROTOCOL))
        return token_buffer(got, "prompt_token_ids")
    return op


def plain_list(ids: np.ndarray) -> Op:
    lst = ids.tolist()

    def op() -> Any:
        req = PlainGenerationRequest(lst, SamplingParams(), id=1)
        got = pickle.loads(pickle.dumps(req, protocol=PROTOCOL))
        return np.array(got.prompt_token_ids, dtype=np.int32)
    return op


def pfor(ids: np.ndarray) -> Op:
    tv = tokenwire.as_tokens(ids)
    return lambda: tokenwire.decode(tokenwire.encode(tv, codec="pfor"))


def floor(ids: np.ndarray) -> Op:
    dst = np.empty_like(ids)

    def op() -> Any:
        np.copyto(dst, ids)
        return dst
    return op


@dataclass
class Row:
    name: str
    make: Callable[[np.ndarray], Op]     # a thread's operation, built from its own ids
    tokenwire: bool = False              # the target applies


ROWS = [
    Row("tokenwire round trip", round_trip, tokenwire=True),
    Row("plain-list baseline", plain_list),
    Row("pfor encode + decode", pfor, tokenwire=True),
    Row("floor: memcpy (np.copyto)", floor),
]
FLOOR = ROWS[-1].name


def minor_faults() -> int:
    """The calling thread's minor page faults so far (0 where the OS does not count them)."""
    return 0 if RUSAGE_THREAD is None else resource.getrusage(RUSAGE_THREAD).ru_minflt


def run_threads(row: Row, inputs: Sequence[np.ndarray], ops: int) -> tuple[float, float, float]:
    """`len(inputs)` threads, each on its own copy of its ids, released together after the
    warm-up, `ops` operations each: total operations per second of wall time; the CPU time the
    threads spent in their timed loops per second of wall time (N when all N ran all the time;
    less when they waited: for a lock, the GIL, a stop-the-world collection, or a CPU another
    process held); minor page faults per operation (memory the allocator gave back to the OS
    and touches again). Every thread checks its last result against its ids (a thread-safety
    bug shows as wrong ids)."""
    k = len(inputs)
    barrier = threading.Barrier(k)
    starts, ends, cpu, faults = [0.0] * k, [0.0] * k, [0.0] * k, [0] * k
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            ids = inputs[t].copy()
            op = row.make(ids)
            for _ in range(WARMUP):
                op()
            barrier.wait()
            t0, c0, f0 = time.perf_counter(), time.thread_time(), minor_faults()
            for _ in range(ops):
                op()
            ends[t], cpu[t] = time.perf_counter(), time.thread_time() - c0
            starts[t], faults[t] = t0, minor_faults() - f0
            if not np.array_equal(np.asarray(op()), ids):
                raise AssertionError(f"{row.name}: thread {t} of {k} got wrong ids")
        except threading.BrokenBarrierError:
            pass                            # another thread failed: its error is reported
        except BaseException as e:
            errors.append(e)
            barrier.abort()

    threads = [threading.Thread(target=work, args=(t,), name=f"bench-{t}") for t in range(k)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]
    wall = max(ends) - min(starts)
    return k * ops / wall, sum(cpu) / wall, sum(faults) / (k * ops)


@dataclass
class Figure:
    row: str
    threads: int
    ops: int                     # per thread
    samples: list[float]         # ops/s, one per round
    cpu: list[float]             # the threads' CPU seconds per wall second, one per round
    faults: list[float]          # minor page faults per operation, one per round

    def medians(self) -> tuple[float, float, float, float]:
        """ops/s, its spread (IQR %), CPU per wall second, faults per operation (NaN where the
        OS does not count them)."""
        s = Stat.of(self.samples)
        return (s.median_us, s.iqr_pct, statistics.median(self.cpu),
                statistics.median(self.faults) if RUSAGE_THREAD is not None else math.nan)


class Figures:
    """The run's figures by (row, threads), and the scaling ratios taken from them."""

    def __init__(self, figures: Sequence[Figure]) -> None:
        self.by = {(f.row, f.threads): f for f in figures}

    def scaling(self, row: str, n: int) -> float:
        return self.by[(row, n)].medians()[0] / self.by[(row, 1)].medians()[0]

    def of_floor(self, row: str, n: int) -> float:
        return self.scaling(row, n) / self.scaling(FLOOR, n)


def busy_cpu_seconds() -> float | None:
    """CPU seconds every process on the machine has used since boot (/proc/stat), or None."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)          # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")        # up to steal


def measure(rows: Sequence[Row], counts: Sequence[int], isl: int, repeat: int, seconds: float,
            ops: int | None) -> tuple[list[Figure], float | None]:
    """The figures, and the CPUs other processes kept busy on average meanwhile (None when
    /proc/stat cannot tell): N threads need N free CPUs."""
    inputs = [token_stream(isl, seed=t) for t in range(max(counts))]
    figures: dict[tuple[str, int], Figure] = {}
    for r in rows:
        # The first use of a request class configures it (tokenwire caches per-class state):
        # here, in one thread, as a server's first request would; the threads measure the
        # steady state. (The calibration doubles as this warm-up.)
        warm = r.make(inputs[0].copy())
        n = ops or calibrate(warm, seconds)
        warm()
        figures.update({(r.name, k): Figure(r.name, k, n, [], [], []) for k in counts})
    busy0, own0, t0 = busy_cpu_seconds(), os.times(), time.perf_counter()
    for i in range(repeat):
        for r in rows:
            stderr_progress(f"round {i + 1}/{repeat}: {r.name}")
            for f in (figures[(r.name, k)] for k in counts):
                for samples, v in zip((f.samples, f.cpu, f.faults),
                                      run_threads(r, inputs[:f.threads], f.ops)):
                    samples.append(v)
    busy1, own1, wall = busy_cpu_seconds(), os.times(), time.perf_counter() - t0
    end_progress()
    others = None
    if busy0 is not None and busy1 is not None:
        own = own1.user + own1.system - own0.user - own0.system
        others = max(0.0, (busy1 - busy0 - own) / wall)
    return list(figures.values()), others


def print_table(figures: Figures, rows: Sequence[Row], counts: Sequence[int]) -> None:
    many = [k for k in counts if k > 1]
    width = max(len(r.name) for r in rows) + 4
    print(f"{'':<{width}}" + "".join(f"{format(k, ',') + ' thread' + 's' * (k > 1):>32}"
                                     for k in counts)
          + "".join(f"{'scaling ' + str(k) + '/1':>13}{'x floor':>9}" for k in many))
    print(f"{'row':<{width}}"
          + "".join(f"{'ops/s':>13}{'±IQR':>7}{'CPU':>5}{'flt/op':>7}" for _ in counts)
          + "".join(f"{'':>13}{'scaling':>9}" for _ in many))
    for r in rows:
        medians = [figures.by[(r.name, k)].medians() for k in counts]
        cells = "".join(f"{o:>13,.0f}{iqr:>6.0f}%{cpu:>5.2f}{flt:>7.1f}"
                        for o, iqr, cpu, flt in medians)
        cells += "".join(f"{figures.scaling(r.name, k):>12.2f}x{figures.of_floor(r.name, k):>9.2f}"
                         for k in many)
        print(f"  {r.name:<{width - 2}}{cells}")


def target(name: str) -> Target:
    """At 2 threads: scaling >= 1.8x, or >= 0.9x the floor's. The value is the larger of the two
    margins (>= 1 meets the target)."""
    return Target(
        f"{name}: 2 threads >= {TARGET_SCALING:g}x one thread, or >= {TARGET_OF_FLOOR:g}x the "
        f"floor's scaling",
        lambda f: max(f.scaling(name, 2) / TARGET_SCALING, f.of_floor(name, 2) / TARGET_OF_FLOOR),
        lambda v: v >= 1.0,
        lambda f, v: (f"{f.scaling(name, 2):.2f}x one thread's throughput, "
                      f"{f.of_floor(name, 2):.2f} of the floor's {f.scaling(FLOOR, 2):.2f}x"))


def main(argv: list[str] | None = None) -> int:
    p = arg_parser("python -m bench threads", __doc__, "a smoke run: 20 operations, 2 rounds",
                   check="exit 1 when a target is missed on a free-threaded build with the GIL "
                         "off")
    p.add_argument("--threads", default="1,2",
                   help="comma-separated thread counts (1 is always measured: the reference)")
    p.add_argument("--isl", type=int, default=40_000, help="ids per operation")
    p.add_argument("--seconds", type=float, default=0.2,
                   help="duration of one run of a row at 1 thread (sets the operations per thread)")
    p.add_argument("--ops", type=int, default=None,
                   help="operations per thread per run, instead of --seconds")
    p.add_argument("--repeat", type=int, default=7, help="rounds (median)")
    p.add_argument("--rows", default=None,
                   help="comma-separated substrings of the rows to run (the floor always runs)")
    args = p.parse_args(argv)
    counts = thread_counts(p, args.threads, "--threads")
    if args.isl < 1:
        p.error("--isl must be >= 1")
    ops, repeat = (20, 2) if args.quick else (args.ops, args.repeat)
    rows = [r for r in ROWS if r.name == FLOOR or args.rows is None
            or any(s and s in r.name for s in args.rows.split(","))]

    info = {"python": platform.python_version(),
            "free_threaded": bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
            "gil_enabled": gil_enabled(), "cpu_count": os.cpu_count()}
    print(f"# tokenwire threads benchmark — {machine()}")
    print(f"# {sys.version.splitlines()[0]}; free-threaded build (Py_GIL_DISABLED): "
          f"{'yes' if info['free_threaded'] else 'no'}; GIL enabled now: "
          f"{'yes' if info['gil_enabled'] else 'no'}; os.cpu_count(): {info['cpu_count']}")
    if info["free_threaded"] and info["gil_enabled"]:
        print("# note: a free-threaded build running with the GIL (an extension module that does "
              "not declare free-threading support turned it on at import; PYTHON_GIL=0 keeps it "
              "off)")
    how = (f"{ops} operations per thread" if ops
           else f"operations per thread set for ~{args.seconds:g} s at 1 thread")
    print(f"# {args.isl:,} ids per operation (seeded Zipf stream, 151,936-id vocabulary), each "
          f"thread on its own inputs, released by a Barrier; throughput = total ops / wall time; "
          f"median of {repeat} interleaved rounds, {how}\n")

    figs, others = measure(rows, counts, args.isl, repeat, args.seconds, ops)
    figures = Figures(figs)
    print_table(figures, rows, counts)
    if others is not None:
        print(f"\n  other processes kept {others:.2f} of {info['cpu_count']} CPUs busy during the "
              f"run (/proc/stat)" + ("; N threads need N free CPUs" if others >= 0.1 else ""))
    free = info["free_threaded"] and not info["gil_enabled"]
    heading = ("Targets at 2 threads (from this run):" if free else
               "Targets at 2 threads (for a free-threaded build with the GIL off; this run holds "
               "the GIL, so they are informational):")
    ok = report_targets(figures, [target(r.name) for r in rows if r.tokenwire], heading)
    write_json(args.json, {
        "machine": machine(), "suite": "threads", **info, "isl": args.isl, "threads": counts,
        "repeat": repeat, "other_processes_cpus": others,
        "rows": [{"name": f.row, "threads": f.threads, "ops_per_thread": f.ops,
                  **dict(zip(("ops_per_s", "iqr_pct", "cpu_per_wall", "faults_per_op"),
                             (None if math.isnan(m) else m for m in f.medians()))),
                  "scaling": figures.scaling(f.row, f.threads),
                  "x_floor_scaling": figures.of_floor(f.row, f.threads),
                  "samples_ops_per_s": f.samples, "samples_cpu_per_wall": f.cpu,
                  "samples_faults_per_op": f.faults} for f in figs]})
    return 1 if args.check_targets and free and not ok else 0
