"""Issue #12: tokenwire as a drop-in for real request classes.

The classes are examples/before/serving_requests.py (unmodified: a TensorRT-LLM-style plain
executor request and an SGLang-style ~30-field dataclass) and examples/after/serving_requests.py
(the same file after adoption). Everything here compares the two, or runs them in real
processes.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import difflib
import importlib.util
import inspect
import io
import json
import os
import pickle
import subprocess
import tempfile
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

import tokenwire
import tokenwire.unpickle
from tokenwire import TokenVector, token_buffer

ROOT = Path(__file__).resolve().parent.parent
BEFORE_PATH = ROOT / "examples" / "before" / "serving_requests.py"
AFTER_PATH = ROOT / "examples" / "after" / "serving_requests.py"
PROTOCOLS = range(pickle.HIGHEST_PROTOCOL + 1)

sys.path.insert(0, str(AFTER_PATH.parent))
import serving_requests as after  # noqa: E402  (pickles name it "serving_requests")


def _load_before():
    spec = importlib.util.spec_from_file_location("serving_requests_before", BEFORE_PATH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["serving_requests_before"] = mod
    spec.loader.exec_module(mod)
    return mod


before = _load_before()


def ids_of(n: int, seed: int = 0) -> list[int]:
    return np.random.default_rng(seed).integers(0, 151_936, n, dtype=np.int32).tolist()


def executor(mod, ids, **kw):
    return mod.ExecutorRequest(ids, mod.SamplingParams(max_tokens=8), query_token_ids=[7, 8],
                               lora_request=mod.LoRARequest("l", 1, "/p"), **kw).set_id(11)


def tokenized(mod, ids, *rest):
    """Built positionally, as SGLang's tokenizer manager does."""
    return mod.TokenizedGenerateReqInput(
        "rid-1", "hello", ids, None, mod.SamplingParams(temperature=0.5), True, -1, 5, None,
        False, *rest)


def roundtrip(obj, protocol=5):
    return pickle.loads(pickle.dumps(obj, protocol=protocol))


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
# item 1: a dataclass keeps its signature and its generated methods


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
    # What @dataclass(slots=True) makes (3.10+), written by hand so that 3.9 runs it too.
    with pytest.raises(TypeError, match=r"token_fields\(Slotted\): instances need a __dict__"):
        @tokenwire.token_fields("ids")
        @dataclasses.dataclass
        class Slotted:
            __slots__ = ("ids",)
            ids: list
    if sys.version_info >= (3, 10):
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
# item 2: rolling upgrades (real processes running the unmodified classes)


def _old_worker(data: bytes, *args: str) -> dict:
    r = subprocess.run([sys.executable, str(ROOT / "tests" / "dropin_old_worker.py"), *args],
                       input=data, capture_output=True, timeout=120,
                       cwd=tempfile.gettempdir())
    assert r.returncode == 0, r.stderr.decode()
    return json.loads(r.stdout)


def test_rolling_upgrade_new_proxy_old_worker():
    ids = ids_of(1000)
    req = executor(after, list(ids))
    # Default format: an old worker without tokenwire cannot even load it ...
    assert "ModuleNotFoundError" in _old_worker(pickle.dumps(req, 5), "--no-tokenwire")["load_error"]
    # ... one with tokenwire installed loads a TokenVector: concatenation works, .append does not.
    seen = _old_worker(pickle.dumps(req, 5))
    assert seen["type"] == "TokenVector" and seen["rotated_head"] == ids[1:4]
    assert seen["consumer_error"].startswith("AttributeError")
    # The switch, process-wide: the old class receives exactly the list it expects.
    previous = tokenwire.list_on_wire(True)
    try:
        data = pickle.dumps(req, 5)
    finally:
        tokenwire.list_on_wire(previous)
    assert b"tokenwire" not in data
    seen = _old_worker(data, "--no-tokenwire")
    assert seen == {"type": "list", "len": 1000, "rotated_head": ids[1:4], "appended": True}
    # A new worker reads the list form too (and keeps it a list: it is the source).
    back = pickle.loads(data)
    assert back.prompt_token_ids == ids and after.ExecutorRequest.prompt_token_ids.is_materialized(back)


def test_list_on_wire_per_class_and_environment():
    @tokenwire.token_fields("ids", list_on_wire=True)
    class Compat:
        def __init__(self, ids):
            self.ids = ids

    class CompatMixin(tokenwire.TokenwireMixin, list_on_wire=True):
        ids = tokenwire.TokenIds()

    class Fast(tokenwire.TokenwireMixin, list_on_wire=False):
        ids = tokenwire.TokenIds()

    obj = Compat(np.arange(3, dtype=np.int32))               # held as a buffer, sent as a list
    assert obj.__getstate__() == {"ids": [0, 1, 2]}
    m = CompatMixin()
    m.ids = [4]
    assert m.__getstate__() == {"ids": [4]}
    f = Fast()
    f.ids = [4]
    previous = tokenwire.list_on_wire(True)
    try:
        assert type(f.__getstate__()["ids"]) is TokenVector    # the class's choice wins
        assert tokenwire.list_on_wire() is True
    finally:
        tokenwire.list_on_wire(previous)
    code = "import tokenwire; print(tokenwire.list_on_wire())"
    for value, expected in (("1", "True"), ("0", "False"), ("", "False")):
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env={**os.environ, "TOKENWIRE_LIST_ON_WIRE": value},
                           cwd=tempfile.gettempdir())
        assert r.stdout.strip() == expected, r.stderr


class RenamingUnpickler(pickle.Unpickler):
    """Loads the unmodified classes' pickles as the same-named converted classes (in a real
    deployment the module name is the same on both sides)."""

    def find_class(self, module, name):
        return super().find_class(module.replace("serving_requests_before", "serving_requests"), name)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_old_proxy_new_worker(protocol):
    """Workers first: a new class loads what the unmodified class pickled."""
    ids = ids_of(500)
    for build in (executor, tokenized):
        old = build(before, list(ids))
        new = RenamingUnpickler(io.BytesIO(pickle.dumps(old, protocol))).load()
        assert type(new).__module__ == "serving_requests"
        name = "prompt_token_ids" if build is executor else "input_ids"
        assert getattr(new, name) == ids and token_buffer(new, name) == ids
        assert vars(new).keys() == vars(old).keys()


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


# --------------------------------------------------------------------------------------------
# item 3: restricted unpicklers


class AllowListUnpickler(pickle.Unpickler):
    allow = frozenset({("serving_requests", "ExecutorRequest"), (__name__, "PackedExecutorRequest"),
                       ("serving_requests", "TokenizedGenerateReqInput"),
                       ("serving_requests", "SamplingParams"),
                       ("serving_requests", "LoRARequest")})

    def find_class(self, module, name):
        return tokenwire.find_class(module, name, allow=self.allow)


class OldProtocolUnpickler(AllowListUnpickler):
    # Protocols 0 and 1 name these for any plain object (documented in docs/adopting.md).
    allow = AllowListUnpickler.allow | {("copyreg", "_reconstructor"), ("builtins", "object")}


@tokenwire.token_fields("prompt_token_ids", "query_token_ids", codec="packed")
class PackedExecutorRequest(after.ExecutorRequest):
    """The executor request sending compact frames (a slow link)."""


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_restricted_unpickler_needs_only_pickle_globals(protocol):
    ids = ids_of(300) + [-(2**31), 2**31 - 1, 0, 255, 256]
    cls = AllowListUnpickler if protocol >= 2 else OldProtocolUnpickler
    unsigned = [i for i in ids if i >= 0]                       # what "packed" codes
    packed = PackedExecutorRequest(list(unsigned), after.SamplingParams(), lora_request=None)
    assert type(packed.__getstate__()["prompt_token_ids"]) is bytes       # a frame
    for req, expected in ((executor(after, list(ids)), ids), (tokenized(after, list(ids)), ids),
                          (packed, unsigned)):
        data = pickle.dumps(req, protocol)
        assert b"_codecs" not in data
        out = cls(io.BytesIO(data)).load()
        assert type(out) is type(req)
        name = "input_ids" if type(req) is after.TokenizedGenerateReqInput else "prompt_token_ids"
        assert getattr(out, name) == expected


def test_pickle_globals_is_exactly_what_is_named():
    seen: set = set()

    class Recorder(pickle.Unpickler):
        def find_class(self, module, name):
            seen.add((module, name))
            return super().find_class(module, name)

    req = executor(after, ids_of(10))
    for protocol in range(2, pickle.HIGHEST_PROTOCOL + 1):
        Recorder(io.BytesIO(pickle.dumps(req, protocol))).load()
    ours = {g for g in seen if g[0] != "serving_requests"}
    assert ours == set(tokenwire.unpickle.PICKLE_GLOBALS) == {("tokenwire._core", "_restore_token_vector")}


def test_find_class_refuses_everything_else():
    evil = b"cos\nsystem\n(S'echo pwned'\ntR."
    with pytest.raises(pickle.UnpicklingError, match="global 'os.system' is not allowed"):
        AllowListUnpickler(io.BytesIO(evil)).load()
    with pytest.raises(pickle.UnpicklingError, match="_codecs.encode"):
        tokenwire.find_class("_codecs", "encode")
    assert tokenwire.find_class("tokenwire._core", "_restore_token_vector") is \
        tokenwire._core._restore_token_vector
    with pytest.raises(ValueError, match="code point above 255"):
        tokenwire._core._restore_token_vector("\u0100abc")


# --------------------------------------------------------------------------------------------
# item 4: values that are not int32 ids


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
# item 5: semantics of the unmodified class


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
    with pytest.warns(DeprecationWarning, match=r"token_buffer\(obj, 'prompt_token_ids'\)"):
        assert tokenwire.GenerationRequest.prompt_token_ids.buffer(out) is out._prompt_token_ids_i32
    proxy_side = tokenwire.GenerationRequest(list(ids))
    assert proxy_side._prompt_token_ids_i32 is None          # seed semantics: list-built
    assert token_buffer(proxy_side, "prompt_token_ids") == ids  # the public name converts
    plain = before.ExecutorRequest(list(ids), None)           # an unconverted class: as_tokens
    assert token_buffer(plain, "prompt_token_ids") == ids
    assert token_buffer(before.ExecutorRequest(None, None), "prompt_token_ids") is None
