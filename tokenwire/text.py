"""Text-safe frames: a tokenwire frame as base64, for JSON bodies, HTTP and relays between servers.
See docs/design.md, "tokenwire/text.py"."""

from __future__ import annotations

import binascii
import importlib
import sys
from typing import TYPE_CHECKING, Any, Literal, Optional, Union, cast

from tokenwire._core import TokenVector, _ids_from_int32_bytes, as_tokens, decode, encode
from tokenwire.errors import WireFormatError, _describe

if TYPE_CHECKING:
    from tokenwire._core import _Codec

_pybase64: Any
try:
    _pybase64 = importlib.import_module("pybase64")
except ImportError:  # the optional extra is not installed: binascii does the work
    _pybase64 = None

__all__: list[str] = []       # to_base64 and from_base64 are public as tokenwire.X

_URL_ALTCHARS = b"-_"
_TO_URLSAFE = bytes.maketrans(b"+/", b"-_")
_FROM_URLSAFE = bytes.maketrans(b"-_", b"+/")
_STRICT_BINASCII = sys.version_info >= (3, 11)      # a2b_base64(strict_mode=True)
_STANDARD_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_URLSAFE_ALPHABET = _STANDARD_ALPHABET[:62] + b"-_"
# The 6-bit value of each alphabet character (both alphabets: "+" and "-" are 62, "/" and "_" 63).
_SEXTET = bytearray(256)
for _value, _char in enumerate(_STANDARD_ALPHABET):
    _SEXTET[_char] = _value
_SEXTET[ord("-")], _SEXTET[ord("_")] = 62, 63

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
    """The TokenVector held by a `to_base64` string: a `str`, or its ASCII bytes as `bytes`,
    `bytearray` or a `memoryview` of any layout (strided, reversed or n-d: the bytes it holds in
    order, copied once when they are not contiguous); any other type is a TypeError.

    Raises WireFormatError (a ValueError) naming the position of the first character outside
    the alphabet, a misplaced or excess "=", a length that is not a multiple of 4, a last
    character before "=" whose unused low bits are not zero (non-canonical text: every frame
    has exactly one text), or, once decoded, what `decode` finds wrong with the frame
    (including ids outside `vocab_size`). Finding the problem costs no more than decoding.
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
        raise ValueError(f"format must be 'frame' or 'int32', got {_describe(format)}")


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
    if isinstance(text, memoryview) and not text.c_contiguous:
        # Neither backend reads a non-contiguous buffer (pybase64 raises BufferError, binascii
        # TypeError): the text is the bytes the view holds, in order.
        text = text.tobytes()
    size = text.nbytes if isinstance(text, memoryview) else len(text)
    if size % 4 or urlsafe and _has_standard_only_characters(text):
        # binascii's strict mode lets "AAAA=" through: one rule for both backends, checked here.
        raise WireFormatError(_explain(text, urlsafe) or "invalid base64")
    try:
        if _use_pybase64:
            frame = cast(bytes, _pybase64.b64decode(
                text, altchars=_URL_ALTCHARS if urlsafe else None, validate=True))
        else:
            plain = text
            if urlsafe:
                plain = (text.encode("ascii") if isinstance(text, str) else bytes(text)).translate(
                    _FROM_URLSAFE)
            if _STRICT_BINASCII:
                frame = binascii.a2b_base64(plain, strict_mode=True)
            else:
                problem = _explain(text, urlsafe)        # Python < 3.11: validate first
                if problem is not None:
                    raise WireFormatError(problem)
                frame = binascii.a2b_base64(plain)
    except (binascii.Error, ValueError) as e:
        if isinstance(e, WireFormatError):
            raise
        raise WireFormatError(_explain(text, urlsafe) or f"invalid base64: {e}") from None
    problem = _tail_problem(text, size, urlsafe)
    if problem is not None:
        raise WireFormatError(problem)
    return frame


def _tail_problem(text: Text, size: int, urlsafe: bool) -> Optional[str]:
    """What the backends let through at the end of a decoded text, in O(1): more than two "="
    (binascii's strict mode decodes "AAAA===="), or a last character before "=" that holds
    bits past the end of the data (both backends decode "AB==" and "AA==" to the same byte:
    non-canonical; one frame, one text)."""
    if size < 4:
        return None
    if isinstance(text, str):
        tail = text[-3:].encode("ascii")               # valid text: ASCII
    elif isinstance(text, memoryview):
        tail = text.cast("B")[-3:].tobytes() if text.c_contiguous else text.tobytes()[-3:]
    else:
        tail = bytes(text[-3:])
    if tail == b"===":
        return _explain(text, urlsafe)
    if tail[2:] != b"=":
        return None
    pads, low_bits = (2, 4) if tail[1:2] == b"=" else (1, 2)
    position = size - pads - 1
    char = tail[2 - pads]
    if _SEXTET[char] & ((1 << low_bits) - 1):
        return (f"invalid base64: non-canonical text: character {chr(char)!r} at position "
                f"{position} carries bits past the end of the data (its low {low_bits} bits "
                f"must be 0)")
    return None


def _has_standard_only_characters(text: Text) -> bool:
    # pybase64 accepts "+" and "/" beside altchars (deprecated), binascii after translation would
    # too: look for them first, so that urlsafe text means the same to both backends.
    if isinstance(text, str):
        return "+" in text or "/" in text
    data = text if isinstance(text, (bytes, bytearray)) else bytes(text)   # memoryview: no `in`
    return b"+" in data or b"/" in data


def _explain(text: Text, urlsafe: bool) -> Optional[str]:
    """What is wrong with a base64 text (run only after a failure), or None. Every step is one
    pass of C code over the text (encode, translate, find): no Python loop per character, so
    a long bad text is refused about as fast as a good one is decoded."""
    if isinstance(text, str):
        try:
            data = text.encode("ascii")
        except UnicodeEncodeError as e:
            return f"invalid base64: non-ASCII character {text[e.start]!r} at position {e.start}"
    else:
        data = bytes(text)
    n = len(data)
    alphabet = _URLSAFE_ALPHABET if urlsafe else _STANDARD_ALPHABET
    others = data.translate(None, alphabet)          # padding and strangers, in text order
    if others:
        first = data.find(others[:1])                # the first character outside the alphabet
        end = first
        if others[0] == 0x3D:                        # "=": up to two end the text
            end += 2 if data[first + 1:first + 2] == b"=" else 1
        if end < n:
            ch = chr(data[end])
            if ch == "=":
                return f"invalid base64: excess padding '=' at position {end}"
            if data[end:end + 1].translate(None, alphabet) == b"":
                return f"invalid base64: padding '=' at position {first} before the end"
            names = "A-Z a-z 0-9 - _" if urlsafe else "A-Z a-z 0-9 + /"
            return (f"invalid base64: character {ch!r} at position {end} is not in the alphabet "
                    f"({names} =)")
    if n % 4:
        return (f"invalid base64: {n} characters, not a multiple of 4 "
                f"(truncated, or the padding '=' is missing)")
    return None
