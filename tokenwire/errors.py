"""tokenwire's exception tree: catch `TokenwireError` for anything tokenwire raises on purpose.

One root, built-in bases (msgspec's model): every class is also the built-in a caller would
catch, so `except ValueError` / `except TypeError` code written before this tree keeps working.

    TokenwireError
    ├── TokenIdError          (ValueError)     an id outside the vocabulary or a codec's range,
    │                                          ids of the wrong shape or byte count
    ├── TokenIdOverflowError  (OverflowError)  an id (or a sequence length) outside int32 / uint32
    ├── TokenIdTypeError      (TypeError)      not token ids: a float dtype, a bool, a str, a set
    ├── WireFormatError       (ValueError)     a byte string is not a valid frame
    │   └── ChecksumError                      its checksum does not match
    └── AuthenticationError   (ValueError)     a signed message failed verification

Messages name the index, value, type, shape or byte count. Errors in how tokenwire is called (an
unknown codec name, `vocab_size <= 0`, a negative GIL threshold) are plain ValueError/TypeError,
as in msgspec: they are programming mistakes, not bad data.
"""

# TokenwireError, WireFormatError and TokenIdError, defined here, are public as tokenwire.X
# (the errors most code catches); this module's public names are the other four.
__all__ = [
    "AuthenticationError",
    "ChecksumError",
    "TokenIdOverflowError",
    "TokenIdTypeError",
]


class TokenwireError(Exception):
    """Root of tokenwire's own exceptions."""


class TokenIdError(TokenwireError, ValueError):
    """Token ids with a bad value or shape: an id outside the vocabulary (`as_tokens(...,
    vocab_size=)`), an id a forced codec cannot hold (`encode(..., codec="u16")`), a 0-d or n-d
    array, raw int32 bytes whose count is not a multiple of 4."""


class TokenIdOverflowError(TokenwireError, OverflowError):
    """A token id outside int32 (naming its index and value), or a sequence too long for a
    multi-sequence frame."""


class TokenIdTypeError(TokenwireError, TypeError):
    """An input that is not token ids: a non-integer element or dtype (bool included), text,
    bytes, an unordered collection."""


class WireFormatError(TokenwireError, ValueError):
    """A byte string is not a valid tokenwire frame (the message says what is wrong). `decode`
    with `vocab_size` also raises it for an id outside the vocabulary: the frame is bad data."""


class ChecksumError(WireFormatError):
    """A frame's checksum does not match its contents."""


class AuthenticationError(TokenwireError, ValueError):
    """A signed message failed verification (unsigned, truncated or tampered): nothing was
    unpickled."""
