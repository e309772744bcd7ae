"""The shared-memory channel's segment: its layout, creating one, and a receiver's checked view of
a sender's (tokenwire.shm builds the channel on it; docs/transport.md says what it promises).
See docs/design.md, "tokenwire/_shmsegment.py"."""

from __future__ import annotations

import errno
import mmap
import os
import stat
import struct
import sys
from typing import Any, Optional, Tuple

try:
    import fcntl
except ImportError:                  # not POSIX (Windows): available() is False, no segment
    fcntl = None  # type: ignore[assignment]

from tokenwire._core import MAX_SPIN_US, TokenVector, _ShmWords
from tokenwire.errors import WireFormatError

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


def create(slots: int, slot_bytes: int) -> Tuple[int, mmap.mmap, bytes]:
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


# -- the channel's frames (tokenwire.shm: _shmsender writes them, _shmreceiver reads them) ----

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


# -- the channel's arguments, checked before they are used --------------------------------------

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
