"""Signed out-of-band messages (tokenwire.transport with key=): nothing unauthenticated is ever
unpickled.

Each attack is checked two ways: the documented `AuthenticationError` is raised, and the
attacker's pickle did not run (its reduce function would record a call in `EXECUTED`).
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tokenwire
import tokenwire.unpickle
from tokenwire import GenerationRequest, TokenVector, TokenwireError, token_buffer
from tokenwire.errors import AuthenticationError
from tokenwire._oob import KEY_ENV, MIN_KEY_BYTES, SIGNATURE_BYTES
from tokenwire.transport import (dumps_oob, key_from_env, loads_oob, recv_pyobj_oob,
                                 send_pyobj_oob)
from support.wait import WAIT_MS, WAIT_S

KEY = bytes(range(32))
OTHER_KEY = bytes(range(1, 33))
EXECUTED: list[str] = []


def _record(tag: str) -> str:
    EXECUTED.append(tag)
    return tag


class Payload:
    """What an attacker sends: unpickling it calls `_record` (stands for os.system)."""

    def __reduce__(self):
        return (_record, ("attacker code ran",))


@pytest.fixture(autouse=True)
def _clear():
    EXECUTED.clear()
    yield
    assert EXECUTED == [], "an unauthenticated pickle was executed"


def request(n: int = 40_000) -> GenerationRequest:
    ids = np.random.default_rng(n).integers(0, 151_936, size=n, dtype=np.int32)
    return GenerationRequest(ids, {"max_tokens": 8}, id=n)


@pytest.mark.parametrize("sign_buffers", [False, True])
def test_small_and_empty_messages(sign_buffers):
    for obj in (request(0), request(3), {"a": [1, 2]}):
        frames = dumps_oob(obj, key=KEY, sign_buffers=sign_buffers)
        assert len(frames) == 2                       # no buffer is large enough to go out of band
        out = loads_oob(frames, key=KEY, sign_buffers=sign_buffers)
        assert pickle.dumps(out) == pickle.dumps(obj)


def _attacks(frames: list[bytes]) -> dict[str, list[bytes]]:
    """The attacks on the signature's own layout. (A truncated, dropped or extra frame, a
    flipped signature, a plain pickle and another key are the harness's hostile-bytes check,
    tests/test_transport_harness.py, run on every signed way to send.)"""
    sig, head, buf = frames
    evil = pickle.dumps(Payload(), protocol=5)
    flipped = bytearray(head)
    flipped[len(flipped) // 2] ^= 1
    return {
        "unsigned pickle with buffers": [evil, buf],
        "attacker pickle under a copied signature": [sig, evil, buf],
        "pickle byte flipped": [sig, bytes(flipped), buf],
        "frames reordered": [sig, buf, head],
        "signature frame only": [sig],
        "no frames but the pickle": [head],
    }


@pytest.mark.parametrize("attack", list(_attacks([b"s" * 36, b"h" * 8, b"b" * 8])))
def test_every_tampering_is_rejected_before_unpickling(attack):
    frames = [bytes(f) for f in dumps_oob(request(), key=KEY)]
    bad = [bytes(f) for f in _attacks(frames)[attack]]
    with pytest.raises(AuthenticationError) as e:
        loads_oob(bad, key=KEY)
    assert isinstance(e.value, TokenwireError) and isinstance(e.value, ValueError)
    assert "signature" in str(e.value) or "unsigned" in str(e.value)



@pytest.mark.parametrize("cut", [1, SIGNATURE_BYTES - 4])
def test_a_signature_frame_of_another_size_is_no_signature(cut):
    """A first frame that starts like a signature frame but is not SIGNATURE_BYTES long is not
    read as one: the message is refused as unsigned, naming the frame's size."""
    frames = [bytes(f) for f in dumps_oob(request(), key=KEY)]
    for first in (frames[0][:-cut], frames[0] + bytes(cut)):
        assert first[:4] == frames[0][:4]
        with pytest.raises(AuthenticationError, match=rf"unsigned message: the first frame "
                                                      rf"\({len(first)} bytes\) is not a "
                                                      rf"tokenwire signature"):
            loads_oob([first, *frames[1:]], key=KEY)


def test_buffer_contents_are_covered_only_with_sign_buffers():
    req = request()
    for sign_buffers in (False, True):
        sig, head, buf = [bytes(f) for f in dumps_oob(req, key=KEY, sign_buffers=sign_buffers)]
        changed = bytearray(buf)
        changed[:4] = (7).to_bytes(4, "little")
        if sign_buffers:
            with pytest.raises(AuthenticationError, match="bad signature"):
                loads_oob([sig, head, bytes(changed)], key=KEY, sign_buffers=True)
        else:
            # Documented: raw token bytes cannot run code; without sign_buffers only their
            # number and sizes are covered, so a changed id arrives as that id.
            out = loads_oob([sig, head, bytes(changed)], key=KEY)
            assert out.prompt_token_ids[0] == 7
    # Both sides must agree on the mode: a message signed one way never verifies the other way.
    frames = dumps_oob(req, key=KEY)
    with pytest.raises(AuthenticationError, match="bad signature"):
        loads_oob(frames, key=KEY, sign_buffers=True)


def test_signed_message_needs_the_key():
    with pytest.raises(AuthenticationError, match="pass key="):
        loads_oob(dumps_oob(request(), key=KEY))
    with pytest.raises(AuthenticationError, match="pass key="):      # any bytes-like frames
        loads_oob([memoryview(f) for f in dumps_oob(request(), key=KEY)])


def test_keys_are_checked():
    with pytest.raises(ValueError, match=f"at least {MIN_KEY_BYTES} bytes"):
        dumps_oob(request(3), key=b"short")
    with pytest.raises(TypeError, match="got str"):
        dumps_oob(request(3), key="a" * 32)           # type: ignore[arg-type]
    # bytes(32) of an int is 32 zero bytes: a key anyone can guess.
    for guessable in (32, [1] * 16):
        with pytest.raises(TypeError, match="key must be bytes"):
            dumps_oob(request(3), key=guessable)      # type: ignore[arg-type]
        with pytest.raises(TypeError, match="key must be bytes"):
            loads_oob([b"x"], key=guessable)          # type: ignore[arg-type]
    with pytest.raises(ValueError, match="32 zero bytes"):
        dumps_oob(request(3), key=bytes(32))
    for guessable in (b"\x01" + bytes(15), b"\x01" * 16, bytes(range(7)) * 5):
        with pytest.raises(ValueError, match=r"only \d distinct byte value\(s\): not a random"):
            dumps_oob(request(3), key=guessable)
        with pytest.raises(ValueError, match="not a random key"):
            loads_oob([b"x", b"y"], key=guessable)
    for key in (bytearray(KEY), memoryview(KEY)):     # bytes-like keys are the same key
        assert loads_oob(dumps_oob({"a": 1}, key=key), key=KEY) == {"a": 1}


def test_swapped_buffers_of_one_length():
    """Two buffers of the same length swapped: their contents are not signed by default, so this
    is the documented limit (the ids change, nothing runs); sign_buffers=True refuses it."""
    ids = np.arange(20_000, dtype=np.int32)
    req = GenerationRequest(ids, {}, query_token_ids=ids[::-1].copy(), id=1)
    sig, head, a, b = [bytes(f) for f in dumps_oob(req, key=KEY)]
    out = loads_oob([sig, head, b, a], key=KEY)
    assert out.prompt_token_ids == req.query_token_ids      # swapped ids, nothing else
    sig, head, a, b = [bytes(f) for f in dumps_oob(req, key=KEY, sign_buffers=True)]
    with pytest.raises(AuthenticationError, match="sign_buffers=True"):
        loads_oob([sig, head, b, a], key=KEY, sign_buffers=True)


def test_key_from_env(monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    with pytest.raises(KeyError, match=KEY_ENV):
        key_from_env()
    monkeypatch.setenv(KEY_ENV, "not hex")
    with pytest.raises(ValueError, match="hex"):
        key_from_env()
    monkeypatch.setenv(KEY_ENV, "00ff")
    with pytest.raises(ValueError, match="2-byte key"):
        key_from_env()
    monkeypatch.setenv(KEY_ENV, KEY.hex())
    assert key_from_env() == KEY


def test_find_class_allow_list():
    """recv/loads_oob(find_class=...) with tokenwire's own allow-list helper: only
    tokenwire.unpickle._PICKLE_GLOBALS and the request classes the caller names may load."""
    import functools
    allow = {("tokenwire.request", "GenerationRequest"), ("builtins", "dict")}
    find_class = functools.partial(tokenwire.unpickle.find_class, allow=allow)

    evil = dumps_oob(Payload(), key=KEY)              # signed by a key holder, still refused
    with pytest.raises(pickle.UnpicklingError, match="_record' is not allowed"):
        loads_oob(evil, key=KEY, find_class=find_class)
    with pytest.raises(pickle.UnpicklingError, match="not allowed"):
        loads_oob(dumps_oob(Payload()), find_class=find_class)
    req = request()                                   # an allowed request loads as usual
    out = loads_oob(dumps_oob(req, key=KEY), key=KEY, find_class=find_class)
    assert out.prompt_token_ids == req.prompt_token_ids


# --------------------------------------------------------------------------------------------
# a real pyzmq socket, with an attacker connected to it


@pytest.mark.integration
def test_zmq_worker_rejects_an_attacker_and_keeps_serving(zmq_ctx):
    zmq, ctx = zmq_ctx
    pull = ctx.socket(zmq.PULL)
    pull.setsockopt(zmq.RCVTIMEO, WAIT_MS)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    proxy, attacker = ctx.socket(zmq.PUSH), ctx.socket(zmq.PUSH)
    proxy.connect(f"tcp://127.0.0.1:{port}")
    attacker.connect(f"tcp://127.0.0.1:{port}")
    req = request()
    attacker.send_pyobj(Payload())                                # plain pickle
    attacker.send_multipart(dumps_oob(Payload(), key=OTHER_KEY))   # signed with a wrong key
    send_pyobj_oob(proxy, req, key=KEY)
    received, rejected = [], 0
    for _ in range(3):                    # fair queueing: the three may arrive in any order
        try:
            received.append(recv_pyobj_oob(pull, key=KEY))
        except AuthenticationError:
            rejected += 1
    assert (rejected, len(received)) == (2, 1)
    # A signed message read without a key, as zmq.Frame objects: refused, not unpickled.
    send_pyobj_oob(proxy, req, key=KEY)
    with pytest.raises(AuthenticationError, match="pass key="):
        loads_oob(pull.recv_multipart(copy=False))
    out = received[0]
    assert out.prompt_token_ids == req.prompt_token_ids
    assert type(token_buffer(out, "prompt_token_ids")) is TokenVector


@pytest.mark.integration
def test_worker_example_with_a_key(tmp_path):
    """examples/worker_submit.py --key-env: proxy and worker share a key from the environment."""
    pytest.importorskip("zmq")
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, KEY_ENV: KEY.hex()}
    result = subprocess.run(
        [sys.executable, str(root / "examples" / "worker_submit.py"), "--requests", "2",
         "--isl", "40000", "--key-env", KEY_ENV],
        capture_output=True, text=True, timeout=WAIT_S, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok: 2 requests" in result.stdout and "signed: yes" in result.stdout


@pytest.mark.parametrize("key", [KEY, bytes(range(16)), bytes(range(64)), bytes(range(100))],
                         ids=["32", "16", "64", "100"])
@pytest.mark.parametrize("sign_buffers", [False, True])
def test_signature_is_standard_hmac_sha256(key, sign_buffers):
    """The signature is plain HMAC-SHA256 over the documented input, so any language's HMAC can
    produce and check it (docs/transport.md, "Signed messages")."""
    import hashlib
    import hmac
    import struct
    frames = [bytes(f) for f in dumps_oob(request(), key=key, sign_buffers=sign_buffers)]
    sig, head, buf = frames
    msg = (b"tokenwire-oob-v1\0" + (b"\1" if sign_buffers else b"\0")
           + struct.pack("<3Q", 1, len(buf), len(head)) + head + (buf if sign_buffers else b""))
    assert sig == b"TWS2" + hmac.new(hashlib.sha256(key).digest(), msg, hashlib.sha256).digest()


@pytest.mark.parametrize("other", [KEY + b"\0", KEY + bytes(40), None], ids=["+NUL", "+40 NULs", "hash"])
def test_keys_that_differ_never_verify_each_other(other):
    """Plain HMAC pads a short key with zeros and hashes one longer than 64 bytes, so K, K + NULs
    and (for a long K) SHA-256(K) would be one key. Keyed with SHA-256(key), they are not."""
    import hashlib
    long_key = bytes(range(100))
    pairs = [(KEY, other)] if other is not None else [(long_key, hashlib.sha256(long_key).digest())]
    for a, b in pairs:
        assert loads_oob(dumps_oob({"a": 1}, key=a), key=a) == {"a": 1}
        for signer, verifier in ((a, b), (b, a)):
            with pytest.raises(AuthenticationError, match="bad signature"):
                loads_oob(dumps_oob({"a": 1}, key=signer), key=verifier)
