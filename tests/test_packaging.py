"""The package's version is written once (tokenwire/_version.py) and read from there by the
build (pyproject.toml's dynamic version) and by the installed metadata."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

import tokenwire
from support.wait import WAIT_S

ROOT = Path(__file__).resolve().parent.parent


def test_installed_metadata_version_is_the_package_version() -> None:
    # A mismatch here means the installed distribution was built from another version than the
    # tokenwire imported: reinstall (`pip install -e .`) after bumping tokenwire/_version.py.
    assert importlib.metadata.version("tokenwire") == tokenwire.__version__


def test_the_build_reads_the_version_from_the_package() -> None:
    # The setuptools the build requires (pyproject.toml's build-system; older ones warn that
    # [tool.setuptools] is beta, and they do not build tokenwire).
    pytest.importorskip("setuptools", minversion="77")
    import setuptools.config.pyprojecttoml as pyprojecttoml

    config = pyprojecttoml.read_configuration(ROOT / "pyproject.toml", expand=False)
    assert "version" not in config["project"], "a second, static version in pyproject.toml"
    assert "version" in config["project"]["dynamic"]
    expanded = pyprojecttoml.read_configuration(ROOT / "pyproject.toml", expand=True)
    assert expanded["project"]["version"] == tokenwire.__version__


# The publish job's metadata check (.ci/release_metadata.py), run as the workflow runs it, on
# distributions written here: an sdist's PKG-INFO and a wheel's METADATA.

REPO = "https://github.com/example-org/tokenwire"


def _metadata(urls: list[str]) -> str:
    lines = ["Metadata-Version: 2.4", "Name: tokenwire", f"Version: {tokenwire.__version__}"]
    return "\n".join(lines + [f"Project-URL: {u}" for u in urls]) + "\n\nThe description.\n"


def _dists(tmp_path: Path, sdist_urls: list[str], wheel_urls: list[str]) -> Path:
    import io
    import tarfile
    import zipfile

    out = tmp_path / "dist"
    out.mkdir()
    top = f"tokenwire-{tokenwire.__version__}"
    with tarfile.open(out / f"{top}.tar.gz", "w:gz") as tar:
        data = _metadata(sdist_urls).encode()
        info = tarfile.TarInfo(f"{top}/PKG-INFO")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    with zipfile.ZipFile(out / f"{top.replace('-', '_')}-cp311-cp311-linux_x86_64.whl", "w") as z:
        z.writestr(f"{top.replace('-', '_')}.dist-info/METADATA", _metadata(wheel_urls))
    return out


def _check(dist_dir: Path) -> tuple[int, str]:
    import subprocess
    import sys

    r = subprocess.run([sys.executable, str(ROOT / ".ci" / "release_metadata.py"), str(dist_dir),
                        "--repository", REPO], capture_output=True, text=True, timeout=WAIT_S)
    return r.returncode, r.stdout + r.stderr


@pytest.mark.parametrize("sdist_urls, wheel_urls, status, message", [
    ([f"Source, {REPO}", "Documentation, https://tokenwire.example.org"],
     [f"Source, {REPO}", "Documentation, https://tokenwire.example.org"], 0,
     f"2 distributions name {REPO}"),
    ([f"Issues, {REPO}/issues"], [f"Issues, {REPO}/issues"], 0, "2 distributions"),
    ([], [], 1, "no Project-URL: add [project.urls]"),
    (["Source, https://github.com/someone-else/tokenwire"],
     ["Source, https://github.com/someone-else/tokenwire"], 1, f"no Project-URL names {REPO}"),
    ([f"Source, {REPO}-fork"], [f"Source, {REPO}-fork"], 1, f"no Project-URL names {REPO}"),
    ([f"Source, {REPO}"], [f"Source, {REPO}", "Documentation, https://x.example"], 1,
     "disagree on their Project-URL lines"),
])
def test_publishing_needs_project_urls_naming_the_repository(
        tmp_path: Path, sdist_urls: list[str], wheel_urls: list[str], status: int,
        message: str) -> None:
    code, out = _check(_dists(tmp_path, sdist_urls, wheel_urls))
    assert code == status, out
    assert message in out


def test_publishing_refuses_an_empty_or_unreadable_dist_dir(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert _check(tmp_path / "empty")[0] == 2
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "tokenwire-0.1.0.tar.gz").write_bytes(b"not a tarball")
    code, out = _check(bad)
    assert code == 1 and "cannot read its metadata" in out, out


@pytest.mark.parametrize("env, opt", [
    ({}, "-O3"),
    ({"TOKENWIRE_SANITIZE": "address,undefined"}, "-O1"),
    ({"TOKENWIRE_FUZZ": "1"}, "-O1"),
    ({"TOKENWIRE_DEBUG": "1", "TOKENWIRE_SANITIZE": "address"}, "-O0"),
])
def test_build_flags(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], opt: str) -> None:
    """Release builds are -O3; sanitized ones -O1 (ASan's advice, half the compile time of the
    generated C); a debug build -O0, sanitized or not."""
    for name in ("TOKENWIRE_SANITIZE", "TOKENWIRE_FUZZ", "TOKENWIRE_DEBUG", "TOKENWIRE_NATIVE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    import runpy

    # setup.py run under another name than __main__ only defines the build (tests/test_env_flag.py)
    flags = runpy.run_path(str(ROOT / "setup.py"), run_name="tokenwire_setup")["compiler_flags"]
    compile_args, link_args = flags("unix")
    assert [a for a in compile_args if a.startswith("-O")] == [opt]
    sanitized = any(k in env for k in ("TOKENWIRE_SANITIZE", "TOKENWIRE_FUZZ"))
    assert any(a.startswith("-fsanitize=") for a in compile_args) == sanitized
    assert any(a.startswith("-fsanitize=") for a in link_args) == sanitized
