"""Build the tokenwire Cython extension.

Cython directives and compiler flags are set here, and only here. Environment switches (booleans
follow tokenwire's one rule, tokenwire/_envflag.py: 1/true/yes/on or 0/false/no/off, unset is
off, anything else is an error naming the variable):

  TOKENWIRE_ANNOTATE=1    write Cython's annotated HTML next to the .pyx (profiling aid)
  TOKENWIRE_LINETRACE=1   compile with line tracing (coverage / line profilers; slow)
  TOKENWIRE_SANITIZE=address,undefined
                          compile (at -O1) and link with gcc's AddressSanitizer / UBSan; run the tests with
                          LD_PRELOAD=$(gcc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0;
                          TOKENWIRE_SANITIZE=thread: ThreadSanitizer, for an interpreter built with
                          it (.ci/tsan builds one, with clang)
  TOKENWIRE_FUZZ=1        coverage for libFuzzer/atheris: -fsanitize=fuzzer-no-link (needs clang:
                          CC=clang LDSHARED="clang -shared"); combine with TOKENWIRE_SANITIZE=address
                          and see docs/fuzzing.md for how to run it
  TOKENWIRE_NATIVE=1      add -march=native (local builds only: the result is not portable)
  TOKENWIRE_DEBUG=1       -O0 -g and Cython's bounds checks back on

The flags are chosen by the compiler build_ext uses: gcc and clang (Linux, macOS, MinGW) take the
GNU-style flags, MSVC (Windows) its own; SANITIZE, FUZZ and NATIVE are for gcc/clang only.
"""

from __future__ import annotations

import glob
import importlib.util
import os
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))


def _load_flag_rule() -> Callable[[str], bool]:
    """tokenwire._envflag.env_flag, loaded by path: the package cannot be imported while it is
    being built."""
    spec = importlib.util.spec_from_file_location(
        "_tokenwire_envflag", os.path.join(HERE, "tokenwire", "_envflag.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.env_flag


_flag = _load_flag_rule()


def _sanitizers() -> list[str]:
    return [s.strip() for s in os.environ.get("TOKENWIRE_SANITIZE", "").split(",") if s.strip()]


def compiler_flags(compiler_type: str) -> tuple[list[str], list[str]]:
    """(compile args, link args) for a distutils compiler type ("unix", "mingw32", "msvc", ...)
    under the current environment switches."""
    debug = _flag("TOKENWIRE_DEBUG")
    sanitize = _sanitizers()
    if _flag("TOKENWIRE_FUZZ"):
        sanitize = ["fuzzer-no-link", *sanitize]
    if compiler_type == "msvc":
        gnu_only = [name for name, on in (("TOKENWIRE_SANITIZE", bool(_sanitizers())),
                                          ("TOKENWIRE_FUZZ", _flag("TOKENWIRE_FUZZ")),
                                          ("TOKENWIRE_NATIVE", _flag("TOKENWIRE_NATIVE"))) if on]
        if gnu_only:
            raise ValueError(f"{', '.join(gnu_only)}: gcc/clang only, not for MSVC")
        # /std:c11: the kernels use C11 (`restrict`, which MSVC's C compiler accepts only there).
        compile_args = ["/Od", "/Zi"] if debug else ["/O2"]
        return compile_args + ["/std:c11"], ["/DEBUG"] if debug else []
    # A sanitized build (SANITIZE, FUZZ) is -O1, as AddressSanitizer's documentation advises: it
    # finds what -O3 finds, and gcc compiles the generated _core.c under ASan + UBSan in about
    # half the time (the CI's sanitizer step: build ~280 s at -O3, ~135 s at -O1; its tests
    # 76 s against 91 s).
    compile_args = ["-O0", "-g"] if debug else ["-O1"] if sanitize else ["-O3"]
    compile_args += ["-std=c11", "-fno-strict-aliasing", "-Wno-unused-function"]
    link_args: list[str] = []
    if _flag("TOKENWIRE_NATIVE"):
        compile_args.append("-march=native")
    if sanitize:
        flags = ["-fsanitize=" + ",".join(sanitize), "-fno-omit-frame-pointer", "-g"]
        compile_args += flags
        link_args += flags
    return compile_args, link_args


def main() -> None:
    from Cython.Build import cythonize
    from setuptools import Extension, setup
    from setuptools.command.build_ext import build_ext

    class BuildExt(build_ext):
        """Flags for the compiler actually used (known only once build_ext has chosen it)."""

        def build_extensions(self) -> None:
            compile_args, link_args = compiler_flags(self.compiler.compiler_type)
            for ext in self.extensions:
                ext.extra_compile_args = compile_args
                ext.extra_link_args = link_args
            super().build_extensions()

    debug = _flag("TOKENWIRE_DEBUG")
    linetrace = _flag("TOKENWIRE_LINETRACE")
    macros: list[tuple[str, Any]] = []
    if linetrace:
        macros += [("CYTHON_TRACE", "1"), ("CYTHON_TRACE_NOGIL", "1")]

    directives = {
        "language_level": "3",
        # Kernels index with checked lengths; the wrappers validate before calling them.
        "boundscheck": debug,
        "wraparound": False,
        "initializedcheck": debug,
        "cdivision": True,
        "embedsignature": True,
        "linetrace": linetrace,
        # No generated pickle helpers (__reduce_cython__ / __setstate_cython__ / __pyx_unpickle_*):
        # they index untrusted state without checks. A type that pickles says how (TokenVector's
        # __reduce_ex__); every other extension type refuses with TypeError.
        "auto_pickle": False,
        # Free-threaded CPython (3.13t, 3.14t): the module runs without the GIL. Declared because
        # the shared state is made safe, not to silence the warning: the int table's slots are
        # published with one compare-and-swap, lists are read inside their critical sections,
        # settings are atomic words (tokenwire/include/tokenwire/compat.h), and the Python layer
        # publishes lazily built values once (docs/api/threads.rst; tests/test_threads.py).
        "freethreading_compatible": True,
    }

    extensions = [
        Extension(
            "tokenwire._core",
            ["tokenwire/_core.pyx"],
            define_macros=macros,
            # The C kernels live in tokenwire/include/tokenwire/ (shared with the C++ headers).
            include_dirs=["tokenwire/include"],
            # ...so a change to one of them rebuilds the extension.
            depends=sorted(glob.glob("tokenwire/include/tokenwire/*.h")),
        )
    ]

    setup(
        ext_modules=cythonize(
            extensions,
            compiler_directives=directives,
            annotate=_flag("TOKENWIRE_ANNOTATE"),
        ),
        cmdclass={"build_ext": BuildExt},
    )


# setuptools runs this file as __main__ (pip, `python -m build`, `python setup.py ...`); imported
# under another name (tests/test_env_flag.py) it only defines the rule and the flags.
if __name__ == "__main__":
    main()
