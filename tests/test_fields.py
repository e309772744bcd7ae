"""TokenIds, the descriptor of one token-id field (tokenwire/fields.py): what a read returns (a
list built once, in C, from the held buffer), what a set keeps, never stale after in-place
changes, codecs and the field's pickled payload, and errors that name the field."""

from __future__ import annotations

import copy
import dataclasses
import io
import json
import pickle
import sys

import numpy as np
import pytest

pytest.importorskip("hypothesis")
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from support.requests import PROTOCOLS, big_ids, from_wire, roundtrip  # noqa: E402
from support.strategies import apply_mutation, list_mutations, token_lists  # noqa: E402

import tokenwire  # noqa: E402
from tokenwire import GenerationRequest, TokenIds, token_buffer  # noqa: E402
from tokenwire.state import _TokenwireMixin as TokenwireMixin
from tokenwire.errors import WireFormatError  # noqa: E402

PROMPT = GenerationRequest.prompt_token_ids


# --------------------------------------------------------------------------------------------
# reading a field: a plain list[int], built once


@given(ids=token_lists, wire=st.booleans())
def test_consumer_patterns(ids, wire):
    req = from_wire(ids) if wire else GenerationRequest(list(ids))
    got = req.prompt_token_ids
    assert type(got) is list
    assert got is req.prompt_token_ids                      # cached: the same object
    assert got == ids and ids == got and not (got != ids)
    assert len(got) == len(ids) == req.prompt_len
    assert bool(got) == bool(ids)
    if ids:
        first = got[0]
        assert got[1:] + [first] == ids[1:] + [ids[0]]     # a list concat, not a broadcast
    assert json.dumps(got) == json.dumps(ids)
    assert all(type(x) is int for x in got)


def test_unset_fields_read_none():
    req = GenerationRequest(None)
    assert req.prompt_token_ids is None and req.query_token_ids is None
    assert token_buffer(req, "prompt_token_ids") is None and req._prompt_token_ids_i32 is None
    assert req.prompt_len == 0 and not PROMPT.is_materialized(req)
    assert roundtrip(req).prompt_token_ids is None
    req.prompt_token_ids = [1]
    del req.prompt_token_ids                    # unset, as a plain attribute: AttributeError
    with pytest.raises(AttributeError,
                       match="'GenerationRequest' object has no attribute 'prompt_token_ids'"):
        req.prompt_token_ids
    with pytest.raises(AttributeError):
        del req.prompt_token_ids
    assert "prompt_token_ids" not in roundtrip(req).__dict__


def test_reading_a_field_on_its_class_imports_nothing():
    """``Cls.field`` on a class that is not being built by ``@dataclass`` answers without the
    import system, so an engine or a benchmark that looks the descriptor up per request does not
    search sys.path each time (a failed import of the annotations module is not cached)."""

    class Recorder:
        def __init__(self) -> None:
            self.names: list[str] = []

        def find_spec(self, name, path=None, target=None):
            self.names.append(name)
            return None

    class Plain:
        prompt_token_ids = tokenwire.TokenIds()

    recorder = Recorder()
    sys.meta_path.insert(0, recorder)
    try:
        for cls in (GenerationRequest, Plain):
            for _ in range(3):
                assert isinstance(cls.prompt_token_ids, tokenwire.TokenIds)
    finally:
        sys.meta_path.remove(recorder)
    assert recorder.names == []


# --------------------------------------------------------------------------------------------
# attribute misses stay plain and C-level (a descriptor, not __getattr__)


def test_no_getattr_anywhere():
    for klass in GenerationRequest.__mro__:
        assert "__getattr__" not in vars(klass), klass
    assert GenerationRequest.__getattribute__ is object.__getattribute__


def test_missing_attribute_is_a_plain_attribute_error():
    req = from_wire([1, 2])
    assert not hasattr(req, "no_such_attribute")
    assert getattr(req, "no_such_attribute", "dflt") == "dflt"
    with pytest.raises(AttributeError) as info:
        req.no_such_attribute
    assert type(info.value) is AttributeError
    assert str(info.value) == "'GenerationRequest' object has no attribute 'no_such_attribute'"
    assert not PROMPT.is_materialized(req)                  # probes never touch the field


# --------------------------------------------------------------------------------------------
# setting a field: buffers are held as a snapshot, containers kept as they are


def test_setting_buffers_is_held_and_snapshotted():
    arr = np.arange(10, dtype=np.int64)[::2]                 # strided int64: converted in C
    req = GenerationRequest(arr)
    arr[0] = 99                                              # the request took a snapshot
    assert req._prompt_token_ids_i32 == [0, 2, 4, 6, 8]
    assert not PROMPT.is_materialized(req)
    assert req.prompt_token_ids == [0, 2, 4, 6, 8]
    assert req._prompt_token_ids_i32 == [0, 2, 4, 6, 8]     # read, unchanged: still held
    assert GenerationRequest((1, 2))._prompt_token_ids_i32 is None
    assert GenerationRequest((1, 2)).prompt_token_ids == (1, 2)         # kept as it is
    assert GenerationRequest([1, 2])._prompt_token_ids_i32 is None


@pytest.mark.parametrize("value, exc, msg", [
    ("abc", TypeError, "does not take str"),
    (np.zeros((2, 2), np.int32), ValueError, "1-D"),
    (np.array([2**40]), OverflowError, "index 0"),
    (np.array([1.5]), TypeError, "dtype float64"),
    (7, TypeError, "expected a sequence"),
])
def test_setting_bad_values_names_the_field(value, exc, msg):
    with pytest.raises(exc, match=msg) as info:
        GenerationRequest(value)
    assert "GenerationRequest.prompt_token_ids" in str(info.value)


def test_a_token_field_with_an_id_too_long_to_print():
    # Python refuses to write an int of more than 4300 digits: the field's error names its
    # size and stays tokenwire's; repr() of the request does not fail either
    huge = 10**5000
    message = ("GenerationRequest.prompt_token_ids: token id at index 1 is an int of 16610 bits, "
               "outside int32 [-2147483648, 2147483647]")
    with pytest.raises(tokenwire.errors.TokenIdOverflowError) as at_set:
        GenerationRequest(iter([1, huge]))
    assert str(at_set.value) == message
    req = GenerationRequest([1, huge])              # a list is kept as it is, checked when used
    with pytest.raises(tokenwire.errors.TokenIdOverflowError) as at_use:
        token_buffer(req, "prompt_token_ids")
    assert str(at_use.value) == message
    assert "prompt_token_ids=[1, an int of 16610 bits]" in repr(req)
    req.prompt_token_ids = [-huge] * 10
    assert ("prompt_token_ids=<10 ids: [a negative int of 16610 bits, a negative int of 16610 "
            "bits, ") in repr(req)
    req.other = [huge]
    assert "other=[an int of 16610 bits]" in repr(req)


# --------------------------------------------------------------------------------------------
# never stale: in-place changes to the materialized list


@given(ids=token_lists, mutations=st.lists(list_mutations, min_size=1, max_size=4),
       wire=st.booleans())
def test_mutations_are_reflected_everywhere(ids, mutations, wire):
    req = from_wire(ids) if wire else GenerationRequest(list(ids))
    if wire:
        assert req._prompt_token_ids_i32 == ids
    lst = req.prompt_token_ids
    expected = list(ids)
    diverged = False        # once a change is seen, the ids are no longer "held as a buffer"
    for m in mutations:
        apply_mutation(lst, m)
        apply_mutation(expected, m)
        diverged |= expected != ids
        assert req.prompt_token_ids is lst
        assert token_buffer(req, "prompt_token_ids") == expected
        side = req._prompt_token_ids_i32
        if wire and not diverged:
            assert side == expected          # still the held buffer, and equal to the list
        else:
            assert side is None              # changed (or list-built): the worker uses the list
        for protocol in (2, 5):
            assert roundtrip(req, protocol).prompt_token_ids == expected
        assert copy.copy(req).prompt_token_ids == expected
        assert copy.deepcopy(req).prompt_token_ids == expected


@pytest.mark.parametrize("mutate", [
    lambda ids: ids.append(5),
    lambda ids: ids.extend([1, 2, 3]),
    lambda ids: ids.__setitem__(slice(0, 2), [9, 9, 9]),
    lambda ids: ids.sort(),
    lambda ids: ids.__delitem__(0),
    lambda ids: ids.__setitem__(-1, 2**31 - 1),
], ids=["append", "extend", "slice_assign", "sort", "del", "setitem"])
def test_each_mutation_kind_on_a_decoded_request(mutate):
    ids = big_ids(40_000)
    req = from_wire(ids)
    before = req._prompt_token_ids_i32
    assert before is not None
    lst = req.prompt_token_ids
    assert req._prompt_token_ids_i32 is before       # read but unchanged: same held vector
    mutate(lst)
    expected = list(lst)
    assert expected != ids
    assert req._prompt_token_ids_i32 is None
    assert token_buffer(req, "prompt_token_ids") == expected
    out = roundtrip(req)
    assert out.prompt_token_ids == expected and out._prompt_token_ids_i32 == expected
    lst.append(1)                                    # a second change after the first sync
    assert token_buffer(req, "prompt_token_ids") == expected + [1]
    assert roundtrip(req).prompt_token_ids == expected + [1]


def test_user_list_is_held_and_its_mutations_reflected():
    ids = [1, 2, 3]
    req = GenerationRequest(ids)
    assert req.prompt_token_ids is ids
    ids.append(4)
    assert roundtrip(req).prompt_token_ids == [1, 2, 3, 4]
    ids[0] = 0
    assert token_buffer(req, "prompt_token_ids") == [0, 2, 3, 4]


@pytest.mark.parametrize("bad, exc", [("x", TypeError), (None, TypeError)])
def test_list_mutated_to_hold_a_non_id_fails_loudly_naming_the_field(bad, exc):
    req = from_wire([1, 2, 3])
    req.prompt_token_ids.append(bad)
    assert pickle.loads(pickle.dumps(req)).prompt_token_ids == [1, 2, 3, bad]   # as a plain list
    with pytest.raises(exc, match=r"GenerationRequest\.prompt_token_ids: token id at index 3"):
        token_buffer(req, "prompt_token_ids")


@pytest.mark.parametrize("extra", [2**31, -(2**31) - 1, 2**40, True])
def test_received_list_changed_to_non_int32_travels_as_that_list(extra):
    req = from_wire([1, 2])
    req.prompt_token_ids.append(extra)
    assert req._prompt_token_ids_i32 is None                # no longer held as a buffer, no raise
    for protocol in PROTOCOLS:
        out = roundtrip(req, protocol)
        assert out.prompt_token_ids == [1, 2, extra]
        assert type(out.prompt_token_ids[2]) is type(extra)
    deep = copy.deepcopy(req)
    assert deep.prompt_token_ids == [1, 2, extra]
    assert deep.prompt_token_ids is not req.prompt_token_ids
    assert type(vars(req)["prompt_token_ids"]) is list        # the list is the source now
    with pytest.raises((OverflowError, TypeError),
                       match=r"GenerationRequest\.prompt_token_ids: token id at index 2"):
        token_buffer(req, "prompt_token_ids")


# --------------------------------------------------------------------------------------------
# tuples stay tuples


@tokenwire.token_fields("input_ids")
@dataclasses.dataclass(frozen=True)
class FrozenTuple:
    rid: str
    input_ids: tuple
    n: int = 0


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_frozen_dataclass_with_a_tuple_field_stays_hashable(protocol):
    f = FrozenTuple("r", (1, 2, 3))
    assert f.input_ids == (1, 2, 3) and hash(f) == hash(("r", (1, 2, 3), 0))
    out = roundtrip(f, protocol)
    assert not FrozenTuple.input_ids.is_materialized(out)     # travelled as a buffer
    assert out == f and hash(out) == hash(f) and type(out.input_ids) is tuple
    assert copy.deepcopy(f).input_ids == (1, 2, 3) and hash(copy.deepcopy(out)) == hash(f)
    big = FrozenTuple("r", (2**31, 1))                        # not int32: the tuple itself
    assert roundtrip(big, protocol).input_ids == (2**31, 1)


# --------------------------------------------------------------------------------------------
# codecs: a field's payload as a compact frame


def test_codecs():
    assert TokenIds().codec == "raw" and PROMPT.codec == "raw"
    with pytest.raises(ValueError, match="unknown codec 'zip'"):        # the core's message
        TokenIds(codec="zip")


def test_codec_names_come_from_the_core():
    with pytest.raises(ValueError) as core:
        tokenwire.encode([], codec="zip")
    with pytest.raises(ValueError) as ours:
        TokenIds(codec="zip")
    assert str(ours.value) == str(core.value)


class Compact(TokenwireMixin):
    ids = TokenIds(codec="packed")
    small = TokenIds(codec="u16")
    raw = TokenIds()


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_compact_codecs_travel_as_frames(protocol):
    obj = Compact()
    obj.ids = list(range(0, 150_000, 7))
    obj.small = [1, 65_535, 0]
    obj.raw = [-5, 2**31 - 1]
    state = obj.__getstate__()
    assert type(state["ids"]) is bytes and tokenwire.frame_info(state["ids"]).codec == "packed"
    assert tokenwire.frame_info(state["small"]).codec == "u16"
    assert type(state["raw"]) is tokenwire.TokenVector
    assert len(state["ids"]) < 4 * len(obj.ids) * 0.6        # 18 bits per id, not 32
    back = pickle.loads(pickle.dumps(obj, protocol=protocol))
    assert not Compact.ids.is_materialized(back)              # decoded to a buffer, no list
    assert token_buffer(back, "ids") == list(range(0, 150_000, 7))
    assert back.ids == list(range(0, 150_000, 7)) and back.small == [1, 65_535, 0]
    assert back.raw == [-5, 2**31 - 1]


def test_compact_codec_errors_name_the_field():
    obj = Compact()
    obj.small = [70_000]
    with pytest.raises(ValueError, match="u16"):
        pickle.dumps(obj)
    state = Compact().__getstate__()
    state["ids"] = b"TWIR\x01garbage"
    with pytest.raises(tokenwire.WireFormatError, match="^Compact state key 'ids': truncated"):
        Compact().__setstate__(state)


def test_frame_error_names_the_key_once():
    state = Compact().__getstate__()
    state["ids"] = b"TWIR\x01garbage"
    with pytest.raises(WireFormatError) as info:
        Compact().__setstate__(state)
    assert str(info.value).count("'ids'") == 1


@pytest.mark.parametrize("protocol", [0, 1, 2])
def test_compact_frames_below_protocol_3_name_no_codecs_global(protocol):
    obj = Compact()
    obj.ids, obj.small, obj.raw = [1, 2, 3], (4, 5), [6]
    data = pickle.dumps(obj, protocol)
    assert b"_codecs" not in data
    allow = {(__name__, "Compact")} | ({("copyreg", "_reconstructor"), ("builtins", "object")}
                                       if protocol < 2 else set())   # any plain object, below 2

    class Restricted(pickle.Unpickler):
        def find_class(self, module, name):
            return tokenwire.unpickle.find_class(module, name, allow=allow)

    out = Restricted(io.BytesIO(data)).load()
    assert not Compact.ids.is_materialized(out)               # decoded to a buffer
    assert (out.ids, out.small, out.raw) == ([1, 2, 3], (4, 5), [6])
    assert type(obj.__getstate__()["ids"]) is bytes          # protocol 3+: the frame as bytes


def test_frame_as_text_must_be_latin1():
    state = Compact().__getstate__()
    state["ids"] = "\u0100" + tokenwire.encode([1]).decode("latin-1")
    with pytest.raises(WireFormatError,
                       match="Compact state key 'ids': a frame sent as text must be latin-1"):
        Compact().__setstate__(state)


# --------------------------------------------------------------------------------------------
# vocab_size: ids entering a request object are checked where they enter


class VocabReq:
    """A receiver's request class; the tests give its field a vocabulary for a while."""

    ids = TokenIds(vocab_size=1000)
    plain = TokenIds()


@pytest.mark.parametrize("value", [[1, 2, 40_000], (1, 2, 40_000),
                                   np.array([1, 2, 40_000], np.int64),
                                   tokenwire.TokenVector([1, 2, 40_000]),
                                   __import__("array").array("i", [1, 2, 40_000])])
def test_vocab_size_checks_ids_set_on_the_field(value):
    req = VocabReq()
    with pytest.raises(tokenwire.TokenIdError,
                       match=r"VocabReq\.ids: token id at index 2 is 40000, outside the "
                             r"vocabulary \[0, 1000\)"):
        req.ids = value
    assert "ids" not in vars(req)                     # nothing was stored
    req.ids = [0, 999]
    req.plain = [40_000]                              # a field without vocab_size takes any id
    assert req.ids == [0, 999] and req.plain == [40_000]
    req.ids = None
    assert req.ids is None


def test_vocab_size_refuses_values_that_are_not_ids():
    with pytest.raises(tokenwire.errors.TokenIdTypeError, match=r"VocabReq\.ids: .*index 1"):
        VocabReq().ids = [1, [2]]                      # a batch is not ids of this vocabulary


@pytest.mark.parametrize("how", ["held", "tuple", "list form", "pfor"])
def test_vocab_size_checks_ids_received_in_a_pickled_state(how):
    sender = VocabReq()
    field = vars(VocabReq)["ids"]
    field.vocab_size, field.codec = None, "pfor" if how == "pfor" else "raw"
    previous = tokenwire.list_on_wire(how == "list form")
    try:
        sender.ids = (5, 6, 123_456, 7) if how == "tuple" else [5, 6, 123_456, 7]
        data = pickle.dumps(sender, protocol=5)
    finally:
        tokenwire.list_on_wire(previous)
        field.vocab_size, field.codec = 1000, "raw"
    with pytest.raises(tokenwire.TokenIdError,
                       match=r"VocabReq\.ids: token id at index 2 is 123456, outside the "
                             r"vocabulary \[0, 1000\)"):
        pickle.loads(data)
    sender.ids = [5, 6, 7]
    assert pickle.loads(pickle.dumps(sender, protocol=5)).ids == [5, 6, 7]


def test_vocab_size_is_checked_when_declared():
    with pytest.raises(ValueError, match="vocab_size must be positive, got 0"):
        TokenIds(vocab_size=0)
    assert "vocab_size=1000" in repr(vars(VocabReq)["ids"])
