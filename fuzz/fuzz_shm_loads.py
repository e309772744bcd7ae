"""atheris fuzz target for tokenwire.shm.Receiver._loads and its doorbell path, ``_received``
(not part of pytest).

    python fuzz/fuzz_shm_loads.py --seconds 30              # extra args after -- go to libFuzzer

One process holds a real channel: a `Sender` with its memfd segment (4 slots of 4 KiB; buffers
of 256 bytes and more take a slot) and a `Receiver` attached to it by a first message, as
between a proxy and its worker. Each input builds a real message with `Sender._dumps` from fuzzed
parameters -- two token vectors whose ids land in slots, in frames or in the pickle, signed
with a key or not, `sign_buffers` or not -- and then damages it from the fuzzer's data: bits
and bytes and 64-bit fields of the descriptor (slot index, generation, length, count, sequence,
token), bytes of the pickle, cuts and inserts, frames dropped, repeated, swapped, replaced or
added, the signature changed, removed or added; frames given as bytes, bytearray, memoryview
or ImmutableBuffer. Some damaged signed messages are signed again with the key (a peer that
holds the key but sends garbage), so the checks behind the signature are fuzzed too; some
inputs replay the previous input's frames (its slots read or taken back since). Then
``receiver._loads(frames, key=..., sign_buffers=..., find_class=...)``.

About a third of the inputs go through the ring instead: a second `Sender` with ``ring=True`` (the
same geometry, the receiver attached to it too) makes the message with `Sender._message`. When
every large buffer took a slot the whole message goes into a slot and the socket would carry a
doorbell only; the record naming the slot is written (`Sender._publish`, the socket took the
doorbell) or not (a receiver may read the doorbell before the sender writes it). The damage
then hits the doorbell's bytes and 64-bit fields (sequence, slot, generation, length), the
message slot's bytes in the segment (its part lengths, the descriptor inside it, the pickle),
or adds a frame; otherwise the message's frames are damaged as above. No damaged message that
names the ring's segment is signed again: the receiver trusts the sequence a signed descriptor
names (the key's holder is the sender) and is done with every message up to it, so after a
forged one the ring sender's next doorbells are refused as done with, and an undamaged
doorbell would no longer load. Then
``receiver._received(frames, key=..., find_class=...)``, the receiver's entry point for a
message read from the socket (`recv_pyobj_oob` with ``channel=``), which takes a doorbell's
message from its slot and any other message through `_loads`. Either way:

* an undamaged message loads to what was sent;
* otherwise only the errors the channel documents may come out of it (tokenwire.shm's and
  docs/transport.md: `WireFormatError` for a descriptor that does not match its frames or its
  slots, `AuthenticationError` for a signature that does not verify, `pickle.UnpicklingError`
  when the unpickler finds buffers missing or `find_class` refuses a global; any documented
  `TokenwireError`, e.g. `TokenIdError` for a buffer frame that is not whole int32 ids), and,
  once the pickle's own bytes were changed and still reached the unpickler, the errors Python's
  ``pickle.loads`` raises for a corrupt pickle (see its documentation: UnpicklingError,
  "including but not limited to" AttributeError, EOFError, ImportError, IndexError; here also
  the other ValueErrors, TypeError, KeyError, OverflowError and struct.error), raised inside
  the unpickler. Anything else -- another exception, one raised outside the unpickler, a crash,
  a sanitizer report -- is a finding.

Unpickling goes through ``tokenwire.unpickle.find_class`` (tokenwire's own globals only), as a worker
facing untrusted bytes should: a damaged pickle cannot call anything else. A descriptor that
names another segment makes the receiver try to attach to it; the harness sets the sender pid
such a descriptor names to its own pid or to one that cannot exist, so the fuzzer never reaches
into another process on the machine (doorbells name a pid at the same offset). The ring
stays healthy: every input first takes back the slots left unread (`Sender._reclaim`), so each
message finds free slots.

Run it through fuzz/run.sh (target `shm_loads`), which builds the extension with clang,
-fsanitize=fuzzer-no-link,address, so the C code under the channel (the shared words, the
token vector copies, the pickle restore) is instrumented and checked by ASan.
"""

from __future__ import annotations

import os
import pickle
import struct
import sys
from typing import Any, Dict

import atheris
from harness import count_input, edit_bytes, fuzz_main, raised_in

with atheris.instrument_imports():
    import tokenwire
    import tokenwire._oob
    import tokenwire.shm
    import tokenwire.transport
    from tokenwire import TokenVector
    from tokenwire.errors import TokenwireError
    from tokenwire._core import ImmutableBuffer

shm = tokenwire.shm
oob = tokenwire._oob
KEY = bytes(range(1, 33))
DESC = shm._DESC                     # header: magic, segment id, pid, fd, count, pad, seq, token
ENTRY = shm._ENTRY                   # per buffer: slot index, generation, length
PID_AT = 20                          # offset of the sender pid in the descriptor header
NO_PID = (1 << 22) + 1               # above pid_max: a pid that cannot exist
FIND_CLASS = tokenwire.unpickle.find_class
# What a corrupt pickle may raise from inside pickle.loads (beyond UnpicklingError).
PICKLE_ERRORS = (pickle.UnpicklingError, AttributeError, EOFError, ImportError, IndexError,
                 ValueError, TypeError, KeyError, OverflowError, struct.error)

if not shm.available():
    sys.exit("fuzz_shm_loads: shared-memory segments need Linux memfd_create")

SENDER = shm.Sender(slots=4, slot_bytes=4096, threshold=256)
RING = shm.Sender(slots=4, slot_bytes=4096, threshold=256, ring=True)
RECEIVER = shm.Receiver()
for _sender in (SENDER, RING):
    RECEIVER._loads(_sender._dumps({"ids": TokenVector(range(100))}))  # the offer: attach
    assert _sender._attached() == os.getpid(), "the receiver did not attach"
SEGMENT_IDS = {SENDER._id, RING._id}
# The doorbell's layout: magic, segment id, pid, fd, sequence, slot, generation, length.
BELL = shm._BELL

_stats = {"inputs": 0, "loaded": 0, "slots": 0, "bells": 0, "rung": 0}
_previous: list = []


@atheris.instrument_func
def build(fdp: atheris.FuzzedDataProvider):
    """A real message from fuzzed parameters: (obj, key, sign_buffers, frames)."""
    obj = {}
    for name in ("a", "b"):
        n = fdp.ConsumeIntInRange(0, 1300)          # 1024 ids fill a slot
        start = fdp.ConsumeIntInRange(-(2**31), 2**31 - 1 - n)
        obj[name] = TokenVector(range(start, start + n))
    obj["n"] = fdp.ConsumeIntInRange(0, 2**40)
    key = KEY if fdp.ConsumeBool() else None
    sign_buffers = key is not None and fdp.ConsumeIntInRange(0, 7) == 0
    oob = (0, 64, 1024, tokenwire.transport.OOB_THRESHOLD)[fdp.ConsumeIntInRange(0, 3)]
    before = SENDER.stats["shm"]
    frames = SENDER._dumps(obj, oob_threshold=oob, key=key, sign_buffers=sign_buffers)
    _stats["slots"] += SENDER.stats["shm"] - before
    return obj, key, sign_buffers, [bytes(memoryview(f)) for f in frames]


@atheris.instrument_func
def build_ring(fdp: atheris.FuzzedDataProvider):
    """A message of the ring sender from fuzzed parameters: (obj, key, frames, doorbell), the
    doorbell None when the message did not go into a slot (a buffer found no slot, or the
    message is larger than one). Buffers of 64 ids and more take slots, so two vectors of at
    most 1024 ids each leave the pickle small enough for a slot of its own."""
    obj = {}
    for name in ("a", "b"):
        n = fdp.ConsumeIntInRange(0, 1100)
        start = fdp.ConsumeIntInRange(-(2**31), 2**31 - 1 - n)
        obj[name] = TokenVector(range(start, start + n))
    obj["n"] = fdp.ConsumeIntInRange(0, 2**40)
    key = KEY if fdp.ConsumeBool() else None
    frames = [bytes(memoryview(f)) for f in RING._message(obj, key=key)]
    if fdp.ConsumeIntInRange(0, 3):
        RING._publish()                  # the socket took the frames: the record names the slot
    bell = None
    if len(frames) == 1 and len(frames[0]) == BELL.size and frames[0][:4] == shm._BELL_MAGIC:
        bell = BELL.unpack(frames[0])
        _stats["bells"] += 1
    return obj, key, frames, bell


@atheris.instrument_func
def damage_bell(fdp: atheris.FuzzedDataProvider, frames, bell):
    """Fuzzed edits of a doorbell message: its frame, the message slot it names, or a frame
    added: (frames, whether the pickle's bytes may have changed)."""
    parts = list(frames)
    pickle_changed = False
    for _ in range(fdp.ConsumeIntInRange(1, 3)):
        what = fdp.ConsumeIntInRange(0, 3)
        if what <= 1 and parts:                                  # the doorbell's fields
            parts[0] = edit_bytes(fdp, parts[0], **WORD_EDITS)
        elif what == 2:                                          # the slot, in the segment
            i, n = bell[5], bell[7]
            at = RING._data + i * RING._slot_bytes
            old = bytes(RING._mv[at:at + n])
            new = edit_bytes(fdp, old, **WORD_EDITS)
            RING._mv[at:at + n] = (new + bytes(n))[:n]           # the slot keeps its length
            pickle_changed = True
        else:                                                    # not a doorbell any more
            parts.insert(fdp.ConsumeIntInRange(0, len(parts)),
                         fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 80)))
            pickle_changed = True
    return [pin_pid(p) for p in parts], pickle_changed


#: edit_bytes' edits: with word edits (64-bit fields at multiples of 4: a descriptor's counts and
#: entries, slot index, generation, length, sequence) for the descriptor and for any frame, which
#: may be one; without them for the pickle and the signature.
WORD_EDITS: Dict[str, Any] = dict(words=(0, 1, 2**64 - 1, 2**63), small=8, align=4,
                                        max_insert=24)
BYTE_EDITS: Dict[str, Any] = dict(words=(), align=4, max_insert=24)


def pin_pid(frame: bytes) -> bytes:
    """A frame the receiver may read as a descriptor or a doorbell of another segment names our
    own pid or one that cannot exist: an attach attempt never reaches another process."""
    if (len(frame) < PID_AT + 4 or frame[:4] not in (shm._DESC_MAGIC, shm._BELL_MAGIC)
            or frame[4:20] in SEGMENT_IDS):
        return frame
    pid = struct.unpack_from("<I", frame, PID_AT)[0]
    if pid in (os.getpid(), NO_PID):
        return frame
    b = bytearray(frame)
    struct.pack_into("<I", b, PID_AT, os.getpid() if pid & 1 else NO_PID)
    return bytes(b)


@atheris.instrument_func
def damage(fdp: atheris.FuzzedDataProvider, key, sign_buffers, frames, resign=True):
    """Fuzzed edits of the message: (frames, whether the pickle's bytes changed). With
    `resign`, some signed messages are signed again after the damage."""
    signed = key is not None
    desc_at = 1 if signed else 0
    has_desc = len(frames) > desc_at and frames[desc_at][:4] == shm._DESC_MAGIC
    head_at = desc_at + 1 if has_desc else desc_at
    parts = list(frames)
    pickle_changed = False
    for _ in range(fdp.ConsumeIntInRange(1, 4)):
        what = fdp.ConsumeIntInRange(0, 5)
        if what <= 1 and has_desc and desc_at < len(parts):      # the descriptor
            parts[desc_at] = edit_bytes(fdp, parts[desc_at], **WORD_EDITS)
        elif what == 2 and head_at < len(parts):                 # the pickle
            parts[head_at] = edit_bytes(fdp, parts[head_at], **BYTE_EDITS)
            pickle_changed = True
        elif what == 3 and parts:                                # any frame's bytes
            i = fdp.ConsumeIntInRange(0, len(parts) - 1)
            parts[i] = edit_bytes(fdp, parts[i], **WORD_EDITS)
            pickle_changed |= i == head_at
        elif what == 4:                                          # the frames themselves
            op = fdp.ConsumeIntInRange(0, 4)
            if op == 0 and parts:
                del parts[fdp.ConsumeIntInRange(0, len(parts) - 1)]
            elif op == 1 and parts:
                i = fdp.ConsumeIntInRange(0, len(parts) - 1)
                parts.insert(fdp.ConsumeIntInRange(0, len(parts)), parts[i])
            elif op == 2 and len(parts) >= 2:
                i = fdp.ConsumeIntInRange(0, len(parts) - 1)
                j = fdp.ConsumeIntInRange(0, len(parts) - 1)
                parts[i], parts[j] = parts[j], parts[i]
            elif op == 3:
                parts.insert(fdp.ConsumeIntInRange(0, len(parts)),
                             fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 80)))
            else:
                parts[fdp.ConsumeIntInRange(0, max(len(parts) - 1, 0)):] = []
            pickle_changed = True                 # any frame may stand where the pickle was
        else:                                                    # the signature
            op = fdp.ConsumeIntInRange(0, 2)
            if op == 0 and signed and parts:
                parts[0] = edit_bytes(fdp, parts[0], **BYTE_EDITS)
            elif op == 1 and signed and parts:
                del parts[0]
                pickle_changed = True
            else:
                parts.insert(0, oob._SIG_MAGIC + fdp.ConsumeBytes(32))
                pickle_changed = True
    parts = [pin_pid(p) for p in parts]
    if (resign and signed and fdp.ConsumeBool() and len(parts) >= 3
            and parts[1][4:20] != RING._id):
        # Signed again by a key holder: the receiver's checks behind the signature see it.
        # Never one naming the ring's segment (the module docstring says why).
        body = parts[1:]
        parts = [oob.signature(oob.as_key(key), body[0] + body[1], body[2:], sign_buffers,
                               channel=True), *body]
    return parts, pickle_changed


def as_type(fdp: atheris.FuzzedDataProvider, frames):
    kind = fdp.ConsumeIntInRange(0, 3)
    return [(bytes, bytearray, memoryview, ImmutableBuffer)[kind](f) for f in frames]


def in_unpickler(e: BaseException) -> bool:
    """Was `e` raised while unpickling (below tokenwire._oob.unpickle)?"""
    return raised_in(e, oob.unpickle.__code__)


@atheris.instrument_func
def test_one_input(raw: bytes) -> None:
    count_input("shm", _stats, lambda: f"{_stats['loaded']} loaded, {_stats['slots']} "
                                       f"buffers through slots, {_stats['bells']} doorbells, "
                                       f"{_stats['rung']} messages loaded from a ring slot")
    fdp = atheris.FuzzedDataProvider(raw)
    SENDER._reclaim()                             # every slot free again: the ring stays healthy
    RING._reclaim()
    mode = fdp.ConsumeIntInRange(0, 7)
    if mode == 0 and _previous:                   # the previous input's frames, replayed
        obj, key, sign_buffers, frames, ring = _previous[0]
        pristine, pickle_changed = False, True
    else:
        ring = fdp.ConsumeIntInRange(0, 2) == 0
        pristine = mode == 1
        if ring:
            sign_buffers = False                  # the ring's messages never sign slot bytes
            obj, key, frames, bell = build_ring(fdp)
            if not pristine and bell is not None:
                frames, pickle_changed = damage_bell(fdp, frames, bell)
            elif not pristine:
                frames, pickle_changed = damage(fdp, key, False, frames, resign=False)
        else:
            obj, key, sign_buffers, frames = build(fdp)
            if not pristine:
                frames, pickle_changed = damage(fdp, key, sign_buffers, frames)
        _previous[:] = [(obj, key, sign_buffers, frames, ring)]
    if not pristine and fdp.ConsumeIntInRange(0, 15) == 0:
        key = None if key is not None else KEY    # read with the other choice of key
    given = as_type(fdp, frames)
    rung = RECEIVER.stats["ring"]
    try:
        if ring:
            got = RECEIVER._received(given, key=key, sign_buffers=sign_buffers,
                                     find_class=FIND_CLASS)
        else:
            got = RECEIVER._loads(given, key=key, sign_buffers=sign_buffers,
                                  find_class=FIND_CLASS)
    except (TokenwireError, pickle.UnpicklingError) as e:     # every documented error
        assert not pristine, f"an undamaged message was refused: {e!r}"
        return
    except PICKLE_ERRORS as e:
        if pristine or not pickle_changed or not in_unpickler(e):
            raise
        return
    _stats["loaded"] += 1
    _stats["rung"] += RECEIVER.stats["ring"] - rung
    if pristine:
        assert got == obj, "an undamaged message loaded to something else"


def main() -> int:
    return fuzz_main(__doc__, test_one_input, "shm", seconds=30, max_len=512, fixed_seed=True)


if __name__ == "__main__":
    sys.exit(main())
