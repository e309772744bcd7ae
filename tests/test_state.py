"""The pickled state of a class with token fields (tokenwire/state.py): its format (version 1,
the reduce tuple, out-of-band buffers at protocol 5), the pinned golden pickles, the list form
of pickles written before tokenwire and of list_on_wire, and states that are refused: class
configuration is never taken from instance state, a token field only ever holds None, a
list[int] or a TokenVector, and every refusal names the key."""

from __future__ import annotations

import copyreg
import functools
import io
import os
import pickle
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("hypothesis")
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from support.requests import (  # noqa: E402
    PROTOCOLS,
    big_ids,
    forged_field,
    fresh,
    from_wire,
    no_lists_in,
    roundtrip,
)
from support.strategies import BOUNDARY_IDS  # noqa: E402

import tokenwire  # noqa: E402
from tokenwire import GenerationRequest, TokenVector, token_buffer  # noqa: E402
from tokenwire.errors import WireFormatError  # noqa: E402
from tokenwire.fields import _TokenField  # noqa: E402
from tokenwire.state import _STATE_VERSION, _config  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures"
PROMPT = GenerationRequest.prompt_token_ids


# --------------------------------------------------------------------------------------------
# the state and the reduce tuple


def test_state_content():
    req = GenerationRequest([5, 6, 7], "sp", query_token_ids=None, streaming=True, id=3,
                            arrival_time=1.5)
    state = req.__getstate__()
    assert state == {
        "__tokenwire__": _STATE_VERSION,
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
    assert list(FIXTURES.glob(f"request_v{_STATE_VERSION}_p*.pickle"))
    assert type(state["prompt_token_ids"]) is TokenVector
    assert not any(k.startswith("_tw_") for k in state)      # storage keys never travel


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_reduce_tuple(protocol):
    req = from_wire([1, 2, 3])
    reduced = req.__reduce_ex__(protocol)
    assert reduced[0] is copyreg.__newobj__
    assert reduced[1] == (GenerationRequest,)
    state = reduced[2]
    assert state["__tokenwire__"] == _STATE_VERSION and no_lists_in(state)
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


def test_tuple_state_payload_forms():
    req = fresh()
    req.__setstate__({"__tokenwire__": 1, "prompt_token_ids": (TokenVector([1, 2]),)})
    assert req.prompt_token_ids == (1, 2)
    with pytest.raises(WireFormatError, match="state key 'prompt_token_ids': .*kind 'z' is not "
                                              "an integer array typecode"):
        fresh().__setstate__({"__tokenwire__": 1, "prompt_token_ids": (TokenVector([1]), "z")})
    previous = tokenwire.list_on_wire(True)
    try:
        assert GenerationRequest((1, 2)).__getstate__()["prompt_token_ids"] == (1, 2)
    finally:
        tokenwire.list_on_wire(previous)


# --------------------------------------------------------------------------------------------
# golden pickles: every pinned state version loads


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


def test_golden_tuple_fixtures_still_load():
    # Written once by `make_request_fixtures.py --tuple`: a tuple field as (TokenVector,).
    for protocol in (2, 5):
        data = (FIXTURES / f"request_v1_tuple_p{protocol}.pickle").read_bytes()
        assert b"_codecs" not in data
        out = pickle.loads(data)
        assert not PROMPT.is_materialized(out)
        assert out.prompt_token_ids == tuple(BOUNDARY_IDS) and out.query_token_ids == [7, 8, 9]
        assert out.id == 44


# --------------------------------------------------------------------------------------------
# the list form: pickles written before tokenwire, and list_on_wire


def legacy_pickle(state: dict, protocol: int) -> bytes:
    """The bytes a pre-tokenwire GenerationRequest with this __dict__ pickled to (default
    object pickling: NEWOBJ / reconstructor, then BUILD with the dict)."""
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
    assert state["__tokenwire__"] == _STATE_VERSION and no_lists_in(state)
    assert roundtrip(out).prompt_token_ids == ids


def test_legacy_state_public_name_wins_and_missing_fields_are_unset():
    req = GenerationRequest.__new__(GenerationRequest)
    req.__setstate__({"prompt_token_ids": [1], "_prompt_token_ids": [2], "id": 1})
    assert req.prompt_token_ids == [1] and req.id == 1
    assert "_prompt_token_ids" not in vars(req)
    with pytest.raises(AttributeError, match="query_token_ids"):   # as the old class: unset
        req.query_token_ids


def test_list_on_wire_environment_words(monkeypatch):
    from tokenwire._envflag import env_flag as _env_flag
    for word, expected in (("1", True), ("true", True), ("YES", True), (" on ", True),
                           ("0", False), ("false", False), ("No", False), ("off", False),
                           ("", False)):
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


# --------------------------------------------------------------------------------------------
# refused states: versions and keys, quoted safely


def test_state_version_checks():
    req = GenerationRequest.__new__(GenerationRequest)
    with pytest.raises(WireFormatError, match="state version 2 is not supported"):
        req.__setstate__({"__tokenwire__": 2, "prompt_token_ids": None})
    with pytest.raises(WireFormatError,
                       match="key 'prompt_token_ids': a token field is a TokenVector"):
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


@pytest.mark.parametrize("key", ["__reduce_ex__", "__class__", "__dict__", "__init__",
                                 "__weakref__"])
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



class MethodsRequest(GenerationRequest):
    @classmethod
    def make(cls) -> "MethodsRequest":
        return cls([1])

    @staticmethod
    def helper() -> int:
        return 1

    @functools.cached_property
    def total(self) -> int:
        return 3


def test_state_keys_naming_methods_are_refused() -> None:
    """{"set_id": 5} in a state would shadow the method with an int on the instance: refused,
    naming the key, for methods, classmethods, staticmethods and inherited ones alike. A
    cached_property keeps its value under its own name in __dict__: still allowed."""
    import pickle

    req = MethodsRequest([1, 2])
    state = req.__reduce_ex__(5)[2]
    methods = ["set_id", "make", "helper", "__reduce_ex__"]
    assert all(callable(getattr(req, n)) for n in methods)
    for name in methods:
        fresh = MethodsRequest.__new__(MethodsRequest)
        with pytest.raises(WireFormatError, match=f"state key {name!r} names a class-level "
                                                  f"attribute \\(a method"):
            fresh.__setstate__(dict(state, **{name: 5}))
    assert req.total == 3                                  # cached in __dict__ as "total"
    back = pickle.loads(pickle.dumps(req))
    assert back.total == 3 and "total" in vars(back)


# --------------------------------------------------------------------------------------------
# hostile states: class configuration is never taken from instance state, a token field only
# ever holds None, a list[int] or a TokenVector, refusals name the key

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


@given(state=st.one_of(_dicts, st.tuples(st.one_of(st.none(), _dicts),
                                         st.one_of(st.none(), _dicts))))
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
