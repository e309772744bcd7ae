"""What the README promises a new reader: it is short, it starts with code, its set-up commands
are the ones CI runs, it says once which Pythons are tested, and its links lead somewhere.
(Its Python block runs in tests/test_docs.py, with every other doc's.)"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
TEXT = README.read_text()


def test_short_and_code_first() -> None:
    lines = TEXT.splitlines()
    assert len(lines) <= 150
    first = next(i for i, line in enumerate(lines) if line == "```python")
    assert first < 40
    example = TEXT.split("```python\n", 1)[1].split("```", 1)[0]
    # the example is the product: a request class whose ids are read as int32 at the worker
    assert "TokenIds()" in example and "token_buffer" in example and "np.int32" in example


def test_set_up_commands_are_those_ci_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    commands = re.findall(r'^(?:TEST|MAIN)_CMD="(.+)"$', ci, flags=re.M)
    assert len(commands) == 2
    for command in commands:
        assert f"```sh\n{command}\n```" in TEXT


def test_tested_pythons_said_once() -> None:
    assert len(re.findall(r"\bTested on\b", TEXT, flags=re.I)) == 1
    assert len(re.findall(r"3\.1[0-4]", TEXT)) == len(re.findall(r"3\.1[0-4]", TEXT.split(
        "Tested on", 1)[1].split("\n\n", 1)[0])) + TEXT.count("Python 3.10+")


def test_relative_links_exist() -> None:
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", TEXT)
    local = [link for link in links if "://" not in link]
    assert local
    for link in local:
        assert (ROOT / link).exists(), link
