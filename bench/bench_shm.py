"""The shared-memory channel (tokenwire.shm) against in-band and out-of-band frames.

    python -m bench shm          # paths by size, across two processes, a slot vs memcpy

Per id count, one send + receive of ``{"ids": TokenVector}`` on an ipc:// PUSH/PULL pair in this
process for each path (in-band, out-of-band frame, shared-memory slot; best of 15 rounds of 200);
the round trip of 40,000 ids to a worker process that acknowledges each message (out-of-band;
shm with send_pyobj_oob(channel=); the whole message in the ring, Sender(ring=True), the worker
sleeping on the socket or spinning SPIN_US on it, Receiver(spin_us=); median of 7 rounds of 200);
then 160 KB through a slot (write, copy out, free) next to one memcpy of it into a ring of 4
slot-sized buffers.
"""

from __future__ import annotations

import argparse
import os
import time
import timeit
from typing import Callable

import numpy as np

from tokenwire import TokenVector, shm
from tokenwire.transport import recv_pyobj_oob, send_pyobj_oob
from bench.harness import Sockets, spawn, stop

SIZES = (1024, 4096, 8192, 16384, 40000)
#: How long the spinning receiver waits on the ring before it blocks on the socket.
SPIN_US = 2000.0


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


def worker(inbox: str, acks: str) -> None:
    """The far side of `across_processes`: told a mode and a count, receive that many messages
    that way, acknowledging each; a count of 0 ends it."""
    import zmq
    with Sockets() as socks, shm.Receiver() as receiver:
        pull, push = socks.connect(zmq.PULL, inbox), socks.connect(zmq.PUSH, acks)
        while True:
            # Through the channel: a doorbell still waiting for a message the spin took from
            # the ring is dropped there, never read as a message.
            mode, count = recv_pyobj_oob(pull, channel=receiver)
            if not count:
                break
            # One receiver for every row (two would each take the other's doorbells for new
            # messages): the row's spin set as Receiver(spin_us=) sets it.
            receiver._spin_us = SPIN_US if mode == "shm-spin" else 0.0
            for _ in range(count):
                if mode == "out-of-band":
                    recv_pyobj_oob(pull)
                else:                                   # shm, the ring (spinning or not)
                    recv_pyobj_oob(pull, channel=receiver)
                push.send(b"")
            receiver._spin_us = 0.0


def across_processes(n: int = 40_000, rounds: int = 7) -> None:
    import zmq
    with Sockets() as socks, shm.Sender(slots=8) as sender:
        push, pull = socks.bind(zmq.PUSH, "in"), socks.bind(zmq.PULL, "ack")
        proc = spawn(worker, socks.addrs["in"], socks.addrs["ack"])
        obj = {"ids": TokenVector(np.arange(n, dtype=np.int32))}
        send_pyobj_oob(push, ("shm", 1), channel=sender)  # the first offers the segment
        send_pyobj_oob(push, obj, channel=sender)
        pull.recv()
        medians: dict[str, float] = {}
        for name in ("out-of-band", "shm", "shm-ring", "shm-spin"):
            channel = None if name == "out-of-band" else sender

            def trip() -> None:
                send_pyobj_oob(push, obj, oob_threshold=0, channel=channel)
                pull.recv()
            times = []
            for r in range(rounds + 1):                  # the first round warms up
                send_pyobj_oob(push, (name, 200), channel=sender)
                # One sender for every row (the ring keeps one sender's order on its socket:
                # another sender's message could be overtaken): ring=True set per row.
                sender._ring = name in ("shm-ring", "shm-spin")
                times.append(_us(trip))
                sender._ring = False
            medians[name] = sorted(times[1:])[rounds // 2]
        send_pyobj_oob(push, ("", 0), channel=sender)
        stop(proc)
    print(f"\n{n} ids, round trip to a worker process: " +
          ", ".join(f"{k} {v:.1f} us" for k, v in medians.items()))


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
    p = argparse.ArgumentParser(prog="python -m bench shm", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="fewer rounds (a smoke test: a few seconds, figures rougher)")
    args = p.parse_args(argv)
    if not shm.available():
        print("tokenwire.shm needs Linux memfd_create")
        return 1
    with shm.Sender(slots=4, threshold=0) as sender, shm.Receiver() as receiver:
        paths(sender, receiver, rounds=2 if args.quick else 15)
    across_processes(rounds=1 if args.quick else 7)
    with shm.Sender(slots=4) as sender, shm.Receiver() as receiver:
        slot_vs_memcpy(sender, receiver, rounds=2_000 if args.quick else 20_000)
    return 0

