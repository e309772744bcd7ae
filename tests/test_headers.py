"""The shipped C and C++ headers (tokenwire.get_include()) build wherever a user includes them.

* Each header alone in a translation unit compiles without a warning: a C header with gcc and
  clang as C99 and as C11, a C++ header with g++ and clang++ as C++17, all with -Wall -Wextra
  -pedantic -Werror (a header that needs another include first, or a GNU extension that
  -pedantic flags, fails here). Headers that use the CPython API get Python's include directory,
  nanobind.hpp and pybind11.hpp their library's.
* As MSVC x64 sees them (no GNU macros, MSVC's defined; tests/support/msvc_view.py), no
  GNU-only construct is left: every builtin, attribute, asm or 128-bit integer sits behind a
  guard MSVC does not take, with compat.h giving MSVC its own spelling.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sysconfig

import pytest

import tokenwire
from support import msvc_view, system

pytestmark = pytest.mark.integration

INCLUDE = pathlib.Path(tokenwire.get_include())
HEADERS = msvc_view.headers(INCLUDE)
C_HEADERS = [h.name for h in HEADERS if h.suffix == ".h"]
CXX_HEADERS = [h.name for h in HEADERS if h.suffix == ".hpp"]
WARNINGS = ["-Wall", "-Wextra", "-pedantic", "-Werror"]
# Headers that use the CPython API (and the binding library each one is for).
NEEDS_PYTHON = {"pyint.h", "python.hpp", "nanobind.hpp", "pybind11.hpp"}


#: The system part (tests/support/system.py) that brings each compiler; gcc builds the extension.
PART = {"g++": "g++", "clang": "clang", "clang++": "clang"}


def _compiler(name: str) -> str:
    if name in PART:
        system.require(PART[name])
    path = shutil.which(name)
    assert path is not None, f"{name} is not on PATH"
    return path


def _include_flags(header: str) -> list[str]:
    flags = ["-I", str(INCLUDE)]
    if header in NEEDS_PYTHON:
        flags += ["-I", sysconfig.get_paths()["include"]]
    if header == "nanobind.hpp":
        flags += ["-I", pytest.importorskip("nanobind").include_dir()]
    if header == "pybind11.hpp":
        flags += ["-I", pytest.importorskip("pybind11").get_include()]
    return flags


def _compile_alone(tmp_path: pathlib.Path, compiler: str, header: str, lang: list[str]) -> None:
    unit = tmp_path / ("unit.cpp" if header.endswith(".hpp") else "unit.c")
    unit.write_text(f"#include <tokenwire/{header}>\n")
    cmd = [_compiler(compiler), *lang, *WARNINGS, *_include_flags(header), "-fsyntax-only",
           str(unit)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr}"


@pytest.mark.parametrize("std", ["c99", "c11"])
@pytest.mark.parametrize("compiler", ["gcc", "clang"])
@pytest.mark.parametrize("header", C_HEADERS)
def test_c_header_compiles_alone(tmp_path: pathlib.Path, header: str, compiler: str,
                                 std: str) -> None:
    _compile_alone(tmp_path, compiler, header, [f"-std={std}"])


@pytest.mark.parametrize("compiler", ["g++", "clang++"])
@pytest.mark.parametrize("header", CXX_HEADERS)
def test_cpp_header_compiles_alone(tmp_path: pathlib.Path, header: str, compiler: str) -> None:
    _compile_alone(tmp_path, compiler, header, ["-std=c++17"])


@pytest.mark.parametrize("header", [h.name for h in HEADERS])
def test_msvc_view_has_no_gnu_only_construct(tmp_path: pathlib.Path, header: str) -> None:
    _compiler("g++")                     # the GNU preprocessor, for C and C++ (cc1plus)
    text = msvc_view.preprocess(INCLUDE / "tokenwire" / header, INCLUDE, tmp_path)
    assert msvc_view.gnu_only(text, INCLUDE) == []


def test_msvc_view_finds_an_unguarded_construct(tmp_path: pathlib.Path) -> None:
    """The scan itself: in a copy of the headers, an unguarded builtin and an unguarded x86
    intrinsic include are reported, the same under a GNU guard are not."""
    _compiler("g++")
    include = tmp_path / "include"
    shutil.copytree(INCLUDE / "tokenwire", include / "tokenwire")
    planted = include / "tokenwire" / "byteorder.h"
    planted.write_text(planted.read_text().replace(
        "#endif /* TOKENWIRE_BYTEORDER_H */",
        "#include <immintrin.h>\n"
        "static inline int tw_planted(int x) { return __builtin_expect(x, 0); }\n"
        "#if defined(__GNUC__)\n"
        "#include <x86intrin.h>\n"
        "static inline int tw_guarded(int x) { return __builtin_expect(x, 0); }\n"
        "#endif\n"
        "#endif /* TOKENWIRE_BYTEORDER_H */"))
    work = tmp_path / "work"
    work.mkdir()
    found = msvc_view.gnu_only(
        msvc_view.preprocess(include / "tokenwire" / "byteorder.h", include, work), include)
    assert found == ["immintrin.h: x86/ARM intrinsic header included",
                     f"byteorder.h:{_line_of(planted, 'tw_planted')}: __builtin_expect"]


def _line_of(path: pathlib.Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)
