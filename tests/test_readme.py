"""The README's Python examples run as written."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_python_blocks_run() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "the README has no Python example"
    for i, block in enumerate(blocks):
        # Each block runs as a module of its own, so that libraries which resolve annotations
        # through sys.modules (msgspec, dataclasses) see the block's imports.
        module = types.ModuleType(f"readme_block_{i}")
        sys.modules[module.__name__] = module
        try:
            exec(compile(block, str(README), "exec"), module.__dict__)
        finally:
            del sys.modules[module.__name__]
