"""tokenwire.shm.Receiver: what it returns is its own copy, never a view of the segment, made
before the slot is freed to the sender; and what it attaches to: not a segment others could
open, nor one it cannot reach (the sender then keeps sending frames, unnoticed by the caller),
again after the sender reset its reader, and from the offer a doorbell carries when it has not
mapped the segment.

In-process tests over real zmq sockets and a real segment.
"""

from __future__ import annotations

import os
import struct
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from support import shm_helpers
from support.shm_helpers import N, attach, ids, shm
from support.wait import WAIT_S

from tokenwire.transport import recv_pyobj_oob, send_pyobj_oob

# The fixtures the tests take by name (pytest finds them as attributes of this module).
pair = shm_helpers.pair
channel = shm_helpers.channel


# -- what the receiver holds -----------------------------------------------------------------------

def test_a_received_array_views_the_workers_own_read_only_copy(pair, channel):
    """An ndarray buffer through a slot: numpy views whatever buffer it is given, so what it
    views is the receiver's copy, read-only, and rewriting every slot leaves it as it was. (A
    TokenVector's copy is the harness's memory check, tests/test_transport_harness.py.)"""
    sender, receiver = channel
    attach(pair, sender, receiver)
    push, pull = pair
    array = np.arange(N, dtype=np.int32)
    send_pyobj_oob(push, {"array": array}, channel=sender)
    got = recv_pyobj_oob(pull, channel=receiver)
    assert sender.stats["shm"] == 1
    sender._reclaim()
    for k in range(sender._slots):               # every slot rewritten with other ids
        sender._dumps({"ids": ids(start=1000 + k)})
    assert sender.stats["shm"] == 1 + sender._slots
    assert np.array_equal(got["array"], array)
    assert not got["array"].flags.writeable


def test_the_slot_is_copied_before_it_is_freed(pair, channel, monkeypatch):
    """Freeing a slot (the receiver's compare-and-swap) hands it back: the sender may write the
    next message into it at once. Paused just after a successful free while the sender rewrites
    every slot, the receiver still returns the first message's ids (copied before the free)."""
    sender, receiver = channel
    attach(pair, sender, receiver)
    push, pull = pair
    release = shm._Segment._release
    freed, rewritten = threading.Event(), threading.Event()
    armed = [True]

    def release_then_pause(self, state, expect):
        done = release(self, state, expect)
        if done and armed:
            armed.clear()
            freed.set()
            assert rewritten.wait(WAIT_S), "the sender never rewrote the slots"
        return done

    def rewrite_every_slot() -> None:
        assert freed.wait(WAIT_S), "the receiver never freed the slot"
        for k in range(sender._slots):
            sender._dumps({"ids": ids(start=1000 + k)})
        rewritten.set()

    monkeypatch.setattr(shm._Segment, "_release", release_then_pause)
    before = sender.stats["shm"]
    send_pyobj_oob(push, {"ids": ids(start=1)}, channel=sender)
    with ThreadPoolExecutor(1) as pool:
        writer = pool.submit(rewrite_every_slot)
        got = recv_pyobj_oob(pull, channel=receiver)
        writer.result(timeout=WAIT_S)
    assert rewritten.is_set()                    # the sender wrote during the receive
    assert sender.stats["shm"] == before + 1 + sender._slots
    assert got["ids"] == ids(start=1)


# -- what the receiver attaches to -----------------------------------------------------------------

def test_receiver_refuses_a_segment_others_could_open(pair, channel):
    """A segment readable by group or others is not attached to: the ids come as frames."""
    sender, receiver = channel
    os.fchmod(sender._fd, 0o644)
    push, pull = pair
    for k in range(3):
        send_pyobj_oob(push, {"ids": ids(start=k)}, channel=sender)
        assert recv_pyobj_oob(pull, channel=receiver)["ids"] == ids(start=k)
    assert sender._attached() == 0 and sender.stats == {"shm": 0, "frames": 3, "ring": 0}


def test_unreachable_segment_falls_back_without_the_caller_noticing(pair, channel):
    """A receiver that cannot open the segment (another host, another pid namespace) never
    attaches, so the sender keeps sending frames."""
    sender, receiver = channel
    frames = sender._dumps({"ids": ids()})
    desc = bytearray(frames[0])
    struct.pack_into("<I", desc, 20, 2**22 + 1)      # a pid that cannot exist here
    assert receiver._loads([bytes(desc), *frames[1:]])["ids"] == ids()
    assert sender._attached() == 0
    assert receiver._loads(sender._dumps({"ids": ids()}))["ids"] == ids()  # refused once: frames


def test_a_receiver_announces_itself_again_after_the_sender_reset(pair, channel):
    sender, receiver = channel
    attach(pair, sender, receiver)
    sender._words.store(5, 0)                   # what the sender does when its reader died
    push, pull = pair
    send_pyobj_oob(push, {"ids": ids()}, channel=sender)
    assert recv_pyobj_oob(pull, channel=receiver)["ids"] == ids()
    assert sender._attached() == os.getpid()


def test_a_new_receiver_attaches_from_a_doorbell(pair):
    """A receiver that has not mapped the segment (a new Receiver in the same process: the
    attached pid is alive) takes a ring message from the offer its doorbell carries."""
    push, pull = pair
    with shm.Sender(slots=4, slot_bytes=256 * 1024) as sender:
        with shm.Receiver() as first:
            attach(pair, sender, first)
            send_pyobj_oob(push, {"n": 1, "ids": ids(start=1)}, channel=sender)
            assert recv_pyobj_oob(pull, channel=first)["n"] == 1
        with shm.Receiver() as second:
            sender._send(push, {"n": 2, "ids": ids(start=2)})
            got = second._recv(pull)
            assert got["n"] == 2 and got["ids"] == ids(start=2)
            assert second.stats["ring"] == 1 and sender._id in second._segments
