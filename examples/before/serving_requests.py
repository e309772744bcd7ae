"""Two request classes as serving stacks write them: examples/before/ holds them unmodified,
examples/after/ after adopting tokenwire (tests/test_adoption.py checks the two files
differ by at most three lines per class; here one import and one decorator per class).

`ExecutorRequest` follows the plain-class executor request of TensorRT-LLM's LLM API
(`GenerationRequest`: token ids, query ids, sampling params, LoRA / prompt-adapter params,
`set_id`); `TokenizedGenerateReqInput` follows SGLang's tokenized request, a dataclass of ~30
fields built positionally, where `input_ids: List[int]` is followed by fields without defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Union


@dataclass
class SamplingParams:
    max_tokens: int = 32
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    stop: Optional[List[str]] = None
    end_id: Optional[int] = None
    pad_id: Optional[int] = None
    seed: Optional[int] = None
    return_log_probs: bool = False


@dataclass
class LoRARequest:
    lora_name: str
    lora_int_id: int
    lora_path: str = ""


@dataclass
class PromptAdapterRequest:
    prompt_adapter_name: str
    prompt_adapter_id: int
    local_path: str = ""
    prompt_adapter_num_virtual_tokens: int = 8


class ExecutorRequest:
    """A generation request as the proxy builds it and the executor's worker receives it."""

    def __init__(
        self,
        prompt_token_ids: Union[List[int], List[List[int]]],
        sampling_params: SamplingParams,
        query_token_ids: Optional[List[int]] = None,
        lora_request: Optional[LoRARequest] = None,
        prompt_adapter_request: Optional[PromptAdapterRequest] = None,
        streaming: bool = False,
        kv_cache_retention_config: Any = None,
        multimodal_params: Any = None,
        disaggregated_params: Any = None,
        arrival_time: Optional[float] = None,
        cache_salt_id: Optional[int] = None,
    ):
        self.prompt_token_ids = prompt_token_ids
        self.query_token_ids = query_token_ids
        self.sampling_params = sampling_params
        self.lora_request = lora_request
        self.prompt_adapter_request = prompt_adapter_request
        self.streaming = streaming
        self.kv_cache_retention_config = kv_cache_retention_config
        self.multimodal_params = multimodal_params
        self.disaggregated_params = disaggregated_params
        self.arrival_time = arrival_time
        self.cache_salt_id = cache_salt_id
        self.id: Optional[int] = None

    def set_id(self, id: int) -> "ExecutorRequest":
        assert self.id is None, f"Request ID is already set: {self.id}"
        self.id = id
        return self

    @property
    def prompt_len(self) -> int:
        return len(self.prompt_token_ids)

    def prompt_with_query(self) -> List[int]:
        return self.prompt_token_ids + (self.query_token_ids or [])

    def rotated_prompt(self) -> List[int]:
        ids = self.prompt_token_ids
        return ids[1:] + [ids[0]]


@dataclass
class TokenizedGenerateReqInput:
    """The tokenizer manager's output, sent to the scheduler (about 30 fields)."""

    rid: str
    input_text: str
    input_ids: List[int]
    mm_inputs: Optional[Dict[str, Any]]
    sampling_params: SamplingParams
    return_logprob: bool
    logprob_start_len: int
    top_logprobs_num: int
    token_ids_logprob: Optional[List[int]]
    stream: bool
    lora_id: Optional[str] = None
    input_embeds: Optional[List[List[float]]] = None
    session_params: Optional[Dict[str, Any]] = None
    custom_logit_processor: Optional[str] = None
    return_hidden_states: bool = False
    bootstrap_host: Optional[str] = None
    bootstrap_port: Optional[int] = None
    bootstrap_room: Optional[int] = None
    data_parallel_rank: Optional[int] = None
    priority: Optional[int] = None
    extra_key: Optional[str] = None
    no_logs: bool = False
    log_metrics: bool = True
    return_bytes: bool = False
    require_reasoning: bool = False
    routed_dp_rank: Optional[int] = None
    disagg_prefill_dp_rank: Optional[int] = None
    token_type_ids: Optional[List[int]] = None
    created_time: float = 0.0
    http_worker_ipc: Optional[str] = None
    lora_path: Optional[str] = None
    meta: Dict[str, Any] = field(default_factory=dict)

    @property
    def num_tokens(self) -> int:
        return len(self.input_ids)

    def truncated(self, limit: int) -> List[int]:
        return self.input_ids[:limit]
