"""Run by tests/test_mpi.py under `mpiexec -n N`: rank 0 broadcasts a batch of requests the way
a TP/PP executor sends each iteration's new requests, with mpi4py's `comm.bcast` and with
`mpi4py.util.pkl5`; every rank checks what it received against the batch it expects, and rank 0
prints a line per rank, `rank R/N: B requests ok` or what differed.

  python tests/support/mpi_ranks.py   (under mpiexec; exit 1 on a rank that got something wrong)
"""

from __future__ import annotations

import sys

import numpy as np
from mpi4py import MPI
from mpi4py.util import pkl5

import tokenwire
from tokenwire import GenerationRequest, TokenVector, token_buffer

INT32_MIN, INT32_MAX = -2**31, 2**31 - 1


def batch() -> list[GenerationRequest]:
    """Requests every rank can rebuild: seeded ids of several lengths (one empty prompt, the
    int32 bounds, 40k ids), query ids on one, sampling parameters and ids on all."""
    rng = np.random.default_rng(20261202)
    prompts = [rng.integers(0, 151_936, n, dtype=np.int32) for n in (40_000, 1, 0, 4097)]
    prompts.append(np.array([INT32_MIN, -1, 0, 1, INT32_MAX], dtype=np.int32))
    reqs = [GenerationRequest(p.tolist(), {"max_tokens": 16 + i, "temperature": 0.0}, id=i)
            for i, p in enumerate(prompts)]
    reqs[0].query_token_ids = [7, 8, 9]
    return reqs


def differences(got: object, want: list[GenerationRequest]) -> list[str]:
    if not isinstance(got, list) or len(got) != len(want):
        return [f"received {type(got).__name__} of {len(got) if isinstance(got, list) else '?'}"
                f" requests, expected {len(want)}"]
    wrong = []
    for g, w in zip(got, want):
        if type(g) is not GenerationRequest:
            wrong.append(f"request {w.id}: received a {type(g).__name__}")
            continue
        ids = token_buffer(g, "prompt_token_ids")
        if not isinstance(ids, TokenVector):
            wrong.append(f"request {w.id}: the ids did not arrive as a TokenVector")
        elif np.asarray(ids).tobytes() != np.asarray(w.prompt_token_ids, np.int32).tobytes():
            wrong.append(f"request {w.id}: prompt ids differ")
        if (g.id, g.sampling_params, g.query_token_ids) != (
                w.id, w.sampling_params, w.query_token_ids):
            wrong.append(f"request {w.id}: fields differ")
    return wrong


def main() -> int:
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    want = batch()
    wrong = []
    for name, bcast in (("comm.bcast", comm.bcast), ("pkl5", pkl5.Intracomm(comm).bcast)):
        got = bcast(want if rank == 0 else None, root=0)
        wrong += [f"{name}: {w}" for w in differences(got, want)]
    line = (f"rank {rank}/{size}: {len(want)} requests " + ("ok" if not wrong else
            "WRONG: " + "; ".join(wrong)) + f" (tokenwire {tokenwire.__file__})")
    lines = comm.gather(line, root=0)     # one printer: mpiexec interleaves the ranks' output
    if rank == 0:
        print("\n".join(lines or []), flush=True)
    return 1 if comm.allreduce(len(wrong), op=MPI.SUM) else 0


if __name__ == "__main__":
    sys.exit(main())
