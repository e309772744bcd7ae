"""What the benchmarks send: ids (seeded streams or a file's; docs/benchmarks.md,
"Data"); the request tokenwire is measured against, `PlainGenerationRequest`:
GenerationRequest's attributes as plain attributes (`prompt_token_ids` a `list[int]`), default
pickling and copying; both carry the same `SamplingParams`; and vLLM's engine-core request
(`engine_core_request`), the one model of it the msgspec and wires suites use."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

#: Vocabulary sizes of the streams the benchmarks use by default: Qwen2/Qwen3 and Llama 2.
VOCABS = {"qwen": 151_936, "llama2": 32_000}


def token_stream(n: int, vocab: int = VOCABS["qwen"], seed: int = 0) -> np.ndarray:
    """`n` int32 ids: Zipf-distributed ranks (a = 1.2, like word frequencies) mapped through a
    fixed shuffle of the vocabulary, since a tokenizer's frequent tokens are not all small ids."""
    rng = np.random.default_rng(seed)
    ranks = np.empty(0, dtype=np.int64)
    while ranks.size < n:   # draw, drop ranks beyond the vocabulary, repeat until n remain
        draw = rng.zipf(1.2, size=max(n, 1024)) - 1
        ranks = np.concatenate([ranks, draw[draw < vocab]])
    perm = np.random.default_rng(12345 + vocab).permutation(vocab)
    return perm[ranks[:n]].astype(np.int32)


_FILES: dict[str, np.ndarray] = {}


def load_ids(n: int, path: str | os.PathLike[str] | None = None) -> np.ndarray:
    """`n` int32 ids: `token_stream(n)`, or the ids of `path` (raw little-endian int32, as
    `--ids` takes them: a real prompt tokenized beforehand), the first `n`, repeated from the
    start when the file holds fewer. The file is read once per process."""
    if path is None:
        return token_stream(n)
    key = os.fspath(path)
    if key not in _FILES:
        ids = np.fromfile(key, dtype="<i4").astype(np.int32)
        if ids.size == 0:
            raise SystemExit(f"{key} holds no ids")
        _FILES[key] = ids
    return np.resize(_FILES[key], n)


@dataclass
class SamplingParams:
    """A representative sampling-parameters object."""

    max_tokens: int = 256
    temperature: float = 0.7
    top_p: float = 0.95
    top_k: int = 50
    seed: Optional[int] = None
    stop: list[str] = field(default_factory=lambda: ["</s>"])
    end_id: int = 2
    pad_id: int = 0
    n: int = 1
    return_log_probs: bool = False


class PlainGenerationRequest:
    """The baseline request: plain attributes, default pickling."""

    def __init__(self, prompt_token_ids: list[int], sampling_params: Any = None,
                 query_token_ids: Optional[list[int]] = None, *, streaming: bool = False,
                 arrival_time: Optional[float] = None, id: Optional[int] = None,
                 lora_request: Any = None, disaggregated_params: Any = None) -> None:
        self.prompt_token_ids = prompt_token_ids
        self.query_token_ids = query_token_ids
        self.sampling_params = sampling_params
        self.streaming = streaming
        self.arrival_time = arrival_time
        self.id = id
        self.lora_request = lora_request
        self.disaggregated_params = disaggregated_params


# vLLM's EngineCoreRequest. msgspec is an extra: it is imported where the Structs are made, so
# that the suites without it still import this module.

@functools.cache
def engine_sampling_params() -> Any:
    """The request's sampling parameters as a nested array_like Struct: the fields a chat
    completion sets, and their neighbours."""
    import msgspec
    return msgspec.defstruct("EngineSamplingParams", [
        ("n", int, 1), ("temperature", float, 1.0), ("top_p", float, 1.0), ("top_k", int, 0),
        ("max_tokens", Optional[int], 16), ("stop", list[str], []), ("seed", Optional[int], None),
    ], array_like=True, omit_defaults=True, gc=False)


def engine_core_request(name: str, ids: Any) -> Any:
    """vLLM's `EngineCoreRequest` with ``prompt_token_ids: ids``: today's 20 fields in its order
    (its Rust frontend writes them as a positional array: "field order is the wire contract"),
    with its Struct options; `prompt_embeds`, a tensor there, is an ndarray here."""
    import msgspec
    fields: list[Any] = [
        ("request_id", str), ("prompt_token_ids", ids), ("mm_features", Optional[list[Any]]),
        ("sampling_params", Optional[engine_sampling_params()]),
        ("pooling_params", Optional[dict[str, Any]]), ("eos_token_id", Optional[int]),
        ("arrival_time", float), ("lora_request", Optional[dict[str, Any]]),
        ("cache_salt", Optional[str]), ("data_parallel_rank", Optional[int]),
        ("prompt_embeds", Optional[np.ndarray], None), ("client_index", int, 0),
        ("current_wave", int, 0), ("priority", int, 0),
        ("trace_headers", Optional[dict[str, str]], None), ("resumable", bool, False),
        ("external_req_id", Optional[str], None), ("reasoning_ended", Optional[bool], None),
        ("num_computed_tokens", int, 0), ("kv_transfer_params", Optional[dict[str, Any]], None),
    ]
    return msgspec.defstruct(name, fields, array_like=True, omit_defaults=True, gc=False)


def engine_request(cls: Any, prompt: Any, **fields: Any) -> Any:
    """A request of `cls` (an `engine_core_request`) with `prompt` and the values a chat
    completion sends; `fields` sets others (``prompt_embeds``, ``priority``, ...)."""
    params = engine_sampling_params()(temperature=0.7, max_tokens=256, seed=1)
    return cls("cmpl-0123456789abcdef-0", prompt, None, params, None, 151_645, 1_700_000_000.25,
               None, None, None, **fields)
