"""Adopting tokenwire on real request classes: the converted class behaves as the unmodified one.

The classes are examples/before/serving_requests.py (unmodified: a TensorRT-LLM-style plain
executor request and an SGLang-style ~30-field dataclass) and examples/after/serving_requests.py
(the same file after adoption; tests/support/serving.py loads both). Covered here: the adoption
diff (at most three lines per class), a dataclass keeping its signature and generated methods,
both shapes round-tripping as buffers, copy / vars / unset semantics, values that are not int32
ids, nothing kept alive after sending, and the worker's hand-off (`token_buffer`).
Rolling upgrades are in tests/test_rolling_upgrade.py, restricted unpicklers in
tests/test_unpickle.py.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import difflib
import inspect
import json
import pickle
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

import tokenwire
from support.serving import (
    AFTER_PATH, BEFORE_PATH, PROTOCOLS, after, before, executor, ids_of, roundtrip, tokenized,
)
from tokenwire import TokenVector, token_buffer

# --------------------------------------------------------------------------------------------
# adoption costs at most three lines per class


def _changed_lines() -> list[str]:
    a = BEFORE_PATH.read_text().splitlines()
    b = AFTER_PATH.read_text().splitlines()
    return [line for line in difflib.unified_diff(a, b, lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def _class_spans(path: Path) -> dict[str, range]:
    """Top-level class -> the lines it spans, decorators included."""
    spans = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ClassDef):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            spans[node.name] = range(first, node.end_lineno + 1)
    return spans


def changed_lines_per_class() -> dict[str, int]:
    """Lines adoption adds or removes, charged to the class whose span holds them; a module-level
    line (the import) is charged to every class."""
    a, b = BEFORE_PATH.read_text().splitlines(), AFTER_PATH.read_text().splitlines()
    spans = {"before": _class_spans(BEFORE_PATH), "after": _class_spans(AFTER_PATH)}
    per_class = dict.fromkeys(spans["after"], 0)

    def charge(side: str, lineno: int) -> None:
        owners = [name for name, span in spans[side].items() if lineno in span]
        for name in owners or per_class:
            per_class[name] += 1

    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        for i in range(i1, i2) if tag != "equal" else ():
            charge("before", i + 1)
        for j in range(j1, j2) if tag != "equal" else ():
            charge("after", j + 1)
    return per_class


def test_adoption_is_at_most_three_lines_per_class():
    changed = _changed_lines()
    assert changed == [
        "+import tokenwire",
        '+@tokenwire.token_fields("prompt_token_ids", "query_token_ids")',
        '+@tokenwire.token_fields("input_ids")',
    ]
    per_class = changed_lines_per_class()
    assert per_class["ExecutorRequest"] == per_class["TokenizedGenerateReqInput"] == 2  # import + decorator
    assert all(n <= 3 for n in per_class.values()), per_class
    assert sum(changed.startswith("+import") for changed in changed) == 1


# --------------------------------------------------------------------------------------------
# a dataclass keeps its signature and its generated methods


def test_dataclass_signature_and_fields_unchanged():
    A, B = after.TokenizedGenerateReqInput, before.TokenizedGenerateReqInput
    assert str(inspect.signature(A)) == str(inspect.signature(B))
    assert [(f.name, f.type, f.default) for f in dataclasses.fields(A)] == \
        [(f.name, f.type, f.default) for f in dataclasses.fields(B)]
    assert len(dataclasses.fields(A)) >= 30
    assert isinstance(vars(A)["input_ids"], tokenwire.TokenIds)      # Cls.field is the descriptor


@pytest.mark.parametrize("wire", [False, True], ids=["built", "received"])
def test_dataclass_generated_methods_behave_as_before(wire):
    ids = ids_of(50)
    old, new = tokenized(before, list(ids)), tokenized(after, list(ids))
    if wire:
        new = roundtrip(new)
        assert not after.TokenizedGenerateReqInput.input_ids.is_materialized(new)
    assert repr(new) == repr(old).replace("serving_requests_before", "serving_requests")
    assert dataclasses.asdict(new) == dataclasses.asdict(old)
    assert dataclasses.astuple(new) == dataclasses.astuple(old)
    assert new == tokenized(after, list(ids)) and new != tokenized(after, ids[:-1])
    moved = dataclasses.replace(new, rid="rid-2", input_ids=[1, 2])
    assert (moved.rid, moved.input_ids, moved.input_text) == ("rid-2", [1, 2], "hello")
    assert new.num_tokens == 50 and new.truncated(3) == ids[:3]
    assert type(new.input_ids) is list


def test_dataclass_positional_and_keyword_construction():
    new = tokenized(after, [1, 2, 3], "lora-a", None, None, None, True)
    assert (new.lora_id, new.return_hidden_states, new.input_ids) == ("lora-a", True, [1, 2, 3])
    with pytest.raises(TypeError, match="missing"):
        after.TokenizedGenerateReqInput("r", "t", [1])
    kw = after.TokenizedGenerateReqInput(
        rid="r", input_text="t", input_ids=np.arange(4, dtype=np.int32), mm_inputs=None,
        sampling_params=None, return_logprob=False, logprob_start_len=0, top_logprobs_num=0,
        token_ids_logprob=None, stream=True)
    assert token_buffer(kw, "input_ids") == [0, 1, 2, 3]


@tokenwire.token_fields("ids")
@dataclasses.dataclass(frozen=True)
class Frozen:
    ids: list
    n: int


def test_frozen_dataclass_and_slots_refusal():
    f = roundtrip(Frozen([1, 2], 3))
    assert (f.ids, f.n) == ([1, 2], 3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.n = 4
    # Slots written by hand, then the ones @dataclass(slots=True) makes.
    with pytest.raises(TypeError, match=r"token_fields\(Slotted\): instances need a __dict__"):
        @tokenwire.token_fields("ids")
        @dataclasses.dataclass
        class Slotted:
            __slots__ = ("ids",)
            ids: list
    with pytest.raises(TypeError, match="instances need a __dict__"):
        @tokenwire.token_fields("ids")
        @dataclasses.dataclass(slots=True)
        class SlottedDataclass:
            ids: list


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("shape", ["plain", "dataclass"])
def test_both_shapes_roundtrip_as_buffers(shape, protocol):
    ids = ids_of(40_000)
    req = executor(after, list(ids)) if shape == "plain" else tokenized(after, list(ids))
    name = "prompt_token_ids" if shape == "plain" else "input_ids"
    state = req.__getstate__()
    assert type(state[name]) is TokenVector and state["__tokenwire__"] == 1
    out = roundtrip(req, protocol)
    desc = getattr(type(out), name)
    assert not desc.is_materialized(out)
    assert token_buffer(out, name) == ids                # the worker's hand-off, no list
    assert getattr(out, name) == ids
    if shape == "plain":
        assert out.rotated_prompt() == ids[1:] + [ids[0]]
        assert out.prompt_with_query() == ids + [7, 8] and out.id == 11
        assert out.lora_request == after.LoRARequest("l", 1, "/p")


# --------------------------------------------------------------------------------------------
# values that are not int32 ids


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("value", [[2**31, 1], [-(2**31) - 1], [10**30, 5], [True, False, 3]],
                         ids=["2**31", "below", "huge", "bools"])
def test_ints_that_are_not_int32_travel_as_the_list(value, protocol):
    for req in (executor(after, list(value)), tokenized(after, list(value))):
        name = "prompt_token_ids" if type(req) is after.ExecutorRequest else "input_ids"
        out = roundtrip(req, protocol)
        got = getattr(out, name)
        assert got == value and [type(v) for v in got] == [type(v) for v in value]
        with pytest.raises((OverflowError, TypeError), match=f"{type(req).__name__}.{name}: token id at index"):
            token_buffer(out, name)            # the hand-off still says which field


def test_nested_lists_travel_as_the_unmodified_class_sends_them():
    out = pickle.loads(pickle.dumps(executor(after, [[1, 2], [3]])))
    assert out.prompt_token_ids == [[1, 2], [3]]
    assert pickle.loads(pickle.dumps(tokenized(after, ((1,), (2,))))).input_ids == ((1,), (2,))
    with pytest.raises(TypeError, match=r"ExecutorRequest\.prompt_token_ids: token id at index 0"):
        token_buffer(out, "prompt_token_ids")


def test_other_bad_items_travel_and_the_hand_off_names_the_field():
    req = executor(after, [1, "x"])
    assert pickle.loads(pickle.dumps(req)).prompt_token_ids == [1, "x"]
    with pytest.raises(TypeError, match=r"ExecutorRequest\.prompt_token_ids: token id at index 1"):
        token_buffer(req, "prompt_token_ids")
    with pytest.raises(TypeError, match=r"ExecutorRequest\.prompt_token_ids"):
        executor(after, "abc")                 # not a sequence of ids: refused at assignment


# --------------------------------------------------------------------------------------------
# copy, vars() and unset fields behave as in the unmodified class; the worker's hand-off


@pytest.mark.parametrize("build", [executor, tokenized])
def test_copy_vars_and_unset_match_the_unmodified_class(build):
    ids = ids_of(100)
    name = "prompt_token_ids" if build is executor else "input_ids"
    old, new = build(before, list(ids)), build(after, list(ids))
    for obj in (old, new):
        dup = copy.copy(obj)
        assert getattr(dup, name) is getattr(obj, name)      # a shallow copy shares the list
        deep = copy.deepcopy(obj)
        assert getattr(deep, name) == ids and getattr(deep, name) is not getattr(obj, name)
    assert list(vars(new)) == list(vars(old))                 # the public names, same order
    assert vars(new)[name] is getattr(new, name)               # built from a list: the list
    assert json.dumps(vars(new)[name]) == json.dumps(ids)
    received = roundtrip(new)
    assert list(vars(received)) == list(vars(old))
    # Received ids are held as a buffer until read: vars() shows a holder until then.
    assert repr(vars(received)[name]) == "<token ids: 100 held as int32>"
    for obj in (old, new):
        fresh = type(obj).__new__(type(obj))
        with pytest.raises(AttributeError, match=name):
            getattr(fresh, name)
        setattr(fresh, name, None)
        assert getattr(fresh, name) is None


def test_no_buffer_kept_alive_after_sending():
    ids = ids_of(40_000)
    req = executor(after, ids)
    held = dict(vars(req))
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        data = pickle.dumps(req, protocol=5)
        assert len(data) > 4 * len(ids)
        del data
        retained = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
    # The object holds exactly what it held before: the user's list, nothing added, nothing
    # replaced (a cached int32 copy would be a new value or a new key) ...
    assert vars(req).keys() == held.keys()
    assert all(vars(req)[key] is value for key, value in held.items())
    assert vars(req)["prompt_token_ids"] is ids
    # ... and the pickling left no Python-level allocation behind (a kept list of 40k ids alone
    # would be 320 KB).
    assert retained < 16_000, retained


def test_worker_handoff_public_name_and_seed_alias():
    ids = ids_of(1000)
    out = roundtrip(tokenwire.GenerationRequest(list(ids)))
    assert token_buffer(out, "prompt_token_ids") is out._prompt_token_ids_i32   # the seed's name
    proxy_side = tokenwire.GenerationRequest(list(ids))
    assert proxy_side._prompt_token_ids_i32 is None          # seed semantics: list-built
    assert token_buffer(proxy_side, "prompt_token_ids") == ids  # the public name converts
    plain = before.ExecutorRequest(list(ids), None)           # an unconverted class: as_tokens
    assert token_buffer(plain, "prompt_token_ids") == ids
    assert token_buffer(before.ExecutorRequest(None, None), "prompt_token_ids") is None
