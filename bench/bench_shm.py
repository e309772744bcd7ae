"""The shared-memory channel (tokenwire.shm) against in-band and out-of-band frames, by size, and
a slot against memcpy; docs/transport.md, "Shared-memory channel (same host)", has the method.
"""

from __future__ import annotations

import os
import time
import timeit
from typing import Callable

import numpy as np

from tokenwire import TokenVector, shm
from tokenwire.transport import recv_pyobj_oob, send_pyobj_oob
from bench.harness import Sockets, arg_parser

SIZES = (1024, 4096, 8192, 16384, 40000)


def _us(fn: Callable[[], object]) -> float:
    """µs per call of `fn` over a round of 200 calls."""
    return timeit.timeit(fn, number=200) / 200 * 1e6


def paths(sender: shm.Sender, receiver: shm.Receiver, rounds: int = 15) -> None:
    import zmq
    with Sockets() as socks:
        pull = socks.bind(zmq.PULL, "paths")
        push = socks.connect(zmq.PUSH, socks.addrs["paths"])
        send_pyobj_oob(push, {"ids": TokenVector(range(10))}, channel=sender)
        recv_pyobj_oob(pull, channel=receiver)                 # the receiver attaches
        print(f"{'ids':>6}  {'in-band':>9}  {'out-of-band':>11}  {'shm':>9}   (us, send + recv)")
        for n in SIZES:
            obj = {"ids": TokenVector(np.arange(n, dtype=np.int32))}

            def run(threshold: int, channel: bool) -> None:
                send_pyobj_oob(push, obj, oob_threshold=threshold,
                               channel=sender if channel else None)
                recv_pyobj_oob(pull, channel=receiver if channel else None)

            cases = [(1 << 30, False), (0, False), (0, True)]
            best = [float("inf")] * 3
            for _ in range(rounds):                # interleaved: the machine's noise hits all
                for k, (threshold, channel) in enumerate(cases):
                    best[k] = min(best[k], _us(lambda: run(threshold, channel)))
            print(f"{n:6d}  {best[0]:9.1f}  {best[1]:11.1f}  {best[2]:9.1f}")


def slot_vs_memcpy(sender: shm.Sender, receiver: shm.Receiver, rounds: int = 20_000) -> None:
    """Interleaved, so that the machine's load weighs on memcpy and slot alike: each round
    copies 160 KB into the next of 4 slot-sized buffers, writes it into a slot, and copies the
    slot out (into a TokenVector) and frees it; mean times after a warm-up."""
    arr = np.arange(40_000, dtype=np.int32)
    src = memoryview(arr.tobytes())                  # the same 160 KB of int32 ids
    n = src.nbytes
    receiver._loads(sender._dumps({"ids": TokenVector(arr)}))
    segment = next(iter(receiver._segments.values()))
    ring = memoryview(bytearray(4 * sender._slot_bytes))
    clock = time.perf_counter_ns
    spent = [0, 0, 0]
    warm = rounds // 10
    for k in range(rounds):
        o = (k % 4) * sender._slot_bytes
        t0 = clock()
        ring[o:o + n] = src
        t1 = clock()
        i, gen = sender._write(src, os.getpid(), k + 1)
        t2 = clock()
        segment.take(i, gen, n, k + 1)
        t3 = clock()
        if k >= warm:
            spent = [spent[0] + t1 - t0, spent[1] + t2 - t1, spent[2] + t3 - t2]
    memcpy, write, read = (t / (rounds - warm) / 1e3 for t in spent)
    print(f"\n160 KB, mean of {rounds - warm} interleaved rounds: memcpy {memcpy:.2f} us, "
          f"slot write {write:.2f} us, copy out + free {read:.2f} us: "
          f"{(write + read) / memcpy:.1f}x one memcpy")


def main(argv: list[str] | None = None) -> int:
    p = arg_parser("python -m bench shm", __doc__, "fewer rounds (a smoke test: a few seconds, "
                   "figures rougher)", json=False)
    args = p.parse_args(argv)
    if not shm.available():
        print("tokenwire.shm needs Linux memfd_create")
        return 1
    with shm.Sender(slots=4, threshold=0) as sender, shm.Receiver() as receiver:
        paths(sender, receiver, rounds=2 if args.quick else 15)
    with shm.Sender(slots=4) as sender, shm.Receiver() as receiver:
        slot_vs_memcpy(sender, receiver, rounds=2_000 if args.quick else 20_000)
    return 0

