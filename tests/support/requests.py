"""Builders and checks the request-layer tests share (tests/test_fields.py, test_state.py,
test_adopt.py, test_request.py): a request as a worker receives it, pickle round trips, and a
forged holder of the kind a crafted pickle can build."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np

from tokenwire import GenerationRequest
from tokenwire.fields import _TokenField

PROTOCOLS = range(pickle.HIGHEST_PROTOCOL + 1)


def big_ids(n: int = 128_000, seed: int = 0) -> list[int]:
    return np.random.default_rng(seed).integers(0, 262_144, size=n, dtype=np.int32).tolist()


def from_wire(ids: Any, protocol: int = 5, **kwargs: Any) -> GenerationRequest:
    """A request as a worker sees it: built from a list on the proxy, pickled, unpickled."""
    return pickle.loads(pickle.dumps(GenerationRequest(list(ids), **kwargs), protocol=protocol))


def roundtrip(obj: Any, protocol: int = 5) -> Any:
    return pickle.loads(pickle.dumps(obj, protocol=protocol))


def no_lists_in(obj: dict) -> bool:
    """True when no value of the (state) dict is a list."""
    return not any(isinstance(v, list) for v in obj.values())


def fresh() -> GenerationRequest:
    """A GenerationRequest as an unpickler makes one, before its state is set."""
    return GenerationRequest.__new__(GenerationRequest)


def forged_field() -> _TokenField:
    """A holder whose "vector" is a mutable int64 ndarray (as a crafted pickle can build)."""
    forged = _TokenField.__new__(_TokenField)
    forged.ids, forged.vector = None, np.arange(3)
    return forged
