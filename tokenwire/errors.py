"""tokenwire's exception tree: catch `TokenwireError` for anything tokenwire raises on purpose.
See docs/design.md, "tokenwire/errors.py"."""

from typing import Callable

# TokenwireError, WireFormatError and TokenIdError, defined here, are public as tokenwire.X
# (the errors most code catches); this module's public names are the other four.
__all__ = [
    "AuthenticationError",
    "ChecksumError",
    "TokenIdOverflowError",
    "TokenIdTypeError",
]


class TokenwireError(Exception):
    """Root of tokenwire's own exceptions: catching it catches every error tokenwire raises
    about its input. Each subclass also derives from the built-in exception callers already
    catch (ValueError, TypeError, OverflowError)."""


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


#: An int longer than this many bits is described by its size, not its digits: its decimal
#: text would be longer than a message shows (2**128 has 39 digits), and Python refuses to
#: write an int of more than 4300 digits at all (sys.set_int_max_str_digits).
_DESCRIBE_INT_BITS = 128


def _describe(value: object, *, limit: int = 40, text: Callable[[object], str] = repr) -> str:
    """`value` as a message shows it: ``text(value)`` (repr, or str), cut to about `limit`
    characters in the middle. Never raises, whatever the value: an int of more than 128 bits is
    "an int of N bits" (or "a negative int of N bits"), a value whose repr fails (or is not
    text) is named by its type. Every message that quotes a caller's value builds it here."""
    try:
        if isinstance(value, int) and not isinstance(value, bool):
            bits = int.bit_length(value)
            if bits > _DESCRIBE_INT_BITS:
                return f"{'a negative' if value < 0 else 'an'} int of {bits} bits"
        s = text(value)
        if type(s) is not str:                            # a str subclass may override slicing
            s = str.__str__(s)
        if len(s) <= limit:
            return s
        half = max(1, (limit - 3) // 2)
        return s[:half] + "..." + s[len(s) - half:]
    except Exception as e:
        how = "str" if text is str else "repr"
        return f"<{_type_name(value)} object: {_type_name(e)} from its {how}()>"


def _type_name(value: object) -> str:
    try:
        name = type(value).__name__
        return name if type(name) is str and len(name) <= 60 else "?"
    except Exception:
        return "?"
