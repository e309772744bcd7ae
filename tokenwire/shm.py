"""A same-host channel for large buffers: a ring of slots in shared memory beside a zmq socket.

    sender = tokenwire.shm.Sender()                       # proxy: owns the segment
    send_pyobj_oob(sock, request, key=KEY, channel=sender)

    receiver = tokenwire.shm.Receiver()                   # worker
    request = recv_pyobj_oob(sock, key=KEY, channel=receiver)

The zmq message still carries the pickle, plus one small *descriptor* frame (covered by the
signature with `key=`); each large buffer (the int32 ids) travels through a slot of the ring
instead of a frame: one memcpy into the slot on the sending side, one memcpy out of it on the
receiving side, and no kernel copy of the ids through the socket. Once a receiver has attached,
a message none of whose buffers wants a slot (small ids) carries no descriptor: it is what
``send_pyobj_oob`` sends without a channel, signed the same way, and costs what that costs; the
receiver tells the two apart by the descriptor's magic (a pickle starts with ``b"\\x80\\x05"``).

How it is kept safe (docs/transport.md, "Shared-memory channel", says what it promises):

* The segment is a sealed ``memfd`` (Linux): it has no name in ``/dev/shm`` and the kernel frees
  it when the last process holding it exits, so a process killed with ``kill -9`` leaks nothing.
  It is mode 0o600 and sealed against shrinking or growing, so a peer cannot truncate it under
  a reader (which would crash the reader with SIGBUS). A receiver opens
  ``/proc/<sender pid>/fd/<fd>`` with ``O_PATH`` (which opens nothing, and whose close releases
  no lock: the pid and fd come from an unverified message), checks the file and reopens only
  that one (same user, same host, same pid namespace); it checks the name, owner, mode, seals,
  size and a random 16-byte segment id before mapping it.
* Each slot has a header: a state word ``generation << 2 | state`` (a random generation per
  write), a length and the sequence number of the message it holds. The descriptor names slot
  index, generation and length for each buffer. The receiver checks the index against the ring,
  the length against the slot size, the state word against ``(generation, FULL)``, copies the
  bytes into storage it owns (a `TokenVector`), checks length and sequence, and frees the slot
  with one compare-and-swap from ``(generation, FULL)``: it fails if anything rewrote the slot
  during the copy (the message is refused, the newer one keeps its slot). Only then is the
  copy handed on. Nothing is ever a view of memory another process can still write, and nothing
  read from the segment decides how much is read. Shared words are C atomics (_ShmWords).
* Every message with a descriptor has a sequence number (contiguous: a message without one
  takes none) and a random token, in its descriptor and in a record in the segment. The receiver
  reads messages in order; once done with one (read or refused) it publishes its sequence in the
  segment header, provided it knows the sender sent it (signature verified, or the segment holds
  its token or its random generation), and the sender takes back every slot of a message at or
  before it: a refused or dropped message leaves no FULL slot behind, and a forged sequence
  frees nothing. A message whose buffer wants a slot but finds the ring full still carries a
  descriptor, so that its sequence gives back the slots of dropped messages. A peer that strips
  the descriptor of a message whose ids are in a slot gets it refused (its pickle names buffers
  that are missing; signed, the channel signature does not verify without it) and the receiver
  neither reads nor frees a slot for it: its slots come back once a later message's sequence is
  published, or by `Sender.reclaim`.
* The sender writes only FREE slots, with generations it keeps in its own memory (a
  compare-and-swap from the FREE word it expects). A full ring,
  a buffer larger than a slot, ``sign_buffers=True`` (the signature would have to cover the
  slots' bytes) or a receiver that has not attached to the segment (another host, another pid
  namespace, a peer that does not pass a channel) all fall back to out-of-band frames, per
  buffer, without the caller noticing. Until a receiver has attached, every message offers the
  segment in its descriptor; a receiver that can open it attaches, and writes its pid in the
  segment header.
* Slots left FULL by a receiver that died (``kill -9``) are taken back when the ring is full and
  the pid that was attached when they were written no longer runs; `Sender.reclaim` takes back
  every unread slot at once (a message naming one is then refused as stale).

``Sender.send`` / ``Receiver.recv`` go one step further (opt-in): when every large buffer took a
slot, the whole message (signature, descriptor, pickle) goes into a slot as well, named by the
message's record, and the socket carries only a small doorbell. ``recv`` reads what waits on the
socket first (its order is the messages' order); else it spins up to ``spin_us`` without the GIL
on the record of the next message, and takes it from its slot (copied out first, then checked
like any message); doorbells of messages already taken that way are dropped. A message `send`
makes right after one without a sequence stays on the socket (its record names no slot): a
spinning receiver could otherwise take it before the earlier one arrives.

One sender and one receiver per channel: a ring serves one zmq pair (PUSH → PULL to one worker),
and the receiver loads messages in the order they arrive.
Linux only; elsewhere `Sender` never offers a segment and every buffer travels as a frame.
"""

from __future__ import annotations

import hmac
import mmap
import os
import struct
from collections import OrderedDict
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from tokenwire import _shmsegment as _seg
from tokenwire._core import MAX_SPIN_US, _ShmWords
from tokenwire._shmsegment import (_DONE_WORD, _FREE, _FULL, _GEN_MASK, _MAX_SLOT_BYTES,
                                   _MAX_SLOTS, _READER_WORD, _RECORD_WORD, _RECORD_WORDS,
                                   _RECORDS, _SLOT_STATE0, _WORDS_PER_SLOT, _WRITING, _alive,
                                   _record_word,
                                   _data_offset, _Segment, _state_word, available)
from tokenwire.errors import AuthenticationError, WireFormatError
from tokenwire._oob import (OOB_THRESHOLD, FindClass, as_key, dumps_oob, is_signature, loads_oob,
                            signature, unpickle)
from tokenwire.transport import received_buffer, send_frames

__all__ = ["MAX_SPIN_US", "SHM_THRESHOLD", "SLOT_BYTES", "SLOTS", "Receiver", "Sender", "available"]

#: Buffers at least this many bytes go through a slot once a receiver has attached (smaller ones
#: stay in-band, or travel as frames from the transport's ``oob_threshold`` up). Around 8k ids
#: an out-of-band path starts to beat copying the ids into the pickle (docs/transport.md).
SHM_THRESHOLD = 32 * 1024
#: Default ring: SLOTS slots of SLOT_BYTES bytes each (memory is committed only when touched).
SLOTS = 16
SLOT_BYTES = 1 << 20

# Descriptor frame: magic, segment id, sender pid, sender fd, entry count, pad, message sequence,
# message token; then per buffer in the pickle's order: slot index (NO_SLOT: the next
# out-of-band frame), generation, length.
_DESC = struct.Struct("<4s16sIIIIQQ")
_DESC_MAGIC = b"TWD2"
_ENTRY = struct.Struct("<QQQ")
_DESC_PACK, _ENTRY_PACK = _DESC.pack, _ENTRY.pack
_DESC_UNPACK_FROM, _ENTRY_UNPACK_FROM = _DESC.unpack_from, _ENTRY.unpack_from
_DESC_SIZE, _ENTRY_SIZE = _DESC.size, _ENTRY.size
_NO_SLOT = (1 << 64) - 1
_NO_SEGMENT = bytes(16)
# A whole message in a slot (Sender.send / Receiver.recv): the lengths of its signature,
# descriptor and pickle, then those bytes. Its doorbell, the zmq message that wakes a receiver
# blocked on the socket: magic, segment id, sender pid, segment fd (the offer to attach, as in a
# descriptor: a receiver started in place of one that died maps the segment from it), sequence,
# slot, generation, length.
_MSG = struct.Struct("<IIQ")
_BELL = struct.Struct("<4s16sIIQQQQ")
_BELL_MAGIC = b"TWR2"
_MSG_PACK, _BELL_PACK = _MSG.pack, _BELL.pack
# A protocol-5 pickle starts with these bytes (PROTO 5), a descriptor with _DESC_MAGIC.
_PICKLE5 = b"\x80\x05"


class Sender:
    """The sending side: creates the segment and writes large buffers into free slots.

    `slots` slots of `slot_bytes` bytes; buffers of at least `threshold` bytes (and at most
    `slot_bytes`) use a slot when one is free and a receiver has attached. ``stats`` counts the
    buffers sent through slots (``"shm"``) and as frames (``"frames"``), and the whole messages
    `send` put in a slot (``"ring"``). `close` (or garbage
    collection, or the process's exit) releases the segment. Like a zmq socket, a Sender is
    used by one thread at a time.
    """

    def __init__(self, slots: int = SLOTS, slot_bytes: int = SLOT_BYTES, *,
                 threshold: int = SHM_THRESHOLD) -> None:
        slots = _count("slots", slots, 1, _MAX_SLOTS)
        slot_bytes = _count("slot_bytes", slot_bytes, 1, _MAX_SLOT_BYTES)
        self.threshold = _count("threshold", threshold, 0, 1 << 62)
        self.slots = slots
        self.slot_bytes = (slot_bytes + 63) // 64 * 64
        self.stats: Dict[str, int] = {"shm": 0, "frames": 0, "ring": 0}
        # Generations, sequences and owners are ours, kept in our memory, never read back from
        # the segment.
        self._gens = [0] * slots
        self._slot_seq = [0] * slots             # the message a slot was written for
        self._owner = [0] * slots                # receiver pid attached when a slot was written
        self._seq = 0                            # the last message sequence placed
        self._token = 0                          # its token
        self._unsequenced = False                # a message without a sequence came last
        self._pool = b""                         # random bytes for tokens (_random)
        self._pool_at = 0
        self._ring_records = [False] * _RECORDS  # records whose words 2-4 are not zeros
        # The message being sent: what `cancel` undoes should its send fail (sequence, token,
        # _unsequenced and stats before it, the slots it wrote), and the record `publish`
        # writes once the socket took its doorbell (a message in the ring).
        self._undo: Optional[Tuple[int, int, bool, Tuple[int, int, int], List[int]]] = None
        self._ring_record: Optional[Tuple[int, int, int, int, int]] = None
        self._fd = -1
        self._map: Optional[mmap.mmap] = None
        self._mv: Optional[memoryview] = None
        self._words: Optional[_ShmWords] = None
        self._id = _NO_SEGMENT
        self._pid = os.getpid()
        self._data = _data_offset(slots)
        if available():
            self._create()

    def _create(self) -> None:
        fd, m, seg_id = _seg.create(self.slots, self.slot_bytes)
        self._fd, self._map, self._mv, self._id = fd, m, memoryview(m), seg_id
        self._words = _ShmWords(m, self._data // 8)

    @property
    def fd(self) -> int:
        """The segment's file descriptor (-1 when there is none)."""
        return self._fd

    def attached(self) -> int:
        """The pid of the receiver attached to the segment, 0 when none is."""
        if self._words is None:
            return 0
        pid: int = self._words.load(_READER_WORD)
        return pid

    def close(self) -> None:
        """Unmap and close the segment (the kernel frees it once no receiver maps it)."""
        words, mv, m, fd = self._words, self._mv, self._map, self._fd
        self._words, self._mv, self._map, self._fd = None, None, None, -1
        self._id = _NO_SEGMENT
        if words is not None:
            words.release()
        if mv is not None:
            mv.release()
        if m is not None:
            m.close()
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:
        try:
            if self._pid == os.getpid():         # a forked child does not own the parent's fd
                self.close()
        except Exception:
            pass

    def __enter__(self) -> Sender:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- slots ---------------------------------------------------------------------------------

    def _take_back(self, i: int) -> bool:
        """FULL -> FREE for slot `i`'s current generation, unless the receiver freed it first
        (a compare-and-swap: a late transition never overwrites a newer one)."""
        assert self._words is not None
        gen = self._gens[i]
        return bool(self._words.cas(_state_word(i), gen << 2 | _FULL, gen << 2 | _FREE))

    def _free_slot(self) -> int:
        """The lowest free slot: with one or two messages in flight the same slots come round
        again and again, still in the caches of both processes (a ring walked round in order
        makes every copy, in and out, one into cold memory)."""
        assert self._words is not None
        words, gens, state = self._words, self._gens, _SLOT_STATE0
        for i in range(self.slots):
            if words.load(state + i * _WORDS_PER_SLOT) == gens[i] << 2 | _FREE:
                return i
        return -1

    def _collect(self) -> bool:
        """Take back the slots of every message the receiver says it is done with (read or
        refused): their sequence is at or before the one it published."""
        assert self._words is not None
        done = self._words.load(_DONE_WORD)
        taken = False
        for i in range(self.slots):
            if 0 < self._slot_seq[i] <= done:
                self._slot_seq[i] = 0
                taken |= self._take_back(i)
        return taken

    def _write(self, raw: memoryview, reader: int, seq: int) -> Tuple[int, int]:
        """Copy `raw` into a free slot: (index, generation), or (-1, 0) when the ring is full."""
        assert self._mv is not None and self._words is not None
        i = self._free_slot()
        if i < 0 and (self._collect() or self._reclaim_dead()):
            i = self._free_slot()
        if i < 0:
            return -1, 0
        gens, words = self._gens, self._words
        old = gens[i]
        gen = self._random() & _GEN_MASK         # random: a descriptor naming a live slot
        while gen == old:                        # proves it was the sender's (or read from
            gen = self._random() & _GEN_MASK     # the segment): nobody else can guess it
        state = _SLOT_STATE0 + i * _WORDS_PER_SLOT
        if not words.cas(state, old << 2 | _FREE, gen << 2 | _WRITING):
            return -1, 0                         # changed under us: not ours to write
        gens[i] = gen
        self._owner[i] = reader
        self._slot_seq[i] = seq
        if self._undo is not None:
            self._undo[4].append(i)
        n = raw.nbytes
        words.store(state + 1, n)
        words.store(state + 2, seq)
        start = self._data + i * self.slot_bytes
        self._mv[start:start + n] = raw
        words.store(state, gen << 2 | _FULL)     # last (release): the bytes are in place
        return i, gen

    def _reclaim_dead(self) -> bool:
        """Take back the FULL slots written for a receiver pid that no longer runs."""
        assert self._words is not None
        taken = False
        dead: Dict[int, bool] = {}
        for i in range(self.slots):
            if self._slot_seq[i]:
                owner = self._owner[i]
                if owner not in dead:
                    dead[owner] = not _alive(owner)
                if dead[owner]:
                    self._slot_seq[i] = 0
                    taken |= self._take_back(i)
        reader = self.attached()
        if taken and dead.get(reader, False):
            self._words.cas(_READER_WORD, reader, 0)     # offer the segment again
        return taken

    def _live_reader(self) -> int:
        """The attached receiver's pid, or 0 when none is attached or it no longer runs (killed:
        its unread slots are taken back, and the segment is offered again, so that a receiver
        started in its place attaches from the next message)."""
        reader = self.attached()
        if reader and not _alive(reader):
            assert self._words is not None
            self._reclaim_dead()
            self._words.cas(_READER_WORD, reader, 0)  # unless a new receiver wrote its pid
            reader = self.attached()
        return reader

    def reclaim(self) -> None:
        """Take back every slot not yet read. A message naming one is then refused as stale
        (`WireFormatError`); use after a receiver was replaced."""
        if self._words is not None:
            for i in range(self.slots):
                self._slot_seq[i] = 0
                self._take_back(i)

    # -- messages ------------------------------------------------------------------------------

    def _record(self, seq: int, token: int, where: int = 0, gen: int = 0, n: int = 0) -> None:
        """Write message `seq`'s record: its random token (a receiver that refuses the message
        can still show that the sequence is ours, and so publish it) and, for a message `send`
        put in a slot, slot + 1, generation and length. The sequence word is cleared first and
        stored last (release), so a reader that sees it before and after sees a whole record."""
        words = self._words
        assert words is not None
        k = seq % _RECORDS
        rec = _RECORD_WORD + _RECORD_WORDS * k
        words.store(rec, 0)
        words.store(rec + 1, token)
        if where or self._ring_records[k]:       # words 2-4 hold zeros already otherwise
            words.store(rec + 2, where)
            words.store(rec + 3, gen)
            words.store(rec + 4, n)
            self._ring_records[k] = bool(where)
        words.store(rec, seq)

    def _entries(self, buffers: Sequence[Any], reader: int,
                 seq: int) -> Tuple[List[bytes], List[Any], int]:
        """Put each buffer in a slot for message `seq` when it fits and one is free (`reader`:
        the receiver attached, 0 for none: every buffer a frame): ``(entries, frames, buffers
        that wanted a slot)``."""
        entries: List[bytes] = []
        frames: List[Any] = []
        took = wanted = 0
        threshold, slot_bytes = self.threshold, self.slot_bytes
        for buf in buffers:
            raw = memoryview(buf)
            if raw.format != "B" or raw.ndim != 1:
                raw = raw.cast("B")
            n = raw.nbytes
            i, gen = -1, 0
            if reader and threshold <= n <= slot_bytes:
                wanted += 1
                i, gen = self._write(raw, reader, seq)
            if i < 0:
                entries.append(_ENTRY_PACK(_NO_SLOT, 0, n))
                frames.append(buf)
            else:
                entries.append(_ENTRY_PACK(i, gen, n))
                took += 1
        stats = self.stats
        if took:
            stats["shm"] += took
        if frames:
            stats["frames"] += len(frames)
        return entries, frames, wanted

    def _descriptor(self, entries: List[bytes], seq: int, token: int) -> bytes:
        # The segment's identity travels in every descriptor: it is the offer to attach, and
        # it lets a receiver that restarted find the segment its slots live in.
        live = self._words is not None
        return _DESC_PACK(_DESC_MAGIC, self._id, self._pid if live else 0, max(self._fd, 0),
                          len(entries), 0, seq, token) + b"".join(entries)

    def _sequenced(self) -> Tuple[int, int]:
        """The next message sequence and a fresh random token for it (0 without a segment)."""
        self._seq += 1
        self._unsequenced = False
        token = self._token = self._random() if self._words is not None else 0
        return self._seq, token

    def _random(self) -> int:
        """A random 64-bit number (tokens), drawn from a pool refilled 64 numbers at a time:
        one getrandom call per 64 messages instead of one per message."""
        k = self._pool_at
        if k >= len(self._pool):
            self._pool, k = os.urandom(8 * 64), 0
        self._pool_at = k + 8
        return int.from_bytes(self._pool[k:k + 8], "little")

    def place(self, buffers: Sequence[Any], *, use_slots: bool = True) -> Tuple[bytes, List[Any]]:
        """Put each buffer (bytes-like, C-contiguous) in a slot when it fits and one is free,
        keep the others as frames: ``(descriptor, frames)``. The descriptor lists every buffer
        in order; `Receiver.take` gives them back. Every descriptor carries a message sequence
        (`dumps` leaves out the descriptor of a message that needs none)."""
        live = self._words is not None
        self._begin()
        reader = self.attached() if use_slots and live else 0
        seq, token = self._sequenced()
        entries, frames, _ = self._entries(buffers, reader, seq)
        if live:
            self._record(seq, token)
        return self._descriptor(entries, seq, token), frames

    def dumps(self, obj: Any, *, oob_threshold: int = OOB_THRESHOLD, key: Optional[bytes] = None,
              sign_buffers: bool = False) -> List[Any]:
        """The frames of `obj`. Buffers below `oob_threshold` bytes stay in the pickle; large
        ones go through slots when possible, the others as frames (sign_buffers=True sends them
        all as frames: the signature then covers their bytes).

        Until a receiver has attached: ``[signature?, descriptor, pickle, frame, ...]``, the
        descriptor offering the segment. Once one has: the same when a buffer took a slot;
        otherwise exactly what `dumps_oob` makes (``[signature?, pickle, frame, ...]``, signed
        the same way), with no descriptor and no sequence -- the receiver tells the two apart
        by the descriptor's magic (a pickle starts with ``b"\\x80\\x05"``). A buffer that
        wants a slot and finds the ring full keeps the descriptor and a sequence."""
        reader = self.attached()
        if not reader:
            parts = dumps_oob(obj, oob_threshold=oob_threshold)
            desc, frames = self.place(parts[1:], use_slots=False)     # place begins the message
            return self._framed(desc, parts[0], frames, key, sign_buffers)
        self._begin()
        if sign_buffers:
            frames = dumps_oob(obj, oob_threshold=oob_threshold)
            self.stats["frames"] += len(frames) - 1
        else:
            frames = dumps_oob(obj, oob_threshold=min(oob_threshold, self.threshold))
            if len(frames) > 1:
                # Slots are written for the next sequence, which only a message that took one
                # uses: sequences stay contiguous over the messages that carry one.
                seq = self._seq + 1
                entries, rest, wanted = self._entries(frames[1:], reader, seq)
                if wanted:
                    # A buffer took a slot, or found the ring full: then the message carries
                    # a sequence all the same, whose publication gives back the slots of
                    # messages the receiver dropped (or that reached it without descriptor).
                    seq, token = self._sequenced()
                    self._record(seq, token)
                    return self._framed(self._descriptor(entries, seq, token), frames[0], rest,
                                        key, False)
        # No slot: the message dumps_oob makes. A ring message (`message`) must not overtake
        # it on its way through the socket: the next one `message` makes carries a sequence
        # but stays on the socket.
        self._unsequenced = True
        if key is None:
            return frames
        frames.insert(0, signature(as_key(key), frames[0], frames[1:], sign_buffers))
        return frames

    @staticmethod
    def _framed(desc: bytes, head: bytes, frames: List[Any], key: Optional[bytes],
                sign_buffers: bool) -> List[Any]:
        if key is None:
            return [desc, head, *frames]
        sig = signature(as_key(key), desc + head, frames, sign_buffers, channel=True)
        return [sig, desc, head, *frames]

    def send(self, socket: Any, obj: Any, *, key: Optional[bytes] = None,
             oob_threshold: int = OOB_THRESHOLD, flags: int = 0) -> None:
        """Send `obj` for `Receiver.recv` (which also reads what `send_pyobj_oob` sends with
        this channel): the frames of `message`, through `send_frames` (a send that raises
        delivers nothing)."""
        self.send_frames(socket, self.message(obj, key=key, oob_threshold=oob_threshold), flags)

    def send_frames(self, socket: Any, frames: List[Any], flags: int = 0) -> None:
        """Send the frames of the last `message`, `dumps` or `place` on a zmq socket as one
        multipart message (``copy=False``; leading frames such as a ROUTER identity may come
        first). Exactly once or not at all: when the socket raises (``zmq.Again`` with
        ``NOBLOCK``, a closed socket, ...) the message is cancelled (`cancel`) before the error
        propagates, so a receiver never gets it, not even from the ring; once the socket took
        the frames, a message in the ring is published there (`publish`)."""
        try:
            send_frames(socket, frames, flags)
        except BaseException:
            self.cancel()
            raise
        self.publish()

    def publish(self) -> None:
        """The socket took the last `message`'s doorbell: name the message's slot in its
        record, where a spinning receiver takes it from now on (before, only the doorbell
        leads to it). `send_frames` calls it; a caller sending `message`'s frames itself calls
        it after its send. Nothing to do for a message that is not in the ring."""
        record, self._ring_record = self._ring_record, None
        self._undo = None
        if record is not None and self._words is not None:
            self._record(*record)

    def cancel(self) -> None:
        """The frames of the last `message`, `dumps` or `place` were not sent: take back the
        slots they wrote and the sequence number they took (the next message takes it again),
        so that nothing of that message is delivered or holds a slot. `send_frames` calls it
        when the socket raises (send_pyobj_oob and tokenwire.msgspec's Encoder.send with a
        channel send through it). Nothing to do once the message was published or another
        one begun."""
        undo, self._undo, self._ring_record = self._undo, None, None
        if undo is None:
            return
        seq, token, unsequenced, stats, slots = undo
        for i in slots:
            self._slot_seq[i] = 0
            self._take_back(i)
        if self._seq != seq and self._words is not None:
            self._words.store(_record_word(self._seq), 0)     # its record names it no more
        self._seq, self._token, self._unsequenced = seq, token, unsequenced
        self.stats["shm"], self.stats["frames"], self.stats["ring"] = stats

    def _begin(self) -> None:
        """A new message: what `cancel` needs to undo it. A message neither published nor
        cancelled before it counts as sent (its frames left some other way)."""
        st = self.stats
        self._undo = (self._seq, self._token, self._unsequenced,
                      (st["shm"], st["frames"], st["ring"]), [])
        self._ring_record = None

    def message(self, obj: Any, *, key: Optional[bytes] = None,
                oob_threshold: int = OOB_THRESHOLD) -> List[Any]:
        """The frames `send` puts on the socket. When a receiver has attached and every large
        buffer took a slot, the whole message (signature, descriptor, pickle) goes into a slot
        too, and the socket carries only a small doorbell; once the socket took it (`publish`)
        the message's record names that slot: a receiver spinning on the ring takes the
        message without a wake-up through the socket, a sleeping one is woken by the doorbell.
        Otherwise the frames of a message with a descriptor. Either way the socket's order is
        the messages' order: a message right after one without a sequence (`dumps` made it) is
        never put in the ring, since a receiver that spins could take it before the earlier one
        arrives; it goes through the socket, and once the receiver is done with it the ring is
        the next message's shortcut again. A receiver that no longer runs is no receiver: the
        message offers the segment again (`dumps`), for the one started in its place."""
        reader = self._live_reader()
        if not reader:
            return self.dumps(obj, oob_threshold=oob_threshold, key=key)
        self._begin()
        ring = not self._unsequenced
        parts = dumps_oob(obj, oob_threshold=min(oob_threshold, self.threshold))
        seq, token = self._sequenced()
        entries, rest, _ = self._entries(parts[1:], reader, seq)
        desc, head = self._descriptor(entries, seq, token), parts[0]
        frames = self._framed(desc, head, rest, key, False)
        i, gen, n = -1, 0, 0
        if ring and not rest:                    # no buffer left as a frame
            sig = frames[0] if key is not None else b""
            blob = b"".join((_MSG_PACK(len(sig), len(desc), len(head)), sig, desc, head))
            n = len(blob)
            if n <= self.slot_bytes:
                i, gen = self._write(memoryview(blob), reader, seq)
        if i < 0:
            self._record(seq, token)
            return frames
        # The record is written by `publish`, once the socket took the doorbell: a receiver
        # spinning on it must not take a message whose send may still fail.
        self._ring_record = (seq, token, i + 1, gen, n)
        self.stats["ring"] += 1
        return [_BELL_PACK(_BELL_MAGIC, self._id, self._pid, max(self._fd, 0), seq, i, gen, n)]


def _count(name: str, value: Any, lo: int, hi: int) -> int:
    """`value` as an int in [lo, hi], or TypeError / ValueError naming `name`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be in [{lo}, {hi}], got {value}")
    return value


def _spin(spin_us: Any) -> float:
    """`spin_us` as microseconds in [0, MAX_SPIN_US] (a minute), or TypeError / ValueError."""
    if isinstance(spin_us, bool) or not isinstance(spin_us, (int, float)):
        raise TypeError(f"spin_us must be a number of microseconds, got "
                        f"{type(spin_us).__name__}")
    if not 0 <= spin_us <= MAX_SPIN_US:          # False for NaN as well
        raise ValueError(f"spin_us must be in [0, {MAX_SPIN_US:.0f}] microseconds (a minute), "
                         f"got {spin_us}")
    return float(spin_us)


class Receiver:
    """The receiving side: attaches to the segments senders offer and copies slots out.

    Keeps at most `max_segments` segments mapped (a sender that restarted offers a new one).
    ``stats`` counts buffers taken from slots (``"shm"``) and from frames (``"frames"``), and
    whole messages `recv` took from a slot (``"ring"``).
    Used by one thread at a time.
    """

    def __init__(self, max_segments: int = 4) -> None:
        self.max_segments = _count("max_segments", max_segments, 1, 1 << 16)
        self.stats: Dict[str, int] = {"shm": 0, "frames": 0, "ring": 0}
        self._segments: OrderedDict[bytes, _Segment] = OrderedDict()
        self._refused: OrderedDict[bytes, str] = OrderedDict()
        self._last: Optional[_Segment] = None    # the segment of the last message (most recent)
        self._pid = os.getpid()

    def close(self) -> None:
        """Unmap every segment."""
        self._last = None
        while self._segments:
            self._segments.popitem()[1].close()

    def __enter__(self) -> Receiver:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _segment(self, seg_id: bytes, pid: int, fd: int) -> Optional[_Segment]:
        seg = self._last
        if seg is None or seg.id != seg_id:
            seg = self._segments.get(seg_id)
            if seg is not None:
                self._segments.move_to_end(seg_id)
                self._last = seg
        if seg is not None:
            words = seg.words
            if words.load(_READER_WORD) != self._pid:  # the sender reset it (or another
                words.store(_READER_WORD, self._pid)   # receiver took over): announce again
            return seg
        if seg_id == _NO_SEGMENT or seg_id in self._refused or not available():
            return None
        try:
            seg = _Segment(pid, fd, seg_id)
        except OSError as e:
            self._refused[seg_id] = str(e)           # not retried: another host, gone, ...
            while len(self._refused) > 64:
                self._refused.popitem(last=False)
            return None
        self._segments[seg_id] = self._last = seg
        while len(self._segments) > self.max_segments:
            old = self._segments.popitem(last=False)[1]
            if old is self._last:
                self._last = None
            old.close()
        return seg

    def loads(self, frames: Iterable[Any], *, key: Optional[bytes] = None,
              sign_buffers: bool = False, find_class: Optional[FindClass] = None) -> Any:
        """The object `Sender.dumps` framed. With `key`, the signature (over the descriptor and
        the pickle) is checked before any slot is touched. Frames are used as they are given:
        an `ImmutableBuffer` is viewed, anything else copied once
        (`tokenwire.transport.received_buffer` decides for received zmq frames)."""
        frames = list(frames)
        views = [memoryview(f) for f in frames]
        if key is not None:
            if len(views) >= 2 and views[1][:2] == _PICKLE5 and is_signature(views[0]):
                # No descriptor: a message that took no slot, signed as dumps_oob signs (a
                # channel message's signature never verifies as such a message's).
                self.stats["frames"] += len(frames) - 2
                return loads_oob(frames, key=key, sign_buffers=sign_buffers,
                                 find_class=find_class)
            if len(views) < 3 or not is_signature(views[0]):
                raise AuthenticationError(
                    f"unsigned message: {len(views)} frame(s), a signed channel message has a "
                    f"signature, a descriptor and a pickle frame")
            desc, head, first = views[1].tobytes(), views[2], 3
            expected = signature(as_key(key), desc + head.tobytes(), views[3:], sign_buffers,
                                  channel=True)
            if not hmac.compare_digest(views[0].tobytes(), expected):
                self._refuse(desc)
                raise AuthenticationError(
                    f"bad signature: the channel message ({len(views) - 1} frames after the "
                    f"signature) was not signed with this key and sign_buffers={sign_buffers}, "
                    f"or was changed in transit")
        else:
            if views and views[0][:2] == _PICKLE5:
                # No descriptor: a message that took no slot, as dumps_oob makes it. Nothing
                # here touches a segment: a slot-using message stripped of its descriptor
                # names buffers that are missing and is refused by the unpickler.
                self.stats["frames"] += len(frames) - 1
                return loads_oob(frames, find_class=find_class)
            if views and is_signature(views[0]):
                raise AuthenticationError("the message is signed: pass key= to verify and load it")
            if len(views) < 2:
                raise WireFormatError(f"a channel message has a descriptor and a pickle frame, "
                                      f"got {len(views)} frame(s)")
            desc, head, first = views[0].tobytes(), views[1], 2
        buffers = self._take(desc, frames[first:], not sign_buffers, key is not None)
        return unpickle(head, buffers, find_class)

    def recv(self, socket: Any, *, key: Optional[bytes] = None,
             find_class: Optional[FindClass] = None, spin_us: float = 0) -> Any:
        """The next object `Sender.send` sent on `socket` (zmq). Messages waiting on the
        socket come first, in order; when none is, and `spin_us` > 0, the receiver spins
        (without the GIL, one core busy) up to `spin_us` microseconds on the ring for the next
        message the sender published there, then blocks on the socket. A doorbell whose
        message was already taken from the ring is dropped."""
        import zmq
        spin_us = _spin(spin_us)
        while True:
            try:
                got = socket.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                got = None
            if got is None:
                ring = self._last
                if ring is not None:
                    where = ring.next_message(ring.published + 1, spin_us)
                    if where is not None:               # its record: the sender's
                        return self._from_slot(ring, *where, True, key, find_class)
                got = socket.recv_multipart(copy=False)
            frames = [received_buffer(f) for f in got]
            if len(frames) == 1 and memoryview(frames[0]).nbytes == _BELL.size:
                bell = bytes(frames[0])
                magic, seg_id, pid, fd, seq, i, gen, n = _BELL.unpack(bell)
                if magic == _BELL_MAGIC:
                    seg = self._segment(seg_id, pid, fd)   # attaches, as a descriptor's offer
                    if seg is None:
                        reason = self._refused.get(seg_id, "no segment named")
                        raise WireFormatError(f"a doorbell names a shared-memory segment this "
                                              f"receiver cannot map ({reason})")
                    if seq <= seg.published:
                        continue                     # taken from the ring already
                    proven = seg.next_message(seq, 0) == (seq, i, gen, n)
                    return self._from_slot(seg, seq, i, gen, n, proven, key, find_class)
            return self.loads(frames, key=key, find_class=find_class)

    def poll(self, socket: Any, spin_us: float = 0, timeout_ms: Optional[int] = None) -> bool:
        """Wait until `recv` has a message to return at once: the next one is in the ring
        (spinning up to `spin_us` for it, without the GIL), or the socket has one (blocking up
        to `timeout_ms`, None: forever). False on timeout. A doorbell on the socket counts as a
        message; `recv` may drop it and wait again."""
        spin_us = _spin(spin_us)
        if timeout_ms is not None:
            timeout_ms = _count("timeout_ms", timeout_ms, 0, 1 << 31)
        if socket.poll(0):
            return True
        ring = self._last
        if ring is not None and ring.next_message(ring.published + 1, spin_us) is not None:
            return True
        return bool(socket.poll(timeout_ms))

    def _from_slot(self, seg: _Segment, seq: int, i: int, gen: int, n: int, proven: bool,
                   key: Optional[bytes], find_class: Optional[FindClass]) -> Any:
        """The message `Sender.send` put in slot `i`: copied out (and the slot freed) first,
        then checked like a message from the socket. Read or refused, it is done with: its
        sequence is published when the segment proves it the sender's (its record named this
        slot, or the slot held its random generation), so neither the ring nor its doorbell
        offers it again."""
        # Published last, once every slot of the message has been copied out: the sender takes
        # back the slots of a published message, its buffers' slots included.
        try:
            if n < _MSG.size:
                raise WireFormatError(f"a message slot of {n} bytes, shorter than its header")
            blob = seg.take(i, gen, n, seq, raw=True)
            proven = True
            self.stats["ring"] += 1
            siglen, desclen, headlen = _MSG.unpack_from(blob, 0)
            if _MSG.size + siglen + desclen + headlen != n:
                raise WireFormatError(f"a message slot of {n} bytes holds parts of {siglen}, "
                                      f"{desclen} and {headlen} bytes")
            at = _MSG.size
            sig, desc, head = (blob[at:at + siglen], blob[at + siglen:at + siglen + desclen],
                               blob[at + siglen + desclen:])
            frames = [sig, desc, head] if siglen else [desc, head]
            if len(desc) >= _DESC.size and _DESC.unpack_from(desc, 0)[6] != seq:
                raise WireFormatError(f"the message in slot {i} is not message {seq}")
            return self.loads(frames, key=key, find_class=find_class)
        finally:
            if proven:
                seg.publish(seq)

    def _refuse(self, desc: bytes) -> None:
        """A message refused before its descriptor could be trusted (bad signature): publish
        its sequence only if the segment proves the sender wrote it -- its record, or a slot
        holding the descriptor's random generation for it -- so that a forged sequence cannot
        free the slots of messages not yet read."""
        if len(desc) < _DESC.size:
            return
        magic, seg_id, _, _, count, _, seq, token = _DESC.unpack_from(desc, 0)
        seg = self._segments.get(seg_id)         # never attach for an unverified message
        if seg is None or magic != _DESC_MAGIC or len(desc) != _DESC.size + count * _ENTRY.size:
            return
        if seg.has_record(seq, token) or any(
                i != _NO_SLOT and seg.holds(i, gen, seq)
                for i, gen, _ in _ENTRY.iter_unpack(desc[_DESC.size:])):
            seg.publish(seq)

    def take(self, desc: Any, frames: Sequence[Any], *, slots: bool = True) -> List[Any]:
        """The buffers `Sender.place` described, in order: slots copied out (each a
        `TokenVector` the caller owns, or `bytes` for a length that is not a multiple of 4) and
        freed, frames as they are. Raises
        WireFormatError for a descriptor that does not match the frames or the slots, or that
        names a slot when `slots` is false (with sign_buffers=True every byte must be signed,
        and a slot's bytes are not)."""
        return self._take(bytes(desc), frames, slots, False)

    def _take(self, desc: bytes, frames: Sequence[Any], slots: bool,
              signed: bool) -> List[Any]:
        if len(desc) < _DESC_SIZE:
            raise WireFormatError(f"the descriptor frame has {len(desc)} bytes, fewer than its "
                                  f"{_DESC_SIZE}-byte header")
        magic, seg_id, pid, fd, count, _, seq, token = _DESC_UNPACK_FROM(desc, 0)
        if magic != _DESC_MAGIC or len(desc) != _DESC_SIZE + count * _ENTRY_SIZE:
            raise WireFormatError(f"bad descriptor frame ({len(desc)} bytes, magic {magic!r}, "
                                  f"{count} entries)")
        entries = ([_ENTRY_UNPACK_FROM(desc, _DESC_SIZE)] if count == 1
                   else list(_ENTRY.iter_unpack(desc[_DESC_SIZE:])))
        seg = self._segment(seg_id, pid, fd)
        proven = False
        try:
            sizes = [memoryview(f).nbytes for f in frames]
            in_frames = [e[2] for e in entries if e[0] == _NO_SLOT]
            if in_frames != sizes:
                raise WireFormatError(f"the descriptor lists frames of {in_frames} bytes, the "
                                      f"message has {sizes}")
            if len(in_frames) == count:
                self.stats["frames"] += count
                return list(frames)
            if not slots:
                raise WireFormatError("the descriptor names shared-memory slots, whose bytes "
                                      "the signature does not cover (sign_buffers=True)")
            if seg is None:
                reason = self._refused.get(seg_id, "no segment named")
                raise WireFormatError(f"the message's ids are in a shared-memory segment this "
                                      f"receiver cannot map ({reason})")
            out: List[Any] = []
            error: Optional[WireFormatError] = None
            k = 0
            for i, gen, n in entries:
                if i == _NO_SLOT:
                    out.append(frames[k])
                    k += 1
                    continue
                try:
                    out.append(seg.take(i, gen, n, seq))    # every valid slot is freed
                    proven = True                # its random generation and sequence matched
                except WireFormatError as e:
                    error = error or e
            if error is not None:
                raise error
            self.stats["frames"] += k
            self.stats["shm"] += count - k
            return out
        finally:
            # Done with this message, read or refused: publish its sequence when it is known
            # to be the sender's (signed, or proven by the segment), so the sender takes back
            # every slot of it and of the messages before it (refused or dropped ones too).
            if seg is not None and (signed or proven or seg.has_record(seq, token)):
                seg.publish(seq)
