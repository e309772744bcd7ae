"""tokenwire: move LLM token ids across process and machine boundaries at memcpy speed."""

from tokenwire._core import (
    INT_CACHE_SIZE,
    FrameInfo,
    ImmutableBuffer,
    TokenVector,
    as_tokens,
    decode,
    decode_many,
    encode,
    encode_many,
    frame_info,
    gil_release_threshold,
    tolist,
)
from tokenwire.errors import AuthenticationError, ChecksumError, TokenwireError, WireFormatError
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

__all__ = [
    "AuthenticationError",
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
    "gil_release_threshold",
    "to_base64",
    "tolist",
]
