"""Adoption on the shapes of today's serving stacks' request classes: the one-line dataclass field
(`input_ids: List[int] = TokenIds()`), a plain executor request, values that are not int32 ids,
``array('q')`` fields, and a pickled ``msgspec.Struct``. Each adopted class is checked against
its unmodified twin: nothing that worked before adoption fails after it."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
from array import array
from typing import Any, Dict, List, Optional, Union

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tokenwire
from tokenwire import TokenIds, TokenVector, WireFormatError, token_buffer
from tokenwire.fields import _TokenField


@dataclasses.dataclass
class SamplingParams:
    temperature: float = 1.0
    max_new_tokens: int = 16


# --------------------------------------------------------------------------------------------
# An SGLang-style tokenized request: the unmodified dataclass and the one-line adoption


@dataclasses.dataclass
class PlainTokenizedReq:
    rid: str
    input_text: str
    input_ids: List[int]
    mm_inputs: Optional[Dict[str, Any]]
    sampling_params: SamplingParams
    return_logprob: bool
    logprob_start_len: int
    top_logprobs_num: int
    stream: bool
    lora_path: Optional[str] = None
    session_params: Optional[Dict[str, Any]] = None


@dataclasses.dataclass
class TokenizedReq:
    rid: str
    input_text: str
    input_ids: List[int] = TokenIds()          # the one changed line
    mm_inputs: Optional[Dict[str, Any]]
    sampling_params: SamplingParams
    return_logprob: bool
    logprob_start_len: int
    top_logprobs_num: int
    stream: bool
    lora_path: Optional[str] = None
    session_params: Optional[Dict[str, Any]] = None


@dataclasses.dataclass(frozen=True)
class FrozenReq:
    rid: str
    input_ids: List[int] = TokenIds()
    output_ids: Optional[List[int]] = TokenIds(default=None)


@dataclasses.dataclass
class EmbeddingReq(TokenizedReq):             # a subclass adds fields, inherits the token field
    is_cross_encoder: bool = False


def tokenized(cls: Any, ids: Any) -> Any:
    return cls("rid-1", "hello", ids, None, SamplingParams(), False, -1, 0, False)


def rt(obj: Any, protocol: int = 5) -> Any:
    return pickle.loads(pickle.dumps(obj, protocol=protocol))


def test_field_line_keeps_the_dataclass_as_it_was():
    assert [f.name for f in dataclasses.fields(TokenizedReq)] == \
        [f.name for f in dataclasses.fields(PlainTokenizedReq)]
    assert str(inspect.signature(TokenizedReq)) == str(inspect.signature(PlainTokenizedReq))
    assert dataclasses.fields(TokenizedReq)[2].default is dataclasses.MISSING   # required
    with pytest.raises(TypeError, match="input_ids"):
        TokenizedReq("rid", "text")                                         # as the plain one
    ids = list(range(100))
    plain, req = tokenized(PlainTokenizedReq, list(ids)), tokenized(TokenizedReq, list(ids))
    assert repr(req) == repr(plain).replace("PlainTokenizedReq", "TokenizedReq")
    assert dataclasses.asdict(req) == dataclasses.asdict(plain)
    assert dataclasses.astuple(req) == dataclasses.astuple(plain)
    assert req == tokenized(TokenizedReq, list(ids)) and req != tokenized(TokenizedReq, [1])
    moved = dataclasses.replace(req, input_ids=[7, 8])
    assert type(moved) is TokenizedReq and moved.input_ids == [7, 8] and moved.rid == "rid-1"


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_field_line_gives_the_dataclass_tokenwires_pickling(protocol):
    ids = list(range(40_000))
    req = tokenized(TokenizedReq, ids)
    assert req.input_ids is ids                                  # the very list, as before
    assert type(req.__getstate__()["input_ids"]) is TokenVector  # sent as int32
    out = rt(req, protocol)
    assert type(vars(out)["input_ids"]) is _TokenField           # not read yet: no list built
    assert token_buffer(out, "input_ids") == ids
    assert out == req and type(out.input_ids) is list
    assert copy.deepcopy(out) == req and copy.copy(out).input_ids is out.input_ids


def test_frozen_dataclass_default_none_and_subclass():
    req = FrozenReq("r", (1, 2, 3))
    assert req.output_ids is None and FrozenReq("r", [1], [2]).output_ids == [2]
    params = inspect.signature(FrozenReq).parameters
    assert list(params) == ["rid", "input_ids", "output_ids"]
    assert params["input_ids"].default is inspect.Parameter.empty and params["output_ids"].default is None
    out = rt(req)
    assert out == req and hash(out) == hash(req) and type(out.input_ids) is tuple
    with pytest.raises(dataclasses.FrozenInstanceError):
        out.input_ids = [1]
    sub = EmbeddingReq("r", "t", [5, 6], None, SamplingParams(), False, -1, 0, False, None, None, True)
    back = rt(sub)
    assert back == sub and type(back.__getstate__()["input_ids"]) is TokenVector


def test_slots_dataclass_is_refused_naming_the_field():
    @dataclasses.dataclass(slots=True)
    class Slotted:
        input_ids: List[int] = TokenIds()

    obj = Slotted([1, 2])                    # the slot took the field's place
    with pytest.raises(TypeError, match=r"Slotted\.input_ids is a token field.*slots=True"):
        pickle.dumps(obj)

    with pytest.raises(TypeError, match=r"SlottedMixin\.input_ids is a token field.*slots=True"):
        @dataclasses.dataclass(slots=True)
        class SlottedMixin(tokenwire.TokenwireMixin):
            input_ids: List[int] = TokenIds()


def test_class_access_is_the_descriptor_once_the_dataclass_is_built():
    assert isinstance(TokenizedReq.input_ids, TokenIds)
    assert TokenizedReq.__dict__["input_ids"] is TokenizedReq.input_ids


# --------------------------------------------------------------------------------------------
# A TensorRT-LLM-style executor request: a plain class, a prompt or a batch of prompts


class PlainExecutorRequest:
    def __init__(self, prompt_token_ids: Any, sampling_params: Any = None,
                 query_token_ids: Any = None, lora_request: Any = None) -> None:
        self.prompt_token_ids = prompt_token_ids
        self.query_token_ids = query_token_ids
        self.sampling_params = sampling_params
        self.lora_request = lora_request
        self.id: Optional[int] = None


class ExecutorRequest(PlainExecutorRequest):
    prompt_token_ids = TokenIds()              # the field lines; no base class, no decorator
    query_token_ids = TokenIds()


def test_executor_request_prompt_and_batch():
    req = ExecutorRequest(list(range(1000)), SamplingParams())
    out = rt(req)
    assert type(req.__getstate__()["prompt_token_ids"]) is TokenVector
    assert out.prompt_token_ids == list(range(1000)) and out.query_token_ids is None
    batch = [[1, 2, 3], [4, 5]]                                # list[list[int]]: a batch
    out = rt(ExecutorRequest(batch))
    assert out.prompt_token_ids == batch and type(out.prompt_token_ids[0]) is list
    with pytest.raises(TypeError, match=r"ExecutorRequest\.prompt_token_ids: token id at index 0"):
        token_buffer(out, "prompt_token_ids")


# --------------------------------------------------------------------------------------------
# Nothing that pickled before adoption fails after it


scalars = st.one_of(st.integers(-2**40, 2**40), st.booleans(), st.none(), st.text(max_size=3),
                    st.floats(allow_nan=False), st.binary(max_size=3))
ids_like = st.lists(st.integers(-2**31, 2**31 - 1), max_size=8)
odd_values = st.one_of(
    st.none(),
    ids_like,
    ids_like.map(tuple),
    st.lists(scalars, max_size=6),
    st.lists(scalars, max_size=6).map(tuple),
    st.lists(ids_like, max_size=4),                            # a batch of prompts
    st.lists(ids_like.map(tuple), max_size=4).map(tuple),
    st.tuples(st.binary(max_size=4)),                          # the shapes of tokenwire's tuple forms
    st.tuples(st.text(max_size=4), st.sampled_from("qbZ")),
    ids_like.map(lambda v: array("q", v)),
    st.lists(st.integers(-2**63, 2**63 - 1), max_size=4).map(lambda v: array("q", v)),
    st.lists(st.floats(allow_nan=False), max_size=4).map(lambda v: array("d", v)),
)


@settings(max_examples=300, deadline=None)
@given(value=odd_values, protocol=st.sampled_from([2, 3, 4, 5]), read=st.booleans())
def test_pickle_round_trip_matches_the_unmodified_class(value, protocol, read):
    plain = rt(PlainExecutorRequest(copy.deepcopy(value)), protocol).prompt_token_ids
    req = ExecutorRequest(copy.deepcopy(value))
    if read:
        req = rt(req, protocol)                 # a received request sent on again
        req.prompt_token_ids
    got = rt(req, protocol).prompt_token_ids
    assert type(got) is type(plain) and got == plain
    if isinstance(plain, array):
        assert got.typecode == plain.typecode


# --------------------------------------------------------------------------------------------
# array('q') fields (SGLang >= 0.5.13 holds its ids in one)


@pytest.mark.parametrize("typecode", list("bBhHiIlLqQ"))
def test_array_field_reads_back_as_an_array_of_its_typecode(typecode):
    ids = array(typecode, [0, 1, 2, 100, 127])
    req = ExecutorRequest(ids)
    assert req.prompt_token_ids is ids                          # the very array, as before
    payload = req.__getstate__()["prompt_token_ids"]
    assert type(payload[0]) is TokenVector and payload[1] == typecode      # int32 on the wire
    out = rt(req)
    assert type(vars(out)["prompt_token_ids"]) is _TokenField             # unread: no array yet
    got = out.prompt_token_ids
    assert type(got) is array and got.typecode == typecode and got == ids
    assert out.prompt_token_ids is got                          # built once, cached
    got.append(5)                                               # changed in place: never stale
    assert rt(out).prompt_token_ids == array(typecode, [0, 1, 2, 100, 127, 5])
    assert type(copy.deepcopy(out).prompt_token_ids) is array


def test_array_field_with_ids_beyond_int32_travels_as_the_array():
    ids = array("q", [2**40, 1])
    out = rt(ExecutorRequest(ids))
    assert out.prompt_token_ids == ids and out.prompt_token_ids.typecode == "q"


@pytest.mark.parametrize("payload, message", [
    ((TokenVector([300]), "B"), "array\\('B'\\) cannot hold every id"),
    ((TokenVector([-1]), "Q"), "array\\('Q'\\) cannot hold every id"),
    ((TokenVector([1]), "d"), "kind 'd' is not an integer array typecode"),
])
def test_array_kind_from_a_state_is_checked(payload, message):
    req = ExecutorRequest.__new__(ExecutorRequest)
    with pytest.raises(WireFormatError, match=f"prompt_token_ids.*{message}"):
        req.__setstate__({"__tokenwire__": 1, "prompt_token_ids": payload})
    assert "prompt_token_ids" not in vars(req)


# --------------------------------------------------------------------------------------------
# SGLang's current shape: a msgspec.Struct pickled by zmq's send_pyobj


msgspec = pytest.importorskip("msgspec")


class PlainStructReq(msgspec.Struct):
    rid: str
    input_text: str
    input_ids: array
    sampling_params: Dict[str, Any]
    return_logprob: bool = False


class StructReq(msgspec.Struct):
    rid: str
    input_text: str
    input_ids: Union[array, TokenVector]     # was: array; upgraded proxies fill it with as_tokens(...)
    sampling_params: Dict[str, Any]
    return_logprob: bool = False


def test_pickled_struct_sends_the_ids_out_of_band_and_consumers_keep_working():
    ids = array("q", range(8000))
    req = StructReq("r", "t", tokenwire.as_tokens(ids), {"temperature": 0.5})
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(req, protocol=5, buffer_callback=buffers.append)
    assert len(buffers) == 1 and buffers[0].raw().nbytes == 4 * len(ids)   # int32, out of band
    assert len(data) < 400                                   # the ids are not in the main frame
    out = pickle.loads(data, buffers=[bytes(b.raw()) for b in buffers])
    assert out == req and type(out.input_ids) is TokenVector
    # what engine code written for array('q') does with the field:
    origin = out.input_ids
    fill = origin + array("q", [1, 2])                      # array + array: an array('q')
    assert type(fill) is array and fill.typecode == "q" and fill[-3:] == array("q", [7999, 1, 2])
    assert origin == ids and origin.copy() == list(ids) and len(origin) == len(ids)
    assert np.frombuffer(fill, np.int64)[-1] == 2
    plain = PlainStructReq("r", "t", ids, {})
    assert pickle.loads(pickle.dumps(plain, protocol=5)).input_ids == out.input_ids


@pytest.mark.parametrize("old_proxy", [False, True])
def test_struct_scheduler_line_reads_both_proxies(old_proxy):
    # Schedulers first: the documented scheduler line gives its own array('q') whether an old
    # tokenizer manager sent an array('q') or an upgraded one a TokenVector.
    ids = list(range(-3, 1000))
    sent = array("q", ids) if old_proxy else tokenwire.as_tokens(ids)
    out = pickle.loads(pickle.dumps(StructReq("r", "t", sent, {}), protocol=5))
    origin = array("q") + out.input_ids
    assert type(origin) is array and origin.typecode == "q" and origin.tolist() == ids
    origin.append(7)                                            # the scheduler's own array
    assert out.input_ids[-1] == 999


def test_token_ids_on_a_struct_points_to_the_field_type():
    with pytest.raises((TypeError, RuntimeError)) as info:
        class Bad(msgspec.Struct):
            rid: str
            input_ids = TokenIds()
    error = info.value if isinstance(info.value, TypeError) else info.value.__cause__
    assert "Bad is a msgspec.Struct" in str(error) and "TokenVector" in str(error)


def test_token_fields_below_dataclass_keeps_defaults_and_refuses_field_lines():
    @dataclasses.dataclass
    @tokenwire.token_fields("input_ids", "output_ids")
    class Below:
        rid: str
        input_ids: List[int]
        output_ids: Optional[List[int]] = None

    params = inspect.signature(Below).parameters
    assert params["input_ids"].default is inspect.Parameter.empty and params["output_ids"].default is None
    req = Below("r", [1, 2])
    assert req.output_ids is None and type(req.__getstate__()["input_ids"]) is TokenVector
    with pytest.raises(TypeError, match=r"'output_ids' is a dataclasses\.field\(\.\.\.\): write "
                                        r"@token_fields above @dataclass"):
        @dataclasses.dataclass
        @tokenwire.token_fields("output_ids")
        class FieldLine:
            output_ids: List[int] = dataclasses.field(default_factory=list)


def test_default_none_on_a_plain_class_reads_as_the_class_attribute_did():
    class Plain:
        prompt_token_ids = None

    @tokenwire.token_fields("prompt_token_ids")
    class Adopted:
        prompt_token_ids = None

    assert Plain().prompt_token_ids is None and Adopted().prompt_token_ids is None
    assert ExecutorRequest.__new__(ExecutorRequest).__dict__ == {}
    with pytest.raises(AttributeError, match="prompt_token_ids"):
        ExecutorRequest.__new__(ExecutorRequest).prompt_token_ids      # no default: unset


# -- hostile states naming tokenwire's holder, and array fields below protocol 3 ----------------

class _HeldReq:
    ids = TokenIds()


def _pickle_with_state(state: Any) -> bytes:
    import copyreg
    import io

    class P(pickle.Pickler):
        def reducer_override(self, obj: Any) -> Any:
            if type(obj) is _HeldReq:
                return (copyreg.__newobj__, (_HeldReq,), state)
            return NotImplemented

    out = io.BytesIO()
    P(out, protocol=5).dump(object.__new__(_HeldReq))
    return out.getvalue()


def test_a_pickled_holder_cannot_take_state_past_its_checks() -> None:
    # A pickle may build tokenwire's holder (its class is allowed, as __reduce__ needs) and then
    # BUILD slot state into it: bytes as the "vector", or a typecode that cannot hold the ids.
    import io
    tv = tokenwire.as_tokens([1000, 70000])

    class Forged:
        def __init__(self, slots: Dict[str, Any]) -> None:
            self.slots = slots

        def __reduce__(self) -> Any:
            return (_TokenField, (tv,), (None, self.slots))

    allow = {("tokenwire.request", "_TokenField"), ("copyreg", "__newobj__"),
             (__name__, "_HeldReq"), (__name__, "Forged")}

    class U(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            return tokenwire.find_class(module, name, allow=allow)

    for slots in ({"vector": b"\x01\x02\x03", "kind": "b"}, {"kind": "b"}):
        data = _pickle_with_state({"__tokenwire__": 1, "ids": {"as_is": Forged(slots)}})
        with pytest.raises(WireFormatError, match="takes no pickled state"):
            U(io.BytesIO(data)).load()
    # An honest holder sent as it is: rebuilt through its checks, the ids kept.
    data = _pickle_with_state({"__tokenwire__": 1, "ids": {"as_is": _TokenField(tv)}})
    out = U(io.BytesIO(data)).load()
    assert type(token_buffer(out, "ids")) is TokenVector and out.ids == [1000, 70000]


class _Proto2Req:
    ids = TokenIds(codec="auto")


def test_array_field_with_a_compact_codec_pickles_below_protocol_3_without_codecs() -> None:
    # Below protocol 3 bytes pickle through `_codecs.encode`, a global a restricted unpickler
    # would have to allow: frames travel as latin-1 text, the (frame, typecode) form too.
    import io
    import pickletools
    r = _Proto2Req()
    r.ids = array("q", range(100))
    data = pickle.dumps(r, protocol=2)
    names = [arg for op, arg, _ in pickletools.genops(data) if op.name == "GLOBAL"]
    assert not any("_codecs" in str(n) for n in names), names
    allow = {(__name__, "_Proto2Req"), ("copyreg", "_reconstructor"), ("builtins", "object")}

    class U(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            return tokenwire.find_class(module, name, allow=allow)

    out = U(io.BytesIO(data)).load()
    assert type(out.ids) is array and out.ids.typecode == "q" and out.ids.tolist() == list(range(100))
