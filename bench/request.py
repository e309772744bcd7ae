"""GenerationRequest against the same request holding a plain list field, a ~30-field
dataclass adopted with `token_fields` against the unmodified one, the proxy-side serialize of a
request built from a list, and SGLang's pickled msgspec.Struct holding array('q') ids against the
adopted TokenVector field, and what HMAC signing adds to an out-of-band round trip; each with its
targets (docs/benchmarks.md, "The request layer" and "Signed messages"; docs/adopting.md, section 6).
"""

from __future__ import annotations

import copy
import os
import pickle
from array import array
from collections.abc import Callable, Sequence
from typing import Any, Dict

import numpy as np

from tokenwire import GenerationRequest, TokenVector, as_tokens, token_buffer
from bench import ROOT
from bench.data import PlainGenerationRequest, SamplingParams, token_stream
from bench.harness import (Method, Result, Target, group_ratios, grouped_suite_main, load_module,
                           ratio_target, timed, verdict)
from tokenwire.transport import dumps_oob, loads_oob

PROTOCOL = 5
PROMPT = GenerationRequest.prompt_token_ids
KW: dict[str, Any] = dict(id=1, arrival_time=1.0)       # the requests' other attributes


def rt(obj: Any, protocol: int = PROTOCOL) -> Any:
    return pickle.loads(pickle.dumps(obj, protocol=protocol))


G_PICKLE_HELD = "pickle.dumps+loads, ids held as a buffer"
G_PICKLE_LIST = "pickle.dumps+loads, built from a list"
G_DEEPCOPY = "copy.deepcopy"
G_FIRST_READ = "first read of prompt_token_ids"
G_ACCESS = "hot path: attribute access (incl. ~40 ns lambda call)"


def _example(name: str, *path: str) -> Any:
    """A module of examples/, registered as bench.request.`name` (so that its classes pickle):
    the benchmark times the classes the drop-in tests check, not copies of them."""
    return load_module(f"{__name__}.{name}", os.path.join(ROOT, "examples", *path))


before = _example("before", "before", "serving_requests.py")
after = _example("after", "after", "serving_requests.py")
worker_submit = _example("worker_submit", "worker_submit.py")

#: The ~30-field SGLang-style dataclass of examples/: unmodified (the baseline) and adopted with
#: `token_fields` (docs/adopting.md: one import, one decorator).
TokenizedReq = before.TokenizedGenerateReqInput
TwTokenizedReq = after.TokenizedGenerateReqInput


def _tokenized(cls: Any, ids: list[int], sp: Any) -> Any:
    return cls("rid-0", "", ids, None, sp, False, -1, 0, None, False)


def submit(req: Any, buffer: bool = False, deepcopy: bool = True) -> Any:
    """The worker's hand-off to the engine's `Request(input_token_ids=...)` (the stand-in of
    examples/worker_submit.py: a 1-D int32 buffer is one memcpy, a list[int] is cast element by
    element, as a binding's default does). Unchanged, the worker deep-copies the ids and gives
    the engine that list; `buffer` gives it the int32 buffer instead; `deepcopy=False` takes a
    shallow `list(...)`, an independent list too since ints are immutable."""
    ids = copy.deepcopy(req.input_ids) if deepcopy else list(req.input_ids)
    return worker_submit.native_request_ctor(token_buffer(req, "input_ids") if buffer else ids), ids


G_DC_P4 = "dataclass (32 fields): pickle.dumps+loads, protocol 4"
G_DC_P5 = "dataclass (32 fields): pickle.dumps+loads, protocol 5"
G_SUBMIT = "dataclass: whole submit = loads + worker's hand-off (protocol 5)"
G_PROXY = "proxy serialize: request built from a list, pickle.dumps protocol 5"


def dataclass_methods(lst: list[int], sp: SamplingParams) -> list[Method]:
    data_plain = pickle.dumps(_tokenized(TokenizedReq, lst, sp), protocol=5)
    data_tw = pickle.dumps(_tokenized(TwTokenizedReq, lst, sp), protocol=5)
    assert submit(pickle.loads(data_tw), buffer=True, deepcopy=False)[1] == lst

    def build_and_rt(cls: Any, protocol: int) -> Callable[[], Any]:
        return lambda: rt(_tokenized(cls, lst, sp), protocol)

    return [
        timed(G_DC_P4, "unmodified dataclass", build_and_rt(TokenizedReq, 4), True),
        timed(G_DC_P4, "token_fields dataclass", build_and_rt(TwTokenizedReq, 4)),
        timed(G_DC_P5, "unmodified dataclass", build_and_rt(TokenizedReq, 5), True),
        timed(G_DC_P5, "token_fields dataclass", build_and_rt(TwTokenizedReq, 5)),
        timed(G_SUBMIT, "unmodified: loads, deepcopy(ids), engine(list)",
              lambda: submit(pickle.loads(data_plain)), True),
        timed(G_SUBMIT, "pickle only (worker unchanged)", lambda: submit(pickle.loads(data_tw))),
        timed(G_SUBMIT, "+ buffer hand-off", lambda: submit(pickle.loads(data_tw), buffer=True)),
        timed(G_SUBMIT, "+ no deepcopy (list(ids))",
              lambda: submit(pickle.loads(data_tw), buffer=True, deepcopy=False)),
    ]


def proxy_methods(lst: list[int], sp: SamplingParams) -> list[Method]:
    built = GenerationRequest(as_tokens(lst), sp, **KW)

    def reference() -> Any:
        as_tokens(lst)
        return pickle.dumps(built, protocol=PROTOCOL)

    return [
        timed(G_PROXY, "as_tokens(list) + dumps(request already built)", reference, True),
        timed(G_PROXY, "dumps(GenerationRequest(list))",
              lambda: pickle.dumps(GenerationRequest(lst, sp, **KW), protocol=PROTOCOL)),
        timed(G_PROXY, "dumps_oob(GenerationRequest(list))",
              lambda: dumps_oob(GenerationRequest(lst, sp, **KW))),
    ]


G_STRUCT = "SGLang Struct from the tokenizer's list: build + dumps(protocol 5, buffer_callback) + loads + first read"
G_STRUCT_ARR = "SGLang Struct from an array('q') the proxy holds: build + dumps(5, buffer_callback) + loads + first read"


def _sglang_struct(name: str, ids: Any) -> Any:
    """SGLang's TokenizedGenerateReqInput as a msgspec.Struct (pickled by zmq's send_pyobj), its
    ids typed `ids`: `array` unmodified, `TokenVector` adopted (docs/adopting.md). Named in this
    module, where the pickles look for it."""
    import msgspec
    globals()[name] = cls = msgspec.defstruct(name, [
        ("rid", str), ("input_text", str), ("input_ids", ids), ("sampling_params", Dict[str, Any]),
        ("return_logprob", bool, False), ("logprob_start_len", int, -1),
        ("top_logprobs_num", int, 0), ("stream", bool, False), ("lora_path", Any, None),
        ("session_params", Any, None)], module=__name__)
    return cls


def struct_methods(lst: list[int]) -> list[Method]:
    """The proxy builds the Struct from the tokenizer's list (SGLang: ``array('q', ids)``;
    adopted: ``as_tokens(ids)``), pickles it at protocol 5 with a buffer_callback (the ids of a
    TokenVector travel out of band; an array's are in the pickle), the worker loads it and
    reads the ids' first and last items."""
    try:
        Req, TwReq = _sglang_struct("StructReq", array), _sglang_struct("TwStructReq", TokenVector)
    except ImportError:                  # msgspec is an extra
        return []
    sp = {"temperature": 0.7, "max_new_tokens": 128}

    def send(req: Any) -> Any:
        buffers: list[pickle.PickleBuffer] = []
        data = pickle.dumps(req, protocol=5, buffer_callback=buffers.append)
        ids = pickle.loads(data, buffers=buffers).input_ids
        return ids[0], ids[-1], len(ids)

    arr, sglang = array("q", lst), "array('q') (SGLang >= 0.5.13)"
    assert send(TwReq("r", "", as_tokens(lst), sp)) == send(Req("r", "", arr, sp))
    return [
        timed(G_STRUCT_ARR, sglang, lambda: send(Req("r", "", arr, sp)), True),
        timed(G_STRUCT_ARR, "TokenVector field (as_tokens(arr))",
              lambda: send(TwReq("r", "", as_tokens(arr), sp))),
        timed(G_STRUCT, sglang, lambda: send(Req("r", "", array("q", lst), sp)), True),
        timed(G_STRUCT, "TokenVector field", lambda: send(TwReq("r", "", as_tokens(lst), sp))),
    ]


G_SIGNED = "request round trip (dumps_oob + loads_oob), signed with key="
KEY = bytes(range(32))
TARGET_SIGNING_US = 5.0


def signed_methods(ids: np.ndarray) -> list[Method]:
    req = GenerationRequest(ids, {"max_tokens": 64}, id=7)

    def roundtrip(key: bytes | None = None, sign_buffers: bool = False) -> object:
        return loads_oob(dumps_oob(req, key=key, sign_buffers=sign_buffers), key=key,
                         sign_buffers=sign_buffers)

    return [timed(G_SIGNED, "unsigned", roundtrip, True),
            timed(G_SIGNED, "signed (key=)", lambda: roundtrip(KEY)),
            timed(G_SIGNED, "signed, ids covered (sign_buffers=True)",
                  lambda: roundtrip(KEY, sign_buffers=True))]


def methods_for(n: int) -> list[Method]:
    ids = token_stream(n)
    lst, sp = ids.tolist(), SamplingParams()
    return (request_methods(ids, lst, sp) + dataclass_methods(lst, sp) + proxy_methods(lst, sp)
            + struct_methods(lst) + signed_methods(ids))


def request_methods(ids: np.ndarray, lst: list[int], sp: SamplingParams) -> list[Method]:
    plain = PlainGenerationRequest(lst, sp, **KW)
    decoded = rt(GenerationRequest(lst, sp, **KW))          # a worker's request: unread
    from_array = GenerationRequest(ids, sp, **KW)           # set from an ndarray: unread
    listed = GenerationRequest(lst, sp, **KW)               # proxy side, list already read once
    rt(listed)
    assert not PROMPT.is_materialized(decoded) and not PROMPT.is_materialized(from_array)
    tv = as_tokens(ids)
    fresh, other = GenerationRequest(tv, sp, **KW), GenerationRequest(tv, sp, **KW)

    # Both rows pay the same reset (forgetting the list), so the ratio compares the descriptor's
    # first read with a bare tolist().
    def first_read() -> Any:
        PROMPT.__set__(fresh, tv)
        return fresh.prompt_token_ids

    def reset_and_tolist() -> Any:
        PROMPT.__set__(other, tv)
        return tv.tolist()

    return [
        timed(G_PICKLE_HELD, "plain list request", lambda: rt(plain), True),
        timed(G_PICKLE_HELD, "decoded from the wire, unread", lambda: rt(decoded)),
        timed(G_PICKLE_HELD, "built from an ndarray", lambda: rt(from_array)),
        timed(G_PICKLE_HELD, "decoded, out-of-band (dumps_oob)",
              lambda: loads_oob(dumps_oob(decoded, oob_threshold=0))),
        timed(G_PICKLE_LIST, "plain list request, built",
              lambda: rt(PlainGenerationRequest(lst, sp, **KW)), True),
        timed(G_PICKLE_LIST, "GenerationRequest(list), built",
              lambda: rt(GenerationRequest(lst, sp, **KW))),
        timed(G_PICKLE_LIST, "same request again (list re-read)", lambda: rt(listed)),
        timed(G_DEEPCOPY, "plain list request", lambda: copy.deepcopy(plain), True),
        timed(G_DEEPCOPY, "decoded from the wire, unread", lambda: copy.deepcopy(decoded)),
        timed(G_DEEPCOPY, "list held (materialized)", lambda: copy.deepcopy(listed)),
        timed(G_FIRST_READ, "reset + TokenVector.tolist()", reset_and_tolist, True),
        timed(G_FIRST_READ, "reset + req.prompt_token_ids (first read)", first_read),
        timed(G_ACCESS, "plain.prompt_token_ids", lambda: plain.prompt_token_ids, True),
        timed(G_ACCESS, "req.prompt_token_ids, cached list", lambda: listed.prompt_token_ids),
        timed(G_ACCESS, "req._prompt_token_ids_i32, unread", lambda: decoded._prompt_token_ids_i32),
        timed(G_ACCESS, "req.prompt_len, unread", lambda: decoded.prompt_len),
        timed(G_ACCESS, "hasattr(plain, missing)", lambda: hasattr(plain, "missing")),
        timed(G_ACCESS, "hasattr(req, missing)", lambda: hasattr(decoded, "missing")),
    ]


def _faster(what: str, group: str, method: str, times: int) -> Target:
    """The target "`what`: >= `times`x faster": `method`'s ratio to its group's baseline."""
    return ratio_target(f"{what}: >= {times}x faster", group, method, times)


#: The targets, at ISL 40,000: each a ratio = baseline time / row time, but the last.
TARGETS: list[Target] = [
    _faster("pickle.dumps+loads, decoded & unread", G_PICKLE_HELD,
            "decoded from the wire, unread", 50),
    _faster("pickle.dumps+loads, built from an ndarray", G_PICKLE_HELD,
            "built from an ndarray", 50),
    _faster("pickle.dumps+loads, built from a list", G_PICKLE_LIST,
            "GenerationRequest(list), built", 15),
    _faster("copy.deepcopy, ids held as a buffer", G_DEEPCOPY,
            "decoded from the wire, unread", 100),
    # "No more than TokenVector.tolist()": the descriptor adds one dict lookup to a ~50 µs
    # build, so 2% is for run-to-run noise only.
    ratio_target("first read of prompt_token_ids <= TokenVector.tolist() (within 2% noise)",
     G_FIRST_READ, "reset + req.prompt_token_ids (first read)", lambda r: 1 / r <= 1.02),
    # the adopted dataclass
    _faster("dataclass pickle.dumps+loads, protocol 4", G_DC_P4, "token_fields dataclass", 15),
    _faster("dataclass pickle.dumps+loads, protocol 5", G_DC_P5, "token_fields dataclass", 15),
    _faster("whole submit with the documented worker changes", G_SUBMIT,
            "+ no deepcopy (list(ids))", 20),
    # SGLang's pickled Struct
    _faster("SGLang Struct, array('q') -> TokenVector field", G_STRUCT, "TokenVector field", 3),
    _faster("SGLang Struct built from an array('q')", G_STRUCT_ARR,
            "TokenVector field (as_tokens(arr))", 3),
    # the proxy's serialize
    ratio_target("proxy serialize <= 1.5x (as_tokens(list) + dumps of the built request)", G_PROXY,
     "dumps(GenerationRequest(list))", lambda r: 1 / r <= 1.5),
    # signed messages: the signed bytes are the pickle alone once the ids travel out of band
    Target(f"signing adds <= {TARGET_SIGNING_US:g} µs per message",
           lambda f: f.row("signed (key=)", group=G_SIGNED).total_us()
           - f.baseline(G_SIGNED).total_us(),
           lambda added: added <= TARGET_SIGNING_US, lambda f, added: f"{added:.1f} µs"),
]


def _deepcopy_note(results: Sequence[Result]) -> None:
    # Not a target, shown because it is the slow case: deepcopy of a request whose list exists
    # re-reads the list (never stale), one as_tokens pass over it.
    key = (G_DEEPCOPY, "list held (materialized)", 40_000)
    ratios = group_ratios(results)
    if key in ratios:
        print(f"  {verdict(None)} copy.deepcopy, list materialized (re-read in C): {ratios[key]:.1f}x faster")


def main(argv: list[str] | None = None) -> int:
    return grouped_suite_main(argv, suite="request", doc=__doc__ or "", default_isl="40000",
                              methods_for=methods_for, targets=TARGETS,
                              note=f"; pickle protocol {PROTOCOL}", after=_deepcopy_note)
