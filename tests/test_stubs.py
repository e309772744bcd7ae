"""The shipped stubs match the compiled module (mypy's stubtest), and the package type-checks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent

pytest.importorskip("mypy")
pytestmark = pytest.mark.slow


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True,
                          cwd=HERE, timeout=600)


def test_stubtest_core() -> None:
    r = _run("mypy.stubtest", "tokenwire._core", "--allowlist", str(HERE / "stubtest-allowlist.txt"))
    assert r.returncode == 0, r.stdout + r.stderr


def test_stubs_and_package_typecheck() -> None:
    r = _run("mypy", "--strict", "-p", "tokenwire")
    assert r.returncode == 0, r.stdout + r.stderr
