"""`check_pickle`'s bounds at their boundary: a put's index must be below the pickle's length
(the smallest index refused, the length itself, and the largest accepted, one less, for every
opcode that puts to the memo), and a counted argument may not claim more bytes than follow its
count. The hostile pickles far past the bounds (memo bombs, frames that hide them) are
tests/test_hostile.py's."""

from __future__ import annotations

import pickle
import re

import pytest

from tokenwire.unpickle import check_pickle


def _long_binput(index: int) -> bytes:
    """PROTO 5, NONE, LONG_BINPUT index (4 bytes), STOP: 9 bytes."""
    return b"\x80\x05Nr" + index.to_bytes(4, "little") + b"."


def _text_put(index: int) -> bytes:
    """NONE, PUT index (a decimal line), STOP: 4 bytes and the index's digits."""
    return b"Np" + str(index).encode() + b"\n."


def _binput(index: int) -> bytes:
    """PROTO 2, NONE, BINPUT index (1 byte), STOP: 6 bytes."""
    return b"\x80\x02Nq" + bytes([index]) + b"."


@pytest.mark.parametrize("make, n, message", [
    (_long_binput, 9, "LONG_BINPUT at offset 3 puts memo index 9, beyond a 9-byte pickle"),
    (_text_put, 5, "PUT at offset 1 puts memo index b'5': beyond a 5-byte pickle"),
], ids=["LONG_BINPUT", "PUT"])
def test_a_memo_index_equal_to_the_length_is_refused_one_less_passes(make, n, message) -> None:
    assert len(make(n)) == len(make(n - 1)) == n
    with pytest.raises(pickle.UnpicklingError, match=re.escape(message)):
        check_pickle(make(n))
    check_pickle(make(n - 1))
    assert pickle.loads(make(n - 1)) is None           # and it is a pickle that loads


def test_a_binput_index_is_bounded_by_its_one_byte() -> None:
    """BINPUT's index is one byte: its memo grows to at most 256 slots however short the
    pickle, so the walk has no length bound to apply to it, and both sides of the length load."""
    for index in (5, 6, 255):
        data = _binput(index)
        assert len(data) == 6
        check_pickle(data)
        assert pickle.loads(data) is None


@pytest.mark.parametrize("opcode, name, k", [(b"B", "BINBYTES", 4), (b"\x8e", "BINBYTES8", 8),
                                             (b"\x96", "BYTEARRAY8", 8)])
def test_a_count_equal_to_what_follows_passes_one_more_is_refused(opcode, name, k) -> None:
    """A counted argument may take every byte after its count (4 here: the pickle then ends
    inside it, where the unpickler stops too), not one more."""
    def counted(length: int) -> bytes:
        return b"\x80\x05" + opcode + length.to_bytes(k, "little") + b"abc."

    check_pickle(counted(4))
    with pytest.raises(pickle.UnpicklingError,
                       match=re.escape(f"{name} at offset 2 declares 5 bytes, 4 follow it")):
        check_pickle(counted(5))
