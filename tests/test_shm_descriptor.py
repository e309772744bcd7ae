"""The descriptor frame a channel message carries, damaged: a stale descriptor (its slot reused
while the message was unread), tampered entries (any slot, generation or length value reads the
right ids or is refused, never outside the ring), a malformed or stripped descriptor, and the
signature that covers it (every byte, never a plain message's, never slots with sign_buffers).

In-process tests over real zmq sockets and a real segment.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import shm_helpers
from support.shm_helpers import KEY, _entry, _seq_of, attach, ids, shm

from tokenwire import WireFormatError
from tokenwire.errors import AuthenticationError
from tokenwire.transport import loads_oob, recv_pyobj_oob, send_pyobj_oob

# The fixtures the tests take by name (pytest finds them as attributes of this module).
pair = shm_helpers.pair
channel = shm_helpers.channel


# -- stale, tampered, malformed and stripped descriptors -------------------------------------------

def test_slot_reused_while_the_old_message_is_unread_is_refused(pair, zmq_ctx):
    push, pull = pair
    with shm.Sender(slots=1, slot_bytes=256 * 1024) as sender, shm.Receiver() as receiver:
        attach(pair, sender, receiver)
        send_pyobj_oob(push, {"ids": ids(start=1)}, channel=sender)     # slot 0, unread
        sender._reclaim()
        send_pyobj_oob(push, {"ids": ids(start=2)}, channel=sender)     # slot 0 again
        assert sender.stats["shm"] == 2
        with pytest.raises(WireFormatError, match="does not hold generation"):
            recv_pyobj_oob(pull, channel=receiver)
        assert recv_pyobj_oob(pull, channel=receiver)["ids"] == ids(start=2)


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
    frames = sender._dumps({"ids": ids()})
    desc = bytearray(frames[0])
    struct.pack_into("<Q", desc, _entry(desc) + 8 * field, value)
    with pytest.raises(WireFormatError, match=message):
        receiver._loads([bytes(desc), *frames[1:]])
    assert receiver._loads(frames)["ids"] == ids()   # the real message still reads (once)
    with pytest.raises(WireFormatError, match="does not hold generation"):
        receiver._loads(frames)                       # a replay finds the slot freed


_SEQUENCE_AT = shm._DESC.size - 16     # the header's message sequence, then its token


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.integers(0, 6), value=st.integers(0, 2**64 - 1))
def test_any_entry_value_reads_the_slot_or_is_refused(channel, pair, field, value):
    """Whatever an entry of two says (fields 0-5: slot, generation, length) or the header's
    message sequence (field 6), the receiver gives the right ids or raises WireFormatError,
    never reads outside the ring (which would crash), and never publishes a sequence past the
    message's: a forged one would tell the sender that messages not yet read are done."""
    sender, receiver = channel
    if not sender._attached():
        attach(pair, sender, receiver)
    sender._reclaim()
    frames = sender._dumps({"a": ids(), "b": ids(start=7)})
    seq = _seq_of(frames)
    desc = bytearray(frames[0])
    if field == 6:
        struct.pack_into("<Q", desc, _SEQUENCE_AT, value)
    else:
        struct.pack_into("<Q", desc, _entry(desc, field // 3) + 8 * (field % 3), value)
    try:
        got = receiver._loads([bytes(desc), *frames[1:]])
    except WireFormatError:
        pass
    else:
        assert got == {"a": ids(), "b": ids(start=7)}
        assert field != 6 or value == seq, f"sequence {value} read message {seq}'s slots"
    assert sender._words.load(shm._DONE_WORD) <= seq


@pytest.mark.parametrize("damage", ["truncate", "magic", "count", "frame"])
def test_malformed_descriptor_frame_is_refused(channel, damage):
    sender, receiver = channel
    frames = sender._dumps({"ids": ids()})          # not attached: the ids are a frame
    desc = bytearray(frames[0])
    if damage == "truncate":
        desc = desc[:40]
    elif damage == "magic":
        desc[:4] = b"XXXX"
    elif damage == "count":
        struct.pack_into("<I", desc, 28, 2)
    with pytest.raises(WireFormatError):
        rest = frames[1:2] if damage == "frame" else frames[1:]
        receiver._loads([bytes(desc), *rest])


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
    frames = sender._dumps({"ids": ids(start=1)}, key=key)
    first = 1 if key is not None else 0
    i = shm._ENTRY.unpack_from(frames[first], shm._DESC.size)[0]
    state = shm._state_word(i)
    full = sender._gens[i] << 2 | shm._FULL
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
    assert sender._words.load(state) & 3 == shm._FREE      # taken back by sequence


# -- the signature covers the descriptor -----------------------------------------------------------

def test_signed_descriptor_is_covered_by_the_signature(channel, pair):
    sender, receiver = channel
    attach(pair, sender, receiver, key=KEY)
    frames = sender._dumps({"ids": ids()}, key=KEY)
    desc = bytes(frames[1])
    for at in range(len(desc)):
        bad = bytearray(desc)
        bad[at] ^= 1
        with pytest.raises(AuthenticationError):
            receiver._loads([frames[0], bytes(bad), *frames[2:]], key=KEY)
    with pytest.raises(AuthenticationError):
        receiver._loads(frames[1:], key=KEY)                  # signature dropped
    with pytest.raises(AuthenticationError, match="pass key"):
        receiver._loads(frames)
    with pytest.raises(AuthenticationError):
        loads_oob(frames, key=KEY)            # a channel message never verifies as a plain one
    assert receiver._loads(frames, key=KEY)["ids"] == ids()   # nothing was freed meanwhile


def test_sign_buffers_refuses_a_descriptor_naming_slots(channel, pair):
    """With sign_buffers=True every byte must be signed; a slot's bytes are not, so a message
    naming one (signed by a key holder who did not sign its buffers) is refused."""
    sender, receiver = channel
    attach(pair, sender, receiver)
    from tokenwire._oob import signature
    frames = sender._dumps({"ids": ids()})
    assert sender.stats["shm"] == 1
    sig = signature(KEY, frames[0] + frames[1], frames[2:], True, channel=True)
    with pytest.raises(WireFormatError, match="sign_buffers"):
        receiver._loads([sig, *frames], key=KEY, sign_buffers=True)


def test_plain_signed_message_does_not_verify_as_a_channel_message(channel):
    """A message without descriptor is read as dumps_oob signed it; a plain message's signature
    never verifies a channel message, nor a channel message's a plain one."""
    from tokenwire.transport import dumps_oob
    sender, receiver = channel
    plain = dumps_oob({"ids": ids()}, key=KEY)
    assert receiver._loads(plain, key=KEY)["ids"] == ids()
    desc = sender._dumps({"ids": ids()})[0]                   # not attached: a descriptor
    assert desc[:4] == shm._DESC_MAGIC
    with pytest.raises(AuthenticationError):                 # a descriptor put in
        receiver._loads([plain[0], desc, *plain[1:]], key=KEY)
    framed = sender._dumps({"ids": ids()}, key=KEY)
    with pytest.raises(AuthenticationError):                 # its descriptor taken out
        receiver._loads([framed[0], *framed[2:]], key=KEY)
