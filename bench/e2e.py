"""End-to-end: a proxy process submits requests to a worker process over a real pyzmq socket
(and through Ray with `--ray`), one at a time; docs/benchmarks.md, "End to end", describes the
rows and the run.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import pickle
import struct
import sys
import threading
import time
import zlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from tokenwire import GenerationRequest, TokenIds, as_tokens, shm, token_buffer
from tokenwire._core import malloc_settling
from bench.data import PlainGenerationRequest, SamplingParams, token_stream
from bench.engine import build_for, engine_for, engine_label, engine_option
from bench.harness import (DEFAULT_ISL, REPLY_MS, Sockets, Target, arg_parser, end_progress, ints,
                           machine, percentile, ray_cluster, report_targets, spawn,
                           stderr_progress, stop, turns, wait_while_parent_lives, write_json)
from tokenwire.transport import dumps_oob, recv_pyobj_oob, send_frames, send_pyobj_oob

MODES = ("baseline", "tokenwire", "tokenwire-oob", "tokenwire-shm", "tokenwire-shm-spin")
SHM_MODES = ("tokenwire-shm", "tokenwire-shm-spin")
#: The spinning worker's wait on the ring: longer than the proxy's gap between an ack and its
#: next request.
SHM_SPIN_US = 5000.0
TOKENWIRE_MODES = MODES[1:]
FLOOR = "floor"
ZMQ_MODES = MODES + (FLOOR,)
#: The floor's request on the wire: bench e2e's 1 byte, bench load's the request's id (8 bytes,
#: what any message must carry). Its rows' control messages are pickles, longer.
REQUEST_ID = struct.Struct("<q")
#: Untimed requests at the start of every row: more than the ring's slots, so each slot's pages
#: are touched before the timing starts.
WARMUP = shm._SLOTS + 4
#: The modes take turns in blocks of this many timed requests.
BLOCK = 10
#: The Ray rows: the list baseline, the raw and the pfor request, the floor (a call or put whose
#: object is the ISL; the worker copies that many int32 ids).
RAY_TOKENWIRE_MODES = ("tokenwire", "tokenwire-pfor")
RAY_MODES = ("baseline", *RAY_TOKENWIRE_MODES, FLOOR)
#: "put": ray.put, the reference passed, the worker's ray.get timed as its submit; "arg": the
#: request as the call's argument.
RAY_CALLS = ("put", "arg")
#: Ray's limit for an argument sent inside the call (100 KiB by default); the header prints it.
RAY_INLINE_ENV = "RAY_max_direct_call_object_size"
RAY_WARMUP = 3


class PforGenerationRequest(GenerationRequest):
    """GenerationRequest with its prompt pickled as a pfor frame (for hops between hosts)."""

    prompt_token_ids = TokenIds(codec="pfor", doc="The prompt's token ids, pickled as pfor.")


def make_request(mode: str, ids: np.ndarray | list[int], i: int) -> Any:
    """What the proxy holds: the tokenizer's list[int] (`ids`, or a list made from it) in the
    request of `mode` (the floor's is the list itself)."""
    lst = ids if isinstance(ids, list) else ids.tolist()
    if mode == FLOOR:
        return lst
    cls = {"baseline": PlainGenerationRequest,
           "tokenwire-pfor": PforGenerationRequest}.get(mode, GenerationRequest)
    return cls(lst, SamplingParams(), streaming=True, arrival_time=time.time(), id=i)


def token_source(req: Any) -> Any:
    """Token prep: the int32 buffer a tokenwire request carries (no list built), else the
    list."""
    if isinstance(req, GenerationRequest):
        return token_buffer(req, "prompt_token_ids")
    return req.prompt_token_ids


def hand_off(req: Any) -> np.ndarray:
    """A worker's hand-off without an engine: the request's ids as an owned int32 array."""
    return np.array(token_source(req), dtype=np.int32)


def engine_ids(vec: Any) -> np.ndarray:
    """The ids an engine holds: the numpy engine's array, a C++ Request's ids."""
    if hasattr(vec, "ids_bytes"):
        return np.frombuffer(vec.ids_bytes(), dtype=np.int32)
    return np.asarray(vec)


def crc(ids: Any) -> int:
    """CRC-32 of the ids as little-endian int32 (an ndarray, or an engine Request's ids)."""
    return zlib.crc32(np.ascontiguousarray(engine_ids(ids), dtype="<i4").tobytes())


# --------------------------------------------------------------------------------------------
# GIL monitor


def _lower_timer_slack() -> None:
    """Let this thread's short sleeps wake on time (Linux: per-thread timer slack, 50 µs by
    default, 1 µs here). Without it the monitor's resolution would be ~60 µs."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(29, 1000, 0, 0, 0)   # PR_SET_TIMERSLACK
    except (OSError, AttributeError):
        pass


class GcLog:
    """The garbage collector's passes in this process, (start, end) perf_counter pairs: the
    worker reports those inside its timed submits."""

    def __init__(self) -> None:
        self.passes: list[tuple[float, float]] = []
        self._start = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.passes.append((self._start, time.perf_counter()))

    def inside(self, windows: Sequence[tuple[float, float]]) -> list[float]:
        """The durations (µs) of the passes that started inside one of `windows`."""
        out, j = [], 0
        for start, end in sorted(windows):
            while j < len(self.passes) and self.passes[j][0] < start:
                j += 1
            while j < len(self.passes) and self.passes[j][0] < end:
                out.append((self.passes[j][1] - self.passes[j][0]) * 1e6)
                j += 1
        return out


class GilMonitor:
    """A background thread that sleeps 1 µs in a loop and records every wake-up that came
    later than usual: those intervals are when some other thread held the GIL. Resolution:
    the usual gap between wake-ups (`idle_gap`, ~17 µs on Linux with the timer slack lowered)."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.gaps: list[tuple[float, float]] = []
        self.idle_gap = 0.0
        self._stop = threading.Event()
        self._recording = False
        self._thread = threading.Thread(target=self._run, name="gil-monitor", daemon=True)

    def _run(self) -> None:
        _lower_timer_slack()
        sleep, now, gaps, tick = time.sleep, time.perf_counter, self.gaps, 1e-6
        samples = []                # calibration: the usual gap on an idle interpreter
        prev = now()
        for _ in range(2000):
            sleep(tick)
            t = now()
            samples.append(t - prev)
            prev = t
        samples.sort()
        self.idle_gap = samples[len(samples) // 2]
        jitter = samples[len(samples) * 9 // 10] - self.idle_gap
        threshold = self.idle_gap + max(3e-6, 3 * jitter)
        self._ready.set()
        prev = now()
        while not self._stop.is_set():
            sleep(tick)
            t = now()
            if t - prev > threshold and self._recording:
                gaps.append((prev + self.idle_gap, t))   # blocked from the expected wake-up on
            prev = t

    def __enter__(self) -> GilMonitor:
        self._ready = threading.Event()
        if not self.enabled:                  # --no-gil-monitor: no thread, no GIL figures
            return self
        self._thread.start()
        self._ready.wait()
        self._recording = True
        return self

    def __exit__(self, *exc: object) -> None:
        self._recording = False
        self._stop.set()
        if self.enabled:
            self._thread.join()

    def blocked_in(self, windows: Sequence[tuple[float, float]]) -> list[float]:
        """Per window, the seconds the monitor thread was blocked inside it (none when the
        monitor is off)."""
        gaps, out, j = sorted(self.gaps), [], 0
        for start, end in windows if self.enabled else ():
            while j < len(gaps) and gaps[j][1] <= start:
                j += 1
            out.append(sum(max(0.0, min(end, g1) - max(start, g0)) for g0, g1 in gaps[j:]
                           if g0 < end) if j < len(gaps) else 0.0)
        return out


# --------------------------------------------------------------------------------------------
# Worker process (zmq)


def receive(sock: Any, mode: str, receiver: shm.Receiver) -> Any:
    """The worker's side of a message of `mode`: what `send` put on the socket, received."""
    if mode == FLOOR:
        return sock.recv()              # a request (load's: its id), or a control message's pickle
    if mode in SHM_MODES:                       # spin: the ring (poll spun for it), or the socket
        return recv_pyobj_oob(sock, channel=receiver)
    if mode == "tokenwire-oob":
        return recv_pyobj_oob(sock)
    return sock.recv_pyobj()


@functools.lru_cache(maxsize=1)
def streams(isl: int, seed: int, n: int) -> list[np.ndarray]:
    """The ids of a row's requests: request i's are stream i % n (seeded, the same for every
    mode); the last row's kept, for the worker's next set-up (bench e2e's next turn)."""
    return [token_stream(isl, seed=seed + k) for k in range(n)]


@functools.lru_cache(maxsize=8)
def stream_crcs(isl: int, seed: int, n: int) -> list[int]:
    """The CRC of each of `streams(isl, seed, n)`: what the worker checks a row's ids against,
    without keeping the streams themselves in the process whose windows it times."""
    return [crc(ids) for ids in streams.__wrapped__(isl, seed, n)]


class _Phase:
    """A worker's measurements from a row's set-up or "report" to the next "report": in a timed
    row, per message its submit window (perf_counter: receive + unpickle + token prep + request
    ctor), token prep and ctor (one request per message, as bench e2e sends them); the process's
    CPU time, the requests, those whose ids arrived wrong, those that built a list, the
    channel's slots."""

    def __init__(self, receiver: shm.Receiver) -> None:
        self.windows: list[tuple[float, float]] = []
        self.prep_us: list[float] = []
        self.ctor_us: list[float] = []
        self.requests = self.bad = self.fallbacks = 0
        self.check_s = 0.0          # the checks: no part of the path's CPU time
        self.receiver, self.slots = receiver, receiver.stats["shm"]
        self.cpu, self.thread = time.process_time(), time.thread_time()

    def report(self, mon: GilMonitor, gc_log: GcLog) -> dict[str, Any]:
        windows = self.windows
        # CPU first, before the lists are built
        return {"cpu_s": time.process_time() - self.cpu - self.check_s,
                "thread_s": time.thread_time() - self.thread - self.check_s,
                "requests": self.requests, "bad": self.bad, "fallbacks": self.fallbacks,
                "slots": self.receiver.stats["shm"] - self.slots,
                "latency_us": [(b - a) * 1e6 for a, b in windows], "prep_us": self.prep_us,
                "ctor_us": self.ctor_us, "end_times": [b for _, b in windows],
                "gil_us": [s * 1e6 for s in mon.blocked_in(windows)],
                "gc_us": gc_log.inside(windows)}


def worker_main(data_addrs: list[str], results_addr: str, parent: int,
                engine_path: str | None = None, gil_monitor: bool = True) -> None:
    """Idle: wait for a row's set-up on the channel (its mode, ISL, and the `streams` its
    requests' ids come from), which starts a `_Phase`. In a row: messages of requests, each
    acked once built (with the requests' ids; the floor's with the message itself), "report"
    (the phase's report; a new phase starts) and "done" (back to idle). The first data address
    is the proxy's main socket (set-ups, control messages, and requests at one proxy thread),
    the others its serializing threads' (requests). Malloc settled, as docs/adopting.md
    advises for a serving process."""
    import zmq
    malloc_settling(True)
    engine = engine_for(engine_path)
    # Looked up once: this check runs after each ack, while the proxy prepares the next request.
    materialized = GenerationRequest.prompt_token_ids.is_materialized
    gc_log = GcLog()
    gc.callbacks.append(gc_log)
    with GilMonitor(enabled=gil_monitor) as mon, Sockets() as socks, shm.Receiver() as receiver:
        data = socks.connect(zmq.PULL, data_addrs[0])
        for addr in data_addrs[1:]:
            data.connect(addr)
        results = socks.connect(zmq.PUSH, results_addr)

        def spin(ms: int) -> bool:      # spinning on the ring first, as Receiver(spin_us=) does
            return receiver._poll(data, SHM_SPIN_US, ms)

        def control() -> Any:
            """The next set-up, None once the proxy closes or is gone. Through the channel too:
            the receiver drops the doorbells of messages the spinning worker already took from
            the ring."""
            if not wait_while_parent_lives(data, parent, 1000):
                return None
            return recv_pyobj_oob(data, channel=receiver)

        results.send_pyobj({"idle_gap_us": mon.idle_gap * 1e6})      # hello
        if control() == "attach":                   # the segment the proxy offers, mapped
            results.send_pyobj(None)
        while (ctl := control()) is not None:
            mode, isl, timed, ph = ctl["mode"], ctl["isl"], ctl["timed"], _Phase(receiver)
            want = stream_crcs(isl, ctl["seed"], ctl["n"])  # of the proxy's lists
            floor_ids = np.zeros(isl if mode == FLOOR else 0, dtype=np.int32)
            poll = spin if mode == "tokenwire-shm-spin" else None
            results.send_pyobj(None)                    # set up
            keep: Any = None
            # Outside the window; once the proxy is gone, its next control() ends the worker.
            while wait_while_parent_lives(data, parent, 1000, poll=poll):
                t0 = time.perf_counter()
                msg = receive(data, mode, receiver)
                if mode == FLOOR and len(msg) > REQUEST_ID.size:
                    msg = pickle.loads(msg)             # a control message
                if msg is None:                         # the proxy closes mid-row
                    return
                if isinstance(msg, dict):
                    if msg["op"] == "done":
                        break
                    # "report": answered before the next phase's requests, which the proxy's
                    # threads send on their own sockets, may arrive.
                    results.send_pyobj(ph.report(mon, gc_log))
                    ph = _Phase(receiver)
                    mon.gaps.clear()
                    gc_log.passes.clear()
                    continue
                reqs, vecs = msg if isinstance(msg, list) else [msg], []
                for req in reqs:
                    ta = time.perf_counter()
                    source = floor_ids if mode == FLOOR else token_source(req)
                    tb = time.perf_counter()
                    vecs.append(np.array(source) if mode == FLOOR else engine.build(req, source))
                t1 = time.perf_counter()
                # Ack: the proxy may send the next request. The floor's engine made its one copy.
                results.send(msg if mode == FLOOR else np.array(
                    [r.id for r in reqs], np.int64).tobytes(), copy=True)
                ph.requests += len(reqs)
                if timed:
                    ph.windows.append((t0, t1))
                    ph.prep_us.append((tb - ta) * 1e6)
                    ph.ctor_us.append((t1 - tb) * 1e6)
                    # Keep this message alive through the next window and free the one before
                    # it here, outside any window: rebinding the names inside the next window
                    # would bill a deallocation (40k ints for a list) to that submit.
                    keep = (msg, reqs, source, vecs)  # noqa: F841
                if mode != FLOOR:                       # the floor's messages carry no ids
                    t = time.thread_time()
                    for req, vec in zip(reqs, vecs):
                        ph.bad += crc(vec) != want[req.id % len(want)]
                        # A list built: not the buffer path.
                        ph.fallbacks += isinstance(req, GenerationRequest) and materialized(req)
                    ph.check_s += time.thread_time() - t


# --------------------------------------------------------------------------------------------
# Results


@dataclass
class ModeResult:
    transport: str
    mode: str
    isl: int
    requests: int
    latency_us: list[float] = field(default_factory=list)
    gil_us: list[float] = field(default_factory=list)
    send_us: list[float] = field(default_factory=list)
    correct: bool = False
    gil_resolution_us: float = 0.0   # stalls shorter than this are not seen by the monitor
    engine: str = "numpy"
    prep_us: list[float] = field(default_factory=list)     # token prep (worker)
    ctor_us: list[float] = field(default_factory=list)     # request constructor (worker)
    trip_us: list[float] = field(default_factory=list)     # proxy serialize -> worker submit end
    gc_us: list[float] = field(default_factory=list)       # GC passes inside the worker's submits

    @property
    def transit_us(self) -> list[float]:
        """Per trip, what is neither the proxy's serialize nor the worker's submit: the proxy's
        send call, zmq (both processes' I/O threads, the socket) and the worker's wake-up."""
        if not self.trip_us or not self.latency_us:
            return []
        return [t - s - w for t, s, w in zip(self.trip_us, self.send_us, self.latency_us)]

    def p(self, column: str, q: float = 50) -> float:
        """A percentile of a column ("trip", "latency", ...: the µs samples); NaN when empty."""
        return percentile(getattr(self, column + "_us"), q)

    def cell(self, column: str, q: float = 50) -> str:
        """A percentile as a table cell; a GIL one below the monitor's resolution as such."""
        if not getattr(self, column + "_us"):
            return "n/a"
        v = self.p(column, q)
        if column == "gil" and v < self.gil_resolution_us:
            return f"<{self.gil_resolution_us:.0f}µs"
        return f"{v:.1f}µs"

    def gil_ratio(self, base: ModeResult) -> tuple[float, bool]:
        """The baseline's GIL p50 / this row's, and whether it is a lower bound (this row's
        stall is below the monitor's resolution, which then stands in for it)."""
        v, floor = self.p("gil"), max(self.gil_resolution_us, 1e-9)
        return base.p("gil") / max(v, floor), v < floor


COLUMNS = ("latency", "prep", "ctor", "gil", "send", "trip", "transit")


def print_table(results: Sequence[ModeResult]) -> None:
    print(f"{'transport':<14}{'ISL':>9}  {'mode':<15}{'submit p50':>11}{'p99':>11}"
          f"{'prep p50':>10}{'ctor p50':>11}"
          f"{'GIL p50':>10}{'p99':>11}{'proxy ser. p50':>16}{'transit p50':>13}{'trip p50':>11}"
          f"{'p99':>11}"
          f"  {'vs baseline: submit':>20}{'GIL':>9}{'trip':>8}{'trip x floor':>14}  ok")
    base = {(r.transport, r.isl): r for r in results if r.mode == "baseline"}
    floor = {(r.transport, r.isl): r for r in results if r.mode == FLOOR and r.trip_us}
    for r in results:
        b, f = base[(r.transport, r.isl)], floor.get((r.transport, r.isl))
        rs = f"{b.p('latency') / r.p('latency'):.1f}x" if r.latency_us else "n/a"
        rg, bound = r.gil_ratio(b)
        # n/a: even the baseline's stall is below the monitor's resolution
        gil_vs = ("n/a" if not r.gil_us or b.p("gil") < b.gil_resolution_us
                  else f"{'>=' if bound else ''}{rg:.1f}x")
        rt = f"{b.p('trip') / r.p('trip'):.1f}x" if r.trip_us else "n/a"
        rf = f"{r.p('trip') / f.p('trip'):.2f}x" if f and r.trip_us else "n/a"
        print(f"{r.transport:<14}{r.isl:>9,}  {r.mode:<15}{r.cell('latency'):>11}"
              f"{r.cell('latency', 99):>11}{r.cell('prep'):>10}{r.cell('ctor'):>11}"
              f"{r.cell('gil'):>10}{r.cell('gil', 99):>11}{r.p('send'):>14.1f}µs"
              f"{r.cell('transit'):>13}{r.cell('trip'):>11}{r.cell('trip', 99):>11}"
              f"  {rs:>20}{gil_vs:>9}{rt:>8}{rf:>14}  {'yes' if r.correct else 'NO'}")


class E2EFigures:
    """What e2e's targets read: the (mode, transport, ISL) rows of a run (KeyError: a row this
    run did not measure, and the target is not shown)."""

    def __init__(self, results: Sequence[ModeResult]) -> None:
        self.rows = {(r.mode, r.transport, r.isl): r for r in results}

    def row(self, mode: str, isl: int = 40_000, transport: str = "zmq") -> ModeResult:
        return self.rows[(mode, transport, isl)]

    def p50(self, mode: str, column: str = "trip", isl: int = 40_000,
            transport: str = "zmq") -> float:
        return self.row(mode, isl, transport).p(column)

    def best(self, modes: Sequence[str], transport: str = "zmq") -> str:
        """The mode of `modes` with the shortest trip at 40k (KeyError: none measured)."""
        found = [m for m in modes if (m, transport, 40_000) in self.rows]
        if not found:
            raise KeyError(modes)
        return min(found, key=lambda m: self.p50(m, transport=transport))


def _lower(mode: str, column: str, bound: float, what: str, than: str = "",
           isl: int = 40_000) -> Target:
    """`mode`'s p50 of `column` at least `bound` times lower than the list baseline's."""
    return Target(f"{mode}: {what} >= {bound:g}x lower{than}",
                  lambda f: f.p50("baseline", column, isl) / f.p50(mode, column, isl),
                  lambda v: v >= bound, lambda f, v: f"{v:.1f}x lower")


def _tail_target(mode: str) -> Target:
    def shown(f: E2EFigures, v: float) -> str:
        r = f.row(mode)
        return (f"{v:.1f}x (p99 {r.p('trip', 99):.1f} µs, p50 {r.p('trip'):.1f} µs; transit p99 "
                f"{r.p('transit', 99):.1f} µs, p50 {r.p('transit'):.1f} µs)")
    return Target(f"{mode}: whole trip p99 <= 3x its p50",
                  lambda f: f.row(mode).p("trip", 99) / f.p50(mode), lambda v: v <= 3, shown)


def _gil_target(mode: str) -> Target:
    def ratio(f: E2EFigures) -> tuple[float, bool]:
        if not f.row(mode).gil_us:
            raise KeyError("no GIL figures (--no-gil-monitor)")   # not measured: not reported
        return f.row(mode).gil_ratio(f.row("baseline"))

    def shown(f: E2EFigures, v: float) -> str:
        if not ratio(f)[1]:
            return f"{v:.1f}x lower"
        return (f"at least {v:.1f}x lower; its stall is below the monitor's "
                f"{f.row(mode).gil_resolution_us:.0f} µs resolution")
    return Target(f"{mode}: GIL held by the submit >= 10x lower than the baseline's",
                  lambda f: ratio(f)[0], lambda v: v >= 10, shown)


def targets_for(engine: str) -> list[Target]:
    """Worker submit and GIL at ISL 40k for every engine and tokenwire mode. With the C++
    engine also the submit into the real Request and the whole trip; for the shared-memory
    channel the whole trip's bounds at 40k and 128k, and its p99 within 3x its p50. Last, the
    best row's trip against the floor's."""
    out: list[Target] = []
    for mode in TOKENWIRE_MODES:
        shm_mode = mode in SHM_MODES
        if engine == "nanobind":
            out += [_lower(mode, "latency", 25 if shm_mode else 20, "worker submit into the "
                           "C++ Request", " than the list baseline's"),
                    _lower(mode, "trip", 20 if shm_mode else 10,
                           "whole trip (proxy serialize + transport + worker submit)")]
        if engine == "nanobind" and shm_mode:
            out += [_tail_target(mode),
                    _lower(mode, "trip", 30, "at ISL 128,000, whole trip", isl=128_000)]
        out += [_lower(mode, "latency", 10, "worker submit", " than the baseline's"),
                _gil_target(mode)]
    return out + [Target(
        "best tokenwire row: whole trip <= 1.5x the floor's (1-byte trip + as_tokens + the "
        "worker's copy)", lambda f: f.p50(f.best(TOKENWIRE_MODES)) / f.p50(FLOOR),
        lambda v: v <= 1.5, lambda f, v: f"{v:.2f}x ({f.best(TOKENWIRE_MODES)})")]


def check_targets(results: Sequence[ModeResult]) -> bool:
    """Report the targets whose rows this run measured; with two Ray nodes also the trip
    through Ray of a request passed as the argument: the best tokenwire row's at 40k at least
    5x shorter than the baseline's (docs/benchmarks.md, "Ray across two nodes")."""
    figures = E2EFigures(results)
    base = [r for r in results if r.mode == "baseline" and r.transport == "zmq"]
    if not base:
        return True
    engine, ray = base[0].engine, "ray-2node-arg"
    ok = report_targets(figures, targets_for(engine),
                        f"Targets (this run, zmq, p50 unless said; ISL 40,000 unless said; "
                        f"engine: {engine}):")

    def best(f: E2EFigures) -> str:
        return f.best(RAY_TOKENWIRE_MODES, ray)
    ray_target = Target(
        f"{ray}: best tokenwire row's whole trip >= 5x shorter than the baseline's",
        lambda f: f.p50("baseline", transport=ray) / f.p50(best(f), transport=ray),
        lambda v: v >= 5,
        lambda f, v: (f"{v:.1f}x ({best(f)}: {f.p50(best(f), transport=ray):.0f} µs vs "
                      f"baseline {f.p50('baseline', transport=ray):.0f} µs)"))
    return report_targets(figures, [ray_target], "Targets through Ray across two nodes (this "
                          "run, ISL 40,000, trip p50):") and ok


# --------------------------------------------------------------------------------------------
# Proxy (zmq)


def serialize(mode: str, req: Any, sender: shm.Sender) -> list[Any]:
    """The proxy's side of a send: the frames of one message, what send_pyobj /
    send_pyobj_oob put on the socket (with channel=, the ids are written into a slot here)."""
    if mode == FLOOR:
        as_tokens(req)                            # the list's one unavoidable pass
        return [b"\x00"]
    if mode == "tokenwire-shm-spin":
        return sender._message(req)               # = Sender(ring=True)'s: a doorbell, or frames
    if mode == "tokenwire-shm":
        return sender._dumps(req)                 # = send_pyobj_oob(..., channel=sender)
    if mode == "tokenwire-oob":
        return dumps_oob(req)                     # = send_pyobj_oob(...)
    return [pickle.dumps(req, protocol=pickle.HIGHEST_PROTOCOL)]   # = socket.send_pyobj


def send(sock: Any, mode: str, frames: list[Any], sender: shm.Sender) -> None:
    """The proxy's send of `serialize`'s frames, as send_pyobj / send_pyobj_oob / the channel
    send them. The pickles of send_pyobj are copied into zmq's message, as pyzmq's send_pyobj
    does; the other frames are sent without a copy."""
    if mode == "tokenwire-oob":
        send_frames(sock, frames)               # = send_pyobj_oob's send
    elif mode in SHM_MODES:
        sender._send_frames(sock, frames)       # = the channel's send (publishes)
    else:
        sock.send_multipart(frames, copy=mode == "baseline" or mode == "tokenwire")


def send_message(sock: Any, mode: str, obj: Any, sender: shm.Sender, i: int = 0) -> None:
    """`serialize` and `send` in one, for a request, a list of them or a control message. The
    floor's request goes as request `i`'s id after `serialize`'s as_tokens, its control
    messages as pickles."""
    if mode != FLOOR:
        send(sock, mode, serialize(mode, obj, sender), sender)
    elif isinstance(obj, dict):
        sock.send_pyobj(obj)
    else:
        serialize(mode, obj, sender)
        sock.send(REQUEST_ID.pack(i))


class ProxyEnd:
    """This process's side of a proxy -> worker pair: the shared-memory Sender, a PUSH socket
    "data" (and `extra` more, one per serializing thread), a PULL socket "results" and the
    spawned `worker_main`, up once it said hello."""

    def __init__(self, engine_path: str | None, gil_monitor: bool = True, slots: int = 0,
                 extra: int = 0, shm_rows: bool = True) -> None:
        import zmq
        self.zmq = zmq
        self.sender = shm.Sender(slots=slots) if slots else shm.Sender()
        self.socks = Sockets()
        self.data = self.socks.bind(zmq.PUSH, "data")
        self.results = self.socks.bind(zmq.PULL, "results")
        self.extra = [self.socks.bind(zmq.PUSH, f"data{k}") for k in range(extra)]
        self.failed: list[BaseException] = []       # what a serializing thread raised
        addrs = self.socks.addrs
        self.proc = spawn(worker_main, [a for name, a in addrs.items() if name != "results"],
                          addrs["results"], os.getpid(), engine_path, gil_monitor)
        try:
            self.hello = self.reply("the worker process did not start")
            send_pyobj_oob(self.data, "attach", channel=self.sender)
            self.reply("the worker did not answer the channel's first message")
        except BaseException:
            ProxyEnd.close(self)        # this class's: a subclass's threads have not started
            raise
        if shm_rows and not self.sender._attached():
            stderr_progress("tokenwire-shm: the worker could not map the segment (not Linux?): "
                            "its ids travel as out-of-band frames")

    def wait(self, what: str = "the worker stopped answering") -> None:
        """Until a reply can be read; RuntimeError (`what`) when none came within REPLY_MS, when
        the worker process ended, or when a serializing thread failed."""
        for _ in range(REPLY_MS // 1000):
            if self.failed:
                raise RuntimeError("a serializing thread failed") from self.failed[0]
            if self.results.poll(1000):
                return
            if not self.proc.is_alive():
                raise RuntimeError(f"{what}: the worker process ended (exit {self.proc.exitcode})")
        raise RuntimeError(f"{what} (no reply in {REPLY_MS // 1000} s)")

    def reply(self, what: str = "the worker stopped answering") -> Any:
        self.wait(what)
        return self.results.recv_pyobj()

    def row(self, mode: str, isl: int, seed: int, n: int, timed: bool = False) -> None:
        """Sets the worker up for a row of `mode`, its requests' ids streams(isl, seed, n);
        `timed`: the worker times each message's submit."""
        send_pyobj_oob(self.data, {"mode": mode, "isl": isl, "seed": seed, "n": n,
                                   "timed": timed}, channel=self.sender)
        self.reply()

    def control(self, mode: str, op: str) -> Any:
        """The row's "report" (the worker's report of the phase it ends, returned) or "done"
        (no reply), sent as its requests are."""
        send_message(self.data, mode, {"op": op}, self.sender)
        return self.reply() if op == "report" else None

    def close(self, timeout: float = 30) -> None:
        """Tells the worker to end (it also ends once this process is gone) and waits for it."""
        try:
            if self.proc.is_alive():
                send_pyobj_oob(self.data, None, self.zmq.NOBLOCK, channel=self.sender)
        except self.zmq.Again:
            pass
        finally:
            stop(self.proc, timeout)
            self.socks.close()
            self.sender.close()


def run_zmq(isls: Sequence[int], count: int, engine_path: str | None = None,
            gil_monitor: bool = True) -> list[ModeResult]:
    link = ProxyEnd(engine_path, gil_monitor)
    sender, data = link.sender, link.data
    idle_gap_us = link.hello["idle_gap_us"]
    stderr_progress(f"worker up; GIL monitor resolution {idle_gap_us:.1f} µs")
    out: list[ModeResult] = []
    try:
        for isl in isls:
            seed, n = 1000 * isl, WARMUP + count
            rows = {mode: ModeResult(transport="zmq", mode=mode, isl=isl, requests=count,
                                     engine="nanobind" if engine_path else "numpy",
                                     gil_resolution_us=idle_gap_us, correct=True)
                    for mode in ZMQ_MODES}
            # Turns of BLOCK requests; each mode's warm-up comes first, in its first turn, a
            # phase of its own.
            for mode, lo, hi in turns(ZMQ_MODES, count, BLOCK):
                stderr_progress(f"e2e zmq: ISL {isl:,}, {mode} {hi}/{count}")
                res = rows[mode]
                link.row(mode, isl, seed, n, timed=True)
                for first, end in [(0, WARMUP)] * (lo == 0) + [(WARMUP + lo, WARMUP + hi)]:
                    # One request at a time, built just before (untimed) from a fresh list:
                    # serialize (timed), send, wait for the worker's ack.
                    starts, send_us, slots_before = [], [], sender.stats["shm"]
                    for i in range(first, end):
                        req = make_request(mode, streams(isl, seed, n)[i], i)
                        t0 = time.perf_counter()
                        frames = serialize(mode, req, sender)
                        t1 = time.perf_counter()
                        send(data, mode, frames, sender)
                        send_us.append((t1 - t0) * 1e6)
                        starts.append(t0)
                        link.wait()
                        link.results.recv()         # ack
                        del req, frames             # freed here, outside the timed window
                    report = link.control(mode, "report")
                    # Every request, right ids (the floor's carry none), no list built, and
                    # through the channel a slot for every request whose ids reach its
                    # threshold.
                    slots = sender.stats["shm"] - slots_before
                    want = (end - first if mode in SHM_MODES and sender._attached()
                            and 4 * isl >= sender._threshold else 0)
                    res.correct &= (report["requests"] == end - first and report["bad"] == 0
                                    and report["fallbacks"] == 0
                                    and report["slots"] == slots == want)
                    if first < WARMUP:
                        continue                    # the warm-up: checked, not timed
                    for name in ("latency_us", "gil_us", "prep_us", "ctor_us", "gc_us"):
                        getattr(res, name).extend(report[name])
                    res.send_us += send_us
                    res.trip_us += [(e - s) * 1e6 for s, e in zip(starts, report["end_times"])]
                link.control(mode, "done")
            out += rows.values()
    finally:
        link.close()
    return out


# --------------------------------------------------------------------------------------------
# Ray (actor to actor)

class _RayWorker:
    """The worker actor: a put request's ray.get (fetch + deserialize) and int32 hand-off, or
    an argument's hand-off (Ray fetched and unpickled it before the call), timed."""

    def __init__(self, gil_monitor: bool = True) -> None:
        self.mon = GilMonitor(enabled=gil_monitor).__enter__()
        self.floor_ids: dict[int, np.ndarray] = {}

    def hand_off(self, req: Any) -> np.ndarray:
        """The ids into an owned int32 array; the floor's request is its ISL, and the worker
        copies that many ids (zeros, made once per ISL: in the row's warm-up)."""
        if isinstance(req, int):
            source = self.floor_ids.get(req)
            if source is None:
                source = self.floor_ids[req] = np.zeros(req, dtype=np.int32)
            return np.array(source)
        return hand_off(req)

    def take(self, sent: Any) -> tuple[float, float, int]:
        import ray
        t0 = time.perf_counter()
        # A put request's reference, inside a list: a reference is resolved before the call.
        vec = self.hand_off(ray.get(sent[0]) if isinstance(sent, list) else sent)
        return t0, time.perf_counter(), crc(vec)

    def gil(self, windows: list[tuple[float, float]]) -> list[float]:
        blocked = self.mon.blocked_in(windows)
        self.mon.gaps.clear()
        return [s * 1e6 for s in blocked]


class _RayProxy:
    """The proxy actor: builds each request from a list, hands it over (`call`: put and pass
    the reference, or pass it as the argument), waits for the worker's answer: the row of
    transport `label`. The trip runs from the put or the call to the end of the worker's
    hand-off (one host: one clock)."""

    def run(self, worker: Any, label: str, mode: str, call: str, isl: int,
            count: int) -> ModeResult:
        import ray
        windows, crcs, expected, send, trips = [], [], [], [], []
        floor_crc = crc(np.zeros(isl, np.int32)) if mode == FLOOR else None  # what it copies
        for i in range(-RAY_WARMUP, count):
            ids = token_stream(isl, seed=1000 * isl + i)
            expected.append(crc(ids) if floor_crc is None else floor_crc)
            req = make_request(mode, ids, i)
            t0 = time.perf_counter()
            sent = req
            if mode == FLOOR:
                as_tokens(req)                          # the list's one unavoidable pass
                sent = isl
            if call == "put":
                sent = [ray.put(sent)]                  # the reference
                send.append((time.perf_counter() - t0) * 1e6)
                handed = worker.take.remote(sent)
            else:
                handed = worker.take.remote(sent)       # Ray pickles the argument here
                send.append((time.perf_counter() - t0) * 1e6)
            a, end, c = ray.get(handed)
            if call == "put":
                windows.append((a, end))
            trips.append((end - t0) * 1e6)
            crcs.append(c)
            # Freed here, outside the trip: the request, and the reference (the last reference
            # to a put request frees it in Ray's store).
            del sent, req, handed
        del windows[:RAY_WARMUP], send[:RAY_WARMUP], trips[:RAY_WARMUP]
        gil = ray.get(worker.gil.remote(windows))      # (and forgets the row's stalls)
        return ModeResult(label, mode, isl, count, [(b - a) * 1e6 for a, b in windows], gil,
                          send, crcs == expected, trip_us=trips)


def run_ray(isls: Sequence[int], count: int, nodes: int = 1,
            gil_monitor: bool = True) -> list[ModeResult]:
    """Actor to actor through Ray (harness.ray_cluster: with `nodes=2` the proxy actor on one
    raylet and the worker actor on the other). A Ray already running is used as it is; its
    workers get bench/ (not installed) as a module Ray ships them."""
    import logging

    import ray

    import bench

    cluster: Any = ray_cluster(
        nodes, 256 * 1024**2, ("tw_proxy", "tw_worker"), logging_level=logging.ERROR,
        log_to_driver=False, runtime_env={"py_modules": [bench], "excludes": [
            "engine_src", "results", "__pycache__"]}) if not ray.is_initialized() \
        else contextlib.nullcontext(False)
    out = []
    with cluster as two:
        actor: Any = ray.remote
        worker = actor(num_cpus=0, resources={"tw_worker": 1} if two else {})(
            _RayWorker).remote(gil_monitor)
        proxy = actor(num_cpus=0, resources={"tw_proxy": 1} if two else {})(_RayProxy).remote()
        for call in RAY_CALLS:
            label = ("ray-2node" if two else "ray") + ("-arg" if call == "arg" else "")
            for isl in isls:
                for mode in RAY_MODES:
                    stderr_progress(f"e2e {label}: ISL {isl:,}, {mode}")
                    out.append(ray.get(proxy.run.remote(worker, label, mode, call, isl, count)))
    return out


def main(argv: list[str] | None = None) -> int:
    malloc_settling(True)                       # the proxy too (docs/adopting.md, section 6)
    p = arg_parser("python -m bench e2e", __doc__, "ISL 1k/40k, 12 requests: a smoke test",
                   check=True, isl=DEFAULT_ISL)
    p.add_argument("--requests", type=int, default=None,
                   help="requests per mode and ISL (default 60; 12 with --quick)")
    p.add_argument("--ray", action="store_true", help="also run actor to actor through Ray")
    p.add_argument("--ray-nodes", type=int, choices=(1, 2), default=1,
                   help="with --ray: 2 runs a two-node Ray cluster on this machine, the proxy "
                        "actor on one node and the worker actor on the other")
    engine_option(p)
    p.add_argument("--no-gil-monitor", dest="gil_monitor", action="store_false",
                   help="no background thread in the worker: no GIL columns, and none of its "
                        "wake-ups (tens of thousands a second) competing for the CPUs")
    args = p.parse_args(argv)
    engine_path = build_for(args.engine)
    isls = [1000, 40_000] if args.quick else ints(args.isl)
    count = args.requests or (12 if args.quick else 60)
    print(f"# tokenwire e2e — {machine()}")
    print(f"# proxy process -> worker process over pyzmq ipc://, {count} requests "
          f"per row, one at a time; engine: {engine_label(engine_path)}; submit = worker's "
          f"receive+unpickle+token prep+request ctor; trip = proxy serialize+transport+submit\n")
    inline_limit = os.environ.get(RAY_INLINE_ENV)
    if args.ray:
        where = (f"{inline_limit} bytes ({RAY_INLINE_ENV})" if inline_limit
                 else "100 KiB (the default)")
        print(f"# Ray: an argument that pickles to at most max_direct_call_object_size = {where}"
              f" travels inside the call, a larger one through the object stores\n")
    results = run_zmq(isls, count, engine_path, gil_monitor=args.gil_monitor)
    if args.ray:
        results += run_ray(isls, count, args.ray_nodes, args.gil_monitor)
    end_progress()
    print_table(results)
    passes = [us for r in results for us in r.gc_us]
    if any(r.transport == "zmq" for r in results):
        print(f"\ngarbage collector (on, as in a server) inside the worker's timed submits: "
              f"{len(passes)} pass(es)" + (f", longest {max(passes):.1f} µs" if passes else ""))
    targets_ok = check_targets(results)
    ok = all(r.correct for r in results)
    print(f"\ncorrectness: tokens received {'==' if ok else '!='} tokens sent "
          f"({sum(r.requests for r in results)} timed requests, and {WARMUP} warm-up requests "
          f"per zmq row" + (f", {RAY_WARMUP} per Ray row)" if args.ray else ")"))
    write_json(args.json, {"machine": machine(), "warmup": WARMUP, "ray_warmup": RAY_WARMUP,
                           "ray_inline_limit": inline_limit,
                           "results": [{**asdict(r), **{f"{c}_p{q}_us": r.p(c, q) for c in COLUMNS
                                                          if getattr(r, c + "_us")
                                                          for q in (50, 99)}} for r in results]})
    return 0 if ok and (targets_ok or not args.check_targets) else 1


if __name__ == "__main__":
    sys.exit(main())
