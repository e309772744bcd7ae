"""tokenwire: move LLM token ids across process and machine boundaries at memcpy speed.

The top level holds what most code needs: token ids (``TokenVector``, ``as_tokens``,
``tolist``), frames (``encode``, ``decode``, ``encode_many``, ``decode_many``, ``frame_info``),
text (``to_base64``, ``from_base64``), request objects (``GenerationRequest``, ``TokenIds``,
``TokenwireMixin``, ``token_fields``, ``token_buffer``, ``list_on_wire``, ``find_class``), and
the three errors most code catches. The rest lives in submodules:

* tokenwire.errors -- every exception (``ChecksumError``, ``AuthenticationError``,
  ``TokenIdOverflowError``, ``TokenIdTypeError`` besides the three here);
* tokenwire.wire -- ``CODECS``, ``check_codec``, ``FrameInfo``;
* tokenwire.memory -- ``ImmutableBuffer``, ``is_immutable_source``, ``gil_release_threshold``,
  ``INT_CACHE_SIZE``;
* tokenwire.unpickle -- ``PICKLE_GLOBALS`` (and ``find_class``);
* tokenwire.state -- ``STATE_VERSION`` (and ``list_on_wire``);
* tokenwire.transport, tokenwire.msgspec, tokenwire.text -- sockets, msgspec hooks, base64.
"""

from __future__ import annotations

import importlib as _importlib
import os as _os
import warnings as _warnings
from typing import TYPE_CHECKING, Any

from tokenwire._core import (
    TokenVector,
    as_tokens,
    decode,
    decode_many,
    encode,
    encode_many,
    frame_info,
    tolist,
)
from tokenwire._interop import json_default
from tokenwire._version import __version__ as __version__
from tokenwire.adopt import TokenwireMixin, token_fields
from tokenwire.errors import TokenIdError, TokenwireError, WireFormatError
from tokenwire.fields import TokenIds, token_buffer
from tokenwire.request import GenerationRequest
from tokenwire.state import list_on_wire
from tokenwire.text import from_base64, to_base64
from tokenwire.unpickle import find_class


def get_include() -> str:
    """The directory to put on a C++ compiler's include path (`-I`) for `#include
    <tokenwire/wire.hpp>` (frames in C++17, no Python), `<tokenwire/nanobind.hpp>` and
    `<tokenwire/pybind11.hpp>` (token ids from Python into `std::vector<int32_t>`); docs/cpp.md."""
    return _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "include")


__all__ = [
    "GenerationRequest",
    "TokenIdError",
    "TokenIds",
    "TokenVector",
    "TokenwireError",
    "TokenwireMixin",
    "WireFormatError",
    "as_tokens",
    "decode",
    "decode_many",
    "encode",
    "encode_many",
    "find_class",
    "frame_info",
    "from_base64",
    "get_include",
    "json_default",
    "list_on_wire",
    "to_base64",
    "token_buffer",
    "token_fields",
    "tolist",
]

#: Names the top level held before it was made small: old name -> (module, name) of its home.
#: They still resolve, with a DeprecationWarning naming the new spelling.
_MOVED = {
    "AuthenticationError": ("tokenwire.errors", "AuthenticationError"),
    "ChecksumError": ("tokenwire.errors", "ChecksumError"),
    "TokenIdOverflowError": ("tokenwire.errors", "TokenIdOverflowError"),
    "TokenIdTypeError": ("tokenwire.errors", "TokenIdTypeError"),
    "CODECS": ("tokenwire.wire", "CODECS"),
    "FrameInfo": ("tokenwire.wire", "FrameInfo"),
    "check_codec": ("tokenwire.wire", "check_codec"),
    "INT_CACHE_SIZE": ("tokenwire.memory", "INT_CACHE_SIZE"),
    "ImmutableBuffer": ("tokenwire.memory", "ImmutableBuffer"),
    "gil_release_threshold": ("tokenwire.memory", "gil_release_threshold"),
    "PICKLE_GLOBALS": ("tokenwire.unpickle", "PICKLE_GLOBALS"),
    "TokenWireMixin": ("tokenwire", "TokenwireMixin"),
}

#: Submodules reachable as attributes of the package (``tokenwire.msgspec.enc_hook`` after a bare
#: ``import tokenwire``), imported on first use: ``import tokenwire`` never imports msgspec,
#: pyzmq or pydantic.
_SUBMODULES = frozenset({"adopt", "errors", "fields", "memory", "msgspec", "request", "shm",
                         "state", "text", "transport", "unpickle", "wire"})

if not TYPE_CHECKING:      # type checkers see only the names above: the old ones are not API
    def __getattr__(name: str) -> Any:
        if name in _SUBMODULES:
            return _importlib.import_module(f"tokenwire.{name}")
        try:
            module, new = _MOVED[name]
        except KeyError:
            raise AttributeError(f"module 'tokenwire' has no attribute {name!r}") from None
        _warnings.warn(f"tokenwire.{name} is deprecated: use {module}.{new}",
                       DeprecationWarning, stacklevel=2)
        return getattr(_importlib.import_module(module), new)
