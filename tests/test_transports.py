"""GenerationRequest across real transports: multiprocessing, pyzmq's ROUTER/DEALER and leading
frames, Ray. (The round trip, memory, hostile-bytes and killed-peer checks every way to send
passes are tests/test_transport_harness.py.)

Every test asserts that the ids that arrive equal the ids sent and that the receiving side did
not build a list. pyzmq and Ray are test extras; their tests skip only when the package is
missing.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import subprocess
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from support import transport_workers
from tokenwire import GenerationRequest, TokenVector, WireFormatError, token_buffer
from tokenwire._oob import OOB_THRESHOLD
from tokenwire.transport import dumps_oob, loads_oob, recv_pyobj_oob, send_pyobj_oob
from support.transport_workers import Received, describe
from support.wait import WAIT_MS, WAIT_S

# Real subprocesses, sockets and clusters: `pytest -m "not integration"` skips them.
pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent
PROMPT = GenerationRequest.prompt_token_ids
ISLS = [0, 3, 40_000, 128_000]


def make_ids(n: int, seed: int = 0) -> list[int]:
    ids = np.random.default_rng(seed).integers(0, 151_936, size=n, dtype=np.int32)
    if n >= 2:
        ids[0], ids[-1] = 2**31 - 1, -(2**31)      # boundary ids travel too
    return ids.tolist()


def make_request(n: int, seed: int = 0, kind: str = "list") -> GenerationRequest:
    ids = make_ids(n, seed)
    prompt = ids if kind == "list" else np.array(ids, dtype=np.int32)
    return GenerationRequest(prompt, {"max_tokens": 16, "seed": seed}, query_token_ids=ids[:5],
                             id=seed)


def check(received: Received, sent: GenerationRequest) -> None:
    ids = token_buffer(sent, "prompt_token_ids")
    assert received.id == sent.id
    assert received.materialized is False, "the receiving side built a list"
    assert received.prompt == ids
    assert received.query == sent.query_token_ids
    assert received.sampling_params == sent.sampling_params


# --------------------------------------------------------------------------------------------
# the frame helpers, without a socket


def test_oob_threshold_decides_which_buffers_go_out_of_band():
    # The query (5 ids) always stays in-band; the prompt goes out of band from OOB_THRESHOLD.
    below, at = make_request(OOB_THRESHOLD // 4 - 1), make_request(OOB_THRESHOLD // 4)
    assert len(dumps_oob(below)) == 1 and len(dumps_oob(at)) == 2
    frames = dumps_oob(make_request(3), oob_threshold=0)
    assert len(frames) == 3
    assert len(frames[1]) == 12 and len(frames[2]) == 12
    check(describe(loads_oob(frames)), make_request(3))


# --------------------------------------------------------------------------------------------
# multiprocessing (spawn: the request really is pickled into a fresh interpreter)


@pytest.fixture(scope="module")
def spawn():
    return multiprocessing.get_context("spawn")


def test_spawn_queue(spawn):
    inbox, outbox = spawn.Queue(), spawn.Queue()
    proc = spawn.Process(target=transport_workers.queue_echo, args=(inbox, outbox))
    proc.start()
    try:
        sent = [make_request(n, seed) for seed, n in enumerate(ISLS)]
        for req in sent:
            inbox.put(req)
        for req in sent:
            received, echoed = outbox.get(timeout=WAIT_S)
            check(received, req)
            # ... and back: the echoed request crossed the queue twice, still unread.
            assert not PROMPT.is_materialized(echoed)
            assert echoed.prompt_token_ids == req.prompt_token_ids
        inbox.put(None)
        proc.join(timeout=WAIT_S)
        assert proc.exitcode == 0
    finally:
        if proc.is_alive():
            proc.terminate()
            proc.join()


def test_spawn_process_pool(spawn):
    sent = [make_request(n, seed, kind) for seed, (n, kind) in
            enumerate([(40_000, "list"), (128_000, "ndarray"), (0, "list"), (7, "ndarray")])]
    with ProcessPoolExecutor(max_workers=1, mp_context=spawn) as pool:
        for req, received in zip(sent, pool.map(describe, sent, timeout=WAIT_S)):
            check(received, req)


# --------------------------------------------------------------------------------------------
# pyzmq


def _endpoint(zmq, sock, transport, tmp_path):
    if transport == "ipc":
        endpoint = f"ipc://{tmp_path / 'tw.sock'}"
        sock.bind(endpoint)
        return endpoint
    return f"tcp://127.0.0.1:{sock.bind_to_random_port('tcp://127.0.0.1')}"


def test_zmq_dealer_router_roundtrip(zmq_ctx, tmp_path):
    """A request and its reply through DEALER/ROUTER (the RPC pattern), both with the helper."""
    zmq, ctx = zmq_ctx
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.RCVTIMEO, WAIT_MS)
    endpoint = _endpoint(zmq, router, "tcp", tmp_path)
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.RCVTIMEO, WAIT_MS)
    dealer.connect(endpoint)
    req = make_request(40_000, 3)
    send_pyobj_oob(dealer, req)
    identity, *frames = router.recv_multipart(copy=False)
    out = loads_oob([f.buffer for f in frames])
    received = describe(out)
    check(received, req)
    router.send_multipart([identity, *dumps_oob(received)], copy=False)
    check(recv_pyobj_oob(dealer), req)


@pytest.mark.parametrize("transport", ["ipc", "tcp"])
def test_example_worker_submit_runs(transport):
    """examples/worker_submit.py: a spawned proxy pushes requests, the worker submits them by
    memcpy without building a list (the script asserts both)."""
    pytest.importorskip("zmq")
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "worker_submit.py"), "--transport", transport,
         "--requests", "3", "--isl", "40000"],
        capture_output=True, text=True, timeout=WAIT_S,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok: 3 requests" in result.stdout
    assert result.stdout.count("list built: no") == 3


# --------------------------------------------------------------------------------------------
# Ray


@pytest.fixture(scope="module")
def ray():
    ray = pytest.importorskip("ray")
    # Workers import support.transport_workers by value: they need not see the tests directory.
    ray.cloudpickle.register_pickle_by_value(transport_workers)
    # Ray puts the driver's working directory on every worker's sys.path. From a source checkout
    # that is the repository root, whose tokenwire/ (no compiled extension) would shadow the
    # installed package; so start Ray from a neutral directory.
    cwd = os.getcwd()
    os.chdir(tempfile.gettempdir())
    try:
        ray.init(num_cpus=2, include_dashboard=False, object_store_memory=128 * 1024**2,
                 log_to_driver=False, logging_level="ERROR")
    finally:
        os.chdir(cwd)
    try:
        yield ray
    finally:
        ray.shutdown()
        ray.cloudpickle.unregister_pickle_by_value(transport_workers)


def test_ray_task(ray):
    task = ray.remote(num_cpus=1)(transport_workers.describe)
    sent = [make_request(n, seed) for seed, n in enumerate(ISLS)]
    for req, received in zip(sent, ray.get([task.remote(r) for r in sent], timeout=WAIT_S)):
        check(received, req)


def test_ray_actor_method(ray):
    worker = ray.remote(num_cpus=1)(transport_workers.Worker).remote()
    try:
        sent = [make_request(n, seed, "ndarray") for seed, n in enumerate(ISLS)]
        for req, received in zip(sent, ray.get([worker.submit.remote(r) for r in sent],
                                               timeout=WAIT_S)):
            check(received, req)
        assert ray.get(worker.count.remote(), timeout=WAIT_S) == len(sent)
    finally:
        ray.kill(worker)


def test_ray_object_store_put_get(ray):
    req = pickle.loads(pickle.dumps(make_request(128_000, 5)))     # as a worker would hold it
    out = ray.get(ray.put(req), timeout=WAIT_S)
    check(describe(out), req)
    assert type(token_buffer(out, "prompt_token_ids")) is TokenVector


def test_inproc_frames_are_copied_because_the_sender_can_still_write(zmq_ctx):
    """Over inproc a frame sent with copy=False *is* the sender's memory: a write after the send
    shows on the receiver's frame. recv_pyobj_oob copies such a frame once, so the received
    token field keeps the ids that were sent (a frame read from tcp/ipc is viewed: above)."""
    zmq, ctx = zmq_ctx
    pull = ctx.socket(zmq.PULL)
    pull.setsockopt(zmq.RCVTIMEO, WAIT_MS)
    pull.bind("inproc://tokenwire-sender-writes")
    push = ctx.socket(zmq.PUSH)
    push.connect("inproc://tokenwire-sender-writes")
    req = make_request(40_000)
    head, buf = dumps_oob(req)
    sent_first = token_buffer(req, "prompt_token_ids")[0]
    try:
        # The hazard is real: the receiver's frame changes with the sender's bytearray.
        mutable = bytearray(buf)
        push.send_multipart([head, mutable], copy=False)
        frames = pull.recv_multipart(copy=False)
        mutable[:4] = b"\7\0\0\0"
        assert bytes(frames[1].buffer[:4]) == b"\7\0\0\0"
        # recv_pyobj_oob: the field is a copy, made before the write.
        mutable = bytearray(buf)
        push.send_multipart([head, mutable], copy=False)
        out = recv_pyobj_oob(pull)
        vec = token_buffer(out, "prompt_token_ids")
        mutable[:4] = b"\7\0\0\0"
        assert vec[0] == sent_first != 7
        assert vec == token_buffer(req, "prompt_token_ids")
    finally:
        push.close(linger=0)
        pull.close(linger=0)


# -------------------------------------------------------------------------------------------
# Leading frames: a message type, ROUTER identities (send_pyobj_oob(prefix=, routing=))

_LEAD_KEY = bytes(range(32))


def _tcp_pair(zmq_ctx: Any, kinds: tuple[int, int], identity: bytes = b"") -> tuple[Any, Any]:
    zmq, ctx = zmq_ctx
    a, b = ctx.socket(kinds[0]), ctx.socket(kinds[1])
    if identity:
        b.setsockopt(zmq.IDENTITY, identity)
    port = a.bind_to_random_port("tcp://127.0.0.1")
    b.connect(f"tcp://127.0.0.1:{port}")
    for s in (a, b):
        s.setsockopt(zmq.RCVTIMEO, WAIT_MS)
        s.setsockopt(zmq.LINGER, 0)
    return a, b


@pytest.mark.parametrize("key", [None, _LEAD_KEY])
def test_prefix_frames_push_pull(zmq_ctx, key):
    import zmq

    pull, push = _tcp_pair(zmq_ctx, (zmq.PULL, zmq.PUSH))
    req = make_request(40_000, kind="tokens")
    send_pyobj_oob(push, req, prefix=[b"\x00"], key=key)
    leading, got = recv_pyobj_oob(pull, prefix=1, key=key)
    assert leading == [b"\x00"] and list(got.prompt_token_ids) == list(req.prompt_token_ids)
    # Without prefix= the type frame is not taken for the message: a clear error, not a load.
    send_pyobj_oob(push, req, prefix=[b"\x00"], key=key)
    with pytest.raises(Exception) as e:
        recv_pyobj_oob(pull, key=key)
    assert type(e.value).__name__ in ("AuthenticationError", "UnpicklingError")


def test_a_signed_prefix_cannot_be_swapped(zmq_ctx):
    """The type frame is signed with the message: a signed ADD replayed as ABORT is refused,
    and a message signed without a prefix does not verify with one put in front."""
    import zmq

    from tokenwire.errors import AuthenticationError

    pull, push = _tcp_pair(zmq_ctx, (zmq.PULL, zmq.PUSH))
    frames = [b"ADD"] + dumps_oob(make_request(100), key=_LEAD_KEY)
    push.send_multipart(frames)                                  # prefix not covered: refused
    with pytest.raises(AuthenticationError, match="bad signature"):
        recv_pyobj_oob(pull, prefix=1, key=_LEAD_KEY)
    send_pyobj_oob(push, make_request(100), prefix=[b"ADD"], key=_LEAD_KEY)
    signed = pull.recv_multipart()
    push.send_multipart([b"ABORT", *signed[1:]])
    with pytest.raises(AuthenticationError, match="bad signature"):
        recv_pyobj_oob(pull, prefix=1, key=_LEAD_KEY)
    push.send_multipart(signed)                                  # unchanged: accepted
    leading, got = recv_pyobj_oob(pull, prefix=1, key=_LEAD_KEY)
    assert leading == [b"ADD"] and list(got.prompt_token_ids) == make_ids(100)
    with pytest.raises(WireFormatError, match="expected 0 routing and 1 prefix"):
        push.send_multipart([b"ADD"])
        recv_pyobj_oob(pull, prefix=1)


@pytest.mark.parametrize("key", [None, _LEAD_KEY])
def test_router_dealer_identity_and_type_both_ways(zmq_ctx, key):
    """A ROUTER receives [identity, type, ...] from a DEALER and answers [identity, type, ...]:
    the identity is routing (never signed: each ROUTER sees its own), the type is signed."""
    import zmq

    router, dealer = _tcp_pair(zmq_ctx, (zmq.ROUTER, zmq.DEALER), identity=b"engine-7")
    req = make_request(40_000, kind="tokens", seed=3)
    send_pyobj_oob(dealer, req, prefix=[b"\x01"], key=key)
    leading, got = recv_pyobj_oob(router, routing=1, prefix=1, key=key)
    assert leading == [b"engine-7", b"\x01"]
    assert list(got.prompt_token_ids) == list(req.prompt_token_ids)
    send_pyobj_oob(router, got, routing=[leading[0]], prefix=[b"\x02"], key=key)
    leading, back = recv_pyobj_oob(dealer, prefix=1, key=key)
    assert leading == [b"\x02"] and list(back.prompt_token_ids) == list(req.prompt_token_ids)


def test_prefix_arguments_are_checked(zmq_ctx):
    import zmq

    pull, push = _tcp_pair(zmq_ctx, (zmq.PULL, zmq.PUSH))
    with pytest.raises(TypeError, match="prefix frame 0 must be bytes-like, got int"):
        send_pyobj_oob(push, 1, prefix=[1])
    send_pyobj_oob(push, 1)
    with pytest.raises(ValueError, match="prefix must be an int >= 0"):
        recv_pyobj_oob(pull, prefix=-1)


def test_message_boundaries_hold_for_every_shape_back_to_back(zmq_ctx):
    """The receiver reads the leading frames, the signature and the pickle as bytes and the
    buffers as zmq.Frames, asking libzmq whether more frames follow: messages of one frame
    (in-band), of several (out-of-band), signed and prefixed, sent back to back on one socket,
    each come back whole and nothing of one leaks into the next."""
    import zmq

    pull, push = _tcp_pair(zmq_ctx, (zmq.PULL, zmq.PUSH))
    small, big = make_request(100, seed=1), make_request(40_000, kind="tokens", seed=2)
    shapes = [(small, None, []), (big, None, []), (small, _LEAD_KEY, []), (big, _LEAD_KEY, []),
              (big, None, [b"\x07"]), (small, _LEAD_KEY, [b"\x07"]), (big, _LEAD_KEY, [b"\x07"]),
              (small, None, [])]
    for req, key, prefix in shapes:
        send_pyobj_oob(push, req, key=key, prefix=prefix)
    for req, key, prefix in shapes:
        out = recv_pyobj_oob(pull, key=key, prefix=len(prefix))
        if prefix:
            leading, out = out
            assert leading == prefix
        assert out.id == req.id and list(out.prompt_token_ids) == list(req.prompt_token_ids)
        if req is big:                       # the ids' frame is viewed, not copied
            vec = token_buffer(out, "prompt_token_ids")
            assert vec.__sizeof__() < vec.nbytes
    assert pull.poll(100) == 0               # nothing left over
