"""The C++ engine stand-in, a nanobind extension built on demand from engine_src/, where the
benchmarks' workers end their ids, and `python -m bench cpp`, the C++ hand-off measured in it.

`Request(input_token_ids, max_tokens)` stores `std::vector<int32_t>` like TensorRT-LLM's
`tle::Request`; `RequestStock` converts with nanobind's stock vector caster, `RequestTokens` with
`tokenwire::Tokens` (tokenwire/nanobind.hpp). Built with nanobind's CMake support, cmake and
ninja from PyPI (the `bench` and `test` extras), against `tokenwire.get_include()`. The build is
cached in a directory keyed by the sources, tokenwire's headers, nanobind and the interpreter.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.machinery
import importlib.metadata
import os
import pathlib
import subprocess
import sys
import sysconfig
from types import ModuleType
from typing import Any

import numpy as np

import tokenwire
from tokenwire import GenerationRequest
from bench.data import token_stream
from bench.harness import (Figures, Method, Target, find_tool, grouped_suite_main, load_module,
                           ratio_target, stderr_progress)
from bench.harness import timed as m

SOURCE_DIR = pathlib.Path(__file__).resolve().parent / "engine_src"
MODULE = "_tokenwire_engine"


class EngineBuildError(RuntimeError):
    """The engine could not be built (missing nanobind / cmake / ninja / a C++ compiler)."""


def _tool(name: str) -> str:
    found = find_tool(name)
    if not found:
        raise EngineBuildError(f"{name} not found (pip install {name})")
    return found


def _fingerprint() -> str:
    try:
        nanobind_version = importlib.metadata.version("nanobind")
    except importlib.metadata.PackageNotFoundError:
        raise EngineBuildError(
            "nanobind is not installed (pip install '.[bench]' from the checkout)") from None
    h = hashlib.sha256()
    inc = pathlib.Path(tokenwire.get_include()) / "tokenwire"
    for path in sorted(SOURCE_DIR.iterdir()) + sorted(inc.iterdir()):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    h.update(f"{nanobind_version} {sys.version} {sysconfig.get_platform()}".encode())
    return h.hexdigest()[:16]


def build(build_root: str | os.PathLike[str] | None = None) -> pathlib.Path:
    """Build the extension (or reuse a cached build, by default in the user's cache directory)
    and return the path of the module file."""
    if build_root is None:
        cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        build_root = os.path.join(cache, "tokenwire", "engine")
    out = pathlib.Path(build_root) / _fingerprint()
    target = out / (MODULE + importlib.machinery.EXTENSION_SUFFIXES[0])
    if target.exists():
        return target
    cmake, ninja = _tool("cmake"), _tool("ninja")
    work = out / "build"
    configure = [cmake, "-S", str(SOURCE_DIR), "-B", str(work), "-G", "Ninja",
                 f"-DCMAKE_MAKE_PROGRAM={ninja}", f"-DPython_EXECUTABLE={sys.executable}",
                 "-DCMAKE_BUILD_TYPE=Release",
                 # the headers of this tokenwire, whatever a child interpreter would import
                 f"-DTOKENWIRE_INCLUDE={tokenwire.get_include()}",
                 f"-DCMAKE_LIBRARY_OUTPUT_DIRECTORY={out}"]
    out.mkdir(parents=True, exist_ok=True)
    for cmd in (configure, [cmake, "--build", str(work)]):
        # cwd: not the caller's directory, where a source checkout could shadow the package
        proc = subprocess.run(cmd, cwd=out, capture_output=True, text=True)
        if proc.returncode != 0:
            raise EngineBuildError(f"{' '.join(cmd[:2])} ... failed:\n{proc.stdout[-2000:]}"
                                   f"{proc.stderr[-2000:]}")
    if not target.exists():
        raise EngineBuildError(f"the build did not produce {target}")
    return target


def load(build_root: str | os.PathLike[str] | None = None) -> ModuleType:
    """The engine extension module, built if need be."""
    return load_module(MODULE, build(build_root))


class Engine:
    """Where a benchmark worker's ids end: `build(req, source)` is the request constructor; this
    one is the numpy stand-in (`np.array(source, int32)`: a buffer is one memcpy, a list is
    cast id by id, as nanobind's stock caster does)."""

    def build(self, req: Any, source: Any) -> Any:
        return np.array(source, dtype=np.int32)


class NanobindEngine(Engine):
    """The C++ Request of the extension at `path`: the baseline's list through nanobind's stock
    std::vector caster (engines today), tokenwire's buffer through tokenwire::Tokens."""

    def __init__(self, path: str) -> None:
        self.module = load_module(MODULE, path)

    def build(self, req: Any, source: Any) -> Any:
        cls = self.module.RequestTokens if isinstance(req, GenerationRequest) else \
            self.module.RequestStock
        return cls(source, req.sampling_params.max_tokens)


def engine_for(path: str | None) -> Engine:
    return NanobindEngine(path) if path else Engine()


def engine_option(p: argparse.ArgumentParser) -> None:
    """--engine, as bench e2e and bench load take it (`build_for` reads it)."""
    p.add_argument("--engine", choices=("numpy", "nanobind"), default="numpy",
                   help="where the worker's ids end: the numpy stand-in, or a C++ Request built "
                        "with nanobind (needs nanobind, cmake, ninja: the bench extra)")


def engine_label(path: str | None) -> str:
    """How a run's header and JSON name the engine of `build_for`'s `path`."""
    return "nanobind C++ Request" if path else "numpy stand-in"


def build_for(name: str) -> str | None:
    """`--engine NAME`'s module path (built or cached), or None -- with the reason on stderr --
    for the numpy stand-in, also when the nanobind engine cannot be built here."""
    if name != "nanobind":
        return None
    stderr_progress("building the nanobind engine stand-in (cached after the first run)")
    try:
        return str(build())
    except (EngineBuildError, OSError) as e:
        print(f"bench: cannot build the nanobind engine ({e}); falling back to the numpy "
              f"stand-in. Install the tools with: pip install '.[bench]' (nanobind, "
              f"cmake, ninja) and a C++17 compiler.", file=sys.stderr)
        return None


# --------------------------------------------------------------------------------------------
# `python -m bench cpp`

CPP_DOC = """The C++ hand-off and its targets: token ids into std::vector<int32_t> through the
nanobind engine stand-in (bench.engine), and frames decoded in C++; docs/cpp.md, "Measured",
describes the rows.
"""

BUFFER = "int32 buffer -> std::vector"
LIST_STOCK = "list[int] -> std::vector (vs stock caster)"
LIST_AS_TOKENS = "list[int] -> std::vector (vs as_tokens)"
LIST_ODD_LAST = "list[int], last item a numpy scalar -> std::vector"
ONE_ITEM = "tokenwire::to_vector([numpy scalar]) (one item's cost)"
DECODE = "packed frame -> std::vector"


def cpp_methods(n: int) -> list[Method]:
    eng = load()
    ids = token_stream(n)
    lst = ids.tolist()
    odd_last = lst[:-1] + [ids[-1]]         # the same ids, the last one an np.int32 scalar
    tv = tokenwire.as_tokens(ids)
    packed = tokenwire.encode(tv, codec="packed")

    return [
        m(BUFFER, "memcpy(TokenVector bytes)", lambda: eng.memcpy_len(tv), True),
        m(BUFFER, "tokenwire::to_vector(TokenVector)", lambda: eng.to_vector_len(tv)),
        m(BUFFER, "tokenwire::to_vector(ndarray int32)", lambda: eng.to_vector_len(ids)),
        m(LIST_STOCK, "nanobind stock caster(list)", lambda: eng.stock_len(lst), True),
        m(LIST_STOCK, "tokenwire::to_vector(list)", lambda: eng.to_vector_len(lst)),
        m(LIST_AS_TOKENS, "tokenwire.as_tokens(list)", lambda: tokenwire.as_tokens(lst), True),
        m(LIST_AS_TOKENS, "tokenwire::to_vector(list) ", lambda: eng.to_vector_len(lst)),
        m(LIST_ODD_LAST, "tokenwire::to_vector(list of ints)", lambda: eng.to_vector_len(lst),
          True),
        m(LIST_ODD_LAST, "tokenwire::to_vector(list, numpy scalar last)",
          lambda: eng.to_vector_len(odd_last)),
        m(LIST_ODD_LAST, ONE_ITEM, lambda: eng.to_vector_len(odd_last[-1:])),
        m(DECODE, "memcpy(decoded bytes)", lambda: eng.memcpy_len(tv), True),
        m(DECODE, "tokenwire::decode(packed) [C++]", lambda: eng.decode_len(packed)),
        m(DECODE, "tokenwire.decode(packed) [Python]", lambda: tokenwire.decode(packed)),
    ]


def _odd_last_excess(f: Figures) -> float:
    """(odd-last list - (all-ints list + one-item list)) / all-ints list, at the target ISL."""
    all_ints = f.row("tokenwire::to_vector(list of ints)", group=LIST_ODD_LAST).total_us()
    odd = f.row("tokenwire::to_vector(list, numpy scalar last)", group=LIST_ODD_LAST).total_us()
    one = f.row(ONE_ITEM, group=LIST_ODD_LAST).total_us()
    return (odd - all_ints - one) / all_ints


TARGETS: list[Target] = [
    ratio_target("to_vector(TokenVector) <= 1.5x a plain memcpy", BUFFER,
                 "tokenwire::to_vector(TokenVector)", lambda ratio: 1 / ratio <= 1.5),
    ratio_target("to_vector(list) >= 5x faster than nanobind's stock caster", LIST_STOCK,
                 "tokenwire::to_vector(list)", 5),
    ratio_target("to_vector(list) within 1.2x of as_tokens(list)", LIST_AS_TOKENS,
                 "tokenwire::to_vector(list) ", lambda ratio: 1 / ratio <= 1.2),
    Target("an odd last item costs that item: within the all-ints list + a one-item list, "
           "+ 1 % (the rows' spread)", _odd_last_excess, lambda excess: excess <= 0.01,
           lambda f, excess: f"{excess:+.1%} of the all-ints list's time"),
    ratio_target("C++ decode of a packed frame <= 3x memcpy", DECODE,
                 "tokenwire::decode(packed) [C++]", lambda ratio: 1 / ratio <= 3.0),
]


def main(argv: list[str] | None = None) -> int:
    return grouped_suite_main(argv, suite="cpp", doc=CPP_DOC, methods_for=cpp_methods,
                              targets=TARGETS,
                              note="; one Python call into the nanobind engine per row")
