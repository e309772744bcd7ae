"""The two actors of tests/test_ray_nodes.py, one per Ray node (imported by value into Ray's
workers, so they need not see the tests directory)."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from tokenwire import GenerationRequest, TokenVector, token_buffer
from support.wait import WAIT_S


class Arrival(NamedTuple):
    """What the receiving actor saw, sent back for the test to check."""

    node_id: str
    prompt: bytes                  # the prompt's ids as int32 bytes (a copy made for the check)
    held_as_vector: bool           # the ids arrived as a TokenVector (no list was built)
    writeable: bool                # np.asarray(ids).flags.writeable
    mapping: str                   # /proc/self/maps line holding np.asarray(ids)'s first id


def mapping_of(address: int) -> str:
    """The /proc/self/maps line of the mapping that holds `address` ("" when none does)."""
    with open("/proc/self/maps") as f:
        for line in f:
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            if lo <= address < hi:
                return line.strip()
    return ""


def node_id() -> str:
    import ray
    return str(ray.get_runtime_context().get_node_id())


class Receiver:
    """An engine-side actor: looks at the ids where they arrived, as an engine would take them."""

    def submit(self, request: GenerationRequest) -> Arrival:
        ids = token_buffer(request, "prompt_token_ids")
        view = np.asarray(ids) if ids is not None else np.empty(0, np.int32)
        return Arrival(node_id(), view.tobytes(), isinstance(ids, TokenVector),
                       bool(view.flags.writeable), mapping_of(view.ctypes.data))


class Sender:
    """A proxy-side actor: builds requests on its node and submits them to `receiver`."""

    def node(self) -> str:
        return node_id()

    def send(self, receiver: Any, ids: list[list[int]]) -> list[Arrival]:
        import ray
        refs = [receiver.submit.remote(GenerationRequest(x, {"max_tokens": 8}, id=i))
                for i, x in enumerate(ids)]
        return list(ray.get(refs, timeout=WAIT_S))
