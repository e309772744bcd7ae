"""tokenwire.shm: the shared-memory channel beside a zmq socket.

In-process tests use real zmq sockets and a real segment; the ones marked integration spawn real
processes and kill them with SIGKILL mid-message.
"""

from __future__ import annotations

import fcntl
import os
import signal
import stat
import struct
import subprocess
import tempfile
import sys
import textwrap
import time
import uuid

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenwire import TokenVector, WireFormatError
from tokenwire.errors import AuthenticationError
from tokenwire.transport import loads_oob, recv_pyobj_oob, send_pyobj_oob

shm = pytest.importorskip("tokenwire.shm")
shm_segment = pytest.importorskip("tokenwire._shmsegment")
if not shm.available():
    pytest.skip("shared-memory segments need Linux memfd_create", allow_module_level=True)

KEY = bytes(range(1, 33))
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
    assert sender.attached() == os.getpid()


# -- the channel moves ids ---------------------------------------------------------------------

@pytest.mark.parametrize("key", [None, KEY])
def test_round_trip_through_slots(pair, channel, key):
    sender, receiver = channel
    push, pull = pair
    send_pyobj_oob(push, {"ids": ids(), "n": 0}, key=key, channel=sender)
    first = recv_pyobj_oob(pull, key=key, channel=receiver)
    assert first["ids"] == ids()
    assert sender.stats == {"shm": 0, "frames": 1, "ring": 0}           # the offer
    assert sender.attached() == os.getpid()
    for k in range(1, 13):                      # 3 times round the ring: slots are released
        send_pyobj_oob(push, {"ids": ids(start=k), "n": k}, key=key, channel=sender)
        got = recv_pyobj_oob(pull, key=key, channel=receiver)
        assert got["n"] == k and got["ids"] == ids(start=k)
    assert sender.stats == {"shm": 12, "frames": 1, "ring": 0}
    assert receiver.stats == {"shm": 12, "frames": 1, "ring": 0}


def test_small_buffers_stay_in_band_and_mid_sized_ones_use_slots(pair, channel):
    sender, receiver = channel
    attach(pair, sender, receiver)
    push, pull = pair
    small, mid = ids(100), ids(shm.SHM_THRESHOLD // 4)     # mid is below OOB_THRESHOLD
    frames = sender.dumps({"a": small, "b": mid})
    assert len(frames) == 2                                  # descriptor + pickle: no frame
    got = receiver.loads(frames)
    assert got == {"a": small, "b": mid}
    assert sender.stats["shm"] == 1


def test_received_ids_are_a_copy_not_a_view_of_the_segment(pair, channel):
    """Rewriting the slot after the message was read never changes what the worker holds."""
    sender, receiver = channel
    attach(pair, sender, receiver)
    push, pull = pair
    array = np.arange(N, dtype=np.int32)          # numpy views whatever buffer it is given
    send_pyobj_oob(push, {"ids": ids(), "array": array}, channel=sender)
    got = recv_pyobj_oob(pull, channel=receiver)
    assert sender.stats["shm"] == 2
    sender.reclaim()
    for k in range(sender.slots):               # every slot rewritten with other ids
        sender.dumps({"ids": ids(start=1000 + k)})
    assert sender.stats["shm"] == 2 + sender.slots
    assert got["ids"] == ids()
    assert np.array_equal(got["array"], array)
    assert not got["array"].flags.writeable     # it views the worker's own read-only copy


def test_full_ring_falls_back_to_frames(pair, channel):
    sender, receiver = channel
    attach(pair, sender, receiver)
    push, pull = pair
    for k in range(7):                          # 4 slots, none read yet
        send_pyobj_oob(push, {"ids": ids(start=k)}, channel=sender)
    assert sender.stats == {"shm": 4, "frames": 3, "ring": 0}
    for k in range(7):
        assert recv_pyobj_oob(pull, channel=receiver)["ids"] == ids(start=k)
    send_pyobj_oob(push, {"ids": ids(start=99)}, channel=sender)   # slots are free again
    assert recv_pyobj_oob(pull, channel=receiver)["ids"] == ids(start=99)
    assert sender.stats["shm"] == 5


def test_oversize_buffer_and_sign_buffers_travel_as_frames(pair, channel):
    sender, receiver = channel
    attach(pair, sender, receiver, key=KEY)
    push, pull = pair
    big = ids(sender.slot_bytes // 4 + 1)
    send_pyobj_oob(push, {"ids": big}, key=KEY, channel=sender)
    assert recv_pyobj_oob(pull, key=KEY, channel=receiver)["ids"] == big
    send_pyobj_oob(push, {"ids": ids()}, key=KEY, sign_buffers=True, channel=sender)
    assert recv_pyobj_oob(pull, key=KEY, sign_buffers=True, channel=receiver)["ids"] == ids()
    assert sender.stats["shm"] == 0


def test_segment_is_a_sealed_owner_only_memfd(channel):
    sender, _ = channel
    st = os.fstat(sender.fd)
    assert stat.S_IMODE(st.st_mode) == 0o600
    import fcntl
    seals = fcntl.fcntl(sender.fd, fcntl.F_GET_SEALS)
    assert seals & fcntl.F_SEAL_SHRINK and seals & fcntl.F_SEAL_GROW and seals & fcntl.F_SEAL_SEAL
    assert os.readlink(f"/proc/self/fd/{sender.fd}").startswith("/memfd:tokenwire-")
    with pytest.raises(OSError):
        os.ftruncate(sender.fd, 4096)           # nobody can shrink it under a reader


def test_receiver_refuses_a_segment_others_could_open(pair, channel):
    """A segment readable by group or others is not attached to: the ids come as frames."""
    sender, receiver = channel
    os.fchmod(sender.fd, 0o644)
    push, pull = pair
    for k in range(3):
        send_pyobj_oob(push, {"ids": ids(start=k)}, channel=sender)
        assert recv_pyobj_oob(pull, channel=receiver)["ids"] == ids(start=k)
    assert sender.attached() == 0 and sender.stats == {"shm": 0, "frames": 3, "ring": 0}


def test_unreachable_segment_falls_back_without_the_caller_noticing(pair, channel):
    """A receiver that cannot open the segment (another host, another pid namespace) never
    attaches, so the sender keeps sending frames."""
    sender, receiver = channel
    frames = sender.dumps({"ids": ids()})
    desc = bytearray(frames[0])
    struct.pack_into("<I", desc, 20, 2**22 + 1)      # a pid that cannot exist here
    assert receiver.loads([bytes(desc), *frames[1:]])["ids"] == ids()
    assert sender.attached() == 0
    assert receiver.loads(sender.dumps({"ids": ids()}))["ids"] == ids()  # refused once: frames


def test_msgspec_encoder_and_decoder_take_a_channel(pair, channel):
    tw_msgspec = pytest.importorskip("tokenwire.msgspec")
    sender, receiver = channel
    push, pull = pair
    encoder = tw_msgspec.Encoder(channel=sender)
    decoder = tw_msgspec.Decoder(channel=receiver, vocab_size=10**6)
    for k in range(6):
        encoder.send(push, {"n": k, "ids": ids(start=k)})
        got = decoder.recv(pull)
        assert got["n"] == k and got["ids"] == ids(start=k)
    assert sender.stats == {"shm": 5, "frames": 1, "ring": 0}    # the first one offered the segment
    frames = encoder.encode({"ids": ids()})
    desc = bytearray(frames[0])
    struct.pack_into("<Q", desc, _entry(desc) + 8, 12345)  # wrong generation
    with pytest.raises(WireFormatError, match="does not hold generation"):
        decoder.decode([bytes(desc), *frames[1:]])
    with pytest.raises(WireFormatError, match="descriptor"):
        decoder.decode(frames[1:2])


# -- stale and tampered descriptors ------------------------------------------------------------

def test_slot_reused_while_the_old_message_is_unread_is_refused(pair, zmq_ctx):
    push, pull = pair
    with shm.Sender(slots=1, slot_bytes=256 * 1024) as sender, shm.Receiver() as receiver:
        attach(pair, sender, receiver)
        send_pyobj_oob(push, {"ids": ids(start=1)}, channel=sender)     # slot 0, unread
        sender.reclaim()
        send_pyobj_oob(push, {"ids": ids(start=2)}, channel=sender)     # slot 0 again
        assert sender.stats["shm"] == 2
        with pytest.raises(WireFormatError, match="does not hold generation"):
            recv_pyobj_oob(pull, channel=receiver)
        assert recv_pyobj_oob(pull, channel=receiver)["ids"] == ids(start=2)


def _entry(desc: bytes, k: int = 0) -> int:
    return shm_segment._DESC.size + 24 * k              # descriptor header, then 24-byte entries


@pytest.mark.parametrize("field, value, message", [
    (0, 4, "names slot 4, the ring has 4"),                      # index beyond the ring
    (0, 2**64 - 2, "names slot"),
    (2, 256 * 1024 + 4, "a slot holds"),                         # length beyond the slot
    (2, 2**63, "a slot holds"),
    (1, 7, "does not hold generation 7"),                        # wrong generation
    (2, 4, "not the descriptor.s 4 bytes"),                       # shorter than written
])
def test_tampered_descriptor_is_refused(channel, pair, field, value, message):
    sender, receiver = channel
    attach(pair, sender, receiver)
    frames = sender.dumps({"ids": ids()})
    desc = bytearray(frames[0])
    struct.pack_into("<Q", desc, _entry(desc) + 8 * field, value)
    with pytest.raises(WireFormatError, match=message):
        receiver.loads([bytes(desc), *frames[1:]])
    assert receiver.loads(frames)["ids"] == ids()   # the real message still reads (once)
    with pytest.raises(WireFormatError, match="does not hold generation"):
        receiver.loads(frames)                       # a replay finds the slot freed


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.integers(0, 5), value=st.integers(0, 2**64 - 1))
def test_any_entry_value_reads_the_slot_or_is_refused(channel, pair, field, value):
    """Whatever an entry of two says (slot, generation, length), the receiver gives the right
    ids or raises WireFormatError, and never reads outside the ring (which would crash)."""
    sender, receiver = channel
    if not sender.attached():
        attach(pair, sender, receiver)
    sender.reclaim()
    frames = sender.dumps({"a": ids(), "b": ids(start=7)})
    desc = bytearray(frames[0])
    struct.pack_into("<Q", desc, _entry(desc, field // 3) + 8 * (field % 3), value)
    try:
        got = receiver.loads([bytes(desc), *frames[1:]])
    except WireFormatError:
        return
    assert got == {"a": ids(), "b": ids(start=7)}


@pytest.mark.parametrize("damage", ["truncate", "magic", "count", "frame"])
def test_malformed_descriptor_frame_is_refused(channel, damage):
    sender, receiver = channel
    frames = sender.dumps({"ids": ids()})          # not attached: the ids are a frame
    desc = bytearray(frames[0])
    if damage == "truncate":
        desc = desc[:40]
    elif damage == "magic":
        desc[:4] = b"XXXX"
    elif damage == "count":
        struct.pack_into("<I", desc, 28, 2)
    with pytest.raises(WireFormatError):
        rest = frames[1:2] if damage == "frame" else frames[1:]
        receiver.loads([bytes(desc), *rest])


def test_signed_descriptor_is_covered_by_the_signature(channel, pair):
    sender, receiver = channel
    attach(pair, sender, receiver, key=KEY)
    frames = sender.dumps({"ids": ids()}, key=KEY)
    desc = bytes(frames[1])
    for at in range(len(desc)):
        bad = bytearray(desc)
        bad[at] ^= 1
        with pytest.raises(AuthenticationError):
            receiver.loads([frames[0], bytes(bad), *frames[2:]], key=KEY)
    with pytest.raises(AuthenticationError):
        receiver.loads(frames[1:], key=KEY)                  # signature dropped
    with pytest.raises(AuthenticationError, match="pass key"):
        receiver.loads(frames)
    with pytest.raises(AuthenticationError):
        loads_oob(frames, key=KEY)            # a channel message never verifies as a plain one
    assert receiver.loads(frames, key=KEY)["ids"] == ids()   # nothing was freed meanwhile


def test_sign_buffers_refuses_a_descriptor_naming_slots(channel, pair):
    """With sign_buffers=True every byte must be signed; a slot's bytes are not, so a message
    naming one (signed by a key holder who did not sign its buffers) is refused."""
    sender, receiver = channel
    attach(pair, sender, receiver)
    from tokenwire._oob import signature
    frames = sender.dumps({"ids": ids()})
    assert sender.stats["shm"] == 1
    sig = signature(KEY, frames[0] + frames[1], frames[2:], True, channel=True)
    with pytest.raises(WireFormatError, match="sign_buffers"):
        receiver.loads([sig, *frames], key=KEY, sign_buffers=True)


def test_a_receiver_announces_itself_again_after_the_sender_reset(pair, channel):
    sender, receiver = channel
    attach(pair, sender, receiver)
    sender._words.store(5, 0)                   # what the sender does when its reader died
    push, pull = pair
    send_pyobj_oob(push, {"ids": ids()}, channel=sender)
    assert recv_pyobj_oob(pull, channel=receiver)["ids"] == ids()
    assert sender.attached() == os.getpid()


def test_plain_signed_message_does_not_verify_as_a_channel_message(channel):
    """A message without descriptor is read as dumps_oob signed it; a plain message's signature
    never verifies a channel message, nor a channel message's a plain one."""
    from tokenwire.transport import dumps_oob
    sender, receiver = channel
    plain = dumps_oob({"ids": ids()}, key=KEY)
    assert receiver.loads(plain, key=KEY)["ids"] == ids()
    desc = sender.dumps({"ids": ids()})[0]                   # not attached: a descriptor
    assert desc[:4] == shm_segment._DESC_MAGIC
    with pytest.raises(AuthenticationError):                 # a descriptor put in
        receiver.loads([plain[0], desc, *plain[1:]], key=KEY)
    framed = sender.dumps({"ids": ids()}, key=KEY)
    with pytest.raises(AuthenticationError):                 # its descriptor taken out
        receiver.loads([framed[0], *framed[2:]], key=KEY)


def test_sender_refuses_a_bad_geometry():
    with pytest.raises(ValueError, match="slots"):
        shm.Sender(slots=0)
    with pytest.raises(ValueError, match="slot_bytes"):
        shm.Sender(slot_bytes=2**40)


# -- slots of refused, dropped and forged messages ----------------------------------------------

OTHER_KEY = bytes(range(101, 133))


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
            frames = sender.dumps({"ids": ids(start=k)})
            desc = bytearray(frames[0])
            if kind == "dropped":
                push.send_multipart(frames)
                pull.recv_multipart()           # received, never loaded
                continue
            field = 1 if kind == "generation" else 2
            if struct.unpack_from("<Q", desc, _entry(desc))[0] != 2**64 - 1:   # in a slot
                struct.pack_into("<Q", desc, _entry(desc) + 8 * field, 4)
                with pytest.raises(WireFormatError):
                    receiver.loads([bytes(desc), *frames[1:]])
            else:                               # the ring is full: a frame, read as such
                assert receiver.loads(frames)["ids"] == ids(start=k)
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
    desc = shm_segment._DESC.pack(shm_segment._DESC_MAGIC, sender._id, os.getpid(), sender.fd,
                                  len(entries), 0, seq, 0x5EED) + \
        b"".join(shm_segment._ENTRY.pack(*e) for e in entries)
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


# -- a late free never frees a newer message -----------------------------------------------------

PAUSED_RECEIVER = textwrap.dedent("""
    import sys, zmq
    from tokenwire import _shmsegment as shm_segment, shm
    from tokenwire.transport import recv_pyobj_oob
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL); pull.connect(sys.argv[1])
    push = ctx.socket(zmq.PAIR); push.connect(sys.argv[2])
    free = shm_segment._Segment._release
    armed = []

    def paused(self, state, expect):
        # After the copy, before the free: the sender takes the slot back and rewrites it now.
        if armed:
            armed.clear()
            push.send_pyobj(("paused",))
            push.recv()
        return free(self, state, expect)

    shm_segment._Segment._release = paused
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
    slot back (Sender.reclaim: a receiver it believes gone) and writes the next message into
    it. The receiver's free is a compare-and-swap from the generation it read, so it fails and
    the message is refused; the new message's slot stays FULL and reads back intact."""
    zmq, ctx = zmq_ctx
    out, back = f"ipc://{tmp_path}/out", f"ipc://{tmp_path}/back"
    push = ctx.socket(zmq.PUSH)
    push.bind(out)
    ctl = ctx.socket(zmq.PAIR)
    ctl.bind(back)
    ctl.setsockopt(zmq.RCVTIMEO, 30_000)
    proc = _spawn(PAUSED_RECEIVER, out, back)
    try:
        with shm.Sender(slots=1, slot_bytes=256 * 1024) as sender:
            send_pyobj_oob(push, {"n": 0, "ids": ids(10)}, channel=sender)     # the offer
            assert ctl.recv_pyobj()[:2] == ("ok", 0)
            send_pyobj_oob(push, {"n": 1, "ids": ids(start=1)}, channel=sender)   # slot 0
            assert ctl.recv_pyobj() == ("paused",)
            sender.reclaim()
            send_pyobj_oob(push, {"n": 2, "ids": ids(start=2)}, channel=sender)   # slot 0 again
            assert sender.stats["shm"] == 2
            new = sender._gens[0] << 2 | shm_segment._FULL
            ctl.send(b"")
            reply = ctl.recv_pyobj()
            assert reply[0] == "error" and "rewritten while it was read" in reply[1], reply
            # not freed under the sender
            assert sender._words.load(shm_segment._state_word(0)) == new
            ctl.send(b"")
            assert ctl.recv_pyobj() == ("ok", 2, [2, 3, 4])
    finally:
        proc.kill()
        proc.wait()


# -- the segment's hand-over opens nothing but the segment ---------------------------------------

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
    proc = subprocess.Popen([sys.executable, "-c", SWAPPER, shm_segment._NAME + seg_id.hex(),
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
                shm_segment._Segment(proc.pid, 100, seg_id)
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
        desc = shm_segment._DESC.pack(shm_segment._DESC_MAGIC, seg_id, os.getpid(), f.fileno(),
                                      1, 0, 1, 7) + shm_segment._ENTRY.pack(0, 1, 4 * N)
        with pytest.raises(WireFormatError, match="cannot map"):
            if where == "take":
                receiver.take(desc, [])
            elif where == "loads":
                receiver.loads([desc, b"\x80\x05N."])
            elif where == "msgspec":
                tm = pytest.importorskip("tokenwire.msgspec")
                tm.Decoder(channel=receiver).decode([desc, b"\xc0"])
            else:
                push.send(shm_segment._BELL.pack(shm_segment._BELL_MAGIC, seg_id, os.getpid(),
                                                 f.fileno(), 1, 0, 1, 200))
                receiver.recv(pull)
        assert "is not the segment" in receiver._refused[seg_id]
        assert str(path) not in receiver._refused[seg_id]      # whatever it names stays unsaid
        assert lock_probe(path) == "held"


# -- real processes killed mid-message ---------------------------------------------------------

# A worker: argv out, back, and "ring" with a spin in microseconds to read whole messages from
# the ring (Receiver.recv) instead of recv_pyobj_oob.
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
                msg = receiver.recv(pull, spin_us=float(sys.argv[4]))
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
    from tokenwire import TokenVector, _shmsegment as shm_segment, shm
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
    sender._words.store(shm_segment._state_word(sender._free_slot()), 99 << 2 | 2)
    os.kill(os.getpid(), signal.SIGKILL)
""")


def _spawn(code: str, *args: str) -> subprocess.Popen:
    # A neutral cwd: from the clone, its uncompiled tokenwire/ would shadow the installed one.
    return subprocess.Popen([sys.executable, "-c", code, *args], cwd=tempfile.gettempdir())


@pytest.mark.integration
def test_worker_killed_holding_slots_then_replaced(zmq_ctx, tmp_path):
    """A worker killed with unread slots: the sender takes them back once the ring is full, the
    next worker attaches and every message it reads carries the right ids."""
    zmq, ctx = zmq_ctx
    before = dev_shm()
    out, back = f"ipc://{tmp_path}/out", f"ipc://{tmp_path}/back"
    push = ctx.socket(zmq.PUSH)
    push.bind(out)
    pull = ctx.socket(zmq.PULL)
    pull.bind(back)
    pull.setsockopt(zmq.RCVTIMEO, 30_000)
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
        # is gone; whatever the new worker reads must carry the right ids.
        pull.setsockopt(zmq.RCVTIMEO, 5_000)
        seen = {}
        for n in range(3, 12):
            send(n)
            try:
                while n not in seen:
                    reply = pull.recv_pyobj()
                    if reply[0] == "ok":
                        seen[reply[1]] = reply[2]
            except zmq.Again:
                pass
        assert 11 in seen and len(seen) >= 6 and all(seen.values()), seen
        assert sender.stats["shm"] >= 2 + 6       # slots were taken back and used again
        assert sender.attached() == workers[1].pid
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
    pull.setsockopt(zmq.RCVTIMEO, 30_000)
    ack = ctx.socket(zmq.PUSH)
    ack.bind(acks)
    with shm.Receiver() as receiver:
        for start in (0, 500):
            proxy = _spawn(SENDER, inbox, acks, str(start))
            for n in range(3):
                msg = recv_pyobj_oob(pull, channel=receiver)
                assert msg["n"] == n and msg["ids"] == ids(start=start + n)
                ack.send(b"")
            frames = pull.recv_multipart(copy=False)
            ack.send(b"")
            assert proxy.wait(timeout=30) == -signal.SIGKILL
            msg = receiver.loads([f.buffer for f in frames])    # after its death
            assert msg["n"] == 3 and msg["ids"] == ids(start=start + 3)
            assert receiver.stats["shm"] >= 2
        assert len(receiver._segments) == 2               # the restarted proxy's segment too
    assert mapped_segments(os.getpid()) == []             # the kernel frees them now
    assert dev_shm() - before == set()


# -- whole messages through the ring (Sender.send / Receiver.recv) -------------------------------

def test_a_doorbell_of_a_message_taken_from_the_ring_is_dropped(pair, channel):
    """A spinning receiver takes the next message from the ring before its doorbell arrives;
    the doorbell is then dropped, never read as a second copy of the message."""
    sender, receiver = channel
    attach(pair, sender, receiver)
    push, pull = pair
    bell = sender.message({"n": 1, "ids": ids(start=1)})
    assert len(bell) == 1 and sender.stats["ring"] == 1         # a doorbell: the rest in a slot
    sender.publish()                                              # as if the socket took it
    got = receiver.recv(pull, spin_us=100_000)                    # the socket is empty: the ring
    assert got["n"] == 1 and got["ids"] == ids(start=1) and receiver.stats["ring"] == 1
    push.send_multipart(bell)                                     # its doorbell, late
    assert pull.poll(10_000)                                      # ...is waiting now
    sender.send(push, {"n": 2, "ids": ids(start=2)})
    got = receiver.recv(pull)
    assert got["n"] == 2 and got["ids"] == ids(start=2)
    assert receiver.stats["ring"] == 2
    if pull.poll(100):             # message 2's doorbell, if the ring was faster: nothing else
        left = pull.recv_multipart()
        assert len(left) == 1 and shm_segment._BELL.unpack(left[0])[4] == sender._seq
    assert not pull.poll(100)


@pytest.mark.parametrize("key", [None, KEY])
def test_ring_messages_and_frames_keep_the_socket_order(pair, channel, key):
    """Messages that fit the ring and messages that fall back to frames (ids larger than a
    slot) interleave in the order sent, whether the receiver sleeps or spins."""
    sender, receiver = channel
    attach(pair, sender, receiver, key=key)
    push, pull = pair
    sizes = [N, sender.slot_bytes // 4 + 8, N, N, sender.slot_bytes // 4 + 8, N, N, N]
    for n, size in enumerate(sizes):
        sender.send(push, {"n": n, "ids": ids(size, start=n)}, key=key)
    for n, size in enumerate(sizes):
        got = receiver.recv(pull, key=key, spin_us=1000 if n % 2 else 0)
        assert got["n"] == n and got["ids"] == ids(size, start=n)
    assert sender.stats["ring"] >= 2 and receiver.stats["ring"] == sender.stats["ring"]
    # A doorbell may still wait for a message the spin took: it is dropped, not read again.
    sender.send(push, {"n": "last"}, key=key)
    assert receiver.recv(pull, key=key)["n"] == "last"


def test_a_refused_ring_message_is_not_offered_again(pair, channel):
    """A ring message signed with another key is refused once (AuthenticationError), its slots
    come back, and neither the ring nor its doorbell offers it again."""
    sender, receiver = channel
    attach(pair, sender, receiver, key=KEY)
    push, pull = pair
    sender.send(push, {"ids": ids(start=1)}, key=OTHER_KEY)
    assert sender.stats["ring"] == 1
    with pytest.raises(AuthenticationError):
        receiver.recv(pull, key=KEY, spin_us=1000)
    for k in range(2, 12):                          # round the ring several times
        sender.send(push, {"ids": ids(start=k)}, key=KEY)
        assert receiver.recv(pull, key=KEY, spin_us=1000)["ids"] == ids(start=k)
    assert sender.stats["ring"] == 11
    sender.send(push, {"ids": "last"}, key=KEY)     # late doorbells are dropped, not read
    assert receiver.recv(pull, key=KEY)["ids"] == "last"


def test_a_forged_doorbell_is_refused(pair, channel):
    """A doorbell naming a slot with a generation the sender never wrote is refused; the real
    messages around it read normally."""
    sender, receiver = channel
    attach(pair, sender, receiver)
    push, pull = pair
    sender.send(push, {"n": 1, "ids": ids(start=1)})
    assert receiver.recv(pull)["n"] == 1
    push.send(shm_segment._BELL.pack(shm_segment._BELL_MAGIC, sender._id, os.getpid(), sender.fd,
                             sender._seq + 1, 0, 1, 200))
    with pytest.raises(WireFormatError, match="does not hold generation 1"):
        receiver.recv(pull)
    sender.send(push, {"n": 2, "ids": ids(start=2)})
    assert receiver.recv(pull)["n"] == 2


SPINNING_WORKER = textwrap.dedent("""
    import sys, zmq
    from tokenwire import shm
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL); pull.connect(sys.argv[1])
    push = ctx.socket(zmq.PUSH); push.connect(sys.argv[2])
    key = bytes(range(1, 33))
    receiver = shm.Receiver()
    while True:
        receiver.poll(pull, spin_us=20_000)
        msg = receiver.recv(pull, key=key)
        if msg is None:
            break
        push.send_pyobj((msg["n"], msg["ids"] == msg["expect"], receiver.stats["ring"]))
""")


@pytest.mark.integration
def test_a_spinning_worker_process_reads_every_message_in_order(zmq_ctx, tmp_path):
    """A worker process spinning on the ring: ring messages, frame fallbacks and messages sent
    while it sleeps on the socket all arrive once, in order, with the right ids."""
    zmq, ctx = zmq_ctx
    out, back = f"ipc://{tmp_path}/out", f"ipc://{tmp_path}/back"
    push = ctx.socket(zmq.PUSH)
    push.bind(out)
    pull = ctx.socket(zmq.PULL)
    pull.bind(back)
    pull.setsockopt(zmq.RCVTIMEO, 30_000)
    proc = _spawn(SPINNING_WORKER, out, back)
    try:
        with shm.Sender(slots=4, slot_bytes=256 * 1024) as sender:
            sizes = [10, N, N, 70_000, N, N, N, 70_000, N] * 3
            replies = []
            for n, size in enumerate(sizes):
                v = ids(size, start=n)
                sender.send(push, {"n": n, "ids": v, "expect": v}, key=KEY)
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
            sender.send(push, None, key=KEY)
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
        proc.wait()


def test_a_ring_message_keeps_its_buffer_slots_until_they_are_copied(pair, monkeypatch):
    """The receiver publishes a ring message's sequence only once its buffers' slots are copied
    out too: the sender, short of slots meanwhile, cannot take back the ids of the message being
    read."""
    push, pull = pair
    with shm.Sender(slots=2, slot_bytes=256 * 1024) as sender, shm.Receiver() as receiver:
        attach(pair, sender, receiver)
        sender.send(push, {"n": 1, "ids": ids(start=1)})          # both slots: ids, message
        assert sender.stats["ring"] == 1
        take = shm_segment._Segment.take
        sent = []

        def send_then_take(self, i, gen, n, seq, raw=False):
            if not raw and not sent:              # the message copied, its ids not yet
                sent.append(sender.message({"n": 2, "ids": ids(start=2)}))
            return take(self, i, gen, n, seq, raw)

        monkeypatch.setattr(shm_segment._Segment, "take", send_then_take)
        got = receiver.recv(pull, spin_us=100_000)
        assert got["n"] == 1 and got["ids"] == ids(start=1)
        push.send_multipart(sent[0])
        got = receiver.recv(pull)
        assert got["n"] == 2 and got["ids"] == ids(start=2)


def test_shared_words_refuse_unaligned_buffers_and_indices_outside():
    """The atomics act on aligned 8-byte words inside the buffer only."""
    from tokenwire._core import _ShmWords
    buf = bytearray(80)
    base = memoryview(buf)
    words = None
    for k in range(8):
        try:
            words = _ShmWords(base[k:k + 64], 8)
            break
        except ValueError as e:
            assert "8-byte boundary" in str(e)
    assert words is not None                   # one of eight offsets is aligned
    with pytest.raises(ValueError, match="8-byte boundary"):
        _ShmWords(base[k + 1:k + 65], 8)
    with pytest.raises(ValueError, match="do not fit"):
        _ShmWords(base[k:k + 64], 9)
    with pytest.raises(ValueError, match="do not fit"):
        _ShmWords(base[k:k + 64], 2**61)
    with pytest.raises(IndexError):
        words.load(8)
    with pytest.raises(IndexError):
        words.store(-1, 0)
    assert words.cas(7, 0, 5) and not words.cas(7, 0, 6) and words.load(7) == 5
    assert words.wait(7, 5, 0) and not words.wait(7, 6, 1000)
    with pytest.raises(BufferError):
        _ShmWords(bytes(64), 8)                # read-only: no atomics on it
    words.release()
    with pytest.raises(ValueError, match="released"):
        words.load(0)


# -- messages that take no slot carry no descriptor ----------------------------------------------

def _seq_of(frames, signed=False) -> int:
    """The sequence of a received channel message's descriptor, 0 for one without."""
    desc = bytes(frames[1 if signed else 0])
    if desc[:4] != shm_segment._DESC_MAGIC:
        assert desc[:2] == b"\x80\x05"          # a protocol-5 pickle
        return 0
    return shm_segment._DESC.unpack_from(desc, 0)[6]


@pytest.mark.parametrize("key", [None, KEY], ids=["unsigned", "signed"])
def test_a_message_without_slot_has_no_descriptor_once_attached(pair, channel, key):
    """Until a receiver attaches every message offers the segment in a descriptor; once one
    has, a message none of whose buffers takes a slot is exactly what send_pyobj_oob sends
    (the same frames, signed the same way) and uses no sequence; the receiver reads both."""
    from tokenwire.transport import dumps_oob
    sender, receiver = channel
    push, pull = pair
    obj = {"n": 1, "ids": ids(10)}
    send_pyobj_oob(push, obj, key=key, channel=sender)
    before = pull.recv_multipart()
    assert _seq_of(before, key is not None) == 1 == sender._seq            # the offer
    assert receiver.loads(before, key=key) == obj
    assert sender.attached() == os.getpid()
    for n in range(3):
        obj = {"n": n, "ids": ids(10 + n)}
        send_pyobj_oob(push, obj, key=key, channel=sender)
        got = pull.recv_multipart()
        assert got == [bytes(f) for f in dumps_oob(obj, key=key)]
        assert receiver.loads(got, key=key) == obj
    assert sender._seq == 1 and receiver._segments[sender._id].published == 1
    send_pyobj_oob(push, {"ids": ids()}, key=key, channel=sender)          # a slot: a descriptor
    got = pull.recv_multipart()
    assert _seq_of(got, key is not None) == 2
    assert receiver.loads(got, key=key)["ids"] == ids()
    assert receiver._segments[sender._id].published == 2


def test_sequences_stay_contiguous_over_slot_and_no_slot_messages(pair, channel):
    """Only the messages that carry a descriptor take a sequence, one after the other: the
    receiver publishes each and the sender takes every slot back."""
    sender, receiver = channel
    attach(pair, sender, receiver)
    push, pull = pair
    sizes = [10, N, 10, 10, N, N, 100, sender.slot_bytes // 4 + 8, N, 10, N, N, N, 10]
    seqs = []
    for n, size in enumerate(sizes):
        send_pyobj_oob(push, {"n": n, "ids": ids(size, start=n)}, channel=sender)
        frames = pull.recv_multipart()
        if _seq_of(frames):
            seqs.append(_seq_of(frames))
        else:
            assert size < N or size > sender.slot_bytes // 4, size     # no slot wanted
        got = receiver.loads(frames)
        assert got["n"] == n and got["ids"] == ids(size, start=n)
    assert seqs == list(range(2, 2 + len(seqs))) and len(seqs) == sizes.count(N)
    assert sender._seq == seqs[-1] == receiver._segments[sender._id].published
    sender._collect()
    assert all(sender._words.load(shm_segment._state_word(i)) & 3 == shm_segment._FREE
               for i in range(sender.slots))


def test_the_ring_never_overtakes_a_message_without_sequence(pair, channel):
    """A message without descriptor may still be on its way through the socket when the next
    one is made: that one stays on the socket (its record names no slot), so a spinning
    receiver cannot take it first; the one after it uses the ring again, in order."""
    sender, receiver = channel
    attach(pair, sender, receiver)
    push, pull = pair
    plain = sender.dumps({"n": 1})                       # not sent yet: still in transit
    assert len(plain) == 1 and sender._seq == 1
    second = sender.message({"n": 2, "ids": ids(start=2)})
    assert len(second) == 2 and _seq_of(second) == 2    # descriptor + pickle, not a doorbell
    assert not receiver.poll(pull, spin_us=2000, timeout_ms=0)     # nothing in the ring
    push.send_multipart(plain)
    push.send_multipart(second)
    for n in (1, 2):
        assert receiver.recv(pull, spin_us=1000)["n"] == n
    third = sender.message({"n": 3, "ids": ids(start=3)})
    assert len(third) == 1 and sender._seq == 3                    # a doorbell: the ring
    sender.publish()
    assert receiver.recv(pull, spin_us=100_000)["n"] == 3
    assert receiver.stats["ring"] == 1
    push.send_multipart(third)                                      # late: dropped
    sender.send(push, {"n": 4})
    assert receiver.recv(pull)["n"] == 4


@pytest.mark.parametrize("key", [None, KEY], ids=["unsigned", "signed"])
def test_a_stripped_descriptor_is_refused_and_touches_no_slot(pair, channel, key):
    """A peer that drops the descriptor of a message whose ids are in a slot gets it refused
    (unsigned: the pickle names a buffer that is missing; signed: a channel signature never
    verifies a message without descriptor), and the receiver neither reads nor frees the slot
    nor publishes anything; the slot comes back once a later message's sequence is."""
    import pickle
    sender, receiver = channel
    attach(pair, sender, receiver, key=key)
    push, pull = pair
    seg = receiver._segments[sender._id]
    frames = sender.dumps({"ids": ids(start=1)}, key=key)
    first = 1 if key is not None else 0
    i = shm_segment._ENTRY.unpack_from(frames[first], shm_segment._DESC.size)[0]
    state = shm_segment._state_word(i)
    full = sender._gens[i] << 2 | shm_segment._FULL
    stripped = frames[:first] + frames[first + 1:]
    push.send_multipart(stripped)
    published, taken = seg.published, receiver.stats["shm"]
    with pytest.raises(AuthenticationError if key is not None else pickle.UnpicklingError):
        recv_pyobj_oob(pull, key=key, channel=receiver)
    assert sender._words.load(state) == full                       # neither read nor freed
    assert seg.published == published and receiver.stats["shm"] == taken
    sender._collect()
    assert sender._words.load(state) == full                       # nothing published frees it
    send_pyobj_oob(push, {"ids": ids(start=2)}, key=key, channel=sender)
    assert recv_pyobj_oob(pull, key=key, channel=receiver)["ids"] == ids(start=2)
    assert seg.published == sender._seq
    sender._collect()
    assert sender._words.load(state) & 3 == shm_segment._FREE      # taken back by sequence


def test_a_record_reused_by_a_message_on_the_socket_names_no_slot(pair, channel):
    """Records are reused every RECORDS messages: a message that stays on the socket never
    leaves the slot of the ring message RECORDS before it in its record, where a spinning
    receiver would look for it."""
    sender, receiver = channel
    attach(pair, sender, receiver)
    push, pull = pair
    for n in range(shm_segment._RECORDS):
        sender.send(push, {"n": n})
        assert receiver.recv(pull, spin_us=100_000)["n"] == n
    assert sender.stats["ring"] == shm_segment._RECORDS
    big = ids(sender.slot_bytes // 4 + 8)                   # a frame: stays on the socket
    frames = sender.message({"n": "big", "ids": big})
    assert len(frames) == 3 and sender._seq == 2 + shm_segment._RECORDS   # record of ring msg 2
    seg = receiver._segments[sender._id]
    assert seg.next_message(sender._seq, 0) is None
    push.send_multipart(frames)
    got = receiver.recv(pull, spin_us=1000)
    assert got["n"] == "big" and got["ids"] == big


# -- a send that raises delivers nothing ----------------------------------------------------------

@pytest.fixture
def unreachable(zmq_ctx):
    """A PUSH socket with no peer: a send with NOBLOCK raises zmq.Again."""
    zmq, ctx = zmq_ctx
    sock = ctx.socket(zmq.PUSH)
    sock.bind(f"ipc:///tmp/tw-shm-{uuid.uuid4().hex}.ipc")
    yield zmq, sock
    sock.close(linger=0)


@pytest.mark.parametrize("how", ["send", "send_pyobj_oob", "msgspec"])
def test_a_send_that_raises_delivers_nothing_and_holds_no_slot(pair, channel, unreachable, how):
    """The channel writes a message's slots (and, for `send`, the whole message) before the
    socket takes its frames. When the socket raises, the message is undone: a receiver never
    gets it, not from the ring either (so a caller that retries delivers it once), its slots
    are free again and its sequence is the next message's."""
    zmq, dead = unreachable
    sender, receiver = channel
    push, pull = pair
    decoder = None
    if how == "msgspec":
        tm = pytest.importorskip("tokenwire.msgspec")
        encoder, decoder = tm.Encoder(channel=sender), tm.Decoder(channel=receiver)

    def send(sock, msg, flags=0):
        if how == "send":
            sender.send(sock, msg, flags=flags)
        elif how == "send_pyobj_oob":
            send_pyobj_oob(sock, msg, flags, channel=sender)
        else:
            encoder.send(sock, msg, flags)

    def recv():
        if how == "send":
            return receiver.recv(pull, spin_us=1000)
        if how == "send_pyobj_oob":
            return recv_pyobj_oob(pull, channel=receiver)
        return decoder.recv(pull)

    send(push, {"n": 0, "ids": ids(start=0)})
    assert recv()["n"] == 0 and sender.attached() == os.getpid()
    seq, slots_used = sender._seq, sender.stats["shm"]
    for _ in range(3 * sender.slots):              # more than the ring holds
        with pytest.raises(zmq.Again):
            send(dead, {"n": 1, "ids": ids(start=1)}, zmq.NOBLOCK)
        assert not receiver.poll(pull, spin_us=2000, timeout_ms=50)   # not in the ring either
        assert sender._seq == seq and sender.stats["shm"] == slots_used
    for n in (1, 2):                                # the retry, then the next message
        send(push, {"n": n, "ids": ids(start=n)})
        got = recv()
        assert got["n"] == n and got["ids"] == ids(start=n)
    assert sender.stats["shm"] > slots_used        # the ids took slots: none was held
    # Nothing else arrives: [1, 2], not [1, 1, 2] (a doorbell of a message recv took from the
    # ring may still come: recv drops it, then finds nothing).
    pull.setsockopt(zmq.RCVTIMEO, 300)
    with pytest.raises(zmq.Again):
        recv()


# -- a worker restarted after kill -9 -----------------------------------------------------------

def _wait_event(monitor, event, timeout_ms: int = 30_000) -> None:
    from zmq.utils.monitor import recv_monitor_message
    while True:
        assert monitor.poll(timeout_ms), f"no zmq event {event}"
        if recv_monitor_message(monitor)["event"] == event:
            return


@pytest.mark.integration
@pytest.mark.parametrize("spin_us", [0, 2000])
def test_a_worker_restarted_after_kill_9_gets_every_message(zmq_ctx, tmp_path, spin_us):
    """A worker reading whole messages from the ring (Sender.send / Receiver.recv) is killed
    with SIGKILL and a new one started in its place: every message sent to the new worker
    arrives, with its ids; none is refused for naming a segment it has not mapped. The
    proxy sees that the attached pid no longer runs and offers the segment again, and a
    doorbell carries the offer too."""
    zmq, ctx = zmq_ctx
    out, back = f"ipc://{tmp_path}/out", f"ipc://{tmp_path}/back"
    push = ctx.socket(zmq.PUSH)
    monitor = push.get_monitor_socket(zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED)
    push.bind(out)
    pull = ctx.socket(zmq.PULL)
    pull.bind(back)
    pull.setsockopt(zmq.RCVTIMEO, 30_000)
    sender = shm.Sender(slots=16, slot_bytes=256 * 1024)
    workers = []

    def send(n: int) -> None:
        v = ids(start=n)
        sender.send(push, {"n": n, "ids": v, "expect": v})

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
            assert sender.attached() == workers[-1].pid
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
            sender.send(push, {"n": 2, "ids": ids(start=2)})
            got = second.recv(pull)
            assert got["n"] == 2 and got["ids"] == ids(start=2)
            assert second.stats["ring"] == 1 and sender._id in second._segments


# -- numeric arguments are checked before they are used ----------------------------------------

@pytest.mark.parametrize("spin_us", [float("inf"), 1e16, 9.3e15, 60_000_001, float("nan"), -1])
def test_a_spin_outside_a_minute_is_refused(zmq_ctx, pair, channel, spin_us):
    """spin_us is checked as a number before it is converted to nanoseconds (a double beyond
    int64 converted to it is undefined behaviour), in the channel and in its kernel."""
    sender, receiver = channel
    attach(pair, sender, receiver)
    push, pull = pair
    pull.setsockopt(zmq_ctx[0].RCVTIMEO, 2000)          # a spin taken as 0 blocks: not forever
    with pytest.raises(ValueError, match="spin_us must be in"):
        receiver.recv(pull, spin_us=spin_us)
    with pytest.raises(ValueError, match="spin_us must be in"):
        receiver.poll(pull, spin_us=spin_us, timeout_ms=0)
    with pytest.raises(ValueError, match="timeout_us must be in"):
        receiver._segments[sender._id].words.wait(0, 1, spin_us)
    sender.send(push, {"ids": ids(start=3)})
    assert receiver.recv(pull, spin_us=shm.MAX_SPIN_US)["ids"] == ids(start=3)


@pytest.mark.parametrize("make, error, match", [
    (lambda: shm.Sender(slots=2.5), TypeError, "slots must be an int"),
    (lambda: shm.Sender(slots=0), ValueError, r"slots must be in \[1, 65536\], got 0"),
    (lambda: shm.Sender(slot_bytes=1 << 31), ValueError, "slot_bytes must be in"),
    (lambda: shm.Sender(threshold=-1), ValueError, "threshold must be in"),
    (lambda: shm.Sender(threshold="1"), TypeError, "threshold must be an int, got str"),
    (lambda: shm.Receiver(max_segments=0), ValueError, "max_segments must be in"),
    (lambda: shm.Receiver(max_segments=True), TypeError, "max_segments must be an int"),
])
def test_channel_arguments_are_checked(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_poll_timeout_and_spin_types_are_checked(pair, channel):
    _, receiver = channel
    _, pull = pair
    with pytest.raises(ValueError, match="timeout_ms must be in"):
        receiver.poll(pull, timeout_ms=-5)
    with pytest.raises(TypeError, match="spin_us must be a number"):
        receiver.recv(pull, spin_us="100")


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
        assert receiver.poll(pull, spin_us=10, timeout_ms=0) is False
