"""Token ids in the wires serving stacks already speak (a msgpack or JSON array of integers,
protobuf's packed ``repeated uint32``/``int32``), read into a ``TokenVector`` and written from
one without a ``list[int]``. A parsed protobuf field needs neither: ``as_tokens(field)`` reads
it. What each wire accepts, and how a stack adopts it: docs/wires.md."""

from tokenwire._core import read_wire as read
from tokenwire._core import write_wire as write

__all__ = ["read", "write"]
