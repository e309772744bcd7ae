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
# The directory holding the tokenwire these tests import: site-packages for an installed wheel
# (the checkout's tokenwire/ has no compiled extension then), the checkout for an in-place build.
IMPORTED_FROM = Path(tokenwire.__file__).resolve().parent.parent
GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"


def run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`code` in a fresh interpreter that imports the tokenwire under test, with `env` set on
    top of the environment (TOKENWIRE_MALLOC_SETTLE removed unless given)."""
    environ = {k: v for k, v in os.environ.items() if k != "TOKENWIRE_MALLOC_SETTLE"}
    environ["PYTHONPATH"] = os.pathsep.join([str(IMPORTED_FROM), environ.get("PYTHONPATH", "")])
    environ.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env=environ, cwd=ROOT / "tests")


def test_the_subprocess_imports_the_tokenwire_under_test() -> None:
    out = run("import tokenwire; print(tokenwire.__file__)")
    assert out.stdout.strip() == tokenwire.__file__, out.stderr


# -- import side effects -----------------------------------------------------------------------


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

        class Req(tokenwire.state._TokenwireMixin):
            ids = tokenwire.TokenIds()

        req = Req()
        req.ids = array.array("h", [1, 2, 3])
        assert "numpy" not in sys.modules
        back = pickle.loads(pickle.dumps(req, protocol=5))
        assert back.ids == array.array("h", [1, 2, 3]) and "numpy" in sys.modules
    """)
    assert out.returncode == 0, out.stderr


# -- glibc malloc settling: the switch ---------------------------------------------------------

SETTLING = """
    import sys
    from tokenwire import TokenVector
    from tokenwire._core import _malloc_settled_bytes
    from tokenwire._core import malloc_settling
    print(malloc_settling(), end=" ")
    {before}
    v = TokenVector(range(40_000))          # 160 KB: a vector that asks for settling
    print(_malloc_settled_bytes(), end=" ")
    {after}
"""


@pytest.mark.skipif(not GLIBC, reason="settling is a glibc malloc matter")
@pytest.mark.parametrize("word, on", [("1", True), ("on", True), ("0", False), ("off", False)])
def test_environment_variable_switches_settling(word: str, on: bool) -> None:
    out = run(SETTLING.format(before="", after=""), TOKENWIRE_MALLOC_SETTLE=word)
    assert out.returncode == 0, out.stderr
    enabled, settled = out.stdout.split()
    assert enabled == str(on)
    # on: 4 x 160 KB, rounded up to a power of two; off: glibc's thresholds untouched
    assert int(settled) == (1 << 20 if on else 0)


@pytest.mark.skipif(not GLIBC, reason="settling is a glibc malloc matter")
def test_settling_is_off_unless_asked_for() -> None:
    out = run(SETTLING.format(before="", after=""))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "0"]


def test_a_bad_environment_word_fails_at_import_naming_the_variable() -> None:
    out = run("import tokenwire", TOKENWIRE_MALLOC_SETTLE="maybe")
    assert out.returncode != 0
    assert "TOKENWIRE_MALLOC_SETTLE='maybe' is not a boolean" in out.stderr


@pytest.mark.skipif(not GLIBC, reason="settling is a glibc malloc matter")
def test_the_function_switches_settling_on_and_off() -> None:
    out = run(SETTLING.format(
        before="assert malloc_settling(True) is False and malloc_settling() is True",
        after="""
    assert malloc_settling(False) is True and malloc_settling() is False
    w = TokenVector(range(1_000_000))       # 4 MB: would settle for 16 MiB
    print(_malloc_settled_bytes())
    """), TOKENWIRE_MALLOC_SETTLE="0")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", str(1 << 20), str(1 << 20)]


# -- the shared-memory channel without fcntl (Windows) -----------------------------------------


def test_shm_imports_without_fcntl_and_sends_frames() -> None:
    # docs/transport.md: "Linux only; elsewhere Sender never offers a segment and every buffer
    # travels as a frame." Without fcntl no segment can be sealed: the same promise.
    pytest.importorskip("zmq")
    out = run("""
        import sys
        sys.modules["fcntl"] = None                 # `import fcntl` raises ImportError
        import zmq
        from tokenwire import TokenVector, shm
        from tokenwire.transport import recv_pyobj_oob, send_pyobj_oob
        assert "fcntl" not in sys.modules or sys.modules["fcntl"] is None
        assert shm.available() is False
        ctx = zmq.Context()
        pull = ctx.socket(zmq.PULL)
        port = pull.bind_to_random_port("tcp://127.0.0.1")
        push = ctx.socket(zmq.PUSH)
        push.connect(f"tcp://127.0.0.1:{port}")
        sender, receiver = shm.Sender(), shm.Receiver()
        ids = TokenVector(range(40_000))
        for _ in range(3):
            send_pyobj_oob(push, {"ids": ids}, channel=sender)
            assert recv_pyobj_oob(pull, channel=receiver) == {"ids": ids}
            sender._send(push, {"ids": ids})
            assert receiver._recv(pull) == {"ids": ids}
        assert sender.stats["shm"] == 0 and sender.stats["ring"] == 0, sender.stats
        assert sender.stats["frames"] == 6, sender.stats
        sender.close()
        print("ok")
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
