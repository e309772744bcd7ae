"""TokenVector as a msgspec value: `Encoder` / `Decoder` (msgpack with out-of-band frames), and
`Hooks`, the hooks a stack plugs into its own msgspec encoder and decoder (msgpack and JSON).

Needs the optional `msgspec` package (``pip install 'tokenwire[msgspec]'``); importing
`tokenwire` itself never imports it. The guide (hooks, out-of-band frames, a host's own buffer
list, JSON, bad input) is docs/msgspec.md; each name's reference, the API reference (docs/api/).
"""

from __future__ import annotations

import struct
import sys
import threading
import types
import typing
import weakref
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Optional, Sequence, \
    Tuple, cast

try:
    import msgspec  # the msgspec package (absolute import: this module is tokenwire.msgspec)
except ImportError as e:
    raise ImportError(
        f"tokenwire.msgspec needs the msgspec package: pip install 'tokenwire[msgspec]' ({e})"
    ) from e

from tokenwire._core import TokenVector, _buffer_address, as_tokens, check_codec, decode, encode
from tokenwire.errors import TokenIdError, TokenIdTypeError, WireFormatError, _describe
from tokenwire.text import from_base64, to_base64
from tokenwire._oob import OOB_THRESHOLD
from tokenwire.transport import (NETWORK_CODEC, received_buffer, recv_frames, send_frames,
                                 socket_codec)

if TYPE_CHECKING:
    from tokenwire._core import _Codec

__all__ = ["Decoder", "Encoder", "Hooks"]

# The default Ext types (Hooks.EXT_CODE, Hooks.BUFFER_EXT_CODE).
_EXT_CODE = 84
_BUFFER_EXT_CODE = 85

# An out-of-band reference: the buffer's index in [main, *buffers], the number of ids it holds.
# 12 bytes: the buffer is the ids themselves (int32 little-endian, codec "raw": viewed in place);
# 13 bytes, the last one _FRAMED: the buffer is a tokenwire frame (any codec: decoded once).
_REF = struct.Struct("<IQ")
_REF_FRAMED = struct.Struct("<IQB")
_FRAMED = 1
_LITTLE_ENDIAN = sys.byteorder == "little"
_Ext = msgspec.msgpack.Ext


def _is_ndarray(obj: Any) -> bool:
    np = sys.modules.get("numpy")        # an ndarray exists only once numpy is imported
    return np is not None and isinstance(obj, np.ndarray)


def _array_ids(obj: Any) -> Any:
    """An ndarray given where a TokenVector goes: a 1-D C-contiguous native int32 array itself
    (its memory is sent as it is), any other integer array as a TokenVector (`as_tokens`:
    one checked copy); anything else is not token ids (TokenIdTypeError naming `as_tokens`)."""
    dtype, ndim = obj.dtype, obj.ndim
    if dtype.kind in "iu" and ndim == 1:
        if dtype.kind == "i" and dtype.itemsize == 4 and dtype.isnative and obj.flags.c_contiguous:
            return obj
        return as_tokens(obj)
    raise TokenIdTypeError(
        f"a numpy array of dtype {obj.dtype} and {ndim} dimension(s) is not token ids: a "
        f"TokenVector is a 1-D integer array (make one with tokenwire.as_tokens(ids))")


def _vocab_checked(tv: TokenVector, vocab_size: Optional[int], where: str = "") -> TokenVector:
    """`tv`, its ids checked against `vocab_size`: TokenIdError, whatever path the ids took
    (an inline Ext, an out-of-band frame, a list), naming `where` when given."""
    if vocab_size is not None:
        try:
            as_tokens(tv, vocab_size=vocab_size)            # checks, returns tv itself
        except TokenIdError as e:
            raise TokenIdError(f"{where}{e}") from None
    return tv


def _check_ext_code(name: str, code: int) -> int:
    if not isinstance(code, int) or not -128 <= code <= 127:
        raise ValueError(f"{name} must be an int in [-128, 127] (a msgpack Ext type), "
                         f"got {_describe(code)}")
    return code


def _msgpack_array_header(n: int) -> int:
    return 1 if n < 16 else 3 if n < 65536 else 5


def _msgpack_ext_header(n: int) -> int:
    if n in (1, 2, 4, 8, 16):
        return 2
    return 3 if n < 256 else 4 if n < 65536 else 6


def _msgpack_list_bytes(tv: TokenVector, at_most: int) -> int:
    """A lower bound of the bytes msgpack writes for ``tv.tolist()``, exact when the quick bounds
    do not already show it is above `at_most`. An int takes 1 byte in [-32, 128), 2 in
    [-128, 256), 3 in [-32768, 65536), 5 otherwise (int32)."""
    n = len(tv)
    low = _msgpack_array_header(n) + n               # every id takes at least one byte
    if low > at_most or n == 0:
        return low
    import numpy as np         # here, not at the top: importing this module leaves numpy out
    a = np.frombuffer(cast(Any, tv), dtype=np.int32)
    small = int(np.count_nonzero(a < 256))          # one pass: ids >= 256 take 3 bytes or more
    low = _msgpack_array_header(n) + 3 * n - 2 * small
    if low > at_most:
        return low
    # Rare (many ids below 256 and a few large ones): the exact size.
    return (_msgpack_array_header(n) + n
            + int(np.count_nonzero((a >= 128) | (a < -32)))
            + int(np.count_nonzero((a >= 256) | (a < -128)))
            + 2 * int(np.count_nonzero((a >= 65536) | (a < -32768))))


class Hooks:
    """The hooks a msgspec encoder and decoder need to carry TokenVectors:
    ``hooks = Hooks()``, then ``msgspec.msgpack.Encoder(enc_hook=hooks.enc_hook)`` and
    ``msgspec.msgpack.Decoder(T, ext_hook=hooks.ext_hook, dec_hook=hooks.dec_hook)`` (msgpack),
    ``enc_hook=hooks.json_enc_hook`` / ``dec_hook=hooks.dec_hook`` (JSON), and
    `aux_enc_hook` / `aux_ext_hook` for a host encoder that keeps its own buffer list.

    A numpy integer array where a TokenVector goes is sent as one (a native int32 array's own
    memory, any other integer dtype converted by `as_tokens`); an array of another dtype is
    refused with TokenIdTypeError. With your own `enc_hook`, ndarrays go to it instead.
    An id outside `vocab_size` is a TokenIdError whatever path it took (inline, out of band,
    a list); from msgspec's decoder, whose `dec_hook` errors become ``msgspec.ValidationError``,
    a list's is that error with the TokenIdError as its ``__cause__`` (`Decoder` raises the
    TokenIdError itself).

    Args:
        ext_code: the msgpack Ext type of a TokenVector (default `Hooks.EXT_CODE`).
        codec, checksum: how the Ext payload's frame is encoded (see `encode`). The default "auto"
            is the smallest of raw / u16 / packed, and a vector whose Ext would take more bytes
            than msgpack's list of the same ids is written as that list (a field typed
            TokenVector reads it back): the default never sends more than the list it replaces.
            "raw" (4 bytes per id) decodes without a copy; a forced codec is always used.
        vocab_size: when given, decoding checks every id is in [0, vocab_size).
        json_array: `json_enc_hook` writes a JSON array of ints instead of a base64 string.
        urlsafe: the base64 alphabet of the JSON string.
        threshold, buffer_ext_code: `aux_enc_hook` puts a TokenVector of at least `threshold`
            bytes (``None``: never) into the host's buffer list, referenced by an Ext of type
            `buffer_ext_code` (default `Hooks.BUFFER_EXT_CODE`).
        oob_codec: the codec of those out-of-band buffers (default None: `codec`), apart from the
            inline Exts': a socket-aware encoder sends them raw on the host and compact across a
            network while its inline Exts stay "auto".
        enc_hook, ext_hook, dec_hook: your hooks, called for every other type / Ext code (without
            them: TypeError "Encoding objects of type X is unsupported", an `Ext` object, a
            msgspec.ValidationError "Expected `X`, got `Y`", as msgspec says without hooks).
    """

    #: msgpack Ext type of an inline TokenVector (payload: a tokenwire frame). 84 is "T";
    #: vLLM's encoder uses 1-5 for its own types.
    EXT_CODE = _EXT_CODE
    #: msgpack Ext type of a reference to an out-of-band buffer (`Encoder` / `Decoder`).
    BUFFER_EXT_CODE = _BUFFER_EXT_CODE

    __slots__ = ("ext_code", "codec", "oob_codec", "checksum", "vocab_size", "json_array",
                 "urlsafe", "threshold", "buffer_ext_code", "_next_enc", "_next_ext",
                 "_next_dec", "_local")

    def __init__(self, *, ext_code: int = _EXT_CODE, codec: _Codec = "auto",
                 checksum: bool = False, vocab_size: Optional[int] = None,
                 json_array: bool = False, urlsafe: bool = False,
                 threshold: Optional[int] = OOB_THRESHOLD,
                 buffer_ext_code: int = _BUFFER_EXT_CODE,
                 enc_hook: Optional[Callable[[Any], Any]] = None,
                 ext_hook: Optional[Callable[[int, memoryview], Any]] = None,
                 dec_hook: Optional[Callable[[type, Any], Any]] = None,
                 oob_codec: Optional[_Codec] = None) -> None:
        self.ext_code = _check_ext_code("ext_code", ext_code)
        self.buffer_ext_code = _check_ext_code("buffer_ext_code", buffer_ext_code)
        if buffer_ext_code == ext_code:
            raise ValueError(f"buffer_ext_code and ext_code must differ, both are {ext_code}")
        check_codec(codec)                       # an unknown codec fails here, not mid-message
        self.codec = codec
        if oob_codec is not None:
            check_codec(oob_codec)
        self.oob_codec: _Codec = codec if oob_codec is None else oob_codec
        self.checksum = bool(checksum)
        self.vocab_size = vocab_size
        self.json_array = bool(json_array)
        self.urlsafe = bool(urlsafe)
        if threshold is not None and (not isinstance(threshold, int) or threshold < 0):
            raise ValueError(f"threshold must be None or an int >= 0, got {_describe(threshold)}")
        self.threshold = threshold
        self._next_enc = enc_hook
        self._next_ext = ext_hook
        self._next_dec = dec_hook
        self._local = threading.local()          # aux_ext_hook: this thread's _AuxRecord

    def _frame(self, tv: TokenVector, reference: Optional[int] = None,
               codec: Optional[_Codec] = None) -> Any:
        """`tv`'s frame in `codec` (default: this Hooks' inline codec), or its list when that
        is "auto" and what the message would hold (the frame in an Ext, or a `reference`-byte
        Ext plus the frame) is larger than msgpack's list of the ids: the one place of the rule
        that the default never sends more."""
        codec = self.codec if codec is None else codec
        frame = encode(tv, codec=codec, checksum=self.checksum)
        if codec == "auto":
            ext = len(frame) if reference is None else reference
            size = len(frame) + (reference or 0) + _msgpack_ext_header(ext)
            if _msgpack_list_bytes(tv, size) < size:
                return tv.tolist()
        return frame

    def enc_hook(self, obj: Any) -> Any:
        """msgpack: a TokenVector becomes ``Ext(ext_code, frame)`` (or, under "auto", a list
        of ints when that is smaller)."""
        if type(obj) is TokenVector:
            frame = self._frame(obj)
            return frame if type(frame) is list else _Ext(self.ext_code, frame)
        if self._next_enc is not None:
            return self._next_enc(obj)
        if _is_ndarray(obj):
            return self.enc_hook(as_tokens(_array_ids(obj)))
        raise TypeError(f"Encoding objects of type {type(obj).__name__} is unsupported")

    def _out_of_band(self, obj: Any) -> bool:
        """Whether `aux_enc_hook` sends `obj` as a buffer of its own: a TokenVector of at least
        `threshold` bytes."""
        return type(obj) is TokenVector and self.threshold is not None \
            and obj.nbytes >= self.threshold

    def aux_enc_hook(self, obj: Any, buffers: Optional[List[Any]]) -> Any:
        """`enc_hook` for an encoder that keeps its own list of out-of-band buffers (``[main,
        *buffers]``, as vLLM's ``MsgpackEncoder.aux_buffers``): a TokenVector of at least
        `threshold` bytes is appended to `buffers` and replaced by an
        ``Ext(buffer_ext_code, reference)``; smaller ones and other types go to `enc_hook`.
        Under `oob_codec` "raw" the buffer is a view of the vector (keep it alive until sent),
        under others a frame of its own; a native int32 ndarray is viewed the same way (do not
        write it until sent). `buffers` None (called outside the host's encode) raises
        ValueError."""
        if self._next_enc is None and _is_ndarray(obj):
            ids = _array_ids(obj)
            if type(ids) is not TokenVector and self.threshold is not None \
                    and ids.nbytes >= self.threshold and buffers is not None \
                    and self.oob_codec == "raw" and not self.checksum and _LITTLE_ENDIAN:
                buffers.append(memoryview(ids))           # the array's own memory: no copy
                return _Ext(self.buffer_ext_code, _REF.pack(len(buffers) - 1, len(ids)))
            obj = as_tokens(ids)
        if not self._out_of_band(obj):
            return self.enc_hook(obj)
        if buffers is None:
            raise ValueError("aux_enc_hook got no buffer list (None): call it from the host "
                             "encoder's enc_hook while it encodes, with its aux buffer list")
        index = len(buffers)
        if self.oob_codec == "raw" and not self.checksum:
            if _LITTLE_ENDIAN:
                buffers.append(memoryview(cast(Any, obj)))   # (the stub lacks __buffer__)
            else:                                # the wire is little-endian: a raw frame's payload
                frame = encode(obj, codec="raw")
                buffers.append(memoryview(frame)[len(frame) - obj.nbytes:])
            return _Ext(self.buffer_ext_code, _REF.pack(index, len(obj)))
        frame = self._frame(obj, _REF_FRAMED.size, self.oob_codec)
        if type(frame) is list:
            return frame
        buffers.append(frame)
        return _Ext(self.buffer_ext_code, _REF_FRAMED.pack(index, len(obj), _FRAMED))

    def ext_hook(self, code: int, data: memoryview) -> Any:
        """msgpack: ``Ext(ext_code, frame)`` becomes a TokenVector (a view of the message when
        `decode` allows it). Other codes go to your ext_hook, or come back as `Ext` objects."""
        if code == self.ext_code:
            return _vocab_checked(decode(data), self.vocab_size)
        if self._next_ext is not None:
            return self._next_ext(code, data)
        return _Ext(code, bytes(data))

    def aux_ext_hook(self, code: int, data: memoryview, buffers: Optional[Sequence[Any]]) -> Any:
        """`ext_hook` for a decoder that keeps the message's frames (``[main, *buffers]``, as
        vLLM's ``MsgpackDecoder.aux_buffers``): ``Ext(buffer_ext_code, reference)`` becomes
        the TokenVector of the buffer it names; other codes go to `ext_hook`. A buffer named
        twice in one message is read once (the same vector comes back): the hook knows the
        `buffers` list it reads on this thread, by the identity of the list and of the buffer
        object, and the vectors it made from it. So give each message its own list (as a
        decoder of received frames does: ``recv_multipart`` returns a new one); a list reused
        with a buffer object rewritten in place would read the earlier vector. The hook lets
        go of the list when every vector it made from it is dropped, or a reference fails:
        once the decoded message and its frames are dropped, they are freed. A frame whose
        vectors are dropped while the message still names it is read again, at most 64 times
        in one message (one host decode, whatever it dropped in between; WireFormatError past
        that).
        A bad reference, or `buffers` None, raises WireFormatError."""
        if code != self.buffer_ext_code:
            return self.ext_hook(code, data)
        try:
            record = self._local.record
        except AttributeError:
            record = self._local.record = _AuxRecord()
        at = _buffer_address(data)
        if record.buffers is not buffers:
            record.begin(buffers, data.obj, at)
        record.at = at
        try:
            return _resolve(self, code, data, buffers, record.made, record.forget, record.decoded)
        except BaseException:
            record.release()
            raise

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
        if _is_ndarray(obj):
            return self.json_enc_hook(as_tokens(_array_ids(obj)))
        raise TypeError(f"Encoding objects of type {type(obj).__name__} is unsupported")


_NO_LIST: Any = object()


class _VectorRef(weakref.ref[TokenVector]):
    """A weak reference to a vector aux_ext_hook read from frame `index` of a message."""

    __slots__ = ("index",)
    index: int


class _AuxRecord:
    """What aux_ext_hook knows, on one thread, of the message it reads: the host's frame list,
    the vectors made from it (index -> (buffer, _VectorRef)) and how often each frame was
    decoded. The vectors are held weakly; a dropped one is forgotten alone (`forget`), and the
    list is let go once none is left, so the record never keeps a message's frames -- the
    host's tensors among them -- alive after the message itself.

    A frame decoded more than _MAX_DECODES times in one message is refused: a message that
    names frames again and again, dropping what it made (a msgpack map repeating a key), cannot
    make the hook decode them without bound. The counts outlive the list: a message is one
    host decode, and msgspec reads its Exts in order from the one buffer it decodes, so a
    reference in the same list (by id: the list itself is let go), from the same buffer, at a
    later address than the last one read, is the same message and its counts go on; any other
    starts a message with none."""

    __slots__ = ("buffers", "made", "decodes", "forget", "message", "at")

    def __init__(self) -> None:
        self.buffers: Any = _NO_LIST
        self.made: Dict[int, Tuple[Any, Any]] = {}
        self.decodes: Dict[int, int] = {}
        self.forget = self._forget               # the callback of each _VectorRef, made once
        self.message: Tuple[int, int] = (0, 0)   # ids of the list and of the decoded buffer
        self.at = 0                              # the address of the last reference read

    def _forget(self, ref: _VectorRef) -> None:
        entry = self.made.get(ref.index)
        if entry is not None and entry[1] is ref:            # a vector of the current message
            del self.made[ref.index]
            if not self.made:                    # let the list go, keep the counts
                self.buffers = _NO_LIST

    def begin(self, buffers: Any, source: Any, at: int) -> None:
        """A reference in a list the record does not hold: the message whose list it let go
        read on (its counts go on), or a new message."""
        message = (id(buffers), id(source))
        if not (self.buffers is _NO_LIST and message == self.message and at > self.at):
            self.decodes = {}
        self.buffers, self.made, self.message = buffers, {}, message

    def release(self) -> None:
        self.buffers = _NO_LIST
        self.made = {}
        self.decodes = {}
        self.message = (0, 0)

    def decoded(self, index: int) -> None:
        count = self.decodes.get(index, 0) + 1
        if count > _MAX_DECODES:
            raise WireFormatError(f"out-of-band frame {index} is read more than {_MAX_DECODES} "
                                  f"times in one message (its vectors dropped between reads)")
        self.decodes[index] = count


#: How often aux_ext_hook reads one frame of a message again after the vectors made from it
#: were dropped (a message that keeps its vectors reads each frame once).
_MAX_DECODES = 64


def _resolve(hooks: Hooks, code: int, data: memoryview, frames: Optional[Sequence[Any]],
             made: Dict[int, Tuple[Any, Any]],
             forget: Optional[Callable[[Any], None]] = None,
             decoded: Optional[Callable[[int], None]] = None) -> TokenVector:
    """The TokenVector an out-of-band reference names in `frames` ([main, *buffers]); `made`
    holds those already read from this message (index -> (buffer, vector)), each vector as a
    _VectorRef calling `forget` when it is dropped, when there is a `forget`; `decoded(index)`
    is told of each frame read (it may refuse)."""
    size = len(data)
    if size == _REF.size:
        index, count = _REF.unpack(data)
        framed = False
    elif size == _REF_FRAMED.size:
        index, count, kind = _REF_FRAMED.unpack(data)
        if kind != _FRAMED:
            raise WireFormatError(
                f"out-of-band reference (Ext {code}) has buffer kind {kind}, expected "
                f"{_FRAMED} (a tokenwire frame)")
        framed = True
    else:
        raise WireFormatError(
            f"out-of-band reference (Ext {code}) has {size} bytes, expected {_REF.size} or "
            f"{_REF_FRAMED.size}")
    if frames is None:
        raise WireFormatError(
            f"out-of-band reference (Ext {code}) outside a decode of [main, *buffers]: "
            f"no buffers")
    if not 1 <= index < len(frames):
        raise WireFormatError(
            f"out-of-band reference to frame {index}, but the message has "
            f"{len(frames) - 1} buffer(s) (frames 1..{len(frames) - 1})")
    buf = frames[index]
    seen = made.get(index)
    if seen is not None and seen[0] is buf and (
            tv := seen[1] if forget is None else seen[1]()) is not None:
        # Another reference to a frame already read: the same vector, never a second copy
        # (a message naming one frame many times would otherwise cost its size each time).
        if len(tv) != count:
            raise WireFormatError(
                f"out-of-band frame {index} is referenced with {count} ids, an earlier "
                f"reference said {len(tv)}")
        return cast(TokenVector, tv)
    if decoded is not None:
        decoded(index)
    if framed:
        try:
            tv = decode(buf)
        except WireFormatError as e:
            raise WireFormatError(f"out-of-band frame {index}: {e}") from None
        if len(tv) != count:
            raise WireFormatError(
                f"out-of-band frame {index} holds {len(tv)} ids, its reference says {count}")
    else:
        nbytes = memoryview(buf).nbytes
        if nbytes != 4 * count:
            raise WireFormatError(
                f"out-of-band frame {index} has {nbytes} bytes, its reference says {count} "
                f"ids ({4 * count} bytes)")
        tv = TokenVector.frombuffer(buf)
    _vocab_checked(tv, hooks.vocab_size, f"out-of-band frame {index}: ")
    if forget is None:
        made[index] = (buf, tv)
    else:
        ref = _VectorRef(tv, forget)
        ref.index = index
        made[index] = (buf, ref)
    return tv


def _prefix_frames(prefix: Iterable[Any]) -> List[Any]:
    frames = list(prefix)
    for i, f in enumerate(frames):
        if not _is_buffer(f):
            raise TypeError(f"prefix frame {i} must be bytes-like (bytes, a zmq.Frame, ...), "
                            f"got {type(f).__name__}")
    return frames


def _check_prefix(prefix: int) -> None:
    if not isinstance(prefix, int) or prefix < 0:
        raise ValueError(f"prefix must be an int >= 0 (the number of leading frames), "
                         f"got {_describe(prefix)}")


def _split_prefix(frames: List[Any], prefix: int) -> Tuple[List[bytes], List[Any]]:
    # `prefix` checked by the caller (_check_prefix)
    if len(frames) <= prefix:
        raise WireFormatError(
            f"the message has {len(frames)} frame(s): expected {prefix} leading frame(s) and "
            f"then the message's own")
    return ([f if type(f) is bytes else memoryview(f).tobytes() for f in frames[:prefix]],
            frames[prefix:])


class Encoder:
    """msgpack with out-of-band buffers: ``encode(obj) -> [main, *buffers]``.

    A TokenVector of at least `threshold` bytes (default 64 KiB: 16,384 ids)
    goes into a buffer of its own; smaller ones are inline Exts as `Hooks` writes them.
    ``threshold=None`` keeps everything inline. The buffer is a frame of `codec` (default
    "auto": encoded once, never larger than msgpack's list of the ids; see `Hooks`), or with
    ``codec="raw"`` a zero-copy view of the vector's memory (keep the vector alive until the
    frames are sent). ``codec=None`` decides per message where it goes: `send` sends the
    buffers raw over ipc:// and inproc:// and compact ("pfor") over tcp:// (judged by the
    socket's ``zmq.LAST_ENDPOINT``, as `tokenwire.transport.send_pyobj_oob` judges), `encode`
    (no socket) raw; inline Exts are "auto".
    `channel` (a `tokenwire.shm.Sender`): the buffers go through its
    shared-memory slots when they can, and the message is ``[descriptor, main, *frames]``.
    Other keywords: see `Hooks`.

    Before anything is sent, a Struct's field typed ``TokenVector`` (or ``Optional[...]``) must
    hold ids (a TokenVector, list, tuple or integer ndarray; None when Optional): a str, bytes
    or number there is refused with TokenIdTypeError naming the field, where the receiver could
    only fail on it.
    """

    def __init__(self, *, threshold: Optional[int] = OOB_THRESHOLD, ext_code: int = _EXT_CODE,
                 buffer_ext_code: int = _BUFFER_EXT_CODE, codec: Optional[_Codec] = "auto",
                 checksum: bool = False, enc_hook: Optional[Callable[[Any], Any]] = None,
                 channel: Any = None) -> None:
        self.channel = channel
        self.codec = codec
        hook_args: Dict[str, Any] = dict(ext_code=ext_code, checksum=checksum,
                                         enc_hook=enc_hook, threshold=threshold,
                                         buffer_ext_code=buffer_ext_code)
        self.hooks = Hooks(codec="auto" if codec is None else codec, **hook_args)
        # codec=None: inline Exts "auto", out-of-band buffers in the codec a message's socket
        # picks (raw or NETWORK_CODEC; encode, without a socket: raw), one Hooks for each.
        self._by_oob_codec: Dict[str, Hooks] = {} if codec is not None else {
            c: Hooks(codec="auto", oob_codec=cast(Any, c), **hook_args)
            for c in ("raw", NETWORK_CODEC)}
        self.buffer_ext_code = buffer_ext_code
        self.threshold = threshold
        self._encoder = msgspec.msgpack.Encoder(enc_hook=self._enc_hook)
        self._local = threading.local()          # the buffers of the message being encoded

    def encode(self, obj: Any) -> List[Any]:
        """``[main, *buffers]``: `main` is `bytes`, each buffer a frame (`bytes`) or, under
        codec "raw" (and None), a memoryview of a TokenVector."""
        return self._encode(obj, "raw")

    def _encode(self, obj: Any, oob_codec: str) -> List[Any]:
        fields = _token_fields(type(obj))
        if fields:
            _check_token_fields(obj, fields)
        frames: List[Any] = [b""]
        local = self._local
        local.frames = frames
        local.hooks = self.hooks if self.codec is not None else self._by_oob_codec[oob_codec]
        try:
            frames[0] = self._encoder.encode(obj)
        finally:
            local.frames = None
            local.hooks = None
        if self.channel is not None:
            desc, rest = self.channel._place(frames[1:])
            return [desc, frames[0], *rest]
        return frames

    def send(self, socket: Any, obj: Any, flags: int = 0, *, prefix: Iterable[Any] = ()) -> None:
        """Send `obj` on a pyzmq socket as one multipart message (``copy=False``), after the
        `prefix` frames (a message type, a ROUTER identity: ``[*prefix, main, *buffers]``),
        which `Decoder.recv(socket, prefix=len(prefix))` hands back. Under ``codec=None`` the
        buffers are raw or compact by the socket's endpoint (a `channel`: raw)."""
        if self.codec is None and self.channel is None:
            frames = self._encode(obj, socket_codec(socket))
        else:
            frames = self.encode(obj)
        if prefix != ():
            frames = _prefix_frames(prefix) + frames
        if self.channel is not None:
            self.channel._send_frames(socket, frames, flags)   # a send that raises delivers nothing
        else:
            send_frames(socket, frames, flags)

    def _enc_hook(self, obj: Any) -> Any:
        local = self._local
        return local.hooks.aux_enc_hook(obj, local.frames)


#: Struct type -> its fields typed TokenVector: (name, whether None is allowed).
_TOKEN_FIELDS: "weakref.WeakKeyDictionary[type, Tuple[Tuple[str, bool], ...]]" = \
    weakref.WeakKeyDictionary()


def _token_fields(cls: type) -> Tuple[Tuple[str, bool], ...]:
    """The fields of Struct type `cls` typed ``TokenVector`` or ``Optional[TokenVector]``."""
    try:
        return _TOKEN_FIELDS[cls]
    except (KeyError, TypeError):
        pass
    found: List[Tuple[str, bool]] = []
    if isinstance(cls, type) and issubclass(cls, msgspec.Struct):
        try:
            infos = msgspec.structs.fields(cls)
        except Exception:                        # an annotation msgspec cannot resolve
            infos = ()
        for info in infos:
            kind = info.type
            if kind is TokenVector:
                found.append((info.name, False))
            elif typing.get_origin(kind) in (typing.Union, types.UnionType):
                args = typing.get_args(kind)
                if TokenVector in args and len(args) == 2 and type(None) in args:
                    found.append((info.name, True))
    fields = tuple(found)
    try:
        _TOKEN_FIELDS[cls] = fields
    except TypeError:
        pass
    return fields


#: What msgspec encodes for a TokenVector field that its decoder reads back as ids.
_IDS_TYPES = (TokenVector, list, tuple)


def _check_token_fields(obj: Any, fields: Tuple[Tuple[str, bool], ...]) -> None:
    """Refuse, before anything is sent, a value in a TokenVector field that msgspec would
    encode as it is (a str, bytes, a number) and the receiver could not read as ids."""
    for name, optional in fields:
        value = getattr(obj, name, None)
        if type(value) in _IDS_TYPES or value is None and optional or _is_ndarray(value):
            continue
        what = "None" if value is None else type(value).__name__
        raise TokenIdTypeError(
            f"{type(obj).__name__}.{name} is typed TokenVector, got {what}: the receiver "
            f"could not read it as token ids (pass ids: tokenwire.as_tokens(...))")


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

    def __init__(self, type: Any = Any, *, ext_code: int = _EXT_CODE,
                 buffer_ext_code: int = _BUFFER_EXT_CODE, vocab_size: Optional[int] = None,
                 ext_hook: Optional[Callable[[int, memoryview], Any]] = None,
                 dec_hook: Optional[Callable[[type, Any], Any]] = None,
                 channel: Any = None) -> None:
        self.channel = channel
        self.hooks = Hooks(ext_code=ext_code, vocab_size=vocab_size, ext_hook=ext_hook,
                           dec_hook=dec_hook, buffer_ext_code=buffer_ext_code)
        self.buffer_ext_code = buffer_ext_code
        self.vocab_size = vocab_size
        self._decoder = msgspec.msgpack.Decoder(type, ext_hook=self._ext_hook,
                                                dec_hook=self.hooks.dec_hook)
        self._local = threading.local()          # the frames of the message being decoded

    def decode(self, frames: Iterable[Any]) -> Any:
        """Decode ``[main, *buffers]`` (bytes, memoryviews, ``zmq.Frame`` objects, ...), or a
        message of one frame given as itself.

        A raw buffer in immutable memory (`bytes`, a frame `recv` read from a tcp or ipc
        stream) is viewed, others are copied once; a framed buffer is decoded once. Raises
        WireFormatError for a bad reference or frame, TokenIdError for an id outside
        `vocab_size` (however the ids were sent), msgspec.DecodeError for bad msgpack,
        msgspec.ValidationError for a value of the wrong type.
        """
        if type(frames) is not list:
            frames = [frames] if _is_buffer(frames) else list(frames)   # one frame: no buffers
        if self.channel is not None:             # [descriptor, main, *frames]: slots copied out
            if len(frames) < 2:
                raise WireFormatError("a channel message has a descriptor and a main frame")
            frames = [frames[1], *self.channel._placed(frames[0], frames[2:])]
        if not frames:
            raise WireFormatError("Decoder.decode() got no frames (needs the main frame)")
        local = self._local
        local.frames = frames
        local.made = {}
        try:
            return self._decoder.decode(frames[0])
        except msgspec.ValidationError as e:
            if type(e.__cause__) is TokenIdError:    # an id outside vocab_size, in a list
                raise TokenIdError(str(e)) from None
            raise
        except UnicodeDecodeError as e:
            # msgspec before 0.21 (the last release for Python 3.9 is 0.20) lets a string that is
            # not UTF-8 escape as UnicodeDecodeError; later releases raise DecodeError. One
            # documented error whatever the msgspec version.
            raise msgspec.DecodeError(f"invalid UTF-8 in a msgpack string: {e}") from None
        finally:
            local.frames = None
            local.made = None

    def recv(self, socket: Any, flags: int = 0, *, prefix: int = 0) -> Any:
        """Receive one multipart message from a pyzmq socket and decode it. With ``prefix=N``
        the first N frames (a message type, ROUTER identities) are not part of the message:
        returns ``(leading, obj)``, `leading` the N frames as `bytes` (WireFormatError when
        the message has no frame after them). A frame read from a tcp or ipc stream is viewed
        (libzmq alone holds its memory and never rewrites it); one received over inproc is the
        sender's memory, which it may still write, and is copied once."""
        _check_prefix(prefix)
        if self.channel is not None:
            frames = socket.recv_multipart(flags=flags, copy=False)
        else:
            # The leading frames and the main frame as bytes, the buffers as zmq.Frames.
            frames = recv_frames(socket, flags, prefix + 1)
        if prefix == 0:
            return self.decode([received_buffer(f) for f in frames])
        leading, rest = _split_prefix(frames, prefix)
        return leading, self.decode([received_buffer(f) for f in rest])

    def _ext_hook(self, code: int, data: memoryview) -> Any:
        if code != self.buffer_ext_code:
            return self.hooks.ext_hook(code, data)
        made = self._local.made
        return _resolve(self.hooks, code, data, self._local.frames,
                        made if made is not None else {})
