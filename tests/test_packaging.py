"""The package's version is written once (tokenwire/_version.py) and read from there by the
build (pyproject.toml's dynamic version) and by the installed metadata."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

import tokenwire

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
