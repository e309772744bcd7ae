"""docs/adopting.md's runnable examples run as documented (in real subprocesses)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "adopting.md"


def _run(*args: str) -> str:
    r = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300,
                       cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_adopting_example_runs():
    out = _run("examples/adopting.py")
    assert out.strip().endswith("ok")
    for step in ("1. pickled", "2. ExecutorRequest", "2. TokenizedGenerateReqInput",
                 "3. restricted unpickler: global 'os.system' is not allowed",
                 "4. list_on_wire", "5. ExecutorRequest.prompt_token_ids: a token field holds"):
        assert step in out, out


def test_doc_names_the_examples_and_they_exist():
    text = DOC.read_text()
    named = set(re.findall(r"examples/[\w/]+\.py", text))
    assert {"examples/adopting.py", "examples/before/serving_requests.py",
            "examples/after/serving_requests.py", "examples/worker_submit.py"} <= named
    for path in named:
        assert (ROOT / path).is_file(), path


def test_doc_shows_the_exact_adoption_lines():
    """The diff in the doc is the diff between the example files (one source of truth)."""
    text = DOC.read_text()
    for line in ("+import tokenwire",
                 '+@tokenwire.token_fields("prompt_token_ids", "query_token_ids")',
                 '+@tokenwire.token_fields("input_ids")'):
        assert line in text, line
