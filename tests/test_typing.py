"""The recommended field line type-checks: `ids: List[int] = TokenIds()` passes `mypy --strict`
and pyright (tests/typecheck/fields_ok.py), while wrong uses of the field are still reported on
the very lines that make them (tests/typecheck/fields_bad.py, each marked `# error`)."""

from __future__ import annotations

import os
import re
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest
from support.wait import WAIT_S

ROOT = Path(__file__).parent.parent           # the checkout: its tokenwire/ is what is checked
CASES = Path(__file__).parent / "typecheck"

pytest.importorskip("mypy")
pytest.importorskip("pyright")                # the test extra installs both

Checker = Callable[[Path], "tuple[int, set[int], str]"]


def _expected_lines(path: Path) -> set[int]:
    text = path.read_text().splitlines()
    return {n for n, line in enumerate(text, 1) if "  # error: " in line}


def _mypy(path: Path) -> tuple[int, set[int], str]:
    r = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(path)],
                       capture_output=True, text=True, cwd=ROOT, timeout=WAIT_S)
    lines = {int(m) for m in re.findall(r"\.py:(\d+): error", r.stdout, re.M)}
    return r.returncode, lines, r.stdout + r.stderr


def _pyright(path: Path) -> tuple[int, set[int], str]:
    r = subprocess.run([sys.executable, "-m", "pyright", "--pythonpath", sys.executable,
                        str(path)], capture_output=True, text=True, cwd=ROOT, timeout=WAIT_S,
                       env={**os.environ, "PYRIGHT_PYTHON_IGNORE_WARNINGS": "1"})
    lines = {int(m) for m in re.findall(r"\.py:(\d+):\d+ - error", r.stdout)}
    return r.returncode, lines, r.stdout + r.stderr


@pytest.mark.parametrize("checker", [_mypy, _pyright], ids=["mypy", "pyright"])
def test_the_recommended_field_lines_type_check(checker: Checker) -> None:
    code, lines, out = checker(CASES / "fields_ok.py")
    assert code == 0 and not lines, out


@pytest.mark.parametrize("checker", [_mypy, _pyright], ids=["mypy", "pyright"])
def test_wrong_uses_are_reported(checker: Checker) -> None:
    path = CASES / "fields_bad.py"
    code, lines, out = checker(path)
    assert code != 0 and lines == _expected_lines(path) and len(lines) == 5, out


def test_the_checked_lines_run() -> None:
    """The file the checkers accept is also code that works."""
    runpy.run_path(str(CASES / "fields_ok.py"))
