"""The worker-side submit path: receive -> unpickle -> hand the int32 buffer to the engine.

    python examples/worker_submit.py                       # 4 requests of 40k ids over ipc://
    python examples/worker_submit.py --isl 128000 --transport tcp --requests 8
    TOKENWIRE_KEY=$(python -c 'import secrets; print(secrets.token_hex(32))') \
        python examples/worker_submit.py --key-env TOKENWIRE_KEY   # signed messages (HMAC)

This script is the worker. It binds a PULL socket and spawns a proxy process that builds each
`GenerationRequest` from a Python list (what a tokenizer hands the proxy) and sends it with
`tokenwire.transport.send_pyobj_oob`: the pickle in one frame, the int32 ids out-of-band in
another, no per-token work. The worker unpickles it (the ids view the received frame) and gives
`tokenwire.token_buffer(request, "prompt_token_ids")` to `native_request_ctor`, a stand-in for an engine's
`Request(input_token_ids=...)` constructor with a memcpy fast path for 1-D int32 buffers. No
`list[int]` is built on the worker: the script checks that, and that the ids are the ones sent.

Needs pyzmq (`pip install pyzmq`).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time

import numpy as np

from tokenwire import GenerationRequest, token_buffer
from tokenwire.transport import key_from_env, recv_pyobj_oob, send_pyobj_oob


def make_prompt(index: int, isl: int) -> np.ndarray:
    """The ids of request `index` (seeded, so both processes know them)."""
    return np.random.default_rng(index).integers(0, 151_936, size=isl, dtype=np.int32)


def native_request_ctor(input_token_ids) -> np.ndarray:
    """Stand-in for the engine's request constructor: copies the ids into engine-owned memory.

    A 1-D C-contiguous int32 buffer is one memcpy (the fast path); anything else -- a list[int]
    -- is cast element by element, as the binding's default conversion would do.
    """
    try:
        view = memoryview(input_token_ids)
    except TypeError:
        return np.array(input_token_ids, dtype=np.int32)          # the per-token path
    if view.format != "i" or view.ndim != 1 or not view.c_contiguous:
        return np.array(input_token_ids, dtype=np.int32)
    engine_tokens = np.empty(view.shape[0], dtype=np.int32)
    engine_tokens.data.cast("B")[:] = view.cast("B")             # one memcpy
    return engine_tokens


def submit(request: GenerationRequest) -> np.ndarray:
    """What the worker does with each request it receives (cf. BaseWorker._enqueue_request).

    The one changed line: `token_buffer(request, "prompt_token_ids")` instead of
    `request.prompt_token_ids` -- the int32 buffer the request holds (no list built); for ids
    that arrived as a list, one C pass (still no per-token cast in the engine's binding)."""
    return native_request_ctor(token_buffer(request, "prompt_token_ids"))   # memcpy, no list


def proxy(endpoint: str, requests: int, isl: int, key_env: str | None = None) -> None:
    """The proxy process: build requests from Python lists and push them to the worker."""
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    sock.connect(endpoint)
    key = key_from_env(key_env) if key_env else None     # the same secret as the worker's
    try:
        for i in range(requests):
            ids = make_prompt(i, isl).tolist()                    # what a tokenizer returns
            request = GenerationRequest(ids, {"max_tokens": 16}, id=i, arrival_time=time.time())
            send_pyobj_oob(sock, request, key=key)
    finally:
        sock.close(linger=10_000)
        ctx.term()


def main(argv: list[str] | None = None) -> int:
    import zmq

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--isl", type=int, default=40_000, help="prompt length (token ids)")
    p.add_argument("--requests", type=int, default=4)
    p.add_argument("--transport", choices=["ipc", "tcp"], default="ipc")
    p.add_argument("--key-env", metavar="NAME", default=None,
                   help="sign and verify every message with the hex key in this environment "
                        "variable (tokenwire.transport: HMAC-SHA256, checked before unpickling)")
    args = p.parse_args(argv)
    key = key_from_env(args.key_env) if args.key_env else None

    ctx = zmq.Context()
    sock = ctx.socket(zmq.PULL)
    tmp = tempfile.mkdtemp(prefix="tokenwire-")
    if args.transport == "ipc":
        endpoint = f"ipc://{os.path.join(tmp, 'submit.sock')}"
        sock.bind(endpoint)
    else:
        endpoint = f"tcp://127.0.0.1:{sock.bind_to_random_port('tcp://127.0.0.1')}"
    sock.setsockopt(zmq.RCVTIMEO, 120_000)

    spawn = multiprocessing.get_context("spawn")
    proxy_proc = spawn.Process(target=proxy, args=(endpoint, args.requests, args.isl, args.key_env))
    proxy_proc.start()
    try:
        for _ in range(args.requests):
            request = recv_pyobj_oob(sock, key=key)
            t0 = time.perf_counter()
            engine_tokens = submit(request)
            dt = (time.perf_counter() - t0) * 1e6
            # Held as the buffer they arrived in: no list on the wire, none built by the submit.
            assert not GenerationRequest.prompt_token_ids.is_materialized(request), \
                "the ids arrived as a list, or the submit path built one"
            expected = make_prompt(request.id, args.isl)
            assert np.array_equal(engine_tokens, expected), f"request {request.id}: ids differ"
            print(f"request {request.id}: {request.prompt_len:,} ids submitted by memcpy in "
                  f"{dt:.1f} µs; list built: no; signed: {'yes' if key else 'no'}")
    finally:
        proxy_proc.join(timeout=60)
        if proxy_proc.is_alive():
            proxy_proc.terminate()
        sock.close(linger=0)
        ctx.term()
        if args.transport == "ipc":
            try:
                os.unlink(os.path.join(tmp, "submit.sock"))
            except FileNotFoundError:
                pass
        os.rmdir(tmp)
    if proxy_proc.exitcode != 0:
        print(f"proxy exited with {proxy_proc.exitcode}", file=sys.stderr)
        return 1
    print(f"ok: {args.requests} requests over {args.transport}://, ids equal, no list built")
    return 0


if __name__ == "__main__":
    sys.exit(main())
