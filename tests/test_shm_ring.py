"""Whole messages through the ring (Sender(ring=True)) for a receiver that spins: the public
calls carry them (a plain Sender never rings), with leading frames too; the doorbell of a
message the ring already gave is dropped, ring messages and frame fallbacks keep
the socket's order, a refused ring message is not offered again, a ring message keeps its
buffers' slots until they are copied, the ring never overtakes a message without sequence, a
reused record names no slot, and a spinning worker process reads every message once, in order.

In-process tests use real zmq sockets and a real segment; the one marked integration spawns a
worker process.
"""

from __future__ import annotations

import textwrap
import time

import pytest
from support import shm_helpers
from support.shm_helpers import KEY, N, OTHER_KEY, _seq_of, _spawn, attach, ids, shm, worker_sockets
from support.wait import WAIT_MS, WAIT_S

from tokenwire.errors import AuthenticationError, WireFormatError
from tokenwire.transport import recv_pyobj_oob, send_pyobj_oob

# The fixtures the tests take by name (pytest finds them as attributes of this module).
pair = shm_helpers.pair
channel = shm_helpers.channel


# -- whole messages through the ring (Sender(ring=True), a receiver that spins) ------------------

def test_a_doorbell_of_a_message_taken_from_the_ring_is_dropped(pair, channel):
    """A spinning receiver takes the next message from the ring before its doorbell arrives;
    the doorbell is then dropped, never read as a second copy of the message."""
    sender, receiver = channel
    attach(pair, sender, receiver)
    push, pull = pair
    bell = sender._message({"n": 1, "ids": ids(start=1)})
    assert len(bell) == 1 and sender.stats["ring"] == 1         # a doorbell: the rest in a slot
    sender._publish()                                              # as if the socket took it
    got = receiver._recv(pull, spin_us=100_000)                    # the socket is empty: the ring
    assert got["n"] == 1 and got["ids"] == ids(start=1) and receiver.stats["ring"] == 1
    push.send_multipart(bell)                                     # its doorbell, late
    assert pull.poll(WAIT_MS)                                      # ...is waiting now
    sender._send(push, {"n": 2, "ids": ids(start=2)})
    got = receiver._recv(pull)
    assert got["n"] == 2 and got["ids"] == ids(start=2)
    assert receiver.stats["ring"] == 2
    if pull.poll(100):             # message 2's doorbell, if the ring was faster: nothing else
        left = pull.recv_multipart()
        assert len(left) == 1 and shm._BELL.unpack(left[0])[4] == sender._seq
    assert not pull.poll(100)


@pytest.mark.parametrize("key", [None, KEY])
def test_ring_messages_and_frames_keep_the_socket_order(pair, channel, key):
    """Messages that fit the ring and messages that fall back to frames (ids larger than a
    slot) interleave in the order sent, whether the receiver sleeps or spins."""
    sender, receiver = channel
    attach(pair, sender, receiver, key=key)
    push, pull = pair
    sizes = [N, sender._slot_bytes // 4 + 8, N, N, sender._slot_bytes // 4 + 8, N, N, N]
    for n, size in enumerate(sizes):
        sender._send(push, {"n": n, "ids": ids(size, start=n)}, key=key)
    for n, size in enumerate(sizes):
        got = receiver._recv(pull, key=key, spin_us=1000 if n % 2 else 0)
        assert got["n"] == n and got["ids"] == ids(size, start=n)
    assert sender.stats["ring"] >= 2 and receiver.stats["ring"] == sender.stats["ring"]
    # A doorbell may still wait for a message the spin took: it is dropped, not read again.
    sender._send(push, {"n": "last"}, key=key)
    assert receiver._recv(pull, key=key)["n"] == "last"


def test_a_refused_ring_message_is_not_offered_again(pair, channel):
    """A ring message signed with another key is refused once (AuthenticationError), its slots
    come back, and neither the ring nor its doorbell offers it again."""
    sender, receiver = channel
    attach(pair, sender, receiver, key=KEY)
    push, pull = pair
    sender._send(push, {"ids": ids(start=1)}, key=OTHER_KEY)
    assert sender.stats["ring"] == 1
    with pytest.raises(AuthenticationError):
        receiver._recv(pull, key=KEY, spin_us=1000)
    for k in range(2, 12):                          # round the ring several times
        sender._send(push, {"ids": ids(start=k)}, key=KEY)
        assert receiver._recv(pull, key=KEY, spin_us=1000)["ids"] == ids(start=k)
    assert sender.stats["ring"] == 11
    sender._send(push, {"ids": "last"}, key=KEY)     # late doorbells are dropped, not read
    assert receiver._recv(pull, key=KEY)["ids"] == "last"


def test_a_ring_message_keeps_its_buffer_slots_until_they_are_copied(pair, monkeypatch):
    """The receiver publishes a ring message's sequence only once its buffers' slots are copied
    out too: the sender, short of slots meanwhile, cannot take back the ids of the message being
    read."""
    push, pull = pair
    with shm.Sender(slots=2, slot_bytes=256 * 1024) as sender, shm.Receiver() as receiver:
        attach(pair, sender, receiver)
        sender._send(push, {"n": 1, "ids": ids(start=1)})          # both slots: ids, message
        assert sender.stats["ring"] == 1
        take = shm._Segment.take
        sent = []

        def send_then_take(self, i, gen, n, seq, raw=False):
            if not raw and not sent:              # the message copied, its ids not yet
                sent.append(sender._message({"n": 2, "ids": ids(start=2)}))
            return take(self, i, gen, n, seq, raw)

        monkeypatch.setattr(shm._Segment, "take", send_then_take)
        got = receiver._recv(pull, spin_us=100_000)
        assert got["n"] == 1 and got["ids"] == ids(start=1)
        push.send_multipart(sent[0])
        got = receiver._recv(pull)
        assert got["n"] == 2 and got["ids"] == ids(start=2)


# -- the ring and the messages that stay on the socket ---------------------------------------------

def test_the_ring_never_overtakes_a_message_without_sequence(pair, channel):
    """A message without descriptor may still be on its way through the socket when the next
    one is made: that one stays on the socket (its record names no slot), so a spinning
    receiver cannot take it first; the one after it uses the ring again, in order."""
    sender, receiver = channel
    attach(pair, sender, receiver)
    push, pull = pair
    plain = sender._dumps({"n": 1})                       # not sent yet: still in transit
    assert len(plain) == 1 and sender._seq == 1
    second = sender._message({"n": 2, "ids": ids(start=2)})
    assert len(second) == 2 and _seq_of(second) == 2    # descriptor + pickle, not a doorbell
    assert not receiver._poll(pull, spin_us=2000, timeout_ms=0)     # nothing in the ring
    push.send_multipart(plain)
    push.send_multipart(second)
    for n in (1, 2):
        assert receiver._recv(pull, spin_us=1000)["n"] == n
    third = sender._message({"n": 3, "ids": ids(start=3)})
    assert len(third) == 1 and sender._seq == 3                    # a doorbell: the ring
    sender._publish()
    assert receiver._recv(pull, spin_us=100_000)["n"] == 3
    assert receiver.stats["ring"] == 1
    push.send_multipart(third)                                      # late: dropped
    sender._send(push, {"n": 4})
    assert receiver._recv(pull)["n"] == 4


def test_a_record_reused_by_a_message_on_the_socket_names_no_slot(pair, channel):
    """Records are reused every RECORDS messages: a message that stays on the socket never
    leaves the slot of the ring message RECORDS before it in its record, where a spinning
    receiver would look for it."""
    sender, receiver = channel
    attach(pair, sender, receiver)
    push, pull = pair
    for n in range(shm._RECORDS):
        sender._send(push, {"n": n})
        assert receiver._recv(pull, spin_us=100_000)["n"] == n
    assert sender.stats["ring"] == shm._RECORDS
    big = ids(sender._slot_bytes // 4 + 8)                   # a frame: stays on the socket
    frames = sender._message({"n": "big", "ids": big})
    assert len(frames) == 3 and sender._seq == 2 + shm._RECORDS   # record of ring msg 2
    seg = receiver._segments[sender._id]
    assert seg.next_message(sender._seq, 0) is None
    push.send_multipart(frames)
    got = receiver._recv(pull, spin_us=1000)
    assert got["n"] == "big" and got["ids"] == big


def test_the_public_calls_ring_only_with_ring_true(pair, key=KEY):
    """send_pyobj_oob / recv_pyobj_oob with channel=: a Sender(ring=True) puts whole messages
    in the ring (the socket carries doorbells) and a Receiver(spin_us=) takes them from there,
    in the order sent among frame fallbacks; a plain Sender never puts a message in the ring."""
    push, pull = pair
    for ring in (False, True):
        with shm.Sender(slots=4, slot_bytes=256 * 1024, ring=ring) as sender, \
                shm.Receiver(spin_us=1000) as receiver:
            attach(pair, sender, receiver, key=key)
            sizes = [N, 70_000, N, 10, N, N]                 # 70,000 ids: larger than a slot
            for n, size in enumerate(sizes):
                send_pyobj_oob(push, {"n": n, "ids": ids(size, start=n)}, key=key,
                               channel=sender)
            for n, size in enumerate(sizes):
                got = recv_pyobj_oob(pull, key=key, channel=receiver)
                assert got["n"] == n and got["ids"] == ids(size, start=n)
            assert receiver.stats["ring"] == sender.stats["ring"]
            assert (sender.stats["ring"] >= 2) if ring else sender.stats["ring"] == 0
            # A doorbell may still wait for a message the spin took: dropped, not read again.
            send_pyobj_oob(push, "last", key=key)            # no channel: the socket only
            assert recv_pyobj_oob(pull, key=key, channel=receiver) == "last"
            assert not pull.poll(100)


def test_a_doorbell_with_leading_frames(zmq_ctx):
    """A ring message behind routing frames (DEALER -> ROUTER) is taken from its slot through
    recv_pyobj_oob(routing=1, channel=); the same doorbell again is refused, not read twice."""
    zmq, ctx = zmq_ctx
    router, dealer = ctx.socket(zmq.ROUTER), ctx.socket(zmq.DEALER)
    try:
        with shm.Sender(slots=4, slot_bytes=256 * 1024, ring=True) as sender, \
                shm.Receiver() as receiver:
            port = router.bind_to_random_port("tcp://127.0.0.1")
            dealer.connect(f"tcp://127.0.0.1:{port}")
            send_pyobj_oob(dealer, {"ids": ids(10)}, channel=sender)        # the offer
            recv_pyobj_oob(router, routing=1, channel=receiver)
            send_pyobj_oob(dealer, {"n": 1, "ids": ids(start=1)}, channel=sender)
            identity, bell = router.recv_multipart()
            assert len(bell) == shm._BELL.size and sender.stats["ring"] == 1
            dealer.send(bell)                            # the doorbell, as the socket had it
            dealer.send(bell)                            # and its replay
            leading, got = recv_pyobj_oob(router, routing=1, channel=receiver)
            assert leading == [identity] and got["n"] == 1 and got["ids"] == ids(start=1)
            assert receiver.stats["ring"] == 1
            with pytest.raises(WireFormatError, match="a doorbell of message 2, which this "):
                recv_pyobj_oob(router, routing=1, channel=receiver)
    finally:
        router.close(linger=0)
        dealer.close(linger=0)


# -- a worker process spinning on the ring ---------------------------------------------------------

SPINNING_WORKER = textwrap.dedent("""
    import sys, zmq
    from tokenwire import shm
    from tokenwire.transport import recv_pyobj_oob
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL); pull.connect(sys.argv[1])
    push = ctx.socket(zmq.PUSH); push.connect(sys.argv[2])
    key = bytes(range(1, 33))
    receiver = shm.Receiver(spin_us=20_000)
    while True:
        msg = recv_pyobj_oob(pull, key=key, channel=receiver)
        if msg is None:
            break
        push.send_pyobj((msg["n"], msg["ids"] == msg["expect"], receiver.stats["ring"]))
""")


@pytest.mark.integration
def test_a_spinning_worker_process_reads_every_message_in_order(zmq_ctx, tmp_path):
    """A worker process spinning on the ring (the public calls: send_pyobj_oob and
    recv_pyobj_oob with a Sender(ring=True) and a Receiver(spin_us=)): ring messages, frame
    fallbacks and messages sent while it sleeps on the socket all arrive once, in order, with
    the right ids."""
    zmq, ctx = zmq_ctx
    out, back, push, pull = worker_sockets(zmq, ctx, tmp_path)
    proc = _spawn(SPINNING_WORKER, out, back)
    try:
        with shm.Sender(slots=4, slot_bytes=256 * 1024, ring=True) as sender:
            sizes = [10, N, N, 70_000, N, N, N, 70_000, N] * 3
            replies = []
            for n, size in enumerate(sizes):
                v = ids(size, start=n)
                send_pyobj_oob(push, {"n": n, "ids": v, "expect": v}, key=KEY, channel=sender)
                if n % 3:                           # a burst now and then
                    while len(replies) < n + 1:
                        replies.append(pull.recv_pyobj())
                if n % 9 == 8:
                    time.sleep(0.05)                # the worker stops spinning and sleeps
            while len(replies) < len(sizes):
                replies.append(pull.recv_pyobj())
            assert [r[0] for r in replies] == list(range(len(sizes)))
            assert all(r[1] for r in replies)
            assert replies[-1][2] == sender.stats["ring"] > 0
            send_pyobj_oob(push, None, key=KEY, channel=sender)
        assert proc.wait(timeout=WAIT_S) == 0
    finally:
        proc.kill()
        proc.wait()
