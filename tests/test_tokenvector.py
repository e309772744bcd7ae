"""TokenVector: buffer protocol, sequence behaviour, arithmetic (+ and *), pickling, copying."""

from __future__ import annotations

import copy
import gc
import pickle
import sys
import weakref
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given
from support.strategies import BOUNDARY_IDS, token_lists

import tokenwire
import tokenwire._core
from tokenwire import TokenVector, as_tokens
from tokenwire._core import _restore_token_vector


def test_buffer_protocol_shape_format_readonly() -> None:
    tv = TokenVector([5, -1, 2**31 - 1])
    m = memoryview(tv)
    assert (m.format, m.itemsize, m.ndim, m.shape, m.strides) == ("i", 4, 1, (3,), (4,))
    assert m.readonly and m.c_contiguous and m.nbytes == 12
    assert m.tolist() == [5, -1, 2**31 - 1]
    with pytest.raises(TypeError):
        m[0] = 1
    with pytest.raises(ValueError, match="WRITEABLE"):
        np.frombuffer(tv, dtype=np.int32).setflags(write=True)


def get_buffer(obj: object, flags: int) -> None:
    """PyObject_GetBuffer(obj, &view, flags) as C code calls it, then PyBuffer_Release: the
    exporter's own answer, with no Python-level wrapper checking `readonly` after it (ctypes'
    from_buffer refuses a read-only view by itself, so it cannot tell whether tokenwire did)."""
    import ctypes

    api = ctypes.pythonapi
    api.PyObject_GetBuffer.argtypes = [ctypes.py_object, ctypes.c_void_p, ctypes.c_int]
    api.PyObject_GetBuffer.restype = ctypes.c_int
    api.PyBuffer_Release.argtypes = [ctypes.c_void_p]
    api.PyBuffer_Release.restype = None
    view = ctypes.create_string_buffer(256)          # a Py_buffer is 80 bytes on 64-bit builds
    api.PyObject_GetBuffer(obj, ctypes.addressof(view), flags)   # raises what the exporter set
    api.PyBuffer_Release(ctypes.addressof(view))


@pytest.mark.parametrize("make", [lambda: TokenVector([1, 2]),
                                  lambda: tokenwire._core.ImmutableBuffer(b"abcd")],
                         ids=["TokenVector", "ImmutableBuffer"])
def test_writable_buffer_request_is_refused(make) -> None:
    PyBUF_SIMPLE, PyBUF_WRITABLE, PyBUF_ND = 0, 0x0001, 0x0008
    obj = make()
    get_buffer(obj, PyBUF_SIMPLE)                    # a read-only request is served
    get_buffer(obj, PyBUF_ND)
    for flags in (PyBUF_WRITABLE, PyBUF_WRITABLE | PyBUF_ND):
        with pytest.raises(BufferError, match=f"^{type(obj).__name__} is read-only$"):
            get_buffer(obj, flags)


def test_numpy_view_is_zero_copy_and_outlives_the_vector() -> None:
    tv = as_tokens(np.arange(100_000, dtype=np.int32))
    a = np.asarray(tv)
    assert a.dtype == np.int32 and a.shape == (100_000,)
    assert not a.flags.owndata and not a.flags.writeable
    assert a.ctypes.data == np.asarray(tv).ctypes.data  # the same memory every time
    ref = weakref.ref(tv)
    del tv
    gc.collect()
    assert ref() is not None  # the view keeps the vector (and its memory) alive
    assert a[0] == 0 and a[-1] == 99_999 and int(a.sum()) == sum(range(100_000))
    del a
    gc.collect()
    assert ref() is None      # ...and nothing else does


def test_empty_vector() -> None:
    tv = TokenVector()
    assert len(tv) == 0 and tv.tolist() == [] and tv.tobytes() == b"" and tv.nbytes == 0
    assert np.asarray(tv).shape == (0,) and memoryview(tv).nbytes == 0
    assert tv == [] and tv == () and tv == TokenVector([]) and not tv
    assert repr(tv) == "TokenVector([])"
    assert list(tv) == [] and list(reversed(tv)) == []


@given(token_lists)
def test_sequence_behaviour_matches_list(ids: list[int]) -> None:
    tv = TokenVector(ids)
    assert len(tv) == len(ids)
    assert list(tv) == ids and tv.tolist() == ids and list(reversed(tv)) == ids[::-1]
    for i in (0, 1, -1, -2, len(ids) // 2):
        if -len(ids) <= i < len(ids):
            assert tv[i] == ids[i]
    for sl in (slice(None), slice(1, None), slice(None, -1), slice(None, None, 2),
               slice(None, None, -1), slice(-3, None), slice(5, 2), slice(1, 100, 7)):
        got = tv[sl]
        assert type(got) is TokenVector and got == ids[sl]
    assert tv == ids and tv == tuple(ids) and not (tv != ids)
    assert tv.nbytes == 4 * len(ids)
    assert tv.tobytes() == np.array(ids, dtype="<i4").tobytes()
    for v in ids[:3]:
        assert v in tv and tv.count(v) == ids.count(v) and tv.index(v) == ids.index(v)


def test_indexing_errors_name_the_index() -> None:
    tv = TokenVector([1, 2, 3])
    with pytest.raises(IndexError, match="index 3 out of range for length 3"):
        tv[3]
    with pytest.raises(IndexError, match="index -4 out of range for length 3"):
        tv[-4]
    with pytest.raises(IndexError, match="out of range"):
        tv[2**70]
    with pytest.raises(TypeError, match="integers or slices, not str"):
        tv["a"]
    assert tv[np.int64(1)] == 2 and tv[True] == 2


def test_immutable() -> None:
    tv = TokenVector([1, 2, 3])
    with pytest.raises(TypeError):
        tv[0] = 5  # type: ignore[index]
    with pytest.raises(TypeError):
        del tv[0]  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        hash(tv)
    with pytest.raises(TypeError):
        class Sub(TokenVector):  # type: ignore[misc]
            pass


def test_equality_rules() -> None:
    tv = TokenVector([1, 2, 3])
    assert tv == [1, 2, 3] and tv == (1, 2, 3) and tv == TokenVector([1, 2, 3])
    assert tv != [1, 2] and tv != [1, 2, 4] and tv != [1, 2, 3, 4] and tv != TokenVector([1, 2])
    assert tv != "abc" and tv != None and tv != {1: 1}  # noqa: E711
    assert tv == [1, 2.0, np.int64(3)]      # list semantics: 2 == 2.0
    assert tv != [1, 2, "3"] and tv != [1, 2, 2**80]
    assert (np.arange(1, 4, dtype=np.int32) == tv).all()


def test_contains_count_index() -> None:
    tv = TokenVector([7, 8, 7, 9])
    assert 7 in tv and 10 not in tv and "7" not in tv and 2**40 not in tv and None not in tv
    assert tv.count(7) == 2 and tv.count(10) == 0 and tv.count(2.5) == 0
    assert tv.index(7) == 0 and tv.index(7, 1) == 2 and tv.index(9, -1) == 3
    with pytest.raises(ValueError, match="10 is not in TokenVector"):
        tv.index(10)
    with pytest.raises(ValueError, match="is not in TokenVector"):
        tv.index(8, 2)
    assert isinstance(tv, Sequence)


def test_index_of_a_value_that_cannot_be_printed_names_it_safely() -> None:
    class NoRepr:
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    tv = TokenVector([7, 8])
    with pytest.raises(ValueError, match="^an int of 16610 bits is not in TokenVector$"):
        tv.index(10**5000)
    with pytest.raises(ValueError, match=r"^<NoRepr object: RuntimeError from its repr\(\)> "
                                         r"is not in TokenVector$"):
        tv.index(NoRepr())
    with pytest.raises(ValueError) as long:
        tv.index("x" * 10**6)
    assert str(long.value) == f"'{'x' * 17}...{'x' * 17}' is not in TokenVector"


def test_repr_is_short_for_huge_vectors() -> None:
    tv = as_tokens(np.arange(128_000, dtype=np.int32))
    r = repr(tv)
    assert r == "TokenVector([0, 1, 2, ..., 127997, 127998, 127999], len=128000)"
    assert repr(TokenVector([1, -2])) == "TokenVector([1, -2])"


def test_sizeof_counts_owned_memory() -> None:
    assert sys.getsizeof(TokenVector(range(1000))) > sys.getsizeof(TokenVector()) + 3999


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
@pytest.mark.parametrize("ids", [[], BOUNDARY_IDS, list(range(-500, 100_000, 7))])
def test_pickle_round_trip_every_protocol(protocol: int, ids: list[int]) -> None:
    tv = TokenVector(ids)
    back = pickle.loads(pickle.dumps(tv, protocol=protocol))
    assert type(back) is TokenVector and back.tolist() == ids


def test_reduce_tuple_carries_owned_bytes() -> None:
    tv = TokenVector([1, 2, -3])
    fn, args = tv.__reduce_ex__(3)
    assert fn is _restore_token_vector
    assert args == (np.array([1, 2, -3], dtype="<i4").tobytes(),)
    assert tv.__reduce_ex__(2) == (fn, (args[0].decode("latin-1"),))   # no bytes opcode below 3
    fn5, (pb,) = tv.__reduce_ex__(5)
    assert fn5 is _restore_token_vector and isinstance(pb, pickle.PickleBuffer)
    assert bytes(pb.raw()) == tv.tobytes()


def test_protocol5_out_of_band_is_zero_copy() -> None:
    tv = as_tokens(np.arange(50_000, dtype=np.int32))
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(tv, protocol=5, buffer_callback=buffers.append)
    assert len(buffers) == 1 and len(data) < 200          # the payload is not in the pickle
    back = pickle.loads(data, buffers=buffers)
    assert back.tolist() == list(range(50_000))
    # The result views the buffer it was given: same address, no copy.
    assert np.asarray(back).ctypes.data == np.asarray(tv).ctypes.data
    # In-band at protocol 5 without a callback: the bytes are inside the pickle.
    inband = pickle.dumps(tv, protocol=5)
    assert len(inband) > tv.nbytes and pickle.loads(inband).tolist() == list(range(50_000))


def test_out_of_band_from_raw_bytes_frames() -> None:
    """What a transport does: send `pb.raw()` as a frame, receive it as bytes."""
    tv = TokenVector(range(1000))
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(tv, protocol=5, buffer_callback=buffers.append)
    frames = [bytes(b.raw()) for b in buffers]
    assert pickle.loads(data, buffers=frames).tolist() == list(range(1000))
    mutable = [bytearray(b.raw()) for b in buffers]
    back = pickle.loads(data, buffers=mutable)
    mutable[0][:4] = b"\xff\xff\xff\xff"
    assert back.tolist() == list(range(1000))  # a writable source was copied: later writes do not show


def test_copy_and_deepcopy_cost_nothing() -> None:
    tv = TokenVector(range(10_000))
    assert copy.copy(tv) is tv and copy.deepcopy(tv) is tv
    view = TokenVector.frombuffer(tv.tobytes())   # a view of a bytes object
    deep = copy.deepcopy(view)
    assert deep == view and deep is not view


def test_frombuffer_zero_copy_for_immutable_and_copy_for_mutable() -> None:
    raw = np.arange(1000, dtype="<i4").tobytes()
    tv = TokenVector.frombuffer(raw)
    assert tv == list(range(1000))
    assert np.asarray(tv).ctypes.data == np.frombuffer(raw, dtype=np.uint8).ctypes.data
    ba = bytearray(raw)
    copied = TokenVector.frombuffer(ba)
    ba[:4] = b"\x07\x00\x00\x00"
    assert copied[0] == 0
    ro = memoryview(bytearray(raw)).toreadonly()
    assert TokenVector.frombuffer(ro) == list(range(1000))
    unaligned = memoryview(b"\x00" + raw)[1:]
    assert TokenVector.frombuffer(unaligned) == list(range(1000))
    with pytest.raises(ValueError, match="multiple of 4 bytes, got 7 bytes"):
        TokenVector.frombuffer(b"\x00" * 7)
    with pytest.raises(TypeError):
        TokenVector.frombuffer(12)  # type: ignore[arg-type]


def test_frombuffer_keeps_source_alive() -> None:
    raw = np.arange(64, dtype="<i4").tobytes()
    before = sys.getrefcount(raw)
    tv = TokenVector.frombuffer(raw)
    assert sys.getrefcount(raw) == before + 1      # the view holds the bytes
    del tv
    assert sys.getrefcount(raw) == before


def test_readonly_view_of_mutable_memory_is_copied() -> None:
    ba = bytearray(np.arange(16, dtype="<i4").tobytes())
    tv = TokenVector.frombuffer(memoryview(ba).toreadonly())
    ba[:4] = b"\x09\x00\x00\x00"
    assert tv[0] == 0


def test_is_immutable_source() -> None:
    from tokenwire._core import is_immutable_source

    b = b"12345678"
    assert is_immutable_source(b) and is_immutable_source(memoryview(b)[2:])
    assert is_immutable_source(TokenVector([1])) and is_immutable_source(memoryview(TokenVector([1])))
    assert not is_immutable_source(bytearray(b)) and not is_immutable_source(memoryview(bytearray(b)).toreadonly())
    assert not is_immutable_source(np.zeros(2, dtype=np.int32))


def test_constructor_copies_and_validates() -> None:
    src = TokenVector([1, 2, 3])
    again = TokenVector(src)
    assert again == src and again is not src
    assert TokenVector(np.array([4, 5], dtype=np.int64)) == [4, 5]
    with pytest.raises(ValueError, match="vocabulary"):
        TokenVector([1, 99], vocab_size=10)
    with pytest.raises(TypeError, match="got NoneType"):
        TokenVector(None)  # type: ignore[arg-type]


def test_eq_trusts_the_real_size_not_an_overridden_len() -> None:
    class LyingList(list):  # type: ignore[type-arg]
        def __len__(self) -> int:
            return 3

    class LyingTuple(tuple):  # type: ignore[type-arg]
        def __len__(self) -> int:
            return 100_000

    assert TokenVector([1, 2, 3]) != LyingList()
    assert TokenVector([1, 2, 3]) == LyingList([1, 2, 3])
    assert TokenVector(range(100_000)) != LyingTuple((0, 1))


def test_eq_holds_a_reference_while_an_element_compares() -> None:
    # What sys.getrefcount reports inside the compare depends on the interpreter (CPython 3.14
    # lends some references instead of taking them), so the count is held against list's own
    # __eq__ in the same situation: it takes a reference to each element it compares.
    def refs_seen_while_comparing(seven: object) -> int:
        victim: list[object] = []
        seen = []

        class Shrinking:
            def __eq__(self, other: object) -> bool:
                victim.clear()                       # drops the list's reference to self
                seen.append(sys.getrefcount(self))
                return NotImplemented                # then int.__eq__(7, self) runs

        victim.append(Shrinking())
        assert (seven == victim) is False
        assert len(seen) == 1
        return seen[0]

    assert refs_seen_while_comparing(TokenVector([7])) >= refs_seen_while_comparing([7])


def test_frombuffer_refuses_object_arrays_and_strided_memory_alike():
    """An object array's bytes are pointers (reading them would leak addresses as ids); strided
    memory is one documented error whether numpy or memoryview holds it."""
    import numpy as np
    import pytest

    import tokenwire
    with pytest.raises(TypeError, match="format 'O'"):
        tokenwire.TokenVector.frombuffer(np.array([1, 2], dtype=object))
    for strided in (np.arange(8, dtype=np.int32)[::2], memoryview(np.arange(8, dtype=np.int32))[::2]):
        with pytest.raises(tokenwire.TokenIdError, match="C-contiguous"):
            tokenwire.TokenVector.frombuffer(strided)
    assert tokenwire.TokenVector.frombuffer(np.arange(4, dtype=np.int32)) == [0, 1, 2, 3]


def test_frombuffer_takes_raw_bytes_and_integer_items() -> None:
    """Raw bytes (no format, 'B', 'b', 'c') and integer items of any size are memory holding
    ids: their bytes are read as little-endian int32."""
    import array
    import ctypes

    raw = b"\x01\x00\x00\x00\xff\xff\xff\xff"
    for data in (raw, bytearray(raw), memoryview(raw), memoryview(raw).cast("b"),
                 memoryview(raw).cast("c"), (ctypes.c_char * 8).from_buffer_copy(raw),
                 (ctypes.c_ubyte * 8).from_buffer_copy(raw),
                 (ctypes.c_byte * 8).from_buffer_copy(raw)):
        assert TokenVector.frombuffer(data) == [1, -1], type(data)
    assert TokenVector.frombuffer((ctypes.c_int32 * 3)(5, -6, 7)) == [5, -6, 7]
    assert TokenVector.frombuffer(array.array("i", [8, 9])) == [8, 9]
    assert TokenVector.frombuffer(np.array([2, 3], dtype="<u4")) == [2, 3]
    # the bytes of wider integers, read as int32 all the same (documented)
    assert TokenVector.frombuffer((ctypes.c_int64 * 1)(5)) == [5, 0]
    assert TokenVector.frombuffer(np.array([1], dtype="<i2").repeat(2)) == [0x10001]


@pytest.mark.parametrize(("make", "fmt"), [
    (lambda: __import__("ctypes").c_char_p * 2, "<z"),           # pointers to strings
    (lambda: __import__("ctypes").c_void_p * 2, "<P"),           # pointers
    (lambda: __import__("ctypes").c_float * 2, "<f"),
    (lambda: __import__("ctypes").c_bool * 4, "<?"),
    (lambda: __import__("ctypes").c_wchar * 2, "<u"),
], ids=["c_char_p", "c_void_p", "c_float", "c_bool", "c_wchar"])
def test_frombuffer_refuses_ctypes_arrays_that_do_not_hold_ids(make: object, fmt: str) -> None:
    import ctypes
    import re

    import tokenwire
    arr = make()()          # type: ignore[operator]
    if fmt == "<z":
        arr = (ctypes.c_char_p * 2)(b"secret", b"ids")    # their addresses must not leak as ids
    with pytest.raises(tokenwire.errors.TokenIdTypeError, match=re.escape(f"format {fmt!r}")):
        TokenVector.frombuffer(arr)


@pytest.mark.parametrize("dtype", ["f4", "f8", "?", "c8", "f2"])
def test_frombuffer_refuses_non_integer_arrays_naming_the_format(dtype: str) -> None:
    import tokenwire
    arr = np.zeros(4, dtype=dtype)
    with pytest.raises(tokenwire.errors.TokenIdTypeError, match="format '") as exc:
        TokenVector.frombuffer(arr)
    assert memoryview(arr).format in str(exc.value)


# --------------------------------------------------------------------------------------------
# TokenVector + and *: a TokenVector only when every operand is one, else a list


def test_concatenation_rule():
    tv = TokenVector([1, 2, 3])
    assert type(tv + tv) is TokenVector and tv + tv == [1, 2, 3, 1, 2, 3]
    for other in ([4], (4,)):
        assert type(tv + other) is list and tv + other == [1, 2, 3, 4]
        assert type(other + tv) is list and other + tv == [4, 1, 2, 3]
    assert type(tv * 2) is TokenVector and 2 * tv == tv * 2 == [1, 2, 3] * 2
    assert tv * 0 == [] and tv * -1 == [] and TokenVector() * 5 == []
    assert tv[1:] + [tv[0]] == [2, 3, 1]
    assert (tv + [2**40, "x"])[-1] == "x"                   # a list holds anything
    for bad in ("ab", 1.5, {1}, None):
        with pytest.raises(TypeError):
            tv + bad
    with pytest.raises(TypeError):
        tv * 1.5
    with pytest.raises(TypeError):
        tv * tv
    with pytest.raises((MemoryError, OverflowError)):
        tv * (2**62)
    lst = [0]
    alias = lst
    lst += tv            # documented: like an ndarray, rebinds to a new list
    assert lst == [0, 1, 2, 3] and alias == [0]
    alias.extend(tv)
    assert alias == [0, 1, 2, 3]


# -- base: views and copies ------------------------------------------------------------------

def _shares(tv: TokenVector, obj: object) -> bool:
    """Whether `tv`'s ids are `obj`'s memory (numpy's own answer, from the addresses)."""
    return bool(np.shares_memory(np.frombuffer(tv, dtype=np.int32),
                                 np.frombuffer(memoryview(obj).cast("B"), dtype=np.uint8)))


def test_base_of_a_view_is_its_source() -> None:
    ids = np.arange(1000, dtype=np.int32)
    raw = ids.tobytes()
    tv = TokenVector.frombuffer(raw)
    assert tv.base is raw and _shares(tv, raw)
    frame = tokenwire.encode(ids, codec="raw")
    decoded = tokenwire.decode(frame)
    assert decoded.base is frame and _shares(decoded, frame)
    held = tokenwire._core.ImmutableBuffer(ids)            # a promise: viewed in place
    view = TokenVector.frombuffer(held)
    assert view.base is held and np.shares_memory(np.asarray(view), ids)


def test_base_of_a_copy_is_none() -> None:
    ids = np.arange(1000, dtype=np.int32)
    owned = [as_tokens(ids), TokenVector(list(range(10))), TokenVector(),
             TokenVector.frombuffer(bytearray(ids.tobytes())),       # mutable: copied
             tokenwire.decode(tokenwire.encode(ids, codec="packed")),  # decoded into a buffer
             tokenwire.decode(tokenwire.encode(ids, codec="raw"))[10:20],   # a slice owns
             copy.deepcopy(tokenwire.decode(tokenwire.encode(ids, codec="raw")))]
    for tv in owned:
        assert tv.base is None
    assert not np.shares_memory(np.asarray(owned[0]), ids)


def test_base_after_an_unaligned_view_is_aligned() -> None:
    raw = b"x" + np.arange(50, dtype=np.int32).tobytes()
    tv = TokenVector.frombuffer(memoryview(raw)[1:])
    assert tv.base is not None and tv.base.obj is raw       # the memoryview, over `raw`
    np.asarray(tv)                          # exporting int32 makes an aligned copy of its own
    assert tv.base is None and tv.tolist() == list(range(50))
    with pytest.raises(AttributeError):
        tv.base = raw                       # type: ignore[misc]
