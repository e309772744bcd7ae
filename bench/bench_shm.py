"""The shared-memory channel (tokenwire.shm) against in-band and out-of-band frames by size, and
a slot against memcpy; docs/transport.md, "Shared-memory channel (same host)", has the method.
"""

from __future__ import annotations

import atexit
import functools
import itertools
import os
from typing import Any

import numpy as np

from tokenwire import TokenVector, shm
from tokenwire.transport import recv_pyobj_oob, send_pyobj_oob
from bench.harness import Method, grouped_suite_main, push_pull, timed

G_PATHS = "{'ids': TokenVector}: send + recv over zmq ipc:// in one process, each path forced"
G_SLOT = "the ids' bytes into a slot and out again (write, copy out + free), against one memcpy"


@functools.cache
def _channels() -> tuple[shm.Sender, shm.Receiver, shm.Sender, Any]:
    """One run's two channels, attached and closed at exit: one that `push_pull("paths")` sends
    every buffer through (threshold 0), and one written and read directly (its Sender and the
    Receiver's segment)."""
    if not shm.available():
        raise SystemExit("python -m bench shm: tokenwire.shm needs Linux memfd_create")
    push, pull = push_pull("paths")
    sender, receiver = shm.Sender(slots=4, threshold=0), shm.Receiver()
    writer, reader = shm.Sender(slots=4), shm.Receiver()
    for end in (sender, receiver, writer, reader):
        atexit.register(end.close)
    send_pyobj_oob(push, {"ids": TokenVector(range(10))}, channel=sender)
    recv_pyobj_oob(pull, channel=receiver)                     # the receiver attaches
    reader._loads(writer._dumps({"ids": TokenVector(range(10))}))
    return sender, receiver, writer, next(iter(reader._segments.values()))


def methods_for(n: int) -> list[Method]:
    sender, receiver, writer, segment = _channels()
    push, pull = push_pull("paths")
    obj = {"ids": TokenVector(np.arange(n, dtype=np.int32))}

    def path(threshold: int, channel: bool) -> Any:
        def run() -> Any:
            send_pyobj_oob(push, obj, oob_threshold=threshold,
                           channel=sender if channel else None)
            return recv_pyobj_oob(pull, channel=receiver if channel else None)
        return run

    # The slot against a memcpy of the same bytes into the next of 4 slot-sized buffers (the
    # slots' footprint); every write is read back and freed, as a receiver does.
    if 4 * n > writer._slot_bytes:
        raise SystemExit(f"python -m bench shm: --isl {n:,} is more than a slot holds "
                         f"({writer._slot_bytes // 4:,} ids)")
    src = memoryview(np.arange(n, dtype=np.int32).tobytes())
    ring, stride = memoryview(bytearray(4 * writer._slot_bytes)), writer._slot_bytes
    turn, seqs, pid = itertools.count(), itertools.count(1), os.getpid()

    def memcpy() -> None:
        o = next(turn) % 4 * stride
        ring[o:o + src.nbytes] = src

    def through_slot() -> Any:
        seq = next(seqs)
        i, gen = writer._write(src, pid, seq)
        if i < 0:
            raise RuntimeError("no slot was free: an earlier write was not read back")
        return segment.take(i, gen, src.nbytes, seq)

    return [timed(G_PATHS, "in-band (the ids in the pickle)", path(1 << 30, False), True),
            timed(G_PATHS, "out-of-band frames", path(0, False)),
            timed(G_PATHS, "shared memory (channel=)", path(0, True)),
            timed(G_SLOT, "memcpy", memcpy, True),
            timed(G_SLOT, "slot write + copy out + free", through_slot)]


def main(argv: list[str] | None = None) -> int:
    return grouped_suite_main(argv, suite="shm", doc=__doc__ or "", methods_for=methods_for,
                              default_isl="1024,4096,8192,16384,40000", targets=[])
