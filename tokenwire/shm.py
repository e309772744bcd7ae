"""A same-host channel for large buffers: a ring of slots in shared memory beside a zmq socket.

    sender = tokenwire.shm.Sender()                       # proxy: owns the segment
    send_pyobj_oob(sock, request, key=KEY, channel=sender)

    receiver = tokenwire.shm.Receiver()                   # worker
    request = recv_pyobj_oob(sock, key=KEY, channel=receiver)

The zmq message still carries the pickle, plus one small *descriptor* frame (covered by the
signature with `key=`); each large buffer (the int32 ids) travels through a slot of the ring
instead of a frame: one memcpy into the slot on the sending side, one memcpy out of it on the
receiving side, and no kernel copy of the ids through the socket.

How it is kept safe (docs/transport.md, "Shared-memory channel", says what it promises):

* The segment is a sealed ``memfd`` (Linux): it has no name in ``/dev/shm`` and the kernel frees
  it when the last process holding it exits, so a process killed with ``kill -9`` leaks nothing.
  It is mode 0o600 and sealed against shrinking or growing, so a peer cannot truncate it under
  a reader (which would crash the reader with SIGBUS). A receiver opens it through
  ``/proc/<sender pid>/fd/<fd>`` (same user, same host, same pid namespace) and checks the link
  name, owner, mode, seals, size and a random 16-byte segment id before mapping it.
* Each slot has a header: a state word ``generation << 2 | state`` and a length. The descriptor
  names slot index, generation and length for each buffer. The receiver checks the index against
  the ring, the length against the slot size, the state word against ``(generation, FULL)``,
  copies the bytes into storage it owns (a `TokenVector`), reads the state word again (a slot
  rewritten meanwhile is refused), and only then frees the slot and hands the copy on. Nothing
  is ever a view of memory another process can still write, and nothing read from the segment
  decides how much is read.
* The sender writes only FREE slots, with generations it keeps in its own memory. A full ring,
  a buffer larger than a slot, ``sign_buffers=True`` (the signature would have to cover the
  slots' bytes) or a receiver that has not attached to the segment (another host, another pid
  namespace, a peer that does not pass a channel) all fall back to out-of-band frames, per
  buffer, without the caller noticing. Until a receiver has attached, every message offers the
  segment in its descriptor; a receiver that can open it attaches, and writes its pid in the
  segment header.
* Slots left FULL by a receiver that died (``kill -9``) are taken back when the ring is full and
  the pid that was attached when they were written no longer runs; `Sender.reclaim` takes back
  every unread slot at once (a message naming one is then refused as stale).

One sender and one receiver per channel: a ring serves one zmq pair (PUSH → PULL to one worker).
Linux only; elsewhere `Sender` never offers a segment and every buffer travels as a frame.
"""

from __future__ import annotations

import errno
import fcntl
import hmac
import mmap
import os
import stat
import struct
import sys
from collections import OrderedDict
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from tokenwire._core import TokenVector
from tokenwire.errors import AuthenticationError, WireFormatError
from tokenwire.transport import (OOB_THRESHOLD, FindClass, _as_key, _is_signature, _signature,
                                 _unpickle, dumps_oob)

__all__ = ["SHM_THRESHOLD", "SLOT_BYTES", "SLOTS", "Receiver", "Sender", "available"]

#: Buffers at least this many bytes go through a slot once a receiver has attached (smaller ones
#: stay in-band, or travel as frames from the transport's ``oob_threshold`` up). Around 8k ids
#: an out-of-band path starts to beat copying the ids into the pickle (docs/transport.md).
SHM_THRESHOLD = 32 * 1024
#: Default ring: SLOTS slots of SLOT_BYTES bytes each (memory is committed only when touched).
SLOTS = 16
SLOT_BYTES = 1 << 20

_MAGIC = b"TWSHM\0\0\1"
_NAME = "tokenwire-"                 # memfd name prefix; the segment id (hex) follows
# Segment header: magic, segment id, slot count, pad, slot size, receiver pid.
_SEG = struct.Struct("<8s16sIIQQ")
_READER_PID = 40                     # offset of the receiver pid (u64) in the segment header
_SLOT_HEADERS = 64                   # offset of the first slot header
_SLOT_HEADER_BYTES = 64              # one cache line per slot: state word, length
# State words, lengths and the receiver pid are read and written through a native ``Q`` view of
# the header pages: one aligned 8-byte memcpy each, a single load or store on x86-64 and
# aarch64 (``struct``'s "<Q" would store byte by byte). The protocol does not depend on it: see
# _Segment.take.
_WORDS_PER_SLOT = _SLOT_HEADER_BYTES // 8
_READER_WORD = _READER_PID // 8
_FREE, _FULL, _WRITING = 0, 1, 2
_MAX_SLOTS = 1 << 16
_MAX_SLOT_BYTES = 1 << 30

# Descriptor frame: magic, segment id, sender pid, sender fd, entry count; then per buffer in
# the pickle's order: slot index (NO_SLOT: the next out-of-band frame), generation, length.
_DESC = struct.Struct("<4s16sIII")
_DESC_MAGIC = b"TWD1"
_ENTRY = struct.Struct("<QQQ")
_NO_SLOT = (1 << 64) - 1
_NO_SEGMENT = bytes(16)


def available() -> bool:
    """Can this platform create a segment (Linux ``memfd_create`` with sealing)?"""
    return sys.platform.startswith("linux") and hasattr(os, "memfd_create") \
        and hasattr(fcntl, "F_ADD_SEALS")


def _data_offset(slots: int) -> int:
    end = _SLOT_HEADERS + slots * _SLOT_HEADER_BYTES
    return (end + mmap.PAGESIZE - 1) // mmap.PAGESIZE * mmap.PAGESIZE


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


class Sender:
    """The sending side: creates the segment and writes large buffers into free slots.

    `slots` slots of `slot_bytes` bytes; buffers of at least `threshold` bytes (and at most
    `slot_bytes`) use a slot when one is free and a receiver has attached. ``stats`` counts the
    buffers sent through slots (``"shm"``) and as frames (``"frames"``). `close` (or garbage
    collection, or the process's exit) releases the segment. Like a zmq socket, a Sender is
    used by one thread at a time.
    """

    def __init__(self, slots: int = SLOTS, slot_bytes: int = SLOT_BYTES, *,
                 threshold: int = SHM_THRESHOLD) -> None:
        if not 1 <= slots <= _MAX_SLOTS:
            raise ValueError(f"slots must be in [1, {_MAX_SLOTS}], got {slots}")
        if not 1 <= slot_bytes <= _MAX_SLOT_BYTES:
            raise ValueError(f"slot_bytes must be in [1, {_MAX_SLOT_BYTES}], got {slot_bytes}")
        self.threshold = threshold
        self.slots = slots
        self.slot_bytes = (slot_bytes + 63) // 64 * 64
        self.stats: Dict[str, int] = {"shm": 0, "frames": 0}
        self._gens = [0] * slots                 # the generations are ours, not the segment's
        self._owner = [0] * slots                # receiver pid attached when a slot was written
        self._cursor = 0
        self._fd = -1
        self._map: Optional[mmap.mmap] = None
        self._mv: Optional[memoryview] = None
        self._words: Optional[memoryview] = None
        self._id = _NO_SEGMENT
        self._pid = os.getpid()
        self._data = _data_offset(slots)
        if available():
            self._create()

    def _create(self) -> None:
        seg_id = os.urandom(16)
        size = self._data + self.slots * self.slot_bytes
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
        _SEG.pack_into(m, 0, _MAGIC, seg_id, self.slots, 0, self.slot_bytes, 0)
        mv = memoryview(m)
        self._fd, self._map, self._mv, self._id = fd, m, mv, seg_id
        self._words = mv[:self._data].cast("Q")

    @property
    def fd(self) -> int:
        """The segment's file descriptor (-1 when there is none)."""
        return self._fd

    def attached(self) -> int:
        """The pid of the receiver attached to the segment, 0 when none is."""
        if self._words is None:
            return 0
        pid: int = self._words[_READER_WORD]
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

    def _state(self, i: int) -> int:
        assert self._words is not None
        word: int = self._words[_SLOT_HEADERS // 8 + i * _WORDS_PER_SLOT]
        return word

    def _set_state(self, i: int, gen: int, state: int) -> None:
        assert self._words is not None
        self._words[_SLOT_HEADERS // 8 + i * _WORDS_PER_SLOT] = gen << 2 | state

    def _free_slot(self) -> int:
        n = self.slots
        for k in range(n):
            i = (self._cursor + k) % n
            if self._state(i) & 3 == _FREE:
                return i
        return -1

    def _write(self, raw: memoryview, reader: int) -> Tuple[int, int]:
        """Copy `raw` into a free slot: (index, generation), or (-1, 0) when the ring is full."""
        i = self._free_slot()
        if i < 0 and self._reclaim_dead():
            i = self._free_slot()
        if i < 0:
            return -1, 0
        assert self._mv is not None and self._words is not None
        gen = self._gens[i] + 1
        self._gens[i] = gen
        self._owner[i] = reader
        self._set_state(i, gen, _WRITING)
        n = raw.nbytes
        self._words[_SLOT_HEADERS // 8 + i * _WORDS_PER_SLOT + 1] = n
        start = self._data + i * self.slot_bytes
        self._mv[start:start + n] = raw
        self._set_state(i, gen, _FULL)           # last: a receiver checks it before and after
        self._cursor = (i + 1) % self.slots
        return i, gen

    def _reclaim_dead(self) -> bool:
        """Take back the FULL slots written for a receiver pid that no longer runs."""
        taken = False
        dead: Dict[int, bool] = {}
        for i in range(self.slots):
            if self._state(i) & 3 != _FREE:
                owner = self._owner[i]
                if owner not in dead:
                    dead[owner] = not _alive(owner)
                if dead[owner]:
                    self._set_state(i, self._gens[i], _FREE)
                    taken = True
        if taken and dead.get(self.attached(), False):
            assert self._words is not None
            self._words[_READER_WORD] = 0            # offer the segment again
        return taken

    def reclaim(self) -> None:
        """Take back every slot not yet read. A message naming one is then refused as stale
        (`WireFormatError`); use after a receiver was replaced."""
        if self._words is not None:
            for i in range(self.slots):
                self._set_state(i, self._gens[i], _FREE)

    # -- messages ------------------------------------------------------------------------------

    def place(self, buffers: Sequence[Any], *, use_slots: bool = True) -> Tuple[bytes, List[Any]]:
        """Put each buffer (bytes-like, C-contiguous) in a slot when it fits and one is free,
        keep the others as frames: ``(descriptor, frames)``. The descriptor lists every buffer
        in order; `Receiver.take` gives them back."""
        reader = self.attached() if use_slots else 0
        entries: List[bytes] = []
        frames: List[Any] = []
        for buf in buffers:
            raw = memoryview(buf)
            if raw.format != "B" or raw.ndim != 1:
                raw = raw.cast("B")
            n = raw.nbytes
            i, gen = -1, 0
            if reader and self.threshold <= n <= self.slot_bytes:
                i, gen = self._write(raw, reader)
            if i < 0:
                entries.append(_ENTRY.pack(_NO_SLOT, 0, n))
                frames.append(buf)
                self.stats["frames"] += 1
            else:
                entries.append(_ENTRY.pack(i, gen, n))
                self.stats["shm"] += 1
        # The segment's identity travels in every message: it is the offer to attach, and it
        # lets a receiver that restarted find the segment its slots live in.
        live = self._fd >= 0
        desc = _DESC.pack(_DESC_MAGIC, self._id if live else _NO_SEGMENT,
                          self._pid if live else 0, max(self._fd, 0), len(entries))
        return desc + b"".join(entries), frames


    def dumps(self, obj: Any, *, oob_threshold: int = OOB_THRESHOLD, key: Optional[bytes] = None,
              sign_buffers: bool = False) -> List[Any]:
        """The frames of `obj`: ``[signature?, descriptor, pickle, frame, ...]``. Buffers below
        `oob_threshold` bytes stay in the pickle; large ones go through slots when possible,
        the others as frames (sign_buffers=True sends them all as frames: the signature then
        covers their bytes)."""
        reader = self.attached() if not sign_buffers else 0
        if reader:
            oob_threshold = min(oob_threshold, self.threshold)
        parts = dumps_oob(obj, oob_threshold=oob_threshold)
        desc, frames = self.place(parts[1:], use_slots=bool(reader))
        head = parts[0]
        if key is None:
            return [desc, head, *frames]
        sig = _signature(_as_key(key), desc + head, frames, sign_buffers, channel=True)
        return [sig, desc, head, *frames]


class _Segment:
    """A receiver's mapping of one sender's segment; its geometry is read once, at attach."""

    def __init__(self, pid: int, fd: int, seg_id: bytes) -> None:
        name = _NAME + seg_id.hex()
        path = f"/proc/{pid}/fd/{fd}"
        try:
            link = os.readlink(path)
        except OSError as e:
            raise OSError(e.errno, f"the segment {name} of pid {pid} is not reachable: "
                                   f"{e.strerror}") from None
        if link not in (f"/memfd:{name} (deleted)", f"/memfd:{name}"):
            raise OSError(errno.ENOENT, f"{path} is not the segment {name} (it is {link!r})")
        # O_NONBLOCK: should the fd number name a FIFO by now, opening it must not hang.
        dfd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NONBLOCK)
        try:
            st = os.fstat(dfd)
            seals = fcntl.fcntl(dfd, fcntl.F_GET_SEALS)
            need = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW
            if (not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid()
                    or st.st_mode & 0o077 or seals & need != need
                    or st.st_size < _SEG.size):
                raise OSError(errno.EPERM, f"the segment {name} is not a sealed 0o600 memfd "
                                           f"owned by this user")
            m = mmap.mmap(dfd, st.st_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(dfd)
        mv = memoryview(m)
        magic, got_id, slots, _, slot_bytes, _ = _SEG.unpack_from(mv, 0)
        ok = (magic == _MAGIC and got_id == seg_id and 1 <= slots <= _MAX_SLOTS
              and 1 <= slot_bytes <= _MAX_SLOT_BYTES
              and _data_offset(slots) + slots * slot_bytes == st.st_size)
        if not ok:
            mv.release()
            m.close()
            raise OSError(errno.EINVAL, f"the segment {name} has a bad header")
        self.map, self.mv, self.slots, self.slot_bytes = m, mv, slots, slot_bytes
        self.data = _data_offset(slots)
        self.words = mv[:self.data].cast("Q")
        self.words[_READER_WORD] = os.getpid()

    def close(self) -> None:
        self.words.release()
        self.mv.release()
        self.map.close()

    def take(self, i: int, gen: int, n: int) -> Any:
        """Copy slot `i` out (generation `gen`, `n` bytes) and free it; WireFormatError when the
        descriptor does not match the slot."""
        if i >= self.slots:
            raise WireFormatError(f"shared-memory descriptor names slot {i}, the ring has "
                                  f"{self.slots}")
        if n > self.slot_bytes:
            raise WireFormatError(f"shared-memory descriptor says {n} bytes, a slot holds "
                                  f"{self.slot_bytes}")
        words, state = self.words, _SLOT_HEADERS // 8 + i * _WORDS_PER_SLOT
        expect = gen << 2 | _FULL
        word = words[state]
        if word != expect:
            raise WireFormatError(
                f"shared-memory slot {i} does not hold generation {gen} (it holds generation "
                f"{word >> 2}, state {word & 3}): a stale, replayed or tampered descriptor")
        start = self.data + i * self.slot_bytes
        view = self.mv[start:start + n]
        try:
            # The copy first, into storage nobody else can write; the checks after it.
            data: Any = TokenVector.frombuffer(view) if n % 4 == 0 else bytes(view)
        finally:
            view.release()
        # Read again after the copy: a slot rewritten meanwhile (its writer stores WRITING before
        # touching the bytes, FULL after) has another state word. A torn read of a word being
        # stored mixes old and new bytes: it equals `expect` only if every byte that changes is
        # still old, which is a read from before the store.
        length = words[state + 1]
        if words[state] != expect or length != n:
            raise WireFormatError(f"shared-memory slot {i} was rewritten while it was read "
                                  f"(or its length is not the descriptor's {n} bytes)")
        words[state] = gen << 2 | _FREE
        return data


class Receiver:
    """The receiving side: attaches to the segments senders offer and copies slots out.

    Keeps at most `max_segments` segments mapped (a sender that restarted offers a new one).
    ``stats`` counts buffers taken from slots (``"shm"``) and from frames (``"frames"``).
    Used by one thread at a time.
    """

    def __init__(self, max_segments: int = 4) -> None:
        self.max_segments = max_segments
        self.stats: Dict[str, int] = {"shm": 0, "frames": 0}
        self._segments: OrderedDict[bytes, _Segment] = OrderedDict()
        self._refused: OrderedDict[bytes, str] = OrderedDict()
        self._pid = os.getpid()

    def close(self) -> None:
        """Unmap every segment."""
        while self._segments:
            self._segments.popitem()[1].close()

    def __enter__(self) -> Receiver:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _segment(self, seg_id: bytes, pid: int, fd: int) -> Optional[_Segment]:
        seg = self._segments.get(seg_id)
        if seg is not None:
            self._segments.move_to_end(seg_id)
            if seg.words[_READER_WORD] != self._pid:      # the sender reset it (or another
                seg.words[_READER_WORD] = self._pid       # receiver took over): announce again
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
        self._segments[seg_id] = seg
        while len(self._segments) > self.max_segments:
            self._segments.popitem(last=False)[1].close()
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
            if len(views) < 3 or not _is_signature(views[0]):
                raise AuthenticationError(
                    f"unsigned message: {len(views)} frame(s), a signed channel message has a "
                    f"signature, a descriptor and a pickle frame")
            desc, head, first = views[1].tobytes(), views[2], 3
            expected = _signature(_as_key(key), desc + head.tobytes(), views[3:], sign_buffers,
                                  channel=True)
            if not hmac.compare_digest(views[0].tobytes(), expected):
                raise AuthenticationError(
                    f"bad signature: the channel message ({len(views) - 1} frames after the "
                    f"signature) was not signed with this key and sign_buffers={sign_buffers}, "
                    f"or was changed in transit")
        else:
            if views and _is_signature(views[0]):
                raise AuthenticationError("the message is signed: pass key= to verify and load it")
            if len(views) < 2:
                raise WireFormatError(f"a channel message has a descriptor and a pickle frame, "
                                      f"got {len(views)} frame(s)")
            desc, head, first = views[0].tobytes(), views[1], 2
        buffers = self.take(desc, frames[first:], slots=not sign_buffers)
        return _unpickle(head, buffers, find_class)

    def take(self, desc: Any, frames: Sequence[Any], *, slots: bool = True) -> List[Any]:
        """The buffers `Sender.place` described, in order: slots copied out (each a
        `TokenVector` the caller owns, or `bytes` for a length that is not a multiple of 4) and
        freed, frames as they are. Raises
        WireFormatError for a descriptor that does not match the frames or the slots, or that
        names a slot when `slots` is false (with sign_buffers=True every byte must be signed,
        and a slot's bytes are not)."""
        desc = bytes(desc)
        views = [memoryview(f) for f in frames]
        if len(desc) < _DESC.size:
            raise WireFormatError(f"the descriptor frame has {len(desc)} bytes, fewer than its "
                                  f"{_DESC.size}-byte header")
        magic, seg_id, pid, fd, count = _DESC.unpack_from(desc, 0)
        if magic != _DESC_MAGIC or len(desc) != _DESC.size + count * _ENTRY.size:
            raise WireFormatError(f"bad descriptor frame ({len(desc)} bytes, magic {magic!r}, "
                                  f"{count} entries)")
        entries = [_ENTRY.unpack_from(desc, _DESC.size + k * _ENTRY.size) for k in range(count)]
        in_frames = [e[2] for e in entries if e[0] == _NO_SLOT]
        if in_frames != [v.nbytes for v in views]:
            raise WireFormatError(f"the descriptor lists frames of {in_frames} bytes, the "
                                  f"message has {[v.nbytes for v in views]}")
        if not slots and len(in_frames) != count:
            raise WireFormatError("the descriptor names shared-memory slots, whose bytes the "
                                  "signature does not cover (sign_buffers=True)")
        seg = self._segment(seg_id, pid, fd)
        if seg is None and len(in_frames) != count:
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
                self.stats["frames"] += 1
                continue
            assert seg is not None
            try:
                out.append(seg.take(i, gen, n))      # every valid slot is freed, even on error
                self.stats["shm"] += 1
            except WireFormatError as e:
                error = error or e
        if error is not None:
            raise error
        return out
