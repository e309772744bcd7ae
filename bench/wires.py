"""The wires the serving stacks already speak: each stack's own path against tokenwire.wires;
docs/benchmarks.md, "The stacks' wires", describes the rows.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any, Literal, Optional

import numpy as np

import tokenwire
import tokenwire.wires as wires
from bench.data import engine_core_request, engine_request, token_stream
from bench.harness import (Figures, Method, Result, Target, grouped_suite_main, ratio_target,
                           verdict)
from bench.harness import timed as m

try:
    import msgspec
    import orjson
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
except ImportError as e:          # pragma: no cover - the bench extra brings them
    sys.exit(f"python -m bench wires: {e.name} is missing; pip install '.[bench]'")

MEMCPY = "memcpy of the wire's bytes (floor)"
G_MP_DEC, G_MP_ENC = "msgpack decode", "msgpack encode"
G_JS_DEC, G_JS_ENC = "JSON decode", "JSON encode"
G_PB_DEC, G_PB_FIELD, G_PB_ENC = "protobuf decode", "protobuf parsed field", "protobuf encode"
G_ENGINE = "vLLM engine-core receive: message bytes -> Struct -> batch row"
ENGINE_TW = "ids as msgspec.Raw, then tokenwire.wires.read"
TW_READ = "tokenwire.wires.read"
TW_WRITE = "tokenwire.wires.write"
AS_TOKENS_FIELD = "as_tokens(msg.input_ids)"


def _request_class() -> Any:
    """A gRPC request as the serving stacks' protos write it: ids in `repeated uint32` field 2."""
    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="bench_wires.proto", package="bench",
                                             syntax="proto3")
    msg = fdp.message_type.add(name="GenerateRequest")
    msg.field.add(name="request_id", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    msg.field.add(name="input_ids", number=2, type=F.TYPE_UINT32, label=F.LABEL_REPEATED)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("bench.GenerateRequest"))


Request = _request_class()

#: vLLM's EngineCoreRequest (bench/data.py), the ids as the engine types them and as msgspec.Raw.
EngineListed = engine_core_request("EngineCoreRequest", Optional[list[int]])
EngineRaw = engine_core_request("EngineCoreRequest", msgspec.Raw)


def _engine_receive(lst: list[int]) -> tuple[Callable[[], object], Callable[[], object]]:
    """The engine's receive of one request, as it is and with tokenwire: decode the message
    into the Struct, then write its ids into a row of the persistent batch (InputBatch's
    `token_ids_cpu[row, :n] = prompt_token_ids`)."""
    data = msgspec.msgpack.encode(engine_request(EngineListed, lst))   # the frontend's bytes
    batch = np.zeros((2, len(lst)), dtype=np.int32)
    listed = msgspec.msgpack.Decoder(EngineListed).decode
    raw = msgspec.msgpack.Decoder(EngineRaw).decode
    read = wires.read

    def as_is() -> None:
        ids = listed(data).prompt_token_ids
        batch[0, :len(ids)] = ids

    def with_tokenwire() -> None:
        ids = read(raw(data).prompt_token_ids, "msgpack")
        batch[1, :len(ids)] = ids

    as_is()
    with_tokenwire()
    if not (batch == np.array(lst, dtype=np.int32)).all():
        raise SystemExit("engine-core receive: a path wrote other ids than those sent")
    return as_is, with_tokenwire


def _memcpy(data: bytes) -> Callable[[], object]:
    src = np.frombuffer(data, dtype=np.uint8)
    dst = np.empty_like(src)
    return lambda: np.copyto(dst, src)


def _wire_bytes(n: int) -> dict[str, bytes]:
    lst = token_stream(n).tolist()
    return {"msgpack": msgspec.msgpack.encode(lst), "json": orjson.dumps(lst),
            "protobuf": Request(input_ids=lst).SerializeToString()}


def methods_for(n: int) -> list[Method]:
    lst = token_stream(n).tolist()
    tv = tokenwire.as_tokens(lst)
    data = _wire_bytes(n)
    mp, js, pb = data["msgpack"], data["json"], data["protobuf"]
    msg = Request.FromString(pb)
    decode_list = msgspec.msgpack.Decoder(list[int]).decode
    mp_encode = msgspec.msgpack.Encoder().encode
    as_tokens = tokenwire.as_tokens
    read, write = wires.read, wires.write
    engine_as_is, engine_tw = _engine_receive(lst)

    return [
        m(G_MP_DEC, "msgspec: list[int], then as_tokens", lambda: as_tokens(decode_list(mp)),
          True, len(mp)),
        m(G_MP_DEC, TW_READ, lambda: read(mp, "msgpack"), nbytes=len(mp)),
        m(G_MP_DEC, MEMCPY, _memcpy(mp), nbytes=len(mp)),
        m(G_MP_ENC, "msgspec: encode(list)", lambda: mp_encode(lst), True),
        m(G_MP_ENC, TW_WRITE, lambda: write(tv, "msgpack")),
        m(G_JS_DEC, "orjson: loads, then as_tokens", lambda: as_tokens(orjson.loads(js)), True,
          len(js)),
        m(G_JS_DEC, "msgspec.json: list[int], then as_tokens",
          lambda: as_tokens(msgspec.json.decode(js))),
        m(G_JS_DEC, TW_READ, lambda: read(js, "json"), nbytes=len(js)),
        m(G_JS_DEC, MEMCPY, _memcpy(js), nbytes=len(js)),
        m(G_JS_ENC, "orjson: dumps(list)", lambda: orjson.dumps(lst), True),
        m(G_JS_ENC, TW_WRITE, lambda: write(tv, "json")),
        m(G_PB_DEC, "protobuf: FromString, then list(field)",
          lambda: list(Request.FromString(pb).input_ids), True, len(pb)),
        m(G_PB_DEC, "protobuf: FromString, then as_tokens(field)",
          lambda: as_tokens(Request.FromString(pb).input_ids)),
        m(G_PB_DEC, TW_READ + " (field=2)", lambda: read(pb, "protobuf", field=2),
          nbytes=len(pb)),
        m(G_PB_DEC, MEMCPY, _memcpy(pb), nbytes=len(pb)),
        m(G_PB_FIELD, "list(msg.input_ids)", lambda: list(msg.input_ids), True),
        m(G_PB_FIELD, AS_TOKENS_FIELD, lambda: as_tokens(msg.input_ids)),
        m(G_PB_ENC, "protobuf: Request(input_ids=list).SerializeToString()",
          lambda: Request(input_ids=lst).SerializeToString(), True),
        m(G_PB_ENC, TW_WRITE + " (field=2)", lambda: write(tv, "protobuf", field=2)),
        m(G_ENGINE, "ids as list[int], then the row write", engine_as_is, True),
        m(G_ENGINE, ENGINE_TW, engine_tw),
    ]


TARGETS: list[Target] = [
    ratio_target("msgpack array -> TokenVector >= 15x msgspec's list + as_tokens", G_MP_DEC,
                 TW_READ, 15),
    ratio_target("JSON array -> TokenVector >= 5x orjson's list + as_tokens", G_JS_DEC, TW_READ, 5),
    ratio_target("protobuf parsed field -> int32 >= 50x list(field)", G_PB_FIELD,
                 AS_TOKENS_FIELD, 50),
    ratio_target("msgpack writer >= 10x msgspec's encoder of the list", G_MP_ENC, TW_WRITE, 10),
    ratio_target("JSON writer >= 10x orjson's encoder of the list", G_JS_ENC, TW_WRITE, 10),
    ratio_target("protobuf writer >= 10x protobuf's encoder of the list", G_PB_ENC,
                 TW_WRITE + " (field=2)", 10),
    ratio_target("vLLM engine-core receive (bytes -> Struct -> batch row) >= 4x", G_ENGINE,
                 ENGINE_TW, 4),
]


#: Each wire's decode group, and its reader's row there.
READERS: dict[Literal["msgpack", "json", "protobuf"], tuple[str, str]] = {
    "msgpack": (G_MP_DEC, TW_READ), "json": (G_JS_DEC, TW_READ),
    "protobuf": (G_PB_DEC, TW_READ + " (field=2)")}


def _after(results: Sequence[Result]) -> None:
    print("\nBytes per id, each reader's bytes/ns, and the writers' bytes against the stack's:")
    for n in sorted({r.isl for r in results}):
        f, data, tv = Figures(results, n), _wire_bytes(n), tokenwire.as_tokens(token_stream(n))
        for fmt, (group, reader) in READERS.items():
            size = len(data[fmt])
            same = wires.write(tv, fmt, field=2 if fmt == "protobuf" else None) == data[fmt]
            print(f"  {verdict(same)} ISL {n:,} {fmt}: {size / n:.3f} bytes/id; reader "
                  f"{size / (f.row(reader, group=group).total_us() * 1e3):.2f} bytes/ns (memcpy "
                  f"{size / (f.row(MEMCPY, group=group).total_us() * 1e3):.1f}); writer "
                  f"byte-identical to the stack's: {same}")


def main(argv: list[str] | None = None) -> int:
    return grouped_suite_main(argv, suite="wires", doc=__doc__ or "", methods_for=methods_for,
                              targets=TARGETS, after=_after)


if __name__ == "__main__":
    sys.exit(main())
