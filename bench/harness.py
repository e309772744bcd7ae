"""What every benchmark shares: measurement, the command line and output, processes and sockets,
targets, and the grouped suites' runner.

Measurement: each method is a set of named operations (`{"time": fn}` or `{"encode": f,
"decode": g}`). Every (method, operation) pair is calibrated to a batch that takes about
`round_s` (one call with `round_s` 0), then all pairs are timed round after round, interleaved,
so that a noisy neighbour slows every peer alike. A figure is the median over rounds of the
per-call time; the spread is the interquartile range relative to the median.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import functools
import importlib.util
import itertools
import json
import math
import operator
import os
import pathlib
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, TypeVar

Op = Callable[[], object]

#: The prompt lengths a suite measures unless told otherwise (--isl): a short prompt, a long
#: context's and the longest the docs quote.
DEFAULT_ISL = "1000,40000,128000"
#: How long a multi-process benchmark waits for its worker's reply (its start, an ack, a report)
#: before it gives up naming what did not come: far above what any reply takes, as a
#: free-threaded CPython 3.13 child can take tens of seconds to import numpy when other work
#: holds every core. A worker that ends is noticed at once.
REPLY_MS = 600_000


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

    @classmethod
    def of(cls, samples: list[float]) -> Stat:
        """The median of `samples` and their interquartile range, % of the median."""
        med = statistics.median(samples)
        q = statistics.quantiles(samples, n=4) if len(samples) >= 2 else [med, med, med]
        return cls(med, 100 * (q[2] - q[0]) / med if med else 0.0, samples)


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


def timed(group: str, name: str, fn: Op, baseline: bool = False,
          nbytes: int | None = None) -> Method:
    """A grouped suite's row of one timed operation."""
    return Method(name, {"time": fn}, group, baseline, nbytes)


def codec_method(name: str, enc: Callable[[], Any],
                 dec_of: Callable[[Any], Callable[[], object]]) -> Method:
    """A codec's row: `enc` makes the wire bytes once here (for the size), `dec_of(blob)` is the
    decoder timed on them."""
    blob = enc()
    size = len(blob) if isinstance(blob, (bytes, bytearray)) else memoryview(blob).nbytes
    return Method(name, {"encode": enc, "decode": dec_of(blob)}, nbytes=size)


def calibrate(fn: Op, round_s: float) -> int:
    """Calls of `fn` that take about `round_s` (at least 1)."""
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
    numbers = [calibrate(fn, round_s) for _, _, fn in pairs]      # doubles as the warm-up
    samples: list[list[float]] = [[] for _ in pairs]
    for r in range(repeat):
        if progress:
            progress(f"ISL {isl:,}: round {r + 1}/{repeat}")
        for (_, _, fn), number, out in zip(pairs, numbers, samples):
            t0 = time.perf_counter()
            for _ in range(number):
                fn()
            out.append((time.perf_counter() - t0) / number * 1e6)
    stats = iter(map(Stat.of, samples))                 # in the pairs' order: method by method
    return [Result(m.name, m.group, isl, {op: next(stats) for op in m.ops}, m.baseline, m.nbytes)
            for m in methods]


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


def gil_enabled() -> bool:
    """Whether the GIL is on now (a free-threaded build may have turned it back on)."""
    return bool(getattr(sys, "_is_gil_enabled", lambda: True)())


def clone_env() -> dict[str, str]:
    """This environment with the clone's root first on PYTHONPATH: processes a benchmark starts
    through another program (mpiexec, ip netns exec) find bench/ from any directory (bench's
    __init__ still puts the installed tokenwire first)."""
    from bench import ROOT
    return dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (ROOT, os.environ.get("PYTHONPATH", "")) if p))


def load_module(name: str, path: str | os.PathLike[str]) -> ModuleType:
    """The module of the file at `path` (Python source or an extension) as `name`, loaded once
    and registered in sys.modules, so that its classes pickle."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def find_tool(name: str) -> str | None:
    """A program from this interpreter's environment (a wheel's cmake, ninja or mpiexec), else
    from PATH; None when neither has it."""
    beside = pathlib.Path(sys.executable).parent / name
    return str(beside) if beside.exists() else shutil.which(name)


def exit_on_sigterm() -> None:
    """SIGTERM raises SystemExit in the main thread, so a benchmark's finally blocks run (its
    process groups killed, its segments and namespaces removed) as they do on ^C."""
    def terminate(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, terminate)


def kill_group(proc: subprocess.Popen[str]) -> None:
    """Kills the process group `proc` leads (started with start_new_session) if it still runs."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def run_group(cmd: Sequence[str], *, env: dict[str, str] | None = None,
              timeout: float) -> subprocess.CompletedProcess[str]:
    """Runs `cmd` in a process group of its own, its output captured; the whole group is killed
    whatever happens here (a timeout, ^C, SIGTERM turned into SystemExit)."""
    proc = subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        kill_group(proc)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def run_tagged(cmd: Sequence[str], tag: str, what: str, timeout: float) -> dict[str, Any]:
    """Runs a benchmark's child `cmd` as `run_group` does, in `clone_env()`: the JSON it printed
    on its last line starting with `tag`, with its exit status as "exit"; RuntimeError with the
    end of its stderr when there is none."""
    run = run_group(cmd, env=clone_env(), timeout=timeout)
    lines = [ln for ln in run.stdout.splitlines() if ln.startswith(tag + " ")]
    if not lines:
        raise RuntimeError(f"{what} printed no result (exit {run.returncode}):\n"
                           f"{run.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(lines[-1].split(" ", 1)[1])
    result["exit"] = run.returncode
    return result


# --------------------------------------------------------------------------------------------
# Command lines and output shared by every suite


def arg_parser(prog: str, doc: str | None, quick: str | None = None, check: bool | str = False,
               isl: str | None = None) -> argparse.ArgumentParser:
    """A suite's parser with the options every suite spells alike: --quick (its help `quick`),
    --json, --isl (comma-separated, default `isl`) and with `check` --check-targets (its help
    `check` when a string)."""
    p = argparse.ArgumentParser(prog=prog, description=(doc or "").split("\n\n")[0])
    if quick:
        p.add_argument("--quick", action="store_true", help=quick)
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    if isl:
        p.add_argument("--isl", default=isl, help="comma-separated prompt lengths")
    if check:
        default = "exit 1 when a target is missed (off by default: shared machines are noisy)"
        p.add_argument("--check-targets", action="store_true",
                       help=check if isinstance(check, str) else default)
    return p


def ints(text: str) -> list[int]:
    """Comma-separated integers, as --isl and the counts take them."""
    return [int(x) for x in text.split(",") if x]


def counts(p: argparse.ArgumentParser, text: str, option: str) -> list[int]:
    """Comma-separated counts of threads, at least 1, with 1 (the reference) among them."""
    try:
        out = sorted({1, *ints(text)})
    except ValueError:
        p.error(f"{option} takes comma-separated counts, got {text!r}")
    if out[0] < 1:
        p.error(f"{option}: a count is at least 1")
    return out


def write_json(path: str | None, doc: object) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(doc, f, indent=1)
        print(f"\nwrote {path}")


def pyplot() -> Any:
    """matplotlib.pyplot drawing to files (Agg); SystemExit naming the extra when missing."""
    try:
        import matplotlib
    except ImportError:
        raise SystemExit("--plot needs matplotlib: pip install '.[bench]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save_plot(fig: Any, path: str) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    pyplot().close(fig)
    print(f"wrote {path}")


def stderr_progress(msg: str) -> None:
    if sys.stderr.isatty():
        print(f"\r\033[K{msg}", end="", file=sys.stderr, flush=True)
    else:
        print(msg, file=sys.stderr, flush=True)


def end_progress() -> None:
    if sys.stderr.isatty():
        print("\r\033[K", end="", file=sys.stderr, flush=True)


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def print_trips(rows: dict[str, dict[str, Any]],
                extra: dict[str, Callable[[dict[str, Any]], str]] | None = None) -> None:
    """Rows timed at p50 and p99 ("p50_ms", "p99_ms"), `extra` columns, and x the first row
    (the baseline) at p50."""
    width, extra = 2 + max(map(len, rows)), extra or {}
    base = next(iter(rows.values()))["p50_ms"]
    print(f"  {'row':<{width}}{'p50 ms':>9}{'p99 ms':>9}" + "".join(f"{k:>10}" for k in extra)
          + f"{'x baseline':>12}")
    for name, r in rows.items():
        print(f"  {name:<{width}}{r['p50_ms']:>9.2f}{r['p99_ms']:>9.2f}"
              + "".join(f"{cell(r):>10}" for cell in extra.values())
              + f"{base / r['p50_ms']:>11.1f}x")


# --------------------------------------------------------------------------------------------
# Processes, sockets, rows and clusters shared by the multi-process benchmarks


class Sockets:
    """zmq sockets of one process, closed together with their context and the temporary
    directory of their ipc:// addresses (tcp:// on loopback where zmq has no ipc)."""

    def __init__(self) -> None:
        import zmq
        self.ctx = zmq.Context()
        self.tcp = not zmq.has("ipc")
        self.dir = tempfile.mkdtemp(prefix="tokenwire-bench-")
        self.addrs: dict[str, str] = {}

    def connect(self, kind: int, addr: str) -> Any:
        sock = self.ctx.socket(kind)
        sock.connect(addr)
        return sock

    def bind(self, kind: int, name: str) -> Any:
        """A socket bound to an address of its own, kept as `self.addrs[name]`."""
        sock = self.ctx.socket(kind)
        if self.tcp:
            self.addrs[name] = f"tcp://127.0.0.1:{sock.bind_to_random_port('tcp://127.0.0.1')}"
        else:
            self.addrs[name] = f"ipc://{self.dir}/{name}"
            sock.bind(self.addrs[name])
        return sock

    def close(self) -> None:
        self.ctx.destroy(linger=0)              # closes every socket made from it, then ends
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Sockets:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@functools.cache
def push_pull(name: str) -> tuple[Any, Any]:
    """A connected zmq PUSH/PULL pair inside this process (ipc://, else tcp://), made once per
    `name` and closed at exit; its PULL side raises zmq.Again after 30 s rather than hang."""
    import zmq
    socks = Sockets()
    atexit.register(socks.close)
    pull = socks.bind(zmq.PULL, name)
    pull.setsockopt(zmq.RCVTIMEO, 30_000)
    return socks.connect(zmq.PUSH, socks.addrs[name]), pull


def spawn(target: Callable[..., object], *args: object) -> Any:
    """`target(*args)` in a fresh interpreter (multiprocessing's spawn), started."""
    import multiprocessing as mp
    proc = mp.get_context("spawn").Process(target=target, args=args, daemon=True)
    proc.start()
    return proc


def stop(proc: Any, timeout: float = 30) -> None:
    """Waits up to `timeout` s for a spawned process to end, then terminates or kills it."""
    proc.join(timeout)
    for end in (proc.terminate, proc.kill):
        if proc.is_alive():
            end()
            proc.join(5)


R = TypeVar("R")


def turns(rows: Sequence[R], count: int, block: int) -> list[tuple[R, int, int]]:
    """The order a benchmark times `count` requests of each row in: (row, lo, hi) turns of
    `block` requests, the rows taking turns (`block` < `count`: interleaved), or each row's
    requests back to back (`block` >= `count`). Which one a benchmark may use is
    docs/benchmarks.md's rule ("Rows: interleaved or back to back")."""
    step = max(1, block)
    return [(row, lo, min(lo + step, count)) for lo in range(0, count, step) for row in rows]


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile of `values` (numpy's linear interpolation); NaN when there are none."""
    import numpy
    return float(numpy.percentile(values, q)) if len(values) else math.nan


def wait_while_parent_lives(sock: Any, parent: int, interval_ms: int = 500,
                            send: bool = False,
                            poll: Callable[[int], object] | None = None) -> bool:
    """Waits until zmq socket `sock` has a message (or, with `send`, can send one without
    blocking; with `poll`, until `poll(interval_ms)` is true): True then, False as soon as this
    process's parent is no longer `parent` (given by pid, so that a parent gone before this
    process started counts too). A benchmark's worker stops on False: a parent killed with
    SIGKILL leaves no worker behind, even one whose peer died first (a PAIR socket's send then
    blocks for ever)."""
    import zmq
    while True:
        if os.getppid() != parent:
            return False
        if (poll(interval_ms) if poll is not None
                else sock.poll(interval_ms, zmq.POLLOUT if send else zmq.POLLIN)):
            return True


@contextlib.contextmanager
def ray_cluster(nodes: int, store: int, resources: tuple[str, str],
                **init: Any) -> Iterator[bool]:
    """A local Ray for the life of the block: with `nodes` 1, ray.init's own cluster (2 CPUs);
    with 2, two raylets on this machine, each with one CPU, an object store of `store` bytes and
    the custom resource `resources[0]` (head) or `resources[1]`, so that an actor can be placed
    on each and objects between them move from store to store. `init` goes to ray.init. Yields
    True when two nodes run. Started from the temporary directory: Ray puts the driver's working
    directory on its workers' sys.path, where a checkout's tokenwire/ would shadow the package."""
    import ray
    from ray.cluster_utils import Cluster

    cluster = None
    cwd = os.getcwd()
    os.chdir(tempfile.gettempdir())
    try:
        if nodes == 2:
            cluster = Cluster(initialize_head=True, head_node_args={
                "num_cpus": 1, "resources": {resources[0]: 1}, "object_store_memory": store,
                "include_dashboard": False})
            cluster.add_node(num_cpus=1, resources={resources[1]: 1}, object_store_memory=store)
            ray.init(address=cluster.address, **init)
            cluster.wait_for_nodes()
        else:
            ray.init(num_cpus=2, include_dashboard=False, object_store_memory=store, **init)
        os.chdir(cwd)
        yield cluster is not None
    finally:
        os.chdir(cwd)
        ray.shutdown()
        if cluster is not None:
            cluster.shutdown()  # type: ignore[no-untyped-call]


# --------------------------------------------------------------------------------------------
# Targets: one kind, one checker, for every suite.


class Figures:
    """The figures of one run, looked up by row: what a `Target` computes its value from. A
    lookup of a row that was not measured raises KeyError (the target is then not shown)."""

    def __init__(self, results: Sequence[Result], isl: int) -> None:
        self.isl = isl
        self._by = {(r.group, r.name, r.isl): r for r in results}
        self._by_name = {(r.name, r.isl): r for r in results}
        self._base = {(r.group, r.isl): r for r in results if r.baseline}

    def row(self, name: str, isl: int | None = None, group: str | None = None) -> Result:
        i = self.isl if isl is None else isl
        return self._by[(group, name, i)] if group is not None else self._by_name[(name, i)]

    def us(self, name: str, op: str | None = None, isl: int | None = None) -> float:
        """A row's median µs for one operation, or for all of them added up."""
        r = self.row(name, isl)
        return r.total_us() if op is None else r.stats[op].median_us

    def baseline(self, group: str) -> Result:
        return self._base[(group, self.isl)]


def verdict(ok: bool | None) -> str:
    """A check's mark, as every benchmark prints it: [ok], [MISSED], or [info] for a figure
    shown beside a target but not held to it (None)."""
    return "[info]" if ok is None else "[ok]" if ok else "[MISSED]"


@dataclass
class Target:
    """A figure of the run and the bound it must meet, printed as `[ok]` or `[MISSED]`; a
    `[MISSED]` line is followed by `miss`, what missing it means for a user."""

    description: str
    value: Callable[[Any], float]
    ok: Callable[[float], bool]
    shown: Callable[[Any, float], str] = lambda f, v: f"{v:.2f}"
    miss: str = ""


def ratio_target(description: str, group: str, name: str,
                 ok: Callable[[float], bool] | float) -> Target:
    """A target on a grouped suite's ratio (baseline time / row time) at the target ISL: `ok`
    checks the ratio, or is the least ratio that meets the target."""
    def shown(f: Figures, ratio: float) -> str:
        head = f"{ratio:.1f}x faster" if ratio >= 1 else f"{1 / ratio:.2f}x the baseline's time"
        return (f"{head} ({f.row(name, group=group).total_us():.1f} µs vs "
                f"{f.baseline(group).total_us():.1f} µs)")
    check = ok if callable(ok) else functools.partial(operator.le, ok)     # ok <= ratio
    return Target(description, lambda f: f.baseline(group).total_us()
                  / f.row(name, group=group).total_us(), check, shown)


def report_targets(figures: Any, targets: Sequence[Target], heading: str) -> bool:
    """Print each target whose figures exist (a KeyError means a row was not measured: --only,
    --isl), with ok/MISSED; True when all of those hold. `figures` is what the targets' value
    functions read: a `Figures`, or a suite's own lookup (e2e's)."""
    lines, ok_all = [], True
    for t in targets:
        try:
            value = t.value(figures)
        except KeyError:
            continue
        ok = t.ok(value)
        ok_all &= ok
        lines.append(f"  {verdict(ok)} {t.description}: {t.shown(figures, value)}")
        if not ok and t.miss:
            lines.append(f"           means: {t.miss}")
    if lines:
        print(f"\n{heading}")
        print("\n".join(lines))
    return ok_all


# --------------------------------------------------------------------------------------------
# Grouped suites: every group has one baseline row; ratio = baseline time / row time.


def group_ratios(results: Sequence[Result]) -> dict[tuple[str, str, int], float]:
    base = {(r.group, r.isl): r.total_us() for r in results if r.baseline}
    return {(r.group, r.name, r.isl): base[(r.group, r.isl)] / r.total_us() for r in results
            if (r.group, r.isl) in base}


def print_grouped_table(results: Sequence[Result]) -> None:
    isls = sorted({r.isl for r in results})
    rat = group_ratios(results)
    names = list(dict.fromkeys((r.group, r.name) for r in results))
    width = max(36, 2 + max(len(n) for _, n in names))
    by = {(r.group, r.name, r.isl): r for r in results}
    print(f"{'method':<{width}}" + "".join(f"{'ISL ' + format(i, ','):>30}" for i in isls))
    print(f"{'':<{width}}" + "".join(f"{'µs':>12}{'±IQR':>7}{'ratio':>11}" for _ in isls))
    for g, rows in itertools.groupby(names, operator.itemgetter(0)):
        print(f"-- {g}")
        for _, name in rows:
            cells = [(by[(g, name, i)], rat[(g, name, i)]) for i in isls]
            print(f"  {name:<{width - 2}}" + "".join(
                f"{r.total_us():>12.2f}{max(s.iqr_pct for s in r.stats.values()):>6.0f}%"
                f"{ratio:>10.2f}x{'*' if r.baseline else ' '}" for r, ratio in cells))


# --------------------------------------------------------------------------------------------
# The one command line every measured suite runs through.


@dataclass
class Suite:
    """What a benchmark module provides; `suite_main` does the rest (arguments, the run, the
    table, the targets, JSON).

    `methods(isl, args)` returns the rows of one ISL; `extra(args)` may return more results
    measured apart (e.g. per-call overhead at another size); `table(results)` prints them;
    `after(results, args)` runs last (notes, plots); `add_arguments(parser)` adds options;
    `json_meta(args, results)` adds keys to the JSON document."""

    name: str
    prog: str
    doc: str
    methods: Callable[[int, argparse.Namespace], Sequence[Method]]
    default_isl: str = DEFAULT_ISL
    targets: Sequence[Target] = ()
    target_isl: int = 40_000
    note: str = ""
    repeat: int = 15
    round_ms: float = 20.0
    quick: tuple[str, int, float] = ("1000,40000", 5, 3.0)      # ISLs, rounds, ms per round
    table: Callable[[Sequence[Result]], None] = print_grouped_table
    extra: Callable[[argparse.Namespace], Sequence[Result]] | None = None
    after: Callable[[Sequence[Result], argparse.Namespace], None] | None = None
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None
    header: Callable[[argparse.Namespace], str] | None = None
    json_meta: Callable[[argparse.Namespace, Sequence[Result]], dict[str, object]] | None = None


def suite_main(argv: list[str] | None, suite: Suite) -> int:
    """Parse the common options, measure every ISL (peers interleaved), print the table and the
    targets, write JSON. A missed target makes the exit code 1 only with --check-targets."""
    p = arg_parser(suite.prog, suite.doc, f"a smoke run: ISL {suite.quick[0]}, {suite.quick[1]} "
                   "short rounds", check=True, isl=suite.default_isl)
    p.add_argument("--repeat", type=int, default=suite.repeat, help="timed rounds per method (median)")
    p.add_argument("--round-ms", type=float, default=suite.round_ms,
                   help="target duration of one round")
    if suite.add_arguments:
        suite.add_arguments(p)
    args = p.parse_args(argv)
    isl_text, repeat, round_ms = (suite.quick if args.quick
                                  else (args.isl, args.repeat, args.round_ms))
    isls = ints(isl_text)
    head = suite.header(args) if suite.header else f"tokenwire {suite.name} benchmark — {machine()}"
    print("# " + head.replace("\n", "\n# "))
    print(f"# median of {repeat} interleaved rounds of ~{round_ms:g} ms{suite.note}\n")
    results = [r for isl in isls for r in measure(suite.methods(isl, args), isl, repeat,
                                                   round_ms / 1e3, stderr_progress)]
    every = results + list(suite.extra(args) if suite.extra else [])
    end_progress()
    suite.table(results)
    ok = report_targets(Figures(every, suite.target_isl), suite.targets,
                        f"Targets at ISL {suite.target_isl:,} (from this run):")
    if suite.after:
        suite.after(every, args)
    if args.json:
        meta = suite.json_meta(args, every) if suite.json_meta else {}
        write_json(args.json, {"machine": machine(), "suite": suite.name, **meta, "rows": [
            {"name": r.name, "group": r.group, "isl": r.isl, "baseline": r.baseline,
             "nbytes": r.nbytes, **{f"{op}_us": s.median_us for op, s in r.stats.items()},
             **{f"{op}_iqr_pct": s.iqr_pct for op, s in r.stats.items()},
             "samples_us": {op: s.samples_us for op, s in r.stats.items()}} for r in every]})
    return 0 if ok or not args.check_targets else 1


#: What a grouped table's header says of its ratio column.
GROUPED_NOTE = "; ratio = baseline (*) time / method time"


def grouped_suite_main(argv: list[str] | None, *, suite: str, doc: str,
                       methods_for: Callable[[int], Sequence[Method]],
                       default_isl: str = DEFAULT_ISL,
                       targets: Sequence[Target], note: str = "",
                       after: Callable[[Sequence[Result]], None] | None = None) -> int:
    """`suite_main` for a grouped suite (core, request, wires, cpp, shm): ratio = baseline (*)
    time / method time in each group."""
    return suite_main(argv, Suite(
        name=suite, prog=f"python -m bench {suite}", doc=doc, default_isl=default_isl,
        methods=lambda isl, _args: methods_for(isl), targets=targets,
        note=GROUPED_NOTE + note,
        after=(lambda results, _args: after(results)) if after else None))
