"""atheris fuzz target for tokenwire.wires.read(data, "protobuf", field=2) (not part of pytest).

    python fuzz/fuzz_protobuf_ids.py --seconds 60
    fuzz/run.sh python 60 protobuf_ids                 # the clang fuzzer+ASan build

Differential against protobuf's own parser (the upb runtime) on a message whose field 2 is
`repeated int64` (so nothing is truncated to 32 bits before the comparison) and field 1 `bytes`:
the same ids, or both refuse; tokenwire may refuse what protobuf reads only when field 2 holds an
id outside int32 or an element of another wire type, or the message holds a group
(docs/wires.md).
"""

from __future__ import annotations

import sys
from typing import Any

import atheris
from harness import fuzz_main
with atheris.instrument_imports():
    from wires_oracle import INT32, check, fuzzed_input
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory


def _message_class() -> Any:
    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="fuzz_ids.proto", package="fuzz",
                                             syntax="proto3")
    msg = fdp.message_type.add(name="Request")
    msg.field.add(name="request_id", number=1, type=F.TYPE_BYTES, label=F.LABEL_OPTIONAL)
    msg.field.add(name="input_ids", number=2, type=F.TYPE_INT64, label=F.LABEL_REPEATED)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("fuzz.Request"))


Request = _message_class()
_stats = {"inputs": 0, "accepted": 0}


def _reference(data: bytes) -> list[int]:
    return list(Request.FromString(data).input_ids)


def _stricter(ids: list[int], message: str) -> bool:
    return (any(not INT32[0] <= v <= INT32[1] for v in ids) or "not varints" in message
            or "a group: not supported" in message)


@atheris.instrument_func
def test_one_input(raw: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(raw)
    check("protobuf_ids", _stats, "protobuf", fuzzed_input(fdp, "protobuf", 2), _reference,
          _stricter, field=2)


def main() -> int:
    return fuzz_main(__doc__, test_one_input, "protobuf_ids", seconds=60, max_len=4096,
                     fixed_seed=True)


if __name__ == "__main__":
    sys.exit(main())
