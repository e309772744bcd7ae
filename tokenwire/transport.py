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
the ids, and their count and sizes are signed. Pass ``sign_buffers=True`` (on both sides) to cover every byte as
well, at the cost of one SHA-256 pass over the ids, which is what the default avoids.
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
socket they are given.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import os
import pickle
import struct
from functools import lru_cache
from typing import Any, Callable, Iterable, List, Optional, Sequence

from tokenwire._core import ImmutableBuffer
from tokenwire.errors import AuthenticationError, WireFormatError

__all__ = ["KEY_ENV", "MIN_KEY_BYTES", "OOB_THRESHOLD", "SIGNATURE_BYTES",
           "dumps_oob", "key_from_env", "loads_oob", "received_buffer", "recv_pyobj_oob",
           "send_pyobj_oob"]

#: Buffers at least this large travel out-of-band; smaller ones are copied into the pickle.
#: 64 KiB is pyzmq's own threshold below which zero-copy sends are not worth it, and lies below
#: the measured crossover: send_pyobj_oob + recv_pyobj_oob of a GenerationRequest over ipc,
#: median per message, in-band against out-of-band: 1k ids 40.5 / 45.5 us, 4k 51.3 / 56.2,
#: 16k 79.0 / 81.3, 32k 121.8 / 121.5, 64k 186.6 / 174.1, 128k 478 / 386.
OOB_THRESHOLD = 64 * 1024

#: The environment variable `key_from_env` reads by default (hex-encoded key).
KEY_ENV = "TOKENWIRE_KEY"
#: Keys shorter than this are refused: HMAC's strength is bounded by the key's.
MIN_KEY_BYTES = 16
# A key of fewer distinct byte values is refused as guessable (b"\x01" + 15 zeros): 16 random
# bytes hold fewer than 8 distinct values with probability below 2**-39.
_MIN_DISTINCT_KEY_BYTES = 8

# The signature frame: a 4-byte marker, then the 32-byte HMAC-SHA256 digest. "TWS2": the HMAC
# key is SHA-256(key) (a "TWS1" signature used the key itself, where K and K + b"\0" agree).
_SIG_MAGIC = b"TWS2"
SIGNATURE_BYTES = len(_SIG_MAGIC) + hashlib.sha256().digest_size
# What the MAC covers starts with this tag, so a signature made for another purpose with the
# same key can never pass as one of these.
_DOMAIN = b"tokenwire-oob-v1\0"
_BLOCK = hashlib.sha256().block_size
_PREFIX = {False: _DOMAIN + b"\0", True: _DOMAIN + b"\1"}
# A message with a shared-memory descriptor (tokenwire.shm) signs under modes 2 and 3, so it can
# never verify as a plain message, nor the reverse.
_CHANNEL_PREFIX = {False: _DOMAIN + b"\2", True: _DOMAIN + b"\3"}
# A message with leading frames (`prefix=`, signed with it) signs under modes 4 and 5.
_LEADING_PREFIX = {False: _DOMAIN + b"\4", True: _DOMAIN + b"\5"}
_LENGTHS = [struct.Struct(f"<{n + 1}Q") for n in range(9)]     # count + n lengths

FindClass = Callable[[str, str], Any]


@lru_cache(maxsize=16)
def _keyed(key: bytes) -> tuple[Any, Any]:
    """HMAC-SHA256 (RFC 2104) keyed with SHA-256(key), split into its two keyed SHA-256 states,
    each copied per message: C-level ``hashlib`` copies cost a third of what
    ``hmac.HMAC.copy()`` does.

    The HMAC key is always the 32-byte SHA-256 of `key`: RFC 2104 pads a short key with zeros
    and hashes a long one, so `K` and ``K + b"\0"`` (or a long key and its hash) would be the
    same key; hashed to a fixed length, two different keys never are."""
    if len(key) < MIN_KEY_BYTES:
        raise ValueError(f"an HMAC key needs at least {MIN_KEY_BYTES} bytes, got {len(key)}")
    distinct = len(set(key))
    if distinct < _MIN_DISTINCT_KEY_BYTES:
        raise ValueError(f"the key holds only {distinct} distinct byte value(s): not a random "
                         f"key, use secrets.token_bytes(32)")
    key = hashlib.sha256(key).digest().ljust(_BLOCK, b"\0")
    return (hashlib.sha256(bytes(b ^ 0x36 for b in key)),
            hashlib.sha256(bytes(b ^ 0x5C for b in key)))


def _as_key(key: Any) -> bytes:
    """The key as bytes. Only bytes-like keys are taken: ``bytes(32)`` of an int is 32 zero
    bytes, a key anyone can guess, so ints (and str, lists, ...) are refused, and so is a key
    that is all zeros."""
    if not isinstance(key, (bytes, bytearray, memoryview)):
        raise TypeError(f"key must be bytes (e.g. key_from_env() or secrets.token_bytes(32)), "
                        f"got {type(key).__name__}")
    raw = bytes(key)
    if not any(raw):
        raise ValueError(f"the key is {len(raw)} zero bytes: use a random key "
                         f"(secrets.token_bytes(32))")
    _keyed(raw)                                  # its other checks, before any frame is read
    return raw


def _signature(key: bytes, head: Any, buffers: Sequence[Any], sign_buffers: bool,
               channel: bool = False, leading: Sequence[Any] = ()) -> bytes:
    """The signature frame: HMAC-SHA256(SHA-256(key), DOMAIN || mode || u64 n || u64 len(buffer_i)...
    || u64 len(pickle) || pickle [|| buffer_0 || ... when sign_buffers]), all integers
    little-endian, mode one byte (1 when the buffers' bytes are covered; 2 and 3 for a
    `channel` message, whose `head` is its descriptor followed by its pickle; 4 and 5 for a
    message with `leading` frames, which then come first: u64 k || u64 len(leading_i)... ||
    leading_0 || ... before the rest)."""
    inner_state, outer_state = _keyed(key)
    lens = [len(b) if type(b) is bytes else memoryview(b).nbytes for b in buffers]
    lens.append(len(head) if type(head) is bytes else memoryview(head).nbytes)
    n = len(lens)
    fmt = _LENGTHS[n] if n < len(_LENGTHS) else struct.Struct(f"<{n + 1}Q")
    inner = inner_state.copy()
    if leading:
        if channel:
            raise ValueError("a channel message cannot have signed leading frames")
        sizes = [memoryview(f).nbytes for f in leading]
        inner.update(_LEADING_PREFIX[sign_buffers]
                     + struct.pack(f"<{len(sizes) + 1}Q", len(sizes), *sizes))
        for f in leading:
            inner.update(f)
        inner.update(fmt.pack(n - 1, *lens))
    else:
        inner.update((_CHANNEL_PREFIX if channel else _PREFIX)[sign_buffers]
                     + fmt.pack(n - 1, *lens))
    inner.update(head)
    if sign_buffers:
        for b in buffers:
            inner.update(b)
    outer = outer_state.copy()
    outer.update(inner.digest())
    digest: bytes = outer.digest()
    return _SIG_MAGIC + digest


def key_from_env(name: str = KEY_ENV) -> bytes:
    """The shared key from environment variable `name`, hex-encoded (e.g. the output of
    ``python -c 'import secrets; print(secrets.token_hex(32))'``). Raises `KeyError` when it is
    unset, `ValueError` when it is not hex or shorter than `MIN_KEY_BYTES`."""
    try:
        text = os.environ[name]
    except KeyError:
        raise KeyError(f"environment variable {name} is not set (a hex key, e.g. from "
                       f"`python -c 'import secrets; print(secrets.token_hex(32))'`)") from None
    try:
        key = bytes.fromhex(text.strip())
    except ValueError:
        raise ValueError(f"environment variable {name} must hold a hex-encoded key") from None
    if len(key) < MIN_KEY_BYTES:
        raise ValueError(f"environment variable {name} holds a {len(key)}-byte key; "
                         f"at least {MIN_KEY_BYTES} bytes are needed")
    return key


def dumps_oob(obj: Any, *, oob_threshold: int = OOB_THRESHOLD, key: Optional[bytes] = None,
              sign_buffers: bool = False) -> List[Any]:
    """``[pickle, buffer, ...]``: `obj` pickled at protocol 5, followed by the raw views of its
    out-of-band buffers (``memoryview``s of the objects' own memory: no copy is made). With
    `key`, a signature frame comes first: ``[signature, pickle, buffer, ...]``."""
    buffers: List[memoryview] = []

    def out_of_band(buf: pickle.PickleBuffer) -> bool:
        raw = buf.raw()
        if raw.nbytes < oob_threshold:
            return True                  # a true value keeps the buffer in-band
        buffers.append(raw)
        return False

    head = pickle.dumps(obj, protocol=5, buffer_callback=out_of_band)
    if key is None:
        return [head, *buffers]
    return [_signature(_as_key(key), head, buffers, sign_buffers), head, *buffers]


def _verify(frames: Sequence[Any], key: bytes, sign_buffers: bool,
            leading: Sequence[Any] = ()) -> None:
    if len(frames) < 2:
        raise AuthenticationError(
            f"unsigned message: {len(frames)} frame(s), a signed one has a signature frame and "
            f"a pickle frame")
    first = memoryview(frames[0])
    if not _is_signature(first):
        raise AuthenticationError(
            f"unsigned message: the first frame ({first.nbytes} bytes) is not a tokenwire "
            f"signature ({SIGNATURE_BYTES} bytes starting with {_SIG_MAGIC!r})")
    sig = first.tobytes()
    expected = _signature(key, frames[1], frames[2:], sign_buffers, leading=leading)
    if not hmac.compare_digest(sig, expected):
        raise AuthenticationError(
            f"bad signature: the message ({len(frames) - 1} frames after the signature) was not "
            f"signed with this key and sign_buffers={sign_buffers}, or was changed in transit")


def _is_signature(frame: memoryview) -> bool:
    """Does `frame` have the shape of a signature frame (checked, not trusted)?"""
    return frame.nbytes == SIGNATURE_BYTES and frame[:4] == _SIG_MAGIC


def _check_unsigned(frames: Sequence[Any]) -> None:
    if len(frames) > 1 and _is_signature(memoryview(frames[0])):
        raise AuthenticationError("the message is signed: pass key= to verify and load it")


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, data: Any, buffers: Sequence[Any], find_class: FindClass) -> None:
        super().__init__(io.BytesIO(data), buffers=buffers)
        self._find_class = find_class

    def find_class(self, module: str, name: str) -> Any:
        return self._find_class(module, name)


def _unpickle(head: Any, buffers: Sequence[Any], find_class: Optional[FindClass]) -> Any:
    if find_class is None:
        return pickle.loads(head, buffers=buffers)
    return _RestrictedUnpickler(head, buffers, find_class).load()


def loads_oob(frames: Iterable[Any], *, key: Optional[bytes] = None, sign_buffers: bool = False,
              find_class: Optional[FindClass] = None) -> Any:
    """The object `dumps_oob` produced: ``frames[0]`` is the pickle, the rest its buffers (any
    bytes-like objects; read-only ones are viewed without copying). With `key`, ``frames[0]``
    must be a valid signature over the rest, checked before anything is unpickled
    (`AuthenticationError` otherwise). `find_class(module, name)` restricts the globals the
    pickle may load (see `pickle.Unpickler.find_class`)."""
    frames = list(frames)
    if not frames:
        raise ValueError("loads_oob() needs at least one frame (the pickle)")
    if key is None:
        _check_unsigned(frames)
        return _unpickle(frames[0], frames[1:], find_class)
    _verify(frames, _as_key(key), sign_buffers)
    return _unpickle(frames[1], frames[2:], find_class)


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
        _send_frames(socket, dumps_oob(obj, oob_threshold=oob_threshold, key=key,
                                       sign_buffers=sign_buffers), flags)
        return
    prefix = _bytes_frames("prefix", prefix)
    routing = _bytes_frames("routing", routing)
    if prefix and key is not None:
        if channel is not None:
            raise ValueError("send_pyobj_oob: prefix= with key= and channel= is not supported "
                             "(the channel's signature does not cover leading frames)")
        frames = dumps_oob(obj, oob_threshold=oob_threshold)
        frames.insert(0, _signature(_as_key(key), frames[0], frames[1:], sign_buffers,
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
        _send_frames(socket, frames, flags)


def _send_frames(socket: Any, frames: List[Any], flags: int = 0) -> None:
    """Send `frames` as one multipart message, each buffer with ``copy=False`` (pyzmq copies
    those below its copy_threshold, 64 KiB, anyway). A message of one frame (everything
    in-band) goes through ``socket.send`` as ``send_pyobj`` sends its pickle: no per-part loop."""
    if len(frames) == 1:
        socket.send(frames[0], flags=flags, copy=False)
    else:
        socket.send_multipart(frames, flags=flags, copy=False)


def _recv_frames(socket: Any, flags: int = 0, copied: int = 1) -> List[Any]:
    """Receive one multipart message: its first `copied` frames as `bytes` (``copy=True``), the
    rest as ``zmq.Frame`` objects (``copy=False``). A message leads with small frames (routing
    identities, a message type, the signature, the pickle or msgpack head whose large buffers
    travel as frames of their own): for those a copy costs less than a Frame object (a 4 KB
    frame: 0.5 us against 1.5 us), and a message sent in-band (one frame) is received as
    ``recv_pyobj`` receives it. The frames after them are the out-of-band buffers, viewed where
    libzmq put them (`received_buffer`)."""
    frames: List[Any] = []
    while True:
        if len(frames) < copied:
            frames.append(socket.recv(flags))
            # getsockopt, not the `rcvmore` property: 0.9 us against 3.3 us a call
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
            raise ValueError(f"{name} must be an int >= 0 (a number of leading frames), got {n!r}")


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
        frames = _recv_frames(socket, flags, 1)
        if len(frames) == 1:
            return pickle.loads(frames[0])
        return _recv_rest(frames, None, sign_buffers, None, None)
    _check_counts(prefix, routing)
    # Leading frames, the signature, the channel's descriptor and the pickle as bytes; the
    # buffers as zmq.Frames. (A channel message that took no slot has no descriptor: its first
    # buffer frame, if any, is then received as bytes too -- a copy, never a view of memory
    # another party can write.)
    head = (2 if key is not None else 1) + (1 if channel is not None else 0)
    frames = _recv_frames(socket, flags, prefix + routing + head)
    if prefix or routing:
        k = _leading(frames, prefix, routing)
        leading = [f if type(f) is bytes else f.bytes for f in frames[:k]]
        rest = frames[k:]
        if key is not None:
            if channel is not None:
                raise ValueError("recv_pyobj_oob: prefix= with key= and channel= is not "
                                 "supported")
            views = [_view(f) for f in rest]
            _verify(views, _as_key(key), sign_buffers, leading=leading[routing:])
            return leading, _unpickle(views[1], [received_buffer(f) for f in rest[2:]],
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
        _check_unsigned(views)
        return _unpickle(views[0], [received_buffer(f) for f in frames[1:]], find_class)
    _verify(views, _as_key(key), sign_buffers)
    return _unpickle(views[1], [received_buffer(f) for f in frames[2:]], find_class)
