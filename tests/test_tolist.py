"""list[int] materialization: values, the int-object table, every source."""

from __future__ import annotations

import array
import ctypes
import re

import numpy as np
import pytest
from hypothesis import given
from support.strategies import BOUNDARY_IDS, INT32_MAX, INT32_MIN, int_arrays, token_lists

import tokenwire
from tokenwire import TokenVector, as_tokens
from tokenwire._core import tolist
from tokenwire._core import INT_CACHE_SIZE


def test_int_cache_size_is_where_shared_int_objects_stop() -> None:
    """What INT_CACHE_SIZE means: ids in [0, INT_CACHE_SIZE) come back as one shared int object
    per id (the table's), the first id past it as a new object per call; it covers the largest
    vocabulary in use (Gemma's 262,144 ids)."""
    last, past = INT_CACHE_SIZE - 1, INT_CACHE_SIZE
    a, b = TokenVector([last, past, last]).tolist(), TokenVector([last, past]).tolist()
    assert a[0] is b[0] is a[2] and a[0] == last
    assert a[1] is not b[1] and a[1] == b[1] == past
    assert INT_CACHE_SIZE >= 262_144


@given(token_lists)
def test_tolist_values(ids: list[int]) -> None:
    tv = TokenVector(ids)
    out = tv.tolist()
    assert out == ids and type(out) is list and all(type(v) is int for v in out)
    assert tolist(tv) == ids and tolist(np.array(ids, dtype=np.int32)) == ids


def test_values_on_both_sides_of_the_cache_bound() -> None:
    ids = [0, 1, INT_CACHE_SIZE - 1, INT_CACHE_SIZE, INT_CACHE_SIZE + 1, -1, INT32_MIN, INT32_MAX]
    assert TokenVector(ids).tolist() == ids


def test_cached_ids_share_objects_and_others_do_not() -> None:
    a = TokenVector([1000, 200_000, INT_CACHE_SIZE + 5, -7]).tolist()
    b = TokenVector([1000, 200_000, INT_CACHE_SIZE + 5, -7]).tolist()
    assert a[0] is b[0] and a[1] is b[1]           # from the table
    assert a[2] is not b[2] and a[3] is not b[3]   # outside [0, INT_CACHE_SIZE): fresh ints


def test_materialized_list_is_independent() -> None:
    tv = TokenVector([1, 2, 3])
    lst = tv.tolist()
    lst.append(4)
    lst[0] = 99
    assert tv == [1, 2, 3] and tv.tolist() == [1, 2, 3]


@given(int_arrays())
def test_tolist_of_any_integer_array(arr: np.ndarray) -> None:
    assert tolist(arr) == [int(v) for v in arr]


@pytest.mark.parametrize(
    "src",
    [np.arange(10, dtype=np.int32)[::2], np.arange(10, dtype=np.int32)[::-1], array.array("i", range(5)),
     memoryview(np.arange(5, dtype=np.int32)), np.arange(5, dtype=">i4"), [1, 2], range(3)],
)
def test_tolist_sources(src: object) -> None:
    expected = [int(v) for v in src]  # type: ignore[attr-defined]
    assert tolist(src) == expected


def test_tolist_errors_follow_as_tokens() -> None:
    with pytest.raises(TypeError, match="must be integers"):
        tolist(np.array([1.5]))
    with pytest.raises(ValueError, match="1-D"):
        tolist(np.zeros((2, 2), dtype=np.int32))
    with pytest.raises(TypeError):
        tolist(b"abcd")


def test_boundaries_round_trip_through_numpy() -> None:
    tv = as_tokens(BOUNDARY_IDS)
    assert np.asarray(tv).tolist() == tv.tolist() == tokenwire._core.tolist(np.asarray(tv)) == BOUNDARY_IDS


# ctypes arrays export their buffer with strides = NULL (C-contiguous by the buffer protocol);
# every consumer of the one buffer helper must take the layout from it, not from the view.
CTYPES_INTEGER_ARRAYS = [
    (ctypes.c_int32, [0, 1, -1, INT32_MAX, INT32_MIN, 151_935]),
    (ctypes.c_int64, [0, 1, -1, INT32_MAX, INT32_MIN]),
    (ctypes.c_uint32, [0, 1, INT32_MAX]),
    (ctypes.c_int16, [0, -5, 32767]),
    (ctypes.c_uint16, [0, 65535]),
    (ctypes.c_int8, [0, -128, 127]),
    (ctypes.c_uint8, [0, 255]),
    (ctypes.c_long, [7, -7]),
    (ctypes.c_int32, []),
    (ctypes.c_int32, [42]),
]


@pytest.mark.parametrize(("ctype", "ids"), CTYPES_INTEGER_ARRAYS,
                         ids=[f"{t.__name__}*{len(v)}" for t, v in CTYPES_INTEGER_ARRAYS])
def test_ctypes_integer_arrays_through_every_consumer(ctype: type, ids: list[int]) -> None:
    arr = (ctype * len(ids))(*ids)
    assert tolist(arr) == ids
    assert as_tokens(arr).tolist() == ids
    assert TokenVector(arr).tolist() == ids
    assert tokenwire.decode(tokenwire.encode(arr)).tolist() == ids
    assert tokenwire.decode(tokenwire.encode(arr, codec="raw")).tolist() == ids
    assert [v.tolist() for v in tokenwire.decode_many(tokenwire.encode_many([arr, arr]))] == \
        [ids, ids]


def test_ctypes_arrays_that_are_not_1d_int_ids_are_refused() -> None:
    with pytest.raises(tokenwire.TokenIdError, match=r"1-D, got shape \(3, 2\)"):
        tolist(((ctypes.c_int32 * 2) * 3)())
    with pytest.raises(tokenwire.TokenIdError, match=r"1-D, got shape \(\)"):
        tolist(ctypes.c_int32(5))
    for bad, fmt in (((ctypes.c_char * 4)(), "<c"), ((ctypes.c_char_p * 2)(), "<z"),
                     ((ctypes.c_float * 2)(), "<f"), ((ctypes.c_bool * 2)(), "<?")):
        for fn in (tolist, as_tokens, tokenwire.encode):
            with pytest.raises(tokenwire.errors.TokenIdTypeError, match=re.escape(repr(fmt))):
                fn(bad)
