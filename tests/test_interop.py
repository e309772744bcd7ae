"""TokenVector where serving-stack code meets it: list-style copies, JSON, pydantic models and
array.array (classes here have the shapes those stacks' request classes have)."""

from __future__ import annotations

import array
import copy
import json
import re
import subprocess
import tempfile
import sys
from typing import Any, List, Optional, Union

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tokenwire
from support.strategies import token_lists
from support.wait import WAIT_S
from tokenwire import TokenVector, json_default
from tokenwire.errors import TokenIdOverflowError

pydantic = pytest.importorskip("pydantic")     # the test extra installs it
from pydantic import BaseModel, ConfigDict, Field, ValidationError  # noqa: E402

IDS = [0, 1, 255, 256, 32767, 65535, 151643, 2**31 - 1, -(2**31), -1, 7]
BIG = list(range(-5, 40_000 - 5))       # 40k ids, past the int cache, with negatives


# --------------------------------------------------------------------------------------------
# copy(): the engine's own list


class EngineRequest:
    """The shape of an engine's request: it keeps the prompt as sent, and its own growing copy of
    every id (prompt + output) built with `.copy()`."""

    def __init__(self, request_id: str, prompt_token_ids: Any) -> None:
        self.request_id = request_id
        self.prompt_token_ids = prompt_token_ids
        self._output_token_ids: list[int] = []
        self._all_token_ids = prompt_token_ids.copy()

    def append_output_token_ids(self, token_ids: Union[int, list[int]]) -> None:
        if isinstance(token_ids, int):
            self._output_token_ids.append(token_ids)
            self._all_token_ids.append(token_ids)
        else:
            self._output_token_ids.extend(token_ids)
            self._all_token_ids.extend(token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self._all_token_ids)


@pytest.mark.parametrize("source", ["list", "token_vector", "decoded"])
def test_engine_request_grows_its_own_copy(source: str) -> None:
    prompt: Any = {"list": list(IDS), "token_vector": TokenVector(IDS),
                   "decoded": tokenwire.decode(tokenwire.encode(IDS))}[source]
    req = EngineRequest("r1", prompt)
    req.append_output_token_ids(42)
    req.append_output_token_ids([43, 44])
    assert req._all_token_ids == IDS + [42, 43, 44]
    assert req.num_tokens == len(IDS) + 3
    assert req.prompt_token_ids == IDS            # the field the proxy sent is untouched
    assert type(req._all_token_ids) is list


class SessionRequest(EngineRequest):
    """An engine request the scheduler itself grows in place (a streaming session's new prompt
    ids): built with the one conversion docs/adopting.md gives, from the message's field."""

    @classmethod
    def from_message(cls, request_id: str, prompt_token_ids: Any) -> SessionRequest:
        return cls(request_id, None if prompt_token_ids is None else prompt_token_ids.copy())

    def append_prompt(self, token_ids: list[int]) -> None:
        self.prompt_token_ids.extend(token_ids)
        self._all_token_ids.extend(token_ids)


def test_the_field_the_engine_extends_is_converted_once_on_arrival() -> None:
    tv = tokenwire.decode(tokenwire.encode(IDS))
    with pytest.raises(AttributeError, match="extend"):
        EngineRequest("r", tv).prompt_token_ids.extend([1])   # what the doc's diff is for
    sent_list = list(IDS)                             # what an old proxy sends
    for received in (tv, sent_list):
        req = SessionRequest.from_message("r", received)
        req.append_output_token_ids(5)
        req.append_prompt([6, 7])
        assert type(req.prompt_token_ids) is list and req.prompt_token_ids == IDS + [6, 7]
        assert req._all_token_ids == IDS + [5, 6, 7]
        assert received == IDS                        # the received value is untouched


def test_copy_is_a_new_list_built_like_tolist() -> None:
    tv = TokenVector(BIG)
    a, b = tv.copy(), tv.copy()
    assert type(a) is list and a == BIG == tv.tolist()
    assert a is not b
    a.append(1)
    assert len(tv) == len(BIG) and b == BIG
    assert TokenVector().copy() == []
    # The copy module's protocol is another thing: an immutable value is its own copy.
    assert copy.copy(tv) is tv


# --------------------------------------------------------------------------------------------
# json_default


def test_json_default_writes_a_token_vector_as_a_list() -> None:
    body = {"model": "m", "prompt": TokenVector(BIG), "nested": [{"ids": TokenVector(IDS)}]}
    plain = {"model": "m", "prompt": BIG, "nested": [{"ids": IDS}]}
    assert json.dumps(body, default=json_default) == json.dumps(plain)
    assert json.loads(json.dumps(body, default=tokenwire.json_default)) == plain
    assert json.dumps(TokenVector(), default=json_default) == "[]"


@pytest.mark.parametrize("obj", [object(), {1, 2}, b"ab", np.int32(3), array.array("q", [1])])
def test_json_default_raises_what_json_raises_for_anything_else(obj: Any) -> None:
    with pytest.raises(TypeError) as plain:
        json.dumps({"x": obj})
    with pytest.raises(TypeError) as hooked:
        json.dumps({"x": obj}, default=json_default)
    assert str(hooked.value) == str(plain.value)


def test_without_the_hook_json_still_refuses() -> None:
    with pytest.raises(TypeError, match="TokenVector is not JSON serializable"):
        json.dumps(TokenVector([1]))


# --------------------------------------------------------------------------------------------
# pydantic


class CompletionRequest(BaseModel):
    """An OpenAI-style completion request: a prompt as text or ids, optional pre-tokenized ids."""

    model: str
    prompt: Union[List[int], TokenVector, str]
    prompt_token_ids: Optional[TokenVector] = None
    max_tokens: Optional[int] = 16
    temperature: float = 1.0
    stop_token_ids: List[int] = Field(default_factory=list)


class StrictRequest(BaseModel):
    model_config = ConfigDict(strict=True)
    request_id: str
    input_ids: TokenVector


class CompletionChoice(BaseModel):
    index: int
    token_ids: TokenVector
    finish_reason: Optional[str] = None


class CompletionResponse(BaseModel):
    id: str
    choices: List[CompletionChoice]


def test_tokenwire_does_not_import_pydantic() -> None:
    code = ("import sys, json, tokenwire\n"
            "json.dumps(tokenwire.TokenVector([1]), default=tokenwire.json_default)\n"
            "assert 'pydantic' not in sys.modules and 'pydantic_core' not in sys.modules\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=WAIT_S,
                       cwd=tempfile.gettempdir())   # not the clone: its tokenwire/ is uncompiled
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("value", [
    list(IDS), tuple(IDS), np.asarray(IDS, np.int64), np.asarray(IDS, np.int32),
    np.asarray([i for i in IDS for _ in (0, 1)], np.int32)[::2], array.array("q", IDS), array.array("l", IDS),
    array.array("i", IDS), [np.int64(i) for i in IDS],
], ids=["list", "tuple", "int64", "int32", "strided", "array_q", "array_l", "array_i",
        "numpy_scalars"])
def test_lax_mode_takes_the_containers_token_ids_come_in(value: Any) -> None:
    req = CompletionRequest(model="m", prompt="hi", prompt_token_ids=value)
    assert type(req.prompt_token_ids) is TokenVector
    assert req.prompt_token_ids == IDS


def test_a_token_vector_is_kept_as_it_is() -> None:
    tv = TokenVector(BIG)
    req = CompletionRequest(model="m", prompt=tv, prompt_token_ids=tv)
    assert req.prompt is tv and req.prompt_token_ids is tv


def test_union_keeps_what_it_was_given() -> None:
    assert type(CompletionRequest(model="m", prompt=[1, 2]).prompt) is list
    assert type(CompletionRequest(model="m", prompt=TokenVector([1, 2])).prompt) is TokenVector
    assert CompletionRequest(model="m", prompt="text").prompt == "text"


def _error(model: type[BaseModel], data: Any, json_input: bool = False,
           strict: Optional[bool] = None) -> dict[str, Any]:
    with pytest.raises(ValidationError) as e:
        if json_input:
            model.model_validate_json(data, strict=strict)
        else:
            model.model_validate(data, strict=strict)
    errors = e.value.errors()
    assert len(errors) == 1, errors
    return dict(errors[0])


@pytest.mark.parametrize("bad, message", [
    ([1, True], "token id at index 1 must be an int, got bool"),
    ([1, 2, 2**31], "token id at index 2 is 2147483648, outside int32"),
    ([-(2**31) - 1], "token id at index 0 is -2147483649, outside int32"),
    ([1, 2, 3, "4"], "token id at index 3 must be an int, got str"),
    ([1.0], "token id at index 0 must be an int, got float"),
    ([1, None], "token id at index 1 must be an int, got NoneType"),
    ([[1, 2]], "token id at index 0 must be an int, got list"),
    (np.asarray([1.5]), "token ids must be integers, got an array of dtype float64"),
    (np.asarray([True]), "token ids must be integers, got an array of dtype bool"),
    (np.asarray([2**40], np.int64), "token id at index 0 is 1099511627776, outside int32"),
    (array.array("d", [1.0]), "got a buffer of format 'd'"),
    (array.array("Q", [0, 2**63]), "token id at index 1 is 9223372036854775808, outside int32"),
    # past Python's int-to-text limit (4300 digits): its size, not its digits
    ([1, 10**5000], "token id at index 1 is an int of 16610 bits, outside int32"),
    ((-10**5000,), "token id at index 0 is a negative int of 16610 bits, outside int32"),
    ("1 2 3", "token ids must be a list, tuple, numpy array, array.array or TokenVector, got str"),
    ({1, 2}, "token ids must be a list, tuple, numpy array, array.array or TokenVector, got set"),
    (range(3), "got range"),
    (b"\x01\x00\x00\x00", "got bytes"),
])
def test_python_input_errors_name_the_index(bad: Any, message: str) -> None:
    err = _error(CompletionRequest, {"model": "m", "prompt": "p", "prompt_token_ids": bad})
    assert err["loc"] == ("prompt_token_ids",)
    assert err["type"] == "token_ids"
    assert message in err["msg"]


@pytest.mark.parametrize("bad, message", [
    ("[1, true]", "token id at index 1 must be an int, got bool"),
    ("[1, 2, 2147483648]", "token id at index 2 is 2147483648, outside int32"),
    ("[1, 99999999999999999999999]", "token id at index 1 is 99999999999999999999999, outside"),
    ('[1, "2"]', "token id at index 1 must be an int, got str"),
    ("[1, 2.0]", "token id at index 1 must be an int, got float"),
    ("[1, null]", "token id at index 1 must be an int, got NoneType"),
    ('"1 2"', "token ids as base64: invalid base64: character ' ' at position 1"),
    ('"AAAA"', "token ids as base64: bad magic"),
    ('{"0": 1}', "token ids must be an array of ints or a base64 string, got dict"),
])
@pytest.mark.parametrize("strict", [None, True])
def test_json_input_errors_name_the_index(bad: str, message: str, strict: Optional[bool]) -> None:
    body = '{"model": "m", "prompt": "p", "prompt_token_ids": ' + bad + "}"
    err = _error(CompletionRequest, body, json_input=True, strict=strict)
    assert err["loc"] == ("prompt_token_ids",)
    assert message in err["msg"]


@pytest.mark.parametrize("urlsafe", [False, True])
@pytest.mark.parametrize("codec", ["raw", "auto", "pfor"])
def test_json_input_takes_the_base64_form(codec: str, urlsafe: bool) -> None:
    ids = [0, 1, 2**31 - 1, 62, 63, 250_000] * 500        # "+" and "/" (or "-", "_") in the text
    text = tokenwire.to_base64(ids, codec=codec, urlsafe=urlsafe)
    assert ("-" in text or "_" in text) == urlsafe
    for model in (CompletionRequest, StrictRequest):
        body = json.dumps({"model": "m", "prompt": "p", "request_id": "r",
                           "prompt_token_ids": text, "input_ids": text})
        req = model.model_validate_json(body)
        got = getattr(req, "prompt_token_ids", None) or getattr(req, "input_ids")
        assert type(got) is TokenVector and got == ids
    # The round trip a client makes: dump as base64 text, the server validates the JSON body.
    sent = CompletionResponse(id="c", choices=[CompletionChoice(index=0, token_ids=ids)])
    body = json.dumps({"id": "c", "choices": [{"index": 0, "token_ids": text}]})
    assert CompletionResponse.model_validate_json(body) == sent


def test_base64_text_is_for_json_only() -> None:
    """From Python a str stays what it was (a prompt's text), never decoded as ids."""
    text = tokenwire.to_base64([1, 2, 3])
    err = _error(CompletionRequest, {"model": "m", "prompt": "p", "prompt_token_ids": text})
    assert "got str" in err["msg"]


def test_strict_mode_takes_a_token_vector_from_python_and_an_array_from_json() -> None:
    tv = TokenVector(IDS)
    assert StrictRequest(request_id="r", input_ids=tv).input_ids is tv
    for value in (list(IDS), tuple(IDS), np.asarray(IDS, np.int32), array.array("q", IDS)):
        err = _error(StrictRequest, {"request_id": "r", "input_ids": value})
        assert err["type"] == "is_instance_of" and err["loc"] == ("input_ids",)
    req = StrictRequest.model_validate_json('{"request_id": "r", "input_ids": [1, 2, 3]}')
    assert type(req.input_ids) is TokenVector and req.input_ids == [1, 2, 3]
    # A strict-by-call validation of a lax model follows the same rule.
    err = _error(CompletionRequest, {"model": "m", "prompt": "p", "prompt_token_ids": [1]},
                 strict=True)
    assert err["type"] == "is_instance_of"


def test_model_dump_writes_lists_of_ints() -> None:
    req = CompletionRequest(model="m", prompt=TokenVector(IDS), prompt_token_ids=BIG)
    for mode in ("python", "json"):
        d = req.model_dump(mode=mode)
        assert type(d["prompt"]) is list and d["prompt"] == IDS
        assert type(d["prompt_token_ids"]) is list and d["prompt_token_ids"] == BIG
    assert json.loads(req.model_dump_json()) == {
        "model": "m", "prompt": IDS, "prompt_token_ids": BIG, "max_tokens": 16,
        "temperature": 1.0, "stop_token_ids": []}
    assert CompletionRequest(model="m", prompt="p").model_dump()["prompt_token_ids"] is None


INT32_ARRAY = {"type": "array",
               "items": {"type": "integer", "minimum": -(2**31), "maximum": 2**31 - 1}}


def _forms(schema: dict[str, Any]) -> list[dict[str, Any]]:
    """The alternatives a property's schema names (itself when it names one)."""
    return [{k: v for k, v in s.items() if k != "title"} for s in schema.get("anyOf", [schema])]


def test_json_schema_names_both_forms_json_input_takes() -> None:
    """What a model validates from JSON: an array of int32 integers or base64 text; what it
    dumps: the array only. Each form the schema names validates through model_validate_json
    (the text in both alphabets, matched by the schema's pattern first)."""
    ids = [0, 1, 62, 63, 250_000, 2**31 - 1, -(2**31)] * 300     # "+/" or "-_" in the text
    field = StrictRequest.model_json_schema()["properties"]["input_ids"]
    array, text = _forms(field)
    assert array == INT32_ARRAY
    assert {k: text[k] for k in ("type", "contentEncoding")} == {"type": "string",
                                                                 "contentEncoding": "base64"}
    assert "to_base64" in text["description"]
    bodies = {"array": ids}
    for urlsafe in (False, True):
        for codec in ("raw", "pfor"):
            sent = tokenwire.to_base64(ids, codec=codec, urlsafe=urlsafe)
            assert ("-" in sent or "_" in sent) == urlsafe
            assert re.fullmatch(text["pattern"], sent), sent[:40]
            bodies[f"base64 {codec}{' urlsafe' if urlsafe else ''}"] = sent
    assert not re.fullmatch(text["pattern"], "AAA")          # a length no base64 text has
    for form, value in bodies.items():
        for model in (StrictRequest, CompletionRequest):
            body = json.dumps({"request_id": "r", "input_ids": value,
                               "model": "m", "prompt": "p", "prompt_token_ids": value})
            req = model.model_validate_json(body)
            got = getattr(req, "input_ids", None) or req.prompt_token_ids
            assert type(got) is TokenVector and got == ids, form
    # An Optional field names the same two forms and null.
    optional = CompletionRequest.model_json_schema()["properties"]["prompt_token_ids"]
    assert _forms(optional) == [array, text, {"type": "null"}]
    # A union keeps its other members beside them.
    prompt = _forms(CompletionRequest.model_json_schema()["properties"]["prompt"])
    assert {"type": "array", "items": {"type": "integer"}} in prompt
    assert array in prompt and text in prompt


def test_json_schema_of_a_dump_is_an_array_of_int32_integers() -> None:
    field = StrictRequest.model_json_schema(mode="serialization")["properties"]["input_ids"]
    assert _forms(field) == [INT32_ARRAY]
    req = StrictRequest.model_validate_json(
        json.dumps({"request_id": "r", "input_ids": tokenwire.to_base64(IDS)}))
    assert json.loads(req.model_dump_json())["input_ids"] == IDS
    prompt = CompletionRequest.model_json_schema(mode="serialization")["properties"]["prompt"]
    assert INT32_ARRAY in _forms(prompt)
    assert all(s.get("contentEncoding") is None for s in _forms(prompt))


def _serve(body: bytes) -> bytes:
    """A FastAPI-shaped handler: the body is validated with model_validate_json, the response
    model is written with model_dump_json."""
    req = CompletionRequest.model_validate_json(body)
    assert not isinstance(req.prompt, str) or req.prompt_token_ids is not None
    ids = req.prompt_token_ids if req.prompt_token_ids is not None else tokenwire.as_tokens(
        req.prompt)
    out = ids[-3:] + TokenVector([req.max_tokens or 0])
    return CompletionResponse(
        id="cmpl-1", choices=[CompletionChoice(index=0, token_ids=out, finish_reason="length")]
    ).model_dump_json().encode()


def test_fastapi_like_round_trip() -> None:
    client_body = json.dumps({"model": "m", "prompt": "ignored", "prompt_token_ids": BIG,
                              "max_tokens": 7}).encode()
    reply = json.loads(_serve(client_body))
    assert reply == {"id": "cmpl-1", "choices": [
        {"index": 0, "token_ids": BIG[-3:] + [7], "finish_reason": "length"}]}
    # A body written by a client that holds TokenVectors (json_default) reads back equal.
    body = json.dumps({"model": "m", "prompt": TokenVector(IDS)}, default=json_default)
    req = CompletionRequest.model_validate_json(body)
    assert req.prompt == IDS
    again = CompletionRequest.model_validate_json(req.model_dump_json())
    assert again == CompletionRequest(model="m", prompt=IDS)
    # and the response model reads its own output back
    resp = CompletionResponse.model_validate_json(_serve(body.encode()))
    assert type(resp.choices[0].token_ids) is TokenVector
    assert resp.choices[0].token_ids == IDS[-3:] + [16]


# --------------------------------------------------------------------------------------------
# array.array

INT_CODES = "bBhHiIlLqQ"


def _fitting(code: str) -> list[int]:
    """The ids of IDS a typecode can hold."""
    a = array.array(code)
    lo, hi = (0, 2 ** (8 * a.itemsize) - 1) if code.isupper() else (
        -(2 ** (8 * a.itemsize - 1)), 2 ** (8 * a.itemsize - 1) - 1)
    return [i for i in IDS if lo <= i <= hi]


@pytest.mark.parametrize("code", INT_CODES)
def test_equal_to_an_array_both_ways(code: str) -> None:
    ids = _fitting(code)
    tv, arr = TokenVector(ids), array.array(code, ids)
    assert tv == arr and arr == tv
    assert not (tv != arr) and not (arr != tv)
    other = array.array(code, ids[:-1] + [ids[-1] ^ 1])
    assert tv != other and other != tv and not (tv == other)
    assert tv != array.array(code, ids[:-1]) and array.array(code, ids + [0]) != tv
    assert TokenVector() == array.array(code)


@pytest.mark.parametrize("code, value, tv_id", [
    ("B", 255, -1), ("H", 65535, -1), ("I", 2**32 - 1, -1), ("L", 2**64 - 1, -1),
    ("Q", 2**64 - 1, -1), ("q", 2**32 + 5, 5), ("q", -(2**32) + 5, 5), ("Q", 2**31, -(2**31)),
    ("I", 2**31, -(2**31)), ("l", 2**63 - 1, -1),
])
def test_values_equal_only_as_integers(code: str, value: int, tv_id: int) -> None:
    """No truncation or sign reinterpretation: an item equals an id only as the same integer."""
    arr, tv = array.array(code, [value]), TokenVector([tv_id])
    assert not (tv == arr) and not (arr == tv) and tv != arr
    assert [value] != [tv_id]                      # what a list says


def test_float_and_text_arrays_are_not_token_ids() -> None:
    tv = TokenVector([1, 2])
    for arr in (array.array("d", [1.0, 2.0]), array.array("f", [1.0, 2.0]),
                array.array("u", "ab")):
        assert not (tv == arr) and not (arr == tv) and tv != arr
        with pytest.raises(TypeError):
            tv + arr
        with pytest.raises(TypeError):
            arr + tv


class LyingArray(array.array):  # type: ignore[type-arg]
    def __len__(self) -> int:
        return 1


def test_an_array_subclass_is_compared_by_its_buffer() -> None:
    arr = LyingArray("q", [1, 2, 3])
    assert TokenVector([1, 2, 3]) == arr and TokenVector([1]) != arr
    assert arr + TokenVector([4]) == array.array("q", [1, 2, 3, 4])


def test_large_arrays_compare_and_concatenate_without_the_gil() -> None:
    previous = tokenwire._core.gil_release_threshold(0)
    try:
        tv = TokenVector(BIG)
        assert tv == array.array("q", BIG) and array.array("l", BIG) == tv
        assert tv != array.array("q", BIG[:-1] + [0])
        assert tv + array.array("q", [1]) == array.array("q", BIG + [1])
    finally:
        tokenwire._core.gil_release_threshold(previous)


@pytest.mark.parametrize("code", INT_CODES)
def test_concatenation_gives_an_array_of_the_arrays_typecode(code: str) -> None:
    ids = _fitting(code)
    tv, arr = TokenVector(ids), array.array(code, ids[::-1])
    right, left = tv + arr, arr + tv
    assert type(right) is array.array and right.typecode == code
    assert type(left) is array.array and left.typecode == code
    assert right.tolist() == ids + ids[::-1] and left.tolist() == ids[::-1] + ids
    assert (TokenVector() + array.array(code)).tolist() == []
    assert (array.array(code) + tv).tolist() == ids
    assert arr.tolist() == ids[::-1]                # operands unchanged


@pytest.mark.parametrize("code, bad", [("b", 128), ("b", -129), ("B", -1), ("B", 256),
                                       ("h", 32768), ("H", -1), ("H", 65536), ("I", -1),
                                       ("L", -1), ("Q", -(2**31))])
def test_an_id_the_typecode_cannot_hold_is_refused(code: str, bad: int) -> None:
    tv = TokenVector([0, 1, bad])
    arr = array.array(code, [1])
    for fn in (lambda: tv + arr, lambda: arr + tv):
        with pytest.raises(TokenIdOverflowError,
                           match=rf"token id at index 2 is {bad}, outside the range of array "
                                 rf"typecode '{code}'"):
            fn()
    assert arr.tolist() == [1]


def _holds(code: str, ids: list[int]) -> bool:
    try:
        array.array(code, ids)
    except OverflowError:
        return False
    return True


@given(ids=token_lists, other=st.lists(st.integers(-(2**63), 2**64 - 1), max_size=4),
       code=st.sampled_from(INT_CODES), mode=st.sampled_from(["same", "prefix", "other"]))
def test_arrays_behave_as_lists_of_the_same_values(ids: list[int], other: list[int], code: str,
                                                   mode: str) -> None:
    """The oracle is the list: == is list equality of the values, + is list concatenation of
    the values (held in the array's typecode, or refused when it cannot hold them)."""
    items = {"same": ids, "prefix": ids[:-1], "other": other}[mode]
    if not _holds(code, items):
        return
    tv, arr = TokenVector(ids), array.array(code, items)
    assert (tv == arr) is (arr == tv) is (ids == items)
    assert (tv != arr) is (arr != tv) is (ids != items)
    if _holds(code, ids):
        assert (tv + arr).tolist() == ids + items and (arr + tv).tolist() == items + ids
    else:
        with pytest.raises(TokenIdOverflowError):
            tv + arr


def test_every_path_releases_the_arrays_buffers() -> None:
    """An array cannot be resized while its buffer is exported: after each comparison and
    concatenation (results, errors, NotImplemented) both the operand and the result can grow."""
    tv = TokenVector([1, 2, 300])
    for code in INT_CODES + "d":
        arr = array.array(code, [1, 2])
        outcomes: list[Any] = [tv == arr, arr != tv, tv == array.array(code, [1])]
        for fn in (lambda: tv + arr, lambda: arr + tv):
            try:
                out = fn()
            except (OverflowError, TypeError):          # 300 in 'b' / 'B'; 'd' is not ids
                continue
            out.append(1)
            outcomes.append(out)
        arr.append(3)
        assert arr.tolist()[-1] == 3 and len(outcomes) >= 3


class ScheduleReq:
    """The shape of a scheduler request that keeps its ids in array('q'): the prompt from the
    tokenizer, the outputs appended one by one, and the ids to run built as prompt + output."""

    def __init__(self, rid: str, origin_input_ids: Any) -> None:
        self.rid = rid
        self.origin_input_ids = origin_input_ids
        self.output_ids = array.array("q")
        self.fill_ids: Any = None

    def init_next_round_input(self) -> None:
        self.fill_ids = self.origin_input_ids + self.output_ids


def test_scheduler_shaped_request_holds_an_int64_array() -> None:
    req = ScheduleReq("r", tokenwire.decode(tokenwire.encode(BIG)))
    req.output_ids.append(9)
    req.init_next_round_input()
    assert type(req.fill_ids) is array.array and req.fill_ids.typecode == "q"
    req.fill_ids.extend([10, 11])
    assert np.frombuffer(req.fill_ids, np.int64).tolist() == BIG + [9, 10, 11]
    assert req.origin_input_ids == array.array("q", BIG)
    assert req.fill_ids[: len(BIG)] == req.origin_input_ids


# --------------------------------------------------------------------------------------------
# Leaks: the new C and glue paths, results and errors (the harness of tests/test_leaks.py)

LEAK_IDS = BIG[:2000]           # 8 KB a vector: one left behind per call is far over the limit
ARR_Q = array.array("q", LEAK_IDS)
TV_BIG = TokenVector(LEAK_IDS)
INT32_TEXT = tokenwire.to_base64(LEAK_IDS, format="int32")


def _leak_cases() -> dict[str, Any]:
    from support.leaks import raising

    return {
        "copy": TV_BIG.copy,
        "eq array": lambda: TV_BIG == ARR_Q,
        "ne array (length)": lambda: TV_BIG != ARR_Q[:-1],
        "eq float array": lambda: TV_BIG == array.array("d", [1.0]),
        "tv + array": lambda: TV_BIG + ARR_Q,
        "array + tv": lambda: ARR_Q + TV_BIG,
        "array overflow": raising(lambda: TV_BIG + array.array("b"), OverflowError),
        "float array +": raising(lambda: TV_BIG + array.array("d"), TypeError),
        "json_default": lambda: json.dumps(TV_BIG, default=json_default),
        "to_base64 int32": lambda: tokenwire.to_base64(TV_BIG, format="int32"),
        "from_base64 int32": lambda: tokenwire.from_base64(INT32_TEXT, format="int32"),
        "from_base64 int32 vocab": raising(
            lambda: tokenwire.from_base64(INT32_TEXT, format="int32", vocab_size=10), ValueError),
        "from_base64 int32 length": raising(
            lambda: tokenwire.from_base64("AQID", format="int32"), ValueError),
        "pydantic": lambda: CompletionRequest(model="m", prompt=ARR_Q).model_dump_json(),
        "pydantic error": raising(
            lambda: CompletionRequest(model="m", prompt="p", prompt_token_ids=LEAK_IDS + [2**31]),
            ValidationError),
    }


@pytest.mark.slow
@pytest.mark.parametrize("name", list(_leak_cases()))
def test_no_leak(name: str) -> None:
    from support.leaks import assert_no_growth

    assert_no_growth(_leak_cases()[name], rounds=300)
