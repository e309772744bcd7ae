"""Signed out-of-band messages: what HMAC authentication adds to dumps_oob + loads_oob.

The baseline (*) is the unsigned round trip of a GenerationRequest (proxy side `dumps_oob`, worker
side `loads_oob`); the signed rows add the signature and its check. The target: signing
adds at most 5 µs per message at 40k ids with the buffers out of band.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tokenwire import GenerationRequest
from bench.data import token_stream
from bench.harness import Method, Result, Target, grouped_suite_main
from tokenwire.transport import dumps_oob, loads_oob

KEY = bytes(range(32))
GROUP = "request round trip (dumps_oob + loads_oob)"
TARGET_ADDED_US = 5.0


def methods_for(n: int) -> list[Method]:
    req = GenerationRequest(np.asarray(token_stream(n)), {"max_tokens": 64}, id=7)

    def roundtrip(key: bytes | None = None, sign_buffers: bool = False) -> object:
        frames = dumps_oob(req, key=key, sign_buffers=sign_buffers)
        return loads_oob(frames, key=key, sign_buffers=sign_buffers)

    return [
        Method("unsigned", {"time": lambda: roundtrip()}, GROUP, baseline=True),
        Method("signed (key=)", {"time": lambda: roundtrip(KEY)}, GROUP),
        Method("signed, ids covered (sign_buffers=True)",
               {"time": lambda: roundtrip(KEY, sign_buffers=True)}, GROUP),
    ]


def _added(results: Sequence[Result]) -> None:
    base = {r.isl: r.total_us() for r in results if r.baseline}
    print("\nAdded per message by signing (signed - unsigned, this run):")
    for r in results:
        if not r.baseline:
            print(f"  ISL {r.isl:>7,}  {r.name:<42}{r.total_us() - base[r.isl]:>8.1f} µs")
    signed = [r for r in results if r.isl == 40_000 and r.name == "signed (key=)"]
    if signed:
        added = signed[0].total_us() - base[40_000]
        print(f"  [{'ok' if added <= TARGET_ADDED_US else 'MISSED'}] signing adds "
              f"<= {TARGET_ADDED_US:g} µs per message at ISL 40,000: {added:.1f} µs")


TARGETS: list[Target] = []


def main(argv: list[str] | None = None) -> int:
    return grouped_suite_main(argv, suite="transport", doc=__doc__ or "",
                              default_isl="1000,40000,128000", methods_for=methods_for,
                              targets=TARGETS, after=_added)
