"""Hostile and racing peers of the shared-memory channel: refused and dropped messages give their
slots back, a forged sequence or doorbell frees and reads no slot of another message, a receiver
that frees late never frees a newer message's slot, and the segment's hand-over opens nothing
but the segment (a swapped fd or pid, a forged offer of a file the receiver holds a lock on).

In-process tests use real zmq sockets and a real segment; the ones marked integration spawn
real processes (a receiver paused mid-read, a process that swaps its fds).
"""

from __future__ import annotations

import fcntl
import os
import struct
import subprocess
import sys
import tempfile
import textwrap

import pytest
from support import shm_helpers
from support.shm_helpers import KEY, N, OTHER_KEY, _entry, _spawn, attach, ids, shm, worker_sockets

from tokenwire import WireFormatError
from tokenwire.errors import AuthenticationError
from tokenwire.transport import recv_pyobj_oob, send_pyobj_oob

# The fixtures the tests take by name (pytest finds them as attributes of this module).
pair = shm_helpers.pair
channel = shm_helpers.channel


# -- slots of refused, dropped and forged messages -------------------------------------------------

@pytest.mark.parametrize("kind", ["signature", "generation", "length", "dropped"])
def test_refused_and_dropped_messages_give_their_slots_back(pair, kind):
    """Messages the receiver refuses (bad signature, a tampered entry) or that the caller drops
    still end their slots' use: the receiver publishes their sequence, the sender takes back
    every slot at or before it, and the ring keeps carrying ids instead of filling with FULL
    slots nobody will read."""
    push, pull = pair
    key = KEY if kind == "signature" else None
    with shm.Sender(slots=2, slot_bytes=256 * 1024) as sender, shm.Receiver() as receiver:
        attach(pair, sender, receiver, key=key)
        for k in range(5):                      # more messages than the ring has slots
            if kind == "signature":
                send_pyobj_oob(push, {"ids": ids(start=k)}, key=OTHER_KEY, channel=sender)
                with pytest.raises(AuthenticationError):
                    recv_pyobj_oob(pull, key=KEY, channel=receiver)
                continue
            frames = sender._dumps({"ids": ids(start=k)})
            desc = bytearray(frames[0])
            if kind == "dropped":
                push.send_multipart(frames)
                pull.recv_multipart()           # received, never loaded
                continue
            field = 1 if kind == "generation" else 2
            if struct.unpack_from("<Q", desc, _entry(desc))[0] != 2**64 - 1:   # in a slot
                struct.pack_into("<Q", desc, _entry(desc) + 8 * field, 4)
                with pytest.raises(WireFormatError):
                    receiver._loads([bytes(desc), *frames[1:]])
            else:                               # the ring is full: a frame, read as such
                assert receiver._loads(frames)["ids"] == ids(start=k)
        # A refused message gives its slot back at once (the next one takes it); a dropped one
        # only when a later message's sequence is published.
        assert sender.stats["shm"] == (2 if kind == "dropped" else 5), sender.stats
        for k in range(4):                      # each of these goes through a slot again
            before = sender.stats["shm"]
            send_pyobj_oob(push, {"ids": ids(start=100 + k)}, key=key, channel=sender)
            assert recv_pyobj_oob(pull, key=key, channel=receiver)["ids"] == ids(start=100 + k)
            if k or kind != "dropped":          # after drops the first is a frame: it carries
                assert sender.stats["shm"] == before + 1, (k, sender.stats)   # the news


def _forged(sender, seq: int, entries=(), key=None) -> list:
    """A descriptor naming the sender's segment with sequence `seq` and a made-up token, and a
    pickle: what a process that can reach the socket but not the segment (nor, with `key`, the
    key: it signs with another) could send."""
    from tokenwire._oob import signature
    from tokenwire.transport import dumps_oob
    head = dumps_oob({"ids": "forged"})[0]
    desc = shm._DESC.pack(shm._DESC_MAGIC, sender._id, os.getpid(), sender._fd,
                                  len(entries), 0, seq, 0x5EED) + \
        b"".join(shm._ENTRY.pack(*e) for e in entries)
    if key is None:
        return [desc, head]
    return [signature(OTHER_KEY, desc + head, [], False, channel=True), desc, head]


@pytest.mark.parametrize("key", [None, KEY], ids=["unsigned", "signed"])
def test_a_forged_sequence_frees_no_slot_of_an_unread_message(pair, key):
    """A message whose sequence the segment does not confirm (no record with its token, no slot
    holding its generation) is never published, read or refused: the sender keeps the slot of
    a message sent before it and not yet read."""
    push, pull = pair
    with shm.Sender(slots=1, slot_bytes=256 * 1024) as sender, shm.Receiver() as receiver:
        attach(pair, sender, receiver, key=key)
        seq = sender._seq + 1
        push.send_multipart(_forged(sender, seq + 100, key=key))           # frames only
        push.send_multipart(_forged(sender, seq + 100, [(0, 1, N * 4)], key=key))  # a guess
        send_pyobj_oob(push, {"ids": ids(start=1)}, key=key, channel=sender)   # slot 0, unread
        if key is None:
            assert recv_pyobj_oob(pull, channel=receiver)["ids"] == "forged"
            with pytest.raises(WireFormatError, match="does not hold generation 1"):
                recv_pyobj_oob(pull, channel=receiver)
        else:
            for _ in range(2):
                with pytest.raises(AuthenticationError, match="bad signature"):
                    recv_pyobj_oob(pull, key=key, channel=receiver)
        # The ring is full: the next message would take slot 0 back were the forged sequence
        # believed, and the unread message would then be refused as stale.
        send_pyobj_oob(push, {"ids": ids(start=2)}, key=key, channel=sender)
        assert sender.stats["shm"] == 1
        assert recv_pyobj_oob(pull, key=key, channel=receiver)["ids"] == ids(start=1)
        assert recv_pyobj_oob(pull, key=key, channel=receiver)["ids"] == ids(start=2)
        assert receiver._segments[sender._id].published == seq + 1



@pytest.mark.parametrize("key", [None, KEY], ids=["unsigned", "signed"])
def test_a_real_sequence_with_a_forged_token_frees_no_slot(pair, key):
    """A sequence is easy to guess, the random token of its record is not: a message naming the
    sequence of one the sender wrote and has not seen read, with another token, is not
    published either (so the sender keeps that message's slot)."""
    push, pull = pair
    with shm.Sender(slots=1, slot_bytes=256 * 1024) as sender, shm.Receiver() as receiver:
        attach(pair, sender, receiver, key=key)
        send_pyobj_oob(push, {"ids": ids(start=1)}, key=key, channel=sender)   # slot 0, unread
        seq = sender._seq
        assert receiver._segments[sender._id].has_record(seq, sender._token)
        forged = _forged(sender, seq, key=key)                # frames only, a made-up token
        if key is None:
            assert receiver._loads(forged)["ids"] == "forged"
        else:
            with pytest.raises(AuthenticationError, match="bad signature"):
                receiver._loads(forged, key=key)
        assert receiver._segments[sender._id].published < seq
        send_pyobj_oob(push, {"ids": ids(start=2)}, key=key, channel=sender)
        assert sender.stats["shm"] == 1                       # the ring stayed full
        assert recv_pyobj_oob(pull, key=key, channel=receiver)["ids"] == ids(start=1)
        assert recv_pyobj_oob(pull, key=key, channel=receiver)["ids"] == ids(start=2)


def test_a_forged_doorbell_is_refused(pair, channel):
    """A doorbell naming a slot with a generation the sender never wrote is refused; the real
    messages around it read normally."""
    sender, receiver = channel
    attach(pair, sender, receiver)
    push, pull = pair
    sender._send(push, {"n": 1, "ids": ids(start=1)})
    assert receiver._recv(pull)["n"] == 1
    push.send(shm._BELL.pack(shm._BELL_MAGIC, sender._id, os.getpid(), sender._fd,
                             sender._seq + 1, 0, 1, 200))
    with pytest.raises(WireFormatError, match="does not hold generation 1"):
        receiver._recv(pull)
    sender._send(push, {"n": 2, "ids": ids(start=2)})
    assert receiver._recv(pull)["n"] == 2


# -- a late free never frees a newer message -------------------------------------------------------

PAUSED_RECEIVER = textwrap.dedent("""
    import sys, zmq
    from tokenwire import shm
    from tokenwire.transport import recv_pyobj_oob
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL); pull.connect(sys.argv[1])
    push = ctx.socket(zmq.PAIR); push.connect(sys.argv[2])
    free = shm._Segment._release
    armed = []

    def paused(self, state, expect):
        # After the copy, before the free: the sender takes the slot back and rewrites it now.
        if armed:
            armed.clear()
            push.send_pyobj(("paused",))
            push.recv()
        return free(self, state, expect)

    shm._Segment._release = paused
    receiver = shm.Receiver()
    for n in range(3):
        armed[:] = [True] if n == 1 else []
        try:
            msg = recv_pyobj_oob(pull, channel=receiver)
            push.send_pyobj(("ok", msg["n"], list(msg["ids"][:3])))
        except Exception as e:
            push.send_pyobj(("error", str(e)))
        if n == 1:
            push.recv()                         # the sender looks at the slot meanwhile
""")


@pytest.mark.integration
def test_a_late_free_by_the_receiver_keeps_the_slot_of_a_newer_message(zmq_ctx, tmp_path):
    """The receiver copies a slot, then stalls before freeing it; meanwhile the sender takes the
    slot back (Sender._reclaim: a receiver it believes gone) and writes the next message into
    it. The receiver's free is a compare-and-swap from the generation it read, so it fails and
    the message is refused; the new message's slot stays FULL and reads back intact."""
    zmq, ctx = zmq_ctx
    out, back, push, ctl = worker_sockets(zmq, ctx, tmp_path, zmq.PAIR)
    proc = _spawn(PAUSED_RECEIVER, out, back)
    try:
        with shm.Sender(slots=1, slot_bytes=256 * 1024) as sender:
            send_pyobj_oob(push, {"n": 0, "ids": ids(10)}, channel=sender)     # the offer
            assert ctl.recv_pyobj()[:2] == ("ok", 0)
            send_pyobj_oob(push, {"n": 1, "ids": ids(start=1)}, channel=sender)   # slot 0
            assert ctl.recv_pyobj() == ("paused",)
            sender._reclaim()
            send_pyobj_oob(push, {"n": 2, "ids": ids(start=2)}, channel=sender)   # slot 0 again
            assert sender.stats["shm"] == 2
            new = sender._gens[0] << 2 | shm._FULL
            ctl.send(b"")
            reply = ctl.recv_pyobj()
            assert reply[0] == "error" and "rewritten while it was read" in reply[1], reply
            # not freed under the sender
            assert sender._words.load(shm._state_word(0)) == new
            ctl.send(b"")
            assert ctl.recv_pyobj() == ("ok", 2, [2, 3, 4])
    finally:
        proc.kill()
        proc.wait()


# -- the segment's hand-over opens nothing but the segment -----------------------------------------

SWAPPER = textwrap.dedent("""
    import os, select, sys
    # fd 100 names a memfd bearing the segment's name, or the read end of a FIFO, as told: what
    # a receiver sees when the sender's pid, or its fd number, is reused between two looks.
    memfd = os.memfd_create(sys.argv[1], os.MFD_CLOEXEC)
    fifo = os.open(sys.argv[2], os.O_RDONLY | os.O_NONBLOCK)
    poll = select.poll()
    poll.register(fifo, select.POLLIN)
    os.dup2(memfd, 100)
    print("ready", flush=True)
    for line in sys.stdin:
        os.dup2(fifo if line.strip() == "fifo" else memfd, 100)
        print("ok", flush=True)
    # POLLHUP on a FIFO's read end: a writer opened it and closed it again.
    print("opened" if any(ev & select.POLLHUP for _, ev in poll.poll(0)) else "untouched",
          flush=True)
""")


@pytest.mark.integration
def test_attaching_never_opens_a_file_the_descriptor_did_not_name(tmp_path, monkeypatch):
    """The sender's fd number names the segment when the receiver looks at it, and another file
    right after (the fd number reused, or the pid: every readlink the receiver makes is followed
    by the swap). The receiver never opens that other file: it opens /proc/<pid>/fd/<fd> with
    O_PATH, checks the file through its own descriptor and reopens only that one. Opening the
    FIFO here would be seen by its reader (a device could act on an open)."""
    seg_id = os.urandom(16)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    proc = subprocess.Popen([sys.executable, "-c", SWAPPER, shm._NAME + seg_id.hex(),
                             str(fifo)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            cwd=tempfile.gettempdir())

    def tell(what: str) -> None:
        proc.stdin.write(what + "\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "ok"

    readlink = os.readlink

    def look_then_swap(path, *args, **kwargs):
        link = readlink(path, *args, **kwargs)
        tell("fifo")
        return link

    try:
        assert proc.stdout.readline().strip() == "ready"
        monkeypatch.setattr(os, "readlink", look_then_swap)
        for _ in range(3):
            tell("memfd")
            with pytest.raises(OSError):         # not a sealed segment: refused every time
                shm._Segment(proc.pid, 100, seg_id)
        monkeypatch.setattr(os, "readlink", readlink)
        proc.stdin.close()
        assert proc.stdout.readline().strip() == "untouched"
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
        if not proc.stdin.closed:
            proc.stdin.close()


LOCK_PROBE = textwrap.dedent("""
    import fcntl, sys
    with open(sys.argv[1], "r+b") as f:
        try:
            fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            print("held")
        else:
            print("free")
""")


def lock_probe(path) -> str:
    """Whether another process finds the POSIX lock on `path` held."""
    return subprocess.run([sys.executable, "-c", LOCK_PROBE, str(path)], capture_output=True,
                          text=True, check=True, cwd=tempfile.gettempdir()).stdout.strip()


@pytest.mark.integration
@pytest.mark.parametrize("where", ["take", "loads", "msgspec", "doorbell"])
def test_a_forged_offer_of_the_receivers_own_file_leaves_it_alone(pair, tmp_path, where):
    """An unsigned descriptor (or a doorbell) that offers, as the segment, a descriptor of a
    file the receiving process holds a POSIX lock on (sqlite's locks are such): the receiver
    refuses it without releasing the lock. A descriptor of that file duplicated into the
    receiver and closed again would release it (POSIX locks belong to the process and the file,
    and any close of the file drops them): the receiver never opens, duplicates or closes
    anything but the segment."""
    push, pull = pair
    path = tmp_path / "db"
    path.write_bytes(bytes(4096))
    with open(path, "r+b") as f, shm.Receiver() as receiver:
        fcntl.lockf(f, fcntl.LOCK_EX)
        assert lock_probe(path) == "held"
        seg_id = os.urandom(16)
        desc = shm._DESC.pack(shm._DESC_MAGIC, seg_id, os.getpid(), f.fileno(),
                                      1, 0, 1, 7) + shm._ENTRY.pack(0, 1, 4 * N)
        with pytest.raises(WireFormatError, match="cannot map"):
            if where == "take":
                receiver._placed(desc, [])
            elif where == "loads":
                receiver._loads([desc, b"\x80\x05N."])
            elif where == "msgspec":
                tm = pytest.importorskip("tokenwire.msgspec")
                tm.Decoder(channel=receiver).decode([desc, b"\xc0"])
            else:
                push.send(shm._BELL.pack(shm._BELL_MAGIC, seg_id, os.getpid(),
                                                 f.fileno(), 1, 0, 1, 200))
                receiver._recv(pull)
        assert "is not the segment" in receiver._refused[seg_id]
        assert str(path) not in receiver._refused[seg_id]      # whatever it names stays unsaid
        assert lock_probe(path) == "held"
