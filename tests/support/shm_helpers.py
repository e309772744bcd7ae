"""What the shared-memory channel's tests share (tests/test_shm_*.py): tokenwire.shm (importing
this module skips the test module that imports it where it cannot be imported or there are no
memfd segments, that is off Linux); the keys and the id vectors the tests send; the `pair` and
`channel` fixtures; the first message, which attaches the receiver; where a descriptor's entries
and sequence lie; and a peer process started from a neutral directory.

A test module takes the fixtures as names of its own (`pair = shm_helpers.pair`): pytest finds a
fixture among the attributes of the module whose tests use it, and an imported name that the
tests only take as an argument would look unused (and redefined) to the linter.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import uuid

import numpy as np
import pytest

from tokenwire import TokenVector
from tokenwire.transport import recv_pyobj_oob, send_pyobj_oob
from support.wait import WAIT_MS

shm = pytest.importorskip("tokenwire.shm")
if not shm.available():
    pytest.skip("shared-memory segments need Linux memfd_create", allow_module_level=True)

KEY = bytes(range(1, 33))
OTHER_KEY = bytes(range(101, 133))
N = 40_000                                         # 160 KB of ids: through a slot


def ids(n: int = N, start: int = 0) -> TokenVector:
    return TokenVector(np.arange(start, start + n, dtype=np.int32))


def dev_shm() -> set:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def mapped_segments(pid: int) -> list:
    """The tokenwire segments a process maps or holds open."""
    with open(f"/proc/{pid}/maps") as f:
        maps = [line for line in f if "memfd:tokenwire-" in line]
    fds = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if "memfd:tokenwire-" in os.readlink(f"/proc/{pid}/fd/{fd}"):
                fds.append(fd)
        except OSError:
            pass
    return maps + fds


@pytest.fixture
def pair(zmq_ctx):
    """A PUSH → PULL pair over ipc://."""
    zmq, ctx = zmq_ctx
    path = f"/tmp/tw-shm-{uuid.uuid4().hex}.ipc"
    pull = ctx.socket(zmq.PULL)
    pull.bind(f"ipc://{path}")
    push = ctx.socket(zmq.PUSH)
    push.connect(f"ipc://{path}")
    yield push, pull
    push.close(linger=0)
    pull.close(linger=0)
    if os.path.exists(path):
        os.unlink(path)


@pytest.fixture
def channel():
    before = dev_shm()
    with shm.Sender(slots=4, slot_bytes=256 * 1024) as sender, shm.Receiver() as receiver:
        yield sender, receiver
    assert mapped_segments(os.getpid()) == []
    assert dev_shm() - before == set()


def attach(pair, sender, receiver, key=None):
    """The first message offers the segment; the receiver attaches while reading it."""
    push, pull = pair
    send_pyobj_oob(push, {"ids": ids(10)}, key=key, channel=sender)
    recv_pyobj_oob(pull, key=key, channel=receiver)
    assert sender._attached() == os.getpid()


def _entry(desc: bytes, k: int = 0) -> int:
    return shm._DESC.size + 24 * k              # descriptor header, then 24-byte entries


def _seq_of(frames, signed=False) -> int:
    """The sequence of a received channel message's descriptor, 0 for one without."""
    desc = bytes(frames[1 if signed else 0])
    if desc[:4] != shm._DESC_MAGIC:
        assert desc[:2] == b"\x80\x05"          # a protocol-5 pickle
        return 0
    return shm._DESC.unpack_from(desc, 0)[6]


def _spawn(code: str, *args: str) -> subprocess.Popen:
    # A neutral cwd: from the clone, its uncompiled tokenwire/ would shadow the installed one.
    return subprocess.Popen([sys.executable, "-c", code, *args], cwd=tempfile.gettempdir())


def worker_sockets(zmq, ctx, tmp_path, back_type=None):
    """The test's ends of a worker process's two sockets, over ipc:// in `tmp_path`: a PUSH bound
    to `out` (the worker connects and pulls the messages) and a socket of `back_type` (PULL
    unless given) bound to `back`, whose receives time out after WAIT_S. Returns (out, back, push,
    pull)."""
    out, back = f"ipc://{tmp_path}/out", f"ipc://{tmp_path}/back"
    push = ctx.socket(zmq.PUSH)
    push.bind(out)
    pull = ctx.socket(zmq.PULL if back_type is None else back_type)
    pull.bind(back)
    pull.setsockopt(zmq.RCVTIMEO, WAIT_MS)
    return out, back, push, pull
