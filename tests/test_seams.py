"""The seams between tokenwire's layers: the out-of-band layer (tokenwire._oob) is
transport-neutral and is used through its declared names only; a new transport needs nothing
else (examples/asyncio_stream.py is one, run here)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from support.wait import WAIT_S

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "tokenwire"
LAYERS = ("tokenwire._oob", "tokenwire.transport")


def _imports(path: Path) -> list:
    """(module, name) for each ``from tokenwire... import name`` in `path`."""
    tree = ast.parse(path.read_text(), str(path))
    return [(node.module, alias.name) for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module
            and node.module.startswith("tokenwire") for alias in node.names]


def test_the_layers_are_used_through_their_declared_names() -> None:
    """No module reaches into the out-of-band layer or the pyzmq glue for a private name: the
    shared-memory channel and tokenwire.msgspec use what those layers declare."""
    private = [(path.name, module, name) for path in sorted(PACKAGE.glob("*.py"))
               for module, name in _imports(path)
               if module in LAYERS and name.startswith("_")]
    assert private == []


def test_the_out_of_band_layer_imports_no_transport() -> None:
    """tokenwire._oob depends on nothing of tokenwire but its errors, the check every received
    pickle passes before it is loaded and the scope it is loaded in (no transport, no channel),
    so any transport can be built on it."""
    assert set(_imports(PACKAGE / "_oob.py")) - {("tokenwire.unpickle", "check_pickle"),
                                                  ("tokenwire.unpickle", "load_scope")} == {
        (module, name) for module, name in _imports(PACKAGE / "_oob.py")
        if module == "tokenwire.errors"}
    tree = ast.parse((PACKAGE / "_oob.py").read_text())
    plain = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
             for alias in node.names}
    assert not plain & {"zmq", "msgspec", "numpy", "ray"}


def test_an_asyncio_stream_transport_built_on_the_layer() -> None:
    """examples/asyncio_stream.py: a TCP transport of its own, with nothing but dumps_oob and
    loads_oob: the ids arrive, a peer without the key and a frame count beyond the reader's
    limit are refused."""
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "asyncio_stream.py"),
                        "--isl", "50000"], capture_output=True, text=True, timeout=WAIT_S)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "received 50000 ids, equal: True; answer sum ok: True",
        "wrong key: AuthenticationError",
        "too many frames: a message of 1073741824 frames (this reader takes 1 to 64)",
    ], r.stdout
