"""Peers of the shared-memory channel that die and restart, and sequence numbers: a worker killed
holding slots is replaced and the slots come back, a proxy killed mid-message leaves its sent
message readable and its restarted segment attachable, a worker restarted after kill -9 gets
every message (the proxy offers the segment again, a doorbell carries the offer), no segment
outlives the processes, and a sequence pushed to the top of its counter is never published.

The tests marked integration spawn real processes and kill them with SIGKILL mid-message.
"""

from __future__ import annotations

import os
import signal
import textwrap
import time

import pytest
from support import shm_helpers
from support.shm_helpers import _spawn, attach, dev_shm, ids, mapped_segments, shm, worker_sockets
from support.wait import WAIT_MS, WAIT_S

from tokenwire.transport import recv_pyobj_oob, send_pyobj_oob

# The fixture the tests take by name (pytest finds it as an attribute of this module).
pair = shm_helpers.pair


# -- real processes killed mid-message -------------------------------------------------------------

# A worker: argv out, back, and "ring" with a spin in microseconds to read whole messages from
# the ring (Receiver._recv) instead of recv_pyobj_oob.
WORKER = textwrap.dedent("""
    import os, sys, time, zmq
    from tokenwire import shm
    from tokenwire.transport import recv_pyobj_oob, send_pyobj_oob
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL); pull.connect(sys.argv[1])
    push = ctx.socket(zmq.PUSH); push.connect(sys.argv[2])
    receiver = shm.Receiver()
    ring = sys.argv[3:4] == ["ring"]
    push.send_pyobj(("ready", os.getpid()))
    while True:
        try:
            if ring:
                msg = receiver._recv(pull, spin_us=float(sys.argv[4]))
            else:
                msg = recv_pyobj_oob(pull, channel=receiver)
        except Exception as e:
            push.send_pyobj(("error", repr(e)))
            continue
        if msg == "stall":
            push.send_pyobj(("stalled", os.getpid()))
            time.sleep(600)
        push.send_pyobj(("ok", msg["n"], msg["ids"] == msg["expect"], os.getpid()))
""")


SENDER = textwrap.dedent("""
    import os, signal, sys, zmq, numpy as np
    from tokenwire import TokenVector, shm
    from tokenwire.transport import send_pyobj_oob
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH); push.connect(sys.argv[1])
    pull = ctx.socket(zmq.PULL); pull.connect(sys.argv[2])
    sender = shm.Sender(slots=2, slot_bytes=256 * 1024)
    start = int(sys.argv[3])
    for n in range(4):
        send_pyobj_oob(push, {"n": n, "ids": TokenVector(np.arange(start + n, start + n + 40000,
                                                                    dtype=np.int32))},
                       channel=sender)
        pull.recv()          # received (message 3: its slot is read only after our death)
    # Mid-message: a slot half written, its message never sent; then SIGKILL.
    sender._words.store(shm._state_word(sender._free_slot()), 99 << 2 | 2)
    os.kill(os.getpid(), signal.SIGKILL)
""")


@pytest.mark.integration
def test_worker_killed_holding_slots_then_replaced(zmq_ctx, tmp_path):
    """A worker killed with unread slots: the sender takes them back once the ring is full, the
    next worker attaches and every message it reads carries the right ids."""
    zmq, ctx = zmq_ctx
    before = dev_shm()
    out, back, push, pull = worker_sockets(zmq, ctx, tmp_path)
    sender = shm.Sender(slots=2, slot_bytes=256 * 1024)
    workers = []
    try:
        def send(n: int) -> None:
            v = ids(start=n)
            send_pyobj_oob(push, {"n": n, "ids": v, "expect": v}, channel=sender)

        workers.append(_spawn(WORKER, out, back))
        assert pull.recv_pyobj()[0] == "ready"
        send(0)
        assert pull.recv_pyobj()[:3] == ("ok", 0, True)
        send_pyobj_oob(push, "stall", channel=sender)
        assert pull.recv_pyobj()[0] == "stalled"
        send(1)
        send(2)                                   # both slots FULL, never to be read
        assert sender.stats["shm"] == 2
        workers[0].send_signal(signal.SIGKILL)
        workers[0].wait()

        workers.append(_spawn(WORKER, out, back))
        assert pull.recv_pyobj()[0] == "ready"
        # A message may still be routed to the dead worker's connection before zmq notices it
        # is gone: each reply is waited for 5 s (a late one still counts), the last one for
        # WAIT_S. Whatever the new worker reads must carry the right ids.
        seen = {}
        for n in range(3, 12):
            send(n)
            end = time.monotonic() + (WAIT_S if n == 11 else 5.0)
            while n not in seen and pull.poll(max(0, int((end - time.monotonic()) * 1000))):
                reply = pull.recv_pyobj()
                if reply[0] == "ok":
                    seen[reply[1]] = reply[2]
        assert 11 in seen and len(seen) >= 6 and all(seen.values()), seen
        assert sender.stats["shm"] >= 2 + 6       # slots were taken back and used again
        assert sender._attached() == workers[1].pid
    finally:
        for w in workers:
            w.kill()
            w.wait()
        sender.close()
    assert mapped_segments(os.getpid()) == []
    assert dev_shm() - before == set()


@pytest.mark.integration
def test_sender_killed_mid_message_then_restarted(zmq_ctx, tmp_path):
    """A proxy killed with SIGKILL after sending a message through a slot and while writing
    another: the worker still reads the sent message, a restarted proxy's segment is attached,
    and no segment outlives the processes."""
    zmq, ctx = zmq_ctx
    before = dev_shm()
    inbox, acks = f"ipc://{tmp_path}/in", f"ipc://{tmp_path}/ack"
    pull = ctx.socket(zmq.PULL)
    pull.bind(inbox)
    pull.setsockopt(zmq.RCVTIMEO, WAIT_MS)
    ack = ctx.socket(zmq.PUSH)
    ack.bind(acks)
    proxies = []
    with shm.Receiver() as receiver:
        try:
            for start in (0, 500):
                proxy = _spawn(SENDER, inbox, acks, str(start))
                proxies.append(proxy)
                for n in range(3):
                    msg = recv_pyobj_oob(pull, channel=receiver)
                    assert msg["n"] == n and msg["ids"] == ids(start=start + n)
                    ack.send(b"")
                frames = pull.recv_multipart(copy=False)
                ack.send(b"")
                assert proxy.wait(timeout=WAIT_S) == -signal.SIGKILL
                msg = receiver._loads([f.buffer for f in frames])    # after its death
                assert msg["n"] == 3 and msg["ids"] == ids(start=start + 3)
                assert receiver.stats["shm"] >= 2
        finally:
            for p in proxies:                             # a failed test leaves none behind
                p.kill()
                p.wait()
        assert len(receiver._segments) == 2               # the restarted proxy's segment too
    assert mapped_segments(os.getpid()) == []             # the kernel frees them now
    assert dev_shm() - before == set()


# -- a worker restarted after kill -9 --------------------------------------------------------------

def _wait_event(monitor, event, timeout_ms: int = WAIT_MS) -> None:
    from zmq.utils.monitor import recv_monitor_message
    while True:
        assert monitor.poll(timeout_ms), f"no zmq event {event}"
        if recv_monitor_message(monitor)["event"] == event:
            return


@pytest.mark.integration
@pytest.mark.parametrize("spin_us", [0, 2000])
def test_a_worker_restarted_after_kill_9_gets_every_message(zmq_ctx, tmp_path, spin_us):
    """A worker reading whole messages from the ring (Sender._send / Receiver._recv) is killed
    with SIGKILL and a new one started in its place: every message sent to the new worker
    arrives, with its ids; none is refused for naming a segment it has not mapped. The
    proxy sees that the attached pid no longer runs and offers the segment again, and a
    doorbell carries the offer too."""
    zmq, ctx = zmq_ctx
    out, back, push, pull = worker_sockets(zmq, ctx, tmp_path)
    monitor = push.get_monitor_socket(zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED)
    sender = shm.Sender(slots=16, slot_bytes=256 * 1024)
    workers = []

    def send(n: int) -> None:
        v = ids(start=n)
        sender._send(push, {"n": n, "ids": v, "expect": v})

    try:
        for life in range(2):
            workers.append(_spawn(WORKER, out, back, "ring", str(spin_us)))
            _wait_event(monitor, zmq.EVENT_ACCEPTED)
            assert pull.recv_pyobj()[0] == "ready"
            got = []
            for n in range(100 * life, 100 * life + 24):
                send(n)
                got.append(pull.recv_pyobj())
            assert got == [("ok", n, True, workers[-1].pid)
                           for n in range(100 * life, 100 * life + 24)], got
            assert sender._attached() == workers[-1].pid
            assert sender.stats["ring"] >= 20 * (life + 1)
            workers[-1].send_signal(signal.SIGKILL)
            workers[-1].wait()
            _wait_event(monitor, zmq.EVENT_DISCONNECTED)
    finally:
        for w in workers:
            w.kill()
            w.wait()
        monitor.close(linger=0)
        push.disable_monitor()
        push.close(linger=0)
        pull.close(linger=0)
        sender.close()


# -- sequence numbers near the top of the counter --------------------------------------------------

def test_a_sequence_pushed_to_the_top_is_never_published(pair):
    """A sender (here one whose sequence counter was set near 2**64) that proves a message of
    sequence 2**64 - 1 by its record: the receiver reads it but publishes no sequence above
    2**63 - 1, so looking on the ring for the next one (published + 1) never overflows the
    64-bit word it waits on: an empty socket's poll behaves as ever."""
    push, pull = pair
    with shm.Sender(slots=2, slot_bytes=256 * 1024) as sender, shm.Receiver() as receiver:
        attach(pair, sender, receiver)
        sender._seq = (1 << 64) - 2
        send_pyobj_oob(push, {"ids": ids(start=3)}, channel=sender)
        assert recv_pyobj_oob(pull, channel=receiver)["ids"] == ids(start=3)
        seg = receiver._segments[sender._id]
        assert seg.published < 1 << 63
        assert receiver._poll(pull, spin_us=10, timeout_ms=0) is False
