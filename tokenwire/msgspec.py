"""TokenVector as a msgspec value: msgpack Ext hooks, out-of-band frames, JSON hooks.

Needs the optional `msgspec` package (``pip install 'tokenwire[msgspec]'``); importing
`tokenwire` itself never imports it.

**msgpack hooks.** A TokenVector anywhere in a message (a Struct field, a dict value, a list
item) is written as one msgpack Ext of type `EXT_CODE` whose payload is a tokenwire frame (the
"raw" codec by default), and read back as a TokenVector, for fields typed ``TokenVector``,
``Optional[TokenVector]`` and in untyped positions::

    from tokenwire.msgspec import enc_hook, ext_hook, dec_hook
    encoder = msgspec.msgpack.Encoder(enc_hook=enc_hook)
    decoder = msgspec.msgpack.Decoder(Request, ext_hook=ext_hook, dec_hook=dec_hook)

Decoding views the message instead of copying when `decode` would (a raw frame in immutable
memory such as `bytes`, whose ids land 4-byte aligned; otherwise one memcpy). `EXT_CODE` (84)
lies outside 1-5, the codes vLLM's own encoder uses; `Hooks(ext_code=..., codec=...)` makes hooks
with another code or codec, and chains your own hooks for every other type.

**Out-of-band frames** (the layout of vLLM's ``MsgpackEncoder``): ``Encoder().encode(obj)``
returns ``[main, *buffers]``; a TokenVector of at least `threshold` bytes is not copied into the
message but handed over as its own buffer (a view of its memory), referenced from the main frame
by an Ext of type `BUFFER_EXT_CODE` holding the buffer's index and id count; smaller ones are
inline Exts. ``Decoder(T).decode(frames)`` takes bytes / memoryviews / ``zmq.Frame`` objects
and views buffers in immutable memory (bytes, `ImmutableBuffer`); `Decoder.recv` receives from
a pyzmq socket and views the frames read from a tcp or ipc stream (libzmq never rewrites a
received message), copying once those received over inproc (the sender's own memory)::

    socket.send_multipart(Encoder().encode(request), copy=False)
    request = Decoder(Request).recv(socket)

**A list[int] field stays a list.** msgspec encodes it as it always did; the fast path is a
field typed TokenVector, filled with `as_tokens` (the user's choice, made once, where the ids
come from). The shape of vLLM's engine-core request::

    class EngineCoreRequest(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
        request_id: str
        prompt_token_ids: Optional[TokenVector]       # was Optional[list[int]]
        sampling_params: Optional[SamplingParams]
        eos_token_id: Optional[int]
        arrival_time: float
        priority: int = 0

    req = EngineCoreRequest("r1", as_tokens(ids), params, 2, time.time())
    frames = Encoder().encode(req)                     # [main, buffer of the ids]
    req = Decoder(EngineCoreRequest).decode(frames)    # req.prompt_token_ids views frames[1]

**JSON.** `json_enc_hook` writes a TokenVector as the `to_base64` string of its frame (about 3
characters per 18-bit id), `Hooks(json_array=True).json_enc_hook` as a plain JSON array of
ints; `dec_hook` reads a field typed TokenVector from either form. In an untyped position a JSON
string stays a string (JSON has no tag to say what it is): call `from_base64` on it.

Bad input is treated as `decode` treats it: a damaged Ext payload raises WireFormatError saying
what is wrong with the frame, a damaged out-of-band reference (wrong size, index outside the
message, buffer size not matching the id count) raises WireFormatError naming the index and
sizes, malformed msgpack raises msgspec.DecodeError, a wrong type raises msgspec.ValidationError.
Nothing is allocated before the sizes are checked against the bytes received.
"""

from __future__ import annotations

import struct
import sys
import threading
from typing import TYPE_CHECKING, Any, Callable, Iterable, List, Optional, cast

try:
    import msgspec  # the msgspec package (absolute import: this module is tokenwire.msgspec)
except ImportError as e:
    raise ImportError(
        f"tokenwire.msgspec needs the msgspec package: pip install 'tokenwire[msgspec]' ({e})"
    ) from e

from tokenwire._core import TokenVector, as_tokens, check_codec, decode, encode
from tokenwire.errors import WireFormatError
from tokenwire.text import from_base64, to_base64
from tokenwire.transport import OOB_THRESHOLD, received_buffer

if TYPE_CHECKING:
    from tokenwire._core import _Codec

__all__ = [
    "BUFFER_EXT_CODE",
    "EXT_CODE",
    "OOB_THRESHOLD",
    "Decoder",
    "Encoder",
    "Hooks",
    "dec_hook",
    "enc_hook",
    "ext_hook",
    "json_enc_hook",
]

#: msgpack Ext type of an inline TokenVector (payload: a tokenwire frame). 84 is "T"; vLLM's
#: encoder uses 1-5 for its own types.
EXT_CODE = 84
#: msgpack Ext type of a reference to an out-of-band buffer (`Encoder` / `Decoder`).
BUFFER_EXT_CODE = 85

# An out-of-band reference: the buffer's index in [main, *buffers], the number of ids it holds.
_REF = struct.Struct("<IQ")
_LITTLE_ENDIAN = sys.byteorder == "little"
_Ext = msgspec.msgpack.Ext


def _check_ext_code(name: str, code: int) -> int:
    if not isinstance(code, int) or not -128 <= code <= 127:
        raise ValueError(f"{name} must be an int in [-128, 127] (a msgpack Ext type), got {code!r}")
    return code


class Hooks:
    """`enc_hook` / `ext_hook` / `dec_hook` / `json_enc_hook` for msgspec, carrying TokenVectors.

    ext_code: the msgpack Ext type of a TokenVector (default `EXT_CODE`).
    codec, checksum: how the Ext payload's frame is encoded (see `encode`); "raw" decodes
        without a copy, "auto"/"packed" make it smaller.
    vocab_size: when given, decoding checks every id is in [0, vocab_size).
    json_array: `json_enc_hook` writes a JSON array of ints instead of a base64 string.
    urlsafe: the base64 alphabet of the JSON string.
    enc_hook, ext_hook, dec_hook: your hooks, called for every other type / Ext code (without
        them: TypeError "Encoding objects of type X is unsupported", an `Ext` object, a
        msgspec.ValidationError "Expected `X`, got `Y`", as msgspec says without hooks).
    """

    __slots__ = ("ext_code", "codec", "checksum", "vocab_size", "json_array", "urlsafe",
                 "_next_enc", "_next_ext", "_next_dec")

    def __init__(self, *, ext_code: int = EXT_CODE, codec: _Codec = "raw", checksum: bool = False,
                 vocab_size: Optional[int] = None, json_array: bool = False,
                 urlsafe: bool = False,
                 enc_hook: Optional[Callable[[Any], Any]] = None,
                 ext_hook: Optional[Callable[[int, memoryview], Any]] = None,
                 dec_hook: Optional[Callable[[type, Any], Any]] = None) -> None:
        self.ext_code = _check_ext_code("ext_code", ext_code)
        check_codec(codec)                       # an unknown codec fails here, not mid-message
        self.codec = codec
        self.checksum = bool(checksum)
        self.vocab_size = vocab_size
        self.json_array = bool(json_array)
        self.urlsafe = bool(urlsafe)
        self._next_enc = enc_hook
        self._next_ext = ext_hook
        self._next_dec = dec_hook

    def enc_hook(self, obj: Any) -> Any:
        """msgpack: a TokenVector becomes ``Ext(ext_code, frame)``."""
        if type(obj) is TokenVector:
            return _Ext(self.ext_code, encode(obj, codec=self.codec, checksum=self.checksum))
        if self._next_enc is not None:
            return self._next_enc(obj)
        raise TypeError(f"Encoding objects of type {type(obj).__name__} is unsupported")

    def ext_hook(self, code: int, data: memoryview) -> Any:
        """msgpack: ``Ext(ext_code, frame)`` becomes a TokenVector (a view of the message when
        `decode` allows it). Other codes go to your ext_hook, or come back as `Ext` objects."""
        if code == self.ext_code:
            return decode(data, vocab_size=self.vocab_size)
        if self._next_ext is not None:
            return self._next_ext(code, data)
        return _Ext(code, bytes(data))

    def dec_hook(self, type_: type, obj: Any) -> Any:
        """msgpack and JSON: a field typed TokenVector accepts what `ext_hook` made, a base64
        string (JSON) or an array of ints (a peer that sent a list)."""
        if type_ is TokenVector:
            if type(obj) is TokenVector:
                return obj
            if isinstance(obj, str):
                return from_base64(obj, vocab_size=self.vocab_size, urlsafe=self.urlsafe)
            if isinstance(obj, list):
                try:
                    return as_tokens(obj, vocab_size=self.vocab_size)
                except OverflowError as e:           # msgspec reports ValueErrors with a path
                    raise ValueError(str(e)) from None
            raise TypeError(f"expected a TokenVector (Ext {self.ext_code}, base64 string or "
                            f"array of ints), got {type(obj).__name__}")
        if self._next_dec is not None:
            return self._next_dec(type_, obj)
        if isinstance(obj, type_):               # an Ext-made value in a field typed `object`
            return obj
        raise TypeError(f"Expected `{getattr(type_, '__name__', type_)}`, got "
                        f"`{type(obj).__name__}`")

    def json_enc_hook(self, obj: Any) -> Any:
        """JSON: a TokenVector becomes the `to_base64` string of its frame (codec "auto" when
        this Hooks' codec is "raw": text is for size), or an array of ints with json_array."""
        if type(obj) is TokenVector:
            if self.json_array:
                return obj.tolist()
            codec = "auto" if self.codec == "raw" else self.codec
            return to_base64(obj, codec=codec, checksum=self.checksum, urlsafe=self.urlsafe)
        if self._next_enc is not None:
            return self._next_enc(obj)
        raise TypeError(f"Encoding objects of type {type(obj).__name__} is unsupported")


_DEFAULT = Hooks()
#: The hooks with the defaults (Ext `EXT_CODE`, raw frames, base64 JSON); `Hooks(...)` for others.
enc_hook = _DEFAULT.enc_hook
ext_hook = _DEFAULT.ext_hook
dec_hook = _DEFAULT.dec_hook
json_enc_hook = _DEFAULT.json_enc_hook


class Encoder:
    """msgpack with out-of-band buffers: ``encode(obj) -> [main, *buffers]``.

    A TokenVector of at least `threshold` bytes (default `OOB_THRESHOLD`, 64 KiB: 16,384 ids)
    goes into a buffer of its own, a zero-copy view of its memory (keep the vector alive until
    the frames are sent); smaller ones are inline Exts as `Hooks` writes them. ``threshold=None``
    keeps everything inline. `channel` (a `tokenwire.shm.Sender`): the buffers go through its
    shared-memory slots when they can, and the message is ``[descriptor, main, *frames]``.
    Other keywords: see `Hooks`.
    """

    def __init__(self, *, threshold: Optional[int] = OOB_THRESHOLD, ext_code: int = EXT_CODE,
                 buffer_ext_code: int = BUFFER_EXT_CODE, codec: _Codec = "raw",
                 checksum: bool = False, enc_hook: Optional[Callable[[Any], Any]] = None,
                 channel: Any = None) -> None:
        self.channel = channel
        self.hooks = Hooks(ext_code=ext_code, codec=codec, checksum=checksum, enc_hook=enc_hook)
        self.buffer_ext_code = _check_ext_code("buffer_ext_code", buffer_ext_code)
        if buffer_ext_code == ext_code:
            raise ValueError(f"buffer_ext_code and ext_code must differ, both are {ext_code}")
        self.threshold = threshold
        self._encoder = msgspec.msgpack.Encoder(enc_hook=self._enc_hook)
        self._local = threading.local()          # the buffers of the message being encoded

    def encode(self, obj: Any) -> List[Any]:
        """``[main, *buffers]``: `main` is `bytes`, each buffer a memoryview of a TokenVector."""
        frames: List[Any] = [b""]
        local = self._local
        local.frames = frames
        try:
            frames[0] = self._encoder.encode(obj)
        finally:
            local.frames = None
        if self.channel is not None:
            desc, rest = self.channel.place(frames[1:])
            return [desc, frames[0], *rest]
        return frames

    def send(self, socket: Any, obj: Any, flags: int = 0) -> None:
        """Send `obj` on a pyzmq socket as one multipart message (``copy=False``)."""
        socket.send_multipart(self.encode(obj), flags=flags, copy=False)

    def _enc_hook(self, obj: Any) -> Any:
        if type(obj) is TokenVector and self.threshold is not None and obj.nbytes >= self.threshold:
            frames = self._local.frames
            index = len(frames)
            if _LITTLE_ENDIAN:
                frames.append(memoryview(cast(Any, obj)))   # (the stub lacks __buffer__)
            else:                                # the wire is little-endian: a raw frame's payload
                frame = encode(obj, codec="raw")
                frames.append(memoryview(frame)[len(frame) - obj.nbytes:])
            return _Ext(self.buffer_ext_code, _REF.pack(index, len(obj)))
        return self.hooks.enc_hook(obj)


def _is_buffer(obj: Any) -> bool:
    try:
        memoryview(obj).release()
    except TypeError:
        return False
    return True


class Decoder:
    """The counterpart of `Encoder`: ``Decoder(T).decode([main, *buffers])`` returns a T.

    type: what to decode (a Struct type, ``Any``, ...), as for ``msgspec.msgpack.Decoder``.
    `channel` (a `tokenwire.shm.Receiver`) when the encoder has one. Other keywords: see `Hooks`.
    """

    def __init__(self, type: Any = Any, *, ext_code: int = EXT_CODE,
                 buffer_ext_code: int = BUFFER_EXT_CODE, vocab_size: Optional[int] = None,
                 ext_hook: Optional[Callable[[int, memoryview], Any]] = None,
                 dec_hook: Optional[Callable[[type, Any], Any]] = None,
                 channel: Any = None) -> None:
        self.channel = channel
        self.hooks = Hooks(ext_code=ext_code, vocab_size=vocab_size, ext_hook=ext_hook,
                           dec_hook=dec_hook)
        self.buffer_ext_code = _check_ext_code("buffer_ext_code", buffer_ext_code)
        if buffer_ext_code == ext_code:
            raise ValueError(f"buffer_ext_code and ext_code must differ, both are {ext_code}")
        self.vocab_size = vocab_size
        self._decoder = msgspec.msgpack.Decoder(type, ext_hook=self._ext_hook,
                                                dec_hook=self.hooks.dec_hook)
        self._local = threading.local()          # the frames of the message being decoded

    def decode(self, frames: Iterable[Any]) -> Any:
        """Decode ``[main, *buffers]`` (bytes, memoryviews, ``zmq.Frame`` objects, ...), or a
        message of one frame given as itself.

        A buffer in immutable memory (`bytes`, an `ImmutableBuffer`) is viewed, others are
        copied once. Raises WireFormatError for a bad reference, msgspec.DecodeError for bad
        msgpack, msgspec.ValidationError for a value of the wrong type.
        """
        if type(frames) is not list:
            frames = [frames] if _is_buffer(frames) else list(frames)   # one frame: no buffers
        if self.channel is not None:             # [descriptor, main, *frames]: slots copied out
            if len(frames) < 2:
                raise WireFormatError("a channel message has a descriptor and a main frame")
            frames = [frames[1], *self.channel.take(frames[0], frames[2:])]
        if not frames:
            raise WireFormatError("Decoder.decode() got no frames (needs the main frame)")
        local = self._local
        local.frames = frames
        local.made = {}
        try:
            return self._decoder.decode(frames[0])
        except UnicodeDecodeError as e:
            # msgspec before 0.21 (the last release for Python 3.9 is 0.20) lets a string that is
            # not UTF-8 escape as UnicodeDecodeError; later releases raise DecodeError. One
            # documented error whatever the msgspec version.
            raise msgspec.DecodeError(f"invalid UTF-8 in a msgpack string: {e}") from None
        finally:
            local.frames = None
            local.made = None

    def recv(self, socket: Any, flags: int = 0) -> Any:
        """Receive one multipart message from a pyzmq socket and decode it. A frame read from
        a tcp or ipc stream is viewed (libzmq alone holds its memory and never rewrites it); one
        received over inproc is the sender's memory, which it may still write, and is copied
        once (`tokenwire.transport.received_buffer`)."""
        frames = socket.recv_multipart(flags=flags, copy=False)
        return self.decode([received_buffer(f) for f in frames])

    def _ext_hook(self, code: int, data: memoryview) -> Any:
        if code != self.buffer_ext_code:
            return self.hooks.ext_hook(code, data)
        if len(data) != _REF.size:
            raise WireFormatError(
                f"out-of-band reference (Ext {code}) has {len(data)} bytes, expected {_REF.size}")
        index, count = _REF.unpack(data)
        frames = self._local.frames
        if frames is None:
            raise WireFormatError(
                f"out-of-band reference (Ext {code}) outside Decoder.decode(): no buffers")
        if not 1 <= index < len(frames):
            raise WireFormatError(
                f"out-of-band reference to frame {index}, but the message has "
                f"{len(frames) - 1} buffer(s) (frames 1..{len(frames) - 1})")
        made = self._local.made
        tv = made.get(index)
        if tv is not None:
            # Another reference to a frame already read: the same vector, never a second copy
            # (a message naming one frame many times would otherwise cost its size each time).
            if len(tv) != count:
                raise WireFormatError(
                    f"out-of-band frame {index} is referenced with {count} ids, an earlier "
                    f"reference said {len(tv)}")
            return tv
        buf = frames[index]
        nbytes = memoryview(buf).nbytes
        if nbytes != 4 * count:
            raise WireFormatError(
                f"out-of-band frame {index} has {nbytes} bytes, its reference says {count} ids "
                f"({4 * count} bytes)")
        tv = TokenVector.frombuffer(buf)
        if self.vocab_size is not None:
            try:
                as_tokens(tv, vocab_size=self.vocab_size)       # checks, returns tv itself
            except ValueError as e:
                raise WireFormatError(f"out-of-band frame {index}: {e}") from None
        made[index] = tv
        return tv
