"""TokenVector in JSON and in pydantic v2 models.
See docs/design.md, "tokenwire/_interop.py"."""

from __future__ import annotations

import array
import importlib
import sys
from typing import Any

from tokenwire._core import TokenVector, as_tokens
from tokenwire.errors import TokenwireError
from tokenwire.text import from_base64

__all__ = ["json_default"]

_INT32_MIN = -(2**31)
_INT32_MAX = 2**31 - 1


def json_default(obj: Any) -> Any:
    """`default=` for `json.dump(s)`: a TokenVector as a list of ints; for anything else the
    TypeError json itself raises. (A TokenVector is also a pydantic v2 field type: it validates
    lists, tuples, arrays and TokenVectors and dumps as a list of ints.)"""
    if type(obj) is TokenVector:
        return obj.tolist()
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


def _is_ndarray(obj: Any) -> bool:
    np = sys.modules.get("numpy")        # an ndarray exists only once numpy is imported
    return np is not None and isinstance(obj, np.ndarray)


def _validate(value: Any, accepted: tuple[type, ...], what: str) -> TokenVector:
    pydantic_core = importlib.import_module("pydantic_core")
    if type(value) is TokenVector:
        return value
    if not (isinstance(value, accepted) or _is_ndarray(value)):
        raise pydantic_core.PydanticCustomError(
            "token_ids", "token ids must be {what}, got {type}",
            {"what": what, "type": type(value).__name__})
    try:
        return as_tokens(value)
    except TokenwireError as e:
        # as_tokens's message names the index and the value or type ("token id at index 2 must
        # be an int, got bool"); TypeError and OverflowError would escape pydantic, so all of
        # tokenwire's errors become one ValidationError type.
        raise pydantic_core.PydanticCustomError(
            "token_ids", "{reason}", {"reason": str(e)}) from None


def _validate_python(value: Any) -> TokenVector:
    return _validate(value, (list, tuple, array.array),
                     "a list, tuple, numpy array, array.array or TokenVector")


def _validate_json(value: Any) -> TokenVector:
    if type(value) is str:
        return _from_base64(value)
    return _validate(value, (list,), "an array of ints or a base64 string")


def _from_base64(text: str) -> TokenVector:
    """The compact JSON form, `to_base64`'s text (either alphabet: "-" or "_" marks the URL-safe
    one, which `to_base64(..., urlsafe=True)` writes)."""
    pydantic_core = importlib.import_module("pydantic_core")
    try:
        return from_base64(text, urlsafe="-" in text or "_" in text)
    except TokenwireError as e:
        raise pydantic_core.PydanticCustomError(
            "token_ids", "token ids as base64: {reason}", {"reason": str(e)}) from None


def pydantic_core_schema() -> Any:
    """The pydantic-core schema of a `TokenVector` field (the rules in the module docstring)."""
    cs = importlib.import_module("pydantic_core.core_schema")
    return cs.json_or_python_schema(
        json_schema=cs.no_info_plain_validator_function(_validate_json),
        python_schema=cs.lax_or_strict_schema(
            lax_schema=cs.no_info_plain_validator_function(_validate_python),
            strict_schema=cs.is_instance_schema(TokenVector),
        ),
        serialization=cs.plain_serializer_function_ser_schema(
            _serialize, return_schema=cs.list_schema(cs.int_schema())),
    )


def _serialize(value: Any) -> list[int]:
    if type(value) is TokenVector:
        return value.tolist()
    # Not ours (a union's other member, or a value set without validation): pydantic then tries
    # the union's next member, or serializes the value by its own type.
    pydantic_core = importlib.import_module("pydantic_core")
    raise pydantic_core.PydanticSerializationUnexpectedValue(
        f"expected TokenVector, got {type(value).__name__}")


# Text `to_base64` writes, in either alphabet: groups of four characters, "=" padding the last.
_BASE64_PATTERN = "^(?:[A-Za-z0-9+/_-]{4})*(?:[A-Za-z0-9+/_-]{2}==|[A-Za-z0-9+/_-]{3}=)?$"


def pydantic_json_schema(mode: str = "validation") -> dict[str, Any]:
    """The JSON schema of a `TokenVector` field. What a model dumps (``mode="serialization"``)
    is an array of int32 integers; what it validates from JSON is that array or the base64
    text of a frame (`_validate_json`)."""
    ids = {"type": "array",
           "items": {"type": "integer", "minimum": _INT32_MIN, "maximum": _INT32_MAX}}
    if mode == "serialization":
        return ids
    text = {"type": "string", "contentEncoding": "base64", "pattern": _BASE64_PATTERN,
            "description": "a tokenwire frame as tokenwire.to_base64 writes it (the standard "
                           "or the URL-safe alphabet)"}
    return {"anyOf": [ids, text]}
