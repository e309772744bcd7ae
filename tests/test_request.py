"""The request layer: TokenIds, TokenwireMixin, GenerationRequest."""

from __future__ import annotations

import copy
import copyreg
import json
import re
import pickle
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tokenwire
import tokenwire.unpickle
from support.strategies import (
    BOUNDARY_IDS,
    ID_SOURCES,
    apply_mutation,
    as_source,
    list_mutations,
    token_lists,
)
from tokenwire import GenerationRequest, TokenIds, TokenVector, TokenwireMixin, token_buffer
from tokenwire.errors import WireFormatError
from tokenwire.fields import _TokenField
from tokenwire.state import STATE_VERSION, _config

FIXTURES = Path(__file__).parent / "fixtures"
PROMPT = GenerationRequest.prompt_token_ids
QUERY = GenerationRequest.query_token_ids
PROTOCOLS = range(pickle.HIGHEST_PROTOCOL + 1)


def big_ids(n: int = 128_000, seed: int = 0) -> list[int]:
    return np.random.default_rng(seed).integers(0, 262_144, size=n, dtype=np.int32).tolist()


def from_wire(ids, protocol: int = 5, **kwargs) -> GenerationRequest:
    """A request as a worker sees it: built from a list on the proxy, pickled, unpickled."""
    return pickle.loads(pickle.dumps(GenerationRequest(list(ids), **kwargs), protocol=protocol))


def roundtrip(obj, protocol: int = 5):
    return pickle.loads(pickle.dumps(obj, protocol=protocol))


def no_lists_in(obj) -> bool:
    """True when no value of the (state) dict is a list."""
    return not any(isinstance(v, list) for v in obj.values())


# --------------------------------------------------------------------------------------------
# round trips


@given(ids=token_lists, kind=st.sampled_from(ID_SOURCES), read=st.booleans(),
       protocol=st.sampled_from(list(PROTOCOLS)))
def test_roundtrip_any_source_read_or_unread(ids, kind, read, protocol):
    req = GenerationRequest(as_source(ids, kind), {"max_tokens": 8}, query_token_ids=ids[:3], id=7)
    if read:
        assert list(req.prompt_token_ids) == ids
    out = roundtrip(req, protocol)
    assert not PROMPT.is_materialized(out)          # decoding never builds the list
    assert token_buffer(out, "prompt_token_ids") == ids
    assert list(out.prompt_token_ids) == ids
    assert type(out.prompt_token_ids) is (tuple if kind == "tuple" else list)   # a tuple stays one
    assert out.query_token_ids == ids[:3]
    assert (out.sampling_params, out.id, out.streaming) == ({"max_tokens": 8}, 7, False)


@pytest.mark.parametrize("ids", [[], [0], BOUNDARY_IDS, big_ids()], ids=["empty", "one", "boundary", "128k"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_roundtrip_edges(ids, protocol):
    out = roundtrip(GenerationRequest(ids), protocol)
    assert out.prompt_len == len(ids)
    assert out.prompt_token_ids == ids
    again = roundtrip(out, protocol)                   # re-pickle a materialized request
    assert again.prompt_token_ids == ids


def test_repickling_unread_request_never_materializes():
    ids = big_ids(40_000)
    worker_side = from_wire(ids)
    for protocol in PROTOCOLS:
        state = worker_side.__getstate__()
        assert type(state["prompt_token_ids"]) is TokenVector and no_lists_in(state)
        hop = roundtrip(worker_side, protocol)
        assert not PROMPT.is_materialized(worker_side)
        assert not PROMPT.is_materialized(hop)
        assert token_buffer(hop, "prompt_token_ids") == token_buffer(worker_side, "prompt_token_ids")
    copy.copy(worker_side), copy.deepcopy(worker_side), repr(worker_side), worker_side.prompt_len
    assert not PROMPT.is_materialized(worker_side)
    assert worker_side.prompt_token_ids == ids


# --------------------------------------------------------------------------------------------
# the state and the reduce tuple themselves


def test_state_content():
    req = GenerationRequest([5, 6, 7], "sp", query_token_ids=None, streaming=True, id=3,
                            arrival_time=1.5)
    state = req.__getstate__()
    assert state == {
        "__tokenwire__": STATE_VERSION,
        "prompt_token_ids": TokenVector([5, 6, 7]),
        "query_token_ids": None,
        "sampling_params": "sp",
        "streaming": True,
        "arrival_time": 1.5,
        "id": 3,
        "lora_request": None,
        "disaggregated_params": None,
    }
    # The state version written is one a pinned fixture holds (a new version pins its own).
    assert list(FIXTURES.glob(f"request_v{STATE_VERSION}_p*.pickle"))
    assert type(state["prompt_token_ids"]) is TokenVector
    assert not any(k.startswith("_tw_") for k in state)      # storage keys never travel


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_reduce_tuple(protocol):
    req = from_wire([1, 2, 3])
    reduced = req.__reduce_ex__(protocol)
    assert reduced[0] is copyreg.__newobj__
    assert reduced[1] == (GenerationRequest,)
    state = reduced[2]
    assert state["__tokenwire__"] == STATE_VERSION and no_lists_in(state)
    func, args = state["prompt_token_ids"].__reduce_ex__(protocol)
    assert func is tokenwire._core._restore_token_vector
    raw = (1).to_bytes(4, "little") + (2).to_bytes(4, "little") + (3).to_bytes(4, "little")
    if protocol >= 5:
        assert type(args[0]) is pickle.PickleBuffer
    elif protocol >= 3:
        assert args == (raw,)
    else:       # no bytes opcode below 3: a latin-1 str, which names no global
        assert args == (raw.decode("latin-1"),)


@pytest.mark.parametrize("with_query", [False, True])
def test_protocol5_token_fields_go_out_of_band(with_query):
    ids = big_ids(40_000)
    req = GenerationRequest(ids, {"n": 1}, query_token_ids=ids[:100] if with_query else None)
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(req, protocol=5, buffer_callback=buffers.append)
    assert all(type(b) is pickle.PickleBuffer for b in buffers)
    assert len(buffers) == (2 if with_query else 1)
    assert len(data) < 1000                                 # the ids are not in the stream
    assert buffers[0].raw().nbytes == 4 * len(ids)
    # Received frames are read-only bytes; the decoded field views them (no copy).
    frames = [bytes(b.raw()) for b in buffers]
    out = pickle.loads(data, buffers=frames)
    vec = token_buffer(out, "prompt_token_ids")
    assert np.asarray(vec).ctypes.data == np.frombuffer(frames[0], np.uint8).ctypes.data
    assert out.prompt_token_ids == ids


@pytest.mark.parametrize("protocol", [0, 1, 2, 3, 4])
def test_protocols_below_5_are_in_band(protocol):
    ids = big_ids(1000)
    out = roundtrip(GenerationRequest(ids, query_token_ids=[1, 2]), protocol)
    assert out.prompt_token_ids == ids and out.query_token_ids == [1, 2]


def test_golden_v1_fixtures_still_load():
    # Written once by tests/fixtures/make_request_fixtures.py; they pin state version 1.
    for path in sorted(FIXTURES.glob("request_v1_p*.pickle")):
        out = pickle.loads(path.read_bytes())
        assert type(out) is GenerationRequest, path
        assert not PROMPT.is_materialized(out)
        assert out.prompt_token_ids == BOUNDARY_IDS, path
        assert out.query_token_ids == [7, 8, 9]
        assert (out.sampling_params, out.streaming, out.id, out.arrival_time) == (
            {"max_tokens": 16, "temperature": 0.5}, True, 42, 1700000000.25)
    assert len(list(FIXTURES.glob("request_v1_p*.pickle"))) == 3


def test_state_version_checks():
    req = GenerationRequest.__new__(GenerationRequest)
    with pytest.raises(WireFormatError, match="state version 2 is not supported"):
        req.__setstate__({"__tokenwire__": 2, "prompt_token_ids": None})
    with pytest.raises(WireFormatError, match="key 'prompt_token_ids': a token field is a TokenVector"):
        req.__setstate__({"__tokenwire__": 1, "prompt_token_ids": 5})
    assert isinstance(WireFormatError("x"), ValueError)
    with pytest.raises(WireFormatError, match="state key 5 is not a string"):
        req.__setstate__({"__tokenwire__": 1, 5: "x"})
    assert vars(req) == {}                           # every refused state left nothing behind


class _NoRepr:
    """A hashable value whose repr fails (a pickle can build one of an allowed class)."""

    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def test_state_errors_quote_keys_and_versions_that_cannot_be_printed():
    req = GenerationRequest.__new__(GenerationRequest)
    with pytest.raises(WireFormatError, match="state version an int of 16610 bits is not"):
        req.__setstate__({"__tokenwire__": 10**5000, "prompt_token_ids": None})
    with pytest.raises(WireFormatError,
                       match=r"state key <_NoRepr object: RuntimeError from its repr\(\)> is not"):
        req.__setstate__({"__tokenwire__": 1, _NoRepr(): "x"})
    with pytest.raises(WireFormatError, match="state key a negative int of 16610 bits is not"):
        req.__setstate__({"__tokenwire__": 1, -(10**5000): "x"})
    with pytest.raises(WireFormatError) as long:
        req.__setstate__({"__tokenwire__": 1, "_tokenwire" + "k" * 10**6: "x"})
    assert str(long.value) == ("GenerationRequest state key "
                               "'_tokenwirekkkkkkk...kkkkkkkkkkkkkkkkk' names class-level "
                               "configuration")
    with pytest.raises(WireFormatError, match="slot state key an int of 16610 bits is not a slot"):
        req.__setstate__(({"__tokenwire__": 1}, {10**5000: 1}))
    with pytest.raises(WireFormatError) as kind:
        _TokenField(TokenVector([1]), "q" * 10**6)
    assert len(str(kind.value)) < 200
    assert vars(req) == {}


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
# legacy state: pickles written before tokenwire


def legacy_pickle(state: dict, protocol: int) -> bytes:
    """The bytes a pre-tokenwire GenerationRequest with this __dict__ pickled to (default
    object pickling: NEWOBJ / reconstructor, then BUILD with the dict)."""
    import io

    class LegacyPickler(pickle.Pickler):
        def reducer_override(self, obj):
            if type(obj) is GenerationRequest:
                if protocol < 2:
                    return copyreg._reconstructor, (GenerationRequest, object, None), state
                return copyreg.__newobj__, (GenerationRequest,), state
            return NotImplemented

    out = io.BytesIO()
    LegacyPickler(out, protocol=protocol).dump(GenerationRequest(None))
    return out.getvalue()


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("private", [False, True], ids=["public_name", "underscore_name"])
def test_legacy_state_loads(protocol, private):
    ids = big_ids(5000)
    key = "_prompt_token_ids" if private else "prompt_token_ids"
    legacy = {key: ids, "query_token_ids": None, "sampling_params": {"t": 1}, "streaming": False,
              "id": 9, "arrival_time": None}
    if private:
        legacy["_prompt_token_ids_i32"] = None        # the hand-written side channel's slot
    out = pickle.loads(legacy_pickle(legacy, protocol))
    assert type(out) is GenerationRequest
    assert out.prompt_token_ids == ids and out.query_token_ids is None
    assert (out.sampling_params, out.id) == ({"t": 1}, 9)
    assert "_prompt_token_ids" not in vars(out) and "_prompt_token_ids_i32" not in vars(out)
    # A legacy list is already a list: it stays one; the side channel is for buffers only.
    assert out._prompt_token_ids_i32 is None
    assert token_buffer(out, "prompt_token_ids") == ids
    # ... and it re-pickles in the current format.
    state = out.__getstate__()
    assert state["__tokenwire__"] == STATE_VERSION and no_lists_in(state)
    assert roundtrip(out).prompt_token_ids == ids


def test_legacy_state_public_name_wins_and_missing_fields_are_unset():
    req = GenerationRequest.__new__(GenerationRequest)
    req.__setstate__({"prompt_token_ids": [1], "_prompt_token_ids": [2], "id": 1})
    assert req.prompt_token_ids == [1] and req.id == 1
    assert "_prompt_token_ids" not in vars(req)
    with pytest.raises(AttributeError, match="query_token_ids"):   # as the old class: unset
        req.query_token_ids


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


# --------------------------------------------------------------------------------------------
# consumer patterns: the attribute is a plain list[int]


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
    with pytest.raises(AttributeError, match="'GenerationRequest' object has no attribute 'prompt_token_ids'"):
        req.prompt_token_ids
    with pytest.raises(AttributeError):
        del req.prompt_token_ids
    assert "prompt_token_ids" not in roundtrip(req).__dict__


# --------------------------------------------------------------------------------------------
# attribute misses stay plain and C-level


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
# copy / deepcopy


@pytest.mark.parametrize("wire", [False, True], ids=["list_built", "decoded"])
def test_deepcopies_are_independent(wire):
    ids = big_ids(10_000)
    sp = {"stop": ["</s>"]}
    req = from_wire(ids, sampling_params=sp) if wire else GenerationRequest(list(ids), sp)
    req.prompt_token_ids                                    # materialize the original
    dup = copy.deepcopy(req)
    assert type(dup) is GenerationRequest
    # A held buffer is copied as the buffer (no list built); a list as a new list.
    assert PROMPT.is_materialized(dup) == (not wire)
    assert (dup._prompt_token_ids_i32 is not None) == wire  # held-ness is kept
    assert dup.prompt_token_ids == ids and dup.prompt_token_ids is not req.prompt_token_ids
    dup.prompt_token_ids.append(1)
    req.prompt_token_ids.sort()
    assert dup.prompt_token_ids == ids + [1]
    assert req.prompt_token_ids == sorted(ids)
    assert dup._prompt_token_ids_i32 is None and req._prompt_token_ids_i32 is None
    assert dup.sampling_params == sp and dup.sampling_params is not req.sampling_params


@pytest.mark.parametrize("wire", [False, True], ids=["list_built", "decoded"])
@pytest.mark.parametrize("read_first", [False, True], ids=["copy_then_read", "read_then_copy"])
def test_shallow_copy_shares_the_list_like_a_plain_object(wire, read_first):
    ids = big_ids(1000)
    req = from_wire(ids) if wire else GenerationRequest(list(ids), {"n": 1})
    if read_first:
        req.prompt_token_ids
    dup = copy.copy(req)
    assert dup.prompt_token_ids is req.prompt_token_ids     # one list, as upstream
    assert dup.sampling_params is req.sampling_params
    dup.prompt_token_ids.append(7)
    assert req.prompt_token_ids[-1] == 7
    assert token_buffer(req, "prompt_token_ids") == ids + [7] and token_buffer(dup, "prompt_token_ids") == ids + [7]
    dup.prompt_token_ids = [1]                              # rebinding is per object
    assert req.prompt_token_ids == ids + [7]


def test_copy_shares_the_immutable_vector_no_per_token_work():
    tv = TokenVector(big_ids(1000))
    req = GenerationRequest(tv)
    assert req._prompt_token_ids_i32 is tv                  # a TokenVector is shared, not copied
    assert copy.copy(req)._prompt_token_ids_i32 is tv
    assert copy.deepcopy(req)._prompt_token_ids_i32 is tv   # owned & immutable: itself


def test_deepcopy_memo_keeps_shared_references():
    req = GenerationRequest([1, 2])
    pair = copy.deepcopy([req, req])
    assert pair[0] is pair[1]


# --------------------------------------------------------------------------------------------
# setting a field, the side channel


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


def test_side_channel_is_read_only():
    req = from_wire([1])
    with pytest.raises(AttributeError):
        req._prompt_token_ids_i32 = None


# --------------------------------------------------------------------------------------------
# repr, codec, the mixin on other classes


def test_repr_is_short_and_does_not_materialize():
    req = from_wire(big_ids(128_000), sampling_params={"stop": ["x" * 1000]}, id=5)
    text = repr(req)
    assert len(text) < 400, text
    assert "<128000 ids: [" in text and "id=5" in text
    assert not PROMPT.is_materialized(req)
    assert "prompt_token_ids=[1, 2]" in repr(GenerationRequest([1, 2]))


def test_codecs():
    assert TokenIds().codec == "raw" and PROMPT.codec == "raw"
    with pytest.raises(ValueError, match="unknown codec 'zip'"):        # the core's message
        TokenIds(codec="zip")


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


class Base(TokenwireMixin):
    ids = TokenIds()
    extra = TokenIds()


class Child(Base):
    extra = None                # overriding with a plain attribute removes the field
    more = TokenIds()

    def __init__(self, ids, more, note=""):
        self.ids, self.more, self.note = ids, more, note


class NoMixin:
    ids = TokenIds()


def test_mixin_on_another_class():
    assert [name for name, _ in _config(Child).fields] == ["ids", "more"]
    obj = Child(np.arange(5, dtype=np.int32), [7, 8], note="hi")
    out = roundtrip(obj)
    assert (out.ids, out.more, out.note, out.extra) == ([0, 1, 2, 3, 4], [7, 8], "hi", None)
    assert Child.more.held_buffer(out) == [7, 8]
    assert "ids=[0, 1, 2, 3, 4]" in repr(out)


def test_descriptor_without_the_mixin_pickles_like_a_plain_attribute():
    # The field line alone adopts the class: a list the user set travels as a buffer and
    # reads back as a list; ids held as a buffer travel as the buffer, never as a list.
    obj = NoMixin()
    obj.ids = [1, 2, 3]
    out = pickle.loads(pickle.dumps(obj, protocol=5))
    assert out.ids == [1, 2, 3] and type(vars(out)["ids"]) is _TokenField
    obj.ids = np.array([4, 5], np.int32)
    out = pickle.loads(pickle.dumps(obj, protocol=5))
    assert type(vars(out)["ids"]) is _TokenField and not NoMixin.ids.is_materialized(out)
    assert out.ids == [4, 5]
    assert copy.deepcopy(obj).ids == [4, 5]


# --------------------------------------------------------------------------------------------
# hostile states: class configuration is never taken from instance state,
# a token field only ever holds None, a list[int] or a TokenVector, refusals name the key


FIELD_NAMES = ("prompt_token_ids", "query_token_ids")
CLASS_CONFIG = _config(GenerationRequest)


def assert_sane(req: GenerationRequest, expected_prompt=None) -> None:
    assert vars(type(req))["_tokenwire_config"] is CLASS_CONFIG
    assert not any(k.startswith("_tokenwire") for k in vars(req))
    for name in FIELD_NAMES:
        raw = vars(req).get(name)
        assert raw is None or type(raw) in (list, tuple) or (
            type(raw) is _TokenField and type(raw.vector) is TokenVector), (name, raw)
        value = getattr(req, name, None)
        assert value is None or type(value) in (list, tuple)      # a list or tuple is kept as sent
        held = getattr(GenerationRequest, name).held_buffer(req)
        assert held is None or type(held) is TokenVector
    side = req._prompt_token_ids_i32
    assert side is None or type(side) is TokenVector
    if expected_prompt is not None:       # the next pickle still carries the ids
        assert roundtrip(req).prompt_token_ids == expected_prompt


def forged_field() -> _TokenField:
    """A holder whose "vector" is a mutable int64 ndarray (as a crafted pickle can build)."""
    forged = _TokenField.__new__(_TokenField)
    forged.ids, forged.vector = None, np.arange(3)
    return forged


def fresh() -> GenerationRequest:
    return GenerationRequest.__new__(GenerationRequest)


HOSTILE_STATES = {
    "replace _tokenwire_keys, then set a private key": (
        {"__tokenwire__": 1, "_tokenwire_keys": frozenset(), "_tw_prompt_token_ids": "junk"},
        "_tokenwire_keys"),
    "set _tokenwire_fields (the next pickle would drop the ids)": (
        {"__tokenwire__": 1, "prompt_token_ids": TokenVector([1, 2]), "_tokenwire_fields": ()},
        "_tokenwire_fields"),
    "legacy form sets _tokenwire_fields": (
        {"prompt_token_ids": [1, 2], "_tokenwire_fields": ()}, "_tokenwire_fields"),
    "slots form: field's storage as a _TokenField of a mutable int64 ndarray": (
        ({}, {"prompt_token_ids": forged_field()}), "prompt_token_ids"),
    "dict form: field's storage as a _TokenField of a mutable int64 ndarray": (
        {"__tokenwire__": 1, "prompt_token_ids": forged_field()}, "prompt_token_ids"),
    "slots form: the side channel as an int64 ndarray": (
        ({}, {"_prompt_token_ids_i32": np.arange(3)}), "_prompt_token_ids_i32"),
    "slots form: the private key of the original layout": (
        (None, {"_tw_prompt_token_ids": "junk"}), "_tw_prompt_token_ids"),
    "slots form: replace the class": (({}, {"__class__": dict}), "__class__"),
    "dict form: the side channel as an int64 ndarray": (
        {"__tokenwire__": 1, "_prompt_token_ids_i32": np.arange(3)}, "_prompt_token_ids_i32"),
    "field payload: an int64 ndarray": (
        {"__tokenwire__": 1, "prompt_token_ids": np.arange(3)}, "prompt_token_ids"),
    "field payload: a string": ({"__tokenwire__": 1, "query_token_ids": "abc"}, "query_token_ids"),
    "field payload: a set": ({"__tokenwire__": 1, "prompt_token_ids": {1}}, "prompt_token_ids"),
    "legacy field: a dict": ({"prompt_token_ids": {"a": 1}}, "prompt_token_ids"),
    "dunder key": ({"__tokenwire__": 1, "__dict__": {}}, "__dict__"),
    "slots form: slots not a dict": (({}, [("a", 1)]), "slot state must be a dict"),
    "state not a dict": ([("prompt_token_ids", [1])], "state must be a dict"),
    "tuple of three": (({}, {}, {}), "must be (dict, slots)"),
}


@pytest.mark.parametrize("case", list(HOSTILE_STATES), ids=list(HOSTILE_STATES))
def test_hostile_state_is_refused_naming_the_key(case):
    state, key = HOSTILE_STATES[case]
    req = fresh()
    with pytest.raises(WireFormatError, match=re.escape(key)):
        req.__setstate__(state)
    assert vars(req) == {}                                    # nothing was stored
    assert_sane(req)


@pytest.mark.parametrize("case", list(HOSTILE_STATES), ids=list(HOSTILE_STATES))
def test_hostile_state_inside_a_real_pickle(case):
    state, key = HOSTILE_STATES[case]
    import io

    class Crafter(pickle.Pickler):
        def reducer_override(self, obj):
            if type(obj) is GenerationRequest:
                return copyreg.__newobj__, (GenerationRequest,), state
            if type(obj) is _TokenField:      # the forged holder: its constructor, its args
                return _TokenField, (obj.vector,)
            return NotImplemented

    out = io.BytesIO()
    Crafter(out, protocol=4).dump(GenerationRequest(None))
    with pytest.raises(WireFormatError, match=re.escape(key) + "|_TokenField"):
        pickle.loads(out.getvalue())


_keys = st.sampled_from([
    "prompt_token_ids", "query_token_ids", "_prompt_token_ids", "_query_token_ids",
    "_prompt_token_ids_i32", "_tw_prompt_token_ids", "_tokenwire_keys", "_tokenwire_fields",
    "_tokenwire_list_on_wire", "__tokenwire__", "__dict__", "__class__", "id", "sampling_params", 5,
])
_values = st.one_of(
    st.none(), st.integers(-3, 3), st.text(max_size=3), st.just(np.arange(3)),
    st.just(np.arange(3, dtype=np.int32)), st.just(TokenVector([1, 2])),
    st.lists(st.integers(-(2**40), 2**40), max_size=4), st.just([[1, 2]]), st.just(frozenset()),
    st.just(()), st.just(b"TWIR\x01junk"), st.builds(lambda: tokenwire.encode([3, 4])),
)
_dicts = st.dictionaries(_keys, _values, max_size=6)


@given(state=st.one_of(_dicts, st.tuples(st.one_of(st.none(), _dicts), st.one_of(st.none(), _dicts))))
def test_any_state_either_refused_or_sane(state):
    req = fresh()
    try:
        req.__setstate__(state)
    except WireFormatError:
        assert vars(req) == {}
        return
    assert_sane(req)
    if "prompt_token_ids" in vars(req):
        roundtrip(req)      # whatever was accepted pickles again


def test_golden_dropin_fixtures_still_load():
    # Written once by `make_request_fixtures.py --dropin`: the list form (list_on_wire), the
    # list fallback for ints that are not int32, and protocol 2 without _codecs.
    listform = (FIXTURES / "request_listform_p5.pickle").read_bytes()
    assert b"tokenwire._core" not in listform
    out = pickle.loads(listform)
    assert out.prompt_token_ids == BOUNDARY_IDS and out.query_token_ids == [7, 8, 9]
    assert type(vars(out)["prompt_token_ids"]) is list and out.id == 42
    wide = pickle.loads((FIXTURES / "request_v1_intlist_p5.pickle").read_bytes())
    assert wide.prompt_token_ids == [2**31, -(2**31) - 1, True, 5]
    assert type(wide.prompt_token_ids[2]) is bool
    p2 = (FIXTURES / "request_v1_str_p2.pickle").read_bytes()
    assert b"_codecs" not in p2
    out = pickle.loads(p2)
    assert not PROMPT.is_materialized(out) and out.prompt_token_ids == BOUNDARY_IDS


# --------------------------------------------------------------------------------------------
# defects found in the request layer: each test below failed on the code before its fix


import dataclasses  # noqa: E402
import io  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
from typing import Generic, List, Optional, TypeVar  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


@tokenwire.token_fields("input_ids")
@dataclasses.dataclass
class DcBase:
    rid: str
    input_ids: List[int]
    n: int


@dataclasses.dataclass
class DcRedeclares(DcBase):              # redeclares the field with a default: a plain field
    input_ids: Optional[List[int]] = None
    n: int = 0


@dataclasses.dataclass
class DcInherits(DcBase):                # keeps the base's token field
    extra: int = 0


class DcWithProperty(DcBase):            # a plain subclass adding a property
    @property
    def prompt_len(self) -> int:
        return len(self.input_ids)


class ShadowsField(GenerationRequest):
    prompt_token_ids = None              # a plain attribute where the base has a token field


class LabelBase(TokenwireMixin):
    ids = TokenIds()

    @property
    def label(self) -> str:
        return "base"


class ShadowsProperty(LabelBase):
    label = None                         # a plain class attribute that instances set


def test_subclass_redeclaring_a_dataclass_token_field_gets_a_plain_field():
    c = DcRedeclares("r", list(range(5)))
    out = roundtrip(c)
    assert out.input_ids == [0, 1, 2, 3, 4] and out == c
    assert type(vars(out)["input_ids"]) is list          # not tokenwire's holder
    assert [n for n, _ in _config(DcRedeclares).fields] == []


def test_subclass_inheriting_a_dataclass_token_field_keeps_it():
    c = DcInherits("r", list(range(5)), 1, 2)
    out = roundtrip(c)
    assert type(vars(out)["input_ids"]) is _TokenField and out == c and out.extra == 2


def test_subclass_property_is_never_set_from_state():
    obj = DcWithProperty.__new__(DcWithProperty)
    with pytest.raises(WireFormatError, match="state key 'prompt_len' names a class-level"):
        obj.__setstate__({"__tokenwire__": 1, "rid": "r", "input_ids": [1], "n": 1, "prompt_len": 99})
    assert vars(obj) == {}
    assert roundtrip(DcWithProperty("r", [1, 2], 3)).prompt_len == 2


def test_subclass_shadowing_a_descriptor_with_a_plain_attribute_pickles():
    out = roundtrip(ShadowsField([1, 2]))
    assert out.prompt_token_ids == [1, 2] and type(vars(out)["prompt_token_ids"]) is list
    obj = ShadowsProperty()
    obj.ids, obj.label = [1], "x"
    assert roundtrip(obj).label == "x"


# -- classes with their own __getstate__ / __setstate__: wrapped, not kept ---------------------


@tokenwire.token_fields("ids")
class OwnGetstate:
    def __init__(self, ids):
        self.ids = ids
        self.lock = threading.Lock()

    def __getstate__(self):
        state = self.__dict__.copy()
        state.pop("lock", None)           # a received object has none (no own __setstate__)
        return state


@tokenwire.token_fields("ids")
class OwnSetstate:
    def __init__(self, ids):
        self.ids = ids

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.restored = True


@tokenwire.token_fields("ids", "more")
class OwnBoth:
    def __init__(self, ids, more=None):
        self.ids = ids
        self.more = more
        self.lock = threading.Lock()

    def __getstate__(self):
        state = self.__dict__.copy()
        del state["lock"]
        return state

    def __setstate__(self, state):
        self.ids = state.pop("ids")                   # by setattr, through the descriptor
        self.__dict__.update(state)
        self.lock = threading.Lock()


class UndecoratedBase:
    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != "lock"}


@tokenwire.token_fields("ids")
class InheritsGetstate(UndecoratedBase):
    def __init__(self, ids):
        self.ids = ids
        self.lock = threading.Lock()


def _globals_named(data: bytes) -> set:
    seen: set = set()

    class Recorder(pickle.Unpickler):
        def find_class(self, module, name):
            seen.add((module, name))
            return super().find_class(module, name)

    Recorder(io.BytesIO(data)).load()
    return seen


@pytest.mark.parametrize("cls", [OwnGetstate, OwnBoth, InheritsGetstate])
@pytest.mark.parametrize("source", ["list", "buffer", "received"])
def test_own_getstate_is_wrapped(cls, source):
    ids = list(range(1000))
    obj = cls(np.array(ids, np.int32) if source == "buffer" else list(ids))
    if source == "received":
        obj = roundtrip(obj)                           # a worker forwarding what it received
    state = obj.__getstate__()
    assert "lock" not in state and type(state["ids"]) is TokenVector   # the user's rule, then ours
    for protocol in range(2, pickle.HIGHEST_PROTOCOL + 1):
        data = pickle.dumps(obj, protocol)
        assert {g for g in _globals_named(data) if g[0] != __name__} <= set(tokenwire.unpickle.PICKLE_GLOBALS)
        out = pickle.loads(data)
        assert type(vars(out)["ids"]) is _TokenField and out.ids == ids
    if cls is OwnBoth:
        assert type(out.lock) is type(threading.Lock())      # the user's __setstate__ ran
    assert cls.__getstate__.__name__ == "__getstate__"


def test_own_setstate_is_wrapped_and_receives_checked_state():
    out = roundtrip(OwnSetstate(np.arange(3, dtype=np.int32)))
    assert out.restored and out.ids == [0, 1, 2] and type(vars(out)["ids"]) is _TokenField
    for bad, key in ((
            {"__tokenwire__": 1, "ids": [1], "_tokenwire_fields": ()}, "_tokenwire_fields"),
            ({"__tokenwire__": 1, "ids": np.arange(3)}, "ids"),
            ({"__tokenwire__": 1, "ids": forged_field()}, "ids")):
        obj = OwnSetstate.__new__(OwnSetstate)
        with pytest.raises(WireFormatError, match=re.escape(key)):
            obj.__setstate__(bad)
        assert vars(obj) == {}                        # refused before the user's code ran
    legacy = OwnSetstate.__new__(OwnSetstate)          # a pickle of the class before tokenwire
    legacy.__setstate__({"ids": [4, 5]})
    assert legacy.ids == [4, 5] and legacy.restored


@tokenwire.token_fields("ids")
class OwnTupleState:
    def __init__(self, ids):
        self.ids = ids

    def __getstate__(self):
        return (self.ids, "v2")                         # not a dict: left as the class made it

    def __setstate__(self, state):
        self.ids, self.version = state


def test_own_non_dict_state_is_left_alone():
    out = roundtrip(OwnTupleState([1, 2]))
    assert out.ids == [1, 2] and out.version == "v2"


# -- slots of base classes ---------------------------------------------------------------------


class SlotBase:
    __slots__ = ("priority", "__secret", "unset")


@tokenwire.token_fields("ids")
class WithBaseSlots(SlotBase):
    def __init__(self, ids, priority):
        self.ids, self.priority = ids, priority
        self._SlotBase__secret = [priority]


class MixinWithBaseSlots(SlotBase, TokenwireMixin):
    ids = TokenIds()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_base_class_slots_survive_pickle_and_copies(protocol):
    obj = WithBaseSlots([1, 2], 7)
    out = roundtrip(obj, protocol)
    assert (out.ids, out.priority, out._SlotBase__secret) == ([1, 2], 7, [7])
    assert not hasattr(out, "unset")
    shallow, deep = copy.copy(obj), copy.deepcopy(obj)
    assert shallow.priority == deep.priority == 7
    assert shallow._SlotBase__secret is obj._SlotBase__secret
    assert deep._SlotBase__secret == [7] and deep._SlotBase__secret is not obj._SlotBase__secret
    m = MixinWithBaseSlots()
    m.ids, m.priority = [3], 1
    assert roundtrip(m, protocol).priority == 1 and copy.copy(m).priority == 1


def test_slot_state_names_only_slots():
    obj = WithBaseSlots.__new__(WithBaseSlots)
    with pytest.raises(WireFormatError, match="slot state key 'ids_extra' is not a slot"):
        obj.__setstate__(({"__tokenwire__": 1}, {"ids_extra": 1}))
    with pytest.raises(WireFormatError, match="state key 'priority' names a class-level"):
        obj.__setstate__({"__tokenwire__": 1, "priority": 1})    # a slot, in the dict part


# -- dunder keys: refused only when they shadow something class-level -------------------------

T = TypeVar("T")


@tokenwire.token_fields("prompt_token_ids")
class GenericReq(Generic[T]):
    def __init__(self, ids, params):
        self.prompt_token_ids, self.params = ids, params


def test_generic_request_class_pickles_with_orig_class():
    req = GenericReq[dict]([1, 2], {})
    assert "__orig_class__" in vars(req)
    out = roundtrip(req)
    assert out.prompt_token_ids == [1, 2] and out.__orig_class__ == GenericReq[dict]


@pytest.mark.parametrize("key", ["__reduce_ex__", "__class__", "__dict__", "__init__", "__weakref__"])
def test_special_names_the_class_defines_are_refused(key):
    req = fresh()
    with pytest.raises(WireFormatError,
                       match=f"GenerationRequest state key '{key}' names a class-level attribute"):
        req.__setstate__({"__tokenwire__": 1, key: 1})
    assert vars(req) == {}


def test_one_predicate_decides_every_key():
    from tokenwire.state import _state_key_problem
    config = _config(GenerationRequest)
    assert _state_key_problem(config, "__orig_class__") is None
    assert _state_key_problem(config, "id") is None
    assert "not a string" in _state_key_problem(config, 5)
    assert "class-level configuration" in _state_key_problem(config, "_tokenwire_x")
    assert "class-level attribute" in _state_key_problem(config, "_prompt_token_ids_i32")


# -- ints that are not int32 ids: the list fallback however the list came to be ----------------


@pytest.mark.parametrize("extra", [2**31, -(2**31) - 1, 2**40, True])
def test_received_list_changed_to_non_int32_travels_as_that_list(extra):
    req = from_wire([1, 2])
    req.prompt_token_ids.append(extra)
    assert req._prompt_token_ids_i32 is None                # no longer held as a buffer, no raise
    for protocol in PROTOCOLS:
        out = roundtrip(req, protocol)
        assert out.prompt_token_ids == [1, 2, extra] and type(out.prompt_token_ids[2]) is type(extra)
    deep = copy.deepcopy(req)
    assert deep.prompt_token_ids == [1, 2, extra] and deep.prompt_token_ids is not req.prompt_token_ids
    assert type(vars(req)["prompt_token_ids"]) is list        # the list is the source now
    with pytest.raises((OverflowError, TypeError), match=r"GenerationRequest\.prompt_token_ids: token id at index 2"):
        token_buffer(req, "prompt_token_ids")


# -- compact codecs below protocol 3: no _codecs global ---------------------------------------


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
            return tokenwire.find_class(module, name, allow=allow)

    out = Restricted(io.BytesIO(data)).load()
    assert not Compact.ids.is_materialized(out)               # decoded to a buffer
    assert (out.ids, out.small, out.raw) == ([1, 2, 3], (4, 5), [6])
    assert type(obj.__getstate__()["ids"]) is bytes          # protocol 3+: the frame as bytes


def test_frame_as_text_must_be_latin1():
    state = Compact().__getstate__()
    state["ids"] = "\u0100" + tokenwire.encode([1]).decode("latin-1")
    with pytest.raises(WireFormatError, match="Compact state key 'ids': a frame sent as text must be latin-1"):
        Compact().__setstate__(state)


# -- tuples stay tuples -----------------------------------------------------------------------


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


def test_tuple_state_payload_forms():
    req = fresh()
    req.__setstate__({"__tokenwire__": 1, "prompt_token_ids": (TokenVector([1, 2]),)})
    assert req.prompt_token_ids == (1, 2)
    with pytest.raises(WireFormatError, match="state key 'prompt_token_ids': .*kind 'z' is not an integer array typecode"):
        fresh().__setstate__({"__tokenwire__": 1, "prompt_token_ids": (TokenVector([1]), "z")})
    previous = tokenwire.list_on_wire(True)
    try:
        assert GenerationRequest((1, 2)).__getstate__()["prompt_token_ids"] == (1, 2)
    finally:
        tokenwire.list_on_wire(previous)


# -- TOKENWIRE_LIST_ON_WIRE and the no-cache promise ------------------------------------------


def test_list_on_wire_environment_words(monkeypatch):
    from tokenwire._envflag import env_flag as _env_flag
    for word, expected in (("1", True), ("true", True), ("YES", True), (" on ", True),
                           ("0", False), ("false", False), ("No", False), ("off", False), ("", False)):
        monkeypatch.setenv("TOKENWIRE_LIST_ON_WIRE", word)
        assert _env_flag("TOKENWIRE_LIST_ON_WIRE") is expected, word
    monkeypatch.setenv("TOKENWIRE_LIST_ON_WIRE", "maybe")
    with pytest.raises(ValueError, match="TOKENWIRE_LIST_ON_WIRE='maybe' is not a boolean"):
        _env_flag("TOKENWIRE_LIST_ON_WIRE")
    r = subprocess.run([sys.executable, "-c", "import tokenwire; print(tokenwire.list_on_wire())"],
                       capture_output=True, text=True,
                       env={**os.environ, "TOKENWIRE_LIST_ON_WIRE": "off"},
                       cwd=tempfile.gettempdir())
    assert r.stdout.strip() == "False", r.stderr


def test_list_on_wire_caches_no_list_on_the_sender():
    req = GenerationRequest(np.arange(1000, dtype=np.int32))
    previous = tokenwire.list_on_wire(True)
    try:
        data = pickle.dumps(req)
    finally:
        tokenwire.list_on_wire(previous)
    assert not PROMPT.is_materialized(req)
    assert pickle.loads(data).prompt_token_ids == list(range(1000))


# -- token_fields mistakes are refused ---------------------------------------------------------


def test_token_fields_typo_on_a_dataclass_is_refused():
    with pytest.raises(TypeError, match=r"token_fields\(A\): 'input_idz' is not a field of the "
                                        r"dataclass \(its fields: rid, input_ids\)"):
        @tokenwire.token_fields("input_idz")
        @dataclasses.dataclass
        class A:
            rid: str
            input_ids: List[int]


@pytest.mark.parametrize("later_field", [False, True])
def test_token_fields_below_dataclass_and_the_field_line_work(later_field):
    # Below @dataclass, and as `input_ids: List[int] = TokenIds()`: the field stays required,
    # in its place (tests/test_adoption_shapes.py has the full shapes).
    @dataclasses.dataclass
    @tokenwire.token_fields("input_ids")
    class B:
        rid: str
        input_ids: List[int]
        if later_field:
            n: int

    @dataclasses.dataclass
    class M(TokenwireMixin):
        input_ids: List[int] = TokenIds()
        if later_field:
            n: int = 0

    def rt(obj):                      # local classes: the state round trip of pickling
        new = type(obj).__new__(type(obj))
        new.__setstate__(pickle.loads(pickle.dumps(obj.__getstate__(), protocol=5)))
        return new

    args = ("r", [1, 2], 3) if later_field else ("r", [1, 2])
    assert type(B(*args).__getstate__()["input_ids"]) is TokenVector
    assert rt(B(*args)) == B(*args) and rt(M(*args[1:])) == M(*args[1:])


def test_codec_names_come_from_the_core():
    with pytest.raises(ValueError) as core:
        tokenwire.encode([], codec="zip")
    with pytest.raises(ValueError) as ours:
        TokenIds(codec="zip")
    assert str(ours.value) == str(core.value)


def test_frame_error_names_the_key_once():
    state = Compact().__getstate__()
    state["ids"] = b"TWIR\x01garbage"
    with pytest.raises(WireFormatError) as info:
        Compact().__setstate__(state)
    assert str(info.value).count("'ids'") == 1


def test_golden_tuple_fixtures_still_load():
    # Written once by `make_request_fixtures.py --tuple`: a tuple field as (TokenVector,).
    for protocol in (2, 5):
        data = (FIXTURES / f"request_v1_tuple_p{protocol}.pickle").read_bytes()
        assert b"_codecs" not in data
        out = pickle.loads(data)
        assert not PROMPT.is_materialized(out)
        assert out.prompt_token_ids == tuple(BOUNDARY_IDS) and out.query_token_ids == [7, 8, 9]
        assert out.id == 44


def test_reading_a_field_on_its_class_imports_nothing():
    """``Cls.field`` on a class that is not being built by ``@dataclass`` answers without the
    import system: an engine or a benchmark that looks the descriptor up per request paid a
    search of sys.path each time (a failed import of the annotations module is not cached)."""
    import sys

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
