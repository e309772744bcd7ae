"""A same-host channel for large buffers: a ring of slots in shared memory beside a zmq socket.

A `Sender` (the proxy's) and a `Receiver` (the worker's) are passed as ``channel=`` to
`tokenwire.transport.send_pyobj_oob` and `recv_pyobj_oob`; `available` tells whether this
platform has the segments. What the channel promises: docs/transport.md, "Shared-memory
channel". The module reads in sections: the segment's layout, the channel's frames, the sending
side, the receiving side (docs/design.md, "tokenwire/shm.py")."""

from __future__ import annotations

import errno
import hmac
import mmap
import os
import stat
import struct
import sys
from collections import OrderedDict
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

try:
    import fcntl
except ImportError:                  # not POSIX (Windows): available() is False, no segment
    fcntl = None  # type: ignore[assignment]

from tokenwire._core import MAX_SPIN_US as _MAX_SPIN_US
from tokenwire._core import TokenVector, _ShmWords
from tokenwire._oob import (OOB_THRESHOLD, FindClass, as_key, is_signature, pickle_frames,
                            signature, unpickle, unpickle_frames)
from tokenwire.errors import AuthenticationError, WireFormatError
from tokenwire.transport import received_buffer, recv_frames, send_frames

__all__ = ["Receiver", "Sender", "available"]

# Sender's defaults (its docstring says why these sizes).
_SHM_THRESHOLD = 32 * 1024
_SLOTS = 16
_SLOT_BYTES = 1 << 20


# -- the segment's layout --------------------------------------------------------------------------

_MAGIC = b"TWSHM\0\0\2"
_NAME = "tokenwire-"                 # memfd name prefix; the segment id (hex) follows
# Segment header (64 bytes): magic, segment id, slot count, pad, slot size, then three words:
# the receiver's pid, the last message sequence the receiver has done with (it reads, or
# refuses, messages in order: the sender takes back every slot of a message at or before it),
# and one reserved word. Then RECORDS message records of 8 words (sequence, token, message slot
# + 1 or 0, its generation, its length; three reserved), then the slot headers.
_SEG = struct.Struct("<8s16sIIQ")
_READER_WORD = 5                     # word index of the receiver pid (u64)
_DONE_WORD = 6                       # word index of the receiver's last sequence done
_RECORDS = 64                        # message records, at word 8 + 8 * (sequence % RECORDS)
_RECORD_WORD = 8
_RECORD_WORDS = 8
_SLOT_HEADERS = 64 + 8 * _RECORD_WORDS * _RECORDS   # offset of the first slot header
_SLOT_HEADER_BYTES = 64              # one cache line per slot: state word, length, sequence
# Every word two processes share is an aligned u64 read and written through _ShmWords (C
# atomics: include/tokenwire/shmring.h); a transition the other side can race with is a
# compare-and-swap from the state the writer saw.
_WORDS_PER_SLOT = _SLOT_HEADER_BYTES // 8
_FREE, _FULL, _WRITING = 0, 1, 2
_GEN_MASK = (1 << 62) - 1
_MAX_SLOTS = 1 << 16
_MAX_SEQ = (1 << 63) - 1             # a receiver publishes no sequence above this
_MAX_SLOT_BYTES = 1 << 30


def available() -> bool:
    """Can this platform create a segment (Linux ``memfd_create`` with sealing)?"""
    return sys.platform.startswith("linux") and hasattr(os, "memfd_create") \
        and hasattr(fcntl, "F_ADD_SEALS")


def _data_offset(slots: int) -> int:
    end = _SLOT_HEADERS + slots * _SLOT_HEADER_BYTES
    return (end + mmap.PAGESIZE - 1) // mmap.PAGESIZE * mmap.PAGESIZE


_SLOT_STATE0 = _SLOT_HEADERS // 8    # word index of slot 0's state word


def _state_word(i: int) -> int:
    return _SLOT_STATE0 + i * _WORDS_PER_SLOT


def _record_word(seq: int) -> int:
    return _RECORD_WORD + _RECORD_WORDS * (seq % _RECORDS)


def _alive(pid: int) -> bool:
    if pid <= 0 or pid > 1 << 22:               # pid_max is at most 2**22 on Linux
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _create_segment(slots: int, slot_bytes: int) -> Tuple[int, mmap.mmap, bytes]:
    """A new segment of `slots` slots of `slot_bytes` bytes: ``(fd, mapping, segment id)``. A
    sealed 0o600 memfd named after its random id, its header written."""
    seg_id = os.urandom(16)
    size = _data_offset(slots) + slots * slot_bytes
    fd = os.memfd_create(_NAME + seg_id.hex(), os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.fchmod(fd, 0o600)
        os.ftruncate(fd, size)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS,
                    fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
        m = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    except BaseException:
        os.close(fd)
        raise
    _SEG.pack_into(m, 0, _MAGIC, seg_id, slots, 0, slot_bytes)
    return fd, m, seg_id


def _open_segment(pid: int, fd: int, name: str) -> int:
    """A read-write descriptor of the segment `name`, which the descriptor `fd` of process `pid`
    is said to hold. The caller checks the rest (owner, mode, seals, size, header).

    Whoever sent the descriptor chose `pid` and `fd`, and may have named any file of any
    process, the receiver's own included. So nothing here opens, duplicates or closes a
    descriptor of any file but the segment: /proc/<pid>/fd/<fd> is opened with O_PATH, which
    gives a handle on the file without opening it (no device or FIFO sees an open) and whose
    close has no effect either (POSIX locks are released only when a descriptor opened for I/O
    closes: duplicating a file the receiver holds such a lock on, then closing the duplicate,
    would drop that lock). The file is checked through that handle, which nobody else can
    change: its name (/proc/self/fd/<handle>), a regular file. Only then is that same file
    opened read-write, through the handle."""
    try:
        opath = os.open(f"/proc/{pid}/fd/{fd}", os.O_PATH | os.O_CLOEXEC)
    except OSError as e:
        raise OSError(e.errno, f"the segment {name} of pid {pid} is not reachable: "
                               f"{e.strerror}") from None
    try:
        own = f"/proc/self/fd/{opath}"
        link = os.readlink(own)
        if link not in (f"/memfd:{name} (deleted)", f"/memfd:{name}") \
                or not stat.S_ISREG(os.fstat(opath).st_mode):
            # The link's target is not named: it could be another user's path or socket.
            raise OSError(errno.ENOENT, f"/proc/{pid}/fd/{fd} is not the segment {name}")
        return os.open(own, os.O_RDWR | os.O_CLOEXEC | os.O_NONBLOCK)
    finally:
        os.close(opath)


# -- the channel's frames: the Sender writes them, the Receiver reads them -------------------------

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
# A whole message in a slot (Sender(ring=True)): the lengths of its signature,
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


# -- the channel's arguments, checked before they are used -----------------------------------------

def _count(name: str, value: Any, lo: int, hi: int) -> int:
    """`value` as an int in [lo, hi], or TypeError / ValueError naming `name`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be in [{lo}, {hi}], got {value}")
    return value


def _spin(spin_us: Any) -> float:
    """`spin_us` as microseconds in [0, _MAX_SPIN_US] (a minute), or TypeError / ValueError."""
    if isinstance(spin_us, bool) or not isinstance(spin_us, (int, float)):
        raise TypeError(f"spin_us must be a number of microseconds, got "
                        f"{type(spin_us).__name__}")
    if not 0 <= spin_us <= _MAX_SPIN_US:         # False for NaN as well
        raise ValueError(f"spin_us must be in [0, {_MAX_SPIN_US:.0f}] microseconds (a minute), "
                         f"got {spin_us}")
    return float(spin_us)


# -- the sending side ------------------------------------------------------------------------------

class Sender:
    """The sending side of the channel: pass it as ``channel=`` to
    `tokenwire.transport.send_pyobj_oob` (or `tokenwire.msgspec.Encoder`). It creates the
    segment and writes each large buffer into a free slot.

    - `slots` (default 16) slots of `slot_bytes` bytes (default 1 MiB: 262,144 ids; rounded up
      to a multiple of 64). Memory is committed only where a slot is written.
    - `threshold` (default 32 KiB, 8,192 ids): buffers of at least this many bytes (and at most
      `slot_bytes`) take a slot when one is free and a receiver has attached; smaller ones stay
      in the pickle or travel as frames. Around 8k ids an out-of-band path starts to beat
      copying the ids into the pickle (docs/transport.md, "Which path a buffer takes").
    - `ring` (default False): when every large buffer of a message took a slot, the whole
      message goes into a slot too and the socket carries only a small doorbell, for a
      `Receiver` that spins on the ring (``Receiver(spin_us=...)``; docs/transport.md,
      "Whole messages through the ring"). Without a spinning receiver it costs more than it
      saves. The ring keeps this sender's order on its socket, not another's: a socket that
      takes ring messages takes messages from this sender only.

    ``stats`` counts the buffers sent through slots (``"shm"``) and as frames (``"frames"``),
    and the whole messages put in a slot (``"ring"``). `close` (or the context manager, garbage
    collection, the process's exit) releases the segment. Like a zmq socket, a Sender is used by
    one thread at a time.

    The segment is a sealed memfd that only its owner may open. A full ring, an oversize buffer
    or an unattached receiver falls back to frames; a worker whose pid no longer runs is no
    longer attached, and the next message offers the segment again, for the worker started in
    its place. `slots`, `slot_bytes` and `threshold` must be ints in range (TypeError,
    ValueError).
    """

    def __init__(self, slots: int = _SLOTS, slot_bytes: int = _SLOT_BYTES, *,
                 threshold: int = _SHM_THRESHOLD, ring: bool = False) -> None:
        slots = _count("slots", slots, 1, _MAX_SLOTS)
        slot_bytes = _count("slot_bytes", slot_bytes, 1, _MAX_SLOT_BYTES)
        self._threshold = _count("threshold", threshold, 0, 1 << 62)
        self._slots = slots
        self._slot_bytes = (slot_bytes + 63) // 64 * 64
        self._ring = bool(ring)
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
        # The message being sent: what `_cancel` undoes should its send fail (sequence, token,
        # _unsequenced and stats before it, the slots it wrote), and the record `_publish`
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
        fd, m, seg_id = _create_segment(self._slots, self._slot_bytes)
        self._fd, self._map, self._mv, self._id = fd, m, memoryview(m), seg_id
        self._words = _ShmWords(m, self._data // 8)

    def _attached(self) -> int:
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
        for i in range(self._slots):
            if words.load(state + i * _WORDS_PER_SLOT) == gens[i] << 2 | _FREE:
                return i
        return -1

    def _collect(self) -> bool:
        """Take back the slots of every message the receiver says it is done with (read or
        refused): their sequence is at or before the one it published."""
        assert self._words is not None
        done = self._words.load(_DONE_WORD)
        taken = False
        for i in range(self._slots):
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
        start = self._data + i * self._slot_bytes
        words.write(start, raw)
        words.store(state, gen << 2 | _FULL)     # last (release): the bytes are in place
        return i, gen

    def _reclaim_dead(self) -> bool:
        """Take back the FULL slots written for a receiver pid that no longer runs."""
        assert self._words is not None
        taken = False
        dead: Dict[int, bool] = {}
        for i in range(self._slots):
            if self._slot_seq[i]:
                owner = self._owner[i]
                if owner not in dead:
                    dead[owner] = not _alive(owner)
                if dead[owner]:
                    self._slot_seq[i] = 0
                    taken |= self._take_back(i)
        reader = self._attached()
        if taken and dead.get(reader, False):
            self._words.cas(_READER_WORD, reader, 0)     # offer the segment again
        return taken

    def _live_reader(self) -> int:
        """The attached receiver's pid, or 0 when none is attached or it no longer runs (killed:
        its unread slots are taken back, and the segment is offered again, so that a receiver
        started in its place attaches from the next message)."""
        reader = self._attached()
        if reader and not _alive(reader):
            assert self._words is not None
            self._reclaim_dead()
            self._words.cas(_READER_WORD, reader, 0)  # unless a new receiver wrote its pid
            reader = self._attached()
        return reader

    def _reclaim(self) -> None:
        """Take back every slot not yet read. A message naming one is then refused as stale
        (`WireFormatError`); use after a receiver was replaced."""
        if self._words is not None:
            for i in range(self._slots):
                self._slot_seq[i] = 0
                self._take_back(i)

    # -- messages ------------------------------------------------------------------------------

    def _record(self, seq: int, token: int, where: int = 0, gen: int = 0, n: int = 0) -> None:
        """Write message `seq`'s record: its random token (a receiver that refuses the message
        can still show that the sequence is ours, and so publish it) and, for a message `_send`
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
        threshold, slot_bytes = self._threshold, self._slot_bytes
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

    def _place(self, buffers: Sequence[Any], *,
               use_slots: bool = True) -> Tuple[bytes, List[Any]]:
        """Put each buffer (bytes-like, C-contiguous) in a slot when it fits and one is free,
        keep the others as frames: ``(descriptor, frames)``. The descriptor lists every buffer
        in order; `Receiver._placed` gives them back. Every descriptor carries a message sequence
        (`_dumps` leaves out the descriptor of a message that needs none)."""
        live = self._words is not None
        self._begin()
        reader = self._attached() if use_slots and live else 0
        seq, token = self._sequenced()
        entries, frames, _ = self._entries(buffers, reader, seq)
        if live:
            self._record(seq, token)
        return self._descriptor(entries, seq, token), frames

    def _dumps(self, obj: Any, *, oob_threshold: int = OOB_THRESHOLD,
               key: Optional[bytes] = None, sign_buffers: bool = False) -> List[Any]:
        """The frames of `obj`. Buffers below `oob_threshold` bytes stay in the pickle; large
        ones go through slots when possible, the others as frames (sign_buffers=True sends them
        all as frames: the signature then covers their bytes).

        Until a receiver has attached: ``[signature?, descriptor, pickle, frame, ...]``, the
        descriptor offering the segment. Once one has: the same when a buffer took a slot;
        otherwise exactly what `dumps_oob` makes (``[signature?, pickle, frame, ...]``, signed
        the same way), with no descriptor and no sequence -- the receiver tells the two apart
        by the descriptor's magic (a pickle starts with ``b"\\x80\\x05"``). A buffer that
        wants a slot and finds the ring full keeps the descriptor and a sequence."""
        reader = self._attached()
        if not reader:
            parts = pickle_frames(obj, oob_threshold=oob_threshold)
            desc, frames = self._place(parts[1:], use_slots=False)    # it begins the message
            return self._framed(desc, parts[0], frames, key, sign_buffers)
        self._begin()
        if sign_buffers:
            frames = pickle_frames(obj, oob_threshold=oob_threshold)
            self.stats["frames"] += len(frames) - 1
        else:
            frames = pickle_frames(obj, oob_threshold=min(oob_threshold, self._threshold))
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
        # No slot: the message dumps_oob makes. A ring message (`_message`) must not overtake
        # it on its way through the socket: the next one `_message` makes carries a sequence
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

    def _frames(self, obj: Any, *, oob_threshold: int, key: Optional[bytes],
                sign_buffers: bool) -> List[Any]:
        """The frames `tokenwire.transport.send_pyobj_oob` sends with ``channel=self`` (then
        through `_send_frames`): `_message`'s with ``ring=True`` (sign_buffers=True excepted:
        a slot's bytes cannot be signed), `_dumps`'s otherwise."""
        if self._ring and not sign_buffers:
            return self._message(obj, key=key, oob_threshold=oob_threshold)
        return self._dumps(obj, oob_threshold=oob_threshold, key=key, sign_buffers=sign_buffers)

    def _send(self, socket: Any, obj: Any, *, key: Optional[bytes] = None,
              oob_threshold: int = OOB_THRESHOLD, flags: int = 0) -> None:
        """Send `obj` as ``send_pyobj_oob(socket, obj, channel=self)`` does with ``ring=True``:
        the frames of `_message`, through `_send_frames` (a send that raises delivers
        nothing)."""
        self._send_frames(socket, self._message(obj, key=key, oob_threshold=oob_threshold), flags)

    def _send_frames(self, socket: Any, frames: List[Any], flags: int = 0) -> None:
        """Send the frames of the last `_message`, `_dumps` or `_place` on a zmq socket as one
        multipart message (``copy=False``; leading frames such as a ROUTER identity may come
        first). Exactly once or not at all: when the socket raises (``zmq.Again`` with
        ``NOBLOCK``, a closed socket, ...) the message is cancelled (`_cancel`) before the error
        propagates, so a receiver never gets it, not even from the ring; once the socket took
        the frames, a message in the ring is published there (`_publish`)."""
        try:
            send_frames(socket, frames, flags)
        except BaseException:
            self._cancel()
            raise
        self._publish()

    def _publish(self) -> None:
        """The socket took the last `_message`'s doorbell: name the message's slot in its
        record, where a spinning receiver can take it from then on (until then, only the doorbell
        leads to it). `_send_frames` calls it; a caller sending `_message`'s frames itself calls
        it after its send. Nothing to do for a message that is not in the ring."""
        record, self._ring_record = self._ring_record, None
        self._undo = None
        if record is not None and self._words is not None:
            self._record(*record)

    def _cancel(self) -> None:
        """The frames of the last `_message`, `_dumps` or `_place` were not sent: take back the
        slots they wrote and the sequence number they took (the next message takes it again),
        so that nothing of that message is delivered or holds a slot. `_send_frames` calls it
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
        """A new message: what `_cancel` needs to undo it. A message neither published nor
        cancelled before it counts as sent (its frames left some other way)."""
        st = self.stats
        self._undo = (self._seq, self._token, self._unsequenced,
                      (st["shm"], st["frames"], st["ring"]), [])
        self._ring_record = None

    def _message(self, obj: Any, *, key: Optional[bytes] = None,
                 oob_threshold: int = OOB_THRESHOLD) -> List[Any]:
        """The frames of `obj` with ``ring=True``. When a receiver has attached and every large
        buffer took a slot, the whole message (signature, descriptor, pickle) goes into a slot
        too, and the socket carries only a small doorbell; once the socket took it (`_publish`)
        the message's record names that slot: a receiver spinning on the ring takes the
        message without a wake-up through the socket, a sleeping one is woken by the doorbell.
        Otherwise the frames of a message with a descriptor. Either way the socket's order is
        the messages' order: a message right after one without a sequence (`_dumps` made it) is
        never put in the ring, since a receiver that spins could take it before the earlier one
        arrives; it goes through the socket, and once the receiver is done with it the ring is
        the next message's shortcut again. A receiver that no longer runs is no receiver: the
        message offers the segment again (`_dumps`), for the one started in its place."""
        reader = self._live_reader()
        if not reader:
            return self._dumps(obj, oob_threshold=oob_threshold, key=key)
        self._begin()
        ring = not self._unsequenced
        parts = pickle_frames(obj, oob_threshold=min(oob_threshold, self._threshold))
        seq, token = self._sequenced()
        entries, rest, _ = self._entries(parts[1:], reader, seq)
        desc, head = self._descriptor(entries, seq, token), parts[0]
        frames = self._framed(desc, head, rest, key, False)
        i, gen, n = -1, 0, 0
        if ring and not rest:                    # no buffer left as a frame
            sig = frames[0] if key is not None else b""
            blob = b"".join((_MSG_PACK(len(sig), len(desc), len(head)), sig, desc, head))
            n = len(blob)
            if n <= self._slot_bytes:
                i, gen = self._write(memoryview(blob), reader, seq)
        if i < 0:
            self._record(seq, token)
            return frames
        # The record is written by `_publish`, once the socket took the doorbell: a receiver
        # spinning on it must not take a message whose send may still fail.
        self._ring_record = (seq, token, i + 1, gen, n)
        self.stats["ring"] += 1
        return [_BELL_PACK(_BELL_MAGIC, self._id, self._pid, max(self._fd, 0), seq, i, gen, n)]

# -- the receiving side: a sender's segment, checked -----------------------------------------------

class _Segment:
    """A receiver's mapping of one sender's segment; its geometry is read once, at attach."""

    def __init__(self, pid: int, fd: int, seg_id: bytes) -> None:
        name = _NAME + seg_id.hex()
        dfd = _open_segment(pid, fd, name)
        try:
            # The seals first: once SHRINK and GROW are there, the size read next cannot change
            # before the mapping is made (read before them, a sender could shrink the file in
            # between and make mmap refuse the length).
            seals = fcntl.fcntl(dfd, fcntl.F_GET_SEALS)      # EINVAL for anything but a memfd
            st = os.fstat(dfd)
            if not stat.S_ISREG(st.st_mode):
                raise OSError(errno.EPERM, f"the segment {name} is not a regular file")
            need = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW
            link = os.readlink(f"/proc/self/fd/{dfd}")
            if (st.st_uid != os.geteuid() or st.st_mode & 0o077 or seals & need != need
                    or st.st_size < 64 or not link.startswith(f"/memfd:{name}")):
                raise OSError(errno.EPERM, f"the segment {name} is not a sealed 0o600 memfd "
                                           f"owned by this user")
            m = mmap.mmap(dfd, st.st_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(dfd)
        mv = memoryview(m)
        magic, got_id, slots, _, slot_bytes = _SEG.unpack_from(mv, 0)
        ok = (magic == _MAGIC and got_id == seg_id and 1 <= slots <= _MAX_SLOTS
              and 1 <= slot_bytes <= _MAX_SLOT_BYTES
              and _data_offset(slots) + slots * slot_bytes == st.st_size)
        if not ok:
            mv.release()
            m.close()
            raise OSError(errno.EINVAL, f"the segment {name} has a bad header")
        self.map, self.mv, self.slots, self.slot_bytes = m, mv, slots, slot_bytes
        self.id = seg_id
        self.data = _data_offset(slots)
        self.words = _ShmWords(m, self.data // 8)
        self.words.store(_READER_WORD, os.getpid())
        self.published = 0                       # the last sequence this receiver published
        self.closed = False

    def close(self) -> None:
        self.closed = True                       # before the release: a wait it ends reads it
        self.words.release()
        self.mv.release()
        self.map.close()

    def publish(self, seq: int) -> None:
        """Tell the sender every message up to `seq` is done with (only ever forward, and
        never past _MAX_SEQ: a sequence a sender could reach in no lifetime is a forged one,
        and `published + 1` must stay a 64-bit word)."""
        if self.published < seq <= _MAX_SEQ:
            self.published = seq
            self.words.store(_DONE_WORD, seq)

    def has_record(self, seq: int, token: int) -> bool:
        """Did the sender write the record (seq, token)? It sets the sequence word to 0 before
        changing the token, so a sequence read the same before and after the token is the
        token's."""
        rec = _record_word(seq)
        words = self.words
        if seq == 0 or words.load(rec) != seq:
            return False
        got = words.load(rec + 1)
        return bool(words.load(rec) == seq and got == token)

    def next_message(self, seq: int, spin_us: float) -> Optional[Tuple[int, int, int, int]]:
        """(seq, slot, generation, length) of message `seq` if its record says the sender put
        it in a slot, after spinning up to `spin_us` for the record; None otherwise. Read as
        the token is (has_record): the sequence word before and after the rest."""
        rec = _record_word(seq)
        words = self.words
        try:
            if not words.wait(rec, seq, spin_us):
                return None
            where, gen, n = words.load(rec + 2), words.load(rec + 3), words.load(rec + 4)
            if words.load(rec) != seq or where == 0:
                return None
        except ValueError:
            if self.closed:
                raise ValueError("the receiver was closed while it waited on the ring") from None
            raise
        return seq, where - 1, gen, n

    def holds(self, i: int, gen: int, seq: int) -> bool:
        """Does slot `i` hold generation `gen`, FULL, written for message `seq`?"""
        if i >= self.slots:
            return False
        state, expect = _state_word(i), gen << 2 | _FULL
        words = self.words
        if words.load(state) != expect:
            return False
        got = words.load(state + 2)
        return bool(words.load(state) == expect and got == seq)

    def _release(self, state: int, expect: int) -> bool:
        """The reader's free: (gen, FULL) -> (gen, FREE) if the word never changed since the
        copy (the compare-and-swap orders the copy's loads before it)."""
        return bool(self.words.cas(state, expect, expect & ~3 | _FREE))

    def take(self, i: int, gen: int, n: int, seq: int, raw: bool = False) -> Any:
        """Copy slot `i` out (generation `gen`, `n` bytes, message `seq`) and free it: a
        TokenVector (bytes for a length not a multiple of 4, or with `raw`); WireFormatError
        when the descriptor does not match the slot."""
        if i >= self.slots:
            raise WireFormatError(f"shared-memory descriptor names slot {i}, the ring has "
                                  f"{self.slots}")
        if n > self.slot_bytes:
            raise WireFormatError(f"shared-memory descriptor says {n} bytes, a slot holds "
                                  f"{self.slot_bytes}")
        words, state = self.words, _state_word(i)
        expect = gen << 2 | _FULL
        word = words.load(state)
        if word != expect:
            raise WireFormatError(
                f"shared-memory slot {i} does not hold generation {gen} (it holds generation "
                f"{word >> 2}, state {word & 3}): a stale, replayed or tampered descriptor")
        start = self.data + i * self.slot_bytes
        view = self.mv[start:start + n]
        try:
            # The copy first, into storage nobody else can write; the checks after it.
            data: Any = TokenVector.frombuffer(view) if n % 4 == 0 and not raw else bytes(view)
        finally:
            view.release()
        length, written_for = words.load(state + 1), words.load(state + 2)
        if length != n or written_for != seq:
            # Not freed: the slot may hold another message's bytes (a forged descriptor that
            # guessed nothing but read a live generation); it is taken back by sequence.
            raise WireFormatError(
                f"shared-memory slot {i} holds {length} bytes of message {written_for}, not the "
                f"descriptor's {n} bytes of message {seq}")
        # One compare-and-swap checks that nothing rewrote the slot during the copy and frees
        # it: generations never repeat, so an unchanged word means unchanged bytes, and a slot
        # the sender took back and rewrote meanwhile keeps its new message.
        if not self._release(state, expect):
            raise WireFormatError(f"shared-memory slot {i} was rewritten while it was read")
        return data


class Receiver:
    """The receiving side of the channel: pass it as ``channel=`` to
    `tokenwire.transport.recv_pyobj_oob` (or `tokenwire.msgspec.Decoder`). It attaches to the
    segments senders offer and copies slots out.

    - `max_segments` (default 4): segments kept mapped, the least recently used unmapped first
      (a sender that restarted offers a new one).
    - `spin_us` (default 0): when no message waits on the socket, spin up to this many
      microseconds on the ring (without the GIL, one core busy) for the next message a
      ``Sender(ring=True)`` put there, before blocking on the socket. At most 60,000,000 (a
      minute); a number (TypeError) in range (ValueError), NaN and infinity refused.

    ``stats`` counts buffers taken from slots (``"shm"``) and from frames (``"frames"``), and
    whole messages taken from a slot (``"ring"``). `close` (or the context manager) unmaps every
    segment. Used by one thread at a time.

    Before it maps a segment it checks its owner, mode, seals and size; it copies each slot
    into a TokenVector it owns before anything is checked, and frees the slot at once. Messages
    must be loaded in the order they arrive.
    """

    def __init__(self, max_segments: int = 4, *, spin_us: float = 0) -> None:
        self._max_segments = _count("max_segments", max_segments, 1, 1 << 16)
        self._spin_us = _spin(spin_us)
        self._rung = False                       # a message came through the ring
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
        while len(self._segments) > self._max_segments:
            old = self._segments.popitem(last=False)[1]
            if old is self._last:
                self._last = None
            old.close()
        return seg

    def _loads(self, frames: Iterable[Any], *, key: Optional[bytes] = None,
               sign_buffers: bool = False, find_class: Optional[FindClass] = None) -> Any:
        """The object `Sender._dumps` or `Sender._message` framed (a doorbell excepted). With
        `key`, the signature (over the descriptor and the pickle) is checked before any slot is
        touched. Frames are used as they are given: an `ImmutableBuffer` is viewed, anything
        else copied once (`tokenwire.transport.received_buffer` decides for received zmq
        frames)."""
        frames = list(frames)
        views = [memoryview(f) for f in frames]
        if key is not None:
            if len(views) >= 2 and views[1][:2] == _PICKLE5 and is_signature(views[0]):
                # No descriptor: a message that took no slot, signed as dumps_oob signs (a
                # channel message's signature never verifies as such a message's).
                self.stats["frames"] += len(frames) - 2
                return unpickle_frames(frames, key=key, sign_buffers=sign_buffers,
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
                return unpickle_frames(frames, find_class=find_class)
            if views and is_signature(views[0]):
                raise AuthenticationError("the message is signed: pass key= to verify and load it")
            if len(views) < 2:
                raise WireFormatError(f"a channel message has a descriptor and a pickle frame, "
                                      f"got {len(views)} frame(s)")
            desc, head, first = views[0].tobytes(), views[1], 2
        buffers = self._take(desc, frames[first:], not sign_buffers, key is not None)
        return unpickle(head, buffers, find_class)

    def _recv(self, socket: Any, *, flags: int = 0, key: Optional[bytes] = None,
              sign_buffers: bool = False, find_class: Optional[FindClass] = None,
              spin_us: Optional[float] = None) -> Any:
        """What `tokenwire.transport.recv_pyobj_oob` returns with ``channel=self`` and no
        leading frames: the next object sent on `socket` (zmq). Messages waiting on the socket
        come first, in order; once a message came through the ring and none is waiting, the
        receiver takes the next one from the ring when its record names a slot, spinning up to
        `spin_us` (None: the receiver's own) without the GIL for it, then blocks on the socket.
        A doorbell whose message was already taken from the ring is dropped."""
        spin = self._spin_us if spin_us is None else _spin(spin_us)
        head = 3 if key is not None else 2       # [signature?, descriptor, pickle] as bytes
        while True:
            ring = self._last
            if ring is not None and (spin or self._rung):
                import zmq
                try:
                    got = recv_frames(socket, flags | zmq.NOBLOCK, head)
                except zmq.Again:
                    where = ring.next_message(ring.published + 1, spin)
                    if where is not None:               # its record: the sender's
                        return self._from_slot(ring, *where, True, key, sign_buffers,
                                               find_class)
                    got = recv_frames(socket, flags, head)
            else:
                got = recv_frames(socket, flags, head)
            frames = [received_buffer(f) for f in got]
            bell = self._bell(frames)
            if bell is None:
                return self._loads(frames, key=key, sign_buffers=sign_buffers,
                                   find_class=find_class)
            seg, seq, i, gen, n = bell
            if seq <= seg.published:
                continue                                # taken from the ring already
            proven = seg.next_message(seq, 0) == (seq, i, gen, n)
            return self._from_slot(seg, seq, i, gen, n, proven, key, sign_buffers, find_class)

    def _received(self, frames: List[Any], *, key: Optional[bytes] = None,
                  sign_buffers: bool = False, find_class: Optional[FindClass] = None) -> Any:
        """The object of a message received on the socket (`frames` as `received_buffer`
        hands them over): what `recv_pyobj_oob` loads with ``channel=self`` and leading frames
        (which never spins: the ring carries no ROUTER identity). A doorbell's message is taken
        from its slot; a doorbell of a message this receiver is done with is refused."""
        bell = self._bell(frames)
        if bell is None:
            return self._loads(frames, key=key, sign_buffers=sign_buffers, find_class=find_class)
        seg, seq, i, gen, n = bell
        if seq <= seg.published:
            raise WireFormatError(f"a doorbell of message {seq}, which this receiver is done "
                                  f"with (message {seg.published} and those before it)")
        proven = seg.next_message(seq, 0) == (seq, i, gen, n)
        return self._from_slot(seg, seq, i, gen, n, proven, key, sign_buffers, find_class)

    def _bell(self, frames: List[Any]) -> Optional[Tuple[_Segment, int, int, int, int]]:
        """``(segment, sequence, slot, generation, length)`` when `frames` is a doorbell (its
        segment attached, as a descriptor's offer is), None for any other message."""
        if len(frames) != 1 or memoryview(frames[0]).nbytes != _BELL.size:
            return None
        magic, seg_id, pid, fd, seq, i, gen, n = _BELL.unpack(bytes(frames[0]))
        if magic != _BELL_MAGIC:
            return None
        seg = self._segment(seg_id, pid, fd)
        if seg is None:
            reason = self._refused.get(seg_id, "no segment named")
            raise WireFormatError(f"a doorbell names a shared-memory segment this receiver "
                                  f"cannot map ({reason})")
        return seg, seq, i, gen, n

    def _poll(self, socket: Any, spin_us: Optional[float] = None,
              timeout_ms: Optional[int] = None) -> bool:
        """Wait until `_recv` has a message to return at once: the next one is in the ring
        (spinning up to `spin_us` for it, None: the receiver's own, without the GIL), or the
        socket has one (blocking up to `timeout_ms`, None: forever). False on timeout. A
        doorbell on the socket counts as a message; `_recv` may drop it and wait again."""
        spin = self._spin_us if spin_us is None else _spin(spin_us)
        if timeout_ms is not None:
            timeout_ms = _count("timeout_ms", timeout_ms, 0, 1 << 31)
        if socket.poll(0):
            return True
        ring = self._last
        if ring is not None and ring.next_message(ring.published + 1, spin) is not None:
            return True
        return bool(socket.poll(timeout_ms))

    def _from_slot(self, seg: _Segment, seq: int, i: int, gen: int, n: int, proven: bool,
                   key: Optional[bytes], sign_buffers: bool,
                   find_class: Optional[FindClass]) -> Any:
        """The message `Sender._message` put in slot `i`: copied out (and the slot freed) first,
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
            self._rung = True
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
            return self._loads(frames, key=key, sign_buffers=sign_buffers,
                               find_class=find_class)
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

    def _placed(self, desc: Any, frames: Sequence[Any], *, slots: bool = True) -> List[Any]:
        """The buffers `Sender._place` described, in order (tokenwire.msgspec's Decoder with a
        channel): slots copied out (each a `TokenVector` the caller owns, or `bytes` for a
        length that is not a multiple of 4) and freed, frames as they are. Raises
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
