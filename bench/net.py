"""Across hosts, for real: a proxy and a worker in two network namespaces, over TCP (root and
iproute2 needed); docs/benchmarks.md, "Across hosts", describes the run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from tokenwire import GenerationRequest
from tokenwire.transport import recv_pyobj_oob, send_pyobj_oob
from bench.data import PlainGenerationRequest, load_ids
from bench.e2e import crc, hand_off
from bench.harness import (Target, arg_parser, clone_env, exit_on_sigterm, kill_group,
                           load_average, machine, percentile, print_trips, report_targets,
                           run_tagged, turns, wait_while_parent_lives, write_json)

PREFIX = "twbench"
ADDR_PROXY, ADDR_WORKER, PORT = "10.77.0.1", "10.77.0.2", 5591
CODECS = ("raw", "packed", "pfor", "zstd", "auto")
BLOCK = 4       # requests per turn of a row
#: The rate the targets hold at: the default codec's trip against raw's and the baseline's.
TARGET_RATE = "1gbit"


def _faster(than: str, bound: float) -> Target:
    """`oob default`'s trip p50 at least `bound` times shorter than row `than`'s."""
    def shown(rows: dict[str, Any], v: float) -> str:
        return f"{v:.2f}x ({rows['oob default']['p50_ms']:.2f} vs {rows[than]['p50_ms']:.2f} ms)"
    return Target(f"oob default's trip >= {bound:g}x shorter than {than}'s",
                  lambda rows: rows[than]["p50_ms"] / rows["oob default"]["p50_ms"],
                  lambda v: v >= bound, shown)


TARGETS = [_faster("oob raw", 1.5), _faster("baseline", 3)]


# ---------------------------------------------------------------------------------------------
# Network namespaces

def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def sweep_stale() -> None:
    """Removes the namespaces of earlier runs whose process is gone (a run killed with SIGKILL
    cannot clean up after itself; the names carry the pid that made them)."""
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        name = line.split(" ")[0]
        if not name.startswith(PREFIX + "-"):
            continue
        try:
            pid = int(name.split("-")[2])
            os.kill(pid, 0)
        except (IndexError, ValueError, ProcessLookupError):
            _ip("netns", "del", name, check=False)
        except PermissionError:
            pass


@contextlib.contextmanager
def netns_pair(rate: str | None) -> Iterator[tuple[str, str]]:
    """Two namespaces, the proxy's and the worker's, joined by a veth pair rate-limited to `rate`
    (or not); removed when the block ends, also by ^C or SIGTERM's SystemExit."""
    pair = (f"{PREFIX}-p-{os.getpid()}", f"{PREFIX}-w-{os.getpid()}")
    sweep_stale()
    try:
        for ns in pair:
            _ip("netns", "add", ns)
        _ip("link", "add", "twv-p", "netns", pair[0], "type", "veth", "peer", "name", "twv-w",
            "netns", pair[1])
        for ns, dev, addr in zip(pair, ("twv-p", "twv-w"), (ADDR_PROXY, ADDR_WORKER)):
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            if rate:
                _ip("netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate",
                    rate, "burst", "32kb", "latency", "400ms")
        yield pair
    finally:
        for ns in pair:
            _ip("netns", "del", ns, check=False)


def namespaces_usable() -> str | None:
    """None when this process can make network namespaces, else why not."""
    if sys.platform != "linux":
        return "network namespaces are Linux's"
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_NET_ADMIN)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"`{tool}` (iproute2) is not installed"
    probe = f"{PREFIX}-probe-{os.getpid()}"
    r = _ip("netns", "add", probe, check=False)
    _ip("netns", "del", probe, check=False)
    return None if r.returncode == 0 else f"`ip netns add` failed: {r.stderr.strip()}"


# ---------------------------------------------------------------------------------------------
# The two processes

def alive_or_exit(sock: Any, parent: int, send: bool = False) -> None:
    """Returns when `sock` has a message (with `send`: can send one); exits the process once its
    parent is no longer `parent`, the launcher (`ip netns exec` execs): a launcher killed with
    SIGKILL leaves no worker or proxy behind, even one whose PAIR peer is gone."""
    if not wait_while_parent_lives(sock, parent, send=send):
        os._exit(3)


def worker_main(endpoint: str, parent: int) -> int:
    """Receives requests until an empty message; answers each with the CRC-32 of its ids."""
    import zmq

    sock: Any = zmq.Context.instance().socket(zmq.PAIR)
    sock.bind(endpoint)
    while True:
        alive_or_exit(sock, parent)
        kind = bytes(sock.recv())
        if kind == b"":
            return 0
        req = recv_pyobj_oob(sock) if kind == b"oob" else sock.recv_pyobj()
        ids = hand_off(req)
        alive_or_exit(sock, parent, send=True)
        sock.send(crc(ids).to_bytes(4, "little"))


def tx_bytes(dev: str) -> int:
    """The bytes the proxy's end of the veth pair has sent (IP packets: the request's frames
    with zmq's and TCP/IP's headers, and the ACKs of the answer). `ip netns exec` mounts the
    namespace's own sysfs, so this is the proxy namespace's device."""
    with open(f"/sys/class/net/{dev}/statistics/tx_bytes") as f:
        return int(f.read())


def proxy_main(cfg: dict[str, Any]) -> int:
    """Runs every row against the worker and prints one JSON line with the trips."""
    import zmq

    parent = cfg["launcher"]
    ids = load_ids(cfg["isl"], cfg["ids"])
    want = crc(ids).to_bytes(4, "little")
    sock: Any = zmq.Context.instance().socket(zmq.PAIR)
    sock.connect(cfg["endpoint"])

    def send(row: str, req_id: int, lst: list[int]) -> None:
        cls = PlainGenerationRequest if row == "baseline" else GenerationRequest
        req = cls(lst, {"max_tokens": 64}, id=req_id)
        if row.startswith("oob "):
            codec = row.split(" ", 1)[1]                 # "default": the transport's pick
            sock.send(b"oob", zmq.SNDMORE)
            send_pyobj_oob(sock, req, codec=None if codec == "default" else codec)
        else:
            sock.send(b"pyobj", zmq.SNDMORE)
            sock.send_pyobj(req)

    rows = cfg["rows"]
    trips: dict[str, list[float]] = {r: [] for r in rows}
    wire: dict[str, list[int]] = {r: [] for r in rows}
    wrong = 0
    total = cfg["warmup"] + cfg["requests"]
    for row, lo, hi in turns(rows, total, BLOCK):
        for i in range(lo, hi):
            before = tx_bytes(cfg["dev"])
            lst = ids.tolist()          # the tokenizer's fresh list, built outside the timing
            alive_or_exit(sock, parent, send=True)      # outside the timing too
            t0 = time.perf_counter()
            send(row, i, lst)
            alive_or_exit(sock, parent)
            got = bytes(sock.recv())
            dt = time.perf_counter() - t0
            wrong += got != want
            if i >= cfg["warmup"]:
                trips[row].append(dt)
                wire[row].append(tx_bytes(cfg["dev"]) - before)
    sock.send(b"")
    sock.close(linger=1000)
    out = {row: {"p50_ms": percentile(t, 50) * 1e3, "p99_ms": percentile(t, 99) * 1e3,
                 "wire_bytes": int(np.median(wire[row]))} for row, t in trips.items()}
    print("TOKENWIRE-NET " + json.dumps({"rows": out, "wrong": int(wrong)}), flush=True)
    return 1 if wrong else 0


# ---------------------------------------------------------------------------------------------
# The launcher

def run_pair(rate: str | None, cfg: dict[str, Any], timeout: float) -> dict[str, Any]:
    """One namespace pair (rate-limited to `rate`, or not), the worker and the proxy in it."""
    endpoint, me = f"tcp://{ADDR_WORKER}:{PORT}", os.getpid()
    cfg = dict(cfg, endpoint=endpoint, dev="twv-p", launcher=me)
    with netns_pair(rate) as (proxy, worker_ns):
        worker = subprocess.Popen(
            ["ip", "netns", "exec", worker_ns, sys.executable, "-m", "bench.net", "--worker",
             endpoint, "--launcher", str(me)], env=clone_env(), start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=None, text=True)
        try:
            return run_tagged(["ip", "netns", "exec", proxy, sys.executable, "-m", "bench.net",
                               "--proxy", json.dumps(cfg)], "TOKENWIRE-NET", "the proxy", timeout)
        finally:
            kill_group(worker)


def main(argv: list[str] | None = None) -> int:
    p = arg_parser("python -m bench net", __doc__, "unshaped only, 8 requests a row", check=True)
    p.add_argument("--rate", default="1gbit,2500mbit,unshaped",
                   help="comma-separated tbf rates (tc's units), 'unshaped' for none")
    p.add_argument("--isl", type=int, default=40_000, help="ids per request")
    p.add_argument("--requests", type=int, default=60, help="timed requests per row")
    p.add_argument("--ids", metavar="FILE", help="real ids: a raw little-endian int32 file")
    p.add_argument("--worker", metavar="ENDPOINT", help=argparse.SUPPRESS)
    p.add_argument("--proxy", metavar="CONFIG", help=argparse.SUPPRESS)
    p.add_argument("--launcher", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return worker_main(args.worker, args.launcher)
    if args.proxy:
        return proxy_main(json.loads(args.proxy))

    why = namespaces_usable()
    if why is not None:
        print(f"python -m bench net: {why}", file=sys.stderr)
        return 2
    exit_on_sigterm()                     # unwinds through run_pair's cleanup
    rates = ["unshaped"] if args.quick else args.rate.split(",")
    rows = ["baseline", "tokenwire"] + [f"oob {c}" for c in CODECS] + ["oob default"]
    cfg = {"isl": args.isl, "requests": 8 if args.quick else args.requests, "warmup": BLOCK,
           "ids": args.ids, "rows": rows}
    print(f"# {machine()}")
    print(f"# load average before the run: {load_average()}; {args.isl:,} ids a request "
          f"({'real ids from ' + args.ids if args.ids else 'seeded ids'}), "
          f"{cfg['requests']} timed requests a row")
    runs = {}
    for rate in rates:
        res = run_pair(None if rate == "unshaped" else rate, cfg,
                       timeout=120 + 0.5 * len(rows) * (cfg["requests"] + BLOCK))
        runs[rate] = res
        print(f"\n{rate}: trip (serialize -> worker's int32 ids -> answer), bytes on the wire")
        print_trips(res["rows"], {"wire KB": lambda r: f"{r['wire_bytes'] / 1e3:.1f}"})
        if res["wrong"] or res["exit"]:
            print(f"  ids arrived wrong in {res['wrong']} requests (proxy exit {res['exit']})",
                  file=sys.stderr)
            return 1
    ok = TARGET_RATE not in runs or report_targets(
        runs[TARGET_RATE]["rows"], TARGETS, f"Targets at {TARGET_RATE} (this run, trip p50):")
    write_json(args.json, {"config": cfg, "runs": runs})
    return 0 if ok or not args.check_targets else 1


if __name__ == "__main__":
    sys.exit(main())
