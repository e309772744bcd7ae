"""What tokenwire is measured against: the request as serving frameworks wrote it before.

`PlainGenerationRequest` has GenerationRequest's attributes as plain attributes —
`prompt_token_ids` a `list[int]` — with default pickling and copying. Both carry the same
`SamplingParams`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass
class SamplingParams:
    """A representative sampling-parameters object."""

    max_tokens: int = 256
    temperature: float = 0.7
    top_p: float = 0.95
    top_k: int = 50
    seed: Optional[int] = None
    stop: list[str] = field(default_factory=lambda: ["</s>"])
    end_id: int = 2
    pad_id: int = 0
    n: int = 1
    return_log_probs: bool = False


class PlainGenerationRequest:
    """The baseline request: plain attributes, default pickling."""

    def __init__(self, prompt_token_ids: list[int], sampling_params: Any = None,
                 query_token_ids: Optional[list[int]] = None, *, streaming: bool = False,
                 arrival_time: Optional[float] = None, id: Optional[int] = None,
                 lora_request: Any = None, disaggregated_params: Any = None) -> None:
        self.prompt_token_ids = prompt_token_ids
        self.query_token_ids = query_token_ids
        self.sampling_params = sampling_params
        self.streaming = streaming
        self.arrival_time = arrival_time
        self.id = id
        self.lora_request = lora_request
        self.disaggregated_params = disaggregated_params
