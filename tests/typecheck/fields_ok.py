"""The field lines the docs recommend, as users write them: `mypy --strict` and pyright accept
this file (tests/test_typing.py runs both)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

import tokenwire
from tokenwire import TokenIds


@dataclass
class TokenizedGenerateReqInput:
    rid: str
    input_ids: List[int] = TokenIds()
    output_ids: Optional[List[int]] = TokenIds(default=None)


class EngineRequest:
    prompt_token_ids: List[int] = TokenIds(codec="pfor", vocab_size=151_936)
    mm_ids: Optional[List[int]] = tokenwire.TokenIds(doc="multimodal placeholder ids")

    def __init__(self, prompt_token_ids: List[int]) -> None:
        self.prompt_token_ids = prompt_token_ids
        self.mm_ids = None


def first_id(req: TokenizedGenerateReqInput) -> int:
    ids: List[int] = req.input_ids                # read as the annotation says: a list of ints
    return ids[0]


def grow(req: EngineRequest) -> List[int]:
    req.prompt_token_ids.append(2)
    return req.prompt_token_ids + [3]


req = TokenizedGenerateReqInput("r", [1, 2])
assert first_id(req) == 1 and grow(EngineRequest([1])) == [1, 2, 3]
