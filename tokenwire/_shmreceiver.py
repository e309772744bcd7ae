"""The shared-memory channel's receiving side (tokenwire.shm.Receiver): attaches to the segments
senders offer, copies slots out into storage it owns before anything is checked, and publishes
the messages it is done with. What it promises: docs/transport.md, "Shared-memory channel"."""

from __future__ import annotations

import hmac
import os
from collections import OrderedDict
from typing import Any, Dict, Iterable, List, Optional, Sequence

from tokenwire._oob import FindClass, as_key, is_signature, loads_oob, signature, unpickle
from tokenwire._shmsegment import (_BELL, _BELL_MAGIC, _DESC, _DESC_MAGIC, _DESC_SIZE,
                                   _DESC_UNPACK_FROM, _ENTRY, _ENTRY_SIZE, _ENTRY_UNPACK_FROM,
                                   _MSG, _NO_SEGMENT, _NO_SLOT, _PICKLE5, _READER_WORD, _Segment,
                                   _count, _spin, available)
from tokenwire.errors import AuthenticationError, WireFormatError
from tokenwire.transport import received_buffer

class Receiver:
    """The receiving side: attaches to the segments senders offer and copies slots out.

    Keeps at most `max_segments` segments mapped (a sender that restarted offers a new one).
    ``stats`` counts buffers taken from slots (``"shm"``) and from frames (``"frames"``), and
    whole messages `recv` took from a slot (``"ring"``).
    Used by one thread at a time.

    Before it maps a segment it checks its owner, mode, seals and size; it copies each slot
    into a TokenVector it owns before anything is checked, and frees the slot at once. Messages
    must be loaded in the order they arrive.
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
