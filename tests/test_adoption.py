"""Adopting tokenwire in existing request classes, as docs/adopting.md shows: its runnable
examples and its diff, the example serving classes before and after adoption
(examples/before/ and examples/after/serving_requests.py: a TensorRT-LLM-style plain executor
request and an SGLang-style ~30-field dataclass; tests/support/serving.py loads both), the
one-line dataclass field (`input_ids: List[int] = TokenIds()`), array('q') fields, and vLLM's
and SGLang's msgspec.Struct shapes. Each adopted class is checked against its unmodified twin:
nothing that worked before adoption fails after it (signature, generated methods, copy, vars,
unset fields, values that are not int32 ids), and the ids travel as buffers.
The mechanics of adoption (subclasses, own __getstate__, base slots) are tests/test_adopt.py;
rolling upgrades tests/test_rolling_upgrade.py; restricted unpicklers tests/test_unpickle.py.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import difflib
import inspect
import json
import pickle
import re
import subprocess
import sys
import tracemalloc
from array import array
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np
import pytest

pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from support.requests import PROTOCOLS, roundtrip  # noqa: E402
from support.serving import (  # noqa: E402
    AFTER_PATH, BEFORE_PATH, after, before, executor, ids_of, tokenized,
)
from support.wait import WAIT_MS, WAIT_S

import tokenwire  # noqa: E402
from tokenwire import TokenIds, TokenVector, WireFormatError, token_buffer  # noqa: E402
from tokenwire.fields import _TokenField  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "adopting.md"


# --------------------------------------------------------------------------------------------
# docs/adopting.md: its runnable examples run as documented (in real subprocesses)


def _run(*args: str) -> str:
    r = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=WAIT_S,
                       cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_adopting_example_runs():
    out = _run("examples/adopting.py")
    assert out.strip().endswith("ok")
    for step in ("1. pickled", "2. ExecutorRequest", "2. TokenizedGenerateReqInput",
                 "3. restricted unpickler: global 'os.system' is not allowed",
                 "3. check_pickle: pickle opcode LONG_BINPUT at offset 3 puts memo index "
                 "67108864, beyond a 9-byte pickle",
                 "4. list_on_wire", "5. ids >= 2**31 and nested lists travel as the plain list"):
        assert step in out, out


def test_doc_names_the_examples_and_they_exist():
    text = DOC.read_text()
    named = set(re.findall(r"examples/[\w/]+\.py", text))
    assert {"examples/adopting.py", "examples/before/serving_requests.py",
            "examples/after/serving_requests.py", "examples/worker_submit.py"} <= named
    for path in named:
        assert (ROOT / path).is_file(), path


def test_doc_shows_the_whole_adoption_diff():
    """Section 1's diff is "the whole diff between the two example files": its added and removed
    lines are exactly those of the files' diff, in order, and every line it shows (context lines
    abbreviated with "..." aside) is the after file's, in order, each added line directly above
    the line the doc shows under it (the decorator on the class it decorates)."""
    block = re.search(r"^## 1\..*?```diff\n(.*?)```", DOC.read_text(), flags=re.S | re.M)
    assert block, "section 1 has no diff block"
    shown = block.group(1).splitlines()
    before = (ROOT / "examples" / "before" / "serving_requests.py").read_text().splitlines()
    after = (ROOT / "examples" / "after" / "serving_requests.py").read_text().splitlines()
    real = [line for line in difflib.unified_diff(before, after, lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert [line for line in shown if line.startswith(("+", "-"))] == real
    pos = -1                                  # the after file's line the doc reached
    for k, line in enumerate(shown):
        if line.startswith("-") or "..." in line:
            continue
        text = line[1:]
        found = after.index(text, pos + 1) if text in after[pos + 1:] else None
        assert found is not None, f"not in examples/after/serving_requests.py, in order: {line!r}"
        if line.startswith("+") and k + 1 < len(shown) and "..." not in shown[k + 1]:
            assert after[found + 1] == shown[k + 1][1:], f"{line!r} is not above {shown[k + 1]!r}"
        pos = found


def test_msgspec_section_as_documented(zmq_ctx):
    """Section 1's msgspec Struct: a TokenVector field through tokenwire.msgspec, over a real
    pair of pyzmq sockets (out of band) and through the hooks (one message)."""
    msgspec = pytest.importorskip("msgspec")
    from support.structs import EngineCoreRequest

    from tokenwire.msgspec import Decoder, Encoder, Hooks
    zmq, ctx = zmq_ctx
    text = DOC.read_text()
    assert "input_ids: bytes" not in text
    assert "+    prompt_token_ids: Optional[tokenwire.TokenVector]" in text
    assert "+Encoder().send(socket, req)" in text
    assert "+req = Decoder(EngineCoreRequest).recv(socket)" in text

    ids = list(range(100_000, 140_000))
    req = EngineCoreRequest("r1", tokenwire.as_tokens(ids), 1.5)
    proxy, worker = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    try:
        port = worker.bind_to_random_port("tcp://127.0.0.1")
        proxy.connect(f"tcp://127.0.0.1:{port}")
        Encoder().send(proxy, req)
        assert worker.poll(WAIT_MS), "nothing arrived"
        got = Decoder(EngineCoreRequest).recv(worker)
    finally:
        proxy.close(linger=0)
        worker.close(linger=0)
    assert type(got.prompt_token_ids) is tokenwire.TokenVector and got.prompt_token_ids == ids
    hooks = Hooks()
    inline = msgspec.msgpack.Encoder(enc_hook=hooks.enc_hook).encode(req)
    dec = msgspec.msgpack.Decoder(EngineCoreRequest, ext_hook=hooks.ext_hook,
                                  dec_hook=hooks.dec_hook)
    assert dec.decode(inline) == req
    # An old proxy's list[int] is read by the new worker type too (workers first).
    old = msgspec.msgpack.encode(["r1", ids[:5], 1.5])
    assert dec.decode(old).prompt_token_ids == ids[:5]


# --------------------------------------------------------------------------------------------
# the example serving classes: adoption costs at most three lines per class


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
    # the import and the decorator
    assert per_class["ExecutorRequest"] == per_class["TokenizedGenerateReqInput"] == 2
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
    assert token_buffer(out, "prompt_token_ids") is out._prompt_token_ids_i32   # TensorRT-LLM's attribute name
    proxy_side = tokenwire.GenerationRequest(list(ids))
    assert proxy_side._prompt_token_ids_i32 is None          # seed semantics: list-built
    assert token_buffer(proxy_side, "prompt_token_ids") == ids  # the public name converts
    plain = before.ExecutorRequest(list(ids), None)           # an unconverted class: as_tokens
    assert token_buffer(plain, "prompt_token_ids") == ids
    assert token_buffer(before.ExecutorRequest(None, None), "prompt_token_ids") is None


# --------------------------------------------------------------------------------------------
# an SGLang-style tokenized request: the one-line field (`input_ids: List[int] = TokenIds()`)


@dataclasses.dataclass
class SamplingParams:
    temperature: float = 1.0
    max_new_tokens: int = 16


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


def tokenized_req(cls: Any, ids: Any) -> Any:
    return cls("rid-1", "hello", ids, None, SamplingParams(), False, -1, 0, False)


def test_field_line_keeps_the_dataclass_as_it_was():
    assert [f.name for f in dataclasses.fields(TokenizedReq)] == \
        [f.name for f in dataclasses.fields(PlainTokenizedReq)]
    assert str(inspect.signature(TokenizedReq)) == str(inspect.signature(PlainTokenizedReq))
    assert dataclasses.fields(TokenizedReq)[2].default is dataclasses.MISSING   # required
    with pytest.raises(TypeError, match="input_ids"):
        TokenizedReq("rid", "text")                                         # as the plain one
    ids = list(range(100))
    plain, req = tokenized_req(PlainTokenizedReq, list(ids)), tokenized_req(TokenizedReq, list(ids))
    assert repr(req) == repr(plain).replace("PlainTokenizedReq", "TokenizedReq")
    assert dataclasses.asdict(req) == dataclasses.asdict(plain)
    assert dataclasses.astuple(req) == dataclasses.astuple(plain)
    assert req == tokenized_req(TokenizedReq, list(ids)) and req != tokenized_req(TokenizedReq, [1])
    moved = dataclasses.replace(req, input_ids=[7, 8])
    assert type(moved) is TokenizedReq and moved.input_ids == [7, 8] and moved.rid == "rid-1"


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_field_line_gives_the_dataclass_tokenwires_pickling(protocol):
    ids = list(range(40_000))
    req = tokenized_req(TokenizedReq, ids)
    assert req.input_ids is ids                                  # the very list, as before
    assert type(req.__getstate__()["input_ids"]) is TokenVector  # sent as int32
    out = roundtrip(req, protocol)
    assert type(vars(out)["input_ids"]) is _TokenField           # not read yet: no list built
    assert token_buffer(out, "input_ids") == ids
    assert out == req and type(out.input_ids) is list
    assert copy.deepcopy(out) == req and copy.copy(out).input_ids is out.input_ids


def test_frozen_dataclass_default_none_and_subclass():
    req = FrozenReq("r", (1, 2, 3))
    assert req.output_ids is None and FrozenReq("r", [1], [2]).output_ids == [2]
    params = inspect.signature(FrozenReq).parameters
    assert list(params) == ["rid", "input_ids", "output_ids"]
    assert params["input_ids"].default is inspect.Parameter.empty
    assert params["output_ids"].default is None
    out = roundtrip(req)
    assert out == req and hash(out) == hash(req) and type(out.input_ids) is tuple
    with pytest.raises(dataclasses.FrozenInstanceError):
        out.input_ids = [1]
    sub = EmbeddingReq("r", "t", [5, 6], None, SamplingParams(), False, -1, 0, False, None, None,
                       True)
    back = roundtrip(sub)
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
        class SlottedMixin(tokenwire.state._TokenwireMixin):
            input_ids: List[int] = TokenIds()


def test_class_access_is_the_descriptor_once_the_dataclass_is_built():
    assert isinstance(TokenizedReq.input_ids, TokenIds)
    assert TokenizedReq.__dict__["input_ids"] is TokenizedReq.input_ids


def test_token_fields_below_dataclass_keeps_defaults_and_refuses_field_lines():
    @dataclasses.dataclass
    @tokenwire.token_fields("input_ids", "output_ids")
    class Below:
        rid: str
        input_ids: List[int]
        output_ids: Optional[List[int]] = None

    params = inspect.signature(Below).parameters
    assert params["input_ids"].default is inspect.Parameter.empty
    assert params["output_ids"].default is None
    req = Below("r", [1, 2])
    assert req.output_ids is None and type(req.__getstate__()["input_ids"]) is TokenVector
    with pytest.raises(TypeError, match=r"'output_ids' is a dataclasses\.field\(\.\.\.\): write "
                                        r"@token_fields above @dataclass"):
        @dataclasses.dataclass
        @tokenwire.token_fields("output_ids")
        class FieldLine:
            output_ids: List[int] = dataclasses.field(default_factory=list)


# --------------------------------------------------------------------------------------------
# a TensorRT-LLM-style executor request: a plain class, a prompt or a batch of prompts


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
    out = roundtrip(req)
    assert type(req.__getstate__()["prompt_token_ids"]) is TokenVector
    assert out.prompt_token_ids == list(range(1000)) and out.query_token_ids is None
    batch = [[1, 2, 3], [4, 5]]                                # list[list[int]]: a batch
    out = roundtrip(ExecutorRequest(batch))
    assert out.prompt_token_ids == batch and type(out.prompt_token_ids[0]) is list
    with pytest.raises(TypeError, match=r"ExecutorRequest\.prompt_token_ids: token id at index 0"):
        token_buffer(out, "prompt_token_ids")


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


# --------------------------------------------------------------------------------------------
# values that are not int32 ids: nothing that pickled before adoption fails after it


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("value", [[2**31, 1], [-(2**31) - 1], [10**30, 5], [True, False, 3]],
                         ids=["2**31", "below", "huge", "bools"])
def test_ints_that_are_not_int32_travel_as_the_list(value, protocol):
    for req in (executor(after, list(value)), tokenized(after, list(value))):
        name = "prompt_token_ids" if type(req) is after.ExecutorRequest else "input_ids"
        out = roundtrip(req, protocol)
        got = getattr(out, name)
        assert got == value and [type(v) for v in got] == [type(v) for v in value]
        with pytest.raises((OverflowError, TypeError),
                           match=f"{type(req).__name__}.{name}: token id at index"):
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
    st.tuples(st.binary(max_size=4)),                  # the shapes of tokenwire's tuple forms
    st.tuples(st.text(max_size=4), st.sampled_from("qbZ")),
    ids_like.map(lambda v: array("q", v)),
    st.lists(st.integers(-2**63, 2**63 - 1), max_size=4).map(lambda v: array("q", v)),
    st.lists(st.floats(allow_nan=False), max_size=4).map(lambda v: array("d", v)),
)


@settings(max_examples=300, deadline=None)
@given(value=odd_values, protocol=st.sampled_from([2, 3, 4, 5]), read=st.booleans())
def test_pickle_round_trip_matches_the_unmodified_class(value, protocol, read):
    plain = roundtrip(PlainExecutorRequest(copy.deepcopy(value)), protocol).prompt_token_ids
    req = ExecutorRequest(copy.deepcopy(value))
    if read:
        req = roundtrip(req, protocol)                 # a received request sent on again
        req.prompt_token_ids
    got = roundtrip(req, protocol).prompt_token_ids
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
    out = roundtrip(req)
    assert type(vars(out)["prompt_token_ids"]) is _TokenField             # unread: no array yet
    got = out.prompt_token_ids
    assert type(got) is array and got.typecode == typecode and got == ids
    assert out.prompt_token_ids is got                          # built once, cached
    got.append(5)                                               # changed in place: never stale
    assert roundtrip(out).prompt_token_ids == array(typecode, [0, 1, 2, 100, 127, 5])
    assert type(copy.deepcopy(out).prompt_token_ids) is array


def test_array_field_with_ids_beyond_int32_travels_as_the_array():
    ids = array("q", [2**40, 1])
    out = roundtrip(ExecutorRequest(ids))
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
            return tokenwire.unpickle.find_class(module, name, allow=allow)

    out = U(io.BytesIO(data)).load()
    assert type(out.ids) is array and out.ids.typecode == "q"
    assert out.ids.tolist() == list(range(100))


# --------------------------------------------------------------------------------------------
# SGLang's current shape: a msgspec.Struct pickled by zmq's send_pyobj


def test_pickled_struct_sends_the_ids_out_of_band_and_consumers_keep_working():
    pytest.importorskip("msgspec")
    from support.structs import PlainStructReq, StructReq
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
    pytest.importorskip("msgspec")
    from support.structs import StructReq
    ids = list(range(-3, 1000))
    sent = array("q", ids) if old_proxy else tokenwire.as_tokens(ids)
    out = pickle.loads(pickle.dumps(StructReq("r", "t", sent, {}), protocol=5))
    origin = array("q") + out.input_ids
    assert type(origin) is array and origin.typecode == "q" and origin.tolist() == ids
    origin.append(7)                                            # the scheduler's own array
    assert out.input_ids[-1] == 999


def test_token_ids_on_a_struct_points_to_the_field_type():
    msgspec = pytest.importorskip("msgspec")
    with pytest.raises((TypeError, RuntimeError)) as info:
        class Bad(msgspec.Struct):
            rid: str
            input_ids = TokenIds()
    error = info.value if isinstance(info.value, TypeError) else info.value.__cause__
    assert "Bad is a msgspec.Struct" in str(error) and "TokenVector" in str(error)


# --------------------------------------------------------------------------------------------
# a pickled holder cannot take state past its checks


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
            return tokenwire.unpickle.find_class(module, name, allow=allow)

    for slots in ({"vector": b"\x01\x02\x03", "kind": "b"}, {"kind": "b"}):
        data = _pickle_with_state({"__tokenwire__": 1, "ids": {"as_is": Forged(slots)}})
        with pytest.raises(WireFormatError, match="takes no pickled state"):
            U(io.BytesIO(data)).load()
    # An honest holder sent as it is: rebuilt through its checks, the ids kept.
    data = _pickle_with_state({"__tokenwire__": 1, "ids": {"as_is": _TokenField(tv)}})
    out = U(io.BytesIO(data)).load()
    assert type(token_buffer(out, "ids")) is TokenVector and out.ids == [1000, 70000]
