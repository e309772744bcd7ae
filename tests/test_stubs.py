"""The shipped stubs match the compiled module (mypy's stubtest), and the package type-checks."""

from __future__ import annotations

import os
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import tokenwire
from support.wait import WAIT_S

HERE = Path(__file__).parent

pytest.importorskip("mypy")
pytestmark = pytest.mark.slow


def _mypy_env() -> dict[str, str]:
    """The environment in which mypy finds the tokenwire this test imports. mypy searches
    directories (the interpreter's sys.path, MYPYPATH), not import hooks: an editable install
    (`pip install -e .`) puts no directory on sys.path, setuptools' finder maps the name, and mypy
    would not see the package. Its parent directory goes in MYPYPATH then (not when it is
    site-packages: mypy refuses that there, and finds an installed package by itself)."""
    root = Path(tokenwire.__file__).resolve().parent.parent
    installed = {Path(p).resolve() for p in (*site.getsitepackages(), site.getusersitepackages(),
                                             sysconfig.get_path("purelib"),
                                             sysconfig.get_path("platlib"))}
    env = dict(os.environ)
    if root not in installed:
        env["MYPYPATH"] = os.pathsep.join(filter(None, [str(root), env.get("MYPYPATH")]))
    return env


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True,
                          cwd=HERE, env=_mypy_env(), timeout=WAIT_S)


def test_stubtest_core() -> None:
    r = _run("mypy.stubtest", "tokenwire._core", "--allowlist", str(HERE / "stubtest-allowlist.txt"))
    assert r.returncode == 0, r.stdout + r.stderr


def test_stubs_and_package_typecheck() -> None:
    r = _run("mypy", "--strict", "-p", "tokenwire")
    assert r.returncode == 0, r.stdout + r.stderr


def test_package_typechecks_without_the_optional_extras(tmp_path: Path) -> None:
    """`mypy --strict` passes when none of the extras (Ray, pyzmq, msgspec, matplotlib, ...) is
    installed: mypy reads the packages of an empty virtual environment that holds only numpy
    (the one runtime dependency), and checks tokenwire's sources with the project's config."""
    import sysconfig
    import venv

    import numpy

    env_dir = tmp_path / "bare"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             capture_output=True, text=True, check=True).stdout.strip()
    (Path(purelib) / "numpy").symlink_to(Path(numpy.__file__).parent)
    assert sysconfig.get_path("purelib") != purelib
    root = HERE.parent                                  # the source checkout's tokenwire/
    config = root / "pyproject.toml"
    r = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--config-file", str(config),
                        "--python-executable", str(python), "--cache-dir", str(tmp_path / "cache"),
                        "-p", "tokenwire"],
                       capture_output=True, text=True, cwd=root, timeout=WAIT_S)
    assert r.returncode == 0, r.stdout + r.stderr
