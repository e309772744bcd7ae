"""docs/adopting.md, run: the converted request classes end to end, in one process.

    python examples/adopting.py

Uses examples/after/serving_requests.py (a TensorRT-LLM-style plain class and an SGLang-style
dataclass, each converted with one decorator) and shows, with checks:

1. the proxy builds requests from lists and pickles them: the ids travel as int32 buffers;
2. the worker hands the buffer to the engine (`tokenwire.token_buffer`) and keeps its own list
   with `list(...)` instead of `copy.deepcopy` (ints are immutable);
3. a restricted unpickler allows the request classes (`tokenwire.unpickle.find_class`),
   and `tokenwire.unpickle.check_pickle` bounds what a received pickle may allocate;
4. rolling upgrades: `tokenwire.list_on_wire(True)` on an upgraded proxy sends plain lists that
   unmodified workers read; upgraded workers read both forms;
5. values that are not int32 ids: ints >= 2**31 and nested lists travel as the plain list,
   as the unmodified class sends them.
tests/test_adoption.py runs this script.
"""

from __future__ import annotations

import copy
import io
import pickle
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent / "after"))

import tokenwire  # noqa: E402
from serving_requests import (  # noqa: E402
    ExecutorRequest,
    LoRARequest,
    SamplingParams,
    TokenizedGenerateReqInput,
)

ISL = 40_000


def engine_request(input_token_ids) -> np.ndarray:
    """Stand-in for the engine's `Request(input_token_ids=...)`: memcpy of a 1-D int32 buffer."""
    return np.frombuffer(input_token_ids, dtype=np.int32).copy()


class RequestUnpickler(pickle.Unpickler):
    """The worker's allow-list: its own request classes, plus tokenwire's globals."""

    ALLOWED = {("serving_requests", n) for n in
               ("ExecutorRequest", "TokenizedGenerateReqInput", "SamplingParams", "LoRARequest")}

    def find_class(self, module, name):
        return tokenwire.unpickle.find_class(module, name, allow=self.ALLOWED)


def load_request(data: bytes):
    """The worker's load of received bytes: checked against their own size, then restricted."""
    tokenwire.unpickle.check_pickle(data)
    with tokenwire.unpickle.load_scope():
        return RequestUnpickler(io.BytesIO(data)).load()


def main() -> int:
    ids = np.random.default_rng(0).integers(0, 151_936, ISL, dtype=np.int32).tolist()

    # 1. proxy: built from the tokenizer's list, as before; pickled as before.
    plain = ExecutorRequest(ids, SamplingParams(max_tokens=16), lora_request=LoRARequest("a", 1))
    plain.set_id(1)
    dc = TokenizedGenerateReqInput("rid-2", "", ids, None, SamplingParams(), False, -1, 0, None, True)
    frames = [pickle.dumps(r, protocol=5) for r in (plain, dc)]
    print(f"1. pickled: {len(frames[0]):,} and {len(frames[1]):,} bytes for {ISL:,} ids each "
          f"(4 bytes per id, no per-token opcodes)")

    # 2. worker: restricted unpickling, buffer hand-off, its own list without deepcopy.
    for data, field in zip(frames, ("prompt_token_ids", "input_ids")):
        req = load_request(data)
        engine_tokens = engine_request(tokenwire.token_buffer(req, field))
        assert engine_tokens.tolist() == ids
        assert not getattr(type(req), field).is_materialized(req), "the hand-off built a list"
        own = list(getattr(req, field))          # was: copy.deepcopy(req.<field>)
        assert own == ids and own is not getattr(req, field)
        print(f"2. {type(req).__name__}: engine got {engine_tokens.size:,} ids by memcpy; "
              f"worker's own list by list(), not deepcopy")
    assert copy.copy(plain).prompt_token_ids is plain.prompt_token_ids   # shallow copy shares

    # 3. anything outside the allow-list is refused before it runs.
    try:
        load_request(b"cos\nsystem\n(S'echo pwned'\ntR.")
        raise AssertionError("os.system was allowed")
    except pickle.UnpicklingError as exc:
        print(f"3. restricted unpickler: {exc}")
    # ... and so is a pickle that declares more than it holds: these 9 bytes would make the
    # unpickler grow its memo to 2**27 slots (1 GiB of pointers, zeroed) before reading on.
    try:
        load_request(b"\x80\x05Nr\x00\x00\x00\x04.")
        raise AssertionError("the memo bomb was loaded")
    except pickle.UnpicklingError as exc:
        print(f"3. check_pickle: {exc}")

    # 4. rolling upgrade: proxy upgraded first -> list on the wire until every worker is new.
    previous = tokenwire.list_on_wire(True)
    try:
        compat = pickle.dumps(plain, protocol=5)
    finally:
        tokenwire.list_on_wire(previous)
    assert b"tokenwire" not in compat                      # an old worker needs nothing new
    assert pickle.loads(compat).prompt_token_ids == ids    # ... and a new one reads it too
    print(f"4. list_on_wire: {len(compat):,} bytes, a plain list any old worker reads")

    # 5. not int32 ids.
    big = ExecutorRequest([2**31, 5], SamplingParams())
    assert pickle.loads(pickle.dumps(big)).prompt_token_ids == [2**31, 5]
    batch = ExecutorRequest([[1, 2], [3]], SamplingParams())     # a batch: as the plain class
    assert pickle.loads(pickle.dumps(batch)).prompt_token_ids == [[1, 2], [3]]
    print("5. ids >= 2**31 and nested lists travel as the plain list")
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
