"""Points of docs/wire-format.md that no fixture shows by itself: the encoder's error for ids it
cannot take (which error wins, and where `sequence K: ` goes), and that the pfor width-tie
fixture really is a tie."""

from __future__ import annotations

import json
import pathlib
import struct

import pytest

import tokenwire
from tokenwire.errors import TokenIdError, TokenIdOverflowError, TokenIdTypeError

FIXTURES = pathlib.Path(__file__).resolve().parent / "fixtures"

U16 = "codec 'u16' needs ids in [0, 65536); "


def _raises(cls: type[Exception], message: str, fn: object, *args: object,
            **kwargs: object) -> None:
    with pytest.raises(cls) as info:
        fn(*args, **kwargs)  # type: ignore[operator]
    assert type(info.value) is cls
    assert str(info.value) == message


def test_a_forced_codec_names_the_sequence_after_its_range() -> None:
    _raises(TokenIdError, U16 + "sequence 1: id at index 0 is 70000",
            tokenwire.encode_many, [[1], [70000]], codec="u16")
    _raises(TokenIdError, "codec 'packed' needs ids in [0, 2147483647]; sequence 2: id at index 1 "
            "is -5", tokenwire.encode_many, [[1], [], [3, -5, -6]], codec="packed")
    # the first failing sequence, and within it the first id
    _raises(TokenIdError, U16 + "sequence 0: id at index 2 is 65536",
            tokenwire.encode_many, [[1, 2, 65536, 70000], [70000]], codec="u16")
    _raises(TokenIdError, U16 + "id at index 1 is 70000",
            tokenwire.encode, [1, 70000, -1], codec="u16")


def test_a_conversion_error_starts_with_the_sequence() -> None:
    _raises(TokenIdTypeError, "sequence 1: token id at index 1 must be an int, got str",
            tokenwire.encode_many, [[1], [2, "x"]])
    _raises(TokenIdOverflowError, "sequence 2: token id at index 1 is 2147483648, outside int32 "
            "[-2147483648, 2147483647]", tokenwire.encode_many, [[], [0], [1, 2**31]])
    _raises(TokenIdTypeError, "token id at index 1 must be an int, got str",
            tokenwire.encode, [1, "x"])


@pytest.mark.parametrize("codec", ["u16", "packed"])
def test_a_conversion_error_anywhere_wins_over_a_range_error(codec: str) -> None:
    """Every sequence is converted before any id is checked against the codec: the range error
    of sequence 0 loses to the conversion error of sequence 1."""
    _raises(TokenIdTypeError, "sequence 1: token id at index 1 must be an int, got str",
            tokenwire.encode_many, [[1, 70000, -1], [2, "x"]], codec=codec)
    _raises(TokenIdOverflowError, "sequence 1: token id at index 0 is 2147483648, outside int32 "
            "[-2147483648, 2147483647]", tokenwire.encode_many, [[-1], [2**31]], codec=codec)
    _raises(TokenIdTypeError, "token id at index 2 must be an int, got str",
            tokenwire.encode, [-1, 70000, "x"], codec=codec)


def test_the_codec_argument_is_checked_before_the_ids() -> None:
    with pytest.raises(ValueError, match=r"^unknown codec 'bogus' \(expected "):
        tokenwire.encode_many([[1], [2, "x"]], codec="bogus")


def test_the_pfor_tie_fixture_is_a_tie_won_by_the_larger_width() -> None:
    """pfor_tie_widths: width 1 (what the encoder wrote) and width 0 (both ids exceptions) take
    the same 4 bytes and both decode to the ids; the encoder's rule takes the larger."""
    case = json.loads((FIXTURES / "manifest.json").read_text())["pfor_tie_widths"]
    frame = (FIXTURES / "pfor_tie_widths.bin").read_bytes()
    ids = case["sequences"][0]
    assert frame[24:] == bytes.fromhex("81408040")                    # b = 1, one exception
    narrower = frame[:16] + struct.pack("<Q", 4) + bytes.fromhex("80c00180")
    assert tokenwire.decode(narrower).tolist() == ids == tokenwire.decode(frame).tolist()
    assert len(narrower) == len(frame)
    assert tokenwire.encode(ids, codec="pfor") == frame
