"""as_tokens: every accepted input, every documented error (type and message)."""

from __future__ import annotations

import array
import enum
import re
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.strategies import (
    BOUNDARY_IDS,
    INT32_MAX,
    INT32_MIN,
    INT_DTYPES,
    int_arrays,
    out_of_int32,
    token_lists,
)

import tokenwire
from tokenwire import TokenIdError, TokenVector, TokenwireError, WireFormatError, as_tokens
from tokenwire._core import tolist
from tokenwire.errors import TokenIdOverflowError, TokenIdTypeError

# --------------------------------------------------------------------------------------------
# accepted inputs


@given(token_lists)
def test_list_and_tuple_round_trip(ids: list[int]) -> None:
    assert as_tokens(ids).tolist() == ids
    assert as_tokens(tuple(ids)).tolist() == ids
    assert np.asarray(as_tokens(ids)).tolist() == ids


@given(int_arrays())
def test_every_integer_dtype_and_layout(arr: np.ndarray) -> None:
    expected = [int(v) for v in arr]
    assert as_tokens(arr).tolist() == expected
    assert tolist(arr) == expected
    if arr.dtype != np.uint8:   # a memoryview of format 'B' is raw bytes: refused, tested below
        assert as_tokens(memoryview(arr)) == expected


def test_int32_buffer_kinds() -> None:
    ids = [3, 1, 4, 1, 5, -9, INT32_MAX, INT32_MIN]
    nd = np.array(ids, dtype=np.int32)
    for src in (nd, memoryview(nd), array.array("i", ids), memoryview(nd.tobytes()).cast("i"),
                TokenVector(ids), np.array(ids, dtype=np.int32)[::-1][::-1]):
        assert as_tokens(src) == ids, type(src)


def test_int32_ndarray_is_copied_not_viewed() -> None:
    nd = np.arange(10, dtype=np.int32)
    tv = as_tokens(nd)
    nd[0] = 99
    assert tv[0] == 0    # an owned copy: later writes to the source do not show through


def test_token_vector_is_returned_as_is() -> None:
    tv = TokenVector([1, 2, 3])
    assert as_tokens(tv) is tv
    assert as_tokens(tv, vocab_size=4) is tv


def test_strided_and_reversed_views() -> None:
    base = np.arange(100, dtype=np.int32)
    assert as_tokens(base[::3]) == list(range(0, 100, 3))
    assert as_tokens(base[::-1]) == list(range(99, -1, -1))
    two_d = np.arange(12, dtype=np.int64).reshape(3, 4)
    assert as_tokens(two_d[:, 1]) == [1, 5, 9]
    assert as_tokens(memoryview(base)[::2]) == list(range(0, 100, 2))


@pytest.mark.parametrize("dtype", [">i4", ">i8", ">u2", "<i8", "<u4"])
def test_byte_orders(dtype: str) -> None:
    vals = [0, 1, 255, 256, 30000]
    assert as_tokens(np.array(vals, dtype=dtype)) == vals


def test_range_and_iterables() -> None:
    assert as_tokens(range(5)) == [0, 1, 2, 3, 4]
    assert as_tokens(range(10, -10, -3)) == list(range(10, -10, -3))
    assert as_tokens(range(INT32_MAX - 2, INT32_MAX + 1)) == [INT32_MAX - 2, INT32_MAX - 1, INT32_MAX]
    assert as_tokens(range(INT32_MIN, INT32_MIN + 2)) == [INT32_MIN, INT32_MIN + 1]

    def gen() -> Iterator[int]:
        yield from (7, 8, 9)

    assert as_tokens(gen()) == [7, 8, 9]
    assert as_tokens(iter([1])) == [1]
    assert as_tokens(x for x in range(3)) == [0, 1, 2]


def test_int_subclasses_and_numpy_scalars() -> None:
    class Tok(enum.IntEnum):
        BOS = 1
        EOS = 2

    class MyInt(int):
        pass

    ids = [Tok.BOS, np.int64(5), np.uint16(7), np.int32(-3), MyInt(11), Tok.EOS, 2**31 - 1]
    assert as_tokens(ids) == [1, 5, 7, -3, 11, 2, 2**31 - 1]


def test_object_with_array_interface() -> None:
    class Tensorish:
        def __array__(self, dtype: object = None, copy: object = None) -> np.ndarray:
            return np.array([4, 5, 6], dtype=np.int64)

    assert as_tokens(Tensorish()) == [4, 5, 6]


@pytest.mark.parametrize(
    "empty",
    [[], (), range(0), iter([]), np.array([], dtype=np.int32), np.array([], dtype=np.float64)[:0].astype(np.int64),
     array.array("i"), memoryview(array.array("q")), TokenVector(), np.zeros((0,), dtype=">i2")],
)
def test_empty_inputs_of_every_kind(empty: object) -> None:
    tv = as_tokens(empty)
    assert type(tv) is TokenVector and len(tv) == 0


@pytest.mark.parametrize("v", BOUNDARY_IDS)
def test_boundary_values_through_every_path(v: int) -> None:
    for src in ([v], (v,), np.array([v], dtype=np.int64), np.array([v], dtype=np.int32),
                range(v, v + 1), iter([v])):
        assert as_tokens(src) == [v]


@pytest.mark.parametrize("n", [1, 2, 15, 16, 17, 20, 33, 40])
def test_every_position_of_a_list_takes_the_same_checks(n: int) -> None:
    """Exact one-digit ints run in one C loop (sixteen ahead prefetched, a tail without); any other
    item, wherever it falls relative to those loops, takes the general path: a valid one is
    converted and the loop resumes after it, a bad one is reported at its own index."""
    class MyInt(int):
        pass

    base = list(range(100_000, 100_000 + n))
    for k in range(n):
        for special, value in ((2**31 - 1, 2**31 - 1), (-(2**31), -(2**31)), (2**30, 2**30),
                               (-(2**30) - 1, -(2**30) - 1), (MyInt(7), 7)):
            ids = base[:k] + [special] + base[k + 1:]
            assert as_tokens(ids) == base[:k] + [value] + base[k + 1:]
            assert as_tokens(tuple(ids)) == base[:k] + [value] + base[k + 1:]
        for bad, cls, text in ((True, TokenIdTypeError, "must be an int, got bool"),
                               (2**31, TokenIdOverflowError, "outside int32"),
                               (-(2**31) - 1, TokenIdOverflowError, "outside int32"),
                               (2**100, TokenIdOverflowError, "outside int32"),
                               (None, TokenIdTypeError, "must be an int, got NoneType")):
            with pytest.raises(cls, match=rf"token id at index {k}\b.*{text}"):
                as_tokens(base[:k] + [bad] + base[k + 1:])


def test_huge_input() -> None:
    n = 1_000_003
    ids = np.random.default_rng(1).integers(INT32_MIN, INT32_MAX, n, dtype=np.int64)
    assert np.array_equal(np.asarray(as_tokens(ids)), ids.astype(np.int32))
    assert np.array_equal(np.asarray(as_tokens(ids.tolist())), ids.astype(np.int32))
    assert np.array_equal(np.asarray(as_tokens(ids.astype(np.int32))), ids.astype(np.int32))


# --------------------------------------------------------------------------------------------
# errors: type and message


@given(token_lists, out_of_int32, st.data())
def test_overflow_in_list_names_index_and_value(ids: list[int], bad: int, data: st.DataObject) -> None:
    i = data.draw(st.integers(0, len(ids)))
    ids = ids[:i] + [bad] + ids[i:]
    with pytest.raises(OverflowError, match=rf"token id at index {i} is {bad}, outside int32"):
        as_tokens(ids)


@pytest.mark.parametrize(
    ("dtype", "bad"),
    [(np.int64, 2**31), (np.int64, -(2**31) - 1), (np.uint32, 2**31), (np.uint64, 2**64 - 1),
     (">i8", 2**40), (">u4", 2**32 - 1), (np.int64, -(2**63)), (np.uint64, 2**63)],
)
def test_overflow_in_arrays_names_index_and_value(dtype: object, bad: int) -> None:
    arr = np.array([1, 2, bad, 4], dtype=dtype)
    with pytest.raises(OverflowError, match=rf"token id at index 2 is {bad}, outside int32 \[-2147483648, 2147483647\]"):
        as_tokens(arr)
    with pytest.raises(OverflowError, match=rf"token id at index 0 is {bad},"):
        as_tokens(arr[::2][::-1])   # the strided path sees [bad, 1]


def test_overflow_in_strided_array() -> None:
    arr = np.array([1, 2, 3, 2**35, 5, 6], dtype=np.int64)[1::2]   # [2, 2**35, 6]
    with pytest.raises(OverflowError, match=f"token id at index 1 is {2**35}"):
        as_tokens(arr)


def test_overflow_in_range_names_index_and_value() -> None:
    with pytest.raises(OverflowError, match=f"index 3 is {2**31}"):
        as_tokens(range(2**31 - 3, 2**31 + 5))
    with pytest.raises(OverflowError, match=f"index 0 is {2**40}"):
        as_tokens(range(2**40, 2**40 + 1))
    with pytest.raises(OverflowError, match=f"index 2 is {-(2**31) - 1}"):
        as_tokens(range(-(2**31) + 1, -(2**31) - 10, -1))
    with pytest.raises(OverflowError, match="index 1 is"):
        as_tokens(range(0, 2**41, 2**40))


#: An id past Python's int-to-text limit (4300 digits, sys.set_int_max_str_digits): repr()
#: of it raises ValueError, so a message may not quote its digits.
HUGE = 10**5000


class HugeIndex:
    """An element whose __index__ gives an int too long to print."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __index__(self) -> int:
        return self.value

    def __repr__(self) -> str:
        raise RuntimeError("an element's repr is never needed")


@pytest.mark.parametrize(("bad", "text"), [(HUGE, "an int of 16610 bits"),
                                           (-HUGE, "a negative int of 16610 bits"),
                                           (2**200, "an int of 201 bits")],
                         ids=["10**5000", "-10**5000", "2**200"])
def test_overflow_of_an_int_too_long_to_print_names_its_size(bad: int, text: str) -> None:
    message = f"token id at index 1 is {text}, outside int32 [-2147483648, 2147483647]"
    for make in (as_tokens, TokenVector):
        for src in ([5, bad], (5, bad), iter([5, bad]), [5, HugeIndex(bad)]):
            with pytest.raises(TokenIdOverflowError) as e:
                make(src)
            assert str(e.value) == message
    with pytest.raises(TokenwireError, match=f"token id at index 0 is {text}, outside int32"):
        as_tokens(range(bad, bad + 1))
    with pytest.raises(TokenwireError, match=f"token id at index 1 is {text}, outside int32"):
        as_tokens(range(5, 2 * bad, bad))                          # [5, 5 + bad]


def test_a_range_longer_than_a_ssize_t_is_an_overflow_of_its_first_id_outside_int32() -> None:
    # len() of the range itself overflows; an id outside int32 comes long before its end
    with pytest.raises(TokenIdOverflowError,
                       match=f"token id at index {2**31} is {2**31}, outside int32"):
        as_tokens(range(2**64))
    with pytest.raises(TokenIdOverflowError, match=f"token id at index 0 is {-(2**64)}, outside"):
        as_tokens(range(-(2**64), 0))


@pytest.mark.parametrize(
    ("bad", "name"),
    [(1.0, "float"), ("1", "str"), (None, "NoneType"), (True, "bool"), (False, "bool"),
     (np.bool_(True), "bool"), (np.float32(1), "float32"), (1 + 0j, "complex"), (b"1", "bytes"),
     ([1], "list")],
)
def test_non_integer_element_names_index_and_type(bad: object, name: str) -> None:
    with pytest.raises(TypeError, match=rf"token id at index 2 must be an int, got {name}"):
        as_tokens([1, 2, bad, 4])
    with pytest.raises(TypeError, match=rf"token id at index 0 must be an int, got {name}"):
        as_tokens((bad,))


@pytest.mark.parametrize(
    "arr",
    [np.array([1.0, 2.0]), np.array([1, 2], dtype=np.float32), np.array([1j]),
     np.array([True, False]), np.array([1, "a"], dtype=object), np.array([1, 2], dtype=object),
     np.array(["1"]), np.array([1, 2], dtype=np.float16)],
)
def test_non_integer_arrays_are_type_errors(arr: np.ndarray) -> None:
    with pytest.raises(TypeError, match=f"must be integers, got an array of dtype {arr.dtype}"):
        as_tokens(arr)


@pytest.mark.parametrize(
    "buf", [array.array("d", [1.0]), array.array("f", [1.0]), memoryview(np.array([1.5])),
            memoryview(np.array([True]))],
)
def test_non_integer_buffers_are_type_errors(buf: object) -> None:
    with pytest.raises(TypeError, match="must be integers, got a buffer of format"):
        as_tokens(buf)


@pytest.mark.parametrize("raw", [b"\x01\x00\x00\x00", bytearray(b"ab"), "hello", memoryview(b"abcd")])
def test_raw_bytes_and_text_are_type_errors(raw: object) -> None:
    with pytest.raises(TypeError, match="decode|raw bytes"):
        as_tokens(raw)


@pytest.mark.parametrize(
    ("arr", "shape"),
    [(np.array(5, dtype=np.int32), r"\(\)"), (np.zeros((2, 3), dtype=np.int32), r"\(2, 3\)"),
     (np.zeros((1, 1, 4), dtype=np.int64), r"\(1, 1, 4\)"), (np.zeros((0, 2), dtype=np.int32), r"\(0, 2\)")],
)
def test_wrong_dimensions_name_the_shape(arr: np.ndarray, shape: str) -> None:
    with pytest.raises(ValueError, match=rf"must be 1-D, got shape {shape}"):
        as_tokens(arr)
    with pytest.raises(ValueError, match=rf"must be 1-D, got shape {shape}"):
        as_tokens(memoryview(arr))


@pytest.mark.parametrize("obj", [None, 5, 3.5, object()])
def test_non_iterables_are_type_errors(obj: object) -> None:
    with pytest.raises(TypeError, match=f"expected a sequence, buffer or iterable of ints, got {type(obj).__name__}"):
        as_tokens(obj)


@pytest.mark.parametrize("obj", [{1, 2}, frozenset([1]), {1: 2}])
def test_unordered_containers_are_type_errors(obj: object) -> None:
    with pytest.raises(TypeError, match="must be ordered"):
        as_tokens(obj)


@given(token_lists, st.sampled_from([32_000, 151_936, 262_144]), st.data())
def test_vocab_size_names_index_and_value(ids: list[int], vocab: int, data: st.DataObject) -> None:
    ids = [v % vocab for v in ids]
    assert as_tokens(ids, vocab_size=vocab) == ids
    bad = data.draw(st.one_of(st.integers(vocab, INT32_MAX), st.integers(INT32_MIN, -1)))
    i = data.draw(st.integers(0, len(ids)))
    ids = ids[:i] + [bad] + ids[i:]
    for src in (ids, np.array(ids, dtype=np.int64), np.array(ids, dtype=np.int32)):
        with pytest.raises(ValueError, match=rf"token id at index {i} is {bad}, outside the vocabulary \[0, {vocab}\)"):
            as_tokens(src, vocab_size=vocab)


def test_vocab_size_itself_is_checked() -> None:
    with pytest.raises(ValueError, match="vocab_size must be positive, got 0"):
        as_tokens([1], vocab_size=0)
    with pytest.raises(TypeError):
        as_tokens([1], vocab_size=1.5)  # type: ignore[arg-type]
    assert as_tokens([INT32_MAX], vocab_size=2**40) == [INT32_MAX]   # larger than int32: no limit
    with pytest.raises(ValueError, match="index 0 is -1"):
        as_tokens([-1], vocab_size=2**40)
    with pytest.raises(ValueError, match="vocab_size must be positive, got a negative int of"):
        as_tokens([1], vocab_size=-HUGE)


def test_list_mutated_by_an_element_during_conversion() -> None:
    victim: list[object] = []

    class Evil:
        def __index__(self) -> int:
            victim.clear()
            return 1

    victim.extend([1, Evil(), 3, 4])
    with pytest.raises(RuntimeError, match="changed size"):
        as_tokens(victim)


WIDE_DTYPES = [d for d in INT_DTYPES if np.iinfo(np.dtype(d)).max > INT32_MAX]


@pytest.mark.parametrize("dtype", WIDE_DTYPES)
def test_every_wide_dtype_range_checks(dtype: object) -> None:
    info = np.iinfo(np.dtype(dtype))
    for arr in (np.array([0, info.max, 1], dtype=dtype), np.array([0, info.max, 1], dtype=dtype)[::-1]):
        i = int(np.flatnonzero(arr == info.max)[0])
        with pytest.raises(OverflowError, match=f"token id at index {i} is {info.max}"):
            as_tokens(arr)


def test_empty_inputs_follow_the_readme_table():
    """docs/guide.md, "What as_tokens accepts": empty accepted inputs give an empty TokenVector; the
    dtype and shape rules still apply to empty arrays."""
    import numpy as np
    import pytest

    import tokenwire
    for empty in ([], (), range(0), iter([]), np.array([], dtype=np.int64),
                  np.array([], dtype=np.uint16)):
        assert len(tokenwire.as_tokens(empty)) == 0
    with pytest.raises(TypeError, match="dtype float32"):
        tokenwire.as_tokens(np.array([], dtype=np.float32))
    with pytest.raises(ValueError, match=r"shape \(0, 2\)"):
        tokenwire.as_tokens(np.zeros((0, 2), dtype=np.int32))


# ---------------------------------------------------------------------------------------------
# The exception tree: one root, built-in bases (tokenwire/errors.py)

#: (call, tokenwire class, the built-in code written before the tree catches, message part)
ERROR_TABLE = [
    (lambda: tokenwire.as_tokens([1, 2**31]), TokenIdOverflowError, OverflowError,
     "token id at index 1 is 2147483648"),
    (lambda: tokenwire.as_tokens(np.array([0, -(2**40)], dtype=np.int64)), TokenIdOverflowError,
     OverflowError, "token id at index 1 is -1099511627776"),
    (lambda: tokenwire.as_tokens([1, True]), TokenIdTypeError, TypeError,
     "token id at index 1 must be an int, got bool"),
    (lambda: tokenwire.as_tokens(np.zeros(3, dtype=np.float32)), TokenIdTypeError, TypeError,
     "dtype float32"),
    (lambda: tokenwire.as_tokens("abc"), TokenIdTypeError, TypeError, "does not take str"),
    (lambda: tokenwire.as_tokens(np.zeros((2, 2), dtype=np.int32)), TokenIdError, ValueError,
     "shape (2, 2)"),
    (lambda: tokenwire.as_tokens([5, 7], vocab_size=6), TokenIdError, ValueError,
     "token id at index 1 is 7, outside the vocabulary [0, 6)"),
    (lambda: tokenwire.TokenVector([5, -1], vocab_size=6), TokenIdError, ValueError,
     "token id at index 1 is -1"),
    (lambda: tokenwire.TokenVector.frombuffer(b"12345"), TokenIdError, ValueError, "5 bytes"),
    (lambda: tokenwire.encode([1, 70000], codec="u16"), TokenIdError, ValueError,
     "id at index 1 is 70000"),
    (lambda: tokenwire.encode([1, -3], codec="packed"), TokenIdError, ValueError,
     "id at index 1 is -3"),
    (lambda: tokenwire.encode_many([[1], [2, 70000]], codec="u16"), TokenIdError, ValueError,
     "sequence 1: id at index 1 is 70000"),
    (lambda: tokenwire.decode(tokenwire.encode([5, 9]), vocab_size=8), WireFormatError, ValueError,
     "token id at index 1 is 9, outside the vocabulary [0, 8)"),
    (lambda: tokenwire.decode_many(tokenwire.encode_many([[1], [9]]), vocab_size=8),
     WireFormatError, ValueError, "sequence 1: token id at index 0 is 9"),
    (lambda: tokenwire.decode(b"TWIX"), WireFormatError, ValueError, "bad magic"),
]


@pytest.mark.parametrize("call, cls, builtin, text", ERROR_TABLE)
def test_error_tree(call, cls, builtin, text):
    # Caught as the tokenwire class, as the root, and as the built-in older code catches.
    with pytest.raises(cls, match=re.escape(text)) as info:
        call()
    assert type(info.value) is cls
    assert isinstance(info.value, TokenwireError) and isinstance(info.value, builtin)
    try:
        call()
    except builtin:                     # `except ValueError` code keeps working
        pass


def test_error_classes_have_builtin_bases():
    assert issubclass(TokenIdError, ValueError) and issubclass(TokenIdError, TokenwireError)
    assert issubclass(TokenIdOverflowError, OverflowError)
    assert issubclass(TokenIdTypeError, TypeError)
    assert issubclass(WireFormatError, ValueError)
    # Distinct branches: an OverflowError is not a ValueError, as before the tree.
    assert not issubclass(TokenIdOverflowError, ValueError)
