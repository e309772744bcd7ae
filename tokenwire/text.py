"""Text-safe frames: a tokenwire frame as base64, for JSON bodies, HTTP and relays between servers.

    s = to_base64(tokens)            # str, standard alphabet with padding (codec "auto")
    tv = from_base64(s)              # TokenVector; no list[int] is built on either side

The text is the base64 of an ordinary frame (`encode`), so everything a frame carries (codec,
checksum) travels with it and `from_base64` applies `decode`'s checks. 18-bit ids take 3.0
characters each ("packed" at 2.25 bytes per id, times 4/3).

Base64 runs through `pybase64` (SIMD) when it is installed (`pip install 'tokenwire[base64]'`)
and through the standard library's `binascii` otherwise; the output is the same either way, and
so is what is accepted: the chosen alphabet, padded to a multiple of 4 characters, no whitespace.
With ``urlsafe=True`` the alphabet uses "-" and "_" instead of "+" and "/" (on both sides).

``format="int32"`` (both sides) is the bare form other servers relay: the base64 of the ids as
little-endian int32 bytes, no header (``base64.b64encode(np.asarray(ids, np.int32).tobytes())``),
for a peer that reads or writes that; the default ``format="frame"`` is tokenwire's frame.
"""

from __future__ import annotations

import binascii
import importlib
import re
import sys
from typing import TYPE_CHECKING, Any, Literal, Optional, Union, cast

from tokenwire._core import TokenVector, _ids_from_int32_bytes, as_tokens, decode, encode
from tokenwire.errors import WireFormatError

if TYPE_CHECKING:
    from tokenwire._core import _Codec

_pybase64: Any
try:
    _pybase64 = importlib.import_module("pybase64")
except ImportError:  # the optional extra is not installed: binascii does the work
    _pybase64 = None

__all__ = ["from_base64", "to_base64"]

_URL_ALTCHARS = b"-_"
_TO_URLSAFE = bytes.maketrans(b"+/", b"-_")
_FROM_URLSAFE = bytes.maketrans(b"-_", b"+/")
_STRICT_BINASCII = sys.version_info >= (3, 11)      # a2b_base64(strict_mode=True)
_STANDARD_TEXT = re.compile(rb"[A-Za-z0-9+/]*={0,2}")
_URLSAFE_TEXT = re.compile(rb"[A-Za-z0-9_-]*={0,2}")

_use_pybase64 = _pybase64 is not None

Text = Union[str, bytes, bytearray, memoryview]
Format = Literal["frame", "int32"]


def _set_pybase64(enabled: bool) -> bool:
    """Test hook: route base64 through pybase64 (when installed) or binascii; returns the
    previous setting."""
    global _use_pybase64
    previous = _use_pybase64
    _use_pybase64 = bool(enabled) and _pybase64 is not None
    return previous


def base64_backend() -> str:
    """The library doing the base64 work: "pybase64" or "binascii"."""
    return "pybase64" if _use_pybase64 else "binascii"


def to_base64(tokens: Any, *, codec: _Codec = "auto", checksum: bool = False,
              urlsafe: bool = False, format: Format = "frame") -> str:
    """The frame `encode(tokens, codec=codec, checksum=checksum)` as a base64 string (standard
    alphabet with padding; "-" and "_" for "+" and "/" with ``urlsafe=True``).

    `tokens` is anything `as_tokens` accepts (a TokenVector, an int32 buffer, a list of ints);
    raises what `encode` raises for ids it cannot hold. With ``format="int32"`` the text holds
    the ids as bare little-endian int32 bytes instead of a frame (no codec, no checksum: passing
    either is a ValueError); an id outside int32 raises TokenIdOverflowError.
    """
    frame = _payload(tokens, codec, checksum, format)
    if _use_pybase64:
        return cast(str, _pybase64.b64encode_as_string(
            frame, altchars=_URL_ALTCHARS if urlsafe else None))
    text = binascii.b2a_base64(frame, newline=False)
    if urlsafe:
        text = text.translate(_TO_URLSAFE)
    return text.decode("ascii")


def from_base64(text: Text, *, vocab_size: Optional[int] = None,
                urlsafe: bool = False, format: Format = "frame") -> TokenVector:
    """The TokenVector held by a `to_base64` string (`str`, or ASCII bytes-like).

    Raises WireFormatError (a ValueError) naming the position of the first character outside
    the alphabet, a misplaced or excess "=", a length that is not a multiple of 4, or, once
    decoded, what `decode` finds wrong with the frame (including ids outside `vocab_size`).
    A raw frame is not copied again: the vector views the decoded bytes.

    ``format="int32"`` reads bare little-endian int32 bytes (``to_base64(..., format="int32")``,
    or ``base64.b64encode(np.asarray(ids, np.int32).tobytes())``), viewed without a copy; a
    decoded byte count that is not a multiple of 4, or an id outside `vocab_size`, is a
    WireFormatError.
    """
    if format == "int32":
        return _ids_from_int32_bytes(_frame_bytes(text, urlsafe), vocab_size)
    _check_format(format)
    return decode(_frame_bytes(text, urlsafe), vocab_size=vocab_size)


def _check_format(format: str) -> None:
    if format not in ("frame", "int32"):
        raise ValueError(f"format must be 'frame' or 'int32', got {format!r}")


def _payload(tokens: Any, codec: str, checksum: bool, format: str) -> Any:
    """What to_base64 encodes: a frame, or for "int32" the ids' little-endian int32 bytes (a
    TokenVector's own memory on a little-endian host: no copy beyond `as_tokens`)."""
    if format == "frame":
        return encode(tokens, codec=cast("_Codec", codec), checksum=checksum)
    _check_format(format)
    if codec != "auto" or checksum:
        raise ValueError('format="int32" is bare int32 ids: codec and checksum apply to frames')
    tv = as_tokens(tokens)
    return tv if sys.byteorder == "little" else tv.tobytes()


def _frame_bytes(text: Text, urlsafe: bool) -> bytes:
    if not isinstance(text, (str, bytes, bytearray, memoryview)):
        raise TypeError(f"from_base64() takes str or bytes, not {type(text).__name__}")
    size = text.nbytes if isinstance(text, memoryview) else len(text)
    if size % 4 or urlsafe and _has_standard_only_characters(text):
        # binascii's strict mode lets "AAAA=" through: one rule for both backends, checked here.
        raise WireFormatError(_explain(text, urlsafe) or "invalid base64")
    try:
        if _use_pybase64:
            return cast(bytes, _pybase64.b64decode(
                text, altchars=_URL_ALTCHARS if urlsafe else None, validate=True))
        plain = text
        if urlsafe:
            plain = (text.encode("ascii") if isinstance(text, str) else bytes(text)).translate(
                _FROM_URLSAFE)
        if _STRICT_BINASCII:
            return binascii.a2b_base64(plain, strict_mode=True)
        problem = _explain(text, urlsafe)        # Python < 3.11: validate first
        if problem is None:
            return binascii.a2b_base64(plain)
    except (binascii.Error, ValueError) as e:
        problem = _explain(text, urlsafe) or f"invalid base64: {e}"
    raise WireFormatError(problem)


def _has_standard_only_characters(text: Text) -> bool:
    # pybase64 accepts "+" and "/" beside altchars (deprecated), binascii after translation would
    # too: look for them first, so that urlsafe text means the same to both backends.
    if isinstance(text, str):
        return "+" in text or "/" in text
    data = text if isinstance(text, (bytes, bytearray)) else bytes(text)   # memoryview: no `in`
    return b"+" in data or b"/" in data


def _explain(text: Text, urlsafe: bool) -> Optional[str]:
    """What is wrong with a base64 text (the slow path, run only after a failure), or None."""
    if isinstance(text, str):
        for i, ch in enumerate(text):
            if ord(ch) > 127:
                return f"invalid base64: non-ASCII character {ch!r} at position {i}"
        data = text.encode("ascii")
    else:
        data = bytes(text)
    n = len(data)
    pattern = _URLSAFE_TEXT if urlsafe else _STANDARD_TEXT
    good = pattern.match(data)
    end = good.end() if good else 0
    if end < n:
        ch = chr(data[end])
        if ch == "=":
            return f"invalid base64: excess padding '=' at position {end}"
        if data.find(b"=", 0, end) >= 0:
            first_pad = data.find(b"=", 0, end)
            return f"invalid base64: padding '=' at position {first_pad} before the end"
        alphabet = "A-Z a-z 0-9 - _" if urlsafe else "A-Z a-z 0-9 + /"
        return f"invalid base64: character {ch!r} at position {end} is not in the alphabet ({alphabet} =)"
    if n % 4:
        return (f"invalid base64: {n} characters, not a multiple of 4 "
                f"(truncated, or the padding '=' is missing)")
    return None
