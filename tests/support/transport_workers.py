"""Code that runs on the far side of a transport in tests/test_transports.py.

It lives in its own importable module (not in the test module) so that spawned processes and
Ray workers can import it without importing pytest or hypothesis.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

from tokenwire import GenerationRequest, TokenVector, token_buffer

PROMPT = GenerationRequest.prompt_token_ids
QUERY = GenerationRequest.query_token_ids


class Received(NamedTuple):
    """What the receiving side saw, sent back for the test to check."""

    id: Any
    materialized: bool                        # was a list built by unpickling? (must be False)
    prompt: Optional[TokenVector]            # the prompt as a buffer (no list built)
    query: Optional[TokenVector]
    sampling_params: Any


def describe(request: GenerationRequest) -> Received:
    materialized = PROMPT.is_materialized(request) or QUERY.is_materialized(request)
    return Received(request.id, materialized, token_buffer(request, "prompt_token_ids"),
                    token_buffer(request, "query_token_ids"), request.sampling_params)


def queue_echo(inbox, outbox) -> None:
    """Process target: describe every request from `inbox` until None, and send it back too."""
    while True:
        request = inbox.get()
        if request is None:
            return
        outbox.put((describe(request), request))


class Worker:
    """A Ray actor: holds the requests it was submitted, like an executor would."""

    def __init__(self) -> None:
        self.submitted: list[GenerationRequest] = []

    def submit(self, request: GenerationRequest) -> Received:
        self.submitted.append(request)
        return describe(request)

    def count(self) -> int:
        return len(self.submitted)
