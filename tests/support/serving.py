"""The example serving request classes, before and after adopting tokenwire, and builders for
them.

examples/before/serving_requests.py is unmodified (a TensorRT-LLM-style plain executor request and
an SGLang-style ~30-field dataclass); examples/after/serving_requests.py is the same file after
adoption. `after` is imported as `serving_requests` (the name its pickles carry, as in a real
deployment where both sides name the module the same), `before` as `serving_requests_before`.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np

from support.requests import PROTOCOLS  # noqa: F401  (the serving tests import it from here)

ROOT = Path(__file__).resolve().parents[2]
BEFORE_PATH = ROOT / "examples" / "before" / "serving_requests.py"
AFTER_PATH = ROOT / "examples" / "after" / "serving_requests.py"

sys.path.insert(0, str(AFTER_PATH.parent))
import serving_requests as after  # noqa: E402, F401  (pickles name it "serving_requests")


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
