"""tokenwire inside a host process (a serving engine that also runs torch): importing it loads
nothing the host did not ask for, it tunes glibc's malloc only when the switch says so, and the
shared-memory channel imports on a platform without fcntl and falls back to frames there.

Each case runs in a fresh interpreter: the test process has numpy loaded and malloc settled.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tokenwire

ROOT = Path(__file__).resolve().parent.parent
GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"


def run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`code` in a fresh interpreter that imports this checkout's tokenwire, with `env` set on
    top of the environment (TOKENWIRE_MALLOC_SETTLE removed unless given)."""
    environ = {k: v for k, v in os.environ.items() if k != "TOKENWIRE_MALLOC_SETTLE"}
    environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), environ.get("PYTHONPATH", "")])
    environ.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env=environ, cwd=ROOT / "tests")


def test_the_subprocess_imports_this_checkout() -> None:
    out = run("import tokenwire; print(tokenwire.__file__)")
    assert out.stdout.strip() == tokenwire.__file__, out.stderr


# -- import side effects ------------------------------------------------------------------------


@pytest.mark.parametrize("module", ["tokenwire", "tokenwire.transport", "tokenwire.shm",
                                    "tokenwire.msgspec"])
def test_import_does_not_import_numpy(module: str) -> None:
    # numpy is ~275 ms of import time; the paths that need it import it when they run.
    if module == "tokenwire.msgspec":
        pytest.importorskip("msgspec")
    out = run(f"""
        import sys, {module}
        assert "numpy" not in sys.modules, [m for m in sys.modules if m.startswith("numpy")][:3]
    """)
    assert out.returncode == 0, out.stderr


def test_the_paths_that_use_numpy_import_it_when_they_run() -> None:
    out = run("""
        import array, pickle, sys, tokenwire

        class Req(tokenwire.TokenwireMixin):
            ids = tokenwire.TokenIds()

        req = Req()
        req.ids = array.array("h", [1, 2, 3])
        assert "numpy" not in sys.modules
        back = pickle.loads(pickle.dumps(req, protocol=5))
        assert back.ids == array.array("h", [1, 2, 3]) and "numpy" in sys.modules
    """)
    assert out.returncode == 0, out.stderr
