"""tokenwire: move LLM token ids across process and machine boundaries at memcpy speed."""

import os as _os

from tokenwire._core import (
    CODECS,
    INT_CACHE_SIZE,
    FrameInfo,
    ImmutableBuffer,
    TokenVector,
    as_tokens,
    check_codec,
    decode,
    decode_many,
    encode,
    encode_many,
    frame_info,
    gil_release_threshold,
    tolist,
)
from tokenwire._interop import json_default
from tokenwire.errors import (
    AuthenticationError,
    ChecksumError,
    TokenIdError,
    TokenIdOverflowError,
    TokenIdTypeError,
    TokenwireError,
    WireFormatError,
)
from tokenwire.request import (
    PICKLE_GLOBALS,
    GenerationRequest,
    TokenIds,
    TokenWireMixin,
    find_class,
    list_on_wire,
    token_buffer,
    token_fields,
)
from tokenwire.text import from_base64, to_base64

__version__ = "0.1.0"


def get_include() -> str:
    """The directory to put on a C++ compiler's include path (`-I`) for `#include
    <tokenwire/wire.hpp>` (frames in C++17, no Python), `<tokenwire/nanobind.hpp>` and
    `<tokenwire/pybind11.hpp>` (token ids from Python into `std::vector<int32_t>`); docs/cpp.md."""
    return _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "include")


__all__ = [
    "AuthenticationError",
    "CODECS",
    "INT_CACHE_SIZE",
    "PICKLE_GLOBALS",
    "ChecksumError",
    "GenerationRequest",
    "TokenIds",
    "TokenWireMixin",
    "find_class",
    "list_on_wire",
    "token_buffer",
    "token_fields",
    "FrameInfo",
    "ImmutableBuffer",
    "TokenIdError",
    "TokenIdOverflowError",
    "TokenIdTypeError",
    "TokenVector",
    "TokenwireError",
    "WireFormatError",
    "as_tokens",
    "check_codec",
    "decode",
    "decode_many",
    "encode",
    "encode_many",
    "frame_info",
    "from_base64",
    "get_include",
    "json_default",
    "gil_release_threshold",
    "to_base64",
    "tolist",
]
