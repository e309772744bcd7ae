"""`python -m bench ...` as a subprocess from the clone's root, as the README runs it: for every
test module that runs a benchmark (test_bench, test_load_bench, test_mpi, test_cpp_bindings)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from support.wait import WAIT_S

ROOT = Path(__file__).resolve().parent.parent.parent   # the clone: bench/ is not installed


def run_bench(*args: str, env: dict[str, str] | None = None,
              timeout: float = WAIT_S) -> subprocess.CompletedProcess[str]:
    """`python -m bench ARGS` from the clone's root, as the README runs it."""
    return subprocess.run([sys.executable, "-m", "bench", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=env)
