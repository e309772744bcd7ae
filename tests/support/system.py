"""System parts some tests need beyond what pip installs, and the one rule for them.

A test that needs one calls `require(name)`: where the part is missing, the test skips with a
reason naming the part and the package that brings it (Debian/Ubuntu, macOS). The README's test
command therefore passes on a machine with only what the README names; CI installs every part
and fails on any skip it does not expect (tests/conftest.py), so there none of these skips.
TOKENWIRE_WITHOUT=name,name (or `all`) makes `require` treat those parts as missing:
.ci/without_system_parts runs the tests that way to show they skip, and fail nowhere.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

import pytest


def cxx() -> str:
    """The C++ compiler the tests use: $CXX, else g++."""
    return os.environ.get("CXX") or "g++"


@functools.cache
def _zstd_header() -> bool:
    """Whether the C++ compiler finds zstd.h (with the run's $TOKENWIRE_CXXFLAGS)."""
    import shlex
    if shutil.which(cxx()) is None:
        return False
    flags = shlex.split(os.environ.get("TOKENWIRE_CXXFLAGS", ""))
    probe = subprocess.run([cxx(), *flags, "-E", "-x", "c++", "-"],
                           input="#include <zstd.h>\n", capture_output=True, text=True)
    return probe.returncode == 0


@functools.cache
def _namespaces() -> str | None:
    from bench.net import namespaces_usable
    return namespaces_usable()


def _mpiexec() -> str | None:
    from bench.mpi import find_mpiexec
    return find_mpiexec()


@dataclass(frozen=True)
class Part:
    what: str                       # the part, as a reason names it
    installs: str                   # what brings it
    present: Callable[[], object]   # truthy where it is there

    def reason(self, name: str) -> str:
        return f"needs {name}: {self.what} ({self.installs})"


PARTS: dict[str, Part] = {
    "g++": Part("a C++17 compiler ($CXX, else g++)",
                "Debian/Ubuntu: apt-get install g++; macOS: xcode-select --install",
                lambda: shutil.which(cxx())),
    "zstd.h": Part("libzstd's header, for the C++ codec's zstd frames",
                   "Debian/Ubuntu: apt-get install libzstd-dev; macOS: brew install zstd",
                   _zstd_header),
    "clang": Part("the clang C compiler",
                  "Debian/Ubuntu: apt-get install clang; macOS: xcode-select --install",
                  lambda: shutil.which("clang")),
    "mpiexec": Part("an MPI launcher beside this Python or on PATH",
                    "pip install '.[mpi]' brings MPICH's; Debian/Ubuntu: apt-get install mpich",
                    _mpiexec),
    "netns": Part("network namespaces: root, Linux and iproute2's ip and tc",
                  "Debian/Ubuntu: apt-get install iproute2, and run as root",
                  lambda: _namespaces() is None),
}


def hidden() -> set[str]:
    """The parts TOKENWIRE_WITHOUT says to treat as missing."""
    names = {n.strip() for n in os.environ.get("TOKENWIRE_WITHOUT", "").split(",") if n.strip()}
    if "all" in names:
        return set(PARTS)
    unknown = names - set(PARTS)
    if unknown:
        raise ValueError(f"TOKENWIRE_WITHOUT names unknown parts {sorted(unknown)}; "
                         f"known: {sorted(PARTS)}")
    return names


def have(name: str) -> bool:
    """Whether the part is here (and not hidden by TOKENWIRE_WITHOUT)."""
    return name not in hidden() and bool(PARTS[name].present())


def require(name: str) -> None:
    """Skip the calling test, naming the part and its package, where the part is missing."""
    if not have(name):
        part = PARTS[name]
        why = ""
        if name == "netns" and name not in hidden():
            why = f" [{_namespaces()}]"
        pytest.skip(part.reason(name) + why)


__all__ = ["PARTS", "cxx", "have", "hidden", "require"]
