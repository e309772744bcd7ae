"""tokenwire's exception tree: catch `TokenwireError` for anything tokenwire raises on purpose.

Conversions (`as_tokens`) raise the built-in TypeError / ValueError / OverflowError that Python
users expect from a constructor; decoding raises `WireFormatError`, which is also a ValueError.
"""


class TokenwireError(Exception):
    """Root of tokenwire's own exceptions."""


class WireFormatError(TokenwireError, ValueError):
    """A byte string is not a valid tokenwire frame (the message says what is wrong)."""


class ChecksumError(WireFormatError):
    """A frame's checksum does not match its contents."""


class AuthenticationError(TokenwireError, ValueError):
    """A signed message failed verification (unsigned, truncated or tampered): nothing was
    unpickled."""
