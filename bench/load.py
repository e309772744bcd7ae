"""Under load: one proxy process pushes requests to one worker process over zmq, as fast as a
bound on in-flight requests allows and at Poisson rates below that; docs/benchmarks.md, "Under
load", describes the rows and the run.
"""

from __future__ import annotations

import os
import queue
import random
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from tokenwire import shm
from tokenwire._core import malloc_settling
from bench.e2e import FLOOR, ProxyEnd, make_request, send_message, streams
from bench.engine import build_for, engine_label, engine_option
from bench.harness import (Target, arg_parser, counts, end_progress, exit_on_sigterm,
                           gil_enabled, ints, load_average, machine, percentile, pyplot,
                           report_targets, save_plot, stderr_progress, write_json)

#: row -> (bench.e2e's mode for its serialize / receive, requests per message)
ROWS: dict[str, tuple[str, int]] = {
    "baseline": ("baseline", 1),
    "tokenwire": ("tokenwire", 1),
    "tokenwire-oob": ("tokenwire-oob", 1),
    "tokenwire-shm": ("tokenwire-shm", 1),
    "tokenwire-oob-batch8": ("tokenwire-oob", 8),
    FLOOR: (FLOOR, 1),
}
#: Requests in flight at most in the closed loop.
WINDOW = 64
#: Distinct id streams per ISL the proxy's requests cycle through.
POOL = 8
FRACTIONS = (0.25, 0.5, 0.75, 0.9)
#: Untimed closed-loop seconds before each row's measurements (caches, allocators, the ring).
WARMUP_S = 0.2
#: The open loop's in-flight bound: far above a stable queue, a guard against memory growth.
OPEN_CAP = 16 * WINDOW
TARGET_ISL = 40_000


def pool(isl: int) -> tuple[int, int, int]:
    """The `streams` of a row's requests at `isl` (its ISL, seed, count)."""
    return isl, 7000 + 1000 * isl, POOL


# --------------------------------------------------------------------------------------------
# Results


@dataclass
class OpenPoint:
    fraction: float
    offered_rps: float
    achieved_rps: float
    requests: int
    p50_us: float
    p99_us: float


@dataclass
class LoadRow:
    row: str
    isl: int
    seconds: float
    threads: int = 1                     # the proxy's serializing threads
    requests: int = 0
    rps: float = 0.0
    proxy_cpu_us: float = 0.0
    worker_cpu_us: float = 0.0
    proxy_main_us: float = 0.0           # of which the main thread's (the rest: zmq's I/O)
    worker_main_us: float = 0.0
    p50_us: float = 0.0
    p99_us: float = 0.0
    wrong: int = 0
    checked: bool = True                 # the worker compared every request's ids (not the floor)
    open_loop: list[OpenPoint] = field(default_factory=list)

    @property
    def correct(self) -> bool:
        return self.wrong == 0


# --------------------------------------------------------------------------------------------
# Proxy


class Proxy(ProxyEnd):
    """The proxy's side with a slot for every request in flight (a server sizes its ring for its
    window); with `threads` > 1, the serializing threads, each with its socket."""

    def __init__(self, engine_path: str | None = None, threads: int = 1,
                 shm_rows: bool = True) -> None:
        super().__init__(engine_path, False, slots=WINDOW + 16,
                         extra=threads if threads > 1 else 0, shm_rows=shm_rows)
        self.threads = threads
        self.todo: queue.SimpleQueue[tuple[str, int, list[list[int]], int] | None] = \
            queue.SimpleQueue()
        for sock in self.extra:
            # A send the worker no longer takes fails after 10 s (the thread reports it and
            # ends) rather than blocking the thread, and close() with it, for ever.
            sock.setsockopt(self.zmq.SNDTIMEO, 10_000)
        self.workers = [threading.Thread(target=self._serialize, args=(sock,), daemon=True)
                        for sock in self.extra]
        self.starts: dict[int, float] = {}
        self.lat_us: list[float] = []
        self.next_id = 0
        for t in self.workers:
            t.start()

    def _serialize(self, sock: Any) -> None:
        """A serializing thread: builds and serializes the requests of each message it is handed
        and sends it on its own socket, until handed None. Its requests are built from lists of
        its own, as a request handler's tokenizer returns them: on a free-threaded build an
        object another thread created is reference-counted atomically, which would slow the
        plain-list pickle (it increfs every item) more than the tokenwire rows."""
        source: Any = None
        mine: list[list[int]] = []
        try:
            while (job := self.todo.get()) is not None:
                mode, batch, lists, first = job
                if lists is not source:         # a new ISL: made here, outside the timing
                    source, mine = lists, [np.array(x, np.int32).tolist() for x in lists]
                reqs = [make_request(mode, mine[i % POOL], i) for i in range(first, first + batch)]
                send_message(sock, mode, reqs if batch > 1 else reqs[0], self.sender,
                             first + batch - 1)
        except BaseException as e:          # reported by the main thread's next wait
            self.failed.append(e)

    def _discard_jobs(self) -> None:
        """Drops the messages no serializing thread has taken yet (a phase that failed)."""
        while True:
            try:
                self.todo.get_nowait()
            except queue.Empty:
                return

    def close(self, timeout: float = 5) -> None:
        self._discard_jobs()
        for _ in self.workers:
            self.todo.put(None)
        for t in self.workers:
            t.join(15)                          # a blocked send gives up after 10 s
        super().close(timeout)

    def _drain(self, block: bool) -> None:
        """Take the acks that have arrived (at least one with `block`)."""
        zmq, acks, starts, lat = self.zmq, self.results, self.starts, self.lat_us
        if block:
            self.wait()
        while True:
            try:
                msg = acks.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            now = time.perf_counter()
            for i in np.frombuffer(msg, dtype=np.int64).tolist():
                lat.append((now - starts.pop(i)) * 1e6)

    def _message(self, mode: str, batch: int, lists: list[list[int]], at: float) -> None:
        """A message of `batch` requests arriving at `at`: built, serialized and sent here, or
        handed to the serializing threads."""
        first = self.next_id
        self.next_id += batch
        for i in range(first, first + batch):
            self.starts[i] = at
        if self.workers:
            self.todo.put((mode, batch, lists, first))
            return
        reqs = [make_request(mode, lists[i % POOL], i) for i in range(first, first + batch)]
        send_message(self.data, mode, reqs if batch > 1 else reqs[0], self.sender,
                     first + batch - 1)

    def phase(self, res: LoadRow, lists: list[list[int]], seconds: float,
              rate: float | None) -> tuple[int, float, tuple[float, float], dict[str, Any]]:
        """One phase of row `res`: closed loop (`rate` None) or Poisson arrivals at `rate`
        requests/s. (requests, wall s, proxy CPU s (process, main thread), the worker's report);
        latencies in self.lat_us, the requests whose ids arrived wrong added to res.wrong."""
        mode, batch = ROWS[res.row]
        self.control(mode, "report")                 # (of the phase before: set-up, warm-up)
        self.lat_us = []
        pc, rng = time.perf_counter, random.Random(len(lists) * 7919 + int(rate or 0))
        starts = self.starts
        cpu0, thread0, t0 = time.process_time(), time.thread_time(), pc()
        end = t0 + seconds
        if rate is None:
            while pc() < end:
                while len(starts) + batch <= WINDOW:
                    self._message(mode, batch, lists, pc())
                self._drain(block=True)
        else:
            t_next = t0 + rng.expovariate(rate / batch)
            while t_next < end:
                now = pc()
                if now >= t_next and len(starts) + batch <= OPEN_CAP:
                    self._message(mode, batch, lists, t_next)
                    t_next += rng.expovariate(rate / batch)
                    continue
                if self.results.poll(0):
                    self._drain(block=False)
                elif len(starts) + batch > OPEN_CAP:
                    self._drain(block=True)
                elif t_next - now >= 2e-3:
                    if self.results.poll(int((t_next - now) * 1e3) - 1):
                        self._drain(block=False)
                else:
                    time.sleep(max(0.0, t_next - now - 60e-6))
        while starts:
            self._drain(block=True)
        wall = pc() - t0
        cpu = (time.process_time() - cpu0, time.thread_time() - thread0)
        report = self.control(mode, "report")
        res.wrong += report["bad"]
        return report["requests"], wall, cpu, report

    def run_row(self, row: str, isl: int, lists: list[list[int]], seconds: float,
                fractions: Sequence[float]) -> LoadRow:
        mode, batch = ROWS[row]
        self.row(mode, *pool(isl))
        res = LoadRow(row, isl, seconds, self.threads, checked=mode != FLOOR)
        try:
            what = f"load: ISL {isl:,}, {row}" + (f", {self.threads} proxy threads"
                                                    if self.threads > 1 else "")
            stderr_progress(f"{what}: warm-up")
            self.phase(res, lists, WARMUP_S, None)
            stderr_progress(f"{what}: closed loop")
            n, wall, cpu, rep = self.phase(res, lists, seconds, None)
            res.requests, res.rps = n, n / wall
            res.proxy_cpu_us, res.worker_cpu_us = cpu[0] / n * 1e6, rep["cpu_s"] / n * 1e6
            res.proxy_main_us, res.worker_main_us = cpu[1] / n * 1e6, rep["thread_s"] / n * 1e6
            res.p50_us, res.p99_us = percentile(self.lat_us, 50), percentile(self.lat_us, 99)
            for frac in fractions:
                stderr_progress(f"{what}: open loop at {frac:g} x saturation")
                n, wall, _, _ = self.phase(res, lists, seconds, frac * res.rps)
                res.open_loop.append(OpenPoint(frac, frac * res.rps, n / wall, n,
                                               percentile(self.lat_us, 50),
                                               percentile(self.lat_us, 99)))
        finally:
            self._discard_jobs()
            self.control(mode, "done")
        return res


# --------------------------------------------------------------------------------------------
# Report


class LoadFigures:
    """What the targets read: the rows of one run at TARGET_ISL and one proxy thread (KeyError
    when not measured)."""

    def __init__(self, rows: Sequence[LoadRow]) -> None:
        self.rows = [r for r in rows if r.isl == TARGET_ISL and r.threads == 1]
        if not any(r.row == "baseline" for r in self.rows) or len(self.rows) < 2:
            raise KeyError(TARGET_ISL)
        self.base = next(r for r in self.rows if r.row == "baseline")

    def best(self, key: Callable[[LoadRow], float]) -> LoadRow:
        return max((r for r in self.rows if r.row not in ("baseline", FLOOR)), key=key)

    def half(self) -> OpenPoint:
        """The best row's open loop at 0.5x its saturation."""
        return next(p for p in self.best(lambda r: r.rps).open_loop if p.fraction == 0.5)


def _ratio(what: str, bound: float, attr: str, unit: str) -> Target:
    """The best tokenwire row's `attr` against the baseline's, >= `bound` times better (more
    requests/s, less CPU)."""
    more = attr == "rps"

    def key(r: LoadRow) -> float:
        return float(getattr(r, attr)) * (1 if more else -1)

    def value(f: LoadFigures) -> float:
        a, b = float(getattr(f.best(key), attr)), float(getattr(f.base, attr))
        return a / b if more else b / a

    def shown(f: LoadFigures, v: float) -> str:
        b = f.best(key)
        return (f"{v:.1f}x ({b.row}: {getattr(b, attr):,.{0 if more else 1}f} {unit} vs baseline "
                f"{getattr(f.base, attr):,.{0 if more else 1}f} {unit}; closed loop)")
    return Target(f"ISL {TARGET_ISL:,}: {what} >= {bound:g}x" + ("" if more else " lower")
                  + (" the baseline's requests/s" if more else ""), value, lambda v: v >= bound,
                  shown)


TARGETS = [
    _ratio("best tokenwire row", 20, "rps", "req/s"),
    _ratio("worker CPU per request", 25, "worker_cpu_us", "µs"),
    _ratio("proxy CPU per request", 8, "proxy_cpu_us", "µs"),
    Target(f"ISL {TARGET_ISL:,}: open loop at 0.5x the best row's saturation, p99 <= 3x p50",
           lambda f: f.half().p99_us / f.half().p50_us, lambda v: v <= 3,
           lambda f, v: (f"{v:.1f}x ({f.best(lambda r: r.rps).row}: p99 "
                         f"{f.half().p99_us:,.0f} µs, p50 {f.half().p50_us:,.0f} µs)")),
]


def _label(r: LoadRow) -> str:
    return r.row if r.threads == 1 else f"{r.row} x{r.threads}t"


def print_table(rows: Sequence[LoadRow]) -> None:
    base = {(r.isl, r.threads): r for r in rows if r.row == "baseline"}
    fracs = sorted({p.fraction for r in rows for p in r.open_loop})
    print(f"{'ISL':>8}  {'row':<25}{'req/s':>9}{'x':>7}{'proxy CPU':>11}{'x':>7}"
          f"{'worker CPU':>12}{'x':>7}{'p50':>10}{'p99':>10}"
          + "".join(f"{f'open {f:g}: p50':>16}{'p99':>9}" for f in fracs) + "  ok")
    for r in rows:
        b = base.get((r.isl, r.threads), r)
        opened = {p.fraction: p for p in r.open_loop}
        cells = "".join(
            f"{opened[f].p50_us:>14,.0f}µs{opened[f].p99_us:>7,.0f}µs" if f in opened
            else f"{'':>16}{'':>9}" for f in fracs)
        print(f"{r.isl:>8,}  {_label(r):<25}{r.rps:>9,.0f}{r.rps / b.rps:>6.1f}x"
              f"{r.proxy_cpu_us:>9,.1f}µs{b.proxy_cpu_us / r.proxy_cpu_us:>6.1f}x"
              f"{r.worker_cpu_us:>10,.1f}µs{b.worker_cpu_us / r.worker_cpu_us:>6.1f}x"
              f"{r.p50_us:>8,.0f}µs{r.p99_us:>8,.0f}µs{cells}  "
              f"{'n/a' if not r.checked else 'yes' if r.correct else 'NO'}")
    print("\nx = ratio to the baseline (requests/s: row / baseline; CPU: baseline / row); "
          "open f = Poisson arrivals at f x the row's closed-loop requests/s")
    _per_row("CPU per request in the main threads (the rest of each process's: zmq's I/O thread, "
             "and at N proxy threads the serializing threads):", rows, lambda r: (
                 f"proxy {r.proxy_main_us:>9,.1f}µs of {r.proxy_cpu_us:>9,.1f}µs   worker "
                 f"{r.worker_main_us:>9,.1f}µs of {r.worker_cpu_us:>9,.1f}µs"))
    # Against the floor: baseline / floor is the largest ratio to the baseline any row can show.
    floor = {(r.isl, r.threads): r for r in rows if r.row == FLOOR and r.requests}

    def against_floor(r: LoadRow) -> str:
        f = floor[(r.isl, r.threads)]
        return (f"proxy {r.proxy_cpu_us / f.proxy_cpu_us:>5.2f}x floor ({f.proxy_cpu_us:,.1f}µs)"
                f"   worker {r.worker_cpu_us / f.worker_cpu_us:>5.2f}x floor "
                f"({f.worker_cpu_us:,.1f}µs)   requests/s {f.rps / r.rps:>5.2f}x below the "
                f"floor's {f.rps:,.0f}")
    _per_row("Against the floor (CPU per request / the floor's; baseline / floor = the largest "
             "ratio to the baseline this run allows):",
             [r for r in rows if (r.isl, r.threads) in floor and r.row != FLOOR], against_floor)
    one = {(r.isl, r.row): r for r in rows if r.threads == 1}

    def against_one(r: LoadRow) -> str:
        o = one[(r.isl, r.row)]
        return (f"requests/s {r.rps:>9,.0f} = {r.rps / o.rps:>5.2f}x of {o.rps:,.0f}   proxy CPU "
                f"{r.proxy_cpu_us:>9,.1f}µs = {r.proxy_cpu_us / o.proxy_cpu_us:>5.2f}x   p50 "
                f"{r.p50_us:>9,.0f}µs, p99 {r.p99_us:>9,.0f}µs (1 thread: {o.p50_us:,.0f}µs, "
                f"{o.p99_us:,.0f}µs)")
    _per_row("Proxy threads (requests/s and proxy CPU per request at N threads / at 1 thread):",
             [r for r in rows if r.threads > 1 and (r.isl, r.row) in one], against_one)


def _per_row(heading: str, rows: Sequence[LoadRow], line: Callable[[LoadRow], str]) -> None:
    if rows:
        print("\n" + heading)
        for r in rows:
            print(f"  {r.isl:>8,}  {_label(r):<25} {line(r)}")


def plot(rows: Sequence[LoadRow], path: str) -> None:
    """Latency (p50 solid, p99 dashed) against achieved throughput, one panel per ISL."""
    isls = sorted({r.isl for r in rows})
    fig, axes = pyplot().subplots(1, len(isls), figsize=(5.5 * len(isls), 4.5), squeeze=False)
    for ax, isl in zip(axes[0], isls):
        for k, r in enumerate(x for x in rows if x.isl == isl):
            pts = [(p.achieved_rps, p.p50_us, p.p99_us) for p in r.open_loop]
            pts.append((r.rps, r.p50_us, r.p99_us))
            xs = [p[0] for p in pts]
            color = f"C{k}"
            ax.plot(xs, [p[1] / 1e3 for p in pts], "o-", color=color, label=f"{_label(r)} p50")
            ax.plot(xs, [p[2] / 1e3 for p in pts], "x--", color=color, label=f"{_label(r)} p99")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("throughput (requests/s); last point: closed loop")
        ax.set_ylabel("latency (ms)")
        ax.set_title(f"ISL {isl:,}: proxy -> worker, zmq ipc://")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][-1].legend(fontsize=7, ncol=2)
    save_plot(fig, path)


def main(argv: list[str] | None = None) -> int:
    malloc_settling(True)
    p = arg_parser("python -m bench load", __doc__, "ISL 1k/40k, 1 s, the closed loop and the "
                   "open loop at 0.5: a smoke test", check=True, isl="1000,8000,40000,128000")
    p.add_argument("--seconds", type=float, default=None,
                   help="duration of the closed loop and of each open-loop fraction (default 1.5; "
                        "1 with --quick)")
    p.add_argument("--rows", default=",".join(ROWS), help="comma-separated rows")
    p.add_argument("--proxy-threads", default="1", metavar="N,...",
                   help="comma-separated counts of the proxy's serializing threads: every row "
                        "runs at each (default 1; 1 is always run first, the reference)")
    p.add_argument("--plot", metavar="PNG", help="latency (p50, p99) against throughput per row")
    engine_option(p)
    args = p.parse_args(argv)
    isls = [1000, 40_000] if args.quick else ints(args.isl)
    seconds = args.seconds or (1.0 if args.quick else 1.5)
    fractions = (0.5,) if args.quick else FRACTIONS
    names = [x for x in args.rows.split(",") if x]
    threads = counts(p, args.proxy_threads, "--proxy-threads")
    unknown = [x for x in names if x not in ROWS]
    if unknown:
        p.error(f"unknown rows {unknown} (choose from {', '.join(ROWS)})")
    if "tokenwire-shm" in names and not shm.available():
        names.remove("tokenwire-shm")
        stderr_progress("tokenwire-shm: no shared-memory channel on this platform; row skipped")
    exit_on_sigterm()                       # the finally blocks stop the worker, close the segment
    engine_path = build_for(args.engine)
    engine = engine_label(engine_path)
    print(f"# tokenwire load — {machine()}")
    gil = gil_enabled()
    print(f"# proxy threads {', '.join(map(str, threads))}; the GIL "
          f"{'on' if gil else 'off (free-threaded)'}")
    print(f"# load average {load_average()}; proxy -> worker over "
          f"zmq ipc://, closed loop {WINDOW} requests in flight for {seconds:g} s, open loop "
          f"(Poisson) at {', '.join(f'{f:g}' for f in fractions)} x each row's saturation; CPU = "
          f"process CPU time / requests; latency = request built -> ack; engine: {engine}\n")
    rows: list[LoadRow] = []
    proxies: dict[int, Proxy] = {}
    try:
        for n in threads:
            proxies[n] = Proxy(engine_path, n, shm_rows=n == 1 and "tokenwire-shm" in names)
        for isl in isls:
            # The tokenizer's lists, built once: make_request takes them as they are.
            lists = [ids.tolist() for ids in streams(*pool(isl))]
            for name in names:
                for n, proxy in proxies.items():
                    if n == 1 or name != "tokenwire-shm":    # a Sender is one thread's
                        rows.append(proxy.run_row(name, isl, lists, seconds, fractions))
    finally:
        for proxy in proxies.values():
            proxy.close()
    end_progress()
    print_table(rows)
    try:
        targets_ok = report_targets(LoadFigures(rows), TARGETS,
                                    f"Targets (this run, ISL {TARGET_ISL:,}; engine: {engine}):")
    except KeyError:
        targets_ok = True
    wrong = [r for r in rows if not r.correct]
    for r in wrong:
        print(f"bench load: ids arrived wrong in row {r.row} at ISL {r.isl:,} "
              f"({r.wrong} request(s))", file=sys.stderr)
    print(f"\ncorrectness: tokens received {'!=' if wrong else '=='} tokens sent "
          f"(every request of every row but the floor checked by the worker)")
    write_json(args.json, {"machine": machine(), "loadavg": os.getloadavg(), "window": WINDOW,
                           "seconds": seconds, "engine": engine, "gil": gil,
                           "proxy_threads": threads,
                           "rows": [{**asdict(r), "correct": r.correct} for r in rows]})
    if args.plot:
        plot(rows, args.plot)
    return 1 if wrong or (args.check_targets and not targets_ok) else 0


if __name__ == "__main__":
    sys.exit(main())
