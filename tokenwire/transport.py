"""Send Python objects with their large buffers out-of-band: protocol-5 pickling over frames.

    frames = dumps_oob(request)            # [pickle bytes, buffer, buffer, ...]
    request = loads_oob(frames)            # buffers are used where they lie (no copy)

    send_pyobj_oob(socket, request)        # pyzmq: one multipart message, copy=False
    request = recv_pyobj_oob(socket)

With protocol 5 and a ``buffer_callback``, a TokenVector (and an ndarray, ...) is not copied into
the pickle stream: its memory is handed over as a ``pickle.PickleBuffer``, sent as its own frame,
and on the receiving side the unpickler is given the received frames as they are, so a token
field ends up viewing the received message memory. Buffers smaller than ``oob_threshold`` bytes
stay in-band: for a few hundred bytes an extra frame costs more than the copy.

pyzmq stays optional: this module never imports it; the zmq functions only call methods of the
socket they are given.
"""

from __future__ import annotations

import pickle
from typing import Any, Iterable, List

from tokenwire._core import ImmutableBuffer

__all__ = ["OOB_THRESHOLD", "dumps_oob", "loads_oob", "recv_pyobj_oob", "send_pyobj_oob"]

#: Buffers at least this large travel out-of-band; smaller ones are copied into the pickle.
#: 64 KiB is pyzmq's own threshold below which zero-copy sends are not worth it.
OOB_THRESHOLD = 64 * 1024

def dumps_oob(obj: Any, *, oob_threshold: int = OOB_THRESHOLD) -> List[Any]:
    """``[pickle, buffer, ...]``: `obj` pickled at protocol 5, followed by the raw views of its
    out-of-band buffers (``memoryview``s of the objects' own memory: no copy is made)."""
    buffers: List[memoryview] = []

    def out_of_band(buf: pickle.PickleBuffer) -> bool:
        raw = buf.raw()
        if raw.nbytes < oob_threshold:
            return True                  # a true value keeps the buffer in-band
        buffers.append(raw)
        return False

    head = pickle.dumps(obj, protocol=5, buffer_callback=out_of_band)
    return [head, *buffers]


def loads_oob(frames: Iterable[Any]) -> Any:
    """The object `dumps_oob` produced: ``frames[0]`` is the pickle, the rest its buffers (any
    bytes-like objects; read-only ones are viewed without copying)."""
    frames = list(frames)
    if not frames:
        raise ValueError("loads_oob() needs at least one frame (the pickle)")
    return pickle.loads(frames[0], buffers=frames[1:])


def send_pyobj_oob(socket: Any, obj: Any, flags: int = 0, *,
                   oob_threshold: int = OOB_THRESHOLD) -> None:
    """Send `obj` on a pyzmq socket as one multipart message: the protocol-5 pickle, then each
    out-of-band buffer as a frame sent with ``copy=False`` (libzmq reads the object's memory;
    the frames keep it alive until the send completes). The counterpart of
    ``socket.send_pyobj``; receive with `recv_pyobj_oob`."""
    socket.send_multipart(dumps_oob(obj, oob_threshold=oob_threshold), flags=flags, copy=False)


def recv_pyobj_oob(socket: Any, flags: int = 0) -> Any:
    """Receive an object sent by `send_pyobj_oob`. The frames are received with ``copy=False``
    and handed to the unpickler as `ImmutableBuffer`s, so a token field views the message memory
    instead of copying it."""
    frames = socket.recv_multipart(flags=flags, copy=False)
    # A received message's memory is never rewritten by libzmq: say so (ImmutableBuffer), so the
    # token fields view the frames instead of copying them. Frames are not trusted by type,
    # because a zmq.Frame built over a bytearray looks the same as a received one.
    return pickle.loads(frames[0].buffer, buffers=[ImmutableBuffer(f) for f in frames[1:]])
