"""MPI broadcast of each iteration's new requests, as a TP/PP executor's rank 0 sends them, under
`mpiexec -n R` (the `mpi` extra); docs/benchmarks.md, "MPI ranks", describes the run.
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
import time
from typing import Any

import numpy as np

from tokenwire import GenerationRequest
from bench.data import PlainGenerationRequest, token_stream
from bench.e2e import hand_off
from bench.harness import (Target, arg_parser, exit_on_sigterm, find_tool, ints, load_average,
                           machine, percentile, print_trips, report_targets, run_tagged,
                           write_json)

#: Rows: (request kind, broadcast); the first is the baseline.
ROWS = [("plain list", "comm.bcast"), ("plain list", "pkl5"),
        ("tokenwire", "comm.bcast"), ("tokenwire", "pkl5")]
#: The target, a ratio of the baseline's p50 iteration time to the best tokenwire row's.
TARGET_RATIO = 10.0
TARGET = Target(f"best tokenwire row >= {TARGET_RATIO:g}x the baseline",
                lambda rows: rows["plain list, comm.bcast"]["p50_ms"] / min(
                    rows[f"tokenwire, {how}"]["p50_ms"] for how in ("comm.bcast", "pkl5")),
                lambda v: v >= TARGET_RATIO, lambda rows, v: f"{v:.1f}x")


def make_batch(kind: str, ids: list[np.ndarray]) -> list[Any]:
    """Rank 0's batch as the executor holds it: received from the proxy (one pickle hop), so a
    plain request holds a list and a tokenwire request the int32 buffer it arrived in."""
    cls = PlainGenerationRequest if kind == "plain list" else GenerationRequest
    return [pickle.loads(pickle.dumps(cls(a.tolist(), {"max_tokens": 64}, id=i), protocol=5))
            for i, a in enumerate(ids)]


# ---------------------------------------------------------------------------------------------
# Inside mpiexec: every rank runs rank_main; rank 0 prints one JSON line.

def rank_main(cfg: dict[str, Any]) -> int:
    from mpi4py import MPI
    from mpi4py.util import pkl5

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    # The batch's ids, the same on every rank (seeded per request).
    ids = [token_stream(cfg["isl"], seed=i).astype(np.int32) for i in range(cfg["requests"])]
    results: dict[str, Any] = {}
    wrong = 0
    for kind, how in ROWS:
        row = f"{kind}, {how}"
        bcast = comm.bcast if how == "comm.bcast" else pkl5.Intracomm(comm).bcast
        batch = make_batch(kind, ids) if rank == 0 else None
        times = []
        for it in range(cfg["warmup"] + cfg["iters"]):
            comm.Barrier()
            t0 = time.perf_counter()
            got = bcast(batch, root=0)
            arrays = [hand_off(r) for r in got]
            dt = time.perf_counter() - t0
            if it >= cfg["warmup"]:
                times.append(dt)
            if len(arrays) != len(ids) or not all(
                    a.shape == e.shape and np.array_equal(a, e) for a, e in zip(arrays, ids)):
                wrong += 1
            del got, arrays
        every_rank = comm.gather(times, root=0)
        if rank == 0:
            slowest = np.max(np.array(every_rank), axis=0)
            results[row] = {"p50_ms": percentile(slowest, 50) * 1e3,
                            "p99_ms": percentile(slowest, 99) * 1e3}
    wrong_total = comm.allreduce(wrong, op=MPI.SUM)
    if rank == 0:
        print("TOKENWIRE-MPI " + json.dumps({"ranks": comm.Get_size(), "rows": results,
                                              "wrong": wrong_total}), flush=True)
    return 1 if wrong_total else 0


# ---------------------------------------------------------------------------------------------
# The launcher: one mpiexec per rank count, its ranks' process group killed whatever happens.

def find_mpiexec() -> str | None:
    """The mpiexec beside this interpreter (the mpich wheel's), else the one on PATH."""
    return find_tool("mpiexec")


def main(argv: list[str] | None = None) -> int:
    p = arg_parser("python -m bench mpi", __doc__, "2 ranks, 8 iterations: a smoke test",
                   check=f"exit 1 unless the best tokenwire row is >= {TARGET_RATIO:g}x the "
                         "baseline at every rank count")
    p.add_argument("--ranks", default="2,4", help="comma-separated rank counts (mpiexec -n)")
    p.add_argument("--isl", type=int, default=40_000, help="ids per request")
    p.add_argument("--requests", type=int, default=8, help="requests per iteration")
    p.add_argument("--iters", type=int, default=40, help="timed iterations per row")
    p.add_argument("--rank-main", metavar="CONFIG", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.rank_main:
        return rank_main(json.loads(args.rank_main))

    try:
        import mpi4py  # noqa: F401
    except ImportError:
        print("python -m bench mpi: needs mpi4py (pip install '.[mpi]')", file=sys.stderr)
        return 2
    mpiexec = find_mpiexec()
    if mpiexec is None:
        print("python -m bench mpi: no mpiexec beside this Python or on PATH "
              "(pip install '.[mpi]' brings MPICH's)", file=sys.stderr)
        return 2
    exit_on_sigterm()               # run_tagged kills the mpiexec group whatever happens
    ranks = [2] if args.quick else ints(args.ranks)
    iters = 8 if args.quick else args.iters
    cfg = {"isl": args.isl, "requests": args.requests, "iters": iters, "warmup": 2}
    print(f"# {machine()}")
    print(f"# load average before the run: {load_average()} "
          f"(mpiexec: {mpiexec}; {args.requests} requests x {args.isl:,} ids per iteration, "
          f"{iters} iterations per row)")
    runs = []
    ok = True
    for n in ranks:
        res = run_tagged([mpiexec, "-n", str(n), sys.executable, "-m", "bench.mpi", "--rank-main",
                          json.dumps(cfg)], "TOKENWIRE-MPI", f"mpiexec -n {n}",
                         timeout=120 + 2.0 * iters * n)
        runs.append(res)
        print(f"\n{n} ranks: iteration time (the slowest rank; bcast + int32 arrays)")
        print_trips(res["rows"])
        ok &= report_targets(res["rows"], [TARGET], "Target (p50):")
        if res["wrong"] or res["exit"]:
            print(f"  ids arrived wrong in {res['wrong']} rank-iterations (mpiexec exit "
                  f"{res['exit']})", file=sys.stderr)
            return 1
    write_json(args.json, {"config": cfg, "runs": runs})
    return 1 if args.check_targets and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
