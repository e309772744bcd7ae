"""The `tokenwire` command, run as a real subprocess: inspect. (The benchmarks, `python -m bench`,
are tests/test_bench.py.)"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import tokenwire
from support.wait import WAIT_S

# Real subprocesses, sockets and clusters: `pytest -m "not integration"` skips them.
pytestmark = pytest.mark.integration


def run(*args: str, stdin: bytes | None = None, timeout: float = 600) -> subprocess.CompletedProcess[bytes]:
    # From a neutral directory: `python -m` puts the working directory first on sys.path, and a
    # source checkout's tokenwire/ (no compiled extension) must not shadow the installed one.
    return subprocess.run([sys.executable, "-m", "tokenwire", *args], input=stdin,
                          capture_output=True, timeout=timeout, cwd=tempfile.gettempdir())


def test_help_and_unknown_command() -> None:
    r = run("--help")
    assert r.returncode == 0 and b"tokenwire inspect" in r.stdout
    assert b"python -m bench" in r.stdout                  # where the benchmarks went
    script = Path(sys.executable).with_name("tokenwire")       # the installed console script
    r = subprocess.run([str(script), "--help"], capture_output=True, timeout=WAIT_S,
                       cwd=tempfile.gettempdir())
    assert r.returncode == 0 and b"tokenwire inspect" in r.stdout
    r = run("frobnicate")
    assert r.returncode == 2 and b"unknown command 'frobnicate'" in r.stderr
    r = run()
    assert r.returncode == 2 and b"COMMAND" in r.stderr


@pytest.mark.parametrize("command", sorted(__import__("tokenwire.cli").cli.COMMANDS))
def test_every_command_has_help(command: str) -> None:
    r = run(command, "--help")
    assert r.returncode == 0, r.stderr
    assert f"tokenwire {command}".encode() in r.stdout and b"--" in r.stdout


def test_inspect_valid_frame(tmp_path: Path) -> None:
    frame = tokenwire.encode_many([list(range(100)), [7, 8]], codec="packed", checksum=True)
    path = tmp_path / "f.bin"
    path.write_bytes(frame)
    r = run("inspect", str(path))
    out = r.stdout.decode()
    assert r.returncode == 0, r.stderr
    assert "codec:     packed, 7 bits per id" in out
    assert "sequences: 2 (100, 2 ids; 102 in all)" in out
    assert "checksum:  present, verified" in out and out.rstrip().endswith("valid")
    r = run("inspect", "-", stdin=tokenwire.encode([1, 2, 3], codec="raw"))
    assert r.returncode == 0 and b"codec:     raw, 32 bits per id" in r.stdout


@pytest.mark.parametrize(
    ("mangle", "message"),
    [(lambda f: f[:-3], "truncated"),
     (lambda f: b"XXXX" + f[4:], "bad magic"),
     (lambda f: f[:20] + bytes([f[20] ^ 0xFF]) + f[21:], "checksum mismatch"),
     (lambda f: f + b"\x00", "trailing")],
)
def test_inspect_rejects_a_corrupted_frame(mangle, message: str) -> None:  # type: ignore[no-untyped-def]
    frame = tokenwire.encode(list(range(50)), codec="packed", checksum=True)
    r = run("inspect", "-", stdin=mangle(frame))
    assert r.returncode == 1
    assert b"invalid frame" in r.stderr and message.encode() in r.stderr, r.stderr


@pytest.mark.parametrize("size", ["0", "-5", "many"])
def test_inspect_refuses_a_vocabulary_size_below_1(size: str) -> None:
    """A usage error (exit 2, naming the option), not a traceback from decode_many."""
    r = run("inspect", "-", "--vocab-size", size, stdin=tokenwire.encode([1, 2, 3]))
    assert r.returncode == 2 and b"Traceback" not in r.stderr, r.stderr
    assert f"--vocab-size: must be a whole number above 0, not '{size}'".encode() in r.stderr


def test_inspect_missing_file() -> None:
    r = run("inspect", "/nonexistent/frame.bin")
    assert r.returncode == 2 and b"No such file" in r.stderr


def test_console_script_entry_point() -> None:
    from importlib.metadata import entry_points

    eps = [ep for ep in entry_points(group="console_scripts") if ep.name == "tokenwire"]
    assert [ep.value for ep in eps] == ["tokenwire.cli:main"]


def test_every_command_is_documented() -> None:
    from tokenwire import cli
    for command in cli.COMMANDS:
        assert f"  tokenwire {command} " in (cli.__doc__ or ""), command


def test_the_runtime_holds_no_benchmark_code() -> None:
    """The benchmarks live in the clone's bench/, not in the installed package."""
    from tokenwire import cli
    assert list(cli.COMMANDS) == ["inspect"]
    here = Path(tokenwire.__file__).parent
    assert not (here / "benchmarks").exists()
    assert not list(here.rglob("engine_src"))
