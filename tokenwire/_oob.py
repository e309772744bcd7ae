"""The out-of-band layer, transport-neutral: an object as a protocol-5 pickle and its large
buffers as frames of their own, optionally signed, and back (no transport is imported here).
See docs/design.md, "tokenwire/_oob.py"."""

from __future__ import annotations

import hashlib
import hmac
import io
import os
import pickle
import struct
from functools import lru_cache
from typing import Any, Callable, Iterable, List, NamedTuple, Optional, Sequence

from tokenwire.errors import AuthenticationError, TokenwireError, WireFormatError
from tokenwire.unpickle import check_pickle, load_scope

__all__ = ["CODEC_HEADER_MAGIC", "KEY_ENV", "MIN_KEY_BYTES", "OOB_THRESHOLD", "SIGNATURE_BYTES",
           "DecodeIds", "EncodeIds", "FindClass", "as_key", "check_unsigned", "codec_kinds",
           "pickle_frames", "is_signature", "key_from_env", "load", "unpickle_frames", "sign_frames",
           "signature", "unpickle", "verify"]


#: Buffers at least this large travel out-of-band; smaller ones are copied into the pickle.
#: 64 KiB (16,384 ids) is pyzmq's own threshold below which zero-copy sends are not worth it,
#: and about where an out-of-band frame stops costing more than the pickle's copy:
#: `python -m bench shm` prints in-band against out-of-band by size (docs/transport.md,
#: "Which path a buffer takes"). Also the default `threshold` of the msgspec `Hooks` and
#: `Encoder`.
OOB_THRESHOLD = 64 * 1024

#: The environment variable `key_from_env` reads by default (hex-encoded key).
KEY_ENV = "TOKENWIRE_KEY"
#: Keys shorter than this are refused (HMAC's strength is bounded by the key's), as are all-zero,
#: `int` and `str` keys.
MIN_KEY_BYTES = 16
# A key of fewer distinct byte values is refused as guessable (b"\x01" + 15 zeros): 16 random
# bytes hold fewer than 8 distinct values with probability below 2**-39.
_MIN_DISTINCT_KEY_BYTES = 8

# "TWS2": the HMAC key is SHA-256(key) (see _keyed).
_SIG_MAGIC = b"TWS2"
#: The size of the signature frame that leads a signed message: a 4-byte marker, then the
#: 32-byte HMAC-SHA256 digest.
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
# A message with a codec header (encoded token frames) signs under modes 6 and 7.
_CODEC_PREFIX = {False: _DOMAIN + b"\6", True: _DOMAIN + b"\7"}
_LENGTHS = [struct.Struct(f"<{n + 1}Q") for n in range(9)]     # count + n lengths

#: The codec header, the frame in front of the pickle of a message whose token-id buffers are
#: encoded (docs/transport.md, "Encoded token frames: the format"), starts with these bytes: a
#: pickle that names a global no tokenwire defines, so a receiver that predates the header and
#: unpickles it as the message's pickle fails naming it (AttributeError "Can't get attribute
#: 'encoded_token_frames__upgrade_tokenwire_to_read'", or a restricted unpickler's refusal of
#: that global) instead of taking encoded frames for raw ids. A protocol-5 pickle starts with
#: b"\x80\x05", so the two never look alike.
CODEC_HEADER_MAGIC = b"ctokenwire._oob\nencoded_token_frames__upgrade_tokenwire_to_read\n."
# After the magic: u32 n, the number of buffer frames, then one byte per buffer frame, then
# the first 16 bytes (the wire header: codec, width, flags, id count) of each encoded frame, so
# the signature binds what an encoded frame decodes to as a raw frame's length binds its count.
_COUNT = struct.Struct("<I")
_RAW, _FRAMED = 0, 1                     # a buffer as the pickle gave it; a tokenwire wire frame
_WIRE_HEADER = 16                        # docs/wire-format.md, "Layout"
_WIRE_COUNT = struct.Struct("<Q")        # the wire header's id count, at byte 8


class CodecHeader(NamedTuple):
    """A message's codec header, checked against its frames (`codec_kinds`): for each encoded
    buffer frame (kind 1), by its index, the wire header it must start with (a raw frame has
    none, so the kinds need no field of their own)."""
    wire_headers: dict[int, bytes]

FindClass = Callable[[str, str], Any]
#: `pickle_frames`'s `encode_ids`: the frame to send for an out-of-band buffer when it is token ids
#: to encode, None to send it raw.
EncodeIds = Callable[[pickle.PickleBuffer], Optional[Any]]
#: `unpickle_frames`'s `decode_ids`: the ids of an encoded frame (raises WireFormatError when bad).
DecodeIds = Callable[[Any], Any]


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


def as_key(key: Any) -> bytes:
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


def signature(key: bytes, head: Any, buffers: Sequence[Any], sign_buffers: bool,
               channel: bool = False, leading: Sequence[Any] = (),
               header: Optional[Any] = None) -> bytes:
    """The signature frame: HMAC-SHA256(SHA-256(key), DOMAIN || mode || u64 n
    || u64 len(buffer_i)... || u64 len(pickle) || pickle [|| buffer_0 || ... when sign_buffers]),
    all integers little-endian, mode one byte (1 when the buffers' bytes are covered; 2 and 3
    for a `channel` message, whose `head` is its descriptor followed by its pickle; 4 and 5 for
    a message with `leading` frames, which then come first: u64 k || u64 len(leading_i)... ||
    leading_0 || ... before the rest; 6 and 7 for a message with a codec `header`: u64 k ||
    u64 len(leading_i)... || leading_0 || ... || u64 len(header) || header before the rest, k
    possibly 0)."""
    inner_state, outer_state = _keyed(key)
    lens = [len(b) if type(b) is bytes else memoryview(b).nbytes for b in buffers]
    lens.append(len(head) if type(head) is bytes else memoryview(head).nbytes)
    n = len(lens)
    fmt = _LENGTHS[n] if n < len(_LENGTHS) else struct.Struct(f"<{n + 1}Q")
    inner = inner_state.copy()
    if header is not None or leading:
        if channel:
            raise ValueError("a channel message cannot have " + (
                "a codec header" if header is not None else "signed leading frames"))
        sizes = [memoryview(f).nbytes for f in leading]
        inner.update((_LEADING_PREFIX if header is None else _CODEC_PREFIX)[sign_buffers]
                     + struct.pack(f"<{len(sizes) + 1}Q", len(sizes), *sizes))
        for f in leading:
            inner.update(f)
        if header is not None:
            inner.update(struct.pack("<Q", memoryview(header).nbytes))
            inner.update(header)
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


def pickle_frames(obj: Any, *, oob_threshold: int = OOB_THRESHOLD, key: Optional[bytes] = None,
              sign_buffers: bool = False, encode_ids: Optional[EncodeIds] = None) -> List[Any]:
    """``[pickle, buffer, ...]``: `obj` pickled at protocol 5, followed by the raw views of its
    out-of-band buffers (``memoryview``s of the objects' own memory: no copy is made). With
    `key`, a signature frame comes first: ``[signature, pickle, buffer, ...]``.

    `encode_ids(buffer)` may replace an out-of-band buffer by an encoded frame (it returns the
    frame, or None to send the buffer raw); when it replaced any, a codec header naming which
    frames are encoded comes in front of the pickle: ``[signature?, header, pickle, ...]``."""
    buffers: List[Any] = []
    kinds = bytearray()
    wire_headers: List[bytes] = []

    def out_of_band(buf: pickle.PickleBuffer) -> bool:
        raw = buf.raw()
        if raw.nbytes < oob_threshold:
            return True                  # a true value keeps the buffer in-band
        if encode_ids is not None:
            frame = encode_ids(buf)
            if frame is not None:
                buffers.append(frame)
                kinds.append(_FRAMED)
                wire_headers.append(bytes(memoryview(frame)[:_WIRE_HEADER]))
                return False
        buffers.append(raw)
        kinds.append(_RAW)
        return False

    head = pickle.dumps(obj, protocol=5, buffer_callback=out_of_band)
    frames = [head, *buffers]
    if _FRAMED in kinds:
        frames.insert(0, b"".join([CODEC_HEADER_MAGIC, _COUNT.pack(len(kinds)), kinds,
                                   *wire_headers]))
    if key is None:
        return frames
    return [sign_frames(as_key(key), frames, sign_buffers), *frames]


def sign_frames(key: bytes, frames: Sequence[Any], sign_buffers: bool,
                leading: Sequence[Any] = ()) -> bytes:
    """The signature frame of ``[header?, pickle, buffer, ...]`` (what `pickle_frames` makes
    without a key), after the `leading` frames; `key` checked by the caller (`as_key`)."""
    if _has_header(frames):
        return signature(key, frames[1], frames[2:], sign_buffers, leading=leading,
                         header=frames[0])
    return signature(key, frames[0], frames[1:], sign_buffers, leading=leading)


def _has_header(frames: Sequence[Any]) -> bool:
    return len(frames) > 0 and memoryview(frames[0])[:len(CODEC_HEADER_MAGIC)] == \
        CODEC_HEADER_MAGIC


def codec_kinds(frames: Sequence[Any]) -> Optional[CodecHeader]:
    """For ``[header?, pickle, buffer, ...]`` (a message after its signature): None when
    ``frames[0]`` is the pickle, else its codec header, checked against the frames that follow
    (WireFormatError)."""
    if not _has_header(frames):
        return None
    header = memoryview(frames[0])
    body = header[len(CODEC_HEADER_MAGIC):]
    buffers = len(frames) - 2
    if body.nbytes < _COUNT.size:
        raise WireFormatError(
            f"codec header of {header.nbytes} bytes: truncated (the frame count is missing)")
    (n,) = _COUNT.unpack_from(body)
    kinds = body[_COUNT.size:_COUNT.size + n].tobytes() if n == buffers else b""
    encoded = kinds.count(_FRAMED)
    if n != buffers or body.nbytes != _COUNT.size + n + _WIRE_HEADER * encoded:
        raise WireFormatError(
            f"codec header names {n} buffer frame(s) in {header.nbytes} bytes; the message has "
            f"{max(buffers, 0)} after its pickle (a header of {len(CODEC_HEADER_MAGIC)} + "
            f"{_COUNT.size} + 1 per frame + {_WIRE_HEADER} per encoded frame bytes)")
    bad = kinds.translate(None, bytes((_RAW, _FRAMED)))
    if bad:
        raise WireFormatError(f"codec header: buffer frame {kinds.index(bad[0]) + 1} has kind "
                              f"{bad[0]}, expected {_RAW} (raw) or {_FRAMED} (tokenwire frame)")
    at = _COUNT.size + n
    wire_headers = {}
    for i, kind in enumerate(kinds):
        if kind == _FRAMED:
            wire_headers[i] = body[at:at + _WIRE_HEADER].tobytes()
            at += _WIRE_HEADER
    return CodecHeader(wire_headers)


def load(head: Any, buffers: Sequence[Any], header: Optional[CodecHeader],
         find_class: Optional[FindClass], decode_ids: Optional[DecodeIds],
         signed: bool = False) -> Any:
    """The object of a message: its pickle `head`, its `buffers` and its codec `header`
    (`codec_kinds`). Every encoded buffer is decoded by `decode_ids` before anything is
    unpickled, so a bad frame (WireFormatError naming it) leaves nothing half-built. An encoded
    frame must start with the wire header the codec header gives for it, and decode to that
    many ids: checked before decoding (a copy of its first bytes) and after; a mismatch is
    WireFormatError, or AuthenticationError in a `signed` message (the codec header is signed,
    so the frame was changed in transit)."""
    if header is not None and header.wire_headers:
        if decode_ids is None:
            raise WireFormatError(
                "the message holds encoded token-id frames (a codec header): load it with "
                "tokenwire.transport.unpickle_frames or recv_pyobj_oob")
        decoded = list(buffers)
        for i, expected in header.wire_headers.items():
            if bytes(memoryview(buffers[i])[:_WIRE_HEADER]) != expected:
                _refuse_frame(i, "does not start with the wire header its codec header gives",
                              signed)
            try:
                decoded[i] = decode_ids(buffers[i])
            except TokenwireError as e:
                raise WireFormatError(f"encoded token frame {i + 1}: {e}") from None
            (count,) = _WIRE_COUNT.unpack_from(expected, 8)
            if len(decoded[i]) != count:
                _refuse_frame(i, f"decodes to {len(decoded[i])} ids, its codec header gives "
                              f"{count}", signed)
        buffers = decoded
    return unpickle(head, buffers, find_class)


def _refuse_frame(i: int, what: str, signed: bool) -> None:
    if signed:
        raise AuthenticationError(f"encoded token frame {i + 1} {what}: the frame was changed "
                                  f"in transit")
    raise WireFormatError(f"encoded token frame {i + 1} {what}")


def verify(frames: Sequence[Any], key: bytes, sign_buffers: bool,
            leading: Sequence[Any] = ()) -> None:
    if len(frames) < 2:
        raise AuthenticationError(
            f"unsigned message: {len(frames)} frame(s), a signed one has a signature frame and "
            f"a pickle frame")
    first = memoryview(frames[0])
    if not is_signature(first):
        raise AuthenticationError(
            f"unsigned message: the first frame ({first.nbytes} bytes) is not a tokenwire "
            f"signature ({SIGNATURE_BYTES} bytes starting with {_SIG_MAGIC!r})")
    sig = first.tobytes()
    expected = sign_frames(key, frames[1:], sign_buffers, leading)
    if not hmac.compare_digest(sig, expected):
        raise AuthenticationError(
            f"bad signature: the message ({len(frames) - 1} frames after the signature) was not "
            f"signed with this key and sign_buffers={sign_buffers}, or was changed in transit")


def is_signature(frame: memoryview) -> bool:
    """Does `frame` have the shape of a signature frame (checked, not trusted)?"""
    return frame.nbytes == SIGNATURE_BYTES and frame[:4] == _SIG_MAGIC


def check_unsigned(frames: Sequence[Any]) -> None:
    if len(frames) > 1 and is_signature(memoryview(frames[0])):
        raise AuthenticationError("the message is signed: pass key= to verify and load it")


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, data: Any, buffers: Sequence[Any], find_class: FindClass) -> None:
        super().__init__(io.BytesIO(data), buffers=buffers)
        self._find_class = find_class

    def find_class(self, module: str, name: str) -> Any:
        return self._find_class(module, name)


def unpickle(head: Any, buffers: Sequence[Any], find_class: Optional[FindClass]) -> Any:
    """Load a received pickle frame. Its declared allocations are checked against its size
    first (CPython's unpickler allocates a counted argument, and grows its memo to an index,
    before it reads anything: tokenwire.unpickle.check_pickle), and it is loaded in a
    `load_scope` (its token data restored once per source, repeats counted per pickle)."""
    check_pickle(head)
    with load_scope():
        if find_class is None:
            return pickle.loads(head, buffers=buffers)
        return _RestrictedUnpickler(head, buffers, find_class).load()


def unpickle_frames(frames: Iterable[Any], *, key: Optional[bytes] = None, sign_buffers: bool = False,
              find_class: Optional[FindClass] = None,
              decode_ids: Optional[DecodeIds] = None) -> Any:
    """The object `pickle_frames` produced: ``frames[0]`` is the pickle, the rest its buffers (any
    bytes-like objects; read-only ones are viewed without copying). With `key`, ``frames[0]``
    must be a valid signature over the rest, checked before anything is unpickled
    (`AuthenticationError` otherwise). `find_class(module, name)` restricts the globals the
    pickle may load (see `pickle.Unpickler.find_class`). A message with a codec header needs
    `decode_ids` (see `load`)."""
    frames = list(frames)
    if not frames:
        raise ValueError("unpickle_frames() needs at least one frame (the pickle)")
    if key is None:
        check_unsigned(frames)
    else:
        verify(frames, as_key(key), sign_buffers)
        frames = frames[1:]
    header = codec_kinds(frames)
    head = int(header is not None)                 # the pickle follows the codec header, if any
    return load(frames[head], frames[head + 1:], header, find_class, decode_ids,
                signed=key is not None)
