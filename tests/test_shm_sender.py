"""tokenwire.shm.Sender: where a message's buffers go (a slot of the ring; in band when small; a
frame when larger than a slot, when the ring is full, or when every byte is to be signed), the
channel through send_pyobj_oob and the msgspec Encoder/Decoder, the descriptor and its sequence
(once a receiver is attached, only messages that use a slot carry them, numbered one after the
other), and a send the socket refuses, which delivers nothing and holds no slot.

In-process tests over real zmq sockets and a real segment.
"""

from __future__ import annotations

import os
import struct
import uuid

import pytest
from support import shm_helpers
from support.shm_helpers import KEY, N, _entry, _seq_of, attach, ids, shm

from tokenwire import WireFormatError
from tokenwire.transport import recv_pyobj_oob, send_pyobj_oob

# The fixtures the tests take by name (pytest finds them as attributes of this module).
pair = shm_helpers.pair
channel = shm_helpers.channel


# -- the channel moves ids -------------------------------------------------------------------------

@pytest.mark.parametrize("key", [None, KEY])
def test_round_trip_through_slots(pair, channel, key):
    sender, receiver = channel
    push, pull = pair
    send_pyobj_oob(push, {"ids": ids(), "n": 0}, key=key, channel=sender)
    first = recv_pyobj_oob(pull, key=key, channel=receiver)
    assert first["ids"] == ids()
    assert sender.stats == {"shm": 0, "frames": 1, "ring": 0}           # the offer
    assert sender._attached() == os.getpid()
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
    small, mid = ids(100), ids(shm._SHM_THRESHOLD // 4)     # mid is below OOB_THRESHOLD
    frames = sender._dumps({"a": small, "b": mid})
    assert len(frames) == 2                                  # descriptor + pickle: no frame
    got = receiver._loads(frames)
    assert got == {"a": small, "b": mid}
    assert sender.stats["shm"] == 1


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
    big = ids(sender._slot_bytes // 4 + 1)
    send_pyobj_oob(push, {"ids": big}, key=KEY, channel=sender)
    assert recv_pyobj_oob(pull, key=KEY, channel=receiver)["ids"] == big
    send_pyobj_oob(push, {"ids": ids()}, key=KEY, sign_buffers=True, channel=sender)
    assert recv_pyobj_oob(pull, key=KEY, sign_buffers=True, channel=receiver)["ids"] == ids()
    assert sender.stats["shm"] == 0


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


# -- messages that take no slot carry no descriptor ------------------------------------------------

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
    assert receiver._loads(before, key=key) == obj
    assert sender._attached() == os.getpid()
    for n in range(3):
        obj = {"n": n, "ids": ids(10 + n)}
        send_pyobj_oob(push, obj, key=key, channel=sender)
        got = pull.recv_multipart()
        assert got == [bytes(f) for f in dumps_oob(obj, key=key)]
        assert receiver._loads(got, key=key) == obj
    assert sender._seq == 1 and receiver._segments[sender._id].published == 1
    send_pyobj_oob(push, {"ids": ids()}, key=key, channel=sender)          # a slot: a descriptor
    got = pull.recv_multipart()
    assert _seq_of(got, key is not None) == 2
    assert receiver._loads(got, key=key)["ids"] == ids()
    assert receiver._segments[sender._id].published == 2


def test_sequences_stay_contiguous_over_slot_and_no_slot_messages(pair, channel):
    """Only the messages that carry a descriptor take a sequence, one after the other: the
    receiver publishes each and the sender takes every slot back."""
    sender, receiver = channel
    attach(pair, sender, receiver)
    push, pull = pair
    sizes = [10, N, 10, 10, N, N, 100, sender._slot_bytes // 4 + 8, N, 10, N, N, N, 10]
    seqs = []
    for n, size in enumerate(sizes):
        send_pyobj_oob(push, {"n": n, "ids": ids(size, start=n)}, channel=sender)
        frames = pull.recv_multipart()
        if _seq_of(frames):
            seqs.append(_seq_of(frames))
        else:
            assert size < N or size > sender._slot_bytes // 4, size     # no slot wanted
        got = receiver._loads(frames)
        assert got["n"] == n and got["ids"] == ids(size, start=n)
    assert seqs == list(range(2, 2 + len(seqs))) and len(seqs) == sizes.count(N)
    assert sender._seq == seqs[-1] == receiver._segments[sender._id].published
    sender._collect()
    assert all(sender._words.load(shm._state_word(i)) & 3 == shm._FREE
               for i in range(sender._slots))


# -- a send that raises delivers nothing -----------------------------------------------------------

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
            sender._send(sock, msg, flags=flags)
        elif how == "send_pyobj_oob":
            send_pyobj_oob(sock, msg, flags, channel=sender)
        else:
            encoder.send(sock, msg, flags)

    def recv():
        if how == "send":
            return receiver._recv(pull, spin_us=1000)
        if how == "send_pyobj_oob":
            return recv_pyobj_oob(pull, channel=receiver)
        return decoder.recv(pull)

    send(push, {"n": 0, "ids": ids(start=0)})
    assert recv()["n"] == 0 and sender._attached() == os.getpid()
    seq, slots_used = sender._seq, sender.stats["shm"]
    for _ in range(3 * sender._slots):              # more than the ring holds
        with pytest.raises(zmq.Again):
            send(dead, {"n": 1, "ids": ids(start=1)}, zmq.NOBLOCK)
        assert not receiver._poll(pull, spin_us=2000, timeout_ms=50)   # not in the ring either
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
