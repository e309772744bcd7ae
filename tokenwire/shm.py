"""A same-host channel for large buffers: a ring of slots in shared memory beside a zmq socket.

    sender = tokenwire.shm.Sender()                       # proxy: owns the segment
    send_pyobj_oob(sock, request, key=KEY, channel=sender)

    receiver = tokenwire.shm.Receiver()                   # worker
    request = recv_pyobj_oob(sock, key=KEY, channel=receiver)

The zmq message still carries the pickle, plus a small descriptor frame; each large buffer (the
int32 ids) is copied once into a slot of the ring by the sender and once out of it by the
receiver, instead of travelling through the socket. `Sender.send` / `Receiver.recv` put whole
messages in the ring for a receiver that spins. Linux only (a sealed memfd); elsewhere `Sender`
never offers a segment and every buffer travels as a frame.

docs/transport.md, "Shared-memory channel", is the guide: the format, what the channel promises
and what it does not. The code: _shmsegment (the segment's layout, the channel's frames, the
receiver's checked view of a segment), _shmsender (Sender), _shmreceiver (Receiver).
"""

from __future__ import annotations

from tokenwire._core import MAX_SPIN_US
from tokenwire._shmreceiver import Receiver
from tokenwire._shmsegment import available
from tokenwire._shmsender import SHM_THRESHOLD, SLOT_BYTES, SLOTS, Sender

__all__ = ["MAX_SPIN_US", "SHM_THRESHOLD", "SLOT_BYTES", "SLOTS", "Receiver", "Sender", "available"]

for _public in (Receiver, Sender, available):
    _public.__module__ = __name__            # their public home (docs, repr, pickled names)
del _public
