"""Build the tokenwire Cython extension.

Cython directives and compiler flags are set here, and only here. Environment switches:

  TOKENWIRE_ANNOTATE=1    write Cython's annotated HTML next to the .pyx (profiling aid)
  TOKENWIRE_LINETRACE=1   compile with line tracing (coverage / line profilers; slow)
  TOKENWIRE_SANITIZE=address,undefined
                          compile and link with gcc's AddressSanitizer / UBSan; run the tests with
                          LD_PRELOAD=$(gcc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0
  TOKENWIRE_FUZZ=1        coverage for libFuzzer/atheris: -fsanitize=fuzzer-no-link (needs clang:
                          CC=clang LDSHARED="clang -shared"); combine with TOKENWIRE_SANITIZE=address
                          and see docs/fuzzing.md for how to run it
  TOKENWIRE_NATIVE=1      add -march=native (local builds only: the result is not portable)
  TOKENWIRE_DEBUG=1       -O0 -g and Cython's bounds checks back on
"""

import glob
import os

from Cython.Build import cythonize
from setuptools import Extension, setup


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


debug = _flag("TOKENWIRE_DEBUG")
linetrace = _flag("TOKENWIRE_LINETRACE")
sanitize = [s.strip() for s in os.environ.get("TOKENWIRE_SANITIZE", "").split(",") if s.strip()]

compile_args = ["-O0", "-g"] if debug else ["-O3"]
compile_args += ["-std=c11", "-fno-strict-aliasing", "-Wno-unused-function"]
link_args = []
macros = []
if _flag("TOKENWIRE_NATIVE"):
    compile_args.append("-march=native")
if _flag("TOKENWIRE_FUZZ"):
    sanitize = ["fuzzer-no-link", *sanitize]
if sanitize:
    flags = ["-fsanitize=" + ",".join(sanitize), "-fno-omit-frame-pointer", "-g"]
    compile_args += flags
    link_args += flags
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
}

extensions = [
    Extension(
        "tokenwire._core",
        ["tokenwire/_core.pyx"],
        extra_compile_args=compile_args,
        extra_link_args=link_args,
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
)
