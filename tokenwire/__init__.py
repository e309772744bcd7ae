"""tokenwire: move LLM token ids across process and machine boundaries at memcpy speed.
The layout of the modules: CONTRIBUTING.md, "Building and layout"."""

from __future__ import annotations

import importlib as _importlib
import os as _os
from typing import TYPE_CHECKING, Any

from tokenwire._core import (
    FrameInfo,
    TokenVector,
    as_tokens,
    decode,
    decode_many,
    encode,
    encode_many,
    frame_info,
)
from tokenwire._interop import json_default
from tokenwire._version import __version__ as __version__
from tokenwire.errors import TokenIdError, TokenwireError, WireFormatError
from tokenwire.fields import token_buffer, token_fields
from tokenwire.request import GenerationRequest
from tokenwire.state import list_on_wire
from tokenwire.text import from_base64, to_base64

if TYPE_CHECKING:
    from typing import Optional

    def TokenIds(*, codec: str = "raw", doc: Optional[str] = None, default: Any = ...,
                 vocab_size: Optional[int] = None) -> Any:
        """A token-id field (tokenwire.fields.TokenIds), typed as ``dataclasses.field()`` is:
        ``ids: List[int] = TokenIds()`` type-checks, and the annotation types the field."""
else:
    from tokenwire.fields import TokenIds


def get_include() -> str:
    """The directory to put on a C++ compiler's include path (`-I`) for `#include
    <tokenwire/wire.hpp>` (frames in C++17, no Python), `<tokenwire/nanobind.hpp>` and
    `<tokenwire/pybind11.hpp>` (token ids from Python into `std::vector<int32_t>`); docs/cpp.md."""
    return _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "include")


__all__ = [
    "FrameInfo",
    "GenerationRequest",
    "TokenIdError",
    "TokenIds",
    "TokenVector",
    "TokenwireError",
    "WireFormatError",
    "as_tokens",
    "decode",
    "decode_many",
    "encode",
    "encode_many",
    "frame_info",
    "from_base64",
    "get_include",
    "json_default",
    "list_on_wire",
    "to_base64",
    "token_buffer",
    "token_fields",
]

#: Submodules reachable as attributes of the package (``tokenwire.msgspec.Encoder`` after a bare
#: ``import tokenwire``), imported on first use: ``import tokenwire`` never imports msgspec,
#: pyzmq or pydantic.
_SUBMODULES = frozenset({"errors", "fields", "msgspec", "request", "shm", "state", "text",
                         "transport", "unpickle", "wires"})

if not TYPE_CHECKING:      # type checkers see the submodules through their imports
    def __getattr__(name: str) -> Any:
        if name in _SUBMODULES:
            return _importlib.import_module(f"tokenwire.{name}")
        raise AttributeError(f"module 'tokenwire' has no attribute {name!r}")
