"""Send Python objects with their large buffers out-of-band: protocol-5 pickling over frames.

    frames = dumps_oob(request, key=KEY)      # [signature, pickle, buffer, buffer, ...]
    request = loads_oob(frames, key=KEY)      # verified, then buffers used where they lie

    send_pyobj_oob(socket, request, key=KEY)  # pyzmq: one multipart message, copy=False
    request = recv_pyobj_oob(socket, key=KEY)

With protocol 5 and a ``buffer_callback``, a TokenVector (and an ndarray, ...) is not copied into
the pickle stream: its memory is handed over as a ``pickle.PickleBuffer``, sent as its own frame,
and on the receiving side the unpickler is given the received frames as they are, so a token
field ends up viewing the received message memory (a frame read from a tcp or ipc stream; one
received over inproc is the sender's memory and is copied once, see `received_buffer`). Buffers
smaller than ``oob_threshold`` bytes stay in-band: for a few hundred bytes an extra frame costs
more than the copy.

Authentication. Unpickling runs code chosen by whoever wrote the pickle, so a worker must never
unpickle a message that anyone able to reach its socket could have sent. With ``key=`` the sender
puts an HMAC-SHA256 signature frame in front of the message, computed over a domain tag, the
pickle frame, and the number and byte lengths of the buffer frames; the receiver checks it (in
constant time) *before* anything is unpickled and raises `AuthenticationError` for an unsigned,
truncated or tampered message, or one whose frames were dropped, added or moved to where a frame
of another length stood. The buffer frames' *contents* are not covered by default: they are raw
bytes that the signed pickle hands to a type it names (a TokenVector takes them as int32 ids), so
they cannot run code; changing them (or swapping two buffers of the same length) can only change
the ids, and their count and sizes are signed. Pass ``sign_buffers=True`` (on both sides) to
cover every byte as well, at the cost of one SHA-256 pass over the ids, which is what the
default avoids.
``find_class=`` additionally restricts which globals the pickle may name (an allow-list, see
`pickle.Unpickler.find_class`).

Leading frames. ``send_pyobj_oob(..., prefix=[type], routing=[identity])`` sends
``[*routing, *prefix, (signature,) pickle, *buffers]`` and ``recv_pyobj_oob(..., prefix=1,
routing=1)`` returns ``(leading, obj)``. The signature covers the `prefix` frames (their count,
lengths and bytes, under modes 4 and 5, so such a message never verifies without them nor a
plain one with them): a signed message cannot be replayed under another message type. The
`routing` frames are not covered: a ROUTER identity is consumed by the sending ROUTER and
written by the receiving one, so no party could sign the frame the other sees.

pyzmq stays optional: this module never imports it; the zmq functions only call methods of the
socket they are given. The out-of-band layer itself (the pickle and its frames, keys, the
signature) is transport-neutral and lives in tokenwire._oob; this module is its pyzmq glue and
the public home of its functions. `send_frames` / `recv_frames` / `received_buffer` are the
glue's declared names, which the shared-memory channel and tokenwire.msgspec send through.
"""

from __future__ import annotations

import pickle
from typing import Any, Iterable, List, Optional

from tokenwire._core import ImmutableBuffer
from tokenwire._oob import (KEY_ENV, MIN_KEY_BYTES, OOB_THRESHOLD, SIGNATURE_BYTES, FindClass,
                            as_key, check_unsigned, dumps_oob, key_from_env, loads_oob, signature,
                            unpickle, verify)
from tokenwire.errors import WireFormatError, _describe

__all__ = ["KEY_ENV", "MIN_KEY_BYTES", "OOB_THRESHOLD", "SIGNATURE_BYTES",
           "dumps_oob", "key_from_env", "loads_oob", "received_buffer", "recv_pyobj_oob",
           "send_pyobj_oob"]

def send_pyobj_oob(socket: Any, obj: Any, flags: int = 0, *,
                   oob_threshold: int = OOB_THRESHOLD, key: Optional[bytes] = None,
                   sign_buffers: bool = False, channel: Any = None,
                   prefix: Iterable[Any] = (), routing: Iterable[Any] = ()) -> None:
    """Send `obj` on a pyzmq socket as one multipart message: the protocol-5 pickle, then each
    out-of-band buffer as a frame sent with ``copy=False`` (libzmq reads the object's memory;
    the frames keep it alive until the send completes). With `key`, a signature frame first.
    With `channel` (a `tokenwire.shm.Sender`), large buffers go through shared memory when the
    receiver has attached to it, and a descriptor frame says where.

    Leading frames: ``[*routing, *prefix, (signature,) pickle, *buffers]``. `prefix` frames (a
    message type) are part of the message: with `key` the signature covers them, so a signed
    message cannot be replayed under another type. `routing` frames (a ROUTER socket's peer
    identity) are never signed: the sending ROUTER consumes them and the receiving ROUTER
    prepends the identity of the peer it came from, so neither side could sign what the other
    sees. `channel` with `key` takes no `prefix` (ValueError).
    The counterpart of ``socket.send_pyobj``; receive with `recv_pyobj_oob`."""
    if channel is None and prefix == () and routing == ():
        # The common call: no leading frames to check (a small message's costs are fixed ones).
        send_frames(socket, dumps_oob(obj, oob_threshold=oob_threshold, key=key,
                                       sign_buffers=sign_buffers), flags)
        return
    prefix = _bytes_frames("prefix", prefix)
    routing = _bytes_frames("routing", routing)
    if prefix and key is not None:
        if channel is not None:
            raise ValueError("send_pyobj_oob: prefix= with key= and channel= is not supported "
                             "(the channel's signature does not cover leading frames)")
        frames = dumps_oob(obj, oob_threshold=oob_threshold)
        frames.insert(0, signature(as_key(key), frames[0], frames[1:], sign_buffers,
                                    leading=prefix))
    elif channel is not None:
        frames = channel.dumps(obj, oob_threshold=oob_threshold, key=key,
                               sign_buffers=sign_buffers)
    else:
        frames = dumps_oob(obj, oob_threshold=oob_threshold, key=key, sign_buffers=sign_buffers)
    if prefix or routing:
        frames = [*routing, *prefix, *frames]
    if channel is not None:
        channel.send_frames(socket, frames, flags)     # a send that raises delivers nothing
    else:
        send_frames(socket, frames, flags)


def send_frames(socket: Any, frames: List[Any], flags: int = 0) -> None:
    """Send `frames` as one multipart message, each buffer with ``copy=False`` (pyzmq copies
    those below its copy_threshold, 64 KiB, anyway). A message of one frame (everything
    in-band) goes through ``socket.send`` as ``send_pyobj`` sends its pickle: no per-part loop."""
    if len(frames) == 1:
        socket.send(frames[0], flags=flags, copy=False)
    else:
        socket.send_multipart(frames, flags=flags, copy=False)


def recv_frames(socket: Any, flags: int = 0, copied: int = 1) -> List[Any]:
    """Receive one multipart message: its first `copied` frames as `bytes` (``copy=True``), the
    rest as ``zmq.Frame`` objects (``copy=False``). A message leads with small frames (routing
    identities, a message type, the signature, the pickle or msgpack head whose large buffers
    travel as frames of their own): for those a copy costs less than a Frame object (a 4 KB
    frame's ``recv`` against its ``recv(copy=False)``), and a message sent in-band (one frame)
    is received as ``recv_pyobj`` receives it. The frames after them are the out-of-band
    buffers, viewed where libzmq put them (`received_buffer`)."""
    frames: List[Any] = []
    while True:
        if len(frames) < copied:
            frames.append(socket.recv(flags))
            # getsockopt, not the `rcvmore` property: it costs less a call
            if not socket.getsockopt(_ZMQ_RCVMORE):
                return frames
        else:
            frame = socket.recv(flags, copy=False)
            frames.append(frame)
            if not frame.more:
                return frames


def _view(frame: Any) -> Any:
    return frame if type(frame) is bytes else frame.buffer


def _bytes_frames(name: str, frames: Iterable[Any]) -> List[Any]:
    out = list(frames)
    for i, f in enumerate(out):
        try:
            memoryview(f).release()
        except TypeError:
            raise TypeError(f"{name} frame {i} must be bytes-like, got {type(f).__name__}") \
                from None
    return out


def _check_counts(prefix: int, routing: int) -> None:
    for name, n in (("prefix", prefix), ("routing", routing)):
        if not isinstance(n, int) or n < 0:
            raise ValueError(f"{name} must be an int >= 0 (a number of leading frames), "
                             f"got {_describe(n)}")


def _leading(frames: List[Any], prefix: int, routing: int) -> int:
    """The number of leading frames (counts checked by the caller, _check_counts)."""
    k = prefix + routing
    if len(frames) <= k:
        raise WireFormatError(
            f"the message has {len(frames)} frame(s): expected {routing} routing and {prefix} "
            f"prefix frame(s), then the message's own")
    return k


# ZMQ_RCVMORE: whether more frames of the message follow the one just received.
_ZMQ_RCVMORE = 13
# ZMQ_SRCFD: the file descriptor a message was read from; zmq_msg_get fails for a message that
# never crossed a stream (inproc). The number, not zmq.SRCFD: this module never imports pyzmq.
_ZMQ_SRCFD = 2


def received_buffer(frame: Any) -> Any:
    """A pyzmq frame received with ``copy=False``, as tokenwire may read it: wrapped in
    `ImmutableBuffer` (viewed without a copy) when it was read from a tcp or ipc stream, whose
    memory libzmq alone holds and never rewrites; the frame itself (copied once when a token
    field is made from it) otherwise. Over ``inproc`` a large frame *is* the sender's memory --
    a ``send(bytearray, copy=False)`` followed by a write to it changes what the receiver sees
    -- so it is never trusted; nor is a frame whose origin libzmq cannot tell. A frame received
    with ``copy=True`` is `bytes` already (its own copy) and comes back as it is."""
    if type(frame) is bytes:
        return frame
    try:
        fd = frame.get(_ZMQ_SRCFD)
    except Exception:              # inproc (EINVAL), not a zmq.Frame, a libzmq without SRCFD
        return frame
    return ImmutableBuffer(frame) if type(fd) is int and fd >= 0 else frame


def recv_pyobj_oob(socket: Any, flags: int = 0, *, key: Optional[bytes] = None,
                   sign_buffers: bool = False, find_class: Optional[FindClass] = None,
                   channel: Any = None, prefix: int = 0, routing: int = 0) -> Any:
    """Receive an object sent by `send_pyobj_oob`. The leading frames and the pickle are
    received as `bytes`, the out-of-band buffers with ``copy=False``; a token field views a
    buffer read from a tcp or ipc stream and copies one received over inproc, whose memory the
    sender can still write (`received_buffer`). With `key`, the signature is verified before
    unpickling; a worker whose socket anyone else can reach must
    pass one. Pass `channel` (a `tokenwire.shm.Receiver`) when the sender passes one.

    With `routing` and/or `prefix` (numbers of leading frames: ``[*routing, *prefix, ...]``, see
    `send_pyobj_oob`) returns ``(leading, obj)``, `leading` those frames as `bytes`; with `key`
    the `prefix` frames are verified with the message, the `routing` ones are not."""
    if channel is None and key is None and find_class is None and prefix == 0 and routing == 0:
        # The common call: a message sent in-band is one frame, loaded as recv_pyobj loads it.
        frames = recv_frames(socket, flags, 1)
        if len(frames) == 1:
            return pickle.loads(frames[0])
        return _recv_rest(frames, None, sign_buffers, None, None)
    _check_counts(prefix, routing)
    # Leading frames, the signature, the channel's descriptor and the pickle as bytes; the
    # buffers as zmq.Frames. (A channel message that took no slot has no descriptor: its first
    # buffer frame, if any, is then received as bytes too -- a copy, never a view of memory
    # another party can write.)
    head = (2 if key is not None else 1) + (1 if channel is not None else 0)
    frames = recv_frames(socket, flags, prefix + routing + head)
    if prefix or routing:
        k = _leading(frames, prefix, routing)
        leading = [f if type(f) is bytes else f.bytes for f in frames[:k]]
        rest = frames[k:]
        if key is not None:
            if channel is not None:
                raise ValueError("recv_pyobj_oob: prefix= with key= and channel= is not "
                                 "supported")
            views = [_view(f) for f in rest]
            verify(views, as_key(key), sign_buffers, leading=leading[routing:])
            return leading, unpickle(views[1], [received_buffer(f) for f in rest[2:]],
                                      find_class)
        return leading, _recv_rest(rest, key, sign_buffers, find_class, channel)
    return _recv_rest(frames, key, sign_buffers, find_class, channel)


def _recv_rest(frames: List[Any], key: Optional[bytes], sign_buffers: bool,
               find_class: Optional[FindClass], channel: Any) -> Any:
    if channel is not None:
        return channel.loads([received_buffer(f) for f in frames], key=key,
                             sign_buffers=sign_buffers, find_class=find_class)
    # Frames are not trusted by type (a zmq.Frame built over a bytearray looks the same as a
    # received one), nor because they were received (over inproc they are the sender's memory).
    views = [_view(f) for f in frames]
    if key is None:
        check_unsigned(views)
        return unpickle(views[0], [received_buffer(f) for f in frames[1:]], find_class)
    verify(views, as_key(key), sign_buffers)
    return unpickle(views[1], [received_buffer(f) for f in frames[2:]], find_class)
