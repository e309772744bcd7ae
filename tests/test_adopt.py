"""Adopting a class (tokenwire/state.py): the TokenwireMixin base class, the token_fields
decorator and the field line alone; copies; subclasses (each configured from its own
attributes); classes with their own __getstate__ / __setstate__; slots of base classes; generic
classes. Adopting the request classes of real serving stacks is tests/test_adoption.py."""

from __future__ import annotations

import copy
import dataclasses
import io
import pickle
import re
import threading
from typing import Generic, List, Optional, TypeVar

import numpy as np
import pytest
from support.requests import PROTOCOLS, big_ids, forged_field, from_wire, roundtrip

import tokenwire
import tokenwire.unpickle
from tokenwire import GenerationRequest, TokenIds, TokenVector, token_buffer
from tokenwire.state import _TokenwireMixin as TokenwireMixin
from tokenwire.errors import WireFormatError
from tokenwire.fields import _TokenField
from tokenwire.state import _config

PROMPT = GenerationRequest.prompt_token_ids


# --------------------------------------------------------------------------------------------
# the mixin, the decorator and the field line on other classes


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


def test_repr_is_short_and_does_not_materialize():
    req = from_wire(big_ids(128_000), sampling_params={"stop": ["x" * 1000]}, id=5)
    text = repr(req)
    assert len(text) < 400, text
    assert "<128000 ids: [" in text and "id=5" in text
    assert not PROMPT.is_materialized(req)
    assert "prompt_token_ids=[1, 2]" in repr(GenerationRequest([1, 2]))


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
    # in its place (tests/test_adoption.py has the full shapes).
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
    assert token_buffer(req, "prompt_token_ids") == ids + [7]
    assert token_buffer(dup, "prompt_token_ids") == ids + [7]
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
# subclasses: each is configured from its own attributes


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
        obj.__setstate__({"__tokenwire__": 1, "rid": "r", "input_ids": [1], "n": 1,
                          "prompt_len": 99})
    assert vars(obj) == {}
    assert roundtrip(DcWithProperty("r", [1, 2], 3)).prompt_len == 2


def test_subclass_shadowing_a_descriptor_with_a_plain_attribute_pickles():
    out = roundtrip(ShadowsField([1, 2]))
    assert out.prompt_token_ids == [1, 2] and type(vars(out)["prompt_token_ids"]) is list
    obj = ShadowsProperty()
    obj.ids, obj.label = [1], "x"
    assert roundtrip(obj).label == "x"


# --------------------------------------------------------------------------------------------
# classes with their own __getstate__ / __setstate__: wrapped, not kept


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
        named = {g for g in _globals_named(data) if g[0] != __name__}
        assert named <= set(tokenwire.unpickle._PICKLE_GLOBALS)
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


# --------------------------------------------------------------------------------------------
# slots of base classes


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


# --------------------------------------------------------------------------------------------
# generic classes

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
