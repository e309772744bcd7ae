"""msgspec.Struct request classes of the adoption tests (tests/test_adoption.py), in a module of
their own so that the tests that need msgspec import it after pytest.importorskip("msgspec"):
without the msgspec extra those tests skip and the rest of the file runs."""

from __future__ import annotations

from array import array
from typing import Any, Dict, Optional, Union

import msgspec

import tokenwire
from tokenwire import TokenVector


class EngineCoreRequest(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    """docs/adopting.md, section 1: vLLM's engine-core request with a TokenVector field."""

    request_id: str
    prompt_token_ids: Optional[tokenwire.TokenVector]
    arrival_time: float


class PlainStructReq(msgspec.Struct):
    """SGLang's current request shape, unmodified: the ids in an array('q')."""

    rid: str
    input_text: str
    input_ids: array
    sampling_params: Dict[str, Any]
    return_logprob: bool = False


class StructReq(msgspec.Struct):
    """The same, adopted."""

    rid: str
    input_text: str
    input_ids: Union[array, TokenVector]     # upgraded proxies fill it with as_tokens(...)
    sampling_params: Dict[str, Any]
    return_logprob: bool = False
