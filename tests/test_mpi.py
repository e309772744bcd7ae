"""MPI ranks, as a TP/PP executor runs them: requests broadcast from rank 0 arrive whole on every
rank (real `mpiexec`, real MPICH processes), and the MPI benchmark runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mpi4py")

from support import system  # noqa: E402
from support.bench_cli import run_bench  # noqa: E402
from support.wait import WAIT_S

RANKS = Path(__file__).resolve().parent / "support" / "mpi_ranks.py"

pytestmark = pytest.mark.integration


def mpiexec() -> str:
    from bench.mpi import find_mpiexec
    system.require("mpiexec")
    found = find_mpiexec()
    assert found is not None
    return found


def run_ranks(n: int, timeout: float = WAIT_S) -> subprocess.CompletedProcess[str]:
    """`mpiexec -n N python tests/support/mpi_ranks.py`, its process group killed if it hangs."""
    import tokenwire
    from bench.harness import run_group
    env = dict(os.environ, PYTHONPATH=str(Path(tokenwire.__file__).resolve().parent.parent))
    return run_group([mpiexec(), "-n", str(n), sys.executable, str(RANKS)], env=env,
                     timeout=timeout)


@pytest.mark.parametrize("n", [2, 3])
def test_requests_broadcast_from_rank_0_arrive_whole_on_every_rank(n: int) -> None:
    import tokenwire
    r = run_ranks(n)
    lines = sorted(ln for ln in r.stdout.splitlines() if ln.startswith("rank "))
    assert r.returncode == 0, r.stdout + r.stderr
    assert len(lines) == n, r.stdout + r.stderr
    for rank, line in enumerate(lines):
        assert line.startswith(f"rank {rank}/{n}: 5 requests ok"), line
        assert str(Path(tokenwire.__file__)) in line          # the tokenwire under test


def test_mpi_benchmark_quick(tmp_path: Path) -> None:
    """`python -m bench mpi --quick`: every row runs under mpiexec, its ids are checked on every
    rank, and the JSON holds each row's p50 and p99."""
    import json
    mpiexec()
    out_json = tmp_path / "mpi.json"
    r = run_bench("mpi", "--quick", "--iters", "4", "--json", str(out_json))
    assert r.returncode == 0, r.stdout + r.stderr
    (run,) = json.loads(out_json.read_text())["runs"]
    assert run["ranks"] == 2 and run["wrong"] == 0
    assert set(run["rows"]) == {"plain list, comm.bcast", "plain list, pkl5",
                                "tokenwire, comm.bcast", "tokenwire, pkl5"}
    for row in run["rows"].values():
        assert row["p99_ms"] >= row["p50_ms"] > 0
