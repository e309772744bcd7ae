"""Token ids in the wires serving stacks already speak, read into a ``TokenVector`` and written
from one without building a ``list[int]``: a msgpack array of integers (what msgspec and Rust's
rmp-serde write for a list of ids), a JSON array of integers, and protobuf's packed
``repeated uint32`` / ``int32`` field. ``read(data, format)`` and ``write(tokens, format)``;
docs/wires.md says what each wire accepts and how a stack adopts it.

A parsed protobuf message needs neither: ``as_tokens(message.input_ids)`` reads the repeated
field of the upb runtime (which exports a buffer) in one copy, and the pure-Python runtime's
field as a sequence.
"""

from tokenwire._core import WIRE_FORMATS as FORMATS
from tokenwire._core import read_wire as read
from tokenwire._core import write_wire as write

__all__ = ["FORMATS", "read", "write"]
