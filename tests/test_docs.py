"""Every ```python block of README.md and docs/*.md runs as written.

Each block runs in a fresh interpreter, in an empty directory (so that it imports the installed
tokenwire, not the clone's sources), and must import what it uses.
A block that cannot run here says so on the line before it, with the reason:
``<!-- docs-test: skip (REASON) -->``. A block marked ``<!-- docs-test: loopback -->`` shows a
proxy and a worker on one pyzmq socket: it runs after LOOPBACK, which gives it that socket
(``sock`` or ``socket``: sends leave from the proxy's end of an ipc:// pair, receives read the
worker's end), a `request` and a key in $TOKENWIRE_KEY.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.wait import WAIT_S

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: a ```python block, and the line before it (where a skip marker goes)
BLOCK = re.compile(r"(?:^([^\n]*)\n)?^```python\n(.*?)^```", re.S | re.M)
SKIP = re.compile(r"<!-- docs-test: skip \((.+)\) -->")
MARK = "<!-- docs-test: loopback -->"
LOOPBACK = """
import os, tempfile, zmq, tokenwire
os.environ["TOKENWIRE_KEY"] = "00112233445566778899aabbccddeeff"
_dir = tempfile.mkdtemp()
_proxy, _worker = zmq.Context.instance().socket(zmq.PAIR), zmq.Context.instance().socket(zmq.PAIR)
_worker.bind(f"ipc://{_dir}/s")
_proxy.connect(f"ipc://{_dir}/s")
class _Loopback:
    def __getattr__(self, name):
        return getattr(_proxy if name.startswith("send") else _worker, name)
sock = socket = _Loopback()
request = tokenwire.GenerationRequest(list(range(40_000)))
"""


def blocks() -> list[tuple[str, int, str, str | None]]:
    """(file, line, code, skip reason or None) for every python block of the docs."""
    out = []
    for path in DOCS:
        text = path.read_text()
        for match in BLOCK.finditer(text):
            line = text.count("\n", 0, match.start(2)) + 1
            before = match.group(1) or ""
            skip = SKIP.search(before)
            code = (LOOPBACK if before == MARK else "") + match.group(2)
            out.append((path.relative_to(ROOT).as_posix(), line, code,
                        skip.group(1) if skip else None))
    return out


BLOCKS = blocks()


RUNNABLE = [(doc, line, code) for doc, line, code, skip in BLOCKS if skip is None]


def test_every_block_runs_or_says_why_not() -> None:
    assert len(RUNNABLE) >= 17
    assert sum(code.startswith(LOOPBACK) for _, _, code in RUNNABLE) >= 4
    for doc, line, _, skip in BLOCKS:
        assert skip is None or len(skip.split()) >= 3, f"{doc}:{line}: say why it cannot run"
    # a marker stands only before a block: a stray one would mean nothing
    markers = sum(len(SKIP.findall(p.read_text())) for p in DOCS)
    assert markers == len(BLOCKS) - len(RUNNABLE)


@pytest.mark.integration
@pytest.mark.parametrize("doc, line, code", RUNNABLE,
                         ids=[f"{doc}:{line}" for doc, line, _ in RUNNABLE])
def test_block_runs(doc: str, line: int, code: str, tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-W", "error", "-c", code], cwd=tmp_path,
                       capture_output=True, text=True, timeout=WAIT_S)
    assert r.returncode == 0, f"{doc}:{line}\n{r.stdout}{r.stderr}"
