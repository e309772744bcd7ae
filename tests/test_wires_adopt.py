"""docs/adopting.md, section 9: each stack's change for reading its own wire is a block of
runnable code with its assertions; every block runs here, so the page cannot drift from what
tokenwire.wires does."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("msgspec")
pytest.importorskip("numpy")

ADOPTING = Path(__file__).resolve().parent.parent / "docs" / "adopting.md"


def _blocks() -> list[str]:
    text = ADOPTING.read_text()
    section = text[text.index("## 9. Reading the stacks' own wires"):]
    nxt = section.find("\n## ", 4)
    section = section if nxt < 0 else section[:nxt]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_the_section_has_a_block_per_stack() -> None:
    assert len(_blocks()) == 7


@pytest.mark.parametrize("index", range(7))
def test_block_runs(index: int) -> None:
    block = _blocks()[index]
    changed = [line for line in block.splitlines() if "# changed" in line]
    assert len(changed) <= 3, changed             # each stack changes at most 3 lines
    assert changed or "wires.write" in block      # every receiver's block marks its change
    code = compile(block, f"docs/adopting.md block {index}", "exec", dont_inherit=True)
    exec(code, {"__name__": "adopting"})
