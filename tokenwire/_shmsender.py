"""The shared-memory channel's sending side (tokenwire.shm.Sender): creates the segment, writes
large buffers into free slots, and sends each message exactly once or not at all. What it
promises: docs/transport.md, "Shared-memory channel"."""

from __future__ import annotations

import mmap
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

from tokenwire import _shmsegment as _seg
from tokenwire._core import _ShmWords
from tokenwire._oob import OOB_THRESHOLD, as_key, dumps_oob, signature
from tokenwire._shmsegment import (_BELL_MAGIC, _BELL_PACK, _DESC_MAGIC, _DESC_PACK, _DONE_WORD,
                                   _ENTRY_PACK, _FREE, _FULL, _GEN_MASK, _MAX_SLOT_BYTES,
                                   _MAX_SLOTS, _MSG_PACK, _NO_SEGMENT, _NO_SLOT, _READER_WORD,
                                   _RECORD_WORD, _RECORD_WORDS, _RECORDS, _SLOT_STATE0,
                                   _WORDS_PER_SLOT, _WRITING, _alive, _count, _data_offset,
                                   _record_word, _state_word, available)
from tokenwire.transport import send_frames

#: Buffers at least this many bytes go through a slot once a receiver has attached (smaller ones
#: stay in-band, or travel as frames from the transport's ``oob_threshold`` up). Around 8k ids
#: an out-of-band path starts to beat copying the ids into the pickle (docs/transport.md).
SHM_THRESHOLD = 32 * 1024
#: Default ring: SLOTS slots of SLOT_BYTES bytes each (memory is committed only when touched).
SLOTS = 16
#: The default size of a slot: 1 MiB (262,144 ids).
SLOT_BYTES = 1 << 20


class Sender:
    """The sending side: creates the segment and writes large buffers into free slots.

    `slots` slots of `slot_bytes` bytes; buffers of at least `threshold` bytes (and at most
    `slot_bytes`) use a slot when one is free and a receiver has attached. ``stats`` counts the
    buffers sent through slots (``"shm"``) and as frames (``"frames"``), and the whole messages
    `send` put in a slot (``"ring"``). `close` (or garbage
    collection, or the process's exit) releases the segment. Like a zmq socket, a Sender is
    used by one thread at a time.

    The segment is a sealed memfd that only its owner may open. A full ring, an oversize buffer
    or an unattached receiver falls back to frames; a worker whose pid no longer runs is no
    longer attached, and `send` offers the segment again, for the worker started in its place.
    `slots`, `slot_bytes` and `threshold` must be ints in range (TypeError, ValueError).
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
        if self._words is None:
            raise ValueError("the sender was closed during send")
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
        words.write(start, raw)
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
        record, where a spinning receiver can take it from then on (until then, only the doorbell
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
