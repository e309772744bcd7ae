"""The proxy's side of a request's trip, counted in minor page faults (run as a script).

A fresh process does what a proxy does for every request: it receives the prompt's ids as a new
``list[int]`` (a tokenizer's output; made outside the counted window), builds a
``GenerationRequest`` from it, serializes it (``send_pyobj``'s pickle, or ``dumps_oob`` with the
ids as an out-of-band frame sent ``copy=False``), sends it over a real zmq socket to a receiver
process, waits for the receiver's ack and drops the request. ``resource.getrusage`` counts the
minor faults of each step; the process prints one JSON object: per-step faults summed over the
steady-state requests, the request count, and the median serialize time next to
``as_tokens(list)`` + ``pickle.dumps`` of the same request measured apart.

    python tests/proxy_faults.py [--mode pickle|oob] [--transport ipc|tcp] [--isl N] [--count N]
                                 [--late N]

``--late N`` (out-of-band): the frames a ``copy=False`` send hands to zmq are released by
pyzmq's garbage-collector thread, whenever it next gets the GIL; on a busy machine it runs late
and releases several requests' frames at once. The script makes that happen the same way every
run: it keeps each request's frames after the ack, and drops all it keeps with probability 1/2
per request (seeded) or once it holds N + 1 requests.

Used by tests/test_proxy_faults.py. No environment variable is read: run it without
``MALLOC_*`` / ``GLIBC_TUNABLES`` to see what a default process does.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import random
import resource
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List
from support.wait import WAIT_MS, WAIT_S


def receiver(data_addr: str, ack_addr: str) -> None:
    """Receive each message whole, unpickle it (as a worker does), ack it; stop on b"stop"."""
    import zmq

    from tokenwire.transport import loads_oob

    ctx = zmq.Context()
    data = ctx.socket(zmq.PULL)
    ack = ctx.socket(zmq.PUSH)
    data.connect(data_addr)
    ack.connect(ack_addr)
    while True:
        frames = data.recv_multipart(copy=False)
        if frames[0].bytes == b"stop":
            break
        req = loads_oob(frames) if len(frames) > 1 else pickle.loads(frames[0].buffer)
        ack.send(b"ok")
        del req, frames
    ack.send(b"bye")
    ctx.destroy(linger=1000)


def _heap_bytes() -> Any:
    """A function returning the bytes of glibc's main heap (mallinfo2's `arena`, which drops
    when free() trims the heap top back to the kernel), or 0 off glibc."""
    import ctypes

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in
                    ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                     "uordblks", "fordblks", "keepcost")]
    try:
        fn = ctypes.CDLL(None).mallinfo2
    except AttributeError:                   # not glibc, or glibc before 2.33
        return lambda: 0
    fn.restype = MallInfo2
    return lambda: fn().arena


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=("pickle", "oob"), default="pickle")
    ap.add_argument("--transport", choices=("ipc", "tcp", "none"), default="ipc",
                    help="none: no socket, the frames are dropped (with --late: when the script "
                         "releases them, so that only its own schedule decides when each "
                         "vector is freed)")
    ap.add_argument("--isl", type=int, default=40_000)
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--history", type=int, default=0,
                    help="vary the process's allocation history before the loop: keep this "
                         "many small objects alive (whether glibc falls into a per-request "
                         "munmap cycle depends on such details)")
    ap.add_argument("--late", type=int, default=0,
                    help="keep up to this many earlier requests' frames alive, released in "
                         "bursts, as a late pyzmq garbage-collector thread does")
    ap.add_argument("--receiver", nargs=2, metavar=("DATA", "ACK"))
    args = ap.parse_args()
    history = [bytes(48 + 16 * (i % 64)) for i in range(args.history)]
    if args.receiver:
        receiver(*args.receiver)
        return

    if args.transport == "none":
        _loop(args, history, None, None, lambda: None)
        return

    import zmq

    ctx = zmq.Context()
    data = ctx.socket(zmq.PUSH)
    ack = ctx.socket(zmq.PULL)
    tmp = tempfile.mkdtemp(prefix="tokenwire-faults-")
    if args.transport == "ipc":
        data_addr, ack_addr = f"ipc://{tmp}/data", f"ipc://{tmp}/ack"
        data.bind(data_addr)
        ack.bind(ack_addr)
    else:
        data_addr = f"tcp://127.0.0.1:{data.bind_to_random_port('tcp://127.0.0.1')}"
        ack_addr = f"tcp://127.0.0.1:{ack.bind_to_random_port('tcp://127.0.0.1')}"
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__),
                             "--receiver", data_addr, ack_addr])
    def stop() -> None:
        data.send(b"stop")
        ack.poll(WAIT_MS)

    try:
        _loop(args, history, data, ack, stop)
    finally:
        proc.wait(WAIT_S)
        ctx.destroy(linger=0)


def _loop(args: Any, history: List[bytes], data: Any, ack: Any, stop: Any) -> None:
    """The requests (sent on `data` and acked on `ack` unless they are None), `stop()`, then the
    floor measured apart and the JSON line."""
    import tokenwire
    from tokenwire import GenerationRequest
    from tokenwire.transport import dumps_oob

    rnd = random.Random(0)
    base = [rnd.randrange(151_936) for _ in range(args.isl)]
    params = {"temperature": 0.7, "max_new_tokens": 128}
    steps = ("build", "serialize", "send", "ack")
    faults: Dict[str, int] = dict.fromkeys(steps, 0)
    per_request: List[int] = []
    ser_us: List[float] = []
    held: List[Any] = []                     # --late: frames zmq's gc thread has not released
    late = random.Random(1)

    def minflt() -> int:
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

    heap = _heap_bytes()
    shrinks = grows = 0
    last_heap = heap()

    for i in range(args.warmup + args.count):
        lst = list(base)                 # the tokenizer's output: a new list per request
        lst[i % args.isl] = i % 1000
        f0 = minflt()
        req = GenerationRequest(lst, params, streaming=True, arrival_time=time.time(), id=i)
        f1 = minflt()
        t0 = time.perf_counter()
        if args.mode == "oob":
            frames: List[Any] = dumps_oob(req)
        else:
            frames = [pickle.dumps(req, protocol=pickle.HIGHEST_PROTOCOL)]   # send_pyobj
        t1 = time.perf_counter()
        f2 = minflt()
        if data is not None:
            data.send_multipart(frames, copy=len(frames) == 1)
        f3 = minflt()
        if ack is not None:
            if not ack.poll(WAIT_MS):
                raise RuntimeError("the receiver stopped answering")
            ack.recv()
        f4 = minflt()
        if args.late:
            held.append(frames)
            if len(held) > args.late or late.random() < 0.5:
                held.clear()
        del req, frames, lst
        if i >= args.warmup:
            for step, d in zip(steps, (f1 - f0, f2 - f1, f3 - f2, f4 - f3)):
                faults[step] += d
            per_request.append(f4 - f0)
            ser_us.append((t1 - t0) * 1e6)
            shrinks += heap() < last_heap
            grows += heap() > last_heap
        last_heap = heap()

    held.clear()
    stop()
    # Apart, in the same (now warm) process: the floor the serialize is compared with.
    lst = list(base)
    built = GenerationRequest(tokenwire.as_tokens(lst), params, streaming=True,
                              arrival_time=time.time(), id=0)

    def median_us(fn: Any, n: int = 50) -> float:
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t0) * 1e6)
        return sorted(out)[n // 2]

    conv = median_us(lambda: tokenwire.as_tokens(lst))
    dump = median_us(lambda: pickle.dumps(built, protocol=pickle.HIGHEST_PROTOCOL))
    print(json.dumps({
        "mode": args.mode, "transport": args.transport, "isl": args.isl, "late": args.late,
        "requests": args.count, "history": len(history), "faults": faults, "faults_total": sum(per_request),
        "faults_max_request": max(per_request),
        "requests_faulting": sum(1 for f in per_request if f >= 4),   # >= 4 pages: a block
        "heap_shrinks": shrinks,            # requests after which glibc's heap was smaller
        "heap_grows": grows,                # ... and larger (more blocks alive than ever before)
        "serialize_us": sorted(ser_us)[len(ser_us) // 2],
        "as_tokens_us": conv, "dumps_built_us": dump,
    }))


if __name__ == "__main__":
    main()
