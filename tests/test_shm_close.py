"""Closing a channel end from another thread while it works: a Receiver closed while its recv
or poll spins on the ring ends that call with ValueError, and a Sender closed while another
thread sends ends that send with a Python error or lets it finish; the process lives. Each
scenario runs in a child process, so a fault (the ring's memory unmapped under a spinning
thread) fails the test instead of ending pytest.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import textwrap

import pytest
from support import shm_helpers  # noqa: F401  (skips this module where there is no shm)
from support.wait import WAIT_MS, WAIT_S

_PRELUDE = f"WAIT_S, WAIT_MS = {WAIT_S!r}, {WAIT_MS!r}\n" + textwrap.dedent("""
    import os, sys, threading, time, uuid
    import numpy as np
    import zmq
    import tokenwire.shm as shm
    from tokenwire import TokenVector
    from tokenwire.transport import recv_pyobj_oob, send_pyobj_oob

    ctx = zmq.Context()
    path = f"/tmp/tw-close-{uuid.uuid4().hex}.ipc"
    pull = ctx.socket(zmq.PULL)
    pull.bind(f"ipc://{path}")
    push = ctx.socket(zmq.PUSH)
    push.connect(f"ipc://{path}")
    pull.setsockopt(zmq.RCVTIMEO, WAIT_MS)
    sender, receiver = shm.Sender(slots=4, slot_bytes=256 * 1024), shm.Receiver()
    ids = TokenVector(np.arange(40_000, dtype=np.int32))
    send_pyobj_oob(push, {"ids": ids}, channel=sender)        # offers the segment
    recv_pyobj_oob(pull, channel=receiver)                    # ...and the receiver maps it
    assert sender._attached() == os.getpid()
    barrier = threading.Barrier(2)
    outcome = []

    def until(condition, what):
        deadline = time.monotonic() + WAIT_S
        while not condition():
            if time.monotonic() > deadline:
                sys.exit(f"timed out waiting for {what}")
            time.sleep(0.001)
""")

_SPIN = _PRELUDE + textwrap.dedent("""
    segment = receiver._last
    def spin():
        barrier.wait()
        try:
            if sys.argv[1] == "recv":
                receiver._recv(pull, spin_us=60_000_000)          # nothing comes: a minute
            else:
                receiver._poll(pull, spin_us=60_000_000)
            outcome.append("returned")
        except ValueError as e:
            outcome.append(str(e))
    thread = threading.Thread(target=spin, daemon=True)
    thread.start()
    barrier.wait()
    until(lambda: segment.words.users > 0, "the spin on the ring")
    receiver.close()                                # unmaps the segment under the spin
    thread.join(WAIT_S)
    assert not thread.is_alive(), "the spinning thread did not end"
    print(outcome[0])
    os._exit(0)
""")

_SEND = _PRELUDE + textwrap.dedent("""
    closed, sent = threading.Event(), []
    def send():
        barrier.wait()
        try:
            while not closed.is_set():
                sender._send(push, {"ids": ids})             # reads the slots' state words
                sent.append(1)
            sender._send(push, {"ids": ids})                 # after the close: frames
            outcome.append("sent")
        except Exception as e:                              # a Python error: not a fault
            outcome.append(type(e).__name__)
    def drain():
        while True:
            try:
                pull.recv_multipart()
            except zmq.ZMQError:
                return
    drainer = threading.Thread(target=drain, daemon=True)
    drainer.start()
    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    barrier.wait()
    until(lambda: len(sent) >= 20, "sends")
    sender.close()                                  # unmaps the segment under the sends
    closed.set()
    thread.join(WAIT_S)
    assert not thread.is_alive(), "the sending thread did not end"
    print(outcome[0])
    os._exit(0)                                     # the drainer blocks in recv
""")


def _run(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *args], cwd=tempfile.gettempdir(),
                          capture_output=True, text=True, timeout=WAIT_S)


@pytest.mark.parametrize("call", ["recv", "poll"])
def test_closing_a_receiver_under_a_spin_on_the_ring_ends_the_spin(call: str) -> None:
    """The spin holds the ring's mapping: close() waits for it to leave, and the spinning call
    ends with ValueError naming the close (no fault, however long it was to spin)."""
    done = _run(_SPIN, call)
    assert done.returncode == 0, f"the child ended with {done.returncode}: {done.stderr[-2000:]}"
    assert done.stdout.strip() == "the receiver was closed while it waited on the ring"


def test_closing_a_sender_under_a_send_ends_the_send_with_an_error_or_lets_it_finish() -> None:
    done = _run(_SEND)
    assert done.returncode == 0, f"the child ended with {done.returncode}: {done.stderr[-2000:]}"
    outcome = done.stdout.strip()
    assert outcome == "sent" or outcome.endswith("Error"), outcome


_ACCESS = textwrap.dedent("""
    import mmap, threading
    from tokenwire._core import _ShmWords

    for _ in range(100):
        m = mmap.mmap(-1, 1 << 16)
        words = _ShmWords(m, 512)
        barrier, ended = threading.Barrier(3), []

        def hammer(i):
            barrier.wait()
            try:
                while True:
                    words.store(i, words.load(i) + 1)
                    words.cas(i + 8, 0, 0)
            except ValueError:
                ended.append(i)

        threads = [threading.Thread(target=hammer, args=(i,)) for i in (0, 1)]
        for t in threads:
            t.start()
        barrier.wait()
        while words.load(0) < 100 or words.load(1) < 100:   # both threads are in their loops
            pass
        words.release()
        m.close()                                  # unmaps: no access may be in progress
        for t in threads:
            t.join()
        assert sorted(ended) == [0, 1]
    print("ok")
""")


def test_releasing_the_words_under_accesses_from_other_threads() -> None:
    """Without a GIL, loads, stores and compare-and-swaps run alongside release(): each enters
    the use count release() waits for, so the mapping is closed only once none is in progress
    and later ones raise ValueError (with a GIL they never overlap)."""
    done = _run(_ACCESS)
    assert done.returncode == 0, f"the child ended with {done.returncode}: {done.stderr[-2000:]}"
    assert done.stdout.strip() == "ok"
