"""tokenwire: move LLM token ids across process and machine boundaries at memcpy speed."""

from tokenwire._core import INT_CACHE_SIZE, TokenVector, as_tokens, tolist
from tokenwire.errors import ChecksumError, TokenwireError, WireFormatError

__version__ = "0.1.0"

__all__ = [
    "INT_CACHE_SIZE",
    "ChecksumError",
    "TokenVector",
    "TokenwireError",
    "WireFormatError",
    "as_tokens",
    "tolist",
]

# The request layer (pure Python on top of the core).
from tokenwire.request import GenerationRequest, TokenIds, TokenWireMixin  # noqa: E402

__all__ += ["GenerationRequest", "TokenIds", "TokenWireMixin"]
