"""``GenerationRequest``: a reference drop-in request whose token ids travel as int32 buffers.
The layout of the modules: CONTRIBUTING.md, "Building and layout"."""

from __future__ import annotations

from typing import Any, Optional

from tokenwire._core import TokenVector
from tokenwire.state import _TokenwireMixin
from tokenwire.fields import TokenIds

# Named by pickles: tokenwire.fields pins the holder's pickled name to this module.
from tokenwire.fields import _TokenField as _TokenField  # noqa: F401

__all__: list[str] = []       # GenerationRequest is public as tokenwire.GenerationRequest


class GenerationRequest(_TokenwireMixin):
    """A drop-in generation request whose token ids cross process boundaries as int32 buffers.

    ``prompt_token_ids`` / ``query_token_ids`` read as ``list[int]`` (lazily, see TokenIds);
    worker code that hands the ids to a native constructor takes
    ``tokenwire.token_buffer(request, "prompt_token_ids")`` instead and never builds the list
    (``_prompt_token_ids_i32`` reads the held buffer, or None). ``prompt_len`` is the prompt's
    count without building the list.
    """

    prompt_token_ids = TokenIds(doc="The prompt's token ids, a list[int] built on first read.")
    query_token_ids = TokenIds(doc="Optional query token ids, a list[int] built on first read.")

    def __init__(
        self,
        prompt_token_ids: Any,
        sampling_params: Any = None,
        query_token_ids: Any = None,
        *,
        streaming: bool = False,
        arrival_time: Optional[float] = None,
        id: Optional[int] = None,
        lora_request: Any = None,
        disaggregated_params: Any = None,
    ) -> None:
        self.prompt_token_ids = prompt_token_ids
        self.query_token_ids = query_token_ids
        self.sampling_params = sampling_params
        self.streaming = streaming
        self.arrival_time = arrival_time
        self.id = id
        self.lora_request = lora_request
        self.disaggregated_params = disaggregated_params

    def set_id(self, id: int) -> "GenerationRequest":
        """Assign the request id (executors number requests on submit); returns self."""
        self.id = id
        return self

    @property
    def prompt_len(self) -> int:
        """Number of prompt tokens, without building the list."""
        return _PROMPT_FIELD.length(self)

    @property
    def _prompt_token_ids_i32(self) -> Optional[TokenVector]:
        """The prompt as the int32 TokenVector the native constructor memcpys, whenever the ids
        are held as a buffer (decoded from the wire, or set from an array) and any materialized
        list is unchanged; None otherwise (e.g. built from a Python list on the proxy side)."""
        return _PROMPT_FIELD.held_buffer(self)


#: The prompt field itself (a module global: the side channel reads it on the hot path).
_PROMPT_FIELD: TokenIds = GenerationRequest.__dict__["prompt_token_ids"]
