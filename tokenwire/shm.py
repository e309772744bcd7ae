"""A same-host channel for large buffers: a ring of slots in shared memory beside a zmq socket.
See docs/design.md, "tokenwire/shm.py"."""

from __future__ import annotations

from tokenwire._core import MAX_SPIN_US
from tokenwire._shmreceiver import Receiver
from tokenwire._shmsegment import available
from tokenwire._shmsender import SHM_THRESHOLD, SLOT_BYTES, SLOTS, Sender

__all__ = ["MAX_SPIN_US", "SHM_THRESHOLD", "SLOT_BYTES", "SLOTS", "Receiver", "Sender", "available"]

for _public in (Receiver, Sender, available):
    _public.__module__ = __name__            # their public home (docs, repr, pickled names)
del _public
