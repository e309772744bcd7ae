"""What tokenwire's malloc settling costs a process's memory: peak and final RSS of a torch-like
allocation pattern, settling on against off; docs/benchmarks.md, "glibc malloc settling".
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from typing import Any

from bench.harness import arg_parser, write_json

CHILD = r"""
import gc, json, random, sys
from math import log2
import numpy as np
import tokenwire
from tokenwire import TokenVector
from tokenwire._core import _malloc_settled_bytes

seed, steps, n_tensors, n_requests, min_ids, max_ids, min_kib, max_kib = map(int, sys.argv[1:9])


def status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024          # kB -> MiB


rng = random.Random(seed)
tensors, requests = [], []
start = status("VmRSS")
for step in range(steps):
    n = rng.randrange(min_ids, max_ids + 1)
    ids = np.asarray([rng.randrange(150_000) for _ in range(64)], np.int32)
    vector = TokenVector(np.resize(ids, n))                   # a vector of its own (tv_alloc)
    requests.append((vector, vector.tolist()))
    del requests[:-n_requests]
    size = int(1024 * 2 ** rng.uniform(log2(min_kib), log2(max_kib))) // 4 * 4
    tensor = np.empty(size // 4, np.float32)
    tensor.fill(1.0)                                            # resident, as a written tensor
    tensors.append(tensor)
    del tensors[:-n_tensors]
    del tensor, vector
steady = status("VmRSS")
tensors.clear()
requests.clear()
gc.collect()
print(json.dumps({"start": start, "peak": status("VmHWM"), "steady": steady,
                  "final": status("VmRSS"), "settled": _malloc_settled_bytes()}))
"""


def run_once(settle: bool, args: argparse.Namespace, seed: int) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env.pop("GLIBC_TUNABLES", None)                      # glibc adapts its thresholds itself
    env["TOKENWIRE_MALLOC_SETTLE"] = "1" if settle else "0"
    argv = [str(v) for v in (seed, args.steps, args.tensors, args.requests, args.min_ids,
                             args.max_ids, args.min_kib, args.max_kib)]
    # Started outside the clone: `-c` puts the working directory first on the child's sys.path,
    # where the checkout's tokenwire/ (sources, no compiled extension) would shadow the
    # installed one.
    out = subprocess.run([sys.executable, "-c", CHILD, *argv], env=env, capture_output=True,
                         text=True, cwd=tempfile.gettempdir())
    if out.returncode != 0:
        raise RuntimeError(f"the measured process failed ({out.returncode}):\n{out.stderr}")
    return dict(json.loads(out.stdout))


def main(argv: list[str] | None = None) -> int:
    p = arg_parser("python -m bench malloc", __doc__)
    p.add_argument("--runs", type=int, default=7, help="fresh processes per mode (default 7)")
    p.add_argument("--steps", type=int, default=200, help="tensor + request steps (default 200)")
    p.add_argument("--tensors", type=int, default=6, help="tensors alive at once (default 6)")
    p.add_argument("--requests", type=int, default=8, help="requests alive at once (default 8)")
    p.add_argument("--min-kib", type=int, default=1024, help="smallest tensor (default 1 MiB)")
    p.add_argument("--max-kib", type=int, default=65536, help="largest tensor (default 64 MiB)")
    p.add_argument("--min-ids", type=int, default=40_000)
    p.add_argument("--max-ids", type=int, default=128_000)
    p.add_argument("--seed", type=int, default=0, help="run k uses seed + k (same in each mode)")
    args = p.parse_args(argv)
    if sys.platform != "linux":
        print("python -m bench malloc: Linux only (reads /proc/self/status)", file=sys.stderr)
        return 2
    results: dict[str, list[dict[str, Any]]] = {"on": [], "off": []}
    for k in range(args.runs):
        for mode in ("on", "off"):
            results[mode].append(run_once(mode == "on", args, args.seed + k))
    print(f"{args.runs} fresh processes per mode; {args.steps} steps of a {args.min_kib}-"
          f"{args.max_kib} KiB tensor and a request of {args.min_ids}-{args.max_ids} ids; "
          f"{args.tensors} tensors and {args.requests} requests alive (median MiB)")
    print(f"{'settling':>8}  {'settled':>9}  {'peak RSS':>9}  {'steady RSS':>10}  "
          f"{'final RSS':>9}")
    for mode, runs in results.items():
        med = {key: statistics.median(r[key] for r in runs) for key in ("peak", "steady", "final")}
        settled = max(r["settled"] for r in runs) / 2**20
        print(f"{mode:>8}  {settled:7.1f}Mi  {med['peak']:9.1f}  {med['steady']:10.1f}  "
              f"{med['final']:9.1f}")
    pairs = [on["peak"] - off["peak"] for on, off in zip(results["on"], results["off"])]
    print(f"pair difference, peak RSS (on - off, the same seed): median "
          f"{statistics.median(pairs):+.1f} MiB; on higher in {sum(d > 0 for d in pairs)} of "
          f"{len(pairs)}")
    write_json(args.json, {"args": vars(args), "runs": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
