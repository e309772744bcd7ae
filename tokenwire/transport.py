"""Send Python objects with their large buffers out-of-band: protocol-5 pickling over frames.
See docs/design.md, "tokenwire/transport.py"."""

from __future__ import annotations

import pickle
from functools import lru_cache
from typing import Any, Iterable, List, Optional, cast

from tokenwire._core import CODECS, ImmutableBuffer, TokenVector, check_codec, decode, encode
# The out-of-band layer's own pair (pickle_frames, unpickle_frames) takes the ids' codec from
# the caller: dumps_oob and loads_oob below plug in the wire codec.
from tokenwire._oob import (OOB_THRESHOLD, EncodeIds, FindClass, as_key, check_unsigned,
                            codec_kinds, key_from_env, load, pickle_frames, sign_frames, unpickle,
                            unpickle_frames, verify)
from tokenwire.errors import WireFormatError, _describe

__all__ = ["dumps_oob", "key_from_env", "loads_oob", "recv_pyobj_oob", "send_pyobj_oob"]

#: The compact codec token ids take where they cross a network (codec=None over tcp://): pfor,
#: the smallest of the fast codecs on real tokenizer ids (docs/transport.md, "Codecs").
NETWORK_CODEC = "pfor"

# Endpoint schemes that cross a network: compact ids (any other scheme -- ipc://, inproc:// --
# keeps its bytes on the host: raw ids, viewed where they land).
_NETWORK_SCHEMES = frozenset({"tcp", "udp", "pgm", "epgm", "norm", "ws", "wss", "tipc"})
# ZMQ_LAST_ENDPOINT: the number, not zmq.LAST_ENDPOINT (this module never imports pyzmq).
_ZMQ_LAST_ENDPOINT = 32


def _oob_codec(codec: Optional[str]) -> Optional[str]:
    """`codec` checked: None (decided by the endpoint) or a codec name (ValueError else)."""
    if codec is None:
        return None
    if not isinstance(codec, str):
        raise TypeError(f"codec must be None or a codec name, got {type(codec).__name__}")
    return check_codec(codec)


@lru_cache(maxsize=64)
def endpoint_codec(endpoint: Any) -> str:
    """The codec for token ids sent to `endpoint` (a zmq endpoint, str or bytes): "raw" for
    ipc:// and inproc:// (the bytes stay on the host), `NETWORK_CODEC` for tcp:// and the other
    network transports, "raw" for an endpoint it cannot tell (empty: the socket is neither
    bound nor connected; an unknown scheme), since raw is always readable and never costs
    CPU."""
    text = endpoint.decode("utf-8", "replace") if isinstance(endpoint, bytes) else str(endpoint)
    scheme = text.partition("://")[0].lower() if "://" in text else ""
    return NETWORK_CODEC if scheme in _NETWORK_SCHEMES else "raw"


def socket_codec(socket: Any) -> str:
    """The codec codec=None picks for `socket`: `endpoint_codec` of its ``LAST_ENDPOINT``,
    which libzmq sets at each bind (the resolved address: ``tcp://0.0.0.0:5555``) and each
    connect (as given: ``tcp://worker:5555``) and never clears (not on unbind or disconnect).
    A socket with several endpoints is judged by the last one it bound or connected: pass
    ``codec=`` when they differ. A socket without the option (not a pyzmq socket) is "raw"."""
    try:
        endpoint = socket.getsockopt(_ZMQ_LAST_ENDPOINT)
    except Exception:              # not a zmq socket, a closed one: nothing to tell from
        return "raw"
    return endpoint_codec(endpoint)


def _make_encoder(codec: str) -> EncodeIds:
    def encode_ids(buf: pickle.PickleBuffer) -> Optional[bytes]:
        tv: Any = memoryview(buf).obj        # the object whose memory the pickler hands over
        if type(tv) is not TokenVector:
            return None
        return encode(tv, codec=cast(Any, codec), checksum=True)
    return encode_ids


# `dumps_oob`'s `encode_ids` by codec name, from the codec table ("raw": none, so `.get` gives
# None). Only TokenVector buffers are encoded (other buffers -- ndarrays, bytes -- go raw), with
# a CRC-32C checksum: a damaged compact frame is refused rather than read as other ids.
_ENCODERS = {c: _make_encoder(c) for c in CODECS if c != "raw"}
_encode_ids = _ENCODERS.get


def _lazy_encoder(socket: Any) -> EncodeIds:
    """`encode_ids` that asks the socket for its endpoint at the first TokenVector buffer (a
    message without one never pays for the look-up)."""
    chosen: List[Optional[EncodeIds]] = []

    def encode_ids(buf: pickle.PickleBuffer) -> Optional[bytes]:
        if not chosen:
            chosen.append(_encode_ids(socket_codec(socket)))
        enc = chosen[0]
        return None if enc is None else enc(buf)
    return encode_ids


def dumps_oob(obj: Any, *, oob_threshold: int = OOB_THRESHOLD, key: Optional[bytes] = None,
              sign_buffers: bool = False, codec: Optional[str] = None) -> List[Any]:
    """``[pickle, buffer, ...]``: `obj` pickled at protocol 5, followed by the raw views of its
    out-of-band buffers (``memoryview``s of the objects' own memory: no copy is made). With
    `key`, a signature frame comes first: ``[signature, pickle, buffer, ...]``. With a `codec`
    other than "raw" (None: raw, there being no socket to judge by), each TokenVector buffer
    is a wire frame of that codec and a codec header comes before the pickle:
    ``[signature?, header, pickle, ...]``; other buffers stay raw."""
    codec = _oob_codec(codec)
    return pickle_frames(obj, oob_threshold=oob_threshold, key=key, sign_buffers=sign_buffers,
                          encode_ids=None if codec is None else _encode_ids(codec))


def loads_oob(frames: Iterable[Any], *, key: Optional[bytes] = None, sign_buffers: bool = False,
              find_class: Optional[FindClass] = None) -> Any:
    """The object `dumps_oob` produced: ``frames[0]`` is the pickle, the rest its buffers (any
    bytes-like objects; read-only ones are viewed without copying). With `key`, ``frames[0]``
    must be a valid signature over the rest, checked before anything is unpickled
    (`AuthenticationError` otherwise). `find_class(module, name)` restricts the globals the
    pickle may load (see `pickle.Unpickler.find_class`). Encoded token frames (a codec header)
    are decoded before anything is unpickled: a damaged one raises WireFormatError."""
    return unpickle_frames(frames, key=key, sign_buffers=sign_buffers, find_class=find_class,
                          decode_ids=decode)


def send_pyobj_oob(socket: Any, obj: Any, flags: int = 0, *,
                   oob_threshold: int = OOB_THRESHOLD, key: Optional[bytes] = None,
                   sign_buffers: bool = False, channel: Any = None,
                   prefix: Iterable[Any] = (), routing: Iterable[Any] = (),
                   codec: Optional[str] = None) -> None:
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

    `codec`: how TokenVector buffers travel. None (the default) decides by the socket's last
    endpoint (``zmq.LAST_ENDPOINT``): raw over ipc:// and inproc://, "pfor" over tcp:// and the
    other network transports; a name forces that codec ("raw" never encodes). A `channel` is
    one host's shared memory: it takes codec None or "raw" only (ValueError).
    The counterpart of ``socket.send_pyobj``; receive with `recv_pyobj_oob`."""
    codec = _oob_codec(codec)
    encode_ids = _lazy_encoder(socket) if codec is None else _encode_ids(codec)
    if channel is None and prefix == () and routing == ():
        # The common call: no leading frames to check (a small message's costs are fixed ones).
        send_frames(socket, pickle_frames(obj, oob_threshold=oob_threshold, key=key,
                                           sign_buffers=sign_buffers, encode_ids=encode_ids),
                    flags)
        return
    if channel is not None and codec not in (None, "raw"):
        raise ValueError(f"send_pyobj_oob: channel= sends the ids through one host's shared "
                         f"memory, raw: codec must be None or 'raw', got {codec!r}")
    prefix = _bytes_frames("prefix", prefix)
    routing = _bytes_frames("routing", routing)
    if prefix and key is not None:
        if channel is not None:
            raise ValueError("send_pyobj_oob: prefix= with key= and channel= is not supported "
                             "(the channel's signature does not cover leading frames)")
        frames = pickle_frames(obj, oob_threshold=oob_threshold, encode_ids=encode_ids)
        frames.insert(0, sign_frames(as_key(key), frames, sign_buffers, leading=prefix))
    elif channel is not None:
        frames = channel._frames(obj, oob_threshold=oob_threshold, key=key,
                                 sign_buffers=sign_buffers)
    else:
        frames = pickle_frames(obj, oob_threshold=oob_threshold, key=key,
                                sign_buffers=sign_buffers, encode_ids=encode_ids)
    if prefix or routing:
        frames = [*routing, *prefix, *frames]
    if channel is not None:
        channel._send_frames(socket, frames, flags)    # a send that raises delivers nothing
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
    sender can still write. With `key`, the signature is verified before
    unpickling; a worker whose socket anyone else can reach must
    pass one. Pass `channel` (a `tokenwire.shm.Receiver`) when the sender passes one.

    With `routing` and/or `prefix` (numbers of leading frames: ``[*routing, *prefix, ...]``, see
    `send_pyobj_oob`) returns ``(leading, obj)``, `leading` those frames as `bytes`; with `key`
    the `prefix` frames are verified with the message, the `routing` ones are not.

    Encoded token frames (a codec header, whatever codec the sender chose) are decoded before
    anything is unpickled; a damaged one raises WireFormatError naming it."""
    if channel is None and key is None and find_class is None and prefix == 0 and routing == 0:
        # The common call: a message sent in-band is one frame, loaded as recv_pyobj loads it.
        frames = recv_frames(socket, flags, 1)
        if len(frames) == 1:
            return unpickle(frames[0], (), None)
        return _recv_rest(frames, None, sign_buffers, None, None)
    _check_counts(prefix, routing)
    if channel is not None and not (prefix or routing):
        # The channel's own loop: a message waiting on the socket, else the ring's next one.
        return channel._recv(socket, flags=flags, key=key, sign_buffers=sign_buffers,
                             find_class=find_class)
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
            return leading, _load(rest, views, 1, find_class)
        return leading, _recv_rest(rest, key, sign_buffers, find_class, channel)
    return _recv_rest(frames, key, sign_buffers, find_class, channel)


def _recv_rest(frames: List[Any], key: Optional[bytes], sign_buffers: bool,
               find_class: Optional[FindClass], channel: Any) -> Any:
    if channel is not None:
        return channel._received([received_buffer(f) for f in frames], key=key,
                                 sign_buffers=sign_buffers, find_class=find_class)
    # Frames are not trusted by type (a zmq.Frame built over a bytearray looks the same as a
    # received one), nor because they were received (over inproc they are the sender's memory).
    views = [_view(f) for f in frames]
    if key is None:
        check_unsigned(views)
        return _load(frames, views, 0, find_class)
    verify(views, as_key(key), sign_buffers)
    return _load(frames, views, 1, find_class)


def _load(frames: List[Any], views: List[Any], start: int,
          find_class: Optional[FindClass]) -> Any:
    """The object of ``frames[start:]`` (``[header?, pickle, buffer, ...]``, verified or
    checked unsigned), its buffers as `received_buffer` hands them over."""
    header = codec_kinds(views[start:])
    head = start + (header is not None)
    return load(views[head], [received_buffer(f) for f in frames[head + 1:]], header, find_class,
                decode, signed=start > 0)
